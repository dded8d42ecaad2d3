/*
 * internal.h — what the files of runtime/ share and nobody else sees.
 */
#ifndef TPK_RUNTIME_INTERNAL_H
#define TPK_RUNTIME_INTERNAL_H

#include "tpk.h"

#include "ir/ir.h"

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

#endif
