/*
 * simplify.c — constant folding, common subexpression elimination and dead
 * code elimination on one function.
 *
 * Folding covers scalar integer arithmetic and comparisons of constants
 * (tile counts, bounds), which binding shapes produces in quantity, and an
 * i32 constant made f32 where it is exact (a bound tunable used as a
 * number, `BM as f32`). CSE
 * merges pure ops with equal opcode, operands, attributes and result types
 * when the first dominates the second (earlier in the same block or in an
 * enclosing one). DCE removes pure ops whose results are unused, to a fixed
 * point. Loads are not pure (a store may come between), so they stay.
 * Transposes of transposes compose into one, or into nothing when they
 * cancel: AOTAutograd writes a weight's gradient as permute(permute(mm)),
 * and each transpose left in a cluster is a strided copy of a tile. A dot
 * reads through a transpose of its operand where the host's gemm can.
 */
#include "lower/lower.h"

#include <stdlib.h>
#include <string.h>

/* Fold op if all its operands are integer scalar constants; returns the
 * folded value or NULL. Results wrap as the IR's i32 arithmetic does. */
static bool fold_int(const TpkOp *op, int64_t *r) {
  int64_t a, b;
  if (op->nin != 2 || op->nout != 1 || op->out[0].type->rank != 0) return false;
  if (!tpk_value_const_int(op->in[0], &a) || !tpk_value_const_int(op->in[1], &b)) return false;
  TpkDType dt = op->in[0]->type->dtype;
  if (dt != TPK_I32) return false;
  uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
  switch (op->opcode) {
  case TPK_OP_ADD: *r = (int32_t)(ua + ub); return true;
  case TPK_OP_SUB: *r = (int32_t)(ua - ub); return true;
  case TPK_OP_MUL: *r = (int32_t)(ua * ub); return true;
  case TPK_OP_DIV:
    if (b == 0) return false; /* the run-time error must stay */
    *r = b == -1 ? (int32_t)(0u - ua) : a / b;
    return true;
  case TPK_OP_REM:
    if (b == 0) return false;
    *r = b == -1 ? 0 : a % b;
    return true;
  case TPK_OP_CDIV:
    if (b == 0 || b == -1) return false;
    *r = a / b + (a % b != 0 && ((a < 0) == (b < 0)));
    return true;
  case TPK_OP_MAX: *r = a > b ? a : b; return true;
  case TPK_OP_MIN: *r = a < b ? a : b; return true;
  case TPK_OP_EQ: *r = a == b; return true;
  case TPK_OP_NE: *r = a != b; return true;
  case TPK_OP_LT: *r = a < b; return true;
  case TPK_OP_LE: *r = a <= b; return true;
  case TPK_OP_GT: *r = a > b; return true;
  case TPK_OP_GE: *r = a >= b; return true;
  default: return false;
  }
}

/* An i32 scalar constant converted to f32, when every bit survives (|v|
 * <= 2^24): the f32 constant it gives. */
static bool fold_to_float(const TpkOp *op, double *r) {
  int64_t v;
  if (op->opcode != TPK_OP_CONVERT || op->out[0].type->rank != 0 || op->out[0].type->dtype != TPK_F32 ||
      op->in[0]->type->dtype != TPK_I32 || !tpk_value_const_int(op->in[0], &v) || v > (1 << 24) || v < -(1 << 24))
    return false;
  *r = (double)v;
  return true;
}

static void fold_block(TpkFunc *f, TpkBlock *b) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) fold_block(f, op->regions[r]);
    /* the op itself becomes the constant: same result value, no uses to
     * rewrite */
    double x;
    int64_t v;
    if (fold_to_float(op, &x)) tpk_op_make_const_float(f->module, op, x);
    else if (fold_int(op, &v)) tpk_op_make_const_int(f->module, op, v);
  }
}

/* ---- transposes ---------------------------------------------------------------- */

/* transpose(transpose(x, inner), outer) is x with dim d from inner[outer[d]]. */
static void fold_transposes(TpkFunc *f, TpkBlock *b) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) fold_transposes(f, op->regions[r]);
    if (op->opcode != TPK_OP_TRANSPOSE) continue;
    const TpkAttr *outer = tpk_op_attr(op, "perm");
    if (!outer) continue;
    int64_t perm[TPK_MAX_RANK];
    int n = outer->n;
    for (int d = 0; d < n; d++) perm[d] = outer->ints[d];
    TpkValue *src = op->in[0];
    const TpkOp *in = src->def;
    if (in && in->opcode == TPK_OP_TRANSPOSE) {
      const TpkAttr *inner = tpk_op_attr(in, "perm");
      if (!inner || inner->n != n) continue;
      for (int d = 0; d < n; d++) perm[d] = inner->ints[outer->ints[d]];
      src = in->in[0];
    }
    bool identity = true;
    for (int d = 0; d < n; d++) identity &= perm[d] == d;
    if (identity && src->type == op->out[0].type) {
      tpk_func_replace_uses(f, &op->out[0], src); /* the transposes go with DCE */
    } else if (src != op->in[0]) {
      tpk_op_set_operand(op, 0, src);
      tpk_op_set_ints(f->module, op, "perm", n, perm);
    }
  }
}

/* ---- dots through transposes ------------------------------------------------------ */

/* Is x·y in the host gemm's form: one contracting dim, at most one batch
 * dim leading both operands, rank 2 + batch? */
static bool gemm_form(int ra, int rb, int nc, const int64_t *lb, const int64_t *rbat, int nb) {
  if (nc != 1 || nb > 1 || ra != 2 + nb || rb != 2 + nb) return false;
  for (int i = 0; i < nb; i++)
    if (lb[i] != i || rbat[i] != i) return false;
  return true;
}

static const char *const CONTRACT[2] = {"lhs_contract", "rhs_contract"}, *const BATCH[2] = {"lhs_batch", "rhs_batch"};

bool tpk_dot_through_transposes(const TpkOp *dot, const bool fold[2], TpkDotForm *form) {
  const TpkAttr *c0 = tpk_op_attr(dot, CONTRACT[0]), *b0 = tpk_op_attr(dot, BATCH[0]);
  if (dot->opcode != TPK_OP_DOT || !c0) return false;
  int nc = form->ncontract = c0->n, nb = form->nbatch = b0 ? b0->n : 0;
  bool folded = false;
  for (int s = 0; s < 2; s++) {
    const TpkAttr *c = tpk_op_attr(dot, CONTRACT[s]), *b = tpk_op_attr(dot, BATCH[s]);
    if (!c || c->n != nc || (b ? b->n : 0) != nb) return false;
    for (int i = 0; i < nc; i++) form->contract[s][i] = c->ints[i];
    for (int i = 0; i < nb; i++) form->batch[s][i] = b->ints[i];
    form->in[s] = dot->in[s];
    const TpkOp *t = dot->in[s]->def;
    const TpkAttr *perm = t && t->opcode == TPK_OP_TRANSPOSE ? tpk_op_attr(t, "perm") : NULL;
    if (!fold[s] || !perm) continue;
    /* the free dims, read through perm, must keep their order: they are the result's */
    bool ordered = true;
    int64_t last = -1;
    for (int d = 0; d < perm->n && ordered; d++) {
      bool free = true;
      for (int i = 0; i < nc; i++) free &= c->ints[i] != d;
      for (int i = 0; i < nb; i++) free &= b->ints[i] != d;
      if (!free) continue;
      ordered = perm->ints[d] > last;
      last = perm->ints[d];
    }
    if (!ordered) continue;
    for (int i = 0; i < nc; i++) form->contract[s][i] = perm->ints[c->ints[i]];
    for (int i = 0; i < nb; i++) form->batch[s][i] = perm->ints[b->ints[i]];
    form->in[s] = t->in[0];
    folded = true;
  }
  return folded && gemm_form(form->in[0]->type->rank, form->in[1]->type->rank, nc, form->batch[0], form->batch[1], nb);
}

void tpk_dot_set_dims(TpkModule *m, TpkOp *dot, const TpkDotForm *form) {
  for (int s = 0; s < 2; s++) {
    tpk_op_set_ints(m, dot, CONTRACT[s], form->ncontract, form->contract[s]);
    tpk_op_set_ints(m, dot, BATCH[s], form->nbatch, form->batch[s]);
  }
}

/* A dot reading a transpose reads the transpose's input instead, with its
 * contracting and batch dims permuted: the host's gemm reads an operand
 * either way round, where the transpose was a strided copy of a tile (a
 * whole weight, in x @ W^T's backward: AOTAutograd's permute(permute(W))
 * becomes one transpose when the graph is cut into clusters). */
static void fold_dot_transposes(TpkFunc *f, TpkBlock *b) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) fold_dot_transposes(f, op->regions[r]);
    TpkDotForm form;
    if (op->opcode != TPK_OP_DOT || !tpk_dot_through_transposes(op, (const bool[2]){true, true}, &form)) continue;
    for (int s = 0; s < 2; s++) tpk_op_set_operand(op, s, form.in[s]);
    tpk_dot_set_dims(f->module, op, &form);
  }
}

/* ---- CSE ----------------------------------------------------------------------- */

static bool same_attrs(const TpkOp *a, const TpkOp *b) {
  if (a->nattr != b->nattr) return false;
  for (int i = 0; i < a->nattr; i++) {
    const TpkAttr *x = &a->attrs[i], *y = tpk_op_attr(b, x->key);
    if (!y || x->kind != y->kind) return false;
    switch (x->kind) {
    case TPK_ATTR_INT:
    case TPK_ATTR_BOOL:
      if (x->i != y->i) return false;
      break;
    case TPK_ATTR_FLOAT:
      if (memcmp(&x->f, &y->f, sizeof x->f) != 0) return false; /* bitwise: -0.0 and nan payloads differ */
      break;
    case TPK_ATTR_STR:
      if (strcmp(x->s, y->s) != 0) return false;
      break;
    case TPK_ATTR_INTS:
      if (x->n != y->n || (x->n && memcmp(x->ints, y->ints, (size_t)x->n * sizeof *x->ints) != 0)) return false;
      break;
    case TPK_ATTR_ENUM:
      if (x->set != y->set || x->i != y->i) return false;
      break;
    case TPK_ATTR_INDEX:
      if (x->index->rank != y->index->rank ||
          memcmp(x->index->dim, y->index->dim, (size_t)x->index->rank * sizeof *x->index->dim) != 0)
        return false;
      break;
    }
  }
  return true;
}

static bool equivalent(const TpkOp *a, const TpkOp *b) {
  if (a->opcode != b->opcode || a->nin != b->nin || a->nout != b->nout || a->nregion || b->nregion) return false;
  for (int i = 0; i < a->nin; i++)
    if (a->in[i] != b->in[i]) return false;
  for (int i = 0; i < a->nout; i++)
    if (a->out[i].type != b->out[i].type) return false;
  return same_attrs(a, b);
}

typedef struct Avail {
  const TpkOp **ops;
  int n, cap;
} Avail;

static bool cse_candidate(const TpkOp *op) {
  return (tpk_op_info(op->opcode)->flags & TPK_OPF_PURE) && !op->nregion && op->nout == 1;
}

static void cse_block(TpkFunc *f, TpkBlock *b, Avail *av) {
  int mark = av->n; /* ops of this block leave scope at its end */
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) cse_block(f, op->regions[r], av);
    if (!cse_candidate(op)) continue;
    const TpkOp *same = NULL;
    for (int i = av->n - 1; i >= 0 && !same; i--)
      if (equivalent(av->ops[i], op)) same = av->ops[i];
    if (same) {
      tpk_func_replace_uses(f, &op->out[0], (TpkValue *)&same->out[0]);
      continue; /* the now unused op goes with DCE */
    }
    if (av->n == av->cap) {
      int cap = av->cap ? av->cap * 2 : 64;
      const TpkOp **ops = realloc(av->ops, (size_t)cap * sizeof *ops);
      if (!ops) return; /* CSE is an optimisation: stop, stay correct */
      av->ops = ops;
      av->cap = cap;
    }
    av->ops[av->n++] = op;
  }
  av->n = mark;
}

/* ---- DCE ----------------------------------------------------------------------- */

static int dce_block(TpkBlock *b) {
  int removed = 0;
  for (TpkOp *op = b->first, *next; op; op = next) {
    next = op->next;
    for (int r = 0; r < op->nregion; r++) removed += dce_block(op->regions[r]);
    if (!(tpk_op_info(op->opcode)->flags & TPK_OPF_PURE) || op->nregion) continue;
    bool live = false;
    for (int i = 0; i < op->nout; i++) live |= op->out[i].nuses > 0;
    if (!live) {
      tpk_op_erase(op); /* its operands lose a use: ops before it may die on the next round */
      removed++;
    }
  }
  return removed;
}

void tpk_simplify(TpkFunc *f) {
  fold_block(f, f->body);
  fold_transposes(f, f->body);
  fold_dot_transposes(f, f->body);
  Avail av = {0};
  cse_block(f, f->body, &av);
  free(av.ops);
  while (dce_block(f->body)) {
  }
}
