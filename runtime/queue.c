/*
 * queue.c — asynchronous launches: each queue has one worker thread that runs
 * its work in submission order; events mark points in that order.
 *
 * A queued launch owns copies of the caller's arrays (buffers are borrowed:
 * they must outlive the work). The first error of queued work is kept and
 * returned by the next tpk_queue_wait or tpk_event_wait on the queue.
 */
#include "runtime/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Work {
  TpkKernel *kernel; /* NULL: an event marker */
  TpkEvent *event;
  TpkLaunch launch;
  TpkBuffer **args;
  double *scalars;
  TpkNamedInt *syms, *tunes;
  char *names; /* the copied symbol and tunable names */
  struct Work *next;
} Work;

struct TpkEvent {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  TpkQueue *queue;
};

struct TpkQueue {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t more, idle;
  Work *head, *tail;
  bool busy, stop;
  TpkStatus error;     /* first error since the last wait */
  char message[4096];
};

static void work_free(Work *w) {
  free(w->args);
  free(w->scalars);
  free(w->syms);
  free(w->tunes);
  free(w->names);
  free(w);
}

static void *worker(void *arg) {
  TpkQueue *q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->head && !q->stop) pthread_cond_wait(&q->more, &q->lock);
    if (!q->head && q->stop) break;
    Work *w = q->head;
    q->head = w->next;
    if (!q->head) q->tail = NULL;
    q->busy = true;
    pthread_mutex_unlock(&q->lock);
    TpkStatus st = TPK_OK;
    if (w->kernel) st = tpk_kernel_launch(w->kernel, &w->launch);
    if (w->event) {
      pthread_mutex_lock(&w->event->lock);
      w->event->done = true;
      pthread_cond_broadcast(&w->event->cond);
      pthread_mutex_unlock(&w->event->lock);
    }
    pthread_mutex_lock(&q->lock);
    if (st != TPK_OK && q->error == TPK_OK) {
      q->error = st;
      snprintf(q->message, sizeof q->message, "%s", tpk_last_error());
    }
    q->busy = false;
    if (!q->head) pthread_cond_broadcast(&q->idle);
    pthread_mutex_unlock(&q->lock);
    work_free(w);
    pthread_mutex_lock(&q->lock);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

static TpkStatus q_fail(TpkStatus st, const char *msg) { return tpk_runtime_set_error(st, msg); }

TpkStatus tpk_queue_create(TpkContext *ctx, TpkQueue **out) {
  *out = NULL;
  if (!ctx) return q_fail(TPK_ERR_INVALID, "tpk_queue_create: no context");
  TpkQueue *q = calloc(1, sizeof *q);
  if (!q) return q_fail(TPK_ERR_NOMEM, "out of memory creating a queue");
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->more, NULL);
  pthread_cond_init(&q->idle, NULL);
  if (pthread_create(&q->thread, NULL, worker, q) != 0) {
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->more);
    pthread_cond_destroy(&q->idle);
    free(q);
    return q_fail(TPK_ERR_NOMEM, "cannot start the queue's worker thread");
  }
  *out = q;
  return TPK_OK;
}

/* The first error of the work run so far, cleared; q->lock held. */
static TpkStatus take_error(TpkQueue *q) {
  TpkStatus st = q->error;
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", q->message);
  q->error = TPK_OK;
  q->message[0] = 0;
  pthread_mutex_unlock(&q->lock);
  return st == TPK_OK ? TPK_OK : q_fail(st, msg);
}

static TpkStatus wait_idle(TpkQueue *q) {
  pthread_mutex_lock(&q->lock);
  while (q->head || q->busy) pthread_cond_wait(&q->idle, &q->lock);
  return take_error(q);
}

void tpk_queue_destroy(TpkQueue *q) {
  if (!q) return;
  pthread_mutex_lock(&q->lock);
  q->stop = true;
  pthread_cond_broadcast(&q->more);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
  for (Work *w = q->head, *n; w; w = n) { /* none left: the worker drains before stopping */
    n = w->next;
    work_free(w);
  }
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->more);
  pthread_cond_destroy(&q->idle);
  free(q);
}

TpkStatus tpk_queue_wait(TpkQueue *q) {
  if (!q) return q_fail(TPK_ERR_INVALID, "tpk_queue_wait: no queue");
  return wait_idle(q);
}

static void enqueue(TpkQueue *q, Work *w) {
  pthread_mutex_lock(&q->lock);
  if (q->tail) q->tail->next = w;
  else q->head = w;
  q->tail = w;
  pthread_cond_signal(&q->more);
  pthread_mutex_unlock(&q->lock);
}

TpkStatus tpk_queue_launch(TpkQueue *q, TpkKernel *k, const TpkLaunch *L) {
  if (!q || !k || !L) return q_fail(TPK_ERR_INVALID, "tpk_queue_launch: no queue, kernel or launch");
  if (tpk_launch_check_counts(L, "tpk_queue_launch") != TPK_OK) return TPK_ERR_INVALID;
  int n = tpk_kernel_param_count(k);
  Work *w = calloc(1, sizeof *w);
  if (!w) return q_fail(TPK_ERR_NOMEM, "out of memory queueing a launch");
  w->kernel = k;
  size_t names = 0;
  for (int i = 0; i < L->nsyms; i++) names += strlen(L->syms[i].name ? L->syms[i].name : "") + 1;
  for (int i = 0; i < L->ntunes; i++) names += strlen(L->tunes[i].name ? L->tunes[i].name : "") + 1;
  w->args = calloc((size_t)(n ? n : 1), sizeof *w->args);
  w->scalars = calloc((size_t)(n ? n : 1), sizeof *w->scalars);
  w->syms = calloc((size_t)(L->nsyms ? L->nsyms : 1), sizeof *w->syms);
  w->tunes = calloc((size_t)(L->ntunes ? L->ntunes : 1), sizeof *w->tunes);
  w->names = malloc(names ? names : 1);
  if (!w->args || !w->scalars || !w->syms || !w->tunes || !w->names) {
    work_free(w);
    return q_fail(TPK_ERR_NOMEM, "out of memory queueing a launch");
  }
  for (int i = 0; i < n; i++) {
    if (L->args) w->args[i] = L->args[i];
    if (L->scalars) w->scalars[i] = L->scalars[i];
  }
  char *at = w->names;
  for (int i = 0; i < L->nsyms; i++) {
    size_t len = strlen(L->syms[i].name ? L->syms[i].name : "") + 1;
    memcpy(at, L->syms[i].name ? L->syms[i].name : "", len);
    w->syms[i] = (TpkNamedInt){at, L->syms[i].value};
    at += len;
  }
  for (int i = 0; i < L->ntunes; i++) {
    size_t len = strlen(L->tunes[i].name ? L->tunes[i].name : "") + 1;
    memcpy(at, L->tunes[i].name ? L->tunes[i].name : "", len);
    w->tunes[i] = (TpkNamedInt){at, L->tunes[i].value};
    at += len;
  }
  w->launch = (TpkLaunch){.args = w->args, .scalars = w->scalars, .syms = w->syms, .nsyms = L->nsyms,
                          .tunes = w->tunes, .ntunes = L->ntunes};
  enqueue(q, w);
  return TPK_OK;
}

TpkStatus tpk_queue_record(TpkQueue *q, TpkEvent **out) {
  *out = NULL;
  if (!q) return q_fail(TPK_ERR_INVALID, "tpk_queue_record: no queue");
  TpkEvent *e = calloc(1, sizeof *e);
  Work *w = calloc(1, sizeof *w);
  if (!e || !w) {
    free(e);
    free(w);
    return q_fail(TPK_ERR_NOMEM, "out of memory recording an event");
  }
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  e->queue = q;
  w->event = e;
  enqueue(q, w);
  *out = e;
  return TPK_OK;
}

TpkStatus tpk_event_wait(TpkEvent *e) {
  if (!e) return q_fail(TPK_ERR_INVALID, "tpk_event_wait: no event");
  pthread_mutex_lock(&e->lock);
  while (!e->done) pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  /* errors of the work before the event */
  pthread_mutex_lock(&e->queue->lock);
  return take_error(e->queue);
}

bool tpk_event_done(const TpkEvent *e) {
  if (!e) return false;
  pthread_mutex_lock((pthread_mutex_t *)&e->lock);
  bool d = e->done;
  pthread_mutex_unlock((pthread_mutex_t *)&e->lock);
  return d;
}

void tpk_event_destroy(TpkEvent *e) {
  if (!e) return;
  pthread_mutex_lock(&e->lock); /* the worker may still signal it */
  while (!e->done) pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->cond);
  free(e);
}
