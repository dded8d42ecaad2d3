/*
 * prims.c — the primitive library's elementwise functions, reductions and
 * dtype conversions (the contract is host/prims.h), plus the TpkPrims
 * tables that generated code calls through.
 *
 * Each entry point exists in up to three instruction sets: portable C
 * ("generic"), AVX2+FMA+F16C ("avx2") and AVX-512F ("avx512"). The x86
 * versions are ordinary C functions with __attribute__((target(...))); the
 * table for this CPU is chosen once (pthread_once) from
 * __builtin_cpu_supports. All versions give bit-identical results: the
 * unary functions share one algorithm (prims_math.inc) made of correctly
 * rounded operations only, and the reductions and conversions share one C
 * body that the compiler vectorises without reordering float operations.
 *
 * Rules this file fixes where prims.h leaves a choice:
 *   - NaN through a float conversion keeps its sign and the top payload bits
 *     that fit, with the quiet bit set (what x86's F16C instructions do);
 *     f8e4m3 has a single NaN per sign (0x7f/0xff) and widens to the
 *     default quiet NaN. bf16 -> f32 is the exact 16-bit shift (a signaling
 *     NaN stays signaling).
 *   - narrowing rounds to nearest even as if the exponent were unbounded;
 *     a result past the largest finite number is inf (f16, bf16, f8e5m2)
 *     or NaN (f8e4m3: so 464 -> 448 but 465 -> NaN, as in ml_dtypes).
 *   - integers go to floats through f64 (exact for 32 bits), so i32 -> bf16
 *     rounds once, never twice.
 *   - max/min order -0 below +0 and return the first NaN of the slice;
 *     sums start from -0 (so the sum of [-0] is -0; adding to -0 is exact).
 *   - all of it assumes the default floating-point environment
 *     (round-to-nearest-even, no flush-to-zero), as C code does.
 *   - convert: src and dst must not overlap unless they are the same array
 *     and both types have the same size.
 */
#include "host/prims.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#define ALWAYS_INLINE __attribute__((always_inline))

static inline uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}
static inline float f32_from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
static inline uint64_t f64_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}
static inline double f64_from_bits(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

/* ======================================================================
 * Scalar float formats
 * ====================================================================== */

/* A binary float format narrower than f32: mantissa bits, exponent bits,
 * and whether the all-ones exponent means inf/NaN (IEEE) or, as in
 * f8e4m3 ("E4M3FN"), only S.1111.111 is NaN and there is no inf. */
typedef struct {
  int mbits, ebits;
  bool fn; /* E4M3FN-style: no inf, one NaN */
} FloatFormat;

static const FloatFormat FMT_F16 = {10, 5, false};
static const FloatFormat FMT_BF16 = {7, 8, false};
static const FloatFormat FMT_E4M3 = {3, 4, true};
static const FloatFormat FMT_E5M2 = {2, 5, false};

/* Bits of a narrow float -> the f32 holding the same value (exact). */
static float narrow_to_f32(uint32_t h, FloatFormat fmt) {
  uint32_t expmask = (1u << fmt.ebits) - 1, mantmask = (1u << fmt.mbits) - 1;
  int bias = (int)(expmask >> 1);
  uint32_t sign = (h >> (fmt.mbits + fmt.ebits)) & 1;
  uint32_t e = (h >> fmt.mbits) & expmask, m = h & mantmask;
  uint32_t fsign = sign << 31;
  if (fmt.fn) {
    if (e == expmask && m == mantmask) return f32_from_bits(fsign | 0x7fc00000u);
  } else if (e == expmask) {
    /* inf, or NaN: quiet bit set, payload in the top mantissa bits */
    return f32_from_bits(fsign | 0x7f800000u | (m ? 0x00400000u : 0) | (m << (23 - fmt.mbits)));
  }
  /* value = m * 2^(1-bias-mbits) (subnormal) or (2^mbits + m) * 2^(e-bias-mbits),
   * exact in f64 and then in f32 (every format here is a subset of f32). */
  int scale = (e == 0 ? 1 : (int)e) - bias - fmt.mbits;
  double mant = (double)(e == 0 ? m : (m | (1u << fmt.mbits)));
  float v = (float)(mant * f64_from_bits((uint64_t)(scale + 1023) << 52));
  return f32_from_bits(f32_bits(v) | fsign);
}

/* f64 -> bits of a narrow float, rounding to nearest even once. */
static uint32_t f64_to_narrow(double d, FloatFormat fmt) {
  uint32_t expmask = (1u << fmt.ebits) - 1;
  int bias = (int)(expmask >> 1);
  uint64_t b = f64_bits(d);
  uint32_t sign = (uint32_t)(b >> 63) << (fmt.mbits + fmt.ebits);
  uint32_t nan_bits = fmt.fn ? 0x7fu : (expmask << fmt.mbits) | (1u << (fmt.mbits - 1));
  uint32_t inf_bits = fmt.fn ? 0x7fu : expmask << fmt.mbits;
  /* largest finite encoding: E4M3FN's all-ones exponent still holds
   * numbers, except the mantissa pattern that is NaN */
  uint32_t max_bits = fmt.fn ? 0x7eu : (expmask << fmt.mbits) - 1;
  if (isnan(d)) {
    uint32_t payload = fmt.fn ? 0 : (uint32_t)((b & 0x000fffffffffffffull) >> (52 - fmt.mbits));
    return sign | nan_bits | payload;
  }
  double a = fabs(d);
  if (isinf(a)) return sign | inf_bits;
  if (a == 0) return sign;
  int emin = 1 - bias;
  int emax = (int)(max_bits >> fmt.mbits) - bias; /* exponent of the largest finite */
  int e = (int)((b >> 52) & 0x7ff) - 1023;        /* f64 subnormals: far below, round to 0 */
  if (e > emax) return sign | inf_bits;
  if (e < emin - fmt.mbits - 2) return sign;      /* below half the smallest subnormal */
  if (e < emin) e = emin;
  /* q = a / ulp, exact (a power-of-two scale); rint rounds to even. */
  double q = rint(a * f64_from_bits((uint64_t)(fmt.mbits - e + 1023) << 52));
  uint32_t r = (uint32_t)q; /* <= 2^(mbits+1); a carry bumps the exponent */
  uint32_t enc = ((uint32_t)(e + bias) << fmt.mbits) + r - (1u << fmt.mbits);
  if (enc > max_bits) return sign | inf_bits;
  return sign | enc;
}

float tpk_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* The classic bias trick: adding 0x7fff plus the kept lsb rounds to nearest
 * even, and the carry out of the mantissa rounds up the exponent (up to
 * inf). Equal to f64_to_narrow(f, FMT_BF16) for every f32 (tested). */
uint16_t tpk_f32_to_bf16(float f) {
  uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x0040u);
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

float tpk_f16_to_f32(uint16_t h) { return narrow_to_f32(h, FMT_F16); }
uint16_t tpk_f32_to_f16(float f) { return (uint16_t)f64_to_narrow(f, FMT_F16); }
float tpk_f8e4m3_to_f32(uint8_t b) { return narrow_to_f32(b, FMT_E4M3); }
uint8_t tpk_f32_to_f8e4m3(float f) { return (uint8_t)f64_to_narrow(f, FMT_E4M3); }
float tpk_f8e5m2_to_f32(uint8_t b) { return narrow_to_f32(b, FMT_E5M2); }
uint8_t tpk_f32_to_f8e5m2(float f) { return (uint8_t)f64_to_narrow(f, FMT_E5M2); }

/* ======================================================================
 * convert: the general path
 * ====================================================================== */

static const int elem_size[] = {
    [TPK_PRIM_F32] = 4, [TPK_PRIM_F16] = 2, [TPK_PRIM_BF16] = 2, [TPK_PRIM_F8E4M3] = 1, [TPK_PRIM_F8E5M2] = 1,
    [TPK_PRIM_I32] = 4, [TPK_PRIM_I16] = 2, [TPK_PRIM_I8] = 1,   [TPK_PRIM_U8] = 1,     [TPK_PRIM_BOOL] = 1,
    [TPK_PRIM_U32] = 4, [TPK_PRIM_U16] = 2,
};

static bool is_int_type(int t) { return t >= TPK_PRIM_I32; }

/* Float -> integer: truncate, saturate, NaN -> 0. */
static int64_t f64_to_int_sat(double d, int64_t lo, int64_t hi) {
  if (isnan(d)) return 0;
  if (d <= (double)lo) return lo;
  if (d >= (double)hi) return hi;
  return (int64_t)d; /* in range: C truncates toward zero */
}

/* Integer -> narrower integer modulo 2^bits, two's complement, without
 * implementation-defined conversions. */
static int64_t wrap_signed(int64_t v, int bits) {
  uint64_t m = (1ull << bits) - 1, u = (uint64_t)v & m;
  return u >> (bits - 1) ? -(int64_t)(m - u) - 1 : (int64_t)u;
}

/* Every element of every type is exactly an f64 (integers have <= 32 bits),
 * so any pair converts as decode-to-f64 then encode; `from_int` tells the
 * encoder whether integer targets wrap (integer source) or truncate and
 * saturate (float source). */
static void decode_f64(int from, const void *src, double *v, int64_t n) {
  switch (from) {
  case TPK_PRIM_F32: for (int64_t i = 0; i < n; i++) v[i] = ((const float *)src)[i]; break;
  case TPK_PRIM_F16: for (int64_t i = 0; i < n; i++) v[i] = tpk_f16_to_f32(((const uint16_t *)src)[i]); break;
  case TPK_PRIM_BF16: for (int64_t i = 0; i < n; i++) v[i] = tpk_bf16_to_f32(((const uint16_t *)src)[i]); break;
  case TPK_PRIM_F8E4M3: for (int64_t i = 0; i < n; i++) v[i] = tpk_f8e4m3_to_f32(((const uint8_t *)src)[i]); break;
  case TPK_PRIM_F8E5M2: for (int64_t i = 0; i < n; i++) v[i] = tpk_f8e5m2_to_f32(((const uint8_t *)src)[i]); break;
  case TPK_PRIM_I32: for (int64_t i = 0; i < n; i++) v[i] = ((const int32_t *)src)[i]; break;
  case TPK_PRIM_I16: for (int64_t i = 0; i < n; i++) v[i] = ((const int16_t *)src)[i]; break;
  case TPK_PRIM_I8: for (int64_t i = 0; i < n; i++) v[i] = ((const int8_t *)src)[i]; break;
  case TPK_PRIM_U8: for (int64_t i = 0; i < n; i++) v[i] = ((const uint8_t *)src)[i]; break;
  case TPK_PRIM_BOOL: for (int64_t i = 0; i < n; i++) v[i] = ((const uint8_t *)src)[i] != 0; break;
  case TPK_PRIM_U32: for (int64_t i = 0; i < n; i++) v[i] = ((const uint32_t *)src)[i]; break;
  case TPK_PRIM_U16: for (int64_t i = 0; i < n; i++) v[i] = ((const uint16_t *)src)[i]; break;
  default: break;
  }
}

static void encode_f64(int to, bool from_int, const double *v, void *dst, int64_t n) {
  switch (to) {
  case TPK_PRIM_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)v[i]; break;
  case TPK_PRIM_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)f64_to_narrow(v[i], FMT_F16); break;
  case TPK_PRIM_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)f64_to_narrow(v[i], FMT_BF16); break;
  case TPK_PRIM_F8E4M3: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)f64_to_narrow(v[i], FMT_E4M3); break;
  case TPK_PRIM_F8E5M2: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)f64_to_narrow(v[i], FMT_E5M2); break;
  case TPK_PRIM_I32:
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)dst)[i] = (int32_t)(from_int ? wrap_signed((int64_t)v[i], 32) : f64_to_int_sat(v[i], INT32_MIN, INT32_MAX));
    break;
  case TPK_PRIM_I16:
    for (int64_t i = 0; i < n; i++)
      ((int16_t *)dst)[i] = (int16_t)(from_int ? wrap_signed((int64_t)v[i], 16) : f64_to_int_sat(v[i], INT16_MIN, INT16_MAX));
    break;
  case TPK_PRIM_I8:
    for (int64_t i = 0; i < n; i++)
      ((int8_t *)dst)[i] = (int8_t)(from_int ? wrap_signed((int64_t)v[i], 8) : f64_to_int_sat(v[i], INT8_MIN, INT8_MAX));
    break;
  case TPK_PRIM_U8:
    for (int64_t i = 0; i < n; i++)
      ((uint8_t *)dst)[i] = (uint8_t)(from_int ? (uint64_t)(int64_t)v[i] & 0xff : (uint64_t)f64_to_int_sat(v[i], 0, 255));
    break;
  case TPK_PRIM_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = v[i] != 0; break;
  case TPK_PRIM_U32:
    for (int64_t i = 0; i < n; i++)
      ((uint32_t *)dst)[i] = (uint32_t)(from_int ? (uint64_t)(int64_t)v[i] & 0xffffffffu : (uint64_t)f64_to_int_sat(v[i], 0, UINT32_MAX));
    break;
  case TPK_PRIM_U16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = (uint16_t)(from_int ? (uint64_t)(int64_t)v[i] & 0xffffu : (uint64_t)f64_to_int_sat(v[i], 0, UINT16_MAX));
    break;
  default: break;
  }
}

static bool valid_type(int t) { return t >= TPK_PRIM_F32 && t <= TPK_PRIM_U16; }

/* Any pair, in chunks through an f64 buffer. */
static void convert_general(int from, int to, const void *src, void *dst, int64_t n) {
  double buf[256];
  const char *s = src;
  char *d = dst;
  for (int64_t i = 0; i < n; i += 256) {
    int64_t k = n - i < 256 ? n - i : 256;
    decode_f64(from, s + i * elem_size[from], buf, k);
    encode_f64(to, is_int_type(from), buf, d + i * elem_size[to], k);
  }
}

/* ======================================================================
 * Bodies shared by every instruction set: plain C the compiler vectorises
 * (always_inline, so each target-specific wrapper gets its own copy)
 * ====================================================================== */

static inline ALWAYS_INLINE void f32_to_bf16_body(const float *restrict x, uint16_t *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t b = f32_bits(x[i]);
    uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    y[i] = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? (b >> 16) | 0x0040u : r);
  }
}

static inline ALWAYS_INLINE void bf16_to_f32_body(const uint16_t *restrict x, float *restrict y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = f32_from_bits((uint32_t)x[i] << 16);
}

/* Float order as unsigned order: flip all bits of negatives, set the sign
 * bit of positives. -0 sorts just below +0; NaNs are handled apart. */
static inline ALWAYS_INLINE uint32_t order_key(uint32_t b) { return b ^ (0x80000000u | (0u - (b >> 31))); }
static inline ALWAYS_INLINE uint32_t order_unkey(uint32_t k) { return k ^ (0x80000000u | (0u - ((k >> 31) ^ 1u))); }
static inline ALWAYS_INLINE uint32_t is_nan_bits(uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }

/* The first NaN of x[0], x[stride], ... (the caller knows there is one). */
static float first_nan(const float *x, int64_t len, int64_t stride) {
  for (int64_t l = 0; l < len; l++)
    if (isnan(x[l * stride])) return x[l * stride];
  return NAN;
}

enum { REDUCE_BLOCK = 64 };

/* The sum of a contiguous row in the order prims.h fixes: SUM_LANES
 * accumulators starting at -0 (adding to -0 is exact), element l added to
 * lane l % SUM_LANES in ascending l, then lanes folded in halves (lane j +=
 * lane j + w for w = 32, 16, ..., 1). Every lane is its own chain, so the
 * compiler keeps them in vector registers (4 AVX-512, 8 AVX2) and the row
 * streams at load speed, where one accumulator would wait on each add's
 * latency; the order does not depend on the instruction set. */
enum { SUM_LANES = 64 };

static inline ALWAYS_INLINE float row_sum(const float *restrict x, int64_t len) {
  float acc[SUM_LANES];
  for (int j = 0; j < SUM_LANES; j++) acc[j] = -0.0f;
  int64_t l = 0;
  for (; l + SUM_LANES <= len; l += SUM_LANES)
    for (int j = 0; j < SUM_LANES; j++) acc[j] += x[l + j];
  for (int j = 0; j < SUM_LANES; j++)
    if (l + j < len) acc[j] += x[l + j];
  for (int w = SUM_LANES / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) acc[j] += acc[j + w];
  return acc[0];
}

/* Sums of w adjacent columns (w <= COLUMN_BLOCK) of a row-major [len,
 * stride] block, each from its first element down in ascending order.
 * The sums stay in vector registers while the rows stream past (for the
 * full block, w is a constant once inlined), where one pass over all the
 * columns per row would load and store every sum once per row. */
enum { COLUMN_BLOCK = 64 };

static inline ALWAYS_INLINE void column_sums(const float *restrict x, int64_t len, int64_t stride, int64_t w,
                                             float *restrict out) {
  float acc[COLUMN_BLOCK];
  for (int64_t i = 0; i < w; i++) acc[i] = x[i];
  for (int64_t l = 1; l < len; l++)
    for (int64_t i = 0; i < w; i++) acc[i] += x[l * stride + i];
  for (int64_t i = 0; i < w; i++) out[i] = acc[i];
}

static inline ALWAYS_INLINE void reduce_body(int kind, const float *restrict x, int64_t outer, int64_t len,
                                             int64_t inner, float *restrict out) {
  if (kind != TPK_PRIM_SUM && kind != TPK_PRIM_MAX && kind != TPK_PRIM_MIN) return;
  if (len == 0) {
    float v = kind == TPK_PRIM_SUM ? 0.0f : kind == TPK_PRIM_MAX ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < outer * inner; i++) out[i] = v;
    return;
  }
  for (int64_t o = 0; o < outer; o++) {
    const float *xo = x + o * len * inner;
    float *oo = out + o * inner;
    if (kind == TPK_PRIM_SUM) {
      if (inner == 1) {
        oo[0] = row_sum(xo, len);
      } else {
        int64_t i0 = 0;
        for (; i0 + COLUMN_BLOCK <= inner; i0 += COLUMN_BLOCK) column_sums(xo + i0, len, inner, COLUMN_BLOCK, oo + i0);
        if (i0 < inner) column_sums(xo + i0, len, inner, inner - i0, oo + i0);
      }
      continue;
    }
    /* max/min on order keys: exact and order-free, so it may use many lanes;
     * min is max of the complemented keys. */
    uint32_t flip = kind == TPK_PRIM_MIN ? 0xffffffffu : 0;
    if (inner == 1) {
      uint32_t acc = 0, has_nan = 0;
      for (int64_t l = 0; l < len; l++) {
        uint32_t b = f32_bits(xo[l]);
        uint32_t k = order_key(b) ^ flip;
        acc = k > acc ? k : acc;
        has_nan |= is_nan_bits(b);
      }
      oo[0] = has_nan ? first_nan(xo, len, 1) : f32_from_bits(order_unkey(acc ^ flip));
      continue;
    }
    for (int64_t i0 = 0; i0 < inner; i0 += REDUCE_BLOCK) {
      int64_t w = inner - i0 < REDUCE_BLOCK ? inner - i0 : REDUCE_BLOCK;
      uint32_t acc[REDUCE_BLOCK] = {0}, has_nan[REDUCE_BLOCK] = {0};
      for (int64_t l = 0; l < len; l++) {
        const float *row = xo + l * inner + i0;
        for (int64_t i = 0; i < w; i++) {
          uint32_t b = f32_bits(row[i]);
          uint32_t k = order_key(b) ^ flip;
          acc[i] = k > acc[i] ? k : acc[i];
          has_nan[i] |= is_nan_bits(b);
        }
      }
      for (int64_t i = 0; i < w; i++)
        oo[i0 + i] = has_nan[i] ? first_nan(xo + i0 + i, len, inner) : f32_from_bits(order_unkey(acc[i] ^ flip));
    }
  }
}

/* ======================================================================
 * Portable C
 * ====================================================================== */

#define NAME(f) f##_generic
#define ATTR ALWAYS_INLINE
#define TARGET_ATTR
#define VLEN 1
typedef float VF_generic;
#define VF VF_generic
#define VFM bool
#define VI uint32_t
#define F_LOAD(p) (*(p))
#define F_STORE(p, v) (*(p) = (v))
#define F_SET(c) ((float)(c))
#define F_ADD(a, b) ((a) + (b))
#define F_SUB(a, b) ((a) - (b))
#define F_MUL(a, b) ((a) * (b))
#define F_DIV(a, b) ((a) / (b))
#define F_FMA(a, b, c) fmaf(a, b, c)
#define F_SQRT(a) sqrtf(a)
#define F_RINT(a) rintf(a)
#define F_MAX(a, b) ((a) > (b) ? (a) : (b)) /* x86's maxps: b unless a > b (so b when a is NaN) */
#define F_MIN(a, b) ((a) < (b) ? (a) : (b))
#define F_LT(a, b) ((a) < (b))
#define F_GT(a, b) ((a) > (b))
#define F_EQ(a, b) ((a) == (b))
#define F_NAN(a) ((bool)isnan(a))
#define F_BLEND(m, t, f) ((m) ? (t) : (f))
#define M_AND(a, b) ((a) && (b))
#define M_ALL(m) (m) /* every lane of the mask set */
#define F_ABS(a) fabsf(a)
#define F_SIGN(a) (f32_bits(a) & 0x80000000u)
#define F_OR(a, signbits) f32_from_bits(f32_bits(a) | (signbits))
#define F_AS_I(a) f32_bits(a)
#define I_AS_F(a) f32_from_bits(a)
#define F_CVT_I(a) ((uint32_t)(a)) /* only used on integral values in [0, 2^31) */
#define I_CVT_F(a) ((float)(a))
#define I_SET(c) ((uint32_t)(c))
#define I_ADD(a, b) ((a) + (b))
#define I_SUB(a, b) ((a) - (b))
#define I_AND(a, b) ((a) & (b))
#define I_OR(a, b) ((a) | (b))
#define I_SRL(a, k) ((a) >> (k))
#define I_SLL(a, k) ((a) << (k))

static void reduce_generic(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
  reduce_body(kind, x, outer, len, inner, out);
}

static void convert_generic(int from, int to, const void *src, void *dst, int64_t n) {
  if (!valid_type(from) || !valid_type(to) || n <= 0) return;
  if (from == to) {
    memmove(dst, src, (size_t)n * (size_t)elem_size[from]);
  } else if (from == TPK_PRIM_F32 && to == TPK_PRIM_BF16) {
    f32_to_bf16_body(src, dst, n);
  } else if (from == TPK_PRIM_BF16 && to == TPK_PRIM_F32) {
    bf16_to_f32_body(src, dst, n);
  } else if (from == TPK_PRIM_F32 && to == TPK_PRIM_F16) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tpk_f32_to_f16(((const float *)src)[i]);
  } else if (from == TPK_PRIM_F16 && to == TPK_PRIM_F32) {
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = tpk_f16_to_f32(((const uint16_t *)src)[i]);
  } else {
    convert_general(from, to, src, dst, n);
  }
}


#include "host/prims_math.inc"

#if defined(__x86_64__)
/* ======================================================================
 * AVX2 + FMA + F16C: 8 f32 lanes, masks are all-ones lanes
 * ====================================================================== */

#define NAME(f) f##_avx2
#define TARGET_ATTR __attribute__((target("avx2,fma,f16c")))
#define ATTR TARGET_ATTR ALWAYS_INLINE
#define VLEN 8
#define VF __m256
#define VFM __m256
#define VI __m256i
#define F_LOAD(p) _mm256_loadu_ps(p)
#define F_STORE(p, v) _mm256_storeu_ps(p, v)
#define F_SET(c) _mm256_set1_ps((float)(c))
#define F_ADD(a, b) _mm256_add_ps(a, b)
#define F_SUB(a, b) _mm256_sub_ps(a, b)
#define F_MUL(a, b) _mm256_mul_ps(a, b)
#define F_DIV(a, b) _mm256_div_ps(a, b)
#define F_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define F_SQRT(a) _mm256_sqrt_ps(a)
#define F_RINT(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define F_MAX(a, b) _mm256_max_ps(a, b)
#define F_MIN(a, b) _mm256_min_ps(a, b)
#define F_LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define F_GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define F_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define F_NAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define F_BLEND(m, t, f) _mm256_blendv_ps(f, t, m)
#define M_AND(a, b) _mm256_and_ps(a, b)
#define M_ALL(m) (_mm256_movemask_ps(m) == 0xff)
#define F_ABS(a) _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(INT32_MAX)))
#define F_SIGN(a) _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(INT32_MIN))
#define F_OR(a, signbits) _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(a), signbits))
#define F_AS_I(a) _mm256_castps_si256(a)
#define I_AS_F(a) _mm256_castsi256_ps(a)
#define F_CVT_I(a) _mm256_cvttps_epi32(a)
#define I_CVT_F(a) _mm256_cvtepi32_ps(a)
#define I_SET(c) _mm256_set1_epi32(c)
#define I_ADD(a, b) _mm256_add_epi32(a, b)
#define I_SUB(a, b) _mm256_sub_epi32(a, b)
#define I_AND(a, b) _mm256_and_si256(a, b)
#define I_OR(a, b) _mm256_or_si256(a, b)
#define I_SRL(a, k) _mm256_srli_epi32(a, k)
#define I_SLL(a, k) _mm256_slli_epi32(a, k)

static TARGET_ATTR void reduce_avx2(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
  reduce_body(kind, x, outer, len, inner, out);
}

static TARGET_ATTR void convert_avx2(int from, int to, const void *src, void *dst, int64_t n) {
  if (!valid_type(from) || !valid_type(to) || n <= 0) return;
  int64_t i = 0;
  if (from == TPK_PRIM_F32 && to == TPK_PRIM_F16) {
    const float *s = src;
    uint16_t *d = dst;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = tpk_f32_to_f16(s[i]); /* bit-identical to F16C (tested exhaustively) */
  } else if (from == TPK_PRIM_F16 && to == TPK_PRIM_F32) {
    const uint16_t *s = src;
    float *d = dst;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = tpk_f16_to_f32(s[i]);
  } else if (from == TPK_PRIM_F32 && to == TPK_PRIM_BF16) {
    f32_to_bf16_body(src, dst, n);
  } else if (from == TPK_PRIM_BF16 && to == TPK_PRIM_F32) {
    bf16_to_f32_body(src, dst, n);
  } else {
    convert_generic(from, to, src, dst, n);
  }
}

#include "host/prims_math.inc"

/* ======================================================================
 * AVX-512F: 16 f32 lanes, masks are k-registers
 * ====================================================================== */

#define NAME(f) f##_avx512
#define TARGET_ATTR __attribute__((target("avx512f,avx2,fma,f16c")))
#define ATTR TARGET_ATTR ALWAYS_INLINE
#define VLEN 16
#define VF __m512
#define VFM __mmask16
#define VI __m512i
#define F_LOAD(p) _mm512_loadu_ps(p)
#define F_STORE(p, v) _mm512_storeu_ps(p, v)
#define F_SET(c) _mm512_set1_ps((float)(c))
#define F_ADD(a, b) _mm512_add_ps(a, b)
#define F_SUB(a, b) _mm512_sub_ps(a, b)
#define F_MUL(a, b) _mm512_mul_ps(a, b)
#define F_DIV(a, b) _mm512_div_ps(a, b)
#define F_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define F_SQRT(a) _mm512_sqrt_ps(a)
#define F_RINT(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define F_MAX(a, b) _mm512_max_ps(a, b)
#define F_MIN(a, b) _mm512_min_ps(a, b)
#define F_SCALEF(a, n) _mm512_scalef_ps(a, n)
#define F_LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define F_GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define F_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define F_NAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define F_BLEND(m, t, f) _mm512_mask_blend_ps(m, f, t)
#define M_AND(a, b) ((__mmask16)((a) & (b)))
#define M_ALL(m) ((m) == 0xffff)
#define F_ABS(a) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MAX)))
#define F_SIGN(a) _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))
#define F_OR(a, signbits) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), signbits))
#define F_AS_I(a) _mm512_castps_si512(a)
#define I_AS_F(a) _mm512_castsi512_ps(a)
#define F_CVT_I(a) _mm512_cvttps_epi32(a)
#define I_CVT_F(a) _mm512_cvtepi32_ps(a)
#define I_SET(c) _mm512_set1_epi32(c)
#define I_ADD(a, b) _mm512_add_epi32(a, b)
#define I_SUB(a, b) _mm512_sub_epi32(a, b)
#define I_AND(a, b) _mm512_and_si512(a, b)
#define I_OR(a, b) _mm512_or_si512(a, b)
#define I_SRL(a, k) _mm512_srli_epi32(a, k)
#define I_SLL(a, k) _mm512_slli_epi32(a, k)

static TARGET_ATTR void reduce_avx512(int kind, const float *x, int64_t outer, int64_t len, int64_t inner,
                                      float *out) {
  reduce_body(kind, x, outer, len, inner, out);
}

static TARGET_ATTR void convert_avx512(int from, int to, const void *src, void *dst, int64_t n) {
  if (!valid_type(from) || !valid_type(to) || n <= 0) return;
  int64_t i = 0;
  if (from == TPK_PRIM_F32 && to == TPK_PRIM_F16) {
    const float *s = src;
    uint16_t *d = dst;
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i *)(d + i),
                          _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) d[i] = tpk_f32_to_f16(s[i]);
  } else if (from == TPK_PRIM_F16 && to == TPK_PRIM_F32) {
    const uint16_t *s = src;
    float *d = dst;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    for (; i < n; i++) d[i] = tpk_f16_to_f32(s[i]);
  } else if (from == TPK_PRIM_F32 && to == TPK_PRIM_BF16) {
    f32_to_bf16_body(src, dst, n);
  } else if (from == TPK_PRIM_BF16 && to == TPK_PRIM_F32) {
    bf16_to_f32_body(src, dst, n);
  } else {
    convert_generic(from, to, src, dst, n);
  }
}

#include "host/prims_math.inc"
#endif /* __x86_64__ */

/* ======================================================================
 * Tables and dispatch
 * ====================================================================== */

static const TpkPrims prims_generic = {
    .version = TPK_PRIMS_VERSION,
    .isa = "generic",
    .gemm_f32 = tpk_gemm_f32_generic,
    .gemm_bf16 = tpk_gemm_bf16,
    .gemm_f16 = tpk_gemm_f16,
    .gemm_i8 = tpk_gemm_i8,
    .gemm_i32 = tpk_gemm_i32,
    .gemm_pack_b = tpk_gemm_pack_b_generic,
    .gemm_packed = tpk_gemm_packed_generic,
    .unary_f32 = unary_generic,
    .unary1_f32 = unary1_generic,
    .reduce_f32 = reduce_generic,
    .convert = convert_generic,
};

#if defined(__x86_64__)
static const TpkPrims prims_avx2 = {
    .version = TPK_PRIMS_VERSION,
    .isa = "avx2",
    .gemm_f32 = tpk_gemm_f32,
    .gemm_bf16 = tpk_gemm_bf16,
    .gemm_f16 = tpk_gemm_f16,
    .gemm_i8 = tpk_gemm_i8,
    .gemm_i32 = tpk_gemm_i32,
    .gemm_pack_b = tpk_gemm_pack_b,
    .gemm_packed = tpk_gemm_packed,
    .unary_f32 = unary_avx2,
    .unary1_f32 = unary1_avx2,
    .reduce_f32 = reduce_avx2,
    .convert = convert_avx2,
};

static const TpkPrims prims_avx512 = {
    .version = TPK_PRIMS_VERSION,
    .isa = "avx512",
    .gemm_f32 = tpk_gemm_f32,
    .gemm_bf16 = tpk_gemm_bf16,
    .gemm_f16 = tpk_gemm_f16,
    .gemm_i8 = tpk_gemm_i8,
    .gemm_i32 = tpk_gemm_i32,
    .gemm_pack_b = tpk_gemm_pack_b,
    .gemm_packed = tpk_gemm_packed,
    .unary_f32 = unary_avx512,
    .unary1_f32 = unary1_avx512,
    .reduce_f32 = reduce_avx512,
    .convert = convert_avx512,
};

/* F16C through cpuid: clang's __builtin_cpu_supports does not know it.
 * (The OS-support check for the ymm state is the avx2 test's.) */
static bool have_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
static bool have_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
}
static bool have_avx512(void) { return have_avx2() && __builtin_cpu_supports("avx512f"); }
#endif

/* Not in prims.h: a hook for tests and benchmarks that compare instruction
 * sets. The table for "generic", "avx2" or "avx512", or NULL when this CPU
 * (or build) lacks it. */
const TpkPrims *tpk_prims_for_isa(const char *isa);
const TpkPrims *tpk_prims_for_isa(const char *isa) {
  if (strcmp(isa, "generic") == 0) return &prims_generic;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (strcmp(isa, "avx2") == 0 && have_avx2()) return &prims_avx2;
  if (strcmp(isa, "avx512") == 0 && have_avx512()) return &prims_avx512;
#endif
  return NULL;
}

/* The only mutable global: written once under pthread_once. */
static const TpkPrims *chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose(void) {
  chosen = &prims_generic;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (have_avx512())
    chosen = &prims_avx512;
  else if (have_avx2())
    chosen = &prims_avx2;
#endif
}

const TpkPrims *tpk_prims(void) {
  pthread_once(&chosen_once, choose);
  return chosen;
}

const TpkPrims *tpk_prims_generic(void) { return &prims_generic; }

void tpk_prim_unary_f32(int fn, const float *x, float *y, int64_t n) { tpk_prims()->unary_f32(fn, x, y, n); }

void tpk_prim_reduce_f32(int kind, const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
  tpk_prims()->reduce_f32(kind, x, outer, len, inner, out);
}

void tpk_prim_convert(int from, int to, const void *src, void *dst, int64_t n) {
  tpk_prims()->convert(from, to, src, dst, n);
}
