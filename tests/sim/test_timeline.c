/*
 * test_timeline.c — sim/timeline.c: scheduling of in-order units with lanes
 * and dependencies (serial chains, overlap, double-buffered pipelines, DMA
 * lanes, in-order blocking, barriers), utilisation, the Chrome trace (valid
 * JSON checked by Python's parser, escaping, capping), 10^6 tasks in bounded
 * time and memory, and the error state on bad input and failed allocations.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/timeline.h"

static char dir[64];
static char path_buf[160];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tpk_timeline_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  static const char *files[] = {"t.json", "check.py", "capped.json", "all.json", "victim.json", "link.json"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(files); i++) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, files[i]);
    remove(path_buf);
  }
  rmdir(dir);
  return 0;
}

static const char *tmp(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static TpkTimeline *new_timeline(void) {
  TpkTimeline *tl = NULL;
  assert_int_equal(tpk_timeline_create(&tl), TPK_OK);
  assert_non_null(tl);
  return tl;
}

static void assert_ok(const TpkTimeline *tl) {
  TpkError err;
  TpkStatus st = tpk_timeline_error(tl, &err);
  if (st != TPK_OK) fail_msg("timeline failed: %s", err.message);
}

/* A task with at most one dependency, the common case in these tests. */
static TpkTaskId add1(TpkTimeline *tl, int unit, double cycles, TpkTaskId dep, const char *label) {
  return tpk_timeline_add(tl, unit, cycles, &dep, 1, label, NULL);
}

/* ---- Scheduling ------------------------------------------------------------ */

static void test_serial_chain(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int vpu = tpk_timeline_add_unit(tl, "vpu", 1);
  assert_int_equal(vpu, 0);
  static const double d[] = {10, 0, 25.5, 7, 100};
  TpkTaskId prev = TPK_TASK_NONE;
  double sum = 0;
  for (size_t i = 0; i < TPK_ARRAY_LEN(d); i++) {
    TpkTaskId id = add1(tl, vpu, d[i], prev, "op");
    assert_int_equal(id, (TpkTaskId)i);
    assert_true(tpk_timeline_task_start(tl, id) == sum);
    sum += d[i];
    assert_true(tpk_timeline_task_end(tl, id) == sum);
    prev = id;
  }
  /* No dependencies at all: one lane alone serialises them. */
  int mxu = tpk_timeline_add_unit(tl, "mxu", 1);
  double t0 = tpk_timeline_makespan(tl);
  for (int i = 0; i < 3; i++) tpk_timeline_add(tl, mxu, 5, NULL, 0, "dot", NULL);
  assert_ok(tl);
  assert_true(tpk_timeline_makespan(tl) == sum);
  assert_true(t0 == sum);
  assert_true(tpk_timeline_task_end(tl, tpk_timeline_task_count(tl) - 1) == 15);
  assert_int_equal(tpk_timeline_task_count(tl), 8);
  assert_int_equal(tpk_timeline_unit_tasks(tl, vpu), 5);
  tpk_timeline_destroy(tl);
}

static void test_independent_units_overlap(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int a = tpk_timeline_add_unit(tl, "vpu", 1), b = tpk_timeline_add_unit(tl, "mxu0", 1);
  TpkTaskId x = tpk_timeline_add(tl, a, 30, NULL, 0, "x", NULL);
  TpkTaskId y = tpk_timeline_add(tl, b, 50, NULL, 0, "y", NULL);
  assert_ok(tl);
  assert_true(tpk_timeline_task_start(tl, x) == 0 && tpk_timeline_task_start(tl, y) == 0);
  assert_true(tpk_timeline_makespan(tl) == 50);
  /* A task after both starts at the later end. */
  TpkTaskId deps[] = {x, y};
  TpkTaskId z = tpk_timeline_add(tl, a, 5, deps, 2, "z", NULL);
  assert_true(tpk_timeline_task_start(tl, z) == 50);
  assert_true(tpk_timeline_makespan(tl) == 55);
  tpk_timeline_destroy(tl);
}

/* N steps of a double-buffered pipeline: the DMA of step k+1 is issued before
 * the compute of step k; compute k needs DMA k; DMA k+1 overwrites the buffer
 * compute k-1 read, so it waits for it. Returns the makespan. */
static double pipeline(TpkTimeline *tl, int n, double dma_cycles, double compute_cycles, TpkTaskId *dma,
                       TpkTaskId *compute) {
  int d = tpk_timeline_add_unit(tl, "dma", 1), m = tpk_timeline_add_unit(tl, "mxu0", 1);
  dma[0] = add1(tl, d, dma_cycles, TPK_TASK_NONE, "dma");
  for (int k = 0; k < n; k++) {
    if (k + 1 < n) dma[k + 1] = add1(tl, d, dma_cycles, k >= 1 ? compute[k - 1] : TPK_TASK_NONE, "dma");
    compute[k] = add1(tl, m, compute_cycles, dma[k], "dot");
  }
  assert_ok(tl);
  return tpk_timeline_makespan(tl);
}

static void test_pipeline_small(void **state) {
  (void)state;
  TpkTaskId dma[4], comp[4];
  /* Memory-bound: DMA 10, compute 6. */
  TpkTimeline *tl = new_timeline();
  assert_true(pipeline(tl, 4, 10, 6, dma, comp) == 46); /* 10 + 3*10 + 6 */
  static const double dma_start[] = {0, 10, 20, 30}, comp_start[] = {10, 20, 30, 40};
  for (int k = 0; k < 4; k++) {
    assert_true(tpk_timeline_task_start(tl, dma[k]) == dma_start[k]);
    assert_true(tpk_timeline_task_start(tl, comp[k]) == comp_start[k]);
  }
  assert_true(tpk_timeline_unit_busy(tl, 0) == 40 && tpk_timeline_unit_busy(tl, 1) == 24);
  tpk_timeline_destroy(tl);

  /* Compute-bound: DMA 4, compute 10; DMA k+1 waits for compute k-1. */
  tl = new_timeline();
  assert_true(pipeline(tl, 4, 4, 10, dma, comp) == 44); /* 4 + 3*10 + 10 */
  static const double dma_start2[] = {0, 4, 14, 24}, comp_start2[] = {4, 14, 24, 34};
  for (int k = 0; k < 4; k++) {
    assert_true(tpk_timeline_task_start(tl, dma[k]) == dma_start2[k]);
    assert_true(tpk_timeline_task_start(tl, comp[k]) == comp_start2[k]);
  }
  tpk_timeline_destroy(tl);

  /* Without double buffering (each DMA waits for the previous compute) the
   * two never overlap: 4 * (10 + 6). */
  tl = new_timeline();
  int d = tpk_timeline_add_unit(tl, "dma", 1), m = tpk_timeline_add_unit(tl, "mxu0", 1);
  TpkTaskId prev = TPK_TASK_NONE;
  for (int k = 0; k < 4; k++) prev = add1(tl, m, 6, add1(tl, d, 10, prev, "dma"), "dot");
  assert_true(tpk_timeline_makespan(tl) == 64);
  tpk_timeline_destroy(tl);
}

static void test_pipeline_asymptotic(void **state) {
  (void)state;
  enum { N = 1000 };
  static TpkTaskId dma[N], comp[N];
  static const double cases[][2] = {{10, 6}, {4, 10}, {7, 7}, {3.5, 1.25}};
  for (size_t c = 0; c < TPK_ARRAY_LEN(cases); c++) {
    double dc = cases[c][0], cc = cases[c][1], mx = fmax(dc, cc);
    TpkTimeline *tl = new_timeline();
    double ms = pipeline(tl, N, dc, cc, dma, comp);
    assert_true(ms == dc + (N - 1) * mx + cc);
    /* per step, the slower of the two: the other is hidden */
    assert_true(fabs(ms / N - mx) / mx < 0.01);
    /* the slower unit is busy nearly all the time */
    int slow = dc >= cc ? 0 : 1;
    assert_true(tpk_timeline_unit_utilisation(tl, slow) > 0.99);
    tpk_timeline_destroy(tl);
  }
}

static void test_dma_lanes(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int dma = tpk_timeline_add_unit(tl, "dma", 4);
  assert_int_equal(tpk_timeline_unit_lanes(tl, dma), 4);
  TpkTaskId id[5];
  for (int i = 0; i < 5; i++) id[i] = tpk_timeline_add(tl, dma, 100, NULL, 0, "copy", "dma");
  assert_ok(tl);
  bool used[4] = {false};
  for (int i = 0; i < 4; i++) {
    TpkTimelineTaskInfo info;
    assert_true(tpk_timeline_task_info(tl, id[i], &info));
    assert_true(info.start == 0 && info.end == 100);
    assert_false(used[info.lane]);
    used[info.lane] = true;
  }
  assert_true(tpk_timeline_task_start(tl, id[4]) == 100);
  assert_true(tpk_timeline_makespan(tl) == 200);
  tpk_timeline_destroy(tl);

  /* The fifth goes to the lane that frees first. */
  tl = new_timeline();
  dma = tpk_timeline_add_unit(tl, "dma", 4);
  static const double d[] = {100, 40, 70, 90};
  for (int i = 0; i < 4; i++) tpk_timeline_add(tl, dma, d[i], NULL, 0, "copy", NULL);
  TpkTimelineTaskInfo first, fifth;
  tpk_timeline_task_info(tl, 1, &first);
  tpk_timeline_task_info(tl, tpk_timeline_add(tl, dma, 10, NULL, 0, "copy", NULL), &fifth);
  assert_true(fifth.start == 40 && fifth.end == 50);
  assert_int_equal(fifth.lane, first.lane);
  assert_true(tpk_timeline_unit_busy(tl, dma) == 310);
  assert_true(tpk_timeline_unit_utilisation(tl, dma) == 310.0 / (4 * 100));
  tpk_timeline_destroy(tl);
}

/* In-order issue: a task waiting for a late dependency holds back the
 * independent tasks submitted after it on the same unit, even with a lane
 * free — as an in-order core or a DMA queue does. */
static void test_in_order_blocking(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int mxu = tpk_timeline_add_unit(tl, "mxu0", 1), vpu = tpk_timeline_add_unit(tl, "vpu", 2);
  TpkTaskId late = tpk_timeline_add(tl, mxu, 100, NULL, 0, "dot", NULL);
  TpkTaskId b1 = add1(tl, vpu, 10, late, "exp");
  TpkTaskId b2 = tpk_timeline_add(tl, vpu, 10, NULL, 0, "add", NULL);
  assert_true(tpk_timeline_task_start(tl, b1) == 100);
  /* lane 1 was free at 0, but b2 is issued after b1 */
  assert_true(tpk_timeline_task_start(tl, b2) == 100);
  TpkTimelineTaskInfo i1, i2;
  tpk_timeline_task_info(tl, b1, &i1);
  tpk_timeline_task_info(tl, b2, &i2);
  assert_int_not_equal(i1.lane, i2.lane);
  /* Submitted first, the independent task runs at once. */
  TpkTimeline *tl2 = new_timeline();
  mxu = tpk_timeline_add_unit(tl2, "mxu0", 1), vpu = tpk_timeline_add_unit(tl2, "vpu", 1);
  late = tpk_timeline_add(tl2, mxu, 100, NULL, 0, "dot", NULL);
  b2 = tpk_timeline_add(tl2, vpu, 10, NULL, 0, "add", NULL);
  b1 = add1(tl2, vpu, 10, late, "exp");
  assert_true(tpk_timeline_task_start(tl2, b2) == 0 && tpk_timeline_task_start(tl2, b1) == 100);
  tpk_timeline_destroy(tl);
  tpk_timeline_destroy(tl2);
}

static void test_utilisation(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int mxu = tpk_timeline_add_unit(tl, "mxu0", 1), vpu = tpk_timeline_add_unit(tl, "vpu", 1),
      dma = tpk_timeline_add_unit(tl, "dma", 4), ici = tpk_timeline_add_unit(tl, "ici", 1);
  TpkTaskId c = tpk_timeline_add(tl, dma, 50, NULL, 0, "load", NULL);
  tpk_timeline_add(tl, dma, 50, NULL, 0, "load", NULL);
  TpkTaskId m = add1(tl, mxu, 150, c, "dot");
  add1(tl, vpu, 40, m, "relu");
  assert_ok(tl);
  assert_true(tpk_timeline_makespan(tl) == 240);
  assert_true(tpk_timeline_unit_busy(tl, mxu) == 150);
  assert_true(fabs(tpk_timeline_unit_utilisation(tl, mxu) - 150.0 / 240) < 1e-15);
  assert_true(fabs(tpk_timeline_unit_utilisation(tl, vpu) - 40.0 / 240) < 1e-15);
  assert_true(fabs(tpk_timeline_unit_utilisation(tl, dma) - 100.0 / (4 * 240)) < 1e-15);
  assert_true(tpk_timeline_unit_utilisation(tl, ici) == 0);
  assert_true(tpk_timeline_unit_utilisation(tl, 99) == 0);
  assert_int_equal(tpk_timeline_unit_count(tl), 4);
  assert_string_equal(tpk_timeline_unit_name(tl, dma), "dma");
  assert_null(tpk_timeline_unit_name(tl, 4));
  /* An empty timeline: makespan 0, utilisation 0 (no division by zero). */
  TpkTimeline *empty = new_timeline();
  tpk_timeline_add_unit(empty, "mxu0", 1);
  assert_true(tpk_timeline_makespan(empty) == 0 && tpk_timeline_unit_utilisation(empty, 0) == 0);
  tpk_timeline_destroy(empty);
  tpk_timeline_destroy(tl);
}

static void test_barrier(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int a = tpk_timeline_add_unit(tl, "vpu", 1), b = tpk_timeline_add_unit(tl, "mxu0", 1),
      c = tpk_timeline_add_unit(tl, "dma", 1);
  tpk_timeline_add(tl, a, 50, NULL, 0, "grid 0", NULL);
  tpk_timeline_add(tl, b, 80, NULL, 0, "grid 0", NULL);
  TpkTaskId bar = tpk_timeline_barrier(tl);
  assert_int_equal(bar, 2);
  assert_int_equal(tpk_timeline_task_count(tl), 3);
  assert_true(tpk_timeline_task_start(tl, bar) == 80 && tpk_timeline_task_end(tl, bar) == 80);
  TpkTimelineTaskInfo info;
  assert_true(tpk_timeline_task_info(tl, bar, &info));
  assert_int_equal(info.unit, -1);
  /* After the barrier: everything waits for the end of phase one... */
  TpkTaskId x = add1(tl, a, 10, bar, "grid 1");
  TpkTaskId y = add1(tl, c, 10, bar, "grid 1");
  assert_true(tpk_timeline_task_start(tl, x) == 80 && tpk_timeline_task_start(tl, y) == 80);
  /* ...a task not depending on it does not, */
  TpkTaskId z = tpk_timeline_add(tl, b, 5, NULL, 0, "free", NULL);
  assert_true(tpk_timeline_task_start(tl, z) == 80); /* (mxu0 was busy until 80 anyway) */
  TpkTaskId w = tpk_timeline_add(tl, tpk_timeline_add_unit(tl, "ici", 1), 5, NULL, 0, "free", NULL);
  assert_true(tpk_timeline_task_start(tl, w) == 0);
  /* and a barrier takes no unit time. */
  assert_true(tpk_timeline_unit_busy(tl, a) == 60);
  assert_int_equal(tpk_timeline_unit_tasks(tl, a), 2);
  /* A barrier of an empty timeline is at 0; two in a row are equal. */
  TpkTimeline *e = new_timeline();
  TpkTaskId b0 = tpk_timeline_barrier(e), b1 = tpk_timeline_barrier(e);
  assert_true(tpk_timeline_task_end(e, b0) == 0 && tpk_timeline_task_end(e, b1) == 0);
  tpk_timeline_destroy(e);
  assert_ok(tl);
  tpk_timeline_destroy(tl);
}

static void test_none_dependencies_and_queries(void **state) {
  (void)state;
  TpkTimeline *tl = new_timeline();
  int u = tpk_timeline_add_unit(tl, "scalar", 1);
  TpkTaskId deps[] = {TPK_TASK_NONE, TPK_TASK_NONE};
  TpkTaskId t = tpk_timeline_add(tl, u, 3, deps, 2, NULL, NULL);
  assert_int_equal(t, 0);
  TpkTimelineTaskInfo info;
  assert_true(tpk_timeline_task_info(tl, t, &info));
  assert_string_equal(info.label, "");
  assert_string_equal(info.category, "");
  assert_false(tpk_timeline_task_info(tl, 1, &info));
  assert_false(tpk_timeline_task_info(tl, -1, &info));
  assert_true(tpk_timeline_task_start(tl, 7) == -1 && tpk_timeline_task_end(tl, -3) == -1);
  /* Labels are copied and interned: the caller's buffer may change. */
  char buf[32];
  strcpy(buf, "dot 128x256x128");
  TpkTaskId a = tpk_timeline_add(tl, u, 1, NULL, 0, buf, "mxu");
  strcpy(buf, "something else");
  TpkTaskId b = tpk_timeline_add(tl, u, 1, NULL, 0, "dot 128x256x128", "mxu");
  TpkTimelineTaskInfo ia, ib;
  tpk_timeline_task_info(tl, a, &ia);
  tpk_timeline_task_info(tl, b, &ib);
  assert_string_equal(ia.label, "dot 128x256x128");
  assert_ptr_equal(ia.label, ib.label);
  assert_ptr_equal(ia.category, ib.category);
  assert_string_equal(ia.category, "mxu");
  assert_ok(tl);
  /* NULL timelines are failed timelines: no crash. */
  assert_int_equal(tpk_timeline_error(NULL, NULL), TPK_ERR_INVALID);
  assert_int_equal(tpk_timeline_add_unit(NULL, "x", 1), -1);
  assert_int_equal(tpk_timeline_add(NULL, 0, 1, NULL, 0, "x", NULL), TPK_TASK_NONE);
  assert_int_equal(tpk_timeline_barrier(NULL), TPK_TASK_NONE);
  assert_true(tpk_timeline_makespan(NULL) == 0);
  tpk_timeline_destroy(NULL);
  tpk_timeline_destroy(tl);
}

/* ---- Errors ---------------------------------------------------------------- */

typedef struct BadCall {
  const char *what; /* substring of the expected message */
  bool add_unit;    /* the call is add_unit(lanes), else add(unit, cycles, dep) */
  int unit, lanes;
  double cycles;
  TpkTaskId dep;
} BadCall;

static void test_bad_arguments(void **state) {
  (void)state;
  static const BadCall bad[] = {
      {"0 lanes", true, 0, 0, 0, 0},
      {"lanes (1 to", true, 0, 5000, 0, 0},
      {"does not exist", false, 3, 0, 1, TPK_TASK_NONE},
      {"does not exist", false, -1, 0, 1, TPK_TASK_NONE},
      {"lasts -1 cycles", false, 0, 0, -1, TPK_TASK_NONE},
      {"lasts nan cycles", false, 0, 0, NAN, TPK_TASK_NONE},
      {"lasts inf cycles", false, 0, 0, INFINITY, TPK_TASK_NONE},
      {"lasts 2e+18 cycles", false, 0, 0, 2e18, TPK_TASK_NONE},
      {"depends on task 1,", false, 0, 0, 1, 1},
      {"depends on task -2,", false, 0, 0, 1, -2},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(bad); i++) {
    TpkTimeline *tl = new_timeline();
    int u = tpk_timeline_add_unit(tl, "vpu", 1);
    TpkTaskId t0 = tpk_timeline_add(tl, u, 5, NULL, 0, "ok", NULL);
    assert_int_equal(t0, 0);
    if (bad[i].add_unit) assert_int_equal(tpk_timeline_add_unit(tl, "dma", bad[i].lanes), -1);
    else assert_int_equal(tpk_timeline_add(tl, bad[i].unit, bad[i].cycles, &bad[i].dep, 1, "bad", NULL),
                          TPK_TASK_NONE);
    TpkError err;
    assert_int_equal(tpk_timeline_error(tl, &err), TPK_ERR_INVALID);
    if (!strstr(err.message, bad[i].what)) fail_msg("case %zu: message \"%s\"", i, err.message);
    /* Sticky: later calls are no-ops, what exists can still be queried. */
    assert_int_equal(tpk_timeline_add(tl, u, 5, NULL, 0, "ok", NULL), TPK_TASK_NONE);
    assert_int_equal(tpk_timeline_barrier(tl), TPK_TASK_NONE);
    assert_int_equal(tpk_timeline_add_unit(tl, "mxu", 1), -1);
    assert_int_equal(tpk_timeline_task_count(tl), 1);
    assert_true(tpk_timeline_makespan(tl) == 5);
    TpkStr s = {0};
    assert_int_equal(tpk_timeline_trace_json(tl, 1e9, "x", &s), TPK_ERR_INVALID);
    assert_null(s.data);
    assert_int_equal(tpk_timeline_write_trace(tl, tmp("t.json"), 1e9, "x", &err), TPK_ERR_INVALID);
    assert_int_equal(access(tmp("t.json"), F_OK), -1); /* no file left behind */
    tpk_timeline_destroy(tl);
  }
  /* Unit names are required. */
  TpkTimeline *tl = new_timeline();
  assert_int_equal(tpk_timeline_add_unit(tl, "", 1), -1);
  assert_int_equal(tpk_timeline_error(tl, NULL), TPK_ERR_INVALID);
  tpk_timeline_destroy(tl);
}

/* Build a timeline of n tasks (distinct labels, several units and lanes,
 * barriers) under an allocation budget; return its status. Whatever the
 * budget, nothing crashes or leaks (ASan), and a failure is NOMEM, sticky. */
static TpkStatus build_with_budget(int64_t budget, int n) {
  TpkTimeline *tl = new_timeline();
  tpk_timeline_fail_alloc_after(tl, budget);
  int units[3] = {tpk_timeline_add_unit(tl, "mxu0", 1), tpk_timeline_add_unit(tl, "dma", 4),
                  tpk_timeline_add_unit(tl, "a unit with a rather long name", 2)};
  TpkTaskId prev = TPK_TASK_NONE;
  int64_t added = 0;
  char label[48];
  for (int i = 0; i < n; i++) {
    snprintf(label, sizeof label, "step %d", i);
    TpkTaskId t = i % 1000 == 999 ? tpk_timeline_barrier(tl) : add1(tl, units[i % 3], 1 + i % 7, prev, label);
    if (t != TPK_TASK_NONE) {
      assert_int_equal(t, added);
      added++;
      prev = t;
    }
  }
  TpkError err;
  TpkStatus st = tpk_timeline_error(tl, &err);
  if (st == TPK_OK) {
    assert_int_equal(tpk_timeline_task_count(tl), n);
    TpkStr s = {0};
    assert_int_equal(tpk_timeline_trace_json(tl, 1e9, "x", &s), TPK_OK);
    tpk_str_free(&s);
  } else {
    assert_int_equal(st, TPK_ERR_NOMEM);
    assert_non_null(strstr(err.message, "out of memory"));
    assert_int_equal(tpk_timeline_task_count(tl), added);
    assert_int_equal(tpk_timeline_add(tl, 0, 1, NULL, 0, "late", NULL), TPK_TASK_NONE);
  }
  tpk_timeline_destroy(tl);
  return st;
}

static void test_allocation_failure(void **state) {
  (void)state;
  enum { N = 9000 }; /* three task chunks, many label chunks and table growths */
  int64_t budget = 0;
  int failures = 0;
  while (build_with_budget(budget, N) != TPK_OK) {
    failures++;
    /* every early budget, then sparser: the later growths are few but far apart */
    budget += budget < 64 ? 1 : budget / 8;
    assert_true(budget < 100000);
  }
  assert_true(failures > 10);
  print_message("allocation failure: %d budgets failed cleanly before %lld allocations sufficed\n", failures,
                (long long)budget);
  /* A failure in the middle leaves earlier tasks intact. */
  TpkTimeline *tl = new_timeline();
  int u = tpk_timeline_add_unit(tl, "vpu", 1);
  for (int i = 0; i < 10; i++) tpk_timeline_add(tl, u, 2, NULL, 0, "same", NULL);
  /* a label bigger than a string chunk needs an allocation of its own */
  static char big[100000];
  memset(big, 'x', sizeof big - 1);
  tpk_timeline_fail_alloc_after(tl, 0);
  assert_int_equal(tpk_timeline_add(tl, u, 2, NULL, 0, big, NULL), TPK_TASK_NONE);
  assert_int_equal(tpk_timeline_error(tl, NULL), TPK_ERR_NOMEM);
  assert_int_equal(tpk_timeline_task_count(tl), 10);
  assert_true(tpk_timeline_makespan(tl) == 20 && tpk_timeline_unit_busy(tl, u) == 20);
  tpk_timeline_destroy(tl);
}

/* ---- Trace ------------------------------------------------------------------- */

/* Python's json module reads the trace (so it is valid JSON) and prints a
 * summary the tests compare line by line; strings are printed as the hex of
 * their UTF-8, so escaping is checked byte for byte. */
static const char check_py[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
    "ev = d['traceEvents']\n"
    "X = [e for e in ev if e['ph'] == 'X']\n"
    "T = {e['tid']: e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'thread_name'}\n"
    "P = [e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'process_name']\n"
    "I = [e for e in ev if e['ph'] == 'i']\n"
    "print('N', len(X), len(T), len(I))\n"
    "for p in P: print('P', p.encode().hex())\n"
    "for t in sorted(T): print('T', t, T[t])\n"
    "for e in X: print('X', e['name'].encode().hex(), e.get('cat', '').encode().hex(), e['tid'], repr(e['ts']),\n"
    "                  repr(e['dur']), e['args']['task'], e['args']['start_cycle'], e['args']['cycles'])\n"
    "for e in I: print('I', e['name'], e['args']['omitted'], e['args']['total'], e['args']['complete_before_cycle'],\n"
    "                  repr(e['ts']))\n"
    "o = d['otherData']\n"
    "print('O', o['events_written'], o['events_omitted'], o['makespan_cycles'])\n";

static bool have_python(void) { return system("python3 -c '' >/dev/null 2>&1") == 0; }

/* The summary of trace file `path` (heap), or fail. */
static char *py_summary(const char *path) {
  char script[160], cmd[400];
  snprintf(script, sizeof script, "%s/check.py", dir);
  FILE *f = fopen(script, "w");
  assert_non_null(f);
  fputs(check_py, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "python3 %s %s 2>&1", script, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  TpkStr s = {0};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) tpk_str_putn(&s, buf, n);
  int rc = pclose(p);
  char *out = tpk_str_take(&s);
  if (rc != 0) fail_msg("python could not read the trace:\n%s", out);
  return out;
}

static void expect_line(const char *out, const char *line) {
  size_t n = strlen(line);
  for (const char *p = out; (p = strstr(p, line)); p++)
    if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0)) return;
  fail_msg("expected line \"%s\" in:\n%s", line, out);
}

static const char *hex(const char *s, char *buf) {
  char *q = buf;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) q += sprintf(q, "%02x", *p);
  *q = 0;
  return buf;
}

static void test_trace_file(void **state) {
  (void)state;
  if (!have_python()) skip();
  TpkTimeline *tl = new_timeline();
  int mxu = tpk_timeline_add_unit(tl, "mxu0", 1), dma = tpk_timeline_add_unit(tl, "dma", 4);
  /* 1 GHz: 1500 cycles are 1.5 us. */
  TpkTaskId c = tpk_timeline_add(tl, dma, 1500, NULL, 0, "dma x[i,k] 64 KiB", "dma");
  tpk_timeline_add(tl, dma, 250, NULL, 0, "dma y", "dma");
  tpk_timeline_barrier(tl); /* no event */
  static const char *odd[] = {
      "say \"hi\"", "back\\slash", "line\nbreak\ttab\r\b\f", "ctl \x01\x1f\x7f end", "utf-8 \xc3\xa9 \xf0\x9f\x9a\x80",
  };
  TpkTaskId prev = c;
  for (size_t i = 0; i < TPK_ARRAY_LEN(odd); i++) prev = add1(tl, mxu, 100, prev, odd[i]);
  tpk_timeline_add(tl, mxu, 10, NULL, 0, "bad \xff\xc3 utf8 \xed\xa0\x80!", "cat \"q\"");
  tpk_timeline_add(tl, mxu, 10, NULL, 0, NULL, NULL); /* no label: the unit's name */
  assert_ok(tl);
  TpkError err;
  assert_int_equal(tpk_timeline_write_trace(tl, tmp("t.json"), 1e9, "v5e \"chip\" 0", &err), TPK_OK);
  char *out = py_summary(tmp("t.json"));
  char h[256], h2[64], line[512];
  expect_line(out, "N 9 5 0");
  snprintf(line, sizeof line, "P %s", hex("v5e \"chip\" 0", h));
  expect_line(out, line);
  expect_line(out, "T 1 mxu0");
  expect_line(out, "T 2 dma lane 0");
  expect_line(out, "T 5 dma lane 3");
  snprintf(line, sizeof line, "X %s %s 2 0 1.5 0 0 1500", hex("dma x[i,k] 64 KiB", h), hex("dma", h2));
  expect_line(out, line);
  snprintf(line, sizeof line, "X %s %s 3 0 0.25 1 0 250", hex("dma y", h), hex("dma", h2));
  expect_line(out, line);
  for (size_t i = 0; i < TPK_ARRAY_LEN(odd); i++) {
    snprintf(line, sizeof line, "X %s  1 %g 0.1 %zu %g 100", hex(odd[i], h), (1500 + 100 * i) / 1e3, 3 + i,
             1500 + 100.0 * i);
    expect_line(out, line);
  }
  /* invalid UTF-8 (a stray byte, a truncated sequence, a surrogate) -> U+FFFD */
  snprintf(line, sizeof line, "X %s %s 1 2 0.01 8 2000 10",
           hex("bad \xef\xbf\xbd\xef\xbf\xbd utf8 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!", h), hex("cat \"q\"", h2));
  expect_line(out, line);
  snprintf(line, sizeof line, "X %s  1 2.01 0.01 9 2010 10", hex("mxu0", h));
  expect_line(out, line);
  expect_line(out, "O 9 0 2020");
  free(out);

  /* The same trace in memory, without Python: the escapes as written. */
  TpkStr s = {0};
  assert_int_equal(tpk_timeline_trace_json(tl, 1e9, "v5e \"chip\" 0", &s), TPK_OK);
  assert_non_null(strstr(s.data, "\"name\":\"say \\\"hi\\\"\""));
  assert_non_null(strstr(s.data, "\"name\":\"back\\\\slash\""));
  assert_non_null(strstr(s.data, "\"name\":\"line\\nbreak\\ttab\\r\\b\\f\""));
  assert_non_null(strstr(s.data, "\"name\":\"ctl \\u0001\\u001f\x7f end\""));
  assert_non_null(strstr(s.data, "\"name\":\"utf-8 \xc3\xa9 \xf0\x9f\x9a\x80\""));
  int xs = 0;
  for (const char *p = s.data; (p = strstr(p, "\"ph\":\"X\"")); p++) xs++;
  assert_int_equal(xs, 9);
  /* identical to the file */
  size_t flen;
  char *file = test_read_file(tmp("t.json"), &flen);
  assert_non_null(file);
  assert_int_equal(flen, s.len);
  assert_memory_equal(file, s.data, flen);
  free(file);
  tpk_str_free(&s);
  tpk_timeline_destroy(tl);
}

static void test_trace_cap(void **state) {
  (void)state;
  if (!have_python()) skip();
  TpkTimeline *tl = new_timeline();
  int vpu = tpk_timeline_add_unit(tl, "vpu", 1), dma = tpk_timeline_add_unit(tl, "dma", 2);
  char label[32];
  for (int i = 0; i < 100; i++) {
    snprintf(label, sizeof label, "op %d", i);
    /* the dma tasks run ahead of the vpu ones: the first omitted task (id 10)
     * is not the earliest omitted one */
    tpk_timeline_add(tl, i % 2 ? dma : vpu, i % 2 ? 1 : 20, NULL, 0, label, NULL);
  }
  TpkTimelineTraceOptions opts = {.clock_hz = 1e6, .max_events = 10, .process_name = "capped"};
  TpkError err;
  assert_int_equal(tpk_timeline_write_trace_opts(tl, tmp("capped.json"), &opts, &err), TPK_OK);
  char *out = py_summary(tmp("capped.json"));
  expect_line(out, "N 10 3 1");
  /* vpu tasks 0,2,..8 are written (ends at 100); dma tasks 1..9 -> 5 of them,
   * two lanes: the first omitted dma task (id 11) starts at 2 cycles. */
  expect_line(out, "I trace truncated: 90 of 100 tasks omitted 90 100 2 2");
  expect_line(out, "O 10 90 1000");
  free(out);
  /* SIZE_MAX: everything; 0: the default cap (above 100). */
  opts.max_events = SIZE_MAX;
  assert_int_equal(tpk_timeline_write_trace_opts(tl, tmp("all.json"), &opts, &err), TPK_OK);
  out = py_summary(tmp("all.json"));
  expect_line(out, "N 100 3 0");
  free(out);
  opts.max_events = 0;
  TpkStr s = {0};
  assert_int_equal(tpk_timeline_trace_json_opts(tl, &opts, &s, &err), TPK_OK);
  assert_null(strstr(s.data, "truncated"));
  tpk_str_free(&s);
  /* Bad options and paths are errors, not crashes. */
  opts.clock_hz = 0;
  assert_int_equal(tpk_timeline_trace_json_opts(tl, &opts, &s, &err), TPK_ERR_INVALID);
  assert_int_equal(tpk_timeline_trace_json_opts(tl, NULL, &s, &err), TPK_ERR_INVALID);
  assert_int_equal(tpk_timeline_trace_json(tl, NAN, NULL, &s), TPK_ERR_INVALID);
  tpk_str_free(&s);
  assert_int_equal(tpk_timeline_write_trace(tl, "/nonexistent-dir/t.json", 1e9, NULL, &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "/nonexistent-dir/t.json"));
  assert_int_equal(tpk_timeline_write_trace(tl, NULL, 1e9, NULL, &err), TPK_ERR_INVALID);
  assert_int_equal(tpk_timeline_write_trace(tl, "", 1e9, NULL, &err), TPK_ERR_INVALID);
  /* a symbolic link planted at the path is not followed */
  char victim[256];
  snprintf(victim, sizeof victim, "%s", tmp("victim.json"));
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("keep", f);
  fclose(f);
  assert_int_equal(symlink(victim, tmp("link.json")), 0);
  assert_int_equal(tpk_timeline_write_trace(tl, tmp("link.json"), 1e9, NULL, &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "symbolic link"));
  char *kept = test_read_file(victim, NULL);
  assert_string_equal(kept, "keep");
  free(kept);
  tpk_timeline_destroy(tl);
}

/* ---- Scale --------------------------------------------------------------------- */

/* 10^6 grid steps of a double-buffered matmul: a DMA on one of 4 lanes, a dot
 * on one of two MXUs, a VPU epilogue; repeated labels, as a simulator emits. */
static void test_million_tasks(void **state) {
  (void)state;
  enum { STEPS = 333334 }; /* 3 tasks a step: ~10^6 tasks */
  TpkTimeline *tl = new_timeline();
  int dma = tpk_timeline_add_unit(tl, "dma", 4), mxu[2] = {tpk_timeline_add_unit(tl, "mxu0", 1),
                                                            tpk_timeline_add_unit(tl, "mxu1", 1)},
      vpu = tpk_timeline_add_unit(tl, "vpu", 1);
  double t0 = tpk_now_seconds();
  TpkTaskId d_prev = TPK_TASK_NONE, d = add1(tl, dma, 64, TPK_TASK_NONE, "dma x[i,k] 64 KiB");
  for (int k = 0; k < STEPS; k++) {
    TpkTaskId dn = add1(tl, dma, 64, d_prev, "dma x[i,k] 64 KiB");
    TpkTaskId m = add1(tl, mxu[k & 1], 96, d, "dot 128x256x128");
    TpkTaskId e = add1(tl, vpu, 40, m, "epilogue");
    d_prev = e, d = dn;
  }
  double secs = tpk_now_seconds() - t0;
  assert_ok(tl);
  int64_t n = tpk_timeline_task_count(tl);
  assert_true(n > 1000000);
  size_t mem = tpk_timeline_memory(tl);
  double per_task = (double)mem / (double)n;
  print_message("%lld tasks scheduled in %.3f s (%.0f ns/task), %.1f bytes/task, makespan %.0f cycles, "
                "utilisation dma %.2f mxu0 %.2f mxu1 %.2f vpu %.2f\n",
                (long long)n, secs, secs / (double)n * 1e9, per_task, tpk_timeline_makespan(tl),
                tpk_timeline_unit_utilisation(tl, dma), tpk_timeline_unit_utilisation(tl, mxu[0]),
                tpk_timeline_unit_utilisation(tl, mxu[1]), tpk_timeline_unit_utilisation(tl, vpu));
  assert_true(secs < 2.0);
  assert_true(per_task <= 34); /* 32 bytes a task plus the chunk index and tables */
  /* Its trace, capped at 10^5 events, in memory. */
  TpkTimelineTraceOptions opts = {.clock_hz = 940e6, .max_events = 100000};
  t0 = tpk_now_seconds();
  TpkStr s = {0};
  assert_int_equal(tpk_timeline_trace_json_opts(tl, &opts, &s, NULL), TPK_OK);
  secs = tpk_now_seconds() - t0;
  print_message("trace of %zu events: %.1f MB in %.3f s\n", opts.max_events, s.len / 1e6, secs);
  assert_non_null(strstr(s.data, "tasks omitted"));
  tpk_str_free(&s);
  tpk_timeline_destroy(tl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_serial_chain),
      cmocka_unit_test(test_independent_units_overlap),
      cmocka_unit_test(test_pipeline_small),
      cmocka_unit_test(test_pipeline_asymptotic),
      cmocka_unit_test(test_dma_lanes),
      cmocka_unit_test(test_in_order_blocking),
      cmocka_unit_test(test_utilisation),
      cmocka_unit_test(test_barrier),
      cmocka_unit_test(test_none_dependencies_and_queries),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_allocation_failure),
      cmocka_unit_test(test_trace_file),
      cmocka_unit_test(test_trace_cap),
      cmocka_unit_test(test_million_tasks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
