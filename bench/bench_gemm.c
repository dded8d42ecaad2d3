/*
 * bench_gemm.c — the gemm primitive against OpenBLAS, one thread.
 *
 * f32 C = A x B at 1024^3 (row-major, no transposes): tpk_gemm_f32 (this
 * CPU's best instruction set), OpenBLAS cblas_sgemm on one thread with
 * kernels for this CPU (bench/openblas.h), and the portable-C path; then
 * bf16 operands (tpk_gemm_bf16) against
 * OpenBLAS on the same values in f32. Each is warmed up once, then timed
 * --runs times (default 7) with tpk and OpenBLAS runs interleaved, so a
 * noisy neighbour slows both alike; the median is reported.
 *
 * Prints JSON rows on stdout (bench/run.py's format) with GFLOP/s as the
 * value and ratio = tpk / OpenBLAS (above 1 means tpk did better); a few
 * human-readable lines go to stderr.
 *
 *   bench_gemm [--runs N] [--size N] [--generic-runs N]
 */
#include "base/base.h"
#include "host/gemm.h"
#include "host/prims.h"
#include "bench/openblas.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What one timed run does. */
typedef struct Job {
  int kind; /* TPK, BLAS, GENERIC, BF16 */
  int n;
  const float *a, *b;
  const uint16_t *a16, *b16;
  float *c;
} Job;
enum { TPK, BLAS, GENERIC, BF16 };

static double run(const Job *j) {
  int n = j->n;
  double t = tpk_now_seconds();
  switch (j->kind) {
  case TPK:
    tpk_gemm_f32(n, n, n, j->a, n, 0, j->b, n, 0, j->c, n, 0);
    break;
  case BLAS:
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, j->a, n, j->b, n, 0.0f, j->c, n);
    break;
  case GENERIC:
    tpk_gemm_f32_generic(n, n, n, j->a, n, 0, j->b, n, 0, j->c, n, 0);
    break;
  case BF16:
    tpk_gemm_bf16(n, n, n, j->a16, n, 0, j->b16, n, 0, j->c, n, 0);
    break;
  }
  return tpk_now_seconds() - t;
}

/* Median seconds of `runs` timed runs of each job, interleaved, after one
 * warm-up each. */
static void measure(const Job *jobs, int njobs, int runs, double *out) {
  double *t = malloc(sizeof *t * (size_t)(runs * njobs));
  for (int j = 0; j < njobs; j++) run(&jobs[j]);
  for (int r = 0; r < runs; r++)
    for (int j = 0; j < njobs; j++) t[j * runs + r] = run(&jobs[j]);
  for (int j = 0; j < njobs; j++) out[j] = tpk_median(t + j * runs, runs);
  free(t);
}

static void row(const char *name, double gflops, const char *baseline, double base_gflops) {
  printf("{\"name\": \"%s\", \"device\": \"host\", \"value\": %.2f, \"unit\": \"GFLOP/s\", ", name, gflops);
  if (baseline)
    printf("\"baseline\": \"%s\", \"ratio\": %.3f}\n", baseline, gflops / base_gflops);
  else
    printf("\"baseline\": null, \"ratio\": null}\n");
}

static double max_rel_diff(const float *x, const float *y, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - (double)y[i]) / (fabs((double)y[i]) + 1.0);
    if (d > worst)
      worst = d;
  }
  return worst;
}

int main(int argc, char **argv) {
  bench_openblas_setup(argv);
  int runs = 7, n = 1024, generic_runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--runs"))
      runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--size"))
      n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--generic-runs"))
      generic_runs = atoi(argv[i + 1]);
  }
  if (runs < 1 || n < 1 || generic_runs < 0) {
    fprintf(stderr, "usage: bench_gemm [--runs N>=1] [--size N>=1] [--generic-runs N>=0]\n");
    return 2;
  }
  bench_openblas_one_thread("bench_gemm");

  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b);
  float *c_tpk = malloc(nn * sizeof(float)), *c_blas = malloc(nn * sizeof(float));
  uint16_t *a16 = malloc(nn * sizeof *a16), *b16 = malloc(nn * sizeof *b16);
  float *a_r = malloc(nn * sizeof *a_r), *b_r = malloc(nn * sizeof *b_r); /* bf16 values as f32 */
  unsigned s = 12345;
  for (size_t i = 0; i < nn; i++) {
    s = s * 1103515245u + 12345u;
    a[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    s = s * 1103515245u + 12345u;
    b[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    uint32_t u;
    memcpy(&u, &a[i], 4);
    a16[i] = (uint16_t)(u >> 16);
    u = (uint32_t)a16[i] << 16;
    memcpy(&a_r[i], &u, 4);
    memcpy(&u, &b[i], 4);
    b16[i] = (uint16_t)(u >> 16);
    u = (uint32_t)b16[i] << 16;
    memcpy(&b_r[i], &u, 4);
  }
  double flop = 2.0 * n * (double)n * n;

  Job f32[2] = {{TPK, n, a, b, NULL, NULL, c_tpk}, {BLAS, n, a, b, NULL, NULL, c_blas}};
  double t[2];
  measure(f32, 2, runs, t);
  double tpk = flop / t[0] * 1e-9, blas = flop / t[1] * 1e-9;
  fprintf(stderr, "f32 %d^3: tpk (%s) %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s, ratio %.3f; max rel diff %.2g\n", n,
          tpk_gemm_isa(), tpk, blas, tpk / blas, max_rel_diff(c_tpk, c_blas, nn));
  char name[128];
  snprintf(name, sizeof name, "f32 matmul %d^3, one thread (gemm primitive)", n);
  row(name, tpk, "OpenBLAS sgemm", blas);

  Job bf[2] = {{BF16, n, NULL, NULL, a16, b16, c_tpk}, {BLAS, n, a_r, b_r, NULL, NULL, c_blas}};
  measure(bf, 2, runs, t);
  double tbf = flop / t[0] * 1e-9, blas_bf = flop / t[1] * 1e-9;
  fprintf(stderr, "bf16 -> f32 %d^3: tpk %.1f GFLOP/s, OpenBLAS sgemm on the f32 values %.1f GFLOP/s; "
          "max rel diff %.2g\n", n, tbf, blas_bf, max_rel_diff(c_tpk, c_blas, nn));
  snprintf(name, sizeof name, "bf16 matmul %d^3 -> f32, one thread (gemm primitive)", n);
  row(name, tbf, "OpenBLAS sgemm", blas_bf);

  if (generic_runs > 0) {
    Job g = {GENERIC, n, a, b, NULL, NULL, c_tpk};
    double tg;
    measure(&g, 1, generic_runs, &tg);
    fprintf(stderr, "f32 %d^3 portable C: %.2f GFLOP/s\n", n, flop / tg * 1e-9);
    snprintf(name, sizeof name, "f32 matmul %d^3, one thread, portable C path", n);
    row(name, flop / tg * 1e-9, "OpenBLAS sgemm", blas);
  }

  free(a);
  free(b);
  free(c_tpk);
  free(c_blas);
  free(a16);
  free(b16);
  free(a_r);
  free(b_r);
  return 0;
}
