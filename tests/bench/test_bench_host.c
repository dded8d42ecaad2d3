/*
 * test_bench_host.c — the benchmarks' "one thread" means one thread.
 *
 * bench_host's rows say "one thread" (the matmul kernel in both tiers,
 * OpenBLAS sgemm, softmax, layernorm). Since the host got a thread pool, a
 * context runs a grid on every core unless told otherwise, and the rows
 * were measured on two. `bench_host --check-threads` runs the rows' own
 * setup untimed and measures what other threads of the process did while
 * the calls ran: nothing for the one-thread kernel and for sgemm, and
 * clearly something for its control, a context of two threads (so the
 * check can fail). The timed rows apply the same check and refuse to print
 * a row that ran on more threads.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_one_thread_is_one_thread(void **state) {
  (void)state;
  char prog[4096];
  const char *b = getenv("TPK_BUILD");
  snprintf(prog, sizeof prog, "%s/bench/bench_host", b && *b ? b : "build");
  TestRun r = test_run(&(TestRunOptions){.prog = prog}, ARGS("--check-threads"));
  if (r.status != 0) fail_msg("bench_host --check-threads failed:\n%s%s", r.out, r.err);
  assert_contains(r.out, "ok: one thread is one thread, and two are seen");
  test_run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_thread_is_one_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
