/*
 * verify.c — the IR's invariants, checked before any pass or backend trusts
 * them: structure (links, counts, attribute signatures from the op table),
 * use lists, the type rule of each op (one checker per opcode in CHECKS
 * below), dominance, and terminators. The first problem is reported as
 *   verify: @func: line L:C: 'op' what is wrong
 *
 * The module is logically const; checking may intern a few dims (shape
 * products and sums) into it, which changes no node anyone can see.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

typedef struct Verifier {
  TpkModule *m;
  TpkError *err;
  const TpkFunc *f;
  const TpkOp *op; /* the op being checked, NULL for function-level checks */
  TpkArena scratch; /* type strings for messages, the scope map */
  TpkPtrMap scope;  /* value -> IN_SCOPE / OUT_OF_SCOPE */
  TpkPtrMap funcs;  /* interned function name -> its function */
  TpkPtrMap listed;  /* TpkUse* found in a use list -> the value of that list */
  int nlisted, noperands; /* per function: use-list entries seen, operands checked */
} Verifier;

static char IN_SCOPE, OUT_OF_SCOPE; /* their addresses tag values in `scope` */

/* The value whose use list holds u, or NULL when no list does. */
static const TpkValue *listed_value(const Verifier *v, const TpkUse *u) {
  void *x = NULL;
  tpk_ptrmap_get(&v->listed, u, &x);
  return x;
}

enum { MAX_DEPTH = 1000 };

static bool fail(Verifier *v, const char *fmt, ...) TPK_PRINTF(2, 3);
static bool fail(Verifier *v, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char where[160] = "";
  const TpkOp *op = v->op;
  if (op && op->loc.line > 0) snprintf(where, sizeof where, "line %d:%d: ", op->loc.line, op->loc.col);
  const TpkOpInfo *info = op ? tpk_op_info(op->opcode) : NULL;
  tpk_error(v->err, TPK_ERR_INVALID, "verify: @%s: %s%s%s%s%s", v->f && v->f->name ? v->f->name : "?", where,
            info ? "'" : "", info ? info->name : "", info ? "' " : "", msg);
  return false;
}

/* A type as text, for messages (lives until the verifier ends). */
static const char *ty(Verifier *v, const TpkType *t) {
  TpkStr s = {0};
  tpk_type_print(&s, t);
  const char *r = s.data ? tpk_arena_strdup(&v->scratch, s.data) : NULL;
  tpk_str_free(&s);
  return r ? r : "?";
}

static const char *shape_str(Verifier *v, int rank, const TpkDim *const *dims) {
  TpkStr s = {0};
  tpk_shape_print(&s, rank, dims);
  const char *r = s.data ? tpk_arena_strdup(&v->scratch, s.data) : NULL;
  tpk_str_free(&s);
  return r ? r : "?";
}

static const char *dim_str(Verifier *v, const TpkDim *d) {
  TpkStr s = {0};
  tpk_dim_print(&s, d);
  const char *r = s.data ? tpk_arena_strdup(&v->scratch, s.data) : NULL;
  tpk_str_free(&s);
  return r ? r : "?";
}

/* ---- Small predicates ------------------------------------------------------ */

static bool is_tensor(const TpkType *t) { return t && t->kind == TPK_TYPE_TENSOR; }
static bool is_i32_scalar(const TpkType *t) { return tpk_type_is_scalar(t) && t->dtype == TPK_I32; }
static bool is_int_or_bool(TpkDType d) { return tpk_dtype_is_int(d) || d == TPK_BOOL; }

static bool same_shape(const TpkType *a, const TpkType *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const TpkType *in_type(Verifier *v, int i) { return v->op->in[i]->type; }
static const TpkType *out_type(Verifier *v, int i) { return v->op->out[i].type; }

static bool need_tensor(Verifier *v, int i, const char *what) {
  if (is_tensor(in_type(v, i))) return true;
  return fail(v, "%s must be a tensor, got %s", what, ty(v, in_type(v, i)));
}

static bool need_i32(Verifier *v, int i, const char *what) {
  if (is_i32_scalar(in_type(v, i))) return true;
  return fail(v, "%s must be an i32 scalar, got %s", what, ty(v, in_type(v, i)));
}

static bool expect_result(Verifier *v, int i, const TpkType *want) {
  if (!want) return fail(v, "result type cannot be formed (out of memory or invalid shape)");
  if (out_type(v, i) == want) return true;
  return fail(v, "result type is %s, expected %s", ty(v, out_type(v, i)), ty(v, want));
}

static const TpkType *tensor_like(Verifier *v, TpkDType dt, int rank, const TpkDim *const *dims) {
  return tpk_type_tensor(v->m, dt, rank, dims);
}

/* An INTS attribute as a list of valid, distinct axes of a rank-`rank` value. */
static bool check_axes(Verifier *v, const char *key, int rank, bool sorted, bool *used) {
  const TpkAttr *a = tpk_op_attr(v->op, key);
  for (int i = 0; i < a->n; i++) {
    int64_t x = a->ints[i];
    if (x < 0 || x >= rank) return fail(v, "%s: axis %" PRId64 " is out of range for rank %d", key, x, rank);
    if (used[x]) return fail(v, "%s: axis %" PRId64 " appears twice", key, x);
    if (sorted && i > 0 && a->ints[i - 1] > x) return fail(v, "%s must be sorted", key);
    used[x] = true;
  }
  return true;
}

/* ---- Index patterns -------------------------------------------------------- */

/* Check pattern `key` against `base` (a ref or tensor), with index operands
 * from in[first]. Fills the selected shape; RANGE dims are NULL (their size
 * comes from the other side: the result, the stored value). Returns the
 * number of operands consumed, or -1 after reporting. */
static int check_index(Verifier *v, const char *key, const TpkType *base, int first, const TpkDim **dims,
                       int *rank) {
  const TpkIndexPattern *pat = tpk_op_index(v->op, key);
  if (pat->rank != base->rank) {
    TpkStr text = {0};
    tpk_index_print(&text, pat);
    fail(v, "%s \"%s\" has %d entries but the indexed value %s has rank %d", key, text.data ? text.data : "", pat->rank,
         ty(v, base), base->rank);
    tpk_str_free(&text);
    return -1;
  }
  int k = first;
  *rank = 0;
  for (int i = 0; i < pat->rank; i++) {
    TpkIndexKind c = pat->dim[i];
    if (c == TPK_INDEX_ALL) {
      dims[(*rank)++] = base->dims[i];
      continue;
    }
    if (k >= v->op->nin) {
      TpkStr text = {0};
      tpk_index_print(&text, pat);
      fail(v, "%s \"%s\" needs more index operands than the op has", key, text.data ? text.data : "");
      tpk_str_free(&text);
      return -1;
    }
    const TpkType *t = in_type(v, k);
    switch (c) {
    case TPK_INDEX_TILE:
      if (t->kind != TPK_TYPE_TILE) {
        fail(v, "index operand %d for 't' must be a tile, got %s", k, ty(v, t));
        return -1;
      }
      dims[(*rank)++] = t->block;
      break;
    case TPK_INDEX_SCALAR:
    case TPK_INDEX_RANGE:
      if (!is_i32_scalar(t)) {
        fail(v, "index operand %d for '%c' must be an i32 scalar, got %s", k, c == TPK_INDEX_RANGE ? 'r' : 's', ty(v, t));
        return -1;
      }
      if (c == TPK_INDEX_RANGE) dims[(*rank)++] = NULL;
      break;
    case TPK_INDEX_GATHER:
      if (!is_tensor(t) || t->rank != 1 || t->dtype != TPK_I32) {
        fail(v, "index operand %d for 'g' must be an i32 vector, got %s", k, ty(v, t));
        return -1;
      }
      dims[(*rank)++] = t->dims[0];
      break;
    case TPK_INDEX_ALL:
      break;
    }
    k++;
  }
  return k - first;
}

/* Does `got` (a full shape) fit the selected shape `sel` (NULL: any)? */
static bool fits(int rank, const TpkDim *const *sel, const TpkType *got) {
  if (got->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (sel[i] && sel[i] != got->dims[i]) return false;
  return true;
}

/* ---- Per-op checks --------------------------------------------------------- */

static bool check_const(Verifier *v) {
  const TpkType *t = out_type(v, 0);
  if (!is_tensor(t)) return fail(v, "result must be a tensor, got %s", ty(v, t));
  const TpkAttr *a = tpk_op_attr(v->op, "value");
  if (tpk_dtype_is_float(t->dtype)) {
    if (a->kind != TPK_ATTR_FLOAT) return fail(v, "value of a %s constant must be a float", tpk_dtype_name(t->dtype));
    return true;
  }
  if (a->kind != TPK_ATTR_INT) return fail(v, "value of a %s constant must be an integer", tpk_dtype_name(t->dtype));
  static const int64_t lo[TPK_DTYPE_COUNT] = {[TPK_I32] = INT32_MIN, [TPK_I16] = INT16_MIN, [TPK_I8] = INT8_MIN};
  static const int64_t hi[TPK_DTYPE_COUNT] = {
      [TPK_I32] = INT32_MAX, [TPK_I16] = INT16_MAX, [TPK_I8] = INT8_MAX, [TPK_U8] = UINT8_MAX, [TPK_BOOL] = 1,
      [TPK_U32] = UINT32_MAX, [TPK_U16] = UINT16_MAX};
  if (a->i < lo[t->dtype] || a->i > hi[t->dtype])
    return fail(v, "value %" PRId64 " does not fit %s", a->i, tpk_dtype_name(t->dtype));
  return true;
}

static bool check_sym(Verifier *v) {
  if (!*tpk_op_str(v->op, "name", "")) return fail(v, "name must not be empty");
  return expect_result(v, 0, tpk_type_scalar(v->m, TPK_I32));
}

static bool check_program(Verifier *v) {
  int64_t axis = tpk_op_int(v->op, "axis", -1);
  if (axis < 0 || axis >= TPK_MAX_RANK) return fail(v, "axis %" PRId64 " is out of range", axis);
  return expect_result(v, 0, tpk_type_scalar(v->m, TPK_I32));
}

static bool check_tile_of(Verifier *v) {
  const TpkType *id = in_type(v, 0), *r = out_type(v, 0);
  if (id != tpk_type_scalar(v->m, TPK_I32)) return fail(v, "operand must be an i32 scalar, got %s", ty(v, id));
  if (r->kind != TPK_TYPE_TILE) return fail(v, "result must be a tile, got %s", ty(v, r));
  return true;
}

static bool check_tile_query(Verifier *v) {
  if (in_type(v, 0)->kind != TPK_TYPE_TILE) return fail(v, "operand must be a tile, got %s", ty(v, in_type(v, 0)));
  return expect_result(v, 0, tpk_type_scalar(v->m, TPK_I32));
}

/* Every op flagged ELEMENTWISE: one operand type, result the same (bool for
 * comparisons). */
static bool check_elementwise(Verifier *v) {
  const TpkOpInfo *info = tpk_op_info(v->op->opcode);
  const TpkType *t = in_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  for (int i = 1; i < v->op->nin; i++)
    if (in_type(v, i) != t) return fail(v, "operands have different types %s and %s", ty(v, t), ty(v, in_type(v, i)));
  if ((info->flags & TPK_OPF_FLOAT_ONLY) && !tpk_dtype_is_float(t->dtype))
    return fail(v, "needs float operands, got %s", ty(v, t));
  if ((info->flags & TPK_OPF_INT_ONLY) && !is_int_or_bool(t->dtype))
    return fail(v, "needs integer or bool operands, got %s", ty(v, t));
  return expect_result(v, 0, (info->flags & TPK_OPF_COMPARE) ? tpk_type_with_dtype(v->m, t, TPK_BOOL) : t);
}

static bool check_convert(Verifier *v) {
  if (!need_tensor(v, 0, "operand")) return false;
  const TpkType *r = out_type(v, 0);
  if (!is_tensor(r) || !same_shape(in_type(v, 0), r))
    return fail(v, "result %s must have the shape of the operand %s", ty(v, r), ty(v, in_type(v, 0)));
  return true;
}

/* Same shape, another dtype of the same width; bool has one bit of meaning
 * in its byte, so it is neither side. */
static bool check_bitcast(Verifier *v) {
  if (!need_tensor(v, 0, "operand")) return false;
  const TpkType *x = in_type(v, 0), *r = out_type(v, 0);
  if (!is_tensor(r) || !same_shape(x, r))
    return fail(v, "result %s must have the shape of the operand %s", ty(v, r), ty(v, x));
  if (x->dtype == TPK_BOOL || r->dtype == TPK_BOOL || tpk_dtype_size(x->dtype) != tpk_dtype_size(r->dtype))
    return fail(v, "needs two non-bool dtypes of one width, got %s and %s", tpk_dtype_name(x->dtype),
                tpk_dtype_name(r->dtype));
  return true;
}

static bool check_select(Verifier *v) {
  const TpkType *c = in_type(v, 0), *a = in_type(v, 1), *b = in_type(v, 2);
  if (!need_tensor(v, 0, "condition") || !need_tensor(v, 1, "operand") || !need_tensor(v, 2, "operand")) return false;
  if (c->dtype != TPK_BOOL) return fail(v, "condition must be bool, got %s", ty(v, c));
  if (a != b) return fail(v, "operands have different types %s and %s", ty(v, a), ty(v, b));
  if (!same_shape(c, a)) return fail(v, "condition %s and operands %s differ in shape", ty(v, c), ty(v, a));
  return expect_result(v, 0, a);
}

static bool check_broadcast(Verifier *v) {
  const TpkType *x = in_type(v, 0), *r = out_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  if (!is_tensor(r) || r->dtype != x->dtype) return fail(v, "result %s must be a %s tensor", ty(v, r), tpk_dtype_name(x->dtype));
  if (r->rank < x->rank) return fail(v, "cannot broadcast %s to lower rank %s", ty(v, x), ty(v, r));
  int off = r->rank - x->rank;
  int64_t one;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != r->dims[off + i] && !(tpk_dim_is_const(x->dims[i], &one) && one == 1))
      return fail(v, "cannot broadcast %s to %s: dim %d is %s, not 1 or %s", ty(v, x), ty(v, r), i,
                  dim_str(v, x->dims[i]), dim_str(v, r->dims[off + i]));
  return true;
}

static const TpkDim *product(Verifier *v, const TpkType *t) {
  const TpkDim *p = tpk_dim_const(v->m, 1);
  for (int i = 0; i < t->rank; i++) p = tpk_dim_binary(v->m, TPK_DIM_MUL, p, t->dims[i]);
  return p;
}

/* Element counts must be equal as canonical dims: products are flattened and
 * sorted, so [B*H, S] -> [B, H, S] passes; [N] -> [M] does not. */
static bool check_reshape(Verifier *v) {
  const TpkType *x = in_type(v, 0), *r = out_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  if (!is_tensor(r) || r->dtype != x->dtype) return fail(v, "result %s must be a %s tensor", ty(v, r), tpk_dtype_name(x->dtype));
  const TpkDim *a = product(v, x), *b = product(v, r);
  if (!tpk_dims_equal_when_tuned(v->m, v->f->tunes, v->f->ntunes, a, b, NULL, 0))
    return fail(v, "element counts differ: %s has %s, %s has %s", ty(v, x), dim_str(v, a), ty(v, r), dim_str(v, b));
  return true;
}

static bool check_transpose(Verifier *v) {
  const TpkType *x = in_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  const TpkAttr *perm = tpk_op_attr(v->op, "perm");
  if (perm->n != x->rank) return fail(v, "perm has %d entries for rank %d", perm->n, x->rank);
  bool used[TPK_MAX_RANK] = {0};
  if (!check_axes(v, "perm", x->rank, false, used)) return false;
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = x->dims[perm->ints[i]];
  return expect_result(v, 0, tensor_like(v, x->dtype, x->rank, dims));
}

static bool check_slice(Verifier *v) {
  const TpkDim *sel[TPK_MAX_RANK];
  int rank;
  if (!need_tensor(v, 0, "operand")) return false;
  int n = check_index(v, "index", in_type(v, 0), 1, sel, &rank);
  if (n < 0) return false;
  if (1 + n != v->op->nin) return fail(v, "has %d operands, the index needs %d", v->op->nin, 1 + n);
  const TpkType *r = out_type(v, 0);
  if (!is_tensor(r) || r->dtype != in_type(v, 0)->dtype || !fits(rank, sel, r))
    return fail(v, "result %s does not match the selected %s%s", ty(v, r), tpk_dtype_name(in_type(v, 0)->dtype),
                shape_str(v, rank, sel));
  return true;
}

static bool check_concat(Verifier *v) {
  const TpkType *x = in_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  int64_t axis = tpk_op_int(v->op, "axis", -1);
  if (axis < 0 || axis >= x->rank) return fail(v, "axis %" PRId64 " is out of range for %s", axis, ty(v, x));
  const TpkDim *sum = x->dims[axis];
  for (int i = 1; i < v->op->nin; i++) {
    const TpkType *y = in_type(v, i);
    if (!is_tensor(y) || y->dtype != x->dtype || y->rank != x->rank)
      return fail(v, "operand %d %s does not match %s", i, ty(v, y), ty(v, x));
    for (int d = 0; d < x->rank; d++)
      if (d != axis && y->dims[d] != x->dims[d])
        return fail(v, "operand %d %s differs from %s outside axis %" PRId64, i, ty(v, y), ty(v, x), axis);
    sum = tpk_dim_binary(v->m, TPK_DIM_ADD, sum, y->dims[axis]);
  }
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = sum;
  return expect_result(v, 0, sum ? tensor_like(v, x->dtype, x->rank, dims) : NULL);
}

static bool check_iota(Verifier *v) {
  const TpkType *r = out_type(v, 0);
  if (!is_tensor(r) || r->rank == 0 || r->dtype == TPK_BOOL)
    return fail(v, "result must be a numeric tensor of rank >= 1, got %s", ty(v, r));
  int64_t axis = tpk_op_int(v->op, "axis", -1);
  if (axis < 0 || axis >= r->rank) return fail(v, "axis %" PRId64 " is out of range for %s", axis, ty(v, r));
  return true;
}

static bool check_reduce(Verifier *v) {
  const TpkType *x = in_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  if (tpk_op_reduce_kind(v->op) == TPK_REDUCE_MEAN && !tpk_dtype_is_float(x->dtype))
    return fail(v, "mean needs a float operand, got %s", ty(v, x));
  bool used[TPK_MAX_RANK] = {0};
  if (tpk_op_attr(v->op, "axes")->n == 0) return fail(v, "axes must not be empty");
  if (!check_axes(v, "axes", x->rank, true, used)) return false;
  bool keep = tpk_op_int(v->op, "keepdims", 0) != 0;
  const TpkDim *dims[TPK_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (!used[i])
      dims[rank++] = x->dims[i];
    else if (keep)
      dims[rank++] = tpk_dim_const(v->m, 1);
  return expect_result(v, 0, tensor_like(v, x->dtype, rank, dims));
}

/* An inclusive scan keeps its operand's type; mean is not a scan. */
static bool check_scan(Verifier *v) {
  const TpkType *x = in_type(v, 0);
  if (!need_tensor(v, 0, "operand")) return false;
  if (x->rank == 0) return fail(v, "operand must have rank >= 1, got %s", ty(v, x));
  if (x->dtype == TPK_BOOL) return fail(v, "operand must be numeric, got %s", ty(v, x));
  TpkReduceKind k = tpk_op_reduce_kind(v->op);
  if (k == TPK_REDUCE_MEAN) return fail(v, "kind must be sum, max, min or prod, got mean");
  int64_t axis = tpk_op_int(v->op, "axis", -1);
  if (axis < 0 || axis >= x->rank) return fail(v, "axis %" PRId64 " is out of range for %s", axis, ty(v, x));
  return expect_result(v, 0, x);
}

static bool check_dot(Verifier *v) {
  const TpkType *a = in_type(v, 0), *b = in_type(v, 1);
  if (v->op->nin == 3 && in_type(v, 2) != out_type(v, 0)) /* an accumulator (lowering's decision) */
    return fail(v, "accumulator has type %s, the result %s", ty(v, in_type(v, 2)), ty(v, out_type(v, 0)));
  if (!need_tensor(v, 0, "lhs") || !need_tensor(v, 1, "rhs")) return false;
  if (a->dtype != b->dtype) return fail(v, "operands have different dtypes %s and %s", ty(v, a), ty(v, b));
  if (a->dtype == TPK_BOOL) return fail(v, "operands must be numeric, got %s", ty(v, a));
  const TpkAttr *lc = tpk_op_attr(v->op, "lhs_contract"), *rc = tpk_op_attr(v->op, "rhs_contract");
  const TpkAttr *lb = tpk_op_attr(v->op, "lhs_batch"), *rb = tpk_op_attr(v->op, "rhs_batch");
  if (lc->n != rc->n) return fail(v, "lhs_contract and rhs_contract differ in length");
  if (lb->n != rb->n) return fail(v, "lhs_batch and rhs_batch differ in length");
  bool lused[TPK_MAX_RANK] = {0}, rused[TPK_MAX_RANK] = {0};
  if (!check_axes(v, "lhs_contract", a->rank, false, lused) || !check_axes(v, "lhs_batch", a->rank, false, lused) ||
      !check_axes(v, "rhs_contract", b->rank, false, rused) || !check_axes(v, "rhs_batch", b->rank, false, rused))
    return false;
  for (int i = 0; i < lc->n; i++)
    if (a->dims[lc->ints[i]] != b->dims[rc->ints[i]])
      return fail(v, "contracted dims differ: %s x %s (%s vs %s)", ty(v, a), ty(v, b), dim_str(v, a->dims[lc->ints[i]]),
                  dim_str(v, b->dims[rc->ints[i]]));
  for (int i = 0; i < lb->n; i++)
    if (a->dims[lb->ints[i]] != b->dims[rb->ints[i]])
      return fail(v, "batch dims differ: %s x %s", ty(v, a), ty(v, b));
  const TpkDim *dims[3 * TPK_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < lb->n; i++) dims[rank++] = a->dims[lb->ints[i]];
  for (int i = 0; i < a->rank; i++)
    if (!lused[i]) dims[rank++] = a->dims[i];
  for (int i = 0; i < b->rank; i++)
    if (!rused[i]) dims[rank++] = b->dims[i];
  if (rank > TPK_MAX_RANK) return fail(v, "result rank %d exceeds %d", rank, TPK_MAX_RANK);
  return expect_result(v, 0, tensor_like(v, tpk_dtype_is_float(a->dtype) ? TPK_F32 : TPK_I32, rank, dims));
}

/* numpy take along `axis`: table.shape[:axis] + ids.shape + table.shape[axis+1:] */
static bool take_shape(Verifier *v, const TpkType *table, const TpkType *ids, const TpkDim **dims, int *rank) {
  int64_t axis = tpk_op_int(v->op, "axis", -1);
  if (axis < 0 || axis >= table->rank) return fail(v, "axis %" PRId64 " is out of range for %s", axis, ty(v, table));
  if (!is_tensor(ids) || !tpk_dtype_is_int(ids->dtype)) return fail(v, "indices must be an integer tensor, got %s", ty(v, ids));
  *rank = 0;
  if (table->rank - 1 + ids->rank > TPK_MAX_RANK) return fail(v, "result rank exceeds %d", TPK_MAX_RANK);
  for (int i = 0; i < axis; i++) dims[(*rank)++] = table->dims[i];
  for (int i = 0; i < ids->rank; i++) dims[(*rank)++] = ids->dims[i];
  for (int i = (int)axis + 1; i < table->rank; i++) dims[(*rank)++] = table->dims[i];
  return true;
}

static bool check_gather(Verifier *v) {
  const TpkDim *dims[TPK_MAX_RANK];
  int rank;
  if (!need_tensor(v, 0, "table") || !take_shape(v, in_type(v, 0), in_type(v, 1), dims, &rank)) return false;
  return expect_result(v, 0, tensor_like(v, in_type(v, 0)->dtype, rank, dims));
}

static bool check_scatter(Verifier *v) {
  const TpkDim *dims[TPK_MAX_RANK];
  int rank;
  const TpkType *base = in_type(v, 0), *upd = in_type(v, 2);
  if (!need_tensor(v, 0, "base") || !take_shape(v, base, in_type(v, 1), dims, &rank)) return false;
  const TpkType *want = tensor_like(v, base->dtype, rank, dims);
  if (upd != want) return fail(v, "updates are %s, expected %s", ty(v, upd), ty(v, want));
  return expect_result(v, 0, base);
}

static bool check_load(Verifier *v) {
  const TpkType *ref = in_type(v, 0), *r = out_type(v, 0);
  if (ref->kind != TPK_TYPE_REF) return fail(v, "operand 0 must be a ref, got %s", ty(v, ref));
  const TpkDim *sel[TPK_MAX_RANK];
  int rank;
  int n = check_index(v, "index", ref, 1, sel, &rank);
  if (n < 0) return false;
  if (1 + n != v->op->nin) return fail(v, "has %d operands, the index needs %d", v->op->nin, 1 + n);
  if (!is_tensor(r) || r->dtype != ref->dtype || !fits(rank, sel, r))
    return fail(v, "result %s does not match the selected %s%s", ty(v, r), tpk_dtype_name(ref->dtype),
                shape_str(v, rank, sel));
  const TpkAttr *other = tpk_op_attr(v->op, "other");
  if (other && other->kind == TPK_ATTR_FLOAT && !tpk_dtype_is_float(ref->dtype))
    return fail(v, "other is a float but the ref holds %s", tpk_dtype_name(ref->dtype));
  return true;
}

/* A store target: scratch, or a kernel parameter the kernel may write. */
static bool writable(Verifier *v, const TpkValue *ref, const char *what) {
  if (ref->def || !ref->block || ref->block != v->f->body || ref->index >= v->f->nparams) return true;
  if (v->f->params[ref->index].role == TPK_PARAM_IN)
    return fail(v, "%s parameter %%%s is read-only (not out or inout)", what,
                v->f->params[ref->index].name ? v->f->params[ref->index].name : "?");
  return true;
}

static bool check_store(Verifier *v) {
  const TpkOp *op = v->op;
  const TpkType *ref = in_type(v, 0), *val = in_type(v, op->nin - 1);
  if (ref->kind != TPK_TYPE_REF) return fail(v, "operand 0 must be a ref, got %s", ty(v, ref));
  const TpkDim *sel[TPK_MAX_RANK];
  int rank;
  int n = check_index(v, "index", ref, 1, sel, &rank);
  if (n < 0) return false;
  if (2 + n != op->nin) return fail(v, "has %d operands, the index needs %d plus the value", op->nin, 1 + n);
  if (!is_tensor(val) || val->dtype != ref->dtype || !fits(rank, sel, val))
    return fail(v, "value %s does not match the selected %s%s", ty(v, val), tpk_dtype_name(ref->dtype),
                shape_str(v, rank, sel));
  return writable(v, op->in[0], "stored-to");
}

/* A store's operands; the result is the old block (the value's type). */
static bool check_atomic(Verifier *v) {
  TpkReduceKind k = tpk_op_reduce_kind(v->op);
  if (k != TPK_REDUCE_SUM && k != TPK_REDUCE_MAX && k != TPK_REDUCE_MIN)
    return fail(v, "kind must be sum, max or min, got %s", tpk_enum_name(TPK_ENUM_REDUCE_KIND, (int)k));
  if (in_type(v, v->op->nin - 1)->dtype == TPK_BOOL) return fail(v, "operands must be numeric, got bool");
  if (!check_store(v)) return false;
  return expect_result(v, 0, in_type(v, v->op->nin - 1));
}

static bool check_alloc(Verifier *v) {
  const TpkType *r = out_type(v, 0);
  if (!r || r->kind != TPK_TYPE_REF || r->space == TPK_MEM_HBM)
    return fail(v, "result must be a vmem or smem ref, got %s", ty(v, r));
  return true;
}

static bool check_dma_start(Verifier *v) {
  const TpkOp *op = v->op;
  const TpkType *src = in_type(v, 0);
  if (src->kind != TPK_TYPE_REF) return fail(v, "source must be a ref, got %s", ty(v, src));
  const TpkDim *s[TPK_MAX_RANK], *d[TPK_MAX_RANK];
  int srank, drank;
  int ns = check_index(v, "src_index", src, 1, s, &srank);
  if (ns < 0) return false;
  int di = 1 + ns;
  if (di >= op->nin) return fail(v, "has no destination ref after %d source operands", di);
  const TpkType *dst = in_type(v, di);
  if (dst->kind != TPK_TYPE_REF) return fail(v, "destination (operand %d) must be a ref, got %s", di, ty(v, dst));
  int nd = check_index(v, "dst_index", dst, di + 1, d, &drank);
  if (nd < 0) return false;
  int end = di + 1 + nd;
  if (end + 1 == op->nin) { /* the length: entries of the block's first axis copied */
    const TpkType *lt = in_type(v, end);
    if (lt->kind != TPK_TYPE_TENSOR || lt->rank != 0 || lt->dtype != TPK_I32)
      return fail(v, "length (operand %d) must be an i32 scalar, got %s", end, ty(v, lt));
    if (srank == 0) return fail(v, "has a length but copies a single element");
  } else if (end != op->nin) {
    return fail(v, "has %d operands, the indices need %d (and an optional length)", op->nin, end);
  }
  if ((src->space == TPK_MEM_HBM) == (dst->space == TPK_MEM_HBM))
    return fail(v, "copies %s to %s: exactly one side must be in hbm", ty(v, src), ty(v, dst));
  if (src->dtype != dst->dtype) return fail(v, "copies %s to %s: dtypes differ", ty(v, src), ty(v, dst));
  bool ok = srank == drank;
  for (int i = 0; ok && i < srank; i++) ok = !s[i] || !d[i] || s[i] == d[i];
  for (int i = 0; ok && i < srank; i++)
    if (!s[i] && !d[i]) return fail(v, "dim %d is 'r' on both sides, so its size is unknown", i);
  if (!ok)
    return fail(v, "source block %s and destination block %s differ", shape_str(v, srank, s), shape_str(v, drank, d));
  if (!writable(v, op->in[di], "destination")) return false;
  return expect_result(v, 0, tpk_type_dma(v->m));
}

static bool check_dma_wait(Verifier *v) {
  if (in_type(v, 0)->kind != TPK_TYPE_DMA) return fail(v, "operand must be a dma handle, got %s", ty(v, in_type(v, 0)));
  return true;
}

/* Operand k is a semaphore array: ref<i32[N], smem>. */
static bool need_semaphores(Verifier *v, int k) {
  const TpkType *t = in_type(v, k);
  if (t->kind != TPK_TYPE_REF || t->space != TPK_MEM_SMEM || t->dtype != TPK_I32 || t->rank != 1)
    return fail(v, "operand %d must be semaphores, ref<i32[N], smem>; got %s", k, ty(v, t));
  return true;
}

static bool check_dma_signal(Verifier *v) {
  if (in_type(v, 0)->kind != TPK_TYPE_DMA) return fail(v, "operand 0 must be a dma handle, got %s", ty(v, in_type(v, 0)));
  return need_semaphores(v, 1) && need_i32(v, 2, "semaphore index");
}

static bool check_dma_wait_sem(Verifier *v) {
  return need_semaphores(v, 0) && need_i32(v, 1, "semaphore index") && (v->op->nin < 3 || need_i32(v, 2, "byte count"));
}

static bool is_loop_index(const TpkType *t) { return is_i32_scalar(t) || (t && t->kind == TPK_TYPE_TILE); }

/* A region that must hand `n` values to its owner ends with a yield; the
 * yield's own check compares the types. */
static bool check_ends_with_yield(Verifier *v, const TpkBlock *b, int n, const char *which) {
  const TpkOp *last = b->last;
  if (n > 0 && (!last || last->opcode != TPK_OP_YIELD))
    return fail(v, "%s must end with a yield of %d value%s", which, n, n == 1 ? "" : "s");
  return true;
}

static bool check_grid(Verifier *v) {
  const TpkOp *op = v->op;
  if (!v->f->is_kernel) return fail(v, "is only allowed in a kernel");
  if (op->parent != v->f->body) return fail(v, "must be at the top level of the kernel body, not nested");
  if (op->nin % 2) return fail(v, "operands must be (lo, hi) pairs, got %d", op->nin);
  for (int i = 0; i < op->nin; i++)
    if (!need_i32(v, i, i % 2 ? "upper bound" : "lower bound")) return false;
  const TpkBlock *b = op->regions[0];
  if (b->nargs != op->nin / 2) return fail(v, "region has %d arguments for %d axes", b->nargs, op->nin / 2);
  for (int i = 0; i < b->nargs; i++)
    if (!is_loop_index(b->args[i]->type))
      return fail(v, "axis %d argument must be i32 or a tile, got %s", i, ty(v, b->args[i]->type));
  return true;
}

static bool check_for(Verifier *v) {
  const TpkOp *op = v->op;
  if (!need_i32(v, 0, "lower bound") || !need_i32(v, 1, "upper bound")) return false;
  int n = op->nin - 2;
  if (op->nout != n) return fail(v, "has %d results for %d loop-carried values", op->nout, n);
  const TpkBlock *b = op->regions[0];
  if (b->nargs != n + 1) return fail(v, "region has %d arguments, expected the index and %d carried values", b->nargs, n);
  if (!is_loop_index(b->args[0]->type)) return fail(v, "index must be i32 or a tile, got %s", ty(v, b->args[0]->type));
  for (int i = 0; i < n; i++) {
    const TpkType *t = in_type(v, 2 + i);
    if (b->args[1 + i]->type != t)
      return fail(v, "carried value %d is %s but its region argument is %s", i, ty(v, t), ty(v, b->args[1 + i]->type));
    if (out_type(v, i) != t) return fail(v, "carried value %d is %s but result %d is %s", i, ty(v, t), i, ty(v, out_type(v, i)));
  }
  return check_ends_with_yield(v, b, n, "body");
}

static bool check_while(Verifier *v) {
  const TpkOp *op = v->op;
  int n = op->nin;
  const TpkType *c = in_type(v, 0);
  if (!tpk_type_is_scalar(c) || c->dtype != TPK_BOOL) return fail(v, "condition must be a bool scalar, got %s", ty(v, c));
  if (op->nout != n) return fail(v, "has %d results for %d carried values (the condition first)", op->nout, n);
  const TpkBlock *b = op->regions[0];
  if (b->nargs != n) return fail(v, "region has %d arguments, expected the condition and %d carried values", b->nargs, n - 1);
  for (int i = 0; i < n; i++) {
    const TpkType *t = in_type(v, i);
    if (b->args[i]->type != t)
      return fail(v, "carried value %d is %s but its region argument is %s", i, ty(v, t), ty(v, b->args[i]->type));
    if (out_type(v, i) != t) return fail(v, "carried value %d is %s but result %d is %s", i, ty(v, t), i, ty(v, out_type(v, i)));
  }
  return check_ends_with_yield(v, b, n, "body");
}

static bool check_if(Verifier *v) {
  const TpkOp *op = v->op;
  if (op->nin != 1) return fail(v, "takes exactly one operand (the condition), got %d", op->nin);
  const TpkType *c = in_type(v, 0);
  if (!tpk_type_is_scalar(c) || c->dtype != TPK_BOOL) return fail(v, "condition must be a bool scalar, got %s", ty(v, c));
  for (int r = 0; r < 2; r++) {
    if (op->regions[r]->nargs) return fail(v, "regions take no arguments");
    if (!check_ends_with_yield(v, op->regions[r], op->nout, r ? "else region" : "then region")) return false;
  }
  return true;
}

static bool check_yield(Verifier *v) {
  const TpkOp *owner = v->op->parent->parent;
  if (!owner || (owner->opcode != TPK_OP_FOR && owner->opcode != TPK_OP_WHILE && owner->opcode != TPK_OP_IF &&
                 owner->opcode != TPK_OP_GRID))
    return fail(v, "must end a for, while, if or grid region");
  int n = owner->opcode == TPK_OP_FOR ? owner->nin - 2 : owner->opcode == TPK_OP_IF || owner->opcode == TPK_OP_WHILE ? owner->nout : 0;
  if (v->op->nin != n) return fail(v, "yields %d values, its %s expects %d", v->op->nin, tpk_op_info(owner->opcode)->name, n);
  for (int i = 0; i < n; i++) {
    const TpkType *want = owner->opcode == TPK_OP_FOR ? owner->in[2 + i]->type : owner->out[i].type;
    if (in_type(v, i) != want)
      return fail(v, "value %d is %s, its %s expects %s", i, ty(v, in_type(v, i)), tpk_op_info(owner->opcode)->name,
                  ty(v, want));
  }
  return true;
}

static bool check_return(Verifier *v) {
  if (v->f->is_kernel) return fail(v, "is not allowed in a kernel (kernels write out parameters)");
  if (v->op->parent != v->f->body) return fail(v, "must be at the top level of the function body");
  if (v->op->nin != v->f->nresults) return fail(v, "returns %d values, the function has %d results", v->op->nin, v->f->nresults);
  for (int i = 0; i < v->op->nin; i++)
    if (in_type(v, i) != v->f->results[i])
      return fail(v, "value %d is %s, the function returns %s", i, ty(v, in_type(v, i)), ty(v, v->f->results[i]));
  return true;
}

/* ---- call: the callee's shape symbols bind to the caller's dims ---- */

enum { MAX_BINDINGS = 64 };
typedef struct Bindings {
  int n;
  const char *sym[MAX_BINDINGS];
  const TpkDim *dim[MAX_BINDINGS];
} Bindings;

static const TpkDim *bound(const Bindings *bs, const char *sym) {
  for (int i = 0; i < bs->n; i++)
    if (bs->sym[i] == sym) return bs->dim[i];
  return NULL;
}

static void bind(Bindings *bs, const TpkType *callee, const TpkType *actual) {
  if (!callee || !actual || callee->rank != actual->rank) return;
  for (int i = 0; i < callee->rank; i++)
    if (callee->dims[i]->kind == TPK_DIM_SYM && !bound(bs, callee->dims[i]->sym) && bs->n < MAX_BINDINGS) {
      bs->sym[bs->n] = callee->dims[i]->sym;
      bs->dim[bs->n++] = actual->dims[i];
    }
}

static const TpkDim *subst(TpkModule *m, const TpkDim *d, const Bindings *bs) {
  if (!d || d->kind == TPK_DIM_CONST) return d;
  if (d->kind == TPK_DIM_SYM) {
    const TpkDim *b = bound(bs, d->sym);
    return b ? b : d;
  }
  return tpk_dim_binary(m, d->kind, subst(m, d->a, bs), subst(m, d->b, bs));
}

/* What the caller passes or receives for a callee type: refs as tensors. */
static const TpkType *call_type(Verifier *v, const TpkType *t, const Bindings *bs) {
  if (!t || (t->kind != TPK_TYPE_TENSOR && t->kind != TPK_TYPE_REF)) return t;
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = subst(v->m, t->dims[i], bs);
  return tpk_type_tensor(v->m, t->dtype, t->rank, dims);
}

static bool check_call(Verifier *v) {
  const TpkOp *op = v->op;
  const char *name = tpk_op_str(op, "callee", "");
  const TpkFunc *g = tpk_module_find(v->m, name);
  if (!g) return fail(v, "callee @%s is not in the module", name);
  /* A kernel is called with its in/inout params and returns its out/inout
   * params, as tensors; a func with its params and results. */
  const TpkType *ins[256], *outs[256];
  int nin = 0, nout = 0;
  for (int i = 0; i < g->nparams && nin < 256 && nout < 256; i++) {
    TpkParamRole role = g->params[i].role;
    const TpkType *t = g->params[i].value->type;
    if (!g->is_kernel || role != TPK_PARAM_OUT) ins[nin++] = t;
    if (g->is_kernel && role != TPK_PARAM_IN) outs[nout++] = t;
  }
  for (int i = 0; !g->is_kernel && i < g->nresults && nout < 256; i++) outs[nout++] = g->results[i];
  if (op->nin != nin || op->nout != nout)
    return fail(v, "@%s takes %d operands and gives %d results; the call has %d and %d", name, nin, nout, op->nin, op->nout);
  Bindings bs = {0};
  for (int i = 0; i < nin; i++) bind(&bs, ins[i], in_type(v, i));
  for (int i = 0; i < nout; i++) bind(&bs, outs[i], out_type(v, i));
  for (int i = 0; i < nin; i++) {
    const TpkType *want = call_type(v, ins[i], &bs);
    if (in_type(v, i) != want) return fail(v, "operand %d is %s, @%s expects %s", i, ty(v, in_type(v, i)), name, ty(v, want));
  }
  for (int i = 0; i < nout; i++) {
    const TpkType *want = call_type(v, outs[i], &bs);
    if (out_type(v, i) != want) return fail(v, "result %d is %s, @%s gives %s", i, ty(v, out_type(v, i)), name, ty(v, want));
  }
  return true;
}

typedef bool (*OpCheck)(Verifier *v);
static const OpCheck CHECKS[TPK_OP_COUNT] = {
    [TPK_OP_CONST] = check_const,         [TPK_OP_SYM] = check_sym,
    [TPK_OP_PROGRAM_ID] = check_program,  [TPK_OP_NUM_PROGRAMS] = check_program,
    [TPK_OP_TILE_ID] = check_tile_query,  [TPK_OP_TILE_START] = check_tile_query,
    [TPK_OP_TILE_OF] = check_tile_of,
    [TPK_OP_CONVERT] = check_convert,     [TPK_OP_SELECT] = check_select,
    [TPK_OP_BITCAST] = check_bitcast,
    [TPK_OP_BROADCAST] = check_broadcast, [TPK_OP_RESHAPE] = check_reshape,
    [TPK_OP_TRANSPOSE] = check_transpose, [TPK_OP_SLICE] = check_slice,
    [TPK_OP_CONCAT] = check_concat,       [TPK_OP_IOTA] = check_iota,
    [TPK_OP_REDUCE] = check_reduce,       [TPK_OP_DOT] = check_dot,
    [TPK_OP_SCAN] = check_scan,           [TPK_OP_ATOMIC] = check_atomic,
    [TPK_OP_GATHER] = check_gather,       [TPK_OP_SCATTER] = check_scatter,
    [TPK_OP_LOAD] = check_load,           [TPK_OP_STORE] = check_store,
    [TPK_OP_ALLOC] = check_alloc,         [TPK_OP_DMA_START] = check_dma_start,
    [TPK_OP_DMA_WAIT] = check_dma_wait,   [TPK_OP_GRID] = check_grid,
    [TPK_OP_DMA_SIGNAL] = check_dma_signal, [TPK_OP_DMA_WAIT_SEM] = check_dma_wait_sem,
    [TPK_OP_FOR] = check_for,             [TPK_OP_IF] = check_if,
    [TPK_OP_WHILE] = check_while,
    [TPK_OP_YIELD] = check_yield,         [TPK_OP_RETURN] = check_return,
    [TPK_OP_CALL] = check_call,
};

/* ---- Use lists -------------------------------------------------------------- */

static const char *value_str(Verifier *v, const TpkValue *x) {
  return x->name ? tpk_arena_printf(&v->scratch, "%%%s", x->name) : "a value";
}

/* The function body op is linked into, through its blocks; NULL for an
 * erased op or one inside an erased op. */
static const TpkBlock *body_of(const TpkOp *op) {
  const TpkBlock *b = op->parent;
  while (b && b->parent) b = b->parent->parent;
  return b && b->func && b->func->body == b ? b : NULL;
}

/* x's use list, when x comes into scope (before any use): every entry is an
 * operand of a live op that holds x, linked both ways, and the list's length
 * is x->nuses. Each operand then checks that it was listed (check_operand),
 * and check_func that nothing else was. A use from another function is that
 * function's error (its operand is out of scope there). */
static bool check_use_list(Verifier *v, const TpkValue *x) {
  int n = 0;
  const TpkUse *prev = NULL;
  for (const TpkUse *u = x->uses; u; prev = u, u = u->next) {
    if (u->prev != prev || tpk_ptrmap_get(&v->listed, u, NULL)) return fail(v, "use list of %s is broken (its links disagree)", value_str(v, x));
    if (++n > x->nuses) return fail(v, "use list of %s is longer than its count %d", value_str(v, x), x->nuses);
    const TpkOp *user = u->user;
    if (!user || u->index < 0 || u->index >= user->nin || &user->uses[u->index] != u || user->in[u->index] != x)
      return fail(v, "use list of %s names an operand that does not use it", value_str(v, x));
    const TpkBlock *body = body_of(user);
    if (!body)
      return fail(v, "use list of %s names a '%s' that is not in a function (erased?)", value_str(v, x),
                  (unsigned)user->opcode < TPK_OP_COUNT ? tpk_op_info(user->opcode)->name : "?");
    if (body != v->f->body) continue;
    if (!tpk_ptrmap_put(&v->listed, u, (void *)x)) return fail(v, "out of memory");
    v->nlisted++;
  }
  if (n != x->nuses) return fail(v, "use list of %s has %d entries but counts %d", value_str(v, x), n, x->nuses);
  return true;
}

/* ---- Lowering decisions ------------------------------------------------------ */

/* Does op compute its result one element at a time, from its operands'
 * elements at the same (or broadcast) coordinates? */
static bool per_element(const TpkOp *op) {
  return (tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE) || op->opcode == TPK_OP_SELECT ||
         op->opcode == TPK_OP_BROADCAST || op->opcode == TPK_OP_CONVERT;
}

/* Uses of x by op and the ops of its regions. */
static int uses_in(const TpkOp *op, const TpkValue *x) {
  int n = 0;
  for (int i = 0; i < op->nin; i++) n += op->in[i] == x;
  for (int r = 0; r < op->nregion; r++)
    for (const TpkOp *o = op->regions[r]->first; o; o = o->next) n += uses_in(o, x);
  return n;
}

/* `fused=true`: the op's result is computed inside the loop of its one
 * user instead of being stored, so the op computes element by element (or
 * is an iota), and that user follows in the same block and computes element
 * by element too, or reduces. */
static bool check_fused(Verifier *v) {
  const TpkOp *op = v->op;
  const TpkAttr *a = tpk_op_attr(op, "fused");
  if (a->kind != TPK_ATTR_BOOL || !a->i) return fail(v, "attribute 'fused' is a mark: true, or absent");
  const TpkValue *r = op->nout == 1 ? &op->out[0] : NULL;
  if (!r || r->type->kind != TPK_TYPE_TENSOR || r->type->rank == 0 || !(per_element(op) || op->opcode == TPK_OP_IOTA))
    return fail(v, "is fused but does not compute a tile element by element");
  const TpkOp *user = NULL;
  int uses = 0;
  for (const TpkOp *o = op->next; o; o = o->next) {
    int n = uses_in(o, r);
    if (n) user = o;
    uses += n;
  }
  if (uses != 1 || !(per_element(user) || user->opcode == TPK_OP_REDUCE))
    return fail(v, "is fused but its result is not used once, by an elementwise op or a reduce of its block");
  return true;
}

/* ---- Generic structure ----------------------------------------------------- */

/* The attributes against the signature "key:kind,?key:kind". */
static bool check_attrs(Verifier *v, const char *sig) {
  const TpkOp *op = v->op;
  int matched = 0;
  while (*sig) {
    bool optional = *sig == '?';
    if (optional) sig++;
    const char *colon = strchr(sig, ':');
    const char *end = strchr(colon, ',');
    if (!end) end = colon + strlen(colon);
    int klen = (int)(colon - sig), tlen = (int)(end - colon - 1);
    const char *kind = colon + 1;
    const TpkAttr *a = NULL;
    for (int i = 0; i < op->nattr && !a; i++)
      if ((int)strlen(op->attrs[i].key) == klen && memcmp(op->attrs[i].key, sig, (size_t)klen) == 0) a = &op->attrs[i];
    if (!a && !optional) return fail(v, "is missing attribute '%.*s'", klen, sig);
    if (a) {
      matched++;
      static const char *const KIND[] = {"int", "float", "bool", "str", "ints", "enum", "index"};
      if ((unsigned)a->kind >= TPK_ARRAY_LEN(KIND)) return fail(v, "attribute '%s' has an invalid kind", a->key);
      const char *got = a->kind == TPK_ATTR_ENUM ? tpk_enum_set_name(a->set) : KIND[a->kind];
      bool ok = (int)strlen(got) == tlen && memcmp(got, kind, (size_t)tlen) == 0;
      if (tlen == 3 && memcmp(kind, "num", 3) == 0) ok = a->kind == TPK_ATTR_INT || a->kind == TPK_ATTR_FLOAT;
      if (!ok) return fail(v, "attribute '%s' must be %.*s, got %s", a->key, tlen, kind, got);
      if (a->kind == TPK_ATTR_STR && !a->s) return fail(v, "attribute '%s' has no string", a->key);
      if (a->kind == TPK_ATTR_INTS && a->n > 0 && !a->ints) return fail(v, "attribute '%s' has no list", a->key);
      if (a->kind == TPK_ATTR_ENUM && (a->i < 0 || a->i > INT32_MAX || !tpk_enum_name(a->set, (int)a->i)))
        return fail(v, "attribute '%s' holds %" PRId64 ", not a %s", a->key, a->i, got);
      if (a->kind == TPK_ATTR_INDEX) {
        if (!a->index || a->index->rank < 0 || a->index->rank > TPK_MAX_RANK)
          return fail(v, "attribute '%s' has no index pattern", a->key);
        for (int d = 0; d < a->index->rank; d++)
          if ((unsigned)a->index->dim[d] > TPK_INDEX_GATHER)
            return fail(v, "attribute '%s' has an invalid entry %d", a->key, (int)a->index->dim[d]);
      }
    }
    sig = *end ? end + 1 : end;
  }
  if (matched != op->nattr)
    for (int i = 0; i < op->nattr; i++) {
      const char *k = op->attrs[i].key, *s = tpk_op_info(op->opcode)->attrs;
      size_t n = strlen(k);
      bool known = false;
      for (const char *p = strstr(s, k); p && !known; p = strstr(p + 1, k))
        known = (p == s || p[-1] == ',' || p[-1] == '?') && p[n] == ':';
      known |= strcmp(k, "fused") == 0; /* a lowering decision, on any op (check_fused) */
      if (!known) return fail(v, "has unknown attribute '%s'", k);
    }
  return true;
}

/* The operand is a live value of this function visible here. */
static bool check_operand(Verifier *v, int i) {
  const TpkValue *x = v->op->in[i];
  if (!x) return fail(v, "operand %d is null", i);
  bool linked = x->def ? x->index >= 0 && x->index < x->def->nout && &x->def->out[x->index] == x
                       : x->block && x->index >= 0 && x->index < x->block->nargs && x->block->args[x->index] == x;
  if (!linked) return fail(v, "operand %d is not a live value (a copy?)", i);
  void *state = NULL;
  tpk_ptrmap_get(&v->scope, x, &state);
  if (state != &IN_SCOPE)
    return fail(v, "operand %d%s%s is used %s", i, x->name ? " %" : "", x->name ? x->name : "",
                state == &OUT_OF_SCOPE ? "outside the region that defines it" : "before its definition or in another function");
  if (!x->type) return fail(v, "operand %d has no type", i);
  const TpkUse *u = &v->op->uses[i];
  if (u->user != v->op || u->index != i || listed_value(v, u) != x)
    return fail(v, "operand %d is missing from the use list of %s", i, value_str(v, x));
  v->noperands++;
  return true;
}

static bool set_scope(Verifier *v, const TpkValue *x, char *state) {
  if (tpk_ptrmap_put(&v->scope, x, state)) return true;
  tpk_error(v->err, TPK_ERR_NOMEM, "verify: out of memory");
  return false;
}

static bool check_block(Verifier *v, const TpkBlock *b, int depth);

static bool check_op(Verifier *v, const TpkOp *op, const TpkBlock *b, int depth) {
  v->op = op;
  if ((unsigned)op->opcode >= TPK_OP_COUNT) {
    v->op = NULL;
    return fail(v, "op with invalid opcode %d", (int)op->opcode);
  }
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  if (op->parent != b) return fail(v, "is linked into a block it does not name as parent");
  if (op->nin < info->min_in || (info->max_in >= 0 && op->nin > info->max_in)) {
    if (info->min_in == info->max_in)
      return fail(v, "takes %d operand%s, got %d", info->min_in, info->min_in == 1 ? "" : "s", op->nin);
    return fail(v, "takes at least %d operands, got %d", info->min_in, op->nin);
  }
  if (info->nout >= 0 && op->nout != info->nout) return fail(v, "has %d results, expected %d", op->nout, info->nout);
  if (op->nregion != info->nregion) return fail(v, "has %d regions, expected %d", op->nregion, info->nregion);
  for (int i = 0; i < op->nin; i++)
    if (!check_operand(v, i)) return false;
  for (int i = 0; i < op->nout; i++) {
    if (!op->out[i].type) return fail(v, "result %d has no type", i);
    if (op->out[i].def != op || op->out[i].index != i) return fail(v, "result %d is not linked to its op", i);
  }
  if ((info->flags & TPK_OPF_TERMINATOR) && op->next) return fail(v, "must be the last op of its block");
  if (!check_attrs(v, info->attrs)) return false;
  if ((info->flags & TPK_OPF_ELEMENTWISE) && !check_elementwise(v)) return false;
  if (CHECKS[op->opcode] && !CHECKS[op->opcode](v)) return false;
  for (int i = 0; i < op->nout; i++)
    if (!check_use_list(v, &op->out[i])) return false;
  if (tpk_op_attr(op, "fused") && !check_fused(v)) return false;
  /* results are visible after the op, not inside its own regions */
  for (int r = 0; r < op->nregion; r++) {
    const TpkBlock *rb = op->regions[r];
    v->op = op;
    if (!rb) return fail(v, "region %d is missing", r);
    if (rb->parent != op) return fail(v, "region %d does not name the op as its parent", r);
    if (!check_block(v, rb, depth + 1)) return false;
  }
  for (int i = 0; i < op->nout; i++)
    if (!set_scope(v, &op->out[i], &IN_SCOPE)) return false;
  return true;
}

static bool check_block(Verifier *v, const TpkBlock *b, int depth) {
  if (depth > MAX_DEPTH) return fail(v, "regions are nested more than %d deep", MAX_DEPTH);
  for (int i = 0; i < b->nargs; i++) {
    if (!b->args[i] || !b->args[i]->type) return fail(v, "region argument %d has no type", i);
    if (b->args[i]->block != b || b->args[i]->index != i || b->args[i]->def)
      return fail(v, "region argument %d is not linked to its block", i);
    if (!check_use_list(v, b->args[i])) return false;
    if (!set_scope(v, b->args[i], &IN_SCOPE)) return false;
  }
  const TpkOp *prev = NULL;
  for (const TpkOp *op = b->first; op; prev = op, op = op->next) {
    if (op->prev != prev) {
      v->op = op;
      return fail(v, "has a broken prev link");
    }
    if (!check_op(v, op, b, depth)) return false;
  }
  if (b->last != prev) {
    v->op = prev;
    return fail(v, "block's last op is not the end of its list");
  }
  /* leaving the region: its values go out of scope */
  for (int i = 0; i < b->nargs; i++)
    if (!set_scope(v, b->args[i], &OUT_OF_SCOPE)) return false;
  for (const TpkOp *op = b->first; op; op = op->next)
    for (int i = 0; i < op->nout; i++)
      if (!set_scope(v, &op->out[i], &OUT_OF_SCOPE)) return false;
  return true;
}

/* ---- Functions ------------------------------------------------------------- */

static bool is_value_type(const TpkType *t) { return is_tensor(t); }

static bool check_params(Verifier *v) {
  const TpkFunc *f = v->f;
  if (!f->body) return fail(v, "has no body");
  if (f->body->nargs != f->nparams || f->body->parent)
    return fail(v, "body has %d arguments for %d parameters", f->body->nargs, f->nparams);
  for (int i = 0; i < f->nparams; i++) {
    const TpkParam *p = &f->params[i];
    const TpkType *t = f->body->args[i]->type;
    const char *name = p->name ? p->name : "?";
    if (p->value != f->body->args[i]) return fail(v, "parameter %d is not body argument %d", i, i);
    for (int j = 0; p->name && j < i; j++)
      if (f->params[j].name == p->name) return fail(v, "parameter %%%s is declared twice", name);
    if (!t) return fail(v, "parameter %%%s has no type", name);
    if ((unsigned)p->role > TPK_PARAM_INOUT) return fail(v, "parameter %%%s has an invalid role", name);
    if (p->zero_init && p->role != TPK_PARAM_OUT) return fail(v, "parameter %%%s: only out parameters start zeroed", name);
    if (p->nsample) {
      if (p->role == TPK_PARAM_OUT || !tpk_dtype_is_int(t->dtype))
        return fail(v, "parameter %%%s: only integer inputs declare the values they take", name);
      if (p->sample_range ? p->nsample != 2 || p->sample[0] >= p->sample[1] : p->nsample < 1)
        return fail(v, "parameter %%%s: an empty distribution of values", name);
    }
    if (f->is_kernel) {
      bool ref = t->kind == TPK_TYPE_REF && t->space == TPK_MEM_HBM;
      if (!ref && !tpk_type_is_scalar(t))
        return fail(v, "kernel parameter %%%s must be an hbm ref or a scalar, got %s", name, ty(v, t));
      if (p->role != TPK_PARAM_IN && !ref) return fail(v, "output parameter %%%s must be a ref, got %s", name, ty(v, t));
    } else {
      if (!is_value_type(t)) return fail(v, "func parameter %%%s must be a tensor, got %s", name, ty(v, t));
      if (p->role != TPK_PARAM_IN) return fail(v, "func parameter %%%s must be an input; funcs return results", name);
    }
  }
  if (f->is_kernel && f->nresults) return fail(v, "a kernel has no results; it writes out parameters");
  for (int i = 0; i < f->nresults; i++)
    if (!is_value_type(f->results[i])) return fail(v, "result %d must be a tensor, got %s", i, ty(v, f->results[i]));
  for (int i = 0; i < f->ntunes; i++) {
    const TpkTune *t = &f->tunes[i];
    if (!t->name) return fail(v, "tunable %d has no name", i);
    for (int j = 0; j < i; j++)
      if (strcmp(f->tunes[j].name, t->name) == 0) return fail(v, "tunable %s is declared twice", t->name);
    if (!tpk_tune_allows(t, t->value)) return fail(v, "tunable %s=%" PRId64 " is not one of its choices", t->name, t->value);
  }
  if (f->backward && !f->is_kernel) return fail(v, "only a kernel names a backward kernel");
  if (f->backward && strcmp(f->backward, f->name) == 0) return fail(v, "a kernel cannot be its own backward kernel");
  for (int i = 0; i < f->nrequires; i++) {
    const TpkRequire *r = &f->requires[i];
    if (!f->is_kernel) return fail(v, "only a kernel has requirements on its sizes");
    if (!tpk_require_cmp_text(r->cmp) || !r->lhs || !r->rhs) return fail(v, "requirement %d is not a comparison of two sizes", i);
  }
  return true;
}

static bool check_func(Verifier *v) {
  const TpkFunc *f = v->f;
  v->op = NULL;
  if (!f->name || !*f->name) return fail(v, "function has no name");
  /* Names are interned by tpk_func_new: equal names are equal pointers. */
  if (tpk_ptrmap_get(&v->funcs, f->name, NULL)) return fail(v, "function is defined twice");
  if (!tpk_ptrmap_put(&v->funcs, f->name, (void *)f)) return fail(v, "out of memory");
  if (!check_params(v) || !check_block(v, f->body, 0)) return false;
  v->op = NULL;
  if (v->nlisted != v->noperands) return fail(v, "use lists name %d uses but the ops have %d operands", v->nlisted, v->noperands);
  if (!f->is_kernel && f->nresults > 0 && (!f->body->last || f->body->last->opcode != TPK_OP_RETURN))
    return fail(v, "body must end with a return of %d value%s", f->nresults, f->nresults == 1 ? "" : "s");
  return true;
}

TpkStatus tpk_ir_verify(const TpkModule *m, TpkError *err) {
  if (!m) return tpk_error(err, TPK_ERR_INVALID, "verify: no module");
  Verifier v = {.m = (TpkModule *)m, .err = err}; /* see the file comment */
  tpk_arena_init(&v.scratch, 0);
  v.scope = (TpkPtrMap){.arena = &v.scratch};
  v.funcs = (TpkPtrMap){.arena = &v.scratch};
  bool ok = true;
  for (int i = 0; ok && i < m->nfuncs; i++) {
    v.f = m->funcs[i];
    v.scope = (TpkPtrMap){.arena = &v.scratch}; /* values never cross functions */
    v.listed = (TpkPtrMap){.arena = &v.scratch};
    v.nlisted = v.noperands = 0;
    ok = check_func(&v);
  }
  tpk_arena_free(&v.scratch);
  if (ok && m->arena.exhausted) return tpk_error(err, TPK_ERR_NOMEM, "verify: the module ran out of memory while built");
  if (!ok && err && err->code == TPK_OK) err->code = TPK_ERR_INVALID;
  return ok ? TPK_OK : (err ? err->code : TPK_ERR_INVALID);
}
