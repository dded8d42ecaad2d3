/*
 * test_units.c — the one compilation cache: compiled units in memory
 * (units.c: keyed by structure, bounded, least recently used first) and the
 * JIT's disk cache under them. Kernels and graphs of one structure compile
 * once; a warm process compiles nothing; a damaged entry is rebuilt; two
 * processes build the same clusters into one folder at once.
 */
#include "support.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/ir.h"
#include "runtime/internal.h"
#include "tpk.h"

static const char *SCALE =
    "kernel scale(x: f32[N], a: f32) -> (y: f32[N])\n"
    "{\n"
    "  for i in tiles(N, 16) { y[i] = x[i] * a; }\n"
    "}\n";

/* Two clusters (2x + 1, then its square) and a reshape, as fusion leaves
 * a graph; `name` names the graph and its clusters. */
static char *two_clusters(const char *name) {
  char *text = malloc(4096);
  snprintf(text, 4096,
           "kernel @%s.c0(%%x: ref<f32[S,D]>, %%y: out ref<f32[S,D]>) {\n"
           "  %%0 = load %%x {index=\"::\"} : f32[S,D]\n"
           "  %%1 = const {value=2.0} : f32\n"
           "  %%2 = broadcast %%1 : f32[S,D]\n"
           "  %%3 = mul %%0, %%2 : f32[S,D]\n"
           "  %%4 = const {value=1.0} : f32\n"
           "  %%5 = broadcast %%4 : f32[S,D]\n"
           "  %%6 = add %%3, %%5 : f32[S,D]\n"
           "  store %%y, %%6 {index=\"::\", mode=\"set\"}\n"
           "}\n"
           "kernel @%s.c1(%%x: ref<f32[S,D]>, %%y: out ref<f32[S,D]>) {\n"
           "  %%0 = load %%x {index=\"::\"} : f32[S,D]\n"
           "  %%1 = mul %%0, %%0 : f32[S,D]\n"
           "  store %%y, %%1 {index=\"::\", mode=\"set\"}\n"
           "}\n"
           "func @%s(%%x: f32[S,D]) -> (f32[S*D]) {\n"
           "  %%0 = call %%x {callee=\"%s.c0\"} : f32[S,D]\n"
           "  %%1 = call %%0 {callee=\"%s.c1\"} : f32[S,D]\n"
           "  %%2 = reshape %%1 : f32[S*D]\n"
           "  return %%2\n"
           "}\n",
           name, name, name, name, name);
  return text;
}

static TpkProgram *driver_program(TpkContext *ctx, const char *name) {
  char *text = two_clusters(name);
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(text, strlen(text), name, &err);
  free(text);
  if (!m) fail_msg("%s", err.message);
  TpkProgram *p;
  if (tpk_program_from_driver(ctx, m, tpk_module_find(m, name), &p) != TPK_OK) fail_msg("%s", tpk_last_error());
  return p;
}

/* Launch the graph of two_clusters at S x D and check (2x + 1)^2; false
 * (with a message on stderr: children report through their status) when
 * something is wrong. */
static bool run_graph(TpkContext *ctx, TpkProgram *p, int64_t S, int64_t D, TpkLaunchResult *r) {
  TpkDevice *host;
  TpkKernel *g;
  TpkBuffer *x, *y;
  if (tpk_device_open(ctx, "host", &host) != TPK_OK || tpk_program_kernel(p, tpk_program_kernel_name(p, 0), &g) != TPK_OK ||
      tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){S, D}, &x) != TPK_OK ||
      tpk_buffer_create(host, TPK_F32, 1, (int64_t[]){S * D}, &y) != TPK_OK) {
    fprintf(stderr, "%s\n", tpk_last_error());
    return false;
  }
  float *xv = tpk_buffer_data(x);
  for (int64_t i = 0; i < S * D; i++) xv[i] = (float)(i % 7) - 3.0f;
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = r};
  bool ok = tpk_kernel_launch(g, &L) == TPK_OK;
  if (!ok) fprintf(stderr, "%s\n", tpk_last_error());
  const float *yv = tpk_buffer_data(y);
  for (int64_t i = 0; ok && i < S * D; i++) {
    float want = (2.0f * xv[i] + 1.0f) * (2.0f * xv[i] + 1.0f);
    if (yv[i] != want) {
      fprintf(stderr, "y[%lld] = %g, want %g\n", (long long)i, yv[i], want);
      ok = false;
    }
  }
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  return ok;
}

static void stats(TpkContext *ctx, TpkCacheStats *s) {
  if (tpk_cache_stats(ctx, s) != TPK_OK) fail_msg("%s", tpk_last_error());
}

/* Two loads of one kernel share its specialisations: one compile; every
 * launch is a lookup of a kernel unit. */
static void test_two_loads_compile_once(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkDevice *host;
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  TpkProgram *p[2];
  TpkBuffer *x, *y;
  int64_t n = 100;
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &y), TPK_OK);
  for (int i = 0; i < 2; i++) {
    TpkKernel *k;
    assert_int_equal(tpk_program_load_source(ctx, i ? "again.tpk" : "scale.tpk", SCALE, strlen(SCALE), &p[i]), TPK_OK);
    assert_int_equal(tpk_program_kernel(p[i], "scale", &k), TPK_OK);
    for (int j = 0; j < 3; j++) {
      TpkLaunch L = {.args = (TpkBuffer *[]){x, NULL, y}, .scalars = (double[]){0, 2, 0}};
      assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
    }
  }
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  TpkCacheStats s;
  stats(ctx, &s);
  assert_int_equal(s.unit_misses[TPK_UNIT_KERNEL], 1);
  assert_int_equal(s.unit_hits[TPK_UNIT_KERNEL], 5);
  assert_int_equal(s.unit_hits[TPK_UNIT_GRAPH] + s.unit_misses[TPK_UNIT_GRAPH], 0);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(p[0]);
  tpk_program_destroy(p[1]);
  tpk_context_destroy(ctx);
}

/* Graphs of one structure share their clusters' code whatever they are
 * called: the second compiles nothing. */
static void test_graphs_share_clusters(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkProgram *a = driver_program(ctx, "first");
  assert_int_equal(tpk_context_compiler_runs(ctx), 2);
  TpkProgram *b = driver_program(ctx, "second");
  assert_int_equal(tpk_context_compiler_runs(ctx), 2);
  TpkLaunchResult r;
  assert_true(run_graph(ctx, a, 3, 5, &r));
  assert_true(run_graph(ctx, b, 7, 2, &r));
  assert_string_equal(tpk_program_kernel_name(b, 0), "second");
  tpk_program_destroy(a);
  tpk_program_destroy(b);
  tpk_context_destroy(ctx);
}

/* TPK_CACHE_UNITS bounds what a context keeps: launches at more sizes than
 * it holds evict the oldest, which a later launch builds again. */
static void test_bounded(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  setenv("TPK_CACHE_UNITS", "2", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  unsetenv("TPK_CACHE_UNITS");
  TpkDevice *host;
  TpkProgram *p;
  TpkKernel *k;
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "scale.tpk", SCALE, strlen(SCALE), &p), TPK_OK);
  assert_int_equal(tpk_program_kernel(p, "scale", &k), TPK_OK);
  for (int round = 0; round < 2; round++)
    for (int64_t n = 10; n < 14; n++) {
      TpkBuffer *x, *y;
      assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &x), TPK_OK);
      assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &y), TPK_OK);
      float *xv = tpk_buffer_data(x);
      for (int i = 0; i < n; i++) xv[i] = (float)i;
      TpkLaunch L = {.args = (TpkBuffer *[]){x, NULL, y}, .scalars = (double[]){0, 3, 0}};
      assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
      const float *yv = tpk_buffer_data(y);
      for (int i = 0; i < n; i++) assert_true(yv[i] == 3.0f * (float)i);
      tpk_buffer_destroy(x);
      tpk_buffer_destroy(y);
    }
  TpkCacheStats s;
  stats(ctx, &s);
  assert_int_equal(s.units, 2);
  assert_int_equal(s.unit_misses[TPK_UNIT_KERNEL], 8); /* every size evicted before its turn came again */
  assert_int_equal(s.unit_hits[TPK_UNIT_KERNEL], 0);
  assert_int_equal(tpk_context_compiler_runs(ctx), 8);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* A trace a launch handed out stays valid while its program lives, even
 * when the cache has let go of its specialisation. */
static void test_trace_outlives_eviction(void **state) {
  (void)state;
  setenv("TPK_CACHE_UNITS", "1", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_CACHE_UNITS");
  TpkDevice *sim;
  TpkKernel *softmax;
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &sim), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "softmax", &softmax), TPK_OK);
  TpkLaunchResult first;
  char *dir = test_temp_dir("tpk-test-units");
  for (int64_t rows = 8; rows < 12; rows++) {
    TpkBuffer *x, *y;
    assert_int_equal(tpk_buffer_create(sim, TPK_F32, 2, (int64_t[]){rows, 64}, &x), TPK_OK);
    assert_int_equal(tpk_buffer_create(sim, TPK_F32, 2, (int64_t[]){rows, 64}, &y), TPK_OK);
    TpkLaunchResult r;
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = rows == 8 ? &first : &r};
    assert_int_equal(tpk_kernel_launch(softmax, &L), TPK_OK);
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/first.json", dir);
  assert_non_null(first.trace);
  assert_int_equal(tpk_trace_write(first.trace, NULL, path), TPK_OK);
  size_t len;
  char *json = test_read_file(path, &len);
  assert_non_null(json);
  assert_contains(json, "softmax on v5e");
  free(json);
  test_remove_tree(dir);
  free(dir);
  tpk_context_destroy(ctx);
}

/* ---- the disk under the units: processes ------------------------------------------ */

/* In a child process: a context in the cache folder `dir` builds (or loads)
 * the graph with cc and runs it. Exits 0 when the results are right and
 * `compiles` (or any number, when < 0) compilers ran; 1 otherwise. */
static void child_runs_graph(const char *dir, int compiles, int rejected) {
  setenv("TPK_CACHE_DIR", dir, 1);
  setenv("TPK_TIER", "cc", 1);
  TpkContext *ctx;
  if (tpk_context_create(&ctx) != TPK_OK) _exit(1);
  TpkProgram *p = NULL;
  char *text = two_clusters("g");
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(text, strlen(text), "g", &err);
  free(text);
  if (!m || tpk_program_from_driver(ctx, m, tpk_module_find(m, "g"), &p) != TPK_OK) {
    fprintf(stderr, "child: %s\n", m ? tpk_last_error() : err.message);
    _exit(1);
  }
  TpkLaunchResult r;
  bool ok = run_graph(ctx, p, 9, 4, &r) && run_graph(ctx, p, 2, 33, &r);
  int runs = tpk_context_compiler_runs(ctx);
  TpkCacheStats s;
  ok = ok && tpk_cache_stats(ctx, &s) == TPK_OK;
  if (ok && compiles >= 0 && runs != compiles) {
    fprintf(stderr, "child: %d compiler runs, want %d\n", runs, compiles);
    ok = false;
  }
  if (ok && rejected >= 0 && s.rejected != rejected) {
    fprintf(stderr, "child: %d entries rejected, want %d\n", s.rejected, rejected);
    ok = false;
  }
  if (ok && compiles == 0 && strcmp(r.tier, "cache") != 0) {
    fprintf(stderr, "child: ran on tier %s\n", r.tier);
    ok = false;
  }
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
  _exit(ok ? 0 : 1);
}

static pid_t spawn(const char *dir, int compiles, int rejected) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_runs_graph(dir, compiles, rejected);
  return pid;
}

static void expect_child(pid_t pid) {
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("the child process failed (status %d)", status);
}

/* The .so entries of the cache folder. */
static int entries(const char *dir, char names[][512], int max) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".so") == 0 && n < max) snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return n;
}

/* A process builds the graph's two clusters with cc into the folder; a
 * second process loads them: no compiler runs, the code is the cache's. */
static void test_warm_process_compiles_nothing(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn(dir, 2, 0));
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 2);
  expect_child(spawn(dir, 0, 0));
  test_remove_tree(dir);
  free(dir);
}

/* A damaged entry does not load: it is compiled again and replaced, and
 * the next process compiles nothing. */
static void test_damaged_entry_is_rebuilt(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn(dir, 2, 0));
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 2);
  int fd = open(names[0], O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, "\x7f" "ELG", 4, 0), 4); /* the ELF magic, damaged */
  close(fd);
  expect_child(spawn(dir, 1, 1));
  expect_child(spawn(dir, 0, 0));
  test_remove_tree(dir);
  free(dir);
}

/* Two processes build the same clusters into one folder at once: both run
 * right, one entry per cluster remains, and a third process loads them. */
static void test_two_processes_build_at_once(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  pid_t a = spawn(dir, -1, 0), b = spawn(dir, -1, 0);
  expect_child(a);
  expect_child(b);
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 2);
  expect_child(spawn(dir, 0, 0));
  test_remove_tree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_loads_compile_once),
      cmocka_unit_test(test_graphs_share_clusters),
      cmocka_unit_test(test_bounded),
      cmocka_unit_test(test_trace_outlives_eviction),
      cmocka_unit_test(test_warm_process_compiles_nothing),
      cmocka_unit_test(test_damaged_entry_is_rebuilt),
      cmocka_unit_test(test_two_processes_build_at_once),
  };
  return test_run_tests(tests);
}
