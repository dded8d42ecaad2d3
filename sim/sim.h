/*
 * sim.h — the TPU simulator's public face inside tpk.
 *
 * This part: chip descriptions (sim/chips.c). One static, read-only table
 * holds every simulated chip with the figures the timing model needs — MXUs,
 * clock, peak FLOP/s, HBM, VMEM/SMEM, vregs, DMA, SparseCores, ICI — and,
 * for every figure, where it comes from: a public source (quoted), a
 * derivation from published figures, or a documented assumption. sim/README.md
 * lists the same table for humans.
 *
 * Multi-chip configurations are named like Cloud TPU slices: "v5e" (one chip),
 * "v5e-4x4", "v5p-2x2x1". tpk_sim_topology_parse turns such a name into the
 * chip and its torus dimensions, with a clear error when the name is wrong.
 *
 * Conventions: rates are per second, sizes in bytes, times in seconds.
 * Peak FLOP/s, HBM and ICI are per chip; VMEM, SMEM, MXUs, DMA engines are per
 * TensorCore (a chip has `tensorcores` of them).
 */
#ifndef TPK_SIM_H
#define TPK_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "lower/lower.h"

/* ---- Where a figure comes from ------------------------------------------ */
typedef enum TpkSimProvenance {
  TPK_SIM_PUBLISHED = 0, /* stated by the cited public source */
  TPK_SIM_DERIVED,       /* computed from published figures; the cite gives the formula */
  TPK_SIM_ASSUMED        /* nothing published; the cite says "assumed: ..." and why */
} TpkSimProvenance;

typedef struct TpkSimCite {
  TpkSimProvenance how;
  const char *source; /* the source and the quoted figure, or the derivation or
                         assumption with its reason; never NULL */
} TpkSimCite;

/* One entry per figure group of TpkChip; indexes TpkChip.cite. */
typedef enum TpkSimField {
  TPK_SIM_F_TENSORCORES = 0, /* tensorcores */
  TPK_SIM_F_MEGACORE,        /* megacore */
  TPK_SIM_F_MXUS,            /* mxus_per_core */
  TPK_SIM_F_MXU_SHAPE,       /* mxu_rows, mxu_cols */
  TPK_SIM_F_MXU_RATE,        /* mxu_macs_per_cell */
  TPK_SIM_F_CLOCK,           /* clock_hz */
  TPK_SIM_F_PEAK_BF16,       /* peak_bf16_flops */
  TPK_SIM_F_PEAK_INT8,       /* peak_int8_ops */
  TPK_SIM_F_PEAK_FP8,        /* peak_fp8_flops */
  TPK_SIM_F_HBM_BYTES,       /* hbm_bytes */
  TPK_SIM_F_HBM_BW,          /* hbm_bytes_per_s */
  TPK_SIM_F_VMEM,            /* vmem_bytes */
  TPK_SIM_F_SMEM,            /* smem_bytes */
  TPK_SIM_F_CMEM,            /* cmem_bytes */
  TPK_SIM_F_VREG,            /* vreg_sublanes, vreg_lanes */
  TPK_SIM_F_VPU_ALUS,        /* vpu_alus_per_lane */
  TPK_SIM_F_DMA_ENGINES,     /* dma_engines */
  TPK_SIM_F_DMA_LATENCY,     /* dma_latency_s */
  TPK_SIM_F_SPARSECORES,     /* sparsecores */
  TPK_SIM_F_ICI_LINKS,       /* ici_links */
  TPK_SIM_F_ICI_LINK_BW,     /* ici_link_bytes_per_s */
  TPK_SIM_F_ICI_LATENCY,     /* ici_hop_latency_s */
  TPK_SIM_F_TOPOLOGY,        /* torus_dims, max_axis */
  TPK_SIM_F_POD,             /* pod_chips */
  TPK_SIM_F_SLICE,           /* max_slice_chips */
  TPK_SIM_F_COUNT
} TpkSimField;

/* ---- One chip ------------------------------------------------------------
 * Every count and size below is positive unless its comment says when 0 is
 * allowed. The MXU figures multiply out to the published bf16 peak:
 *   tensorcores * mxus_per_core * mxu_rows * mxu_cols * mxu_macs_per_cell
 *     * 2 FLOP/MAC * clock_hz  ==  peak_bf16_flops   (within 1%)
 * (tpk_sim_chip_mxu_peak computes the left side), so a cycle count from the
 * MXU model converts to the published time. */
typedef struct TpkChip {
  const char *name;      /* short name used in device and topology names: "v5e" */
  const char *full_name; /* Google's name: "TPU v5e", "TPU7x (Ironwood)" */
  int generation;        /* TPU generation: 4, 5, 6, 7 */

  /* compute */
  int tensorcores;       /* TensorCores per chip (1 or 2) */
  bool megacore;         /* the chip's TensorCores appear as one device that
                            splits parallel grid axes between them (v4, v5p) */
  int mxus_per_core;     /* matrix units (systolic arrays) per TensorCore */
  int mxu_rows;          /* MXU systolic array rows (contraction side) */
  int mxu_cols;          /* MXU systolic array columns (output side) */
  int mxu_macs_per_cell; /* bf16 multiply-adds one MXU cell completes per cycle */
  double clock_hz;       /* TensorCore clock, Hz (published only for v4) */
  double peak_bf16_flops; /* peak bf16 matmul FLOP/s per chip */
  double peak_int8_ops;  /* peak int8 matmul OP/s per chip; 0: no int8 matmul
                            figure and no int8 MXU support is published */
  double peak_fp8_flops; /* peak fp8 matmul FLOP/s per chip; 0: no fp8 figure
                            is published for this chip */

  /* memory */
  uint64_t hbm_bytes;     /* HBM capacity per chip, bytes */
  double hbm_bytes_per_s; /* HBM bandwidth per chip, bytes/s */
  uint64_t vmem_bytes;    /* vector memory (VMEM) per TensorCore, bytes */
  uint64_t smem_bytes;    /* scalar memory (SMEM) per TensorCore, bytes */
  uint64_t cmem_bytes;    /* common memory (CMEM) per chip, bytes; 0: none */

  /* vector unit */
  int vreg_sublanes;     /* vreg shape: sublanes (8) ... */
  int vreg_lanes;        /* ... by lanes (128), 32-bit elements */
  int vpu_alus_per_lane; /* VPU ALUs at each (sublane, lane) position, i.e.
                            full-vreg elementwise ops per cycle */

  /* DMA */
  int dma_engines;      /* concurrent HBM<->VMEM DMA streams per TensorCore */
  double dma_latency_s; /* issue of a DMA to its first byte landing, s */

  int sparsecores; /* SparseCores per chip; 0: none */

  /* interconnect */
  int ici_links;               /* ICI links (ports) per chip */
  double ici_link_bytes_per_s; /* per link, ONE direction, bytes/s */
  double ici_hop_latency_s;    /* latency of one chip-to-chip hop, s */
  int torus_dims;              /* 2: 2D torus (AxB names), 3: 3D torus (AxBxC) */
  int max_axis;                /* 2D: most chips along one axis; 3D: 0, axes are
                                  limited only by the slice size and the cube rule
                                  (an axis is at most 4 or a multiple of 4) */
  int pod_chips;               /* chips in one pod */
  int max_slice_chips;         /* chips in the largest single slice */

  TpkSimCite cite[TPK_SIM_F_COUNT]; /* source of every figure group above */
} TpkChip;

/* ---- Multi-chip configuration ------------------------------------------ */
typedef struct TpkSimTopology {
  const TpkChip *chip; /* the chip every position holds */
  int ndims;           /* == chip->torus_dims */
  int dims[3];         /* chips along each axis; unused axes are 1 */
  bool wrap[3];        /* axis has a wraparound link (is a ring, not a line):
                          2D chips on a full axis (== max_axis); 3D chips on
                          every axis when all axes are multiples of 4 (whole
                          cubes: the optical switches close the rings), else
                          on none */
  int64_t chips;       /* product of dims */
} TpkSimTopology;

/* The chips, in generation order; index 0 .. tpk_sim_chip_count()-1. */
int tpk_sim_chip_count(void);
const TpkChip *tpk_sim_chip_at(int i); /* NULL when i is out of range */

/* Chip by short name ("v4", "v5e", "v5p", "v6e", "v7") or alias ("trillium",
 * "tpu7x", "ironwood"); NULL when unknown. */
const TpkChip *tpk_sim_chip_find(const char *name);

/* The MXU-side peak: tensorcores * mxus * rows * cols * macs * 2 * clock. */
double tpk_sim_chip_mxu_peak(const TpkChip *chip);

/* "tensorcores", "mxu_shape", ... (for messages and the README table). */
const char *tpk_sim_field_name(TpkSimField f);

/* Parse "<chip>" (one chip) or "<chip>-<A>x<B>" / "<chip>-<A>x<B>x<C>" into
 * *out. Errors (TPK_ERR_INVALID, message in err): unknown chip (lists the
 * known ones), malformed dimensions, a dimension count that does not match
 * the chip's torus, an axis the chip's pod cannot form, more chips than the
 * chip's largest slice. */
TpkStatus tpk_sim_topology_parse(const char *name, TpkSimTopology *out, TpkError *err);

/* ---- Costs (sim/cost.c) ---------------------------------------------------
 * What one TensorCore's units take, in cycles of the chip's clock, from first
 * principles and the chip's figures. Every assumption is a named constant in
 * cost.c with its reason, and listed in sim/README.md. */

/* [M,K] x [K,N] with operands of dtype dt on one TensorCore's MXUs: weight
 * tiles of rows x cols (K and N padded up to them) are spread over the MXUs;
 * each streams the M rows of the left operand, one per cycle per
 * multiply-add a cell does, or waits for its next weights when M is shorter
 * than their load; plus one systolic fill and drain. f32 takes the bf16
 * passes of XLA's HIGHEST precision; int8 and fp8 run at their published
 * rate relative to bf16. */
double tpk_sim_matmul_cycles(const TpkChip *c, int64_t M, int64_t K, int64_t N, TpkDType dt);
/* ... of which the MXUs are occupied (the next matmul may follow) ... */
double tpk_sim_matmul_busy_cycles(const TpkChip *c, int64_t M, int64_t K, int64_t N, TpkDType dt);
/* ... and the fill and drain latency until the last result is out. */
double tpk_sim_matmul_latency_cycles(const TpkChip *c, TpkDType dt);
/* VPU: `elements` elements through `ops` vreg instructions each (a vreg holds
 * sublanes x lanes 32-bit elements; narrower types are computed unpacked). */
double tpk_sim_vpu_cycles(const TpkChip *c, int64_t elements, double ops);
/* The vreg instructions one element of an elementwise IR op costs. */
double tpk_sim_vpu_ops(int opcode);
/* A reduction of `elements` elements to `outputs` results: one elementwise
 * combine per input vreg, then a cross-lane tree per output vreg. */
double tpk_sim_reduce_cycles(const TpkChip *c, int64_t elements, int64_t outputs);
/* An inclusive scan of `elements` along lines of `len`: a log-step
 * (Hillis-Steele) scan, ceil(log2(len)) shift-and-combine passes over the
 * vregs, each a lane/sublane rotate and an op. */
double tpk_sim_scan_cycles(const TpkChip *c, int64_t elements, int64_t len);
/* DMA: cycles from issue to the first byte, and cycles `bytes` take at the
 * chip's HBM bandwidth (shared by its TensorCores and DMA engines). */
double tpk_sim_dma_latency_cycles(const TpkChip *c);
double tpk_sim_hbm_cycles(const TpkChip *c, int64_t bytes);
/* The chip's peak for matmuls in dtype dt, FLOP/s (bf16's for types with no
 * faster published rate). */
double tpk_sim_peak_flops(const TpkChip *c, TpkDType dt);
/* The roofline: the least time `flops` of dt matmul work and `bytes` of HBM
 * traffic take on the whole chip, seconds. */
double tpk_sim_roofline_seconds(const TpkChip *c, double flops, double bytes, TpkDType dt);

/* ---- Timing a kernel (sim/schedule.c) ---------------------------------------
 * The simulator program is the lowered tile-level IR (the host's passes,
 * shapes bound). tpk_sim_schedule walks it grid step by grid step onto a
 * timeline of the chip's units, with Pallas-style double-buffered DMAs. */

typedef struct TpkFunc TpkFunc;
typedef struct TpkTimeline TpkTimeline;

typedef struct TpkSimReport {
  const TpkChip *chip;
  double cycles, seconds; /* the kernel's makespan, and at the chip's clock */
  double flops;           /* matmul FLOPs (2MNK) + one per element of elementwise ops and reductions */
  double matmul_flops;    /* the matmul part alone */
  TpkDType matmul_dtype;  /* operand dtype of the first matmul (sets the roofline's peak) */
  double hbm_bytes;       /* bytes moved between HBM and VMEM */
  double roofline_seconds; /* max(matmul FLOPs / peak, bytes / HBM bandwidth) */
  bool memory_bound;      /* the bytes term of the roofline is the larger */
  double mxu_utilisation, vpu_utilisation, hbm_utilisation; /* busy fraction (core 0's units, HBM) */
  bool follows_data;      /* integers read from the data steered the walk (the time depends on them) */
} TpkSimReport;

/* Time kernel f (lowered, every shape constant) on one chip. *timeline, when
 * given, receives the timeline (for a trace; the caller destroys it). Integers
 * the kernel reads from its data to choose loop bounds, branches and block
 * indices are sampled (from the distribution the kernel declares for the
 * input, TpkParam.sample, else uniform in [0, 8); repeatable;
 * rep->follows_data says whether there were any). Errors: a loop or grid bound the walk cannot
 * compute (from vector or float data), an op the simulator does not model
 * yet. */
TpkStatus tpk_sim_schedule(const TpkFunc *f, const TpkChip *chip, TpkSimReport *rep, TpkTimeline **timeline,
                           TpkError *err);
/* The same for one launch: args[i] is parameter i's data as the host runs
 * it (a tensor's bytes, row-major; a scalar's value in its dtype), and the
 * walk follows the control flow those values take. */
TpkStatus tpk_sim_schedule_args(const TpkFunc *f, const TpkChip *chip, void *const *args, TpkSimReport *rep,
                                TpkTimeline **timeline, TpkError *err);

/* The lowering target of a launch on a chip: its VMEM, 1 MiB auto-tiles.
 * `device` ("sim:v5e") names it in messages and must outlive the target. */
TpkTarget tpk_sim_target(const TpkChip *chip, const char *device);

/* ---- Timing without values (sim/timing.c) ---------------------------------
 * Bind kernel f's shape symbols and tunables (tpk_bind: f is not changed),
 * lower and plan it for the chip's VMEM as a launch on "sim:<chip>" does, and
 * schedule it: the same report as that launch, without generating or
 * compiling C (what `tpk tune` calls per configuration). Errors: tpk_bind's
 * (TPK_ERR_INVALID, with the .tpk line in err), TPK_ERR_NOMEM when its blocks
 * do not fit the chip's VMEM (the planner's message), and
 * tpk_sim_schedule's. */
TpkStatus tpk_sim_time_kernel(const TpkFunc *f, const TpkBinding *binds, int nbinds, const TpkChip *chip,
                              TpkSimReport *rep, TpkError *err);

#endif
