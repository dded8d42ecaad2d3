/*
 * bench_host.c — the host backend end to end, through the public API.
 *
 *   - f32 matmul 1024^3 as a .tpk kernel, tcc tier and cc tier, against
 *     OpenBLAS sgemm in the same run;
 *   - compile latency of a kernel: libtcc vs cc -O3;
 *   - softmax and layernorm on 4096x4096 f32: GB/s moved vs memcpy of the
 *     same bytes.
 * Each row is a JSON line for bench/run.py.
 *
 * Every kernel runs on one thread, as the rows say, and so does OpenBLAS
 * (memcpy is one call): the contexts are made with TPK_HOST_THREADS=1, and
 * OpenBLAS is loaded with one thread and kernels for this CPU
 * (bench/openblas.h). That is checked by what happened rather than what was
 * asked for: the CPU time other threads of the process spend during the
 * timed calls must stay near zero, or the bench fails instead of printing
 * the row. `bench_host --check-threads` runs
 * that check alone, untimed, with a control that must trip it (a context of
 * two threads), for the test suite (tests/bench/test_bench_host.c).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host/host.h"
#include "dsl/dsl.h"
#include "host/jit.h"
#include "tpk.h"
#include "bench/openblas.h"

static void row(const char *name, double value, const char *unit, const char *baseline, double ratio) {
  printf("{\"name\": \"%s\", \"device\": \"host\", \"value\": %.4g, \"unit\": \"%s\", \"baseline\": ", name, value, unit);
  if (baseline) printf("\"%s\", \"ratio\": %.3f}\n", baseline, ratio);
  else printf("null, \"ratio\": null}\n");
  fflush(stdout);
}

static void die(const char *what) {
  fprintf(stderr, "bench_host: %s: %s\n", what, tpk_last_error());
  exit(1);
}

/* ---- one thread, measured ----------------------------------------------------------- */

/* CPU time of timed calls: on the calling thread, and on every other thread
 * of the process (the runtime's workers, OpenBLAS's) while they ran. */
typedef struct CpuUse {
  double mine, elsewhere;
} CpuUse;

static double cpu_seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct CpuMark {
  double thread, process;
} CpuMark;

static CpuMark cpu_mark(void) {
  return (CpuMark){cpu_seconds(CLOCK_THREAD_CPUTIME_ID), cpu_seconds(CLOCK_PROCESS_CPUTIME_ID)};
}

static void cpu_add(CpuUse *u, CpuMark since) {
  CpuMark now = cpu_mark();
  double mine = now.thread - since.thread;
  u->mine += mine;
  u->elsewhere += (now.process - since.process) - mine;
}

/* Did other threads work while the calls ran? More than a tenth of the
 * calling thread's time is work (a parked worker or an idle OpenBLAS
 * thread costs nothing). */
static bool used_other_threads(const CpuUse *u) {
  return u->elsewhere > 0.1 * u->mine;
}

static void check_one_thread(const char *what, const CpuUse *u) {
  if (!used_other_threads(u)) return;
  fprintf(stderr, "bench_host: %s is measured on one thread, but other threads used %.0f%% as much CPU time as "
          "the calling one while it ran\n", what, 100 * u->elsewhere / u->mine);
  exit(1);
}

static const char *MATMUL =
    "kernel matmul(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N])\n"
    "  tune BM in [256], BN in [512], BK in [1024]\n"
    "{\n"
    "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
    "    var acc = zeros(f32[BM, BN]);\n"
    "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
    "    c[i, j] = acc;\n"
    "  }\n"
    "}\n";

static const char *ROWWISE =
    "kernel softmax(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [8] {\n"
    "  for i in tiles(M, BM) {\n"
    "    let t = load(x[i, :], other=-inf);\n"
    "    let e = exp(t - max(t, axis=1, keepdims=true));\n"
    "    y[i, :] = e / sum(e, axis=1, keepdims=true);\n"
    "  }\n"
    "}\n"
    "kernel layernorm(x: f32[M, N], w: f32[N], b: f32[N], eps: f32) -> (y: f32[M, N]) tune BM in [8] {\n"
    "  for i in tiles(M, BM) {\n"
    "    let t = x[i, :];\n"
    "    let mu = mean(t, axis=1, keepdims=true);\n"
    "    let d = t - mu;\n"
    "    let r = rsqrt(mean(d * d, axis=1, keepdims=true) + eps);\n"
    "    y[i, :] = d * r * w + b;\n"
    "  }\n"
    "}\n";

/* A kernel ready to launch, in a context whose JIT tier is `tier`. */
typedef struct Bench {
  TpkContext *ctx;
  TpkKernel *k;
  TpkBuffer *bufs[8];
  int nbufs;
  TpkLaunch launch;
  TpkLaunchResult ran;
  CpuUse cpu; /* of the timed launches */
} Bench;

/* The threads the benchmark's contexts run a grid on: one, as the rows say
 * (`--check-threads` makes a context of two as its control). */
static const char *bench_threads = "1";

static void bench_open(Bench *b, const char *tier, const char *src, const char *kname,
                       TpkBuffer *(*make)(TpkDevice *, int, void *), int nbufs, double *scalars) {
  memset(b, 0, sizeof *b);
  /* a context reads both when it is made */
  setenv("TPK_TIER", tier, 1);
  setenv("TPK_HOST_THREADS", bench_threads, 1);
  TpkDevice *dev;
  TpkProgram *prog;
  if (tpk_context_create(&b->ctx) || tpk_device_open(b->ctx, "host", &dev) ||
      tpk_program_load_source(b->ctx, "bench.tpk", src, strlen(src), &prog) || tpk_program_kernel(prog, kname, &b->k))
    die(kname);
  unsetenv("TPK_TIER");
  unsetenv("TPK_HOST_THREADS");
  b->nbufs = nbufs;
  for (int i = 0; i < nbufs; i++) b->bufs[i] = make(dev, i, NULL);
  b->launch = (TpkLaunch){.args = b->bufs, .scalars = scalars, .result = &b->ran};
  for (int i = 0; i < 2; i++) /* compile, warm up */
    if (tpk_kernel_launch(b->k, &b->launch)) die(kname);
  if (strcmp(b->ran.tier, tier) != 0) {
    fprintf(stderr, "bench_host: %s ran on tier %s, not %s\n", kname, b->ran.tier, tier);
    exit(1);
  }
}

static double bench_once(Bench *b) {
  CpuMark c = cpu_mark();
  double s = tpk_now_seconds();
  if (tpk_kernel_launch(b->k, &b->launch)) die("launch");
  double t = tpk_now_seconds() - s;
  cpu_add(&b->cpu, c);
  return t;
}

static void bench_close(Bench *b) {
  for (int i = 0; i < b->nbufs; i++) tpk_buffer_destroy(b->bufs[i]);
  tpk_program_destroy(tpk_kernel_program(b->k));
  tpk_context_destroy(b->ctx);
}

/* Median seconds of `reps` launches after warm-up. */
static double time_kernel(const char *tier, const char *src, const char *kname, TpkBuffer *(*make)(TpkDevice *, int, void *),
                          int nbufs, double *scalars, int reps) {
  Bench b;
  bench_open(&b, tier, src, kname, make, nbufs, scalars);
  double *t = malloc((size_t)reps * sizeof *t);
  for (int i = 0; i < reps; i++) t[i] = bench_once(&b);
  double m = tpk_median(t, reps);
  free(t);
  check_one_thread(kname, &b.cpu);
  bench_close(&b);
  return m;
}

enum { MM = 1024, ROWS = 4096 };

static TpkBuffer *matmul_buf(TpkDevice *dev, int i, void *unused) {
  (void)unused;
  int64_t shape[2] = {MM, MM};
  TpkBuffer *b;
  if (tpk_buffer_create(dev, TPK_F32, 2, shape, &b)) die("buffer");
  float *p = tpk_buffer_data(b);
  for (int64_t k = 0; k < (int64_t)MM * MM; k++) p[k] = (float)((k * 7 + i) % 13) * 0.1f - 0.6f;
  return b;
}

static TpkBuffer *big_buf(TpkDevice *dev, int seed) {
  int64_t shape[2] = {ROWS, ROWS};
  TpkBuffer *b;
  if (tpk_buffer_create(dev, TPK_F32, 2, shape, &b)) die("buffer");
  float *p = tpk_buffer_data(b);
  for (int64_t k = 0; k < (int64_t)ROWS * ROWS; k++) p[k] = (float)((k * 31 + seed) % 97) * 0.02f - 1.0f;
  return b;
}

/* softmax(x, y) */
static TpkBuffer *softmax_buf(TpkDevice *dev, int i, void *unused) {
  (void)unused;
  return big_buf(dev, i);
}

/* layernorm(x, w, b, eps, y): eps is a scalar, so no buffer */
static TpkBuffer *layernorm_buf(TpkDevice *dev, int i, void *unused) {
  (void)unused;
  if (i == 3) return NULL;
  if (i == 0 || i == 4) return big_buf(dev, i);
  int64_t n = ROWS;
  TpkBuffer *b;
  if (tpk_buffer_create(dev, TPK_F32, 1, &n, &b)) die("buffer");
  float *p = tpk_buffer_data(b);
  for (int64_t k = 0; k < ROWS; k++) p[k] = 1.0f + (float)(k % 5) * 0.1f;
  return b;
}

static double sgemm_once(const float *a, const float *b, float *c, CpuUse *cpu) {
  CpuMark m = cpu_mark();
  double s = tpk_now_seconds();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, MM, MM, MM, 1, a, MM, b, MM, 0, c, MM);
  double t = tpk_now_seconds() - s;
  cpu_add(cpu, m);
  return t;
}

/* The machine's speed drifts (shared cores), so tpk and OpenBLAS calls are
 * interleaved and each side's median compared. */

static void bench_matmul(void) {
  bench_openblas_one_thread("bench_host");
  float *a = malloc(sizeof(float) * MM * MM), *b = malloc(sizeof(float) * MM * MM), *c = malloc(sizeof(float) * MM * MM);
  for (int k = 0; k < MM * MM; k++) {
    a[k] = (float)(k % 13) * 0.1f;
    b[k] = (float)(k % 7) * 0.1f;
  }
  Bench tcc, cc;
  bench_open(&tcc, "tcc", MATMUL, "matmul", matmul_buf, 3, NULL);
  bench_open(&cc, "cc", MATMUL, "matmul", matmul_buf, 3, NULL);
  enum { REPS = 9 };
  double tb[REPS], tt[REPS], tc[REPS];
  CpuUse blas = {0};
  sgemm_once(a, b, c, &blas);
  blas = (CpuUse){0};
  for (int i = 0; i < REPS; i++) {
    tb[i] = sgemm_once(a, b, c, &blas);
    tt[i] = bench_once(&tcc);
    tc[i] = bench_once(&cc);
  }
  check_one_thread("OpenBLAS sgemm", &blas);
  check_one_thread("the matmul kernel, tcc tier", &tcc.cpu);
  check_one_thread("the matmul kernel, cc tier", &cc.cpu);
  double flops = 2.0 * MM * MM * MM, gblas = flops / tpk_median(tb, REPS) / 1e9;
  double gt = flops / tpk_median(tt, REPS) / 1e9, gc = flops / tpk_median(tc, REPS) / 1e9;
  bench_close(&tcc);
  bench_close(&cc);
  free(a);
  free(b);
  free(c);
  row("f32 matmul 1024^3 kernel, one thread, tcc tier", gt, "GFLOP/s", "OpenBLAS sgemm", gt / gblas);
  row("f32 matmul 1024^3 kernel, one thread, cc tier", gc, "GFLOP/s", "OpenBLAS sgemm", gc / gblas);
}

/* The C of a kernel, as the runtime would compile it. */
static char *kernel_c(const char *src, const char *kname, int64_t m, int64_t n) {
  TpkSource s = {.name = "bench.tpk", .text = src, .len = strlen(src)};
  TpkBinding binds[2] = {{"M", m}, {"N", n}};
  TpkCheckOptions o = {.only_kernel = kname};
  TpkDiags d;
  tpk_diags_init(&d, &s);
  TpkModule *mod, *bound = tpk_module_new(kname);
  if (tpk_compile_source(&s, &o, &d, &mod)) die("compile");
  tpk_diags_free(&d);
  TpkTarget host = tpk_target_host(tpk_parse_bytes(getenv("TPK_HOST_VMEM")));
  TpkStr out = {0};
  TpkError err = {0};
  TpkFunc *f; /* as a launch binds it */
  if (!bound || tpk_bind(bound, mod->funcs[0], binds, 2, &f, &err) ||
      tpk_lower_to_c(f, &host, "tpk_kernel_softmax", src, 0, &out, NULL, &err)) {
    fprintf(stderr, "bench_host: %s\n", err.message);
    exit(1);
  }
  tpk_module_free(bound);
  tpk_module_free(mod);
  return tpk_str_take(&out);
}

static void bench_compile(void) {
  double ttcc[15], tcc_ms, cc_ms;
  TpkJitOptions o = {.tier = TPK_TIER_TCC, .hot_calls = -1, .cache_dir = ""};
  TpkJit *jit;
  TpkError err = {0};
  if (tpk_jit_create(&o, &jit, &err)) die(err.message);
  for (int i = 0; i < 15; i++) {
    char *c = kernel_c(ROWWISE, "softmax", 1024 + i, 512); /* a new kernel each time */
    TpkCode *code;
    double s = tpk_now_seconds();
    if (tpk_jit_compile(jit, c, "tpk_kernel_softmax", &code, &err)) die(err.message);
    ttcc[i] = tpk_now_seconds() - s;
    free(c);
  }
  tpk_jit_destroy(jit);
  tcc_ms = tpk_median(ttcc, 15) * 1e3;
  o.tier = TPK_TIER_CC;
  if (tpk_jit_create(&o, &jit, &err)) die(err.message);
  double tcc2[3];
  for (int i = 0; i < 3; i++) {
    char *c = kernel_c(ROWWISE, "softmax", 2048 + i, 512);
    TpkCode *code;
    double s = tpk_now_seconds();
    if (tpk_jit_compile(jit, c, "tpk_kernel_softmax", &code, &err)) die(err.message);
    tcc2[i] = tpk_now_seconds() - s;
    free(c);
  }
  tpk_jit_destroy(jit);
  cc_ms = tpk_median(tcc2, 3) * 1e3;
  row("compile a softmax kernel with libtcc", tcc_ms, "ms", "cc -O3", cc_ms / tcc_ms);
}

static void bench_rows(void) {
  size_t bytes = (size_t)ROWS * ROWS * sizeof(float);
  char *src = malloc(bytes), *dst = malloc(bytes);
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  double t[7];
  for (int i = 0; i < 7; i++) {
    double s = tpk_now_seconds();
    memcpy(dst, src, bytes);
    t[i] = tpk_now_seconds() - s;
  }
  double moved = 2.0 * (double)bytes; /* read + write, as the kernels do */
  double mem = moved / tpk_median(t, 7) / 1e9;
  free(src);
  free(dst);
  double sm = moved / time_kernel("cc", ROWWISE, "softmax", softmax_buf, 2, NULL, 7) / 1e9;
  double scalars[5] = {0, 0, 0, 1e-5, 0};
  double ln = moved / time_kernel("cc", ROWWISE, "layernorm", layernorm_buf, 5, scalars, 7) / 1e9;
  row("softmax 4096x4096 f32, one thread, cc tier", sm, "GB/s", "memcpy of the same bytes", sm / mem);
  row("layernorm 4096x4096 f32, one thread, cc tier", ln, "GB/s", "memcpy of the same bytes", ln / mem);
}

/* `--check-threads`: the one-thread check on the rows' own setup, untimed
 * (a few launches of the matmul kernel and of sgemm), and its control: a
 * context of two threads must trip it. Exit status 0 when both hold. */
static int check_threads(void) {
  float *a = calloc((size_t)MM * MM, sizeof *a), *b = calloc((size_t)MM * MM, sizeof *b),
        *c = calloc((size_t)MM * MM, sizeof *c);
  if (!a || !b || !c) return 1;
  bench_openblas_one_thread("bench_host");
  CpuUse blas = {0};
  for (int i = 0; i < 3; i++) sgemm_once(a, b, c, &blas);
  free(a), free(b), free(c);
  Bench one, two;
  bench_open(&one, "tcc", MATMUL, "matmul", matmul_buf, 3, NULL);
  for (int i = 0; i < 3; i++) bench_once(&one);
  bench_close(&one);
  bench_threads = "2";
  bench_open(&two, "tcc", MATMUL, "matmul", matmul_buf, 3, NULL); /* its grid: 4 x 2 instances */
  for (int i = 0; i < 3; i++) bench_once(&two);
  bench_close(&two);
  bench_threads = "1";
  printf("OpenBLAS sgemm, one thread: other threads used %.1f%% of its CPU time\n", 100 * blas.elsewhere / blas.mine);
  printf("matmul kernel, one thread: other threads used %.1f%% of its CPU time\n", 100 * one.cpu.elsewhere / one.cpu.mine);
  printf("matmul kernel, two threads (the control): other threads used %.1f%%\n", 100 * two.cpu.elsewhere / two.cpu.mine);
  bool ok = !used_other_threads(&blas) && !used_other_threads(&one.cpu) && used_other_threads(&two.cpu);
  printf("%s\n", ok ? "ok: one thread is one thread, and two are seen" : "FAILED");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  bench_openblas_setup(argv);
  /* a private cache, so the cc tier really compiles */
  char dir[] = "/tmp/tpk-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("TPK_CACHE_DIR", dir, 1);
  if (argc == 2 && strcmp(argv[1], "--check-threads") == 0) return check_threads();
  if (argc != 1) {
    fprintf(stderr, "usage: bench_host [--check-threads]\n");
    return 2;
  }
  bench_compile();
  bench_matmul();
  bench_rows();
  return 0;
}
