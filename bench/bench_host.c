/*
 * bench_host.c — the host backend end to end, through the public API.
 *
 *   - f32 matmul 1024^3 as a .tpk kernel, one thread, tcc tier and cc tier,
 *     against OpenBLAS sgemm (one thread) in the same run;
 *   - compile latency of a kernel: libtcc vs cc -O3;
 *   - softmax and layernorm on 4096x4096 f32: GB/s moved vs memcpy of the
 *     same bytes.
 * Each row is a JSON line for bench/run.py.
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

void openblas_set_num_threads(int);

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
} Bench;

static void bench_open(Bench *b, const char *tier, const char *src, const char *kname,
                       TpkBuffer *(*make)(TpkDevice *, int, void *), int nbufs, double *scalars) {
  setenv("TPK_TIER", tier, 1);
  TpkDevice *dev;
  TpkProgram *prog;
  if (tpk_context_create(&b->ctx) || tpk_device_open(b->ctx, "host", &dev) ||
      tpk_program_load_source(b->ctx, "bench.tpk", src, strlen(src), &prog) || tpk_program_kernel(prog, kname, &b->k))
    die(kname);
  unsetenv("TPK_TIER");
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
  double s = tpk_now_seconds();
  if (tpk_kernel_launch(b->k, &b->launch)) die("launch");
  return tpk_now_seconds() - s;
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

/* The machine's speed drifts (shared cores), so tpk and OpenBLAS calls are
 * interleaved and each side's median compared. */
static void bench_matmul(void) {
  openblas_set_num_threads(1);
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
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, MM, MM, MM, 1, a, MM, b, MM, 0, c, MM);
  for (int i = 0; i < REPS; i++) {
    double s = tpk_now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, MM, MM, MM, 1, a, MM, b, MM, 0, c, MM);
    tb[i] = tpk_now_seconds() - s;
    tt[i] = bench_once(&tcc);
    tc[i] = bench_once(&cc);
  }
  double flops = 2.0 * MM * MM * MM, blas = flops / tpk_median(tb, REPS) / 1e9;
  double gt = flops / tpk_median(tt, REPS) / 1e9, gc = flops / tpk_median(tc, REPS) / 1e9;
  bench_close(&tcc);
  bench_close(&cc);
  free(a);
  free(b);
  free(c);
  row("f32 matmul 1024^3 kernel, one thread, tcc tier", gt, "GFLOP/s", "OpenBLAS sgemm", gt / blas);
  row("f32 matmul 1024^3 kernel, one thread, cc tier", gc, "GFLOP/s", "OpenBLAS sgemm", gc / blas);
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
  row("softmax 4096x4096 f32, cc tier", sm, "GB/s", "memcpy of the same bytes", sm / mem);
  row("layernorm 4096x4096 f32, cc tier", ln, "GB/s", "memcpy of the same bytes", ln / mem);
}

int main(void) {
  /* a private cache, so the cc tier really compiles */
  char dir[] = "/tmp/tpk-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("TPK_CACHE_DIR", dir, 1);
  bench_compile();
  bench_matmul();
  bench_rows();
  return 0;
}
