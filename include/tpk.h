/*
 * tpk.h — the public C API of tpk, a kernel toolkit for TPU-style accelerators.
 *
 * This is the only header users include. It grows with the runtime (devices,
 * buffers, modules, queues); today it holds the vocabulary every layer shares:
 * element types and status codes.
 */
#ifndef TPK_H
#define TPK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TPK_VERSION "0.1.0"

/* Element types of the .tpk language (contract §1). The order is part of the
 * ABI: append only. */
typedef enum TpkDType {
  TPK_F32,
  TPK_F16,
  TPK_BF16,
  TPK_F8E4M3,
  TPK_F8E5M2,
  TPK_I32,
  TPK_I16,
  TPK_I8,
  TPK_U8,
  TPK_BOOL,
  TPK_DTYPE_COUNT
} TpkDType;

/* Every fallible call returns one of these; details go in the error message. */
typedef enum TpkStatus {
  TPK_OK = 0,
  TPK_ERR_INVALID,     /* bad argument: wrong shape, dtype, name, option */
  TPK_ERR_PARSE,       /* source text did not parse or check */
  TPK_ERR_NOMEM,       /* host or simulated memory exhausted */
  TPK_ERR_IO,          /* file could not be read or written */
  TPK_ERR_UNSUPPORTED, /* valid request this build cannot do */
  TPK_ERR_INTERNAL     /* a bug in tpk: please report it */
} TpkStatus;

/* Name of a dtype as written in .tpk ("f32", "bf16", ...). */
const char *tpk_dtype_name(TpkDType t);
/* Size of one element in bytes (bool is one byte). */
size_t tpk_dtype_size(TpkDType t);
/* Parse a dtype name; returns TPK_DTYPE_COUNT when the name is not a dtype. */
TpkDType tpk_dtype_from_name(const char *name, size_t len);
/* Short, stable name of a status code ("invalid argument", ...). */
const char *tpk_status_name(TpkStatus s);

/* ---- The runtime ------------------------------------------------------------
 *
 *   TpkContext   owns everything below, the JIT and the compilation cache
 *   TpkDevice    "host" (generated C on this CPU), "sim:<chip>" (timed on a TPU)
 *   TpkBuffer    a tensor on a device: dtype + shape + bytes
 *   TpkProgram   a loaded .tpk file (checked when loaded)
 *   TpkKernel    one kernel of a program
 *   TpkQueue     launches run in order on a worker thread; events mark points
 *
 * Every fallible call returns a TpkStatus; the message of the last failure
 * on the calling thread is tpk_last_error(). Objects are not thread-safe
 * unless said so: a context may be used from several threads only through
 * queues (each queue has its own worker).
 */
typedef struct TpkContext TpkContext;
typedef struct TpkDevice TpkDevice;
typedef struct TpkBuffer TpkBuffer;
typedef struct TpkProgram TpkProgram;
typedef struct TpkKernel TpkKernel;
typedef struct TpkQueue TpkQueue;
typedef struct TpkEvent TpkEvent;

enum { TPK_MAX_DIMS = 8 };

/* The message of the last failed call on this thread ("" if none). */
const char *tpk_last_error(void);

/* A context: devices, programs, compiled code. The environment shapes how
 * it compiles (read once, here):
 *   TPK_TIER=tcc|cc|auto   the JIT's tiers (host/jit.h)
 *   TPK_CACHE_DIR=DIR      compiled code and tuning results on disk ("": none)
 *   TPK_HOST_VMEM=128M     the host's VMEM budget per grid instance
 *   TPK_GENERIC=1          compile each kernel once for every shape, not per shape
 *   TPK_AOT=0              compile the standard kernels too (debugging tpk) */
TpkStatus tpk_context_create(TpkContext **out);
/* Waits for queued work, then frees every object of the context. */
void tpk_context_destroy(TpkContext *ctx);

/* "host" (this CPU), or "sim:<chip>" (v4, v5e, v5p, v6e, v7): kernels run
 * with the host's code, so results are the host's, and each launch is also
 * timed on the chip (tpk_kernel_last_sim_stats). Buffers on a sim device
 * count against the chip's HBM. */
TpkStatus tpk_device_open(TpkContext *ctx, const char *name, TpkDevice **out);
const char *tpk_device_name(const TpkDevice *dev);

TpkStatus tpk_buffer_create(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out);
void tpk_buffer_destroy(TpkBuffer *buf);
TpkDType tpk_buffer_dtype(const TpkBuffer *buf);
int tpk_buffer_rank(const TpkBuffer *buf);
const int64_t *tpk_buffer_shape(const TpkBuffer *buf);
size_t tpk_buffer_bytes(const TpkBuffer *buf);
/* Copy in/out; `bytes` must equal tpk_buffer_bytes. Elements are stored as
 * in host/prims.h: bf16/f16 as their 16 bits, f8 as 8 bits, bool as one
 * byte 0/1, row-major. */
TpkStatus tpk_buffer_write(TpkBuffer *buf, const void *src, size_t bytes);
TpkStatus tpk_buffer_read(const TpkBuffer *buf, void *dst, size_t bytes);
/* Host buffers only: the memory itself (NULL on other devices). */
void *tpk_buffer_data(TpkBuffer *buf);

/* Load and check a .tpk file or text. A file with errors fails with all its
 * diagnostics (rendered as `tpk check` shows them) in tpk_last_error(). */
TpkStatus tpk_program_load_file(TpkContext *ctx, const char *path, TpkProgram **out);
TpkStatus tpk_program_load_source(TpkContext *ctx, const char *name, const char *text, size_t len, TpkProgram **out);
void tpk_program_destroy(TpkProgram *prog);
int tpk_program_kernel_count(const TpkProgram *prog);
const char *tpk_program_kernel_name(const TpkProgram *prog, int i);
TpkStatus tpk_program_kernel(TpkProgram *prog, const char *name, TpkKernel **out);

/* What a kernel takes, for binding arguments by position or name. */
typedef enum TpkParamKind { TPK_PARAM_KIND_INPUT, TPK_PARAM_KIND_OUTPUT, TPK_PARAM_KIND_INOUT, TPK_PARAM_KIND_SCALAR } TpkParamKind;
int tpk_kernel_param_count(const TpkKernel *k);
const char *tpk_kernel_param_name(const TpkKernel *k, int i);
TpkParamKind tpk_kernel_param_kind(const TpkKernel *k, int i);
TpkDType tpk_kernel_param_dtype(const TpkKernel *k, int i);
int tpk_kernel_param_rank(const TpkKernel *k, int i);

typedef struct TpkNamedInt {
  const char *name;
  int64_t value;
} TpkNamedInt;

/* The kernel's shape symbols, in the order of first appearance in its
 * parameters. */
int tpk_kernel_symbol_count(const TpkKernel *k);
const char *tpk_kernel_symbol_name(const TpkKernel *k, int i);
/* The shape of parameter i (rank tpk_kernel_param_rank) once the given
 * symbols are bound: how a caller sizes outputs from its inputs' shapes.
 * `syms` may also name tunables, for shapes that use one (y: f32[G, N]);
 * tunables it does not name take their declared defaults. */
TpkStatus tpk_kernel_param_shape(const TpkKernel *k, int i, const TpkNamedInt *syms, int nsyms, int64_t *shape);

/* One call's arguments. `args[i]` is parameter i (inputs, then outputs, in
 * declaration order): a buffer for tensors; scalars take `scalars[i]` (the
 * value as a double, converted to the parameter's dtype; ints must be exact).
 * Shape symbols are bound from the buffers' shapes; a symbol that appears
 * only in outputs is bound from the output buffer or from `syms`.
 * Tunables not named in `tunes` take their declared defaults; a launch that
 * names none takes tuned ones when there are (tpk_kernel_last_tunes). */
typedef struct TpkLaunch {
  TpkBuffer *const *args; /* tpk_kernel_param_count entries; NULL for scalars */
  const double *scalars;  /* same indexing; may be NULL if there are no scalars */
  const TpkNamedInt *syms;
  int nsyms;
  const TpkNamedInt *tunes;
  int ntunes;
} TpkLaunch;

/* Run synchronously on the device of the argument buffers. */
TpkStatus tpk_kernel_launch(TpkKernel *k, const TpkLaunch *launch);

/* Compilation tier of the kernel's last launch: "tcc", "cc", "aot". */
const char *tpk_kernel_last_tier(const TpkKernel *k);
/* The tunables of the kernel's last launch and where they came from:
 * "BM=256,BN=128 (tuning cache)"; the others are "(given)" by the launch,
 * "(shipped defaults)" (kernels/tuned.tsv) and "(declared defaults)".
 * A launch that names no tunables takes the first of `tpk tune`'s cache, the
 * shipped defaults and the declared defaults that knows its sizes and
 * device. Empty before the first launch. */
const char *tpk_kernel_last_tunes(const TpkKernel *k);
/* What the simulator says about the kernel's last launch on a "sim:<chip>"
 * device: the time it would take on the chip, and why. */
typedef struct TpkSimStats {
  const char *chip;          /* "v5e" */
  double cycles, seconds;    /* the kernel on the chip, and at its clock */
  double clock_hz;
  double flops;              /* matmul FLOPs (2MNK) + one per element of elementwise ops */
  double matmul_flops;
  double hbm_bytes;          /* bytes moved between HBM and VMEM */
  double peak_flops;         /* the chip's peak for the kernel's matmul dtype */
  double hbm_bytes_per_s;    /* the chip's HBM bandwidth */
  double roofline_seconds;   /* the least time the work could take */
  bool memory_bound;         /* HBM traffic, not matmul work, sets the roofline */
  double mxu_utilisation, vpu_utilisation, hbm_utilisation; /* busy fractions */
} TpkSimStats;

TpkStatus tpk_kernel_last_sim_stats(const TpkKernel *k, TpkSimStats *out);
/* The Chrome-trace / Perfetto JSON of that launch: one track per unit. */
TpkStatus tpk_kernel_write_trace(const TpkKernel *k, const char *path);

/* Block until the background (cc -O3) compiles of every kernel launched so
 * far are done, so that later launches run optimized code (benchmarks). */
void tpk_context_wait_compiles(TpkContext *ctx);
/* How many times this context has run a compiler (libtcc or cc, not counting
 * builds loaded from the disk cache). Standard kernels add nothing. */
int tpk_context_compiler_runs(const TpkContext *ctx);

/* The standard kernel library (kernels/ in the source tree): compiled into
 * tpk ahead of time for every shape, so a launch on the host never waits on
 * a compiler. Kernel names are unique across the library. A program loaded
 * from a file whose text is exactly a standard file's uses the same code. */
int tpk_std_kernel_count(void);
const char *tpk_std_kernel_name(int i); /* "softmax" */
const char *tpk_std_kernel_file(int i); /* "softmax.tpk" */
/* The kernel `name` of the library, in ctx (its program lives as long as ctx). */
TpkStatus tpk_std_kernel(TpkContext *ctx, const char *name, TpkKernel **out);
/* The source text of a standard file ("softmax.tpk"), or NULL. */
const char *tpk_std_source(const char *file);

/* Queues: launches run in submission order on the queue's worker thread.
 * The launch is copied, so the caller's arrays may be reused at once; the
 * buffers must stay alive until the work is done. An error in queued work is
 * reported by the next tpk_queue_wait / tpk_event_wait. */
TpkStatus tpk_queue_create(TpkContext *ctx, TpkQueue **out);
void tpk_queue_destroy(TpkQueue *q); /* waits for its work first */
TpkStatus tpk_queue_launch(TpkQueue *q, TpkKernel *k, const TpkLaunch *launch);
TpkStatus tpk_queue_wait(TpkQueue *q);
/* An event completes when all work queued before it has run. */
TpkStatus tpk_queue_record(TpkQueue *q, TpkEvent **out);
TpkStatus tpk_event_wait(TpkEvent *e);
bool tpk_event_done(const TpkEvent *e);
void tpk_event_destroy(TpkEvent *e);

/* Threads a launch on the host runs a kernel's grid on: $TPK_HOST_THREADS
 * when it is a number >= 1, else the number of online CPUs; at most 64. A
 * context reads it when it is created. The grid's instances are shared
 * among the threads when the kernel is one top-level grid (with effect-free
 * scalar work around it); results do not depend on the count. Benchmarks
 * give other libraries the same count (torch.set_num_threads). */
int tpk_host_threads(void);

/* ---- The compilation cache ----------------------------------------------------
 *
 * Kernels the system cc compiles (TPK_TIER=auto once hot, or TPK_TIER=cc)
 * are kept on disk, and later processes load them instead of compiling:
 *   TPK_CACHE_DIR=DIR        the folder ($XDG_CACHE_HOME/tpk, else ~/.cache/tpk;
 *                            "" turns the cache off)
 *   TPK_CACHE_KEY_FILE=FILE  the key that authenticates entries (default: your
 *                            own, made on first use: $XDG_CONFIG_HOME/tpk/cache.key,
 *                            else ~/.config/tpk/cache.key, 32 random bytes, 0600)
 *   TPK_CACHE_MAX=SIZE       the entries' size limit (default 1G); the least
 *                            recently used go first
 *
 * Trust. The folder may be shared by processes, users and hosts, so tpk
 * trusts nothing in it but a MAC: each entry carries HMAC-SHA256, under the
 * key, of which kernel it is and its bytes, and one that does not verify
 * (planted, damaged, another key's, another kernel's renamed) is compiled
 * again, never loaded. Whoever can read the key can make entries that load;
 * for a team cache, share a key file only the team can read. A key file is
 * used only when it is a regular file of 32 to 4096 bytes, owned by you or
 * root, that neither its group nor others can write and others cannot read,
 * outside the cache folder; otherwise the cache is off (kernels still
 * compile) and the reason is the stats' note. Faults (a folder that cannot
 * be written, a build that cannot be stored) never fail a launch: the kernel
 * is built without the cache. Tuning results (`tpk tune`) live in the same
 * folder, under tune/; they are not authenticated, are read only when you own
 * them and no one else can write them, and can only choose among a kernel's
 * declared tunable values.
 */
typedef struct TpkCacheStats {
  const char *path;      /* the folder, or NULL when there is none */
  bool enabled;          /* this context loads and stores compiled kernels there */
  const char *note;      /* why it does not, when a user should hear it; else NULL */
  const char *key_file;  /* the key file in use, or NULL */
  int64_t entries;       /* compiled kernels in the folder now */
  int64_t bytes;         /* their size */
  int64_t max_bytes;     /* TPK_CACHE_MAX */
  int64_t build_folders; /* builds under way, or left by killed processes */
  int hits;              /* this context's kernels loaded from the cache */
  int misses;            /* ... compiled because the cache had no entry that loads */
  int rejected;          /* ... entries found that did not authenticate */
} TpkCacheStats;

/* The cache folder (owned by ctx), or NULL when there is none. */
const char *tpk_cache_path(TpkContext *ctx);
/* What is in the folder now, and what this context's lookups found.
 * Strings belong to ctx. */
TpkStatus tpk_cache_stats(TpkContext *ctx, TpkCacheStats *out);
/* Removes every compiled entry, and every build folder left by a process
 * that is gone; tuning results stay. Safe while other processes use the
 * cache: code they loaded keeps running, and they compile what they miss.
 * Either count pointer may be NULL. */
TpkStatus tpk_cache_clear(TpkContext *ctx, int64_t *entries_removed, int64_t *builds_removed);

#endif
