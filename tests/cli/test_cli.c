/*
 * test_cli.c — the `tpk` command as a user meets it: run build/tpk (or
 * $TPK_BUILD/tpk) with arguments and check exit status, stdout and stderr.
 * Every run also checks that tpk was not killed by a signal.
 */
#include "support.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Files the tests write live in one temporary folder, removed at the end. */
static char tmpdir[] = "/tmp/tpk-test-cli-XXXXXX";
static char *written[32];
static int nwritten;

/* Write a file into the temporary folder; returns its path (static buffer). */
static const char *temp_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  if (nwritten < 32) {
    bool seen = false;
    for (int i = 0; i < nwritten; i++) seen |= strcmp(written[i], path) == 0;
    if (!seen) written[nwritten++] = strdup(path);
  }
  return path;
}

static int setup(void **state) {
  (void)state;
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < nwritten; i++) {
    unlink(written[i]);
    free(written[i]);
  }
  rmdir(tmpdir);
  return 0;
}

/* ---- help and usage ---------------------------------------------------------------- */

static void test_version(void **state) {
  (void)state;
  TestRun r = RUN("--version");
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "tpk " TPK_VERSION "\n");
  test_run_free(&r);
}

static void test_help_lists_commands(void **state) {
  (void)state;
  TestRun r = RUN("--help");
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "Usage: tpk COMMAND");
  assert_contains(r.out, "  check ");
  assert_contains(r.out, "  dump ");
  assert_contains(r.out, "Examples:");
  assert_string_equal(r.err, "");
  TestRun h = RUN("help");
  assert_string_equal(h.out, r.out);
  test_run_free(&r);
  test_run_free(&h);
}

static void test_command_help(void **state) {
  (void)state;
  TestRun a = RUN("help", "dump"), b = RUN("dump", "--help"), c = RUN("dump", "x.tpk", "-h");
  assert_int_equal(a.status, 0);
  assert_int_equal(b.status, 0);
  assert_int_equal(c.status, 0);
  assert_contains(a.out, "Usage: tpk dump");
  assert_contains(a.out, "--bind");
  assert_contains(a.out, "--tune");
  assert_contains(a.out, "--kernel");
  assert_string_equal(a.out, b.out);
  assert_string_equal(a.out, c.out);
  TestRun d = RUN("check", "--help");
  assert_contains(d.out, "-q, --quiet");
  test_run_free(&a), test_run_free(&b), test_run_free(&c), test_run_free(&d);
}

static void test_usage_errors(void **state) {
  (void)state;
  TestRun r = RUN("chek", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "unknown command 'chek'; did you mean 'check'?");
  test_run_free(&r);

  r = test_run(NULL, (const char *const[]){NULL});
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "Usage: tpk COMMAND");
  test_run_free(&r);

  r = RUN("help", "dmp");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "did you mean 'dump'?");
  test_run_free(&r);

  r = RUN("check");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "no input files");
  test_run_free(&r);

  r = RUN("check", "--qiuet", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "unknown option '--qiuet'; did you mean '--quiet'?");
  test_run_free(&r);

  r = RUN("dump", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--ast");
  test_run_free(&r);

  r = RUN("dump", "--ir", "--bind");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "option '--bind' needs a value");
  test_run_free(&r);
}

static void test_malformed_bindings(void **state) {
  (void)state;
  static const char *const bad[] = {"M=x", "M", "=3", "M=1,", "1M=3", "M=-1", "M=99999999999999999999"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(bad); i++) {
    char opt[64];
    snprintf(opt, sizeof opt, "--bind=%s", bad[i]);
    TestRun r = RUN("dump", "--ir", "whatever.tpk", opt);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "tpk: --bind expects NAME=INTEGER[,NAME=INTEGER...], got '");
    test_run_free(&r);
  }
  TestRun r = RUN("dump", "--ir", "whatever.tpk", "--bind", "M=1024,N=x");
  assert_string_equal(r.err, "tpk: --bind expects NAME=INTEGER[,NAME=INTEGER...], got 'N=x'\n");
  test_run_free(&r);
  r = RUN("dump", "--ir", "whatever.tpk", "--tune", "BM=8", "--tune", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "'BM' is given twice");
  test_run_free(&r);
}

/* ---- check ------------------------------------------------------------------------ */

static void test_check_missing_file(void **state) {
  (void)state;
  TestRun r = RUN("check", "/nonexistent/x.tpk");
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, "tpk: cannot open /nonexistent/x.tpk: No such file or directory\n");
  assert_string_equal(r.out, "");
  test_run_free(&r);
}

static void test_check_ok(void **state) {
  (void)state;
  const char *path = temp_file("two.tpk",
                               "kernel add(x: f32[N], y: f32[N]) -> (o: f32[N]) { o = x + y; }\n"
                               "kernel scale(x: f32[N], a: f32) -> (o: f32[N]) { o = a * x; }\n");
  TestRun r = RUN("check", path);
  char want[600];
  snprintf(want, sizeof want, "%s: ok (2 kernels)\n", path);
  assert_string_equal(r.err, "");
  assert_string_equal(r.out, want);
  assert_int_equal(r.status, 0);
  test_run_free(&r);

  r = RUN("check", "-q", path);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "");
  test_run_free(&r);
}

static void test_check_std(void **state) {
  (void)state;
  TestRun r = RUN("check", "std:softmax.tpk", "std:layernorm", "std:flash_attention_bwd");
  assert_string_equal(r.err, "");
  assert_string_equal(r.out, "std:softmax.tpk: ok (2 kernels)\nstd:layernorm.tpk: ok (2 kernels)\n"
                             "std:attention.tpk: ok (4 kernels)\n");
  assert_int_equal(r.status, 0);
  test_run_free(&r);
  r = RUN("check", "std:softmx");
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "tpk: the standard library has no file or kernel 'softmx'; its files: activations.tpk, "));
  test_run_free(&r);
}

static void test_check_stdin(void **state) {
  (void)state;
  TestRun r = test_run(&(TestRunOptions){.input = "kernel copy(x: f32[N]) -> (y: f32[N]) { y = x; }\n"},
                   (const char *const[]){"check", "-", NULL});
  assert_string_equal(r.out, "<stdin>: ok (1 kernel)\n");
  assert_int_equal(r.status, 0);
  test_run_free(&r);
}

static void test_check_errors(void **state) {
  (void)state;
  const char *bad = temp_file("bad.tpk", "kernel k(x: f32[N]) -> (y: f32[N]) {\n  y = x + ;\n}\n");
  char bad_path[512];
  snprintf(bad_path, sizeof bad_path, "%s", bad);
  const char *good = temp_file("good.tpk", "kernel k(x: f32[N]) -> (y: f32[N]) { y = x; }\n");
  /* Errors in one file do not stop the others from being checked. */
  TestRun r = RUN("check", bad_path, "/nonexistent.tpk", good);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "bad.tpk:2:");
  assert_contains(r.err, ": error: ");
  assert_contains(r.err, "tpk: cannot open /nonexistent.tpk");
  assert_contains(r.out, "good.tpk: ok (1 kernel)");
  assert_true(strstr(r.out, "bad.tpk") == NULL);
  test_run_free(&r);
}

/* ---- dump ------------------------------------------------------------------------- */

static const char SOFTMAX[] =
    "kernel softmax(x: f32[M, N]) -> (y: f32[M, N])\n"
    "  tune BM in [8, 16, 32]\n"
    "{\n"
    "  for i in tiles(M, BM) {\n"
    "    let t = load(x[i, :], other=-inf);\n"
    "    let e = exp(t - max(t, axis=1, keepdims=true));\n"
    "    y[i, :] = e / sum(e, axis=1, keepdims=true);\n"
    "  }\n"
    "}\n"
    "kernel add(x: f32[N], y: f32[N]) -> (o: f32[N]) { o = x + y; }\n";

static void test_dump_ir(void **state) {
  (void)state;
  const char *path = temp_file("softmax.tpk", SOFTMAX);
  TestRun r = RUN("dump", "--ir", path);
  assert_int_equal(r.status, 0);
  assert_true(strncmp(r.out, "module ", 7) == 0);
  assert_contains(r.out, "kernel @softmax");
  assert_contains(r.out, "kernel @add");
  test_run_free(&r);

  /* Options after the file, `=` forms, and --kernel selecting one. */
  r = RUN("dump", path, "--ir", "--kernel=softmax", "--bind=M=1024,N=512", "--tune", "BM=16");
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "kernel @softmax");
  assert_true(strstr(r.out, "kernel @add") == NULL);
  test_run_free(&r);
}

static void test_dump_ast(void **state) {
  (void)state;
  const char *path = temp_file("softmax.tpk", SOFTMAX);
  TestRun r = RUN("dump", "--ast", path, "--kernel", "add");
  assert_int_equal(r.status, 0);
  assert_true(r.out[0] != 0);
  test_run_free(&r);
  r = RUN("dump", "--ast", path, "--bind", "M=3");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--ir only");
  test_run_free(&r);
}

static void test_dump_unknown_names(void **state) {
  (void)state;
  const char *path = temp_file("softmax.tpk", SOFTMAX);
  char want[700];
  TestRun r = RUN("dump", "--ir", path, "--kernel", "softmx");
  assert_int_equal(r.status, 2);
  snprintf(want, sizeof want, "tpk: no kernel named 'softmx' in %s; it defines: softmax, add (did you mean 'softmax'?)\n",
           path);
  assert_string_equal(r.err, want);
  test_run_free(&r);

  r = RUN("dump", "--ir", path, "--kernel", "softmax", "--tune", "BN=16");
  assert_int_equal(r.status, 2);
  assert_string_equal(r.err,
                      "tpk: --tune: kernel 'softmax' has no tunable 'BN' (its tunables: BM); did you mean 'BM'?\n");
  test_run_free(&r);

  r = RUN("dump", "--ir", path, "--bind", "Q=3");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "has no shape symbol 'Q' (its symbols: M, N)");
  test_run_free(&r);

  r = RUN("dump", "--ir", path, "--bind", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "'BM' is a tunable, not a shape symbol; choose it with --tune BM=16");
  test_run_free(&r);

  r = RUN("dump", "--ir", path, "--kernel", "add", "--tune", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "kernel 'add' has no tunable 'BM' (its tunables: none)");
  test_run_free(&r);
}

/* ---- run ---------------------------------------------------------------------------- */

/* A launch whose sizes break the kernel's `require` fails with both sizes
 * named (std:topk with K > N returned index N and -inf), on every device
 * and with --check; K = N runs and matches the interpreter. */
static void test_run_topk_k_larger_than_n(void **state) {
  (void)state;
  const char *want = "tpk: kernel 'topk': K = 10 is larger than N = 8 (it requires K <= N, line 28)\n";
  TestRun r = RUN("run", "std:topk.tpk", "-k", "topk", "--shape", "M=3,N=8,K=10");
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, want);
  test_run_free(&r);
  r = RUN("run", "std:topk.tpk", "-k", "topk", "--shape", "M=3,N=8,K=10", "--device", "sim:v5e", "--check");
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, want);
  test_run_free(&r);
  r = RUN("run", "std:topk.tpk", "-k", "topk", "--shape", "M=3,N=8,K=8", "--check");
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "'indices' matches the reference interpreter");
  test_run_free(&r);
}

static void test_closed_stdout(void **state) {
  (void)state;
  /* A reader that went away: no signal (test_run checks), a failure status,
   * and no noise on stderr. */
  TestRun r = test_run(&(TestRunOptions){.close_stdout = true}, ARGS("--help"));
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, "");
  test_run_free(&r);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),           cmocka_unit_test(test_help_lists_commands),
      cmocka_unit_test(test_command_help),      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_malformed_bindings), cmocka_unit_test(test_check_missing_file),
      cmocka_unit_test(test_check_ok),          cmocka_unit_test(test_check_stdin),
      cmocka_unit_test(test_check_std),
      cmocka_unit_test(test_check_errors),      cmocka_unit_test(test_dump_ir),
      cmocka_unit_test(test_dump_ast),          cmocka_unit_test(test_dump_unknown_names),
      cmocka_unit_test(test_run_topk_k_larger_than_n), cmocka_unit_test(test_closed_stdout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
