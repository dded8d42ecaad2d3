/*
 * interp.h — the reference interpreter of the IR.
 *
 * A deliberately simple and independent implementation of every op's
 * semantics (frontend/README.md), sharing nothing with the C emitter or the
 * primitive library beyond the IR itself: it is the oracle that `tpk run
 * --check` and the tests compare the backends against. It favours clarity
 * over speed (every value is a heap tensor; elements are computed one at a
 * time, floats in f32 and integers in 64-bit wrapping arithmetic, and
 * rounded or wrapped to the value's dtype after each op). The decisions it
 * makes where the IR reference leaves room are listed in interp.c.
 *
 * Numerics follow the same contract as the backends: elementwise ops on
 * bf16/f16/f8 compute in f32 and round to nearest even after each op; dot
 * accumulates in f32 (i32 for integers, wrapping) over k ascending; sums
 * accumulate in f32 in ascending order; integer division truncates.
 * Out-of-range elements of tile loads read `other` (default 0) and
 * out-of-range stores are dropped; an out-of-range gather or scatter index
 * is an error naming the op's source line.
 */
#ifndef TPK_INTERP_H
#define TPK_INTERP_H

#include "frontend/ir.h"

/* Run kernel f. args[i] points to parameter i's data, stored as described in
 * runtime/prims.h (row-major; scalars: the address of the value); outputs
 * declared `= 0` are zeroed by the caller. syms[k] is the value of
 * symbol k in tpk_func_symbols order. Returns TPK_OK, or an error (bad
 * index, division of integers by zero, an op it does not know) with the
 * kernel and source line in err. */
TpkStatus tpk_interp_run(const TpkFunc *f, void *const *args, const int64_t *syms, TpkError *err);

#endif
