/*
 * refnum.c — reference numerics: one element at a time, through double.
 * See refnum.h for the rules; nothing here is fast on purpose.
 */
#include "base/refnum.h"

#include <math.h>
#include <string.h>

/* A narrow binary float format: explicit mantissa bits, exponent bits,
 * exponent bias, whether the all-ones exponent means inf/NaN (IEEE style) or
 * holds finite numbers with only S.1111.111 as NaN (OCP E4M3FN). */
typedef struct Format {
  int mant, exp, bias;
  bool ieee;
  double max; /* largest finite value */
} Format;

static const Format F16 = {10, 5, 15, true, 65504.0};
static const Format BF16 = {7, 8, 127, true, 3.3895313892515355e38}; /* (2 - 2^-7) * 2^127 */
static const Format E4M3 = {3, 4, 7, false, 448.0};
static const Format E5M2 = {2, 5, 15, true, 57344.0};

static const Format *format_of(TpkDType dt) {
  switch (dt) {
  case TPK_F16: return &F16;
  case TPK_BF16: return &BF16;
  case TPK_F8E4M3: return &E4M3;
  case TPK_F8E5M2: return &E5M2;
  default: return NULL;
  }
}

double tpk_ref_decode(TpkDType dt, uint32_t bits) {
  const Format *f = format_of(dt);
  if (!f) return NAN;
  uint32_t emask = (1u << f->exp) - 1, mmask = (1u << f->mant) - 1;
  uint32_t sign = (bits >> (f->mant + f->exp)) & 1;
  uint32_t e = (bits >> f->mant) & emask, m = bits & mmask;
  double v;
  if (f->ieee && e == emask)
    v = m ? NAN : INFINITY;
  else if (!f->ieee && e == emask && m == mmask)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - f->bias - f->mant); /* subnormal */
  else
    v = ldexp((double)(m | (mmask + 1)), (int)e - f->bias - f->mant);
  return sign ? -v : v;
}

/* Round a non-negative double (exactly an integer plus a fraction, both
 * representable) to the nearest integer, ties to even. Written out rather
 * than calling nearbyint so the result cannot depend on the FP environment. */
static double round_half_even(double q) {
  double fl = floor(q), diff = q - fl;
  if (diff > 0.5) return fl + 1;
  if (diff < 0.5) return fl;
  return fmod(fl, 2.0) == 0 ? fl : fl + 1;
}

uint32_t tpk_ref_encode(TpkDType dt, double x) {
  const Format *f = format_of(dt);
  if (!f) return 0;
  uint32_t sign = signbit(x) ? 1u << (f->mant + f->exp) : 0;
  uint32_t emask = (1u << f->exp) - 1, mmask = (1u << f->mant) - 1;
  /* A quiet NaN: all-ones exponent with the top mantissa bit (IEEE), or the
   * one NaN pattern of E4M3FN. */
  uint32_t nan = f->ieee ? (emask << f->mant) | (1u << (f->mant - 1)) : (emask << f->mant) | mmask;
  uint32_t inf = f->ieee ? emask << f->mant : nan;
  if (isnan(x)) return sign | nan;
  double a = fabs(x);
  if (isinf(a)) return sign | inf;
  int emin = 1 - f->bias; /* exponent of the smallest normal */
  int e2;
  frexp(a, &e2); /* a = m * 2^e2, m in [0.5, 1); a's exponent is e2 - 1 */
  int E = a == 0 ? emin : (e2 - 1 < emin ? emin : e2 - 1);
  /* Scale so the format's quantum at this exponent is 1, then round. The
   * scaling is by a power of two, so q is exact. */
  double n = round_half_even(ldexp(a, f->mant - E));
  double r = ldexp(n, E - f->mant);
  if (r > f->max) return sign | inf;
  if (r < ldexp(1.0, emin)) return sign | (uint32_t)n; /* subnormal or zero: exponent field 0 */
  frexp(r, &e2);
  int Er = e2 - 1;
  uint32_t m = (uint32_t)ldexp(r, f->mant - Er) & mmask;
  return sign | ((uint32_t)(Er + f->bias) << f->mant) | m;
}

double tpk_ref_get(TpkDType dt, const void *data, int64_t i) {
  switch (dt) {
  case TPK_F32: return ((const float *)data)[i];
  case TPK_F16:
  case TPK_BF16: return tpk_ref_decode(dt, ((const uint16_t *)data)[i]);
  case TPK_F8E4M3:
  case TPK_F8E5M2: return tpk_ref_decode(dt, ((const uint8_t *)data)[i]);
  default: return (double)tpk_ref_get_int(dt, data, i);
  }
}

int64_t tpk_ref_get_int(TpkDType dt, const void *data, int64_t i) {
  switch (dt) {
  case TPK_I32: return ((const int32_t *)data)[i];
  case TPK_I16: return ((const int16_t *)data)[i];
  case TPK_I8: return ((const int8_t *)data)[i];
  case TPK_U8: return ((const uint8_t *)data)[i];
  case TPK_U16: return ((const uint16_t *)data)[i];
  case TPK_U32: return ((const uint32_t *)data)[i];
  case TPK_BOOL: return ((const uint8_t *)data)[i] != 0;
  default: {
    /* A float read as an integer: the conversion rule (truncate, saturate
     * at int64 is irrelevant here, NaN -> 0). Callers use it for floats only
     * by mistake; keep it defined anyway. */
    double x = tpk_ref_get(dt, data, i);
    if (isnan(x)) return 0;
    if (x >= 9.2e18) return INT64_MAX;
    if (x <= -9.2e18) return INT64_MIN;
    return (int64_t)x;
  }
  }
}

/* Two's complement wrap of v to `bits` bits, without implementation-defined
 * conversions. */
static int64_t wrap_signed(uint64_t v, unsigned bits) {
  uint64_t mask = (UINT64_C(1) << bits) - 1, u = v & mask;
  if (u >> (bits - 1)) return -(int64_t)(mask - u) - 1;
  return (int64_t)u;
}

void tpk_ref_set_int(TpkDType dt, void *data, int64_t i, uint64_t v) {
  switch (dt) {
  case TPK_I32: ((int32_t *)data)[i] = (int32_t)wrap_signed(v, 32); break;
  case TPK_I16: ((int16_t *)data)[i] = (int16_t)wrap_signed(v, 16); break;
  case TPK_I8: ((int8_t *)data)[i] = (int8_t)wrap_signed(v, 8); break;
  case TPK_U8: ((uint8_t *)data)[i] = (uint8_t)(v & 0xff); break;
  case TPK_U16: ((uint16_t *)data)[i] = (uint16_t)(v & 0xffff); break;
  case TPK_U32: ((uint32_t *)data)[i] = (uint32_t)(v & 0xffffffffu); break;
  case TPK_BOOL: ((uint8_t *)data)[i] = v != 0; break;
  default: tpk_ref_set(dt, data, i, (double)wrap_signed(v, 64)); break;
  }
}

/* Float -> integer: truncate toward zero, saturate, NaN -> 0. */
static int64_t saturate(double x, int64_t lo, int64_t hi) {
  if (isnan(x)) return 0;
  double t = trunc(x);
  if (t <= (double)lo) return lo;
  if (t >= (double)hi) return hi;
  return (int64_t)t;
}

void tpk_ref_set(TpkDType dt, void *data, int64_t i, double x) {
  switch (dt) {
  case TPK_F32: ((float *)data)[i] = (float)x; break;
  case TPK_F16:
  case TPK_BF16: ((uint16_t *)data)[i] = (uint16_t)tpk_ref_encode(dt, x); break;
  case TPK_F8E4M3:
  case TPK_F8E5M2: ((uint8_t *)data)[i] = (uint8_t)tpk_ref_encode(dt, x); break;
  case TPK_I32: ((int32_t *)data)[i] = (int32_t)saturate(x, INT32_MIN, INT32_MAX); break;
  case TPK_I16: ((int16_t *)data)[i] = (int16_t)saturate(x, INT16_MIN, INT16_MAX); break;
  case TPK_I8: ((int8_t *)data)[i] = (int8_t)saturate(x, INT8_MIN, INT8_MAX); break;
  case TPK_U8: ((uint8_t *)data)[i] = (uint8_t)saturate(x, 0, UINT8_MAX); break;
  case TPK_U16: ((uint16_t *)data)[i] = (uint16_t)saturate(x, 0, UINT16_MAX); break;
  case TPK_U32: ((uint32_t *)data)[i] = (uint32_t)saturate(x, 0, UINT32_MAX); break;
  case TPK_BOOL: ((uint8_t *)data)[i] = x != 0; break; /* NaN != 0: true */
  default: break;
  }
}

void tpk_fill_random(void *data, TpkDType dt, int64_t n, uint64_t *state) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = tpk_splitmix64(state);
    if (tpk_dtype_is_float(dt))
      tpk_ref_set(dt, data, i, (float)((double)(r >> 11) / (double)(UINT64_C(1) << 53) * 2.0 - 1.0));
    else
      tpk_ref_set_int(dt, data, i, dt == TPK_BOOL ? (r & 1) : r % 8);
  }
}
