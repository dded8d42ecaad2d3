/*
 * bench_frontend.c — how long the frontend takes to parse and check a large
 * .tpk file.
 *
 * Generates a 10,000-line source in memory: families of realistic kernels
 * (softmax, matmul, layer/RMS norm, GELU, AdamW, flash attention,
 * embedding backward, cross-entropy, group quantisation), each instance
 * with its own name, tunable choices, dtypes and constants, so the checker
 * sees many distinct kernels rather than one repeated. Then times
 * tpk_compile_source (parse + check + IR build): one warm-up run, then
 * the median of --runs runs (default 7).
 *
 * Prints one JSON row on stdout, the format bench/run.py collects:
 *   {"name": ..., "device": "host", "value": MS, "unit": "ms", "baseline": null, "ratio": null}
 *
 *   bench_frontend [--runs N] [--lines N] [--write FILE]
 * --write saves the generated source (to look at it or `tpk check` it).
 */
#include "base/files.h"
#include "dsl/dsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- The generated source -------------------------------------------------------- */

static const char *const FLOATS[] = {"f32", "bf16", "f16"};

typedef void (*Family)(TpkStr *s, int n);

static void softmax(TpkStr *s, int n) {
  static const int bm[][3] = {{8, 16, 32}, {4, 8, 16}, {16, 32, 64}};
  const int *b = bm[n % 3];
  tpk_str_printf(s,
                 "// Row softmax #%d.\n"
                 "kernel softmax_%d(x%d: f32[M, N]) -> (y%d: f32[M, N])\n"
                 "  tune BM in [%d, %d, %d]\n"
                 "{\n"
                 "  for i in tiles(M, BM) {\n"
                 "    let t = load(x%d[i, :], other=-inf);\n"
                 "    let e = exp(t - max(t, axis=1, keepdims=true));\n"
                 "    y%d[i, :] = e / sum(e, axis=1, keepdims=true);\n"
                 "  }\n"
                 "}\n\n",
                 n, n, n, n, b[0], b[1], b[2], n, n);
}

static void matmul(TpkStr *s, int n) {
  const char *dt = FLOATS[n % 3];
  int bm = 64 << (n % 3), bk = 128 << (n % 2);
  tpk_str_printf(s,
                 "// Tiled matmul #%d in %s with an f32 accumulator.\n"
                 "kernel matmul_%s_%d(a: %s[M, K], b: %s[K, N]) -> (c: f32[M, N])\n"
                 "  tune BM in [%d, %d], BN in [128, 256], BK in [%d, %d]\n"
                 "{\n"
                 "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                 "    var acc_%d = zeros(f32[BM, BN]);\n"
                 "    for k in tiles(K, BK) {\n"
                 "      acc_%d += dot(a[i, k], b[k, j]);\n"
                 "    }\n"
                 "    c[i, j] = acc_%d;\n"
                 "  }\n"
                 "}\n\n",
                 n, dt, dt, n, dt, dt, bm, bm * 2, bk, bk * 2, n, n, n);
}

static void layernorm(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// Layer norm #%d.\n"
                 "kernel layernorm_%d(x: f32[M, N], w: f32[N], b: f32[N], eps: f32) -> (y: f32[M, N])\n"
                 "  tune BM in [%d, %d]\n"
                 "{\n"
                 "  for i in tiles(M, BM) {\n"
                 "    let t = x[i, :];\n"
                 "    let mu = mean(t, axis=1, keepdims=true);\n"
                 "    let d = t - mu;\n"
                 "    let r = rsqrt(mean(d * d, axis=1, keepdims=true) + eps);\n"
                 "    y[i, :] = d * r * w + b;\n"
                 "  }\n"
                 "}\n\n",
                 n, n, 4 << (n % 3), 8 << (n % 3));
}

static void rmsnorm(TpkStr *s, int n) {
  const char *dt = FLOATS[n % 3];
  tpk_str_printf(s,
                 "// RMS norm #%d with a residual stream updated in place.\n"
                 "kernel add_rmsnorm_%d(x: %s[M, N], inout residual: %s[M, N], w: %s[N], eps: f32)\n"
                 "    -> (y: %s[M, N])\n"
                 "  tune BM in [8, 16]\n"
                 "{\n"
                 "  for i in tiles(M, BM) {\n"
                 "    let h = (x[i, :] as f32) + (residual[i, :] as f32);\n"
                 "    residual[i, :] = h as %s;\n"
                 "    let r = rsqrt(mean(h * h, axis=1, keepdims=true) + eps);\n"
                 "    y[i, :] = (h * r * (w as f32)) as %s;\n"
                 "  }\n"
                 "}\n\n",
                 n, n, dt, dt, dt, dt, dt, dt);
}

static void gelu(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// Bias + GELU #%d (tanh approximation).\n"
                 "kernel bias_gelu_%d(x: f32[M, N], bias: f32[N]) -> (y: f32[M, N])\n"
                 "  tune BM in [%d, %d], BN in [512, 1024]\n"
                 "{\n"
                 "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                 "    let t = x[i, j] + bias[j];\n"
                 "    let inner = 0.7978845608028654 * (t + 0.044715 * t * t * t);\n"
                 "    y[i, j] = 0.5 * t * (1.0 + tanh(inner));\n"
                 "  }\n"
                 "}\n\n",
                 n, n, 8 << (n % 2), 16 << (n % 2));
}

static void adamw(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// AdamW step #%d.\n"
                 "kernel adamw_%d(inout p: f32[N], inout m: f32[N], inout v: f32[N], g: f32[N],\n"
                 "          lr: f32, beta1: f32, beta2: f32, eps: f32, wd: f32) -> ()\n"
                 "  tune BN in [%d, %d]\n"
                 "{\n"
                 "  for i in tiles(N, BN) {\n"
                 "    let m2 = beta1 * m[i] + (1.0 - beta1) * g[i];\n"
                 "    let v2 = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];\n"
                 "    m[i] = m2;\n"
                 "    v[i] = v2;\n"
                 "    p[i] = p[i] * (1.0 - lr * wd) - lr * m2 / (sqrt(v2) + eps);\n"
                 "  }\n"
                 "}\n\n",
                 n, n, 1024 << (n % 3), 2048 << (n % 3));
}

static void flash(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// Causal flash attention #%d.\n"
                 "kernel flash_attention_%d(q: bf16[BH, S, D], k: bf16[BH, T, D], v: bf16[BH, T, D],\n"
                 "                       scale: f32) -> (o: bf16[BH, S, D])\n"
                 "  tune BQ in [%d, 256], BKV in [128, %d]\n"
                 "{\n"
                 "  for h in 0..BH, i in tiles(S, BQ) {\n"
                 "    let qb = q[h, i, :];\n"
                 "    var m = full(f32[BQ, 1], -inf);\n"
                 "    var l = zeros(f32[BQ, 1]);\n"
                 "    var acc = zeros(f32[BQ, D]);\n"
                 "    for j in tiles(T, BKV) {\n"
                 "      let s = dot(qb, transpose(k[h, j, :])) * scale;\n"
                 "      let rows = i.start + iota(i32[BQ, BKV], axis=0);\n"
                 "      let cols = j.start + iota(i32[BQ, BKV], axis=1);\n"
                 "      let sm = where(cols <= rows, s, -inf);\n"
                 "      let m2 = maximum(m, max(sm, axis=1, keepdims=true));\n"
                 "      let p = exp(sm - m2);\n"
                 "      let alpha = exp(m - m2);\n"
                 "      l = l * alpha + sum(p, axis=1, keepdims=true);\n"
                 "      acc = acc * alpha + dot(p as bf16, v[h, j, :]);\n"
                 "      m = m2;\n"
                 "    }\n"
                 "    o[h, i, :] = (acc / l) as bf16;\n"
                 "  }\n"
                 "}\n\n",
                 n, n, 64 << (n % 2), 256 << (n % 2));
}

static void embedding_bwd(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// Embedding backward #%d (scatter-add).\n"
                 "kernel embedding_bwd_%d(ids: i32[T], g: f32[T, D]) -> (grad: f32[V, D] = 0)\n"
                 "  tune BT in [%d, 128]\n"
                 "{\n"
                 "  for t in tiles(T, BT) { grad[ids[t], :] += g[t, :]; }\n"
                 "}\n\n",
                 n, n, 32 << (n % 2));
}

static void cross_entropy(TpkStr *s, int n) {
  tpk_str_printf(s,
                 "// Cross-entropy #%d over a ragged vocabulary.\n"
                 "kernel cross_entropy_%d(logits: f32[T, V], labels: i32[T]) -> (loss: f32[T])\n"
                 "  tune BT in [8, 16], BV in [%d, 4096]\n"
                 "{\n"
                 "  for t in tiles(T, BT) {\n"
                 "    let lab = reshape(labels[t], [BT, 1]);\n"
                 "    var m = full(f32[BT, 1], -inf);\n"
                 "    var l = zeros(f32[BT, 1]);\n"
                 "    var picked = zeros(f32[BT, 1]);\n"
                 "    for v in tiles(V, BV) {\n"
                 "      let x = load(logits[t, v], other=-inf);\n"
                 "      let cols = v.start + iota(i32[BT, BV], axis=1);\n"
                 "      picked += sum(where(cols == lab, x, 0.0), axis=1, keepdims=true);\n"
                 "      let m2 = maximum(m, max(x, axis=1, keepdims=true));\n"
                 "      l = l * exp(m - m2) + sum(exp(x - m2), axis=1, keepdims=true);\n"
                 "      m = m2;\n"
                 "    }\n"
                 "    loss[t] = reshape(m + log(l) - picked, [BT]);\n"
                 "  }\n"
                 "}\n\n",
                 n, n, 1024 << (n % 2));
}

static void group_quant(TpkStr *s, int n) {
  int group = 32 << (n % 3);
  tpk_str_printf(s,
                 "// Group-wise int8 quantisation #%d, groups of %d.\n"
                 "const GROUP_%d = %d;\n"
                 "kernel quantize_groups_%d(x: f32[M, K])\n"
                 "    -> (q: i8[M, K], scale: f32[M, (K + GROUP_%d - 1) / GROUP_%d])\n"
                 "  tune BM in [8, 16]\n"
                 "{\n"
                 "  for i in tiles(M, BM), g in tiles(K, GROUP_%d) {\n"
                 "    let t = x[i, g];\n"
                 "    let amax = maximum(max(abs(t), axis=1, keepdims=true), 1e-12);\n"
                 "    let r = floor(t * (127.0 / amax) + 0.5);\n"
                 "    q[i, g] = minimum(maximum(r, -127.0), 127.0) as i8;\n"
                 "    scale[i, g.id] = reshape(amax / 127.0, [BM]);\n"
                 "  }\n"
                 "}\n\n",
                 n, group, n, group, n, n, n, n);
}

static const Family FAMILIES[] = {softmax, matmul, layernorm, rmsnorm, gelu,
                                  adamw,   flash,  embedding_bwd, cross_entropy, group_quant};

static size_t count_lines(const char *s, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) n += s[i] == '\n';
  return n;
}

/* Exactly `lines` lines: whole kernels while they fit, then comment lines. */
static char *generate(size_t lines, size_t *len, int *nkernels) {
  TpkStr s = {0};
  tpk_str_puts(&s, "// Generated by bench/bench_frontend.c: many kernels, one file.\n\n");
  size_t have = 2;
  int n = 0;
  for (;;) {
    TpkStr k = {0};
    FAMILIES[n % (int)TPK_ARRAY_LEN(FAMILIES)](&k, n);
    size_t kl = count_lines(k.data, k.len);
    if (have + kl > lines) {
      tpk_str_free(&k);
      break;
    }
    tpk_str_putn(&s, k.data, k.len);
    tpk_str_free(&k);
    have += kl;
    n++;
  }
  while (have < lines) {
    tpk_str_puts(&s, "// (padding to the line count)\n");
    have++;
  }
  *nkernels = n;
  *len = s.len;
  if (s.failed) {
    tpk_str_free(&s);
    return NULL;
  }
  return tpk_str_take(&s);
}

/* ---- Timing ------------------------------------------------------------------------ */

/* One parse + check; returns false (after printing the diagnostics) when
 * the generated source does not compile, which is a bug to fix first. */
static bool compile_once(const TpkSource *src, double *ms, int *kernels) {
  TpkDiags diags;
  tpk_diags_init(&diags, src);
  TpkModule *m = NULL;
  TpkCheckOptions opts = {0};
  double t0 = (tpk_now_seconds() * 1e3);
  TpkStatus st = tpk_compile_source(src, &opts, &diags, &m);
  double t1 = (tpk_now_seconds() * 1e3);
  bool ok = st == TPK_OK && m;
  if (!ok) {
    TpkStr r = {0};
    tpk_diags_render(&r, &diags);
    fprintf(stderr, "bench_frontend: the generated source does not check (%s):\n%.4000s\n", tpk_status_name(st),
            r.data ? r.data : "");
    tpk_str_free(&r);
  } else {
    *kernels = 0;
    for (int i = 0; i < m->nfuncs; i++) *kernels += m->funcs[i]->is_kernel;
  }
  if (m) tpk_module_free(m);
  tpk_diags_free(&diags);
  *ms = t1 - t0;
  return ok;
}

int main(int argc, char **argv) {
  int runs = 21; /* a median over many runs: this machine's speed drifts */
  long lines = 10000;
  const char *write_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--lines") == 0 && i + 1 < argc)
      lines = atol(argv[++i]);
    else if (strcmp(argv[i], "--write") == 0 && i + 1 < argc)
      write_path = argv[++i];
    else {
      fprintf(stderr, "usage: bench_frontend [--runs N] [--lines N] [--write FILE]\n");
      return 2;
    }
  }
  if (runs < 1 || runs > 1000 || lines < 10 || lines > 10000000) {
    fprintf(stderr, "bench_frontend: --runs must be 1..1000 and --lines 10..10000000\n");
    return 2;
  }

  size_t len;
  int generated;
  char *text = generate((size_t)lines, &len, &generated);
  if (!text) {
    fprintf(stderr, "bench_frontend: out of memory generating the source\n");
    return 1;
  }
  TpkError err = {0};
  if (write_path && tpk_file_write_bytes(write_path, 0666, text, len, &err) != TPK_OK) {
    fprintf(stderr, "bench_frontend: %s\n", err.message);
    free(text);
    return 1;
  }
  TpkSource src = {.name = "bench.tpk", .text = text, .len = len};

  double warm, *times = calloc((size_t)runs, sizeof *times);
  int kernels = 0;
  bool ok = times && compile_once(&src, &warm, &kernels);
  for (int r = 0; ok && r < runs; r++) ok = compile_once(&src, &times[r], &kernels);
  if (ok) {
    double median = tpk_median(times, runs); /* sorts times */
    fprintf(stderr, "bench_frontend: %ld lines, %zu bytes, %d kernels; median of %d runs %.2f ms (min %.2f, max %.2f)\n",
            lines, len, kernels, runs, median, times[0], times[runs - 1]);
    /* The name is the key bench/run.py finds this row's target by. */
    char count[32];
    if (lines >= 1000)
      snprintf(count, sizeof count, "%ld,%03ld", lines / 1000, lines % 1000);
    else
      snprintf(count, sizeof count, "%ld", lines);
    printf("{\"name\": \"frontend: parse+check a %s-line file\", \"device\": \"host\", \"value\": %.3f, "
           "\"unit\": \"ms\", \"baseline\": null, \"ratio\": null}\n",
           count, median);
  }
  free(times);
  free(text);
  return ok ? 0 : 1;
}
