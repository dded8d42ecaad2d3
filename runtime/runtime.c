/*
 * runtime.c — the public C API: contexts, devices, buffers, programs,
 * kernels, launches and queues (include/tpk.h).
 *
 * A program's text is checked into IR once, when it is loaded
 * (runtime/load.c); nothing after that reads the text again. A launch binds
 * the kernel's shape symbols from the argument buffers, then looks up the
 * specialisation for those sizes and tunables: the kernel's IR is cloned
 * with every size and tunable bound (lower/bind.c), lowered to C with
 * constant shapes and compiled by the JIT (libtcc at once, cc -O3 in the
 * background). Specialisations are cached per program; the JIT keeps
 * optimized code on disk across processes.
 *
 * Code that serves every shape (a Generic) replaces the per-shape compile
 * when there is some: the standard library's, compiled ahead of time
 * (host/std.h), or with TPK_GENERIC=1 one JIT compile per kernel and
 * tunable setting. The specialisation then still binds the kernel with its
 * sizes (same errors), plans it against the device's VMEM and times it on a
 * sim device, but compiles nothing.
 *
 * Code on disk. What the JIT compiles is keyed by what decides its C: the
 * unit's key (the kernel's structural hash and what else its key has, the
 * tunables, a specialisation's sizes), the text its code quotes and the
 * target it is lowered for (code_key; the JIT adds the compiler and tpk's
 * build); a compiled graph's kernels are one code object, kept under their
 * keys together (compile_clusters). A Generic found under its key needs
 * nothing lowered or emitted:
 * its code knows its workspace (<entry>_workspace); a specialisation is
 * still bound and lowered (its threads and a simulator's preparation need
 * the lowered kernel) but not emitted, and on the host only once: what it
 * learnt (SpecFacts) is kept by its code key too, and a compiled graph's launch keeps
 * its calls' facts at its sizes as one entry (GraphFacts). The code goes with the last unit that
 * holds it, so evicting a unit frees its code once no launch uses it.
 *
 * Errors: every call returns a status; the message is kept per thread
 * (tpk_last_error), like errno and dlerror, so concurrent queues do not
 * overwrite each other's messages.
 */
#define _DEFAULT_SOURCE /* madvise */
#include "runtime/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host/host.h"
#include "host/jit.h"
#include "host/prims.h"
#include "host/std.h"
#include "runtime/device.h"
#include "runtime/pool.h"
#include "runtime/tune.h"

/* ---- errors ------------------------------------------------------------------- */

static _Thread_local char last_error[4096];
/* A message that does not fit last_error (a file's every diagnostic) is
 * kept whole on the heap: freed by the thread's next failure, or by the
 * key's destructor when the thread ends. */
static _Thread_local char *long_error;
static pthread_key_t long_error_key;
static pthread_once_t long_error_once = PTHREAD_ONCE_INIT;
static void long_error_key_create(void) { (void)pthread_key_create(&long_error_key, free); }

const char *tpk_last_error(void) { return long_error ? long_error : last_error; }

TpkStatus tpk_runtime_fail(TpkStatus st, const char *fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  char *old = long_error; /* an argument may be the last message: freed after */
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  char *whole = n >= (int)sizeof last_error ? malloc((size_t)n + 1) : NULL;
  if (whole) vsnprintf(whole, (size_t)n + 1, fmt, again);
  va_end(again);
  va_end(ap);
  if (whole || old) { /* else a short message after a short one: no key needed */
    pthread_once(&long_error_once, long_error_key_create);
    pthread_setspecific(long_error_key, whole);
  }
  long_error = whole; /* NULL: last_error holds it (cut short if malloc failed) */
  free(old);
  return st;
}

TpkStatus tpk_runtime_set_error(TpkStatus st, const char *message) { return tpk_runtime_fail(st, "%s", message); }

static TpkStatus fail_err(const TpkError *err) { return tpk_runtime_fail(err->code ? err->code : TPK_ERR_INTERNAL, "%s", err->message); }

/* ---- objects ------------------------------------------------------------------ */

enum {
  MAX_SYMS = 64,
  MAX_PARTS = 64,
  DEFAULT_UNITS = 1024,
  MAX_TUNE_MEMOS = 64, /* per kernel: the sizes most recently launched at */
  MAX_SCRATCH = 8,     /* scratch blocks a context keeps between launches */
  MAX_CODE_KEY = 12 + 2 * MAX_SYMS
};
#define MAX_PART_WORKSPACES ((int64_t)512 << 20) /* bytes: see specialise */

/* Code serving every shape of one kernel at one tunable setting on the host:
 * the standard library's, or compiled once by the JIT (TPK_GENERIC=1, and
 * the kernels of compiled graphs). A unit of the context's cache. */
typedef struct Generic {
  const TpkStdEntry *aot;   /* ahead-of-time code, or: */
  TpkCode *code;            /* JIT-compiled code (held), its entry `entry` (a graph's */
  int entry;                /* clusters share one code: compile_clusters) */
  TpkWorkspaceFn workspace; /* the workspace a launch needs, the code's own */
} Generic;

/* One specialisation of a kernel for a device, its sizes and tunables:
 * the code (its own, or a Generic's) and how much workspace it needs. A
 * unit of the context's cache, shared by every kernel of that structure. */
typedef struct Spec {
  char *tunes_text;        /* "BM=8,BN=128", for launch results */
  TpkCode *code;           /* held */
  TpkUnit *generic_unit;  /* instead of code: a Generic, held */
  const Generic *generic;
  int64_t syms[MAX_SYMS]; /* the shape symbols, in tpk_func_symbols order */
  const TpkDevice *dev;
  TpkPrepared *prepared; /* what the device keeps of it */
  int64_t workspace_bytes; /* one part's */
  int64_t instances;       /* of the grid it shares (-1: not known) */
  int parts;               /* how many threads share the grid (1: one runs it all) */
} Spec;

/* The tunables chosen for launches that name none, per device and sizes;
 * a kernel keeps MAX_TUNE_MEMOS, most recently used first. */
typedef struct TuneMemo {
  const TpkDevice *dev;    /* the device and */
  int64_t sizes[MAX_SYMS]; /* the shape symbols' values it is for */
  int n;     /* 0: the declared defaults */
  TpkNamedInt tunes[TPK_TUNE_MAX_TUNABLES];
  const char *from; /* "tuning cache", "shipped defaults", ..., "declared defaults" */
  struct TuneMemo *next;
} TuneMemo;

struct TpkKernel {
  TpkProgram *prog;
  TpkFunc *f; /* the unbound IR: parameter types with symbols */
  /* What its compiled units are keyed by: the structural hash of f, and
   * what else makes its code differ (its name where the code or messages
   * show it, the library's code, code for every shape). */
  uint64_t key[4];
  int std_file;     /* the standard file whose ahead-of-time code it runs, or -1 */
  int library_file; /* the standard file it is one of the kernels of (by text, or by name and hash), or -1 */
  bool bodyless; /* f is its header only (a program from the cache folder):
                  * binding it parses the body from prog->ir (kernel_body) */
  const char **dims; /* param i's dimension d as text, at [i * TPK_MAX_RANK + d] (module's arena) */
  const char *symbols[MAX_SYMS]; /* its shape symbols (tpk_func_symbols), found once */
  int nsymbols;
  TuneMemo *tuned; /* under prog->lock */
  int ntuned;
};

struct TpkProgram {
  TpkContext *ctx;
  atomic_int refs;    /* the caller's handle, and queued launches */
  bool of_context;    /* a standard program: the context's own, not a hold on it */
  char *name;        /* the file, as messages name it */
  char *text;        /* its text, quoted by messages and generated code's comments */
  size_t len;
  TpkModule *module; /* checked once, unbound */
  TpkKernel *kernels;
  int nkernels;
  pthread_mutex_t lock; /* kernels' tune memos, held */
  /* Specialisations whose trace a launch handed out (TpkLaunchResult:
   * valid while the program lives), held however the cache evicts. */
  TpkUnit **held;
  int nheld, capheld;
  int std_file; /* the standard file this program's text is, or -1 */
  /* A compiled graph (no text): kernels[0] is the graph, whose launches
   * run the driver; kernels[1..nall) are the clusters and kernels it calls
   * (not listed: nkernels is 1), compiled once for every shape. */
  TpkDriver *driver;
  TpkModule *signature; /* kernels[0].f's module */
  int nall;
  /* A compiled graph from the cache folder whose kernels are headers only:
   * its IR text with their bodies, parsed the first time one is bound
   * (under lock) */
  char *ir;
  size_t ir_len;
  TpkModule *ir_module;
  TpkProgram *next;
};

struct TpkContext {
  atomic_int refs;     /* the caller's, and one per buffer, program and queue */
  atomic_bool closed;  /* tpk_context_destroy was called */
  /* Held shared by every launch while it runs, exclusively by the end of
   * the context while it frees what launches use: a launch on another
   * thread either finishes first or is refused. */
  pthread_rwlock_t running;
  TpkQueues *queues;
  TpkJit *jit;
  bool generic_jit; /* TPK_GENERIC=1: compile each kernel once for every shape */
  bool use_aot;     /* the standard library's code (TPK_AOT=0: compile it too) */
  int threads;      /* tpk_host_threads() when the context was made */
  int64_t host_vmem; /* $TPK_HOST_VMEM when the context was made (0: the default) */
  bool dump_ir;      /* TPK_DUMP_IR=1: compiled graphs go to the log */
  TpkLogFn log;      /* tpk_context_set_log, under lock */
  void *log_user;
  TpkHostParallelFn host_parallel; /* tpk_context_set_host_parallel, under lock */
  void *host_parallel_user;
  TpkUnits *units;   /* the compiled units (units.c) */
  atomic_llong emitted; /* kernels lowered and emitted as C (tpk_cache_stats) */
  atomic_llong lowered; /* kernels bound and lowered for a launch's sizes */
  TpkStreams *streams; /* eager streams (eager.c) */
  _Atomic int eager_mode; /* TpkEagerMode of new streams */
  pthread_mutex_t lock; /* the lists below, and pool */
  TpkPool *pool;        /* started by the first stream or launch that shares a grid */
  pthread_mutex_t scratch_lock; /* the blocks below */
  struct {
    void *p;
    size_t cap;
  } scratch[MAX_SCRATCH];
  int nscratch;
  TpkDevice *devices;
  TpkProgram *programs;
  TpkProgram **std_programs; /* per standard file, loaded on first use */
};

int tpk_host_threads(void) {
  const char *env = getenv("TPK_HOST_THREADS");
  long n = 0;
  if (env && *env) {
    char *end;
    n = strtol(env, &end, 10);
    if (*end) n = 0;
  }
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_PARTS ? MAX_PARTS : (int)n;
}

TpkStatus tpk_context_create(TpkContext **out) {
  *out = NULL;
  TpkContext *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory creating a context");
  TpkJitOptions o;
  TpkError err = {0};
  /* the environment is read once, here: a value that does not parse is an
   * error naming it */
  const char *vmem = getenv("TPK_HOST_VMEM");
  ctx->host_vmem = tpk_parse_bytes(vmem);
  if (vmem && *vmem && ctx->host_vmem <= 0)
    tpk_error(&err, TPK_ERR_INVALID, "TPK_HOST_VMEM=%s: expected a size in bytes, such as 134217728, 512K, 128M or 1G", vmem);
  if (err.code || tpk_jit_options_from_env(&o, &err) != TPK_OK || tpk_jit_create(&o, &ctx->jit, &err) != TPK_OK) {
    free(ctx);
    return fail_err(&err);
  }
  const char *g = getenv("TPK_GENERIC");
  ctx->generic_jit = g && strcmp(g, "1") == 0;
  const char *aot = getenv("TPK_AOT");
  ctx->use_aot = !aot || strcmp(aot, "0") != 0;
  ctx->threads = tpk_host_threads();
  const char *dump = getenv("TPK_DUMP_IR");
  ctx->dump_ir = dump && strcmp(dump, "1") == 0;
  const char *units = getenv("TPK_CACHE_UNITS");
  int64_t max_units = DEFAULT_UNITS;
  if (units && *units) {
    char *end;
    long long v = strtoll(units, &end, 10);
    if (*end || v < 1) {
      tpk_jit_destroy(ctx->jit);
      free(ctx);
      return tpk_runtime_fail(TPK_ERR_INVALID, "TPK_CACHE_UNITS=%s: expected a number of compiled units of at least 1, such as 1024", units);
    }
    max_units = v;
  }
  ctx->units = tpk_units_new(max_units, ctx);
  atomic_init(&ctx->emitted, 0);
  atomic_init(&ctx->lowered, 0);
  const char *eager = getenv("TPK_EAGER");
  TpkEagerMode mode = TPK_EAGER_STRICT;
  if (eager && *eager) {
    int m = 0;
    while (m < 3 && strcmp(eager, tpk_eager_mode_name((TpkEagerMode)m)) != 0) m++;
    if (m == 3) {
      tpk_units_free(ctx->units);
      tpk_jit_destroy(ctx->jit);
      free(ctx);
      return tpk_runtime_fail(TPK_ERR_INVALID, "TPK_EAGER=%s: expected debug, strict or fused", eager);
    }
    mode = (TpkEagerMode)m;
  }
  atomic_init(&ctx->eager_mode, (int)mode);
  ctx->streams = tpk_streams_new();
  ctx->std_programs = calloc((size_t)(tpk_std_nfiles ? tpk_std_nfiles : 1), sizeof *ctx->std_programs);
  if (!ctx->units || !ctx->streams || !ctx->std_programs || tpk_queues_create(&ctx->queues) != TPK_OK) {
    tpk_units_free(ctx->units);
    tpk_streams_free(ctx->streams);
    free(ctx->std_programs);
    tpk_jit_destroy(ctx->jit);
    free(ctx);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory creating a context");
  }
  atomic_init(&ctx->refs, 1);
  atomic_init(&ctx->closed, false);
  pthread_rwlock_init(&ctx->running, NULL);
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_mutex_init(&ctx->scratch_lock, NULL);
  *out = ctx;
  return TPK_OK;
}

static void spec_free(void *payload) {
  Spec *s = payload;
  tpk_code_release(s->code);
  free(s->tunes_text);
  if (s->prepared) s->dev->ops->unprepare(s->prepared);
  tpk_unit_release(s->generic_unit);
  free(s);
}

static void generic_free(void *payload) {
  Generic *g = payload;
  tpk_code_release(g->code);
  free(g);
}

/* What launches of prog built: the tunables chosen, the specialisations it
 * holds. */
static void program_free_compiled(TpkProgram *prog) {
  for (int i = 0; prog->kernels && i < (prog->nall ? prog->nall : prog->nkernels); i++) {
    for (TuneMemo *t = prog->kernels[i].tuned, *n; t; t = n) {
      n = t->next;
      free(t);
    }
    prog->kernels[i].tuned = NULL;
    prog->kernels[i].ntuned = 0;
  }
  for (int i = 0; i < prog->nheld; i++) tpk_unit_release(prog->held[i]);
  free(prog->held);
  prog->held = NULL;
  prog->nheld = prog->capheld = 0;
}

static void program_free(TpkProgram *prog) {
  TpkContext *ctx = prog->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (TpkProgram **p = &ctx->programs; *p; p = &(*p)->next)
    if (*p == prog) {
      *p = prog->next;
      break;
    }
  for (int i = 0; i < tpk_std_nfiles; i++)
    if (ctx->std_programs[i] == prog) ctx->std_programs[i] = NULL;
  pthread_mutex_unlock(&ctx->lock);
  program_free_compiled(prog);
  free(prog->kernels);
  tpk_driver_free(prog->driver);
  if (prog->signature) tpk_module_free(prog->signature);
  if (prog->module) tpk_module_free(prog->module);
  if (prog->ir_module) tpk_module_free(prog->ir_module);
  free(prog->ir);
  free(prog->name);
  free(prog->text);
  pthread_mutex_destroy(&prog->lock);
  bool hold = !prog->of_context;
  free(prog);
  if (hold) tpk_context_release(ctx);
}

/* A hold keeps the program's kernels valid. A standard program is its
 * context's own and goes with the context whatever its count, so a hold on
 * one holds the context too (a queue of another context may run its
 * kernel after this context was destroyed). */
void tpk_program_retain(TpkProgram *p) {
  atomic_fetch_add(&p->refs, 1);
  if (p->of_context) tpk_context_retain(p->ctx);
}

void tpk_program_release(TpkProgram *p) {
  if (!p) return;
  TpkContext *held = p->of_context ? p->ctx : NULL;
  if (atomic_fetch_sub(&p->refs, 1) == 1) program_free(p);
  tpk_context_release(held); /* last: it may free a standard program */
}

void tpk_program_destroy(TpkProgram *prog) { tpk_program_release(prog); }

TpkProgram *tpk_kernel_program(const TpkKernel *k) { return k->prog; }

void tpk_context_retain(TpkContext *ctx) { atomic_fetch_add(&ctx->refs, 1); }

bool tpk_context_closed(const TpkContext *ctx) { return atomic_load(&((TpkContext *)ctx)->closed); }

TpkQueues *tpk_context_queues(TpkContext *ctx) { return ctx->queues; }

/* The last hold is gone: nothing can reach the context any more. */
static void context_free(TpkContext *ctx) {
  /* only the standard programs are left: the others held the context */
  while (ctx->programs) program_free(ctx->programs);
  for (TpkDevice *d = ctx->devices, *n; d; d = n) {
    n = d->next;
    d->ops->close(d);
    pthread_mutex_destroy(&d->lock);
    free(d);
  }
  tpk_queues_destroy(ctx->queues);
  tpk_units_free(ctx->units);
  tpk_streams_free(ctx->streams);
  pthread_rwlock_destroy(&ctx->running);
  pthread_mutex_destroy(&ctx->lock);
  pthread_mutex_destroy(&ctx->scratch_lock);
  free(ctx->std_programs);
  free(ctx);
}

void tpk_context_release(TpkContext *ctx) {
  if (ctx && atomic_fetch_sub(&ctx->refs, 1) == 1) context_free(ctx);
}

/* ---- scratch memory ------------------------------------------------------------------ */

/* Blocks of HUGE_FROM bytes or more are rounded up to HUGE, aligned to
 * it and marked for transparent huge pages (where the system enables them
 * on request): scratch is the memory every launch works in, so a new
 * process faults it in with a page per 2 MB instead of per 4 KB, and
 * launches miss the TLB less. From a quarter of one: the MLP step's 0.8
 * and 2.0 MB blocks cost a new process 683 faults as 4 KB pages, 2 as
 * huge ones (first step, CPU 5.9 -> 5.4 ms). (They stay malloc's: freeing
 * one tells it that blocks this large come and go, so it keeps smaller
 * ones, a launch's buffers, in its heap.) */
#define HUGE ((size_t)2 << 20)
#define HUGE_FROM (HUGE / 4)

static void *scratch_alloc(size_t bytes, size_t *cap) {
  void *p = NULL;
  if (bytes < HUGE_FROM) {
    *cap = bytes;
    return aligned_alloc(64, bytes);
  }
  *cap = (bytes + HUGE - 1) / HUGE * HUGE;
  if (posix_memalign(&p, HUGE, *cap) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, *cap, MADV_HUGEPAGE); /* advice: nothing to do when refused */
#endif
  return p;
}

void *tpk_scratch_take(TpkContext *ctx, size_t bytes, size_t *cap) {
  bytes = bytes ? (bytes + 63) / 64 * 64 : 64;
  pthread_mutex_lock(&ctx->scratch_lock);
  int pick = -1; /* the smallest block that holds `bytes`, else the largest */
  for (int i = 0; i < ctx->nscratch; i++) {
    size_t c = ctx->scratch[i].cap, best = pick < 0 ? 0 : ctx->scratch[pick].cap;
    bool fits = c >= bytes, best_fits = pick >= 0 && best >= bytes;
    if (pick < 0 || (fits && (!best_fits || c < best)) || (!fits && !best_fits && c > best)) pick = i;
  }
  void *p = NULL;
  size_t have = 0;
  if (pick >= 0) {
    p = ctx->scratch[pick].p;
    have = ctx->scratch[pick].cap;
    ctx->scratch[pick] = ctx->scratch[--ctx->nscratch];
  }
  pthread_mutex_unlock(&ctx->scratch_lock);
  if (p && have >= bytes) {
    *cap = have;
    return p;
  }
  free(p); /* too small: replaced by one that fits */
  return scratch_alloc(bytes, cap);
}

int tpk_scratch_huge(TpkContext *ctx, size_t *caps, int max) {
  int n = 0;
  pthread_mutex_lock(&ctx->scratch_lock);
  for (int i = 0; i < ctx->nscratch && n < max; i++)
    if (ctx->scratch[i].cap >= HUGE_FROM) caps[n++] = ctx->scratch[i].cap;
  pthread_mutex_unlock(&ctx->scratch_lock);
  return n;
}

void tpk_scratch_warm(TpkContext *ctx, const size_t *caps, int n) {
  for (int i = 0; i < n && i < MAX_SCRATCH; i++) {
    if (caps[i] < HUGE_FROM || caps[i] > ((size_t)1 << 30)) continue; /* not one tpk_scratch_huge names */
    size_t cap;
    void *p = scratch_alloc(caps[i], &cap);
    if (!p) return;
    tpk_memory_populate(p, cap); /* not yet anyone's: nothing to race with */
    tpk_scratch_give(ctx, p, cap);
  }
}

void tpk_memory_populate(void *p, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
  madvise(p, bytes, MADV_POPULATE_WRITE); /* refused (an older kernel): faulted in on first use */
}

void tpk_scratch_give(TpkContext *ctx, void *block, size_t cap) {
  pthread_mutex_lock(&ctx->scratch_lock);
  if (ctx->nscratch < MAX_SCRATCH) {
    ctx->scratch[ctx->nscratch].p = block;
    ctx->scratch[ctx->nscratch++].cap = cap;
    block = NULL;
  }
  pthread_mutex_unlock(&ctx->scratch_lock);
  free(block);
}

/* The end of the context for its user: queued work runs, then everything
 * it holds that a handle does not need goes — the memory of its buffers,
 * what it compiled, its threads. The handles stay valid to destroy. */
void tpk_context_destroy(TpkContext *ctx) {
  if (!ctx || atomic_exchange(&ctx->closed, true)) return;
  tpk_streams_close(ctx->streams);
  tpk_queues_close(ctx->queues);
  pthread_rwlock_wrlock(&ctx->running);
  pthread_mutex_lock(&ctx->lock);
  for (TpkDevice *d = ctx->devices; d; d = d->next) tpk_device_free_memory(d);
  for (TpkProgram *p = ctx->programs; p; p = p->next) {
    pthread_mutex_lock(&p->lock);
    program_free_compiled(p);
    pthread_mutex_unlock(&p->lock);
  }
  pthread_mutex_unlock(&ctx->lock);
  /* (a compiled graph in the cache may be freed here: not under ctx->lock) */
  tpk_cache_tally(ctx);
  tpk_units_clear(ctx->units);
  /* The JIT goes after the programs' specs, when nothing runs their code:
   * background compiles are finished or cancelled here. */
  tpk_jit_destroy(ctx->jit);
  ctx->jit = NULL;
  tpk_pool_destroy(ctx->pool);
  ctx->pool = NULL;
  for (int i = 0; i < ctx->nscratch; i++) free(ctx->scratch[i].p);
  ctx->nscratch = 0;
  pthread_rwlock_unlock(&ctx->running);
  tpk_context_release(ctx);
}

void tpk_context_set_log(TpkContext *ctx, TpkLogFn log, void *user) {
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  ctx->log = log;
  ctx->log_user = user;
  pthread_mutex_unlock(&ctx->lock);
}

void tpk_context_set_host_parallel(TpkContext *ctx, TpkHostParallelFn run, void *user) {
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  ctx->host_parallel = run;
  ctx->host_parallel_user = user;
  pthread_mutex_unlock(&ctx->lock);
}

void tpk_context_log(TpkContext *ctx, const char *text) {
  pthread_mutex_lock(&ctx->lock);
  TpkLogFn log = ctx->log;
  void *user = ctx->log_user;
  pthread_mutex_unlock(&ctx->lock);
  if (log) log(user, text);
}

bool tpk_context_dumps_ir(const TpkContext *ctx) { return ctx->dump_ir; }

bool tpk_context_enter(TpkContext *ctx) {
  pthread_rwlock_rdlock(&ctx->running);
  if (!tpk_context_closed(ctx)) return true;
  pthread_rwlock_unlock(&ctx->running);
  return false;
}

void tpk_context_leave(TpkContext *ctx) { pthread_rwlock_unlock(&ctx->running); }

/* ---- devices and buffers --------------------------------------------------------- */

static TpkStatus device_open(TpkContext *ctx, const char *name, TpkDevice **out) {
  const TpkDeviceOps *kind = tpk_device_kind(name);
  if (!kind) return tpk_runtime_fail(TPK_ERR_INVALID, "unknown device '%s'; devices are \"host\" and \"sim:<chip>\" (e.g. sim:v5e)", name);
  if (strlen(name) >= sizeof (*out)->name) return tpk_runtime_fail(TPK_ERR_INVALID, "device name '%.40s...' is too long", name);
  pthread_mutex_lock(&ctx->lock);
  TpkDevice *d = ctx->devices;
  while (d && strcmp(d->name, name) != 0) d = d->next;
  TpkStatus st = TPK_OK;
  TpkError err = {0};
  if (!d) {
    d = calloc(1, sizeof *d);
    if (!d) st = tpk_error(&err, TPK_ERR_NOMEM, "out of memory opening device '%s'", name);
    else {
      d->ctx = ctx;
      d->ops = kind;
      d->host_vmem = ctx->host_vmem;
      snprintf(d->name, sizeof d->name, "%s", name);
      atomic_init(&d->used, 0);
      pthread_mutex_init(&d->lock, NULL);
      st = kind->open(d, name, &err);
      if (st == TPK_OK) {
        d->next = ctx->devices;
        ctx->devices = d;
      } else {
        pthread_mutex_destroy(&d->lock);
        free(d);
        d = NULL;
      }
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  if (st != TPK_OK) return fail_err(&err);
  *out = d;
  return TPK_OK;
}

TpkStatus tpk_device_open(TpkContext *ctx, const char *name, TpkDevice **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_device_open: no place for the device");
  *out = NULL;
  if (!ctx || !name) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_device_open: no context or no name");
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_device_open: the context was destroyed");
  return device_open(ctx, name, out);
}

const char *tpk_device_name(const TpkDevice *dev) { return dev ? dev->name : "?"; }

/* ---- programs and kernels ---------------------------------------------------------- */

/* What launches and callers read of k's signature, found once: its shape
 * symbols, and the text of every dimension of its parameters, printed from
 * the IR into its module's arena (tpk_kernel_param_dim). */
static TpkStatus kernel_describe(TpkKernel *k, const TpkFuncHash *known) {
  /* Its units' key: a graph's kernels are named by the graph (so their
   * code is named by structure: compile_generic), a .tpk kernel's name is
   * in its code and messages. A standard kernel a graph calls is keyed as
   * its standard program's: it is that kernel, and runs its code. */
  TpkFuncHash h = known ? *known : tpk_func_hash(k->f);
  if (!h.lo && !h.hi) return TPK_ERR_NOMEM;
  TpkProgram *prog = k->prog;
  bool graph = (prog->driver || prog->signature) && k->library_file < 0;
  k->key[0] = h.lo;
  k->key[1] = h.hi;
  k->key[2] = graph ? 0 : tpk_hash_bytes(k->f->name, strlen(k->f->name));
  k->key[3] = (uint64_t)(k->std_file + 1) << 2 | (uint64_t)prog->ctx->generic_jit << 1 | graph;
  int n = tpk_func_symbols(k->f, k->symbols, MAX_SYMS);
  k->nsymbols = n < MAX_SYMS ? n : MAX_SYMS;
  TpkArena *arena = &k->f->module->arena;
  k->dims = tpk_arena_alloc(arena, sizeof *k->dims * (size_t)(k->f->nparams ? k->f->nparams : 1) * TPK_MAX_RANK);
  if (!k->dims) return TPK_ERR_NOMEM;
  for (int i = 0; i < k->f->nparams; i++) {
    const TpkType *t = k->f->params[i].value->type;
    for (int d = 0; t->kind == TPK_TYPE_REF && d < t->rank; d++) {
      TpkStr s = {0};
      tpk_dim_print(&s, t->dims[d]);
      k->dims[i * TPK_MAX_RANK + d] = s.failed || !s.data ? NULL : tpk_arena_strdup(arena, s.data);
      tpk_str_free(&s);
      if (!k->dims[i * TPK_MAX_RANK + d]) return TPK_ERR_NOMEM;
    }
  }
  return TPK_OK;
}

/* A program from its text (name and text: the heap, owned from here on);
 * the context's own (a standard program) or the caller's, which holds the
 * context. */
static TpkStatus program_from_source(TpkContext *ctx, char *name, char *text, size_t len, bool of_context,
                                     TpkProgram **out) {
  TpkProgram *prog = calloc(1, sizeof *prog);
  if (!prog) {
    free(text);
    tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory loading %s", name);
    free(name);
    return TPK_ERR_NOMEM;
  }
  prog->ctx = ctx;
  atomic_init(&prog->refs, 1);
  prog->of_context = of_context;
  if (!of_context) tpk_context_retain(ctx);
  prog->name = name;
  prog->text = text;
  prog->len = len;
  int library_file = tpk_std_file_of(text, len);
  prog->std_file = ctx->use_aot ? library_file : -1;
  pthread_mutex_init(&prog->lock, NULL);
  TpkStr diags = {0};
  TpkStatus st = tpk_runtime_check(name, text, len, &prog->module, &diags);
  if (st != TPK_OK) {
    tpk_runtime_fail(st, "%s", diags.data ? diags.data : "the program did not check");
    tpk_str_free(&diags);
    program_free(prog);
    return st;
  }
  prog->nkernels = prog->module->nfuncs;
  prog->kernels = calloc((size_t)(prog->nkernels ? prog->nkernels : 1), sizeof *prog->kernels);
  if (!prog->kernels) {
    tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory loading %s", name);
    program_free(prog);
    return TPK_ERR_NOMEM;
  }
  for (int i = 0; i < prog->nkernels; i++) {
    prog->kernels[i] = (TpkKernel){.prog = prog, .f = prog->module->funcs[i], .std_file = prog->std_file,
                                   .library_file = library_file};
    if (kernel_describe(&prog->kernels[i], NULL) != TPK_OK) {
      tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory loading %s", name);
      program_free(prog);
      return TPK_ERR_NOMEM;
    }
  }
  pthread_mutex_lock(&ctx->lock);
  prog->next = ctx->programs;
  ctx->programs = prog;
  pthread_mutex_unlock(&ctx->lock);
  *out = prog;
  return TPK_OK;
}

TpkStatus tpk_program_load_file(TpkContext *ctx, const char *path, TpkProgram **out) {
  *out = NULL;
  if (!ctx || !path) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_program_load_file: no context or no path");
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_program_load_file: the context was destroyed");
  char *text, *name = strdup(path);
  size_t len;
  TpkError err = {0};
  if (!name) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory loading %s", path);
  if (tpk_runtime_read_file(path, &text, &len, &err) != TPK_OK) {
    free(name);
    return fail_err(&err);
  }
  return program_from_source(ctx, name, text, len, false, out);
}

/* A program from a copy of its text. */
static TpkStatus program_from_copy(TpkContext *ctx, const char *name, const char *text, size_t len, bool of_context,
                                   TpkProgram **out) {
  char *copy = malloc(len + 1), *n = strdup(name ? name : "<source>");
  if (!copy || !n) {
    free(copy);
    free(n);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory loading a program");
  }
  if (len) memcpy(copy, text, len);
  copy[len] = 0;
  return program_from_source(ctx, n, copy, len, of_context, out);
}

TpkStatus tpk_program_load_source(TpkContext *ctx, const char *name, const char *text, size_t len, TpkProgram **out) {
  *out = NULL;
  if (!ctx || (!text && len)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_program_load_source: no context or no text");
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_program_load_source: the context was destroyed");
  return program_from_copy(ctx, name, text, len, false, out);
}

const TpkModule *tpk_program_ir(const TpkProgram *p) { return p->module; }
const char *tpk_program_name(const TpkProgram *p) { return p->name; }
TpkContext *tpk_program_context(const TpkProgram *p) { return p->ctx; }
const TpkFunc *tpk_kernel_ir(const TpkKernel *k) { return k->f; }
TpkJit *tpk_context_jit(const TpkContext *ctx) { return ctx->jit; }
int64_t tpk_context_emitted(const TpkContext *ctx) { return atomic_load(&((TpkContext *)ctx)->emitted); }
int64_t tpk_context_lowered(const TpkContext *ctx) { return atomic_load(&((TpkContext *)ctx)->lowered); }
TpkUnits *tpk_context_units(const TpkContext *ctx) { return ctx->units; }
TpkStreams *tpk_context_streams(const TpkContext *ctx) { return ctx->streams; }
int tpk_program_kernel_runs(const TpkProgram *p) { return p->driver ? tpk_driver_calls(p->driver) : 1; }
bool tpk_kernel_is_graph(const TpkKernel *k) { return k->prog->driver && k == &k->prog->kernels[0]; }

const char *tpk_eager_mode_name(TpkEagerMode mode) {
  static const char *const names[] = {"debug", "strict", "fused"};
  return (unsigned)mode < 3 ? names[mode] : "?";
}

TpkStatus tpk_context_set_eager_mode(TpkContext *ctx, TpkEagerMode mode) {
  if (!ctx || (unsigned)mode >= 3) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_context_set_eager_mode: no context or no such mode %d", (int)mode);
  atomic_store(&ctx->eager_mode, (int)mode);
  return TPK_OK;
}

TpkEagerMode tpk_context_eager_mode(const TpkContext *ctx) {
  return ctx ? (TpkEagerMode)atomic_load(&((TpkContext *)ctx)->eager_mode) : TPK_EAGER_STRICT;
}

int tpk_program_kernel_count(const TpkProgram *p) { return p ? p->nkernels : 0; }
const char *tpk_program_kernel_name(const TpkProgram *p, int i) {
  return p && i >= 0 && i < p->nkernels ? p->kernels[i].f->name : NULL;
}

TpkStatus tpk_program_kernel(TpkProgram *p, const char *name, TpkKernel **out) {
  *out = NULL;
  if (!p || !name) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_program_kernel: no program or no name");
  for (int i = 0; i < p->nkernels; i++)
    if (strcmp(p->kernels[i].f->name, name) == 0) {
      *out = &p->kernels[i];
      return TPK_OK;
    }
  TpkStr list = {0};
  for (int i = 0; i < p->nkernels; i++) tpk_str_printf(&list, "%s%s", i ? ", " : "", p->kernels[i].f->name);
  tpk_runtime_fail(TPK_ERR_INVALID, "%s has no kernel '%s'; it has: %s", p->name, name, list.data ? list.data : "(none)");
  tpk_str_free(&list);
  return TPK_ERR_INVALID;
}

int tpk_kernel_param_count(const TpkKernel *k) { return k->f->nparams; }
const char *tpk_kernel_param_name(const TpkKernel *k, int i) { return k->f->params[i].name; }
TpkParamKind tpk_kernel_param_kind(const TpkKernel *k, int i) {
  const TpkParam *p = &k->f->params[i];
  if (p->value->type->kind == TPK_TYPE_TENSOR) return TPK_PARAM_KIND_SCALAR;
  return p->role == TPK_PARAM_OUT ? TPK_PARAM_KIND_OUTPUT : p->role == TPK_PARAM_INOUT ? TPK_PARAM_KIND_INOUT : TPK_PARAM_KIND_INPUT;
}
TpkDType tpk_kernel_param_dtype(const TpkKernel *k, int i) { return k->f->params[i].value->type->dtype; }
int tpk_kernel_param_rank(const TpkKernel *k, int i) { return k->f->params[i].value->type->rank; }
const char *tpk_kernel_backward(const TpkKernel *k) { return k ? k->f->backward : NULL; }

const char *tpk_kernel_param_dim(const TpkKernel *k, int i, int d) {
  if (!k || i < 0 || i >= k->f->nparams || d < 0 || d >= tpk_kernel_param_rank(k, i)) return NULL;
  return k->dims[i * TPK_MAX_RANK + d];
}

int tpk_kernel_tunable_count(const TpkKernel *k) { return k ? k->f->ntunes : 0; }
const char *tpk_kernel_tunable_name(const TpkKernel *k, int i) {
  return k && i >= 0 && i < k->f->ntunes ? k->f->tunes[i].name : NULL;
}
int64_t tpk_kernel_tunable_default(const TpkKernel *k, int i) {
  return k && i >= 0 && i < k->f->ntunes ? k->f->tunes[i].value : 0;
}
int tpk_kernel_tunable_choices(const TpkKernel *k, int i, const int64_t **choices) {
  *choices = NULL;
  if (!k || i < 0 || i >= k->f->ntunes) return 0;
  const TpkTune *t = &k->f->tunes[i];
  /* IR that records no choices (a bound tunable) allows only its value */
  *choices = t->nchoices ? t->choices : &t->value;
  return t->nchoices ? t->nchoices : 1;
}

void tpk_dtype_convert(TpkDType from, const void *src, TpkDType to, void *dst, size_t n) {
  tpk_prims()->convert((int)from, (int)to, src, dst, (int64_t)n);
}

/* ---- binding a launch ---------------------------------------------------------------- */

/* The sizes of a launch, and the tunables its shapes use (a tunable in an
 * output's shape, `-> (y: f32[G, N])`, is bound by the launch's tunes or
 * the buffer, like a shape symbol). Tunables not bound take their declared
 * defaults in lookups. */
typedef struct Bound {
  const TpkFunc *f;
  const char *name[MAX_SYMS];
  int64_t value[MAX_SYMS];
  /* where each came from, for messages: parameter from_param's dimension
   * from_dim, or (from_param < 0) the text from */
  int from_param[MAX_SYMS], from_dim[MAX_SYMS];
  const char *from[MAX_SYMS];
  int n;
  int64_t sizes[MAX_SYMS]; /* the kernel's shape symbols' values, in its order */
} Bound;

/* Where binding i came from: "'x' (dimension 0)", "the launch's syms". */
static const char *bound_from(const Bound *b, int i, char *buf, size_t size) {
  if (b->from_param[i] < 0) return b->from[i];
  snprintf(buf, size, "'%s' (dimension %d)", b->f->params[b->from_param[i]].name, b->from_dim[i]);
  return buf;
}

static int bound_find(const Bound *b, const char *name) {
  for (int i = 0; i < b->n; i++)
    if (strcmp(b->name[i], name) == 0) return i;
  return -1;
}

static bool bound_lookup(void *ctx, const char *sym, int64_t *value) {
  const Bound *b = ctx;
  int i = bound_find(b, sym);
  const TpkTune *t = i < 0 ? tpk_func_tune(b->f, sym) : NULL;
  if (i < 0 && !t) return false;
  *value = i >= 0 ? b->value[i] : t->value;
  return true;
}

/* A tunable's value must be one it declares. */
static TpkStatus check_tune_value(const TpkKernel *k, const TpkTune *t, int64_t v, const char *from) {
  if (tpk_tune_allows(t, v)) return TPK_OK;
  TpkStr s = {0};
  tpk_tune_print_choices(&s, t);
  tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': tunable %s is %lld from %s, but it is one of [%s]", k->f->name, t->name,
       (long long)v, from, s.data ? s.data : "");
  tpk_str_free(&s);
  return TPK_ERR_INVALID;
}

static const char *kernel_name(const TpkKernel *k) { return k->f->name; }

/* The device a launch runs on: its buffers', which must agree and be of
 * the kernel's context (the host when it has no buffers). */
static TpkStatus launch_device(const TpkKernel *k, const TpkLaunch *L, TpkDevice **out) {
  *out = NULL;
  const char *first = NULL;
  TpkContext *ctx = k->prog->ctx;
  for (int i = 0; i < k->f->nparams; i++) {
    if (k->f->params[i].value->type->kind != TPK_TYPE_REF || !L->args || !L->args[i]) continue;
    TpkDevice *d = L->args[i]->dev;
    if (d->ctx != ctx)
      return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': the buffer for '%s' belongs to another context than the kernel", k->f->name,
                  k->f->params[i].name);
    if (!*out) {
      *out = d;
      first = k->f->params[i].name;
    } else if (d != *out) {
      return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': '%s' is on %s but '%s' is on %s; a launch runs on one device",
                  k->f->name, k->f->params[i].name, d->name, first, (*out)->name);
    }
  }
  return *out ? TPK_OK : device_open(ctx, "host", out);
}

/* Bind symbols from buffers, check dtypes and every dimension. Nothing is
 * printed unless something is wrong: launches are the hot path. */
static TpkStatus bind_launch(TpkKernel *k, const TpkLaunch *L, Bound *b) {
  const TpkFunc *f = k->f;
  b->f = f;
  b->n = 0;
  for (int i = 0; i < L->ntunes; i++) { /* tunables a shape uses are bound like sizes */
    const TpkTune *t = L->tunes[i].name ? tpk_func_tune(f, L->tunes[i].name) : NULL;
    if (!t || b->n == MAX_SYMS) continue;
    if (check_tune_value(k, t, L->tunes[i].value, "the launch's tunes") != TPK_OK) return TPK_ERR_INVALID;
    b->name[b->n] = t->name;
    b->value[b->n] = L->tunes[i].value;
    b->from_param[b->n] = -1;
    b->from[b->n++] = "the launch's tunes";
  }
  for (int i = 0; i < L->nsyms; i++) {
    if (!L->syms[i].name) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': a shape symbol without a name", kernel_name(k));
    if (b->n == MAX_SYMS) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': too many shape symbols", kernel_name(k));
    b->name[b->n] = L->syms[i].name;
    b->value[b->n] = L->syms[i].value;
    b->from_param[b->n] = -1;
    b->from[b->n++] = "the launch's syms";
  }
  /* inputs first, then outputs: sizes come from inputs where they can */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < f->nparams; i++) {
      const TpkParam *p = &f->params[i];
      const TpkType *t = p->value->type;
      if (t->kind != TPK_TYPE_REF || (pass == 0) != (p->role != TPK_PARAM_OUT)) continue;
      const TpkBuffer *buf = L->args ? L->args[i] : NULL;
      if (!buf) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': no buffer for parameter '%s'", kernel_name(k), p->name);
      if (buf->dtype != t->dtype)
        return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': parameter '%s' is %s but the buffer holds %s", kernel_name(k), p->name,
                    tpk_dtype_name(t->dtype), tpk_dtype_name(buf->dtype));
      if (buf->rank != t->rank)
        return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': parameter '%s' has %d dimension%s but the buffer has %d", kernel_name(k),
                    p->name, t->rank, t->rank == 1 ? "" : "s", buf->rank);
      for (int d = 0; d < t->rank; d++) {
        const TpkDim *dim = t->dims[d];
        int64_t want;
        if (dim->kind == TPK_DIM_SYM && bound_find(b, dim->sym) < 0) {
          if (b->n == MAX_SYMS) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': too many shape symbols", kernel_name(k));
          b->name[b->n] = dim->sym;
          b->value[b->n] = buf->shape[d];
          b->from_param[b->n] = i;
          b->from_dim[b->n] = d;
          const TpkTune *tune = tpk_func_tune(f, dim->sym);
          char from[96];
          if (tune && !tpk_tune_allows(tune, buf->shape[d]))
            return check_tune_value(k, tune, buf->shape[d], bound_from(b, b->n, from, sizeof from));
          b->n++;
          continue;
        }
        if (!tpk_dim_eval(dim, bound_lookup, b, &want)) {
          TpkStr s = {0};
          tpk_dim_print(&s, dim);
          tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': the size %s of '%s' (dimension %d) depends on a symbol no input gives; pass it in syms",
               kernel_name(k), s.data ? s.data : "?", p->name, d);
          tpk_str_free(&s);
          return TPK_ERR_INVALID;
        }
        if (want != buf->shape[d]) {
          TpkStr s = {0};
          tpk_dim_print(&s, dim);
          if (dim->kind == TPK_DIM_SYM) {
            int j = bound_find(b, dim->sym);
            char from[96];
            tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': %s %s is %lld from %s but %lld from '%s' (dimension %d)",
                 kernel_name(k), tpk_func_tune(f, dim->sym) ? "tunable" : "shape symbol", dim->sym,
                 (long long)b->value[j], bound_from(b, j, from, sizeof from), (long long)buf->shape[d], p->name, d);
          } else {
            tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': '%s' (dimension %d) must have size %s = %lld, the buffer has %lld",
                 kernel_name(k), p->name, d, s.data ? s.data : "?", (long long)want, (long long)buf->shape[d]);
          }
          tpk_str_free(&s);
          return TPK_ERR_INVALID;
        }
      }
    }
  const char *const *names = k->symbols;
  int n = k->nsymbols;
  for (int i = 0; i < n; i++) {
    int at = bound_find(b, names[i]);
    if (at < 0)
      return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': shape symbol %s is not bound; pass it in syms", kernel_name(k), names[i]);
    b->sizes[i] = b->value[at];
  }
  for (int i = 0; i < b->n; i++) {
    bool known = tpk_func_tune(f, b->name[i]) != NULL;
    for (int j = 0; j < n; j++) known |= strcmp(names[j], b->name[i]) == 0;
    if (!known) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s' has no shape symbol '%s'", kernel_name(k), b->name[i]);
  }
  for (int i = 0; i < L->ntunes; i++) {
    bool known = false;
    for (int j = 0; j < f->ntunes; j++) known |= strcmp(f->tunes[j].name, L->tunes[i].name) == 0;
    if (!known) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s' has no tunable '%s'", kernel_name(k), L->tunes[i].name);
  }
  TpkError err = {0};
  if (tpk_func_check_requires(f, bound_lookup, b, &err) != TPK_OK) return fail_err(&err);
  return TPK_OK;
}

/* Scalars in their parameter's storage. */
static TpkStatus scalar_value(const TpkKernel *k, int i, double v, void *out) {
  const TpkParam *p = &k->f->params[i];
  TpkDType dt = p->value->type->dtype;
  if (!tpk_dtype_is_float(dt)) {
    if (v != (double)(int64_t)v) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': scalar '%s' is %s; %g is not a whole number", kernel_name(k), p->name, tpk_dtype_name(dt), v);
    int64_t x = (int64_t)v;
    static const int64_t LO[TPK_DTYPE_COUNT] = {[TPK_I32] = INT32_MIN, [TPK_I16] = INT16_MIN, [TPK_I8] = INT8_MIN};
    static const int64_t HI[TPK_DTYPE_COUNT] = {[TPK_I32] = INT32_MAX, [TPK_I16] = INT16_MAX, [TPK_I8] = INT8_MAX, [TPK_U8] = 255, [TPK_BOOL] = 1, [TPK_U32] = UINT32_MAX, [TPK_U16] = UINT16_MAX};
    if (x < LO[dt] || x > HI[dt]) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': scalar '%s' = %lld does not fit in %s", kernel_name(k), p->name, (long long)x, tpk_dtype_name(dt));
    switch (dt) {
    case TPK_I32: *(int32_t *)out = (int32_t)x; break;
    case TPK_I16: *(int16_t *)out = (int16_t)x; break;
    case TPK_I8: *(int8_t *)out = (int8_t)x; break;
    case TPK_U32: *(uint32_t *)out = (uint32_t)x; break;
    case TPK_U16: *(uint16_t *)out = (uint16_t)x; break;
    default: *(uint8_t *)out = (uint8_t)x; break;
    }
    return TPK_OK;
  }
  float fv = (float)v;
  tpk_prims()->convert(TPK_PRIM_F32, (int)dt, &fv, out, 1);
  return TPK_OK;
}

/* ---- specialisation and launch --------------------------------------------------------- */

/* The launch's tunable setting in canonical form, "BM=8,BN=128"
 * (tpk_tune_format: what kernels/aot.c names entries by), appended to s. */
static char *tunes_text(const TpkKernel *k, const int64_t *tunes) {
  TpkStr s = {0};
  tpk_str_puts(&s, "");
  tpk_tune_format(&s, k->f, tunes);
  return s.failed ? (tpk_str_free(&s), NULL) : tpk_str_take(&s);
}

/* k's IR with its body: k->f, or, for a kernel restored as its header
 * only, the function of that name in its program's IR text, parsed once
 * (NULL with the error set when it is not there: the entry was
 * authenticated, so a bug made it). */
static const TpkFunc *kernel_body(const TpkKernel *k) {
  if (!k->bodyless) return k->f;
  TpkProgram *prog = k->prog;
  TpkError err = {0};
  pthread_mutex_lock(&prog->lock);
  if (!prog->ir_module) prog->ir_module = tpk_ir_parse(prog->ir, prog->ir_len, "cache", &err);
  const TpkModule *m = prog->ir_module;
  pthread_mutex_unlock(&prog->lock);
  const TpkFunc *f = NULL;
  for (int i = 0; m && i < m->nfuncs && !f; i++)
    if (m->funcs[i]->is_kernel && strcmp(m->funcs[i]->name, k->f->name) == 0) f = m->funcs[i];
  TpkFuncHash h = f ? tpk_func_hash(f) : (TpkFuncHash){0};
  if (f && h.lo == k->key[0] && h.hi == k->key[1]) return f;
  tpk_runtime_fail(TPK_ERR_INTERNAL, "graph '%s': the cache folder's entry holds %s", prog->name,
                   f ? "a body of another hash for one of its kernels" : m ? "no body for one of its kernels" : err.message);
  return NULL;
}

/* k's IR bound (lower/bind.c) in a module of its own: the tunables, and
 * the sizes when b is given (else the code serves every size). A failure
 * quotes the .tpk line it is about. */
static TpkStatus bind_kernel(const TpkKernel *k, const Bound *b, const int64_t *tunes, TpkModule **module,
                             TpkFunc **out) {
  *module = NULL;
  const TpkFunc *f = kernel_body(k);
  if (!f) return TPK_ERR_INTERNAL;
  TpkBinding binds[2 * MAX_SYMS];
  int n = 0;
  for (int i = 0; b && i < k->nsymbols; i++) binds[n++] = (TpkBinding){k->symbols[i], b->sizes[i]};
  for (int i = 0; i < f->ntunes && n < 2 * MAX_SYMS; i++) binds[n++] = (TpkBinding){f->tunes[i].name, tunes[i]};
  *module = tpk_module_new(f->name);
  if (!*module) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  TpkError err = {0};
  if (tpk_bind(*module, f, binds, n, out, &err) == TPK_OK) return TPK_OK;
  TpkStr s = {0};
  tpk_str_printf(&s, "kernel '%s' with ", f->name);
  for (int i = 0; i < n; i++) tpk_str_printf(&s, "%s%s=%lld", i ? ", " : "", binds[i].name, (long long)binds[i].value);
  tpk_str_puts(&s, ":\n");
  if (k->prog->text) tpk_render_error_at(&s, k->prog->name, k->prog->text, k->prog->len, &err);
  else tpk_str_printf(&s, "%s\n", err.message);
  tpk_runtime_fail(err.code ? err.code : TPK_ERR_INVALID, "%s", s.data ? s.data : err.message);
  tpk_str_free(&s);
  return err.code ? err.code : TPK_ERR_INVALID;
}

/* A failure of a stage after binding: with the .tpk line quoted when the
 * error knows it (a block that does not fit the VMEM, at its load). */
static TpkStatus fail_at_line(const TpkKernel *k, const TpkError *err) {
  if (err->line <= 0 || !k->prog->text) return fail_err(err);
  TpkStr s = {0};
  tpk_render_error_at(&s, k->prog->name, k->prog->text, k->prog->len, err);
  TpkStatus st = tpk_runtime_fail(err->code ? err->code : TPK_ERR_INTERNAL, "%s", s.data ? s.data : err->message);
  tpk_str_free(&s);
  return st;
}

/* The C name of a kernel's entry point: prefix and name, with what C does
 * not allow in a name (a cluster's "g.c0") as '_'. */
static void entry_name(char *out, size_t size, const char *prefix, const char *name) {
  snprintf(out, size, "%s%s", prefix, name);
  for (char *c = out + strlen(prefix); *c; c++)
    if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
}

/* A unit's key: kind, the kernel's identity, then n more words. */
enum {
  UNIT_GENERIC = TPK_UNIT_KEY_GENERIC,
  UNIT_SPEC = TPK_UNIT_KEY_SPEC,
  UNIT_FACTS = TPK_UNIT_KEY_FACTS,
  UNIT_GRAPH_FACTS = TPK_UNIT_KEY_GRAPH_FACTS
};

/* The words k's code is kept under on disk (host/jit.h, keyed code): what
 * decides its C besides the compiler and tpk's build, which the JIT adds —
 * the kind of unit and k's key (structure, name where the code shows it),
 * the text its code quotes, the target it is lowered for, the tunables,
 * and a specialisation's sizes (sizes NULL: code for every shape). */
static int code_key(const TpkKernel *k, int kind, const int64_t *tunes, const int64_t *sizes, const TpkTarget *t,
                    uint64_t *out) {
  const TpkProgram *prog = k->prog;
  int n = 0;
  out[n++] = (uint64_t)kind;
  for (int i = 0; i < 4; i++) out[n++] = k->key[i];
  out[n++] = prog->text ? tpk_hash_bytes(prog->text, prog->len) : 0;
  out[n++] = tpk_hash_bytes(t->name, strlen(t->name));
  out[n++] = (uint64_t)t->vmem_bytes;
  out[n++] = (uint64_t)t->tile_bytes;
  int ntunes = k->f->ntunes < MAX_SYMS ? k->f->ntunes : MAX_SYMS;
  out[n++] = (uint64_t)ntunes;
  for (int i = 0; i < ntunes; i++) out[n++] = (uint64_t)tunes[i];
  out[n++] = sizes ? (uint64_t)k->nsymbols : UINT64_MAX;
  for (int i = 0; sizes && i < k->nsymbols; i++) out[n++] = (uint64_t)sizes[i];
  return n;
}

/* Compile k once for every shape at these tunables (TPK_GENERIC=1, a
 * graph's kernels), or find the code compiled before under its key. */
static TpkStatus compile_generic(TpkKernel *k, const int64_t *tunes, Generic *g) {
  TpkProgram *prog = k->prog;
  TpkContext *ctx = prog->ctx;
  /* A graph's kernel is shared by every graph of its structure, whatever
   * it is called there: its code is named after its structure. */
  char name[40], entry[128];
  snprintf(name, sizeof name, "k%016llx", (unsigned long long)k->key[0]);
  entry_name(entry, sizeof entry, "tpk_generic_", prog->driver ? name : k->f->name);
  TpkTarget host = tpk_target_host(ctx->host_vmem);
  uint64_t key[MAX_CODE_KEY];
  int nkey = code_key(k, UNIT_GENERIC, tunes, NULL, &host, key);
  tpk_jit_load(ctx->jit, key, nkey, entry, &g->code);
  if (g->code && (g->workspace = tpk_code_workspace(g->code))) {
    tpk_units_loaded(ctx->units, TPK_UNIT_KERNEL);
    return TPK_OK;
  }
  tpk_code_release(g->code); /* (an entry without its workspace: not ours) */
  g->code = NULL;
  TpkModule *module;
  TpkFunc *f;
  TpkStatus st = bind_kernel(k, NULL, tunes, &module, &f);
  if (st != TPK_OK) {
    if (module) tpk_module_free(module);
    return st;
  }
  if (prog->driver) f->name = tpk_module_intern(module, name, strlen(name));
  TpkError err = {0};
  TpkStr c = {0};
  TpkPlan plan;
  st = tpk_lower(f, &host, &plan, &err);
  if (st == TPK_OK) {
    st = tpk_emit_c(f, &plan, entry, prog->text, 0, &c, &err);
    atomic_fetch_add(&ctx->emitted, 1);
  }
  tpk_plan_free(&plan);
  if (st == TPK_OK) st = tpk_jit_compile_keyed(ctx->jit, key, nkey, c.data, entry, &g->code, &err);
  if (st == TPK_OK && !(g->workspace = tpk_code_workspace(g->code)))
    st = tpk_error(&err, TPK_ERR_INTERNAL, "internal error: the code of '%s' has no %s_workspace", k->f->name, entry);
  tpk_str_free(&c);
  tpk_module_free(module);
  if (st == TPK_OK) return TPK_OK;
  if (!prog->driver) return fail_err(&err);
  return tpk_runtime_fail(err.code ? err.code : TPK_ERR_INTERNAL, "graph '%s', kernel '%s': %s", prog->name, k->f->name, err.message);
}

/* The code serving every shape of k at these tunables, if there is some,
 * as a unit of the context's cache (held for the caller): NULL when the
 * launch must be specialised. */
static TpkStatus find_generic(TpkKernel *k, const int64_t *tunes_values, TpkUnit **out) {
  *out = NULL;
  TpkProgram *prog = k->prog;
  bool jit = prog->ctx->generic_jit || prog->driver; /* a graph's kernels serve every shape */
  if (k->std_file < 0 && !jit) return TPK_OK;
  char *tunes = tunes_text(k, tunes_values);
  if (!tunes) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  const TpkStdEntry *aot = k->std_file >= 0 ? tpk_std_find(k->std_file, k->f->name, tunes) : NULL;
  free(tunes);
  if (!aot && !jit) return TPK_OK;
  uint64_t key[5 + MAX_SYMS] = {UNIT_GENERIC, k->key[0], k->key[1], k->key[2], k->key[3]};
  int n = 5;
  for (int i = 0; i < k->f->ntunes && i < MAX_SYMS; i++) key[n++] = (uint64_t)tunes_values[i];
  TpkUnit *unit;
  bool claimed;
  TpkStatus st = tpk_units_get(prog->ctx->units, -1, key, n, &unit, &claimed);
  if (st != TPK_OK || !claimed) {
    *out = unit;
    return st;
  }
  Generic *g = calloc(1, sizeof *g);
  if (g && aot) g->workspace = aot->workspace;
  st = !g ? tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory") : (g->aot = aot) ? TPK_OK : compile_generic(k, tunes_values, g);
  if (st != TPK_OK) {
    if (g) generic_free(g);
    tpk_unit_abandon(prog->ctx->units, unit);
    return st;
  }
  tpk_unit_ready(prog->ctx->units, unit, g, generic_free);
  *out = unit;
  return TPK_OK;
}

/* Bind the kernel's IR with every size and tunable, lower it and compile it
 * (unless code serving every shape exists). The bound IR goes once the
 * device has prepared what it keeps of it. */
/* Threads: a part per thread, never more parts than the grid has
 * instances (a one-instance grid wakes nobody; -1: not known), and no more
 * than keep the parts' workspaces together within MAX_PART_WORKSPACES
 * (each part has its own, and a kernel may plan up to the whole VMEM
 * budget). */
static void share_grid(Spec *spec, int64_t instances, int threads) {
  spec->parts = instances < 0 || instances > threads ? threads : instances < 1 ? 1 : (int)instances;
  while (spec->parts > 1 && (int64_t)spec->parts * spec->workspace_bytes > MAX_PART_WORKSPACES) spec->parts--;
}

/* What a launch of code for every shape on a device that keeps nothing of
 * the IR (the host) learns from binding and lowering its kernel for some
 * sizes: that they bind and lower, and how many instances the shared grid
 * has. Kept in the cache folder under the specialisation's code key, so a
 * later process binds and lowers nothing for sizes seen before. */
typedef struct SpecFacts {
  int64_t instances; /* -1: no grid is shared */
} SpecFacts;

static bool facts_save(const void *payload, TpkStr *out) {
  tpk_str_printf(out, "%lld", (long long)((const SpecFacts *)payload)->instances);
  return !out->failed;
}

static void *facts_load(TpkContext *ctx, const char *bytes, size_t len) {
  (void)ctx;
  char text[32], *end;
  if (len == 0 || len >= sizeof text) return NULL;
  memcpy(text, bytes, len);
  text[len] = 0;
  long long n = strtoll(text, &end, 10);
  SpecFacts *f = *end || n < -1 ? NULL : malloc(sizeof *f);
  if (f) f->instances = n;
  return f;
}

/* (not counted as a unit of a kind: the lookup of the specialisation is) */
static const TpkUnitCodec facts_codec = {-1, facts_save, facts_load, free};

/* The facts unit of k at these sizes and tunables on target t (held for
 * the caller): found, or claimed for the caller to publish or abandon. */
static TpkStatus find_facts(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkTarget *t, TpkUnit **out,
                            bool *claimed) {
  uint64_t key[MAX_CODE_KEY];
  int nkey = code_key(k, UNIT_FACTS, tunes, b->sizes, t, key);
  return tpk_units_get_kept(k->prog->ctx->units, -1, &facts_codec, key, nkey, out, claimed);
}

/* The facts of every call of a compiled graph's launch at some sizes, as
 * one entry of the cache folder: a warm process's first launch of a graph
 * at sizes seen before reads one entry, not one per kernel (the MLP step's
 * window: 11 reads, ~0.2 ms). Each fact is its unit's key (code_key,
 * UNIT_FACTS) and instances; loading the entry publishes them in memory,
 * where the calls' find_facts finds them. Kept only when every call has
 * code for every shape on a device that keeps nothing of the IR (else
 * there are no facts to keep), and learnt on a launch that ran. Bytes: the
 * tag, the count of facts, then each fact's key length, key and instances,
 * 64-bit words. */
static const char graph_facts_tag[8] = {'G', 'f', 'a', 'c', 't', 's', '1', 0};

typedef struct GraphFacts {
  uint64_t *words; /* each fact: key length, key, instances */
  size_t nwords, cap;
  int n;
  bool whole; /* every call's facts are here: kept on disk */
} GraphFacts;

static void graph_facts_free(void *p) {
  GraphFacts *gf = p;
  if (gf) free(gf->words);
  free(gf);
}

static bool graph_facts_put(GraphFacts *gf, const uint64_t *key, int nkey, int64_t instances) {
  size_t need = gf->nwords + (size_t)nkey + 2;
  if (need > gf->cap) {
    size_t cap = gf->cap ? 2 * gf->cap : 256;
    while (cap < need) cap *= 2;
    uint64_t *more = realloc(gf->words, sizeof *more * cap);
    if (!more) return false;
    gf->words = more;
    gf->cap = cap;
  }
  gf->words[gf->nwords++] = (uint64_t)nkey;
  memcpy(gf->words + gf->nwords, key, sizeof *key * (size_t)nkey);
  gf->nwords += (size_t)nkey;
  gf->words[gf->nwords++] = (uint64_t)instances;
  gf->n++;
  return true;
}

static bool graph_facts_save(const void *payload, TpkStr *out) {
  const GraphFacts *gf = payload;
  if (!gf->whole || !gf->n) return false;
  uint64_t n = (uint64_t)gf->n;
  tpk_str_putn(out, graph_facts_tag, sizeof graph_facts_tag);
  tpk_str_putn(out, (const char *)&n, sizeof n);
  tpk_str_putn(out, (const char *)gf->words, sizeof *gf->words * gf->nwords);
  return !out->failed;
}

/* Publish a fact in memory, unless the cache has its key already. */
static void publish_fact(TpkUnits *units, const uint64_t *key, int nkey, int64_t instances) {
  TpkUnit *unit;
  bool claimed;
  if (tpk_units_get(units, -1, key, nkey, &unit, &claimed) != TPK_OK) return;
  SpecFacts *f = claimed ? malloc(sizeof *f) : NULL;
  if (f) {
    f->instances = instances;
    tpk_unit_ready(units, unit, f, free);
  } else if (claimed) {
    tpk_unit_abandon(units, unit);
    return;
  }
  tpk_unit_release(unit);
}

/* The entry's facts, checked word by word (an entry that is not facts of
 * this build's keys makes nothing: the launch learns them again), then
 * published in memory. */
static void *graph_facts_load(TpkContext *ctx, const char *bytes, size_t len) {
  size_t nwords = len >= sizeof graph_facts_tag + 8 ? (len - sizeof graph_facts_tag) / 8 : 0;
  if (!nwords || (len - sizeof graph_facts_tag) % 8 || memcmp(bytes, graph_facts_tag, sizeof graph_facts_tag) != 0)
    return NULL;
  GraphFacts *gf = calloc(1, sizeof *gf);
  uint64_t *w = malloc(sizeof *w * nwords);
  if (!gf || !w) {
    free(gf);
    free(w);
    return NULL;
  }
  memcpy(w, bytes + sizeof graph_facts_tag, sizeof *w * nwords);
  uint64_t n = w[0];
  size_t at = 1;
  bool ok = n > 0 && n <= (uint64_t)nwords;
  for (uint64_t i = 0; ok && i < n; i++) {
    uint64_t nkey = at < nwords ? w[at] : 0;
    ok = nkey >= 1 && nkey <= MAX_CODE_KEY && nwords - at >= nkey + 2 && w[at + 1] == UNIT_FACTS &&
         (int64_t)w[at + 1 + nkey] >= -1;
    at += ok ? nkey + 2 : 0;
  }
  if (!ok || at != nwords) {
    free(w);
    free(gf);
    return NULL;
  }
  gf->words = w;
  gf->nwords = gf->cap = nwords;
  gf->n = (int)n;
  gf->whole = true;
  for (size_t i = 1; i < nwords; i += w[i] + 2) publish_fact(ctx->units, w + i + 1, (int)w[i], (int64_t)w[i + 1 + w[i]]);
  return gf;
}

static const TpkUnitCodec graph_facts_codec = {-1, graph_facts_save, graph_facts_load, graph_facts_free};

/* The launch of a compiled graph that learns its facts (its unit was
 * claimed) collects its calls' here, on the launching thread, which runs
 * the calls. */
static _Thread_local GraphFacts *collecting_facts;

/* A call's specialisation, into the facts collected. */
static void collect_facts(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkDevice *dev, const Spec *spec) {
  GraphFacts *gf = collecting_facts;
  if (!gf->whole) return;
  if (dev->ops->prepare || !spec->generic_unit) { /* no facts: the entry would not be the launch's whole story */
    gf->whole = false;
    return;
  }
  TpkTarget target = dev->ops->target(dev);
  uint64_t key[MAX_CODE_KEY];
  int nkey = code_key(k, UNIT_FACTS, tunes, b->sizes, &target, key);
  if (!graph_facts_put(gf, key, nkey, spec->instances)) gf->whole = false;
}

/* Launch graph kernel k (bound as b) on dev: its calls' facts at these
 * sizes from one entry, or learnt and kept as one. */
static TpkStatus run_graph(TpkKernel *k, TpkDevice *dev, const Bound *b, const TpkLaunch *L) {
  TpkProgram *prog = k->prog;
  if (dev->ops->prepare) return tpk_driver_run(prog->driver, dev, b->sizes, L->args, L->result);
  TpkTarget target = dev->ops->target(dev);
  /* its structure, not its text: what its calls learn follows from it */
  uint64_t key[8 + MAX_SYMS] = {UNIT_GRAPH_FACTS, k->key[0], k->key[1], k->key[2], k->key[3],
                                tpk_hash_bytes(target.name, strlen(target.name)), (uint64_t)target.vmem_bytes,
                                (uint64_t)k->nsymbols};
  int n = 8;
  for (int i = 0; i < k->nsymbols && i < MAX_SYMS; i++) key[n++] = (uint64_t)b->sizes[i];
  TpkUnit *unit = NULL;
  bool claimed = false;
  TpkStatus st = tpk_units_get_kept(prog->ctx->units, -1, &graph_facts_codec, key, n, &unit, &claimed);
  if (st != TPK_OK) return st;
  GraphFacts *gf = claimed ? calloc(1, sizeof *gf) : NULL;
  if (gf) gf->whole = true;
  GraphFacts *was = collecting_facts;
  collecting_facts = gf;
  st = tpk_driver_run(prog->driver, dev, b->sizes, L->args, L->result);
  collecting_facts = was;
  if (claimed && st == TPK_OK && gf) tpk_unit_ready(prog->ctx->units, unit, gf, graph_facts_free);
  else if (claimed) {
    graph_facts_free(gf);
    tpk_unit_abandon(prog->ctx->units, unit);
    return st;
  }
  tpk_unit_release(unit);
  return st;
}

static TpkStatus specialise_bound(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkDevice *dev,
                                  const TpkTarget *t, Spec *spec);

static TpkStatus specialise(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkDevice *dev, Spec *spec) {
  TpkProgram *prog = k->prog;
  TpkTarget target = dev->ops->target(dev);
  TpkUnit *facts = NULL;
  bool claimed = false;
  TpkStatus st = TPK_OK;
  if (!dev->ops->prepare) { /* code for every shape needs only the facts */
    st = find_generic(k, tunes, &spec->generic_unit);
    if (st == TPK_OK && spec->generic_unit) st = find_facts(k, b, tunes, &target, &facts, &claimed);
    if (st != TPK_OK) return st;
    if (facts && !claimed) {
      spec->generic = tpk_unit_payload(spec->generic_unit);
      spec->workspace_bytes = spec->generic->workspace(spec->syms);
      spec->instances = ((const SpecFacts *)tpk_unit_payload(facts))->instances;
      share_grid(spec, spec->instances, prog->ctx->threads);
      tpk_unit_release(facts);
      return TPK_OK;
    }
  }
  st = specialise_bound(k, b, tunes, dev, &target, spec);
  if (facts) {
    SpecFacts *learnt = st == TPK_OK ? malloc(sizeof *learnt) : NULL;
    if (learnt) {
      learnt->instances = spec->instances;
      tpk_unit_ready(prog->ctx->units, facts, learnt, free);
      tpk_unit_release(facts);
    } else tpk_unit_abandon(prog->ctx->units, facts);
  }
  return st;
}

/* Binds k for the sizes, lowers it for the device, and prepares it there. */
static TpkStatus specialise_bound(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkDevice *dev,
                                  const TpkTarget *t, Spec *spec) {
  TpkProgram *prog = k->prog;
  TpkFunc *f;
  TpkModule *module;
  TpkStatus st = bind_kernel(k, b, tunes, &module, &f);
  if (st != TPK_OK) {
    if (module) tpk_module_free(module);
    return st;
  }
  if (!spec->generic_unit) st = find_generic(k, tunes, &spec->generic_unit);
  if (st != TPK_OK) {
    tpk_module_free(module);
    return st;
  }
  const Generic *g = spec->generic_unit ? tpk_unit_payload(spec->generic_unit) : NULL;
  /* Lowered, tiled and planned for the device (a chip's VMEM on a sim
   * device; the host runs that same code for the values). */
  TpkStr c = {0};
  TpkError err = {0};
  char entry[128];
  entry_name(entry, sizeof entry, "tpk_kernel_", f->name);
  TpkPlan plan;
  atomic_fetch_add(&prog->ctx->lowered, 1);
  st = tpk_lower(f, t, &plan, &err);
  if (g) { /* planned (the VMEM budget) and timed; the code exists */
    spec->generic = g;
    spec->workspace_bytes = g->workspace(spec->syms);
  } else if (st == TPK_OK) {
    spec->workspace_bytes = plan.workspace_bytes;
    uint64_t key[MAX_CODE_KEY];
    int nkey = code_key(k, UNIT_SPEC, tunes, b->sizes, t, key);
    tpk_jit_load(prog->ctx->jit, key, nkey, entry, &spec->code);
    if (spec->code) {
      tpk_units_loaded(prog->ctx->units, TPK_UNIT_KERNEL);
    } else {
      st = tpk_emit_c(f, &plan, entry, prog->text, 0, &c, &err);
      atomic_fetch_add(&prog->ctx->emitted, 1);
      if (st == TPK_OK) st = tpk_jit_compile_keyed(prog->ctx->jit, key, nkey, c.data, entry, &spec->code, &err);
    }
  }
  tpk_plan_free(&plan);
  tpk_str_free(&c);
  /* the code's own count: the emitter may add to the plan (host/emit_c.c,
   * right operands packed once) */
  TpkWorkspaceFn code_workspace = st == TPK_OK && spec->code ? tpk_code_workspace(spec->code) : NULL;
  if (code_workspace) spec->workspace_bytes = code_workspace(spec->syms);
  /* the lowered kernel tells whether its grid may be shared and how many
   * instances it has */
  const TpkOp *grid = st == TPK_OK ? tpk_split_grid(f) : NULL;
  spec->instances = grid ? tpk_grid_instances(grid) : 1;
  share_grid(spec, spec->instances, prog->ctx->threads);
  spec->dev = dev;
  if (st == TPK_OK && dev->ops->prepare) st = dev->ops->prepare(dev, f, &spec->prepared, &err);
  tpk_module_free(module);
  return st == TPK_OK ? TPK_OK : fail_at_line(k, &err);
}

/* The specialisation of k on dev for these sizes and tunables, from the
 * context's cache (held for the caller; a launch of k counts as a lookup
 * of a kernel). The device is part of it: its VMEM shapes the lowering. */
static TpkStatus find_spec(TpkKernel *k, const Bound *b, const int64_t *tunes, const TpkDevice *dev, TpkUnit **out) {
  uint64_t key[7 + 2 * MAX_SYMS] = {UNIT_SPEC, k->key[0], k->key[1], k->key[2], k->key[3], (uint64_t)(uintptr_t)dev};
  int n = 6;
  for (int i = 0; i < k->f->ntunes && i < MAX_SYMS; i++) key[n++] = (uint64_t)tunes[i];
  for (int i = 0; i < k->nsymbols; i++) key[n++] = (uint64_t)b->sizes[i];
  TpkUnits *units = k->prog->ctx->units;
  bool claimed;
  TpkStatus st = tpk_units_get(units, TPK_UNIT_KERNEL, key, n, out, &claimed);
  if (st == TPK_OK && !claimed && collecting_facts) collect_facts(k, b, tunes, dev, tpk_unit_payload(*out));
  if (st != TPK_OK || !claimed) return st;
  Spec *s = calloc(1, sizeof *s);
  if (!s || !(s->tunes_text = tunes_text(k, tunes))) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  else {
    s->dev = dev;
    memcpy(s->syms, b->sizes, sizeof *s->syms * (size_t)k->nsymbols);
    st = specialise(k, b, tunes, dev, s);
  }
  if (st != TPK_OK) {
    if (s) spec_free(s);
    tpk_unit_abandon(units, *out);
    *out = NULL;
    return st;
  }
  tpk_unit_ready(units, *out, s, spec_free);
  if (collecting_facts) collect_facts(k, b, tunes, dev, s);
  return TPK_OK;
}

/* kernels/tuned.tsv as the build saw it (build/kernels/registry.c), parsed
 * once. A table that does not parse is left empty (its test fails). */
static TpkTuneTable shipped_tunes;
static pthread_once_t shipped_once = PTHREAD_ONCE_INIT;
static void parse_shipped_tunes(void) {
  TpkError err = {0};
  if (tpk_tune_table_parse(&shipped_tunes, tpk_std_tuned_tsv, strlen(tpk_std_tuned_tsv), "kernels/tuned.tsv", &err) != TPK_OK)
    memset(&shipped_tunes, 0, sizeof shipped_tunes);
}

/* Whether the standard library has code for kernel k (one of its kernels)
 * with these tunables: a search at launch looks at no others, so that a
 * library kernel never waits on a compiler (and runs the same code, the
 * same bits, whether or not its library code is used: TPK_AOT=0). */
static bool library_has(void *kernel, const int64_t *values) {
  const TpkKernel *k = kernel;
  TpkStr tunes = {0};
  tpk_tune_format(&tunes, k->f, values);
  bool has = !tunes.failed && tpk_std_find(k->library_file, k->f->name, tunes.data) != NULL;
  tpk_str_free(&tunes);
  return has;
}

/* A library kernel's declared defaults fitted to the sizes
 * (tpk_tune_fit_defaults) into values, keeping to settings the library has
 * code for (it never waits on a compiler): as many of the fitted values as
 * one of them has. Not a user's kernel: its code for every size is
 * compiled once, for the tunables it declares (a graph compiled once serves
 * every batch). false when nothing changes. */
static bool fit_defaults(TpkKernel *k, const TpkBinding *syms, int n, int64_t *values) {
  const TpkFunc *f = k->f;
  int64_t fitted[TPK_TUNE_MAX_TUNABLES];
  if (k->library_file < 0 || !tpk_tune_fit_defaults(f, syms, n, fitted)) return false;
  memcpy(values, fitted, sizeof *values * (size_t)f->ntunes);
  if (library_has(k, values)) return true;
  int moved[TPK_TUNE_MAX_TUNABLES], nmoved = 0;
  for (int t = 0; t < f->ntunes; t++)
    if (fitted[t] != f->tunes[t].value) moved[nmoved++] = t;
  if (nmoved > 8) return false; /* 2^8 settings to ask at most */
  for (int keep = nmoved - 1; keep > 0; keep--) /* the most fitted values first */
    for (unsigned mask = 1; mask < 1u << nmoved; mask++) {
      if (__builtin_popcount(mask) != keep) continue;
      for (int i = 0; i < nmoved; i++) values[moved[i]] = mask >> i & 1 ? fitted[moved[i]] : f->tunes[moved[i]].value;
      if (library_has(k, values)) return true;
    }
  return false;
}

/* A launch that names no tunables takes the tuning cache's winner for its
 * sizes and device (`tpk tune`), else the shipped defaults for them, else
 * (a simulated chip) the winner of a search at launch, else the shipped
 * defaults of the nearest sizes, else the declared defaults (a library
 * kernel's blocks no larger than the sizes need: fit_defaults). Looked up
 * once per kernel, device and sizes, while those are among the kernel's
 * MAX_TUNE_MEMOS most recent; copied to *out (another launch may drop the
 * memo meanwhile). */
static TpkStatus resolve_tunes(TpkKernel *k, const Bound *b, const TpkDevice *dev, TuneMemo *out) {
  int n = k->nsymbols;
  size_t sizes = sizeof *b->sizes * (size_t)n;
  TpkProgram *prog = k->prog;
  pthread_mutex_lock(&prog->lock);
  TuneMemo **at = &k->tuned;
  while (*at && ((*at)->dev != dev || memcmp((*at)->sizes, b->sizes, sizes) != 0)) at = &(*at)->next;
  TuneMemo *m = *at;
  if (m) { /* the most recent first */
    *at = m->next;
    m->next = k->tuned;
    k->tuned = m;
    *out = *m;
  }
  pthread_mutex_unlock(&prog->lock);
  if (m) return TPK_OK;
  m = calloc(1, sizeof *m);
  if (!m) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  m->dev = dev;
  memcpy(m->sizes, b->sizes, sizes);
  TpkBinding syms[MAX_SYMS];
  for (int i = 0; i < n; i++) syms[i] = (TpkBinding){k->symbols[i], b->sizes[i]};
  pthread_once(&shipped_once, parse_shipped_tunes);
  TpkTuneKey tk;
  TpkTuneConfig cfg;
  TpkError err = {0};
  int64_t fitted[TPK_TUNE_MAX_TUNABLES];
  uint64_t ir_hash = k->key[0]; /* tpk_tune_ir_hash */
  bool found = k->f->ntunes > 0 && tpk_tune_key(&tk, k->f, ir_hash, syms, n, dev ? dev->name : "host", &err) == TPK_OK &&
               tpk_tune_lookup(&tk, k->f, NULL, &shipped_tunes, &cfg);
  /* a row for other sizes is a guess; a device that can search does */
  TpkTuneOptions search = {.syms = syms, .nsyms = n, .keep = k->library_file >= 0 ? library_has : NULL, .keep_user = k};
  if (k->f->ntunes > 0 && (!found || cfg.near) && dev && dev->ops->tune && dev->ops->tune(dev, k->f, ir_hash, &search, &cfg))
    found = true;
  if (found) {
    m->n = cfg.n;
    for (int i = 0; i < cfg.n; i++) m->tunes[i] = (TpkNamedInt){cfg.tunes[i].name, cfg.tunes[i].value};
    m->from = strcmp(cfg.from, "cache") == 0 ? "tuning cache" : strcmp(cfg.from, "search") == 0 ? "tuned at launch" : "shipped defaults";
  } else if (k->f->ntunes > 0 && fit_defaults(k, syms, n, fitted)) {
    m->n = k->f->ntunes;
    for (int i = 0; i < m->n; i++) m->tunes[i] = (TpkNamedInt){k->f->tunes[i].name, fitted[i]};
    m->from = "declared defaults fitted to the sizes";
  } else {
    m->from = "declared defaults";
  }
  *out = *m;
  pthread_mutex_lock(&prog->lock);
  m->next = k->tuned;
  k->tuned = m;
  TuneMemo *gone = NULL;
  if (++k->ntuned > MAX_TUNE_MEMOS) { /* the least recently used goes */
    TuneMemo **last = &k->tuned;
    while ((*last)->next) last = &(*last)->next;
    gone = *last;
    *last = NULL;
    k->ntuned--;
  }
  pthread_mutex_unlock(&prog->lock);
  free(gone);
  return TPK_OK;
}

int tpk_kernel_tune_memos(const TpkKernel *k) {
  pthread_mutex_lock(&k->prog->lock);
  int n = k->ntuned;
  pthread_mutex_unlock(&k->prog->lock);
  return n;
}

/* Set while this thread runs an eager stream's own launch
 * (tpk_kernel_launch_unsettled): its parts run on tpk's workers, never on
 * threads lent (tpk_context_set_host_parallel). Between a stream's windows
 * the lender's threads have nothing to do, so each lent launch would wake
 * them, and after it they spin on the cores the stream needs: the char-GPT
 * step on the host device, two threads, lent: 170-230 ms a step and 91-96
 * ms of CPU; on tpk's workers 36 ms and 15-18 ms of CPU (loaded machine). */
static _Thread_local bool stream_launch;

/* The context's pool (started on first use) and lent threads, if any, in
 * run, and how many parts it can run of the `want` a launch would like (1
 * without a pool). */
static int launch_pool(TpkContext *ctx, int want, TpkRun *run) {
  pthread_mutex_lock(&ctx->lock);
  if (!ctx->pool && tpk_pool_create(ctx->threads, &ctx->pool) != TPK_OK) ctx->pool = NULL;
  run->pool = ctx->pool;
  run->lend = stream_launch ? NULL : ctx->host_parallel;
  run->lend_user = ctx->host_parallel_user;
  int have = tpk_pool_threads(ctx->pool);
  pthread_mutex_unlock(&ctx->lock);
  return want < have ? want : have;
}

TpkPool *tpk_context_hold_workers(TpkContext *ctx) {
  pthread_mutex_lock(&ctx->lock);
  TpkPool *pool = stream_launch || !ctx->host_parallel ? ctx->pool : NULL; /* lent threads: not tpk's to hold */
  tpk_pool_hold(pool);
  pthread_mutex_unlock(&ctx->lock);
  return pool;
}

void tpk_context_start_pool(TpkContext *ctx) {
  pthread_rwlock_rdlock(&ctx->running); /* the context's end stops the pool under the write lock */
  if (!tpk_context_closed(ctx) && ctx->threads > 1) {
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->pool && tpk_pool_create(ctx->threads, &ctx->pool) != TPK_OK) ctx->pool = NULL;
    pthread_mutex_unlock(&ctx->lock);
  }
  pthread_rwlock_unlock(&ctx->running);
}

TpkStatus tpk_launch_check_counts(const TpkLaunch *L, const char *who) {
  if (L->nsyms < 0 || L->ntunes < 0)
    return tpk_runtime_fail(TPK_ERR_INVALID, "%s: nsyms is %d and ntunes %d; counts cannot be negative", who, L->nsyms, L->ntunes);
  if ((L->nsyms && !L->syms) || (L->ntunes && !L->tunes))
    return tpk_runtime_fail(TPK_ERR_INVALID, "%s: %s counts %d entries but the array is NULL", who, L->nsyms && !L->syms ? "nsyms" : "ntunes",
                L->nsyms && !L->syms ? L->nsyms : L->ntunes);
  return TPK_OK;
}

/* The name of the code's tier (TpkLaunchResult.tier). */
static const char *tier_name(const Generic *g, const TpkCode *code) {
  if (g && g->aot) return "aot";
  if (tpk_code_tier(code) != TPK_TIER_CC) return "tcc";
  return tpk_code_from_cache(code) ? "cache" : "cc";
}

static TpkStatus launch(TpkKernel *k, const TpkLaunch *L);

/* src into dst[size], cut to fit (snprintf's "%s" without its cost per launch). */
static void copy_text(char *dst, size_t size, const char *src) {
  size_t n = strlen(src);
  if (n >= size) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
}

/* Work of eager streams on the launch's buffers runs first: what writes
 * its inputs, and what reads its outputs. */
TpkStatus tpk_launch_settle(const TpkKernel *k, const TpkLaunch *L) {
  for (int i = 0; L->args && i < k->f->nparams; i++) {
    TpkBuffer *b = L->args[i];
    if (!b || (!tpk_buffer_pending(b) && !tpk_buffer_read_pending(b))) continue;
    TpkStatus st = tpk_buffer_settle(b, k->f->params[i].role != TPK_PARAM_IN);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

static TpkStatus launch_checked(TpkKernel *k, const TpkLaunch *L);

TpkStatus tpk_kernel_launch(TpkKernel *k, const TpkLaunch *L) {
  if (!k || !L) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_kernel_launch: no kernel or no launch");
  TpkStatus st = tpk_launch_settle(k, L);
  return st == TPK_OK ? launch_checked(k, L) : st;
}

TpkStatus tpk_kernel_launch_unsettled(TpkKernel *k, const TpkLaunch *L) {
  bool was = stream_launch;
  stream_launch = true;
  TpkStatus st = launch_checked(k, L);
  stream_launch = was;
  return st;
}

static TpkStatus launch_checked(TpkKernel *k, const TpkLaunch *L) {
  if (tpk_launch_check_counts(L, "tpk_kernel_launch") != TPK_OK) return TPK_ERR_INVALID;
  TpkContext *ctx = k->prog->ctx;
  pthread_rwlock_rdlock(&ctx->running);
  TpkStatus st = tpk_context_closed(ctx)
                     ? tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': its context was destroyed; launches are refused", k->f->name)
                     : launch(k, L);
  pthread_rwlock_unlock(&ctx->running);
  return st;
}

TpkStatus tpk_launch_queued(TpkKernel *k, const TpkLaunch *L) {
  TpkContext *ctx = k->prog->ctx;
  pthread_rwlock_rdlock(&ctx->running);
  /* The one way to get here after the context's end: a release callback
   * on this queue's worker destroyed the context, which could not wait for
   * the worker it ran on. */
  TpkStatus st = !ctx->jit ? tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': its context was destroyed before this queued launch ran",
                                  k->f->name)
                           : launch(k, L);
  pthread_rwlock_unlock(&ctx->running);
  return st;
}

/* prog keeps unit (a specialisation whose trace a launch handed out,
 * a compiled graph's code) as
 * long as it lives. */
static void program_hold(TpkProgram *prog, TpkUnit *unit) {
  pthread_mutex_lock(&prog->lock);
  bool held = false;
  for (int i = 0; i < prog->nheld && !held; i++) held = prog->held[i] == unit;
  if (!held && prog->nheld == prog->capheld) {
    int cap = prog->capheld ? 2 * prog->capheld : 8;
    TpkUnit **more = realloc(prog->held, sizeof *more * (size_t)cap);
    if (more) prog->held = more, prog->capheld = cap;
  }
  if (!held && prog->nheld < prog->capheld) {
    tpk_unit_retain(unit);
    prog->held[prog->nheld++] = unit;
  }
  pthread_mutex_unlock(&prog->lock);
}

/* Run k with its sizes bound (b) on dev: args are one pointer per
 * parameter (a tensor's bytes, a scalar's value in its dtype), bytes[i] the
 * size of tensor i (zero-filled first when the parameter says so). The
 * tunables are those named in tunes, else the tuned ones for these sizes,
 * else the declared defaults; a tunable a shape uses keeps the value the
 * shapes bound. What the launch did goes to result (may be NULL). */
static TpkStatus run_bound(TpkKernel *k, TpkDevice *dev, const Bound *b, void *const *args, const size_t *bytes,
                           const TpkNamedInt *given, int ngiven, TpkLaunchResult *result) {
  const TpkFunc *f = k->f;
  if (f->ntunes > MAX_SYMS) return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "kernel '%s' has more than %d tunables", f->name, MAX_SYMS);
  int64_t tunes[MAX_SYMS];
  const char *tunes_from = ngiven ? "given" : "declared defaults";
  TuneMemo resolved;
  const TuneMemo *memo = NULL;
  if (ngiven == 0 && f->ntunes > 0) {
    TpkStatus st = resolve_tunes(k, b, dev, &resolved);
    if (st != TPK_OK) return st;
    memo = &resolved;
    tunes_from = memo->from;
  }
  for (int j = 0; j < f->ntunes; j++) {
    tunes[j] = f->tunes[j].value;
    for (int i = 0; i < ngiven; i++)
      if (strcmp(given[i].name, f->tunes[j].name) == 0) tunes[j] = given[i].value;
    for (int i = 0; memo && i < memo->n; i++)
      if (strcmp(memo->tunes[i].name, f->tunes[j].name) == 0) tunes[j] = memo->tunes[i].value;
    int at = bound_find(b, f->tunes[j].name);
    if (at >= 0) tunes[j] = b->value[at];
  }
  TpkUnit *unit;
  TpkStatus st = find_spec(k, b, tunes, dev, &unit);
  if (st != TPK_OK) return st;
  Spec *spec = tpk_unit_payload(unit);
  for (int i = 0; i < f->nparams; i++)
    if (f->params[i].zero_init) memset(args[i], 0, bytes[i]);
  TpkRun run = {.args = args, .syms = spec->syms, .parts = 1};
  if (spec->parts > 1) run.parts = launch_pool(k->prog->ctx, spec->parts, &run);
  /* the parts' workspaces, one after another, from the context's scratch */
  run.workspace_stride = (size_t)(spec->workspace_bytes + 63) / 64 * 64;
  size_t ws_bytes = run.workspace_stride * (size_t)spec->parts, ws_cap;
  void *ws = tpk_scratch_take(k->prog->ctx, ws_bytes, &ws_cap);
  if (!ws) {
    tpk_unit_release(unit);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory for a %zu-byte workspace", ws_bytes);
  }
  const Generic *g = spec->generic;
  TpkCode *code = g ? g->code : spec->code;
  run.fn = g && g->aot ? g->aot->fn : g ? tpk_code_entry_at(code, g->entry) : tpk_code_entry(code);
  run.workspace = ws;
  if (result) { /* before the run: the kernel's data as it reads it */
    TpkError err = {0};
    if (dev->ops->report(dev, spec->prepared, args, result, &err) != TPK_OK) {
      tpk_scratch_give(k->prog->ctx, ws, ws_cap);
      tpk_unit_release(unit);
      return tpk_runtime_fail(err.code ? err.code : TPK_ERR_INTERNAL, "kernel '%s' (%s): %s", f->name, k->prog->name,
                              err.message);
    }
  }
  char message[TPK_KERNEL_ERR_LEN];
  int failed = dev->ops->run(dev, &run, message);
  tpk_scratch_give(k->prog->ctx, ws, ws_cap);
  if (failed >= 0) {
    tpk_unit_release(unit);
    return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s' (%s): %s", f->name, k->prog->name, message);
  }
  if (result) {
    TpkLaunchResult *r = result;
    r->tier = tier_name(g, code);
    copy_text(r->tunes, sizeof r->tunes, spec->tunes_text);
    r->tunes_from = tunes_from;
    const char *note = code ? tpk_code_note(code) : NULL;
    copy_text(r->note, sizeof r->note, note ? note : "");
    if (r->trace) program_hold(k->prog, unit);
  }
  tpk_unit_release(unit);
  return TPK_OK;
}

/* A launch, checked or queued before the context was destroyed. */
static TpkStatus launch(TpkKernel *k, const TpkLaunch *L) {
  const TpkFunc *f = k->f;
  Bound b;
  TpkDevice *dev;
  TpkStatus st = launch_device(k, L, &dev);
  if (st == TPK_OK) st = bind_launch(k, L, &b);
  if (st != TPK_OK) return st;
  if (f->nparams > 256) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s' has more than 256 parameters", f->name);
  void *args[256];
  size_t bytes[256];
  /* the buffers' bytes, deferred until now (a fused window's outputs) */
  for (int i = 0; L->args && i < f->nparams; i++)
    if (f->params[i].value->type->kind != TPK_TYPE_TENSOR && L->args[i] && (st = tpk_buffer_materialise(L->args[i])) != TPK_OK)
      return st;
  if (k->prog->driver && k == &k->prog->kernels[0]) /* a compiled graph: every parameter is a buffer */
    return run_graph(k, dev, &b, L);
  /* scalar arguments */
  uint64_t scalars[256];
  for (int i = 0; i < f->nparams; i++) {
    if (f->params[i].value->type->kind == TPK_TYPE_TENSOR) {
      if (!L->scalars) return tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': no value for scalar '%s'", f->name, f->params[i].name);
      st = scalar_value(k, i, L->scalars[i], &scalars[i]);
      if (st != TPK_OK) return st;
      args[i] = &scalars[i];
      bytes[i] = 0;
    } else {
      args[i] = tpk_buffer_memory(L->args[i]);
      bytes[i] = L->args[i]->bytes;
    }
  }
  return run_bound(k, dev, &b, args, bytes, L->tunes, L->ntunes, L->result);
}

TpkStatus tpk_kernel_run(TpkKernel *k, TpkDevice *dev, const int64_t *sizes, void *const *args, const size_t *bytes,
                         TpkLaunchResult *result) {
  Bound b = {.f = k->f, .n = 0};
  for (int i = 0; i < k->nsymbols; i++) {
    b.name[b.n] = k->symbols[i];
    b.value[b.n] = sizes[i];
    b.from_param[b.n] = -1;
    b.from[b.n++] = "the graph's sizes";
    b.sizes[i] = sizes[i];
  }
  TpkError err = {0};
  if (k->f->nrequires && tpk_func_check_requires(k->f, bound_lookup, &b, &err) != TPK_OK) return fail_err(&err);
  return run_bound(k, dev, &b, args, bytes, NULL, 0, result);
}

/* The JIT code of a unit of kernel code (a specialisation or generic code), else NULL. */
static TpkCode *unit_code(const TpkUnit *unit) {
  int n;
  const uint64_t *key = tpk_unit_key(unit, &n);
  if (key[0] == UNIT_SPEC) {
    const Spec *spec = tpk_unit_payload(unit);
    return spec->generic ? spec->generic->code : spec->code;
  }
  return key[0] == UNIT_GENERIC ? ((const Generic *)tpk_unit_payload(unit))->code : NULL;
}

/* ---- introspection ------------------------------------------------------------------ */

int tpk_kernel_symbol_count(const TpkKernel *k) { return k->nsymbols; }

const char *tpk_kernel_symbol_name(const TpkKernel *k, int i) { return i >= 0 && i < k->nsymbols ? k->symbols[i] : NULL; }

TpkStatus tpk_kernel_param_shape(const TpkKernel *k, int i, const TpkNamedInt *syms, int nsyms, int64_t *shape) {
  if (!k || i < 0 || i >= k->f->nparams) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_kernel_param_shape: no such parameter %d", i);
  Bound b = {.f = k->f, .n = 0};
  for (int j = 0; j < nsyms && b.n < MAX_SYMS; j++) {
    b.name[b.n] = syms[j].name;
    b.value[b.n++] = syms[j].value;
  }
  const TpkType *t = k->f->params[i].value->type;
  for (int d = 0; d < t->rank; d++)
    if (!tpk_dim_eval(t->dims[d], bound_lookup, &b, &shape[d])) {
      TpkStr s = {0};
      tpk_dim_print(&s, t->dims[d]);
      tpk_runtime_fail(TPK_ERR_INVALID, "kernel '%s': the size %s of '%s' (dimension %d) needs a symbol that is not bound",
           k->f->name, s.data ? s.data : "?", k->f->params[i].name, d);
      tpk_str_free(&s);
      return TPK_ERR_INVALID;
    }
  return TPK_OK;
}

void tpk_context_wait_compiles(TpkContext *ctx) {
  if (!ctx) return;
  pthread_rwlock_rdlock(&ctx->running);
  if (!ctx->jit) {
    pthread_rwlock_unlock(&ctx->running);
    return;
  }
  /* the code of every kernel specialisation and generic code in the cache */
  int cap = tpk_units_list(ctx->units, NULL, 0) + 16;
  TpkUnit **units = malloc(sizeof *units * (size_t)cap);
  int n = units ? tpk_units_list(ctx->units, units, cap) : 0;
  for (int i = 0; i < n && i < cap; i++) {
    TpkCode *code = unit_code(units[i]);
    if (code) tpk_code_wait_optimized(code);
    tpk_unit_release(units[i]);
  }
  free(units);
  pthread_rwlock_unlock(&ctx->running);
}

/* ---- the standard library ------------------------------------------------------------ */

int tpk_context_compiler_runs(const TpkContext *ctx) {
  if (!ctx || !ctx->jit) return 0;
  TpkJitStats s = tpk_jit_stats(ctx->jit);
  return s.tcc_compiles + s.cc_compiles;
}

/* The registry lists each kernel once per tunable setting, settings of one
 * kernel next to each other: kernel i is the i-th first setting. */
static const TpkStdEntry *std_kernel_entry(int i) {
  for (int e = 0, n = 0; e < tpk_std_nentries; e++) {
    const TpkStdEntry *x = &tpk_std_entries[e];
    bool first = e == 0 || x->file != x[-1].file || strcmp(x->kernel, x[-1].kernel) != 0;
    if (first && n++ == i) return x;
  }
  return NULL;
}

int tpk_std_kernel_count(void) {
  int n = 0;
  while (std_kernel_entry(n)) n++;
  return n;
}

const char *tpk_std_kernel_name(int i) {
  const TpkStdEntry *e = std_kernel_entry(i);
  return e ? e->kernel : NULL;
}

const char *tpk_std_kernel_file(int i) {
  const TpkStdEntry *e = std_kernel_entry(i);
  return e ? tpk_std_files[e->file].name : NULL;
}

const char *tpk_std_source(const char *file) {
  for (int i = 0; file && i < tpk_std_nfiles; i++)
    if (strcmp(tpk_std_files[i].name, file) == 0) return tpk_std_files[i].source;
  return NULL;
}

TpkStatus tpk_std_kernel(TpkContext *ctx, const char *name, TpkKernel **out) {
  *out = NULL;
  if (!ctx || !name) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_std_kernel: no context or no name");
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_std_kernel: the context was destroyed");
  const TpkStdEntry *e = NULL;
  for (int i = 0; (e = std_kernel_entry(i)) && strcmp(e->kernel, name) != 0; i++) {
  }
  if (!e) {
    TpkStr list = {0};
    for (int i = 0; std_kernel_entry(i); i++) tpk_str_printf(&list, "%s%s", i ? ", " : "", std_kernel_entry(i)->kernel);
    tpk_runtime_fail(TPK_ERR_INVALID, "the standard library has no kernel '%s'; it has: %s", name, list.data ? list.data : "(none)");
    tpk_str_free(&list);
    return TPK_ERR_INVALID;
  }
  pthread_mutex_lock(&ctx->lock);
  TpkProgram *prog = ctx->std_programs[e->file];
  pthread_mutex_unlock(&ctx->lock);
  if (!prog) { /* load outside the lock (loading takes it); keep the first */
    const TpkStdFile *f = &tpk_std_files[e->file];
    char label[160];
    snprintf(label, sizeof label, "std:%s", f->name);
    TpkStatus st = program_from_copy(ctx, label, f->source, f->len, true, &prog);
    if (st != TPK_OK) return st;
    pthread_mutex_lock(&ctx->lock);
    TpkProgram *first = ctx->std_programs[e->file];
    if (!first) ctx->std_programs[e->file] = prog;
    pthread_mutex_unlock(&ctx->lock);
    if (first) {
      program_free(prog);
      prog = first;
    }
  }
  return tpk_program_kernel(prog, name, out);
}

/* ---- compiled graphs ------------------------------------------------------------------ */

/* d, interned in module m. */
static const TpkDim *dim_copy(TpkModule *m, const TpkDim *d) {
  switch (d->kind) {
  case TPK_DIM_CONST: return tpk_dim_const(m, d->value);
  case TPK_DIM_SYM: {
    const char *sym = tpk_module_intern(m, d->sym, strlen(d->sym));
    return sym ? tpk_dim_sym(m, sym) : NULL;
  }
  default: {
    const TpkDim *a = dim_copy(m, d->a), *b = a ? dim_copy(m, d->b) : NULL;
    return a && b ? tpk_dim_binary(m, d->kind, a, b) : NULL;
  }
  }
}

/* The graph func f as the signature of a kernel, alone in a module of its
 * own: f's parameters as `in` refs, then its results as `out` refs, so a
 * launch binds and checks it as any kernel's. */
static TpkFunc *graph_signature(const TpkFunc *f, TpkModule **module) {
  int n = f->nparams + f->nresults;
  if (n > 256) return NULL;
  TpkModule *m = *module = tpk_module_new(f->name);
  if (!m) return NULL;
  const TpkType *types[256];
  const char *names[256];
  TpkParamRole roles[256];
  char name[32];
  for (int i = 0; i < n; i++) {
    const TpkType *t = i < f->nparams ? f->params[i].value->type : f->results[i - f->nparams];
    const TpkDim *dims[TPK_MAX_RANK];
    for (int d = 0; d < t->rank; d++)
      if (!(dims[d] = dim_copy(m, t->dims[d]))) return NULL;
    types[i] = tpk_type_ref(m, t->dtype, t->rank, dims, TPK_MEM_HBM);
    roles[i] = i < f->nparams ? TPK_PARAM_IN : TPK_PARAM_OUT;
    if (i < f->nparams && f->params[i].name) {
      names[i] = f->params[i].name;
    } else {
      snprintf(name, sizeof name, i < f->nparams ? "in%d" : "out%d", i < f->nparams ? i : i - f->nparams);
      if (!(names[i] = tpk_module_intern(m, name, strlen(name)))) return NULL;
    }
  }
  return tpk_func_new(m, f->name, true, n, types, names, roles);
}

/* Is a kernel a graph calls, of this name and hash, one of the library's
 * (the builder cloned it)? Its file, else -1: the build recorded each
 * standard kernel's hash, so nothing is checked or hashed here. */
static int std_callee(const char *name, TpkFuncHash h) { return tpk_std_file_of_kernel(name, h.lo, h.hi); }

bool tpk_std_kernel_is(void *ctx, const TpkFunc *f) {
  (void)ctx;
  return std_callee(f->name, tpk_func_hash(f)) >= 0;
}

static int key_order(const void *a, const void *b) {
  const TpkKernel *x = *(TpkKernel *const *)a, *y = *(TpkKernel *const *)b;
  for (int i = 0; i < 4; i++)
    if (x->key[i] != y->key[i]) return x->key[i] < y->key[i] ? -1 : 1;
  return 0;
}

/* The kernels of a compiled graph (its clusters and the kernels it calls
 * that are not the library's; std[i] marks those), compiled for every
 * shape as ONE code object: a later process reads, authenticates and
 * loads one cache entry for them all, not one per cluster. Each kernel's
 * code is still a Generic unit of the context's cache (entry i of the
 * code), so graphs of one structure share it, and a unit found there is
 * not built again; the code object, though, holds every kernel of the
 * graph, so that its cache entry is the graph's whatever the context held.
 * Kernels of one structure are one entry; units are claimed in the order
 * of their keys, so two graphs compiled at once never wait on each other. */
static TpkStatus compile_clusters(TpkProgram *prog) {
  TpkContext *ctx = prog->ctx;
  TpkKernel **ks = calloc((size_t)prog->nall, sizeof *ks);
  TpkUnit **units = calloc((size_t)prog->nall, sizeof *units);
  bool *claimed = calloc((size_t)prog->nall, sizeof *claimed);
  char(*entries)[40] = calloc((size_t)prog->nall, sizeof *entries);
  const char **names = calloc((size_t)prog->nall, sizeof *names);
  uint64_t *words = calloc((size_t)prog->nall * MAX_CODE_KEY, sizeof *words);
  TpkStatus st = ks && units && claimed && entries && names && words ? TPK_OK : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  int n = 0, nwords = 0;
  for (int i = 1; st == TPK_OK && i < prog->nall; i++) {
    TpkKernel *k = &prog->kernels[i];
    if (k->library_file >= 0 || k->f->ntunes != 0) continue;
    bool seen = false;
    for (int j = 0; j < n && !seen; j++) seen = key_order(&ks[j], &k) == 0;
    if (!seen) ks[n++] = k;
  }
  if (n) qsort(ks, (size_t)n, sizeof *ks, key_order);
  bool any = false;
  TpkTarget host = tpk_target_host(ctx->host_vmem);
  for (int i = 0; st == TPK_OK && i < n; i++) {
    uint64_t key[5] = {UNIT_GENERIC, ks[i]->key[0], ks[i]->key[1], ks[i]->key[2], ks[i]->key[3]};
    st = tpk_units_get(ctx->units, -1, key, 5, &units[i], &claimed[i]);
    any |= st == TPK_OK && claimed[i];
    /* named by its structure: every graph of it shares its code */
    snprintf(entries[i], sizeof entries[i], "tpk_generic_k%016llx", (unsigned long long)ks[i]->key[0]);
    names[i] = entries[i];
    nwords += code_key(ks[i], UNIT_GENERIC, NULL, NULL, &host, words + nwords);
  }
  TpkCode *code = NULL;
  if (st == TPK_OK && any) {
    tpk_jit_load_all(ctx->jit, words, nwords, names, n, &code);
    for (int i = 0; code && i < n; i++)
      if (!tpk_code_workspace_at(code, i)) { /* (an entry without its workspace: not ours) */
        tpk_code_release(code);
        code = NULL;
      }
    if (code) {
      for (int i = 0; i < n; i++)
        if (claimed[i]) tpk_units_loaded(ctx->units, TPK_UNIT_KERNEL);
    } else {
      TpkStr c = {0};
      TpkError err = {0};
      const char *failed = NULL;
      for (int i = 0; st == TPK_OK && i < n; i++) {
        TpkModule *module;
        TpkFunc *f;
        st = bind_kernel(ks[i], NULL, NULL, &module, &f);
        if (st != TPK_OK) failed = ks[i]->f->name;
        char name[40];
        snprintf(name, sizeof name, "k%016llx", (unsigned long long)ks[i]->key[0]);
        if (st == TPK_OK && !(f->name = tpk_module_intern(module, name, strlen(name))))
          st = tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
        TpkPlan plan = {0};
        if (st == TPK_OK) st = tpk_lower(f, &host, &plan, &err);
        if (st == TPK_OK) {
          st = tpk_emit_c(f, &plan, names[i], prog->text, i ? TPK_EMIT_NO_PRELUDE : 0, &c, &err);
          atomic_fetch_add(&ctx->emitted, 1);
        }
        if (st != TPK_OK && !failed) failed = ks[i]->f->name;
        tpk_plan_free(&plan);
        if (module) tpk_module_free(module);
      }
      if (st == TPK_OK && c.failed) st = tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
      if (st == TPK_OK) st = tpk_jit_compile_all(ctx->jit, words, nwords, c.data, names, n, &code, &err);
      for (int i = 0; st == TPK_OK && i < n; i++)
        if (!tpk_code_workspace_at(code, i))
          st = tpk_error(&err, TPK_ERR_INTERNAL, "internal error: the code of '%s' has no %s_workspace", ks[i]->f->name, names[i]);
      tpk_str_free(&c);
      if (st != TPK_OK && err.message[0]) {
        if (failed) tpk_runtime_fail(err.code ? err.code : TPK_ERR_INTERNAL, "graph '%s', kernel '%s': %s", prog->name, failed, err.message);
        else tpk_runtime_fail(err.code ? err.code : TPK_ERR_INTERNAL, "graph '%s': %s", prog->name, err.message);
      }
    }
  }
  for (int i = 0; i < n; i++) {
    if (!units[i]) continue;
    if (claimed[i]) {
      Generic *g = st == TPK_OK ? calloc(1, sizeof *g) : NULL;
      if (g) {
        tpk_code_retain(code);
        *g = (Generic){.code = code, .entry = i, .workspace = tpk_code_workspace_at(code, i)};
        tpk_unit_ready(ctx->units, units[i], g, generic_free);
      } else {
        if (st == TPK_OK) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
        tpk_unit_abandon(ctx->units, units[i]);
        continue; /* the builder's hold went with it */
      }
    }
    if (st == TPK_OK) program_hold(prog, units[i]);
    tpk_unit_release(units[i]);
  }
  tpk_code_release(code);
  free(ks);
  free(units);
  free(claimed);
  free(entries);
  free(names);
  free(words);
  return st;
}

static TpkKernel *find_callee(void *arg, const char *name) {
  TpkProgram *prog = arg;
  for (int i = 1; i < prog->nall; i++)
    if (strcmp(prog->kernels[i].f->name, name) == 0) return &prog->kernels[i];
  return NULL;
}

TpkStatus tpk_program_from_driver(TpkContext *ctx, TpkModule *module, TpkFunc *driver, TpkProgram **out) {
  return tpk_program_from_kept(ctx, module, driver, NULL, NULL, 0, out);
}

TpkStatus tpk_program_from_kept(TpkContext *ctx, TpkModule *module, TpkFunc *driver, const TpkFuncHash *hashes,
                                const char *ir, size_t ir_len, TpkProgram **out) {
  *out = NULL;
  TpkProgram *prog = calloc(1, sizeof *prog);
  if (!prog || !(prog->name = strdup(driver->name)) || (ir && !(prog->ir = malloc(ir_len + 1)))) {
    if (prog) free(prog->name);
    free(prog);
    tpk_module_free(module);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory compiling graph '%s'", driver->name);
  }
  if (ir) {
    memcpy(prog->ir, ir, ir_len);
    prog->ir[ir_len] = 0;
    prog->ir_len = ir_len;
  }
  prog->ctx = ctx;
  atomic_init(&prog->refs, 1);
  tpk_context_retain(ctx);
  prog->module = module;
  prog->std_file = -1;
  pthread_mutex_init(&prog->lock, NULL);
  TpkStatus st = TPK_OK;
  /* kernels[0] the graph, then every kernel of the module (what it calls) */
  prog->nkernels = 1;
  prog->kernels = calloc((size_t)module->nfuncs + 1, sizeof *prog->kernels);
  TpkFunc *sig = prog->kernels ? graph_signature(driver, &prog->signature) : NULL;
  if (!sig) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory compiling graph '%s'", driver->name);
  else {
    prog->kernels[0] = (TpkKernel){.prog = prog, .f = sig, .std_file = -1, .library_file = -1};
    prog->nall = 1;
    st = kernel_describe(&prog->kernels[0], NULL);
  }
  for (int i = 0; st == TPK_OK && i < module->nfuncs; i++) {
    TpkFunc *f = module->funcs[i];
    if (!f->is_kernel) continue;
    /* a standard kernel is the library's, and runs its code */
    bool kept = hashes && (hashes[i].lo || hashes[i].hi);
    TpkFuncHash h = kept ? hashes[i] : tpk_func_hash(f);
    int file = std_callee(f->name, h);
    TpkKernel *k = &prog->kernels[prog->nall++];
    *k = (TpkKernel){.prog = prog, .f = f, .std_file = ctx->use_aot ? file : -1, .library_file = file, .bodyless = kept};
    st = kernel_describe(k, &h);
  }
  if (st == TPK_OK) st = tpk_driver_new(driver, find_callee, prog, &prog->driver);
  /* The clusters and called kernels compile now, once for every shape; a
   * kernel with tunables compiles for the ones its launches pick. */
  if (st == TPK_OK) st = compile_clusters(prog);
  if (st != TPK_OK) {
    program_free(prog);
    return st;
  }
  pthread_mutex_lock(&ctx->lock);
  prog->next = ctx->programs;
  ctx->programs = prog;
  pthread_mutex_unlock(&ctx->lock);
  *out = prog;
  return TPK_OK;
}
