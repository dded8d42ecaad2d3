/*
 * test_tune_cli.c — `tpk tune` as a user meets it: help, usage errors
 * (exit 2), inputs that fail (exit 1), a search on the simulator whose
 * winner later `--cached` calls find, the shipped-defaults table it writes,
 * and a search on the host. Runs build/tpk (or $TPK_BUILD/tpk) with its
 * tuning cache in a temporary folder.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/tpk-test-tune-cli-XXXXXX";

/* Expect exit status `status` with `needle` in stderr. */
static void expect_error(TestRun r, int status, const char *needle) {
  if (r.status != status) fail_msg("exit %d, expected %d; stderr:\n%s\nstdout:\n%s", r.status, status, r.err, r.out);
  assert_contains(r.err, needle);
  test_run_free(&r);
}

static const char *MATMUL = "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [128, 256], BN in [128, 256], BK in [128, 256]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

static char mm_path[256], scale_path[256], plain_path[256], bad_path[256], tsv_path[256], cache_dir[256];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(tmpdir)) return -1;
  snprintf(mm_path, sizeof mm_path, "%s/mm.tpk", tmpdir);
  snprintf(scale_path, sizeof scale_path, "%s/scale.tpk", tmpdir);
  snprintf(plain_path, sizeof plain_path, "%s/plain.tpk", tmpdir);
  snprintf(bad_path, sizeof bad_path, "%s/bad.tpk", tmpdir);
  snprintf(tsv_path, sizeof tsv_path, "%s/tuned.tsv", tmpdir);
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", tmpdir);
  write_file(mm_path, MATMUL);
  write_file(scale_path, "kernel scale(x: f32[M, N], s: f32) -> (y: f32[M, N])\n"
                         "  tune BM in [256, 2048, 8]\n"
                         "{\n"
                         "  for i in tiles(M, BM) { y[i, :] = x[i, :] * s; }\n"
                         "}\n");
  write_file(plain_path, "kernel add(x: f32[N]) -> (y: f32[N]) { y = x + 1.0; }\n");
  write_file(bad_path, "kernel k(x: f32[N]) -> (y: f32[N]) tune B in [8] { y = z; }\n");
  setenv("TPK_CACHE_DIR", cache_dir, 1); /* the children's tuning and JIT caches */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_help(void **state) {
  (void)state;
  TestRun a = RUN("help", "tune"), b = RUN("tune", "--help");
  assert_int_equal(a.status, 0);
  assert_string_equal(a.out, b.out);
  assert_contains(a.out, "Usage: tpk tune FILE");
  assert_contains(a.out, "--save-default FILE");
  assert_contains(a.out, "--cached");
  assert_contains(a.out, "Exit status");
  assert_contains(a.out, "Examples:");
  TestRun c = RUN("--help");
  assert_contains(c.out, "  tune ");
  test_run_free(&a), test_run_free(&b), test_run_free(&c);
}

static void test_usage_errors(void **state) {
  (void)state;
  expect_error(RUN("tune"), 2, "tpk tune: no input file");
  expect_error(RUN("tune", mm_path, "--kernel", "matmal", "--shape", "M=64,N=64,K=64", "--device", "sim:v5e"), 2,
               "has no kernel 'matmal'; it has: matmul");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--device", "sim:v5e", "--tune", "BX=128"), 2,
               "tpk tune: kernel 'matmul' has no tunable 'BX'; its tunables are BM, BN, BK");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--device", "sim:v5e", "--tune", "BM=384"), 2,
               "tunable BM of kernel 'matmul' is one of [128, 256], not 384");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64", "--device", "sim:v5e"), 2,
               "kernel 'matmul' needs the size of shape symbol K (its symbols are M, K, N)");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64,Q=1", "--device", "sim:v5e"), 2,
               "kernel 'matmul' has no shape symbol 'Q'");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--device", "gpu"), 2, "unknown device 'gpu'");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--device", "sim:v5e", "--repeat", "3"), 2,
               "--repeat and --scalar are for measuring on the host");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--defaults", tsv_path), 2,
               "--defaults FILE is consulted by --cached only");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--max-config", "3"), 2,
               "unknown option '--max-config'; did you mean '--max-configs'?");
  expect_error(RUN("tune", mm_path, "--shape", "M=64,N=64,K=64", "--max-configs", "0"), 2,
               "--max-configs expects an integer from 1 to 1000000, got '0'");
  expect_error(RUN("tune", mm_path, "--shape", "M=-1"), 2, "sizes and tunables are non-negative");
  expect_error(RUN("tune", scale_path, "--shape", "M=8,N=8", "--scalar", "t=1"), 2,
               "kernel 'scale' has no scalar parameter 't' (--scalar)");
}

static void test_failures(void **state) {
  (void)state;
  expect_error(RUN("tune", "/nonexistent/x.tpk", "--shape", "N=1"), 1, "tpk: cannot open /nonexistent/x.tpk");
  expect_error(RUN("tune", bad_path, "--shape", "N=8", "--device", "sim:v5e"), 1, "bad.tpk:1:");
  expect_error(RUN("tune", plain_path, "--shape", "N=8", "--device", "sim:v5e"), 1,
               "kernel 'add' declares no tunables (`tune NAME in [...]`): nothing to tune");
  /* nothing fits v4's VMEM: the search ran, so the input, not the command line, failed */
  TestRun r = RUN("tune", scale_path, "--shape", "M=4096,N=4096", "--device", "sim:v4", "--tune", "BM=2048");
  assert_contains(r.out, "skipped (does not fit in VMEM)");
  expect_error(r, 1, "none of the 1 configurations of kernel 'scale' ran");
}

static void test_tune_then_cached(void **state) {
  (void)state;
  TestRun r = RUN("tune", mm_path, "--shape", "M=512,N=384,K=640", "--device", "sim:v5e");
  if (r.status != 0) fail_msg("exit %d:\n%s", r.status, r.err);
  assert_contains(r.out, "tuning matmul on sim:v5e for M=512,K=640,N=384");
  assert_contains(r.out, "8 configurations: every one, the defaults first");
  assert_contains(r.out, "[1/8] BM=128,BN=128,BK=128");
  assert_contains(r.out, "(defaults)");
  assert_contains(r.out, "[8/8] BM=256,BN=256,BK=256");
  assert_contains(r.out, "searched 8 configurations in ");
  assert_contains(r.out, "8 timed, 0 skipped");
  assert_contains(r.out, "cached   ");
  assert_contains(r.out, cache_dir);
  assert_string_equal(r.err, "");
  /* the winner, as the summary states it */
  const char *best = strstr(r.out, "\nbest     ");
  assert_non_null(best);
  char winner[64];
  assert_int_equal(sscanf(best, "\nbest     %63s", winner), 1);

  TestRun c = RUN("tune", mm_path, "--shape", "M=512,N=384,K=640", "--device", "sim:v5e", "--cached");
  assert_int_equal(c.status, 0);
  assert_true(strncmp(c.out, winner, strlen(winner)) == 0 && c.out[strlen(winner)] == ' ');
  assert_contains(c.out, "(from the tuning cache;");
  test_run_free(&c);
  /* other sizes, another chip: nothing known */
  c = RUN("tune", mm_path, "--shape", "M=512,N=384,K=641", "--device", "sim:v5e", "--cached");
  assert_int_equal(c.status, 1);
  assert_contains(c.out, "no tuned configuration of matmul on sim:v5e for M=512,K=641,N=384; launches use the defaults");
  test_run_free(&c);
  c = RUN("tune", mm_path, "--shape", "M=512,N=384,K=640", "--device", "sim:v6e", "--cached");
  assert_int_equal(c.status, 1);
  test_run_free(&c);
  /* -q: the summary only */
  TestRun q = RUN("tune", mm_path, "--shape", "M=512,N=384,K=640", "--device", "sim:v5e", "-q", "--no-cache");
  assert_int_equal(q.status, 0);
  assert_null(strstr(q.out, "[1/8]"));
  assert_contains(q.out, "best     ");
  assert_contains(q.out, "not written (--no-cache)");
  test_run_free(&q);
  test_run_free(&r);
}

static void test_save_default(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) {
    const char *shape = i == 1 ? "M=256,N=256,K=256" : "M=512,N=512,K=512";
    TestRun r = RUN("tune", mm_path, "--shape", shape, "--device", "sim:v6e", "-q", "--no-cache", "--save-default", tsv_path);
    if (r.status != 0) fail_msg("exit %d:\n%s", r.status, r.err);
    assert_contains(r.out, "saved    ");
    test_run_free(&r);
  }
  char *text = test_read_file(tsv_path, NULL);
  assert_non_null(text);
  assert_true(text[0] == '#');
  int rows = 0;
  for (const char *p = text; (p = strstr(p, "\nmatmul\t")); p++) rows++;
  assert_int_equal(rows, 2); /* the third call updated the first row */
  assert_contains(text, "\tsim:v6e\tM=256,K=256,N=256\t");
  assert_contains(text, mm_path);
  free(text);
  /* with no cache, --cached finds the row in the table it is given */
  setenv("TPK_CACHE_DIR", "", 1);
  TestRun c = RUN("tune", mm_path, "--shape", "M=256,N=256,K=256", "--device", "sim:v6e", "--cached", "--defaults", tsv_path);
  TestRun none = RUN("tune", mm_path, "--shape", "M=256,N=256,K=256", "--device", "sim:v6e", "--cached");
  TestRun nocache = RUN("tune", mm_path, "--shape", "M=256,N=256,K=256", "--device", "sim:v6e", "-q");
  setenv("TPK_CACHE_DIR", cache_dir, 1);
  assert_int_equal(c.status, 0);
  assert_contains(c.out, "(from the ");
  assert_contains(c.out, tsv_path);
  assert_int_equal(none.status, 1);
  assert_int_equal(nocache.status, 0);
  assert_contains(nocache.out, "cache    none (TPK_CACHE_DIR is empty");
  test_run_free(&c), test_run_free(&none), test_run_free(&nocache);
  /* a file that is not a table is refused, and left as it was */
  write_file(tsv_path, "hello\n");
  TestRun bad = RUN("tune", mm_path, "--shape", "M=256,N=256,K=256", "--device", "sim:v6e", "-q", "--no-cache",
                "--save-default", tsv_path);
  assert_int_equal(bad.status, 1);
  assert_contains(bad.err, "tuned.tsv:1: expected 7 tab-separated fields");
  test_run_free(&bad);
  text = test_read_file(tsv_path, NULL);
  assert_string_equal(text, "hello\n");
  free(text);
}

static void test_host(void **state) {
  (void)state;
  TestRun r = RUN("tune", scale_path, "--shape", "M=64,N=256", "--scalar", "s=2", "--repeat", "2");
  if (r.status != 0) fail_msg("exit %d:\n%s\n%s", r.status, r.err, r.out);
  assert_contains(r.out, "tuning scale on host for M=64,N=256");
  assert_contains(r.out, "[3/3] BM=8");
  assert_contains(r.out, "3 timed, 0 skipped");
  test_run_free(&r);
  TestRun c = RUN("tune", scale_path, "--shape", "M=64,N=256", "--cached");
  assert_int_equal(c.status, 0);
  assert_contains(c.out, "(from the tuning cache;");
  test_run_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_failures),
      cmocka_unit_test(test_tune_then_cached),
      cmocka_unit_test(test_save_default),
      cmocka_unit_test(test_host),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
