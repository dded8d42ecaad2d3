/*
 * run.c — `tpk run FILE --kernel NAME --shape M=512,N=512 ...`: run a kernel
 * on a device with inputs from .npy files or seeded random data, show the
 * timing, optionally check the results against the reference interpreter
 * and write the outputs as .npy files.
 */
#include "cli/cli.h"
#include "interp/interp.h"
#include "lower/lower.h"
#include "runtime/internal.h"
#include "runtime/tune.h"
#include "base/npy.h"
#include "base/refnum.h"
#include "host/prims.h"
#include "tpk.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { OPT_KERNEL = 1, OPT_SHAPE, OPT_SCALAR, OPT_TUNE, OPT_INPUTS, OPT_OUT, OPT_SEED, OPT_CHECK, OPT_DEVICE, OPT_REPEAT,
       OPT_TRACE, OPT_JSON, OPT_CHECKED };

static const CliOption OPTIONS[] = {
    {"kernel", 'k', true, OPT_KERNEL}, {"shape", 0, true, OPT_SHAPE},   {"scalar", 0, true, OPT_SCALAR},
    {"tune", 0, true, OPT_TUNE},       {"inputs", 0, true, OPT_INPUTS}, {"out", 0, true, OPT_OUT},
    {"seed", 0, true, OPT_SEED},       {"check", 0, false, OPT_CHECK},  {"device", 0, true, OPT_DEVICE},
    {"repeat", 0, true, OPT_REPEAT},   {"trace", 0, true, OPT_TRACE},   {"json", 0, false, OPT_JSON},
    {"checked", 0, false, OPT_CHECKED},
};

/* What one run measured, for `tpk bench`. */
typedef struct RunResult {
  double first_ms, steady_ms;
  bool has_sim;
  TpkSimStats sim;
} RunResult;

typedef struct Run {
  const char *path, *kernel, *out_dir, *device, *trace;
  char *chosen_kernel; /* the file's only kernel when none was named (heap: the program it came from is gone after the run) */
  bool quiet;        /* tpk bench: measure without the running commentary */
  bool bench;        /* parsing `tpk bench` options */
  bool json;         /* tpk bench --json */
  RunResult result;
  CliBindings shape, tunes;
  CliPairs scalars, inputs;
  uint64_t seed;
  bool check, checked;
  int repeat;
} Run;

/* Sizes and tunables a launch takes (its arrays here are fixed). */
enum { MAX_NAMED = 64 };

static int parse_args(Run *r, const CliCommand *cmd, int argc, char **argv) {
  CliArgs args;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  const char *value;
  int id;
  r->repeat = 10;
  r->device = "host";
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END) {
    char *end;
    switch (id) {
    case CLI_ARG_ERROR: return CLI_USAGE;
    case OPT_KERNEL: r->kernel = value; break;
    case OPT_SHAPE:
      if (!cli_bindings_parse(&r->shape, "shape", value)) return CLI_USAGE;
      break;
    case OPT_TUNE:
      if (!cli_bindings_parse(&r->tunes, "tune", value)) return CLI_USAGE;
      break;
    case OPT_SCALAR:
      if (!cli_pairs_parse(&r->scalars, "scalar", value)) return CLI_USAGE;
      break;
    case OPT_INPUTS:
      if (!cli_pairs_parse(&r->inputs, "inputs", value)) return CLI_USAGE;
      break;
    case OPT_OUT: r->out_dir = value; break;
    case OPT_DEVICE: r->device = value; break;
    case OPT_TRACE: r->trace = value; break;
    case OPT_JSON:
      if (!r->bench) return cli_usage_error(cmd->name, "--json belongs to `tpk bench`");
      r->json = true;
      break;
    case OPT_CHECK: r->check = true; break;
    case OPT_CHECKED: r->checked = true; break;
    case OPT_SEED:
      if (!cli_parse_seed(value, &r->seed))
        return cli_usage_error(cmd->name, "--seed expects a non-negative integer, got '%s'", value);
      break;
    case OPT_REPEAT: {
      errno = 0;
      long v = strtol(value, &end, 10);
      if (errno || *end || v < 1 || v > 1000000) return cli_usage_error(cmd->name, "--repeat expects an integer from 1 to 1000000, got '%s'", value);
      r->repeat = (int)v;
      break;
    }
    case CLI_ARG_POSITIONAL:
      if (r->path) return cli_usage_error(cmd->name, "one FILE at a time (got '%s' and '%s')", r->path, value);
      r->path = value;
      break;
    }
  }
  if (!r->path) return cli_usage_error(cmd->name, "no input file (usage: tpk run FILE --kernel NAME --shape M=...,N=...)");
  if (r->bench && (r->check || r->checked || r->out_dir || r->trace))
    return cli_usage_error(cmd->name, "--check, --checked, --out and --trace belong to `tpk run`");
  if (r->shape.count > MAX_NAMED || r->tunes.count > MAX_NAMED)
    return cli_usage_error(cmd->name, "at most %d %s (got %d)", MAX_NAMED,
                           r->shape.count > MAX_NAMED ? "sizes in --shape" : "tunables in --tune",
                           r->shape.count > MAX_NAMED ? r->shape.count : r->tunes.count);
  if (r->out_dir) {
    struct stat st;
    if (!*r->out_dir) return cli_usage_error(cmd->name, "--out expects a folder name, got ''");
    if (stat(r->out_dir, &st) == 0 && !S_ISDIR(st.st_mode))
      return cli_usage_error(cmd->name, "--out %s: not a folder (--out names the folder the .npy files go to)", r->out_dir);
  }
  if (r->trace && !*r->trace) return cli_usage_error(cmd->name, "--trace expects a file name, got ''");
  if (!r->bench && r->trace && strncmp(r->device, "sim:", 4) != 0)
    return cli_usage_error(cmd->name, "--trace records the simulator's timeline: use it with --device sim:<chip>");
  return CLI_OK;
}

/* The running commentary of `tpk run` (silent under `tpk bench`). */
static void say(const Run *r, const char *fmt, ...) TPK_PRINTF(2, 3);
static void say(const Run *r, const char *fmt, ...) {
  if (r->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* ---- data --------------------------------------------------------------------- */

static int64_t numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

static void shape_text(char *buf, size_t n, const char *dtype, int rank, const int64_t *shape) {
  int k = snprintf(buf, n, "%s[", dtype);
  for (int i = 0; i < rank && k < (int)n; i++) k += snprintf(buf + k, n - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < (int)n) snprintf(buf + k, n - (size_t)k, "]");
}

/* NumPy's name of a dtype; NULL for bf16 and f8, which NumPy lacks. */
static const char *numpy_name(TpkDType dt) {
  switch (dt) {
  case TPK_F32: return "float32";
  case TPK_F16: return "float16";
  case TPK_I32: return "int32";
  case TPK_I16: return "int16";
  case TPK_I8: return "int8";
  case TPK_U8: return "uint8";
  case TPK_U16: return "uint16";
  case TPK_U32: return "uint32";
  case TPK_BOOL: return "bool";
  default: return NULL;
  }
}

/* An input from a .npy file: the same shape, and the parameter's dtype or
 * one a NumPy user is likely to hold instead, converted:
 *   - float64 (NumPy's default) or float32 for any float parameter, rounded
 *     to nearest even (float64 through float32);
 *   - int64 (NumPy's default integer) for an i32 parameter, each value
 *     checked to fit.
 * A conversion is noted in one line on stderr, except float32 for bf16 and
 * f8, which NumPy has no type for: that is how their data is written. Any
 * other dtype is refused, naming both. */
static bool load_input(const char *pname, const char *path, TpkBuffer *b) {
  TpkNpy npy;
  TpkError err = {0};
  if (tpk_npy_read(path, &npy, &err) != TPK_OK) {
    fprintf(stderr, "tpk: %s\n", err.message);
    return false;
  }
  bool ok = npy.rank == tpk_buffer_rank(b);
  for (int i = 0; ok && i < npy.rank; i++) ok = npy.shape[i] == tpk_buffer_shape(b)[i];
  TpkDType want = tpk_buffer_dtype(b);
  /* the reader holds float64 as f32 and int64 as i32 */
  bool convertible = npy.dtype == want || (npy.dtype == TPK_F32 && tpk_dtype_is_float(want));
  if (!ok || !convertible) {
    char have[128], need[128];
    /* tpk's name of the file's dtype; NumPy's for float64 and int64, which tpk lacks */
    bool held_as_is = numpy_name(npy.dtype) && strcmp(numpy_name(npy.dtype), npy.file_dtype) == 0;
    shape_text(have, sizeof have, held_as_is ? tpk_dtype_name(npy.dtype) : npy.file_dtype, npy.rank, npy.shape);
    shape_text(need, sizeof need, tpk_dtype_name(want), tpk_buffer_rank(b), tpk_buffer_shape(b));
    const char *from = tpk_dtype_is_float(want) ? "float32 or float64" : want == TPK_I32 ? "int32 or int64" : numpy_name(want);
    fprintf(stderr, "tpk: %s holds %s but parameter '%s' needs %s%s%s%s\n", path, have, pname, need,
            convertible ? "" : " (a file of ", convertible ? "" : from, convertible ? "" : ")");
    tpk_npy_free(&npy);
    return false;
  }
  const char *same = numpy_name(want);
  if (same ? strcmp(npy.file_dtype, same) != 0 : strcmp(npy.file_dtype, "float32") != 0)
    fprintf(stderr, "tpk: note: %s holds %s; %s to %s for parameter '%s'\n", path, npy.file_dtype,
            tpk_dtype_is_float(want) ? "rounded" : "converted", tpk_dtype_name(want), pname);
  tpk_prims()->convert((int)npy.dtype, (int)want, npy.data, tpk_buffer_data(b), numel(npy.rank, npy.shape));
  tpk_npy_free(&npy);
  return true;
}

/* ---- checking against the reference interpreter -------------------------------------- */

/* Tolerances by dtype: about two units in the last place of the output type,
 * plus differences of accumulation order (a long dot product's rounding
 * grows with its terms, not its result: the absolute part is scaled by the
 * output's largest magnitude). */
static void tolerance(TpkDType dt, double *atol, double *rtol) {
  switch (dt) {
  case TPK_F32: *atol = 1e-5; *rtol = 1e-4; break;
  case TPK_F16: *atol = 1e-3; *rtol = 2e-3; break;
  case TPK_BF16: *atol = 1e-2; *rtol = 1.6e-2; break;
  case TPK_F8E4M3: *atol = 0.125; *rtol = 0.13; break;
  case TPK_F8E5M2: *atol = 0.25; *rtol = 0.26; break;
  default: *atol = 0; *rtol = 0; break;
  }
}

static bool compare(const char *name, TpkDType dt, int rank, const int64_t *shape, const void *got, const void *want) {
  int64_t n = numel(rank, shape);
  float *g = malloc((size_t)(n ? n : 1) * sizeof *g), *w = malloc((size_t)(n ? n : 1) * sizeof *w);
  if (!g || !w) {
    free(g);
    free(w);
    fprintf(stderr, "tpk: out of memory checking '%s'\n", name);
    return false;
  }
  bool exact = !tpk_dtype_is_float(dt);
  if (exact && dt != TPK_BOOL) { /* integers: compare as int32, exactly */
    int32_t *gi = (int32_t *)(void *)g, *wi = (int32_t *)(void *)w;
    tpk_prims()->convert((int)dt, TPK_PRIM_I32, got, gi, n);
    tpk_prims()->convert((int)dt, TPK_PRIM_I32, want, wi, n);
    for (int64_t i = 0; i < n; i++) {
      g[i] = (float)gi[i];
      w[i] = (float)wi[i];
    }
  } else {
    tpk_prims()->convert((int)dt, TPK_PRIM_F32, got, g, n);
    tpk_prims()->convert((int)dt, TPK_PRIM_F32, want, w, n);
  }
  double atol, rtol;
  tolerance(dt, &atol, &rtol);
  double scale = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(w[i]) && fabs(w[i]) > scale) scale = fabs(w[i]);
  if (scale > 1) atol *= scale;
  int64_t worst = -1, bad = 0;
  double worst_excess = 0, max_abs = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = g[i], b = w[i];
    if (isnan(a) && isnan(b)) continue;
    double d = fabs(a - b);
    if (isinf(a) || isinf(b)) d = a == b ? 0 : INFINITY;
    if (d > max_abs && !isinf(d)) max_abs = d;
    double excess = d - (atol + rtol * fabs(b));
    if (excess > 0 || (isnan(a) != isnan(b))) {
      bad++;
      if (worst < 0 || excess > worst_excess || isnan(excess)) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (worst >= 0) {
    char at[160];
    int k = snprintf(at, sizeof at, "%s[", name);
    int64_t rem = worst;
    int64_t idx[TPK_MAX_DIMS];
    for (int d = rank - 1; d >= 0; d--) {
      idx[d] = shape[d] ? rem % shape[d] : 0;
      rem = shape[d] ? rem / shape[d] : 0;
    }
    for (int d = 0; d < rank && k < (int)sizeof at; d++) k += snprintf(at + k, sizeof at - (size_t)k, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (k < (int)sizeof at) snprintf(at + k, sizeof at - (size_t)k, "]");
    printf("  check        FAILED: %s: %lld of %lld elements differ from the reference interpreter; worst at %s: got %.9g, expected %.9g (tolerance %.3g + %g*|expected|)\n",
           name, (long long)bad, (long long)n, at, (double)g[worst], (double)w[worst], atol, rtol);
  } else {
    printf("  check        ok: '%s' matches the reference interpreter (%lld elements, max abs diff %.3g)\n", name,
           (long long)n, max_abs);
  }
  free(g);
  free(w);
  return worst < 0;
}

/* Run the reference interpreter on copies of the inputs: with --check,
 * compare every output and inout parameter; with --checked, in checked mode,
 * report the kernel bugs it finds. */
static bool has_binding(const TpkBinding *b, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(b[i].name, name) == 0) return true;
  return false;
}

/* Whether every buffer of the launch fits in the device's memory, checked
 * before any is allocated and filled (a simulated chip's HBM is finite, and
 * filling 16 GiB only to fail on the next buffer takes minutes). */
static bool fits_on_device(TpkKernel *k, TpkDevice *dev, const TpkNamedInt *sizes, int nsizes) {
  uint64_t capacity, used;
  tpk_device_memory(dev, &capacity, &used);
  if (!capacity) return true;
  double need = 0; /* a double: a product of sizes must not wrap */
  for (int i = 0; i < tpk_kernel_param_count(k); i++) {
    if (tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR) continue;
    int64_t shape[TPK_MAX_DIMS];
    if (tpk_kernel_param_shape(k, i, sizes, nsizes, shape) != TPK_OK) return true; /* the launch says why */
    double bytes = (double)tpk_dtype_size(tpk_kernel_param_dtype(k, i));
    for (int d = 0; d < tpk_kernel_param_rank(k, i); d++) bytes *= (double)shape[d];
    need += bytes;
  }
  if (need <= (double)(capacity - used)) return true;
  fprintf(stderr, "tpk: %s: out of memory: the kernel's buffers need %.1f GiB, the device has %.1f GiB (%.1f in use)\n",
          tpk_device_name(dev), need / (1 << 30), (double)capacity / (1 << 30), (double)used / (1 << 30));
  return false;
}

static bool check_against_interpreter(const Run *r, TpkKernel *k, const TpkLaunchResult *ran, TpkBuffer **bufs,
                                      void **before, const double *scalars) {
  /* The kernel the launch ran, bound as it was: every size from the
   * buffers, the tunables the launch used. */
  const TpkFunc *ir = tpk_kernel_ir(k);
  TpkBinding binds[128];
  int nb = 0;
  for (int i = 0; i < ir->nparams; i++) {
    const TpkType *t = ir->params[i].value->type;
    for (int d = 0; t->kind == TPK_TYPE_REF && d < t->rank && nb < 64; d++) {
      const TpkDim *dim = t->dims[d];
      if (dim->kind == TPK_DIM_SYM && !has_binding(binds, nb, dim->sym))
        binds[nb++] = (TpkBinding){dim->sym, tpk_buffer_shape(bufs[i])[d]};
    }
  }
  for (int i = 0; i < r->shape.count && nb < 64; i++) /* symbols no buffer shows */
    if (!has_binding(binds, nb, r->shape.items[i].name)) binds[nb++] = r->shape.items[i];
  const char *used = ran->tunes;
  int64_t tunes[TPK_TUNE_MAX_TUNABLES];
  if (ir->ntunes > TPK_TUNE_MAX_TUNABLES || !tpk_tune_parse(ir, used, strlen(used), tunes)) {
    fprintf(stderr, "tpk: cannot read the tunables the launch used (%s)\n", used);
    return false;
  }
  for (int i = 0; i < ir->ntunes; i++) /* a tunable a shape uses is bound above */
    if (!has_binding(binds, nb, ir->tunes[i].name)) binds[nb++] = (TpkBinding){ir->tunes[i].name, tunes[i]};
  int np = tpk_kernel_param_count(k);
  TpkModule *m = tpk_module_new(ir->name);
  TpkFunc *f = NULL;
  TpkError berr = {0};
  if (!m || tpk_bind(m, ir, binds, nb, &f, &berr) != TPK_OK) {
    fprintf(stderr, "tpk: cannot build the reference for the check: %s\n", m ? berr.message : "out of memory");
    if (m) tpk_module_free(m);
    return false;
  }
  void *args[256];
  void *mem[256] = {0};
  uint64_t svals[256];
  bool ok = true;
  for (int i = 0; i < np && ok; i++) {
    if (tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR) {
      float fv = (float)scalars[i];
      TpkDType dt = tpk_kernel_param_dtype(k, i);
      if (tpk_dtype_is_float(dt)) tpk_prims()->convert(TPK_PRIM_F32, (int)dt, &fv, &svals[i], 1);
      else {
        int32_t iv = (int32_t)scalars[i];
        tpk_prims()->convert(TPK_PRIM_I32, (int)dt, &iv, &svals[i], 1);
      }
      args[i] = &svals[i];
      continue;
    }
    size_t bytes = tpk_buffer_bytes(bufs[i]);
    mem[i] = calloc(1, bytes ? bytes : 1);
    if (!mem[i]) {
      ok = false;
      break;
    }
    if (before[i]) memcpy(mem[i], before[i], bytes); /* inputs and inouts as they were */
    args[i] = mem[i];
  }
  TpkError err = {0};
  TpkInterpOptions io = {.checked = r->checked};
  TpkStr report = {0};
  int violations = 0;
  if (ok && tpk_interp_run_checked(f, args, NULL, &io, &report, &violations, &err) != TPK_OK) {
    printf("  check        the reference interpreter failed: %s\n", err.message);
    ok = false;
  }
  if (ok && r->checked) {
    if (!violations) {
      printf("  checked      no out-of-range index, grid write race, read before wait or uninitialized read\n");
    } else {
      printf("  checked      %d violation%s:\n", violations, violations == 1 ? "" : "s");
      for (char *line = report.data; line && *line;) {
        char *end = strchr(line, '\n');
        printf("               %.*s\n", end ? (int)(end - line) : (int)strlen(line), line);
        line = end ? end + 1 : NULL;
      }
      ok = false;
    }
  }
  tpk_str_free(&report);
  for (int i = 0; i < np && ok && r->check; i++) {
    TpkParamKind kind = tpk_kernel_param_kind(k, i);
    if (kind != TPK_PARAM_KIND_OUTPUT && kind != TPK_PARAM_KIND_INOUT) continue;
    ok = compare(tpk_kernel_param_name(k, i), tpk_buffer_dtype(bufs[i]), tpk_buffer_rank(bufs[i]),
                 tpk_buffer_shape(bufs[i]), tpk_buffer_data(bufs[i]), mem[i]) && ok;
  }
  for (int i = 0; i < np; i++) free(mem[i]);
  tpk_module_free(m);
  return ok;
}

/* ---- the command ---------------------------------------------------------------------- */

static int run(Run *r) {
  int status = CLI_FAIL;
  TpkContext *ctx = NULL;
  TpkDevice *dev = NULL;
  TpkProgram *prog = NULL;
  TpkKernel *k = NULL;
  TpkBuffer *bufs[256] = {0};
  void *before[256] = {0};
  double scalars[256] = {0};
  TpkSource src = {0};
  TpkError err = {0};
  int np = 0;
  if (cli_source_read(&src, r->path, &err) != TPK_OK) {
    fprintf(stderr, "tpk: %s\n", err.message);
    return CLI_FAIL;
  }
  if (tpk_context_create(&ctx) != TPK_OK || tpk_device_open(ctx, r->device, &dev) != TPK_OK ||
      tpk_program_load_source(ctx, src.name, src.text, src.len, &prog) != TPK_OK) {
    /* diagnostics arrive rendered (file:line:col: error: ...); other
     * failures get the usual prefix */
    cli_print_error("tpk", tpk_last_error());
    goto done;
  }
  if (!r->kernel) {
    if (tpk_program_kernel_count(prog) != 1) {
      fprintf(stderr, "tpk: %s has %d kernels; choose one with --kernel:", src.name, tpk_program_kernel_count(prog));
      for (int i = 0; i < tpk_program_kernel_count(prog); i++) fprintf(stderr, " %s", tpk_program_kernel_name(prog, i));
      fprintf(stderr, "\n");
      status = CLI_USAGE;
      goto done;
    }
    if (!(r->kernel = r->chosen_kernel = strdup(tpk_program_kernel_name(prog, 0)))) {
      fprintf(stderr, "tpk: out of memory\n");
      goto done;
    }
  }
  if (tpk_program_kernel(prog, r->kernel, &k) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    goto done;
  }
  np = tpk_kernel_param_count(k);
  if (np > 256) {
    fprintf(stderr, "tpk: kernel '%s' has more than 256 parameters\n", r->kernel);
    goto done;
  }
  TpkNamedInt syms[MAX_NAMED]; /* parse_args allows no more */
  int nsyms = 0;
  for (int i = 0; i < r->shape.count; i++) syms[nsyms++] = (TpkNamedInt){r->shape.items[i].name, r->shape.items[i].value};
  for (int i = 0; i < tpk_kernel_symbol_count(k); i++) {
    const char *s = tpk_kernel_symbol_name(k, i);
    bool have = false;
    for (int j = 0; j < nsyms; j++) have |= strcmp(syms[j].name, s) == 0;
    if (!have) {
      fprintf(stderr, "tpk: kernel '%s' needs the size of %s: --shape", r->kernel, s);
      for (int j = 0; j < tpk_kernel_symbol_count(k); j++) fprintf(stderr, "%s%s=...", j ? "," : " ", tpk_kernel_symbol_name(k, j));
      fprintf(stderr, "\n");
      status = CLI_USAGE;
      goto done;
    }
  }
  /* outputs are sized with the launch's tunables too: y: f32[G, N] */
  TpkNamedInt sizes[128];
  int nsizes = 0;
  for (int i = 0; i < nsyms; i++) sizes[nsizes++] = syms[i];
  for (int i = 0; i < r->tunes.count && nsizes < 128; i++)
    sizes[nsizes++] = (TpkNamedInt){r->tunes.items[i].name, r->tunes.items[i].value};
  say(r, "%s: kernel %s on %s\n", src.name, r->kernel, tpk_device_name(dev));
  if (!fits_on_device(k, dev, sizes, nsizes)) goto done;
  uint64_t rng = r->seed;
  for (int i = 0; i < np; i++) {
    const char *name = tpk_kernel_param_name(k, i);
    TpkParamKind kind = tpk_kernel_param_kind(k, i);
    TpkDType dt = tpk_kernel_param_dtype(k, i);
    if (kind == TPK_PARAM_KIND_SCALAR) {
      const char *text = cli_pairs_find(&r->scalars, name);
      if (!text) {
        fprintf(stderr, "tpk: scalar '%s' (%s) needs a value: --scalar %s=...\n", name, tpk_dtype_name(dt), name);
        status = CLI_USAGE;
        goto done;
      }
      char *end;
      scalars[i] = strtod(text, &end);
      if (*end || end == text) {
        fprintf(stderr, "tpk: --scalar %s expects a number, got '%s'\n", name, text);
        status = CLI_USAGE;
        goto done;
      }
      say(r, "  %-12s %s = %s\n", name, tpk_dtype_name(dt), text);
      continue;
    }
    int64_t shape[TPK_MAX_DIMS];
    if (tpk_kernel_param_shape(k, i, sizes, nsizes, shape) != TPK_OK ||
        tpk_buffer_create(dev, dt, tpk_kernel_param_rank(k, i), shape, &bufs[i]) != TPK_OK) {
      cli_print_error("tpk", tpk_last_error());
      goto done;
    }
    char st[128];
    shape_text(st, sizeof st, tpk_dtype_name(dt), tpk_kernel_param_rank(k, i), shape);
    const char *file = cli_pairs_find(&r->inputs, name);
    if (kind == TPK_PARAM_KIND_OUTPUT) {
      if (file) {
        fprintf(stderr, "tpk: '%s' is an output; --inputs gives inputs only\n", name);
        status = CLI_USAGE;
        goto done;
      }
      say(r, "  %-12s %-22s output\n", name, st);
      continue;
    }
    if (file) {
      if (!load_input(name, file, bufs[i])) goto done;
      say(r, "  %-12s %-22s from %s\n", name, st, file);
    } else {
      tpk_fill_random(tpk_buffer_data(bufs[i]), dt, numel(tpk_buffer_rank(bufs[i]), shape), &rng);
      say(r, "  %-12s %-22s random (seed %llu)\n", name, st, (unsigned long long)r->seed);
    }
    if (r->check || r->checked) { /* inouts change: keep what the reference must start from */
      size_t bytes = tpk_buffer_bytes(bufs[i]);
      before[i] = malloc(bytes ? bytes : 1);
      if (!before[i]) goto done;
      memcpy(before[i], tpk_buffer_data(bufs[i]), bytes);
    }
  }
  for (int j = 0; j < r->inputs.count; j++) {
    bool known = false;
    for (int i = 0; i < np; i++) known |= strcmp(tpk_kernel_param_name(k, i), r->inputs.items[j].name) == 0;
    if (!known) {
      fprintf(stderr, "tpk: kernel '%s' has no parameter '%s' (--inputs)\n", r->kernel, r->inputs.items[j].name);
      status = CLI_USAGE;
      goto done;
    }
  }
  TpkNamedInt tunes[MAX_NAMED]; /* parse_args allows no more */
  for (int i = 0; i < r->tunes.count; i++) tunes[i] = (TpkNamedInt){r->tunes.items[i].name, r->tunes.items[i].value};
  TpkLaunchResult ran;
  TpkLaunch launch = {.args = bufs, .scalars = scalars, .syms = syms, .nsyms = nsyms, .tunes = tunes, .ntunes = r->tunes.count,
                      .result = &ran};
  /* The first call compiles; inouts would be updated by every call, so
   * the check compares the first call's results. */
  double t0 = tpk_now_seconds();
  if (tpk_kernel_launch(k, &launch) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    goto done;
  }
  double first = (tpk_now_seconds() - t0) * 1e3;
  r->result.first_ms = first;
  if (strcmp(ran.tier, "aot") == 0)
    say(r, "  first call   %.3f ms (the standard library's code: nothing compiled)\n", first);
  else if (strcmp(ran.tier, "cache") == 0)
    say(r, "  first call   %.3f ms (cc's code, loaded from the cache)\n", first);
  else
    say(r, "  first call   %.3f ms (compiled by %s)\n", first, ran.tier);
  if (ran.note[0]) fprintf(stderr, "tpk: note: %s\n", ran.note);
  if (ran.tunes[0]) say(r, "  tunables     %s (%s)\n", ran.tunes, ran.tunes_from);
  if (ran.simulated) {
    TpkSimStats sim = ran.sim;
    r->result.has_sim = true;
    r->result.sim = sim;
    double flops = sim.matmul_flops ? sim.matmul_flops : sim.flops;
    say(r, "  simulated    %s: %.3f ms (%.0f cycles at %.2f GHz)\n", sim.chip, sim.seconds * 1e3, sim.cycles, sim.clock_hz / 1e9);
    say(r, "               %.1f TFLOP/s = %.1f%% of peak, %.1f GB/s = %.1f%% of HBM\n", flops / sim.seconds / 1e12,
           100 * flops / sim.seconds / sim.peak_flops, sim.hbm_bytes / sim.seconds / 1e9,
           100 * sim.hbm_bytes / sim.seconds / sim.hbm_bytes_per_s);
    say(r, "               %s-bound: the roofline is %.3f ms (%.0f%% of it reached)\n",
           sim.memory_bound ? "memory" : "compute", sim.roofline_seconds * 1e3,
           100 * sim.roofline_seconds / sim.seconds);
    say(r, "               busy: MXU %.0f%%, VPU %.0f%%, HBM %.0f%%\n", 100 * sim.mxu_utilisation,
           100 * sim.vpu_utilisation, 100 * sim.hbm_utilisation);
    if (r->trace) {
      if (tpk_trace_write(ran.trace, NULL, r->trace) != TPK_OK) {
        cli_print_error("tpk", tpk_last_error());
        goto done;
      }
      say(r, "  trace        %s (open it in ui.perfetto.dev or chrome://tracing)\n", r->trace);
    }
  }
  bool ok = true;
  if (r->check || r->checked) ok = check_against_interpreter(r, k, &ran, bufs, before, scalars);
  if (r->out_dir) {
    /* The folder is followed if it is a link (the user named it); each
     * file is written by tpk_npy_write, which never follows one. */
    if (mkdir(r->out_dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "tpk: cannot create the folder %s: %s\n", r->out_dir, strerror(errno));
      goto done;
    }
    for (int i = 0; i < np; i++) {
      TpkParamKind kind = tpk_kernel_param_kind(k, i);
      if (kind != TPK_PARAM_KIND_OUTPUT && kind != TPK_PARAM_KIND_INOUT) continue;
      TpkStr path = {0};
      tpk_str_printf(&path, "%s/%s.npy", r->out_dir, tpk_kernel_param_name(k, i));
      if (path.failed || tpk_npy_write(path.data, tpk_buffer_dtype(bufs[i]), tpk_buffer_rank(bufs[i]),
                                       tpk_buffer_shape(bufs[i]), tpk_buffer_data(bufs[i]), &err) != TPK_OK) {
        fprintf(stderr, "tpk: %s\n", path.failed ? "out of memory" : err.message);
        tpk_str_free(&path);
        goto done;
      }
      say(r, "  wrote        %s\n", path.data);
      tpk_str_free(&path);
    }
  }
  /* Steady state: warm up past the promotion threshold, let the optimized
   * tier land, then time. */
  for (int i = 0; i < 3; i++)
    if (tpk_kernel_launch(k, &launch) != TPK_OK) {
      cli_print_error("tpk", tpk_last_error());
      goto done;
    }
  tpk_context_wait_compiles(ctx);
  double *times = malloc((size_t)r->repeat * sizeof *times);
  if (!times) goto done;
  for (int i = 0; i < r->repeat; i++) {
    double s = tpk_now_seconds();
    if (tpk_kernel_launch(k, &launch) != TPK_OK) {
      cli_print_error("tpk", tpk_last_error());
      free(times);
      goto done;
    }
    times[i] = (tpk_now_seconds() - s) * 1e3;
  }
  r->result.steady_ms = tpk_median(times, r->repeat); /* sorts times */
  say(r, "  steady       %.3f ms median of %d (min %.3f ms, tier %s)\n", r->result.steady_ms, r->repeat, times[0],
         ran.tier);
  free(times);
  status = ok ? CLI_OK : CLI_FAIL;
done:
  for (int i = 0; i < np; i++) {
    tpk_buffer_destroy(bufs[i]);
    free(before[i]);
  }
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  tpk_source_free(&src);
  return status;
}

static void run_free(Run *r) {
  free(r->chosen_kernel);
  cli_bindings_free(&r->shape);
  cli_bindings_free(&r->tunes);
  cli_pairs_free(&r->scalars);
  cli_pairs_free(&r->inputs);
}

int cli_run(const CliCommand *cmd, int argc, char **argv) {
  /* progress lines and errors interleave in order, even through a pipe */
  setvbuf(stdout, NULL, _IOLBF, 0);
  Run r = {0};
  int status = parse_args(&r, cmd, argc, argv);
  if (status == CLI_OK) status = run(&r);
  run_free(&r);
  return status;
}

/* ---- tpk bench ---------------------------------------------------------------------- */

/* `tpk bench FILE --kernel K --shape ... --device host,sim:v5e,sim:v6e`: the
 * same inputs on every device, one row each: measured time on the host,
 * simulated time and rates on the chips. */
int cli_bench(const CliCommand *cmd, int argc, char **argv) {
  if (cli_bench_wants_suite(argc, argv)) return cli_bench_suite(cmd, argc, argv);
  setvbuf(stdout, NULL, _IOLBF, 0);
  Run r = {.bench = true};
  int status = parse_args(&r, cmd, argc, argv);
  char *devices = status == CLI_OK ? strdup(r.device) : NULL;
  if (status == CLI_OK && !devices) status = CLI_FAIL;
  if (status == CLI_OK && !r.json)
    printf("%-10s %12s %12s %10s %10s %9s %8s\n", "device", "time", "first call", "TFLOP/s", "GB/s", "of peak", "bound");
  for (char *dev = devices ? strtok(devices, ",") : NULL; dev && status == CLI_OK; dev = strtok(NULL, ",")) {
    Run one = r;
    one.device = dev;
    one.quiet = true;
    status = run(&one);
    if (status != CLI_OK) {
      free(one.chosen_kernel);
      break;
    }
    const RunResult *res = &one.result;
    const TpkSimStats *st = &res->sim;
    double flops = st->matmul_flops ? st->matmul_flops : st->flops;
    if (r.json) {
      if (res->has_sim)
        printf("{\"name\": \"%s %s\", \"device\": \"%s\", \"value\": %.6g, \"unit\": \"ms\", \"baseline\": null, "
               "\"ratio\": null, \"tflops\": %.4g, \"gbps\": %.4g, \"peak_fraction\": %.4f, \"bound\": \"%s\"}\n",
               one.kernel, one.path, dev, st->seconds * 1e3, flops / st->seconds / 1e12, st->hbm_bytes / st->seconds / 1e9,
               flops / st->seconds / st->peak_flops, st->memory_bound ? "memory" : "compute");
      else
        printf("{\"name\": \"%s %s\", \"device\": \"%s\", \"value\": %.6g, \"unit\": \"ms\", \"baseline\": null, "
               "\"ratio\": null}\n", one.kernel, one.path, dev, res->steady_ms);
    } else if (res->has_sim) {
      printf("%-10s %9.3f ms %9.3f ms %10.1f %10.1f %8.1f%% %8s\n", dev, st->seconds * 1e3, res->first_ms,
             flops / st->seconds / 1e12, st->hbm_bytes / st->seconds / 1e9, 100 * flops / st->seconds / st->peak_flops,
             st->memory_bound ? "memory" : "compute");
    } else {
      printf("%-10s %9.3f ms %9.3f ms %10s %10s %9s %8s\n", dev, res->steady_ms, res->first_ms, "-", "-", "-", "-");
    }
    free(one.chosen_kernel);
  }
  free(devices);
  run_free(&r);
  return status;
}
