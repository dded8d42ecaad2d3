/*
 * test_ir_text.c — the IR's text form: print -> parse -> print is
 * byte-identical for modules covering every opcode, the printer normalises
 * what it reads, parse errors say `line:col: expected X, found Y`, and no
 * mutation of valid text crashes the parser.
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

#include "ir/ir.h"

/* Every opcode, kernels and funcs, nested for/if with carried values, a grid
 * with tile and scalar axes, calls of a func and of a kernel, floats that
 * need care. Written in canonical form: it prints back exactly. */
static const char ALL_OPS[] =
    "module \"all.tpk\"\n"
    "\n"
    "kernel @everything(%x: ref<f32[M,N]>, %ids: ref<i32[T]>, %n: i32 loc(1:40), %y: out ref<f32[M,N]>, %z: inout ref<f32[M,N]>, %g: out zero ref<f32[V,N]>) tune{BM=8 in [8, 16], BK=256} require{le(M, N) loc(2:11), ne(V*2, N+1), eq(T, cdiv(M,8)), lt(M, 4096), gt(M, 0), ge(N, M-1)} loc(1:1) {\n"
    "  %0 = sym {name=\"M\"} : i32 loc(2:3)\n"
    "  %c8 = const {value=8} : i32\n"
    "  %nt = cdiv %0, %c8 : i32\n"
    "  %c0 = const {value=0} : i32\n"
    "  %c1 = const {value=1} : i32\n"
    "  grid %c0, %nt, %c0, %c1 {\n"
    "  ^(%i: tile<8>, %p: i32):\n"
    "    %pid = program_id {axis=0} : i32\n"
    "    %np = num_programs {axis=1} : i32\n"
    "    %id = tile.id %i : i32\n"
    "    %st = tile.start %i : i32\n"
    "    %ti = tile.of %id : tile<16>\n"
    "    %t = load %x, %i {index=\"t:\", other=-inf} : f32[8,N] loc(5:13)\n"
    "    %buf = alloc : ref<f32[8,N], vmem>\n"
    "    %h = dma_start %x, %i, %buf {src_index=\"t:\", dst_index=\"::\"} : dma\n"
    "    dma_wait %h\n"
    "    %sems = alloc : ref<i32[2], smem>\n"
    "    %h2 = dma_start %x, %i, %buf {src_index=\"t:\", dst_index=\"::\"} : dma\n"
    "    dma_signal %h2, %sems, %c1\n"
    "    dma_wait_sem %sems, %c1\n"
    "    %t2 = load %buf {index=\"::\"} : f32[8,N]\n"
    "    %a = neg %t : f32[8,N]\n"
    "    %1 = abs %a : f32[8,N]\n"
    "    %2 = exp %1 : f32[8,N]\n"
    "    %3 = log %2 : f32[8,N]\n"
    "    %4 = sqrt %3 : f32[8,N]\n"
    "    %5 = rsqrt %4 : f32[8,N]\n"
    "    %6 = tanh %5 : f32[8,N]\n"
    "    %7 = sigmoid %6 : f32[8,N]\n"
    "    %8 = erf %7 : f32[8,N]\n"
    "    %9 = floor %8 : f32[8,N]\n"
    "    %10 = ceil %9 : f32[8,N]\n"
    "    %b = add %10, %t2 : f32[8,N]\n"
    "    %11 = sub %b, %a : f32[8,N]\n"
    "    %12 = mul %11, %a : f32[8,N]\n"
    "    %13 = div %12, %a : f32[8,N]\n"
    "    %14 = rem %13, %a : f32[8,N]\n"
    "    %15 = max %14, %a : f32[8,N]\n"
    "    %16 = min %15, %a : f32[8,N]\n"
    "    %17 = pow %16, %a : f32[8,N]\n"
    "    %lt = lt %17, %b : bool[8,N]\n"
    "    %18 = eq %a, %b : bool[8,N]\n"
    "    %19 = ne %a, %b : bool[8,N]\n"
    "    %20 = le %a, %b : bool[8,N]\n"
    "    %21 = gt %a, %b : bool[8,N]\n"
    "    %22 = ge %a, %b : bool[8,N]\n"
    "    %23 = and %18, %19 : bool[8,N]\n"
    "    %24 = or %20, %21 : bool[8,N]\n"
    "    %25 = not %23 : bool[8,N]\n"
    "    %ii = convert %a : i32[8,N]\n"
    "    %cd = cdiv %ii, %ii : i32[8,N]\n"
    "    %rd = round %10 : f32[8,N]\n"
    "    %bc = bitcast %rd : u32[8,N]\n"
    "    %x1 = xor %bc, %bc : u32[8,N]\n"
    "    %x2 = shl %x1, %bc : u32[8,N]\n"
    "    %x3 = shr %x2, %bc : u32[8,N]\n"
    "    %x4 = mulhi %cd, %ii : i32[8,N]\n"
    "    %scn = scan %x4 {kind=\"max\", axis=1} : i32[8,N]\n"
    "    %sel = select %lt, %a, %b : f32[8,N]\n"
    "    %row = slice %t, %c1 {index=\"s:\"} : f32[N]\n"
    "    %rb = broadcast %row : f32[8,N]\n"
    "    %rs = reshape %t : f32[N,8]\n"
    "    %tr = transpose %t {perm=[1, 0]} : f32[N,8]\n"
    "    %sl = slice %t, %c0 {index=\"r:\"} : f32[4,N]\n"
    "    %cc = concat %sl, %sl {axis=0} : f32[8,N]\n"
    "    %io = iota {axis=1} : i32[8,N]\n"
    "    %red = reduce %t {kind=\"sum\", axes=[1], keepdims=false} : f32[8]\n"
    "    %dt = dot %t, %tr {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[8,8]\n"
    "    %dacc = dot %t, %tr, %dt {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[8,8]\n"
    "    %fio = iota {axis=0, fused=true} : f32[8,N]\n"
    "    %fsq = mul %t, %fio {fused=true} : f32[8,N]\n"
    "    %fsum = reduce %fsq {kind=\"sum\", axes=[1], keepdims=false} : f32[8]\n"
    "    %idv = load %ids, %c0 {index=\"r\"} : i32[16]\n"
    "    %gt = gather %t, %idv {axis=1} : f32[8,16]\n"
    "    %sc = scatter %t, %idv, %gt {axis=1, mode=\"add\"} : f32[8,N]\n"
    "    store %y, %i, %sc {index=\"t:\", mode=\"set\"}\n"
    "    store %z, %i, %t {index=\"t:\", mode=\"add\"}\n"
    "    %old = atomic %z, %i, %t {index=\"t:\", kind=\"max\"} : f32[8,N]\n"
    "    %rows = load %x, %idv {index=\"g:\"} : f32[16,N]\n"
    "    store %g, %idv, %rows {index=\"g:\", mode=\"add\"}\n"
    "    %acc, %cnt = for %c0, %c8, %red, %c0 : f32[8], i32 {\n"
    "    ^(%k: i32, %acc.1: f32[8], %cnt.1: i32):\n"
    "      %one = const {value=1.5} : f32[8]\n"
    "      %acc.2 = add %acc.1, %one : f32[8]\n"
    "      %isz = eq %k, %c0 : bool\n"
    "      %r = if %isz : f32[8] {\n"
    "        yield %acc.2\n"
    "      } {\n"
    "        yield %acc.1\n"
    "      }\n"
    "      %26 = add %cnt.1, %c1 : i32\n"
    "      yield %r, %26\n"
    "    }\n"
    "    %more = lt %c0, %c8 : bool\n"
    "    %done, %cnt2 = while %more, %c0 : bool, i32 {\n"
    "    ^(%go: bool, %cnt2.1: i32):\n"
    "      %cnt2.2 = add %cnt2.1, %c1 : i32\n"
    "      %go.2 = lt %cnt2.2, %c8 : bool\n"
    "      yield %go.2, %cnt2.2\n"
    "    }\n"
    "    for %c0, %c1 {\n"
    "    ^(%kk: tile<256>):\n"
    "      %27 = tile.start %kk : i32\n"
    "    }\n"
    "    %w = call %t {callee=\"helper\"} : f32[8,N]\n"
    "    %first = eq %pid, %c0 : bool\n"
    "    if %first {\n"
    "      store %z, %i, %w {index=\"t:\", mode=\"set\"}\n"
    "    } {\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "func @helper(%a: f32[R,C]) -> (f32[R,C]) loc(40:1) {\n"
    "  %0 = neg %a : f32[R,C]\n"
    "  return %0\n"
    "}\n"
    "\n"
    "kernel @copy(%x: ref<f32[P,Q]>, %o: out ref<f32[P,Q]>) {\n"
    "  %0 = load %x {index=\"::\"} : f32[P,Q]\n"
    "  store %o, %0 {index=\"::\", mode=\"set\"}\n"
    "}\n"
    "\n"
    "func @graph(%a: f32[4,B*H], %s: f32) -> (f32[4,B*H], f32) {\n"
    "  %0 = call %a {callee=\"copy\"} : f32[4,B*H]\n"
    "  %1 = const {value=-0.0} : f32\n"
    "  %2 = const {value=0.1} : f32\n"
    "  %3 = const {value=1e-300} : f32\n"
    "  %4 = const {value=nan} : f32\n"
    "  %5 = const {value=1.7976931348623157e+308} : f32\n"
    "  %6 = const {value=5e-324} : f32\n"
    "  %7 = const {value=inf} : f32\n"
    "  %8 = const {value=-2.5} : f32\n"
    "  %9 = const {value=1} : bool\n"
    "  return %0, %s\n"
    "}\n";

static const char SOFTMAX[] =
    "module \"softmax.tpk\"\n"
    "\n"
    "kernel @softmax(%x: ref<f32[M,N]> loc(1:16), %y: out ref<f32[M,N]>) tune{BM=8 in [8, 16, 32]} loc(1:1) {\n"
    "  %0 = sym {name=\"M\"} : i32\n"
    "  %1 = const {value=8} : i32\n"
    "  %2 = cdiv %0, %1 : i32\n"
    "  %3 = const {value=0} : i32\n"
    "  grid %3, %2 {\n"
    "  ^(%i: tile<8>):\n"
    "    %t = load %x, %i {index=\"t:\", other=-inf} : f32[8,N] loc(5:13)\n"
    "    %4 = reduce %t {kind=\"max\", axes=[1], keepdims=true} : f32[8,1]\n"
    "    %5 = broadcast %4 : f32[8,N]\n"
    "    %6 = sub %t, %5 : f32[8,N]\n"
    "    %e = exp %6 : f32[8,N]\n"
    "    %7 = reduce %e {kind=\"sum\", axes=[1], keepdims=true} : f32[8,1]\n"
    "    %8 = broadcast %7 : f32[8,N]\n"
    "    %9 = div %e, %8 : f32[8,N]\n"
    "    store %y, %i, %9 {index=\"t:\", mode=\"set\"} loc(7:5)\n"
    "  }\n"
    "}\n";

/* Odd corners: no source name, dims of every form, escapes, a function
 * without results, deep names, a for without carried values. */
static const char CORNERS[] =
    "module\n"
    "\n"
    "func @f(%a: f32[(M+1)/2,cdiv(M,8),M-1,M*(N+1),B*H*2], %b: i8) -> () {\n"
    "  %0 = sym {name=\"we\\\"ird\\\\ \\n\\t\\x01\"} : i32\n"
    "  %a.1 = neg %b : i8\n"
    "  %a.2 = abs %a.1 : i8\n"
    "  %_x.y = const {value=-128} : i8\n"
    "}\n"
    "\n"
    "func @g() -> (f32[2,3]) {\n"
    "  %0 = const {value=0.0} : f32[2,3]\n"
    "  %1 = const {value=0} : i32\n"
    "  %2 = const {value=4} : i32\n"
    "  %3 = for %1, %2, %0 : f32[2,3] {\n"
    "  ^(%4: i32, %5: f32[2,3]):\n"
    "    %6 = for %1, %2, %5 : f32[2,3] {\n"
    "    ^(%7: i32, %8: f32[2,3]):\n"
    "      %9 = lt %7, %4 : bool\n"
    "      %10 = if %9 : f32[2,3] {\n"
    "        %11 = exp %8 : f32[2,3]\n"
    "        yield %11\n"
    "      } {\n"
    "        yield %8\n"
    "      }\n"
    "      yield %10\n"
    "    }\n"
    "    for %1, %2 {\n"
    "    ^(%12: i32):\n"
    "    }\n"
    "    yield %6\n"
    "  }\n"
    "  return %3\n"
    "}\n";

static char *print_module(const TpkModule *m) {
  TpkStr s = {0};
  tpk_ir_print(&s, m);
  return tpk_str_take(&s);
}

static TpkModule *parse(const char *text, TpkError *err) { return tpk_ir_parse(text, strlen(text), "test", err); }

/* text parses, prints as `expect` (NULL: as itself), and that reparses to
 * the same text. */
static void check_roundtrip(const char *text, const char *expect) {
  TpkError err = {0};
  TpkModule *m = parse(text, &err);
  if (!m) fail_msg("parse failed: %s", err.message);
  char *once = print_module(m);
  assert_string_equal(once, expect ? expect : text);
  TpkModule *m2 = parse(once, &err);
  if (!m2) fail_msg("reparse failed: %s", err.message);
  char *twice = print_module(m2);
  assert_string_equal(once, twice);
  free(once);
  free(twice);
  tpk_module_free(m);
  tpk_module_free(m2);
}

static void mark_ops(const TpkBlock *b, bool *seen) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    seen[op->opcode] = true;
    for (int r = 0; r < op->nregion; r++) mark_ops(op->regions[r], seen);
  }
}

/* The op defining the value named `name` in b or its regions. */
static const TpkOp *named_op(const TpkBlock *b, const char *name) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    if (op->nout && op->out[0].name && strcmp(op->out[0].name, name) == 0) return op;
    for (int r = 0; r < op->nregion; r++) {
      const TpkOp *found = named_op(op->regions[r], name);
      if (found) return found;
    }
  }
  return NULL;
}

static void test_roundtrip_all_ops(void **state) {
  (void)state;
  check_roundtrip(ALL_OPS, NULL);
  TpkError err = {0};
  TpkModule *m = parse(ALL_OPS, &err);
  assert_non_null(m);
  bool seen[TPK_OP_COUNT] = {0};
  for (int i = 0; i < m->nfuncs; i++) mark_ops(m->funcs[i]->body, seen);
  for (int i = 0; i < TPK_OP_COUNT; i++)
    if (!seen[i]) fail_msg("opcode %s is not covered", tpk_op_info((TpkOpcode)i)->name);
  /* what the parser built */
  TpkFunc *k = tpk_module_find(m, "everything");
  assert_true(k->is_kernel);
  assert_int_equal(k->nparams, 6);
  assert_int_equal(k->params[3].role, TPK_PARAM_OUT);
  assert_int_equal(k->params[4].role, TPK_PARAM_INOUT);
  assert_true(k->params[5].zero_init);
  assert_int_equal(k->params[2].loc.line, 1);
  assert_int_equal(k->params[2].loc.col, 40);
  assert_string_equal(k->params[1].name, "ids");
  assert_int_equal(k->ntunes, 2);
  assert_int_equal(k->tunes[0].nchoices, 2);
  assert_int_equal(k->tunes[1].value, 256);
  assert_int_equal(k->tunes[1].nchoices, 0);
  /* lowering's decisions */
  const TpkOp *dacc = named_op(k->body, "dacc"), *dt = named_op(k->body, "dt");
  assert_ptr_equal(tpk_dot_accumulator(dacc), &dt->out[0]);
  assert_null(tpk_dot_accumulator(dt));
  assert_true(tpk_op_is_fused(named_op(k->body, "fsq")));
  assert_false(tpk_op_is_fused(named_op(k->body, "fsum")));
  TpkFunc *g = tpk_module_find(m, "graph");
  assert_false(g->is_kernel);
  assert_int_equal(g->nresults, 2);
  assert_string_equal(m->source, "all.tpk");
  tpk_module_free(m);
}

static void test_roundtrip_softmax_and_corners(void **state) {
  (void)state;
  check_roundtrip(SOFTMAX, NULL);
  check_roundtrip(CORNERS, NULL);
  check_roundtrip("module\n", NULL);
  check_roundtrip("module \"empty\"\n", NULL);
}

/* A kernel's backward kernel: printed after the parameters, parsed back,
 * kept by a clone into another module (a specialisation). */
static const char BACKWARD[] =
    "module \"act.tpk\"\n"
    "\n"
    "kernel @act(%x: ref<f32[N]>, %y: out ref<f32[N]>) backward @act_bwd tune{BN in [8, 16]} loc(1:1) {\n"
    "}\n"
    "\n"
    "kernel @act_bwd(%dy: ref<f32[N]>, %x: ref<f32[N]>, %dx: out ref<f32[N]>) backward @act_bwd2 {\n"
    "}\n";

static void test_backward_roundtrip_and_clone(void **state) {
  (void)state;
  check_roundtrip(BACKWARD, NULL);
  TpkError err = {0};
  TpkModule *m = parse(BACKWARD, &err);
  if (!m) fail_msg("%s", err.message);
  assert_string_equal(tpk_module_find(m, "act")->backward, "act_bwd");
  /* double backward: the name need not be a kernel of this module */
  assert_string_equal(tpk_module_find(m, "act_bwd")->backward, "act_bwd2");
  TpkModule *dst = tpk_module_new("clone");
  TpkFunc *g = tpk_func_clone(dst, tpk_module_find(m, "act"), NULL, NULL, &err);
  if (!g) fail_msg("%s", err.message);
  tpk_module_free(m); /* the clone's name lives in its own module */
  assert_string_equal(g->backward, "act_bwd");
  char *text = print_module(dst);
  assert_non_null(strstr(text, "kernel @act(%x: ref<f32[N]>, %y: out ref<f32[N]>) backward @act_bwd tune{"));
  free(text);
  tpk_module_free(dst);
}

/* Floats print in the shortest form that reads back to the same bits. */
static void test_float_attrs(void **state) {
  (void)state;
  TpkError err = {0};
  TpkModule *m = parse(ALL_OPS, &err);
  assert_non_null(m);
  TpkFunc *g = tpk_module_find(m, "graph");
  const double want[] = {-0.0, 0.1, 1e-300, 0, 1.7976931348623157e308, 5e-324, __builtin_inf(), -2.5};
  const TpkOp *op = g->body->first->next;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++, op = op->next) {
    double f = tpk_op_attr(op, "value")->f;
    if (i == 3) {
      assert_true(f != f); /* nan */
      continue;
    }
    assert_memory_equal(&f, &want[i], sizeof f);
  }
  tpk_module_free(m);
}

/* The printer writes canonical text whatever order or names it was given. */
static void test_normalisation(void **state) {
  (void)state;
  check_roundtrip("func @f(%x: f32[H*B,2+N]) -> (f32[B*H,N+2]) {\n"
                  "  %7 = transpose %x {perm=[0, 1]} : f32[B*H,N+2]\n"
                  "  %3 = reduce %7 {keepdims=true, axes=[1], kind=\"sum\"} : f32[H*B,1]\n"
                  "  %acc = neg %7 : f32[B*H,N+2]\n"
                  "  %acc.1 = neg %acc : f32[B*H,N+2]\n"
                  "  return %acc.1\n"
                  "}\n",
                  "module \"test\"\n"
                  "\n"
                  "func @f(%x: f32[B*H,N+2]) -> (f32[B*H,N+2]) {\n"
                  "  %0 = transpose %x {perm=[0, 1]} : f32[B*H,N+2]\n"
                  "  %1 = reduce %0 {kind=\"sum\", axes=[1], keepdims=true} : f32[B*H,1]\n"
                  "  %acc = neg %0 : f32[B*H,N+2]\n"
                  "  %acc.1 = neg %acc : f32[B*H,N+2]\n"
                  "  return %acc.1\n"
                  "}\n");
  /* comments and free layout */
  check_roundtrip("// a comment\nmodule \"m\" func @f( %a : f32 ) -> ( f32 ) { return %a } // end",
                  "module \"m\"\n\nfunc @f(%a: f32) -> (f32) {\n  return %a\n}\n");
}

/* Builder-made IR: name hints are deduplicated; hints that would not read
 * back as names become counters. */
static void test_print_names_from_builder(void **state) {
  (void)state;
  TpkModule *m = tpk_module_new(NULL);
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  const char *names[] = {"acc"};
  TpkFunc *f = tpk_func_new(m, "f", false, 1, &t, names, NULL);
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkValue *a = tpk_build_unary(&b, TPK_OP_NEG, f->params[0].value);
  a->name = "acc";
  TpkValue *c = tpk_build_unary(&b, TPK_OP_NEG, a);
  c->name = "3bad";
  TpkValue *d = tpk_build_unary(&b, TPK_OP_NEG, c);
  d->name = "acc.1";
  TpkValue *e = tpk_build_unary(&b, TPK_OP_NEG, d);
  e->name = "has space";
  f->results = &t;
  f->nresults = 1;
  tpk_build(&b, TPK_OP_RETURN, 1, &e, 0, NULL);
  assert_int_equal(tpk_ir_verify(m, NULL), TPK_OK);
  char *text = print_module(m);
  assert_string_equal(text, "module\n"
                            "\n"
                            "func @f(%acc: f32) -> (f32) {\n"
                            "  %acc.1 = neg %acc : f32\n"
                            "  %0 = neg %acc.1 : f32\n"
                            "  %acc.1.1 = neg %0 : f32\n"
                            "  %1 = neg %acc.1.1 : f32\n"
                            "  return %1\n"
                            "}\n");
  check_roundtrip(text, NULL);
  free(text);
  TpkStr s = {0};
  tpk_ir_print_func(&s, f);
  assert_true(strncmp(s.data, "func @f(", 8) == 0);
  tpk_str_free(&s);
  tpk_module_free(m);
}

/* Closed sets: every reduce kind, both store modes, every index kind. They
 * are enums once parsed and print back as the names they were read from. */
static const char CLOSED_SETS[] =
    "module \"sets.tpk\"\n"
    "\n"
    "kernel @k(%x: ref<f32[M,N,K,L]>, %ids: ref<i32[T]>, %y: inout ref<f32[M,N,K,L]>) {\n"
    "  %c0 = const {value=0} : i32\n"
    "  %c1 = const {value=1} : i32\n"
    "  grid %c0, %c1 {\n"
    "  ^(%i: tile<8>):\n"
    "    %g = load %ids, %c0 {index=\"r\"} : i32[4]\n"
    "    %b = load %x, %i, %c1, %c0, %g {index=\"tsrg\"} : f32[8,2,4]\n"
    "    %w = load %x {index=\"::::\"} : f32[M,N,K,L]\n"
    "    %0 = reduce %b {kind=\"sum\", axes=[1], keepdims=false} : f32[8,4]\n"
    "    %1 = reduce %b {kind=\"max\", axes=[1], keepdims=true} : f32[8,1,4]\n"
    "    %2 = reduce %b {kind=\"min\", axes=[0, 2], keepdims=false} : f32[2]\n"
    "    %3 = reduce %b {kind=\"mean\", axes=[2], keepdims=false} : f32[8,2]\n"
    "    %4 = reduce %b {kind=\"prod\", axes=[0], keepdims=false} : f32[2,4]\n"
    "    %5 = scatter %0, %g, %0 {axis=1, mode=\"set\"} : f32[8,4]\n"
    "    %6 = scatter %5, %g, %0 {axis=1, mode=\"add\"} : f32[8,4]\n"
    "    store %y, %i, %c1, %c0, %g, %b {index=\"tsrg\", mode=\"add\"}\n"
    "    store %y, %w {index=\"::::\", mode=\"set\"}\n"
    "    %buf = alloc : ref<f32[8,4,L], vmem>\n"
    "    %h = dma_start %x, %i, %c1, %c0, %buf {src_index=\"tsr:\", dst_index=\":::\"} : dma\n"
    "    dma_wait %h\n"
    "  }\n"
    "}\n";

static const TpkOp *nth_op(const TpkBlock *b, TpkOpcode opc, int n) {
  for (const TpkOp *op = b->first; op; op = op->next)
    if (op->opcode == opc && n-- == 0) return op;
  return NULL;
}

static void test_closed_sets_roundtrip(void **state) {
  (void)state;
  check_roundtrip(CLOSED_SETS, NULL);
  TpkError err = {0};
  TpkModule *m = parse(CLOSED_SETS, &err);
  if (!m) fail_msg("%s", err.message);
  const TpkBlock *body = tpk_module_find(m, "k")->body->last->regions[0];
  static const TpkReduceKind kinds[] = {TPK_REDUCE_SUM, TPK_REDUCE_MAX, TPK_REDUCE_MIN, TPK_REDUCE_MEAN, TPK_REDUCE_PROD};
  for (int i = 0; i < 5; i++) {
    const TpkAttr *a = tpk_op_attr(nth_op(body, TPK_OP_REDUCE, i), "kind");
    assert_int_equal(a->kind, TPK_ATTR_ENUM);
    assert_int_equal(a->set, TPK_ENUM_REDUCE_KIND);
    assert_int_equal(tpk_op_reduce_kind(nth_op(body, TPK_OP_REDUCE, i)), kinds[i]);
  }
  assert_int_equal(tpk_op_store_mode(nth_op(body, TPK_OP_SCATTER, 0)), TPK_STORE_SET);
  assert_int_equal(tpk_op_store_mode(nth_op(body, TPK_OP_SCATTER, 1)), TPK_STORE_ADD);
  assert_int_equal(tpk_op_store_mode(nth_op(body, TPK_OP_STORE, 0)), TPK_STORE_ADD);
  assert_int_equal(tpk_op_store_mode(nth_op(body, TPK_OP_STORE, 1)), TPK_STORE_SET);
  const TpkIndexPattern *p = tpk_op_index(nth_op(body, TPK_OP_LOAD, 1), "index");
  assert_int_equal(tpk_op_attr(nth_op(body, TPK_OP_LOAD, 1), "index")->kind, TPK_ATTR_INDEX);
  assert_int_equal(p->rank, 4);
  assert_int_equal(p->dim[0], TPK_INDEX_TILE);
  assert_int_equal(p->dim[1], TPK_INDEX_SCALAR);
  assert_int_equal(p->dim[2], TPK_INDEX_RANGE);
  assert_int_equal(p->dim[3], TPK_INDEX_GATHER);
  assert_int_equal(tpk_index_operands(p), 4);
  p = tpk_op_index(nth_op(body, TPK_OP_LOAD, 2), "index");
  assert_int_equal(p->rank, 4);
  for (int d = 0; d < 4; d++) assert_int_equal(p->dim[d], TPK_INDEX_ALL);
  assert_int_equal(tpk_index_operands(p), 0);
  const TpkOp *dma = nth_op(body, TPK_OP_DMA_START, 0);
  assert_int_equal(tpk_index_operands(tpk_op_index(dma, "src_index")), 3);
  assert_int_equal(tpk_op_index(dma, "dst_index")->rank, 3);
  assert_int_equal(tpk_op_index(dma, "index")->rank, 0); /* no such attribute */
  tpk_module_free(m);

  /* Built with the typed setters, the same ops print the same names. */
  m = tpk_module_new(NULL);
  const TpkDim *n8 = tpk_dim_const(m, 8);
  const TpkType *ref = tpk_type_ref(m, TPK_F32, 1, &n8, TPK_MEM_HBM), *row = tpk_type_tensor(m, TPK_F32, 1, &n8);
  TpkParamRole role = TPK_PARAM_INOUT;
  TpkFunc *f = tpk_func_new(m, "b", true, 1, &ref, (const char *[]){"x"}, &role);
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkOp *ld = tpk_build(&b, TPK_OP_LOAD, 1, &f->params[0].value, 1, &row);
  TpkIndexPattern all = {.rank = 1, .dim = {TPK_INDEX_ALL}};
  tpk_op_set_index(m, ld, "index", &all);
  const TpkType *scalar = tpk_type_scalar(m, TPK_F32);
  TpkValue *loaded = &ld->out[0];
  TpkOp *red = tpk_build(&b, TPK_OP_REDUCE, 1, &loaded, 1, &scalar);
  tpk_op_set_reduce_kind(m, red, TPK_REDUCE_MEAN);
  tpk_op_set_ints(m, red, "axes", 1, (const int64_t[]){0});
  tpk_op_set_bool(m, red, "keepdims", false);
  TpkValue *st_in[] = {f->params[0].value, &ld->out[0]};
  TpkOp *st = tpk_build(&b, TPK_OP_STORE, 2, st_in, 0, NULL);
  tpk_op_set_index(m, st, "index", &all);
  tpk_op_set_store_mode(m, st, TPK_STORE_ADD);
  if (tpk_ir_verify(m, &err) != TPK_OK) fail_msg("%s", err.message);
  char *text = print_module(m);
  assert_string_equal(text, "module\n"
                            "\n"
                            "kernel @b(%x: inout ref<f32[8]>) {\n"
                            "  %0 = load %x {index=\":\"} : f32[8]\n"
                            "  %1 = reduce %0 {kind=\"mean\", axes=[0], keepdims=false} : f32\n"
                            "  store %x, %0 {index=\":\", mode=\"add\"}\n"
                            "}\n");
  free(text);
  tpk_module_free(m);
}

typedef struct ErrCase {
  const char *text, *message;
} ErrCase;

static void test_parse_errors(void **state) {
  (void)state;
  static const ErrCase cases[] = {
      {"kernel @k(", "1:11: expected a parameter (%name), found end of input"},
      {"kernel k()", "1:8: expected a function name (@name), found 'k'"},
      {"module 3", "1:8: expected 'kernel' or 'func', found '3'"},
      {"func @f() -> (f32 {", "1:19: expected ')', found '{'"},
      {"func @f(%a: f33) -> () {}", "1:13: expected a type, found 'f33'"},
      {"func @f(%a: f32[M,) -> () {}", "1:19: expected a dimension, found ')'"},
      {"func @f(%a: f32[M/0]) -> () {}", "1:18: invalid dimension (division by a constant <= 0, or overflow)"},
      {"func @f(%a: f32[1,2,3,4,5,6,7,8,9]) -> () {}", "1:33: more than 8 dimensions"},
      {"func @f(%a: ref<f32, gpu>) -> () {}", "1:22: expected a memory space (hbm, vmem, smem), found 'gpu'"},
      {"func @f(%a: tile<0>) -> () {}", "1:13: tile block size must be positive"},
      {"func @f() -> () {\n  frob\n}", "2:3: unknown op 'frob'"},
      {"func @f() -> () {\n  %0 = neg %1 : f32\n}", "2:12: undefined value %1"},
      {"func @f(%a: f32) -> () {\n  %a = neg %a : f32\n}", "2:3: value %a is defined twice"},
      {"func @f() -> () {\n  %0 = const {value=1, value=2} : i32\n}", "2:24: duplicate attribute 'value'"},
      {"func @f() -> () {\n  %0 = const {value=99999999999999999999} : i32\n}", "2:21: integer out of range"},
      {"func @f() -> () {\n  %0 = sym {name=\"abc} : i32\n}", "2:18: unterminated string"},
      {"func @f() -> () {\n  %0 = sym {name=\"a\\q\"} : i32\n}", "2:18: unknown escape '\\q' in string"},
      {"func @f() -> () {\n  %0 = const {value=} : i32\n}", "2:21: expected an attribute value, found '}'"},
      {"func @f() -> () {\n  %0 = const {value=1} : i32 $\n}", "2:30: unexpected character '$'"},
      {"func @f() -> () {\n  %0, %1 = const {value=1} : i32\n}", "2:3: 'const' has 2 result names but 1 result types"},
      {"func @f() -> () {\n  %0 = const {value=1} : i32 loc(0:1)\n}", "2:30: location out of range"},
      {"func @f() -> () {\n  %0 = const {value=1} : i32\n", "3:1: expected '}', found end of input"},
      {"func @f() -> () {\n  %0 = const {value=1} i32\n}", "2:24: expected ':' and the result types, found 'i32'"},
      {"func @f() -> () {\n  %0 %1 = neg\n}", "2:6: expected ',', found '%1'"},
      {"func @f() -> () {\n  3\n}", "2:3: expected an op, found '3'"},
      {"func @f() -> () {}\x01", "1:19: unexpected byte 0x01"},
      {"kernel @k(%a: ref<f32[N]>) require{add(N, 1)} {}", "1:36: expected a comparison (eq, ne, lt, le, gt, ge), found 'add'"},
      {"kernel @k(%a: ref<f32[N]>) require{le(N)} {}", "1:40: expected ',', found ')'"},
      {"kernel @k(%a: ref<f32[N]>) backward k {}", "1:37: expected the backward kernel's name (@name), found 'k'"},
      {"kernel @k(%a: ref<f32[N]>) backward @k {}", "verify: @k: a kernel cannot be its own backward kernel"},
      {"func @f(%a: f32) -> () backward @g {}", "verify: @f: only a kernel names a backward kernel"},
      /* names of closed sets: reduce kinds, store modes, index patterns */
      {"func @f(%a: f32[4,8]) -> () {\n  %0 = reduce %a {kind=\"avg\", axes=[1], keepdims=false} : f32[4]\n}",
       "2:24: kind \"avg\" is not one of sum, max, min, mean, prod"},
      {"func @f(%a: f32[4,8], %i: i32[4]) -> () {\n  %0 = scatter %a, %i, %a {axis=0, mode=\"sub\"} : f32[4,8]\n}",
       "2:41: mode \"sub\" is not one of set, add"},
      {"kernel @k(%x: out ref<f32[M]>) {\n  %0 = const {value=0.0} : f32[M]\n  store %x, %0 {index=\":\", mode=\"put\"}\n}",
       "3:33: mode \"put\" is not one of set, add"},
      {"kernel @k(%x: ref<f32[M,N]>) {\n  %c = const {value=0} : i32\n  %0 = load %x, %c {index=\"q:\"} : f32[N]\n}",
       "3:27: index \"q:\" has an invalid entry 'q' (expected t : s r g)"},
      {"kernel @k(%x: ref<f32[M]>) {\n  %0 = load %x {index=\":::::::::\"} : f32[M]\n}",
       "2:23: index \":::::::::\" has more than 8 entries"},
      {"kernel @k(%x: ref<f32[M]>, %y: ref<f32[M], vmem>) {\n  %0 = dma_start %x, %y {src_index=\":\", dst_index=\"T\"} : dma\n}",
       "2:51: dst_index \"T\" has an invalid entry 'T' (expected t : s r g)"},
      {"func @f(%a: f32[4,8]) -> () {\n  %0 = reduce %a {kind=\"SUM\", axes=[1], keepdims=false} : f32[4]\n}",
       "2:24: kind \"SUM\" is not one of sum, max, min, mean, prod"},
      /* an enum given as another kind of value */
      {"func @f(%a: f32[4,8]) -> () {\n  %0 = reduce %a {kind=1, axes=[1], keepdims=false} : f32[4]\n}",
       "verify: @f: 'reduce' attribute 'kind' must be reduce_kind, got int"},
      /* the parsed module is verified */
      {"func @f(%a: f32) -> (i32) {\n  return %a\n}", "verify: @f: 'return' value 0 is f32, the function returns i32"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    TpkError err = {0};
    TpkModule *m = parse(cases[i].text, &err);
    if (m) fail_msg("case %zu parsed: %s", i, cases[i].text);
    if (strcmp(err.message, cases[i].message) != 0)
      fail_msg("case %zu: got \"%s\", want \"%s\"", i, err.message, cases[i].message);
    assert_int_equal(err.code, TPK_ERR_PARSE);
  }
}

/* Nested regions: deep is fine up to the limit, deeper is an error, never a
 * stack overflow. */
static char *nested_ifs(int depth) {
  TpkStr s = {0};
  tpk_str_puts(&s, "func @f(%c: bool) -> () {\n");
  for (int i = 0; i < depth; i++) tpk_str_puts(&s, "if %c {\n");
  for (int i = 0; i < depth; i++) tpk_str_puts(&s, "} {\n}\n");
  tpk_str_puts(&s, "}\n");
  return tpk_str_take(&s);
}

static void test_nesting_limit(void **state) {
  (void)state;
  TpkError err = {0};
  char *ok = nested_ifs(150);
  TpkModule *m = parse(ok, &err);
  if (!m) fail_msg("%s", err.message);
  tpk_module_free(m);
  free(ok);
  char *deep = nested_ifs(100000);
  assert_null(parse(deep, &err));
  assert_string_equal(err.message, "202:7: nesting deeper than 200");
  free(deep);
  TpkStr s = {0};
  tpk_str_puts(&s, "func @f(%a: f32[");
  for (int i = 0; i < 100000; i++) tpk_str_putc(&s, '(');
  assert_null(parse(s.data, &err));
  assert_string_equal(err.message, "1:217: nesting deeper than 200");
  tpk_str_free(&s);
}

/* Random dims: canonical form survives print -> parse. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static const TpkDim *random_dim(TpkModule *m, int depth) {
  static const char *const syms[] = {"A", "B", "M", "N"};
  int r = (int)(rng() % 10);
  if (depth == 0 || r < 3) return r % 2 ? tpk_dim_const(m, (int64_t)(rng() % 9) - 2) : tpk_dim_sym(m, syms[rng() % 4]);
  const TpkDim *a = random_dim(m, depth - 1), *b = random_dim(m, depth - 1);
  static const TpkDimKind ops[] = {TPK_DIM_ADD, TPK_DIM_SUB, TPK_DIM_MUL, TPK_DIM_DIV, TPK_DIM_CDIV};
  const TpkDim *d = tpk_dim_binary(m, ops[rng() % 5], a, b);
  return d ? d : a;
}

static void test_random_dims_roundtrip(void **state) {
  (void)state;
  for (int i = 0; i < 2000; i++) {
    TpkModule *m = tpk_module_new(NULL);
    const TpkDim *d = random_dim(m, 4);
    TpkStr s = {0};
    tpk_str_puts(&s, "func @f(%a: f32[");
    tpk_dim_print(&s, d);
    tpk_str_puts(&s, "]) -> () {\n}\n");
    TpkError err = {0};
    TpkModule *m2 = parse(s.data, &err);
    if (!m2) fail_msg("%s: %s", s.data, err.message);
    TpkStr s2 = {0};
    tpk_ir_print_func(&s2, m2->funcs[0]);
    const char *p = strstr(s.data, "func");
    if (strcmp(p, s2.data) != 0) fail_msg("dim changed: %s became %s", p, s2.data);
    assert_int_equal(m2->funcs[0]->params[0].value->type->dims[0]->kind, d->kind);
    tpk_str_free(&s);
    tpk_str_free(&s2);
    tpk_module_free(m);
    tpk_module_free(m2);
  }
}

/* Mutations of valid text never crash; whatever parses prints stably. */
static void test_fuzz_mutations(void **state) {
  (void)state;
  static const char *const tokens[] = {"{", "}", "(", ")", "[", "]", "<", ">", ",", ":", "=", "^", "%0", "%i",
                                       "@f", "-", "->", "*", "/", "+", "\"", "1", "-1", "1.5", "inf", "nan", "f32",
                                       "ref", "tile", "dma", "yield", "for", "if", "grid", "loc(1:1)", "\n", "\\", "//"};
  const char *const seeds[] = {ALL_OPS, SOFTMAX, CORNERS};
  int accepted = 0;
  for (int iter = 0; iter < 6000; iter++) {
    const char *seed = seeds[iter % 3];
    size_t len = strlen(seed);
    TpkStr s = {0};
    tpk_str_puts(&s, seed);
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits && s.len > 0; e++) {
      size_t at = (size_t)(rng() % s.len);
      switch (rng() % 5) {
      case 0: s.data[at] = (char)(rng() % 256); break;             /* flip a byte */
      case 1: memmove(s.data + at, s.data + at + 1, s.len - at); s.len--; break; /* delete */
      case 2: s.len = at; s.data[at] = 0; break;                   /* truncate */
      default: {                                                   /* insert a token */
        const char *t = tokens[rng() % (sizeof tokens / sizeof tokens[0])];
        TpkStr n = {0};
        tpk_str_putn(&n, s.data, at);
        tpk_str_puts(&n, t);
        tpk_str_puts(&n, s.data + at);
        tpk_str_free(&s);
        s = n;
      }
      }
    }
    (void)len;
    TpkError err = {0};
    TpkModule *m = tpk_ir_parse(s.data, s.len, "fuzz", &err);
    if (m) {
      accepted++;
      char *once = print_module(m);
      TpkModule *m2 = tpk_ir_parse(once, strlen(once), "fuzz", &err);
      if (!m2) fail_msg("printed text does not reparse: %s\n%s", err.message, once);
      char *twice = print_module(m2);
      assert_string_equal(once, twice);
      free(once);
      free(twice);
      tpk_module_free(m2);
      tpk_module_free(m);
    } else {
      assert_true(err.message[0] != 0);
    }
    tpk_str_free(&s);
  }
  assert_true(accepted > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_all_ops),
      cmocka_unit_test(test_roundtrip_softmax_and_corners),
      cmocka_unit_test(test_backward_roundtrip_and_clone),
      cmocka_unit_test(test_closed_sets_roundtrip),
      cmocka_unit_test(test_float_attrs),
      cmocka_unit_test(test_normalisation),
      cmocka_unit_test(test_print_names_from_builder),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_nesting_limit),
      cmocka_unit_test(test_random_dims_roundtrip),
      cmocka_unit_test(test_fuzz_mutations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
