/*
 * replay.c — `tpk replay FILE`: an op stream recorded from PyTorch
 * (tools/record_streams.py, cli/opstream.h) run through the eager runtime
 * in one or more modes, timed, and the modes' outputs compared.
 */
#include "cli/cli.h"
#include "cli/opstream.h"
#include "tpk.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_MODE = 1, OPT_DEVICE, OPT_STEPS, OPT_SIZES, OPT_QUIET };
enum { MAX_IO = 256, MAX_MODES = 3 };

typedef struct Outputs {
  int n;
  float *data[MAX_IO]; /* as f32 */
  size_t count[MAX_IO];
} Outputs;

static void outputs_free(Outputs *o) {
  for (int i = 0; i < o->n; i++) free(o->data[i]);
  o->n = 0;
}

/* Read every output back (a sync point of its own) as f32. */
static TpkStatus read_outputs(TpkBuffer *const *outs, int n, Outputs *o) {
  o->n = 0;
  for (int i = 0; i < n; i++) {
    size_t bytes = tpk_buffer_bytes(outs[i]);
    TpkDType dt = tpk_buffer_dtype(outs[i]);
    size_t count = bytes / tpk_dtype_size(dt);
    void *raw = malloc(bytes ? bytes : 1);
    float *f = malloc(sizeof *f * (count ? count : 1));
    if (!raw || !f) {
      free(raw);
      free(f);
      return TPK_ERR_NOMEM;
    }
    TpkStatus st = tpk_buffer_read(outs[i], raw, bytes);
    if (st == TPK_OK) tpk_dtype_convert(dt, raw, TPK_F32, f, count);
    free(raw);
    o->data[o->n] = f;
    o->count[o->n++] = count;
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

typedef struct Stats {
  double first, steady; /* seconds */
  TpkStreamStats per_step; /* the steady steps' counts, per step */
  int compiles;            /* compiler runs in the whole replay */
} Stats;

/* `steps` steps in one mode; the last step's outputs in *out. */
static int replay_mode(const OpStream *s, const char *device, TpkEagerMode mode, const int64_t *sizes, int steps,
                       Stats *stats, Outputs *out) {
  TpkContext *ctx = NULL;
  TpkDevice *dev;
  TpkStream *st = NULL;
  TpkBuffer *inputs[MAX_IO] = {0}, *outs[MAX_IO] = {0};
  double *times = calloc((size_t)steps, sizeof *times);
  int status = CLI_FAIL, line = 0;
  int nin = opstream_input_count(s), nout = opstream_output_count(s);
  if (!times || tpk_context_create(&ctx) != TPK_OK || tpk_context_set_eager_mode(ctx, mode) != TPK_OK ||
      tpk_device_open(ctx, device, &dev) != TPK_OK || tpk_stream_create(dev, &st) != TPK_OK ||
      opstream_make_inputs(s, dev, sizes, 1, inputs) != TPK_OK)
    goto done;
  tpk_context_set_log(ctx, cli_log, NULL);
  TpkStreamStats before = {0}, after;
  for (int i = 0; i < steps; i++) {
    if (i == 1) tpk_stream_stats(st, &before);
    for (int k = 0; k < nout; k++) tpk_buffer_destroy(outs[k]), outs[k] = NULL;
    double t = tpk_now_seconds();
    if (opstream_run(s, st, sizes, inputs, outs, &line) != TPK_OK) goto done;
    line = 0;
    if (tpk_stream_sync(st) != TPK_OK) goto done;
    times[i] = tpk_now_seconds() - t;
  }
  tpk_stream_stats(st, &after);
  int n = steps > 1 ? steps - 1 : 1;
  stats->first = times[0];
  stats->steady = steps > 1 ? tpk_median(times + 1, steps - 1) : times[0];
  stats->per_step = (TpkStreamStats){
      .ops = (after.ops - before.ops) / n,
      .launches = (after.launches - before.launches) / n,
      .windows = (after.windows - before.windows) / n,
      .compiles = after.compiles - before.compiles,
      .cache_hits = (after.cache_hits - before.cache_hits) / n,
      .sim_seconds = (after.sim_seconds - before.sim_seconds) / n,
  };
  stats->compiles = tpk_context_compiler_runs(ctx);
  status = read_outputs(outs, nout, out) == TPK_OK ? CLI_OK : CLI_FAIL;
done:
  if (status != CLI_OK) {
    char where[64] = "";
    if (line) snprintf(where, sizeof where, " (the op at line %d)", line);
    fprintf(stderr, "tpk: replay in %s mode on %s%s: %s\n", tpk_eager_mode_name(mode), device, where, tpk_last_error());
  }
  for (int k = 0; k < nout; k++) tpk_buffer_destroy(outs[k]);
  for (int k = 0; k < nin; k++) tpk_buffer_destroy(inputs[k]);
  if (st) tpk_stream_destroy(st);
  if (ctx) tpk_context_destroy(ctx);
  free(times);
  return status;
}

/* Do two modes' outputs agree within |a - b| <= 1e-4 + 1e-3 |a| (fusion
 * keeps f32 intermediates that strict mode rounds: tutorials/06)? The
 * largest difference in *abs_diff. */
static bool agree(const Outputs *ref, const Outputs *got, double *abs_diff) {
  *abs_diff = 0;
  if (ref->n != got->n) return false;
  bool ok = true;
  for (int i = 0; i < ref->n; i++) {
    if (ref->count[i] != got->count[i]) return false;
    for (size_t k = 0; k < ref->count[i]; k++) {
      double a = ref->data[i][k], b = got->data[i][k];
      if (isnan(a) || isnan(b)) {
        ok &= isnan(a) && isnan(b);
        continue;
      }
      double d = fabs(a - b);
      if (d > *abs_diff) *abs_diff = d;
      ok &= d <= 1e-4 + 1e-3 * fabs(a);
    }
  }
  return ok;
}

static bool parse_modes(const char *text, TpkEagerMode *modes, int *n) {
  *n = 0;
  if (strcmp(text, "all") == 0) text = "debug,strict,fused";
  const char *p = text;
  while (*p && *n < MAX_MODES) {
    size_t len = strcspn(p, ",");
    bool found = false;
    for (int m = TPK_EAGER_DEBUG; m <= TPK_EAGER_FUSED; m++)
      if (strlen(tpk_eager_mode_name((TpkEagerMode)m)) == len && strncmp(p, tpk_eager_mode_name((TpkEagerMode)m), len) == 0) {
        modes[(*n)++] = (TpkEagerMode)m;
        found = true;
      }
    if (!found) return false;
    p += len + (p[len] == ',');
  }
  return *n > 0 && !*p;
}

int cli_replay(const CliCommand *cmd, int argc, char **argv) {
  (void)cmd;
  static const CliOption opts[] = {
      {"mode", 'm', true, OPT_MODE},   {"device", 'd', true, OPT_DEVICE}, {"steps", 0, true, OPT_STEPS},
      {"sizes", 0, true, OPT_SIZES}, {"quiet", 'q', false, OPT_QUIET},
  };
  CliArgs a;
  cli_args_init(&a, "replay", argc, argv, opts, (int)(sizeof opts / sizeof *opts));
  const char *file = NULL, *device = "host", *value;
  TpkEagerMode modes[MAX_MODES] = {TPK_EAGER_STRICT, TPK_EAGER_FUSED};
  int nmodes = 2, steps = 5;
  bool quiet = false;
  CliBindings sizes_given = {0};
  int id;
  while ((id = cli_next_arg(&a, &value)) != CLI_ARG_END) {
    switch (id) {
    case CLI_ARG_ERROR: cli_bindings_free(&sizes_given); return CLI_USAGE;
    case CLI_ARG_POSITIONAL:
      if (file) {
        cli_bindings_free(&sizes_given);
        return cli_usage_error("replay", "expects one stream file, got '%s' too", value);
      }
      file = value;
      break;
    case OPT_MODE:
      if (!parse_modes(value, modes, &nmodes)) {
        cli_bindings_free(&sizes_given);
        return cli_usage_error("replay", "--mode expects debug, strict, fused, a list of them or all, got '%s'", value);
      }
      break;
    case OPT_DEVICE: device = value; break;
    case OPT_STEPS:
      steps = atoi(value);
      if (steps < 1 || steps > 100000) {
        cli_bindings_free(&sizes_given);
        return cli_usage_error("replay", "--steps expects a number from 1, got '%s'", value);
      }
      break;
    case OPT_SIZES:
      if (!cli_bindings_parse(&sizes_given, "--sizes", value)) {
        cli_bindings_free(&sizes_given);
        return CLI_USAGE;
      }
      break;
    case OPT_QUIET: quiet = true; break;
    }
  }
  if (!file) {
    cli_bindings_free(&sizes_given);
    return cli_usage_error("replay", "expects a stream file (bench/streams/*.ops)");
  }
  char err[512];
  OpStream *s = opstream_load(file, err, sizeof err);
  if (!s) {
    cli_bindings_free(&sizes_given);
    cli_print_error("tpk", err);
    return CLI_FAIL;
  }
  int64_t sizes[64];
  int nsyms = opstream_symbol_count(s);
  for (int i = 0; i < nsyms && i < 64; i++) sizes[i] = opstream_symbol_recorded(s, i);
  int status = CLI_OK;
  for (int b = 0; b < sizes_given.count && status == CLI_OK; b++) {
    int i = 0;
    while (i < nsyms && strcmp(opstream_symbol_name(s, i), sizes_given.items[b].name) != 0) i++;
    if (i == nsyms) status = cli_usage_error("replay", "%s has no size symbol '%s'", file, sizes_given.items[b].name);
    else sizes[i] = sizes_given.items[b].value;
  }
  cli_bindings_free(&sizes_given);
  if (status != CLI_OK) {
    opstream_free(s);
    return status;
  }
  printf("%s: %d ops, %d inputs, %d outputs; sizes", file, opstream_op_count(s), opstream_input_count(s),
         opstream_output_count(s));
  for (int i = 0; i < nsyms; i++) printf(" %s=%" PRId64, opstream_symbol_name(s, i), sizes[i]);
  printf("\n");
  Outputs outs[MAX_MODES] = {0};
  for (int m = 0; m < nmodes && status == CLI_OK; m++) {
    Stats st;
    status = replay_mode(s, device, modes[m], sizes, steps, &st, &outs[m]);
    if (status != CLI_OK || quiet) continue;
    printf("  %-6s on %s: %" PRId64 " launches a step", tpk_eager_mode_name(modes[m]), device, st.per_step.launches);
    if (modes[m] == TPK_EAGER_FUSED) printf(" (%" PRId64 " window%s)", st.per_step.windows, st.per_step.windows == 1 ? "" : "s");
    printf("; first step %.2f ms, then %.3f ms a step", st.first * 1e3, st.steady * 1e3);
    if (st.per_step.sim_seconds > 0) printf("; simulated %.1f us a step", st.per_step.sim_seconds * 1e6);
    printf("; %d compiles\n", st.compiles);
  }
  for (int m = 1; m < nmodes && status == CLI_OK; m++) {
    double abs_diff;
    const char *mode = tpk_eager_mode_name(modes[m]), *first = tpk_eager_mode_name(modes[0]);
    if (!agree(&outs[0], &outs[m], &abs_diff)) {
      fprintf(stderr, "tpk: replay: %s mode's outputs differ from %s mode's (largest difference %g)\n", mode, first, abs_diff);
      status = CLI_FAIL;
    } else {
      printf("  %s matches %s: largest difference %.2g over %d outputs\n", mode, first, abs_diff, outs[0].n);
    }
  }
  for (int m = 0; m < nmodes; m++) outputs_free(&outs[m]);
  opstream_free(s);
  return status;
}
