/*
 * test_replay.c — `tpk replay` and the op-stream format (cli/opstream.c):
 * the recorded streams of bench/streams run in every eager mode and agree;
 * a stream at other sizes; streams with errors (the format's, an op tpk
 * does not have, shapes that do not fit) fail naming the line or the op;
 * usage errors. Runs build/tpk (or $TPK_BUILD/tpk) from the repository
 * root, with its cache in a temporary folder.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/tpk-test-replay-XXXXXX";

/* A stream file in the temporary folder; its path. */
static const char *stream_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(tmpdir)) return -1;
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", tmpdir);
  setenv("TPK_CACHE_DIR", cache, 1);
  setenv("TPK_TIER", "tcc", 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_help_and_usage(void **state) {
  (void)state;
  TestRun a = RUN("help", "replay"), b = RUN("replay", "--help");
  assert_int_equal(a.status, 0);
  assert_string_equal(a.out, b.out);
  assert_contains(a.out, "Usage: tpk replay FILE");
  test_run_free(&a);
  test_run_free(&b);
  test_run_expect(RUN("replay"), 2, NULL, "expects a stream file");
  test_run_expect(RUN("replay", "bench/streams/mlp_train.ops", "--mode", "eager"), 2, NULL,
         "--mode expects debug, strict, fused, a list of them or all, got 'eager'");
  test_run_expect(RUN("replay", "bench/streams/mlp_train.ops", "--sizes", "batch=3"), 2, NULL, "has no size symbol 'batch'");
  test_run_expect(RUN("replay", "bench/streams/mlp_train.ops", "--steps", "0"), 2, NULL, "--steps expects a number from 1");
}

/* The MLP training step (forward, backward, AdamW) in the three modes,
 * the modes' outputs compared by the command. */
static void test_mlp_step_in_every_mode(void **state) {
  (void)state;
  TestRun r = RUN("replay", "bench/streams/mlp_train.ops", "--mode", "all", "--steps", "2");
  if (r.status != 0) fail_msg("exit %d; stderr:\n%s\nstdout:\n%s", r.status, r.err, r.out);
  assert_contains(r.out, "bench/streams/mlp_train.ops: 124 ops, 21 inputs, 20 outputs; sizes s0=256 s1=10 s2=64");
  assert_contains(r.out, "strict matches debug");
  assert_contains(r.out, "fused matches debug");
  assert_contains(r.out, "(1 window)");
  test_run_free(&r);
}

/* Another batch size than the recording's, on a simulated chip. */
static void test_other_sizes_on_a_chip(void **state) {
  (void)state;
  TestRun r = RUN("replay", "bench/streams/mlp_train.ops", "--sizes", "s2=37", "--device", "sim:v5e", "--steps", "1");
  if (r.status != 0) fail_msg("exit %d; stderr:\n%s\nstdout:\n%s", r.status, r.err, r.out);
  assert_contains(r.out, "sizes s0=256 s1=10 s2=37");
  assert_contains(r.out, "fused matches strict");
  assert_contains(r.out, "simulated");
  test_run_free(&r);
}

/* The transformer block's forward and backward (causal SDPA through the
 * standard flash-attention kernels) at a sequence length that is no
 * multiple of any block. */
static void test_block_step_at_a_ragged_length(void **state) {
  (void)state;
  TestRun r = RUN("replay", "bench/streams/block_train.ops", "--sizes", "s4=37", "--mode", "debug,fused", "--steps", "1");
  if (r.status != 0) fail_msg("exit %d; stderr:\n%s\nstdout:\n%s", r.status, r.err, r.out);
  assert_contains(r.out, "sizes s0=128 s1=384 s2=256 s3=4 s4=37");
  assert_contains(r.out, "fused matches debug");
  test_run_free(&r);
}

static void test_stream_errors(void **state) {
  (void)state;
  test_run_expect(RUN("replay", "no/such.ops"), 1, NULL, "no/such.ops: cannot open");
  const char *bad = stream_file("bad.ops", "sizes s0=4\ninput %0 f32[s0] randn\n%1 = exp(%0\noutput %1\n");
  test_run_expect(RUN("replay", bad), 1, NULL, "bad.ops:3: expected ')'");
  bad = stream_file("sym.ops", "sizes s0=4\ninput %0 f32[s9] randn\n");
  test_run_expect(RUN("replay", bad), 1, NULL, "sym.ops:2: 's9' is not a size symbol of the `sizes` line");
  /* an op tpk does not have: named, with its line */
  bad = stream_file("op.ops", "sizes s0=4\ninput %0 f32[s0] randn\n%1 = fft_fft(%0)\noutput %1\n");
  test_run_expect(RUN("replay", bad, "--mode", "strict"), 1, NULL, "(the op at line 3)");
  /* shapes that do not broadcast: refused when the op is submitted, in fused mode too */
  bad = stream_file("shape.ops", "sizes s0=4 s1=3\ninput %0 f32[s0] randn\ninput %1 f32[s1] randn\n"
                                 "%2 = add.Tensor(%0, %1)\noutput %2\n");
  test_run_expect(RUN("replay", bad, "--mode", "fused"), 1, NULL, "(the op at line 4)");
}

/* A value used before it is made is the format's error; a small stream
 * with integer ops, a gather and reductions agrees across the modes. */
static void test_small_stream_agrees(void **state) {
  (void)state;
  const char *ok = stream_file("small.ops", "# elementwise, integer and reduction ops\n"
                                            "sizes s0=5 s1=7\n"
                                            "input %0 f32[s0,s1] randn\n"
                                            "input %1 i64[s0] randint(0,7)\n"
                                            "%2 = exp(%0)\n"
                                            "%3 = sum.dim_IntList(%2, [0], True)\n"
                                            "%4 = div.Tensor(%2, %3)\n"
                                            "%5 = gather(%4, 1, %6)  # uses a value made below: refused\n"
                                            "output %4\n");
  test_run_expect(RUN("replay", ok, "--mode", "all"), 1, NULL, "small.ops:8: %6 is used before it is made");
  ok = stream_file("small2.ops", "sizes s0=5 s1=7\n"
                                 "input %0 f32[s0,s1] randn\n"
                                 "input %1 i64[s0,1] randint(0,7)\n"
                                 "%2 = exp(%0)\n"
                                 "%3 = sum.dim_IntList(%2, [0], True)\n"
                                 "%4 = div.Tensor(%2, %3)\n"
                                 "%5 = gather(%4, 1, %1)\n"
                                 "%6 = mul.Tensor(%1, 3)\n"
                                 "%7 = amax(%0, [1])\n"
                                 "output %5, %6, %7, %4\n");
  test_run_expect(RUN("replay", ok, "--mode", "all"), 0, "fused matches debug", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_and_usage),         cmocka_unit_test(test_mlp_step_in_every_mode),
      cmocka_unit_test(test_other_sizes_on_a_chip),  cmocka_unit_test(test_block_step_at_a_ragged_length),
      cmocka_unit_test(test_stream_errors),
      cmocka_unit_test(test_small_stream_agrees),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
