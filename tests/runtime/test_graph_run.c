/*
 * test_graph_run.c — compiled graphs run: a driver (lower/fuse.c's form,
 * written here as IR text) of cluster kernels, a standard kernel and
 * reshapes, launched as the one kernel of its program on the host and a
 * simulated chip, at many sizes with one compile per cluster.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ir/ir.h"
#include "runtime/internal.h"
#include "tpk.h"

/* x @ w + b, relu (c0); its row sums (c1); softmax of it (the library's);
 * returned as a reshape of c0's result (in place), the sums, the softmax. */
static const char *LINEAR =
    "module \"linear\"\n"
    "kernel @g.c0(%x: ref<f32[B,K]>, %w: ref<f32[K,N]>, %b: ref<f32[N]>, %y: out ref<f32[B,N]>) {\n"
    "  %0 = load %x {index=\"::\"} : f32[B,K]\n"
    "  %1 = load %w {index=\"::\"} : f32[K,N]\n"
    "  %2 = dot %0, %1 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,N]\n"
    "  %3 = load %b {index=\":\"} : f32[N]\n"
    "  %4 = broadcast %3 : f32[B,N]\n"
    "  %5 = add %2, %4 : f32[B,N]\n"
    "  %6 = const {value=0.0} : f32\n"
    "  %7 = broadcast %6 : f32[B,N]\n"
    "  %8 = max %5, %7 : f32[B,N]\n"
    "  store %y, %8 {index=\"::\", mode=\"set\"}\n"
    "}\n"
    "kernel @g.c1(%y: ref<f32[B,N]>, %s: out ref<f32[B]>) {\n"
    "  %0 = load %y {index=\"::\"} : f32[B,N]\n"
    "  %1 = reduce %0 {kind=\"sum\", axes=[1], keepdims=false} : f32[B]\n"
    "  store %s, %1 {index=\":\", mode=\"set\"}\n"
    "}\n"
    "func @g(%x: f32[B,K], %w: f32[K,N], %b: f32[N]) -> (f32[B*N], f32[B], f32[B,N]) {\n"
    "  %0 = call %x, %w, %b {callee=\"g.c0\"} : f32[B,N]\n"
    "  %1 = call %0 {callee=\"g.c1\"} : f32[B]\n"
    "  %2 = call %0 {callee=\"softmax\"} : f32[B,N]\n"
    "  %3 = reshape %0 : f32[B*N]\n"
    "  return %3, %1, %2\n"
    "}\n";

/* The driver module of `text` with the IR of the named standard kernels
 * appended (as the graph builder clones them), made a program. */
static TpkProgram *driver_program(TpkContext *ctx, const char *text, const char *const *std) {
  TpkStr s = {0};
  tpk_str_puts(&s, text);
  for (int i = 0; std && std[i]; i++) {
    TpkKernel *k;
    if (tpk_std_kernel(ctx, std[i], &k) != TPK_OK) fail_msg("%s", tpk_last_error());
    tpk_ir_print_func(&s, tpk_kernel_ir(k));
  }
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(s.data, s.len, "graph", &err);
  tpk_str_free(&s);
  if (!m) fail_msg("%s", err.message);
  TpkFunc *driver = NULL;
  for (int i = 0; i < m->nfuncs; i++)
    if (!m->funcs[i]->is_kernel) driver = m->funcs[i];
  assert_non_null(driver);
  TpkProgram *p;
  if (tpk_program_from_driver(ctx, m, driver, &p) != TPK_OK) fail_msg("%s", tpk_last_error());
  return p;
}

static TpkBuffer *buffer(TpkDevice *dev, int rank, const int64_t *shape) {
  TpkBuffer *b;
  if (tpk_buffer_create(dev, TPK_F32, rank, shape, &b) != TPK_OK) fail_msg("%s", tpk_last_error());
  return b;
}

static void fill(TpkBuffer *b, uint64_t seed) {
  float *v = tpk_buffer_data(b);
  size_t n = tpk_buffer_bytes(b) / sizeof *v;
  for (size_t i = 0; i < n; i++) v[i] = (float)((int64_t)(tpk_splitmix64(&seed) % 17) - 8) / 8.0f;
}

/* One launch of LINEAR's graph at (B, K, N), checked against C. */
static void run_linear(TpkKernel *g, TpkDevice *dev, int64_t B, int64_t K, int64_t N, TpkLaunchResult *r) {
  TpkBuffer *x = buffer(dev, 2, (int64_t[]){B, K}), *w = buffer(dev, 2, (int64_t[]){K, N}), *b = buffer(dev, 1, &N);
  TpkBuffer *flat = buffer(dev, 1, (int64_t[]){B * N}), *sums = buffer(dev, 1, &B), *soft = buffer(dev, 2, (int64_t[]){B, N});
  fill(x, 1 + (uint64_t)B), fill(w, 2), fill(b, 3);
  TpkBuffer *args[] = {x, w, b, flat, sums, soft};
  TpkLaunch L = {.args = args, .result = r};
  if (tpk_kernel_launch(g, &L) != TPK_OK) fail_msg("B=%lld: %s", (long long)B, tpk_last_error());
  const float *xv = tpk_buffer_data(x), *wv = tpk_buffer_data(w), *bv = tpk_buffer_data(b);
  const float *fv = tpk_buffer_data(flat), *sv = tpk_buffer_data(sums), *pv = tpk_buffer_data(soft);
  for (int64_t i = 0; i < B; i++) {
    double sum = 0, max = -INFINITY, den = 0;
    double row[64];
    for (int64_t j = 0; j < N; j++) {
      double acc = bv[j];
      for (int64_t k = 0; k < K; k++) acc += (double)xv[i * K + k] * wv[k * N + j];
      row[j] = acc > 0 ? acc : 0;
      sum += row[j];
      max = row[j] > max ? row[j] : max;
      if (fabs(fv[i * N + j] - row[j]) > 1e-4) fail_msg("B=%lld: y[%lld,%lld] = %g, want %g", (long long)B, (long long)i, (long long)j, fv[i * N + j], row[j]);
    }
    if (fabs(sv[i] - sum) > 1e-3) fail_msg("B=%lld: sum[%lld] = %g, want %g", (long long)B, (long long)i, sv[i], sum);
    for (int64_t j = 0; j < N; j++) den += exp(row[j] - max);
    for (int64_t j = 0; j < N; j++)
      if (fabs(pv[i * N + j] - exp(row[j] - max) / den) > 1e-5) fail_msg("B=%lld: softmax[%lld,%lld] = %g", (long long)B, (long long)i, (long long)j, pv[i * N + j]);
  }
  for (int i = 0; i < 6; i++) tpk_buffer_destroy(args[i]);
}

/* The graph's program has one kernel, the graph: its inputs, then its
 * outputs, sized from its symbols as any kernel's. */
static void test_graph_is_one_kernel(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  TpkProgram *p = driver_program(ctx, LINEAR, (const char *[]){"softmax", NULL});
  assert_int_equal(tpk_program_kernel_count(p), 1);
  assert_string_equal(tpk_program_kernel_name(p, 0), "g");
  TpkKernel *g;
  assert_int_equal(tpk_program_kernel(p, "g", &g), TPK_OK);
  assert_int_equal(tpk_kernel_param_count(g), 6);
  static const TpkParamKind kinds[] = {TPK_PARAM_KIND_INPUT, TPK_PARAM_KIND_INPUT, TPK_PARAM_KIND_INPUT,
                                       TPK_PARAM_KIND_OUTPUT, TPK_PARAM_KIND_OUTPUT, TPK_PARAM_KIND_OUTPUT};
  for (int i = 0; i < 6; i++) assert_int_equal(tpk_kernel_param_kind(g, i), kinds[i]);
  assert_string_equal(tpk_kernel_param_name(g, 0), "x");
  assert_string_equal(tpk_kernel_param_name(g, 3), "out0");
  assert_string_equal(tpk_kernel_param_dim(g, 3, 0), "B*N");
  int64_t shape[2];
  assert_int_equal(tpk_kernel_param_shape(g, 3, (TpkNamedInt[]){{"B", 3}, {"N", 5}}, 2, shape), TPK_OK);
  assert_int_equal(shape[0], 15);
  assert_int_equal(tpk_kernel_symbol_count(g), 3);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* 20 batch sizes, on the host: the clusters compiled once, for every size
 * (the two in one code object: one compiler run); the standard kernel
 * runs the library's code. */
static void test_sizes_compile_once(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  TpkDevice *host;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  TpkProgram *p = driver_program(ctx, LINEAR, (const char *[]){"softmax", NULL});
  TpkKernel *g;
  assert_int_equal(tpk_program_kernel(p, "g", &g), TPK_OK);
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  for (int i = 0; i < 20; i++) {
    TpkLaunchResult r;
    run_linear(g, host, 1 + 3 * i, 7 + i % 3, 5 + i % 4, &r);
    assert_string_equal(r.tier, "tcc");
    assert_false(r.simulated);
  }
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* On a simulated chip the launch reports the sum of its calls. */
static void test_sim_sums_the_calls(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *sim;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &sim), TPK_OK);
  TpkProgram *p = driver_program(ctx, LINEAR, (const char *[]){"softmax", NULL});
  TpkKernel *g, *softmax;
  assert_int_equal(tpk_program_kernel(p, "g", &g), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "softmax", &softmax), TPK_OK);
  TpkLaunchResult r;
  run_linear(g, sim, 40, 16, 24, &r);
  assert_true(r.simulated);
  assert_string_equal(r.sim.chip, "v5e");
  assert_non_null(r.trace);
  /* the softmax alone is one of the three calls */
  TpkBuffer *x = buffer(sim, 2, (int64_t[]){40, 24}), *y = buffer(sim, 2, (int64_t[]){40, 24});
  TpkLaunchResult alone;
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = &alone};
  assert_int_equal(tpk_kernel_launch(softmax, &L), TPK_OK);
  assert_true(r.sim.seconds > alone.sim.seconds);
  assert_true(r.sim.cycles > alone.sim.cycles);
  assert_true(r.sim.hbm_bytes > alone.sim.hbm_bytes);
  assert_true(r.sim.matmul_flops >= 2.0 * 40 * 16 * 24);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* ---- through the graph API ------------------------------------------------------- */

#define CHECK(call)                                      \
  do {                                                   \
    if ((call) != TPK_OK) fail_msg("%s", tpk_last_error()); \
  } while (0)

/* relu(x @ w + b) and its row sums, for every batch size B, named `name`. */
static TpkGraph *linear_graph(TpkContext *ctx, const char *name) {
  TpkGraph *g;
  int x, w, b, y, h, s, n;
  CHECK(tpk_graph_create(ctx, name, &g));
  CHECK(tpk_graph_input(g, TPK_F32, 2, (const char *[]){"B", "K"}, &x));
  CHECK(tpk_graph_input(g, TPK_F32, 2, (const char *[]){"K", "N"}, &w));
  CHECK(tpk_graph_input(g, TPK_F32, 1, (const char *[]){"N"}, &b));
  CHECK(tpk_graph_op(g, "addmm", (TpkArg[]){tpk_arg_value(b), tpk_arg_value(x), tpk_arg_value(w)}, 3, &y, 1, &n));
  CHECK(tpk_graph_op(g, "relu", (TpkArg[]){tpk_arg_value(y)}, 1, &h, 1, &n));
  CHECK(tpk_graph_op(g, "sum", (TpkArg[]){tpk_arg_value(h), tpk_arg_ints(1, (int64_t[]){1})}, 2, &s, 1, &n));
  CHECK(tpk_graph_output(g, h));
  CHECK(tpk_graph_output(g, s));
  return g;
}

/* One launch of linear_graph at (B, K, N), checked against C. */
static void run_linear_graph(TpkKernel *k, TpkDevice *dev, int64_t B, int64_t K, int64_t N, TpkLaunchResult *r) {
  TpkBuffer *x = buffer(dev, 2, (int64_t[]){B, K}), *w = buffer(dev, 2, (int64_t[]){K, N}), *b = buffer(dev, 1, &N);
  TpkBuffer *h = buffer(dev, 2, (int64_t[]){B, N}), *s = buffer(dev, 1, &B);
  fill(x, 5 + (uint64_t)B), fill(w, 6), fill(b, 7);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, w, b, h, s}, .result = r};
  CHECK(tpk_kernel_launch(k, &L));
  const float *xv = tpk_buffer_data(x), *wv = tpk_buffer_data(w), *bv = tpk_buffer_data(b);
  const float *hv = tpk_buffer_data(h), *sv = tpk_buffer_data(s);
  for (int64_t i = 0; i < B; i++) {
    double sum = 0;
    for (int64_t j = 0; j < N; j++) {
      double acc = bv[j];
      for (int64_t q = 0; q < K; q++) acc += (double)xv[i * K + q] * wv[q * N + j];
      acc = acc > 0 ? acc : 0;
      sum += acc;
      if (fabs(hv[i * N + j] - acc) > 1e-4) fail_msg("B=%lld: h[%lld,%lld] = %g, want %g", (long long)B, (long long)i, (long long)j, hv[i * N + j], acc);
    }
    if (fabs(sv[i] - sum) > 1e-3) fail_msg("B=%lld: s[%lld] = %g, want %g", (long long)B, (long long)i, sv[i], sum);
  }
  TpkBuffer *all[] = {x, w, b, h, s};
  for (int i = 0; i < 5; i++) tpk_buffer_destroy(all[i]);
}

/* The kernels of a compiled graph's module that are not the library's:
 * its clusters (what compiles). */
static int clusters(const TpkProgram *p) {
  const TpkModule *m = tpk_program_ir(p);
  int n = 0;
  for (int i = 0; i < m->nfuncs; i++) n += m->funcs[i]->is_kernel && strchr(m->funcs[i]->name, '.') != NULL;
  return n;
}

/* A graph with a symbolic batch compiles once and runs 20 batch sizes on
 * the host and a simulated chip; compiling a graph of the same structure
 * and name again is a hit of the cache. */
static void test_compiled_graph_serves_every_size(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkDevice *host, *sim;
  CHECK(tpk_device_open(ctx, "host", &host));
  CHECK(tpk_device_open(ctx, "sim:v5e", &sim));
  TpkGraph *g = linear_graph(ctx, "linear_relu");
  TpkProgram *p;
  CHECK(tpk_graph_compile(g, &p));
  int compiles = tpk_context_compiler_runs(ctx);
  assert_int_equal(compiles, clusters(p));
  assert_true(compiles >= 1);
  TpkKernel *k;
  CHECK(tpk_program_kernel(p, "linear_relu", &k));
  for (int i = 0; i < 20; i++) {
    TpkLaunchResult r;
    run_linear_graph(k, i % 5 == 4 ? sim : host, 1 + 5 * i, 3 + i % 4, 2 + i % 7, &r);
    assert_int_equal(r.simulated, i % 5 == 4);
    if (r.simulated) assert_true(r.sim.seconds > 0);
  }
  assert_int_equal(tpk_context_compiler_runs(ctx), compiles);
  /* the same structure again: the program from the cache */
  TpkGraph *again = linear_graph(ctx, "linear_relu");
  TpkProgram *q;
  CHECK(tpk_graph_compile(again, &q));
  assert_ptr_equal(p, q);
  TpkCacheStats s;
  CHECK(tpk_cache_stats(ctx, &s));
  assert_int_equal(s.unit_misses[TPK_UNIT_GRAPH], 1);
  assert_int_equal(s.unit_hits[TPK_UNIT_GRAPH], 1);
  /* another name is another program (its kernel is named so), on the same code */
  TpkGraph *other = linear_graph(ctx, "other");
  TpkProgram *o;
  CHECK(tpk_graph_compile(other, &o));
  assert_ptr_not_equal(o, p);
  assert_string_equal(tpk_program_kernel_name(o, 0), "other");
  assert_int_equal(tpk_context_compiler_runs(ctx), compiles);
  tpk_program_destroy(q);
  tpk_program_destroy(o);
  tpk_graph_destroy(again);
  tpk_graph_destroy(other);
  /* the program outlives its graph */
  tpk_graph_destroy(g);
  TpkLaunchResult r;
  run_linear_graph(k, host, 4, 3, 3, &r);
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

/* A compiled graph's kernel is its driver's launch, not IR a stream or
 * another graph can call: both refuse it by name (they called its bare
 * signature, and their outputs were never written). */
static void test_graph_kernel_is_not_called_in_a_stream_or_graph(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  TpkDevice *host;
  CHECK(tpk_device_open(ctx, "host", &host));
  TpkGraph *g = linear_graph(ctx, "linear_relu");
  TpkProgram *p;
  CHECK(tpk_graph_compile(g, &p));
  TpkKernel *k;
  CHECK(tpk_program_kernel(p, "linear_relu", &k));
  TpkBuffer *x, *w, *b;
  CHECK(tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){4, 3}, &x));
  CHECK(tpk_buffer_create(host, TPK_F32, 2, (int64_t[]){3, 5}, &w));
  CHECK(tpk_buffer_create(host, TPK_F32, 1, (int64_t[]){5}, &b));
  TpkStream *s;
  CHECK(tpk_stream_create(host, &s));
  TpkBuffer *outs[3] = {0};
  int n = 0;
  assert_int_equal(tpk_stream_call(s, k, (TpkArg[]){tpk_arg_buffer(x), tpk_arg_buffer(w), tpk_arg_buffer(b)}, 3, outs, 3, &n),
                   TPK_ERR_UNSUPPORTED);
  assert_int_equal(n, 0);
  assert_non_null(strstr(tpk_last_error(), "'linear_relu' is a compiled graph"));
  TpkGraph *outer;
  CHECK(tpk_graph_create(ctx, "outer", &outer));
  int gx, gw, gb, vals[3];
  CHECK(tpk_graph_input(outer, TPK_F32, 2, (const char *[]){"B", "K"}, &gx));
  CHECK(tpk_graph_input(outer, TPK_F32, 2, (const char *[]){"K", "N"}, &gw));
  CHECK(tpk_graph_input(outer, TPK_F32, 1, (const char *[]){"N"}, &gb));
  assert_int_equal(tpk_graph_call(outer, k, (TpkArg[]){tpk_arg_value(gx), tpk_arg_value(gw), tpk_arg_value(gb)}, 3, vals, 3, &n),
                   TPK_ERR_UNSUPPORTED);
  assert_non_null(strstr(tpk_last_error(), "'linear_relu' is a compiled graph"));
  tpk_graph_destroy(outer);
  tpk_stream_destroy(s);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(w);
  tpk_buffer_destroy(b);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_context_destroy(ctx);
}

/* select_backward scatters its gradient at an index that is a rank-0
 * constant reshaped to [1] inside a cluster: the C emitter copied the
 * scalar as if it were memory (a crash). */
static void test_scalar_reshaped_in_a_cluster(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  TpkGraph *g;
  int x, y, n;
  CHECK(tpk_graph_create(ctx, "scatter_row", &g));
  CHECK(tpk_graph_input(g, TPK_F32, 2, (const char *[]){"3", "5"}, &x));
  CHECK(tpk_graph_op(g, "select_backward",
                     (TpkArg[]){tpk_arg_value(x), tpk_arg_ints(3, (int64_t[]){3, 4, 5}), tpk_arg_int(1), tpk_arg_int(2)}, 4, &y, 1, &n));
  CHECK(tpk_graph_output(g, y));
  TpkProgram *p;
  CHECK(tpk_graph_compile(g, &p));
  TpkKernel *k;
  TpkDevice *host;
  CHECK(tpk_program_kernel(p, "scatter_row", &k));
  CHECK(tpk_device_open(ctx, "host", &host));
  TpkBuffer *in = buffer(host, 2, (int64_t[]){3, 5}), *out = buffer(host, 3, (int64_t[]){3, 4, 5});
  fill(in, 3);
  TpkLaunch L = {.args = (TpkBuffer *[]){in, out}};
  CHECK(tpk_kernel_launch(k, &L));
  const float *iv = tpk_buffer_data(in), *ov = tpk_buffer_data(out);
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 5; c++) assert_true(ov[(a * 4 + b) * 5 + c] == (b == 2 ? iv[a * 5 + c] : 0.0f));
  tpk_buffer_destroy(in);
  tpk_buffer_destroy(out);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_context_destroy(ctx);
}

/* A user's tiled matmul (blocks of 16: every size below is ragged). */
static const char *MM_TPK = "kernel mm(a: f32[M, K], b: f32[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [16, 8], BN in [16, 8], BK in [16, 8]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

/* gelu(k(x, w) + b), every batch size B, named `name`. */
static TpkGraph *matmul_gelu_graph(TpkContext *ctx, const char *name, TpkKernel *k) {
  TpkGraph *g;
  int x, w, b, y, h, o, n;
  CHECK(tpk_graph_create(ctx, name, &g));
  CHECK(tpk_graph_input(g, TPK_F32, 2, (const char *[]){"B", "20"}, &x));
  CHECK(tpk_graph_input(g, TPK_F32, 2, (const char *[]){"20", "24"}, &w));
  CHECK(tpk_graph_input(g, TPK_F32, 1, (const char *[]){"24"}, &b));
  CHECK(tpk_graph_call(g, k, (TpkArg[]){tpk_arg_value(x), tpk_arg_value(w)}, 2, &y, 1, &n));
  CHECK(tpk_graph_op(g, "add", (TpkArg[]){tpk_arg_value(y), tpk_arg_value(b)}, 2, &h, 1, &n));
  CHECK(tpk_graph_op(g, "gelu", (TpkArg[]){tpk_arg_value(h)}, 1, &o, 1, &n));
  CHECK(tpk_graph_output(g, o));
  return g;
}

/* The calls the program's driver makes. */
static int driver_calls(const TpkProgram *p) {
  const TpkModule *m = tpk_program_ir(p);
  int n = 0;
  for (int i = 0; i < m->nfuncs; i++)
    for (const TpkOp *op = m->funcs[i]->is_kernel ? NULL : m->funcs[i]->body->first; op; op = op->next)
      n += op->opcode == TPK_OP_CALL;
  return n;
}

/* One launch of matmul_gelu_graph at batch B, checked against C. */
static void run_matmul_gelu(TpkKernel *k, TpkDevice *dev, int64_t B) {
  const int64_t K = 20, N = 24;
  TpkBuffer *x = buffer(dev, 2, (int64_t[]){B, K}), *w = buffer(dev, 2, (int64_t[]){K, N}), *b = buffer(dev, 1, &N);
  TpkBuffer *o = buffer(dev, 2, (int64_t[]){B, N});
  fill(x, 11 + (uint64_t)B), fill(w, 12), fill(b, 13);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, w, b, o}};
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("B=%lld: %s", (long long)B, tpk_last_error());
  const float *xv = tpk_buffer_data(x), *wv = tpk_buffer_data(w), *bv = tpk_buffer_data(b), *ov = tpk_buffer_data(o);
  for (int64_t i = 0; i < B; i++)
    for (int64_t j = 0; j < N; j++) {
      double h = bv[j];
      for (int64_t q = 0; q < K; q++) h += (double)xv[i * K + q] * wv[q * N + j];
      double want = 0.5 * h * (1 + erf(h / sqrt(2.0)));
      if (fabs(ov[i * N + j] - want) > 1e-4)
        fail_msg("B=%lld: o[%lld,%lld] = %g, want %g", (long long)B, (long long)i, (long long)j, ov[i * N + j], want);
    }
  TpkBuffer *all[] = {x, w, b, o};
  for (int i = 0; i < 4; i++) tpk_buffer_destroy(all[i]);
}

/* A user's matmul kernel called in a graph, then + bias and GELU: one
 * kernel (the epilogue computed at the matmul's store), compiled once for
 * every batch size, on the host and a simulated chip. The standard
 * library's matmul in the same graph is kept as it is (its ahead-of-time
 * code): two calls. */
static void test_custom_kernel_takes_its_epilogue(void **state) {
  (void)state;
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_TIER");
  TpkDevice *host, *sim;
  CHECK(tpk_device_open(ctx, "host", &host));
  CHECK(tpk_device_open(ctx, "sim:v5e", &sim));
  TpkProgram *user;
  CHECK(tpk_program_load_source(ctx, "mm.tpk", MM_TPK, strlen(MM_TPK), &user));
  TpkKernel *mm, *k;
  CHECK(tpk_program_kernel(user, "mm", &mm));
  TpkGraph *g = matmul_gelu_graph(ctx, "mm_gelu", mm);
  TpkProgram *p;
  CHECK(tpk_graph_compile(g, &p));
  assert_int_equal(driver_calls(p), 1);
  assert_int_equal(clusters(p), 1);
  CHECK(tpk_program_kernel(p, "mm_gelu", &k));
  int compiles = -1;
  for (int i = 0; i < 8; i++) {
    run_matmul_gelu(k, i % 4 == 3 ? sim : host, 1 + 9 * i);
    if (i == 0) compiles = tpk_context_compiler_runs(ctx);
  }
  assert_int_equal(tpk_context_compiler_runs(ctx), compiles);
  TpkKernel *std_mm, *sk;
  CHECK(tpk_std_kernel(ctx, "matmul", &std_mm));
  TpkGraph *sg = matmul_gelu_graph(ctx, "std_mm_gelu", std_mm);
  TpkProgram *sp;
  CHECK(tpk_graph_compile(sg, &sp));
  assert_int_equal(driver_calls(sp), 2);
  CHECK(tpk_program_kernel(sp, "std_mm_gelu", &sk));
  run_matmul_gelu(sk, host, 37);
  tpk_program_destroy(sp);
  tpk_graph_destroy(sg);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_program_destroy(user);
  tpk_context_destroy(ctx);
}

static void log_to(void *user, const char *text) { tpk_str_puts(user, text); }

/* TPK_DUMP_IR=1: the graph before fusion and its driver and clusters go to
 * the context's log. */
static void test_dump_ir_goes_to_the_log(void **state) {
  (void)state;
  setenv("TPK_DUMP_IR", "1", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  unsetenv("TPK_DUMP_IR");
  TpkStr log = {0};
  tpk_context_set_log(ctx, log_to, &log);
  TpkGraph *g = linear_graph(ctx, "dumped");
  TpkProgram *p;
  CHECK(tpk_graph_compile(g, &p));
  assert_non_null(log.data);
  assert_contains(log.data, "// graph, before fusion\nmodule \"dumped\"\n");
  assert_contains(log.data, "func @dumped(");
  assert_contains(log.data, "// graph, fused: the driver and its clusters\n");
  assert_contains(log.data, "kernel @dumped.c0(");
  assert_contains(log.data, "{callee=\"dumped.c0\"}");
  tpk_str_free(&log);
  /* no TPK_DUMP_IR: nothing is logged */
  TpkContext *quiet;
  assert_int_equal(tpk_context_create(&quiet), TPK_OK);
  tpk_context_set_log(quiet, log_to, &log);
  TpkGraph *h = linear_graph(quiet, "quiet");
  TpkProgram *q;
  CHECK(tpk_graph_compile(h, &q));
  assert_null(log.data);
  tpk_program_destroy(q);
  tpk_graph_destroy(h);
  tpk_context_destroy(quiet);
  tpk_program_destroy(p);
  tpk_graph_destroy(g);
  tpk_context_destroy(ctx);
}

/* Intermediates whose lives do not meet share bytes (driver.c): d = 16x
 * takes b's bytes once c = 8x has read b, never a's, which e = a + d reads
 * last; a wrong life would overwrite a before that read. */
static const char *CHAIN =
    "module \"chain\"\n"
    "kernel @s.twice(%x: ref<f32[N]>, %y: out ref<f32[N]>) {\n"
    "  %0 = load %x {index=\":\"} : f32[N]\n"
    "  %1 = add %0, %0 : f32[N]\n"
    "  store %y, %1 {index=\":\", mode=\"set\"}\n"
    "}\n"
    "kernel @s.plus(%a: ref<f32[N]>, %b: ref<f32[N]>, %y: out ref<f32[N]>) {\n"
    "  %0 = load %a {index=\":\"} : f32[N]\n"
    "  %1 = load %b {index=\":\"} : f32[N]\n"
    "  %2 = add %0, %1 : f32[N]\n"
    "  store %y, %2 {index=\":\", mode=\"set\"}\n"
    "}\n"
    "func @s(%x: f32[N]) -> (f32[N]) {\n"
    "  %0 = call %x {callee=\"s.twice\"} : f32[N]\n"
    "  %1 = call %0 {callee=\"s.twice\"} : f32[N]\n"
    "  %2 = call %1 {callee=\"s.twice\"} : f32[N]\n"
    "  %3 = call %2 {callee=\"s.twice\"} : f32[N]\n"
    "  %4 = call %0, %3 {callee=\"s.plus\"} : f32[N]\n"
    "  return %4\n"
    "}\n";

static void test_intermediates_share_bytes_only_apart(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *host;
  TpkKernel *k;
  CHECK(tpk_context_create(&ctx));
  CHECK(tpk_device_open(ctx, "host", &host));
  TpkProgram *p = driver_program(ctx, CHAIN, NULL);
  CHECK(tpk_program_kernel(p, "s", &k));
  for (int64_t n = 1; n <= 1000; n *= 10) {
    TpkBuffer *x = buffer(host, 1, &n), *e = buffer(host, 1, &n);
    fill(x, (uint64_t)n);
    TpkLaunch L = {.args = (TpkBuffer *[]){x, e}};
    CHECK(tpk_kernel_launch(k, &L));
    const float *xv = tpk_buffer_data(x), *ev = tpk_buffer_data(e);
    for (int64_t i = 0; i < n; i++)
      if (ev[i] != 18 * xv[i]) fail_msg("n=%lld: e[%lld] = %g, want %g", (long long)n, (long long)i, ev[i], 18 * xv[i]);
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(e);
  }
  tpk_program_destroy(p);
  tpk_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_is_one_kernel),
      cmocka_unit_test(test_sizes_compile_once),
      cmocka_unit_test(test_sim_sums_the_calls),
      cmocka_unit_test(test_compiled_graph_serves_every_size),
      cmocka_unit_test(test_graph_kernel_is_not_called_in_a_stream_or_graph),
      cmocka_unit_test(test_dump_ir_goes_to_the_log),
      cmocka_unit_test(test_scalar_reshaped_in_a_cluster),
      cmocka_unit_test(test_custom_kernel_takes_its_epilogue),
      cmocka_unit_test(test_intermediates_share_bytes_only_apart),
  };
  return test_run_tests(tests);
}
