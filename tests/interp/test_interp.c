/*
 * test_interp.c — interp/interp.c, the reference interpreter: real kernels
 * compiled from .tpk text (and a few IR texts for ops the language does not
 * produce directly), checked against hand-written C references.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "base/refnum.h"

/* ---- helpers ------------------------------------------------------------------ */

typedef struct Kernel {
  TestCompile c;
  TpkModule *ir; /* from tpk_ir_parse, when compiled from IR text */
  TpkFunc *f;
} Kernel;

static void compile(Kernel *k, const char *text, const char *name, const char *tunes) {
  memset(k, 0, sizeof *k);
  k->f = test_compile_kernel(&k->c, text, name, tunes);
}

static void compile_file(Kernel *k, const char *rel, const char *name, const char *tunes) {
  memset(k, 0, sizeof *k);
  k->f = test_compile_kernel_file(&k->c, rel, name, tunes);
}

static void compile_ir(Kernel *k, const char *text, const char *name) {
  memset(k, 0, sizeof *k);
  TpkError err = {0};
  k->ir = tpk_ir_parse(text, strlen(text), "test.ir", &err);
  if (!k->ir) fail_msg("IR parse failed: %s", err.message);
  k->f = tpk_module_find(k->ir, name);
  assert_non_null(k->f);
}

static void release(Kernel *k) {
  test_compile_free(&k->c);
  if (k->ir) tpk_module_free(k->ir);
}

static TpkStatus run(const Kernel *k, void *const *args, const char *syms, TpkError *err) {
  int64_t sv[16] = {0};
  test_symbol_values(k->f, syms, sv);
  memset(err, 0, sizeof *err);
  return tpk_interp_run(k->f, args, sv, err);
}

static void run_ok(const Kernel *k, void *const *args, const char *syms) {
  TpkError err;
  TpkStatus st = run(k, args, syms, &err);
  if (st != TPK_OK) fail_msg("interp failed: %s", err.message);
}

/* Deterministic pseudo-random numbers (xorshift), uniform in [lo, hi). */
static uint64_t rng = 88172645463325252ull;
static double urand(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static float *frand(size_t n, double lo, double hi) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)urand(lo, hi);
  return p;
}

/* bf16 by truncation of a float's bits (the test's own, exact for the values
 * it makes: they are chosen as bf16 numbers). */
static uint16_t bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
static float f32_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static void assert_close(double got, double want, double rel, double abs_tol, const char *what, size_t i) {
  double tol = abs_tol + rel * fabs(want);
  if (!(fabs(got - want) <= tol)) fail_msg("%s[%zu]: got %.9g, want %.9g (tol %.3g)", what, i, got, want, tol);
}

/* ---- the contract's examples -------------------------------------------------- */

static void test_add(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/add.tpk", "add", NULL);
  size_t n = 1000;
  float *x = frand(n, -10, 10), *y = frand(n, -10, 10), *o = calloc(n, sizeof *o);
  void *args[] = {x, y, o};
  run_ok(&k, args, "N=1000");
  for (size_t i = 0; i < n; i++) assert_true(bits_of(o[i]) == bits_of(x[i] + y[i]));
  free(x), free(y), free(o);
  release(&k);
}

static void test_softmax_ragged(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/softmax.tpk", "softmax", "BM=8");
  int M = 37, N = 64; /* 37 rows: the last tile has 5 */
  float *x = frand((size_t)M * N, -4, 4), *y = calloc((size_t)M * N, sizeof *y);
  void *args[] = {x, y};
  run_ok(&k, args, "M=37,N=64");
  for (int i = 0; i < M; i++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < N; j++) mx = fmax(mx, x[i * N + j]);
    for (int j = 0; j < N; j++) s += exp(x[i * N + j] - mx);
    for (int j = 0; j < N; j++) assert_close(y[i * N + j], exp(x[i * N + j] - mx) / s, 1e-6, 0, "softmax", (size_t)(i * N + j));
  }
  free(x), free(y);
  release(&k);
}

/* bf16 matmul with ragged M, N and K: bit-exact against the documented
 * order (per K tile one fmaf chain from 0, then acc += partial). */
static void test_matmul_ragged_bitexact(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/matmul.tpk", "matmul", "BM=128,BN=128,BK=256");
  int M = 1000, N = 130, K = 300, BK = 256;
  uint16_t *a = malloc(sizeof *a * (size_t)M * K), *b = malloc(sizeof *b * (size_t)K * N);
  for (int i = 0; i < M * K; i++) a[i] = bf16_of((float)urand(-2, 2));
  for (int i = 0; i < K * N; i++) b[i] = bf16_of((float)urand(-2, 2));
  float *c = calloc((size_t)M * N, sizeof *c);
  void *args[] = {a, b, c};
  run_ok(&k, args, "M=1000,N=130,K=300");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int k0 = 0; k0 < K; k0 += BK) {
        float p = 0;
        for (int kk = k0; kk < k0 + BK; kk++) /* padding reads 0: fmaf(0, 0, p) == p */
          p = kk < K ? fmaf(f32_of_bf16(a[i * K + kk]), f32_of_bf16(b[kk * N + j]), p) : p;
        acc = acc + p;
      }
      if (bits_of(acc) != bits_of(c[i * N + j])) fail_msg("c[%d,%d] = %.9g, want %.9g", i, j, c[i * N + j], acc);
    }
  free(a), free(b), free(c);
  release(&k);
}

static void test_layernorm(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/layernorm.tpk", "layernorm", "BM=8");
  int M = 21, N = 50;
  float *x = frand((size_t)M * N, -3, 3), *w = frand((size_t)N, 0.5, 1.5), *b = frand((size_t)N, -1, 1);
  float eps = 1e-5f, *y = calloc((size_t)M * N, sizeof *y);
  void *args[] = {x, w, b, &eps, y};
  run_ok(&k, args, "M=21,N=50");
  for (int i = 0; i < M; i++) {
    double mu = 0, var = 0;
    for (int j = 0; j < N; j++) mu += x[i * N + j];
    mu /= N;
    for (int j = 0; j < N; j++) var += (x[i * N + j] - mu) * (x[i * N + j] - mu);
    var /= N;
    for (int j = 0; j < N; j++)
      assert_close(y[i * N + j], (x[i * N + j] - mu) / sqrt(var + eps) * w[j] + b[j], 1e-5, 1e-5, "layernorm",
                   (size_t)(i * N + j));
  }
  free(x), free(w), free(b), free(y);
  release(&k);
}

/* Scatter-add with duplicate ids: all add, in index order (bit-exact with a
 * sequential loop over t). The caller zeroes the `= 0` output. */
static void test_embedding_bwd_duplicates(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/embedding_bwd.tpk", "embedding_bwd", "BT=64");
  int T = 150, D = 8, V = 10;
  int32_t *ids = malloc(sizeof *ids * (size_t)T);
  for (int t = 0; t < T; t++) ids[t] = (t * 7) % 3 == 0 ? 4 : (int32_t)(urand(0, V));
  float *g = frand((size_t)T * D, -1, 1), *grad = calloc((size_t)V * D, sizeof *grad);
  float *want = calloc((size_t)V * D, sizeof *want);
  for (int t = 0; t < T; t++)
    for (int d = 0; d < D; d++) want[ids[t] * D + d] += g[t * D + d];
  void *args[] = {ids, g, grad};
  run_ok(&k, args, "T=150,D=8,V=10");
  for (int i = 0; i < V * D; i++) assert_true(bits_of(grad[i]) == bits_of(want[i]));
  free(ids), free(g), free(grad), free(want);
  release(&k);
}

static void test_gather_out_of_range_error(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/gather.tpk", "embedding", "BT=64");
  int T = 70, V = 10, D = 4;
  int32_t ids[70];
  for (int t = 0; t < T; t++) ids[t] = t % V;
  float *table = frand((size_t)V * D, -1, 1), *out = calloc((size_t)T * D, sizeof *out);
  void *args[] = {ids, table, out};
  run_ok(&k, args, "T=70,V=10,D=4");
  for (int t = 0; t < T; t++)
    for (int d = 0; d < D; d++) assert_true(out[t * D + d] == table[ids[t] * D + d]);
  ids[66] = 12; /* in the second, ragged tile */
  TpkError err;
  assert_int_equal(run(&k, args, "T=70,V=10,D=4", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "@embedding"));
  assert_non_null(strstr(err.message, "line 8:39"));
  assert_non_null(strstr(err.message, "gather index 12"));
  assert_non_null(strstr(err.message, "size 10"));
  ids[66] = -1;
  assert_int_equal(run(&k, args, "T=70,V=10,D=4", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "gather index -1"));
  free(table), free(out);
  release(&k);
}

/* The contract's flash attention (bf16, causal, ragged S = T = 150) against
 * a double-precision reference; bf16 rounding of p and o bounds the error. */
static void test_flash_attention(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/flash_attention.tpk", "flash_attention", "BQ=128,BKV=128");
  int BH = 2, S = 150, D = 16;
  size_t n = (size_t)BH * S * D;
  uint16_t *q = malloc(n * 2), *kk = malloc(n * 2), *v = malloc(n * 2), *o = calloc(n, 2);
  for (size_t i = 0; i < n; i++) q[i] = bf16_of((float)urand(-1, 1)), kk[i] = bf16_of((float)urand(-1, 1)),
                                  v[i] = bf16_of((float)urand(-1, 1));
  float scale = 0.25f;
  void *args[] = {q, kk, v, &scale, o};
  run_ok(&k, args, "BH=2,S=150,T=150,D=16");
  double *s = malloc(sizeof *s * (size_t)S);
  for (int h = 0; h < BH; h++)
    for (int i = 0; i < S; i++) {
      double mx = -INFINITY, l = 0;
      for (int j = 0; j <= i; j++) {
        double d = 0;
        for (int e = 0; e < D; e++) d += (double)f32_of_bf16(q[(h * S + i) * D + e]) * f32_of_bf16(kk[(h * S + j) * D + e]);
        s[j] = d * scale;
        mx = fmax(mx, s[j]);
      }
      for (int j = 0; j <= i; j++) l += exp(s[j] - mx);
      for (int e = 0; e < D; e++) {
        double acc = 0;
        for (int j = 0; j <= i; j++) acc += exp(s[j] - mx) * f32_of_bf16(v[(h * S + j) * D + e]);
        size_t at = (size_t)(h * S + i) * D + (size_t)e;
        assert_close(f32_of_bf16(o[at]), acc / l, 2e-2, 1e-2, "attention", at);
      }
    }
  free(s), free(q), free(kk), free(v), free(o);
  release(&k);
}

/* ---- numerics ---------------------------------------------------------------- */

static const char *CASTS =
    "kernel to_bf16(x: f32[N]) -> (o: bf16[N]) { o = x as bf16; }\n"
    "kernel to_f16(x: f32[N]) -> (o: f16[N]) { o = x as f16; }\n"
    "kernel to_e4m3(x: f32[N]) -> (o: f8e4m3[N]) { o = x as f8e4m3; }\n"
    "kernel to_e5m2(x: f32[N]) -> (o: f8e5m2[N]) { o = x as f8e5m2; }\n"
    "kernel to_i32(x: f32[N]) -> (o: i32[N]) { o = x as i32; }\n"
    "kernel to_u8(x: f32[N]) -> (o: u8[N]) { o = x as u8; }\n"
    "kernel i_to_i8(x: i32[N]) -> (o: i8[N]) { o = x as i8; }\n"
    "kernel i_to_i16(x: i32[N]) -> (o: i16[N]) { o = x as i16; }\n"
    "kernel to_bool(x: f32[N]) -> (o: bool[N]) { o = x as bool; }\n"
    "kernel bf16_add(x: bf16[N], y: bf16[N]) -> (o: bf16[N]) { o = x + y; }\n";

/* Convert n f32 values with kernel `name` and compare the output bits. */
static void check_cast(const char *name, const float *in, int n, const void *want, size_t esize) {
  Kernel k;
  compile(&k, CASTS, name, NULL);
  unsigned char out[64 * 4];
  memset(out, 0xcd, sizeof out);
  void *args[] = {(void *)in, out};
  char syms[32];
  snprintf(syms, sizeof syms, "N=%d", n);
  run_ok(&k, args, syms);
  for (int i = 0; i < n; i++)
    if (memcmp(out + (size_t)i * esize, (const unsigned char *)want + (size_t)i * esize, esize) != 0) {
      uint32_t g = 0, w = 0;
      memcpy(&g, out + (size_t)i * esize, esize);
      memcpy(&w, (const unsigned char *)want + (size_t)i * esize, esize);
      fail_msg("%s: element %d (%.9g): got 0x%x, want 0x%x", name, i, (double)in[i], g, w);
    }
  release(&k);
}

static void test_bf16_rounding_ties(void **state) {
  (void)state;
  float in[] = {
      1.0f + 0x1p-8f,          /* tie between 1 and 1+2^-7: even is 1 */
      1.0f + 3 * 0x1p-8f,      /* tie between 1+2^-7 and 1+2^-6: even is 1+2^-6 */
      -(1.0f + 0x1p-8f),       /* sign kept */
      1.0f + 0x1p-8f + 0x1p-20f, /* just above the tie: up */
      0x1.fffffep127f,         /* rounds past the largest bf16: inf */
      NAN,
      0x1p-133f + 0x1p-134f,   /* bf16 subnormal region: tie 1.5 ulp -> 2 ulp */
      0.0f,
      -0.0f,
  };
  uint16_t want[] = {0x3f80, 0x3f82, 0xbf80, 0x3f81, 0x7f80, 0x7fc0, 0x0002, 0x0000, 0x8000};
  check_cast("to_bf16", in, 9, want, 2);
  float fin[] = {1.0f + 0x1p-11f, 65504.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, -2.5f};
  uint16_t fwant[] = {0x3c00, 0x7bff, 0x7c00, 0x0001, 0x0000, 0x0002, 0xc100};
  check_cast("to_f16", fin, 7, fwant, 2);
  /* E4M3FN: 464 is a tie between 448 (even) and 480 (not finite): 448;
   * above it NaN; inf -> NaN; smallest subnormal 2^-9 */
  float ein[] = {448.0f, 464.0f, 470.0f, INFINITY, -INFINITY, 0x1p-9f, 0x1p-10f, 1.0625f, -3.0f, NAN};
  uint8_t ewant[] = {0x7e, 0x7e, 0x7f, 0x7f, 0xff, 0x01, 0x00, 0x38, 0xc4, 0x7f};
  check_cast("to_e4m3", ein, 10, ewant, 1);
  /* E5M2: 61440 is a tie between 57344 (odd mantissa) and 65536: inf */
  float e5in[] = {57344.0f, 61440.0f, 61439.0f, 1.125f, 0x1p-16f, NAN};
  uint8_t e5want[] = {0x7b, 0x7c, 0x7b, 0x3c, 0x01, 0x7e};
  check_cast("to_e5m2", e5in, 6, e5want, 1);
}

static void test_float_to_int_and_wrap(void **state) {
  (void)state;
  float in[] = {-1.7f, 1.7f, 3e9f, -3e9f, NAN, INFINITY, 2147483520.0f};
  int32_t want[] = {-1, 1, INT32_MAX, INT32_MIN, 0, INT32_MAX, 2147483520};
  check_cast("to_i32", in, 7, want, 4);
  float uin[] = {300.5f, -5.0f, 254.9f, NAN};
  uint8_t uwant[] = {255, 0, 254, 0};
  check_cast("to_u8", uin, 4, uwant, 1);
  int32_t iin[] = {300, -129, 127, 70000};
  int8_t iwant[] = {44, 127, 127, 112};
  check_cast("i_to_i8", (const float *)iin, 4, iwant, 1);
  int16_t i16want[] = {300, -129, 127, 4464};
  check_cast("i_to_i16", (const float *)iin, 4, i16want, 2);
  float bin[] = {0.0f, -0.0f, 0.5f, NAN};
  uint8_t bwant[] = {0, 0, 1, 1};
  check_cast("to_bool", bin, 4, bwant, 1);
}

/* The reference conversions against independent ones: bf16 against the
 * usual rounding bit trick, f16 against the compiler's _Float16 (where it
 * has one), f8 against a brute-force nearest-code search with ties to even.
 * (Checked once exhaustively over all 2^32 floats for bf16 and f16; here a
 * sample, to stay fast.) */
static void test_refnum_against_brute_force(void **state) {
  (void)state;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    uint32_t b = (uint32_t)u;
    float f;
    memcpy(&f, &b, 4);
    if (isnan(f)) continue;
    uint32_t t = b + 0x7fff + ((b >> 16) & 1);
    assert_int_equal(tpk_ref_encode(TPK_BF16, f), t >> 16);
    assert_true(tpk_ref_decode(TPK_BF16, t >> 16) == f32_of_bf16((uint16_t)(t >> 16)));
#ifdef __FLT16_MAX__
    _Float16 h = (_Float16)f;
    uint16_t hb;
    memcpy(&hb, &h, 2);
    assert_int_equal(tpk_ref_encode(TPK_F16, f), hb);
#endif
  }
  double tab[2][128];
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 128; c++) tab[k][c] = tpk_ref_decode(k ? TPK_F8E5M2 : TPK_F8E4M3, (uint32_t)c);
  float lo = 0x1p-20f, hi = 0x1p17f;
  uint32_t ulo = bits_of(lo), uhi = bits_of(hi);
  for (uint32_t u = ulo; u < uhi; u += 997) {
    float f;
    memcpy(&f, &u, 4);
    for (int k = 0; k < 2; k++) {
      double best = INFINITY;
      uint32_t want = 0;
      for (int c = 0; c < 128; c++) {
        double d = fabs(tab[k][c] - f);
        if (isfinite(tab[k][c]) && (d < best || (d == best && (c & 1) == 0))) best = d, want = (uint32_t)c;
      }
      /* past max + half an ulp: NaN (e4m3) / inf (e5m2, whose max has an odd mantissa so the tie goes up too) */
      if (k == 0 && f > 464.0f) want = 0x7f;
      if (k == 1 && f >= 61440.0f) want = 0x7c;
      TpkDType dt = k ? TPK_F8E5M2 : TPK_F8E4M3;
      assert_int_equal(tpk_ref_encode(dt, f), want);
      assert_int_equal(tpk_ref_encode(dt, -f), want | 0x80);
    }
  }
}

/* bf16 arithmetic: computed in f32, rounded once per op. */
static void test_bf16_add_rounds(void **state) {
  (void)state;
  Kernel k;
  compile(&k, CASTS, "bf16_add", NULL);
  uint16_t x[] = {0x3f80, 0x3f80, 0x4000}, y[] = {0x3b80 /* 2^-8 */, 0x3bc0 /* 1.5*2^-8 */, 0x3b80};
  uint16_t o[3];
  void *args[] = {x, y, o};
  run_ok(&k, args, "N=3");
  assert_int_equal(o[0], 0x3f80); /* 1 + 2^-8: tie to even */
  assert_int_equal(o[1], 0x3f81); /* past the tie: up */
  assert_int_equal(o[2], 0x4000); /* 2 + 2^-8: below half an ulp */
  release(&k);
}

static const char *INTS =
    "kernel iadd(x: i32[N], y: i32[N]) -> (o: i32[N]) { o = x + y; }\n"
    "kernel idiv(x: i32[N], y: i32[N]) -> (q: i32[N], r: i32[N]) { q = x / y; r = x % y; }\n"
    "kernel dot_i8(a: i8[M, K], b: i8[K, N]) -> (c: i32[M, N]) { for i in tiles(M, 8) { c[i, :] = dot(a[i, :], b); } }\n"
    "kernel iabs(x: i32[N]) -> (o: i32[N]) { o = abs(x) - 1; }\n";

static void test_int_wrap_and_division(void **state) {
  (void)state;
  Kernel k;
  compile(&k, INTS, "iadd", NULL);
  int32_t x[] = {INT32_MAX, INT32_MIN, -5}, y[] = {1, -1, 7}, o[3];
  void *args[] = {x, y, o};
  run_ok(&k, args, "N=3");
  assert_int_equal(o[0], INT32_MIN);
  assert_int_equal(o[1], INT32_MAX);
  assert_int_equal(o[2], 2);
  release(&k);

  compile(&k, INTS, "iabs", NULL);
  run_ok(&k, (void *[]){x, o}, "N=3");
  assert_int_equal(o[0], INT32_MAX - 1);
  assert_int_equal(o[1], INT32_MAX); /* abs(INT32_MIN) wraps to INT32_MIN; - 1 wraps again */
  assert_int_equal(o[2], 4);
  release(&k);

  compile(&k, INTS, "idiv", NULL);
  int32_t a[] = {-7, 7, INT32_MIN, -7}, b[] = {2, -2, -1, -7}, q[4], r[4];
  run_ok(&k, (void *[]){a, b, q, r}, "N=4");
  assert_int_equal(q[0], -3), assert_int_equal(r[0], -1); /* truncation toward zero */
  assert_int_equal(q[1], -3), assert_int_equal(r[1], 1);
  assert_int_equal(q[2], INT32_MIN), assert_int_equal(r[2], 0);
  assert_int_equal(q[3], 1), assert_int_equal(r[3], 0);
  b[1] = 0;
  TpkError err;
  assert_int_equal(run(&k, (void *[]){a, b, q, r}, "N=4", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "@idiv: line 2:"));
  assert_non_null(strstr(err.message, "division by zero"));
  release(&k);
}

static void test_i8_dot_wraps(void **state) {
  (void)state;
  Kernel k;
  compile(&k, INTS, "dot_i8", NULL);
  int M = 3, K = 140000, N = 2;
  int8_t *a = malloc((size_t)M * K), *b = malloc((size_t)K * N);
  for (int i = 0; i < M * K; i++) a[i] = i < K ? 127 : (int8_t)(i % 7 - 3);
  for (int i = 0; i < K * N; i++) b[i] = i % N == 0 ? 127 : -128;
  int32_t c[6];
  run_ok(&k, (void *[]){a, b, c}, "M=3,K=140000,N=2");
  /* row 0: 127*127*140000 = 2258060000 wraps modulo 2^32 */
  assert_int_equal(c[0], (int32_t)(2258060000ll - 4294967296ll));
  assert_int_equal(c[1], (int32_t)(127ll * -128 * 140000)); /* -2275840000 wraps */
  for (int i = 1; i < M; i++)
    for (int j = 0; j < N; j++) {
      uint32_t acc = 0;
      for (int kk = 0; kk < K; kk++) acc += (uint32_t)(a[i * K + kk] * b[kk * N + j]);
      assert_int_equal(c[i * N + j], (int32_t)acc);
    }
  free(a), free(b);
  release(&k);
}

/* NaN: max/min propagate it (elementwise and in reduce); comparisons are
 * false except ne. */
static void test_nan_semantics(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel nanops(x: f32[N], y: f32[N]) -> (mx: f32[N], mn: f32[N], lt: bool[N], ne: bool[N], rm: f32[1]) {\n"
          "  mx = maximum(x, y); mn = minimum(x, y); lt = x < y; ne = x != y; rm = reshape(max(x), [1]);\n"
          "}\n",
          "nanops", NULL);
  float x[3] = {1, NAN, 3}, y[3] = {NAN, 2, 4}, mx[3], mn[3], rm[1];
  uint8_t lt[3], ne[3];
  run_ok(&k, (void *[]){x, y, mx, mn, lt, ne, rm}, "N=3");
  assert_true(isnan(mx[0]) && isnan(mx[1]) && mx[2] == 4);
  assert_true(isnan(mn[0]) && isnan(mn[1]) && mn[2] == 3);
  assert_true(lt[0] == 0 && lt[1] == 0 && lt[2] == 1);
  assert_true(ne[0] == 1 && ne[1] == 1 && ne[2] == 1);
  assert_true(isnan(rm[0]));
  release(&k);
}

/* Batched dot and dot against a transposed operand (contracting both last
 * dims), bit-exact against fmaf chains. */
static void test_batched_dots(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/batched_dot.tpk", "batched_scores", "BG=2,BQ=128");
  int BH = 3, S = 5, T = 6, D = 7;
  uint16_t *q = malloc(2u * (size_t)(BH * S * D)), *kk = malloc(2u * (size_t)(BH * T * D));
  for (int i = 0; i < BH * S * D; i++) q[i] = bf16_of((float)urand(-1, 1));
  for (int i = 0; i < BH * T * D; i++) kk[i] = bf16_of((float)urand(-1, 1));
  float *sc = calloc((size_t)(BH * S * T), sizeof *sc);
  run_ok(&k, (void *[]){q, kk, sc}, "BH=3,S=5,T=6,D=7");
  for (int g = 0; g < BH; g++)
    for (int i = 0; i < S; i++)
      for (int j = 0; j < T; j++) {
        float acc = 0;
        for (int e = 0; e < D; e++) acc = fmaf(f32_of_bf16(q[(g * S + i) * D + e]), f32_of_bf16(kk[(g * T + j) * D + e]), acc);
        assert_true(bits_of(sc[(g * S + i) * T + j]) == bits_of(acc));
      }
  free(q), free(kk), free(sc);
  release(&k);
}

/* ---- control flow, memory, indexing --------------------------------------------- */

static const char *MISC =
    "kernel branchy(x: f32[N], n: i32) -> (y: f32[N])\n"
    "  tune BN in [8]\n"
    "{\n"
    "  for i in tiles(N, BN) {\n"
    "    var acc = zeros(f32[BN]);\n"
    "    for r in 0..n {\n"
    "      if i.id % 2 == 0 { acc = acc + x[i]; } else { acc = acc - x[i] * 2.0; }\n"
    "    }\n"
    "    y[i] = acc;\n"
    "  }\n"
    "}\n"
    "kernel head4(x: f32[M, N]) -> (y: f32[M, 4]) tune BM in [8] { for i in tiles(M, BM) { y[i, :] = x[i, 2..6]; } }\n"
    "kernel padded(x: f32[N]) -> (y: f32[(N + 7) / 8 * 8]) { for i in tiles(N, 8) { y[i] = load(x[i], other=-inf); } }\n"
    "kernel pid(x: f32[N]) -> (y: i32[N]) tune BN in [4] {\n"
    "  for i in tiles(N, BN) { y[i] = program_id(0) * 100 + num_programs(0) + iota(i32[BN], axis=0); }\n"
    "}\n"
    "kernel vgather(t: f32[V, D], ids: i32[T]) -> (y: f32[T, D]) { for i in 0..1 { let tt = t[:, :]; y[:, :] = tt[ids[:], :]; } }\n"
    "kernel big(x: f32[M, N]) -> (y: f32[M, N]) { y = x * 2.0; }\n"
    "kernel loopgather(t: f32[V], ids: i32[T], n: i32) -> (y: f32[T]) {\n"
    "  for i in 0..1 {\n"
    "    var acc = zeros(f32[T]);\n"
    "    for r in 0..n { if r >= 0 { acc = acc + t[ids[:]]; } }\n"
    "    y[:] = acc;\n"
    "  }\n"
    "}\n";

static void test_if_else_and_loop_carried(void **state) {
  (void)state;
  Kernel k;
  compile(&k, MISC, "branchy", NULL);
  int N = 20, n = 3;
  float *x = frand((size_t)N, -1, 1), y[20];
  run_ok(&k, (void *[]){x, &n, y}, "N=20");
  for (int i = 0; i < N; i++) {
    float acc = 0;
    for (int r = 0; r < n; r++) acc = (i / 8) % 2 == 0 ? acc + x[i] : acc - x[i] * 2.0f;
    assert_true(bits_of(y[i]) == bits_of(acc));
  }
  n = 0; /* an empty loop yields its initial values */
  run_ok(&k, (void *[]){x, &n, y}, "N=20");
  for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
  free(x);
  release(&k);
}

static void test_static_slice_and_masking(void **state) {
  (void)state;
  Kernel k;
  compile(&k, MISC, "head4", NULL);
  int M = 10, N = 9;
  float *x = frand((size_t)M * N, -1, 1), y[40];
  run_ok(&k, (void *[]){x, y}, "M=10,N=9");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < 4; j++) assert_true(y[i * 4 + j] == x[i * N + 2 + j]);
  /* N = 5: columns 5 and 6 of the slice 2..6 lie past the end and read 0 */
  run_ok(&k, (void *[]){x, y}, "M=10,N=5");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < 4; j++) assert_true(y[i * 4 + j] == (2 + j < 5 ? x[i * 5 + 2 + j] : 0.0f));
  free(x);
  release(&k);
}

static void test_load_other_at_ragged_edge(void **state) {
  (void)state;
  Kernel k;
  compile(&k, MISC, "padded", NULL);
  float x[13], y[16];
  for (int i = 0; i < 13; i++) x[i] = (float)i;
  run_ok(&k, (void *[]){x, y}, "N=13");
  for (int i = 0; i < 16; i++) assert_true(i < 13 ? y[i] == (float)i : (isinf(y[i]) && y[i] < 0));
  release(&k);
  /* corpus: logsumexp whose padding must read -inf, all values negative */
  compile_file(&k, "tests/corpus/load_other.tpk", "logsumexp", "BN=512,BM=8");
  int M = 9, N = 700;
  float *lx = frand((size_t)M * N, -30, -20), lse[9];
  run_ok(&k, (void *[]){lx, lse}, "M=9,N=700");
  for (int i = 0; i < M; i++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < N; j++) mx = fmax(mx, lx[i * N + j]);
    for (int j = 0; j < N; j++) s += exp(lx[i * N + j] - mx);
    assert_close(lse[i], mx + log(s), 1e-6, 0, "lse", (size_t)i);
  }
  free(lx);
  release(&k);
}

static void test_program_id_and_iota(void **state) {
  (void)state;
  Kernel k;
  compile(&k, MISC, "pid", NULL);
  float x[10];
  int32_t y[10];
  run_ok(&k, (void *[]){x, y}, "N=10");
  for (int i = 0; i < 10; i++) assert_int_equal(y[i], (i / 4) * 100 + 3 + i % 4);
  release(&k);
}

static void test_where_masks(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/masks.tpk", "prefix_max", "BM=8");
  int M = 11, N = 6;
  float *x = frand((size_t)M * N, -5, 5), y[11];
  int32_t n[11];
  for (int i = 0; i < M; i++) n[i] = i % 7;
  run_ok(&k, (void *[]){x, n, y}, "M=11,N=6");
  for (int i = 0; i < M; i++) {
    if (n[i] == 0) {
      assert_true(isnan(y[i]));
      continue;
    }
    float mx = -INFINITY;
    for (int j = 0; j < n[i] && j < N; j++) mx = fmaxf(mx, x[i * N + j]);
    assert_true(y[i] == mx);
  }
  release(&k);
  compile_file(&k, "tests/corpus/masks.tpk", "negate_odd_lanes", NULL);
  float z[66];
  run_ok(&k, (void *[]){x, z}, "M=11,N=6");
  for (int i = 0; i < M * N; i++) assert_true(z[i] == (i % 2 ? -x[i] : x[i]));
  free(x);
  release(&k);
}

static void test_inout_update(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/whole_array.tpk", "accumulate_grad", NULL);
  float acc[6] = {1, 2, 3, 4, 5, 6}, want[6];
  uint16_t g[6];
  for (int i = 0; i < 6; i++) g[i] = bf16_of(0.5f * (float)i - 1), want[i] = acc[i] + f32_of_bf16(g[i]);
  run_ok(&k, (void *[]){acc, g}, "M=2,N=3");
  for (int i = 0; i < 6; i++) assert_true(acc[i] == want[i]);
  release(&k);
}

/* `= 0` outputs: the caller zeroes; untouched bins stay 0, a ragged last
 * tile's padding adds 0 to bin 0. */
static void test_zero_init_histogram(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/scatter_add.tpk", "weighted_histogram", "BT=512");
  int T = 1000, NB = 16;
  int32_t *bins = malloc(sizeof *bins * (size_t)T);
  for (int t = 0; t < T; t++) bins[t] = 3 + t % 5;
  float *w = frand((size_t)T, 0, 1), hist[16] = {0}, hsq[16] = {0}, want[16] = {0}, wsq[16] = {0};
  for (int t = 0; t < T; t++) want[bins[t]] += w[t], wsq[bins[t]] += w[t] * w[t];
  run_ok(&k, (void *[]){bins, w, hist, hsq}, "T=1000,NBINS=16");
  for (int b = 0; b < NB; b++) {
    assert_true(bits_of(hist[b]) == bits_of(want[b]));
    assert_true(bits_of(hsq[b]) == bits_of(wsq[b]));
  }
  free(bins), free(w);
  release(&k);
}

static void test_reductions(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/reductions.tpk", "row_stats", "BM=8");
  int M = 10, N = 7;
  float *x = frand((size_t)M * N, -3, 3), s[10], mx[10], mn[10], me[10];
  run_ok(&k, (void *[]){x, s, mx, mn, me}, "M=10,N=7");
  for (int i = 0; i < M; i++) {
    float a = 0, hi = -INFINITY, lo = INFINITY;
    for (int j = 0; j < N; j++) a += x[i * N + j], hi = fmaxf(hi, x[i * N + j]), lo = fminf(lo, x[i * N + j]);
    assert_true(bits_of(s[i]) == bits_of(a)); /* one f32 accumulator, ascending */
    assert_true(mx[i] == hi && mn[i] == lo);
    assert_true(bits_of(me[i]) == bits_of(a / 7.0f));
  }
  free(x);
  release(&k);
  compile_file(&k, "tests/corpus/reductions.tpk", "mean_pool", "BD=128");
  int B = 2, S = 5, D = 130;
  float *px = frand((size_t)B * S * D, -1, 1), *py = calloc((size_t)B * D, sizeof *py);
  run_ok(&k, (void *[]){px, py}, "B=2,S=5,D=130");
  for (int b = 0; b < B; b++)
    for (int d = 0; d < D; d++) {
      float a = 0;
      for (int i = 0; i < S; i++) a += px[(b * S + i) * D + d];
      assert_true(bits_of(py[b * D + d]) == bits_of(a / 5.0f));
    }
  free(px), free(py);
  release(&k);
}

static void test_layouts_and_dma(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/layouts.tpk", "merge_heads", "BS=64");
  int B = 2, H = 3, S = 70, D = 4;
  size_t n = (size_t)B * H * S * D;
  uint16_t *x = malloc(n * 2), *y = calloc(n, 2);
  for (size_t i = 0; i < n; i++) x[i] = (uint16_t)i;
  run_ok(&k, (void *[]){x, y}, "B=2,H=3,S=70,D=4");
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int s = 0; s < S; s++)
        for (int d = 0; d < D; d++) assert_int_equal(y[((b * S + s) * H + h) * D + d], x[((b * H + h) * S + s) * D + d]);
  free(x), free(y);
  release(&k);

  compile_file(&k, "tests/corpus/manual_dma.tpk", "scale_rows_dma", "BM=8");
  int M = 11, N = 5;
  float *dx = frand((size_t)M * N, -1, 1), *sc = frand((size_t)M, -2, 2), *dy = calloc((size_t)M * N, sizeof *dy);
  run_ok(&k, (void *[]){dx, sc, dy}, "M=11,N=5");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) assert_true(dy[i * N + j] == dx[i * N + j] * sc[i]);
  free(dx), free(sc), free(dy);
  release(&k);
}

static void test_scalar_index_out_of_range(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/masks.tpk", "write_kv_cache", NULL);
  int B = 2, D = 3, MAXP = 2, NP = 3, PAGE = 4;
  uint16_t knew[6] = {1, 2, 3, 4, 5, 6}, cache[36] = {0};
  int32_t pos[2] = {5, 2}, table[4] = {2, 1, 0, 0};
  run_ok(&k, (void *[]){knew, pos, table, cache}, "B=2,D=3,MAXPAGES=2,NPAGES=3,PAGE=4");
  /* b=0: page table[0][5/4]=1, slot 1; b=1: page table[1][0]=0, slot 2 */
  for (int d = 0; d < D; d++) {
    assert_int_equal(cache[(1 * PAGE + 1) * D + d], knew[d]);
    assert_int_equal(cache[(0 * PAGE + 2) * D + d], knew[D + d]);
  }
  (void)B, (void)MAXP, (void)NP;
  table[1] = 7; /* page 7 of 3 */
  TpkError err;
  assert_int_equal(run(&k, (void *[]){knew, pos, table, cache}, "B=2,D=3,MAXPAGES=2,NPAGES=3,PAGE=4", &err),
                   TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "index 7 is out of range for dimension 0 of size 3"));
  assert_non_null(strstr(err.message, "@write_kv_cache: line "));
  release(&k);
}

static void test_value_gather_and_limits(void **state) {
  (void)state;
  Kernel k;
  compile(&k, MISC, "vgather", NULL);
  float t[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, y[12];
  int32_t ids[4] = {2, 0, 3, 1};
  run_ok(&k, (void *[]){t, ids, y}, "V=4,D=3,T=4");
  for (int i = 0; i < 4; i++)
    for (int d = 0; d < 3; d++) assert_true(y[i * 3 + d] == t[ids[i] * 3 + d]);
  release(&k);
  /* an error deep inside loop, if and carried values frees everything
   * (checked by ASan in test-asan) */
  compile(&k, MISC, "loopgather", NULL);
  int32_t n = 3, lids[3] = {0, 2, 1};
  float lt[3] = {1, 2, 3}, ly[3];
  run_ok(&k, (void *[]){lt, lids, &n, ly}, "V=3,T=3");
  assert_true(ly[0] == 3 && ly[1] == 9 && ly[2] == 6);
  lids[2] = 3;
  TpkError err;
  assert_int_equal(run(&k, (void *[]){lt, lids, &n, ly}, "V=3,T=3", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "@loopgather: line 22:"));
  assert_non_null(strstr(err.message, "gather index 3 (element 2 of the index vector) is out of range for dimension 0 of size 3"));
  release(&k);
  /* a 40 GB value is refused with its name, not attempted */
  compile(&k, MISC, "big", NULL);
  float dummy[1];
  assert_int_equal(run(&k, (void *[]){dummy, dummy}, "M=100000,N=100000", &err), TPK_ERR_NOMEM);
  assert_non_null(strstr(err.message, "f32[100000,100000]"));
  assert_non_null(strstr(err.message, "1 GiB"));
  release(&k);
}

/* Ops the language does not emit directly, from IR text. */
static const char *IR =
    "module \"t\"\n"
    "kernel @ops(%x: ref<f32[2,3]>, %ids: ref<i32[4]>, %o1: out ref<f32[4,3]>, %o2: out ref<f32[2,3]>,\n"
    "            %o3: out ref<f32[2,2]>, %o4: out ref<f32[2]>) {\n"
    "  %a = load %x {index=\"::\"} : f32[2,3]\n"
    "  %b = concat %a, %a {axis=0} : f32[4,3] loc(3:1)\n"
    "  store %o1, %b {index=\"::\", mode=\"set\"}\n"
    "  %i = load %ids {index=\":\"} : i32[4]\n"
    "  %g = gather %a, %i {axis=1} : f32[2,4] loc(5:7)\n"
    "  %z = const {value=1.0} : f32[2,3]\n"
    "  %s = scatter %z, %i, %g {axis=1, mode=\"add\"} : f32[2,3]\n"
    "  store %o2, %s {index=\"::\", mode=\"set\"}\n"
    "  %d = dot %a, %a {lhs_contract=[1], rhs_contract=[1], lhs_batch=[], rhs_batch=[]} : f32[2,2]\n"
    "  store %o3, %d {index=\"::\", mode=\"set\"}\n"
    "  %p = reduce %a {kind=\"prod\", axes=[1], keepdims=false} : f32[2]\n"
    "  store %o4, %p {index=\":\", mode=\"set\"}\n"
    "}\n"
    "func @f(%a: f32[N]) -> (f32[N]) {\n"
    "  return %a\n"
    "}\n"
    "kernel @caller(%x: ref<f32[N]>) {\n"
    "  %a = load %x {index=\":\"} : f32[N]\n"
    "  %r = call %a {callee=\"f\"} : f32[N] loc(9:9)\n"
    "}\n";

static void test_ir_only_ops(void **state) {
  (void)state;
  Kernel k;
  compile_ir(&k, IR, "ops");
  float x[6] = {1, 2, 3, 4, 5, 6}, o1[12], o2[6], o3[4], o4[2];
  int32_t ids[4] = {2, 0, 2, 1};
  run_ok(&k, (void *[]){x, ids, o1, o2, o3, o4}, "");
  for (int i = 0; i < 12; i++) assert_true(o1[i] == x[i % 6]);
  /* scatter-add of gather(a, ids) into ones: column 2 gets a[:,2] twice */
  float want2[6] = {1 + 1, 1 + 2, 1 + 3 + 3, 1 + 4, 1 + 5, 1 + 6 + 6};
  for (int i = 0; i < 6; i++) assert_true(o2[i] == want2[i]);
  float want3[4] = {14, 32, 32, 77};
  for (int i = 0; i < 4; i++) assert_true(o3[i] == want3[i]);
  assert_true(o4[0] == 6 && o4[1] == 120);
  ids[1] = 3; /* gather index 3 of a 3-wide axis */
  TpkError err;
  assert_int_equal(run(&k, (void *[]){x, ids, o1, o2, o3, o4}, "", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "line 5:7: gather: gather index 3 is out of range for dimension 1 of size 3"));
  release(&k);

  compile_ir(&k, IR, "caller");
  float cx[2] = {0};
  assert_int_equal(run(&k, (void *[]){cx}, "N=2", &err), TPK_ERR_UNSUPPORTED);
  assert_non_null(strstr(err.message, "@caller: line 9:9: call:"));
  release(&k);
  compile_ir(&k, IR, "f");
  assert_int_equal(run(&k, (void *[]){cx}, "N=2", &err), TPK_ERR_UNSUPPORTED);
  release(&k);
}

/* A kernel's `require` is checked with the sizes bound, before anything
 * runs: std topk with K > N (it returned index N and -inf), and the
 * requirements of an IR text kernel. */
static void test_requires(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "kernels/topk.tpk", "topk", NULL);
  float x[16] = {3, 1, 2, 0, 5, 4, 7, 6, 0, 0, 0, 0, 0, 0, 0, 0}, values[20];
  int32_t indices[20];
  TpkError err;
  assert_int_equal(run(&k, (void *[]){x, values, indices}, "M=2,N=8,K=10", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'topk': K = 10 is larger than N = 8 (it requires K <= N, line 28)");
  run_ok(&k, (void *[]){x, values, indices}, "M=2,N=8,K=8");
  assert_true(values[0] == 7 && indices[0] == 6 && values[7] == 0 && indices[7] == 3);
  release(&k);

  compile_ir(&k,
             "kernel @halves(%x: ref<f32[N]>, %y: out ref<f32[H]>) require{eq(H*2, N) loc(1:40), gt(N, 0)} {\n"
             "}\n",
             "halves");
  float xs[6] = {0}, ys[3];
  run_ok(&k, (void *[]){xs, ys}, "N=6,H=3");
  assert_int_equal(run(&k, (void *[]){xs, ys}, "N=6,H=2", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'halves': H*2 = 4 differs from N = 6 (it requires H*2 == N, line 1)");
  assert_int_equal(run(&k, (void *[]){xs, ys}, "N=0,H=0", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'halves': N = 0 is not larger than 0 (it requires N > 0)");
  release(&k);
}

/* An accumulating dot (lowering's decision, `dot %a, %b, %x`) continues
 * x's sums: with x = 2^24 every product of 1 rounds away (ties to even),
 * where dot-then-add would give 2^24 + 4. Integers wrap. */
static const char *ACC_DOT =
    "kernel @acc(%a: ref<f32[2,4]>, %b: ref<f32[4,2]>, %x: ref<f32[2,2]>, %y: out ref<f32[2,2]>,\n"
    "            %ia: ref<i8[2,4]>, %ib: ref<i8[4,2]>, %ix: ref<i32[2,2]>, %iy: out ref<i32[2,2]>) {\n"
    "  %0 = load %a {index=\"::\"} : f32[2,4]\n"
    "  %1 = load %b {index=\"::\"} : f32[4,2]\n"
    "  %2 = load %x {index=\"::\"} : f32[2,2]\n"
    "  %3 = dot %0, %1, %2 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[2,2]\n"
    "  store %y, %3 {index=\"::\", mode=\"set\"}\n"
    "  %4 = load %ia {index=\"::\"} : i8[2,4]\n"
    "  %5 = load %ib {index=\"::\"} : i8[4,2]\n"
    "  %6 = load %ix {index=\"::\"} : i32[2,2]\n"
    "  %7 = dot %4, %5, %6 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : i32[2,2]\n"
    "  store %iy, %7 {index=\"::\", mode=\"set\"}\n"
    "}\n";

static void test_accumulating_dot(void **state) {
  (void)state;
  Kernel k;
  compile_ir(&k, ACC_DOT, "acc");
  float a[8], b[8], x[4] = {16777216.0f, 0.5f, -3.0f, 16777216.0f}, y[4];
  int8_t ia[8], ib[8];
  int32_t ix[4] = {INT32_MAX, 10, -7, 0}, iy[4];
  for (int i = 0; i < 8; i++) a[i] = b[i] = 1.0f, ia[i] = ib[i] = 1;
  run_ok(&k, (void *[]){a, b, x, y, ia, ib, ix, iy}, "");
  float want[4] = {16777216.0f, 4.5f, 1.0f, 16777216.0f};
  for (int i = 0; i < 4; i++) assert_close(y[i], want[i], 0, 0, "y", (size_t)i);
  int32_t iwant[4] = {INT32_MIN + 3, 14, -3, 4};
  for (int i = 0; i < 4; i++) assert_int_equal(iy[i], iwant[i]);
  release(&k);
}

/* Every corpus kernel runs on small ragged shapes without error (or with a
 * clean gather/index error for random ids), under ASan in test-asan. */
static void test_corpus_smoke(void **state) {
  (void)state;
  static const char *const files[] = {
      "activations", "add",      "batched_dot", "casts",   "construction", "consts",  "embedding_bwd",
      "flash_attention", "gather", "gelu",      "layernorm", "layernorm_fwd", "layouts", "load_other",
      "manual_dma", "masks",     "matmul",      "matmul_epilogue", "nested_loops", "optimizers", "program_id",
      "ragged",    "reductions", "rmsnorm",     "rope",    "scalar_loops", "scatter_add", "softmax",
      "whole_array"};
  int ran = 0;
  for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/corpus/%s.tpk", files[fi]);
    char *text = test_read_file(test_path(rel), NULL);
    assert_non_null(text);
    TestCompile c;
    test_compile(&c, rel, text, NULL);
    if (!c.module) fail_msg("%s: %s", rel, c.rendered);
    for (int i = 0; i < c.bound->nfuncs; i++) {
      TpkFunc *f = c.bound->funcs[i];
      const char *names[16];
      int ns = tpk_func_symbols(f, names, 16);
      int64_t sv[16];
      for (int s = 0; s < ns; s++) test_small_symbol(NULL, names[s], &sv[s]); /* small, ragged against every block */
      void *args[32] = {0};
      for (int p = 0; p < f->nparams; p++) {
        const TpkType *t = f->params[p].value->type;
        int64_t n = 1;
        for (int d = 0; d < t->rank; d++) {
          int64_t v = 0;
          assert_true(tpk_dim_eval(t->dims[d], test_small_symbol, NULL, &v));
          n *= v;
        }
        args[p] = calloc((size_t)n + 1, 8);
        /* inputs: small values, so integer ones are valid indices (< 3) */
        for (int64_t e = 0; e < n || (t->rank == 0 && e == 0); e++) {
          double v = urand(0, 3);
          unsigned char *q = (unsigned char *)args[p] + e * (int64_t)tpk_dtype_size(t->dtype);
          switch (t->dtype) {
          case TPK_F32: *(float *)(void *)q = (float)(v - 1.5); break;
          case TPK_BF16: *(uint16_t *)(void *)q = bf16_of((float)(v - 1.5)); break;
          case TPK_F16: *(uint16_t *)(void *)q = 0x3c00; break;
          case TPK_I32: *(int32_t *)(void *)q = (int32_t)v; break;
          case TPK_BOOL: *q = v > 1.5; break;
          default: *q = (unsigned char)v; break;
          }
        }
      }
      TpkError err;
      TpkStatus st = tpk_interp_run(f, args, sv, &err);
      if (st != TPK_OK && st != TPK_ERR_INVALID) fail_msg("%s @%s: %s", rel, f->name, err.message);
      if (getenv("TPK_TEST_VERBOSE") && st != TPK_OK) print_message("%s @%s: %s\n", rel, f->name, err.message);
      ran += st == TPK_OK;
      for (int p = 0; p < f->nparams; p++) free(args[p]);
    }
    test_compile_free(&c);
    free(text);
  }
  assert_true(ran > 40);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add),
      cmocka_unit_test(test_requires),
      cmocka_unit_test(test_softmax_ragged),
      cmocka_unit_test(test_matmul_ragged_bitexact),
      cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_embedding_bwd_duplicates),
      cmocka_unit_test(test_gather_out_of_range_error),
      cmocka_unit_test(test_flash_attention),
      cmocka_unit_test(test_bf16_rounding_ties),
      cmocka_unit_test(test_float_to_int_and_wrap),
      cmocka_unit_test(test_refnum_against_brute_force),
      cmocka_unit_test(test_bf16_add_rounds),
      cmocka_unit_test(test_int_wrap_and_division),
      cmocka_unit_test(test_i8_dot_wraps),
      cmocka_unit_test(test_nan_semantics),
      cmocka_unit_test(test_batched_dots),
      cmocka_unit_test(test_if_else_and_loop_carried),
      cmocka_unit_test(test_static_slice_and_masking),
      cmocka_unit_test(test_load_other_at_ragged_edge),
      cmocka_unit_test(test_program_id_and_iota),
      cmocka_unit_test(test_where_masks),
      cmocka_unit_test(test_inout_update),
      cmocka_unit_test(test_zero_init_histogram),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_layouts_and_dma),
      cmocka_unit_test(test_scalar_index_out_of_range),
      cmocka_unit_test(test_value_gather_and_limits),
      cmocka_unit_test(test_ir_only_ops),
      cmocka_unit_test(test_accumulating_dot),
      cmocka_unit_test(test_corpus_smoke),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
