/*
 * Timing kernels on simulated chips (sim/schedule.c): large matmuls and
 * memory-bound kernels land near the roofline and never beat it, doubling
 * the work doubles the time, chips compare by their published ratios, and
 * blocks that stay put are not copied again.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower.h"
#include "sim/sim.h"
#include "sim/timeline.h"

static const char *MATMUL = "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [1024, 512, 2048], BN in [1024, 512, 2048], BK in [512, 1024]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

static const char *SOFTMAX = "kernel softmax(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [64, 8] {\n"
                             "  for i in tiles(M, BM) {\n"
                             "    let t = load(x[i, :], other=-inf);\n"
                             "    let e = exp(t - max(t, axis=1, keepdims=true));\n"
                             "    y[i, :] = e / sum(e, axis=1, keepdims=true);\n"
                             "  }\n"
                             "}\n";

/* Compile with sizes, lower as for the chip, time it. */
static TpkSimReport time_on(const char *text, const char *chip_name, const TpkBinding *binds, int nbinds,
                            const TpkBinding *tunes, int ntunes) {
  const TpkChip *chip = tpk_sim_chip_find(chip_name);
  assert_non_null(chip);
  TpkCheckOptions o = {.binds = binds, .nbinds = nbinds, .tunes = tunes, .ntunes = ntunes};
  TestCompile c;
  test_compile(&c, "k.tpk", text, &o);
  assert_int_equal(c.status, TPK_OK);
  TpkFunc *f = c.bound->funcs[0];
  TpkTarget t = {.name = chip->name, .vmem_bytes = (int64_t)chip->vmem_bytes, .tile_bytes = 1 << 20};
  TpkError err = {0};
  TpkPlan plan;
  if (tpk_lower(f, &t, &plan, &err) != TPK_OK) fail_msg("%s", err.message);
  tpk_plan_free(&plan);
  TpkSimReport rep;
  if (tpk_sim_schedule(f, chip, &rep, NULL, &err) != TPK_OK) fail_msg("%s", err.message);
  test_compile_free(&c);
  return rep;
}

static void test_large_matmul_near_roofline(void **state) {
  (void)state;
  TpkBinding b[] = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  TpkSimReport r = time_on(MATMUL, "v5e", b, 3, NULL, 0);
  double peak = tpk_sim_peak_flops(r.chip, TPK_BF16);
  double achieved = r.matmul_flops / r.seconds;
  fprintf(stderr, "v5e bf16 4096^3: %.1f TFLOP/s, %.1f%% of peak; roofline %.3f ms, simulated %.3f ms\n",
          achieved / 1e12, 100 * achieved / peak, r.roofline_seconds * 1e3, r.seconds * 1e3);
  assert_true(r.seconds >= r.roofline_seconds);
  assert_true(r.seconds <= 1.10 * r.roofline_seconds);
  assert_false(r.memory_bound);
  assert_true(r.mxu_utilisation > 0.85);
}

static void test_memory_bound_near_roofline(void **state) {
  (void)state;
  TpkBinding b[] = {{"M", 4096}, {"N", 4096}};
  TpkSimReport r = time_on(SOFTMAX, "v5e", b, 2, NULL, 0);
  fprintf(stderr, "v5e softmax 4096^2 f32: %.1f GB/s of %.1f; roofline %.3f ms, simulated %.3f ms\n",
          r.hbm_bytes / r.seconds / 1e9, r.chip->hbm_bytes_per_s / 1e9, r.roofline_seconds * 1e3, r.seconds * 1e3);
  assert_true(r.memory_bound);
  assert_true(fabs(r.hbm_bytes - 2.0 * 4096 * 4096 * 4) < 1); /* x read once, y written once */
  assert_true(r.seconds >= r.roofline_seconds);
  assert_true(r.seconds <= 1.10 * r.roofline_seconds);
  /* tiny blocks pay the per-step overhead: BM = 8 is slower */
  TpkBinding t[] = {{"BM", 8}};
  TpkSimReport small = time_on(SOFTMAX, "v5e", b, 2, t, 1);
  assert_true(small.seconds > 1.2 * r.seconds);
}

static void test_doubling_work_doubles_time(void **state) {
  (void)state;
  TpkBinding b1[] = {{"M", 4096}, {"N", 4096}, {"K", 4096}}, b2[] = {{"M", 8192}, {"N", 4096}, {"K", 4096}};
  TpkSimReport r1 = time_on(MATMUL, "v5e", b1, 3, NULL, 0), r2 = time_on(MATMUL, "v5e", b2, 3, NULL, 0);
  TpkBinding s1[] = {{"M", 4096}, {"N", 4096}}, s2[] = {{"M", 8192}, {"N", 4096}};
  TpkSimReport m1 = time_on(SOFTMAX, "v5e", s1, 2, NULL, 0), m2 = time_on(SOFTMAX, "v5e", s2, 2, NULL, 0);
  fprintf(stderr, "twice the work: matmul %.3fx the time, softmax %.3fx\n", r2.seconds / r1.seconds,
          m2.seconds / m1.seconds);
  assert_true(fabs(r2.seconds / r1.seconds / 2.0 - 1.0) < 0.05);
  assert_true(fabs(m2.seconds / m1.seconds / 2.0 - 1.0) < 0.05);
}

/* An atomic is a read-modify-write of its block: its bytes cross HBM twice,
 * a `+=` store's once; a scan costs VPU time, not HBM traffic. */
static void test_atomics_and_scans(void **state) {
  (void)state;
  static const char *const COLSUM =
      "kernel colsum(x: f32[M, N]) -> (s: f32[N] = 0, t: f32[N] = 0, c: f32[M, N]) tune BM in [512] {\n"
      "  for i in tiles(M, BM) {\n"
      "    let b = x[i, :];\n"
      "    atomic_add(s[:], sum(b, axis=0));\n"
      "    t[:] += sum(b, axis=0);\n"
      "    c[i, :] = cumsum(b, axis=1);\n"
      "  }\n"
      "}\n";
  TpkBinding b[] = {{"M", 4096}, {"N", 1024}};
  TpkSimReport r = time_on(COLSUM, "v5e", b, 2, NULL, 0);
  double x = 4096.0 * 1024 * 4, row = 1024.0 * 4, blocks = 4096 / 512;
  fprintf(stderr, "v5e colsum with atomics: %.0f bytes, simulated %.3f ms, roofline %.3f ms\n", r.hbm_bytes,
          r.seconds * 1e3, r.roofline_seconds * 1e3);
  assert_true(fabs(r.hbm_bytes - (2 * x + blocks * (2 * row + row))) < 1); /* x, c; atomic 2 rows, += 1 */
  assert_true(r.seconds >= r.roofline_seconds);
}

static void test_v6e_over_v5e(void **state) {
  (void)state;
  /* Blocks of 2048x2048 give 1024 FLOP/byte, above both chips' ridge points
   * (v5e 240, v6e 560): both compute bound, as the comparison needs. */
  TpkBinding b[] = {{"M", 8192}, {"N", 8192}, {"K", 8192}};
  TpkBinding t[] = {{"BM", 2048}, {"BN", 2048}};
  TpkSimReport a = time_on(MATMUL, "v5e", b, 3, t, 2), c = time_on(MATMUL, "v6e", b, 3, t, 2);
  double published = c.chip->peak_bf16_flops / a.chip->peak_bf16_flops, got = a.seconds / c.seconds;
  fprintf(stderr, "v6e / v5e on bf16 8192^3: %.2fx (published peaks: %.2fx)\n", got, published);
  assert_true(fabs(got / published - 1.0) < 0.10);
}

/* Megacore chips split the grid between their two TensorCores: both must
 * work (they once waited on each other's copies in one HBM queue). */
static void test_megacore_uses_both_cores(void **state) {
  (void)state;
  TpkBinding b[] = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  const char *chips[] = {"v4", "v5p"};
  for (int i = 0; i < 2; i++) {
    TpkSimReport r = time_on(MATMUL, chips[i], b, 3, NULL, 0);
    double fraction = r.matmul_flops / r.seconds / tpk_sim_peak_flops(r.chip, TPK_BF16);
    if (fraction < 0.8 || fraction > 1.0) fail_msg("%s: %.1f%% of peak", chips[i], 100 * fraction);
  }
}

/* A grid too large to walk step by step is an error, not a long hang. */
static void test_walk_budget(void **state) {
  (void)state;
  TpkBinding b[] = {{"M", 2000000000}, {"N", 8}};
  TpkBinding t[] = {{"BM", 8}};
  TpkCheckOptions o = {.binds = b, .nbinds = 2, .tunes = t, .ntunes = 1};
  TestCompile c;
  test_compile(&c, "k.tpk", SOFTMAX, &o);
  assert_int_equal(c.status, TPK_OK);
  TpkSimReport r;
  TpkError err = {0};
  assert_int_equal(tpk_sim_schedule(c.bound->funcs[0], tpk_sim_chip_find("v5e"), &r, NULL, &err), TPK_ERR_UNSUPPORTED);
  assert_non_null(strstr(err.message, "kernel 'softmax' takes more than 20000000 ops to walk"));
  test_compile_free(&c);
}

static void test_unchanged_blocks_not_copied(void **state) {
  (void)state;
  /* c[i, j] over j with a[i, :] fixed: with BN < N the a block is loaded
   * once per i, not once per (i, j). */
  const char *text = "kernel rowscale(a: f32[M, K], b: f32[M, N]) -> (c: f32[M, N]) tune BM in [8], BN in [128] {\n"
                     "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                     "    let s = sum(a[i, :], axis=1, keepdims=true);\n"
                     "    c[i, j] = b[i, j] * s;\n"
                     "  }\n"
                     "}\n";
  TpkBinding bind[] = {{"M", 64}, {"K", 1024}, {"N", 1024}};
  TpkSimReport r = time_on(text, "v5e", bind, 3, NULL, 0);
  double a_once = 64.0 * 1024 * 4, b_and_c = 2.0 * 64 * 1024 * 4;
  assert_true(fabs(r.hbm_bytes - (a_once + b_and_c)) < 1);
}

static void test_trace(void **state) {
  (void)state;
  TpkBinding b[] = {{"M", 256}, {"N", 512}};
  TestCompile c;
  TpkCheckOptions o = {.binds = b, .nbinds = 2};
  test_compile(&c, "k.tpk", SOFTMAX, &o);
  TpkFunc *f = c.bound->funcs[0];
  TpkSimReport r;
  TpkTimeline *tl;
  TpkError err = {0};
  assert_int_equal(tpk_sim_schedule(f, tpk_sim_chip_find("v5p"), &r, &tl, &err), TPK_OK);
  TpkStr json = {0};
  assert_int_equal(tpk_timeline_trace_json(tl, r.chip->clock_hz, "softmax on v5p", &json), TPK_OK);
  assert_non_null(strstr(json.data, "\"traceEvents\""));
  assert_non_null(strstr(json.data, "hbm"));
  assert_non_null(strstr(json.data, "(core 1)")); /* megacore: both TensorCores work */
  tpk_str_free(&json);
  tpk_timeline_destroy(tl);
  test_compile_free(&c);
}

/* Rows of each segment summed: the inner loop's bound and the block it
 * reads come from the data. `counts_decl` declares the distribution of
 * the counts ("" for none). Checked at N=65536, D=256, G=4, and lowered
 * for v5e; the kernel (c is the caller's, to free). */
static TpkFunc *segsum_compiled(TestCompile *c, const char *counts_decl) {
  char text[1024];
  snprintf(text, sizeof text,
           "kernel segsum(x: f32[N, D], starts: i32[G], counts: i32[G] %s) -> (y: f32[G, D])\n"
           "  tune BR in [64]\n"
           "{\n"
           "  for g in 0..G {\n"
           "    var acc = zeros(f32[D]);\n"
           "    for r in 0..(counts[g] + BR - 1) / BR {\n"
           "      acc += sum(x[ds(starts[g] + r * BR, BR), :], axis=0);\n"
           "    }\n"
           "    y[g, :] = acc;\n"
           "  }\n"
           "}\n",
           counts_decl);
  TpkBinding b[] = {{"N", 65536}, {"D", 256}, {"G", 4}};
  TpkCheckOptions o = {.binds = b, .nbinds = 3};
  test_compile(c, "k.tpk", text, &o);
  if (c->status != TPK_OK) fail_msg("%s", c->rendered);
  TpkFunc *f = c->bound->funcs[0];
  TpkTarget t = tpk_sim_target(tpk_sim_chip_find("v5e"), "sim:v5e");
  TpkError err = {0};
  TpkPlan plan;
  if (tpk_lower(f, &t, &plan, &err) != TPK_OK) fail_msg("%s", err.message);
  tpk_plan_free(&plan);
  return f;
}

/* With the launch's values the walk runs as many iterations as the data
 * says (bytes follow them exactly); without, the values are sampled, the
 * same every time, and the report says the time follows data. */
static void test_loop_bounds_from_data(void **state) {
  (void)state;
  TestCompile c;
  TpkFunc *f = segsum_compiled(&c, "");
  const TpkChip *chip = tpk_sim_chip_find("v5e");
  TpkError err = {0};
  int32_t starts[4] = {0, 20000, 30000, 40000}, counts[4] = {16384, 4096, 0, 2048}, half[4] = {8192, 2048, 0, 1024};
  void *args[4] = {NULL, starts, counts, NULL};
  TpkSimReport full, halved, sampled, again;
  assert_int_equal(tpk_sim_schedule_args(f, chip, args, &full, NULL, &err), TPK_OK);
  assert_true(full.follows_data);
  int64_t blocks = (16384 + 4096 + 0 + 2048) / 64;
  /* every count, and the start of each segment that has rows */
  double row_block = 64.0 * 256 * 4, counts_and_starts = (4 + 3) * 4, outputs = 4 * 256 * 4;
  if (fabs(full.hbm_bytes - (blocks * row_block + counts_and_starts + outputs)) >= 1) fail_msg("%.0f bytes, expected %.0f", full.hbm_bytes, blocks * row_block + counts_and_starts + outputs);
  args[2] = half;
  assert_int_equal(tpk_sim_schedule_args(f, chip, args, &halved, NULL, &err), TPK_OK);
  double ratio = halved.seconds / full.seconds;
  if (ratio < 0.4 || ratio > 0.6) fail_msg("half the rows took %.2f of the time", ratio);
  assert_true(full.seconds >= full.roofline_seconds && halved.seconds >= halved.roofline_seconds);
  assert_int_equal(tpk_sim_schedule(f, chip, &sampled, NULL, &err), TPK_OK);
  assert_int_equal(tpk_sim_schedule(f, chip, &again, NULL, &err), TPK_OK);
  assert_true(sampled.follows_data && sampled.seconds == again.seconds && sampled.hbm_bytes == again.hbm_bytes);
  test_compile_free(&c);
}

/* Timing without values samples an input from the distribution its kernel
 * declares: one value declared is the time of data holding that value; a
 * range declared lies between the times of its two ends. */
static double segsum_seconds(const char *counts_decl, const int32_t *counts) {
  TestCompile c;
  TpkFunc *f = segsum_compiled(&c, counts_decl);
  const TpkChip *chip = tpk_sim_chip_find("v5e");
  TpkError err = {0};
  int32_t starts[4] = {0, 0, 0, 0};
  void *args[4] = {NULL, starts, (void *)counts, NULL};
  TpkSimReport r;
  assert_int_equal(tpk_sim_schedule_args(f, chip, counts ? args : NULL, &r, NULL, &err), TPK_OK);
  assert_true(r.follows_data);
  test_compile_free(&c);
  return r.seconds;
}

static void test_declared_distribution(void **state) {
  (void)state;
  int32_t k4096[4] = {4096, 4096, 4096, 4096}, k8192[4] = {8192, 8192, 8192, 8192};
  double at4096 = segsum_seconds("", k4096), at8192 = segsum_seconds("", k8192);
  double one = segsum_seconds("in [4096]", NULL), range = segsum_seconds("in 4096..8193", NULL);
  double fallback = segsum_seconds("", NULL); /* uniform in [0, 8): one block a segment */
  if (one != at4096) fail_msg("declared 4096: %g s, with data 4096: %g s", one, at4096);
  if (!(range > at4096 && range < at8192)) fail_msg("declared 4096..8193: %g s, not between %g and %g", range, at4096, at8192);
  if (!(fallback < at4096 / 10)) fail_msg("sampled in [0, 8): %g s", fallback);
}

/* A bound computed from float data cannot be followed: an error naming it. */
static void test_float_bound_is_refused(void **state) {
  (void)state;
  const char *text = "kernel k(x: f32[N], w: f32[4]) -> (y: f32[N]) {\n"
                     "  for one in 0..1 {\n"
                     "    for r in 0..(max(w) as i32) { y[0..4] = w; }\n"
                     "  }\n"
                     "}\n";
  TpkBinding b[] = {{"N", 16}};
  TestCompile c;
  TpkCheckOptions o = {.binds = b, .nbinds = 1};
  test_compile(&c, "k.tpk", text, &o);
  assert_int_equal(c.status, TPK_OK);
  TpkSimReport r;
  TpkError err = {0};
  assert_int_equal(tpk_sim_schedule(c.bound->funcs[0], tpk_sim_chip_find("v5e"), &r, NULL, &err), TPK_ERR_UNSUPPORTED);
  assert_non_null(strstr(err.message, "line 3: a loop bound depends on vector or float data"));
  test_compile_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_matmul_near_roofline), cmocka_unit_test(test_memory_bound_near_roofline),
      cmocka_unit_test(test_doubling_work_doubles_time),
      cmocka_unit_test(test_atomics_and_scans), cmocka_unit_test(test_v6e_over_v5e),
      cmocka_unit_test(test_unchanged_blocks_not_copied), cmocka_unit_test(test_trace),
      cmocka_unit_test(test_megacore_uses_both_cores),   cmocka_unit_test(test_walk_budget),
      cmocka_unit_test(test_declared_distribution),
      cmocka_unit_test(test_loop_bounds_from_data),      cmocka_unit_test(test_float_bound_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
