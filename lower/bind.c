/*
 * bind.c — specialising a kernel: its sizes and tunables bound on the IR.
 *
 * A program's kernels are checked once, with shape symbols and tunables
 * symbolic. A launch, a tuning step, a simulated timing or the ahead-of-time
 * build then binds the values it has: the kernel is cloned with them
 * substituted in every type (ir/clone.c), `sym` ops of bound names become
 * constants, and simplification folds what became constant. What could only
 * be checked with the values is checked here, at the op's .tpk location:
 * sizes that overflow or are negative, requirements on sizes (`require K <=
 * N`), constant indices and static slices outside their dimension. Tunables
 * a binding leaves out take their declared defaults, so a bound kernel never
 * has a free tunable; shape symbols it leaves out stay symbolic (code that
 * serves every size).
 */
#include "lower/lower.h"

#include <inttypes.h>
#include <string.h>

typedef struct Values {
  const TpkFunc *f;
  const TpkBinding *binds;
  int n;
} Values;

static bool lookup(void *ctx, const char *name, int64_t *value) {
  const Values *v = ctx;
  for (int i = 0; i < v->n; i++)
    if (strcmp(v->binds[i].name, name) == 0) return *value = v->binds[i].value, true;
  const TpkTune *t = tpk_func_tune(v->f, name);
  if (t && !t->bound) return *value = t->value, true; /* the declared default */
  return false;
}

/* The names a binding may give: f's shape symbols and tunables, each once,
 * sizes not negative, tunables one of their declared values. */
static TpkStatus check_names(const TpkFunc *f, const TpkBinding *binds, int n, TpkError *err) {
  enum { MAX_SYMS = 64 };
  const char *syms[MAX_SYMS];
  int nsyms = tpk_func_symbols(f, syms, MAX_SYMS);
  for (int i = 0; i < n; i++) {
    const char *name = binds[i].name;
    if (!name) return tpk_error(err, TPK_ERR_INVALID, "kernel '%s': a binding without a name", f->name);
    for (int j = 0; j < i; j++)
      if (strcmp(binds[j].name, name) == 0) return tpk_error(err, TPK_ERR_INVALID, "kernel '%s': %s is bound twice", f->name, name);
    const TpkTune *t = tpk_func_tune(f, name);
    if (t) {
      if (t->bound && t->value != binds[i].value)
        return tpk_error(err, TPK_ERR_INVALID, "kernel '%s': tunable %s is already bound to %" PRId64, f->name, name, t->value);
      if (!tpk_tune_allows(t, binds[i].value)) {
        TpkStr s = {0};
        tpk_tune_print_choices(&s, t);
        tpk_error(err, TPK_ERR_INVALID, "kernel '%s': %s=%" PRId64 " is not one of the declared values [%s]", f->name,
                  name, binds[i].value, s.data ? s.data : "");
        tpk_str_free(&s);
        return TPK_ERR_INVALID;
      }
      continue;
    }
    bool known = false;
    for (int j = 0; j < nsyms && j < MAX_SYMS; j++) known |= strcmp(syms[j], name) == 0;
    if (!known) return tpk_error(err, TPK_ERR_INVALID, "kernel '%s' has no shape symbol or tunable '%s'", f->name, name);
    if (binds[i].value < 0)
      return tpk_error(err, TPK_ERR_INVALID, "kernel '%s': shape symbol %s is bound to %" PRId64 "; sizes cannot be negative",
                       f->name, name, binds[i].value);
  }
  return TPK_OK;
}

/* `sym` ops of bound names become constants. */
static void fold_syms(TpkModule *m, TpkBlock *b, Values *v) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) fold_syms(m, op->regions[r], v);
    int64_t value;
    if (op->opcode == TPK_OP_SYM && lookup(v, tpk_op_str(op, "name", ""), &value)) tpk_op_make_const_int(m, op, value);
  }
}

static bool const_operand(const TpkValue *v, int64_t *out) {
  const TpkOp *d = v->def;
  if (!d || d->opcode != TPK_OP_CONST) return false;
  const TpkAttr *a = tpk_op_attr(d, "value");
  if (!a || a->kind != TPK_ATTR_INT) return false;
  *out = a->i;
  return true;
}

/* Constant scalar indices ('s') and static slices ('r' with a constant
 * start and size) of one access: inside their dimension. `sel` is the
 * selected block's type (the load's result, the stored value). */
static TpkStatus check_access(const TpkOp *op, const TpkIndexPattern *pattern, const TpkType *base, int first,
                              const TpkType *sel, TpkError *err) {
  int operand = first, out_dim = 0;
  for (int d = 0; pattern && d < pattern->rank && d < base->rank; d++) {
    TpkIndexKind kind = pattern->dim[d];
    int64_t size, start, len;
    bool sized = tpk_dim_is_const(base->dims[d], &size);
    if (kind == TPK_INDEX_ALL) {
      out_dim++;
      continue;
    }
    if (operand >= op->nin) break;
    const TpkValue *ix = op->in[operand++];
    if (kind == TPK_INDEX_SCALAR && sized && const_operand(ix, &start) && (start < 0 || start >= size))
      return tpk_error_at(err, TPK_ERR_INVALID, op->loc.line, op->loc.col,
                          "index %" PRId64 " is out of bounds for dimension %d of size %" PRId64, start, d, size);
    if (kind == TPK_INDEX_RANGE && sel && out_dim < sel->rank && const_operand(ix, &start) &&
        tpk_dim_is_const(sel->dims[out_dim], &len) && (start < 0 || (sized && start + len > size)))
      return tpk_error_at(err, TPK_ERR_INVALID, op->loc.line, op->loc.col,
                          "slice %" PRId64 "..%" PRId64 " is out of bounds for dimension %d of size %" PRId64, start,
                          start + len, d, size);
    if (kind != TPK_INDEX_SCALAR) out_dim++;
  }
  return TPK_OK;
}

/* Requirements on sizes (`require K <= N`) whose sizes the binding gives,
 * checked on f (not the copy) so the message names them. */
static TpkStatus check_requires(const TpkFunc *f, Values *v, TpkError *err) {
  for (int i = 0; i < f->nrequires; i++) {
    const TpkRequire *r = &f->requires[i];
    int64_t a, b;
    if (!tpk_dim_eval(r->lhs, lookup, v, &a) || !tpk_dim_eval(r->rhs, lookup, v, &b)) continue; /* left symbolic */
    TpkStatus st = tpk_require_check(f, r, lookup, v, err);
    if (st != TPK_OK) {
      if (err) err->line = r->loc.line, err->col = r->loc.col;
      return st;
    }
  }
  return TPK_OK;
}

static TpkStatus check_accesses(const TpkBlock *b, TpkError *err) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    TpkStatus st = TPK_OK;
    switch (op->opcode) {
    case TPK_OP_LOAD:
    case TPK_OP_SLICE:
      st = check_access(op, tpk_op_index(op, "index"), op->in[0]->type, 1, op->out[0].type, err);
      break;
    case TPK_OP_STORE:
      st = check_access(op, tpk_op_index(op, "index"), op->in[0]->type, 1, op->in[op->nin - 1]->type, err);
      break;
    default: break;
    }
    for (int r = 0; st == TPK_OK && r < op->nregion; r++) st = check_accesses(op->regions[r], err);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

TpkStatus tpk_bind(TpkModule *dst, const TpkFunc *f, const TpkBinding *binds, int nbinds, TpkFunc **out, TpkError *err) {
  *out = NULL;
  TpkStatus st = check_names(f, binds, nbinds, err);
  if (st != TPK_OK) return st;
  Values v = {.f = f, .binds = binds, .n = nbinds};
  if ((st = check_requires(f, &v, err)) != TPK_OK) return st;
  TpkFunc *g = tpk_func_clone(dst, f, lookup, &v, err);
  if (!g) return err && err->code ? err->code : TPK_ERR_NOMEM;
  fold_syms(dst, g->body, &v);
  tpk_simplify(g);
  if ((st = check_accesses(g->body, err)) != TPK_OK) return st;
  TpkError verr = {0};
  if (tpk_ir_verify(dst, &verr) != TPK_OK)
    return tpk_error(err, TPK_ERR_INTERNAL, "internal error: binding '%s' produced invalid IR: %s", f->name, verr.message);
  *out = g;
  return TPK_OK;
}
