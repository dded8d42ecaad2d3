/*
 * lower.h — from a checked IR kernel to code: passes, memory planning, and
 * the C emitter.
 *
 *   kernel IR (shapes bound) ─► simplify ─► tile whole-array statements
 *        ─► plan memory against the target's VMEM ─► emit C (host)
 *                                                 └► sim program (later)
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
} TpkTarget;


/* Constant folding, common subexpression elimination and dead code
 * elimination. */
void tpk_simplify(TpkFunc *f);

/* Wrap each maximal run of whole-array statements outside any grid into a
 * grid over blocks of their leading dimension, sized by t->tile_bytes. Runs
 * that cannot be tiled by rows (a reduction or transpose across the leading
 * dimension, a dot, a gather) are left whole. Returns TPK_OK or an error. */
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

/* A dot whose only use is `x + dot(a, b)` of its own type, in its block:
 * the emitter accumulates it into the add's result and the planner gives it
 * no buffer. *add (if non-NULL) receives that add.
 * Numerics: the products then continue x's FMA chain (k ascending), as an
 * MXU accumulates into its result buffer, instead of summing from 0 and
 * adding x once (what the IR says literally, and what the reference
 * interpreter does). The two differ by rounding only; the simulator must
 * follow the host's order to match it bit for bit. */
bool tpk_dot_fuses_into_add(const TpkOp *dot, const TpkOp **add);

/* Fusion (fuse.c): is v computed inside its single consumer's loop rather
 * than stored? The planner and the emitter both ask this. */
bool tpk_value_is_fused(const TpkValue *v);
/* Is op computed one element at a time (so values may fuse into it)? */
bool tpk_op_is_element_loop(const TpkOp *op);
/* Is op an f32 sum or mean over trailing axes, which values may fuse into
 * (their elements are added as they are computed)? */
bool tpk_reduce_takes_fused(const TpkOp *op);
/* The op whose loop computes v's elements (v's op unless v is fused). */
const TpkOp *tpk_fused_root(const TpkValue *v);
/* Uses of v in b and its regions; *last gets the last using op. */
int tpk_count_uses(const TpkBlock *b, const TpkValue *v, const TpkOp **last);

/* The lowering passes for a target: simplify, tile whole-array statements,
 * verify, plan memory (see tpk_plan_memory). */
TpkStatus tpk_lower(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err);

#endif
