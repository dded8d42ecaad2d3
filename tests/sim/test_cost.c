/*
 * The simulator's cost model (sim/cost.c) against what the chips' figures
 * imply: large aligned matmuls run near peak and never above it, work scales
 * linearly, unaligned shapes pay for their padding, chips compare by their
 * published ratios, and f32 pays for its bf16 passes.
 */
#include "support.h"

#include <math.h>

#include "ir/ir.h"
#include "sim/sim.h"

/* Achieved FLOP/s of one TensorCore on [n,n] x [n,n] in dt. */
static double core_flops(const TpkChip *c, int64_t n, TpkDType dt) {
  double cycles = tpk_sim_matmul_cycles(c, n, n, n, dt);
  return 2.0 * (double)n * n * n / (cycles / c->clock_hz);
}

static void test_large_matmul_near_peak(void **state) {
  (void)state;
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    double peak_core = tpk_sim_peak_flops(c, TPK_BF16) / c->tensorcores;
    double got = core_flops(c, 4096, TPK_BF16);
    if (got > peak_core * 1.0000001 || got < 0.9 * peak_core)
      fail_msg("%s: 4096^3 bf16 at %.3g FLOP/s per core, peak %.3g", c->name, got, peak_core);
  }
}

static void test_work_scales_linearly(void **state) {
  (void)state;
  const TpkChip *c = tpk_sim_chip_find("v5e");
  double a = tpk_sim_matmul_cycles(c, 4096, 4096, 4096, TPK_BF16);
  double b = tpk_sim_matmul_cycles(c, 8192, 4096, 4096, TPK_BF16);
  assert_true(fabs(b / a - 2.0) < 0.05);
  double m1 = tpk_sim_hbm_cycles(c, 1 << 28), m2 = tpk_sim_hbm_cycles(c, 1 << 29);
  assert_true(fabs(m2 / m1 - 2.0) < 1e-9);
}

static void test_padding_costs(void **state) {
  (void)state;
  const TpkChip *c = tpk_sim_chip_find("v5e");
  /* K and N of 129 need two 128-wide tiles each: the cost of 256 */
  assert_true(tpk_sim_matmul_cycles(c, 1024, 129, 129, TPK_BF16) == tpk_sim_matmul_cycles(c, 1024, 256, 256, TPK_BF16));
  /* With more tiles than MXUs, padding costs its share: K = N = 1025 pads to
   * 1152, (1152/1024)^2 = 1.27x the work (1.31x after rounding up to whole
   * rounds of 4 MXUs). With few tiles, idle MXUs absorb it. */
  double r = tpk_sim_matmul_cycles(c, 4096, 1025, 1025, TPK_BF16) / tpk_sim_matmul_cycles(c, 4096, 1024, 1024, TPK_BF16);
  assert_true(r >= 1.265 * 0.99 && r < 1.35);
  assert_true(tpk_sim_matmul_cycles(c, 1024, 129, 129, TPK_BF16) == tpk_sim_matmul_cycles(c, 1024, 128, 128, TPK_BF16));
  /* v6e's 256-wide MXU pads 128 up to 256 */
  const TpkChip *t = tpk_sim_chip_find("v6e");
  assert_true(tpk_sim_matmul_cycles(t, 1024, 128, 128, TPK_BF16) == tpk_sim_matmul_cycles(t, 1024, 256, 256, TPK_BF16));
}

static void test_published_ratio_v6e_v5e(void **state) {
  (void)state;
  const TpkChip *a = tpk_sim_chip_find("v5e"), *b = tpk_sim_chip_find("v6e");
  double ta = tpk_sim_matmul_cycles(a, 8192, 8192, 8192, TPK_BF16) / a->clock_hz;
  double tb = tpk_sim_matmul_cycles(b, 8192, 8192, 8192, TPK_BF16) / b->clock_hz;
  double published = b->peak_bf16_flops / a->peak_bf16_flops;
  assert_true(fabs((ta / tb) / published - 1.0) < 0.10);
}

static void test_dtype_rates(void **state) {
  (void)state;
  const TpkChip *c = tpk_sim_chip_find("v5e");
  double bf16 = tpk_sim_matmul_cycles(c, 4096, 4096, 4096, TPK_BF16);
  assert_true(fabs(tpk_sim_matmul_cycles(c, 4096, 4096, 4096, TPK_F32) / bf16 - 6.0) < 1e-9);
  assert_true(fabs(bf16 / tpk_sim_matmul_cycles(c, 4096, 4096, 4096, TPK_I8) - c->peak_int8_ops / c->peak_bf16_flops) < 1e-9);
  /* fp8 on v7 at its published rate; on v5e (no fp8) as bf16 */
  const TpkChip *v7 = tpk_sim_chip_find("v7");
  double v7bf = tpk_sim_matmul_cycles(v7, 4096, 4096, 4096, TPK_BF16);
  assert_true(fabs(v7bf / tpk_sim_matmul_cycles(v7, 4096, 4096, 4096, TPK_F8E4M3) - 2.0) < 0.01);
  assert_true(tpk_sim_matmul_cycles(c, 512, 512, 512, TPK_F8E4M3) == tpk_sim_matmul_cycles(c, 512, 512, 512, TPK_BF16));
}

static void test_small_m_is_weight_load_bound(void **state) {
  (void)state;
  /* A matmul with few rows waits for weights: 8 rows cost what 128 do. */
  const TpkChip *c = tpk_sim_chip_find("v5e");
  assert_true(tpk_sim_matmul_cycles(c, 8, 1024, 1024, TPK_BF16) == tpk_sim_matmul_cycles(c, 128, 1024, 1024, TPK_BF16));
}

static void test_vpu_and_roofline(void **state) {
  (void)state;
  const TpkChip *c = tpk_sim_chip_find("v5e");
  int64_t per_vreg = (int64_t)c->vreg_sublanes * c->vreg_lanes;
  assert_true(tpk_sim_vpu_cycles(c, per_vreg, 1) == 1.0 / c->vpu_alus_per_lane);
  assert_true(tpk_sim_vpu_cycles(c, per_vreg + 1, 1) == 2.0 / c->vpu_alus_per_lane);
  assert_true(tpk_sim_vpu_ops(TPK_OP_EXP) > tpk_sim_vpu_ops(TPK_OP_ADD));
  /* softmax-like traffic is memory bound; a big matmul compute bound */
  double bytes = 2.0 * 4096 * 4096 * 4;
  assert_true(tpk_sim_roofline_seconds(c, 5.0 * 4096 * 4096, bytes, TPK_F32) == bytes / c->hbm_bytes_per_s);
  double flops = 2.0 * 8192 * 8192 * 8192;
  assert_true(tpk_sim_roofline_seconds(c, flops, 3.0 * 8192 * 8192 * 2, TPK_BF16) == flops / tpk_sim_peak_flops(c, TPK_BF16));
  assert_true(tpk_sim_dma_latency_cycles(c) > 0);
  assert_true(tpk_sim_reduce_cycles(c, 8 * 4096, 8) > tpk_sim_vpu_cycles(c, 8 * 4096, 1));
  /* a scan is log-step: 1 op plus two (rotate, combine) per doubling */
  assert_true(tpk_sim_scan_cycles(c, per_vreg, 1) == tpk_sim_vpu_cycles(c, per_vreg, 1));
  assert_true(tpk_sim_scan_cycles(c, per_vreg, 128) == tpk_sim_vpu_cycles(c, per_vreg, 1 + 2 * 7));
  assert_true(tpk_sim_scan_cycles(c, 2 * per_vreg, 129) == 2 * tpk_sim_vpu_cycles(c, per_vreg, 1 + 2 * 8));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_matmul_near_peak), cmocka_unit_test(test_work_scales_linearly),
      cmocka_unit_test(test_padding_costs),          cmocka_unit_test(test_published_ratio_v6e_v5e),
      cmocka_unit_test(test_dtype_rates),            cmocka_unit_test(test_small_m_is_weight_load_bound),
      cmocka_unit_test(test_vpu_and_roofline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
