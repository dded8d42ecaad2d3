/*
 * prims.h — the primitive library: the hot tile operations that generated
 * kernel code calls (matrix multiply, transcendental functions, reductions,
 * dtype conversions).
 *
 * The library is compiled by the system cc at -O3; each routine picks the
 * best instruction set of this CPU at run time (AVX-512, AVX2+FMA, or
 * portable C). Generated code (JIT-compiled by libtcc, or by cc -O3, or ahead
 * of time) reaches it through the TpkPrims table passed to every kernel, so
 * the same code works in every tier without symbol resolution.
 *
 * This header is also read by libtcc when it compiles generated code: it
 * must stay plain C with no system headers beyond <stdint.h>.
 *
 * Storage of elements: f32 float; f16 and bf16 uint16_t (their bits); f8e4m3
 * and f8e5m2 uint8_t; i32/i16/i8/u8 the matching C integers; bool uint8_t
 * holding 0 or 1. Arrays are row-major and contiguous unless a stride is
 * given.
 *
 * Numerics (the contract the simulator reproduces):
 *   - gemm: every output element accumulates its products in one
 *     accumulator of the accumulation type (f32, or i32 for integers), over k
 *     in ascending order, using fused multiply-add for floats. With
 *     `accumulate`, the accumulator starts at C's value, else at 0. bf16, f16
 *     and f8 operands are converted to f32 exactly before multiplying.
 *     Integer accumulation wraps modulo 2^32.
 *   - conversions to narrower floats round to nearest even; NaN stays NaN
 *     (quiet); values past the largest finite number become inf for f16,
 *     bf16 and f8e5m2, and NaN for f8e4m3 (which has no inf: its NaN is
 *     0x7f/0xff); float to integer truncates toward zero, saturating at the
 *     integer's range, NaN giving 0; to bool is `!= 0`.
 *   - sums of f32: the order reduce_f32 documents (lanes side by side for
 *     rows); the reference interpreter adds in plain ascending order, so
 *     the two agree to rounding, not bit for bit.
 *   - unary functions on f32 are accurate to within 2 ulp of the correctly
 *     rounded result (exp, log, tanh, sigmoid, erf, sqrt exact, rsqrt
 *     within 2 ulp); inf and NaN propagate as in C's libm.
 */
#ifndef TPK_PRIMS_H
#define TPK_PRIMS_H

#include <stdint.h>

/* Element type codes: the same values as TpkDType in include/tpk.h. */
enum {
  TPK_PRIM_F32,
  TPK_PRIM_F16,
  TPK_PRIM_BF16,
  TPK_PRIM_F8E4M3,
  TPK_PRIM_F8E5M2,
  TPK_PRIM_I32,
  TPK_PRIM_I16,
  TPK_PRIM_I8,
  TPK_PRIM_U8,
  TPK_PRIM_BOOL,
  TPK_PRIM_U32,
  TPK_PRIM_U16
};

/* Unary functions on f32 arrays. */
enum {
  TPK_PRIM_EXP,
  TPK_PRIM_LOG,
  TPK_PRIM_SQRT,
  TPK_PRIM_RSQRT,
  TPK_PRIM_TANH,
  TPK_PRIM_SIGMOID,
  TPK_PRIM_ERF
};

/* Reductions. */
enum { TPK_PRIM_SUM, TPK_PRIM_MAX, TPK_PRIM_MIN };

/*
 * C[M,N] = (accumulate ? C : 0) + A[M,K] x B[K,N].
 *   A element (i,k) is at A[i*lda + k], or A[k*lda + i] when a_trans;
 *   B element (k,j) is at B[k*ldb + j], or B[j*ldb + k] when b_trans;
 *   C element (i,j) is at C[i*ldc + j].
 * M, N or K of 0 is allowed (K = 0 leaves C as it starts).
 */
typedef void (*TpkGemmF32)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans,
                           const float *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
typedef void (*TpkGemmU16)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans,
                           const uint16_t *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
typedef void (*TpkGemmI8)(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, int a_trans,
                          const int8_t *B, int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate);
typedef void (*TpkGemmI32)(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda, int a_trans,
                           const int32_t *B, int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate);

/*
 * A right operand packed once for many products (x @ W computed by blocks
 * of rows: each block's gemm would pack all of W again). pack_b writes B
 * (K x N, laid out as gemm's B: element (k,j) at B[k*ldb + j], or
 * B[j*ldb + k] when b_trans; elements of dtype, a TPK_PRIM_* code among
 * F32, BF16, F16, I8, I32) into dst, which holds TPK_GEMM_PACKED_BYTES(K, N)
 * bytes, 64-byte aligned. packed is then gemm of that dtype with A as gemm
 * takes it and the packed B (C float for the float dtypes, int32_t for the
 * integer ones): the same bits as the gemm, with no packing of B. A table's
 * pack_b and packed go together (the layout is its instruction set's).
 */
#define TPK_GEMM_PACKED_BYTES(K, N) ((K) * (((N) + 31) / 32 * 32) * 4)
typedef void (*TpkGemmPackB)(int dtype, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst);
typedef void (*TpkGemmPacked)(int dtype, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int a_trans,
                              const void *Bp, void *C, int64_t ldc, int accumulate);

typedef struct TpkPrims {
  int version; /* TPK_PRIMS_VERSION */
  const char *isa; /* "avx512", "avx2", "generic": what this CPU got */

  TpkGemmF32 gemm_f32;
  TpkGemmU16 gemm_bf16; /* bf16 operands, f32 result */
  TpkGemmU16 gemm_f16;  /* f16 operands, f32 result */
  TpkGemmI8 gemm_i8;    /* i8 operands, i32 result */
  TpkGemmI32 gemm_i32;  /* i32 operands, i32 result */

  /* y[i] = f(x[i]) for i < n; x and y may be the same array. */
  void (*unary_f32)(int fn, const float *x, float *y, int64_t n);

  /* View x as [outer, len, inner] (row-major) and reduce the middle axis:
   * out[o*inner + i] = reduce over l of x[(o*len + l)*inner + i].
   * Sums accumulate in f32. With inner > 1 each output has one accumulator,
   * l ascending. Row sums (inner == 1) use 64 accumulators a[0..63], all
   * starting at -0: x[l] is added to a[l % 64], l ascending; then for
   * w = 32, 16, 8, 4, 2, 1 in turn, a[j] += a[j + w] for j < w; the sum is
   * a[0]. (Vector lanes add side by side at memory speed; one accumulator
   * would wait on every add. The result differs from one ascending chain by
   * rounding only, and is usually closer to the exact sum.)
   * max/min propagate NaN. len 0 gives 0 for sum, -inf for max, +inf for min. */
  void (*reduce_f32)(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out);

  /* dst[i] = (to) src[i] for i < n, element types as TPK_PRIM_* codes. */
  void (*convert)(int from, int to, const void *src, void *dst, int64_t n);

  /* Which share of the kernel's grid this call runs. The host runs a
   * kernel's grid on several threads by calling its entry point once per
   * part, each with its own copy of this table and its own workspace. The
   * top-level grid's n instances, its axes flattened row-major, are cut
   * into `parts` consecutive runs, the first n % parts of them one
   * instance longer; part p runs the p-th (tpk_share in the generated
   * code). A kernel that is more than that grid (lower.h,
   * tpk_split_grid) runs whole in part 0 and returns at once in the
   * others. parts <= 1 (the tables tpk_prims() returns) runs everything. */
  int part, parts;

  TpkGemmPackB gemm_pack_b; /* see TPK_GEMM_PACKED_BYTES above */
  TpkGemmPacked gemm_packed;

  /* With parts > 1 the runtime may hand the grid's instances out one at a
   * time instead of in fixed runs: each call returns the next instance not
   * yet taken by any part (from 0 up, past n when none is left), and a part
   * runs the instances it takes. A part slowed down (its core shared with
   * another process's threads) then takes fewer. NULL: the fixed runs. */
  int64_t (*next_instance)(const struct TpkPrims *p);
  void *instances; /* the launch's counter, for next_instance */

  /* unary_f32 of one element, the same bits. Code tcc built calls it per
   * element for a chain's exp, log, tanh, sigmoid and erf (tcc inlines
   * none of the generated code's own): ~20 ns an erf against ~200. */
  float (*unary1_f32)(int fn, float x);
} TpkPrims;

enum { TPK_PRIMS_VERSION = 1 };

/* ---- implementations (host/prims*.c); generated code uses the table ---- */

/* The table for this CPU (chosen once, thread-safe). */
const TpkPrims *tpk_prims(void);
/* The portable-C table, for tests that compare instruction sets. */
const TpkPrims *tpk_prims_generic(void);

/* gemm (host/gemm.c): best-ISA entry points and the portable reference. */
void tpk_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans, const float *B,
                  int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
void tpk_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans, const uint16_t *B,
                   int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
void tpk_gemm_f16(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, int a_trans, const uint16_t *B,
                  int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
void tpk_gemm_i8(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, int a_trans, const int8_t *B,
                 int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate);
void tpk_gemm_i32(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda, int a_trans, const int32_t *B,
                  int64_t ldb, int b_trans, int32_t *C, int64_t ldc, int accumulate);
void tpk_gemm_f32_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans,
                          const float *B, int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate);
void tpk_gemm_pack_b(int dtype, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst);
void tpk_gemm_packed(int dtype, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int a_trans,
                     const void *Bp, void *C, int64_t ldc, int accumulate);
void tpk_gemm_pack_b_generic(int dtype, int64_t K, int64_t N, const void *B, int64_t ldb, int b_trans, void *dst);
void tpk_gemm_packed_generic(int dtype, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int a_trans,
                             const void *Bp, void *C, int64_t ldc, int accumulate);
/* Which gemm ISA this CPU uses: "avx512", "avx2" or "generic". */
const char *tpk_gemm_isa(void);

/* math, reductions, conversions (host/prims.c) */
void tpk_prim_unary_f32(int fn, const float *x, float *y, int64_t n);
void tpk_prim_reduce_f32(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
void tpk_prim_convert(int from, int to, const void *src, void *dst, int64_t n);
/* Scalar conversions, for generated scalar code and tests. */
float tpk_bf16_to_f32(uint16_t h);
uint16_t tpk_f32_to_bf16(float f);
float tpk_f16_to_f32(uint16_t h);
uint16_t tpk_f32_to_f16(float f);
float tpk_f8e4m3_to_f32(uint8_t b);
uint8_t tpk_f32_to_f8e4m3(float f);
float tpk_f8e5m2_to_f32(uint8_t b);
uint8_t tpk_f32_to_f8e5m2(float f);

#endif
