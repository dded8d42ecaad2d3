/*
 * emit_c.c — tile-level IR to C, for the host backend.
 *
 * Input: a kernel whose shapes are all constant and its workspace plan.
 * Output: one C function with the TpkKernelFn signature (host/jit.h)
 * that libtcc compiles in a millisecond and cc -O3 compiles well.
 *
 * The model is the TPU's: each tile (a tensor value of rank >= 1) lives at
 * its planned offset in the workspace (VMEM); scalars are C locals (SMEM).
 * Each op becomes a loop over its tile, or a call through the primitive
 * table for the operations that must be fast whatever compiled this code:
 * gemm, transcendental functions, f32 reductions, dtype conversions.
 * Lowering's decisions are in the IR (lower/decide.c): an accumulating dot
 * (`dot %a, %b, %acc`) is one gemm into a copy of acc (acc's own buffer when
 * it dies there); an op marked `fused=true` has no tile and is computed
 * inside its user's loop.
 *
 * Generated code never traps: integer division by zero and out-of-range
 * scalar or gather indices return an error naming the .tpk line.
 * Elementwise arithmetic on bf16/f16/f8 computes in f32 and rounds to nearest
 * even after each op, as the reference interpreter does.
 */
#include "host/host.h"
#include "host/prims.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Emitter {
  const TpkFunc *f;
  const TpkPlan *plan;
  TpkStr *out;
  TpkError *err;
  bool failed;
  int indent;
  const char *source; /* .tpk text, for line comments */
  int last_line;
  int tmp;            /* counter for fresh C names */
  TpkPtrMap names; /* value -> its C name */
  TpkArena arena;
  /* the grid being emitted: bounds of each axis, for num_programs */
  const TpkOp *grid;
  /* the grid whose instances are shared among the parts of a launch (NULL:
   * part 0 runs the whole kernel) */
  const TpkOp *split;
  /* a store already done by the op computing its value (direct_store) */
  const TpkOp *stored;
  /* dots whose right operand is packed once (find_packed_operands): the
   * dot, the top-level op holding it, and where the packed operand lives in
   * the workspace (past the plan's storage) */
  int npacked;
  struct {
    const TpkOp *dot, *top;
    const char *at;
  } packed[16];
  const char *packed_bytes; /* the workspace past the plan's: a C expression */
  /* runs of element ops in one loop (emit_run): the ops a run emitted, and
   * while its loop is written, each member's C local */
  TpkPtrMap run_done;
  TpkPtrMap *run_locals;
  /* tiles that are their store's block when it is in range (store_view):
   * value -> the C condition */
  TpkPtrMap store_views;
} Emitter;

/* ---- output helpers ---------------------------------------------------------- */

static void line(Emitter *e, const char *fmt, ...) TPK_PRINTF(2, 3);
static void line(Emitter *e, const char *fmt, ...) {
  for (int i = 0; i < e->indent; i++) tpk_str_puts(e->out, "  ");
  va_list ap;
  va_start(ap, fmt);
  tpk_str_vprintf(e->out, fmt, ap);
  va_end(ap);
  tpk_str_putc(e->out, '\n');
}

static bool fail(Emitter *e, const TpkOp *op, const char *fmt, ...) TPK_PRINTF(3, 4);
static bool fail(Emitter *e, const TpkOp *op, const char *fmt, ...) {
  if (e->failed) return false;
  e->failed = true;
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (op && op->loc.line)
    tpk_error(e->err, TPK_ERR_UNSUPPORTED, "kernel '%s', line %d: %s", e->f->name, op->loc.line, msg);
  else
    tpk_error(e->err, TPK_ERR_UNSUPPORTED, "kernel '%s': %s", e->f->name, msg);
  return false;
}

/* The .tpk source line of op, as a comment, once per line. */
static void source_comment(Emitter *e, const TpkOp *op) {
  if (!e->source || !op->loc.line || op->loc.line == e->last_line) return;
  e->last_line = op->loc.line;
  const char *p = e->source;
  for (int l = 1; l < op->loc.line && *p; p++)
    if (*p == '\n') l++;
  while (*p == ' ' || *p == '\t') p++;
  const char *end = strchr(p, '\n');
  size_t n = end ? (size_t)(end - p) : strlen(p);
  if (n > 100) n = 100;
  char text[128];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) /* keep the comment a comment */
    if (!(p[i] == '*' && i + 1 < n && p[i + 1] == '/') && !(p[i] == '/' && i + 1 < n && p[i + 1] == '*'))
      text[k++] = (p[i] >= 32 && p[i] < 127) ? p[i] : '?';
  text[k] = 0;
  line(e, "/* %d: %s */", op->loc.line, text);
}

/* ---- names -------------------------------------------------------------------- */

static void set_name(Emitter *e, const TpkValue *v, const char *name) {
  if (!tpk_ptrmap_put(&e->names, v, (void *)name)) e->failed = true;
}

/* A fresh C identifier for v, from its name hint where it has one. */
static const char *new_name(Emitter *e, const TpkValue *v) {
  char hint[40] = "v";
  if (v->name) {
    size_t k = 0;
    for (const char *c = v->name; *c && k < 24; c++)
      hint[k++] = ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')) ? *c : '_';
    hint[k] = 0;
  }
  const char *n = tpk_arena_printf(&e->arena, "%s_%d", hint, ++e->tmp);
  if (!n) e->failed = true;
  set_name(e, v, n ? n : "?");
  return n ? n : "?";
}

static const char *name_of(Emitter *e, const TpkValue *v) {
  void *name;
  if (tpk_ptrmap_get(&e->names, v, &name)) return name;
  fail(e, NULL, "internal: a value is used before the emitter named it");
  return "?";
}

/* ---- types -------------------------------------------------------------------- */

static const char *ctype(TpkDType t) {
  switch (t) {
  case TPK_F32: return "float";
  case TPK_F16:
  case TPK_BF16: return "uint16_t";
  case TPK_F8E4M3:
  case TPK_F8E5M2:
  case TPK_U8:
  case TPK_BOOL: return "uint8_t";
  case TPK_I32: return "int32_t";
  case TPK_I16: return "int16_t";
  case TPK_I8: return "int8_t";
  case TPK_U32: return "uint32_t";
  case TPK_U16: return "uint16_t";
  default: return "?";
  }
}

/* The type arithmetic happens in: floats in float, u32 in uint32_t, other
 * integers in int32_t (wrapped to their width when stored), bool in int. */
static const char *compute_type(TpkDType t) {
  if (tpk_dtype_is_float(t)) return "float";
  if (t == TPK_U32) return "uint32_t";
  return t == TPK_BOOL ? "int" : "int32_t";
}

/* The TPK_PRIM_* suffix of a dtype. */
static const char *prim_dtype(TpkDType t) {
  static const char *const NAMES[TPK_DTYPE_COUNT] = {"F32", "F16", "BF16", "F8E4M3", "F8E5M2",
                                                     "I32", "I16", "I8",   "U8",     "BOOL",
                                                     "U32", "U16"};
  return (unsigned)t < TPK_DTYPE_COUNT ? NAMES[t] : "F32";
}

static bool is_tile(const TpkValue *v) { return v->type->kind == TPK_TYPE_TENSOR && v->type->rank > 0; }

/* ---- sizes ------------------------------------------------------------------- */

/* A size or offset in generated code: a C expression of type int64_t,
 * folded to a literal whenever it is constant. Shapes are constant when a
 * kernel is compiled for one launch; symbols read syms[] when it is compiled
 * once for every shape (the ahead-of-time standard library). */
typedef const char *Sz;

static bool sz_value(Sz s, int64_t *v) {
  char *end;
  if (!s || !*s) return false;
  long long x = strtoll(s, &end, 10);
  if (*end) return false;
  *v = x;
  return true;
}

static bool sz_is(Sz s, int64_t k) {
  int64_t v;
  return sz_value(s, &v) && v == k;
}

static Sz sz_int(Emitter *e, int64_t v) { return tpk_arena_printf(&e->arena, "%" PRId64, v); }

static Sz sz_mul(Emitter *e, Sz a, Sz b) {
  int64_t x, y;
  bool ca = sz_value(a, &x), cb = sz_value(b, &y);
  if (ca && cb) return sz_int(e, x * y);
  if ((ca && x == 0) || (cb && y == 0)) return "0";
  if (ca && x == 1) return b;
  if (cb && y == 1) return a;
  return tpk_arena_printf(&e->arena, "(%s * %s)", a, b);
}

static Sz sz_add(Emitter *e, Sz a, Sz b) {
  int64_t x, y;
  bool ca = sz_value(a, &x), cb = sz_value(b, &y);
  if (ca && cb) return sz_int(e, x + y);
  if (ca && x == 0) return b;
  if (cb && y == 0) return a;
  return tpk_arena_printf(&e->arena, "(%s + %s)", a, b);
}

static int symbol_index(Emitter *e, const char *sym);

/* A dimension as C: symbols are the launch's shape symbols, in the order of
 * tpk_func_symbols. */
static Sz sz_dim(Emitter *e, const TpkDim *d) {
  int64_t v;
  if (tpk_dim_is_const(d, &v)) return sz_int(e, v);
  switch (d->kind) {
  case TPK_DIM_SYM: {
    int k = symbol_index(e, d->sym);
    if (k < 0) fail(e, NULL, "internal: shape symbol %s is not a parameter's", d->sym);
    return tpk_arena_printf(&e->arena, "syms[%d]", k < 0 ? 0 : k);
  }
  case TPK_DIM_ADD: return sz_add(e, sz_dim(e, d->a), sz_dim(e, d->b));
  case TPK_DIM_MUL: return sz_mul(e, sz_dim(e, d->a), sz_dim(e, d->b));
  case TPK_DIM_SUB: return tpk_arena_printf(&e->arena, "(%s - %s)", sz_dim(e, d->a), sz_dim(e, d->b));
  case TPK_DIM_DIV: return tpk_arena_printf(&e->arena, "tpk_floordiv(%s, %s)", sz_dim(e, d->a), sz_dim(e, d->b));
  case TPK_DIM_CDIV: return tpk_arena_printf(&e->arena, "tpk_ceildiv(%s, %s)", sz_dim(e, d->a), sz_dim(e, d->b));
  default: fail(e, NULL, "internal: a dimension the C emitter does not know"); return "0";
  }
}

static Sz dim(Emitter *e, const TpkType *t, int i) { return sz_dim(e, t->dims[i]); }

static Sz numel(Emitter *e, const TpkType *t) {
  Sz n = "1";
  for (int i = 0; i < t->rank; i++) n = sz_mul(e, n, dim(e, t, i));
  return n;
}

static Sz byte_size(Emitter *e, const TpkType *t) {
  return sz_mul(e, numel(e, t), sz_int(e, (int64_t)tpk_dtype_size(t->dtype)));
}

/* A size as a float literal or conversion (for mean). */
static const char *float_size(Emitter *e, Sz s) {
  int64_t v;
  if (sz_value(s, &v)) return tpk_arena_printf(&e->arena, "%" PRId64 ".0f", v);
  return tpk_arena_printf(&e->arena, "(float)%s", s);
}

/* Row-major strides of a type, in elements. */
static void strides(Emitter *e, const TpkType *t, Sz *s) {
  Sz k = "1";
  for (int i = t->rank - 1; i >= 0; i--) {
    s[i] = k;
    k = sz_mul(e, k, dim(e, t, i));
  }
}

/* One side of a block access: the memory (a ref or a value), the index
 * pattern, and per indexed dimension the C expression of its start (or the
 * gather vector) and the block size. */
typedef struct Access {
  const TpkOp *op;
  const char *base;     /* C pointer to the memory */
  const TpkType *mem;   /* its type (ref or tensor) */
  const TpkIndexPattern *pattern;
  const char *start[TPK_MAX_RANK]; /* TILE RANGE SCALAR: first element; GATHER: the index tile */
  Sz size[TPK_MAX_RANK];           /* block size along each dim (1 for SCALAR) */
  const TpkValue *gather[TPK_MAX_RANK];   /* GATHER: the index vector */
  const char *lane_limit[TPK_MAX_RANK];   /* GATHER of a store: lanes below it are real (mask_padding_lanes) */
} Access;

static bool has_gather(const TpkIndexPattern *p) {
  for (int d = 0; d < p->rank; d++)
    if (p->dim[d] == TPK_INDEX_GATHER) return true;
  return false;
}

/* ---- reading and writing elements ------------------------------------------------ */

/* Element `idx` of tile or scalar v, as its compute type. */
static const char *rd(Emitter *e, const TpkValue *v, const char *idx) {
  const char *n = name_of(e, v);
  const char *x = is_tile(v) ? tpk_arena_printf(&e->arena, "%s[%s]", n, idx) : n;
  switch (v->type->dtype) {
  case TPK_BF16: return tpk_arena_printf(&e->arena, "tpk_bf16_f32(%s)", x);
  case TPK_F16: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F16, %s)", x);
  case TPK_F8E4M3: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F8E4M3, %s)", x);
  case TPK_F8E5M2: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F8E5M2, %s)", x);
  default: return x;
  }
}

/* `expr` (of compute type) stored as dtype t. */
static const char *narrow(Emitter *e, TpkDType t, const char *expr) {
  switch (t) {
  case TPK_BF16: return tpk_arena_printf(&e->arena, "tpk_f32_bf16(%s)", expr);
  case TPK_F16: return tpk_arena_printf(&e->arena, "(uint16_t)tpk_from_f32(p, TPK_PRIM_F16, %s)", expr);
  case TPK_F8E4M3: return tpk_arena_printf(&e->arena, "(uint8_t)tpk_from_f32(p, TPK_PRIM_F8E4M3, %s)", expr);
  case TPK_F8E5M2: return tpk_arena_printf(&e->arena, "(uint8_t)tpk_from_f32(p, TPK_PRIM_F8E5M2, %s)", expr);
  case TPK_BOOL: return tpk_arena_printf(&e->arena, "(uint8_t)((%s) != 0)", expr);
  case TPK_F32: return expr;
  default: return tpk_arena_printf(&e->arena, "(%s)(%s)", ctype(t), expr);
  }
}

/* Where a slot's storage starts in the workspace: its planned offset, or
 * with symbolic sizes its group's place, computed when the kernel starts. */
static const char *slot_offset(Emitter *e, const TpkPlanSlot *s) {
  if (!e->plan->symbolic) return sz_int(e, s->offset);
  if (s->group < 0) {
    fail(e, NULL, "internal: a tile without storage");
    return "0";
  }
  return tpk_arena_printf(&e->arena, "wo[%d]", s->group);
}

static const char *slot_bytes(Emitter *e, const TpkPlanSlot *s) {
  return e->plan->symbolic ? (s->bytes_dim ? sz_dim(e, s->bytes_dim) : "0") : sz_int(e, s->bytes);
}

static void view_stored_block(Emitter *e, const TpkValue *v, const char *n);

/* Declare the C name of a new value: a pointer into the workspace for
 * tiles, a local for scalars (assigned by the caller). */
static const char *def_tile(Emitter *e, const TpkValue *v) {
  const char *n = new_name(e, v);
  const TpkPlanSlot *s = tpk_plan_slot(e->plan, v);
  if (!s) {
    fail(e, v->def, "internal: no workspace slot for a tile");
    return n;
  }
  line(e, "%s *%s = (%s *)(W + %s); /* %s bytes */", ctype(v->type->dtype), n, ctype(v->type->dtype), slot_offset(e, s),
       slot_bytes(e, s));
  view_stored_block(e, v, n);
  return n;
}

static bool load_is_view(const TpkOp *load);

/* Where v's bytes are, for deciding that two values share memory: a load
 * that may be a view of its tensor is never known to share anything. */
static int64_t offset_of(Emitter *e, const TpkValue *v) {
  const TpkPlanSlot *s = tpk_plan_slot(e->plan, v);
  if (!s || (v->def && v->def->opcode == TPK_OP_LOAD && load_is_view(v->def)) || tpk_ptrmap_get(&e->store_views, v, NULL))
    return -1 - (int64_t)(uintptr_t)(const void *)v; /* unique, never a real offset */
  return e->plan->symbolic ? s->group : s->offset; /* groups are laid out apart */
}

/* dst = src for two tiles of one type, unless they share memory. */
static void copy_tile(Emitter *e, const char *dst, const TpkValue *dst_v, const TpkValue *src) {
  if (offset_of(e, dst_v) == offset_of(e, src)) return;
  if (tpk_ptrmap_get(&e->store_views, dst_v, NULL) || tpk_ptrmap_get(&e->store_views, src, NULL)) /* maybe one place */
    line(e, "if (%s != %s) memcpy(%s, %s, %s);", dst, name_of(e, src), dst, name_of(e, src), byte_size(e, src->type));
  else
    line(e, "memcpy(%s, %s, %s);", dst, name_of(e, src), byte_size(e, src->type));
}

/* ---- scalar expressions ------------------------------------------------------------ */

/* The C expression of an elementwise op over operand expressions (already
 * in compute type). */
static const char *scalar_expr(Emitter *e, const TpkOp *op, TpkDType dt, const char *a, const char *b,
                               const char *c) {
  bool fl = tpk_dtype_is_float(dt);
  bool i32 = !fl && dt != TPK_BOOL;
  TpkArena *A = &e->arena;
  if (dt == TPK_U32) { /* unsigned arithmetic wraps by itself; division, shifts and order are unsigned */
    switch (op->opcode) {
    case TPK_OP_ADD: return tpk_arena_printf(A, "(uint32_t)(%s + %s)", a, b);
    case TPK_OP_SUB: return tpk_arena_printf(A, "(uint32_t)(%s - %s)", a, b);
    case TPK_OP_MUL: return tpk_arena_printf(A, "(uint32_t)(%s * %s)", a, b);
    case TPK_OP_DIV: return tpk_arena_printf(A, "tpk_udiv(%s, %s, &bad)", a, b);
    case TPK_OP_REM: return tpk_arena_printf(A, "tpk_urem(%s, %s, &bad)", a, b);
    case TPK_OP_CDIV: return tpk_arena_printf(A, "tpk_ucdiv(%s, %s, &bad)", a, b);
    case TPK_OP_NEG: return tpk_arena_printf(A, "(uint32_t)(0u - %s)", a);
    case TPK_OP_ABS: return a;
    case TPK_OP_NOT: return tpk_arena_printf(A, "(uint32_t)~%s", a);
    case TPK_OP_SHL: return tpk_arena_printf(A, "tpk_shl_u(%s, %s)", a, b);
    case TPK_OP_SHR: return tpk_arena_printf(A, "tpk_shr_u(%s, %s)", a, b);
    case TPK_OP_MULHI: return tpk_arena_printf(A, "(uint32_t)(((uint64_t)%s * (uint64_t)%s) >> 32)", a, b);
    case TPK_OP_SELECT: return tpk_arena_printf(A, "tpk_select_u(%s, %s, %s)", a, b, c);
    default: break; /* max, min, and, or, xor, comparisons: as below */
    }
  }
  switch (op->opcode) {
  case TPK_OP_ADD: return fl ? tpk_arena_printf(A, "(%s + %s)", a, b) : tpk_arena_printf(A, "(int32_t)((uint32_t)%s + (uint32_t)%s)", a, b);
  case TPK_OP_SUB: return fl ? tpk_arena_printf(A, "(%s - %s)", a, b) : tpk_arena_printf(A, "(int32_t)((uint32_t)%s - (uint32_t)%s)", a, b);
  case TPK_OP_MUL: return fl ? tpk_arena_printf(A, "(%s * %s)", a, b) : tpk_arena_printf(A, "(int32_t)((uint32_t)%s * (uint32_t)%s)", a, b);
  case TPK_OP_DIV: return fl ? tpk_arena_printf(A, "(%s / %s)", a, b) : tpk_arena_printf(A, "tpk_idiv(%s, %s, &bad)", a, b);
  case TPK_OP_REM: return fl ? tpk_arena_printf(A, "fmodf(%s, %s)", a, b) : tpk_arena_printf(A, "tpk_irem(%s, %s, &bad)", a, b);
  case TPK_OP_CDIV: return tpk_arena_printf(A, "tpk_icdiv(%s, %s, &bad)", a, b);
  case TPK_OP_MAX: return fl ? tpk_arena_printf(A, "tpk_fmax(%s, %s)", a, b) : tpk_arena_printf(A, "(%s > %s ? %s : %s)", a, b, a, b);
  case TPK_OP_MIN: return fl ? tpk_arena_printf(A, "tpk_fmin(%s, %s)", a, b) : tpk_arena_printf(A, "(%s < %s ? %s : %s)", a, b, a, b);
  case TPK_OP_POW: return tpk_arena_printf(A, "tpk_powf(%s, %s)", a, b);
  case TPK_OP_AND: return tpk_arena_printf(A, "(%s & %s)", a, b);
  case TPK_OP_OR: return tpk_arena_printf(A, "(%s | %s)", a, b);
  case TPK_OP_XOR: return tpk_arena_printf(A, "(%s ^ %s)", a, b);
  case TPK_OP_SHL: return tpk_arena_printf(A, "tpk_shl_i(%s, %s)", a, b);
  case TPK_OP_SHR: return tpk_arena_printf(A, "tpk_shr_i(%s, %s)", a, b);
  case TPK_OP_MULHI: /* narrower integers live extended in 32 bits: their product fits in 64 */
    return tpk_arena_printf(A, "tpk_mulhi_i(%s, %s, %u)", a, b, tpk_dtype_info(dt)->bits);
  case TPK_OP_EQ: return tpk_arena_printf(A, "(%s == %s)", a, b);
  case TPK_OP_NE: return tpk_arena_printf(A, "(%s != %s)", a, b);
  case TPK_OP_LT: return tpk_arena_printf(A, "(%s < %s)", a, b);
  case TPK_OP_LE: return tpk_arena_printf(A, "(%s <= %s)", a, b);
  case TPK_OP_GT: return tpk_arena_printf(A, "(%s > %s)", a, b);
  case TPK_OP_GE: return tpk_arena_printf(A, "(%s >= %s)", a, b);
  case TPK_OP_NEG: return fl ? tpk_arena_printf(A, "(-%s)", a) : tpk_arena_printf(A, "(int32_t)(0u - (uint32_t)%s)", a);
  case TPK_OP_NOT: return dt == TPK_BOOL ? tpk_arena_printf(A, "(!%s)", a) : tpk_arena_printf(A, "(~%s)", a);
  case TPK_OP_ABS: return fl ? tpk_arena_printf(A, "fabsf(%s)", a) : tpk_arena_printf(A, "(int32_t)(%s < 0 ? 0u - (uint32_t)%s : (uint32_t)%s)", a, a, a);
  case TPK_OP_EXP: return tpk_arena_printf(A, "tpk_exp(%s)", a);
  case TPK_OP_LOG: return tpk_arena_printf(A, "tpk_log(%s)", a);
  case TPK_OP_SQRT: return tpk_arena_printf(A, "sqrtf(%s)", a);
  case TPK_OP_RSQRT: return tpk_arena_printf(A, "(1.0f / sqrtf(%s))", a);
  case TPK_OP_TANH: return tpk_arena_printf(A, "tpk_tanh(%s)", a);
  case TPK_OP_SIGMOID: return tpk_arena_printf(A, "tpk_sigmoid(%s)", a);
  case TPK_OP_ERF: return tpk_arena_printf(A, "tpk_erf(%s)", a);
  case TPK_OP_FLOOR: return tpk_arena_printf(A, "floorf(%s)", a);
  case TPK_OP_CEIL: return tpk_arena_printf(A, "ceilf(%s)", a);
  case TPK_OP_ROUND: return tpk_arena_printf(A, "rintf(%s)", a); /* the default rounding mode: half to even */
  case TPK_OP_SELECT: return tpk_arena_printf(A, "tpk_select_%s(%s, %s, %s)", fl ? "f" : "i", a, b, c);
  default: (void)i32; return NULL;
  }
}

/* Unary functions the primitive library computes on whole f32 tiles. */
static const char *prim_unary(TpkOpcode op) {
  switch (op) {
  case TPK_OP_EXP: return "TPK_PRIM_EXP";
  case TPK_OP_LOG: return "TPK_PRIM_LOG";
  case TPK_OP_SQRT: return "TPK_PRIM_SQRT";
  case TPK_OP_RSQRT: return "TPK_PRIM_RSQRT";
  case TPK_OP_TANH: return "TPK_PRIM_TANH";
  case TPK_OP_SIGMOID: return "TPK_PRIM_SIGMOID";
  case TPK_OP_ERF: return "TPK_PRIM_ERF";
  default: return NULL;
  }
}

static void check_bad(Emitter *e, const TpkOp *op) {
  line(e, "if (bad) return tpk_fail(err, \"line %d: integer division by zero\", 0);", op->loc.line);
}

/* `expr` (stored as dtype t) read back as its compute type: the rounding an
 * elementwise op on bf16/f16/f8 does after every op. */
static const char *widen(Emitter *e, TpkDType t, const char *expr) {
  switch (t) {
  case TPK_BF16: return tpk_arena_printf(&e->arena, "tpk_bf16_f32(%s)", expr);
  case TPK_F16: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F16, %s)", expr);
  case TPK_F8E4M3: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F8E4M3, %s)", expr);
  case TPK_F8E5M2: return tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_F8E5M2, %s)", expr);
  default: return expr;
  }
}

static const char *linear(Emitter *e, int rank, const Sz *s, const int *which);
static int open_loops(Emitter *e, const TpkType *t);
static void close_loops(Emitter *e, int n);

static const char *element_of(Emitter *e, const TpkOp *op, const char *const *at);

/* The element of v at coordinates `at` (one C expression per dimension of
 * v), in its compute type. Fused values are computed right here: a
 * broadcast maps the coordinates to its input's, an elementwise op combines
 * its operands' elements. */
static const char *elem_expr(Emitter *e, const TpkValue *v, const char *const *at) {
  if (!is_tile(v)) return rd(e, v, "0");
  void *local; /* computed earlier in the same loop (emit_run) */
  if (e->run_locals && tpk_ptrmap_get(e->run_locals, v, &local)) return widen(e, v->type->dtype, local);
  const TpkType *t = v->type;
  if (!tpk_op_is_fused(v->def)) {
    TpkStr off = {0};
    Sz vs[TPK_MAX_RANK];
    strides(e, t, vs);
    for (int d = 0; d < t->rank; d++)
      if (!sz_is(vs[d], 0) && strcmp(at[d], "0") != 0) tpk_str_printf(&off, "%s%s*%s", off.len ? " + " : "", at[d], vs[d]);
    const char *o = tpk_arena_strdup(&e->arena, off.len ? off.data : "0");
    tpk_str_free(&off);
    return rd(e, v, o);
  }
  const TpkOp *op = v->def;
  if (op->opcode == TPK_OP_IOTA) { /* the coordinate itself, as emit_iota writes it */
    const char *c = tpk_arena_printf(&e->arena, "(%s)%s", compute_type(t->dtype), at[tpk_op_int(op, "axis", 0)]);
    return widen(e, t->dtype, narrow(e, t->dtype, c));
  }
  const char *x = element_of(e, op, at);
  if (!x) return "0";
  if (op->opcode == TPK_OP_BROADCAST) return x; /* its operand's element, already rounded */
  return widen(e, t->dtype, narrow(e, t->dtype, x)); /* round as the stored value would be */
}

/* The element of op's result at coordinates `at`, computed from its
 * operands' (and everything fused into them), or NULL (failed) when the
 * backend has no C for op. */
static const char *element_of(Emitter *e, const TpkOp *op, const char *const *at) {
  const TpkValue *r = &op->out[0];
  if (op->opcode == TPK_OP_BROADCAST) {
    const TpkValue *in = op->in[0];
    const char *xat[TPK_MAX_RANK];
    int shift = r->type->rank - in->type->rank;
    for (int d = 0; d < in->type->rank; d++) xat[d] = sz_is(dim(e, in->type, d), 1) ? "0" : at[d + shift];
    return elem_expr(e, in, xat);
  }
  const char *a[3] = {NULL, NULL, NULL};
  for (int i = 0; i < op->nin && i < 3; i++) a[i] = elem_expr(e, op->in[i], at);
  TpkDType in_dt = op->opcode == TPK_OP_SELECT ? op->in[1]->type->dtype : op->in[op->nin - 1]->type->dtype;
  const char *x = op->opcode == TPK_OP_CONVERT ? a[0] : scalar_expr(e, op, in_dt, a[0], a[1], a[2]);
  if (!x) fail(e, op, "'%s' is not supported by the host backend", tpk_op_info(op->opcode)->name);
  return x;
}

/* The loop variables i0.. over a shape of rank n. */
static void loop_vars(Emitter *e, int n, const char **at) {
  for (int d = 0; d < n; d++) at[d] = tpk_arena_printf(&e->arena, "i%d", d);
}

/* One loop nest over r's elements computing op's result from its operands
 * (and everything fused into them), into tile n, or with `dst` (an lvalue
 * over the loop variables i0..) wherever dst says. */
static void emit_element_loop(Emitter *e, const TpkOp *op, const char *n, const char *dst) {
  const TpkValue *r = &op->out[0];
  const char *at[TPK_MAX_RANK];
  loop_vars(e, r->type->rank, at);
  const char *x = element_of(e, op, at);
  if (!x) return;
  Sz rs[TPK_MAX_RANK];
  strides(e, r->type, rs);
  int k = open_loops(e, r->type);
  if (dst) line(e, "%s = %s;", dst, narrow(e, r->type->dtype, x));
  else line(e, "%s[%s] = %s;", n, linear(e, r->type->rank, rs, NULL), narrow(e, r->type->dtype, x));
  close_loops(e, k);
}

static bool load_is_view(const TpkOp *load);

/* Does the element expression of v read memory of `ref` in place (a load
 * that may be a view of it, itself or fused into v)? */
static bool reads_in_place(const TpkValue *v, const TpkValue *ref) {
  const TpkOp *d = v->def;
  if (!d || !is_tile(v)) return false;
  if (d->opcode == TPK_OP_LOAD) return d->in[0] == ref && load_is_view(d);
  if (!tpk_op_is_fused(d)) return false; /* a tile of its own in the workspace */
  for (int i = 0; i < d->nin; i++)
    if (reads_in_place(d->in[i], ref)) return true;
  return false;
}

/* The store that may take op's elements straight from its loop, skipping
 * the tile and the copy: the op right after op, setting (not adding) op's
 * result, its only use, through an index without gathers, into memory the
 * expression does not also read in place (an inout updated from a view of
 * itself could read elements already overwritten). NULL otherwise. */
static const TpkOp *direct_store(const TpkOp *op) {
  const TpkOp *st = op->next;
  const TpkValue *r = &op->out[0];
  if (!st || st->opcode != TPK_OP_STORE || st->in[st->nin - 1] != r || !is_tile(r)) return NULL;
  if (tpk_op_store_mode(st) != TPK_STORE_SET || has_gather(tpk_op_index(st, "index"))) return NULL;
  if (tpk_value_use_count(r) != 1) return NULL;
  for (int i = 0; i < op->nin; i++)
    if (reads_in_place(op->in[i], st->in[0])) return NULL;
  return st;
}

static bool access_of(Emitter *e, const TpkOp *op, const TpkIndexPattern *pattern, const TpkValue *mem, int first,
                      Access *acc);
static void access_sizes(Emitter *e, Access *acc, const TpkType *block);
static const char *access_offset(Emitter *e, const Access *acc, const char **valid);
static void check_indices(Emitter *e, const Access *acc);
static const char *in_range(Emitter *e, const Access *acc);
static void block_copy(Emitter *e, const Access *acc, const char *tile, const TpkType *bt, bool to_tile,
                       const char *fill, bool add);

/* op's loop and the store after it (direct_store) as one: a block in range
 * gets its elements written where they go; a ragged one goes through the
 * tile and the store's masked copy. */
static void emit_element_loop_stored(Emitter *e, const TpkOp *op, const char *n, const TpkOp *st) {
  const TpkValue *r = &op->out[0];
  Access acc;
  if (!access_of(e, st, tpk_op_index(st, "index"), st->in[0], 1, &acc)) return;
  access_sizes(e, &acc, r->type);
  check_indices(e, &acc);
  const char *valid;
  const char *off = access_offset(e, &acc, &valid);
  line(e, "if (%s) { /* in range: computed straight into %s */", in_range(e, &acc), acc.base);
  e->indent++;
  emit_element_loop(e, op, n, tpk_arena_printf(&e->arena, "%s[%s]", acc.base, off));
  e->indent--;
  line(e, "} else {");
  e->indent++;
  emit_element_loop(e, op, n, NULL);
  block_copy(e, &acc, n, r->type, false, NULL, false);
  e->indent--;
  line(e, "}");
  e->stored = st;
}

/* Conversions between f32 and bf16, which generated code rounds inline
 * exactly as the primitive does (round to nearest even, NaN kept quiet);
 * the others call the primitive. */
static bool inline_convert(const TpkOp *op) {
  TpkDType from = op->in[0]->type->dtype, to = op->out[0].type->dtype;
  return (from == TPK_F32 && to == TPK_BF16) || (from == TPK_BF16 && to == TPK_F32);
}

/* An elementwise op (unary, binary, compare, select, convert of scalars). */
/* The dtype an elementwise op computes in: its operands' (a select's
 * values', not its condition's). */
static TpkDType element_dtype(const TpkOp *op) {
  if (op->opcode == TPK_OP_SELECT) return op->in[1]->type->dtype;
  return op->nin ? op->in[op->nin - 1]->type->dtype : op->out[0].type->dtype;
}

/* Integer division: checked for a zero divisor after it is computed. */
static bool int_division(const TpkOp *op) {
  return !tpk_dtype_is_float(element_dtype(op)) &&
         (op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV);
}

/* How emit_elementwise computes a tile: a call of the conversion or unary
 * primitive (f32 unary math on an operand with a tile of its own), a loop
 * followed by the division check, or a plain loop over the elements (which
 * runs may merge: element_member). */
typedef enum ElementForm { FORM_CONVERT_PRIM, FORM_UNARY_PRIM, FORM_CHECKED_LOOP, FORM_LOOP } ElementForm;

static ElementForm element_form(const TpkOp *op) {
  if (op->opcode == TPK_OP_CONVERT && !inline_convert(op)) return FORM_CONVERT_PRIM;
  const TpkOp *arg = op->nin ? op->in[0]->def : NULL;
  if (prim_unary(op->opcode) && element_dtype(op) == TPK_F32 && !(arg && tpk_op_is_fused(arg))) return FORM_UNARY_PRIM;
  return int_division(op) ? FORM_CHECKED_LOOP : FORM_LOOP;
}

static void emit_elementwise(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0];
  TpkDType in_dt = element_dtype(op);
  if (!is_tile(r)) {
    const char *a = op->nin > 0 ? rd(e, op->in[0], "0") : NULL, *b = op->nin > 1 ? rd(e, op->in[1], "0") : NULL;
    const char *c = op->nin > 2 ? rd(e, op->in[2], "0") : NULL;
    const char *x = op->opcode == TPK_OP_CONVERT ? a : scalar_expr(e, op, in_dt, a, b, c);
    if (!x) {
      fail(e, op, "'%s' on scalars is not supported by the host backend", tpk_op_info(op->opcode)->name);
      return;
    }
    const char *n = new_name(e, r);
    if (op->opcode == TPK_OP_CONVERT) { /* the primitive rounds exactly as tile conversions do */
      line(e, "%s %s;", ctype(r->type->dtype), n);
      line(e, "p->convert(TPK_PRIM_%s, TPK_PRIM_%s, &%s, &%s, 1);", prim_dtype(in_dt), prim_dtype(r->type->dtype),
           name_of(e, op->in[0]), n);
      return;
    }
    if (!int_division(op)) {
      line(e, "%s %s = %s;", ctype(r->type->dtype), n, narrow(e, r->type->dtype, x));
      return;
    }
    line(e, "%s %s;", ctype(r->type->dtype), n);
    line(e, "{");
    e->indent++;
    line(e, "int bad = 0;");
    line(e, "%s = %s;", n, narrow(e, r->type->dtype, x));
    check_bad(e, op);
    e->indent--;
    line(e, "}");
    return;
  }
  const char *n = def_tile(e, r);
  Sz count = numel(e, r->type);
  switch (element_form(op)) {
  case FORM_CONVERT_PRIM:
    line(e, "p->convert(TPK_PRIM_%s, TPK_PRIM_%s, %s, %s, %s);", prim_dtype(in_dt), prim_dtype(r->type->dtype),
         name_of(e, op->in[0]), n, count);
    return;
  case FORM_UNARY_PRIM: /* an operand fused into this op has no tile: that is a loop */
    line(e, "p->unary_f32(%s, %s, %s, %s);", prim_unary(op->opcode), name_of(e, op->in[0]), n, count);
    return;
  case FORM_LOOP: {
    const TpkOp *st = direct_store(op);
    if (st) emit_element_loop_stored(e, op, n, st);
    else emit_element_loop(e, op, n, NULL);
    return;
  }
  case FORM_CHECKED_LOOP:
    line(e, "{");
    e->indent++;
    line(e, "int bad = 0;");
    emit_element_loop(e, op, n, NULL);
    check_bad(e, op);
    e->indent--;
    line(e, "}");
    return;
  }
}

/* ---- constants, symbols, indices ------------------------------------------------------- */

static const char *float_literal(Emitter *e, double v) {
  if (isnan(v)) return "(0.0f / 0.0f)";
  if (isinf(v)) return v > 0 ? "(1.0f / 0.0f)" : "(-1.0f / 0.0f)";
  char buf[48];
  snprintf(buf, sizeof buf, "%.9g", v);
  /* a C float literal needs a point or an exponent: 0 -> 0.0f */
  return tpk_arena_printf(&e->arena, "%s%sf", buf, strpbrk(buf, ".e") ? "" : ".0");
}

static void emit_const(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0];
  const TpkAttr *a = tpk_op_attr(op, "value");
  TpkDType dt = r->type->dtype;
  const char *x;
  if (tpk_dtype_is_float(dt)) x = narrow(e, dt, float_literal(e, a->kind == TPK_ATTR_FLOAT ? a->f : (double)a->i));
  else x = tpk_arena_printf(&e->arena, "(%s)%" PRId64, ctype(dt), a->kind == TPK_ATTR_FLOAT ? (int64_t)a->f : a->i);
  if (!is_tile(r)) {
    line(e, "%s %s = %s;", ctype(dt), new_name(e, r), x);
    return;
  }
  const char *n = def_tile(e, r);
  bool zero = a->kind == TPK_ATTR_FLOAT ? (a->f == 0 && !signbit(a->f)) : a->i == 0;
  if (zero) { /* all-zero bits in every dtype: memset is fast whoever compiled us */
    line(e, "memset(%s, 0, %s);", n, byte_size(e, r->type));
    return;
  }
  line(e, "for (int64_t k = 0; k < %s; k++) %s[k] = %s;", numel(e, r->type), n, x);
}

static int symbol_index(Emitter *e, const char *sym) {
  const char *names[64];
  int n = tpk_func_symbols(e->f, names, 64);
  for (int i = 0; i < n && i < 64; i++)
    if (names[i] == sym || strcmp(names[i], sym) == 0) return i;
  return -1;
}

/* ---- shapes: broadcast, transpose, reshape, iota, slice -------------------------------- */

/* Open loops i0..i{rank-1} over a shape; returns how many were opened. */
static int open_loops(Emitter *e, const TpkType *t) {
  for (int i = 0; i < t->rank; i++) {
    line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, t, i), i);
    e->indent++;
  }
  return t->rank;
}

static void close_loops(Emitter *e, int n) {
  for (int i = 0; i < n; i++) {
    e->indent--;
    line(e, "}");
  }
}

/* "i0*S0 + i1*S1 + ..." over the given strides (terms with stride 0 drop). */
static const char *linear(Emitter *e, int rank, const Sz *s, const int *which) {
  TpkStr b = {0};
  for (int i = 0; i < rank; i++) {
    if (sz_is(s[i], 0)) continue;
    int var = which ? which[i] : i;
    tpk_str_printf(&b, "%si%d", b.len ? " + " : "", var);
    if (!sz_is(s[i], 1)) tpk_str_printf(&b, "*%s", s[i]);
  }
  const char *r = tpk_arena_strdup(&e->arena, b.len ? b.data : "0");
  tpk_str_free(&b);
  return r;
}

static void emit_broadcast(Emitter *e, const TpkOp *op) { emit_element_loop(e, op, def_tile(e, &op->out[0]), NULL); }

static void emit_transpose(Emitter *e, const TpkOp *op) {
  const TpkValue *x = op->in[0], *r = &op->out[0];
  const TpkAttr *perm = tpk_op_attr(op, "perm");
  Sz xs[TPK_MAX_RANK], rs[TPK_MAX_RANK], src[TPK_MAX_RANK];
  strides(e, x->type, xs);
  strides(e, r->type, rs);
  for (int i = 0; i < r->type->rank; i++) src[i] = xs[perm->ints[i]];
  const char *n = def_tile(e, r);
  int k = open_loops(e, r->type);
  line(e, "%s[%s] = %s[%s];", n, linear(e, r->type->rank, rs, NULL), name_of(e, x), linear(e, r->type->rank, src, NULL));
  close_loops(e, k);
}

static void emit_reshape(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0], *x = op->in[0];
  if (!is_tile(r)) { /* to a scalar: the one element (a C variable) */
    const char *v = is_tile(x) ? tpk_arena_printf(&e->arena, "%s[0]", name_of(e, x)) : name_of(e, x);
    line(e, "%s %s = %s;", ctype(r->type->dtype), new_name(e, r), v);
    return;
  }
  const char *n = def_tile(e, r);
  if (!is_tile(x)) line(e, "%s[0] = %s;", n, name_of(e, x)); /* a scalar is a C variable, not memory */
  else copy_tile(e, n, r, x);
}

static void emit_iota(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0];
  int axis = (int)tpk_op_int(op, "axis", 0);
  Sz rs[TPK_MAX_RANK];
  strides(e, r->type, rs);
  const char *n = def_tile(e, r);
  int k = open_loops(e, r->type);
  line(e, "%s[%s] = %s;", n, linear(e, r->type->rank, rs, NULL),
       narrow(e, r->type->dtype, tpk_arena_printf(&e->arena, "(%s)i%d", compute_type(r->type->dtype), axis)));
  close_loops(e, k);
}

/* ---- blocks of memory: load, store, slice, dma ------------------------------------------ */


/* Read the pattern's operands (starting at op->in[first]) into acc. */
static bool access_of(Emitter *e, const TpkOp *op, const TpkIndexPattern *pattern, const TpkValue *mem, int first,
                      Access *acc) {
  memset(acc, 0, sizeof *acc);
  acc->op = op;
  acc->base = name_of(e, mem);
  acc->mem = mem->type;
  acc->pattern = pattern;
  int k = first;
  for (int d = 0; d < pattern->rank; d++) {
    const TpkValue *v = NULL;
    switch (pattern->dim[d]) {
    case TPK_INDEX_TILE:
      v = op->in[k++];
      acc->start[d] = tpk_arena_printf(&e->arena, "(%s * %" PRId64 ")", name_of(e, v), tpk_tile_block(v->type));
      acc->size[d] = sz_int(e, tpk_tile_block(v->type));
      break;
    case TPK_INDEX_ALL:
      acc->start[d] = "0";
      acc->size[d] = dim(e, mem->type, d);
      break;
    case TPK_INDEX_SCALAR:
      v = op->in[k++];
      acc->start[d] = tpk_arena_printf(&e->arena, "(int64_t)%s", name_of(e, v));
      acc->size[d] = "1";
      break;
    case TPK_INDEX_RANGE:
      v = op->in[k++];
      acc->start[d] = tpk_arena_printf(&e->arena, "(int64_t)%s", name_of(e, v));
      acc->size[d] = NULL; /* from the block type, filled by the caller */
      break;
    case TPK_INDEX_GATHER:
      v = op->in[k++];
      acc->gather[d] = v;
      acc->start[d] = name_of(e, v);
      acc->size[d] = dim(e, v->type, 0);
      break;
    }
  }
  return true;
}

/* Fill the RANGE sizes from the block type (the non-SCALAR dims in order). */
static void access_sizes(Emitter *e, Access *acc, const TpkType *block) {
  int j = 0;
  for (int d = 0; d < acc->pattern->rank; d++) {
    if (acc->pattern->dim[d] == TPK_INDEX_SCALAR) continue;
    if (acc->pattern->dim[d] == TPK_INDEX_RANGE) acc->size[d] = dim(e, block, j);
    j++;
  }
}

/* The element of the memory at block coordinates i0.. (one per non-SCALAR
 * dim, named by `var(j)`), as an offset expression; the validity condition
 * (in range) goes to *valid. Gather indices are checked by the caller. */
static const char *access_offset(Emitter *e, const Access *acc, const char **valid) {
  Sz ms[TPK_MAX_RANK];
  strides(e, acc->mem, ms);
  TpkStr off = {0}, ok = {0};
  int j = 0;
  for (int d = 0; d < acc->pattern->rank; d++) {
    TpkIndexKind c = acc->pattern->dim[d];
    Sz D = dim(e, acc->mem, d);
    const char *pos;
    if (c == TPK_INDEX_SCALAR) pos = acc->start[d];
    else if (c == TPK_INDEX_GATHER) pos = tpk_arena_printf(&e->arena, "(int64_t)%s[i%d]", acc->start[d], j++);
    else if (c == TPK_INDEX_ALL) pos = tpk_arena_printf(&e->arena, "i%d", j++);
    else pos = tpk_arena_printf(&e->arena, "(%s + i%d)", acc->start[d], j++);
    if (c == TPK_INDEX_TILE || c == TPK_INDEX_RANGE)
      tpk_str_printf(&ok, "%s(uint64_t)%s < (uint64_t)%s", ok.len ? " && " : "", pos, D);
    if (c == TPK_INDEX_GATHER && acc->lane_limit[d]) tpk_str_printf(&ok, "%si%d < %s", ok.len ? " && " : "", j - 1, acc->lane_limit[d]);
    if (!sz_is(ms[d], 0)) tpk_str_printf(&off, "%s%s*%s", off.len ? " + " : "", pos, ms[d]);
  }
  *valid = ok.len ? tpk_arena_strdup(&e->arena, ok.data) : NULL;
  const char *r = tpk_arena_strdup(&e->arena, off.len ? off.data : "0");
  tpk_str_free(&off);
  tpk_str_free(&ok);
  return r;
}

/* Scalar and gather indices are checked once per access, before any copy. */
static void check_indices(Emitter *e, const Access *acc) {
  for (int d = 0; d < acc->pattern->rank; d++) {
    Sz D = dim(e, acc->mem, d);
    if (acc->pattern->dim[d] == TPK_INDEX_SCALAR)
      line(e, "if ((uint64_t)%s >= (uint64_t)%s) return tpk_fail2(err, \"line %d: index %%lld is out of range [0, %%lld)\", (long long)%s, (long long)%s);",
           acc->start[d], D, acc->op->loc.line, acc->start[d], D);
    if (acc->pattern->dim[d] == TPK_INDEX_GATHER)
      line(e, "for (int64_t k = 0; k < %s; k++) if ((uint64_t)%s[k] >= (uint64_t)%s) return tpk_fail2(err, \"line %d: gather index %%lld is out of range [0, %%lld)\", (long long)%s[k], (long long)%s);",
           acc->size[d], acc->start[d], D, acc->op->loc.line, acc->start[d], D);
  }
}

/* Is the last dim of the access a plain contiguous run (ALL, TILE, RANGE)? */
static bool row_contiguous(const Access *acc, int rank) {
  int last = rank - 1;
  return last >= 0 && acc->pattern->dim[last] != TPK_INDEX_SCALAR && acc->pattern->dim[last] != TPK_INDEX_GATHER;
}

/* Copy a block between memory (through acc) and a tile `tile` of type bt:
 * to_tile: tile = memory (masked elements get `fill`), else memory (op)= tile
 * with `add` accumulating. */
static void block_copy(Emitter *e, const Access *acc, const char *tile, const TpkType *bt, bool to_tile,
                       const char *fill, bool add) {
  int rank = acc->pattern->rank;
  int brank = bt->rank;
  Sz bs[TPK_MAX_RANK];
  strides(e, bt, bs);
  TpkDType dt = bt->dtype;
  size_t es = tpk_dtype_size(dt);
  /* Fast path: rows of the last dimension move with memcpy (its valid part;
   * the rest of a loaded row is filled). */
  if (!add && brank > 0 && row_contiguous(acc, rank)) {
    Sz row = sz_is(bs[brank - 1], 0) ? "0" : dim(e, bt, brank - 1);
    int last = rank - 1;
    Sz D = dim(e, acc->mem, last);
    int k = 0;
    for (int i = 0; i < brank - 1; i++) {
      line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, bt, i), i);
      e->indent++;
      k++;
    }
    /* offset of the row start: coordinates with the last one 0 */
    line(e, "{");
    e->indent++;
    line(e, "int64_t i%d = 0;", brank - 1);
    const char *valid;
    const char *off = access_offset(e, acc, &valid);
    const char *dst_row = tpk_arena_printf(&e->arena, "%s + %s", tile, linear(e, brank, bs, NULL));
    /* elements [lo, hi) of the row are inside the memory's last dim */
    line(e, "int64_t s0 = %s, lo = s0 < 0 ? -s0 : 0, hi = %s - s0;", acc->start[last], D);
    line(e, "if (hi > %s) hi = %s;", row, row);
    /* the other dims' validity, with the last coordinate in range */
    const char *rowok = valid ? valid : "1";
    line(e, "int rowok = lo < hi && (%s);", rowok);
    if (to_tile) {
      line(e, "if (!rowok) { lo = 0; hi = 0; }");
      line(e, "for (int64_t k = 0; k < lo; k++) (%s)[k] = %s;", dst_row, fill);
      line(e, "if (hi > lo) memcpy(%s + lo, %s + (%s) + lo, (unsigned long)(hi - lo) * %zu);", dst_row, acc->base, off, es);
      line(e, "for (int64_t k = hi > lo ? hi : lo; k < %s; k++) (%s)[k] = %s;", row, dst_row, fill);
    } else {
      line(e, "if (rowok) memcpy(%s + (%s) + lo, %s + lo, (unsigned long)(hi - lo) * %zu);", acc->base, off, dst_row, es);
    }
    e->indent--;
    line(e, "}");
    close_loops(e, k);
    return;
  }
  /* General path: element by element. */
  int k = open_loops(e, bt);
  const char *valid;
  const char *off = access_offset(e, acc, &valid);
  const char *ti = linear(e, brank, bs, NULL);
  if (to_tile) {
    if (valid) line(e, "%s[%s] = (%s) ? %s[%s] : %s;", tile, ti, valid, acc->base, off, fill);
    else line(e, "%s[%s] = %s[%s];", tile, ti, acc->base, off);
  } else {
    const char *dst = tpk_arena_printf(&e->arena, "%s[%s]", acc->base, off);
    const char *val = tpk_arena_printf(&e->arena, "%s[%s]", tile, ti);
    if (add) {
      const char *cur = dt == TPK_BF16 ? tpk_arena_printf(&e->arena, "tpk_bf16_f32(%s)", dst)
                        : tpk_dtype_is_float(dt) && dt != TPK_F32 ? tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_%s, %s)", prim_dtype(dt), dst)
                                                                   : dst;
      const char *inc = dt == TPK_BF16 ? tpk_arena_printf(&e->arena, "tpk_bf16_f32(%s)", val)
                        : tpk_dtype_is_float(dt) && dt != TPK_F32 ? tpk_arena_printf(&e->arena, "tpk_to_f32(p, TPK_PRIM_%s, %s)", prim_dtype(dt), val)
                                                                   : val;
      const char *sum = tpk_dtype_is_float(dt) ? tpk_arena_printf(&e->arena, "%s + %s", cur, inc)
                        : dt == TPK_BOOL ? tpk_arena_printf(&e->arena, "%s | %s", cur, inc)
                                         : tpk_arena_printf(&e->arena, "(uint32_t)%s + (uint32_t)%s", cur, inc);
      val = narrow(e, dt, sum);
    }
    if (valid) line(e, "if (%s) %s = %s;", valid, dst, val);
    else line(e, "%s = %s;", dst, val);
  }
  close_loops(e, k);
}

static const char *fill_value(Emitter *e, const TpkOp *op, TpkDType dt) {
  const TpkAttr *o = tpk_op_attr(op, "other");
  double v = !o ? 0 : o->kind == TPK_ATTR_FLOAT ? o->f : (double)o->i;
  if (tpk_dtype_is_float(dt)) return narrow(e, dt, float_literal(e, v));
  return tpk_arena_printf(&e->arena, "(%s)%" PRId64, ctype(dt), (int64_t)v);
}

/* A 2-D block loaded only to feed a dot: gemm can read it where it lies, with
 * the tensor's row stride, whenever the block is fully in range, so the copy
 * into the workspace is only made for ragged edge blocks. The block's rows
 * must come from one dimension and its columns from the contiguous last one. */
static bool overwritten_while_read(const TpkOp *load);

static bool load_feeds_dot(const TpkOp *load) {
  const TpkValue *v = &load->out[0];
  if (v->type->rank != 2 || load->in[0]->type->kind != TPK_TYPE_REF) return false;
  const TpkIndexPattern *pat = tpk_op_index(load, "index");
  int n = pat->rank;
  if (n < 2 || pat->dim[n - 1] == TPK_INDEX_SCALAR || has_gather(pat)) return false;
  const TpkOp *use = tpk_value_single_user(v);
  if (!use || use->parent != load->parent || use->opcode != TPK_OP_DOT || use->in[0] == use->in[1] ||
      tpk_dot_accumulator(use) == v)
    return false;
  /* Conservative, as when uses were found by scanning the block: an op with
   * regions after the load keeps the copy. */
  for (const TpkOp *op = load->next; op; op = op->next)
    if (op->nregion) return false;
  /* its tensor written before the product reads it: a copy keeps the values loaded */
  return !overwritten_while_read(load); /* an operand of the product, not the accumulator (copied as a tile) */
}

/* Can two dimensions differ in size (for some shape symbols)? */
static bool dims_may_differ(const TpkDim *a, const TpkDim *b) {
  int64_t x, y;
  if (a == b) return false;
  if (tpk_dim_is_const(a, &x) && tpk_dim_is_const(b, &y)) return x != y;
  return !(a->kind == TPK_DIM_SYM && b->kind == TPK_DIM_SYM && strcmp(a->sym, b->sym) == 0);
}

/* Can two dimensions be the same size? */
static bool dims_may_match(const TpkDim *a, const TpkDim *b) {
  int64_t x, y;
  return !(tpk_dim_is_const(a, &x) && tpk_dim_is_const(b, &y) && x != y);
}

/* Calls f(block dim k, tensor dim d) for each blocked dimension of load's
 * pattern after its first (a view needs each to be the whole dimension);
 * false when the pattern has some other entry there (a scalar index, a
 * gather). */
static bool trailing_blocks(const TpkOp *load, bool (*f)(const TpkOp *, int, int, void *), void *arg) {
  const TpkIndexPattern *p = tpk_op_index(load, "index");
  int d = 0, k = 0; /* k: the block's dimension of the pattern's entry d */
  while (d < p->rank && p->dim[d] == TPK_INDEX_SCALAR) d++;
  if (d < p->rank && (p->dim[d] == TPK_INDEX_TILE || p->dim[d] == TPK_INDEX_RANGE || p->dim[d] == TPK_INDEX_ALL))
    d++, k++;
  for (; d < p->rank; d++, k++) {
    if (p->dim[d] == TPK_INDEX_ALL) continue;
    if ((p->dim[d] != TPK_INDEX_TILE && p->dim[d] != TPK_INDEX_RANGE) || !f(load, k, d, arg)) return false;
  }
  return true;
}

static bool block_may_be_whole(const TpkOp *load, int k, int d, void *arg) {
  (void)arg;
  return dims_may_match(load->out[0].type->dims[k], load->in[0]->type->dims[d]);
}

/* Does op, or an op in its regions, take ref as an operand other than by
 * loading it (a store, a scatter, a copy: it may write it)? */
static bool may_write(const TpkOp *op, const TpkValue *ref) {
  for (int i = 0; i < op->nin; i++)
    if (op->in[i] == ref && op->opcode != TPK_OP_LOAD) return true;
  for (int r = 0; r < op->nregion; r++)
    for (const TpkOp *o = op->regions[r]->first; o; o = o->next)
      if (may_write(o, ref)) return true;
  return false;
}

/* Does v's element expression read value t (v itself, or through ops fused
 * into v)? */
static bool expr_reads(const TpkValue *v, const TpkValue *t) {
  if (v == t) return true;
  if (!v->def || !tpk_op_is_fused(v->def)) return false;
  for (int i = 0; i < v->def->nin; i++)
    if (expr_reads(v->def->in[i], t)) return true;
  return false;
}

/* Does op, or an op in its regions, read value t? */
static bool op_reads(const TpkOp *op, const TpkValue *t) {
  if (tpk_op_is_fused(op)) return false; /* read where its user's loop is */
  for (int i = 0; i < op->nin; i++)
    if (expr_reads(op->in[i], t)) return true;
  for (int r = 0; r < op->nregion; r++)
    for (const TpkOp *o = op->regions[r]->first; o; o = o->next)
      if (op_reads(o, t)) return true;
  return false;
}

/* Is load's tensor written after the load while its block is still read
 * (`let t = x[i, :]; x[i, :] = t * 2.0; y[i, :] = t + 1.0`)? A view would
 * then read the new values, so such a load is copied. The write reading
 * the block itself is no hazard: direct_store computes it into a tile
 * first. */
static bool overwritten_while_read(const TpkOp *load) {
  const TpkValue *ref = load->in[0], *t = &load->out[0];
  const TpkOp *op = load->next;
  while (op && !may_write(op, ref)) op = op->next;
  if (!op) return false;
  for (op = op->next; op; op = op->next)
    if (op_reads(op, t)) return true;
  return false;
}

/* A block that may be one contiguous run of its tensor (leading scalar
 * indices, then at most one blocked dimension, then whole dimensions:
 * x[i, :], q[h, i, :], or x[i, j] with blocks of N columns when the rows
 * are N long) has the tile's layout where it lies: when it is in range (and
 * its later blocks span their dimensions) the load is a view and nothing is
 * copied (GELU on 512x1024, one thread: 0.61 -> 0.55 ms). */
static bool load_is_view(const TpkOp *load) {
  if (load->in[0]->type->kind != TPK_TYPE_REF || load->out[0].type->rank == 0 || load_feeds_dot(load)) return false;
  return trailing_blocks(load, block_may_be_whole, NULL) && !overwritten_while_read(load);
}

/* The C condition that every blocked dimension of acc is in range. */
static const char *in_range(Emitter *e, const Access *acc) {
  TpkStr cond = {0};
  for (int d = 0; d < acc->pattern->rank; d++)
    if (acc->pattern->dim[d] == TPK_INDEX_TILE)
      tpk_str_printf(&cond, "%s%s + %s <= %s", cond.len ? " && " : "", acc->start[d], acc->size[d], dim(e, acc->mem, d));
    else if (acc->pattern->dim[d] == TPK_INDEX_RANGE) /* a dynamic start may be negative */
      tpk_str_printf(&cond, "%s%s >= 0 && %s + %s <= %s", cond.len ? " && " : "", acc->start[d], acc->start[d],
                     acc->size[d], dim(e, acc->mem, d));
  const char *r = tpk_arena_strdup(&e->arena, cond.len ? cond.data : "1");
  tpk_str_free(&cond);
  return r;
}

typedef struct WholeBlocks {
  Emitter *e;
  TpkStr *cond;
} WholeBlocks;

/* Adds to the condition " && <block dim k> == <tensor dim d>" unless the
 * two are the same size whatever the symbols. */
static bool block_is_whole_when(const TpkOp *load, int k, int d, void *arg) {
  WholeBlocks *w = arg;
  const TpkDim *b = load->out[0].type->dims[k], *m = load->in[0]->type->dims[d];
  if (dims_may_differ(b, m)) tpk_str_printf(w->cond, " && %s == %s", sz_dim(w->e, b), sz_dim(w->e, m));
  return true;
}

/* A block load that may read the tensor in place: when the block is in
 * range, tile n points at it; a ragged block is copied with padding. A gemm
 * operand also gets its leading dimension, n_ld. */
static void emit_view_or_copy(Emitter *e, const TpkOp *op, const Access *acc, const char *n, bool gemm_operand) {
  Sz ms[TPK_MAX_RANK];
  strides(e, acc->mem, ms);
  TpkStr off = {0};
  int rowdim = -1;
  for (int d = 0; d < acc->pattern->rank; d++) {
    if (acc->pattern->dim[d] != TPK_INDEX_SCALAR && rowdim < 0) rowdim = d;
    if (!sz_is(ms[d], 0) && strcmp(acc->start[d], "0") != 0)
      tpk_str_printf(&off, "%s%s*%s", off.len ? " + " : "", acc->start[d], ms[d]);
  }
  if (gemm_operand) line(e, "int64_t %s_ld = %s;", n, dim(e, op->out[0].type, 1));
  TpkStr whole = {0}; /* later blocks that must span their dimension, when sizes decide it */
  if (!gemm_operand) {
    WholeBlocks w = {e, &whole};
    trailing_blocks(op, block_is_whole_when, &w);
  }
  line(e, "if (%s%s) {", in_range(e, acc), whole.len ? whole.data : "");
  tpk_str_free(&whole);
  e->indent++;
  line(e, "%s = %s + %s; /* in range: a view of the tensor, no copy */", n, acc->base, off.len ? off.data : "0");
  if (gemm_operand) line(e, "%s_ld = %s;", n, ms[rowdim]);
  e->indent--;
  line(e, "} else {");
  e->indent++;
  block_copy(e, acc, n, op->out[0].type, true, fill_value(e, op, op->out[0].type->dtype), false);
  e->indent--;
  line(e, "}");
  tpk_str_free(&off);
}

/* ---- stored tiles that are the stored block ----------------------------------------------
 *
 * A tile read by other ops and stored once (`let h = x @ w + b; y[i, :] =
 * h; z = gelu(h)`) was computed in the workspace and copied to its block:
 * the MLP's forward copied three 1 MiB tiles a step. When the block is one
 * contiguous run of its memory with the tile's layout (scalar indices, at
 * most one blocked dimension, then whole ones) and in range, the tile is
 * that block (as a load may be a view of its block), and the store copies
 * only otherwise. The memory must be an output nothing else in the kernel
 * touches (no load reads it, no other op writes it), so that the block
 * holds exactly the tile's elements while the tile is read; the store's
 * indices must be known where the tile is made. */

/* Is v (an index operand) computed before op, or outside op's block? */
static bool defined_before(const TpkValue *v, const TpkOp *op) {
  if (!v->def || v->def->parent != op->parent) return true; /* a block argument or an outer value */
  for (const TpkOp *o = v->def; o; o = o->next)
    if (o == op) return true;
  return false;
}

/* The store whose block v's tile may be, or NULL. */
static const TpkOp *store_view_of(const Emitter *e, const TpkValue *v) {
  /* a value used once, by its store, is stored straight from its loop or
   * gemm (direct_store), but for an accumulating dot */
  if (!is_tile(v) || !v->def || (tpk_value_use_count(v) < 2 && !tpk_dot_accumulator(v->def))) return NULL;
  const TpkOp *def = v->def; /* ops that write their tile (a load may point it elsewhere) */
  if (def->opcode != TPK_OP_DOT && def->opcode != TPK_OP_REDUCE && def->opcode != TPK_OP_BROADCAST &&
      def->opcode != TPK_OP_TRANSPOSE && def->opcode != TPK_OP_SELECT && def->opcode != TPK_OP_CONVERT &&
      !(tpk_op_info(def->opcode)->flags & TPK_OPF_ELEMENTWISE))
    return NULL;
  const TpkOp *st = NULL;
  for (const TpkUse *u = v->uses; u; u = u->next) {
    if (u->user->opcode == TPK_OP_YIELD) return NULL; /* copied into a carrier by offset (emit_yield_into) */
    if (u->user->opcode == TPK_OP_STORE && u->index == u->user->nin - 1) {
      if (st) return NULL;
      st = u->user;
    }
  }
  if (!st || st->parent != v->def->parent || tpk_op_store_mode(st) != TPK_STORE_SET) return NULL;
  const TpkValue *ref = st->in[0];
  bool output = false;
  for (int i = 0; i < e->f->nparams; i++) output |= e->f->params[i].value == ref && e->f->params[i].role == TPK_PARAM_OUT;
  if (!output || ref->nuses != 1 || ref->uses->user != st) return NULL; /* the store is all that touches it */
  const TpkIndexPattern *pat = tpk_op_index(st, "index");
  int d = 0;
  while (d < pat->rank && pat->dim[d] == TPK_INDEX_SCALAR) d++;
  if (d < pat->rank && (pat->dim[d] == TPK_INDEX_TILE || pat->dim[d] == TPK_INDEX_RANGE)) d++;
  while (d < pat->rank && pat->dim[d] == TPK_INDEX_ALL) d++;
  if (d < pat->rank) return NULL;
  for (int i = 1; i < st->nin - 1; i++)
    if (!defined_before(st->in[i], v->def)) return NULL;
  return st;
}

/* After tile n of v is declared: n becomes v's stored block when that is
 * in range (store_view_of). */
static void view_stored_block(Emitter *e, const TpkValue *v, const char *n) {
  const TpkOp *st = store_view_of(e, v);
  if (!st) return;
  Access acc;
  if (!access_of(e, st, tpk_op_index(st, "index"), st->in[0], 1, &acc)) return;
  access_sizes(e, &acc, v->type);
  Sz ms[TPK_MAX_RANK];
  strides(e, acc.mem, ms);
  TpkStr off = {0}, cond = {0};
  tpk_str_puts(&cond, in_range(e, &acc));
  for (int d = 0; d < acc.pattern->rank; d++) {
    if (acc.pattern->dim[d] == TPK_INDEX_SCALAR)
      tpk_str_printf(&cond, " && (uint64_t)%s < (uint64_t)%s", acc.start[d], dim(e, acc.mem, d));
    if (!sz_is(ms[d], 0) && strcmp(acc.start[d], "0") != 0)
      tpk_str_printf(&off, "%s%s*%s", off.len ? " + " : "", acc.start[d], ms[d]);
  }
  const char *c = tpk_arena_strdup(&e->arena, cond.data ? cond.data : "1");
  line(e, "if (%s) %s = %s + %s; /* in range: the block it is stored to, no copy */", c, n, acc.base, off.len ? off.data : "0");
  tpk_str_free(&off);
  tpk_str_free(&cond);
  if (!c || !tpk_ptrmap_put(&e->store_views, v, (void *)c)) e->failed = true;
}

static void emit_load(Emitter *e, const TpkOp *op) {
  Access acc;
  if (!access_of(e, op, tpk_op_index(op, "index"), op->in[0], 1, &acc)) return;
  access_sizes(e, &acc, op->out[0].type);
  check_indices(e, &acc);
  const char *n = def_tile(e, &op->out[0]);
  if (!is_tile(&op->out[0])) return;
  if (load_is_view(op)) emit_view_or_copy(e, op, &acc, n, false);
  else if (load_feeds_dot(op)) emit_view_or_copy(e, op, &acc, n, true);
  else block_copy(e, &acc, n, op->out[0].type, true, fill_value(e, op, op->out[0].type->dtype), false);
}

/* A load of a single element (a scalar result) */
static void emit_load_scalar(Emitter *e, const TpkOp *op) {
  Access acc;
  if (!access_of(e, op, tpk_op_index(op, "index"), op->in[0], 1, &acc)) return;
  check_indices(e, &acc);
  const char *valid;
  const char *off = access_offset(e, &acc, &valid);
  const TpkValue *r = &op->out[0];
  line(e, "%s %s = %s[%s];", ctype(r->type->dtype), new_name(e, r), acc.base, off);
}

/* A store through an index vector that was loaded as a ragged block drops
 * the vector's padding lanes (past its tensor's end), as a store drops
 * out-of-range elements: their index (0, or `other`) names a real row that
 * is not the kernel's to write. */
static void mask_padding_lanes(Emitter *e, Access *acc) {
  for (int d = 0; d < acc->pattern->rank; d++) {
    const TpkOp *ld = acc->pattern->dim[d] == TPK_INDEX_GATHER ? tpk_index_vector_load(acc->gather[d]) : NULL;
    if (!ld) continue;
    const TpkValue *at = ld->in[1];
    const char *start = tpk_op_index(ld, "index")->dim[0] == TPK_INDEX_TILE
                            ? tpk_arena_printf(&e->arena, "(%s * %" PRId64 ")", name_of(e, at), tpk_tile_block(at->type))
                            : tpk_arena_printf(&e->arena, "(int64_t)%s", name_of(e, at));
    acc->lane_limit[d] = tpk_arena_printf(&e->arena, "(%s - %s)", dim(e, ld->in[0]->type, 0), start);
  }
}

static void emit_store_copy(Emitter *e, const TpkOp *op, const TpkValue *val);

static void emit_store(Emitter *e, const TpkOp *op) {
  if (op == e->stored) return; /* its value's loop wrote it */
  const TpkValue *val = op->in[op->nin - 1];
  void *viewed;
  if (tpk_ptrmap_get(&e->store_views, val, &viewed)) { /* the tile is the block when it is in range */
    line(e, "if (!(%s)) {", (const char *)viewed);
    e->indent++;
    emit_store_copy(e, op, val);
    e->indent--;
    line(e, "}");
    return;
  }
  emit_store_copy(e, op, val);
}

/* The store's copy of its value into memory. */
static void emit_store_copy(Emitter *e, const TpkOp *op, const TpkValue *val) {
  Access acc;
  if (!access_of(e, op, tpk_op_index(op, "index"), op->in[0], 1, &acc)) return;
  access_sizes(e, &acc, val->type);
  check_indices(e, &acc);
  mask_padding_lanes(e, &acc);
  bool add = tpk_op_store_mode(op) == TPK_STORE_ADD;
  if (!is_tile(val)) { /* a single element */
    const char *valid;
    const char *off = access_offset(e, &acc, &valid);
    if (add) line(e, "%s[%s] = %s;", acc.base, off,
                  narrow(e, val->type->dtype, tpk_arena_printf(&e->arena, "%s + %s", rd(e, val, "0"),
                                                               tpk_arena_printf(&e->arena, "%s[%s]", acc.base, off))));
    else line(e, "%s[%s] = %s;", acc.base, off, name_of(e, val));
    return;
  }
  block_copy(e, &acc, name_of(e, val), val->type, false, NULL, add);
}

/* Fetch-and-combine, element by element in the value's row-major order (the
 * interpreter's): each in-range element's old value goes to the result
 * (masked lanes: 0) and kind(old, value) to memory. A grid holding one
 * runs in instance order on one thread (tpk_split_grid: it adds). */
static void emit_atomic(Emitter *e, const TpkOp *op) {
  Access acc;
  const TpkValue *val = op->in[op->nin - 1], *r = &op->out[0];
  TpkDType dt = val->type->dtype;
  if (!access_of(e, op, tpk_op_index(op, "index"), op->in[0], 1, &acc)) return;
  access_sizes(e, &acc, val->type);
  check_indices(e, &acc);
  mask_padding_lanes(e, &acc);
  const char *out = is_tile(r) ? def_tile(e, r) : new_name(e, r);
  if (!is_tile(r)) line(e, "%s %s = 0;", ctype(dt), out);
  line(e, "{ /* atomic */");
  e->indent++;
  int k = is_tile(val) ? open_loops(e, val->type) : 0;
  Sz vs[TPK_MAX_RANK];
  strides(e, val->type, vs);
  const char *lin = linear(e, val->type->rank, vs, NULL), *valid;
  const char *off = access_offset(e, &acc, &valid);
  const char *dst = is_tile(r) ? tpk_arena_printf(&e->arena, "%s[%s]", out, lin) : out;
  line(e, "if (%s) {", valid ? valid : "1");
  e->indent++;
  line(e, "%s old = %s[%s];", ctype(dt), acc.base, off);
  line(e, "%s = old;", dst);
  const char *a = widen(e, dt, "old"), *b = rd(e, val, lin);
  bool fl = tpk_dtype_is_float(dt);
  const char *c;
  switch (tpk_op_reduce_kind(op)) {
  case TPK_REDUCE_MAX: c = fl ? tpk_arena_printf(&e->arena, "tpk_fmax(%s, %s)", a, b) : tpk_arena_printf(&e->arena, "(%s > %s ? %s : %s)", a, b, a, b); break;
  case TPK_REDUCE_MIN: c = fl ? tpk_arena_printf(&e->arena, "tpk_fmin(%s, %s)", a, b) : tpk_arena_printf(&e->arena, "(%s < %s ? %s : %s)", a, b, a, b); break;
  default: c = fl ? tpk_arena_printf(&e->arena, "%s + %s", a, b) : tpk_arena_printf(&e->arena, "(uint32_t)%s + (uint32_t)%s", a, b); break;
  }
  line(e, "%s[%s] = %s;", acc.base, off, narrow(e, dt, c));
  e->indent--;
  if (is_tile(r)) line(e, "} else %s = 0;", dst);
  else line(e, "}");
  close_loops(e, k);
  e->indent--;
  line(e, "}");
}

static void emit_slice(Emitter *e, const TpkOp *op) {
  Access acc;
  if (!access_of(e, op, tpk_op_index(op, "index"), op->in[0], 1, &acc)) return;
  if (!is_tile(&op->out[0])) {
    emit_load_scalar(e, op);
    return;
  }
  access_sizes(e, &acc, op->out[0].type);
  check_indices(e, &acc);
  const char *n = def_tile(e, &op->out[0]);
  block_copy(e, &acc, n, op->out[0].type, true, fill_value(e, op, op->out[0].type->dtype), false);
}

/* copy_async: the host copies at once; wait() has nothing left to do. */
static void emit_dma(Emitter *e, const TpkOp *op) {
  const TpkIndexPattern *sp = tpk_op_index(op, "src_index"), *dp = tpk_op_index(op, "dst_index");
  int nsrc = tpk_index_operands(sp);
  Access src, dst;
  if (!access_of(e, op, sp, op->in[0], 1, &src) || !access_of(e, op, dp, op->in[1 + nsrc], 2 + nsrc, &dst)) return;
  /* the block's shape: the destination's selected dims */
  const TpkDim *dims[TPK_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < dp->rank; d++) {
    if (dp->dim[d] == TPK_INDEX_SCALAR) continue;
    int64_t size = 0;
    if (dp->dim[d] != TPK_INDEX_ALL && !sz_value(dst.size[d], &size)) {
      fail(e, op, "internal: copy_async of a block whose size is not constant");
      return;
    }
    dims[rank++] = dp->dim[d] == TPK_INDEX_ALL ? dst.mem->dims[d] : tpk_dim_const(e->f->module, size);
  }
  const TpkType *bt = tpk_type_tensor(e->f->module, src.mem->dtype, rank, dims);
  /* RANGE sizes come from the block */
  access_sizes(e, &src, bt);
  access_sizes(e, &dst, bt);
  check_indices(e, &src);
  check_indices(e, &dst);
  const char *n = new_name(e, &op->out[0]);
  line(e, "int %s = 0; /* copy_async: done at once on the host */", n);
  line(e, "(void)%s;", n);
  int k = open_loops(e, bt);
  const char *sv, *dv;
  const char *so = access_offset(e, &src, &sv), *doff = access_offset(e, &dst, &dv);
  TpkStr cond = {0};
  const TpkValue *len = tpk_dma_length(op); /* the first len entries of axis 0 move; the rest stay */
  if (dv) tpk_str_printf(&cond, len ? "(%s)" : "%s", dv);
  if (len) tpk_str_printf(&cond, "%si0 < (int64_t)%s", cond.len ? " && " : "", name_of(e, len));
  if (cond.len) line(e, "if (%s)", cond.data);
  line(e, "%s%s[%s] = %s%s%s ? %s[%s] : 0;", cond.len ? "  " : "", dst.base, doff, sv ? "(" : "", sv ? sv : "1",
       sv ? ")" : "", src.base, so);
  tpk_str_free(&cond);
  close_loops(e, k);
}

/* ---- reductions and dot ------------------------------------------------------------------ */

/* Can emit_fused_sum (trailing axes: rows) or emit_fused_column_sum
 * (leading axes) reduce op's operand as its loop computes it? An f32 sum
 * or mean over either (what lower/decide.c fuses into). */
static bool fused_sum_ok(const TpkOp *op, bool *columns) {
  const TpkType *xt = op->in[0]->type;
  TpkReduceKind kind = tpk_op_reduce_kind(op);
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  if (xt->dtype != TPK_F32 || (kind != TPK_REDUCE_SUM && kind != TPK_REDUCE_MEAN) || axes->n == 0) return false;
  bool trailing = true, leading = true;
  for (int i = 0; i < axes->n; i++) {
    trailing &= axes->ints[i] == xt->rank - axes->n + i;
    leading &= axes->ints[i] == i;
  }
  *columns = !trailing;
  return trailing || leading;
}

/* A sum or mean over the leading axes of an element expression fused into
 * it, in reduce_f32's order for a middle axis (prims.h): each kept
 * position starts from its first element and adds the others in ascending
 * order, the kept positions side by side in the innermost loop. */
static void emit_fused_column_sum(Emitter *e, const TpkOp *op, const char *out, Sz len, bool is_mean) {
  const TpkValue *x = op->in[0];
  const TpkType *xt = x->type;
  int nred = tpk_op_attr(op, "axes")->n; /* dims 0..nred-1 are reduced */
  const char *at[TPK_MAX_RANK];
  TpkStr idx = {0}, first = {0};
  Sz kept = "1";
  for (int d = xt->rank - 1; d >= nred; d--) {
    tpk_str_printf(&idx, "%si%d*%s", idx.len ? " + " : "", d, kept);
    kept = sz_mul(e, kept, dim(e, xt, d));
  }
  for (int d = 0; d < xt->rank; d++) at[d] = tpk_arena_printf(&e->arena, "i%d", d);
  for (int d = 0; d < nred; d++) tpk_str_printf(&first, "%si%d == 0", first.len ? " && " : "", d);
  int64_t n;
  if (!(sz_value(len, &n) && n > 0)) line(e, "if (%s == 0) memset(%s, 0, %s * 4);", len, out, kept);
  int opened = 0;
  for (int d = 0; d < xt->rank; d++, opened++) {
    line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", d, d, dim(e, xt, d), d);
    e->indent++;
  }
  const char *v = elem_expr(e, x, at);
  line(e, "if (%s) %s[%s] = %s; /* in reduce_f32's order: the first row, then += */", first.data, out, idx.data, v);
  line(e, "else %s[%s] += %s;", out, idx.data, v);
  close_loops(e, opened);
  if (is_mean) line(e, "for (int64_t k = 0; k < %s; k++) %s[k] = %s[k] / %s;", kept, out, out, float_size(e, len));
  tpk_str_free(&idx);
  tpk_str_free(&first);
}

/* A sum or mean of an element expression fused into it: no tile,
 * each kept position's elements are added as they are computed, in
 * reduce_f32's row order (prims.h: 64 accumulators from -0, element l into
 * l % 64, folded in halves), so the bits are the primitive's on the tile
 * the expression would have filled. */
static void emit_fused_sum(Emitter *e, const TpkOp *op, const char *out, const char *scalar, Sz len, bool is_mean) {
  const TpkValue *x = op->in[0];
  const TpkType *xt = x->type;
  int first = xt->rank - tpk_op_attr(op, "axes")->n; /* the first reduced dimension */
  const char *at[TPK_MAX_RANK];
  TpkStr idx = {0};
  Sz kept = "1"; /* output strides: the kept dims, row-major */
  for (int i = first - 1; i >= 0; i--) {
    tpk_str_printf(&idx, "%si%d*%s", idx.len ? " + " : "", i, kept);
    kept = sz_mul(e, kept, dim(e, xt, i));
  }
  for (int i = 0; i < first; i++) at[i] = tpk_arena_printf(&e->arena, "i%d", i);
  Sz after = "1"; /* elements per step of reduced dim d: coordinates from the flat l */
  for (int d = xt->rank - 1; d >= first; d--) {
    const char *q = sz_is(after, 1) ? "l" : tpk_arena_printf(&e->arena, "(l / %s)", after);
    at[d] = d == first ? q : tpk_arena_printf(&e->arena, "(%s %% %s)", q, dim(e, xt, d));
    after = sz_mul(e, after, dim(e, xt, d));
  }
  int opened = 0;
  for (int i = 0; i < first; i++, opened++) {
    line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, xt, i), i);
    e->indent++;
  }
  const char *v = elem_expr(e, x, at);
  line(e, "float acc[64]; /* sum in reduce_f32's lane order */");
  line(e, "for (int j = 0; j < 64; j++) acc[j] = -0.0f;");
  line(e, "int64_t l0 = 0;");
  line(e, "for (; l0 + 64 <= %s; l0 += 64)", len);
  line(e, "  for (int64_t j = 0; j < 64; j++) { int64_t l = l0 + j; acc[j] += %s; }", v);
  line(e, "for (int64_t j = 0; l0 + j < %s; j++) { int64_t l = l0 + j; acc[j] += %s; }", len, v);
  line(e, "for (int w = 32; w >= 1; w /= 2) for (int j = 0; j < w; j++) acc[j] += acc[j + w];");
  int64_t n;
  const char *res = sz_value(len, &n) && n > 0 ? "acc[0]" : tpk_arena_printf(&e->arena, "(%s == 0 ? 0.0f : acc[0])", len);
  if (is_mean) res = tpk_arena_printf(&e->arena, "%s / %s", res, float_size(e, len));
  if (out) line(e, "%s[%s] = %s;", out, idx.len ? idx.data : "0", res);
  else line(e, "%s = %s;", scalar, res);
  tpk_str_free(&idx);
  close_loops(e, opened);
}

static void emit_reduce(Emitter *e, const TpkOp *op) {
  const TpkValue *x = op->in[0], *r = &op->out[0];
  TpkReduceKind kind = tpk_op_reduce_kind(op);
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  const TpkType *xt = x->type;
  bool reduced[TPK_MAX_RANK] = {false};
  Sz len = "1";
  for (int i = 0; i < axes->n; i++) {
    reduced[axes->ints[i]] = true;
    len = sz_mul(e, len, dim(e, xt, (int)axes->ints[i]));
  }
  bool contiguous = true;
  for (int i = 1; i < axes->n; i++) contiguous &= axes->ints[i] == axes->ints[i - 1] + 1;
  bool is_mean = kind == TPK_REDUCE_MEAN;
  const char *out = is_tile(r) ? def_tile(e, r) : NULL;
  const char *scalar = NULL;
  if (!out) {
    scalar = new_name(e, r);
    line(e, "%s %s;", ctype(r->type->dtype), scalar);
  }
  if (tpk_op_is_fused(x->def)) {
    bool columns = false;
    if (!fused_sum_ok(op, &columns)) {
      fail(e, op, "a value fused into this reduction: the host fuses only into f32 sums and means over trailing or leading axes");
      return;
    }
    if (columns) { /* over leading axes, so some axis is kept: out is a tile */
      if (out) emit_fused_column_sum(e, op, out, len, is_mean);
      else fail(e, op, "internal: a sum over leading axes without a tile");
      return;
    }
    if (!out) { /* a block of its own: acc and friends stay local */
      line(e, "{");
      e->indent++;
    }
    emit_fused_sum(e, op, out, scalar, len, is_mean);
    if (!out) {
      e->indent--;
      line(e, "}");
    }
    return;
  }
  /* f32 over adjacent axes: the primitive. */
  if (xt->dtype == TPK_F32 && contiguous && axes->n > 0 && kind != TPK_REDUCE_PROD) {
    Sz outer = "1", inner = "1";
    for (int i = 0; i < axes->ints[0]; i++) outer = sz_mul(e, outer, dim(e, xt, i));
    for (int i = (int)axes->ints[axes->n - 1] + 1; i < xt->rank; i++) inner = sz_mul(e, inner, dim(e, xt, i));
    const char *dst = out ? out : tpk_arena_printf(&e->arena, "&%s", scalar);
    line(e, "p->reduce_f32(%s, %s, %s, %s, %s, %s);",
         kind == TPK_REDUCE_MAX ? "TPK_PRIM_MAX" : kind == TPK_REDUCE_MIN ? "TPK_PRIM_MIN" : "TPK_PRIM_SUM",
         name_of(e, x), outer, len, inner, dst);
    if (is_mean) {
      if (out) line(e, "for (int64_t k = 0; k < %s; k++) %s[k] = %s[k] / %s;", numel(e, r->type), out, out, float_size(e, len));
      else line(e, "%s = %s / %s;", scalar, scalar, float_size(e, len));
    }
    return;
  }
  /* General: loops over the kept dims outside, the reduced dims inside, one
   * accumulator per output, ascending order. */
  TpkDType dt = xt->dtype;
  bool fl = tpk_dtype_is_float(dt);
  bool u32 = xt->dtype == TPK_U32;
  const char *acc_t = fl ? "float" : u32 ? "uint32_t" : "int32_t";
  const char *init = kind == TPK_REDUCE_MAX ? (fl ? "(-1.0f / 0.0f)" : u32 ? "0u" : "INT32_MIN")
                     : kind == TPK_REDUCE_MIN ? (fl ? "(1.0f / 0.0f)" : u32 ? "UINT32_MAX" : "INT32_MAX")
                     : kind == TPK_REDUCE_PROD ? "1" : "0";
  Sz xs[TPK_MAX_RANK];
  strides(e, xt, xs);
  line(e, "{"); /* acc is this reduction's: a full one declares it in the enclosing block */
  e->indent++;
  int opened = 1;
  for (int i = 0; i < xt->rank; i++)
    if (!reduced[i]) {
      line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, xt, i), i);
      e->indent++;
      opened++;
    }
  line(e, "%s acc = %s;", acc_t, init);
  for (int i = 0; i < xt->rank; i++)
    if (reduced[i]) {
      line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, xt, i), i);
      e->indent++;
      opened++;
    }
  const char *xv = rd(e, x, linear(e, xt->rank, xs, NULL));
  if (kind == TPK_REDUCE_MAX) line(e, "acc = %s;", fl ? tpk_arena_printf(&e->arena, "tpk_fmax(acc, %s)", xv) : tpk_arena_printf(&e->arena, "(%s > acc ? %s : acc)", xv, xv));
  else if (kind == TPK_REDUCE_MIN) line(e, "acc = %s;", fl ? tpk_arena_printf(&e->arena, "tpk_fmin(acc, %s)", xv) : tpk_arena_printf(&e->arena, "(%s < acc ? %s : acc)", xv, xv));
  else if (kind == TPK_REDUCE_PROD) line(e, "acc = %s;", fl ? tpk_arena_printf(&e->arena, "acc * %s", xv) : tpk_arena_printf(&e->arena, "(%s)((uint32_t)acc * (uint32_t)%s)", acc_t, xv));
  else line(e, "acc = %s;", fl ? tpk_arena_printf(&e->arena, "acc + %s", xv) : tpk_arena_printf(&e->arena, "(%s)((uint32_t)acc + (uint32_t)%s)", acc_t, xv));
  int inner = 0;
  for (int i = 0; i < xt->rank; i++) inner += reduced[i];
  close_loops(e, inner);
  const char *res = is_mean ? tpk_arena_printf(&e->arena, "acc / %s", float_size(e, len)) : "acc";
  if (out) {
    /* output offset: kept dims with the output's strides (keepdims adds 1s) */
    Sz rs[TPK_MAX_RANK], os[TPK_MAX_RANK];
    strides(e, r->type, rs);
    bool keep = tpk_op_attr(op, "keepdims") && tpk_op_attr(op, "keepdims")->i;
    for (int i = 0, j = 0; i < xt->rank; i++) os[i] = reduced[i] ? "0" : rs[keep ? i : j++];
    line(e, "%s[%s] = %s;", out, linear(e, xt->rank, os, NULL), narrow(e, r->type->dtype, res));
  } else {
    line(e, "%s = %s;", scalar, narrow(e, r->type->dtype, res));
  }
  close_loops(e, opened - inner);
}

/* An inclusive scan: the other dims' loops outside, the scanned axis inside
 * with one accumulator per line, ascending, as the interpreter runs it
 * (floats accumulate in f32 and each output is rounded to the dtype). */
static void emit_scan(Emitter *e, const TpkOp *op) {
  const TpkValue *x = op->in[0], *r = &op->out[0];
  const TpkType *xt = x->type;
  int axis = (int)tpk_op_int(op, "axis", 0);
  TpkReduceKind kind = tpk_op_reduce_kind(op);
  TpkDType dt = xt->dtype;
  bool fl = tpk_dtype_is_float(dt);
  const char *acc_t = compute_type(dt), *out = def_tile(e, r);
  Sz xs[TPK_MAX_RANK], rs[TPK_MAX_RANK];
  strides(e, xt, xs);
  strides(e, r->type, rs);
  line(e, "{"); /* acc is this scan's */
  e->indent++;
  int opened = 1;
  for (int i = 0; i < xt->rank; i++)
    if (i != axis) {
      line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", i, i, dim(e, xt, i), i);
      e->indent++;
      opened++;
    }
  line(e, "%s acc = 0;", acc_t);
  line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", axis, axis, dim(e, xt, axis), axis);
  e->indent++;
  line(e, "%s v = %s;", acc_t, rd(e, x, linear(e, xt->rank, xs, NULL)));
  const char *next;
  switch (kind) {
  case TPK_REDUCE_MAX: next = fl ? "tpk_fmax(acc, v)" : "(v > acc ? v : acc)"; break;
  case TPK_REDUCE_MIN: next = fl ? "tpk_fmin(acc, v)" : "(v < acc ? v : acc)"; break;
  case TPK_REDUCE_PROD: next = fl ? "acc * v" : tpk_arena_printf(&e->arena, "(%s)((uint32_t)acc * (uint32_t)v)", acc_t); break;
  default: next = fl ? "acc + v" : tpk_arena_printf(&e->arena, "(%s)((uint32_t)acc + (uint32_t)v)", acc_t); break;
  }
  line(e, "acc = i%d == 0 ? v : %s;", axis, next);
  line(e, "%s[%s] = %s;", out, linear(e, r->type->rank, rs, NULL), narrow(e, dt, "acc"));
  e->indent--;
  line(e, "}");
  close_loops(e, opened);
}

static const char *gemm_fn(TpkDType dt) {
  switch (dt) {
  case TPK_F32: return "gemm_f32";
  case TPK_BF16: return "gemm_bf16";
  case TPK_F16: return "gemm_f16";
  case TPK_I8: return "gemm_i8";
  case TPK_I32: return "gemm_i32";
  default: return NULL;
  }
}

static int packed_index(const Emitter *e, const TpkOp *dot);

/* C (+)= A x B for a dot op into `c` (already holding the addend when
 * accumulate), rows ldc elements apart (NULL: a tile, N). */
static void emit_gemm(Emitter *e, const TpkOp *dot, const char *c, const char *ldc, bool accumulate) {
  const TpkValue *a = dot->in[0], *b = dot->in[1];
  const char *fn = gemm_fn(a->type->dtype);
  if (!fn) {
    fail(e, dot, "dot of %s operands is not supported by the host backend (convert them to f32, bf16, f16, i8 or i32)",
         tpk_dtype_name(a->type->dtype));
    return;
  }
  const TpkAttr *lc = tpk_op_attr(dot, "lhs_contract"), *rc = tpk_op_attr(dot, "rhs_contract");
  const TpkAttr *lb = tpk_op_attr(dot, "lhs_batch");
  int batch = lb ? lb->n : 0;
  if (lc->n != 1 || batch > 1 || a->type->rank != 2 + batch || b->type->rank != 2 + batch) {
    fail(e, dot, "this dot's dimensions are not supported by the host backend");
    return;
  }
  int ak = (int)lc->ints[0] - batch, bk = (int)rc->ints[0] - batch;
  Sz a0 = dim(e, a->type, batch), a1 = dim(e, a->type, batch + 1);
  Sz b0 = dim(e, b->type, batch), b1 = dim(e, b->type, batch + 1);
  Sz M = ak == 1 ? a0 : a1, K = ak == 1 ? a1 : a0, N = bk == 0 ? b1 : b0;
  int a_trans = ak == 0, b_trans = bk == 1;
  if (batch) {
    line(e, "for (int64_t b = 0; b < %s; b++)", dim(e, a->type, 0));
    e->indent++;
  }
  const char *bo = batch ? "b * " : "";
  /* an operand loaded in place has its tensor's row stride */
  const char *lda = a->def && a->def->opcode == TPK_OP_LOAD && load_feeds_dot(a->def)
                        ? tpk_arena_printf(&e->arena, "%s_ld", name_of(e, a)) : a1;
  const char *ldb = b->def && b->def->opcode == TPK_OP_LOAD && load_feeds_dot(b->def)
                        ? tpk_arena_printf(&e->arena, "%s_ld", name_of(e, b)) : b1;
  if (!ldc) ldc = N;
  int pk = packed_index(e, dot);
  if (pk >= 0) {
    line(e, "p->gemm_packed(TPK_PRIM_%s, %s, %s, %s, %s, %s, %d, tpk_align64_ptr(W + %s), %s, %s, %d);", prim_dtype(a->type->dtype), M, N, K,
         name_of(e, a), lda, a_trans, e->packed[pk].at, c, ldc, accumulate);
    return;
  }
  line(e, "p->%s(%s, %s, %s, %s + %s%s, %s, %d, %s + %s%s, %s, %d, %s + %s%s, %s, %d);", fn, M, N, K, name_of(e, a), bo,
       batch ? sz_mul(e, a0, a1) : "0", lda, a_trans, name_of(e, b), bo, batch ? sz_mul(e, b0, b1) : "0", ldb, b_trans, c,
       bo, batch ? sz_mul(e, M, ldc) : "0", ldc, accumulate);
  if (batch) e->indent--;
}

/* ---- right operands packed once ----------------------------------------------------------
 * A dot inside a grid or loop whose right operand is computed before it,
 * outside that grid or loop (x @ W by blocks of rows, W loaded whole at the
 * top level; x^T @ dy by blocks of x's columns; in attention's backward, a
 * key block loaded by a grid instance and multiplied in its loop over query
 * blocks), would have gemm pack all of that operand again for every
 * iteration: at 64 rows a block that costs about as much as a third of the
 * products. Instead it is packed once, before the op holding the dot in the
 * block computing the operand, into the part's workspace past the plan's
 * storage (each grid instance of a part reuses the place), and every
 * iteration's gemm reads it packed (prims.h, gemm_pack_b and gemm_packed):
 * the same bits. This is how the host's gemm primitive is called, like reading a
 * block in place; the IR, the plan and the simulator see the dot as
 * before. */

static int packed_index(const Emitter *e, const TpkOp *dot) {
  for (int i = 0; i < e->npacked; i++)
    if (e->packed[i].dot == dot) return i;
  return -1;
}

/* The op of block `outer` that holds dot in one of its regions (at any
 * depth), or NULL when dot is not inside an op of `outer`. */
static const TpkOp *holder_in(const TpkOp *dot, const TpkBlock *outer) {
  for (const TpkOp *op = dot; op && op->parent; op = op->parent->parent)
    if (op->parent->parent && op->parent->parent->parent == outer) return op->parent->parent;
  return NULL;
}

/* The op before which dot's right operand is packed: the op holding the dot
 * in the block that computes the operand (a grid or loop of the kernel's
 * top level, or a loop inside a grid whose body loads the operand), or
 * NULL. */
static const TpkOp *packs_rhs_before(const TpkOp *dot) {
  if (dot->opcode != TPK_OP_DOT) return NULL;
  const TpkValue *a = dot->in[0], *b = dot->in[1];
  const TpkAttr *lc = tpk_op_attr(dot, "lhs_contract"), *lb = tpk_op_attr(dot, "lhs_batch");
  if (!lc || lc->n != 1 || (lb && lb->n) || a->type->rank != 2 || b->type->rank != 2 || !gemm_fn(a->type->dtype) ||
      !b->def || tpk_op_is_fused(b->def) || a == b)
    return NULL;
  return holder_in(dot, b->def->parent);
}

static void find_packed_in(Emitter *e, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    const TpkOp *top = packs_rhs_before(op);
    if (top && e->npacked < (int)(sizeof e->packed / sizeof e->packed[0])) {
      e->packed[e->npacked].dot = op;
      e->packed[e->npacked++].top = top;
    }
    for (int r = 0; r < op->nregion; r++) find_packed_in(e, op->regions[r]);
  }
}

/* The dots whose right operand is packed once, their places past the plan's
 * storage (`base`: where that ends, 64-byte aligned) and the bytes they
 * take. */
static void find_packed_operands(Emitter *e, Sz base) {
  find_packed_in(e, e->f->body);
  Sz total = "0";
  for (int i = 0; i < e->npacked; i++) {
    const TpkValue *b = e->packed[i].dot->in[1];
    int bk = (int)tpk_op_attr(e->packed[i].dot, "rhs_contract")->ints[0];
    Sz K = dim(e, b->type, bk), N = dim(e, b->type, 1 - bk), bytes;
    int64_t k, n;
    /* 64 more: the place is aligned within it */
    if (sz_value(K, &k) && sz_value(N, &n)) bytes = sz_int(e, (TPK_GEMM_PACKED_BYTES(k, n) + 63) / 64 * 64 + 64);
    else bytes = tpk_arena_printf(&e->arena, "tpk_align64(TPK_GEMM_PACKED_BYTES(%s, %s)) + 64", K, N);
    e->packed[i].at = sz_add(e, base, total);
    total = sz_add(e, total, bytes);
  }
  e->packed_bytes = total;
}

/* Before top-level op `top`: pack the right operands of its dots. */
static void emit_packing(Emitter *e, const TpkOp *top) {
  for (int i = 0; i < e->npacked; i++) {
    if (e->packed[i].top != top) continue;
    const TpkOp *dot = e->packed[i].dot;
    const TpkValue *b = dot->in[1];
    int bk = (int)tpk_op_attr(dot, "rhs_contract")->ints[0];
    line(e, "p->gemm_pack_b(TPK_PRIM_%s, %s, %s, %s, %s, %d, tpk_align64_ptr(W + %s)); /* packed once for every block's product */",
         prim_dtype(b->type->dtype), dim(e, b->type, bk), dim(e, b->type, 1 - bk), name_of(e, b), dim(e, b->type, 1),
         bk == 1, e->packed[i].at);
  }
}

/* A dot (no accumulator, no batch) whose result only the store after it
 * reads (direct_store) writes a block in range straight into the stored
 * memory, its rows that memory's row stride apart: no tile, no copy (a
 * weight's gradient, a projection stored for the backward). A ragged block
 * goes through the tile and the store's masked copy. */
static bool emit_dot_stored(Emitter *e, const TpkOp *op, const char *n) {
  const TpkOp *st = direct_store(op);
  const TpkAttr *lb = tpk_op_attr(op, "lhs_batch");
  if (!st || (lb && lb->n) || op->out[0].type->rank != 2) return false;
  const TpkIndexPattern *pat = tpk_op_index(st, "index");
  const TpkType *mem = st->in[0]->type;
  if (pat->rank != 2 || mem->rank != 2) return false;
  for (int d = 0; d < 2; d++)
    if (pat->dim[d] != TPK_INDEX_ALL && pat->dim[d] != TPK_INDEX_TILE && pat->dim[d] != TPK_INDEX_RANGE) return false;
  Access acc;
  if (!access_of(e, st, pat, st->in[0], 1, &acc)) return false;
  access_sizes(e, &acc, op->out[0].type);
  Sz ms[TPK_MAX_RANK];
  strides(e, mem, ms);
  TpkStr off = {0};
  for (int d = 0; d < 2; d++)
    if (!sz_is(ms[d], 0) && strcmp(acc.start[d], "0") != 0) tpk_str_printf(&off, "%s%s*%s", off.len ? " + " : "", acc.start[d], ms[d]);
  line(e, "if (%s) { /* in range: the product straight into %s */", in_range(e, &acc), acc.base);
  e->indent++;
  emit_gemm(e, op, tpk_arena_printf(&e->arena, "%s + %s", acc.base, off.len ? off.data : "0"), ms[0], false);
  e->indent--;
  line(e, "} else {");
  e->indent++;
  emit_gemm(e, op, n, NULL, false);
  block_copy(e, &acc, n, op->out[0].type, false, NULL, false);
  e->indent--;
  line(e, "}");
  tpk_str_free(&off);
  e->stored = st;
  return true;
}

/* Is op a broadcast made only to start the accumulating dot right after it
 * (`x @ w + b`: b's rows)? It is then written straight into the product's
 * tile (emit_dot), not into a tile of its own and copied. */
static bool starts_dot(const TpkOp *op) {
  if (!op || op->opcode != TPK_OP_BROADCAST || tpk_op_is_fused(op) || !op->next || op->next->opcode != TPK_OP_DOT) return false;
  return tpk_dot_accumulator(op->next) == &op->out[0] && tpk_value_use_count(&op->out[0]) == 1;
}

/* dot(a, b), or with an accumulator x: x into the result (in place when
 * they share memory; a broadcast that starts it, written there), then one
 * gemm accumulating into it. */
static void emit_dot(Emitter *e, const TpkOp *op) {
  const char *n = def_tile(e, &op->out[0]);
  const TpkValue *x = tpk_dot_accumulator(op);
  if (x && starts_dot(x->def)) emit_element_loop(e, x->def, n, NULL);
  else if (x) copy_tile(e, n, &op->out[0], x);
  if (!x && emit_dot_stored(e, op, n)) return;
  emit_gemm(e, op, n, NULL, x != NULL);
}

/* ---- value-level gather, scatter, concat ---------------------------------------------------- */

static void emit_gather(Emitter *e, const TpkOp *op) {
  const TpkValue *t = op->in[0], *ids = op->in[1], *r = &op->out[0];
  int axis = (int)tpk_op_int(op, "axis", 0);
  Sz ts[TPK_MAX_RANK], rs[TPK_MAX_RANK], is[TPK_MAX_RANK];
  strides(e, t->type, ts);
  strides(e, r->type, rs);
  strides(e, ids->type, is);
  Sz D = dim(e, t->type, axis);
  const char *n = def_tile(e, r);
  int k = open_loops(e, r->type);
  /* result coords: [0,axis) table, [axis, axis+ir) ids, then table */
  int ir = ids->type->rank;
  TpkStr idx = {0}, src = {0};
  for (int i = 0; i < ir; i++) tpk_str_printf(&idx, "%s i%d*%s", i ? " +" : "", axis + i, is[i]);
  const char *id = tpk_arena_printf(&e->arena, "(int64_t)%s[%s]", name_of(e, ids), ir ? idx.data : "0");
  line(e, "int64_t g = %s;", id);
  line(e, "if ((uint64_t)g >= (uint64_t)%s) return tpk_fail2(err, \"line %d: gather index %%lld is out of range [0, %%lld)\", (long long)g, (long long)%s);",
       D, op->loc.line, D);
  for (int i = 0; i < t->type->rank; i++) {
    const char *c = i < axis ? tpk_arena_printf(&e->arena, "i%d", i)
                    : i == axis ? "g"
                                : tpk_arena_printf(&e->arena, "i%d", i - 1 + ir);
    tpk_str_printf(&src, "%s%s*%s", i ? " + " : "", c, ts[i]);
  }
  line(e, "%s[%s] = %s[%s];", n, linear(e, r->type->rank, rs, NULL), name_of(e, t), src.data ? src.data : "0");
  tpk_str_free(&idx);
  tpk_str_free(&src);
  close_loops(e, k);
}

static void emit_scatter(Emitter *e, const TpkOp *op) {
  const TpkValue *base = op->in[0], *ids = op->in[1], *upd = op->in[2], *r = &op->out[0];
  int axis = (int)tpk_op_int(op, "axis", 0);
  bool add = tpk_op_store_mode(op) == TPK_STORE_ADD;
  Sz bs[TPK_MAX_RANK], us[TPK_MAX_RANK], is[TPK_MAX_RANK];
  strides(e, base->type, bs);
  strides(e, upd->type, us);
  strides(e, ids->type, is);
  Sz D = dim(e, base->type, axis);
  const char *n = def_tile(e, r);
  copy_tile(e, n, r, base);
  int k = open_loops(e, upd->type);
  int ir = ids->type->rank;
  TpkStr idx = {0}, dst = {0};
  for (int i = 0; i < ir; i++) tpk_str_printf(&idx, "%s i%d*%s", i ? " +" : "", axis + i, is[i]);
  line(e, "int64_t g = (int64_t)%s[%s];", name_of(e, ids), ir ? idx.data : "0");
  line(e, "if ((uint64_t)g >= (uint64_t)%s) return tpk_fail2(err, \"line %d: scatter index %%lld is out of range [0, %%lld)\", (long long)g, (long long)%s);",
       D, op->loc.line, D);
  for (int i = 0; i < base->type->rank; i++) {
    const char *c = i < axis ? tpk_arena_printf(&e->arena, "i%d", i)
                    : i == axis ? "g"
                                : tpk_arena_printf(&e->arena, "i%d", i - 1 + ir);
    tpk_str_printf(&dst, "%s%s*%s", i ? " + " : "", c, bs[i]);
  }
  const char *d = tpk_arena_printf(&e->arena, "%s[%s]", n, dst.data ? dst.data : "0");
  const char *u = tpk_arena_printf(&e->arena, "%s[%s]", name_of(e, upd), linear(e, upd->type->rank, us, NULL));
  TpkDType dt = r->type->dtype;
  if (add && tpk_dtype_is_float(dt))
    line(e, "%s = %s;", d, narrow(e, dt, tpk_arena_printf(&e->arena, "%s + %s", rd(e, r, dst.data ? dst.data : "0"), rd(e, upd, linear(e, upd->type->rank, us, NULL)))));
  else if (add) line(e, "%s = (%s)((uint32_t)%s + (uint32_t)%s);", d, ctype(dt), d, u);
  else line(e, "%s = %s;", d, u);
  tpk_str_free(&idx);
  tpk_str_free(&dst);
  close_loops(e, k);
}

/* The operand's bytes, read as another dtype of their width. */
static void emit_bitcast(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0], *x = op->in[0];
  if (!is_tile(r)) {
    const char *n = new_name(e, r);
    line(e, "%s %s;", ctype(r->type->dtype), n);
    line(e, "memcpy(&%s, &%s, sizeof %s);", n, name_of(e, x), n);
    return;
  }
  line(e, "memcpy(%s, %s, %s);", def_tile(e, r), name_of(e, x), byte_size(e, r->type));
}

static void emit_concat(Emitter *e, const TpkOp *op) {
  const TpkValue *r = &op->out[0];
  int axis = (int)tpk_op_int(op, "axis", 0);
  Sz rs[TPK_MAX_RANK];
  strides(e, r->type, rs);
  const char *n = def_tile(e, r);
  Sz at = "0";
  for (int i = 0; i < op->nin; i++) {
    const TpkValue *x = op->in[i];
    Sz xs[TPK_MAX_RANK];
    strides(e, x->type, xs);
    int k = open_loops(e, x->type);
    TpkStr dst = {0};
    for (int d = 0; d < r->type->rank; d++)
      if (!sz_is(rs[d], 0))
        tpk_str_printf(&dst, "%s(i%d%s)*%s", dst.len ? " + " : "", d, d == axis ? tpk_arena_printf(&e->arena, " + %s", at) : "",
                       rs[d]);
    line(e, "%s[%s] = %s[%s];", n, dst.len ? dst.data : "0", name_of(e, x), linear(e, x->type->rank, xs, NULL));
    tpk_str_free(&dst);
    close_loops(e, k);
    at = sz_add(e, at, dim(e, x->type, axis));
  }
}

/* ---- control flow ------------------------------------------------------------------------- */

static void emit_block(Emitter *e, const TpkBlock *b);

/* The value a for (its carried block argument) or an if (its result)
 * receives from position i of its yield. */
static const TpkValue *carrier(const TpkOp *owner, int i) {
  return owner->opcode == TPK_OP_FOR     ? owner->regions[0]->args[1 + i]
         : owner->opcode == TPK_OP_WHILE ? owner->regions[0]->args[i]
                                         : &owner->out[i];
}

/* Loop-carried and if-merged values: assign the yielded values to the
 * carriers. Tiles are copied unless they already share memory; when a
 * yielded tile lives in another carrier's buffer, everything goes through a
 * temporary copy first so no carrier is overwritten before it is read. */
static void emit_yield_into(Emitter *e, const TpkOp *y, const TpkOp *owner, int n) {
  bool clash = false;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j && is_tile(carrier(owner, j)) && offset_of(e, y->in[i]) == offset_of(e, carrier(owner, j))) clash = true;
  for (int i = 0; i < n; i++) {
    const TpkValue *c = carrier(owner, i), *v = y->in[i];
    if (!is_tile(c)) {
      line(e, "%s y%d_%d = %s;", ctype(c->type->dtype), e->tmp, i, name_of(e, v));
      continue;
    }
    if (offset_of(e, v) == offset_of(e, c)) continue;
    Sz bytes = byte_size(e, c->type);
    if (clash) {
      line(e, "void *y%d_%d = malloc(%s);", e->tmp, i, bytes);
      line(e, "if (!y%d_%d) return tpk_fail(err, \"out of host memory\", 0);", e->tmp, i);
      line(e, "memcpy(y%d_%d, %s, %s);", e->tmp, i, name_of(e, v), bytes);
    }
  }
  for (int i = 0; i < n; i++) {
    const TpkValue *c = carrier(owner, i), *v = y->in[i];
    if (!is_tile(c)) {
      line(e, "%s = y%d_%d;", name_of(e, c), e->tmp, i);
      continue;
    }
    if (offset_of(e, v) == offset_of(e, c)) continue;
    Sz bytes = byte_size(e, c->type);
    if (clash) {
      line(e, "memcpy(%s, y%d_%d, %s);", name_of(e, c), e->tmp, i, bytes);
      line(e, "free(y%d_%d);", e->tmp, i);
    } else {
      line(e, "memcpy(%s, %s, %s);", name_of(e, c), name_of(e, v), bytes);
    }
  }
  e->tmp++;
}

/* The C value of a loop bound or a grid bound. */
static const char *bound(Emitter *e, const TpkValue *v) { return tpk_arena_printf(&e->arena, "(int64_t)%s", name_of(e, v)); }

static void emit_for(Emitter *e, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  int n = op->nout;
  /* the carriers are the block arguments; the results are the same C objects */
  for (int i = 0; i < n; i++) {
    const TpkValue *arg = body->args[i + 1], *init = op->in[2 + i];
    if (is_tile(arg)) {
      const char *c = def_tile(e, arg);
      copy_tile(e, c, arg, init);
      set_name(e, &op->out[i], c);
    } else {
      const char *c = new_name(e, arg);
      line(e, "%s %s = %s;", ctype(arg->type->dtype), c, name_of(e, init));
      set_name(e, &op->out[i], c);
    }
  }
  const TpkValue *iv = body->args[0];
  const char *ivn = new_name(e, iv);
  line(e, "for (int64_t %s = %s; %s < %s; %s++) {", ivn, bound(e, op->in[0]), ivn, bound(e, op->in[1]), ivn);
  e->indent++;
  emit_block(e, body);
  if (n && body->last && body->last->opcode == TPK_OP_YIELD) emit_yield_into(e, body->last, op, n);
  e->indent--;
  line(e, "}");
}

/* `while (cond) { body }`: the condition is the first carried value, and
 * the body's yield computes the next one. */
static void emit_while(Emitter *e, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  int n = op->nout;
  for (int i = 0; i < n; i++) {
    const TpkValue *arg = body->args[i], *init = op->in[i];
    if (is_tile(arg)) {
      const char *c = def_tile(e, arg);
      copy_tile(e, c, arg, init);
      set_name(e, &op->out[i], c);
    } else {
      const char *c = new_name(e, arg);
      line(e, "%s %s = %s;", ctype(arg->type->dtype), c, name_of(e, init));
      set_name(e, &op->out[i], c);
    }
  }
  line(e, "while (%s) {", name_of(e, body->args[0]));
  e->indent++;
  emit_block(e, body);
  if (body->last && body->last->opcode == TPK_OP_YIELD) emit_yield_into(e, body->last, op, n);
  e->indent--;
  line(e, "}");
}

static void emit_if(Emitter *e, const TpkOp *op) {
  int n = op->nout;
  for (int i = 0; i < n; i++) {
    const TpkValue *r = &op->out[i];
    if (is_tile(r)) def_tile(e, r);
    else line(e, "%s %s;", ctype(r->type->dtype), new_name(e, r));
  }
  line(e, "if (%s) {", name_of(e, op->in[0]));
  for (int r = 0; r < 2; r++) {
    e->indent++;
    const TpkBlock *b = op->regions[r];
    emit_block(e, b);
    if (n && b->last && b->last->opcode == TPK_OP_YIELD) emit_yield_into(e, b->last, op, n);
    e->indent--;
    line(e, r == 0 ? "} else {" : "}");
  }
}

/* The grid a launch shares among its parts: one loop over this part's
 * range of the instances, flattened row-major (the last axis fastest, as
 * the nested loops go), each axis's index recovered from the flat one. A
 * kernel shares at most one grid, so the names (grid_*) cannot clash, and
 * they take no number from the other names. */
static void emit_split_grid_loops(Emitter *e, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  line(e, "/* grid: %d ax%s, one iteration per program instance; this call runs its share of them */", body->nargs,
       body->nargs == 1 ? "is" : "es");
  TpkStr total = {0};
  for (int a = 0; a < body->nargs; a++) {
    line(e, "int64_t grid_n%d = %s - %s;", a, bound(e, op->in[2 * a + 1]), bound(e, op->in[2 * a]));
    line(e, "if (grid_n%d < 0) grid_n%d = 0;", a, a);
    tpk_str_printf(&total, "%sgrid_n%d", a ? " * " : "", a);
  }
  line(e, "int64_t grid_lo, grid_hi;");
  line(e, "tpk_share(p, %s, &grid_lo, &grid_hi);", total.data ? total.data : "1");
  tpk_str_free(&total);
  line(e, "for (int64_t grid_q = grid_lo; grid_q < grid_hi; grid_q = tpk_next(p, grid_q)) {");
  e->indent++;
  for (int a = 0; a < body->nargs; a++) {
    TpkStr inner = {0}; /* instances per step of axis a */
    for (int b = a + 1; b < body->nargs; b++) tpk_str_printf(&inner, "%sgrid_n%d", inner.len ? " * " : "", b);
    const char *q = inner.len ? tpk_arena_printf(&e->arena, "grid_q / (%s)", inner.data) : "grid_q";
    if (a > 0) q = tpk_arena_printf(&e->arena, "(%s) %% grid_n%d", q, a);
    tpk_str_free(&inner);
    line(e, "int64_t %s = %s + %s;", new_name(e, body->args[a]), bound(e, op->in[2 * a]), q);
  }
}

static void emit_grid(Emitter *e, const TpkOp *op) {
  const TpkBlock *body = op->regions[0];
  const TpkOp *outer = e->grid;
  e->grid = op;
  int loops = body->nargs;
  if (op == e->split) {
    emit_split_grid_loops(e, op);
    loops = 1;
  } else {
    line(e, "/* grid: %d ax%s, one iteration per program instance */", body->nargs, body->nargs == 1 ? "is" : "es");
    for (int a = 0; a < body->nargs; a++) {
      const char *n = new_name(e, body->args[a]);
      line(e, "for (int64_t %s = %s; %s < %s; %s++) {", n, bound(e, op->in[2 * a]), n, bound(e, op->in[2 * a + 1]), n);
      e->indent++;
    }
  }
  emit_block(e, body);
  for (int a = 0; a < loops; a++) {
    e->indent--;
    line(e, "}");
  }
  e->grid = outer;
}

static void emit_op(Emitter *e, const TpkOp *op);

/* ---- runs: element ops over one shape in one loop ---------------------------------------
 *
 * A chain of elementwise ops whose values have several users is, op by op,
 * a loop per op through tiles in the workspace: AdamW's update (four
 * results, each read by later ops) passed over its 256 KiB tiles ten times.
 * A run is the ops from an element op to the last of the ops after it that
 * are element ops of the same shape (members), stores of their values, or
 * fused ops and loads and scalar constants between them: one loop over the
 * shape computes every member into a C local, in program order, and each
 * store writes its element straight where it goes. A member's tile is
 * written only when something outside the run reads it. Loads and
 * constants are emitted before the loop (they read nothing the run writes:
 * a load of memory a store of the run wrote ends the run).
 *
 * Element i of every member, store and tile is touched only in iteration i,
 * so one loop computes what the op-by-op loops did, provided nothing it
 * reads is written at another element: the run ends before a second store
 * into one memory, or a store into memory a member reads in place (a view
 * load), and is not formed when a member's tile shares workspace with
 * anything else the loop reads or writes (the planner reuses the storage of
 * values that died earlier in the run). That is also why the innermost loop
 * may say ivdep. A store whose block may be ragged gets the loop twice:
 * stores straight from the loop when every block is in range, else through
 * the stored members' tiles and the usual masked copies. */

enum { RUN_MAX = 128 };
typedef enum RunKind { RUN_FUSED, RUN_MEMBER, RUN_HOIST, RUN_STORE } RunKind;
typedef struct Run {
  int n, nmembers;
  const TpkOp *op[RUN_MAX];
  RunKind kind[RUN_MAX];
  bool tile[RUN_MAX]; /* members: the loop writes the tile too */
} Run;

/* Is op computed element by element into a tile of its own (what
 * emit_elementwise or emit_broadcast write as one loop)? */
static bool element_member(const TpkOp *op) {
  if (tpk_op_is_fused(op) || op->nout != 1 || !is_tile(&op->out[0]) || op->nin == 0) return false;
  if (op->opcode == TPK_OP_BROADCAST) return true;
  bool elementwise = (tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE) || op->opcode == TPK_OP_SELECT ||
                     op->opcode == TPK_OP_CONVERT;
  return elementwise && element_form(op) == FORM_LOOP;
}

static bool same_shape(const TpkType *a, const TpkType *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++) {
    int64_t x, y;
    if (a->dims[d] != b->dims[d] &&
        !(tpk_dim_is_const(a->dims[d], &x) && tpk_dim_is_const(b->dims[d], &y) && x == y))
      return false;
  }
  return true;
}

static bool in_run_as(const Run *r, const TpkOp *op, RunKind kind) {
  for (int i = 0; i < r->n; i++)
    if (r->op[i] == op) return r->kind[i] == kind;
  return false;
}

static bool run_writes(const Run *r, const TpkValue *ref) {
  for (int i = 0; i < r->n; i++)
    if (r->kind[i] == RUN_STORE && r->op[i]->in[0] == ref) return true;
  return false;
}

/* May st be one of the run's stores: setting a member's value, the run's
 * first store into its memory, which no member so far reads in place? */
static bool run_store_ok(const Run *r, const TpkOp *st) {
  const TpkValue *val = st->in[st->nin - 1], *ref = st->in[0];
  if (!val->def || !in_run_as(r, val->def, RUN_MEMBER) || run_writes(r, ref)) return false;
  if (tpk_op_store_mode(st) != TPK_STORE_SET || has_gather(tpk_op_index(st, "index"))) return false;
  for (int i = 0; i < r->n; i++)
    for (int j = 0; r->kind[i] == RUN_MEMBER && j < r->op[i]->nin; j++)
      if (reads_in_place(r->op[i]->in[j], ref)) return false;
  return true;
}

/* Is a use by `user` inside the run (a member or a store, or a fused op
 * computed inside one)? */
static bool used_in_run(const Run *r, const TpkOp *user) {
  while (user && tpk_op_is_fused(user)) user = tpk_value_single_user(&user->out[0]);
  return user && (in_run_as(r, user, RUN_MEMBER) || in_run_as(r, user, RUN_STORE));
}

static bool read_outside(const Run *r, const TpkValue *v) {
  for (const TpkUse *u = v->uses; u; u = u->next)
    if (!used_in_run(r, u->user)) return true;
  return false;
}

/* The run cut before entry n (and the loads and fused ops before that
 * after its last member or store); false when fewer than two members stay. */
static bool cut_run(Run *r, int n) {
  while (n > 0 && r->kind[n - 1] != RUN_MEMBER && r->kind[n - 1] != RUN_STORE) n--;
  r->n = n;
  r->nmembers = 0;
  for (int i = 0; i < n; i++) r->nmembers += r->kind[i] == RUN_MEMBER;
  return r->nmembers >= 2;
}

static bool starts_dot(const TpkOp *op);

/* The run starting at op (an element_member), or false when it would have
 * fewer than two members. */
static bool collect_run(const TpkOp *start, Run *r) {
  r->n = 0;
  const TpkType *shape = start->out[0].type;
  int last = -1;
  for (const TpkOp *op = start; op && r->n < RUN_MAX; op = op->next) {
    RunKind kind;
    if (tpk_op_is_fused(op)) kind = RUN_FUSED;
    else if (element_member(op) && !starts_dot(op) && same_shape(op->out[0].type, shape)) kind = RUN_MEMBER;
    else if (op->opcode == TPK_OP_LOAD && !run_writes(r, op->in[0])) kind = RUN_HOIST;
    else if (op->opcode == TPK_OP_CONST && !is_tile(&op->out[0])) kind = RUN_HOIST;
    else if (op->opcode == TPK_OP_STORE && is_tile(op->in[op->nin - 1]) && run_store_ok(r, op)) kind = RUN_STORE;
    else break;
    r->op[r->n] = op;
    r->kind[r->n++] = kind;
    if (kind == RUN_MEMBER || kind == RUN_STORE) last = r->n - 1;
  }
  return cut_run(r, last + 1); /* loads and fused ops after the last member stay where they are */
}

/* Where v's storage is in the workspace, as [lo, hi) (with symbolic sizes,
 * its storage group), or false when it has none there. */
static bool slot_span(Emitter *e, const TpkValue *v, int64_t *lo, int64_t *hi) {
  const TpkPlanSlot *s = tpk_plan_slot(e->plan, v);
  if (!s) return false;
  if (e->plan->symbolic) {
    *lo = s->group, *hi = (int64_t)s->group + 1;
    return s->group >= 0;
  }
  *lo = s->offset, *hi = s->offset + s->bytes;
  return s->bytes > 0;
}

/* Is load a view of its tensor whatever the indices (its block in range
 * and whole where it must be): then it reads no workspace. */
static bool load_always_view(Emitter *e, const TpkOp *load) {
  if (!is_tile(&load->out[0]) || !load_is_view(load)) return false;
  Access acc;
  if (!access_of(e, load, tpk_op_index(load, "index"), load->in[0], 1, &acc)) return false;
  access_sizes(e, &acc, load->out[0].type);
  if (strcmp(in_range(e, &acc), "1") != 0) return false;
  TpkStr whole = {0};
  WholeBlocks w = {e, &whole};
  trailing_blocks(load, block_is_whole_when, &w);
  bool always = whole.len == 0;
  tpk_str_free(&whole);
  return always;
}

/* Workspace a run touches: [lo, hi) of value v, by entry `by` of the run;
 * written (a member's tile in the loop, or before the loop the copy a
 * hoisted load may make: `pre`) or read, and whether read at the loop's own
 * element. */
typedef struct Spans {
  int n;
  struct {
    int64_t lo, hi;
    const TpkValue *v;
    int by;
    bool written, pre, same_index;
  } s[2 * RUN_MAX + 64];
} Spans;

static bool add_span(Emitter *e, Spans *s, const TpkValue *v, int by, bool written, bool same_index) {
  if (s->n == (int)(sizeof s->s / sizeof s->s[0])) return false;
  if (!slot_span(e, v, &s->s[s->n].lo, &s->s[s->n].hi)) return true;
  s->s[s->n].v = v, s->s[s->n].by = by, s->s[s->n].written = written, s->s[s->n].same_index = same_index;
  s->s[s->n].pre = false;
  s->n++;
  return true;
}

/* The workspace entry `by` reads outside the run's locals: non-member
 * tiles, through the ops fused into it; same_index while no broadcast on
 * the way maps the loop's element elsewhere. */
static bool add_reads(Emitter *e, const Run *r, const TpkValue *v, int by, bool same_index, Spans *s) {
  if (!is_tile(v)) return true;
  if (v->def && in_run_as(r, v->def, RUN_MEMBER)) return true;
  if (v->def && tpk_op_is_fused(v->def)) {
    same_index &= v->def->opcode != TPK_OP_BROADCAST && v->def->opcode != TPK_OP_IOTA;
    for (int i = 0; i < v->def->nin; i++)
      if (!add_reads(e, r, v->def->in[i], by, same_index, s)) return false;
    return true;
  }
  if (v->def && v->def->opcode == TPK_OP_LOAD && load_always_view(e, v->def)) return true;
  return add_span(e, s, v, by, false, same_index && same_shape(v->type, r->op[0]->out[0].type));
}

/* Decide which members write their tiles (read outside the run, or stored
 * through them when blocks may be ragged). The workspace the run writes
 * (those tiles, and the copies its hoisted loads may make, out of the
 * order the planner saw) may meet nothing else it touches, but a tile of
 * the run's shape read at the same element by the member writing over it
 * or one before it (the planner gives a value the storage of an operand
 * that dies there: the element is read before it is overwritten). Returns
 * -1, or where the run must end for that to hold (a shorter run may). */
static int run_tiles(Emitter *e, Run *r, bool ragged) {
  Spans *s = tpk_arena_alloc(&e->arena, sizeof *s);
  if (!s) return 0;
  s->n = 0;
  for (int i = 0; i < r->n; i++) {
    const TpkOp *op = r->op[i];
    r->tile[i] = false;
    if (r->kind[i] == RUN_STORE && !add_span(e, s, op->in[0], i, false, false)) return 0; /* scratch memory */
    if (r->kind[i] == RUN_HOIST && op->opcode == TPK_OP_LOAD && is_tile(&op->out[0]) && !load_always_view(e, op)) {
      int at = s->n;
      if (!add_span(e, s, &op->out[0], i, true, false)) return 0;
      if (s->n > at) s->s[at].pre = true;
    }
    if (r->kind[i] != RUN_MEMBER) continue;
    for (int j = 0; j < op->nin; j++)
      if (!add_reads(e, r, op->in[j], i, true, s)) return 0;
    r->tile[i] = read_outside(r, &op->out[0]);
    for (int k = i + 1; ragged && k < r->n; k++)
      r->tile[i] |= r->kind[k] == RUN_STORE && r->op[k]->in[r->op[k]->nin - 1] == &op->out[0];
    if (r->tile[i] && !add_span(e, s, &op->out[0], i, true, true)) return 0;
  }
  int cut = -1;
  for (int w = 0; w < s->n; w++)
    for (int k = 0; s->s[w].written && k < s->n; k++) {
      if (k == w || s->s[k].v == s->s[w].v || !(s->s[w].lo < s->s[k].hi && s->s[k].lo < s->s[w].hi)) continue;
      bool in_place = !s->s[w].pre && !s->s[k].written && s->s[k].same_index && s->s[k].by <= s->s[w].by &&
                      s->s[k].lo == s->s[w].lo && s->s[k].hi == s->s[w].hi;
      int later = s->s[k].by > s->s[w].by ? s->s[k].by : s->s[w].by;
      if (!in_place && (cut < 0 || later < cut)) cut = later;
    }
  return cut;
}

/* The run's loop: each member into its local (and its tile when tile[i]),
 * each store from its member's local to store_at[i] when given. */
static void emit_run_loop(Emitter *e, const Run *r, const char *const *store_at) {
  const TpkType *t = r->op[0]->out[0].type;
  const char *at[TPK_MAX_RANK];
  loop_vars(e, t->rank, at);
  Sz ts[TPK_MAX_RANK];
  strides(e, t, ts);
  const char *lin = linear(e, t->rank, ts, NULL);
  TpkPtrMap locals = {0};
  e->run_locals = &locals;
  for (int d = 0; d < t->rank; d++) {
    if (d == t->rank - 1) line(e, "#pragma GCC ivdep"); /* no element is written in one iteration and read in another */
    line(e, "for (int64_t i%d = 0; i%d < %s; i%d++) {", d, d, dim(e, t, d), d);
    e->indent++;
  }
  for (int i = 0; i < r->n && !e->failed; i++) {
    const TpkOp *op = r->op[i];
    if (r->kind[i] == RUN_MEMBER) {
      const char *x = element_of(e, op, at);
      if (!x) break;
      TpkDType dt = op->out[0].type->dtype;
      const char *local = tpk_arena_printf(&e->arena, "x%d", ++e->tmp);
      line(e, "%s %s = %s;", ctype(dt), local, narrow(e, dt, x));
      if (!local || !tpk_ptrmap_put(&locals, &op->out[0], (void *)local)) e->failed = true;
      if (r->tile[i]) line(e, "%s[%s] = %s;", name_of(e, &op->out[0]), lin, local);
    } else if (r->kind[i] == RUN_STORE && store_at[i]) {
      void *local = NULL;
      tpk_ptrmap_get(&locals, op->in[op->nin - 1], &local);
      line(e, "%s = %s;", store_at[i], local ? (const char *)local : "0");
    }
  }
  close_loops(e, t->rank);
  e->run_locals = NULL;
  tpk_ptrmap_free(&locals);
}

/* Emit the run starting at op in one loop (see above), or nothing and
 * false when op is emitted on its own. */
static bool emit_run(Emitter *e, const TpkOp *start) {
  Run *r = tpk_arena_alloc(&e->arena, sizeof *r);
  if (!r || !collect_run(start, r)) return false;
  const char **store_at = tpk_arena_alloc(&e->arena, sizeof *store_at * RUN_MAX);
  Access *acc = tpk_arena_alloc(&e->arena, sizeof *acc * RUN_MAX);
  if (!store_at || !acc) return false;
  const char *ragged;
  for (;;) {
    TpkStr cond = {0}; /* every store's block in range */
    for (int i = 0; i < r->n; i++) {
      store_at[i] = NULL;
      if (r->kind[i] != RUN_STORE) continue;
      const TpkOp *st = r->op[i];
      if (!access_of(e, st, tpk_op_index(st, "index"), st->in[0], 1, &acc[i])) return false;
      access_sizes(e, &acc[i], st->in[st->nin - 1]->type);
      const char *ok = in_range(e, &acc[i]);
      if (strcmp(ok, "1") != 0) tpk_str_printf(&cond, "%s(%s)", cond.len ? " && " : "", ok);
    }
    ragged = cond.len ? tpk_arena_strdup(&e->arena, cond.data) : NULL;
    tpk_str_free(&cond);
    int cut = run_tiles(e, r, ragged != NULL);
    if (cut < 0) break;
    if (!cut_run(r, cut)) return false;
  }
  /* from here on the run is emitted */
  for (int i = 0; i < r->n; i++) {
    if (!tpk_ptrmap_put(&e->run_done, r->op[i], NULL)) e->failed = true;
    if (r->kind[i] == RUN_HOIST) emit_op(e, r->op[i]);
    else if (r->kind[i] == RUN_MEMBER) source_comment(e, r->op[i]);
  }
  line(e, "/* one loop: %d element ops, their stores */", r->nmembers);
  for (int i = 0; i < r->n; i++) {
    if (r->kind[i] == RUN_MEMBER && r->tile[i]) def_tile(e, &r->op[i]->out[0]);
    if (r->kind[i] != RUN_STORE) continue;
    check_indices(e, &acc[i]);
    const char *valid;
    store_at[i] = tpk_arena_printf(&e->arena, "%s[%s]", acc[i].base, access_offset(e, &acc[i], &valid));
  }
  if (!ragged) {
    emit_run_loop(e, r, store_at);
    return true;
  }
  line(e, "if (%s) { /* in range: stored straight from the loop */", ragged);
  e->indent++;
  emit_run_loop(e, r, store_at);
  e->indent--;
  line(e, "} else {");
  e->indent++;
  const char *none[RUN_MAX] = {0};
  emit_run_loop(e, r, none);
  for (int i = 0; i < r->n; i++)
    if (r->kind[i] == RUN_STORE)
      block_copy(e, &acc[i], name_of(e, r->op[i]->in[r->op[i]->nin - 1]), r->op[i]->in[r->op[i]->nin - 1]->type, false,
                 NULL, false);
  e->indent--;
  line(e, "}");
  return true;
}

static void emit_op(Emitter *e, const TpkOp *op) {
  source_comment(e, op);
  if (tpk_op_is_fused(op)) return; /* computed inside its consumer's loop */
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  switch (op->opcode) {
  case TPK_OP_CONST: emit_const(e, op); return;
  case TPK_OP_SYM: {
    int k = symbol_index(e, tpk_op_str(op, "name", ""));
    line(e, "int32_t %s = (int32_t)syms[%d];", new_name(e, &op->out[0]), k < 0 ? 0 : k);
    return;
  }
  case TPK_OP_PROGRAM_ID:
  case TPK_OP_NUM_PROGRAMS: {
    int axis = (int)tpk_op_int(op, "axis", 0);
    if (!e->grid || axis >= e->grid->regions[0]->nargs) {
      fail(e, op, "%s outside a grid", info->name);
      return;
    }
    const char *x = op->opcode == TPK_OP_PROGRAM_ID
                        ? tpk_arena_printf(&e->arena, "(int32_t)(%s - %s)", name_of(e, e->grid->regions[0]->args[axis]), bound(e, e->grid->in[2 * axis]))
                        : tpk_arena_printf(&e->arena, "(int32_t)(%s - %s)", bound(e, e->grid->in[2 * axis + 1]), bound(e, e->grid->in[2 * axis]));
    line(e, "int32_t %s = %s;", new_name(e, &op->out[0]), x);
    return;
  }
  case TPK_OP_TILE_ID:
    line(e, "int32_t %s = (int32_t)%s;", new_name(e, &op->out[0]), name_of(e, op->in[0]));
    return;
  case TPK_OP_TILE_START:
    line(e, "int32_t %s = (int32_t)(%s * %" PRId64 ");", new_name(e, &op->out[0]), name_of(e, op->in[0]), tpk_tile_block(op->in[0]->type));
    return;
  case TPK_OP_TILE_OF: { /* a tile is its id; elements past the end are masked where it is used */
    const char *n = new_name(e, &op->out[0]);
    line(e, "int64_t %s = (int64_t)%s;", n, name_of(e, op->in[0]));
    line(e, "if (%s < 0) return tpk_fail(err, \"line %d: tile id %%lld is negative\", %s);", n, op->loc.line, n);
    return;
  }
  case TPK_OP_BROADCAST: emit_broadcast(e, op); return;
  case TPK_OP_RESHAPE: emit_reshape(e, op); return;
  case TPK_OP_TRANSPOSE: emit_transpose(e, op); return;
  case TPK_OP_IOTA: emit_iota(e, op); return;
  case TPK_OP_SLICE: emit_slice(e, op); return;
  case TPK_OP_CONCAT: emit_concat(e, op); return;
  case TPK_OP_BITCAST: emit_bitcast(e, op); return;
  case TPK_OP_REDUCE: emit_reduce(e, op); return;
  case TPK_OP_SCAN: emit_scan(e, op); return;
  case TPK_OP_DOT: emit_dot(e, op); return;
  case TPK_OP_GATHER: emit_gather(e, op); return;
  case TPK_OP_SCATTER: emit_scatter(e, op); return;
  case TPK_OP_LOAD:
    if (is_tile(&op->out[0])) emit_load(e, op);
    else emit_load_scalar(e, op);
    return;
  case TPK_OP_STORE: emit_store(e, op); return;
  case TPK_OP_ATOMIC: emit_atomic(e, op); return;
  case TPK_OP_ALLOC: {
    const char *n = new_name(e, &op->out[0]);
    const TpkPlanSlot *s = tpk_plan_slot(e->plan, &op->out[0]);
    const TpkType *t = op->out[0].type;
    line(e, "%s *%s = (%s *)(W + %s); /* scratch */", ctype(t->dtype), n, ctype(t->dtype), s ? slot_offset(e, s) : "0");
    line(e, "memset(%s, 0, %s);", n, byte_size(e, t));
    return;
  }
  case TPK_OP_DMA_START: emit_dma(e, op); return;
  case TPK_OP_DMA_WAIT: line(e, "/* wait: the copy finished when it started */"); return;
  case TPK_OP_DMA_SIGNAL: line(e, "/* the copy signals its semaphore: it finished when it started */"); return;
  case TPK_OP_DMA_WAIT_SEM: line(e, "/* wait on a semaphore: its copies finished when they started */"); return;
  case TPK_OP_GRID: emit_grid(e, op); return;
  case TPK_OP_FOR: emit_for(e, op); return;
  case TPK_OP_WHILE: emit_while(e, op); return;
  case TPK_OP_IF: emit_if(e, op); return;
  case TPK_OP_YIELD: return; /* handled by the op owning the region */
  case TPK_OP_RETURN:
  case TPK_OP_CALL:
    fail(e, op, "'%s' is not supported in host kernels yet", info->name);
    return;
  default:
    break;
  }
  if ((info->flags & TPK_OPF_ELEMENTWISE) || op->opcode == TPK_OP_SELECT || op->opcode == TPK_OP_CONVERT) {
    emit_elementwise(e, op);
    return;
  }
  fail(e, op, "internal: the C emitter does not handle '%s'", info->name);
}

static void emit_block(Emitter *e, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op && !e->failed; op = op->next) {
    if (tpk_ptrmap_get(&e->run_done, op, NULL)) continue; /* in a run's loop, or before it */
    if (op->nregion && !tpk_op_is_fused(op)) emit_packing(e, op);
    if (starts_dot(op)) continue; /* written by the dot */
    if (element_member(op) && emit_run(e, op)) continue;
    emit_op(e, op);
  }
}

/* Helpers every generated kernel may use; static, so kernels linked into one
 * object do not clash. */
static const char PRELUDE[] =
    "#include \"tpk_prims.h\"\n"
    "\n"
    "/* libm and libc, declared here so no system header is needed */\n"
    "float sqrtf(float); float fmaf(float, float, float);\n"
    "float powf(float, float); float fmodf(float, float); float fabsf(float); float floorf(float); float ceilf(float);\n"
    "float rintf(float);\n"
    "void *memcpy(void *, const void *, unsigned long); void *memset(void *, int, unsigned long);\n"
    "void *malloc(unsigned long); void free(void *);\n"
    "int snprintf(char *, unsigned long, const char *, ...);\n"
    "#ifndef INT32_MIN\n"
    "#define INT32_MIN (-2147483647 - 1)\n"
    "#define INT32_MAX 2147483647\n"
    "#endif\n"
    "#ifndef UINT32_MAX\n"
    "#define UINT32_MAX 4294967295u\n"
    "#endif\n"
    "\n"
    "/* Code built for any x86-64 (the ahead-of-time library) also gets an AVX2\n"
    " * version of each kernel (with FMA, x86-64-v3, where cc knows it: fmaf\n"
    " * is then an instruction), picked when the program loads on a CPU that\n"
    " * has it; the loops give the same bits either way (no reassociation, no\n"
    " * FMA contraction). The JIT's cc already targets this CPU. */\n"
    "#if defined(__GNUC__) && !defined(__TINYC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__)\n"
    "#if __GNUC__ >= 12\n"
    "#define TPK_KERNEL __attribute__((target_clones(\"arch=x86-64-v3\", \"default\")))\n"
    "#else\n"
    "#define TPK_KERNEL __attribute__((target_clones(\"avx2\", \"default\")))\n"
    "#endif\n"
    "#else\n"
    "#define TPK_KERNEL\n"
    "#endif\n"
    "\n"
    "/* A run-time error: the message goes to err, the kernel returns 1. */\n"
    "static int tpk_fail(char *err, const char *fmt, long long value) {\n"
    "  snprintf(err, 256, fmt, value);\n"
    "  return 1;\n"
    "}\n"
    "static int tpk_fail2(char *err, const char *fmt, long long a, long long b) {\n"
    "  snprintf(err, 256, fmt, a, b);\n"
    "  return 1;\n"
    "}\n"
    "/* sizes of kernels compiled for every shape (divisors are > 0) */\n"
    "static int64_t tpk_floordiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }\n"
    "static int64_t tpk_ceildiv(int64_t a, int64_t b) { return -tpk_floordiv(-a, b); }\n"
    "static int64_t tpk_align64(int64_t n) { return (n + 63) & ~(int64_t)63; }\n"
    "/* a packed gemm operand's place: 64-byte aligned (the workspace may not be) */\n"
    "static void *tpk_align64_ptr(char *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }\n"
    "static float tpk_bf16_f32(uint16_t h) { union { uint32_t u; float f; } c; c.u = (uint32_t)h << 16; return c.f; }\n"
    "static uint16_t tpk_f32_bf16(float f) {\n"
    "  union { uint32_t u; float f; } c; c.f = f;\n"
    "  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((c.u >> 16) | 0x40u); /* quiet NaN */\n"
    "  return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16); /* round to nearest even */\n"
    "}\n"
    "static float tpk_to_f32(const TpkPrims *p, int from, uint32_t bits) {\n"
    "  float r; uint16_t h = (uint16_t)bits; uint8_t b = (uint8_t)bits;\n"
    "  p->convert(from, TPK_PRIM_F32, from == TPK_PRIM_F16 ? (const void *)&h : (const void *)&b, &r, 1);\n"
    "  return r;\n"
    "}\n"
    "static uint32_t tpk_from_f32(const TpkPrims *p, int to, float f) {\n"
    "  uint16_t h = 0; uint8_t b = 0;\n"
    "  if (to == TPK_PRIM_F16) { p->convert(TPK_PRIM_F32, to, &f, &h, 1); return h; }\n"
    "  p->convert(TPK_PRIM_F32, to, &f, &b, 1); return b;\n"
    "}\n"
    "/* x^y, with the exponents ATen's pow kernel special-cases computed as it\n"
    " * does, and as ir/aten.c does for a constant exponent: an eager step's\n"
    " * exponent is a run-time scalar (RMSNorm's x ** 2), which should cost a\n"
    " * multiply, not powf. */\n"
    "static float tpk_powf(float x, float y) {\n"
    "  if (y == 2.0f) return x * x;\n"
    "  if (y == 1.0f) return x;\n"
    "  if (y == 3.0f) return x * x * x;\n"
    "  if (y == 0.5f) return sqrtf(x);\n"
    "  if (y == -0.5f) return 1.0f / sqrtf(x);\n"
    "  if (y == -1.0f) return 1.0f / x;\n"
    "  if (y == -2.0f) return 1.0f / (x * x);\n"
    "  if (y == 0.0f) return 1.0f;\n"
    "  return powf(x, y);\n"
    "}\n"
    "/* The instances [*lo, *hi) of a grid of n that this part runs: n split\n"
    " * into p->parts near-equal runs, the first n % parts one longer; or, when\n"
    " * the launch hands instances out (p->next_instance), the first one this\n"
    " * part takes, and tpk_next the ones after it, up to n. */\n"
    "static void tpk_share(const TpkPrims *p, int64_t n, int64_t *lo, int64_t *hi) {\n"
    "  if (p->parts > 1 && p->next_instance) { *lo = p->next_instance(p); *hi = n; return; }\n"
    "  int64_t parts = p->parts > 1 ? p->parts : 1, part = p->parts > 1 ? p->part : 0;\n"
    "  if (part < 0 || part >= parts) { *lo = *hi = 0; return; }\n"
    "  int64_t q = n / parts, r = n % parts;\n"
    "  *lo = part * q + (part < r ? part : r);\n"
    "  *hi = *lo + q + (part < r);\n"
    "}\n"
    "static int64_t tpk_next(const TpkPrims *p, int64_t q) {\n"
    "  return p->parts > 1 && p->next_instance ? p->next_instance(p) : q + 1;\n"
    "}\n"
    "/* exp, log, erf, tanh and sigmoid on f32 as the primitive library computes them\n"
    " * (host/prims_math.inc: the same operations in the same order), for scalars\n"
    " * and the elements of bf16/f16/f8 chains: the same bits as the unary\n"
    " * primitive on an f32 tile. Written lane by lane with no branches and no\n"
    " * calls cc cannot inline, so cc -O3 vectorises a loop using them (libm's\n"
    " * are a call per element); f32 tiles still call the primitive: fused\n"
    " * into chains they were slower, 16 lanes wide too, but for GELU's erf\n"
    " * (host/README.md). fmaf is one rounding in\n"
    " * both tiers (an instruction for cc with FMA, libm's correctly rounded\n"
    " * fmaf for tcc and other targets); an integer is rounded to by adding and\n"
    " * subtracting 1.5 * 2^23 (nearest even, |v| < 2^22). */\n"
    "/* always inlined where cc compiles code (a call would keep a loop from\n"
    " * being vectorised, and the library's FMA clone would call the baseline\n"
    " * copy, whose fmaf is libm's) */\n"
    "#if defined(__GNUC__) && !defined(__TINYC__)\n"
    "#define TPK_MATH static inline __attribute__((always_inline))\n"
    "#else\n"
    "#define TPK_MATH static inline\n"
    "#endif\n"
    "TPK_MATH float tpk_as_f(uint32_t u) { union { uint32_t u; float f; } c; c.u = u; return c.f; }\n"
    "TPK_MATH uint32_t tpk_as_u(float f) { union { uint32_t u; float f; } c; c.f = f; return c.u; }\n"
    "TPK_MATH float tpk_rint22(float v) { return (v + 12582912.0f) - 12582912.0f; }\n"
    "/* c ? a : b as a blend of bits: a `?:` whose arms compute would have cc\n"
    " * move the computing into a branch, which it then does not vectorise\n"
    " * (it does not evaluate an operation that may trap where C did not) */\n"
    "TPK_MATH float tpk_pick(int c, float a, float b) {\n"
    "  uint32_t m = 0u - (uint32_t)(c != 0);\n"
    "  return tpk_as_f((tpk_as_u(a) & m) | (tpk_as_u(b) & ~m));\n"
    "}\n"
    "TPK_MATH float tpk_minf(float a, float b) { return tpk_pick(a < b, a, b); } /* x86's minps: b when unordered */\n"
    "TPK_MATH float tpk_maxf(float a, float b) { return tpk_pick(a > b, a, b); }\n"
    "TPK_MATH float tpk_absf(float x) { return tpk_as_f(tpk_as_u(x) & 0x7fffffffu); }\n"
    "/* t with x's sign bit or-ed in (t >= 0) */\n"
    "TPK_MATH float tpk_signed(float t, float x) { return tpk_as_f(tpk_as_u(t) | (tpk_as_u(x) & 0x80000000u)); }\n"
    "/* p * 2^n, n integral in [-150, 128]: two exact scalings, one rounding */\n"
    "TPK_MATH float tpk_ldexp(float p, float n) {\n"
    "  int32_t m = (int32_t)(n + 150.0f);\n"
    "  int32_t m1 = (int32_t)((uint32_t)m >> 1), m2 = m - m1;\n"
    "  return p * tpk_as_f((uint32_t)(m1 + 52) << 23) * tpk_as_f((uint32_t)(m2 + 52) << 23);\n"
    "}\n"
    "/* e^x = p 2^n for x in [-104, 89] (Cody-Waite, Cephes expf polynomial) */\n"
    "TPK_MATH float tpk_exp_parts(float x, float *n_out) {\n"
    "  float n = tpk_rint22(x * 1.44269504088896341f);\n"
    "  float r = fmaf(n, -0.693359375f, x);\n"
    "  r = fmaf(n, 2.12194440e-4f, r);\n"
    "  float q = 1.9875691500e-4f;\n"
    "  q = fmaf(q, r, 1.3981999507e-3f);\n"
    "  q = fmaf(q, r, 8.3334519073e-3f);\n"
    "  q = fmaf(q, r, 4.1665795894e-2f);\n"
    "  q = fmaf(q, r, 1.6666665459e-1f);\n"
    "  q = fmaf(q, r, 5.0000001201e-1f);\n"
    "  float p = fmaf(q, r * r, r);\n"
    "  *n_out = n;\n"
    "  return p + 1.0f;\n"
    "}\n"
    "/* e^x for x > -87 (a normal result) */\n"
    "TPK_MATH float tpk_exp_normal(float x) {\n"
    "  float n, p = tpk_exp_parts(tpk_minf(x, 89.0f), &n);\n"
    "  return tpk_ldexp(p, n);\n"
    "}\n"
    "/* e^x for every x: a subnormal result is rounded from p 2^(n+149) as an\n"
    " * integer (its bits), so no operation underflows (an x86 microcode assist) */\n"
    "TPK_MATH float tpk_exp(float x) {\n"
    "  int live = x > -104.0f;\n"
    "  float n, p = tpk_exp_parts(tpk_minf(tpk_pick(live, x, 0.0f), 89.0f), &n);\n"
    "  int sub = n < -125.5f;\n"
    "  float normal = tpk_ldexp(p, tpk_pick(sub, 0.0f, n));\n"
    "  float k = tpk_pick(sub, n, -149.0f) + (149.0f + 127.0f);\n"
    "  float v = p * tpk_as_f((uint32_t)(int32_t)k << 23); /* < 2^24: at or past 2^23 already an integer */\n"
    "  float units = tpk_pick(v < 8388608.0f, (v + 8388608.0f) - 8388608.0f, v);\n"
    "  float y = tpk_pick(sub, tpk_as_f((uint32_t)(int32_t)units), normal);\n"
    "  y = tpk_pick(live, y, 0.0f);\n"
    "  return tpk_pick(x != x, x + x, y);\n"
    "}\n"
    "/* 1 / (1 + e) for e >= 0 as r (1 + d) */\n"
    "TPK_MATH float tpk_recip1p(float e, float *d_out) {\n"
    "  float t = 1.0f + e;\n"
    "  float lo = tpk_minf(e, 1.0f) - (t - tpk_maxf(e, 1.0f));\n"
    "  float r = 1.0f / t;\n"
    "  float d = fmaf(0.0f - r, t, 1.0f);\n"
    "  *d_out = fmaf(0.0f - r, lo, d);\n"
    "  return r;\n"
    "}\n"
    "TPK_MATH float tpk_tanh(float x) {\n"
    "  int isn = x != x;\n"
    "  float a = tpk_minf(tpk_absf(tpk_pick(isn, 0.0f, x)), 10.0f);\n"
    "  float z = a * a;\n"
    "  float s = 0.002153114f;\n"
    "  s = fmaf(s, z, -0.008190365f);\n"
    "  s = fmaf(s, z, 0.021706985f);\n"
    "  s = fmaf(s, z, -0.053948186f);\n"
    "  s = fmaf(s, z, 0.13333221f);\n"
    "  s = fmaf(s, z, -0.3333333f);\n"
    "  s = fmaf(a * z, s, a);\n"
    "  float d, r = tpk_recip1p(tpk_exp_normal(a + a), &d);\n"
    "  float big = fmaf(-2.0f, fmaf(r, d, r), 1.0f);\n"
    "  float t = tpk_signed(tpk_pick(a < 0.625f, s, big), x);\n"
    "  return tpk_pick(isn, x + x, t);\n"
    "}\n"
    "TPK_MATH float tpk_sigmoid(float x) {\n"
    "  int isn = x != x;\n"
    "  float xs = tpk_pick(isn, 0.0f, x);\n"
    "  float e = tpk_exp(0.0f - tpk_absf(xs));\n"
    "  float d, r = tpk_recip1p(e, &d);\n"
    "  float s = tpk_pick(xs < 0.0f, fmaf(e, r, (e * r) * d), fmaf(r, d, r));\n"
    "  return tpk_pick(isn, x + x, s);\n"
    "}\n"
    "TPK_MATH float tpk_erf(float x) {\n"
    "  int isn = x != x;\n"
    "  float a = tpk_minf(tpk_absf(tpk_pick(isn, 0.0f, x)), 4.0f);\n"
    "  float z = a * a;\n"
    "  float p = 7.806903e-05f;\n"
    "  p = fmaf(p, z, -0.0007997853f);\n"
    "  p = fmaf(p, z, 0.005187162f);\n"
    "  p = fmaf(p, z, -0.026853347f);\n"
    "  p = fmaf(p, z, 0.11283579f);\n"
    "  p = fmaf(p, z, -0.37612626f);\n"
    "  p = fmaf(p, z, 0.12837917f);\n"
    "  p = fmaf(a, p, a);\n"
    "  float u = a - 2.5f;\n"
    "  float q = -2.8346927e-05f;\n"
    "  q = fmaf(q, u, -5.968381e-05f);\n"
    "  q = fmaf(q, u, -0.00013984207f);\n"
    "  q = fmaf(q, u, 0.00022147615f);\n"
    "  q = fmaf(q, u, -0.00064755423f);\n"
    "  q = fmaf(q, u, 0.0025234525f);\n"
    "  q = fmaf(q, u, -0.007999201f);\n"
    "  q = fmaf(q, u, 0.024929399f);\n"
    "  q = fmaf(q, u, -0.0743495f);\n"
    "  q = fmaf(q, u, 0.21080633f);\n"
    "  float dz = fmaf(a, a, 0.0f - z); /* a^2 - z, exact */\n"
    "  float e = tpk_exp_normal(0.0f - z);\n"
    "  e = fmaf(0.0f - e, dz, e);\n"
    "  float big = fmaf(0.0f - e, q, 1.0f);\n"
    "  float t = tpk_signed(tpk_pick(a < 1.0f, p, big), x);\n"
    "  return tpk_pick(isn, x + x, t);\n"
    "}\n"
    "/* log: x = 2^e m, m folded into [sqrt(1/2), sqrt(2)), Cephes logf polynomial */\n"
    "TPK_MATH float tpk_log(float x) {\n"
    "  int ok = (x > 0.0f) & (x < tpk_as_f(0x7f800000u));\n"
    "  float xs = tpk_pick(ok, x, 1.0f);\n"
    "  int sub = xs < 1.17549435e-38f;\n"
    "  xs = tpk_pick(sub, xs * 8388608.0f, xs);\n"
    "  uint32_t b = tpk_as_u(xs);\n"
    "  float e = (float)(int32_t)(b >> 23) - 126.0f;\n"
    "  e = e - tpk_pick(sub, 23.0f, 0.0f);\n"
    "  float m = tpk_as_f((b & 0x007fffffu) | 0x3f000000u);\n"
    "  int lo = m < 0.707106781186547524f;\n"
    "  e = e - tpk_pick(lo, 1.0f, 0.0f);\n"
    "  float f = tpk_pick(lo, m + m, m) - 1.0f;\n"
    "  float z = f * f;\n"
    "  float y = 7.0376836292e-2f;\n"
    "  y = fmaf(y, f, -1.1514610310e-1f);\n"
    "  y = fmaf(y, f, 1.1676998740e-1f);\n"
    "  y = fmaf(y, f, -1.2420140846e-1f);\n"
    "  y = fmaf(y, f, 1.4249322787e-1f);\n"
    "  y = fmaf(y, f, -1.6668057665e-1f);\n"
    "  y = fmaf(y, f, 2.0000714765e-1f);\n"
    "  y = fmaf(y, f, -2.4999993993e-1f);\n"
    "  y = fmaf(y, f, 3.3333331174e-1f);\n"
    "  y = (y * f) * z;\n"
    "  y = fmaf(e, -2.12194440e-4f, y);\n"
    "  y = fmaf(z, -0.5f, y);\n"
    "  float res = fmaf(e, 0.693359375f, f + y);\n"
    "  res = tpk_pick(x == 0.0f, tpk_as_f(0xff800000u), res);\n"
    "  res = tpk_pick(x < 0.0f, tpk_as_f(0x7fc00000u), res);\n"
    "  res = tpk_pick(x == tpk_as_f(0x7f800000u), x, res);\n"
    "  return tpk_pick(x != x, x + x, res);\n"
    "}\n"
    "/* tcc inlines nothing: the helpers above cost ~80 calls an element (erf:\n"
    " * 200 ns). In a kernel tcc built they are the primitive's one-element\n"
    " * form instead, the same bits from code cc built (~20 ns); the table p is\n"
    " * every kernel's first parameter. */\n"
    "#ifdef __TINYC__\n"
    "#define tpk_exp(x) p->unary1_f32(TPK_PRIM_EXP, (x))\n"
    "#define tpk_log(x) p->unary1_f32(TPK_PRIM_LOG, (x))\n"
    "#define tpk_tanh(x) p->unary1_f32(TPK_PRIM_TANH, (x))\n"
    "#define tpk_sigmoid(x) p->unary1_f32(TPK_PRIM_SIGMOID, (x))\n"
    "#define tpk_erf(x) p->unary1_f32(TPK_PRIM_ERF, (x))\n"
    "#endif\n"
    "/* select: both values evaluated, so compilers may blend vectors of them\n"
    " * (`c ? t[i] : 0` with a conditional load does not vectorize) */\n"
    "#ifdef __TINYC__\n"
    "#define tpk_select_f(c, a, b) ((c) ? (a) : (b))\n"
    "#define tpk_select_i(c, a, b) ((c) ? (a) : (b))\n"
    "#else\n"
    "static inline float tpk_select_f(int c, float a, float b) { return c ? a : b; }\n"
    "static inline int32_t tpk_select_i(int c, int32_t a, int32_t b) { return c ? a : b; }\n"
    "#endif\n"
    "static inline uint32_t tpk_select_u(int c, uint32_t a, uint32_t b) { return c ? a : b; }\n"
    "/* shifts by a count outside [0, 32) give 0, or -1 for a negative value shifted right; narrower\n"
    " * integers live sign- or zero-extended in 32 bits, so their store wraps the rest */\n"
    "static inline int32_t tpk_shl_i(int32_t a, int32_t b) { return b < 0 || b >= 32 ? 0 : (int32_t)((uint32_t)a << b); }\n"
    "static inline int32_t tpk_shr_i(int32_t a, int32_t b) {\n"
    "  if (b < 0 || b >= 32) return a < 0 ? -1 : 0;\n"
    "  return a < 0 ? ~(~a >> b) : a >> b;\n"
    "}\n"
    "static inline int32_t tpk_mulhi_i(int32_t a, int32_t b, int bits) {\n"
    "  int64_t p = (int64_t)a * b;\n"
    "  return (int32_t)(p < 0 ? ~(~p >> bits) : p >> bits);\n"
    "}\n"
    "static inline uint32_t tpk_shl_u(uint32_t a, uint32_t b) { return b >= 32 ? 0 : a << b; }\n"
    "static inline uint32_t tpk_shr_u(uint32_t a, uint32_t b) { return b >= 32 ? 0 : a >> b; }\n"
    "static uint32_t tpk_udiv(uint32_t a, uint32_t b, int *bad) { if (b == 0) { *bad = 1; return 0; } return a / b; }\n"
    "static uint32_t tpk_urem(uint32_t a, uint32_t b, int *bad) { if (b == 0) { *bad = 1; return 0; } return a % b; }\n"
    "static uint32_t tpk_ucdiv(uint32_t a, uint32_t b, int *bad) {\n"
    "  if (b == 0) { *bad = 1; return 0; }\n"
    "  return a / b + (a % b != 0);\n"
    "}\n"
    "static float tpk_fmax(float a, float b) { return a != a || b != b ? a + b : a > b ? a : b; }\n"
    "static float tpk_fmin(float a, float b) { return a != a || b != b ? a + b : a < b ? a : b; }\n"
    "static int32_t tpk_idiv(int32_t a, int32_t b, int *bad) {\n"
    "  if (b == 0) { *bad = 1; return 0; }\n"
    "  if (b == -1) return (int32_t)(0u - (uint32_t)a);\n"
    "  return a / b;\n"
    "}\n"
    "static int32_t tpk_irem(int32_t a, int32_t b, int *bad) {\n"
    "  if (b == 0) { *bad = 1; return 0; }\n"
    "  if (b == -1) return 0;\n"
    "  return a % b;\n"
    "}\n"
    "static int32_t tpk_icdiv(int32_t a, int32_t b, int *bad) {\n"
    "  int32_t q = tpk_idiv(a, b, bad);\n"
    "  if (b != 0 && b != -1 && a % b != 0 && ((a < 0) == (b < 0))) q++;\n"
    "  return q;\n"
    "}\n";

/* ---- sharing the grid among threads --------------------------------------------------------- */

/* Memory outside the workspace: a kernel parameter (HBM). Scratch lives in
 * the workspace, which every part of a launch has its own copy of. */
static bool is_param_memory(const TpkValue *v) {
  return v->type->kind == TPK_TYPE_REF && !(v->def && v->def->opcode == TPK_OP_ALLOC);
}

static const TpkParam *param_of(const TpkFunc *f, const TpkValue *v) {
  for (int i = 0; i < f->nparams; i++)
    if (f->params[i].value == v) return &f->params[i];
  return NULL;
}

/* The memory op writes (a store's or a copy's destination), or NULL. */
static const TpkValue *written_memory(const TpkOp *op) {
  if (op->opcode == TPK_OP_STORE || op->opcode == TPK_OP_ATOMIC) return op->in[0];
  if (op->opcode == TPK_OP_DMA_START) {
    int nsrc = tpk_index_operands(tpk_op_index(op, "src_index"));
    return 1 + nsrc < op->nin ? op->in[1 + nsrc] : NULL;
  }
  return NULL;
}

/* Does v depend on data read from memory (a loaded index, directly or
 * through arithmetic)? Conservative: values carried by loops, and chains
 * deeper than `depth`, count as data. */
static bool from_data(const TpkValue *v, int depth) {
  if (depth <= 0) return true;
  const TpkOp *d = v->def;
  if (!d) { /* a block argument */
    const TpkOp *owner = v->block ? v->block->parent : NULL;
    if (!owner || owner->opcode == TPK_OP_GRID) return false; /* parameters, grid indices */
    if (owner->opcode != TPK_OP_FOR || v->index != 0) return true;
    return from_data(owner->in[0], depth - 1) || from_data(owner->in[1], depth - 1); /* a loop index: its bounds */
  }
  if (d->opcode == TPK_OP_LOAD || d->opcode == TPK_OP_GATHER || d->nregion) return true;
  for (int i = 0; i < d->nin; i++)
    if (from_data(d->in[i], depth - 1)) return true;
  return false;
}

/* What op and the ops of its regions do to kernel parameters. */
typedef struct Effects {
  bool writes;        /* stores or copies into a parameter */
  bool adds;          /* `+=` stores into a parameter: duplicates accumulate in instance order */
  bool data_placed;   /* a write whose position comes from data: instances may collide */
  bool reads_outputs; /* reads an output or inout parameter */
} Effects;

static void effects_of(const TpkFunc *f, const TpkOp *op, Effects *fx) {
  const TpkValue *w = written_memory(op);
  if (w && is_param_memory(w)) {
    fx->writes = true;
    if ((op->opcode == TPK_OP_STORE && tpk_op_store_mode(op) == TPK_STORE_ADD) || op->opcode == TPK_OP_ATOMIC)
      fx->adds = true;
    /* the operands after the destination are its indices (and a store's value, or a copy's length, last) */
    bool valued = op->opcode == TPK_OP_STORE || op->opcode == TPK_OP_ATOMIC;
    int first = valued ? 1 : 0, end = valued ? op->nin - 1 : op->nin - (tpk_dma_length(op) != NULL);
    for (int i = first; i < end; i++)
      if (op->in[i] != w && op->in[i]->type->kind != TPK_TYPE_REF && from_data(op->in[i], 32)) fx->data_placed = true;
  }
  for (int i = 0; i < op->nin; i++) {
    const TpkParam *prm = op->in[i] != w ? param_of(f, op->in[i]) : NULL;
    if (prm && prm->role != TPK_PARAM_IN && prm->value->type->kind == TPK_TYPE_REF) fx->reads_outputs = true;
  }
  for (int r = 0; r < op->nregion; r++)
    for (const TpkOp *o = op->regions[r]->first; o; o = o->next) effects_of(f, o, fx);
}

/* Where the `+=` stores of a grid write, per parameter: the dimension each
 * grid variable indexes, and how (NULL: as it is; else the n of a
 * `var * n + r` index). */
typedef struct AddPlaces {
  int n;
  const TpkValue *param[16];
  signed char dim[16][8];
  const TpkValue *stride[16][8];
} AddPlaces;

/* Is v the same in every instance of a grid (built from constants, shape
 * sizes and parameters: no grid variable, loop value or loaded data)? */
static bool grid_invariant(const TpkValue *v, int depth) {
  if (depth <= 0) return false;
  const TpkOp *d = v->def;
  if (!d) return !(v->block && v->block->parent); /* a kernel parameter; not a grid or loop variable */
  if (d->opcode == TPK_OP_LOAD || d->opcode == TPK_OP_GATHER || d->nregion) return false;
  for (int i = 0; i < d->nin; i++)
    if (!grid_invariant(d->in[i], depth - 1)) return false;
  return true;
}

/* Is r the index of a loop over [lo, hi) with 0 <= lo and hi <= n? */
static bool index_below(const TpkValue *r, const TpkValue *n) {
  const TpkOp *loop = !r->def && r->block ? r->block->parent : NULL;
  if (!loop || loop->opcode != TPK_OP_FOR || r->index != 0 || r->type->kind == TPK_TYPE_TILE) return false;
  int64_t lo, hi, nv;
  if (!tpk_value_const_int(loop->in[0], &lo) || lo < 0) return false;
  return loop->in[1] == n || (tpk_value_const_int(loop->in[1], &hi) && tpk_value_const_int(n, &nv) && hi <= nv);
}

/* Does index idx give each value of the grid variable gv places of its
 * own: gv as it is (*stride = NULL), or gv * n + r with n the same in
 * every instance and r in [0, n) (*stride = n: grouped heads,
 * `h = hk * group + g` with g in 0..group)? */
static bool indexes_own(const TpkValue *idx, const TpkValue *gv, const TpkValue **stride) {
  *stride = NULL;
  if (idx == gv) return true;
  const TpkOp *add = idx->def;
  if (!add || add->opcode != TPK_OP_ADD) return false;
  for (int a = 0; a < 2; a++) {
    const TpkOp *mul = add->in[a]->def;
    if (!mul || mul->opcode != TPK_OP_MUL) continue;
    for (int m = 0; m < 2; m++) {
      const TpkValue *n = mul->in[1 - m];
      if (mul->in[m] == gv && grid_invariant(n, 16) && index_below(add->in[1 - a], n)) {
        *stride = n;
        return true;
      }
    }
  }
  return false;
}

/* Does every `+=` store under op write where only its own instance
 * writes? So it does when each of the grid's variables indexes one of the
 * store's dimensions as it is (the instance's tile or index: distinct
 * instances, disjoint blocks), or as `var * n + r` with r in [0, n) (disjoint
 * runs of n), and every add into that parameter uses the same dimensions
 * the same way (y[i, j] += beside y[j, i] += would collide). An atomic,
 * or an add into a view of a parameter, is never its own. */
static bool adds_own_places(const TpkFunc *f, const TpkOp *grid, const TpkOp *op, AddPlaces *ap) {
  const TpkBlock *g = grid->regions[0];
  if (op->opcode == TPK_OP_ATOMIC) return false;
  if (op->opcode == TPK_OP_STORE && tpk_op_store_mode(op) == TPK_STORE_ADD && is_param_memory(op->in[0])) {
    const TpkValue *w = op->in[0];
    if (!param_of(f, w) || g->nargs > 8) return false;
    signed char dim[8];
    const TpkValue *stride[8];
    for (int a = 0; a < g->nargs; a++) {
      dim[a] = -1;
      for (int i = 1; i < op->nin - 1 && dim[a] < 0; i++)
        if (indexes_own(op->in[i], g->args[a], &stride[a])) dim[a] = (signed char)(i - 1);
      if (dim[a] < 0) return false;
    }
    int k = 0;
    while (k < ap->n && ap->param[k] != w) k++;
    if (k == ap->n) {
      if (ap->n == 16) return false;
      ap->param[ap->n++] = w;
      memcpy(ap->dim[k], dim, sizeof dim);
      memcpy(ap->stride[k], stride, sizeof stride);
    } else if (memcmp(ap->dim[k], dim, (size_t)g->nargs) != 0 ||
               memcmp(ap->stride[k], stride, (size_t)g->nargs * sizeof stride[0]) != 0) {
      return false;
    }
  }
  for (int r = 0; r < op->nregion; r++)
    for (const TpkOp *o = op->regions[r]->first; o; o = o->next)
      if (!adds_own_places(f, grid, o, ap)) return false;
  return true;
}

const TpkOp *tpk_split_grid(const TpkFunc *f) {
  const TpkOp *grid = NULL;
  for (const TpkOp *op = f->body->first; op; op = op->next) {
    Effects fx = {false, false, false, false};
    effects_of(f, op, &fx);
    if (op->opcode == TPK_OP_GRID) {
      /* two grids need a barrier; sums into places several instances
       * write need one order; writes placed by data may collide (a
       * contract violation, but one the sequential order makes
       * deterministic) */
      AddPlaces ap = {0};
      if (grid || fx.data_placed || (fx.adds && !adds_own_places(f, op, op, &ap))) return NULL;
      grid = op;
      continue;
    }
    /* every part runs the ops around the grid: they must not write, and the
     * ones before it must not read what the grid writes */
    if (fx.writes || (!grid && fx.reads_outputs)) return NULL;
  }
  return grid;
}

int64_t tpk_grid_instances(const TpkOp *grid) {
  int64_t n = 1;
  for (int i = 0; i + 1 < grid->nin; i += 2) {
    const TpkOp *lo = grid->in[i]->def, *hi = grid->in[i + 1]->def;
    if (!lo || !hi || lo->opcode != TPK_OP_CONST || hi->opcode != TPK_OP_CONST) return -1;
    int64_t d = tpk_op_int(hi, "value", 0) - tpk_op_int(lo, "value", 0);
    n *= d > 0 ? d : 0;
  }
  return n;
}

/* <entry>_workspace(syms): the workspace bytes a launch needs. With
 * symbolic sizes, <entry>_layout places the storage groups one after
 * another, 64-byte aligned, and returns the total. */
static void emit_layout(Emitter *e, const char *entry) {
  const TpkPlan *plan = e->plan;
  if (!plan->symbolic) {
    find_packed_operands(e, sz_int(e, (plan->workspace_bytes + 63) / 64 * 64));
    tpk_str_printf(e->out, "\nint64_t %s_workspace(const int64_t *syms) {\n  (void)syms;\n  return %s;\n}\n", entry,
                   e->npacked ? sz_add(e, sz_int(e, (plan->workspace_bytes + 63) / 64 * 64), e->packed_bytes)
                              : sz_int(e, plan->workspace_bytes));
    return;
  }
  find_packed_operands(e, tpk_arena_printf(&e->arena, "wo[%d]", plan->ngroups));
  tpk_str_printf(e->out, "\nstatic int64_t %s_layout(const int64_t *syms, int64_t *wo) {\n  (void)syms;\n  wo[0] = 0;\n",
                 entry);
  for (int g = 0; g < plan->ngroups; g++)
    tpk_str_printf(e->out, "  wo[%d] = wo[%d] + tpk_align64(%s);\n", g + 1, g, sz_dim(e, plan->group_bytes[g]));
  tpk_str_printf(e->out, "  return %s;\n}\n", sz_add(e, tpk_arena_printf(&e->arena, "wo[%d]", plan->ngroups), e->packed_bytes));
  tpk_str_printf(e->out, "\nint64_t %s_workspace(const int64_t *syms) {\n  int64_t wo[%d];\n  return %s_layout(syms, wo);\n}\n",
                 entry, plan->ngroups + 1, entry);
}

TpkStatus tpk_emit_c(const TpkFunc *f, const TpkPlan *plan, const char *entry, const char *source, unsigned flags,
                     TpkStr *out, TpkError *err) {
  Emitter e = {.f = f, .plan = plan, .out = out, .err = err, .source = source};
  tpk_arena_init(&e.arena, 0);
  if (plan->symbolic)
    tpk_str_printf(out, "/* %s: generated by tpk from kernel '%s' for every shape */\n", entry, f->name);
  else
    tpk_str_printf(out, "/* %s: generated by tpk from kernel '%s'; workspace %" PRId64 " bytes */\n", entry, f->name,
                   plan->workspace_bytes);
  if (!(flags & TPK_EMIT_NO_PRELUDE)) tpk_str_puts(out, PRELUDE);
  emit_layout(&e, entry);
  tpk_str_printf(out, "\nTPK_KERNEL int %s(const TpkPrims *p, void *const *args, const int64_t *syms, void *ws, char *err) {\n",
                 entry);
  e.indent = 1;
  e.split = tpk_split_grid(f);
  if (!e.split) line(&e, "if (p->parts > 1 && p->part != 0) return 0; /* part 0 runs everything: the grid is not shared */");
  line(&e, "char *W = (char *)ws;");
  line(&e, "(void)p; (void)syms; (void)W; (void)err;");
  if (plan->symbolic) {
    line(&e, "int64_t wo[%d];", plan->ngroups + 1);
    line(&e, "%s_layout(syms, wo);", entry);
  }
  for (int i = 0; i < f->nparams; i++) {
    const TpkValue *v = f->params[i].value;
    const char *n = new_name(&e, v);
    if (v->type->kind == TPK_TYPE_REF)
      line(&e, "%s *%s = (%s *)args[%d]; /* %s */", ctype(v->type->dtype), n, ctype(v->type->dtype), i,
           f->params[i].role == TPK_PARAM_IN ? "input" : f->params[i].role == TPK_PARAM_OUT ? "output" : "inout");
    else
      line(&e, "%s %s = *(const %s *)args[%d]; /* scalar */", ctype(v->type->dtype), n, ctype(v->type->dtype), i);
  }
  emit_block(&e, f->body);
  line(&e, "return 0;");
  tpk_str_puts(out, "}\n");
  tpk_ptrmap_free(&e.names);
  tpk_ptrmap_free(&e.run_done);
  tpk_ptrmap_free(&e.store_views);
  tpk_arena_free(&e.arena);
  if (out->failed && !e.failed) return tpk_error(err, TPK_ERR_NOMEM, "out of memory emitting '%s'", f->name);
  return e.failed ? (err ? err->code : TPK_ERR_INTERNAL) : TPK_OK;
}
