/*
 * schedule.c — the time a lowered kernel takes on a chip.
 *
 * The simulator program is the lowered tile-level IR itself (the host's
 * passes, shapes bound): this file walks it grid step by grid step, the way
 * a TensorCore runs it, and turns every op into tasks on a timeline of the
 * chip's units (timeline.c), costed by cost.c:
 *   - a load of a block from HBM is a DMA: latency on one of the DMA engines,
 *     then its bytes on HBM; a store is the reverse, after its value exists;
 *   - dot goes to the MXUs, elementwise ops, broadcasts and reductions to the
 *     VPU, scalar arithmetic to the scalar unit;
 *   - every grid step pays a fixed overhead on the scalar unit.
 * Pipelining is Pallas's: a block has two buffers, so the DMA that fills a
 * block for step k may start as soon as step k-2 no longer needs its buffer,
 * overlapping the compute of step k-1. A block whose index is the same as in
 * the previous step is not copied again. On megacore chips the grid's
 * instances alternate between the two TensorCores, each with its own units
 * (HBM is shared).
 *
 * Loop bounds, `if` conditions and block indices are evaluated from the IR:
 * constants once shapes are bound, values computed from grid and loop
 * indices, and integers read from the launch's data — a scalar parameter,
 * or one element of an input (`lengths[b]`, `block_table[b, p]`). With the
 * launch's arguments (tpk_sim_schedule_args) the walk follows the control
 * flow those values take: a loop runs as many iterations, an `if` takes the
 * branch, a block index chooses the block the data says. Without them
 * (timing only, the tuner) such an integer is sampled from the distribution
 * the kernel declares for the input (`lengths: i32[B] in 1..1025`), else as
 * `tpk run` fills an integer input: uniform in [0, 8); from a fixed seed,
 * so a timing is repeatable. A condition computed from vector data (a reduction, a float)
 * stays unknown and is costed as both branches (an upper bound).
 */
#include "sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "sim/timeline.h"

/* Assumed: the fixed cost of one grid step (Pallas's documentation puts the
 * per-step overhead at about 0.35 us). */
static const double GRID_STEP_SECONDS = 0.35e-6;

enum { MAX_CORES = 2 };

typedef struct Core {
  int scalar, vpu, mxu, dma; /* unit ids */
  int hbm;                   /* this core's share of HBM (see tpk_sim_schedule) */
  int mxu_out;               /* the MXUs' fill and drain: latency, many in flight */
  TpkTaskId last;            /* the latest compute task on this core */
  TpkTaskId step;            /* the current grid step's overhead: compute waits for it */
} Core;

/* A pipeline stage: the iterations of one loop (a grid or a sequential for).
 * The markers of its last two iterations tell when a block buffer is free
 * again. A stage lives as long as the walk: when a grid step runs its inner
 * loop again, the first copies wait for the buffers of the previous run's
 * last iterations, as Pallas's pipeline does across grid steps. */
typedef struct Stage {
  TpkTaskId done[2]; /* end markers of the two previous iterations */
} Stage;

/* A store's DMA, held back one stage: Pallas issues the next step's input
 * copies before this step's write-back, and the DMA and HBM queues are in
 * order. */
typedef struct PendingStore {
  TpkTaskId after;
  int64_t bytes;
  int core;
} PendingStore;

enum { MAX_DEPTH = 16, MAX_PENDING = 64 };

/* The walk visits every op of every grid step and loop iteration; past this
 * many (about a second and 640 MB of timeline) it stops with an error rather
 * than run for minutes: bigger blocks time the same work in fewer steps. */
static const int64_t MAX_WALKED_OPS = 20000000;

typedef struct Walker {
  const TpkChip *chip;
  TpkTimeline *tl;
  TpkSimReport *rep;
  TpkError *err;
  bool failed;
  Core cores[MAX_CORES];
  int ncores, core; /* the core the current grid step runs on */
  TpkPtrMap known;  /* value -> int64_t* (scalar values the walk can compute) */
  TpkPtrMap task;   /* value -> task that produces it (as intptr_t + 2) */
  TpkPtrMap prev;   /* load op -> char* key of its block in the previous step */
  TpkArena arena;
  Stage *stages[MAX_DEPTH]; /* the loops being walked, innermost last */
  int depth;
  TpkPtrMap stage_of;       /* loop op -> its Stage (arena) */
  PendingStore pending[2][MAX_PENDING]; /* stores of the previous and current stage */
  int npending[2];
  const TpkOp *grid;
  int64_t grid_ids[TPK_MAX_RANK], grid_lo[TPK_MAX_RANK], grid_hi[TPK_MAX_RANK];
  int64_t walked; /* ops visited so far */
  const char *func_name;
  const TpkFunc *func;
  void *const *args; /* the launch's arguments, or NULL (values are sampled) */
  /* copies in flight on semaphores, oldest first: which semaphore, which
   * slot (-1: not known), the copy's last task */
  struct SemTask {
    const TpkValue *sem;
    int64_t slot;
    int64_t bytes; /* not yet counted by a wait (waits that count bytes) */
    TpkTaskId t;
  } semtasks[MAX_PENDING];
  int nsemtasks;
} Walker;

static bool fail(Walker *w, const TpkOp *op, const char *fmt, const char *what) {
  if (!w->failed)
    tpk_error(w->err, TPK_ERR_UNSUPPORTED, "simulator: line %d: %s%s", op ? op->loc.line : 0, fmt, what ? what : "");
  w->failed = true;
  return false;
}

/* ---- values the walk knows ---------------------------------------------------- */

static bool known(Walker *w, const TpkValue *v, int64_t *out) {
  void *p;
  if (!tpk_ptrmap_get(&w->known, v, &p) || !p) return false; /* NULL: forgotten */
  *out = *(int64_t *)p;
  return true;
}

static void set_known(Walker *w, const TpkValue *v, int64_t x) {
  void *p;
  if (!tpk_ptrmap_get(&w->known, v, &p) || !p) {
    p = tpk_arena_alloc(&w->arena, sizeof(int64_t));
    if (!p || !tpk_ptrmap_put(&w->known, v, p)) {
      w->failed = true;
      tpk_error(w->err, TPK_ERR_NOMEM, "simulator: out of memory");
      return;
    }
  }
  *(int64_t *)p = x;
}

/* A value that is not known any more (a loop's next iteration). */
static void forget(Walker *w, const TpkValue *v) {
  if (tpk_ptrmap_get(&w->known, v, NULL)) tpk_ptrmap_put(&w->known, v, NULL);
}

static TpkTaskId task_of(Walker *w, const TpkValue *v) {
  void *p;
  return tpk_ptrmap_get(&w->task, v, &p) && p ? (TpkTaskId)((intptr_t)p - 2) : TPK_TASK_NONE;
}

static void set_task(Walker *w, const TpkValue *v, TpkTaskId t) {
  if (!tpk_ptrmap_put(&w->task, v, (void *)(intptr_t)(t + 2))) {
    w->failed = true;
    tpk_error(w->err, TPK_ERR_NOMEM, "simulator: out of memory");
  }
}

/* Scalar integer ops the walk evaluates (indices, bounds, conditions). */
static void eval_scalar(Walker *w, const TpkOp *op) {
  int64_t a = 0, b = 0, r;
  bool ka = op->nin > 0 && known(w, op->in[0], &a), kb = op->nin > 1 && known(w, op->in[1], &b);
  switch (op->opcode) {
  case TPK_OP_CONST: {
    const TpkAttr *v = tpk_op_attr(op, "value");
    if (v && v->kind == TPK_ATTR_INT) set_known(w, &op->out[0], v->i);
    return;
  }
  case TPK_OP_TILE_ID:
  case TPK_OP_TILE_OF: if (ka) set_known(w, &op->out[0], a); return;
  case TPK_OP_TILE_START: if (ka) set_known(w, &op->out[0], a * tpk_tile_block(op->in[0]->type)); return;
  case TPK_OP_PROGRAM_ID:
  case TPK_OP_NUM_PROGRAMS: {
    int axis = (int)tpk_op_int(op, "axis", 0);
    if (axis < TPK_MAX_RANK)
      set_known(w, &op->out[0], op->opcode == TPK_OP_PROGRAM_ID ? w->grid_ids[axis] - w->grid_lo[axis]
                                                                : w->grid_hi[axis] - w->grid_lo[axis]);
    return;
  }
  case TPK_OP_SELECT: { /* where(c, a, b) of scalars: the chosen side need be known only */
    int64_t c;
    if (ka && known(w, op->in[a ? 1 : 2], &c)) set_known(w, &op->out[0], c);
    else forget(w, &op->out[0]);
    return;
  }
  default: break;
  }
  if (!ka || (op->nin > 1 && !kb)) {
    forget(w, &op->out[0]);
    return;
  }
  switch (op->opcode) {
  case TPK_OP_ADD: r = a + b; break;
  case TPK_OP_SUB: r = a - b; break;
  case TPK_OP_MUL: r = a * b; break;
  case TPK_OP_DIV: if (!b) return; r = a / b; break;
  case TPK_OP_REM: if (!b) return; r = a % b; break;
  case TPK_OP_CDIV: if (!b) return; r = a / b + (a % b != 0 && ((a < 0) == (b < 0))); break;
  case TPK_OP_MAX: r = a > b ? a : b; break;
  case TPK_OP_MIN: r = a < b ? a : b; break;
  case TPK_OP_EQ: r = a == b; break;
  case TPK_OP_NE: r = a != b; break;
  case TPK_OP_LT: r = a < b; break;
  case TPK_OP_LE: r = a <= b; break;
  case TPK_OP_GT: r = a > b; break;
  case TPK_OP_GE: r = a >= b; break;
  case TPK_OP_AND: r = a & b; break;
  case TPK_OP_OR: r = a | b; break;
  case TPK_OP_XOR: r = a ^ b; break;
  case TPK_OP_NOT: r = !a; break;
  case TPK_OP_NEG: r = -a; break;
  case TPK_OP_CONVERT: r = a; break;
  default: forget(w, &op->out[0]); return;
  }
  set_known(w, &op->out[0], r);
}

/* ---- values read from data ---------------------------------------------------- */

/* Element `flat` of a tensor of dtype dt as an integer; false for floats. */
static bool read_int(const void *data, TpkDType dt, int64_t flat, int64_t *out) {
  switch (dt) {
  case TPK_I32: *out = ((const int32_t *)data)[flat]; return true;
  case TPK_I16: *out = ((const int16_t *)data)[flat]; return true;
  case TPK_I8: *out = ((const int8_t *)data)[flat]; return true;
  case TPK_U8: *out = ((const uint8_t *)data)[flat]; return true;
  case TPK_U16: *out = ((const uint16_t *)data)[flat]; return true;
  case TPK_U32: *out = ((const uint32_t *)data)[flat]; return true;
  case TPK_BOOL: *out = ((const uint8_t *)data)[flat] != 0; return true;
  default: return false;
  }
}

/* The value timing without data assumes for element `flat` of parameter
 * `param`: one drawn from the distribution the kernel declares for it
 * (`lengths: i32[B] in 1..1025`: uniform in the range; `in [16, 256]`: one
 * of the values), else what `tpk run` would fill an integer input with
 * (uniform in [0, 8)); from a hash of the two so the same element always
 * reads the same. */
static int64_t sampled(const Walker *w, int param, int64_t flat) {
  uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)(param + 1) ^ (uint64_t)flat;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb3fe1a85ec53ull, h ^= h >> 33;
  const TpkParam *p = &w->func->params[param];
  if (p->nsample && p->sample_range) return p->sample[0] + (int64_t)(h % (uint64_t)(p->sample[1] - p->sample[0]));
  if (p->nsample) return p->sample[h % (uint64_t)p->nsample];
  return (int64_t)(h % 8);
}

static int param_index(const Walker *w, const TpkValue *v) {
  for (int i = 0; i < w->func->nparams; i++)
    if (w->func->params[i].value == v) return i;
  return -1;
}

/* An integer scalar parameter's value (from the launch, or sampled). */
static void know_scalar_param(Walker *w, int i) {
  const TpkValue *v = w->func->params[i].value;
  if (v->type->kind != TPK_TYPE_TENSOR || v->type->rank != 0) return;
  int64_t x;
  if (w->args && w->args[i]) {
    if (read_int(w->args[i], v->type->dtype, 0, &x)) set_known(w, v, x);
  } else if (tpk_dtype_is_int(v->type->dtype) || v->type->dtype == TPK_BOOL) {
    set_known(w, v, sampled(w, i, 0));
  }
  if (tpk_ptrmap_get(&w->known, v, NULL)) w->rep->follows_data = true;
}

/* A scalar load from a parameter in HBM at known indices: the element's
 * value when it is an integer. Out of range it reads 0, as a ragged tile
 * does. */
static void know_loaded(Walker *w, const TpkOp *op) {
  const TpkValue *ref = op->in[0];
  const TpkType *t = ref->type;
  int i = param_index(w, ref);
  if (i < 0 || op->nin - 1 != t->rank) return;
  if (!tpk_dtype_is_int(t->dtype) && t->dtype != TPK_BOOL) return;
  int64_t flat = 0;
  bool inside = true;
  for (int a = 0; a < t->rank; a++) {
    int64_t x, d;
    if (!known(w, op->in[1 + a], &x) || !tpk_dim_is_const(t->dims[a], &d)) return;
    inside = inside && x >= 0 && x < d;
    flat = flat * d + x;
  }
  int64_t x = 0;
  if (!inside) x = 0;
  else if (w->args && w->args[i]) {
    if (!read_int(w->args[i], t->dtype, flat, &x)) return;
  } else x = sampled(w, i, flat);
  set_known(w, &op->out[0], x);
  w->rep->follows_data = true;
}

/* ---- tasks --------------------------------------------------------------------------- */

static int64_t numel(const TpkType *t) {
  int64_t n = 1, d;
  for (int i = 0; i < t->rank; i++) n *= tpk_dim_is_const(t->dims[i], &d) ? d : 1;
  return n;
}

static int64_t bytes_of(const TpkType *t) { return numel(t) * (int64_t)tpk_dtype_size(t->dtype); }

/* A compute task on the current core, after the tasks producing op's
 * first nin operands. */
static TpkTaskId compute_after(Walker *w, const TpkOp *op, int nin, int unit, double cycles, const char *label) {
  TpkTaskId deps[17];
  size_t n = 0;
  if (w->cores[w->core].step != TPK_TASK_NONE) deps[n++] = w->cores[w->core].step;
  for (int i = 0; i < nin && n < 17; i++) {
    TpkTaskId t = task_of(w, op->in[i]);
    if (t != TPK_TASK_NONE) deps[n++] = t;
  }
  TpkTaskId t = tpk_timeline_add(w->tl, unit, cycles, deps, n, label, tpk_op_info(op->opcode)->name);
  Core *c = &w->cores[w->core];
  c->last = t;
  for (int i = 0; i < op->nout; i++) set_task(w, &op->out[i], t);
  return t;
}

/* The same after all of op's operands. */
static TpkTaskId compute(Walker *w, const TpkOp *op, int unit, double cycles, const char *label) {
  return compute_after(w, op, op->nin, unit, cycles, label);
}

/* The buffer of a block DMA'd in this stage is free once the stage two
 * iterations back is done. */
static TpkTaskId buffer_free(Walker *w) {
  if (!w->depth) return TPK_TASK_NONE;
  return w->stages[w->depth - 1]->done[1];
}

/* A DMA of `bytes`: latency on a DMA engine after `after`, then the bytes on
 * HBM. */
static TpkTaskId dma(Walker *w, int64_t bytes, TpkTaskId after, const char *label) {
  TpkTaskId free = buffer_free(w);
  TpkTaskId deps[2];
  size_t n = 0;
  if (after != TPK_TASK_NONE) deps[n++] = after;
  if (free != TPK_TASK_NONE) deps[n++] = free;
  Core *c = &w->cores[w->core];
  TpkTaskId issue = tpk_timeline_add(w->tl, c->dma, tpk_sim_dma_latency_cycles(w->chip), deps, n, label, "dma");
  w->rep->hbm_bytes += (double)bytes;
  return tpk_timeline_add(w->tl, c->hbm, w->ncores * tpk_sim_hbm_cycles(w->chip, bytes), &issue, 1, label, "hbm");
}

/* The block index of a load, as a string key, or NULL if some index is not
 * known. */
static const char *block_key(Walker *w, const TpkOp *op) {
  char buf[256];
  int k = 0;
  for (int i = 1; i < op->nin && k < (int)sizeof buf - 24; i++) {
    int64_t v;
    if (op->in[i]->type->kind == TPK_TYPE_TENSOR && op->in[i]->type->rank > 0) return NULL; /* a gather */
    if (!known(w, op->in[i], &v)) return NULL;
    k += snprintf(buf + k, sizeof buf - (size_t)k, "%lld,", (long long)v);
  }
  return tpk_arena_strdup(&w->arena, buf);
}

static void walk_block(Walker *w, const TpkBlock *b);
static void flush_stores(Walker *w, int upto);

/* The block sizes an index pattern selects from ref (operands from
 * op->in[first]): one per non-scalar dim, -1 where a static slice takes its
 * size from the other side. Returns the block's rank. */
static int selected_dims(const TpkOp *op, const TpkIndexPattern *p, const TpkValue *ref, int first, int64_t *dims) {
  int rank = 0, k = first;
  for (int d = 0; d < p->rank; d++) {
    int64_t size = -1;
    switch (p->dim[d]) {
    case TPK_INDEX_SCALAR: k++; continue;
    case TPK_INDEX_ALL: if (!tpk_dim_is_const(ref->type->dims[d], &size)) size = 1; break;
    case TPK_INDEX_TILE: size = tpk_tile_block(op->in[k++]->type); break;
    default: k++; break;
    }
    dims[rank++] = size;
  }
  return rank;
}

/* The bytes a copy_async moves: its block's, or with a length (known from
 * the data, else the whole block) that many entries of the block's first
 * axis. */
static int64_t copy_bytes(Walker *w, const TpkOp *op) {
  const TpkIndexPattern *sp = tpk_op_index(op, "src_index"), *dp = tpk_op_index(op, "dst_index");
  int nsrc = tpk_index_operands(sp);
  int64_t sd[TPK_MAX_RANK], dd[TPK_MAX_RANK];
  int rank = selected_dims(op, sp, op->in[0], 1, sd);
  selected_dims(op, dp, op->in[1 + nsrc], 2 + nsrc, dd);
  int64_t n = 1, len;
  for (int i = 0; i < rank; i++) {
    int64_t size = sd[i] >= 0 ? sd[i] : dd[i] >= 0 ? dd[i] : 1;
    if (i == 0 && tpk_dma_length(op) && known(w, tpk_dma_length(op), &len)) size = len < 0 ? 0 : len < size ? len : size;
    n *= size;
  }
  return n * (int64_t)tpk_dtype_size(op->in[0]->type->dtype);
}

static void load(Walker *w, const TpkOp *op) {
  const TpkValue *ref = op->in[0];
  if (ref->type->kind != TPK_TYPE_REF || ref->type->space != TPK_MEM_HBM) { /* from VMEM scratch */
    TpkTaskId dep = task_of(w, ref);
    TpkTaskId t = tpk_timeline_add(w->tl, w->cores[w->core].vpu, tpk_sim_vpu_cycles(w->chip, numel(op->out[0].type), 1),
                                   dep == TPK_TASK_NONE ? NULL : &dep, dep == TPK_TASK_NONE ? 0 : 1, "vmem load", "load");
    set_task(w, &op->out[0], t);
    return;
  }
  /* the same block as last step: still in VMEM */
  const char *key = block_key(w, op);
  void *prev;
  if (key && tpk_ptrmap_get(&w->prev, op, &prev) && prev && strcmp(prev, key) == 0) {
    TpkTaskId t = task_of(w, &op->out[0]);
    if (t != TPK_TASK_NONE) {
      if (op->out[0].type->rank == 0) know_loaded(w, op);
      return;
    }
  }
  if (key) tpk_ptrmap_put(&w->prev, op, (void *)key);
  if (op->out[0].type->rank == 0) know_loaded(w, op);
  TpkTaskId after = TPK_TASK_NONE;
  for (int i = 1; i < op->nin; i++) /* a gather waits for its indices */
    if (op->in[i]->type->rank > 0) after = task_of(w, op->in[i]);
  set_task(w, &op->out[0], dma(w, bytes_of(op->out[0].type), after, "load"));
}

static void issue_store(Walker *w, const PendingStore *p) {
  TpkTaskId v = p->after;
  TpkTaskId issue = tpk_timeline_add(w->tl, w->cores[p->core].dma, tpk_sim_dma_latency_cycles(w->chip),
                                     v == TPK_TASK_NONE ? NULL : &v, v == TPK_TASK_NONE ? 0 : 1, "store", "dma");
  w->rep->hbm_bytes += (double)p->bytes;
  tpk_timeline_add(w->tl, w->cores[p->core].hbm, w->ncores * tpk_sim_hbm_cycles(w->chip, p->bytes), &issue, 1, "store",
                   "hbm");
}

/* Submit held-back stores: generation 0 (the previous stage's), or both. */
static void flush_stores(Walker *w, int upto) {
  for (int g = 0; g <= upto; g++) {
    for (int i = 0; i < w->npending[g]; i++) issue_store(w, &w->pending[g][i]);
    w->npending[g] = 0;
  }
}

/* At the end of a stage: last stage's stores go out, this stage's wait. */
static void age_stores(Walker *w) {
  flush_stores(w, 0);
  memcpy(w->pending[0], w->pending[1], (size_t)w->npending[1] * sizeof *w->pending[1]);
  w->npending[0] = w->npending[1];
  w->npending[1] = 0;
}

static void store(Walker *w, const TpkOp *op) {
  const TpkValue *ref = op->in[0], *val = op->in[op->nin - 1];
  TpkTaskId v = task_of(w, val);
  if (ref->type->space != TPK_MEM_HBM) { /* into VMEM scratch */
    TpkTaskId t = tpk_timeline_add(w->tl, w->cores[w->core].vpu, tpk_sim_vpu_cycles(w->chip, numel(val->type), 1),
                                   v == TPK_TASK_NONE ? NULL : &v, v == TPK_TASK_NONE ? 0 : 1, "vmem store", "store");
    set_task(w, ref, t);
    return;
  }
  int64_t bytes = val->type->rank ? bytes_of(val->type) : (int64_t)tpk_dtype_size(val->type->dtype);
  if (w->npending[1] == MAX_PENDING) flush_stores(w, 1);
  w->pending[1][w->npending[1]++] = (PendingStore){v, bytes, w->core};
}

/* Fetch-and-combine: a read of the block (its old values are the result),
 * the combine, and the write back, which waits for the read. */
static void atomic(Walker *w, const TpkOp *op) {
  const TpkValue *ref = op->in[0], *val = op->in[op->nin - 1];
  TpkTaskId v = task_of(w, val);
  if (ref->type->space != TPK_MEM_HBM) { /* VMEM scratch: a load, a combine and a store on the VPU */
    TpkTaskId t = tpk_timeline_add(w->tl, w->cores[w->core].vpu, tpk_sim_vpu_cycles(w->chip, numel(val->type), 3),
                                   v == TPK_TASK_NONE ? NULL : &v, v == TPK_TASK_NONE ? 0 : 1, "vmem atomic", "atomic");
    set_task(w, &op->out[0], t);
    set_task(w, ref, t);
    return;
  }
  int64_t bytes = val->type->rank ? bytes_of(val->type) : (int64_t)tpk_dtype_size(val->type->dtype);
  TpkTaskId t = dma(w, bytes, v, "atomic");
  set_task(w, &op->out[0], t);
  if (w->npending[1] == MAX_PENDING) flush_stores(w, 1);
  w->pending[1][w->npending[1]++] = (PendingStore){t, bytes, w->core};
}

static void dot(Walker *w, const TpkOp *op) {
  const TpkValue *a = op->in[0], *b = op->in[1];
  const TpkAttr *lc = tpk_op_attr(op, "lhs_contract"), *lb = tpk_op_attr(op, "lhs_batch");
  int batch = lb ? lb->n : 0;
  int64_t d0, d1, e0, e1, B = 1;
  if (!tpk_dim_is_const(a->type->dims[batch], &d0) || !tpk_dim_is_const(a->type->dims[batch + 1], &d1) ||
      !tpk_dim_is_const(b->type->dims[batch], &e0) || !tpk_dim_is_const(b->type->dims[batch + 1], &e1)) {
    fail(w, op, "dot shapes must be constant", NULL);
    return;
  }
  if (batch) tpk_dim_is_const(a->type->dims[0], &B);
  bool a_k_last = lc && lc->ints[0] == batch + 1;
  int64_t M = a_k_last ? d0 : d1, K = a_k_last ? d1 : d0;
  const TpkAttr *rc = tpk_op_attr(op, "rhs_contract");
  int64_t N = rc && rc->ints[0] == batch ? e1 : e0;
  double busy = (double)B * tpk_sim_matmul_busy_cycles(w->chip, M, K, N, a->type->dtype);
  w->rep->flops += 2.0 * (double)B * (double)M * (double)N * (double)K;
  if (!w->rep->matmul_flops) w->rep->matmul_dtype = a->type->dtype;
  w->rep->matmul_flops += 2.0 * (double)B * (double)M * (double)N * (double)K;
  /* the products stream without waiting for an accumulator */
  TpkTaskId t = compute_after(w, op, 2, w->cores[w->core].mxu, busy, "dot");
  TpkTaskId out = tpk_timeline_add(w->tl, w->cores[w->core].mxu_out,
                                   tpk_sim_matmul_latency_cycles(w->chip, a->type->dtype), &t, 1, "dot drain", "dot");
  const TpkValue *acc = tpk_dot_accumulator(op);
  if (acc) { /* the MXU accumulates into its result buffer, which holds acc */
    TpkTaskId deps[2] = {task_of(w, acc), out};
    out = tpk_timeline_add(w->tl, w->cores[w->core].mxu_out, 0, deps, 2, "accumulate", "dot");
  }
  set_task(w, &op->out[0], out);
}

/* A zero-length task after everything this core computed: the end of a
 * pipeline stage. */
static TpkTaskId stage_marker(Walker *w) {
  Core *c = &w->cores[w->core];
  TpkTaskId d = c->last;
  return tpk_timeline_add(w->tl, c->scalar, 0, d == TPK_TASK_NONE ? NULL : &d, d == TPK_TASK_NONE ? 0 : 1, "step", "step");
}

static bool push_stage(Walker *w, const TpkOp *loop) {
  if (w->depth == MAX_DEPTH) return fail(w, loop, "loops nested deeper than the simulator follows", NULL);
  /* one stage per loop and TensorCore: each core double-buffers its own
   * blocks (the key is the op's address plus the core, distinct since an op
   * is larger than MAX_CORES bytes) */
  const void *key = (const char *)loop + w->core;
  void *p;
  if (!tpk_ptrmap_get(&w->stage_of, key, &p)) {
    Stage *s = tpk_arena_alloc(&w->arena, sizeof *s);
    if (!s || !tpk_ptrmap_put(&w->stage_of, key, s)) {
      w->failed = true;
      tpk_error(w->err, TPK_ERR_NOMEM, "simulator: out of memory");
      return false;
    }
    s->done[0] = s->done[1] = TPK_TASK_NONE;
    p = s;
  }
  w->stages[w->depth++] = p;
  return true;
}

static void next_stage(Walker *w) {
  Stage *s = w->stages[w->depth - 1];
  s->done[1] = s->done[0];
  s->done[0] = stage_marker(w);
  age_stores(w);
}

/* dst takes src's task, and its value when the walk knows it (a scalar
 * carried by a loop or merged by an if). */
static void carry(Walker *w, const TpkValue *dst, const TpkValue *src) {
  int64_t x;
  set_task(w, dst, task_of(w, src));
  if (known(w, src, &x)) set_known(w, dst, x);
  else forget(w, dst);
}

/* The same for n values at once: the sources may be the destinations of
 * the previous iteration (a yield of swapped carried values). */
static void carry_all(Walker *w, TpkValue *const *dst, TpkValue *const *src, int n) {
  enum { MAX = 64 };
  int64_t x[MAX];
  bool k[MAX];
  TpkTaskId t[MAX];
  for (int i = 0; i < n && i < MAX; i++) k[i] = known(w, src[i], &x[i]), t[i] = task_of(w, src[i]);
  for (int i = 0; i < n && i < MAX; i++) {
    set_task(w, dst[i], t[i]);
    if (k[i]) set_known(w, dst[i], x[i]);
    else forget(w, dst[i]);
  }
}

static void walk_for(Walker *w, const TpkOp *op) {
  int64_t lo, hi;
  if (!known(w, op->in[0], &lo) || !known(w, op->in[1], &hi)) {
    fail(w, op, "a loop bound depends on vector or float data; the simulator follows bounds computed from integers", NULL);
    return;
  }
  const TpkBlock *body = op->regions[0];
  int n = op->nout;
  for (int i = 0; i < n; i++) carry(w, body->args[i + 1], op->in[2 + i]);
  if (!push_stage(w, op)) return;
  for (int64_t it = lo; it < hi && !w->failed; it++) {
    set_known(w, body->args[0], it);
    walk_block(w, body);
    const TpkOp *y = body->last;
    if (y && y->opcode == TPK_OP_YIELD) carry_all(w, body->args + 1, y->in, n);
    next_stage(w);
  }
  w->depth--;
  for (int i = 0; i < n; i++) carry(w, &op->out[i], body->args[i + 1]);
}

/* A while loop runs while its condition, the first carried value, is known
 * true; one the walk cannot compute (vector or float data) is refused. */
static void walk_while(Walker *w, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  int n = op->nout;
  int64_t c;
  for (int i = 0; i < n; i++) carry(w, body->args[i], op->in[i]);
  if (!push_stage(w, op)) return;
  while (!w->failed) {
    if (!known(w, body->args[0], &c)) {
      fail(w, op, "a while condition depends on vector or float data; the simulator follows conditions computed from integers", NULL);
      break;
    }
    if (!c) break;
    walk_block(w, body);
    const TpkOp *y = body->last;
    if (!y || y->opcode != TPK_OP_YIELD) break;
    carry_all(w, body->args, y->in, n);
    next_stage(w);
  }
  w->depth--;
  for (int i = 0; i < n; i++) carry(w, &op->out[i], body->args[i]);
}

static void walk_if(Walker *w, const TpkOp *op) {
  int64_t c;
  bool k = known(w, op->in[0], &c);
  for (int r = 0; r < 2 && !w->failed; r++) {
    if (k && (r == 0) != (c != 0)) continue;
    walk_block(w, op->regions[r]);
    const TpkOp *y = op->regions[r]->last;
    if (y && y->opcode == TPK_OP_YIELD)
      for (int i = 0; i < op->nout; i++) {
        if (k) carry(w, &op->out[i], y->in[i]);
        else set_task(w, &op->out[i], task_of(w, y->in[i])), forget(w, &op->out[i]);
      }
  }
}

static void walk_grid(Walker *w, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  int rank = body->nargs;
  for (int a = 0; a < rank; a++)
    if (!known(w, op->in[2 * a], &w->grid_lo[a]) || !known(w, op->in[2 * a + 1], &w->grid_hi[a])) {
      fail(w, op, "a grid bound depends on vector or float data", NULL);
      return;
    }
  int64_t total = 1;
  for (int a = 0; a < rank; a++) total *= w->grid_hi[a] > w->grid_lo[a] ? w->grid_hi[a] - w->grid_lo[a] : 0;
  const TpkOp *outer = w->grid;
  w->grid = op;
  double step = GRID_STEP_SECONDS * w->chip->clock_hz;
  if (!push_stage(w, op)) return;
  for (int64_t s = 0; s < total && !w->failed; s++) {
    int64_t rem = s; /* row-major instance order */
    for (int a = rank - 1; a >= 0; a--) {
      int64_t n = w->grid_hi[a] - w->grid_lo[a];
      w->grid_ids[a] = w->grid_lo[a] + rem % n;
      rem /= n;
      set_known(w, body->args[a], w->grid_ids[a]);
    }
    w->core = (int)(s % w->ncores);
    Core *c = &w->cores[w->core];
    c->last = c->step = tpk_timeline_add(w->tl, c->scalar, step, NULL, 0, "grid step", "step");
    walk_block(w, body);
    next_stage(w);
  }
  w->depth--;
  flush_stores(w, 1); /* the grid is done: nothing is left to overlap with */
  w->grid = outer;
  w->core = 0;
}

/* A wait blocks the core's scalar unit until the copy has landed: what the
 * core computes next starts after it. */
static void wait_for(Walker *w, TpkTaskId copy) {
  if (copy == TPK_TASK_NONE) return;
  Core *c = &w->cores[w->core];
  TpkTaskId deps[2] = {copy, c->step};
  c->step = tpk_timeline_add(w->tl, c->scalar, 0, deps, c->step == TPK_TASK_NONE ? 1 : 2, "wait", "dma");
}

static void dma_signal(Walker *w, const TpkOp *op) {
  int64_t slot;
  if (!known(w, op->in[2], &slot)) slot = -1;
  if (w->nsemtasks == MAX_PENDING) { /* so many in flight: the oldest has surely landed */
    memmove(w->semtasks, w->semtasks + 1, sizeof *w->semtasks * (MAX_PENDING - 1));
    w->nsemtasks--;
  }
  const TpkOp *copy = op->in[0]->def;
  int64_t bytes = copy && copy->opcode == TPK_OP_DMA_START ? copy_bytes(w, copy) : 0;
  w->semtasks[w->nsemtasks++] = (struct SemTask){op->in[1], slot, bytes, task_of(w, op->in[0])};
}

/* A wait stalls until the oldest copy on the semaphore has landed, or with
 * a byte count until the copies holding that many bytes have, oldest first
 * (one the count reaches only part of is waited for, and keeps the rest). */
static void dma_wait_sem(Walker *w, const TpkOp *op) {
  int64_t slot, want = -1;
  if (!known(w, op->in[1], &slot)) slot = -1;
  if (op->nin > 2 && !known(w, op->in[2], &want)) want = -1; /* not known: the oldest copy */
  for (int i = 0; i < w->nsemtasks && want != 0;) {
    struct SemTask *s = &w->semtasks[i];
    if (s->sem != op->in[0] || (slot >= 0 && s->slot >= 0 && s->slot != slot)) {
      i++;
      continue;
    }
    wait_for(w, s->t);
    int64_t take = want < 0 || s->bytes <= want ? s->bytes : want;
    s->bytes -= take;
    want = want > 0 ? want - take : 0;
    if (s->bytes > 0) return;
    memmove(s, s + 1, sizeof *s * (size_t)(w->nsemtasks - i - 1));
    w->nsemtasks--;
  }
}

static void walk_op(Walker *w, const TpkOp *op) {
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  if (++w->walked > MAX_WALKED_OPS) {
    if (!w->failed)
      tpk_error(w->err, TPK_ERR_UNSUPPORTED,
                "simulator: kernel '%s' takes more than %lld ops to walk (grid steps x loop iterations x ops); "
                "use larger blocks (tunables) to time it",
                w->func_name, (long long)MAX_WALKED_OPS);
    w->failed = true;
    return;
  }
  Core *c = &w->cores[w->core];
  if (op->nout == 1 && op->out[0].type->kind == TPK_TYPE_TENSOR && op->out[0].type->rank == 0 && !op->nregion &&
      op->opcode != TPK_OP_LOAD && op->opcode != TPK_OP_REDUCE && op->opcode != TPK_OP_ATOMIC) {
    eval_scalar(w, op);
    compute(w, op, c->scalar, 1, info->name);
    return;
  }
  switch (op->opcode) {
  case TPK_OP_TILE_OF: /* a scalar computation whose result is a tile */
    eval_scalar(w, op);
    compute(w, op, c->scalar, 1, info->name);
    return;
  case TPK_OP_GRID: walk_grid(w, op); return;
  case TPK_OP_FOR: walk_for(w, op); return;
  case TPK_OP_WHILE: walk_while(w, op); return;
  case TPK_OP_IF: walk_if(w, op); return;
  case TPK_OP_YIELD: case TPK_OP_ALLOC: return;
  case TPK_OP_DMA_WAIT: wait_for(w, task_of(w, op->in[0])); return;
  case TPK_OP_DMA_SIGNAL: dma_signal(w, op); return;
  case TPK_OP_DMA_WAIT_SEM: dma_wait_sem(w, op); return;
  case TPK_OP_LOAD: load(w, op); return;
  case TPK_OP_STORE: store(w, op); return;
  case TPK_OP_ATOMIC: atomic(w, op); return;
  case TPK_OP_DOT: dot(w, op); return;
  case TPK_OP_DMA_START:
    set_task(w, &op->out[0], dma(w, copy_bytes(w, op), TPK_TASK_NONE, "copy_async"));
    return;
  case TPK_OP_RESHAPE:
  case TPK_OP_BITCAST: /* the same bytes in the same registers: no work */
    set_task(w, &op->out[0], task_of(w, op->in[0]));
    return;
  case TPK_OP_REDUCE: {
    int64_t n = numel(op->in[0]->type), outs = numel(op->out[0].type);
    w->rep->flops += (double)n;
    compute(w, op, c->vpu, tpk_sim_reduce_cycles(w->chip, n, outs), "reduce");
    return;
  }
  case TPK_OP_SCAN: {
    int64_t n = numel(op->in[0]->type), len, axis = tpk_op_int(op, "axis", 0);
    if (!tpk_dim_is_const(op->in[0]->type->dims[axis], &len)) len = 1;
    w->rep->flops += (double)n;
    compute(w, op, c->vpu, tpk_sim_scan_cycles(w->chip, n, len), "scan");
    return;
  }
  case TPK_OP_CALL: case TPK_OP_RETURN:
    fail(w, op, "not supported by the simulator yet: ", info->name);
    return;
  default:
    break;
  }
  int64_t n = op->nout ? numel(op->out[0].type) : 0;
  double ops = (info->flags & TPK_OPF_ELEMENTWISE) ? tpk_sim_vpu_ops(op->opcode) : 1;
  if (info->flags & TPK_OPF_ELEMENTWISE) w->rep->flops += (double)n;
  compute(w, op, c->vpu, tpk_sim_vpu_cycles(w->chip, n, ops), info->name);
}

static void walk_block(Walker *w, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op && !w->failed; op = op->next) walk_op(w, op);
}

TpkStatus tpk_sim_schedule(const TpkFunc *f, const TpkChip *chip, TpkSimReport *rep, TpkTimeline **timeline,
                           TpkError *err) {
  return tpk_sim_schedule_args(f, chip, NULL, rep, timeline, err);
}

TpkStatus tpk_sim_schedule_args(const TpkFunc *f, const TpkChip *chip, void *const *args, TpkSimReport *rep,
                                TpkTimeline **timeline, TpkError *err) {
  memset(rep, 0, sizeof *rep);
  rep->chip = chip;
  if (timeline) *timeline = NULL;
  Walker w = {.chip = chip, .rep = rep, .err = err, .func_name = f->name, .func = f, .args = args};
  tpk_arena_init(&w.arena, 0);
  if (tpk_timeline_create(&w.tl) != TPK_OK) return tpk_error(err, TPK_ERR_NOMEM, "simulator: out of memory");
  w.ncores = chip->megacore && chip->tensorcores > 1 ? (chip->tensorcores < MAX_CORES ? chip->tensorcores : MAX_CORES) : 1;
  for (int c = 0; c < w.ncores; c++) {
    char name[32];
    const char *sfx = w.ncores > 1 ? (c ? " (core 1)" : " (core 0)") : "";
    snprintf(name, sizeof name, "scalar%s", sfx);
    w.cores[c].scalar = tpk_timeline_add_unit(w.tl, name, 1);
    snprintf(name, sizeof name, "mxu%s", sfx);
    w.cores[c].mxu = tpk_timeline_add_unit(w.tl, name, 1);
    snprintf(name, sizeof name, "vpu%s", sfx);
    w.cores[c].vpu = tpk_timeline_add_unit(w.tl, name, 1);
    snprintf(name, sizeof name, "dma%s", sfx);
    w.cores[c].dma = tpk_timeline_add_unit(w.tl, name, chip->dma_engines);
    /* a matmul's fill and drain overlap the next one's streaming: about two
     * in flight per MXU */
    /* Assumed: on megacore chips each TensorCore streams at half the HBM
     * bandwidth. One in-order HBM queue shared by both would let one core's
     * copies, waiting for its compute, hold back the other's. */
    snprintf(name, sizeof name, "hbm%s", sfx);
    w.cores[c].hbm = tpk_timeline_add_unit(w.tl, name, 1);
    snprintf(name, sizeof name, "mxu drain%s", sfx);
    w.cores[c].mxu_out = tpk_timeline_add_unit(w.tl, name, 2 * chip->mxus_per_core);
    w.cores[c].last = w.cores[c].step = TPK_TASK_NONE;
  }
  for (int i = 0; i < f->nparams; i++) {
    set_task(&w, f->params[i].value, TPK_TASK_NONE);
    know_scalar_param(&w, i);
  }
  walk_block(&w, f->body);
  flush_stores(&w, 1);
  TpkError terr = {0};
  if (!w.failed && tpk_timeline_error(w.tl, &terr) != TPK_OK) {
    tpk_error(err, terr.code, "simulator: %s", terr.message);
    w.failed = true;
  }
  TpkStatus st = w.failed ? (err && err->code ? err->code : TPK_ERR_INTERNAL) : TPK_OK;
  if (st == TPK_OK) {
    rep->cycles = tpk_timeline_makespan(w.tl);
    rep->seconds = rep->cycles / chip->clock_hz;
    rep->mxu_utilisation = tpk_timeline_unit_utilisation(w.tl, w.cores[0].mxu);
    rep->vpu_utilisation = tpk_timeline_unit_utilisation(w.tl, w.cores[0].vpu);
    rep->hbm_utilisation = tpk_timeline_unit_utilisation(w.tl, w.cores[0].hbm);
    /* the roofline counts the matmul work at its dtype's peak */
    TpkDType dt = rep->matmul_flops ? rep->matmul_dtype : TPK_BF16;
    rep->roofline_seconds = tpk_sim_roofline_seconds(chip, rep->matmul_flops, rep->hbm_bytes, dt);
    rep->memory_bound = rep->hbm_bytes / chip->hbm_bytes_per_s > rep->matmul_flops / tpk_sim_peak_flops(chip, dt);
  }
  tpk_ptrmap_free(&w.known);
  tpk_ptrmap_free(&w.task);
  tpk_ptrmap_free(&w.prev);
  tpk_ptrmap_free(&w.stage_of);
  tpk_arena_free(&w.arena);
  if (st == TPK_OK && timeline) *timeline = w.tl;
  else tpk_timeline_destroy(w.tl);
  return st;
}
