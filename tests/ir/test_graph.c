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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- Golden IR ---------------------------------------------------------------- */

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
  /* namespaced and overloaded names are the same op */
  op(g, "aten::add.Tensor", A(V(x), V(x)));
  op(g, "aten.add.Tensor", A(V(x), V(x)));
  op(g, "add.Scalar", A(V(x), F(1)));
  op(g, "aten::neg.default", A(V(x)));
  g_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_softmax),
      cmocka_unit_test(test_promotion),
      cmocka_unit_test(test_vocabulary_covers_the_measured_ops),
      cmocka_unit_test(test_every_schema_binds),
      cmocka_unit_test(test_unknown_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
