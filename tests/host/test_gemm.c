/*
 * test_gemm.c — host/gemm.c against naive loops.
 *
 * Each case fills logical A (M x K) and B (K x N) matrices, stores them in
 * the layout under test (transposed or not, leading dimensions wider than
 * the matrix, the operand's element type) and checks C against
 *   - a triple loop with the contract's order (one f32 accumulator per
 *     element, k ascending, fmaf): bit for bit, NaN matching any NaN;
 *   - a double-precision sum, within a rounding-error bound;
 * for every instruction set this CPU has and the public entry points.
 * C's padding between rows must come back untouched.
 *
 * Self-contained (no tests/support.h): links host/gemm.o alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "host/gemm.h"
#include "host/prims.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------- */

static uint32_t rng_next(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Reference half -> float, written differently from gemm.c's. */
static float ref_f16(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0x1f)
    mag = man ? f32_of_bits(0x7f800000u | ((uint32_t)man << 13)) : INFINITY;
  else if (exp == 0)
    mag = ldexpf((float)man, -24);
  else
    mag = ldexpf((float)(1024 + man), exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

static float ref_bf16(uint16_t h) { return f32_of_bits((uint32_t)h << 16); }

static int same_float(float x, float y) { return (isnan(x) && isnan(y)) || bits_of_f32(x) == bits_of_f32(y); }

/* The implementations to check: each instruction set this CPU has, and the
 * public entry points (the best one, through prims.h). */
static const TpkGemmImpl PUBLIC = {"public",     tpk_gemm_f32,    tpk_gemm_bf16,  tpk_gemm_f16,
                                   tpk_gemm_i8, tpk_gemm_i32, tpk_gemm_pack_b, tpk_gemm_packed};

static int impls(const TpkGemmImpl **out) {
  static const char *const names[] = {"generic", "avx2", "avx512"};
  int n = 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (tpk_gemm_impl(names[i]))
      out[n++] = tpk_gemm_impl(names[i]);
  out[n++] = &PUBLIC;
  return n;
}

/* Elements of a stored R x Cn operand: (r, c) at r*ld + c, or c*ld + r when
 * transposed. The allocation ends right after the last element, so ASan
 * catches reads past it; padding between rows holds NaN (or 0x7f bytes for
 * integers) so a read of it shows in the result. */
static int64_t stored_len(int64_t R, int64_t Cn, int64_t ld, int trans) {
  if (R == 0 || Cn == 0)
    return 1;
  return trans ? (Cn - 1) * ld + R : (R - 1) * ld + Cn;
}

static int64_t stored_at(int64_t r, int64_t c, int64_t ld, int trans) { return trans ? c * ld + r : r * ld + c; }

/* ---- float cases ---------------------------------------------------------------- */

enum { T_F32, T_BF16, T_F16 };

/* One random operand value of type `type`: the bits stored (for halves) and
 * the exact f32 value. `special` mixes in inf, NaN, zeros and subnormals. */
static float random_value(int type, uint32_t *s, int special, uint16_t *bits) {
  uint32_t r = rng_next(s);
  if (type == T_F32) {
    if (special && r % 17 == 0) {
      static const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x80000000u, 0x00000001u, 0x007fffffu};
      return f32_of_bits(sp[(r >> 8) % 6]);
    }
    return ((float)(rng_next(s) >> 8) / 16777216.0f - 0.5f) * 4.0f;
  }
  uint16_t h;
  if (type == T_BF16) {
    /* exponents 120..134 (values near 1), random sign and mantissa */
    h = (uint16_t)(((r >> 16) & 0x8000u) | ((120u + (r >> 8) % 15u) << 7) | (r & 0x7fu));
    if (special && r % 13 == 0) {
      static const uint16_t sp[] = {0x7f80, 0xff80, 0x7fc1, 0x8000, 0x0001, 0x007f, 0x0000};
      h = sp[(r >> 8) % 7];
    }
  } else {
    /* exponents 10..20 (values near 1) */
    h = (uint16_t)(((r >> 16) & 0x8000u) | ((10u + (r >> 8) % 11u) << 10) | (r & 0x3ffu));
    if (special && r % 13 == 0) {
      static const uint16_t sp[] = {0x7c00, 0xfc00, 0x7e00, 0x7d01, 0x8000, 0x0001, 0x03ff, 0x8200, 0x7bff};
      h = sp[(r >> 8) % 9];
    }
  }
  *bits = h;
  return type == T_BF16 ? ref_bf16(h) : ref_f16(h);
}

typedef struct Shape3 {
  int64_t M, N, K;
} Shape3;

/* Run one float case on `impl` and check it; `pad` widens every leading
 * dimension. */
static void float_case(int type, const TpkGemmImpl *impl, Shape3 sh, int at, int bt, int acc, int64_t pad,
                       int special, uint32_t seed) {
  int64_t M = sh.M, N = sh.N, K = sh.K;
  int64_t lda = (at ? M : K) + pad, ldb = (bt ? K : N) + pad, ldc = N + pad;
  uint32_t s = seed;
  float *la = malloc(sizeof(float) * (size_t)(M * K + 1)), *lb = malloc(sizeof(float) * (size_t)(K * N + 1));
  int64_t na = stored_len(M, K, lda, at), nb = stored_len(K, N, ldb, bt), nc = stored_len(M, N, ldc, 0);
  float *fa = malloc(sizeof(float) * (size_t)na), *fb = malloc(sizeof(float) * (size_t)nb);
  uint16_t *ha = malloc(sizeof(uint16_t) * (size_t)na), *hb = malloc(sizeof(uint16_t) * (size_t)nb);
  float *c = malloc(sizeof(float) * (size_t)nc), *c0 = malloc(sizeof(float) * (size_t)nc);
  for (int64_t i = 0; i < na; i++) fa[i] = NAN, ha[i] = 0x7fc0;
  for (int64_t i = 0; i < nb; i++) fb[i] = NAN, hb[i] = 0x7fc0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      uint16_t h = 0;
      float v = random_value(type, &s, special, &h);
      la[i * K + k] = v;
      fa[stored_at(i, k, lda, at)] = v;
      ha[stored_at(i, k, lda, at)] = h;
    }
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) {
      uint16_t h = 0;
      float v = random_value(type, &s, special, &h);
      lb[k * N + j] = v;
      fb[stored_at(k, j, ldb, bt)] = v;
      hb[stored_at(k, j, ldb, bt)] = h;
    }
  for (int64_t i = 0; i < nc; i++) c0[i] = (i % ldc < N) ? (float)(rng_next(&s) % 1000) / 100.0f - 5.0f : 1234.5f;
  memcpy(c, c0, sizeof(float) * (size_t)nc);

  if (type == T_F32)
    impl->f32(M, N, K, fa, lda, at, fb, ldb, bt, c, ldc, acc);
  else
    (type == T_BF16 ? impl->bf16 : impl->f16)(M, N, K, ha, lda, at, hb, ldb, bt, c, ldc, acc);

  int bad = 0;
  for (int64_t i = 0; i < M && !bad; i++) {
    for (int64_t j = 0; j < N && !bad; j++) {
      float f = acc ? c0[i * ldc + j] : 0.0f;
      double d = acc ? (double)c0[i * ldc + j] : 0.0, mag = fabs(d);
      for (int64_t k = 0; k < K; k++) {
        f = fmaf(la[i * K + k], lb[k * N + j], f);
        d += (double)la[i * K + k] * lb[k * N + j];
        mag += fabs((double)la[i * K + k] * lb[k * N + j]);
      }
      float got = c[i * ldc + j];
      if (!same_float(got, f)) {
        print_error("%s type %d %lldx%lldx%lld at=%d bt=%d acc=%d: C[%lld,%lld] = %a, fmaf loop gives %a\n",
                    impl->isa, type, (long long)M, (long long)N, (long long)K, at, bt, acc, (long long)i,
                    (long long)j, (double)got, (double)f);
        bad = 1;
      }
      /* the same value is also close to the exact sum (finite inputs) */
      if (!special && fabs((double)got - d) > 1e-6 * (double)(K + 1) * mag + 1e-30) {
        print_error("%s: C[%lld,%lld] = %.9g, double sum %.9g\n", impl->isa, (long long)i, (long long)j,
                    (double)got, d);
        bad = 1;
      }
    }
    for (int64_t j = N; N > 0 && j < ldc && i + 1 < M && !bad; j++)
      if (bits_of_f32(c[i * ldc + j]) != bits_of_f32(1234.5f)) {
        print_error("%s: padding C[%lld,%lld] changed\n", impl->isa, (long long)i, (long long)j);
        bad = 1;
      }
  }
  free(la);
  free(lb);
  free(fa);
  free(fb);
  free(ha);
  free(hb);
  free(c);
  free(c0);
  assert_false(bad);
}

/* Sizes: single elements, empty, edge tiles of every micro-kernel shape
 * (4x16, 6x16, 14x32), exact tiles, and K and N crossing the KC = 256 and
 * NC = 256/512 blocks; 30 x 96 x 300: full and partial slivers of a
 * transposed A read in place (whole panels only), over two K blocks. */
static const Shape3 SHAPES[] = {
    {1, 1, 1},     {0, 5, 3},    {5, 0, 3},     {5, 3, 0},     {0, 0, 0},    {17, 33, 65},
    {14, 32, 16},  {28, 64, 7},  {6, 16, 9},    {4, 16, 300},  {1000, 7, 129}, {7, 1000, 5},
    {15, 33, 257}, {29, 65, 513}, {3, 530, 20}, {2, 1030, 3},  {1, 50, 600},  {30, 96, 300},
};

static void float_shapes(int type, int special) {
  const TpkGemmImpl *im[4];
  int n = impls(im);
  uint32_t seed = 1;
  for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++)
    for (int t = 0; t < 4; t++)
      for (int acc = 0; acc < 2; acc++)
        for (int ii = 0; ii < n; ii++)
          float_case(type, im[ii], SHAPES[si], t & 1, t >> 1, acc, (si % 3) * 3, special, seed++);
}

static void test_f32_shapes(void **state) {
  (void)state;
  float_shapes(T_F32, 0);
}

static void test_f32_specials(void **state) {
  (void)state;
  float_shapes(T_F32, 1);
}

static void test_bf16_shapes(void **state) {
  (void)state;
  float_shapes(T_BF16, 0);
  float_shapes(T_BF16, 1);
}

static void test_f16_shapes(void **state) {
  (void)state;
  float_shapes(T_F16, 0);
  float_shapes(T_F16, 1);
}

/* Every instruction set gives the generic path's bits on a larger problem. */
static void test_isas_match_generic(void **state) {
  (void)state;
  const int64_t M = 70, N = 300, K = 600;
  uint32_t s = 99;
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *want = malloc(sizeof(float) * M * N), *got = malloc(sizeof(float) * M * N);
  for (int64_t i = 0; i < M * K; i++) a[i] = (float)(int32_t)rng_next(&s) * 0x1p-31f;
  for (int64_t i = 0; i < K * N; i++) b[i] = (float)(int32_t)rng_next(&s) * 0x1p-31f;
  const TpkGemmImpl *im[4];
  int n = impls(im);
  for (int t = 0; t < 4; t++) {
    int at = t & 1, bt = t >> 1;
    int64_t lda = at ? M : K, ldb = bt ? K : N;
    tpk_gemm_f32_generic(M, N, K, a, lda, at, b, ldb, bt, want, N, 0);
    for (int ii = 0; ii < n; ii++) {
      memset(got, 0, sizeof(float) * M * N);
      im[ii]->f32(M, N, K, a, lda, at, b, ldb, bt, got, N, 0);
      assert_memory_equal(got, want, sizeof(float) * M * N);
    }
  }
  free(a);
  free(b);
  free(want);
  free(got);
}

/* Halves convert exactly: x * 1 with the accumulator at -0 gives x. */
static void test_half_conversions(void **state) {
  (void)state;
  static const struct {
    uint16_t h;
    uint32_t f;
  } F16[] = {
      {0x0000, 0x00000000u}, {0x8000, 0x80000000u}, {0x0001, 0x33800000u}, {0x03ff, 0x387fc000u},
      {0x0400, 0x38800000u}, {0x3c00, 0x3f800000u}, {0xc000, 0xc0000000u}, {0x7bff, 0x477fe000u},
      {0x7c00, 0x7f800000u}, {0xfc00, 0xff800000u}, {0x8001, 0xb3800000u}, {0x3555, 0x3eaaa000u},
  };
  const TpkGemmImpl *im[4];
  int n = impls(im);
  const uint16_t one_f16 = 0x3c00, one_bf16 = 0x3f80;
  for (int ii = 0; ii < n; ii++) {
    for (size_t i = 0; i < sizeof F16 / sizeof *F16; i++) {
      float c = -0.0f;
      im[ii]->f16(1, 1, 1, &F16[i].h, 1, 0, &one_f16, 1, 0, &c, 1, 1);
      assert_int_equal(bits_of_f32(c), F16[i].f);
    }
    uint16_t nan16 = 0x7e00, nanb = 0x7fc0;
    float c = 0;
    im[ii]->f16(1, 1, 1, &nan16, 1, 0, &one_f16, 1, 0, &c, 1, 0);
    assert_true(isnan(c));
    c = 0;
    im[ii]->bf16(1, 1, 1, &nanb, 1, 0, &one_bf16, 1, 0, &c, 1, 0);
    assert_true(isnan(c));
    /* bf16: the smallest subnormal and -inf */
    uint16_t sub = 0x0001, ninf = 0xff80;
    c = -0.0f;
    im[ii]->bf16(1, 1, 1, &sub, 1, 0, &one_bf16, 1, 0, &c, 1, 1);
    assert_int_equal(bits_of_f32(c), 0x00010000u);
    im[ii]->bf16(1, 1, 1, &ninf, 1, 0, &one_bf16, 1, 0, &c, 1, 0);
    assert_int_equal(bits_of_f32(c), 0xff800000u);
  }
}

/* K = 0: C is left as it was with accumulate, zeroed without. */
static void test_k_zero(void **state) {
  (void)state;
  const TpkGemmImpl *im[4];
  int n = impls(im);
  for (int ii = 0; ii < n; ii++) {
    float c[6] = {1, 2, 3, 4, 5, 6};
    im[ii]->f32(2, 2, 0, NULL, 1, 0, NULL, 2, 0, c, 3, 1);
    assert_true(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4 && c[4] == 5 && c[5] == 6);
    im[ii]->f32(2, 2, 0, NULL, 1, 0, NULL, 2, 0, c, 3, 0);
    assert_true(c[0] == 0 && c[1] == 0 && c[2] == 3 && c[3] == 0 && c[4] == 0 && c[5] == 6);
    int32_t ci[2] = {7, 8};
    im[ii]->i32(1, 2, 0, NULL, 1, 0, NULL, 2, 0, ci, 2, 0);
    assert_true(ci[0] == 0 && ci[1] == 0);
  }
}

/* ---- integer cases --------------------------------------------------------------- */

static void int_case(int is_i8, const TpkGemmImpl *impl, Shape3 sh, int at, int bt, int acc, int64_t pad,
                     uint32_t seed) {
  int64_t M = sh.M, N = sh.N, K = sh.K;
  int64_t lda = (at ? M : K) + pad, ldb = (bt ? K : N) + pad, ldc = N + pad;
  uint32_t s = seed;
  int64_t na = stored_len(M, K, lda, at), nb = stored_len(K, N, ldb, bt), nc = stored_len(M, N, ldc, 0);
  int32_t *la = malloc(sizeof(int32_t) * (size_t)(M * K + 1)), *lb = malloc(sizeof(int32_t) * (size_t)(K * N + 1));
  int8_t *a8 = malloc((size_t)na), *b8 = malloc((size_t)nb);
  int32_t *a32 = malloc(sizeof(int32_t) * (size_t)na), *b32 = malloc(sizeof(int32_t) * (size_t)nb);
  int32_t *c = malloc(sizeof(int32_t) * (size_t)nc), *c0 = malloc(sizeof(int32_t) * (size_t)nc);
  memset(a8, 0x7f, (size_t)na);
  memset(b8, 0x7f, (size_t)nb);
  memset(a32, 0x7f, sizeof(int32_t) * (size_t)na);
  memset(b32, 0x7f, sizeof(int32_t) * (size_t)nb);
  /* i32 values: large ones so products and sums wrap */
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      uint32_t r = rng_next(&s);
      int32_t v = is_i8 ? (int8_t)(r & 0xff) : (int32_t)(r % 3 ? (int32_t)(r >> 1) : (int32_t)(r & 0xff) - 128);
      la[i * K + k] = v;
      a8[stored_at(i, k, lda, at)] = (int8_t)(is_i8 ? v : 0);
      a32[stored_at(i, k, lda, at)] = v;
    }
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) {
      uint32_t r = rng_next(&s);
      int32_t v = is_i8 ? (int8_t)(r & 0xff) : (int32_t)(r % 3 ? -(int32_t)(r >> 2) : (int32_t)(r & 0xff) - 128);
      lb[k * N + j] = v;
      b8[stored_at(k, j, ldb, bt)] = (int8_t)(is_i8 ? v : 0);
      b32[stored_at(k, j, ldb, bt)] = v;
    }
  for (int64_t i = 0; i < nc; i++) c0[i] = (i % ldc < N) ? (int32_t)rng_next(&s) : 0x5a5a5a5a;
  memcpy(c, c0, sizeof(int32_t) * (size_t)nc);
  if (is_i8)
    impl->i8(M, N, K, a8, lda, at, b8, ldb, bt, c, ldc, acc);
  else
    impl->i32(M, N, K, a32, lda, at, b32, ldb, bt, c, ldc, acc);
  int bad = 0;
  for (int64_t i = 0; i < M && !bad; i++) {
    for (int64_t j = 0; j < N && !bad; j++) {
      uint32_t want = acc ? (uint32_t)c0[i * ldc + j] : 0u;
      for (int64_t k = 0; k < K; k++) want += (uint32_t)la[i * K + k] * (uint32_t)lb[k * N + j];
      if ((uint32_t)c[i * ldc + j] != want) {
        print_error("%s %s %lldx%lldx%lld at=%d bt=%d acc=%d: C[%lld,%lld] = %u, want %u\n", impl->isa,
                    is_i8 ? "i8" : "i32", (long long)M, (long long)N, (long long)K, at, bt, acc, (long long)i,
                    (long long)j, (unsigned)c[i * ldc + j], (unsigned)want);
        bad = 1;
      }
    }
    for (int64_t j = N; N > 0 && j < ldc && i + 1 < M && !bad; j++)
      if (c[i * ldc + j] != 0x5a5a5a5a) {
        print_error("%s: padding C[%lld,%lld] changed\n", impl->isa, (long long)i, (long long)j);
        bad = 1;
      }
  }
  free(la);
  free(lb);
  free(a8);
  free(b8);
  free(a32);
  free(b32);
  free(c);
  free(c0);
  assert_false(bad);
}

static void int_shapes(int is_i8) {
  const TpkGemmImpl *im[4];
  int n = impls(im);
  uint32_t seed = 7;
  for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++)
    for (int t = 0; t < 4; t++)
      for (int acc = 0; acc < 2; acc++)
        for (int ii = 0; ii < n; ii++) int_case(is_i8, im[ii], SHAPES[si], t & 1, t >> 1, acc, (si % 3) * 2, seed++);
}

static void test_i8_shapes(void **state) {
  (void)state;
  int_shapes(1);
}

static void test_i32_shapes(void **state) {
  (void)state;
  int_shapes(0);
}

/* 140000 products of 127*127 (and -128*-128) pass 2^31: the sum wraps. */
static void test_i8_wraps(void **state) {
  (void)state;
  const int64_t K = 140000;
  int8_t *a = malloc((size_t)(2 * K)), *b = malloc((size_t)(2 * K));
  for (int64_t k = 0; k < K; k++) a[k] = 127, a[K + k] = -128, b[k] = 127, b[K + k] = -128;
  const TpkGemmImpl *im[4];
  int n = impls(im);
  for (int ii = 0; ii < n; ii++) {
    /* A is 2 x K; B is K x 2 stored transposed (2 rows of K) */
    int32_t c[4];
    im[ii]->i8(2, 2, K, a, K, 0, b, K, 1, c, 2, 0);
    uint32_t p = (uint32_t)K * 16129u, q = (uint32_t)K * 16384u, r = (uint32_t)K * (uint32_t)(-16256);
    assert_int_equal((uint32_t)c[0], p);
    assert_int_equal((uint32_t)c[1], r);
    assert_int_equal((uint32_t)c[2], r);
    assert_int_equal((uint32_t)c[3], q);
    assert_true(c[0] < 0 && c[3] < 0); /* they did wrap */
  }
  free(a);
  free(b);
}

static void test_i32_wraps(void **state) {
  (void)state;
  const int32_t a[3] = {INT32_MAX, INT32_MIN, 65536}, b[3] = {2, -1, 65536};
  const TpkGemmImpl *im[4];
  int n = impls(im);
  for (int ii = 0; ii < n; ii++) {
    int32_t c = 5;
    im[ii]->i32(1, 1, 3, a, 3, 0, b, 1, 0, &c, 1, 1);
    uint32_t want = 5u + (uint32_t)INT32_MAX * 2u + (uint32_t)INT32_MIN * 0xffffffffu + 65536u * 65536u;
    assert_int_equal((uint32_t)c, want);
  }
}

/* gemm_packed with B packed once by pack_b gives gemm's bits, for every
 * element type, layout and accumulation, and pack_b writes within
 * TPK_GEMM_PACKED_BYTES (a guard past it stays). */
static void test_packed_b_matches_gemm(void **state) {
  (void)state;
  static const Shape3 more[] = {{64, 1030, 600}, {70, 513, 257}, {200, 40, 33}};
  const TpkGemmImpl *im[4];
  int n = impls(im);
  uint32_t s = 7;
  static const int dts[] = {TPK_PRIM_F32, TPK_PRIM_BF16, TPK_PRIM_F16, TPK_PRIM_I8, TPK_PRIM_I32};
  for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES + sizeof more / sizeof *more; si++) {
    Shape3 sh = si < sizeof SHAPES / sizeof *SHAPES ? SHAPES[si] : more[si - sizeof SHAPES / sizeof *SHAPES];
    int64_t M = sh.M, N = sh.N, K = sh.K, pad = (int64_t)(si % 3) * 2;
    for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
      int dt = dts[di];
      size_t esize = dt == TPK_PRIM_I8 ? 1 : (dt == TPK_PRIM_BF16 || dt == TPK_PRIM_F16) ? 2 : 4;
      for (int t = 0; t < 4; t++) {
        int at = t & 1, bt = t >> 1;
        int64_t lda = (at ? M : K) + pad, ldb = (bt ? K : N) + pad, ldc = N + pad;
        int64_t na = stored_len(M, K, lda, at), nb = stored_len(K, N, ldb, bt), nc = stored_len(M, N, ldc, 0);
        unsigned char *a = malloc(esize * (size_t)(na + 1)), *b = malloc(esize * (size_t)(nb + 1));
        uint32_t *c0 = malloc(4 * (size_t)(nc + 1)), *c1 = malloc(4 * (size_t)(nc + 1)), *c2 = malloc(4 * (size_t)(nc + 1));
        for (int64_t i = 0; i < na * (int64_t)esize; i++) a[i] = (unsigned char)(rng_next(&s) % 251);
        for (int64_t i = 0; i < nb * (int64_t)esize; i++) b[i] = (unsigned char)(rng_next(&s) % 251);
        if (dt == TPK_PRIM_F32) /* finite floats: bytes of small values */
          for (int64_t i = 0; i < na; i++) ((float *)a)[i] = (float)(rng_next(&s) % 2001) / 1000.0f - 1.0f;
        if (dt == TPK_PRIM_F32)
          for (int64_t i = 0; i < nb; i++) ((float *)b)[i] = (float)(rng_next(&s) % 2001) / 1000.0f - 1.0f;
        for (int64_t i = 0; i < nc; i++) c0[i] = dt == TPK_PRIM_I8 || dt == TPK_PRIM_I32 ? rng_next(&s) % 100 : bits_of_f32(0.25f);
        size_t bytes = (size_t)TPK_GEMM_PACKED_BYTES(K, N);
        unsigned char *packed = aligned_alloc(64, (bytes + 64 + 63) / 64 * 64);
        for (int ii = 0; ii < n; ii++) {
          const TpkGemmImpl *impl = im[ii];
          memset(packed, 0xa5, bytes + 64);
          impl->pack_b(dt, K, N, b, ldb, bt, packed);
          for (size_t g = bytes; g < bytes + 64; g++)
            if (packed[g] != 0xa5) fail_msg("%s: pack_b wrote past TPK_GEMM_PACKED_BYTES(%lld, %lld)", impl->isa, (long long)K, (long long)N);
          for (int acc = 0; acc < 2; acc++) {
            memcpy(c1, c0, 4 * (size_t)nc);
            memcpy(c2, c0, 4 * (size_t)nc);
            switch (dt) {
            case TPK_PRIM_F32: impl->f32(M, N, K, (float *)a, lda, at, (float *)b, ldb, bt, (float *)c1, ldc, acc); break;
            case TPK_PRIM_BF16: impl->bf16(M, N, K, (uint16_t *)a, lda, at, (uint16_t *)b, ldb, bt, (float *)c1, ldc, acc); break;
            case TPK_PRIM_F16: impl->f16(M, N, K, (uint16_t *)a, lda, at, (uint16_t *)b, ldb, bt, (float *)c1, ldc, acc); break;
            case TPK_PRIM_I8: impl->i8(M, N, K, (int8_t *)a, lda, at, (int8_t *)b, ldb, bt, (int32_t *)c1, ldc, acc); break;
            default: impl->i32(M, N, K, (int32_t *)a, lda, at, (int32_t *)b, ldb, bt, (int32_t *)c1, ldc, acc); break;
            }
            impl->packed(dt, M, N, K, a, lda, at, packed, c2, ldc, acc);
            for (int64_t i = 0; i < nc; i++)
              if (c1[i] != c2[i] && !(dt != TPK_PRIM_I8 && dt != TPK_PRIM_I32 && isnan(f32_of_bits(c1[i])) && isnan(f32_of_bits(c2[i]))))
                fail_msg("%s dtype %d %lldx%lldx%lld at=%d bt=%d acc=%d: element %lld: %08x packed, %08x gemm", impl->isa, dt,
                         (long long)M, (long long)N, (long long)K, at, bt, acc, (long long)i, c2[i], c1[i]);
          }
        }
        free(packed);
        free(a);
        free(b);
        free(c0);
        free(c1);
        free(c2);
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f32_shapes),
      cmocka_unit_test(test_f32_specials),
      cmocka_unit_test(test_bf16_shapes),
      cmocka_unit_test(test_f16_shapes),
      cmocka_unit_test(test_isas_match_generic),
      cmocka_unit_test(test_half_conversions),
      cmocka_unit_test(test_k_zero),
      cmocka_unit_test(test_i8_shapes),
      cmocka_unit_test(test_i32_shapes),
      cmocka_unit_test(test_i8_wraps),
      cmocka_unit_test(test_i32_wraps),
      cmocka_unit_test(test_packed_b_matches_gemm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
