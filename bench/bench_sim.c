/*
 * bench_sim.c — how fast the simulator is.
 *
 *   - wall time of an f32 matmul 1024^3 launch on sim:v5e vs on the host
 *     (interleaved; goal: the simulator within 3x of the host backend);
 *   - simulated FLOPs per host second;
 *   - the one-time cost of timing a large kernel (bf16 8192^3 in 512-blocks:
 *     4096 grid steps, 65536 matmuls) on v5e.
 * Rows are JSON lines for bench/run.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsl/dsl.h"
#include "lower/lower.h"
#include "sim/sim.h"
#include "sim/timeline.h"
#include "tpk.h"

static void die(const char *what) {
  fprintf(stderr, "bench_sim: %s: %s\n", what, tpk_last_error());
  exit(1);
}

static const char *MATMUL = "kernel matmul(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [256, 512], BN in [512], BK in [1024, 512]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

typedef struct Side {
  TpkKernel *k;
  TpkBuffer *bufs[3];
  TpkLaunch launch;
  TpkLaunchResult ran;
} Side;

static void open_side(TpkContext *ctx, const char *device, Side *s) {
  TpkDevice *dev;
  TpkProgram *prog;
  if (tpk_device_open(ctx, device, &dev) || tpk_program_load_source(ctx, "mm.tpk", MATMUL, strlen(MATMUL), &prog) ||
      tpk_program_kernel(prog, "matmul", &s->k))
    die(device);
  int64_t shape[2] = {1024, 1024};
  for (int i = 0; i < 3; i++) {
    if (tpk_buffer_create(dev, TPK_F32, 2, shape, &s->bufs[i])) die("buffer");
    float *p = tpk_buffer_data(s->bufs[i]);
    for (int64_t e = 0; e < 1024 * 1024; e++) p[e] = (float)((e * 7 + i) % 13) * 0.1f;
  }
  s->launch = (TpkLaunch){.args = s->bufs, .result = &s->ran};
  for (int i = 0; i < 4; i++)
    if (tpk_kernel_launch(s->k, &s->launch)) die(device);
}

static double once(Side *s) {
  double t = tpk_now_seconds();
  if (tpk_kernel_launch(s->k, &s->launch)) die("launch");
  return tpk_now_seconds() - t;
}

static void bench_wall_time(void) {
  TpkContext *ctx;
  if (tpk_context_create(&ctx)) die("context");
  Side host, sim;
  open_side(ctx, "host", &host);
  open_side(ctx, "sim:v5e", &sim);
  tpk_context_wait_compiles(ctx);
  enum { REPS = 9 };
  double th[REPS], ts[REPS];
  for (int i = 0; i < REPS; i++) {
    th[i] = once(&host);
    ts[i] = once(&sim);
  }
  if (!sim.ran.simulated) die("stats");
  TpkSimStats st = sim.ran.sim;
  double h = tpk_median(th, REPS), s = tpk_median(ts, REPS);
  printf("{\"name\": \"f32 matmul 1024^3 on sim:v5e, wall time\", \"device\": \"sim:v5e\", \"value\": %.4g, \"unit\": \"ms\", "
         "\"baseline\": \"the host backend\", \"ratio\": %.3f}\n", s * 1e3, h / s);
  printf("{\"name\": \"simulated FLOPs per host second (matmul on sim:v5e)\", \"device\": \"sim:v5e\", \"value\": %.4g, "
         "\"unit\": \"GFLOP/s\", \"baseline\": null, \"ratio\": null}\n", st.matmul_flops / s / 1e9);
  for (int i = 0; i < 3; i++) {
    tpk_buffer_destroy(host.bufs[i]);
    tpk_buffer_destroy(sim.bufs[i]);
  }
  tpk_program_destroy(tpk_kernel_program(host.k));
  tpk_program_destroy(tpk_kernel_program(sim.k));
  tpk_context_destroy(ctx);
}

/* Timing a large kernel: what the first launch with new sizes pays. */
static void bench_schedule(void) {
  const char *src = "kernel mm(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N]) tune BM in [512], BN in [512], BK in [512] {\n"
                    "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                    "    var acc = zeros(f32[BM, BN]);\n"
                    "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                    "    c[i, j] = acc;\n"
                    "  }\n"
                    "}\n";
  TpkSource s = {.name = "mm.tpk", .text = src, .len = strlen(src)};
  TpkBinding binds[3] = {{"M", 8192}, {"N", 8192}, {"K", 8192}};
  TpkDiags d;
  tpk_diags_init(&d, &s);
  TpkModule *m, *bound = tpk_module_new("mm");
  if (tpk_compile_source(&s, NULL, &d, &m)) die("compile");
  tpk_diags_free(&d);
  const TpkChip *chip = tpk_sim_chip_find("v5e");
  TpkTarget t = {.name = "v5e", .vmem_bytes = (int64_t)chip->vmem_bytes, .tile_bytes = 1 << 20};
  TpkError err = {0};
  TpkFunc *f; /* as a launch binds it */
  if (!bound || tpk_bind(bound, m->funcs[0], binds, 3, &f, &err) || tpk_lower_ir(f, &t, &err)) die(err.message);
  double best = 1e9;
  TpkSimReport rep;
  for (int i = 0; i < 3; i++) {
    double t0 = tpk_now_seconds();
    if (tpk_sim_schedule(f, chip, &rep, NULL, &err)) die(err.message);
    double dt = tpk_now_seconds() - t0;
    if (dt < best) best = dt;
  }
  tpk_module_free(bound);
  tpk_module_free(m);
  printf("{\"name\": \"time a bf16 8192^3 matmul on v5e (4096 grid steps)\", \"device\": \"sim:v5e\", \"value\": %.4g, "
         "\"unit\": \"ms\", \"baseline\": null, \"ratio\": null}\n", best * 1e3);
}

int main(void) {
  char dir[] = "/tmp/tpk-bench-sim-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("TPK_CACHE_DIR", dir, 1);
  bench_wall_time();
  bench_schedule();
  return 0;
}
