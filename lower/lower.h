/*
 * lower.h — from a checked IR kernel to code: passes, memory planning, and
 * the C emitter.
 *
 *   kernel IR (shapes bound) ─► simplify ─► tile whole-array statements
 *        ─► decide (accumulation, fusion: written into the IR)
 *        ─► plan memory against the target's VMEM ─► emit C (host/)
 *                                                 └► schedule (sim/)
 *
 * Passes rewrite the kernel in place; the result still verifies.
 */
#ifndef TPK_LOWER_H
#define TPK_LOWER_H

#include "ir/ir.h"

/* What a target offers the lowering. */
typedef struct TpkTarget {
  const char *name;     /* "host", "v5e", ... (for messages) */
  int64_t vmem_bytes;   /* budget for tiles and scratch of one grid instance */
  int64_t tile_bytes;   /* preferred size of one auto-tiled block */
  int cores;            /* units that share a grid's instances: 2 or more lets
                         * the tiler split a dot that fits one block (the host,
                         * for its threads; a megacore chip, its TensorCores);
                         * 0 or 1: one */
} TpkTarget;


/* Specialise f (lower/bind.c): a copy of it in module dst with the given
 * shape symbols and tunables bound — substituted in every type, `sym` ops
 * made constants, then simplified. Tunables not given take their declared
 * defaults; shape symbols not given stay symbolic. Fails, with the .tpk
 * line and column in err when there is one, on a name f does not have, a
 * tunable value it does not declare, a negative size, a size that
 * overflows, or a constant index or static slice outside its dimension. f
 * itself is not changed. */
TpkStatus tpk_bind(TpkModule *dst, const TpkFunc *f, const TpkBinding *binds, int nbinds, TpkFunc **out, TpkError *err);

/* Constant folding, common subexpression elimination and dead code
 * elimination; transposes composed, and folded into the dots reading them. */
void tpk_simplify(TpkFunc *f);

/* A dot's operands and dims with the transposes feeding it folded in. */
typedef struct TpkDotForm {
  TpkValue *in[2];
  int ncontract, nbatch;
  int64_t contract[2][TPK_MAX_RANK], batch[2][TPK_MAX_RANK];
} TpkDotForm;

/* dot(a, b) where operand s is transpose(x) and fold[s]: the same product
 * as a dot of x with its contracting and batch dims permuted, when the
 * transpose keeps the free dims' order (they are the result's). True when
 * an operand was folded and the dot is then in the host gemm's form (one
 * contracting dim, at most one batch dim leading both operands); form then
 * holds the operands and dims to use. */
bool tpk_dot_through_transposes(const TpkOp *dot, const bool fold[2], TpkDotForm *form);
/* Give dot the contracting and batch dims of form (its operands are the caller's). */
void tpk_dot_set_dims(TpkModule *m, TpkOp *dot, const TpkDotForm *form);

/* Wrap each maximal run of whole-array statements outside any grid into a
 * grid over blocks of one dimension L (rows first, else another dim of the
 * first store's ref: a reduction over the rows tiles by columns), sized by
 * t->tile_bytes. L may be symbolic: the grid's bound is then computed from
 * the shape symbols. A run reducing over its rows whichever dim is tried (a
 * full reduction) becomes a loop over blocks carrying the reductions. Runs
 * that cannot be tiled (a scatter, an op mixing blocks) are left whole
 * (README.md, "Tiling whole arrays").
 * Returns TPK_OK or an error. */
TpkStatus tpk_tile_whole_arrays(TpkFunc *f, const TpkTarget *t, TpkError *err);

/* Where each tensor value and scratch buffer lives in the kernel's
 * workspace. Values are mapped by a per-function numbering (TpkPlan.index). */
typedef struct TpkPlanSlot {
  const TpkValue *value;
  int64_t offset, bytes;   /* bytes 0: no storage (scalars, aliases handled by `alias`); -1 when symbolic */
  const TpkDim *bytes_dim; /* the storage's size as a dimension (NULL: no storage) */
  int group;               /* symbolic plans: the storage group (-1: none), placed by the generated code */
  int alias;               /* >= 0: shares the storage of slot `alias` */
} TpkPlanSlot;

typedef struct TpkPlan {
  TpkArena arena;
  int nslots;
  TpkPlanSlot *slots;
  int64_t workspace_bytes; /* total, 64-byte aligned; -1 when symbolic */
  TpkPtrMap index; /* value -> slot number */
  /* Sizes that depend on shape symbols: storage groups are numbered, not
   * placed; group g needs group_bytes[g] bytes (64-byte aligned by whoever
   * lays them out one after another). */
  bool symbolic;
  int ngroups;
  const TpkDim **group_bytes;
} TpkPlan;

/* Plan the workspace of a kernel. With constant shapes, offsets are packed
 * by liveness and the total is checked: fails, with nothing left to free,
 * with a message naming the largest buffers when the kernel needs more than
 * t->vmem_bytes. With symbolic shapes the plan is symbolic (see TpkPlan) and
 * the budget is checked per launch, on the kernel with its shapes bound. */
TpkStatus tpk_plan_memory(const TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err);
/* The slot of a value (following aliases), or NULL for values without
 * storage. */
const TpkPlanSlot *tpk_plan_slot(const TpkPlan *plan, const TpkValue *v);
void tpk_plan_free(TpkPlan *plan);
/* A listing of the plan for people and tests (tests/lower/passes), one line
 * per slot, values named as tpk_ir_print_func names them:
 *   plan @k: workspace 4096 bytes          plan @k: symbolic, 2 groups
 *     %t: offset 0, 2048 bytes               %t: group 0, 4*N bytes
 *     %u: offset 0, 2048 bytes, shares %t    %u: group 0, 4*N bytes, shares %t
 *     %d: no storage                         %d: no storage
 * "shares" names the slot whose storage the value uses; values without
 * storage are computed inside their consumer (fused, or a dot accumulated
 * into its add). */
void tpk_plan_print(TpkStr *out, const TpkPlan *plan, const TpkFunc *f);

/* Graph fusion (lower/fuse.c): a graph-level func f (ir/graph.h) becomes
 * a driver of clusters. Each cluster is a new kernel of f's module, named
 * "<f>.c<k>", of whole-array ops between whole loads of its `in` refs and
 * whole stores of its `out` refs (what tpk_lower tiles); views its ops read
 * (reshape, transpose, broadcast, slice of an input) are folded into it,
 * never materialised. f's body is rewritten to the driver: `call`s of the
 * clusters and of the kernels f called, in order, on tensors (a call's
 * results are new buffers the runtime allocates), `reshape` of a contiguous
 * result (a view of its buffer, no copy), and `return`. Rank-0 tensors
 * (scalars) are passed to clusters as scalar parameters. A cluster's shape
 * symbols are f's: the runtime binds them by name from f's. Policy:
 *   TPK_FUSE_ALL   elementwise chains and broadcasts, reductions with their
 *                  producers and consumers (softmax, norms), a dot with its
 *                  elementwise epilogue: as few clusters as tile well;
 *   TPK_FUSE_NONE  one cluster per op that computes (views still fold into
 *                  their reader): what the debug and strict modes run.
 * The result verifies; fusing a driver again changes nothing (README.md,
 * "Graph fusion", has the rules). Errors, with f unchanged:
 * TPK_ERR_INVALID for a kernel or a func with ops a graph does not have,
 * TPK_ERR_UNSUPPORTED for a shape symbol no input of f carries; out of
 * memory (TPK_ERR_NOMEM) leaves f's module unusable. */
typedef enum TpkFusePolicy { TPK_FUSE_ALL, TPK_FUSE_NONE } TpkFusePolicy;
TpkStatus tpk_fuse(TpkFunc *f, TpkFusePolicy policy, TpkError *err);
/* tpk_fuse, where under TPK_FUSE_ALL the elementwise epilogue of a call (a
 * chain of elementwise ops reading one of its results, beside it only
 * whole or broadcast buffers and constants, its intermediate values read
 * by nobody else) is computed inside the called kernel: the callee is
 * cloned into a new kernel "<f>.c<k>" whose stores of that result store
 * epilogue(value) instead, and the driver calls it in the call's place
 * (README.md, "Epilogues of calls"). A kernel the driver then no longer
 * calls leaves the module. keep(ctx, callee) true keeps a callee as it is
 * (the runtime keeps the standard library's: their ahead-of-time code);
 * keep NULL fuses into every kernel whose output allows it. tpk_fuse is
 * tpk_fuse_keeping with keep NULL. */
typedef bool (*TpkFuseKeep)(void *ctx, const TpkFunc *callee);
TpkStatus tpk_fuse_keeping(TpkFunc *f, TpkFusePolicy policy, TpkFuseKeep keep, void *ctx, TpkError *err);

/* Lowering's decisions (decide.c), written into the IR: `x + dot(a, b)`
 * becomes an accumulating dot, `dot %a, %b, %x`, and ops computed inside
 * their one user's loop get `fused=true` (tpk_dot_accumulator and
 * tpk_op_is_fused in ir/ir.h read them). The planner, the C emitter and the
 * simulator follow what the IR says. Numerics: the accumulating dot's
 * products continue x's FMA chain (k ascending), as an MXU accumulates into
 * its result buffer, instead of summing from 0 and adding x once. Returns
 * TPK_OK or an error (out of memory). */
TpkStatus tpk_decide(TpkFunc *f, TpkError *err);


/* The passes before memory planning, for a target: simplify, tile
 * whole-array statements, simplify, decide, verify. The IR they leave is
 * what `tpk dump --lowered` prints and what backends read. */
TpkStatus tpk_lower_ir(TpkFunc *f, const TpkTarget *t, TpkError *err);
/* tpk_lower_ir, then plan memory (see tpk_plan_memory). */
TpkStatus tpk_lower(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err);

#endif
