/*
 * The standard kernel library (kernels/), compiled ahead of time: it holds
 * every .tpk file of kernels/ as the build saw it, and every kernel runs on the
 * host and on a simulated v5e at tiny and ragged sizes without running a
 * compiler. (NumPy/PyTorch references for each kernel are in tests/std/.)
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "tpk.h"

/* The library is the source tree's kernels/, byte for byte. */
static void test_library_is_the_kernels_folder(void **state) {
  (void)state;
  char *names[128];
  int n = test_list_tpk("kernels", names, 128);
  assert_true(n >= 10);
  for (int i = 0; i < n; i++) {
    char rel[256];
    snprintf(rel, sizeof rel, "kernels/%s", names[i]);
    char *text = test_read_file(test_path(rel), NULL);
    const char *built = tpk_std_source(names[i]);
    if (!built) fail_msg("%s is not in the library: rebuild (make)", names[i]);
    if (strcmp(text, built) != 0) fail_msg("%s changed since the library was built: rebuild (make)", names[i]);
    free(text);
  }
  int files_of_kernels = 0;
  for (int k = 0; k < tpk_std_kernel_count(); k++) {
    bool listed = false;
    for (int i = 0; i < n; i++) listed |= strcmp(names[i], tpk_std_kernel_file(k)) == 0;
    files_of_kernels += listed;
  }
  assert_int_equal(files_of_kernels, tpk_std_kernel_count());
  test_names_free(names, n);
}

/* The build recorded each kernel's structural hash (host/std.h), by which a
 * graph that calls one runs the library's code without checking its file:
 * the hash of every kernel as the runtime checks it is the one recorded. */
static void test_recorded_hashes_are_the_kernels(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  for (int i = 0; i < tpk_std_kernel_count(); i++) {
    TpkKernel *k;
    assert_int_equal(tpk_std_kernel(ctx, tpk_std_kernel_name(i), &k), TPK_OK);
    if (!tpk_std_kernel_is(ctx, tpk_kernel_ir(k))) fail_msg("%s: its recorded hash is not its IR's: rebuild (make)", tpk_std_kernel_name(i));
  }
  tpk_context_destroy(ctx);
}

/* Launch `name` in ctx on device `devname` (test_launch_outputs, integer
 * scalars 3); the bytes of its outputs. *tier gets the tier that ran. */
static char *launch(TpkContext *ctx, const char *devname, const char *name, int64_t size, size_t *len,
                    const char **tier) {
  TpkDevice *dev;
  TpkKernel *k;
  assert_int_equal(tpk_device_open(ctx, devname, &dev), TPK_OK);
  if (tpk_std_kernel(ctx, name, &k) != TPK_OK) fail_msg("%s: %s", name, tpk_last_error());
  TpkLaunchResult ran;
  char *out = test_launch_outputs(k, dev, size, 7, 3, name, len, &ran);
  *tier = ran.tier;
  return out;
}

/* On a chip, a launch at sizes nobody tuned searches the library's settings
 * (those it has code for) on the chip's model: flash attention over 64-long
 * sequences takes the 64x64 blocks shipped for the host, not the declared
 * 256x256 (16 times the work of a 64x64 block), and runs the library's code;
 * the next launch at those sizes finds the winner in the tuning cache. */
static void test_a_chip_searches_the_library_settings(void **state) {
  (void)state;
  char cache[] = "/tmp/tpk-test-std-XXXXXX"; /* nobody tuned anything here */
  test_cache_dir_open(cache);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &dev), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "flash_attention_causal", &k), TPK_OK);
  int64_t qs[] = {4, 4, 64, 32}, ls[] = {4, 4, 64};
  TpkBuffer *b[6] = {0};
  for (int i = 0; i < 3; i++) assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 4, qs, &b[i]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 4, qs, &b[4]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 3, ls, &b[5]), TPK_OK);
  double scalars[6] = {[3] = 0.125};
  static const char *const FROM[] = {"tuned at launch", "tuning cache"};
  for (int run = 0; run < 2; run++) {
    TpkProgram *prog = NULL;
    TpkKernel *again = k;
    if (run == 1) { /* a new program: its kernel remembers nothing */
      assert_int_equal(tpk_program_load_source(ctx, "attention.tpk", tpk_std_source("attention.tpk"),
                                               strlen(tpk_std_source("attention.tpk")), &prog), TPK_OK);
      assert_int_equal(tpk_program_kernel(prog, "flash_attention_causal", &again), TPK_OK);
    }
    TpkLaunchResult ran;
    TpkLaunch L = {.args = b, .scalars = scalars, .result = &ran};
    if (tpk_kernel_launch(again, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
    assert_string_equal(ran.tunes, "BQ=64,BKV=64");
    assert_string_equal(ran.tunes_from, FROM[run]);
    assert_string_equal(ran.tier, "aot");
    if (prog) tpk_program_destroy(prog);
  }
  for (int i = 0; i < 6; i++) tpk_buffer_destroy(b[i]);
  tpk_context_destroy(ctx);
  test_cache_dir_close(cache);
}

/* Every standard kernel on the host and on sim:v5e, at a tiny and a ragged
 * size: the library's code runs, no compiler ever does, and the results are
 * the bits the JIT's code for those very shapes computes (TPK_AOT=0), which
 * tests/runtime/test_host.c holds to the reference interpreter. */
static void test_every_kernel_runs_without_a_compiler(void **state) {
  (void)state;
  TpkContext *aot, *jit;
  assert_int_equal(tpk_context_create(&aot), TPK_OK);
  setenv("TPK_AOT", "0", 1);
  setenv("TPK_TIER", "tcc", 1);
  assert_int_equal(tpk_context_create(&jit), TPK_OK);
  unsetenv("TPK_AOT");
  unsetenv("TPK_TIER");
  int kernels = tpk_std_kernel_count(), compared = 0;
  assert_true(kernels >= 40);
  static const char *const DEVICES[] = {"host", "sim:v5e"};
  for (int i = 0; i < kernels; i++) {
    const char *name = tpk_std_kernel_name(i);
    TpkKernel *k;
    assert_int_equal(tpk_std_kernel(aot, name, &k), TPK_OK);
    int max_rank = 0;
    for (int p = 0; p < tpk_kernel_param_count(k); p++)
      if (tpk_kernel_param_rank(k, p) > max_rank) max_rank = tpk_kernel_param_rank(k, p);
    /* every symbol takes the size; >= 8, the largest random index */
    const int64_t sizes[] = {9, max_rank >= 3 ? 13 : 37};
    for (size_t d = 0; d < TPK_ARRAY_LEN(DEVICES); d++)
      for (size_t s = 0; s < TPK_ARRAY_LEN(sizes); s++) {
        size_t n1, n2;
        const char *t1, *t2;
        char *a = launch(aot, DEVICES[d], name, sizes[s], &n1, &t1);
        if (strcmp(t1, "aot") != 0) fail_msg("%s on %s ran code from '%s', not the library's", name, DEVICES[d], t1);
        char *b = launch(jit, DEVICES[d], name, sizes[s], &n2, &t2);
        assert_string_equal(t2, "tcc");
        assert_int_equal(n1, n2);
        if (memcmp(a, b, n1) != 0)
          fail_msg("%s on %s, size %lld: the library's code and the JIT's computed other bits", name, DEVICES[d],
                   (long long)sizes[s]);
        free(a);
        free(b);
        compared++;
      }
  }
  fprintf(stderr, "%d standard kernels: %d launches, the library's bits == the JIT's, no compiler run\n", kernels,
          compared);
  assert_int_equal(tpk_context_compiler_runs(aot), 0);
  assert_true(tpk_context_compiler_runs(jit) > 0);
  tpk_context_destroy(aot);
  tpk_context_destroy(jit);
}

/* The kernels of the library that name a backward kernel, and which: it is
 * a standard kernel of the same file, and names none itself. */
static void test_backward_kernels(void **state) {
  (void)state;
  static const char *const PAIRS[][2] = {
      {"softmax", "softmax_bwd"},
      {"log_softmax", "log_softmax_bwd"},
      {"layernorm", "layernorm_bwd"},
      {"rmsnorm", "rmsnorm_bwd"},
      {"gelu", "gelu_bwd"},
      {"gelu_tanh", "gelu_tanh_bwd"},
      {"silu", "silu_bwd"},
      {"swiglu", "swiglu_bwd"},
      {"cross_entropy", "cross_entropy_bwd"},
      {"flash_attention", "flash_attention_bwd"},
      {"flash_attention_causal", "flash_attention_causal_bwd"},
      {"embedding", "embedding_bwd"},
  };
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  int with_backward = 0;
  for (int i = 0; i < tpk_std_kernel_count(); i++) {
    TpkKernel *k, *b;
    assert_int_equal(tpk_std_kernel(ctx, tpk_std_kernel_name(i), &k), TPK_OK);
    const char *want = NULL;
    for (size_t p = 0; p < TPK_ARRAY_LEN(PAIRS); p++)
      if (strcmp(PAIRS[p][0], tpk_std_kernel_name(i)) == 0) want = PAIRS[p][1];
    const char *got = tpk_kernel_backward(k);
    if (!want) {
      if (got) fail_msg("%s names backward kernel %s; add it to this test", tpk_std_kernel_name(i), got);
      continue;
    }
    with_backward++;
    if (!got || strcmp(got, want) != 0) fail_msg("%s: backward kernel %s, want %s", tpk_std_kernel_name(i), got, want);
    assert_int_equal(tpk_std_kernel(ctx, got, &b), TPK_OK);
    assert_ptr_equal(tpk_kernel_program(b), tpk_kernel_program(k));
    assert_null(tpk_kernel_backward(b));
  }
  assert_int_equal(with_backward, (int)TPK_ARRAY_LEN(PAIRS));
  tpk_context_destroy(ctx);
}

/* Unknown names get the list of what there is. */
static void test_unknown_kernel(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "sofmax", &k), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "the standard library has no kernel 'sofmax'; it has: "));
  assert_non_null(strstr(tpk_last_error(), "softmax"));
  assert_null(tpk_std_source("nope.tpk"));
  tpk_context_destroy(ctx);
}

/* topk with K > N has nothing to pick past N (it returned index N and
 * -inf): the launch fails, naming both sizes, on every device; K = N runs. */
static void test_topk_needs_k_at_most_n(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "topk", &k), TPK_OK);
  static const char *const DEVICES[] = {"host", "sim:v5e"};
  for (size_t d = 0; d < TPK_ARRAY_LEN(DEVICES); d++)
    for (int64_t K = 8; K <= 10; K += 2) {
      TpkDevice *dev;
      assert_int_equal(tpk_device_open(ctx, DEVICES[d], &dev), TPK_OK);
      TpkBuffer *x, *values, *indices;
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){3, 8}, &x), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){3, K}, &values), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_I32, 2, (int64_t[]){3, K}, &indices), TPK_OK);
      float data[24];
      for (int i = 0; i < 24; i++) data[i] = (float)((i * 5) % 8);
      assert_int_equal(tpk_buffer_write(x, data, sizeof data), TPK_OK);
      TpkLaunch L = {.args = (TpkBuffer *[]){x, values, indices}};
      TpkStatus st = tpk_kernel_launch(k, &L);
      if (K <= 8) {
        if (st != TPK_OK) fail_msg("%s: %s", DEVICES[d], tpk_last_error());
      } else {
        assert_int_equal(st, TPK_ERR_INVALID);
        assert_string_equal(tpk_last_error(), "kernel 'topk': K = 10 is larger than N = 8 (it requires K <= N, line 28)");
      }
      tpk_buffer_destroy(x), tpk_buffer_destroy(values), tpk_buffer_destroy(indices);
    }
  tpk_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_library_is_the_kernels_folder),
      cmocka_unit_test(test_recorded_hashes_are_the_kernels),
      cmocka_unit_test(test_backward_kernels),
      cmocka_unit_test(test_unknown_kernel),
      cmocka_unit_test(test_topk_needs_k_at_most_n),
      cmocka_unit_test(test_every_kernel_runs_without_a_compiler),
      cmocka_unit_test(test_a_chip_searches_the_library_settings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
