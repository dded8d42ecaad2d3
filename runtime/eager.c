/*
 * eager.c — eager streams (tpk.h, "Eager streams"): ATen ops submitted one
 * at a time on buffers, run in one of three modes.
 *
 * Every op is first looked up by its *key*: its name, its arguments and its
 * operands' dtypes, with sizes by their symbolic form — each distinct size
 * (above 1) of its operands is a symbol s0, s1, ... in order of appearance,
 * and an int argument of a SymInt parameter that equals a symbol (or a
 * product of two) is that symbol. The unit under that key (units.c) holds
 * the op's one-op graph (ir/graph.h), built on the first sight of the key,
 * whose result types give the new output buffers' shapes at once. So an op
 * seen before builds nothing, and the same op at another sequence length
 * is the same key.
 *
 * Scalars that change every step (a learning rate, Adam's bias
 * corrections) must not make every op or window new: a float argument of
 * an ATen `Scalar` parameter (add's alpha, mul's other, addcmul's value,
 * lerp's weight; a kernel's float scalars) is passed as a rank-0 f32 input
 * of the graph, not a constant, and is no part of any key. Floats of
 * `float` parameters (layer norm's eps) and ints (dims, integer scalars)
 * are constants, in the key. Which parameters take a rank-0 value, and
 * which take symbolic sizes, is learnt from the builder on the first sight
 * of an op's argument layout (the layout unit: names and kinds of its
 * arguments) by building the op with each candidate argument lifted.
 *
 *   debug   the op's graph, compiled with one cluster per op
 *           (TPK_FUSE_NONE, cached by key), runs at once; float outputs
 *           are checked for NaN and Inf, and any error names the op, its
 *           operands' shapes and dtypes and its position ("op #12");
 *   strict  the same program is queued on the stream's queue, one launch
 *           per op; a sync waits for the queue, and the first op whose
 *           launch did not finish is the one its error names;
 *   fused   the op is recorded in the stream's window (its arguments
 *           copied, tensors as window values). At a sync, or when the
 *           window holds WINDOW_OPS ops, the window's key — its inputs'
 *           dtypes and symbolic shapes, each op's name and arguments with
 *           tensors as window values and sizes in the window's symbols,
 *           and which results are outputs — is looked up; a miss builds
 *           the window as one graph (inputs: the buffers it read but did
 *           not produce, and the lifted scalars; outputs: the buffers it
 *           produced that someone still holds: a buffer destroyed before
 *           the sync is not computed at all), fused (TPK_FUSE_ALL) and
 *           compiled; then it runs as one launch.
 *
 * Pending buffers. An op's outputs are new buffers, allocated at once; their
 * bytes are marked pending (device.h: the storage names the stream, which
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

#include "host/prims.h"
#include "ir/graph.h"

enum {
  WINDOW_OPS = 256, /* a fused window runs when it holds this many ops */
  MAX_ARGS = 24,    /* arguments of one op */
  MAX_OUTS = 16,    /* results of one op */
  MAX_OPERANDS = 64, /* tensors of one op */
  MAX_SYMS = 64,
  MAX_KEY = 1 << 16 /* words of a window's key */
};

/* What a unit's key starts with (beyond TPK_UNIT_KEY_WINDOW: eager's own). */
enum { KEY_LAYOUT = 101, KEY_OPTYPE, KEY_OPPROG };

/* ---- keys ------------------------------------------------------------------------ */

typedef struct Key {
  uint64_t *w;
  int n, cap;
  bool failed;
} Key;

static void key_put(Key *k, uint64_t word) {
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 256;
    uint64_t *w = cap <= MAX_KEY ? realloc(k->w, sizeof *w * (size_t)cap) : NULL;
    if (!w) {
      k->failed = true;
      return;
    }
    k->w = w;
    k->cap = cap;
  }
  k->w[k->n++] = word;
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
  *k = (Key){0};
}

/* ---- sizes by their symbolic form ----------------------------------------------- */

/* s0, s1, ...: each distinct size above 1, in order of appearance. */
typedef struct Syms {
  int n;
  int64_t v[MAX_SYMS];
} Syms;

static int sym_find(const Syms *t, int64_t v) {
  for (int i = 0; i < t->n; i++)
    if (t->v[i] == v) return i;
  return -1;
}

/* A tensor's dim as a word: a constant (0 or 1, or any size when the
 * table is full) or a symbol, added when new. */
static uint64_t dim_word(Syms *t, int64_t v) {
  int k = v > 1 ? sym_find(t, v) : -1;
  if (v > 1 && k < 0 && t->n < MAX_SYMS) {
    k = t->n;
    t->v[t->n++] = v;
  }
  return k >= 0 ? (uint64_t)k << 1 | 1 : (uint64_t)v << 1;
}

/* The text of dim word w in a builder ("s3", "1"). */
static void dim_text(uint64_t w, const Syms *t, char *buf, size_t n) {
  if (w & 1) snprintf(buf, n, "s%d", (int)(w >> 1));
  else snprintf(buf, n, "%" PRId64, (int64_t)(w >> 1));
  (void)t;
}

/* An int argument of a SymInt parameter by its symbolic form: a symbol,
 * a product of two, or itself. Writes the text ("s0*s2") into buf, or ""
 * for a constant; returns the key word of its form. */
static uint64_t int_form(const Syms *t, int64_t v, char *buf, size_t n) {
  buf[0] = 0;
  if (v <= 1) return (uint64_t)v << 2;
  int k = sym_find(t, v);
  if (k >= 0) {
    snprintf(buf, n, "s%d", k);
    return (uint64_t)k << 2 | 1;
  }
  for (int a = 0; a < t->n; a++)
    for (int b = a; b < t->n; b++)
      if (t->v[a] * t->v[b] == v && v / t->v[a] == t->v[b]) {
        snprintf(buf, n, "s%d*s%d", a, b);
        return ((uint64_t)a << 16 | (uint64_t)b) << 2 | 2;
      }
  return (uint64_t)v << 2;
}

static bool sym_lookup(void *ctx, const char *sym, int64_t *value) {
  const Syms *t = ctx;
  char *end;
  long k = sym[0] == 's' ? strtol(sym + 1, &end, 10) : -1;
  if (k < 0 || k >= t->n || *end) return false;
  *value = t->v[k];
  return true;
}

/* ---- arguments as the builder takes them ------------------------------------------ */

/* Which arguments of an op's layout (its arguments' names and kinds) the
 * builder takes lifted: floats as rank-0 values, ints as symbolic sizes. */
typedef struct Layout {
  bool lift[MAX_ARGS];
} Layout;

/* An op's arguments rewritten for a builder: tensors as value ids, lifted
 * floats as ids of rank-0 inputs, ints of SymInt parameters in the sizes'
 * symbolic form; strings and lists copied into `arena`. The ids come from
 * the Binder; the key words of the arguments go to `key`. */
typedef struct Binder {
  int (*tensor)(void *ctx, TpkBuffer *b); /* the value id of a tensor operand (-1: failed) */
  int (*scalar)(void *ctx, double v);     /* the value id of a new rank-0 input holding v */
  void *ctx;
  const Syms *syms;
  TpkArena *arena;
  bool probe; /* an int lifted is given as a symbolic size even when it is a constant */
} Binder;

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
        if ((o->value = b->scalar(b->ctx, a->f)) < 0) return TPK_ERR_NOMEM;
        key_put(key, 1); /* a lifted scalar: its value is no part of the key */
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
      if (a->kind == TPK_ARG_INT && (lift || a->sym)) {
        char text[64];
        uint64_t form = int_form(b->syms, a->i, text, sizeof text);
        /* a size given symbolically is taken as its value: the symbols
         * here are the stream's, by value */
        key_put(key, form);
        if (!text[0] && b->probe) snprintf(text, sizeof text, "%" PRId64, a->i);
        if (text[0] && !(o->sym = tpk_arena_strdup(b->arena, text))) return TPK_ERR_NOMEM;
      } else {
        key_put(key, (uint64_t)a->i);
      }
      break;
    case TPK_ARG_INTS: {
      int64_t *ints = tpk_arena_alloc(b->arena, sizeof *ints * (size_t)(a->n + 1));
      const char **syms = lift || a->syms ? tpk_arena_alloc(b->arena, sizeof *syms * (size_t)(a->n + 1)) : NULL;
      if (!ints || ((lift || a->syms) && !syms)) return TPK_ERR_NOMEM;
      key_put(key, (uint64_t)a->n);
      for (int j = 0; j < a->n; j++) {
        ints[j] = a->ints[j];
        if (!syms) {
          key_put(key, (uint64_t)a->ints[j]);
          continue;
        }
        char text[64];
        key_put(key, int_form(b->syms, a->ints[j], text, sizeof text));
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

/* ---- an op's own graph -------------------------------------------------------------- */

/* What one submitted op is: the ATen op or kernel, its arguments, and its
 * operands (the buffers its VALUE and VALUES arguments name, in order). */
typedef struct Op {
  const char *name;   /* the ATen op, or NULL for: */
  TpkKernel *kernel;  /* a kernel call */
  uint64_t kernel_id[3]; /* its IR's hash and name */
  const TpkArg *args;
  int nargs;
  TpkBuffer *operands[MAX_OPERANDS];
  int noperands;
  Syms syms; /* the operands' sizes */
  int64_t position;
} Op;

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

/* The layout's words: the op, its arguments' names and kinds. */
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

/* Building an op alone: its operands are inputs s-dimensioned, then one
 * rank-0 f32 input per lifted scalar. */
typedef struct Alone {
  const Op *op;
  TpkGraphBuilder *gb;
  TpkValue *values[MAX_OPERANDS + MAX_ARGS];
  int nvalues;
  TpkError *err;
  bool failed;
} Alone;

static int alone_tensor(void *ctx, TpkBuffer *b) {
  Alone *a = ctx;
  for (int i = 0; i < a->op->noperands; i++)
    if (a->op->operands[i] == b) return i;
  return -1;
}

static int alone_scalar(void *ctx, double v) {
  (void)v;
  Alone *a = ctx;
  if (a->nvalues == MAX_OPERANDS + MAX_ARGS) return -1;
  TpkValue *x;
  if (tpk_gb_input(a->gb, TPK_F32, 0, NULL, &x, a->err) != TPK_OK) return -1;
  a->values[a->nvalues] = x;
  return a->nvalues++;
}

/* The op built alone in a builder named `name`, with lay's arguments
 * lifted: its results (NULL: one ATen leaves undefined) made the graph's
 * outputs. The key words of its arguments go to key (may be NULL). */
static TpkStatus build_alone(const Op *op, const Layout *lay, bool concrete, bool probe, TpkGraphBuilder **gbp,
                             const TpkType **types, int *ntypes, TpkError *err) {
  TpkGraphBuilder *gb = *gbp = tpk_gb_new(op->name ? "eager_op" : "eager_call");
  if (!gb) return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  Alone a = {.op = op, .gb = gb, .err = err};
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  Syms syms = concrete ? (Syms){0} : op->syms;
  for (int i = 0; i < op->noperands; i++) {
    const TpkBuffer *b = op->operands[i];
    const TpkDim *dims[TPK_MAX_RANK];
    for (int d = 0; d < b->rank; d++) {
      char text[32];
      if (concrete) snprintf(text, sizeof text, "%" PRId64, b->shape[d]);
      else dim_text(dim_word(&syms, b->shape[d]), &syms, text, sizeof text);
      if (!(dims[d] = tpk_gb_dim(gb, text, err))) {
        tpk_arena_free(&arena);
        return err->code;
      }
    }
    if (tpk_gb_input(gb, b->dtype, b->rank, dims, &a.values[i], err) != TPK_OK) {
      tpk_arena_free(&arena);
      return err->code;
    }
  }
  a.nvalues = op->noperands;
  TpkArg args[MAX_ARGS];
  Key scratch = {0};
  Binder binder = {alone_tensor, alone_scalar, &a, &syms, &arena, probe};
  TpkStatus st = bind_args(op->args, op->nargs, lay, &binder, args, &scratch);
  key_free(&scratch);
  if (st != TPK_OK) {
    tpk_arena_free(&arena);
    return err->code ? err->code : tpk_error(err, st, "out of memory");
  }
  TpkValue *outs[MAX_OUTS];
  int nouts = 0;
  st = op->name ? tpk_gb_op(gb, op->name, args, op->nargs, a.values, a.nvalues, outs, MAX_OUTS, &nouts, err)
                : tpk_gb_call(gb, tpk_kernel_ir(op->kernel), args, op->nargs, a.values, a.nvalues, outs, MAX_OUTS, &nouts, err);
  tpk_arena_free(&arena);
  if (st == TPK_OK && nouts > MAX_OUTS) st = tpk_error(err, TPK_ERR_UNSUPPORTED, "more than %d results", MAX_OUTS);
  for (int i = 0; st == TPK_OK && i < nouts; i++) {
    types[i] = outs[i] ? outs[i]->type : NULL;
    if (outs[i]) st = tpk_gb_output(gb, outs[i], err);
  }
  *ntypes = nouts;
  return st;
}

/* The layout of op's arguments: built once with nothing lifted and its
 * operands' sizes as constants (an error there is the op's), then once per
 * float or int argument lifted alone (an int as a symbolic size). */
static void layout_free(void *p) { free(p); }

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
  st = lay ? build_alone(op, lay, true, false, &gb, types, &n, &err) : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
  tpk_gb_free(gb);
  for (int i = 0; st == TPK_OK && i < op->nargs; i++) {
    TpkArgKind kind = op->args[i].kind;
    if (kind != TPK_ARG_FLOAT && kind != TPK_ARG_INT && kind != TPK_ARG_INTS) continue;
    Layout probe = {0};
    probe.lift[i] = true;
    TpkError perr = {0};
    gb = NULL;
    lay->lift[i] = build_alone(op, &probe, true, true, &gb, types, &n, &perr) == TPK_OK;
    tpk_gb_free(gb);
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

/* An op's graph: its result types (dims in its operands' symbols), and,
 * for the debug and strict modes, its program. */
typedef struct OpGraph {
  bool failed;   /* the op does not build with its sizes symbolic: see submit */
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

/* The op's key words: its layout's lifts applied. */
static TpkStatus op_key(const Op *op, const Layout *lay, bool concrete, Key *k) {
  key_put(k, KEY_OPTYPE);
  key_put(k, concrete);
  layout_key(op, k);
  for (int i = 0; i < op->noperands; i++) {
    const TpkBuffer *b = op->operands[i];
    key_put(k, (uint64_t)b->dtype);
    key_put(k, (uint64_t)b->rank);
  }
  /* the operands' dims and the arguments, in the op's symbols */
  Syms syms = {0};
  for (int i = 0; i < op->noperands; i++)
    for (int d = 0; d < op->operands[i]->rank; d++) {
      int64_t v = op->operands[i]->shape[d];
      key_put(k, concrete ? (uint64_t)v : dim_word(&syms, v));
    }
  if (concrete) syms.n = 0; /* ints are themselves */
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkArg args[MAX_ARGS];
  Alone a = {.op = op};
  Binder binder = {alone_tensor, alone_scalar, &a, &syms, &arena};
  /* scalars are counted, not built */
  binder.scalar = NULL;
  TpkStatus st = TPK_OK;
  for (int i = 0; i < op->nargs && st == TPK_OK; i++)
    if (lay->lift[i] && op->args[i].kind == TPK_ARG_FLOAT) {
      /* a lifted float: its place only */
      key_str(k, op->args[i].name);
      key_put(k, TPK_ARG_FLOAT);
      key_put(k, 1);
    } else {
      st = bind_args(&op->args[i], 1, &(Layout){.lift = {lay->lift[i]}}, &binder, &args[i], k);
    }
  tpk_arena_free(&arena);
  if (st == TPK_OK && k->failed) st = TPK_ERR_NOMEM;
  return st == TPK_OK ? TPK_OK : tpk_runtime_fail(st, "out of memory");
}

/* The op's graph under key: with its sizes symbolic, or (concrete) as
 * they are. An op that does not build symbolically (a view to sizes that
 * are no product of its operands') is a unit that says so, so the next
 * sight of the key goes straight to the concrete one. */
static TpkStatus find_op_graph(TpkContext *ctx, const Op *op, const Layout *lay, bool concrete, const Key *key, TpkUnit **out) {
  TpkUnits *units = tpk_context_units(ctx);
  bool claimed;
  TpkStatus st = tpk_units_get(units, -1, key->w, key->n, out, &claimed);
  if (st != TPK_OK || !claimed) return st;
  OpGraph *g = calloc(1, sizeof *g);
  TpkError err = {0};
  st = g ? build_alone(op, lay, concrete, false, &g->gb, g->types, &g->nouts, &err) : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
  if (st != TPK_OK && g && !concrete && st != TPK_ERR_NOMEM) {
    tpk_gb_free(g->gb);
    *g = (OpGraph){.failed = true};
    st = TPK_OK;
  }
  if (st != TPK_OK) {
    if (g) op_graph_free(g);
    tpk_unit_abandon(units, *out);
    *out = NULL;
    return op_fail(op, err.code ? err.code : TPK_ERR_INVALID, err.message);
  }
  tpk_unit_ready(units, *out, g, op_graph_free);
  return TPK_OK;
}

/* The op's program (debug and strict): its graph, one cluster per op. */
static TpkStatus find_op_program(TpkContext *ctx, const Op *op, const OpGraph *g, Key *key, TpkUnit **out, bool *built) {
  key->w[0] = KEY_OPPROG; /* the graph's key, for its program */
  TpkUnits *units = tpk_context_units(ctx);
  bool claimed;
  TpkStatus st = tpk_units_get(units, TPK_UNIT_EAGER, key->w, key->n, out, &claimed);
  key->w[0] = KEY_OPTYPE;
  *built = claimed;
  if (st != TPK_OK || !claimed) return st;
  TpkProgram *p;
  st = tpk_compile_graph(ctx, tpk_gb_func(g->gb), TPK_FUSE_NONE, &p);
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

/* A value of a fused window: a buffer it reads (an input), a buffer it
 * produced, or a lifted scalar (an input). */
typedef struct WValue {
  TpkBuffer *buf; /* held by the window; NULL for a scalar */
  bool input;
  double scalar;
  int producer; /* the record, or -1 */
} WValue;

typedef struct Record {
  const char *op; /* the window's arena */
  TpkKernel *kernel; /* a call: its program held */
  uint64_t kernel_id[3];
  TpkArg *args;   /* bound: tensors as window values */
  int nargs;
  int outs[MAX_OUTS]; /* window values (-1: undefined) */
  int nouts;
  int64_t position;
} Record;

typedef struct Window {
  TpkArena arena; /* records' arguments */
  Record *records;
  int nrecords;
  WValue *values;
  int nvalues, capvalues;
  Syms syms; /* of the inputs' sizes */
  bool concrete; /* an op of it builds only with its sizes as they are: so does the window */
  Key dims;  /* the inputs' dtypes, ranks and dims, as they came */
  Key ops;   /* the records' words */
} Window;

struct TpkStream {
  TpkContext *ctx; /* held */
  TpkDevice *dev;
  TpkEagerMode mode;
  atomic_int refs; /* the caller's, and each pending mark's */
  pthread_mutex_t lock; /* all below */
  bool dropped;         /* the context ended: its work went, ops are refused */
  bool destroyed;       /* the caller's handle is gone */
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
  tpk_queue_destroy(s->queue);
  free(s->message);
  free(s->marks);
  free(s->w.records);
  free(s->w.values);
  key_free(&s->w.dims);
  key_free(&s->w.ops);
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
  if (wrote) tpk_buffer_mark_pending(b, s);
  else tpk_buffer_mark_read(b);
  s->marks[s->nmarks++] = (Mark){b, wrote};
  return true;
}

/* The pending work has run (or gone): every mark goes. The buffers'
 * holds are dropped after the marks, since the last may free the stream;
 * s->lock held, and a hold on s by the caller. */
static void unmark_all(TpkStream *s) {
  for (int i = 0; i < s->nmarks; i++) tpk_buffer_unmark(s->marks[i].buf, s->marks[i].wrote);
  for (int i = 0; i < s->nmarks; i++) tpk_buffer_release(s->marks[i].buf);
  s->nmarks = 0;
}

/* ---- the window -------------------------------------------------------------------- */

static void window_reset(TpkStream *s) {
  Window *w = &s->w;
  for (int i = 0; i < w->nvalues; i++)
    if (w->values[i].buf) tpk_buffer_release(w->values[i].buf);
  for (int i = 0; i < w->nrecords; i++)
    if (w->records[i].kernel) tpk_program_release(tpk_kernel_program(w->records[i].kernel));
  w->nvalues = w->nrecords = 0;
  w->syms.n = 0;
  w->concrete = false;
  w->dims.n = w->ops.n = 0;
  w->dims.failed = w->ops.failed = false;
  tpk_arena_free(&w->arena);
  tpk_arena_init(&w->arena, 0);
}

static int window_value(Window *w, TpkBuffer *buf, bool input, double scalar, int producer) {
  if (w->nvalues == w->capvalues) {
    int cap = w->capvalues ? 2 * w->capvalues : 64;
    WValue *v = realloc(w->values, sizeof *v * (size_t)cap);
    if (!v) return -1;
    w->values = v;
    w->capvalues = cap;
  }
  if (buf) tpk_buffer_retain(buf);
  w->values[w->nvalues] = (WValue){buf, input, scalar, producer};
  return w->nvalues++;
}

typedef struct Recording {
  TpkStream *s;
} Recording;

/* The window value of a tensor operand: one it produced, one it reads
 * already, or a new input (its dims adding to the window's symbols). */
static int record_tensor(void *ctx, TpkBuffer *b) {
  TpkStream *s = ((Recording *)ctx)->s;
  Window *w = &s->w;
  for (int i = w->nvalues - 1; i >= 0; i--)
    if (w->values[i].buf == b) return i;
  int id = window_value(w, b, true, 0, -1);
  if (id < 0 || !mark(s, b, false)) return -1;
  key_put(&w->dims, (uint64_t)id);
  key_put(&w->dims, (uint64_t)b->dtype);
  key_put(&w->dims, (uint64_t)b->rank);
  for (int d = 0; d < b->rank; d++) key_put(&w->dims, dim_word(&w->syms, b->shape[d]));
  return id;
}

static int record_scalar(void *ctx, double v) {
  TpkStream *s = ((Recording *)ctx)->s;
  int id = window_value(&s->w, NULL, true, v, -1);
  if (id >= 0) {
    key_put(&s->w.dims, (uint64_t)id);
    key_put(&s->w.dims, UINT64_MAX); /* a scalar */
  }
  return id;
}

/* Does the op read a view of what the window produced (bytes it cannot
 * name)? Then the window runs first. */
static bool reads_a_view_of_the_window(const Window *w, const Op *op) {
  for (int i = 0; i < op->noperands; i++)
    for (int j = 0; j < w->nvalues; j++)
      if (w->values[j].producer >= 0 && w->values[j].buf != op->operands[i] &&
          tpk_buffers_share(w->values[j].buf, op->operands[i]))
        return true;
  return false;
}

/* ---- running a window ------------------------------------------------------------- */

typedef struct WindowProgram {
  TpkProgram *program;
} WindowProgram;

static void window_program_free(void *p) {
  WindowProgram *wp = p;
  tpk_program_release(wp->program);
  free(wp);
}

/* The window as one graph, fused and compiled. */
static TpkStatus build_window(TpkStream *s, const bool *output, TpkProgram **out) {
  Window *w = &s->w;
  TpkError err = {0};
  TpkGraphBuilder *gb = tpk_gb_new("eager_window");
  TpkValue **vals = calloc((size_t)w->nvalues + 1, sizeof *vals);
  TpkStatus st = gb && vals ? TPK_OK : tpk_error(&err, TPK_ERR_NOMEM, "out of memory");
  for (int i = 0; st == TPK_OK && i < w->nvalues; i++) {
    const WValue *v = &w->values[i];
    if (!v->input) continue;
    const TpkDim *dims[TPK_MAX_RANK];
    int rank = v->buf ? v->buf->rank : 0;
    Syms syms = {0};
    for (int d = 0; d < rank && st == TPK_OK; d++) {
      char text[32];
      /* the window's symbols, as the inputs' dims added them */
      int k = v->buf->shape[d] > 1 && !w->concrete ? sym_find(&w->syms, v->buf->shape[d]) : -1;
      if (k >= 0) snprintf(text, sizeof text, "s%d", k);
      else snprintf(text, sizeof text, "%" PRId64, v->buf->shape[d]);
      if (!(dims[d] = tpk_gb_dim(gb, text, &err))) st = err.code;
    }
    (void)syms;
    if (st == TPK_OK) st = tpk_gb_input(gb, v->buf ? v->buf->dtype : TPK_F32, rank, dims, &vals[i], &err);
  }
  for (int r = 0; st == TPK_OK && r < w->nrecords; r++) {
    const Record *rec = &w->records[r];
    TpkValue *outs[MAX_OUTS];
    int n = 0;
    TpkArg args[MAX_ARGS];
    memcpy(args, rec->args, sizeof *args * (size_t)rec->nargs);
    for (int i = 0; w->concrete && i < rec->nargs; i++) { /* no symbols: the sizes are themselves */
      if (args[i].kind == TPK_ARG_INT) args[i].sym = NULL;
      if (args[i].kind == TPK_ARG_INTS) args[i].syms = NULL;
    }
    st = rec->op ? tpk_gb_op(gb, rec->op, args, rec->nargs, vals, w->nvalues, outs, MAX_OUTS, &n, &err)
                 : tpk_gb_call(gb, tpk_kernel_ir(rec->kernel), args, rec->nargs, vals, w->nvalues, outs, MAX_OUTS, &n, &err);
    for (int i = 0; st == TPK_OK && i < rec->nouts && i < n; i++)
      if (rec->outs[i] >= 0) vals[rec->outs[i]] = outs[i];
  }
  for (int i = 0; st == TPK_OK && i < w->nvalues; i++)
    if (output[i]) st = tpk_gb_output(gb, vals[i], &err);
  free(vals);
  if (st != TPK_OK) {
    tpk_gb_free(gb);
    return tpk_runtime_fail(st, "a fused window of %d ops: %s", w->nrecords, err.message);
  }
  st = tpk_compile_graph(s->ctx, tpk_gb_func(gb), TPK_FUSE_ALL, out);
  tpk_gb_free(gb);
  return st;
}

/* A rank-0 f32 buffer holding v. */
static TpkStatus scalar_buffer(TpkDevice *dev, double v, TpkBuffer **out) {
  TpkStatus st = tpk_buffer_create(dev, TPK_F32, 0, NULL, out);
  if (st == TPK_OK) *(float *)tpk_buffer_data(*out) = (float)v;
  return st;
}

/* Run the window: its key looked up (or the window built, fused and
 * compiled), then one launch. s->lock held. */
static TpkStatus run_window(TpkStream *s) {
  Window *w = &s->w;
  if (!w->nrecords) return TPK_OK;
  /* outputs: what it produced that someone still holds */
  bool *output = calloc((size_t)w->nvalues + 1, sizeof *output);
  if (!output) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  int ninputs = 0, noutputs = 0;
  Key key = {0};
  key_put(&key, TPK_UNIT_KEY_WINDOW);
  for (int i = 0; i < w->dims.n; i++) key_put(&key, w->dims.w[i]);
  for (int i = 0; i < w->ops.n; i++) key_put(&key, w->ops.w[i]);
  for (int i = 0; i < w->nvalues; i++) {
    ninputs += w->values[i].input;
    output[i] = w->values[i].producer >= 0 && tpk_buffer_in_use(w->values[i].buf);
    noutputs += output[i];
    if (output[i]) key_put(&key, (uint64_t)i);
  }
  key_put(&key, w->concrete);
  for (int i = 0; w->concrete && i < w->nvalues; i++) /* then the sizes are themselves */
    for (int d = 0; w->values[i].input && w->values[i].buf && d < w->values[i].buf->rank; d++)
      key_put(&key, (uint64_t)w->values[i].buf->shape[d]);
  TpkStatus st = key.failed || w->dims.failed || w->ops.failed ? tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory") : TPK_OK;
  TpkUnit *unit = NULL;
  if (st == TPK_OK && noutputs) {
    TpkUnits *units = tpk_context_units(s->ctx);
    bool claimed;
    st = tpk_units_get(units, TPK_UNIT_EAGER, key.w, key.n, &unit, &claimed);
    if (st == TPK_OK && claimed) {
      WindowProgram *wp = calloc(1, sizeof *wp);
      st = wp ? build_window(s, output, &wp->program) : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
      if (st == TPK_OK) tpk_unit_ready(units, unit, wp, window_program_free);
      else {
        free(wp);
        tpk_unit_abandon(units, unit);
        unit = NULL;
      }
      s->stats.compiles += st == TPK_OK;
    } else if (st == TPK_OK) {
      s->stats.cache_hits++;
    }
  }
  /* one launch: the inputs (scalars in buffers of their own), then the outputs */
  TpkBuffer **args = st == TPK_OK && unit ? calloc((size_t)(ninputs + noutputs) + 1, sizeof *args) : NULL;
  bool *mine = args ? calloc((size_t)(ninputs + noutputs) + 1, sizeof *mine) : NULL;
  if (unit && (!args || !mine)) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  int n = 0;
  for (int i = 0; st == TPK_OK && unit && i < w->nvalues; i++) {
    if (!w->values[i].input) continue;
    if (w->values[i].buf) args[n++] = w->values[i].buf;
    else if ((st = scalar_buffer(s->dev, w->values[i].scalar, &args[n])) == TPK_OK) mine[n++] = true;
  }
  for (int i = 0; st == TPK_OK && unit && i < w->nvalues; i++)
    if (output[i]) args[n++] = w->values[i].buf;
  if (st == TPK_OK && unit) {
    TpkProgram *p = ((WindowProgram *)tpk_unit_payload(unit))->program;
    TpkKernel *k;
    TpkLaunchResult r;
    TpkLaunch L = {.args = args, .result = &r};
    st = tpk_program_kernel(p, tpk_program_kernel_name(p, 0), &k);
    if (st == TPK_OK) st = tpk_kernel_launch_unsettled(k, &L);
    if (st == TPK_OK) {
      s->stats.launches += tpk_program_kernel_runs(p);
      s->stats.sim_seconds += r.simulated ? r.sim.seconds : 0;
    }
  }
  s->stats.windows++;
  if (st != TPK_OK) {
    char *why = strdup(tpk_last_error());
    tpk_runtime_fail(st, "the fused window of ops #%" PRId64 " to #%" PRId64 ": %s", w->records[0].position,
                     w->records[w->nrecords - 1].position, why ? why : "out of memory");
    free(why);
  }
  for (int i = 0; mine && i < n; i++)
    if (mine[i]) tpk_buffer_destroy(args[i]);
  free(args);
  free(mine);
  free(output);
  key_free(&key);
  tpk_unit_release(unit);
  window_reset(s);
  return st;
}

static TpkStatus run_window(TpkStream *s);

/* Record op in the window (fused): its arguments bound to window values,
 * its outputs new window values, marked pending. s->lock held. */
static TpkStatus record(TpkStream *s, const Op *op, const Layout *lay, bool concrete, TpkBuffer *const *made, int nouts) {
  Window *w = &s->w;
  w->concrete |= concrete;
  if (!w->records && !(w->records = calloc(WINDOW_OPS, sizeof *w->records))) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  Record *rec = &w->records[w->nrecords];
  *rec = (Record){.kernel = op->kernel, .nargs = op->nargs, .position = op->position};
  memcpy(rec->kernel_id, op->kernel_id, sizeof rec->kernel_id);
  TpkStatus st = TPK_OK;
  if (op->name && !(rec->op = tpk_arena_strdup(&w->arena, op->name))) st = TPK_ERR_NOMEM;
  rec->args = tpk_arena_alloc(&w->arena, sizeof *rec->args * (size_t)(op->nargs + 1));
  if (!rec->args) st = TPK_ERR_NOMEM;
  key_put(&w->ops, op->name ? 1 : 2);
  if (op->name) key_str(&w->ops, op->name);
  else for (int i = 0; i < 3; i++) key_put(&w->ops, op->kernel_id[i]);
  key_put(&w->ops, (uint64_t)op->nargs);
  Recording r = {s};
  Binder binder = {record_tensor, record_scalar, &r, &w->syms, &w->arena};
  if (st == TPK_OK) st = bind_args(op->args, op->nargs, lay, &binder, rec->args, &w->ops);
  rec->nouts = nouts;
  key_put(&w->ops, (uint64_t)nouts);
  for (int i = 0; st == TPK_OK && i < nouts; i++) {
    rec->outs[i] = -1;
    if (!made[i]) continue;
    if ((rec->outs[i] = window_value(w, made[i], false, 0, w->nrecords)) < 0 || !mark(s, made[i], true)) st = TPK_ERR_NOMEM;
  }
  if (st != TPK_OK) {
    /* the window cannot take it: what it holds runs, without this op */
    if (!tpk_last_error()[0]) tpk_runtime_fail(st, "out of memory");
    return st == TPK_ERR_NOMEM ? tpk_runtime_fail(st, "out of memory recording an op") : st;
  }
  if (op->kernel) tpk_program_retain(tpk_kernel_program(op->kernel));
  w->nrecords++;
  if (w->nrecords == WINDOW_OPS) { /* full: it runs now */
    st = run_window(s);
    if (st != TPK_OK) set_error(s, st, tpk_last_error());
    unmark_all(s);
  }
  return TPK_OK;
}

/* ---- sync ---------------------------------------------------------------------------- */

/* Wait for the strict queue; the first op whose launch did not finish is
 * the one the error names. s->lock held. */
static TpkStatus wait_queue(TpkStream *s) {
  if (!s->queue) return TPK_OK;
  TpkStatus st = tpk_queue_wait(s->queue);
  char *why = st != TPK_OK ? strdup(tpk_last_error()) : NULL;
  const Queued *failed = NULL;
  for (Queued *q = s->queued, *next; q; q = next) {
    next = q->next;
    if (!q->result.tier && !failed) failed = q;
    if (q->result.tier) {
      s->stats.launches += q->kernels;
      s->stats.sim_seconds += q->result.simulated ? q->result.sim.seconds : 0;
    }
    if (q != failed) free(q);
  }
  if (st != TPK_OK)
    tpk_runtime_fail(st, "op #%" PRId64 " '%s': %s", failed ? failed->position : s->position, failed ? failed->op : "?",
                     why ? why : "failed");
  free((void *)failed);
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

/* Sync s for someone else's access: its error stays for tpk_stream_sync. */
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
  /* streams whose pending work reads b: every stream of the context with
   * work pending runs it (writes of what a stream reads are rare) */
  TpkStreams *ss = tpk_context_streams(b->dev->ctx);
  for (;;) {
    pthread_mutex_lock(&ss->lock);
    TpkStream *reader = ss->list;
    while (reader && !(atomic_load(&reader->refs) > 0 && reader->nmarks)) reader = reader->next;
    if (reader) tpk_stream_retain(reader);
    pthread_mutex_unlock(&ss->lock);
    if (!reader) break;
    TpkStatus rst = settle_stream(reader);
    if (st == TPK_OK) st = rst;
    tpk_stream_release(reader);
    if (!tpk_buffer_read_pending(b)) break;
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
  s->destroyed = true;
  pthread_mutex_unlock(&s->lock);
  tpk_stream_release(s);
}

void tpk_streams_close(TpkStreams *ss) {
  pthread_mutex_lock(&ss->lock);
  for (TpkStream *s = ss->list; s; s = s->next) {
    tpk_stream_retain(s);
    pthread_mutex_lock(&s->lock);
    s->dropped = true;
    window_reset(s);
    for (Queued *q = s->queued, *next; q; q = next) {
      next = q->next;
      free(q);
    }
    s->queued = NULL;
    s->queued_tail = &s->queued;
    unmark_all(s);
    pthread_mutex_unlock(&s->lock);
    /* not the last hold: the caller's handle or the registry's list keeps it */
    atomic_fetch_sub(&s->refs, 1);
  }
  pthread_mutex_unlock(&ss->lock);
}

TpkEagerMode tpk_stream_mode(const TpkStream *s) { return s ? s->mode : TPK_EAGER_STRICT; }

void tpk_stream_stats(const TpkStream *s, TpkStreamStats *out) {
  if (!s || !out) return;
  pthread_mutex_lock((pthread_mutex_t *)&s->lock);
  *out = s->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
}

/* The buffers op reads, in argument order. */
static TpkStatus collect_operands(Op *op, const char *who) {
  op->noperands = 0;
  for (int i = 0; i < op->nargs; i++) {
    const TpkArg *a = &op->args[i];
    int n = a->kind == TPK_ARG_VALUE ? 1 : a->kind == TPK_ARG_VALUES ? a->n : 0;
    for (int j = 0; j < n; j++) {
      TpkBuffer *b = a->kind == TPK_ARG_VALUE ? a->buffer : a->buffers ? a->buffers[j] : NULL;
      if (!b) return tpk_runtime_fail(TPK_ERR_INVALID, "%s: argument %d has no buffer", who, i);
      bool seen = false;
      for (int k = 0; k < op->noperands && !seen; k++) seen = op->operands[k] == b;
      if (seen) continue;
      if (op->noperands == MAX_OPERANDS) return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "%s: more than %d tensors", who, MAX_OPERANDS);
      op->operands[op->noperands++] = b;
    }
  }
  for (int i = 0; i < op->noperands; i++)
    for (int d = 0; d < op->operands[i]->rank; d++) dim_word(&op->syms, op->operands[i]->shape[d]);
  return TPK_OK;
}

/* NaN or Inf in a float buffer: where, into why. */
static bool finite(const TpkBuffer *b, char *why, size_t n) {
  if (!tpk_dtype_is_float(b->dtype)) return true;
  int64_t count = (int64_t)(b->bytes / tpk_dtype_size(b->dtype));
  float chunk[256];
  for (int64_t at = 0; at < count; at += 256) {
    int64_t m = count - at < 256 ? count - at : 256;
    tpk_prims()->convert((int)b->dtype, TPK_PRIM_F32, (const char *)b->data + at * (int64_t)tpk_dtype_size(b->dtype), chunk, m);
    for (int64_t i = 0; i < m; i++)
      if (!isfinite(chunk[i])) {
        snprintf(why, n, "%s at element %" PRId64, isnan(chunk[i]) ? "NaN" : chunk[i] > 0 ? "Inf" : "-Inf", at + i);
        return false;
      }
  }
  return true;
}

/* Submit op: s->lock held, its operands settled. */
static TpkStatus submit(TpkStream *s, Op *op, TpkBuffer **outs, int max, int *n) {
  TpkContext *ctx = s->ctx;
  if (s->dropped || tpk_context_closed(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_op: the stream's context was destroyed");
  op->position = ++s->position;
  s->stats.ops++;
  for (int i = 0; i < op->noperands; i++)
    if (op->operands[i]->dev != s->dev)
      return op_fail(op, TPK_ERR_INVALID, "an operand is on another device than the stream");
  TpkUnit *layout_unit = NULL, *graph_unit = NULL, *prog_unit = NULL;
  TpkStatus st = find_layout(ctx, op, &layout_unit);
  if (st != TPK_OK) return st;
  const Layout *lay = tpk_unit_payload(layout_unit);
  Key key = {0};
  st = op_key(op, lay, false, &key);
  if (st == TPK_OK) st = find_op_graph(ctx, op, lay, false, &key, &graph_unit);
  const OpGraph *g = graph_unit ? tpk_unit_payload(graph_unit) : NULL;
  bool concrete = g && g->failed;
  if (concrete) { /* its sizes as they are */
    tpk_unit_release(graph_unit);
    graph_unit = NULL;
    key.n = 0;
    st = op_key(op, lay, true, &key);
    if (st == TPK_OK) st = find_op_graph(ctx, op, lay, true, &key, &graph_unit);
    g = graph_unit ? tpk_unit_payload(graph_unit) : NULL;
  }
  bool built = false;
  if (st == TPK_OK && s->mode != TPK_EAGER_FUSED) {
    st = find_op_program(ctx, op, g, &key, &prog_unit, &built);
    if (st == TPK_OK) s->stats.compiles += built, s->stats.cache_hits += !built;
  }
  key_free(&key);
  /* the outputs, sized from the op's result types */
  int nouts = 0;
  TpkBuffer *made[MAX_OUTS] = {0};
  for (int i = 0; st == TPK_OK && i < g->nouts; i++) {
    const TpkType *t = g->types[i];
    if (!t) continue;
    int64_t shape[TPK_MAX_RANK];
    for (int d = 0; d < t->rank; d++)
      if (!tpk_dim_eval(t->dims[d], sym_lookup, &op->syms, &shape[d]))
        st = op_fail(op, TPK_ERR_INTERNAL, "a result's size does not evaluate");
    if (st == TPK_OK) st = tpk_buffer_create(s->dev, t->dtype, t->rank, shape, &made[i]);
  }
  if (st == TPK_OK) nouts = g->nouts;
  /* run it, queue it or record it */
  if (st == TPK_OK && s->mode != TPK_EAGER_FUSED) {
    TpkProgram *p = tpk_unit_payload(prog_unit);
    TpkKernel *k;
    TpkBuffer *args[MAX_OPERANDS + MAX_ARGS + MAX_OUTS];
    bool scalar[MAX_OPERANDS + MAX_ARGS + MAX_OUTS] = {0};
    int na = 0;
    for (int i = 0; i < op->noperands; i++) args[na++] = op->operands[i];
    for (int i = 0; st == TPK_OK && i < op->nargs; i++)
      if (lay->lift[i] && op->args[i].kind == TPK_ARG_FLOAT) {
        st = scalar_buffer(s->dev, op->args[i].f, &args[na]);
        scalar[na++] = st == TPK_OK;
      }
    for (int i = 0; i < nouts; i++)
      if (made[i]) args[na++] = made[i];
    if (st == TPK_OK) st = tpk_program_kernel(p, tpk_program_kernel_name(p, 0), &k);
    if (st == TPK_OK && s->mode == TPK_EAGER_DEBUG) {
      TpkLaunchResult r;
      TpkLaunch L = {.args = args, .result = &r};
      st = tpk_kernel_launch_unsettled(k, &L);
      if (st != TPK_OK) {
        char *why = strdup(tpk_last_error());
        op_fail(op, st, why ? why : "out of memory");
        free(why);
      } else {
        s->stats.launches += tpk_program_kernel_runs(p);
        s->stats.sim_seconds += r.simulated ? r.sim.seconds : 0;
      }
      for (int i = 0; st == TPK_OK && i < nouts; i++) {
        char why[128];
        if (made[i] && !finite(made[i], why, sizeof why)) {
          char msg[200];
          snprintf(msg, sizeof msg, "output %d has %s", i, why);
          st = op_fail(op, TPK_ERR_INVALID, msg);
        }
      }
    } else if (st == TPK_OK) {
      Queued *q = calloc(1, sizeof *q);
      char label[64];
      if (!q) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
      else {
        q->position = op->position;
        snprintf(q->op, sizeof q->op, "%s", op_label(op, label, sizeof label));
        q->kernels = tpk_program_kernel_runs(p);
        TpkLaunch L = {.args = args, .result = &q->result};
        st = tpk_queue_submit(s->queue, k, &L);
        if (st == TPK_OK) {
          *s->queued_tail = q;
          s->queued_tail = &q->next;
          for (int i = 0; i < op->noperands; i++) mark(s, op->operands[i], false);
          for (int i = 0; i < nouts; i++)
            if (made[i]) mark(s, made[i], true);
        } else {
          free(q);
        }
      }
    }
    for (int i = 0; i < na; i++)
      if (scalar[i]) tpk_buffer_destroy(args[i]);
  } else if (st == TPK_OK) {
    st = record(s, op, lay, concrete, made, nouts);
  }
  tpk_unit_release(prog_unit);
  tpk_unit_release(graph_unit);
  tpk_unit_release(layout_unit);
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
  if (s && tpk_program_context(tpk_kernel_program(k)) != s->ctx)
    return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_stream_call: kernel '%s' belongs to another context than the stream", tpk_kernel_ir(k)->name);
  const TpkFunc *f = tpk_kernel_ir(k);
  TpkFuncHash h = tpk_func_hash(f);
  Op o = {.kernel = k, .kernel_id = {h.lo, h.hi, tpk_hash_bytes(f->name, strlen(f->name))}, .args = args, .nargs = nargs};
  return stream_submit(s, &o, outs, max, n, "tpk_stream_call");
}
