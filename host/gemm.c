/*
 * gemm.c — matrix multiply primitives (C = A x B, or C += A x B) for f32,
 * bf16, f16, i8 and i32 operands: the `dot` of generated kernels.
 *
 * The structure is GotoBLAS/BLIS's. A register-blocked micro-kernel
 * computes an MR x NR tile of C from a packed sliver of A (MR rows x kc, each
 * k's MR values adjacent) and a packed panel of B (kc x NR, each k's NR
 * values adjacent), loading the tile, doing kc rank-1 updates in registers,
 * and storing it. Around it, cache blocking:
 *
 *   for jc over N by NC
 *     for pc over K by KC
 *       pack B[pc.., jc..]           B block (kc x NC), stays in L2
 *       for ic over M by MC
 *         pack A[ic.., pc..]         A block (MC x kc): MC/MR slivers
 *         for ir over MC by MR       one A sliver (MR x kc), stays in L1
 *           for jr over NC by NR     micro-kernel on C[ic+ir.., jc+jr..],
 *                                    B panels streaming from L2
 *
 * The vector dimension is NR, along C's rows (C is row-major), so the
 * micro-kernel loads and stores whole vectors of C; A values are broadcast.
 * A is packed N/NC times and B once; packing whole blocks (not one sliver at
 * a time) reads the source in long runs, which matters when a transposed
 * operand's rows are far apart.
 *
 * Numerics (prims.h): each C element has one accumulator, products added in
 * ascending k with fused multiply-add. The micro-kernel keeps one register
 * lane per C element and walks k in order; KC blocking stores the tile after
 * one K block and reloads it for the next, which continues the same FMA
 * chain, so every instruction set gives the same bits as the portable C loop
 * (a naive `acc = fmaf(a, b, acc)` triple loop). bf16 and f16 become f32,
 * and i8 becomes i32, while packing (exact conversions), so the narrow types
 * reuse the f32 and i32 micro-kernels. Integer sums wrap modulo 2^32
 * (unsigned arithmetic in C, vpmulld/vpaddd in SIMD).
 *
 * Three implementations, chosen at run time: AVX-512F (14 x 32 micro-tile),
 * AVX2+FMA (6 x 16) and portable C (4 x 16); both SIMD paths pack with AVX2.
 * The SIMD functions carry __attribute__((target)), so this file builds with
 * the project's generic flags and runs on any x86-64; on other
 * architectures only the portable path is compiled.
 *
 * On AVX-512, a row-major f32 A (k contiguous) is packed by rows instead:
 * each sliver row copied whole, rows KC floats apart, the kernel's
 * broadcasts at constant distances from one pointer; the transpose into
 * k-major slivers cost up to a tenth of a product with N = 128 (A is packed
 * on every call).
 *
 * Edge tiles (M or N not a multiple of the micro-tile) run the same k loop:
 * with masked loads and stores of C on AVX-512 f32, else on a copy of the
 * tile. Packed operands are zero-padded to whole panels.
 *
 * Packing buffers are the calling thread's own (pack_buffer: kept from
 * call to call; from the stack for small problems, or, should allocation
 * fail, with smaller blocks), so the functions are reentrant across
 * threads: the other global state is the ISA choice, an atomic pointer set
 * once, and the key of the threads' buffers, made once.
 */
#include "host/gemm.h"

#include <math.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TPK_GEMM_X86 1
#include <immintrin.h>
#else
#define TPK_GEMM_X86 0
#endif

/* ---- element conversions (exact) ---------------------------------------- */

static inline float bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN with its payload */
    return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp != 0) /* normal: rebias 15 -> 127 */
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
  /* zero or subnormal: man * 2^-24, exact in f32 (a normal number there) */
  float v = (float)man * 0x1p-24f;
  return sign ? -v : v;
}

static inline int32_t u32_to_i32(uint32_t u) {
  int32_t i;
  memcpy(&i, &u, sizeof i);
  return i;
}

/* ---- packing ------------------------------------------------------------ */

/* Pack n columns of width-major source into ceil(n/w) panels for the
 * micro-kernel: panel p (at dst + p*kc*w) holds dst[k*w + t] = element
 * (p*w + t, k) converted, zero where p*w + t >= n (results there are
 * dropped). Element (t, k) is at src[t*s_w + k*s_k].
 *
 * The loops follow the source: when the width is contiguous (s_w == 1) each
 * source row segment is read once, front to back, and scattered into the
 * panels; when k is contiguous (s_k == 1, a transpose) 8 source rows are
 * walked together so each k writes 8 adjacent values and the 8 rows' cache
 * lines stay in L1 (rows ld apart often share a cache set: more at once
 * would evict each other). */
typedef void (*PackFn)(void *dst, int64_t w, const void *src, int64_t s_w, int64_t s_k, int64_t n, int64_t kc);

#define DEFINE_PACK(NAME, SRC_T, DST_T, CONV)                                                                  \
  static void NAME(void *dstv, int64_t w, const void *srcv, int64_t s_w, int64_t s_k, int64_t n, int64_t kc) { \
    DST_T *restrict dst = dstv;                                                                                \
    const SRC_T *src = srcv;                                                                                   \
    int64_t panels = (n + w - 1) / w;                                                                          \
    if (s_w == 1) {                                                                                            \
      for (int64_t k = 0; k < kc; k++) {                                                                       \
        const SRC_T *s = src + k * s_k;                                                                        \
        for (int64_t p = 0; p < panels; p++) {                                                                 \
          DST_T *d = dst + (p * kc + k) * w;                                                                   \
          int64_t nv = n - p * w < w ? n - p * w : w;                                                          \
          for (int64_t t = 0; t < nv; t++) d[t] = CONV(s[p * w + t]);                                          \
          for (int64_t t = nv; t < w; t++) d[t] = 0;                                                           \
        }                                                                                                      \
      }                                                                                                        \
      return;                                                                                                  \
    }                                                                                                          \
    for (int64_t p = 0; p < panels; p++) {                                                                     \
      DST_T *d = dst + p * kc * w;                                                                             \
      int64_t nv = n - p * w < w ? n - p * w : w;                                                              \
      int64_t t0 = 0;                                                                                          \
      for (; t0 + 8 <= nv; t0 += 8) {                                                                          \
        const SRC_T *s = src + (p * w + t0) * s_w;                                                             \
        for (int64_t k = 0; k < kc; k++)                                                                       \
          for (int64_t t = 0; t < 8; t++) d[k * w + t0 + t] = CONV(s[t * s_w + k * s_k]);                      \
      }                                                                                                        \
      for (int64_t k = 0; k < kc; k++) {                                                                       \
        const SRC_T *s = src + (p * w) * s_w + k * s_k;                                                        \
        for (int64_t t = t0; t < nv; t++) d[k * w + t] = CONV(s[t * s_w]);                                     \
        for (int64_t t = nv; t < w; t++) d[k * w + t] = 0;                                                     \
      }                                                                                                        \
    }                                                                                                          \
  }

#define CONV_SAME(x) (x)
#define CONV_I8(x) ((int32_t)(x))
/* f32 and i32 are both copied as bits */
DEFINE_PACK(pack_b32, uint32_t, uint32_t, CONV_SAME)
DEFINE_PACK(pack_bf16, uint16_t, float, bf16_to_f32)
DEFINE_PACK(pack_f16, uint16_t, float, f16_to_f32)
DEFINE_PACK(pack_i8, int8_t, int32_t, CONV_I8)

/* ---- the driver: blocking around a micro-kernel --------------------------- */

/* C tile (MR x NR at c, row stride ldc) = (load_c ? tile : 0) + the kc
 * rank-1 updates of packed a (kc x MR) and b (kc x NR). Elements are 4 bytes
 * (float, or int32_t for the integer kernels). */
typedef void (*KernelFn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int load_c);
/* The same for an edge tile: only C's first mv rows and nv columns exist. */
typedef void (*EdgeFn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int load_c, int64_t mv,
                       int64_t nv);
/* Pack a block of a row-major f32 source (mc x kc, rows ld apart) by rows
 * for the f32_rows kernels: row i at dst + i*stride floats; the last
 * sliver's missing rows (up to a multiple of mr) zero, since an edge kernel
 * may compute one of them (never stored). */
/* A full C tile from a transposed f32 A read where it lies (element (i, k)
 * at a[k*lda + i]) and a packed panel of B. */
typedef void (*DirectFn)(int64_t kc, const float *a, int64_t lda, const void *b, void *c, int64_t ldc, int load_c);
typedef void (*PackRowsFn)(float *dst, const float *src, int64_t ld, int64_t mc, int64_t kc, int64_t mr, int64_t stride);

/* One instruction set's micro-kernels and blocking. */
typedef struct Shape {
  int64_t mr, nr; /* micro-tile: rows of A per sliver, columns of B per panel */
  int64_t kc;     /* K block: an A sliver (MR x KC) stays in L1 across the jr loop */
  int64_t mc;     /* M block (a multiple of MR): the packed A block (MC x KC) */
  int64_t nc;     /* N block: the packed B block (KC x NC) stays in L2 across the ir loop */
  KernelFn f32, i32;
  EdgeFn f32_edge, i32_edge; /* or NULL: edge tiles then run the kernel on a copy */
  /* Or NULL: f32 kernels reading A packed by rows (element (i, k) of a
   * sliver at a[i*kc + k], kc the Shape's, whatever the block's K): for a
   * row-major A, packing is then a copy of rows, not a transpose. */
  KernelFn f32_rows;
  EdgeFn f32_rows_edge;
  PackRowsFn pack_rows;
  DirectFn f32_direct; /* or NULL */
} Shape;

enum { MAX_MR = 14, MAX_NR = 32, STACK_BYTES = 16384 };

/* An operand as a strided matrix: element (r, c) at base + (r*rs + c*cs)*esize. */
typedef struct Operand {
  const char *base;
  int64_t esize, rs, cs;
  PackFn pack;
} Operand;

static const void *at(const Operand *o, int64_t r, int64_t c) { return o->base + (r * o->rs + c * o->cs) * o->esize; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Each thread's packing buffer, kept from call to call (at most ~640 KB:
 * the largest blocks of A and B) and freed when the thread exits. A buffer
 * allocated and freed per call came back from the C library as fresh pages
 * whenever it had trimmed its heap, and faulted again: 0-45 faults in a
 * steady step of the transformer block. NULL when out of memory. */
typedef struct PackBuffer {
  void *bytes;
  size_t size;
} PackBuffer;

static pthread_key_t pack_key;
static bool pack_key_made;

static void pack_buffer_free(void *p) {
  PackBuffer *b = p;
  free(b->bytes);
  free(b);
}

static void make_pack_key(void) { pack_key_made = pthread_key_create(&pack_key, pack_buffer_free) == 0; }

static unsigned char *pack_buffer(size_t size) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_pack_key);
  if (!pack_key_made)
    return NULL;
  PackBuffer *b = pthread_getspecific(pack_key);
  if (!b) {
    if (!(b = calloc(1, sizeof *b)))
      return NULL;
    if (pthread_setspecific(pack_key, b) != 0) {
      free(b);
      return NULL;
    }
  }
  if (b->size < size) {
    void *bigger = aligned_alloc(64, size);
    if (!bigger)
      return NULL;
    free(b->bytes);
    b->bytes = bigger;
    b->size = size;
  }
  return b->bytes;
}

/* C (4-byte elements) = (accumulate ? C : 0) + A x B, with A M x K and B K x N. */
/* b_packed, when not NULL, is B packed by pack_whole_b (b is then unused):
 * only A is packed here. */
static void drive(const Shape *sh, KernelFn kern, EdgeFn edge, int64_t M, int64_t N, int64_t K, const Operand *a,
                  const Operand *b, const unsigned char *b_packed, char *C, int64_t ldc, int accumulate) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    if (!accumulate) /* all-zero bits are 0.0f and 0 */
      for (int64_t i = 0; i < M; i++) memset(C + i * ldc * 4, 0, (size_t)N * 4);
    return;
  }
  const int64_t mr = sh->mr, nr = sh->nr;
  int64_t kc_max = min64(K, sh->kc), mc_max = min64(round_up(M, mr), sh->mc), nc_max = min64(round_up(N, nr), sh->nc);
  /* a row-major f32 A is packed by rows (a copy) where the ISA can read that */
  bool rows = sh->f32_rows && kern == sh->f32 && a->cs == 1 && a->esize == 4;
  int64_t a_stride = rows ? sh->kc : kc_max; /* floats from one row (or k) of a sliver to the next */
  int64_t a_bytes = round_up(mc_max * a_stride * 4, 64), b_bytes = b_packed ? 0 : kc_max * nc_max * 4;
  alignas(64) unsigned char stack[STACK_BYTES];
  unsigned char *buf = stack;
  if (a_bytes + b_bytes > STACK_BYTES) {
    unsigned char *own = pack_buffer((size_t)round_up(a_bytes + b_bytes, 64));
    if (own) {
      buf = own;
    } else if (b_packed) { /* packed B fixes KC and NC: one A sliver (at most 14 x 256) fits */
      mc_max = mr;
      rows = false;
      a_stride = kc_max;
      a_bytes = round_up(mr * kc_max * 4, 64);
    } else { /* no memory: smaller blocks that fit the stack buffer; same results */
      kc_max = (STACK_BYTES - 64) / (4 * (mr + nr));
      mc_max = mr;
      nc_max = nr;
      rows = false;
      a_stride = kc_max;
      a_bytes = round_up(mr * kc_max * 4, 64);
    }
  }
  unsigned char *a_buf = buf, *b_buf = buf + a_bytes;
  if (rows) {
    kern = sh->f32_rows;
    edge = sh->f32_rows_edge;
  }
  const unsigned char *b_next = b_packed; /* the packed blocks, in the loops' order */

  for (int64_t jc = 0; jc < N; jc += nc_max) {
    int64_t nc = min64(nc_max, N - jc);
    for (int64_t pc = 0; pc < K; pc += kc_max) {
      int64_t kc = min64(kc_max, K - pc);
      const unsigned char *b_block = b_buf;
      if (b_packed) {
        b_block = b_next;
        b_next += kc * round_up(nc, nr) * 4;
      } else {
        b->pack(b_buf, nr, at(b, pc, jc), b->cs, b->rs, nc, kc);
      }
      /* after the first K block, the tile carries the accumulator over */
      int load = accumulate || pc > 0;
      for (int64_t ic = 0; ic < M; ic += mc_max) {
        int64_t mc = min64(mc_max, M - ic);
        /* A transposed f32 A has each k's sliver values adjacent already: full
         * slivers read it in place when few panels reuse it (packing it
         * cost a tenth of a product at N = 128; its lines, ld apart, share
         * few cache sets, so reuse by many panels comes from L2). */
        bool direct = sh->f32_direct && kern == sh->f32 && a->esize == 4 && a->rs == 1 && a->cs != 1 &&
                      nc % nr == 0 && nc <= 8 * nr;
        int64_t full = direct ? mc / mr * mr : 0;
        if (direct) {
          if (full < mc) a->pack(a_buf + full * kc * 4, mr, at(a, ic + full, pc), a->rs, a->cs, mc - full, kc);
        } else if (rows)
          sh->pack_rows((float *)a_buf, at(a, ic, pc), a->rs, mc, kc, mr, a_stride);
        else
          a->pack(a_buf, mr, at(a, ic, pc), a->rs, a->cs, mc, kc);
        /* Slivers of A outer, panels of B inner (B's block stays in L2);
         * or, when B was packed beforehand and M is one block, panels
         * outer: a packed block comes from memory, each panel once, and
         * every sliver of A (in L2) runs on it from L1. Each C tile sees
         * the same products either way. */
        int64_t slivers = (mc + mr - 1) / mr, panels = (nc + nr - 1) / nr;
        bool panels_outer = b_packed && M <= mc_max;
        for (int64_t t = 0; t < slivers * panels; t++) {
          int64_t ir = (panels_outer ? t % slivers : t / panels) * mr;
          int64_t jr = (panels_outer ? t / slivers : t % panels) * nr;
          int64_t mv = min64(mr, mc - ir);
          const unsigned char *ap = a_buf + ir * (rows ? a_stride : kc) * 4;
          {
            int64_t nv = min64(nr, nc - jr);
            char *c = C + ((ic + ir) * ldc + jc + jr) * 4;
            const unsigned char *bp = b_block + jr * kc * 4;
            if (ir < full) {
              sh->f32_direct(kc, at(a, ic + ir, pc), a->cs, bp, c, ldc, load);
              continue;
            }
            if (mv == mr && nv == nr) {
              kern(kc, ap, bp, c, ldc, load);
              continue;
            }
            if (edge) {
              edge(kc, ap, bp, c, ldc, load, mv, nv);
              continue;
            }
            /* an edge tile: run the full-size kernel on a copy */
            alignas(64) char tmp[MAX_MR * MAX_NR * 4];
            memset(tmp, 0, sizeof tmp);
            if (load)
              for (int64_t i = 0; i < mv; i++) memcpy(tmp + i * nr * 4, c + i * ldc * 4, (size_t)nv * 4);
            kern(kc, ap, bp, tmp, nr, load);
            for (int64_t i = 0; i < mv; i++) memcpy(c + i * ldc * 4, tmp + i * nr * 4, (size_t)nv * 4);
          }
        }
      }
    }
  }
}

/* All of B packed as drive packs it, block after block in drive's loop
 * order (jc, then pc): K x round_up(N, nr) elements of 4 bytes, at most
 * TPK_GEMM_PACKED_BYTES(K, N) since nr divides 32. */
static void pack_whole_b(const Shape *sh, int64_t N, int64_t K, const Operand *b, unsigned char *dst) {
  if (N <= 0 || K <= 0) return;
  const int64_t nr = sh->nr;
  int64_t kc_max = min64(K, sh->kc), nc_max = min64(round_up(N, nr), sh->nc);
  for (int64_t jc = 0; jc < N; jc += nc_max) {
    int64_t nc = min64(nc_max, N - jc);
    for (int64_t pc = 0; pc < K; pc += kc_max) {
      int64_t kc = min64(kc_max, K - pc);
      b->pack(dst, nr, at(b, pc, jc), b->cs, b->rs, nc, kc);
      dst += kc * round_up(nc, nr) * 4;
    }
  }
}

/* The operand descriptions for prims.h's layouts. A is M x K: (i, k) at
 * A[i*lda + k], or A[k*lda + i] when transposed; B is K x N likewise. */
static Operand operand(const void *p, int64_t ld, int trans, int64_t esize, PackFn pack) {
  Operand o = {p, esize, trans ? 1 : ld, trans ? ld : 1, pack};
  return o;
}

/* One instruction set's five entry points, from its Shape and its packing
 * functions (4-byte elements, bf16, f16, i8). */
#define DEFINE_GEMMS(ISA, SH, PACK32, PACK_BF16, PACK_F16, PACK_I8)                                        \
  static void gemm_f32_##ISA(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans,        \
                             const float *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int acc) {       \
    Operand a = operand(A, lda, a_trans, 4, PACK32), b = operand(B, ldb, b_trans, 4, PACK32);                 \
    drive(&SH, SH.f32, SH.f32_edge, M, N, K, &a, &b, NULL, (char *)C, ldc, acc);                                    \
  }                                                                                                            \
  static void gemm_bf16_##ISA(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans,    \
                              const uint16_t *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int acc) {   \
    Operand a = operand(A, lda, a_trans, 2, PACK_BF16), b = operand(B, ldb, b_trans, 2, PACK_BF16);           \
    drive(&SH, SH.f32, SH.f32_edge, M, N, K, &a, &b, NULL, (char *)C, ldc, acc);                                    \
  }                                                                                                            \
  static void gemm_f16_##ISA(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans,     \
                             const uint16_t *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int acc) {    \
    Operand a = operand(A, lda, a_trans, 2, PACK_F16), b = operand(B, ldb, b_trans, 2, PACK_F16);             \
    drive(&SH, SH.f32, SH.f32_edge, M, N, K, &a, &b, NULL, (char *)C, ldc, acc);                                    \
  }                                                                                                            \
  static void gemm_i8_##ISA(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, int a_trans,        \
                            const int8_t *B, int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int acc) {     \
    Operand a = operand(A, lda, a_trans, 1, PACK_I8), b = operand(B, ldb, b_trans, 1, PACK_I8);               \
    drive(&SH, SH.i32, SH.i32_edge, M, N, K, &a, &b, NULL, (char *)C, ldc, acc);                                    \
  }                                                                                                            \
  static void gemm_i32_##ISA(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda, int a_trans,      \
                             const int32_t *B, int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int acc) {   \
    Operand a = operand(A, lda, a_trans, 4, PACK32), b = operand(B, ldb, b_trans, 4, PACK32);                 \
    drive(&SH, SH.i32, SH.i32_edge, M, N, K, &a, &b, NULL, (char *)C, ldc, acc);                                    \
  }                                                                                                            \
  /* an operand of element type dt (TPK_PRIM_*) with its packing function */                               \
  static Operand operand_##ISA(int dt, const void *p, int64_t ld, int trans) {                               \
    switch (dt) {                                                                                            \
    case TPK_PRIM_BF16: return operand(p, ld, trans, 2, PACK_BF16);                                          \
    case TPK_PRIM_F16: return operand(p, ld, trans, 2, PACK_F16);                                            \
    case TPK_PRIM_I8: return operand(p, ld, trans, 1, PACK_I8);                                              \
    default: return operand(p, ld, trans, 4, PACK32); /* f32, i32 */                                         \
    }                                                                                                        \
  }                                                                                                          \
  static void pack_b_##ISA(int dt, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst) { \
    Operand b = operand_##ISA(dt, B, ldb, b_trans);                                                          \
    pack_whole_b(&SH, N, K, &b, dst);                                                                        \
  }                                                                                                          \
  static void gemm_packed_##ISA(int dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,          \
                                int a_trans, const void *Bp, void *C, int64_t ldc, int acc) {                \
    Operand a = operand_##ISA(dt, A, lda, a_trans);                                                          \
    bool ints = dt == TPK_PRIM_I8 || dt == TPK_PRIM_I32;                                                     \
    drive(&SH, ints ? SH.i32 : SH.f32, ints ? SH.i32_edge : SH.f32_edge, M, N, K, &a, NULL, Bp, (char *)C,   \
          ldc, acc);                                                                                         \
  }                                                                                                          \
  static const TpkGemmImpl IMPL_##ISA = {#ISA,          gemm_f32_##ISA,  gemm_bf16_##ISA,   gemm_f16_##ISA,     \
                                         gemm_i8_##ISA, gemm_i32_##ISA, pack_b_##ISA, gemm_packed_##ISA};

/* ---- portable C ----------------------------------------------------------- */

/* 4 x 16: small enough for compilers to keep in vector registers where the
 * target has FMA (fmaf inlines there); elsewhere fmaf is a library call and
 * the shape hardly matters. */
enum { G_MR = 4, G_NR = 16 };

static void kern_f32_generic(int64_t kc, const void *av, const void *bv, void *cv, int64_t ldc, int load_c) {
  const float *a = av, *b = bv;
  float *c = cv;
  float acc[G_MR][G_NR];
  for (int i = 0; i < G_MR; i++)
    for (int j = 0; j < G_NR; j++) acc[i][j] = load_c ? c[i * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; k++)
    for (int i = 0; i < G_MR; i++) {
      float ai = a[k * G_MR + i];
      for (int j = 0; j < G_NR; j++) acc[i][j] = fmaf(ai, b[k * G_NR + j], acc[i][j]);
    }
  for (int i = 0; i < G_MR; i++)
    for (int j = 0; j < G_NR; j++) c[i * ldc + j] = acc[i][j];
}

static void kern_i32_generic(int64_t kc, const void *av, const void *bv, void *cv, int64_t ldc, int load_c) {
  const int32_t *a = av, *b = bv;
  int32_t *c = cv;
  uint32_t acc[G_MR][G_NR]; /* unsigned: wraps modulo 2^32 without UB */
  for (int i = 0; i < G_MR; i++)
    for (int j = 0; j < G_NR; j++) acc[i][j] = load_c ? (uint32_t)c[i * ldc + j] : 0u;
  for (int64_t k = 0; k < kc; k++)
    for (int i = 0; i < G_MR; i++) {
      uint32_t ai = (uint32_t)a[k * G_MR + i];
      for (int j = 0; j < G_NR; j++) acc[i][j] += ai * (uint32_t)b[k * G_NR + j];
    }
  for (int i = 0; i < G_MR; i++)
    for (int j = 0; j < G_NR; j++) c[i * ldc + j] = u32_to_i32(acc[i][j]);
}

/* KC 256 x MR 4 floats = 4 KiB of A in L1; KC x NC 256 x 256 = 256 KiB of B
 * in L2, modest enough for most CPUs. */
static const Shape SHAPE_generic = {G_MR, G_NR, 256, 64, 256, kern_f32_generic, kern_i32_generic, NULL, NULL};
DEFINE_GEMMS(generic, SHAPE_generic, pack_b32, pack_bf16, pack_f16, pack_i8)

#if TPK_GEMM_X86
/* Prefetch `lines` cache lines from `bytes` past p into L1. The address is
 * computed as an integer: it may lie past the array (prefetches never
 * fault), and pointer arithmetic there would be undefined. */
static inline void prefetch_lines(const void *p, uintptr_t bytes, int lines) {
  uintptr_t q = (uintptr_t)p + bytes;
  for (int i = 0; i < lines; i++) _mm_prefetch((const char *)(q + 64 * (uintptr_t)i), _MM_HINT_T0);
}

/* ---- packing with AVX2 --------------------------------------------------------
 * The same panels as the portable packing, 8 elements at a time, converting
 * on the way (bf16, f16 and i8 widen to 32 bits with the exact conversions
 * of the scalar code). The transposing case (k contiguous in the source: A
 * not transposed, or B transposed) loads 8 source rows x 8 k, transposes
 * them in registers and stores 8 k-rows of the panel; each source cache
 * line is used up in consecutive blocks, so rows ld apart sharing cache sets
 * do not matter. */

__attribute__((target("avx2"), always_inline)) static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Store the first `lanes` (1..8) of v at d. */
__attribute__((target("avx2"))) static inline void store_lanes(uint32_t *d, __m256 v, int64_t lanes) {
  if (lanes == 8) {
    _mm256_storeu_ps((float *)d, v);
    return;
  }
  __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps((float *)d, mask, v);
}

/* 8 halves to f32 bits, as f16_to_f32 does it: normal numbers rebiased,
 * subnormals as man * 2^-24 (an exact product with a normal result, so
 * MXCSR's flush-to-zero modes cannot touch it), inf and NaN kept. */
__attribute__((target("avx2"))) static inline __m256 f16x8_to_f32(__m128i h8) {
  __m256i h = _mm256_cvtepu16_epi32(h8);
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  __m256i exp = _mm256_and_si256(_mm256_srli_epi32(h, 10), _mm256_set1_epi32(0x1f));
  __m256i man13 = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff)), 13);
  __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exp, _mm256_set1_epi32(112)), 23), man13);
  __m256i infnan = _mm256_or_si256(_mm256_set1_epi32(0x7f800000), man13);
  __m256 man = _mm256_cvtepi32_ps(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff)));
  __m256i sub = _mm256_castps_si256(_mm256_mul_ps(man, _mm256_set1_ps(0x1p-24f)));
  __m256i r = _mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(exp, _mm256_setzero_si256()));
  r = _mm256_blendv_epi8(r, infnan, _mm256_cmpeq_epi32(exp, _mm256_set1_epi32(0x1f)));
  return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
}

/* 8 consecutive source elements as 32-bit values (bits in a __m256). */
#define LOAD8_B32(p) _mm256_loadu_ps((const float *)(p))
#define LOAD8_BF16(p)                                                                                          \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define LOAD8_F16(p) f16x8_to_f32(_mm_loadu_si128((const __m128i *)(p)))
#define LOAD8_I8(p) _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))

/* One element's 32 bits, for the scalar tails. */
static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
#define BITS_B32(x) (x)
#define BITS_BF16(x) ((uint32_t)(x) << 16)
#define BITS_F16(x) f32_bits(f16_to_f32(x))
#define BITS_I8(x) ((uint32_t)(int32_t)(x))

#define DEFINE_PACK_AVX2(NAME, SRC_T, LOAD8, BITS, PORTABLE)                                                   \
  /* the first m (1..7) elements at p, the rest zero: 32-bit elements by a                                   \
   * masked load (a copy through a buffer stalls on store forwarding) */                                      \
  __attribute__((target("avx2"))) static inline __m256 NAME##_part(const SRC_T *p, int64_t m) {                \
    if (sizeof(SRC_T) == 4)                                                                                    \
      return _mm256_maskload_ps((const float *)p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m),                 \
                                                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))); \
    SRC_T buf[8] = {0};                                                                                        \
    memcpy(buf, p, (size_t)m * sizeof *p);                                                                     \
    return LOAD8(buf);                                                                                         \
  }                                                                                                            \
  /* a panel's row of w elements at sp (w + 8 - w % 8 of them readable), the                                 \
   * last w % 8 by the mask `tail`, or, when `spill`, whole: the lanes past the                               \
   * row land on what the caller writes later (a masked store is slow on                                      \
   * some CPUs: a third of a bf16 pack's time on AMD Zen 4) */                                                \
  __attribute__((target("avx2"), always_inline)) static inline void NAME##_row(uint32_t *d, const SRC_T *sp,   \
                                                                             int64_t w, __m256i tail,         \
                                                                             bool spill) {                    \
    int64_t t = 0;                                                                                             \
    for (; t + 8 <= w; t += 8) _mm256_storeu_ps((float *)(d + t), LOAD8(sp + t));                              \
    if (t < w && spill) _mm256_storeu_ps((float *)(d + t), LOAD8(sp + t));                                     \
    else if (t < w) _mm256_maskstore_ps((float *)(d + t), tail, LOAD8(sp + t));                                \
  }                                                                                                            \
  __attribute__((target("avx2"))) static void NAME(void *dstv, int64_t w, const void *srcv, int64_t s_w,       \
                                                   int64_t s_k, int64_t n, int64_t kc) {                       \
    uint32_t *dst = dstv;                                                                                      \
    const SRC_T *src = srcv;                                                                                   \
    int64_t panels = (n + w - 1) / w;                                                                          \
    if (s_w == 1) {                                                                                            \
      /* Source rows (one per k) scatter into the panels. Short row segments                                   \
       * far apart defeat the hardware prefetcher: fetch 8 rows ahead. */                                      \
      __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w % 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
      for (int64_t k = 0; k < kc; k++) {                                                                       \
        const SRC_T *s = src + k * s_k;                                                                        \
        if (k + 8 < kc)                                                                                        \
          for (int64_t t = 0; t < n; t += 64 / (int64_t)sizeof(SRC_T))                                         \
            _mm_prefetch((const char *)(s + 8 * s_k + t), _MM_HINT_T0);                                        \
        /* panels whose every group reads 8 elements that exist: no checks; a                                 \
         * row spills onto the next k's, written next (not the last k's: the next                              \
         * panel's first row is written) */                                                                     \
        int64_t p = 0;                                                                                         \
        if (w == 14)                                                                                           \
          for (; p * 14 + 16 <= n; p++) NAME##_row(dst + (p * kc + k) * 14, s + p * 14, 14, tail, k + 1 < kc); \
        else if (w == 32)                                                                                      \
          for (; p * 32 + 32 <= n; p++) NAME##_row(dst + (p * kc + k) * 32, s + p * 32, 32, tail, false);     \
        for (; p < panels; p++) {                                                                              \
          uint32_t *d = dst + (p * kc + k) * w;                                                                \
          const SRC_T *sp = s + p * w;                                                                         \
          int64_t nv = min64(w, n - p * w);                                                                    \
          for (int64_t t = 0; t < w; t += 8) {                                                                 \
            /* a whole vector wherever the row has 8 more elements, even past  \
             * the panel (a 14-wide panel's second group): only the panel's    \
             * lanes are stored */                                              \
            int64_t avail = n - p * w - t;                                                                     \
            __m256 v = avail >= 8 ? LOAD8(sp + t) : t < nv ? NAME##_part(sp + t, nv - t) : _mm256_setzero_ps(); \
            store_lanes(d + t, v, min64(8, w - t));                                                            \
          }                                                                                                    \
        }                                                                                                      \
      }                                                                                                        \
      return;                                                                                                  \
    }                                                                                                          \
    if (s_k != 1) { /* neither stride 1: not a layout prims.h produces */                                      \
      PORTABLE(dstv, w, srcv, s_w, s_k, n, kc);                                                                \
      return;                                                                                                  \
    }                                                                                                          \
    /* 16 k at a time (a whole 64-byte line of a 4-byte source row, used up    \
     * at once: rows ld apart share few cache sets), all of the panel's      \
     * groups of 8 columns in turn, so that each k-row of the panel is      \
     * complete before the next (its lines are written once, in L1). The    \
     * groups go last first: a group short of 8 columns (w = 14's second)   \
     * stores whole vectors, spilling onto the next k-row's first columns,  \
     * which the first group then writes (or the next block of k, or the    \
     * scalar tail); but for the panel's last k-row, which would spill past \
     * it. A source read from memory (a weight, once a step) has its rows'  \
     * lines fetched two blocks of k ahead, into L2: 8 rows per group, each \
     * a line from memory, are more misses than the hardware prefetcher      \
     * follows; a small one, likely in cache, is not (the prefetches cost    \
     * 2% of a 64 x 64 pack). The addresses are integers: past the rows is   \
     * not an array. */                                                       \
    bool fetch = n * kc * (int64_t)sizeof(SRC_T) >= 65536;                                                    \
    for (int64_t p = 0; p < panels; p++) {                                                                     \
      uint32_t *d = dst + p * kc * w;                                                                          \
      int64_t nv = min64(w, n - p * w);                                                                        \
      int64_t k = 0;                                                                                           \
      for (; k + 8 <= kc; k += 8) {                                                                            \
        bool two = k + 16 <= kc;                                                                               \
        for (int64_t t0 = (w - 1) / 8 * 8; t0 >= 0; t0 -= 8) {                                                 \
          int64_t lanes = min64(8, w - t0);                    /* panel columns this group fills */            \
          int64_t rows = nv - t0 < 0 ? 0 : min64(8, nv - t0);  /* of which exist in the source */              \
          const SRC_T *s = src + (p * w + t0) * s_w + k;                                                       \
          if (fetch)                                                                                           \
            for (int i = 0; i < rows; i++)                                                                     \
              _mm_prefetch((const char *)((uintptr_t)(s + i * s_w) + 32 * sizeof(SRC_T)), _MM_HINT_T1);         \
          for (int64_t h = 0; h < (two ? 16 : 8); h += 8) {                                                    \
            __m256 r[8];                                                                                       \
            for (int i = 0; i < 8; i++) r[i] = i < rows ? LOAD8(s + i * s_w + h) : _mm256_setzero_ps();         \
            transpose8(r);                                                                                     \
            for (int i = 0; i < 8; i++) {                                                                      \
              uint32_t *row = d + (k + h + i) * w + t0;                                                        \
              if (k + h + i + 1 < kc)                                                                          \
                _mm256_storeu_ps((float *)row, r[i]);                                                          \
              else                                                                                             \
                store_lanes(row, r[i], lanes);                                                                 \
            }                                                                                                  \
          }                                                                                                    \
        }                                                                                                      \
        if (two) k += 8;                                                                                       \
      }                                                                                                        \
      for (; k < kc; k++)                                                                                      \
        for (int64_t t = 0; t < w; t++) d[k * w + t] = t < nv ? BITS(src[(p * w + t) * s_w + k]) : 0u;        \
    }                                                                                                          \
  }

DEFINE_PACK_AVX2(pack_b32_avx2, uint32_t, LOAD8_B32, BITS_B32, pack_b32)
DEFINE_PACK_AVX2(pack_bf16_avx2, uint16_t, LOAD8_BF16, BITS_BF16, pack_bf16)
DEFINE_PACK_AVX2(pack_f16_avx2, uint16_t, LOAD8_F16, BITS_F16, pack_f16)
DEFINE_PACK_AVX2(pack_i8_avx2, int8_t, LOAD8_I8, BITS_I8, pack_i8)

/* ---- AVX2 + FMA: 6 x 16 (two ymm per row) ---------------------------------
 * 12 accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers.
 * Per k: 2 loads of B, 6 broadcasts, 12 FMAs (two FMA ports: 6 cycles). */

#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

#define Y_DECL(i) __m256 c##i##a, c##i##b;
#define Y_ZERO(i) c##i##a = _mm256_setzero_ps(), c##i##b = _mm256_setzero_ps();
#define Y_LOAD(i) c##i##a = _mm256_loadu_ps(c + (i) * ldc), c##i##b = _mm256_loadu_ps(c + (i) * ldc + 8);
#define Y_STORE(i) _mm256_storeu_ps(c + (i) * ldc, c##i##a), _mm256_storeu_ps(c + (i) * ldc + 8, c##i##b);
#define Y_FMA(i)                                                                                               \
  {                                                                                                            \
    __m256 ab = _mm256_broadcast_ss(a + (i));                                                                  \
    c##i##a = _mm256_fmadd_ps(ab, b0, c##i##a);                                                                \
    c##i##b = _mm256_fmadd_ps(ab, b1, c##i##b);                                                                \
  }

__attribute__((target("avx2,fma"))) static void kern_f32_avx2(int64_t kc, const void *av, const void *bv,
                                                               void *cv, int64_t ldc, int load_c) {
  const float *a = av, *b = bv;
  float *c = cv;
  for (int i = 0; i < 6; i++) prefetch_lines(c + i * ldc, 64, 1); /* the next call's C */
  ROWS6(Y_DECL)
  if (load_c) {
    ROWS6(Y_LOAD)
  } else {
    ROWS6(Y_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
    prefetch_lines(b, 512, 1); /* B, 8 k ahead */
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    ROWS6(Y_FMA)
  }
  ROWS6(Y_STORE)
}

#define YI_DECL(i) __m256i c##i##a, c##i##b;
#define YI_ZERO(i) c##i##a = _mm256_setzero_si256(), c##i##b = _mm256_setzero_si256();
#define YI_LOAD(i)                                                                                             \
  c##i##a = _mm256_loadu_si256((const __m256i *)(c + (i) * ldc)),                                              \
  c##i##b = _mm256_loadu_si256((const __m256i *)(c + (i) * ldc + 8));
#define YI_STORE(i)                                                                                            \
  _mm256_storeu_si256((__m256i *)(c + (i) * ldc), c##i##a),                                                    \
      _mm256_storeu_si256((__m256i *)(c + (i) * ldc + 8), c##i##b);
#define YI_MAD(i)                                                                                              \
  {                                                                                                            \
    __m256i ab = _mm256_set1_epi32(a[i]);                                                                      \
    c##i##a = _mm256_add_epi32(c##i##a, _mm256_mullo_epi32(ab, b0));                                           \
    c##i##b = _mm256_add_epi32(c##i##b, _mm256_mullo_epi32(ab, b1));                                           \
  }

__attribute__((target("avx2"))) static void kern_i32_avx2(int64_t kc, const void *av, const void *bv, void *cv,
                                                           int64_t ldc, int load_c) {
  const int32_t *a = av, *b = bv;
  int32_t *c = cv;
  ROWS6(YI_DECL)
  if (load_c) {
    ROWS6(YI_LOAD)
  } else {
    ROWS6(YI_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, a += 6, b += 16) {
    __m256i b0 = _mm256_load_si256((const __m256i *)b), b1 = _mm256_load_si256((const __m256i *)(b + 8));
    ROWS6(YI_MAD)
  }
  ROWS6(YI_STORE)
}

/* KC 256: A sliver 6 KiB in L1; B block 256 x 512 floats = 512 KiB in L2
 * (Haswell's L2 is 256 KiB: B then streams from L3, whose bandwidth the
 * 6-row reuse of each B line covers); A block 96 x 256 = 96 KiB. */
static const Shape SHAPE_avx2 = {6, 16, 256, 96, 512, kern_f32_avx2, kern_i32_avx2, NULL, NULL};
DEFINE_GEMMS(avx2, SHAPE_avx2, pack_b32_avx2, pack_bf16_avx2, pack_f16_avx2, pack_i8_avx2)

/* ---- AVX-512F: 14 x 32 (two zmm per row) ----------------------------------
 * 28 accumulators + 2 B vectors + 1 broadcast = 31 of the 32 zmm registers.
 * Per k: 2 loads of B, 14 broadcasts (folded into the FMAs as {1to16}
 * memory operands), 28 FMAs: 14 cycles on two FMA ports, with loads well
 * under the two-per-cycle limit. */

#define ROWS14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

#define Z_DECL(i) __m512 c##i##a, c##i##b;
#define Z_ZERO(i) c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();
#define Z_LOAD(i) c##i##a = _mm512_loadu_ps(c + (i) * ldc), c##i##b = _mm512_loadu_ps(c + (i) * ldc + 16);
#define Z_STORE(i) _mm512_storeu_ps(c + (i) * ldc, c##i##a), _mm512_storeu_ps(c + (i) * ldc + 16, c##i##b);
#define Z_FMA(i)                                                                                               \
  {                                                                                                            \
    __m512 ab = _mm512_set1_ps(a[(i) * AI]);                                                                          \
    c##i##a = _mm512_fmadd_ps(ab, b0, c##i##a);                                                                \
    c##i##b = _mm512_fmadd_ps(ab, b1, c##i##b);                                                                \
  }

/* The A sliver in one of two layouts: k-major (A_KMAJOR: element (i, k) at
 * a[k*14 + i], as packed from a source whose k-th row holds the sliver's 14
 * values) or by rows (A_ROWS: at a[i*A_ROW_STRIDE + k], packed from a
 * row-major source by copying rows, no transposes). AI and AK are the
 * distances between rows and between k: constants, so the broadcasts'
 * addresses are one pointer plus displacements. */
enum { A_ROW_STRIDE = 256 };
#define A_KMAJOR 1, 14
#define A_ROWS A_ROW_STRIDE, 1
#define DEFINE_KERN_AVX512(NAME, LAYOUT) DEFINE_KERN_AVX512_(NAME, LAYOUT)
#define DEFINE_KERN_AVX512_(NAME, AI_, AK_)                                                                   \
  __attribute__((target("avx512f"))) static void NAME(int64_t kc, const void *av, const void *bv, void *cv,   \
                                                      int64_t ldc, int load_c) {                                \
    enum { AI = AI_, AK = AK_ };                                                                              \
    const float *a = av, *b = bv;                                                                             \
    float *c = cv;                                                                                            \
    /* The next tile to the right is the next call's C: start fetching it. */                                 \
    for (int i = 0; i < 14; i++) prefetch_lines(c + i * ldc, 128, 2);                                         \
    ROWS14(Z_DECL)                                                                                            \
    if (load_c) {                                                                                             \
      ROWS14(Z_LOAD)                                                                                          \
    } else {                                                                                                  \
      ROWS14(Z_ZERO)                                                                                          \
    }                                                                                                         \
    for (int64_t k = 0; k < kc; k++, a += AK, b += 32) {                                                      \
      /* B streams from L2: ask for it 8 k ahead */                                                           \
      prefetch_lines(b, 1024, 2);                                                                             \
      __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                                             \
      ROWS14(Z_FMA)                                                                                           \
    }                                                                                                         \
    ROWS14(Z_STORE)                                                                                           \
  }
DEFINE_KERN_AVX512(kern_f32_avx512, A_KMAJOR)
DEFINE_KERN_AVX512(kern_f32_avx512_rows, A_ROWS)

/* The same with A transposed, read in place (DirectFn). */
__attribute__((target("avx512f"))) static void kern_f32_avx512_direct(int64_t kc, const float *a, int64_t lda,
                                                                       const void *bv, void *cv, int64_t ldc,
                                                                       int load_c) {
  enum { AI = 1 };
  const float *b = bv;
  float *c = cv;
  for (int i = 0; i < 14; i++) prefetch_lines(c + i * ldc, 128, 2);
  ROWS14(Z_DECL)
  if (load_c) {
    ROWS14(Z_LOAD)
  } else {
    ROWS14(Z_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, a += lda, b += 32) {
    prefetch_lines(b, 1024, 2);
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    ROWS14(Z_FMA)
  }
  ROWS14(Z_STORE)
}

/* Edge tiles with masks instead of a copy of C: rows from mv on are neither
 * read nor written, nor columns from nv on (m0, m1 cover the two vectors).
 * The k loop is the full kernel's. */
#define ZE_LOAD(i)                                                                                             \
  if ((i) < mv) {                                                                                              \
    c##i##a = _mm512_maskz_loadu_ps(m0, c + (i) * ldc);                                                        \
    c##i##b = m1 ? _mm512_maskz_loadu_ps(m1, c + (i) * ldc + 16) : _mm512_setzero_ps();                        \
  }
#define ZE_STORE(i)                                                                                            \
  if ((i) < mv) {                                                                                              \
    _mm512_mask_storeu_ps(c + (i) * ldc, m0, c##i##a);                                                         \
    if (m1)                                                                                                    \
      _mm512_mask_storeu_ps(c + (i) * ldc + 16, m1, c##i##b);                                                  \
  }

/* An edge tile computes only the rows it has, rounded up to even: a block
 * of 64 rows is four full slivers and one of 8, and 128 rows end in one of
 * 2, which at 14 rows' FMAs cost as much as a full sliver. The packed
 * sliver still holds 14 rows per k (the rest zero). */
#define EROWS2(X) X(0) X(1)
#define EROWS4(X) EROWS2(X) X(2) X(3)
#define EROWS6(X) EROWS4(X) X(4) X(5)
#define EROWS8(X) EROWS6(X) X(6) X(7)
#define EROWS10(X) EROWS8(X) X(8) X(9)
#define EROWS12(X) EROWS10(X) X(10) X(11)
#define DEFINE_EDGE_AVX512(NAME, ROWS, LAYOUT) DEFINE_EDGE_AVX512_(NAME, ROWS, LAYOUT)
#define DEFINE_EDGE_AVX512_(NAME, ROWS, AI_, AK_)                                                             \
  __attribute__((target("avx512f"))) static void NAME(int64_t kc, const float *a, const float *b, float *c,   \
                                                      int64_t ldc, int load_c, int64_t mv, __mmask16 m0,        \
                                                      __mmask16 m1) {                                           \
    enum { AI = AI_, AK = AK_ };                                                                              \
    ROWS(Z_DECL)                                                                                              \
    ROWS(Z_ZERO)                                                                                              \
    if (load_c) {                                                                                             \
      ROWS(ZE_LOAD)                                                                                           \
    }                                                                                                         \
    for (int64_t k = 0; k < kc; k++, a += AK, b += 32) {                                                      \
      __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                                             \
      ROWS(Z_FMA)                                                                                             \
    }                                                                                                         \
    ROWS(ZE_STORE)                                                                                            \
  }
DEFINE_EDGE_AVX512(edge2_avx512, EROWS2, A_KMAJOR)
DEFINE_EDGE_AVX512(edge2_avx512_rows, EROWS2, A_ROWS)
DEFINE_EDGE_AVX512(edge4_avx512, EROWS4, A_KMAJOR)
DEFINE_EDGE_AVX512(edge4_avx512_rows, EROWS4, A_ROWS)
DEFINE_EDGE_AVX512(edge6_avx512, EROWS6, A_KMAJOR)
DEFINE_EDGE_AVX512(edge6_avx512_rows, EROWS6, A_ROWS)
DEFINE_EDGE_AVX512(edge8_avx512, EROWS8, A_KMAJOR)
DEFINE_EDGE_AVX512(edge8_avx512_rows, EROWS8, A_ROWS)
DEFINE_EDGE_AVX512(edge10_avx512, EROWS10, A_KMAJOR)
DEFINE_EDGE_AVX512(edge10_avx512_rows, EROWS10, A_ROWS)
DEFINE_EDGE_AVX512(edge12_avx512, EROWS12, A_KMAJOR)
DEFINE_EDGE_AVX512(edge12_avx512_rows, EROWS12, A_ROWS)
DEFINE_EDGE_AVX512(edge14_avx512, ROWS14, A_KMAJOR)
DEFINE_EDGE_AVX512(edge14_avx512_rows, ROWS14, A_ROWS)

/* A panel with at most 16 columns (N = 10, a head's last column of 65)
 * computes one vector per row, half the full tile's FMAs. */
#define ZN_DECL(i) __m512 c##i##a;
#define ZN_ZERO(i) c##i##a = _mm512_setzero_ps();
#define ZN_LOAD(i)                                                                                             \
  if ((i) < mv)                                                                                                \
    c##i##a = _mm512_maskz_loadu_ps(m0, c + (i) * ldc);
#define ZN_STORE(i)                                                                                            \
  if ((i) < mv)                                                                                                \
    _mm512_mask_storeu_ps(c + (i) * ldc, m0, c##i##a);
#define ZN_FMA(i) c##i##a = _mm512_fmadd_ps(_mm512_set1_ps(a[(i) * AI]), b0, c##i##a);
#define DEFINE_NARROW_AVX512(NAME, ROWS, LAYOUT) DEFINE_NARROW_AVX512_(NAME, ROWS, LAYOUT)
#define DEFINE_NARROW_AVX512_(NAME, ROWS, AI_, AK_)                                                           \
  __attribute__((target("avx512f"))) static void NAME(int64_t kc, const float *a, const float *b, float *c,   \
                                                      int64_t ldc, int load_c, int64_t mv, __mmask16 m0,        \
                                                      __mmask16 m1) {                                           \
    enum { AI = AI_, AK = AK_ };                                                                              \
    (void)m1;                                                                                                 \
    ROWS(ZN_DECL)                                                                                             \
    ROWS(ZN_ZERO)                                                                                             \
    if (load_c) {                                                                                             \
      ROWS(ZN_LOAD)                                                                                           \
    }                                                                                                         \
    for (int64_t k = 0; k < kc; k++, a += AK, b += 32) {                                                      \
      __m512 b0 = _mm512_load_ps(b);                                                                          \
      ROWS(ZN_FMA)                                                                                            \
    }                                                                                                         \
    ROWS(ZN_STORE)                                                                                            \
  }
DEFINE_NARROW_AVX512(narrow2_avx512, EROWS2, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow2_avx512_rows, EROWS2, A_ROWS)
DEFINE_NARROW_AVX512(narrow4_avx512, EROWS4, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow4_avx512_rows, EROWS4, A_ROWS)
DEFINE_NARROW_AVX512(narrow6_avx512, EROWS6, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow6_avx512_rows, EROWS6, A_ROWS)
DEFINE_NARROW_AVX512(narrow8_avx512, EROWS8, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow8_avx512_rows, EROWS8, A_ROWS)
DEFINE_NARROW_AVX512(narrow10_avx512, EROWS10, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow10_avx512_rows, EROWS10, A_ROWS)
DEFINE_NARROW_AVX512(narrow12_avx512, EROWS12, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow12_avx512_rows, EROWS12, A_ROWS)
DEFINE_NARROW_AVX512(narrow14_avx512, ROWS14, A_KMAJOR)
DEFINE_NARROW_AVX512(narrow14_avx512_rows, ROWS14, A_ROWS)

typedef void (*EdgeRows)(int64_t, const float *, const float *, float *, int64_t, int, int64_t, __mmask16,
                         __mmask16);
/* The edge kernel for mv rows and nv columns from a table of [wide, narrow][rows / 2]. */
__attribute__((target("avx512f"))) static void edge_avx512(const EdgeRows by_rows[2][8], int64_t kc, const void *av,
                                                            const void *bv, void *cv, int64_t ldc, int load_c,
                                                            int64_t mv, int64_t nv) {
  __mmask16 m0 = (__mmask16)(nv >= 16 ? 0xffffu : (1u << nv) - 1);
  __mmask16 m1 = (__mmask16)(nv >= 32 ? 0xffffu : nv > 16 ? (1u << (nv - 16)) - 1 : 0u);
  by_rows[nv <= 16][(mv + 1) / 2](kc, av, bv, cv, ldc, load_c, mv, m0, m1);
}
#define EDGE_TABLE(S)                                                                                          \
  {{edge2_avx512##S, edge2_avx512##S, edge4_avx512##S, edge6_avx512##S, edge8_avx512##S, edge10_avx512##S,     \
    edge12_avx512##S, edge14_avx512##S},                                                                       \
   {narrow2_avx512##S, narrow2_avx512##S, narrow4_avx512##S, narrow6_avx512##S, narrow8_avx512##S,             \
    narrow10_avx512##S, narrow12_avx512##S, narrow14_avx512##S}}
static const EdgeRows EDGES_KMAJOR[2][8] = EDGE_TABLE(), EDGES_ROWS[2][8] = EDGE_TABLE(_rows);
__attribute__((target("avx512f"))) static void pack_rows_avx512(float *dst, const float *src, int64_t ld,
                                                                 int64_t mc, int64_t kc, int64_t mr,
                                                                 int64_t stride) {
  __mmask16 tail = (__mmask16)((1u << (kc % 16)) - 1);
  for (int64_t i = 0; i < mc; i++) {
    const float *s = src + i * ld;
    float *d = dst + i * stride;
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(s + k));
    if (tail) _mm512_mask_storeu_ps(d + k, tail, _mm512_maskz_loadu_ps(tail, s + k));
  }
  for (int64_t i = mc; i < round_up(mc, mr); i++) {
    float *d = dst + i * stride;
    for (int64_t k = 0; k < kc; k += 16) _mm512_mask_storeu_ps(d + k, kc - k >= 16 ? 0xffff : tail, _mm512_setzero_ps());
  }
}

static void kern_f32_avx512_edge(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int load_c,
                                 int64_t mv, int64_t nv) {
  edge_avx512(EDGES_KMAJOR, kc, a, b, c, ldc, load_c, mv, nv);
}
static void kern_f32_avx512_rows_edge(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int load_c,
                                      int64_t mv, int64_t nv) {
  edge_avx512(EDGES_ROWS, kc, a, b, c, ldc, load_c, mv, nv);
}

#define ZI_DECL(i) __m512i c##i##a, c##i##b;
#define ZI_ZERO(i) c##i##a = _mm512_setzero_si512(), c##i##b = _mm512_setzero_si512();
#define ZI_LOAD(i) c##i##a = _mm512_loadu_si512(c + (i) * ldc), c##i##b = _mm512_loadu_si512(c + (i) * ldc + 16);
#define ZI_STORE(i) _mm512_storeu_si512(c + (i) * ldc, c##i##a), _mm512_storeu_si512(c + (i) * ldc + 16, c##i##b);
#define ZI_MAD(i)                                                                                              \
  {                                                                                                            \
    __m512i ab = _mm512_set1_epi32(a[i]);                                                                      \
    c##i##a = _mm512_add_epi32(c##i##a, _mm512_mullo_epi32(ab, b0));                                           \
    c##i##b = _mm512_add_epi32(c##i##b, _mm512_mullo_epi32(ab, b1));                                           \
  }

__attribute__((target("avx512f"))) static void kern_i32_avx512(int64_t kc, const void *av, const void *bv,
                                                                void *cv, int64_t ldc, int load_c) {
  const int32_t *a = av, *b = bv;
  int32_t *c = cv;
  ROWS14(ZI_DECL)
  if (load_c) {
    ROWS14(ZI_LOAD)
  } else {
    ROWS14(ZI_ZERO)
  }
  for (int64_t k = 0; k < kc; k++, a += 14, b += 32) {
    __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 16);
    ROWS14(ZI_MAD)
  }
  ROWS14(ZI_STORE)
}

/* KC 256: A sliver 14 x 256 floats = 14 KiB, under half of a 32 KiB L1,
 * beside the streamed B panel lines; B block 256 x 512 floats = 512 KiB,
 * half of a 1 MiB L2 (Skylake-SP and later), leaving room for the A block
 * (112 x 256 floats = 112 KiB) and C tiles. Measured on a Cascade Lake
 * Xeon at 1024^3: KC 384 or NC 1024 were no better, NC 256 was worse (A is
 * packed N/NC times); MC from 56 to 448 made no measurable difference. */
/* A_ROW_STRIDE is the KC of this Shape: its f32_rows kernels read slivers packed by rows that far apart. */
static const Shape SHAPE_avx512 = {14,   32, A_ROW_STRIDE, 112, 512, kern_f32_avx512, kern_i32_avx512, kern_f32_avx512_edge,
                                   NULL, kern_f32_avx512_rows, kern_f32_avx512_rows_edge, pack_rows_avx512,
                                   kern_f32_avx512_direct};
DEFINE_GEMMS(avx512, SHAPE_avx512, pack_b32_avx2, pack_bf16_avx2, pack_f16_avx2, pack_i8_avx2)
#endif

/* ---- choosing an instruction set ------------------------------------------ */

static const TpkGemmImpl *choose(void) {
#if TPK_GEMM_X86
  /* libgcc's check includes the OS enabling the AVX/AVX-512 register state */
  /* (the AVX-512 path packs with AVX2) */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2"))
    return &IMPL_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return &IMPL_avx2;
#endif
  return &IMPL_generic;
}

static const TpkGemmImpl *best(void) {
  /* Set once; threads racing here all compute and store the same pointer. */
  static _Atomic(const TpkGemmImpl *) chosen;
  const TpkGemmImpl *p = atomic_load_explicit(&chosen, memory_order_acquire);
  if (!p) {
    p = choose();
    atomic_store_explicit(&chosen, p, memory_order_release);
  }
  return p;
}

const TpkGemmImpl *tpk_gemm_impl(const char *isa) {
  if (strcmp(isa, "generic") == 0)
    return &IMPL_generic;
#if TPK_GEMM_X86
  if (strcmp(isa, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return &IMPL_avx2;
  if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2"))
    return &IMPL_avx512;
#endif
  return NULL;
}

const char *tpk_gemm_isa(void) { return best()->isa; }

/* ---- prims.h entry points -------------------------------------------------- */

void tpk_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans, const float *B,
                  int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate) {
  best()->f32(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}

void tpk_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans, const uint16_t *B,
                   int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate) {
  best()->bf16(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}

void tpk_gemm_f16(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans, const uint16_t *B,
                  int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate) {
  best()->f16(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}

void tpk_gemm_i8(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, int a_trans, const int8_t *B,
                 int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate) {
  best()->i8(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}

void tpk_gemm_i32(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda, int a_trans, const int32_t *B,
                  int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate) {
  best()->i32(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}

void tpk_gemm_pack_b(int dtype, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst) {
  best()->pack_b(dtype, K, N, B, ldb, b_trans, dst);
}

void tpk_gemm_packed(int dtype, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int a_trans,
                     const void *Bp, void *C, int64_t ldc, int accumulate) {
  best()->packed(dtype, M, N, K, A, lda, a_trans, Bp, C, ldc, accumulate);
}

void tpk_gemm_pack_b_generic(int dtype, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst) {
  pack_b_generic(dtype, K, N, B, ldb, b_trans, dst);
}

void tpk_gemm_packed_generic(int dtype, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int a_trans,
                             const void *Bp, void *C, int64_t ldc, int accumulate) {
  gemm_packed_generic(dtype, M, N, K, A, lda, a_trans, Bp, C, ldc, accumulate);
}

void tpk_gemm_f32_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans,
                          const float *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate) {
  gemm_f32_generic(M, N, K, A, lda, a_trans, B, ldb, b_trans, C, ldc, accumulate);
}
