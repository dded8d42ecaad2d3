/*
 * aten.h — what the graph builder (graph.c) and its ATen op table
 * (aten.c) share; nothing outside ir/graph.c and ir/aten.c includes it.
 */
#ifndef TPK_IR_ATEN_H
#define TPK_IR_ATEN_H

#include "ir/graph.h"

struct TpkGraphBuilder {
  TpkModule *m;
  TpkFunc *f;
  TpkBuilder b;         /* appends to f's body */
  TpkValue **outputs;   /* the func's results so far (heap) */
  int noutputs, capoutputs;
  TpkOp *ret;           /* the `return` of the outputs while sealed, else NULL */
  TpkGbKernelLookup lookup; /* standard kernels for the ops that call one */
  void *lookup_ctx;
  uint64_t index_args; /* tpk_gb_index_args */
};

/* The body's ops are appended after the last one, so a sealed builder (its
 * `return` last) is unsealed before an op is added; tpk_gb_func and
 * tpk_gb_module seal it again. */
void tpk_gb_unseal(TpkGraphBuilder *gb);

/* A call of kernel k (cloned into the module unless a function of its name
 * and hash is there already) with its `in` and `inout` parameters in order:
 * tensors of the parameter's dtype, scalars as rank-0 values (converted to
 * the parameter's dtype). `who` names the caller in messages ("kernel
 * 'softmax'", "_scaled_dot_product_flash_attention_for_cpu"). */
TpkStatus tpk_gb_call_values(TpkGraphBuilder *gb, const TpkFunc *k, const char *who, TpkValue *const *in, int nin,
                             TpkValue **outs, int max, int *nouts, TpkError *err);

/* "f32[B,784]" into buf. */
const char *tpk_gb_type_text(const TpkType *t, char *buf, size_t n);

/* aten.c: one ATen op (see tpk_gb_op), and the vocabulary. */
TpkStatus tpk_aten_build(TpkGraphBuilder *gb, const char *op, const TpkArg *args, int nargs, TpkValue *const *values,
                         int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err);
int tpk_aten_count(void);
const char *tpk_aten_name(int i);
bool tpk_aten_known(const char *op);

#endif
