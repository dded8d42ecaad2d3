/*
 * aten.c — the graph builder's vocabulary: ATen ops, as ATen names them,
 * expanded into whole-array IR ops (graph.h).
 *
 * One table row per ATen overload (OVERLOADS at the end): its packet and
 * overload name and its arguments written as ATen's schema writes them
 * ("Tensor self, Tensor other, *, Scalar alpha=1"), so names, kinds,
 * defaults and keyword-only arguments are ATen's. An op is looked up by
 * packet ("add", "aten::add.Tensor" and "aten.add.Tensor" name it too); the
 * overload is the first of its packet whose schema the arguments fit (by
 * kind: a tensor, a number, a list...), or the one named. Each row's expand
 * function then checks what kinds cannot say (shapes, dtypes, ranges) and
 * builds the IR.
 *
 * What follows ATen, and where it is written:
 *   - dtypes: result_dtype() is ATen's type promotion: tensors of rank >= 1
 *     decide within a category (bool < integer < float), rank-0 tensors and
 *     then Scalar arguments only when their category is higher, and then as
 *     the default dtype (f32) for a float number, i32 for an int. tpk has no
 *     int64: ATen's int64 results (sums of ints, arange, indices) are i32.
 *     Comparisons give bool; true division, and float functions (exp, ...)
 *     of integers, give f32; `dtype=` arguments are honoured.
 *   - shapes: broadcasting as NumPy and ATen; sizes are dims of the module,
 *     so symbolic sizes go through every rule (view's -1 is found by
 *     dividing products of dims, dims_exact_div()).
 *   - arithmetic of f16/bf16 with a Scalar, and composite ops (softmax,
 *     layer norm, GELU, ...), compute in f32 and round once at the end, as
 *     ATen's CPU kernels compute in their `opmath` type; a single op on
 *     reduced floats is computed as the IR defines it (in f32, rounded).
 *   - views are reshape / transpose / broadcast / slice ops; an op that
 *     changes nothing (alias, clone, a view to the same shape) gives its
 *     operand back.
 *   - in-place ops (add_, mul_, ...) are their functional op whose result
 *     must keep self's shape and be castable to self's dtype (ATen's rules);
 *     the graph is SSA, so the caller rebinds self to the result.
 * Where the IR has no op (argmax, round, remainder, ...) the row expands
 * into ops it has. SDPA calls the standard flash-attention kernels.
 */
#include "ir/aten.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Calls: one ATen op being built ----------------------------------------- */

typedef enum Kind {
  K_TENSOR,  /* Tensor */
  K_TENSORS, /* Tensor[] */
  K_SCALAR,  /* Scalar: a number or a rank-0 value */
  K_INT,     /* int */
  K_SYMINT,  /* SymInt: an int or a symbolic size */
  K_INTS,    /* int[] (a single int too, as int[1]) */
  K_SYMINTS, /* SymInt[] */
  K_FLOAT,
  K_BOOL,
  K_BOOLS,   /* bool[3], given as INTS of 0/1 */
  K_STR,
  K_DTYPE,   /* ScalarType */
  K_ANY      /* Layout, Device, MemoryFormat: accepted and ignored */
} Kind;

enum { MAX_PARAMS = 12, MAX_OUTS = 8, MAX_LIST = 64 };

typedef struct Param {
  char name[32];
  Kind kind;
  bool optional; /* `?`: None is allowed */
  bool kwonly;   /* after `*` */
  char dflt[24]; /* the default's text, "" when there is none */
} Param;

typedef struct Overload Overload;
typedef struct Call Call;
typedef void (*Expand)(Call *c);

struct Call {
  TpkGraphBuilder *gb;
  TpkModule *m;
  TpkBuilder *b;
  const Overload *ov;
  int nparams;
  Param params[MAX_PARAMS];
  const TpkArg *arg[MAX_PARAMS]; /* bound: the caller's, or dflt[i]; NULL when not given */
  TpkArg dflt[MAX_PARAMS];
  TpkValue *const *values;
  int nvalues;
  TpkError *err;
  bool failed;
  TpkValue *outs[MAX_OUTS];
  int nouts;
  TpkArena scratch; /* texts for messages */
};

struct Overload {
  const char *packet; /* "add" */
  const char *name;   /* "Tensor" ("default" for ATen's unnamed overload) */
  const char *schema; /* ATen's arguments, as its schema writes them */
  Expand expand;
  unsigned flags;
};

enum { INPLACE = 1 }; /* add_: the result replaces self (its shape, castable to its dtype) */

static void *fail(Call *c, TpkStatus code, const char *fmt, ...) TPK_PRINTF(3, 4);
static void *fail(Call *c, TpkStatus code, const char *fmt, ...) {
  if (c->failed) return NULL;
  c->failed = true;
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tpk_error(c->err, code, "%s: %s", c->ov->packet, msg);
  return NULL;
}

#define INVALID(c, ...) fail(c, TPK_ERR_INVALID, __VA_ARGS__)
#define UNSUPPORTED(c, ...) fail(c, TPK_ERR_UNSUPPORTED, __VA_ARGS__)
static void *nomem(Call *c) { return fail(c, TPK_ERR_NOMEM, "out of memory"); }

/* "f32[4,B]": a value's type, for messages (lives as long as the call). */
static const char *ty(Call *c, const TpkValue *v) {
  if (!v) return "None";
  char buf[200];
  const char *s = tpk_arena_strdup(&c->scratch, tpk_gb_type_text(v->type, buf, sizeof buf));
  return s ? s : "?";
}

static const char *shape_text(Call *c, int rank, const TpkDim *const *dims) {
  TpkStr s = {0};
  tpk_shape_print(&s, rank, dims);
  const char *r = s.data ? tpk_arena_strdup(&c->scratch, s.data) : NULL;
  tpk_str_free(&s);
  return r ? r : "?";
}

static const char *dim_text(Call *c, const TpkDim *d) {
  TpkStr s = {0};
  tpk_dim_print(&s, d);
  const char *r = s.data ? tpk_arena_strdup(&c->scratch, s.data) : NULL;
  tpk_str_free(&s);
  return r ? r : "?";
}

static const char *dt_name(TpkDType d) { return tpk_dtype_name(d); }
static TpkDType dt_of(const TpkValue *v) { return v->type->dtype; }
static int rank_of(const TpkValue *v) { return v->type->rank; }
static bool is_float(TpkDType d) { return tpk_dtype_is_float(d); }
static bool is_f8(TpkDType d) { return d == TPK_F8E4M3 || d == TPK_F8E5M2; }
/* The dtype ATen computes a float op in: f32 for the reduced floats. */
static TpkDType opmath(TpkDType d) { return is_float(d) ? TPK_F32 : d; }

static bool dim_is(const TpkDim *d, int64_t v) {
  int64_t x;
  return tpk_dim_is_const(d, &x) && x == v;
}

/* ---- Arguments ---------------------------------------------------------------- */

static const char *kind_name(Kind k) {
  static const char *const NAMES[] = {"a tensor", "a list of tensors", "a Scalar (a number or a rank-0 tensor)",
                                      "an int", "an int or a symbolic size", "a list of ints",
                                      "a list of sizes", "a float", "a bool", "a list of bools",
                                      "a string", "a dtype", "anything"};
  return NAMES[k];
}

static const char *arg_kind_name(const TpkArg *a) {
  switch (a->kind) {
  case TPK_ARG_NONE: return "None";
  case TPK_ARG_VALUE: return "a tensor";
  case TPK_ARG_VALUES: return "a list of tensors";
  case TPK_ARG_INT: return a->sym ? "a symbolic size" : "an int";
  case TPK_ARG_FLOAT: return "a float";
  case TPK_ARG_BOOL: return "a bool";
  case TPK_ARG_INTS: return "a list of ints";
  case TPK_ARG_DTYPE: return "a dtype";
  case TPK_ARG_STR: return "a string";
  }
  return "an argument of unknown kind";
}

/* ATen's "Tensor? weight=None" into p; false for a schema this file does not
 * know (a bug in the table, reported as internal). */
static bool parse_param(const char *s, size_t n, bool kwonly, Param *p) {
  memset(p, 0, sizeof *p);
  p->kwonly = kwonly;
  const char *sp = memchr(s, ' ', n);
  if (!sp) return false;
  char type[32];
  size_t tl = (size_t)(sp - s);
  if (tl >= sizeof type) return false;
  memcpy(type, s, tl);
  type[tl] = 0;
  if (tl && type[tl - 1] == '?') {
    p->optional = true;
    type[--tl] = 0;
  }
  const char *name = sp + 1, *eq = memchr(name, '=', n - (size_t)(name - s));
  size_t nl = (size_t)((eq ? eq : s + n) - name);
  if (nl == 0 || nl >= sizeof p->name) return false;
  memcpy(p->name, name, nl);
  if (eq) {
    size_t dl = n - (size_t)(eq + 1 - s);
    if (dl == 0 || dl >= sizeof p->dflt) return false;
    memcpy(p->dflt, eq + 1, dl);
  }
  static const struct {
    const char *type;
    Kind kind;
  } TYPES[] = {{"Tensor", K_TENSOR},   {"Tensor[]", K_TENSORS}, {"Scalar", K_SCALAR},   {"int", K_INT},
               {"SymInt", K_SYMINT},   {"int[]", K_INTS},       {"int[1]", K_INTS},     {"SymInt[]", K_SYMINTS},
               {"float", K_FLOAT},     {"bool", K_BOOL},        {"bool[3]", K_BOOLS},   {"str", K_STR},
               {"ScalarType", K_DTYPE}, {"Layout", K_ANY},      {"Device", K_ANY},      {"MemoryFormat", K_ANY}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(TYPES); i++)
    if (strcmp(type, TYPES[i].type) == 0) {
      p->kind = TYPES[i].kind;
      return true;
    }
  return false;
}

static bool parse_schema(const char *schema, Param *ps, int *n) {
  *n = 0;
  bool kwonly = false;
  for (const char *s = schema; *s;) {
    const char *end = strstr(s, ", ");
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len == 1 && *s == '*') {
      kwonly = true;
    } else {
      if (*n == MAX_PARAMS || !parse_param(s, len, kwonly, &ps[*n])) return false;
      (*n)++;
    }
    s += len;
    if (end) s += 2;
  }
  return true;
}

/* The default's text as an argument ("None", "True", "[]", "\"none\"", "0.", "-1"). */
static bool default_arg(Param *p, TpkArg *a) {
  char *d = p->dflt;
  memset(a, 0, sizeof *a);
  a->name = p->name;
  if (strcmp(d, "None") == 0) {
    a->kind = TPK_ARG_NONE;
  } else if (strcmp(d, "True") == 0 || strcmp(d, "False") == 0) {
    a->kind = TPK_ARG_BOOL;
    a->i = d[0] == 'T';
  } else if (strcmp(d, "[]") == 0) {
    a->kind = TPK_ARG_INTS;
  } else if (d[0] == '"') {
    size_t n = strlen(d);
    if (n < 2 || d[n - 1] != '"') return false;
    d[n - 1] = 0;
    a->kind = TPK_ARG_STR;
    a->str = d + 1;
  } else if (strpbrk(d, ".e")) {
    a->kind = TPK_ARG_FLOAT;
    a->f = strtod(d, NULL);
  } else {
    char *end;
    a->kind = TPK_ARG_INT;
    a->i = strtoll(d, &end, 10);
    if (*end) return false;
  }
  return true;
}

/* Does a fit parameter p? When not, why (into why). */
static bool fits(const Call *c, const Param *p, const TpkArg *a, char *why, size_t n) {
  bool ok = false;
  if (a->kind == TPK_ARG_NONE) {
    ok = p->optional || p->kind == K_ANY;
  } else if (a->kind == TPK_ARG_VALUE && (a->value < 0 || a->value >= c->nvalues || !c->values[a->value])) {
    snprintf(why, n, "argument '%s': %d is not a value of this graph", p->name, a->value);
    return false;
  } else {
    switch (p->kind) {
    case K_TENSOR: ok = a->kind == TPK_ARG_VALUE; break;
    case K_TENSORS: ok = a->kind == TPK_ARG_VALUES; break;
    case K_SCALAR:
      ok = a->kind == TPK_ARG_INT || a->kind == TPK_ARG_FLOAT || a->kind == TPK_ARG_BOOL ||
           (a->kind == TPK_ARG_VALUE && c->values[a->value]->type->rank == 0);
      break;
    case K_INT: ok = a->kind == TPK_ARG_INT && !a->sym; break;
    case K_SYMINT: ok = a->kind == TPK_ARG_INT; break;
    case K_INTS: ok = (a->kind == TPK_ARG_INTS && !a->syms) || (a->kind == TPK_ARG_INT && !a->sym); break;
    case K_SYMINTS: ok = a->kind == TPK_ARG_INTS || a->kind == TPK_ARG_INT; break;
    case K_FLOAT: ok = a->kind == TPK_ARG_FLOAT || (a->kind == TPK_ARG_INT && !a->sym); break;
    case K_BOOL: ok = a->kind == TPK_ARG_BOOL; break;
    case K_BOOLS: ok = a->kind == TPK_ARG_INTS && !a->syms; break;
    case K_STR: ok = a->kind == TPK_ARG_STR && a->str; break;
    case K_DTYPE: ok = a->kind == TPK_ARG_DTYPE && (unsigned)a->dtype < TPK_DTYPE_COUNT; break;
    case K_ANY: ok = true; break;
    }
  }
  if (!ok) {
    if (p->kind == K_SCALAR && a->kind == TPK_ARG_VALUE)
      snprintf(why, n, "argument '%s' must be %s, got a tensor of rank %d", p->name, kind_name(p->kind),
               c->values[a->value]->type->rank);
    else
      snprintf(why, n, "argument '%s' must be %s%s, got %s", p->name, kind_name(p->kind), p->optional ? " or None" : "",
               arg_kind_name(a));
  }
  return ok;
}

/* Bind args to ov's parameters (positional, then by name, then defaults);
 * false with why when they do not fit. */
static bool bind(Call *c, const Overload *ov, const TpkArg *args, int nargs, char *why, size_t n) {
  c->ov = ov;
  if (!parse_schema(ov->schema, c->params, &c->nparams)) {
    snprintf(why, n, "the op table's schema \"%s\" does not parse (a bug in tpk)", ov->schema);
    return false;
  }
  memset(c->arg, 0, sizeof c->arg);
  int pos = 0;
  for (int i = 0; i < nargs; i++) {
    const TpkArg *a = &args[i];
    int slot = -1;
    if (!a->name) {
      while (pos < c->nparams && c->arg[pos]) pos++;
      if (pos >= c->nparams || c->params[pos].kwonly) {
        snprintf(why, n, "takes %d positional arguments, got more", pos);
        return false;
      }
      slot = pos++;
    } else {
      for (int j = 0; j < c->nparams && slot < 0; j++)
        if (strcmp(c->params[j].name, a->name) == 0) slot = j;
      if (slot < 0) {
        snprintf(why, n, "has no argument '%s'", a->name);
        return false;
      }
      if (c->arg[slot]) {
        snprintf(why, n, "argument '%s' is given twice", a->name);
        return false;
      }
    }
    if (!fits(c, &c->params[slot], a, why, n)) return false;
    c->arg[slot] = a;
  }
  for (int j = 0; j < c->nparams; j++) {
    if (c->arg[j]) continue;
    Param *p = &c->params[j];
    if (!p->dflt[0]) {
      snprintf(why, n, "argument '%s' (%s) is missing", p->name, kind_name(p->kind));
      return false;
    }
    if (!default_arg(p, &c->dflt[j])) {
      snprintf(why, n, "the default of '%s' does not parse (a bug in tpk)", p->name);
      return false;
    }
    c->arg[j] = &c->dflt[j];
  }
  return true;
}

static const TpkArg *arg(Call *c, const char *name) {
  for (int i = 0; i < c->nparams; i++)
    if (strcmp(c->params[i].name, name) == 0) return c->arg[i];
  fail(c, TPK_ERR_INTERNAL, "the op table reads argument '%s', which its schema does not have (a bug in tpk)", name);
  return NULL;
}

static bool is_none(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  return !a || a->kind == TPK_ARG_NONE;
}

/* A Tensor argument (NULL for None). */
static TpkValue *t_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  return a && a->kind == TPK_ARG_VALUE ? c->values[a->value] : NULL;
}

static int64_t i_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  if (a && a->kind == TPK_ARG_INT && a->sym) return INVALID(c, "argument '%s' must be a number here, got the size %s", name, a->sym), 0;
  return a && (a->kind == TPK_ARG_INT || a->kind == TPK_ARG_BOOL) ? a->i : 0;
}

static double f_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  return !a ? 0 : a->kind == TPK_ARG_FLOAT ? a->f : (double)a->i;
}

static bool b_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  return a && a->kind == TPK_ARG_BOOL && a->i;
}

/* A str argument; NULL for None. */
static const char *s_arg(Call *c, const char *name, char *buf, size_t n) {
  const TpkArg *a = arg(c, name);
  if (!a || a->kind != TPK_ARG_STR) return NULL;
  snprintf(buf, n, "%s", a->str);
  return buf;
}

static TpkDType dtype_arg(Call *c, const char *name, TpkDType dflt) {
  const TpkArg *a = arg(c, name);
  return a && a->kind == TPK_ARG_DTYPE ? a->dtype : dflt;
}

/* A SymInt argument as a dim. */
static const TpkDim *dim_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  if (!a || a->kind != TPK_ARG_INT) return NULL;
  if (!a->sym) return tpk_dim_const(c->m, a->i);
  TpkError e = {0};
  const TpkDim *d = tpk_gb_dim(c->gb, a->sym, &e);
  return d ? d : INVALID(c, "argument '%s': %s", name, e.message);
}

/* An int list (a single int is one entry); -1 for None. */
static int ints_arg(Call *c, const char *name, int64_t *out, int max) {
  const TpkArg *a = arg(c, name);
  if (!a || a->kind == TPK_ARG_NONE) return -1;
  if (a->kind == TPK_ARG_INT) {
    out[0] = a->i;
    return 1;
  }
  if (a->n > max) return INVALID(c, "argument '%s' has %d entries, at most %d are allowed", name, a->n, max), 0;
  for (int i = 0; i < a->n; i++) out[i] = a->ints[i];
  return a->n;
}

/* A SymInt list as dims; -1 entries (ints) are given as NULL. */
static int dims_arg(Call *c, const char *name, const TpkDim **out, int max) {
  const TpkArg *a = arg(c, name);
  if (!a || a->kind == TPK_ARG_NONE) return -1;
  if (a->kind == TPK_ARG_INT) {
    out[0] = dim_arg(c, name);
    if (!a->sym && a->i == -1) out[0] = NULL;
    return 1;
  }
  if (a->n > max) return INVALID(c, "argument '%s' has %d entries, at most %d are allowed", name, a->n, max), 0;
  for (int i = 0; i < a->n; i++) {
    const char *sym = a->syms ? a->syms[i] : NULL;
    if (sym) {
      TpkError e = {0};
      if (!(out[i] = tpk_gb_dim(c->gb, sym, &e))) return INVALID(c, "argument '%s', entry %d: %s", name, i, e.message), 0;
    } else if (a->ints[i] == -1) {
      out[i] = NULL;
    } else if (a->ints[i] < -1) {
      return INVALID(c, "argument '%s', entry %d: a size cannot be %" PRId64, name, i, a->ints[i]), 0;
    } else {
      out[i] = tpk_dim_const(c->m, a->ints[i]);
    }
  }
  return a->n;
}

/* A Tensor[] argument. */
static int values_arg(Call *c, const char *name, TpkValue **out, int max) {
  const TpkArg *a = arg(c, name);
  if (!a || a->kind != TPK_ARG_VALUES) return 0;
  if (a->n > max) return INVALID(c, "argument '%s' has %d tensors, at most %d are allowed", name, a->n, max), 0;
  for (int i = 0; i < a->n; i++) {
    if (a->values[i] < 0 || a->values[i] >= c->nvalues || !c->values[a->values[i]])
      return INVALID(c, "argument '%s', entry %d: %d is not a value of this graph", name, i, a->values[i]), 0;
    out[i] = c->values[a->values[i]];
  }
  return a->n;
}

/* ---- Operands: tensors and numbers, promoted and broadcast --------------------- */

typedef struct Opnd {
  TpkValue *v;        /* a tensor, or NULL: a number */
  bool wrapped;       /* a Scalar argument: promotes like a number */
  char num;           /* numbers: 'b' bool, 'i' int, 'f' float */
  int64_t i;
  double f;
  const TpkDim *dim;  /* a symbolic int */
  const char *name;   /* the argument's name, for messages */
} Opnd;

static Opnd tensor_opnd(TpkValue *v, const char *name) { return (Opnd){.v = v, .name = name}; }
static Opnd int_opnd(int64_t i) { return (Opnd){.num = 'i', .i = i, .f = (double)i, .wrapped = true, .name = "a number"}; }

/* A Tensor or Scalar argument as an operand. */
static Opnd opnd_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  Opnd o = {.name = name, .wrapped = true};
  if (!a) return o;
  switch (a->kind) {
  case TPK_ARG_VALUE:
    o.v = c->values[a->value];
    for (int i = 0; i < c->nparams; i++) /* a tensor given for a Scalar is a wrapped number */
      if (c->arg[i] == a) o.wrapped = c->params[i].kind == K_SCALAR;
    break;
  case TPK_ARG_FLOAT: o.num = 'f', o.f = a->f; break;
  case TPK_ARG_BOOL: o.num = 'b', o.i = a->i != 0, o.f = (double)o.i; break;
  case TPK_ARG_INT:
    o.num = 'i', o.i = a->i, o.f = (double)a->i;
    if (a->sym) o.dim = dim_arg(c, name);
    break;
  default: break;
  }
  return o;
}

static bool is_num(const Opnd *o) { return !o->v; }
static bool num_is(const Opnd *o, double x) { return !o->v && !o->dim && o->f == x; }

static TpkDType opnd_dtype(const Opnd *o) {
  if (o->v) return dt_of(o->v);
  return o->num == 'b' ? TPK_BOOL : o->num == 'i' ? TPK_I32 : TPK_F32;
}

/* ATen's promote_types, which refuses to mix the float8 types with others. */
static TpkDType promote(Call *c, TpkDType a, TpkDType b) {
  if (a == TPK_DTYPE_COUNT) return b;
  if (b == TPK_DTYPE_COUNT || a == b) return a;
  if (is_f8(a) || is_f8(b)) return INVALID(c, "promotion of %s with %s is not supported (as in PyTorch)", dt_name(a), dt_name(b)), a;
  return tpk_dtype_promote(a, b);
}

/* ATen's combine_categories: the lower-priority group counts only when its
 * category is higher. */
static TpkDType combine(Call *c, TpkDType higher, TpkDType lower) {
  if (higher == TPK_DTYPE_COUNT) return lower;
  if (lower == TPK_DTYPE_COUNT || is_float(higher)) return higher;
  if (higher == TPK_BOOL || is_float(lower)) return promote(c, higher, lower);
  return higher;
}

/* The dtype ATen's type promotion gives operands o[0..n). */
static TpkDType result_dtype(Call *c, int n, const Opnd *o) {
  TpkDType dims = TPK_DTYPE_COUNT, zero = TPK_DTYPE_COUNT, wrapped = TPK_DTYPE_COUNT;
  for (int i = 0; i < n; i++) {
    TpkDType d = opnd_dtype(&o[i]);
    if (o[i].wrapped) {
      /* a Scalar: its category, as the default dtype of that category */
      TpkDType w = d == TPK_BOOL ? TPK_BOOL : is_float(d) ? TPK_F32 : TPK_I32;
      wrapped = wrapped == TPK_DTYPE_COUNT ? w : promote(c, wrapped, w);
    } else if (rank_of(o[i].v) == 0) {
      zero = promote(c, zero, d);
    } else {
      dims = promote(c, dims, d);
    }
  }
  return combine(c, dims, combine(c, zero, wrapped));
}

/* The broadcast shape of the tensor operands (numbers are rank 0). */
static bool broadcast_shape(Call *c, int n, const Opnd *o, int *rank, const TpkDim **dims) {
  int from[TPK_MAX_RANK]; /* the operand that gave dims[d] */
  *rank = 0;
  for (int i = 0; i < n; i++)
    if (o[i].v && rank_of(o[i].v) > *rank) *rank = rank_of(o[i].v);
  for (int d = 0; d < *rank; d++) dims[d] = NULL;
  for (int i = 0; i < n; i++) {
    if (!o[i].v) continue;
    const TpkType *t = o[i].v->type;
    for (int k = 0; k < t->rank; k++) {
      int d = *rank - t->rank + k;
      const TpkDim *x = t->dims[k];
      if (!dims[d] || (dim_is(dims[d], 1) && !dim_is(x, 1))) {
        dims[d] = x;
        from[d] = i;
      } else if (x != dims[d] && !dim_is(x, 1)) {
        const Opnd *p = &o[from[d]];
        return INVALID(c, "cannot broadcast %s %s with %s %s (dim %d: %s vs %s)", p->name, ty(c, p->v), o[i].name,
                       ty(c, o[i].v), d - *rank, dim_text(c, dims[d]), dim_text(c, x)),
               false;
      }
    }
  }
  for (int d = 0; d < *rank; d++)
    if (!dims[d]) dims[d] = tpk_dim_const(c->m, 1);
  return true;
}

/* ---- IR builders (each returns NULL once the call has failed) ----------------- */

static TpkValue *check_built(Call *c, TpkValue *v) { return v ? v : nomem(c); }

static TpkValue *built_op(Call *c, TpkOp *op) { return op ? &op->out[0] : nomem(c); }

/* An int of dtype dt wrapped as a conversion would (ATen casts Scalars so). */
static int64_t wrap_int(TpkDType dt, int64_t v) {
  switch (dt) {
  case TPK_I32: return (int32_t)(uint32_t)v;
  case TPK_I16: return (int16_t)(uint16_t)v;
  case TPK_I8: return (int8_t)(uint8_t)v;
  case TPK_U8: return (uint8_t)v;
  case TPK_BOOL: return v != 0;
  default: return v;
  }
}

/* A scalar constant of dtype dt with value x. */
static TpkValue *konst(Call *c, TpkDType dt, double x) {
  if (c->failed) return NULL;
  const TpkType *t = tpk_type_scalar(c->m, dt);
  if (is_float(dt)) return check_built(c, tpk_build_const_float(c->b, t, x));
  int64_t i = dt == TPK_BOOL ? x != 0 : !isfinite(x) ? 0 : x >= 9.2e18 ? INT64_MAX : x <= -9.2e18 ? INT64_MIN : (int64_t)x;
  return check_built(c, tpk_build_const_int(c->b, t, wrap_int(dt, i)));
}

static TpkValue *konst_int(Call *c, TpkDType dt, int64_t v) {
  if (c->failed) return NULL;
  if (is_float(dt)) return konst(c, dt, (double)v);
  return check_built(c, tpk_build_const_int(c->b, tpk_type_scalar(c->m, dt), wrap_int(dt, v)));
}

static TpkValue *bcast(Call *c, TpkValue *x, int rank, const TpkDim *const *dims) {
  if (!x || c->failed) return NULL;
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), rank, dims);
  if (x->type == t) return x;
  return check_built(c, tpk_build_broadcast(c->b, x, rank, dims));
}

static TpkValue *bcast_like(Call *c, TpkValue *x, const TpkValue *like) {
  return like ? bcast(c, x, rank_of(like), like->type->dims) : NULL;
}

static TpkValue *op1(Call *c, TpkOpcode opc, TpkValue *x) {
  if (!x || c->failed) return NULL;
  return check_built(c, tpk_build_unary(c->b, opc, x));
}

static TpkValue *op2(Call *c, TpkOpcode opc, TpkValue *x, TpkValue *y) {
  if (!x || !y || c->failed) return NULL;
  if (x->type != y->type) return fail(c, TPK_ERR_INTERNAL, "IR '%s' of %s and %s (a bug in tpk)", tpk_op_info(opc)->name, ty(c, x), ty(c, y));
  return check_built(c, tpk_build_binary(c->b, opc, x, y));
}

static TpkValue *sel(Call *c, TpkValue *cond, TpkValue *x, TpkValue *y) {
  if (!cond || !x || !y || c->failed) return NULL;
  return check_built(c, tpk_build_select(c->b, cond, x, y));
}

/* A constant of x's type (broadcast). */
static TpkValue *splat(Call *c, const TpkValue *like, double v) {
  return like ? bcast_like(c, konst(c, dt_of(like), v), like) : NULL;
}

static TpkValue *cvt(Call *c, TpkValue *x, TpkDType dt) {
  if (!x || c->failed) return NULL;
  if (dt_of(x) == dt) return x;
  if (dt == TPK_BOOL) return op2(c, TPK_OP_NE, x, splat(c, x, 0)); /* nonzero, NaN included */
  return check_built(c, tpk_build_convert(c->b, x, dt));
}

static TpkValue *binop_k(Call *c, TpkOpcode opc, TpkValue *x, double k) { return op2(c, opc, x, splat(c, x, k)); }

static TpkValue *reshape(Call *c, TpkValue *x, int rank, const TpkDim *const *dims) {
  if (!x || c->failed) return NULL;
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), rank, dims);
  if (!t) return nomem(c);
  if (t == x->type) return x;
  return built_op(c, tpk_build(c->b, TPK_OP_RESHAPE, 1, &x, 1, &t));
}

static TpkValue *transpose(Call *c, TpkValue *x, const int64_t *perm) {
  if (!x || c->failed) return NULL;
  const TpkDim *dims[TPK_MAX_RANK];
  bool same = true;
  for (int i = 0; i < rank_of(x); i++) {
    dims[i] = x->type->dims[perm[i]];
    same &= perm[i] == i;
  }
  if (same) return x;
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), rank_of(x), dims);
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_TRANSPOSE, 1, &x, 1, &t));
  if (r) tpk_op_set_ints(c->m, r->def, "perm", rank_of(x), perm);
  return r;
}

/* reduce x over the given axes (any order, no repeats); no axes: x. */
static TpkValue *reduce(Call *c, TpkValue *x, TpkReduceKind kind, const int64_t *axes, int n, bool keepdims) {
  if (!x || c->failed) return NULL;
  if (n == 0) return x;
  bool on[TPK_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) on[axes[i]] = true;
  int64_t sorted[TPK_MAX_RANK];
  const TpkDim *dims[TPK_MAX_RANK];
  int ns = 0, rank = 0;
  for (int d = 0; d < rank_of(x); d++) {
    if (on[d]) sorted[ns++] = d;
    if (!on[d])
      dims[rank++] = x->type->dims[d];
    else if (keepdims)
      dims[rank++] = tpk_dim_const(c->m, 1);
  }
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), rank, dims);
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_REDUCE, 1, &x, 1, &t));
  if (!r) return NULL;
  tpk_op_set_reduce_kind(c->m, r->def, kind);
  tpk_op_set_ints(c->m, r->def, "axes", ns, sorted);
  tpk_op_set_bool(c->m, r->def, "keepdims", keepdims);
  return r;
}

static TpkValue *reduce1(Call *c, TpkValue *x, TpkReduceKind kind, int axis, bool keepdims) {
  int64_t a = axis;
  return reduce(c, x, kind, &a, 1, keepdims);
}

static TpkValue *iota(Call *c, TpkDType dt, int rank, const TpkDim *const *dims, int axis) {
  if (c->failed) return NULL;
  const TpkType *t = tpk_type_tensor(c->m, dt, rank, dims);
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_IOTA, 0, NULL, 1, &t));
  if (r) tpk_op_set_int(c->m, r->def, "axis", axis);
  return r;
}

/* The i32 value of dim d (symbols read with `sym`). */
static TpkValue *dim_value(Call *c, const TpkDim *d) {
  if (!d || c->failed) return NULL;
  switch (d->kind) {
  case TPK_DIM_CONST:
    if (d->value < INT32_MIN || d->value > INT32_MAX) return UNSUPPORTED(c, "the size %" PRId64 " does not fit i32", d->value);
    return konst_int(c, TPK_I32, d->value);
  case TPK_DIM_SYM: return check_built(c, tpk_build_sym(c->b, d->sym));
  default: {
    static const TpkOpcode OPC[] = {[TPK_DIM_ADD] = TPK_OP_ADD, [TPK_DIM_SUB] = TPK_OP_SUB, [TPK_DIM_MUL] = TPK_OP_MUL,
                                    [TPK_DIM_DIV] = TPK_OP_DIV, [TPK_DIM_CDIV] = TPK_OP_CDIV};
    return op2(c, OPC[d->kind], dim_value(c, d->a), dim_value(c, d->b));
  }
  }
}

/* x as dtype dt and the given shape: a number becomes a constant, a symbolic
 * int its value. */
static TpkValue *mat(Call *c, const Opnd *o, TpkDType dt, int rank, const TpkDim *const *dims) {
  if (c->failed) return NULL;
  TpkValue *v = o->v ? cvt(c, o->v, dt) : o->dim ? cvt(c, dim_value(c, o->dim), dt) : o->num == 'f' ? konst(c, dt, o->f) : konst_int(c, dt, o->i);
  return bcast(c, v, rank, dims);
}

static const TpkDim *product(Call *c, int rank, const TpkDim *const *dims) {
  const TpkDim *p = tpk_dim_const(c->m, 1);
  for (int i = 0; i < rank && p; i++) p = tpk_dim_binary(c->m, TPK_DIM_MUL, p, dims[i]);
  return p ? p : INVALID(c, "the element count of %s overflows", shape_text(c, rank, dims));
}

static const TpkDim *numel(Call *c, const TpkValue *x) { return product(c, rank_of(x), x->type->dims); }

/* The factors of a product of dims (constants multiplied into *k). */
static void factors(const TpkDim *d, const TpkDim **f, int *n, int max, int64_t *k, bool *ok) {
  if (d->kind == TPK_DIM_MUL) {
    factors(d->a, f, n, max, k, ok);
    factors(d->b, f, n, max, k, ok);
  } else if (d->kind == TPK_DIM_CONST) {
    *k *= d->value;
  } else if (*n < max) {
    f[(*n)++] = d;
  } else {
    *ok = false;
  }
}

/* a / b when b divides a as products of dims ((B*S*64) / (S*8) = B*8), else
 * NULL. */
static const TpkDim *dims_exact_div(TpkModule *m, const TpkDim *a, const TpkDim *b) {
  if (!a || !b) return NULL;
  const TpkDim *fa[64], *fb[64];
  int na = 0, nb = 0;
  int64_t ka = 1, kb = 1;
  bool ok = true;
  factors(a, fa, &na, 64, &ka, &ok);
  factors(b, fb, &nb, 64, &kb, &ok);
  if (!ok || kb == 0 || ka % kb != 0) return NULL;
  for (int i = 0; i < nb; i++) {
    int j = 0;
    while (j < na && fa[j] != fb[i]) j++;
    if (j == na) return NULL;
    fa[j] = fa[--na];
  }
  const TpkDim *r = tpk_dim_const(m, ka / kb);
  for (int i = 0; i < na && r; i++) r = tpk_dim_binary(m, TPK_DIM_MUL, r, fa[i]);
  return r;
}

/* ATen's dim wrapping: d in [-rank, rank) (a rank-0 tensor takes 0 and -1). */
static int wrap_dim(Call *c, int64_t d, int rank, const char *what, const TpkValue *x) {
  int r = rank ? rank : 1;
  if (d < -r || d >= r) {
    if (x) INVALID(c, "%s %" PRId64 " is out of range for %s (rank %d)", what, d, ty(c, x), rank);
    else INVALID(c, "%s %" PRId64 " is out of range for rank %d", what, d, rank);
    return 0;
  }
  return (int)(d < 0 ? d + r : d);
}

/* A list of dims (ints) as sorted, distinct axes of x; None or [] is every
 * axis. Returns the count. */
static int axes_arg(Call *c, const char *name, const TpkValue *x, int64_t *axes) {
  int64_t raw[MAX_LIST];
  int n = ints_arg(c, name, raw, MAX_LIST);
  int rank = rank_of(x);
  if (n <= 0) {
    for (int i = 0; i < rank; i++) axes[i] = i;
    return rank;
  }
  bool on[TPK_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    int a = wrap_dim(c, raw[i], rank, "dim", x);
    if (c->failed) return 0;
    if (rank && on[a]) return INVALID(c, "dim %d appears more than once in '%s'", a, name), 0;
    if (rank) on[a] = true;
  }
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (on[i]) axes[k++] = i;
  return k;
}

static void put(Call *c, TpkValue *v) {
  if (c->nouts < MAX_OUTS) c->outs[c->nouts++] = v;
}

/* ---- Elementwise ops -------------------------------------------------------------- */

/* The operands promoted to one dtype `dt` (result_dtype when TPK_DTYPE_COUNT)
 * and broadcast to one shape, into v[]. Returns the dtype. */
static TpkDType operands(Call *c, int n, const Opnd *o, TpkDType dt, TpkValue **v) {
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (dt == TPK_DTYPE_COUNT) dt = result_dtype(c, n, o);
  if (!broadcast_shape(c, n, o, &rank, dims)) return dt;
  for (int i = 0; i < n; i++) v[i] = mat(c, &o[i], dt, rank, dims);
  return dt;
}

/* Does any operand make ATen compute in opmath (a number on reduced floats)? */
static bool has_number(int n, const Opnd *o) {
  for (int i = 0; i < n; i++)
    if (is_num(&o[i]) || o[i].wrapped) return true;
  return false;
}

/* a op b for the arithmetic ops, with ATen's promotion; in opmath when a
 * Scalar meets a reduced float. */
static TpkValue *arith(Call *c, TpkOpcode opc, Opnd a, Opnd b, TpkDType out) {
  Opnd o[2] = {a, b};
  TpkValue *v[2] = {0};
  if (out == TPK_DTYPE_COUNT) out = result_dtype(c, 2, o);
  TpkDType cd = has_number(2, o) ? opmath(out) : out;
  operands(c, 2, o, cd, v);
  return cvt(c, op2(c, opc, v[0], v[1]), out);
}

/* self + alpha * other, self - alpha * other (sub, rsub). */
static TpkValue *add_scaled(Call *c, TpkOpcode opc, Opnd self, Opnd other, Opnd alpha) {
  Opnd o[3] = {self, other, alpha};
  TpkDType out = result_dtype(c, 2, o);
  if (c->failed) return NULL;
  if (out == TPK_BOOL && opc == TPK_OP_SUB)
    return INVALID(c, "subtraction of bool tensors is not supported (as in PyTorch; use logical_xor)");
  if (!is_float(out) && (alpha.v ? is_float(dt_of(alpha.v)) : alpha.num == 'f'))
    return INVALID(c, "for integral input tensors, argument 'alpha' must not be a floating point number");
  if (out == TPK_BOOL && !(alpha.num == 'b' || alpha.num == 'i' || (alpha.v && dt_of(alpha.v) == TPK_BOOL)))
    return INVALID(c, "for bool tensors, argument 'alpha' must be a bool");
  if (num_is(&alpha, 1)) return arith(c, opc, self, other, out);
  TpkDType cd = opmath(out);
  TpkValue *v[3] = {0};
  operands(c, 3, o, cd, v);
  return cvt(c, op2(c, opc, v[0], op2(c, TPK_OP_MUL, v[1], v[2])), out);
}

static void ex_add(Call *c) { put(c, add_scaled(c, TPK_OP_ADD, opnd_arg(c, "self"), opnd_arg(c, "other"), opnd_arg(c, "alpha"))); }
static void ex_sub(Call *c) { put(c, add_scaled(c, TPK_OP_SUB, opnd_arg(c, "self"), opnd_arg(c, "other"), opnd_arg(c, "alpha"))); }
static void ex_rsub(Call *c) { put(c, add_scaled(c, TPK_OP_SUB, opnd_arg(c, "other"), opnd_arg(c, "self"), opnd_arg(c, "alpha"))); }

static void ex_mul(Call *c) {
  Opnd a = opnd_arg(c, "self"), b = opnd_arg(c, "other");
  Opnd o[2] = {a, b};
  TpkDType out = result_dtype(c, 2, o);
  if (out == TPK_BOOL) { /* bool * bool is logical and */
    TpkValue *v[2] = {0};
    operands(c, 2, o, TPK_BOOL, v);
    put(c, op2(c, TPK_OP_AND, v[0], v[1]));
    return;
  }
  put(c, arith(c, TPK_OP_MUL, a, b, out));
}

/* Integer floor division: the truncated quotient, one less where the
 * remainder and the divisor differ in sign. */
static TpkValue *int_floor_div(Call *c, TpkValue *a, TpkValue *b) {
  TpkValue *q = op2(c, TPK_OP_DIV, a, b), *r = op2(c, TPK_OP_REM, a, b);
  TpkValue *zero = splat(c, a, 0);
  TpkValue *adjust = op2(c, TPK_OP_AND, op2(c, TPK_OP_NE, r, zero), op2(c, TPK_OP_NE, op2(c, TPK_OP_LT, r, zero), op2(c, TPK_OP_LT, b, zero)));
  return op2(c, TPK_OP_SUB, q, cvt(c, adjust, dt_of(a)));
}

/* Round toward zero (floats). */
static TpkValue *trunc_float(Call *c, TpkValue *x) {
  return sel(c, op2(c, TPK_OP_LT, x, splat(c, x, 0)), op1(c, TPK_OP_CEIL, x), op1(c, TPK_OP_FLOOR, x));
}

static void ex_div(Call *c) {
  Opnd a = opnd_arg(c, "self"), b = opnd_arg(c, "other");
  char buf[32];
  const char *mode = strcmp(c->ov->name, "Tensor_mode") == 0 || strcmp(c->ov->name, "Scalar_mode") == 0
                         ? s_arg(c, "rounding_mode", buf, sizeof buf) : NULL;
  Opnd o[2] = {a, b};
  TpkDType out = result_dtype(c, 2, o);
  if (!mode) { /* true division: integers give the default float */
    if (!is_float(out)) out = TPK_F32;
    put(c, arith(c, TPK_OP_DIV, a, b, out));
    return;
  }
  if (strcmp(mode, "trunc") != 0 && strcmp(mode, "floor") != 0)
    return (void)INVALID(c, "rounding_mode must be None, \"trunc\" or \"floor\", got \"%s\"", mode);
  TpkDType cd = has_number(2, o) ? opmath(out) : out;
  TpkValue *v[2] = {0};
  operands(c, 2, o, cd == TPK_BOOL ? TPK_I32 : cd, v);
  TpkValue *r;
  if (is_float(cd))
    r = mode[0] == 't' ? trunc_float(c, op2(c, TPK_OP_DIV, v[0], v[1])) : op1(c, TPK_OP_FLOOR, op2(c, TPK_OP_DIV, v[0], v[1]));
  else
    r = mode[0] == 't' ? op2(c, TPK_OP_DIV, v[0], v[1]) : int_floor_div(c, v[0], v[1]);
  put(c, cvt(c, r, out));
}

/* neg, abs: any numeric dtype. */
static void unary_same(Call *c, TpkOpcode opc) {
  TpkValue *x = t_arg(c, "self");
  if (opc == TPK_OP_NEG && dt_of(x) == TPK_BOOL)
    return (void)INVALID(c, "negation of a bool tensor %s is not supported (as in PyTorch; use logical_not)", ty(c, x));
  if (dt_of(x) == TPK_BOOL) return put(c, x); /* abs */
  put(c, op1(c, opc, x));
}

static void ex_neg(Call *c) { unary_same(c, TPK_OP_NEG); }
static void ex_abs(Call *c) { unary_same(c, TPK_OP_ABS); }

/* The float functions: integers and bool give f32. */
static TpkValue *unary_float_of(Call *c, TpkOpcode opc, TpkValue *x) {
  if (!x) return NULL;
  TpkDType out = is_float(dt_of(x)) ? dt_of(x) : TPK_F32;
  return op1(c, opc, cvt(c, x, out));
}

static void unary_float(Call *c, TpkOpcode opc) { put(c, unary_float_of(c, opc, t_arg(c, "self"))); }
static void ex_exp(Call *c) { unary_float(c, TPK_OP_EXP); }
static void ex_log(Call *c) { unary_float(c, TPK_OP_LOG); }
static void ex_sqrt(Call *c) { unary_float(c, TPK_OP_SQRT); }
static void ex_rsqrt(Call *c) { unary_float(c, TPK_OP_RSQRT); }
static void ex_tanh(Call *c) { unary_float(c, TPK_OP_TANH); }
static void ex_sigmoid(Call *c) { unary_float(c, TPK_OP_SIGMOID); }
static void ex_erf(Call *c) { unary_float(c, TPK_OP_ERF); }

static void ex_relu(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (dt_of(x) == TPK_BOOL) return (void)INVALID(c, "relu of a bool tensor %s is not supported (as in PyTorch)", ty(c, x));
  put(c, op2(c, TPK_OP_MAX, x, splat(c, x, 0)));
}

/* alias, clone, detach, contiguous: the same values. */
static void ex_identity(Call *c) { put(c, t_arg(c, "self")); }

/* ---- Matrix products --------------------------------------------------------------- */

/* dot of a and b as ATen's mm/bmm: the products accumulate in f32 (i32) and
 * the result has the operands' dtype. */
static TpkValue *matmul(Call *c, TpkValue *a, TpkValue *b, bool batched, bool keep_f32) {
  if (!a || !b || c->failed) return NULL;
  int want = batched ? 3 : 2;
  const char *an = "self", *bn = "mat2";
  if (strcmp(c->ov->packet, "addmm") == 0) an = "mat1";
  if (rank_of(a) != want || rank_of(b) != want)
    return INVALID(c, "%s and %s must be %d-D, got %s and %s", an, bn, want, ty(c, a), ty(c, b));
  if (dt_of(a) != dt_of(b)) return INVALID(c, "%s %s and %s %s must have one dtype", an, ty(c, a), bn, ty(c, b));
  if (dt_of(a) == TPK_BOOL) return INVALID(c, "matrix products of bool tensors are not supported (as in PyTorch)");
  int o = batched;
  if (a->type->dims[o + 1] != b->type->dims[o])
    return INVALID(c, "%s %s and %s %s cannot be multiplied (%s vs %s)", an, ty(c, a), bn, ty(c, b),
                   dim_text(c, a->type->dims[o + 1]), dim_text(c, b->type->dims[o]));
  if (batched && a->type->dims[0] != b->type->dims[0])
    return INVALID(c, "%s %s and %s %s differ in batch size", an, ty(c, a), bn, ty(c, b));
  const TpkDim *dims[3];
  int rank = 0;
  if (batched) dims[rank++] = a->type->dims[0];
  dims[rank++] = a->type->dims[o];
  dims[rank++] = b->type->dims[o + 1];
  TpkDType acc = is_float(dt_of(a)) ? TPK_F32 : TPK_I32;
  const TpkType *t = tpk_type_tensor(c->m, acc, rank, dims);
  TpkValue *in[2] = {a, b};
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_DOT, 2, in, 1, &t));
  if (!r) return NULL;
  int64_t lc = o + 1, rc = o, zero = 0;
  tpk_op_set_ints(c->m, r->def, "lhs_contract", 1, &lc);
  tpk_op_set_ints(c->m, r->def, "rhs_contract", 1, &rc);
  tpk_op_set_ints(c->m, r->def, "lhs_batch", batched, &zero);
  tpk_op_set_ints(c->m, r->def, "rhs_batch", batched, &zero);
  return keep_f32 ? r : cvt(c, r, dt_of(a));
}

static void ex_mm(Call *c) { put(c, matmul(c, t_arg(c, "self"), t_arg(c, "mat2"), false, false)); }
static void ex_bmm(Call *c) { put(c, matmul(c, t_arg(c, "self"), t_arg(c, "mat2"), true, false)); }

/* beta * self + alpha * (mat1 @ mat2), summed in the accumulator's dtype. */
static void ex_addmm(Call *c) {
  TpkValue *self = t_arg(c, "self"), *a = t_arg(c, "mat1"), *b = t_arg(c, "mat2");
  Opnd alpha = opnd_arg(c, "alpha"), beta = opnd_arg(c, "beta");
  if (dt_of(self) != dt_of(a))
    return (void)INVALID(c, "self %s and mat1 %s must have one dtype", ty(c, self), ty(c, a));
  TpkValue *p = matmul(c, a, b, false, true);
  if (!p) return;
  TpkDType acc = dt_of(p);
  if (!num_is(&alpha, 1)) p = op2(c, TPK_OP_MUL, p, mat(c, &alpha, acc, rank_of(p), p->type->dims));
  if (!num_is(&beta, 0)) {
    Opnd s[2] = {tensor_opnd(self, "self"), tensor_opnd(p, "mat1 @ mat2")};
    int rank;
    const TpkDim *dims[TPK_MAX_RANK];
    if (!broadcast_shape(c, 2, s, &rank, dims)) return;
    if (rank != 2 || dims[0] != p->type->dims[0] || dims[1] != p->type->dims[1])
      return (void)INVALID(c, "self %s does not broadcast to the product's shape %s", ty(c, self), ty(c, p));
    TpkValue *bias = mat(c, &s[0], acc, 2, p->type->dims);
    if (!num_is(&beta, 1)) bias = op2(c, TPK_OP_MUL, bias, mat(c, &beta, acc, 2, p->type->dims));
    p = op2(c, TPK_OP_ADD, p, bias);
  }
  put(c, cvt(c, p, dt_of(a)));
}

/* ---- Reductions ---------------------------------------------------------------------- */

/* sum and mean: dtype= converts first; sums of integers and bools are i32
 * (ATen's int64). */
static void sum_mean(Call *c, TpkReduceKind kind) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  TpkDType dflt = kind == TPK_REDUCE_SUM && !is_float(dt_of(x)) ? TPK_I32 : dt_of(x);
  TpkDType dt = dtype_arg(c, "dtype", dflt);
  if (kind == TPK_REDUCE_MEAN && !is_float(dt))
    return (void)INVALID(c, "mean needs a float input or dtype, got %s%s%s", ty(c, x),
                         is_none(c, "dtype") ? "" : " with dtype=", is_none(c, "dtype") ? "" : dt_name(dt));
  int64_t axes[TPK_MAX_RANK];
  bool all = strcmp(c->ov->name, "default") == 0;
  int n = all ? rank_of(x) : axes_arg(c, "dim", x, axes);
  for (int i = 0; all && i < n; i++) axes[i] = i;
  bool keep = !all && b_arg(c, "keepdim");
  put(c, reduce(c, cvt(c, x, dt), kind, axes, n, keep));
}

static void ex_sum(Call *c) { sum_mean(c, TPK_REDUCE_SUM); }
static void ex_mean(Call *c) { sum_mean(c, TPK_REDUCE_MEAN); }

/* ---- Views ---------------------------------------------------------------------------- */

/* view, reshape, _unsafe_view: one -1 is what the others leave. */
static TpkValue *view_as(Call *c, TpkValue *x, int n, const TpkDim **dims, const char *what) {
  if (!x || c->failed) return NULL;
  if (n > TPK_MAX_RANK) return INVALID(c, "%s: rank %d is more than %d", what, n, TPK_MAX_RANK);
  int infer = -1;
  const TpkDim *known = tpk_dim_const(c->m, 1);
  for (int i = 0; i < n; i++) {
    if (!dims[i]) {
      if (infer >= 0) return INVALID(c, "%s: only one dimension can be -1", what);
      infer = i;
    } else {
      known = tpk_dim_binary(c->m, TPK_DIM_MUL, known, dims[i]);
    }
  }
  const TpkDim *total = numel(c, x);
  if (!total || !known) return nomem(c);
  if (infer >= 0) {
    dims[infer] = dims_exact_div(c->m, total, known);
    if (!dims[infer]) {
      dims[infer] = tpk_dim_const(c->m, -1);
      return INVALID(c, "%s: shape %s is invalid for %s (%s elements)", what, shape_text(c, n, dims), ty(c, x),
                     dim_text(c, total));
    }
  } else if (known != total) {
    return INVALID(c, "%s: shape %s is invalid for %s (%s elements)", what, shape_text(c, n, dims), ty(c, x),
                   dim_text(c, total));
  }
  return reshape(c, x, n, dims);
}

static void ex_view(Call *c) {
  const char *name = c->nparams > 1 ? c->params[1].name : "size";
  const TpkDim *dims[MAX_LIST];
  int n = dims_arg(c, name, dims, MAX_LIST);
  put(c, view_as(c, t_arg(c, "self"), n, dims, "view"));
}

static void ex_expand(Call *c) {
  TpkValue *x = t_arg(c, "self");
  const TpkDim *dims[MAX_LIST];
  int n = dims_arg(c, "size", dims, MAX_LIST);
  if (c->failed) return;
  if (n < rank_of(x) || n > TPK_MAX_RANK)
    return (void)INVALID(c, "size has %d entries; %s needs %d to %d", n, ty(c, x), rank_of(x), TPK_MAX_RANK);
  int off = n - rank_of(x);
  for (int i = 0; i < n; i++) {
    const TpkDim *have = i >= off ? x->type->dims[i - off] : NULL;
    if (!dims[i]) {
      if (!have) return (void)INVALID(c, "size: -1 is not allowed for the new leading dim %d", i);
      dims[i] = have;
    } else if (have && have != dims[i] && !dim_is(have, 1)) {
      return (void)INVALID(c, "cannot expand %s to %s: dim %d is %s, not 1", ty(c, x), shape_text(c, n, dims), i,
                           dim_text(c, have));
    }
  }
  put(c, bcast(c, x, n, dims));
}

static void ex_permute(Call *c) {
  TpkValue *x = t_arg(c, "self");
  int64_t perm[MAX_LIST];
  int n = ints_arg(c, "dims", perm, MAX_LIST);
  if (c->failed) return;
  if (n != rank_of(x)) return (void)INVALID(c, "dims has %d entries for %s", n, ty(c, x));
  bool seen[TPK_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    perm[i] = wrap_dim(c, perm[i], n, "dim", x);
    if (c->failed) return;
    if (seen[perm[i]]) return (void)INVALID(c, "dims repeats dim %" PRId64, perm[i]);
    seen[perm[i]] = true;
  }
  put(c, transpose(c, x, perm));
}

static TpkValue *swap_dims(Call *c, TpkValue *x, int64_t d0, int64_t d1) {
  if (!x) return NULL;
  int rank = rank_of(x);
  if (rank == 0) return x;
  int a = wrap_dim(c, d0, rank, "dim0", x), b = wrap_dim(c, d1, rank, "dim1", x);
  int64_t perm[TPK_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = i;
  perm[a] = b;
  perm[b] = a;
  return c->failed ? NULL : transpose(c, x, perm);
}

static void ex_transpose(Call *c) { put(c, swap_dims(c, t_arg(c, "self"), i_arg(c, "dim0"), i_arg(c, "dim1"))); }

static void ex_t(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (rank_of(x) > 2) return (void)INVALID(c, "t() expects a tensor of rank <= 2, got %s", ty(c, x));
  put(c, rank_of(x) == 2 ? swap_dims(c, x, 0, 1) : x);
}

static TpkValue *unsqueeze(Call *c, TpkValue *x, int64_t dim) {
  if (!x || c->failed) return NULL;
  int rank = rank_of(x);
  if (rank == TPK_MAX_RANK) return INVALID(c, "%s already has the largest rank, %d", ty(c, x), TPK_MAX_RANK);
  int d = wrap_dim(c, dim, rank + 1, "dim", x);
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0, k = 0; i <= rank; i++) dims[i] = i == d ? tpk_dim_const(c->m, 1) : x->type->dims[k++];
  return c->failed ? NULL : reshape(c, x, rank + 1, dims);
}

static void ex_unsqueeze(Call *c) { put(c, unsqueeze(c, t_arg(c, "self"), i_arg(c, "dim"))); }

/* ---- Softmax ------------------------------------------------------------------------------ */

/* softmax or log-softmax of x (a float) along axis, in f32. */
static TpkValue *softmax_f32(Call *c, TpkValue *x, int axis, bool log_space) {
  TpkValue *m = bcast_like(c, reduce1(c, x, TPK_REDUCE_MAX, axis, true), x);
  TpkValue *shifted = op2(c, TPK_OP_SUB, x, m);
  TpkValue *e = op1(c, TPK_OP_EXP, shifted);
  TpkValue *s = bcast_like(c, reduce1(c, e, TPK_REDUCE_SUM, axis, true), x);
  return log_space ? op2(c, TPK_OP_SUB, shifted, op1(c, TPK_OP_LOG, s)) : op2(c, TPK_OP_DIV, e, s);
}

static void softmax_like(Call *c, bool log_space) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  bool underscore = c->ov->packet[0] == '_';
  TpkDType out = underscore ? (b_arg(c, "half_to_float") && is_float(dt_of(x)) ? TPK_F32 : dt_of(x))
                            : dtype_arg(c, "dtype", dt_of(x));
  if (!underscore && !is_none(c, "dtype")) x = cvt(c, x, out);
  if (!is_float(dt_of(x))) return (void)INVALID(c, "needs a float input, got %s", ty(c, x));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  if (c->failed) return;
  const TpkDim *one = tpk_dim_const(c->m, 1);
  TpkValue *xs = rank_of(x) ? cvt(c, x, TPK_F32) : reshape(c, cvt(c, x, TPK_F32), 1, &one);
  TpkValue *y = softmax_f32(c, xs, axis, log_space);
  put(c, cvt(c, rank_of(x) ? y : reshape(c, y, 0, NULL), out));
}

static void ex_softmax(Call *c) { softmax_like(c, false); }
static void ex_log_softmax(Call *c) { softmax_like(c, true); }

/* ---- Comparisons, logic, selection ----------------------------------------------------- */

/* eq, ne, lt, le, gt, ge: compared in the promoted dtype; bool results. */
static void compare(Call *c, TpkOpcode opc) {
  Opnd o[2] = {opnd_arg(c, "self"), opnd_arg(c, "other")};
  TpkValue *v[2] = {0};
  operands(c, 2, o, TPK_DTYPE_COUNT, v);
  put(c, op2(c, opc, v[0], v[1]));
}

static void ex_eq(Call *c) { compare(c, TPK_OP_EQ); }
static void ex_ne(Call *c) { compare(c, TPK_OP_NE); }
static void ex_lt(Call *c) { compare(c, TPK_OP_LT); }
static void ex_le(Call *c) { compare(c, TPK_OP_LE); }
static void ex_gt(Call *c) { compare(c, TPK_OP_GT); }
static void ex_ge(Call *c) { compare(c, TPK_OP_GE); }

/* logical_and, logical_or: of the operands' truth (nonzero), bool. */
static void logical(Call *c, TpkOpcode opc) {
  Opnd o[2] = {opnd_arg(c, "self"), opnd_arg(c, "other")};
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shape(c, 2, o, &rank, dims)) return;
  TpkValue *a = bcast(c, cvt(c, o[0].v, TPK_BOOL), rank, dims), *b = bcast(c, cvt(c, o[1].v, TPK_BOOL), rank, dims);
  put(c, op2(c, opc, a, b));
}

static void ex_logical_and(Call *c) { logical(c, TPK_OP_AND); }
static void ex_logical_or(Call *c) { logical(c, TPK_OP_OR); }

static void ex_logical_not(Call *c) {
  TpkValue *x = t_arg(c, "self");
  put(c, op2(c, TPK_OP_EQ, x, splat(c, x, 0)));
}

/* where(condition, self, other): self's and other's dtypes promoted. */
static void ex_where(Call *c) {
  TpkValue *cond = t_arg(c, "condition");
  if (dt_of(cond) != TPK_BOOL) return (void)INVALID(c, "condition must be bool, got %s", ty(c, cond));
  Opnd o[3] = {opnd_arg(c, "self"), opnd_arg(c, "other"), tensor_opnd(cond, "condition")};
  TpkDType dt = result_dtype(c, 2, o);
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shape(c, 3, o, &rank, dims)) return;
  put(c, sel(c, bcast(c, cond, rank, dims), mat(c, &o[0], dt, rank, dims), mat(c, &o[1], dt, rank, dims)));
}

/* masked_fill(self, mask, value): self's dtype and shape. */
static void ex_masked_fill(Call *c) {
  TpkValue *x = t_arg(c, "self"), *mask = t_arg(c, "mask");
  Opnd value = opnd_arg(c, "value");
  if (dt_of(mask) != TPK_BOOL) return (void)INVALID(c, "mask must be bool, got %s", ty(c, mask));
  if (value.v && rank_of(value.v) != 0)
    return (void)INVALID(c, "value must be a rank-0 tensor, got %s", ty(c, value.v));
  Opnd o[2] = {tensor_opnd(x, "self"), tensor_opnd(mask, "mask")};
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shape(c, 2, o, &rank, dims)) return;
  if (rank != rank_of(x) || memcmp(dims, x->type->dims, (size_t)rank * sizeof *dims) != 0)
    return (void)INVALID(c, "mask %s does not broadcast to self %s", ty(c, mask), ty(c, x));
  put(c, sel(c, bcast(c, mask, rank, dims), mat(c, &value, dt_of(x), rank, dims), x));
}

/* ---- Creation ------------------------------------------------------------------------------- */

/* A size list (no -1). */
static int size_arg(Call *c, const char *name, const TpkDim **dims) {
  int n = dims_arg(c, name, dims, MAX_LIST);
  if (c->failed) return 0;
  if (n > TPK_MAX_RANK) return INVALID(c, "argument '%s' has %d dims, at most %d are allowed", name, n, TPK_MAX_RANK), 0;
  for (int i = 0; i < n; i++)
    if (!dims[i]) return INVALID(c, "argument '%s', entry %d: -1 is not a size here", name, i), 0;
  return n < 0 ? 0 : n;
}

/* ATen's dtype for a fill value without dtype=: bool, int (i32 here), the
 * default float. */
static TpkDType fill_dtype(const Opnd *o) { return o->v ? dt_of(o->v) : opnd_dtype(o); }

static void filled(Call *c, Opnd value, TpkDType dt, int rank, const TpkDim *const *dims) {
  put(c, mat(c, &value, dt, rank, dims));
}

/* full, zeros, ones, empty (zeros: tpk does not leave memory undefined). */
static void ex_full(Call *c) {
  const TpkDim *dims[MAX_LIST];
  int n = size_arg(c, "size", dims);
  bool has_fill = strcmp(c->ov->packet, "full") == 0 || strcmp(c->ov->packet, "new_full") == 0;
  Opnd v = has_fill ? opnd_arg(c, "fill_value") : int_opnd(strcmp(c->ov->packet, "ones") == 0 || strcmp(c->ov->packet, "new_ones") == 0);
  TpkValue *like = strncmp(c->ov->packet, "new_", 4) == 0 ? t_arg(c, "self") : NULL;
  TpkDType dflt = like ? dt_of(like) : has_fill ? fill_dtype(&v) : TPK_F32;
  filled(c, v, dtype_arg(c, "dtype", dflt), n, dims);
}

/* full_like, zeros_like, ones_like, empty_like: self's shape and dtype. */
static void ex_full_like(Call *c) {
  TpkValue *x = t_arg(c, "self");
  bool has_fill = strcmp(c->ov->packet, "full_like") == 0;
  Opnd v = has_fill ? opnd_arg(c, "fill_value") : int_opnd(strcmp(c->ov->packet, "ones_like") == 0);
  filled(c, v, dtype_arg(c, "dtype", dt_of(x)), rank_of(x), x->type->dims);
}

/* fill (self's shape and dtype, from a number or a rank-0 tensor), zero_. */
static void ex_fill(Call *c) {
  TpkValue *x = t_arg(c, "self");
  Opnd v = strcmp(c->ov->packet, "zero_") == 0 ? int_opnd(0) : opnd_arg(c, "value");
  if (v.v && rank_of(v.v) != 0) return (void)INVALID(c, "value must be a rank-0 tensor, got %s", ty(c, v.v));
  filled(c, v, dt_of(x), rank_of(x), x->type->dims);
}

static void ex_scalar_tensor(Call *c) { filled(c, opnd_arg(c, "s"), dtype_arg(c, "dtype", TPK_F32), 0, NULL); }

/* arange: start + step * i for i below ceil((end - start) / step); ints (a
 * symbolic end included) give i32, floats f32, unless dtype= says. */
static void ex_arange(Call *c) {
  bool has_start = strcmp(c->ov->name, "default") != 0, has_step = strcmp(c->ov->name, "start_step") == 0;
  Opnd start = has_start ? opnd_arg(c, "start") : int_opnd(0), end = opnd_arg(c, "end");
  Opnd step = has_step ? opnd_arg(c, "step") : int_opnd(1);
  if (c->failed) return;
  if (start.v || end.v || step.v)
    return (void)UNSUPPORTED(c, "start, end and step must be numbers or symbolic sizes, not tensors");
  bool floats = start.num == 'f' || end.num == 'f' || step.num == 'f';
  TpkDType dt = dtype_arg(c, "dtype", floats ? TPK_F32 : TPK_I32);
  if (step.dim) return (void)UNSUPPORTED(c, "a symbolic step (%s) is not supported", dim_text(c, step.dim));
  if (step.f == 0) return (void)INVALID(c, "step must be nonzero");
  const TpkDim *len;
  if (floats) {
    if (start.dim || end.dim) return (void)UNSUPPORTED(c, "symbolic bounds with float arguments are not supported");
    double n = ceil((end.f - start.f) / step.f);
    if (!(n >= 0) || n > 2147483647.0)
      return (void)INVALID(c, "the bounds %g..%g with step %g give no valid length", start.f, end.f, step.f);
    len = tpk_dim_const(c->m, (int64_t)n);
  } else {
    const TpkDim *s = start.dim ? start.dim : tpk_dim_const(c->m, start.i), *e = end.dim ? end.dim : tpk_dim_const(c->m, end.i);
    len = step.i > 0 ? tpk_dim_binary(c->m, TPK_DIM_CDIV, tpk_dim_binary(c->m, TPK_DIM_SUB, e, s), tpk_dim_const(c->m, step.i))
                     : tpk_dim_binary(c->m, TPK_DIM_CDIV, tpk_dim_binary(c->m, TPK_DIM_SUB, s, e), tpk_dim_const(c->m, -step.i));
    int64_t k;
    if (!len) return (void)nomem(c);
    if (tpk_dim_is_const(len, &k) && k < 0)
      return (void)INVALID(c, "upper bound %s and step %" PRId64 " have inconsistent signs", dim_text(c, e), step.i);
  }
  TpkDType cd = floats || is_float(dt) ? TPK_F32 : TPK_I32;
  TpkValue *i = iota(c, cd, 1, &len, 0);
  if (!num_is(&step, 1)) i = op2(c, TPK_OP_MUL, i, mat(c, &step, cd, 1, &len));
  if (!num_is(&start, 0)) i = op2(c, TPK_OP_ADD, i, mat(c, &start, cd, 1, &len));
  put(c, cvt(c, i, dt));
}

/* ---- Joining ------------------------------------------------------------------------------------ */

static TpkValue *concat(Call *c, TpkValue **xs, int n, int axis) {
  if (c->failed) return NULL;
  if (n == 1) return xs[0];
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, xs[0]->type->dims, sizeof dims);
  for (int i = 1; i < n; i++) dims[axis] = tpk_dim_binary(c->m, TPK_DIM_ADD, dims[axis], xs[i]->type->dims[axis]);
  if (!dims[axis]) return nomem(c);
  const TpkType *t = tpk_type_tensor(c->m, dt_of(xs[0]), rank_of(xs[0]), dims);
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_CONCAT, n, xs, 1, &t));
  if (r) tpk_op_set_int(c->m, r->def, "axis", axis);
  return r;
}

/* cat: dtypes promoted; ATen's legacy rule skips 1-D empty tensors. */
static TpkValue *cat_values(Call *c, TpkValue **in, int nin, int64_t dim) {
  TpkValue *xs[MAX_LIST];
  Opnd o[MAX_LIST];
  int n = 0;
  for (int i = 0; i < nin; i++)
    if (!(rank_of(in[i]) == 1 && dim_is(in[i]->type->dims[0], 0))) xs[n++] = in[i];
  if (n == 0 && nin) return in[0];
  if (n == 0) return INVALID(c, "tensors must not be empty");
  for (int i = 0; i < n; i++) o[i] = tensor_opnd(xs[i], "tensors");
  TpkDType dt = result_dtype(c, n, o);
  int rank = rank_of(xs[0]);
  if (rank == 0) return INVALID(c, "zero-dimensional tensor %s cannot be concatenated", ty(c, xs[0]));
  int axis = wrap_dim(c, dim, rank, "dim", xs[0]);
  for (int i = 1; i < n && !c->failed; i++) {
    if (rank_of(xs[i]) != rank) return INVALID(c, "tensors %s and %s differ in rank", ty(c, xs[0]), ty(c, xs[i]));
    for (int d = 0; d < rank; d++)
      if (d != axis && xs[i]->type->dims[d] != xs[0]->type->dims[d])
        return INVALID(c, "tensors %s and %s differ in dim %d (only dim %d may differ)", ty(c, xs[0]), ty(c, xs[i]), d, axis);
  }
  for (int i = 0; i < n; i++) xs[i] = cvt(c, xs[i], dt);
  return concat(c, xs, n, axis);
}

static void ex_cat(Call *c) {
  TpkValue *xs[MAX_LIST];
  int n = values_arg(c, "tensors", xs, MAX_LIST);
  if (!c->failed) put(c, cat_values(c, xs, n, i_arg(c, "dim")));
}

static void ex_stack(Call *c) {
  TpkValue *xs[MAX_LIST];
  int n = values_arg(c, "tensors", xs, MAX_LIST);
  if (c->failed) return;
  if (n == 0) return (void)INVALID(c, "tensors must not be empty");
  int64_t dim = i_arg(c, "dim");
  for (int i = 0; i < n; i++) {
    if (xs[i]->type != xs[0]->type && (rank_of(xs[i]) != rank_of(xs[0]) || memcmp(xs[i]->type->dims, xs[0]->type->dims, (size_t)rank_of(xs[0]) * sizeof(void *))))
      return (void)INVALID(c, "tensors %s and %s must have one shape", ty(c, xs[0]), ty(c, xs[i]));
    xs[i] = unsqueeze(c, xs[i], dim);
  }
  put(c, cat_values(c, xs, n, dim));
}

/* ---- Normalisation --------------------------------------------------------------------------- */

/* The last k axes of x must be normalized_shape; their numbers into axes. */
static int norm_axes(Call *c, const TpkValue *x, int64_t *axes) {
  const TpkDim *shape[MAX_LIST];
  int k = size_arg(c, "normalized_shape", shape);
  if (c->failed) return 0;
  if (k == 0 || k > rank_of(x))
    return INVALID(c, "normalized_shape %s does not fit input %s", shape_text(c, k, shape), ty(c, x)), 0;
  for (int i = 0; i < k; i++) {
    axes[i] = rank_of(x) - k + i;
    if (x->type->dims[axes[i]] != shape[i])
      return INVALID(c, "input %s does not end in normalized_shape %s", ty(c, x), shape_text(c, k, shape)), 0;
  }
  return k;
}

static bool has_shape(const TpkValue *v, int rank, const TpkDim *const *dims) {
  return rank_of(v) == rank && memcmp(v->type->dims, dims, (size_t)rank * sizeof *dims) == 0;
}

/* native_layer_norm: (out, mean, rstd); mean and rstd keep the normalized
 * axes as 1 and have the input's dtype; computed in f32. */
static void ex_native_layer_norm(Call *c) {
  TpkValue *x = t_arg(c, "input"), *w = t_arg(c, "weight"), *bias = t_arg(c, "bias");
  int64_t axes[TPK_MAX_RANK];
  int k = norm_axes(c, x, axes);
  if (c->failed) return;
  if (!is_float(dt_of(x))) return (void)INVALID(c, "input must be a float tensor, got %s", ty(c, x));
  const TpkDim *const *nshape = x->type->dims + rank_of(x) - k;
  if (w && !has_shape(w, k, nshape)) return (void)INVALID(c, "weight %s must have normalized_shape %s", ty(c, w), shape_text(c, k, nshape));
  if (bias && !has_shape(bias, k, nshape))
    return (void)INVALID(c, "bias %s must have normalized_shape %s", ty(c, bias), shape_text(c, k, nshape));
  double eps = f_arg(c, "eps");
  TpkValue *xf = cvt(c, x, TPK_F32);
  TpkValue *mean = reduce(c, xf, TPK_REDUCE_MEAN, axes, k, true);
  TpkValue *xc = op2(c, TPK_OP_SUB, xf, bcast_like(c, mean, xf));
  TpkValue *var = reduce(c, op2(c, TPK_OP_MUL, xc, xc), TPK_REDUCE_MEAN, axes, k, true);
  TpkValue *rstd = op1(c, TPK_OP_RSQRT, binop_k(c, TPK_OP_ADD, var, eps));
  TpkValue *y = op2(c, TPK_OP_MUL, xc, bcast_like(c, rstd, xf));
  if (w) y = op2(c, TPK_OP_MUL, y, bcast_like(c, cvt(c, w, TPK_F32), xf));
  if (bias) y = op2(c, TPK_OP_ADD, y, bcast_like(c, cvt(c, bias, TPK_F32), xf));
  put(c, cvt(c, y, dt_of(x)));
  put(c, cvt(c, mean, dt_of(x)));
  put(c, cvt(c, rstd, dt_of(x)));
}

/* native_layer_norm_backward: (dx, dweight, dbias), each None where
 * output_mask says so (or weight, bias are None):
 *   xhat = (x - mean) * rstd, g = dy * weight,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the normalized axes,
 *   dweight = sum(dy * xhat), dbias = sum(dy) over the other axes. */
static void ex_native_layer_norm_backward(Call *c) {
  TpkValue *dy = t_arg(c, "grad_out"), *x = t_arg(c, "input"), *mean = t_arg(c, "mean"), *rstd = t_arg(c, "rstd");
  TpkValue *w = t_arg(c, "weight"), *bias = t_arg(c, "bias");
  int64_t axes[TPK_MAX_RANK], mask[MAX_LIST];
  int k = norm_axes(c, x, axes);
  int nmask = ints_arg(c, "output_mask", mask, MAX_LIST);
  if (c->failed) return;
  if (nmask != 3) return (void)INVALID(c, "output_mask must have 3 entries, got %d", nmask);
  if (!is_float(dt_of(x))) return (void)INVALID(c, "input must be a float tensor, got %s", ty(c, x));
  if (!has_shape(dy, rank_of(x), x->type->dims)) return (void)INVALID(c, "grad_out %s must have input's shape %s", ty(c, dy), ty(c, x));
  const TpkDim *stat[TPK_MAX_RANK];
  for (int i = 0; i < rank_of(x); i++) stat[i] = i < rank_of(x) - k ? x->type->dims[i] : tpk_dim_const(c->m, 1);
  if (!has_shape(mean, rank_of(x), stat) || !has_shape(rstd, rank_of(x), stat))
    return (void)INVALID(c, "mean %s and rstd %s must be %s", ty(c, mean), ty(c, rstd), shape_text(c, rank_of(x), stat));
  const TpkDim *const *nshape = x->type->dims + rank_of(x) - k;
  if (w && !has_shape(w, k, nshape)) return (void)INVALID(c, "weight %s must have normalized_shape %s", ty(c, w), shape_text(c, k, nshape));
  TpkValue *xf = cvt(c, x, TPK_F32), *dyf = cvt(c, dy, TPK_F32);
  TpkValue *rs = bcast_like(c, cvt(c, rstd, TPK_F32), xf);
  TpkValue *xhat = op2(c, TPK_OP_MUL, op2(c, TPK_OP_SUB, xf, bcast_like(c, cvt(c, mean, TPK_F32), xf)), rs);
  int64_t outer[TPK_MAX_RANK];
  int nouter = rank_of(x) - k;
  for (int i = 0; i < nouter; i++) outer[i] = i;
  if (mask[0]) {
    TpkValue *g = w ? op2(c, TPK_OP_MUL, dyf, bcast_like(c, cvt(c, w, TPK_F32), xf)) : dyf;
    TpkValue *mg = bcast_like(c, reduce(c, g, TPK_REDUCE_MEAN, axes, k, true), xf);
    TpkValue *mgx = bcast_like(c, reduce(c, op2(c, TPK_OP_MUL, g, xhat), TPK_REDUCE_MEAN, axes, k, true), xf);
    TpkValue *dx = op2(c, TPK_OP_MUL, rs, op2(c, TPK_OP_SUB, op2(c, TPK_OP_SUB, g, mg), op2(c, TPK_OP_MUL, xhat, mgx)));
    put(c, cvt(c, dx, dt_of(x)));
  } else {
    put(c, NULL);
  }
  put(c, mask[1] && w ? cvt(c, reduce(c, op2(c, TPK_OP_MUL, dyf, xhat), TPK_REDUCE_SUM, outer, nouter, false), dt_of(w)) : NULL);
  put(c, mask[2] && bias ? cvt(c, reduce(c, dyf, TPK_REDUCE_SUM, outer, nouter, false), dt_of(bias)) : NULL);
}

/* ---- Activations --------------------------------------------------------------------------- */

static const double SQRT1_2 = 0.70710678118654752440, SQRT_2_PI = 0.79788456080286535588, GELU_KAPPA = 0.044715;

static const char *gelu_mode(Call *c, char *buf, size_t n) {
  const char *a = s_arg(c, "approximate", buf, n);
  if (a && strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
    return INVALID(c, "approximate must be \"none\" or \"tanh\", got \"%s\"", a);
  return a ? a : "none";
}

static TpkValue *float_input(Call *c, const char *name) {
  TpkValue *x = t_arg(c, name);
  if (x && !is_float(dt_of(x))) return INVALID(c, "%s must be a float tensor, got %s", name, ty(c, x));
  return x;
}

/* gelu: x * Phi(x), erf or tanh form, in f32. */
static void ex_gelu(Call *c) {
  char buf[16];
  const char *mode = gelu_mode(c, buf, sizeof buf);
  TpkValue *x0 = float_input(c, "self"), *x = cvt(c, x0, TPK_F32);
  if (!mode || !x) return;
  TpkValue *inner;
  if (mode[0] == 'n') {
    inner = op1(c, TPK_OP_ERF, binop_k(c, TPK_OP_MUL, x, SQRT1_2));
  } else {
    TpkValue *cube = op2(c, TPK_OP_MUL, op2(c, TPK_OP_MUL, x, x), x);
    inner = op1(c, TPK_OP_TANH, binop_k(c, TPK_OP_MUL, op2(c, TPK_OP_ADD, x, binop_k(c, TPK_OP_MUL, cube, GELU_KAPPA)), SQRT_2_PI));
  }
  TpkValue *y = op2(c, TPK_OP_MUL, binop_k(c, TPK_OP_MUL, x, 0.5), binop_k(c, TPK_OP_ADD, inner, 1.0));
  put(c, cvt(c, y, dt_of(x0)));
}

/* gelu_backward: dy * dgelu/dx, ATen's formulas. */
static void ex_gelu_backward(Call *c) {
  char buf[16];
  const char *mode = gelu_mode(c, buf, sizeof buf);
  TpkValue *x0 = float_input(c, "self"), *dy0 = float_input(c, "grad_output");
  if (!mode || !x0 || !dy0) return;
  Opnd o[2] = {tensor_opnd(dy0, "grad_output"), tensor_opnd(x0, "self")};
  TpkValue *v[2] = {0};
  TpkDType out = result_dtype(c, 2, o);
  operands(c, 2, o, TPK_F32, v);
  TpkValue *dy = v[0], *x = v[1], *d;
  if (!x) return;
  if (mode[0] == 'n') {
    TpkValue *cdf = binop_k(c, TPK_OP_MUL, binop_k(c, TPK_OP_ADD, op1(c, TPK_OP_ERF, binop_k(c, TPK_OP_MUL, x, SQRT1_2)), 1.0), 0.5);
    TpkValue *pdf = binop_k(c, TPK_OP_MUL, op1(c, TPK_OP_EXP, binop_k(c, TPK_OP_MUL, op2(c, TPK_OP_MUL, x, x), -0.5)), SQRT_2_PI * 0.5);
    d = op2(c, TPK_OP_ADD, cdf, op2(c, TPK_OP_MUL, x, pdf));
  } else {
    TpkValue *x2 = op2(c, TPK_OP_MUL, x, x), *x3 = op2(c, TPK_OP_MUL, x2, x);
    TpkValue *t = op1(c, TPK_OP_TANH, binop_k(c, TPK_OP_MUL, op2(c, TPK_OP_ADD, x, binop_k(c, TPK_OP_MUL, x3, GELU_KAPPA)), SQRT_2_PI));
    TpkValue *left = binop_k(c, TPK_OP_MUL, x, 0.5), *right = binop_k(c, TPK_OP_ADD, t, 1.0);
    TpkValue *dleft = binop_k(c, TPK_OP_MUL, right, 0.5);
    TpkValue *one_minus_t2 = op2(c, TPK_OP_SUB, splat(c, t, 1.0), op2(c, TPK_OP_MUL, t, t));
    TpkValue *dinner = binop_k(c, TPK_OP_MUL, binop_k(c, TPK_OP_ADD, binop_k(c, TPK_OP_MUL, x2, 3 * GELU_KAPPA), 1.0), SQRT_2_PI);
    d = op2(c, TPK_OP_ADD, dleft, op2(c, TPK_OP_MUL, left, op2(c, TPK_OP_MUL, one_minus_t2, dinner)));
  }
  put(c, cvt(c, op2(c, TPK_OP_MUL, dy, d), out));
}

/* ---- The table -------------------------------------------------------------------------- */

#define POINTWISE_ALPHA "Tensor self, Tensor other, *, Scalar alpha=1"

static const Overload OVERLOADS[] = {
    {"add", "Tensor", POINTWISE_ALPHA, ex_add, 0},
    {"add", "Scalar", "Tensor self, Scalar other, Scalar alpha=1", ex_add, 0},
    {"sub", "Tensor", POINTWISE_ALPHA, ex_sub, 0},
    {"sub", "Scalar", "Tensor self, Scalar other, Scalar alpha=1", ex_sub, 0},
    {"rsub", "Tensor", POINTWISE_ALPHA, ex_rsub, 0},
    {"rsub", "Scalar", "Tensor self, Scalar other, Scalar alpha=1", ex_rsub, 0},
    {"mul", "Tensor", "Tensor self, Tensor other", ex_mul, 0},
    {"mul", "Scalar", "Tensor self, Scalar other", ex_mul, 0},
    {"div", "Tensor", "Tensor self, Tensor other", ex_div, 0},
    {"div", "Scalar", "Tensor self, Scalar other", ex_div, 0},
    {"div", "Tensor_mode", "Tensor self, Tensor other, *, str? rounding_mode", ex_div, 0},
    {"div", "Scalar_mode", "Tensor self, Scalar other, *, str? rounding_mode", ex_div, 0},
    {"neg", "default", "Tensor self", ex_neg, 0},
    {"abs", "default", "Tensor self", ex_abs, 0},
    {"exp", "default", "Tensor self", ex_exp, 0},
    {"log", "default", "Tensor self", ex_log, 0},
    {"sqrt", "default", "Tensor self", ex_sqrt, 0},
    {"rsqrt", "default", "Tensor self", ex_rsqrt, 0},
    {"tanh", "default", "Tensor self", ex_tanh, 0},
    {"sigmoid", "default", "Tensor self", ex_sigmoid, 0},
    {"erf", "default", "Tensor self", ex_erf, 0},
    {"relu", "default", "Tensor self", ex_relu, 0},
    {"alias", "default", "Tensor self", ex_identity, 0},
    {"clone", "default", "Tensor self, *, MemoryFormat? memory_format=None", ex_identity, 0},
    {"detach", "default", "Tensor self", ex_identity, 0},
    {"mm", "default", "Tensor self, Tensor mat2", ex_mm, 0},
    {"bmm", "default", "Tensor self, Tensor mat2", ex_bmm, 0},
    {"addmm", "default", "Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1", ex_addmm, 0},
    {"sum", "default", "Tensor self, *, ScalarType? dtype=None", ex_sum, 0},
    {"sum", "dim_IntList", "Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None", ex_sum, 0},
    {"mean", "default", "Tensor self, *, ScalarType? dtype=None", ex_mean, 0},
    {"mean", "dim", "Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None", ex_mean, 0},
    {"view", "default", "Tensor self, SymInt[] size", ex_view, 0},
    {"_unsafe_view", "default", "Tensor self, SymInt[] size", ex_view, 0},
    {"reshape", "default", "Tensor self, SymInt[] shape", ex_view, 0},
    {"expand", "default", "Tensor self, SymInt[] size, *, bool implicit=False", ex_expand, 0},
    {"permute", "default", "Tensor self, int[] dims", ex_permute, 0},
    {"transpose", "int", "Tensor self, int dim0, int dim1", ex_transpose, 0},
    {"t", "default", "Tensor self", ex_t, 0},
    {"unsqueeze", "default", "Tensor self, int dim", ex_unsqueeze, 0},
    {"_softmax", "default", "Tensor self, int dim, bool half_to_float", ex_softmax, 0},
    {"_log_softmax", "default", "Tensor self, int dim, bool half_to_float", ex_log_softmax, 0},
    {"softmax", "int", "Tensor self, int dim, ScalarType? dtype=None", ex_softmax, 0},
    {"log_softmax", "int", "Tensor self, int dim, ScalarType? dtype=None", ex_log_softmax, 0},
    {"eq", "Tensor", "Tensor self, Tensor other", ex_eq, 0},
    {"eq", "Scalar", "Tensor self, Scalar other", ex_eq, 0},
    {"ne", "Tensor", "Tensor self, Tensor other", ex_ne, 0},
    {"ne", "Scalar", "Tensor self, Scalar other", ex_ne, 0},
    {"lt", "Tensor", "Tensor self, Tensor other", ex_lt, 0},
    {"lt", "Scalar", "Tensor self, Scalar other", ex_lt, 0},
    {"le", "Tensor", "Tensor self, Tensor other", ex_le, 0},
    {"le", "Scalar", "Tensor self, Scalar other", ex_le, 0},
    {"gt", "Tensor", "Tensor self, Tensor other", ex_gt, 0},
    {"gt", "Scalar", "Tensor self, Scalar other", ex_gt, 0},
    {"ge", "Tensor", "Tensor self, Tensor other", ex_ge, 0},
    {"ge", "Scalar", "Tensor self, Scalar other", ex_ge, 0},
    {"logical_and", "default", "Tensor self, Tensor other", ex_logical_and, 0},
    {"logical_or", "default", "Tensor self, Tensor other", ex_logical_or, 0},
    {"logical_not", "default", "Tensor self", ex_logical_not, 0},
    {"where", "self", "Tensor condition, Tensor self, Tensor other", ex_where, 0},
    {"where", "ScalarOther", "Tensor condition, Tensor self, Scalar other", ex_where, 0},
    {"where", "ScalarSelf", "Tensor condition, Scalar self, Tensor other", ex_where, 0},
    {"where", "Scalar", "Tensor condition, Scalar self, Scalar other", ex_where, 0},
    {"masked_fill", "Scalar", "Tensor self, Tensor mask, Scalar value", ex_masked_fill, 0},
    {"masked_fill", "Tensor", "Tensor self, Tensor mask, Tensor value", ex_masked_fill, 0},
    {"full", "default", "SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"zeros", "default", "SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"ones", "default", "SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"empty", "memory_format", "SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", ex_full, 0},
    {"new_full", "default", "Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"new_zeros", "default", "Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"new_ones", "default", "Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"new_empty", "default", "Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"full_like", "default", "Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", ex_full_like, 0},
    {"zeros_like", "default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", ex_full_like, 0},
    {"ones_like", "default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", ex_full_like, 0},
    {"empty_like", "default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", ex_full_like, 0},
    {"fill", "Scalar", "Tensor self, Scalar value", ex_fill, 0},
    {"fill", "Tensor", "Tensor self, Tensor value", ex_fill, 0},
    {"scalar_tensor", "default", "Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_scalar_tensor, 0},
    {"arange", "default", "Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_arange, 0},
    {"arange", "start", "Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_arange, 0},
    {"arange", "start_step", "Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_arange, 0},
    {"cat", "default", "Tensor[] tensors, int dim=0", ex_cat, 0},
    {"stack", "default", "Tensor[] tensors, int dim=0", ex_stack, 0},
    {"native_layer_norm", "default", "Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps", ex_native_layer_norm, 0},
    {"native_layer_norm_backward", "default", "Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask", ex_native_layer_norm_backward, 0},
    {"gelu", "default", "Tensor self, *, str approximate=\"none\"", ex_gelu, 0},
    {"gelu_backward", "default", "Tensor grad_output, Tensor self, *, str approximate=\"none\"", ex_gelu_backward, 0},
};

enum { NOVERLOADS = (int)TPK_ARRAY_LEN(OVERLOADS) };

/* ---- Lookup and the vocabulary ------------------------------------------------------------- */

/* The packets, in table order (a packet's overloads are adjacent). */
int tpk_aten_count(void) {
  int n = 0;
  for (int i = 0; i < NOVERLOADS; i++) n += i == 0 || strcmp(OVERLOADS[i].packet, OVERLOADS[i - 1].packet) != 0;
  return n;
}

const char *tpk_aten_name(int k) {
  for (int i = 0, n = -1; i < NOVERLOADS; i++) {
    n += i == 0 || strcmp(OVERLOADS[i].packet, OVERLOADS[i - 1].packet) != 0;
    if (n == k) return OVERLOADS[i].packet;
  }
  return NULL;
}

/* "aten::add.Tensor", "aten.add.Tensor", "add.Tensor", "add" -> packet
 * "add" and overload "Tensor" (or ""). */
static bool split_name(const char *op, char *packet, size_t pn, char *overload, size_t on) {
  if (strncmp(op, "aten::", 6) == 0) op += 6;
  else if (strncmp(op, "aten.", 5) == 0) op += 5;
  const char *dot = strchr(op, '.');
  size_t len = dot ? (size_t)(dot - op) : strlen(op);
  if (len == 0 || len >= pn || (dot && strlen(dot + 1) >= on)) return false;
  memcpy(packet, op, len);
  packet[len] = 0;
  snprintf(overload, on, "%s", dot ? dot + 1 : "");
  return true;
}

/* In-place ops: the result replaces self, so it keeps self's shape and must
 * be castable to self's dtype (ATen's canCast: no float into an integer, no
 * number into a bool). */
static void inplace_result(Call *c) {
  TpkValue *self = t_arg(c, "self"), *r = c->nouts ? c->outs[0] : NULL;
  if (!self || !r || c->failed) return;
  if (r->type->rank != self->type->rank || memcmp(r->type->dims, self->type->dims, (size_t)rank_of(self) * sizeof *self->type->dims) != 0)
    return (void)INVALID(c, "the result's shape %s differs from self %s, which an in-place op cannot change",
                         shape_text(c, rank_of(r), r->type->dims), ty(c, self));
  TpkDType from = dt_of(r), to = dt_of(self);
  if ((is_float(from) && !is_float(to)) || (from != TPK_BOOL && to == TPK_BOOL))
    return (void)INVALID(c, "the result's dtype %s cannot be cast to self's %s (%s)", dt_name(from), dt_name(to), ty(c, self));
  c->outs[0] = cvt(c, r, to);
}

TpkStatus tpk_aten_build(TpkGraphBuilder *gb, const char *op, const TpkArg *args, int nargs, TpkValue *const *values,
                         int nvalues, TpkValue **outs, int max, int *nouts, TpkError *err) {
  *nouts = 0;
  char packet[96], overload[64];
  if (!op || !split_name(op, packet, sizeof packet, overload, sizeof overload))
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s' is not supported by tpk's graphs (%d ops are: see tpk_graph_op_name)",
                     op ? op : "(null)", tpk_aten_count());
  int first = -1, last = -1;
  for (int i = 0; i < NOVERLOADS; i++)
    if (strcmp(OVERLOADS[i].packet, packet) == 0) {
      if (first < 0) first = i;
      last = i;
    }
  if (first < 0)
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s' is not supported by tpk's graphs (%d ops are: see tpk_graph_op_name)",
                     packet, tpk_aten_count());
  if (overload[0] && strcmp(overload, "default") != 0) {
    int k = first;
    while (k <= last && strcmp(OVERLOADS[k].name, overload) != 0) k++;
    if (k > last)
      return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s': tpk knows no overload '%s' of %s", op, overload, packet);
    first = last = k;
  } else if (overload[0]) { /* ".default": ATen's unnamed overload */
    int k = first;
    while (k <= last && strcmp(OVERLOADS[k].name, "default") != 0) k++;
    if (k > last) return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s': %s has no default overload", op, packet);
    first = last = k;
  }
  Call *c = calloc(1, sizeof *c);
  if (!c) return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory", packet);
  c->gb = gb;
  c->m = gb->m;
  c->b = &gb->b;
  c->values = values;
  c->nvalues = nvalues;
  c->err = err;
  tpk_arena_init(&c->scratch, 0);
  /* The first overload whose schema the arguments fit. */
  TpkStr why = {0};
  const Overload *chosen = NULL;
  for (int i = first; i <= last && !chosen; i++) {
    char reason[300];
    if (bind(c, &OVERLOADS[i], args, nargs, reason, sizeof reason))
      chosen = &OVERLOADS[i];
    else if (first == last)
      tpk_str_printf(&why, "%s", reason);
    else
      tpk_str_printf(&why, "%s%s.%s: %s", why.len ? "; " : "", packet, OVERLOADS[i].name, reason);
  }
  TpkStatus st = TPK_OK;
  if (!chosen) {
    st = tpk_error(err, strstr(why.data ? why.data : "", "a bug in tpk") ? TPK_ERR_INTERNAL : TPK_ERR_INVALID, "%s: %s%s",
                   packet, first == last ? "" : "the arguments fit no overload: ", why.data ? why.data : "");
  } else {
    TpkOp *mark = gb->f->body->last;
    chosen->expand(c);
    if (!c->failed && (chosen->flags & INPLACE)) inplace_result(c);
    if (!c->failed && c->nouts > max) INVALID(c, "gives %d results, room was given for %d", c->nouts, max);
    if (!c->failed && gb->m->arena.exhausted) nomem(c);
    if (!c->failed && c->nouts == 0) fail(c, TPK_ERR_INTERNAL, "built no result (a bug in tpk)");
    if (c->failed) {
      st = err && err->code ? err->code : TPK_ERR_INVALID;
      while (gb->f->body->last != mark) tpk_op_erase(gb->f->body->last);
    } else {
      /* the results built here carry the op's name when printed */
      const char *hint = tpk_module_intern(gb->m, packet, strlen(packet));
      for (int i = 0; i < c->nouts; i++) {
        TpkValue *v = c->outs[i];
        outs[i] = v;
        if (!v || !v->def) continue;
        for (TpkOp *o = mark ? mark->next : gb->f->body->first; o; o = o->next)
          if (o == v->def && o->opcode != TPK_OP_CALL) v->name = hint;
      }
      *nouts = c->nouts;
    }
  }
  tpk_str_free(&why);
  tpk_arena_free(&c->scratch);
  free(c);
  return st;
}
