/*
 * The host backend against the reference interpreter: every kernel of the
 * corpus, at several shapes (ragged, tiny, aligned) and tunable choices,
 * runs through the public runtime API and matches the interpreter run on
 * the same inputs, or both fail with the same kind of error. Also: tiers
 * agree bit for bit, queues keep order, and bad calls give clear errors.
 */
#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host/host.h"
#include "base/refnum.h"
#include "host/prims.h"
#include "interp/interp.h"
#include "runtime/internal.h"
#include "tpk.h"

static void test_corpus_matches_interpreter(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  char *names[128];
  int n = test_list_tpk("tests/corpus", names, 128);
  TestTally tally = {0};
  static const int64_t SIZES[] = {1, 37, 130}; /* tiny, ragged, past one 128-block */
  for (int f = 0; f < n; f++) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/corpus/%s", names[f]);
    char *text = test_read_file(test_path(rel), NULL);
    assert_non_null(text);
    TpkProgram *prog;
    if (tpk_program_load_source(ctx, names[f], text, strlen(text), &prog) != TPK_OK)
      fail_msg("%s: %s", names[f], tpk_last_error());
    for (int ki = 0; ki < tpk_program_kernel_count(prog); ki++) {
      const char *kname = tpk_program_kernel_name(prog, ki);
      /* Every symbol takes the size, so rank-3 and rank-4 problems grow
       * as its cube or fourth power: keep those small enough for the
       * interpreter (48 is still ragged against every block size). */
      TpkKernel *k;
      assert_int_equal(tpk_program_kernel(prog, kname, &k), TPK_OK);
      int max_rank = 0;
      for (int i = 0; i < tpk_kernel_param_count(k); i++)
        if (tpk_kernel_param_rank(k, i) > max_rank) max_rank = tpk_kernel_param_rank(k, i);
      for (size_t s = 0; s < TPK_ARRAY_LEN(SIZES); s++) {
        int64_t size = max_rank >= 3 && SIZES[s] > 48 ? 48 : SIZES[s];
        test_launch_vs_interpreter(dev, prog, names[f], text, kname, size, NULL, 0, &tally);
      }
    }
    tpk_program_destroy(prog);
    free(text);
    free(names[f]);
  }
  fprintf(stderr, "host vs interpreter: %d launches matched (%d outputs), %d failed alike\n", tally.passed,
          tally.compared, tally.both_failed);
  assert_true(tally.passed >= 150);
  tpk_context_destroy(ctx);
}

/* Tunables change blocks, not results. */
static void test_tunables_do_not_change_results(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  char *text = test_read_file(test_path("tests/corpus/matmul.tpk"), NULL);
  TpkProgram *prog;
  assert_int_equal(tpk_program_load_source(ctx, "matmul.tpk", text, strlen(text), &prog), TPK_OK);
  TestTally tally = {0};
  TpkBinding t1[] = {{"BM", 256}, {"BN", 256}, {"BK", 512}};
  test_launch_vs_interpreter(dev, prog, "matmul.tpk", text, "matmul", 300, t1, 3, &tally);
  test_launch_vs_interpreter(dev, prog, "matmul.tpk", text, "matmul", 300, NULL, 0, &tally);
  assert_int_equal(tally.passed, 2);
  tpk_program_destroy(prog);
  free(text);
  tpk_context_destroy(ctx);
}

/* The environment is read when a context is made: a value that does not
 * parse is an error naming the variable, not a default (TPK_HOST_VMEM with
 * a K suffix past int64 overflowed a signed shift). */
static void test_environment_that_does_not_parse(void **state) {
  (void)state;
  static const struct {
    const char *name, *value, *message;
  } BAD[] = {
      {"TPK_HOST_VMEM", "garbage", "TPK_HOST_VMEM=garbage: expected a size in bytes, such as 134217728, 512K, 128M or 1G"},
      {"TPK_HOST_VMEM", "18014398509481985K",
       "TPK_HOST_VMEM=18014398509481985K: expected a size in bytes, such as 134217728, 512K, 128M or 1G"},
      {"TPK_TIER", "garbage", "TPK_TIER=garbage: expected tcc, cc or auto"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
    setenv(BAD[i].name, BAD[i].value, 1);
    TpkContext *ctx = NULL;
    assert_int_equal(tpk_context_create(&ctx), TPK_ERR_INVALID);
    assert_null(ctx);
    assert_string_equal(tpk_last_error(), BAD[i].message);
    unsetenv(BAD[i].name);
  }
  setenv("TPK_HOST_VMEM", "64M", 1);
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  tpk_context_destroy(ctx);
  unsetenv("TPK_HOST_VMEM");
}

/* Whole-array statements at square sizes spanning several row blocks (the
 * host tiles 256 KiB blocks: 300 rows of 300 f32 are two): a vector
 * broadcast over columns must not be taken for rows (M == N made it look
 * like one), and every kernel of whole_array.tpk matches the interpreter. */
static void test_whole_arrays_at_square_sizes(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  char *text = test_read_file(test_path("tests/corpus/whole_array.tpk"), NULL);
  assert_non_null(text);
  TpkProgram *prog;
  assert_int_equal(tpk_program_load_source(ctx, "whole_array.tpk", text, strlen(text), &prog), TPK_OK);
  TestTally tally = {0};
  for (int i = 0; i < tpk_program_kernel_count(prog); i++)
    test_launch_vs_interpreter(dev, prog, "whole_array.tpk", text, tpk_program_kernel_name(prog, i), 300, NULL, 0, &tally);
  assert_int_equal(tally.passed, tpk_program_kernel_count(prog));
  tpk_program_destroy(prog);
  free(text);
  tpk_context_destroy(ctx);
}

static const char *ADD = "kernel add(x: f32[N], y: f32[N]) -> (o: f32[N]) { o = x + y; }\n"
                         "kernel scale(inout x: f32[N], a: f32) -> () { x = x * a; }\n";

/* A file's diagnostics, however long, are the error's message whole (the
 * Python package's TpkError carries them as `tpk check` prints them); a
 * failure on another thread keeps its own. */
static void *fail_briefly(void *unused) {
  (void)unused;
  TpkContext *ctx;
  TpkDevice *dev;
  if (tpk_context_create(&ctx) != TPK_OK) return NULL;
  bool mine = tpk_device_open(ctx, "tpu9", &dev) == TPK_ERR_INVALID && strstr(tpk_last_error(), "unknown device 'tpu9'");
  tpk_context_destroy(ctx);
  return mine ? (void *)1 : NULL;
}

static void test_long_errors_are_whole(void **state) {
  (void)state;
  TpkStr text = {0};
  for (int i = 0; i < 60; i++)
    tpk_str_printf(&text, "kernel k%d(x: f32[N]) -> (y: f32[N]) { y = x + a_name_that_is_not_defined_%d; }\n", i, i);
  TpkModule *m;
  TpkStr want = {0};
  assert_int_not_equal(tpk_runtime_check("many.tpk", text.data, text.len, &m, &want), TPK_OK);
  assert_true(want.len > 8192);
  TpkContext *ctx;
  TpkProgram *prog;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "many.tpk", text.data, text.len, &prog), TPK_ERR_PARSE);
  pthread_t other;
  void *other_ok = NULL;
  assert_int_equal(pthread_create(&other, NULL, fail_briefly, NULL), 0);
  assert_int_equal(pthread_join(other, &other_ok), 0);
  assert_non_null(other_ok);
  assert_string_equal(tpk_last_error(), want.data);
  /* a short message after a long one */
  assert_int_equal(tpk_program_load_source(ctx, "bad.tpk", "kernel f(x: f32[N]) -> (o: f32[N]) { o = y; }", 45, &prog),
                   TPK_ERR_PARSE);
  assert_non_null(strstr(tpk_last_error(), "bad.tpk:1:42: error: unknown name 'y'"));
  assert_true(strlen(tpk_last_error()) < 4096);
  tpk_context_destroy(ctx);
  tpk_str_free(&text);
  tpk_str_free(&want);
}

static void test_bad_calls(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "tpu9", &dev), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "unknown device 'tpu9'"));
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "bad.tpk", "kernel f(x: f32[N]) -> (o: f32[N]) { o = y; }", 45, &prog),
                   TPK_ERR_PARSE);
  assert_non_null(strstr(tpk_last_error(), "bad.tpk:1:42: error: unknown name 'y'"));
  assert_int_equal(tpk_program_load_source(ctx, "add.tpk", ADD, strlen(ADD), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "ad", &k), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "has no kernel 'ad'; it has: add, scale"));
  assert_int_equal(tpk_program_kernel(prog, "add", &k), TPK_OK);
  TpkBuffer *x, *y, *o, *h;
  int64_t n8 = 8, n9 = 9;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n8, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n9, &y), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n8, &o), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 1, &n8, &h), TPK_OK);
  TpkBuffer *args[] = {x, y, o};
  TpkLaunch L = {.args = args};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'add': shape symbol N is 8 from 'x' (dimension 0) but 9 from 'y' (dimension 0)");
  TpkBuffer *args2[] = {x, h, o};
  L.args = args2;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'add': parameter 'y' is f32 but the buffer holds bf16");
  TpkBuffer *args3[] = {x, x, o};
  L.args = args3;
  TpkNamedInt bogus = {"Q", 3};
  L.syms = &bogus;
  L.nsyms = 1;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'add' has no shape symbol 'Q'");
  /* counts: never negative (was taken as 0), never without their array */
  L.nsyms = -1;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_kernel_launch: nsyms is -1 and ntunes 0; counts cannot be negative");
  L.nsyms = 0;
  L.ntunes = -3;
  TpkQueue *q;
  assert_int_equal(tpk_queue_create(ctx, &q), TPK_OK);
  assert_int_equal(tpk_queue_launch(q, k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_queue_launch: nsyms is 0 and ntunes -3; counts cannot be negative");
  tpk_queue_destroy(q);
  L.ntunes = 2;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_kernel_launch: ntunes counts 2 entries but the array is NULL");
  L.ntunes = 0;
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  assert_int_equal(tpk_buffer_write(x, in, sizeof in), TPK_OK);
  assert_int_equal(tpk_buffer_write(x, in, 4), TPK_ERR_INVALID);
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  assert_int_equal(tpk_buffer_read(o, out, sizeof out), TPK_OK);
  for (int i = 0; i < 8; i++) assert_true(out[i] == 2 * in[i]);
  /* inout and scalars */
  assert_int_equal(tpk_program_kernel(prog, "scale", &k), TPK_OK);
  TpkBuffer *sargs[] = {x, NULL};
  double sc[] = {0, 3.0};
  TpkLaunch S = {.args = sargs, .scalars = sc};
  assert_int_equal(tpk_kernel_launch(k, &S), TPK_OK);
  assert_int_equal(tpk_buffer_read(x, out, sizeof out), TPK_OK);
  for (int i = 0; i < 8; i++) assert_true(out[i] == 3 * in[i]);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_buffer_destroy(o);
  tpk_buffer_destroy(h);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

/* A kernel's backward kernel, found by name and launched with arguments
 * wired by parameter name, as the PyTorch layer does: the forward's inputs
 * and outputs, the output gradients d<o>, the scalars; out come d<i>. */
static void test_backward_kernel(void **state) {
  (void)state;
  static const char SRC[] = "kernel cube(x: f32[N], s: f32) -> (y: f32[N]) backward cube_bwd { y = x * x * x * s; }\n"
                            "kernel cube_bwd(dy: f32[N], x: f32[N], s: f32) -> (dx: f32[N]) { dx = dy * 3.0 * x * x * s; }\n";
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *fwd, *bwd;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "cube.tpk", SRC, strlen(SRC), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "cube", &fwd), TPK_OK);
  assert_string_equal(tpk_kernel_backward(fwd), "cube_bwd");
  assert_int_equal(tpk_program_kernel(tpk_kernel_program(fwd), tpk_kernel_backward(fwd), &bwd), TPK_OK);
  assert_null(tpk_kernel_backward(bwd));
  assert_null(tpk_kernel_backward(NULL));
  /* wire cube_bwd's arguments from cube's by name */
  int64_t n = 5;
  TpkBuffer *x, *y, *dy, *dx;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &y), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &dy), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &dx), TPK_OK);
  float xs[5] = {-2, -0.5f, 0, 1, 3}, dys[5] = {1, 2, 3, 4, 5}, got[5];
  assert_int_equal(tpk_buffer_write(x, xs, sizeof xs), TPK_OK);
  assert_int_equal(tpk_buffer_write(dy, dys, sizeof dys), TPK_OK);
  const char *names[] = {"x", "y", "dy", "dx", "s"};
  TpkBuffer *bufs[] = {x, y, dy, dx, NULL};
  TpkKernel *ks[] = {fwd, bwd};
  for (int which = 0; which < 2; which++) {
    TpkKernel *k = ks[which];
    TpkBuffer *args[8] = {0};
    double scalars[8] = {0};
    for (int i = 0; i < tpk_kernel_param_count(k); i++)
      for (int j = 0; j < 5; j++)
        if (strcmp(tpk_kernel_param_name(k, i), names[j]) == 0) {
          args[i] = bufs[j];
          if (!bufs[j]) scalars[i] = 0.5;
        }
    TpkLaunch L = {.args = args, .scalars = scalars};
    if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
  }
  assert_int_equal(tpk_buffer_read(dx, got, sizeof got), TPK_OK);
  for (int i = 0; i < 5; i++) assert_true(got[i] == dys[i] * 3.0f * xs[i] * xs[i] * 0.5f);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_buffer_destroy(dy);
  tpk_buffer_destroy(dx);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

/* A queue runs its launches in order: scale x by 2, then add 1, many times. */
static void test_queue_order(void **state) {
  (void)state;
  const char *src = "kernel mul2(inout x: f32[N]) -> () { x = x * 2.0; }\n"
                    "kernel add1(inout x: f32[N]) -> () { x = x + 1.0; }\n";
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *mul2, *add1;
  TpkQueue *q;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "q.tpk", src, strlen(src), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "mul2", &mul2), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "add1", &add1), TPK_OK);
  assert_int_equal(tpk_queue_create(ctx, &q), TPK_OK);
  TpkBuffer *x;
  int64_t n = 4;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  TpkBuffer *args[] = {x};
  TpkLaunch L = {.args = args};
  double expect = 0;
  for (int i = 0; i < 10; i++) {
    assert_int_equal(tpk_queue_launch(q, mul2, &L), TPK_OK);
    assert_int_equal(tpk_queue_launch(q, add1, &L), TPK_OK);
    expect = expect * 2 + 1;
  }
  TpkEvent *ev;
  assert_int_equal(tpk_queue_record(q, &ev), TPK_OK);
  assert_int_equal(tpk_event_wait(ev), TPK_OK);
  assert_true(tpk_event_done(ev));
  float out[4];
  assert_int_equal(tpk_buffer_read(x, out, sizeof out), TPK_OK);
  for (int i = 0; i < 4; i++) assert_true(out[i] == (float)expect);
  /* an error in queued work surfaces at the next wait */
  TpkBuffer *none[] = {NULL};
  TpkLaunch bad = {.args = none};
  assert_int_equal(tpk_queue_launch(q, mul2, &bad), TPK_OK);
  assert_int_equal(tpk_queue_wait(q), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "no buffer for parameter 'x'"));
  assert_int_equal(tpk_queue_wait(q), TPK_OK);
  tpk_event_destroy(ev);
  tpk_queue_destroy(q);
  tpk_buffer_destroy(x);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

/* A kernel whose tiles cannot fit the target's VMEM is refused, naming the
 * buffers. */
static void test_vmem_budget(void **state) {
  (void)state;
  const char *src = "kernel big(x: f32[M, N]) -> (y: f32[M, N]) tune BM in [1024] {\n"
                    "  for i in tiles(M, BM) { let t = x[i, :]; y[i, :] = t * t; }\n"
                    "}\n";
  setenv("TPK_HOST_VMEM", "1M", 1);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "big.tpk", src, "big");
  TpkBuffer *x, *y;
  int64_t shape[2] = {2048, 1024};
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &y), TPK_OK);
  TpkBuffer *args[] = {x, y};
  TpkLaunch L = {.args = args};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_NOMEM);
  assert_non_null(strstr(tpk_last_error(), "kernel 'big' needs 4.0 MiB of VMEM for one grid instance but host has 1.0 MiB"));
  assert_non_null(strstr(tpk_last_error(), "%t f32[1024,1024] (4.0 MiB, line 2)"));
  unsetenv("TPK_HOST_VMEM");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
}

/* A cache folder of the test's own (cc must really compile), made from
 * `dir` (a mkdtemp template) and set as TPK_CACHE_DIR; closing removes it and
 * unsets what the tests set around it (TPK_TIER, TPK_GENERIC). */
static void private_cache_close(const char *dir) {
  unsetenv("TPK_TIER");
  unsetenv("TPK_GENERIC");
  test_cache_dir_close(dir);
}

/* Run `kname` of a corpus file with every symbol = size on `device` in a
 * context whose JIT tier is `tier` ("generic": tcc, compiling the kernel once
 * for every shape), with the tunables `tunes` names (NULL: none named);
 * return the bytes of every output, concatenated, and the tunables it ran
 * with in picked (256 bytes) if not NULL. On a sim device the launch must
 * also have been timed. */
static char *run_on(const char *device, const char *tier, const char *file, const char *kname, int64_t size,
                    const char *tunes, char *picked, size_t *len) {
  bool generic = strcmp(tier, "generic") == 0;
  if (generic) {
    setenv("TPK_GENERIC", "1", 1);
    tier = "tcc";
  }
  setenv("TPK_TIER", tier, 1);
  char cache[] = "/tmp/tpk-test-tiers-XXXXXX"; /* a private cache: cc must really compile */
  test_cache_dir_open(cache);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  char rel[256];
  snprintf(rel, sizeof rel, "tests/corpus/%s", file);
  char *text = test_read_file(test_path(rel), NULL);
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, device, &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, file, text, strlen(text), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, kname, &k), TPK_OK);
  char what[300];
  snprintf(what, sizeof what, "%s:%s (%s)", file, kname, tier);
  TpkLaunchResult ran;
  char *out = test_launch_outputs_tuned(k, dev, size, 42, 1, tunes, what, len, &ran);
  if (picked) snprintf(picked, 256, "%s", ran.tunes);
  assert_string_equal(ran.tier, tier);
  assert_int_equal(ran.simulated, strncmp(device, "sim:", 4) == 0);
  if (ran.simulated) {
    TpkSimStats stats = ran.sim;
    if (!(stats.seconds > 0 && stats.seconds >= stats.roofline_seconds))
      fail_msg("%s:%s on %s: simulated %g s, roofline %g s", file, kname, device, stats.seconds, stats.roofline_seconds);
  }
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  free(text);
  private_cache_close(cache);
  return out;
}

/* libtcc and cc -O3 compile the same C; the results must be the same bits
 * (cc runs with -ffp-contract=off so it does not fuse what tcc does not). */
static void test_tiers_agree_bitwise(void **state) {
  (void)state;
  static const struct { const char *file, *kernel; int64_t size; } CASES[] = {
      {"softmax.tpk", "softmax", 37},          {"layernorm.tpk", "layernorm", 130},
      {"flash_attention.tpk", "flash_attention", 40}, {"gelu.tpk", "gelu_tanh", 130},
      {"matmul.tpk", "matmul", 130},           {"gelu.tpk", "gelu", 130},
      {"gelu.tpk", "bias_gelu", 130},          {"activations.tpk", "silu", 130},
      {"activations.tpk", "swiglu", 130},      {"activations.tpk", "softplus_mish", 130},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    size_t n1, n2;
    char *a = run_on("host", "tcc", CASES[i].file, CASES[i].kernel, CASES[i].size, NULL, NULL, &n1);
    char *b = run_on("host", "cc", CASES[i].file, CASES[i].kernel, CASES[i].size, NULL, NULL, &n2);
    assert_int_equal(n1, n2);
    if (memcmp(a, b, n1) != 0) fail_msg("%s: the tcc and cc tiers computed different bits", CASES[i].kernel);
    free(a);
    free(b);
  }
}

/* Calls fn for every kernel of tests/corpus at each size (rank >= 3
 * problems capped at 48, as every symbol takes the size); returns how many
 * calls there were. */
typedef void (*CorpusCase)(const char *file, const char *kname, int64_t size, int index);
static int each_corpus_kernel(const int64_t *sizes, int nsizes, CorpusCase fn) {
  char *names[128];
  int n = test_list_tpk("tests/corpus", names, 128), calls = 0;
  for (int f = 0; f < n; f++) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/corpus/%s", names[f]);
    char *text = test_read_file(test_path(rel), NULL);
    TpkContext *ctx;
    TpkProgram *prog;
    assert_int_equal(tpk_context_create(&ctx), TPK_OK);
    assert_int_equal(tpk_program_load_source(ctx, names[f], text, strlen(text), &prog), TPK_OK);
    for (int ki = 0; ki < tpk_program_kernel_count(prog); ki++) {
      const char *kname = tpk_program_kernel_name(prog, ki);
      TpkKernel *k;
      assert_int_equal(tpk_program_kernel(prog, kname, &k), TPK_OK);
      int max_rank = 0;
      for (int i = 0; i < tpk_kernel_param_count(k); i++)
        if (tpk_kernel_param_rank(k, i) > max_rank) max_rank = tpk_kernel_param_rank(k, i);
      for (int s = 0; s < nsizes; s++) {
        fn(names[f], kname, max_rank >= 3 && sizes[s] > 48 ? 48 : sizes[s], s);
        calls++;
      }
    }
    tpk_program_destroy(prog);
    tpk_context_destroy(ctx);
    free(text);
    free(names[f]);
  }
  return calls;
}

static void generic_matches_specialised(const char *file, const char *kname, int64_t size, int index) {
  (void)index;
  size_t n1, n2;
  char *one = run_on("host", "tcc", file, kname, size, NULL, NULL, &n1);
  char *every = run_on("host", "generic", file, kname, size, NULL, NULL, &n2);
  assert_int_equal(n1, n2);
  if (memcmp(one, every, n1) != 0)
    fail_msg("%s:%s size %lld: the code for every shape computed other bits than the code for this shape", file,
             kname, (long long)size);
  free(one);
  free(every);
}

/* Code compiled once for every shape (what the standard library is built
 * as) computes the bits the code specialised for one shape computes: every
 * corpus kernel at a tiny, a ragged and a multi-block size. */
static void test_generic_code_matches_specialised(void **state) {
  (void)state;
  static const int64_t SIZES[] = {9, 37, 130}; /* >= 8: the corpus's gather ids are < 8 */
  int compared = each_corpus_kernel(SIZES, 3, generic_matches_specialised);
  fprintf(stderr, "%d corpus launches: code for every shape == code for one shape, bit for bit\n", compared);
  assert_true(compared >= 240);
}

/* run_on with TPK_HOST_THREADS = threads. */
static char *run_threads(int threads, const char *tier, const char *file, const char *kname, int64_t size, size_t *len) {
  char t[16];
  snprintf(t, sizeof t, "%d", threads);
  setenv("TPK_HOST_THREADS", t, 1);
  char *out = run_on("host", tier, file, kname, size, NULL, NULL, len);
  unsetenv("TPK_HOST_THREADS");
  return out;
}

static void threads_agree(const char *file, const char *kname, int64_t size, int index) {
  size_t n1, n2, n3;
  char *one = run_threads(1, "tcc", file, kname, size, &n1);
  char *two = run_threads(2, index ? "tcc" : "generic", file, kname, size, &n2);
  char *three = run_threads(3, index ? "generic" : "tcc", file, kname, size, &n3);
  assert_int_equal(n1, n2);
  assert_int_equal(n1, n3);
  if (memcmp(one, two, n1) != 0 || memcmp(one, three, n1) != 0)
    fail_msg("%s:%s size %lld: two or three threads computed other bits than one", file, kname, (long long)size);
  free(one);
  free(two);
  free(three);
}

/* Grid instances are independent, so sharing them among threads changes no
 * bit: every corpus kernel at a ragged and a multi-block size, one thread
 * against two and three (an uneven split), per-shape code and code for
 * every shape. */
static void test_thread_counts_agree_bitwise(void **state) {
  (void)state;
  static const int64_t SIZES[] = {37, 130};
  int compared = each_corpus_kernel(SIZES, 2, threads_agree);
  fprintf(stderr, "%d corpus launches: 1, 2 and 3 threads computed the same bits\n", compared);
  assert_true(compared >= 160);
}

static void test_host_threads_from_env(void **state) {
  (void)state;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int dflt = online < 1 ? 1 : online > 64 ? 64 : (int)online;
  unsetenv("TPK_HOST_THREADS");
  assert_int_equal(tpk_host_threads(), dflt);
  static const struct { const char *env; int want; } CASES[] = {{"3", 3}, {"1", 1}, {"64", 64}, {"1000", 64}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    setenv("TPK_HOST_THREADS", CASES[i].env, 1);
    assert_int_equal(tpk_host_threads(), CASES[i].want);
  }
  static const char *const IGNORED[] = {"0", "-2", "two", "2x", ""};
  for (size_t i = 0; i < TPK_ARRAY_LEN(IGNORED); i++) {
    setenv("TPK_HOST_THREADS", IGNORED[i], 1);
    assert_int_equal(tpk_host_threads(), dflt);
  }
  unsetenv("TPK_HOST_THREADS");
}

/* An error in any part of a shared grid fails the launch with that part's
 * message; when several parts fail, the one earliest in the grid wins (what
 * one thread running the instances in order reports first). */
/* A gather over 8 grid instances of 2 rows, on a context of 2 host threads:
 * ids (16), a table of 8 rows of 4 holding 0..31, y (16 x 4). */
typedef struct Pick {
  TpkContext *ctx;
  TpkKernel *k;
  TpkBuffer *buf[3]; /* ids, table, y */
  int32_t *id;
  float *out;
  TpkLaunch L;
} Pick;

static void pick_open(Pick *p) {
  const char *src = "kernel pick(ids: i32[N], table: f32[V, 4]) -> (y: f32[N, 4])\n"
                    "{\n"
                    "  for i in tiles(N, 2) { y[i, :] = table[ids[i], :]; }\n"
                    "}\n";
  setenv("TPK_HOST_THREADS", "2", 1);
  TpkDevice *dev;
  p->k = test_kernel(&p->ctx, &dev, "host", "pick.tpk", src, "pick");
  int64_t n = 16, tshape[2] = {8, 4}, yshape[2] = {16, 4};
  assert_int_equal(tpk_buffer_create(dev, TPK_I32, 1, &n, &p->buf[0]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, tshape, &p->buf[1]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, yshape, &p->buf[2]), TPK_OK);
  p->id = tpk_buffer_data(p->buf[0]);
  p->out = tpk_buffer_data(p->buf[2]);
  float *t = tpk_buffer_data(p->buf[1]);
  for (int i = 0; i < 32; i++) t[i] = (float)i;
  p->L = (TpkLaunch){.args = p->buf};
}

static void pick_close(Pick *p) {
  for (int i = 0; i < 3; i++) tpk_buffer_destroy(p->buf[i]);
  tpk_program_destroy(tpk_kernel_program(p->k));
  tpk_context_destroy(p->ctx);
  unsetenv("TPK_HOST_THREADS");
}

static void test_errors_from_worker_parts(void **state) {
  (void)state;
  Pick p;
  pick_open(&p);
  TpkKernel *k = p.k;
  TpkLaunch L = p.L;
  int32_t *id = p.id;
  float *out = p.out;
  for (int i = 0; i < 16; i++) id[i] = 7 - i % 8;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  for (int i = 0; i < 16; i++) assert_true(out[i * 4 + 1] == (float)((7 - i % 8) * 4 + 1));
  /* 8 instances in two parts: instance 6 (rows 12, 13) is the second part's */
  id[13] = 99;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "gather index 99 is out of range [0, 8)"));
  /* both parts fail: the first part's error is the one reported */
  id[2] = 42;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "gather index 42 is out of range [0, 8)"));
  id[2] = 5;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "gather index 99 is out of range [0, 8)"));
  id[13] = 1;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  pick_close(&p);
}

/* An embedding program's threads (tpk_context_set_host_parallel): this one
 * runs the parts itself, last first, or declines. */
typedef struct LentThreads {
  int calls, parts;
  bool decline;
} LentThreads;

static int lent_run(void *user, int parts, TpkHostPartFn part, void *arg) {
  LentThreads *lent = user;
  lent->calls++;
  if (lent->decline) return 0;
  lent->parts = parts;
  for (int i = parts - 1; i >= 0; i--) part(arg, i);
  return 1;
}

/* Launches hand their parts to the lent threads, which may run them in any
 * order: the same results, and a part's error is still the launch's; a
 * runner that declines leaves them to tpk's workers; NULL stops lending. */
static void test_parts_on_lent_threads(void **state) {
  (void)state;
  Pick p;
  pick_open(&p);
  TpkContext *ctx = p.ctx;
  TpkKernel *k = p.k;
  TpkLaunch L = p.L;
  int32_t *id = p.id;
  float *out = p.out;
  LentThreads lent = {0};
  tpk_context_set_host_parallel(ctx, lent_run, &lent);
  for (int round = 0; round < 3; round++) {
    lent.decline = round == 1;
    if (round == 2) tpk_context_set_host_parallel(ctx, NULL, NULL);
    for (int i = 0; i < 16; i++) id[i] = (7 - i % 8 + round) % 8;
    memset(out, 0, 64 * sizeof *out);
    assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
    for (int i = 0; i < 16; i++) assert_true(out[i * 4 + 1] == (float)((7 - i % 8 + round) % 8 * 4 + 1));
    assert_int_equal(lent.calls, round < 2 ? round + 1 : 2);
  }
  assert_int_equal(lent.parts, 2);
  tpk_context_set_host_parallel(ctx, lent_run, &lent);
  lent.decline = false;
  id[13] = 99; /* the second part's instance, run first by the lent threads */
  id[2] = 42;
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "gather index 42 is out of range [0, 8)"));
  assert_int_equal(lent.calls, 3);
  pick_close(&p);
}

/* A forked child's copy of the context has no worker threads: its launches
 * run every part themselves (and finish), and it can destroy the context. */
static void test_launch_in_forked_child(void **state) {
  (void)state;
  const char *src = "kernel twice(x: f32[N]) -> (y: f32[N]) { for i in tiles(N, 16) { y[i] = x[i] * 2.0; } }\n";
  setenv("TPK_HOST_THREADS", "2", 1);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "twice.tpk", src, "twice");
  int64_t n = 1000;
  TpkBuffer *x, *y;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &y), TPK_OK);
  float *xv = tpk_buffer_data(x), *yv = tpk_buffer_data(y);
  for (int i = 0; i < 1000; i++) xv[i] = (float)i;
  TpkBuffer *args[] = {x, y};
  TpkLaunch L = {.args = args};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK); /* starts the workers */
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    for (int i = 0; i < 1000; i++) xv[i] = (float)(3 * i);
    bool ok = tpk_kernel_launch(k, &L) == TPK_OK;
    for (int i = 0; i < 1000 && ok; i++) ok = yv[i] == (float)(6 * i);
    tpk_program_destroy(tpk_kernel_program(k));
    tpk_context_destroy(ctx);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  for (int waited = 0; waitpid(child, &status, WNOHANG) == 0; waited++) {
    if (waited == 300) { /* 30 s: the child hangs */
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fail_msg("a launch in a forked child did not finish");
    }
    nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
  }
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int i = 0; i < 1000; i++) assert_true(yv[i] == (float)(2 * i)); /* the parent's buffers are its own */
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
  unsetenv("TPK_HOST_THREADS");
}

/* Kernels that do more than one shared grid run whole in one part, and
 * match the interpreter with several threads too: two grids (the second
 * reads what the first wrote), a store after the grid, a read of an output
 * before it, a scatter-add with colliding indices. */
static void test_whole_kernels_with_threads(void **state) {
  (void)state;
  const char *src =
      "kernel two_grids(x: f32[N]) -> (y: f32[N], z: f32[N])\n"
      "{\n"
      "  for i in tiles(N, 8) { y[i] = x[i] * 2.0; }\n"
      "  for i in tiles(N, 8) { z[i] = y[i] + y[0..1]; }\n"
      "}\n"
      "kernel store_after(x: f32[N]) -> (y: f32[N], first: f32[1])\n"
      "{\n"
      "  for i in tiles(N, 8) { y[i] = x[i] * 2.0; }\n"
      "  first[0] = x[0];\n"
      "}\n"
      "kernel reads_output_first(x: f32[N], inout acc: f32[N]) -> ()\n"
      "{\n"
      "  let a0 = acc[0];\n"
      "  for i in tiles(N, 8) { acc[i] = x[i] + a0; }\n"
      "}\n"
      "kernel scatter(ids: i32[N], g: f32[N, 4]) -> (grad: f32[V, 4] = 0)\n"
      "{\n"
      "  for t in tiles(N, 8) { grad[ids[t], :] += g[t, :]; }\n"
      "}\n";
  setenv("TPK_HOST_THREADS", "3", 1);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "whole.tpk", src, strlen(src), &prog), TPK_OK);
  TestTally tally = {0};
  for (int ki = 0; ki < tpk_program_kernel_count(prog); ki++)
    test_launch_vs_interpreter(dev, prog, "whole.tpk", src, tpk_program_kernel_name(prog, ki), 100, NULL, 0, &tally);
  assert_int_equal(tally.passed, 4);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  unsetenv("TPK_HOST_THREADS");
}

/* Kernels `fused` and `stored` of src give the same bits in y and z (of
 * m elements, or n with `columns`), in tcc, cc and code for every shape. */
static void fused_matches_stored(const char *src, bool columns) {
  static const struct { const char *tier; bool generic; } RUNS[] = {{"tcc", false}, {"cc", false}, {"tcc", true}};
  static const int64_t SIZES[][2] = {{37, 1000}, {8, 63}, {9, 64}, {16, 130}};
  char cache[] = "/tmp/tpk-test-fused-XXXXXX";
  test_cache_dir_open(cache);
  for (size_t r = 0; r < TPK_ARRAY_LEN(RUNS); r++) {
    setenv("TPK_TIER", RUNS[r].tier, 1);
    if (RUNS[r].generic) setenv("TPK_GENERIC", "1", 1);
    TpkContext *ctx;
    TpkDevice *dev;
    TpkProgram *prog;
    TpkKernel *kf, *ks;
    assert_int_equal(tpk_context_create(&ctx), TPK_OK);
    assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
    assert_int_equal(tpk_program_load_source(ctx, "sums.tpk", src, strlen(src), &prog), TPK_OK);
    assert_int_equal(tpk_program_kernel(prog, "fused", &kf), TPK_OK);
    assert_int_equal(tpk_program_kernel(prog, "stored", &ks), TPK_OK);
    for (size_t s = 0; s < TPK_ARRAY_LEN(SIZES); s++) {
      int64_t m = SIZES[s][0], n = SIZES[s][1], xs[2] = {m, n}, len = columns ? n : m;
      TpkBuffer *x, *w, *y1, *z1, *y2, *z2, *k1, *k2;
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, xs, &x), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &w), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, xs, &k1), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, xs, &k2), TPK_OK);
      TpkBuffer **outs[] = {&y1, &z1, &y2, &z2};
      for (int i = 0; i < 4; i++) assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &len, outs[i]), TPK_OK);
      uint64_t seed = 7 + s;
      tpk_fill_random(tpk_buffer_data(x), TPK_F32, m * n, &seed);
      tpk_fill_random(tpk_buffer_data(w), TPK_F32, n, &seed);
      TpkBuffer *fa[] = {x, w, y1, z1}, *sa[] = {x, w, y2, z2, k1, k2};
      TpkLaunchResult ran;
      TpkLaunch lf = {.args = fa, .result = &ran}, ls = {.args = sa};
      if (tpk_kernel_launch(kf, &lf) != TPK_OK || tpk_kernel_launch(ks, &ls) != TPK_OK) fail_msg("%s", tpk_last_error());
      assert_string_equal(ran.tier, RUNS[r].tier);
      if (memcmp(tpk_buffer_data(y1), tpk_buffer_data(y2), (size_t)len * 4) != 0 ||
          memcmp(tpk_buffer_data(z1), tpk_buffer_data(z2), (size_t)len * 4) != 0)
        fail_msg("%s%s, %lldx%lld: a fused sum differs from the primitive's", RUNS[r].tier,
                 RUNS[r].generic ? " (every shape)" : "", (long long)m, (long long)n);
      TpkBuffer *all[] = {x, w, y1, z1, y2, z2, k1, k2};
      for (size_t i = 0; i < TPK_ARRAY_LEN(all); i++) tpk_buffer_destroy(all[i]);
    }
    tpk_program_destroy(prog);
    tpk_context_destroy(ctx);
    unsetenv("TPK_GENERIC");
  }
  private_cache_close(cache);
}

/* A sum or mean that takes its input's elements as they are computed (the
 * expression fused into it), over the rows' trailing axis or the columns'
 * leading one, gives the bits of the primitive summing the same expression
 * stored in a tile, and tcc, cc and code for every shape agree on them. */
static void test_fused_sums_match_the_primitive(void **state) {
  (void)state;
  fused_matches_stored(
      "kernel fused(x: f32[M, N], w: f32[N]) -> (y: f32[M], z: f32[M])\n"
      "{\n"
      "  for i in tiles(M, 8) {\n"
      "    let t = x[i, :];\n"
      "    y[i] = reshape(sum(t * w + 0.25, axis=1, keepdims=true), [8]);\n"
      "    z[i] = reshape(mean(where(t > 0.0, t, t * t), axis=1, keepdims=true), [8]);\n"
      "  }\n"
      "}\n"
      "kernel stored(x: f32[M, N], w: f32[N]) -> (y: f32[M], z: f32[M], keep: f32[M, N], keep2: f32[M, N])\n"
      "{\n"
      "  for i in tiles(M, 8) {\n"
      "    let t = x[i, :];\n"
      "    let a = t * w + 0.25;\n"
      "    let b = where(t > 0.0, t, t * t);\n"
      "    keep[i, :] = a;\n" /* a second use: a and b are stored tiles, summed by the primitive */
      "    keep2[i, :] = b;\n"
      "    y[i] = reshape(sum(a, axis=1, keepdims=true), [8]);\n"
      "    z[i] = reshape(mean(b, axis=1, keepdims=true), [8]);\n"
      "  }\n"
      "}\n",
      false);
  fused_matches_stored(
      "kernel fused(x: f32[M, N], w: f32[N]) -> (y: f32[N], z: f32[N])\n"
      "{\n"
      "  for j in tiles(N, 16) {\n"
      "    let t = x[:, j];\n"
      "    y[j] = sum(t * 3.0 + 0.25, axis=0);\n"
      "    z[j] = mean(where(t > 0.0, t, t * t), axis=0);\n"
      "  }\n"
      "}\n"
      "kernel stored(x: f32[M, N], w: f32[N]) -> (y: f32[N], z: f32[N], keep: f32[M, N], keep2: f32[M, N])\n"
      "{\n"
      "  for j in tiles(N, 16) {\n"
      "    let t = x[:, j];\n"
      "    let a = t * 3.0 + 0.25;\n"
      "    let b = where(t > 0.0, t, t * t);\n"
      "    keep[:, j] = a;\n"
      "    keep2[:, j] = b;\n"
      "    y[j] = sum(a, axis=0);\n"
      "    z[j] = mean(b, axis=0);\n"
      "  }\n"
      "}\n",
      true);
}

/* `x + dot(a, b)` is lowered to an accumulating dot, which the host runs as
 * one gemm into a copy of x: the products continue x's sums, k ascending.
 * The interpreter running the lowered IR computes the same bits, in both
 * tiers, for K past one gemm block; with x = 2^24 and products of 1 the
 * chain keeps 2^24 (each +1 is a tie to even), where dot-then-add (the IR
 * before lowering) gives 2^24 + K. */
static void test_accumulating_dot_matches_lowered_ir(void **state) {
  (void)state;
  const char *src = "kernel acc(x: f32[M, N], a: f32[M, K], b: f32[K, N]) -> (y: f32[M, N])\n"
                    "{\n"
                    "  for i in tiles(M, 16), j in tiles(N, 16) { y[i, j] = x[i, j] + dot(a[i, :], b[:, j]); }\n"
                    "}\n";
  enum { M = 20, N = 18, K = 700 };
  TpkBinding binds[] = {{"M", M}, {"N", N}, {"K", K}};
  TpkCheckOptions o = {.binds = binds, .nbinds = 3};
  TestCompile c;
  test_compile(&c, "acc.tpk", src, &o);
  assert_int_equal(c.status, TPK_OK);
  TpkTarget host = tpk_target_host(0);
  TpkError err = {0};
  if (tpk_lower_ir(c.module->funcs[0], &host, &err) != TPK_OK) fail_msg("%s", err.message);
  static float x[M * N], a[M * K], b[K * N], y[M * N], want[M * N];
  for (int run = 0; run < 2; run++) {
    uint64_t seed = 11;
    if (run == 0) { /* the rounding that tells the orders apart */
      for (int i = 0; i < M * N; i++) x[i] = 16777216.0f;
      for (int i = 0; i < M * K; i++) a[i] = 1.0f;
      for (int i = 0; i < K * N; i++) b[i] = 1.0f;
    } else {
      tpk_fill_random(x, TPK_F32, M * N, &seed);
      tpk_fill_random(a, TPK_F32, M * K, &seed);
      tpk_fill_random(b, TPK_F32, K * N, &seed);
    }
    if (tpk_interp_run(c.module->funcs[0], (void *[]){x, a, b, want}, NULL, &err) != TPK_OK) fail_msg("%s", err.message);
    if (run == 0) assert_true(want[0] == 16777216.0f);
    for (int t = 0; t < 2; t++) {
      setenv("TPK_TIER", t ? "cc" : "tcc", 1);
      TpkContext *ctx;
      TpkDevice *dev;
      TpkKernel *k = test_kernel(&ctx, &dev, "host", "acc.tpk", src, "acc");
      int64_t xs[2] = {M, N}, as[2] = {M, K}, bs[2] = {K, N};
      TpkBuffer *bx, *ba, *bb, *by;
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, xs, &bx), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, as, &ba), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, bs, &bb), TPK_OK);
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, xs, &by), TPK_OK);
      assert_int_equal(tpk_buffer_write(bx, x, sizeof x), TPK_OK);
      assert_int_equal(tpk_buffer_write(ba, a, sizeof a), TPK_OK);
      assert_int_equal(tpk_buffer_write(bb, b, sizeof b), TPK_OK);
      TpkBuffer *args[] = {bx, ba, bb, by};
      TpkLaunchResult ran;
      TpkLaunch L = {.args = args, .result = &ran};
      if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
      assert_int_equal(tpk_buffer_read(by, y, sizeof y), TPK_OK);
      /* cc's code may come from the disk cache: an earlier run built it */
      if (!(strcmp(ran.tier, t ? "cc" : "tcc") == 0 || (t && strcmp(ran.tier, "cache") == 0)))
        fail_msg("run %d ran on tier %s", run, ran.tier);
      for (int i = 0; i < M * N; i++)
        if (memcmp(&y[i], &want[i], 4) != 0)
          fail_msg("run %d, %s: y[%d] host %.9g, interpreter on the lowered IR %.9g", run, t ? "cc" : "tcc", i,
                   (double)y[i], (double)want[i]);
      TpkBuffer *all[] = {bx, ba, bb, by};
      for (size_t i = 0; i < TPK_ARRAY_LEN(all); i++) tpk_buffer_destroy(all[i]);
      tpk_program_destroy(tpk_kernel_program(k));
      tpk_context_destroy(ctx);
    }
  }
  unsetenv("TPK_TIER");
  test_compile_free(&c);
}

/* f32 <-> bf16 conversions in tiles are rounded inline by generated code:
 * the same bits as the primitive for every kind of input (ties, NaN
 * payloads, infinities, subnormals, overflow), in tcc and cc code. */
static void test_inline_conversions_match_the_primitive(void **state) {
  (void)state;
  const char *src = "kernel down(x: f32[N]) -> (y: bf16[N]) { for i in tiles(N, 64) { y[i] = x[i] as bf16; } }\n"
                    "kernel up(x: bf16[N]) -> (y: f32[N]) { for i in tiles(N, 64) { y[i] = x[i] as f32; } }\n";
  enum { N = 1 << 16 };
  uint32_t *bits = malloc(N * 4);
  uint16_t *half = malloc(N * 2), *want16 = malloc(N * 2);
  float *want32 = malloc(N * 4);
  assert_true(bits && half && want16 && want32);
  static const uint32_t SPECIAL[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                     0xffbfffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f8000u,
                                     0x00008000u, 0x00018000u, 0x807fffffu, 0x00000001u};
  uint64_t seed = 99;
  for (int i = 0; i < N; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    bits[i] = i < (int)TPK_ARRAY_LEN(SPECIAL) ? SPECIAL[i] : (uint32_t)(seed >> 32);
    half[i] = (uint16_t)(bits[i] >> (i & 1 ? 16 : 0));
  }
  tpk_prim_convert(TPK_PRIM_F32, TPK_PRIM_BF16, bits, want16, N);
  tpk_prim_convert(TPK_PRIM_BF16, TPK_PRIM_F32, half, want32, N);
  static const char *const TIERS[] = {"tcc", "cc"};
  char cache[] = "/tmp/tpk-test-convert-XXXXXX";
  test_cache_dir_open(cache);
  for (size_t t = 0; t < TPK_ARRAY_LEN(TIERS); t++) {
    setenv("TPK_TIER", TIERS[t], 1);
    TpkContext *ctx;
    TpkDevice *dev;
    TpkProgram *prog;
    TpkKernel *down, *up;
    assert_int_equal(tpk_context_create(&ctx), TPK_OK);
    assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
    assert_int_equal(tpk_program_load_source(ctx, "conv.tpk", src, strlen(src), &prog), TPK_OK);
    assert_int_equal(tpk_program_kernel(prog, "down", &down), TPK_OK);
    assert_int_equal(tpk_program_kernel(prog, "up", &up), TPK_OK);
    int64_t n = N;
    TpkBuffer *x32, *y16, *x16, *y32;
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x32), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 1, &n, &y16), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 1, &n, &x16), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &y32), TPK_OK);
    memcpy(tpk_buffer_data(x32), bits, N * 4);
    memcpy(tpk_buffer_data(x16), half, N * 2);
    TpkBuffer *da[] = {x32, y16}, *ua[] = {x16, y32};
    TpkLaunchResult ran;
    TpkLaunch dl = {.args = da, .result = &ran}, ul = {.args = ua};
    if (tpk_kernel_launch(down, &dl) != TPK_OK || tpk_kernel_launch(up, &ul) != TPK_OK) fail_msg("%s", tpk_last_error());
    assert_string_equal(ran.tier, TIERS[t]);
    const uint16_t *got16 = tpk_buffer_data(y16);
    const uint32_t *got32 = tpk_buffer_data(y32);
    for (int i = 0; i < N; i++) {
      uint32_t w32;
      memcpy(&w32, &want32[i], 4);
      if (got16[i] != want16[i]) fail_msg("%s: f32 %08x -> bf16 %04x, the primitive gives %04x", TIERS[t], bits[i], got16[i], want16[i]);
      if (got32[i] != w32) fail_msg("%s: bf16 %04x -> f32 %08x, the primitive gives %08x", TIERS[t], half[i], got32[i], w32);
    }
    TpkBuffer *all[] = {x32, y16, x16, y32};
    for (size_t i = 0; i < TPK_ARRAY_LEN(all); i++) tpk_buffer_destroy(all[i]);
    tpk_program_destroy(prog);
    tpk_context_destroy(ctx);
  }
  private_cache_close(cache);
  free(bits);
  free(half);
  free(want16);
  free(want32);
}

/* exp, erf, tanh, sigmoid, log, sqrt and rsqrt on scalars (generated code's
 * own lane-by-lane versions, which cc can vectorise) give the bits of the
 * primitive on a tile, in tcc and cc code: specials, subnormal results and
 * arguments, every binade, and dense points where the functions bend. */
static void test_scalar_math_matches_the_primitive(void **state) {
  (void)state;
  const char *src = "kernel f(x: f32[N]) -> (e: f32[N], r: f32[N], t: f32[N], s: f32[N], l: f32[N], q: f32[N],\n"
                    "                    rq: f32[N])\n"
                    "{\n"
                    "  for i in 0..N {\n"
                    "    let v = x[i];\n"
                    "    e[i] = exp(v) * 2.0; r[i] = erf(v) * 2.0; t[i] = tanh(v) * 2.0; s[i] = sigmoid(v) * 2.0;\n"
                    "    l[i] = log(v) * 2.0; q[i] = sqrt(v) * 2.0; rq[i] = rsqrt(v) * 2.0;\n"
                    "  }\n"
                    "}\n";
  enum { N = 1 << 16, FNS = 7 };
  static const int PRIM[FNS] = {TPK_PRIM_EXP,  TPK_PRIM_ERF, TPK_PRIM_TANH, TPK_PRIM_SIGMOID,
                                TPK_PRIM_LOG, TPK_PRIM_SQRT, TPK_PRIM_RSQRT};
  static const char *const NAME[FNS] = {"exp", "erf", "tanh", "sigmoid", "log", "sqrt", "rsqrt"};
  static const uint32_t SPECIAL[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                     0x00000001u, 0x807fffffu, 0x42b17218u, 0x42b20000u, 0xc2ae0000u, 0xc2b00000u,
                                     0xc2c80000u, 0xc2d00000u, 0xc2d20000u, 0x3f200000u, 0x3f800000u, 0x40800000u,
                                     0x407b0000u, 0x41100000u, 0x41200000u, 0xbf200000u, 0x3e800000u, 0x7f7fffffu};
  float *x = malloc(N * 4), *want = malloc(FNS * N * 4);
  assert_true(x && want);
  uint64_t seed = 5;
  for (int i = 0; i < N; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(seed >> 32);
    float span = i % 3 == 0 ? 6.0f : 120.0f; /* where erf and tanh bend; exp's whole range and past it */
    float v = ((float)(u >> 8) * 0x1p-24f * 2.0f - 1.0f) * span;
    if (i % 3 == 2) memcpy(&v, &u, 4); /* any bits */
    if (i < (int)TPK_ARRAY_LEN(SPECIAL)) memcpy(&v, &SPECIAL[i], 4);
    x[i] = v;
  }
  for (int f = 0; f < FNS; f++) {
    tpk_prim_unary_f32(PRIM[f], x, want + f * N, N);
    for (int i = 0; i < N; i++) want[f * N + i] *= 2.0f; /* exact, or inf both ways */
  }
  static const char *const TIERS[] = {"tcc", "cc"};
  char cache[] = "/tmp/tpk-test-math-XXXXXX";
  test_cache_dir_open(cache);
  for (size_t t = 0; t < TPK_ARRAY_LEN(TIERS); t++) {
    setenv("TPK_TIER", TIERS[t], 1);
    TpkContext *ctx;
    TpkDevice *dev;
    TpkKernel *k = test_kernel(&ctx, &dev, "host", "math.tpk", src, "f");
    int64_t n = N;
    TpkBuffer *args[1 + FNS];
    for (int i = 0; i < 1 + FNS; i++) assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &args[i]), TPK_OK);
    memcpy(tpk_buffer_data(args[0]), x, N * 4);
    TpkLaunchResult ran;
    TpkLaunch L = {.args = args, .result = &ran};
    if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
    assert_string_equal(ran.tier, TIERS[t]);
    for (int f = 0; f < FNS; f++) {
      const float *got = tpk_buffer_data(args[1 + f]);
      for (int i = 0; i < N; i++)
        if (memcmp(&got[i], &want[f * N + i], 4) != 0)
          fail_msg("%s: 2 %s(%a) = %a on a scalar, the primitive gives %a", TIERS[t], NAME[f], (double)x[i], (double)got[i],
                   (double)want[f * N + i]);
    }
    for (int i = 0; i < 1 + FNS; i++) tpk_buffer_destroy(args[i]);
    tpk_program_destroy(tpk_kernel_program(k));
    tpk_context_destroy(ctx);
  }
  private_cache_close(cache);
  free(x);
  free(want);
}

/* Each chip computes the bits the host does with the tunables the chip
 * picked (a chip searches sizes nobody tuned: tpk.h, tunes_from). */
static void chips_match_host(const char *file, const char *kname, int64_t size, int index) {
  (void)index;
  static const char *const CHIPS[] = {"sim:v5e", "sim:v5p"};
  for (size_t c = 0; c < TPK_ARRAY_LEN(CHIPS); c++) {
    size_t n1, n2;
    char picked[256];
    char *chip = run_on(CHIPS[c], "tcc", file, kname, size, NULL, picked, &n2);
    char *host = run_on("host", "tcc", file, kname, size, picked[0] ? picked : NULL, NULL, &n1);
    assert_int_equal(n1, n2);
    if (memcmp(host, chip, n1) != 0)
      fail_msg("%s:%s: %s computed other values than the host (tunables %s)", file, kname, CHIPS[c], picked);
    free(host);
    free(chip);
  }
}

/* Every corpus kernel can be timed on a chip (v5e, and v5p, whose two
 * TensorCores split the grid), and the values are the host's, to the bit. */
static void test_corpus_on_simulated_chips(void **state) {
  (void)state;
  static const int64_t SIZES[] = {40}; /* ids in the corpus's gathers are < 8 */
  int timed = each_corpus_kernel(SIZES, 1, chips_match_host);
  fprintf(stderr, "%d corpus kernels timed on v5e and v5p, values equal to the host's\n", timed);
  assert_true(timed >= 80);
}

/* A store through ids loaded as a ragged tile drops the padding lanes: they
 * read id 0, but row 0 is not theirs to write (host and sim:v5e). */
static void test_ragged_scatter_drops_padding_lanes(void **state) {
  (void)state;
  static const char *SRC = "kernel scatter_rows(inout dst: f32[V, D], ids: i32[T], src: f32[T, D]) -> ()\n"
                           "  tune BT in [8]\n"
                           "{ for one in 0..1 { for t in tiles(T, BT) { dst[ids[t], :] = src[t, :]; } } }\n";
  static const char *const DEVICES[] = {"host", "sim:v5e"};
  for (int d = 0; d < 2; d++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkProgram *prog;
    TpkKernel *k;
    assert_int_equal(tpk_context_create(&ctx), TPK_OK);
    assert_int_equal(tpk_device_open(ctx, DEVICES[d], &dev), TPK_OK);
    assert_int_equal(tpk_program_load_source(ctx, "scatter.tpk", SRC, strlen(SRC), &prog), TPK_OK);
    assert_int_equal(tpk_program_kernel(prog, "scatter_rows", &k), TPK_OK);
    int64_t sd[] = {4, 2}, si[] = {3}, ss[] = {3, 2};
    TpkBuffer *b[3];
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, sd, &b[0]), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_I32, 1, si, &b[1]), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, ss, &b[2]), TPK_OK);
    float dst[8] = {1, 1, 1, 1, 1, 1, 1, 1}, src[6] = {5, 5, 6, 6, 7, 7};
    int32_t ids[3] = {1, 2, 3};
    assert_int_equal(tpk_buffer_write(b[0], dst, sizeof dst), TPK_OK);
    assert_int_equal(tpk_buffer_write(b[1], ids, sizeof ids), TPK_OK);
    assert_int_equal(tpk_buffer_write(b[2], src, sizeof src), TPK_OK);
    TpkLaunch L = {.args = b};
    assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
    assert_int_equal(tpk_buffer_read(b[0], dst, sizeof dst), TPK_OK);
    const float want[8] = {1, 1, 5, 5, 6, 6, 7, 7};
    for (int i = 0; i < 8; i++)
      if (dst[i] != want[i]) fail_msg("%s: dst[%d] is %g, expected %g", DEVICES[d], i, (double)dst[i], (double)want[i]);
    for (int i = 0; i < 3; i++) tpk_buffer_destroy(b[i]);
    tpk_program_destroy(prog);
    tpk_context_destroy(ctx);
  }
}

/* A launch says when cc's code came from the disk cache, not compiled by
 * this process, and passes on the JIT's note when the cache could not be
 * used (the launch still runs). */
static void test_cache_hits_are_reported(void **state) {
  (void)state;
  char cache[] = "/tmp/tpk-test-hits-XXXXXX";
  test_cache_dir_open(cache);
  setenv("TPK_TIER", "cc", 1);
  const char *src = "kernel triple(x: f32[N]) -> (y: f32[N]) { y = x * 3.0; }\n";
  const char *want[] = {"cc", "cache"};
  for (int run = 0; run < 3; run++) {
    if (run == 2) /* a folder nobody may write to (root may write anywhere but /sys) */
      setenv("TPK_CACHE_DIR", geteuid() == 0 ? "/sys/kernel" : "/", 1);
    TpkContext *ctx;
    TpkDevice *dev;
    TpkKernel *k = test_kernel(&ctx, &dev, "host", "triple.tpk", src, "triple");
    TpkBuffer *x, *y;
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){5}, &x), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){5}, &y), TPK_OK);
    TpkLaunchResult ran;
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = &ran};
    if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("run %d: %s", run, tpk_last_error());
    if (run < 2) {
      assert_string_equal(ran.tier, want[run]);
      assert_string_equal(ran.note, "");
    } else {
      assert_string_equal(ran.tier, "cc");
      if (!strstr(ran.note, "built without the cache")) fail_msg("note: '%s'", ran.note);
    }
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
    tpk_program_destroy(tpk_kernel_program(k));
    tpk_context_destroy(ctx);
  }
  private_cache_close(cache);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_calls),
      cmocka_unit_test(test_backward_kernel),
      cmocka_unit_test(test_ragged_scatter_drops_padding_lanes),
      cmocka_unit_test(test_queue_order),
      cmocka_unit_test(test_vmem_budget),
      cmocka_unit_test(test_tunables_do_not_change_results),
      cmocka_unit_test(test_whole_arrays_at_square_sizes),
      cmocka_unit_test(test_cache_hits_are_reported),
      cmocka_unit_test(test_environment_that_does_not_parse),
      cmocka_unit_test(test_tiers_agree_bitwise),
      cmocka_unit_test(test_corpus_on_simulated_chips),
      cmocka_unit_test(test_generic_code_matches_specialised),
      cmocka_unit_test(test_host_threads_from_env),
      cmocka_unit_test(test_errors_from_worker_parts),
      cmocka_unit_test(test_parts_on_lent_threads),
      cmocka_unit_test(test_long_errors_are_whole),
      cmocka_unit_test(test_whole_kernels_with_threads),
      cmocka_unit_test(test_launch_in_forked_child),
      cmocka_unit_test(test_thread_counts_agree_bitwise),
      cmocka_unit_test(test_fused_sums_match_the_primitive),
      cmocka_unit_test(test_accumulating_dot_matches_lowered_ir),
      cmocka_unit_test(test_inline_conversions_match_the_primitive),
      cmocka_unit_test(test_scalar_math_matches_the_primitive),
      cmocka_unit_test(test_corpus_matches_interpreter),
  };
  return test_run_tests(tests);
}
