/*
 * internal.h — what the files of runtime/ share and nobody else sees.
 */
#ifndef TPK_RUNTIME_INTERNAL_H
#define TPK_RUNTIME_INTERNAL_H

#include "tpk.h"

#include "ir/ir.h"
#include "lower/lower.h"

/* Set this thread's tpk_last_error() message and return st. */
TpkStatus tpk_runtime_set_error(TpkStatus st, const char *message);
TpkStatus tpk_runtime_fail(TpkStatus st, const char *fmt, ...) TPK_PRINTF(2, 3);

/* A launch's counts: not negative, with an array wherever one is not 0
 * (`who` names the call in the message). */
TpkStatus tpk_launch_check_counts(const TpkLaunch *L, const char *who);

/* runtime/load.c: a program's text, read from a file (the heap: free it),
 * and checked into IR (tpk_module_free it). On failure of the check,
 * `diagnostics` gets them rendered. The only files of runtime/ that see the
 * language frontend. */
TpkStatus tpk_runtime_read_file(const char *path, char **text, size_t *len, TpkError *err);
TpkStatus tpk_runtime_check(const char *name, const char *text, size_t len, TpkModule **out, TpkStr *diagnostics);

/* What the tuner and the command line read of a program: the IR its text
 * was checked into once (nothing bound), its name, its context; a kernel's
 * IR. */
const TpkModule *tpk_program_ir(const TpkProgram *p);
const char *tpk_program_name(const TpkProgram *p);
TpkContext *tpk_program_context(const TpkProgram *p);
const TpkFunc *tpk_kernel_ir(const TpkKernel *k);
/* The context's JIT (host/jit.h): its disk cache, its counters. */
struct TpkJit *tpk_context_jit(const TpkContext *ctx);
/* How many kernels the context lowered and emitted as C (a unit found on
 * disk by its key spares that). */
int64_t tpk_context_emitted(const TpkContext *ctx);
/* How many times it bound and lowered a kernel for a launch's sizes. */
int64_t tpk_context_lowered(const TpkContext *ctx);
/* How many launch sizes k remembers the tunables of (bounded). */
int tpk_kernel_tune_memos(const TpkKernel *k);

/* Lifetimes (tpk.h): every buffer, program and queue holds its context;
 * the context is freed when the caller has destroyed it and the last of
 * them lets go. A destroyed context refuses new objects and launches. */
void tpk_context_retain(TpkContext *ctx);
void tpk_context_release(TpkContext *ctx);
bool tpk_context_closed(const TpkContext *ctx);
/* tpk_kernel_launch without the checks tpk_queue_launch made when the
 * launch was queued (work queued before the context was destroyed runs). */
TpkStatus tpk_launch_queued(TpkKernel *k, const TpkLaunch *L);
/* A queued launch's hold on its kernel's program. */
void tpk_program_retain(TpkProgram *p);
void tpk_program_release(TpkProgram *p);

/* runtime/graph.c: what tpk_graph_compile (compile.c) reads of a graph:
 * its builder (ir/graph.h: tpk_gb_func is the graph's IR) and its context. */
typedef struct TpkGraphBuilder TpkGraphBuilder;
TpkGraphBuilder *tpk_graph_builder(TpkGraph *g);
TpkContext *tpk_graph_context(const TpkGraph *g);

/* A context's queues (queue.c), so that destroying the context waits for
 * their work. */
typedef struct TpkQueues TpkQueues;
TpkStatus tpk_queues_create(TpkQueues **out);
void tpk_queues_destroy(TpkQueues *qs); /* after the last queue is gone */
/* The context is being destroyed: every queue runs what was queued, then
 * its worker stops (errors stay for each queue's next tpk_queue_wait). */
void tpk_queues_close(TpkQueues *qs);
TpkQueues *tpk_context_queues(TpkContext *ctx);

/* ---- eager streams (eager.c) ---- */

/* Before b's bytes are read (or written, `writing`) by anyone but a stream's
 * own work: the stream whose work writes them runs it, and when writing,
 * the streams whose work reads them run theirs. The error of that work, if
 * any, is returned (and stays the stream's, for tpk_stream_sync). */
TpkStatus tpk_buffer_settle(TpkBuffer *b, bool writing);
/* A stream's holders: its caller, and each buffer its pending work writes. */
void tpk_stream_retain(TpkStream *s);
void tpk_stream_release(TpkStream *s);
/* A context's streams, so that its end drops their pending work (no one
 * could read what it writes: the memory goes). */
typedef struct TpkStreams TpkStreams;
TpkStreams *tpk_streams_new(void);
void tpk_streams_free(TpkStreams *ss);
void tpk_streams_close(TpkStreams *ss);
TpkStreams *tpk_context_streams(const TpkContext *ctx);
/* The launch's buffers settled (tpk_buffer_settle): inputs read, outputs written. */
TpkStatus tpk_launch_settle(const TpkKernel *k, const TpkLaunch *L);
/* tpk_kernel_launch and tpk_queue_launch without settling their buffers:
 * a stream's own launches (their parts never run on lent threads). */
TpkStatus tpk_kernel_launch_unsettled(TpkKernel *k, const TpkLaunch *L);
TpkStatus tpk_queue_submit(TpkQueue *q, TpkKernel *k, const TpkLaunch *L);
/* Whether q has run everything queued (what a caller may run itself without
 * passing it). */
bool tpk_queue_idle(TpkQueue *q);

/* ---- the cache of compiled units (units.c) ---- */

typedef struct TpkUnits TpkUnits;
typedef struct TpkUnit TpkUnit;
/* A cache that keeps at most `max` units (the least recently used go), on
 * ctx's cache folder for the kinds that have a codec. */
TpkUnits *tpk_units_new(int64_t max, TpkContext *ctx);
/* Drops the cache's holds (units being built stay to their builders), then frees it. */
void tpk_units_free(TpkUnits *u);
/* Drops the cache's hold on every published unit. */
void tpk_units_clear(TpkUnits *u);
/* The unit under key[0..nwords), retained for the caller: a published one
 * (a hit for `kind`, a TpkUnitKind, unless kind < 0), or, when there is
 * none, a new one claimed for the caller (*claimed; a miss), which it must
 * publish or abandon. Waits while another caller builds the key. */
TpkStatus tpk_units_get(TpkUnits *u, int kind, const uint64_t *key, int nwords, TpkUnit **out, bool *claimed);
/* How a kind of unit is kept in the cache folder beside the memory:
 * its payload as bytes and back. */
typedef struct TpkUnitCodec {
  int kind; /* the TpkUnitKind its loads count as (-1: none) */
  /* The payload as bytes, appended to out; false when it is not kept. */
  bool (*save)(const void *payload, TpkStr *out);
  /* A payload from what save wrote (authenticated, this build's), or NULL
   * when the bytes make none here: the unit is then built. */
  void *(*load)(TpkContext *ctx, const char *bytes, size_t len);
  void (*destroy)(void *payload);
} TpkUnitCodec;
/* tpk_units_get for a kind kept on disk: a miss in memory looks in the
 * cache folder under the same key and publishes what it finds there (a hit,
 * counted as a load of codec->kind too); a unit claimed and built is
 * written there when it is published. */
TpkStatus tpk_units_get_kept(TpkUnits *u, int kind, const TpkUnitCodec *codec, const uint64_t *key, int nwords,
                             TpkUnit **out, bool *claimed);
/* A claimed unit built: its payload, freed by destroy when the last hold goes. */
void tpk_unit_ready(TpkUnits *u, TpkUnit *unit, void *payload, void (*destroy)(void *payload));
/* A claimed unit could not be built: it goes, with the claimer's hold. */
void tpk_unit_abandon(TpkUnits *u, TpkUnit *unit);
void tpk_unit_retain(TpkUnit *unit);
void tpk_unit_release(TpkUnit *unit); /* NULL: nothing */
void *tpk_unit_payload(const TpkUnit *unit);
const uint64_t *tpk_unit_key(const TpkUnit *unit, int *nwords);
/* Count a lookup of `kind` that its caller made (a lookup in several steps). */
void tpk_units_count(TpkUnits *u, int kind, bool hit);
/* Count a unit of `kind` found on disk by its caller (code by its key). */
void tpk_units_loaded(TpkUnits *u, int kind);
/* How many units it holds, its lookups' hits and misses per TpkUnitKind,
 * and how many it found on disk (loads may be NULL). */
void tpk_units_stats(TpkUnits *u, int64_t *count, int64_t hits[3], int64_t misses[3], int64_t loads[3]);
/* Up to max published units, retained, most recent first; returns how many there are. */
int tpk_units_list(TpkUnits *u, TpkUnit **out, int max);
/* The context's cache. */
TpkUnits *tpk_context_units(const TpkContext *ctx);
/* cache.c: the context's lookups added to its cache folder's tally (when
 * it used one), as the context ends. */
void tpk_cache_tally(TpkContext *ctx);

/* ---- compiled graphs ---- */

/* A compiled graph's plan (driver.c): what its driver func (lower/fuse.c's
 * form: calls, reshapes, return) runs, made once from the func, whose
 * calls name kernels that callee(ctx, name) gives. */
typedef struct TpkDriver TpkDriver;
TpkStatus tpk_driver_new(const TpkFunc *driver, TpkKernel *(*callee)(void *ctx, const char *name), void *ctx,
                         TpkDriver **out);
void tpk_driver_free(TpkDriver *d);
int tpk_driver_calls(const TpkDriver *d);
/* A launch of the graph on dev: `sizes` are the graph's shape symbols
 * (tpk_func_symbols order of the driver), args its inputs then outputs,
 * checked against its signature. */
TpkStatus tpk_driver_run(TpkDriver *d, TpkDevice *dev, const int64_t *sizes, TpkBuffer *const *args,
                         TpkLaunchResult *result);
/* Run kernel k of a compiled graph (a cluster, a kernel it calls, or a
 * standard kernel) on dev with its shape symbols' values (k's order) and
 * one pointer per parameter (a tensor's bytes, a scalar's value), bytes[i]
 * the size of tensor i. Requirements are checked; tunables are the tuned or
 * declared ones. */
TpkStatus tpk_kernel_run(TpkKernel *k, TpkDevice *dev, const int64_t *sizes, void *const *args, const size_t *bytes,
                         TpkLaunchResult *result);
/* A program of one kernel from a driver func in `module` (taken over, even
 * on failure): kernels[0] is the graph (the driver's params as inputs, its
 * results as outputs), launched by running the driver; the module's
 * kernels are compiled once for every shape, except standard kernels
 * (name and hash of one of the library's), which run its code. */
TpkStatus tpk_program_from_driver(TpkContext *ctx, TpkModule *module, TpkFunc *driver, TpkProgram **out);
/* The same for a program kept in the cache folder: hashes[i], where not
 * zero, is the structural hash of module->funcs[i], a kernel given as its
 * header only, whose body is in ir[0..ir_len) (the module's text with
 * bodies, copied), parsed only when a kernel must be bound (its code or a
 * launch's facts not in the folder, a simulated device). */
TpkStatus tpk_program_from_kept(TpkContext *ctx, TpkModule *module, TpkFunc *driver, const TpkFuncHash *hashes,
                                const char *ir, size_t ir_len, TpkProgram **out);
/* compile.c: graph func f (its module holds the kernels it calls) cloned,
 * fused by the policy and made a program (tpk_program_from_driver), or the
 * program compiled before for a func of its structure and name, from the
 * context's cache (a lookup of `kind`, a TpkUnitKind). */
TpkStatus tpk_compile_func(TpkContext *ctx, const TpkFunc *f, TpkFusePolicy policy, int kind, TpkProgram **out);
/* The same without the cache of graphs (the eager streams keep their own keys). */
TpkStatus tpk_compile_graph(TpkContext *ctx, const TpkFunc *f, TpkFusePolicy policy, TpkProgram **out);
/* A compiled graph's program as bytes (its fused IR: the driver and its
 * clusters), and a program from them (NULL when they make none), for the
 * codecs of units that hold one: a process that finds one on disk fuses
 * nothing, and finds its clusters' code by their structural keys. */
bool tpk_program_save(const TpkProgram *p, TpkStr *out);
TpkProgram *tpk_program_restore(TpkContext *ctx, const char *bytes, size_t len);
/* How many kernels a launch of p's kernel runs: a compiled graph's calls, else 1. */
int tpk_program_kernel_runs(const TpkProgram *p);
/* Whether k is a compiled graph (its program's driver), whose IR is only
 * its signature: launched, never called from IR. */
bool tpk_kernel_is_graph(const TpkKernel *k);
/* The error for a compiled graph's kernel k handed to `who` to call. */
TpkStatus tpk_graph_kernel_refused(const TpkKernel *k, const char *who);

/* The first word of a unit's key says what it is. */
enum {
  TPK_UNIT_KEY_GENERIC = 1,
  TPK_UNIT_KEY_SPEC,
  TPK_UNIT_KEY_GRAPH,
  TPK_UNIT_KEY_WINDOW,
  TPK_UNIT_KEY_FACTS,
  TPK_UNIT_KEY_GRAPH_FACTS
};

/* Compiling outside a launch (a graph): holds off the context's end; false
 * (nothing held) when the context was destroyed. */
bool tpk_context_enter(TpkContext *ctx);
void tpk_context_leave(TpkContext *ctx);

/* Start the context's worker threads now, if it has more than one thread
 * and they have not started: a stream's first launches then find them
 * parked, not being born. */
void tpk_context_start_pool(TpkContext *ctx);
/* Keep the context's workers polling through launches run one after
 * another (tpk_pool_hold), when they run this thread's launches' parts;
 * the pool held (NULL: none), for tpk_pool_release. */
struct TpkPool *tpk_context_hold_workers(TpkContext *ctx);

/* Scratch memory of launches (kernels' workspaces, a compiled graph's
 * intermediates), 64-byte aligned: blocks the context keeps between
 * launches (a few), so that one launch's memory serves the next whatever
 * it runs. Take gives at least `bytes` (its size in *cap; NULL when out of
 * memory); give returns it. Only while the context runs launches. */
void *tpk_scratch_take(TpkContext *ctx, size_t bytes, size_t *cap);
void tpk_scratch_give(TpkContext *ctx, void *block, size_t cap);
/* The sizes of the blocks it keeps that are huge pages (up to max), and
 * blocks of those sizes made, faulted in and kept ahead of use: a warm
 * start (eager.c) gives a new process the scratch an earlier one needed,
 * without the first launch paying for the page faults. */
int tpk_scratch_huge(TpkContext *ctx, size_t *caps, int max);
void tpk_scratch_warm(TpkContext *ctx, const size_t *caps, int n);
/* Fault in [p, p + bytes) for writing without changing a byte (safe while
 * another thread uses the memory); where the system cannot, nothing. */
void tpk_memory_populate(void *p, size_t bytes);

/* The context's log (tpk_context_set_log): text for people, given to the
 * caller's function if there is one. TPK_DUMP_IR=1 when the context was
 * made: compiled graphs are logged. */
void tpk_context_log(TpkContext *ctx, const char *text);
bool tpk_context_dumps_ir(const TpkContext *ctx);

/* The standard library's kernels (ctx: the TpkContext), for the ATen ops
 * that call one (tpk_gb_set_kernel_lookup). Their IR lives as long as the
 * context, which a graph or a stream holds. */
const TpkFunc *tpk_std_kernel_lookup(void *ctx, const char *name, TpkError *err);
/* Is f (a kernel a graph calls) one of the standard library's, by name and
 * hash? Then it runs the library's ahead-of-time code, and graph fusion
 * keeps it as it is (lower/README.md, "Epilogues of calls"). */
bool tpk_std_kernel_is(void *ctx, const TpkFunc *f);

#endif
