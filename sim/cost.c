/*
 * cost.c — how many cycles a TensorCore's units take for a piece of work,
 * from first principles and the chip's published figures (chips.c).
 *
 * The assumptions are the constants below, each with its reason; sim/README.md
 * lists them. The model is meant to be right about what dominates (MXU
 * utilisation and padding, HBM bandwidth, the cost of f32 on bf16 hardware),
 * not about the last cycle.
 */
#include "sim/sim.h"

#include <math.h>

#include "ir/ir.h"

/* f32 matmuls run as bf16 passes on the MXU. XLA's HIGHEST precision (the
 * only one close to f32 results, which the host computes) splits each f32
 * operand into three bf16 parts and takes 6 of the 9 products. */
static const double F32_PASSES = 6;
/* f16 is not an MXU type on any published TPU: operands are converted to
 * bf16 on the VPU (counted by the caller) and the matmul is one bf16 pass. */
static const double F16_PASSES = 1;
/* A vreg holds sublanes x lanes 32-bit values; bf16 and 8-bit data are
 * computed unpacked (one element per 32-bit slot), so element counts are the
 * same for every dtype. Packed bf16 VPU math exists from v6e on; ignoring it
 * overestimates VPU time on v6e/v7 by up to 2x for bf16 elementwise work. */
/* Transcendentals run on the EUP, next to the VPU: one EUP push and about
 * two VPU instructions around it (range reduction, scale). */
static const double TRANSCENDENTAL_OPS = 3;
/* Division: reciprocal on the EUP and one Newton step. */
static const double DIVIDE_OPS = 4;
/* erf: a rational approximation of ~10 multiply-adds. */
static const double ERF_OPS = 12;

static double mxu_passes(const TpkChip *c, TpkDType dt) {
  switch (dt) {
  case TPK_F32: return F32_PASSES;
  case TPK_F16: return F16_PASSES;
  case TPK_I8:
  case TPK_U8: /* int8 at its published rate where there is one */
    return c->peak_int8_ops > 0 ? c->peak_bf16_flops / c->peak_int8_ops : 1;
  case TPK_F8E4M3:
  case TPK_F8E5M2:
    return c->peak_fp8_flops > 0 ? c->peak_bf16_flops / c->peak_fp8_flops : 1;
  case TPK_I32:
  case TPK_I16: /* no integer MXU wider than int8: emulated like f32 */
    return F32_PASSES;
  default: return 1;
  }
}

double tpk_sim_matmul_cycles(const TpkChip *c, int64_t M, int64_t K, int64_t N, TpkDType dt) {
  if (M <= 0 || K <= 0 || N <= 0) return 0;
  return tpk_sim_matmul_busy_cycles(c, M, K, N, dt) + tpk_sim_matmul_latency_cycles(c, dt);
}

/* The systolic fill and drain: the first result leaves rows + cols cycles
 * after the first row enters. It is latency, not occupancy: the next
 * matmul's rows can follow right behind. */
double tpk_sim_matmul_latency_cycles(const TpkChip *c, TpkDType dt) {
  return (double)(c->mxu_rows + c->mxu_cols) * mxu_passes(c, dt);
}

double tpk_sim_matmul_busy_cycles(const TpkChip *c, int64_t M, int64_t K, int64_t N, TpkDType dt) {
  if (M <= 0 || K <= 0 || N <= 0) return 0;
  int64_t rows = c->mxu_rows, cols = c->mxu_cols;
  int64_t tiles = ((K + rows - 1) / rows) * ((N + cols - 1) / cols);
  int64_t rounds = (tiles + c->mxus_per_core - 1) / c->mxus_per_core;
  /* Rows stream at mxu_macs_per_cell per cycle; the next weight tile loads
   * (one row of weights per cycle) while the current one streams, so a tile
   * costs whichever is longer. */
  double stream = (double)M / c->mxu_macs_per_cell;
  double per_tile = stream > (double)rows ? stream : (double)rows;
  return rounds * per_tile * mxu_passes(c, dt);
}

double tpk_sim_vpu_cycles(const TpkChip *c, int64_t elements, double ops) {
  if (elements <= 0) return 0;
  int64_t per_vreg = (int64_t)c->vreg_sublanes * c->vreg_lanes;
  int64_t vregs = (elements + per_vreg - 1) / per_vreg;
  return (double)vregs * ops / c->vpu_alus_per_lane;
}

double tpk_sim_vpu_ops(int opcode) {
  switch ((TpkOpcode)opcode) {
  case TPK_OP_EXP: case TPK_OP_LOG: case TPK_OP_SQRT: case TPK_OP_RSQRT:
  case TPK_OP_TANH: case TPK_OP_SIGMOID: case TPK_OP_POW:
    return TRANSCENDENTAL_OPS;
  case TPK_OP_DIV: case TPK_OP_REM: case TPK_OP_CDIV:
    return DIVIDE_OPS;
  case TPK_OP_ERF:
    return ERF_OPS;
  default:
    return 1;
  }
}

double tpk_sim_reduce_cycles(const TpkChip *c, int64_t elements, int64_t outputs) {
  if (elements <= 0) return 0;
  int64_t per_vreg = (int64_t)c->vreg_sublanes * c->vreg_lanes;
  int64_t out_vregs = (outputs + per_vreg - 1) / per_vreg;
  /* combine vregs elementwise, then log2(lanes) + log2(sublanes) rotate-and-
   * combine steps to fold each output vreg */
  double tree = log2((double)c->vreg_lanes) + log2((double)c->vreg_sublanes);
  return tpk_sim_vpu_cycles(c, elements, 1) + (double)(out_vregs ? out_vregs : 1) * tree * 2 / c->vpu_alus_per_lane;
}

double tpk_sim_scan_cycles(const TpkChip *c, int64_t elements, int64_t len) {
  if (elements <= 0) return 0;
  double steps = len > 1 ? ceil(log2((double)len)) : 0;
  return tpk_sim_vpu_cycles(c, elements, 1 + 2 * steps);
}

double tpk_sim_dma_latency_cycles(const TpkChip *c) { return c->dma_latency_s * c->clock_hz; }

double tpk_sim_hbm_cycles(const TpkChip *c, int64_t bytes) {
  return bytes <= 0 ? 0 : (double)bytes / c->hbm_bytes_per_s * c->clock_hz;
}

double tpk_sim_peak_flops(const TpkChip *c, TpkDType dt) {
  return tpk_sim_chip_mxu_peak(c) / mxu_passes(c, dt);
}

double tpk_sim_roofline_seconds(const TpkChip *c, double flops, double bytes, TpkDType dt) {
  double compute = flops / tpk_sim_peak_flops(c, dt), memory = bytes / c->hbm_bytes_per_s;
  return compute > memory ? compute : memory;
}
