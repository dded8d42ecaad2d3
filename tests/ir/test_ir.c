/*
 * test_ir.c — ir/ir.c: dimension folding and interning, type
 * interning, the op table, the builder and its editing helpers.
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

static int setup(void **state) {
  *state = tpk_module_new("test");
  return *state ? 0 : -1;
}

static int teardown(void **state) {
  tpk_module_free(*state);
  return 0;
}

/* The printed form of a dim, in a static buffer. */
static const char *dim_text(const TpkDim *d) {
  static char buf[256];
  TpkStr s = {0};
  tpk_dim_print(&s, d);
  snprintf(buf, sizeof buf, "%s", s.data ? s.data : "");
  tpk_str_free(&s);
  return buf;
}

static const char *type_text(const TpkType *t) {
  static char buf[256];
  TpkStr s = {0};
  tpk_type_print(&s, t);
  snprintf(buf, sizeof buf, "%s", s.data ? s.data : "");
  tpk_str_free(&s);
  return buf;
}

#define C(v) tpk_dim_const(m, v)
#define S(n) tpk_dim_sym(m, n)
#define ADD(a, b) tpk_dim_binary(m, TPK_DIM_ADD, a, b)
#define SUB(a, b) tpk_dim_binary(m, TPK_DIM_SUB, a, b)
#define MUL(a, b) tpk_dim_binary(m, TPK_DIM_MUL, a, b)
#define DIV(a, b) tpk_dim_binary(m, TPK_DIM_DIV, a, b)
#define CDIV(a, b) tpk_dim_binary(m, TPK_DIM_CDIV, a, b)

static void test_dim_interning(void **state) {
  TpkModule *m = *state;
  assert_ptr_equal(C(8), C(8));
  assert_ptr_not_equal(C(8), C(9));
  assert_ptr_equal(S("M"), S("M"));
  assert_ptr_not_equal(S("M"), S("N"));
  /* the symbol name is interned, so it can outlive the caller's buffer */
  char name[] = "K";
  const TpkDim *k = S(name);
  name[0] = 'X';
  assert_string_equal(k->sym, "K");
  int64_t v = 0;
  assert_true(tpk_dim_is_const(C(-3), &v));
  assert_int_equal(v, -3);
  assert_false(tpk_dim_is_const(k, &v));
}

static void test_dim_folding(void **state) {
  TpkModule *m = *state;
  const TpkDim *x = S("x"), *y = S("y"), *z = S("z");
  assert_ptr_equal(ADD(C(2), C(3)), C(5));
  assert_ptr_equal(MUL(C(4), C(-3)), C(-12));
  assert_ptr_equal(SUB(C(2), C(7)), C(-5));
  assert_ptr_equal(DIV(C(7), C(2)), C(3));
  assert_ptr_equal(DIV(C(-7), C(2)), C(-4)); /* floor */
  assert_ptr_equal(CDIV(C(7), C(2)), C(4));
  assert_ptr_equal(ADD(x, C(0)), x);
  assert_ptr_equal(ADD(C(0), x), x);
  assert_ptr_equal(MUL(x, C(1)), x);
  assert_ptr_equal(MUL(C(0), x), C(0));
  assert_ptr_equal(SUB(x, x), C(0));
  assert_ptr_equal(SUB(x, C(0)), x);
  assert_ptr_equal(DIV(x, C(1)), x);
  assert_ptr_equal(CDIV(x, C(1)), x);
  assert_ptr_equal(DIV(MUL(x, C(8)), C(8)), x);
  assert_ptr_equal(CDIV(MUL(C(8), x), C(8)), x);
  assert_ptr_equal(DIV(MUL(x, C(16)), C(8)), MUL(x, C(2)));
  assert_ptr_equal(SUB(ADD(x, y), y), x);
  assert_ptr_equal(SUB(ADD(x, C(5)), C(5)), x);
  /* b's terms cancel against a's: a slice's size BN-(BN-1) is 1 */
  assert_ptr_equal(SUB(x, SUB(x, C(1))), C(1));
  assert_ptr_equal(SUB(ADD(ADD(x, y), C(2)), ADD(y, C(1))), ADD(x, C(1)));
  assert_ptr_equal(SUB(ADD(x, y), ADD(x, y)), C(0));
  assert_ptr_equal(ADD(ADD(x, C(2)), C(3)), ADD(x, C(5)));
  assert_ptr_equal(MUL(MUL(x, C(2)), MUL(C(3), y)), MUL(MUL(x, y), C(6)));
  /* not folded: a symbolic divisor, a divisor that does not divide */
  assert_int_equal(DIV(x, y)->kind, TPK_DIM_DIV);
  assert_int_equal(DIV(MUL(x, C(3)), C(2))->kind, TPK_DIM_DIV);
  (void)z;
}

static void test_dim_canonical_order(void **state) {
  TpkModule *m = *state;
  const TpkDim *b = S("B"), *h = S("H"), *s = S("S");
  assert_ptr_equal(MUL(b, h), MUL(h, b));
  assert_ptr_equal(ADD(b, h), ADD(h, b));
  assert_ptr_equal(MUL(MUL(b, h), s), MUL(b, MUL(h, s)));
  assert_ptr_equal(MUL(MUL(s, h), b), MUL(b, MUL(s, h)));
  assert_ptr_equal(ADD(ADD(s, C(1)), ADD(b, h)), ADD(ADD(h, C(1)), ADD(s, b)));
  assert_string_equal(dim_text(MUL(s, MUL(h, b))), "B*H*S");
  assert_string_equal(dim_text(MUL(C(2), b)), "B*2");
  assert_string_equal(dim_text(ADD(C(1), b)), "B+1");
}

static void test_dim_errors(void **state) {
  TpkModule *m = *state;
  const TpkDim *x = S("x");
  assert_null(DIV(x, C(0)));
  assert_null(CDIV(x, C(-2)));
  assert_null(ADD(C(INT64_MAX), C(1)));
  assert_null(MUL(C(INT64_MAX), C(2)));
  assert_null(SUB(C(INT64_MIN), C(1)));
  assert_null(ADD(x, NULL));
  assert_null(tpk_dim_binary(m, TPK_DIM_SYM, x, x));
}

static void test_dim_print(void **state) {
  TpkModule *m = *state;
  const TpkDim *mm = S("M"), *n = S("N");
  assert_string_equal(dim_text(DIV(ADD(mm, C(1)), C(2))), "(M+1)/2");
  assert_string_equal(dim_text(CDIV(mm, C(8))), "cdiv(M,8)");
  assert_string_equal(dim_text(SUB(mm, C(1))), "M-1");
  assert_string_equal(dim_text(MUL(mm, ADD(n, C(1)))), "M*(N+1)");
  assert_string_equal(dim_text(SUB(mm, SUB(n, mm))), "M-(N-M)");
  assert_string_equal(dim_text(MUL(mm, DIV(n, mm))), "M*(N/M)");
  assert_string_equal(dim_text(DIV(MUL(mm, n), S("K"))), "M*N/K");
  assert_string_equal(dim_text(C(-4)), "-4");
}

static bool lookup(void *ctx, const char *sym, int64_t *value) {
  (void)ctx;
  if (strcmp(sym, "M") == 0) return *value = 10, true;
  if (strcmp(sym, "Z") == 0) return *value = 0, true;
  return false;
}

static void test_dim_eval_substitute(void **state) {
  TpkModule *m = *state;
  int64_t v = 0;
  assert_true(tpk_dim_eval(CDIV(ADD(S("M"), C(5)), C(4)), lookup, NULL, &v));
  assert_int_equal(v, 4);
  assert_true(tpk_dim_eval(SUB(C(3), S("M")), lookup, NULL, &v));
  assert_int_equal(v, -7);
  assert_false(tpk_dim_eval(ADD(S("M"), S("N")), lookup, NULL, &v)); /* N unbound */
  assert_false(tpk_dim_eval(DIV(S("M"), S("Z")), lookup, NULL, &v)); /* division by zero */
  assert_ptr_equal(tpk_dim_substitute(m, MUL(S("M"), S("N")), lookup, NULL), MUL(S("N"), C(10)));
  assert_ptr_equal(tpk_dim_substitute(m, CDIV(S("M"), C(4)), lookup, NULL), C(3));
  const TpkDim *n = S("N");
  assert_ptr_equal(tpk_dim_substitute(m, n, lookup, NULL), n);
}

static void test_type_interning(void **state) {
  TpkModule *m = *state;
  const TpkDim *d1[] = {C(8), S("N")}, *d2[] = {C(8), S("N")}, *d3[] = {S("N"), C(8)};
  const TpkType *a = tpk_type_tensor(m, TPK_F32, 2, d1);
  assert_ptr_equal(a, tpk_type_tensor(m, TPK_F32, 2, d2));
  assert_ptr_not_equal(a, tpk_type_tensor(m, TPK_F32, 2, d3));
  assert_ptr_not_equal(a, tpk_type_tensor(m, TPK_BF16, 2, d1));
  const TpkType *r = tpk_type_ref(m, TPK_F32, 2, d1, TPK_MEM_HBM);
  assert_ptr_not_equal(a, r);
  assert_ptr_not_equal(r, tpk_type_ref(m, TPK_F32, 2, d1, TPK_MEM_VMEM));
  assert_ptr_equal(tpk_type_with_dtype(m, a, TPK_BOOL), tpk_type_tensor(m, TPK_BOOL, 2, d1));
  assert_ptr_equal(tpk_type_with_dtype(m, r, TPK_I8), tpk_type_ref(m, TPK_I8, 2, d1, TPK_MEM_HBM));
  assert_ptr_equal(tpk_type_scalar(m, TPK_I32), tpk_type_tensor(m, TPK_I32, 0, NULL));
  assert_true(tpk_type_is_scalar(tpk_type_scalar(m, TPK_F16)));
  assert_false(tpk_type_is_scalar(a));
  assert_ptr_equal(tpk_type_tile(m, 8), tpk_type_tile(m, 8));
  assert_ptr_not_equal(tpk_type_tile(m, 8), tpk_type_tile(m, 16));
  assert_ptr_equal(tpk_type_dma(m), tpk_type_dma(m));
  assert_null(tpk_type_tile(m, 0));
  assert_null(tpk_type_tensor(m, TPK_F32, TPK_MAX_RANK + 1, d1));
  assert_null(tpk_type_with_dtype(m, tpk_type_dma(m), TPK_F32));
  /* many distinct types: the table grows and keeps every one findable */
  const TpkType *ts[300];
  for (int i = 0; i < 300; i++) {
    const TpkDim *d[] = {C(i)};
    ts[i] = tpk_type_tensor(m, TPK_F32, 1, d);
  }
  for (int i = 0; i < 300; i++) {
    const TpkDim *d[] = {C(i)};
    assert_ptr_equal(ts[i], tpk_type_tensor(m, TPK_F32, 1, d));
  }
}

static void test_type_print(void **state) {
  TpkModule *m = *state;
  const TpkDim *d[] = {S("M"), S("N")}, *e[] = {C(8), C(128)}, *f[] = {MUL(S("B"), S("H")), S("S")};
  assert_string_equal(type_text(tpk_type_scalar(m, TPK_F32)), "f32");
  assert_string_equal(type_text(tpk_type_tensor(m, TPK_F32, 2, e)), "f32[8,128]");
  assert_string_equal(type_text(tpk_type_tensor(m, TPK_BF16, 2, f)), "bf16[B*H,S]");
  assert_string_equal(type_text(tpk_type_ref(m, TPK_F32, 2, d, TPK_MEM_HBM)), "ref<f32[M,N]>");
  assert_string_equal(type_text(tpk_type_ref(m, TPK_F32, 2, e, TPK_MEM_VMEM)), "ref<f32[8,128], vmem>");
  assert_string_equal(type_text(tpk_type_ref(m, TPK_I32, 0, NULL, TPK_MEM_SMEM)), "ref<i32, smem>");
  assert_string_equal(type_text(tpk_type_tile(m, 8)), "tile<8>");
  assert_string_equal(type_text(tpk_type_dma(m)), "dma");
  TpkStr s = {0};
  tpk_shape_print(&s, 0, NULL);
  assert_string_equal(s.data, "[]");
  tpk_str_free(&s);
}

static void test_op_table(void **state) {
  (void)state;
  for (int i = 0; i < TPK_OP_COUNT; i++) {
    const TpkOpInfo *info = tpk_op_info((TpkOpcode)i);
    assert_non_null(info);
    assert_int_equal(tpk_opcode_from_name(info->name, strlen(info->name)), i);
  }
  assert_int_equal(tpk_opcode_from_name("frob", 4), TPK_OP_COUNT);
  assert_int_equal(tpk_opcode_from_name("add", 2), TPK_OP_COUNT);
  assert_null(tpk_op_info(TPK_OP_COUNT));
  assert_string_equal(tpk_op_info(TPK_OP_TILE_ID)->name, "tile.id");
  assert_true(tpk_op_info(TPK_OP_LT)->flags & TPK_OPF_COMPARE);
  assert_int_equal(tpk_op_info(TPK_OP_IF)->nregion, 2);
}

static void test_module_intern_find(void **state) {
  TpkModule *m = *state;
  const char *a = tpk_module_intern(m, "hello world", 5);
  assert_string_equal(a, "hello");
  assert_ptr_equal(a, tpk_module_intern(m, "hello", 5));
  assert_null(tpk_module_intern(m, "a\0b", 3));
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  TpkFunc *f = tpk_func_new(m, "f", false, 1, &t, NULL, NULL);
  assert_ptr_equal(tpk_module_find(m, "f"), f);
  assert_null(tpk_module_find(m, "g"));
  for (int i = 0; i < 20; i++) { /* the function list grows */
    char name[16];
    snprintf(name, sizeof name, "g%d", i);
    assert_non_null(tpk_func_new(m, name, false, 0, NULL, NULL, NULL));
  }
  assert_int_equal(m->nfuncs, 21);
  assert_ptr_equal(tpk_module_find(m, "f"), f);
  assert_non_null(tpk_module_find(m, "g19"));
}

static void test_builder(void **state) {
  TpkModule *m = *state;
  const TpkDim *d[] = {C(8)};
  const TpkType *t = tpk_type_tensor(m, TPK_F32, 1, d);
  const TpkType *ts[] = {t, t};
  const char *names[] = {"a", "b"};
  TpkFunc *f = tpk_func_new(m, "f", false, 2, ts, names, NULL);
  assert_non_null(f);
  assert_int_equal(f->nparams, 2);
  assert_int_equal(f->body->nargs, 2);
  assert_ptr_equal(f->params[1].value, f->body->args[1]);
  assert_string_equal(f->params[1].name, "b");
  assert_int_equal(f->params[0].role, TPK_PARAM_IN);
  assert_ptr_equal(f->body->func, f);
  TpkBuilder b = {m, f->body, {3, 7}};
  TpkValue *x = f->params[0].value, *y = f->params[1].value;
  TpkValue *s = tpk_build_binary(&b, TPK_OP_ADD, x, y);
  assert_ptr_equal(s->type, t);
  assert_int_equal(s->def->loc.line, 3);
  assert_ptr_equal(s->def->parent, f->body);
  TpkValue *c = tpk_build_binary(&b, TPK_OP_LT, s, y);
  assert_ptr_equal(c->type, tpk_type_with_dtype(m, t, TPK_BOOL));
  TpkValue *sel = tpk_build_select(&b, c, s, x);
  assert_ptr_equal(sel->type, t);
  TpkValue *h = tpk_build_convert(&b, sel, TPK_BF16);
  assert_int_equal(h->type->dtype, TPK_BF16);
  TpkValue *e = tpk_build_unary(&b, TPK_OP_EXP, x);
  assert_ptr_equal(e->type, t);
  const TpkDim *d2[] = {C(4), C(8)};
  TpkValue *bc = tpk_build_broadcast(&b, e, 2, d2);
  assert_ptr_equal(bc->type, tpk_type_tensor(m, TPK_F32, 2, d2));
  TpkValue *k = tpk_build_const_float(&b, t, 1.5);
  TpkValue *n = tpk_build_sym(&b, "N");
  assert_ptr_equal(n->type, tpk_type_scalar(m, TPK_I32));
  assert_string_equal(tpk_op_str(n->def, "name", NULL), "N");
  assert_true(tpk_op_attr(k->def, "value")->f == 1.5);
  TpkValue *ki = tpk_build_const_int(&b, tpk_type_scalar(m, TPK_I32), 7);
  assert_int_equal(tpk_op_int(ki->def, "value", 0), 7);
  /* attributes: set, overwrite, defaults */
  TpkOp *op = s->def;
  tpk_op_set_int(m, op, "x", 1);
  tpk_op_set_str(m, op, "y", "hi");
  tpk_op_set_bool(m, op, "z", true);
  int64_t list[] = {1, 2, 3};
  tpk_op_set_ints(m, op, "w", 3, list);
  tpk_op_set_float(m, op, "v", 0.25);
  tpk_op_set_int(m, op, "x", 5);
  assert_int_equal(op->nattr, 5);
  assert_int_equal(tpk_op_int(op, "x", 0), 5);
  assert_int_equal(tpk_op_int(op, "z", 0), 1);
  assert_int_equal(tpk_op_int(op, "missing", -1), -1);
  assert_string_equal(tpk_op_str(op, "y", NULL), "hi");
  assert_string_equal(tpk_op_str(op, "x", "dflt"), "dflt");
  assert_int_equal(tpk_op_attr(op, "w")->n, 3);
  assert_int_equal(tpk_op_attr(op, "w")->ints[2], 3);
  assert_null(tpk_op_attr(op, "nope"));
  for (int i = 0; i < 10; i++) { /* the attribute array grows */
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    tpk_op_set_int(m, op, key, i);
  }
  assert_int_equal(tpk_op_int(op, "k9", 0), 9);
  assert_int_equal(tpk_op_int(op, "x", 0), 5);
  assert_null(tpk_build_yield(&b, 0, NULL));
  assert_int_equal(f->body->last->opcode, TPK_OP_YIELD);
}

static int count_ops(const TpkBlock *b) {
  int n = 0;
  for (const TpkOp *op = b->first; op; op = op->next) n++;
  return n;
}

/* A builder with `before` set inserts there, first of a block included;
 * a removed function leaves the module's list, the others in order. */
static void test_build_before_and_remove(void **state) {
  TpkModule *m = *state;
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  TpkFunc *f = tpk_func_new(m, "f", false, 1, &t, NULL, NULL);
  TpkFunc *g = tpk_func_new(m, "g", false, 0, NULL, NULL, NULL);
  TpkFunc *h = tpk_func_new(m, "h", false, 0, NULL, NULL, NULL);
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkValue *x = f->params[0].value;
  TpkValue *last = tpk_build_unary(&b, TPK_OP_NEG, x);
  b.before = last->def;
  TpkValue *mid = tpk_build_unary(&b, TPK_OP_ABS, x);
  TpkValue *mid2 = tpk_build_unary(&b, TPK_OP_EXP, mid);
  assert_ptr_equal(f->body->first, mid->def);
  assert_ptr_equal(mid->def->next, mid2->def);
  assert_ptr_equal(mid2->def->next, last->def);
  assert_ptr_equal(last->def->prev, mid2->def);
  assert_ptr_equal(f->body->last, last->def);
  assert_ptr_equal(mid2->def->parent, f->body);
  assert_int_equal(count_ops(f->body), 3);
  b.before = NULL;
  TpkValue *end = tpk_build_unary(&b, TPK_OP_ABS, last);
  assert_ptr_equal(f->body->last, end->def);
  int n = m->nfuncs;
  tpk_module_remove(m, g);
  assert_int_equal(m->nfuncs, n - 1);
  assert_null(tpk_module_find(m, "g"));
  assert_ptr_equal(tpk_module_find(m, "h"), h);
  assert_ptr_equal(m->funcs[m->nfuncs - 1], h);
  tpk_module_remove(m, g); /* not there: nothing */
  assert_int_equal(m->nfuncs, n - 1);
}

static void test_erase_and_replace(void **state) {
  TpkModule *m = *state;
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  const TpkType *ts[] = {t};
  TpkFunc *f = tpk_func_new(m, "f", false, 1, ts, NULL, NULL);
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkValue *x = f->params[0].value;
  TpkValue *a = tpk_build_unary(&b, TPK_OP_NEG, x);
  TpkValue *c = tpk_build_unary(&b, TPK_OP_ABS, x);
  TpkValue *d = tpk_build_binary(&b, TPK_OP_ADD, a, a);
  /* the use inside a nested region is replaced too */
  TpkValue *cond = tpk_build_const_int(&b, tpk_type_scalar(m, TPK_BOOL), 1);
  TpkOp *iff = tpk_build(&b, TPK_OP_IF, 1, &cond, 0, NULL);
  TpkBuilder inner = {m, iff->regions[0], {0, 0}};
  TpkValue *e = tpk_build_unary(&inner, TPK_OP_NEG, a);
  tpk_func_replace_uses(f, a, c);
  assert_ptr_equal(d->def->in[0], c);
  assert_ptr_equal(d->def->in[1], c);
  assert_ptr_equal(e->def->in[0], c);
  assert_int_equal(count_ops(f->body), 5);
  tpk_op_erase(a->def);
  assert_int_equal(count_ops(f->body), 4);
  assert_ptr_equal(f->body->first, c->def);
  assert_null(c->def->prev);
  tpk_op_erase(iff);
  assert_ptr_equal(f->body->last, cond->def);
  tpk_op_erase(c->def);
  tpk_op_erase(d->def);
  tpk_op_erase(cond->def);
  assert_null(f->body->first);
  assert_null(f->body->last);
  tpk_op_erase(cond->def); /* erasing twice is harmless */
}

/* A block argument keeps its address however many follow it: past the
 * argument array's capacity (8, 16, 64) only the array of pointers moves. */
static void test_block_args_grow(void **state) {
  TpkModule *m = *state;
  const TpkType *i32 = tpk_type_scalar(m, TPK_I32);
  TpkFunc *f = tpk_func_new(m, "k", true, 0, NULL, NULL, NULL);
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkValue *lo = tpk_build_const_int(&b, i32, 0);
  TpkValue *ins[] = {lo, lo};
  TpkOp *loop = tpk_build(&b, TPK_OP_FOR, 2, ins, 0, NULL);
  TpkBlock *body = loop->regions[0];
  assert_ptr_equal(body->parent, loop);
  enum { N = 130 };
  TpkValue *held[N];
  TpkValue snapshot[N];
  held[0] = tpk_block_add_arg(m, body, i32, "i");
  TpkBuilder bb = {m, body, {0, 0}};
  TpkValue *use = tpk_build_unary(&bb, TPK_OP_NEG, held[0]);
  snapshot[0] = *held[0];
  for (int i = 1; i < N; i++) {
    held[i] = tpk_block_add_arg(m, body, i32, NULL);
    assert_non_null(held[i]);
    snapshot[i] = *held[i];
    if (i == 8 || i == 16 || i == 64 || i == 128) /* the array just grew: every earlier value is where it was */
      for (int k = 0; k <= i; k++) {
        assert_ptr_equal(body->args[k], held[k]);
        assert_memory_equal(held[k], &snapshot[k], sizeof snapshot[k]);
      }
  }
  assert_int_equal(body->nargs, N);
  assert_ptr_equal(use->def->in[0], held[0]);
  assert_string_equal(held[0]->name, "i");
  for (int i = 0; i < body->nargs; i++) {
    assert_ptr_equal(body->args[i]->block, body);
    assert_int_equal(body->args[i]->index, i);
  }
}

static void test_func_params_grow(void **state) {
  TpkModule *m = *state;
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  const TpkType *ts[20];
  TpkParamRole roles[20];
  for (int i = 0; i < 20; i++) ts[i] = t, roles[i] = TPK_PARAM_IN;
  TpkFunc *f = tpk_func_new(m, "f", false, 20, ts, NULL, roles);
  for (int i = 0; i < 20; i++) assert_ptr_equal(f->params[i].value, f->body->args[i]);
}

/* ---- use lists ---- */

static bool listed(const TpkValue *v, const TpkOp *user, int index) {
  for (const TpkUse *u = v->uses; u; u = u->next)
    if (u->user == user && u->index == index) return true;
  return false;
}

/* Operands of the ops of b (and its regions) that are v: what a walk finds. */
static int walked_uses(const TpkBlock *b, const TpkValue *v) {
  int n = 0;
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int i = 0; i < op->nin; i++) n += op->in[i] == v;
    for (int r = 0; r < op->nregion; r++) n += walked_uses(op->regions[r], v);
  }
  return n;
}

/* Every operand of b's ops is in its value's list, and every value b defines
 * has as many uses listed as a walk of f finds. */
static void assert_use_lists(const TpkFunc *f, const TpkBlock *b) {
  for (int i = 0; i < b->nargs; i++) assert_int_equal(b->args[i]->nuses, walked_uses(f->body, b->args[i]));
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int i = 0; i < op->nin; i++)
      if (!listed(op->in[i], op, i)) fail_msg("'%s' operand %d is not in its value's use list", tpk_op_info(op->opcode)->name, i);
    for (int i = 0; i < op->nout; i++) assert_int_equal(op->out[i].nuses, walked_uses(f->body, &op->out[i]));
    for (int r = 0; r < op->nregion; r++) assert_use_lists(f, op->regions[r]);
  }
}

static void test_use_lists(void **state) {
  TpkModule *m = *state;
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  TpkFunc *f = tpk_func_new(m, "f", false, 1, &t, NULL, NULL);
  f->nresults = 1;
  f->results = &t;
  TpkBuilder b = {m, f->body, {0, 0}};
  TpkValue *x = f->params[0].value;
  TpkValue *a = tpk_build_unary(&b, TPK_OP_NEG, x);
  TpkValue *c = tpk_build_unary(&b, TPK_OP_ABS, x);
  TpkValue *d = tpk_build_binary(&b, TPK_OP_ADD, a, a);
  TpkValue *cond = tpk_build_const_int(&b, tpk_type_scalar(m, TPK_BOOL), 1);
  TpkOp *iff = tpk_build(&b, TPK_OP_IF, 1, &cond, 0, NULL);
  TpkBuilder inner = {m, iff->regions[0], {0, 0}};
  TpkValue *e = tpk_build_unary(&inner, TPK_OP_NEG, a);
  TpkOp *ret = tpk_build(&b, TPK_OP_RETURN, 1, &d, 0, NULL);
  /* after building */
  assert_use_lists(f, f->body);
  assert_int_equal(tpk_value_use_count(a), 3);
  assert_true(listed(a, d->def, 0) && listed(a, d->def, 1) && listed(a, e->def, 0));
  assert_null(tpk_value_single_user(a)); /* three uses */
  assert_null(tpk_value_single_user(d->def->in[0]));
  assert_int_equal(tpk_value_use_count(x), 2);
  assert_ptr_equal(tpk_value_single_user(cond), iff);
  assert_ptr_equal(tpk_value_single_user(d), ret);
  assert_int_equal(tpk_value_use_count(e), 0);
  assert_null(tpk_value_single_user(e));
  TpkError err = {0};
  if (tpk_ir_verify(m, &err) != TPK_OK) fail_msg("%s", err.message);
  /* changing one operand moves its use */
  tpk_op_set_operand(d->def, 1, c);
  assert_ptr_equal(d->def->in[1], c);
  assert_int_equal(tpk_value_use_count(a), 2);
  assert_false(listed(a, d->def, 1));
  assert_true(listed(c, d->def, 1));
  tpk_op_set_operand(d->def, 1, c); /* the same value: nothing changes */
  assert_int_equal(tpk_value_use_count(c), 1);
  assert_use_lists(f, f->body);
  /* replacing every use, in a nested region too */
  tpk_func_replace_uses(f, a, c);
  assert_int_equal(tpk_value_use_count(a), 0);
  assert_int_equal(tpk_value_use_count(c), 3);
  assert_ptr_equal(e->def->in[0], c);
  assert_use_lists(f, f->body);
  if (tpk_ir_verify(m, &err) != TPK_OK) fail_msg("%s", err.message);
  /* all operands at once: fewer, more, none */
  TpkValue *two[] = {x, x};
  assert_true(tpk_op_set_operands(m, d->def, 2, two));
  assert_int_equal(tpk_value_use_count(c), 1);
  assert_int_equal(tpk_value_use_count(x), 4);
  TpkValue *three[] = {c, c, x};
  assert_true(tpk_op_set_operands(m, d->def, 3, three));
  assert_int_equal(d->def->nin, 3);
  assert_true(listed(c, d->def, 0) && listed(c, d->def, 1) && listed(x, d->def, 2));
  assert_use_lists(f, f->body);
  assert_true(tpk_op_set_operands(m, d->def, 0, NULL));
  assert_int_equal(d->def->nin, 0);
  assert_int_equal(tpk_value_use_count(c), 1); /* the neg in the if */
  assert_int_equal(tpk_value_use_count(x), 2);
  assert_use_lists(f, f->body);
  /* erasing an op drops its uses and those of the ops in its regions */
  tpk_op_erase(iff);
  assert_int_equal(tpk_value_use_count(c), 0);
  assert_int_equal(tpk_value_use_count(cond), 0);
  tpk_op_erase(iff); /* twice: harmless */
  tpk_op_erase(e->def); /* an op inside an erased op: its uses are gone already */
  assert_int_equal(tpk_value_use_count(c), 0);
  assert_use_lists(f, f->body);
  tpk_op_erase(a->def);
  assert_int_equal(tpk_value_use_count(x), 1);
  assert_use_lists(f, f->body);
}

/* A graph builder adds inputs one at a time; each stays where it was. */
static void test_func_add_param(void **state) {
  TpkModule *m = *state;
  const TpkType *t = tpk_type_scalar(m, TPK_F32);
  TpkFunc *f = tpk_func_new(m, "g", false, 0, NULL, NULL, NULL);
  TpkBuilder b = {m, f->body, {0, 0}};
  enum { N = 70 };
  TpkValue *in[N], *acc = NULL;
  for (int i = 0; i < N; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    in[i] = tpk_func_add_param(m, f, t, name, TPK_PARAM_IN);
    assert_non_null(in[i]);
    acc = acc ? tpk_build_binary(&b, TPK_OP_ADD, acc, in[i]) : in[i];
  }
  f->nresults = 1;
  f->results = &t;
  tpk_build(&b, TPK_OP_RETURN, 1, &acc, 0, NULL);
  assert_int_equal(f->nparams, N);
  for (int i = 0; i < N; i++) {
    assert_ptr_equal(f->params[i].value, in[i]);
    assert_ptr_equal(f->body->args[i], in[i]);
    assert_int_equal(tpk_value_use_count(in[i]), 1);
  }
  assert_string_equal(f->params[N - 1].name, "x69");
  TpkError err = {0};
  if (tpk_ir_verify(m, &err) != TPK_OK) fail_msg("%s", err.message);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_dim_interning, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dim_folding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dim_canonical_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dim_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dim_print, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dim_eval_substitute, setup, teardown),
      cmocka_unit_test_setup_teardown(test_type_interning, setup, teardown),
      cmocka_unit_test_setup_teardown(test_type_print, setup, teardown),
      cmocka_unit_test(test_op_table),
      cmocka_unit_test_setup_teardown(test_module_intern_find, setup, teardown),
      cmocka_unit_test_setup_teardown(test_builder, setup, teardown),
      cmocka_unit_test_setup_teardown(test_erase_and_replace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_block_args_grow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_func_params_grow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_use_lists, setup, teardown),
      cmocka_unit_test_setup_teardown(test_build_before_and_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_func_add_param, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
