/*
 * bench_suite.c — `tpk bench --suite std`: every kernel of the standard
 * library (the .tpk files of kernels/) at a documented shape, in one table.
 *
 * For each row of STD_SUITE below:
 *   - on the host: the steady-state time of the kernel (after the first call
 *     compiled it and the optimized tier landed), its GFLOP/s or GB/s, and
 *     the best CPU reference for the same op measured in the same run —
 *     OpenBLAS sgemm for matmul (dlopen'ed, so tpk does not link it),
 *     PyTorch CPU eager for the rest (bench/torch_ref.py, a child process
 *     spoken to over a pipe). tpk and the reference run in alternating
 *     blocks and each reports the median of its calls: this machine's speed
 *     drifts, and interleaving makes a slow spell hit both.
 *   - on each simulated chip (sim:v5e by default): the time the chip would
 *     take, the share of the roofline reached and, for matmul work, of peak.
 * The goals are checked at the end, one pass/fail line each.
 *
 * Fairness: the host device runs a kernel's grid on suite_threads
 * threads (--threads), and both references are limited to that many.
 *
 * A row whose file or kernel is missing is reported as missing and makes
 * the exit status 1, like a row that failed; a missing reference (no
 * OpenBLAS, no PyTorch) only empties its columns ("n/a", with a hint).
 */
#include "cli/cli.h"
#include "base/files.h"
#include "host/prims.h"
#include "tpk.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The threads tpk's host device runs a grid on (tpk_host_threads(), or
 * --threads, which sets $TPK_HOST_THREADS for the suite's contexts). The
 * references get the same number. */
static int suite_threads = 1;

/* ---- The suite: one row per benchmark ------------------------------------------ */

typedef enum { REF_NONE, REF_SGEMM, REF_TORCH } RefKind;
typedef enum { RATE_BYTES, RATE_FLOPS } RateKind;
enum { ON_HOST = 1, ON_SIM = 2, ON_BOTH = 3 };
typedef enum { GOAL_NONE, GOAL_HOST_RATIO, GOAL_SIM_PEAK } GoalKind;

/* The chip the simulator goal is stated for. */
#define GOAL_SIM_DEVICE "sim:v5e"

typedef struct SuiteRow {
  const char *file;    /* in the kernels folder */
  const char *kernel;
  const char *shape;   /* the documented shape: every shape symbol of the kernel */
  const char *smoke;   /* tiny sizes for --smoke (tests) */
  const char *scalars; /* "eps=1e-5", or NULL */
  const char *flops;   /* formula over the shape symbols (+ - * / and parentheses); NULL: not counted */
  const char *bytes;   /* formula; NULL: every tensor parameter once, inouts twice (read and written) */
  RateKind rate;       /* which rate the table shows */
  int devices;         /* ON_HOST, ON_SIM or both */
  RefKind ref;
  const char *ref_op;  /* the op's key in bench/torch_ref.py (REF_TORCH) */
  const char *int_max; /* integer inputs uniform in [0, this symbol) (ids, targets); NULL: [0, 8) */
  const char *nonneg;  /* a float input filled from [0, 1) instead of [-1, 1) (a variance) */
  GoalKind goal;
  double goal_at;      /* the ratio (GOAL_HOST_RATIO) or the fraction of peak (GOAL_SIM_PEAK) */
} SuiteRow;

#define MM "M=1024,N=1024,K=1024"
#define MM_SMOKE "M=37,N=50,K=29"
#define ROWS "M=4096,N=4096"
#define ROWS_SMOKE "M=37,N=130"
#define ATTN "B=1,H=8,HKV=8,S=1024,T=1024,D=64"
#define ATTN_SMOKE "B=1,H=4,HKV=2,S=37,T=50,D=16"
#define ATTN_FLOPS "4*B*H*S*T*D" /* QK^T and PV */
#define CONV "N=8,H=56,W=56,C=64,F=64,KH=3,KW=3"
#define CONV_SMOKE "N=1,H=9,W=7,C=5,F=6,KH=3,KW=3"
#define ADAMW_SCALARS "lr=1e-3,beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,step=10"

/* Shapes: matmuls at 1024^3 on the host (the OpenBLAS goal) and
 * bf16 at 4096^3 on the simulator (its peak goal); row-wise kernels on
 * 4096x4096 f32 (64 MiB, far beyond the caches); attention at one batch of
 * 8 heads of 1024 tokens, 64 wide. */
static const SuiteRow STD_SUITE[] = {
    {"matmul.tpk", "matmul", MM, MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS, .devices = ON_BOTH,
     .ref = REF_SGEMM, .goal = GOAL_HOST_RATIO, .goal_at = 0.8},
    {"matmul.tpk", "matmul_bf16", "M=4096,N=4096,K=4096", MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS,
     .devices = ON_SIM, .goal = GOAL_SIM_PEAK, .goal_at = 0.85},
    {"matmul.tpk", "matmul_i8", MM, MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS, .devices = ON_BOTH,
     .ref = REF_TORCH, .ref_op = "int_mm"},
    {"matmul.tpk", "matmul_bias", MM, MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS, .devices = ON_BOTH,
     .ref = REF_TORCH, .ref_op = "addmm"},
    {"matmul.tpk", "matmul_bias_relu", MM, MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS, .devices = ON_BOTH,
     .ref = REF_TORCH, .ref_op = "addmm_relu"},
    {"matmul.tpk", "matmul_bias_gelu", MM, MM_SMOKE, .flops = "2*M*N*K", .rate = RATE_FLOPS, .devices = ON_BOTH,
     .ref = REF_TORCH, .ref_op = "addmm_gelu"},
    {"bmm.tpk", "bmm", "B=16,M=512,N=512,K=512", "B=3,M=37,N=50,K=29", .flops = "2*B*M*N*K", .rate = RATE_FLOPS,
     .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "bmm"},
    {"softmax.tpk", "softmax", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "softmax",
     .goal = GOAL_HOST_RATIO, .goal_at = 1.0},
    {"softmax.tpk", "log_softmax", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "log_softmax"},
    {"softmax.tpk", "softmax_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "softmax_bwd"},
    {"softmax.tpk", "log_softmax_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "log_softmax_bwd"},
    {"layernorm.tpk", "layernorm", ROWS, ROWS_SMOKE, "eps=1e-5", .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "layer_norm", .goal = GOAL_HOST_RATIO, .goal_at = 1.0},
    {"layernorm.tpk", "layernorm_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "layer_norm_bwd"},
    {"rmsnorm.tpk", "rmsnorm", ROWS, ROWS_SMOKE, "eps=1e-6", .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "rms_norm", .goal = GOAL_HOST_RATIO, .goal_at = 1.0},
    {"rmsnorm.tpk", "rmsnorm_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "rms_norm_bwd"},
    {"activations.tpk", "gelu", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "gelu"},
    {"activations.tpk", "gelu_tanh", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "gelu_tanh"},
    {"activations.tpk", "silu", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "silu"},
    {"activations.tpk", "swiglu", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "swiglu"},
    {"activations.tpk", "gelu_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "gelu_bwd"},
    {"activations.tpk", "gelu_tanh_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "gelu_tanh_bwd"},
    {"activations.tpk", "silu_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "silu_bwd"},
    {"activations.tpk", "swiglu_bwd", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "swiglu_bwd"},
    {"cross_entropy.tpk", "cross_entropy", "M=1024,V=32000", "M=37,V=130", .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "cross_entropy", .int_max = "V", .goal = GOAL_HOST_RATIO, .goal_at = 1.0},
    {"cross_entropy.tpk", "cross_entropy_bwd", "M=1024,V=32000", "M=37,V=130", .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "cross_entropy_bwd", .int_max = "V"},
    {"attention.tpk", "flash_attention", ATTN, ATTN_SMOKE, "scale=0.125", .flops = ATTN_FLOPS, .rate = RATE_FLOPS,
     .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sdpa"},
    {"attention.tpk", "flash_attention_causal", ATTN, ATTN_SMOKE, "scale=0.125", .flops = "2*B*H*S*T*D",
     .rate = RATE_FLOPS, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sdpa_causal"},
    /* backward: 2.5x the forward's matmul work (FlashAttention-2's count) */
    {"attention.tpk", "flash_attention_bwd", ATTN, ATTN_SMOKE, "scale=0.125", .flops = "10*B*H*S*T*D",
     .rate = RATE_FLOPS, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sdpa_bwd"},
    {"attention.tpk", "flash_attention_causal_bwd", ATTN, ATTN_SMOKE, "scale=0.125", .flops = "5*B*H*S*T*D",
     .rate = RATE_FLOPS, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sdpa_causal_bwd"},
    /* a gather reads T rows of the table, not all of it (f32) */
    {"embedding.tpk", "embedding", "V=32000,D=1024,T=4096", "V=37,D=20,T=50", .bytes = "8*T*D+4*T",
     .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "embedding", .int_max = "V"},
    {"embedding.tpk", "embedding_bwd", "V=32000,D=1024,T=4096", "V=37,D=20,T=50", .devices = ON_BOTH,
     .ref = REF_TORCH, .ref_op = "embedding_bwd", .int_max = "V"},
    /* in place: reads and writes T rows of dst, reads ids and src (f32) */
    {"embedding.tpk", "scatter_add", "V=32000,D=1024,T=4096", "V=37,D=20,T=50", .bytes = "12*T*D+4*T",
     .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "index_add", .int_max = "V"},
    {"reductions.tpk", "sum_rows", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sum_rows"},
    {"reductions.tpk", "mean_rows", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "mean_rows"},
    {"reductions.tpk", "max_rows", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "max_rows"},
    {"reductions.tpk", "sum_all", "N=16777216", "N=1000", .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "sum_all"},
    {"reductions.tpk", "max_all", "N=16777216", "N=1000", .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "max_all"},
    {"transpose.tpk", "transpose", ROWS, ROWS_SMOKE, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "transpose"},
    {"adamw.tpk", "adamw", "N=4194304", "N=1000", ADAMW_SCALARS, .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "adamw", .nonneg = "exp_avg_sq"},
    /* 3x3 convolutions of ResNet's 56x56x64 stage */
    {"conv2d.tpk", "conv2d_nhwc_same", CONV, CONV_SMOKE, .flops = "2*N*H*W*F*C*KH*KW", .rate = RATE_FLOPS,
     .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "conv2d_same"},
    {"conv2d.tpk", "conv2d_nhwc_valid", CONV, CONV_SMOKE, .flops = "2*N*(H-KH+1)*(W-KW+1)*F*C*KH*KW",
     .rate = RATE_FLOPS, .devices = ON_BOTH, .ref = REF_TORCH, .ref_op = "conv2d_valid"},
    {"topk.tpk", "topk", "M=4096,N=1024,K=8", "M=37,N=130,K=5", .devices = ON_BOTH, .ref = REF_TORCH,
     .ref_op = "topk"},
};

typedef struct Suite {
  const char *name;
  const SuiteRow *rows;
  int nrows;
} Suite;

static const Suite SUITES[] = {{"std", STD_SUITE, (int)TPK_ARRAY_LEN(STD_SUITE)}};

/* ---- Options ----------------------------------------------------------------------- */

enum { OPT_SUITE = 1, OPT_DEVICE, OPT_JSON, OPT_REPEAT, OPT_ONLY, OPT_SMOKE, OPT_LIST, OPT_KERNELS, OPT_THREADS };

static const CliOption OPTIONS[] = {
    {"suite", 0, true, OPT_SUITE},   {"device", 0, true, OPT_DEVICE}, {"json", 0, true, OPT_JSON},
    {"repeat", 0, true, OPT_REPEAT}, {"only", 0, true, OPT_ONLY},     {"smoke", 0, false, OPT_SMOKE},
    {"list", 0, false, OPT_LIST},    {"kernels", 0, true, OPT_KERNELS}, {"threads", 0, true, OPT_THREADS},
};

enum { MAX_DEVICES = 8, MAX_PARAMS = 64, MAX_SYMS = 16, MAX_SCALARS = 16, MSG_LEN = 600 };

typedef struct Options {
  const Suite *suite;
  const char *json_path, *kernels_opt;
  char *device_list;             /* a copy of --device, cut at the commas */
  const char *devices[MAX_DEVICES];
  int ndevices;
  bool on_host;                  /* "host" is among the devices */
  bool *selected;                /* per row; --only */
  int repeat;
  bool smoke, list;
} Options;

bool cli_bench_wants_suite(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return false;
    if (strcmp(argv[i], "--suite") == 0 || strncmp(argv[i], "--suite=", 8) == 0) return true;
  }
  return false;
}

static int parse_devices(Options *o, const char *cmd, const char *text) {
  free(o->device_list);
  o->device_list = strdup(text);
  if (!o->device_list) return CLI_FAIL;
  o->ndevices = 0;
  o->on_host = false;
  TpkContext *ctx = NULL;
  if (tpk_context_create(&ctx) != TPK_OK) return CLI_FAIL;
  int status = CLI_OK;
  char *save = NULL;
  for (char *d = strtok_r(o->device_list, ",", &save); d && status == CLI_OK; d = strtok_r(NULL, ",", &save)) {
    TpkDevice *dev;
    for (int i = 0; i < o->ndevices; i++)
      if (strcmp(o->devices[i], d) == 0) status = cli_usage_error(cmd, "--device: '%s' is given twice", d);
    if (status != CLI_OK) break;
    if (o->ndevices == MAX_DEVICES) status = cli_usage_error(cmd, "--device: at most %d devices", MAX_DEVICES);
    else if (tpk_device_open(ctx, d, &dev) != TPK_OK) status = cli_usage_error(cmd, "--device: %s", tpk_last_error());
    else {
      o->on_host |= strcmp(d, "host") == 0;
      o->devices[o->ndevices++] = d;
    }
  }
  tpk_context_destroy(ctx);
  if (status == CLI_OK && o->ndevices == 0) status = cli_usage_error(cmd, "--device needs at least one device");
  return status;
}

/* --only NAME,NAME: kernels of the suite, each known. */
static int parse_only(Options *o, const char *cmd, const char *text) {
  const Suite *s = o->suite;
  for (int i = 0; i < s->nrows; i++) o->selected[i] = false;
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    bool found = false;
    for (int i = 0; i < s->nrows; i++)
      if (strlen(s->rows[i].kernel) == len && strncmp(s->rows[i].kernel, p, len) == 0) found = o->selected[i] = true;
    if (!found) {
      char word[64];
      snprintf(word, sizeof word, "%.*s", (int)(len < 63 ? len : 63), p);
      const char *names[TPK_ARRAY_LEN(STD_SUITE)];
      int n = 0;
      for (int i = 0; i < s->nrows && n < (int)TPK_ARRAY_LEN(names); i++) names[n++] = s->rows[i].kernel;
      const char *guess = tpk_suggest(word, names, n);
      return cli_usage_error(cmd, "--only: the %s suite has no kernel '%s'%s%s%s (see tpk bench --suite %s --list)",
                             s->name, word, guess ? "; did you mean '" : "", guess ? guess : "", guess ? "'?" : "",
                             s->name);
    }
    if (!p[len]) return CLI_OK;
    p += len + 1;
  }
}

static int parse_options(Options *o, const CliCommand *cmd, int argc, char **argv) {
  CliArgs args;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  const char *value, *devices = "host," GOAL_SIM_DEVICE, *only = NULL, *suite = NULL;
  int id;
  o->repeat = -1;
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END) {
    switch (id) {
    case CLI_ARG_ERROR: return CLI_USAGE;
    case CLI_ARG_POSITIONAL:
      return cli_usage_error(cmd->name, "--suite runs the suite's own kernels: no FILE (got '%s'); "
                             "to bench one file: tpk bench FILE --kernel NAME --shape ...", value);
    case OPT_SUITE: suite = value; break;
    case OPT_DEVICE: devices = value; break;
    case OPT_JSON:
      if (!*value) return cli_usage_error(cmd->name, "--json expects a file name, got ''");
      o->json_path = value;
      break;
    case OPT_ONLY: only = value; break;
    case OPT_SMOKE: o->smoke = true; break;
    case OPT_LIST: o->list = true; break;
    case OPT_KERNELS: o->kernels_opt = value; break;
    case OPT_THREADS: {
      char *end;
      errno = 0;
      long v = strtol(value, &end, 10);
      if (errno || *end || end == value || v < 1 || v > 256)
        return cli_usage_error(cmd->name, "--threads expects an integer from 1 to 256, got '%s'", value);
      setenv("TPK_HOST_THREADS", value, 1);
      break;
    }
    case OPT_REPEAT: {
      char *end;
      errno = 0;
      long v = strtol(value, &end, 10);
      if (errno || *end || end == value || v < 1 || v > 10000)
        return cli_usage_error(cmd->name, "--repeat expects an integer from 1 to 10000, got '%s'", value);
      o->repeat = (int)v;
      break;
    }
    }
  }
  if (!suite) /* --suite was the value of another option */
    return cli_usage_error(cmd->name, "--suite NAME chooses the suite (suites: std)");
  for (int i = 0; i < (int)TPK_ARRAY_LEN(SUITES); i++)
    if (strcmp(SUITES[i].name, suite) == 0) o->suite = &SUITES[i];
  if (!o->suite) {
    const char *names[TPK_ARRAY_LEN(SUITES)];
    for (int i = 0; i < (int)TPK_ARRAY_LEN(SUITES); i++) names[i] = SUITES[i].name;
    const char *guess = tpk_suggest(suite, names, (int)TPK_ARRAY_LEN(SUITES));
    return cli_usage_error(cmd->name, "unknown suite '%s'%s%s%s (suites: std)", suite,
                           guess ? "; did you mean '" : "", guess ? guess : "", guess ? "'?" : "");
  }
  o->selected = malloc((size_t)o->suite->nrows * sizeof *o->selected);
  if (!o->selected) return CLI_FAIL;
  for (int i = 0; i < o->suite->nrows; i++) o->selected[i] = true;
  if (only && parse_only(o, cmd->name, only) != CLI_OK) return CLI_USAGE;
  if (o->repeat < 0) o->repeat = o->smoke ? 2 : 10;
  return parse_devices(o, cmd->name, devices);
}

/* ---- Finding the kernels and the PyTorch script ---------------------------------- */

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* `what` (a folder, or a file when want_file) in the folder of the tpk
 * binary or up to three folders above it (build/tpk and build/asan/tpk
 * both find the repository's), else in the current folder. */
static bool find_near_binary(const char *what, bool want_file, char *out, size_t n) {
  char dir[4096];
  ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (len > 0) {
    dir[len] = 0;
    for (int up = 0; up < 4; up++) {
      char *slash = strrchr(dir, '/');
      if (!slash) break;
      *slash = 0;
      if (snprintf(out, n, "%s/%s", dir, what) >= (int)n) break;
      if (want_file ? is_file(out) : is_dir(out)) return true;
    }
  }
  snprintf(out, n, "%s", what);
  return want_file ? is_file(out) : is_dir(out);
}

/* ---- Shapes, formulas and inputs -------------------------------------------------- */

/* A row's sizes and scalar values, parsed once and shared by every device. */
typedef struct RowSetup {
  const SuiteRow *row;
  const char *shape_text; /* the documented shape, or the --smoke one */
  CliBindings shape;
  TpkNamedInt syms[MAX_SYMS];
  int nsyms;
  char scalar_names[MAX_SCALARS][32];
  double scalar_values[MAX_SCALARS];
  int nscalars;
} RowSetup;

static bool sym_value(const RowSetup *s, const char *name, size_t len, double *out) {
  for (int i = 0; i < s->nsyms; i++)
    if (strlen(s->syms[i].name) == len && strncmp(s->syms[i].name, name, len) == 0) {
      *out = (double)s->syms[i].value;
      return true;
    }
  return false;
}

/* The FLOP and byte formulas: numbers, shape symbols, + - * / and parentheses,
 * by recursive descent. */
typedef struct Formula {
  const char *p;
  const RowSetup *setup;
  bool ok;
} Formula;

static double formula_sum(Formula *f);

static void formula_space(Formula *f) {
  while (*f->p == ' ') f->p++;
}

static double formula_atom(Formula *f) {
  formula_space(f);
  if (*f->p == '(') {
    f->p++;
    double v = formula_sum(f);
    formula_space(f);
    if (*f->p != ')') f->ok = false;
    else f->p++;
    return v;
  }
  if ((*f->p >= '0' && *f->p <= '9') || *f->p == '.') {
    char *end;
    double v = strtod(f->p, &end);
    f->p = end;
    return v;
  }
  const char *start = f->p;
  while ((*f->p >= 'A' && *f->p <= 'Z') || (*f->p >= 'a' && *f->p <= 'z') || *f->p == '_' ||
         (f->p > start && *f->p >= '0' && *f->p <= '9'))
    f->p++;
  double v = 0;
  if (f->p == start || !sym_value(f->setup, start, (size_t)(f->p - start), &v)) f->ok = false;
  return v;
}

static double formula_product(Formula *f) {
  double v = formula_atom(f);
  for (;;) {
    formula_space(f);
    char op = *f->p;
    if (op != '*' && op != '/') return v;
    f->p++;
    double r = formula_atom(f);
    v = op == '*' ? v * r : v / r;
  }
}

static double formula_sum(Formula *f) {
  double v = formula_product(f);
  for (;;) {
    formula_space(f);
    char op = *f->p;
    if (op != '+' && op != '-') return v;
    f->p++;
    double r = formula_product(f);
    v = op == '+' ? v + r : v - r;
  }
}

static bool formula_eval(const char *text, const RowSetup *s, double *out) {
  Formula f = {text, s, true};
  *out = formula_sum(&f);
  formula_space(&f);
  return f.ok && *f.p == 0;
}

/* Seeded inputs: floats uniform in [-1, 1) ([0, 1) for the row's nonneg
 * parameter), integers in [0, int_max). */
static void fill(void *data, TpkDType dt, int64_t n, bool nonneg, int64_t int_max, uint64_t *state) {
  size_t size = tpk_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = tpk_splitmix64(state);
    char *at = (char *)data + i * (int64_t)size;
    if (tpk_dtype_is_float(dt)) {
      double u = (double)(r >> 11) / (double)(1ull << 53);
      float f = (float)(nonneg ? u : 2 * u - 1);
      tpk_prims()->convert(TPK_PRIM_F32, (int)dt, &f, at, 1);
    } else {
      int32_t v = dt == TPK_BOOL ? (int32_t)(r & 1) : (int32_t)(r % (uint64_t)(int_max > 0 ? int_max : 8));
      tpk_prims()->convert(TPK_PRIM_I32, (int)dt, &v, at, 1);
    }
  }
}

static bool name_in_list(const char *name, const char *list) {
  if (!list) return false;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0) return true;
    p += len + (p[len] ? 1 : 0);
  }
  return false;
}

/* ---- Results ------------------------------------------------------------------------ */

typedef enum { ROW_OK, ROW_MISSING, ROW_ERROR } RowStatus;

typedef struct SimResult {
  bool ran;
  double us, roofline_fraction, peak_fraction, tflops, gbps;
  bool has_peak, memory_bound;
} SimResult;

typedef struct RowResult {
  RowStatus status;
  char message[MSG_LEN];
  double flops, bytes; /* < 0: not counted */
  bool host_ran;
  double host_ms, first_ms;
  char tier[16];
  bool ref_ran;                /* ref_ms is a measurement */
  double ref_ms;
  char ref_name[64], ref_note[MSG_LEN];
  SimResult sim[MAX_DEVICES];  /* by position in Options.devices */
} RowResult;

static void row_fail(RowResult *r, RowStatus st, const char *fmt, ...) TPK_PRINTF(3, 4);
static void row_fail(RowResult *r, RowStatus st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof r->message, fmt, ap);
  va_end(ap);
  for (char *c = r->message; *c; c++) /* one line in the table */
    if (*c == '\n') *c = ' ';
  r->status = st;
}

/* ---- OpenBLAS, opened at run time ---------------------------------------------------- */

typedef void (*SgemmFn)(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111 };

typedef struct Blas {
  void *lib;
  SgemmFn sgemm;
  char version[96]; /* "OpenBLAS 0.3.26" */
  char note[160];   /* why it is n/a */
} Blas;

static void *symbol(void *lib, const char *name) {
  return dlsym(lib, name);
}

static void blas_open(Blas *b) {
  /* Read when the library loads: the threads it starts (started ones spin
   * beside the measured thread), and kernels for this CPU, which a
   * DYNAMIC_ARCH build may not recognise (bench/openblas.h says more). */
  char threads_text[16];
  snprintf(threads_text, sizeof threads_text, "%d", suite_threads);
  setenv("OPENBLAS_NUM_THREADS", threads_text, 1);
  const char *isa = tpk_gemm_isa();
  if (!getenv("OPENBLAS_CORETYPE") && strcmp(isa, "generic") != 0)
    setenv("OPENBLAS_CORETYPE", strcmp(isa, "avx512") == 0 ? "SkylakeX" : "Haswell", 1);
  const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
  for (int i = 0; i < 2 && !b->lib; i++) b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!b->lib) {
    snprintf(b->note, sizeof b->note, "libopenblas.so.0 not found (apt-get install libopenblas0)");
    return;
  }
  void *sgemm = symbol(b->lib, "cblas_sgemm"), *threads = symbol(b->lib, "openblas_set_num_threads"),
       *now = symbol(b->lib, "openblas_get_num_threads"), *config = symbol(b->lib, "openblas_get_config");
  if (!sgemm || !threads || !now) {
    snprintf(b->note, sizeof b->note, "libopenblas.so.0 lacks cblas_sgemm or openblas_set/get_num_threads");
    return;
  }
  void (*set_threads)(int);
  int (*get_threads)(void);
  const char *(*get_config)(void) = NULL;
  memcpy(&set_threads, &threads, sizeof set_threads); /* object to function pointer, as POSIX dlsym allows */
  memcpy(&get_threads, &now, sizeof get_threads);
  if (config) memcpy(&get_config, &config, sizeof get_config);
  set_threads(suite_threads);
  if (get_threads() != suite_threads) { /* the comparison is only fair on as many threads as tpk's */
    snprintf(b->note, sizeof b->note, "OpenBLAS runs on %d threads, not %d", get_threads(), suite_threads);
    return;
  }
  memcpy(&b->sgemm, &sgemm, sizeof b->sgemm);
  /* "OpenBLAS 0.3.26 NO_AFFINITY Haswell MAX_THREADS=64": the first two
   * words, and the kernels it chose */
  const char *cfg = get_config ? get_config() : "OpenBLAS";
  size_t len = strcspn(cfg, " ");
  if (cfg[len]) len += 1 + strcspn(cfg + len + 1, " ");
  void *corename = symbol(b->lib, "openblas_get_corename");
  const char *(*get_core)(void) = NULL;
  if (corename) memcpy(&get_core, &corename, sizeof get_core);
  snprintf(b->version, sizeof b->version, "%.*s%s%s%s", (int)len, cfg, get_core ? " (" : "", get_core ? get_core() : "",
           get_core ? " kernels)" : "");
}

/* ---- PyTorch, through bench/torch_ref.py ------------------------------------------- */

typedef struct Torch {
  pid_t pid;
  FILE *to, *from;
  bool up;           /* answering requests */
  char version[64];  /* "2.13.0+cpu" */
  char note[MSG_LEN]; /* why it is n/a */
} Torch;

/* The text after "key": in one JSON line of ours, or NULL. */
static const char *json_after(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  return p;
}

/* A string field (escapes decoded; \u escapes become '?'); false when absent or null. */
static bool json_string(const char *line, const char *key, char *out, size_t n) {
  const char *p = json_after(line, key);
  if (!p || *p != '"') return false;
  size_t k = 0;
  for (p++; *p && *p != '"'; p++) {
    char c = *p;
    if (c == '\\' && p[1]) {
      c = *++p;
      if (c == 'n') c = ' ';
      else if (c == 't') c = ' ';
      else if (c == 'u') {
        for (int i = 0; i < 4 && p[1]; i++) p++;
        c = '?';
      }
    }
    if (k + 1 < n) out[k++] = c;
  }
  if (n) out[k] = 0;
  return true;
}

/* A number array field; returns how many were read. */
static int json_numbers(const char *line, const char *key, double *out, int max) {
  const char *p = json_after(line, key);
  if (!p || *p != '[') return 0;
  int n = 0;
  for (p++; *p && *p != ']' && n < max;) {
    char *end;
    double v = strtod(p, &end);
    if (end == p) break;
    out[n++] = v;
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  return n;
}

static void torch_stop(Torch *t) {
  if (t->to) fclose(t->to); /* EOF: the script's loop ends */
  if (t->from) fclose(t->from);
  if (t->pid > 0) waitpid(t->pid, NULL, 0);
  t->to = t->from = NULL;
  t->pid = 0;
  t->up = false;
}

/* Send one request line, read one answer line (heap; NULL when the child is gone). */
static char *torch_ask(Torch *t, const char *request) {
  if (!t->to || fputs(request, t->to) == EOF || fputc('\n', t->to) == EOF || fflush(t->to) != 0) return NULL;
  char *line = NULL;
  size_t cap = 0;
  if (getline(&line, &cap, t->from) < 0) {
    free(line);
    return NULL;
  }
  return line;
}

static void torch_start(Torch *t, const char *python) {
  char script[4096];
  const char *env_script = getenv("TPK_TORCH_REF");
  if (env_script && *env_script) snprintf(script, sizeof script, "%s", env_script);
  else if (!find_near_binary("bench/torch_ref.py", true, script, sizeof script)) {
    snprintf(t->note, sizeof t->note, "bench/torch_ref.py not found near the tpk binary (set $TPK_TORCH_REF)");
    return;
  }
  int in[2], out[2];
  if (pipe(in) != 0) {
    snprintf(t->note, sizeof t->note, "cannot make a pipe: %s", strerror(errno));
    return;
  }
  if (pipe(out) != 0) {
    close(in[0]), close(in[1]);
    snprintf(t->note, sizeof t->note, "cannot make a pipe: %s", strerror(errno));
    return;
  }
  /* our ends must not leak into the JIT's compiler processes */
  fcntl(in[1], F_SETFD, FD_CLOEXEC);
  fcntl(out[0], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[0]);
  posix_spawn_file_actions_addclose(&fa, out[1]);
  char *argv[] = {(char *)python, script, NULL};
  int rc = posix_spawnp(&t->pid, python, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]), close(out[0]);
    t->pid = 0;
    snprintf(t->note, sizeof t->note, "cannot run %s: %s (set $PYTHON)", python, strerror(rc));
    return;
  }
  t->to = fdopen(in[1], "w");
  t->from = fdopen(out[0], "r");
  if (!t->to || !t->from) {
    if (!t->to) close(in[1]);
    if (!t->from) close(out[0]);
    torch_stop(t);
    snprintf(t->note, sizeof t->note, "out of memory");
    return;
  }
  char request[64];
  snprintf(request, sizeof request, "{\"threads\": %d, \"ops\": []}", suite_threads);
  char *hello = torch_ask(t, request);
  if (!hello) {
    snprintf(t->note, sizeof t->note, "%s bench/torch_ref.py did not answer", python);
    torch_stop(t);
    return;
  }
  char error[360], hint[200];
  if (json_string(hello, "error", error, sizeof error)) {
    if (!json_string(hello, "hint", hint, sizeof hint)) hint[0] = 0;
    snprintf(t->note, sizeof t->note, "%s%s%s", error, hint[0] ? "; " : "", hint);
    torch_stop(t);
  } else if (!json_string(hello, "torch", t->version, sizeof t->version)) {
    snprintf(t->note, sizeof t->note, "unexpected answer from bench/torch_ref.py");
    torch_stop(t);
  } else if (!json_after(hello, "threads") || atoi(json_after(hello, "threads")) != suite_threads) {
    /* the comparison is only fair on as many threads as tpk's */
    snprintf(t->note, sizeof t->note, "bench/torch_ref.py runs PyTorch on %d threads, not %d",
             json_after(hello, "threads") ? atoi(json_after(hello, "threads")) : 0, suite_threads);
    torch_stop(t);
  } else {
    t->up = true;
  }
  free(hello);
}

/* ---- Measuring one row ------------------------------------------------------------- */

/* A kernel's arguments on one device. */
typedef struct Prepared {
  TpkBuffer *bufs[MAX_PARAMS];
  double scalars[MAX_PARAMS];
  int np;
  TpkLaunch launch;
  TpkLaunchResult ran; /* what the last launch did */
} Prepared;

static void prepared_free(Prepared *p) {
  for (int i = 0; i < p->np; i++) tpk_buffer_destroy(p->bufs[i]);
  memset(p, 0, sizeof *p);
}

/* Check the row against the kernel: every shape symbol and scalar given, no
 * name the kernel does not have (a row to fix when a kernel changes). */
static bool setup_check(const RowSetup *s, TpkKernel *k, RowResult *r) {
  if (tpk_kernel_param_count(k) > MAX_PARAMS) {
    row_fail(r, ROW_ERROR, "more than %d parameters", MAX_PARAMS);
    return false;
  }
  for (int i = 0; i < tpk_kernel_symbol_count(k); i++) {
    double v;
    const char *name = tpk_kernel_symbol_name(k, i);
    if (!sym_value(s, name, strlen(name), &v)) {
      row_fail(r, ROW_ERROR, "the row gives no size for the kernel's shape symbol %s (row: %s)", name, s->shape_text);
      return false;
    }
  }
  for (int j = 0; j < s->nsyms; j++) {
    bool known = false;
    for (int i = 0; i < tpk_kernel_symbol_count(k); i++) known |= strcmp(tpk_kernel_symbol_name(k, i), s->syms[j].name) == 0;
    if (!known) {
      row_fail(r, ROW_ERROR, "the kernel has no shape symbol %s (its symbols:%s%s...)", s->syms[j].name,
               tpk_kernel_symbol_count(k) ? " " : " none", tpk_kernel_symbol_count(k) ? tpk_kernel_symbol_name(k, 0) : "");
      return false;
    }
  }
  for (int i = 0; i < tpk_kernel_param_count(k); i++) {
    if (tpk_kernel_param_kind(k, i) != TPK_PARAM_KIND_SCALAR) continue;
    bool given = false;
    for (int j = 0; j < s->nscalars; j++) given |= strcmp(s->scalar_names[j], tpk_kernel_param_name(k, i)) == 0;
    if (!given) {
      row_fail(r, ROW_ERROR, "the row gives no value for the scalar '%s'", tpk_kernel_param_name(k, i));
      return false;
    }
  }
  for (int j = 0; j < s->nscalars; j++) {
    bool known = false;
    for (int i = 0; i < tpk_kernel_param_count(k); i++)
      known |= tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR && strcmp(tpk_kernel_param_name(k, i), s->scalar_names[j]) == 0;
    if (!known) {
      row_fail(r, ROW_ERROR, "the kernel has no scalar parameter '%s'", s->scalar_names[j]);
      return false;
    }
  }
  return true;
}

static bool prepare(TpkDevice *dev, TpkKernel *k, const RowSetup *s, Prepared *p, RowResult *r) {
  p->np = tpk_kernel_param_count(k);
  double int_max = 8;
  if (s->row->int_max) sym_value(s, s->row->int_max, strlen(s->row->int_max), &int_max);
  uint64_t seed = 1;
  for (int i = 0; i < p->np; i++) {
    const char *name = tpk_kernel_param_name(k, i);
    TpkParamKind kind = tpk_kernel_param_kind(k, i);
    TpkDType dt = tpk_kernel_param_dtype(k, i);
    if (kind == TPK_PARAM_KIND_SCALAR) {
      for (int j = 0; j < s->nscalars; j++)
        if (strcmp(s->scalar_names[j], name) == 0) p->scalars[i] = s->scalar_values[j];
      continue;
    }
    int64_t shape[TPK_MAX_DIMS];
    if (tpk_kernel_param_shape(k, i, s->syms, s->nsyms, shape) != TPK_OK ||
        tpk_buffer_create(dev, dt, tpk_kernel_param_rank(k, i), shape, &p->bufs[i]) != TPK_OK) {
      row_fail(r, ROW_ERROR, "%s: %s", name, tpk_last_error());
      return false;
    }
    if (kind == TPK_PARAM_KIND_OUTPUT) continue;
    size_t bytes = tpk_buffer_bytes(p->bufs[i]);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) {
      row_fail(r, ROW_ERROR, "out of memory for '%s'", name);
      return false;
    }
    fill(data, dt, (int64_t)(bytes / tpk_dtype_size(dt)), name_in_list(name, s->row->nonneg), (int64_t)int_max, &seed);
    TpkStatus st = tpk_buffer_write(p->bufs[i], data, bytes);
    free(data);
    if (st != TPK_OK) {
      row_fail(r, ROW_ERROR, "%s: %s", name, tpk_last_error());
      return false;
    }
  }
  p->launch = (TpkLaunch){.args = p->bufs, .scalars = p->scalars, .syms = s->syms, .nsyms = s->nsyms, .result = &p->ran};
  return true;
}

static bool launch(TpkKernel *k, const Prepared *p, RowResult *r) {
  if (tpk_kernel_launch(k, &p->launch) == TPK_OK) return true;
  row_fail(r, ROW_ERROR, "launch failed: %s", tpk_last_error());
  return false;
}

/* The reference of one row, ready to be called in blocks. */
typedef struct Reference {
  RefKind kind;
  /* sgemm: the kernel's own operands, a separate result */
  SgemmFn sgemm;
  const float *a, *b;
  float *c;
  int m, n, k;
  char request[1024]; /* torch */
} Reference;

static void reference_setup(Reference *ref, const RowSetup *s, TpkKernel *k, const Prepared *p, const Blas *blas,
                            const Torch *torch, TpkDType first_float, RowResult *r) {
  const SuiteRow *row = s->row;
  ref->kind = REF_NONE;
  if (row->ref == REF_SGEMM) {
    snprintf(r->ref_name, sizeof r->ref_name, "OpenBLAS sgemm");
    if (!blas->sgemm) {
      snprintf(r->ref_note, sizeof r->ref_note, "%s", blas->note);
      return;
    }
    int in[2], nin = 0;
    for (int i = 0; i < p->np && nin < 2; i++)
      if (tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_INPUT) in[nin++] = i;
    double m = 0, n = 0, kk = 0;
    if (nin < 2 || tpk_kernel_param_dtype(k, in[0]) != TPK_F32 || tpk_kernel_param_dtype(k, in[1]) != TPK_F32 ||
        !sym_value(s, "M", 1, &m) || !sym_value(s, "N", 1, &n) || !sym_value(s, "K", 1, &kk)) {
      snprintf(r->ref_note, sizeof r->ref_note, "sgemm needs f32 operands a[M,K], b[K,N]");
      return;
    }
    ref->c = malloc((size_t)(m * n) * sizeof *ref->c);
    if (!ref->c) {
      snprintf(r->ref_note, sizeof r->ref_note, "out of memory");
      return;
    }
    ref->a = tpk_buffer_data(p->bufs[in[0]]);
    ref->b = tpk_buffer_data(p->bufs[in[1]]);
    ref->m = (int)m, ref->n = (int)n, ref->k = (int)kk;
    ref->sgemm = blas->sgemm;
    ref->kind = REF_SGEMM;
  } else if (row->ref == REF_TORCH) {
    snprintf(r->ref_name, sizeof r->ref_name, "torch %s", row->ref_op);
    if (!torch->up) {
      snprintf(r->ref_note, sizeof r->ref_note, "PyTorch n/a");
      return;
    }
    char *q = ref->request;
    size_t left = sizeof ref->request;
    int w = snprintf(q, left, "{\"threads\": %d, \"ops\": [{\"op\": \"%s\", \"dtype\": \"%s\", \"int_max\": %s%s%s, \"sym\": {",
                     suite_threads, row->ref_op, tpk_dtype_name(first_float), row->int_max ? "\"" : "",
                     row->int_max ? row->int_max : "null", row->int_max ? "\"" : "");
    for (int i = 0; i < s->nsyms && w < (int)left; i++)
      w += snprintf(q + w, left - (size_t)w, "%s\"%s\": %lld", i ? ", " : "", s->syms[i].name, (long long)s->syms[i].value);
    if (w < (int)left) w += snprintf(q + w, left - (size_t)w, "}, \"scalars\": {");
    for (int i = 0; i < s->nscalars && w < (int)left; i++)
      w += snprintf(q + w, left - (size_t)w, "%s\"%s\": %.17g", i ? ", " : "", s->scalar_names[i], s->scalar_values[i]);
    if (w < (int)left) w += snprintf(q + w, left - (size_t)w, "}, \"repeat\": ");
    if (w >= (int)left - 16) {
      snprintf(r->ref_note, sizeof r->ref_note, "request too long");
      return;
    }
    ref->kind = REF_TORCH;
  }
}

/* One block of the reference: an untimed call (the other side just ran and
 * took the caches), then `count` timed ones appended to times[*n] (ms).
 * False (with ref_note set) when it cannot. */
static bool reference_block(Reference *ref, Torch *torch, int count, double *times, int *n, RowResult *r) {
  if (ref->kind == REF_SGEMM) {
    for (int i = -1; i < count; i++) {
      double t = tpk_now_seconds();
      ref->sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, ref->m, ref->n, ref->k, 1.0f, ref->a, ref->k, ref->b,
                  ref->n, 0.0f, ref->c, ref->n);
      if (i >= 0) times[(*n)++] = (tpk_now_seconds() - t) * 1e3;
    }
    return true;
  }
  if (ref->kind != REF_TORCH) return false;
  char request[1100];
  snprintf(request, sizeof request, "%s%d, \"warmup\": 1}]}", ref->request, count);
  char *answer = torch_ask(torch, request);
  if (!answer) {
    snprintf(r->ref_note, sizeof r->ref_note, "bench/torch_ref.py stopped answering");
    snprintf(torch->note, sizeof torch->note, "bench/torch_ref.py stopped answering");
    torch_stop(torch);
    return false;
  }
  char name[64];
  if (json_string(answer, "name", name, sizeof name)) snprintf(r->ref_name, sizeof r->ref_name, "%s", name);
  char error[MSG_LEN];
  bool ok = !json_string(answer, "error", error, sizeof error);
  if (ok) {
    int got = json_numbers(answer, "times_ms", times + *n, count);
    *n += got;
    ok = got == count;
    if (!ok) snprintf(r->ref_note, sizeof r->ref_note, "bad answer from bench/torch_ref.py");
  } else {
    snprintf(r->ref_note, sizeof r->ref_note, "%s", error);
  }
  free(answer);
  return ok;
}

/* The host: first call, warm-up, the optimized tier, then `repeat` timed
 * calls in blocks alternating with the reference's. */
static void measure_host(TpkContext *ctx, TpkKernel *k, const RowSetup *s, const Options *o, const Blas *blas,
                         Torch *torch, RowResult *r) {
  TpkDevice *dev;
  Prepared p = {0};
  Reference ref = {0};
  double *host_times = malloc((size_t)o->repeat * sizeof *host_times);
  double *ref_times = malloc((size_t)o->repeat * sizeof *ref_times);
  if (!host_times || !ref_times) {
    row_fail(r, ROW_ERROR, "out of memory");
    goto done;
  }
  if (tpk_device_open(ctx, "host", &dev) != TPK_OK || !prepare(dev, k, s, &p, r)) goto done;
  double t0 = tpk_now_seconds();
  if (!launch(k, &p, r)) goto done;
  r->first_ms = (tpk_now_seconds() - t0) * 1e3;
  /* past the promotion threshold (TPK_JIT_HOT_CALLS, 3), then the
   * optimized build, then one call that runs it */
  for (int i = 0; i < 3; i++)
    if (!launch(k, &p, r)) goto done;
  tpk_context_wait_compiles(ctx);
  if (!launch(k, &p, r)) goto done;
  snprintf(r->tier, sizeof r->tier, "%s", p.ran.tier);

  TpkDType first_float = TPK_F32; /* the dtype PyTorch's inputs get */
  for (int i = 0; i < tpk_kernel_param_count(k); i++)
    if (tpk_kernel_param_kind(k, i) != TPK_PARAM_KIND_SCALAR && tpk_dtype_is_float(tpk_kernel_param_dtype(k, i))) {
      first_float = tpk_kernel_param_dtype(k, i);
      break;
    }
  reference_setup(&ref, s, k, &p, blas, torch, first_float, r);
  bool ref_ok = ref.kind != REF_NONE;
  int nhost = 0, nref = 0;
  /* Up to 5 blocks each; every block starts with an untimed call, on both
   * sides alike, since the other side just had the caches. */
  int rounds = o->repeat < 5 ? o->repeat : 5;
  for (int round = 0; round < rounds; round++) {
    int count = o->repeat / rounds + (round < o->repeat % rounds);
    for (int i = -1; i < count; i++) {
      double t = tpk_now_seconds();
      if (!launch(k, &p, r)) goto done;
      if (i >= 0) host_times[nhost++] = (tpk_now_seconds() - t) * 1e3;
    }
    if (ref_ok) ref_ok = reference_block(&ref, torch, count, ref_times, &nref, r);
  }
  r->host_ms = tpk_median(host_times, nhost);
  r->host_ran = true;
  if (ref_ok && nref > 0) {
    r->ref_ms = tpk_median(ref_times, nref);
    r->ref_ran = true;
  }
done:
  free(ref.c);
  free(host_times);
  free(ref_times);
  prepared_free(&p);
}

static void measure_sim(TpkContext *ctx, TpkKernel *k, const RowSetup *s, const char *device, SimResult *out,
                        RowResult *r) {
  TpkDevice *dev;
  Prepared p = {0};
  if (tpk_device_open(ctx, device, &dev) != TPK_OK) {
    row_fail(r, ROW_ERROR, "%s", tpk_last_error());
    return;
  }
  if (prepare(dev, k, s, &p, r) && launch(k, &p, r)) {
    const TpkSimStats st = p.ran.sim;
    if (!p.ran.simulated) {
      row_fail(r, ROW_ERROR, "%s: no simulator statistics", device);
    } else if (st.seconds > 0) {
      out->ran = true;
      out->us = st.seconds * 1e6;
      out->roofline_fraction = st.roofline_seconds / st.seconds;
      out->has_peak = st.matmul_flops > 0 && st.peak_flops > 0;
      out->peak_fraction = out->has_peak ? st.matmul_flops / st.seconds / st.peak_flops : 0;
      out->tflops = (st.matmul_flops ? st.matmul_flops : st.flops) / st.seconds / 1e12;
      out->gbps = st.hbm_bytes / st.seconds / 1e9;
      out->memory_bound = st.memory_bound;
    }
  }
  prepared_free(&p);
}

static bool setup_parse(RowSetup *s, const SuiteRow *row, bool smoke, RowResult *r) {
  const char *shape = s->shape_text = smoke ? row->smoke : row->shape;
  if (!cli_bindings_parse(&s->shape, "shape", shape) || s->shape.count > MAX_SYMS) {
    row_fail(r, ROW_ERROR, "bad shape in the suite's table: '%s'", shape);
    return false;
  }
  for (int i = 0; i < s->shape.count; i++) s->syms[i] = (TpkNamedInt){s->shape.items[i].name, s->shape.items[i].value};
  s->nsyms = s->shape.count;
  for (const char *p = row->scalars; p && *p;) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    char *end;
    if (!eq || s->nscalars == MAX_SCALARS || (size_t)(eq - p) >= sizeof s->scalar_names[0]) {
      row_fail(r, ROW_ERROR, "bad scalars in the suite's table: '%s'", row->scalars);
      return false;
    }
    snprintf(s->scalar_names[s->nscalars], sizeof s->scalar_names[0], "%.*s", (int)(eq - p), p);
    s->scalar_values[s->nscalars++] = strtod(eq + 1, &end);
    if (end != p + len) {
      row_fail(r, ROW_ERROR, "bad scalars in the suite's table: '%s'", row->scalars);
      return false;
    }
    p += len + (p[len] ? 1 : 0);
  }
  return true;
}

static void run_row(const SuiteRow *row, const Options *o, const char *kernels_dir, const Blas *blas, Torch *torch,
                    RowResult *r) {
  RowSetup s = {.row = row};
  TpkContext *ctx = NULL;
  TpkProgram *prog = NULL;
  TpkKernel *k = NULL;
  char path[4096];
  r->flops = r->bytes = -1;
  if (!setup_parse(&s, row, o->smoke, r)) goto done;
  const char *builtin = NULL; /* "": the standard library built into tpk */
  if (!*kernels_dir) {
    snprintf(path, sizeof path, "std:%s", row->file);
    if (!(builtin = tpk_std_source(row->file))) {
      row_fail(r, ROW_MISSING, "%s is not in the standard library", row->file);
      goto done;
    }
  } else if (snprintf(path, sizeof path, "%s/%s", kernels_dir, row->file) >= (int)sizeof path || !is_file(path)) {
    row_fail(r, ROW_MISSING, "%s not found", path);
    goto done;
  }
  if (tpk_context_create(&ctx) != TPK_OK ||
      (builtin ? tpk_program_load_source(ctx, path, builtin, strlen(builtin), &prog)
               : tpk_program_load_file(ctx, path, &prog)) != TPK_OK) {
    const char *msg = tpk_last_error(); /* diagnostics: the first line, then where to see them all */
    int len = (int)strcspn(msg, "\n");
    if (msg[len] && msg[len + 1]) row_fail(r, ROW_ERROR, "%.*s (all of it: tpk check %s)", len, msg, path);
    else row_fail(r, ROW_ERROR, "%s", msg);
    goto done;
  }
  if (tpk_program_kernel(prog, row->kernel, &k) != TPK_OK) {
    char names[300] = "";
    int w = 0;
    for (int i = 0; i < tpk_program_kernel_count(prog) && w < (int)sizeof names; i++)
      w += snprintf(names + w, sizeof names - (size_t)w, "%s%s", i ? ", " : "", tpk_program_kernel_name(prog, i));
    row_fail(r, ROW_MISSING, "%s has no kernel '%s' (it defines: %s)", row->file, row->kernel, names);
    goto done;
  }
  if (!setup_check(&s, k, r)) goto done;
  if (row->flops && !formula_eval(row->flops, &s, &r->flops)) {
    row_fail(r, ROW_ERROR, "bad FLOP formula in the suite's table: '%s'", row->flops);
    goto done;
  }
  if (row->bytes) {
    if (!formula_eval(row->bytes, &s, &r->bytes)) {
      row_fail(r, ROW_ERROR, "bad byte formula in the suite's table: '%s'", row->bytes);
      goto done;
    }
  } else {
    r->bytes = 0;
    for (int i = 0; i < tpk_kernel_param_count(k); i++) {
      TpkParamKind kind = tpk_kernel_param_kind(k, i);
      if (kind == TPK_PARAM_KIND_SCALAR) continue;
      int64_t shape[TPK_MAX_DIMS];
      if (tpk_kernel_param_shape(k, i, s.syms, s.nsyms, shape) != TPK_OK) continue;
      double n = (double)tpk_dtype_size(tpk_kernel_param_dtype(k, i));
      for (int d = 0; d < tpk_kernel_param_rank(k, i); d++) n *= (double)shape[d];
      r->bytes += kind == TPK_PARAM_KIND_INOUT ? 2 * n : n;
    }
  }
  if (o->on_host && (row->devices & ON_HOST)) {
    measure_host(ctx, k, &s, o, blas, torch, r);
    if (r->status != ROW_OK) goto done;
  }
  if (row->devices & ON_SIM)
    for (int d = 0; d < o->ndevices && r->status == ROW_OK; d++)
      if (strncmp(o->devices[d], "sim:", 4) == 0) measure_sim(ctx, k, &s, o->devices[d], &r->sim[d], r);
done:
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  cli_bindings_free(&s.shape);
}

/* ---- The table --------------------------------------------------------------------- */

static const char *row_shape(const SuiteRow *row, const Options *o) {
  return o->smoke ? row->smoke : row->shape;
}

static double row_rate(const SuiteRow *row, const RowResult *r, const char **unit) {
  bool flops = row->rate == RATE_FLOPS && (r->flops >= 0 || r->status != ROW_OK);
  *unit = flops ? "GFLOP/s" : "GB/s";
  double work = flops ? r->flops : r->bytes;
  return work >= 0 && r->host_ms > 0 ? work / (r->host_ms * 1e-3) / 1e9 : -1;
}

/* Padding that counts the two bytes of "µ" as one column. */
static void print_header(const Options *o) {
  printf("%-26s %-34s %9s %14s  %-20s %9s %7s", "kernel", "shape", "host ms", "host rate", "reference", "ref ms",
         "ratio");
  for (int d = 0; d < o->ndevices; d++)
    if (strncmp(o->devices[d], "sim:", 4) == 0) {
      char col[40];
      snprintf(col, sizeof col, "%s µs", o->devices[d] + 4);
      printf(" %11s %8s %6s", col, "roofline", "peak");
    }
  printf("\n");
}

static void print_row(const SuiteRow *row, const RowResult *r, const Options *o) {
  printf("%-26s %-34s ", row->kernel, row_shape(row, o));
  if (r->status == ROW_MISSING || r->status == ROW_ERROR) {
    printf("%s: %s\n", r->status == ROW_MISSING ? "missing" : "error", r->message);
    return;
  }
  char host[32] = "-", rate[32] = "-", ref_ms[32] = "-", ratio[32] = "-";
  if (r->host_ran) {
    const char *unit;
    double v = row_rate(row, r, &unit);
    snprintf(host, sizeof host, "%.3f", r->host_ms);
    if (v >= 0) snprintf(rate, sizeof rate, "%.*f %s", v < 10 ? 2 : 1, v, unit);
    if (r->ref_ran) {
      snprintf(ref_ms, sizeof ref_ms, "%.3f", r->ref_ms);
      snprintf(ratio, sizeof ratio, "%.2fx", r->ref_ms / r->host_ms);
    } else if (r->ref_name[0]) {
      snprintf(ref_ms, sizeof ref_ms, "n/a");
    }
  }
  printf("%9s %14s  %-20.20s %9s %7s", host, rate, r->host_ran ? r->ref_name : "-", ref_ms, ratio);
  for (int d = 0; d < o->ndevices; d++) {
    if (strncmp(o->devices[d], "sim:", 4) != 0) continue;
    const SimResult *sr = &r->sim[d];
    if (!sr->ran) {
      printf(" %10s %8s %6s", "-", "-", "-");
      continue;
    }
    char peak[16] = "-";
    if (sr->has_peak) snprintf(peak, sizeof peak, "%.0f%%", 100 * sr->peak_fraction);
    printf(" %10.1f %7.0f%% %6s", sr->us, 100 * sr->roofline_fraction, peak);
  }
  printf("\n");
  if (r->host_ran && r->ref_name[0] && !r->ref_ran && r->ref_note[0] && strcmp(r->ref_note, "PyTorch n/a") != 0)
    printf("%-26s   reference n/a: %s\n", "", r->ref_note);
}

/* ---- Goals ------------------------------------------------------------------------- */

typedef struct GoalResult {
  const SuiteRow *row;
  const char *device; /* where it is judged: "host" or GOAL_SIM_DEVICE */
  char target[80];    /* ">= 0.80x OpenBLAS sgemm (1 thread)" */
  char text[200];     /* kernel, shape, device and target */
  double value; /* the ratio or the fraction of peak */
  int met;      /* 1 met, 0 missed, -1 not measured (why in note) */
  char note[MSG_LEN + 32];
} GoalResult;

static void judge_goal(const SuiteRow *row, const RowResult *r, const Options *o, GoalResult *g) {
  g->met = -1;
  g->value = 0;
  g->note[0] = 0;
  const char *device = row->goal == GOAL_HOST_RATIO ? "host" : GOAL_SIM_DEVICE;
  g->row = row;
  g->device = device;
  char target[sizeof g->target];
  if (row->goal == GOAL_HOST_RATIO)
    snprintf(target, sizeof target, ">= %.2fx %s (%d thread%s)", row->goal_at,
             row->ref == REF_SGEMM ? "OpenBLAS sgemm" : "PyTorch CPU eager", suite_threads,
             suite_threads == 1 ? "" : "s");
  else
    snprintf(target, sizeof target, ">= %.0f%% of peak", 100 * row->goal_at);
  memcpy(g->target, target, sizeof target);
  snprintf(g->text, sizeof g->text, "%s %s on %s%s %s", row->kernel, row->shape,
           row->goal == GOAL_HOST_RATIO ? "the " : "", device, target);
  int sim_at = -1;
  for (int d = 0; d < o->ndevices; d++)
    if (strcmp(o->devices[d], GOAL_SIM_DEVICE) == 0) sim_at = d;
  if (o->smoke) snprintf(g->note, sizeof g->note, "not judged at --smoke sizes");
  else if (r->status == ROW_MISSING) snprintf(g->note, sizeof g->note, "the kernel is missing");
  else if (r->status == ROW_ERROR) snprintf(g->note, sizeof g->note, "the row failed");
  else if (row->goal == GOAL_HOST_RATIO && !r->host_ran) snprintf(g->note, sizeof g->note, "host not in --device");
  else if (row->goal == GOAL_HOST_RATIO && !r->ref_ran) snprintf(g->note, sizeof g->note, "no reference: %s", r->ref_note);
  else if (row->goal == GOAL_SIM_PEAK && (sim_at < 0 || !r->sim[sim_at].ran))
    snprintf(g->note, sizeof g->note, "%s not in --device", GOAL_SIM_DEVICE);
  else if (row->goal == GOAL_HOST_RATIO) {
    g->value = r->ref_ms / r->host_ms;
    g->met = g->value >= row->goal_at;
  } else {
    g->value = r->sim[sim_at].peak_fraction;
    g->met = g->value >= row->goal_at;
  }
}

/* ---- JSON --------------------------------------------------------------------------- */

/* A JSON string (tpk_str_put_json), or null. */
static void json_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  TpkStr t = {0};
  tpk_str_put_json(&t, s);
  fputs(t.data ? t.data : "\"\"", f);
  tpk_str_free(&t);
}

static void json_num(FILE *f, double v, bool present) {
  if (present && isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

/* Everything --json FILE writes. */
typedef struct JsonReport {
  const Options *o;
  const char *kernels_dir;
  const Blas *blas;
  const Torch *torch;
  const RowResult *results;
  const GoalResult *goals;
  int ngoals;
  const int *counts;
} JsonReport;

static TpkStatus json_fill(FILE *f, void *arg, TpkError *err) {
  (void)err;
  const JsonReport *rep = arg;
  const Options *o = rep->o;
  const char *kernels_dir = rep->kernels_dir;
  const Blas *blas = rep->blas;
  const Torch *torch = rep->torch;
  const RowResult *results = rep->results;
  const GoalResult *goals = rep->goals;
  int ngoals = rep->ngoals;
  const int *counts = rep->counts;
  const Suite *suite = o->suite;
  fprintf(f, "{\n  \"suite\": ");
  json_str(f, suite->name);
  fprintf(f, ",\n  \"smoke\": %s,\n  \"kernels_dir\": ", o->smoke ? "true" : "false");
  json_str(f, kernels_dir);
  fprintf(f, ",\n  \"threads\": %d,\n  \"repeat\": %d,\n  \"devices\": [", suite_threads, o->repeat);
  for (int d = 0; d < o->ndevices; d++) {
    fputs(d ? ", " : "", f);
    json_str(f, o->devices[d]);
  }
  fprintf(f, "],\n  \"references\": {\"openblas\": ");
  json_str(f, blas->sgemm ? blas->version : NULL);
  fprintf(f, ", \"openblas_note\": ");
  json_str(f, blas->sgemm ? NULL : blas->note);
  fprintf(f, ", \"torch\": ");
  json_str(f, torch->version[0] ? torch->version : NULL);
  fprintf(f, ", \"torch_note\": ");
  json_str(f, torch->version[0] ? NULL : torch->note);
  fprintf(f, "},\n  \"rows\": [");
  bool first = true;
  for (int i = 0; i < suite->nrows; i++) {
    if (!o->selected[i]) continue;
    const SuiteRow *row = &suite->rows[i];
    const RowResult *r = &results[i];
    static const char *STATUS[] = {"ok", "missing", "error"};
    fprintf(f, "%s\n    {\"kernel\": ", first ? "" : ",");
    first = false;
    json_str(f, row->kernel);
    fprintf(f, ", \"file\": ");
    json_str(f, row->file);
    fprintf(f, ", \"shape\": ");
    json_str(f, row_shape(row, o));
    fprintf(f, ", \"sizes\": {");
    CliBindings sizes = {0};
    if (cli_bindings_parse(&sizes, "shape", row_shape(row, o)))
      for (int j = 0; j < sizes.count; j++) fprintf(f, "%s\"%s\": %lld", j ? ", " : "", sizes.items[j].name, (long long)sizes.items[j].value);
    cli_bindings_free(&sizes);
    fprintf(f, "}");
    fprintf(f, ", \"status\": \"%s\", \"message\": ", STATUS[r->status]);
    json_str(f, r->status == ROW_OK ? NULL : r->message);
    const char *unit;
    double rate = row_rate(row, r, &unit);
    fprintf(f, ",\n     \"flops\": ");
    json_num(f, r->flops, r->flops >= 0);
    fprintf(f, ", \"bytes\": ");
    json_num(f, r->bytes, r->bytes >= 0);
    fprintf(f, ", \"rate_unit\": \"%s\",\n     \"host\": ", unit);
    if (r->host_ran) {
      fprintf(f, "{\"ms\": ");
      json_num(f, r->host_ms, true);
      fprintf(f, ", \"first_ms\": ");
      json_num(f, r->first_ms, true);
      fprintf(f, ", \"rate\": ");
      json_num(f, rate, rate >= 0);
      fprintf(f, ", \"tier\": ");
      json_str(f, r->tier);
      fprintf(f, "}");
    } else {
      fprintf(f, "null");
    }
    fprintf(f, ",\n     \"reference\": ");
    if (r->host_ran && r->ref_name[0]) {
      fprintf(f, "{\"name\": ");
      json_str(f, r->ref_name);
      fprintf(f, ", \"op\": ");
      json_str(f, row->ref == REF_TORCH ? row->ref_op : "sgemm");
      fprintf(f, ", \"ms\": ");
      json_num(f, r->ref_ms, r->ref_ran);
      fprintf(f, ", \"ratio\": ");
      json_num(f, r->ref_ms / r->host_ms, r->ref_ran);
      fprintf(f, ", \"note\": ");
      json_str(f, r->ref_ran ? NULL : r->ref_note);
      fprintf(f, "}");
    } else {
      fprintf(f, "null");
    }
    fprintf(f, ",\n     \"sim\": [");
    bool first_sim = true;
    for (int d = 0; d < o->ndevices; d++) {
      const SimResult *sr = &r->sim[d];
      if (!sr->ran) continue;
      fprintf(f, "%s{\"device\": ", first_sim ? "" : ", ");
      first_sim = false;
      json_str(f, o->devices[d]);
      fprintf(f, ", \"us\": ");
      json_num(f, sr->us, true);
      fprintf(f, ", \"roofline_fraction\": ");
      json_num(f, sr->roofline_fraction, true);
      fprintf(f, ", \"peak_fraction\": ");
      json_num(f, sr->peak_fraction, sr->has_peak);
      fprintf(f, ", \"tflops\": ");
      json_num(f, sr->tflops, true);
      fprintf(f, ", \"gbps\": ");
      json_num(f, sr->gbps, true);
      fprintf(f, ", \"bound\": \"%s\"}", sr->memory_bound ? "memory" : "compute");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n  ],\n  \"goals\": [");
  for (int i = 0; i < ngoals; i++) {
    fprintf(f, "%s\n    {\"goal\": ", i ? "," : "");
    json_str(f, goals[i].text);
    fprintf(f, ", \"kernel\": ");
    json_str(f, goals[i].row->kernel);
    fprintf(f, ", \"device\": ");
    json_str(f, goals[i].device);
    fprintf(f, ", \"kind\": \"%s\", \"threshold\": %g, \"target\": ",
            goals[i].row->goal == GOAL_HOST_RATIO ? "ratio" : "peak_fraction", goals[i].row->goal_at);
    json_str(f, goals[i].target);
    fprintf(f, ", \"value\": ");
    json_num(f, goals[i].value, goals[i].met >= 0);
    fprintf(f, ", \"met\": %s, \"note\": ", goals[i].met < 0 ? "null" : goals[i].met ? "true" : "false");
    json_str(f, goals[i].note[0] ? goals[i].note : NULL);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ],\n  \"summary\": {\"rows\": %d, \"ok\": %d, \"missing\": %d, \"errors\": %d, \"goals\": %d, "
             "\"goals_met\": %d}\n}\n",
          counts[0], counts[1], counts[2], counts[3], ngoals, counts[4]);
  return TPK_OK; /* write errors: tpk_file_write sees them on f */
}

/* ---- The command --------------------------------------------------------------------- */

static void list_rows(const Options *o, const char *kernels_dir) {
  const Suite *s = o->suite;
  printf("%-26s %-18s %-34s %-8s %-24s %-18s %s\n", "kernel", "file", "shape", "devices", "reference", "goal",
         "scalars");
  for (int i = 0; i < s->nrows; i++) {
    if (!o->selected[i]) continue;
    const SuiteRow *row = &s->rows[i];
    char path[4096], ref[64], goal[64] = "-";
    bool present = !*kernels_dir ? tpk_std_source(row->file) != NULL
                                 : snprintf(path, sizeof path, "%s/%s", kernels_dir, row->file) < (int)sizeof path && is_file(path);
    snprintf(ref, sizeof ref, "%s%s", row->ref == REF_SGEMM ? "OpenBLAS sgemm" : row->ref == REF_TORCH ? "torch " : "-",
             row->ref == REF_TORCH ? row->ref_op : "");
    if (row->goal == GOAL_HOST_RATIO) snprintf(goal, sizeof goal, ">= %.2fx", row->goal_at);
    if (row->goal == GOAL_SIM_PEAK) snprintf(goal, sizeof goal, ">= %.0f%% of peak", 100 * row->goal_at);
    printf("%-26s %-18s %-34s %-8s %-24s %-18s %s%s\n", row->kernel, row->file, row_shape(row, o),
           row->devices == ON_BOTH ? "host,sim" : row->devices == ON_HOST ? "host" : "sim", ref, goal,
           row->scalars ? row->scalars : "-", present ? "" : "  (file missing)");
  }
}

int cli_bench_suite(const CliCommand *cmd, int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  Options o = {0};
  Blas blas = {0};
  Torch torch = {0};
  RowResult *results = NULL;
  GoalResult goals[16];
  int status = parse_options(&o, cmd, argc, argv);
  if (status != CLI_OK) goto done;
  suite_threads = tpk_host_threads();

  char kernels_dir[4096];
  const char *from;
  const char *env = getenv("TPK_KERNELS_DIR");
  if (o.kernels_opt) {
    snprintf(kernels_dir, sizeof kernels_dir, "%s", o.kernels_opt);
    from = "--kernels";
  } else if (env && *env) {
    snprintf(kernels_dir, sizeof kernels_dir, "%s", env);
    from = "$TPK_KERNELS_DIR";
  } else {
    kernels_dir[0] = 0;
    from = "the standard library built into tpk";
  }
  if (o.list) {
    printf("the %s suite; kernels from %s%s%s%s\n", o.suite->name, kernels_dir, *kernels_dir ? " (" : "", from,
           *kernels_dir ? ")" : "");
    list_rows(&o, kernels_dir);
    goto done;
  }

  const Suite *suite = o.suite;
  bool need_blas = false, need_torch = false;
  int nselected = 0;
  for (int i = 0; i < suite->nrows; i++) {
    if (!o.selected[i]) continue;
    nselected++;
    need_blas |= o.on_host && suite->rows[i].ref == REF_SGEMM && (suite->rows[i].devices & ON_HOST);
    need_torch |= o.on_host && suite->rows[i].ref == REF_TORCH && (suite->rows[i].devices & ON_HOST);
  }
  if (need_blas) blas_open(&blas);
  if (need_torch) {
    const char *python = getenv("PYTHON");
    torch_start(&torch, python && *python ? python : "python3");
  }
  printf("tpk bench --suite %s%s: %d kernel%s from %s%s%s%s on", suite->name, o.smoke ? " --smoke" : "", nselected,
         nselected == 1 ? "" : "s", kernels_dir, *kernels_dir ? " (" : "", from, *kernels_dir ? ")" : "");
  for (int d = 0; d < o.ndevices; d++) printf("%s%s", d ? ", " : " ", o.devices[d]);
  printf("\n");
  if (o.on_host) {
    printf("host: %d thread%s; references on %d thread%s:", suite_threads, suite_threads == 1 ? "" : "s",
           suite_threads, suite_threads == 1 ? "" : "s");
    if (need_blas) printf(" %s%s%s;", blas.sgemm ? blas.version : "OpenBLAS n/a (", blas.sgemm ? "" : blas.note,
                          blas.sgemm ? "" : ")");
    if (need_torch) {
      if (torch.up) printf(" PyTorch %s CPU eager", torch.version);
      else printf(" PyTorch n/a (%s)", torch.note);
    }
    printf("\nhost ms: median of %d calls after warm-up, interleaved with the reference's; "
           "ratio = reference time / tpk time (> 1: tpk is faster)\n", o.repeat);
  }
  printf("\n");
  print_header(&o);

  results = calloc((size_t)suite->nrows, sizeof *results);
  if (!results) {
    status = CLI_FAIL;
    goto done;
  }
  int counts[5] = {0}; /* rows, ok, missing, errors, goals met */
  for (int i = 0; i < suite->nrows; i++) {
    if (!o.selected[i]) continue;
    run_row(&suite->rows[i], &o, kernels_dir, &blas, &torch, &results[i]);
    print_row(&suite->rows[i], &results[i], &o);
    counts[0]++;
    counts[results[i].status == ROW_OK ? 1 : results[i].status == ROW_MISSING ? 2 : 3]++;
  }
  int ngoals = 0;
  for (int i = 0; i < suite->nrows && ngoals < (int)TPK_ARRAY_LEN(goals); i++)
    if (o.selected[i] && suite->rows[i].goal != GOAL_NONE) judge_goal(&suite->rows[i], &results[i], &o, &goals[ngoals++]);
  if (ngoals) printf("\ngoals:\n");
  for (int i = 0; i < ngoals; i++) {
    const GoalResult *g = &goals[i];
    counts[4] += g->met == 1;
    bool pct = g->row->goal == GOAL_SIM_PEAK;
    if (g->met < 0) printf("  n/a   %s: %s\n", g->text, g->note);
    else if (pct) printf("  %s  %s: %.1f%%\n", g->met ? "PASS" : "FAIL", g->text, 100 * g->value);
    else printf("  %s  %s: %.2fx\n", g->met ? "PASS" : "FAIL", g->text, g->value);
  }
  printf("\n%d row%s: %d measured, %d missing, %d failed", counts[0], counts[0] == 1 ? "" : "s", counts[1], counts[2],
         counts[3]);
  if (ngoals) printf("; %d of %d goals met", counts[4], ngoals);
  printf("\n");
  if (need_torch && !torch.up && torch.note[0]) printf("PyTorch reference n/a: %s\n", torch.note);
  status = counts[2] || counts[3] ? CLI_FAIL : CLI_OK;
  if (o.json_path) {
    JsonReport report = {&o, kernels_dir, &blas, &torch, results, goals, ngoals, counts};
    TpkError err = {0};
    if (tpk_file_write(o.json_path, 0666, json_fill, &report, &err) != TPK_OK) {
      fprintf(stderr, "tpk: %s\n", err.message);
      status = CLI_FAIL;
    }
  }
done:
  torch_stop(&torch);
  if (blas.lib) dlclose(blas.lib);
  free(results);
  free(o.selected);
  free(o.device_list);
  return status;
}
