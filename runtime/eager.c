/*
 * eager.c — eager streams (tpk.h, "Eager streams"): ATen ops submitted one
 * at a time on buffers, run in one of three modes.
 *
 * Every op is first looked up by its *key*: its name, its arguments and its
 * operands' dtypes, with sizes by their symbolic form — each distinct size
 * (above 1) of its operands is a symbol s0, s1, ... in order of appearance,
 * and an int argument of a SymInt parameter that equals a symbol (or a
 * product of two) is that symbol; an index (select's, a slice's start,
 * end and step: tpk_gb_index_args) is no size and stays a constant. The
 * unit under that key (units.c) holds
 * the op's one-op graph (ir/graph.h), built on the first sight of the key,
 * whose result types give the new output buffers' shapes at once. So an op
 * seen before builds nothing, and the same op at another sequence length
 * is the same key.
 *
 * Some ops do not build with every size symbolic: view(x: [S, 48], [S, 3,
 * 16]) needs 48 = 3 * 16. Sizes then follow a policy, tried in turn, each
 * a key of its own (a failed build is a unit too, so it is tried once):
 * every size a symbol; factored (the int arguments' values first, the
 * operands' sizes their products: 48 = s1*s2); one operand size constant,
 * each in turn (a split along a dim); only the sizes the int arguments
 * name; none. An int given for a Scalar parameter that is a size (a mean's
 * count of elements) is a rank-0 i32 input, like the floats below.
 *
 * A fused window, seen for the first time, is built with every size a
 * symbol of the window: it knows what an op alone does not (that a [B*S,
 * D] came from a [B, S, D]). Where an op does not build so, the window
 * keeps constant what that op kept alone, else the op's sizes but those
 * earlier ops settled as symbols, else all the op's sizes but one, each
 * in turn, until it builds past the op; the resolution is kept
 * under the window's symbolic key by the symbols' positions, so the window
 * at other sizes finds its program without building. Sizes are symbols by
 * value; a length that happens to equal another size (a sequence of 32
 * with heads of 32) keeps the symbols it had through the stream's hints
 * (see "hints").
 *
 * Scalars that change every step (a learning rate, Adam's bias
 * corrections) must not make every op or window new: a float argument of
 * an ATen `Scalar` parameter (add's alpha, mul's other, addcmul's value,
 * lerp's weight; a kernel's float scalars) is passed as a rank-0 f32 input
 * of the graph, not a constant; its value is no part of any key. Which
 * input it is (a window passes each distinct value once) is, as a size's
 * form: two scalars equal by chance keep the inputs a hint gave them. Floats of
 * `float` parameters (layer norm's eps) and ints (dims, integer scalars)
 * are constants, in the key. Which parameters take a rank-0 value, and
 * which take symbolic sizes, is learnt from the builder on the first sight
 * of an op's argument layout (the layout unit: names and kinds of its
 * arguments) by building the op with each candidate argument lifted.
 *
 *   debug   the op's graph, fused (TPK_FUSE_ALL: one ATen op is one
 *           kernel, as in PyTorch) and compiled, cached by key, runs at
 *           once; float outputs
 *           are checked for NaN and Inf, and any error names the op, its
 *           operands' shapes and dtypes and its position ("op #12");
 *   strict  the same program is queued on the stream's queue, one launch
 *           per op; a sync waits for the queue, and the first op whose
 *           launch did not finish is the one its error names. A small op
 *           (INLINE_BYTES of tensors) runs at once on the caller's thread
 *           when the queue is idle: handing it over costs more than running
 *           it; its error is kept for the next sync all the same;
 *   fused   the op is recorded in the stream's window (its arguments
 *           copied, with the sizes it kept constant alone and the ints it
 *           made symbols first). At a sync, or when the
 *           window holds WINDOW_OPS ops (or an op would take its graph past
 *           WINDOW_PARAMS parameters: window_params), the window's key is made from the
 *           records — its inputs' dtypes and shapes in the window's
 *           symbols, each op's name and arguments with tensors as window
 *           values, and which results are outputs — and looked up (with
 *           its resolution, see above); a miss builds
 *           the window as one graph (inputs: the buffers it read but did
 *           not produce, and the lifted scalars, one per distinct value;
 *           outputs: the buffers it
 *           produced that someone still holds: a buffer destroyed before
 *           the sync is not computed at all), fused (TPK_FUSE_ALL) and
 *           compiled (should fusion not take it, one cluster per op);
 *           then it runs as one launch.
 *
 * An op seen before at the same sizes skips all of that: the memo keeps,
 * by the op's exact signature, its program and what its launch takes
 * (debug, strict), or what recording it takes (fused; see "the memo"). A
 * fused window's entries are kept in the cache folder, so a new process's
 * first step records its ops from them too (see "the memo in the cache
 * folder").
 *
 * Pending buffers. An op's outputs are new buffers, made at once (a fused
 * op's get their memory only when a window computes them: make_outputs);
 * their bytes are marked pending (device.h: the storage names the stream, which
 * it holds) until the work writing them has run, and the buffers the
 * pending work reads are marked read. Reading or writing a buffer's bytes
 * from outside (tpk_buffer_read / _write / _data, a kernel launch, another
 * stream's op) settles it first: the stream whose work writes it syncs, and
 * before a write, the streams whose work reads it. A stream's lock covers
 * its window and queue; no stream's lock is held while another stream is
 * synced, so two streams on two threads cannot deadlock.
 *
 * Lifetimes. A stream holds its context; the window holds the buffers it
 * reads and produces until it has run (destroying them meanwhile is safe);
 * a pending mark holds the stream. tpk_stream_destroy syncs. The context's
 * end drops the work of its streams: the memory it would write goes with
 * the context, so nobody could see it run (a strict stream's queue still
 * runs what was queued); ops on the stream are refused afterwards.
 */
#include "runtime/device.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/prims.h"
#include "ir/graph.h"

enum {
  WINDOW_OPS = 512, /* a fused window runs when it holds this many ops */
  WINDOW_PARAMS = 256, /* ... or before its graph's kernel would take more parameters (as tpk_kernel_launch) */
  MAX_ARGS = 24,    /* arguments of one op */
  MAX_OUTS = 16,    /* results of one op */
  MAX_OPERANDS = 64, /* tensors of one op */
  MAX_SYMS = 64,
  MAX_KEY = 1 << 16 /* words of a window's key */
};

/* What a unit's key starts with (beyond TPK_UNIT_KEY_WINDOW: eager's own). */
enum { KEY_LAYOUT = 101, KEY_OPTYPE, KEY_OPPROG, KEY_OPMEMO, KEY_WARM };

/* ---- keys ------------------------------------------------------------------------ */

/* A key's words; besides, its structure (a hash of every word but the
 * sizes' forms) and the sizes' forms in order, which an earlier key of the
 * same structure hands on as a hint (see "hints"). */
typedef struct Key {
  uint64_t *w;
  int n, cap;
  bool failed;
  uint64_t structure;
  uint64_t *sizes;
  int nsizes, capsizes;
} Key;

static bool key_grow(uint64_t **w, int *cap, int n) {
  if (n < *cap) return true;
  int more = *cap ? 2 * *cap : 256;
  uint64_t *bigger = more <= MAX_KEY ? realloc(*w, sizeof *bigger * (size_t)more) : NULL;
  if (!bigger) return false;
  *w = bigger;
  *cap = more;
  return true;
}

static void key_word(Key *k, uint64_t word) {
  if (!key_grow(&k->w, &k->cap, k->n)) k->failed = true;
  else k->w[k->n++] = word;
}

static void key_put(Key *k, uint64_t word) {
  key_word(k, word);
  k->structure = tpk_hash_mix(k->structure ^ word);
}

/* A size's form (dim_word, int_form): in the key, but not its structure. */
static void key_size(Key *k, uint64_t word) {
  key_word(k, word);
  k->structure = tpk_hash_mix(k->structure ^ UINT64_C(0x5153));
  if (!key_grow(&k->sizes, &k->capsizes, k->nsizes)) k->failed = true;
  else k->sizes[k->nsizes++] = word;
}

static void key_reset(Key *k) {
  k->n = k->nsizes = 0;
  k->structure = 0;
  k->failed = false;
}

/* A string, exactly: its length, then its bytes eight to a word. */
static void key_str(Key *k, const char *s) {
  size_t len = s ? strlen(s) : (size_t)-1;
  key_put(k, (uint64_t)len);
  for (size_t i = 0; s && i < len; i += 8) {
    uint64_t w = 0;
    memcpy(&w, s + i, len - i < 8 ? len - i : 8);
    key_put(k, w);
  }
}

static void key_free(Key *k) {
  free(k->w);
  free(k->sizes);
  *k = (Key){0};
}

/* ---- sizes by their symbolic form ----------------------------------------------- */

/* s0, s1, ...: each distinct size above 1, in order of appearance, but
 * the sizes kept constant. With `factor`, a size that is the product of
 * two symbols is that product, not a symbol of its own. */
typedef struct Syms {
  int n;
  int64_t v[MAX_SYMS];
  int nconst;
  int64_t consts[MAX_SYMS];
  bool factor;
  bool grow; /* an int argument matching no symbol becomes one (int_form) */
  /* A hint: the sizes' forms of an earlier key of the same structure, in
   * order, each taken when it gives the size (hinted). */
  const uint64_t *hint;
  int nhint, hint_at;
  bool hint_missed;
} Syms;

static bool is_const(const Syms *t, int64_t v) {
  for (int i = 0; i < t->nconst; i++)
    if (t->consts[i] == v) return true;
  return false;
}

static void add_const(Syms *t, int64_t v) {
  if (v > 1 && !is_const(t, v) && t->nconst < MAX_SYMS) t->consts[t->nconst++] = v;
}

static int sym_find(const Syms *t, int64_t v) {
  for (int i = 0; i < t->n; i++)
    if (t->v[i] == v) return i;
  return -1;
}

/* v a symbol of t (from the start, before any dims). */
static void add_seed(Syms *t, int64_t v) {
  if (v > 1 && sym_find(t, v) < 0 && t->n < MAX_SYMS) t->v[t->n++] = v;
}

/* A product of two symbols equal to v: its word, or 0. */
static uint64_t product_word(const Syms *t, int64_t v) {
  for (int a = 0; a < t->n; a++)
    for (int b = a; b < t->n; b++)
      if (t->v[a] * t->v[b] == v && v / t->v[a] == t->v[b]) return ((uint64_t)a << 16 | (uint64_t)b) << 2 | 2;
  return 0;
}

/* The hint's next form, when it gives size v (a symbol above 1: the next
 * new one, or one with v's value; a product of two; a symbol times a size
 * kept constant, but not for a dim; the constant v). Sizes that happen to
 * be equal now keep the symbols they had: the code built for that key
 * serves any values of its symbols. Once a form does not give its size,
 * the hint is dropped (the caller keys by value). */
static bool hinted(Syms *t, int64_t v, bool dim, uint64_t *word) {
  if (!t->hint || t->hint_missed) return false;
  uint64_t w = t->hint_at < t->nhint ? t->hint[t->hint_at++] : UINT64_MAX;
  int hi = (int)(w >> 18), lo = (int)(w >> 2 & 0xffff), k = (int)(w >> 2);
  bool ok = false;
  switch (w & 3) {
  case 0: ok = (int64_t)(w >> 2) == v; break;
  case 1:
    if (k == t->n && v > 1 && t->n < MAX_SYMS) t->v[t->n++] = v, ok = true;
    else ok = k < t->n && t->v[k] == v && v > 1;
    break;
  case 2: ok = hi < t->n && lo < t->n && t->v[hi] * t->v[lo] == v && t->v[hi] > 1 && t->v[lo] > 1; break;
  case 3: ok = !dim && hi < t->nconst && lo < t->n && t->v[lo] * t->consts[hi] == v && t->v[lo] > 1; break;
  }
  if (ok && w != UINT64_MAX) *word = w;
  else t->hint_missed = true;
  return !t->hint_missed;
}

/* A tensor's dim as a word (low two bits: 0 a constant, 1 a symbol, 2 a
 * product of two): a constant (0 or 1, a size kept constant, any size when
 * the table is full) or a symbol, added when new. */
static uint64_t dim_word(Syms *t, int64_t v) {
  uint64_t hint;
  if (hinted(t, v, true, &hint)) return hint;
  if (v <= 1 || is_const(t, v)) return (uint64_t)v << 2;
  int k = sym_find(t, v);
  uint64_t product = k < 0 && t->factor ? product_word(t, v) : 0;
  if (product) return product;
  if (k < 0 && t->n < MAX_SYMS) {
    k = t->n;
    t->v[t->n++] = v;
  }
  return k >= 0 ? (uint64_t)k << 2 | 1 : (uint64_t)v << 2;
}

/* The text of dim word w in a builder ("s3", "s0*s1", "1"). */
static void dim_text(uint64_t w, char *buf, size_t n) {
  switch (w & 3) {
  case 1: snprintf(buf, n, "s%d", (int)(w >> 2)); break;
  case 2: snprintf(buf, n, "s%d*s%d", (int)(w >> 18), (int)(w >> 2 & 0xffff)); break;
  default: snprintf(buf, n, "%" PRId64, (int64_t)(w >> 2));
  }
}

/* An int argument of a SymInt parameter by its symbolic form: a symbol,
 * a product of two, or (growing the table) a new symbol; itself when it
 * is 0, 1, negative or kept constant. Writes the text ("s0*s2") into buf,
 * or "" for a constant; returns the key word of its form. */
static uint64_t int_form(Syms *t, int64_t v, char *buf, size_t n) {
  buf[0] = 0;
  uint64_t hint;
  if (hinted(t, v, false, &hint)) {
    if ((hint & 3) == 3) snprintf(buf, n, "s%d*%" PRId64, (int)(hint >> 2 & 0xffff), t->consts[hint >> 18]);
    else if (hint & 3) dim_text(hint, buf, n);
    return hint;
  }
  if (v <= 1 || is_const(t, v)) return (uint64_t)v << 2;
  int k = sym_find(t, v);
  uint64_t w = k >= 0 ? (uint64_t)k << 2 | 1 : product_word(t, v);
  for (k = 0; !w && k < t->n; k++) /* a symbol times a size kept constant: [B*S] of [B, S] when B is */
    for (int c = 0; c < t->nconst; c++)
      if (t->v[k] * t->consts[c] == v && v / t->v[k] == t->consts[c]) {
        snprintf(buf, n, "s%d*%" PRId64, k, t->consts[c]);
        return ((uint64_t)c << 16 | (uint64_t)k) << 2 | 3;
      }
  if (!w && t->grow && t->n < MAX_SYMS) {
    t->v[t->n] = v;
    w = (uint64_t)t->n++ << 2 | 1;
  }
  if (w) dim_text(w, buf, n);
  return w ? w : (uint64_t)v << 2;
}

/* Is r a product of at most two of the sizes kept constant (1: none)? */
static bool const_product(const Syms *t, int64_t r) {
  if (r == 1) return true;
  for (int a = 0; a < t->nconst; a++) {
    if (t->consts[a] == r) return true;
    for (int b = a; b < t->nconst; b++)
      if (t->consts[a] * t->consts[b] == r && r / t->consts[a] == t->consts[b]) return true;
  }
  return false;
}

/* Is v a size: the product of one, two or three symbols, times sizes kept
 * constant? (An int given for a Scalar that is, say, a mean's count of
 * elements: it changes with the sizes.) */
static bool size_like(const Syms *t, int64_t v) {
  int n = t->n < 16 ? t->n : 16;
  for (int a = 0; a < n; a++)
    for (int b = a; b <= n; b++)
      for (int c = b; c <= n; c++) {
        int64_t x = t->v[a];
        if (b < n && __builtin_mul_overflow(x, t->v[b], &x)) continue;
        if (c < n && (b == n || __builtin_mul_overflow(x, t->v[c], &x))) continue;
        if (x > 0 && v % x == 0 && const_product(t, v / x)) return true;
      }
  return false;
}

/* A lifted scalar's input in the key: a size's form (v << 2 | 2: input
 * v), so that which input it is — a window passes each distinct value
 * once (flush_scalar), so two scalars equal by chance share one — is no
 * part of the key's structure and a hint gives it (hinted_scalar). */
static uint64_t scalar_word(int id) { return (uint64_t)id << 2 | 2; }

/* The input the hint's next form names for a lifted scalar (-1: no hint,
 * or its form is no lifted scalar's: missed). */
static int hinted_scalar(Syms *t) {
  if (!t->hint || t->hint_missed) return -1;
  uint64_t w = t->hint_at < t->nhint ? t->hint[t->hint_at++] : UINT64_MAX;
  if ((w & 3) == 2 && w != UINT64_MAX) return (int)(w >> 2);
  t->hint_missed = true;
  return -1;
}

/* An int given for a Scalar parameter: lifted to a rank-0 input when it is
 * a size (probe: always), else the constant itself; as the hint has it
 * where the hint's form fits v (lifted always does: which input then in
 * *hinted, else -1). */
static bool scalar_lifted(Syms *t, int64_t v, bool probe, int *hinted) {
  *hinted = -1;
  if (t->hint && !t->hint_missed) {
    uint64_t w = t->hint_at < t->nhint ? t->hint[t->hint_at++] : UINT64_MAX;
    if ((w & 3) == 2 && w != UINT64_MAX) {
      *hinted = (int)(w >> 2);
      return true;
    }
    if (w == (uint64_t)v << 2) return false;
    t->hint_missed = true;
  }
  return probe || size_like(t, v);
}

static bool sym_lookup(void *ctx, const char *sym, int64_t *value) {
  const Syms *t = ctx;
  char *end;
  long k = sym[0] == 's' ? strtol(sym + 1, &end, 10) : -1;
  if (k < 0 || k >= t->n || *end) return false;
  *value = t->v[k];
  return true;
}

/* The values of k's shape symbols (s0, s1, ...) in t, for a launch: an
 * input's dims may not bind them alone (a factored view's [s1*s2]). */
static int launch_syms(const TpkKernel *k, const Syms *t, TpkNamedInt *out) {
  int n = 0;
  for (int i = 0; i < tpk_kernel_symbol_count(k) && n < MAX_SYMS; i++) {
    const char *name = tpk_kernel_symbol_name(k, i);
    int64_t v;
    if (sym_lookup((void *)t, name, &v)) out[n++] = (TpkNamedInt){name, v};
  }
  return n;
}

/* ---- hints ---------------------------------------------------------------------------
 *
 * Sizes are symbols by value, so a length that happens to equal another
 * size (a sequence of 32 with heads of 32) would be another pattern of
 * sizes, another key, and a compile. A stream keeps, per structure of key
 * (every word but the sizes' forms: Key.structure), the sizes' forms of the
 * last few keys of that structure it made by value (one op may come in
 * several patterns in a step). A key whose forms by value are none of them
 * is made again taking a hint's forms where they give its sizes (hinted):
 * that is an earlier key, found in the cache. Where no hint gives them (a
 * size now 1, a constant changed), the key by value stands and becomes a
 * hint. At most MAX_HINTS structures: past that the table starts again. */
typedef struct Hint {
  uint64_t structure;
  struct Hint *next; /* older, of the same structure */
  int n;
  uint64_t sizes[]; /* its key's sizes' forms */
} Hint;

enum { MAX_HINTS = 4096, HINTS_PER_STRUCTURE = 4 };

typedef struct Hints {
  TpkPtrMap map; /* structure | 1 -> its newest Hint */
} Hints;

static const void *hint_slot(uint64_t structure) { return (const void *)(uintptr_t)(structure | 1); }

/* The newest hint for k's structure (NULL: none). */
static Hint *hint_first(const Hints *h, const Key *k) {
  void *e;
  if (!tpk_ptrmap_get(&h->map, hint_slot(k->structure), &e) || ((Hint *)e)->structure != k->structure) return NULL;
  return e;
}

/* Are k's sizes the forms of one of its structure's hints already? */
static bool hints_have(const Hints *h, const Key *k) {
  for (const Hint *e = hint_first(h, k); e; e = e->next)
    if (e->n == k->nsizes && (!e->n || memcmp(e->sizes, k->sizes, sizeof *e->sizes * (size_t)e->n) == 0)) return true;
  return false;
}

static void hint_list_free(Hint *e) {
  for (Hint *next; e; e = next) {
    next = e->next;
    free(e);
  }
}

static void hints_free(Hints *h) {
  for (size_t i = 0; i < h->map.cap; i++)
    if (h->map.keys[i]) hint_list_free(h->map.vals[i]);
  tpk_ptrmap_free(&h->map);
}

/* k's sizes, made by value, as the newest hint of its structure. */
static void hint_keep(Hints *h, const Key *k) {
  if (k->failed) return;
  Hint *e = malloc(sizeof *e + sizeof *e->sizes * (size_t)k->nsizes);
  if (!e) return; /* no hint: keys by value */
  e->structure = k->structure;
  e->n = k->nsizes;
  if (k->nsizes) memcpy(e->sizes, k->sizes, sizeof *e->sizes * (size_t)k->nsizes); /* none: k->sizes is NULL */
  void *old = NULL;
  bool had = tpk_ptrmap_get(&h->map, hint_slot(k->structure), &old);
  if (!had && h->map.count >= MAX_HINTS) hints_free(h);
  e->next = had && ((Hint *)old)->structure == k->structure ? old : NULL;
  if (!tpk_ptrmap_put(&h->map, hint_slot(k->structure), e)) {
    free(e);
    return;
  }
  if (had && !e->next) hint_list_free(old); /* another structure's, in the same slot */
  int n = 1;
  for (Hint *x = e; x; x = x->next, n++)
    if (n == HINTS_PER_STRUCTURE) {
      hint_list_free(x->next);
      x->next = NULL;
    }
}

/* A key made by value (hint NULL) or taking a hint's forms (then whether
 * it missed, into *missed). */
typedef TpkStatus (*KeyMaker)(void *ctx, const Hint *hint, Key *key, bool *missed);

/* The key by value; when its sizes are no hint's of its structure, by the
 * first hint that gives them; else by value, kept as a hint. */
static TpkStatus key_hinted(Hints *h, KeyMaker make, void *ctx, Key *key) {
  bool missed = false;
  TpkStatus st = make(ctx, NULL, key, &missed);
  if (st != TPK_OK || hints_have(h, key)) return st;
  const Hint *first = hint_first(h, key);
  for (const Hint *e = first; e; e = e->next) {
    st = make(ctx, e, key, &missed);
    if (st != TPK_OK || !missed) return st;
  }
  if (first) st = make(ctx, NULL, key, &missed);
  if (st == TPK_OK) hint_keep(h, key);
  return st;
}

/* t takes its sizes' forms from e (NULL: by value). */
static void syms_hint(Syms *t, const Hint *e) {
  t->hint = e ? e->sizes : NULL;
  t->nhint = e ? e->n : 0;
  t->hint_at = 0;
  t->hint_missed = false;
}

/* ---- arguments as the builder takes them ------------------------------------------ */

/* Which arguments of an op's layout (its arguments' names and kinds) the
 * builder takes lifted: floats as rank-0 values, ints as symbolic sizes
 * (lift); ints as rank-0 values (value: a Scalar parameter). */
typedef struct Layout {
  bool lift[MAX_ARGS];
  bool value[MAX_ARGS];
} Layout;

/* An op's arguments rewritten for a builder: tensors as value ids, lifted
 * floats (and ints of Scalar parameters that are sizes) as ids of rank-0
 * inputs, ints of SymInt parameters in the sizes' symbolic form; strings and
 * lists copied into `arena`. The ids come from the Binder; the key words of
 * the arguments go to `key`. */
typedef struct Binder {
  int (*tensor)(void *ctx, TpkBuffer *b); /* the value id of a tensor operand (-1: failed) */
  /* The value id of the rank-0 input holding v: input `want` when it can
   * be (-2 when not), or as the binder chooses (want -1); -1: failed. */
  int (*scalar)(void *ctx, TpkDType dt, double v, int want);
  void *ctx;
  Syms *syms;
  TpkArena *arena;
  bool probe; /* an int lifted is lifted even when it is a constant (learning the layout) */
} Binder;

/* The lifted scalar v's input, the one the hint gave (want) where it can
 * be, as a size's form in the key; -1: out of memory. */
static int bind_scalar(const Binder *b, TpkDType dt, double v, int want, Key *key) {
  int id = want >= 0 ? b->scalar(b->ctx, dt, v, want) : -2;
  if (id == -2) {
    if (want >= 0) b->syms->hint_missed = true;
    id = b->scalar(b->ctx, dt, v, -1);
  }
  if (id >= 0) key_size(key, scalar_word(id));
  return id;
}

static TpkStatus bind_args(const TpkArg *in, int nargs, const Layout *lay, const Binder *b, TpkArg *out, Key *key) {
  for (int i = 0; i < nargs; i++) {
    const TpkArg *a = &in[i];
    TpkArg *o = &out[i];
    *o = (TpkArg){.name = a->name ? tpk_arena_strdup(b->arena, a->name) : NULL, .kind = a->kind};
    key_str(key, a->name);
    key_put(key, (uint64_t)a->kind);
    bool lift = lay && lay->lift[i];
    switch (a->kind) {
    case TPK_ARG_NONE: break;
    case TPK_ARG_VALUE:
      if ((o->value = b->tensor(b->ctx, a->buffer)) < 0) return TPK_ERR_INVALID;
      key_put(key, (uint64_t)o->value);
      break;
    case TPK_ARG_VALUES: {
      int *ids = tpk_arena_alloc(b->arena, sizeof *ids * (size_t)(a->n + 1));
      if (!ids) return TPK_ERR_NOMEM;
      key_put(key, (uint64_t)a->n);
      for (int j = 0; j < a->n; j++) {
        if ((ids[j] = b->tensor(b->ctx, a->buffers ? a->buffers[j] : NULL)) < 0) return TPK_ERR_INVALID;
        key_put(key, (uint64_t)ids[j]);
      }
      o->n = a->n;
      o->values = ids;
      break;
    }
    case TPK_ARG_FLOAT:
      if (lift) {
        o->kind = TPK_ARG_VALUE;
        /* a lifted scalar: its value is no part of the key, which input it is a size's form */
        if ((o->value = bind_scalar(b, TPK_F32, a->f, hinted_scalar(b->syms), key)) < 0) return TPK_ERR_NOMEM;
      } else {
        o->f = a->f;
        uint64_t bits;
        memcpy(&bits, &a->f, sizeof bits);
        key_put(key, bits);
      }
      break;
    case TPK_ARG_INT:
    case TPK_ARG_BOOL:
      o->i = a->i;
      if (a->kind == TPK_ARG_INT && lay && lay->value[i]) {
        int want;
        if (scalar_lifted(b->syms, a->i, b->probe, &want)) { /* a size for a Scalar: an input */
          o->kind = TPK_ARG_VALUE;
          if ((o->value = bind_scalar(b, TPK_I32, (double)a->i, want, key)) < 0) return TPK_ERR_NOMEM;
        } else {
          key_size(key, (uint64_t)a->i << 2);
        }
      } else if (a->kind == TPK_ARG_INT && lift) {
        char text[64];
        key_size(key, int_form(b->syms, a->i, text, sizeof text));
        if (!text[0] && b->probe) snprintf(text, sizeof text, "%" PRId64, a->i);
        if (text[0] && !(o->sym = tpk_arena_strdup(b->arena, text))) return TPK_ERR_NOMEM;
      } else {
        key_put(key, (uint64_t)a->i);
      }
      break;
    case TPK_ARG_INTS: {
      int64_t *ints = tpk_arena_alloc(b->arena, sizeof *ints * (size_t)(a->n + 1));
      const char **syms = lift ? tpk_arena_alloc(b->arena, sizeof *syms * (size_t)(a->n + 1)) : NULL;
      if (!ints || (lift && !syms)) return TPK_ERR_NOMEM;
      key_put(key, (uint64_t)a->n);
      for (int j = 0; j < a->n; j++) {
        ints[j] = a->ints[j];
        if (!syms) {
          key_put(key, (uint64_t)a->ints[j]);
          continue;
        }
        char text[64];
        key_size(key, int_form(b->syms, a->ints[j], text, sizeof text));
        if (text[0] && !(syms[j] = tpk_arena_strdup(b->arena, text))) return TPK_ERR_NOMEM;
      }
      o->n = a->n;
      o->ints = ints;
      o->syms = syms;
      break;
    }
    case TPK_ARG_DTYPE:
      o->dtype = a->dtype;
      key_put(key, (uint64_t)a->dtype);
      break;
    case TPK_ARG_STR:
      if (a->str && !(o->str = tpk_arena_strdup(b->arena, a->str))) return TPK_ERR_NOMEM;
      key_str(key, a->str);
      break;
    }
  }
  return TPK_OK;
}

/* Did bind_args make argument `given` a lifted scalar (bound: what it made of it)? */
static bool lifted_scalar(const TpkArg *given, const TpkArg *bound) {
  return (given->kind == TPK_ARG_FLOAT || given->kind == TPK_ARG_INT) && bound->kind == TPK_ARG_VALUE;
}

/* ---- an op --------------------------------------------------------------------------- */

/* What one submitted op is: the ATen op or kernel, its arguments, and its
 * operands (the buffers its VALUE and VALUES arguments name, in order). */
typedef struct Op {
  TpkContext *ctx;    /* the stream's: its standard kernels are what ops call */
  const char *name;   /* the ATen op, or NULL for: */
  TpkKernel *kernel;  /* a kernel call */
  uint64_t kernel_id[3]; /* its IR's hash and name */
  const TpkArg *args;
  int nargs;
  TpkBuffer *operands[MAX_OPERANDS];
  int noperands;
  int64_t position;
  const Hint *hint; /* the sizes' forms its key took (find_op_graph), NULL: by value */
} Op;

/* A builder that finds the standard kernels the ops that call one (SDPA:
 * flash attention) need in the stream's context, which holds them. */
static TpkGraphBuilder *new_builder(TpkContext *ctx, const char *name) {
  TpkGraphBuilder *gb = tpk_gb_new(name);
  if (gb) tpk_gb_set_kernel_lookup(gb, tpk_std_kernel_lookup, ctx);
  return gb;
}

/* How an op's sizes are keyed and built, tried in this order: every size
 * above 1 a symbol; the int arguments' values first, the operands' sizes
 * products of them where they are (a view of [B*S, D] to [B, S, D]); one
 * operand size constant, each in turn (a split along a dim); only the
 * sizes its int arguments name (as themselves or a factor of a product of
 * two); none. */
enum { SIZES_SYMBOLIC, SIZES_FACTORED, SIZES_ONE_CONSTANT };
typedef int Policy; /* SIZES_ONE_CONSTANT + j: the op's j-th size; then named, then constant */

/* The distinct operand sizes above 1 of op, in order. */
static int op_sizes(const Op *op, int64_t *sizes);

static int npolicies(const Op *op) {
  int64_t sizes[MAX_SYMS];
  return SIZES_ONE_CONSTANT + op_sizes(op, sizes) + 2;
}

/* "add", "kernel 'softmax'", for messages. */
static const char *op_label(const Op *op, char *buf, size_t n) {
  if (op->name) return op->name;
  snprintf(buf, n, "kernel '%s'", tpk_kernel_ir(op->kernel)->name);
  return buf;
}

/* "op #12 'add' (f32[4,8], f32[8])" */
static void op_describe(const Op *op, TpkStr *s) {
  char label[160];
  tpk_str_printf(s, "op #%" PRId64 " '%s' (", op->position, op_label(op, label, sizeof label));
  for (int i = 0; i < op->noperands; i++) {
    const TpkBuffer *b = op->operands[i];
    tpk_str_printf(s, "%s%s[", i ? ", " : "", tpk_dtype_name(b->dtype));
    for (int d = 0; d < b->rank; d++) tpk_str_printf(s, "%s%" PRId64, d ? "," : "", b->shape[d]);
    tpk_str_puts(s, "]");
  }
  tpk_str_puts(s, ")");
}

/* Fail with the op's description before the message. */
static TpkStatus op_fail(const Op *op, TpkStatus st, const char *message) {
  TpkStr s = {0};
  op_describe(op, &s);
  tpk_runtime_fail(st, "%s: %s", s.data ? s.data : "op", message);
  tpk_str_free(&s);
  return st;
}

/* The words of the op itself: its name (or kernel), its arguments' names
 * and kinds. */
static void layout_key(const Op *op, Key *k) {
  key_put(k, KEY_LAYOUT);
  if (op->name) key_str(k, op->name);
  else for (int i = 0; i < 3; i++) key_put(k, op->kernel_id[i]);
  key_put(k, (uint64_t)op->nargs);
  for (int i = 0; i < op->nargs; i++) {
    key_str(k, op->args[i].name);
    key_put(k, (uint64_t)op->args[i].kind);
    if (op->args[i].kind == TPK_ARG_VALUES || op->args[i].kind == TPK_ARG_INTS) key_put(k, (uint64_t)op->args[i].n);
  }
}

static int op_sizes(const Op *op, int64_t *sizes) {
  int n = 0;
  for (int i = 0; i < op->noperands; i++)
    for (int d = 0; d < op->operands[i]->rank; d++) {
      int64_t v = op->operands[i]->shape[d];
      bool seen = v <= 1;
      for (int j = 0; j < n && !seen; j++) seen = sizes[j] == v;
      if (!seen && n < MAX_SYMS) sizes[n++] = v;
    }
  return n;
}

/* Factored: the symbols its int arguments give first, each a size's form
 * in the key (a hint numbers them as it numbered them). */
static void op_seeds(const Op *op, const Layout *lay, Syms *t, Key *k) {
  for (int i = 0; i < op->nargs; i++) {
    const TpkArg *a = &op->args[i];
    if (!lay->lift[i] || (a->kind != TPK_ARG_INT && a->kind != TPK_ARG_INTS)) continue;
    for (int e = 0; e < (a->kind == TPK_ARG_INT ? 1 : a->n); e++) {
      uint64_t w = dim_word(t, a->kind == TPK_ARG_INT ? a->i : a->ints[e]);
      if (k) key_size(k, w);
    }
  }
  t->factor = true;
}

/* The sizes an op keeps constant under policy p (into t->consts). */
static void op_consts(const Op *op, const Layout *lay, Policy p, Syms *t) {
  *t = (Syms){0};
  if (p == SIZES_SYMBOLIC || p == SIZES_FACTORED) return;
  int64_t sizes[MAX_SYMS];
  int n = op_sizes(op, sizes);
  if (p < SIZES_ONE_CONSTANT + n) {
    add_const(t, sizes[p - SIZES_ONE_CONSTANT]);
    return;
  }
  bool named[MAX_SYMS] = {0};
  for (int i = 0; p == SIZES_ONE_CONSTANT + n && i < op->nargs; i++) {
    const TpkArg *a = &op->args[i];
    if (!lay->lift[i] || (a->kind != TPK_ARG_INT && a->kind != TPK_ARG_INTS)) continue;
    for (int e = 0; e < (a->kind == TPK_ARG_INT ? 1 : a->n); e++) {
      int64_t x = a->kind == TPK_ARG_INT ? a->i : a->ints[e];
      for (int u = 0; u < n; u++) {
        named[u] |= sizes[u] == x;
        for (int w = 0; w < n; w++)
          if (sizes[u] * sizes[w] == x) named[u] = named[w] = true;
      }
    }
  }
  for (int u = 0; u < n; u++)
    if (!named[u]) add_const(t, sizes[u]);
}

static int operand_id(void *ctx, TpkBuffer *b) {
  const Op *op = ctx;
  for (int i = 0; i < op->noperands; i++)
    if (op->operands[i] == b) return i;
  return -1;
}

/* An op bound under a policy: its symbols (its operands' dims, then what
 * its ints added), its operands' dims as words, its arguments for a
 * builder, its lifted scalars in order; with a builder, its inputs made
 * (the operands, then one rank-0 input per scalar). */
typedef struct OpBound {
  const Op *op;
  Policy policy;
  Syms syms;
  uint64_t dims[MAX_OPERANDS][TPK_MAX_RANK];
  TpkArg args[MAX_ARGS];
  int nscalars;
  TpkDType scalar_dtype[MAX_ARGS];
  double scalar[MAX_ARGS];
  TpkArena arena; /* the arguments' strings and lists */
  TpkGraphBuilder *gb; /* NULL: no inputs made */
  TpkValue *values[MAX_OPERANDS + MAX_ARGS];
  TpkError *err;
} OpBound;

static int bound_tensor(void *ctx, TpkBuffer *b) { return operand_id((void *)((OpBound *)ctx)->op, b); }

static int bound_scalar(void *ctx, TpkDType dt, double v, int want) {
  OpBound *ob = ctx;
  if (ob->nscalars == MAX_ARGS) return -1;
  int id = ob->op->noperands + ob->nscalars;
  if (want >= 0 && want != id) return -2;
  if (ob->gb && tpk_gb_input(ob->gb, dt, 0, NULL, &ob->values[id], ob->err) != TPK_OK) return -1;
  ob->scalar_dtype[ob->nscalars] = dt;
  ob->scalar[ob->nscalars++] = v;
  return id;
}

/* Bind op under policy p (probe: lift every argument the layout names).
 * The key words go to k (may be NULL). Free ob with op_unbind. */
static TpkStatus op_bind(const Op *op, const Layout *lay, Policy p, bool probe, OpBound *ob, Key *k) {
  TpkGraphBuilder *gb = ob->gb;
  TpkError *err = ob->err;
  memset(ob, 0, sizeof *ob);
  ob->op = op;
  ob->gb = gb;
  ob->err = err;
  tpk_arena_init(&ob->arena, 0);
  op_consts(op, lay, p, &ob->syms);
  syms_hint(&ob->syms, op->hint);
  if (p == SIZES_FACTORED) op_seeds(op, lay, &ob->syms, k);
  ob->policy = p;
  /* ints matching no size become symbols only when every size is one (an
   * expand to [S, D] of a scalar); else they stay themselves */
  ob->syms.grow = p == SIZES_SYMBOLIC;
  for (int i = 0; i < op->noperands; i++) {
    const TpkBuffer *b = op->operands[i];
    if (k) {
      key_put(k, (uint64_t)b->dtype);
      key_put(k, (uint64_t)b->rank);
    }
    for (int d = 0; d < b->rank; d++) {
      ob->dims[i][d] = dim_word(&ob->syms, b->shape[d]);
      if (k) key_size(k, ob->dims[i][d]);
    }
  }
  for (int i = 0; gb && i < op->noperands; i++) {
    const TpkBuffer *b = op->operands[i];
    const TpkDim *dims[TPK_MAX_RANK];
    for (int d = 0; d < b->rank; d++) {
      char text[40];
      dim_text(ob->dims[i][d], text, sizeof text);
      if (!(dims[d] = tpk_gb_dim(gb, text, err))) return err->code;
    }
    if (tpk_gb_input(gb, b->dtype, b->rank, dims, &ob->values[i], err) != TPK_OK) return err->code;
  }
  Key scratch = {0};
  Binder binder = {bound_tensor, bound_scalar, ob, &ob->syms, &ob->arena, probe};
  TpkStatus st = bind_args(op->args, op->nargs, lay, &binder, ob->args, k ? k : &scratch);
  key_free(&scratch);
  ob->syms.hint = NULL; /* the slot's words may go: only hint_missed stays */
  if (st == TPK_OK && k && k->failed) st = TPK_ERR_NOMEM;
  if (st != TPK_OK && gb && err->code) return err->code;
  return st == TPK_OK ? TPK_OK : gb ? tpk_error(err, st, "out of memory") : tpk_runtime_fail(st, "out of memory");
}

static void op_unbind(OpBound *ob) { tpk_arena_free(&ob->arena); }

/* The op's key words under policy p, its layout's lifts applied (with
 * op->hint: whether the hint missed, into *missed). */
static TpkStatus op_key(const Op *op, const Layout *lay, Policy p, Key *k, bool *missed) {
  key_put(k, KEY_OPTYPE);
  key_put(k, (uint64_t)p);
  layout_key(op, k);
  OpBound *ob = calloc(1, sizeof *ob);
  if (!ob) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  TpkStatus st = op_bind(op, lay, p, false, ob, k);
  *missed = ob->syms.hint_missed;
  op_unbind(ob);
  free(ob);
  return st;
}

/* The op built alone under policy p, with lay's arguments lifted (probe:
 * every one the layout names): its results (NULL: one ATen leaves
 * undefined) are the graph's outputs. */
static TpkStatus build_alone(const Op *op, const Layout *lay, Policy p, bool probe, TpkGraphBuilder **gbp,
                             const TpkType **types, int *ntypes, TpkError *err) {
  *ntypes = 0;
  TpkGraphBuilder *gb = *gbp = new_builder(op->ctx, op->name ? "eager_op" : "eager_call");
  OpBound *ob = gb ? calloc(1, sizeof *ob) : NULL;
  if (!ob) return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  ob->gb = gb;
  ob->err = err;
  TpkStatus st = op_bind(op, lay, p, probe, ob, NULL);
  TpkValue *outs[MAX_OUTS];
  int nouts = 0, nvalues = op->noperands + ob->nscalars;
  if (st == TPK_OK && op->name) st = tpk_gb_op(gb, op->name, ob->args, op->nargs, ob->values, nvalues, outs, MAX_OUTS, &nouts, err);
  else if (st == TPK_OK) st = tpk_gb_call(gb, tpk_kernel_ir(op->kernel), ob->args, op->nargs, ob->values, nvalues, outs, MAX_OUTS, &nouts, err);
  op_unbind(ob);
  free(ob);
  if (st == TPK_OK && nouts > MAX_OUTS) st = tpk_error(err, TPK_ERR_UNSUPPORTED, "more than %d results", MAX_OUTS);
  for (int i = 0; st == TPK_OK && i < nouts; i++) {
    types[i] = outs[i] ? outs[i]->type : NULL;
    if (outs[i]) st = tpk_gb_output(gb, outs[i], err);
  }
  if (st == TPK_OK) *ntypes = nouts;
  return st;
}

static void layout_free(void *p) { free(p); }

/* The layout of op's arguments: built once with nothing lifted and its
 * sizes constant (an error there is the op's), then once per float or int
 * argument lifted alone (an int given as a symbolic size). */
static TpkStatus find_layout(TpkContext *ctx, const Op *op, TpkUnit **out) {
  Key k = {0};
  layout_key(op, &k);
  if (k.failed) {
    key_free(&k);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  }
  TpkUnits *units = tpk_context_units(ctx);
  bool claimed;
  TpkStatus st = tpk_units_get(units, -1, k.w, k.n, out, &claimed);
  key_free(&k);
  if (st != TPK_OK || !claimed) return st;
  Layout *lay = calloc(1, sizeof *lay);
  TpkError err = {0};
  const TpkType *types[MAX_OUTS];
  int n;
  TpkGraphBuilder *gb = NULL;
  st = lay ? build_alone(op, lay, npolicies(op) - 1, false, &gb, types, &n, &err) : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
  uint64_t indices = st == TPK_OK ? tpk_gb_index_args(gb) : 0; /* positions stay constants: never symbols */
  tpk_gb_free(gb);
  for (int i = 0; st == TPK_OK && i < op->nargs; i++) {
    TpkArgKind kind = op->args[i].kind;
    if (kind != TPK_ARG_FLOAT && kind != TPK_ARG_INT && kind != TPK_ARG_INTS) continue;
    if (i < 64 && indices >> i & 1) continue;
    /* an int: a Scalar's (a rank-0 value fits), else a SymInt's (a size fits) */
    for (int as_value = kind == TPK_ARG_INT; as_value >= 0 && !lay->lift[i] && !lay->value[i]; as_value--) {
      Layout probe = {0};
      probe.lift[i] = !as_value;
      probe.value[i] = as_value;
      TpkError perr = {0};
      gb = NULL;
      bool fits = build_alone(op, &probe, npolicies(op) - 1, true, &gb, types, &n, &perr) == TPK_OK;
      tpk_gb_free(gb);
      if (as_value) lay->value[i] = fits;
      else lay->lift[i] = fits;
    }
  }
  if (st != TPK_OK) {
    free(lay);
    tpk_unit_abandon(units, *out);
    *out = NULL;
    return op_fail(op, err.code ? err.code : TPK_ERR_INVALID, err.message);
  }
  tpk_unit_ready(units, *out, lay, layout_free);
  return TPK_OK;
}

/* An op's graph under one policy: its result types (dims in its symbols),
 * or that it does not build so (try the next policy). */
typedef struct OpGraph {
  bool failed;
  Policy policy;
  TpkGraphBuilder *gb;
  int nouts;
  const TpkType *types[MAX_OUTS]; /* NULL: an output ATen leaves undefined */
} OpGraph;

static void op_graph_free(void *p) {
  OpGraph *g = p;
  tpk_gb_free(g->gb);
  free(g);
}

static void program_free(void *p) { tpk_program_release(p); }

typedef struct OpKeying {
  Op *op;
  const Layout *lay;
  Policy policy;
} OpKeying;

static TpkStatus make_op_key(void *ctx, const Hint *hint, Key *key, bool *missed) {
  OpKeying *ok = ctx;
  ok->op->hint = hint;
  key_reset(key);
  TpkStatus st = op_key(ok->op, ok->lay, ok->policy, key, missed);
  if (*missed) ok->op->hint = NULL;
  return st;
}

/* The op's key under policy p: by value, or by one of the stream's hints
 * for its structure (left in op->hint) where it gives its sizes. */
static TpkStatus op_key_hinted(Op *op, const Layout *lay, Policy p, Hints *hints, Key *key) {
  OpKeying ok = {op, lay, p};
  return key_hinted(hints, make_op_key, &ok, key);
}

/* The op's graph under the first policy it builds with (its key left in
 * key, the hint it took in op->hint); an error when it builds under none. */
static TpkStatus find_op_graph(TpkContext *ctx, Op *op, const Layout *lay, Hints *hints, Key *key, TpkUnit **out) {
  TpkUnits *units = tpk_context_units(ctx);
  int np = npolicies(op);
  for (Policy p = 0; p < np; p++) {
    TpkStatus st = op_key_hinted(op, lay, p, hints, key);
    bool claimed;
    if (st == TPK_OK) st = tpk_units_get(units, -1, key->w, key->n, out, &claimed);
    if (st != TPK_OK) return st;
    if (!claimed) {
      if (!((OpGraph *)tpk_unit_payload(*out))->failed) return TPK_OK;
      tpk_unit_release(*out);
      *out = NULL;
      continue;
    }
    OpGraph *g = calloc(1, sizeof *g);
    TpkError err = {0};
    st = g ? build_alone(op, lay, p, false, &g->gb, g->types, &g->nouts, &err) : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
    if (st != TPK_OK && g && p + 1 < np && st != TPK_ERR_NOMEM) { /* the next policy */
      tpk_gb_free(g->gb);
      *g = (OpGraph){.failed = true, .policy = p};
      tpk_unit_ready(units, *out, g, op_graph_free);
      tpk_unit_release(*out);
      *out = NULL;
      continue;
    }
    if (st != TPK_OK) {
      if (g) op_graph_free(g);
      tpk_unit_abandon(units, *out);
      *out = NULL;
      return op_fail(op, err.code ? err.code : TPK_ERR_INVALID, err.message);
    }
    g->policy = p;
    tpk_unit_ready(units, *out, g, op_graph_free);
    return TPK_OK;
  }
  return op_fail(op, TPK_ERR_INTERNAL, "builds under no policy of sizes");
}

/* A graph's program: fused, or, should fusion not take it, one cluster
 * per IR op. */
static TpkStatus compile_fused(TpkContext *ctx, const TpkFunc *f, TpkProgram **out) {
  TpkStatus st = tpk_compile_graph(ctx, f, TPK_FUSE_ALL, out);
  if (st != TPK_OK && st != TPK_ERR_NOMEM) st = tpk_compile_graph(ctx, f, TPK_FUSE_NONE, out);
  return st;
}

/* The op's program (debug and strict): its graph fused, as one ATen op is
 * one kernel in PyTorch, under the graph's key. */
static TpkStatus find_op_program(TpkContext *ctx, const Op *op, const OpGraph *g, Key *key, TpkUnit **out, bool *built) {
  key->w[0] = KEY_OPPROG;
  TpkUnits *units = tpk_context_units(ctx);
  bool claimed;
  TpkStatus st = tpk_units_get(units, TPK_UNIT_EAGER, key->w, key->n, out, &claimed);
  key->w[0] = KEY_OPTYPE;
  *built = claimed;
  if (st != TPK_OK || !claimed) return st;
  TpkProgram *p;
  st = compile_fused(ctx, tpk_gb_func(g->gb), &p);
  if (st != TPK_OK) {
    tpk_unit_abandon(units, *out);
    *out = NULL;
    char *why = strdup(tpk_last_error());
    op_fail(op, st, why ? why : "out of memory");
    free(why);
    return st;
  }
  tpk_unit_ready(units, *out, p, program_free);
  return TPK_OK;
}

/* ---- streams -------------------------------------------------------------------- */

/* An op's signature (see "the memo"): words that say what it is exactly. */
enum { MEMO_SLOTS = 256, MEMO_MAX = 4096, MAX_SIG = 1024 };
typedef struct Sig {
  uint64_t w[MAX_SIG];
  int n;
  bool failed;
  uint64_t hash; /* of its words, mixed in as they come */
} Sig;
typedef struct Memo Memo;
static void memo_clear(TpkStream *s);
/* The memo's entries a window kept in the cache folder, loaded. */
typedef struct FolderMemo FolderMemo;
static void folder_memo_free(FolderMemo *fm);
enum { FOLDER_TRIED = 64 }; /* first ops' signatures looked up there, by hash (overwritten) */

/* A buffer the stream's pending work writes (wrote) or reads. */
typedef struct Mark {
  TpkBuffer *buf; /* held */
  bool wrote;
} Mark;

/* A strict stream's op on its queue: what names it if it fails. */
typedef struct Queued {
  int64_t position;
  char op[64];
  int kernels; /* its program's kernels */
  TpkLaunchResult result; /* tier stays NULL unless the launch finished */
  struct Queued *next;
} Queued;

/* A buffer a fused window reads but did not produce (an input), or one it
 * produced; held by the window. */
typedef struct WValue {
  TpkBuffer *buf;
  bool input;
} WValue;

/* An op of the window as submitted: its arguments copied (tensors still
 * buffers), the lifts of its layout, the sizes it keeps constant, its
 * outputs. */
typedef struct Record {
  uint64_t memo;     /* the serial of its memo entry (0: none): its signature */
  const char *op;    /* the window's arena; NULL for a call: */
  TpkKernel *kernel; /* its program held */
  uint64_t kernel_id[3];
  TpkArg *args;
  int nargs;
  Layout lay;
  TpkBuffer *outs[MAX_OUTS]; /* NULL: undefined */
  int nouts;
  int64_t position;
  /* How the op alone built: the sizes it kept constant (own_consts), and
   * when it built factored, the ints it made symbols first (own_v). What
   * the window tries when this op does not build with the window's
   * symbols. In the window's arena, as many as there are: a record of the
   * whole Syms (~1 KB) made the first window of a process fault a page
   * every four ops. */
  int64_t *own_v, *own_consts;
  int own_n, own_nconst;
} Record;

typedef struct Window {
  TpkArena arena; /* records' arguments */
  Record *records;
  int nrecords;
  WValue *values;
  int nvalues, capvalues;
  /* what it holds (each value's buffer), and the storages of what it made
   * (each to the buffer, or to MADE_SEVERAL): one probe an operand where a
   * scan of every value was ~1% of the char-GPT step (305 ops) */
  TpkPtrMap held, made;
  int nscalars; /* the records' lifted scalars: inputs of the window's graph too, one per distinct value (below) */
  uint32_t *floats; /* the distinct f32 values (bits) of the lifted floats recorded */
  int nfloats, capfloats;
  int params; /* at least window_params: what it was when last counted, and what ops added since */
  /* Its ops' memo entries, kept in the cache folder when it has run under
   * memo_key (see "the memo in the cache folder"); NULL: not kept. */
  uint64_t *memo_key;
  int memo_key_words;
  TpkStr memos;
  int nmemos;
} Window;

/* A window run before, as run_window's fast way finds it again (see "a
 * window seen before"). */
enum { SEEN_WINDOWS = 4 };
typedef struct Seen {
  uint64_t *words; /* its fingerprint; NULL: an empty entry */
  int nwords;
  TpkUnit *unit;   /* its program's, held */
  TpkNamedInt syms[MAX_SYMS]; /* its launch's symbols (names: the program's) */
  int nsyms;
  /* its lifted scalars: each input's dtype, and each use, in the records'
   * arguments, of one (record, argument, input) */
  TpkDType *dtypes;
  int nscalars;
  int (*uses)[3];
  int nuses;
} Seen;
static void seen_clear(Seen *e);

/* A stream's part in a warm start (see "a warm start"). */
enum { WARM_WINDOWS = 16, WARM_SCRATCH = 8 };
typedef struct Warm {
  uint64_t *keys[WARM_WINDOWS]; /* the keys of the windows it ran, in order */
  int nwords[WARM_WINDOWS];
  int n;
  bool kept;           /* in the cache folder (or the same as read there) */
  uint64_t read_hash;  /* of what its warm start read; 0: nothing */
  pthread_t thread;    /* the warm start, while `running` */
  bool running;
  pid_t pid;           /* the process that started it (a fork's child has no thread) */
} Warm;

static void warm_start(TpkStream *s);
static void warm_note(TpkStream *s, const TpkUnit *window);
static void warm_join(TpkStream *s);
static void warm_keep(TpkStream *s);
static void warm_free(Warm *w);

struct TpkStream {
  TpkContext *ctx; /* held */
  TpkDevice *dev;
  TpkEagerMode mode;
  atomic_int refs; /* the caller's, and each pending mark's */
  pthread_mutex_t lock; /* all below */
  bool dropped;         /* the context ended: its work went, ops are refused */
  TpkStream *next;      /* the context's streams */
  int64_t position;     /* ops submitted */
  TpkStreamStats stats;
  TpkStatus error;      /* the first error since the last sync */
  char *message;
  Mark *marks;
  int nmarks, capmarks;
  TpkQueue *queue;      /* strict */
  Queued *queued, **queued_tail;
  Window w;             /* fused */
  Hints hints;          /* of its ops' and windows' keys */
  Memo **memo;   /* MEMO_SLOTS chains of ops seen before (see "the memo"); NULL until one */
  int nmemo;     /* entries in them */
  Sig sig;              /* the signature of the op being submitted */
  FolderMemo *folder_memo;            /* loaded from the cache folder */
  uint64_t folder_tried[FOLDER_TRIED]; /* ... or looked for there */
  uint64_t memo_serial;       /* entries put in the memo */
  Seen seen[SEEN_WINDOWS];    /* windows run before (see "a window seen before") */
  int seen_next;              /* the entry replaced next */
  TpkStreamObserver observer; /* tpk_stream_observe */
  void *observer_user;
  Warm warm;                  /* see "a warm start" */
};

struct TpkStreams {
  pthread_mutex_t lock;
  TpkStream *list;
};

TpkStreams *tpk_streams_new(void) {
  TpkStreams *ss = calloc(1, sizeof *ss);
  if (ss) pthread_mutex_init(&ss->lock, NULL);
  return ss;
}

void tpk_streams_free(TpkStreams *ss) {
  if (!ss) return;
  pthread_mutex_destroy(&ss->lock);
  free(ss);
}

void tpk_stream_retain(TpkStream *s) { atomic_fetch_add(&s->refs, 1); }

static void stream_free(TpkStream *s) {
  TpkStreams *ss = tpk_context_streams(s->ctx);
  pthread_mutex_lock(&ss->lock);
  for (TpkStream **p = &ss->list; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&ss->lock);
  hints_free(&s->hints);
  memo_clear(s);
  for (int i = 0; i < SEEN_WINDOWS; i++) seen_clear(&s->seen[i]);
  folder_memo_free(s->folder_memo);
  warm_free(&s->warm);
  free(s->w.memo_key);
  tpk_str_free(&s->w.memos);
  tpk_queue_destroy(s->queue); /* its work has run: the launches' results are written */
  for (Queued *q = s->queued, *next; q; q = next) {
    next = q->next;
    free(q);
  }
  free(s->message);
  free(s->marks);
  free(s->w.records);
  free(s->w.values);
  free(s->w.floats);
  tpk_ptrmap_free(&s->w.held);
  tpk_ptrmap_free(&s->w.made);
  tpk_arena_free(&s->w.arena);
  pthread_mutex_destroy(&s->lock);
  TpkContext *ctx = s->ctx;
  free(s);
  tpk_context_release(ctx);
}

void tpk_stream_release(TpkStream *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) stream_free(s);
}

/* The first error since the last sync, with its message; s->lock held. */
static void set_error(TpkStream *s, TpkStatus st, const char *message) {
  if (s->error != TPK_OK) return;
  s->error = st;
  free(s->message);
  s->message = strdup(message);
}

static bool mark(TpkStream *s, TpkBuffer *b, bool wrote) {
  if (s->nmarks == s->capmarks) {
    int cap = s->capmarks ? 2 * s->capmarks : 64;
    Mark *m = realloc(s->marks, sizeof *m * (size_t)cap);
    if (!m) return false;
    s->marks = m;
    s->capmarks = cap;
  }
  tpk_buffer_retain(b);
  pthread_mutex_lock(&b->dev->lock);
  if (wrote) tpk_buffer_mark_pending(b, s);
  else tpk_buffer_mark_read(b);
  pthread_mutex_unlock(&b->dev->lock);
  s->marks[s->nmarks++] = (Mark){b, wrote};
  return true;
}

/* The pending work has run (or gone): every mark goes. The buffers'
 * holds are dropped after the marks; s->lock held, and a hold on s by
 * the caller (the last mark's may go here). */
static void unmark_all(TpkStream *s) {
  for (int i = 0; i < s->nmarks; i++) {
    TpkBuffer *b = s->marks[i].buf;
    pthread_mutex_lock(&b->dev->lock);
    TpkStream *held = tpk_buffer_unmark(b, s->marks[i].wrote);
    pthread_mutex_unlock(&b->dev->lock);
    if (held) tpk_stream_release(held);
  }
  for (int i = 0; i < s->nmarks; i++) tpk_buffer_release(s->marks[i].buf);
  s->nmarks = 0;
}

/* ---- the window -------------------------------------------------------------------- */

static void window_reset(TpkStream *s) {
  Window *w = &s->w;
  for (int i = 0; i < w->nvalues; i++) tpk_buffer_release(w->values[i].buf);
  for (int i = 0; i < w->nrecords; i++)
    if (w->records[i].kernel) tpk_program_release(tpk_kernel_program(w->records[i].kernel));
  w->nvalues = w->nrecords = w->nscalars = w->nmemos = w->nfloats = w->params = 0;
  tpk_ptrmap_free(&w->held);
  tpk_ptrmap_free(&w->made);
  free(w->memo_key);
  w->memo_key = NULL;
  tpk_str_free(&w->memos);
  tpk_arena_free(&w->arena);
  tpk_arena_init(&w->arena, 0);
}

static const char made_several; /* the key of a storage the window made several buffers of */
#define MADE_SEVERAL ((void *)&made_several)

static bool window_hold(Window *w, TpkBuffer *buf, bool input) {
  void *made = NULL;
  bool seen = !input && tpk_ptrmap_get(&w->made, buf->storage, &made);
  if (!tpk_ptrmap_put(&w->held, buf, NULL) || (!input && !tpk_ptrmap_put(&w->made, buf->storage, seen ? MADE_SEVERAL : buf)))
    return false;
  if (w->nvalues == w->capvalues) {
    int cap = w->capvalues ? 2 * w->capvalues : 64;
    WValue *v = realloc(w->values, sizeof *v * (size_t)cap);
    if (!v) return false;
    w->values = v;
    w->capvalues = cap;
  }
  tpk_buffer_retain(buf);
  w->values[w->nvalues++] = (WValue){buf, input};
  return true;
}

static bool window_has(const Window *w, const TpkBuffer *b) {
  void *unused;
  return tpk_ptrmap_get(&w->held, b, &unused);
}

/* Does the op read a view of what the window produced (bytes it cannot
 * name)? Then the window runs first. */
static bool reads_a_view_of_the_window(const Window *w, const Op *op) {
  for (int i = 0; i < op->noperands; i++) {
    void *made;
    if (tpk_ptrmap_get(&w->made, op->operands[i]->storage, &made) && made != op->operands[i]) return true;
  }
  return false;
}

/* A copy of args into the window's arena (lists and strings too). */
static TpkArg *copy_args(TpkArena *a, const TpkArg *in, int n) {
  TpkArg *out = tpk_arena_alloc(a, sizeof *out * (size_t)(n + 1));
  for (int i = 0; out && i < n; i++) {
    out[i] = in[i];
    out[i].name = in[i].name ? tpk_arena_strdup(a, in[i].name) : NULL;
    if (in[i].kind == TPK_ARG_STR && in[i].str && !(out[i].str = tpk_arena_strdup(a, in[i].str))) return NULL;
    if (in[i].kind == TPK_ARG_INT && in[i].sym && !(out[i].sym = tpk_arena_strdup(a, in[i].sym))) return NULL;
    if (in[i].kind == TPK_ARG_INTS) {
      int64_t *ints = tpk_arena_alloc(a, sizeof *ints * (size_t)(in[i].n + 1));
      const char **syms = in[i].syms ? tpk_arena_alloc(a, sizeof *syms * (size_t)(in[i].n + 1)) : NULL;
      if (!ints || (in[i].syms && !syms)) return NULL;
      for (int j = 0; j < in[i].n; j++) {
        ints[j] = in[i].ints[j];
        if (syms && in[i].syms[j] && !(syms[j] = tpk_arena_strdup(a, in[i].syms[j]))) return NULL;
      }
      out[i].ints = ints;
      out[i].syms = syms;
    }
    if (in[i].kind == TPK_ARG_VALUES) {
      TpkBuffer **bufs = tpk_arena_alloc(a, sizeof *bufs * (size_t)(in[i].n + 1));
      if (!bufs) return NULL;
      memcpy(bufs, in[i].buffers, sizeof *bufs * (size_t)in[i].n);
      out[i].buffers = bufs;
    }
  }
  return out;
}

static TpkStatus run_window(TpkStream *s);
static void window_store_memos(TpkStream *s);

/* How op, bound as its graph was (ob), built alone: the sizes it kept
 * constant, and its ints that were symbols when it built factored (the
 * ones that were not: constants). What the window tries when this op does
 * not build with the window's symbols. */
static void record_own(const Op *op, const Layout *lay, const OpBound *ob, Syms *own) {
  *own = (Syms){0};
  for (int i = 0; i < ob->syms.nconst; i++) add_const(own, ob->syms.consts[i]);
  for (int i = 0; i < op->nargs; i++) {
    const TpkArg *a = &op->args[i], *bound = &ob->args[i];
    if (!(lay->lift[i] || lay->value[i]) || (a->kind != TPK_ARG_INT && a->kind != TPK_ARG_INTS)) continue;
    for (int j = 0; j < (a->kind == TPK_ARG_INT ? 1 : a->n); j++) {
      int64_t v = a->kind == TPK_ARG_INT ? a->i : a->ints[j];
      bool symbolic = a->kind == TPK_ARG_INT ? bound->kind == TPK_ARG_VALUE || bound->sym : bound->syms && bound->syms[j];
      if (!symbolic) add_const(own, v);
      else if (ob->policy == SIZES_FACTORED) add_seed(own, v);
    }
  }
}

/* The f32 a lifted float is passed as, by its bits. */
static uint32_t f32_bits(double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* How many scalar inputs op's nscalars lifted scalars add to the window:
 * the window passes each distinct value once (an optimizer's step lifts
 * the same learning rate, betas and bias corrections for every tensor:
 * hundreds of scalars, a few values), so a lifted float whose value the
 * window has adds none; lifted ints count one each (at most what the
 * window's binding makes of them). With `keep`, the new floats' values
 * are the window's afterwards; -1: out of memory. */
static int new_scalars(Window *w, const Op *op, const Layout *lay, int nscalars, bool keep) {
  int added = nscalars, start = w->nfloats;
  for (int i = 0; i < op->nargs; i++) {
    if (!lay->lift[i] || op->args[i].kind != TPK_ARG_FLOAT) continue;
    uint32_t bits = f32_bits(op->args[i].f);
    bool known = false;
    for (int j = 0; j < w->nfloats && !known; j++) known = w->floats[j] == bits;
    if (known) {
      added--;
      continue;
    }
    if (w->nfloats == w->capfloats) {
      int cap = w->capfloats ? 2 * w->capfloats : 64;
      uint32_t *more = realloc(w->floats, sizeof *more * (size_t)cap);
      if (!more) {
        w->nfloats = start;
        return keep ? -1 : nscalars;
      }
      w->floats = more;
      w->capfloats = cap;
    }
    w->floats[w->nfloats++] = bits; /* a value twice in this op counts once */
  }
  if (!keep) w->nfloats = start;
  return added;
}

/* The parameters of the window's graph were it to run now: its inputs,
 * its lifted scalars and what it produced that someone but the window
 * still holds (its outputs). What it produced and nobody else holds is
 * held by nobody else later either: an intermediate, no parameter. */
static int window_params(const Window *w) {
  int n = w->nscalars;
  for (int i = 0; i < w->nvalues; i++) n += w->values[i].input || tpk_buffer_in_use(w->values[i].buf, 2);
  return n;
}

/* Record op in the window (fused): its arguments copied, the buffers it
 * reads and makes held and marked; `own` is record_own's sizes (own_n
 * symbols, then own_nconst constants), nscalars the scalars its binding
 * lifts. s->lock held. */
static TpkStatus record(TpkStream *s, const Op *op, uint64_t memo, const Layout *lay, const int64_t *own, int own_n, int own_nconst,
                        int nscalars, TpkBuffer *const *made, int nouts) {
  Window *w = &s->w;
  /* the window's graph is one kernel, whose parameters (its buffers and
   * lifted scalars) a launch bounds: it runs before the op would take it
   * past that */
  int adds = op->noperands + nouts + new_scalars(w, op, lay, nscalars, false);
  if (w->nrecords && w->params + adds > WINDOW_PARAMS && (w->params = window_params(w)) + adds > WINDOW_PARAMS) {
    TpkStatus st = run_window(s);
    if (st != TPK_OK) set_error(s, st, tpk_last_error());
    unmark_all(s);
  }
  if (!w->records && !(w->records = calloc(WINDOW_OPS, sizeof *w->records))) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  Record *rec = &w->records[w->nrecords];
  *rec = (Record){.memo = memo, .kernel = op->kernel, .nargs = op->nargs, .lay = *lay, .nouts = nouts, .position = op->position};
  memcpy(rec->kernel_id, op->kernel_id, sizeof rec->kernel_id);
  bool ok = (!op->name || (rec->op = tpk_arena_strdup(&w->arena, op->name))) && (rec->args = copy_args(&w->arena, op->args, op->nargs));
  for (int i = 0; ok && i < op->noperands; i++)
    if (!window_has(w, op->operands[i])) ok = window_hold(w, op->operands[i], true) && mark(s, op->operands[i], false);
  for (int i = 0; ok && i < nouts; i++)
    if ((rec->outs[i] = made[i])) ok = window_hold(w, made[i], false) && mark(s, made[i], true);
  if (!ok) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory recording an op");
  rec->own_n = own_n;
  rec->own_nconst = own_nconst;
  if (own_n + own_nconst) {
    int64_t *v = tpk_arena_alloc(&w->arena, sizeof *v * (size_t)(own_n + own_nconst));
    if (!v) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory recording an op");
    memcpy(v, own, sizeof *v * (size_t)(own_n + own_nconst));
    rec->own_v = v;
    rec->own_consts = v + own_n;
  }
  int added = new_scalars(w, op, lay, nscalars, true);
  if (added < 0) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory recording an op");
  if (op->kernel) tpk_program_retain(tpk_kernel_program(op->kernel));
  w->nrecords++;
  w->nscalars += added;
  w->params += op->noperands + nouts + added;
  if (w->nrecords == WINDOW_OPS) { /* full: it runs now */
    TpkStatus st = run_window(s);
    if (st != TPK_OK) set_error(s, st, tpk_last_error());
    unmark_all(s);
  }
  return TPK_OK;
}

/* ---- running a window ------------------------------------------------------------- */

/* The window bound at a sync: buffers to value ids (its values, in the
 * order it met them), lifted scalars after them. */
typedef struct Flush {
  Window *w;
  TpkPtrMap ids; /* buffer -> id + 1 */
  double *scalars;
  TpkDType *scalar_dtypes;
  int nscalars;
  TpkArena arena;  /* prepared arguments */
  TpkArg **args;   /* per record, for the builder */
  Syms syms;
  uint64_t *dims;  /* the inputs' dims as words, TPK_MAX_RANK per value */
} Flush;

static int flush_tensor(void *ctx, TpkBuffer *b) {
  void *at;
  return tpk_ptrmap_get(&((Flush *)ctx)->ids, b, &at) ? (int)(intptr_t)at - 1 : -1;
}

static bool same_scalar(TpkDType dt, double a, double b) {
  return dt == TPK_I32 ? (int32_t)a == (int32_t)b : f32_bits(a) == f32_bits(b);
}

/* A lifted scalar's input: one per distinct value as it is passed (f32 or
 * i32), shared by every op that lifts it (see new_scalars); or the one a
 * hint names (want), when it holds v or is the next new one: two values
 * equal now by chance keep the inputs they had (the earlier window of the
 * same structure had as many parameters). */
static int flush_scalar(void *ctx, TpkDType dt, double v, int want) {
  Flush *f = ctx;
  int at = want - f->w->nvalues;
  if (want >= 0 && (at < 0 || at > f->nscalars ||
                    (at < f->nscalars && (f->scalar_dtypes[at] != dt || !same_scalar(dt, f->scalars[at], v)))))
    return -2;
  for (int i = 0; want < 0 && i < f->nscalars; i++)
    if (f->scalar_dtypes[i] == dt && same_scalar(dt, f->scalars[i], v)) return f->w->nvalues + i;
  if (want >= 0 && at < f->nscalars) return want;
  f->scalars[f->nscalars] = v;
  f->scalar_dtypes[f->nscalars] = dt;
  return f->w->nvalues + f->nscalars++;
}

static void flush_free(Flush *f) {
  free(f->scalars);
  free(f->scalar_dtypes);
  free(f->args);
  tpk_arena_free(&f->arena);
}

/* The window's key with the sizes of `base` kept constant (base->consts)
 * and its symbols given first (base->v, factored when base->factor), tag 0
 * for the key with nothing given: its values (inputs' dtypes and sizes),
 * its ops with their arguments bound, its outputs. The arguments are
 * prepared for a builder in f, its symbols left in f->syms. */
static TpkStatus window_key(Flush *f, const bool *output, const Syms *base, int tag, const Hint *hint, Key *key) {
  Window *w = f->w;
  key_reset(key);
  f->nscalars = 0;
  tpk_arena_free(&f->arena);
  tpk_arena_init(&f->arena, 0);
  f->syms = *base;
  f->syms.grow = true;
  syms_hint(&f->syms, hint);
  f->dims = tpk_arena_alloc(&f->arena, sizeof *f->dims * (size_t)(w->nvalues * TPK_MAX_RANK + 1));
  if (!f->dims) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  key_put(key, TPK_UNIT_KEY_WINDOW);
  key_put(key, (uint64_t)tag);
  for (int i = 0; i < base->n; i++) key_put(key, (uint64_t)i); /* how many are given first */
  for (int i = 0; i < w->nvalues; i++) {
    const TpkBuffer *b = w->values[i].buf;
    key_put(key, w->values[i].input);
    if (!w->values[i].input) continue;
    key_put(key, (uint64_t)b->dtype);
    key_put(key, (uint64_t)b->rank);
    for (int d = 0; d < b->rank; d++) key_size(key, f->dims[i * TPK_MAX_RANK + d] = dim_word(&f->syms, b->shape[d]));
  }
  Binder binder = {flush_tensor, flush_scalar, f, &f->syms, &f->arena, false};
  for (int r = 0; r < w->nrecords; r++) {
    const Record *rec = &w->records[r];
    key_put(key, rec->op ? 1 : 2);
    if (rec->op) key_str(key, rec->op);
    else for (int i = 0; i < 3; i++) key_put(key, rec->kernel_id[i]);
    key_put(key, (uint64_t)rec->nargs);
    f->args[r] = tpk_arena_alloc(&f->arena, sizeof *f->args[r] * (size_t)(rec->nargs + 1));
    if (!f->args[r]) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    TpkStatus st = bind_args(rec->args, rec->nargs, &rec->lay, &binder, f->args[r], key);
    if (st != TPK_OK) return tpk_runtime_fail(st == TPK_ERR_NOMEM ? st : TPK_ERR_INTERNAL, "binding a window's op failed");
    key_put(key, (uint64_t)rec->nouts);
    for (int i = 0; i < rec->nouts; i++) key_put(key, rec->outs[i] ? (uint64_t)flush_tensor(f, rec->outs[i]) : UINT64_MAX);
  }
  for (int i = 0; i < w->nvalues; i++)
    if (output[i]) key_put(key, (uint64_t)i);
  f->syms.hint = NULL; /* the slot's words may go: only hint_missed stays */
  return key->failed ? tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory") : TPK_OK;
}

typedef struct WindowKeying {
  Flush *f;
  const bool *output;
  const Syms *base;
  int tag;
} WindowKeying;

static TpkStatus make_window_key(void *ctx, const Hint *hint, Key *key, bool *missed) {
  WindowKeying *wk = ctx;
  TpkStatus st = window_key(wk->f, wk->output, wk->base, wk->tag, hint, key);
  *missed = wk->f->syms.hint_missed;
  return st;
}

/* The window's key as window_key makes it, by the stream's hints for its
 * structure where one gives its sizes (see "hints"). */
static TpkStatus window_key_hinted(TpkStream *s, Flush *f, const bool *output, const Syms *base, int tag, Key *key) {
  WindowKeying wk = {f, output, base, tag};
  return key_hinted(&s->hints, make_window_key, &wk, key);
}

/* The window as one graph (its key made by window_key into f): its
 * builder, or the record it failed at (*failed_at; -1 for no op's). */
static TpkStatus build_window(TpkStream *s, Flush *f, const bool *output, TpkGraphBuilder **out, int *failed_at) {
  Window *w = &s->w;
  *failed_at = -1;
  TpkError err = {0};
  TpkGraphBuilder *gb = *out = new_builder(s->ctx, "eager_window");
  int n = w->nvalues + f->nscalars;
  TpkValue **vals = calloc((size_t)n + 1, sizeof *vals);
  TpkStatus st = gb && vals ? TPK_OK : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
  for (int i = 0; st == TPK_OK && i < w->nvalues; i++) {
    const TpkBuffer *b = w->values[i].buf;
    if (!w->values[i].input) continue;
    const TpkDim *dims[TPK_MAX_RANK];
    for (int d = 0; d < b->rank && st == TPK_OK; d++) {
      char text[40];
      dim_text(f->dims[i * TPK_MAX_RANK + d], text, sizeof text);
      if (!(dims[d] = tpk_gb_dim(gb, text, &err))) st = err.code;
    }
    if (st == TPK_OK) st = tpk_gb_input(gb, b->dtype, b->rank, dims, &vals[i], &err);
  }
  for (int i = 0; st == TPK_OK && i < f->nscalars; i++) st = tpk_gb_input(gb, f->scalar_dtypes[i], 0, NULL, &vals[w->nvalues + i], &err);
  for (int r = 0; st == TPK_OK && r < w->nrecords; r++) {
    const Record *rec = &w->records[r];
    TpkValue *outs[MAX_OUTS];
    int k = 0;
    st = rec->op ? tpk_gb_op(gb, rec->op, f->args[r], rec->nargs, vals, n, outs, MAX_OUTS, &k, &err)
                 : tpk_gb_call(gb, tpk_kernel_ir(rec->kernel), f->args[r], rec->nargs, vals, n, outs, MAX_OUTS, &k, &err);
    if (st != TPK_OK) *failed_at = r;
    for (int i = 0; st == TPK_OK && i < rec->nouts && i < k; i++)
      if (rec->outs[i]) vals[flush_tensor(f, rec->outs[i])] = outs[i];
  }
  for (int i = 0; st == TPK_OK && i < w->nvalues; i++)
    if (output[i]) st = tpk_gb_output(gb, vals[i], &err);
  free(vals);
  return st == TPK_OK ? TPK_OK : tpk_runtime_fail(st, "%s", err.message);
}

/* A rank-0 buffer of dtype dt (f32 or i32) holding v. */
static TpkStatus scalar_buffer(TpkDevice *dev, TpkDType dt, double v, TpkBuffer **out) {
  TpkStatus st = tpk_buffer_create(dev, dt, 0, NULL, out);
  float f = (float)v;
  int32_t i = (int32_t)v;
  if (st == TPK_OK) st = dt == TPK_I32 ? tpk_buffer_write(*out, &i, sizeof i) : tpk_buffer_write(*out, &f, sizeof f);
  return st;
}

/* Under a window's symbolic key (tag 0): its compiled graph, or, when the
 * window does not build with every size a symbol, which of the key's
 * symbols (by position) to keep constant and to give first, factored;
 * under that resolved key (tag 1): its compiled graph. */
typedef struct WindowProgram {
  TpkProgram *program;
  int nconst, nfirst;
  int consts[MAX_SYMS], first[MAX_SYMS]; /* forms: see form_of */
} WindowProgram;

/* A size as a form of the symbolic key's symbols: k for symbol k, -1 - (a
 * << 16 | b) for the product of symbols a and b; false when it is neither. */
static bool form_of(const Syms *t, int64_t v, int *form) {
  int k = sym_find(t, v);
  uint64_t w = k < 0 ? product_word(t, v) : 0;
  if (k < 0 && !w) return false;
  *form = k >= 0 ? k : -1 - (int)(w >> 2);
  return true;
}

static int64_t form_value(const Syms *t, int form) {
  if (form >= 0) return t->v[form];
  int ab = -1 - form;
  return t->v[ab >> 16] * t->v[ab & 0xffff];
}

static void window_program_free(void *p) {
  WindowProgram *wp = p;
  if (wp->program) tpk_program_release(wp->program);
  free(wp);
}

/* In the cache folder (units.c), under the window's key: "P" and its
 * program (compile.c: the fused IR), or "R" and the resolution's forms. */
static bool window_save(const void *payload, TpkStr *out) {
  const WindowProgram *wp = payload;
  if (wp->program) {
    tpk_str_putc(out, 'P');
    return tpk_program_save(wp->program, out);
  }
  tpk_str_printf(out, "R %d", wp->nconst);
  for (int i = 0; i < wp->nconst; i++) tpk_str_printf(out, " %d", wp->consts[i]);
  tpk_str_printf(out, " %d", wp->nfirst);
  for (int i = 0; i < wp->nfirst; i++) tpk_str_printf(out, " %d", wp->first[i]);
  return !out->failed;
}

static bool read_forms(const char **p, int *n, int *forms) {
  char *end;
  long count = strtol(*p, &end, 10);
  if (end == *p || count < 0 || count > MAX_SYMS) return false;
  for (*n = 0; *n < count; (*n)++) {
    long form = strtol(*p = end, &end, 10);
    if (end == *p || form >= MAX_SYMS || form < -1 - ((long)(MAX_SYMS - 1) << 16 | (MAX_SYMS - 1)) ||
        (form < 0 && ((-1 - form) & 0xffff) >= MAX_SYMS))
      return false;
    forms[*n] = (int)form;
  }
  *p = end;
  return true;
}

static void *window_load(TpkContext *ctx, const char *bytes, size_t len) {
  WindowProgram *wp = calloc(1, sizeof *wp);
  const char *p = bytes + 1;
  bool ok = wp && len > 0;
  if (ok && bytes[0] == 'P') ok = (wp->program = tpk_program_restore(ctx, bytes + 1, len - 1)) != NULL;
  else ok = ok && bytes[0] == 'R' && read_forms(&p, &wp->nconst, wp->consts) && read_forms(&p, &wp->nfirst, wp->first) && !*p;
  if (!ok) {
    free(wp);
    return NULL;
  }
  return wp;
}

static const TpkUnitCodec window_codec = {TPK_UNIT_EAGER, window_save, window_load, window_program_free};

/* Add the sizes record r needs kept constant (or given first) when the
 * window does not build at it, to base: first as it built alone (its
 * constants; its ints first, factored, when it built so); then, when that
 * adds nothing, all its sizes but one, each in turn (`round`), kept
 * constant; then all of them. False when nothing is left to try. */
static bool escalate(const Window *w, int r, int round, Syms *base) {
  const Record *rec = &w->records[r];
  int64_t sizes[2 * MAX_SYMS];
  int n = 0;
  for (int i = 0; i < rec->nargs; i++) {
    const TpkArg *a = &rec->args[i];
    int k = a->kind == TPK_ARG_VALUE ? 1 : a->kind == TPK_ARG_VALUES ? a->n : a->kind == TPK_ARG_INTS ? a->n : a->kind == TPK_ARG_INT;
    for (int j = 0; j < k && n < 2 * MAX_SYMS; j++) {
      const TpkBuffer *b = a->kind == TPK_ARG_VALUE ? a->buffer : a->kind == TPK_ARG_VALUES ? a->buffers[j] : NULL;
      int64_t vs[TPK_MAX_RANK];
      int nv = 0;
      if (!b) vs[nv++] = a->kind == TPK_ARG_INT ? a->i : a->ints[j];
      for (int d = 0; b && d < b->rank; d++) vs[nv++] = b->shape[d];
      for (int e = 0; e < nv && n < 2 * MAX_SYMS; e++) { /* each size once: one of them is kept a symbol */
        bool seen = vs[e] <= 1;
        for (int q = 0; q < n && !seen; q++) seen = sizes[q] == vs[e];
        if (!seen) sizes[n++] = vs[e];
      }
    }
  }
  if (round == 0) {
    int before = base->nconst + base->n;
    for (int i = 0; i < rec->own_nconst; i++) add_const(base, rec->own_consts[i]);
    for (int i = 0; i < rec->own_n; i++)
      if (!is_const(base, rec->own_v[i])) add_seed(base, rec->own_v[i]);
    base->factor |= rec->own_n > 0;
    return base->nconst + base->n > before;
  }
  if (round == 1) { /* the op's sizes constant but those an earlier op settled as symbols (a view of a [B*T, D] by [B, T]) */
    int before = base->nconst;
    for (int i = 0; i < n; i++)
      if (sym_find(base, sizes[i]) < 0) add_const(base, sizes[i]);
    return base->nconst > before;
  }
  if (round - 2 > n) return false;
  for (int i = 0; i < n; i++)
    if (i != round - 2 || round - 2 == n) add_const(base, sizes[i]); /* the last round: all of them */
  return true;
}

/* The window's program, found by its key (computed from the records: no
 * building) or built, fused and compiled. The first sight of a window
 * tries every size a symbol; where an op does not build so, the sizes it
 * names are kept constant (escalate), and the resolution is kept under the
 * symbolic key, by the symbols' positions, so that the window at other
 * sizes finds it. Lookups count as the stream's and the cache's hits and
 * misses. */
static TpkStatus find_window(TpkStream *s, Flush *f, const bool *output, TpkUnit **out) {
  TpkUnits *units = tpk_context_units(s->ctx);
  Key key = {0};
  Syms base = {0};
  *out = NULL;
  TpkUnit *unit;
  bool claimed;
  TpkStatus st = window_key_hinted(s, f, output, &base, 0, &key);
  Syms symbolic = f->syms; /* the symbols of the key with nothing given */
  if (st == TPK_OK) st = tpk_units_get_kept(units, -1, &window_codec, key.w, key.n, &unit, &claimed);
  if (st == TPK_OK && !claimed) {
    const WindowProgram *wp = tpk_unit_payload(unit);
    if (wp->program) {
      *out = unit;
    } else { /* resolved: the same positions at these sizes, each its own
              * even where two are equal now (the hint numbers them so) */
      for (int i = 0; i < wp->nconst; i++) base.consts[base.nconst++] = form_value(&symbolic, wp->consts[i]);
      for (int i = 0; i < wp->nfirst; i++) base.v[base.n++] = form_value(&symbolic, wp->first[i]);
      base.factor = wp->nfirst > 0;
      warm_note(s, unit);
      tpk_unit_release(unit);
      st = window_key_hinted(s, f, output, &base, 1, &key);
      if (st == TPK_OK) st = tpk_units_get_kept(units, -1, &window_codec, key.w, key.n, out, &claimed);
      if (st == TPK_OK && claimed) { /* other sizes of a resolved window: built as resolved */
        TpkGraphBuilder *gb;
        int failed_at;
        WindowProgram *p = calloc(1, sizeof *p);
        st = p ? build_window(s, f, output, &gb, &failed_at) : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
        if (st == TPK_OK) st = compile_fused(s->ctx, tpk_gb_func(gb), &p->program);
        if (p) tpk_gb_free(gb);
        if (st == TPK_OK) tpk_unit_ready(units, *out, p, window_program_free);
        else {
          free(p);
          tpk_unit_abandon(units, *out);
          *out = NULL;
        }
      }
    }
    tpk_units_count(units, TPK_UNIT_EAGER, st == TPK_OK && !claimed);
    if (st == TPK_OK) s->stats.cache_hits += !claimed, s->stats.compiles += claimed;
    if (st == TPK_OK) warm_note(s, *out);
    key_free(&key);
    return st;
  }
  if (st != TPK_OK) {
    key_free(&key);
    return st;
  }
  /* the first sight: resolve which sizes stay constant, build, compile */
  TpkGraphBuilder *gb = NULL;
  int failed_at = -1, at = -1, round = 0;
  Syms settled = base; /* what the records before `at` needed */
  for (int attempt = 0; attempt < 4 * MAX_SYMS; attempt++) {
    tpk_gb_free(gb);
    gb = NULL;
    if (attempt) st = window_key(f, output, &base, 1, NULL, &key);
    if (st == TPK_OK) st = build_window(s, f, output, &gb, &failed_at);
    if (st == TPK_OK || failed_at < 0) break;
    /* it builds past where it failed before: that record is settled (an
     * earlier one failing now: this try did not do for this one) */
    if (failed_at > at) at = failed_at, round = 0, settled = base;
    bool more = false;
    while (!more && round <= 2 * MAX_SYMS + 2) {
      base = settled;
      more = escalate(&s->w, at, round++, &base);
    }
    if (!more) break;
    st = TPK_OK;
  }
  WindowProgram *wp = calloc(1, sizeof *wp);
  TpkProgram *program = NULL;
  if (st == TPK_OK && gb) st = wp ? compile_fused(s->ctx, tpk_gb_func(gb), &program) : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  tpk_gb_free(gb);
  if (st == TPK_OK && (base.nconst || base.n)) { /* resolved: kept by position, the program under its own key */
    if (!hints_have(&s->hints, &key)) hint_keep(&s->hints, &key);
    for (int i = 0; i < base.nconst; i++)
      if (wp->nconst < MAX_SYMS && form_of(&symbolic, base.consts[i], &wp->consts[wp->nconst])) wp->nconst++;
    for (int i = 0; i < base.n; i++) /* in their order: it numbers the symbols */
      if (wp->nfirst < MAX_SYMS && form_of(&symbolic, base.v[i], &wp->first[wp->nfirst])) wp->nfirst++;
    TpkUnit *resolved;
    bool mine;
    st = tpk_units_get_kept(units, -1, &window_codec, key.w, key.n, &resolved, &mine);
    if (st == TPK_OK && mine) {
      WindowProgram *rp = calloc(1, sizeof *rp);
      if (rp) {
        rp->program = program;
        tpk_unit_ready(units, resolved, rp, window_program_free);
      } else {
        tpk_program_release(program);
        tpk_unit_abandon(units, resolved);
        resolved = NULL;
        st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
      }
    } else if (st == TPK_OK) {
      tpk_program_release(program); /* another thread built it meanwhile */
    }
    program = NULL;
    if (st == TPK_OK) *out = resolved;
  } else if (st == TPK_OK && wp) {
    wp->program = program;
    *out = unit; /* the builder's hold is the caller's */
  }
  if (st == TPK_OK && wp) {
    tpk_unit_ready(units, unit, wp, window_program_free);
    warm_note(s, unit);
    if (*out != unit) {
      warm_note(s, *out);
      tpk_unit_release(unit);
    }
  } else {
    free(wp);
    tpk_unit_abandon(units, unit);
  }
  tpk_units_count(units, TPK_UNIT_EAGER, false);
  if (st == TPK_OK) s->stats.compiles++;
  key_free(&key);
  return st;
}

/* ---- a window seen before -------------------------------------------------------------
 *
 * A training loop's window is, step after step, the window it ran before:
 * the same ops from the same memo entries (the same signatures: names,
 * arguments but lifted scalars, operands' dtypes and shapes), reading and
 * producing its values alike, the same outputs. Its key (window_key:
 * every record's arguments bound, the words hashed, twice for a resolved
 * window) then names the program found before, so the stream keeps the
 * last SEEN_WINDOWS windows it ran by a fingerprint of just that (a
 * memo entry's serial is never reused) with what their launch took: the
 * program, its symbols, and where each lifted scalar input's value is in
 * the records (the char-GPT step's window of 305 ops: 0.19 ms of keying).
 * Scalars are the values the records hold now; where one input served
 * several arguments that now differ (equal by chance before), the window
 * takes the way of its key. */

/* The window's fingerprint (malloc'd, *n words), or NULL when a record has
 * no memo entry (or memory is short). */
static uint64_t *window_fingerprint(const Flush *f, const bool *output, int *n) {
  const Window *w = f->w;
  int cap = 2 + w->nvalues, used = 0;
  for (int r = 0; r < w->nrecords; r++) {
    if (!w->records[r].memo) return NULL;
    cap += 2 + w->records[r].nouts;
    for (int i = 0; i < w->records[r].nargs; i++)
      cap += w->records[r].args[i].kind == TPK_ARG_VALUES ? 1 + w->records[r].args[i].n : w->records[r].args[i].kind == TPK_ARG_VALUE;
  }
  uint64_t *fp = malloc(sizeof *fp * (size_t)cap);
  if (!fp) return NULL;
  fp[used++] = (uint64_t)w->nrecords;
  fp[used++] = (uint64_t)w->nvalues;
  for (int i = 0; i < w->nvalues; i++) fp[used++] = (uint64_t)w->values[i].input | (uint64_t)output[i] << 1;
  for (int r = 0; r < w->nrecords; r++) {
    const Record *rec = &w->records[r];
    fp[used++] = rec->memo;
    for (int i = 0; i < rec->nargs; i++) {
      const TpkArg *a = &rec->args[i];
      if (a->kind == TPK_ARG_VALUE) fp[used++] = (uint64_t)(int64_t)flush_tensor((void *)f, a->buffer);
      if (a->kind != TPK_ARG_VALUES) continue;
      fp[used++] = (uint64_t)a->n;
      for (int j = 0; j < a->n; j++) fp[used++] = (uint64_t)(int64_t)flush_tensor((void *)f, a->buffers ? a->buffers[j] : NULL);
    }
    fp[used++] = (uint64_t)rec->nouts;
    for (int i = 0; i < rec->nouts; i++) fp[used++] = rec->outs[i] ? (uint64_t)(int64_t)flush_tensor((void *)f, rec->outs[i]) : UINT64_MAX;
  }
  *n = used;
  return fp;
}

static void seen_clear(Seen *e) {
  free(e->words);
  free(e->dtypes);
  free(e->uses);
  tpk_unit_release(e->unit);
  *e = (Seen){0};
}

/* An entry of fingerprint fp whose scalars the records give (into f), or NULL. */
static const Seen *seen_find(TpkStream *s, Flush *f, const uint64_t *fp, int n) {
  const Window *w = f->w;
  for (int k = 0; k < SEEN_WINDOWS; k++) {
    const Seen *e = &s->seen[k];
    if (!e->words || e->nwords != n || memcmp(e->words, fp, sizeof *fp * (size_t)n) != 0) continue;
    bool ok = true, *set = calloc((size_t)e->nscalars + 1, sizeof *set);
    for (int u = 0; set && ok && u < e->nuses; u++) {
      const TpkArg *a = &w->records[e->uses[u][0]].args[e->uses[u][1]];
      int id = e->uses[u][2];
      TpkDType dt = e->dtypes[id];
      double v = a->kind == TPK_ARG_FLOAT ? a->f : (double)a->i;
      if (!set[id]) f->scalars[id] = v, f->scalar_dtypes[id] = dt, set[id] = true;
      else ok = same_scalar(dt, f->scalars[id], v);
    }
    for (int i = 0; set && i < e->nscalars; i++) ok = ok && set[i];
    free(set);
    if (!set) return NULL;
    if (!ok) continue; /* an input of two arguments that differ now: another entry may have them apart */
    f->nscalars = e->nscalars;
    return e;
  }
  return NULL;
}

/* Keep the window that find_window found (f as its key left it) under
 * fingerprint fp (taken), with its launch's symbols. */
static void seen_keep(TpkStream *s, const Flush *f, uint64_t *fp, int n, TpkUnit *unit, const TpkNamedInt *syms, int nsyms) {
  const Window *w = f->w;
  Seen *e = &s->seen[s->seen_next];
  s->seen_next = (s->seen_next + 1) % SEEN_WINDOWS;
  seen_clear(e);
  int nuses = 0;
  for (int r = 0; r < w->nrecords; r++)
    for (int i = 0; i < w->records[r].nargs; i++) nuses += lifted_scalar(&w->records[r].args[i], &f->args[r][i]);
  e->dtypes = malloc(sizeof *e->dtypes * (size_t)(f->nscalars + 1));
  e->uses = malloc(sizeof *e->uses * (size_t)(nuses + 1));
  if (!e->dtypes || !e->uses) {
    free(fp);
    seen_clear(e);
    return;
  }
  for (int r = 0; r < w->nrecords; r++)
    for (int i = 0; i < w->records[r].nargs; i++)
      if (lifted_scalar(&w->records[r].args[i], &f->args[r][i])) {
        int *use = e->uses[e->nuses++];
        use[0] = r, use[1] = i, use[2] = f->args[r][i].value - w->nvalues;
      }
  memcpy(e->dtypes, f->scalar_dtypes, sizeof *e->dtypes * (size_t)f->nscalars);
  e->nscalars = f->nscalars;
  memcpy(e->syms, syms, sizeof *syms * (size_t)nsyms);
  e->nsyms = nsyms;
  tpk_unit_retain(unit);
  e->unit = unit;
  e->words = fp;
  e->nwords = n;
}

/* Tell s's observer about a launch that ran (s->lock held). */
static void observed(TpkStream *s, const char *label, int64_t first, int64_t last, int64_t kernels, const TpkLaunchResult *r) {
  if (!s->observer) return;
  TpkLaunchResult told = *r;
  told.trace = NULL;
  TpkStreamLaunch l = {label, first, last, kernels, &told};
  s->observer(s->observer_user, &l);
}

/* "mm, add, gelu (12 ops)": a window's ops by name, in order of first use. */
static void window_label(const Window *w, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < w->nrecords && at + 1 < n; i++) {
    char label[80];
    const Record *r = &w->records[i];
    const char *name = r->op ? r->op : label;
    if (!r->op) snprintf(label, sizeof label, "kernel '%s'", tpk_kernel_ir(r->kernel)->name);
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) {
      const Record *q = &w->records[j];
      seen = r->op ? q->op && strcmp(q->op, r->op) == 0 : q->kernel == r->kernel;
    }
    if (!seen) at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? ", " : "", name);
  }
  if (at + 1 < n) snprintf(buf + at, n - at, " (%d ops)", w->nrecords);
}

/* Run the window as one launch of its compiled graph, and empty it.
 * s->lock held. */
static TpkStatus run_window(TpkStream *s) {
  Window *w = &s->w;
  if (!w->nrecords) return TPK_OK;
  int64_t first = w->records[0].position, last = w->records[w->nrecords - 1].position;
  /* outputs: what it produced that someone but the stream (the window's
   * hold and the pending mark) still holds */
  bool *output = calloc((size_t)w->nvalues + 1, sizeof *output);
  Flush f = {.w = w, .scalars = malloc(sizeof *f.scalars * (size_t)(w->nrecords * MAX_ARGS + 1)),
             .scalar_dtypes = malloc(sizeof *f.scalar_dtypes * (size_t)(w->nrecords * MAX_ARGS + 1)),
             .args = calloc((size_t)w->nrecords + 1, sizeof *f.args)};
  tpk_arena_init(&f.arena, 0);
  TpkStatus st = output && f.scalars && f.scalar_dtypes && f.args ? TPK_OK : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  int ninputs = 0, noutputs = 0;
  for (int i = 0; st == TPK_OK && i < w->nvalues; i++) {
    if (!tpk_ptrmap_put(&f.ids, w->values[i].buf, (void *)(intptr_t)(i + 1))) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    ninputs += w->values[i].input;
    output[i] = !w->values[i].input && tpk_buffer_in_use(w->values[i].buf, 2);
    noutputs += output[i];
  }
  TpkUnit *unit = NULL;
  warm_join(s); /* its windows in memory: no lookup races with it */
  int nfp = 0;
  uint64_t *fp = st == TPK_OK && noutputs ? window_fingerprint(&f, output, &nfp) : NULL;
  const Seen *seen = fp ? seen_find(s, &f, fp, nfp) : NULL;
  if (seen) {
    tpk_unit_retain(unit = seen->unit);
    tpk_units_count(tpk_context_units(s->ctx), TPK_UNIT_EAGER, true);
    s->stats.cache_hits++;
    s->stats.windows_seen++;
    warm_note(s, unit);
  } else if (st == TPK_OK && noutputs) {
    st = find_window(s, &f, output, &unit);
  }
  /* one launch: the inputs, the scalars (in buffers of their own), the outputs */
  int nargs = ninputs + f.nscalars + noutputs, n = 0;
  TpkBuffer **args = unit ? calloc((size_t)nargs + 1, sizeof *args) : NULL;
  if (unit && !args) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  for (int i = 0; args && i < w->nvalues; i++)
    if (w->values[i].input) args[n++] = w->values[i].buf;
  int scalars_at = n;
  for (int i = 0; args && st == TPK_OK && i < f.nscalars; i++) st = scalar_buffer(s->dev, f.scalar_dtypes[i], f.scalars[i], &args[n++]);
  for (int i = 0; args && i < w->nvalues; i++)
    if (output[i]) args[n++] = w->values[i].buf;
  if (st == TPK_OK && unit) {
    TpkProgram *p = ((WindowProgram *)tpk_unit_payload(unit))->program;
    TpkKernel *k;
    TpkLaunchResult r;
    TpkLaunch L = {.args = args, .result = &r};
    st = tpk_program_kernel(p, tpk_program_kernel_name(p, 0), &k);
    TpkNamedInt syms[MAX_SYMS];
    if (st == TPK_OK && seen) L.nsyms = seen->nsyms, L.syms = seen->syms;
    else if (st == TPK_OK) {
      L.nsyms = launch_syms(k, &f.syms, syms), L.syms = syms;
      if (fp) seen_keep(s, &f, fp, nfp, unit, syms, L.nsyms), fp = NULL;
    }
    if (st == TPK_OK) st = tpk_kernel_launch_unsettled(k, &L);
    if (st == TPK_OK) {
      s->stats.launches += tpk_program_kernel_runs(p);
      s->stats.sim_seconds += r.simulated ? r.sim.seconds : 0;
      if (s->observer) {
        char label[256];
        window_label(w, label, sizeof label);
        observed(s, label, first, last, tpk_program_kernel_runs(p), &r);
      }
    }
  }
  s->stats.windows++;
  if (st != TPK_OK) {
    char *why = strdup(tpk_last_error());
    tpk_runtime_fail(st, "the fused window of ops #%" PRId64 " to #%" PRId64 ": %s", first, last, why ? why : "out of memory");
    free(why);
  }
  for (int i = scalars_at; args && i < scalars_at + f.nscalars; i++) tpk_buffer_destroy(args[i]);
  free(args);
  free(output);
  free(fp);
  tpk_ptrmap_free(&f.ids);
  flush_free(&f);
  tpk_unit_release(unit);
  if (st == TPK_OK) window_store_memos(s);
  window_reset(s);
  return st;
}

/* ---- sync ---------------------------------------------------------------------------- */

/* Wait for the strict queue; the first op whose launch did not finish is
 * the one the error names. s->lock held. */
static TpkStatus wait_queue(TpkStream *s) {
  if (!s->queue) return TPK_OK;
  TpkStatus st = tpk_queue_wait(s->queue);
  char *why = st != TPK_OK ? strdup(tpk_last_error()) : NULL;
  Queued *failed = NULL;
  for (Queued *q = s->queued, *next; q; q = next) {
    next = q->next;
    if (!q->result.tier && !failed) failed = q;
    if (q->result.tier) {
      s->stats.launches += q->kernels;
      s->stats.sim_seconds += q->result.simulated ? q->result.sim.seconds : 0;
      observed(s, q->op, q->position, q->position, q->kernels, &q->result);
    }
    if (q != failed) free(q);
  }
  if (st != TPK_OK)
    tpk_runtime_fail(st, "op #%" PRId64 " '%s': %s", failed ? failed->position : s->position, failed ? failed->op : "?",
                     why ? why : "failed");
  free(failed);
  free(why);
  s->queued = NULL;
  s->queued_tail = &s->queued;
  return st;
}

/* Run what is pending: s->lock held. The error goes to s->error. */
static void sync_locked(TpkStream *s) {
  if (s->dropped) return;
  TpkStatus st = s->mode == TPK_EAGER_FUSED ? run_window(s) : wait_queue(s);
  if (st != TPK_OK) set_error(s, st, tpk_last_error());
  unmark_all(s);
}

TpkStatus tpk_stream_sync(TpkStream *s) {
  if (!s) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_sync: no stream");
  tpk_stream_retain(s);
  pthread_mutex_lock(&s->lock);
  sync_locked(s);
  TpkStatus st = s->error;
  char *message = s->message;
  s->error = TPK_OK;
  s->message = NULL;
  pthread_mutex_unlock(&s->lock);
  tpk_stream_release(s);
  if (st != TPK_OK) tpk_runtime_fail(st, "%s", message ? message : "out of memory");
  free(message);
  return st;
}

/* Sync s for someone else's access: its error stays for tpk_stream_sync.
 * The caller holds s. */
static TpkStatus settle_stream(TpkStream *s) {
  pthread_mutex_lock(&s->lock);
  sync_locked(s);
  TpkStatus st = s->error;
  if (st != TPK_OK) tpk_runtime_fail(st, "%s", s->message ? s->message : "out of memory");
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* The stream whose pending work writes b, held, or NULL. */
static TpkStream *pending_stream(TpkBuffer *b) {
  pthread_mutex_lock(&b->dev->lock);
  TpkStream *s = tpk_buffer_pending(b);
  if (s) tpk_stream_retain(s);
  pthread_mutex_unlock(&b->dev->lock);
  return s;
}

TpkStatus tpk_buffer_settle(TpkBuffer *b, bool writing) {
  TpkStatus st = TPK_OK;
  TpkStream *s = tpk_buffer_pending(b) ? pending_stream(b) : NULL;
  if (s) {
    st = settle_stream(s);
    tpk_stream_release(s);
  }
  if (!writing || !tpk_buffer_read_pending(b)) return st;
  /* streams whose pending work reads b: each stream of the context with
   * marks runs its work (writes of what a stream reads are rare) */
  TpkStreams *ss = tpk_context_streams(b->dev->ctx);
  for (int round = 0; tpk_buffer_read_pending(b) && round < 1000; round++) {
    pthread_mutex_lock(&ss->lock);
    TpkStream *reader = ss->list;
    for (int i = 0; reader && i < round; i++) reader = reader->next;
    if (reader) tpk_stream_retain(reader);
    pthread_mutex_unlock(&ss->lock);
    if (!reader) break;
    TpkStatus rst = settle_stream(reader);
    if (st == TPK_OK) st = rst;
    tpk_stream_release(reader);
  }
  return st;
}

/* ---- streams: the API ------------------------------------------------------------- */

TpkStatus tpk_stream_create(TpkDevice *dev, TpkStream **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_create: no place for the stream");
  *out = NULL;
  if (!dev) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_create: no device");
  TpkContext *ctx = dev->ctx;
  if (tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_create: the context was destroyed");
  TpkStream *s = calloc(1, sizeof *s);
  if (!s) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory creating a stream");
  s->ctx = ctx;
  s->dev = dev;
  s->mode = tpk_context_eager_mode(ctx);
  atomic_init(&s->refs, 1);
  pthread_mutex_init(&s->lock, NULL);
  s->queued_tail = &s->queued;
  tpk_arena_init(&s->w.arena, 0);
  if (s->mode == TPK_EAGER_STRICT && tpk_queue_create(ctx, &s->queue) != TPK_OK) {
    pthread_mutex_destroy(&s->lock);
    free(s);
    return TPK_ERR_NOMEM;
  }
  /* its windows' clusters share their grids among the workers: started
   * now, while ops are submitted, a new process's first window finds them
   * parked (started by that launch, it ran the MLP step's 2-part cluster
   * alone, ~0.2 ms longer) */
  tpk_context_start_pool(ctx);
  warm_start(s);
  tpk_context_retain(ctx);
  TpkStreams *ss = tpk_context_streams(ctx);
  pthread_mutex_lock(&ss->lock);
  s->next = ss->list;
  ss->list = s;
  pthread_mutex_unlock(&ss->lock);
  *out = s;
  return TPK_OK;
}

void tpk_stream_destroy(TpkStream *s) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  sync_locked(s); /* its error has nobody to go to */
  warm_join(s);
  if (!s->dropped) warm_keep(s);
  pthread_mutex_unlock(&s->lock);
  tpk_stream_release(s);
}

void tpk_streams_close(TpkStreams *ss) {
  pthread_mutex_lock(&ss->lock);
  for (TpkStream *s = ss->list; s; s = s->next) {
    tpk_stream_retain(s); /* unmark_all may drop the marks' holds */
    pthread_mutex_lock(&s->lock);
    warm_join(s); /* it uses what the context's end frees */
    s->dropped = true;
    window_reset(s);
    memo_clear(s); /* its units go with the context */
    for (int i = 0; i < SEEN_WINDOWS; i++) seen_clear(&s->seen[i]);
    unmark_all(s); /* the queued launches' results are written still: freed with the stream */
    pthread_mutex_unlock(&s->lock);
    /* not the last hold: the caller's handle keeps it (freeing it would
     * take the registry's lock, held here) */
    atomic_fetch_sub(&s->refs, 1);
  }
  pthread_mutex_unlock(&ss->lock);
}

TpkEagerMode tpk_stream_mode(const TpkStream *s) { return s ? s->mode : TPK_EAGER_STRICT; }

void tpk_stream_observe(TpkStream *s, TpkStreamObserver fn, void *user) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->observer = fn;
  s->observer_user = user;
  pthread_mutex_unlock(&s->lock);
}

void tpk_stream_stats(const TpkStream *s, TpkStreamStats *out) {
  if (!s || !out) return;
  pthread_mutex_lock((pthread_mutex_t *)&s->lock);
  *out = s->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
}

/* The buffers op reads, in argument order, each once. */
static TpkStatus collect_operands(Op *op, const char *who) {
  op->noperands = 0;
  for (int i = 0; i < op->nargs; i++) {
    const TpkArg *a = &op->args[i];
    int n = a->kind == TPK_ARG_VALUE ? 1 : a->kind == TPK_ARG_VALUES ? a->n : 0;
    if (a->kind == TPK_ARG_VALUES && n && !a->buffers) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: argument %d has no buffers", who, i);
    for (int j = 0; j < n; j++) {
      TpkBuffer *b = a->kind == TPK_ARG_VALUE ? a->buffer : a->buffers[j];
      if (!b) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: argument %d has no buffer", who, i);
      bool seen = false;
      for (int k = 0; k < op->noperands && !seen; k++) seen = op->operands[k] == b;
      if (seen) continue;
      if (op->noperands == MAX_OPERANDS) return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "%s: more than %d tensors", who, MAX_OPERANDS);
      op->operands[op->noperands++] = b;
    }
  }
  return TPK_OK;
}

/* NaN or Inf in a float buffer: where, into why. */
static bool finite(TpkBuffer *b, char *why, size_t n) {
  if (!tpk_dtype_is_float(b->dtype)) return true;
  int64_t count = (int64_t)(b->bytes / tpk_dtype_size(b->dtype));
  float chunk[256];
  for (int64_t at = 0; at < count; at += 256) {
    int64_t m = count - at < 256 ? count - at : 256;
    tpk_prims()->convert((int)b->dtype, TPK_PRIM_F32, (const char *)tpk_buffer_memory(b) + at * (int64_t)tpk_dtype_size(b->dtype), chunk, m);
    for (int64_t i = 0; i < m; i++)
      if (!isfinite(chunk[i])) {
        snprintf(why, n, "%s at element %" PRId64, isnan(chunk[i]) ? "NaN" : chunk[i] > 0 ? "Inf" : "-Inf", at + i);
        return false;
      }
  }
  return true;
}

/* What launching an op's program needs, worked out once per op and sizes
 * (the memo keeps it): its kernel, the values of its shape symbols, which
 * of the op's arguments are its lifted scalars, its outputs. */
typedef struct OpLaunch {
  TpkKernel *kernel;
  int kernels; /* its program's kernels, for the stats */
  int nsyms;
  TpkNamedInt *syms; /* nsyms; names: the kernel's */
  int nscalars;
  int scalar_arg[MAX_ARGS]; /* the argument each lifted scalar is (in the order bind_args lifts them) */
  TpkDType scalar_dtype[MAX_ARGS];
  int nouts;
  bool defined[MAX_OUTS]; /* an output ATen leaves undefined is not made */
  TpkDType out_dtype[MAX_OUTS];
  int out_rank[MAX_OUTS];
  int64_t (*out_shape)[TPK_MAX_RANK]; /* nouts */
} OpLaunch;

/* An OpLaunch with room for any op's sizes and shapes, as op_launch_of
 * fills it; the memo keeps only what is used (launch_keep): tables for
 * every size and output (~2 KB) made a new process's first step fault a
 * page every two ops it took from the cache folder. */
typedef struct OpLaunchRoom {
  OpLaunch ol;
  TpkNamedInt syms[MAX_SYMS];
  int64_t out_shape[MAX_OUTS][TPK_MAX_RANK];
} OpLaunchRoom;

static OpLaunch *launch_room(OpLaunchRoom *room) {
  room->ol.syms = room->syms;
  room->ol.out_shape = room->out_shape;
  return &room->ol;
}

/* ol's sizes and shapes copied out of line, as many as it has, in one
 * block (at out_shape, freed with it); false (both NULL) when memory is
 * short. */
static bool launch_keep(OpLaunch *ol) {
  size_t shapes = sizeof *ol->out_shape * (size_t)ol->nouts, syms = sizeof *ol->syms * (size_t)ol->nsyms;
  char *block = malloc(shapes + syms + 1);
  if (block) {
    memcpy(block, ol->out_shape, shapes);
    if (syms) memcpy(block + shapes, ol->syms, syms);
  }
  ol->out_shape = (int64_t(*)[TPK_MAX_RANK])block;
  ol->syms = block ? (TpkNamedInt *)(block + shapes) : NULL;
  return block != NULL;
}

/* An op's outputs as OpLaunch describes them: new buffers, pending until
 * the op has run; debug mode zeroes them, so that its NaN check never sees
 * old bytes in an op that leaves its values undefined (empty). A fused
 * op's get memory only if its window computes them (deferred: most are
 * intermediates inside its clusters); memory given at once would go back
 * untouched and be handed on, faulting, to the next buffer of its size. */
static TpkStatus make_outputs(TpkStream *s, const OpLaunch *ol, TpkBuffer **made) {
  for (int i = 0; i < ol->nouts; i++) {
    if (!ol->defined[i]) continue;
    TpkDType dt = ol->out_dtype[i];
    int rank = ol->out_rank[i];
    const int64_t *shape = ol->out_shape[i];
    TpkStatus st = s->mode == TPK_EAGER_DEBUG   ? tpk_buffer_create(s->dev, dt, rank, shape, &made[i])
                   : s->mode == TPK_EAGER_FUSED ? tpk_buffer_create_deferred(s->dev, dt, rank, shape, &made[i])
                                                : tpk_buffer_create_unfilled(s->dev, dt, rank, shape, &made[i]);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

/* A strict op runs at once, on the caller's thread, when its queue is idle
 * (so the order of the stream's work stays) and its tensors are small:
 * handing a launch to the worker (a wake-up, a context switch, the launch's
 * copies) costs more than running a few thousand elements. Its error is
 * kept for the next sync, as a queued op's is. */
enum { INLINE_BYTES = 64 << 10 };

static bool runs_inline(TpkStream *s, const Op *op, TpkBuffer *const *made, int nouts) {
  if (s->mode != TPK_EAGER_STRICT) return false;
  size_t bytes = 0;
  for (int i = 0; i < op->noperands; i++) bytes += op->operands[i]->bytes;
  for (int i = 0; i < nouts; i++) bytes += made[i] ? made[i]->bytes : 0;
  return bytes <= INLINE_BYTES && tpk_queue_idle(s->queue);
}

/* Run (debug, or strict inline) or queue (strict) op's launch on its
 * outputs `made`. */
static TpkStatus launch_op(TpkStream *s, const Op *op, const OpLaunch *ol, TpkBuffer *const *made) {
  TpkKernel *k = ol->kernel;
  TpkBuffer *args[MAX_OPERANDS + MAX_ARGS + MAX_OUTS];
  int na = 0, scalars_at;
  for (int i = 0; i < op->noperands; i++) args[na++] = op->operands[i];
  scalars_at = na;
  TpkStatus st = TPK_OK;
  for (int i = 0; st == TPK_OK && i < ol->nscalars; i++) {
    const TpkArg *a = &op->args[ol->scalar_arg[i]];
    double v = a->kind == TPK_ARG_FLOAT ? a->f : (double)a->i;
    if ((st = scalar_buffer(s->dev, ol->scalar_dtype[i], v, &args[na])) == TPK_OK) na++;
  }
  int scalars_end = na;
  for (int i = 0; i < ol->nouts; i++)
    if (made[i]) args[na++] = made[i];
  bool now = s->mode == TPK_EAGER_DEBUG || runs_inline(s, op, made, ol->nouts);
  if (st == TPK_OK && now) {
    TpkLaunchResult r;
    TpkLaunch L = {.args = args, .syms = ol->syms, .nsyms = ol->nsyms, .result = &r};
    st = tpk_kernel_launch_unsettled(k, &L);
    if (st != TPK_OK) {
      char *why = strdup(tpk_last_error());
      op_fail(op, st, why ? why : "out of memory");
      free(why);
    } else {
      s->stats.launches += ol->kernels;
      s->stats.sim_seconds += r.simulated ? r.sim.seconds : 0;
      char label[64];
      observed(s, op_label(op, label, sizeof label), op->position, op->position, ol->kernels, &r);
    }
    for (int i = 0; s->mode == TPK_EAGER_DEBUG && st == TPK_OK && i < ol->nouts; i++) {
      char why[128];
      if (made[i] && !finite(made[i], why, sizeof why)) {
        char msg[200];
        snprintf(msg, sizeof msg, "output %d has %s", i, why);
        st = op_fail(op, TPK_ERR_INVALID, msg);
      }
    }
    if (st != TPK_OK && s->mode == TPK_EAGER_STRICT) { /* the next sync's, as a queued op's */
      char label[64];
      char *why = strdup(tpk_last_error());
      TpkStr msg = {0};
      tpk_str_printf(&msg, "op #%" PRId64 " '%s': %s", op->position, op_label(op, label, sizeof label), why ? why : "failed");
      set_error(s, st, msg.data ? msg.data : "out of memory");
      tpk_str_free(&msg);
      free(why);
      st = TPK_OK;
    }
  } else if (st == TPK_OK) {
    Queued *q = calloc(1, sizeof *q);
    char label[64];
    if (!q) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    else {
      q->position = op->position;
      snprintf(q->op, sizeof q->op, "%s", op_label(op, label, sizeof label));
      q->kernels = ol->kernels;
      TpkLaunch L = {.args = args, .syms = ol->syms, .nsyms = ol->nsyms, .result = &q->result};
      st = tpk_queue_submit(s->queue, k, &L);
      if (st == TPK_OK) {
        *s->queued_tail = q;
        s->queued_tail = &q->next;
        for (int i = 0; i < op->noperands; i++) mark(s, op->operands[i], false);
        for (int i = 0; i < ol->nouts; i++)
          if (made[i]) mark(s, made[i], true);
      } else {
        free(q);
      }
    }
  }
  for (int i = scalars_at; i < scalars_end; i++) tpk_buffer_destroy(args[i]);
  return st;
}

/* ---- the memo: an op seen before at the same sizes ----------------------------------
 *
 * A training loop's ops are, step after step, ops the stream has seen at
 * the same sizes. The memo keeps, per *signature* — the op's name and
 * arguments as given, a tensor by which operand it is, its dtype and its
 * shape, floats aside — what launching it takes (OpLaunch) and its
 * program, held; in fused mode, its outputs' types, its layout and how it
 * built alone (what record() takes: the window is keyed from the records
 * at the sync as before). Such an op is a hash of its signature, one probe
 * and a compare: no key in symbols, no layout, graph or program looked up
 * in the compilation cache (in fused mode that was most of an op's cost:
 * the char-GPT step's 281 ops, ~5 us each). A float is compared too unless
 * the op's graph takes it as a rank-0 input (a learning rate). A miss
 * takes the way above and leaves its result in the memo: a chain per
 * slot, so ops whose hashes share a slot do not evict each other (one
 * entry a slot, the char-GPT step's 305 ops missed 64 a step, each built
 * alone again); an entry of the same signature with other floats is
 * replaced, and past MEMO_MAX entries the memo starts over. */
struct Memo {
  Memo *next; /* in its slot's chain */
  uint64_t serial; /* the stream's count of entries put when this one was: no two alike */
  uint64_t hash;
  int nwords;
  uint64_t *words;
  int nargs;
  bool float_lifted[MAX_ARGS];
  uint64_t float_bits[MAX_ARGS]; /* the other floats: constants of its graph */
  TpkUnit *program;              /* held; NULL in fused mode, which records instead: */
  OpLaunch launch;
  Layout lay;                    /* fused: what record() takes */
  /* fused: record_own's sizes, own_n symbols then own_nconst constants
   * (malloc'd, NULL when none): out of line, as a whole Syms (~1 KB) a
   * memo made a new process's first step fault a page every two ops */
  int64_t *own;
  int own_n, own_nconst;
  bool own_factor;
};

static void sig_word(Sig *g, uint64_t w) {
  if (g->n < MAX_SIG) g->w[g->n++] = w;
  else g->failed = true;
  g->hash = (g->hash ^ w) * UINT64_C(0x100000001b3) + (g->hash >> 29);
}

static void sig_str(Sig *g, const char *s) {
  size_t len = s ? strlen(s) : (size_t)-1;
  sig_word(g, (uint64_t)len);
  for (size_t i = 0; s && i < len; i += 8) {
    uint64_t w = 0;
    memcpy(&w, s + i, len - i < 8 ? len - i : 8);
    sig_word(g, w);
  }
}

static void sig_buffer(Sig *g, const Op *op, const TpkBuffer *b) {
  sig_word(g, (uint64_t)operand_id((void *)op, (TpkBuffer *)b));
  sig_word(g, (uint64_t)b->dtype << 8 | (uint64_t)b->rank);
  for (int d = 0; d < b->rank; d++) sig_word(g, (uint64_t)b->shape[d]);
}

/* op's signature, its hash in *hash; false when it has none (sizes given
 * as expressions). */
static bool op_signature(const Op *op, Sig *g, uint64_t *hash) {
  g->n = 0;
  g->failed = false;
  g->hash = UINT64_C(0xcbf29ce484222325);
  if (op->name) sig_str(g, op->name);
  else for (int i = 0; i < 3; i++) sig_word(g, op->kernel_id[i]);
  sig_word(g, (uint64_t)op->nargs);
  for (int i = 0; i < op->nargs; i++) {
    const TpkArg *a = &op->args[i];
    sig_str(g, a->name);
    sig_word(g, (uint64_t)a->kind);
    switch (a->kind) {
    case TPK_ARG_NONE:
    case TPK_ARG_FLOAT: break; /* compared apart */
    case TPK_ARG_VALUE: sig_buffer(g, op, a->buffer); break;
    case TPK_ARG_VALUES:
      sig_word(g, (uint64_t)a->n);
      for (int j = 0; j < a->n; j++) sig_buffer(g, op, a->buffers[j]);
      break;
    case TPK_ARG_INT:
    case TPK_ARG_BOOL:
      if (a->sym) return false;
      sig_word(g, (uint64_t)a->i);
      break;
    case TPK_ARG_INTS:
      if (a->syms) return false;
      sig_word(g, (uint64_t)a->n);
      for (int j = 0; j < a->n; j++) sig_word(g, (uint64_t)a->ints[j]);
      break;
    case TPK_ARG_DTYPE: sig_word(g, (uint64_t)a->dtype); break;
    case TPK_ARG_STR: sig_str(g, a->str); break;
    }
  }
  if (g->failed) return false;
  *hash = tpk_hash_mix(g->hash);
  return true;
}

static void memo_free(Memo *m) {
  if (!m) return;
  tpk_unit_release(m->program);
  free(m->words);
  free(m->own);
  free(m->launch.out_shape); /* and its syms: one block (launch_keep) */
  free(m);
}

static void memo_clear(TpkStream *s) {
  for (int i = 0; s->memo && i < MEMO_SLOTS; i++)
    for (Memo *m = s->memo[i], *next; m; m = next) {
      next = m->next;
      memo_free(m);
    }
  free(s->memo);
  s->memo = NULL;
  s->nmemo = 0;
}

/* Put m in the memo (its slot's chain, first), instead of an entry of the
 * same signature (other floats); m freed when memory is short. */
static const Memo *memo_put(TpkStream *s, Memo *m) {
  if (s->nmemo >= MEMO_MAX) memo_clear(s);
  if (!s->memo && !(s->memo = calloc(MEMO_SLOTS, sizeof *s->memo))) {
    memo_free(m);
    return NULL;
  }
  for (Memo **at = &s->memo[m->hash % MEMO_SLOTS]; *at; at = &(*at)->next) {
    Memo *old = *at;
    if (old->hash == m->hash && old->nwords == m->nwords && memcmp(old->words, m->words, sizeof *m->words * (size_t)m->nwords) == 0) {
      *at = old->next;
      memo_free(old);
      s->nmemo--;
      break;
    }
  }
  m->next = s->memo[m->hash % MEMO_SLOTS];
  m->serial = ++s->memo_serial;
  s->memo[m->hash % MEMO_SLOTS] = m;
  s->nmemo++;
  return m;
}

/* The memo's entry for op (its signature g, hash h), or NULL. */
/* Is m the entry of op (its signature g, hash h)? */
static bool memo_matches(const Memo *m, const Op *op, const Sig *g, uint64_t h) {
  if (!m || m->hash != h || m->nwords != g->n || memcmp(m->words, g->w, sizeof *g->w * (size_t)g->n) != 0) return false;
  for (int i = 0; i < op->nargs; i++) {
    uint64_t bits;
    memcpy(&bits, &op->args[i].f, sizeof bits);
    if (op->args[i].kind == TPK_ARG_FLOAT && !m->float_lifted[i] && m->float_bits[i] != bits) return false;
  }
  return true;
}

/* m's own sizes: n symbols then nconst constants. False when memory is short. */
static bool memo_own(Memo *m, const int64_t *v, int n, const int64_t *consts, int nconst) {
  m->own_n = n;
  m->own_nconst = nconst;
  if (!(n + nconst)) return true;
  if (!(m->own = malloc(sizeof *m->own * (size_t)(n + nconst)))) return false;
  memcpy(m->own, v, sizeof *m->own * (size_t)n);
  memcpy(m->own + n, consts, sizeof *m->own * (size_t)nconst);
  return true;
}

static const Memo *memo_find(const TpkStream *s, const Op *op, const Sig *g, uint64_t h) {
  for (const Memo *m = s->memo ? s->memo[h % MEMO_SLOTS] : NULL; m; m = m->next)
    if (memo_matches(m, op, g, h)) return m;
  return NULL;
}

/* Keep what op (bound as ob) took to launch in the memo, with its program
 * (held), or in fused mode (program NULL) to record it (lay). Nothing kept
 * when memory is short: the memo is an accelerator. */
static const Memo *memo_keep(TpkStream *s, const Op *op, const Layout *lay, const OpBound *ob, const Sig *g, uint64_t h,
                             TpkUnit *program, const OpLaunch *ol) {
  Memo *m = calloc(1, sizeof *m);
  if (!m || !(m->words = malloc(sizeof *m->words * (size_t)(g->n + 1)))) {
    free(m);
    return NULL;
  }
  m->hash = h;
  m->nwords = g->n;
  m->nargs = op->nargs;
  memcpy(m->words, g->w, sizeof *g->w * (size_t)g->n);
  for (int i = 0; i < op->nargs; i++) {
    m->float_lifted[i] = op->args[i].kind == TPK_ARG_FLOAT && ob->args[i].kind == TPK_ARG_VALUE;
    memcpy(&m->float_bits[i], &op->args[i].f, sizeof m->float_bits[i]);
  }
  m->launch = *ol;
  if (!launch_keep(&m->launch)) {
    memo_free(m);
    return NULL;
  }
  if (program) tpk_unit_retain(program);
  m->program = program;
  m->lay = *lay;
  if (!program) {
    Syms own = {0};
    record_own(op, lay, ob, &own);
    if (!memo_own(m, own.v, own.n, own.consts, own.nconst)) {
      memo_free(m);
      return NULL;
    }
    m->own_factor = own.factor;
  }
  return memo_put(s, m);
}

/* ---- the memo in the cache folder ---------------------------------------------------
 *
 * A new process's first step would build each op of its windows alone
 * (its layout's probes, its graph under each policy of sizes, a standard
 * kernel checked from its source for an op that calls one) only to learn
 * what the memo of an earlier process knew after one step. So a fused
 * window whose first op neither the memo nor the folder had keeps its ops'
 * memo entries in the cache folder (a unit's bytes, host/jit.h:
 * authenticated, tpk's build in the key) under that first op's signature;
 * a stream whose window starts with an op its memo misses looks there for
 * the entries under that op's signature, once per signature, and takes
 * its ops from them as from the memo (words and floats compared alike).
 * The entries are words (FolderMemo), after a tag: */
static const char folder_memo_tag[8] = {'M', 't', 'p', 'k', 'o', 'p', 's', '1'};

/* Entries loaded from one folder unit, indexed by their hashes. */
struct FolderMemo {
  uint64_t *words; /* the count, then the entries */
  size_t nwords;
  int n;
  size_t *at;      /* each entry's first word, sorted by hash */
  FolderMemo *next;
};

/* A memo entry as words: hash, signature (its length, its words), the
 * arguments' floats (count, lifted bits, bits), the lifted scalars (count,
 * argument and dtype each), the outputs (count, then defined, dtype, rank
 * and shape each), the layout (lift and value bits), the sizes it kept
 * (seeds, constants, whether factored). */
static void folder_put(TpkStr *out, uint64_t w) { tpk_str_putn(out, (const char *)&w, sizeof w); }

static void folder_put_memo(TpkStr *out, const Memo *m) {
  folder_put(out, m->hash);
  folder_put(out, (uint64_t)m->nwords);
  tpk_str_putn(out, (const char *)m->words, sizeof *m->words * (size_t)m->nwords);
  uint64_t lifted = 0, lift = 0, value = 0;
  for (int i = 0; i < MAX_ARGS; i++) {
    lifted |= (uint64_t)m->float_lifted[i] << i;
    lift |= (uint64_t)m->lay.lift[i] << i;
    value |= (uint64_t)m->lay.value[i] << i;
  }
  folder_put(out, (uint64_t)m->nargs);
  folder_put(out, lifted);
  for (int i = 0; i < m->nargs; i++) folder_put(out, m->float_bits[i]);
  const OpLaunch *ol = &m->launch;
  folder_put(out, (uint64_t)ol->nscalars);
  for (int i = 0; i < ol->nscalars; i++) {
    folder_put(out, (uint64_t)ol->scalar_arg[i]);
    folder_put(out, (uint64_t)ol->scalar_dtype[i]);
  }
  folder_put(out, (uint64_t)ol->nouts);
  for (int i = 0; i < ol->nouts; i++) {
    folder_put(out, ol->defined[i]);
    folder_put(out, (uint64_t)ol->out_dtype[i]);
    folder_put(out, (uint64_t)ol->out_rank[i]);
    for (int d = 0; d < ol->out_rank[i]; d++) folder_put(out, (uint64_t)ol->out_shape[i][d]);
  }
  folder_put(out, lift);
  folder_put(out, value);
  folder_put(out, (uint64_t)m->own_n);
  for (int i = 0; i < m->own_n; i++) folder_put(out, (uint64_t)m->own[i]);
  folder_put(out, (uint64_t)m->own_nconst);
  for (int i = 0; i < m->own_nconst; i++) folder_put(out, (uint64_t)m->own[m->own_n + i]);
  folder_put(out, m->own_factor);
}

/* Reading words, bounded: past the end (or a count over its limit) is bad. */
typedef struct Words {
  const uint64_t *p, *end;
  bool bad;
} Words;

static uint64_t word(Words *r) {
  if (r->p >= r->end) {
    r->bad = true;
    return 0;
  }
  return *r->p++;
}

static int count(Words *r, int max) {
  uint64_t n = word(r);
  if (max < 0 || n > (uint64_t)max) r->bad = true;
  return r->bad ? 0 : (int)n;
}

/* The entry at r as a memo entry (m NULL: only stepped over); false when
 * its words are not one. */
static bool folder_read_memo(Words *r, Memo *m) {
  Memo scratch;
  if (!m) m = &scratch;
  memset(m, 0, sizeof *m);
  m->hash = word(r);
  m->nwords = count(r, MAX_SIG);
  if (r->bad || r->end - r->p < m->nwords) return false;
  const uint64_t *words = r->p;
  r->p += m->nwords;
  if (m != &scratch) {
    if (!(m->words = malloc(sizeof *m->words * (size_t)(m->nwords + 1)))) return false;
    memcpy(m->words, words, sizeof *m->words * (size_t)m->nwords);
  }
  m->nargs = count(r, MAX_ARGS);
  uint64_t lifted = word(r);
  for (int i = 0; i < m->nargs; i++) m->float_lifted[i] = lifted >> i & 1, m->float_bits[i] = word(r);
  OpLaunch *ol = &m->launch;
  int64_t shapes[MAX_OUTS][TPK_MAX_RANK];
  ol->nscalars = count(r, MAX_ARGS);
  for (int i = 0; i < ol->nscalars; i++) {
    ol->scalar_arg[i] = count(r, m->nargs - 1);
    ol->scalar_dtype[i] = (TpkDType)count(r, TPK_DTYPE_COUNT - 1);
  }
  ol->nouts = count(r, MAX_OUTS);
  for (int i = 0; i < ol->nouts; i++) {
    ol->defined[i] = count(r, 1);
    ol->out_dtype[i] = (TpkDType)count(r, TPK_DTYPE_COUNT - 1);
    ol->out_rank[i] = count(r, TPK_MAX_RANK);
    for (int d = 0; d < ol->out_rank[i]; d++) {
      shapes[i][d] = (int64_t)word(r);
      r->bad |= shapes[i][d] < 0;
    }
  }
  uint64_t lift = word(r), value = word(r);
  for (int i = 0; i < MAX_ARGS; i++) m->lay.lift[i] = lift >> i & 1, m->lay.value[i] = value >> i & 1;
  int64_t v[MAX_SYMS], consts[MAX_SYMS];
  int nv = count(r, MAX_SYMS);
  for (int i = 0; i < nv; i++) v[i] = (int64_t)word(r);
  int nconst = count(r, MAX_SYMS);
  for (int i = 0; i < nconst; i++) consts[i] = (int64_t)word(r);
  bool factor = count(r, 1);
  if (m != &scratch && !r->bad) r->bad = !memo_own(m, v, nv, consts, nconst);
  m->own_factor = factor;
  ol->out_shape = shapes;
  ol->nsyms = 0; /* fused: no launch of its own */
  if (m != &scratch && !r->bad) r->bad = !launch_keep(ol);
  if (m == &scratch || !r->bad) {
    if (m == &scratch) ol->out_shape = NULL;
    return !r->bad;
  }
  free(m->words);
  free(m->own);
  m->words = NULL;
  m->own = NULL;
  ol->out_shape = NULL;
  return false;
}

static void folder_memo_free(FolderMemo *fm) {
  for (FolderMemo *next; fm; fm = next) {
    next = fm->next;
    free(fm->words);
    free(fm->at);
    free(fm);
  }
}

/* Entries parsed from a unit's bytes, indexed; NULL when they are not entries. */
static FolderMemo *folder_memo_parse(const char *bytes, size_t len) {
  if (len < sizeof folder_memo_tag || memcmp(bytes, folder_memo_tag, sizeof folder_memo_tag) != 0 ||
      (len - sizeof folder_memo_tag) % sizeof(uint64_t) != 0)
    return NULL;
  FolderMemo *fm = calloc(1, sizeof *fm);
  if (!fm) return NULL;
  fm->nwords = (len - sizeof folder_memo_tag) / sizeof(uint64_t);
  fm->words = malloc(sizeof *fm->words * (fm->nwords + 1));
  if (fm->words) memcpy(fm->words, bytes + sizeof folder_memo_tag, sizeof *fm->words * fm->nwords);
  Words r = {fm->words, fm->words ? fm->words + fm->nwords : NULL, !fm->words};
  fm->n = count(&r, WINDOW_OPS);
  fm->at = r.bad ? NULL : malloc(sizeof *fm->at * (size_t)(fm->n + 1));
  for (int i = 0; fm->at && i < fm->n && !r.bad; i++) {
    fm->at[i] = (size_t)(r.p - fm->words);
    r.bad = !folder_read_memo(&r, NULL);
  }
  if (!fm->at || r.bad || r.p != r.end) {
    folder_memo_free(fm);
    return NULL;
  }
  /* sorted by hash: insertion, a window's ops are few */
  for (int i = 1; i < fm->n; i++)
    for (int j = i; j > 0 && fm->words[fm->at[j]] < fm->words[fm->at[j - 1]]; j--) {
      size_t t = fm->at[j];
      fm->at[j] = fm->at[j - 1];
      fm->at[j - 1] = t;
    }
  return fm;
}

/* op's entry among those loaded, put in the memo; NULL when none is. */
static const Memo *folder_find(TpkStream *s, const Op *op, const Sig *g, uint64_t h) {
  for (FolderMemo *fm = s->folder_memo; fm; fm = fm->next) {
    int lo = 0, hi = fm->n;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (fm->words[fm->at[mid]] < h) lo = mid + 1;
      else hi = mid;
    }
    for (; lo < fm->n && fm->words[fm->at[lo]] == h; lo++) {
      Memo *m = calloc(1, sizeof *m);
      Words r = {fm->words + fm->at[lo], fm->words + fm->nwords, false};
      if (!m || !folder_read_memo(&r, m) || !memo_matches(m, op, g, h)) {
        memo_free(m);
        continue;
      }
      return memo_put(s, m);
    }
  }
  return NULL;
}

/* op, which the memo missed (fused): from the entries loaded, or, for a
 * window's first op, from the folder's entries under its signature; when
 * the folder has none, the window keeps its ops' entries there. */
static const Memo *memo_from_folder(TpkStream *s, const Op *op, const Sig *g, uint64_t h) {
  const Memo *m = folder_find(s, op, g, h);
  TpkJit *jit = tpk_context_jit(s->ctx);
  if (m || s->w.nrecords || !jit || s->folder_tried[h % FOLDER_TRIED] == h) return m;
  s->folder_tried[h % FOLDER_TRIED] = h;
  uint64_t *key = malloc(sizeof *key * (size_t)(g->n + 1));
  if (!key) return NULL;
  key[0] = KEY_OPMEMO;
  memcpy(key + 1, g->w, sizeof *key * (size_t)g->n);
  size_t len;
  char *bytes = tpk_jit_unit_load(jit, key, g->n + 1, &len);
  FolderMemo *fm = bytes ? folder_memo_parse(bytes, len) : NULL;
  free(bytes);
  if (fm) {
    fm->next = s->folder_memo;
    s->folder_memo = fm;
    free(key);
    return folder_find(s, op, g, h);
  }
  free(s->w.memo_key); /* none there (or not entries): this window keeps its own */
  s->w.memo_key = key;
  s->w.memo_key_words = g->n + 1;
  return NULL;
}

/* m, an op about to be recorded, among the entries its window keeps. */
static void window_keep_memo(TpkStream *s, const Memo *m) {
  if (!s->w.memo_key || !m) return;
  folder_put_memo(&s->w.memos, m);
  s->w.nmemos++;
}

/* The window's ops' entries into the folder, when it keeps them (it ran). */
static void window_store_memos(TpkStream *s) {
  Window *w = &s->w;
  TpkJit *jit = tpk_context_jit(s->ctx);
  if (!w->memo_key || !w->nmemos || w->memos.failed || !jit) return;
  TpkStr bytes = {0};
  tpk_str_putn(&bytes, folder_memo_tag, sizeof folder_memo_tag);
  folder_put(&bytes, (uint64_t)w->nmemos);
  tpk_str_putn(&bytes, w->memos.data, w->memos.len);
  if (!bytes.failed) tpk_jit_unit_store(jit, w->memo_key, w->memo_key_words, bytes.data, bytes.len);
  tpk_str_free(&bytes);
}

/* ---- a warm start ----------------------------------------------------------------------
 *
 * A new process's first step pays for what later steps find in memory:
 * its windows' programs read from the cache folder (parsed, their code
 * loaded: 0.65 ms for the MLP step's window), and memory faulted in by its
 * first launch (huge pages: 0.2-0.5 ms, and 5-10 ms on a virtual machine
 * whose host has not backed the pages yet: half the MLP's first steps
 * here). So a fused stream whose windows repeat (a loop's second step), or
 * that ends, keeps in the cache folder the keys of the windows it ran, the
 * sizes of its context's huge scratch blocks and how many arenas its
 * device cut buffers from: words after a tag, a unit's bytes (host/jit.h:
 * authenticated, this build's) under KEY_WARM and the device's name. A
 * context's first fused stream on a device reads them and, on a thread of
 * its own while the caller makes its inputs, loads those windows into
 * memory and faults that memory in. The stream's first window waits for
 * the thread (it is usually done), so no lookup races with it; a window
 * the folder no longer has is skipped. */
static const char warm_tag[8] = {'W', 't', 'p', 'k', 'w', 'r', 'm', '1'};

typedef struct WarmJob {
  TpkContext *ctx; /* held */
  TpkDevice *dev;
  uint64_t *words; /* after the tag: scratch sizes (count, each), arenas, windows (count, each: length, words) */
  size_t nwords;
} WarmJob;

static void warm_key(const TpkDevice *dev, uint64_t key[2]) {
  key[0] = KEY_WARM;
  key[1] = tpk_hash_bytes(dev->name, strlen(dev->name));
}

static void *warm_run(void *arg) {
  WarmJob *j = arg;
  Words r = {j->words, j->words + j->nwords, false};
  size_t caps[WARM_SCRATCH];
  int ncaps = count(&r, WARM_SCRATCH);
  for (int i = 0; i < ncaps; i++) caps[i] = (size_t)word(&r);
  int arenas = count(&r, 64);
  int nwindows = count(&r, WARM_WINDOWS);
  TpkUnits *units = tpk_context_units(j->ctx);
  /* the windows first: the first sync needs them before the first launch needs memory */
  for (int i = 0; i < nwindows && !r.bad; i++) {
    int n = count(&r, MAX_KEY);
    if (r.bad || n < 1 || (size_t)(r.end - r.p) < (size_t)n) break;
    TpkUnit *unit;
    bool claimed;
    if (tpk_units_get_kept(units, -1, &window_codec, r.p, n, &unit, &claimed) == TPK_OK) {
      if (claimed) tpk_unit_abandon(units, unit); /* not in the folder (any more): built when needed */
      else tpk_unit_release(unit);
    }
    r.p += n;
  }
  if (!r.bad) {
    tpk_scratch_warm(j->ctx, caps, ncaps);
    tpk_device_warm(j->dev, arenas);
  }
  free(j->words);
  tpk_context_release(j->ctx);
  free(j);
  return NULL;
}

/* At a context's first fused stream on s's device: start the warm start
 * that the folder has for the device, if any. */
static void warm_start(TpkStream *s) {
  TpkJit *jit = tpk_context_jit(s->ctx);
  if (s->mode != TPK_EAGER_FUSED || !jit || atomic_exchange(&s->dev->warmed, true)) return;
  uint64_t key[2];
  warm_key(s->dev, key);
  size_t len;
  char *bytes = tpk_jit_unit_load(jit, key, 2, &len);
  WarmJob *j = bytes && len > sizeof warm_tag && memcmp(bytes, warm_tag, sizeof warm_tag) == 0 &&
                       (len - sizeof warm_tag) % sizeof(uint64_t) == 0
                   ? calloc(1, sizeof *j)
                   : NULL;
  if (j) {
    j->nwords = (len - sizeof warm_tag) / sizeof(uint64_t);
    j->words = malloc(sizeof *j->words * j->nwords);
    if (j->words) memcpy(j->words, bytes + sizeof warm_tag, sizeof *j->words * j->nwords);
    j->ctx = s->ctx;
    j->dev = s->dev;
    s->warm.read_hash = tpk_hash_bytes(bytes, len);
  }
  free(bytes);
  if (!j || !j->words) {
    if (j) free(j);
    return;
  }
  tpk_context_retain(j->ctx);
  s->warm.pid = getpid();
  s->warm.running = pthread_create(&s->warm.thread, NULL, warm_run, j) == 0;
  if (!s->warm.running) { /* no thread: it is only an early start */
    tpk_context_release(j->ctx);
    free(j->words);
    free(j);
  }
}

/* Wait for s's warm start, if it runs. s->lock held (the thread takes no stream's lock). */
static void warm_join(TpkStream *s) {
  if (!s->warm.running) return;
  s->warm.running = false;
  if (s->warm.pid == getpid()) pthread_join(s->warm.thread, NULL);
}

static void warm_free(Warm *w) {
  for (int i = 0; i < w->n; i++) free(w->keys[i]);
  w->n = 0;
}

/* s's warm start for the next process into the cache folder, once (and
 * not when it is what this one's read). s->lock held. */
static void warm_keep(TpkStream *s) {
  TpkJit *jit = tpk_context_jit(s->ctx);
  if (s->warm.kept || !s->warm.n || !jit) return;
  s->warm.kept = true;
  size_t caps[WARM_SCRATCH];
  int ncaps = tpk_scratch_huge(s->ctx, caps, WARM_SCRATCH);
  TpkStr bytes = {0};
  tpk_str_putn(&bytes, warm_tag, sizeof warm_tag);
  folder_put(&bytes, (uint64_t)ncaps);
  for (int i = 0; i < ncaps; i++) folder_put(&bytes, caps[i]);
  folder_put(&bytes, (uint64_t)tpk_device_arenas(s->dev));
  folder_put(&bytes, (uint64_t)s->warm.n);
  for (int i = 0; i < s->warm.n; i++) {
    folder_put(&bytes, (uint64_t)s->warm.nwords[i]);
    tpk_str_putn(&bytes, (const char *)s->warm.keys[i], sizeof(uint64_t) * (size_t)s->warm.nwords[i]);
  }
  uint64_t key[2];
  warm_key(s->dev, key);
  if (!bytes.failed && tpk_hash_bytes(bytes.data, bytes.len) != s->warm.read_hash)
    tpk_jit_unit_store(jit, key, 2, bytes.data, bytes.len);
  tpk_str_free(&bytes);
}

/* A window unit s ran: among its keys; seen before, the stream has gone
 * round its loop once, and its warm start is kept. s->lock held. */
static void warm_note(TpkStream *s, const TpkUnit *window) {
  int n;
  const uint64_t *key = tpk_unit_key(window, &n);
  for (int i = 0; i < s->warm.n; i++)
    if (s->warm.nwords[i] == n && memcmp(s->warm.keys[i], key, sizeof *key * (size_t)n) == 0) {
      warm_keep(s);
      return;
    }
  if (s->warm.n == WARM_WINDOWS || s->warm.kept) return;
  uint64_t *copy = malloc(sizeof *copy * (size_t)n);
  if (!copy) return;
  memcpy(copy, key, sizeof *copy * (size_t)n);
  s->warm.keys[s->warm.n] = copy;
  s->warm.nwords[s->warm.n++] = n;
}

/* What launching op's program p takes, from op bound as its graph g was
 * (ob); p NULL (fused): its outputs only. */
static TpkStatus op_launch_of(const Op *op, const OpGraph *g, const OpBound *ob, TpkProgram *p, OpLaunch *ol) {
  ol->kernel = NULL;
  ol->nsyms = ol->nscalars = 0;
  if (p) {
    TpkStatus st = tpk_program_kernel(p, tpk_program_kernel_name(p, 0), &ol->kernel);
    if (st != TPK_OK) return st;
    ol->kernels = tpk_program_kernel_runs(p);
    ol->nsyms = launch_syms(ol->kernel, &ob->syms, ol->syms);
  }
  /* the scalars bind_args lifted, in its order: floats and ints bound as values */
  for (int i = 0; i < op->nargs; i++)
    if (lifted_scalar(&op->args[i], &ob->args[i]))
      ol->scalar_arg[ol->nscalars++] = i;
  if (ol->nscalars != ob->nscalars) return op_fail(op, TPK_ERR_INTERNAL, "its lifted scalars are not its arguments");
  memcpy(ol->scalar_dtype, ob->scalar_dtype, sizeof *ol->scalar_dtype * (size_t)ob->nscalars);
  ol->nouts = g->nouts;
  for (int i = 0; i < g->nouts; i++) {
    const TpkType *t = g->types[i];
    ol->defined[i] = t != NULL;
    if (!t) continue;
    ol->out_dtype[i] = t->dtype;
    ol->out_rank[i] = t->rank;
    for (int d = 0; d < t->rank; d++)
      if (!tpk_dim_eval(t->dims[d], sym_lookup, (void *)&ob->syms, &ol->out_shape[i][d]))
        return op_fail(op, TPK_ERR_INTERNAL, "a result's size does not evaluate");
  }
  return TPK_OK;
}

/* Submit op: s->lock held, its operands settled. */
static TpkStatus submit(TpkStream *s, Op *op, TpkBuffer **outs, int max, int *n) {
  TpkContext *ctx = s->ctx;
  if (s->dropped || tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_op: the stream's context was destroyed");
  op->position = ++s->position;
  s->stats.ops++;
  for (int i = 0; i < op->noperands; i++)
    if (op->operands[i]->dev != s->dev) return op_fail(op, TPK_ERR_INVALID, "an operand is on another device than the stream");
  TpkBuffer *made[MAX_OUTS] = {0};
  TpkStatus st;
  int nouts;
  /* seen before at these sizes: launched (debug, strict) or recorded
   * (fused) as it was */
  Sig *sig = &s->sig;
  uint64_t h = 0;
  if (!op_signature(op, sig, &h)) sig = NULL;
  const Memo *m = sig ? memo_find(s, op, sig, h) : NULL;
  s->stats.memo_hits += m != NULL;
  if (!m && sig && s->mode == TPK_EAGER_FUSED) m = memo_from_folder(s, op, sig, h);
  if (m) {
    nouts = m->launch.nouts;
    st = make_outputs(s, &m->launch, made);
    if (s->mode == TPK_EAGER_FUSED) {
      window_keep_memo(s, m);
      if (st == TPK_OK) st = record(s, op, m->serial, &m->lay, m->own, m->own_n, m->own_nconst, m->launch.nscalars, made, nouts);
    } else {
      s->stats.cache_hits++;
      tpk_units_count(tpk_context_units(ctx), TPK_UNIT_EAGER, true);
      if (st == TPK_OK) st = launch_op(s, op, &m->launch, made);
    }
  } else {
    TpkUnit *layout_unit = NULL, *graph_unit = NULL, *prog_unit = NULL;
    st = find_layout(ctx, op, &layout_unit);
    if (st != TPK_OK) return st;
    const Layout *lay = tpk_unit_payload(layout_unit);
    Key key = {0};
    st = find_op_graph(ctx, op, lay, &s->hints, &key, &graph_unit);
    const OpGraph *g = graph_unit ? tpk_unit_payload(graph_unit) : NULL;
    if (st == TPK_OK && s->mode != TPK_EAGER_FUSED) {
      bool built;
      st = find_op_program(ctx, op, g, &key, &prog_unit, &built);
      if (st == TPK_OK) s->stats.compiles += built, s->stats.cache_hits += !built;
    }
    key_free(&key);
    /* the op bound as its graph was: the outputs sized from its result
     * types in its symbols (written whole by the op before anyone reads
     * them: pending until then), its scalars */
    OpBound *ob = st == TPK_OK ? calloc(1, sizeof *ob) : NULL;
    OpLaunchRoom *room = st == TPK_OK ? malloc(sizeof *room) : NULL;
    OpLaunch *ol = room ? launch_room(room) : NULL;
    if (st == TPK_OK && (!ob || !ol)) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    if (st == TPK_OK) st = op_bind(op, lay, g->policy, false, ob, NULL);
    op->hint = NULL; /* the hint's words may go with the next key */
    if (st == TPK_OK) st = op_launch_of(op, g, ob, prog_unit ? tpk_unit_payload(prog_unit) : NULL, ol);
    if (st == TPK_OK) st = make_outputs(s, ol, made);
    nouts = st == TPK_OK ? g->nouts : 0;
    /* run it, queue it or record it */
    Syms own;
    if (st == TPK_OK && s->mode != TPK_EAGER_FUSED) {
      st = launch_op(s, op, ol, made);
      if (st == TPK_OK && sig && prog_unit) memo_keep(s, op, lay, ob, sig, h, prog_unit, ol);
    } else if (st == TPK_OK) {
      record_own(op, lay, ob, &own);
      const Memo *kept = sig ? memo_keep(s, op, lay, ob, sig, h, NULL, ol) : NULL;
      window_keep_memo(s, kept);
      int64_t sizes[2 * MAX_SYMS];
      memcpy(sizes, own.v, sizeof *sizes * (size_t)own.n);
      memcpy(sizes + own.n, own.consts, sizeof *sizes * (size_t)own.nconst);
      st = record(s, op, kept ? kept->serial : 0, lay, sizes, own.n, own.nconst, ob->nscalars, made, nouts);
    }
    if (ob) op_unbind(ob);
    free(ob);
    free(room);
    tpk_unit_release(prog_unit);
    tpk_unit_release(graph_unit);
    tpk_unit_release(layout_unit);
  }
  if (st != TPK_OK) {
    for (int i = 0; i < MAX_OUTS; i++) tpk_buffer_destroy(made[i]);
    return st;
  }
  for (int i = 0; i < nouts && i < max; i++) outs[i] = made[i];
  for (int i = max; i < nouts; i++) tpk_buffer_destroy(made[i]); /* the caller did not want them */
  *n = nouts;
  return TPK_OK;
}

/* The operands pending in other streams are settled before s's lock is
 * taken: no stream's lock is held while another syncs. */
static TpkStatus settle_others(TpkStream *s, const Op *op) {
  for (int i = 0; i < op->noperands; i++) {
    TpkStream *other = tpk_buffer_pending(op->operands[i]) ? pending_stream(op->operands[i]) : NULL;
    if (!other) continue;
    TpkStatus st = other == s ? TPK_OK : settle_stream(other);
    tpk_stream_release(other);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

static TpkStatus stream_submit(TpkStream *s, Op *op, TpkBuffer **outs, int max, int *n, const char *who) {
  *n = 0;
  if (!s) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: no stream", who);
  if (op->nargs < 0 || op->nargs > MAX_ARGS || (op->nargs && !op->args))
    return tpk_runtime_fail(TPK_ERR_INVALID, "%s: %d arguments (at most %d, with an array)", who, op->nargs, MAX_ARGS);
  if (max < 0 || (max && !outs)) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: no place for the outputs", who);
  op->ctx = s->ctx;
  TpkStatus st = collect_operands(op, who);
  if (st == TPK_OK) st = settle_others(s, op);
  if (st != TPK_OK) return st;
  pthread_mutex_lock(&s->lock);
  /* a view of what the window produced is bytes it cannot name: it runs first */
  if (s->mode == TPK_EAGER_FUSED && s->w.nrecords && reads_a_view_of_the_window(&s->w, op)) sync_locked(s);
  st = submit(s, op, outs, max, n);
  pthread_mutex_unlock(&s->lock);
  return st;
}

TpkStatus tpk_stream_op(TpkStream *s, const char *op, const TpkArg *args, int nargs, TpkBuffer **outs, int max, int *n) {
  if (!op) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_op: no op");
  Op o = {.name = op, .args = args, .nargs = nargs};
  return stream_submit(s, &o, outs, max, n, "tpk_stream_op");
}

TpkStatus tpk_stream_call(TpkStream *s, TpkKernel *k, const TpkArg *args, int nargs, TpkBuffer **outs, int max, int *n) {
  if (!k) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_call: no kernel");
  if (tpk_kernel_is_graph(k)) return tpk_graph_kernel_refused(k, "tpk_stream_call");
  if (s && tpk_program_context(tpk_kernel_program(k)) != s->ctx)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_call: kernel '%s' belongs to another context than the stream", tpk_kernel_ir(k)->name);
  const TpkFunc *f = tpk_kernel_ir(k);
  TpkFuncHash h = tpk_func_hash(f);
  Op o = {.kernel = k, .kernel_id = {h.lo, h.hi, tpk_hash_bytes(f->name, strlen(f->name))}, .args = args, .nargs = nargs};
  return stream_submit(s, &o, outs, max, n, "tpk_stream_call");
}
