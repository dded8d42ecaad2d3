/*
 * test_verify.c — ir/verify.c: kernels in the shape of the language's
 * softmax, matmul and flash-attention examples, built with the builder,
 * verify; each invalid snippet is rejected with the expected message.
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

/* ---- builder shorthands ---- */

static TpkModule *M;

static const TpkDim *cd(int64_t v) { return tpk_dim_const(M, v); }
static const TpkDim *sd(const char *s) { return tpk_dim_sym(M, s); }

/* A tensor (space < 0) or ref type with `rank` dims given as arguments. */
static const TpkType *ty(TpkDType dt, int space, int rank, ...) {
  const TpkDim *dims[TPK_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, const TpkDim *);
  va_end(ap);
  return space < 0 ? tpk_type_tensor(M, dt, rank, dims) : tpk_type_ref(M, dt, rank, dims, (TpkMemSpace)space);
}
#define TEN(dt, ...) ty(dt, -1, __VA_ARGS__)

static TpkValue *op(TpkBuilder *b, TpkOpcode opc, const TpkType *t, int nin, ...) {
  TpkValue *in[16];
  va_list ap;
  va_start(ap, nin);
  for (int i = 0; i < nin; i++) in[i] = va_arg(ap, TpkValue *);
  va_end(ap);
  TpkOp *o = tpk_build(b, opc, nin, in, t ? 1 : 0, &t);
  assert_non_null(o);
  return t ? &o->out[0] : NULL;
}

static TpkValue *i32(TpkBuilder *b, int64_t v) { return tpk_build_const_int(b, tpk_type_scalar(M, TPK_I32), v); }

/* Index patterns are given in their text form ("t:"), as the parser reads them. */
static void set_index(TpkOp *o, const char *key, const char *text) {
  TpkError err = {0};
  if (tpk_op_set_text(M, o, key, text, &err) != TPK_OK) fail_msg("%s", err.message);
}

static TpkValue *load(TpkBuilder *b, const TpkType *t, const char *index, int nin, ...) {
  TpkValue *in[8];
  va_list ap;
  va_start(ap, nin);
  for (int i = 0; i < nin; i++) in[i] = va_arg(ap, TpkValue *);
  va_end(ap);
  TpkOp *o = tpk_build(b, TPK_OP_LOAD, nin, in, 1, &t);
  set_index(o, "index", index);
  return &o->out[0];
}

static void store(TpkBuilder *b, const char *index, int nin, ...) {
  TpkValue *in[8];
  va_list ap;
  va_start(ap, nin);
  for (int i = 0; i < nin; i++) in[i] = va_arg(ap, TpkValue *);
  va_end(ap);
  TpkOp *o = tpk_build(b, TPK_OP_STORE, nin, in, 0, NULL);
  set_index(o, "index", index);
  tpk_op_set_store_mode(M, o, TPK_STORE_SET);
}

static TpkValue *reduce(TpkBuilder *b, TpkReduceKind kind, TpkValue *x, const TpkType *t) {
  TpkValue *r = op(b, TPK_OP_REDUCE, t, 1, x);
  int64_t axes[] = {1};
  tpk_op_set_reduce_kind(M, r->def, kind);
  tpk_op_set_ints(M, r->def, "axes", 1, axes);
  tpk_op_set_bool(M, r->def, "keepdims", true);
  return r;
}

static TpkValue *dot(TpkBuilder *b, TpkValue *x, TpkValue *y, int64_t lc, int64_t rc, const TpkType *t) {
  TpkValue *r = op(b, TPK_OP_DOT, t, 2, x, y);
  tpk_op_set_ints(M, r->def, "lhs_contract", 1, &lc);
  tpk_op_set_ints(M, r->def, "rhs_contract", 1, &rc);
  tpk_op_set_ints(M, r->def, "lhs_batch", 0, NULL);
  tpk_op_set_ints(M, r->def, "rhs_batch", 0, NULL);
  return r;
}

/* The module verifies, and survives print -> parse -> print. */
static void check_valid(void) {
  TpkError err = {0};
  if (tpk_ir_verify(M, &err) != TPK_OK) fail_msg("%s", err.message);
  TpkStr s = {0};
  tpk_ir_print(&s, M);
  TpkModule *m2 = tpk_ir_parse(s.data, s.len, NULL, &err);
  if (!m2) fail_msg("%s\n%s", err.message, s.data);
  TpkStr s2 = {0};
  tpk_ir_print(&s2, m2);
  assert_string_equal(s.data, s2.data);
  tpk_str_free(&s);
  tpk_str_free(&s2);
  tpk_module_free(m2);
}

static int setup(void **state) {
  (void)state;
  M = tpk_module_new("built.tpk");
  return M ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  tpk_module_free(M);
  M = NULL;
  return 0;
}

static const int64_t BM_CHOICES[] = {8, 16, 32};
static TpkTune BM_TUNE = {.name = "BM", .bound = true, .value = 8, .nchoices = 3, .choices = BM_CHOICES};

/* kernel softmax(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [8, 16, 32] */
static void test_softmax_builds(void **state) {
  (void)state;
  const TpkType *ref = ty(TPK_F32, TPK_MEM_HBM, 2, sd("M"), sd("N"));
  const TpkType *types[] = {ref, ref};
  const char *names[] = {"x", "y"};
  TpkParamRole roles[] = {TPK_PARAM_IN, TPK_PARAM_OUT};
  TpkFunc *f = tpk_func_new(M, "softmax", true, 2, types, names, roles);
  f->tunes = &BM_TUNE;
  f->ntunes = 1;
  TpkBuilder b = {M, f->body, {4, 3}};
  TpkValue *nt = op(&b, TPK_OP_CDIV, tpk_type_scalar(M, TPK_I32), 2, tpk_build_sym(&b, "M"), i32(&b, 8));
  TpkOp *grid = tpk_build(&b, TPK_OP_GRID, 2, (TpkValue *[]){i32(&b, 0), nt}, 0, NULL);
  TpkValue *i = tpk_block_add_arg(M, grid->regions[0], tpk_type_tile(M, 8), "i");
  TpkBuilder g = {M, grid->regions[0], {5, 5}};
  const TpkType *blk = TEN(TPK_F32, 2, cd(8), sd("N")), *row = TEN(TPK_F32, 2, cd(8), cd(1));
  TpkValue *t = load(&g, blk, "t:", 2, f->params[0].value, i);
  tpk_op_set_float(M, t->def, "other", -__builtin_inf());
  TpkValue *mx = tpk_build_broadcast(&g, reduce(&g, TPK_REDUCE_MAX, t, row), 2, blk->dims);
  TpkValue *e = tpk_build_unary(&g, TPK_OP_EXP, tpk_build_binary(&g, TPK_OP_SUB, t, mx));
  TpkValue *s = tpk_build_broadcast(&g, reduce(&g, TPK_REDUCE_SUM, e, row), 2, blk->dims);
  store(&g, "t:", 3, f->params[1].value, i, tpk_build_binary(&g, TPK_OP_DIV, e, s));
  check_valid();
}

/* kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N]) */
static void test_matmul_builds(void **state) {
  (void)state;
  const TpkType *types[] = {ty(TPK_BF16, TPK_MEM_HBM, 2, sd("M"), sd("K")), ty(TPK_BF16, TPK_MEM_HBM, 2, sd("K"), sd("N")),
                            ty(TPK_F32, TPK_MEM_HBM, 2, sd("M"), sd("N"))};
  const char *names[] = {"a", "b", "c"};
  TpkParamRole roles[] = {TPK_PARAM_IN, TPK_PARAM_IN, TPK_PARAM_OUT};
  TpkFunc *f = tpk_func_new(M, "matmul", true, 3, types, names, roles);
  TpkBuilder b = {M, f->body, {0, 0}};
  const TpkType *i32t = tpk_type_scalar(M, TPK_I32);
  TpkValue *c0 = i32(&b, 0);
  TpkValue *nm = op(&b, TPK_OP_CDIV, i32t, 2, tpk_build_sym(&b, "M"), i32(&b, 128));
  TpkValue *nn = op(&b, TPK_OP_CDIV, i32t, 2, tpk_build_sym(&b, "N"), i32(&b, 128));
  TpkValue *nk = op(&b, TPK_OP_CDIV, i32t, 2, tpk_build_sym(&b, "K"), i32(&b, 256));
  TpkOp *grid = tpk_build(&b, TPK_OP_GRID, 4, (TpkValue *[]){c0, nm, c0, nn}, 0, NULL);
  TpkValue *i = tpk_block_add_arg(M, grid->regions[0], tpk_type_tile(M, 128), "i");
  TpkValue *j = tpk_block_add_arg(M, grid->regions[0], tpk_type_tile(M, 128), "j");
  TpkBuilder g = {M, grid->regions[0], {0, 0}};
  const TpkType *acct = TEN(TPK_F32, 2, cd(128), cd(128));
  TpkValue *acc0 = tpk_build_const_float(&g, acct, 0.0);
  TpkOp *loop = tpk_build(&g, TPK_OP_FOR, 3, (TpkValue *[]){c0, nk, acc0}, 1, &acct);
  TpkValue *k = tpk_block_add_arg(M, loop->regions[0], tpk_type_tile(M, 256), "k");
  TpkValue *acc = tpk_block_add_arg(M, loop->regions[0], acct, "acc");
  TpkBuilder l = {M, loop->regions[0], {0, 0}};
  TpkValue *ab = load(&l, TEN(TPK_BF16, 2, cd(128), cd(256)), "tt", 3, f->params[0].value, i, k);
  TpkValue *bb = load(&l, TEN(TPK_BF16, 2, cd(256), cd(128)), "tt", 3, f->params[1].value, k, j);
  TpkValue *sum = tpk_build_binary(&l, TPK_OP_ADD, acc, dot(&l, ab, bb, 1, 0, acct));
  tpk_build_yield(&l, 1, &sum);
  store(&g, "tt", 4, f->params[2].value, i, j, &loop->out[0]);
  check_valid();
}

/* kernel flash_attention(q, k, v: bf16[BH, S|T, D], scale: f32) -> (o: bf16[BH, S, D]) */
static void test_flash_attention_builds(void **state) {
  (void)state;
  const TpkDim *bh = sd("BH"), *s = sd("S"), *t = sd("T"), *d = sd("D");
  const TpkType *types[] = {ty(TPK_BF16, TPK_MEM_HBM, 3, bh, s, d), ty(TPK_BF16, TPK_MEM_HBM, 3, bh, t, d),
                            ty(TPK_BF16, TPK_MEM_HBM, 3, bh, t, d), tpk_type_scalar(M, TPK_F32),
                            ty(TPK_BF16, TPK_MEM_HBM, 3, bh, s, d)};
  const char *names[] = {"q", "k", "v", "scale", "o"};
  TpkParamRole roles[] = {TPK_PARAM_IN, TPK_PARAM_IN, TPK_PARAM_IN, TPK_PARAM_IN, TPK_PARAM_OUT};
  TpkFunc *f = tpk_func_new(M, "flash_attention", true, 5, types, names, roles);
  TpkValue *q = f->params[0].value, *kk = f->params[1].value, *vv = f->params[2].value, *scale = f->params[3].value;
  TpkBuilder b = {M, f->body, {0, 0}};
  const TpkType *i32t = tpk_type_scalar(M, TPK_I32);
  TpkValue *c0 = i32(&b, 0);
  TpkValue *nq = op(&b, TPK_OP_CDIV, i32t, 2, tpk_build_sym(&b, "S"), i32(&b, 128));
  TpkValue *nk = op(&b, TPK_OP_CDIV, i32t, 2, tpk_build_sym(&b, "T"), i32(&b, 128));
  TpkOp *grid = tpk_build(&b, TPK_OP_GRID, 4, (TpkValue *[]){c0, tpk_build_sym(&b, "BH"), c0, nq}, 0, NULL);
  TpkValue *h = tpk_block_add_arg(M, grid->regions[0], i32t, "h");
  TpkValue *i = tpk_block_add_arg(M, grid->regions[0], tpk_type_tile(M, 128), "i");
  TpkBuilder g = {M, grid->regions[0], {0, 0}};
  const TpkType *blk = TEN(TPK_BF16, 2, cd(128), d), *col = TEN(TPK_F32, 2, cd(128), cd(1));
  const TpkType *sq = TEN(TPK_F32, 2, cd(128), cd(128)), *acct = TEN(TPK_F32, 2, cd(128), d);
  const TpkType *isq = TEN(TPK_I32, 2, cd(128), cd(128));
  TpkValue *qb = load(&g, blk, "st:", 3, q, h, i);
  TpkValue *inits[] = {c0, nk, tpk_build_const_float(&g, col, -__builtin_inf()), tpk_build_const_float(&g, col, 0.0),
                       tpk_build_const_float(&g, acct, 0.0)};
  const TpkType *carried[] = {col, col, acct};
  TpkOp *loop = tpk_build(&g, TPK_OP_FOR, 5, inits, 3, carried);
  TpkBlock *body = loop->regions[0];
  TpkValue *j = tpk_block_add_arg(M, body, tpk_type_tile(M, 128), "j");
  TpkValue *m = tpk_block_add_arg(M, body, col, "m");
  TpkValue *l = tpk_block_add_arg(M, body, col, "l");
  TpkValue *acc = tpk_block_add_arg(M, body, acct, "acc");
  TpkBuilder lb = {M, body, {0, 0}};
  TpkValue *kb = load(&lb, blk, "st:", 3, kk, h, j);
  TpkValue *sc = tpk_build_binary(&lb, TPK_OP_MUL, dot(&lb, qb, kb, 1, 1, sq), tpk_build_broadcast(&lb, scale, 2, sq->dims));
  TpkValue *iota0 = op(&lb, TPK_OP_IOTA, isq, 0), *iota1 = op(&lb, TPK_OP_IOTA, isq, 0);
  tpk_op_set_int(M, iota0->def, "axis", 0);
  tpk_op_set_int(M, iota1->def, "axis", 1);
  TpkValue *rows = tpk_build_binary(&lb, TPK_OP_ADD, tpk_build_broadcast(&lb, op(&lb, TPK_OP_TILE_START, i32t, 1, i), 2, isq->dims), iota0);
  TpkValue *cols = tpk_build_binary(&lb, TPK_OP_ADD, tpk_build_broadcast(&lb, op(&lb, TPK_OP_TILE_START, i32t, 1, j), 2, isq->dims), iota1);
  TpkValue *sm = tpk_build_select(&lb, tpk_build_binary(&lb, TPK_OP_LE, cols, rows), sc,
                                  tpk_build_const_float(&lb, sq, -__builtin_inf()));
  TpkValue *m2 = tpk_build_binary(&lb, TPK_OP_MAX, m, reduce(&lb, TPK_REDUCE_MAX, sm, col));
  TpkValue *p = tpk_build_unary(&lb, TPK_OP_EXP, tpk_build_binary(&lb, TPK_OP_SUB, sm, tpk_build_broadcast(&lb, m2, 2, sq->dims)));
  TpkValue *alpha = tpk_build_unary(&lb, TPK_OP_EXP, tpk_build_binary(&lb, TPK_OP_SUB, m, m2));
  TpkValue *l2 = tpk_build_binary(&lb, TPK_OP_ADD, tpk_build_binary(&lb, TPK_OP_MUL, l, alpha), reduce(&lb, TPK_REDUCE_SUM, p, col));
  TpkValue *vb = load(&lb, blk, "st:", 3, vv, h, j);
  TpkValue *pv = dot(&lb, tpk_build_convert(&lb, p, TPK_BF16), vb, 1, 0, acct);
  TpkValue *acc2 = tpk_build_binary(&lb, TPK_OP_ADD,
                                    tpk_build_binary(&lb, TPK_OP_MUL, acc, tpk_build_broadcast(&lb, alpha, 2, acct->dims)), pv);
  tpk_build_yield(&lb, 3, (TpkValue *[]){m2, l2, acc2});
  TpkValue *out = tpk_build_binary(&g, TPK_OP_DIV, &loop->out[2], tpk_build_broadcast(&g, &loop->out[1], 2, acct->dims));
  store(&g, "st:", 4, f->params[4].value, h, i, tpk_build_convert(&g, out, TPK_BF16));
  check_valid();
}

/* Symbolic reshapes pass when the element counts are equal as dims. */
static void test_symbolic_reshape(void **state) {
  (void)state;
  TpkError err = {0};
  const char *text = "func @f(%a: f32[B*H,S]) -> (f32[H,S,B]) {\n"
                     "  %0 = reshape %a : f32[H,S,B]\n"
                     "  return %0\n"
                     "}\n";
  TpkModule *m = tpk_ir_parse(text, strlen(text), NULL, &err);
  if (!m) fail_msg("%s", err.message);
  tpk_module_free(m);
}

/* ---- IR the builder can make but the text cannot say ---- */

static void expect_invalid(const char *substring) {
  TpkError err = {0};
  assert_int_not_equal(tpk_ir_verify(M, &err), TPK_OK);
  if (!strstr(err.message, substring)) fail_msg("got \"%s\", want \"%s\"", err.message, substring);
}

static void test_use_before_definition(void **state) {
  (void)state;
  const TpkType *t = tpk_type_scalar(M, TPK_F32);
  TpkFunc *f = tpk_func_new(M, "f", false, 1, &t, NULL, NULL);
  TpkBuilder b = {M, f->body, {3, 9}};
  TpkValue *a = tpk_build_unary(&b, TPK_OP_NEG, f->params[0].value);
  TpkValue *c = tpk_build_unary(&b, TPK_OP_ABS, a);
  TpkValue *later = tpk_build_unary(&b, TPK_OP_EXP, f->params[0].value);
  later->name = "later";
  tpk_func_replace_uses(f, a, later);
  (void)c;
  expect_invalid("verify: @f: line 3:9: 'abs' operand 0 %later is used before its definition or in another function");
}

static void test_value_from_other_function(void **state) {
  (void)state;
  const TpkType *t = tpk_type_scalar(M, TPK_F32);
  TpkFunc *f = tpk_func_new(M, "f", false, 1, &t, NULL, NULL);
  TpkFunc *g = tpk_func_new(M, "g", false, 0, NULL, NULL, NULL);
  TpkBuilder b = {M, g->body, {0, 0}};
  tpk_build_unary(&b, TPK_OP_NEG, f->params[0].value);
  expect_invalid("verify: @g: 'neg' operand 0 is used before its definition or in another function");
}

/* A region argument used before more arguments are added stays the same
 * value: the IR is valid (the arguments used to move and leave it stale). */
static void test_block_argument_used_before_growth(void **state) {
  (void)state;
  enum { N = 20 };
  const TpkType *i32t = tpk_type_scalar(M, TPK_I32);
  TpkFunc *f = tpk_func_new(M, "k", true, 0, NULL, NULL, NULL);
  TpkBuilder b = {M, f->body, {0, 0}};
  TpkValue *ins[N + 2];
  const TpkType *types[N];
  for (int n = 0; n < N + 2; n++) ins[n] = i32(&b, 0);
  for (int n = 0; n < N; n++) types[n] = i32t;
  TpkOp *loop = tpk_build(&b, TPK_OP_FOR, N + 2, ins, N, types);
  TpkValue *iv = tpk_block_add_arg(M, loop->regions[0], i32t, "i");
  TpkBuilder l = {M, loop->regions[0], {0, 0}};
  tpk_build_unary(&l, TPK_OP_NEG, iv);
  TpkValue *carried[N];
  for (int n = 0; n < N; n++) carried[n] = tpk_block_add_arg(M, loop->regions[0], i32t, NULL);
  tpk_build_yield(&l, N, carried);
  TpkError err = {0};
  if (tpk_ir_verify(M, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_ptr_equal(loop->regions[0]->args[0], iv);
}

/* IR changed without the API (an operand written directly, a count or link
 * overwritten, an op unlinked without tpk_op_erase) leaves use lists that
 * disagree with the operands: the verifier says so. */
static TpkFunc *three_ops(TpkValue **x, TpkValue **a, TpkValue **c) {
  const TpkType *t = tpk_type_scalar(M, TPK_F32);
  const TpkType *ts[] = {t, t};
  TpkFunc *f = tpk_func_new(M, "f", false, 2, ts, (const char *[]){"x", "y"}, NULL);
  TpkBuilder b = {M, f->body, {4, 2}};
  *x = f->params[0].value;
  *a = tpk_build_unary(&b, TPK_OP_NEG, *x);
  (*a)->name = "a";
  *c = tpk_build_binary(&b, TPK_OP_MUL, *a, *a);
  TpkError err = {0};
  if (tpk_ir_verify(M, &err) != TPK_OK) fail_msg("%s", err.message);
  return f;
}

static void test_corrupt_use_lists(void **state) {
  (void)state;
  TpkValue *x, *a, *c;
  TpkFunc *f = three_ops(&x, &a, &c);
  ((TpkValue **)c->def->in)[1] = f->params[1].value; /* bypasses tpk_op_set_operand */
  expect_invalid("verify: @f: line 4:2: 'neg' use list of %a names an operand that does not use it");
  tpk_module_free(M);

  M = tpk_module_new(NULL);
  f = three_ops(&x, &a, &c);
  a->nuses = 3;
  expect_invalid("'neg' use list of %a has 2 entries but counts 3");
  a->nuses = 1;
  expect_invalid("'neg' use list of %a is longer than its count 1");
  tpk_module_free(M);

  M = tpk_module_new(NULL);
  f = three_ops(&x, &a, &c);
  a->uses = a->uses->next; /* the first use dropped from the list */
  a->uses->prev = NULL;
  a->nuses = 1;
  expect_invalid("is missing from the use list of %a"); /* which operand: the list's order is unspecified */
  tpk_module_free(M);

  M = tpk_module_new(NULL);
  f = three_ops(&x, &a, &c);
  a->uses->next->next = a->uses; /* a cycle */
  expect_invalid("'neg' use list of %a is broken (its links disagree)");
  tpk_module_free(M);

  M = tpk_module_new(NULL);
  f = three_ops(&x, &a, &c);
  f->body->last = a->def; /* the mul unlinked by hand, its uses left behind */
  a->def->next = NULL;
  c->def->parent = NULL;
  expect_invalid("'neg' use list of %a names a 'mul' that is not in a function (erased?)");
}

/* Closed-set attributes hold enums: a string where the signature wants
 * one, or a value outside the set, is rejected. */
static void test_closed_set_attrs(void **state) {
  (void)state;
  const TpkType *t = TEN(TPK_F32, 2, cd(4), cd(8)), *r = TEN(TPK_F32, 1, cd(4));
  TpkFunc *f = tpk_func_new(M, "f", false, 1, &t, NULL, NULL);
  TpkBuilder b = {M, f->body, {2, 5}};
  TpkValue *red = op(&b, TPK_OP_REDUCE, r, 1, f->params[0].value);
  tpk_op_set_ints(M, red->def, "axes", 1, (const int64_t[]){1});
  tpk_op_set_bool(M, red->def, "keepdims", false);
  tpk_op_set_str(M, red->def, "kind", "sum"); /* a string is not a reduce kind */
  expect_invalid("verify: @f: line 2:5: 'reduce' attribute 'kind' must be reduce_kind, got str");
  tpk_op_set_store_mode(M, red->def, TPK_STORE_ADD); /* sets "mode"; "kind" is still the string */
  expect_invalid("'reduce' attribute 'kind' must be reduce_kind, got str");
  tpk_op_set_reduce_kind(M, red->def, TPK_REDUCE_MAX);
  expect_invalid("'reduce' has unknown attribute 'mode'");
  TpkError err = {0};
  assert_int_equal(tpk_op_set_text(M, red->def, "mode", "add", &err), TPK_OK); /* not in reduce's signature: a string */
  assert_int_equal(tpk_op_attr(red->def, "mode")->kind, TPK_ATTR_STR);
  red->def->nattr--; /* drop "mode" (set last) */
  if (tpk_ir_verify(M, &err) != TPK_OK) fail_msg("%s", err.message);
  ((TpkAttr *)tpk_op_attr(red->def, "kind"))->i = 9;
  expect_invalid("'reduce' attribute 'kind' holds 9, not a reduce_kind");
  ((TpkAttr *)tpk_op_attr(red->def, "kind"))->set = TPK_ENUM_STORE_MODE;
  ((TpkAttr *)tpk_op_attr(red->def, "kind"))->i = TPK_STORE_ADD;
  expect_invalid("'reduce' attribute 'kind' must be reduce_kind, got store_mode");
}

static void test_null_and_missing_types(void **state) {
  (void)state;
  TpkFunc *f = tpk_func_new(M, "f", false, 0, NULL, NULL, NULL);
  TpkBuilder b = {M, f->body, {0, 0}};
  const TpkType *none = NULL;
  tpk_build(&b, TPK_OP_IOTA, 0, NULL, 1, &none);
  expect_invalid("'iota' result 0 has no type");
}

/* ---- invalid text ---- */

typedef struct Bad {
  const char *text, *message;
} Bad;

#define FUNC1(params, body) "func @f(" params ") -> () {\n" body "\n}\n"
#define KERNEL(params, body) "kernel @k(" params ") {\n" body "\n}\n"

static const Bad BAD[] = {
    /* elementwise */
    {FUNC1("%a: f32[8], %b: f32[4]", "  %0 = add %a, %b : f32[8] loc(2:3)"),
     "verify: @f: line 2:3: 'add' operands have different types f32[8] and f32[4]"},
    {FUNC1("%a: i32[8]", "  %0 = exp %a : i32[8]"), "verify: @f: 'exp' needs float operands, got i32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = not %a : f32[8]"), "'not' needs integer or bool operands, got f32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = lt %a, %a : f32[8]"), "'lt' result type is f32[8], expected bool[8]"},
    {FUNC1("%a: f32[8]", "  %0 = neg %a : f32[4]"), "'neg' result type is f32[4], expected f32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = select %a, %a, %a : f32[8]"), "'select' condition must be bool, got f32[8]"},
    {FUNC1("%a: i32[8]", "  %0 = convert %a : f32[4]"), "'convert' result f32[4] must have the shape of the operand i32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = bitcast %a : u16[8]"), "'bitcast' needs two non-bool dtypes of one width, got f32 and u16"},
    {FUNC1("%a: u8[8]", "  %0 = bitcast %a : bool[8]"), "'bitcast' needs two non-bool dtypes of one width, got u8 and bool"},
    {FUNC1("%a: f32[8]", "  %0 = bitcast %a : u32[4]"), "'bitcast' result u32[4] must have the shape of the operand f32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = shl %a, %a : f32[8]"), "'shl' needs integer or bool operands, got f32[8]"},
    {FUNC1("%a: i32[8]", "  %0 = round %a : i32[8]"), "'round' needs float operands, got i32[8]"},
    {FUNC1("%a: i16", "  %0 = tile.of %a : tile<8>"), "'tile.of' operand must be an i32 scalar, got i16"},
    {KERNEL("%y: out ref<f32[8]>", "  %v = const {value=1.0} : f32\n  %0 = atomic %y, %v {index=\"\", kind=\"mean\"} : f32"), "'atomic' kind must be sum, max or min, got mean"},
    {KERNEL("%y: ref<f32[8]>", "  %v = const {value=1.0} : f32[8]\n  %0 = atomic %y, %v {index=\":\", kind=\"sum\"} : f32[8]"), "'atomic' stored-to parameter %y is read-only (not out or inout)"},
    {KERNEL("%y: out ref<f32[8]>", "  %v = const {value=1.0} : f32[8]\n  %0 = atomic %y, %v {index=\":\", kind=\"sum\"} : f32"), "'atomic' result type is f32, expected f32[8]"},
    {FUNC1("%a: i32", "  %0 = tile.of %a : i32"), "'tile.of' result must be a tile, got i32"},
    {FUNC1("%a: f32[8]", "  %0 = scan %a {kind=\"sum\", axis=1} : f32[8]"), "'scan' axis 1 is out of range for f32[8]"},
    {FUNC1("%a: f32[8]", "  %0 = scan %a {kind=\"mean\", axis=0} : f32[8]"), "'scan' kind must be sum, max, min or prod, got mean"},
    {FUNC1("%a: bool[8]", "  %0 = scan %a {kind=\"max\", axis=0} : bool[8]"), "'scan' operand must be numeric, got bool[8]"},
    {FUNC1("%a: f32", "  %0 = scan %a {kind=\"sum\", axis=0} : f32"), "'scan' operand must have rank >= 1, got f32"},
    {FUNC1("%a: i32[8]", "  %0 = scan %a {kind=\"sum\", axis=0} : f32[8]"), "'scan' result type is f32[8], expected i32[8]"},
    /* shapes */
    {FUNC1("%a: f32[3]", "  %0 = broadcast %a : f32[4,5]"), "'broadcast' cannot broadcast f32[3] to f32[4,5]: dim 0 is 3, not 1 or 5"},
    {FUNC1("%a: f32[4,6]", "  %0 = reshape %a : f32[5,5]"), "'reshape' element counts differ: f32[4,6] has 24, f32[5,5] has 25"},
    {FUNC1("%a: f32[N]", "  %0 = reshape %a : f32[M]"), "'reshape' element counts differ: f32[N] has N, f32[M] has M"},
    {FUNC1("%a: f32[4,8]", "  %0 = transpose %a {perm=[0, 0]} : f32[4,4]"), "'transpose' perm: axis 0 appears twice"},
    {FUNC1("%a: f32[4,8]", "  %0 = transpose %a {perm=[1, 0]} : f32[4,8]"), "'transpose' result type is f32[4,8], expected f32[8,4]"},
    {FUNC1("%a: f32[4,8]", "  %0 = reduce %a {kind=\"sum\", axes=[1, 0], keepdims=false} : f32"), "'reduce' axes must be sorted"},
    {FUNC1("%a: f32[4,8]", "  %0 = reduce %a {kind=\"sum\", axes=[2], keepdims=false} : f32[4]"),
     "'reduce' axes: axis 2 is out of range for rank 2"},
    {FUNC1("%a: f32[4,N]", "  %0 = reduce %a {kind=\"max\", axes=[1], keepdims=false} : f32[4,1]"),
     "'reduce' result type is f32[4,1], expected f32[4]"},
    {FUNC1("%a: f32[8,4]", "  %0 = dot %a, %a {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[8,4]"),
     "'dot' contracted dims differ: f32[8,4] x f32[8,4] (4 vs 8)"},
    {FUNC1("%a: bf16[8,4]", "  %0 = dot %a, %a {lhs_contract=[1], rhs_contract=[1], lhs_batch=[], rhs_batch=[]} : bf16[8,8]"),
     "'dot' result type is bf16[8,8], expected f32[8,8]"},
    {FUNC1("%a: i8[8,4], %b: f32[4,8]", "  %0 = dot %a, %b {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : i32[8,8]"),
     "'dot' operands have different dtypes i8[8,4] and f32[4,8]"},
    {FUNC1("%a: f32[8,4], %x: f32[8,4]", "  %0 = dot %a, %a, %x {lhs_contract=[1], rhs_contract=[1], lhs_batch=[], rhs_batch=[]} : f32[8,8]"),
     "'dot' accumulator has type f32[8,4], the result f32[8,8]"},
    {FUNC1("", "  %0 = iota {axis=2} : i32[8,8]"), "'iota' axis 2 is out of range for i32[8,8]"},
    {FUNC1("%t: f32[8,4], %i: i32[3]", "  %0 = gather %t, %i {axis=0} : f32[4,3]"), "'gather' result type is f32[4,3], expected f32[3,4]"},
    {FUNC1("%t: f32[8,4], %i: f32[3]", "  %0 = gather %t, %i {axis=0} : f32[3,4]"), "'gather' indices must be an integer tensor, got f32[3]"},
    {FUNC1("%t: f32[8,4], %i: i32[3], %u: f32[2,4]", "  %0 = scatter %t, %i, %u {axis=0, mode=\"add\"} : f32[8,4]"),
     "'scatter' updates are f32[2,4], expected f32[3,4]"},
    {FUNC1("%a: f32[2,4], %b: f32[2,5]", "  %0 = concat %a, %b {axis=0} : f32[4,4]"),
     "'concat' operand 1 f32[2,5] differs from f32[2,4] outside axis 0"},
    {FUNC1("%a: f32[2,4], %b: f32[3,4]", "  %0 = concat %a, %b {axis=0} : f32[4,4]"),
     "'concat' result type is f32[4,4], expected f32[5,4]"},
    /* memory and index patterns */
    {KERNEL("%x: ref<f32[M,N]>", "  %0 = load %x {index=\":\"} : f32[N]"),
     "'load' index \":\" has 1 entries but the indexed value ref<f32[M,N]> has rank 2"},
    {KERNEL("%x: ref<f32[M,N]>", "  %c = const {value=0} : i32\n  %0 = load %x, %c {index=\"t:\"} : f32[8,N]"),
     "'load' index operand 1 for 't' must be a tile, got i32"},
    {KERNEL("%x: ref<f32[M,N]>", "  %c = const {value=0} : i32\n  %0 = load %x, %c, %c {index=\"s:\"} : f32[N]"),
     "'load' has 3 operands, the index needs 2"},
    {KERNEL("%x: ref<f32[M,N]>", "  %0 = load %x {index=\"::\"} : f32[M,8]"),
     "'load' result f32[M,8] does not match the selected f32[M,N]"},
    {KERNEL("%x: ref<i32[M]>", "  %0 = load %x {index=\":\", other=-inf} : i32[M]"), "'load' other is a float but the ref holds i32"},
    {KERNEL("%x: ref<f32[M]>, %i: ref<i32[4]>",
            "  %0 = load %i {index=\":\"} : i32[4]\n  %1 = convert %0 : i8[4]\n  %2 = load %x, %1 {index=\"g\"} : f32[4]"),
     "'load' index operand 1 for 'g' must be an i32 vector, got i8[4]"},
    {KERNEL("%x: ref<f32[M]>", "  %0 = load %x {index=\":\"} : f32[M]\n  store %x, %0 {index=\":\", mode=\"set\"}"),
     "'store' stored-to parameter %x is read-only (not out or inout)"},
    {KERNEL("%x: out ref<f32[M]>", "  %0 = const {value=0.0} : f32[8]\n  store %x, %0 {index=\":\", mode=\"set\"}"),
     "'store' value f32[8] does not match the selected f32[M]"},
    {KERNEL("", "  %0 = alloc : ref<f32[8]>"), "'alloc' result must be a vmem or smem ref, got ref<f32[8]>"},
    {KERNEL("", "  %0 = alloc : ref<f32[8], vmem>\n  %1 = alloc : ref<f32[8], smem>\n"
                "  %2 = dma_start %0, %1 {src_index=\":\", dst_index=\":\"} : dma"),
     "'dma_start' copies ref<f32[8], vmem> to ref<f32[8], smem>: exactly one side must be in hbm"},
    {KERNEL("%x: ref<f32[M]>", "  %0 = alloc : ref<f32[8], vmem>\n  %c = const {value=0} : i32\n"
                               "  %2 = dma_start %x, %c, %0, %c {src_index=\"r\", dst_index=\"r\"} : dma"),
     "'dma_start' dim 0 is 'r' on both sides, so its size is unknown"},
    {KERNEL("%x: ref<f32[M]>", "  %0 = alloc : ref<f32[8], vmem>\n  %2 = dma_start %x, %0 {src_index=\":\", dst_index=\":\"} : dma"),
     "'dma_start' source block [M] and destination block [8] differ"},
    {KERNEL("", "  %0 = const {value=0} : i32\n  dma_wait %0"), "'dma_wait' operand must be a dma handle, got i32"},
    /* values */
    {FUNC1("", "  %0 = const {value=1.0} : i32"), "'const' value of a i32 constant must be an integer"},
    {FUNC1("", "  %0 = const {value=1} : f32"), "'const' value of a f32 constant must be a float"},
    {FUNC1("", "  %0 = const {value=300} : i8"), "'const' value 300 does not fit i8"},
    {FUNC1("", "  %0 = sym {name=\"M\"} : f32"), "'sym' result type is f32, expected i32"},
    {FUNC1("", "  %0 = program_id {axis=-1} : i32"), "'program_id' axis -1 is out of range"},
    {FUNC1("", "  %0 = const {value=0} : i32\n  %1 = tile.id %0 : i32"), "'tile.id' operand must be a tile, got i32"},
    /* attributes and counts */
    {FUNC1("", "  %0 = iota : i32[8]"), "'iota' is missing attribute 'axis'"},
    {FUNC1("%a: f32", "  %0 = neg %a {foo=1} : f32"), "'neg' has unknown attribute 'foo'"},
    {FUNC1("", "  %0 = iota {axis=\"x\"} : i32[8]"), "'iota' attribute 'axis' must be int, got str"},
    {FUNC1("%a: f32", "  %0 = neg %a, %a : f32"), "'neg' takes 1 operand, got 2"},
    {FUNC1("%a: f32", "  %0, %1 = neg %a : f32, f32"), "'neg' has 2 results, expected 1"},
    /* lowering's decisions: fused=true is a mark on an element loop used once, in its block, element by element */
    {FUNC1("%a: f32[8]", "  %0 = neg %a {fused=false} : f32[8]\n  %1 = abs %0 : f32[8]"),
     "'neg' attribute 'fused' is a mark: true, or absent"},
    {FUNC1("%a: f32[8]", "  %0 = neg %a {fused=true} : f32[8]\n  %1 = add %0, %0 : f32[8]"),
     "'neg' is fused but its result is not used once, by an elementwise op or a reduce of its block"},
    {FUNC1("%a: f32[8]", "  %0 = neg %a {fused=true} : f32[8]"),
     "'neg' is fused but its result is not used once"},
    {FUNC1("%a: f32[8,4]", "  %0 = neg %a {fused=true} : f32[8,4]\n  %1 = transpose %0 {perm=[1, 0]} : f32[4,8]"),
     "'neg' is fused but its result is not used once, by an elementwise op or a reduce of its block"},
    {FUNC1("%a: f32[8]", "  %0 = neg %a {fused=true} : f32[8]\n  %c = const {value=0} : i32\n"
                         "  for %c, %c {\n  ^(%i: i32):\n    %1 = abs %0 : f32[8]\n  }"),
     "'neg' is fused but its result is not used once, by an elementwise op or a reduce of its block"},
    {FUNC1("%a: f32", "  %0 = neg %a {fused=true} : f32\n  %1 = abs %0 : f32"),
     "'neg' is fused but does not compute a tile element by element"},
    {FUNC1("%a: f32[8,4]", "  %0 = transpose %a {perm=[1, 0], fused=true} : f32[4,8]\n  %1 = abs %0 : f32[4,8]"),
     "'transpose' is fused but does not compute a tile element by element"},
    /* control flow */
    {FUNC1("%a: f32[8], %b: f32[4]",
           "  %c = const {value=0} : i32\n  %0 = for %c, %c, %a : f32[8] {\n  ^(%i: i32, %x: f32[8]):\n    yield %b\n  }"),
     "'yield' value 0 is f32[4], its for expects f32[8]"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %0 = for %c, %c, %a : f32[8] {\n  ^(%i: i32, %x: f32[8]):\n  }"),
     "'for' body must end with a yield of 1 value"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %0 = for %c, %c, %a : f32[8] {\n  ^(%i: i32):\n    yield %a\n  }"),
     "'for' region has 1 arguments, expected the index and 1 carried values"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %0 = for %c, %c, %a : f32[8] {\n  ^(%i: f32, %x: f32[8]):\n    yield %x\n  }"),
     "'for' index must be i32 or a tile, got f32"},
    {FUNC1("", "  %c = const {value=0} : i32\n  if %c {\n  } {\n  }"), "'if' condition must be a bool scalar, got i32"},
    {FUNC1("", "  %c = const {value=0} : i32\n  %s = alloc : ref<f32[2], smem>\n  dma_wait_sem %s, %c"),
     "'dma_wait_sem' operand 0 must be semaphores, ref<i32[N], smem>; got ref<f32[2], smem>"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %0, %1 = while %c, %a : i32, f32[8] {\n  ^(%k: i32, %x: f32[8]):\n    yield %k, %x\n  }"),
     "'while' condition must be a bool scalar, got i32"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %t = eq %c, %c : bool\n  %0, %1 = while %t, %a : bool, f32[8] {\n  ^(%x: f32[8]):\n    yield %t, %x\n  }"),
     "'while' region has 1 arguments, expected the condition and 1 carried values"},
    {FUNC1("%a: f32[8]", "  %c = const {value=0} : i32\n  %t = eq %c, %c : bool\n  %0, %1 = while %t, %a : bool, f32[8] {\n  ^(%g: bool, %x: f32[8]):\n    yield %x, %g\n  }"),
     "'yield' value 0 is f32[8], its while expects bool"},
    {FUNC1("%a: f32", "  %c = const {value=1} : bool\n  %0 = if %c : f32 {\n    yield %a\n  } {\n  }"),
     "'if' else region must end with a yield of 1 value"},
    {FUNC1("%a: f32", "  %c = const {value=1} : bool\n  if %c {\n    %x = neg %a : f32\n  } {\n  }\n  %y = neg %x : f32"),
     "'neg' operand 0 %x is used outside the region that defines it"},
    {FUNC1("", "  yield\n  return"), "'yield' must be the last op of its block"},
    {FUNC1("", "  yield"), "'yield' must end a for, while, if or grid region"},
    {KERNEL("", "  return"), "'return' is not allowed in a kernel (kernels write out parameters)"},
    {"func @f(%a: f32) -> (f32) {\n  %0 = neg %a : f32\n}\n", "verify: @f: body must end with a return of 1 value"},
    {FUNC1("", "  %c = const {value=0} : i32\n  grid %c, %c {\n  ^(%i: i32):\n  }"), "'grid' is only allowed in a kernel"},
    {KERNEL("", "  %c = const {value=0} : i32\n  for %c, %c {\n  ^(%j: i32):\n    grid %c, %c {\n    ^(%i: i32):\n    }\n  }"),
     "'grid' must be at the top level of the kernel body, not nested"},
    {KERNEL("", "  %c = const {value=0} : i32\n  grid %c, %c {\n  ^(%i: f32):\n  }"), "'grid' axis 0 argument must be i32 or a tile, got f32"},
    {KERNEL("", "  %c = const {value=0} : i32\n  grid %c, %c, %c {\n  ^(%i: i32):\n  }"), "'grid' operands must be (lo, hi) pairs, got 3"},
    {KERNEL("", "  %c = const {value=0} : i32\n  grid %c {\n  ^(%i: i32):\n  }"), "'grid' takes at least 2 operands, got 1"},
    /* calls */
    {FUNC1("%a: f32", "  %0 = call %a {callee=\"nope\"} : f32"), "'call' callee @nope is not in the module"},
    {"func @h(%a: f32[R,R]) -> (f32[R,R]) {\n  return %a\n}\n" FUNC1("%a: f32[4,8]", "  %0 = call %a {callee=\"h\"} : f32[4,4]"),
     "'call' operand 0 is f32[4,8], @h expects f32[4,4]"},
    {"func @h(%a: f32[R]) -> (f32[R]) {\n  return %a\n}\n" FUNC1("%a: f32[4]", "  %0 = call %a {callee=\"h\"} : f32[5]"),
     "'call' result 0 is f32[5], @h gives f32[4]"},
    {"func @h(%a: f32) -> () {\n}\n" FUNC1("%a: f32", "  call %a, %a {callee=\"h\"}"),
     "'call' @h takes 1 operands and gives 0 results; the call has 2 and 0"},
    /* functions */
    {"kernel @k(%x: f32[8]) {\n}\n", "verify: @k: kernel parameter %x must be an hbm ref or a scalar, got f32[8]"},
    {"kernel @k(%x: out f32) {\n}\n", "verify: @k: output parameter %x must be a ref, got f32"},
    {"kernel @k(%x: zero ref<f32>) {\n}\n", "verify: @k: parameter %x: only out parameters start zeroed"},
    {"func @f(%x: out f32) -> () {\n}\n", "verify: @f: func parameter %x must be an input; funcs return results"},
    {"func @f(%x: ref<f32>) -> () {\n}\n", "verify: @f: func parameter %x must be a tensor, got ref<f32>"},
    {"func @f() -> (tile<8>) {\n}\n", "verify: @f: result 0 must be a tensor, got tile<8>"},
    {"kernel @k() tune{BM=4 in [8, 16]} {\n}\n", "verify: @k: tunable BM=4 is not one of its choices"},
    {"kernel @k() tune{BM=8, BM=8} {\n}\n", "verify: @k: tunable BM is declared twice"},
    {"func @f() -> () {\n}\nfunc @f() -> () {\n}\n", "verify: @f: function is defined twice"},
};

static void test_invalid_ir(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    TpkError err = {0};
    TpkModule *m = tpk_ir_parse(BAD[i].text, strlen(BAD[i].text), NULL, &err);
    if (m) {
      tpk_module_free(m);
      fail_msg("case %zu verified:\n%s", i, BAD[i].text);
    }
    if (!strstr(err.message, BAD[i].message) || strncmp(err.message, "verify: @", 9) != 0)
      fail_msg("case %zu: got \"%s\", want \"%s\"", i, err.message, BAD[i].message);
  }
  print_message("%zu invalid snippets rejected\n", sizeof BAD / sizeof BAD[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_softmax_builds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_matmul_builds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flash_attention_builds, setup, teardown),
      cmocka_unit_test(test_symbolic_reshape),
      cmocka_unit_test_setup_teardown(test_use_before_definition, setup, teardown),
      cmocka_unit_test_setup_teardown(test_value_from_other_function, setup, teardown),
      cmocka_unit_test_setup_teardown(test_block_argument_used_before_growth, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_use_lists, setup, teardown),
      cmocka_unit_test_setup_teardown(test_closed_set_attrs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_null_and_missing_types, setup, teardown),
      cmocka_unit_test(test_invalid_ir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
