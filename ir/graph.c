/*
 * graph.c — the graph builder (graph.h): a graph-level `func` grown one
 * input, op, call and output at a time.
 *
 * The func lives in a module of its own. Its body is the ops in the order
 * they were added; the `return` of the outputs is kept last only while
 * someone looks at the func (sealed): adding an op erases it, and
 * tpk_gb_func / tpk_gb_module put it back. An op whose arguments turn out
 * to be wrong after some IR was built takes that IR back out (rollback), so
 * a failed call leaves the graph as it was.
 *
 * The ATen vocabulary itself is aten.c; calls of kernels are here.
 */
#include "ir/aten.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TpkGraphBuilder *tpk_gb_new(const char *name) {
  TpkGraphBuilder *gb = calloc(1, sizeof *gb);
  if (!gb) return NULL;
  gb->m = tpk_module_new(NULL);
  gb->f = gb->m ? tpk_func_new(gb->m, name && *name ? name : "graph", false, 0, NULL, NULL, NULL) : NULL;
  if (!gb->f) {
    tpk_gb_free(gb);
    return NULL;
  }
  gb->b = (TpkBuilder){.m = gb->m, .block = gb->f->body};
  return gb;
}

void tpk_gb_free(TpkGraphBuilder *gb) {
  if (!gb) return;
  tpk_module_free(gb->m);
  free(gb->outputs);
  free(gb);
}

void tpk_gb_set_kernel_lookup(TpkGraphBuilder *gb, TpkGbKernelLookup lookup, void *ctx) {
  gb->lookup = lookup;
  gb->lookup_ctx = ctx;
}

void tpk_gb_unseal(TpkGraphBuilder *gb) {
  if (!gb->ret) return;
  tpk_op_erase(gb->ret);
  gb->ret = NULL;
}

/* The return of the outputs, last in the body; f's result types with it. */
static void seal(TpkGraphBuilder *gb) {
  if (gb->ret || gb->noutputs == 0) return;
  const TpkType **results = tpk_arena_alloc(&gb->m->arena, (size_t)gb->noutputs * sizeof *results);
  TpkOp *ret = results ? tpk_build(&gb->b, TPK_OP_RETURN, gb->noutputs, gb->outputs, 0, NULL) : NULL;
  if (!ret) return; /* the arena is exhausted: tpk_ir_verify says so */
  for (int i = 0; i < gb->noutputs; i++) results[i] = gb->outputs[i]->type;
  gb->f->results = results;
  gb->f->nresults = gb->noutputs;
  gb->ret = ret;
}

TpkModule *tpk_gb_module(TpkGraphBuilder *gb) {
  seal(gb);
  return gb->m;
}

TpkFunc *tpk_gb_func(TpkGraphBuilder *gb) {
  seal(gb);
  return gb->f;
}

const char *tpk_gb_type_text(const TpkType *t, char *buf, size_t n) {
  TpkStr s = {0};
  tpk_type_print(&s, t);
  snprintf(buf, n, "%s", s.data ? s.data : "?");
  tpk_str_free(&s);
  return buf;
}

const TpkDim *tpk_gb_dim(TpkGraphBuilder *gb, const char *text, TpkError *err) {
  TpkError perr = {0};
  const TpkDim *d = tpk_dim_parse(gb->m, text, &perr);
  if (!d) tpk_error(err, perr.code == TPK_ERR_NOMEM ? TPK_ERR_NOMEM : TPK_ERR_INVALID, "size '%s' is not a size: %s",
                    text ? text : "(null)", perr.message);
  return d;
}

TpkStatus tpk_gb_input(TpkGraphBuilder *gb, TpkDType dtype, int rank, const TpkDim *const *dims, TpkValue **out,
                       TpkError *err) {
  *out = NULL;
  if ((unsigned)dtype >= TPK_DTYPE_COUNT) return tpk_error(err, TPK_ERR_INVALID, "graph input: dtype %d is not a dtype", (int)dtype);
  if (rank < 0 || rank > TPK_MAX_RANK)
    return tpk_error(err, TPK_ERR_INVALID, "graph input: rank %d is not between 0 and %d", rank, TPK_MAX_RANK);
  for (int i = 0; i < rank; i++) {
    int64_t v;
    if (!dims[i]) return tpk_error(err, TPK_ERR_INVALID, "graph input: dim %d is missing", i);
    if (tpk_dim_is_const(dims[i], &v) && v < 0)
      return tpk_error(err, TPK_ERR_INVALID, "graph input: dim %d is %" PRId64 ", a size cannot be negative", i, v);
  }
  char name[32];
  snprintf(name, sizeof name, "in%d", gb->f->nparams);
  const TpkType *t = tpk_type_tensor(gb->m, dtype, rank, dims);
  TpkValue *v = t ? tpk_func_add_param(gb->m, gb->f, t, name, TPK_PARAM_IN) : NULL;
  if (!v) return tpk_error(err, TPK_ERR_NOMEM, "graph input: out of memory");
  *out = v;
  return TPK_OK;
}

/* Is v a value of gb's func, visible at the end of its body? */
static bool own_value(const TpkGraphBuilder *gb, const TpkValue *v) {
  if (!v) return false;
  if (!v->def) return v->block == gb->f->body;
  return v->def->parent == gb->f->body;
}

TpkStatus tpk_gb_output(TpkGraphBuilder *gb, TpkValue *v, TpkError *err) {
  if (!own_value(gb, v)) return tpk_error(err, TPK_ERR_INVALID, "graph output: not a value of this graph");
  if (gb->noutputs == gb->capoutputs) {
    int cap = gb->capoutputs ? gb->capoutputs * 2 : 8;
    TpkValue **o = realloc(gb->outputs, (size_t)cap * sizeof *o);
    if (!o) return tpk_error(err, TPK_ERR_NOMEM, "graph output: out of memory");
    gb->outputs = o;
    gb->capoutputs = cap;
  }
  tpk_gb_unseal(gb);
  gb->outputs[gb->noutputs++] = v;
  return TPK_OK;
}

TpkStatus tpk_gb_op(TpkGraphBuilder *gb, const char *op, const TpkArg *args, int nargs, TpkValue *const *values,
                    int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err) {
  *nouts = 0;
  tpk_gb_unseal(gb);
  return tpk_aten_build(gb, op, args, nargs, values, nvalues, outs, max, nouts, err);
}

int tpk_gb_op_count(void) { return tpk_aten_count(); }
const char *tpk_gb_op_name(int i) { return tpk_aten_name(i); }
bool tpk_gb_op_known(const char *op) { return tpk_aten_known(op); }

/* ---- Calls of kernels ------------------------------------------------------ */

/* The callee in gb's module: k itself when a function of its name and hash
 * is there, else a clone (renamed "name.2", ... when its name is taken by
 * other code: a standard kernel's name is free unless a user kernel of the
 * same name came first, whose clone then keeps it). */
static TpkFunc *callee_in_module(TpkGraphBuilder *gb, const TpkFunc *k, TpkError *err) {
  TpkFuncHash h = tpk_func_hash(k);
  TpkFunc *same = tpk_module_find(gb->m, k->name);
  if (same && same->is_kernel && tpk_func_hash_equal(tpk_func_hash(same), h)) return same;
  for (int i = 2; same && i < 1000; i++) { /* a clone made under another name before */
    char name[256];
    snprintf(name, sizeof name, "%s.%d", k->name, i);
    same = tpk_module_find(gb->m, name);
    if (same && same->is_kernel && tpk_func_hash_equal(tpk_func_hash(same), h)) return same;
  }
  bool taken = tpk_module_find(gb->m, k->name) != NULL;
  TpkFunc *c = tpk_func_clone(gb->m, k, NULL, NULL, err);
  if (!c) return NULL;
  for (int i = 2; taken; i++) {
    char name[256];
    snprintf(name, sizeof name, "%s.%d", k->name, i);
    if (!tpk_module_find(gb->m, name)) {
      c->name = tpk_module_intern(gb->m, name, strlen(name));
      taken = false;
    }
  }
  return c;
}

enum { MAX_BINDINGS = 64 };
typedef struct Bindings {
  int n;
  const char *sym[MAX_BINDINGS]; /* interned in gb's module */
  const TpkDim *dim[MAX_BINDINGS];
  int from[MAX_BINDINGS]; /* the argument that bound it */
} Bindings;

static const TpkDim *bound_dim(const Bindings *bs, const char *sym) {
  for (int i = 0; i < bs->n; i++)
    if (bs->sym[i] == sym) return bs->dim[i];
  return NULL;
}

/* d with the bound symbols replaced; NULL when one is not bound. */
static const TpkDim *substitute(TpkModule *m, const TpkDim *d, const Bindings *bs, const char **unbound) {
  if (d->kind == TPK_DIM_CONST) return d;
  if (d->kind == TPK_DIM_SYM) {
    const TpkDim *b = bound_dim(bs, d->sym);
    if (!b) *unbound = d->sym;
    return b;
  }
  const TpkDim *a = substitute(m, d->a, bs, unbound), *b = a ? substitute(m, d->b, bs, unbound) : NULL;
  return b ? tpk_dim_binary(m, d->kind, a, b) : NULL;
}

TpkStatus tpk_gb_call_values(TpkGraphBuilder *gb, const TpkFunc *k, const char *who, TpkValue *const *in, int nin,
                             TpkValue **outs, int max, int *nouts, TpkError *err) {
  *nouts = 0;
  if (!k || !k->is_kernel) return tpk_error(err, TPK_ERR_INVALID, "%s: not a kernel", who);
  tpk_gb_unseal(gb);
  TpkFunc *callee = callee_in_module(gb, k, err);
  if (!callee) return err && err->code ? err->code : TPK_ERR_NOMEM;
  char got[160], want[160];
  int nparams_in = 0, nresults = 0;
  for (int i = 0; i < callee->nparams; i++) {
    nparams_in += callee->params[i].role != TPK_PARAM_OUT;
    nresults += callee->params[i].role != TPK_PARAM_IN;
  }
  if (nin != nparams_in)
    return tpk_error(err, TPK_ERR_INVALID, "%s takes %d arguments (its in and inout parameters), got %d", who, nparams_in, nin);
  if (nresults > max)
    return tpk_error(err, TPK_ERR_INVALID, "%s gives %d results, room was given for %d", who, nresults, max);
  /* Bind the callee's shape symbols to the arguments' dims, first come. */
  Bindings bs = {0};
  TpkValue *args[256];
  if (nin > 256) return tpk_error(err, TPK_ERR_INVALID, "%s: more than 256 arguments", who);
  for (int i = 0, a = 0; i < callee->nparams; i++) {
    const TpkParam *p = &callee->params[i];
    if (p->role == TPK_PARAM_OUT) continue;
    const TpkType *pt = p->value->type;
    TpkValue *v = in[a];
    if (!v || !own_value(gb, v)) return tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' is not a value of this graph", who, p->name);
    if (pt->kind == TPK_TYPE_TENSOR) { /* a scalar parameter: a rank-0 value, converted */
      if (v->type->rank != 0)
        return tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' must be a scalar (%s), got %s", who, p->name,
                         tpk_dtype_name(pt->dtype), tpk_gb_type_text(v->type, got, sizeof got));
      if (v->type->dtype != pt->dtype && !(v = tpk_build_convert(&gb->b, v, pt->dtype)))
        return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory", who);
    } else {
      if (v->type->dtype != pt->dtype || v->type->rank != pt->rank) /* the parameter as a tensor, as the call passes it */
        return tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' must be %s, got %s", who, p->name,
                         tpk_gb_type_text(tpk_type_tensor(gb->m, pt->dtype, pt->rank, pt->dims), want, sizeof want),
                         tpk_gb_type_text(v->type, got, sizeof got));
      for (int d = 0; d < pt->rank; d++)
        if (pt->dims[d]->kind == TPK_DIM_SYM && !bound_dim(&bs, pt->dims[d]->sym) && bs.n < MAX_BINDINGS) {
          bs.sym[bs.n] = pt->dims[d]->sym;
          bs.dim[bs.n] = v->type->dims[d];
          bs.from[bs.n++] = a;
        }
    }
    args[a++] = v;
  }
  /* Every argument must then have the shape the parameter says. */
  for (int i = 0, a = 0; i < callee->nparams; i++) {
    const TpkParam *p = &callee->params[i];
    if (p->role == TPK_PARAM_OUT) continue;
    const TpkType *pt = p->value->type, *at = args[a++]->type;
    if (pt->kind == TPK_TYPE_TENSOR) continue;
    for (int d = 0; d < pt->rank; d++) {
      const char *unbound = NULL;
      const TpkDim *w = substitute(gb->m, pt->dims[d], &bs, &unbound);
      if (w == at->dims[d]) continue;
      TpkStr e = {0}, ws = {0};
      tpk_dim_print(&e, pt->dims[d]);
      if (w) tpk_dim_print(&ws, w);
      TpkStatus st =
          w ? tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' is %s, but its dim %d (%s) must be %s, as the arguments before it bind it",
                        who, p->name, tpk_gb_type_text(at, got, sizeof got), d, e.data ? e.data : "?", ws.data ? ws.data : "?")
            : tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s': its dim %d (%s) uses %s, which no argument's plain dim gives",
                        who, p->name, d, e.data ? e.data : "?", unbound ? unbound : "a symbol");
      tpk_str_free(&e);
      tpk_str_free(&ws);
      return st;
    }
  }
  const TpkType *rtypes[256];
  for (int i = 0, r = 0; i < callee->nparams; i++) {
    const TpkParam *p = &callee->params[i];
    if (p->role == TPK_PARAM_IN) continue;
    const TpkType *pt = p->value->type;
    const TpkDim *dims[TPK_MAX_RANK];
    for (int d = 0; d < pt->rank; d++) {
      const char *unbound = NULL;
      if (!(dims[d] = substitute(gb->m, pt->dims[d], &bs, &unbound)))
        return tpk_error(err, TPK_ERR_INVALID, "%s: the size of output '%s' (%s) depends on %s, which no argument gives",
                         who, p->name, tpk_gb_type_text(tpk_type_tensor(gb->m, pt->dtype, pt->rank, pt->dims), want, sizeof want),
                         unbound ? unbound : "a size");
    }
    rtypes[r++] = tpk_type_tensor(gb->m, pt->dtype, pt->rank, dims);
  }
  TpkOp *op = tpk_build(&gb->b, TPK_OP_CALL, nin, args, nresults, rtypes);
  if (!op) return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory", who);
  tpk_op_set_str(gb->m, op, "callee", callee->name);
  for (int i = 0, r = 0; i < callee->nparams; i++)
    if (callee->params[i].role != TPK_PARAM_IN) {
      op->out[r].name = callee->params[i].name;
      outs[r] = &op->out[r];
      r++;
    }
  *nouts = nresults;
  return TPK_OK;
}

TpkStatus tpk_gb_call(TpkGraphBuilder *gb, const TpkFunc *k, const TpkArg *args, int nargs, TpkValue *const *values,
                      int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err) {
  *nouts = 0;
  if (!k || !k->is_kernel) return tpk_error(err, TPK_ERR_INVALID, "graph call: not a kernel");
  char who[300];
  snprintf(who, sizeof who, "kernel '%s'", k->name);
  /* The arguments in parameter order: positional ones first, then by name. */
  enum { MAX_IN = 256 };
  const TpkParam *ps[MAX_IN];
  int np = 0;
  for (int i = 0; i < k->nparams && np < MAX_IN; i++)
    if (k->params[i].role != TPK_PARAM_OUT) ps[np++] = &k->params[i];
  const TpkArg *by_param[MAX_IN] = {0};
  for (int i = 0, pos = 0; i < nargs; i++) {
    int slot = -1;
    if (!args[i].name) {
      slot = pos++;
      if (slot >= np) return tpk_error(err, TPK_ERR_INVALID, "%s takes %d arguments, got more", who, np);
    } else {
      for (int j = 0; j < np && slot < 0; j++)
        if (ps[j]->name && strcmp(ps[j]->name, args[i].name) == 0) slot = j;
      if (slot < 0) return tpk_error(err, TPK_ERR_INVALID, "%s has no input parameter '%s'", who, args[i].name);
    }
    if (by_param[slot]) return tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' is given twice", who, ps[slot]->name);
    by_param[slot] = &args[i];
  }
  TpkValue *in[MAX_IN];
  TpkOp *mark = (tpk_gb_unseal(gb), gb->f->body->last);
  TpkStatus st = TPK_OK;
  for (int j = 0; j < np && st == TPK_OK; j++) {
    const TpkArg *a = by_param[j];
    const TpkType *pt = ps[j]->value->type;
    if (!a) {
      st = tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' is missing", who, ps[j]->name);
    } else if (a->kind == TPK_ARG_VALUE) {
      if (a->value < 0 || a->value >= nvalues || !values[a->value])
        st = tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s': %d is not a value of this graph", who, ps[j]->name, a->value);
      else
        in[j] = values[a->value];
    } else if (pt->kind == TPK_TYPE_TENSOR && (a->kind == TPK_ARG_INT || a->kind == TPK_ARG_FLOAT || a->kind == TPK_ARG_BOOL)) {
      const TpkType *st_type = tpk_type_scalar(gb->m, pt->dtype);
      if (tpk_dtype_is_float(pt->dtype))
        in[j] = tpk_build_const_float(&gb->b, st_type, a->kind == TPK_ARG_FLOAT ? a->f : (double)a->i);
      else if (a->kind == TPK_ARG_FLOAT)
        st = tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' is %s, got the float %g", who, ps[j]->name,
                       tpk_dtype_name(pt->dtype), a->f);
      else
        in[j] = tpk_build_const_int(&gb->b, st_type, pt->dtype == TPK_BOOL ? a->i != 0 : a->i);
      if (st == TPK_OK && !in[j]) st = tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory", who);
    } else {
      st = tpk_error(err, TPK_ERR_INVALID, "%s: argument '%s' must be %s", who, ps[j]->name,
                     pt->kind == TPK_TYPE_TENSOR ? "a number or a rank-0 value" : "a tensor value");
    }
  }
  if (st == TPK_OK) st = tpk_gb_call_values(gb, k, who, in, np, outs, max, nouts, err);
  if (st != TPK_OK)
    while (gb->f->body->last != mark) tpk_op_erase(gb->f->body->last);
  return st;
}
