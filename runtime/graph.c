/*
 * graph.c — the public graph-building calls of tpk.h ("Graphs") over the
 * graph builder (ir/graph.h): value ids for TpkValue pointers, kernels for
 * their IR, the standard library for the ops that call a standard kernel,
 * and errors into tpk_last_error() as the rest of runtime/ reports them.
 * tpk_graph_compile is compile.c's; it reaches the builder through
 * tpk_graph_builder().
 */
#include "runtime/internal.h"

#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"

struct TpkGraph {
  TpkContext *ctx;     /* held: a graph keeps its context alive */
  TpkGraphBuilder *gb;
  TpkValue **values;   /* value id -> value */
  int nvalues, capvalues;
  TpkStr ir;           /* tpk_graph_ir's text */
  TpkArena strings;    /* tpk_graph_value_dim's texts */
};

static TpkStatus fail_err(const char *who, const TpkError *err) {
  return tpk_runtime_fail(err->code ? err->code : TPK_ERR_INTERNAL, "%s: %s", who, err->message);
}

static TpkStatus usable(const TpkGraph *g, const char *who) {
  if (!g) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: no graph", who);
  if (tpk_context_closed(g->ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: the context was destroyed", who);
  return TPK_OK;
}

const TpkFunc *tpk_std_kernel_lookup(void *ctx, const char *name, TpkError *err) {
  TpkKernel *k;
  if (tpk_std_kernel(ctx, name, &k) != TPK_OK) {
    tpk_error(err, TPK_ERR_UNSUPPORTED, "%s", tpk_last_error());
    return NULL;
  }
  return tpk_kernel_ir(k);
}

TpkStatus tpk_graph_kernel_refused(const TpkKernel *k, const char *who) {
  return tpk_runtime_fail(TPK_ERR_UNSUPPORTED,
                          "%s: kernel '%s' is a compiled graph: it is launched (tpk_kernel_launch), not called; "
                          "call the kernels or ops it was built from instead",
                          who, tpk_kernel_ir(k)->name);
}

static bool is_identifier(const char *s) {
  if (!s || !(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
  for (; *s; s++)
    if (!(*s == '_' || *s == '.' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
      return false;
  return true;
}

TpkStatus tpk_graph_create(TpkContext *ctx, const char *name, TpkGraph **out) {
  *out = NULL;
  if (!ctx) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_create: no context");
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_create: the context was destroyed");
  if (!is_identifier(name))
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_create: the name '%s' is not an identifier ([A-Za-z_][A-Za-z0-9_.]*)",
                            name ? name : "(null)");
  TpkGraph *g = calloc(1, sizeof *g);
  if (!g || !(g->gb = tpk_gb_new(name))) {
    free(g);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "tpk_graph_create: out of memory");
  }
  tpk_gb_set_kernel_lookup(g->gb, tpk_std_kernel_lookup, ctx);
  tpk_arena_init(&g->strings, 0);
  tpk_context_retain(ctx);
  g->ctx = ctx;
  *out = g;
  return TPK_OK;
}

void tpk_graph_destroy(TpkGraph *g) {
  if (!g) return;
  tpk_gb_free(g->gb);
  free(g->values);
  tpk_str_free(&g->ir);
  tpk_arena_free(&g->strings);
  TpkContext *ctx = g->ctx;
  free(g);
  tpk_context_release(ctx);
}

TpkGraphBuilder *tpk_graph_builder(TpkGraph *g) { return g->gb; }
TpkContext *tpk_graph_context(const TpkGraph *g) { return g->ctx; }

/* A new value id for v (-1 for NULL: an output ATen leaves undefined). */
static bool add_value(TpkGraph *g, TpkValue *v, int *id) {
  if (!v) {
    *id = -1;
    return true;
  }
  if (g->nvalues == g->capvalues) {
    int cap = g->capvalues ? g->capvalues * 2 : 64;
    TpkValue **vs = realloc(g->values, (size_t)cap * sizeof *vs);
    if (!vs) return false;
    g->values = vs;
    g->capvalues = cap;
  }
  g->values[g->nvalues] = v;
  *id = g->nvalues++;
  return true;
}

static TpkValue *value_of(const TpkGraph *g, int id) { return g && id >= 0 && id < g->nvalues ? g->values[id] : NULL; }

TpkStatus tpk_graph_input(TpkGraph *g, TpkDType dtype, int rank, const char *const *dims, int *value) {
  *value = -1;
  TpkStatus st = usable(g, "tpk_graph_input");
  if (st != TPK_OK) return st;
  if (rank < 0 || rank > TPK_MAX_RANK)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_input: rank %d is not between 0 and %d", rank, TPK_MAX_RANK);
  const TpkDim *d[TPK_MAX_RANK];
  TpkError err = {0};
  for (int i = 0; i < rank; i++)
    if (!dims || !(d[i] = tpk_gb_dim(g->gb, dims ? dims[i] : NULL, &err))) {
      if (!dims) tpk_error(&err, TPK_ERR_INVALID, "no dims for rank %d", rank);
      return fail_err("tpk_graph_input", &err);
    }
  TpkValue *v;
  if (tpk_gb_input(g->gb, dtype, rank, d, &v, &err) != TPK_OK) return fail_err("tpk_graph_input", &err);
  if (!add_value(g, v, value)) return tpk_runtime_fail(TPK_ERR_NOMEM, "tpk_graph_input: out of memory");
  return TPK_OK;
}

enum { MAX_RESULTS = 64 }; /* as many as an op gives (split: 64 pieces) */

/* The builder's results as value ids. */
static TpkStatus put_results(TpkGraph *g, const char *who, TpkValue **res, int nres, int *values, int max, int *n) {
  for (int i = 0; i < nres && i < max; i++)
    if (!add_value(g, res[i], &values[i])) return tpk_runtime_fail(TPK_ERR_NOMEM, "%s: out of memory", who);
  *n = nres;
  return TPK_OK;
}

TpkStatus tpk_graph_op(TpkGraph *g, const char *op, const TpkArg *args, int nargs, int *values, int max, int *n) {
  *n = 0;
  TpkStatus st = usable(g, "tpk_graph_op");
  if (st != TPK_OK) return st;
  if (nargs < 0 || (nargs && !args)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_op: %d arguments but no array", nargs);
  TpkValue *res[MAX_RESULTS];
  int nres = 0;
  TpkError err = {0};
  if (tpk_gb_op(g->gb, op, args, nargs, g->values, g->nvalues, res, max < MAX_RESULTS ? max : MAX_RESULTS, &nres, &err) != TPK_OK)
    return tpk_runtime_fail(err.code ? err.code : TPK_ERR_INTERNAL, "%s", err.message);
  return put_results(g, "tpk_graph_op", res, nres, values, max, n);
}

TpkStatus tpk_graph_call(TpkGraph *g, TpkKernel *k, const TpkArg *args, int nargs, int *values, int max, int *n) {
  *n = 0;
  TpkStatus st = usable(g, "tpk_graph_call");
  if (st != TPK_OK) return st;
  if (!k) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_call: no kernel");
  if (tpk_kernel_is_graph(k)) return tpk_graph_kernel_refused(k, "tpk_graph_call");
  if (nargs < 0 || (nargs && !args)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_call: %d arguments but no array", nargs);
  TpkValue *res[MAX_RESULTS];
  int nres = 0;
  TpkError err = {0};
  if (tpk_gb_call(g->gb, tpk_kernel_ir(k), args, nargs, g->values, g->nvalues, res, max < MAX_RESULTS ? max : MAX_RESULTS,
                  &nres, &err) != TPK_OK)
    return fail_err("tpk_graph_call", &err);
  return put_results(g, "tpk_graph_call", res, nres, values, max, n);
}

TpkStatus tpk_graph_output(TpkGraph *g, int value) {
  TpkStatus st = usable(g, "tpk_graph_output");
  if (st != TPK_OK) return st;
  TpkValue *v = value_of(g, value);
  if (!v) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_output: %d is not a value of graph '%s'", value, tpk_gb_func(g->gb)->name);
  TpkError err = {0};
  if (tpk_gb_output(g->gb, v, &err) != TPK_OK) return fail_err("tpk_graph_output", &err);
  return TPK_OK;
}

TpkDType tpk_graph_value_dtype(const TpkGraph *g, int value) {
  TpkValue *v = value_of(g, value);
  return v ? v->type->dtype : TPK_DTYPE_COUNT;
}

int tpk_graph_value_rank(const TpkGraph *g, int value) {
  TpkValue *v = value_of(g, value);
  return v ? v->type->rank : -1;
}

const char *tpk_graph_value_dim(const TpkGraph *g, int value, int d) {
  TpkValue *v = value_of(g, value);
  if (!v || d < 0 || d >= v->type->rank) return NULL;
  TpkStr s = {0};
  tpk_dim_print(&s, v->type->dims[d]);
  const char *r = s.data ? tpk_arena_strdup(&((TpkGraph *)g)->strings, s.data) : NULL;
  tpk_str_free(&s);
  return r;
}

const char *tpk_graph_ir(TpkGraph *g) {
  if (!g) return "";
  tpk_str_free(&g->ir);
  tpk_ir_print(&g->ir, tpk_gb_module(g->gb));
  return g->ir.data ? g->ir.data : "";
}

int tpk_graph_op_count(void) { return tpk_gb_op_count(); }
const char *tpk_graph_op_name(int i) { return tpk_gb_op_name(i); }
bool tpk_graph_op_known(const char *op) { return tpk_gb_op_known(op); }
