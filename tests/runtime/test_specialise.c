/*
 * test_specialise.c — a program is checked once; every specialisation binds
 * its IR (lower/bind.c). Launches at many sizes and tunables, tuning and
 * simulated timing never go back to the text; outputs whose shapes use a
 * tunable are sized with the launch's value; what only the values can show
 * is reported at the .tpk line.
 *
 * Linked with -Wl,--wrap=tpk_parse (Makefile): every parse of .tpk text the
 * library does passes through __wrap_tpk_parse and is counted.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lower/lower.h"
#include "runtime/internal.h"
#include "runtime/tune.h"
#include "sim/sim.h"
#include "tpk.h"

static int parses;

TpkStatus __real_tpk_parse(const TpkSource *src, TpkParsed *out, TpkDiags *diags);
TpkStatus __wrap_tpk_parse(const TpkSource *src, TpkParsed *out, TpkDiags *diags) {
  parses++;
  return __real_tpk_parse(src, out, diags);
}

static const char *SCALE =
    "kernel scale(x: f32[M, N], a: f32) -> (y: f32[M, N])\n"
    "  tune BM in [8, 16, 32], BN in [64, 128]\n"
    "{\n"
    "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
    "    y[i, j] = x[i, j] * a + (BM as f32);\n"
    "  }\n"
    "}\n";

static TpkBuffer *buffer(TpkDevice *dev, TpkDType dt, int64_t rows, int64_t cols) {
  TpkBuffer *b;
  if (tpk_buffer_create(dev, dt, 2, (int64_t[]){rows, cols}, &b) != TPK_OK) fail_msg("%s", tpk_last_error());
  return b;
}

/* 20 launches over sizes and tunables, on the host and a simulated chip,
 * and a tuning search: the text is parsed once, when it is loaded. */
static void test_checked_once(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *host, *sim;
  TpkProgram *prog;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &sim), TPK_OK);
  parses = 0;
  assert_int_equal(tpk_program_load_source(ctx, "scale.tpk", SCALE, strlen(SCALE), &prog), TPK_OK);
  assert_int_equal(parses, 1);
  assert_int_equal(tpk_program_kernel(prog, "scale", &k), TPK_OK);
  static const int64_t BM[] = {8, 16, 32}, BN[] = {64, 128};
  for (int i = 0; i < 20; i++) {
    int64_t rows = 5 + 7 * i, cols = 30 + 11 * i;
    TpkDevice *dev = i % 4 == 3 ? sim : host;
    TpkBuffer *x = buffer(dev, TPK_F32, rows, cols), *y = buffer(dev, TPK_F32, rows, cols);
    float *xd = tpk_buffer_data(x);
    for (int64_t e = 0; e < rows * cols; e++) xd[e] = (float)(e % 13) - 6.0f;
    TpkNamedInt tunes[] = {{"BM", BM[i % 3]}, {"BN", BN[i % 2]}};
    TpkBuffer *args[] = {x, NULL, y};
    double scalars[] = {0, 0.5, 0};
    TpkLaunchResult ran;
    TpkLaunch L = {.args = args, .scalars = scalars, .tunes = tunes, .ntunes = i % 5 == 4 ? 0 : 2, .result = &ran};
    if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("launch %d: %s", i, tpk_last_error());
    /* no tunes named: the declared default on the host, the search's pick on the chip */
    long long bm = L.ntunes ? BM[i % 3] : 8;
    if (!L.ntunes && dev == sim) assert_int_equal(sscanf(ran.tunes, "BM=%lld", &bm), 1);
    const float *yd = tpk_buffer_data(y);
    for (int64_t e = 0; e < rows * cols; e++)
      if (yd[e] != xd[e] * 0.5f + (float)bm) fail_msg("launch %d, element %lld: %g", i, (long long)e, yd[e]);
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
  }
  /* tuning on the chip binds the same IR for every configuration */
  TpkBinding syms[] = {{"M", 512}, {"N", 512}};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 2};
  TpkTuneReport r;
  TpkError err = {0};
  if (tpk_tune_search(prog, "scale", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 6);
  tpk_tune_report_free(&r);
  assert_int_equal(parses, 1);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

static const char *GROUPS =
    "kernel rows(x: f32[N]) -> (y: f32[G, N])\n"
    "  tune G in [4, 2]\n"
    "{\n"
    "  for g in 0..G { y[g, :] = x * ((g + 1) as f32); }\n"
    "}\n";

/* `-> (y: f32[G, N])`: y is G rows for the G the launch uses. */
static void test_outputs_sized_by_tunables(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "rows.tpk", GROUPS, "rows");
  /* G is a tunable, not a shape symbol */
  assert_int_equal(tpk_kernel_symbol_count(k), 1);
  assert_string_equal(tpk_kernel_symbol_name(k, 0), "N");
  int64_t shape[2];
  assert_int_equal(tpk_kernel_param_shape(k, 1, (TpkNamedInt[]){{"N", 3}, {"G", 2}}, 2, shape), TPK_OK);
  assert_int_equal(shape[0], 2);
  assert_int_equal(shape[1], 3);
  assert_int_equal(tpk_kernel_param_shape(k, 1, (TpkNamedInt[]){{"N", 3}}, 1, shape), TPK_OK);
  assert_int_equal(shape[0], 4); /* the declared default */

  TpkBuffer *x;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){3}, &x), TPK_OK);
  float *xd = tpk_buffer_data(x);
  xd[0] = 1, xd[1] = 2, xd[2] = 3;
  /* G=2 named: two rows */
  TpkBuffer *y2 = buffer(dev, TPK_F32, 2, 3);
  TpkLaunchResult ran;
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y2}, .tunes = (TpkNamedInt[]){{"G", 2}}, .ntunes = 1, .result = &ran};
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
  const float *yd = tpk_buffer_data(y2);
  for (int e = 0; e < 6; e++) assert_true(yd[e] == xd[e % 3] * (float)(e / 3 + 1));
  assert_string_equal(ran.tunes, "G=2");
  assert_string_equal(ran.tunes_from, "given");
  /* no tunes named: the output's shape says G=2 */
  memset(tpk_buffer_data(y2), 0, 24);
  L.ntunes = 0;
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
  assert_true(yd[5] == 6.0f);
  assert_string_equal(ran.tunes, "G=2");
  /* a shape that no declared G gives, and a G that disagrees with the shape */
  TpkBuffer *y3 = buffer(dev, TPK_F32, 3, 3);
  L.args = (TpkBuffer *[]){x, y3};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'rows': tunable G is 3 from 'y' (dimension 0), but it is one of [4, 2]");
  L.args = (TpkBuffer *[]){x, y2};
  L.tunes = (TpkNamedInt[]){{"G", 4}};
  L.ntunes = 1;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(),
                      "kernel 'rows': tunable G is 4 from the launch's tunes but 2 from 'y' (dimension 0)");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y2);
  tpk_buffer_destroy(y3);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);

  /* the command line sizes y with the tunable it is given */
  char dir[] = "/tmp/tpk-rows-XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/rows.tpk", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(GROUPS, f);
  fclose(f);
  TestRun run = RUN("run", path, "--shape", "N=3", "--tune", "G=2", "--check");
  if (run.status != 0) fail_msg("%s%s", run.out, run.err);
  assert_contains(run.out, "f32[2, 3]");
  assert_contains(run.out, "check        ok");
  test_run_free(&run);
  run = RUN("run", path, "--shape", "N=3", "--check");
  assert_int_equal(run.status, 0);
  assert_contains(run.out, "f32[4, 3]");
  test_run_free(&run);
  remove(path);
  rmdir(dir);
}

/* What only the sizes show is reported where the .tpk text says it. */
static void test_binding_errors_point_at_the_line(void **state) {
  (void)state;
  static const char *SLICE =
      "kernel f(x: f32[M, N]) -> (o: f32[M, 64]) tune BM in [8] {\n"
      "  for i in tiles(M, BM) {\n"
      "    o[i, :] = x[i, 64..128];\n"
      "  }\n"
      "}\n";
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "oob.tpk", SLICE, "f");
  TpkBuffer *x = buffer(dev, TPK_F32, 8, 100), *o = buffer(dev, TPK_F32, 8, 64);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, o}};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'f' with M=8, N=100, BM=8:\n"
                                        "oob.tpk:3:15: error: slice 64..128 is out of bounds for dimension 1 of size 100\n"
                                        "       o[i, :] = x[i, 64..128];\n"
                                        "                 ^\n");
  tpk_buffer_destroy(x);
  /* with room, the same kernel runs */
  x = buffer(dev, TPK_F32, 8, 128);
  L.args = (TpkBuffer *[]){x, o};
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(o);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);

  /* a size that overflows once bound, at the op that has it */
  static const char *SQUARE =
      "kernel sq(x: f32[N]) -> (y: f32[N]) tune B in [8] {\n"
      "  scratch t: f32[N * N * N];\n"
      "  y = x;\n"
      "}\n";
  TestCompile c;
  test_compile(&c, "sq.tpk", SQUARE, NULL);
  assert_non_null(c.module);
  TpkModule *m = tpk_module_new("sq");
  TpkFunc *g;
  TpkError err = {0};
  assert_int_equal(tpk_bind(m, c.module->funcs[0], (TpkBinding[]){{"N", (int64_t)1 << 30}}, 1, &g, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "the size N*N*N of a value overflows or divides by zero with these sizes and tunables");
  assert_int_equal(err.line, 2);
  tpk_module_free(m);
  /* names it does not have, values it does not declare */
  m = tpk_module_new("sq");
  assert_int_equal(tpk_bind(m, c.module->funcs[0], (TpkBinding[]){{"Q", 3}}, 1, &g, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'sq' has no shape symbol or tunable 'Q'");
  assert_int_equal(tpk_bind(m, c.module->funcs[0], (TpkBinding[]){{"B", 3}}, 1, &g, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'sq': B=3 is not one of the declared values [8]");
  assert_int_equal(tpk_bind(m, c.module->funcs[0], (TpkBinding[]){{"N", -1}}, 1, &g, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'sq': shape symbol N is bound to -1; sizes cannot be negative");
  tpk_module_free(m);
  test_compile_free(&c);
}

/* The simulator times the IR the program holds: no text in its interface. */
static void test_sim_times_bound_ir(void **state) {
  (void)state;
  TestCompile c;
  test_compile(&c, "scale.tpk", SCALE, NULL);
  assert_non_null(c.module);
  const TpkFunc *f = c.module->funcs[0];
  TpkSimReport small, big;
  TpkError err = {0};
  TpkBinding a[] = {{"M", 1024}, {"N", 1024}, {"BM", 8}};
  TpkBinding b[] = {{"M", 2048}, {"N", 1024}, {"BM", 8}};
  if (tpk_sim_time_kernel(f, a, 3, tpk_sim_chip_find("v5e"), &small, &err) != TPK_OK) fail_msg("%s", err.message);
  if (tpk_sim_time_kernel(f, b, 3, tpk_sim_chip_find("v5e"), &big, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_true(big.seconds > 1.5 * small.seconds);
  /* the program's IR is left as it was: still symbolic */
  TpkStr s = {0};
  tpk_ir_print_func(&s, f);
  assert_contains(s.data, "tune{BM in [8, 16, 32], BN in [64, 128]}");
  assert_contains(s.data, "tile<BM>");
  tpk_str_free(&s);
  test_compile_free(&c);
}

static const char *TWINS =
    "kernel plus(x: f32[N]) -> (y: f32[N]) tune B in [4, 8] { for i in tiles(N, B) { y[i] = x[i] + (B as f32); } }\n"
    "kernel times(x: f32[N]) -> (y: f32[N]) tune B in [4, 8] { for i in tiles(N, B) { y[i] = x[i] * (B as f32); } }\n";

/* A specialisation is the kernel's, on its device, at its sizes and
 * tunables: two kernels of one program with the same sizes and tunable
 * values, and one kernel on two devices or at two settings, each run their
 * own code (launches find it by comparing those, not by a printed key). */
static void test_specialisations_are_per_kernel_device_sizes_and_tunes(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *host, *sim;
  TpkKernel *plus = test_kernel(&ctx, &host, "host", "twins.tpk", TWINS, "plus"), *times;
  assert_int_equal(tpk_program_kernel(tpk_kernel_program(plus), "times", &times), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &sim), TPK_OK);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  for (int round = 0; round < 2; round++)
    for (int c = 0; c < 8; c++) {
      TpkKernel *k = c & 1 ? times : plus;
      TpkDevice *dev = c & 2 ? sim : host;
      int64_t bsize = c & 4 ? 8 : 4, n = round ? 8 : 6;
      TpkBuffer *bx, *by;
      assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, &n, NULL, x, NULL, NULL, &bx), TPK_OK);
      assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, &n, NULL, y, NULL, NULL, &by), TPK_OK);
      TpkLaunchResult r;
      TpkLaunch L = {.args = (TpkBuffer *[]){bx, by}, .tunes = (TpkNamedInt[]){{"B", bsize}}, .ntunes = 1, .result = &r};
      if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
      for (int e = 0; e < n; e++)
        if (y[e] != (c & 1 ? x[e] * (float)bsize : x[e] + (float)bsize)) fail_msg("round %d, case %d, element %d: %g", round, c, e, y[e]);
      assert_string_equal(r.tunes, c & 4 ? "B=8" : "B=4");
      assert_int_equal(r.simulated, (c & 2) != 0);
      if (r.simulated) assert_true(r.sim.seconds > 0 && r.trace); /* the chip's schedule, not the host's code alone */
      tpk_buffer_destroy(bx);
      tpk_buffer_destroy(by);
    }
  tpk_program_destroy(tpk_kernel_program(plus));
  tpk_context_destroy(ctx);
}

static const char *SIGNATURE =
    "kernel heads(x: f32[B, H, 2 * 64], scale: f32) -> (y: bf16[B * H, 128], z: f32[G])\n"
    "  tune G in [4, 2, 8], BM in [16]\n"
    "{\n"
    "  for g in 0..G { z[g] = scale; }\n"
    "  for b in 0..B { for h in 0..H { y[b * H + h, :] = (x[b, h, :] * scale) as bf16; } }\n"
    "}\n";

/* What a binding layer (Python) reads of a signature: each dimension as
 * text, printed from the IR, and the tunables with their choices. */
static void test_signature_as_text(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "heads.tpk", SIGNATURE, "heads");
  assert_int_equal(tpk_kernel_param_count(k), 4);
  assert_string_equal(tpk_kernel_param_dim(k, 0, 0), "B");
  assert_string_equal(tpk_kernel_param_dim(k, 0, 2), "128"); /* folded */
  assert_null(tpk_kernel_param_dim(k, 0, 3));
  assert_null(tpk_kernel_param_dim(k, 1, 0)); /* a scalar has none */
  assert_string_equal(tpk_kernel_param_dim(k, 2, 0), "B*H");
  assert_string_equal(tpk_kernel_param_dim(k, 3, 0), "G");
  assert_null(tpk_kernel_param_dim(k, 4, 0));
  assert_int_equal(tpk_kernel_tunable_count(k), 2);
  assert_string_equal(tpk_kernel_tunable_name(k, 0), "G");
  assert_int_equal(tpk_kernel_tunable_default(k, 0), 4);
  const int64_t *choices;
  assert_int_equal(tpk_kernel_tunable_choices(k, 0, &choices), 3);
  assert_true(choices[0] == 4 && choices[1] == 2 && choices[2] == 8);
  assert_string_equal(tpk_kernel_tunable_name(k, 1), "BM");
  assert_int_equal(tpk_kernel_tunable_choices(k, 1, &choices), 1);
  assert_int_equal(choices[0], 16);
  assert_null(tpk_kernel_tunable_name(k, 2));
  assert_int_equal(tpk_kernel_tunable_choices(k, 2, &choices), 0);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
}

/* tpk_dtype_convert rounds as kernels do: f32 to bf16 to nearest even. */
static void test_dtype_convert(void **state) {
  (void)state;
  /* 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: even is 1;
   * 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is the latter */
  float in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f};
  uint16_t bf[3];
  float back[3];
  tpk_dtype_convert(TPK_F32, in, TPK_BF16, bf, 3);
  assert_int_equal(bf[0], 0x3f80);
  assert_int_equal(bf[1], 0x3f82);
  assert_int_equal(bf[2], 0xc020);
  tpk_dtype_convert(TPK_BF16, bf, TPK_F32, back, 3);
  assert_true(back[0] == 1.0f && back[1] == 1.0f + 0x1p-6f && back[2] == -2.5f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checked_once),
      cmocka_unit_test(test_outputs_sized_by_tunables),
      cmocka_unit_test(test_binding_errors_point_at_the_line),
      cmocka_unit_test(test_sim_times_bound_ir),
      cmocka_unit_test(test_specialisations_are_per_kernel_device_sizes_and_tunes),
      cmocka_unit_test(test_signature_as_text),
      cmocka_unit_test(test_dtype_convert),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
