/*
 * Tests of dsl/check.c: valid kernels check clean and build the IR the
 * language promises (grids, loop-carried vars, folded transposes, weak
 * literals, bindings, tunables), and the IR of every corpus kernel survives
 * print -> parse -> print unchanged.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* The nth op (0-based, in program order, regions included) with opcode op. */
static TpkOp *find_in_block(TpkBlock *b, TpkOpcode opc, int *nth) {
  for (TpkOp *op = b ? b->first : NULL; op; op = op->next) {
    if (op->opcode == opc && (*nth)-- == 0) return op;
    for (int r = 0; r < op->nregion; r++) {
      TpkOp *found = find_in_block(op->regions[r], opc, nth);
      if (found) return found;
    }
  }
  return NULL;
}

static TpkOp *find_op(TpkFunc *f, TpkOpcode opc, int nth) { return find_in_block(f->body, opc, &nth); }

static int count_ops(TpkFunc *f, TpkOpcode opc) {
  int n = 0;
  while (find_op(f, opc, n)) n++;
  return n;
}

static char *type_text(const TpkType *t) {
  TpkStr s = {0};
  tpk_type_print(&s, t);
  return tpk_str_take(&s);
}

static void assert_type(const TpkType *t, const char *want) {
  char *got = type_text(t);
  if (strcmp(got, want) != 0) fprintf(stderr, "type: want %s, got %s\n", want, got);
  assert_string_equal(got, want);
  free(got);
}

/* Index pattern `key` of op, in its text form ("t:"). */
static void assert_index(const TpkOp *op, const char *key, const char *want) {
  TpkStr s = {0};
  tpk_index_print(&s, tpk_op_index(op, key));
  char *got = tpk_str_take(&s);
  assert_string_equal(got ? got : "", want);
  free(got);
}

/* Compile text that must check clean; the caller frees c. */
static void compile_ok(TestCompile *c, const char *text, const TpkCheckOptions *opts) {
  test_compile(c, "test.tpk", text, opts);
  if (c->status != TPK_OK) fprintf(stderr, "unexpected diagnostics:\n%s", c->rendered);
  assert_int_equal(c->status, TPK_OK);
  assert_non_null(c->module);
  assert_string_equal(c->rendered, "");
}

/* ---- the contract's examples ---- */

static const char *MATMUL =
    "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
    "  tune BM in [128, 256], BN in [128, 256], BK in [256, 512]\n"
    "{\n"
    "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
    "    var acc = zeros(f32[BM, BN]);\n"
    "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
    "    c[i, j] = acc;\n"
    "  }\n"
    "}\n";

static const char *SOFTMAX =
    "kernel softmax(x: f32[M, N]) -> (y: f32[M, N])\n"
    "  tune BM in [8, 16, 32]\n"
    "{\n"
    "  for i in tiles(M, BM) {\n"
    "    let t = load(x[i, :], other=-inf);\n"
    "    let e = exp(t - max(t, axis=1, keepdims=true));\n"
    "    y[i, :] = e / sum(e, axis=1, keepdims=true);\n"
    "  }\n"
    "}\n";

static void test_matmul_ir(void **state) {
  (void)state;
  TestCompile c;
  compile_ok(&c, MATMUL, NULL);
  TpkFunc *f = tpk_module_find(c.module, "matmul");
  assert_non_null(f);
  assert_true(f->is_kernel);
  assert_int_equal(f->nparams, 3);
  assert_int_equal(f->params[2].role, TPK_PARAM_OUT);
  assert_type(f->params[0].value->type, "ref<bf16[M,K]>");
  /* tunables are symbols until the kernel is bound; the defaults are known */
  assert_int_equal(f->ntunes, 3);
  assert_string_equal(f->tunes[0].name, "BM");
  assert_false(f->tunes[0].bound);
  assert_int_equal(f->tunes[0].value, 128);
  assert_int_equal(f->tunes[2].nchoices, 2);
  /* one 2-D grid over tiles, one sequential loop carrying acc */
  TpkOp *grid = find_op(f, TPK_OP_GRID, 0);
  assert_non_null(grid);
  assert_int_equal(grid->nin, 4);
  assert_int_equal(grid->regions[0]->nargs, 2);
  assert_type(grid->regions[0]->args[0]->type, "tile<BM>");
  assert_null(find_op(f, TPK_OP_GRID, 1));
  TpkOp *loop = find_op(f, TPK_OP_FOR, 0);
  assert_non_null(loop);
  assert_int_equal(loop->nout, 1);
  assert_type(loop->out[0].type, "f32[BM,BN]");
  assert_type(loop->regions[0]->args[0]->type, "tile<BK>");
  TpkOp *dot = find_op(f, TPK_OP_DOT, 0);
  assert_type(dot->in[0]->type, "bf16[BM,BK]");
  assert_type(dot->out[0].type, "f32[BM,BN]");
  /* bound, the defaults are constants everywhere */
  TpkFunc *g = tpk_module_find(c.bound, "matmul");
  assert_true(g->tunes[0].bound);
  assert_type(find_op(g, TPK_OP_GRID, 0)->regions[0]->args[0]->type, "tile<128>");
  assert_type(find_op(g, TPK_OP_DOT, 0)->in[0]->type, "bf16[128,256]");
  assert_int_equal(tpk_op_attr(dot, "rhs_contract")->ints[0], 0);
  /* the loop result is what gets stored */
  TpkOp *st = find_op(f, TPK_OP_STORE, 0);
  assert_ptr_equal(st->in[st->nin - 1], &loop->out[0]);
  assert_index(st, "index", "tt");
  test_compile_free(&c);
}

static void test_softmax_tune_and_bind(void **state) {
  (void)state;
  TpkBinding binds[] = {{"N", 1000}};
  TpkBinding tunes[] = {{"BM", 16}};
  TpkCheckOptions o = {.binds = binds, .nbinds = 1, .tunes = tunes, .ntunes = 1};
  TestCompile c;
  compile_ok(&c, SOFTMAX, &o);
  TpkFunc *f = tpk_module_find(c.module, "softmax");
  assert_type(f->params[0].value->type, "ref<f32[M,1000]>");
  TpkOp *ld = find_op(f, TPK_OP_LOAD, 0);
  assert_type(ld->out[0].type, "f32[16,1000]");
  assert_index(ld, "index", "t:");
  const TpkAttr *other = tpk_op_attr(ld, "other");
  assert_non_null(other);
  assert_true(other->kind == TPK_ATTR_FLOAT && other->f < 0 && other->f * 0 != 0); /* -inf */
  TpkOp *red = find_op(f, TPK_OP_REDUCE, 0);
  assert_int_equal(tpk_op_reduce_kind(red), TPK_REDUCE_MAX);
  assert_type(red->out[0].type, "f32[16,1]");
  test_compile_free(&c);
}

static void test_flash_attention_transpose_folded(void **state) {
  (void)state;
  TestCompile c;
  TpkFunc *f = test_compile_kernel_file(&c, "tests/corpus/flash_attention.tpk", "flash_attention", NULL);
  assert_int_equal(count_ops(f, TPK_OP_TRANSPOSE), 0); /* never materialised */
  TpkOp *dot = find_op(f, TPK_OP_DOT, 0);
  assert_int_equal(tpk_op_attr(dot, "rhs_contract")->ints[0], 1);
  assert_type(dot->out[0].type, "f32[128,128]");
  /* three vars carried around the kv loop */
  TpkOp *loop = find_op(f, TPK_OP_FOR, 0);
  assert_int_equal(loop->nout, 3);
  /* the grid's first axis is a scalar index, the second a tile */
  TpkOp *grid = find_op(f, TPK_OP_GRID, 0);
  assert_type(grid->regions[0]->args[0]->type, "i32");
  assert_type(grid->regions[0]->args[1]->type, "tile<128>");
  assert_type(find_op(f, TPK_OP_DOT, 1)->out[0].type, "f32[128,D]");
  test_compile_free(&c);
}

static void test_embedding_bwd_scatter(void **state) {
  (void)state;
  TestCompile c;
  TpkFunc *f = test_compile_kernel_file(&c, "tests/corpus/embedding_bwd.tpk", "embedding_bwd", NULL);
  assert_true(f->params[2].zero_init);
  TpkOp *st = find_op(f, TPK_OP_STORE, 0);
  assert_index(st, "index", "g:");
  assert_int_equal(tpk_op_store_mode(st), TPK_STORE_ADD);
  assert_type(st->in[1]->type, "i32[64]");
  test_compile_free(&c);
}

static void test_weak_literals_and_promotion(void **state) {
  (void)state;
  const char *text = "kernel f(x: bf16[N], y: f32[N]) -> (a: bf16[N], b: f32[N]) {\n"
                     "  a = x * 2;\n"
                     "  b = x + y;\n"
                     "}\n";
  TestCompile c;
  compile_ok(&c, text, NULL);
  TpkFunc *f = tpk_module_find(c.module, "f");
  TpkOp *mul = find_op(f, TPK_OP_MUL, 0);
  assert_type(mul->out[0].type, "bf16[N]"); /* the literal took x's dtype */
  TpkOp *add = find_op(f, TPK_OP_ADD, 0);
  assert_type(add->out[0].type, "f32[N]"); /* bf16 + f32 -> f32 */
  assert_int_equal(count_ops(f, TPK_OP_CONVERT), 1);
  test_compile_free(&c);
}

static void test_if_merges_var(void **state) {
  (void)state;
  const char *text = "kernel f(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [8] {\n"
                     "  for i in tiles(M, BM) {\n"
                     "    var t = x[i, :];\n"
                     "    if i.id == 0 { t = t * 2.0; } else { t = t + 1.0; }\n"
                     "    y[i, :] = t;\n"
                     "  }\n"
                     "}\n";
  TestCompile c;
  compile_ok(&c, text, NULL);
  TpkFunc *f = tpk_module_find(c.module, "f");
  TpkOp *iff = find_op(f, TPK_OP_IF, 0);
  assert_non_null(iff);
  assert_int_equal(iff->nout, 1);
  TpkOp *st = find_op(f, TPK_OP_STORE, 0);
  assert_ptr_equal(st->in[st->nin - 1], &iff->out[0]);
  test_compile_free(&c);
}

static void test_whole_array_and_consts(void **state) {
  (void)state;
  const char *text = "const HALF = LANES / 2;\n"
                     "kernel f(x: f32[N], w: f32[LANES]) -> (o: f32[N], p: f32[HALF]) {\n"
                     "  o = x + 1.0;\n"
                     "  p = w[0..HALF];\n"
                     "}\n"
                     "const LANES = 128;\n";
  TestCompile c;
  compile_ok(&c, text, NULL);
  TpkFunc *f = tpk_module_find(c.module, "f");
  assert_type(f->params[1].value->type, "ref<f32[128]>");
  assert_type(f->params[3].value->type, "ref<f32[64]>");
  TpkOp *ld = find_op(f, TPK_OP_LOAD, 1);
  assert_index(ld, "index", "r");
  assert_type(ld->out[0].type, "f32[64]");
  test_compile_free(&c);
}

static void test_scratch_and_dma(void **state) {
  (void)state;
  const char *text = "kernel f(x: f32[M, 128]) -> (o: f32[M, 128]) tune BM in [8] {\n"
                     "  for i in tiles(M, BM) {\n"
                     "    scratch buf: f32[BM, 128];\n"
                     "    let c = copy_async(x[i, :], buf);\n"
                     "    wait(c);\n"
                     "    o[i, :] = buf * 2.0;\n"
                     "  }\n"
                     "}\n";
  TestCompile c;
  compile_ok(&c, text, NULL);
  TpkFunc *f = tpk_module_find(c.module, "f");
  TpkOp *alloc = find_op(f, TPK_OP_ALLOC, 0);
  assert_type(alloc->out[0].type, "ref<f32[BM,128], vmem>");
  TpkOp *dma = find_op(f, TPK_OP_DMA_START, 0);
  assert_index(dma, "src_index", "t:");
  assert_index(dma, "dst_index", "::");
  assert_non_null(find_op(f, TPK_OP_DMA_WAIT, 0));
  test_compile_free(&c);
}

static void test_only_kernel(void **state) {
  (void)state;
  char *text = malloc(strlen(MATMUL) + strlen(SOFTMAX) + 1);
  strcpy(text, MATMUL);
  strcat(text, SOFTMAX);
  TpkCheckOptions o = {.only_kernel = "softmax"};
  TestCompile c;
  compile_ok(&c, text, &o);
  assert_int_equal(c.module->nfuncs, 1);
  assert_string_equal(c.module->funcs[0]->name, "softmax");
  test_compile_free(&c);
  free(text);
}

/* `backward B`: the signatures match by name. B may come before F; an
 * output of F whose gradient B does not take (lse) is non-differentiable;
 * a bf16 output's or input's gradient may be f32; an integer input has no
 * gradient; dims compare as sizes (a const and its value); B may name its
 * own backward kernel (double backward). */
static const char *BACKWARD_PAIR =
    "const LANES = 128;\n"
    "kernel attn_bwd(q: bf16[S, LANES], ids: i32[S], o: bf16[S, 128], do: f32[S, 128], scale: f32)\n"
    "    -> (dq: f32[S, LANES])\n"
    "  backward attn_bwd2\n"
    "{ dq = (do * scale) + (q as f32) * 0.0 + (o as f32) * 0.0; }\n"
    "kernel attn(q: bf16[S, LANES], ids: i32[S], scale: f32) -> (o: bf16[S, LANES], lse: f32[S])\n"
    "  backward attn_bwd\n"
    "  tune BM in [8, 16]\n"
    "{ o = (q as f32 * scale) as bf16; lse = sum(q as f32, axis=1); }\n"
    "kernel attn_bwd2(do: f32[S, 128], ddq: f32[S, 128]) -> (ddo: f32[S, 128]) { ddo = ddq + do * 0.0; }\n";

static void test_backward_kernels(void **state) {
  (void)state;
  TestCompile c;
  compile_ok(&c, BACKWARD_PAIR, NULL);
  assert_string_equal(tpk_module_find(c.module, "attn")->backward, "attn_bwd");
  assert_string_equal(tpk_module_find(c.module, "attn_bwd")->backward, "attn_bwd2");
  assert_null(tpk_module_find(c.module, "attn_bwd2")->backward);
  TpkStr s = {0};
  tpk_ir_print_func(&s, tpk_module_find(c.module, "attn"));
  assert_non_null(strstr(s.data, ") backward @attn_bwd tune{BM in [8, 16]}"));
  tpk_str_free(&s);
  test_compile_free(&c);
  /* checking one kernel keeps its backward's name; the other kernel is not
   * built, so its signature is not compared, but it must exist */
  TpkCheckOptions only = {.only_kernel = "attn"};
  compile_ok(&c, BACKWARD_PAIR, &only);
  assert_int_equal(c.module->nfuncs, 1);
  assert_string_equal(c.module->funcs[0]->backward, "attn_bwd");
  test_compile_free(&c);
  TpkCheckOptions only_f = {.only_kernel = "f"};
  test_compile(&c, "test.tpk", "kernel f(x: f32[N]) -> (y: f32[N]) backward g { y = x; }\n", &only_f);
  assert_int_equal(c.status, TPK_ERR_PARSE);
  assert_non_null(strstr(c.rendered, "test.tpk:1:45: error: no kernel named 'g' in this file\n"));
  test_compile_free(&c);
}

/* A file starting with a UTF-8 byte order mark checks; columns and carets
 * on its first line count from after the mark. */
static void test_byte_order_mark(void **state) {
  (void)state;
  TestCompile c;
  test_compile(&c, "bom.tpk", "\xEF\xBB\xBFkernel f(x: f32[N]) -> (o: f32[N]) { o = x; }\n", NULL);
  assert_int_equal(c.status, TPK_OK);
  test_compile_free(&c);
  test_compile(&c, "bom.tpk", "\xEF\xBB\xBFkernel f(x: f32[N]) -> (o: f32[N]) { o = y; }\n", NULL);
  assert_int_equal(c.status, TPK_ERR_PARSE);
  assert_non_null(strstr(c.rendered, "bom.tpk:1:42: error: unknown name 'y'\n"
                                     "   kernel f(x: f32[N]) -> (o: f32[N]) { o = y; }\n"
                                     "                                            ^\n"));
  test_compile_free(&c);
}

/* Diagnostics that are easier to assert here than as golden files: the
 * error count and that checking goes on after an error. */
static void test_errors_do_not_cascade(void **state) {
  (void)state;
  const char *text = "kernel f(x: f32[N]) -> (o: f32[N]) {\n"
                     "  let a = undefined_thing * 2.0;\n"
                     "  let b = exp(a) + a;\n"
                     "  o = b;\n"
                     "}\n";
  TestCompile c;
  test_compile(&c, "t.tpk", text, NULL);
  assert_int_equal(c.status, TPK_ERR_PARSE);
  assert_null(c.module);
  assert_int_equal(c.diags.errors, 1);
  test_compile_free(&c);
}

/* ---- long chains of consts (issue 9, bug 2) ---- */

/* `const E0 = E1<op>; ... const E{n-1} = <last>;`, with the kernel that uses
 * E0 as a size before the chain (so the chain is first reached from inside a
 * kernel) or after it (reached from the file's const loop). */
static char *const_chain(int n, const char *op, const char *last, bool kernel_first) {
  TpkStr s = {0};
  const char *kernel = "kernel f(x: f32[E0]) -> (o: f32[E0]) { o = x; }\n";
  if (kernel_first) tpk_str_puts(&s, kernel);
  for (int i = 0; i < n - 1; i++) tpk_str_printf(&s, "const E%d = E%d%s;\n", i, i + 1, op);
  tpk_str_printf(&s, "const E%d = %s;\n", n - 1, last);
  if (!kernel_first) tpk_str_puts(&s, kernel);
  assert_false(s.failed);
  return tpk_str_take(&s);
}

static void assert_chain_size(int n, const char *op, const char *last, bool kernel_first, const char *want) {
  char *text = const_chain(n, op, last, kernel_first);
  TestCompile c;
  compile_ok(&c, text, NULL);
  assert_type(tpk_module_find(c.module, "f")->params[0].value->type, want);
  test_compile_free(&c);
  free(text);
}

/* Evaluating a const does not recurse into the consts it names: 200,000
 * deep is fine (14,000 overflowed the C stack), also through expressions. */
static void test_long_const_chains(void **state) {
  (void)state;
  assert_chain_size(14000, "", "7", false, "ref<f32[7]>");
  assert_chain_size(200000, "", "7", true, "ref<f32[7]>");
  assert_chain_size(14000, " + 1", "0", true, "ref<f32[13999]>");
  assert_chain_size(200000, " * 1 + 0", "5", false, "ref<f32[5]>");
}

/* A cycle closing a long chain is one error at the const where it closes,
 * as for a short one (tests/diag/const-cycle). */
static void test_long_const_cycle(void **state) {
  (void)state;
  char *text = const_chain(200000, " + 1", "E0 * 2", false);
  TestCompile c;
  test_compile(&c, "t.tpk", text, NULL);
  assert_int_equal(c.status, TPK_ERR_PARSE);
  assert_int_equal(c.diags.errors, 1);
  assert_non_null(strstr(c.rendered, "t.tpk:1:7: error: const 'E0' depends on itself"));
  test_compile_free(&c);
  free(text);
}

/* ---- the corpus: every valid kernel checks, verifies and round-trips ---- */

static void test_corpus_checks_and_round_trips(void **state) {
  (void)state;
  char *names[256];
  int n = test_list_tpk("tests/corpus", names, 256);
  assert_true(n >= 16);
  int failures = 0;
  for (int i = 0; i < n; i++) {
    char rel[512];
    snprintf(rel, sizeof rel, "tests/corpus/%s", names[i]);
    char *text = test_read_file(test_path(rel), NULL);
    assert_non_null(text);
    TestCompile c;
    test_compile(&c, names[i], text, NULL);
    if (c.status != TPK_OK) {
      fprintf(stderr, "%s does not check:\n%s", names[i], c.rendered);
      failures++;
    } else {
      TpkStr p1 = {0}, p2 = {0};
      tpk_ir_print(&p1, c.module);
      TpkError err = {0};
      TpkModule *back = tpk_ir_parse(p1.data, p1.len, names[i], &err);
      if (!back) {
        fprintf(stderr, "%s: printed IR does not parse: %s\n%s", names[i], err.message, p1.data);
        failures++;
      } else {
        tpk_ir_print(&p2, back);
        if (strcmp(p1.data, p2.data) != 0) {
          fprintf(stderr, "%s: print -> parse -> print differs\n--- first\n%s--- second\n%s", names[i], p1.data,
                  p2.data);
          failures++;
        }
        tpk_module_free(back);
      }
      tpk_str_free(&p1);
      tpk_str_free(&p2);
    }
    test_compile_free(&c);
    free(text);
    free(names[i]);
  }
  assert_int_equal(failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_ir),
      cmocka_unit_test(test_softmax_tune_and_bind),
      cmocka_unit_test(test_flash_attention_transpose_folded),
      cmocka_unit_test(test_embedding_bwd_scatter),
      cmocka_unit_test(test_weak_literals_and_promotion),
      cmocka_unit_test(test_if_merges_var),
      cmocka_unit_test(test_whole_array_and_consts),
      cmocka_unit_test(test_scratch_and_dma),
      cmocka_unit_test(test_only_kernel),
      cmocka_unit_test(test_backward_kernels),
      cmocka_unit_test(test_byte_order_mark),
      cmocka_unit_test(test_errors_do_not_cascade),
      cmocka_unit_test(test_long_const_chains),
      cmocka_unit_test(test_long_const_cycle),
      cmocka_unit_test(test_corpus_checks_and_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
