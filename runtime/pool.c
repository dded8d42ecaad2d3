/*
 * pool.c — worker threads parked between jobs (runtime/pool.h).
 *
 * Each job has a number; a worker runs its part of every job whose number it
 * has not seen yet, if the job has that many parts. A parked worker sleeps
 * on a condition variable, and waking one takes the scheduler several
 * microseconds, as much as a small kernel's whole grid: so a worker first
 * polls the job number for a short while (SPIN_SECONDS) after each job before it
 * sleeps, and the caller polls for the parts to finish before it sleeps, so
 * back-to-back launches hand work over in well under a microsecond. A
 * caller about to launch kernels one after another (a compiled graph's
 * calls, some of them one part, which take longer than the poll) holds the
 * pool: the workers poll until it lets go, instead of sleeping between
 * its launches and being woken for each (0.3-0.6 ms each on a virtual
 * machine whose idle core the host took back). The
 * fields are read under the lock; the polls only decide when to take it.
 * (A launch whose grid is one instance never comes here: runtime.c runs it
 * in one part.)
 */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#include "base/base.h"
#include "runtime/internal.h"

/* How long a thread polls before it sleeps: long enough to bridge the gap
 * between launches of a loop of small kernels, short enough that an idle
 * pool gives its cores back at once. */
static const double SPIN_SECONDS = 50e-6;
/* How long a caller polls for parts that workers are running: they are
 * working for it, on cores it does not need meanwhile, and a sleeping
 * caller's wake-up can cost milliseconds (a virtual machine's idle core
 * that its host took back: the block step's first launch, 3.5 ms). */
static const double WAIT_SPIN_SECONDS = 2e-3;

typedef struct Worker {
  TpkPool *pool;
  int part; /* the part of each job this worker runs: 1 .. threads-1 */
  pthread_t thread;
} Worker;

struct TpkPool {
  int threads;  /* parts a job may have: the caller plus the started workers */
  Worker *workers;
  pthread_mutex_t lock;    /* the job fields below */
  pthread_cond_t wake;     /* a new job, or quit */
  pthread_cond_t done;     /* the job's last worker part returned */
  atomic_uint_least64_t job; /* number of the current job (written under lock) */
  TpkPoolTask task;
  void *arg;
  int parts;
  bool *taken;             /* per part: started by a worker, or taken back by the caller */
  atomic_int pending;      /* parts of the current job running on workers (written under lock) */
  atomic_bool quit;
  atomic_int holds;        /* tpk_pool_hold's not yet released: the workers poll */
  pthread_mutex_t run;     /* held by the caller whose job is running */
  pid_t pid;               /* the process the workers run in (a fork's child has none) */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Poll until done(pool, arg) holds or `seconds` pass; returns done's
 * value. Now and then it yields: the thread it waits for may have been
 * put on its core (two threads on one core, the poller's time slices
 * made the MLP step's first launch 3 ms longer). */
static bool spin_until(TpkPool *pool, bool (*done)(TpkPool *, uint64_t), uint64_t arg, double seconds) {
  double start = tpk_now_seconds();
  for (int i = 0;; i++) {
    if (done(pool, arg)) return true;
    if ((i & 63) == 63) {
      if (tpk_now_seconds() - start > seconds) return false;
      sched_yield();
    }
    cpu_relax();
  }
}

static bool new_job(TpkPool *pool, uint64_t seen) {
  return atomic_load_explicit(&pool->job, memory_order_acquire) != seen ||
         atomic_load_explicit(&pool->quit, memory_order_relaxed);
}

static bool parts_done(TpkPool *pool, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&pool->pending, memory_order_acquire) == 0;
}

static bool held(TpkPool *pool) { return atomic_load_explicit(&pool->holds, memory_order_relaxed) > 0; }

static void *worker_main(void *p) {
  Worker *w = p;
  TpkPool *pool = w->pool;
  uint64_t seen = 0;
  for (;;) {
    while (!spin_until(pool, new_job, seen, SPIN_SECONDS) && held(pool)) continue;
    pthread_mutex_lock(&pool->lock);
    while (!atomic_load(&pool->quit) && atomic_load(&pool->job) == seen && !held(pool))
      pthread_cond_wait(&pool->wake, &pool->lock);
    if (atomic_load(&pool->quit)) {
      pthread_mutex_unlock(&pool->lock);
      return NULL;
    }
    if (atomic_load(&pool->job) == seen) { /* woken by a hold: poll */
      pthread_mutex_unlock(&pool->lock);
      continue;
    }
    seen = atomic_load(&pool->job);
    bool mine = w->part < pool->parts && !pool->taken[w->part]; /* a job may have fewer parts */
    if (mine) {
      pool->taken[w->part] = true;
      atomic_fetch_add(&pool->pending, 1);
    }
    TpkPoolTask task = pool->task;
    void *arg = pool->arg;
    pthread_mutex_unlock(&pool->lock);
    if (!mine) continue;
    task(arg, w->part);
    pthread_mutex_lock(&pool->lock);
    if (atomic_fetch_sub(&pool->pending, 1) == 1) pthread_cond_signal(&pool->done);
    pthread_mutex_unlock(&pool->lock);
  }
}

TpkStatus tpk_pool_create(int threads, TpkPool **out) {
  *out = NULL;
  TpkPool *pool = calloc(1, sizeof *pool);
  if (threads < 1) threads = 1;
  Worker *workers = threads > 1 ? calloc((size_t)threads - 1, sizeof *workers) : NULL;
  bool *taken = calloc((size_t)threads, sizeof *taken);
  if (!pool || !taken || (threads > 1 && !workers)) {
    free(pool);
    free(taken);
    free(workers);
    return tpk_runtime_set_error(TPK_ERR_NOMEM, "out of memory creating the host's worker threads");
  }
  pool->workers = workers;
  pool->taken = taken;
  pool->threads = 1;
  pool->pid = getpid();
  atomic_init(&pool->job, 0);
  atomic_init(&pool->pending, 0);
  atomic_init(&pool->quit, false);
  atomic_init(&pool->holds, 0);
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
  if (getpid() != pool->pid) { /* a forked child: no workers to stop, and a lock may be the parent's */
    free(pool->workers);
    free(pool->taken);
    free(pool);
    return;
  }
  pthread_mutex_lock(&pool->lock);
  atomic_store(&pool->quit, true);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (int i = 0; i < pool->threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
  pthread_mutex_destroy(&pool->run);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->lock);
  free(pool->workers);
  free(pool->taken);
  free(pool);
}

int tpk_pool_threads(const TpkPool *pool) { return pool ? pool->threads : 1; }

void tpk_pool_hold(TpkPool *pool) {
  if (!pool || pool->threads < 2 || getpid() != pool->pid) return;
  if (atomic_fetch_add(&pool->holds, 1) > 0) return;
  pthread_mutex_lock(&pool->lock); /* a worker between its check and its wait sees the hold or gets the signal */
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
}

void tpk_pool_release(TpkPool *pool) {
  if (!pool || pool->threads < 2 || getpid() != pool->pid) return;
  atomic_fetch_sub(&pool->holds, 1);
}

void tpk_pool_run(TpkPool *pool, int parts, TpkPoolTask task, void *arg) {
  if (parts <= 1 || parts > tpk_pool_threads(pool) || getpid() != pool->pid || pthread_mutex_trylock(&pool->run) != 0) {
    /* One part, more parts than threads, a forked child (whose copy of the
     * pool has no workers), or the pool is another caller's right now:
     * every part here, in order. */
    for (int part = 0; part < parts; part++) task(arg, part);
    return;
  }
  pthread_mutex_lock(&pool->lock);
  pool->task = task;
  pool->arg = arg;
  pool->parts = parts;
  memset(pool->taken, 0, sizeof *pool->taken * (size_t)parts);
  atomic_store(&pool->pending, 0);
  atomic_fetch_add_explicit(&pool->job, 1, memory_order_release);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  task(arg, 0);
  /* the parts no worker has started: here, not waited for */
  for (int part = 1; part < parts; part++) {
    pthread_mutex_lock(&pool->lock);
    bool mine = !pool->taken[part];
    pool->taken[part] = true;
    pthread_mutex_unlock(&pool->lock);
    if (mine) task(arg, part);
  }
  if (!spin_until(pool, parts_done, 0, WAIT_SPIN_SECONDS)) {
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
  }
  pthread_mutex_unlock(&pool->run);
}
