/*
 * test_prims.c — host/prims.c: dtype conversions against an independent
 * rounding oracle, unary f32 functions against f64 libm (ulp sweeps),
 * bit-identity of every instruction set with the portable table, and the
 * documented order of reductions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/prims.h"

/* Not in prims.h: the per-instruction-set tables (NULL when this CPU lacks one). */
const TpkPrims *tpk_prims_for_isa(const char *isa);

static const char *const isas[] = {"generic", "avx2", "avx512"};
enum { N_ISAS = 3 };

static uint32_t bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
static float from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Deterministic 64-bit generator (splitmix64). */
static uint64_t rng_state;
static uint64_t rng(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ======================================================================
 * Rounding oracle: the positive finite values of a format, sorted, with
 * the code each has; RNE picks the nearer neighbour, a tie the even code.
 * One virtual value past the largest (2^(emax+1), even code) stands for
 * overflow, so "past the largest finite" means "rounds beyond it".
 * ====================================================================== */

typedef struct {
  int n;
  double val[65536];
  uint32_t code[65536];
  double past;          /* the virtual value past the largest finite */
  uint32_t over;        /* positive code of an overflow (inf or NaN) */
  uint32_t sign;        /* the sign bit of a code */
  float (*widen)(uint32_t);
} Oracle;

static float w_bf16(uint32_t c) { return tpk_bf16_to_f32((uint16_t)c); }
static float w_f16(uint32_t c) { return tpk_f16_to_f32((uint16_t)c); }
static float w_e4m3(uint32_t c) { return tpk_f8e4m3_to_f32((uint8_t)c); }
static float w_e5m2(uint32_t c) { return tpk_f8e5m2_to_f32((uint8_t)c); }

static Oracle *oracle_new(int width, uint32_t over, double past, float (*widen)(uint32_t)) {
  Oracle *o = calloc(1, sizeof *o);
  assert_non_null(o);
  uint32_t sign = 1u << (width - 1);
  /* Positive codes widen to increasing values (checked), which also tests
   * that widening is monotonic. */
  for (uint32_t c = 0; c < sign; c++) {
    float v = widen(c);
    if (isnan(v) || isinf(v)) continue;
    if (o->n) assert_true(v > o->val[o->n - 1]);
    o->val[o->n] = v;
    o->code[o->n] = c;
    o->n++;
  }
  o->past = past;
  o->over = over;
  o->sign = sign;
  o->widen = widen;
  return o;
}

/* RNE of a non-NaN f32 into the format, as a code. */
static uint32_t oracle_round(const Oracle *o, float f) {
  uint32_t s = signbit(f) ? o->sign : 0;
  double a = fabs((double)f);
  if (isinf(a)) return s | o->over;
  int lo = 0, hi = o->n - 1;
  if (a >= o->val[hi]) {
    double mid = (o->val[hi] + o->past) / 2;
    if (a < mid) return s | o->code[hi];
    if (a > mid) return s | o->over;
    return s | ((o->code[hi] & 1) ? o->over : o->code[hi]);
  }
  while (hi - lo > 1) { /* val[lo] <= a < val[hi] */
    int m = (lo + hi) / 2;
    if (o->val[m] <= a) lo = m; else hi = m;
  }
  double dl = a - o->val[lo], dh = o->val[hi] - a;
  if (dl < dh) return s | o->code[lo];
  if (dh < dl) return s | o->code[hi];
  return s | ((o->code[lo] & 1) ? o->code[hi] : o->code[lo]);
}

/* f32 values that probe every rounding boundary of the format: each value,
 * each midpoint, and their f32 neighbours; plus a stride through all f32. */
static void check_against_oracle(const Oracle *o, uint32_t (*narrow)(float), uint64_t stride) {
  for (int i = 0; i < o->n; i++) {
    double v = o->val[i], next = i + 1 < o->n ? o->val[i + 1] : o->past;
    float probes[] = {(float)v, (float)((v + next) / 2)};
    for (int p = 0; p < 2; p++) {
      for (int d = -2; d <= 2; d++) {
        uint32_t b = bits(probes[p]) + (uint32_t)d;
        if (probes[p] == 0 && d < 0) continue;
        float f = from_bits(b);
        for (int neg = 0; neg < 2; neg++) {
          float g = neg ? -f : f;
          uint32_t want = oracle_round(o, g), got = narrow(g);
          if (want != got) fail_msg("f32 %a (0x%08x): want 0x%x, got 0x%x", (double)g, bits(g), want, got);
        }
      }
    }
  }
  for (uint64_t b = 0; b < (1ull << 32); b += stride) {
    float f = from_bits((uint32_t)b);
    if (isnan(f)) continue;
    uint32_t want = oracle_round(o, f), got = narrow(f);
    if (want != got) fail_msg("f32 %a (0x%08x): want 0x%x, got 0x%x", (double)f, bits(f), want, got);
  }
}

static uint32_t n_bf16(float f) { return tpk_f32_to_bf16(f); }
static uint32_t n_f16(float f) { return tpk_f32_to_f16(f); }
static uint32_t n_e4m3(float f) { return tpk_f32_to_f8e4m3(f); }
static uint32_t n_e5m2(float f) { return tpk_f32_to_f8e5m2(f); }

static void test_narrowing_matches_oracle(void **state) {
  (void)state;
  Oracle *o = oracle_new(16, 0x7f80, 0x1p128, w_bf16);
  check_against_oracle(o, n_bf16, 4099);
  free(o);
  o = oracle_new(16, 0x7c00, 0x1p16, w_f16);
  assert_int_equal(o->n, 0x7c00);
  check_against_oracle(o, n_f16, 4099);
  free(o);
  o = oracle_new(8, 0x7f, 480, w_e4m3); /* 480 would be S.1111.111, the NaN */
  assert_int_equal(o->n, 127);
  check_against_oracle(o, n_e4m3, 4099);
  free(o);
  o = oracle_new(8, 0x7c, 0x1p16, w_e5m2);
  assert_int_equal(o->n, 124);
  check_against_oracle(o, n_e5m2, 4099);
  free(o);
}

/* ======================================================================
 * Round trips and tables
 * ====================================================================== */

static void test_bf16_round_trip(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = tpk_bf16_to_f32((uint16_t)h);
    assert_int_equal(bits(f), h << 16);
    uint16_t back = tpk_f32_to_bf16(f);
    if ((h & 0x7fff) > 0x7f80) {
      assert_int_equal(back, h | 0x40); /* quieted, sign and payload kept */
    } else {
      assert_int_equal(back, h);
    }
  }
}

static void test_f16_round_trip(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = tpk_f16_to_f32((uint16_t)h);
    uint16_t back = tpk_f32_to_f16(f);
    if ((h & 0x7fff) > 0x7c00) {
      assert_true(isnan(f));
      assert_int_equal(back, h | 0x200);
    } else {
      assert_false(isnan(f));
      assert_int_equal(back, h);
    }
  }
  assert_true(tpk_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(tpk_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(tpk_f16_to_f32(0x0400) == 0x1p-14f);
  assert_true(tpk_f16_to_f32(0xfc00) == -INFINITY);
  assert_int_equal(bits(tpk_f16_to_f32(0x8000)), 0x80000000u);
}

typedef struct {
  uint32_t in; /* f32 bits */
  uint32_t out;
} Case;

static void test_bf16_rne_table(void **state) {
  (void)state;
  static const Case cases[] = {
      {0x3f808000, 0x3f80}, /* tie, even below: down */
      {0x3f818000, 0x3f82}, /* tie, odd below: up */
      {0x3f807fff, 0x3f80}, /* just below a tie */
      {0x3f808001, 0x3f81}, /* just above a tie */
      {0xbf818000, 0xbf82}, /* sign-symmetric */
      {0x7f7f7fff, 0x7f7f}, /* largest that stays finite */
      {0x7f7f8000, 0x7f80}, /* tie past the max: to even, which is inf */
      {0x7f7fffff, 0x7f80}, /* FLT_MAX overflows */
      {0xff7fffff, 0xff80},
      {0x00008000, 0x0000}, /* subnormal tie to even 0 */
      {0x00018000, 0x0002}, /* subnormal tie to even 2 */
      {0x00000001, 0x0000}, /* tiny: to zero */
      {0x80010000, 0x8001}, /* exact negative subnormal */
      {0x007fffff, 0x0080}, /* largest subnormal rounds up to the smallest normal */
      {0x80000000, 0x8000},
      {0x7f800000, 0x7f80},
      {0xff800000, 0xff80},
      {0x7fc00000, 0x7fc0},
      {0x7f800001, 0x7fc0}, /* signaling NaN quieted; low payload does not fit */
      {0xffa00000, 0xffe0}, /* payload kept */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = tpk_f32_to_bf16(from_bits(cases[i].in));
    if (got != cases[i].out) fail_msg("0x%08x: want 0x%04x, got 0x%04x", cases[i].in, cases[i].out, got);
  }
}

static void test_f16_rne_table(void **state) {
  (void)state;
  static const Case cases[] = {
      {0x3f800000, 0x3c00}, /* 1 */
      {0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, even down */
      {0x3f803000, 0x3c02}, /* 1 + 3*2^-11: tie, even up */
      {0x3f800fff, 0x3c00}, /* just below a tie */
      {0x3f801001, 0x3c01}, /* just above a tie */
      {0x477fe000, 0x7bff}, /* 65504 */
      {0x477fefff, 0x7bff}, /* just below 65520 */
      {0x477ff000, 0x7c00}, /* 65520: tie past the max goes to inf */
      {0x49742400, 0x7c00}, /* 1e6 */
      {0xc7800000, 0xfc00}, /* -65536 */
      {0x33800000, 0x0001}, /* 2^-24, smallest subnormal */
      {0x33000000, 0x0000}, /* 2^-25: tie with 0, even */
      {0x33000001, 0x0001}, /* just above it */
      {0x33c00000, 0x0002}, /* 3*2^-25: tie between 1 and 2 */
      {0x387fc000, 0x03ff}, /* largest subnormal */
      {0x387fe000, 0x0400}, /* tie above it: carries into the smallest normal */
      {0x38800000, 0x0400}, /* 2^-14 */
      {0x32800000, 0x0000}, /* 2^-26 underflows */
      {0xb2800000, 0x8000}, /* to -0 */
      {0x80000001, 0x8000},
      {0x7f800000, 0x7c00},
      {0xff800000, 0xfc00},
      {0x7f800001, 0x7e00}, /* NaN: quiet bit set, top payload bits kept */
      {0x7fbfe000, 0x7fff},
      {0xffa00000, 0xff00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = tpk_f32_to_f16(from_bits(cases[i].in));
    if (got != cases[i].out) fail_msg("0x%08x: want 0x%04x, got 0x%04x", cases[i].in, cases[i].out, got);
  }
}

static void test_f8_all_values(void **state) {
  (void)state;
  for (uint32_t b = 0; b < 256; b++) {
    float f = tpk_f8e4m3_to_f32((uint8_t)b);
    if ((b & 0x7f) == 0x7f) {
      assert_true(isnan(f));
      assert_int_equal(signbit(f) != 0, b >> 7);
    } else {
      assert_false(isnan(f) || isinf(f));
    }
    assert_int_equal(tpk_f32_to_f8e4m3(f), b);

    f = tpk_f8e5m2_to_f32((uint8_t)b);
    if ((b & 0x7f) > 0x7c) {
      assert_true(isnan(f));
      assert_int_equal(tpk_f32_to_f8e5m2(f), b | 0x02); /* quieted */
    } else {
      assert_int_equal(tpk_f32_to_f8e5m2(f), b);
    }
  }
  assert_true(tpk_f8e4m3_to_f32(0x7e) == 448.0f);
  assert_true(tpk_f8e4m3_to_f32(0x38) == 1.0f);
  assert_true(tpk_f8e4m3_to_f32(0x01) == 0x1p-9f);
  assert_true(tpk_f8e4m3_to_f32(0x08) == 0x1p-6f);
  assert_true(tpk_f8e4m3_to_f32(0xfe) == -448.0f);
  assert_true(tpk_f8e5m2_to_f32(0x7b) == 57344.0f);
  assert_true(tpk_f8e5m2_to_f32(0x7c) == INFINITY);
  assert_true(tpk_f8e5m2_to_f32(0x3c) == 1.0f);
  assert_true(tpk_f8e5m2_to_f32(0x01) == 0x1p-16f);
}

static void test_f8_rounding(void **state) {
  (void)state;
  static const struct {
    float in;
    uint8_t e4m3, e5m2;
  } cases[] = {
      {1.0f + 1.0f / 16, 0x38, 0x3c},   /* e4m3 tie: down to even 1.0 */
      {1.0f + 3.0f / 16, 0x3a, 0x3d},   /* e4m3 tie: up to even 1.25 */
      {1.125f, 0x39, 0x3c},             /* e5m2 tie 1 | 1.25: even 1.0 */
      {1.375f, 0x3b, 0x3e},             /* e5m2 tie 1.25 | 1.5: even 1.5 */
      {448.0f, 0x7e, 0x5f},
      {464.0f, 0x7e, 0x5f},             /* e4m3 tie past 448: to even 448 */
      {465.0f, 0x7f, 0x5f},             /* past it: NaN (no inf in e4m3) */
      {1e4f, 0x7f, 0x71},
      {57344.0f, 0x7f, 0x7b},
      {61439.0f, 0x7f, 0x7b},
      {61440.0f, 0x7f, 0x7c},           /* e5m2 tie past the max: inf */
      {-1e9f, 0xff, 0xfc},
      {INFINITY, 0x7f, 0x7c},
      {-INFINITY, 0xff, 0xfc},
      {NAN, 0x7f, 0x7e},
      {-NAN, 0xff, 0xfe},
      {0x1p-10f, 0x00, 0x14},           /* e4m3: half its smallest subnormal, tie to 0 */
      {0x1.8p-10f, 0x01, 0x16},
      {0x1.8p-9f, 0x02, 0x1a},          /* e4m3 subnormal tie 1 | 2: even 2 */
      {0x1p-17f, 0x00, 0x00},           /* e5m2: half its smallest subnormal */
      {0x1.8p-16f, 0x00, 0x02},         /* e5m2 subnormal tie 1 | 2 */
      {-0.0f, 0x80, 0x80},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t a = tpk_f32_to_f8e4m3(cases[i].in), b = tpk_f32_to_f8e5m2(cases[i].in);
    if (a != cases[i].e4m3 || b != cases[i].e5m2)
      fail_msg("%a: want e4m3 0x%02x e5m2 0x%02x, got 0x%02x 0x%02x", (double)cases[i].in, cases[i].e4m3,
               cases[i].e5m2, a, b);
  }
}

/* ======================================================================
 * convert
 * ====================================================================== */

static const int esize[] = {4, 2, 2, 1, 1, 4, 2, 1, 1, 1};

static void convert_one(int from, int to, const void *src, void *dst) {
  tpk_prim_convert(from, to, src, dst, 1);
}

static void test_int_float_edges(void **state) {
  (void)state;
  float f;
  int32_t i;
  int16_t s;
  int8_t c;
  uint8_t u;
  uint16_t h;

  i = (1 << 24) + 1; /* tie: to even */
  convert_one(TPK_PRIM_I32, TPK_PRIM_F32, &i, &f);
  assert_true(f == 16777216.0f);
  i = (1 << 24) + 3;
  convert_one(TPK_PRIM_I32, TPK_PRIM_F32, &i, &f);
  assert_true(f == 16777220.0f);
  i = INT32_MIN;
  convert_one(TPK_PRIM_I32, TPK_PRIM_F32, &i, &f);
  assert_true(f == -0x1p31f);
  /* i32 -> bf16 rounds once: 2^24 + 2^16 + 1 is just above the bf16 tie
   * (up), though through f32 it would first become the tie and then go to
   * even (down). */
  i = (1 << 24) + (1 << 16) + 1;
  convert_one(TPK_PRIM_I32, TPK_PRIM_BF16, &i, &h);
  assert_int_equal(h, 0x4b81);
  i = 65520;
  convert_one(TPK_PRIM_I32, TPK_PRIM_F16, &i, &h);
  assert_int_equal(h, 0x7c00);
  i = 65519;
  convert_one(TPK_PRIM_I32, TPK_PRIM_F16, &i, &h);
  assert_int_equal(h, 0x7bff);

  static const struct {
    float in;
    int32_t i32;
    int16_t i16;
    int8_t i8;
    uint8_t u8, b;
  } fc[] = {
      {0x1p31f, INT32_MAX, INT16_MAX, INT8_MAX, 255, 1},
      {-0x1p31f, INT32_MIN, INT16_MIN, INT8_MIN, 0, 1},
      {1e10f, INT32_MAX, INT16_MAX, INT8_MAX, 255, 1},
      {-1e10f, INT32_MIN, INT16_MIN, INT8_MIN, 0, 1},
      {NAN, 0, 0, 0, 0, 1},
      {INFINITY, INT32_MAX, INT16_MAX, INT8_MAX, 255, 1},
      {-INFINITY, INT32_MIN, INT16_MIN, INT8_MIN, 0, 1},
      {-1.9f, -1, -1, -1, 0, 1},
      {2.9f, 2, 2, 2, 2, 1},
      {255.9f, 255, 255, 127, 255, 1},
      {300.5f, 300, 300, 127, 255, 1},
      {40000.0f, 40000, INT16_MAX, INT8_MAX, 255, 1},
      {-0.0f, 0, 0, 0, 0, 0},
      {0x1p-149f, 0, 0, 0, 0, 1},
      {2147483520.0f, 2147483520, INT16_MAX, INT8_MAX, 255, 1},
  };
  for (size_t k = 0; k < sizeof fc / sizeof fc[0]; k++) {
    convert_one(TPK_PRIM_F32, TPK_PRIM_I32, &fc[k].in, &i);
    convert_one(TPK_PRIM_F32, TPK_PRIM_I16, &fc[k].in, &s);
    convert_one(TPK_PRIM_F32, TPK_PRIM_I8, &fc[k].in, &c);
    convert_one(TPK_PRIM_F32, TPK_PRIM_U8, &fc[k].in, &u);
    uint8_t b;
    convert_one(TPK_PRIM_F32, TPK_PRIM_BOOL, &fc[k].in, &b);
    if (i != fc[k].i32 || s != fc[k].i16 || c != fc[k].i8 || u != fc[k].u8 || b != fc[k].b)
      fail_msg("%a -> %d %d %d %u %u", (double)fc[k].in, i, s, c, u, b);
  }

  /* integer -> integer wraps */
  static const struct {
    int32_t in;
    int16_t i16;
    int8_t i8;
    uint8_t u8, b;
  } ic[] = {
      {300, 300, 44, 44, 1},   {-1, -1, -1, 255, 1},        {200, 200, -56, 200, 1},
      {70000, 4464, 112, 112, 1}, {256, 256, 0, 0, 1},     {INT32_MIN, 0, 0, 0, 1},
      {INT32_MAX, -1, -1, 255, 1}, {-32769, 32767, -1, 255, 1}, {0, 0, 0, 0, 0},
  };
  for (size_t k = 0; k < sizeof ic / sizeof ic[0]; k++) {
    uint8_t b;
    convert_one(TPK_PRIM_I32, TPK_PRIM_I16, &ic[k].in, &s);
    convert_one(TPK_PRIM_I32, TPK_PRIM_I8, &ic[k].in, &c);
    convert_one(TPK_PRIM_I32, TPK_PRIM_U8, &ic[k].in, &u);
    convert_one(TPK_PRIM_I32, TPK_PRIM_BOOL, &ic[k].in, &b);
    if (s != ic[k].i16 || c != ic[k].i8 || u != ic[k].u8 || b != ic[k].b)
      fail_msg("%d -> %d %d %u %u", ic[k].in, s, c, u, b);
  }
  u = 255;
  convert_one(TPK_PRIM_U8, TPK_PRIM_I8, &u, &c);
  assert_int_equal(c, -1);
  c = -1;
  convert_one(TPK_PRIM_I8, TPK_PRIM_U8, &c, &u);
  assert_int_equal(u, 255);
  convert_one(TPK_PRIM_I8, TPK_PRIM_I32, &c, &i);
  assert_int_equal(i, -1);
  u = 2; /* a bool byte that is not 0/1 still reads as true */
  convert_one(TPK_PRIM_BOOL, TPK_PRIM_F32, &u, &f);
  assert_true(f == 1.0f);
  convert_one(TPK_PRIM_BOOL, TPK_PRIM_I32, &u, &i);
  assert_int_equal(i, 1);
}

/* A buffer of n elements of `type` with edge values and random bits. */
static void fill(int type, void *p, int64_t n) {
  static const uint32_t f32_edges[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
                                       0x00000001, 0x007fffff, 0x7f7fffff, 0x3f808000, 0x4f000000, 0xcf000000,
                                       0x477ff000, 0x43e80000, 0x3f800000, 0xbf000000};
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rng();
    switch (type) {
    case TPK_PRIM_F32: {
      uint32_t b = i < 16 ? f32_edges[i] : (r & 1) ? (uint32_t)(r >> 32) : bits((float)((int64_t)(r >> 40) - (1 << 23)) / 64);
      memcpy((char *)p + 4 * i, &b, 4);
      break;
    }
    case TPK_PRIM_I32: {
      uint32_t b = (uint32_t)(r >> 32);
      if (r & 1) b = (uint32_t)((int32_t)(b >> 20) - 2048);
      memcpy((char *)p + 4 * i, &b, 4);
      break;
    }
    case TPK_PRIM_F16: case TPK_PRIM_BF16: case TPK_PRIM_I16: ((uint16_t *)p)[i] = (uint16_t)(r >> 48); break;
    case TPK_PRIM_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r >> 63); break;
    default: ((uint8_t *)p)[i] = (uint8_t)(r >> 56); break;
    }
  }
}

/* Every pair, every instruction set, every length up to 70 and a long one:
 * bit-identical to the portable table (vector bodies and tails). */
static void test_convert_isas_agree(void **state) {
  (void)state;
  enum { N = 4099 };
  static char src[N * 4], want[N * 4], got[N * 4];
  rng_state = 1;
  const TpkPrims *g = tpk_prims_generic();
  for (int from = 0; from < 10; from++) {
    fill(from, src, N);
    for (int to = 0; to < 10; to++) {
      g->convert(from, to, src, want, N);
      for (int k = 1; k < N_ISAS; k++) {
        const TpkPrims *p = tpk_prims_for_isa(isas[k]);
        if (!p) continue;
        for (int64_t n = 0; n <= 70; n++) {
          memset(got, 0xa5, sizeof got);
          p->convert(from, to, src, got, n);
          if (memcmp(got, want, (size_t)(n * esize[to])) != 0 || (unsigned char)got[n * esize[to]] != 0xa5)
            fail_msg("%s convert %d -> %d, n %d differs", isas[k], from, to, (int)n);
        }
        p->convert(from, to, src, got, N);
        if (memcmp(got, want, (size_t)N * esize[to]) != 0) fail_msg("%s convert %d -> %d differs", isas[k], from, to);
      }
      /* spot-check the generic table against the scalar conversions */
      if (from == TPK_PRIM_F32 && to == TPK_PRIM_F16)
        for (int i = 0; i < N; i++) assert_int_equal(((uint16_t *)want)[i], tpk_f32_to_f16(((float *)src)[i]));
    }
  }
}

/* f32 -> f16 and back through every table equals the scalar functions,
 * for all 65536 halves and a stride of all f32 (F16C vs our RNE). */
static void test_f16_vector_matches_scalar(void **state) {
  (void)state;
  enum { N = 65536 };
  uint16_t *h = malloc(N * 2), *h2 = malloc(N * 2);
  float *f = malloc(N * 4);
  assert_true(h && h2 && f);
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *p = tpk_prims_for_isa(isas[k]);
    if (!p) continue;
    for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    p->convert(TPK_PRIM_F16, TPK_PRIM_F32, h, f, N);
    for (uint32_t i = 0; i < N; i++) assert_int_equal(bits(f[i]), bits(tpk_f16_to_f32((uint16_t)i)));
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)N * 97) {
      for (uint32_t i = 0; i < N; i++) f[i] = from_bits((uint32_t)(base + (uint64_t)i * 97));
      p->convert(TPK_PRIM_F32, TPK_PRIM_F16, f, h2, N);
      for (uint32_t i = 0; i < N; i++)
        if (h2[i] != tpk_f32_to_f16(f[i])) fail_msg("%s: f32 0x%08x -> 0x%04x", isas[k], bits(f[i]), h2[i]);
      p->convert(TPK_PRIM_F32, TPK_PRIM_BF16, f, h2, N);
      for (uint32_t i = 0; i < N; i++)
        if (h2[i] != tpk_f32_to_bf16(f[i])) fail_msg("%s: f32 0x%08x -> bf16 0x%04x", isas[k], bits(f[i]), h2[i]);
    }
  }
  free(h);
  free(h2);
  free(f);
}

/* ======================================================================
 * unary
 * ====================================================================== */

static double reference(int fn, double x) {
  switch (fn) {
  case TPK_PRIM_EXP: return exp(x);
  case TPK_PRIM_LOG: return log(x);
  case TPK_PRIM_SQRT: return sqrt(x);
  case TPK_PRIM_RSQRT: return 1 / sqrt(x);
  case TPK_PRIM_TANH: return tanh(x);
  case TPK_PRIM_SIGMOID: return 1 / (1 + exp(-x));
  default: return erf(x);
  }
}

static const char *const fn_names[] = {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"};

/* Distance in representable f32 values (inf is one past FLT_MAX). */
static int64_t ulp_distance(float a, float b) {
  int64_t ka = signbit(a) ? -(int64_t)(bits(a) & 0x7fffffff) : (int64_t)bits(a);
  int64_t kb = signbit(b) ? -(int64_t)(bits(b) & 0x7fffffff) : (int64_t)bits(b);
  return ka > kb ? ka - kb : kb - ka;
}

/* Inputs: the specials, then random bit patterns (all exponents, both
 * signs, subnormals) and random values in each function's busy range. */
static void sweep_inputs(float *x, int64_t n, float busy) {
  static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 0x1p-149f, -0x1p-149f,
                                   0x1p-126f, FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 88.72283f, 88.72284f, -103.97f,
                                   -103.98f, -87.33655f, 0x1p-5f, 0.5f, 9.01f, 3.92f, 1e-30f, -1e-30f};
  int64_t ns = (int64_t)(sizeof specials / sizeof specials[0]);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rng();
    if (i < ns)
      x[i] = specials[i];
    else if (r & 1)
      x[i] = from_bits((uint32_t)(r >> 32));
    else
      x[i] = busy * (2.0f * (float)(r >> 40) / (float)(1 << 24) - 1.0f);
  }
}

static void test_unary_accuracy(void **state) {
  (void)state;
  enum { N = 1 << 20 };
  static const float busy[] = {110, 4, 1e4f, 1e4f, 12, 110, 5};
  float *x = malloc(N * 4), *y = malloc(N * 4);
  assert_true(x && y);
  rng_state = 7;
  const TpkPrims *p = tpk_prims();
  for (int fn = 0; fn < 7; fn++) {
    sweep_inputs(x, N, busy[fn]);
    if (fn == TPK_PRIM_LOG || fn == TPK_PRIM_SQRT || fn == TPK_PRIM_RSQRT)
      for (int i = 24; i < N; i += 2) x[i] = fabsf(x[i]); /* mostly the domain */
    p->unary_f32(fn, x, y, N);
    int64_t worst = 0;
    float worst_x = 0;
    for (int i = 0; i < N; i++) {
      double r = reference(fn, x[i]);
      float cr = (float)r;
      if (isnan(cr)) {
        if (!isnan(y[i])) fail_msg("%s(%a) = %a, want NaN", fn_names[fn], (double)x[i], (double)y[i]);
        continue;
      }
      if (isnan(y[i])) fail_msg("%s(%a) = NaN, want %a", fn_names[fn], (double)x[i], (double)cr);
      int64_t d = ulp_distance(y[i], cr);
      if (d > worst) worst = d, worst_x = x[i];
    }
    print_message("%-8s %s: max %lld ulp (at %a) over %d points\n", fn_names[fn], p->isa, (long long)worst,
                  (double)worst_x, N);
    if (worst > (fn == TPK_PRIM_SQRT ? 0 : 2)) fail_msg("%s: %lld ulp at %a", fn_names[fn], (long long)worst, (double)worst_x);
  }
  free(x);
  free(y);
}

static void test_unary_specials(void **state) {
  (void)state;
  static const struct {
    int fn;
    float in, out;
  } cases[] = {
      {TPK_PRIM_EXP, 89.0f, INFINITY},       {TPK_PRIM_EXP, INFINITY, INFINITY}, {TPK_PRIM_EXP, -INFINITY, 0.0f},
      {TPK_PRIM_EXP, -104.0f, 0.0f},         {TPK_PRIM_EXP, 0.0f, 1.0f},         {TPK_PRIM_EXP, -0.0f, 1.0f},
      {TPK_PRIM_EXP, -103.0f, 0x1p-149f},    {TPK_PRIM_LOG, 0.0f, -INFINITY},    {TPK_PRIM_LOG, -0.0f, -INFINITY},
      {TPK_PRIM_LOG, INFINITY, INFINITY},    {TPK_PRIM_LOG, 1.0f, 0.0f},         {TPK_PRIM_LOG, 2.0f, 0.693147182f},
      {TPK_PRIM_SQRT, -0.0f, -0.0f},         {TPK_PRIM_SQRT, INFINITY, INFINITY}, {TPK_PRIM_RSQRT, 0.0f, INFINITY},
      {TPK_PRIM_RSQRT, -0.0f, -INFINITY},    {TPK_PRIM_RSQRT, INFINITY, 0.0f},   {TPK_PRIM_RSQRT, 4.0f, 0.5f},
      {TPK_PRIM_TANH, INFINITY, 1.0f},       {TPK_PRIM_TANH, -INFINITY, -1.0f},  {TPK_PRIM_TANH, -0.0f, -0.0f},
      {TPK_PRIM_TANH, 10.0f, 1.0f},          {TPK_PRIM_SIGMOID, -INFINITY, 0.0f}, {TPK_PRIM_SIGMOID, INFINITY, 1.0f},
      {TPK_PRIM_SIGMOID, 0.0f, 0.5f},        {TPK_PRIM_SIGMOID, -200.0f, 0.0f},  {TPK_PRIM_ERF, INFINITY, 1.0f},
      {TPK_PRIM_ERF, -INFINITY, -1.0f},      {TPK_PRIM_ERF, -0.0f, -0.0f},       {TPK_PRIM_ERF, 0.0f, 0.0f},
  };
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *p = tpk_prims_for_isa(isas[k]);
    if (!p) continue;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      float y;
      p->unary_f32(cases[i].fn, &cases[i].in, &y, 1);
      if (bits(y) != bits(cases[i].out))
        fail_msg("%s %s(%a) = %a, want %a", isas[k], fn_names[cases[i].fn], (double)cases[i].in, (double)y,
                 (double)cases[i].out);
    }
    float neg = -1.0f, nan_in = NAN, y;
    for (int fn = 0; fn < 7; fn++) {
      p->unary_f32(fn, &nan_in, &y, 1);
      assert_true(isnan(y));
    }
    p->unary_f32(TPK_PRIM_LOG, &neg, &y, 1);
    assert_true(isnan(y));
    p->unary_f32(TPK_PRIM_SQRT, &neg, &y, 1);
    assert_true(isnan(y));
    p->unary_f32(TPK_PRIM_RSQRT, &neg, &y, 1);
    assert_true(isnan(y));
  }
}

/* exp's results below 2^-126 take their own path (prims_math.inc: no
 * underflowing operation) whenever a vector holds a lane below -87: every
 * f32 from -104.5 to -86, alone and beside lanes of the plain path, is
 * within the budget and has the generic table's bits. */
static void test_exp_subnormal_results(void **state) {
  (void)state;
  enum { N = 1 << 16 };
  float *x = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
  assert_true(x && want && got);
  const TpkPrims *g = tpk_prims_generic();
  uint32_t lo = bits(-86.0f), hi = bits(-104.5f); /* negative: bits grow with magnitude */
  int64_t worst = 0;
  for (uint32_t b = lo; b <= hi; b += N) {
    for (int i = 0; i < N; i++) x[i] = (i % 5 == 4) ? 1.5f : from_bits(b + (uint32_t)i < hi ? b + (uint32_t)i : hi);
    g->unary_f32(TPK_PRIM_EXP, x, want, N);
    for (int i = 0; i < N; i++) {
      int64_t d = ulp_distance(want[i], (float)exp(x[i]));
      if (d > worst) worst = d;
    }
    for (int k = 1; k < N_ISAS; k++) {
      const TpkPrims *p = tpk_prims_for_isa(isas[k]);
      if (!p) continue;
      p->unary_f32(TPK_PRIM_EXP, x, got, N);
      for (int i = 0; i < N; i++)
        if (bits(got[i]) != bits(want[i]))
          fail_msg("%s exp(%a) = %a, generic %a", isas[k], (double)x[i], (double)got[i], (double)want[i]);
    }
  }
  print_message("exp below -86: max %lld ulp\n", (long long)worst);
  assert_true(worst <= 2);
  free(x);
  free(want);
  free(got);
}

/* Every instruction set gives the generic table's bits, whatever the length
 * and offset (tails), and in place. */
static void test_unary_isas_agree(void **state) {
  (void)state;
  enum { N = 1 << 18 };
  float *x = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
  assert_true(x && want && got);
  rng_state = 11;
  const TpkPrims *g = tpk_prims_generic();
  for (int fn = 0; fn < 7; fn++) {
    sweep_inputs(x, N, 20);
    g->unary_f32(fn, x, want, N);
    for (int k = 1; k < N_ISAS; k++) {
      const TpkPrims *p = tpk_prims_for_isa(isas[k]);
      if (!p) continue;
      p->unary_f32(fn, x, got, N);
      for (int i = 0; i < N; i++)
        if (bits(got[i]) != bits(want[i]))
          fail_msg("%s %s(%a): %a, generic %a", isas[k], fn_names[fn], (double)x[i], (double)got[i], (double)want[i]);
      for (int off = 0; off < 3; off++)
        for (int n = 0; n <= 40; n++) {
          memcpy(got, x, sizeof(float) * 64);
          p->unary_f32(fn, got + off, got + off, n); /* in place, odd alignment */
          for (int i = 0; i < 64; i++) {
            float w = x[i];
            if (i >= off && i < off + n) g->unary_f32(fn, x + i, &w, 1);
            if (bits(got[i]) != bits(w)) fail_msg("%s %s off %d n %d at %d", isas[k], fn_names[fn], off, n, i);
          }
        }
    }
  }
  free(x);
  free(want);
  free(got);
}

/* unary1_f32, one element (what code tcc built calls for a chain's exp or
 * erf), gives unary_f32's bits on every instruction set. */
static void test_unary1_is_unary(void **state) {
  (void)state;
  enum { N = 1 << 14 };
  float *x = malloc(N * 4), *want = malloc(N * 4);
  assert_true(x && want);
  rng_state = 13;
  const TpkPrims *g = tpk_prims_generic();
  for (int fn = 0; fn < 7; fn++) {
    sweep_inputs(x, N, 20);
    g->unary_f32(fn, x, want, N);
    for (int k = 0; k < N_ISAS; k++) {
      const TpkPrims *p = tpk_prims_for_isa(isas[k]);
      if (!p) continue;
      for (int i = 0; i < N; i++) {
        float y = p->unary1_f32(fn, x[i]);
        if (bits(y) != bits(want[i]))
          fail_msg("%s unary1 %s(%a): %a, unary_f32 %a", isas[k], fn_names[fn], (double)x[i], (double)y, (double)want[i]);
      }
    }
  }
  free(x);
  free(want);
}

/* ======================================================================
 * reduce
 * ====================================================================== */

/* The row sum prims.h documents: 64 lanes, x[l] into lane l % 64, then
 * lanes folded in halves. */
static float lane_sum(const float *x, int64_t len, int64_t stride) {
  float a[64];
  for (int j = 0; j < 64; j++) a[j] = -0.0f;
  for (int64_t l = 0; l < len; l++) a[l % 64] += x[l * stride];
  for (int w = 32; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) a[j] += a[j + w];
  return a[0];
}

static void test_reduce_sum_order(void **state) {
  (void)state;
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *p = tpk_prims_for_isa(isas[k]);
    if (!p) continue;
    /* rows: lanes 0 and 2 fold first (w = 2), then lane 1 (w = 1) */
    float x[] = {1e8f, 1.0f, -1e8f}, out = -1;
    p->reduce_f32(TPK_PRIM_SUM, x, 1, 3, 1, &out);
    assert_true(out == 1.0f); /* one ascending chain: (1e8 + 1) rounds to 1e8, then 0 */
    float y[] = {1e8f, -1e8f, 1.0f}; /* 1 goes to lane 2 and is lost in 1e8 */
    p->reduce_f32(TPK_PRIM_SUM, y, 1, 3, 1, &out);
    assert_true(out == 0.0f);
    float z65[65] = {0};
    z65[0] = 1e8f, z65[1] = 1.0f, z65[64] = -1e8f; /* lane 0 adds x[64] before any folding */
    p->reduce_f32(TPK_PRIM_SUM, z65, 1, 65, 1, &out);
    assert_true(out == 1.0f);
    z65[32] = 3.0f, z65[64] = 0; /* lane 32 folds into lane 0 first: 1e8 + 3 rounds to 1e8, then + 1 */
    p->reduce_f32(TPK_PRIM_SUM, z65, 1, 65, 1, &out);
    assert_true(out == 1e8f);
  }
  float out = -1;
  /* along a middle axis ([1, 3, 2], reduce over 3): one chain per output, ascending */
  float z[] = {1e8f, 5, 1, 2, -1e8f, 3};
  float o2[2];
  tpk_prim_reduce_f32(TPK_PRIM_SUM, z, 1, 3, 2, o2);
  assert_true(o2[0] == 0.0f && o2[1] == 10.0f);
  float negz = -0.0f;
  tpk_prim_reduce_f32(TPK_PRIM_SUM, &negz, 1, 1, 1, &out);
  assert_int_equal(bits(out), 0x80000000u);
}

static void test_reduce_max_min(void **state) {
  (void)state;
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *p = tpk_prims_for_isa(isas[k]);
    if (!p) continue;
    float a[] = {1, -INFINITY, 3, 2}, out;
    p->reduce_f32(TPK_PRIM_MAX, a, 1, 4, 1, &out);
    assert_true(out == 3);
    p->reduce_f32(TPK_PRIM_MIN, a, 1, 4, 1, &out);
    assert_true(out == -INFINITY);
    float b[40];
    for (int i = 0; i < 40; i++) b[i] = (float)i;
    b[17] = NAN;
    p->reduce_f32(TPK_PRIM_MAX, b, 1, 40, 1, &out);
    assert_true(isnan(out));
    p->reduce_f32(TPK_PRIM_MIN, b, 1, 40, 1, &out);
    assert_true(isnan(out));
    float o4[4];
    p->reduce_f32(TPK_PRIM_MAX, b, 1, 10, 4, o4); /* column 1 holds b[17] */
    assert_true(o4[0] == 36 && isnan(o4[1]) && o4[2] == 38 && o4[3] == 39);
    p->reduce_f32(TPK_PRIM_MIN, b, 1, 10, 4, o4);
    assert_true(o4[0] == 0 && isnan(o4[1]) && o4[2] == 2 && o4[3] == 3);
    float z[] = {-0.0f, 0.0f, -0.0f};
    p->reduce_f32(TPK_PRIM_MAX, z, 1, 3, 1, &out);
    assert_int_equal(bits(out), 0);
    p->reduce_f32(TPK_PRIM_MIN, z + 1, 1, 2, 1, &out);
    assert_int_equal(bits(out), 0x80000000u);
    /* len 0 */
    float e[3] = {7, 7, 7};
    p->reduce_f32(TPK_PRIM_SUM, a, 3, 0, 1, e);
    assert_true(e[0] == 0 && e[1] == 0 && e[2] == 0 && !signbit(e[0]));
    p->reduce_f32(TPK_PRIM_MAX, a, 1, 0, 3, e);
    assert_true(e[0] == -INFINITY && e[2] == -INFINITY);
    p->reduce_f32(TPK_PRIM_MIN, a, 3, 0, 1, e);
    assert_true(e[0] == INFINITY && e[2] == INFINITY);
  }
}

/* Random shapes: every instruction set equals a straightforward loop. */
static void test_reduce_random(void **state) {
  (void)state;
  enum { N = 1 << 16 };
  float *x = malloc(N * 4), *got = malloc(N * 4), *want = malloc(N * 4);
  assert_true(x && got && want);
  rng_state = 3;
  for (int i = 0; i < N; i++) x[i] = (float)((int64_t)(rng() >> 40) - (1 << 23)) * 0x1p-10f * (float)(i % 7 + 1);
  static const int64_t shapes[][3] = {{1, 1000, 1}, {7, 33, 1},  {3, 50, 17},  {2, 9, 130},
                                      {1, 1, 300},  {5, 64, 64}, {4, 4096, 1}, {3, 127, 1}};
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *p = tpk_prims_for_isa(isas[k]);
    if (!p) continue;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t outer = shapes[s][0], len = shapes[s][1], inner = shapes[s][2];
      for (int kind = 0; kind < 3; kind++) {
        for (int64_t o = 0; o < outer; o++)
          for (int64_t i = 0; i < inner; i++) {
            if (kind == TPK_PRIM_SUM && inner == 1) {
              want[o] = lane_sum(x + o * len, len, 1);
              continue;
            }
            float acc = x[o * len * inner + i];
            for (int64_t l = 1; l < len; l++) {
              float v = x[(o * len + l) * inner + i];
              acc = kind == TPK_PRIM_SUM ? acc + v : kind == TPK_PRIM_MAX ? fmaxf(acc, v) : fminf(acc, v);
            }
            want[o * inner + i] = acc;
          }
        p->reduce_f32(kind, x, outer, len, inner, got);
        for (int64_t i = 0; i < outer * inner; i++)
          if (bits(got[i]) != bits(want[i]))
            fail_msg("%s kind %d shape %d: [%d] %a want %a", isas[k], kind, (int)s, (int)i, (double)got[i],
                     (double)want[i]);
      }
    }
  }
  free(x);
  free(got);
  free(want);
}

static void test_tables(void **state) {
  (void)state;
  const TpkPrims *p = tpk_prims();
  assert_ptr_equal(p, tpk_prims());
  assert_int_equal(p->version, TPK_PRIMS_VERSION);
  assert_non_null(p->isa);
  for (int k = 0; k < N_ISAS; k++) {
    const TpkPrims *t = tpk_prims_for_isa(isas[k]);
    if (!t) continue;
    assert_string_equal(t->isa, isas[k]);
    assert_true(t->gemm_f32 && t->gemm_bf16 && t->gemm_f16 && t->gemm_i8 && t->gemm_i32 && t->unary_f32 &&
                t->reduce_f32 && t->convert);
  }
  assert_ptr_equal(tpk_prims_for_isa("generic"), tpk_prims_generic());
  assert_null(tpk_prims_for_isa("sse9"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_bf16_round_trip),
      cmocka_unit_test(test_f16_round_trip),
      cmocka_unit_test(test_bf16_rne_table),
      cmocka_unit_test(test_f16_rne_table),
      cmocka_unit_test(test_f8_all_values),
      cmocka_unit_test(test_f8_rounding),
      cmocka_unit_test(test_narrowing_matches_oracle),
      cmocka_unit_test(test_int_float_edges),
      cmocka_unit_test(test_convert_isas_agree),
      cmocka_unit_test(test_f16_vector_matches_scalar),
      cmocka_unit_test(test_unary_specials),
      cmocka_unit_test(test_unary_accuracy),
      cmocka_unit_test(test_unary_isas_agree),
      cmocka_unit_test(test_unary1_is_unary),
      cmocka_unit_test(test_exp_subnormal_results),
      cmocka_unit_test(test_reduce_sum_order),
      cmocka_unit_test(test_reduce_max_min),
      cmocka_unit_test(test_reduce_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
