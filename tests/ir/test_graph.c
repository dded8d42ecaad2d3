/*
 * test_graph.c — the graph builder (ir/graph.c) and its ATen vocabulary
 * (ir/aten.c): the IR each op builds (golden text, every one verified),
 * shapes and dtypes (promotion, broadcasting, symbolic sizes), every error
 * path, and the vocabulary against the ops PyTorch was measured to produce
 * (tests/python/aten_ops.txt) plus issue 12's list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "ir/graph.h"
#include "support.h"

/* ---- Building graphs in tests ------------------------------------------------ */

typedef struct G {
  TpkGraphBuilder *gb;
  TpkValue *v[512]; /* value ids, as the public API numbers them */
  int n;
  TpkError err;
  TpkStr text;
} G;

static G *g_new(const char *name) {
  G *g = calloc(1, sizeof *g);
  assert_non_null(g);
  g->gb = tpk_gb_new(name);
  assert_non_null(g->gb);
  return g;
}

static void g_free(G *g) {
  tpk_gb_free(g->gb);
  tpk_str_free(&g->text);
  free(g);
}

static int add_value(G *g, TpkValue *v) {
  assert_true(g->n < 512);
  g->v[g->n] = v;
  return g->n++;
}

/* An input: dims as text, "B,784" ("" for a scalar). */
static int in(G *g, TpkDType dt, const char *dims) {
  const TpkDim *d[TPK_MAX_RANK];
  int rank = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", dims);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    d[rank] = tpk_gb_dim(g->gb, t, &g->err);
    assert_non_null(d[rank]);
    rank++;
  }
  TpkValue *v;
  assert_int_equal(tpk_gb_input(g->gb, dt, rank, d, &v, &g->err), TPK_OK);
  return add_value(g, v);
}

#define A(...) (int)(sizeof((TpkArg[]){__VA_ARGS__}) / sizeof(TpkArg)), (TpkArg[]){__VA_ARGS__}
#define NOARGS 0, NULL
#define V(x) ((TpkArg){.kind = TPK_ARG_VALUE, .value = (x)})
#define I(x) ((TpkArg){.kind = TPK_ARG_INT, .i = (x)})
#define SYM(s) ((TpkArg){.kind = TPK_ARG_INT, .sym = (s)})
#define F(x) ((TpkArg){.kind = TPK_ARG_FLOAT, .f = (x)})
#define B(x) ((TpkArg){.kind = TPK_ARG_BOOL, .i = (x)})
#define NONE ((TpkArg){.kind = TPK_ARG_NONE})
#define DT(d) ((TpkArg){.kind = TPK_ARG_DTYPE, .dtype = (d)})
#define STR(s) ((TpkArg){.kind = TPK_ARG_STR, .str = (s)})
#define INTS(...) \
  ((TpkArg){.kind = TPK_ARG_INTS, .n = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .ints = (int64_t[]){__VA_ARGS__}})
#define VALS(...) \
  ((TpkArg){.kind = TPK_ARG_VALUES, .n = (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), .values = (int[]){__VA_ARGS__}})

static TpkArg kw(const char *name, TpkArg a) {
  a.name = name;
  return a;
}

/* An op that must succeed: its results' ids into ids (may be NULL), the
 * first returned (-1 for None). */
static int opn(G *g, const char *name, int nargs, const TpkArg *args, int *ids, int max) {
  TpkValue *outs[16];
  int n = 0;
  TpkStatus st = tpk_gb_op(g->gb, name, args, nargs, g->v, g->n, outs, 16, &n, &g->err);
  if (st != TPK_OK) fail_msg("%s: %s", name, g->err.message);
  assert_true(n >= 1 && n <= max);
  int first = -1;
  for (int i = 0; i < n; i++) {
    int id = outs[i] ? add_value(g, outs[i]) : -1;
    if (ids) ids[i] = id;
    if (i == 0) first = id;
  }
  return first;
}

static int op(G *g, const char *name, int nargs, const TpkArg *args) { return opn(g, name, nargs, args, NULL, 16); }

/* The graph's ops but its return. */
static int op_count(G *g) {
  int n = 0;
  for (const TpkOp *o = tpk_gb_func(g->gb)->body->first; o; o = o->next) n += o->opcode != TPK_OP_RETURN;
  return n;
}

/* An op that must fail with `code`, its message containing each of the
 * NULL-terminated fragments. The graph must be left as it was. */
static void op_fails(G *g, TpkStatus code, const char *name, int nargs, const TpkArg *args, ...) {
  TpkValue *outs[16];
  int n = -1;
  int before = op_count(g);
  TpkStatus st = tpk_gb_op(g->gb, name, args, nargs, g->v, g->n, outs, 16, &n, &g->err);
  if (st == TPK_OK) fail_msg("%s succeeded; expected an error", name);
  if (st != code) fail_msg("%s: status %d, expected %d: %s", name, st, code, g->err.message);
  assert_int_equal(n, 0);
  va_list ap;
  va_start(ap, args);
  for (const char *frag; (frag = va_arg(ap, const char *));)
    if (!strstr(g->err.message, frag)) fail_msg("%s: message \"%s\" lacks \"%s\"", name, g->err.message, frag);
  va_end(ap);
  assert_int_equal(op_count(g), before); /* what it built is taken back */
}

static void out(G *g, int id) { assert_int_equal(tpk_gb_output(g->gb, g->v[id], &g->err), TPK_OK); }

/* The graph's func as text, verified. */
static const char *ir(G *g) {
  TpkError err = {0};
  TpkFunc *f = tpk_gb_func(g->gb);
  if (tpk_ir_verify(tpk_gb_module(g->gb), &err) != TPK_OK) {
    TpkStr s = {0};
    tpk_ir_print_func(&s, f);
    fail_msg("%s\n%s", err.message, s.data);
  }
  tpk_str_free(&g->text);
  tpk_ir_print_func(&g->text, f);
  return g->text.data;
}

static void check_ir(G *g, const char *want) {
  const char *got = ir(g);
  if (strcmp(got, want) != 0) fail_msg("IR differs; got:\n%s\nexpected:\n%s", got, want);
}

static const char *type_of(G *g, int id) {
  static char buf[8][128];
  static int k;
  TpkStr s = {0};
  tpk_type_print(&s, g->v[id]->type);
  char *b = buf[k++ % 8];
  snprintf(b, 128, "%s", s.data);
  tpk_str_free(&s);
  return b;
}


/* ---- Running a graph's IR: the reference interpreter ---------------------------- */

/* A graph func as a kernel the reference interpreter runs:
 * each input loaded whole, the func's ops as they are, each result stored
 * whole (rank-0 results through a [1] reshape), built in f's module: the
 * oracle of the builder's expansions alone (the library runs graphs through
 * lower/fuse.c). */
static TpkFunc *as_kernel(TpkFunc *f, const char *name) {
  TpkModule *m = f->module;
  TpkFunc *k = tpk_func_new(m, name, true, 0, NULL, NULL, NULL);
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkPtrMap map = {.arena = &arena};
  TpkValue *refs[64];
  int nin = f->nparams;
  for (int i = 0; i < nin; i++) {
    const TpkType *t = f->params[i].value->type;
    const TpkType *pt = t->rank == 0 ? t : tpk_type_ref(m, t->dtype, t->rank, t->dims, TPK_MEM_HBM);
    refs[i] = tpk_func_add_param(m, k, pt, f->params[i].name, TPK_PARAM_IN);
  }
  const TpkDim *one = tpk_dim_const(m, 1);
  for (int i = 0; i < f->nresults; i++) {
    const TpkType *t = f->results[i];
    char pname[32];
    snprintf(pname, sizeof pname, "out%d", i);
    refs[nin + i] = tpk_func_add_param(m, k, t->rank ? tpk_type_ref(m, t->dtype, t->rank, t->dims, TPK_MEM_HBM)
                                                     : tpk_type_ref(m, t->dtype, 1, &one, TPK_MEM_HBM),
                                       pname, TPK_PARAM_OUT);
  }
  TpkBuilder b = {.m = m, .block = k->body};
  for (int i = 0; i < nin; i++) {
    const TpkType *t = f->params[i].value->type;
    TpkValue *v = refs[i];
    if (t->rank) {
      TpkOp *ld = tpk_build(&b, TPK_OP_LOAD, 1, &refs[i], 1, &t);
      TpkIndexPattern all = {.rank = t->rank};
      for (int d = 0; d < t->rank; d++) all.dim[d] = TPK_INDEX_ALL;
      tpk_op_set_index(m, ld, "index", &all);
      v = &ld->out[0];
    }
    tpk_ptrmap_put(&map, f->params[i].value, v);
  }
  for (const TpkOp *op = f->body->first; op; op = op->next) {
    TpkValue *in[64];
    for (int i = 0; i < op->nin; i++) {
      void *v = NULL;
      tpk_ptrmap_get(&map, op->in[i], &v);
      in[i] = v;
    }
    if (op->opcode == TPK_OP_RETURN) {
      for (int i = 0; i < op->nin; i++) {
        TpkValue *v = in[i];
        if (v->type->rank == 0) {
          const TpkType *t1 = tpk_type_tensor(m, v->type->dtype, 1, &one);
          v = &tpk_build(&b, TPK_OP_RESHAPE, 1, &v, 1, &t1)->out[0];
        }
        TpkValue *st_in[2] = {refs[nin + i], v};
        TpkOp *st = tpk_build(&b, TPK_OP_STORE, 2, st_in, 0, NULL);
        TpkIndexPattern all = {.rank = v->type->rank};
        for (int d = 0; d < v->type->rank; d++) all.dim[d] = TPK_INDEX_ALL;
        tpk_op_set_index(m, st, "index", &all);
        tpk_op_set_store_mode(m, st, TPK_STORE_SET);
      }
      continue;
    }
    const TpkType *outs[64];
    for (int i = 0; i < op->nout; i++) outs[i] = op->out[i].type;
    TpkOp *c = tpk_build(&b, op->opcode, op->nin, in, op->nout, outs);
    assert_true(tpk_op_copy_attrs(m, c, op));
    for (int i = 0; i < op->nout; i++) tpk_ptrmap_put(&map, &op->out[i], &c->out[i]);
  }
  tpk_arena_free(&arena);
  return k;
}

/* Run g's outputs on f32 (or i32, bool) inputs through the interpreter;
 * `syms` gives the shape symbols ("B=3,S=5"); outputs written to out[i]
 * (room enough). Fails the test on an error. */
static void run(G *g, const char *syms, void *const *inputs, void *const *outputs) {
  TpkFunc *f = tpk_gb_func(g->gb);
  TpkModule *scratch = tpk_module_new(NULL);
  TpkError err = {0};
  TpkFunc *copy = tpk_func_clone(scratch, f, NULL, NULL, &err);
  assert_non_null(copy);
  TpkFunc *k = as_kernel(copy, "run");
  if (tpk_ir_verify(scratch, &err) != TPK_OK) fail_msg("%s", err.message);
  void *args[64];
  int n = 0;
  for (int i = 0; i < f->nparams; i++) args[n++] = inputs[i];
  for (int i = 0; i < f->nresults; i++) args[n++] = outputs[i];
  int64_t values[16];
  test_symbol_values(k, syms, values);
  if (tpk_interp_run(k, args, values, &err) != TPK_OK) fail_msg("%s", err.message);
  tpk_module_free(scratch);
}

static void assert_near(const float *got, const double *want, int n, double tol, const char *what) {
  for (int i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))) && !(isnan(got[i]) && isnan(want[i])))
      fail_msg("%s[%d] = %.9g, expected %.9g", what, i, got[i], want[i]);
}

/* ---- Golden IR ----------------------------------------------------------------
 * Each text below was read and checked against ATen's definition of the op. */

static const char LAYERNORM[] =
    "func @g(%in0: f32[B,S,64], %in1: f32[64], %in2: f32[64]) -> (f32[B,S,64], f32[B,S,1], f32[B,S,1]) {\n"
    "  %native_layer_norm = reduce %in0 {kind=\"mean\", axes=[2], keepdims=true} : f32[B,S,1]\n"
    "  %0 = broadcast %native_layer_norm : f32[B,S,64]\n"
    "  %1 = sub %in0, %0 : f32[B,S,64]\n"
    "  %2 = mul %1, %1 : f32[B,S,64]\n"
    "  %3 = reduce %2 {kind=\"mean\", axes=[2], keepdims=true} : f32[B,S,1]\n"
    "  %4 = const {value=1e-05} : f32\n"
    "  %5 = broadcast %4 : f32[B,S,1]\n"
    "  %6 = add %3, %5 : f32[B,S,1]\n"
    "  %native_layer_norm.1 = rsqrt %6 : f32[B,S,1]\n"
    "  %7 = broadcast %native_layer_norm.1 : f32[B,S,64]\n"
    "  %8 = mul %1, %7 : f32[B,S,64]\n"
    "  %9 = broadcast %in1 : f32[B,S,64]\n"
    "  %10 = mul %8, %9 : f32[B,S,64]\n"
    "  %11 = broadcast %in2 : f32[B,S,64]\n"
    "  %native_layer_norm.2 = add %10, %11 : f32[B,S,64]\n"
    "  return %native_layer_norm.2, %native_layer_norm, %native_layer_norm.1\n"
    "}\n";

static const char VIEWS[] =
    "func @g(%in0: f32[B,S,64]) -> (f32[3,B,4,S,16]) {\n"
    "  %view = reshape %in0 : f32[B,S,4,16]\n"
    "  %permute = transpose %view {perm=[0, 2, 1, 3]} : f32[B,4,S,16]\n"
    "  %unsqueeze = reshape %permute : f32[1,B,4,S,16]\n"
    "  %expand = broadcast %unsqueeze : f32[3,B,4,S,16]\n"
    "  return %expand\n"
    "}\n";

static const char GATHER[] =
    "func @g(%in0: f32[N,10], %in1: i32[N,1]) -> (f32[N,1]) {\n"
    "  %0 = reshape %in1 : i32[N]\n"
    "  %1 = iota {axis=0} : i32[10]\n"
    "  %2 = gather %1, %0 {axis=0} : i32[N]\n"
    "  %3 = reshape %2 : i32[N,1]\n"
    "  %4 = iota {axis=0} : i32[N,1]\n"
    "  %5 = const {value=10} : i32\n"
    "  %6 = broadcast %5 : i32[N,1]\n"
    "  %7 = mul %4, %6 : i32[N,1]\n"
    "  %8 = add %3, %7 : i32[N,1]\n"
    "  %9 = reshape %8 : i32[N]\n"
    "  %10 = reshape %in0 : f32[N*10]\n"
    "  %11 = gather %10, %9 {axis=0} : f32[N]\n"
    "  %gather = reshape %11 : f32[N,1]\n"
    "  return %gather\n"
    "}\n";

static const char SELECT[] =
    "func @g(%in0: f32[4,S]) -> (f32[4]) {\n"
    "  %0 = const {value=-1} : i32\n"
    "  %1 = sym {name=\"S\"} : i32\n"
    "  %2 = add %1, %0 : i32\n"
    "  %select = slice %in0, %2 {index=\":s\"} : f32[4]\n"
    "  return %select\n"
    "}\n";

static const char SPLIT[] =
    "func @g(%in0: f32[S,96]) -> (f32[S,32], f32[S,32], f32[S,32]) {\n"
    "  %0 = const {value=0} : i32\n"
    "  %split_with_sizes = slice %in0, %0 {index=\":r\"} : f32[S,32]\n"
    "  %1 = const {value=32} : i32\n"
    "  %split_with_sizes.1 = slice %in0, %1 {index=\":r\"} : f32[S,32]\n"
    "  %2 = const {value=64} : i32\n"
    "  %split_with_sizes.2 = slice %in0, %2 {index=\":r\"} : f32[S,32]\n"
    "  return %split_with_sizes, %split_with_sizes.1, %split_with_sizes.2\n"
    "}\n";

static const char MAX_DIM[] =
    "func @g(%in0: f32[4,S]) -> (f32[4], i32[4]) {\n"
    "  %0 = reduce %in0 {kind=\"max\", axes=[1], keepdims=true} : f32[4,1]\n"
    "  %max = reshape %0 : f32[4]\n"
    "  %1 = broadcast %0 : f32[4,S]\n"
    "  %2 = eq %in0, %1 : bool[4,S]\n"
    "  %3 = ne %in0, %in0 : bool[4,S]\n"
    "  %4 = or %2, %3 : bool[4,S]\n"
    "  %5 = iota {axis=1} : i32[4,S]\n"
    "  %6 = sym {name=\"S\"} : i32\n"
    "  %7 = broadcast %6 : i32[4,S]\n"
    "  %8 = select %4, %5, %7 : i32[4,S]\n"
    "  %max.1 = reduce %8 {kind=\"min\", axes=[1], keepdims=false} : i32[4]\n"
    "  return %max, %max.1\n"
    "}\n";

static const char BF16[] =
    "func @g(%in0: bf16[4], %in1: f32[4]) -> (bf16[4]) {\n"
    "  %0 = convert %in0 : f32[4]\n"
    "  %1 = const {value=0.1} : f32\n"
    "  %2 = broadcast %1 : f32[4]\n"
    "  %3 = mul %0, %2 : f32[4]\n"
    "  %mul = convert %3 : bf16[4]\n"
    "  %4 = convert %mul : f32[4]\n"
    "  %5 = add %4, %in1 : f32[4]\n"
    "  %add_ = convert %5 : bf16[4]\n"
    "  return %add_\n"
    "}\n";

static const char WHERE[] =
    "func @g(%in0: bool[N,1], %in1: f32[3]) -> (f32[N,3]) {\n"
    "  %0 = const {value=0.0} : f32\n"
    "  %1 = broadcast %0 : f32[N,3]\n"
    "  %2 = broadcast %in1 : f32[N,3]\n"
    "  %3 = broadcast %in0 : bool[N,3]\n"
    "  %where = select %3, %2, %1 : f32[N,3]\n"
    "  return %where\n"
    "}\n";

static const char NLL[] =
    "func @g(%in0: f32[N,10], %in1: i32[N]) -> (f32, f32) {\n"
    "  %0 = const {value=-100} : i32\n"
    "  %1 = broadcast %0 : i32[N]\n"
    "  %2 = ne %in1, %1 : bool[N]\n"
    "  %3 = const {value=0} : i32\n"
    "  %4 = broadcast %3 : i32[N]\n"
    "  %5 = select %2, %in1, %4 : i32[N]\n"
    "  %6 = const {value=1.0} : f32\n"
    "  %7 = broadcast %6 : f32[N]\n"
    "  %8 = const {value=0.0} : f32\n"
    "  %9 = broadcast %8 : f32[N]\n"
    "  %10 = select %2, %7, %9 : f32[N]\n"
    "  %11 = iota {axis=0} : i32[N]\n"
    "  %12 = const {value=10} : i32\n"
    "  %13 = broadcast %12 : i32[N]\n"
    "  %14 = mul %11, %13 : i32[N]\n"
    "  %15 = add %14, %5 : i32[N]\n"
    "  %16 = reshape %in0 : f32[N*10]\n"
    "  %17 = gather %16, %15 {axis=0} : f32[N]\n"
    "  %18 = const {value=0.0} : f32\n"
    "  %19 = broadcast %18 : f32[N]\n"
    "  %20 = mul %17, %10 : f32[N]\n"
    "  %21 = neg %20 : f32[N]\n"
    "  %22 = select %2, %21, %19 : f32[N]\n"
    "  %nll_loss_forward = reduce %10 {kind=\"sum\", axes=[0], keepdims=false} : f32\n"
    "  %23 = reduce %22 {kind=\"sum\", axes=[0], keepdims=false} : f32\n"
    "  %nll_loss_forward.1 = div %23, %nll_loss_forward : f32\n"
    "  return %nll_loss_forward.1, %nll_loss_forward\n"
    "}\n";

static const char SDPA[] =
    "func @g(%in0: f32[B,4,S,16], %in1: f32[B,2,S,16]) -> (f32[B,4,S,16], f32[B,4,S]) {\n"
    "  %0 = convert %in0 : bf16[B,4,S,16]\n"
    "  %1 = convert %in1 : bf16[B,2,S,16]\n"
    "  %2 = convert %in1 : bf16[B,2,S,16]\n"
    "  %3 = const {value=0.25} : f32\n"
    "  %o, %lse = call %0, %1, %2, %3 {callee=\"flash_attention_causal\"} : bf16[B,4,S,16], f32[B,4,S]\n"
    "  %_scaled_dot_product_flash_attention_for_cpu = convert %o : f32[B,4,S,16]\n"
    "  return %_scaled_dot_product_flash_attention_for_cpu, %lse\n"
    "}\n";

static const char SDPA_BWD[] =
    "func @g(%in0: f32[1,2,S,8], %in1: f32[1,2,S]) -> (f32[1,2,S,8], f32[1,2,S,8], f32[1,2,S,8]) {\n"
    "  %0 = convert %in0 : bf16[1,2,S,8]\n"
    "  %1 = convert %in0 : bf16[1,2,S,8]\n"
    "  %2 = convert %in0 : bf16[1,2,S,8]\n"
    "  %3 = const {value=0.5} : f32\n"
    "  %4 = convert %in0 : bf16[1,2,S,8]\n"
    "  %5 = convert %in0 : bf16[1,2,S,8]\n"
    "  %dq, %dk, %dv = call %0, %1, %2, %4, %5, %in1, %3 {callee=\"flash_attention_bwd\"} : f32[1,2,S,8], f32[1,2,S,8], f32[1,2,S,8]\n"
    "  return %dq, %dk, %dv\n"
    "}\n";

/* ---- Golden IR (the graphs) ---------------------------------------------------------------- */

static void test_linear_softmax(void **state) {
  (void)state;
  G *g = g_new("mlp");
  int x = in(g, TPK_F32, "B,784"), w = in(g, TPK_F32, "784,256"), b = in(g, TPK_F32, "256");
  int h = op(g, "addmm", A(V(b), V(x), V(w)));
  int r = op(g, "relu", A(V(h)));
  int s = op(g, "_softmax", A(V(r), I(-1), B(false)));
  out(g, s);
  check_ir(g, "func @mlp(%in0: f32[B,784], %in1: f32[784,256], %in2: f32[256]) -> (f32[B,256]) {\n"
              "  %0 = dot %in0, %in1 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,256]\n"
              "  %1 = broadcast %in2 : f32[B,256]\n"
              "  %addmm = add %0, %1 : f32[B,256]\n"
              "  %2 = const {value=0.0} : f32\n"
              "  %3 = broadcast %2 : f32[B,256]\n"
              "  %relu = max %addmm, %3 : f32[B,256]\n"
              "  %4 = reduce %relu {kind=\"max\", axes=[1], keepdims=true} : f32[B,1]\n"
              "  %5 = broadcast %4 : f32[B,256]\n"
              "  %6 = sub %relu, %5 : f32[B,256]\n"
              "  %7 = exp %6 : f32[B,256]\n"
              "  %8 = reduce %7 {kind=\"sum\", axes=[1], keepdims=true} : f32[B,1]\n"
              "  %9 = broadcast %8 : f32[B,256]\n"
              "  %_softmax = div %7, %9 : f32[B,256]\n"
              "  return %_softmax\n"
              "}\n");
  g_free(g);
}


static void test_layer_norm(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "B,S,64"), w = in(g, TPK_F32, "64"), b = in(g, TPK_F32, "64");
  int r[3];
  opn(g, "native_layer_norm", A(V(x), INTS(64), V(w), V(b), F(1e-5)), r, 3);
  for (int i = 0; i < 3; i++) out(g, r[i]);
  check_ir(g, LAYERNORM);
  g_free(g);
}

/* view's -1 found from symbolic sizes, permute, unsqueeze, expand: views
 * are reshape, transpose and broadcast ops. */
static void test_views(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "B,S,64");
  TpkArg size = {.kind = TPK_ARG_INTS, .n = 4, .ints = (int64_t[]){0, -1, 4, 16}, .syms = (const char *[]){"B", NULL, NULL, NULL}};
  int v = op(g, "view", A(V(x), size));
  int p = op(g, "permute", A(V(v), INTS(0, 2, 1, 3)));
  int u = op(g, "unsqueeze", A(V(p), I(0)));
  out(g, op(g, "expand", A(V(u), INTS(3, -1, -1, -1, -1))));
  check_ir(g, VIEWS);
  /* views that change nothing give their operand back */
  TpkArg same = {.kind = TPK_ARG_INTS, .n = 3, .ints = (int64_t[]){0, 0, 64}, .syms = (const char *[]){"B", "S", NULL}};
  assert_ptr_equal(g->v[op(g, "view", A(V(x), same))], g->v[x]);
  assert_ptr_equal(g->v[op(g, "alias", A(V(x)))], g->v[x]);
  assert_ptr_equal(g->v[op(g, "clone", A(V(x)))], g->v[x]);
  assert_ptr_equal(g->v[op(g, "permute", A(V(x), INTS(0, 1, 2)))], g->v[x]);
  assert_ptr_equal(g->v[op(g, "expand", A(V(x), INTS(-1, -1, -1)))], g->v[x]);
  g_free(g);
}

/* ATen's gather: each index's position in the flattened self. */
static void test_gather(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "N,10"), ix = in(g, TPK_I32, "N,1");
  out(g, op(g, "gather", A(V(x), I(1), V(ix))));
  check_ir(g, GATHER);
  g_free(g);
}

/* A negative index on a symbolic dim reads the symbol; splits are slices. */
static void test_select_and_split(void **state) {
  (void)state;
  G *g = g_new("g");
  out(g, op(g, "select", A(V(in(g, TPK_F32, "4,S")), I(1), I(-1))));
  check_ir(g, SELECT);
  g_free(g);
  g = g_new("g");
  int r[3];
  opn(g, "split_with_sizes", A(V(in(g, TPK_F32, "S,96")), INTS(32, 32, 32), I(-1)), r, 3);
  for (int i = 0; i < 3; i++) out(g, r[i]);
  check_ir(g, SPLIT);
  g_free(g);
}

/* max.dim's indices: the first position of the maximum (or a NaN). */
static void test_max_dim(void **state) {
  (void)state;
  G *g = g_new("g");
  int r[2];
  opn(g, "max.dim", A(V(in(g, TPK_F32, "4,S")), I(1)), r, 2);
  out(g, r[0]);
  out(g, r[1]);
  check_ir(g, MAX_DIM);
  g_free(g);
}

/* A Scalar on bf16 is applied in f32 (ATen's opmath); an in-place op's
 * result goes back to self's dtype. */
static void test_reduced_floats_and_in_place(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_BF16, "4"), y = in(g, TPK_F32, "4");
  out(g, op(g, "add_", A(V(op(g, "mul", A(V(x), F(0.1)))), V(y))));
  check_ir(g, BF16);
  g_free(g);
}

static void test_where_broadcasts(void **state) {
  (void)state;
  G *g = g_new("g");
  int c = in(g, TPK_BOOL, "N,1"), x = in(g, TPK_F32, "3");
  out(g, op(g, "where", A(V(c), V(x), F(0.0))));
  check_ir(g, WHERE);
  g_free(g);
}

static void test_nll_loss(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "N,10"), t = in(g, TPK_I32, "N");
  int r[2];
  opn(g, "nll_loss_forward", A(V(x), V(t), NONE, I(1), I(-100)), r, 2);
  out(g, r[0]);
  out(g, r[1]);
  check_ir(g, NLL);
  g_free(g);
}


/* ---- Numerics (through the reference interpreter) -------------------------------- */

/* softmax, log-softmax, layer norm (forward and backward) and GELU of a
 * [B, 5] input at two batch sizes, against the formulas in double. */
static void test_numerics_rows(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "B,5"), w = in(g, TPK_F32, "5"), b = in(g, TPK_F32, "5"), dy = in(g, TPK_F32, "B,5");
  out(g, op(g, "_softmax", A(V(x), I(1), B(false))));
  out(g, op(g, "_log_softmax", A(V(x), I(-1), B(false))));
  int ln[3], bw[3];
  opn(g, "native_layer_norm", A(V(x), INTS(5), V(w), V(b), F(1e-5)), ln, 3);
  out(g, ln[0]);
  opn(g, "native_layer_norm_backward", A(V(dy), V(x), INTS(5), V(ln[1]), V(ln[2]), V(w), V(b), INTS(1, 1, 1)), bw, 3);
  for (int i = 0; i < 3; i++) out(g, bw[i]);
  out(g, op(g, "gelu", A(V(x))));
  for (int rows = 1; rows <= 3; rows += 2) {
    float xs[15], ws[5], bs[5], dys[15], o[7][15];
    for (int i = 0; i < rows * 5; i++) xs[i] = (float)sin(1.7 * i + rows), dys[i] = (float)cos(0.9 * i);
    for (int j = 0; j < 5; j++) ws[j] = 0.5f + 0.25f * (float)j, bs[j] = 0.1f * (float)j - 0.2f;
    char syms[16];
    snprintf(syms, sizeof syms, "B=%d", rows);
    run(g, syms, (void *[]){xs, ws, bs, dys}, (void *[]){o[0], o[1], o[2], o[3], o[4], o[5], o[6]});
    double soft[15], logsoft[15], norm[15], dx[15], dw[5] = {0}, db[5] = {0}, gelu[15];
    for (int r = 0; r < rows; r++) {
      const float *v = xs + 5 * r;
      double mx = -INFINITY, sum = 0, mean = 0, var = 0;
      for (int j = 0; j < 5; j++) mx = fmax(mx, v[j]);
      for (int j = 0; j < 5; j++) sum += exp(v[j] - mx);
      for (int j = 0; j < 5; j++) soft[5 * r + j] = exp(v[j] - mx) / sum, logsoft[5 * r + j] = v[j] - mx - log(sum);
      for (int j = 0; j < 5; j++) mean += v[j] / 5.0;
      for (int j = 0; j < 5; j++) var += (v[j] - mean) * (v[j] - mean) / 5.0;
      double rstd = 1 / sqrt(var + 1e-5), xhat[5], gw[5], mg = 0, mgx = 0;
      for (int j = 0; j < 5; j++) {
        xhat[j] = (v[j] - mean) * rstd;
        norm[5 * r + j] = xhat[j] * ws[j] + bs[j];
        gw[j] = dys[5 * r + j] * ws[j];
        mg += gw[j] / 5.0;
        mgx += gw[j] * xhat[j] / 5.0;
        dw[j] += dys[5 * r + j] * xhat[j];
        db[j] += dys[5 * r + j];
        gelu[5 * r + j] = 0.5 * v[j] * (1 + erf(v[j] / sqrt(2.0)));
      }
      for (int j = 0; j < 5; j++) dx[5 * r + j] = rstd * (gw[j] - mg - xhat[j] * mgx);
    }
    assert_near(o[0], soft, 5 * rows, 1e-6, "softmax");
    assert_near(o[1], logsoft, 5 * rows, 1e-6, "log_softmax");
    assert_near(o[2], norm, 5 * rows, 1e-5, "layer_norm");
    assert_near(o[3], dx, 5 * rows, 1e-4, "layer_norm dx");
    assert_near(o[4], dw, 5, 1e-5, "layer_norm dweight");
    assert_near(o[5], db, 5, 1e-6, "layer_norm dbias");
    assert_near(o[6], gelu, 5 * rows, 1e-6, "gelu");
  }
  g_free(g);
}

/* ATen's gather, scatter, index_select, embedding's backward (padding row
 * left out), a strided slice, select, cat and max.dim with ties and NaN. */
static void test_numerics_indexing(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "3,4"), ix = in(g, TPK_I32, "2,4"), rows = in(g, TPK_I32, "3"), gr = in(g, TPK_F32, "3,2");
  out(g, op(g, "gather", A(V(x), I(0), V(ix))));
  out(g, op(g, "scatter.src", A(V(x), I(0), V(ix), V(op(g, "neg", A(V(x)))))));
  out(g, op(g, "scatter_add", A(V(x), I(1), V(op(g, "slice", A(V(ix), I(0), I(0), I(1)))), V(x))));
  out(g, op(g, "index_select", A(V(x), I(1), V(rows))));
  out(g, op(g, "embedding_dense_backward", A(V(gr), V(rows), I(5), I(2), B(false))));
  out(g, op(g, "slice", A(V(x), I(1), I(-3), NONE, I(2))));
  out(g, op(g, "select", A(V(x), I(0), I(-1))));
  out(g, op(g, "cat", A(VALS(x, x), I(1))));
  int m[2];
  opn(g, "max.dim", A(V(x), I(1), B(true)), m, 2);
  out(g, m[0]);
  out(g, m[1]);
  out(g, op(g, "argmin", A(V(x))));
  float xs[12] = {1, 5, 5, 2, /**/ 0, NAN, 3, NAN, /**/ -1, -2, -3, -4};
  int32_t ids[8] = {2, 0, 1, 2, 1, 1, 0, 0}, rs[3] = {3, 2, 0};
  float grs[6] = {1, 2, 3, 4, 5, 6};
  float o[9][24];
  int32_t idx[3], amin[1];
  run(g, "", (void *[]){xs, ids, rs, grs}, (void *[]){o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], idx, amin});
  double gather[8] = {-1, 5, 3, -4, 0, NAN, 5, 2};
  assert_near(o[0], gather, 8, 0, "gather");
  /* column j: rows ids[j], then ids[4 + j], take -x[0, j], -x[1, j] (the later write wins) */
  double scat[12];
  for (int j = 0; j < 4; j++) {
    for (int r = 0; r < 3; r++) scat[4 * r + j] = xs[4 * r + j];
    scat[4 * ids[j] + j] = -xs[j];
    scat[4 * ids[4 + j] + j] = -xs[4 + j];
  }
  assert_near(o[1], scat, 12, 0, "scatter");
  double sadd[12];
  for (int i = 0; i < 12; i++) sadd[i] = xs[i];
  for (int r = 0; r < 1; r++)
    for (int j = 0; j < 4; j++) sadd[4 * r + ids[4 * r + j]] += xs[4 * r + j];
  assert_near(o[2], sadd, 4, 0, "scatter_add");
  double isel[9] = {2, 5, 1, NAN, 3, 0, -4, -3, -1};
  assert_near(o[3], isel, 9, 0, "index_select");
  double emb[10] = {5, 6, 0, 0, 0, 0, 1, 2, 0, 0}; /* index 2 is padding: nothing */
  assert_near(o[4], emb, 10, 0, "embedding_dense_backward");
  double sl[6] = {5, 2, NAN, NAN, -2, -4};
  assert_near(o[5], sl, 6, 0, "slice");
  double se[4] = {-1, -2, -3, -4};
  assert_near(o[6], se, 4, 0, "select");
  double ca[24];
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 8; j++) ca[8 * r + j] = xs[4 * r + j % 4];
  assert_near(o[7], ca, 24, 0, "cat");
  double mx[3] = {5, NAN, -1};
  assert_near(o[8], mx, 3, 0, "max values");
  assert_int_equal(idx[0], 1); /* the first of the tied maxima */
  assert_int_equal(idx[1], 1); /* the first NaN */
  assert_int_equal(idx[2], 0);
  assert_int_equal(amin[0], 5); /* NaN is the minimum too */
  g_free(g);
}

/* Integer and rounding semantics ATen defines: floor and trunc division,
 * Python's remainder and C's fmod, round half to even, integer powers,
 * sums of bools, true division of integers. */
static void test_numerics_integers_and_rounding(void **state) {
  (void)state;
  G *g = g_new("g");
  int a = in(g, TPK_I32, "6"), b = in(g, TPK_I32, "6"), f = in(g, TPK_F32, "6"), fb = in(g, TPK_F32, "6");
  out(g, op(g, "div.Tensor_mode", A(V(a), V(b), kw("rounding_mode", STR("floor")))));
  out(g, op(g, "div.Tensor_mode", A(V(a), V(b), kw("rounding_mode", STR("trunc")))));
  out(g, op(g, "remainder.Tensor", A(V(a), V(b))));
  out(g, op(g, "fmod.Tensor", A(V(a), V(b))));
  out(g, op(g, "pow.Tensor_Scalar", A(V(a), I(3))));
  out(g, op(g, "sum", A(V(op(g, "gt", A(V(a), I(0)))))));
  out(g, op(g, "div", A(V(a), V(b))));
  out(g, op(g, "round", A(V(f))));
  out(g, op(g, "remainder.Tensor", A(V(f), V(fb))));
  out(g, op(g, "div.Tensor_mode", A(V(f), V(fb), kw("rounding_mode", STR("floor")))));
  int32_t as[6] = {7, -7, 7, -7, 0, 5}, bs[6] = {2, 2, -2, -2, 3, 5};
  float fs[6] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f}, fbs[6] = {2, -2, 2, -2, 0.75f, 1};
  int32_t fl[6], tr[6], rem[6], fm[6], pw[6], cnt[1];
  float dv[6], rd[6], frem[6], ffl[6];
  run(g, "", (void *[]){as, bs, fs, fbs}, (void *[]){fl, tr, rem, fm, pw, cnt, dv, rd, frem, ffl});
  for (int i = 0; i < 6; i++) {
    int32_t q = as[i] / bs[i], r = as[i] % bs[i];
    if (r != 0 && ((r < 0) != (bs[i] < 0))) q -= 1;
    assert_int_equal(fl[i], q);
    assert_int_equal(tr[i], as[i] / bs[i]);
    int32_t pr = as[i] % bs[i];
    if (pr != 0 && ((pr < 0) != (bs[i] < 0))) pr += bs[i];
    assert_int_equal(rem[i], pr);
    assert_int_equal(fm[i], as[i] % bs[i]);
    assert_int_equal(pw[i], as[i] * as[i] * as[i]);
    assert_true(fabsf(dv[i] - (float)as[i] / (float)bs[i]) < 1e-6f);
    assert_true(rd[i] == rintf(fs[i]));
    float m = fmodf(fs[i], fbs[i]);
    if (m != 0 && ((m < 0) != (fbs[i] < 0))) m += fbs[i];
    assert_true(fabsf(frem[i] - m) < 1e-6f);
    assert_true(ffl[i] == floorf(fs[i] / fbs[i]));
  }
  assert_int_equal(cnt[0], 3);
  g_free(g);
}

/* nll_loss forward and backward, an ignored row among them. */
static void test_numerics_nll_loss(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "N,3"), t = in(g, TPK_I32, "N"), w = in(g, TPK_F32, "3"), go = in(g, TPK_F32, "");
  int r[2];
  opn(g, "nll_loss_forward", A(V(x), V(t), V(w), I(1), I(1)), r, 2);
  out(g, r[0]);
  out(g, r[1]);
  out(g, op(g, "nll_loss_backward", A(V(go), V(x), V(t), V(w), I(1), I(1), V(r[1]))));
  float xs[12] = {-1, -2, -3, -0.5f, -1.5f, -2.5f, -INFINITY, -1, -2, -3, -4, -5};
  int32_t ts[4] = {0, 2, 1, 2}; /* row 2 (class 1) is ignored: its -inf is not read */
  float ws[3] = {1, 2, 3}, gos[1] = {2};
  float loss[1], total[1], grad[12];
  run(g, "N=4", (void *[]){xs, ts, ws, gos}, (void *[]){loss, total, grad});
  double tw = 1 + 3 + 3, want = (1 * 1 + 3 * 2.5 + 3 * 5) / tw;
  assert_near(loss, &want, 1, 1e-6, "nll loss");
  assert_near(total, &tw, 1, 0, "total weight");
  double gw[12] = {0};
  gw[0] = -1 * 2 / tw, gw[5] = -3 * 2 / tw, gw[11] = -3 * 2 / tw;
  assert_near(grad, gw, 12, 1e-6, "nll grad");
  g_free(g);
}

/* ---- Dtypes and shapes ------------------------------------------------------------ */

/* ATen's type promotion: tensors of rank >= 1 decide within a category;
 * rank-0 tensors and Scalars only when their category is higher (then as
 * the default dtype of it); true division and float functions of integers
 * give f32; comparisons bool. */
static void test_promotion(void **state) {
  (void)state;
  G *g = g_new("g");
  int f = in(g, TPK_F32, "4"), h = in(g, TPK_BF16, "4"), i = in(g, TPK_I32, "4"), u = in(g, TPK_U8, "4");
  int s8 = in(g, TPK_I8, "4"), bo = in(g, TPK_BOOL, "4"), f0 = in(g, TPK_F32, ""), h16 = in(g, TPK_F16, "4");
  static const struct {
    const char *op;
    int a;
    TpkArg b;
    const char *want;
  } CASES[] = {
      {"add", 0, {.kind = TPK_ARG_VALUE, .value = 1}, "f32[4]"},   /* f32 + bf16 */
      {"add", 1, {.kind = TPK_ARG_FLOAT, .f = 2.5}, "bf16[4]"},   /* bf16 + 2.5: the tensor's dtype */
      {"add", 2, {.kind = TPK_ARG_FLOAT, .f = 2.5}, "f32[4]"},    /* i32 + 2.5: the default float */
      {"add", 2, {.kind = TPK_ARG_INT, .i = 3}, "i32[4]"},        /* i32 + 3 */
      {"add", 3, {.kind = TPK_ARG_VALUE, .value = 4}, "i16[4]"},  /* u8 + i8 */
      {"add", 4, {.kind = TPK_ARG_INT, .i = 1000}, "i8[4]"},      /* i8 + a large int stays i8 */
      {"add", 5, {.kind = TPK_ARG_INT, .i = 1}, "i32[4]"},        /* bool + int */
      {"add", 5, {.kind = TPK_ARG_BOOL, .i = 1}, "bool[4]"},      /* bool + bool */
      {"add", 1, {.kind = TPK_ARG_VALUE, .value = 6}, "bf16[4]"}, /* bf16 + rank-0 f32: the same category */
      {"add", 2, {.kind = TPK_ARG_VALUE, .value = 6}, "f32[4]"},  /* i32 + rank-0 f32: a higher category */
      {"add", 1, {.kind = TPK_ARG_VALUE, .value = 7}, "f32[4]"},  /* bf16 + f16 */
      {"mul", 5, {.kind = TPK_ARG_VALUE, .value = 5}, "bool[4]"},
      {"div", 2, {.kind = TPK_ARG_VALUE, .value = 2}, "f32[4]"},  /* true division of integers */
      {"div", 1, {.kind = TPK_ARG_INT, .i = 2}, "bf16[4]"},
      {"eq", 2, {.kind = TPK_ARG_FLOAT, .f = 1.5}, "bool[4]"},
      {"lt", 0, {.kind = TPK_ARG_VALUE, .value = 2}, "bool[4]"},
      {"sub", 2, {.kind = TPK_ARG_VALUE, .value = 3}, "i32[4]"},
      {"rsub", 3, {.kind = TPK_ARG_INT, .i = 1}, "u8[4]"},
      {"where", -1, {.kind = TPK_ARG_NONE}, "f32[4]"},
      /* a number for a named overload's Tensor, as FX graphs write it: the Scalar overload */
      {"add.Tensor", 2, {.kind = TPK_ARG_INT, .i = 3}, "i32[4]"},
      {"mul.Tensor", 1, {.kind = TPK_ARG_FLOAT, .f = 2.5}, "bf16[4]"},
  };
  for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
    int r;
    if (CASES[k].a < 0)
      r = op(g, "where", A(V(bo), V(i), V(f)));
    else
      r = op(g, CASES[k].op, A(V(CASES[k].a), CASES[k].b));
    if (strcmp(type_of(g, r), CASES[k].want) != 0)
      fail_msg("case %zu (%s): %s, expected %s", k, CASES[k].op, type_of(g, r), CASES[k].want);
  }
  assert_int_equal(u, 3);
  assert_int_equal(h16, 7);
  assert_string_equal(type_of(g, op(g, "exp", A(V(i)))), "f32[4]");
  assert_string_equal(type_of(g, op(g, "sqrt", A(V(h)))), "bf16[4]");
  assert_string_equal(type_of(g, op(g, "neg", A(V(s8)))), "i8[4]");
  assert_string_equal(type_of(g, op(g, "sum", A(V(bo)))), "i32");
  assert_string_equal(type_of(g, op(g, "sum", A(V(h), kw("dtype", DT(TPK_F32))))), "f32");
  assert_string_equal(type_of(g, op(g, "add", A(V(f0), F(1)))), "f32");
  ir(g);
  op_fails(g, TPK_ERR_INVALID, "add", A(V(f), V(f), kw("alpha", F(2)), kw("alpha", F(3))), "'alpha' is given twice", NULL);
  op_fails(g, TPK_ERR_INVALID, "sub", A(V(bo), V(bo)), "subtraction of bool tensors", NULL);
  op_fails(g, TPK_ERR_INVALID, "add", A(V(i), V(i), kw("alpha", F(0.5))), "'alpha' must not be a floating point", NULL);
  op_fails(g, TPK_ERR_INVALID, "neg", A(V(bo)), "negation of a bool tensor bool[4]", NULL);
  op_fails(g, TPK_ERR_INVALID, "mean", A(V(i)), "mean needs a float", "i32[4]", NULL);
  g_free(g);
}



/* ---- The builder: inputs, outputs, calls of kernels --------------------------------- */

static void test_inputs_and_outputs(void **state) {
  (void)state;
  G *g = g_new("g");
  TpkValue *v;
  const TpkDim *d[TPK_MAX_RANK + 1] = {0};
  assert_int_equal(tpk_gb_input(g->gb, TPK_DTYPE_COUNT, 0, d, &v, &g->err), TPK_ERR_INVALID);
  char want[64];
  snprintf(want, sizeof want, "graph input: dtype %d is not a dtype", (int)TPK_DTYPE_COUNT);
  assert_non_null(strstr(g->err.message, want));
  assert_int_equal(tpk_gb_input(g->gb, TPK_F32, 9, d, &v, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "rank 9 is not between 0 and 8"));
  assert_int_equal(tpk_gb_input(g->gb, TPK_F32, 1, d, &v, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "dim 0 is missing"));
  d[0] = tpk_gb_dim(g->gb, "-3", &g->err);
  assert_int_equal(tpk_gb_input(g->gb, TPK_F32, 1, d, &v, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "dim 0 is -3, a size cannot be negative"));
  assert_null(tpk_gb_dim(g->gb, "B+", &g->err));
  assert_int_equal(g->err.code, TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "size 'B+' is not a size: 1:3: expected a dimension, found end of input"));
  assert_ptr_equal(tpk_gb_dim(g->gb, "S*B", &g->err), tpk_gb_dim(g->gb, "B*S", &g->err)); /* one interned dim */
  /* outputs: values of this graph, any number of times; ops may follow */
  int x = in(g, TPK_F32, "B,3");
  G *other = g_new("other");
  int y = in(other, TPK_F32, "3");
  assert_int_equal(tpk_gb_output(g->gb, other->v[y], &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "graph output: not a value of this graph"));
  g_free(other);
  check_ir(g, "func @g(%in0: f32[B,3]) -> () {\n}\n");
  int n = op(g, "neg", A(V(x)));
  out(g, n);
  out(g, x);
  ir(g);
  out(g, op(g, "exp", A(V(n))));
  check_ir(g, "func @g(%in0: f32[B,3]) -> (f32[B,3], f32[B,3], f32[B,3]) {\n"
              "  %neg = neg %in0 : f32[B,3]\n"
              "  %exp = exp %neg : f32[B,3]\n"
              "  return %neg, %in0, %exp\n"
              "}\n");
  /* a failed op leaves the sealed graph as it was */
  op_fails(g, TPK_ERR_INVALID, "mm", A(V(x), V(x)), "cannot be multiplied", NULL);
  ir(g);
  g_free(g);
}

static const char KERNELS[] =
    "kernel axpy(inout y: f32[N], x: f32[N], a: f32) -> ()\n"
    "  tune B in [64]\n"
    "{\n"
    "  for i in tiles(N, B) {\n"
    "    y[i] = y[i] + x[i] * a;\n"
    "  }\n"
    "}\n"
    "\n"
    "kernel widen(x: f32[N]) -> (y: f32[M])\n"
    "  tune B in [64]\n"
    "{\n"
    "  for i in tiles(M, B) {\n"
    "    y[i] = zeros(f32[B]);\n"
    "  }\n"
    "}\n"
    "\n"
    "kernel rowsum(x: f32[R, C]) -> (y: f32[R])\n"
    "{\n"
    "  for i in 0..R {\n"
    "    y[i] = sum(x[i, :], axis=0);\n"
    "  }\n"
    "}\n";

static TpkStatus call(G *g, const TpkFunc *k, int nargs, const TpkArg *args, int *ids, int max) {
  TpkValue *outs[8];
  int n = 0;
  TpkStatus st = tpk_gb_call(g->gb, k, args, nargs, g->v, g->n, outs, max, &n, &g->err);
  for (int i = 0; st == TPK_OK && i < n; i++) ids[i] = add_value(g, outs[i]);
  return st;
}

#define CALL_FAILS(k, args, ...)                                                         \
  do {                                                                                   \
    int ids_[8], before_ = op_count(g);                                                  \
    assert_int_equal(call(g, k, args, ids_, 8), TPK_ERR_INVALID);                        \
    const char *frags_[] = {__VA_ARGS__, NULL};                                          \
    for (int f_ = 0; frags_[f_]; f_++)                                                   \
      if (!strstr(g->err.message, frags_[f_])) fail_msg("\"%s\" lacks \"%s\"", g->err.message, frags_[f_]); \
    assert_int_equal(op_count(g), before_);                                              \
  } while (0)

static void test_calls(void **state) {
  (void)state;
  TestCompile tc;
  test_compile(&tc, "k.tpk", KERNELS, NULL);
  assert_non_null(tc.module);
  const TpkFunc *axpy = tpk_module_find(tc.module, "axpy"), *widen = tpk_module_find(tc.module, "widen");
  const TpkFunc *rowsum = tpk_module_find(tc.module, "rowsum");
  G *g = g_new("g");
  int y = in(g, TPK_F32, "S"), x = in(g, TPK_F32, "S"), a = in(g, TPK_F32, ""), ai = in(g, TPK_I32, "");
  int r[8];
  assert_int_equal(call(g, axpy, A(V(y), V(x), F(2)), r, 8), TPK_OK);
  assert_int_equal(call(g, axpy, A(V(r[0]), kw("a", V(ai)), kw("x", V(x))), r + 1, 7), TPK_OK);
  assert_int_equal(call(g, axpy, A(V(r[1]), V(x), V(a)), r + 2, 6), TPK_OK);
  out(g, r[2]);
  check_ir(g, "func @g(%in0: f32[S], %in1: f32[S], %in2: f32, %in3: i32) -> (f32[S]) {\n"
              "  %0 = const {value=2.0} : f32\n"
              "  %y = call %in0, %in1, %0 {callee=\"axpy\"} : f32[S]\n"
              "  %1 = convert %in3 : f32\n"
              "  %y.1 = call %y, %in1, %1 {callee=\"axpy\"} : f32[S]\n"
              "  %y.2 = call %y.1, %in1, %in2 {callee=\"axpy\"} : f32[S]\n"
              "  return %y.2\n"
              "}\n");
  assert_int_equal(tpk_gb_module(g->gb)->nfuncs, 2); /* one clone, called three times */
  int m = in(g, TPK_F32, "4,S");
  assert_int_equal(call(g, rowsum, A(V(m)), r, 8), TPK_OK);
  assert_string_equal(type_of(g, r[0]), "f32[4]");
  int v4 = in(g, TPK_F32, "4"), i4 = in(g, TPK_I32, "S");
  CALL_FAILS(axpy, A(V(y), V(x)), "kernel 'axpy': argument 'a' is missing");
  CALL_FAILS(axpy, A(V(y), V(x), F(1), F(2)), "kernel 'axpy' takes 3 arguments, got more");
  CALL_FAILS(axpy, A(V(y), V(x), kw("z", F(1))), "kernel 'axpy' has no input parameter 'z'");
  CALL_FAILS(axpy, A(V(y), V(x), kw("y", V(y))), "kernel 'axpy': argument 'y' is given twice");
  CALL_FAILS(axpy, A(V(y), V(99), F(1)), "kernel 'axpy': argument 'x': 99 is not a value of this graph");
  CALL_FAILS(axpy, A(V(y), V(x), STR("one")), "kernel 'axpy': argument 'a' must be a number or a rank-0 value");
  CALL_FAILS(axpy, A(F(1), V(x), F(1)), "kernel 'axpy': argument 'y' must be a tensor value");
  CALL_FAILS(axpy, A(V(y), V(x), V(v4)), "kernel 'axpy': argument 'a' must be a scalar (f32), got f32[4]");
  CALL_FAILS(axpy, A(V(i4), V(x), F(1)), "kernel 'axpy': argument 'y' must be f32[N], got i32[S]");
  CALL_FAILS(axpy, A(V(y), V(v4), F(1)), "kernel 'axpy': argument 'x' is f32[4], but its dim 0 (N) must be S, as the arguments before it bind it");
  CALL_FAILS(widen, A(V(x)), "kernel 'widen': the size of output 'y' (f32[M]) depends on M, which no argument gives");
  TpkValue *outs[1];
  int n;
  TpkArg one[] = {V(m)};
  assert_int_equal(tpk_gb_call(g->gb, rowsum, one, 1, g->v, g->n, outs, 0, &n, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "kernel 'rowsum' gives 1 results, room was given for 0"));
  assert_int_equal(tpk_gb_call(g->gb, tpk_gb_func(g->gb), one, 1, g->v, g->n, outs, 1, &n, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "graph call: not a kernel"));
  ir(g);
  g_free(g);
  /* a graph named as the kernel it calls: the kernel's clone is renamed */
  g = g_new("rowsum");
  m = in(g, TPK_F32, "2,3");
  assert_int_equal(call(g, rowsum, A(V(m)), r, 8), TPK_OK);
  out(g, r[0]);
  assert_non_null(strstr(ir(g), "{callee=\"rowsum.2\"}"));
  assert_non_null(tpk_module_find(tpk_gb_module(g->gb), "rowsum.2"));
  g_free(g);
  test_compile_free(&tc);
}

/* ---- Attention: calls of the standard flash-attention kernels ------------------------ */

static TestCompile attention;

static const TpkFunc *attention_lookup(void *ctx, const char *name, TpkError *err) {
  (void)ctx;
  const TpkFunc *k = tpk_module_find(attention.module, name);
  if (!k) tpk_error(err, TPK_ERR_INVALID, "no kernel '%s'", name);
  return k;
}

static void test_attention(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s/kernels/attention.tpk", test_root());
  char *text = test_read_file(path, NULL);
  assert_non_null(text);
  test_compile(&attention, "attention.tpk", text, NULL);
  free(text);
  assert_non_null(attention.module);
  G *g = g_new("g");
  int q = in(g, TPK_F32, "B,4,S,16"), k = in(g, TPK_F32, "B,2,S,16");
  op_fails(g, TPK_ERR_UNSUPPORTED, "_scaled_dot_product_flash_attention_for_cpu", A(V(q), V(k), V(k)),
           "calls the standard kernel 'flash_attention', which this builder cannot reach", NULL);
  tpk_gb_set_kernel_lookup(g->gb, attention_lookup, NULL);
  int r[2];
  opn(g, "_scaled_dot_product_flash_attention_for_cpu", A(V(q), V(k), V(k), kw("is_causal", B(true))), r, 2);
  out(g, r[0]);
  out(g, r[1]);
  check_ir(g, SDPA);
  g_free(g);
  g = g_new("g");
  tpk_gb_set_kernel_lookup(g->gb, attention_lookup, NULL);
  int x = in(g, TPK_F32, "1,2,S,8"), lse = in(g, TPK_F32, "1,2,S");
  int d[3];
  opn(g, "_scaled_dot_product_flash_attention_for_cpu_backward", A(V(x), V(x), V(x), V(x), V(x), V(lse), F(0), B(false), kw("scale", F(0.5))), d, 3);
  for (int i = 0; i < 3; i++) out(g, d[i]);
  check_ir(g, SDPA_BWD);
  /* what the kernels cannot do is refused, naming it */
  int h = in(g, TPK_BF16, "1,2,S,8"), t = in(g, TPK_F32, "1,2,T,8"), k3 = in(g, TPK_F32, "1,3,S,8"), v3 = in(g, TPK_F32, "2,8");
  int q5 = in(g, TPK_F32, "1,5,S,8"), kb = in(g, TPK_F32, "2,2,S,8");
  const char *sdpa = "_scaled_dot_product_flash_attention_for_cpu";
  op_fails(g, TPK_ERR_UNSUPPORTED, sdpa, A(V(x), V(x), V(x), F(0.1)), "dropout_p=0.1: tpk's attention has no dropout", NULL);
  op_fails(g, TPK_ERR_UNSUPPORTED, sdpa, A(V(x), V(x), V(x), kw("attn_mask", V(x))), "an attn_mask is not supported", NULL);
  op_fails(g, TPK_ERR_INVALID, sdpa, A(V(v3), V(x), V(x)), "query f32[2,8], key f32[1,2,S,8] and value f32[1,2,S,8] must be 4-D", NULL);
  op_fails(g, TPK_ERR_INVALID, sdpa, A(V(x), V(h), V(h)), "must have one dtype", NULL);
  op_fails(g, TPK_ERR_INVALID, sdpa, A(V(x), V(x), V(t)), "key f32[1,2,S,8] and value f32[1,2,T,8] must have one shape", NULL);
  op_fails(g, TPK_ERR_INVALID, sdpa, A(V(x), V(kb), V(kb)), "query f32[1,2,S,8] and key f32[2,2,S,8] differ in batch or head size", NULL);
  op_fails(g, TPK_ERR_INVALID, sdpa, A(V(q5), V(k3), V(k3)), "query's heads (5) must be a multiple of key's (3)", NULL);
  op_fails(g, TPK_ERR_UNSUPPORTED, sdpa, A(V(x), V(t), V(t), F(0), B(true)),
           "is_causal with query length S and key length T: PyTorch aligns the mask top-left", NULL);
  op_fails(g, TPK_ERR_INVALID, "_scaled_dot_product_flash_attention_for_cpu_backward",
           A(V(x), V(x), V(x), V(x), V(t), V(lse), F(0), B(false)), "out f32[1,2,T,8] and grad_out f32[1,2,S,8] must have query's shape", NULL);
  op_fails(g, TPK_ERR_INVALID, "_scaled_dot_product_flash_attention_for_cpu_backward",
           A(V(x), V(x), V(x), V(x), V(x), V(v3), F(0), B(false)), "logsumexp f32[2,8] must be [B, H, L] of query", NULL);
  g_free(g);
  test_compile_free(&attention);
}

/* ---- Symbolic sizes through the shape rules ------------------------------------------ */

static void test_symbolic_shapes(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "B,S,64"), c = in(g, TPK_F32, "B,1"), r = in(g, TPK_F32, "S"), w = in(g, TPK_F32, "64,10");
  int s3 = in(g, TPK_F32, "S,3"), t3 = in(g, TPK_F32, "T,3");
  TpkArg bs = {.kind = TPK_ARG_INTS, .n = 2, .ints = (int64_t[]){0, 64}, .syms = (const char *[]){"B*S", NULL}};
  assert_string_equal(type_of(g, op(g, "add", A(V(c), V(r)))), "f32[B,S]");
  int flat = op(g, "view", A(V(x), bs));
  assert_string_equal(type_of(g, flat), "f32[B*S,64]");
  assert_string_equal(type_of(g, op(g, "view", A(V(x), INTS(-1, 64)))), "f32[B*S,64]");
  TpkArg s_minus = {.kind = TPK_ARG_INTS, .n = 2, .ints = (int64_t[]){0, -1}, .syms = (const char *[]){"S", NULL}};
  assert_string_equal(type_of(g, op(g, "view", A(V(x), s_minus))), "f32[S,B*64]");
  assert_string_equal(type_of(g, op(g, "mm", A(V(flat), V(w)))), "f32[B*S,10]");
  assert_string_equal(type_of(g, op(g, "sum", A(V(x), INTS(0, 1)))), "f32[64]");
  assert_string_equal(type_of(g, op(g, "mean", A(V(x), INTS(1), B(true)))), "f32[B,1,64]");
  int st = op(g, "cat", A(VALS(s3, t3)));
  assert_string_equal(type_of(g, st), "f32[S+T,3]");
  TpkArg sizes = {.kind = TPK_ARG_INTS, .n = 2, .ints = (int64_t[]){0, 0}, .syms = (const char *[]){"T", "S"}};
  int parts[2];
  opn(g, "split_with_sizes", A(V(st), sizes), parts, 2);
  assert_string_equal(type_of(g, parts[1]), "f32[S,3]");
  assert_string_equal(type_of(g, op(g, "slice", A(V(s3), I(0), I(1), SYM("S")))), "f32[S-1,3]");
  assert_string_equal(type_of(g, op(g, "slice", A(V(s3), I(0), NONE, I(-2)))), "f32[S-2,3]");
  assert_string_equal(type_of(g, op(g, "slice", A(V(s3), I(0), I(0), I(INT64_MAX), I(2)))), "f32[cdiv(S,2),3]");
  assert_string_equal(type_of(g, op(g, "arange", A(SYM("S")))), "i32[S]");
  assert_string_equal(type_of(g, op(g, "arange", A(I(1), SYM("S"), I(2)))), "i32[cdiv(S-1,2)]");
  TpkArg b3 = {.kind = TPK_ARG_INTS, .n = 2, .ints = (int64_t[]){0, 3}, .syms = (const char *[]){"B", NULL}};
  assert_string_equal(type_of(g, op(g, "expand", A(V(op(g, "unsqueeze", A(V(r), I(0)))), INTS(4, -1)))), "f32[4,S]");
  assert_string_equal(type_of(g, op(g, "new_zeros", A(V(x), b3))), "f32[B,3]");
  TpkArg bsz = {.kind = TPK_ARG_INTS, .n = 3, .ints = (int64_t[]){0, 0, 64}, .syms = (const char *[]){"B", "S", NULL}};
  assert_string_equal(type_of(g, op(g, "select_backward", A(V(op(g, "select", A(V(x), I(1), I(0)))), bsz, I(1), I(0)))), "f32[B,S,64]");
  assert_string_equal(type_of(g, op(g, "flatten", A(V(x)))), "f32[B*S*64]");
  ir(g);
  g_free(g);
}

/* ---- Errors: every refusal names the op, the argument, shapes and dtypes ------------ */

#define BAD(op, ...) op_fails(g, TPK_ERR_INVALID, op, __VA_ARGS__, NULL)
#define NOPE(op, ...) op_fails(g, TPK_ERR_UNSUPPORTED, op, __VA_ARGS__, NULL)

/* Arguments that do not fit the schema, and the checks of the shared
 * helpers (promotion, broadcasting, dims, sizes). */
static void test_errors_arguments(void **state) {
  (void)state;
  G *g = g_new("g");
  int f = in(g, TPK_F32, "4,3"), v3 = in(g, TPK_F32, "3"), f8 = in(g, TPK_F8E4M3, "4,3");
  int huge = in(g, TPK_F32, "4611686018427387904,4"), wide = in(g, TPK_F32, "5000000000,1");
  BAD("add", A(V(f), STR("x")), "add: the arguments fit no overload: add.Tensor: argument 'other' must be a tensor, got a string",
      "add.Scalar: argument 'other' must be a Scalar (a number or a rank-0 tensor), got a string");
  BAD("add.Scalar", A(V(f), STR("x")), "add: the arguments fit no overload: add.Scalar: argument 'other' must be a Scalar",
      "; add.Tensor: argument 'other' must be a tensor, got a string"); /* the named overload first */
  BAD("add.Tensor", A(V(f), V(f), V(f)), "takes 2 positional arguments, got more");
  BAD("add.Tensor", A(V(f), V(f), kw("beta", F(1))), "has no argument 'beta'");
  BAD("neg", A(V(99)), "argument 'self': 99 is not a value of this graph");
  BAD("neg", NOARGS, "argument 'self' (a tensor) is missing");
  BAD("transpose", A(V(f), SYM("S"), I(0)), "argument 'dim0' must be an int, got a symbolic size");
  BAD("slice", A(V(f), I(0), I(0), I(2), SYM("S")), "argument 'step' must be a number here, got the size S");
  BAD("select", A(V(f), I(0), SYM("S+")), "argument 'index': size 'S+' is not a size");
  BAD("view", A(V(f), ((TpkArg){.kind = TPK_ARG_INTS, .n = 1, .ints = (int64_t[]){0}, .syms = (const char *[]){"*"}})),
      "argument 'size', entry 0: size '*' is not a size");
  BAD("view", A(V(f), INTS(-2, 6)), "argument 'size', entry 0: a size cannot be -2");
  BAD("cat", A(VALS(f, 99)), "argument 'tensors', entry 1: 99 is not a value of this graph");
  int64_t many[70] = {0};
  BAD("permute", A(V(f), ((TpkArg){.kind = TPK_ARG_INTS, .n = 70, .ints = many})), "argument 'dims' has 70 entries, at most 64");
  BAD("gelu", A(V(f), kw("approximate", I(1))), "argument 'approximate' must be a string, got an int");
  BAD("sum", A(V(f), kw("dtype", STR("f32"))), "argument 'dtype' must be a dtype or None, got a string");
  BAD("add", A(V(f8), V(f)), "add: promotion of f8e4m3 with f32 is not supported (as in PyTorch)");
  BAD("add", A(V(f), V(in(g, TPK_F32, "5"))), "cannot broadcast self f32[4,3] with other f32[5] (dim -1: 3 vs 5)");
  BAD("add", A(V(in(g, TPK_F32, "S")), V(in(g, TPK_F32, "T"))), "cannot broadcast self f32[S] with other f32[T] (dim -1: S vs T)");
  BAD("transpose", A(V(f), I(2), I(0)), "transpose: dim0 2 is out of range for f32[4,3] (rank 2)");
  BAD("sum", A(V(f), INTS(0, -2)), "dim 0 appears more than once in 'dim'");
  BAD("view", A(V(huge), INTS(-1)), "the element count of [4611686018427387904,4] overflows");
  NOPE("select", A(V(wide), I(0), I(-1)), "the size 4999999999 does not fit i32");
  BAD("select_backward", A(V(v3), INTS(3, 4), I(5), I(0)), "dim 5 is out of range for rank 2");
  /* in place: self keeps its shape and dtype */
  BAD("add_", A(V(v3), V(f)), "add_: the result's shape [4,3] differs from self f32[3]");
  BAD("add_", A(V(in(g, TPK_I32, "3")), V(v3)), "add_: the result's dtype f32 cannot be cast to self's i32 (i32[3])");
  g_free(g);
}

/* Each op's own checks. */
static void test_errors_ops(void **state) {
  (void)state;
  G *g = g_new("g");
  int f = in(g, TPK_F32, "4,3"), v3 = in(g, TPK_F32, "3"), i = in(g, TPK_I32, "4,3"), bo = in(g, TPK_BOOL, "4,3");
  int s0 = in(g, TPK_F32, ""), m = in(g, TPK_F32, "3,5"), b3 = in(g, TPK_F32, "2,3,5"), h = in(g, TPK_BF16, "4,3");
  int iv = in(g, TPK_I32, "4"), bm = in(g, TPK_BOOL, "3,4"), r8 = in(g, TPK_F32, "1,1,1,1,1,1,1,2"), sym = in(g, TPK_F32, "S,3");
  int b3b = in(g, TPK_F32, "3,5,2"), big = in(g, TPK_F32, "2,4,5");
  /* arithmetic */
  BAD("sub", A(V(bo), V(bo)), "subtraction of bool tensors is not supported");
  BAD("add", A(V(i), V(i), kw("alpha", F(0.5))), "for integral input tensors, argument 'alpha' must not be a floating point");
  BAD("div", A(V(f), V(f), kw("rounding_mode", STR("ceil"))), "rounding_mode must be None, \"trunc\" or \"floor\", got \"ceil\"");
  BAD("neg", A(V(bo)), "negation of a bool tensor bool[4,3] is not supported");
  BAD("relu", A(V(bo)), "relu of a bool tensor bool[4,3] is not supported");
  NOPE("pow", A(V(i), V(i)), "integer powers with a tensor exponent (i32[4,3]) are not supported");
  BAD("pow", A(V(i), I(-1)), "integers to negative integer powers are not allowed");
  BAD("remainder", A(V(bo), V(bo)), "remainder: is not supported for bool tensors");
  BAD("bitwise_and", A(V(f), V(f)), "needs integer or bool operands, got f32");
  BAD("bitwise_not", A(V(f)), "needs an integer or bool tensor, got f32[4,3]");
  BAD("clamp", A(V(f)), "at least one of 'min' and 'max' must be given");
  BAD("addcdiv", A(V(i), V(i), V(i)), "integer division with addcdiv is not supported (as in PyTorch): tensor1 i32[4,3], tensor2 i32[4,3]");
  BAD("addcmul", A(V(i), V(i), V(i), kw("value", F(0.5))), "for integer tensors, 'value' must be an integer");
  BAD("lerp", A(V(f), V(h), F(0.5)), "self f32[4,3] and end bf16[4,3] must have one dtype");
  BAD("lerp.Tensor", A(V(f), V(f), V(h)), "weight bf16[4,3] must have self's dtype f32");
  BAD("gelu", A(V(i)), "self must be a float tensor, got i32[4,3]");
  BAD("gelu", A(V(f), kw("approximate", STR("erf"))), "approximate must be \"none\" or \"tanh\", got \"erf\"");
  BAD("mse_loss", A(V(i), V(i)), "needs float tensors, got i32");
  BAD("mse_loss", A(V(f), V(f), I(3)), "reduction must be 0, 1 or 2, got 3");
  /* matrix products */
  BAD("mm", A(V(v3), V(m)), "self and mat2 must be 2-D, got f32[3] and f32[3,5]");
  BAD("mm", A(V(h), V(m)), "self bf16[4,3] and mat2 f32[3,5] must have one dtype");
  BAD("mm", A(V(bo), V(bm)), "matrix products of bool tensors are not supported");
  BAD("mm", A(V(f), V(f)), "self f32[4,3] and mat2 f32[4,3] cannot be multiplied (3 vs 4)");
  BAD("bmm", A(V(b3), V(b3b)), "self f32[2,3,5] and mat2 f32[3,5,2] differ in batch size");
  BAD("addmm", A(V(h), V(f), V(m)), "self bf16[4,3] and mat1 f32[4,3] must have one dtype");
  BAD("addmm", A(V(big), V(f), V(m)), "self f32[2,4,5] does not broadcast to the product's shape f32[4,5]");
  /* reductions */
  BAD("mean", A(V(i)), "mean needs a float input or dtype, got i32[4,3]");
  BAD("mean", A(V(f), kw("dtype", DT(TPK_I32))), "mean needs a float input or dtype, got f32[4,3] with dtype=i32");
  BAD("_softmax", A(V(i), I(0), B(false)), "needs a float input, got i32[4,3]");
  BAD("_softmax_backward_data", A(V(f), V(m), I(0), DT(TPK_F32)), "grad_output f32[4,3] and output f32[3,5] must have one shape");
  /* views */
  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 12};
  BAD("view", A(V(f), ((TpkArg){.kind = TPK_ARG_INTS, .n = 9, .ints = nine})), "view: rank 9 is more than 8");
  BAD("view", A(V(f), INTS(-1, -1)), "only one dimension can be -1");
  BAD("view", A(V(f), INTS(-1, 5)), "view: shape [-1,5] is invalid for f32[4,3] (12 elements)");
  BAD("view", A(V(f), INTS(5, 2)), "view: shape [5,2] is invalid for f32[4,3] (12 elements)");
  BAD("view", A(V(sym), INTS(-1, 2)), "view: shape [-1,2] is invalid for f32[S,3] (S*3 elements)");
  BAD("expand", A(V(f), INTS(3)), "size has 1 entries; f32[4,3] needs 2 to 8");
  BAD("expand", A(V(f), INTS(-1, 4, 3)), "-1 is not allowed for the new leading dim 0");
  BAD("expand", A(V(f), INTS(4, 5)), "cannot expand f32[4,3] to [4,5]: dim 1 is 3, not 1");
  BAD("permute", A(V(f), INTS(0)), "dims has 1 entries for f32[4,3]");
  BAD("permute", A(V(f), INTS(1, -1)), "dims repeats dim 1");
  BAD("t", A(V(b3)), "t() expects a tensor of rank <= 2, got f32[2,3,5]");
  BAD("unsqueeze", A(V(r8), I(0)), "f32[1,1,1,1,1,1,1,2] already has the largest rank, 8");
  BAD("flatten", A(V(b3), I(2), I(1)), "start_dim 2 comes after end_dim 1");
  BAD("unflatten", A(V(f), I(1), INTS(-1, -1)), "only one of sizes can be -1");
  BAD("unflatten", A(V(f), I(1), INTS(2, -1)), "sizes [2,-1] do not divide dim 1 (3) of f32[4,3]");
  BAD("unflatten", A(V(f), I(1), INTS(2, 2)), "sizes [2,2] do not make dim 1 (3) of f32[4,3]");
  BAD("unflatten", A(V(r8), I(7), INTS(1, 2)), "the result would have rank 9, more than 8");
  BAD("expand_as", A(V(f), V(v3)), "self f32[4,3] does not expand to other f32[3]");
  BAD("repeat", A(V(f), INTS(2)), "repeats has 1 entries, fewer than the rank of f32[4,3]");
  NOPE("repeat", A(V(f), INTS(1, 1, 1, 1, 2)), "repeat over 5 dims (at most 4)");
  BAD("select", A(V(s0), I(0), I(0)), "cannot select from a rank-0 tensor f32");
  BAD("select", A(V(f), I(1), I(3)), "index 3 is out of range for dim 1 of f32[4,3]");
  BAD("slice", A(V(s0)), "cannot slice a rank-0 tensor f32");
  BAD("slice", A(V(f), I(0), I(0), I(4), I(0)), "step must be positive, got 0");
  BAD("split_with_sizes", A(V(s0), INTS(1)), "cannot split a rank-0 tensor f32");
  BAD("split_with_sizes", A(V(f), INTS(1, 1), I(1)), "split_sizes [1,1] sum to 2, but dim 1 of f32[4,3] is 3");
  NOPE("split", A(V(sym), I(2)), "dim 0 of f32[S,3] is symbolic, but the number of results depends on it");
  NOPE("split", A(V(f), SYM("S")), "a symbolic split_size (S) is not supported");
  BAD("split", A(V(f), I(0)), "split size 0 must be positive");
  NOPE("split", A(V(in(g, TPK_F32, "100")), I(1)), "100 pieces (at most 64)");
  BAD("chunk", A(V(s0), I(2)), "cannot chunk a rank-0 tensor f32");
  BAD("chunk", A(V(f), I(0)), "chunks must be positive, got 0");
  BAD("unbind", A(V(s0)), "cannot unbind a rank-0 tensor f32");
  BAD("cat", A(((TpkArg){.kind = TPK_ARG_VALUES, .n = 0})), "tensors must not be empty");
  BAD("cat", A(VALS(s0, s0)), "zero-dimensional tensor f32 cannot be concatenated");
  BAD("cat", A(VALS(f, b3)), "tensors f32[4,3] and f32[2,3,5] differ in rank");
  BAD("cat", A(VALS(f, m)), "tensors f32[4,3] and f32[3,5] differ in dim 1 (only dim 0 may differ)");
  BAD("stack", A(((TpkArg){.kind = TPK_ARG_VALUES, .n = 0})), "tensors must not be empty");
  BAD("stack", A(VALS(f, m)), "tensors f32[4,3] and f32[3,5] must have one shape");
  BAD("_local_scalar_dense", A(V(f)), "needs a tensor of one element, got f32[4,3]");
  BAD("copy", A(V(v3), V(f)), "src f32[4,3] does not broadcast to self f32[3]");
  /* selection and creation */
  BAD("where", A(V(f), V(f), V(f)), "condition must be bool, got f32[4,3]");
  BAD("masked_fill", A(V(f), V(f), F(0)), "mask must be bool, got f32[4,3]");
  BAD("masked_fill.Tensor", A(V(f), V(bo), V(v3)), "value must be a rank-0 tensor, got f32[3]");
  BAD("masked_fill", A(V(v3), V(bo), F(0)), "mask bool[4,3] does not broadcast to self f32[3]");
  BAD("fill.Tensor", A(V(f), V(v3)), "value must be a rank-0 tensor, got f32[3]");
  BAD("full", A(INTS(1, 1, 1, 1, 1, 1, 1, 1, 1), F(0)), "argument 'size' has 9 dims, at most 8 are allowed");
  BAD("full", A(INTS(-1), F(0)), "argument 'size', entry 0: -1 is not a size here");
  NOPE("arange", A(V(s0)), "start, end and step must be numbers or symbolic sizes, not tensors");
  NOPE("arange", A(I(0), I(10), SYM("S")), "a symbolic step (S) is not supported");
  BAD("arange", A(I(0), I(10), I(0)), "step must be nonzero");
  NOPE("arange", A(F(0.5), SYM("S"), I(1)), "symbolic bounds with float arguments are not supported");
  BAD("arange", A(F(0), F(1), F(-0.5)), "the bounds 0..1 with step -0.5 give no valid length");
  BAD("arange", A(I(0), I(10), I(-1)), "upper bound 10 and step -1 have inconsistent signs");
  /* norms */
  BAD("native_layer_norm", A(V(f), INTS(2, 4, 3), NONE, NONE, F(1e-5)), "normalized_shape [2,4,3] does not fit input f32[4,3]");
  BAD("native_layer_norm", A(V(f), INTS(4), NONE, NONE, F(1e-5)), "input f32[4,3] does not end in normalized_shape [4]");
  BAD("native_layer_norm", A(V(i), INTS(3), NONE, NONE, F(1e-5)), "input must be a float tensor, got i32[4,3]");
  BAD("native_layer_norm", A(V(f), INTS(3), V(f), NONE, F(1e-5)), "weight f32[4,3] must have normalized_shape [3]");
  BAD("native_layer_norm", A(V(f), INTS(3), NONE, V(iv), F(1e-5)), "bias i32[4] must have normalized_shape [3]");
  int mean = in(g, TPK_F32, "4,1");
  BAD("native_layer_norm_backward", A(V(f), V(f), INTS(3), V(mean), V(mean), NONE, NONE, INTS(1, 1)),
      "output_mask must have 3 entries, got 2");
  BAD("native_layer_norm_backward", A(V(i), V(i), INTS(3), V(mean), V(mean), NONE, NONE, INTS(1, 1, 1)),
      "input must be a float tensor, got i32[4,3]");
  BAD("native_layer_norm_backward", A(V(m), V(f), INTS(3), V(mean), V(mean), NONE, NONE, INTS(1, 1, 1)),
      "grad_out f32[3,5] must have input's shape f32[4,3]");
  BAD("native_layer_norm_backward", A(V(f), V(f), INTS(3), V(f), V(mean), NONE, NONE, INTS(1, 1, 1)),
      "mean f32[4,3] and rstd f32[4,1] must be [4,1]");
  BAD("native_layer_norm_backward", A(V(f), V(f), INTS(3), V(mean), V(mean), V(f), NONE, INTS(1, 1, 1)),
      "weight f32[4,3] must have normalized_shape [3]");
  /* gathers and scatters */
  BAD("gather", A(V(f), I(0), V(f)), "index must be an integer tensor, got f32[4,3]");
  BAD("gather", A(V(f), I(0), V(iv)), "index i32[4] must have the rank of self f32[4,3]");
  BAD("gather", A(V(v3), I(0), V(in(g, TPK_I32, "2,4"))), "index i32[2,4] must have the rank of self f32[3]");
  BAD("gather", A(V(f), I(0), V(in(g, TPK_I32, "2,5"))), "index i32[2,5] is larger than self f32[4,3] in dim 1");
  NOPE("scatter.reduce", A(V(f), I(0), V(i), V(f), kw("reduce", STR("multiply"))), "reduce=\"multiply\" is not supported (\"add\" is)");
  BAD("scatter.src", A(V(f), I(0), V(i), V(v3)), "src f32[3] must have the rank of index i32[4,3]");
  BAD("index_select", A(V(f), I(0), V(i)), "index must be a vector, got i32[4,3]");
  BAD("embedding", A(V(v3), V(iv)), "weight must be 2-D, got f32[3]");
  NOPE("embedding", A(V(f), V(in(g, TPK_I32, "1,1,1,1,1,1,1,2"))), "the result would have rank 9");
  NOPE("embedding_dense_backward", A(V(f), V(iv), I(5), I(-1), B(true)), "scale_grad_by_freq=True is not supported");
  BAD("embedding_dense_backward", A(V(f), V(i), I(5), I(-1), B(false)), "grad_output f32[4,3] must be indices i32[4,3] with one more dim");
  BAD("select_backward", A(V(v3), ((TpkArg){.kind = TPK_ARG_INTS, .n = 0}), I(0), I(0)), "input_sizes must not be empty");
  BAD("select_backward", A(V(v3), INTS(4, 5), I(0), I(0)), "grad_output f32[3] does not fit input_sizes [4,5] without dim 0");
  BAD("slice_backward", A(V(v3), ((TpkArg){.kind = TPK_ARG_INTS, .n = 0}), I(0), I(0), I(3), I(1)), "input_sizes must not be empty");
  BAD("slice_backward", A(V(v3), INTS(5), I(0), I(0), I(3), I(0)), "step must be positive, got 0");
  BAD("slice_backward", A(V(v3), INTS(5), I(0), I(1), I(3), I(1)), "grad_output f32[3] must be [2] (input_sizes with the slice's length)");
  /* losses */
  int t = in(g, TPK_I32, "4");
  BAD("nll_loss_forward", A(V(f), V(t), NONE, I(3), I(-100)), "reduction must be 0 (none), 1 (mean) or 2 (sum), got 3");
  BAD("nll_loss_forward", A(V(b3), V(t), NONE, I(1), I(-100)), "self f32[2,3,5] and target i32[4] must be [N, C] and [N], or [C] and []");
  BAD("nll_loss_forward", A(V(f), V(t), V(t), I(1), I(-100)), "weight must be a float tensor, got i32[4]");
  BAD("nll_loss_forward", A(V(f), V(t), V(in(g, TPK_F32, "4")), I(1), I(-100)), "weight f32[4] must be [3], a weight per class");
  BAD("nll_loss_backward", A(V(v3), V(f), V(t), NONE, I(1), I(-100), V(s0)), "grad_output f32[3] must be a scalar");
  BAD("nll_loss_backward", A(V(s0), V(f), V(t), NONE, I(0), I(-100), V(s0)), "grad_output f32 must be [N], one per row");
  BAD("nll_loss_backward", A(V(s0), V(f), V(t), NONE, I(1), I(-100), V(v3)), "total_weight f32[3] must be a scalar");
  /* results beyond the room given */
  TpkValue *outs[2];
  int n = 9;
  TpkArg three[] = {V(f), INTS(1, 1, 1), I(1)};
  assert_int_equal(tpk_gb_op(g->gb, "split_with_sizes", three, 3, g->v, g->n, outs, 2, &n, &g->err), TPK_ERR_INVALID);
  assert_non_null(strstr(g->err.message, "split_with_sizes: gives 3 results, room was given for 2"));
  assert_int_equal(n, 0);
  op_fails(g, TPK_ERR_UNSUPPORTED, "add.default", A(V(f), V(f)), "aten op 'add.default': add has no default overload", NULL);
  g_free(g);
}

/* ---- The vocabulary --------------------------------------------------------------- */

static bool in_vocabulary(const char *name) {
  for (int i = 0; i < tpk_gb_op_count(); i++)
    if (strcmp(tpk_gb_op_name(i), name) == 0) return true;
  return false;
}

/* Every packet PyTorch was measured to produce (aten_ops.txt), the issue's
 * list, and the ops the PyTorch device will see besides. */
static void test_vocabulary_covers_the_measured_ops(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/python/aten_ops.txt", test_root());
  char *text = test_read_file(path, NULL);
  assert_non_null(text);
  int n = 0;
  TpkStr missing = {0};
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    if (tab) *tab = 0;
    n++;
    if (!in_vocabulary(line)) tpk_str_printf(&missing, " %s", line);
  }
  free(text);
  assert_true(n >= 60);
  static const char *const ISSUE[] = {
      "addmm", "mm", "bmm", "_softmax", "_log_softmax", "native_layer_norm", "gelu",
      "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward", "add", "sub",
      "mul", "div", "neg", "exp", "erf", "rsqrt", "sigmoid", "pow", "sum", "mean", "any", "eq", "ne", "le",
      "logical_and", "logical_not", "where", "gather", "scatter", "full", "full_like", "scalar_tensor", "arange",
      "_to_copy", "view", "permute", "expand", "unsqueeze", "squeeze", "select", "split_with_sizes", "cat", "clone",
      "alias", "sqrt", "addcmul", "addcdiv", "lerp", "gelu_backward", "_softmax_backward_data",
      "native_layer_norm_backward", "nll_loss_forward", "nll_loss_backward",
      /* neighbours */
      "relu", "tanh", "log", "max", "min", "amax", "amin", "t", "transpose", "slice", "rsub", "threshold_backward"};
  for (size_t i = 0; i < sizeof ISSUE / sizeof *ISSUE; i++)
    if (!in_vocabulary(ISSUE[i])) tpk_str_printf(&missing, " %s", ISSUE[i]);
  if (missing.len) fail_msg("not in the vocabulary:%s", missing.data);
  tpk_str_free(&missing);
}

/* Every row's schema parses: called with no arguments, each op names a
 * missing argument (a schema the binder cannot read is an internal error). */
static void test_every_schema_binds(void **state) {
  (void)state;
  G *g = g_new("g");
  for (int i = 0; i < tpk_gb_op_count(); i++) {
    TpkValue *outs[16];
    int n;
    TpkStatus st = tpk_gb_op(g->gb, tpk_gb_op_name(i), NULL, 0, g->v, 0, outs, 16, &n, &g->err);
    if (st != TPK_ERR_INVALID || !strstr(g->err.message, "missing"))
      fail_msg("%s with no arguments: %d %s", tpk_gb_op_name(i), st, g->err.message);
  }
  g_free(g);
}

static void test_unknown_ops(void **state) {
  (void)state;
  G *g = g_new("g");
  int x = in(g, TPK_F32, "4");
  char count[32];
  snprintf(count, sizeof count, "(%d ops are", tpk_gb_op_count());
  op_fails(g, TPK_ERR_UNSUPPORTED, "foo", A(V(x)), "aten op 'foo' is not supported by tpk's graphs", count, NULL);
  op_fails(g, TPK_ERR_UNSUPPORTED, "aten::foo.Tensor", A(V(x)), "aten op 'foo' is not supported", NULL);
  op_fails(g, TPK_ERR_UNSUPPORTED, "add.Bogus", A(V(x), V(x)), "no overload 'Bogus' of add", NULL);
  op_fails(g, TPK_ERR_UNSUPPORTED, "", NOARGS, "aten op '' is not supported", NULL);
  /* a named overload is tried first, then the others; numbers given for
   * Tensors are wrapped when nothing else fits (ATen's sub.Tensor(1, x)) */
  assert_string_equal(type_of(g, op(g, "add.Scalar", A(V(x), V(x)))), "f32[4]");
  assert_string_equal(type_of(g, op(g, "sub.Tensor", A(I(1), V(x)))), "f32[4]");
  assert_string_equal(type_of(g, op(g, "aten.where.self", A(V(op(g, "gt", A(V(x), F(0)))), F(1), I(0)))), "f32[4]");
  /* namespaced and overloaded names are the same op */
  op(g, "aten::add.Tensor", A(V(x), V(x)));
  op(g, "aten.add.Tensor", A(V(x), V(x)));
  op(g, "add.Scalar", A(V(x), F(1)));
  op(g, "aten::neg.default", A(V(x)));
  g_free(g);
}

/* What a bridge asks before building: the packet and, when named, the
 * overload; the arguments are not looked at. */
static void test_known_ops(void **state) {
  (void)state;
  assert_true(tpk_gb_op_known("add"));
  assert_true(tpk_gb_op_known("aten::add.Tensor"));
  assert_true(tpk_gb_op_known("aten.add.Scalar"));
  assert_true(tpk_gb_op_known("aten.neg.default"));
  assert_true(tpk_gb_op_known("_scaled_dot_product_flash_attention_for_cpu.default"));
  assert_false(tpk_gb_op_known("aten::add.out"));
  assert_false(tpk_gb_op_known("add.default")); /* add has no default overload */
  assert_false(tpk_gb_op_known("aten::cumsum.default"));
  assert_false(tpk_gb_op_known("mylib::add.default"));
  assert_false(tpk_gb_op_known(""));
  assert_false(tpk_gb_op_known(NULL));
  for (int i = 0; i < tpk_gb_op_count(); i++) assert_true(tpk_gb_op_known(tpk_gb_op_name(i)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_softmax),
      cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_select_and_split),
      cmocka_unit_test(test_max_dim),
      cmocka_unit_test(test_reduced_floats_and_in_place),
      cmocka_unit_test(test_where_broadcasts),
      cmocka_unit_test(test_nll_loss),
      cmocka_unit_test(test_numerics_rows),
      cmocka_unit_test(test_numerics_indexing),
      cmocka_unit_test(test_numerics_integers_and_rounding),
      cmocka_unit_test(test_numerics_nll_loss),
      cmocka_unit_test(test_promotion),
      cmocka_unit_test(test_inputs_and_outputs),
      cmocka_unit_test(test_calls),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_symbolic_shapes),
      cmocka_unit_test(test_errors_arguments),
      cmocka_unit_test(test_errors_ops),
      cmocka_unit_test(test_vocabulary_covers_the_measured_ops),
      cmocka_unit_test(test_every_schema_binds),
      cmocka_unit_test(test_unknown_ops),
      cmocka_unit_test(test_known_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
