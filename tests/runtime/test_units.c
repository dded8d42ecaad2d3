/*
 * test_units.c — the one compilation cache: compiled units in memory
 * (units.c: keyed by structure, bounded, least recently used first) and the
 * JIT's disk cache under them. Kernels and graphs of one structure compile
 * once; a warm process compiles nothing, and builds nothing either: its
 * windows and graphs come from the folder by their keys, fused, and their
 * clusters' code by theirs, with nothing lowered or emitted; a damaged
 * entry is rebuilt, one of another key refused; two processes build the
 * same clusters and windows into one folder at once. What a context lets
 * go of goes: the code of evicted units, old tunables memos.
 */
#include "support.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include "host/jit.h"
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
 * called: the first compiles its two clusters as one code object (one
 * compiler run), the second compiles nothing. */
static void test_graphs_share_clusters(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkProgram *a = driver_program(ctx, "first");
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  TpkProgram *b = driver_program(ctx, "second");
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  TpkLaunchResult r;
  assert_true(run_graph(ctx, a, 3, 5, &r));
  assert_true(run_graph(ctx, b, 7, 2, &r));
  assert_string_equal(tpk_program_kernel_name(b, 0), "second");
  tpk_program_destroy(a);
  tpk_program_destroy(b);
  tpk_context_destroy(ctx);
}

/* A context that keeps two units (tcc), with the scale kernel loaded. */
static TpkContext *scale_in_two_units(TpkDevice **host, TpkProgram **p, TpkKernel **k) {
  setenv("TPK_TIER", "tcc", 1);
  setenv("TPK_CACHE_UNITS", "2", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  unsetenv("TPK_CACHE_UNITS");
  assert_int_equal(tpk_device_open(ctx, "host", host), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "scale.tpk", SCALE, strlen(SCALE), p), TPK_OK);
  assert_int_equal(tpk_program_kernel(*p, "scale", k), TPK_OK);
  return ctx;
}

/* TPK_CACHE_UNITS bounds what a context keeps: launches at more sizes than
 * it holds evict the oldest, which a later launch builds again. */
static void test_bounded(void **state) {
  (void)state;
  TpkDevice *host;
  TpkProgram *p;
  TpkKernel *k;
  TpkContext *ctx = scale_in_two_units(&host, &p, &k);
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

/* The JIT's codes not freed yet. */
static int live_codes(TpkContext *ctx) { return tpk_jit_stats(tpk_context_jit(ctx)).live_codes; }

static void launch_scale(TpkKernel *k, TpkDevice *dev, int64_t n, float a) {
  TpkBuffer *x, *y;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &y), TPK_OK);
  float *xv = tpk_buffer_data(x);
  for (int i = 0; i < n; i++) xv[i] = (float)i;
  TpkLaunch L = {.args = (TpkBuffer *[]){x, NULL, y}, .scalars = (double[]){0, a, 0}};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  const float *yv = tpk_buffer_data(y);
  for (int i = 0; i < n; i++) assert_true(yv[i] == a * (float)i);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
}

/* An evicted unit's code goes with it: launches at more sizes than the
 * cache keeps hold as many codes as it keeps units, not one per size. */
static void test_eviction_frees_code(void **state) {
  (void)state;
  TpkDevice *host;
  TpkProgram *p;
  TpkKernel *k;
  TpkContext *ctx = scale_in_two_units(&host, &p, &k);
  for (int64_t n = 10; n < 30; n++) {
    launch_scale(k, host, n, 3);
    assert_true(live_codes(ctx) <= 2);
  }
  assert_int_equal(tpk_context_compiler_runs(ctx), 20);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* Windows of ever new structures in a context that keeps few units: the
 * code it holds stays bounded (their programs go with their units). */
static void test_many_windows_hold_bounded_code(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  setenv("TPK_CACHE_UNITS", "4", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  unsetenv("TPK_CACHE_UNITS");
  assert_int_equal(tpk_context_set_eager_mode(ctx, TPK_EAGER_FUSED), TPK_OK);
  TpkDevice *host;
  TpkStream *s;
  TpkBuffer *x;
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_stream_create(host, &s), TPK_OK);
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){8, 5}, &x), TPK_OK);
  int most = 0;
  for (int len = 1; len <= 24; len++) { /* a chain of len ops: a new window each time */
    TpkBuffer *v = x, *next;
    int n;
    for (int i = 0; i < len; i++) {
      assert_int_equal(tpk_stream_op(s, i % 2 ? "neg" : "exp", (TpkArg[]){tpk_arg_buffer(v)}, 1, &next, 1, &n), TPK_OK);
      if (v != x) tpk_buffer_destroy(v);
      v = next;
    }
    assert_int_equal(tpk_stream_sync(s), TPK_OK);
    tpk_buffer_destroy(v);
    if (live_codes(ctx) > most) most = live_codes(ctx);
  }
  TpkStreamStats st;
  tpk_stream_stats(s, &st);
  assert_int_equal(st.compiles, 24);
  assert_true(most <= 4);
  tpk_buffer_destroy(x);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
}

typedef struct Launcher {
  TpkKernel *k;
  TpkDevice *dev;
  int64_t first, count; /* sizes first, first + 1, ... */
} Launcher;

static void *launch_sizes(void *arg) {
  Launcher *l = arg;
  for (int64_t n = l->first; n < l->first + l->count; n++) launch_scale(l->k, l->dev, n % 7 + 3 * (n % 2) + 9, 2);
  return NULL;
}

/* Launches on two threads at sizes that evict each other's units while
 * they run, and a queue of them: every launch runs on code that is still
 * there (ASan and TSan watch this one). */
static void test_launches_outlive_eviction(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  setenv("TPK_CACHE_UNITS", "1", 1);
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
  Launcher a = {k, host, 0, 40}, b = {k, host, 3, 40};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, launch_sizes, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, launch_sizes, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  TpkQueue *q;
  assert_int_equal(tpk_queue_create(ctx, &q), TPK_OK);
  TpkBuffer *x[12], *y[12];
  for (int i = 0; i < 12; i++) {
    int64_t n = 5 + i;
    assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &x[i]), TPK_OK);
    assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &y[i]), TPK_OK);
    float *xv = tpk_buffer_data(x[i]);
    for (int e = 0; e < n; e++) xv[e] = (float)e;
    TpkLaunch L = {.args = (TpkBuffer *[]){x[i], NULL, y[i]}, .scalars = (double[]){0, 4, 0}};
    assert_int_equal(tpk_queue_launch(q, k, &L), TPK_OK);
  }
  assert_int_equal(tpk_queue_wait(q), TPK_OK);
  for (int i = 0; i < 12; i++) {
    const float *yv = tpk_buffer_data(y[i]);
    for (int e = 0; e < 5 + i; e++) assert_true(yv[e] == 4.0f * (float)e);
    tpk_buffer_destroy(x[i]);
    tpk_buffer_destroy(y[i]);
  }
  assert_true(live_codes(ctx) <= 1);
  tpk_queue_destroy(q);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* The tunables chosen per launch size are remembered for the most recent
 * sizes only: launches at ever new sizes hold a bounded number. */
static void test_tune_memos_are_bounded(void **state) {
  (void)state;
  static const char *TUNED =
      "kernel twice(x: f32[N]) -> (y: f32[N])\n"
      "  tune B in [16, 32]\n"
      "{\n"
      "  for i in tiles(N, B) { y[i] = x[i] * 2.0; }\n"
      "}\n";
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkDevice *host;
  TpkProgram *p;
  TpkKernel *k;
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "twice.tpk", TUNED, strlen(TUNED), &p), TPK_OK);
  assert_int_equal(tpk_program_kernel(p, "twice", &k), TPK_OK);
  for (int64_t n = 1; n <= 100; n++) {
    TpkBuffer *x, *y;
    assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &x), TPK_OK);
    assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &y), TPK_OK);
    TpkLaunchResult r;
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = &r};
    assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
    assert_string_equal(r.tunes, "B=16");
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
  }
  assert_int_equal(tpk_kernel_tune_memos(k), 64);
  tpk_program_destroy(p);
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

/* What a process running the window and the graph below should see (-1:
 * anything). */
typedef struct Expect {
  int compiles;      /* compiler runs */
  int64_t emitted;   /* kernels lowered and emitted */
  int64_t loads;     /* windows and graphs from the folder */
  int rejected;      /* entries that did not authenticate */
  int64_t builds;    /* windows and graphs built (stream compiles + graph misses) */
} Expect;

static bool expect_count(const char *what, int64_t got, int64_t want) {
  if (want < 0 || got == want) return true;
  fprintf(stderr, "child: %s %lld, want %lld\n", what, (long long)got, (long long)want);
  return false;
}

/* The window: u = x*x + x and w = u's row sums, as a fused stream syncs it;
 * then the same as a graph (tpk_graph_compile), launched. Checks both. */
static bool run_window_and_graph(TpkContext *ctx, int64_t R, int64_t C, int64_t *builds) {
  TpkDevice *host;
  TpkStream *s;
  TpkBuffer *x, *t, *u, *w;
  int n;
  if (tpk_context_set_eager_mode(ctx, TPK_EAGER_FUSED) != TPK_OK || tpk_device_open(ctx, "host", &host) != TPK_OK ||
      tpk_stream_create(host, &s) != TPK_OK || tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){R, C}, &x) != TPK_OK)
    return false;
  float *xv = tpk_buffer_data(x);
  for (int64_t i = 0; i < R * C; i++) xv[i] = (float)(i % 5) - 2.0f;
  bool ok = tpk_stream_op(s, "mul", (TpkArg[]){tpk_arg_buffer(x), tpk_arg_buffer(x)}, 2, &t, 1, &n) == TPK_OK &&
            tpk_stream_op(s, "add", (TpkArg[]){tpk_arg_buffer(t), tpk_arg_buffer(x)}, 2, &u, 1, &n) == TPK_OK &&
            tpk_stream_op(s, "sum", (TpkArg[]){tpk_arg_buffer(u), tpk_arg_ints(1, (int64_t[]){1})}, 2, &w, 1, &n) == TPK_OK;
  if (ok) tpk_buffer_destroy(t);
  ok = ok && tpk_stream_sync(s) == TPK_OK;
  const float *uv = ok ? tpk_buffer_data(u) : NULL, *wv = ok ? tpk_buffer_data(w) : NULL;
  float sums[64];
  for (int64_t r = 0; ok && r < R && r < 64; r++) {
    float sum = 0;
    for (int64_t c = 0; c < C && ok; c++) {
      float v = xv[r * C + c];
      sum += v * v + v;
      if (uv[r * C + c] != v * v + v) {
        fprintf(stderr, "child: u[%lld] = %g, want %g\n", (long long)(r * C + c), uv[r * C + c], v * v + v);
        ok = false;
      }
    }
    if (ok && fabsf(wv[r] - sum) > 1e-4f * (1 + fabsf(sum))) {
      fprintf(stderr, "child: w[%lld] = %g, want %g\n", (long long)r, wv[r], sum);
      ok = false;
    }
    sums[r] = wv[r];
  }
  TpkStreamStats st;
  tpk_stream_stats(s, &st);
  *builds = st.compiles;
  if (ok) {
    tpk_buffer_destroy(u);
    tpk_buffer_destroy(w);
  }
  tpk_stream_destroy(s);
  /* the graph */
  TpkGraph *g;
  TpkProgram *p = NULL;
  TpkKernel *k;
  int gx, gt, gu, gw;
  ok = ok && tpk_graph_create(ctx, "squares", &g) == TPK_OK;
  ok = ok && tpk_graph_input(g, TPK_F32, 2, (const char *[]){"R", "C"}, &gx) == TPK_OK &&
       tpk_graph_op(g, "mul", (TpkArg[]){tpk_arg_value(gx), tpk_arg_value(gx)}, 2, &gt, 1, &n) == TPK_OK &&
       tpk_graph_op(g, "add", (TpkArg[]){tpk_arg_value(gt), tpk_arg_value(gx)}, 2, &gu, 1, &n) == TPK_OK &&
       tpk_graph_op(g, "sum", (TpkArg[]){tpk_arg_value(gu), tpk_arg_ints(1, (int64_t[]){1})}, 2, &gw, 1, &n) == TPK_OK &&
       tpk_graph_output(g, gw) == TPK_OK && tpk_graph_compile(g, &p) == TPK_OK &&
       tpk_program_kernel(p, "squares", &k) == TPK_OK;
  TpkBuffer *gy = NULL;
  ok = ok && tpk_buffer_create(host, TPK_F32, 1, &R, &gy) == TPK_OK;
  TpkLaunch L = {.args = (TpkBuffer *[]){x, gy}};
  ok = ok && tpk_kernel_launch(k, &L) == TPK_OK;
  for (int64_t r = 0; ok && r < R; r++)
    if (((const float *)tpk_buffer_data(gy))[r] != sums[r]) {
      fprintf(stderr, "child: the graph's y[%lld] = %g, want %g\n", (long long)r, ((const float *)tpk_buffer_data(gy))[r], sums[r]);
      ok = false;
    }
  TpkCacheStats cs;
  ok = ok && tpk_cache_stats(ctx, &cs) == TPK_OK;
  if (ok) *builds += cs.unit_misses[TPK_UNIT_GRAPH];
  if (!ok) fprintf(stderr, "child: %s\n", tpk_last_error());
  tpk_buffer_destroy(gy);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_buffer_destroy(x);
  return ok;
}

static void child_runs_window(const char *dir, const char *key_file, Expect want) {
  setenv("TPK_CACHE_DIR", dir, 1);
  setenv("TPK_TIER", "cc", 1);
  if (key_file) setenv("TPK_CACHE_KEY_FILE", key_file, 1);
  TpkContext *ctx;
  if (tpk_context_create(&ctx) != TPK_OK) _exit(1);
  int64_t builds = 0;
  bool ok = run_window_and_graph(ctx, 6, 7, &builds);
  TpkCacheStats s;
  ok = ok && tpk_cache_stats(ctx, &s) == TPK_OK;
  ok = ok && expect_count("compiler runs", tpk_context_compiler_runs(ctx), want.compiles) &&
       expect_count("kernels emitted", s.emitted, want.emitted) &&
       expect_count("units loaded", s.unit_loads[TPK_UNIT_EAGER] + s.unit_loads[TPK_UNIT_GRAPH], want.loads) &&
       expect_count("entries rejected", s.rejected, want.rejected) && expect_count("windows and graphs built", builds, want.builds);
  /* a warm process found every cluster's code by its key */
  ok = ok && (want.emitted != 0 || expect_count("code loaded by key", s.unit_loads[TPK_UNIT_KERNEL], s.hits));
  /* ... and its launch sizes' facts: nothing bound or lowered for them */
  ok = ok && (want.emitted != 0 || expect_count("kernels lowered for their sizes", s.lowered, 0));
  tpk_context_destroy(ctx);
  _exit(ok ? 0 : 1);
}

static pid_t spawn_window(const char *dir, const char *key_file, Expect want) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_runs_window(dir, key_file, want);
  return pid;
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

/* The entries of the cache folder whose names end in `suffix` (".so":
 * code, ".unit": windows and graphs). */
static int entries_of(const char *dir, const char *suffix, char names[][512], int max) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  size_t ls = strlen(suffix);
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > ls && strcmp(e->d_name + len - ls, suffix) == 0 && n < max) snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return n;
}

static int entries(const char *dir, char names[][512], int max) { return entries_of(dir, ".so", names, max); }

/* The ".unit" entries whose first byte is one of `firsts`. */
static int units_starting(const char *dir, const char *firsts, char names[][512], int max) {
  char all[64][512];
  int n = entries_of(dir, ".unit", all, 64), kept = 0;
  for (int i = 0; i < n; i++) {
    FILE *f = fopen(all[i], "rb");
    assert_non_null(f);
    int first = fgetc(f);
    fclose(f);
    if (first > 0 && strchr(firsts, first) && kept < max) memcpy(names[kept++], all[i], sizeof all[i]);
  }
  return kept;
}

/* The ".unit" entries that hold a window ('P': its fused IR, 'R': its
 * resolution) or a graph ('t': "tpk graph"); the others hold the facts of
 * a kernel's sizes (a number), of a graph's launch at its sizes ('G') or
 * a window's ops' memo entries ('M'). */
static int programs_kept(const char *dir, char names[][512], int max) { return units_starting(dir, "PRt", names, max); }
static int memos_kept(const char *dir, char names[][512], int max) { return units_starting(dir, "M", names, max); }

/* A process builds the graph's two clusters with cc into the folder, as
 * one code object (one compiler run, one entry: a warm process reads and
 * loads one file for the graph); a second process loads it: no compiler
 * runs, the code is the cache's. */
static void test_warm_process_compiles_nothing(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn(dir, 1, 0));
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 1);
  expect_child(spawn(dir, 0, 0));
  test_remove_tree(dir);
  free(dir);
}

/* A damaged entry does not load: it is compiled again and replaced, and
 * the next process compiles nothing. */
static void test_damaged_entry_is_rebuilt(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn(dir, 1, 0));
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 1);
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
 * right, one entry for the graph's clusters remains, and a third process
 * loads it. */
static void test_two_processes_build_at_once(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  pid_t a = spawn(dir, -1, 0), b = spawn(dir, -1, 0);
  expect_child(a);
  expect_child(b);
  char names[8][512];
  assert_int_equal(entries(dir, names, 8), 1);
  expect_child(spawn(dir, 0, 0));
  test_remove_tree(dir);
  free(dir);
}

/* A process runs the window and the graph, building both and compiling
 * their clusters into the folder; a second finds everything there: the
 * window and the graph by their keys (nothing built or fused), their
 * clusters' code by theirs (nothing lowered, emitted or compiled). */
static void test_warm_process_builds_nothing(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = -1, .emitted = -1, .loads = 0, .rejected = 0, .builds = 2}));
  char names[16][512];
  assert_int_equal(programs_kept(dir, names, 16), 2); /* the window, the graph */
  assert_true(entries(dir, names, 16) >= 1);
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 0, .builds = 0}));
  test_remove_tree(dir);
  free(dir);
}

/* A damaged window or graph entry is not loaded: it is built again (its
 * clusters' code still comes from the folder) and replaced. */
static void test_damaged_unit_is_rebuilt(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = -1, .emitted = -1, .loads = 0, .rejected = 0, .builds = 2}));
  char names[16][512];
  assert_int_equal(programs_kept(dir, names, 16), 2);
  for (int i = 0; i < 2; i++) {
    int fd = open(names[i], O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 0), 1);
    close(fd);
  }
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 0, .rejected = 2, .builds = 2}));
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 0, .builds = 0}));
  test_remove_tree(dir);
  free(dir);
}

/* Entries made under another key (planted by whoever can write the
 * folder but has not our key) are refused, units and code alike:
 * everything is built and compiled again. */
static void test_entries_of_another_key_are_refused(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  char *keys = test_temp_dir("tpk-test-keys");
  char other[512];
  snprintf(other, sizeof other, "%s/other.key", keys);
  int fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
  close(fd);
  expect_child(spawn_window(dir, other, (Expect){.compiles = -1, .emitted = -1, .loads = 0, .rejected = 0, .builds = 2}));
  char names[16][512];
  int ncode = entries(dir, names, 16);
  assert_true(ncode >= 1);
  char units[64][512];
  int nmemos = memos_kept(dir, units, 64);
  int nfacts = entries_of(dir, ".unit", units, 64) - programs_kept(dir, names, 16) - nmemos;
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = ncode, .emitted = ncode, .loads = 0,
                                                .rejected = 2 + nmemos + ncode + nfacts, .builds = 2}));
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 0, .builds = 0}));
  test_remove_tree(dir);
  test_remove_tree(keys);
  free(dir);
  free(keys);
}

/* A compiled graph's launch keeps its calls' facts at its sizes as one
 * entry ('G') beside each kernel's: a warm process reads that one entry,
 * not one per kernel, and lowers nothing. A damaged or cut entry is
 * refused (the kernels' own entries serve) and replaced. */
static void test_warm_launch_reads_its_facts_at_once(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = -1, .emitted = -1, .loads = 0, .rejected = 0, .builds = 2}));
  char graphs[16][512], kernels[64][512];
  assert_int_equal(units_starting(dir, "G", graphs, 16), 2); /* the window's launch, the graph's */
  int nkernels = units_starting(dir, "-0123456789", kernels, 64);
  assert_true(nkernels >= 2);
  int fd = open(graphs[0], O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, "\x01", 1, 20), 1); /* the first fact's key length */
  close(fd);
  struct stat st;
  assert_int_equal(stat(graphs[1], &st), 0);
  assert_int_equal(truncate(graphs[1], st.st_size / 2), 0);
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 2, .builds = 0}));
  for (int i = 0; i < nkernels; i++) assert_int_equal(unlink(kernels[i]), 0);
  /* the facts now only in the graphs' entries, made again */
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 0, .builds = 0}));
  test_remove_tree(dir);
  free(dir);
}

/* Two processes build the window and the graph into one folder at once:
 * one entry each remains, and a third process builds nothing. */
static void test_two_processes_build_windows_at_once(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  Expect any = {.compiles = -1, .emitted = -1, .loads = -1, .rejected = 0, .builds = -1};
  pid_t a = spawn_window(dir, NULL, any), b = spawn_window(dir, NULL, any);
  expect_child(a);
  expect_child(b);
  char names[16][512];
  assert_int_equal(programs_kept(dir, names, 16), 2);
  expect_child(spawn_window(dir, NULL, (Expect){.compiles = 0, .emitted = 0, .loads = 2, .rejected = 0, .builds = 0}));
  test_remove_tree(dir);
  free(dir);
}

/* A context of the folder dir, compiling with cc (TPK_TIER=cc). */
static TpkContext *cc_context(const char *dir) {
  setenv("TPK_CACHE_DIR", dir, 1);
  setenv("TPK_TIER", "cc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_CACHE_DIR");
  unsetenv("TPK_TIER");
  return ctx;
}

/* The units a context of the folder dir holds after the window and the
 * graph (their results checked), and the entries it found that did not
 * authenticate. */
static int64_t units_after_window(const char *dir, int *rejected) {
  TpkContext *ctx = cc_context(dir);
  int64_t builds;
  assert_true(run_window_and_graph(ctx, 6, 7, &builds));
  TpkCacheStats s;
  stats(ctx, &s);
  tpk_context_destroy(ctx);
  *rejected = s.rejected;
  return s.units;
}

/* A fused window whose ops the folder did not have keeps their memo
 * entries there, under its first op's signature: a later context (a new
 * process's first step) takes the window's ops from them and builds none
 * of them alone (3 ops: no layout, no graph of an op among its units). A
 * damaged entry is refused: the ops are built again, with the same
 * results, and the entry replaced. */
static void test_warm_stream_builds_no_op_alone(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  int rejected;
  int64_t cold = units_after_window(dir, &rejected);
  char names[16][512];
  assert_int_equal(memos_kept(dir, names, 16), 1);
  int64_t warm = units_after_window(dir, &rejected);
  assert_int_equal(rejected, 0);
  assert_true(warm + 6 <= cold);
  int fd = open(names[0], O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, "\x01", 1, 20), 1);
  close(fd);
  assert_int_equal(units_after_window(dir, &rejected), cold);
  assert_int_equal(rejected, 1);
  assert_int_equal(units_after_window(dir, &rejected), warm);
  assert_int_equal(rejected, 0);
  test_remove_tree(dir);
  free(dir);
}

/* A context of the folder dir (TPK_TIER=cc) with a fused stream on the host. */
static TpkContext *fused_context(const char *dir, TpkDevice **host, TpkStream **s) {
  TpkContext *ctx = cc_context(dir);
  assert_int_equal(tpk_context_set_eager_mode(ctx, TPK_EAGER_FUSED), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", host), TPK_OK);
  assert_int_equal(tpk_stream_create(*host, s), TPK_OK);
  return ctx;
}

/* One step of a loop: y = sum(x * x + x, 1) as one window, checked. */
static void loop_step(TpkDevice *host, TpkStream *s) {
  enum { R = 6, C = 7 };
  TpkBuffer *x, *t, *u, *y;
  int n;
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){R, C}, &x), TPK_OK);
  float *xv = tpk_buffer_data(x);
  for (int i = 0; i < R * C; i++) xv[i] = (float)(i % 5) - 2.0f;
  assert_int_equal(tpk_stream_op(s, "mul", (TpkArg[]){tpk_arg_buffer(x), tpk_arg_buffer(x)}, 2, &t, 1, &n), TPK_OK);
  assert_int_equal(tpk_stream_op(s, "add", (TpkArg[]){tpk_arg_buffer(t), tpk_arg_buffer(x)}, 2, &u, 1, &n), TPK_OK);
  assert_int_equal(tpk_stream_op(s, "sum", (TpkArg[]){tpk_arg_buffer(u), tpk_arg_ints(1, (int64_t[]){1})}, 2, &y, 1, &n), TPK_OK);
  tpk_buffer_destroy(t);
  tpk_buffer_destroy(u);
  float yv[R];
  assert_int_equal(tpk_buffer_read(y, yv, sizeof yv), TPK_OK);
  for (int r = 0; r < R; r++) {
    float want = 0;
    for (int c = 0; c < C; c++) want += xv[r * C + c] * xv[r * C + c] + xv[r * C + c];
    assert_float_equal(yv[r], want, 1e-4);
  }
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
}

/* The eager units the context has loaded from its folder. */
static int64_t eager_loads(TpkContext *ctx) {
  TpkCacheStats st;
  stats(ctx, &st);
  return st.unit_loads[TPK_UNIT_EAGER];
}

/* A fused stream whose window comes round again (a loop's second step)
 * keeps a warm start in the folder ('W': its windows' keys, its scratch
 * and arenas). A later context's first fused stream on the device loads
 * those windows with no op submitted (its eager loads rise while it
 * idles), so its first window is a hit in memory, loading nothing more. A
 * damaged warm start is refused and the window is loaded at its lookup,
 * as without one; one that names windows the folder no longer has loads
 * nothing, and the window is built. */
static void test_warm_start_loads_windows_ahead(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  TpkDevice *host;
  TpkStream *s;
  TpkContext *ctx = fused_context(dir, &host, &s);
  loop_step(host, s);
  char names[16][512];
  assert_int_equal(units_starting(dir, "W", names, 16), 0);
  loop_step(host, s);
  assert_int_equal(units_starting(dir, "W", names, 16), 1);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);

  ctx = fused_context(dir, &host, &s);
  int64_t loads = 0;
  for (int i = 0; i < 5000 && (loads = eager_loads(ctx)) == 0; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  assert_true(loads >= 1);
  TpkStreamStats st;
  loop_step(host, s);
  tpk_stream_stats(s, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.cache_hits, 1);
  assert_int_equal(eager_loads(ctx), loads);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);

  int fd = open(names[0], O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, "\x01", 1, 12), 1);
  close(fd);
  ctx = fused_context(dir, &host, &s);
  loop_step(host, s);
  TpkCacheStats cs;
  stats(ctx, &cs);
  assert_int_equal(cs.rejected, 1);
  tpk_stream_stats(s, &st);
  assert_int_equal(st.compiles, 0);
  assert_true(cs.unit_loads[TPK_UNIT_EAGER] >= 1); /* at the window's lookup */
  loop_step(host, s); /* comes round: the warm start is kept again */
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);

  char programs[16][512];
  int nprograms = programs_kept(dir, programs, 16);
  assert_true(nprograms >= 1);
  for (int i = 0; i < nprograms; i++) assert_int_equal(unlink(programs[i]), 0);
  ctx = fused_context(dir, &host, &s);
  loop_step(host, s);
  stats(ctx, &cs);
  assert_int_equal(cs.rejected, 0);
  tpk_stream_stats(s, &st);
  assert_int_equal(st.compiles, 1);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
  test_remove_tree(dir);
  free(dir);
}

static void log_to(void *user, const char *text) { tpk_str_puts(user, text); }

/* The graph compiled in a context of the folder dir (TPK_TIER=cc), its
 * log in *log when dumps is set; returns how many graphs it loaded. */
static int64_t graph_loads(const char *dir, bool dumps, TpkStr *log) {
  if (dumps) setenv("TPK_DUMP_IR", "1", 1);
  TpkContext *ctx = cc_context(dir);
  unsetenv("TPK_DUMP_IR");
  tpk_context_set_log(ctx, log_to, log);
  TpkGraph *g;
  TpkProgram *p;
  int x, y, n;
  assert_int_equal(tpk_graph_create(ctx, "logged", &g), TPK_OK);
  assert_int_equal(tpk_graph_input(g, TPK_F32, 1, (const char *[]){"N"}, &x), TPK_OK);
  assert_int_equal(tpk_graph_op(g, "exp", (TpkArg[]){tpk_arg_value(x)}, 1, &y, 1, &n), TPK_OK);
  assert_int_equal(tpk_graph_output(g, y), TPK_OK);
  assert_int_equal(tpk_graph_compile(g, &p), TPK_OK);
  TpkCacheStats s;
  stats(ctx, &s);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_context_destroy(ctx);
  return s.unit_loads[TPK_UNIT_GRAPH];
}

/* TPK_DUMP_IR=1 logs every graph before and after fusion, so a context
 * that dumps compiles a graph the folder has instead of loading it. */
static void test_dumps_compile_what_the_folder_has(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-units");
  TpkStr log = {0};
  assert_int_equal(graph_loads(dir, false, &log), 0);
  assert_int_equal(graph_loads(dir, true, &log), 0);
  assert_non_null(log.data);
  assert_contains(log.data, "// graph, before fusion\n");
  assert_contains(log.data, "// graph, fused: the driver and its clusters\n");
  assert_int_equal(graph_loads(dir, false, &log), 1);
  tpk_str_free(&log);
  test_remove_tree(dir);
  free(dir);
}

/* A compiled graph as its cache folder's entry (compile.c, "tpk graph2")
 * and back, in a context of its own without a folder: its kernels are
 * their headers only, so compiling their code parses their bodies from
 * the entry's whole text, and the program computes what the graph does. */
static TpkProgram *restored(const TpkStr *entry, size_t len, TpkContext **ctx) {
  setenv("TPK_CACHE_DIR", "", 1);
  setenv("TPK_TIER", "tcc", 1);
  assert_int_equal(tpk_context_create(ctx), TPK_OK);
  unsetenv("TPK_CACHE_DIR");
  unsetenv("TPK_TIER");
  return tpk_program_restore(*ctx, entry->data, len);
}

/* The entry of driver_program's graph "kept", saved from a context that is gone. */
static TpkStr kept_entry(void) {
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  TpkProgram *p = driver_program(ctx, "kept");
  TpkStr entry = {0};
  assert_true(tpk_program_save(p, &entry));
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
  return entry;
}

static void test_kept_graph_restores(void **state) {
  (void)state;
  TpkContext *again;
  TpkStr entry = kept_entry();
  assert_true(strncmp(entry.data, "tpk graph2 2 2 ", 15) == 0); /* the driver is func 2, after its two kernels */
  TpkProgram *q = restored(&entry, entry.len, &again);
  assert_non_null(q);
  TpkLaunchResult r;
  assert_true(run_graph(again, q, 5, 9, &r));
  assert_int_equal(tpk_context_compiler_runs(again), 1); /* its two kernels' bodies parsed, compiled as one code */
  tpk_program_destroy(q);
  tpk_context_destroy(again);
  tpk_str_free(&entry);
}

/* An entry cut anywhere, or whose kernel lines do not fit its module,
 * makes no program (the window or graph is built again); one whose
 * kernel's hash is not its body's makes none either, once the body must
 * be bound: no code is ever made from a body under another body's key. */
static void test_damaged_kept_graph_is_refused(void **state) {
  (void)state;
  TpkContext *again;
  TpkStr entry = kept_entry();
  for (size_t cut = 0; cut < entry.len; cut += cut < 200 ? 1 : 97) {
    TpkProgram *q = restored(&entry, cut, &again);
    if (q) fail_msg("an entry cut at %zu of %zu bytes made a program", cut, entry.len);
    tpk_context_destroy(again);
  }
  char *line = strchr(entry.data, '\n') + 1; /* the first kernel's: "0 <lo> <hi>" */
  assert_true(line[0] == '0' && line[1] == ' ');
  const struct {
    size_t at;
    char to;
  } damages[] = {{0, '2'} /* the driver listed as a kernel */, {0, '1'} /* one kernel twice */, {2, line[2] == 'a' ? 'b' : 'a'} /* its hash */};
  for (size_t d = 0; d < TPK_ARRAY_LEN(damages); d++) {
    char was = line[damages[d].at];
    line[damages[d].at] = damages[d].to;
    TpkProgram *q = restored(&entry, entry.len, &again);
    if (q) fail_msg("damage %zu made a program", d);
    assert_int_equal(tpk_context_compiler_runs(again), 0);
    tpk_context_destroy(again);
    line[damages[d].at] = was;
  }
  TpkProgram *q = restored(&entry, entry.len, &again); /* undamaged */
  assert_non_null(q);
  tpk_program_destroy(q);
  tpk_context_destroy(again);
  tpk_str_free(&entry);
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
      cmocka_unit_test(test_eviction_frees_code),
      cmocka_unit_test(test_many_windows_hold_bounded_code),
      cmocka_unit_test(test_launches_outlive_eviction),
      cmocka_unit_test(test_tune_memos_are_bounded),
      cmocka_unit_test(test_warm_process_builds_nothing),
      cmocka_unit_test(test_damaged_unit_is_rebuilt),
      cmocka_unit_test(test_entries_of_another_key_are_refused),
      cmocka_unit_test(test_warm_launch_reads_its_facts_at_once),
      cmocka_unit_test(test_two_processes_build_windows_at_once),
      cmocka_unit_test(test_warm_stream_builds_no_op_alone),
      cmocka_unit_test(test_warm_start_loads_windows_ahead),
      cmocka_unit_test(test_dumps_compile_what_the_folder_has),
      cmocka_unit_test(test_kept_graph_restores),
      cmocka_unit_test(test_damaged_kept_graph_is_refused),
  };
  return test_run_tests(tests);
}
