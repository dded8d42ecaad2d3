/*
 * pool.c — worker threads parked between jobs (runtime/pool.h).
 *
 * Each job has a number; a worker runs its part of every job whose number it
 * has not seen yet, if the job has that many parts. Waking a worker costs a
 * condition-variable broadcast, a few microseconds: a launch whose grid is
 * one instance never comes here (runtime.c runs it in one part).
 */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/internal.h"

typedef struct Worker {
  TpkPool *pool;
  int part; /* the part of each job this worker runs: 1 .. threads-1 */
  pthread_t thread;
} Worker;

struct TpkPool {
  int threads;  /* parts a job may have: the caller plus the started workers */
  Worker *workers;
  pthread_mutex_t lock; /* the job fields below */
  pthread_cond_t wake;  /* a new job, or quit */
  pthread_cond_t done;  /* the job's last worker part returned */
  uint64_t job;         /* number of the current job */
  TpkPoolTask task;
  void *arg;
  int parts;
  int pending; /* worker parts of the current job still running */
  bool quit;
  pthread_mutex_t run; /* held by the caller whose job is running */
};

static void *worker_main(void *p) {
  Worker *w = p;
  TpkPool *pool = w->pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool->lock);
  for (;;) {
    while (!pool->quit && pool->job == seen) pthread_cond_wait(&pool->wake, &pool->lock);
    if (pool->quit) break;
    seen = pool->job;
    if (w->part >= pool->parts) continue; /* a job with fewer parts */
    TpkPoolTask task = pool->task;
    void *arg = pool->arg;
    pthread_mutex_unlock(&pool->lock);
    task(arg, w->part);
    pthread_mutex_lock(&pool->lock);
    if (--pool->pending == 0) pthread_cond_signal(&pool->done);
  }
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

TpkStatus tpk_pool_create(int threads, TpkPool **out) {
  *out = NULL;
  TpkPool *pool = calloc(1, sizeof *pool);
  if (threads < 1) threads = 1;
  Worker *workers = threads > 1 ? calloc((size_t)threads - 1, sizeof *workers) : NULL;
  if (!pool || (threads > 1 && !workers)) {
    free(pool);
    free(workers);
    return tpk_runtime_set_error(TPK_ERR_NOMEM, "out of memory creating the host's worker threads");
  }
  pool->workers = workers;
  pool->threads = 1;
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  pthread_mutex_init(&pool->run, NULL);
  /* A thread the system refuses only makes the pool smaller. */
  for (int i = 0; i < threads - 1; i++) {
    workers[i] = (Worker){.pool = pool, .part = i + 1};
    if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) break;
    pool->threads++;
  }
  *out = pool;
  return TPK_OK;
}

void tpk_pool_destroy(TpkPool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->lock);
  pool->quit = true;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (int i = 0; i < pool->threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
  pthread_mutex_destroy(&pool->run);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->lock);
  free(pool->workers);
  free(pool);
}

int tpk_pool_threads(const TpkPool *pool) { return pool ? pool->threads : 1; }

void tpk_pool_run(TpkPool *pool, int parts, TpkPoolTask task, void *arg) {
  if (parts <= 1 || parts > tpk_pool_threads(pool) || pthread_mutex_trylock(&pool->run) != 0) {
    /* One part, more parts than threads, or the pool is another caller's
     * right now: every part here, in order. */
    for (int part = 0; part < parts; part++) task(arg, part);
    return;
  }
  pthread_mutex_lock(&pool->lock);
  pool->task = task;
  pool->arg = arg;
  pool->parts = parts;
  pool->pending = parts - 1;
  pool->job++;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  task(arg, 0);
  pthread_mutex_lock(&pool->lock);
  while (pool->pending > 0) pthread_cond_wait(&pool->done, &pool->lock);
  pthread_mutex_unlock(&pool->lock);
  pthread_mutex_unlock(&pool->run);
}
