/*
 * queue.c — asynchronous launches: each queue has one worker thread that runs
 * its work in submission order; events mark points in that order.
 *
 * A queued launch owns copies of the caller's arrays and holds its buffers
 * and its kernel's program until it has run, so the caller may destroy
 * them at once. The first error of queued work is kept until the next
 * tpk_queue_wait; an event takes a copy of it when it completes, so an
 * event needs nothing of its queue afterwards.
 *
 * A context keeps a registry of its queues (TpkQueues) so that destroying
 * the context runs their work and stops them: a queue refuses new work
 * then, and its worker ends once the queue is empty.
 */
#include "runtime/device.h"

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

/* Held by its caller and by its marker in the queue, freed by the last. */
struct TpkEvent {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int refs;
  bool done;
  TpkStatus error; /* the queue's first error when the event completed */
  char message[4096];
};

struct TpkQueues {
  pthread_mutex_t lock; /* the list, and each queue's pins and drained */
  pthread_cond_t unpinned;
  TpkQueue *list;
  unsigned rounds; /* of tpk_queues_drain */
};

struct TpkQueue {
  TpkContext *ctx;
  TpkQueue *next; /* in the context's registry */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t more, idle;
  Work *head, *tail;
  bool busy, stop;  /* stop: no more work is taken (destroyed, or its context) */
  bool orphan;         /* destroyed on its own worker, which frees it when it stops */
  int pins;            /* drains of the context waiting for it: not freed until 0 */
  unsigned drained;    /* the last round of tpk_queues_drain that waited for it */
  TpkStatus error;     /* first error since the last wait */
  char message[4096];
};

static void event_release(TpkEvent *e) {
  pthread_mutex_lock(&e->lock);
  bool last = --e->refs == 0;
  pthread_mutex_unlock(&e->lock);
  if (!last) return;
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->cond);
  free(e);
}

/* The work's holds go with it. */
static void work_free(Work *w, int nargs) {
  for (int i = 0; w->args && i < nargs; i++)
    if (w->args[i]) tpk_buffer_release(w->args[i]);
  if (w->kernel) tpk_program_release(tpk_kernel_program(w->kernel));
  if (w->event) event_release(w->event);
  free(w->args);
  free(w->scalars);
  free(w->syms);
  free(w->tunes);
  free(w->names);
  free(w);
}

/* Out of its context's registry, once its worker has run all its work: a
 * context destroyed meanwhile still finds the queue and waits for that
 * work, which needs the context. */
static void unregister(TpkQueue *q) {
  TpkQueues *qs = tpk_context_queues(q->ctx);
  pthread_mutex_lock(&qs->lock);
  for (TpkQueue **p = &qs->list; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  pthread_mutex_unlock(&qs->lock);
}

/* The queue's own memory and its hold on the context, once its worker
 * has stopped and no drain of the context waits for it. */
static void queue_free(TpkQueue *q) {
  TpkQueues *qs = tpk_context_queues(q->ctx);
  pthread_mutex_lock(&qs->lock);
  while (q->pins) pthread_cond_wait(&qs->unpinned, &qs->lock);
  pthread_mutex_unlock(&qs->lock);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->more);
  pthread_cond_destroy(&q->idle);
  TpkContext *ctx = q->ctx;
  free(q);
  tpk_context_release(ctx);
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
    if (w->kernel) st = tpk_launch_queued(w->kernel, &w->launch);
    pthread_mutex_lock(&q->lock);
    if (st != TPK_OK && q->error == TPK_OK) {
      q->error = st;
      snprintf(q->message, sizeof q->message, "%s", tpk_last_error());
    }
    if (w->event) {
      TpkEvent *e = w->event;
      pthread_mutex_lock(&e->lock);
      e->error = q->error;
      snprintf(e->message, sizeof e->message, "%s", q->message);
      e->done = true;
      pthread_cond_broadcast(&e->cond);
      pthread_mutex_unlock(&e->lock);
    }
    pthread_mutex_unlock(&q->lock);
    work_free(w, w->kernel ? tpk_kernel_param_count(w->kernel) : 0);
    pthread_mutex_lock(&q->lock);
    q->busy = false;
    if (!q->head) pthread_cond_broadcast(&q->idle);
  }
  bool orphan = q->orphan;
  pthread_mutex_unlock(&q->lock);
  if (orphan) {
    unregister(q);
    queue_free(q);
  }
  return NULL;
}

static TpkStatus q_fail(TpkStatus st, const char *msg) { return tpk_runtime_set_error(st, msg); }

TpkStatus tpk_queues_create(TpkQueues **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return TPK_ERR_NOMEM;
  pthread_mutex_init(&(*out)->lock, NULL);
  pthread_cond_init(&(*out)->unpinned, NULL);
  return TPK_OK;
}

void tpk_queues_destroy(TpkQueues *qs) {
  if (!qs) return;
  pthread_cond_destroy(&qs->unpinned);
  pthread_mutex_destroy(&qs->lock);
  free(qs);
}

/* Wait until q has run everything queued so far. Not on q's own worker:
 * a release callback runs there when a queued launch let go of the last
 * reference to wrapped memory, and a garbage-collected caller may destroy
 * the context from it; the worker cannot wait for itself. (The queue holds
 * the context, so the rest of its work runs safely afterwards.) */
static void drain(TpkQueue *q) {
  if (pthread_equal(pthread_self(), q->thread)) return;
  pthread_mutex_lock(&q->lock);
  while (q->head || q->busy) pthread_cond_wait(&q->idle, &q->lock);
  pthread_mutex_unlock(&q->lock);
}

/* Tell q's worker to take no more work and to end when q is empty. */
static void stop(TpkQueue *q) {
  pthread_mutex_lock(&q->lock);
  q->stop = true;
  pthread_cond_broadcast(&q->more);
  pthread_mutex_unlock(&q->lock);
}

/* Each queue in turn is stopped and drained, without the registry's lock
 * while waiting for it: a release callback on the worker waited for may
 * destroy or create another queue of the context, which takes the lock.
 * The queue waited for is pinned meanwhile (destroying it frees it only
 * once unpinned); the list is scanned again after each wait, since it may
 * have changed. A stopped worker is joined by tpk_queue_destroy. */
void tpk_queues_close(TpkQueues *qs) {
  pthread_mutex_lock(&qs->lock);
  unsigned round = ++qs->rounds;
  for (;;) {
    TpkQueue *q = qs->list;
    while (q && q->drained == round) q = q->next;
    if (!q) break;
    q->drained = round;
    q->pins++;
    pthread_mutex_unlock(&qs->lock);
    stop(q);
    drain(q);
    pthread_mutex_lock(&qs->lock);
    if (--q->pins == 0) pthread_cond_broadcast(&qs->unpinned);
  }
  pthread_mutex_unlock(&qs->lock);
}

TpkStatus tpk_queue_create(TpkContext *ctx, TpkQueue **out) {
  if (!out) return q_fail(TPK_ERR_INVALID, "tpk_queue_create: no place for the queue");
  *out = NULL;
  if (!ctx) return q_fail(TPK_ERR_INVALID, "tpk_queue_create: no context");
  if (tpk_context_closed(ctx)) return q_fail(TPK_ERR_INVALID, "tpk_queue_create: the context was destroyed");
  TpkQueue *q = calloc(1, sizeof *q);
  if (!q) return q_fail(TPK_ERR_NOMEM, "out of memory creating a queue");
  q->ctx = ctx;
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
  tpk_context_retain(ctx);
  TpkQueues *qs = tpk_context_queues(ctx);
  pthread_mutex_lock(&qs->lock);
  q->next = qs->list;
  qs->list = q;
  pthread_mutex_unlock(&qs->lock);
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

void tpk_queue_destroy(TpkQueue *q) {
  if (!q) return;
  /* On the queue's own worker (a release callback: see drain) the worker
   * cannot be joined; it runs the rest of the work and frees the queue
   * when it stops. */
  bool on_worker = pthread_equal(pthread_self(), q->thread);
  pthread_mutex_lock(&q->lock);
  q->orphan = on_worker;
  pthread_mutex_unlock(&q->lock);
  stop(q);
  if (on_worker) {
    pthread_detach(q->thread);
    return;
  }
  pthread_join(q->thread, NULL); /* the worker drains before it stops */
  unregister(q);
  queue_free(q);
}

TpkStatus tpk_queue_wait(TpkQueue *q) {
  if (!q) return q_fail(TPK_ERR_INVALID, "tpk_queue_wait: no queue");
  drain(q);
  pthread_mutex_lock(&q->lock);
  return take_error(q);
}

bool tpk_queue_idle(TpkQueue *q) {
  pthread_mutex_lock(&q->lock);
  bool idle = !q->head && !q->busy;
  pthread_mutex_unlock(&q->lock);
  return idle;
}

/* Appends w, unless the queue was stopped (its context was destroyed):
 * then false, and w is still the caller's. */
static bool enqueue(TpkQueue *q, Work *w) {
  pthread_mutex_lock(&q->lock);
  if (q->stop) {
    pthread_mutex_unlock(&q->lock);
    return false;
  }
  if (q->tail) q->tail->next = w;
  else q->head = w;
  q->tail = w;
  pthread_cond_signal(&q->more);
  pthread_mutex_unlock(&q->lock);
  return true;
}

/* A copy of name, or of "" (NULL names are refused when the launch runs). */
static char *copy_name(char **at, const char *name) {
  size_t len = strlen(name ? name : "") + 1;
  memcpy(*at, name ? name : "", len);
  char *copy = *at;
  *at += len;
  return copy;
}

TpkStatus tpk_queue_launch(TpkQueue *q, TpkKernel *k, const TpkLaunch *L) {
  if (!q || !k || !L) return q_fail(TPK_ERR_INVALID, "tpk_queue_launch: no queue, kernel or launch");
  /* what eager streams have pending on its buffers runs now, not after */
  TpkStatus st = tpk_launch_settle(k, L);
  return st == TPK_OK ? tpk_queue_submit(q, k, L) : st;
}

TpkStatus tpk_queue_submit(TpkQueue *q, TpkKernel *k, const TpkLaunch *L) {
  if (tpk_launch_check_counts(L, "tpk_queue_launch") != TPK_OK) return TPK_ERR_INVALID;
  /* A kernel runs on a queue of its own context: another context's end
   * would not wait for this queue, and its code would go under it. */
  if (tpk_program_context(tpk_kernel_program(k)) != q->ctx)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_queue_launch: kernel '%s' belongs to another context than the queue",
                            tpk_kernel_ir(k)->name);
  int n = tpk_kernel_param_count(k);
  Work *w = calloc(1, sizeof *w);
  if (!w) return q_fail(TPK_ERR_NOMEM, "out of memory queueing a launch");
  size_t names = 0;
  for (int i = 0; i < L->nsyms; i++) names += strlen(L->syms[i].name ? L->syms[i].name : "") + 1;
  for (int i = 0; i < L->ntunes; i++) names += strlen(L->tunes[i].name ? L->tunes[i].name : "") + 1;
  w->args = calloc((size_t)(n ? n : 1), sizeof *w->args);
  w->scalars = calloc((size_t)(n ? n : 1), sizeof *w->scalars);
  w->syms = calloc((size_t)(L->nsyms ? L->nsyms : 1), sizeof *w->syms);
  w->tunes = calloc((size_t)(L->ntunes ? L->ntunes : 1), sizeof *w->tunes);
  w->names = malloc(names ? names : 1);
  if (!w->args || !w->scalars || !w->syms || !w->tunes || !w->names) {
    work_free(w, 0);
    return q_fail(TPK_ERR_NOMEM, "out of memory queueing a launch");
  }
  /* the holds: the kernel's program and every buffer, until it has run */
  w->kernel = k;
  tpk_program_retain(tpk_kernel_program(k));
  for (int i = 0; i < n; i++) {
    if (L->args && L->args[i]) {
      w->args[i] = L->args[i];
      tpk_buffer_retain(w->args[i]);
    }
    if (L->scalars) w->scalars[i] = L->scalars[i];
  }
  char *at = w->names;
  for (int i = 0; i < L->nsyms; i++) w->syms[i] = (TpkNamedInt){copy_name(&at, L->syms[i].name), L->syms[i].value};
  for (int i = 0; i < L->ntunes; i++) w->tunes[i] = (TpkNamedInt){copy_name(&at, L->tunes[i].name), L->tunes[i].value};
  w->launch = (TpkLaunch){.args = w->args, .scalars = w->scalars, .syms = w->syms, .nsyms = L->nsyms,
                          .tunes = w->tunes, .ntunes = L->ntunes, .result = L->result};
  if (enqueue(q, w)) return TPK_OK;
  work_free(w, n);
  return q_fail(TPK_ERR_INVALID, "tpk_queue_launch: the queue's context was destroyed");
}

TpkStatus tpk_queue_record(TpkQueue *q, TpkEvent **out) {
  if (!out) return q_fail(TPK_ERR_INVALID, "tpk_queue_record: no place for the event");
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
  e->refs = 2; /* the caller's, and the marker's */
  w->event = e;
  if (!enqueue(q, w)) {
    /* stopped (its context is ending): done once the worker has run what
     * was queued before, which it still does */
    drain(q);
    pthread_mutex_lock(&q->lock);
    e->error = q->error;
    snprintf(e->message, sizeof e->message, "%s", q->message);
    pthread_mutex_unlock(&q->lock);
    e->done = true;
    work_free(w, 0);
  }
  *out = e;
  return TPK_OK;
}

TpkStatus tpk_event_wait(TpkEvent *e) {
  if (!e) return q_fail(TPK_ERR_INVALID, "tpk_event_wait: no event");
  pthread_mutex_lock(&e->lock);
  while (!e->done) pthread_cond_wait(&e->cond, &e->lock);
  TpkStatus st = e->error;
  char msg[sizeof e->message];
  snprintf(msg, sizeof msg, "%s", e->message);
  pthread_mutex_unlock(&e->lock);
  return st == TPK_OK ? TPK_OK : q_fail(st, msg);
}

bool tpk_event_done(const TpkEvent *e) {
  if (!e) return false;
  pthread_mutex_lock((pthread_mutex_t *)&e->lock);
  bool d = e->done;
  pthread_mutex_unlock((pthread_mutex_t *)&e->lock);
  return d;
}

void tpk_event_destroy(TpkEvent *e) {
  if (e) event_release(e);
}
