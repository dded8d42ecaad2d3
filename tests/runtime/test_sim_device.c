/*
 * The "sim:<chip>" devices through the public API: the same results as the
 * host, simulated figures and a trace per launch, the chip's HBM and VMEM
 * enforced, and clear errors for devices that do not exist.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpk.h"

static const char *MATMUL = "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [512, 128, 1024], BN in [512, 128, 1024], BK in [512]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

/* The programs run_matmul loaded: their launches' traces live as long. */
static TpkProgram *loaded[16];
static int nloaded;

static void destroy_loaded(void) {
  while (nloaded) tpk_program_destroy(loaded[--nloaded]);
}

/* c = a x b on `device`, with a and b filled the same way every time; the
 * result is copied to out (M*N floats), what the launch did to *ran. */
static TpkStatus run_matmul(TpkContext *ctx, const char *device, int64_t n, const TpkNamedInt *tunes, int ntunes,
                            float *out, TpkLaunchResult *ran) {
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  TpkStatus st = tpk_device_open(ctx, device, &dev);
  if (st) return st;
  assert_int_equal(tpk_program_load_source(ctx, "mm.tpk", MATMUL, strlen(MATMUL), &prog), TPK_OK);
  assert_true(nloaded < 16);
  loaded[nloaded++] = prog;
  assert_int_equal(tpk_program_kernel(prog, "matmul", &k), TPK_OK);
  int64_t shape[2] = {n, n};
  TpkBuffer *a, *b, *c;
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, shape, &a), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, shape, &b), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &c), TPK_OK);
  uint16_t *pa = tpk_buffer_data(a), *pb = tpk_buffer_data(b);
  for (int64_t i = 0; i < n * n; i++) { /* small exact bf16 values */
    float fa = (float)((i * 7) % 11) * 0.25f - 1.0f, fb = (float)((i * 5) % 13) * 0.125f - 0.75f;
    uint32_t ua, ub;
    memcpy(&ua, &fa, 4);
    memcpy(&ub, &fb, 4);
    pa[i] = (uint16_t)(ua >> 16);
    pb[i] = (uint16_t)(ub >> 16);
  }
  TpkBuffer *args[] = {a, b, c};
  TpkLaunch L = {.args = args, .tunes = tunes, .ntunes = ntunes, .result = ran};
  st = tpk_kernel_launch(k, &L);
  if (st == TPK_OK && out) memcpy(out, tpk_buffer_data(c), (size_t)(n * n) * sizeof(float));
  tpk_buffer_destroy(a);
  tpk_buffer_destroy(b);
  tpk_buffer_destroy(c);
  return st;
}

static void test_same_results_as_host(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  enum { N = 700 }; /* ragged against every block size */
  static float host[N * N], sim[N * N];
  assert_int_equal(run_matmul(ctx, "host", N, NULL, 0, host, NULL), TPK_OK);
  const char *chips[] = {"sim:v5e", "sim:v5p", "sim:v6e"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(chips); i++) {
    TpkLaunchResult ran;
    assert_int_equal(run_matmul(ctx, chips[i], N, NULL, 0, sim, &ran), TPK_OK);
    assert_memory_equal(host, sim, sizeof host); /* the same code computes both */
    assert_true(ran.simulated);
    TpkSimStats st = ran.sim;
    assert_string_equal(st.chip, chips[i] + 4);
    assert_true(st.seconds > 0 && st.seconds >= st.roofline_seconds);
    /* the chip computes whole blocks: 700 pads to two 512-blocks a side */
    assert_true(fabs(st.matmul_flops - 2.0 * 1024 * 1024 * 1024) < 1);
  }
  destroy_loaded();
  tpk_context_destroy(ctx);
}

static void test_stats_and_trace(void **state) {
  (void)state;
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  TpkLaunchResult ran;
  /* 1024-blocks: 1024 FLOP/byte, compute bound on v5e (ridge ~240) */
  TpkNamedInt large[] = {{"BM", 1024}, {"BN", 1024}};
  assert_int_equal(run_matmul(ctx, "sim:v5e", 2048, large, 2, NULL, &ran), TPK_OK);
  assert_true(ran.simulated);
  TpkSimStats st = ran.sim;
  double peak_fraction = st.matmul_flops / st.seconds / st.peak_flops;
  assert_true(peak_fraction > 0.8 && peak_fraction <= 1.0);
  assert_false(st.memory_bound);
  char path[] = "/tmp/tpk-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(tpk_trace_write(ran.trace, NULL, path), TPK_OK);
  char *json = test_read_file(path, NULL);
  assert_non_null(strstr(json, "\"traceEvents\""));
  assert_non_null(strstr(json, "matmul on v5e"));
  free(json);
  remove(path);
  /* smaller blocks reload more: the same kernel becomes memory bound */
  TpkNamedInt small[] = {{"BM", 128}, {"BN", 128}};
  assert_int_equal(run_matmul(ctx, "sim:v5e", 2048, small, 2, NULL, &ran), TPK_OK);
  TpkSimStats st2 = ran.sim;
  assert_true(st2.hbm_bytes > 3 * st.hbm_bytes);
  assert_true(st2.seconds > st.seconds);
  /* a host launch has no simulated figures */
  assert_int_equal(run_matmul(ctx, "host", 64, NULL, 0, NULL, &ran), TPK_OK);
  assert_false(ran.simulated);
  assert_null(ran.trace);
  assert_true(ran.sim.seconds == 0);
  destroy_loaded();
  tpk_context_destroy(ctx);
}

static void test_devices_and_limits(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev, *host;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v9", &dev), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "device 'sim:v9': unknown chip 'v9'"));
  assert_int_equal(tpk_device_open(ctx, "sim:v5p-2x2x1", &dev), TPK_ERR_UNSUPPORTED);
  assert_non_null(strstr(tpk_last_error(), "simulating 4 chips over ICI is not supported yet"));
  /* HBM: v5e has 16 GiB */
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &dev), TPK_OK);
  TpkBuffer *big;
  int64_t too_big[2] = {70000, 70000}; /* 18.3 GiB of f32 */
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, too_big, &big), TPK_ERR_NOMEM);
  assert_non_null(strstr(tpk_last_error(), "sim:v5e: out of HBM"));
  /* one launch, one device */
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  TpkProgram *prog;
  TpkKernel *k;
  const char *src = "kernel add(x: f32[N], y: f32[N]) -> (o: f32[N]) { o = x + y; }";
  assert_int_equal(tpk_program_load_source(ctx, "add.tpk", src, strlen(src), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "add", &k), TPK_OK);
  int64_t n = 8;
  TpkBuffer *x, *y, *o;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 1, &n, &y), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &o), TPK_OK);
  TpkBuffer *args[] = {x, y, o};
  assert_int_equal(tpk_kernel_launch(k, &(TpkLaunch){.args = args}), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'add': 'y' is on host but 'x' is on sim:v5e; a launch runs on one device");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_buffer_destroy(o);
  /* VMEM: blocks that fit the host's 128 MiB but not v4's 16 MiB */
  assert_int_equal(tpk_device_open(ctx, "sim:v4", &dev), TPK_OK);
  const char *wide = "kernel scale(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [2048] {\n"
                     "  for i in tiles(M, BM) { y[i, :] = x[i, :] * 2.0; }\n"
                     "}\n";
  tpk_program_destroy(prog);
  assert_int_equal(tpk_program_load_source(ctx, "wide.tpk", wide, strlen(wide), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "scale", &k), TPK_OK);
  int64_t shape[2] = {4096, 4096};
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &y), TPK_OK);
  TpkBuffer *args2[] = {x, y};
  assert_int_equal(tpk_kernel_launch(k, &(TpkLaunch){.args = args2}), TPK_ERR_NOMEM);
  assert_non_null(strstr(tpk_last_error(), "needs 32.0 MiB of VMEM for one grid instance but sim:v4 has 16.0 MiB"));
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

/* tpk run checks that every buffer fits the chip's HBM before it allocates
 * and fills any (before: it filled the 16 GiB input for minutes, then found
 * that the output did not fit). */
static void test_run_checks_hbm_first(void **state) {
  (void)state;
  TestRun run = RUN("run", "std:softmax.tpk", "-k", "softmax", "--shape", "M=65536,N=65536", "--device", "sim:v5e");
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "sim:v5e: out of memory: the kernel's buffers need 32.0 GiB, the device has 16.0 GiB");
  test_run_free(&run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_checks_hbm_first),
      cmocka_unit_test(test_same_results_as_host),
      cmocka_unit_test(test_stats_and_trace),
      cmocka_unit_test(test_devices_and_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
