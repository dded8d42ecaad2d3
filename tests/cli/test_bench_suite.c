/*
 * test_bench_suite.c — `tpk bench --suite std` as a user meets it: option
 * errors, the row listing, and the JSON a small run writes (two rows of the
 * suite at --smoke sizes, kernels from a scratch folder of corpus copies).
 * Nothing here asserts on timings: only that they are there and positive.
 */
#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/tpk-test-suite-XXXXXX";

#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The line of text that starts with prefix (heap); fails when there is none. */
static char *line_starting(const char *text, const char *prefix) {
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, prefix, strlen(prefix)) == 0) return strndup(p, strcspn(p, "\n"));
  fail_msg("no line starting with '%s' in:\n%s", prefix, text);
  return NULL;
}

/* ---- the scratch kernels folder --------------------------------------------------- */

static char kernels[700], json_path[700], kernels_env[800];

static void copy_corpus(const char *name, const char *as) {
  char *text = test_read_file(test_path(name), NULL);
  assert_non_null(text);
  char path[800];
  snprintf(path, sizeof path, "%s/%s", kernels, as);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  free(text);
}

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(tmpdir)) return -1;
  snprintf(kernels, sizeof kernels, "%s/kernels", tmpdir);
  snprintf(json_path, sizeof json_path, "%s/suite.json", tmpdir);
  snprintf(kernels_env, sizeof kernels_env, "TPK_KERNELS_DIR=%s", kernels);
  if (mkdir(kernels, 0777) != 0) return -1;
  /* the corpus softmax and layernorm have the suite's names and symbols */
  copy_corpus("tests/corpus/softmax.tpk", "softmax.tpk");
  copy_corpus("tests/corpus/layernorm.tpk", "layernorm.tpk");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* Check the JSON file with Python's parser and a few statements about it;
 * `checks` are Python lines over `d` (the document) ending in asserts. */
static void check_json(const char *checks) {
  char script[4096];
  snprintf(script, sizeof script,
           "import json, sys\n"
           "d = json.load(open(sys.argv[1]))\n"
           "rows = {r['kernel']: r for r in d['rows']}\n"
           "%s\n",
           checks);
  TestRun r = test_run(&(TestRunOptions){.prog = "python3"}, ARGS("-c", script, json_path));
  if (r.status != 0) fail_msg("the JSON check failed:\n%s\nJSON:\n%s", r.err, test_read_file(json_path, NULL));
  test_run_free(&r);
}

/* ---- option errors ----------------------------------------------------------------- */

static void test_usage_errors(void **state) {
  (void)state;
  static const struct {
    const char *args[6];
    const char *message;
  } cases[] = {
      {{"--suite", "foo"}, "tpk bench: unknown suite 'foo' (suites: std)\n"},
      {{"--suite", "sdt"}, "unknown suite 'sdt'; did you mean 'std'?"},
      {{"--suite", "std", "--device", "sim:v9"}, "--device: device 'sim:v9': unknown chip 'v9'"},
      {{"--suite", "std", "--device", "gpu"}, "--device: unknown device 'gpu'"},
      {{"--suite", "std", "--device", "host,host"}, "--device: 'host' is given twice"},
      {{"--suite", "std", "--device", ","}, "--device needs at least one device"},
      {{"--suite", "std", "--only", "softmx"}, "the std suite has no kernel 'softmx'; did you mean 'softmax'?"},
      {{"--suite", "std", "x.tpk"}, "--suite runs the suite's own kernels: no FILE (got 'x.tpk')"},
      {{"--suite", "std", "--repeat", "0"}, "--repeat expects an integer from 1 to 10000, got '0'"},
      {{"--suite", "std", "--shape", "M=3"}, "unknown option '--shape'"},
      {{"--suite=std", "--json"}, "option '--json' needs a value"},
      {{"--only", "--suite"}, "--suite NAME chooses the suite (suites: std)"},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(cases); i++) {
    const char *args[8] = {"bench"};
    int n = 1;
    for (int j = 0; cases[i].args[j]; j++) args[n++] = cases[i].args[j];
    args[n] = NULL;
    TestRun r = test_run(NULL, args);
    if (r.status != 2) fail_msg("case %zu: exit status %d, stderr:\n%s", i, r.status, r.err);
    assert_contains(r.err, cases[i].message);
    assert_contains(r.err, "Run 'tpk bench --help' for usage.");
    assert_string_equal(r.out, "");
    test_run_free(&r);
  }
}

static void test_help_mentions_suite(void **state) {
  (void)state;
  TestRun r = test_run(NULL, ARGS("help", "bench"));
  assert_int_equal(r.status, 0);
  assert_contains(r.out, "--suite std");
  assert_contains(r.out, "TPK_KERNELS_DIR");
  assert_contains(r.out, "--json FILE");
  test_run_free(&r);
}

/* ---- listing ------------------------------------------------------------------------- */

static void test_list(void **state) {
  (void)state;
  TestRun r = test_run(NULL, ARGS("bench", "--suite", "std", "--list", "--kernels", kernels));
  assert_int_equal(r.status, 0);
  char want[900];
  snprintf(want, sizeof want, "kernels from %s (--kernels)", kernels);
  assert_contains(r.out, want);
  /* the documented shapes, the references and the goals */
  assert_contains(r.out, "matmul                     matmul.tpk         M=1024,N=1024,K=1024");
  assert_contains(r.out, "OpenBLAS sgemm");
  assert_contains(r.out, ">= 85% of peak");
  /* present files are not flagged, absent ones are */
  char *softmax = line_starting(r.out, "softmax "), *matmul = line_starting(r.out, "matmul ");
  assert_null(strstr(softmax, "(file missing)"));
  assert_non_null(strstr(matmul, "(file missing)"));
  free(softmax);
  free(matmul);
  test_run_free(&r);
}

/* ---- running ------------------------------------------------------------------------- */

/* Two rows on the host, without PyTorch (a python that cannot be run): the
 * JSON has every field, the reference is n/a with its reason, and the
 * status is 0 since every selected kernel ran. */
static void test_json_host(void **state) {
  (void)state;
  TestRun r = test_run(&(TestRunOptions){.env = ENV(kernels_env, "PYTHON=/nonexistent/python3", "TPK_TIER=tcc")},
                  ARGS("bench", "--suite", "std", "--only", "softmax,layernorm", "--device", "host", "--smoke",
                       "--threads", "1", "--json", json_path));
  if (r.status != 0) fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
  assert_contains(r.out, "2 kernels from");
  assert_contains(r.out, "host: 1 thread; references on 1 thread");
  assert_contains(r.out, "PyTorch n/a (cannot run /nonexistent/python3");
  assert_contains(r.out, "softmax                    M=37,N=130");
  assert_contains(r.out, "2 rows: 2 measured, 0 missing, 0 failed");
  assert_contains(r.out, "n/a   softmax M=4096,N=4096 on the host >= 1.00x PyTorch CPU eager (1 thread): not judged");
  check_json("assert d['suite'] == 'std' and d['smoke'] is True and d['threads'] == 1\n"
             "assert d['devices'] == ['host']\n"
             "assert d['references']['torch'] is None and 'cannot run' in d['references']['torch_note']\n"
             "assert sorted(rows) == ['layernorm', 'softmax']\n"
             "for r in rows.values():\n"
             "    assert r['status'] == 'ok' and r['message'] is None, r\n"
             "    assert r['sizes'] == {'M': 37, 'N': 130}, r\n"
             "    assert r['host']['ms'] > 0 and r['host']['first_ms'] > 0 and r['host']['tier'] == 'tcc', r\n"
             "    assert r['rate_unit'] == 'GB/s' and r['host']['rate'] > 0, r\n"
             "    assert r['reference']['ms'] is None and r['reference']['ratio'] is None, r\n"
             "    assert r['reference']['note'], r\n"
             "    assert r['sim'] == [], r\n"
             "assert rows['softmax']['bytes'] == 2 * 37 * 130 * 4\n"
             "assert rows['layernorm']['bytes'] == (2 * 37 * 130 + 2 * 130) * 4\n"
             "goals = {g['goal'].split()[0]: g for g in d['goals']}\n"
             "assert sorted(goals) == ['layernorm', 'softmax'] and all(g['met'] is None for g in goals.values())\n"
             "assert d['summary'] == {'rows': 2, 'ok': 2, 'missing': 0, 'errors': 0, 'goals': 2, 'goals_met': 0}");
  test_run_free(&r);
}

/* With python3: the PyTorch column is measured when torch imports, else
 * it says how to get it. */
static void test_json_torch(void **state) {
  (void)state;
  TestRun probe = test_run(&(TestRunOptions){.prog = "python3"}, ARGS("-c", "import torch"));
  bool have_torch = probe.status == 0;
  test_run_free(&probe);
  TestRun r = test_run(&(TestRunOptions){.env = ENV(kernels_env, "PYTHON=python3", "TPK_TIER=tcc")},
                  ARGS("bench", "--suite", "std", "--only", "softmax", "--device", "host", "--smoke", "--json",
                       json_path));
  if (r.status != 0) fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
  if (have_torch) {
    assert_contains(r.out, "CPU eager");
    check_json("r = rows['softmax']['reference']\n"
               "assert d['references']['torch']\n"
               "assert r['name'] == 'torch.softmax' and r['op'] == 'softmax', r\n"
               "assert r['ms'] > 0 and abs(r['ratio'] - r['ms'] / rows['softmax']['host']['ms']) < 1e-3 * r['ratio'], r");
  } else {
    assert_contains(r.out, "pip install torch");
    check_json("assert 'pip install torch' in d['references']['torch_note']");
  }
  test_run_free(&r);
}

/* The simulator alone: time, roofline share, no host columns. */
static void test_json_sim(void **state) {
  (void)state;
  TestRun r = test_run(&(TestRunOptions){.env = ENV(kernels_env)}, ARGS("bench", "--suite", "std", "--only", "softmax", "--device", "sim:v5e",
                                               "--smoke", "--json", json_path));
  if (r.status != 0) fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
  assert_contains(r.out, "v5e µs");
  check_json("r = rows['softmax']\n"
             "assert r['host'] is None and r['reference'] is None, r\n"
             "(s,) = r['sim']\n"
             "assert s['device'] == 'sim:v5e' and s['us'] > 0 and 0 < s['roofline_fraction'] <= 1.0001, s\n"
             "assert s['bound'] in ('memory', 'compute') and s['peak_fraction'] is None, s");
  test_run_free(&r);
}

/* Missing files and kernels are rows of their own and fail the run. */
static void test_missing(void **state) {
  (void)state;
  TestRun r = test_run(&(TestRunOptions){.env = ENV(kernels_env, "PYTHON=/nonexistent/python3", "TPK_TIER=tcc")},
                  ARGS("bench", "--suite", "std", "--only", "matmul,log_softmax,softmax", "--device", "host",
                       "--smoke", "--json", json_path));
  assert_int_equal(r.status, 1);
  char want[900];
  snprintf(want, sizeof want, "missing: %s/matmul.tpk not found", kernels);
  assert_contains(r.out, want);
  assert_contains(r.out, "missing: softmax.tpk has no kernel 'log_softmax' (it defines: softmax)");
  assert_contains(r.out, "3 rows: 1 measured, 2 missing, 0 failed");
  check_json("assert rows['matmul']['status'] == 'missing' and 'not found' in rows['matmul']['message']\n"
             "assert rows['log_softmax']['status'] == 'missing' and rows['log_softmax']['host'] is None\n"
             "assert rows['softmax']['status'] == 'ok'\n"
             "assert d['summary']['missing'] == 2 and d['summary']['ok'] == 1");
  test_run_free(&r);
}

/* A kernel whose shape symbols differ from the row's is an error that says
 * which symbol; the row, not the kernel, is then the thing to fix. */
static void test_row_mismatch(void **state) {
  (void)state;
  char dir[800], path[900], env[900];
  snprintf(dir, sizeof dir, "%s/other", tmpdir);
  assert_int_equal(mkdir(dir, 0777), 0);
  snprintf(path, sizeof path, "%s/softmax.tpk", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("kernel softmax(x: f32[R, C]) -> (y: f32[R, C]) tune BM in [8] {\n"
        "  for i in tiles(R, BM) { let t = x[i, :]; y[i, :] = exp(t) / sum(exp(t), axis=1, keepdims=true); }\n"
        "}\n",
        f);
  fclose(f);
  snprintf(env, sizeof env, "TPK_KERNELS_DIR=%s", dir);
  TestRun r = test_run(&(TestRunOptions){.env = ENV(env, "PYTHON=/nonexistent/python3")},
                  ARGS("bench", "--suite", "std", "--only", "softmax", "--device", "host", "--smoke"));
  assert_int_equal(r.status, 1);
  assert_contains(r.out, "error: the row gives no size for the kernel's shape symbol R (row: M=37,N=130)");
  assert_contains(r.out, "1 row: 0 measured, 0 missing, 1 failed");
  test_run_free(&r);
  unlink(path);
  rmdir(dir);
}

/* A kernel file that does not check: its row shows the first diagnostic
 * and where to see them all. */
static void test_kernel_with_errors(void **state) {
  (void)state;
  char dir[800], path[900];
  snprintf(dir, sizeof dir, "%s/broken", tmpdir);
  assert_int_equal(mkdir(dir, 0777), 0);
  snprintf(path, sizeof path, "%s/softmax.tpk", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("kernel softmax(x: f32[M, N]) -> (y: f32[M, N]) {\n  y = x + q;\n  y = z;\n}\n", f);
  fclose(f);
  TestRun r = test_run(&(TestRunOptions){.env = ENV("PYTHON=/nonexistent/python3")}, ARGS("bench", "--suite", "std", "--only", "softmax",
                                                                  "--kernels", dir, "--device", "host", "--smoke"));
  assert_int_equal(r.status, 1);
  char want[2048];
  snprintf(want, sizeof want, "error: %s:2:11: error: unknown name 'q' (all of it: tpk check %s)\n", path, path);
  assert_contains(r.out, want);
  test_run_free(&r);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_help_mentions_suite),
      cmocka_unit_test(test_list),         cmocka_unit_test(test_json_host),
      cmocka_unit_test(test_json_torch),   cmocka_unit_test(test_json_sim),
      cmocka_unit_test(test_missing),      cmocka_unit_test(test_row_mismatch),
      cmocka_unit_test(test_kernel_with_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
