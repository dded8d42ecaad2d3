/*
 * interp.c — the reference interpreter of the IR (see interp.h).
 *
 * The oracle the backends are tested against, so it is written to be
 * obviously right rather than fast:
 *   - every SSA value is a heap tensor with a concrete shape (dims evaluated
 *     from the symbol values each time its op runs), stored exactly as the
 *     backends store it (host/prims.h), in a reference-counted buffer so
 *     that reshape and loop-carried values share rather than copy;
 *   - elements are computed one at a time: floats in f32 (`float`), rounded
 *     to the value's dtype after each op (base/refnum.c, which shares
 *     nothing with the primitive library); integers in 64 bits with unsigned,
 *     wrapping arithmetic, wrapped to the dtype on store;
 *   - dot and sum use one f32 accumulator per output element, in ascending
 *     order of the contracted / reduced index (row-major over several axes),
 *     dot with fmaf: the order the backends document. A dot with an
 *     accumulator operand starts from its element instead of 0.
 *
 * Decisions where the IR reference leaves room (they are the oracle's, so
 * the backends must agree):
 *   - grid instances run sequentially, row-major (last axis fastest);
 *     program_id(axis) is the value of that axis's grid index (a tile's id);
 *   - `alloc` (scratch) is zero-initialised each time its op runs;
 *   - `dma_start` copies at once (`dma_wait` does nothing); source elements
 *     outside the source ref read as 0, destination elements outside the
 *     destination ref are dropped; with a length operand only the first
 *     len entries of the block's axis 0 move (len clamped to [0, block];
 *     checked mode reports one outside it), the rest stay as they were;
 *   - 'r' (static slice) elements outside the indexed dim are masked like a
 *     ragged tile's: loads and slices read `other` (0), stores drop them;
 *   - an 's' index outside its dim, and a 'g' / gather / scatter index
 *     outside its dim (negative included), are errors; every 'g' index is
 *     checked, even in a lane another dim masks;
 *   - `atomic` is a store mode "add" (or max, min) that also returns the old
 *     elements, masked ones as 0; checked mode counts it as an add;
 *   - store mode "add" and scatter "add" add in the dtype's arithmetic (f32
 *     add then rounding, integer wrap), one element at a time in row-major
 *     order of the stored value, so duplicate indices add in index order;
 *     "set" with duplicates keeps the last;
 *   - float max/min propagate NaN (elementwise and in reduce); with equal
 *     operands (+0 vs -0) the first wins; integer reduce max/min of nothing
 *     is the dtype's minimum/maximum, float ones -inf/+inf; sum of nothing
 *     is 0, prod 1, mean NaN (0/0);
 *   - arithmetic on bool (not produced by the language, but verified IR may
 *     hold it) computes on 0/1 and stores != 0;
 *   - integer division by zero (div, rem, cdiv) is an error; INT32_MIN / -1
 *     wraps to INT32_MIN, INT32_MIN % -1 is 0;
 *   - float `rem` is fmodf (sign of the dividend, like integer rem);
 *   - `const`, `iota` and load `other` values are converted from the exact
 *     attribute value by the conversion rules (one rounding);
 *   - `tile.of` with a negative id is an error (ids past the end give a
 *     tile whose elements are all masked);
 *   - `call`, and running a `func` rather than a kernel, are not supported
 *     yet (TPK_ERR_UNSUPPORTED).
 * No value may exceed 1 GiB; a bigger one is an error naming it.
 */
#include "interp/interp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/refnum.h"

enum { MAX_GRID_AXES = 16 };
#define VALUE_LIMIT ((size_t)1 << 30)

/* ---- Buffers and values ---------------------------------------------------- */

typedef struct Buf {
  int64_t refs;
  size_t bytes;
  max_align_t data[]; /* the elements, suitably aligned */
} Buf;

typedef enum VKind { V_NONE, V_TENSOR, V_REF, V_TILE, V_DMA } VKind;

typedef struct Val {
  VKind kind;
  TpkDType dt;                /* tensors and refs */
  int rank;
  int64_t dims[TPK_MAX_RANK];
  int64_t n;                  /* element count */
  Buf *buf;                   /* owner of data; NULL for parameter memory */
  unsigned char *data;        /* row-major elements */
  int64_t id, block;          /* tiles; dma handles: id is the copy's serial */
  struct Shadow *sh;          /* checked mode: refs' (dma handles': the destination's) shadow state */
} Val;

static void val_release(Val *v) {
  if (v->buf && --v->buf->refs == 0) free(v->buf);
  memset(v, 0, sizeof *v);
}

/* dst = src, sharing the buffer (tensors are immutable; refs are pointers). */
static void val_assign(Val *dst, const Val *src) {
  if (dst == src) return;
  if (src->buf) src->buf->refs++;
  val_release(dst);
  *dst = *src;
}

/* Move src into dst, leaving src empty. */
static void val_move(Val *dst, Val *src) {
  if (dst == src) return;
  val_release(dst);
  *dst = *src;
  memset(src, 0, sizeof *src);
}

/* ---- Checked mode: shadow state ---------------------------------------------- */

/* Which grid instances (linear id + 1; 0: none) wrote one output element.
 * Stores from two instances race; adds (`+=`, scatter-add) from several do
 * not, they accumulate; a store and an add from two instances race. Two
 * adders are kept so that a store can always name one that is not itself. */
typedef struct ElemWriters {
  int64_t stored; /* the last instance that stored it */
  int64_t added;  /* the first instance that added to it */
  int64_t added2; /* the last adder other than `added` */
} ElemWriters;

/* Per ref buffer (a parameter, or an alloc op's scratch, reused each time the
 * alloc runs): which elements were written, which grid instances wrote
 * each output element, and the copies into it not yet waited for. */
typedef struct Shadow {
  const void *key; /* the TpkParam or the alloc TpkOp */
  const char *name;
  int rank;
  int64_t dims[TPK_MAX_RANK];
  int64_t n;
  unsigned char *init; /* 1 per written element; NULL: all initialised */
  ElemWriters *writer; /* outputs: who wrote each element */
  int64_t *pending;    /* serials of started, not waited copies into it */
  const TpkOp **pending_op;
  int64_t (*pending_span)[2]; /* the elements [lo, hi] each copy writes */
  int npending, cappending;
} Shadow;

typedef struct Reported {
  const TpkOp *op;
  const Shadow *sh;
  int kind;
} Reported;

enum { REP_UNINIT, REP_RACE, REP_CONFLICT };

/* ---- Interpreter state ------------------------------------------------------ */

typedef struct Interp {
  const TpkFunc *f;
  void *const *args;
  const int64_t *syms;
  const char *symnames[64];
  int nsyms;
  TpkError *err;
  TpkPtrMap slots; /* SSA value -> its index in vals */
  Val *vals;
  int nvals;
  /* the enclosing grid instance */
  int grid_axes; /* 0: not in a grid */
  int64_t grid_pos[MAX_GRID_AXES], grid_count[MAX_GRID_AXES];
  /* checked mode */
  bool checked;
  int max_reports, nviol;
  TpkStr *report;
  Shadow **shadows;
  int nshadows, capshadows;
  Reported *reported;
  int nreported, capreported;
  int64_t dma_serial;
  /* copies in flight on a semaphore, oldest first */
  struct SemCopy {
    const void *sem; /* the semaphore array's data */
    const char *name;
    int64_t slot, serial;
    int64_t bytes; /* not yet landed: waits that count bytes take them oldest first */
    Shadow *sh; /* the copy's destination (checked mode) */
    const TpkOp *op;
  } *semcopies;
  int nsemcopies, capsemcopies;
  int64_t grid_lo[MAX_GRID_AXES];
  int64_t instance; /* linear id + 1 of the running grid instance; 0 outside a grid */
  const TpkBlock *grid_body;
} Interp;

static const char *op_name(const TpkOp *op) { return tpk_op_info(op->opcode)->name; }

/* Every error names the kernel, the op's source line and the op. */
static TpkStatus fail(Interp *I, const TpkOp *op, TpkStatus code, const char *fmt, ...) TPK_PRINTF(4, 5);
static TpkStatus fail(Interp *I, const TpkOp *op, TpkStatus code, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *fname = I->f && I->f->name ? I->f->name : "?";
  if (op && op->loc.line > 0)
    return tpk_error(I->err, code, "interp: @%s: line %d:%d: %s: %s", fname, op->loc.line, op->loc.col, op_name(op), msg);
  if (op) return tpk_error(I->err, code, "interp: @%s: %s: %s", fname, op_name(op), msg);
  return tpk_error(I->err, code, "interp: @%s: %s", fname, msg);
}

static int slot_find(const Interp *I, const TpkValue *v) {
  void *k;
  return tpk_ptrmap_get(&I->slots, v, &k) ? (int)(intptr_t)k : -1;
}

/* Number every value defined in block b, from n on; returns the next
 * number, or -1 when out of memory. */
static int collect(Interp *I, const TpkBlock *b, int n) {
  for (int i = 0; i < b->nargs; i++, n++)
    if (!tpk_ptrmap_put(&I->slots, b->args[i], (void *)(intptr_t)n)) return -1;
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int i = 0; i < op->nout; i++, n++)
      if (!tpk_ptrmap_put(&I->slots, &op->out[i], (void *)(intptr_t)n)) return -1;
    for (int r = 0; r < op->nregion && n >= 0; r++)
      if (op->regions[r]) n = collect(I, op->regions[r], n);
    if (n < 0) return -1;
  }
  return n;
}

static Val *slot(Interp *I, const TpkValue *v) {
  int k = slot_find(I, v);
  return k < 0 ? NULL : &I->vals[k];
}

/* Operand i of op, which must hold a value of the given kind. */
static Val *operand(Interp *I, const TpkOp *op, int i, VKind kind) {
  Val *v = i < op->nin ? slot(I, op->in[i]) : NULL;
  if (!v || v->kind != kind) {
    fail(I, op, TPK_ERR_INTERNAL, "operand %d is not a computed %s", i,
         kind == V_TENSOR ? "tensor" : kind == V_REF ? "ref" : kind == V_TILE ? "tile" : "dma handle");
    return NULL;
  }
  return v;
}

/* An i32 (or any integer) scalar operand. */
static bool scalar_int(Interp *I, const TpkOp *op, int i, int64_t *out) {
  Val *v = operand(I, op, i, V_TENSOR);
  if (!v) return false;
  if (v->rank != 0 || tpk_dtype_is_float(v->dt)) {
    fail(I, op, TPK_ERR_INTERNAL, "operand %d is not an integer scalar", i);
    return false;
  }
  *out = tpk_ref_get_int(v->dt, v->data, 0);
  return true;
}

/* ---- Shapes ----------------------------------------------------------------- */

static bool sym_lookup(void *ctx, const char *sym, int64_t *value) {
  const Interp *I = ctx;
  for (int i = 0; i < I->nsyms; i++)
    if (strcmp(I->symnames[i], sym) == 0) {
      *value = I->syms[i];
      return true;
    }
  return false;
}

/* Concrete dims of a tensor or ref type. */
static bool eval_dims(Interp *I, const TpkOp *op, const TpkType *t, int64_t *dims) {
  for (int i = 0; i < t->rank; i++) {
    if (!tpk_dim_eval(t->dims[i], sym_lookup, I, &dims[i])) {
      TpkStr s = {0};
      tpk_dim_print(&s, t->dims[i]);
      fail(I, op, TPK_ERR_INVALID, "dimension %s cannot be evaluated (unbound symbol or division by zero)",
           s.data ? s.data : "?");
      tpk_str_free(&s);
      return false;
    }
    if (dims[i] < 0) {
      fail(I, op, TPK_ERR_INVALID, "dimension %d evaluates to %" PRId64 ", a negative size", i, dims[i]);
      return false;
    }
  }
  return true;
}

static void strides_of(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

/* Row-major increment of a multi-index; false after the last one. */
static bool next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

/* Element count of a shape, or -1 when it does not fit int64. */
static int64_t count_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] != 0 && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  for (int i = 0; i < rank; i++)
    if (dims[i] == 0) return 0;
  return n;
}

static bool same_dims(int rank, const int64_t *a, const int64_t *b) {
  for (int i = 0; i < rank; i++)
    if (a[i] != b[i]) return false;
  return true;
}

/* Allocate a tensor (zeroed) for value v of dtype dt and the given shape. The
 * size limit keeps a hostile shape from taking the machine down. */
static bool new_buffer(Interp *I, const TpkOp *op, const TpkValue *v, TpkDType dt, int rank, const int64_t *dims,
                       Val *out, VKind kind) {
  memset(out, 0, sizeof *out);
  size_t esize = tpk_dtype_size(dt);
  int64_t n = 1;
  bool too_big = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] != 0 && n > (int64_t)(VALUE_LIMIT / esize) / dims[i]) too_big = true;
    n *= too_big ? 1 : dims[i];
  }
  if (too_big || (size_t)n * esize > VALUE_LIMIT) {
    TpkStr s = {0};
    tpk_str_printf(&s, "%s[", tpk_dtype_name(dt));
    for (int i = 0; i < rank; i++) tpk_str_printf(&s, "%s%" PRId64, i ? "," : "", dims[i]);
    tpk_str_puts(&s, "]");
    fail(I, op, TPK_ERR_NOMEM, "%s%s %s is larger than the interpreter's limit of 1 GiB per value",
         v && v->name ? "value %" : "the result", v && v->name ? v->name : "", s.data ? s.data : "?");
    tpk_str_free(&s);
    return false;
  }
  size_t bytes = (size_t)n * esize;
  Buf *b = calloc(1, sizeof(Buf) + (bytes ? bytes : 1));
  if (!b) {
    fail(I, op, TPK_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return false;
  }
  b->refs = 1;
  b->bytes = bytes;
  out->kind = kind;
  out->dt = dt;
  out->rank = rank;
  if (rank) memcpy(out->dims, dims, sizeof(int64_t) * (size_t)rank);
  out->n = n;
  out->buf = b;
  out->data = (unsigned char *)b->data;
  return true;
}

/* A new tensor for result `r` of op, shaped by its type. */
static bool new_result(Interp *I, const TpkOp *op, int r, Val *out) {
  const TpkType *t = op->out[r].type;
  int64_t dims[TPK_MAX_RANK];
  if (t->kind != TPK_TYPE_TENSOR) {
    fail(I, op, TPK_ERR_INTERNAL, "result %d is not a tensor", r);
    return false;
  }
  if (!eval_dims(I, op, t, dims)) return false;
  return new_buffer(I, op, &op->out[r], t->dtype, t->rank, dims, out, V_TENSOR);
}

/* Store a finished result into its slot. */
static TpkStatus set_result(Interp *I, const TpkOp *op, int r, Val *v) {
  Val *s = slot(I, &op->out[r]);
  if (!s) {
    val_release(v);
    return fail(I, op, TPK_ERR_INTERNAL, "result %d has no slot", r);
  }
  val_move(s, v);
  return TPK_OK;
}

static TpkStatus scalar_result(Interp *I, const TpkOp *op, int64_t value) {
  Val v;
  if (!new_result(I, op, 0, &v)) return I->err ? I->err->code : TPK_ERR_INTERNAL;
  tpk_ref_set_int(v.dt, v.data, 0, (uint64_t)value);
  return set_result(I, op, 0, &v);
}

#define ESIZE(v) tpk_dtype_size((v)->dt)
#define ELEM(v, i) ((v)->data + (size_t)(i) * ESIZE(v))

/* The status of the last failure (helpers return bool and leave it in err). */
static TpkStatus status(Interp *I) { return I->err && I->err->code != TPK_OK ? I->err->code : TPK_ERR_INTERNAL; }

/* ---- Checked mode: reports ------------------------------------------------------ */

/* Record one violation: a line "line L:C: <what>" while under max_reports. */
static void violation(Interp *I, const TpkOp *op, const char *fmt, ...) TPK_PRINTF(3, 4);
static void violation(Interp *I, const TpkOp *op, const char *fmt, ...) {
  if (++I->nviol > I->max_reports || !I->report) return;
  va_list ap;
  va_start(ap, fmt);
  if (op && op->loc.line > 0)
    tpk_str_printf(I->report, "line %d:%d: ", op->loc.line, op->loc.col);
  else
    tpk_str_puts(I->report, "line ?: ");
  tpk_str_vprintf(I->report, fmt, ap);
  va_end(ap);
  tpk_str_putc(I->report, '\n');
}

/* True the first time (op, sh, kind) is seen: such reports are made once. */
static bool first_report(Interp *I, const TpkOp *op, const Shadow *sh, int kind) {
  for (int i = 0; i < I->nreported; i++)
    if (I->reported[i].op == op && I->reported[i].sh == sh && I->reported[i].kind == kind) return false;
  if (I->nreported == I->capreported) {
    int cap = I->capreported ? 2 * I->capreported : 16;
    Reported *r = realloc(I->reported, sizeof *r * (size_t)cap);
    if (!r) return true; /* report again rather than fail */
    I->reported = r, I->capreported = cap;
  }
  I->reported[I->nreported++] = (Reported){op, sh, kind};
  return true;
}

/* "name[3, 5]": element `off` of the buffer sh shadows. */
static void put_elem(TpkStr *s, const Shadow *sh, int64_t off) {
  int64_t st[TPK_MAX_RANK];
  strides_of(sh->rank, sh->dims, st);
  tpk_str_printf(s, "%s[", sh->name);
  for (int d = 0; d < sh->rank; d++) {
    tpk_str_printf(s, "%s%" PRId64, d ? ", " : "", st[d] ? off / st[d] : 0);
    if (st[d]) off %= st[d];
  }
  tpk_str_putc(s, ']');
}

/* "(i=0, j=1)": grid instance `inst` (linear id + 1) of the running grid. */
static void put_instance(TpkStr *s, const Interp *I, int64_t inst) {
  int64_t pos[MAX_GRID_AXES], lin = inst - 1;
  for (int a = I->grid_axes - 1; a >= 0; a--) {
    pos[a] = I->grid_count[a] ? lin % I->grid_count[a] : 0;
    lin = I->grid_count[a] ? lin / I->grid_count[a] : 0;
  }
  tpk_str_putc(s, '(');
  for (int a = 0; a < I->grid_axes; a++) {
    const char *name = I->grid_body && I->grid_body->args[a]->name ? I->grid_body->args[a]->name : NULL;
    if (name)
      tpk_str_printf(s, "%s%s=%" PRId64, a ? ", " : "", name, I->grid_lo[a] + pos[a]);
    else
      tpk_str_printf(s, "%saxis%d=%" PRId64, a ? ", " : "", a, I->grid_lo[a] + pos[a]);
  }
  tpk_str_putc(s, ')');
}

/* A read of ref element `off` (op reads it as `what`): uninitialised? */
static void check_read(Interp *I, const TpkOp *op, const Val *ref, int64_t off) {
  Shadow *sh = ref->sh;
  if (!I->checked || !sh || !sh->init || sh->init[off]) return;
  if (!first_report(I, op, sh, REP_UNINIT)) return;
  TpkStr e = {0};
  put_elem(&e, sh, off);
  violation(I, op, "%s reads uninitialized %s", op_name(op), e.data ? e.data : "?");
  tpk_str_free(&e);
}

/* A write of ref element `off` by op, a store or (`add`) an accumulation:
 * mark it written, and report a write of an output element that races with
 * another grid instance's (see ElemWriters). */
static void note_write(Interp *I, const TpkOp *op, const Val *ref, int64_t off, bool add) {
  Shadow *sh = ref->sh;
  if (!I->checked || !sh) return;
  if (sh->init) sh->init[off] = 1;
  if (!sh->writer || !I->instance) return;
  ElemWriters *w = &sh->writer[off];
  int64_t me = I->instance, stored = w->stored && w->stored != me ? w->stored : 0, added = 0;
  if (add) {
    if (!w->added) w->added = me;
    else if (w->added != me) w->added2 = me;
  } else {
    added = w->added && w->added != me ? w->added : w->added2 && w->added2 != me ? w->added2 : 0;
    w->stored = me;
  }
  if ((!stored && !added) || !first_report(I, op, sh, REP_CONFLICT)) return;
  TpkStr m = {0}, e = {0};
  put_elem(&e, sh, off);
  const char *elem = e.data ? e.data : "?";
  if (stored && !add) {
    tpk_str_puts(&m, "grid instances ");
    put_instance(&m, I, stored);
    tpk_str_puts(&m, " and ");
    put_instance(&m, I, me);
    tpk_str_printf(&m, " both write %s", elem);
  } else {
    tpk_str_puts(&m, "grid instance ");
    put_instance(&m, I, add ? stored : added);
    tpk_str_printf(&m, add ? " stores %s and " : " adds to %s and ", elem);
    put_instance(&m, I, me);
    tpk_str_puts(&m, add ? " adds to it" : " stores it");
  }
  violation(I, op, "%s", m.data ? m.data : "?");
  tpk_str_free(&m);
  tpk_str_free(&e);
}

/* An access (`reads` or `writes`) of elements [lo, hi] of ref while a copy
 * into some of them is in flight (another slot of a double buffer may be
 * in flight meanwhile). */
static void check_pending(Interp *I, const TpkOp *op, const Val *ref, const char *how, int64_t lo, int64_t hi) {
  Shadow *sh = ref->sh;
  if (!I->checked || !sh || !sh->npending) return;
  int k = -1;
  for (int i = 0; i < sh->npending && k < 0; i++)
    if (sh->pending_span[i][0] <= hi && lo <= sh->pending_span[i][1]) k = i;
  if (k < 0 || !first_report(I, op, sh, REP_RACE)) return;
  const TpkOp *d = sh->pending_op[k];
  violation(I, op, "%s %s %s before the wait of its copy_async (line %d:%d)", op_name(op), how, sh->name,
            d ? d->loc.line : 0, d ? d->loc.col : 0);
}

static void shadow_free(Shadow *sh) {
  if (!sh) return;
  free(sh->init);
  free(sh->writer);
  free(sh->pending);
  free(sh->pending_span);
  free(sh->pending_op);
  free(sh);
}

/* The shadow of key (created on first use), sized for n elements of dims;
 * every element uninitialised when `uninit`, else all initialised; a writer
 * map when `track_writer`. Returns NULL on allocation failure (err set). */
static Shadow *shadow_for(Interp *I, const TpkOp *op, const void *key, const char *name, int rank, const int64_t *dims,
                          int64_t n, bool uninit, bool track_writer) {
  Shadow *sh = NULL;
  for (int i = 0; i < I->nshadows && !sh; i++)
    if (I->shadows[i]->key == key) sh = I->shadows[i];
  if (!sh) {
    if (I->nshadows == I->capshadows) {
      int cap = I->capshadows ? 2 * I->capshadows : 8;
      Shadow **a = realloc(I->shadows, sizeof *a * (size_t)cap);
      if (!a) goto nomem;
      I->shadows = a, I->capshadows = cap;
    }
    sh = calloc(1, sizeof *sh);
    if (!sh) goto nomem;
    I->shadows[I->nshadows++] = sh;
    sh->key = key;
  }
  sh->name = name ? name : "?";
  sh->rank = rank;
  if (rank) memcpy(sh->dims, dims, sizeof(int64_t) * (size_t)rank);
  sh->npending = 0;
  free(sh->init), sh->init = NULL;
  free(sh->writer), sh->writer = NULL;
  sh->n = n;
  size_t m = (size_t)(n ? n : 1);
  if (uninit && !(sh->init = calloc(m, 1))) goto nomem;
  if (track_writer && !(sh->writer = calloc(m, sizeof *sh->writer))) goto nomem;
  return sh;
nomem:
  fail(I, op, TPK_ERR_NOMEM, "out of memory for checked mode's shadow state");
  return NULL;
}

/* ---- Elementwise ops -------------------------------------------------------- */

/* NaN-propagating max/min on f32 (fmaxf would drop the NaN). */
static float max_f(float a, float b) { return isnan(a) || isnan(b) ? NAN : (b > a ? b : a); }
static float min_f(float a, float b) { return isnan(a) || isnan(b) ? NAN : (b < a ? b : a); }

static TpkStatus exec_unary(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != x->n || r.dt != x->dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the operand");
  }
  bool isf = tpk_dtype_is_float(x->dt);
  for (int64_t i = 0; i < x->n; i++) {
    if (isf) {
      float a = (float)tpk_ref_get(x->dt, x->data, i), y;
      switch (op->opcode) {
      case TPK_OP_NEG: y = -a; break;
      case TPK_OP_ABS: y = fabsf(a); break;
      case TPK_OP_EXP: y = expf(a); break;
      case TPK_OP_LOG: y = logf(a); break;
      case TPK_OP_SQRT: y = sqrtf(a); break;
      case TPK_OP_RSQRT: y = 1.0f / sqrtf(a); break;
      case TPK_OP_TANH: y = tanhf(a); break;
      case TPK_OP_SIGMOID: y = 1.0f / (1.0f + expf(-a)); break;
      case TPK_OP_ERF: y = erff(a); break;
      case TPK_OP_FLOOR: y = floorf(a); break;
      case TPK_OP_CEIL: y = ceilf(a); break;
      case TPK_OP_ROUND: y = rintf(a); break; /* the default rounding mode: half to even */
      default: val_release(&r); return fail(I, op, TPK_ERR_INTERNAL, "not defined on %s", tpk_dtype_name(x->dt));
      }
      tpk_ref_set(r.dt, r.data, i, y);
    } else {
      int64_t a = tpk_ref_get_int(x->dt, x->data, i);
      uint64_t y;
      switch (op->opcode) {
      case TPK_OP_NEG: y = 0 - (uint64_t)a; break;
      case TPK_OP_ABS: y = a < 0 ? 0 - (uint64_t)a : (uint64_t)a; break; /* abs(INT32_MIN) wraps */
      case TPK_OP_NOT: y = x->dt == TPK_BOOL ? (uint64_t)!a : ~(uint64_t)a; break;
      default: val_release(&r); return fail(I, op, TPK_ERR_INTERNAL, "not defined on %s", tpk_dtype_name(x->dt));
      }
      tpk_ref_set_int(r.dt, r.data, i, y);
    }
  }
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_binary(Interp *I, const TpkOp *op) {
  Val *a = operand(I, op, 0, V_TENSOR), *b = operand(I, op, 1, V_TENSOR);
  if (!a || !b) return status(I);
  if (a->dt != b->dt || a->rank != b->rank || !same_dims(a->rank, a->dims, b->dims))
    return fail(I, op, TPK_ERR_INTERNAL, "operands differ in type");
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != a->n) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the operands");
  }
  bool cmp = (tpk_op_info(op->opcode)->flags & TPK_OPF_COMPARE) != 0;
  bool isf = tpk_dtype_is_float(a->dt);
  int64_t bits = (int64_t)tpk_dtype_info(a->dt)->bits;
  for (int64_t i = 0; i < a->n; i++) {
    if (isf) {
      float x = (float)tpk_ref_get(a->dt, a->data, i), y = (float)tpk_ref_get(b->dt, b->data, i), z = 0;
      bool c = false;
      switch (op->opcode) {
      case TPK_OP_ADD: z = x + y; break;
      case TPK_OP_SUB: z = x - y; break;
      case TPK_OP_MUL: z = x * y; break;
      case TPK_OP_DIV: z = x / y; break;
      case TPK_OP_REM: z = fmodf(x, y); break;
      case TPK_OP_MAX: z = max_f(x, y); break;
      case TPK_OP_MIN: z = min_f(x, y); break;
      case TPK_OP_POW: z = powf(x, y); break;
      /* comparisons with a NaN are false, except ne */
      case TPK_OP_EQ: c = x == y; break;
      case TPK_OP_NE: c = x != y; break;
      case TPK_OP_LT: c = x < y; break;
      case TPK_OP_LE: c = x <= y; break;
      case TPK_OP_GT: c = x > y; break;
      case TPK_OP_GE: c = x >= y; break;
      default:
        val_release(&r);
        return fail(I, op, TPK_ERR_INTERNAL, "not defined on %s", tpk_dtype_name(a->dt));
      }
      if (cmp)
        tpk_ref_set_int(r.dt, r.data, i, c);
      else
        tpk_ref_set(r.dt, r.data, i, z);
    } else {
      int64_t x = tpk_ref_get_int(a->dt, a->data, i), y = tpk_ref_get_int(b->dt, b->data, i);
      uint64_t z = 0;
      /* Operands have at most 32 bits, so int64 division cannot overflow;
       * the wrap to the dtype happens on store. */
      if ((op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV) && y == 0) {
        val_release(&r);
        return fail(I, op, TPK_ERR_INVALID, "integer division by zero (%" PRId64 " / 0)", x);
      }
      switch (op->opcode) {
      case TPK_OP_ADD: z = (uint64_t)x + (uint64_t)y; break;
      case TPK_OP_SUB: z = (uint64_t)x - (uint64_t)y; break;
      case TPK_OP_MUL: z = (uint64_t)x * (uint64_t)y; break;
      case TPK_OP_DIV: z = (uint64_t)(x / y); break;
      case TPK_OP_REM: z = (uint64_t)(x % y); break;
      case TPK_OP_CDIV: {
        int64_t q = x / y;
        if (x % y != 0 && ((x < 0) == (y < 0))) q++; /* truncation went down: round up */
        z = (uint64_t)q;
        break;
      }
      case TPK_OP_MAX: z = (uint64_t)(x > y ? x : y); break;
      case TPK_OP_MIN: z = (uint64_t)(x < y ? x : y); break;
      case TPK_OP_AND: z = (uint64_t)x & (uint64_t)y; break;
      case TPK_OP_OR: z = (uint64_t)x | (uint64_t)y; break;
      case TPK_OP_XOR: z = (uint64_t)x ^ (uint64_t)y; break;
      case TPK_OP_SHL: z = y < 0 || y >= bits ? 0 : (uint64_t)x << y; break;
      case TPK_OP_SHR: /* x is sign- or zero-extended to 64 bits, so shifting it shifts the dtype */
        if (y < 0 || y >= bits) z = x < 0 ? UINT64_MAX : 0;
        else z = x < 0 ? ~(~(uint64_t)x >> y) : (uint64_t)x >> y;
        break;
      case TPK_OP_MULHI: /* the exact product: unsigned in 64 bits, signed in int64 (|x|, |y| <= 2^31) */
        if (tpk_dtype_info(a->dt)->is_signed) {
          int64_t p = x * y;
          z = (uint64_t)(p < 0 ? ~(~p >> bits) : p >> bits);
        } else {
          z = ((uint64_t)x * (uint64_t)y) >> bits;
        }
        break;
      case TPK_OP_EQ: z = x == y; break;
      case TPK_OP_NE: z = x != y; break;
      case TPK_OP_LT: z = x < y; break;
      case TPK_OP_LE: z = x <= y; break;
      case TPK_OP_GT: z = x > y; break;
      case TPK_OP_GE: z = x >= y; break;
      default:
        val_release(&r);
        return fail(I, op, TPK_ERR_INTERNAL, "not defined on %s", tpk_dtype_name(a->dt));
      }
      tpk_ref_set_int(r.dt, r.data, i, z);
    }
  }
  return set_result(I, op, 0, &r);
}

/* Element i of x converted into element j of r, by the conversion rules:
 * integers wrap into integers, floats truncate and saturate into integers,
 * everything else rounds through the exact double. */
static void convert_elem(const Val *x, int64_t i, Val *r, int64_t j) {
  if (!tpk_dtype_is_float(x->dt) && r->dt != TPK_BOOL && !tpk_dtype_is_float(r->dt))
    tpk_ref_set_int(r->dt, r->data, j, (uint64_t)tpk_ref_get_int(x->dt, x->data, i));
  else
    tpk_ref_set(r->dt, r->data, j, tpk_ref_get(x->dt, x->data, i));
}

static TpkStatus exec_convert(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != x->n) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the operand");
  }
  for (int64_t i = 0; i < x->n; i++) convert_elem(x, i, &r, i);
  return set_result(I, op, 0, &r);
}

/* The same bytes, another dtype of their width. */
static TpkStatus exec_bitcast(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != x->n || ESIZE(&r) != ESIZE(x)) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the operand");
  }
  if (r.n) memcpy(r.data, x->data, (size_t)r.n * ESIZE(&r));
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_select(Interp *I, const TpkOp *op) {
  Val *c = operand(I, op, 0, V_TENSOR), *a = operand(I, op, 1, V_TENSOR), *b = operand(I, op, 2, V_TENSOR);
  if (!c || !a || !b) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (c->n != a->n || b->n != a->n || r.n != a->n || a->dt != r.dt || b->dt != r.dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "operands differ in shape");
  }
  size_t es = ESIZE(&r);
  for (int64_t i = 0; i < r.n; i++)
    memcpy(ELEM(&r, i), tpk_ref_get_int(c->dt, c->data, i) ? ELEM(a, i) : ELEM(b, i), es);
  return set_result(I, op, 0, &r);
}

/* ---- Constants and indices ---------------------------------------------------- */

/* Fill every element of r with attribute a converted to r's dtype. */
static void fill_attr(Val *r, const TpkAttr *a) {
  if (r->n == 0) return;
  if (!a)
    memset(r->data, 0, (size_t)r->n * ESIZE(r));
  else {
    if (a->kind == TPK_ATTR_FLOAT)
      tpk_ref_set(r->dt, r->data, 0, a->f);
    else if (tpk_dtype_is_float(r->dt))
      tpk_ref_set(r->dt, r->data, 0, (double)a->i);
    else
      tpk_ref_set_int(r->dt, r->data, 0, (uint64_t)a->i);
    for (int64_t i = 1; i < r->n; i++) memcpy(ELEM(r, i), r->data, ESIZE(r));
  }
}

static TpkStatus exec_const(Interp *I, const TpkOp *op) {
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  fill_attr(&r, tpk_op_attr(op, "value"));
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_iota(Interp *I, const TpkOp *op) {
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  int64_t axis = tpk_op_int(op, "axis", -1);
  if (axis < 0 || axis >= r.rank) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "axis %" PRId64 " out of range", axis);
  }
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t i = 0; i < r.n; i++, next_index(r.rank, r.dims, idx)) {
    if (tpk_dtype_is_float(r.dt))
      tpk_ref_set(r.dt, r.data, i, (double)idx[axis]);
    else
      tpk_ref_set_int(r.dt, r.data, i, (uint64_t)idx[axis]);
  }
  return set_result(I, op, 0, &r);
}

/* ---- Shape ops -------------------------------------------------------------- */

static TpkStatus exec_broadcast(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  int off = r.rank - x->rank;
  bool ok = off >= 0 && r.dt == x->dt;
  for (int d = 0; ok && d < x->rank; d++) ok = x->dims[d] == 1 || x->dims[d] == r.dims[off + d];
  if (!ok) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INVALID, "cannot broadcast the operand's shape to the result's");
  }
  int64_t xs[TPK_MAX_RANK], idx[TPK_MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xs);
  for (int64_t i = 0; i < r.n; i++, next_index(r.rank, r.dims, idx)) {
    int64_t xi = 0;
    for (int d = 0; d < x->rank; d++) xi += (x->dims[d] == 1 ? 0 : idx[off + d]) * xs[d];
    memcpy(ELEM(&r, i), ELEM(x, xi), ESIZE(&r));
  }
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_reshape(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  const TpkType *t = op->out[0].type;
  int64_t dims[TPK_MAX_RANK];
  if (!eval_dims(I, op, t, dims)) return status(I);
  int64_t n = count_of(t->rank, dims);
  if (t->kind != TPK_TYPE_TENSOR || t->dtype != x->dt || n != x->n)
    return fail(I, op, TPK_ERR_INVALID, "cannot reshape %" PRId64 " elements into %" PRId64, x->n, n);
  /* Row-major data is unchanged: share the buffer under the new shape. */
  Val r = {0};
  val_assign(&r, x);
  r.rank = t->rank;
  memcpy(r.dims, dims, sizeof dims);
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_transpose(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  const TpkAttr *perm = tpk_op_attr(op, "perm");
  if (!perm || perm->n != x->rank) return fail(I, op, TPK_ERR_INTERNAL, "perm does not match the rank");
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  int64_t xs[TPK_MAX_RANK], idx[TPK_MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xs);
  bool ok = r.rank == x->rank;
  for (int i = 0; ok && i < r.rank; i++)
    ok = perm->ints[i] >= 0 && perm->ints[i] < x->rank && r.dims[i] == x->dims[perm->ints[i]];
  if (!ok) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result shape does not match the permutation");
  }
  for (int64_t i = 0; i < r.n; i++, next_index(r.rank, r.dims, idx)) {
    int64_t xi = 0; /* result dim i is x dim perm[i] */
    for (int d = 0; d < r.rank; d++) xi += idx[d] * xs[perm->ints[d]];
    memcpy(ELEM(&r, i), ELEM(x, xi), ESIZE(&r));
  }
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_concat(Interp *I, const TpkOp *op) {
  int64_t axis = tpk_op_int(op, "axis", -1);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (axis < 0 || axis >= r.rank) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "axis %" PRId64 " out of range", axis);
  }
  int64_t rs[TPK_MAX_RANK], at = 0;
  strides_of(r.rank, r.dims, rs);
  for (int k = 0; k < op->nin; k++) {
    Val *x = operand(I, op, k, V_TENSOR);
    bool ok = x && x->rank == r.rank && x->dt == r.dt;
    for (int d = 0; ok && d < r.rank; d++) ok = d == axis || x->dims[d] == r.dims[d];
    if (!ok || at + x->dims[axis] > r.dims[axis]) {
      val_release(&r);
      return x ? fail(I, op, TPK_ERR_INTERNAL, "operand %d does not fit the result", k) : status(I);
    }
    int64_t idx[TPK_MAX_RANK] = {0};
    for (int64_t i = 0; i < x->n; i++, next_index(x->rank, x->dims, idx)) {
      int64_t ri = 0;
      for (int d = 0; d < r.rank; d++) ri += (d == axis ? idx[d] + at : idx[d]) * rs[d];
      memcpy(ELEM(&r, ri), ELEM(x, i), ESIZE(&r));
    }
    at += x->dims[axis];
  }
  return set_result(I, op, 0, &r);
}

/* ---- Reductions and dot ------------------------------------------------------- */

static TpkStatus exec_reduce(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  bool red[TPK_MAX_RANK] = {0};
  for (int i = 0; axes && i < axes->n; i++) {
    if (axes->ints[i] < 0 || axes->ints[i] >= x->rank) return fail(I, op, TPK_ERR_INTERNAL, "axis out of range");
    red[axes->ints[i]] = true;
  }
  TpkReduceKind k = tpk_op_reduce_kind(op);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  /* Kept dims (the output, in x's order) and reduced dims (inner loop). */
  int nk = 0, nr = 0;
  int64_t kd[TPK_MAX_RANK], ks[TPK_MAX_RANK], rd[TPK_MAX_RANK], rsd[TPK_MAX_RANK], xs[TPK_MAX_RANK];
  strides_of(x->rank, x->dims, xs);
  int64_t count = 1, outn = 1;
  for (int d = 0; d < x->rank; d++) {
    if (red[d]) {
      rd[nr] = x->dims[d], rsd[nr++] = xs[d];
      count *= x->dims[d];
    } else {
      kd[nk] = x->dims[d], ks[nk++] = xs[d];
      outn *= x->dims[d];
    }
  }
  if (outn != r.n || r.dt != x->dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the reduction");
  }
  bool isf = tpk_dtype_is_float(x->dt);
  int64_t ko[TPK_MAX_RANK] = {0};
  for (int64_t o = 0; o < r.n; o++, next_index(nk, kd, ko)) {
    int64_t base = 0;
    for (int d = 0; d < nk; d++) base += ko[d] * ks[d];
    int64_t ri[TPK_MAX_RANK] = {0};
    float facc = k == TPK_REDUCE_PROD ? 1.0f : k == TPK_REDUCE_MAX ? -INFINITY : k == TPK_REDUCE_MIN ? INFINITY : 0.0f;
    uint64_t iacc = k == TPK_REDUCE_PROD ? 1 : 0;
    int64_t imax = INT64_MIN, imin = INT64_MAX;
    for (int64_t c = 0; c < count; c++, next_index(nr, rd, ri)) {
      int64_t xi = base;
      for (int d = 0; d < nr; d++) xi += ri[d] * rsd[d];
      if (isf) {
        float v = (float)tpk_ref_get(x->dt, x->data, xi);
        switch (k) {
        case TPK_REDUCE_SUM:
        case TPK_REDUCE_MEAN: facc = facc + v; break;
        case TPK_REDUCE_PROD: facc = facc * v; break;
        case TPK_REDUCE_MAX: facc = max_f(facc, v); break;
        case TPK_REDUCE_MIN: facc = min_f(facc, v); break;
        }
      } else {
        int64_t v = tpk_ref_get_int(x->dt, x->data, xi);
        switch (k) {
        case TPK_REDUCE_SUM:
        case TPK_REDUCE_MEAN: iacc += (uint64_t)v; break;
        case TPK_REDUCE_PROD: iacc *= (uint64_t)v; break;
        case TPK_REDUCE_MAX: imax = v > imax ? v : imax; break;
        case TPK_REDUCE_MIN: imin = v < imin ? v : imin; break;
        }
      }
    }
    if (isf) {
      if (k == TPK_REDUCE_MEAN) facc = facc / (float)count;
      tpk_ref_set(r.dt, r.data, o, facc);
    } else if (k == TPK_REDUCE_MAX || k == TPK_REDUCE_MIN) {
      /* An empty max/min of integers: the dtype's extreme, via saturation. */
      tpk_ref_set(r.dt, r.data, o, k == TPK_REDUCE_MAX ? (count ? (double)imax : -INFINITY) : (count ? (double)imin : INFINITY));
    } else {
      tpk_ref_set_int(r.dt, r.data, o, iacc); /* mean is float-only (verified) */
    }
  }
  return set_result(I, op, 0, &r);
}

/* Inclusive scan along one axis: one accumulator per line, in ascending
 * order (floats in f32, each output rounded to the dtype; integers wrap). */
static TpkStatus exec_scan(Interp *I, const TpkOp *op) {
  Val *x = operand(I, op, 0, V_TENSOR);
  if (!x) return status(I);
  int64_t axis = tpk_op_int(op, "axis", -1);
  if (axis < 0 || axis >= x->rank) return fail(I, op, TPK_ERR_INTERNAL, "axis out of range");
  TpkReduceKind k = tpk_op_reduce_kind(op);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != x->n || r.dt != x->dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the operand");
  }
  int64_t len = x->dims[axis], inner = 1, outer = 1;
  for (int d = 0; d < x->rank; d++) {
    if (d < axis) outer *= x->dims[d];
    if (d > axis) inner *= x->dims[d];
  }
  bool isf = tpk_dtype_is_float(x->dt);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      float facc = 0;
      int64_t iacc = 0;
      for (int64_t l = 0; l < len; l++) {
        int64_t i = (o * len + l) * inner + in;
        if (isf) {
          float v = (float)tpk_ref_get(x->dt, x->data, i);
          if (l == 0) facc = v;
          else if (k == TPK_REDUCE_SUM) facc = facc + v;
          else if (k == TPK_REDUCE_PROD) facc = facc * v;
          else if (k == TPK_REDUCE_MAX) facc = max_f(facc, v);
          else facc = min_f(facc, v);
          tpk_ref_set(r.dt, r.data, i, facc);
        } else {
          int64_t v = tpk_ref_get_int(x->dt, x->data, i);
          if (l == 0) iacc = v;
          else if (k == TPK_REDUCE_SUM) iacc = (int64_t)((uint64_t)iacc + (uint64_t)v);
          else if (k == TPK_REDUCE_PROD) iacc = (int64_t)((uint64_t)iacc * (uint64_t)v);
          else if (k == TPK_REDUCE_MAX) iacc = v > iacc ? v : iacc;
          else iacc = v < iacc ? v : iacc;
          tpk_ref_set_int(r.dt, r.data, i, (uint64_t)iacc);
          iacc = tpk_ref_get_int(r.dt, r.data, i); /* wrapped to the dtype, as the next step sees it */
        }
      }
    }
  return set_result(I, op, 0, &r);
}

/* Per contracted multi-index (row-major over the contract list), the element
 * offset it adds in x: one table per operand, so the inner loop is flat. */
static int64_t *contract_offsets(const Val *x, const TpkAttr *axes, const int64_t *cdims, int64_t count) {
  int64_t xs[TPK_MAX_RANK], idx[TPK_MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xs);
  int64_t *t = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
  if (!t) return NULL;
  for (int64_t c = 0; c < count; c++, next_index(axes->n, cdims, idx)) {
    t[c] = 0;
    for (int i = 0; i < axes->n; i++) t[c] += idx[i] * xs[axes->ints[i]];
  }
  return t;
}

static TpkStatus exec_dot(Interp *I, const TpkOp *op) {
  Val *a = operand(I, op, 0, V_TENSOR), *b = operand(I, op, 1, V_TENSOR);
  Val *x = op->nin == 3 ? operand(I, op, 2, V_TENSOR) : NULL; /* the accumulator */
  if (!a || !b || (op->nin == 3 && !x)) return status(I);
  const TpkAttr *lc = tpk_op_attr(op, "lhs_contract"), *rc = tpk_op_attr(op, "rhs_contract");
  const TpkAttr *lb = tpk_op_attr(op, "lhs_batch"), *rb = tpk_op_attr(op, "rhs_batch");
  if (!lc || !rc || !lb || !rb || lc->n != rc->n || lb->n != rb->n || a->dt != b->dt)
    return fail(I, op, TPK_ERR_INTERNAL, "malformed dot");
  bool aused[TPK_MAX_RANK] = {0}, bused[TPK_MAX_RANK] = {0};
  int64_t cdims[TPK_MAX_RANK], count = 1;
  for (int i = 0; i < lc->n; i++) {
    int64_t ia = lc->ints[i], ib = rc->ints[i];
    if (ia < 0 || ia >= a->rank || ib < 0 || ib >= b->rank || a->dims[ia] != b->dims[ib])
      return fail(I, op, TPK_ERR_INVALID, "contracted dims differ");
    aused[ia] = bused[ib] = true;
    cdims[i] = a->dims[ia];
    count *= cdims[i];
  }
  /* The output's dims, each saying which a and b dims it indexes. */
  int orank = 0;
  int64_t odims[TPK_MAX_RANK], oa[TPK_MAX_RANK], ob[TPK_MAX_RANK]; /* stride contributions */
  int64_t as[TPK_MAX_RANK], bs[TPK_MAX_RANK];
  strides_of(a->rank, a->dims, as);
  strides_of(b->rank, b->dims, bs);
  for (int i = 0; i < lb->n; i++) {
    int64_t ia = lb->ints[i], ib = rb->ints[i];
    if (ia < 0 || ia >= a->rank || ib < 0 || ib >= b->rank || a->dims[ia] != b->dims[ib] || orank >= TPK_MAX_RANK)
      return fail(I, op, TPK_ERR_INVALID, "batch dims differ");
    aused[ia] = bused[ib] = true;
    odims[orank] = a->dims[ia], oa[orank] = as[ia], ob[orank++] = bs[ib];
  }
  for (int d = 0; d < a->rank; d++)
    if (!aused[d] && orank < TPK_MAX_RANK) odims[orank] = a->dims[d], oa[orank] = as[d], ob[orank++] = 0;
  for (int d = 0; d < b->rank; d++)
    if (!bused[d] && orank < TPK_MAX_RANK) odims[orank] = b->dims[d], oa[orank] = 0, ob[orank++] = bs[d];
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.rank != orank || !same_dims(orank, r.dims, odims) || (x && (x->n != r.n || x->dt != r.dt))) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result shape does not match the dot");
  }
  int64_t *ta = contract_offsets(a, lc, cdims, count), *tb = contract_offsets(b, rc, cdims, count);
  if (!ta || !tb) {
    free(ta), free(tb), val_release(&r);
    return fail(I, op, TPK_ERR_NOMEM, "out of memory");
  }
  /* Widen both operands once (exactly: f32 for floats, int32 for integers,
   * which all fit) so the inner loop reads plain arrays. */
  bool isf = tpk_dtype_is_float(a->dt);
  size_t w = isf ? sizeof(float) : sizeof(int32_t);
  void *wa = malloc(w * (size_t)(a->n ? a->n : 1)), *wb = malloc(w * (size_t)(b->n ? b->n : 1));
  if (!wa || !wb) {
    free(ta), free(tb), free(wa), free(wb), val_release(&r);
    return fail(I, op, TPK_ERR_NOMEM, "out of memory");
  }
  for (int64_t i = 0; i < a->n; i++)
    if (isf) ((float *)wa)[i] = (float)tpk_ref_get(a->dt, a->data, i);
    else ((int32_t *)wa)[i] = (int32_t)tpk_ref_get_int(a->dt, a->data, i);
  for (int64_t i = 0; i < b->n; i++)
    if (isf) ((float *)wb)[i] = (float)tpk_ref_get(b->dt, b->data, i);
    else ((int32_t *)wb)[i] = (int32_t)tpk_ref_get_int(b->dt, b->data, i);
  const float *fa = wa, *fb = wb;
  const int32_t *ia = wa, *ib = wb;
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t o = 0; o < r.n; o++, next_index(orank, odims, idx)) {
    int64_t abase = 0, bbase = 0;
    for (int d = 0; d < orank; d++) abase += idx[d] * oa[d], bbase += idx[d] * ob[d];
    if (isf) {
      /* One f32 accumulator, from the accumulator operand's element or 0,
       * k ascending, fused multiply-add. */
      float acc = x ? (float)tpk_ref_get(x->dt, x->data, o) : 0.0f;
      for (int64_t c = 0; c < count; c++) acc = fmaf(fa[abase + ta[c]], fb[bbase + tb[c]], acc);
      tpk_ref_set(r.dt, r.data, o, acc);
    } else {
      uint64_t acc = x ? (uint64_t)tpk_ref_get_int(x->dt, x->data, o) : 0; /* wraps; stored modulo 2^32 */
      for (int64_t c = 0; c < count; c++) acc += (uint64_t)(int64_t)ia[abase + ta[c]] * (uint64_t)(int64_t)ib[bbase + tb[c]];
      tpk_ref_set_int(r.dt, r.data, o, acc);
    }
  }
  free(wa);
  free(wb);
  free(ta);
  free(tb);
  return set_result(I, op, 0, &r);
}

/* ---- gather / scatter (values) ------------------------------------------------ */

/* numpy take along axis: result[pre, ids_idx, post] = table[pre, ids[ids_idx], post].
 * For scatter, `upd` walks the same shape and writes into r (a copy of base). */
static TpkStatus take(Interp *I, const TpkOp *op, const Val *table, const Val *ids, Val *r, const Val *upd, bool add) {
  int64_t axis = tpk_op_int(op, "axis", -1);
  if (axis < 0 || axis >= table->rank) return fail(I, op, TPK_ERR_INTERNAL, "axis out of range");
  int grank = (int)(table->rank - 1 + ids->rank);
  if (grank > TPK_MAX_RANK) return fail(I, op, TPK_ERR_INTERNAL, "result rank too large");
  int64_t gdims[TPK_MAX_RANK];
  int g = 0;
  for (int d = 0; d < axis; d++) gdims[g++] = table->dims[d];
  for (int d = 0; d < ids->rank; d++) gdims[g++] = ids->dims[d];
  for (int d = (int)axis + 1; d < table->rank; d++) gdims[g++] = table->dims[d];
  const Val *walk = upd ? upd : r; /* the tensor shaped like the gather */
  if (walk->rank != grank || !same_dims(grank, walk->dims, gdims) || walk->dt != table->dt)
    return fail(I, op, TPK_ERR_INTERNAL, "shapes do not match numpy take");
  int64_t ts[TPK_MAX_RANK], is[TPK_MAX_RANK], idx[TPK_MAX_RANK] = {0};
  strides_of(table->rank, table->dims, ts);
  strides_of(ids->rank, ids->dims, is);
  size_t es = tpk_dtype_size(table->dt);
  for (int64_t i = 0; i < walk->n; i++, next_index(grank, gdims, idx)) {
    int64_t ii = 0, ti = 0;
    for (int d = 0; d < ids->rank; d++) ii += idx[axis + d] * is[d];
    int64_t id = tpk_ref_get_int(ids->dt, ids->data, ii);
    if (id < 0 || id >= table->dims[axis]) {
      if (!I->checked)
        return fail(I, op, TPK_ERR_INVALID, "%s index %" PRId64 " is out of range for dimension %" PRId64 " of size %" PRId64,
                    upd ? "scatter" : "gather", id, axis, table->dims[axis]);
      violation(I, op, "%s index %" PRId64 " (element %" PRId64 " of the index tensor) is out of range for dimension %" PRId64
                " of size %" PRId64, upd ? "scatter" : "gather", id, ii, axis, table->dims[axis]);
      continue; /* skipped: a gather reads 0, a scatter drops it */
    }
    for (int d = 0; d < axis; d++) ti += idx[d] * ts[d];
    ti += id * ts[axis];
    for (int d = (int)axis + 1; d < table->rank; d++) ti += idx[d - 1 + ids->rank] * ts[d];
    if (!upd)
      memcpy(ELEM(r, i), ELEM(table, ti), es);
    else if (!add)
      memcpy(ELEM(r, ti), ELEM(upd, i), es);
    else if (tpk_dtype_is_float(r->dt))
      tpk_ref_set(r->dt, r->data, ti, (float)tpk_ref_get(r->dt, r->data, ti) + (float)tpk_ref_get(upd->dt, upd->data, i));
    else
      tpk_ref_set_int(r->dt, r->data, ti,
                      (uint64_t)tpk_ref_get_int(r->dt, r->data, ti) + (uint64_t)tpk_ref_get_int(upd->dt, upd->data, i));
  }
  return TPK_OK;
}

static TpkStatus exec_gather(Interp *I, const TpkOp *op) {
  Val *table = operand(I, op, 0, V_TENSOR), *ids = operand(I, op, 1, V_TENSOR);
  if (!table || !ids) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  TpkStatus st = take(I, op, table, ids, &r, NULL, false);
  if (st != TPK_OK) {
    val_release(&r);
    return st;
  }
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_scatter(Interp *I, const TpkOp *op) {
  Val *base = operand(I, op, 0, V_TENSOR), *ids = operand(I, op, 1, V_TENSOR), *upd = operand(I, op, 2, V_TENSOR);
  if (!base || !ids || !upd) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != base->n || r.dt != base->dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the base");
  }
  if (r.n) memcpy(r.data, base->data, (size_t)r.n * ESIZE(&r));
  TpkStatus st = take(I, op, &r, ids, &r, upd, tpk_op_store_mode(op) == TPK_STORE_ADD);
  if (st != TPK_OK) {
    val_release(&r);
    return st;
  }
  return set_result(I, op, 0, &r);
}

/* ---- Index patterns: load, store, slice, dma_start ------------------------------ */

/* A selection of a block from a ref or tensor by an index pattern. Selected
 * dim j walks base dim bdim[j]: element k of it is base index start[j] + k
 * ('t', 'r', ':'), or g[j][k] ('g'); 's' dims are folded into `fixed`. */
typedef struct Sel {
  int rank;
  int64_t dims[TPK_MAX_RANK]; /* selected shape; -1: an 'r' size not known yet */
  int bdim[TPK_MAX_RANK];
  int64_t start[TPK_MAX_RANK];
  const Val *g[TPK_MAX_RANK];
  int64_t lanes[TPK_MAX_RANK]; /* 'g' of a store: index lanes below it are real (padding_lanes) */
  int64_t fixed;              /* element offset of the 's' indices */
  const Val *base;
  int64_t bstride[TPK_MAX_RANK];
  bool dead; /* checked mode: an 's' index was out of range, every element is skipped */
} Sel;

/* How many lanes of index vector v are real: all of them, unless v was
 * loaded as a ragged block of a rank-1 tensor (tpk_index_vector_load), whose
 * lanes past the tensor's end a store drops. */
static int64_t padding_lanes(Interp *I, const TpkValue *v, int64_t n) {
  const TpkOp *ld = tpk_index_vector_load(v);
  const Val *ids = ld ? slot(I, ld->in[0]) : NULL, *at = ld ? slot(I, ld->in[1]) : NULL;
  if (!ids || !at) return n;
  int64_t start;
  if (at->kind == V_TILE) start = at->id * at->block;
  else if (at->kind == V_TENSOR && at->rank == 0) start = tpk_ref_get_int(at->dt, at->data, 0);
  else return n;
  int64_t real = ids->dims[0] - start;
  return real < 0 ? 0 : real < n ? real : n;
}

/* Apply index pattern `key` of op to base, consuming operands from `first`.
 * `want` (may be NULL) is the shape on the other side, giving RANGE sizes.
 * Returns the number of operands used, or -1 after an error. */
static int select_block(Interp *I, const TpkOp *op, const char *key, const Val *base, int first, const int64_t *want,
                        int want_rank, Sel *s) {
  const TpkIndexPattern *pat = tpk_op_index(op, key);
  memset(s, 0, sizeof *s);
  s->base = base;
  if (pat->rank != base->rank) {
    fail(I, op, TPK_ERR_INTERNAL, "%s does not match the rank %d of the indexed value", key, base->rank);
    return -1;
  }
  strides_of(base->rank, base->dims, s->bstride);
  int k = first;
  for (int i = 0; i < base->rank; i++) {
    int j = s->rank; /* <= i < TPK_MAX_RANK */
    switch (pat->dim[i]) {
    case TPK_INDEX_ALL:
      s->dims[j] = base->dims[i], s->bdim[j] = i, s->start[j] = 0, s->rank++;
      break;
    case TPK_INDEX_TILE: {
      Val *t = operand(I, op, k++, V_TILE);
      if (!t) return -1;
      s->dims[j] = t->block, s->bdim[j] = i, s->start[j] = t->id * t->block, s->rank++;
      break;
    }
    case TPK_INDEX_SCALAR: {
      int64_t v;
      if (!scalar_int(I, op, k++, &v)) return -1;
      if (v < 0 || v >= base->dims[i]) {
        if (!I->checked) {
          fail(I, op, TPK_ERR_INVALID, "index %" PRId64 " is out of range for dimension %d of size %" PRId64, v, i,
               base->dims[i]);
          return -1;
        }
        violation(I, op, "%s index %" PRId64 " is out of range for dimension %d of %s (size %" PRId64 ")", op_name(op), v, i,
                  base->sh ? base->sh->name : "the operand", base->dims[i]);
        s->dead = true;
        break;
      }
      s->fixed += v * s->bstride[i];
      break;
    }
    case TPK_INDEX_RANGE: {
      int64_t v;
      if (!scalar_int(I, op, k++, &v)) return -1;
      s->dims[j] = want && j < want_rank ? want[j] : -1;
      s->bdim[j] = i, s->start[j] = v, s->rank++;
      break;
    }
    case TPK_INDEX_GATHER: {
      Val *g = operand(I, op, k++, V_TENSOR);
      if (!g) return -1;
      if (g->rank != 1 || tpk_dtype_is_float(g->dt)) {
        fail(I, op, TPK_ERR_INTERNAL, "gather index operand %d is not an integer vector", k - 1);
        return -1;
      }
      for (int64_t e = 0; e < g->n; e++) {
        int64_t v = tpk_ref_get_int(g->dt, g->data, e);
        if ((v < 0 || v >= base->dims[i]) && I->checked) { /* masked by sel_offset */
          violation(I, op, "%s index %" PRId64 " (element %" PRId64 " of the index vector) is out of range for dimension %d of %s (size %" PRId64 ")",
                    op->opcode == TPK_OP_STORE ? "scatter" : "gather", v, e, i, base->sh ? base->sh->name : "the operand",
                    base->dims[i]);
        } else if (v < 0 || v >= base->dims[i]) {
          fail(I, op, TPK_ERR_INVALID,
               "%s index %" PRId64 " (element %" PRId64 " of the index vector) is out of range for dimension %d of size %" PRId64,
               op->opcode == TPK_OP_STORE ? "scatter" : "gather", v, e, i, base->dims[i]);
          return -1;
        }
      }
      s->dims[j] = g->n, s->bdim[j] = i, s->g[j] = g, s->lanes[j] = g->n, s->rank++;
      if (op->opcode == TPK_OP_STORE) s->lanes[j] = padding_lanes(I, op->in[k - 1], g->n);
      break;
    }
    }
  }
  return k - first;
}

/* Base element offset of selected multi-index idx, or -1 when masked. */
static int64_t sel_offset(const Sel *s, const int64_t *idx) {
  if (s->dead) return -1;
  int64_t off = s->fixed;
  for (int j = 0; j < s->rank; j++) {
    if (s->g[j] && idx[j] >= s->lanes[j]) return -1;
    int64_t b = s->g[j] ? tpk_ref_get_int(s->g[j]->dt, s->g[j]->data, idx[j]) : s->start[j] + idx[j];
    if (b < 0 || b >= s->base->dims[s->bdim[j]]) return -1;
    off += b * s->bstride[s->bdim[j]];
  }
  return off;
}

/* The first and last element offsets a selection can touch (a bound: a
 * gathered dimension counts whole). */
static void sel_span(const Sel *s, int64_t *lo, int64_t *hi) {
  *lo = *hi = s->fixed;
  for (int j = 0; j < s->rank; j++) {
    int64_t D = s->base->dims[s->bdim[j]], st = s->bstride[s->bdim[j]];
    int64_t a = s->g[j] ? 0 : s->start[j], b = s->g[j] ? D - 1 : s->start[j] + (s->dims[j] < 0 ? 0 : s->dims[j]) - 1;
    if (a < 0) a = 0;
    if (b > D - 1) b = D - 1;
    *lo += a * st;
    *hi += b * st;
  }
}

static bool sel_matches(Interp *I, const TpkOp *op, const Sel *s, int rank, const int64_t *dims, const char *what) {
  if (s->rank != rank || !same_dims(rank, s->dims, dims)) {
    fail(I, op, TPK_ERR_INTERNAL, "the selected block does not match the %s", what);
    return false;
  }
  return true;
}

/* load and slice: read the selected block; masked elements read `other`. */
static TpkStatus exec_load(Interp *I, const TpkOp *op) {
  Val *base = operand(I, op, 0, op->opcode == TPK_OP_LOAD ? V_REF : V_TENSOR);
  if (!base) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  Sel s;
  int n = select_block(I, op, "index", base, 1, r.dims, r.rank, &s);
  if (n < 0 || !sel_matches(I, op, &s, r.rank, r.dims, "result") || r.dt != base->dt) {
    if (n >= 0 && r.dt != base->dt) fail(I, op, TPK_ERR_INTERNAL, "result dtype differs");
    val_release(&r);
    return status(I);
  }
  /* The fill value, converted once to the dtype. */
  unsigned char other[8] = {0};
  Val ov = {.dt = r.dt, .n = 1, .data = other};
  fill_attr(&ov, op->opcode == TPK_OP_LOAD ? tpk_op_attr(op, "other") : NULL);
  size_t es = ESIZE(&r);
  int64_t lo, hi;
  sel_span(&s, &lo, &hi);
  if (op->opcode == TPK_OP_LOAD) check_pending(I, op, base, "reads", lo, hi);
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t i = 0; i < r.n; i++, next_index(r.rank, r.dims, idx)) {
    int64_t off = sel_offset(&s, idx);
    if (off >= 0 && op->opcode == TPK_OP_LOAD) check_read(I, op, base, off);
    memcpy(ELEM(&r, i), off < 0 ? other : ELEM(base, off), es);
  }
  return set_result(I, op, 0, &r);
}

/* What a store and an atomic share: the ref (operand 0), the value (the
 * last operand) of its dtype, the block they select, and the check that no
 * DMA in flight touches that block. */
static bool write_target(Interp *I, const TpkOp *op, const char *what, Val **ref, Val **v, Sel *s) {
  *ref = operand(I, op, 0, V_REF), *v = operand(I, op, op->nin - 1, V_TENSOR);
  if (!*ref || !*v) return false;
  if ((*v)->dt != (*ref)->dt) return fail(I, op, TPK_ERR_INTERNAL, "value dtype differs from the ref's"), false;
  int n = select_block(I, op, "index", *ref, 1, (*v)->dims, (*v)->rank, s);
  if (n < 0 || !sel_matches(I, op, s, (*v)->rank, (*v)->dims, what)) return false;
  int64_t lo, hi;
  sel_span(s, &lo, &hi);
  check_pending(I, op, *ref, "writes", lo, hi);
  return true;
}

static TpkStatus exec_store(Interp *I, const TpkOp *op) {
  Val *ref, *v;
  Sel s;
  if (!write_target(I, op, "stored value", &ref, &v, &s)) return status(I);
  bool add = tpk_op_store_mode(op) == TPK_STORE_ADD;
  bool isf = tpk_dtype_is_float(v->dt);
  size_t es = ESIZE(v);
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t i = 0; i < v->n; i++, next_index(v->rank, v->dims, idx)) {
    int64_t off = sel_offset(&s, idx);
    if (off < 0) continue; /* masked: dropped */
    if (add) check_read(I, op, ref, off);
    /* Adding 0 leaves the element as it was: not a write that can conflict. */
    if (!add || (isf ? tpk_ref_get(v->dt, v->data, i) != 0 : tpk_ref_get_int(v->dt, v->data, i) != 0))
      note_write(I, op, ref, off, add);
    if (!add)
      memcpy(ELEM(ref, off), ELEM(v, i), es);
    else if (isf)
      tpk_ref_set(ref->dt, ref->data, off, (float)tpk_ref_get(ref->dt, ref->data, off) + (float)tpk_ref_get(v->dt, v->data, i));
    else
      tpk_ref_set_int(ref->dt, ref->data, off,
                      (uint64_t)tpk_ref_get_int(ref->dt, ref->data, off) + (uint64_t)tpk_ref_get_int(v->dt, v->data, i));
  }
  return TPK_OK;
}

/* Each selected element becomes kind(old, value), one element at a time in
 * row-major order of the value (duplicate gather indices see each other's
 * updates); the result holds the old values (masked lanes: 0). Several
 * instances combining one element are not a race: like `+=`, they
 * accumulate. */
static TpkStatus exec_atomic(Interp *I, const TpkOp *op) {
  Val *ref, *v;
  Sel s;
  if (!write_target(I, op, "atomic value", &ref, &v, &s)) return status(I);
  Val r;
  if (!new_result(I, op, 0, &r)) return status(I);
  if (r.n != v->n || r.dt != v->dt) {
    val_release(&r);
    return fail(I, op, TPK_ERR_INTERNAL, "result does not match the value");
  }
  TpkReduceKind k = tpk_op_reduce_kind(op);
  bool isf = tpk_dtype_is_float(v->dt);
  size_t es = ESIZE(v);
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t i = 0; i < v->n; i++, next_index(v->rank, v->dims, idx)) {
    int64_t off = sel_offset(&s, idx);
    if (off < 0) {
      memset(ELEM(&r, i), 0, es);
      continue;
    }
    check_read(I, op, ref, off);
    note_write(I, op, ref, off, true);
    memcpy(ELEM(&r, i), ELEM(ref, off), es);
    if (isf) {
      float a = (float)tpk_ref_get(ref->dt, ref->data, off), b = (float)tpk_ref_get(v->dt, v->data, i);
      tpk_ref_set(ref->dt, ref->data, off, k == TPK_REDUCE_SUM ? a + b : k == TPK_REDUCE_MAX ? max_f(a, b) : min_f(a, b));
    } else {
      int64_t a = tpk_ref_get_int(ref->dt, ref->data, off), b = tpk_ref_get_int(v->dt, v->data, i);
      uint64_t c = k == TPK_REDUCE_SUM ? (uint64_t)a + (uint64_t)b : (uint64_t)(k == TPK_REDUCE_MAX ? (a > b ? a : b) : (a < b ? a : b));
      tpk_ref_set_int(ref->dt, ref->data, off, c);
    }
  }
  return set_result(I, op, 0, &r);
}

static TpkStatus exec_dma_start(Interp *I, const TpkOp *op) {
  Val *src = operand(I, op, 0, V_REF);
  if (!src) return status(I);
  Sel s, d;
  int ns = select_block(I, op, "src_index", src, 1, NULL, 0, &s);
  if (ns < 0) return status(I);
  Val *dst = operand(I, op, 1 + ns, V_REF);
  if (!dst) return status(I);
  if (select_block(I, op, "dst_index", dst, 2 + ns, NULL, 0, &d) < 0) return status(I);
  if (s.rank != d.rank || src->dt != dst->dt) return fail(I, op, TPK_ERR_INTERNAL, "source and destination blocks differ");
  for (int j = 0; j < s.rank; j++) { /* an 'r' takes its size from the other side */
    if (s.dims[j] < 0) s.dims[j] = d.dims[j];
    if (d.dims[j] < 0) d.dims[j] = s.dims[j];
    if (s.dims[j] != d.dims[j] || s.dims[j] < 0)
      return fail(I, op, TPK_ERR_INVALID, "source block dim %d (%" PRId64 ") and destination (%" PRId64 ") differ", j,
                  s.dims[j], d.dims[j]);
  }
  const TpkValue *lenv = tpk_dma_length(op);
  if (lenv) { /* only the first len entries of axis 0 move, the rest of the destination stays */
    int64_t len;
    if (!scalar_int(I, op, op->nin - 1, &len)) return status(I);
    if (I->checked && (len < 0 || len > s.dims[0]))
      violation(I, op, "copy_async(len=%" PRId64 ") is outside its block of %" PRId64 " entries along axis 0", len,
                s.dims[0]);
    s.dims[0] = d.dims[0] = len < 0 ? 0 : len < s.dims[0] ? len : s.dims[0];
  }
  int64_t n = count_of(s.rank, s.dims);
  if (n < 0) return fail(I, op, TPK_ERR_INVALID, "the copied block is too large");
  size_t es = tpk_dtype_size(src->dt);
  static const unsigned char zero[8];
  int64_t slo, shi, dlo, dhi;
  sel_span(&s, &slo, &shi);
  sel_span(&d, &dlo, &dhi);
  check_pending(I, op, src, "reads", slo, shi);
  int64_t idx[TPK_MAX_RANK] = {0};
  for (int64_t i = 0; i < n; i++, next_index(s.rank, s.dims, idx)) {
    int64_t so = sel_offset(&s, idx), dof = sel_offset(&d, idx);
    if (so >= 0 && dof >= 0) check_read(I, op, src, so);
    if (dof >= 0) note_write(I, op, dst, dof, false);
    if (dof >= 0) memcpy(ELEM(dst, dof), so < 0 ? zero : ELEM(src, so), es);
  }
  Val h = {.kind = V_DMA, .id = ++I->dma_serial, .n = n * (int64_t)es}; /* n: the bytes it moves */
  Shadow *sh = I->checked ? dst->sh : NULL;
  if (sh) { /* in flight until its wait */
    if (sh->npending == sh->cappending) {
      int cap = sh->cappending ? 2 * sh->cappending : 4;
      int64_t *p = realloc(sh->pending, sizeof *p * (size_t)cap);
      if (p) sh->pending = p;
      const TpkOp **po = p ? realloc(sh->pending_op, sizeof *po * (size_t)cap) : NULL;
      if (po) sh->pending_op = po;
      int64_t(*ps)[2] = po ? realloc(sh->pending_span, sizeof *ps * (size_t)cap) : NULL;
      if (ps) sh->pending_span = ps;
      if (!p || !po || !ps) return fail(I, op, TPK_ERR_NOMEM, "out of memory");
      sh->cappending = cap;
    }
    sh->pending[sh->npending] = h.id;
    sh->pending_span[sh->npending][0] = dlo;
    sh->pending_span[sh->npending][1] = dhi;
    sh->pending_op[sh->npending++] = op;
    h.sh = sh;
  }
  return set_result(I, op, 0, &h);
}

/* The copy (serial) is waited for: off its destination's in-flight list. */
static void copy_landed(Shadow *sh, int64_t serial) {
  for (int i = 0; sh && i < sh->npending; i++)
    if (sh->pending[i] == serial) {
      memmove(&sh->pending[i], &sh->pending[i + 1], sizeof *sh->pending * (size_t)(sh->npending - i - 1));
      memmove(&sh->pending_op[i], &sh->pending_op[i + 1], sizeof *sh->pending_op * (size_t)(sh->npending - i - 1));
      memmove(&sh->pending_span[i], &sh->pending_span[i + 1], sizeof *sh->pending_span * (size_t)(sh->npending - i - 1));
      sh->npending--;
      return;
    }
}

/* The semaphore operands sem[slot] of op (from operand k), checked. */
static bool sem_slot(Interp *I, const TpkOp *op, int k, Val **sem, int64_t *slot) {
  *sem = operand(I, op, k, V_REF);
  if (!*sem || !scalar_int(I, op, k + 1, slot)) return false;
  if (*slot < 0 || *slot >= (*sem)->dims[0]) {
    fail(I, op, TPK_ERR_INVALID, "semaphore index %" PRId64 " is out of range [0, %" PRId64 ")", *slot, (*sem)->dims[0]);
    return false;
  }
  return true;
}

static TpkStatus exec_dma_signal(Interp *I, const TpkOp *op) {
  Val *h = operand(I, op, 0, V_DMA), *sem;
  int64_t slot;
  if (!h || !sem_slot(I, op, 1, &sem, &slot)) return status(I);
  if (I->nsemcopies == I->capsemcopies) {
    int cap = I->capsemcopies ? 2 * I->capsemcopies : 8;
    struct SemCopy *p = realloc(I->semcopies, sizeof *p * (size_t)cap);
    if (!p) return fail(I, op, TPK_ERR_NOMEM, "out of memory");
    I->semcopies = p, I->capsemcopies = cap;
  }
  const char *name = op->in[1]->name ? op->in[1]->name : "a semaphore";
  I->semcopies[I->nsemcopies++] = (struct SemCopy){sem->data, name, slot, h->id, h->n, h->sh, op};
  return TPK_OK;
}

/* The oldest copy in flight on sem[slot] lands; none is a wait that would
 * never end. With a byte count (Pallas's semaphores count bytes) copies
 * land oldest first until that many bytes have; a copy the count reaches
 * only part of stays in flight with the rest; too few bytes in flight is a
 * wait that would never end. */
static TpkStatus exec_dma_wait_sem(Interp *I, const TpkOp *op) {
  Val *sem;
  int64_t slot, want = -1, have = 0;
  if (!sem_slot(I, op, 0, &sem, &slot)) return status(I);
  if (op->nin > 2 && !scalar_int(I, op, 2, &want)) return status(I);
  for (int i = 0; i < I->nsemcopies && want != 0;) {
    struct SemCopy *s = &I->semcopies[i];
    if (s->sem != sem->data || s->slot != slot) {
      i++;
      continue;
    }
    int64_t take = want < 0 || s->bytes <= want ? s->bytes : want;
    have += take;
    s->bytes -= take;
    if (want > 0) want -= take;
    else want = 0; /* a wait without a count takes one copy */
    if (s->bytes > 0) break;
    copy_landed(s->sh, s->serial);
    memmove(s, s + 1, sizeof *s * (size_t)(I->nsemcopies - i - 1));
    I->nsemcopies--;
  }
  if (want == 0) return TPK_OK;
  const char *name = op->in[0]->name ? op->in[0]->name : "a semaphore";
  char what[96] = "";
  if (want > 0)
    snprintf(what, sizeof what, " for %" PRId64 " bytes with %" PRId64 " in flight on it", want + have, have);
  else
    snprintf(what, sizeof what, " with no copy in flight on it");
  if (!I->checked)
    return fail(I, op, TPK_ERR_INVALID, "wait on %s[%" PRId64 "]%s: it would never end", name, slot, what);
  violation(I, op, "wait on %s[%" PRId64 "]%s (it would never end)", name, slot, what);
  return TPK_OK;
}

/* The end of a grid instance (or of the kernel): every copy must have been
 * waited for. */
static void check_copies_waited(Interp *I) {
  for (int i = 0; i < I->nsemcopies; i++) {
    if (I->checked)
      violation(I, I->semcopies[i].op, "a copy signalling %s[%" PRId64 "] is never waited for", I->semcopies[i].name,
                I->semcopies[i].slot);
    copy_landed(I->semcopies[i].sh, I->semcopies[i].serial); /* reported once */
  }
  I->nsemcopies = 0;
  for (int i = 0; i < I->nshadows; i++) {
    Shadow *sh = I->shadows[i];
    for (int j = 0; j < sh->npending && I->checked; j++)
      violation(I, sh->pending_op[j], "copy_async into %s is never waited for", sh->name ? sh->name : "a buffer");
    sh->npending = 0;
  }
}

/* The copy is already done; checked mode takes it off its destination's
 * in-flight list. */
static TpkStatus exec_dma_wait(Interp *I, const TpkOp *op) {
  Val *h = operand(I, op, 0, V_DMA);
  if (!h) return status(I);
  copy_landed(h->sh, h->id);
  return TPK_OK;
}

static TpkStatus exec_alloc(Interp *I, const TpkOp *op) {
  const TpkType *t = op->out[0].type;
  int64_t dims[TPK_MAX_RANK];
  if (t->kind != TPK_TYPE_REF) return fail(I, op, TPK_ERR_INTERNAL, "result is not a ref");
  if (!eval_dims(I, op, t, dims)) return status(I);
  Val r;
  if (!new_buffer(I, op, &op->out[0], t->dtype, t->rank, dims, &r, V_REF)) return status(I);
  if (I->checked) { /* scratch starts uninitialised */
    const char *name = op->out[0].name ? op->out[0].name : "scratch";
    if (!(r.sh = shadow_for(I, op, op, name, r.rank, r.dims, r.n, true, false))) {
      val_release(&r);
      return status(I);
    }
  }
  return set_result(I, op, 0, &r);
}

/* ---- Control ------------------------------------------------------------------ */

static TpkStatus exec_block(Interp *I, const TpkBlock *b, const TpkOp **term);

/* Bind a loop index (i32 or tile) block argument to value v. */
static TpkStatus bind_index(Interp *I, const TpkOp *op, TpkValue *arg, int64_t v) {
  Val *s = slot(I, arg);
  if (!s) return fail(I, op, TPK_ERR_INTERNAL, "region argument has no slot");
  if (arg->type->kind == TPK_TYPE_TILE) {
    Val t = {.kind = V_TILE, .id = v, .block = tpk_tile_block(arg->type)};
    val_move(s, &t);
    return TPK_OK;
  }
  Val t;
  if (!new_buffer(I, op, arg, TPK_I32, 0, NULL, &t, V_TENSOR)) return status(I);
  tpk_ref_set_int(TPK_I32, t.data, 0, (uint64_t)v);
  val_move(s, &t);
  return TPK_OK;
}

static TpkStatus exec_grid(Interp *I, const TpkOp *op) {
  int axes = op->nin / 2;
  if (op->nin % 2 || axes > MAX_GRID_AXES || op->nregion != 1 || op->regions[0]->nargs != axes)
    return fail(I, op, TPK_ERR_INTERNAL, "malformed grid");
  if (I->grid_axes) return fail(I, op, TPK_ERR_UNSUPPORTED, "nested grids");
  int64_t lo[MAX_GRID_AXES], count[MAX_GRID_AXES], pos[MAX_GRID_AXES] = {0};
  bool empty = false;
  for (int a = 0; a < axes; a++) {
    int64_t hi;
    if (!scalar_int(I, op, 2 * a, &lo[a]) || !scalar_int(I, op, 2 * a + 1, &hi)) return status(I);
    count[a] = hi > lo[a] ? hi - lo[a] : 0;
    empty |= count[a] == 0;
  }
  if (empty) return TPK_OK;
  TpkStatus st = TPK_OK;
  I->grid_axes = axes;
  I->grid_body = op->regions[0];
  for (int a = 0; a < axes; a++) I->grid_lo[a] = lo[a];
  for (int i = 0; i < I->nshadows; i++) /* writers are compared within one grid */
    if (I->shadows[i]->writer) memset(I->shadows[i]->writer, 0, sizeof *I->shadows[i]->writer * (size_t)(I->shadows[i]->n ? I->shadows[i]->n : 1));
  I->instance = 0;
  do {
    I->instance++;
    for (int a = 0; a < axes && st == TPK_OK; a++) {
      I->grid_pos[a] = lo[a] + pos[a];
      I->grid_count[a] = count[a];
      st = bind_index(I, op, op->regions[0]->args[a], lo[a] + pos[a]);
    }
    const TpkOp *term = NULL;
    if (st == TPK_OK) st = exec_block(I, op->regions[0], &term);
    if (st == TPK_OK) check_copies_waited(I);
  } while (st == TPK_OK && next_index(axes, count, pos));
  I->grid_axes = 0;
  I->instance = 0;
  I->grid_body = NULL;
  return st;
}

/* Copy the operands of terminator `term` (a yield) into vals[0..n). */
static TpkStatus take_yield(Interp *I, const TpkOp *op, const TpkOp *term, int n, Val *vals) {
  if (n == 0) return TPK_OK;
  if (!term || term->opcode != TPK_OP_YIELD || term->nin != n)
    return fail(I, op, TPK_ERR_INTERNAL, "region does not yield %d values", n);
  for (int i = 0; i < n; i++) {
    Val *v = slot(I, term->in[i]);
    if (!v || v->kind == V_NONE) return fail(I, op, TPK_ERR_INTERNAL, "yielded value %d was not computed", i);
    val_assign(&vals[i], v);
  }
  return TPK_OK;
}

/* A loop's carried values between iterations (shared buffers: tensors are
 * immutable): carry[] holds them, next[] takes the body's yield. */
typedef struct Carried {
  int n;
  Val *carry, *next;
} Carried;

/* The carried values, starting as op's inputs from `first` on. */
static TpkStatus carried_begin(Interp *I, const TpkOp *op, int first, int n, Carried *c) {
  c->n = n;
  c->carry = calloc((size_t)n + 1, sizeof(Val));
  c->next = calloc((size_t)n + 1, sizeof(Val));
  TpkStatus st = c->carry && c->next ? TPK_OK : fail(I, op, TPK_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n && st == TPK_OK; i++) {
    Val *v = slot(I, op->in[first + i]);
    if (!v || v->kind == V_NONE)
      st = fail(I, op, TPK_ERR_INTERNAL, "initial value %d was not computed", i);
    else
      val_assign(&c->carry[i], v);
  }
  return st;
}

/* One iteration: the carried values into the body's arguments from `first`
 * on, the body run, its yield carried on. */
static TpkStatus carried_step(Interp *I, const TpkOp *op, const TpkBlock *body, int first, Carried *c) {
  TpkStatus st = TPK_OK;
  for (int i = 0; i < c->n && st == TPK_OK; i++) {
    Val *a = slot(I, body->args[first + i]);
    if (!a)
      st = fail(I, op, TPK_ERR_INTERNAL, "region argument has no slot");
    else
      val_assign(a, &c->carry[i]);
  }
  const TpkOp *term = NULL;
  if (st == TPK_OK) st = exec_block(I, body, &term);
  if (st == TPK_OK) st = take_yield(I, op, term, c->n, c->next);
  for (int i = 0; i < c->n && st == TPK_OK; i++) val_move(&c->carry[i], &c->next[i]);
  return st;
}

/* The loop's results (when st is OK), and the carried values released. */
static TpkStatus carried_end(Interp *I, const TpkOp *op, Carried *c, TpkStatus st) {
  for (int i = 0; i < c->n && st == TPK_OK; i++) st = set_result(I, op, i, &c->carry[i]);
  for (int i = 0; c->carry && c->next && i < c->n; i++) val_release(&c->carry[i]), val_release(&c->next[i]);
  free(c->carry);
  free(c->next);
  return st;
}

static TpkStatus exec_for(Interp *I, const TpkOp *op) {
  int n = op->nin - 2;
  const TpkBlock *body = op->nregion == 1 ? op->regions[0] : NULL;
  if (n < 0 || op->nout != n || !body || body->nargs != n + 1) return fail(I, op, TPK_ERR_INTERNAL, "malformed for");
  int64_t lo, hi;
  if (!scalar_int(I, op, 0, &lo) || !scalar_int(I, op, 1, &hi)) return status(I);
  Carried c;
  TpkStatus st = carried_begin(I, op, 2, n, &c);
  for (int64_t it = lo; it < hi && st == TPK_OK; it++) {
    st = bind_index(I, op, body->args[0], it);
    if (st == TPK_OK) st = carried_step(I, op, body, 1, &c);
  }
  return carried_end(I, op, &c, st);
}

/* The first carried value is the condition; the body's yield gives the
 * next values, the condition first. */
static TpkStatus exec_while(Interp *I, const TpkOp *op) {
  int n = op->nin;
  const TpkBlock *body = op->nregion == 1 ? op->regions[0] : NULL;
  if (n < 1 || op->nout != n || !body || body->nargs != n) return fail(I, op, TPK_ERR_INTERNAL, "malformed while");
  Carried c;
  TpkStatus st = carried_begin(I, op, 0, n, &c);
  while (st == TPK_OK && tpk_ref_get_int(c.carry[0].dt, c.carry[0].data, 0)) st = carried_step(I, op, body, 0, &c);
  return carried_end(I, op, &c, st);
}

static TpkStatus exec_if(Interp *I, const TpkOp *op) {
  int64_t c;
  if (op->nregion != 2) return fail(I, op, TPK_ERR_INTERNAL, "malformed if");
  if (!scalar_int(I, op, 0, &c)) return status(I);
  const TpkOp *term = NULL;
  TpkStatus st = exec_block(I, op->regions[c ? 0 : 1], &term);
  if (st != TPK_OK || op->nout == 0) return st;
  Val *res = calloc((size_t)op->nout, sizeof(Val));
  if (!res) return fail(I, op, TPK_ERR_NOMEM, "out of memory");
  st = take_yield(I, op, term, op->nout, res);
  for (int i = 0; i < op->nout && st == TPK_OK; i++) st = set_result(I, op, i, &res[i]);
  for (int i = 0; i < op->nout; i++) val_release(&res[i]);
  free(res);
  return st;
}

static TpkStatus exec_op(Interp *I, const TpkOp *op) {
  switch (op->opcode) {
  case TPK_OP_CONST: return exec_const(I, op);
  case TPK_OP_SYM: {
    const char *name = tpk_op_str(op, "name", "");
    int64_t v;
    if (!sym_lookup(I, name, &v)) return fail(I, op, TPK_ERR_INVALID, "symbol %s has no value", name);
    return scalar_result(I, op, v);
  }
  case TPK_OP_PROGRAM_ID:
  case TPK_OP_NUM_PROGRAMS: {
    int64_t axis = tpk_op_int(op, "axis", -1);
    if (axis < 0 || axis >= I->grid_axes)
      return fail(I, op, TPK_ERR_INVALID, "axis %" PRId64 " is not an axis of the enclosing grid", axis);
    return scalar_result(I, op, op->opcode == TPK_OP_PROGRAM_ID ? I->grid_pos[axis] : I->grid_count[axis]);
  }
  case TPK_OP_TILE_OF: {
    Val *x = operand(I, op, 0, V_TENSOR);
    if (!x) return status(I);
    int64_t id = tpk_ref_get_int(x->dt, x->data, 0);
    if (id < 0) return fail(I, op, TPK_ERR_INVALID, "tile id %" PRId64 " is negative", id);
    Val t = {.kind = V_TILE, .id = id, .block = tpk_tile_block(op->out[0].type)};
    return set_result(I, op, 0, &t);
  }
  case TPK_OP_TILE_ID:
  case TPK_OP_TILE_START: {
    Val *t = operand(I, op, 0, V_TILE);
    if (!t) return status(I);
    return scalar_result(I, op, op->opcode == TPK_OP_TILE_ID ? t->id : t->id * t->block);
  }
  case TPK_OP_NEG:
  case TPK_OP_NOT:
  case TPK_OP_ABS:
  case TPK_OP_EXP:
  case TPK_OP_LOG:
  case TPK_OP_SQRT:
  case TPK_OP_RSQRT:
  case TPK_OP_TANH:
  case TPK_OP_SIGMOID:
  case TPK_OP_ERF:
  case TPK_OP_FLOOR:
  case TPK_OP_CEIL:
  case TPK_OP_ROUND: return exec_unary(I, op);
  case TPK_OP_CONVERT: return exec_convert(I, op);
  case TPK_OP_BITCAST: return exec_bitcast(I, op);
  case TPK_OP_ADD:
  case TPK_OP_SUB:
  case TPK_OP_MUL:
  case TPK_OP_DIV:
  case TPK_OP_REM:
  case TPK_OP_CDIV:
  case TPK_OP_MAX:
  case TPK_OP_MIN:
  case TPK_OP_POW:
  case TPK_OP_AND:
  case TPK_OP_OR:
  case TPK_OP_XOR:
  case TPK_OP_SHL:
  case TPK_OP_SHR:
  case TPK_OP_MULHI:
  case TPK_OP_EQ:
  case TPK_OP_NE:
  case TPK_OP_LT:
  case TPK_OP_LE:
  case TPK_OP_GT:
  case TPK_OP_GE: return exec_binary(I, op);
  case TPK_OP_SELECT: return exec_select(I, op);
  case TPK_OP_BROADCAST: return exec_broadcast(I, op);
  case TPK_OP_RESHAPE: return exec_reshape(I, op);
  case TPK_OP_TRANSPOSE: return exec_transpose(I, op);
  case TPK_OP_SLICE: return exec_load(I, op);
  case TPK_OP_CONCAT: return exec_concat(I, op);
  case TPK_OP_IOTA: return exec_iota(I, op);
  case TPK_OP_REDUCE: return exec_reduce(I, op);
  case TPK_OP_SCAN: return exec_scan(I, op);
  case TPK_OP_DOT: return exec_dot(I, op);
  case TPK_OP_GATHER: return exec_gather(I, op);
  case TPK_OP_SCATTER: return exec_scatter(I, op);
  case TPK_OP_LOAD: return exec_load(I, op);
  case TPK_OP_STORE: return exec_store(I, op);
  case TPK_OP_ATOMIC: return exec_atomic(I, op);
  case TPK_OP_ALLOC: return exec_alloc(I, op);
  case TPK_OP_DMA_START: return exec_dma_start(I, op);
  case TPK_OP_DMA_WAIT: return exec_dma_wait(I, op);
  case TPK_OP_DMA_SIGNAL: return exec_dma_signal(I, op);
  case TPK_OP_DMA_WAIT_SEM: return exec_dma_wait_sem(I, op);
  case TPK_OP_GRID: return exec_grid(I, op);
  case TPK_OP_FOR: return exec_for(I, op);
  case TPK_OP_WHILE: return exec_while(I, op);
  case TPK_OP_IF: return exec_if(I, op);
  case TPK_OP_CALL:
    return fail(I, op, TPK_ERR_UNSUPPORTED, "calling @%s is not supported by the interpreter yet",
                tpk_op_str(op, "callee", "?"));
  case TPK_OP_YIELD:
  case TPK_OP_RETURN: return TPK_OK; /* handled by exec_block */
  default: return fail(I, op, TPK_ERR_UNSUPPORTED, "op %d is not known to the interpreter", (int)op->opcode);
  }
}

/* Run the ops of b in order; a terminator ends the block and is returned. */
static TpkStatus exec_block(Interp *I, const TpkBlock *b, const TpkOp **term) {
  *term = NULL;
  for (const TpkOp *op = b->first; op; op = op->next) {
    if (tpk_op_info(op->opcode)->flags & TPK_OPF_TERMINATOR) {
      *term = op;
      return TPK_OK;
    }
    TpkStatus st = exec_op(I, op);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

/* ---- Entry point --------------------------------------------------------------- */

/* Bind parameter i: a ref views the caller's memory; a scalar is copied. */
static TpkStatus bind_param(Interp *I, int i) {
  const TpkParam *p = &I->f->params[i];
  const TpkType *t = p->value->type;
  Val *s = slot(I, p->value);
  const char *name = p->name ? p->name : "?";
  if (!s) return fail(I, NULL, TPK_ERR_INTERNAL, "parameter %s has no slot", name);
  int64_t dims[TPK_MAX_RANK];
  if (t->kind == TPK_TYPE_REF) {
    for (int d = 0; d < t->rank; d++)
      if (!tpk_dim_eval(t->dims[d], sym_lookup, I, &dims[d]) || dims[d] < 0)
        return fail(I, NULL, TPK_ERR_INVALID, "parameter %s: dimension %d has no valid value", name, d);
    Val v = {.kind = V_REF, .dt = t->dtype, .rank = t->rank, .n = count_of(t->rank, dims)};
    memcpy(v.dims, dims, sizeof(int64_t) * (size_t)t->rank);
    if (v.n < 0) return fail(I, NULL, TPK_ERR_INVALID, "parameter %s: the shape's element count overflows", name);
    v.data = I->args[i];
    if (!v.data && v.n > 0) return fail(I, NULL, TPK_ERR_INVALID, "parameter %s: no data (NULL argument)", name);
    if (I->checked) {
      bool out = p->role != TPK_PARAM_IN;
      v.sh = shadow_for(I, NULL, p, name, v.rank, v.dims, v.n, p->role == TPK_PARAM_OUT && !p->zero_init, out);
      if (!v.sh) return status(I);
    }
    val_move(s, &v);
    return TPK_OK;
  }
  if (t->kind == TPK_TYPE_TENSOR && t->rank == 0) {
    if (!I->args[i]) return fail(I, NULL, TPK_ERR_INVALID, "scalar parameter %s: NULL argument", name);
    Val v;
    if (!new_buffer(I, NULL, p->value, t->dtype, 0, NULL, &v, V_TENSOR)) return status(I);
    memcpy(v.data, I->args[i], tpk_dtype_size(t->dtype));
    if (t->dtype == TPK_BOOL) v.data[0] = v.data[0] != 0;
    val_move(s, &v);
    return TPK_OK;
  }
  return fail(I, NULL, TPK_ERR_UNSUPPORTED, "parameter %s: only refs and scalars are supported", name);
}

TpkStatus tpk_interp_run(const TpkFunc *f, void *const *args, const int64_t *syms, TpkError *err) {
  return tpk_interp_run_checked(f, args, syms, NULL, NULL, NULL, err);
}

static TpkStatus run(Interp *I);

TpkStatus tpk_interp_run_checked(const TpkFunc *f, void *const *args, const int64_t *syms, const TpkInterpOptions *o,
                                 TpkStr *report, int *violations, TpkError *err) {
  Interp in = {.f = f, .args = args, .syms = syms, .err = err, .report = report};
  Interp *I = &in;
  TpkError local;
  if (!I->err) I->err = &local; /* errors still flow through err->code */
  I->err->code = TPK_OK;
  I->err->message[0] = 0;
  I->checked = o && o->checked;
  I->max_reports = o && o->max_reports > 0 ? o->max_reports : 20;
  if (violations) *violations = 0;
  TpkStatus st = run(I);
  if (st == TPK_OK) check_copies_waited(I);
  free(I->semcopies);
  if (I->checked && report && I->nviol > I->max_reports)
    tpk_str_printf(report, "(%d more violations not listed)\n", I->nviol - I->max_reports);
  if (violations) *violations = I->nviol;
  for (int i = 0; i < I->nshadows; i++) shadow_free(I->shadows[i]);
  free(I->shadows);
  free(I->reported);
  return st;
}

static TpkStatus run(Interp *I) {
  const TpkFunc *f = I->f;
  void *const *args = I->args;
  const int64_t *syms = I->syms;
  if (!f || !f->body) return fail(I, NULL, TPK_ERR_INVALID, "no kernel given");
  if (!f->is_kernel) return fail(I, NULL, TPK_ERR_UNSUPPORTED, "running a func (rather than a kernel) is not supported yet");
  if (f->nparams > 0 && !args) return fail(I, NULL, TPK_ERR_INVALID, "no arguments given");
  I->nsyms = tpk_func_symbols(f, I->symnames, (int)TPK_ARRAY_LEN(I->symnames));
  if (I->nsyms > (int)TPK_ARRAY_LEN(I->symnames)) return fail(I, NULL, TPK_ERR_UNSUPPORTED, "more than 64 shape symbols");
  if (I->nsyms > 0 && !syms) return fail(I, NULL, TPK_ERR_INVALID, "no symbol values given");
  for (int i = 0; i < I->nsyms; i++)
    if (syms[i] < 0 || syms[i] > INT32_MAX)
      return fail(I, NULL, TPK_ERR_INVALID, "symbol %s = %" PRId64 " is not a size in [0, 2^31)", I->symnames[i], syms[i]);
  TpkStatus req = tpk_func_check_requires(f, sym_lookup, I, I->err);
  if (req != TPK_OK) return req;

  int n = collect(I, f->body, 0);
  I->vals = n >= 0 ? calloc((size_t)n + 1, sizeof *I->vals) : NULL;
  I->nvals = n;
  TpkStatus st = I->vals ? TPK_OK : fail(I, NULL, TPK_ERR_NOMEM, "out of memory");
  for (int i = 0; i < f->nparams && st == TPK_OK; i++) st = bind_param(I, i);
  const TpkOp *term = NULL;
  if (st == TPK_OK) st = exec_block(I, f->body, &term);
  for (int i = 0; I->vals && i < n; i++) val_release(&I->vals[i]);
  tpk_ptrmap_free(&I->slots);
  free(I->vals);
  if (st == TPK_OK) I->err->code = TPK_OK;
  return st;
}
