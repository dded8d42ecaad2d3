/*
 * test_cli.c — the `tpk` command as a user meets it: run build/tpk (or
 * $TPK_BUILD/tpk) with arguments and check exit status, stdout and stderr.
 * Every run also checks that tpk was not killed by a signal.
 */
#include "support.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Files the tests write live in one temporary folder, removed at the end. */
static char tmpdir[] = "/tmp/tpk-test-cli-XXXXXX";

/* tmpdir/name in a rotating static buffer (a few may be live at once). */
static const char *temp_path(const char *name) {
  static char bufs[4][512];
  static int next;
  char *p = bufs[next++ % 4];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

/* Write a file into the temporary folder; returns its path (static buffer). */
static const char *temp_file(const char *name, const char *text) {
  const char *path = temp_path(name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static int setup(void **state) {
  (void)state;
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* A .npy file of NumPy dtype `descr` ("<f8") holding n elements of `size`
 * bytes, shape (n,). */
static const char *temp_npy(const char *name, const char *descr, const void *data, size_t n, size_t size) {
  char dict[128];
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%zu,), }", descr, n);
  int hlen = len + 1 + (64 - (10 + len + 1) % 64) % 64;
  const char *path = temp_path(name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(hlen & 0xff, f);
  fputc(hlen >> 8, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int i = len; i < hlen - 1; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, size, n, f);
  fclose(f);
  return path;
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
  assert_string_equal(r.out, "std:softmax.tpk: ok (4 kernels)\nstd:layernorm.tpk: ok (2 kernels)\n"
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

/* tpk bench on several devices names each row by the kernel it ran: the
 * name was borrowed from the program, which each device's run destroys
 * (rows after the first read freed memory: ".unit tmm.tpk"). */
static void test_bench_rows_name_the_kernel(void **state) {
  (void)state;
  const char *path = temp_file("one.tpk", "kernel twice(x: f32[N]) -> (y: f32[N]) { y = x * 2.0; }\n");
  char file[512], want[600];
  snprintf(file, sizeof file, "%s", path);
  TestRun r = RUN("bench", file, "--shape", "N=64", "--device", "host,sim:v5e,sim:v6e", "--repeat", "1", "--json");
  assert_int_equal(r.status, 0);
  snprintf(want, sizeof want, "{\"name\": \"twice %s\", \"device\": \"", file);
  int rows = 0;
  for (const char *p = r.out; (p = strstr(p, "{\"name\": ")); p++, rows++)
    if (strncmp(p, want, strlen(want)) != 0) fail_msg("row %d: %.80s, expected %s", rows, p, want);
  assert_int_equal(rows, 3);
  test_run_free(&r);
}

/* ---- run: the files it writes --------------------------------------------------------- */

static void assert_file_is(const char *path, const char *want) {
  char *got = test_read_file(path, NULL);
  if (!got) fail_msg("%s: cannot read it", path);
  if (strcmp(got, want) != 0) fail_msg("%s holds '%s', expected '%s'", path, got, want);
  free(got);
}

#define RUN_SOFTMAX(...) RUN("run", "std:softmax.tpk", "-k", "softmax", "--shape", "M=2,N=3", "--repeat", "1", __VA_ARGS__)

/* --out "" wrote into / (the folder "" + "/y.npy"); a link planted where an
 * output goes was followed, overwriting what it points to. */
static void test_run_out_is_safe(void **state) {
  (void)state;
  TestRun r = RUN_SOFTMAX("--out", "");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--out expects a folder name, got ''");
  test_run_free(&r);

  const char *victim = temp_file("victim.txt", "precious");
  r = RUN_SOFTMAX("--out", victim);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "victim.txt: not a folder");
  test_run_free(&r);
  assert_file_is(victim, "precious");

  char out[512], y[600];
  snprintf(out, sizeof out, "%s", temp_path("out"));
  snprintf(y, sizeof y, "%s/y.npy", out);
  assert_int_equal(mkdir(out, 0700), 0);
  assert_int_equal(symlink(victim, y), 0);
  r = RUN_SOFTMAX("--out", out);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "y.npy: it is a symbolic link, and tpk does not write through one");
  test_run_free(&r);
  assert_file_is(victim, "precious");

  /* a file already there is replaced; no temporary file stays */
  assert_int_equal(unlink(y), 0);
  temp_file("out/y.npy", "old");
  r = RUN_SOFTMAX("--out", out);
  assert_int_equal(r.status, 0);
  test_run_free(&r);
  char *npy = test_read_file(y, NULL);
  assert_memory_equal(npy, "\x93NUMPY", 6);
  free(npy);
  DIR *d = opendir(out);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) assert_string_equal(e->d_name, "y.npy");
  closedir(d);

  /* a link to a folder, named by the user, is followed (tpk help run says so) */
  char real[512], linked[512];
  snprintf(real, sizeof real, "%s", temp_path("real"));
  snprintf(linked, sizeof linked, "%s", temp_path("linked"));
  assert_int_equal(mkdir(real, 0700), 0);
  assert_int_equal(symlink(real, linked), 0);
  r = RUN_SOFTMAX("--out", linked);
  assert_int_equal(r.status, 0);
  test_run_free(&r);
  snprintf(y, sizeof y, "%s/y.npy", real);
  assert_int_equal(access(y, F_OK), 0);

  r = RUN("help", "run");
  assert_contains(r.out, "a symbolic link where a file");
  test_run_free(&r);
}

static void test_run_trace_is_safe(void **state) {
  (void)state;
  TestRun r = RUN_SOFTMAX("--device", "sim:v5e", "--trace", "");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--trace expects a file name, got ''");
  test_run_free(&r);

  const char *victim = temp_file("trace-victim.txt", "precious");
  char link[512];
  snprintf(link, sizeof link, "%s", temp_path("trace.json"));
  assert_int_equal(symlink(victim, link), 0);
  r = RUN_SOFTMAX("--device", "sim:v5e", "--trace", link);
  assert_int_equal(r.status, 1);
  assert_contains(r.err, "trace.json: it is a symbolic link, and tpk does not write through one");
  test_run_free(&r);
  assert_file_is(victim, "precious");
  assert_int_equal(unlink(link), 0);
  r = RUN_SOFTMAX("--device", "sim:v5e", "--trace", link);
  assert_int_equal(r.status, 0);
  test_run_free(&r);
  char *json = test_read_file(link, NULL);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"traceEvents\""));
  free(json);
}

/* ---- run: names given twice, too many, bad seeds ---------------------------------------- */

static void test_run_names_given_twice(void **state) {
  (void)state;
  float x[3] = {1, 2, 3};
  const char *a = temp_npy("a.npy", "<f4", x, 3, 4);
  char opt[600];
  snprintf(opt, sizeof opt, "x=%s", a);
  static const char *const twice[][4] = {
      {"--inputs", "x=a.npy,x=b.npy", NULL, NULL},
      {"--inputs", "x=a.npy", "--inputs", "x=b.npy"},
      {"--scalar", "eps=1,eps=2", NULL, NULL},
      {"--scalar", "eps=1", "--scalar", "eps=1"},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(twice); i++) {
    const char *args[16] = {"run", "std:layernorm.tpk", "-k", "layernorm", "--shape", "M=2,N=3", twice[i][0], twice[i][1]};
    int n = 8;
    if (twice[i][2]) args[n++] = twice[i][2], args[n++] = twice[i][3];
    TestRun r = test_run(NULL, args);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "' is given twice");
    test_run_free(&r);
  }
  TestRun r = RUN("run", "std:layernorm.tpk", "-k", "layernorm", "--shape", "M=2,N=3", "--scalar", "eps=1,");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "--scalar expects NAME=VALUE[,NAME=VALUE...], got ''");
  test_run_free(&r);
  r = RUN("tune", "std:layernorm.tpk", "-k", "layernorm", "--shape", "M=2,N=3", "--scalar", "eps=1,eps=2");
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "'eps' is given twice");
  test_run_free(&r);
}

/* 65 sizes were cut to 64 without a word; 65 tunables were read past the
 * end of the launch's array. */
static void test_run_too_many_names(void **state) {
  (void)state;
  char list[1024];
  int k = 0;
  for (int i = 0; i < 65; i++) k += snprintf(list + k, sizeof list - (size_t)k, "%sS%d=1", i ? "," : "", i);
  TestRun r = RUN_SOFTMAX("--shape", list);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "at most 64 sizes in --shape (got 67)");
  test_run_free(&r);
  r = RUN_SOFTMAX("--tune", list);
  assert_int_equal(r.status, 2);
  assert_contains(r.err, "at most 64 tunables in --tune (got 65)");
  test_run_free(&r);
}

static void test_bad_seeds(void **state) {
  (void)state;
  static const char *const bad[] = {"-1", "+1", " 1", "1x", "", "18446744073709551616"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(bad); i++) {
    TestRun r = RUN_SOFTMAX("--seed", bad[i]);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "--seed expects a non-negative integer");
    test_run_free(&r);
    r = RUN("tune", "std:softmax.tpk", "-k", "softmax", "--shape", "M=8,N=8", "--seed", bad[i]);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "--seed expects a non-negative integer");
    test_run_free(&r);
  }
  TestRun r = RUN_SOFTMAX("--seed", "18446744073709551615");
  assert_int_equal(r.status, 0);
  test_run_free(&r);
}

/* ---- run: .npy inputs of another dtype -------------------------------------------------- */

static const char COPY[] = "kernel copy(x: f32[N]) -> (y: f32[N]) { y = x; }\n"
                           "kernel copy_bf16(x: bf16[N]) -> (y: bf16[N]) { y = x; }\n"
                           "kernel copy_i32(x: i32[N]) -> (y: i32[N]) { y = x; }\n";

/* Run kernel k of COPY on input file `in` with --out; the output's bytes. */
static TestRun run_copy(const char *k, const char *in, char **y) {
  const char *src = temp_file("copy.tpk", COPY);
  char src_path[512], input[600], out[512], ypath[600];
  snprintf(src_path, sizeof src_path, "%s", src);
  snprintf(input, sizeof input, "x=%s", in);
  snprintf(out, sizeof out, "%s", temp_path("copied"));
  snprintf(ypath, sizeof ypath, "%s/y.npy", out);
  unlink(ypath);
  TestRun r = RUN("run", src_path, "-k", k, "--shape", "N=3", "--inputs", input, "--out", out, "--repeat", "1");
  *y = test_read_file(ypath, NULL);
  return r;
}

/* The data of a .npy file this tpk wrote (its header is 128 bytes at most). */
static const void *npy_data(const char *file) {
  const char *nl = strchr(file + 10, '\n');
  assert_non_null(nl);
  return nl + 1;
}

/* NumPy's default dtypes, float64 and int64, are converted with a note; a
 * float32 file feeds bf16 without one (NumPy has no bf16); anything else is
 * refused naming both dtypes. */
static void test_run_npy_dtypes(void **state) {
  (void)state;
  double d[3] = {0.1, -2.5, 1e300};
  char path[512], *y;
  snprintf(path, sizeof path, "%s", temp_npy("f64.npy", "<f8", d, 3, 8));
  TestRun r = run_copy("copy", path, &y);
  assert_int_equal(r.status, 0);
  char want[700];
  snprintf(want, sizeof want, "tpk: note: %s holds float64; rounded to f32 for parameter 'x'\n", path);
  assert_string_equal(r.err, want);
  test_run_free(&r);
  assert_non_null(y);
  float got[3];
  memcpy(got, npy_data(y), sizeof got);
  assert_true(got[0] == 0.1f && got[1] == -2.5f && isinf(got[2]));
  free(y);

  r = run_copy("copy_bf16", path, &y);
  assert_int_equal(r.status, 0);
  assert_contains(r.err, "holds float64; rounded to bf16 for parameter 'x'");
  test_run_free(&r);
  free(y);

  float f[3] = {1, 2, 3};
  snprintf(path, sizeof path, "%s", temp_npy("f32.npy", "<f4", f, 3, 4));
  r = run_copy("copy_bf16", path, &y);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.err, "");
  test_run_free(&r);
  free(y);

  int64_t l[3] = {7, -8, 2147483647};
  snprintf(path, sizeof path, "%s", temp_npy("i64.npy", "<i8", l, 3, 8));
  r = run_copy("copy_i32", path, &y);
  assert_int_equal(r.status, 0);
  assert_contains(r.err, "holds int64; converted to i32 for parameter 'x'");
  test_run_free(&r);
  int32_t gi[3];
  memcpy(gi, npy_data(y), sizeof gi);
  assert_true(gi[0] == 7 && gi[1] == -8 && gi[2] == 2147483647);
  free(y);

  int32_t i[3] = {1, 2, 3};
  snprintf(path, sizeof path, "%s", temp_npy("i32.npy", "<i4", i, 3, 4));
  r = run_copy("copy", path, &y);
  assert_int_equal(r.status, 1);
  snprintf(want, sizeof want, "tpk: %s holds i32[3] but parameter 'x' needs f32[3] (a file of float32 or float64)\n", path);
  assert_string_equal(r.err, want);
  test_run_free(&r);
  free(y);

  r = RUN("help", "run");
  assert_contains(r.out, "a float64 file is rounded");
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
      cmocka_unit_test(test_run_topk_k_larger_than_n), cmocka_unit_test(test_run_out_is_safe),
      cmocka_unit_test(test_run_trace_is_safe),  cmocka_unit_test(test_run_names_given_twice),
      cmocka_unit_test(test_run_too_many_names), cmocka_unit_test(test_bad_seeds),
      cmocka_unit_test(test_bench_rows_name_the_kernel),
      cmocka_unit_test(test_run_npy_dtypes),     cmocka_unit_test(test_closed_stdout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
