/*
 * chips.c — what the simulator knows about each TPU chip, and where it
 * learned it.
 *
 * Input: nothing but public documents. Output: one static const table of
 * TpkChip, read by every simulator unit (MXU, VPU, DMA, ICI), and the parser
 * for multi-chip names ("v5p-2x2x1").
 *
 * Every figure carries a TpkSimCite: the public source and the figure as that
 * source states it, or the derivation from published figures, or — when
 * nothing is published — "assumed: ..." with the reason. sim/README.md mirrors
 * this table; tests/sim/test_chips.c checks it is complete and consistent.
 *
 * The one figure Google does not publish for any chip after v4 is the clock.
 * We derive it from the published bf16 peak and the published MXU count and
 * size, so that the MXU model reproduces the published peak exactly. For v6e
 * and TPU7x this needs 2 MACs per MXU cell per cycle (assumed; see the README:
 * the published "two 256x256 MXUs" would otherwise imply a 3.5 GHz and 4.4 GHz
 * clock).
 */
#include <stdio.h>
#include <string.h>

#include "sim/sim.h"

/* ---- Sources, cited by every entry below --------------------------------- */
#define CLOUD_V4 "Google Cloud TPU docs, \"TPU v4\" (cloud.google.com/tpu/docs/v4)"
#define CLOUD_V5E "Google Cloud TPU docs, \"TPU v5e\" (cloud.google.com/tpu/docs/v5e)"
#define CLOUD_V5P "Google Cloud TPU docs, \"TPU v5p\" (cloud.google.com/tpu/docs/v5p)"
#define CLOUD_V6E "Google Cloud TPU docs, \"TPU v6e\" (cloud.google.com/tpu/docs/v6e)"
#define CLOUD_7X "Google Cloud TPU docs, \"TPU7x (Ironwood)\" (cloud.google.com/tpu/docs/tpu7x)"
#define BLOG_IRONWOOD                                                                              \
  "Google blog, \"Ironwood: The first Google TPU for the age of inference\", Apr 2025 "            \
  "(blog.google/products/google-cloud/ironwood-tpu-age-of-inference)"
#define ISCA_V4                                                                                    \
  "Jouppi et al., \"TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with " \
  "Hardware Support for Embeddings\", ISCA 2023 (arXiv:2304.01433)"
#define JAX_TPUINFO                                                                                \
  "JAX Pallas TPU hardware table, jax/_src/pallas/mosaic/tpu_info.py "                             \
  "(docs.jax.dev/en/latest/pallas/tpu/hardware.html)"
#define JAX_CHIPVER "JAX docs, jax.experimental.pallas.tpu.ChipVersion (megacore support table)"
#define SCALING_BOOK                                                                               \
  "Austin et al. (Google DeepMind), \"How to Scale Your Model\", part 2 \"How to Think About "     \
  "TPUs\" (jax-ml.github.io/scaling-book/tpus)"
#define XPK "Google AI-Hypercomputer/xpk, src/xpk/core/system_characteristics.py (supported topologies)"

#define PUB(s) {TPK_SIM_PUBLISHED, s}
#define DER(s) {TPK_SIM_DERIVED, s}
#define ASM(s) {TPK_SIM_ASSUMED, "assumed: " s}

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* Assumptions shared by every chip (nothing about them is published). */
#define DMA_ENGINES_WHY                                                                            \
  "4 concurrent DMA streams per TensorCore. The only public word is \"multiple DMA engines\" ("    \
  SCALING_BOOK ", appendix C); 4 covers a double-buffered pipeline (2 inputs + 1 output in "      \
  "flight) and HBM bandwidth, not the stream count, bounds the total"
#define DMA_LATENCY_WHY                                                                            \
  "500 ns from DMA issue to first byte in VMEM. No TPU figure is published; GPU microbenchmarks "  \
  "put an HBM access at several hundred ns, and a DMA adds descriptor handling on top. Only "     \
  "small copies are sensitive to it"
#define ICI_LATENCY_WHY                                                                            \
  "1 us per ICI hop, the figure " SCALING_BOOK " uses in its worked ICI example (question 5); "    \
  "not a measured or specified value"
#define VREG_WHY PUB(JAX_TPUINFO ": NUM_SUBLANES = 8, NUM_LANES = 128 for every generation")
#define SMEM_WHY PUB(JAX_TPUINFO ": smem_capacity_bytes = 1024 * 1024 (1 MiB per core)")

static const TpkChip chips[] = {
    {
        .name = "v4",
        .full_name = "TPU v4",
        .generation = 4,
        .tensorcores = 2,
        .megacore = true,
        .mxus_per_core = 4,
        .mxu_rows = 128,
        .mxu_cols = 128,
        .mxu_macs_per_cell = 1,
        .clock_hz = 1.05e9,
        .peak_bf16_flops = 275e12,
        .peak_int8_ops = 275e12,
        .peak_fp8_flops = 0,
        .hbm_bytes = 32 * GiB,
        .hbm_bytes_per_s = 1200e9,
        .vmem_bytes = 16 * MiB,
        .smem_bytes = 1 * MiB,
        .cmem_bytes = 128 * MiB,
        .vreg_sublanes = 8,
        .vreg_lanes = 128,
        .vpu_alus_per_lane = 2,
        .dma_engines = 4,
        .dma_latency_s = 500e-9,
        .sparsecores = 4,
        .ici_links = 6,
        .ici_link_bytes_per_s = 45e9,
        .ici_hop_latency_s = 1e-6,
        .torus_dims = 3,
        .max_axis = 0,
        .pod_chips = 4096,
        .max_slice_chips = 4096,
        .cite =
            {
                [TPK_SIM_F_TENSORCORES] = PUB(CLOUD_V4 ": \"Each TPU v4 chip contains two TensorCores\""),
                [TPK_SIM_F_MEGACORE] = PUB(JAX_CHIPVER ": v4 \"Megacore support: Yes\"; " SCALING_BOOK
                                                       ": two TPU cores that \"share memory and can be "
                                                       "thought of as one large accelerator ... since TPU v4 "
                                                       "(known as megacore)\""),
                [TPK_SIM_F_MXUS] = PUB(CLOUD_V4 ": \"Each TensorCore has four matrix-multiply units (MXUs)\""),
                [TPK_SIM_F_MXU_SHAPE] = PUB(SCALING_BOOK ": 128x128 systolic array on all generations "
                                                         "before v6e; " JAX_TPUINFO ": mxu_column_size = 128"),
                [TPK_SIM_F_MXU_RATE] = DER("275e12 / (2 cores * 4 MXUs * 128*128 * 2 FLOP * 1.05e9 Hz) = 1.00"),
                [TPK_SIM_F_CLOCK] = PUB(ISCA_V4 ": clock rate 1050 MHz (consistent with the 275 TFLOP/s peak, "
                                                "see mxu_macs_per_cell)"),
                [TPK_SIM_F_PEAK_BF16] = PUB(CLOUD_V4 ": \"Peak compute per chip 275 teraflops (bf16 or int8)\""),
                [TPK_SIM_F_PEAK_INT8] = PUB(CLOUD_V4 ": \"275 teraflops (bf16 or int8)\" (int8 runs at the bf16 "
                                                     "rate)"),
                [TPK_SIM_F_PEAK_FP8] = PUB("0 = no fp8: no figure in " CLOUD_V4 "; " JAX_TPUINFO
                                           ": fp8_ops_per_second = 0, and its matmul-support table for "
                                           "generation 4 accepts only f32/bf16 (and s8 rhs)"),
                [TPK_SIM_F_HBM_BYTES] = PUB(CLOUD_V4 ": \"HBM2 capacity and bandwidth 32 GiB, 1200 GBps\""),
                [TPK_SIM_F_HBM_BW] = PUB(CLOUD_V4 ": \"32 GiB, 1200 GBps\" (" JAX_TPUINFO " has 1.23e12)"),
                [TPK_SIM_F_VMEM] = PUB(JAX_TPUINFO ": vmem_capacity_bytes = 16 MiB per core"),
                [TPK_SIM_F_SMEM] = SMEM_WHY,
                [TPK_SIM_F_CMEM] = PUB(ISCA_V4 ": 128 MiB CMEM per chip; " JAX_TPUINFO
                                       ": cmem_capacity_bytes = 134e6 per chip"),
                [TPK_SIM_F_VREG] = VREG_WHY,
                [TPK_SIM_F_VPU_ALUS] = PUB(SCALING_BOOK ": \"Each (lane, sublane) pair on v4 contains 2 standard "
                                                        "floating-point and integer ALUs\" (2048 per core)"),
                [TPK_SIM_F_DMA_ENGINES] = ASM(DMA_ENGINES_WHY),
                [TPK_SIM_F_DMA_LATENCY] = ASM(DMA_LATENCY_WHY),
                [TPK_SIM_F_SPARSECORES] = PUB(ISCA_V4 ": four SparseCores per TPU v4 chip"),
                [TPK_SIM_F_ICI_LINKS] = PUB(SCALING_BOOK ": \"TPU v4 and TPU v5p are connected to the nearest 6 "
                                                         "neighbors (forming a 3D torus)\""),
                [TPK_SIM_F_ICI_LINK_BW] = PUB(SCALING_BOOK ": ICI BW/link one-way 4.5e10 bytes/s (TPU v4p); "
                                                           "consistent with " CLOUD_V4 " \"Bisection bandwidth per "
                                                           "Pod 24 TB/s\" over the 512 links that cut a 16x16x16 "
                                                           "torus (46.9 GB/s each)"),
                [TPK_SIM_F_ICI_LATENCY] = ASM(ICI_LATENCY_WHY),
                [TPK_SIM_F_TOPOLOGY] = PUB(CLOUD_V4 ": \"3D mesh ... can be configured as a 3D torus\"; slice "
                                                    "axes \"are all <=4 or integer multiples of 4\" (Cloud TPU "
                                                    "\"TPU types and topologies\")"),
                [TPK_SIM_F_POD] = PUB(CLOUD_V4 ": \"TPU Pod size 4096 chips\""),
                [TPK_SIM_F_SLICE] = PUB(SCALING_BOOK ": largest v4 slice (superpod) 16x16x16; " XPK
                                                     ": v4 max_cubes = 64 (64 * 64 = 4096 chips)"),
            },
    },
    {
        .name = "v5e",
        .full_name = "TPU v5e",
        .generation = 5,
        .tensorcores = 1,
        .megacore = false,
        .mxus_per_core = 4,
        .mxu_rows = 128,
        .mxu_cols = 128,
        .mxu_macs_per_cell = 1,
        .clock_hz = 1.5e9,
        .peak_bf16_flops = 197e12,
        .peak_int8_ops = 393e12,
        .peak_fp8_flops = 0,
        .hbm_bytes = 16 * GiB,
        .hbm_bytes_per_s = 819e9,
        .vmem_bytes = 128 * MiB,
        .smem_bytes = 1 * MiB,
        .cmem_bytes = 0,
        .vreg_sublanes = 8,
        .vreg_lanes = 128,
        .vpu_alus_per_lane = 4,
        .dma_engines = 4,
        .dma_latency_s = 500e-9,
        .sparsecores = 0,
        .ici_links = 4,
        .ici_link_bytes_per_s = 50e9,
        .ici_hop_latency_s = 1e-6,
        .torus_dims = 2,
        .max_axis = 16,
        .pod_chips = 256,
        .max_slice_chips = 256,
        .cite =
            {
                [TPK_SIM_F_TENSORCORES] = PUB(CLOUD_V5E ": \"Each v5e chip contains one TensorCore\""),
                [TPK_SIM_F_MEGACORE] = PUB("one TensorCore, nothing to split; " JAX_CHIPVER
                                           ": v5e \"Megacore support: No\""),
                [TPK_SIM_F_MXUS] = PUB(CLOUD_V5E ": \"Each TensorCore has four matrix-multiply units (MXUs)\""),
                [TPK_SIM_F_MXU_SHAPE] = PUB(SCALING_BOOK ": 128x128 before v6e; " JAX_TPUINFO
                                                         ": mxu_column_size = 128"),
                [TPK_SIM_F_MXU_RATE] = DER("197e12 / (4 MXUs * 128*128 * 2 FLOP * 1.5e9 Hz) = 1.002"),
                [TPK_SIM_F_CLOCK] = PUB(SCALING_BOOK ": \"about 5e13 bf16 FLOPs/s per MXU at 1.5GHz on TPU "
                                                     "v5e\" (MXU model gives 196.6 TFLOP/s, 0.2% under the "
                                                     "published 197)"),
                [TPK_SIM_F_PEAK_BF16] = PUB(CLOUD_V5E ": \"Peak compute per chip (bf16) 197 TFLOPs\""),
                [TPK_SIM_F_PEAK_INT8] = PUB(CLOUD_V5E ": \"Peak compute per chip (Int8) 393 TOPs\""),
                [TPK_SIM_F_PEAK_FP8] = PUB("0 = no fp8 figure published: none in " CLOUD_V5E "; " JAX_TPUINFO
                                           ": fp8_ops_per_second = 0 (\"Not Available\"). JAX accepts fp8 "
                                           "operands on generation 5, presumably at the bf16 rate"),
                [TPK_SIM_F_HBM_BYTES] = PUB(CLOUD_V5E ": \"HBM2 capacity and bandwidth 16 GB, 819 GBps\" (GB "
                                                      "here is GiB: " JAX_TPUINFO " gives 17.2e9 bytes)"),
                [TPK_SIM_F_HBM_BW] = PUB(CLOUD_V5E ": \"16 GB, 819 GBps\" (another version of the page: "
                                                   "\"800 GiBps\"; " JAX_TPUINFO ": 8.20e11)"),
                [TPK_SIM_F_VMEM] = PUB(JAX_TPUINFO ": vmem_capacity_bytes = 128 MiB per core; " SCALING_BOOK
                                                   ": \"128 MiB on TPU v5e\""),
                [TPK_SIM_F_SMEM] = SMEM_WHY,
                [TPK_SIM_F_CMEM] = PUB(JAX_TPUINFO ": cmem_capacity_bytes = 0"),
                [TPK_SIM_F_VREG] = VREG_WHY,
                [TPK_SIM_F_VPU_ALUS] = DER(SCALING_BOOK ", appendix C: \"in v5 you can add 4 pairs of f32 "
                                                        "values together from VREGs in each cycle\", read as 4 "
                                                        "full-vreg ALU ops per cycle"),
                [TPK_SIM_F_DMA_ENGINES] = ASM(DMA_ENGINES_WHY),
                [TPK_SIM_F_DMA_LATENCY] = ASM(DMA_LATENCY_WHY),
                [TPK_SIM_F_SPARSECORES] = PUB("none: " CLOUD_V5E " describes only the TensorCore, and " JAX_TPUINFO
                                              " gives v5e no sparse_core entry"),
                [TPK_SIM_F_ICI_LINKS] = PUB(CLOUD_V5E ": \"ICI ports per chip 4\""),
                [TPK_SIM_F_ICI_LINK_BW] = DER(CLOUD_V5E ": \"Bidirectional inter-chip interconnect (ICI) bandwidth "
                                                        "(per chip) 400 GBps\" / 4 ports / 2 directions = 50 GB/s; "
                                                        "\"Bisection bandwidth per Pod 1.6 TB/s\" / 32 links cut "
                                                        "in a 16x16 torus agrees (" SCALING_BOOK
                                                        " uses 4.5e10)"),
                [TPK_SIM_F_ICI_LATENCY] = ASM(ICI_LATENCY_WHY),
                [TPK_SIM_F_TOPOLOGY] = PUB(CLOUD_V5E ": \"Interconnect topology 2D torus\"; " SCALING_BOOK
                                                     ": pods are a 16x16 torus, wraparound only on an axis of 16"),
                [TPK_SIM_F_POD] = PUB(CLOUD_V5E ": \"TPU Pod size 256 chips\""),
                [TPK_SIM_F_SLICE] = PUB(CLOUD_V5E ": largest slice v5litepod-256 (16x16); " SCALING_BOOK
                                                  ": \"cannot expand beyond a 16x16 torus\""),
            },
    },
    {
        .name = "v5p",
        .full_name = "TPU v5p",
        .generation = 5,
        .tensorcores = 2,
        .megacore = true,
        .mxus_per_core = 4,
        .mxu_rows = 128,
        .mxu_cols = 128,
        .mxu_macs_per_cell = 1,
        .clock_hz = 1.751e9,
        .peak_bf16_flops = 459e12,
        .peak_int8_ops = 918e12,
        .peak_fp8_flops = 459e12,
        .hbm_bytes = 95 * GiB,
        .hbm_bytes_per_s = 2765e9,
        .vmem_bytes = 64 * MiB,
        .smem_bytes = 1 * MiB,
        .cmem_bytes = 0,
        .vreg_sublanes = 8,
        .vreg_lanes = 128,
        .vpu_alus_per_lane = 4,
        .dma_engines = 4,
        .dma_latency_s = 500e-9,
        .sparsecores = 4,
        .ici_links = 6,
        .ici_link_bytes_per_s = 100e9,
        .ici_hop_latency_s = 1e-6,
        .torus_dims = 3,
        .max_axis = 0,
        .pod_chips = 8960,
        .max_slice_chips = 6144,
        .cite =
            {
                [TPK_SIM_F_TENSORCORES] = PUB(CLOUD_V5P ": \"Number of TensorCores per chip 2\""),
                [TPK_SIM_F_MEGACORE] = PUB(JAX_CHIPVER ": v5p \"Megacore support: Yes\""),
                [TPK_SIM_F_MXUS] = PUB(CLOUD_V5P ": \"Each TensorCore has four Matrix Multiply Units (MXU)\""),
                [TPK_SIM_F_MXU_SHAPE] = PUB(SCALING_BOOK ": 128x128 before v6e; " JAX_TPUINFO
                                                         ": mxu_column_size = 128"),
                [TPK_SIM_F_MXU_RATE] = ASM("1 MAC per cell per cycle, the classic systolic array (as v4 and "
                                           "v5e, where the clock is published); the clock is then derived"),
                [TPK_SIM_F_CLOCK] = DER("459e12 / (2 cores * 4 MXUs * 128*128 * 1 MAC * 2 FLOP) = 1.751 GHz; "
                                        "no clock is published"),
                [TPK_SIM_F_PEAK_BF16] = PUB(CLOUD_V5P ": \"Peak compute per chip (BF16) (TFLOPs) 459\""),
                [TPK_SIM_F_PEAK_INT8] = PUB(JAX_TPUINFO ": int8_ops_per_second = 9.18e14 per chip; " SCALING_BOOK
                                                        ": FLOPs/s/chip (int8) 9.18e14"),
                [TPK_SIM_F_PEAK_FP8] = PUB(CLOUD_V5P ": \"Peak compute per chip (FP8) (TFLOPs) 459\" (fp8 runs at "
                                                     "the bf16 rate; no fp8 speed-up before TPU7x)"),
                [TPK_SIM_F_HBM_BYTES] = PUB(CLOUD_V5P ": \"HBM capacity per chip (GiB) 95\""),
                [TPK_SIM_F_HBM_BW] = PUB(CLOUD_V5P ": \"HBM bandwidth per chip (GBps) 2765\" (another version: "
                                                   "\"2575 GiBps\", the same rate)"),
                [TPK_SIM_F_VMEM] = PUB(JAX_TPUINFO ": vmem_capacity_bytes = 64 MiB per core"),
                [TPK_SIM_F_SMEM] = SMEM_WHY,
                [TPK_SIM_F_CMEM] = PUB(JAX_TPUINFO ": cmem_capacity_bytes = 0"),
                [TPK_SIM_F_VREG] = VREG_WHY,
                [TPK_SIM_F_VPU_ALUS] = DER(SCALING_BOOK ", appendix C: \"in v5 you can add 4 pairs of f32 "
                                                        "values together from VREGs in each cycle\""),
                [TPK_SIM_F_DMA_ENGINES] = ASM(DMA_ENGINES_WHY),
                [TPK_SIM_F_DMA_LATENCY] = ASM(DMA_LATENCY_WHY),
                [TPK_SIM_F_SPARSECORES] = PUB(CLOUD_V5P ": \"Number of SparseCores per chip 4\""),
                [TPK_SIM_F_ICI_LINKS] = PUB(SCALING_BOOK ": \"TPU v4 and TPU v5p are connected to the nearest 6 "
                                                         "neighbors (forming a 3D torus)\""),
                [TPK_SIM_F_ICI_LINK_BW] = DER(CLOUD_V5P ": \"Bidirectional inter-chip interconnect (ICI) bandwidth "
                                                        "per chip (GBps) 1200\" / 6 links / 2 directions = 100 "
                                                        "GB/s (\"4800 Gbps\" one way in another version; "
                                                        SCALING_BOOK " uses 9e10)"),
                [TPK_SIM_F_ICI_LATENCY] = ASM(ICI_LATENCY_WHY),
                [TPK_SIM_F_TOPOLOGY] = PUB(CLOUD_V5P ": \"Interconnect topology 3D torus\"; slice shapes 2x2x1 "
                                                     "... 16x16x24 (" XPK ": axes <= 4 or multiples of 4)"),
                [TPK_SIM_F_POD] = PUB(CLOUD_V5P ": \"Number of chips per pod 8960\""),
                [TPK_SIM_F_SLICE] = PUB(CLOUD_V5P ": \"The largest job that can be scheduled is a 96 cube (6144 "
                                                  "chip) job\"; \"The maximum v5p shape is 16x16x24\""),
            },
    },
    {
        .name = "v6e",
        .full_name = "TPU v6e (Trillium)",
        .generation = 6,
        .tensorcores = 1,
        .megacore = false,
        .mxus_per_core = 2,
        .mxu_rows = 256,
        .mxu_cols = 256,
        .mxu_macs_per_cell = 2,
        .clock_hz = 1.751e9,
        .peak_bf16_flops = 918e12,
        .peak_int8_ops = 1836e12,
        .peak_fp8_flops = 918e12,
        .hbm_bytes = 32 * GiB,
        .hbm_bytes_per_s = 1638e9,
        .vmem_bytes = 128 * MiB,
        .smem_bytes = 1 * MiB,
        .cmem_bytes = 0,
        .vreg_sublanes = 8,
        .vreg_lanes = 128,
        .vpu_alus_per_lane = 4,
        .dma_engines = 4,
        .dma_latency_s = 500e-9,
        .sparsecores = 2,
        .ici_links = 4,
        .ici_link_bytes_per_s = 100e9,
        .ici_hop_latency_s = 1e-6,
        .torus_dims = 2,
        .max_axis = 16,
        .pod_chips = 256,
        .max_slice_chips = 256,
        .cite =
            {
                [TPK_SIM_F_TENSORCORES] = PUB(CLOUD_V6E ": \"Each v6e chip contains one TensorCore\""),
                [TPK_SIM_F_MEGACORE] = PUB("one TensorCore, nothing to split; " JAX_CHIPVER
                                           ": v6e \"Megacore support: No\""),
                [TPK_SIM_F_MXUS] = PUB(CLOUD_V6E ": \"Each TensorCore contains two 256x256 matrix-multiply units "
                                                 "(MXU)\"; " JAX_TPUINFO ": num_mxus = 2 (an earlier version of "
                                                 "the Cloud page said 4 MXUs)"),
                [TPK_SIM_F_MXU_SHAPE] = PUB(CLOUD_V6E ": \"two 256x256 matrix-multiply units\"; " JAX_TPUINFO
                                                      ": mxu_column_size = 256"),
                [TPK_SIM_F_MXU_RATE] = ASM("2 MACs per cell per cycle. With the published 2 MXUs of 256x256 "
                                           "and 918 TFLOP/s, 1 MAC/cell/cycle would need a 3.50 GHz clock, "
                                           "twice v5p's derived 1.75 GHz. Google's Trillium announcement "
                                           "(cloud.google.com/blog, May 2024) credits the 4.7x over v5e to "
                                           "\"expanding the size of matrix multiply units (MXUs) and increasing "
                                           "the clock speed\", which 2 MACs/cell at 1.75 GHz (the per-cycle "
                                           "MAC count of 4 such MXUs) fits. Only the product mxus * cells * "
                                           "macs matters for matmul time"),
                [TPK_SIM_F_CLOCK] = DER("918e12 / (1 core * 2 MXUs * 256*256 * 2 MACs * 2 FLOP) = 1.751 GHz; "
                                        "no clock is published (3.50 GHz if each cell did 1 MAC per cycle)"),
                [TPK_SIM_F_PEAK_BF16] = PUB(CLOUD_V6E ": \"Peak compute per chip (bf16) 918 TFLOPs\""),
                [TPK_SIM_F_PEAK_INT8] = PUB(CLOUD_V6E ": \"Peak compute per chip (Int8) 1836 TOPs\""),
                [TPK_SIM_F_PEAK_FP8] = PUB(CLOUD_7X ", comparison table: v6e \"Peak compute per chip (FP8) "
                                                    "(TFLOPs) 918\" (the bf16 rate)"),
                [TPK_SIM_F_HBM_BYTES] = PUB(CLOUD_V6E ": \"HBM capacity per chip 32 GB\" (GiB: " CLOUD_7X
                                                      " lists 32 GiB; " JAX_TPUINFO " 34.4e9 bytes)"),
                [TPK_SIM_F_HBM_BW] = PUB(CLOUD_V6E ": \"HBM bandwidth per chip 1638 GBps\" (1640 GBps in "
                                                   "another version)"),
                [TPK_SIM_F_VMEM] = PUB(JAX_TPUINFO ": vmem_capacity_bytes = 128 MiB per core"),
                [TPK_SIM_F_SMEM] = SMEM_WHY,
                [TPK_SIM_F_CMEM] = PUB(JAX_TPUINFO ": cmem_capacity_bytes = 0"),
                [TPK_SIM_F_VREG] = PUB(CLOUD_V6E ": \"a 128x8 vector processing unit (VPU) with 128 lanes x 8 "
                                                 "sublanes\""),
                [TPK_SIM_F_VPU_ALUS] = ASM("4 ALUs per (sublane, lane), as published for v5 (" SCALING_BOOK
                                           "); nothing is published for v6e"),
                [TPK_SIM_F_DMA_ENGINES] = ASM(DMA_ENGINES_WHY),
                [TPK_SIM_F_DMA_LATENCY] = ASM(DMA_LATENCY_WHY),
                [TPK_SIM_F_SPARSECORES] = PUB(JAX_TPUINFO ": sparse_core = SparseCoreInfo(num_cores=2, ...)"),
                [TPK_SIM_F_ICI_LINKS] = PUB(CLOUD_V6E ": \"ICI ports per chip 4\""),
                [TPK_SIM_F_ICI_LINK_BW] = DER(CLOUD_V6E ": \"Bidirectional inter-chip interconnect (ICI) bandwidth "
                                                        "(per chip) 800 GBps\" / 4 ports / 2 directions = 100 "
                                                        "GB/s; \"Bisection bandwidth per Pod 3.2 TB/s\" / 32 links "
                                                        "agrees (" SCALING_BOOK " uses 9e10)"),
                [TPK_SIM_F_ICI_LATENCY] = ASM(ICI_LATENCY_WHY),
                [TPK_SIM_F_TOPOLOGY] = PUB(CLOUD_V6E ": \"Interconnect topology 2D torus\"; " SCALING_BOOK
                                                     ": 16x16 pods, wraparound only on an axis of 16"),
                [TPK_SIM_F_POD] = PUB(CLOUD_V6E ": \"TPU Pod size 256 chips\""),
                [TPK_SIM_F_SLICE] = PUB(CLOUD_V6E ": largest slice v6e-256 (16x16); " SCALING_BOOK
                                                  ": \"cannot expand beyond a 16x16 torus\""),
            },
    },
    {
        .name = "v7",
        .full_name = "TPU7x (Ironwood)",
        .generation = 7,
        .tensorcores = 2,
        .megacore = false,
        .mxus_per_core = 2,
        .mxu_rows = 256,
        .mxu_cols = 256,
        .mxu_macs_per_cell = 2,
        .clock_hz = 2.2e9,
        .peak_bf16_flops = 2307e12,
        .peak_int8_ops = 0,
        .peak_fp8_flops = 4614e12,
        .hbm_bytes = 192 * GiB,
        .hbm_bytes_per_s = 7.37e12,
        .vmem_bytes = 64 * MiB,
        .smem_bytes = 1 * MiB,
        .cmem_bytes = 0,
        .vreg_sublanes = 8,
        .vreg_lanes = 128,
        .vpu_alus_per_lane = 4,
        .dma_engines = 4,
        .dma_latency_s = 500e-9,
        .sparsecores = 4,
        .ici_links = 6,
        .ici_link_bytes_per_s = 100e9,
        .ici_hop_latency_s = 1e-6,
        .torus_dims = 3,
        .max_axis = 0,
        .pod_chips = 9216,
        .max_slice_chips = 9216,
        .cite =
            {
                [TPK_SIM_F_TENSORCORES] = PUB(CLOUD_7X ": \"Each TPU7x chip contains two TensorCores and four "
                                                      "SparseCores\""),
                [TPK_SIM_F_MEGACORE] = PUB(JAX_CHIPVER ": 7x \"Megacore support: No\" (each TensorCore is its own "
                                                       "device)"),
                [TPK_SIM_F_MXUS] = PUB(JAX_TPUINFO ": TPU7x num_mxus = 2 per core (not on the Cloud page)"),
                [TPK_SIM_F_MXU_SHAPE] = PUB(JAX_TPUINFO ": TPU7x mxu_column_size = 256"),
                [TPK_SIM_F_MXU_RATE] = ASM("2 MACs per cell per cycle, as for v6e: with 1 the published "
                                           "2 cores * 2 MXUs * 256x256 and 2307 TFLOP/s would need a 4.40 GHz "
                                           "clock"),
                [TPK_SIM_F_CLOCK] = DER("2307e12 / (2 cores * 2 MXUs * 256*256 * 2 MACs * 2 FLOP) = 2.200 GHz; "
                                        "no clock is published"),
                [TPK_SIM_F_PEAK_BF16] = PUB(CLOUD_7X ": \"Peak compute per chip (BF16) (TFLOPs) 2307\""),
                [TPK_SIM_F_PEAK_INT8] = PUB("0 = no int8 matmul: no int8 figure in " CLOUD_7X " or " BLOG_IRONWOOD
                                            "; " JAX_TPUINFO ": int8_ops_per_second = 0 and its matmul-support "
                                            "table for generation 7 lists only f32/bf16/fp8"),
                [TPK_SIM_F_PEAK_FP8] = PUB(CLOUD_7X ": \"Peak compute per chip (FP8) (TFLOPs) 4614\"; "
                                                    BLOG_IRONWOOD ": \"4,614 TFLOPs\" per chip"),
                [TPK_SIM_F_HBM_BYTES] = PUB(CLOUD_7X ": \"HBM capacity per chip (GiB) 192\""),
                [TPK_SIM_F_HBM_BW] = PUB(BLOG_IRONWOOD ": \"7.37 TB/s per chip, 4.5x of Trillium\" (" JAX_TPUINFO
                                                       " has 7.40e12)"),
                [TPK_SIM_F_VMEM] = PUB(JAX_TPUINFO ": TPU7x vmem_capacity_bytes = 64 MiB per core"),
                [TPK_SIM_F_SMEM] = SMEM_WHY,
                [TPK_SIM_F_CMEM] = PUB(JAX_TPUINFO ": cmem_capacity_bytes = 0"),
                [TPK_SIM_F_VREG] = PUB(JAX_TPUINFO ": TPU7x num_sublanes = 8, num_lanes = 128"),
                [TPK_SIM_F_VPU_ALUS] = ASM("4 ALUs per (sublane, lane), as published for v5 (" SCALING_BOOK
                                           "); nothing is published for TPU7x"),
                [TPK_SIM_F_DMA_ENGINES] = ASM(DMA_ENGINES_WHY),
                [TPK_SIM_F_DMA_LATENCY] = ASM(DMA_LATENCY_WHY),
                [TPK_SIM_F_SPARSECORES] = PUB(CLOUD_7X ": \"two TensorCores and four SparseCores\""),
                [TPK_SIM_F_ICI_LINKS] = ASM("6 links, one per neighbour in a 3D torus as on v4 and v5p; the "
                                            "link count is not published"),
                [TPK_SIM_F_ICI_LINK_BW] = DER(BLOG_IRONWOOD ": ICI \"1.2 TBps bidirectional\" per chip (1.5x "
                                                            "Trillium's 800 GBps) / 6 links (assumed) / 2 "
                                                            "directions = 100 GB/s"),
                [TPK_SIM_F_ICI_LATENCY] = ASM(ICI_LATENCY_WHY),
                [TPK_SIM_F_TOPOLOGY] = PUB(XPK ": tpu7x slices are AxBxC shapes of 4x4x4 cubes "
                                               "(generate_tpu_topologies), plus 2x2x1, 2x2x2, 2x2x4, 2x4x4; "
                                               "Google's Ironwood material describes a 3D torus ICI"),
                [TPK_SIM_F_POD] = PUB(CLOUD_7X ": \"Number of chips per pod 9216\""),
                [TPK_SIM_F_SLICE] = PUB(XPK ": tpu7x max_cubes = 144 (144 * 64 = 9216 chips, the whole pod)"),
            },
    },
};

/* Other names people use for the same chips. */
static const struct {
  const char *alias;
  const char *name;
} aliases[] = {
    {"trillium", "v6e"},
    {"tpu7x", "v7"},
    {"ironwood", "v7"},
};

static const char *const field_names[TPK_SIM_F_COUNT] = {
    [TPK_SIM_F_TENSORCORES] = "tensorcores",  [TPK_SIM_F_MEGACORE] = "megacore",
    [TPK_SIM_F_MXUS] = "mxus_per_core",       [TPK_SIM_F_MXU_SHAPE] = "mxu_shape",
    [TPK_SIM_F_MXU_RATE] = "mxu_macs_per_cell", [TPK_SIM_F_CLOCK] = "clock_hz",
    [TPK_SIM_F_PEAK_BF16] = "peak_bf16_flops", [TPK_SIM_F_PEAK_INT8] = "peak_int8_ops",
    [TPK_SIM_F_PEAK_FP8] = "peak_fp8_flops",  [TPK_SIM_F_HBM_BYTES] = "hbm_bytes",
    [TPK_SIM_F_HBM_BW] = "hbm_bytes_per_s",   [TPK_SIM_F_VMEM] = "vmem_bytes",
    [TPK_SIM_F_SMEM] = "smem_bytes",          [TPK_SIM_F_CMEM] = "cmem_bytes",
    [TPK_SIM_F_VREG] = "vreg_shape",          [TPK_SIM_F_VPU_ALUS] = "vpu_alus_per_lane",
    [TPK_SIM_F_DMA_ENGINES] = "dma_engines",  [TPK_SIM_F_DMA_LATENCY] = "dma_latency_s",
    [TPK_SIM_F_SPARSECORES] = "sparsecores",  [TPK_SIM_F_ICI_LINKS] = "ici_links",
    [TPK_SIM_F_ICI_LINK_BW] = "ici_link_bytes_per_s", [TPK_SIM_F_ICI_LATENCY] = "ici_hop_latency_s",
    [TPK_SIM_F_TOPOLOGY] = "topology",        [TPK_SIM_F_POD] = "pod_chips",
    [TPK_SIM_F_SLICE] = "max_slice_chips",
};

int tpk_sim_chip_count(void) { return (int)TPK_ARRAY_LEN(chips); }

const TpkChip *tpk_sim_chip_at(int i) {
  return i >= 0 && i < tpk_sim_chip_count() ? &chips[i] : NULL;
}

/* Chip by name, or by alias; n is the name's length (it need not end in NUL). */
static const TpkChip *find_n(const char *name, size_t n) {
  for (size_t i = 0; i < TPK_ARRAY_LEN(chips); i++)
    if (strlen(chips[i].name) == n && memcmp(chips[i].name, name, n) == 0) return &chips[i];
  for (size_t i = 0; i < TPK_ARRAY_LEN(aliases); i++)
    if (strlen(aliases[i].alias) == n && memcmp(aliases[i].alias, name, n) == 0)
      return find_n(aliases[i].name, strlen(aliases[i].name));
  return NULL;
}

const TpkChip *tpk_sim_chip_find(const char *name) {
  return name ? find_n(name, strlen(name)) : NULL;
}

double tpk_sim_chip_mxu_peak(const TpkChip *c) {
  return (double)c->tensorcores * c->mxus_per_core * c->mxu_rows * c->mxu_cols * c->mxu_macs_per_cell * 2.0 *
         c->clock_hz;
}

const char *tpk_sim_field_name(TpkSimField f) {
  return (unsigned)f < TPK_SIM_F_COUNT ? field_names[f] : "?";
}

/* ---- Topology names ------------------------------------------------------- */

/* "v4, v5e, v5p, v6e, v7" */
static void known_chips(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < TPK_ARRAY_LEN(chips) && used < size; i++) {
    int n = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", chips[i].name);
    if (n < 0) break;
    used += (size_t)n;
  }
}

/* An example name with the right number of axes: "v5e-4x4", "v5p-2x2x1". */
static const char *example_dims(const TpkChip *c) { return c->torus_dims == 2 ? "4x4" : "2x2x1"; }

/* Parse "AxB" or "AxBxC" (up to 3 positive integers; a value over `cap`
 * is clamped to cap + 1 so the caller reports it as too large). Returns the
 * number of axes, or -1 when the text is malformed; 4 means "more than 3". */
static int parse_dims(const char *s, int dims[3], int cap) {
  int n = 0;
  for (;;) {
    if (*s < '0' || *s > '9') return -1;
    long v = 0;
    while (*s >= '0' && *s <= '9') {
      v = v * 10 + (*s - '0');
      if (v > cap) v = (long)cap + 1;
      s++;
    }
    if (v == 0) return -1;
    if (n < 3) dims[n] = (int)v;
    n++;
    if (*s == '\0') return n > 3 ? 4 : n;
    if (*s != 'x') return -1;
    s++;
  }
}

TpkStatus tpk_sim_topology_parse(const char *name, TpkSimTopology *out, TpkError *err) {
  char known[128];
  known_chips(known, sizeof known);
  if (!name || !*name)
    return tpk_error(err, TPK_ERR_INVALID,
                     "empty topology name: expected <chip> or <chip>-<dims>, e.g. v5p-2x2x1; known chips: %s",
                     known);

  const char *dash = strchr(name, '-');
  size_t chip_len = dash ? (size_t)(dash - name) : strlen(name);
  const TpkChip *chip = find_n(name, chip_len);
  if (!chip)
    return tpk_error(err, TPK_ERR_INVALID, "unknown chip '%.*s' in '%s'; known chips: %s", (int)chip_len, name,
                     name, known);

  TpkSimTopology t = {.chip = chip, .ndims = chip->torus_dims, .dims = {1, 1, 1}};
  if (dash) {
    int dims[3] = {1, 1, 1};
    int n = parse_dims(dash + 1, dims, chip->max_slice_chips);
    if (n < 0)
      return tpk_error(err, TPK_ERR_INVALID,
                       "bad dimensions '%s' in '%s': expected positive integers separated by 'x', e.g. %s-%s",
                       dash + 1, name, chip->name, example_dims(chip));
    if (n != chip->torus_dims)
      return tpk_error(err, TPK_ERR_INVALID,
                       "%s chips form a %dD torus: '%s' has %s%d dimensions, expected %d (e.g. %s-%s)",
                       chip->name, chip->torus_dims, name, n > 3 ? "more than " : "", n > 3 ? 3 : n,
                       chip->torus_dims, chip->name, example_dims(chip));
    for (int i = 0; i < n; i++) t.dims[i] = dims[i];
  }

  /* parse_dims clamped absurd axes to max_slice_chips + 1: no axis that long fits */
  for (int i = 0; i < t.ndims; i++)
    if (t.dims[i] > chip->max_slice_chips)
      return tpk_error(err, TPK_ERR_INVALID, "'%s' has more chips than the largest %s slice of %d chips", name,
                       chip->name, chip->max_slice_chips);
  t.chips = 1;
  for (int i = 0; i < t.ndims; i++) t.chips *= t.dims[i];
  for (int i = 0; i < t.ndims; i++) {
    int d = t.dims[i];
    if (chip->max_axis > 0 && d > chip->max_axis)
      return tpk_error(err, TPK_ERR_INVALID,
                       "'%s': an axis of %d chips is longer than the %d chips of a %s pod's torus axis",
                       name, d, chip->max_axis, chip->name);
    if (chip->max_axis == 0 && d > 4 && d % 4 != 0)
      return tpk_error(err, TPK_ERR_INVALID,
                       "'%s': an axis of %d chips is not possible on %s: an axis is at most 4 chips or a "
                       "multiple of 4 (whole 4x4x4 cubes)",
                       name, d, chip->name);
  }
  if (t.chips > chip->max_slice_chips)
    return tpk_error(err, TPK_ERR_INVALID, "'%s' has %lld chips, more than the largest %s slice of %d chips",
                     name, (long long)t.chips, chip->name, chip->max_slice_chips);

  /* 2D pods wrap an axis only when it spans the pod; 3D slices get their
   * wraparounds from the optical switches, which only whole cubes reach, so
   * either every axis wraps (all multiples of 4) or none does (2x2x4). */
  bool cubes = true;
  for (int i = 0; i < t.ndims; i++) cubes = cubes && t.dims[i] % 4 == 0;
  for (int i = 0; i < t.ndims; i++) t.wrap[i] = chip->torus_dims == 2 ? t.dims[i] == chip->max_axis : cubes;
  *out = t;
  return TPK_OK;
}
