/*
 * test_checked.c — the interpreter's checked mode (tpk_interp_run_checked):
 * one small kernel per violation, asserting the exact report, and corpus
 * kernels (ragged shapes included) that must report nothing.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"

typedef struct Kernel {
  TestCompile c;
  TpkFunc *f;
} Kernel;

static void compile(Kernel *k, const char *text, const char *name, const char *tunes) {
  memset(k, 0, sizeof *k);
  k->f = test_compile_kernel(&k->c, text, name, tunes);
}

static void compile_file(Kernel *k, const char *rel, const char *name, const char *tunes) {
  memset(k, 0, sizeof *k);
  k->f = test_compile_kernel_file(&k->c, rel, name, tunes);
}

/* Run k checked; the report is returned (heap, "" when clean). */
static char *run_checked(const Kernel *k, void *const *args, const char *syms, int max_reports, int *nviol) {
  int64_t sv[16] = {0};
  test_symbol_values(k->f, syms, sv);
  TpkError err = {0};
  TpkStr rep = {0};
  TpkInterpOptions o = {.checked = true, .max_reports = max_reports};
  TpkStatus st = tpk_interp_run_checked(k->f, args, sv, &o, &rep, nviol, &err);
  if (st != TPK_OK) fail_msg("interp failed: %s", err.message);
  return tpk_str_take(&rep);
}

static void expect_report(const Kernel *k, void *const *args, const char *syms, const char *want, int want_n) {
  int n = -1;
  char *got = run_checked(k, args, syms, 0, &n);
  if (strcmp(got, want) != 0) fail_msg("report:\n%s\nwanted:\n%s", got, want);
  assert_int_equal(n, want_n);
  free(got);
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 37) % 11) * 0.25f - 1.0f;
  return p;
}

/* ---- 1. out-of-range dynamic indices ------------------------------------------ */

static const char *const GATHER =
    "kernel emb(ids: i32[T], table: f32[V, D]) -> (out: f32[T, D])\n"
    "  tune BT in [4]\n"
    "{\n"
    "  for t in tiles(T, BT) { out[t, :] = table[ids[t], :]; }\n"
    "}\n";

static void test_gather_out_of_range(void **state) {
  (void)state;
  Kernel k;
  compile(&k, GATHER, "emb", NULL);
  int32_t ids[6] = {1, 9, 2, -1, 0, 3};
  float table[8] = {0, 1, 10, 11, 20, 21, 30, 31}, out[12];
  memset(out, 0xff, sizeof out);
  expect_report(&k, (void *[]){ids, table, out}, "T=6,V=4,D=2",
                "line 4:39: gather index 9 (element 1 of the index vector) is out of range for dimension 0 of table (size 4)\n"
                "line 4:39: gather index -1 (element 3 of the index vector) is out of range for dimension 0 of table (size 4)\n",
                2);
  /* the bad rows were skipped (read 0), the others gathered; the ragged
   * second tile (ids 0 and 3, lanes 2-3 out of range) is no violation */
  float want[12] = {10, 11, 0, 0, 20, 21, 0, 0, 0, 1, 30, 31};
  for (int i = 0; i < 12; i++) assert_true(out[i] == want[i]);
  test_compile_free(&k.c);
}

static const char *const SHIFT =
    "kernel shift(x: f32[N, D]) -> (y: f32[N, D])\n"
    "{\n"
    "  for i in 0..N { y[i, :] = x[i + 1, :]; }\n"
    "}\n";

static void test_scalar_index_out_of_range(void **state) {
  (void)state;
  Kernel k;
  compile(&k, SHIFT, "shift", NULL);
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
  expect_report(&k, (void *[]){x, y}, "N=3,D=2",
                "line 3:29: load index 3 is out of range for dimension 0 of x (size 3)\n", 1);
  float want[6] = {3, 4, 5, 6, 0, 0};
  for (int i = 0; i < 6; i++) assert_true(y[i] == want[i]);
  test_compile_free(&k.c);
}

/* max_reports keeps the first lines and counts the rest. */
static void test_max_reports(void **state) {
  (void)state;
  Kernel k;
  compile(&k, GATHER, "emb", NULL);
  int32_t ids[4] = {7, 8, 9, 10};
  float table[8] = {0}, out[8];
  int n = 0;
  char *got = run_checked(&k, (void *[]){ids, table, out}, "T=4,V=4,D=2", 1, &n);
  assert_string_equal(got, "line 4:39: gather index 7 (element 0 of the index vector) is out of range for dimension 0 of table (size 4)\n"
                           "(3 more violations not listed)\n");
  assert_int_equal(n, 4);
  free(got);
  test_compile_free(&k.c);
}

/* ---- 2. two grid instances writing one output element ------------------------- */

static void test_grid_write_conflict(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel fold(x: f32[M, N]) -> (y: f32[M, N])\n"
          "  tune BN in [4]\n"
          "{\n"
          "  for i in 0..2, j in tiles(N, BN) { y[1, j] = x[i, j]; }\n"
          "}\n",
          "fold", NULL);
  float x[16] = {0}, y[16] = {0};
  expect_report(&k, (void *[]){x, y}, "M=2,N=8",
                "line 4:38: grid instances (i=0, j=0) and (i=1, j=0) both write y[1, 0]\n", 1);
  test_compile_free(&k.c);
}

/* Scatter-adds: duplicates accumulate, within one instance and across
 * instances (the contract's embedding_bwd; `+=` is an atomic add, like
 * Triton's tl.atomic_add), and the rows hold the sums. */
static void test_scatter_add_across_instances(void **state) {
  (void)state;
  Kernel k;
  compile_file(&k, "tests/corpus/embedding_bwd.tpk", "embedding_bwd", "BT=64");
  int T = 130, D = 2, V = 200;
  int32_t *ids = malloc(sizeof *ids * (size_t)T);
  for (int t = 0; t < T; t++) ids[t] = t;
  ids[10] = ids[20] = 5;   /* twice within instance 0 */
  ids[100] = ids[129] = 7; /* and from instances 1 and 2 */
  float *g = filled((size_t)T * D), *grad = calloc((size_t)V * D, sizeof *grad);
  for (int i = 0; i < T * D; i++) g[i] = 1.0f;
  expect_report(&k, (void *[]){ids, g, grad}, "T=130,D=2,V=200", "", 0);
  assert_true(grad[5 * D] == 3.0f && grad[7 * D + 1] == 3.0f && grad[100 * D] == 0.0f && grad[128 * D] == 1.0f);
  free(ids), free(g), free(grad);
  test_compile_free(&k.c);
}

/* A plain store and an add into one element from two instances: the result
 * depends on their order (the store wipes the sum or not), in either order
 * and however many instances added. */
static const char *const STORE_OR_ADD =
    "kernel mix(ids: i32[T], g: f32[T, D], store_at: i32) -> (grad: f32[V, D] = 0)\n"
    "  tune BT in [1]\n"
    "{\n"
    "  for t in tiles(T, BT) {\n"
    "    if t.id == store_at { grad[ids[t], :] = g[t, :]; } else { grad[ids[t], :] += g[t, :]; }\n"
    "  }\n"
    "}\n";

static void test_store_and_add_across_instances(void **state) {
  (void)state;
  Kernel k;
  compile(&k, STORE_OR_ADD, "mix", NULL);
  int32_t ids[3] = {4, 6, 4}, store_at = 0;
  float g[6] = {1, 2, 3, 4, 5, 6}, grad[16] = {0};
  expect_report(&k, (void *[]){ids, g, &store_at, grad}, "T=3,D=2,V=8",
                "line 5:63: grid instance (t=0) stores grad[4, 0] and (t=2) adds to it\n", 1);
  store_at = 2; /* instances 0 and 1 add, 2 stores */
  ids[1] = 4;
  memset(grad, 0, sizeof grad);
  expect_report(&k, (void *[]){ids, g, &store_at, grad}, "T=3,D=2,V=8",
                "line 5:27: grid instance (t=0) adds to grad[4, 0] and (t=2) stores it\n", 1);
  test_compile_free(&k.c);
}

/* Two instances storing one element through an index vector: a race. */
static void test_scatter_store_across_instances(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel put(ids: i32[T], g: f32[T, D]) -> (out: f32[V, D])\n"
          "  tune BT in [2]\n"
          "{\n"
          "  for t in tiles(T, BT) { out[ids[t], :] = g[t, :]; }\n"
          "}\n",
          "put", NULL);
  int32_t ids[4] = {0, 1, 2, 1};
  float g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  expect_report(&k, (void *[]){ids, g, out}, "T=4,D=2,V=4",
                "line 4:27: grid instances (t=0) and (t=1) both write out[1, 0]\n", 1);
  test_compile_free(&k.c);
}

/* ---- 3. reading a copy_async target before its wait ---------------------------- */

static void test_read_before_wait(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel early(x: f32[M, N]) -> (y: f32[M, N])\n"
          "  tune BM in [2]\n"
          "{\n"
          "  for i in tiles(M, BM) {\n"
          "    scratch buf: f32[BM, N];\n"
          "    let c = copy_async(x[i, :], buf);\n"
          "    y[i, :] = buf * 2.0;\n"
          "    buf[0, :] = x[i, :][0, :];\n"
          "    wait(c);\n"
          "  }\n"
          "}\n",
          "early", NULL);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  expect_report(&k, (void *[]){x, y}, "M=4,N=2",
                "line 7:15: load reads buf before the wait of its copy_async (line 6:13)\n"
                "line 8:5: store writes buf before the wait of its copy_async (line 6:13)\n",
                2);
  test_compile_free(&k.c);
}

/* Semaphores: a read of a slot whose copy is still in flight (the first
 * wait lands the older copy only), a wait on a semaphore no copy signals,
 * and a copy never waited for by the end of its grid instance. */
static void test_semaphore_violations(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel sems(x: f32[M, N]) -> (y: f32[M, N])\n"
          "{\n"
          "  for i in 0..M {\n"
          "    scratch buf: f32[2, N];\n"
          "    scratch sems: semaphore[2];\n"
          "    copy_async(x[i, :], buf[0, :], sem=sems[0]);\n"
          "    copy_async(x[i, :], buf[1, :], sem=sems[0]);\n"
          "    wait(sems[0]);\n"
          "    y[i, :] = buf[0, :] + buf[1, :];\n"
          "    wait(sems[1]);\n"
          "  }\n"
          "}\n",
          "sems", NULL);
  float x[2] = {1, 2}, y[2];
  expect_report(&k, (void *[]){x, y}, "M=1,N=2",
                "line 9:27: load reads buf before the wait of its copy_async (line 7:5)\n"
                "line 10:5: wait on sems[1] with no copy in flight on it (it would never end)\n"
                "line 7:5: a copy signalling sems[0] is never waited for\n",
                3);
  test_compile_free(&k.c);
}

/* ---- 4. reads of uninitialised memory ------------------------------------------ */

static void test_uninitialized_reads(void **state) {
  (void)state;
  Kernel k;
  compile(&k,
          "kernel partial(x: f32[M, N]) -> (y: f32[M, N])\n"
          "  tune BM in [4]\n"
          "{\n"
          "  for i in tiles(M, BM) {\n"
          "    scratch buf: f32[BM, N];\n"
          "    buf[0..2, :] = x[i, :][0..2, :];\n"
          "    y[i, :] = buf;\n"
          "  }\n"
          "}\n",
          "partial", NULL);
  float x[16] = {0}, y[16];
  expect_report(&k, (void *[]){x, y}, "M=8,N=2", "line 7:15: load reads uninitialized buf[2, 0]\n", 1);
  test_compile_free(&k.c);

  /* += on an output not declared `= 0` */
  compile(&k,
          "kernel acc(x: f32[M]) -> (y: f32[M])\n"
          "  tune BM in [4]\n"
          "{\n"
          "  for i in tiles(M, BM) { y[i] += x[i]; }\n"
          "}\n",
          "acc", NULL);
  float xs[6] = {0}, ys[6];
  expect_report(&k, (void *[]){xs, ys}, "M=6", "line 4:27: store reads uninitialized y[0]\n", 1);
  test_compile_free(&k.c);
}

/* ---- clean kernels --------------------------------------------------------------- */

static void expect_clean_file(const char *rel, const char *name, const char *tunes, void *const *args, const char *syms) {
  Kernel k;
  compile_file(&k, rel, name, tunes);
  int n = -1;
  char *got = run_checked(&k, args, syms, 0, &n);
  if (*got || n) fail_msg("%s %s: expected no violations, got %d:\n%s", rel, name, n, got);
  free(got);
  test_compile_free(&k.c);
}

static void test_clean_corpus(void **state) {
  (void)state;
  /* softmax, ragged rows */
  float *x = filled(13 * 7), *y = malloc(sizeof(float) * 13 * 7);
  expect_clean_file("tests/corpus/softmax.tpk", "softmax", "BM=8", (void *[]){x, y}, "M=13,N=7");
  free(y);
  /* matmul, ragged in every dim */
  uint16_t a[37 * 21] = {0}, b[21 * 19] = {0};
  float *c = malloc(sizeof(float) * 37 * 19);
  expect_clean_file("tests/corpus/matmul.tpk", "matmul", "BM=128,BN=128,BK=256", (void *[]){a, b, c}, "M=37,K=21,N=19");
  /* manual DMA: matmul with K a multiple of BK, ragged M and N; row scaling, ragged M */
  uint16_t *a2 = calloc(37 * 512, 2), *b2 = calloc(512 * 19, 2);
  expect_clean_file("tests/corpus/manual_dma.tpk", "matmul_manual_dma", "BM=128,BN=128,BK=256", (void *[]){a2, b2, c},
                    "M=37,K=512,N=19");
  free(a2), free(b2), free(c);
  float s[13] = {1};
  y = malloc(sizeof(float) * 13 * 7);
  expect_clean_file("tests/corpus/manual_dma.tpk", "scale_rows_dma", "BM=8", (void *[]){x, s, y}, "M=13,N=7");
  /* semaphores: two copies in flight on one, the next page prefetched into the other slot */
  {
    enum { B = 3, H = 2, G = 4, D = 8, PS = 4, MP = 3 };
    uint16_t *q = calloc(B * H * G * D, 2), *kp = calloc(H * B * MP * PS * D, 2), *vp = calloc(H * B * MP * PS * D, 2);
    uint16_t *o = calloc(B * H * G * D, 2);
    int32_t lengths[B] = {1, 12, 7}, table[B * MP] = {8, 0, 1, 2, 3, 4, 5, 6, 7};
    float scale = 0.5f;
    expect_clean_file("tests/corpus/dma_semaphores.tpk", "paged_attention_dma", NULL,
                      (void *[]){q, kp, vp, lengths, table, &scale, o}, "B=3,H=2,G=4,D=8,P=9,PS=4,MP=3");
    free(q), free(kp), free(vp), free(o);
  }
  free(x), free(y);
  /* embedding backward, distinct ids (ragged T) */
  int32_t ids[70];
  for (int t = 0; t < 70; t++) ids[t] = 69 - t;
  float *g = filled(70 * 3), *grad = calloc(80 * 3, sizeof(float));
  expect_clean_file("tests/corpus/embedding_bwd.tpk", "embedding_bwd", "BT=64", (void *[]){ids, g, grad}, "T=70,D=3,V=80");
  free(g), free(grad);
}

/* Corpus kernels (masks.tpk's write_kv_cache is left out: with these
 * made-up page tables two batch rows do store into one cache slot) run clean
 * on small ragged shapes, inputs holding 0, 1 or 2 (valid indices, so
 * scatter-adds repeat them), outputs not `= 0` filled with garbage. */
static void test_clean_corpus_ragged(void **state) {
  (void)state;
  static const char *const files[] = {"activations", "add", "batched_dot", "casts", "construction", "consts",
                                      "embedding_bwd", "flash_attention", "gather", "gelu", "layernorm",
                                      "layernorm_fwd", "layouts", "load_other", "matmul", "matmul_epilogue",
                                      "nested_loops", "optimizers", "program_id", "ragged", "reductions", "rmsnorm",
                                      "rope", "scalar_loops", "scatter_add", "softmax", "whole_array"};
  for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/corpus/%s.tpk", files[fi]);
    char *text = test_read_file(test_path(rel), NULL);
    assert_non_null(text);
    TestCompile c;
    test_compile(&c, rel, text, NULL);
    free(text);
    if (!c.module) fail_msg("%s: %s", rel, c.rendered);
    for (int i = 0; i < c.bound->nfuncs; i++) {
      TpkFunc *f = c.bound->funcs[i];
      if (!f->is_kernel) continue;
      const char *names[16];
      int ns = tpk_func_symbols(f, names, 16);
      int64_t sv[16];
      for (int s = 0; s < ns; s++) test_small_symbol(NULL, names[s], &sv[s]);
      void *args[32] = {0};
      for (int p = 0; p < f->nparams; p++) {
        const TpkType *t = f->params[p].value->type;
        int64_t n = 1;
        for (int d = 0; d < t->rank; d++) {
          int64_t v = 0;
          assert_true(tpk_dim_eval(t->dims[d], test_small_symbol, NULL, &v));
          n *= v;
        }
        size_t es = tpk_dtype_size(t->dtype);
        args[p] = calloc((size_t)n + 1, 8);
        for (int64_t e = 0; e < n || (t->rank == 0 && e == 0); e++) {
          unsigned char *q = (unsigned char *)args[p] + (size_t)e * es;
          int v = (int)((e * 7 + p) % 3);
          switch (t->dtype) {
          case TPK_F32: *(float *)(void *)q = (float)v - 1.0f; break;
          case TPK_I32: *(int32_t *)(void *)q = v; break;
          case TPK_BF16: case TPK_F16: *(uint16_t *)(void *)q = v ? 0x3c00 : 0; break;
          default: *q = (unsigned char)(v != 0); break;
          }
        }
      }
      TpkError err = {0};
      TpkStr rep = {0};
      int n = 0;
      TpkInterpOptions o = {.checked = true};
      TpkStatus st = tpk_interp_run_checked(f, args, sv, &o, &rep, &n, &err);
      char *got = tpk_str_take(&rep);
      if (st != TPK_OK) fail_msg("%s @%s: %s", rel, f->name, err.message);
      if (n) fail_msg("%s @%s: %d violations:\n%s", rel, f->name, n, got);
      free(got);
      for (int p = 0; p < f->nparams; p++) free(args[p]);
    }
    test_compile_free(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gather_out_of_range),
      cmocka_unit_test(test_scalar_index_out_of_range),
      cmocka_unit_test(test_max_reports),
      cmocka_unit_test(test_grid_write_conflict),
      cmocka_unit_test(test_scatter_add_across_instances),
      cmocka_unit_test(test_store_and_add_across_instances),
      cmocka_unit_test(test_scatter_store_across_instances),
      cmocka_unit_test(test_read_before_wait),
      cmocka_unit_test(test_semaphore_violations),
      cmocka_unit_test(test_uninitialized_reads),
      cmocka_unit_test(test_clean_corpus),
      cmocka_unit_test(test_clean_corpus_ragged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
