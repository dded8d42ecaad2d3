/*
 * test_jit.c — host/jit.c: both tiers, promotion, the disk cache (hits,
 * damaged files, entries that do not authenticate, key files, faults,
 * stale build folders, the size limit), compile errors, concurrency,
 * shutdown with work pending, and the latency of a representative
 * generated kernel.
 *
 * Self-contained: the kernels are hand-written in the style host/emit_c.c
 * produces, and they call a small primitive table defined here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host/jit.h"
#include "support.h"

/* ---- a primitive table for the tests ---- */

static void t_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int a_trans, const float *B,
                   int64_t ldb, int b_trans, float *C, int64_t ldc, int accumulate) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float s = accumulate ? C[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; k++)
        s = fmaf(a_trans ? A[k * lda + i] : A[i * lda + k], b_trans ? B[j * ldb + k] : B[k * ldb + j], s);
      C[i * ldc + j] = s;
    }
}

static void t_unary(int fn, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    switch (fn) {
    case TPK_PRIM_EXP: v = expf(v); break;
    case TPK_PRIM_LOG: v = logf(v); break;
    case TPK_PRIM_SQRT: v = sqrtf(v); break;
    case TPK_PRIM_RSQRT: v = 1.0f / sqrtf(v); break;
    case TPK_PRIM_TANH: v = tanhf(v); break;
    case TPK_PRIM_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
    default: v = erff(v); break;
    }
    y[i] = v;
  }
}

static void t_reduce(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      float r = kind == TPK_PRIM_SUM ? 0.0f : kind == TPK_PRIM_MAX ? -INFINITY : INFINITY;
      for (int64_t l = 0; l < len; l++) {
        float v = x[(o * len + l) * inner + i];
        r = kind == TPK_PRIM_SUM ? r + v : kind == TPK_PRIM_MAX ? (v > r ? v : r) : (v < r ? v : r);
      }
      out[o * inner + i] = r;
    }
}

/* f32 <-> bf16 only (round to nearest even), which is all the kernels use. */
static void t_convert(int from, int to, const void *src, void *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (from == TPK_PRIM_F32 && to == TPK_PRIM_BF16) {
      uint32_t b;
      memcpy(&b, (const float *)src + i, 4);
      b += 0x7fff + ((b >> 16) & 1);
      ((uint16_t *)dst)[i] = (uint16_t)(b >> 16);
    } else if (from == TPK_PRIM_BF16 && to == TPK_PRIM_F32) {
      uint32_t b = (uint32_t)((const uint16_t *)src)[i] << 16;
      memcpy((float *)dst + i, &b, 4);
    } else {
      ((float *)dst)[i] = ((const float *)src)[i];
    }
  }
}

static const TpkPrims test_prims = {
    .version = TPK_PRIMS_VERSION, .isa = "test", .gemm_f32 = t_gemm,
    .unary_f32 = t_unary, .reduce_f32 = t_reduce, .convert = t_convert,
};

/* ---- kernels ---- */

/* y = sqrt(a + b) + offset; the offset makes each source (and cache key)
 * distinct. */
static void add_source(char *buf, size_t size, int offset) {
  snprintf(buf, size,
           "#include \"tpk_prims.h\"\n"
           "\n"
           "int add_kernel(const TpkPrims *p, void *const *args, const int64_t *syms, void *workspace, char *err) {\n"
           "  const float *a = (const float *)args[0], *b = (const float *)args[1];\n"
           "  float *y = (float *)args[2];\n"
           "  const int64_t n = syms[0];\n"
           "  (void)workspace;\n"
           "  if (n < 0) {\n"
           "    const char *m = \"add_kernel: negative n\";\n"
           "    int i = 0;\n"
           "    while ((err[i] = m[i])) i++;\n"
           "    return 1;\n"
           "  }\n"
           "  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];\n"
           "  p->unary_f32(TPK_PRIM_SQRT, y, y, n);\n"
           "  for (int64_t i = 0; i < n; i++) y[i] = y[i] + %d.0f;\n"
           "  return 0;\n"
           "}\n",
           offset);
}

enum { ADD_N = 37 };

/* Runs add_kernel through tpk_code_entry; checks y and returns it in out. */
static void run_add(TpkCode *code, int offset, float out[ADD_N]) {
  float a[ADD_N], b[ADD_N], y[ADD_N];
  for (int i = 0; i < ADD_N; i++) a[i] = (float)i * 0.5f, b[i] = (float)(i % 5);
  void *args[] = {a, b, y};
  int64_t syms[] = {ADD_N};
  char err[TPK_KERNEL_ERR_LEN] = "";
  TpkKernelFn fn = tpk_code_entry(code);
  assert_non_null(fn);
  assert_int_equal(fn(&test_prims, args, syms, NULL, err), 0);
  for (int i = 0; i < ADD_N; i++) assert_true(y[i] == sqrtf(a[i] + b[i]) + (float)offset);
  if (out) memcpy(out, y, sizeof y);
}

/* The representative generated kernel: 195 lines, tiles, calls through the
 * table, scalar epilogues. */
static const char k200_source[] =
    "#include \"tpk_prims.h\"\n"
    "\n"
    "/* Generated by tpk from fused_block.tpk: do not edit. */\n"
    "/* kernel fused_block(x: f32[M, K], w: f32[K, N], bias: f32[N], gamma: f32[N], beta: f32[N],\n"
    " *                    eps: f32, y: f32[M, N], stats: f32[M, 2]) */\n"
    "\n"
    "enum { BM = 16, BN_MAX = 256 };\n"
    "\n"
    "static int64_t tpk_min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "\n"
    "static int tpk_fail(char *err, const char *msg) {\n"
    "  int i = 0;\n"
    "  for (; msg[i] && i < 255; i++) err[i] = msg[i];\n"
    "  err[i] = 0;\n"
    "  return 1;\n"
    "}\n"
    "\n"
    "static float tpk_gelu_inner(float v) {\n"
    "  const float c0 = 0.7978845608f, c1 = 0.044715f;\n"
    "  return c0 * (v + c1 * v * v * v);\n"
    "}\n"
    "\n"
    "int fused_block(const TpkPrims *p, void *const *args, const int64_t *syms, void *workspace, char *err) {\n"
    "  const float *x = (const float *)args[0];\n"
    "  const float *w = (const float *)args[1];\n"
    "  const float *bias = (const float *)args[2];\n"
    "  const float *gamma = (const float *)args[3];\n"
    "  const float *beta = (const float *)args[4];\n"
    "  const float eps = *(const float *)args[5];\n"
    "  float *y = (float *)args[6];\n"
    "  float *stats = (float *)args[7];\n"
    "  const int64_t M = syms[0], N = syms[1], K = syms[2];\n"
    "  char *ws = (char *)workspace;\n"
    "  /* workspace plan: acc[BM, BN_MAX] f32 @0, t[BM, BN_MAX] f32 @16384,\n"
    "   * red[BM] f32 @32768, red2[BM] f32 @32832, h16[BM, BN_MAX] bf16 @32896 */\n"
    "  float *acc = (float *)(ws + 0);\n"
    "  float *t = (float *)(ws + 16384);\n"
    "  float *red = (float *)(ws + 32768);\n"
    "  float *red2 = (float *)(ws + 32832);\n"
    "  uint16_t *h16 = (uint16_t *)(ws + 32896);\n"
    "\n"
    "  if (p->version != TPK_PRIMS_VERSION) return tpk_fail(err, \"fused_block: primitive table version mismatch\");\n"
    "  /* line 3: assert N <= 256 */\n"
    "  if (N > BN_MAX) return tpk_fail(err, \"fused_block: N exceeds the tile width planned (256)\");\n"
    "  if (M < 0 || K < 0) return tpk_fail(err, \"fused_block: negative shape\");\n"
    "\n"
    "  /* line 5: for i in tiles(M, BM): */\n"
    "  for (int64_t i0 = 0; i0 < M; i0 += BM) {\n"
    "    const int64_t bm = tpk_min(BM, M - i0);\n"
    "\n"
    "    /* line 6: acc = x[i, :] @ w */\n"
    "    p->gemm_f32(bm, N, K, x + i0 * K, K, 0, w, N, 0, acc, N, 0);\n"
    "\n"
    "    /* line 7: h = acc + bias */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      float *row = acc + r * N;\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        row[c] = row[c] + bias[c];\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 8: g = gelu(h)  (tanh form) */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        t[r * N + c] = tpk_gelu_inner(acc[r * N + c]);\n"
    "      }\n"
    "    }\n"
    "    p->unary_f32(TPK_PRIM_TANH, t, t, bm * N);\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        const float v = acc[r * N + c];\n"
    "        acc[r * N + c] = 0.5f * v * (1.0f + t[r * N + c]);\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 9: m = max(g, axis=1) */\n"
    "    p->reduce_f32(TPK_PRIM_MAX, acc, bm, N, 1, red);\n"
    "\n"
    "    /* line 10: e = exp(g - m[:, None]) */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      const float m = red[r];\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        t[r * N + c] = acc[r * N + c] - m;\n"
    "      }\n"
    "    }\n"
    "    p->unary_f32(TPK_PRIM_EXP, t, t, bm * N);\n"
    "\n"
    "    /* line 11: s = sum(e, axis=1) */\n"
    "    p->reduce_f32(TPK_PRIM_SUM, t, bm, N, 1, red2);\n"
    "\n"
    "    /* line 12: sm = e / s[:, None] */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      const float inv = 1.0f / red2[r];\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        t[r * N + c] = t[r * N + c] * inv;\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 13: z = g + sm */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        acc[r * N + c] = acc[r * N + c] + t[r * N + c];\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 14: mu = mean(z, axis=1) */\n"
    "    p->reduce_f32(TPK_PRIM_SUM, acc, bm, N, 1, red);\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      red[r] = red[r] / (float)N;\n"
    "    }\n"
    "\n"
    "    /* line 15: d = z - mu[:, None] */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      const float mu = red[r];\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        acc[r * N + c] = acc[r * N + c] - mu;\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 16: var = mean(d * d, axis=1) */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        const float d = acc[r * N + c];\n"
    "        t[r * N + c] = d * d;\n"
    "      }\n"
    "    }\n"
    "    p->reduce_f32(TPK_PRIM_SUM, t, bm, N, 1, red2);\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      red2[r] = red2[r] / (float)N + eps;\n"
    "    }\n"
    "\n"
    "    /* line 17: rs = rsqrt(var + eps) */\n"
    "    p->unary_f32(TPK_PRIM_RSQRT, red2, red2, bm);\n"
    "\n"
    "    /* line 18: stats[i, :] = (mu, rs) */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      stats[(i0 + r) * 2 + 0] = red[r];\n"
    "      stats[(i0 + r) * 2 + 1] = red2[r];\n"
    "    }\n"
    "\n"
    "    /* line 19: n = d * rs[:, None] * gamma + beta */\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      const float rs = red2[r];\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        const float v = acc[r * N + c] * rs;\n"
    "        acc[r * N + c] = v * gamma[c] + beta[c];\n"
    "      }\n"
    "    }\n"
    "\n"
    "    /* line 20: q = bf16(n) */\n"
    "    p->convert(TPK_PRIM_F32, TPK_PRIM_BF16, acc, h16, bm * N);\n"
    "\n"
    "    /* line 21: y[i, :] = f32(q) clamped to [-8, 8] */\n"
    "    p->convert(TPK_PRIM_BF16, TPK_PRIM_F32, h16, t, bm * N);\n"
    "    for (int64_t r = 0; r < bm; r++) {\n"
    "      float *out = y + (i0 + r) * N;\n"
    "      for (int64_t c = 0; c < N; c++) {\n"
    "        float v = t[r * N + c];\n"
    "        if (v > 8.0f) v = 8.0f;\n"
    "        if (v < -8.0f) v = -8.0f;\n"
    "        out[c] = v;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "\n"
    "  /* line 23: for j in range(N): column checksum into the last stats row */\n"
    "  if (M > 0) {\n"
    "    float colsum = 0.0f;\n"
    "    for (int64_t j = 0; j < N; j++) {\n"
    "      float s = 0.0f;\n"
    "      for (int64_t i = 0; i < M; i++) {\n"
    "        s = s + y[i * N + j];\n"
    "      }\n"
    "      colsum = colsum + s * (float)(j + 1);\n"
    "    }\n"
    "    /* line 24: a stats entry nobody reads carries the checksum */\n"
    "    stats[(M - 1) * 2 + 0] = stats[(M - 1) * 2 + 0] + 0.0f * colsum;\n"
    "  }\n"
    "\n"
    "  /* line 26: integer index work: a histogram of the sign pattern per tile */\n"
    "  {\n"
    "    int32_t hist[4] = {0, 0, 0, 0};\n"
    "    for (int64_t i = 0; i < M; i++) {\n"
    "      for (int64_t j = 0; j + 1 < N; j += 2) {\n"
    "        const int a = y[i * N + j] > 0.0f;\n"
    "        const int b = y[i * N + j + 1] > 0.0f;\n"
    "        hist[(a << 1) | b] += 1;\n"
    "      }\n"
    "    }\n"
    "    /* line 27: the histogram must cover every pair */\n"
    "    int64_t total = (int64_t)hist[0] + hist[1] + hist[2] + hist[3];\n"
    "    if (total != M * (N / 2)) return tpk_fail(err, \"fused_block: histogram lost pairs\");\n"
    "  }\n"
    "  return 0;\n"
    "}\n";

enum { K_M = 45, K_N = 96, K_K = 40 };

typedef struct K200Data {
  float x[K_M * K_K], w[K_K * K_N], bias[K_N], gamma[K_N], beta[K_N], eps;
  float y[K_M * K_N], stats[K_M * 2];
  _Alignas(64) char workspace[40960];
} K200Data;

static void k200_init(K200Data *d) {
  memset(d, 0, sizeof *d);
  uint32_t s = 12345;
  for (int i = 0; i < K_M * K_K; i++) s = s * 1664525u + 1013904223u, d->x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
  for (int i = 0; i < K_K * K_N; i++) s = s * 1664525u + 1013904223u, d->w[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
  for (int i = 0; i < K_N; i++) d->bias[i] = 0.01f * (float)i, d->gamma[i] = 1.0f + 0.001f * (float)i, d->beta[i] = 0.1f;
  d->eps = 1e-5f;
}

static void k200_run(TpkCode *code, K200Data *d) {
  void *args[] = {d->x, d->w, d->bias, d->gamma, d->beta, &d->eps, d->y, d->stats};
  int64_t syms[] = {K_M, K_N, K_K};
  char err[TPK_KERNEL_ERR_LEN] = "";
  assert_int_equal(tpk_code_entry(code)(&test_prims, args, syms, d->workspace, err), 0);
  for (int i = 0; i < K_M * K_N; i++) assert_true(isfinite(d->y[i]) && fabsf(d->y[i]) <= 8.0f);
}

/* ---- helpers ---- */

static double now_ms(void) { return tpk_now_seconds() * 1e3; }

/* CPU time of this thread: compile latency without the noise of a busy machine. */
static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Entries of dir: how many end in .so (the last one's path in so_path), and
 * how many others there are (left-over build folders), besides the lock. */
static int count_entries(const char *dir, char *so_path, size_t size, int *others) {
  int n = 0;
  *others = 0;
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "lock")) continue;
    if (len > 3 && !strcmp(e->d_name + len - 3, ".so")) {
      n++;
      if (so_path) snprintf(so_path, size, "%s/%s", dir, e->d_name);
    } else {
      (*others)++;
    }
  }
  closedir(d);
  return n;
}

static TpkJit *new_jit(TpkTier tier, int hot_calls, const char *cache_dir, const char *cc) {
  TpkJitOptions o = {.tier = tier, .hot_calls = hot_calls, .cache_dir = cache_dir, .cc = cc};
  TpkJit *j = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_jit_create(&o, &j, &err), TPK_OK);
  assert_non_null(j);
  return j;
}

/* A JIT with the key file `key` (NULL: the per-user key) and a size limit
 * (0: the default). */
static TpkJit *new_keyed_jit(TpkTier tier, const char *cache_dir, const char *key, int64_t max) {
  TpkJitOptions o = {.tier = tier, .hot_calls = -1, .cache_dir = cache_dir, .key_file = key, .cache_max = max};
  TpkJit *j = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_jit_create(&o, &j, &err), TPK_OK);
  assert_non_null(j);
  return j;
}

static TpkCode *compile_ok(TpkJit *j, const char *source, const char *entry) {
  TpkCode *c = NULL;
  TpkError err = {0};
  TpkStatus st = tpk_jit_compile(j, source, entry, &c, &err);
  if (st != TPK_OK) fail_msg("compile failed: %s", err.message);
  assert_non_null(c);
  return c;
}

static void assert_stats(TpkJit *j, int tcc, int cc, int hits, int failures) {
  TpkJitStats s = tpk_jit_stats(j);
  if (s.tcc_compiles != tcc || s.cc_compiles != cc || s.cache_hits != hits || s.cc_failures != failures)
    fail_msg("stats tcc %d cc %d hits %d failures %d, expected %d %d %d %d", s.tcc_compiles, s.cc_compiles,
             s.cache_hits, s.cc_failures, tcc, cc, hits, failures);
}

/* The cache's counters beyond those of assert_stats. */
static void assert_cache_stats(TpkJit *j, int misses, int rejects) {
  TpkJitStats s = tpk_jit_stats(j);
  if (s.cache_misses != misses || s.cache_rejects != rejects)
    fail_msg("cache misses %d rejects %d, expected %d %d", s.cache_misses, s.cache_rejects, misses, rejects);
}

static void write_bytes(const char *path, const void *data, size_t n, mode_t mode) {
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  assert_int_equal(close(fd), 0);
  assert_int_equal(chmod(path, mode), 0); /* whatever the umask */
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  unsigned char *buf = malloc((size_t)st.st_size + 1);
  assert_non_null(buf);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
  fclose(f);
  *n = (size_t)st.st_size;
  return buf;
}

/* A key file of n bytes (all `fill`) with mode `mode`, as dir/name; returns
 * its path (heap). */
static char *make_key(const char *dir, const char *name, size_t n, unsigned char fill, mode_t mode) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unsigned char key[8192];
  assert_true(n <= sizeof key);
  memset(key, fill, n);
  write_bytes(path, key, n, mode);
  return strdup(path);
}

/* SHA-256 of a file by the system's sha256sum: an outside opinion. */
static void sha256_of_file(const char *path, unsigned char out[32]) {
  char cmd[1200], hex[65] = "";
  snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  assert_int_equal(fscanf(p, "%64s", hex), 1);
  pclose(p);
  for (int i = 0; i < 32; i++) {
    unsigned v;
    assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
    out[i] = (unsigned char)v;
  }
}

/* The path of the only entry of dir. */
static void only_entry(const char *dir, char *path, size_t size) {
  int others;
  assert_int_equal(count_entries(dir, path, size, &others), 1);
}

/* ---- tests ---- */

static void test_tcc_compiles_and_runs(void **state) {
  (void)state;
  char src[2048];
  add_source(src, sizeof src, 1);
  TpkJit *j = new_jit(TPK_TIER_TCC, -1, "", NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  for (int i = 0; i < 10; i++) run_add(c, 1, NULL); /* never promoted with TPK_TIER_TCC */
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  assert_null(tpk_code_cc_error(c));

  /* The kernel's own error path. */
  float x = 0;
  void *args[] = {&x, &x, &x};
  int64_t syms[] = {-1};
  char err[TPK_KERNEL_ERR_LEN] = "";
  assert_int_equal(tpk_code_entry(c)(&test_prims, args, syms, NULL, err), 1);
  assert_string_equal(err, "add_kernel: negative n");
  assert_stats(j, 1, 0, 0, 0);
  tpk_jit_destroy(j);
}

static void test_cc_tier_compiles_with_cc(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048], so[1024];
  add_source(src, sizeof src, 2);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  run_add(c, 2, NULL);
  assert_stats(j, 0, 1, 0, 0);
  int others;
  assert_int_equal(count_entries(dir, so, sizeof so, &others), 1);
  assert_int_equal(others, 0); /* the build folder is gone */
  struct stat st;
  assert_int_equal(stat(so, &st), 0);
  assert_int_equal(st.st_mode & 022, 0); /* only we may write it */
  assert_false(tpk_code_from_cache(c));
  assert_null(tpk_code_note(c));
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

static void test_cc_tier_without_cache_leaves_nothing(void **state) {
  (void)state;
  char *tmp = test_temp_dir("tpk-test-jit");
  char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  setenv("TMPDIR", tmp, 1);
  char src[2048];
  add_source(src, sizeof src, 3);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, "", NULL);
  if (old) setenv("TMPDIR", old, 1);
  else unsetenv("TMPDIR");
  free(old);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  run_add(c, 3, NULL);
  int others;
  assert_int_equal(count_entries(tmp, NULL, 0, &others), 0);
  assert_int_equal(others, 0);
  tpk_jit_destroy(j);
  test_remove_tree(tmp);
  free(tmp);
}

static void test_auto_promotes_after_hot_calls(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048];
  add_source(src, sizeof src, 4);
  TpkJit *j = new_jit(TPK_TIER_AUTO, 3, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  float first[ADD_N], later[ADD_N];
  run_add(c, 4, first);
  run_add(c, 4, NULL);
  tpk_code_wait_optimized(c); /* nothing pending yet: returns at once */
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  assert_stats(j, 1, 0, 0, 0);
  run_add(c, 4, NULL); /* the third call queues the promotion */
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  run_add(c, 4, later);
  assert_memory_equal(first, later, sizeof first);
  assert_stats(j, 1, 1, 0, 0);
  assert_null(tpk_code_cc_error(c));
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

static void test_cache_hit_in_second_jit(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048];
  add_source(src, sizeof src, 5);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  run_add(compile_ok(j, src, "add_kernel"), 5, NULL);
  assert_stats(j, 0, 1, 0, 0);
  tpk_jit_destroy(j);

  /* auto: a cached build is used at once, with neither compiler, and it
   * says so */
  j = new_jit(TPK_TIER_AUTO, -1, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  assert_true(tpk_code_from_cache(c));
  run_add(c, 5, NULL);
  assert_stats(j, 0, 0, 1, 0);
  assert_cache_stats(j, 0, 0);

  /* a different source misses */
  add_source(src, sizeof src, 6);
  c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  assert_stats(j, 1, 0, 1, 0);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

/* A JIT of the cc tier building for instruction set `isa` (NULL: the
 * widest this CPU has), or NULL when this CPU cannot run that set. */
static TpkJit *new_isa_jit(const char *cache_dir, const char *isa) {
  TpkJitOptions o = {.tier = TPK_TIER_CC, .hot_calls = -1, .cache_dir = cache_dir, .isa = isa};
  TpkJit *j = NULL;
  TpkError err = {0};
  TpkStatus st = tpk_jit_create(&o, &j, &err);
  if (st != TPK_OK) {
    assert_int_equal(st, TPK_ERR_INVALID);
    assert_non_null(strstr(err.message, "this CPU cannot run code built for it"));
    assert_null(j);
  }
  return j;
}

/* A cache folder shared by machines with different CPUs: what one built
 * for its widest instruction set (AVX-512 here) is a miss for a machine
 * building for another (played by a JIT asked for the baseline), which
 * builds and stores its own beside it, never loads it; the first finds its
 * own entry again. */
static void test_entry_of_another_isa_is_a_miss(void **state) {
  (void)state;
  TpkJit *wide = new_isa_jit("", "avx512");
  if (!wide) wide = new_isa_jit("", "avx2");
  if (!wide) skip(); /* this CPU has the baseline only: no other set to play */
  tpk_jit_destroy(wide);
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048];
  add_source(src, sizeof src, 9);
  const uint64_t key[] = {0x15a, 9};
  TpkError err = {0};
  for (int round = 0; round < 3; round++) {
    TpkJit *j = new_isa_jit(dir, round == 1 ? "generic" : NULL);
    TpkCode *loaded = NULL;
    tpk_jit_load(j, key, 2, "add_kernel", &loaded);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    if (round == 2) { /* the widest set's entries are still there */
      assert_non_null(loaded);
      assert_true(tpk_code_from_cache(c));
      assert_stats(j, 0, 0, 2, 0);
      tpk_code_release(loaded);
    } else { /* nothing for this set yet: both built */
      assert_null(loaded);
      assert_false(tpk_code_from_cache(c));
      TpkCode *k = NULL;
      assert_int_equal(tpk_jit_compile_keyed(j, key, 2, src, "add_kernel", &k, &err), TPK_OK);
      assert_false(tpk_code_from_cache(k));
      assert_stats(j, 0, 2, 0, 0);
      assert_cache_stats(j, 2, 0);
      run_add(k, 9, NULL);
      tpk_code_release(k);
    }
    run_add(c, 9, NULL);
    tpk_jit_destroy(j);
  }
  test_remove_tree(dir);
  free(dir);
}

/* Entry i of code c, run as run_add runs its kernel. */
static void run_entry(TpkCode *c, int i, int offset) {
  float a[ADD_N], b[ADD_N], y[ADD_N];
  for (int k = 0; k < ADD_N; k++) a[k] = (float)k * 0.5f, b[k] = (float)(k % 5);
  void *args[] = {a, b, y};
  int64_t syms[] = {ADD_N};
  char err[TPK_KERNEL_ERR_LEN] = "";
  TpkKernelFn fn = tpk_code_entry_at(c, i);
  assert_non_null(fn);
  assert_int_equal(fn(&test_prims, args, syms, NULL, err), 0);
  for (int k = 0; k < ADD_N; k++) assert_true(y[k] == sqrtf(a[k] + b[k]) + (float)offset);
}

/* One source of two kernels (add_source's at offsets 7 and 8, named add_a
 * and add_b), for tpk_jit_compile_all. */
static char *two_kernels(void) {
  static char text[8192];
  char one[2048], two[2048];
  add_source(one, sizeof one, 7);
  add_source(two, sizeof two, 8);
  TpkStr s = {0};
  for (int k = 0; k < 2; k++) {
    const char *src = k ? strchr(two, '\n') + 1 : one; /* one include */
    const char *name = k ? "add_b" : "add_a";
    for (const char *at; (at = strstr(src, "add_kernel"));) {
      tpk_str_putn(&s, src, (size_t)(at - src));
      tpk_str_puts(&s, name);
      src = at + strlen("add_kernel");
    }
    tpk_str_puts(&s, src);
  }
  assert_false(s.failed);
  snprintf(text, sizeof text, "%s", s.data);
  tpk_str_free(&s);
  return text;
}

/* Kernels compiled as one code object (tpk_jit_compile_all): one compile
 * per tier, promoted whole by the calls of any entry, one cache entry that
 * a later JIT loads by the key and entries (tpk_jit_load_all); other
 * entries under the same key are another entry. */
static void test_code_of_several_kernels(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  const uint64_t key[] = {41, 42};
  const char *entries[] = {"add_a", "add_b"};
  TpkJit *j = new_jit(TPK_TIER_AUTO, 2, dir, NULL);
  TpkCode *c = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_jit_compile_all(j, key, 2, two_kernels(), entries, 2, &c, &err), TPK_OK);
  assert_int_equal(tpk_code_entries(c), 2);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  assert_null(tpk_code_workspace_at(c, 1)); /* the source defines none */
  run_entry(c, 0, 7);
  run_entry(c, 1, 8); /* the second call, of either entry: promoted */
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  run_entry(c, 0, 7);
  run_entry(c, 1, 8);
  assert_stats(j, 1, 1, 0, 0);
  int others;
  assert_int_equal(count_entries(dir, NULL, 0, &others), 1);
  tpk_code_retain(c); /* a second holder: the code lives until both let go */
  tpk_code_release(c);
  run_entry(c, 1, 8);
  tpk_code_release(c);
  tpk_jit_destroy(j);

  j = new_jit(TPK_TIER_AUTO, 2, dir, NULL);
  tpk_jit_load_all(j, key, 2, entries, 2, &c);
  assert_non_null(c);
  assert_true(tpk_code_from_cache(c));
  run_entry(c, 1, 8);
  run_entry(c, 0, 7);
  tpk_code_release(c);
  const char *swapped[] = {"add_b", "add_a"};
  TpkCode *other = NULL;
  tpk_jit_load_all(j, key, 2, swapped, 2, &other);
  assert_null(other);
  tpk_jit_load_all(j, key, 2, entries, 1, &other);
  assert_null(other);
  assert_stats(j, 0, 0, 1, 0);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

/* Builds of one entry name from different sources (one kernel at two
 * shapes) each run their own code when loaded one after another: loading
 * through /proc/self/fd/N must not hand back an earlier build that was
 * loaded when its descriptor had the same number. */
static void test_builds_of_one_entry_load_apart(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[4][2048];
  for (int i = 0; i < 4; i++) add_source(src[i], sizeof src[i], 11 + i);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *built[4];
  for (int i = 0; i < 4; i++) built[i] = compile_ok(j, src[i], "add_kernel");
  for (int i = 0; i < 4; i++) run_add(built[i], 11 + i, NULL);
  assert_stats(j, 0, 4, 0, 0);
  tpk_jit_destroy(j);
  j = new_jit(TPK_TIER_AUTO, -1, dir, NULL); /* all four from the cache */
  for (int i = 0; i < 4; i++) built[i] = compile_ok(j, src[i], "add_kernel");
  for (int i = 0; i < 4; i++) run_add(built[i], 11 + i, NULL);
  assert_stats(j, 0, 0, 4, 0);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

typedef enum Damage { TRUNCATE, GARBAGE, FLIP_BYTE, EMPTY, DROP_TRAILER } Damage;

static void damage_file(const char *path, Damage how) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  size_t size = (size_t)st.st_size;
  FILE *f;
  switch (how) {
  case TRUNCATE: assert_int_equal(truncate(path, (off_t)(size / 2)), 0); break;
  case EMPTY: assert_int_equal(truncate(path, 0), 0); break;
  case DROP_TRAILER: assert_int_equal(truncate(path, (off_t)(size - 40)), 0); break;
  case GARBAGE:
    f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < size; i++) fputc((int)((i * 131) & 0xff), f);
    fclose(f);
    break;
  case FLIP_BYTE:
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, (long)(size / 2), SEEK_SET);
    int ch = fgetc(f);
    fseek(f, (long)(size / 2), SEEK_SET);
    fputc(ch ^ 0x5a, f);
    fclose(f);
    break;
  }
}

/* Builds loaded from the cache in one process, with one entry name and
 * different code (one kernel at several sizes or tunables), each keep their
 * own code. (They were once loaded through the same /proc/self/fd/N name,
 * which the dynamic loader took for the object it had already loaded.) */
static void test_cached_builds_of_one_entry_stay_apart(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048];
  TpkCode *c[3];
  for (int round = 0; round < 2; round++) {
    /* built and stored, then loaded from the cache by a second JIT */
    TpkJit *j = new_jit(round == 0 ? TPK_TIER_CC : TPK_TIER_AUTO, -1, dir, NULL);
    for (int i = 0; i < 3; i++) {
      add_source(src, sizeof src, 20 + i);
      c[i] = compile_ok(j, src, "add_kernel");
      assert_int_equal(tpk_code_tier(c[i]), TPK_TIER_CC);
    }
    for (int i = 0; i < 3; i++) run_add(c[i], 20 + i, NULL);
    assert_stats(j, 0, round == 0 ? 3 : 0, round == 0 ? 0 : 3, 0);
    tpk_jit_destroy(j);
  }
  test_remove_tree(dir);
  free(dir);
}

static void test_damaged_cache_file_is_rebuilt(void **state) {
  (void)state;
  const Damage kinds[] = {TRUNCATE, GARBAGE, FLIP_BYTE, EMPTY, DROP_TRAILER};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    char *dir = test_temp_dir("tpk-test-jit");
    char src[2048], so[1024];
    add_source(src, sizeof src, 7);
    TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
    compile_ok(j, src, "add_kernel");
    tpk_jit_destroy(j);
    int others;
    assert_int_equal(count_entries(dir, so, sizeof so, &others), 1);
    damage_file(so, kinds[k]);

    j = new_jit(TPK_TIER_CC, -1, dir, NULL);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    run_add(c, 7, NULL);
    assert_stats(j, 0, 1, 0, 0); /* not loaded: rebuilt */
    tpk_jit_destroy(j);

    j = new_jit(TPK_TIER_CC, -1, dir, NULL); /* and the rebuilt file is good */
    run_add(compile_ok(j, src, "add_kernel"), 7, NULL);
    assert_stats(j, 0, 0, 1, 0);
    tpk_jit_destroy(j);
    test_remove_tree(dir);
    free(dir);
  }
}

/* RFC 4231's test vectors for HMAC-SHA256 (case 5's output is truncated to
 * 128 bits there). */
static void test_hmac_sha256_rfc4231(void **state) {
  (void)state;
  unsigned char k0b[20], kaa[20], k25[25], k0c[20], k131[131], ddd[50], dcd[50];
  memset(k0b, 0x0b, sizeof k0b);
  memset(kaa, 0xaa, sizeof kaa);
  memset(k0c, 0x0c, sizeof k0c);
  memset(k131, 0xaa, sizeof k131);
  memset(ddd, 0xdd, sizeof ddd);
  memset(dcd, 0xcd, sizeof dcd);
  for (int i = 0; i < 25; i++) k25[i] = (unsigned char)(i + 1);
  static const char d7[] = "This is a test using a larger than block-size key and a larger than block-size data. "
                           "The key needs to be hashed before being used by the HMAC algorithm.";
  static const char d6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
  const struct {
    const void *key;
    size_t klen;
    const void *msg;
    size_t mlen;
    const char *hex;
  } v[] = {
      {k0b, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", 4, "what do ya want for nothing?", 28,
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {kaa, 20, ddd, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {k25, 25, dcd, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {k0c, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"},
      {k131, 131, d6, sizeof d6 - 1, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {k131, 131, d7, sizeof d7 - 1, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    unsigned char mac[32];
    char hex[65];
    tpk_jit_hmac_sha256(v[i].key, v[i].klen, v[i].msg, v[i].mlen, mac);
    for (int b = 0; b < 32; b++) snprintf(hex + 2 * b, 3, "%02x", mac[b]);
    if (strncmp(hex, v[i].hex, strlen(v[i].hex)) != 0) fail_msg("RFC 4231 case %zu: %s, expected %s", i + 1, hex, v[i].hex);
  }
}

/* The hole of issue 10: whoever could write the cache folder could put a
 * shared object there under a kernel's entry name, with the unkeyed
 * trailer the cache checked (a magic tag and the SHA-256 of the rest), and
 * tpk loaded and ran it. Planted entries, with the old tag or today's, are
 * compiled over, never run. */
static void test_planted_entry_is_not_loaded(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit"), *evil_dir = test_temp_dir("tpk-test-jit");
  char src[2048], evil[2048], entry[1024], evil_entry[1024], body_path[1100];
  add_source(src, sizeof src, 8);
  add_source(evil, sizeof evil, 99); /* the code to plant: cc's build of another kernel */
  TpkJit *j = new_jit(TPK_TIER_CC, -1, evil_dir, NULL);
  compile_ok(j, evil, "add_kernel");
  tpk_jit_destroy(j);
  only_entry(evil_dir, evil_entry, sizeof evil_entry);
  size_t n;
  unsigned char *evil_bytes = read_bytes(evil_entry, &n);
  size_t body = n - 40; /* without its trailer */
  snprintf(body_path, sizeof body_path, "%s/body", evil_dir);
  write_bytes(body_path, evil_bytes, body, 0600);
  unsigned char sha[32];
  sha256_of_file(body_path, sha);

  j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  compile_ok(j, src, "add_kernel");
  tpk_jit_destroy(j);
  only_entry(dir, entry, sizeof entry);
  const char *const tags[] = {"TPKJIT01", "TPKJIT02"};
  for (int t = 0; t < 2; t++) {
    unsigned char *planted = malloc(body + 40);
    assert_non_null(planted);
    memcpy(planted, evil_bytes, body);
    memcpy(planted + body, tags[t], 8);
    memcpy(planted + body + 8, sha, 32);
    write_bytes(entry, planted, body + 40, 0600);
    free(planted);
    j = new_jit(TPK_TIER_CC, -1, dir, NULL);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    run_add(c, 8, NULL); /* our kernel's code, not the planted one */
    assert_false(tpk_code_from_cache(c));
    assert_null(tpk_code_note(c));
    assert_stats(j, 0, 1, 0, 0);
    assert_cache_stats(j, 1, 1);
    tpk_jit_destroy(j);
  }
  /* the rebuild replaced the planted file, and loads */
  j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  run_add(c, 8, NULL);
  assert_true(tpk_code_from_cache(c));
  assert_stats(j, 0, 0, 1, 0);
  assert_cache_stats(j, 0, 0);
  tpk_jit_destroy(j);
  free(evil_bytes);
  test_remove_tree(dir);
  test_remove_tree(evil_dir);
  free(dir);
  free(evil_dir);
}

/* An entry authenticates only under the key it was built with. */
static void test_entry_of_another_key_is_not_loaded(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit"), *keys = test_temp_dir("tpk-test-jit");
  char *k1 = make_key(keys, "one.key", 32, 0x11, 0600), *k2 = make_key(keys, "two.key", 64, 0x22, 0600);
  char src[2048];
  add_source(src, sizeof src, 40);
  TpkJit *j = new_keyed_jit(TPK_TIER_CC, dir, k1, 0);
  run_add(compile_ok(j, src, "add_kernel"), 40, NULL);
  tpk_jit_destroy(j);

  j = new_keyed_jit(TPK_TIER_CC, dir, k2, 0); /* not loaded: rebuilt under key 2 */
  TpkCode *c = compile_ok(j, src, "add_kernel");
  run_add(c, 40, NULL);
  assert_false(tpk_code_from_cache(c));
  assert_stats(j, 0, 1, 0, 0);
  assert_cache_stats(j, 1, 1);
  TpkJitCacheInfo info;
  TpkError err = {0};
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_true(info.in_use);
  assert_string_equal(info.key_file, k2);
  assert_int_equal(info.entries, 1);
  tpk_jit_destroy(j);

  j = new_keyed_jit(TPK_TIER_CC, dir, k2, 0);
  run_add(compile_ok(j, src, "add_kernel"), 40, NULL);
  assert_stats(j, 0, 0, 1, 0);
  tpk_jit_destroy(j);

  j = new_keyed_jit(TPK_TIER_AUTO, dir, k1, 0); /* key 2's entry under key 1: tcc instead */
  c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  run_add(c, 40, NULL);
  assert_stats(j, 1, 0, 0, 0);
  assert_cache_stats(j, 1, 1);
  tpk_jit_destroy(j);
  free(k1);
  free(k2);
  test_remove_tree(keys);
  test_remove_tree(dir);
  free(keys);
  free(dir);
}

/* The MAC covers which kernel an entry is: kernel A's authentic entry
 * renamed to kernel B's name is refused, and B is built. */
static void test_renamed_entry_is_refused(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char a[2048], b[2048], a_entry[1024], b_entry[1024];
  add_source(a, sizeof a, 30);
  add_source(b, sizeof b, 31);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  compile_ok(j, a, "add_kernel");
  only_entry(dir, a_entry, sizeof a_entry);
  compile_ok(j, b, "add_kernel");
  tpk_jit_destroy(j);
  char moved[1100];
  snprintf(moved, sizeof moved, "%s.a", a_entry);
  assert_int_equal(rename(a_entry, moved), 0);
  only_entry(dir, b_entry, sizeof b_entry);
  assert_int_equal(rename(moved, b_entry), 0); /* A's bytes under B's name */

  j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *c = compile_ok(j, b, "add_kernel");
  run_add(c, 31, NULL);
  assert_false(tpk_code_from_cache(c));
  assert_stats(j, 0, 1, 0, 0);
  assert_cache_stats(j, 1, 1);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

/* A key file is used only when it is a regular file of 32 to 4096 bytes,
 * yours or root's, that neither its group nor others can write, others
 * cannot read, and that is not inside the cache folder. Otherwise the
 * cache is off with a note, and kernels still compile and run. */
static void test_key_files_that_are_refused(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit"), *keys = test_temp_dir("tpk-test-jit");
  char inside[1100], missing[1100], folder[1100];
  snprintf(missing, sizeof missing, "%s/missing.key", keys);
  snprintf(folder, sizeof folder, "%s/folder.key", keys);
  assert_int_equal(mkdir(folder, 0700), 0);
  char *world = make_key(keys, "world.key", 32, 1, 0604);
  char *group_w = make_key(keys, "group-w.key", 32, 2, 0620);
  char *other_w = make_key(keys, "other-w.key", 32, 3, 0602);
  char *shorter = make_key(keys, "short.key", 16, 4, 0600);
  char *longer = make_key(keys, "long.key", 4097, 5, 0600);
  char *in_cache = make_key(dir, "cache.key", 32, 6, 0600);
  snprintf(inside, sizeof inside, "%s", in_cache);
  const struct {
    const char *key, *says;
  } refused[] = {
      {world, "can be read by others"},
      {group_w, "can be written by its group or by others"},
      {other_w, "can be written by its group or by others"},
      {shorter, "holds 16 bytes, not 32 to 4096"},
      {longer, "holds 4097 bytes, not 32 to 4096"},
      {inside, "is inside the cache folder"},
      {missing, "cannot be read: No such file or directory"},
      {folder, "is not a regular file"},
  };
  char src[2048];
  add_source(src, sizeof src, 41);
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    TpkJit *j = new_keyed_jit(TPK_TIER_CC, dir, refused[i].key, 0);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    run_add(c, 41, NULL);
    const char *note = tpk_code_note(c);
    if (!note || !strstr(note, refused[i].says) || !strstr(note, refused[i].key) ||
        !strstr(note, ": the compilation cache is off"))
      fail_msg("key %s: note '%s', expected one saying '%s'", refused[i].key, note ? note : "(none)", refused[i].says);
    TpkJitCacheInfo info;
    TpkError err = {0};
    assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
    assert_false(info.in_use);
    assert_string_equal(info.note, note);
    assert_null(info.key_file);
    assert_stats(j, 0, 1, 0, 0);
    tpk_jit_destroy(j);
    int others;
    assert_int_equal(count_entries(dir, NULL, 0, &others), 0); /* nothing stored */
  }
  assert_int_equal(access(missing, F_OK), -1); /* a key file one names is never made */

  /* another user's key (only root can arrange that) */
  if (geteuid() == 0) {
    char *theirs = make_key(keys, "theirs.key", 32, 7, 0600);
    assert_int_equal(chown(theirs, 65534, 65534), 0);
    TpkJit *j = new_keyed_jit(TPK_TIER_CC, dir, theirs, 0);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    run_add(c, 41, NULL);
    assert_non_null(tpk_code_note(c));
    assert_non_null(strstr(tpk_code_note(c), "belongs to another user (uid 65534)"));
    tpk_jit_destroy(j);
    free(theirs);
  }

  /* a team key may be group-readable; read-only is fine */
  char *team = make_key(keys, "team.key", 32, 8, 0640), *ro = make_key(keys, "ro.key", 100, 9, 0400);
  const char *good[] = {team, ro};
  for (int i = 0; i < 2; i++) {
    TpkJit *j = new_keyed_jit(TPK_TIER_CC, dir, good[i], 0);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    assert_null(tpk_code_note(c));
    tpk_jit_destroy(j);
    int others;
    assert_int_equal(count_entries(dir, NULL, 0, &others), 1);
  }
  char *all[] = {world, group_w, other_w, shorter, longer, in_cache, team, ro};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  test_remove_tree(keys);
  test_remove_tree(dir);
  free(keys);
  free(dir);
}

typedef struct KeyJob {
  const char *dir;
  int offset;
  TpkStatus status;
} KeyJob;

static void *build_with_default_key(void *arg) {
  KeyJob *job = arg;
  TpkJitOptions o = {.tier = TPK_TIER_CC, .hot_calls = -1, .cache_dir = job->dir};
  TpkJit *j = NULL;
  TpkCode *c = NULL;
  TpkError err;
  char src[2048];
  add_source(src, sizeof src, job->offset);
  job->status = tpk_jit_create(&o, &j, &err);
  if (job->status == TPK_OK) job->status = tpk_jit_compile(j, src, "add_kernel", &c, &err);
  if (job->status == TPK_OK && (tpk_code_note(c) || tpk_code_from_cache(c))) job->status = TPK_ERR_INTERNAL;
  tpk_jit_destroy(j);
  return NULL;
}

/* The per-user key is made on first use, 0600, under $XDG_CONFIG_HOME;
 * JITs starting at once (as processes would) agree on one key: each loads
 * what the others built. */
static void test_per_user_key_is_made_once(void **state) {
  (void)state;
  char *config = test_temp_dir("tpk-test-jit"), *dir = test_temp_dir("tpk-test-jit");
  char *old = strdup(getenv("XDG_CONFIG_HOME"));
  setenv("XDG_CONFIG_HOME", config, 1);
  enum { N = 4 };
  pthread_t th[N];
  KeyJob jobs[N];
  for (int t = 0; t < N; t++) {
    jobs[t] = (KeyJob){dir, 50 + t, TPK_ERR_INTERNAL};
    assert_int_equal(pthread_create(&th[t], NULL, build_with_default_key, &jobs[t]), 0);
  }
  for (int t = 0; t < N; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < N; t++) assert_int_equal(jobs[t].status, TPK_OK);
  char key[1100];
  snprintf(key, sizeof key, "%s/tpk/cache.key", config);
  struct stat st;
  assert_int_equal(stat(key, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, 32);
  char tpk_dir[1100];
  snprintf(tpk_dir, sizeof tpk_dir, "%s/tpk", config);
  int others;
  assert_int_equal(count_entries(tpk_dir, NULL, 0, &others), 0);
  assert_int_equal(others, 1); /* the key, and no temporary left */

  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  for (int t = 0; t < N; t++) {
    char src[2048];
    add_source(src, sizeof src, 50 + t);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    assert_true(tpk_code_from_cache(c));
    run_add(c, 50 + t, NULL);
  }
  assert_stats(j, 0, 0, N, 0);
  TpkJitCacheInfo info;
  TpkError err = {0};
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_string_equal(info.key_file, key);
  tpk_jit_destroy(j);
  setenv("XDG_CONFIG_HOME", old, 1);
  free(old);
  test_remove_tree(config);
  test_remove_tree(dir);
  free(config);
  free(dir);
}

/* A shared folder (a team's cache, others may write it) is used: the
 * trust is in the MAC, not in who owns a file or who may write it, and
 * what loads is the copy of the bytes that authenticated. */
static void test_shared_folder_entries_are_trusted_by_their_mac(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  assert_int_equal(chmod(dir, 0777), 0);
  char src[2048], so[1024];
  add_source(src, sizeof src, 9);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  run_add(c, 9, NULL);
  assert_null(tpk_code_note(c));
  tpk_jit_destroy(j);
  only_entry(dir, so, sizeof so);
  struct stat st;
  assert_int_equal(stat(so, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0644); /* readable by the team */

  assert_int_equal(chmod(so, 0666), 0);
  if (geteuid() == 0) assert_int_equal(chown(so, 65534, 65534), 0);
  j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  c = compile_ok(j, src, "add_kernel");
  run_add(c, 9, NULL);
  assert_true(tpk_code_from_cache(c));
  assert_stats(j, 0, 0, 1, 0);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

/* A cache folder nobody may write: a private one with mode 0500, or, for
 * root (whom modes do not stop), sysfs's /sys/kernel, which refuses new
 * files to everyone. *made is the folder to remove afterwards, or NULL. */
static const char *unwritable_folder(char **made) {
  *made = NULL;
  if (geteuid() != 0) {
    *made = test_temp_dir("tpk-test-jit");
    assert_int_equal(chmod(*made, 0500), 0);
    return *made;
  }
  char probe[] = "/sys/kernel/tpk-probe-XXXXXX";
  if (mkdtemp(probe)) {
    rmdir(probe);
    fail_msg("/sys/kernel takes new folders here: no unwritable folder to test with");
  }
  return "/sys/kernel";
}

/* With TPK_TIER=cc, a cache folder that cannot be written made the compile
 * fail; now the kernel is built in a private temporary folder, with a
 * note, in both tiers that use cc. */
static void test_unwritable_cache_folder_builds_without_it(void **state) {
  (void)state;
  char *made;
  const char *dir = unwritable_folder(&made);
  char src[2048], want[1100];
  add_source(src, sizeof src, 60);
  snprintf(want, sizeof want, "the cache folder %s is not writable: built without the cache", dir);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  run_add(c, 60, NULL);
  assert_non_null(tpk_code_note(c));
  assert_string_equal(tpk_code_note(c), want);
  assert_stats(j, 0, 1, 0, 0);
  tpk_jit_destroy(j);

  j = new_jit(TPK_TIER_AUTO, 0, dir, NULL); /* promoted in the background: the same */
  c = compile_ok(j, src, "add_kernel");
  assert_null(tpk_code_note(c));
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  assert_null(tpk_code_cc_error(c));
  assert_string_equal(tpk_code_note(c), want);
  run_add(c, 60, NULL);
  assert_stats(j, 1, 1, 0, 0);
  tpk_jit_destroy(j);
  if (made) {
    chmod(made, 0700);
    test_remove_tree(made);
    free(made);
  }
}

/* A folder sitting at an entry's path made the cc tier fail to store, and
 * so to compile; now the build is loaded anyway, with a note, and the
 * folder (not ours to remove) stays. */
static void test_folder_at_an_entry_path_builds_without_the_cache(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048], so[1024], inner[1100];
  add_source(src, sizeof src, 61);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  compile_ok(j, src, "add_kernel");
  tpk_jit_destroy(j);
  only_entry(dir, so, sizeof so);
  assert_int_equal(unlink(so), 0);
  assert_int_equal(mkdir(so, 0700), 0);
  snprintf(inner, sizeof inner, "%s/something", so);
  write_bytes(inner, "x", 1, 0600);
  for (int round = 0; round < 2; round++) {
    j = new_jit(round == 0 ? TPK_TIER_CC : TPK_TIER_AUTO, 0, dir, NULL);
    TpkCode *c = compile_ok(j, src, "add_kernel");
    tpk_code_wait_optimized(c);
    assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
    assert_null(tpk_code_cc_error(c));
    run_add(c, 61, NULL);
    const char *note = tpk_code_note(c);
    assert_non_null(note);
    assert_non_null(strstr(note, "cannot store"));
    assert_non_null(strstr(note, "Is a directory: built without the cache"));
    assert_false(tpk_code_from_cache(c));
    tpk_jit_destroy(j);
    struct stat st;
    assert_int_equal(stat(inner, &st), 0);
    int others;
    count_entries(dir, NULL, 0, &others);
    assert_int_equal(others, 0); /* no temporary file left */
  }
  test_remove_tree(dir);
  free(dir);
}

/* This host's name as build folder names carry it (host/jit.c). */
static void host_name(char *out, size_t size) {
  char h[65] = "";
  assert_int_equal(gethostname(h, sizeof h - 1), 0);
  size_t n = 0;
  for (const char *p = h; *p && n + 1 < size; p++) {
    char c = *p;
    out[n++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ? c : '_';
  }
  out[n] = 0;
}

/* dir/name as a build folder with a file in it, last changed `age` seconds ago. */
static void make_build_folder(const char *dir, const char *name, int age) {
  char path[4096], file[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(file, sizeof file, "%s/kernel.c", path);
  write_bytes(file, "int x;\n", 7, 0600);
  struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool exists_in(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* A process killed mid-compile left its build folder for good; now a
 * store removes the stale ones: a process of this host that is gone, and
 * quiet for 15 minutes, or any other for a day. A live process's folder
 * stays, whatever its age. */
static void test_stale_build_folders_are_removed(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char host[80], name[256];
  host_name(host, sizeof host);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  assert_true(dead > 0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  const struct {
    const char *fmt;
    long pid;
    int age;
    bool removed;
  } cases[] = {
      {"tpk-build-%ld-%s-aB3dE9", (long)dead, 3600, true},       /* gone, quiet for an hour */
      {"tpk-build-%ld-%s-aB3dE8", (long)dead, 60, false},        /* gone, but touched a minute ago */
      {"tpk-build-%ld-%s-aB3dE7", (long)getpid(), 3 * 86400, false}, /* ours: live */
      {"tpk-build-%ld-%s-aB3dE6", 1L, 3 * 86400, false},         /* init: live */
      {"tpk-build-%ld-elsewhere-%.0saB3dE5", (long)dead, 3600, false}, /* another host: an hour says nothing */
      {"tpk-build-%ld-elsewhere-%.0saB3dE4", (long)dead, 2 * 86400, true},
      {"tpk-build-%.0ld%.0sQx81Lm", 0, 2 * 86400, true},        /* an older tpk's name */
      {"tpk-build-%.0ld%.0sQx81Ln", 0, 3600, false},
  };
  enum { NCASES = sizeof cases / sizeof cases[0] };
  char names[NCASES][256];
  for (int i = 0; i < NCASES; i++) {
    snprintf(names[i], sizeof names[i], cases[i].fmt, cases[i].pid, host);
    make_build_folder(dir, names[i], cases[i].age);
  }
  /* a stale temporary entry file too */
  snprintf(name, sizeof name, "%s/tpk-build-%ld-%s-Zz09Yy", dir, (long)dead, host);
  write_bytes(name, "partial", 7, 0644);
  struct timespec t[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
  assert_int_equal(utimensat(AT_FDCWD, name, t, 0), 0);

  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  TpkJitCacheInfo info;
  TpkError err = {0};
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_int_equal(info.build_folders, NCASES + 1);
  char src[2048];
  add_source(src, sizeof src, 62);
  run_add(compile_ok(j, src, "add_kernel"), 62, NULL); /* a store tidies the folder */
  for (int i = 0; i < NCASES; i++)
    if (exists_in(dir, names[i]) == cases[i].removed)
      fail_msg("%s was %s", names[i], cases[i].removed ? "kept" : "removed");
  assert_int_equal(access(name, F_OK), -1);
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_int_equal(info.entries, 1);
  assert_int_equal(info.build_folders, 5);

  /* clearing removes the entries and nothing live */
  int64_t entries, builds;
  assert_int_equal(tpk_jit_cache_clear(j, &entries, &builds, &err), TPK_OK);
  assert_int_equal(entries, 1);
  assert_int_equal(builds, 0);
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_int_equal(info.entries, 0);
  assert_int_equal(info.bytes, 0);
  assert_int_equal(info.build_folders, 5);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

/* Stale build folders under $TMPDIR (builds outside the cache) go too, at
 * the first build there. */
static void test_stale_temporary_build_folders_are_removed(void **state) {
  (void)state;
  char *tmp = test_temp_dir("tpk-test-jit");
  char host[80], stale[256], live[256];
  host_name(host, sizeof host);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  snprintf(stale, sizeof stale, "tpk-build-%ld-%s-aB3dE9", (long)dead, host);
  snprintf(live, sizeof live, "tpk-build-%ld-%s-aB3dE9", (long)getpid(), host);
  make_build_folder(tmp, stale, 3600);
  make_build_folder(tmp, live, 3600);
  char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  setenv("TMPDIR", tmp, 1);
  TpkJit *j = new_jit(TPK_TIER_CC, -1, "", NULL);
  if (old) setenv("TMPDIR", old, 1);
  else unsetenv("TMPDIR");
  free(old);
  char src[2048];
  add_source(src, sizeof src, 63);
  run_add(compile_ok(j, src, "add_kernel"), 63, NULL);
  tpk_jit_destroy(j);
  assert_false(exists_in(tmp, stale));
  assert_true(exists_in(tmp, live));
  test_remove_tree(tmp);
  free(tmp);
}

static int64_t entry_bytes(const char *dir) {
  char so[1024];
  only_entry(dir, so, sizeof so);
  struct stat st;
  assert_int_equal(stat(so, &st), 0);
  return (int64_t)st.st_size;
}

static bool has_entry_for(const char *dir, int offset) {
  TpkJit *j = new_jit(TPK_TIER_AUTO, -1, dir, NULL);
  char src[2048];
  add_source(src, sizeof src, offset);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  bool hit = tpk_code_from_cache(c);
  tpk_jit_destroy(j);
  return hit;
}

/* TPK_CACHE_MAX holds the entries to a size: after a store the least
 * recently used go first, and a hit counts as a use. */
static void test_size_limit_evicts_least_recently_used(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char src[2048];
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  add_source(src, sizeof src, 70);
  compile_ok(j, src, "add_kernel");
  tpk_jit_destroy(j);
  int64_t one = entry_bytes(dir); /* every entry of these kernels is this size */
  j = new_keyed_jit(TPK_TIER_CC, dir, NULL, 3 * one + one / 2);
  for (int i = 71; i <= 72; i++) {
    add_source(src, sizeof src, i);
    compile_ok(j, src, "add_kernel");
  }
  TpkJitCacheInfo info;
  TpkError err = {0};
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_int_equal(info.entries, 3);
  assert_int_equal(info.bytes, 3 * one);
  assert_int_equal(info.max_bytes, 3 * one + one / 2);
  assert_true(has_entry_for(dir, 70)); /* a hit: 70 is now the most recent */
  add_source(src, sizeof src, 73);
  compile_ok(j, src, "add_kernel"); /* over the limit: 71, the least recent, goes */
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  assert_int_equal(info.entries, 3);
  tpk_jit_destroy(j);
  assert_false(has_entry_for(dir, 71));
  assert_true(has_entry_for(dir, 70));
  assert_true(has_entry_for(dir, 72));
  assert_true(has_entry_for(dir, 73));
  test_remove_tree(dir);
  free(dir);
}

typedef struct EvictJob {
  const char *dir;
  int64_t max;
  int first;
  TpkStatus status;
} EvictJob;

static void *build_into_small_cache(void *arg) {
  EvictJob *job = arg;
  TpkJitOptions o = {.tier = TPK_TIER_CC, .hot_calls = -1, .cache_dir = job->dir, .cache_max = job->max};
  TpkJit *j = NULL;
  TpkError err;
  job->status = tpk_jit_create(&o, &j, &err);
  for (int i = 0; i < 4 && job->status == TPK_OK; i++) {
    char src[2048];
    TpkCode *c = NULL;
    add_source(src, sizeof src, job->first + i);
    job->status = tpk_jit_compile(j, src, "add_kernel", &c, &err);
    if (job->status == TPK_OK) run_add(c, job->first + i, NULL);
  }
  tpk_jit_destroy(j);
  return NULL;
}

/* Several JITs (as processes would) storing into one small cache at once:
 * every kernel runs, and the folder ends within its limit. */
static void test_eviction_while_others_use_the_cache(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  TpkJit *j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  char src[2048];
  add_source(src, sizeof src, 80);
  compile_ok(j, src, "add_kernel");
  tpk_jit_destroy(j);
  int64_t one = entry_bytes(dir), max = 2 * one + one / 2;
  enum { N = 3 };
  pthread_t th[N];
  EvictJob jobs[N];
  for (int t = 0; t < N; t++) {
    jobs[t] = (EvictJob){dir, max, 81 + 4 * t, TPK_ERR_INTERNAL};
    assert_int_equal(pthread_create(&th[t], NULL, build_into_small_cache, &jobs[t]), 0);
  }
  for (int t = 0; t < N; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < N; t++) assert_int_equal(jobs[t].status, TPK_OK);
  j = new_keyed_jit(TPK_TIER_CC, dir, NULL, max);
  TpkJitCacheInfo info;
  TpkError err = {0};
  assert_int_equal(tpk_jit_cache_info(j, &info, &err), TPK_OK);
  if (info.bytes > max) fail_msg("%lld bytes left in a cache of %lld", (long long)info.bytes, (long long)max);
  assert_int_equal(info.entries, 2);
  assert_int_equal(info.build_folders, 0);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

static void test_compile_errors_carry_the_compiler_message(void **state) {
  (void)state;
  static const char broken[] = "#include \"tpk_prims.h\"\n"
                               "int bad(const TpkPrims *p, void *const *args, const int64_t *syms, void *ws, char *err) {\n"
                               "  return nope;\n"
                               "}\n";
  TpkJit *j = new_jit(TPK_TIER_TCC, -1, "", NULL);
  TpkCode *c = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_jit_compile(j, broken, "bad", &c, &err), TPK_ERR_INTERNAL);
  assert_null(c);
  assert_non_null(strstr(err.message, "tcc"));
  /* tcc's words, at the line of the source, not of the text with the header spliced in */
  assert_non_null(strstr(err.message, "kernel.c:3: error: 'nope' undeclared"));

  char src[2048];
  add_source(src, sizeof src, 1);
  assert_int_equal(tpk_jit_compile(j, src, "no_such_kernel", &c, &err), TPK_ERR_INTERNAL);
  assert_non_null(strstr(err.message, "no_such_kernel"));

  static const char unresolved[] = "#include \"tpk_prims.h\"\n"
                                   "void tpk_nowhere(void);\n"
                                   "int k(const TpkPrims *p, void *const *a, const int64_t *s, void *w, char *e) {\n"
                                   "  tpk_nowhere();\n"
                                   "  return 0;\n"
                                   "}\n";
  assert_int_equal(tpk_jit_compile(j, unresolved, "k", &c, &err), TPK_ERR_INTERNAL);
  assert_non_null(strstr(err.message, "tpk_nowhere"));
  assert_stats(j, 3, 0, 0, 0);
  tpk_jit_destroy(j);

  /* the cc tier reports cc's own message */
  j = new_jit(TPK_TIER_CC, -1, "", NULL);
  assert_int_equal(tpk_jit_compile(j, broken, "bad", &c, &err), TPK_ERR_INTERNAL);
  assert_non_null(strstr(err.message, "error"));
  assert_non_null(strstr(err.message, "kernel.c:3"));
  assert_stats(j, 0, 1, 0, 1);
  tpk_jit_destroy(j);
}

static void test_cc_failure_keeps_the_tcc_entry(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  char fake[1024];
  snprintf(fake, sizeof fake, "%s/fakecc", dir);
  FILE *f = fopen(fake, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\necho 'fake cc: no luck today' >&2\nexit 1\n", f);
  fclose(f);
  assert_int_equal(chmod(fake, 0755), 0);

  char src[2048];
  add_source(src, sizeof src, 10);
  TpkJit *j = new_jit(TPK_TIER_AUTO, 0, "", fake);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_TCC);
  assert_stats(j, 1, 1, 0, 1);
  const char *why = tpk_code_cc_error(c);
  assert_non_null(why);
  assert_non_null(strstr(why, "fake cc: no luck today"));
  run_add(c, 10, NULL);
  tpk_jit_destroy(j);
  test_remove_tree(dir);
  free(dir);
}

enum { THREADS = 4, PER_THREAD = 6 };

typedef struct CompileJob {
  TpkJit *jit;
  int first;
  TpkCode *codes[PER_THREAD];
  TpkStatus status;
} CompileJob;

static void *compile_many(void *arg) {
  CompileJob *job = arg;
  job->status = TPK_OK;
  for (int i = 0; i < PER_THREAD && job->status == TPK_OK; i++) {
    char src[2048];
    TpkError err;
    add_source(src, sizeof src, job->first + i);
    job->status = tpk_jit_compile(job->jit, src, "add_kernel", &job->codes[i], &err);
  }
  return NULL;
}

static void test_concurrent_compiles(void **state) {
  (void)state;
  TpkJit *j = new_jit(TPK_TIER_TCC, -1, "", NULL);
  pthread_t th[THREADS];
  CompileJob jobs[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (CompileJob){.jit = j, .first = 100 + t * PER_THREAD};
    assert_int_equal(pthread_create(&th[t], NULL, compile_many, &jobs[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < THREADS; t++) {
    assert_int_equal(jobs[t].status, TPK_OK);
    for (int i = 0; i < PER_THREAD; i++) run_add(jobs[t].codes[i], jobs[t].first + i, NULL);
  }
  assert_stats(j, THREADS * PER_THREAD, 0, 0, 0);
  tpk_jit_destroy(j);
}

typedef struct RaceJob {
  const char *dir;
  TpkStatus status;
} RaceJob;

static void *build_same_kernel(void *arg) {
  RaceJob *job = arg;
  TpkJitOptions o = {.tier = TPK_TIER_CC, .hot_calls = -1, .cache_dir = job->dir};
  TpkJit *j = NULL;
  TpkCode *c = NULL;
  TpkError err;
  char src[2048];
  add_source(src, sizeof src, 13);
  job->status = tpk_jit_create(&o, &j, &err);
  if (job->status == TPK_OK) job->status = tpk_jit_compile(j, src, "add_kernel", &c, &err);
  if (job->status == TPK_OK) run_add(c, 13, NULL);
  tpk_jit_destroy(j);
  return NULL;
}

/* Two compilers (as if two processes) build the same kernel into one cache:
 * both succeed, one file remains, no temporary is left. */
static void test_racing_builds_share_the_cache(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  pthread_t th[2];
  RaceJob jobs[2] = {{dir, TPK_ERR_INTERNAL}, {dir, TPK_ERR_INTERNAL}};
  for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, build_same_kernel, &jobs[t]), 0);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < 2; t++) assert_int_equal(jobs[t].status, TPK_OK);
  int others;
  assert_int_equal(count_entries(dir, NULL, 0, &others), 1);
  assert_int_equal(others, 0);
  test_remove_tree(dir);
  free(dir);
}

typedef struct CallJob {
  TpkCode *code;
  int calls;
} CallJob;

static void *call_many(void *arg) {
  CallJob *job = arg;
  for (int i = 0; i < job->calls; i++) run_add(job->code, 11, NULL);
  return NULL;
}

/* Callers keep calling while the worker swaps the entry point. */
static void test_calls_during_promotion(void **state) {
  (void)state;
  char src[2048];
  add_source(src, sizeof src, 11);
  TpkJit *j = new_jit(TPK_TIER_AUTO, 1, "", NULL);
  TpkCode *c = compile_ok(j, src, "add_kernel");
  pthread_t th[THREADS];
  CallJob job = {c, 3000};
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, call_many, &job), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  tpk_code_wait_optimized(c);
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  assert_stats(j, 1, 1, 0, 0); /* promoted once although several threads crossed the threshold */
  tpk_jit_destroy(j);
}

static void test_destroy_with_pending_work(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-jit");
  TpkJit *j = new_jit(TPK_TIER_AUTO, 0, dir, NULL);
  TpkCode *codes[8];
  for (int i = 0; i < 8; i++) {
    char src[2048];
    add_source(src, sizeof src, 200 + i);
    codes[i] = compile_ok(j, src, "add_kernel");
  }
  run_add(codes[0], 200, NULL);
  double t0 = now_ms();
  tpk_jit_destroy(j); /* the running cc is killed, the queued ones are cancelled */
  double ms = now_ms() - t0;
  print_message("destroy with 8 cc builds pending: %.1f ms\n", ms);
  assert_true(ms < 2000);
  int others;
  count_entries(dir, NULL, 0, &others);
  assert_int_equal(others, 0); /* no build folder left behind */
  test_remove_tree(dir);
  free(dir);
}

static void test_options_from_env(void **state) {
  (void)state;
  TpkJitOptions o;
  setenv("TPK_TIER", "cc", 1);
  setenv("TPK_JIT_HOT_CALLS", "7", 1);
  setenv("TPK_CACHE_DIR", "/nonexistent/tpk", 1);
  setenv("CC", "clang", 1);
  TpkError err = {0};
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_OK);
  assert_int_equal(o.tier, TPK_TIER_CC);
  assert_int_equal(o.hot_calls, 7);
  assert_string_equal(o.cache_dir, "/nonexistent/tpk");
  assert_string_equal(o.cc, "clang");
  setenv("TPK_TIER", "tcc", 1);
  unsetenv("TPK_JIT_HOT_CALLS");
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_OK);
  assert_int_equal(o.tier, TPK_TIER_TCC);
  assert_int_equal(o.hot_calls, -1);
  /* values that do not parse are errors naming the variable (were defaults) */
  setenv("TPK_JIT_HOT_CALLS", "many", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "TPK_JIT_HOT_CALLS=many: expected a count of calls (0 or more)");
  unsetenv("TPK_JIT_HOT_CALLS");
  setenv("TPK_TIER", "garbage", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "TPK_TIER=garbage: expected tcc, cc or auto");
  unsetenv("TPK_TIER");
  setenv("TPK_CACHE_MAX", "lots", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "TPK_CACHE_MAX=lots: expected a size in bytes, such as 536870912, 512M or 2G");
  setenv("TPK_CACHE_MAX", "18014398509481985K", 1); /* overflows */
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "TPK_CACHE_MAX=18014398509481985K: expected a size in bytes"));
  setenv("TPK_CACHE_MAX", "2G", 1);
  setenv("TPK_CACHE_KEY_FILE", "/etc/tpk/team.key", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_OK);
  assert_int_equal(o.cache_max, (int64_t)2 << 30);
  assert_string_equal(o.key_file, "/etc/tpk/team.key");
  unsetenv("TPK_JIT_HOT_CALLS");
  unsetenv("TPK_CACHE_DIR");
  unsetenv("TPK_CACHE_MAX");
  unsetenv("TPK_CACHE_KEY_FILE");
  unsetenv("CC");
  setenv("TPK_CC_ISA", "avx2", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_OK);
  assert_string_equal(o.isa, "avx2");
  setenv("TPK_CC_ISA", "native", 1);
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "TPK_CC_ISA=native: expected generic, avx2 or avx512");
  unsetenv("TPK_CC_ISA");
  assert_int_equal(tpk_jit_options_from_env(&o, &err), TPK_OK);
  assert_null(o.isa);
  assert_int_equal(o.tier, TPK_TIER_AUTO);
  assert_null(o.cache_dir);
  assert_null(o.key_file);
  assert_true(o.cache_max <= 0); /* the default */
  assert_null(o.cc);

  TpkJit *j = NULL;
  o.isa = "sse9";
  assert_int_equal(tpk_jit_create(&o, &j, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "instruction set 'sse9': expected generic, avx2 or avx512");
  assert_null(j);
  o.isa = NULL;
  o.tier = (TpkTier)42;
  assert_int_equal(tpk_jit_create(&o, &j, &err), TPK_ERR_INVALID);
  assert_null(j);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Latency of both tiers on the representative kernel; both give the same
 * bits. */
static void test_latency_of_a_200_line_kernel(void **state) {
  (void)state;
  enum { RUNS = 15 };
  double t[RUNS], cpu[RUNS];
  K200Data *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  assert_non_null(a);
  assert_non_null(b);
  k200_init(a);
  k200_init(b);

  TpkJit *j = new_jit(TPK_TIER_TCC, -1, "", NULL);
  TpkCode *c = NULL;
  for (int i = 0; i < RUNS; i++) {
    double t0 = now_ms(), c0 = cpu_ms();
    c = compile_ok(j, k200_source, "fused_block");
    t[i] = now_ms() - t0;
    cpu[i] = cpu_ms() - c0;
  }
  qsort(t, RUNS, sizeof t[0], cmp_double);
  qsort(cpu, RUNS, sizeof cpu[0], cmp_double);
  double tcc_ms = t[RUNS / 2];
  k200_run(c, a);
  tpk_jit_destroy(j);

  char *dir = test_temp_dir("tpk-test-jit");
  j = new_jit(TPK_TIER_CC, -1, dir, NULL);
  double t0 = now_ms();
  c = compile_ok(j, k200_source, "fused_block");
  double cc_ms = now_ms() - t0;
  k200_run(c, b);
  assert_memory_equal(a->y, b->y, sizeof a->y);
  assert_memory_equal(a->stats, b->stats, sizeof a->stats);
  tpk_jit_destroy(j);

  j = new_jit(TPK_TIER_AUTO, -1, dir, NULL);
  t0 = now_ms();
  c = compile_ok(j, k200_source, "fused_block");
  double hit_ms = now_ms() - t0;
  assert_int_equal(tpk_code_tier(c), TPK_TIER_CC);
  assert_stats(j, 0, 0, 1, 0);
  tpk_jit_destroy(j);

  print_message("200-line kernel: tcc compile %.2f ms wall (median of %d, min %.2f), %.2f ms cpu (median); "
                "cc -O3 compile %.0f ms; cache hit load %.2f ms\n",
                tcc_ms, RUNS, t[0], cpu[RUNS / 2], cc_ms, hit_ms);
  assert_true(cpu[RUNS / 2] < 50); /* target 5 ms; loose against slow or sanitized machines */
  test_remove_tree(dir);
  free(dir);
  free(a);
  free(b);
}

/* libtpk.so carries its own copy of libtcc (see the Makefile): it must work. */
static void test_shared_library_tcc(void **state) {
  (void)state;
  const char *build = getenv("TPK_BUILD");
  char path[1024];
  snprintf(path, sizeof path, "%s/libtpk.so", build && *build ? build : "build");
  if (access(path, F_OK) != 0) fail_msg("%s is missing: `make test` builds it before the tests", path);
  void *lib = dlopen(path, RTLD_LOCAL | RTLD_NOW);
  if (!lib) fail_msg("dlopen %s: %s", path, dlerror());
  TpkStatus (*create)(const TpkJitOptions *, TpkJit **, TpkError *);
  TpkStatus (*compile)(TpkJit *, const char *, const char *, TpkCode **, TpkError *);
  TpkKernelFn (*entry)(TpkCode *);
  void (*destroy)(TpkJit *);
  void *syms[4] = {dlsym(lib, "tpk_jit_create"), dlsym(lib, "tpk_jit_compile"), dlsym(lib, "tpk_code_entry"),
                   dlsym(lib, "tpk_jit_destroy")};
  for (int i = 0; i < 4; i++) assert_non_null(syms[i]);
  memcpy(&create, &syms[0], sizeof create);
  memcpy(&compile, &syms[1], sizeof compile);
  memcpy(&entry, &syms[2], sizeof entry);
  memcpy(&destroy, &syms[3], sizeof destroy);
  TpkJitOptions o = {.tier = TPK_TIER_TCC, .hot_calls = -1, .cache_dir = ""};
  TpkJit *j = NULL;
  TpkCode *c = NULL;
  TpkError err = {0};
  assert_int_equal(create(&o, &j, &err), TPK_OK);
  char src[2048];
  add_source(src, sizeof src, 12);
  if (compile(j, src, "add_kernel", &c, &err) != TPK_OK) fail_msg("%s", err.message);
  float a[ADD_N], b[ADD_N], y[ADD_N];
  for (int i = 0; i < ADD_N; i++) a[i] = (float)i, b[i] = 1.0f;
  void *args[] = {a, b, y};
  int64_t n[] = {ADD_N};
  char kerr[TPK_KERNEL_ERR_LEN];
  assert_int_equal(entry(c)(&test_prims, args, n, NULL, kerr), 0);
  for (int i = 0; i < ADD_N; i++) assert_true(y[i] == sqrtf((float)i + 1.0f) + 12.0f);
  destroy(j);
  dlclose(lib);
}

int main(void) {
  /* The per-user key goes to a folder of the test's own, not the home's. */
  char config[] = "/tmp/tpk-test-jit-config-XXXXXX";
  if (!mkdtemp(config)) return 1;
  setenv("XDG_CONFIG_HOME", config, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tcc_compiles_and_runs),
      cmocka_unit_test(test_cc_tier_compiles_with_cc),
      cmocka_unit_test(test_cc_tier_without_cache_leaves_nothing),
      cmocka_unit_test(test_auto_promotes_after_hot_calls),
      cmocka_unit_test(test_cache_hit_in_second_jit),
      cmocka_unit_test(test_entry_of_another_isa_is_a_miss),
      cmocka_unit_test(test_code_of_several_kernels),
      cmocka_unit_test(test_cached_builds_of_one_entry_stay_apart),
      cmocka_unit_test(test_builds_of_one_entry_load_apart),
      cmocka_unit_test(test_damaged_cache_file_is_rebuilt),
      cmocka_unit_test(test_hmac_sha256_rfc4231),
      cmocka_unit_test(test_planted_entry_is_not_loaded),
      cmocka_unit_test(test_entry_of_another_key_is_not_loaded),
      cmocka_unit_test(test_renamed_entry_is_refused),
      cmocka_unit_test(test_key_files_that_are_refused),
      cmocka_unit_test(test_per_user_key_is_made_once),
      cmocka_unit_test(test_shared_folder_entries_are_trusted_by_their_mac),
      cmocka_unit_test(test_unwritable_cache_folder_builds_without_it),
      cmocka_unit_test(test_folder_at_an_entry_path_builds_without_the_cache),
      cmocka_unit_test(test_stale_build_folders_are_removed),
      cmocka_unit_test(test_stale_temporary_build_folders_are_removed),
      cmocka_unit_test(test_size_limit_evicts_least_recently_used),
      cmocka_unit_test(test_eviction_while_others_use_the_cache),
      cmocka_unit_test(test_compile_errors_carry_the_compiler_message),
      cmocka_unit_test(test_cc_failure_keeps_the_tcc_entry),
      cmocka_unit_test(test_concurrent_compiles),
      cmocka_unit_test(test_racing_builds_share_the_cache),
      cmocka_unit_test(test_calls_during_promotion),
      cmocka_unit_test(test_destroy_with_pending_work),
      cmocka_unit_test(test_options_from_env),
      cmocka_unit_test(test_latency_of_a_200_line_kernel),
      cmocka_unit_test(test_shared_library_tcc),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  test_remove_tree(config);
  return failed;
}
