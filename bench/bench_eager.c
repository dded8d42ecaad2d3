/*
 * bench_eager.c — the eager modes on recorded op streams (bench/streams):
 * an MLP training step (forward, backward, AdamW update) and a transformer
 * block's forward and backward, replayed through tpk_stream_op on the host
 * and on sim:v5e in the three modes, all in one run:
 *   - time per step, host wall time and (sim:v5e) simulated time, per mode,
 *     the modes' steps taken in turn;
 *     fused vs strict as a ratio (goal >= 1.5x, target 2x);
 *   - the first step of a new process with a warm disk cache, against its
 *     steady state (goal: within 2x), by `tpk replay` in new processes;
 *   - compiles after the first step when the sequence length changes every
 *     step (goal: 0).
 * Rows are JSON lines for bench/run.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/opstream.h"
#include "tpk.h"

enum { WARMUP = 2, STEPS = 12, WARM_PROCESSES = 5, MAX_IO = 64 };

static void die(const char *what) {
  fprintf(stderr, "bench_eager: %s: %s\n", what, tpk_last_error());
  exit(1);
}

static void stream_path(const char *name, char *path, size_t size);

static OpStream *load(const char *name) {
  char path[512], err[512];
  stream_path(name, path, sizeof path);
  OpStream *s = opstream_load(path, err, sizeof err);
  if (!s) {
    fprintf(stderr, "bench_eager: %s\n", err);
    exit(1);
  }
  return s;
}

typedef struct Run {
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *stream;
  TpkBuffer *inputs[MAX_IO];
} Run;

static void open_run(Run *r, const OpStream *s, const char *device, TpkEagerMode mode, const int64_t *sizes) {
  if (tpk_context_create(&r->ctx)) die("context");
  if (tpk_context_set_eager_mode(r->ctx, mode)) die("mode");
  if (tpk_device_open(r->ctx, device, &r->dev)) die(device);
  if (tpk_stream_create(r->dev, &r->stream)) die("stream");
  if (opstream_make_inputs(s, r->dev, sizes, 1, r->inputs)) die("inputs");
}

static void close_run(Run *r, const OpStream *s) {
  tpk_stream_destroy(r->stream);
  for (int i = 0; i < opstream_input_count(s); i++) tpk_buffer_destroy(r->inputs[i]);
  tpk_context_destroy(r->ctx);
}

/* One step: every op, then the sync a training loop's `loss.item()` makes. */
static double step(Run *r, const OpStream *s, const int64_t *sizes) {
  TpkBuffer *outs[MAX_IO];
  int line = 0;
  double t = tpk_now_seconds();
  if (opstream_run(s, r->stream, sizes, r->inputs, outs, &line) != TPK_OK) {
    fprintf(stderr, "bench_eager: op at line %d: %s\n", line, tpk_last_error());
    exit(1);
  }
  if (tpk_stream_sync(r->stream)) die("sync");
  t = tpk_now_seconds() - t;
  for (int i = 0; i < opstream_output_count(s); i++) tpk_buffer_destroy(outs[i]);
  return t;
}

typedef struct Steady {
  double wall, sim; /* seconds per step */
} Steady;

/* The three modes' steady states on one device, their steps taken in turn
 * so that a change of the machine's load falls on all of them: the ratios
 * are of one run. */
static void steady_modes(const OpStream *s, const char *device, Steady out[3]) {
  Run r[3];
  TpkStreamStats before[3], after[3];
  for (int m = 0; m < 3; m++) {
    open_run(&r[m], s, device, (TpkEagerMode)m, NULL);
    for (int i = 0; i < WARMUP; i++) step(&r[m], s, NULL);
    tpk_context_wait_compiles(r[m].ctx);
    step(&r[m], s, NULL);
    tpk_stream_stats(r[m].stream, &before[m]);
  }
  double t[3][STEPS];
  for (int i = 0; i < STEPS; i++)
    for (int m = 0; m < 3; m++) t[m][i] = step(&r[m], s, NULL);
  for (int m = 0; m < 3; m++) {
    tpk_stream_stats(r[m].stream, &after[m]);
    out[m] = (Steady){tpk_median(t[m], STEPS), (after[m].sim_seconds - before[m].sim_seconds) / STEPS};
    close_run(&r[m], s);
  }
}

static void row(const char *name, const char *device, double value, const char *unit, const char *baseline, double ratio) {
  printf("{\"name\": \"%s\", \"device\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", ", name, device, value, unit);
  if (baseline) printf("\"baseline\": \"%s\", \"ratio\": %.4g}\n", baseline, ratio);
  else printf("\"baseline\": null, \"ratio\": null}\n");
  fflush(stdout);
}

static void bench_modes(const char *title, const OpStream *s) {
  static const char *devices[] = {"host", "sim:v5e"};
  for (int d = 0; d < 2; d++) {
    Steady m[3];
    steady_modes(s, devices[d], m);
    for (int mode = TPK_EAGER_DEBUG; mode <= TPK_EAGER_FUSED; mode++) {
      char name[256];
      snprintf(name, sizeof name, "eager %s: %s mode, host wall time per step", title,
               tpk_eager_mode_name((TpkEagerMode)mode));
      row(name, devices[d], m[mode].wall * 1e3, "ms", NULL, 0);
      if (d == 1) {
        snprintf(name, sizeof name, "eager %s: %s mode, simulated v5e time per step", title,
                 tpk_eager_mode_name((TpkEagerMode)mode));
        row(name, devices[d], m[mode].sim * 1e6, "us", NULL, 0);
      }
    }
    char name[256];
    snprintf(name, sizeof name, "eager %s: fused vs strict, host wall time", title);
    row(name, devices[d], m[TPK_EAGER_FUSED].wall * 1e3, "ms", "strict mode", m[TPK_EAGER_STRICT].wall / m[TPK_EAGER_FUSED].wall);
    if (d == 1) {
      snprintf(name, sizeof name, "eager %s: fused vs strict, simulated v5e time", title);
      row(name, devices[d], m[TPK_EAGER_FUSED].sim * 1e6, "us", "strict mode", m[TPK_EAGER_STRICT].sim / m[TPK_EAGER_FUSED].sim);
    }
  }
}

/* The stream file `name` of bench/streams. */
static void stream_path(const char *name, char *path, size_t size) {
  const char *root = getenv("TPK_ROOT");
  snprintf(path, size, "%s/bench/streams/%s.ops", root ? root : ".", name);
}

/* A new process on a disk cache that this one filled: `tpk replay` (the
 * command beside this benchmark's folder) runs the stream in fused mode
 * and says its first step's time, its steady time a step and its compiles;
 * the median of a few processes' ratios, as one is at the mercy of
 * whatever else the machine does. The tier is auto, so hot clusters are
 * compiled by cc and stored. */
static void bench_warm_disk(const char *title, const char *stream, const OpStream *s) {
  char dir[] = "/tmp/tpk-bench-eager-XXXXXX";
  if (!mkdtemp(dir)) die("mkdtemp");
  setenv("TPK_CACHE_DIR", dir, 1);
  setenv("TPK_TIER", "auto", 1);
  setenv("TPK_JIT_HOT_CALLS", "0", 1);
  Run r;
  open_run(&r, s, "host", TPK_EAGER_FUSED, NULL);
  for (int i = 0; i < WARMUP; i++) step(&r, s, NULL);
  tpk_context_wait_compiles(r.ctx);
  close_run(&r, s);
  char self[512], path[512], cmd[2048];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) die("/proc/self/exe");
  self[n] = 0;
  *strrchr(self, '/') = 0; /* build/bench */
  stream_path(stream, path, sizeof path);
  snprintf(cmd, sizeof cmd, "'%s/../tpk' replay '%s' --mode fused --steps %d", self, path, 2 + STEPS);
  double first[WARM_PROCESSES], ratio[WARM_PROCESSES];
  int compiles = 0;
  for (int p = 0; p < WARM_PROCESSES; p++) {
    FILE *out = popen(cmd, "r");
    if (!out) die("popen");
    char line[512];
    int got = 0, c = 0;
    double ms = 0, steady = 0;
    while (fgets(line, sizeof line, out)) {
      const char *at = strstr(line, "first step ");
      if (at && sscanf(at, "first step %lf ms, then %lf ms a step; %d compile", &ms, &steady, &c) == 3) got = 1;
    }
    if (pclose(out) != 0 || !got) {
      fprintf(stderr, "bench_eager: %s did not say its first step\n", cmd);
      exit(1);
    }
    first[p] = ms;
    ratio[p] = steady / ms;
    compiles += c;
  }
  char name[256];
  snprintf(name, sizeof name, "eager %s: first step with a warm disk cache vs steady state (fused)", title);
  row(name, "host", tpk_median(first, WARM_PROCESSES), "ms", "steady state", tpk_median(ratio, WARM_PROCESSES));
  snprintf(name, sizeof name, "eager %s: compiles in the first step with a warm disk cache (fused)", title);
  row(name, "host", compiles, "compiles", NULL, 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_eager: could not remove %s\n", dir);
  unsetenv("TPK_CACHE_DIR");
  unsetenv("TPK_JIT_HOT_CALLS");
  setenv("TPK_TIER", "tcc", 1); /* the rows below count compiles: the quick tier does */
}

/* The sequence length (the symbol named `seq`) changes every step: compiles
 * after the first step, per mode. */
static void bench_dynamic(const char *title, const OpStream *s, int seq) {
  int64_t sizes[32];
  int n = opstream_symbol_count(s);
  for (int i = 0; i < n; i++) sizes[i] = opstream_symbol_recorded(s, i);
  for (int mode = TPK_EAGER_STRICT; mode <= TPK_EAGER_FUSED; mode++) {
    Run r;
    int before = 0, after = 0;
    /* one context; the inputs are made anew at each length */
    open_run(&r, s, "host", (TpkEagerMode)mode, sizes);
    for (int k = 0; k < 20; k++) {
      sizes[seq] = 17 + 5 * k;
      for (int i = 0; i < opstream_input_count(s); i++) tpk_buffer_destroy(r.inputs[i]);
      if (opstream_make_inputs(s, r.dev, sizes, (uint64_t)k, r.inputs)) die("inputs");
      step(&r, s, sizes);
      if (k == 0) before = tpk_context_compiler_runs(r.ctx);
    }
    after = tpk_context_compiler_runs(r.ctx);
    close_run(&r, s);
    char name[256];
    snprintf(name, sizeof name, "eager %s: compiles after the first step, sequence length changing every step (%s)",
             title, tpk_eager_mode_name((TpkEagerMode)mode));
    row(name, "host", after - before, "compiles", NULL, 0);
  }
}

int main(void) {
  /* steady-state rows: the code a hot stream runs (the default tier, auto,
   * moves a unit to cc -O3 after a few calls; tcc's code is several times
   * slower and would hide what fusion saves) */
  setenv("TPK_TIER", "cc", 1);
  OpStream *mlp = load("mlp_train"), *block = load("block_train");
  bench_modes("MLP training step", mlp);
  bench_modes("transformer block fwd+bwd", block);
  bench_warm_disk("MLP training step", "mlp_train", mlp);
  bench_warm_disk("transformer block fwd+bwd", "block_train", block);
  int seq = -1;
  for (int i = 0; i < opstream_symbol_count(block); i++)
    if (opstream_symbol_recorded(block, i) == 64) seq = i; /* recorded at S=64 */
  if (seq < 0) die("the block stream has no sequence length symbol");
  bench_dynamic("transformer block fwd+bwd", block, seq);
  opstream_free(mlp);
  opstream_free(block);
  return 0;
}
