/*
 * tile.c — whole-array statements become a grid over blocks of one
 * dimension.
 *
 * `o = x + y;` at the top of a kernel, and every cluster lower/fuse.c makes
 * of a graph, reads whole tensors; on a TPU they would not fit VMEM, so the
 * compiler tiles them. A run of top-level ops between grids is tiled over
 * blocks of one dimension L — the tiled dimension, "rows" below, though it
 * may sit at any axis of each value — when every store of the run writes
 * whole blocks along L and every op that touches a row value can be
 * computed one block at a time:
 *   - elementwise ops, select, convert, splat constants: every tensor
 *     operand has the rows at the result's axis;
 *   - broadcast: rows in, rows out, or a value without L stretched over
 *     the rows (trailing alignment, or a size-1 dim);
 *   - reduce, scan: over axes other than the rows';
 *   - transpose: the rows move with their axis; reshape: when it keeps the
 *     dims up to and including the rows' axis;
 *   - dot: rows of the batch dim (both operands), or of a free dim of one
 *     operand, the other read whole (x @ W, and x^T @ dy by x's columns);
 *   - slice, concat: along other axes; gather: rows of the table along
 *     another axis, or of the index vector;
 *   - iota: along another axis it is the same in every block; along the
 *     rows it is offset by the block's start;
 *   - loads and stores of refs whose rows dim is taken whole (`:`), the
 *     other dims as the run has them (`s`, `r`: slices of a graph's
 *     inputs); a ref is read and written along one dim only.
 * Which values are rows, and along which axis, is found backwards from the
 * stores, not from sizes alone: in a square kernel, b[N] broadcast over the
 * columns of x[N, N] has the leading size but is not rows (it stays whole,
 * before the grid). L is tried along each dim of each store's ref in order
 * (the first store's first; rows first, then columns: a reduction over the
 * leading axis, a bias gradient, tiles by its columns); the first that
 * works is taken (but see tile_run for dots whose rows fit one block).
 * Row values then get size B along their rows' axis, loads and stores index
 * the rows with the grid's tile, and ops that do not depend on rows stay
 * before the grid; a store of a value without rows, on a target of more
 * than one core, goes into the grid's first instance with what only it
 * reads (late_store_ok). A run that reduces over its rows whichever dim is tried
 * (a full reduction: a loss, a norm) is tiled instead as a sequential loop
 * over blocks of the reductions' rows, carrying them ("reductions over the
 * rows" below). Anything else (a scatter, reading back what the run stored
 * outside a row op, rows that use a reduction over the rows...) leaves the
 * run whole.
 *
 * L may be a shape symbol or an expression of them (code compiled once for
 * every size): the grid's bound is then computed from the symbols,
 * cdiv(L, B), and the last block is ragged (masked). B is a constant:
 * t->tile_bytes (an eighth of it for a symbolic L, whose last block's
 * padding is wasted work) over the widest row (a multiple of 8, at most L)
 * when every row's width is known, else 8 (128 when the rows are some
 * value's last, contiguous axis); at least 64 with a dot, and then a
 * multiple of 32 dividing L if one does (no ragged gemm). A single block
 * covering a constant L reads and writes it whole.
 */
#include "lower/lower.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct Tiling {
  TpkFunc *f;
  TpkOp *first, *end; /* the run [first, end) */
  const TpkDim *L;
  TpkPtrMap rows;   /* row value -> its rows' axis + 1 */
  TpkPtrMap refdim; /* ref -> the dim its row accesses take as rows + 1 */
  TpkPtrMap stored; /* refs row ops have written so far */
  TpkPtrMap in_run; /* row ops */
  TpkOp **ops;      /* row ops, in order */
  int n, cap;
  TpkPtrMap late;   /* ops without rows the grid's first instance runs: stores of such values, and what only they read */
  int64_t widest;    /* bytes of the widest row */
  bool width_known;  /* every row's width is a constant */
  bool last_axis;    /* some row value of rank >= 2 has its rows along its last axis */
  bool dot;          /* a dot is a row op */
  bool halve;        /* rows that fit one block: two blocks instead (tile_run) */
  bool late_ok;      /* stores without rows may go into the first instance (late_store_ok) */
} Tiling;

static void tiling_free(Tiling *T) {
  tpk_ptrmap_free(&T->rows);
  tpk_ptrmap_free(&T->refdim);
  tpk_ptrmap_free(&T->stored);
  tpk_ptrmap_free(&T->in_run);
  tpk_ptrmap_free(&T->late);
  free(T->ops);
  T->ops = NULL;
  T->n = T->cap = 0;
}

static bool push(Tiling *T, TpkOp *op) {
  if (T->n == T->cap) {
    int cap = T->cap ? T->cap * 2 : 32;
    TpkOp **ops = realloc(T->ops, (size_t)cap * sizeof *ops);
    if (!ops) return false;
    T->ops = ops;
    T->cap = cap;
  }
  T->ops[T->n++] = op;
  return tpk_ptrmap_put(&T->in_run, op, NULL);
}

/* The axis along which v holds rows, or -1. */
static int row_axis(const Tiling *T, const TpkValue *v) {
  void *a;
  return tpk_ptrmap_get(&T->rows, v, &a) ? (int)(intptr_t)a - 1 : -1;
}

/* v holds rows along `axis`: false when it cannot (not a tensor with L
 * there) or already holds them along another axis. */
static bool mark(Tiling *T, const TpkValue *v, int axis, bool *oom) {
  const TpkType *t = v->type;
  if (t->kind != TPK_TYPE_TENSOR || axis < 0 || axis >= t->rank || t->dims[axis] != T->L) return false;
  int have = row_axis(T, v);
  if (have >= 0) return have == axis;
  if (!tpk_ptrmap_put(&T->rows, v, (void *)(intptr_t)(axis + 1))) *oom = true;
  return !*oom;
}

/* The dim of a ref (or sliced value) that axis `va` of a block taken with
 * pattern p is: the va-th entry that is not a scalar index. */
static int mem_dim(const TpkIndexPattern *p, int va) {
  for (int d = 0, k = 0; d < p->rank; d++)
    if (p->dim[d] != TPK_INDEX_SCALAR && k++ == va) return d;
  return -1;
}

/* The axis of the block that dim d of the memory becomes. */
static int block_axis(const TpkIndexPattern *p, int d) {
  int k = 0;
  for (int i = 0; i < d; i++) k += p->dim[i] != TPK_INDEX_SCALAR;
  return k;
}

/* The dim of ref a store writes rows along: taken whole and of size L,
 * `prefer` when it qualifies, else the first that does; -1 when none. */
static int store_dim(const Tiling *T, const TpkOp *st, int prefer) {
  const TpkIndexPattern *p = tpk_op_index(st, "index");
  const TpkType *ref = st->in[0]->type;
  int found = -1;
  for (int d = 0; d < p->rank; d++)
    if (p->dim[d] == TPK_INDEX_ALL && ref->dims[d] == T->L && (found < 0 || d == prefer)) found = d;
  return found;
}

/* A ref's row accesses all take the same dim as rows. */
static bool ref_dim_ok(Tiling *T, const TpkValue *ref, int d, bool *oom) {
  void *have;
  if (tpk_ptrmap_get(&T->refdim, ref, &have)) return (int)(intptr_t)have - 1 == d;
  if (!tpk_ptrmap_put(&T->refdim, ref, (void *)(intptr_t)(d + 1))) *oom = true;
  return !*oom;
}

/* For an op whose result holds rows along axis ra: along which axis each
 * operand holds them (-1: it is read whole), or false when the op cannot
 * be computed one block of rows at a time. */
static bool operand_axes(const Tiling *T, const TpkOp *op, int ra, int *axes) {
  for (int i = 0; i < op->nin; i++) axes[i] = -1;
  const TpkType *rt = op->out[0].type;
  switch (op->opcode) {
  case TPK_OP_CONST:
  case TPK_OP_IOTA:
    return true;
  case TPK_OP_BROADCAST: {
    const TpkType *x = op->in[0]->type;
    int xa = ra - (rt->rank - x->rank);
    if (xa < 0) return true;
    int64_t one;
    if (x->dims[xa] == T->L) axes[0] = xa;
    else if (!tpk_dim_is_const(x->dims[xa], &one) || one != 1) return false;
    return true;
  }
  case TPK_OP_REDUCE: {
    const TpkAttr *ax = tpk_op_attr(op, "axes");
    bool keep = tpk_op_int(op, "keepdims", 0);
    int xrank = op->in[0]->type->rank, kept = 0;
    for (int d = 0; d < xrank; d++) {
      bool reduced = false;
      for (int i = 0; i < ax->n; i++) reduced |= ax->ints[i] == d;
      if (keep && d == ra) {
        if (reduced) return false;
        axes[0] = d;
      }
      if (!reduced && !keep && kept++ == ra) axes[0] = d;
    }
    return axes[0] >= 0;
  }
  case TPK_OP_TRANSPOSE:
    axes[0] = (int)tpk_op_attr(op, "perm")->ints[ra];
    return true;
  case TPK_OP_SCAN: /* lines along other axes are independent */
    if (tpk_op_int(op, "axis", 0) == ra) return false;
    axes[0] = ra;
    return true;
  case TPK_OP_RESHAPE: {
    const TpkType *x = op->in[0]->type;
    if (ra >= x->rank) return false;
    for (int d = 0; d <= ra; d++)
      if (x->dims[d] != rt->dims[d]) return false;
    axes[0] = ra;
    return true;
  }
  case TPK_OP_SLICE: {
    const TpkIndexPattern *p = tpk_op_index(op, "index");
    int d = mem_dim(p, ra);
    if (d < 0 || p->dim[d] != TPK_INDEX_ALL) return false;
    axes[0] = d;
    return true;
  }
  case TPK_OP_CONCAT:
    if (tpk_op_int(op, "axis", 0) == ra) return false;
    for (int i = 0; i < op->nin; i++) axes[i] = ra;
    return true;
  case TPK_OP_DOT: {
    const TpkAttr *lb = tpk_op_attr(op, "lhs_batch"), *rb = tpk_op_attr(op, "rhs_batch");
    if (op->nin > 2) axes[2] = ra; /* an accumulator has the result's type */
    if (ra < lb->n) {
      axes[0] = (int)lb->ints[ra];
      axes[1] = (int)rb->ints[ra];
      return true;
    }
    int k = lb->n;
    for (int s = 0; s < 2; s++) {
      const TpkAttr *c = tpk_op_attr(op, s ? "rhs_contract" : "lhs_contract"), *b = s ? rb : lb;
      for (int d = 0; d < op->in[s]->type->rank; d++) {
        bool fixed = false;
        for (int i = 0; i < c->n; i++) fixed |= c->ints[i] == d;
        for (int i = 0; i < b->n; i++) fixed |= b->ints[i] == d;
        if (!fixed && k++ == ra) axes[s] = d;
      }
    }
    return axes[0] >= 0 || axes[1] >= 0;
  }
  case TPK_OP_GATHER: {
    int ax = (int)tpk_op_int(op, "axis", 0), ir = op->in[1]->type->rank;
    if (ra < ax) axes[0] = ra;
    else if (ra < ax + ir) axes[1] = ra - ax;
    else axes[0] = ra - ir + 1;
    return true;
  }
  case TPK_OP_SELECT:
  case TPK_OP_CONVERT:
    break;
  default:
    if (!(tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE)) return false;
  }
  for (int i = 0; i < op->nin; i++)
    if (op->in[i]->type->rank > 0) axes[i] = ra;
  return true;
}

/* Rows, backwards from the stores: the values stores write as blocks of
 * rows, then the operands whose rows make a row result. */
static bool mark_rows(Tiling *T, const TpkOp *store0, int dim0, bool *oom) {
  TpkOp *last = T->end ? T->end->prev : T->first->parent->last;
  for (TpkOp *op = last; op; op = op == T->first ? NULL : op->prev) {
    if (op->opcode == TPK_OP_STORE) {
      int d = op == store0 ? dim0 : store_dim(T, op, dim0);
      if (d >= 0 && !mark(T, op->in[op->nin - 1], block_axis(tpk_op_index(op, "index"), d), oom)) return false;
      continue;
    }
    if (op->nout != 1) continue;
    int ra = row_axis(T, &op->out[0]);
    if (ra < 0) continue;
    int axes[64];
    if (op->nin > 64 || op->opcode == TPK_OP_LOAD) continue; /* a load's rows are checked going forward */
    if (!operand_axes(T, op, ra, axes)) return false;
    for (int i = 0; i < op->nin; i++)
      if (axes[i] >= 0 && !mark(T, op->in[i], axes[i], oom)) return false;
  }
  return true;
}

/* The bytes of one row of v (along its rows' axis); false when a size is
 * not a constant. INT64_MAX when they do not fit. */
static bool row_bytes(const TpkValue *v, int axis, int64_t *bytes) {
  int64_t n = (int64_t)tpk_dtype_size(v->type->dtype);
  for (int i = 0; i < v->type->rank; i++) {
    if (i == axis) continue;
    int64_t d;
    if (!tpk_dim_is_const(v->type->dims[i], &d)) return false;
    if (d > 0 && n > INT64_MAX / d) n = INT64_MAX;
    else n *= d;
  }
  *bytes = n;
  return true;
}

static bool reads_stored(const Tiling *T, const TpkOp *op) {
  for (int i = 0; i < op->nin; i++)
    if (tpk_ptrmap_get(&T->stored, op->in[i], NULL)) return true;
  return false;
}

/* A store of a value without rows (a bias gradient's sum over the rows of
 * x beside x^T @ dy tiled by dy's columns) may move into the grid's first
 * instance, on a target whose grids run on more than one core (on one,
 * the grid it would take the place of runs as well in one block), when
 * nothing else in the run touches its memory (no row op reads it, and the
 * order of its writes does not change) and it sets (a `+=` by one
 * instance would keep the host from sharing the grid). */
static bool late_store_ok(const Tiling *T, const TpkOp *st) {
  const TpkValue *ref = st->in[0];
  if (ref->type->kind != TPK_TYPE_REF || tpk_op_store_mode(st) != TPK_STORE_SET) return false;
  for (const TpkOp *op = T->first; op != T->end; op = op->next)
    for (int i = 0; op != st && i < op->nin; i++)
      if (op->in[i] == ref) return false;
  return true;
}

/* May an op of the run write ref: does any op but a load take it? */
static bool run_may_write(const Tiling *T, const TpkValue *ref) {
  for (const TpkOp *op = T->first; op != T->end; op = op->next)
    for (int i = 0; op->opcode != TPK_OP_LOAD && i < op->nin; i++)
      if (op->in[i] == ref) return true;
  return false;
}

/* The ops without rows whose every use is by a late op go into the grid's
 * first instance too, as only it needs them: pure ops, and loads of
 * memory the run does not write (their place among its stores does not
 * matter). Not a dot: one instance would compute a whole product while
 * the others wait on their last blocks (then the store stays, and the run
 * is not tiled that way). */
static bool mark_late_inputs(Tiling *T, bool *dot) {
  TpkOp *last = T->end ? T->end->prev : T->first->parent->last;
  for (TpkOp *op = last; op; op = op == T->first ? NULL : op->prev) {
    if (tpk_ptrmap_get(&T->in_run, op, NULL) || tpk_ptrmap_get(&T->late, op, NULL) || op->nregion || op->nout == 0)
      continue;
    if (!(tpk_op_info(op->opcode)->flags & TPK_OPF_PURE) && !(op->opcode == TPK_OP_LOAD && !run_may_write(T, op->in[0])))
      continue;
    bool late = true;
    for (int i = 0; i < op->nout && late; i++)
      for (const TpkUse *u = op->out[i].uses; u && late; u = u->next) late = tpk_ptrmap_get(&T->late, u->user, NULL);
    if (late && !tpk_ptrmap_put(&T->late, op, NULL)) return false;
    *dot |= late && op->opcode == TPK_OP_DOT;
  }
  return true;
}

/* The grid takes the last row op's place, and the late ops go into it:
 * what they read, but for each other, must come before that place. */
static bool late_operands_before_grid(Tiling *T, bool *oom) {
  if (!T->late.count) return true;
  TpkPtrMap before = {0};
  bool ok = true;
  for (TpkOp *op = T->f->body->first; op && op != T->ops[T->n - 1]; op = op->next)
    if (!tpk_ptrmap_put(&before, op, NULL)) {
      *oom = true;
      ok = false;
      break;
    }
  for (TpkOp *op = T->first; ok && op != T->end; op = op->next)
    for (int i = 0; tpk_ptrmap_get(&T->late, op, NULL) && i < op->nin && ok; i++) {
      const TpkOp *d = op->in[i]->def;
      ok = !d || tpk_ptrmap_get(&T->late, d, NULL) || tpk_ptrmap_get(&before, d, NULL);
    }
  tpk_ptrmap_free(&before);
  return ok;
}

/* Going forward: every op that touches rows is a row op (collected in
 * T->ops); the others are invariant and stay before the grid, but for the
 * late ones (late_store_ok), which its first instance computes. */
static bool check_run(Tiling *T, bool *oom) {
  T->width_known = true;
  for (TpkOp *op = T->first; op != T->end; op = op->next) {
    if (op->nregion) return false;
    bool in_rows = false, out_rows = false;
    for (int i = 0; i < op->nin; i++) in_rows |= row_axis(T, op->in[i]) >= 0;
    for (int i = 0; i < op->nout; i++) out_rows |= row_axis(T, &op->out[i]) >= 0;
    if (op->opcode == TPK_OP_STORE) {
      const TpkValue *val = op->in[op->nin - 1];
      int va = row_axis(T, val);
      if (va < 0) { /* a value without rows: stored once, by the grid's first instance */
        if (!T->late_ok || !late_store_ok(T, op)) return false;
        if (!tpk_ptrmap_put(&T->late, op, NULL)) return *oom = true, false;
        continue;
      }
      if (!val->def || !tpk_ptrmap_get(&T->in_run, val->def, NULL)) return false; /* computed whole before the run */
      const TpkIndexPattern *p = tpk_op_index(op, "index");
      int d = mem_dim(p, va);
      if (d < 0 || p->dim[d] != TPK_INDEX_ALL || op->in[0]->type->dims[d] != T->L) return false;
      if (tpk_op_store_mode(op) != TPK_STORE_SET && tpk_op_store_mode(op) != TPK_STORE_ADD) return false;
      if (!ref_dim_ok(T, op->in[0], d, oom) || !push(T, op) || !tpk_ptrmap_put(&T->stored, op->in[0], NULL)) return false;
      continue;
    }
    if (!in_rows && !out_rows) { /* invariant: before the grid, so it must not read what the grid writes */
      if (reads_stored(T, op)) return false;
      continue;
    }
    if (op->nout != 1 || !out_rows) return false; /* rows in, none out: a reduction over the rows */
    int ra = row_axis(T, &op->out[0]);
    if (op->opcode == TPK_OP_LOAD) {
      const TpkIndexPattern *p = tpk_op_index(op, "index");
      int d = mem_dim(p, ra);
      if (op->in[0]->type->kind != TPK_TYPE_REF || d < 0 || p->dim[d] != TPK_INDEX_ALL || op->in[0]->type->dims[d] != T->L)
        return false;
      for (int i = 1; i < op->nin; i++)
        if (row_axis(T, op->in[i]) >= 0) return false;
      if (!ref_dim_ok(T, op->in[0], d, oom)) return false;
    } else {
      int axes[64];
      if (op->nin > 64 || !operand_axes(T, op, ra, axes)) return false;
      for (int i = 0; i < op->nin; i++)
        if (row_axis(T, op->in[i]) != axes[i]) return false;
    }
    int64_t w;
    if (!row_bytes(&op->out[0], ra, &w)) T->width_known = false;
    else if (w > T->widest) T->widest = w;
    if (op->out[0].type->rank >= 2 && ra == op->out[0].type->rank - 1) T->last_axis = true;
    T->dot |= op->opcode == TPK_OP_DOT;
    if (!push(T, op)) return *oom = true, false;
  }
  /* invariant ops must not depend on row ops (they stay outside), and no
   * row value may be used after the run */
  for (TpkOp *op = T->first; op != T->end; op = op->next)
    if (!tpk_ptrmap_get(&T->in_run, op, NULL))
      for (int i = 0; i < op->nin; i++)
        if (op->in[i]->def && tpk_ptrmap_get(&T->in_run, op->in[i]->def, NULL)) return false;
  for (int k = 0; k < T->n; k++)
    for (int i = 0; i < T->ops[k]->nout; i++)
      for (const TpkUse *u = T->ops[k]->out[i].uses; u; u = u->next)
        if (!tpk_ptrmap_get(&T->in_run, u->user, NULL)) return false;
  bool late_dot = false;
  if (T->n > 0 && !mark_late_inputs(T, &late_dot)) return *oom = true, false;
  return T->n > 0 && !late_dot && late_operands_before_grid(T, oom);
}

/* ---- rewriting -------------------------------------------------------------------- */

/* Take op out of its block's list. */
static void unlink_op(TpkOp *op) {
  TpkBlock *b = op->parent;
  if (op->prev) op->prev->next = op->next;
  else b->first = op->next;
  if (op->next) op->next->prev = op->prev;
  else b->last = op->prev;
}

/* Unlink op from its block and put it before `anchor` in anchor's block. */
static void move_before(TpkOp *op, TpkOp *anchor) {
  unlink_op(op);
  TpkBlock *to = anchor->parent;
  op->parent = to;
  op->next = anchor;
  op->prev = anchor->prev;
  if (anchor->prev) anchor->prev->next = op;
  else to->first = op;
  anchor->prev = op;
}

/* Unlink op from its block and append it to block `to`. */
static void move_to_end(TpkOp *op, TpkBlock *to) {
  unlink_op(op);
  op->parent = to;
  op->prev = to->last;
  op->next = NULL;
  if (to->last) to->last->next = op;
  else to->first = op;
  to->last = op;
}

static const TpkType *with_block(TpkModule *m, const TpkType *t, int axis, const TpkDim *B) {
  if (axis < 0) return t;
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, t->dims, (size_t)t->rank * sizeof *dims);
  dims[axis] = B;
  return tpk_type_tensor(m, t->dtype, t->rank, dims);
}

/* An i32 op computing dim d from the shape symbols, appended by b; NULL
 * when out of memory. */
static TpkValue *dim_value(TpkBuilder *b, const TpkDim *d) {
  const TpkType *i32 = tpk_type_scalar(b->m, TPK_I32);
  if (d->kind == TPK_DIM_CONST) return tpk_build_const_int(b, i32, d->value);
  if (d->kind == TPK_DIM_SYM) return tpk_build_sym(b, d->sym);
  TpkValue *x = dim_value(b, d->a), *y = x ? dim_value(b, d->b) : NULL;
  if (!y) return NULL;
  TpkOpcode opc = d->kind == TPK_DIM_ADD ? TPK_OP_ADD : d->kind == TPK_DIM_SUB ? TPK_OP_SUB
                  : d->kind == TPK_DIM_MUL ? TPK_OP_MUL : d->kind == TPK_DIM_DIV ? TPK_OP_DIV : TPK_OP_CDIV;
  return tpk_build_binary(b, opc, x, y);
}

/* Where the grid's tile goes among a load's or store's operands: before
 * the operands of the entries after dim d. */
static int tile_operand(const TpkIndexPattern *p, int d) {
  int k = 1;
  for (int i = 0; i < d; i++) k += p->dim[i] != TPK_INDEX_ALL;
  return k;
}

/* The rows of a ragged last block past L hold loads' `other` (0) and what
 * ops compute from it, never stored. Harmless, but for an integer division
 * by a row value (0 there: a division-by-zero error) and a gather by row
 * indices computed from rows (an iota's run on past L: an index out of
 * range); indices loaded as they are pad with 0, which every table has. */
static bool padding_fails(const Tiling *T) {
  for (int k = 0; k < T->n; k++) {
    const TpkOp *op = T->ops[k];
    if ((op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV) &&
        !tpk_dtype_is_float(op->in[1]->type->dtype) && row_axis(T, op->in[1]) >= 0)
      return true;
    if (op->opcode == TPK_OP_GATHER && row_axis(T, op->in[1]) >= 0) {
      const TpkOp *ld = op->in[1]->def;
      const TpkAttr *other = ld ? tpk_op_attr(ld, "other") : NULL;
      if (!ld || ld->opcode != TPK_OP_LOAD || (other && (other->kind == TPK_ATTR_FLOAT ? other->f != 0 : other->i != 0)))
        return true;
    }
  }
  return false;
}

enum { SYMBOLIC_BLOCK_BYTES = 4 << 10 };

/* The block size: false when the run must stay whole after all (too many
 * blocks for i32 bounds, padding that would fail). */
static bool block_size(const Tiling *T, const TpkTarget *t, int64_t *Bout, bool *one_block) {
  int64_t Lk = -1, B;
  bool constant = tpk_dim_is_const(T->L, &Lk);
  /* With L symbolic the last block's rows past L are work thrown away
   * (zero-filled, computed, dropped): blocks an eighth of the size, and at
   * most SYMBOLIC_BLOCK_BYTES, bound it. That is all of a small tensor's
   * cost: a 16-element op of an eager stream (code for every size) on the
   * host's 256 KB tiles filled and computed 8192 rows. */
  int64_t budget = constant ? t->tile_bytes : t->tile_bytes / 8;
  if (!constant && budget > SYMBOLIC_BLOCK_BYTES) budget = SYMBOLIC_BLOCK_BYTES;
  if (T->width_known) {
    B = budget / (T->widest > 0 ? T->widest : 1);
    if (B >= 8) B -= B % 8;
    if (B < 1) B = 1;
  } else {
    B = T->last_axis ? 128 : 8;
  }
  /* a gemm packs its whole right operand for each block: 64 rows make that
   * a few percent of the products */
  if (T->dot && B < 64 && (!T->width_known || T->widest <= 4 * t->tile_bytes / 64)) B = 64;
  /* and a ragged last block computes a whole block's products for its few
   * rows: with a dot, the largest multiple of 32 rows (the gemm's
   * micro-panel width, should the rows be its columns) that divides L */
  if (T->dot && constant && B < Lk && Lk % B)
    for (int64_t even = B - B % 32; even >= 32; even -= 32)
      if (Lk % even == 0) {
        B = even;
        break;
      }
  if (constant && B > Lk) B = Lk;
  /* two instances can run on two threads: a dot's each of at least 32 rows */
  if (T->halve && constant && B == Lk && Lk >= (T->dot ? 64 : 2))
    B = T->dot ? tpk_ceildiv(tpk_ceildiv(Lk, 2), 8) * 8 : tpk_ceildiv(Lk, 2);
  *one_block = constant && B == Lk; /* the rows' dim is read and written whole */
  *Bout = B;
  if (constant && tpk_ceildiv(Lk, B) > INT32_MAX) return false; /* grid bounds are i32 */
  return !((!constant || Lk % B) && padding_fails(T));
}

/* The number of blocks, cdiv(L, B), as an i32 appended by b. */
static TpkValue *block_count(TpkBuilder *b, const Tiling *T, int64_t B) {
  const TpkType *i32 = tpk_type_scalar(b->m, TPK_I32);
  int64_t Lk;
  if (tpk_dim_is_const(T->L, &Lk)) return tpk_build_const_int(b, i32, tpk_ceildiv(Lk, B));
  TpkValue *l = dim_value(b, T->L), *bs = l ? tpk_build_const_int(b, i32, B) : NULL;
  return bs ? tpk_build_binary(b, TPK_OP_CDIV, l, bs) : NULL;
}

/* Copies of the row ops into block `in` (a grid's or a loop's), one block
 * of B rows at `tile`; originals -> copies into map. Ops of `skip` are left
 * to the caller. */
static bool copy_rows(Tiling *T, TpkBuilder *in, TpkValue *tile, int64_t B, bool one_block, TpkPtrMap *map,
                      const TpkPtrMap *skip) {
  TpkModule *m = T->f->module;
  const TpkDim *Bd = tpk_dim_const(m, B);
  const TpkType *i32 = tpk_type_scalar(m, TPK_I32);
  for (int k = 0; k < T->n; k++) {
    TpkOp *op = T->ops[k];
    if (skip && tpk_ptrmap_get(skip, op, NULL)) continue;
    in->loc = op->loc;
    bool mem = (op->opcode == TPK_OP_LOAD || op->opcode == TPK_OP_STORE) && !one_block;
    int d = -1;
    TpkIndexPattern pat;
    if (mem) {
      pat = *tpk_op_index(op, "index");
      int va = row_axis(T, op->opcode == TPK_OP_LOAD ? &op->out[0] : op->in[op->nin - 1]);
      d = mem_dim(&pat, va);
    }
    TpkValue *ins[64 + 1];
    int nin = 0;
    for (int i = 0; i < op->nin; i++) {
      if (mem && i == tile_operand(&pat, d)) ins[nin++] = tile;
      void *to;
      ins[nin++] = tpk_ptrmap_get(map, op->in[i], &to) ? to : op->in[i];
    }
    if (mem && tile_operand(&pat, d) == op->nin) ins[nin++] = tile;
    const TpkType *type = op->nout ? with_block(m, op->out[0].type, row_axis(T, &op->out[0]), Bd) : NULL;
    TpkOp *c = tpk_build(in, op->opcode, nin, ins, op->nout, &type);
    if (!c || !tpk_op_copy_attrs(m, c, op)) return false; /* room for the decisions to add theirs */
    if (mem) {
      pat.dim[d] = TPK_INDEX_TILE;
      tpk_op_set_index(m, c, "index", &pat);
    }
    if (!op->nout) continue;
    c->out[0].name = op->out[0].name;
    TpkValue *r = &c->out[0];
    if (op->opcode == TPK_OP_IOTA && tpk_op_int(op, "axis", 0) == row_axis(T, &op->out[0])) {
      /* numbered from the block's first row: in i32, then converted */
      c->out[0].type = tpk_type_with_dtype(m, type, TPK_I32);
      TpkOp *start = tpk_build(in, TPK_OP_TILE_START, 1, &tile, 1, &i32);
      TpkValue *st = start ? tpk_build_broadcast(in, &start->out[0], type->rank, type->dims) : NULL;
      r = st ? tpk_build_binary(in, TPK_OP_ADD, r, st) : NULL;
      if (r && type->dtype != TPK_I32) r = tpk_build_convert(in, r, type->dtype);
      if (!r) return false;
    }
    if (!tpk_ptrmap_put(map, &op->out[0], r)) return false;
  }
  return true;
}

/* Move the ops appended to f's body after `before` to just before `anchor`. */
static void move_appended(TpkFunc *f, TpkOp *before, TpkOp *anchor) {
  for (TpkOp *op = before ? before->next : f->body->first, *next; op; op = next) {
    next = op->next;
    move_before(op, anchor);
  }
}

/* The late ops (late_store_ok), in their order, into the grid's first
 * instance: `if tile.id(rows) == 0 { ... }` at the start of its body (not
 * after the row ops: the host reads a block a dot takes in place only
 * when no op with regions follows its load). One instance stores them
 * (the grid stays the kernel's one grid, which the host shares among its
 * threads), and tiling the kernel again finds nothing more to tile. */
static bool first_instance_does_late_ops(Tiling *T, TpkBlock *body, TpkValue *tile) {
  TpkModule *m = T->f->module;
  const TpkType *i32 = tpk_type_scalar(m, TPK_I32);
  TpkBuilder in = {.m = m, .block = body, .loc = T->first->loc, .before = body->first};
  TpkOp *id = tpk_build(&in, TPK_OP_TILE_ID, 1, &tile, 1, &i32);
  TpkValue *zero = id ? tpk_build_const_int(&in, i32, 0) : NULL;
  TpkValue *first = zero ? tpk_build_binary(&in, TPK_OP_EQ, &id->out[0], zero) : NULL;
  TpkOp *cond = first ? tpk_build(&in, TPK_OP_IF, 1, &first, 0, NULL) : NULL;
  if (!cond) return false;
  for (TpkOp *op = T->f->body->first, *next; op; op = next) {
    next = op->next;
    if (tpk_ptrmap_get(&T->late, op, NULL)) move_to_end(op, cond->regions[0]);
  }
  for (int r = 0; r < 2; r++) {
    TpkBuilder y = {.m = m, .block = cond->regions[r], .loc = cond->loc};
    tpk_build_yield(&y, 0, NULL);
  }
  return true;
}

/* Rewrite the row ops into a grid over blocks of B rows. */
static bool rewrite(Tiling *T, const TpkTarget *t, bool *changed) {
  TpkFunc *f = T->f;
  TpkModule *m = f->module;
  int64_t B;
  bool one_block;
  if (!block_size(T, t, &B, &one_block)) return true;
  TpkBuilder b = {.m = m, .block = f->body, .loc = T->first->loc};
  TpkOp *before = f->body->last; /* the bound's ops are those after it */
  TpkValue *lo = tpk_build_const_int(&b, tpk_type_scalar(m, TPK_I32), 0), *hi = block_count(&b, T, B);
  if (!lo || !hi) return false;
  TpkValue *bounds[2] = {lo, hi};
  TpkOp *grid = tpk_build(&b, TPK_OP_GRID, 2, bounds, 0, NULL);
  if (!grid) return false;
  TpkValue *tile = tpk_block_add_arg(m, grid->regions[0], tpk_type_tile(m, B), "rows");
  if (!tile) return false;
  /* The grid goes where the last row op was: every invariant op the rows
   * use comes before some row op, hence before it. */
  move_appended(f, before, T->ops[T->n - 1]);
  TpkPtrMap map = {0};
  TpkBuilder in = {.m = m, .block = grid->regions[0]};
  bool ok = copy_rows(T, &in, tile, B, one_block, &map, NULL);
  tpk_ptrmap_free(&map);
  if (!ok) return false;
  for (int k = T->n - 1; k >= 0; k--) tpk_op_erase(T->ops[k]);
  if (T->late.count && !first_instance_does_late_ops(T, grid->regions[0], tile)) return false;
  *changed = true;
  return true;
}

/* ---- reductions over the rows: a sequential loop ---------------------------------- */

/* A run that reduces over the rows (a full reduction: a loss, a norm; or a
 * sum over the rows mixed with what cannot tile by columns) has no grid:
 * its blocks are visited by a `for` loop carrying one accumulator per such
 * reduction. Each block computes its rows as a grid instance would, reduces
 * them (rows past L masked to the reduction's identity), and combines the
 * partial result into its accumulator; after the loop a mean divides by its
 * count, and the ops that use the reductions (scalars, stores of them) run.
 * Memory is one block, whatever L; the order of a sum becomes block by
 * block, a rounding change. */

typedef struct Loop {
  TpkPtrMap frontier; /* reductions over the rows */
  TpkPtrMap after;    /* values computed from them (ops after the loop) */
  TpkOp *frontier_ops[64];
  int nfrontier;
} Loop;

static int reduced_l_axis(const Tiling *T, const TpkOp *op) {
  if (op->opcode != TPK_OP_REDUCE) return -1;
  const TpkAttr *ax = tpk_op_attr(op, "axes");
  for (int i = 0; i < ax->n; i++)
    if (op->in[0]->type->dims[ax->ints[i]] == T->L) return (int)ax->ints[i];
  return -1;
}

/* Backwards from the reductions over L and the row stores. */
static bool loop_mark_rows(Tiling *T, Loop *lp, bool *oom) {
  TpkOp *last = T->end ? T->end->prev : T->first->parent->last;
  for (TpkOp *op = last; op; op = op == T->first ? NULL : op->prev) {
    if (op->opcode == TPK_OP_STORE) {
      int d = op->in[0]->type->rank > 0 ? store_dim(T, op, -1) : -1;
      if (d >= 0 && !mark(T, op->in[op->nin - 1], block_axis(tpk_op_index(op, "index"), d), oom)) return false;
      continue;
    }
    if (op->nout != 1 || op->opcode == TPK_OP_LOAD || op->nin > 64) continue;
    int ra = row_axis(T, &op->out[0]);
    if (ra < 0) {
      int a = reduced_l_axis(T, op);
      if (a < 0) continue;
      if (lp->nfrontier == 64) return false;
      if (!tpk_ptrmap_put(&lp->frontier, op, NULL)) return *oom = true, false;
      lp->frontier_ops[lp->nfrontier++] = op;
      if (!mark(T, op->in[0], a, oom)) return false;
      continue;
    }
    int axes[64];
    if (!operand_axes(T, op, ra, axes)) return false;
    for (int i = 0; i < op->nin; i++)
      if (axes[i] >= 0 && !mark(T, op->in[i], axes[i], oom)) return false;
  }
  return lp->nfrontier > 0;
}

static bool is_after(const Loop *lp, const TpkValue *v) { return tpk_ptrmap_get(&lp->after, v, NULL); }

/* Forward: row ops as for a grid; the reductions over L; ops after them
 * (which row ops must not read) and their stores; invariant ops. */
static bool loop_check_run(Tiling *T, Loop *lp, bool *oom) {
  T->width_known = true;
  TpkPtrMap written_after = {0}; /* refs stored after the loop */
  bool ok = true;
  for (TpkOp *op = T->first; op != T->end && ok; op = op->next) {
    if (op->nregion) ok = false;
    else if (tpk_ptrmap_get(&lp->frontier, op, NULL)) {
      /* its operand holds rows along a reduced axis, its result none */
      const TpkAttr *ax = tpk_op_attr(op, "axes");
      int ra = row_axis(T, op->in[0]);
      bool reduced = false;
      for (int i = 0; i < ax->n; i++) reduced |= ax->ints[i] == ra;
      TpkReduceKind kind = tpk_op_reduce_kind(op);
      TpkDType dt = op->out[0].type->dtype;
      ok = reduced && row_axis(T, &op->out[0]) < 0 && (tpk_dtype_is_float(dt) || dt == TPK_I32) &&
           !(kind == TPK_REDUCE_MEAN && !tpk_dtype_is_float(dt)) && push(T, op) &&
           tpk_ptrmap_put(&lp->after, &op->out[0], NULL);
    } else if (op->opcode == TPK_OP_STORE && row_axis(T, op->in[op->nin - 1]) < 0) {
      /* a store of what the reductions give, after the loop */
      for (int i = 0; i < op->nin; i++) ok &= row_axis(T, op->in[i]) < 0;
      ok = ok && is_after(lp, op->in[op->nin - 1]) && tpk_ptrmap_put(&written_after, op->in[0], NULL);
    } else {
      bool reads_after = false, in_rows = false, out_rows = false;
      for (int i = 0; i < op->nin; i++) {
        reads_after |= is_after(lp, op->in[i]);
        in_rows |= row_axis(T, op->in[i]) >= 0;
      }
      for (int i = 0; i < op->nout; i++) out_rows |= row_axis(T, &op->out[i]) >= 0;
      if (reads_after) { /* computed after the loop: from reductions and invariants */
        ok = !in_rows && !out_rows;
        for (int i = 0; i < op->nout && ok; i++) ok = tpk_ptrmap_put(&lp->after, &op->out[i], NULL);
      }
    }
  }
  /* nothing before the loop reads a ref stored after it */
  for (TpkOp *op = T->first; op != T->end && ok; op = op->next) {
    bool after = op->opcode == TPK_OP_STORE ? is_after(lp, op->in[op->nin - 1]) : op->nout && is_after(lp, &op->out[0]);
    for (int i = 0; i < op->nin && ok && !after; i++) ok = !tpk_ptrmap_get(&written_after, op->in[i], NULL);
  }
  /* row ops, forward, as check_run does for a grid (the reductions and the
   * ops after the loop are not row ops) */
  for (TpkOp *op = T->first; op != T->end && ok; op = op->next) {
    if (tpk_ptrmap_get(&lp->frontier, op, NULL) || (op->nout && is_after(lp, &op->out[0])) ||
        (op->opcode == TPK_OP_STORE && is_after(lp, op->in[op->nin - 1])))
      continue;
    bool in_rows = false, out_rows = false;
    for (int i = 0; i < op->nin; i++) in_rows |= row_axis(T, op->in[i]) >= 0;
    for (int i = 0; i < op->nout; i++) out_rows |= row_axis(T, &op->out[i]) >= 0;
    if (op->opcode == TPK_OP_STORE) {
      const TpkValue *val = op->in[op->nin - 1];
      const TpkIndexPattern *p = tpk_op_index(op, "index");
      int d = mem_dim(p, row_axis(T, val));
      ok = d >= 0 && p->dim[d] == TPK_INDEX_ALL && op->in[0]->type->dims[d] == T->L &&
           ref_dim_ok(T, op->in[0], d, oom) && push(T, op) && tpk_ptrmap_put(&T->stored, op->in[0], NULL);
      continue;
    }
    if (!in_rows && !out_rows) {
      ok = !reads_stored(T, op);
      continue;
    }
    if (op->nout != 1 || !out_rows) {
      ok = false;
      break;
    }
    int ra = row_axis(T, &op->out[0]);
    if (op->opcode == TPK_OP_LOAD) {
      const TpkIndexPattern *p = tpk_op_index(op, "index");
      int d = mem_dim(p, ra);
      ok = op->in[0]->type->kind == TPK_TYPE_REF && d >= 0 && p->dim[d] == TPK_INDEX_ALL &&
           op->in[0]->type->dims[d] == T->L && ref_dim_ok(T, op->in[0], d, oom);
      for (int i = 1; i < op->nin && ok; i++) ok = row_axis(T, op->in[i]) < 0;
    } else {
      int axes[64];
      ok = op->nin <= 64 && operand_axes(T, op, ra, axes);
      for (int i = 0; i < op->nin && ok; i++) ok = row_axis(T, op->in[i]) == axes[i] && !is_after(lp, op->in[i]);
    }
    int64_t w;
    if (!row_bytes(&op->out[0], ra, &w)) T->width_known = false;
    else if (w > T->widest) T->widest = w;
    if (op->out[0].type->rank >= 2 && ra == op->out[0].type->rank - 1) T->last_axis = true;
    T->dot |= op->opcode == TPK_OP_DOT;
    ok = ok && push(T, op);
  }
  tpk_ptrmap_free(&written_after);
  if (!ok) return false;
  /* invariant ops do not read row ops' results, and row values stay in the run */
  for (TpkOp *op = T->first; op != T->end; op = op->next)
    if (!tpk_ptrmap_get(&T->in_run, op, NULL) && !tpk_ptrmap_get(&lp->frontier, op, NULL))
      for (int i = 0; i < op->nin; i++)
        if (op->in[i]->def && tpk_ptrmap_get(&T->in_run, op->in[i]->def, NULL) &&
            !tpk_ptrmap_get(&lp->frontier, op->in[i]->def, NULL))
          return false;
  for (int k = 0; k < T->n; k++) {
    if (tpk_ptrmap_get(&lp->frontier, T->ops[k], NULL)) continue;
    for (int i = 0; i < T->ops[k]->nout; i++)
      for (const TpkUse *u = T->ops[k]->out[i].uses; u; u = u->next)
        if (!tpk_ptrmap_get(&T->in_run, u->user, NULL)) return false;
  }
  return true;
}

/* The identity of a reduction (what a masked row adds), as a constant of
 * type t. */
static TpkValue *identity(TpkBuilder *b, TpkReduceKind kind, const TpkType *t) {
  bool fl = tpk_dtype_is_float(t->dtype);
  switch (kind) {
  case TPK_REDUCE_SUM: case TPK_REDUCE_MEAN:
    return fl ? tpk_build_const_float(b, t, 0.0) : tpk_build_const_int(b, t, 0);
  case TPK_REDUCE_PROD:
    return fl ? tpk_build_const_float(b, t, 1.0) : tpk_build_const_int(b, t, 1);
  case TPK_REDUCE_MAX:
    return fl ? tpk_build_const_float(b, t, -INFINITY) : tpk_build_const_int(b, t, INT32_MIN);
  case TPK_REDUCE_MIN:
    return fl ? tpk_build_const_float(b, t, INFINITY) : tpk_build_const_int(b, t, INT32_MAX);
  }
  return NULL;
}

static TpkOpcode combine_op(TpkReduceKind kind) {
  return kind == TPK_REDUCE_MAX ? TPK_OP_MAX : kind == TPK_REDUCE_MIN ? TPK_OP_MIN
         : kind == TPK_REDUCE_PROD ? TPK_OP_MUL : TPK_OP_ADD;
}

/* Rewrite the run into a loop over blocks of rows (see above). */
static bool loop_rewrite(Tiling *T, Loop *lp, const TpkTarget *t, bool *changed) {
  TpkFunc *f = T->f;
  TpkModule *m = f->module;
  int64_t B, Lk;
  bool one_block;
  if (!block_size(T, t, &B, &one_block)) return true;
  bool ragged = !tpk_dim_is_const(T->L, &Lk) || Lk % B;
  const TpkType *i32 = tpk_type_scalar(m, TPK_I32);
  TpkBuilder b = {.m = m, .block = f->body, .loc = T->first->loc};
  TpkOp *before = f->body->last;
  int n = lp->nfrontier;
  TpkValue *in[2 + 64];
  const TpkType *types[64];
  in[0] = tpk_build_const_int(&b, i32, 0);
  in[1] = block_count(&b, T, B);
  if (!in[0] || !in[1]) return false;
  for (int i = 0; i < n; i++) { /* frontier_ops were found backwards: program order is reversed */
    TpkOp *r = lp->frontier_ops[n - 1 - i];
    types[i] = r->out[0].type;
    if (!(in[2 + i] = identity(&b, tpk_op_reduce_kind(r), types[i]))) return false;
  }
  TpkOp *loop = tpk_build(&b, TPK_OP_FOR, 2 + n, in, n, types);
  if (!loop) return false;
  TpkValue *tile = tpk_block_add_arg(m, loop->regions[0], tpk_type_tile(m, B), "rows");
  TpkValue *acc[64];
  for (int i = 0; i < n && tile; i++)
    if (!(acc[i] = tpk_block_add_arg(m, loop->regions[0], types[i], "acc"))) return false;
  if (!tile) return false;
  /* after the loop: a mean divides by its count */
  TpkValue *final[64];
  for (int i = 0; i < n; i++) {
    TpkOp *r = lp->frontier_ops[n - 1 - i];
    final[i] = &loop->out[i];
    if (tpk_op_reduce_kind(r) != TPK_REDUCE_MEAN) continue;
    const TpkAttr *ax = tpk_op_attr(r, "axes");
    TpkValue *count = dim_value(&b, r->in[0]->type->dims[ax->ints[0]]);
    for (int k = 1; k < ax->n && count; k++) {
      TpkValue *d = dim_value(&b, r->in[0]->type->dims[ax->ints[k]]);
      count = d ? tpk_build_binary(&b, TPK_OP_MUL, count, d) : NULL;
    }
    TpkValue *c = count ? tpk_build_convert(&b, count, types[i]->dtype) : NULL;
    if (c && types[i]->rank) c = tpk_build_broadcast(&b, c, types[i]->rank, types[i]->dims);
    if (!c || !(final[i] = tpk_build_binary(&b, TPK_OP_DIV, final[i], c))) return false;
  }
  /* The loop, and the ops after it, go where the last row op was; the ops
   * computed from the reductions move after them. */
  TpkOp *anchor = T->ops[T->n - 1];
  int nafter = 0, nops = 1;
  for (TpkOp *op = T->first; op != anchor; op = op->next) nops++;
  TpkOp **after = malloc(sizeof *after * (size_t)nops);
  for (TpkOp *op = T->first; op != anchor && after; op = op->next) {
    bool is = op->opcode == TPK_OP_STORE ? is_after(lp, op->in[op->nin - 1]) : op->nout && is_after(lp, &op->out[0]);
    if (is && !tpk_ptrmap_get(&lp->frontier, op, NULL)) after[nafter++] = op;
  }
  if (!after) return false;
  move_appended(f, before, anchor);
  for (int k = 0; k < nafter; k++) move_before(after[k], anchor);
  free(after);
  /* the body: the rows, then each reduction's block, masked, into its accumulator */
  TpkPtrMap map = {0};
  TpkBuilder body = {.m = m, .block = loop->regions[0]};
  bool ok = copy_rows(T, &body, tile, B, one_block, &map, &lp->frontier);
  TpkValue *next_acc[64];
  for (int i = 0; i < n && ok; i++) {
    TpkOp *r = lp->frontier_ops[n - 1 - i];
    body.loc = r->loc;
    void *to;
    TpkValue *x = tpk_ptrmap_get(&map, r->in[0], &to) ? to : NULL;
    int ra = row_axis(T, r->in[0]);
    const TpkType *xt = x ? x->type : NULL;
    if (x && ragged && !one_block) { /* rows past L count as the identity */
      const TpkType *it = tpk_type_with_dtype(m, xt, TPK_I32);
      TpkOp *io = tpk_build(&body, TPK_OP_IOTA, 0, NULL, 1, &it);
      if (io) tpk_op_set_int(m, io, "axis", ra);
      TpkOp *st = tpk_build(&body, TPK_OP_TILE_START, 1, &tile, 1, &i32);
      TpkValue *stb = st ? tpk_build_broadcast(&body, &st->out[0], xt->rank, xt->dims) : NULL;
      TpkValue *pos = io && stb ? tpk_build_binary(&body, TPK_OP_ADD, &io->out[0], stb) : NULL;
      TpkValue *l = pos ? dim_value(&body, T->L) : NULL;
      TpkValue *lb = l ? tpk_build_broadcast(&body, l, xt->rank, xt->dims) : NULL;
      TpkValue *inside = lb ? tpk_build_binary(&body, TPK_OP_LT, pos, lb) : NULL;
      TpkValue *id = inside ? identity(&body, tpk_op_reduce_kind(r), tpk_type_scalar(m, xt->dtype)) : NULL;
      TpkValue *idb = id ? tpk_build_broadcast(&body, id, xt->rank, xt->dims) : NULL;
      x = idb ? tpk_build_select(&body, inside, x, idb) : NULL;
    }
    TpkOp *part = x ? tpk_build(&body, TPK_OP_REDUCE, 1, &x, 1, &types[i]) : NULL;
    ok = part && tpk_op_copy_attrs(m, part, r);
    if (ok && tpk_op_reduce_kind(r) == TPK_REDUCE_MEAN) tpk_op_set_reduce_kind(m, part, TPK_REDUCE_SUM);
    ok = ok && (next_acc[i] = tpk_build_binary(&body, combine_op(tpk_op_reduce_kind(r)), acc[i], &part->out[0])) != NULL;
  }
  if (ok) ok = tpk_build(&body, TPK_OP_YIELD, n, next_acc, 0, NULL) != NULL;
  tpk_ptrmap_free(&map);
  if (!ok) return false;
  for (int i = 0; i < n; i++) tpk_func_replace_uses(f, &lp->frontier_ops[n - 1 - i]->out[0], final[i]);
  for (int k = T->n - 1; k >= 0; k--) tpk_op_erase(T->ops[k]);
  *changed = true;
  return true;
}

/* A run with no grid: try a loop over the rows of its reductions' operands. */
static bool loop_run(TpkFunc *f, TpkOp *first, TpkOp *end, const TpkTarget *t, bool *changed) {
  for (TpkOp *r = first; r != end; r = r->next) {
    if (r->opcode != TPK_OP_REDUCE) continue;
    const TpkAttr *ax = tpk_op_attr(r, "axes");
    for (int i = 0; i < ax->n; i++) {
      const TpkDim *L = r->in[0]->type->dims[ax->ints[i]];
      int64_t Lk;
      if (tpk_dim_is_const(L, &Lk) && Lk <= 1) continue;
      Tiling T = {.f = f, .first = first, .end = end, .L = L};
      Loop lp = {0};
      bool oom = false;
      bool ok = loop_mark_rows(&T, &lp, &oom) && loop_check_run(&T, &lp, &oom);
      bool done = oom ? false : ok ? loop_rewrite(&T, &lp, t, changed) : true;
      tiling_free(&T);
      tpk_ptrmap_free(&lp.frontier);
      tpk_ptrmap_free(&lp.after);
      if (oom || !done || ok) return !oom && done;
    }
  }
  return true;
}

/* The multiply-adds of the run's dots when every size is a constant,
 * else -1. */
static int64_t dot_macs(const TpkOp *first, const TpkOp *end) {
  int64_t macs = 0;
  for (const TpkOp *op = first; op != end; op = op->next) {
    if (op->opcode != TPK_OP_DOT) continue;
    int64_t n = 1, k;
    const TpkType *out = op->out[0].type;
    for (int d = 0; d < out->rank; d++) {
      if (!tpk_dim_is_const(out->dims[d], &k)) return -1;
      n *= k;
    }
    const TpkAttr *c = tpk_op_attr(op, "lhs_contract");
    for (int i = 0; c && i < c->n; i++) {
      if (!tpk_dim_is_const(op->in[0]->type->dims[c->ints[i]], &k)) return -1;
      n *= k;
    }
    macs += n;
  }
  return macs;
}

/* Dots of fewer multiply-adds keep one block when their rows fit one: two
 * instances would each wake a thread for a few microseconds of products. */
enum { HALVE_MACS = 1 << 20 };

/* The bytes the run's row ops read and write, when every row's width is a
 * constant and L is, else -1. */
static int64_t run_bytes(const Tiling *T) {
  int64_t Lk, total = 0, w;
  if (!tpk_dim_is_const(T->L, &Lk)) return -1;
  for (int i = 0; i < T->n; i++) {
    const TpkOp *op = T->ops[i];
    const TpkValue *v = op->opcode == TPK_OP_LOAD ? &op->out[0] : op->opcode == TPK_OP_STORE ? op->in[op->nin - 1] : NULL;
    if (!v) continue;
    if (!row_bytes(v, row_axis(T, v), &w)) return -1;
    total += w;
  }
  return total * Lk;
}

/* Runs without a dot that move fewer bytes keep one block when their rows
 * fit one: at 1 MB the AdamW update of a 512 x 128 weight (four arrays in,
 * four out) takes ~0.12 ms on one thread. */
enum { HALVE_BYTES = 1 << 20 };

/* How try_tiling takes a dim: FIRST, as the first choice (not when a dot's
 * rows fit one block, or, once one has, when the blocks are too few or
 * too narrow); HALVED, only in two blocks or more; ANY, as it comes. */
typedef enum TryMode { TRY_FIRST, TRY_HALVED, TRY_ANY } TryMode;
typedef enum Tried { TRIED_NO, TRIED_ONE_BLOCK, TRIED_TILED, TRIED_OOM } Tried;

/* Tile the run [first, end) over dim d of the memory `st` stores into:
 * TILED when it was rewritten into a grid (or must stay whole after all);
 * ONE_BLOCK when the mode refuses the one block that dim gives (a
 * candidate for halving); NO when it does not tile that way, or (once a
 * dim gave one block) only in blocks too few or too narrow. */
static Tried try_tiling(TpkFunc *f, TpkOp *first, TpkOp *end, const TpkTarget *t, const TpkOp *st, int d, TryMode mode,
                        bool halve, bool seen_one_block, bool *changed) {
  const TpkIndexPattern *p = tpk_op_index(st, "index");
  const TpkDim *L = st->in[0]->type->dims[d];
  int64_t Lk, B;
  if (p->dim[d] != TPK_INDEX_ALL || (tpk_dim_is_const(L, &Lk) && Lk <= 1)) return TRIED_NO;
  Tiling T = {.f = f, .first = first, .end = end, .L = L, .halve = halve, .late_ok = t->cores > 1};
  bool oom = false, one_block = false;
  bool ok = mark_rows(&T, st, d, &oom) && check_run(&T, &oom);
  Tried r = TRIED_NO;
  if (!oom && ok) {
    if (mode == TRY_FIRST) T.halve = !T.dot && t->cores > 1 && run_bytes(&T) >= HALVE_BYTES;
    bool tiles = block_size(&T, t, &B, &one_block);
    r = TRIED_TILED;
    if (mode == TRY_FIRST && tiles && T.dot && one_block) r = TRIED_ONE_BLOCK;
    else if (mode == TRY_FIRST && seen_one_block && (!tiles || one_block || B < 32)) r = TRIED_NO; /* narrower than the gemm's micro-panel */
    else if (mode == TRY_HALVED && (!tiles || one_block)) r = TRIED_ONE_BLOCK;
  }
  if (r == TRIED_TILED && !rewrite(&T, t, changed)) oom = true;
  tiling_free(&T);
  return oom ? TRIED_OOM : r;
}

/* Tile one run [first, end) of top-level ops; returns false on no memory. */
static bool tile_run(TpkFunc *f, TpkOp *first, TpkOp *end, const TpkTarget *t, bool *changed) {
  const TpkOp *store0 = NULL;
  for (TpkOp *op = first; op != end && !store0; op = op->next)
    if (op->opcode == TPK_OP_STORE && op->in[0]->type->rank > 0) store0 = op;
  const TpkIndexPattern *p = store0 ? tpk_op_index(store0, "index") : NULL;
  int64_t size;
  for (int d = 0; p && d < p->rank; d++) /* arrays without elements: nothing to tile */
    if (tpk_dim_is_const(store0->in[0]->type->dims[d], &size) && size == 0) return true;
  /* L is tried along each dim of each store's memory in turn (the first
   * store's first). The first that tiles is taken, unless the run has a
   * dot, its rows fit one block and a later dim gives blocks of at least 32
   * (the gemm's micro-panel): a grid of one instance runs on one thread, so
   * `x^T @ dy` with x's 128 columns in one block is tiled by dy's columns.
   * When no later dim does, the rows of a dot of at least HALVE_MACS are
   * halved, on a target whose grids run on more than one core: two blocks
   * of at least 32, along the first of the one-block dims that has 64
   * (dW2 = x^T @ dy with x's 10 columns, beside the bias gradient, halves
   * dy's 1024 columns). Without a dot, rows in one block are halved too
   * where the run moves at least HALVE_BYTES (a row's width is at most a
   * tile, but an optimizer's update reads and writes several arrays of
   * it). */
  enum { MAX_ONE_BLOCK = 8 };
  const TpkOp *one_store[MAX_ONE_BLOCK];
  int one_dim[MAX_ONE_BLOCK], nones = 0;
  for (const TpkOp *st = store0; st && st != end; st = st->next) {
    if (st->opcode != TPK_OP_STORE || st->in[0]->type->rank == 0) continue;
    for (int d = 0; d < tpk_op_index(st, "index")->rank; d++) {
      Tried r = try_tiling(f, first, end, t, st, d, TRY_FIRST, false, nones > 0, changed);
      if (r == TRIED_OOM) return false;
      if (r == TRIED_TILED) return true;
      if (r == TRIED_ONE_BLOCK && nones < MAX_ONE_BLOCK) {
        one_store[nones] = st;
        one_dim[nones++] = d;
      }
    }
  }
  bool halve = t->cores > 1 && dot_macs(first, end) >= HALVE_MACS;
  for (int i = 0; halve && i < nones; i++) {
    Tried r = try_tiling(f, first, end, t, one_store[i], one_dim[i], TRY_HALVED, true, true, changed);
    if (r == TRIED_OOM) return false;
    if (r == TRIED_TILED) return true;
  }
  if (nones) /* one block, then: the first dim that gave it */
    return try_tiling(f, first, end, t, one_store[0], one_dim[0], TRY_ANY, halve, true, changed) != TRIED_OOM;
  return loop_run(f, first, end, t, changed);
}

TpkStatus tpk_tile_whole_arrays(TpkFunc *f, const TpkTarget *t, TpkError *err) {
  /* runs: maximal sequences of top-level ops without regions */
  TpkOp *op = f->body->first;
  while (op) {
    while (op && op->nregion) op = op->next;
    if (!op) break;
    TpkOp *end = op;
    while (end && !end->nregion) end = end->next;
    TpkOp *resume = end;
    bool changed = false;
    if (!tile_run(f, op, end, t, &changed)) return tpk_error(err, TPK_ERR_NOMEM, "out of memory tiling '%s'", f->name);
    op = resume;
  }
  return TPK_OK;
}
