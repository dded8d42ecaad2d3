/*
 * test_lifetimes.c — objects freed in any order, memory the caller owns, and
 * views (include/tpk.h, "Lifetimes"). The first tests are the reproducers of
 * the crashes and hangs issue 10 found; under AddressSanitizer
 * (make test-asan) each of them was a use-after-free or a hang before.
 */
#include "support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* y = x * 2 over any length. */
static const char SCALE[] = "kernel scale(x: f32[N]) -> (y: f32[N]) { y = x * 2.0; }\n";

static TpkBuffer *vector(TpkDevice *dev, int64_t n, float first) {
  TpkBuffer *b;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &b), TPK_OK);
  float *p = tpk_buffer_data(b);
  for (int64_t i = 0; i < n; i++) p[i] = first + (float)i;
  return b;
}

static void assert_doubled(TpkBuffer *y, float first) {
  const float *p = tpk_buffer_data(y);
  int64_t n = tpk_buffer_shape(y)[0];
  for (int64_t i = 0; i < n; i++)
    if (p[i] != 2 * (first + (float)i)) fail_msg("y[%lld] = %g, want %g", (long long)i, (double)p[i], 2.0 * (first + (float)i));
}

typedef struct Released {
  int calls;
  void *data;
} Released;

static void count_release(void *user, void *data) {
  Released *r = user;
  r->calls++;
  r->data = data;
}

/* The scale kernel on the host of a new context, and a queue of it. */
static TpkKernel *scale_on_a_queue(TpkContext **ctx, TpkDevice **dev, TpkQueue **q) {
  TpkKernel *k = test_kernel(ctx, dev, "host", "scale.tpk", SCALE, "scale");
  assert_int_equal(tpk_queue_create(*ctx, q), TPK_OK);
  return k;
}

/* Destroys its argument on another thread. */
static void *destroy_queue(void *q) {
  tpk_queue_destroy(q);
  return NULL;
}

static void *destroy_context(void *ctx) {
  tpk_context_destroy(ctx);
  return NULL;
}

/* 20 queued launches, then tpk_context_destroy, then tpk_queue_wait: the
 * context runs the work first, and the queue stays valid until its own
 * destroy (before: the worker ran launches on a freed context). The outputs
 * are the test's own memory, so they can be read after the context. */
static void test_context_destroyed_with_work_queued(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkQueue *q;
  TpkKernel *k = scale_on_a_queue(&ctx, &dev, &q);
  enum { N = 4096 };
  static float out[20][N];
  Released r = {0};
  TpkBuffer *x = vector(dev, N, 1), *y[20];
  for (int i = 0; i < 20; i++) {
    assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, (int64_t[]){N}, NULL, out[i], count_release, &r, &y[i]), TPK_OK);
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y[i]}};
    assert_int_equal(tpk_queue_launch(q, k, &L), TPK_OK);
  }
  tpk_context_destroy(ctx);
  assert_int_equal(r.calls, 20); /* given back, after every launch ran */
  for (int i = 0; i < 20; i++)
    for (int e = 0; e < N; e++)
      if (out[i][e] != 2 * (1 + (float)e)) fail_msg("launch %d: y[%d] = %g", i, e, (double)out[i][e]);
  assert_int_equal(tpk_queue_wait(q), TPK_OK);
  /* new work is refused: the context's user said it is done */
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y[0]}};
  assert_int_equal(tpk_queue_launch(q, k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "context was destroyed"));
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "its context was destroyed"));
  TpkEvent *e;
  assert_int_equal(tpk_queue_record(q, &e), TPK_OK); /* complete at once: nothing is left to run */
  assert_true(tpk_event_done(e));
  assert_int_equal(tpk_event_wait(e), TPK_OK);
  TpkBuffer *more;
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){1}, &more), TPK_ERR_INVALID);
  tpk_queue_destroy(q);
  tpk_event_destroy(e);
  for (int i = 0; i < 20; i++) tpk_buffer_destroy(y[i]);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_buffer_destroy(x); /* the last hold: the context goes with it */
}

/* tpk_queue_destroy runs its queue's work; tpk_context_destroy, called
 * meanwhile from another thread, must wait for that work too (before: the
 * queue left the context's registry before its work ran, so the context
 * ended under it and the rest of its launches failed with "its context was
 * destroyed"; the random walk of test_concurrency met it in 4 of 320
 * seeds). */
static void test_context_destroyed_while_a_queue_is(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkQueue *q;
  TpkKernel *k = scale_on_a_queue(&ctx, &dev, &q);
  enum { N = 1 << 18, LAUNCHES = 40 };
  float *out = calloc((size_t)LAUNCHES * N, sizeof *out);
  assert_non_null(out);
  Released r = {0};
  TpkBuffer *x = vector(dev, N, 1);
  for (int i = 0; i < LAUNCHES; i++) {
    TpkBuffer *y;
    assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, (int64_t[]){N}, NULL, out + (size_t)i * N, count_release, &r, &y), TPK_OK);
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}};
    assert_int_equal(tpk_queue_launch(q, k, &L), TPK_OK);
    tpk_buffer_destroy(y);
  }
  TpkEvent *e;
  assert_int_equal(tpk_queue_record(q, &e), TPK_OK);
  pthread_t destroyer;
  assert_int_equal(pthread_create(&destroyer, NULL, destroy_queue, q), 0);
  nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL); /* the destroy is under way */
  tpk_context_destroy(ctx);
  pthread_join(destroyer, NULL);
  assert_int_equal(tpk_event_wait(e), TPK_OK);
  assert_int_equal(r.calls, LAUNCHES);
  for (int i = 0; i < LAUNCHES; i++)
    for (int j = 0; j < N; j++)
      if (out[(size_t)i * N + j] != 2 * (1 + (float)j)) fail_msg("launch %d: y[%d] = %g", i, j, (double)out[(size_t)i * N + j]);
  tpk_event_destroy(e);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_buffer_destroy(x);
  free(out);
}

/* An event recorded on a queue that its context's end has stopped, while
 * the queue still runs its work: the event is done only once that work has
 * run (before: at once, and a caller reading the launches' outputs after
 * waiting for it read what they held before). */
static void test_event_recorded_while_the_context_ends(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkQueue *q;
  TpkKernel *k = scale_on_a_queue(&ctx, &dev, &q);
  enum { N = 1 << 18, LAUNCHES = 40 };
  TpkBuffer *x = vector(dev, N, 1), *y = vector(dev, N, 0);
  TpkLaunchResult results[LAUNCHES] = {0};
  for (int i = 0; i < LAUNCHES; i++) {
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = &results[i]};
    assert_int_equal(tpk_queue_launch(q, k, &L), TPK_OK);
  }
  pthread_t destroyer;
  assert_int_equal(pthread_create(&destroyer, NULL, destroy_context, ctx), 0);
  /* events until one is done when recorded: the queue had stopped */
  for (;;) {
    TpkEvent *e;
    assert_int_equal(tpk_queue_record(q, &e), TPK_OK);
    bool stopped = tpk_event_done(e);
    tpk_event_destroy(e);
    if (stopped) break;
  }
  for (int i = 0; i < LAUNCHES; i++)
    if (!results[i].tier) fail_msg("launch %d had not run when the event was done", i);
  pthread_join(destroyer, NULL);
  tpk_queue_destroy(q);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
}

/* Memory a buffer gave back is reused by the next buffer of its size
 * class, zeroed again (tpk_buffer_create's promise), on both kinds of
 * device; what is kept goes with the context (LeakSanitizer checks). */
static void test_memory_reused_zeroed(void **state) {
  (void)state;
  static const int64_t SIZES[] = {1, 16, 100, 4096, 100000, (1 << 18) + 3};
  enum { N = sizeof SIZES / sizeof *SIZES };
  for (int kind = 0; kind < 2; kind++) {
    TpkContext *ctx;
    TpkDevice *dev;
    assert_int_equal(tpk_context_create(&ctx), TPK_OK);
    assert_int_equal(tpk_device_open(ctx, kind ? "sim:v5e" : "host", &dev), TPK_OK);
    void *before[N] = {0};
    for (int round = 0; round < 3; round++)
      for (int i = 0; i < N; i++) {
        TpkBuffer *b;
        assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &SIZES[i], &b), TPK_OK);
        float *v = tpk_buffer_data(b);
        for (int64_t j = 0; j < SIZES[i]; j++)
          if (v[j] != 0) fail_msg("round %d, %lld floats: element %lld is %g", round, (long long)SIZES[i], (long long)j, (double)v[j]);
        if (round) assert_ptr_equal(v, before[i]); /* the block given back */
        before[i] = v;
        memset(v, 0xff, (size_t)SIZES[i] * sizeof *v);
        tpk_buffer_destroy(b);
      }
    tpk_context_destroy(ctx);
  }
}

/* Many buffers live at once, more than the device's huge-page arenas
 * hold (runtime/device.c): each has bytes of its own, zeroed when new and
 * when given again, then after the arenas run out as before. */
static void test_many_live_buffers_apart_and_zeroed(void **state) {
  (void)state;
  enum { N = 200 };
  const int64_t n = 150000; /* 600 KB: a size cut from the arenas */
  TpkContext *ctx;
  TpkDevice *dev;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  static TpkBuffer *bufs[N];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, &n, &bufs[i]), TPK_OK);
      float *v = tpk_buffer_data(bufs[i]);
      for (int64_t j = 0; j < n; j += 1021)
        if (v[j] != 0 || v[n - 1] != 0) fail_msg("round %d, buffer %d: element %lld is %g", round, i, (long long)j, (double)v[j]);
      v[0] = v[n - 1] = (float)(i + 1);
    }
    for (int i = 0; i < N; i++) {
      const float *v = tpk_buffer_data(bufs[i]);
      if (v[0] != (float)(i + 1) || v[n - 1] != (float)(i + 1)) fail_msg("buffer %d was written by another", i);
    }
    for (int i = 0; i < N; i++) tpk_buffer_destroy(bufs[i]);
  }
  tpk_context_destroy(ctx);
}

/* Buffers and programs destroyed after their context, and a buffer never
 * destroyed: the context gives back their memory, and destroying them
 * afterwards touches nothing freed (before: a use-after-free). */
static void test_handles_outlive_their_context(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "sim:v5e", "scale.tpk", SCALE, "scale");
  TpkBuffer *x = vector(dev, 100, 3), *y = vector(dev, 100, 0);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  Released r = {0};
  static float mine[4];
  TpkBuffer *wrapped;
  assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, (int64_t[]){4}, NULL, mine, count_release, &r, &wrapped), TPK_OK);
  tpk_context_destroy(ctx);
  assert_int_equal(r.calls, 1); /* given back with the context */
  float got[100];
  assert_int_equal(tpk_buffer_read(y, got, sizeof got), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_buffer_read: the buffer's context was destroyed");
  assert_null(tpk_buffer_data(y));
  assert_int_equal(tpk_buffer_shape(y)[0], 100);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_buffer_destroy(wrapped);
  assert_int_equal(r.calls, 1);
  tpk_buffer_destroy(x);
}

/* An event whose queue was destroyed: waiting returns, with the errors of
 * the work before it (before: it blocked forever on a freed mutex). */
static void test_event_outlives_its_queue(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkQueue *q;
  TpkKernel *k = scale_on_a_queue(&ctx, &dev, &q);
  TpkBuffer *x = vector(dev, 8, 0), *wrong = vector(dev, 9, 0);
  TpkLaunch bad = {.args = (TpkBuffer *[]){x, wrong}};
  assert_int_equal(tpk_queue_launch(q, k, &bad), TPK_OK); /* fails when it runs */
  TpkEvent *e, *never_waited;
  assert_int_equal(tpk_queue_record(q, &e), TPK_OK);
  assert_int_equal(tpk_queue_record(q, &never_waited), TPK_OK);
  tpk_queue_destroy(q);
  assert_true(tpk_event_done(e));
  assert_int_equal(tpk_event_wait(e), TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "shape symbol N is 8"));
  tpk_event_destroy(e);
  tpk_event_destroy(never_waited);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(wrong);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
}

/* A queued launch holds its buffers and program: the caller may destroy
 * them at once. */
static void test_queued_launch_holds_what_it_uses(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkQueue *q;
  TpkKernel *k = scale_on_a_queue(&ctx, &dev, &q);
  TpkBuffer *x = vector(dev, 1000, 5), *y = vector(dev, 1000, 0), *keep;
  assert_int_equal(tpk_buffer_view(y, 0, TPK_F32, 1, (int64_t[]){1000}, &keep), TPK_OK);
  TpkLaunchResult ran = {0};
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}, .result = &ran};
  assert_int_equal(tpk_queue_launch(q, k, &L), TPK_OK);
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
  assert_int_equal(tpk_queue_wait(q), TPK_OK);
  assert_doubled(keep, 5);
  assert_string_equal(ran.tier, "tcc");
  tpk_queue_destroy(q);
  tpk_buffer_destroy(keep);
  tpk_context_destroy(ctx);
}

/* Buffers of another context are refused (before: accepted, and a later
 * launch read freed memory). */
static void test_buffers_of_another_context(void **state) {
  (void)state;
  TpkContext *a, *b;
  TpkDevice *da, *db;
  TpkKernel *k = test_kernel(&a, &da, "host", "scale.tpk", SCALE, "scale");
  assert_int_equal(tpk_context_create(&b), TPK_OK);
  assert_int_equal(tpk_device_open(b, "host", &db), TPK_OK);
  TpkBuffer *x = vector(db, 16, 0), *y = vector(db, 16, 0);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "kernel 'scale': the buffer for 'x' belongs to another context than the kernel");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_context_destroy(b);
  tpk_context_destroy(a);
  tpk_program_destroy(tpk_kernel_program(k));
}

/* ---- external memory ---- */

/* The caller's memory is the buffer: the kernel reads and writes it in
 * place, and it is given back once, when the last view of it goes. */
static void test_wrap_without_copying(void **state) {
  (void)state;
  const char *devices[] = {"host", "sim:v5e"};
  for (int d = 0; d < 2; d++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkKernel *k = test_kernel(&ctx, &dev, devices[d], "scale.tpk", SCALE, "scale");
    float *xs = malloc(6 * sizeof *xs), *ys = calloc(6, sizeof *ys);
    for (int i = 0; i < 6; i++) xs[i] = (float)i;
    Released rx = {0}, ry = {0};
    TpkBuffer *x, *y, *tail;
    int64_t n = 6, stride = 1;
    assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, &n, &stride, xs, count_release, &rx, &x), TPK_OK);
    assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, &n, NULL, ys, count_release, &ry, &y), TPK_OK);
    assert_ptr_equal(tpk_buffer_data(x), xs);
    uint64_t capacity, used;
    tpk_device_memory(dev, &capacity, &used);
    assert_true(used == 48);
    assert_true(d == 0 ? capacity == 0 : capacity == (uint64_t)16 << 30);
    TpkLaunch L = {.args = (TpkBuffer *[]){x, y}};
    assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
    assert_true(ys[5] == 10.0f);
    assert_int_equal(tpk_buffer_view(y, 4 * sizeof(float), TPK_F32, 1, (int64_t[]){2}, &tail), TPK_OK);
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
    assert_int_equal(rx.calls, 1);
    assert_ptr_equal(rx.data, xs);
    assert_int_equal(ry.calls, 0); /* the view still looks at it */
    assert_true(((float *)tpk_buffer_data(tail))[1] == 10.0f);
    tpk_program_destroy(tpk_kernel_program(k));
    tpk_context_destroy(ctx);
    tpk_buffer_destroy(tail);
    assert_int_equal(ry.calls, 1);
    free(xs);
    free(ys);
  }
}

static void test_wrap_refuses_what_it_cannot_use(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &dev), TPK_OK);
  static float data[64];
  Released r = {0};
  TpkBuffer *b = (TpkBuffer *)1;
  /* a transposed 4x3 view of a 3x4 array */
  int64_t shape[2] = {4, 3}, strides[2] = {1, 4};
  assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 2, shape, strides, data, count_release, &r, &b), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_buffer_wrap: strides (1, 4) (in elements) are not row-major contiguous for "
                                        "shape (4, 3), which needs (3, 1); make a contiguous copy first");
  assert_null(b);
  /* dimensions of size 1 may have any stride, as PyTorch gives them */
  int64_t column[2] = {4, 1}, any[2] = {1, 99};
  assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 2, column, any, data, NULL, NULL, &b), TPK_OK);
  tpk_buffer_destroy(b);
  /* misaligned for its elements */
  assert_int_equal(tpk_buffer_wrap(dev, TPK_F32, 1, (int64_t[]){4}, NULL, (char *)data + 2, count_release, &r, &b),
                   TPK_ERR_INVALID);
  assert_non_null(strstr(tpk_last_error(), "is not aligned to its f32 elements (4 bytes)"));
  assert_int_equal(r.calls, 0); /* a failed wrap leaves the memory the caller's */
  /* a sim device counts wrapped memory against its HBM */
  TpkDevice *v5e;
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &v5e), TPK_OK);
  int64_t huge[2] = {70000, 70000};
  assert_int_equal(tpk_buffer_wrap(v5e, TPK_F32, 2, huge, NULL, data, NULL, NULL, &b), TPK_ERR_NOMEM);
  assert_non_null(strstr(tpk_last_error(), "sim:v5e: out of HBM"));
  tpk_context_destroy(ctx);
}

/* ---- views ---- */

static void test_views(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "scale.tpk", SCALE, "scale");
  /* one allocation of raw bytes, as an allocator hands out, two tensors in it */
  TpkBuffer *raw, *x, *y;
  assert_int_equal(tpk_buffer_create(dev, TPK_U8, 1, (int64_t[]){64}, &raw), TPK_OK);
  assert_int_equal(tpk_buffer_view(raw, 0, TPK_F32, 1, (int64_t[]){8}, &x), TPK_OK);
  assert_int_equal(tpk_buffer_view(raw, 32, TPK_F32, 1, (int64_t[]){8}, &y), TPK_OK);
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(tpk_buffer_write(x, ones, sizeof ones), TPK_OK);
  tpk_buffer_destroy(raw);
  TpkLaunch L = {.args = (TpkBuffer *[]){x, y}};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  float got[8];
  assert_int_equal(tpk_buffer_read(y, got, sizeof got), TPK_OK);
  assert_true(got[0] == 2 && got[7] == 2);
  /* a view of a view, and what does not fit */
  TpkBuffer *v;
  assert_int_equal(tpk_buffer_view(y, 16, TPK_F32, 2, (int64_t[]){2, 2}, &v), TPK_OK);
  assert_true(((float *)tpk_buffer_data(v))[3] == 2);
  tpk_buffer_destroy(v);
  assert_int_equal(tpk_buffer_view(y, 4, TPK_F32, 1, (int64_t[]){8}, &v), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_buffer_view: 32 bytes at offset 4 do not fit in the buffer's 32");
  assert_int_equal(tpk_buffer_view(y, 2, TPK_F32, 1, (int64_t[]){1}, &v), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "tpk_buffer_view: offset 2 is not a multiple of f32's 4 bytes");
  tpk_buffer_destroy(x);
  tpk_buffer_destroy(y);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_context_destroyed_with_work_queued),
      cmocka_unit_test(test_context_destroyed_while_a_queue_is),
      cmocka_unit_test(test_event_recorded_while_the_context_ends),
      cmocka_unit_test(test_handles_outlive_their_context),
      cmocka_unit_test(test_event_outlives_its_queue),
      cmocka_unit_test(test_queued_launch_holds_what_it_uses),
      cmocka_unit_test(test_buffers_of_another_context),
      cmocka_unit_test(test_wrap_without_copying),
      cmocka_unit_test(test_wrap_refuses_what_it_cannot_use),
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_memory_reused_zeroed),
      cmocka_unit_test(test_many_live_buffers_apart_and_zeroed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
