/*
 * device.h — what a device is to the runtime: a table of operations, one
 * table per kind of device (device.c: "host", "sim:<chip>"). The rest of
 * the runtime calls through the table and never asks which kind it holds;
 * a simulated pod will be one more table.
 *
 * Buffers live here too: their bytes come from the device's allocator (or
 * from the caller, wrapped), and views share them.
 */
#ifndef TPK_RUNTIME_DEVICE_H
#define TPK_RUNTIME_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>

#include "host/jit.h"
#include "lower/lower.h"
#include "runtime/internal.h"
#include "runtime/pool.h"
#include "runtime/tune.h"

/* What a device keeps of a kernel specialised for it (a sim device: the
 * kernel's schedule on the chip). Freed with the specialisation. */
typedef struct TpkPrepared TpkPrepared;

/* One launch's call of compiled code, split into parts that each run a
 * share of the grid with their own workspace (see TpkPrims.part). */
typedef struct TpkRun {
  TpkKernelFn fn;
  void *const *args;
  const int64_t *syms;
  char *workspace; /* part i's is workspace + i * workspace_stride */
  size_t workspace_stride;
  int parts;
  TpkPool *pool; /* runs the parts in parallel (NULL: one after another) */
  TpkHostParallelFn lend; /* the embedding program's threads, tried first (tpk_context_set_host_parallel) */
  void *lend_user;
} TpkRun;

typedef struct TpkDeviceOps {
  const char *kind;   /* "host", "sim" */
  const char *memory; /* what its memory is called in messages: "HBM" */
  /* Whether `name` is a device of this kind. */
  bool (*claims)(const char *name);
  /* Fill in dev->state and dev->capacity for `name`; close frees state. */
  TpkStatus (*open)(TpkDevice *dev, const char *name, TpkError *err);
  void (*close)(TpkDevice *dev);
  /* What kernels are lowered for (the VMEM budget, the chip). */
  TpkTarget (*target)(const TpkDevice *dev);
  /* Memory: bytes (zero-filled when asked), their release, copies in and out. */
  void *(*alloc)(const TpkDevice *dev, size_t bytes, bool zero);
  void (*free)(const TpkDevice *dev, void *data, size_t bytes);
  void (*write)(const TpkDevice *dev, void *dst, const void *src, size_t bytes);
  void (*read)(const TpkDevice *dev, void *dst, const void *src, size_t bytes);
  /* Whether memory the caller allocated on the host can be a buffer here. */
  bool wraps_host_memory;
  /* A kernel bound and lowered for the device (f): what it keeps of it,
   * once per specialisation. NULL: it keeps nothing (the host), so code
   * for every shape launches without binding or lowering for its sizes
   * once their facts are known (runtime.c). */
  TpkStatus (*prepare)(const TpkDevice *dev, const TpkFunc *f, TpkPrepared **out, TpkError *err);
  void (*unprepare)(TpkPrepared *p);
  /* Run a launch. Returns the first part (in grid order) that failed, with
   * its message in err (TPK_KERNEL_ERR_LEN bytes), or -1. */
  int (*run)(const TpkDevice *dev, const TpkRun *run, char *err);
  /* What the device says of a launch of a prepared kernel with these
   * arguments (one pointer per parameter, as run takes them), asked before
   * the launch runs: a simulated time may follow the values the kernel
   * reads (an inout's, too, before the kernel writes it). */
  TpkStatus (*report)(const TpkDevice *dev, TpkPrepared *p, void *const *args, TpkLaunchResult *r, TpkError *err);
  /* Tunables for kernel f (nothing bound; ir_hash its tpk_tune_ir_hash) at
   * sizes nobody tuned (no tuning cache entry, no shipped row), o giving the
   * sizes and which configurations to consider (o->device is ignored): a device
   * that times a configuration without compiling it searches them and
   * returns true (tpk_tune_on_chip). NULL: the launch keeps the shipped row
   * of the nearest sizes, else the declared defaults. */
  bool (*tune)(const TpkDevice *dev, const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneConfig *out);
} TpkDeviceOps;

struct TpkDevice {
  TpkContext *ctx;
  const TpkDeviceOps *ops;
  char name[64];
  void *state;          /* the kind's own */
  int64_t host_vmem;    /* the context's TPK_HOST_VMEM (0: the default) */
  uint64_t capacity;    /* bytes its buffers may use; 0: no limit */
  _Atomic uint64_t used;
  pthread_mutex_t lock; /* memory: the list of live storages */
  struct TpkStorage *memory;
  struct TpkHostCache *cache; /* host memory kept for reuse (device.c) */
  atomic_bool warmed;   /* a stream started its warm start (eager.c) */
  TpkDevice *next;
};

/* tpk_buffer_create without the zeros: for a buffer its maker writes whole
 * before anyone can read it (an eager op's outputs, pending until then). */
TpkStatus tpk_buffer_create_unfilled(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out);
/* ... and without memory until something needs its bytes: a fused
 * window's outputs, which the window computes only if they are still held
 * when it runs (the rest are intermediates inside its clusters, or nothing).
 * tpk_buffer_materialise gives the bytes their memory (counted against the
 * device from then): a launch does so for its buffers, and so does every
 * access to the bytes from outside (tpk_buffer_data, _address, _read,
 * _write). Views share the deferral. */
TpkStatus tpk_buffer_create_deferred(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out);
TpkStatus tpk_buffer_materialise(TpkBuffer *b);
/* The buffer's bytes: NULL while deferred. */
void *tpk_buffer_memory(const TpkBuffer *b);

/* How many 2 MB arenas the device has cut its buffers from (host memory),
 * and spare ones made and faulted in ahead of use until it has `arenas`
 * (a warm start, eager.c: the first buffers of a new process then cost
 * no page faults). Devices without kept memory: 0, nothing. */
int tpk_device_arenas(TpkDevice *dev);
void tpk_device_warm(TpkDevice *dev, int arenas);

/* The context was destroyed: give back the memory of every buffer still
 * alive (wrapped memory to its owner), and what the device kept for reuse.
 * The handles stay valid to destroy; their data is gone. */
void tpk_device_free_memory(TpkDevice *dev);

/* The kind of device `name` is, or NULL. */
const TpkDeviceOps *tpk_device_kind(const char *name);

/* A buffer's bytes: shared by the buffer and its views. */
typedef struct TpkStorage TpkStorage;

struct TpkBuffer {
  atomic_int refs; /* the caller's handle, and queued launches */
  TpkDevice *dev;
  TpkStorage *storage;
  TpkDType dtype;
  int rank;
  int64_t shape[TPK_MAX_DIMS];
  size_t bytes;
  size_t offset; /* of the view in the storage's bytes (tpk_buffer_memory) */
};

/* Count `bytes` more against the device's capacity (the intermediates of
 * a compiled graph's launch), or fail saying why; subtract them from
 * dev->used when done. */
TpkStatus tpk_device_reserve(TpkDevice *dev, size_t bytes);

/* Eager streams (eager.c) mark the bytes their work not yet run writes
 * (pending: the stream, held until unmarked) or reads; a buffer whose bytes
 * are marked is settled (tpk_buffer_settle) before its bytes are read or
 * written by anyone else. Marks change under the device's lock; unmarking
 * a pending mark gives its hold on the stream to the caller. */
void tpk_buffer_mark_pending(TpkBuffer *b, TpkStream *s);
void tpk_buffer_mark_read(TpkBuffer *b);
TpkStream *tpk_buffer_unmark(TpkBuffer *b, bool wrote);
TpkStream *tpk_buffer_pending(const TpkBuffer *b);
bool tpk_buffer_read_pending(const TpkBuffer *b);
/* Someone but the `own` holds of the caller still holds the buffer, or a
 * view of its bytes. */
bool tpk_buffer_in_use(const TpkBuffer *b, int own);

/* A queued launch's hold on a buffer (tpk_buffer_destroy drops the caller's). */
void tpk_buffer_retain(TpkBuffer *b);
void tpk_buffer_release(TpkBuffer *b);

#endif
