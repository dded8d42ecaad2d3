/*
 * tune.c — `tpk tune FILE --kernel NAME --shape ... --device sim:v5e`:
 * search a kernel's tunables on the simulator (or by measurement on the
 * host), show each configuration as it is timed, and remember the winner
 * in the tuning cache (runtime/tune.h) and, on request, in a table of
 * shipped defaults. `--cached` shows what is remembered without searching.
 */
#include "cli/cli.h"
#include "runtime/tune.h"
#include "tpk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_KERNEL = 1, OPT_SHAPE, OPT_DEVICE, OPT_TUNE, OPT_SCALAR, OPT_REPEAT, OPT_SEED, OPT_MAX, OPT_NO_CACHE,
       OPT_CACHED, OPT_DEFAULTS, OPT_SAVE_DEFAULT, OPT_QUIET };

static const CliOption OPTIONS[] = {
    {"kernel", 'k', true, OPT_KERNEL},   {"shape", 0, true, OPT_SHAPE},
    {"device", 0, true, OPT_DEVICE},     {"tune", 0, true, OPT_TUNE},
    {"scalar", 0, true, OPT_SCALAR},     {"repeat", 0, true, OPT_REPEAT},
    {"seed", 0, true, OPT_SEED},         {"max-configs", 0, true, OPT_MAX},
    {"no-cache", 0, false, OPT_NO_CACHE}, {"cached", 0, false, OPT_CACHED},
    {"defaults", 0, true, OPT_DEFAULTS}, {"save-default", 0, true, OPT_SAVE_DEFAULT},
    {"quiet", 'q', false, OPT_QUIET},
};

typedef struct Tune {
  const char *path, *kernel, *device, *defaults, *save_default;
  CliBindings shape, fixed;
  CliPairs scalars;
  int repeat, max_configs;
  uint64_t seed;
  bool no_cache, cached, quiet;
  int config_width; /* of the configuration column, once known */
} Tune;

static bool parse_count(const char *value, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (errno || *end || end == value || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static int parse_args(Tune *t, const CliCommand *cmd, int argc, char **argv) {
  CliArgs args;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  t->device = "host";
  const char *value;
  int id;
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END) {
    switch (id) {
    case CLI_ARG_ERROR: return CLI_USAGE;
    case OPT_KERNEL: t->kernel = value; break;
    case OPT_SHAPE:
      if (!cli_bindings_parse(&t->shape, "shape", value)) return CLI_USAGE;
      break;
    case OPT_TUNE:
      if (!cli_bindings_parse(&t->fixed, "tune", value)) return CLI_USAGE;
      break;
    case OPT_SCALAR:
      if (!cli_pairs_parse(&t->scalars, "scalar", value)) return CLI_USAGE;
      break;
    case OPT_DEVICE: t->device = value; break;
    case OPT_REPEAT:
      if (!parse_count(value, 1, 1000000, &t->repeat))
        return cli_usage_error(cmd->name, "--repeat expects an integer from 1 to 1000000, got '%s'", value);
      break;
    case OPT_MAX:
      if (!parse_count(value, 1, 1000000, &t->max_configs))
        return cli_usage_error(cmd->name, "--max-configs expects an integer from 1 to 1000000, got '%s'", value);
      break;
    case OPT_SEED:
      if (!cli_parse_seed(value, &t->seed))
        return cli_usage_error(cmd->name, "--seed expects a non-negative integer, got '%s'", value);
      break;
    case OPT_NO_CACHE: t->no_cache = true; break;
    case OPT_CACHED: t->cached = true; break;
    case OPT_DEFAULTS: t->defaults = value; break;
    case OPT_SAVE_DEFAULT: t->save_default = value; break;
    case OPT_QUIET: t->quiet = true; break;
    case CLI_ARG_POSITIONAL:
      if (t->path) return cli_usage_error(cmd->name, "one FILE at a time (got '%s' and '%s')", t->path, value);
      t->path = value;
      break;
    }
  }
  if (!t->path) return cli_usage_error(cmd->name, "no input file (usage: tpk tune FILE --kernel NAME --shape M=...,N=... --device sim:v5e)");
  if (t->defaults && !t->cached) return cli_usage_error(cmd->name, "--defaults FILE is consulted by --cached only");
  if (t->cached && (t->save_default || t->no_cache || t->fixed.count))
    return cli_usage_error(cmd->name, "--cached shows what is remembered; it does not take --tune, --no-cache or --save-default");
  bool host = strcmp(t->device, "host") == 0;
  if (!host && (t->repeat || t->scalars.count))
    return cli_usage_error(cmd->name, "--repeat and --scalar are for measuring on the host; the simulator needs no values");
  return CLI_OK;
}

static void put_time(char *buf, size_t n, double s) {
  if (s < 1e-3) snprintf(buf, n, "%.2f us", s * 1e6);
  else if (s < 1) snprintf(buf, n, "%.3f ms", s * 1e3);
  else snprintf(buf, n, "%.3f s", s);
}

/* The configuration of point values as text (heap). */
static char *config_text(const TpkFunc *f, const int64_t *values) {
  TpkStr s = {0};
  tpk_tune_format(&s, f, values);
  return tpk_str_take(&s);
}

/* Progress: a header before the first configuration, then one line each. */
static void progress(void *user, const TpkTuneReport *r, const TpkTunePoint *p) {
  Tune *t = user;
  if (t->quiet) return;
  const TpkFunc *f = r->f;
  if (r->npoints == 1) {
    t->config_width = 0;
    for (int i = 0; i < f->ntunes; i++) {
      int64_t widest = 0;
      for (int c = 0; c < f->tunes[i].nchoices; c++)
        if (f->tunes[i].choices[c] > widest) widest = f->tunes[i].choices[c];
      t->config_width += (int)strlen(f->tunes[i].name) + 1 + snprintf(NULL, 0, "%lld", (long long)widest) + (i ? 1 : 0);
    }
    printf("%s: tuning %s on %s for %s\n", t->path, f->name, r->key.device, r->key.shapes);
    if (r->exhaustive)
      printf("  %lld configuration%s: every one, the defaults first\n", (long long)r->space, r->space == 1 ? "" : "s");
    else if (r->space == INT64_MAX)
      printf("  more configurations than can be counted: coordinate descent from the defaults, at most %d\n", r->budget);
    else
      printf("  %lld configurations, more than %d (--max-configs): coordinate descent from the defaults, at most %d\n",
             (long long)r->space, r->budget, r->budget);
  }
  char *cfg = config_text(f, p->values);
  char count[32], when[32], best[32];
  if (r->exhaustive) snprintf(count, sizeof count, "%d/%lld", r->npoints, (long long)r->space);
  else snprintf(count, sizeof count, "%d", r->npoints);
  if (p->status == TPK_OK) {
    put_time(when, sizeof when, p->seconds);
    put_time(best, sizeof best, r->points[r->best].seconds);
    bool new_best = &r->points[r->best] == p;
    printf("  [%s] %-*s %12s%s  best %s%s%s\n", count, t->config_width, cfg ? cfg : "?", when,
           p->tier[0] && strcmp(p->tier, "cc") != 0 ? " (tcc)" : "", best, new_best ? " *" : "",
           r->npoints == 1 ? "  (defaults)" : "");
  } else {
    printf("  [%s] %-*s skipped%s: %s\n", count, t->config_width, cfg ? cfg : "?",
           p->no_fit ? " (does not fit in VMEM)" : "", p->reason);
  }
  free(cfg);
}

/* The summary after the search. */
static void summary(const Tune *t, const TpkTuneReport *r) {
  const TpkFunc *f = r->f;
  const TpkTunePoint *b = &r->points[r->best], *d = &r->points[r->start];
  char *best = config_text(f, b->values), *dflt = config_text(f, d->values);
  char bt[32], dt[32];
  put_time(bt, sizeof bt, b->seconds);
  put_time(dt, sizeof dt, d->seconds);
  if (b == d)
    printf("best     %s  %s: the defaults are the fastest\n", best ? best : "?", bt);
  else if (d->status == TPK_OK)
    printf("best     %s  %s, %.2fx faster than the defaults (%s, %s)\n", best ? best : "?", bt, d->seconds / b->seconds,
           dflt ? dflt : "?", dt);
  else
    printf("best     %s  %s; the defaults (%s) did not run\n", best ? best : "?", bt, dflt ? dflt : "?");
  printf("searched %d configuration%s in %.3f s: %d timed, %d skipped%s\n", r->npoints, r->npoints == 1 ? "" : "s",
         r->wall_seconds, r->ntimed, r->nskipped, r->exhaustive ? "" : " (coordinate descent, not every configuration)");
  (void)t;
  free(best);
  free(dflt);
}

/* Exit status for a library error: a wrong request (unknown kernel, tunable,
 * symbol or device) is a wrong command line. */
static int report_error(const TpkError *err, bool searching) {
  fflush(stdout);
  cli_print_error("tpk tune", err->message);
  if (err->code == TPK_ERR_INVALID && !searching) {
    fprintf(stderr, "Run 'tpk tune --help' for usage.\n");
    return CLI_USAGE;
  }
  return CLI_FAIL;
}

/* --cached: what a launch with these sizes would use. */
static int show_cached(Tune *t, const TpkProgram *prog) {
  const TpkFunc *f;
  TpkTuneKey key;
  TpkError err = {0};
  TpkStatus st = tpk_tune_prepare(prog, t->kernel, t->device, t->shape.items, t->shape.count, &f, &key, &err);
  int status = CLI_FAIL;
  TpkTuneTable table = {0};
  if (st != TPK_OK) {
    status = report_error(&err, false);
    goto done;
  }
  if (t->defaults) {
    TpkSource tsv;
    st = tpk_source_read(&tsv, t->defaults, &err);
    if (st == TPK_OK) {
      st = tpk_tune_table_parse(&table, tsv.text, tsv.len, t->defaults, &err);
      tpk_source_free(&tsv);
    }
    if (st != TPK_OK) {
      fprintf(stderr, "tpk tune: %s\n", err.message);
      goto done;
    }
  }
  TpkTuneConfig c;
  if (!tpk_tune_lookup(&key, f, NULL, t->defaults ? &table : NULL, &c)) {
    printf("%s: no tuned configuration of %s on %s for %s; launches use the defaults\n", t->path, f->name, key.device,
           key.shapes);
    goto done;
  }
  TpkStr s = {0};
  for (int i = 0; i < c.n; i++) tpk_str_printf(&s, "%s%s=%lld", i ? "," : "", c.tunes[i].name, (long long)c.tunes[i].value);
  char when[32];
  put_time(when, sizeof when, c.seconds);
  printf("%s  (from the %s%s%s; %s when tuned)\n", s.data ? s.data : "",
         strcmp(c.from, "cache") == 0 ? "tuning cache" : t->defaults, c.near ? "'s row for " : "", c.near ? c.near : "",
         when);
  tpk_str_free(&s);
  status = CLI_OK;
done:
  tpk_tune_table_free(&table);
  return status;
}

/* The --scalar values by parameter, checked against the kernel's scalars. */
static int scalar_values(Tune *t, const TpkFunc *f, double *out) {
  for (int i = 0; i < f->nparams && i < 256; i++) out[i] = 1.0;
  for (int j = 0; j < t->scalars.count; j++) {
    const CliPair *s = &t->scalars.items[j];
    int found = -1;
    for (int i = 0; i < f->nparams && i < 256; i++)
      if (strcmp(f->params[i].name, s->name) == 0 && f->params[i].value->type->kind == TPK_TYPE_TENSOR) found = i;
    if (found < 0) return cli_usage_error("tune", "kernel '%s' has no scalar parameter '%s' (--scalar)", f->name, s->name);
    char *end;
    out[found] = strtod(s->text, &end);
    if (*end || end == s->text) return cli_usage_error("tune", "--scalar %s expects a number, got '%s'", s->name, s->text);
  }
  return CLI_OK;
}

static int tune(Tune *t) {
  TpkSource src;
  TpkError err = {0};
  if (cli_source_read(&src, t->path, &err) != TPK_OK) {
    fprintf(stderr, "tpk: %s\n", err.message);
    return CLI_FAIL;
  }
  bool host = strcmp(t->device, "host") == 0;
  /* the host measures optimized code: compile each configuration with cc
   * -O3 at once rather than run tcc's code until it is promoted */
  if (host && !t->cached) setenv("TPK_TIER", "cc", 0);
  /* the program is checked once; every configuration binds its IR */
  TpkContext *ctx = NULL;
  TpkProgram *prog = NULL;
  if (tpk_context_create(&ctx) != TPK_OK || tpk_program_load_source(ctx, src.name, src.text, src.len, &prog) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    tpk_context_destroy(ctx);
    tpk_source_free(&src);
    return CLI_FAIL;
  }
  if (t->cached) {
    int status = show_cached(t, prog);
    tpk_program_destroy(prog);
    tpk_context_destroy(ctx);
    tpk_source_free(&src);
    return status;
  }
  double scalars[256];
  int status = CLI_OK;
  const TpkFunc *f;
  TpkTuneKey key;
  if (tpk_tune_prepare(prog, t->kernel, t->device, t->shape.items, t->shape.count, &f, &key, &err) != TPK_OK)
    status = report_error(&err, false);
  else if (host) status = scalar_values(t, f, scalars);
  TpkTuneReport r = {0};
  if (status == CLI_OK) {
    TpkTuneOptions o = {.device = t->device, .syms = t->shape.items, .nsyms = t->shape.count, .fixed = t->fixed.items,
                        .nfixed = t->fixed.count, .max_points = t->max_configs, .scalars = scalars,
                        .repeat = t->repeat, .seed = t->seed, .progress = progress, .user = t};
    if (tpk_tune_search(prog, t->kernel, &o, &r, &err) != TPK_OK) status = report_error(&err, r.npoints > 0);
  }
  if (status == CLI_OK) {
    summary(t, &r);
    const TpkTunePoint *b = &r.points[r.best];
    char *root = t->no_cache ? NULL : tpk_tune_cache_root(), *path = NULL;
    if (t->no_cache) {
      printf("cache    not written (--no-cache)\n");
    } else if (!root) {
      printf("cache    none (TPK_CACHE_DIR is empty, or no home folder): not remembered\n");
    } else if (tpk_tune_cache_store(root, &r.key, r.f, b->values, b->seconds, &path, &err) != TPK_OK) {
      fprintf(stderr, "tpk tune: %s\n", err.message);
      status = CLI_FAIL;
    } else {
      printf("cached   %s\n", path);
    }
    free(root);
    free(path);
    if (status == CLI_OK && t->save_default) {
      char *cfg = config_text(r.f, b->values);
      if (!cfg || tpk_tune_defaults_save(t->save_default, &r.key, t->path, cfg, b->seconds, &err) != TPK_OK) {
        fprintf(stderr, "tpk tune: %s\n", cfg ? err.message : "out of memory");
        status = CLI_FAIL;
      } else {
        printf("saved    %s (row for %s on %s, %s)\n", t->save_default, r.key.kernel, r.key.device, r.key.shapes);
      }
      free(cfg);
    }
  }
  tpk_tune_report_free(&r);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  tpk_source_free(&src);
  return status;
}

int cli_tune(const CliCommand *cmd, int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they happen, even through a pipe */
  Tune t = {0};
  int status = parse_args(&t, cmd, argc, argv);
  if (status == CLI_OK) status = tune(&t);
  cli_bindings_free(&t.shape);
  cli_bindings_free(&t.fixed);
  cli_pairs_free(&t.scalars);
  return status;
}
