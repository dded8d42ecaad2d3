/*
 * test_chips.c — sim/chips.c: the chip table is complete and cites a source
 * for every figure, its MXU figures multiply out to the published peaks, the
 * ratios Google publishes between chips hold, and topology names parse (or
 * fail with the exact message).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "support.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* |a/b - 1| <= rel */
static bool near(double a, double b, double rel) { return b != 0 && fabs(a / b - 1.0) <= rel; }

static const TpkChip *chip(const char *name) {
  const TpkChip *c = tpk_sim_chip_find(name);
  if (!c) fail_msg("no chip '%s'", name);
  return c;
}

/* ---- the table ------------------------------------------------------------ */

static void test_list_and_find(void **state) {
  (void)state;
  const char *expected[] = {"v4", "v5e", "v5p", "v6e", "v7"};
  assert_int_equal(tpk_sim_chip_count(), 5);
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    assert_non_null(c);
    assert_string_equal(c->name, expected[i]);
    assert_ptr_equal(tpk_sim_chip_find(c->name), c);
  }
  assert_null(tpk_sim_chip_at(-1));
  assert_null(tpk_sim_chip_at(tpk_sim_chip_count()));
  assert_null(tpk_sim_chip_find("v9"));
  assert_null(tpk_sim_chip_find(""));
  assert_null(tpk_sim_chip_find(NULL));
  assert_null(tpk_sim_chip_find("V5E")); /* names are lower case */
  assert_ptr_equal(tpk_sim_chip_find("trillium"), chip("v6e"));
  assert_ptr_equal(tpk_sim_chip_find("tpu7x"), chip("v7"));
  assert_ptr_equal(tpk_sim_chip_find("ironwood"), chip("v7"));
}

/* Every figure the simulator divides by or multiplies with is there. */
static void test_required_fields(void **state) {
  (void)state;
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    assert_non_null(c->full_name);
    assert_true(c->generation >= 4 && c->generation <= 7);
    assert_true(c->tensorcores == 1 || c->tensorcores == 2);
    assert_true(c->mxus_per_core > 0);
    assert_true(c->mxu_rows > 0 && c->mxu_cols > 0);
    assert_true(c->mxu_macs_per_cell > 0);
    assert_true(c->clock_hz > 0.5e9 && c->clock_hz < 3e9);
    assert_true(c->peak_bf16_flops > 0);
    assert_true(c->peak_int8_ops >= 0);
    assert_true(c->peak_fp8_flops >= 0);
    assert_true(c->hbm_bytes > 0 && c->hbm_bytes_per_s > 0);
    assert_true(c->vmem_bytes > 0 && c->smem_bytes > 0);
    assert_int_equal(c->vreg_sublanes, 8);
    assert_int_equal(c->vreg_lanes, 128);
    assert_true(c->vpu_alus_per_lane > 0);
    assert_true(c->dma_engines > 0 && c->dma_latency_s > 0);
    assert_true(c->sparsecores >= 0);
    assert_true(c->ici_links > 0 && c->ici_link_bytes_per_s > 0 && c->ici_hop_latency_s > 0);
    assert_true(c->torus_dims == 2 || c->torus_dims == 3);
    assert_true(c->ici_links == 2 * c->torus_dims); /* one link per torus neighbour */
    assert_true(c->pod_chips > 0 && c->max_slice_chips > 0 && c->max_slice_chips <= c->pod_chips);
    if (c->torus_dims == 2) {
      assert_true(c->max_axis > 0);
      assert_int_equal(c->max_axis * c->max_axis, c->max_slice_chips);
    } else {
      assert_int_equal(c->max_axis, 0);
      assert_int_equal(c->max_slice_chips % 64, 0); /* whole 4x4x4 cubes */
    }
    /* VMEM and SMEM are on-chip: far smaller than HBM */
    assert_true(c->vmem_bytes * 16 <= c->hbm_bytes);
  }
}

/* Every figure has a source; assumptions say so and why. */
static void test_every_figure_cited(void **state) {
  (void)state;
  int assumed = 0;
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    for (int f = 0; f < TPK_SIM_F_COUNT; f++) {
      const TpkSimCite *k = &c->cite[f];
      const char *field = tpk_sim_field_name((TpkSimField)f);
      if (!k->source || strlen(k->source) < 20) fail_msg("%s.%s has no source", c->name, field);
      bool says_assumed = strncmp(k->source, "assumed: ", 9) == 0;
      if (says_assumed != (k->how == TPK_SIM_ASSUMED))
        fail_msg("%s.%s: provenance and text disagree: %s", c->name, field, k->source);
      assumed += k->how == TPK_SIM_ASSUMED;
    }
    /* nothing about the DMA engines or hop latency is published */
    assert_int_equal(c->cite[TPK_SIM_F_DMA_ENGINES].how, TPK_SIM_ASSUMED);
    assert_int_equal(c->cite[TPK_SIM_F_DMA_LATENCY].how, TPK_SIM_ASSUMED);
    assert_int_equal(c->cite[TPK_SIM_F_ICI_LATENCY].how, TPK_SIM_ASSUMED);
    /* the headline figures are published, never assumed */
    assert_int_equal(c->cite[TPK_SIM_F_PEAK_BF16].how, TPK_SIM_PUBLISHED);
    assert_int_equal(c->cite[TPK_SIM_F_HBM_BYTES].how, TPK_SIM_PUBLISHED);
    assert_int_equal(c->cite[TPK_SIM_F_HBM_BW].how, TPK_SIM_PUBLISHED);
    assert_int_equal(c->cite[TPK_SIM_F_TENSORCORES].how, TPK_SIM_PUBLISHED);
  }
  /* sim/README.md's "Assumptions" section lists exactly these 21:
   * 3 per chip (DMA engines, DMA latency, ICI hop latency), the MXU rate of
   * v5p, v6e and TPU7x, the VPU ALUs of v6e and TPU7x, TPU7x's ICI links */
  assert_int_equal(assumed, 21);
  /* only v4 has a published clock */
  assert_int_equal(chip("v4")->cite[TPK_SIM_F_CLOCK].how, TPK_SIM_PUBLISHED);
  assert_int_equal(chip("v5p")->cite[TPK_SIM_F_CLOCK].how, TPK_SIM_DERIVED);
  assert_int_equal(chip("v6e")->cite[TPK_SIM_F_CLOCK].how, TPK_SIM_DERIVED);
  assert_int_equal(chip("v7")->cite[TPK_SIM_F_CLOCK].how, TPK_SIM_DERIVED);
}

static void test_field_names(void **state) {
  (void)state;
  for (int f = 0; f < TPK_SIM_F_COUNT; f++) {
    const char *a = tpk_sim_field_name((TpkSimField)f);
    assert_non_null(a);
    assert_string_not_equal(a, "?");
    for (int g = 0; g < f; g++) assert_string_not_equal(a, tpk_sim_field_name((TpkSimField)g));
  }
  assert_string_equal(tpk_sim_field_name(TPK_SIM_F_COUNT), "?");
}

/* sim/README.md carries every citation verbatim, so the two cannot drift. */
static void test_readme_in_sync(void **state) {
  (void)state;
  char *readme = test_read_file(test_path("sim/README.md"), NULL);
  assert_non_null(readme);
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    for (int f = 0; f < TPK_SIM_F_COUNT; f++)
      if (!strstr(readme, c->cite[f].source))
        fail_msg("sim/README.md lacks the source of %s.%s: %s", c->name, tpk_sim_field_name((TpkSimField)f),
                 c->cite[f].source);
  }
  free(readme);
}

/* ---- consistency ------------------------------------------------------------ */

/* cores * MXUs * cells * MACs * 2 * clock is the published bf16 peak within
 * 1% (v4: published 1050 MHz gives 275.3 vs 275; v5e: published 1.5 GHz gives
 * 196.6 vs 197; the others' clocks are derived from the peak). */
static void test_peak_matches_mxus(void **state) {
  (void)state;
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    if (!near(tpk_sim_chip_mxu_peak(c), c->peak_bf16_flops, 0.01))
      fail_msg("%s: MXU model %.4g FLOP/s vs published %.4g", c->name, tpk_sim_chip_mxu_peak(c),
               c->peak_bf16_flops);
  }
  /* the documented exception: v6e and TPU7x need 2 MACs per cell at a
   * plausible clock; with 1 their clocks would be 3.5 and 4.4 GHz */
  assert_int_equal(chip("v6e")->mxu_macs_per_cell, 2);
  assert_int_equal(chip("v7")->mxu_macs_per_cell, 2);
  assert_true(near(chip("v6e")->clock_hz * 2, 3.50e9, 0.01));
  assert_true(near(chip("v7")->clock_hz * 2, 4.40e9, 0.01));
}

static void test_mxu_and_cores(void **state) {
  (void)state;
  for (int i = 0; i < tpk_sim_chip_count(); i++) {
    const TpkChip *c = tpk_sim_chip_at(i);
    int side = c->generation >= 6 ? 256 : 128; /* 256x256 from v6e */
    assert_int_equal(c->mxu_rows, side);
    assert_int_equal(c->mxu_cols, side);
    if (c->megacore) assert_int_equal(c->tensorcores, 2);
  }
  assert_true(chip("v4")->megacore);
  assert_true(chip("v5p")->megacore);
  assert_false(chip("v5e")->megacore);
  assert_false(chip("v6e")->megacore);
  assert_false(chip("v7")->megacore); /* two TensorCores, two devices */
  assert_int_equal(chip("v7")->tensorcores, 2);
  assert_int_equal(chip("v4")->mxus_per_core, 4);
  assert_int_equal(chip("v5e")->mxus_per_core, 4);
  assert_int_equal(chip("v5p")->mxus_per_core, 4);
  assert_int_equal(chip("v6e")->mxus_per_core, 2);
  assert_int_equal(chip("v7")->mxus_per_core, 2);
}

/* The memory figures the JAX Pallas hardware table publishes. */
static void test_memories(void **state) {
  (void)state;
  assert_int_equal(chip("v4")->vmem_bytes, 16 * MiB);
  assert_int_equal(chip("v5e")->vmem_bytes, 128 * MiB);
  assert_int_equal(chip("v5p")->vmem_bytes, 64 * MiB);
  assert_int_equal(chip("v6e")->vmem_bytes, 128 * MiB);
  assert_int_equal(chip("v7")->vmem_bytes, 64 * MiB);
  for (int i = 0; i < tpk_sim_chip_count(); i++) assert_int_equal(tpk_sim_chip_at(i)->smem_bytes, 1 * MiB);
  assert_int_equal(chip("v4")->cmem_bytes, 128 * MiB);
  assert_int_equal(chip("v5e")->cmem_bytes, 0);
  assert_int_equal(chip("v4")->hbm_bytes, 32 * GiB);
  assert_int_equal(chip("v5e")->hbm_bytes, 16 * GiB);
  assert_int_equal(chip("v5p")->hbm_bytes, 95 * GiB);
  assert_int_equal(chip("v6e")->hbm_bytes, 32 * GiB);
  assert_int_equal(chip("v7")->hbm_bytes, 192 * GiB);
}

/* Ratios Google states between chips, and the dtype rates. */
static void test_published_ratios(void **state) {
  (void)state;
  const TpkChip *v4 = chip("v4"), *v5e = chip("v5e"), *v5p = chip("v5p"), *v6e = chip("v6e"), *v7 = chip("v7");
  /* Trillium: "4.7x increase in peak compute performance per chip" over v5e (918/197 = 4.66) */
  assert_true(near(v6e->peak_bf16_flops / v5e->peak_bf16_flops, 4.66, 0.01));
  /* ... "double the HBM capacity and bandwidth", "double the ICI bandwidth" */
  assert_true(near((double)v6e->hbm_bytes / v5e->hbm_bytes, 2, 0.001));
  assert_true(near(v6e->hbm_bytes_per_s / v5e->hbm_bytes_per_s, 2, 0.001));
  assert_true(near(v6e->ici_links * v6e->ici_link_bytes_per_s / (v5e->ici_links * v5e->ici_link_bytes_per_s), 2,
                   0.001));
  /* Ironwood: 6x Trillium's HBM, 4.5x its HBM bandwidth, 1.5x its ICI */
  assert_true(near((double)v7->hbm_bytes / v6e->hbm_bytes, 6, 0.001));
  assert_true(near(v7->hbm_bytes_per_s / v6e->hbm_bytes_per_s, 4.5, 0.01));
  assert_true(near(v7->ici_links * v7->ici_link_bytes_per_s / (v6e->ici_links * v6e->ici_link_bytes_per_s), 1.5,
                   0.001));
  /* the published per-chip bidirectional ICI: links * one-way * 2 */
  assert_true(near(v5e->ici_links * v5e->ici_link_bytes_per_s * 2, 400e9, 0.001));
  assert_true(near(v5p->ici_links * v5p->ici_link_bytes_per_s * 2, 1200e9, 0.001));
  assert_true(near(v6e->ici_links * v6e->ici_link_bytes_per_s * 2, 800e9, 0.001));
  assert_true(near(v7->ici_links * v7->ici_link_bytes_per_s * 2, 1200e9, 0.001));
  /* int8: same rate as bf16 on v4, twice it on v5e, v5p, v6e, none on TPU7x */
  assert_true(near(v4->peak_int8_ops, v4->peak_bf16_flops, 0.001));
  assert_true(near(v5e->peak_int8_ops / v5e->peak_bf16_flops, 2, 0.01));
  assert_true(near(v5p->peak_int8_ops / v5p->peak_bf16_flops, 2, 0.001));
  assert_true(near(v6e->peak_int8_ops / v6e->peak_bf16_flops, 2, 0.001));
  assert_true(v7->peak_int8_ops == 0);
  /* fp8: none published on v4 and v5e, the bf16 rate on v5p and v6e, double on TPU7x */
  assert_true(v4->peak_fp8_flops == 0);
  assert_true(v5e->peak_fp8_flops == 0);
  assert_true(near(v5p->peak_fp8_flops, v5p->peak_bf16_flops, 0.001));
  assert_true(near(v6e->peak_fp8_flops, v6e->peak_bf16_flops, 0.001));
  assert_true(near(v7->peak_fp8_flops / v7->peak_bf16_flops, 2, 0.001));
  /* bf16 ordering by generation within the training line */
  assert_true(v4->peak_bf16_flops < v5p->peak_bf16_flops && v5p->peak_bf16_flops < v7->peak_bf16_flops);
}

/* ---- topology names --------------------------------------------------------- */

static void expect_topology(const char *name, const char *chip_name, int d0, int d1, int d2, int64_t chips,
                            bool w0, bool w1, bool w2) {
  TpkSimTopology t;
  TpkError err = {0};
  if (tpk_sim_topology_parse(name, &t, &err) != TPK_OK) fail_msg("'%s': %s", name, err.message);
  assert_string_equal(t.chip->name, chip_name);
  assert_int_equal(t.ndims, t.chip->torus_dims);
  assert_int_equal(t.dims[0], d0);
  assert_int_equal(t.dims[1], d1);
  assert_int_equal(t.dims[2], d2);
  assert_int_equal(t.chips, chips);
  assert_int_equal(t.wrap[0], w0);
  assert_int_equal(t.wrap[1], w1);
  assert_int_equal(t.wrap[2], w2);
}

static void test_topology_good(void **state) {
  (void)state;
  expect_topology("v5e", "v5e", 1, 1, 1, 1, false, false, false);
  expect_topology("v7", "v7", 1, 1, 1, 1, false, false, false);
  expect_topology("v5e-2x4", "v5e", 2, 4, 1, 8, false, false, false);
  expect_topology("v5e-8x16", "v5e", 8, 16, 1, 128, false, true, false); /* wraps only the full axis */
  expect_topology("v6e-16x16", "v6e", 16, 16, 1, 256, true, true, false);
  expect_topology("trillium-4x4", "v6e", 4, 4, 1, 16, false, false, false);
  expect_topology("v5p-2x2x1", "v5p", 2, 2, 1, 4, false, false, false);
  expect_topology("v5p-2x2x4", "v5p", 2, 2, 4, 16, false, false, false); /* no cube, no wraparound */
  expect_topology("v5p-4x4x8", "v5p", 4, 4, 8, 128, true, true, true);
  expect_topology("v5p-16x16x24", "v5p", 16, 16, 24, 6144, true, true, true); /* the largest v5p slice */
  expect_topology("v4-16x16x16", "v4", 16, 16, 16, 4096, true, true, true);
  expect_topology("v4-3x1x1", "v4", 3, 1, 1, 3, false, false, false); /* axes up to 4 are free */
  expect_topology("tpu7x-4x4x4", "v7", 4, 4, 4, 64, true, true, true);
  expect_topology("v7-16x24x24", "v7", 16, 24, 24, 9216, true, true, true);
}

static void expect_error(const char *name, const char *message) {
  TpkSimTopology t = {0};
  TpkError err = {0};
  assert_int_equal(tpk_sim_topology_parse(name, &t, &err), TPK_ERR_INVALID);
  assert_int_equal(err.code, TPK_ERR_INVALID);
  assert_string_equal(err.message, message);
  assert_null(t.chip); /* *out untouched on error */
}

static void test_topology_errors(void **state) {
  (void)state;
  expect_error(NULL, "empty topology name: expected <chip> or <chip>-<dims>, e.g. v5p-2x2x1; "
                     "known chips: v4, v5e, v5p, v6e, v7");
  expect_error("", "empty topology name: expected <chip> or <chip>-<dims>, e.g. v5p-2x2x1; "
                   "known chips: v4, v5e, v5p, v6e, v7");
  expect_error("v9-2x2", "unknown chip 'v9' in 'v9-2x2'; known chips: v4, v5e, v5p, v6e, v7");
  expect_error("v5", "unknown chip 'v5' in 'v5'; known chips: v4, v5e, v5p, v6e, v7");
  expect_error("-2x2", "unknown chip '' in '-2x2'; known chips: v4, v5e, v5p, v6e, v7");
  expect_error("v5e-", "bad dimensions '' in 'v5e-': expected positive integers separated by 'x', e.g. v5e-4x4");
  expect_error("v5e-2xx2",
               "bad dimensions '2xx2' in 'v5e-2xx2': expected positive integers separated by 'x', e.g. v5e-4x4");
  expect_error("v5e-4x", "bad dimensions '4x' in 'v5e-4x': expected positive integers separated by 'x', e.g. v5e-4x4");
  expect_error("v5e-4x4 ",
               "bad dimensions '4x4 ' in 'v5e-4x4 ': expected positive integers separated by 'x', e.g. v5e-4x4");
  expect_error("v5p-0x2x2",
               "bad dimensions '0x2x2' in 'v5p-0x2x2': expected positive integers separated by 'x', e.g. v5p-2x2x1");
  expect_error("v5p--2x2x1", "bad dimensions '-2x2x1' in 'v5p--2x2x1': expected positive integers separated by "
                             "'x', e.g. v5p-2x2x1");
  /* 2D vs 3D */
  expect_error("v5e-2x2x1", "v5e chips form a 2D torus: 'v5e-2x2x1' has 3 dimensions, expected 2 (e.g. v5e-4x4)");
  expect_error("v6e-8", "v6e chips form a 2D torus: 'v6e-8' has 1 dimensions, expected 2 (e.g. v6e-4x4)");
  expect_error("v5p-2x2", "v5p chips form a 3D torus: 'v5p-2x2' has 2 dimensions, expected 3 (e.g. v5p-2x2x1)");
  expect_error("v7-2x2x2x2",
               "v7 chips form a 3D torus: 'v7-2x2x2x2' has more than 3 dimensions, expected 3 (e.g. v7-2x2x1)");
  /* axes the pod cannot form */
  expect_error("v5e-32x8", "'v5e-32x8': an axis of 32 chips is longer than the 16 chips of a v5e pod's torus axis");
  expect_error("v5p-6x4x4", "'v5p-6x4x4': an axis of 6 chips is not possible on v5p: an axis is at most 4 chips "
                            "or a multiple of 4 (whole 4x4x4 cubes)");
  /* more chips than the largest slice */
  expect_error("v5p-16x16x32", "'v5p-16x16x32' has 8192 chips, more than the largest v5p slice of 6144 chips");
  expect_error("v4-16x16x32", "'v4-16x16x32' has 8192 chips, more than the largest v4 slice of 4096 chips");
  expect_error("v5p-99999999999999999999x2x2",
               "'v5p-99999999999999999999x2x2' has more chips than the largest v5p slice of 6144 chips");
  expect_error("v5e-99999999x1", "'v5e-99999999x1' has more chips than the largest v5e slice of 256 chips");
}

/* A NULL error object is allowed: the caller only wants the status. */
static void test_topology_null_err(void **state) {
  (void)state;
  TpkSimTopology t;
  assert_int_equal(tpk_sim_topology_parse("v9", &t, NULL), TPK_ERR_INVALID);
  assert_int_equal(tpk_sim_topology_parse("v5e-4x4", &t, NULL), TPK_OK);
  assert_int_equal(t.chips, 16);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_list_and_find),     cmocka_unit_test(test_required_fields),
      cmocka_unit_test(test_every_figure_cited), cmocka_unit_test(test_field_names),
      cmocka_unit_test(test_readme_in_sync),
      cmocka_unit_test(test_peak_matches_mxus), cmocka_unit_test(test_mxu_and_cores),
      cmocka_unit_test(test_memories),          cmocka_unit_test(test_published_ratios),
      cmocka_unit_test(test_topology_good),     cmocka_unit_test(test_topology_errors),
      cmocka_unit_test(test_topology_null_err),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
