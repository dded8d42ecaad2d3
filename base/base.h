/*
 * base.h — the few utilities every stage of the compiler shares, one of
 * each: an arena, a growable string, an error value, hashing, a pointer map
 * and a string set (map.c), "did you mean" suggestions, a monotonic clock,
 * JSON string literals and facts about dtypes.
 *
 * Every folder includes this header (or another of base/) rather than growing
 * its own.
 */
#ifndef TPK_BASE_H
#define TPK_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpk.h"

#if defined(__GNUC__)
#define TPK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TPK_PRINTF(f, a)
#endif

/* ---- Arena --------------------------------------------------------------
 * All AST and IR nodes of one compilation live in one arena and are freed at
 * once (Lua's and QBE's pools). Allocation never fails silently: when the
 * arena would exceed its limit, tpk_arena_alloc returns NULL and sets
 * `exhausted`, so hostile input cannot make the compiler allocate without
 * bound. Memory is zeroed. */
typedef struct TpkArenaChunk TpkArenaChunk;
typedef struct TpkArena {
  TpkArenaChunk *chunks; /* newest first */
  size_t used;           /* bytes handed out so far, all chunks */
  size_t limit;          /* 0 means the default (1 GiB) */
  bool exhausted;        /* an allocation was refused */
} TpkArena;

void tpk_arena_init(TpkArena *a, size_t limit);
void *tpk_arena_alloc(TpkArena *a, size_t size);
char *tpk_arena_strndup(TpkArena *a, const char *s, size_t n);
char *tpk_arena_strdup(TpkArena *a, const char *s);
char *tpk_arena_printf(TpkArena *a, const char *fmt, ...) TPK_PRINTF(2, 3);
void tpk_arena_free(TpkArena *a);

/* ---- Growable string (heap) ---------------------------------------------
 * For printers and diagnostics. On allocation failure the buffer keeps what
 * it had and `failed` is set; callers check once at the end. */
typedef struct TpkStr {
  char *data; /* NUL-terminated when non-NULL */
  size_t len, cap;
  bool failed;
} TpkStr;

void tpk_str_puts(TpkStr *s, const char *text);
void tpk_str_putn(TpkStr *s, const char *text, size_t n);
void tpk_str_putc(TpkStr *s, char c);
void tpk_str_printf(TpkStr *s, const char *fmt, ...) TPK_PRINTF(2, 3);
void tpk_str_vprintf(TpkStr *s, const char *fmt, va_list ap);
void tpk_str_free(TpkStr *s);
/* Returns the string (never NULL: "" when empty) and leaves s empty; the
 * caller frees the result with free(). */
char *tpk_str_take(TpkStr *s);

/* ---- Hashing (map.c) -------------------------------------------------------
 * FNV-1a, 64 bits, over bytes, from tpk's own seed (not FNV's published
 * offset basis 14695981039346656037, of which it lacks the last digit: tpk
 * has always used it). Hashes written to disk are built on it (tuning
 * cache file names; the structural IR hash, ir/hash.c, chains tpk_hash_mix
 * from this seed, kept in kernels/tuned.tsv), so neither ever changes.
 * tpk_hash_add continues a hash begun at TPK_HASH_SEED; tpk_hash_mix
 * scrambles a 64-bit value (a pointer, fields combined) into table slots. */
#define TPK_HASH_SEED UINT64_C(1469598103934665603)
uint64_t tpk_hash_add(uint64_t h, const void *data, size_t n);
uint64_t tpk_hash_bytes(const void *data, size_t n);
static inline uint64_t tpk_hash_mix(uint64_t x) { /* MurmurHash3's finaliser; inline: keys hash a word at a time */
  x ^= x >> 33;
  x *= UINT64_C(0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= UINT64_C(0xc4ceb9fe1a85ec53);
  x ^= x >> 33;
  return x;
}
/* splitmix64: the next number of the sequence seeded by *state (random
 * test and benchmark inputs). */
uint64_t tpk_splitmix64(uint64_t *state);

/* ---- Pointer map (map.c) -----------------------------------------------------
 * Open addressing from pointers (IR values, ops, interned names) to
 * pointers. Passes keep their per-value facts here instead of growing IR
 * structs. A zeroed map keeps its tables on the heap (tpk_ptrmap_free
 * releases them); one made as `(TpkPtrMap){.arena = a}` takes them from an
 * arena that the caller frees. */
typedef struct TpkPtrMap {
  TpkArena *arena; /* NULL: the heap */
  const void **keys;
  void **vals;
  size_t cap, count;
} TpkPtrMap;

/* false when memory ran out (the map is unchanged) */
bool tpk_ptrmap_put(TpkPtrMap *m, const void *key, void *val);
/* true and *val when key is present (val may be NULL) */
bool tpk_ptrmap_get(const TpkPtrMap *m, const void *key, void **val);
/* Empties the map (keeping its arena); frees heap tables. */
void tpk_ptrmap_free(TpkPtrMap *m);

/* ---- String set (map.c) --------------------------------------------------------
 * Strings copied into an arena (names already taken); make one as
 * `(TpkStrSet){.arena = a}`. */
typedef struct TpkStrSet {
  TpkArena *arena;
  const char **keys;
  size_t cap, count;
} TpkStrSet;

bool tpk_strset_has(const TpkStrSet *s, const char *key, size_t n);
/* The stored copy of key[0..n), added if new; NULL when out of memory. */
const char *tpk_strset_add(TpkStrSet *s, const char *key, size_t n);

/* ---- "Did you mean" ------------------------------------------------------------
 * One rule for every suggestion tpk makes (unknown names, functions,
 * options, commands, kernels): the distance is Damerau-Levenshtein's
 * (optimal string alignment: a swap of two neighbours is one edit, the
 * commonest typo), and a candidate is close enough when it is at most one
 * edit away for candidates of up to 4 characters, two for longer ones, and
 * fewer edits than the word has characters (`x` never suggests `y`). The
 * closest candidate wins, the first of equals. When none is close, a
 * candidate that is the only one to start with the word (2 characters or
 * more) is suggested: "che" -> "check". */
int tpk_edit_distance(const char *a, const char *b); /* large for words over 63 characters */
const char *tpk_suggest(const char *word, const char *const *candidates, int n); /* NULL: none */

/* ---- Clock ---------------------------------------------------------------------- */
/* Seconds on the monotonic clock (for durations). */
double tpk_now_seconds(void);
/* The median of v[0..n) (the mean of the middle two when n is even; 0 when
 * n is 0); sorts v, so v[0] is then the least. */
double tpk_median(double *v, int n);

/* ---- JSON ------------------------------------------------------------------------ */
/* Append text as a JSON string literal, quotes included: quotes,
 * backslashes and control characters are escaped, and bytes that are not
 * UTF-8 (which JSON parsers reject) become U+FFFD. */
void tpk_str_put_json(TpkStr *s, const char *text);

/* ---- Errors as values ---------------------------------------------------- */
typedef struct TpkError {
  TpkStatus code;
  char message[1024];
  int line, col; /* where in the source the problem is, when known (0: no place) */
} TpkError;

/* Set err (if non-NULL) and return code, so callers write
 * `return tpk_error(err, TPK_ERR_INVALID, "...")`. */
TpkStatus tpk_error(TpkError *err, TpkStatus code, const char *fmt, ...) TPK_PRINTF(3, 4);
/* The same, about a place in the source (line and col, 1-based; 0: none). */
TpkStatus tpk_error_at(TpkError *err, TpkStatus code, int line, int col, const char *fmt, ...) TPK_PRINTF(5, 6);

/* ---- Source excerpts ------------------------------------------------------
 * One look for every message about a place in a .tpk file (dsl/diag.c
 * renders the checker's; the runtime those of binding a kernel). */

/* The source line holding byte `offset` of text, indented, and a caret line
 * under [offset, offset+len). */
void tpk_render_excerpt(TpkStr *out, const char *text, size_t text_len, size_t offset, size_t len);
/* "file:line:col: error: message", then the excerpt with a caret at the
 * column; just the message when err has no line. */
void tpk_render_error_at(TpkStr *out, const char *file, const char *text, size_t text_len, const TpkError *err);

/* ---- Dtype facts ---------------------------------------------------------
 * One table (base.c) answers every question about a dtype; promotion rules
 * are documented in dsl/README.md. */
typedef struct TpkDTypeInfo {
  const char *name;
  unsigned bits;    /* storage bits (bool: 8) */
  bool is_float;
  bool is_signed;   /* integers; floats are signed */
  unsigned mantissa; /* floats: explicit mantissa bits */
  unsigned exponent; /* floats: exponent bits */
} TpkDTypeInfo;

const TpkDTypeInfo *tpk_dtype_info(TpkDType t);
bool tpk_dtype_is_float(TpkDType t);
bool tpk_dtype_is_int(TpkDType t); /* integers, not bool */
/* The type both a and b convert to without loss where one exists
 * (bf16 + f32 -> f32, i8 + u8 -> i16, i32 + bf16 -> bf16, f16 + bf16 -> f32);
 * TPK_DTYPE_COUNT when none does (u32 and a signed integer: tpk has no i64). */
TpkDType tpk_dtype_promote(TpkDType a, TpkDType b);
/* True when every value of `from` is representable in `to`, so an implicit
 * conversion is allowed (widening); narrowing needs an explicit cast. */
bool tpk_dtype_widens_to(TpkDType from, TpkDType to);

/* Small helpers used across the compiler. */
#define TPK_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
int64_t tpk_floordiv(int64_t a, int64_t b); /* b > 0 */
int64_t tpk_ceildiv(int64_t a, int64_t b);  /* b > 0 */
/* A byte count as people write it: "4096", "64K", "256M", "1G"; 0 when s is
 * NULL, malformed or not positive. */
int64_t tpk_parse_bytes(const char *s);

#endif
