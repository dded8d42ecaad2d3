/*
 * jit.h — compiling generated C into callable kernels, in two tiers.
 *
 *   tcc: libtcc compiles the source in memory, in about a millisecond; this
 *        is what the first call of a new kernel waits for.
 *   cc:  the system C compiler at -O3 builds a shared object in a
 *        background thread; when it is ready the kernel's entry point is
 *        swapped atomically, so callers never wait on cc.
 *
 * TPK_TIER=tcc|cc|auto (default auto) forces a tier: `tcc` never starts cc,
 * `cc` compiles with cc synchronously on the first call (no tcc), `auto`
 * starts with tcc and promotes a kernel to cc once it has been called
 * TPK_JIT_HOT_CALLS times (or immediately with TPK_TIER=auto and
 * TPK_JIT_HOT_CALLS=0).
 *
 * Generated sources start with `#include "tpk_prims.h"`; the JIT supplies
 * that header (host/prims.h, embedded in the library at build time), so
 * no file needs to be installed anywhere.
 *
 * Shared objects built by cc are kept in a cache folder keyed by a hash of
 * the source and the compiler command ($TPK_CACHE_DIR, else
 * $XDG_CACHE_HOME/tpk, else ~/.cache/tpk), so a later process loads them
 * without compiling: in the auto and cc tiers a cached build is used at
 * once, without tcc. A corrupt or unloadable cache file is removed and
 * rebuilt, never trusted; a file (or folder) another user owns or others
 * can write is never loaded (kernels are then compiled as if it were absent).
 *
 * Thread safety: compile, entry, tier, wait and stats may be called from any
 * thread. tpk_jit_destroy must come after the last kernel call returned.
 */
#ifndef TPK_JIT_H
#define TPK_JIT_H

#include "base/base.h"
#include "host/prims.h"

/* The signature of every generated kernel entry point.
 *   args:      one pointer per kernel parameter, in order (tensor data, or
 *              the address of a scalar's value)
 *   syms:      values of the kernel's shape symbols, in tpk_func_symbols order
 *   workspace: scratch memory of the size the lowering planned
 *   err:       a buffer of TPK_KERNEL_ERR_LEN bytes for a message
 * Returns 0, or non-zero after writing a message (e.g. a gather index out of
 * range) into err. */
enum { TPK_KERNEL_ERR_LEN = 256 };
typedef int (*TpkKernelFn)(const TpkPrims *p, void *const *args, const int64_t *syms, void *workspace, char *err);

typedef enum TpkTier { TPK_TIER_AUTO, TPK_TIER_TCC, TPK_TIER_CC } TpkTier;

typedef struct TpkJitOptions {
  TpkTier tier;          /* TPK_TIER_AUTO unless forced */
  int hot_calls;         /* calls before promotion to cc (auto); < 0: default 3 */
  const char *cache_dir; /* NULL: the default above; "" disables the disk cache */
  const char *cc;        /* NULL: $CC, else "cc" */
} TpkJitOptions;

typedef struct TpkJit TpkJit;   /* one per runtime context; owns the background compiler thread */
typedef struct TpkCode TpkCode; /* one compiled kernel, owned by its TpkJit */

/* Options from the environment (TPK_TIER, TPK_JIT_HOT_CALLS, TPK_CACHE_DIR,
 * CC). A value that does not parse is an error naming the variable, not a
 * silent default; *o then holds the defaults. */
TpkStatus tpk_jit_options_from_env(TpkJitOptions *o, TpkError *err);
TpkStatus tpk_jit_create(const TpkJitOptions *o, TpkJit **out, TpkError *err);
/* Waits for background compiles to finish or be cancelled, then frees all. */
void tpk_jit_destroy(TpkJit *j);

/* Compile `source` whose entry point is the function named `entry`. With
 * the tcc tier this returns when tcc is done; with cc when cc is done. The
 * error message of a failed compile includes the compiler's output; a
 * source that does not compile is TPK_ERR_INTERNAL (generated code always
 * should). */
TpkStatus tpk_jit_compile(TpkJit *j, const char *source, const char *entry, TpkCode **out, TpkError *err);

/* The best entry point available now (atomic), counting the call toward
 * promotion in auto mode. */
TpkKernelFn tpk_code_entry(TpkCode *c);
/* Which tier the current entry point came from. */
TpkTier tpk_code_tier(const TpkCode *c);
/* Block until a pending cc promotion of c has finished (tests, benchmarks). */
void tpk_code_wait_optimized(TpkCode *c);
/* Why the background cc build of c failed (the compiler's output), or NULL
 * when it did not fail or has not finished. */
const char *tpk_code_cc_error(const TpkCode *c);

/* Counters for tests: how many times each compiler was invoked. */
typedef struct TpkJitStats {
  int tcc_compiles, cc_compiles, cache_hits, cc_failures;
} TpkJitStats;
TpkJitStats tpk_jit_stats(const TpkJit *j);

#endif
