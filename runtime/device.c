/*
 * device.c — the kinds of device (runtime/device.h) and buffers.
 *
 *   host        generated C on this CPU; memory is the host's, no limit
 *   sim:<chip>  the same code for the values, and every launch timed on the
 *               chip (sim/); memory is host memory counted against the
 *               chip's HBM, so a kernel that would not fit fails here too
 *
 * Both kinds keep their bytes in host memory, so both can wrap memory the
 * caller allocated (a NumPy array, a CPU tensor) and both run the host's
 * compiled code, on the context's thread pool.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "runtime/device.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host/host.h"
#include "ir/ir.h"
#include "sim/sim.h"
#include "sim/timeline.h"

/* ---- host memory, shared by both kinds ------------------------------------------ */

/* Large buffers come straight from mmap: zero pages cost nothing until
 * touched, so a buffer that is about to be filled is not written twice. */
enum { MMAP_FROM = 1 << 20 };

/* Memory a buffer gave back is kept for the next buffer of its size class:
 * a stream allocates and frees the same sizes every step, and fresh memory
 * costs page faults each time (and malloc'd blocks their zeroing too).
 * Classes are quarter powers of two (a block wastes under a fifth); at
 * most HOST_CACHE_BYTES are kept per device, the rest goes back at once.
 * A block reused is zeroed when asked (tpk_buffer_create). The context's
 * end empties the cache and closes it. */
enum { HOST_CACHE_CLASSES = 4 + 4 * 56 }; /* up to 2^64 bytes */
#define HOST_CACHE_BYTES ((uint64_t)256 << 20)

/* Blocks of ARENA_FROM to ARENA_UPTO bytes new to the device are cut
 * from 2 MB arenas aligned to 2 MB and marked for transparent huge pages:
 * a new process's first step faults its outputs in a page per 2 MB
 * instead of per 4 KB (the MLP step's ~1.65 MB of new outputs cost ~400
 * faults). Such a block is never given back on its own: freed, it is kept
 * for its size class whatever the cache holds, and the arenas go with the
 * cache at the device's end. Under ASan blocks stay malloc's, so an
 * overrun from one buffer into the next is still caught. */
#define ARENA ((size_t)2 << 20)
#define ARENA_FROM ((size_t)16 << 10)
#define ARENA_UPTO ((size_t)MMAP_FROM)
enum { MAX_ARENAS = 64 };
#if defined(__SANITIZE_ADDRESS__)
#define USE_ARENAS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define USE_ARENAS 0
#endif
#endif
#ifndef USE_ARENAS
#define USE_ARENAS 1
#endif

typedef struct TpkHostCache {
  pthread_mutex_t lock;
  void *blocks[HOST_CACHE_CLASSES]; /* each block's first word links the next */
  uint64_t bytes;
  bool closed;
  char *arenas[MAX_ARENAS]; /* the last one is being cut */
  int narenas;
  char *spares[MAX_ARENAS]; /* faulted in ahead of use (tpk_device_warm), not cut yet */
  int nspares;
  size_t arena_used; /* bytes of the last arena given out */
} TpkHostCache;

/* A block's size class: multiples of 64 bytes up to 256, then quarter
 * powers of two (multiples of 64 too, as aligned_alloc wants). */
static size_t class_size(int c) {
  if (c < 4) return 64 * (size_t)(c + 1);
  int k = 8 + (c - 4) / 4;
  return ((size_t)1 << k) + (size_t)((c - 4) % 4) * ((size_t)1 << (k - 2));
}

static int size_class(size_t bytes) {
  if (bytes <= 256) return bytes <= 64 ? 0 : (int)((bytes + 63) / 64) - 1;
  int k = 63 - __builtin_clzll((unsigned long long)bytes); /* 2^k <= bytes < 2^(k+1), k >= 8 */
  size_t quarter = (size_t)1 << (k - 2);
  int q = (int)((bytes - ((size_t)1 << k) + quarter - 1) / quarter); /* quarters above 2^k: 0..4 */
  return 4 + 4 * (k - 8) + q;
}

static void block_free(void *p, size_t size) {
  if (size >= MMAP_FROM) munmap(p, size);
  else free(p);
}

/* Under c->lock: was p cut from one of c's arenas? */
static bool in_arena(const TpkHostCache *c, const void *p) {
  for (int i = 0; i < c->narenas; i++)
    if ((const char *)p >= c->arenas[i] && (const char *)p < c->arenas[i] + ARENA) return true;
  return false;
}

/* A new arena, aligned to its size and marked for huge pages; NULL when
 * mmap fails. */
static char *arena_map(void) {
  /* twice the size, so that a 2 MB-aligned arena lies inside; the rest goes back */
  char *p = mmap(NULL, 2 * ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  char *a = (char *)(((uintptr_t)p + ARENA - 1) & ~(uintptr_t)(ARENA - 1));
  if (a > p) munmap(p, (size_t)(a - p));
  if (a + ARENA < p + 2 * ARENA) munmap(a + ARENA, (size_t)(p + 2 * ARENA - (a + ARENA)));
#ifdef MADV_HUGEPAGE
  madvise(a, ARENA, MADV_HUGEPAGE); /* advice: nothing to do when refused */
#endif
  return a;
}

/* Under c->lock: `size` bytes of zeros cut from the last arena, or a new
 * one (a spare first); NULL when the arenas are all used or mmap fails. */
static void *arena_cut(TpkHostCache *c, size_t size) {
  if (c->narenas == 0 || c->arena_used + size > ARENA) {
    if (c->narenas == MAX_ARENAS) return NULL;
    char *a = c->nspares ? c->spares[--c->nspares] : arena_map();
    if (!a) return NULL;
    c->arenas[c->narenas++] = a;
    c->arena_used = 0;
  }
  void *p = c->arenas[c->narenas - 1] + c->arena_used;
  c->arena_used += size;
  return p;
}

static void cache_open(TpkDevice *dev) {
  TpkHostCache *c = calloc(1, sizeof *c);
  if (c) pthread_mutex_init(&c->lock, NULL);
  dev->cache = c; /* NULL: nothing is kept */
}

/* Empties the cache; closed, it keeps nothing more. */
static void cache_empty(TpkHostCache *c, bool close) {
  if (!c) return;
  pthread_mutex_lock(&c->lock);
  c->closed |= close;
  uint64_t kept = 0;
  for (int i = 0; i < HOST_CACHE_CLASSES; i++) {
    size_t size = class_size(i);
    void *arena_blocks = NULL; /* stay for the arenas' end */
    for (void *p = c->blocks[i], *next; p; p = next) {
      memcpy(&next, p, sizeof next);
      if (in_arena(c, p)) {
        memcpy(p, &arena_blocks, sizeof p);
        arena_blocks = p;
        kept += size;
      } else {
        block_free(p, size);
      }
    }
    c->blocks[i] = arena_blocks;
  }
  c->bytes = kept;
  pthread_mutex_unlock(&c->lock);
}

static void cache_close(TpkDevice *dev) {
  if (!dev->cache) return;
  cache_empty(dev->cache, true);
  for (int i = 0; i < dev->cache->narenas; i++) munmap(dev->cache->arenas[i], ARENA);
  for (int i = 0; i < dev->cache->nspares; i++) munmap(dev->cache->spares[i], ARENA);
  pthread_mutex_destroy(&dev->cache->lock);
  free(dev->cache);
  dev->cache = NULL;
}

static void *host_alloc(const TpkDevice *dev, size_t bytes, bool zero) {
  int k = size_class(bytes);
  size_t size = class_size(k);
  TpkHostCache *c = dev->cache;
  void *p = NULL;
  if (c && k < HOST_CACHE_CLASSES) {
    bool fresh = false;
    pthread_mutex_lock(&c->lock);
    if ((p = c->blocks[k])) {
      memcpy(&c->blocks[k], p, sizeof p);
      c->bytes -= size;
    } else if (USE_ARENAS && size >= ARENA_FROM && size <= ARENA_UPTO && !c->closed) {
      fresh = (p = arena_cut(c, size)) != NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (p) return zero && !fresh ? memset(p, 0, bytes) : p;
  }
  if (size >= MMAP_FROM) {
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  p = aligned_alloc(64, size);
  return p && zero ? memset(p, 0, size) : p;
}

static void host_free(const TpkDevice *dev, void *data, size_t bytes) {
  int k = size_class(bytes);
  size_t size = class_size(k);
  TpkHostCache *c = dev->cache;
  if (c && k < HOST_CACHE_CLASSES) {
    pthread_mutex_lock(&c->lock);
    bool keep = (!c->closed && c->bytes + size <= HOST_CACHE_BYTES) || in_arena(c, data);
    if (keep) {
      memcpy(data, &c->blocks[k], sizeof data);
      c->blocks[k] = data;
      c->bytes += size;
    }
    pthread_mutex_unlock(&c->lock);
    if (keep) return;
  }
  block_free(data, size);
}

int tpk_device_arenas(TpkDevice *dev) {
  TpkHostCache *c = dev->cache;
  if (!c) return 0;
  pthread_mutex_lock(&c->lock);
  int n = c->narenas;
  pthread_mutex_unlock(&c->lock);
  return n;
}

void tpk_device_warm(TpkDevice *dev, int arenas) {
  TpkHostCache *c = dev->cache;
  if (!c || !USE_ARENAS) return;
  pthread_mutex_lock(&c->lock);
  int want = arenas < MAX_ARENAS ? arenas - c->narenas - c->nspares : 0;
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < want; i++) {
    char *a = arena_map();
    if (!a) return;
    tpk_memory_populate(a, ARENA); /* before anyone can cut it */
    pthread_mutex_lock(&c->lock);
    bool keep = !c->closed && c->narenas + c->nspares < MAX_ARENAS;
    if (keep) c->spares[c->nspares++] = a;
    pthread_mutex_unlock(&c->lock);
    if (!keep) munmap(a, ARENA);
  }
}

static void host_copy(const TpkDevice *dev, void *dst, const void *src, size_t bytes) {
  (void)dev;
  memcpy(dst, src, bytes);
}

/* ---- running compiled code ----------------------------------------------------- */

/* The parts of a launch take the shared grid's instances one at a time
 * (TpkPrims.next_instance), in order, so a part whose core is busy with
 * another process's threads (PyTorch's OpenMP workers spin for
 * milliseconds after each op) takes fewer, instead of the launch waiting
 * on its fixed half. A part's last instance taken is where it failed, if it
 * did: the launch reports the failure earliest in the grid, as one thread
 * running the instances in order would (every instance before it was
 * taken, and so run). */
typedef struct PartJob {
  const TpkRun *run;
  TpkPrims prims[64]; /* the primitive table, told which part it serves */
  int rc[64];
  char err[64][TPK_KERNEL_ERR_LEN];
  atomic_int_fast64_t next; /* the next instance to hand out */
  int64_t last[64];         /* each part's latest instance, -1 before any */
} PartJob;

static int64_t next_instance(const TpkPrims *p) {
  PartJob *job = p->instances;
  int64_t q = (int64_t)atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
  job->last[p->part] = q;
  return q;
}

static void run_part(void *arg, int part) {
  PartJob *job = arg;
  const TpkRun *r = job->run;
  job->err[part][0] = 0;
  job->rc[part] = r->fn(&job->prims[part], r->args, r->syms, r->workspace + (size_t)part * r->workspace_stride, job->err[part]);
}

static int host_run(const TpkDevice *dev, const TpkRun *r, char *err) {
  (void)dev;
  const TpkPrims *p = tpk_prims();
  if (r->parts <= 1) {
    err[0] = 0;
    return r->fn(p, r->args, r->syms, r->workspace, err) ? 0 : -1;
  }
  PartJob *job = malloc(sizeof *job);
  if (!job) {
    snprintf(err, TPK_KERNEL_ERR_LEN, "out of host memory starting %d parts", r->parts);
    return 0;
  }
  job->run = r;
  int parts = r->parts < 64 ? r->parts : 64;
  atomic_init(&job->next, 0);
  for (int i = 0; i < parts; i++) {
    job->prims[i] = *p;
    job->prims[i].part = i;
    job->prims[i].parts = parts;
    job->prims[i].next_instance = next_instance;
    job->prims[i].instances = job;
    job->last[i] = -1;
  }
  if (!r->lend || !r->lend(r->lend_user, parts, run_part, job)) tpk_pool_run(r->pool, parts, run_part, job);
  int failed = -1;
  for (int i = 0; i < parts; i++)
    if (job->rc[i] && (failed < 0 || job->last[i] < job->last[failed])) failed = i;
  if (failed >= 0) snprintf(err, TPK_KERNEL_ERR_LEN, "%s", job->err[failed]);
  free(job);
  return failed;
}

/* ---- host ------------------------------------------------------------------------- */

static bool host_claims(const char *name) { return strcmp(name, "host") == 0; }

static TpkStatus host_open(TpkDevice *dev, const char *name, TpkError *err) {
  (void)name, (void)err;
  dev->capacity = 0;
  cache_open(dev);
  return TPK_OK;
}

static void host_close(TpkDevice *dev) { cache_close(dev); }

static TpkTarget host_target(const TpkDevice *dev) { return tpk_target_host(dev->host_vmem); }

static TpkStatus host_report(const TpkDevice *dev, TpkPrepared *p, void *const *args, TpkLaunchResult *r, TpkError *err) {
  (void)dev, (void)p, (void)args, (void)err;
  r->simulated = false;
  memset(&r->sim, 0, sizeof r->sim);
  r->trace = NULL;
  return TPK_OK;
}

static const TpkDeviceOps host_ops = {
    .kind = "host", .memory = "memory", .claims = host_claims, .open = host_open, .close = host_close, .target = host_target,
    .alloc = host_alloc, .free = host_free, .write = host_copy, .read = host_copy, .wraps_host_memory = true,
    .prepare = NULL, .unprepare = NULL, .run = host_run, .report = host_report,
};

/* ---- sim:<chip> -------------------------------------------------------------------- */

/* The public face of a simulated launch's timeline. */
struct TpkTrace {
  TpkTimeline *timeline;
  const TpkChip *chip;
  const char *kernel;
};

/* A kernel whose time depends on its data (sim/schedule.c: integers read
 * from the data steer its walk) is timed again at every launch, from the
 * IR it keeps. The timelines those launches hand out live as long as the
 * kernel's specialisation; past MAX_LAUNCH_TRACES of them a launch is
 * still timed but gets no trace. */
enum { MAX_LAUNCH_TRACES = 64 };

struct TpkPrepared {
  TpkSimReport report; /* timed with sampled data; a kernel that does not read data times the same every launch */
  TpkTrace trace;
  TpkModule *kept;     /* data-dependent: the bound IR (kept->funcs[0]), else NULL */
  pthread_mutex_t lock; /* launch_traces */
  TpkTrace *launch_traces[MAX_LAUNCH_TRACES];
  int nlaunch_traces;
};

static bool sim_claims(const char *name) { return strncmp(name, "sim:", 4) == 0; }

static TpkStatus sim_open(TpkDevice *dev, const char *name, TpkError *err) {
  TpkSimTopology topo;
  if (tpk_sim_topology_parse(name + 4, &topo, err) != TPK_OK) {
    char why[sizeof err->message];
    snprintf(why, sizeof why, "%s", err->message);
    return tpk_error(err, err->code, "device '%s': %s", name, why);
  }
  if (topo.chips != 1)
    return tpk_error(err, TPK_ERR_UNSUPPORTED,
                     "device '%s': simulating %lld chips over ICI is not supported yet; use one chip, e.g. sim:%s", name,
                     (long long)topo.chips, topo.chip->name);
  dev->state = (void *)topo.chip;
  dev->capacity = topo.chip->hbm_bytes;
  cache_open(dev);
  return TPK_OK;
}

static const TpkChip *sim_chip(const TpkDevice *dev) { return dev->state; }

static TpkTarget sim_target(const TpkDevice *dev) { return tpk_sim_target(sim_chip(dev), dev->name); }

static void trace_free(TpkTrace *t) {
  if (!t) return;
  tpk_timeline_destroy(t->timeline);
  free((char *)t->kernel);
}

static void sim_unprepare(TpkPrepared *p) {
  if (!p) return;
  trace_free(&p->trace);
  for (int i = 0; i < p->nlaunch_traces; i++) {
    trace_free(p->launch_traces[i]);
    free(p->launch_traces[i]);
  }
  if (p->kept) tpk_module_free(p->kept);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

static TpkStatus sim_prepare(const TpkDevice *dev, const TpkFunc *f, TpkPrepared **out, TpkError *err) {
  *out = NULL;
  TpkPrepared *p = calloc(1, sizeof *p);
  if (!p) return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&p->lock, NULL);
  TpkStatus st = tpk_sim_schedule(f, sim_chip(dev), &p->report, &p->trace.timeline, err);
  if (st != TPK_OK) {
    sim_unprepare(p);
    return st;
  }
  p->trace.chip = sim_chip(dev);
  /* its own copy: the bound IR goes once the kernel is prepared */
  p->trace.kernel = strdup(f->name);
  if (p->report.follows_data && (p->kept = tpk_module_new(f->name)) != NULL &&
      !tpk_func_clone(p->kept, f, NULL, NULL, err)) {
    sim_unprepare(p);
    return err->code ? err->code : TPK_ERR_NOMEM;
  }
  if (!p->trace.kernel || (p->report.follows_data && !p->kept)) {
    sim_unprepare(p);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  }
  *out = p;
  return TPK_OK;
}

/* This launch's time, when it depends on the data: its own walk, and its
 * own trace while there is room for one. */
static TpkStatus sim_time_launch(const TpkDevice *dev, TpkPrepared *p, void *const *args, TpkSimReport *s,
                                 const TpkTrace **trace, TpkError *err) {
  TpkTimeline *tl = NULL;
  pthread_mutex_lock(&p->lock);
  bool room = p->nlaunch_traces < MAX_LAUNCH_TRACES;
  pthread_mutex_unlock(&p->lock);
  TpkStatus st = tpk_sim_schedule_args(p->kept->funcs[0], sim_chip(dev), args, s, room ? &tl : NULL, err);
  *trace = NULL;
  if (st != TPK_OK || !tl) return st;
  TpkTrace *t = calloc(1, sizeof *t);
  if (t) *t = (TpkTrace){.timeline = tl, .chip = sim_chip(dev), .kernel = strdup(p->trace.kernel)};
  pthread_mutex_lock(&p->lock);
  if (t && t->kernel && p->nlaunch_traces < MAX_LAUNCH_TRACES) {
    p->launch_traces[p->nlaunch_traces++] = t;
    *trace = t;
    t = NULL;
  }
  pthread_mutex_unlock(&p->lock);
  if (t) {
    trace_free(t);
    free(t);
  } else if (!*trace) tpk_timeline_destroy(tl);
  return TPK_OK;
}

static TpkStatus sim_report(const TpkDevice *dev, TpkPrepared *p, void *const *args, TpkLaunchResult *r, TpkError *err) {
  TpkSimReport launch;
  const TpkSimReport *s = &p->report;
  r->trace = p->trace.timeline ? &p->trace : NULL;
  if (p->kept) {
    TpkStatus st = sim_time_launch(dev, p, args, &launch, &r->trace, err);
    if (st != TPK_OK) return st;
    s = &launch;
  }
  TpkDType dt = s->matmul_flops ? s->matmul_dtype : TPK_BF16;
  r->simulated = true;
  r->sim = (TpkSimStats){.chip = s->chip->name, .cycles = s->cycles, .seconds = s->seconds, .clock_hz = s->chip->clock_hz,
                         .flops = s->flops, .matmul_flops = s->matmul_flops, .hbm_bytes = s->hbm_bytes,
                         .peak_flops = tpk_sim_peak_flops(s->chip, dt), .hbm_bytes_per_s = s->chip->hbm_bytes_per_s,
                         .roofline_seconds = s->roofline_seconds, .memory_bound = s->memory_bound,
                         .mxu_utilisation = s->mxu_utilisation, .vpu_utilisation = s->vpu_utilisation,
                         .hbm_utilisation = s->hbm_utilisation};
  return TPK_OK;
}

static bool sim_tune(const TpkDevice *dev, const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneConfig *out) {
  TpkTuneOptions on = *o;
  on.device = dev->name;
  return tpk_tune_on_chip(f, ir_hash, &on, out);
}

static const TpkDeviceOps sim_ops = {
    .kind = "sim", .memory = "HBM", .claims = sim_claims, .open = sim_open, .close = host_close, .target = sim_target,
    .alloc = host_alloc, .free = host_free, .write = host_copy, .read = host_copy, .wraps_host_memory = true,
    .prepare = sim_prepare, .unprepare = sim_unprepare, .run = host_run, .report = sim_report, .tune = sim_tune,
};

TpkStatus tpk_trace_write(const TpkTrace *t, const char *name, const char *path) {
  if (!t || !path) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_trace_write: no trace or no path");
  char title[160];
  snprintf(title, sizeof title, "%s on %s", t->kernel, t->chip->name);
  TpkError err = {0};
  if (tpk_timeline_write_trace(t->timeline, path, t->chip->clock_hz, name ? name : title, &err) != TPK_OK)
    return tpk_runtime_set_error(err.code ? err.code : TPK_ERR_IO, err.message);
  return TPK_OK;
}

const TpkDeviceOps *tpk_device_kind(const char *name) {
  static const TpkDeviceOps *const kinds[] = {&host_ops, &sim_ops};
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (kinds[i]->claims(name)) return kinds[i];
  return NULL;
}

/* ---- buffers ------------------------------------------------------------------------ */

struct TpkStorage {
  atomic_int refs; /* the buffers that look at it */
  /* Eager streams (eager.c): the stream whose work not yet run writes
   * these bytes (held), and how many streams' work not yet run reads them. */
  _Atomic(TpkStream *) pending;
  atomic_int readers;
  TpkDevice *dev;
  struct TpkStorage *prev, *next; /* the device's live memory (dev->lock) */
  bool gone;                      /* given back when the context was destroyed (dev->lock) */
  /* NULL while deferred (tpk_buffer_create_deferred): set once, under
   * dev->lock, by tpk_buffer_materialise; read without it. */
  _Atomic(void *) data;
  size_t bytes;         /* counted against the device while it has data */
  bool external;        /* the caller's memory, given back through release */
  TpkReleaseFn release;
  void *user;
};

TpkStatus tpk_device_reserve(TpkDevice *dev, size_t bytes) {
  uint64_t used = atomic_load(&dev->used);
  do {
    if (dev->capacity && (bytes > dev->capacity || used > dev->capacity - bytes))
      return tpk_runtime_fail(TPK_ERR_NOMEM, "%s: out of %s: a %.1f MiB buffer does not fit (%.1f of %.1f GiB in use)",
                  dev->name, dev->ops->memory, (double)bytes / (1 << 20), (double)used / (1 << 30), (double)dev->capacity / (1 << 30));
  } while (!atomic_compare_exchange_weak(&dev->used, &used, used + bytes));
  return TPK_OK;
}

/* Storage s joins its device's live memory. */
static void storage_link(TpkStorage *s) {
  TpkDevice *dev = s->dev;
  pthread_mutex_lock(&dev->lock);
  s->next = dev->memory;
  if (s->next) s->next->prev = s;
  dev->memory = s;
  pthread_mutex_unlock(&dev->lock);
}

/* Leaves the device's live memory; dev->lock held. */
static void storage_unlink(TpkStorage *s) {
  if (s->prev) s->prev->next = s->next;
  else s->dev->memory = s->next;
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = NULL;
}

/* The bytes go back to the device, or to their owner (deferred bytes
 * never given memory have nothing to give back). */
static void storage_give_back(TpkStorage *s) {
  void *data = atomic_load(&s->data);
  if (!s->external && !data) return;
  if (!s->external) s->dev->ops->free(s->dev, data, s->bytes);
  else if (s->release) s->release(s->user, data);
  atomic_fetch_sub(&s->dev->used, s->bytes);
}

static void storage_release(TpkStorage *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  TpkDevice *dev = s->dev;
  pthread_mutex_lock(&dev->lock);
  bool gone = s->gone;
  if (!gone) storage_unlink(s);
  pthread_mutex_unlock(&dev->lock);
  if (!gone) storage_give_back(s);
  free(s);
}

/* The bytes are given back outside the lock, since a release callback may
 * call tpk again. Each storage is pinned (a hold of its own) meanwhile; one
 * whose last buffer is going this very moment is left to that release. */
void tpk_device_free_memory(TpkDevice *dev) {
  TpkStorage *pinned = NULL;
  pthread_mutex_lock(&dev->lock);
  for (TpkStorage *s = dev->memory, *next; s; s = next) {
    next = s->next;
    int refs = atomic_load(&s->refs);
    while (refs > 0 && !atomic_compare_exchange_weak(&s->refs, &refs, refs + 1)) {
    }
    if (refs == 0) continue;
    storage_unlink(s);
    s->gone = true;
    s->next = pinned; /* unlinked and gone: the links are this loop's */
    pinned = s;
  }
  pthread_mutex_unlock(&dev->lock);
  for (TpkStorage *s = pinned, *next; s; s = next) {
    next = s->next;
    storage_give_back(s);
    storage_release(s);
  }
  cache_empty(dev->cache, true);
}

void *tpk_buffer_memory(const TpkBuffer *b) {
  char *data = atomic_load_explicit(&b->storage->data, memory_order_acquire);
  return data ? data + b->offset : NULL;
}

/* Under dev->lock: the context's end gives the bytes back under it. */
static TpkStatus materialise_locked(TpkStorage *s) {
  if (s->gone) return tpk_runtime_fail(TPK_ERR_INVALID, "the buffer's context was destroyed");
  if (s->external || atomic_load_explicit(&s->data, memory_order_relaxed)) return TPK_OK;
  TpkDevice *dev = s->dev;
  if (tpk_device_reserve(dev, s->bytes) != TPK_OK) return TPK_ERR_NOMEM;
  void *data = dev->ops->alloc(dev, s->bytes, false);
  if (!data) {
    atomic_fetch_sub(&dev->used, s->bytes);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "%s: out of host memory allocating %zu bytes", dev->name, s->bytes);
  }
  atomic_store_explicit(&s->data, data, memory_order_release);
  return TPK_OK;
}

TpkStatus tpk_buffer_materialise(TpkBuffer *b) {
  TpkStorage *s = b->storage;
  if (atomic_load_explicit(&s->data, memory_order_acquire) || s->external) return TPK_OK;
  pthread_mutex_lock(&b->dev->lock);
  TpkStatus st = materialise_locked(s);
  pthread_mutex_unlock(&b->dev->lock);
  return st;
}

/* A buffer's bytes, given memory if they were deferred; NULL when its
 * context was destroyed (or there is no memory for them). */
static void *buffer_bytes(const TpkBuffer *b) {
  pthread_mutex_lock(&b->dev->lock);
  void *data = materialise_locked(b->storage) == TPK_OK ? tpk_buffer_memory(b) : NULL;
  pthread_mutex_unlock(&b->dev->lock);
  return data;
}

/* The size of a shape in bytes, checked. */
static TpkStatus shape_bytes(const char *who, TpkDType dtype, int rank, const int64_t *shape, size_t *out) {
  if ((unsigned)dtype >= TPK_DTYPE_COUNT) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: unknown dtype %d", who, (int)dtype);
  if (rank < 0 || rank > TPK_MAX_DIMS) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: rank %d is not in 0..%d", who, rank, TPK_MAX_DIMS);
  if (rank && !shape) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: rank %d but no shape", who, rank);
  size_t bytes = tpk_dtype_size(dtype);
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: dimension %d is negative (%lld)", who, i, (long long)shape[i]);
    if (shape[i] && bytes > SIZE_MAX / 2 / (size_t)shape[i]) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: the shape's size overflows", who);
    bytes *= (size_t)shape[i];
  }
  *out = bytes;
  return TPK_OK;
}

/* A handle on storage s (whose hold it takes over) as dtype[shape] at
 * offset. On failure s is untouched: the caller undoes what it did. */
static TpkStatus buffer_new(TpkStorage *s, size_t offset, TpkDType dtype, int rank, const int64_t *shape, size_t bytes,
                            TpkBuffer **out) {
  TpkBuffer *b = calloc(1, sizeof *b);
  if (!b) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory for a buffer");
  atomic_init(&b->refs, 1);
  b->dev = s->dev;
  b->storage = s;
  b->dtype = dtype;
  b->rank = rank;
  for (int i = 0; i < rank; i++) b->shape[i] = shape[i];
  b->bytes = bytes;
  b->offset = offset;
  tpk_context_retain(s->dev->ctx);
  *out = b;
  return TPK_OK;
}

/* New storage for `bytes` at data, already counted against dev: the
 * device's memory, or the caller's (external, given back through release).
 * NULL when out of memory; data and the count are then still the caller's. */
static TpkStorage *storage_new(TpkDevice *dev, void *data, size_t bytes, bool external, TpkReleaseFn release, void *user) {
  TpkStorage *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  atomic_init(&s->refs, 1);
  s->dev = dev;
  atomic_init(&s->data, data);
  s->bytes = bytes;
  s->external = external;
  s->release = release;
  s->user = user;
  storage_link(s);
  return s;
}

/* Undo storage_new: its bytes and their count stay the caller's. */
static void storage_discard(TpkStorage *s) {
  pthread_mutex_lock(&s->dev->lock);
  storage_unlink(s);
  pthread_mutex_unlock(&s->dev->lock);
  free(s);
}

static TpkStatus buffer_create(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, bool zero, TpkBuffer **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_create: no place for the buffer");
  *out = NULL;
  if (!dev) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_create: no device");
  if (tpk_context_closed(dev->ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_create: the context was destroyed");
  size_t bytes;
  if (shape_bytes("tpk_buffer_create", dtype, rank, shape, &bytes) != TPK_OK) return TPK_ERR_INVALID;
  if (tpk_device_reserve(dev, bytes) != TPK_OK) return TPK_ERR_NOMEM;
  void *data = dev->ops->alloc(dev, bytes, zero);
  TpkStorage *s = data ? storage_new(dev, data, bytes, false, NULL, NULL) : NULL;
  TpkStatus st = s ? buffer_new(s, 0, dtype, rank, shape, bytes, out)
                   : tpk_runtime_fail(TPK_ERR_NOMEM, "%s: out of host memory allocating %zu bytes", dev->name, bytes);
  if (st != TPK_OK) {
    if (s) storage_discard(s);
    if (data) dev->ops->free(dev, data, bytes);
    atomic_fetch_sub(&dev->used, bytes);
  }
  return st;
}

TpkStatus tpk_buffer_create(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out) {
  return buffer_create(dev, dtype, rank, shape, true, out);
}

TpkStatus tpk_buffer_create_unfilled(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out) {
  return buffer_create(dev, dtype, rank, shape, false, out);
}

TpkStatus tpk_buffer_create_deferred(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out) {
  *out = NULL;
  if (tpk_context_closed(dev->ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_create: the context was destroyed");
  size_t bytes;
  if (shape_bytes("tpk_buffer_create", dtype, rank, shape, &bytes) != TPK_OK) return TPK_ERR_INVALID;
  TpkStorage *s = storage_new(dev, NULL, bytes, false, NULL, NULL);
  TpkStatus st = s ? buffer_new(s, 0, dtype, rank, shape, bytes, out) : tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory for a buffer");
  if (st != TPK_OK && s) storage_discard(s);
  return st;
}

/* "(4, 1)" */
static void print_dims(char *out, size_t size, int rank, const int64_t *v) {
  int n = snprintf(out, size, "(");
  for (int i = 0; i < rank && n > 0 && (size_t)n < size; i++)
    n += snprintf(out + n, size - (size_t)n, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, "%s)", rank == 1 ? "," : "");
}

TpkStatus tpk_buffer_wrap(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, const int64_t *strides,
                          void *data, TpkReleaseFn release, void *user, TpkBuffer **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_wrap: no place for the buffer");
  *out = NULL;
  if (!dev) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_wrap: no device");
  if (tpk_context_closed(dev->ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_wrap: the context was destroyed");
  if (!dev->ops->wraps_host_memory)
    return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "tpk_buffer_wrap: %s cannot use host memory as a buffer", dev->name);
  size_t bytes;
  if (shape_bytes("tpk_buffer_wrap", dtype, rank, shape, &bytes) != TPK_OK) return TPK_ERR_INVALID;
  if (!data && bytes) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_wrap: no data");
  size_t esize = tpk_dtype_size(dtype);
  if ((uintptr_t)data % esize)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_wrap: the data at %p is not aligned to its %s elements (%zu bytes)", data,
                tpk_dtype_name(dtype), esize);
  if (strides) {
    int64_t want[TPK_MAX_DIMS], step = 1;
    bool contiguous = true;
    for (int i = rank - 1; i >= 0; i--) {
      want[i] = step;
      contiguous &= shape[i] == 1 || strides[i] == step;
      step *= shape[i];
    }
    if (!contiguous && bytes) {
      char got[160], expected[160], dims[160];
      print_dims(got, sizeof got, rank, strides);
      print_dims(expected, sizeof expected, rank, want);
      print_dims(dims, sizeof dims, rank, shape);
      return tpk_runtime_fail(TPK_ERR_INVALID,
                  "tpk_buffer_wrap: strides %s (in elements) are not row-major contiguous for shape %s, which needs %s; "
                  "make a contiguous copy first",
                  got, dims, expected);
    }
  }
  if (tpk_device_reserve(dev, bytes) != TPK_OK) return TPK_ERR_NOMEM;
  TpkStorage *s = storage_new(dev, data, bytes, true, release, user);
  TpkStatus st = s ? buffer_new(s, 0, dtype, rank, shape, bytes, out) : tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory for a buffer");
  if (st != TPK_OK) { /* release is not called: the memory is still the caller's */
    if (s) storage_discard(s);
    atomic_fetch_sub(&dev->used, bytes);
  }
  return st;
}

TpkStatus tpk_buffer_view(TpkBuffer *base, size_t offset, TpkDType dtype, int rank, const int64_t *shape,
                          TpkBuffer **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_view: no place for the view");
  *out = NULL;
  if (!base) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_view: no buffer");
  size_t bytes;
  if (shape_bytes("tpk_buffer_view", dtype, rank, shape, &bytes) != TPK_OK) return TPK_ERR_INVALID;
  if (offset % tpk_dtype_size(dtype))
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_view: offset %zu is not a multiple of %s's %zu bytes", offset,
                tpk_dtype_name(dtype), tpk_dtype_size(dtype));
  /* (a view of a buffer whose context was destroyed has no bytes either) */
  if (offset > base->bytes || bytes > base->bytes - offset)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_view: %zu bytes at offset %zu do not fit in the buffer's %zu", bytes, offset,
                base->bytes);
  atomic_fetch_add(&base->storage->refs, 1);
  TpkStatus st = buffer_new(base->storage, base->offset + offset, dtype, rank, shape, bytes, out);
  if (st != TPK_OK) storage_release(base->storage); /* the base still holds it */
  return st;
}

void tpk_buffer_retain(TpkBuffer *b) { atomic_fetch_add(&b->refs, 1); }

void tpk_buffer_release(TpkBuffer *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  TpkContext *ctx = b->dev->ctx;
  storage_release(b->storage);
  free(b);
  tpk_context_release(ctx);
}

void tpk_buffer_destroy(TpkBuffer *b) { tpk_buffer_release(b); }

TpkDType tpk_buffer_dtype(const TpkBuffer *b) { return b->dtype; }
int tpk_buffer_rank(const TpkBuffer *b) { return b->rank; }
const int64_t *tpk_buffer_shape(const TpkBuffer *b) { return b->shape; }
size_t tpk_buffer_bytes(const TpkBuffer *b) { return b->bytes; }
TpkDevice *tpk_buffer_device(const TpkBuffer *b) { return b ? b->dev : NULL; }
/* The pointer may be written through: work pending on the bytes runs first
 * (an error of it stays for tpk_stream_sync). */
void *tpk_buffer_data(TpkBuffer *b) {
  if (!b) return NULL;
  tpk_buffer_settle(b, true);
  return buffer_bytes(b);
}

void *tpk_buffer_address(const TpkBuffer *b) { return b ? buffer_bytes(b) : NULL; }

void tpk_buffer_mark_pending(TpkBuffer *b, TpkStream *s) {
  tpk_stream_retain(s);
  atomic_store(&b->storage->pending, s);
}

void tpk_buffer_mark_read(TpkBuffer *b) { atomic_fetch_add(&b->storage->readers, 1); }

TpkStream *tpk_buffer_unmark(TpkBuffer *b, bool wrote) {
  if (!wrote) {
    atomic_fetch_sub(&b->storage->readers, 1);
    return NULL;
  }
  return atomic_exchange(&b->storage->pending, NULL);
}

TpkStream *tpk_buffer_pending(const TpkBuffer *b) { return atomic_load(&b->storage->pending); }
bool tpk_buffer_read_pending(const TpkBuffer *b) { return atomic_load(&b->storage->readers) > 0; }
bool tpk_buffer_in_use(const TpkBuffer *b, int own) {
  return atomic_load(&b->refs) > own || atomic_load(&b->storage->refs) > 1;
}

TpkStatus tpk_buffer_write(TpkBuffer *b, const void *src, size_t bytes) {
  if (!b || (!src && bytes)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_write: no buffer or no data");
  if (bytes != b->bytes) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_write: %zu bytes given, the buffer holds %zu", bytes, b->bytes);
  if (tpk_buffer_settle(b, true) != TPK_OK) return TPK_ERR_INVALID;
  /* under the device's lock: the context's end may be giving the bytes back */
  pthread_mutex_lock(&b->dev->lock);
  bool gone = b->storage->gone;
  TpkStatus st = gone ? TPK_OK : materialise_locked(b->storage);
  if (!gone && st == TPK_OK && bytes) b->dev->ops->write(b->dev, tpk_buffer_memory(b), src, bytes);
  pthread_mutex_unlock(&b->dev->lock);
  if (gone) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_write: the buffer's context was destroyed");
  return st;
}

TpkStatus tpk_buffer_read(const TpkBuffer *b, void *dst, size_t bytes) {
  if (!b || (!dst && bytes)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_read: no buffer or no destination");
  if (bytes != b->bytes) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_read: %zu bytes asked, the buffer holds %zu", bytes, b->bytes);
  TpkStatus st = tpk_buffer_settle((TpkBuffer *)b, false);
  if (st != TPK_OK) return st;
  pthread_mutex_lock(&b->dev->lock);
  bool gone = b->storage->gone;
  st = gone ? TPK_OK : materialise_locked(b->storage);
  if (!gone && st == TPK_OK && bytes) b->dev->ops->read(b->dev, dst, tpk_buffer_memory(b), bytes);
  pthread_mutex_unlock(&b->dev->lock);
  if (gone) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_buffer_read: the buffer's context was destroyed");
  return st;
}

void tpk_device_memory(TpkDevice *dev, uint64_t *capacity, uint64_t *used) {
  if (capacity) *capacity = dev ? dev->capacity : 0;
  if (used) *used = dev ? atomic_load(&dev->used) : 0;
}
