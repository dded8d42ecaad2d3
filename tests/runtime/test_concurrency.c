/*
 * The runtime under many threads (tpk.h, "Threads" and "Lifetimes").
 *
 *   - One kernel launched from 8 threads at once, at different sizes, on the
 *     host and on a simulated v5e: every output is checked exactly against
 *     a reference computed here, and every launch's TpkLaunchResult.
 *   - A seeded random walk over contexts, devices, programs, buffers
 *     (created, wrapped, views), queues and events, worked on by several
 *     threads in random orders: create, launch, queue, record, wait and
 *     destroy, with contexts destroyed before their objects, buffers and
 *     programs destroyed right after queueing launches that use them,
 *     queues before their events, and launches with another context's
 *     buffers (refused, never run). Every release callback runs once.
 *   - Reproducers of what the walk and reading the runtime found: a queued
 *     standard kernel of another context, release callbacks that destroy
 *     the context or a queue on a queue's worker, threads loading one
 *     cached build at once.
 *
 * All are built for the sanitizers: `make test-asan` (use after free,
 * leaks at exit) and `make test-tsan` (data races, lock order).
 * TPK_TEST_SEED=N runs the random walk with that seed only.
 */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpk.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A thread cannot use cmocka's asserts (they longjmp out of the test): it
 * keeps its first failure and the test fails with it after the join. */
typedef struct Failure {
  char message[768];
} Failure;

static bool failed(Failure *f, const char *fmt, ...) TPK_PRINTF(2, 3);
static bool failed(Failure *f, const char *fmt, ...) {
  if (f->message[0]) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->message, sizeof f->message, fmt, ap);
  va_end(ap);
  return false;
}

/* A small, seedable generator (splitmix64), one per thread. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int below(uint64_t *state, int n) { return (int)(next_random(state) % (uint64_t)n); }

/* Launches whose results cannot be told apart from a tier are fine on any
 * tier; what matters is that the result names one. */
static bool is_jit_tier(const char *tier) {
  return tier && (strcmp(tier, "tcc") == 0 || strcmp(tier, "cc") == 0 || strcmp(tier, "cache") == 0);
}

/* What a launch on `dev` must report about the simulator. */
static bool check_sim_result(Failure *f, const char *what, const TpkLaunchResult *r, bool on_sim) {
  if (on_sim) {
    if (!r->simulated || !r->sim.chip || strcmp(r->sim.chip, "v5e") != 0 || !(r->sim.cycles > 0) ||
        !(r->sim.seconds > 0) || !r->trace)
      return failed(f, "%s: a launch on sim:v5e reported simulated=%d chip=%s cycles=%g trace=%p", what, r->simulated,
                    r->sim.chip ? r->sim.chip : "(null)", r->sim.cycles, (const void *)r->trace);
  } else if (r->simulated || r->sim.cycles != 0 || r->trace) {
    return failed(f, "%s: a launch on the host reported simulated=%d cycles=%g trace=%p", what, r->simulated,
                  r->sim.cycles, (const void *)r->trace);
  }
  return true;
}

/* ---- one kernel from 8 threads -------------------------------------------------- */

/* Every step of it is one f32 operation, so C computes the same bits:
 * the row's maximum, a subtraction, a product and a sum. BM's default is 8;
 * a ragged last tile of rows is never stored. */
static const char CENTER_SCALE[] =
    "kernel center_scale(x: f32[M, N], w: f32[N], s: f32) -> (y: f32[M, N])\n"
    "  tune BM in [8, 16, 4]\n"
    "{\n"
    "  for i in tiles(M, BM) {\n"
    "    let t = x[i, :];\n"
    "    y[i, :] = (t - max(t, axis=1, keepdims=true)) * w + s;\n"
    "  }\n"
    "}\n";

enum { LAUNCHERS = 8, LAUNCH_ITERS = 6 };

/* Thread t's sizes at iteration i: its own at even iterations; at odd ones
 * threads t and t + 4 (same device) share them, so they also run one
 * specialisation at the same time. */
static void launcher_sizes(int t, int i, int64_t *m, int64_t *n) {
  int who = i % 2 ? t % 4 : t;
  *m = 9 + 5 * who + 13 * (i % 3);
  *n = 3 + 7 * who + 16 * (i / 2 % 2);
}

static float launcher_x(int t, int i, int64_t r, int64_t c) {
  return (float)((r * 7 + c * 13 + t * 3 + i) % 29 - 14) + 0.25f * (float)((r + c) % 4);
}

static void fill_launcher_inputs(int t, int i, int64_t m, int64_t n, float *x, float *w) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) x[r * n + c] = launcher_x(t, i, r, c);
  for (int64_t c = 0; c < n; c++) w[c] = 0.5f + 0.25f * (float)(c % 5);
}

typedef struct Launcher {
  int id;
  TpkDevice *dev;
  bool on_sim;
  TpkKernel *center_scale, *softmax;
  pthread_barrier_t *start;
  float *softmax_want[LAUNCH_ITERS]; /* the same launches, one after another, in another context */
  int launches;
  Failure fail;
} Launcher;

static bool launcher_iteration(Launcher *L, int i) {
  int64_t m, n;
  launcher_sizes(L->id, i, &m, &n);
  char what[128];
  snprintf(what, sizeof what, "thread %d, iteration %d, %s, M=%lld N=%lld", L->id, i, tpk_device_name(L->dev),
           (long long)m, (long long)n);
  int64_t xshape[2] = {m, n};
  TpkBuffer *x, *w, *y, *sy;
  if (tpk_buffer_create(L->dev, TPK_F32, 2, xshape, &x) != TPK_OK) return failed(&L->fail, "%s: %s", what, tpk_last_error());
  bool ok = tpk_buffer_create(L->dev, TPK_F32, 1, &n, &w) == TPK_OK;
  ok = ok && tpk_buffer_create(L->dev, TPK_F32, 2, xshape, &y) == TPK_OK;
  ok = ok && tpk_buffer_create(L->dev, TPK_F32, 2, xshape, &sy) == TPK_OK;
  if (!ok) return failed(&L->fail, "%s: %s", what, tpk_last_error());
  float *xv = tpk_buffer_data(x), *wv = tpk_buffer_data(w);
  fill_launcher_inputs(L->id, i, m, n, xv, wv);
  /* threads 3 and 7 name their tunable; the others take the default */
  bool given = L->id % 4 == 3;
  TpkNamedInt bm16 = {"BM", 16};
  TpkBuffer *args[] = {x, w, NULL, y};
  double scalars[] = {0, 0, (double)L->id - 3.5, 0};
  TpkLaunchResult r;
  memset(&r, 0xA5, sizeof r); /* everything must be written */
  TpkLaunch launch = {.args = args, .scalars = scalars, .tunes = given ? &bm16 : NULL, .ntunes = given, .result = &r};
  if (tpk_kernel_launch(L->center_scale, &launch) != TPK_OK) ok = failed(&L->fail, "%s: %s", what, tpk_last_error());
  const float *yv = tpk_buffer_data(y);
  for (int64_t row = 0; ok && row < m; row++) {
    float top = -INFINITY;
    for (int64_t c = 0; c < n; c++) top = fmaxf(top, xv[row * n + c]);
    for (int64_t c = 0; ok && c < n; c++) {
      float want = (xv[row * n + c] - top) * wv[c] + (float)scalars[2];
      if (yv[row * n + c] != want)
        ok = failed(&L->fail, "%s: y[%lld, %lld] is %.9g, not %.9g", what, (long long)row, (long long)c, yv[row * n + c],
                    want);
    }
  }
  if (ok && !is_jit_tier(r.tier)) ok = failed(&L->fail, "%s: tier '%s'", what, r.tier ? r.tier : "(null)");
  /* named, or the declared default on the host; on the chip, what a search
   * picked (at this launch, or at another thread's, from the cache) */
  const char *want_tunes = given ? "BM=16" : "BM=8", *want_from = given ? "given" : "declared defaults";
  bool searched = !given && L->on_sim && r.tunes_from &&
                  (strcmp(r.tunes_from, "tuned at launch") == 0 || strcmp(r.tunes_from, "tuning cache") == 0) &&
                  (strcmp(r.tunes, "BM=8") == 0 || strcmp(r.tunes, "BM=16") == 0 || strcmp(r.tunes, "BM=4") == 0);
  if (ok && !searched && (strcmp(r.tunes, want_tunes) != 0 || !r.tunes_from || strcmp(r.tunes_from, want_from) != 0))
    ok = failed(&L->fail, "%s: tunes '%.40s' from '%s', expected %s from %s", what, r.tunes,
                r.tunes_from ? r.tunes_from : "(null)", want_tunes, want_from);
  ok = ok && check_sim_result(&L->fail, what, &r, L->on_sim);
  /* the standard softmax (code compiled ahead of time) on the same input */
  TpkBuffer *sargs[] = {x, sy};
  memset(&r, 0xA5, sizeof r);
  TpkLaunch soft = {.args = sargs, .result = &r};
  if (ok && tpk_kernel_launch(L->softmax, &soft) != TPK_OK) ok = failed(&L->fail, "%s: softmax: %s", what, tpk_last_error());
  if (ok && memcmp(tpk_buffer_data(sy), L->softmax_want[i], (size_t)(m * n) * sizeof(float)) != 0)
    ok = failed(&L->fail, "%s: softmax differs from the same launch run alone", what);
  if (ok && (!r.tier || strcmp(r.tier, "aot") != 0)) ok = failed(&L->fail, "%s: softmax ran on tier '%s'", what, r.tier ? r.tier : "(null)");
  ok = ok && check_sim_result(&L->fail, what, &r, L->on_sim);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(w);
  tpk_buffer_destroy(y);
  tpk_buffer_destroy(sy);
  L->launches += 2;
  return ok;
}

static void *launcher_main(void *arg) {
  Launcher *L = arg;
  pthread_barrier_wait(L->start);
  for (int i = 0; i < LAUNCH_ITERS && launcher_iteration(L, i); i++) {
  }
  return NULL;
}

/* The standard softmax of thread t's input at iteration i, computed alone
 * in a context of its own (heap). */
static float *softmax_alone(TpkContext *ctx, const char *device, int t, int i) {
  TpkDevice *dev;
  TpkKernel *k;
  assert_int_equal(tpk_device_open(ctx, device, &dev), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "softmax", &k), TPK_OK);
  int64_t m, n;
  launcher_sizes(t, i, &m, &n);
  int64_t shape[2] = {m, n};
  TpkBuffer *x, *y;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, shape, &y), TPK_OK);
  float *w = malloc((size_t)n * sizeof *w), *out = malloc((size_t)(m * n) * sizeof *out);
  assert_non_null(w);
  assert_non_null(out);
  fill_launcher_inputs(t, i, m, n, tpk_buffer_data(x), w);
  TpkBuffer *args[] = {x, y};
  TpkLaunch launch = {.args = args};
  assert_int_equal(tpk_kernel_launch(k, &launch), TPK_OK);
  memcpy(out, tpk_buffer_data(y), (size_t)(m * n) * sizeof *out);
  free(w);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  return out;
}

/* The test: one kernel launched from 8 threads at once. Half the
 * threads run on the host and half on sim:v5e, each at its own sizes (and
 * pairs at shared ones), with a host thread pool of 3 that they compete
 * for. */
static void test_one_kernel_from_eight_threads(void **state) {
  (void)state;
  setenv("TPK_HOST_THREADS", "3", 1);
  TpkContext *ref;
  assert_int_equal(tpk_context_create(&ref), TPK_OK);
  Launcher launchers[LAUNCHERS];
  memset(launchers, 0, sizeof launchers);
  for (int t = 0; t < LAUNCHERS; t++)
    for (int i = 0; i < LAUNCH_ITERS; i++) launchers[t].softmax_want[i] = softmax_alone(ref, t % 2 ? "sim:v5e" : "host", t, i);
  tpk_context_destroy(ref);

  TpkContext *ctx;
  TpkDevice *host, *sim;
  TpkProgram *prog;
  TpkKernel *k, *softmax;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &sim), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "center_scale.tpk", CENTER_SCALE, strlen(CENTER_SCALE), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "center_scale", &k), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "softmax", &softmax), TPK_OK);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, LAUNCHERS);
  pthread_t threads[LAUNCHERS];
  for (int t = 0; t < LAUNCHERS; t++) {
    Launcher *L = &launchers[t];
    L->id = t;
    L->on_sim = t % 2;
    L->dev = L->on_sim ? sim : host;
    L->center_scale = k;
    L->softmax = softmax;
    L->start = &start;
    assert_int_equal(pthread_create(&threads[t], NULL, launcher_main, L), 0);
  }
  for (int t = 0; t < LAUNCHERS; t++) pthread_join(threads[t], NULL);
  pthread_barrier_destroy(&start);
  int launches = 0;
  for (int t = 0; t < LAUNCHERS; t++) {
    if (launchers[t].fail.message[0]) fail_msg("%s", launchers[t].fail.message);
    launches += launchers[t].launches;
    for (int i = 0; i < LAUNCH_ITERS; i++) free(launchers[t].softmax_want[i]);
  }
  assert_int_equal(launches, LAUNCHERS * LAUNCH_ITERS * 2);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  unsetenv("TPK_HOST_THREADS");
}

/* A small kernel with several grid instances (the host's pool runs them)
 * whose results are exact: y = 2x + a on small integers. */
static const char BUMP[] =
    "kernel bump(x: f32[N], a: f32) -> (y: f32[N])\n"
    "{\n"
    "  for i in tiles(N, 16) { y[i] = x[i] * 2.0 + a; }\n"
    "}\n";

/* ---- reproducers ------------------------------------------------------------------ */

/* A queue refuses a kernel of another context when it is queued (before:
 * accepted, and when that context was destroyed before the launch ran,
 * the launch used its freed code: a use after free). A standard kernel,
 * whose program is the context's own, is the sharpest case. */
static void test_queue_refuses_another_contexts_kernel(void **state) {
  (void)state;
  TpkContext *a, *b;
  TpkDevice *adev, *bdev;
  TpkKernel *top;
  TpkQueue *q;
  assert_int_equal(tpk_context_create(&a), TPK_OK);
  assert_int_equal(tpk_context_create(&b), TPK_OK);
  assert_int_equal(tpk_device_open(a, "host", &adev), TPK_OK);
  assert_int_equal(tpk_device_open(b, "host", &bdev), TPK_OK);
  assert_int_equal(tpk_std_kernel(b, "max_all", &top), TPK_OK);
  assert_int_equal(tpk_queue_create(a, &q), TPK_OK);
  int64_t n = 1000, one = 1;
  TpkBuffer *x, *y;
  assert_int_equal(tpk_buffer_create(bdev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(bdev, TPK_F32, 1, &one, &y), TPK_OK);
  TpkLaunch on_b = {.args = (TpkBuffer *[]){x, y}};
  assert_int_equal(tpk_queue_launch(q, top, &on_b), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_queue_launch: kernel 'max_all' belongs to another context than the queue");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_context_destroy(b);
  assert_int_equal(tpk_queue_wait(q), TPK_OK);
  tpk_queue_destroy(q);
  tpk_context_destroy(a);
}

/* A release callback runs on a queue's worker when a queued launch held
 * the last reference to wrapped memory; a garbage-collected caller may
 * destroy its context or a queue from there (the tensor held the last
 * reference to them): the queue that runs it, or another one while
 * another thread destroys the context, which waits for the first queue.
 * None of it may wait for the worker it runs on. The scenario runs on a
 * thread of its own, so that a hang fails the test instead of stopping the
 * suite. */
typedef enum Reentry {
  DESTROY_CONTEXT,     /* the callback destroys the context */
  DESTROY_QUEUE,       /* the queue that runs it */
  DESTROY_OTHER_QUEUE, /* another queue, while the context is destroyed */
} Reentry;

typedef struct Reentrant {
  Reentry what;
  TpkContext *ctx;
  TpkQueue *q, *other;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool released, done;
  TpkStatus waited;
} Reentrant;

static void release_and_destroy(void *user, void *data) {
  Reentrant *r = user;
  free(data);
  if (r->what == DESTROY_CONTEXT) tpk_context_destroy(r->ctx);
  else tpk_queue_destroy(r->what == DESTROY_QUEUE ? r->q : r->other);
  pthread_mutex_lock(&r->lock);
  r->released = true;
  pthread_mutex_unlock(&r->lock);
}

static void *reentry_main(void *arg) {
  Reentrant *r = arg;
  TpkDevice *dev;
  TpkKernel *top, *slow;
  TpkBuffer *x, *y, *m[3];
  TpkEvent *e;
  int64_t n = 100, one = 1, sq[2] = {256, 256};
  float *data = calloc((size_t)n, sizeof *data);
  static float result; /* y's memory: the test's own, readable after the context's end */
  result = 0;
  if (!data || tpk_context_create(&r->ctx) != TPK_OK || tpk_device_open(r->ctx, "host", &dev) != TPK_OK ||
      tpk_std_kernel(r->ctx, "max_all", &top) != TPK_OK || tpk_std_kernel(r->ctx, "matmul", &slow) != TPK_OK ||
      tpk_queue_create(r->ctx, &r->q) != TPK_OK || tpk_queue_create(r->ctx, &r->other) != TPK_OK ||
      tpk_buffer_wrap(dev, TPK_F32, 1, &n, NULL, data, release_and_destroy, r, &x) != TPK_OK ||
      tpk_buffer_wrap(dev, TPK_F32, 1, &one, NULL, &result, NULL, NULL, &y) != TPK_OK)
    abort();
  for (int i = 0; i < 3; i++)
    if (tpk_buffer_create(dev, TPK_F32, 2, sq, &m[i]) != TPK_OK) abort();
  data[7] = 5;
  /* work that keeps the queue busy while the context is destroyed */
  TpkLaunch mm = {.args = m};
  for (int i = 0; r->what == DESTROY_OTHER_QUEUE && i < 4; i++)
    if (tpk_queue_launch(r->q, slow, &mm) != TPK_OK) abort();
  TpkBuffer *args[] = {x, y};
  TpkLaunch L = {.args = args};
  r->waited = tpk_queue_launch(r->q, top, &L);
  if (r->waited == TPK_OK) r->waited = tpk_queue_record(r->q, &e);
  tpk_buffer_destroy(x); /* the queued launch holds the last reference */
  if (r->what == DESTROY_OTHER_QUEUE) tpk_context_destroy(r->ctx);
  if (r->waited == TPK_OK) {
    r->waited = tpk_event_wait(e); /* an event outlives its queue */
    tpk_event_destroy(e);
  }
  if (r->waited == TPK_OK && result != 5) r->waited = TPK_ERR_INTERNAL;
  if (r->what != DESTROY_QUEUE) tpk_queue_destroy(r->q);
  if (r->what != DESTROY_OTHER_QUEUE) tpk_queue_destroy(r->other);
  if (r->what == DESTROY_QUEUE) tpk_context_destroy(r->ctx);
  tpk_buffer_destroy(y);
  for (int i = 0; i < 3; i++) tpk_buffer_destroy(m[i]);
  pthread_mutex_lock(&r->lock);
  r->done = true;
  pthread_cond_signal(&r->cond);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

static void reenter_from_release(Reentry what) {
  static const char *const WHAT[] = {"the context", "the queue", "another queue while the context is destroyed"};
  Reentrant *r = calloc(1, sizeof *r); /* leaked if the scenario hangs: its thread still uses it */
  assert_non_null(r);
  r->what = what;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->cond, NULL);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, reentry_main, r), 0);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&r->lock);
  while (!r->done && pthread_cond_timedwait(&r->cond, &r->lock, &until) == 0) {
  }
  bool done = r->done, released = r->released;
  pthread_mutex_unlock(&r->lock);
  if (!done) fail_msg("destroying %s from a release callback on a queue's worker hangs", WHAT[what]);
  pthread_join(thread, NULL);
  assert_true(released);
  assert_int_equal(r->waited, TPK_OK);
  pthread_cond_destroy(&r->cond);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

static void test_release_callback_destroys_the_context(void **state) {
  (void)state;
  reenter_from_release(DESTROY_CONTEXT);
}

static void test_release_callback_destroys_the_queue(void **state) {
  (void)state;
  reenter_from_release(DESTROY_QUEUE);
}

static void test_release_callback_destroys_a_queue_while_the_context_is_destroyed(void **state) {
  (void)state;
  reenter_from_release(DESTROY_OTHER_QUEUE);
}

/* Contexts on several threads load one kernel's compiled code from the
 * disk cache at once and close it again (dlopen and dlclose of one shared
 * object from several threads), as threads of a process that shares a
 * cache do. Every launch computes y = 2x + a and compiles nothing. */
enum { CACHE_USERS = 4, CACHE_ITERS = 5 };


/* One context's launch of bump at N = 40; false with a message in f. */
static bool launch_cached_bump(Failure *f, int who) {
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  TpkBuffer *x, *y;
  int64_t n = 40;
  if (tpk_context_create(&ctx) != TPK_OK) return failed(f, "tpk_context_create: %s", tpk_last_error());
  bool ok = tpk_device_open(ctx, "host", &dev) == TPK_OK &&
            tpk_program_load_source(ctx, "bump.tpk", BUMP, strlen(BUMP), &prog) == TPK_OK &&
            tpk_program_kernel(prog, "bump", &k) == TPK_OK && tpk_buffer_create(dev, TPK_F32, 1, &n, &x) == TPK_OK &&
            tpk_buffer_create(dev, TPK_F32, 1, &n, &y) == TPK_OK;
  if (!ok) {
    failed(f, "thread %d: %s", who, tpk_last_error());
    tpk_context_destroy(ctx);
    return false;
  }
  float *xv = tpk_buffer_data(x), *yv = tpk_buffer_data(y);
  for (int i = 0; i < n; i++) xv[i] = (float)(i - who);
  TpkBuffer *args[] = {x, NULL, y};
  double scalars[] = {0, who, 0};
  TpkLaunchResult r;
  TpkLaunch L = {.args = args, .scalars = scalars, .result = &r};
  if (tpk_kernel_launch(k, &L) != TPK_OK) ok = failed(f, "thread %d: %s", who, tpk_last_error());
  for (int i = 0; ok && i < n; i++)
    if (yv[i] != xv[i] * 2.0f + (float)who) ok = failed(f, "thread %d: y[%d] is %g", who, i, yv[i]);
  if (ok && (!is_jit_tier(r.tier) || strcmp(r.tier, "tcc") == 0 || tpk_context_compiler_runs(ctx) != 0))
    ok = failed(f, "thread %d: ran on tier '%s' after %d compiler runs; the cache has the code", who,
                r.tier ? r.tier : "(null)", tpk_context_compiler_runs(ctx));
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  return ok;
}

typedef struct CacheUser {
  int id;
  Failure fail;
} CacheUser;

static void *cache_user_main(void *arg) {
  CacheUser *u = arg;
  for (int i = 0; i < CACHE_ITERS && launch_cached_bump(&u->fail, u->id); i++) {
  }
  return NULL;
}

static void test_threads_load_cached_code(void **state) {
  (void)state;
  char *dir = test_temp_dir("tpk-test-concurrency");
  setenv("TPK_CACHE_DIR", dir, 1);
  setenv("TPK_TIER", "cc", 1);
  /* the first build puts the code in the cache */
  TpkContext *ctx;
  TpkProgram *prog;
  TpkKernel *k;
  TpkDevice *dev;
  TpkBuffer *x, *y;
  int64_t n = 40;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "bump.tpk", BUMP, strlen(BUMP), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "bump", &k), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &x), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &y), TPK_OK);
  TpkBuffer *args[] = {x, NULL, y};
  double scalars[] = {0, 1, 0};
  TpkLaunch L = {.args = args, .scalars = scalars};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  assert_int_equal(tpk_context_compiler_runs(ctx), 1);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);

  CacheUser users[CACHE_USERS];
  pthread_t threads[CACHE_USERS];
  for (int t = 0; t < CACHE_USERS; t++) {
    users[t] = (CacheUser){.id = t};
    assert_int_equal(pthread_create(&threads[t], NULL, cache_user_main, &users[t]), 0);
  }
  for (int t = 0; t < CACHE_USERS; t++) pthread_join(threads[t], NULL);
  unsetenv("TPK_CACHE_DIR");
  unsetenv("TPK_TIER");
  test_remove_tree(dir);
  free(dir);
  for (int t = 0; t < CACHE_USERS; t++)
    if (users[t].fail.message[0]) fail_msg("%s", users[t].fail.message);
}

/* ---- a random walk over lifetimes ----------------------------------------------------- */

enum {
  WALKERS = 4,
  WALK_OPS = 150,
  LIVE_CTXS = 3, /* at most this many contexts not destroyed at once */
  MAX_CTXS = 24,
  MAX_PROGS = 48,
  MAX_BUFS = 160,
  MAX_QUEUES = 24,
  MAX_EVENTS = 64,
};

/* The walk's bookkeeping of every handle it made. A handle is used by one
 * thread at a time for what changes it (taken: users == -1), or by several
 * for what does not (users > 0); destroying one takes it. Contexts,
 * programs, queues and events may be shared; buffers are always taken,
 * with every other handle on the same bytes (their group), since a launch
 * writes them. What the caller must never do, use a handle after its own
 * destroy call, the walk never does; every other order it may. */
typedef enum CtxState { CTX_NONE, CTX_LIVE, CTX_CLOSING, CTX_CLOSED } CtxState;

typedef struct WalkCtx {
  TpkContext *h;
  CtxState state;
  int users;
} WalkCtx;

typedef struct WalkProg {
  TpkProgram *h;
  TpkKernel *k;
  int ctx;
  int users;
  bool live;
} WalkProg;

/* Memory the walk allocated and wrapped as a buffer. */
typedef struct Wrap {
  float *data;
  int64_t elems;
  atomic_int releases;
  bool early;        /* released while a buffer on it was live */
  bool wrong;        /* released with another pointer, or without what the last launch wrote */
  /* What elements at.. must hold when the memory is released (NULL:
   * unchecked). Published by the walker that destroys the last handles;
   * read by the release callback, which another walker's end of the
   * context may run at any moment: hence atomic. */
  _Atomic(struct Expect *) expect;
} Wrap;

typedef struct Expect {
  float *values;
  int64_t at, n;
} Expect;

/* The handles on one allocation's bytes: a buffer and its views. */
typedef struct Group {
  atomic_int handles; /* live in the walk's tables */
  bool busy;          /* one of them is taken */
  Wrap *wrap;         /* NULL: tpk allocated them */
} Group;

typedef struct WalkBuf {
  TpkBuffer *h;
  int ctx;
  bool sim;
  int group;
  int64_t elems;
  int64_t at; /* its first element's index in the group's bytes */
  bool live, taken;
} WalkBuf;

typedef struct WalkQueue {
  TpkQueue *h;
  int ctx;
  int users;
  bool live;
} WalkQueue;

typedef struct WalkEvent {
  TpkEvent *h;
  int queue;
  int users;
  bool live;
} WalkEvent;

/* What the walk did that the tally reports: a walk that ran none of it
 * tested little. */
typedef enum Seen {
  SEEN_RAN,                 /* launches that ran */
  SEEN_REFUSED_DESTROYED,   /* refused: the context was destroyed */
  SEEN_REFUSED_CONTEXT,     /* refused: buffers of another context */
  SEEN_REFUSED_DEVICE,      /* refused: buffers on two devices */
  SEEN_DESTROYED_QUEUED,    /* buffers destroyed right after queueing a launch on them */
  SEEN_PROG_DESTROYED_QUEUED, /* programs destroyed right after queueing */
  SEEN_AFTER_CONTEXT,       /* buffers, programs, queues destroyed after their context */
  SEEN_EVENT_AFTER_QUEUE,   /* events waited on or destroyed after their queue */
  SEEN_COUNT
} Seen;

static const char *const SEEN_NAMES[SEEN_COUNT] = {
    "launches ran", "refused (context destroyed)", "refused (another context)", "refused (two devices)",
    "buffers destroyed after queueing", "programs destroyed after queueing", "destroyed after their context",
    "events used after their queue",
};

typedef struct World {
  pthread_mutex_t lock;
  WalkCtx ctxs[MAX_CTXS];
  WalkProg progs[MAX_PROGS];
  WalkBuf bufs[MAX_BUFS];
  Group groups[MAX_BUFS];
  Wrap wraps[MAX_BUFS];
  WalkQueue queues[MAX_QUEUES];
  WalkEvent events[MAX_EVENTS];
  int nctxs, nprogs, nbufs, ngroups, nwraps, nqueues, nevents;
  atomic_int seen[SEEN_COUNT];
} World;

typedef struct Walker {
  World *w;
  uint64_t rng;
  Failure fail;
} Walker;

static void release_wrap(void *user, void *data) {
  Wrap *r = user;
  if (atomic_fetch_add(&r->releases, 1) != 0) return; /* counted; the memory went with the first */
  if (data != r->data) r->wrong = true;
  const Expect *e = atomic_load(&r->expect);
  for (int64_t i = 0; e && i < e->n; i++)
    if (r->data[e->at + i] != e->values[i]) r->wrong = true;
  free(r->data);
}

/* ---- picking handles (under w->lock) ---- */

typedef bool (*Eligible)(const World *w, int i, const void *want);

/* A random i < n with ok(w, i, want), or -1. */
static int pick(uint64_t *rng, const World *w, int n, Eligible ok, const void *want) {
  int chosen = -1, seen = 0;
  for (int i = 0; i < n; i++)
    if (ok(w, i, want) && below(rng, ++seen) == 0) chosen = i;
  return chosen;
}

static bool ctx_usable(const World *w, int i, const void *want) {
  (void)want;
  return w->ctxs[i].state == CTX_LIVE && w->ctxs[i].users >= 0;
}
static bool ctx_free(const World *w, int i, const void *want) {
  (void)want;
  return w->ctxs[i].state == CTX_LIVE && w->ctxs[i].users == 0;
}
/* A program; `want` points at the context it should be of: ANY_CTX, or
 * LIVE_CTX (one not destroyed). */
enum { ANY_CTX = -1, LIVE_CTX = -2 };
static bool prog_of(const World *w, int i, int ctx) {
  int c = w->progs[i].ctx;
  return w->progs[i].live && (ctx == ANY_CTX || (ctx == LIVE_CTX && w->ctxs[c].state == CTX_LIVE) || c == ctx);
}
static bool prog_shareable(const World *w, int i, const void *want) {
  return prog_of(w, i, *(const int *)want) && w->progs[i].users >= 0;
}
static bool prog_free(const World *w, int i, const void *want) {
  return prog_of(w, i, *(const int *)want) && w->progs[i].users == 0;
}
/* A queue; `want` is NULL (any) or points at LIVE_CTX. */
static bool queue_shareable(const World *w, int i, const void *want) {
  return w->queues[i].live && w->queues[i].users >= 0 && (!want || w->ctxs[w->queues[i].ctx].state == CTX_LIVE);
}
static bool queue_free(const World *w, int i, const void *want) {
  (void)want;
  return w->queues[i].live && w->queues[i].users == 0;
}
static bool event_shareable(const World *w, int i, const void *want) {
  (void)want;
  return w->events[i].live && w->events[i].users >= 0;
}
static bool event_free(const World *w, int i, const void *want) {
  (void)want;
  return w->events[i].live && w->events[i].users == 0;
}

typedef struct BufWant {
  int ctx;        /* -1: any */
  int not_ctx;    /* -1: none */
  int sim;        /* -1: any, else 0 host, 1 sim */
  int64_t elems;  /* 0: any */
  int not_group;  /* -1: none */
} BufWant;

static bool buf_free(const World *w, int i, const void *want) {
  const BufWant *q = want;
  const WalkBuf *b = &w->bufs[i];
  return b->live && !b->taken && !w->groups[b->group].busy && (q->ctx < 0 || b->ctx == q->ctx) &&
         (q->not_ctx < 0 || b->ctx != q->not_ctx) && (q->sim < 0 || b->sim == (q->sim == 1)) &&
         (!q->elems || b->elems == q->elems) && (q->not_group < 0 || b->group != q->not_group);
}

static int take_buf(Walker *W, const BufWant *want) {
  World *w = W->w;
  int i = pick(&W->rng, w, w->nbufs, buf_free, want);
  if (i >= 0) {
    w->bufs[i].taken = true;
    w->groups[w->bufs[i].group].busy = true;
  }
  return i;
}

static void give_back_buf(World *w, int i) {
  if (i < 0) return;
  w->bufs[i].taken = false;
  w->groups[w->bufs[i].group].busy = false;
}

/* A taken buffer out of the tables (the caller destroys it after). */
static void count(World *w, Seen what, int n);

static bool ctx_gone(const World *w, int c) { return w->ctxs[c].state != CTX_LIVE; }

static void forget_buf(World *w, int i) {
  WalkBuf *b = &w->bufs[i];
  count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, b->ctx));
  b->live = false;
  b->taken = false;
  w->groups[b->group].busy = false;
  atomic_fetch_sub(&w->groups[b->group].handles, 1);
}

/* ---- what a launch must do ---- */

/* The errors a wait may report: those of launches the walk meant to fail,
 * queued by any thread (a queue's first error goes to whoever waits). */
static bool expected_error(const char *message) {
  return strstr(message, "belongs to another context") || strstr(message, "a launch runs on one device");
}

/* Why a launch of a kernel of context kc on buffers x and y must be
 * refused (NULL: it must run). */
static const char *refusal(const World *w, int kc, int x, int y) {
  if (w->bufs[x].ctx != kc || w->bufs[y].ctx != kc) return "belongs to another context";
  if (w->bufs[x].sim != w->bufs[y].sim) return "a launch runs on one device";
  return NULL;
}

/* A launch's status against what it had to do. `closed`: the kernel's (or
 * the queue's) context was destroyed before the call; `closing`: it may
 * have been during it. */
static bool check_status(Walker *W, const char *what, TpkStatus st, const char *refused, bool closed, bool closing) {
  const char *message = tpk_last_error();
  if (closed || (closing && st != TPK_OK && strstr(message, "context was destroyed"))) {
    if (st == TPK_ERR_INVALID && strstr(message, "context was destroyed")) return true;
    if (!closed) return failed(&W->fail, "%s: %s", what, message);
    return failed(&W->fail, "%s: accepted (%d: %s) though its context was destroyed", what, st, message);
  }
  if (refused) {
    if (st == TPK_ERR_INVALID && strstr(message, refused)) return true;
    return failed(&W->fail, "%s: expected a refusal (%s), got %d: %s", what, refused, st, st ? message : "ok");
  }
  if (st != TPK_OK) return failed(&W->fail, "%s: %s", what, message);
  return true;
}

/* y holds `want` (n elements), or what it held before the launch. */
/* A buffer whose context was destroyed has no memory left to read
 * (tpk_buffer_data is NULL), and what it should hold is then unknown
 * (want NULL): nothing to compare. Every buffer of a live context is. */
static bool check_values(Walker *W, const char *what, const float *got, const float *want, int64_t n) {
  if (!got || !want) return true;
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) return failed(&W->fail, "%s: element %lld is %g, not %g", what, (long long)i, got[i], want[i]);
  return true;
}

static void count(World *w, Seen what, int n) { atomic_fetch_add(&w->seen[what], n); }

/* n refusals with this message in the tally. */
static void count_refused(World *w, const char *message, int n) {
  if (strstr(message, "context was destroyed")) count(w, SEEN_REFUSED_DESTROYED, n);
  else if (strstr(message, "belongs to another context")) count(w, SEEN_REFUSED_CONTEXT, n);
  else if (strstr(message, "a launch runs on one device")) count(w, SEEN_REFUSED_DEVICE, n);
}

static void count_launch(World *w, TpkStatus st) {
  if (st == TPK_OK) count(w, SEEN_RAN, 1);
  else count_refused(w, tpk_last_error(), 1);
}

/* ---- the walk's steps ---- */

static void walk_ctx_create(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int live = 0;
  for (int i = 0; i < w->nctxs; i++) live += w->ctxs[i].state == CTX_LIVE;
  int slot = live < LIVE_CTXS && w->nctxs < MAX_CTXS ? w->nctxs++ : -1;
  pthread_mutex_unlock(&w->lock);
  if (slot < 0) return;
  TpkContext *ctx;
  if (tpk_context_create(&ctx) != TPK_OK) {
    failed(&W->fail, "tpk_context_create: %s", tpk_last_error());
    return;
  }
  pthread_mutex_lock(&w->lock);
  w->ctxs[slot] = (WalkCtx){.h = ctx, .state = CTX_LIVE};
  pthread_mutex_unlock(&w->lock);
}

static void walk_ctx_destroy(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int c = pick(&W->rng, w, w->nctxs, ctx_free, NULL);
  if (c >= 0) {
    w->ctxs[c].state = CTX_CLOSING;
    w->ctxs[c].users = -1;
  }
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  tpk_context_destroy(w->ctxs[c].h);
  pthread_mutex_lock(&w->lock);
  w->ctxs[c].state = CTX_CLOSED;
  w->ctxs[c].users = 0;
  pthread_mutex_unlock(&w->lock);
}

/* Use context c's handle (under w->lock): a shared use, until done_ctx. */
static int use_ctx(Walker *W) {
  World *w = W->w;
  int c = pick(&W->rng, w, w->nctxs, ctx_usable, NULL);
  if (c >= 0) w->ctxs[c].users++;
  return c;
}

static void done_ctx(World *w, int c) {
  pthread_mutex_lock(&w->lock);
  w->ctxs[c].users--;
  pthread_mutex_unlock(&w->lock);
}

static void walk_prog_load(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int c = w->nprogs < MAX_PROGS ? use_ctx(W) : -1;
  int slot = c >= 0 ? w->nprogs++ : -1;
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  TpkProgram *prog = NULL;
  TpkKernel *k = NULL;
  if (tpk_program_load_source(w->ctxs[c].h, "bump.tpk", BUMP, strlen(BUMP), &prog) != TPK_OK ||
      tpk_program_kernel(prog, "bump", &k) != TPK_OK)
    failed(&W->fail, "loading a program: %s", tpk_last_error());
  done_ctx(w, c);
  pthread_mutex_lock(&w->lock);
  w->progs[slot] = (WalkProg){.h = prog, .k = k, .ctx = c, .live = prog != NULL};
  pthread_mutex_unlock(&w->lock);
}

static void walk_prog_destroy(Walker *W) {
  World *w = W->w;
  int any = ANY_CTX;
  pthread_mutex_lock(&w->lock);
  int p = pick(&W->rng, w, w->nprogs, prog_free, &any);
  if (p >= 0) {
    w->progs[p].live = false;
    count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, w->progs[p].ctx));
  }
  pthread_mutex_unlock(&w->lock);
  if (p >= 0) tpk_program_destroy(w->progs[p].h);
}

/* A new buffer (created, or wrapping memory of the walk's) of 16, 32, 40
 * or 80 elements x[i] = base + i, on the host or sim:v5e. */
static void walk_buf_new(Walker *W, bool wrap) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int c = w->nbufs < MAX_BUFS ? use_ctx(W) : -1;
  int slot = -1, group = -1;
  Wrap *r = NULL;
  if (c >= 0) {
    slot = w->nbufs++;
    group = w->ngroups++;
    if (wrap) r = &w->wraps[w->nwraps++];
  }
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  bool sim = below(&W->rng, 2);
  int64_t elems = (below(&W->rng, 2) ? 16 : 40) * (below(&W->rng, 4) ? 1 : 2);
  float base = (float)(below(&W->rng, 41) - 20);
  TpkDevice *dev;
  TpkBuffer *b = NULL;
  if (tpk_device_open(w->ctxs[c].h, sim ? "sim:v5e" : "host", &dev) != TPK_OK) {
    failed(&W->fail, "tpk_device_open: %s", tpk_last_error());
  } else if (wrap) {
    float *data = malloc((size_t)elems * sizeof *data);
    if (!data) abort();
    for (int64_t i = 0; i < elems; i++) data[i] = base + (float)i;
    r->data = data;
    r->elems = elems;
    if (tpk_buffer_wrap(dev, TPK_F32, 1, &elems, NULL, data, release_wrap, r, &b) != TPK_OK) {
      failed(&W->fail, "tpk_buffer_wrap: %s", tpk_last_error());
      free(data);
      r->data = NULL;
      atomic_store(&r->releases, 1); /* nothing to release */
    }
  } else if (tpk_buffer_create(dev, TPK_F32, 1, &elems, &b) == TPK_OK) {
    float *data = tpk_buffer_data(b);
    for (int64_t i = 0; i < elems; i++) data[i] = base + (float)i;
  } else {
    failed(&W->fail, "tpk_buffer_create: %s", tpk_last_error());
  }
  done_ctx(w, c);
  pthread_mutex_lock(&w->lock);
  w->groups[group].wrap = r;
  atomic_store(&w->groups[group].handles, b != NULL);
  w->bufs[slot] = (WalkBuf){.h = b, .ctx = c, .sim = sim, .group = group, .elems = elems, .live = b != NULL};
  pthread_mutex_unlock(&w->lock);
}

/* A view of a buffer: its second half, or all of it. */
static void walk_buf_view(Walker *W) {
  World *w = W->w;
  BufWant any = {-1, -1, -1, 0, -1};
  pthread_mutex_lock(&w->lock);
  int base = w->nbufs < MAX_BUFS ? take_buf(W, &any) : -1;
  int slot = base >= 0 ? w->nbufs++ : -1;
  pthread_mutex_unlock(&w->lock);
  if (base < 0) return;
  WalkBuf *b = &w->bufs[base];
  int64_t elems = b->elems == 32 || b->elems == 80 ? b->elems / 2 : b->elems;
  int64_t at = b->elems - elems;
  TpkBuffer *v = NULL;
  if (tpk_buffer_view(b->h, (size_t)at * sizeof(float), TPK_F32, 1, &elems, &v) != TPK_OK)
    failed(&W->fail, "tpk_buffer_view: %s", tpk_last_error());
  pthread_mutex_lock(&w->lock);
  w->bufs[slot] = (WalkBuf){.h = v, .ctx = b->ctx, .sim = b->sim, .group = b->group, .elems = elems, .at = b->at + at,
                            .live = v != NULL};
  if (v) atomic_fetch_add(&w->groups[b->group].handles, 1);
  give_back_buf(w, base);
  pthread_mutex_unlock(&w->lock);
}

static void walk_buf_destroy(Walker *W) {
  World *w = W->w;
  BufWant any = {-1, -1, -1, 0, -1};
  pthread_mutex_lock(&w->lock);
  int b = take_buf(W, &any);
  if (b >= 0) forget_buf(w, b);
  pthread_mutex_unlock(&w->lock);
  if (b >= 0) tpk_buffer_destroy(w->bufs[b].h);
}

/* Buffers x and y for a launch of a kernel of context kc: mostly right
 * (kc's, one device), sometimes of another context or on two devices. */
static void take_launch_bufs(Walker *W, int kc, int *x, int *y) {
  World *w = W->w;
  int how = below(&W->rng, 20);
  BufWant wx = {how == 0 ? -1 : kc, how == 0 ? kc : -1, -1, 0, -1};
  *x = take_buf(W, &wx);
  *y = -1;
  if (*x < 0) return;
  const WalkBuf *bx = &w->bufs[*x];
  BufWant wy = {how == 1 ? -1 : kc, how == 1 ? kc : -1, how == 2 ? !bx->sim : bx->sim, bx->elems, bx->group};
  *y = take_buf(W, &wy);
  if (*y < 0) {
    give_back_buf(w, *x);
    *x = -1;
  }
}

/* A buffer's values, read while another walker may be ending its context
 * (tpk_buffer_read copies under the device's lock; a pointer from
 * tpk_buffer_data would not be safe then). NULL when the memory is gone. */
static float *read_floats(TpkBuffer *b, int64_t n) {
  float *v = malloc((size_t)n * sizeof *v);
  if (!v) abort();
  if (tpk_buffer_read(b, v, (size_t)n * sizeof *v) == TPK_OK) return v;
  free(v);
  return NULL;
}

/* check_values against what b holds now. */
static bool check_buffer(Walker *W, const char *what, TpkBuffer *b, const float *want, int64_t n) {
  float *got = read_floats(b, n);
  bool ok = check_values(W, what, got, want, n);
  free(got);
  return ok;
}

static float *copy_floats(const float *v, int64_t n) {
  if (!v) return NULL;
  float *c = malloc((size_t)n * sizeof *c);
  if (!c) abort();
  memcpy(c, v, (size_t)n * sizeof *c);
  return c;
}

/* What y must hold after y = 2x + a (or, refused, what it holds now). */
static float *expected_y(const WalkBuf *x, const WalkBuf *y, float a, bool runs) {
  float *xv = read_floats(x->h, x->elems), *want = read_floats(y->h, y->elems);
  if (!xv || !want) { /* a context was destroyed: its memory is gone */
    free(xv);
    free(want);
    return NULL;
  }
  for (int64_t i = 0; runs && i < y->elems; i++) want[i] = xv[i] * 2.0f + a;
  free(xv);
  return want;
}

/* bump(x, a) -> y, synchronously. */
static void walk_launch(Walker *W) {
  World *w = W->w;
  int x = -1, y = -1, which = below(&W->rng, 5) ? LIVE_CTX : ANY_CTX;
  pthread_mutex_lock(&w->lock);
  int p = pick(&W->rng, w, w->nprogs, prog_shareable, &which);
  int kc = p >= 0 ? w->progs[p].ctx : -1;
  if (p >= 0) take_launch_bufs(W, kc, &x, &y);
  if (y < 0) p = -1;
  if (p >= 0) w->progs[p].users++;
  CtxState before = p >= 0 ? w->ctxs[kc].state : CTX_NONE;
  const char *refused = p >= 0 ? refusal(w, kc, x, y) : NULL;
  pthread_mutex_unlock(&w->lock);
  if (p < 0) return;
  const WalkBuf *bx = &w->bufs[x], *by = &w->bufs[y];
  float a = (float)(below(&W->rng, 9) - 4);
  float *runs = expected_y(bx, by, a, true), *stays = expected_y(bx, by, a, false);
  TpkBuffer *args[] = {bx->h, NULL, by->h};
  double scalars[] = {0, a, 0};
  TpkLaunchResult r;
  TpkLaunch L = {.args = args, .scalars = scalars, .result = &r};
  TpkStatus st = tpk_kernel_launch(w->progs[p].k, &L);
  pthread_mutex_lock(&w->lock);
  bool closing = w->ctxs[kc].state != CTX_LIVE;
  pthread_mutex_unlock(&w->lock);
  char what[96];
  snprintf(what, sizeof what, "a launch of bump (context %d, buffers of %d and %d)", kc, bx->ctx, by->ctx);
  if (check_status(W, what, st, refused, before == CTX_CLOSED, closing)) {
    check_buffer(W, what, by->h, st == TPK_OK ? runs : stays, by->elems);
    if (st == TPK_OK && (!is_jit_tier(r.tier) || strcmp(r.tunes, "") != 0))
      failed(&W->fail, "%s: tier '%s', tunes '%s'", what, r.tier ? r.tier : "(null)", r.tunes);
    if (st == TPK_OK) check_sim_result(&W->fail, what, &r, by->sim);
  }
  count_launch(w, st);
  free(runs);
  free(stays);
  pthread_mutex_lock(&w->lock);
  w->progs[p].users--;
  give_back_buf(w, x);
  give_back_buf(w, y);
  pthread_mutex_unlock(&w->lock);
}

/* The standard library's max_all (its program is the context's own) into
 * a one-element view of y. */
static void walk_std_launch(Walker *W) {
  World *w = W->w;
  int x = -1, y = -1;
  pthread_mutex_lock(&w->lock);
  int c = use_ctx(W);
  if (c >= 0) take_launch_bufs(W, c, &x, &y);
  if (c >= 0 && y < 0) {
    w->ctxs[c].users--;
    c = -1;
  }
  const char *refused = c >= 0 ? refusal(w, c, x, y) : NULL;
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  const WalkBuf *bx = &w->bufs[x], *by = &w->bufs[y];
  TpkKernel *k;
  TpkBuffer *top = NULL;
  int64_t one = 1;
  char what[96];
  snprintf(what, sizeof what, "max_all (context %d, buffers of %d and %d)", c, bx->ctx, by->ctx);
  if (tpk_std_kernel(w->ctxs[c].h, "max_all", &k) != TPK_OK || tpk_buffer_view(by->h, 0, TPK_F32, 1, &one, &top) != TPK_OK) {
    failed(&W->fail, "%s: %s", what, tpk_last_error());
  } else {
    float *xv = read_floats(bx->h, bx->elems), *tv = read_floats(top, 1);
    float want = refused && tv ? *tv : -INFINITY;
    for (int64_t i = 0; xv && !refused && i < bx->elems; i++) want = fmaxf(want, xv[i]);
    TpkBuffer *args[] = {bx->h, top};
    TpkLaunchResult r;
    TpkLaunch L = {.args = args, .result = &r};
    TpkStatus st = tpk_kernel_launch(k, &L);
    if (check_status(W, what, st, refused, false, false)) {
      check_buffer(W, what, top, xv && (tv || !refused) ? &want : NULL, 1);
      if (st == TPK_OK && (!r.tier || strcmp(r.tier, "aot") != 0)) failed(&W->fail, "%s: tier '%s'", what, r.tier ? r.tier : "(null)");
      if (st == TPK_OK) check_sim_result(&W->fail, what, &r, by->sim);
    }
    count_launch(w, st);
    free(xv);
    free(tv);
  }
  tpk_buffer_destroy(top);
  pthread_mutex_lock(&w->lock);
  w->ctxs[c].users--;
  give_back_buf(w, x);
  give_back_buf(w, y);
  pthread_mutex_unlock(&w->lock);
}

static void walk_queue_create(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int c = w->nqueues < MAX_QUEUES ? use_ctx(W) : -1;
  int slot = c >= 0 ? w->nqueues++ : -1;
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  TpkQueue *q = NULL;
  if (tpk_queue_create(w->ctxs[c].h, &q) != TPK_OK) failed(&W->fail, "tpk_queue_create: %s", tpk_last_error());
  done_ctx(w, c);
  pthread_mutex_lock(&w->lock);
  w->queues[slot] = (WalkQueue){.h = q, .ctx = c, .live = q != NULL};
  pthread_mutex_unlock(&w->lock);
}

static void walk_queue_destroy(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int q = pick(&W->rng, w, w->nqueues, queue_free, NULL);
  if (q >= 0) {
    w->queues[q].live = false;
    count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, w->queues[q].ctx));
  }
  pthread_mutex_unlock(&w->lock);
  if (q >= 0) tpk_queue_destroy(w->queues[q].h);
}

/* An event's or a queue's wait: fine, or an error a launch meant to fail
 * left (on a shared queue, whoever waits next sees it). */
static void check_wait(Walker *W, const char *what, TpkStatus st) {
  if (st != TPK_OK && !expected_error(tpk_last_error())) failed(&W->fail, "%s: %s", what, tpk_last_error());
}

static void walk_queue_wait(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int q = pick(&W->rng, w, w->nqueues, queue_shareable, NULL);
  if (q >= 0) w->queues[q].users++;
  pthread_mutex_unlock(&w->lock);
  if (q < 0) return;
  check_wait(W, "tpk_queue_wait", tpk_queue_wait(w->queues[q].h));
  pthread_mutex_lock(&w->lock);
  w->queues[q].users--;
  pthread_mutex_unlock(&w->lock);
}

/* An event on queue q (shared by the caller), kept in the tables. */
static TpkEvent *record_event(Walker *W, int q) {
  World *w = W->w;
  TpkEvent *e;
  if (tpk_queue_record(w->queues[q].h, &e) != TPK_OK) {
    failed(&W->fail, "tpk_queue_record: %s", tpk_last_error());
    return NULL;
  }
  pthread_mutex_lock(&w->lock);
  bool kept = w->nevents < MAX_EVENTS;
  if (kept) w->events[w->nevents++] = (WalkEvent){.h = e, .queue = q, .users = 1, .live = true};
  pthread_mutex_unlock(&w->lock);
  if (kept) return e;
  tpk_event_destroy(e); /* the table is full */
  return NULL;
}

static void done_event(World *w, TpkEvent *e) {
  pthread_mutex_lock(&w->lock);
  for (int i = 0; i < w->nevents; i++)
    if (w->events[i].h == e && w->events[i].live) w->events[i].users--;
  pthread_mutex_unlock(&w->lock);
}

static void walk_record(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int q = pick(&W->rng, w, w->nqueues, queue_shareable, NULL);
  if (q >= 0) w->queues[q].users++;
  pthread_mutex_unlock(&w->lock);
  if (q < 0) return;
  TpkEvent *e = record_event(W, q);
  if (e) done_event(w, e);
  pthread_mutex_lock(&w->lock);
  w->queues[q].users--;
  pthread_mutex_unlock(&w->lock);
}

static void walk_event_wait(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int e = pick(&W->rng, w, w->nevents, event_shareable, NULL);
  if (e >= 0) {
    w->events[e].users++;
    count(w, SEEN_EVENT_AFTER_QUEUE, !w->queues[w->events[e].queue].live);
  }
  pthread_mutex_unlock(&w->lock);
  if (e < 0) return;
  check_wait(W, "tpk_event_wait", tpk_event_wait(w->events[e].h));
  if (!tpk_event_done(w->events[e].h)) failed(&W->fail, "an event waited for is not done");
  pthread_mutex_lock(&w->lock);
  w->events[e].users--;
  pthread_mutex_unlock(&w->lock);
}

static void walk_event_destroy(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int e = pick(&W->rng, w, w->nevents, event_free, NULL);
  if (e >= 0) {
    w->events[e].live = false;
    count(w, SEEN_EVENT_AFTER_QUEUE, !w->queues[w->events[e].queue].live);
  }
  pthread_mutex_unlock(&w->lock);
  if (e >= 0) tpk_event_destroy(w->events[e].h);
}

/* Queue a launch one to three times on a queue, then either wait and
 * check y, or destroy x and y at once (when no other handle looks at their
 * bytes) and let the release callback of a wrapped y check what the launch
 * wrote. The launch is bump of a program (which this step may destroy
 * right after queueing), or the standard transpose of a context (whose
 * handle this step stops using right after queueing) on views of x and y
 * as [1, n] and [n, 1], destroyed right after queueing: y = x. */
static void walk_queue_launch(Walker *W) {
  World *w = W->w;
  int x = -1, y = -1, p = -1, kc = -1;
  bool std = below(&W->rng, 4) == 0, destroy_prog = !std && below(&W->rng, 3) == 0;
  int live = LIVE_CTX;
  pthread_mutex_lock(&w->lock);
  int q = pick(&W->rng, w, w->nqueues, queue_shareable, below(&W->rng, 5) ? &live : NULL);
  int qc = q >= 0 ? w->queues[q].ctx : -1;
  int want_ctx = below(&W->rng, 5) ? qc : ANY_CTX;
  if (q >= 0 && std) {
    kc = want_ctx >= 0 && ctx_usable(w, want_ctx, NULL) ? want_ctx : pick(&W->rng, w, w->nctxs, ctx_usable, NULL);
  } else if (q >= 0) {
    p = pick(&W->rng, w, w->nprogs, destroy_prog ? prog_free : prog_shareable, &want_ctx);
    kc = p >= 0 ? w->progs[p].ctx : -1;
  }
  if (kc >= 0) take_launch_bufs(W, kc, &x, &y);
  if (y < 0) kc = -1;
  if (kc >= 0) {
    w->queues[q].users++;
    if (std) w->ctxs[kc].users++;
    else if (destroy_prog) w->progs[p].live = false;
    else w->progs[p].users++;
  }
  CtxState before = kc >= 0 ? w->ctxs[qc].state : CTX_NONE;
  /* a kernel of another context than the queue's is refused when queued */
  const char *refused = kc < 0 ? NULL : kc != qc ? "belongs to another context" : refusal(w, kc, x, y);
  pthread_mutex_unlock(&w->lock);
  if (kc < 0) return;
  const WalkBuf *bx = &w->bufs[x], *by = &w->bufs[y];
  float a = std ? 0 : (float)(below(&W->rng, 9) - 4);
  float *runs = expected_y(bx, by, a, !refused), *stays = expected_y(bx, by, a, false);
  float *xv = std ? read_floats(bx->h, bx->elems) : NULL;
  if (runs && xv) memcpy(runs, xv, (size_t)bx->elems * sizeof(float)); /* the transpose copies */
  free(xv);
  TpkKernel *k = NULL;
  TpkBuffer *args[3] = {bx->h, NULL, by->h}, *views[2] = {NULL, NULL};
  double scalars[] = {0, a, 0};
  TpkLaunch L = {.args = args, .scalars = scalars};
  char what[160];
  snprintf(what, sizeof what, "a queued launch of %s (queue of context %d, kernel of %d, buffers of %d and %d)",
           std ? "transpose" : "bump", qc, kc, bx->ctx, by->ctx);
  if (std) {
    int64_t row[2] = {1, bx->elems}, col[2] = {by->elems, 1};
    if (tpk_std_kernel(w->ctxs[kc].h, "transpose", &k) != TPK_OK ||
        tpk_buffer_view(bx->h, 0, TPK_F32, 2, row, &views[0]) != TPK_OK ||
        tpk_buffer_view(by->h, 0, TPK_F32, 2, col, &views[1]) != TPK_OK)
      failed(&W->fail, "%s: %s", what, tpk_last_error());
    args[0] = views[0];
    args[1] = views[1];
    L.scalars = NULL;
  } else {
    k = w->progs[p].k;
  }
  bool ready = k && (!std || views[1]);
  int queued = 0, times = ready ? 1 + below(&W->rng, 3) : 0;
  for (int i = 0; i < times; i++) {
    TpkStatus st = tpk_queue_launch(w->queues[q].h, k, &L);
    pthread_mutex_lock(&w->lock);
    bool closing = w->ctxs[qc].state != CTX_LIVE;
    pthread_mutex_unlock(&w->lock);
    /* bad buffers may be refused now or when the launch runs */
    if (st != TPK_OK && refused && strstr(tpk_last_error(), refused)) {
      count_launch(w, st);
      continue;
    }
    if (st != TPK_OK) count_launch(w, st);
    check_status(W, what, st, NULL, before == CTX_CLOSED, closing);
    queued += st == TPK_OK;
  }
  /* what the launches use, gone at once: the queue holds them */
  tpk_buffer_destroy(views[0]);
  tpk_buffer_destroy(views[1]);
  if (std) done_ctx(w, kc);
  if (destroy_prog) {
    count(w, SEEN_PROG_DESTROYED_QUEUED, queued > 0);
    tpk_program_destroy(w->progs[p].h);
  }
  const float *want = queued && !refused ? runs : stays;
  /* destroy x and y now, or wait and look at y */
  pthread_mutex_lock(&w->lock);
  bool sole = atomic_load(&w->groups[bx->group].handles) == 1 && atomic_load(&w->groups[by->group].handles) == 1;
  bool now = sole && below(&W->rng, 2);
  Wrap *wy = w->groups[by->group].wrap;
  if (now && wy && want) { /* the release callback checks y's bytes */
    Expect *e = malloc(sizeof *e);
    if (!e) abort();
    *e = (Expect){.values = copy_floats(want, by->elems), .at = by->at, .n = by->elems};
    atomic_store(&wy->expect, e);
  }
  if (now) {
    count(w, SEEN_DESTROYED_QUEUED, queued ? 2 : 0);
    forget_buf(w, x);
    forget_buf(w, y);
  }
  pthread_mutex_unlock(&w->lock);
  if (now) {
    tpk_buffer_destroy(bx->h);
    tpk_buffer_destroy(by->h);
  } else {
    TpkEvent *e = below(&W->rng, 2) ? record_event(W, q) : NULL;
    check_wait(W, what, e ? tpk_event_wait(e) : tpk_queue_wait(w->queues[q].h));
    if (e) done_event(w, e);
    check_buffer(W, what, by->h, want, by->elems);
  }
  if (refused) count_refused(w, refused, queued); /* when they ran */
  else count(w, SEEN_RAN, queued);
  free(runs);
  free(stays);
  pthread_mutex_lock(&w->lock);
  w->queues[q].users--;
  if (!std && !destroy_prog) w->progs[p].users--;
  if (!now) {
    give_back_buf(w, x);
    give_back_buf(w, y);
  }
  pthread_mutex_unlock(&w->lock);
}

/* Ask a context what it is doing: wait for its background builds, read a
 * device's memory (what a caller checks before it allocates). */
static void walk_ask_ctx(Walker *W) {
  World *w = W->w;
  pthread_mutex_lock(&w->lock);
  int c = use_ctx(W);
  pthread_mutex_unlock(&w->lock);
  if (c < 0) return;
  tpk_context_wait_compiles(w->ctxs[c].h);
  TpkDevice *dev;
  uint64_t capacity, used;
  if (tpk_device_open(w->ctxs[c].h, "sim:v5e", &dev) != TPK_OK) {
    failed(&W->fail, "tpk_device_open: %s", tpk_last_error());
  } else {
    tpk_device_memory(dev, &capacity, &used);
    if (used > capacity) failed(&W->fail, "sim:v5e uses %llu bytes of its %llu", (unsigned long long)used, (unsigned long long)capacity);
  }
  done_ctx(w, c);
}

typedef struct Step {
  void (*run)(Walker *W);
  int weight;
} Step;

static void walk_buf_create(Walker *W) { walk_buf_new(W, false); }
static void walk_buf_wrap(Walker *W) { walk_buf_new(W, true); }

static const Step STEPS[] = {
    {walk_ctx_create, 4},    {walk_ctx_destroy, 1},  {walk_prog_load, 5},     {walk_prog_destroy, 2},
    {walk_buf_create, 8},    {walk_buf_wrap, 6},     {walk_buf_view, 4},      {walk_buf_destroy, 5},
    {walk_launch, 12},       {walk_std_launch, 4},   {walk_queue_create, 3},  {walk_queue_destroy, 2},
    {walk_queue_launch, 12}, {walk_record, 3},       {walk_event_wait, 3},    {walk_event_destroy, 3},
    {walk_queue_wait, 2},    {walk_ask_ctx, 2},
};

static void *walker_main(void *arg) {
  Walker *W = arg;
  int total = 0;
  for (size_t i = 0; i < TPK_ARRAY_LEN(STEPS); i++) total += STEPS[i].weight;
  for (int op = 0; op < WALK_OPS && !W->fail.message[0]; op++) {
    int r = below(&W->rng, total);
    size_t s = 0;
    while (r >= STEPS[s].weight) r -= STEPS[s++].weight;
    STEPS[s].run(W);
  }
  return NULL;
}

/* Whatever is left, destroyed in a random order. */
static void destroy_the_rest(World *w, uint64_t *rng) {
  enum { CTX, PROG, BUF, QUEUE, EVENT };
  typedef struct Left {
    int kind, i;
  } Left;
  Left left[MAX_CTXS + MAX_PROGS + MAX_BUFS + MAX_QUEUES + MAX_EVENTS];
  int n = 0;
  for (int i = 0; i < w->nctxs; i++)
    if (w->ctxs[i].state == CTX_LIVE) left[n++] = (Left){CTX, i};
  for (int i = 0; i < w->nprogs; i++)
    if (w->progs[i].live) left[n++] = (Left){PROG, i};
  for (int i = 0; i < w->nbufs; i++)
    if (w->bufs[i].live) left[n++] = (Left){BUF, i};
  for (int i = 0; i < w->nqueues; i++)
    if (w->queues[i].live) left[n++] = (Left){QUEUE, i};
  for (int i = 0; i < w->nevents; i++)
    if (w->events[i].live) left[n++] = (Left){EVENT, i};
  for (int i = n - 1; i > 0; i--) {
    int j = below(rng, i + 1);
    Left t = left[i];
    left[i] = left[j];
    left[j] = t;
  }
  for (int i = 0; i < n; i++) {
    int at = left[i].i;
    switch (left[i].kind) {
    case CTX:
      w->ctxs[at].state = CTX_CLOSED;
      tpk_context_destroy(w->ctxs[at].h);
      break;
    case PROG:
      count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, w->progs[at].ctx));
      tpk_program_destroy(w->progs[at].h);
      break;
    case BUF:
      count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, w->bufs[at].ctx));
      atomic_fetch_sub(&w->groups[w->bufs[at].group].handles, 1);
      tpk_buffer_destroy(w->bufs[at].h);
      break;
    case QUEUE:
      count(w, SEEN_AFTER_CONTEXT, ctx_gone(w, w->queues[at].ctx));
      w->queues[at].live = false;
      tpk_queue_destroy(w->queues[at].h);
      break;
    case EVENT:
      count(w, SEEN_EVENT_AFTER_QUEUE, !w->queues[w->events[at].queue].live);
      tpk_event_destroy(w->events[at].h);
      break;
    }
  }
}

/* Aborts the process when a walk hangs (a lost wakeup, a deadlock): a
 * test that never returns says nothing. */
typedef struct Watchdog {
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  bool done;
  uint64_t seed;
} Watchdog;

static void *watchdog_main(void *arg) {
  Watchdog *d = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 300;
  pthread_mutex_lock(&d->lock);
  while (!d->done)
    if (pthread_cond_timedwait(&d->done_cond, &d->lock, &until) != 0 && !d->done) {
      fprintf(stderr, "the random walk with seed %llu hangs\n", (unsigned long long)d->seed);
      abort();
    }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

static void random_walk(uint64_t seed) {
  World *w = calloc(1, sizeof *w);
  assert_non_null(w);
  pthread_mutex_init(&w->lock, NULL);
  for (int i = 0; i < MAX_BUFS; i++) {
    atomic_init(&w->wraps[i].releases, 0);
    atomic_init(&w->wraps[i].expect, NULL);
    atomic_init(&w->groups[i].handles, 0);
  }
  for (int i = 0; i < SEEN_COUNT; i++) atomic_init(&w->seen[i], 0);
  Watchdog dog = {.seed = seed};
  pthread_mutex_init(&dog.lock, NULL);
  pthread_cond_init(&dog.done_cond, NULL);
  pthread_t dog_thread;
  assert_int_equal(pthread_create(&dog_thread, NULL, watchdog_main, &dog), 0);
  Walker walkers[WALKERS];
  pthread_t threads[WALKERS];
  for (int t = 0; t < WALKERS; t++) {
    walkers[t] = (Walker){.w = w, .rng = seed * 1000003 + (uint64_t)t};
    assert_int_equal(pthread_create(&threads[t], NULL, walker_main, &walkers[t]), 0);
  }
  for (int t = 0; t < WALKERS; t++) pthread_join(threads[t], NULL);
  uint64_t rng = seed;
  destroy_the_rest(w, &rng);
  pthread_mutex_lock(&dog.lock);
  dog.done = true;
  pthread_cond_signal(&dog.done_cond);
  pthread_mutex_unlock(&dog.lock);
  pthread_join(dog_thread, NULL);
  pthread_cond_destroy(&dog.done_cond);
  pthread_mutex_destroy(&dog.lock);
  fprintf(stderr, "  %d contexts, %d programs, %d buffers (%d wrapped), %d queues, %d events\n ", w->nctxs, w->nprogs,
          w->nbufs, w->nwraps, w->nqueues, w->nevents);
  for (int i = 0; i < SEEN_COUNT; i++) fprintf(stderr, "%s %d %s", i ? "," : "", atomic_load(&w->seen[i]), SEEN_NAMES[i]);
  fprintf(stderr, "\n");
  for (int t = 0; t < WALKERS; t++)
    if (walkers[t].fail.message[0]) fail_msg("seed %llu: %s", (unsigned long long)seed, walkers[t].fail.message);
  for (int i = 0; i < w->nwraps; i++) {
    Wrap *r = &w->wraps[i];
    if (atomic_load(&r->releases) != 1)
      fail_msg("seed %llu: wrapped memory %d was released %d times", (unsigned long long)seed, i, atomic_load(&r->releases));
    if (r->wrong) fail_msg("seed %llu: wrapped memory %d was released without what the launch queued last wrote", (unsigned long long)seed, i);
    Expect *e = atomic_load(&r->expect);
    if (e) free(e->values);
    free(e);
  }
  pthread_mutex_destroy(&w->lock);
  free(w);
}

/* A walk with an odd seed compiles with tcc alone (many small programs:
 * fastest); one with an even seed also promotes every kernel to cc at
 * once, in the background, into a cache of its own, so contexts and
 * programs are destroyed with builds in flight. */
static void random_walk_on_tiers(uint64_t seed) {
  char *dir = seed % 2 ? NULL : test_temp_dir("tpk-test-walk");
  setenv("TPK_TIER", dir ? "auto" : "tcc", 1);
  if (dir) {
    setenv("TPK_JIT_HOT_CALLS", "0", 1);
    setenv("TPK_CACHE_DIR", dir, 1);
  }
  fprintf(stderr, "random walk: seed %llu, %s (TPK_TEST_SEED=%llu repeats it)\n", (unsigned long long)seed,
          dir ? "tcc, then cc in the background" : "tcc", (unsigned long long)seed);
  random_walk(seed);
  unsetenv("TPK_TIER");
  unsetenv("TPK_JIT_HOT_CALLS");
  unsetenv("TPK_CACHE_DIR");
  if (dir) test_remove_tree(dir);
  free(dir);
}

/* The suite's seeds, or $TPK_TEST_SEED alone. */
static void test_random_lifetimes(void **state) {
  (void)state;
  setenv("TPK_HOST_THREADS", "2", 1);
  const char *env = getenv("TPK_TEST_SEED");
  if (env && *env) {
    random_walk_on_tiers(strtoull(env, NULL, 10));
  } else {
    static const uint64_t SEEDS[] = {1, 2, 3, 4};
    for (size_t i = 0; i < TPK_ARRAY_LEN(SEEDS); i++) random_walk_on_tiers(SEEDS[i]);
  }
  unsetenv("TPK_HOST_THREADS");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_kernel_from_eight_threads),
      cmocka_unit_test(test_queue_refuses_another_contexts_kernel),
      cmocka_unit_test(test_release_callback_destroys_the_context),
      cmocka_unit_test(test_release_callback_destroys_the_queue),
      cmocka_unit_test(test_release_callback_destroys_a_queue_while_the_context_is_destroyed),
      cmocka_unit_test(test_threads_load_cached_code),
      cmocka_unit_test(test_random_lifetimes),
  };
  return test_run_tests(tests);
}
