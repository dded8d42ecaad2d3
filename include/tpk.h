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
  TPK_U32, /* bit-level integers: Philox, packing (dsl/README.md) */
  TPK_U16,
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
 *   TpkContext   devices, programs, the JIT and the compilation cache
 *   TpkDevice    "host" (generated C on this CPU), "sim:<chip>" (timed on a TPU)
 *   TpkBuffer    a tensor on a device: dtype + shape + bytes
 *   TpkProgram   a loaded .tpk file (checked when loaded)
 *   TpkKernel    one kernel of a program
 *   TpkQueue     launches run in order on a worker thread; events mark points
 *
 * Errors. Every fallible call returns a TpkStatus; the message of the last
 * failure on the calling thread is tpk_last_error().
 *
 * Threads. Launches are re-entrant: one kernel may be launched from many
 * threads at once, at the same or different sizes, and what a launch did
 * comes back with it (TpkLaunch.result). Buffers, programs and queues may be
 * created, used and destroyed from any thread; a buffer must not be written
 * (or read) while a launch that writes it runs.
 *
 * Lifetimes. Handles may be destroyed in any order, from any thread, as a
 * garbage collector does:
 *   - tpk_context_destroy ends the context: the work queued on its queues
 *     runs, then the memory of every buffer still alive is given back
 *     (wrapped memory to its owner, through its release callback), and
 *     what the context compiled and its threads go. Buffers, programs and
 *     queues you still hold stay valid to destroy afterwards, in any order;
 *     other calls on them fail with "the context was destroyed" (a queue
 *     still reports the errors of its work). The context's last bytes go
 *     with the last of them;
 *   - a view keeps the bytes it looks at alive; a queued launch keeps its
 *     kernel's program and its buffers alive until it has run, so they may
 *     be destroyed right after it is queued;
 *   - an event outlives its queue: waiting on it after the queue is gone
 *     returns at once, with the errors of the work before it.
 * A launch on another thread either finishes before the context's end
 * frees anything or is refused; a pointer from tpk_buffer_data is the one
 * thing the end cannot wait for. Using a handle after its own destroy call
 * stays the caller's to avoid. A release callback may destroy tpk objects
 * (even the context) but must not wait on the queue whose work released
 * the memory. Kernels and devices are owned by their program and context;
 * the standard library's programs by the context. */
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
 * it compiles (read once, here; a value that does not parse is an error
 * naming the variable):
 *   TPK_TIER=tcc|cc|auto   the JIT's tiers (host/jit.h)
 *   TPK_CACHE_DIR=DIR      compiled code and tuning results on disk ("": none)
 *   TPK_HOST_VMEM=128M     the host's VMEM budget per grid instance
 *   TPK_HOST_THREADS=N     threads a launch on the host may use
 *   TPK_GENERIC=1          compile each kernel once for every shape, not per shape
 *   TPK_AOT=0              compile the standard kernels too (debugging tpk)
 *   TPK_DUMP_IR=1          log the IR of every graph compiled (tpk_context_set_log);
 *                          graphs and windows are then compiled, not loaded from disk
 *   TPK_EAGER=debug|strict|fused   the eager streams' mode (see Eager streams)
 *   TPK_CACHE_UNITS=N      compiled units kept in memory (see The compilation cache) */
TpkStatus tpk_context_create(TpkContext **out);
/* Ends the context (see Lifetimes): runs the work queued on its queues,
 * then frees its buffers' memory, its compiled code and its threads. */
void tpk_context_destroy(TpkContext *ctx);
/* The library prints nothing itself; what it has to tell people goes to
 * the context's log, a function the caller sets (NULL: none), called on the
 * thread that has something to say, with text valid during the call. Today
 * that is TPK_DUMP_IR=1's dumps: each graph compiled (tpk_graph_compile, an
 * eager window or op), as IR text before fusion, then the driver and
 * clusters fusion made of it. To see it, set a function that prints it
 * (to stderr, say): the library never writes there itself. */
typedef void (*TpkLogFn)(void *user, const char *text);
void tpk_context_set_log(TpkContext *ctx, TpkLogFn log, void *user);

/* "host" (this CPU), or "sim:<chip>" (v4, v5e, v5p, v6e, v7). Kernels on a
 * sim device run with the host's code, so its results are the host's, and
 * each launch is also timed on the chip (TpkLaunchResult.sim). A sim
 * device's buffers live in host memory (tpk_buffer_data reaches them) and
 * count against the chip's HBM. Opening a device twice gives the same one. */
TpkStatus tpk_device_open(TpkContext *ctx, const char *name, TpkDevice **out);
const char *tpk_device_name(const TpkDevice *dev);
/* The device's memory: `capacity` bytes (0: no limit but the host's) of
 * which live buffers use `used`. Lets a caller check that everything a job
 * needs fits before it allocates and fills any of it. */
void tpk_device_memory(TpkDevice *dev, uint64_t *capacity, uint64_t *used);

/* A new buffer, zero-filled. */
TpkStatus tpk_buffer_create(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, TpkBuffer **out);
/* Memory tpk did not allocate (a NumPy array's or CPU tensor's data) as a
 * buffer, without copying. `strides` are in elements (NULL: row-major);
 * they must be row-major contiguous (a dimension of size 1 may have any
 * stride), else it is an error naming them. `data` must be aligned to the
 * element size. When the buffer and every view of it are destroyed,
 * release(user, data) is called once, on whichever thread destroyed the
 * last of them (release may be NULL). If the call fails, release is not
 * called: the memory is still the caller's. */
typedef void (*TpkReleaseFn)(void *user, void *data);
TpkStatus tpk_buffer_wrap(TpkDevice *dev, TpkDType dtype, int rank, const int64_t *shape, const int64_t *strides,
                          void *data, TpkReleaseFn release, void *user, TpkBuffer **out);
/* A buffer that looks at `base`'s bytes from `offset` (a multiple of the
 * dtype's size) with its own dtype and shape, which must fit in them. It
 * keeps those bytes alive after `base` is destroyed. */
TpkStatus tpk_buffer_view(TpkBuffer *base, size_t offset, TpkDType dtype, int rank, const int64_t *shape,
                          TpkBuffer **out);
void tpk_buffer_destroy(TpkBuffer *buf);
TpkDType tpk_buffer_dtype(const TpkBuffer *buf);
int tpk_buffer_rank(const TpkBuffer *buf);
const int64_t *tpk_buffer_shape(const TpkBuffer *buf);
size_t tpk_buffer_bytes(const TpkBuffer *buf);
TpkDevice *tpk_buffer_device(const TpkBuffer *buf);
/* Copy in/out; `bytes` must equal tpk_buffer_bytes. Elements are stored as
 * in host/prims.h: bf16/f16 as their 16 bits, f8 as 8 bits, bool as one
 * byte 0/1, row-major. */
TpkStatus tpk_buffer_write(TpkBuffer *buf, const void *src, size_t bytes);
TpkStatus tpk_buffer_read(const TpkBuffer *buf, void *dst, size_t bytes);
/* Convert n elements from one dtype to another, both stored as above, as
 * kernels convert (host/prims.h: narrower floats round to nearest even,
 * floats to integers truncate and saturate). For callers whose arrays have
 * no bf16 or f8 type (NumPy). */
void tpk_dtype_convert(TpkDType from, const void *src, TpkDType to, void *dst, size_t n);
/* The memory itself, in host memory on every device so far. */
void *tpk_buffer_data(TpkBuffer *buf);
/* Where tpk_buffer_data's memory is, without settling the work pending on
 * it (see Eager streams): for a caller that must hold the address of an
 * eager op's output when the op is submitted (a PyTorch storage) and
 * settles before it touches the bytes itself (tpk_stream_sync,
 * tpk_buffer_read). A fused op's output gets its memory here if it had none
 * yet (see Eager streams). NULL when the buffer's context was destroyed, or
 * there is no memory for it. */
void *tpk_buffer_address(const TpkBuffer *buf);

/* Load and check a .tpk file or text. A file with errors fails with all its
 * diagnostics (rendered as `tpk check` shows them) in tpk_last_error(). */
TpkStatus tpk_program_load_file(TpkContext *ctx, const char *path, TpkProgram **out);
TpkStatus tpk_program_load_source(TpkContext *ctx, const char *name, const char *text, size_t len, TpkProgram **out);
void tpk_program_destroy(TpkProgram *prog);
int tpk_program_kernel_count(const TpkProgram *prog);
/* The program a kernel belongs to (to destroy it, for one). */
TpkProgram *tpk_kernel_program(const TpkKernel *k);
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
/* Dimension d of parameter i as the signature writes it, printed from the
 * checked IR ("M", "B*H", "128"; constants folded, so `2*64` is "128").
 * The string belongs to the kernel; NULL when i or d is out of range. */
const char *tpk_kernel_param_dim(const TpkKernel *k, int i, int d);

/* The kernel's tunables (`tune BM in [16, 8, 32]`): each one's name, its
 * declared default (the first choice) and its choices, in declaration
 * order. Strings and arrays belong to the kernel. */
int tpk_kernel_tunable_count(const TpkKernel *k);
const char *tpk_kernel_tunable_name(const TpkKernel *k, int i);
int64_t tpk_kernel_tunable_default(const TpkKernel *k, int i);
/* The number of choices, with the array in *choices. */
int tpk_kernel_tunable_choices(const TpkKernel *k, int i, const int64_t **choices);

/* The name of the kernel that computes k's input gradients (`backward B` in
 * k's header), or NULL when k names none. It is a kernel of k's program (of
 * the standard library for a standard kernel): get it with
 * tpk_program_kernel(tpk_kernel_program(k), name, &b) or tpk_std_kernel.
 * Its parameters are named after k's (dsl/README.md, "Backward kernels"):
 * it takes k's tensor inputs and outputs, gradients d<o> of k's outputs o
 * and k's scalars, and returns gradients d<i> of k's inputs i, each with
 * the dims of o or i, and its dtype or f32 for a 16- or 8-bit float. An
 * output of k whose gradient it does not take is not differentiable. The
 * string lives as long as k's program. */
const char *tpk_kernel_backward(const TpkKernel *k);

/* What a launch did, filled in when TpkLaunch.result is set. */
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

typedef struct TpkTrace TpkTrace;

typedef struct TpkLaunchResult {
  /* The code that ran: "aot" (the standard library's, built with tpk),
   * "tcc" (compiled by libtcc), "cc" (compiled by cc -O3 in this process),
   * "cache" (cc code loaded from the disk cache). */
  const char *tier;
  /* The tunables it ran with, "BM=256,BN=128" ("" when the kernel has
   * none), and where they came from: "given" by the launch, the "tuning
   * cache" (`tpk tune`), the "shipped defaults" (kernels/tuned.tsv),
   * "tuned at launch" or the "declared defaults". A launch that names no
   * tunables takes the first of the tuning cache and the shipped defaults
   * that knows its sizes and device. Otherwise, on a simulated chip, the
   * launch searches the kernel's declared choices on the chip's schedule
   * (no code is compiled: milliseconds) and files the winner in the tuning
   * cache, as a Triton autotuner does on first call; on the host it takes
   * the shipped row of the nearest sizes (each within 4x: a batch of 8
   * takes the row tuned for 4), else the declared defaults (a library
   * kernel's blocks no larger than the sizes it tiles need, among the
   * settings the library has code for: "declared defaults fitted to the
   * sizes", 64x64 attention blocks for a 4-long sequence, not 256x256). */
  char tunes[256];
  const char *tunes_from;
  /* Something the caller may want to say, such as "the cache folder is not
   * writable: built without it" ("" when nothing). */
  char note[256];
  /* On a "sim:<chip>" device: what the simulator says (else all zero), and
   * the timeline of every unit (else NULL), valid while the kernel's
   * program lives (tpk_trace_write). */
  bool simulated;
  TpkSimStats sim;
  const TpkTrace *trace;
} TpkLaunchResult;

/* One call's arguments. `args[i]` is parameter i (inputs, then outputs, in
 * declaration order): a buffer for tensors; scalars take `scalars[i]` (the
 * value as a double, converted to the parameter's dtype; ints must be exact).
 * Shape symbols are bound from the buffers' shapes; a symbol that appears
 * only in outputs is bound from the output buffer or from `syms`.
 * Tunables not named in `tunes` take their declared defaults; a launch that
 * names none takes tuned ones when there are (TpkLaunchResult.tunes_from).
 * Every buffer must be of the kernel's context. */
typedef struct TpkLaunch {
  TpkBuffer *const *args; /* tpk_kernel_param_count entries; NULL for scalars */
  const double *scalars;  /* same indexing; may be NULL if there are no scalars */
  const TpkNamedInt *syms;
  int nsyms;
  const TpkNamedInt *tunes;
  int ntunes;
  TpkLaunchResult *result; /* NULL, or where to say what the launch did */
} TpkLaunch;

/* Run synchronously on the device of the argument buffers. */
TpkStatus tpk_kernel_launch(TpkKernel *k, const TpkLaunch *launch);

/* The Chrome-trace / Perfetto JSON of a simulated launch: one track per
 * unit. `name` titles it ("matmul on v5e" when NULL). */
TpkStatus tpk_trace_write(const TpkTrace *trace, const char *name, const char *path);

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

/* Queues: launches run in submission order on the queue's worker thread;
 * a queue takes kernels of its own context only.
 * The launch is copied, so the caller's arrays may be reused at once, and
 * it holds its buffers and program until it has run (destroying them
 * meanwhile is safe); its `result`, if any, must stay valid until then.
 * The first error of queued work is reported by the next tpk_queue_wait,
 * which clears it, and by tpk_event_wait of every event recorded after the
 * failing work until then. Launches on a queue whose context was destroyed
 * are refused. */
TpkStatus tpk_queue_create(TpkContext *ctx, TpkQueue **out);
void tpk_queue_destroy(TpkQueue *q); /* waits for its work first */
TpkStatus tpk_queue_launch(TpkQueue *q, TpkKernel *k, const TpkLaunch *launch);
TpkStatus tpk_queue_wait(TpkQueue *q);
/* An event completes when all work queued before it has run. It does not
 * need its queue: waiting on it after the queue is destroyed returns. */
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

/* A program embedding tpk with threads of its own (PyTorch's intra-op pool)
 * may lend them to the context's host launches, so that two sets of threads
 * do not compete for the same cores (OpenMP's workers spin for a while
 * after each op, on the core one of tpk's workers would need).
 * run(user, parts, part, arg) must call part(arg, i) once for each i in
 * [0, parts), on any of its threads, in any order or one after another,
 * and return nonzero once all have returned; or return 0 at once, having
 * called none, to decline: tpk's own workers then run them. It is called
 * on the launching thread. A launch's part count is still
 * tpk_host_threads'. NULL: tpk's own workers only. An eager stream's
 * launches (its fused windows, its ops) always run on tpk's own workers:
 * between them the lender's threads would only be woken and spin. */
typedef void (*TpkHostPartFn)(void *arg, int part);
typedef int (*TpkHostParallelFn)(void *user, int parts, TpkHostPartFn part, void *arg);
void tpk_context_set_host_parallel(TpkContext *ctx, TpkHostParallelFn run, void *user);

/* ---- Graphs --------------------------------------------------------------------
 *
 * A graph is what the eager runtime and torch.compile hand tpk: inputs,
 * ops named as ATen names them, calls of loaded kernels (standard or user
 * .tpk), outputs. It becomes an IR function like a .tpk kernel (ir/graph.h),
 * is fused into clusters and lowered by lower/ (lower/fuse.c), and runs as
 * the one kernel of a program:
 *
 *   TpkGraph *g;
 *   tpk_graph_create(ctx, "linear_relu", &g);
 *   int x, w, y, h, n;
 *   tpk_graph_input(g, TPK_F32, 2, (const char *[]){"B", "784"}, &x);
 *   tpk_graph_input(g, TPK_F32, 2, (const char *[]){"784", "256"}, &w);
 *   tpk_graph_op(g, "mm", (TpkArg[]){{.kind = TPK_ARG_VALUE, .value = x},
 *                                    {.kind = TPK_ARG_VALUE, .value = w}}, 2, &y, 1, &n);
 *   tpk_graph_op(g, "relu", (TpkArg[]){{.kind = TPK_ARG_VALUE, .value = y}}, 1, &h, 1, &n);
 *   tpk_graph_output(g, h);
 *   TpkProgram *p;
 *   tpk_graph_compile(g, &p);  // one kernel: x, w, then the output
 *
 * Sizes may be symbolic: a dim is a size ("784") or an expression of shape
 * symbols ("B", "B*S"); the compiled code serves every value of the
 * symbols (bound from the buffers at launch), so a graph compiled once runs
 * every batch size and sequence length without compiling again.
 *
 * Op names are ATen's, with or without namespace and overload ("add",
 * "add.Tensor", "aten::add.Tensor", "aten.add.Tensor"; the overload is
 * chosen by the arguments given). Arguments are ATen's, positional or named
 * by ATen's argument names ("dim", "keepdim", "alpha", "dtype"); a Scalar
 * argument may be a number or a rank-0 value (a value the graph does not
 * bake in, such as a learning rate). Results follow ATen's dtype promotion
 * and shape rules. An op outside the vocabulary (tpk_graph_op_count) is
 * TPK_ERR_UNSUPPORTED naming it; bad arguments are TPK_ERR_INVALID naming the
 * op, the argument and the shapes and dtypes involved. */
typedef struct TpkGraph TpkGraph;

typedef enum TpkArgKind {
  TPK_ARG_NONE,    /* ATen's None */
  TPK_ARG_VALUE,   /* a tensor: a graph's value id, or a stream's buffer */
  TPK_ARG_VALUES,  /* a list of tensors (cat's `tensors`) */
  TPK_ARG_INT,     /* also SymInt: `sym` set for a symbolic size */
  TPK_ARG_FLOAT,
  TPK_ARG_BOOL,
  TPK_ARG_INTS,    /* int[] / SymInt[]: `syms[i]` (when syms is given and it is not NULL) names entry i symbolically */
  TPK_ARG_DTYPE,   /* ScalarType */
  TPK_ARG_STR      /* gelu's approximate="tanh" */
} TpkArgKind;

typedef struct TpkArg {
  const char *name; /* ATen's argument name, or NULL for the next positional one */
  TpkArgKind kind;
  int64_t i;        /* INT; BOOL as 0/1 */
  double f;         /* FLOAT */
  const char *sym;  /* INT: the size as an expression of symbols ("S", "B*S"), or NULL */
  int n;            /* INTS, VALUES: entries */
  const int64_t *ints;
  const char *const *syms;
  int value;               /* VALUE in a graph */
  const int *values;       /* VALUES in a graph */
  TpkBuffer *buffer;       /* VALUE in a stream */
  TpkBuffer *const *buffers; /* VALUES in a stream */
  TpkDType dtype;          /* DTYPE */
  const char *str;         /* STR */
} TpkArg;

/* Arguments in one expression each: tpk_arg_named("dim", tpk_arg_ints(1, (int64_t[]){-1})). */
static inline TpkArg tpk_arg_value(int value) { return (TpkArg){.kind = TPK_ARG_VALUE, .value = value}; }
static inline TpkArg tpk_arg_values(int n, const int *values) { return (TpkArg){.kind = TPK_ARG_VALUES, .n = n, .values = values}; }
static inline TpkArg tpk_arg_buffer(TpkBuffer *b) { return (TpkArg){.kind = TPK_ARG_VALUE, .buffer = b}; }
static inline TpkArg tpk_arg_buffers(int n, TpkBuffer *const *b) { return (TpkArg){.kind = TPK_ARG_VALUES, .n = n, .buffers = b}; }
static inline TpkArg tpk_arg_int(int64_t i) { return (TpkArg){.kind = TPK_ARG_INT, .i = i}; }
static inline TpkArg tpk_arg_float(double f) { return (TpkArg){.kind = TPK_ARG_FLOAT, .f = f}; }
static inline TpkArg tpk_arg_bool(bool b) { return (TpkArg){.kind = TPK_ARG_BOOL, .i = b}; }
static inline TpkArg tpk_arg_ints(int n, const int64_t *ints) { return (TpkArg){.kind = TPK_ARG_INTS, .n = n, .ints = ints}; }
static inline TpkArg tpk_arg_dtype(TpkDType t) { return (TpkArg){.kind = TPK_ARG_DTYPE, .dtype = t}; }
static inline TpkArg tpk_arg_str(const char *s) { return (TpkArg){.kind = TPK_ARG_STR, .str = s}; }
static inline TpkArg tpk_arg_none(void) { return (TpkArg){.kind = TPK_ARG_NONE}; }
static inline TpkArg tpk_arg_named(const char *name, TpkArg a) {
  a.name = name;
  return a;
}

TpkStatus tpk_graph_create(TpkContext *ctx, const char *name, TpkGraph **out);
void tpk_graph_destroy(TpkGraph *g);
/* A new input of the given dtype and shape (dims[d]: "128", "S", "B*S");
 * its value id in *value. */
TpkStatus tpk_graph_input(TpkGraph *g, TpkDType dtype, int rank, const char *const *dims, int *value);
/* An ATen op: its results' value ids in values[0..max), their number in *n
 * (-1 for a result ATen leaves undefined, such as native_layer_norm_backward's
 * gradients its output_mask turns off). A graph is built by one thread at a
 * time. */
TpkStatus tpk_graph_op(TpkGraph *g, const char *op, const TpkArg *args, int nargs, int *values, int max, int *n);
/* A call of kernel k (of any program of g's context, or the standard
 * library): args are its `in` and `inout` tensors as values and its scalars
 * as numbers or rank-0 values, in declaration order; the results are its
 * `out` and `inout` parameters, in order. A compiled graph's kernel is not
 * one (TPK_ERR_UNSUPPORTED): it is launched, not called. */
TpkStatus tpk_graph_call(TpkGraph *g, TpkKernel *k, const TpkArg *args, int nargs, int *values, int max, int *n);
/* Value v becomes the graph's next output. */
TpkStatus tpk_graph_output(TpkGraph *g, int value);
/* What a value is: dtype, rank, dim d as an expression ("B*S"; the string
 * belongs to g). */
TpkDType tpk_graph_value_dtype(const TpkGraph *g, int value);
int tpk_graph_value_rank(const TpkGraph *g, int value);
const char *tpk_graph_value_dim(const TpkGraph *g, int value, int d);
/* The graph's IR in the text form (ir/README.md), appended to nothing: a
 * string of g's, valid until g changes. */
const char *tpk_graph_ir(TpkGraph *g);
/* The op vocabulary: its size and names (ATen packet names, "addmm"). */
int tpk_graph_op_count(void);
const char *tpk_graph_op_name(int i);
/* Whether an op name, as tpk_graph_op takes it ("addmm", "aten::add.Tensor"),
 * is in the vocabulary, its overload included ("add.out" is not): what a
 * bridge asks before it builds. Arguments are the op's to judge when it is
 * built (a dtype, an attn_mask it does not take: TPK_ERR_UNSUPPORTED). */
bool tpk_graph_op_known(const char *op);

/* Fuse, lower and compile g into a program with one kernel, named as g,
 * whose parameters are g's inputs then its outputs (out parameters): launch
 * it with tpk_kernel_launch or a queue, like any kernel; it keeps nothing
 * of g, which may be destroyed. TPK_DUMP_IR=1 logs the graph's IR and its
 * clusters (tpk_context_set_log). A graph of the same structure and name as
 * one compiled before (tpk_func_hash) gives the same program from the
 * context's compilation cache; graphs of the same structure under other
 * names share the compiled code of their clusters. Clusters are compiled
 * here, once, for every value of the shape symbols. tpk_program_destroy it.
 *
 * A launch runs the clusters and the kernels g calls in order (a standard
 * kernel on the library's code), each result computed in place in the
 * output buffer that returns it, intermediates in memory of the launch
 * (counted against the device while it runs). What it reports: the tier
 * of its compiled code ("aot" when it ran only the library's), and on a
 * sim device the sums of its calls' simulated time, cycles, FLOPs and HBM
 * bytes, their utilisations weighted by time, and as the trace the
 * timeline of the call that took longest (each call is timed alone; a
 * graph has no timeline of its own). */
TpkStatus tpk_graph_compile(TpkGraph *g, TpkProgram **out);

/* ---- Eager streams ---------------------------------------------------------------
 *
 * Ops submitted one at a time on buffers, as PyTorch issues them. An op's
 * outputs are new buffers at once (shape and dtype known); their contents
 * are pending until a sync point: tpk_stream_sync, or reading a pending
 * buffer (tpk_buffer_read, tpk_buffer_data), which syncs its stream. The
 * mode is the context's (TPK_EAGER=debug|strict|fused, default strict, or
 * tpk_context_set_eager_mode):
 *   debug   each op runs at once, synchronously, and is checked: NaN/Inf in
 *           float outputs, out-of-range indices, shapes; an error names the
 *           op, its operands' shapes and dtypes and its position in the stream;
 *   strict  one launch per op, in order on a queue; the caller blocks only at
 *           a sync point, where the first error surfaces naming its op;
 *   fused   ops collect in a window; at a sync point (or when the window is
 *           full: 512 ops, or its graph would take more than 256
 *           parameters: its inputs, outputs and distinct lifted scalar
 *           values) the window becomes a graph, is fused and run. A
 *           window of a structure seen before (sizes aside: symbolic) runs
 *           from the cache without building anything.
 * The modes give the same results within floating-point tolerance: fused
 * clusters keep intermediates in f32 where strict rounds each op's output
 * to its dtype (docs: tutorials/06-eager-modes.md).
 *
 * What is compiled is cached (The compilation cache) by each op's or
 * window's structure with sizes by their symbolic form — each distinct
 * size above 1 is a symbol, and an int argument of a SymInt parameter
 * equal to one (or to a product of two) is that symbol, but for an index
 * (select's, a slice's start, end, step), kept constant — so a loop whose
 * sequence length changes every step compiles nothing after its first
 * step. An op whose sizes cannot all be symbols (a view that splits a size
 * into constants) keeps those constant. A float argument of an ATen
 * `Scalar` parameter (alpha, other, value, weight; a kernel's float
 * scalars) is passed as a rank-0 f32 input, not built in, so a learning
 * rate or bias correction that changes every step does not make a new
 * graph; floats of `float` parameters (eps) and ints are built in.
 *
 * Pending buffers: a buffer an op makes, or reads, is settled before its
 * bytes are used elsewhere: reading it (tpk_buffer_read, tpk_buffer_data),
 * writing it (tpk_buffer_write: the pending ops that read it run first, on
 * its old contents), launching a kernel on it, or another stream's op on
 * it, syncs the stream first. An error of that sync fails a read or write
 * and stays the stream's, for tpk_stream_sync. Views of a pending buffer
 * are pending with it. Streams, buffers and contexts may be destroyed in
 * any order: a buffer destroyed before the sync is not computed (fused),
 * and never takes memory: a fused op's outputs get theirs when the window
 * computes them, or when their bytes are reached first (tpk_buffer_data,
 * _address, _read, _write, a launch);
 * the end of the context drops the pending work of its streams (nobody
 * could read what it would write), and ops on them fail afterwards.
 * Several streams may run on several threads; one stream takes ops from one
 * thread at a time. Positions ("op #12") count a stream's ops from 1. */
typedef struct TpkStream TpkStream;
typedef enum TpkEagerMode { TPK_EAGER_DEBUG, TPK_EAGER_STRICT, TPK_EAGER_FUSED } TpkEagerMode;

TpkStatus tpk_context_set_eager_mode(TpkContext *ctx, TpkEagerMode mode);
TpkEagerMode tpk_context_eager_mode(const TpkContext *ctx);
const char *tpk_eager_mode_name(TpkEagerMode mode); /* "debug", "strict", "fused" */

/* A stream on a device, in the context's mode at the time (kept for its life). */
TpkStatus tpk_stream_create(TpkDevice *dev, TpkStream **out);
/* Syncs, then frees the stream; its output buffers stay the caller's. */
void tpk_stream_destroy(TpkStream *s);
TpkEagerMode tpk_stream_mode(const TpkStream *s);
/* An ATen op (as tpk_graph_op, with buffers for tensors): new output buffers
 * in outs[0..max) (the caller's, to destroy), their number in *n. Errors of
 * shapes and dtypes come at once; errors of running come at once in debug
 * mode, at the next sync otherwise. */
TpkStatus tpk_stream_op(TpkStream *s, const char *op, const TpkArg *args, int nargs, TpkBuffer **outs, int max, int *n);
/* A loaded kernel, as tpk_graph_call. */
TpkStatus tpk_stream_call(TpkStream *s, TpkKernel *k, const TpkArg *args, int nargs, TpkBuffer **outs, int max, int *n);
/* Run everything submitted; the first error since the last sync. */
TpkStatus tpk_stream_sync(TpkStream *s);

typedef struct TpkStreamStats {
  int64_t ops;          /* submitted */
  int64_t launches;     /* kernels run (each cluster of a window or op counts) */
  int64_t windows;      /* fused: windows run */
  int64_t compiles;     /* graphs (an op's or a window's) built and compiled: a cache miss */
  int64_t cache_hits;   /* graphs found compiled */
  int64_t memo_hits;    /* ops found in the stream's memo (seen before at these sizes): no key, no lookup */
  int64_t windows_seen; /* fused: windows run as one run before (the same ops, values and outputs): no key made */
  double sim_seconds;   /* on a sim device: simulated time of everything run (strict: up to the last sync) */
} TpkStreamStats;
void tpk_stream_stats(const TpkStream *s, TpkStreamStats *out);

/* What one launch of a stream ran, told to its observer: the op (debug,
 * strict) or the fused window (its ops' names in order of first use,
 * "mm, add, gelu (12 ops)"), the positions of the ops it ran, the kernels
 * (clusters) it ran, and its launch result: the tier, and on a sim device
 * the simulated time, FLOPs, HBM bytes and utilisations (the launch's
 * trace is NULL here: a window's clusters are timed alone). A profiler
 * (the tpk device's tpk.torch.report) adds these up and lays them end to
 * end as the chip's timeline. */
typedef struct TpkStreamLaunch {
  const char *label;
  int64_t first, last;
  int64_t kernels;
  const TpkLaunchResult *result;
} TpkStreamLaunch;
typedef void (*TpkStreamObserver)(void *user, const TpkStreamLaunch *launch);
/* fn(user, launch) for each launch of s, in order, once it has run: debug
 * when the op runs, strict at the sync that waits for it, fused when the
 * window runs; on the thread that runs or waits, with s's lock held (fn
 * must not call s). Strings are valid during the call. NULL: none. */
void tpk_stream_observe(TpkStream *s, TpkStreamObserver fn, void *user);

/* ---- The compilation cache ----------------------------------------------------
 *
 * One cache serves .tpk kernels, compiled graphs and the eager streams. In
 * memory, each context keeps its compiled units — a kernel's code for
 * every shape, a kernel's specialisation for a device, sizes and
 * tunables, a compiled graph, an eager window's or op's compiled graph —
 * keyed by the structural hash of their IR (tpk_func_hash, 128 bits: names
 * aside), the sizes or their symbolic form, dtypes, tunables and device;
 * at most TPK_CACHE_UNITS of them (default 1024), the least recently used
 * going first (a unit in use stays until its user is done: a launch
 * running or queued; then its compiled code is freed). So two loads of one
 * kernel, or two graphs or windows of one structure, compile once. A
 * compiled graph's program holds its clusters' code, and a program the
 * specialisations whose trace a launch handed out.
 *
 * On disk, under the same keys (with the compiler's identity and tpk's
 * build, a hash of its sources), later processes find what earlier ones
 * made instead of making it again: kernels' code that the system cc
 * compiled (TPK_TIER=auto once hot, or TPK_TIER=cc), and eager windows and
 * compiled graphs as what fusion made of them. A process whose windows,
 * graphs and clusters are all there builds, fuses, lowers, emits and
 * compiles nothing (TpkCacheStats.unit_loads, .emitted). A fused stream
 * whose windows come round again (a loop's second step) also keeps there
 * what it ran: its windows' keys and the memory its launches used; a later
 * context's first fused stream on that device loads those windows and
 * faults that memory in on a thread of its own while the caller prepares
 * its inputs, so its first step finds them in memory (the stream's first
 * window waits for that thread; its loads count in unit_loads). The folder:
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
 * key, of which kernel or unit it is and its bytes, and one that does not
 * verify (planted, damaged, another key's, another kernel's renamed) is
 * built again, never loaded. Whoever can read the key can make entries that load;
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
  int64_t entries;       /* compiled kernels, windows and graphs in the folder now */
  int64_t bytes;         /* their size */
  int64_t max_bytes;     /* TPK_CACHE_MAX */
  int64_t build_folders; /* builds under way, or left by killed processes */
  int hits;              /* this context's kernels loaded from the cache */
  int misses;            /* ... compiled because the cache had no entry that loads */
  int rejected;          /* ... entries found that did not authenticate */
  /* This context's lookups of compiled units in its in-memory cache, per
   * kind: kernels' specialisations (one per launch of a kernel: a .tpk
   * kernel, a standard one, or a cluster a compiled graph runs), eager
   * windows (and single ops), and compiled graphs (tpk_graph_compile). A
   * miss builds (and maybe compiles) the unit. */
  int64_t unit_hits[3], unit_misses[3]; /* indexed by TpkUnitKind */
  int64_t units;                        /* units the context holds now (TPK_CACHE_UNITS at most) */
  /* What this context found in the folder by key instead of building it:
   * eager windows and compiled graphs (their fused IR: counted as hits
   * above), and kernels' code (nothing lowered or emitted for it). */
  int64_t unit_loads[3];
  /* Kernels this context lowered and emitted C for (0 in a process whose
   * every unit the folder had). */
  int64_t emitted;
  /* Times it bound and lowered a kernel for a launch's sizes: a sim
   * device's timing needs that once per sizes; on the host, code for every
   * shape needs only what that taught (how many threads its grid takes),
   * which the folder keeps, so a process on the host whose every unit and
   * launch size the folder had lowers nothing. */
  int64_t lowered;
  /* The same lookups of every context that used the folder, added as each
   * ended, since the folder was last cleared (a tally, not authenticated). */
  int64_t folder_unit_hits[3], folder_unit_misses[3];
} TpkCacheStats;
typedef enum TpkUnitKind { TPK_UNIT_KERNEL, TPK_UNIT_EAGER, TPK_UNIT_GRAPH } TpkUnitKind;

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
