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
 * Shared objects built by cc are kept in a cache folder ($TPK_CACHE_DIR,
 * else $XDG_CACHE_HOME/tpk, else ~/.cache/tpk), named by a hash of the
 * source and the compiler command, so a later process loads them without
 * compiling: in the auto and cc tiers a cached build is used at once,
 * without tcc. Code compiled under a *key* (tpk_jit_compile_keyed: words
 * that stand for its source, such as the structural key of the unit it was
 * generated from) is named by the key instead, with the compiler's identity
 * and tpk's build (tpk_build_id: a hash of tpk's sources, which decide what
 * source a key stands for), so a later process finds it by the key
 * (tpk_jit_load) before it has lowered or emitted anything. The folder also
 * keeps *units*: bytes the runtime stores under a key of its own
 * (tpk_jit_unit_store), such as a fused graph's IR, authenticated alike.
 *
 * The cache's trust model. The folder may be shared by processes, users and
 * hosts (a team's cache), so nothing about a file in it is trusted but its
 * MAC: every entry ends with HMAC-SHA256, under a key kept outside the
 * folder, of the entry's name (which kernel it is) and its bytes. The key is
 * $TPK_CACHE_KEY_FILE, else a per-user key made on first use
 * ($XDG_CONFIG_HOME/tpk/cache.key, else ~/.config/tpk/cache.key: 32 random
 * bytes, mode 0600). A key file is used only when it is a regular file of 32
 * to 4096 bytes, owned by this user or by root, that neither its group nor
 * others can write and others cannot read (its group may: a team key), and
 * that is not inside the cache folder; otherwise the disk cache is off for
 * the JIT (kernels still compile), and each code of the auto and cc tiers
 * carries the reason as its note. An
 * entry that does not authenticate (planted, damaged, built under another
 * key, or another kernel's entry renamed) is never loaded: it is rebuilt,
 * and removed or replaced. Whoever can read the key can make entries that
 * load: that is who the cache trusts.
 *
 * Faults never fail a compile: when the folder is not writable (the build
 * then runs in a private folder under $TMPDIR), or a build cannot be stored
 * (a directory sits at the entry's path), the kernel is built without the
 * cache and the code's note says so. Build folders left by killed processes
 * are removed once stale. The entries are held to TPK_CACHE_MAX bytes
 * (default 1G), least recently used first.
 *
 * cc builds for the widest instruction set this CPU has (AVX-512 where
 * present, else AVX2 with FMA, else the baseline), never -march=native: the
 * instruction set is named in every cache key, so a folder shared by
 * machines with different CPUs holds one entry per instruction set, and an
 * entry built for a set this CPU lacks is a miss, never loaded.
 * TPK_CC_ISA (or the isa option) asks for a narrower one, say to share
 * entries with older machines.
 *
 * Thread safety: every function but tpk_jit_destroy may be called from any
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
  const char *key_file;  /* NULL: the per-user key above (made on first use) */
  int64_t cache_max;     /* bytes the cache's entries may take; <= 0: the default, 1G */
  const char *cc;        /* NULL: $CC, else "cc" */
  const char *isa;       /* what cc builds for: NULL, the widest this CPU has; "generic" (baseline
                            x86-64), "avx2" (with FMA) or "avx512" (F, BW, DQ, VL; 16 lanes) */
} TpkJitOptions;

typedef struct TpkJit TpkJit;   /* one per runtime context; owns the background compiler thread */
typedef struct TpkCode TpkCode; /* compiled kernels (one or more), reference counted (tpk_code_release) */

/* The workspace bytes a launch of a kernel with these shape symbols needs:
 * `<entry>_workspace`, which every generated kernel defines (host/host.h). */
typedef int64_t (*TpkWorkspaceFn)(const int64_t *syms);

/* tpk's build: a hash of its sources (generated by the Makefile). */
extern const char tpk_build_id[];

/* Options from the environment (TPK_TIER, TPK_JIT_HOT_CALLS, TPK_CACHE_DIR,
 * TPK_CACHE_KEY_FILE, TPK_CACHE_MAX, TPK_CC_ISA, CC). A value that does not parse is an error naming the variable, not a
 * silent default; *o then holds the defaults. */
TpkStatus tpk_jit_options_from_env(TpkJitOptions *o, TpkError *err);
/* An isa this CPU cannot run is an error. */
TpkStatus tpk_jit_create(const TpkJitOptions *o, TpkJit **out, TpkError *err);
/* Waits for background compiles to finish or be cancelled, then frees the
 * JIT and every code not yet released; none may be used or released after. */
void tpk_jit_destroy(TpkJit *j);

/* Compile `source` whose entry point is the function named `entry`. With
 * the tcc tier this returns when tcc is done; with cc when cc is done. The
 * error message of a failed compile includes the compiler's output; a
 * source that does not compile is TPK_ERR_INTERNAL (generated code always
 * should). The code is the caller's (one reference). */
TpkStatus tpk_jit_compile(TpkJit *j, const char *source, const char *entry, TpkCode **out, TpkError *err);
/* The same, the cache entry named by key[0..nwords) (see above): the key
 * must stand for the source and entry exactly, for this build of tpk. */
TpkStatus tpk_jit_compile_keyed(TpkJit *j, const uint64_t *key, int nwords, const char *source, const char *entry,
                                TpkCode **out, TpkError *err);
/* The same for a source that defines n kernels, entries[0..n): one code
 * object (one compile, one cache entry, one shared object to load), whose
 * entry i is tpk_code_entry_at(c, i). A compiled graph's clusters are
 * compiled so (runtime.c): a later process reads and loads one file for
 * them all. Calls of any entry count toward the promotion of the whole. */
TpkStatus tpk_jit_compile_all(TpkJit *j, const uint64_t *key, int nwords, const char *source,
                              const char *const *entries, int n, TpkCode **out, TpkError *err);
/* The code compiled under key before (by any process using the cache
 * folder), loaded from the disk cache; *out is NULL when there is none
 * that authenticates (the caller then compiles: tpk_jit_compile_keyed).
 * Never in the tcc tier, nor without a cache. */
void tpk_jit_load(TpkJit *j, const uint64_t *key, int nwords, const char *entry, TpkCode **out);
/* The same for code of n entries (tpk_jit_compile_all). */
void tpk_jit_load_all(TpkJit *j, const uint64_t *key, int nwords, const char *const *entries, int n, TpkCode **out);
/* Another reference, for another holder (each entry's user, say). */
void tpk_code_retain(TpkCode *c);
/* Drops the caller's reference; the last one frees the code (its memory,
 * its shared object). A promotion under way holds a reference of its own. */
void tpk_code_release(TpkCode *c);

/* The best entry point available now (atomic), counting the call toward
 * promotion in auto mode: the first entry's, or entry i's. */
TpkKernelFn tpk_code_entry(TpkCode *c);
TpkKernelFn tpk_code_entry_at(TpkCode *c, int i);
/* How many entries c has. */
int tpk_code_entries(const TpkCode *c);
/* Which tier the current entry point came from. */
TpkTier tpk_code_tier(const TpkCode *c);
/* Block until a pending cc promotion of c has finished (tests, benchmarks). */
void tpk_code_wait_optimized(TpkCode *c);
/* Why the background cc build of c failed (the compiler's output), or NULL
 * when it did not fail or has not finished. */
const char *tpk_code_cc_error(const TpkCode *c);
/* The code was loaded from the disk cache, not compiled by this process. */
bool tpk_code_from_cache(const TpkCode *c);
/* The code's `<entry>_workspace` (its first entry's, or entry i's), or
 * NULL when its source defines none. */
TpkWorkspaceFn tpk_code_workspace(const TpkCode *c);
TpkWorkspaceFn tpk_code_workspace_at(const TpkCode *c, int i);
/* NULL, or one line about how c was built that a user should hear, such as
 * "the cache folder /x is not writable: built without the cache". Stable
 * once tpk_code_wait_optimized returned (a background build may add one). */
const char *tpk_code_note(const TpkCode *c);

/* Counters: how many times each compiler was invoked, and what the disk
 * cache did. A miss is a kernel compiled because the cache had no entry
 * for it that loads; a rejected entry (counted also as a miss) was there
 * but did not authenticate (units' entries too). `live_codes` are the codes
 * not freed yet. */
typedef struct TpkJitStats {
  int tcc_compiles, cc_compiles, cache_hits, cc_failures, cache_misses, cache_rejects;
  int live_codes;
} TpkJitStats;
TpkJitStats tpk_jit_stats(const TpkJit *j);

/* The disk cache as `tpk cache stats` shows it. Strings belong to the JIT. */
typedef struct TpkJitCacheInfo {
  const char *dir;      /* the cache folder, or NULL: none (TPK_CACHE_DIR="", or no home) */
  bool in_use;          /* this JIT loads and stores entries there */
  const char *note;     /* why it does not, when it does not and a user should hear it */
  const char *key_file; /* the key file in use, or NULL */
  int64_t max_bytes;    /* TPK_CACHE_MAX */
  int64_t entries, bytes; /* compiled kernels in the folder now, and their size */
  int64_t build_folders;  /* builds under way, or left by killed processes */
} TpkJitCacheInfo;
TpkStatus tpk_jit_cache_info(TpkJit *j, TpkJitCacheInfo *out, TpkError *err);
/* Removes every entry and every stale build folder (builds of live
 * processes stay), under the folder's lock, so concurrent users are safe:
 * code they loaded keeps running, and they rebuild what they miss. */
TpkStatus tpk_jit_cache_clear(TpkJit *j, int64_t *entries_removed, int64_t *builds_removed, TpkError *err);

/* Units: bytes stored under key[0..nwords) (the runtime's words; tpk's
 * build is added), authenticated like compiled code. Load gives a copy
 * (heap: free it; a NUL follows its len bytes) of what a store put there,
 * or NULL when there is none
 * that authenticates (one that does not is removed). Nothing happens
 * without a cache in use. Store never fails a caller: a folder that cannot
 * take it keeps nothing. */
char *tpk_jit_unit_load(TpkJit *j, const uint64_t *key, int nwords, size_t *len);
void tpk_jit_unit_store(TpkJit *j, const uint64_t *key, int nwords, const void *bytes, size_t len);

/* HMAC-SHA256 (RFC 2104), what authenticates cache entries. */
void tpk_jit_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, unsigned char out[32]);

#endif
