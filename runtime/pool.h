/*
 * pool.h — the host's worker threads, which run the parts of a kernel's grid.
 *
 * A pool of T threads is the caller plus T-1 workers started once, at
 * creation, and parked on a condition variable between jobs: a launch never
 * creates a thread. A job is a task run once per part, part 0 on the calling
 * thread and part i on worker i, unless worker i has not started it when
 * the caller's own part returns: the caller then runs it too, so a worker
 * whose core the system gave to someone else delays nothing (the host's
 * parts share their grid's instances: one started late finds none left).
 * tpk_pool_run returns when every part has returned. One job runs at a
 * time: a caller that finds the pool busy (a launch from another thread or
 * queue) runs all the parts itself, one after another, which gives the
 * same results since parts never depend on each other. So does a forked child, whose copy of the pool has no
 * workers. Destroying the pool in a child does not wait for workers there.
 */
#ifndef TPK_POOL_H
#define TPK_POOL_H

#include "tpk.h"

typedef struct TpkPool TpkPool;

/* Part `part` of a job; `arg` is the caller's. */
typedef void (*TpkPoolTask)(void *arg, int part);

/* A pool for `threads` parts (>= 1; 1 starts no worker). */
TpkStatus tpk_pool_create(int threads, TpkPool **out);
/* Stops and joins the workers; no job may be running. */
void tpk_pool_destroy(TpkPool *pool);
/* How many parts a job may have. */
int tpk_pool_threads(const TpkPool *pool);
/* Keep the workers polling for jobs, not sleeping, until the matching
 * release (holds nest): for a caller about to run launches one after
 * another, so that none waits for a worker to wake up. */
void tpk_pool_hold(TpkPool *pool);
void tpk_pool_release(TpkPool *pool);
/* Runs task(arg, part) for every part in [0, parts) and returns when all
 * have returned: in parallel when parts <= tpk_pool_threads(pool), else (or
 * with a NULL pool) one after another on the calling thread. */
void tpk_pool_run(TpkPool *pool, int parts, TpkPoolTask task, void *arg);

#endif
