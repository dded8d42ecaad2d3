/*
 * tune.h — autotuning: searching a kernel's tunables, the disk cache of the
 * winners, and the table of shipped defaults (kernels/tuned.tsv).
 *
 *   search   every combination of the declared `tune X in [...]` values (or
 *            a coordinate descent past a budget), each timed on the
 *            simulator without generating code (sim:<chip>), or compiled
 *            and measured (host);
 *   cache    one small text file per (kernel, shapes, device) under the JIT
 *            cache's root, in its tune/ folder, written atomically;
 *   defaults a tab-separated table the library ships, parsed from a string.
 *
 * Keys. A winner is filed under the kernel's name, the structural hash of
 * its checked, unbound IR (tpk_func_hash: an edit to the kernel changes the
 * key, a comment above it or a renamed variable does not), the value of
 * every shape symbol, and the device ("host", or "sim:<chip>" with aliases
 * resolved). Cache files also record the tpk version that wrote them. A
 * file or row whose key differs, that does not parse, that names a tunable
 * the kernel lacks or a value it does not declare, is ignored: never used,
 * never fatal.
 *
 * For the launch path: compute tpk_tune_ir_hash once per kernel, then per
 * new shape tpk_tune_key + tpk_tune_lookup (one open() of a small file; a
 * miss costs a failed open()).
 */
#ifndef TPK_RUNTIME_TUNE_H
#define TPK_RUNTIME_TUNE_H

#include "ir/ir.h"
#include "sim/sim.h"
#include "tpk.h"

enum { TPK_TUNE_MAX_TUNABLES = 16 };

/* ---- Keys ---------------------------------------------------------------------- */

typedef struct TpkTuneKey {
  char kernel[128];  /* the kernel's name */
  uint64_t ir_hash;  /* tpk_tune_ir_hash of the kernel */
  char shapes[1024]; /* "M=4096,N=4096,K=4096": every symbol, in tpk_func_symbols order */
  char device[64];   /* "host", "sim:v5e" */
} TpkTuneKey;

/* tpk_func_hash(f).lo; f is the kernel as the checker built it
 * with nothing bound (a program's module). 0 when memory ran out. */
uint64_t tpk_tune_ir_hash(const TpkFunc *f);

/* "host", or "sim:<chip>" with the chip's short name ("sim:trillium" ->
 * "sim:v6e") into out[64]; *chip (may be NULL) gets the chip, NULL for the
 * host. Errors: an unknown device (TPK_ERR_INVALID), several chips
 * (TPK_ERR_UNSUPPORTED, as for launches). */
TpkStatus tpk_tune_device(const char *name, char *out, const TpkChip **chip, TpkError *err);

/* The key of kernel f (hash ir_hash) at these symbol values on `device`.
 * Errors (TPK_ERR_INVALID): a symbol the kernel lacks, one given twice, or
 * one of its symbols missing; an unknown device. */
TpkStatus tpk_tune_key(TpkTuneKey *key, const TpkFunc *f, uint64_t ir_hash, const TpkBinding *syms, int nsyms,
                       const char *device, TpkError *err);

/* ---- A chosen configuration ------------------------------------------------------- */

typedef struct TpkTuneConfig {
  int n;                                   /* f->ntunes */
  TpkBinding tunes[TPK_TUNE_MAX_TUNABLES]; /* in f->tunes order; names are f's */
  double seconds;                          /* the time the tuner saw (0: not recorded) */
  const char *from;                        /* "cache" or "defaults" */
  const char *near;                        /* a defaults row for other sizes: its sizes (the table's); else NULL */
} TpkTuneConfig;

/* "BM=256,BN=128" from one value per tunable of f. */
void tpk_tune_format(TpkStr *out, const TpkFunc *f, const int64_t *values);
/* Parse that text into values (f->tunes order): every tunable exactly once,
 * each value one f declares. */
bool tpk_tune_parse(const TpkFunc *f, const char *text, size_t len, int64_t *values);

/* ---- The cache on disk -------------------------------------------------------------- */

/* The cache root, as for the JIT: $TPK_CACHE_DIR ("" disables: NULL), else
 * $XDG_CACHE_HOME/tpk, else $HOME/.cache/tpk. Heap, or NULL. Entries live in
 * its tune/ folder. */
char *tpk_tune_cache_root(void);
/* Where the entry of `key` lives (heap), or NULL when out of memory. */
char *tpk_tune_cache_path(const char *root, const TpkTuneKey *key);
/* Write the entry (tmp file + rename, so readers see the old or the new file
 * whole). *path (may be NULL) receives the file's path (heap). */
TpkStatus tpk_tune_cache_store(const char *root, const TpkTuneKey *key, const TpkFunc *f, const int64_t *values,
                               double seconds, char **path, TpkError *err);
/* The entry of `key`, if a valid one exists. */
bool tpk_tune_cache_load(const char *root, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out);

/* ---- Shipped defaults (kernels/tuned.tsv) ---------------------------------------------
 * One row per line, seven tab-separated fields:
 *   kernel  ir-hash (16 hex digits)  file  device  shapes  tunables  seconds
 * e.g. `matmul  1f0c...  kernels/matmul.tpk  sim:v5e  M=4096,N=4096,K=4096
 * BM=512,BN=1024,BK=1024  0.000748`. Lines starting with '#' and blank lines
 * are comments, kept in place when the table is rewritten. `file` is where
 * the kernel came from, for people and for the test that flags rows whose
 * kernel has changed since it was tuned. */
typedef struct TpkTuneRow {
  char *text;         /* comment lines: the line; rows: NULL */
  char *kernel, *file, *device, *shapes, *tunes;
  uint64_t ir_hash;
  double seconds;
} TpkTuneRow;

typedef struct TpkTuneTable {
  TpkTuneRow *rows; /* in file order, comments included */
  int nrows, cap;
} TpkTuneTable;

/* Parse `text`; `name` is for messages (`tuned.tsv:3: ...`). A malformed row
 * is an error naming its line: the table is shipped and tested. */
TpkStatus tpk_tune_table_parse(TpkTuneTable *t, const char *text, size_t len, const char *name, TpkError *err);
void tpk_tune_table_free(TpkTuneTable *t);
/* The row for `key` with tunables valid for f. */
bool tpk_tune_table_find(const TpkTuneTable *t, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out);
/* The row for `key`, else the row of its kernel and device whose sizes are
 * nearest (the least sum of |log2| of their ratios, the first of equals),
 * each within a factor of 4 of the key's: blocks tuned for a batch of 4 at
 * sequence length 64 suit a batch of 8 better than blocks declared for
 * 1024 (flash attention's 256x256 blocks computed 16 times the work of a
 * 64-long sequence). Sizes further away say little about the best blocks:
 * the declared defaults stay. */
bool tpk_tune_table_nearest(const TpkTuneTable *t, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out);
/* Replace the row of the same kernel, file, device and shapes (whatever its
 * hash: a row for an older version of the kernel is stale), or append. */
TpkStatus tpk_tune_table_put(TpkTuneTable *t, const TpkTuneKey *key, const char *file, const char *tunes,
                             double seconds, TpkError *err);
/* The table as text (heap), comments and rows in order. */
char *tpk_tune_table_render(const TpkTuneTable *t);
/* Read `path` (a missing file is an empty table), put the row, write it back
 * atomically. */
TpkStatus tpk_tune_defaults_save(const char *path, const TpkTuneKey *key, const char *file, const char *tunes,
                                 double seconds, TpkError *err);

/* ---- Lookup: what a launch should use --------------------------------------------------- */

/* The tunables for `key`: the cache under `root` (NULL: tpk_tune_cache_root(),
 * "": no cache) first, then `defaults` (may be NULL), their row for the key
 * or for the nearest sizes (tpk_tune_table_nearest). false when neither
 * knows the key; `out` is then untouched. */
bool tpk_tune_lookup(const TpkTuneKey *key, const TpkFunc *f, const char *root, const TpkTuneTable *defaults,
                     TpkTuneConfig *out);

/* The declared defaults fitted to the sizes `syms` binds, into values (one
 * per tunable, in f->tunes order): a tunable sizing the blocks of
 * `tiles(X, T)` loops and grids whose extents X are all known and smaller
 * than its default takes the smallest declared choice covering the
 * largest of them (every declared choice is a valid setting of the kernel). A block past the data is work on padding: flash
 * attention's declared 256x256 blocks over a 4-long sequence computed 4096
 * times its scores. An extent is known when it is a shape symbol, a
 * constant, or a min of expressions one of which is known (kv_end =
 * min(T, ...)). false when no tunable changes. */
bool tpk_tune_fit_defaults(const TpkFunc *f, const TpkBinding *syms, int nsyms, int64_t *values);

/* ---- The search --------------------------------------------------------------------------- */

/* One configuration the search looked at. */
typedef struct TpkTunePoint {
  int64_t values[TPK_TUNE_MAX_TUNABLES]; /* one per tunable, in f->tunes order */
  TpkStatus status;                      /* TPK_OK: timed; otherwise skipped, see reason */
  bool no_fit;                           /* skipped: its blocks exceed the (chip's) VMEM */
  double seconds;                        /* simulated, or the median of the host's launches */
  double cycles;                         /* sim devices: at the chip's clock */
  char tier[8];                          /* host: the compiler tier measured ("cc", "tcc") */
  char reason[256];                      /* skipped: the first line of why */
} TpkTunePoint;

typedef struct TpkTuneReport TpkTuneReport;
/* Called after each configuration; r->best is the best so far. */
typedef void (*TpkTuneProgress)(void *user, const TpkTuneReport *r, const TpkTunePoint *p);

typedef struct TpkTuneOptions {
  const char *device;      /* "host" or "sim:<chip>" */
  const TpkBinding *syms;  /* every shape symbol of the kernel */
  int nsyms;
  const TpkBinding *fixed; /* tunables held at one (declared) value */
  int nfixed;
  int max_points;          /* exhaustive up to this many points (0: 512);
                              beyond, a coordinate descent of at most this many */
  /* the host: configurations compile and run in the program's context */
  const double *scalars;   /* per parameter, the values of scalars (NULL: 1 each) */
  int repeat;              /* timed launches per configuration (0: 5) */
  uint64_t seed;           /* of the random inputs */
  TpkTuneProgress progress;
  void *user;
  /* Or NULL: whether to look at a configuration (values in f->tunes order)
   * besides the start, the declared defaults; a launch of a library kernel
   * looks only at the settings the library has code for. */
  bool (*keep)(void *keep_user, const int64_t *values);
  void *keep_user;
} TpkTuneOptions;

struct TpkTuneReport {
  const TpkFunc *f;         /* the kernel, as its program holds it (nothing bound) */
  TpkTuneKey key;
  int ntunables;            /* f->ntunes */
  int64_t space;            /* configurations in the space (INT64_MAX if larger) */
  bool exhaustive;          /* every configuration was looked at */
  int budget;               /* the most configurations the search looks at */
  TpkTunePoint *points;     /* in the order they were looked at */
  int npoints, cap;
  int ntimed, nskipped;
  int start;                /* the declared defaults (with fixed values): points[0] */
  int best;                 /* fastest timed point; -1 while none */
  double wall_seconds;      /* the whole search */
};

/* Find kernel `kernel` (NULL: the file's only kernel) of program prog and
 * build its key: the first step of the search, and what a lookup from the
 * command line needs. Errors: TPK_ERR_INVALID for an unknown kernel and
 * tpk_tune_key's. */
TpkStatus tpk_tune_prepare(const TpkProgram *prog, const char *kernel, const char *device, const TpkBinding *syms,
                           int nsyms, const TpkFunc **f, TpkTuneKey *key, TpkError *err);

/* Search kernel `kernel` (NULL: the only one) of prog. Each configuration
 * binds the kernel the program was loaded as (nothing is checked again).
 * Configurations that do not bind, do not fit or fail are skipped (reported,
 * not fatal). Errors: an unknown kernel, tunable, value or shape symbol, a
 * bad device (TPK_ERR_INVALID), a kernel without tunables
 * (TPK_ERR_UNSUPPORTED), or no configuration ran (the first one's error). On
 * an error after the search began, r still holds the points. Free r with
 * tpk_tune_report_free in every case. */
TpkStatus tpk_tune_search(TpkProgram *prog, const char *kernel, const TpkTuneOptions *o, TpkTuneReport *r,
                          TpkError *err);
/* The same search of kernel f (as its program holds it: nothing bound;
 * ir_hash its tpk_tune_ir_hash) on a simulated chip (o->device "sim:<chip>"),
 * which needs no program: nothing is compiled. What a launch on a chip runs
 * when nobody tuned its sizes (runtime/device.c). */
TpkStatus tpk_tune_search_chip(const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneReport *r,
                               TpkError *err);
void tpk_tune_report_free(TpkTuneReport *r);

/* What a launch on a simulated chip (o->device) runs when neither the tuning
 * cache nor the shipped table has a row for its sizes: the search above (a
 * coordinate descent past 64 configurations; ~2 ms for flash attention's 12,
 * ~70 ms for a 4096^3 matmul's 27), its winner filed in the tuning cache so
 * that the next process looks it up. A chip times a configuration from its
 * schedule, without compiling it, as a Triton autotuner times its configs on
 * first call; the host would compile each, so it keeps the declared defaults
 * unless `tpk tune` is asked. o->max_points 0 means 64 here. false when no
 * configuration fits. out->from is "search". */
bool tpk_tune_on_chip(const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneConfig *out);

#endif
