/*
 * graph.h — the graph builder: ATen-named ops on tensor values, into a
 * graph-level `func` of the IR.
 *
 * The eager streams and the torch.compile bridge reach it through tpk.h
 * (tpk_graph_*, runtime/graph.c); this is the part that knows the op
 * vocabulary (ir/aten.c: one table row per ATen packet, with its argument
 * names, dtype promotion, shape inference and the IR it expands to).
 *
 * What it builds (ir/README.md, "Graphs"):
 *
 *   func @linear_relu(%x: f32[B,784], %w: f32[784,256]) -> (f32[B,256]) {
 *     %0 = dot %x, %w {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,256]
 *     %1 = const {value=0.0} : f32
 *     %2 = broadcast %1 : f32[B,256]
 *     %3 = max %0, %2 : f32[B,256]
 *     return %3
 *   }
 *
 * Whole-array ops on tensor values only (elementwise, convert, select,
 * broadcast, reshape, transpose, slice, concat, iota, reduce, dot, gather,
 * scatter, const) and `call`s of kernels, which are cloned into the graph's
 * module under their own names (a standard kernel keeps its name and IR, so
 * the runtime runs the library's code for it). Composite ATen ops
 * (native_layer_norm, _softmax, gelu_backward, nll_loss_forward, ...) expand
 * into those ops, or call a standard kernel where one is the best code
 * (matmul-shaped SDPA: flash attention). Views (view, permute, expand,
 * unsqueeze, squeeze, select, slice, alias) are reshape / transpose /
 * broadcast / slice ops: lower/fuse.c folds them into the loads that read
 * them. Numbers given for Scalar arguments become `const`s (part of the
 * graph's structure, so of its hash); rank-0 inputs stay inputs.
 *
 * Sizes are dims of the module: constants, or expressions of shape
 * symbols, written as text ("B*S") at the API.
 */
#ifndef TPK_IR_GRAPH_H
#define TPK_IR_GRAPH_H

#include "tpk.h"

#include "ir/ir.h"

typedef struct TpkGraphBuilder TpkGraphBuilder;

/* A builder of func @name in a module of its own. NULL when out of memory. */
TpkGraphBuilder *tpk_gb_new(const char *name);
void tpk_gb_free(TpkGraphBuilder *gb);
TpkModule *tpk_gb_module(TpkGraphBuilder *gb);
TpkFunc *tpk_gb_func(TpkGraphBuilder *gb);

/* A dim from its text ("128", "S", "B*S", "(M+1)/2"), in the builder's
 * module; NULL with err for text that is not a dim. */
const TpkDim *tpk_gb_dim(TpkGraphBuilder *gb, const char *text, TpkError *err);

/* A new input (a parameter of the func). */
TpkStatus tpk_gb_input(TpkGraphBuilder *gb, TpkDType dtype, int rank, const TpkDim *const *dims, TpkValue **out,
                       TpkError *err);

/* One ATen op. Arguments as in tpk.h (TpkArg), with tensors as values:
 * args[i].value and .values index `values` (the caller's numbering of the
 * graph's values: the public API's value ids); the op's results are put in
 * outs[0..max) (NULL for one ATen leaves undefined), their count in *nouts. TPK_ERR_UNSUPPORTED for an op
 * outside the vocabulary, naming it; TPK_ERR_INVALID for bad arguments,
 * naming the op, the argument, and the shapes and dtypes involved. */
TpkStatus tpk_gb_op(TpkGraphBuilder *gb, const char *op, const TpkArg *args, int nargs, TpkValue *const *values,
                    int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err);

/* A call of kernel k (the IR of a loaded kernel: it is cloned into the
 * module unless a function of that name and hash is there already). Args
 * as for tpk_gb_op: k's `in`/`inout` tensors, its scalars as numbers or
 * rank-0 values, in declaration order. */
TpkStatus tpk_gb_call(TpkGraphBuilder *gb, const TpkFunc *k, const TpkArg *args, int nargs, TpkValue *const *values,
                      int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err);

/* Where the builder finds a standard kernel's IR for the ATen ops that call
 * one (the SDPA forms call flash_attention...): the runtime's library, which
 * ir/ cannot see. `name` is a standard kernel ("flash_attention");
 * the function returns its unbound IR (owned by the lookup's side, alive as
 * long as the builder), or NULL with err. Without a lookup those ops are
 * TPK_ERR_UNSUPPORTED, naming the kernel they need. */
typedef const TpkFunc *(*TpkGbKernelLookup)(void *ctx, const char *name, TpkError *err);
void tpk_gb_set_kernel_lookup(TpkGraphBuilder *gb, TpkGbKernelLookup lookup, void *ctx);

/* The arguments of the op tpk_gb_op built last that are positions, not
 * sizes (a bit per argument, args[i] as 1 << i): SymInt parameters that
 * index into a tensor (select's index, a slice's start, end and step,
 * padding_idx, ignore_index). A caller that makes sizes symbolic (the
 * eager streams) keeps these constant: an index is no size of anything. */
uint64_t tpk_gb_index_args(const TpkGraphBuilder *gb);

/* v becomes the func's next result. */
TpkStatus tpk_gb_output(TpkGraphBuilder *gb, TpkValue *v, TpkError *err);

/* The vocabulary: the ATen packet names the builder knows, in table order. */
int tpk_gb_op_count(void);
const char *tpk_gb_op_name(int i);
/* Whether op ("add", "aten::add.Tensor") is in it, overload included;
 * what the arguments may be is the op's to say when it is built. */
bool tpk_gb_op_known(const char *op);

#endif
