/*
 * interp.h — the reference interpreter of the IR.
 *
 * A deliberately simple and independent implementation of every op's
 * semantics (ir/README.md), sharing nothing with the C emitter or the
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
 * is an error naming the op's source line (checked mode reports it and goes
 * on, see tpk_interp_run_checked).
 */
#ifndef TPK_INTERP_H
#define TPK_INTERP_H

#include "ir/ir.h"

/* Run kernel f. args[i] points to parameter i's data, stored as described in
 * host/prims.h (row-major; scalars: the address of the value); outputs
 * declared `= 0` are zeroed by the caller. syms[k] is the value of
 * symbol k in tpk_func_symbols order. Returns TPK_OK, or an error (bad
 * index, division of integers by zero, an op it does not know) with the
 * kernel and source line in err. */
TpkStatus tpk_interp_run(const TpkFunc *f, void *const *args, const int64_t *syms, TpkError *err);

/* Checked mode: kernel bugs a TPU would silently suffer. */
typedef struct TpkInterpOptions {
  bool checked;    /* false: exactly tpk_interp_run */
  int max_reports; /* lines kept in the report; <= 0: 20 */
} TpkInterpOptions;

/* Like tpk_interp_run (o may be NULL: not checked). With o->checked, these
 * violations are appended to report (may be NULL), one line each, "line L:C:
 * <what>" naming the op's source position, and counted in *violations (may
 * be NULL; it counts those past max_reports too, which the report sums up in
 * a last line "(N more violations not listed)"), and the run goes on:
 *   - an out-of-range 's' index (the whole access is skipped) or 'g' /
 *     gather / scatter index (that element is skipped: a load reads `other`,
 *     a gather 0, a store or scatter drops it), one line per bad index:
 *       "load index 9 is out of range for dimension 0 of x (size 8)"
 *       "gather index -1 (element 2 of the index vector) is out of range for dimension 0 of t (size 4)"
 *     (ragged tile and slice edges are not violations);
 *   - two instances of one grid writing the same element of an output or
 *     inout parameter where the result depends on their order, once per op
 *     and buffer: both store (store, scatter-store, copy_async)
 *       "grid instances (i=0, j=1) and (i=1, j=1) both write y[3, 5]",
 *     or one stores and the other adds (`+=`, scatter-add)
 *       "grid instance (t=0) stores grad[4, 0] and (t=2) adds to it"
 *       "grid instance (t=0) adds to grad[4, 0] and (t=2) stores it".
 *     Adds from several instances into one element are not a violation:
 *     they accumulate (an atomic add, like Triton's tl.atomic_add; only
 *     float rounding depends on the order), and an add of 0 changes nothing;
 *   - a load, store or copy_async source of a buffer while a copy_async into
 *     it has not been waited for, once per op and buffer:
 *       "load reads abuf before the wait of its copy_async (line 12:16)";
 *   - a read (load, store mode="add", copy_async source) of an element of a
 *     scratch buffer, or of an output not declared `= 0`, that nothing wrote
 *     (stores and copies write), once per op and buffer, with the first such
 *     element: "load reads uninitialized abuf[0, 3]".
 * Errors other than these still stop the run as in tpk_interp_run. The shadow
 * state is one byte per element of scratch buffers and uninitialised
 * outputs, and 24 per element of outputs. */
TpkStatus tpk_interp_run_checked(const TpkFunc *f, void *const *args, const int64_t *syms, const TpkInterpOptions *o,
                                 TpkStr *report, int *violations, TpkError *err);

#endif
