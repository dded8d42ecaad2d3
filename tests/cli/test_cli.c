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

typedef struct Run {
  int status; /* exit status */
  char *out, *err;
} Run;

static const char *tpk_path(void) {
  static char buf[4096];
  const char *b = getenv("TPK_BUILD");
  snprintf(buf, sizeof buf, "%s/tpk", b && *b ? b : "build");
  return buf;
}

static char *slurp_fd(int fd) {
  TpkStr s = {0};
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) tpk_str_putn(&s, buf, (size_t)n);
  return tpk_str_take(&s);
}

/* Run tpk with args (NULL-terminated), stdin from `input` text (NULL: empty).
 * When close_stdout, stdout is a pipe nobody reads (a closed `| head`). */
static Run run_full(const char *input, bool close_stdout, const char *const *args) {
  char out_name[] = "/tmp/tpk-test-out-XXXXXX", err_name[] = "/tmp/tpk-test-err-XXXXXX",
       in_name[] = "/tmp/tpk-test-in-XXXXXX";
  int out = mkstemp(out_name), err = mkstemp(err_name), in = mkstemp(in_name);
  assert_true(out >= 0 && err >= 0 && in >= 0);
  if (input) assert_int_equal(write(in, input, strlen(input)), (ssize_t)strlen(input));
  lseek(in, 0, SEEK_SET);
  int dead[2] = {-1, -1};
  if (close_stdout) {
    assert_int_equal(pipe(dead), 0);
    close(dead[0]);
  }
  const char *argv[64] = {tpk_path()};
  int n = 1;
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;

  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(in, 0);
    dup2(close_stdout ? dead[1] : out, 1);
    dup2(err, 2);
    setenv("LC_ALL", "C", 1);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "cannot run %s\n", argv[0]);
    _exit(127);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  if (close_stdout) close(dead[1]);
  Run r = {0};
  r.out = slurp_fd(out);
  r.err = slurp_fd(err);
  close(out), close(err), close(in);
  unlink(out_name), unlink(err_name), unlink(in_name);
  if (WIFSIGNALED(ws)) fail_msg("tpk was killed by signal %d; stderr:\n%s", WTERMSIG(ws), r.err);
  assert_true(WIFEXITED(ws));
  r.status = WEXITSTATUS(ws);
  if (r.status == 127 && strstr(r.err, "cannot run")) fail_msg("%s", r.err);
  return r;
}

#define RUN(...) run_full(NULL, false, (const char *const[]){__VA_ARGS__, NULL})

static void run_free(Run *r) {
  free(r->out);
  free(r->err);
}

#define assert_contains(hay, needle)                                                  \
  do {                                                                                \
    if (!strstr((hay), (needle))) fail_msg("expected '%s' in:\n%s", (needle), (hay)); \
  } while (0)

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
  Run r = RUN("--version");
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "tpk " TPK_VERSION "\n");
  run_free(&r);
}

static void test_help_lists_commands(void **state) {
  (void)state;
  Run r = RUN("--help");
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "Usage: tpk COMMAND");
  assert_contains(r.out, "  check ");
  assert_contains(r.out, "  dump ");
  assert_contains(r.out, "Examples:");
  assert_string_equal(r.err, "");
  Run h = RUN("help");
  assert_string_equal(h.out, r.out);
  run_free(&r);
  run_free(&h);
}

static void test_command_help(void **state) {
  (void)state;
  Run a = RUN("help", "dump"), b = RUN("dump", "--help"), c = RUN("dump", "x.tpk", "-h");
  assert_int_equal(a.status, 0);
  assert_int_equal(b.status, 0);
  assert_int_equal(c.status, 0);
  assert_contains(a.out, "Usage: tpk dump");
  assert_contains(a.out, "--bind");
  assert_contains(a.out, "--tune");
  assert_contains(a.out, "--kernel");
  assert_string_equal(a.out, b.out);
  assert_string_equal(a.out, c.out);
  Run d = RUN("check", "--help");
  assert_contains(d.out, "-q, --quiet");
  run_free(&a), run_free(&b), run_free(&c), run_free(&d);
}

static void test_usage_errors(void **state) {
  (void)state;
  Run r = RUN("chek", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "unknown command 'chek'; did you mean 'check'?");
  run_free(&r);

  r = run_full(NULL, false, (const char *const[]){NULL});
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "Usage: tpk COMMAND");
  run_free(&r);

  r = RUN("help", "dmp");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "did you mean 'dump'?");
  run_free(&r);

  r = RUN("check");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "no input files");
  run_free(&r);

  r = RUN("check", "--qiuet", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "unknown option '--qiuet'; did you mean '--quiet'?");
  run_free(&r);

  r = RUN("dump", "x.tpk");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--ast");
  run_free(&r);

  r = RUN("dump", "--ir", "--bind");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "option '--bind' needs a value");
  run_free(&r);
}

static void test_malformed_bindings(void **state) {
  (void)state;
  static const char *const bad[] = {"M=x", "M", "=3", "M=1,", "1M=3", "M=-1", "M=99999999999999999999"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(bad); i++) {
    char opt[64];
    snprintf(opt, sizeof opt, "--bind=%s", bad[i]);
    Run r = RUN("dump", "--ir", "whatever.tpk", opt);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "tpk: --bind expects NAME=INTEGER[,NAME=INTEGER...], got '");
    run_free(&r);
  }
  Run r = RUN("dump", "--ir", "whatever.tpk", "--bind", "M=1024,N=x");
  assert_string_equal(r.err, "tpk: --bind expects NAME=INTEGER[,NAME=INTEGER...], got 'N=x'\n");
  run_free(&r);
  r = RUN("dump", "--ir", "whatever.tpk", "--tune", "BM=8", "--tune", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "'BM' is given twice");
  run_free(&r);
}

/* ---- check ------------------------------------------------------------------------ */

static void test_check_missing_file(void **state) {
  (void)state;
  Run r = RUN("check", "/nonexistent/x.tpk");
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, "tpk: cannot open /nonexistent/x.tpk: No such file or directory\n");
  assert_string_equal(r.out, "");
  run_free(&r);
}

static void test_check_ok(void **state) {
  (void)state;
  const char *path = temp_file("two.tpk",
                               "kernel add(x: f32[N], y: f32[N]) -> (o: f32[N]) { o = x + y; }\n"
                               "kernel scale(x: f32[N], a: f32) -> (o: f32[N]) { o = a * x; }\n");
  Run r = RUN("check", path);
  char want[600];
  snprintf(want, sizeof want, "%s: ok (2 kernels)\n", path);
  assert_string_equal(r.err, "");
  assert_string_equal(r.out, want);
  assert_int_equal(r.status, 0);
  run_free(&r);

  r = RUN("check", "-q", path);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "");
  run_free(&r);
}

static void test_check_std(void **state) {
  (void)state;
  Run r = RUN("check", "std:softmax.tpk", "std:layernorm", "std:flash_attention_bwd");
  assert_string_equal(r.err, "");
  assert_string_equal(r.out, "std:softmax.tpk: ok (2 kernels)\nstd:layernorm.tpk: ok (2 kernels)\n"
                             "std:attention.tpk: ok (4 kernels)\n");
  assert_int_equal(r.status, 0);
  run_free(&r);
  r = RUN("check", "std:softmx");
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "tpk: the standard library has no file or kernel 'softmx'; its files: activations.tpk, "));
  run_free(&r);
}

static void test_check_stdin(void **state) {
  (void)state;
  Run r = run_full("kernel copy(x: f32[N]) -> (y: f32[N]) { y = x; }\n", false,
                   (const char *const[]){"check", "-", NULL});
  assert_string_equal(r.out, "<stdin>: ok (1 kernel)\n");
  assert_int_equal(r.status, 0);
  run_free(&r);
}

static void test_check_errors(void **state) {
  (void)state;
  const char *bad = temp_file("bad.tpk", "kernel k(x: f32[N]) -> (y: f32[N]) {\n  y = x + ;\n}\n");
  char bad_path[512];
  snprintf(bad_path, sizeof bad_path, "%s", bad);
  const char *good = temp_file("good.tpk", "kernel k(x: f32[N]) -> (y: f32[N]) { y = x; }\n");
  /* Errors in one file do not stop the others from being checked. */
  Run r = RUN("check", bad_path, "/nonexistent.tpk", good);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "bad.tpk:2:");
  assert_contains(r.err, ": error: ");
  assert_contains(r.err, "tpk: cannot open /nonexistent.tpk");
  assert_contains(r.out, "good.tpk: ok (1 kernel)");
  assert_true(strstr(r.out, "bad.tpk") == NULL);
  run_free(&r);
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
  Run r = RUN("dump", "--ir", path);
  assert_int_equal(r.status, 0);
  assert_true(strncmp(r.out, "module ", 7) == 0);
  assert_contains(r.out, "kernel @softmax");
  assert_contains(r.out, "kernel @add");
  run_free(&r);

  /* Options after the file, `=` forms, and --kernel selecting one. */
  r = RUN("dump", path, "--ir", "--kernel=softmax", "--bind=M=1024,N=512", "--tune", "BM=16");
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "kernel @softmax");
  assert_true(strstr(r.out, "kernel @add") == NULL);
  run_free(&r);
}

static void test_dump_ast(void **state) {
  (void)state;
  const char *path = temp_file("softmax.tpk", SOFTMAX);
  Run r = RUN("dump", "--ast", path, "--kernel", "add");
  assert_int_equal(r.status, 0);
  assert_true(r.out[0] != 0);
  run_free(&r);
  r = RUN("dump", "--ast", path, "--bind", "M=3");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--ir only");
  run_free(&r);
}

static void test_dump_unknown_names(void **state) {
  (void)state;
  const char *path = temp_file("softmax.tpk", SOFTMAX);
  char want[700];
  Run r = RUN("dump", "--ir", path, "--kernel", "softmx");
  assert_int_equal(r.status, 2);
  snprintf(want, sizeof want, "tpk: no kernel named 'softmx' in %s; it defines: softmax, add (did you mean 'softmax'?)\n",
           path);
  assert_string_equal(r.err, want);
  run_free(&r);

  r = RUN("dump", "--ir", path, "--kernel", "softmax", "--tune", "BN=16");
  assert_int_equal(r.status, 2);
  assert_string_equal(r.err,
                      "tpk: --tune: kernel 'softmax' has no tunable 'BN' (its tunables: BM); did you mean 'BM'?\n");
  run_free(&r);

  r = RUN("dump", "--ir", path, "--bind", "Q=3");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "has no shape symbol 'Q' (its symbols: M, N)");
  run_free(&r);

  r = RUN("dump", "--ir", path, "--bind", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "'BM' is a tunable, not a shape symbol; choose it with --tune BM=16");
  run_free(&r);

  r = RUN("dump", "--ir", path, "--kernel", "add", "--tune", "BM=16");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "kernel 'add' has no tunable 'BM' (its tunables: none)");
  run_free(&r);
}

static void test_closed_stdout(void **state) {
  (void)state;
  /* A reader that went away: no signal (run_full checks), a failure status,
   * and no noise on stderr. */
  Run r = run_full(NULL, true, (const char *const[]){"--help", NULL});
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err, "");
  run_free(&r);
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
      cmocka_unit_test(test_closed_stdout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
