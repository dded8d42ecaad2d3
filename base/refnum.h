/*
 * refnum.h — the reference numerics of the interpreter and the .npy writer:
 * reading and writing one element of any dtype, and every conversion.
 *
 * Deliberately independent of the primitive library (host/prims.c): it is
 * written the slow, obvious way (through double, with explicit
 * round-to-nearest-even on the scaled mantissa) so that it can serve as an
 * oracle for the fast paths. The rules are those of host/prims.h:
 *   - to f32: C's double->float conversion (round to nearest even);
 *   - to f16/bf16/f8e5m2: round to nearest even, past the largest finite
 *     value -> inf, NaN stays a quiet NaN (sign kept);
 *   - to f8e4m3 (OCP E4M3FN: bias 7, max 448, no inf): round to nearest
 *     even, past the largest finite value or inf -> NaN (S.1111.111);
 *   - float -> integer: truncate toward zero, saturate at the range, NaN -> 0;
 *   - integer -> integer: wrap modulo 2^bits; anything -> bool: != 0.
 * Every element of every dtype is exactly representable in a double, so a
 * conversion is "read exactly as double, then round once to the target";
 * there is no double rounding (an i32 -> bf16 conversion rounds the exact
 * integer, not an intermediate f32).
 */
#ifndef TPK_REFNUM_H
#define TPK_REFNUM_H

#include "base/base.h"

/* Element i of an array of dtype dt, exactly, as a double. */
double tpk_ref_get(TpkDType dt, const void *data, int64_t i);
/* Element i of an integer or bool array, sign- or zero-extended. */
int64_t tpk_ref_get_int(TpkDType dt, const void *data, int64_t i);
/* Store x converted to dt by the rules above (floats round, float -> int
 * truncates and saturates, bool is != 0). */
void tpk_ref_set(TpkDType dt, void *data, int64_t i, double x);
/* Store an integer into an integer or bool array: wraps modulo 2^bits (bool:
 * != 0). Pass the value as uint64_t so callers can compute with wrapping
 * unsigned arithmetic. */
void tpk_ref_set_int(TpkDType dt, void *data, int64_t i, uint64_t v);

/* Seeded random contents, as `tpk run`, the tuner and the tests make them:
 * floats uniform in [-1, 1) (rounded to dt), integers in [0, 8) (valid
 * indices for most kernels), bools 0/1; from tpk_splitmix64(state). */
void tpk_fill_random(void *data, TpkDType dt, int64_t n, uint64_t *state);

/* Bits of the narrow float formats <-> double. */
double tpk_ref_decode(TpkDType dt, uint32_t bits); /* f16, bf16, f8e4m3, f8e5m2 */
uint32_t tpk_ref_encode(TpkDType dt, double x);    /* f16, bf16, f8e4m3, f8e5m2 */

#endif
