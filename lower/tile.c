/*
 * tile.c — whole-array statements become a grid over row blocks.
 *
 * `o = x + y;` at the top of a kernel reads whole tensors; on a TPU they would
 * not fit VMEM, so the compiler tiles them, the same way it tiles graphs from
 * the eager and torch.compile paths. A run of top-level ops between grids is
 * tiled when every tensor it stores is stored whole and shares the leading
 * dimension L, and every op that touches a value with leading dimension L
 * works row by row:
 *   elementwise ops, select, convert, broadcast into rows, reductions that
 *   keep axis 0, splat constants, iota along another axis, whole loads and
 *   stores of refs whose leading dimension is L.
 * Which values are rows is found backwards from the stores, not from sizes
 * alone: in a square kernel, b[N] broadcast over the columns of x[N, N] has
 * the leading size but is not rows (it stays whole, before the grid).
 * Row values then get leading dimension B (the block), loads and stores
 * index the rows with the grid's tile, and ops that do not depend on rows
 * stay before the grid. Anything else (a dot, a transpose, a reduction over
 * rows, a gather, reading back what the run stored outside a row op...)
 * leaves the run whole.
 */
#include "lower/lower.h"

#include <stdlib.h>
#include <string.h>

typedef struct Run {
  TpkOp **ops;
  int n, cap;
} Run;

static bool run_push(Run *r, TpkOp *op) {
  if (r->n == r->cap) {
    int cap = r->cap ? r->cap * 2 : 32;
    TpkOp **ops = realloc(r->ops, (size_t)cap * sizeof *ops);
    if (!ops) return false;
    r->ops = ops;
    r->cap = cap;
  }
  r->ops[r->n++] = op;
  return true;
}

static bool in_run(const Run *r, const TpkOp *op) {
  for (int i = 0; i < r->n; i++)
    if (r->ops[i] == op) return true;
  return false;
}

/* Does op's index take every dimension whole? */
static bool whole_index(const TpkOp *op) {
  const TpkIndexPattern *p = tpk_op_index(op, "index");
  for (int d = 0; d < p->rank; d++)
    if (p->dim[d] != TPK_INDEX_ALL) return false;
  return true;
}

/* Does v have leading dimension L? */
static bool leading(const TpkValue *v, const TpkDim *L) {
  return v->type->kind == TPK_TYPE_TENSOR && v->type->rank > 0 && v->type->dims[0] == L;
}

/* Does a store write whole rows of a ref with leading dimension L? */
static bool stores_rows(const TpkOp *op, const TpkDim *L) {
  const TpkType *ref = op->in[0]->type;
  return whole_index(op) && ref->rank > 0 && ref->dims[0] == L;
}

static bool reduces_rows(const TpkOp *op) {
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  for (int i = 0; axes && i < axes->n; i++)
    if (axes->ints[i] == 0) return true;
  return false;
}

static bool mark_row(TpkPtrMap *rows, const TpkValue *v, const TpkDim *L) {
  return !leading(v, L) || tpk_ptrmap_put(rows, v, NULL);
}

/* The row values of the run [first, end): the values whole stores write as
 * rows, and, backwards, the operands whose axis 0 is the axis 0 of a row
 * result: of elementwise ops, select and convert, a broadcast's operand of
 * the result's rank, a reduction's operand when axis 0 is kept. */
static bool mark_rows(TpkOp *first, TpkOp *end, const TpkDim *L, TpkPtrMap *rows) {
  TpkOp *last = end ? end->prev : first->parent->last;
  for (TpkOp *op = last; op; op = op == first ? NULL : op->prev) {
    if (op->opcode == TPK_OP_STORE) {
      if (stores_rows(op, L) && !mark_row(rows, op->in[op->nin - 1], L)) return false;
      continue;
    }
    if (op->nout != 1 || !tpk_ptrmap_get(rows, &op->out[0], NULL)) continue;
    bool ok = true;
    if (op->opcode == TPK_OP_BROADCAST) {
      if (op->in[0]->type->rank == op->out[0].type->rank) ok = mark_row(rows, op->in[0], L);
    } else if (op->opcode == TPK_OP_REDUCE) {
      if (!reduces_rows(op)) ok = mark_row(rows, op->in[0], L);
    } else if ((tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE) || op->opcode == TPK_OP_SELECT ||
               op->opcode == TPK_OP_CONVERT) {
      for (int i = 0; i < op->nin && ok; i++) ok = mark_row(rows, op->in[i], L);
    }
    if (!ok) return false;
  }
  return true;
}

static bool is_row(const TpkValue *v, const TpkPtrMap *rows) { return tpk_ptrmap_get(rows, v, NULL); }

/* Rows flow through op: does op take row inputs or make row outputs, and can
 * it be computed one block of rows at a time? */
static bool row_op_ok(const TpkOp *op, const TpkDim *L, const TpkPtrMap *rows, bool *is_row_op) {
  bool in_rows = false, out_rows = false;
  for (int i = 0; i < op->nin; i++) in_rows |= is_row(op->in[i], rows);
  for (int i = 0; i < op->nout; i++) out_rows |= is_row(&op->out[i], rows);
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  *is_row_op = in_rows || out_rows;
  if (op->opcode == TPK_OP_STORE) {
    *is_row_op = true;
    return stores_rows(op, L) && is_row(op->in[op->nin - 1], rows);
  }
  if (!*is_row_op) return true; /* invariant: stays before the grid */
  switch (op->opcode) {
  case TPK_OP_LOAD:
    return whole_index(op) && out_rows;
  case TPK_OP_CONST:
    return out_rows;
  case TPK_OP_IOTA:
    return out_rows && tpk_op_int(op, "axis", 0) != 0;
  case TPK_OP_BROADCAST:
    /* rows in, rows out; or a value without the row dimension stretched
     * over rows (trailing alignment keeps it off axis 0) */
    return out_rows && (is_row(op->in[0], rows) ? op->in[0]->type->rank == op->out[0].type->rank
                                                : op->in[0]->type->rank < op->out[0].type->rank);
  case TPK_OP_REDUCE:
    return !reduces_rows(op) && in_rows && out_rows;
  case TPK_OP_SELECT:
  case TPK_OP_CONVERT:
    break;
  default:
    if (!(info->flags & TPK_OPF_ELEMENTWISE)) return false;
  }
  /* elementwise: every tensor operand has the rows (scalars are fine) */
  for (int i = 0; i < op->nin; i++)
    if (op->in[i]->type->rank > 0 && !is_row(op->in[i], rows)) return false;
  return out_rows;
}

/* Does any op outside the run use a value defined by a row op? */
static bool escapes(const Run *rows) {
  for (int k = 0; k < rows->n; k++)
    for (int i = 0; i < rows->ops[k]->nout; i++)
      for (const TpkUse *u = rows->ops[k]->out[i].uses; u; u = u->next)
        if (!in_run(rows, u->user)) return true;
  return false;
}

/* Value mapping from the original ops to their clones in the grid. */
typedef struct Map {
  const TpkValue **from;
  TpkValue **to;
  int n, cap;
} Map;

static TpkValue *mapped(const Map *m, TpkValue *v) {
  for (int i = m->n - 1; i >= 0; i--)
    if (m->from[i] == v) return m->to[i];
  return v;
}

static bool map_add(Map *m, const TpkValue *from, TpkValue *to) {
  if (m->n == m->cap) {
    int cap = m->cap ? m->cap * 2 : 32;
    const TpkValue **f = realloc(m->from, (size_t)cap * sizeof *f);
    if (!f) return false;
    m->from = f;
    TpkValue **t = realloc(m->to, (size_t)cap * sizeof *t);
    if (!t) return false;
    m->to = t;
    m->cap = cap;
  }
  m->from[m->n] = from;
  m->to[m->n++] = to;
  return true;
}

static const TpkType *with_rows(TpkModule *m, const TpkType *t, const TpkDim *L, const TpkDim *B) {
  if (t->kind != TPK_TYPE_TENSOR || t->rank == 0 || t->dims[0] != L) return t;
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, t->dims, (size_t)t->rank * sizeof *dims);
  dims[0] = B;
  return tpk_type_tensor(m, t->dtype, t->rank, dims);
}

/* Unlink op from its block and put it before `anchor` in anchor's block. */
static void move_before(TpkOp *op, TpkOp *anchor) {
  TpkBlock *b = op->parent;
  if (op->prev) op->prev->next = op->next;
  else b->first = op->next;
  if (op->next) op->next->prev = op->prev;
  else b->last = op->prev;
  TpkBlock *to = anchor->parent;
  op->parent = to;
  op->next = anchor;
  op->prev = anchor->prev;
  if (anchor->prev) anchor->prev->next = op;
  else to->first = op;
  anchor->prev = op;
}

/* The bytes of one row of v, INT64_MAX when they do not fit. */
static int64_t row_bytes(const TpkValue *v) {
  int64_t n = (int64_t)tpk_dtype_size(v->type->dtype);
  for (int i = 1; i < v->type->rank; i++) {
    int64_t d = 1;
    tpk_dim_is_const(v->type->dims[i], &d);
    if (d > 0 && n > INT64_MAX / d) return INT64_MAX;
    n *= d;
  }
  return n;
}

/* Tile one run [first, end) of top-level ops; returns false on no memory. */
static bool tile_run(TpkFunc *f, TpkOp *first, TpkOp *end, const TpkTarget *t, bool *changed) {
  TpkModule *m = f->module;
  /* the leading dimension: from the first whole store */
  const TpkDim *L = NULL;
  for (TpkOp *op = first; op != end; op = op->next)
    if (op->opcode == TPK_OP_STORE && whole_index(op) && op->in[0]->type->rank > 0) {
      L = op->in[0]->type->dims[0];
      break;
    }
  int64_t Lk;
  if (!L || !tpk_dim_is_const(L, &Lk) || Lk <= 0) return true;
  TpkPtrMap row_values = {0}, stored = {0}; /* stored: refs row ops have written so far */
  Run rows = {0};
  int64_t widest = 1;
  bool ok = mark_rows(first, end, L, &row_values);
  if (!ok) goto oom;
  for (TpkOp *op = first; op != end && ok; op = op->next) {
    bool row;
    if (op->nregion || !row_op_ok(op, L, &row_values, &row)) {
      ok = false;
    } else if (row) {
      if (!run_push(&rows, op) || (op->opcode == TPK_OP_STORE && !tpk_ptrmap_put(&stored, op->in[0], NULL))) goto oom;
      for (int i = 0; i < op->nout; i++)
        if (is_row(&op->out[i], &row_values) && row_bytes(&op->out[i]) > widest) widest = row_bytes(&op->out[i]);
    } else {
      /* an op left before the grid must not read what the grid writes */
      for (int i = 0; i < op->nin; i++) ok &= !tpk_ptrmap_get(&stored, op->in[i], NULL);
    }
  }
  tpk_ptrmap_free(&row_values);
  tpk_ptrmap_free(&stored);
  /* invariant ops must not depend on row ops (they stay outside) */
  for (TpkOp *op = first; op != end && ok; op = op->next)
    if (!in_run(&rows, op))
      for (int i = 0; i < op->nin; i++)
        if (op->in[i]->def && in_run(&rows, op->in[i]->def)) ok = false;
  if (!ok || !rows.n || escapes(&rows)) {
    free(rows.ops);
    return true;
  }
  /* Block rows: t->tile_bytes for the widest row value, a multiple of 8. */
  int64_t B = t->tile_bytes / widest;
  if (B >= 8) B -= B % 8;
  if (B < 1) B = 1;
  if (B > Lk) B = Lk;
  if (tpk_ceildiv(Lk, B) > INT32_MAX) { /* grid bounds are i32 */
    free(rows.ops);
    return true;
  }
  const TpkDim *Bd = tpk_dim_const(m, B);

  TpkBuilder b = {.m = m, .block = f->body, .loc = first->loc};
  const TpkType *i32 = tpk_type_scalar(m, TPK_I32);
  TpkOp *lo = tpk_build(&b, TPK_OP_CONST, 0, NULL, 1, &i32);
  TpkOp *hi = tpk_build(&b, TPK_OP_CONST, 0, NULL, 1, &i32);
  if (!lo || !hi) goto oom;
  tpk_op_set_int(m, lo, "value", 0);
  tpk_op_set_int(m, hi, "value", tpk_ceildiv(Lk, B));
  TpkValue *bounds[2] = {&lo->out[0], &hi->out[0]};
  TpkOp *grid = tpk_build(&b, TPK_OP_GRID, 2, bounds, 0, NULL);
  if (!grid) goto oom;
  TpkValue *tile = tpk_block_add_arg(m, grid->regions[0], tpk_type_tile(m, B), "rows");
  if (!tile) goto oom;
  /* The grid goes where the last row op was: every invariant op the rows
   * use comes before some row op, hence before it. */
  TpkOp *anchor = rows.ops[rows.n - 1];
  move_before(lo, anchor);
  move_before(hi, anchor);
  move_before(grid, anchor);

  Map map = {0};
  TpkBuilder in = {.m = m, .block = grid->regions[0]};
  for (int k = 0; k < rows.n; k++) {
    TpkOp *op = rows.ops[k];
    in.loc = op->loc;
    bool mem = op->opcode == TPK_OP_LOAD || op->opcode == TPK_OP_STORE;
    bool rows_ref = mem && op->in[0]->type->rank > 0 && op->in[0]->type->dims[0] == L;
    TpkValue *ins[TPK_MAX_RANK + 3];
    int nin = 0;
    ins[nin++] = mapped(&map, op->in[0]);
    if (rows_ref) ins[nin++] = tile;
    for (int i = 1; i < op->nin; i++) ins[nin++] = mapped(&map, op->in[i]);
    const TpkType *types[4];
    for (int i = 0; i < op->nout && i < 4; i++) types[i] = with_rows(m, op->out[i].type, L, Bd);
    TpkOp *c = tpk_build(&in, op->opcode, op->nin ? nin : 0, ins, op->nout, types);
    if (!c) goto oom_map;
    c->attrs = tpk_arena_alloc(&m->arena, (size_t)(op->nattr ? op->nattr : 1) * sizeof *c->attrs);
    if (!c->attrs) goto oom_map;
    if (op->nattr) memcpy(c->attrs, op->attrs, (size_t)op->nattr * sizeof *c->attrs);
    c->nattr = op->nattr;
    if (rows_ref) {
      TpkIndexPattern rows_index = *tpk_op_index(op, "index");
      rows_index.dim[0] = TPK_INDEX_TILE;
      tpk_op_set_index(m, c, "index", &rows_index);
    }
    for (int i = 0; i < op->nout; i++) {
      c->out[i].name = op->out[i].name;
      if (!map_add(&map, &op->out[i], &c->out[i])) goto oom_map;
    }
  }
  for (int k = rows.n - 1; k >= 0; k--) tpk_op_erase(rows.ops[k]);
  free(map.from);
  free(map.to);
  free(rows.ops);
  *changed = true;
  return true;
oom_map:
  free(map.from);
  free(map.to);
oom:
  tpk_ptrmap_free(&row_values);
  tpk_ptrmap_free(&stored);
  free(rows.ops);
  return false;
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
