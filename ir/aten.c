/*
 * aten.c — the graph builder's vocabulary: ATen ops, as ATen names them,
 * expanded into whole-array IR ops (graph.h).
 *
 * One table row per ATen overload (OVERLOADS at the end): its packet and
 * overload name and its arguments written as ATen's schema writes them
 * ("Tensor self, Tensor other, *, Scalar alpha=1"), so names, kinds,
 * defaults and keyword-only arguments are ATen's. An op is looked up by
 * packet ("add", "aten::add.Tensor" and "aten.add.Tensor" name it too); the
 * overload is the one named if the arguments fit its schema (by kind: a
 * tensor, a number, a list...), else the first of the packet they fit; when
 * none does, a number given for a Tensor is wrapped as ATen wraps it
 * (sub.Tensor(1, x) in FX graphs). Each row's expand function then checks
 * what kinds cannot say (shapes, dtypes, ranges) and builds the IR.
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

enum { MAX_PARAMS = 12, MAX_OUTS = 64, MAX_LIST = 64 };

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

static bool has_shape(const TpkValue *v, int rank, const TpkDim *const *dims) {
  return rank_of(v) == rank && memcmp(v->type->dims, dims, (size_t)rank * sizeof *dims) == 0;
}

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
  /* Tensor?[] (index_put's indices) as Tensor[]: a list argument carries no
   * None, so the bridges refuse x[:, i] = v before it gets here */
  } TYPES[] = {{"Tensor", K_TENSOR},   {"Tensor[]", K_TENSORS}, {"Tensor?[]", K_TENSORS}, {"Scalar", K_SCALAR},   {"int", K_INT},
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

/* Does a fit parameter p? When not, why (into why). With wrap_numbers, a
 * number fits a Tensor (ATen wraps it: sub.Tensor(1, x) in FX graphs). */
static bool fits(const Call *c, const Param *p, const TpkArg *a, bool wrap_numbers, char *why, size_t n) {
  bool ok = false;
  if (a->kind == TPK_ARG_NONE) {
    ok = p->optional || p->kind == K_ANY;
  } else if (a->kind == TPK_ARG_VALUE && (a->value < 0 || a->value >= c->nvalues || !c->values[a->value])) {
    snprintf(why, n, "argument '%s': %d is not a value of this graph", p->name, a->value);
    return false;
  } else {
    switch (p->kind) {
    case K_TENSOR:
      ok = a->kind == TPK_ARG_VALUE ||
           (wrap_numbers && (a->kind == TPK_ARG_INT || a->kind == TPK_ARG_FLOAT || a->kind == TPK_ARG_BOOL));
      break;
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
static bool bind(Call *c, const Overload *ov, const TpkArg *args, int nargs, bool wrap_numbers, char *why, size_t n) {
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
    if (!fits(c, &c->params[slot], a, wrap_numbers, why, n)) return false;
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

/* SymInt parameters that are positions in a tensor, not sizes. */
static bool is_index_param(const Param *p) {
  static const char *const INDEX[] = {"index", "start", "end", "step", "padding_idx", "ignore_index"};
  if (p->kind != K_SYMINT) return false;
  for (size_t i = 0; i < TPK_ARRAY_LEN(INDEX); i++)
    if (strcmp(p->name, INDEX[i]) == 0) return true;
  return false;
}

/* Which of args bind to index parameters (tpk_gb_index_args). */
static uint64_t index_args(const Call *c, const TpkArg *args, int nargs) {
  uint64_t mask = 0;
  for (int j = 0; j < c->nparams; j++)
    for (int i = 0; i < nargs && i < 64 && is_index_param(&c->params[j]); i++)
      if (c->arg[j] == &args[i]) mask |= (uint64_t)1 << i;
  return mask;
}

uint64_t tpk_gb_index_args(const TpkGraphBuilder *gb) { return gb->index_args; }

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

static TpkValue *konst(Call *c, TpkDType dt, double x);
static TpkValue *dim_value(Call *c, const TpkDim *d);
static const TpkDim *dim_arg(Call *c, const char *name);

/* A Tensor argument (NULL for None); a number given for it (see fits) is a
 * rank-0 constant of its kind's default dtype (bool, i32, f32). */
static TpkValue *t_arg(Call *c, const char *name) {
  const TpkArg *a = arg(c, name);
  if (!a) return NULL;
  switch (a->kind) {
  case TPK_ARG_VALUE: return c->values[a->value];
  case TPK_ARG_BOOL: return konst(c, TPK_BOOL, (double)(a->i != 0));
  case TPK_ARG_FLOAT: return konst(c, TPK_F32, a->f);
  case TPK_ARG_INT: return a->sym ? dim_value(c, dim_arg(c, name)) : konst(c, TPK_I32, (double)a->i);
  default: return NULL;
  }
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
  TpkDType d = tpk_dtype_promote(a, b);
  return d == TPK_DTYPE_COUNT ? TPK_I32 : d; /* u32 with a signed type: ATen's int64, tpk's i32 */
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
  case TPK_U16: return (uint16_t)v;
  case TPK_U32: return (uint32_t)v;
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
  if (is_num(&other) && !other.dim && is_num(&alpha) && !alpha.dim) { /* two numbers: one constant */
    bool f = other.num == 'f' || alpha.num == 'f';
    other = f ? (Opnd){.num = 'f', .f = other.f * alpha.f, .wrapped = true, .name = other.name}
              : (Opnd){.num = 'i', .i = other.i * alpha.i, .f = (double)(other.i * alpha.i), .wrapped = true, .name = other.name};
    alpha = int_opnd(1);
  }
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

/* linalg_vector_norm: (sum |x|^ord)^(1/ord) over `dim` (every dim when
 * None or []), in `dtype` (else x's float dtype, f32 for integers); ord
 * inf / -inf the largest / smallest |x|, 0 the count of nonzeros. ord is
 * built in (the expansion depends on it): a tensor for it is refused. */
static void ex_linalg_vector_norm(Call *c) {
  TpkValue *x = t_arg(c, "self");
  const TpkArg *o = arg(c, "ord");
  if (!x || !o) return;
  if (o->kind == TPK_ARG_VALUE) return (void)INVALID(c, "ord must be a number, not a tensor");
  double ord = f_arg(c, "ord");
  TpkDType dt = dtype_arg(c, "dtype", is_float(dt_of(x)) ? dt_of(x) : TPK_F32);
  if (!is_float(dt)) return (void)INVALID(c, "dtype must be a float dtype, got %s", dt_name(dt));
  int64_t axes[TPK_MAX_RANK];
  int n = axes_arg(c, "dim", x, axes);
  bool keep = b_arg(c, "keepdim");
  TpkValue *a = op1(c, TPK_OP_ABS, cvt(c, x, dt)), *r;
  if (isinf(ord)) r = reduce(c, a, ord > 0 ? TPK_REDUCE_MAX : TPK_REDUCE_MIN, axes, n, keep);
  else if (ord == 0) r = reduce(c, cvt(c, op2(c, TPK_OP_NE, a, splat(c, a, 0)), dt), TPK_REDUCE_SUM, axes, n, keep);
  else if (ord == 1) r = reduce(c, a, TPK_REDUCE_SUM, axes, n, keep);
  else if (ord == 2) r = op1(c, TPK_OP_SQRT, reduce(c, op2(c, TPK_OP_MUL, a, a), TPK_REDUCE_SUM, axes, n, keep));
  else {
    r = reduce(c, binop_k(c, TPK_OP_POW, a, ord), TPK_REDUCE_SUM, axes, n, keep);
    r = binop_k(c, TPK_OP_POW, r, 1 / ord);
  }
  put(c, r);
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
  for (int i = 1; i < n; i++)
    if (!has_shape(xs[i], rank_of(xs[0]), xs[0]->type->dims))
      return (void)INVALID(c, "tensors %s and %s must have one shape", ty(c, xs[0]), ty(c, xs[i]));
  for (int i = 0; i < n; i++) xs[i] = unsqueeze(c, xs[i], dim);
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

/* ---- More pointwise ops ---------------------------------------------------------------------------- */

static void ex_maximum(Call *c) { put(c, arith(c, TPK_OP_MAX, opnd_arg(c, "self"), opnd_arg(c, "other"), TPK_DTYPE_COUNT)); }
static void ex_minimum(Call *c) { put(c, arith(c, TPK_OP_MIN, opnd_arg(c, "self"), opnd_arg(c, "other"), TPK_DTYPE_COUNT)); }

/* pow: exponents ATen's kernel special-cases are computed as it does
 * (x*x for 2, sqrt for 0.5, ...); integer powers by squaring. */
static TpkValue *int_power(Call *c, TpkValue *x, int64_t e) {
  TpkValue *r = splat(c, x, 1);
  for (TpkValue *p = x; e > 0 && !c->failed; e >>= 1) {
    if (e & 1) r = op2(c, TPK_OP_MUL, r, p);
    if (e > 1) p = op2(c, TPK_OP_MUL, p, p);
  }
  return r;
}

static void ex_pow(Call *c) {
  Opnd base = opnd_arg(c, "self"), e = opnd_arg(c, "exponent");
  Opnd o[2] = {base, e};
  TpkDType out = result_dtype(c, 2, o);
  if (c->failed) return;
  if (!is_float(out)) {
    if (e.v || e.dim) return (void)UNSUPPORTED(c, "integer powers with a tensor exponent (%s) are not supported", e.v ? ty(c, e.v) : "a symbolic size");
    if (e.i < 0) return (void)INVALID(c, "integers to negative integer powers are not allowed (as in PyTorch)");
    TpkValue *v[2] = {0};
    operands(c, 1, o, out, v);
    return put(c, int_power(c, v[0], e.i));
  }
  TpkDType cd = has_number(2, o) ? opmath(out) : out;
  TpkValue *v[2] = {0};
  if (is_num(&e) && !e.dim) {
    operands(c, 1, o, cd, v);
    TpkValue *x = v[0], *r = NULL;
    if (e.f == 0) r = splat(c, x, 1);
    else if (e.f == 1) r = x;
    else if (e.f == 2) r = op2(c, TPK_OP_MUL, x, x);
    else if (e.f == 3) r = op2(c, TPK_OP_MUL, op2(c, TPK_OP_MUL, x, x), x);
    else if (e.f == 0.5) r = op1(c, TPK_OP_SQRT, x);
    else if (e.f == -0.5) r = op1(c, TPK_OP_RSQRT, x);
    else if (e.f == -1) r = op2(c, TPK_OP_DIV, splat(c, x, 1), x);
    else if (e.f == -2) r = op2(c, TPK_OP_DIV, splat(c, x, 1), op2(c, TPK_OP_MUL, x, x));
    else r = op2(c, TPK_OP_POW, x, splat(c, x, e.f));
    return put(c, cvt(c, r, out));
  }
  operands(c, 2, o, cd, v);
  put(c, cvt(c, op2(c, TPK_OP_POW, v[0], v[1]), out));
}

/* remainder: Python's modulo (the sign of the divisor); fmod: C's. */
static void mod_like(Call *c, bool python) {
  Opnd o[2] = {opnd_arg(c, "self"), opnd_arg(c, "other")};
  TpkDType out = result_dtype(c, 2, o);
  if (out == TPK_BOOL) return (void)INVALID(c, "is not supported for bool tensors (as in PyTorch)");
  TpkDType cd = has_number(2, o) ? opmath(out) : out;
  TpkValue *v[2] = {0};
  operands(c, 2, o, cd, v);
  TpkValue *r = op2(c, TPK_OP_REM, v[0], v[1]);
  if (python) { /* add the divisor where the remainder is nonzero and its sign differs */
    TpkValue *zero = splat(c, r, 0);
    TpkValue *fix = op2(c, TPK_OP_AND, op2(c, TPK_OP_NE, r, zero), op2(c, TPK_OP_NE, op2(c, TPK_OP_LT, r, zero), op2(c, TPK_OP_LT, v[1], zero)));
    r = sel(c, fix, op2(c, TPK_OP_ADD, r, v[1]), r);
  }
  put(c, cvt(c, r, out));
}

static void ex_remainder(Call *c) { mod_like(c, true); }
static void ex_fmod(Call *c) { mod_like(c, false); }

/* bitwise and, or (integers and bools), not. */
static void bitwise(Call *c, TpkOpcode opc) {
  Opnd o[2] = {opnd_arg(c, "self"), opnd_arg(c, "other")};
  TpkDType dt = result_dtype(c, 2, o);
  if (is_float(dt)) return (void)INVALID(c, "needs integer or bool operands, got %s", dt_name(dt));
  TpkValue *v[2] = {0};
  operands(c, 2, o, dt, v);
  put(c, op2(c, opc, v[0], v[1]));
}

static void ex_bitwise_and(Call *c) { bitwise(c, TPK_OP_AND); }
static void ex_bitwise_or(Call *c) { bitwise(c, TPK_OP_OR); }

static void ex_bitwise_not(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (is_float(dt_of(x))) return (void)INVALID(c, "needs an integer or bool tensor, got %s", ty(c, x));
  put(c, op1(c, TPK_OP_NOT, x));
}

/* clamp (Scalar or Tensor bounds, promoted), clamp_min, clamp_max:
 * min(max(x, lo), hi), NaN kept. */
static void clamp_between(Call *c, Opnd x, Opnd lo, Opnd hi, bool has_lo, bool has_hi, TpkDType out) {
  if (!has_lo && !has_hi) return (void)INVALID(c, "at least one of 'min' and 'max' must be given");
  Opnd o[3] = {x, has_lo ? lo : x, has_hi ? hi : x};
  if (out == TPK_DTYPE_COUNT) out = result_dtype(c, 3, o);
  TpkValue *v[3] = {0};
  operands(c, 3, o, out, v);
  TpkValue *r = v[0];
  if (has_lo) r = op2(c, TPK_OP_MAX, r, v[1]);
  if (has_hi) r = op2(c, TPK_OP_MIN, r, v[2]);
  put(c, r);
}

static void ex_clamp(Call *c) {
  clamp_between(c, opnd_arg(c, "self"), opnd_arg(c, "min"), opnd_arg(c, "max"), !is_none(c, "min"), !is_none(c, "max"),
                TPK_DTYPE_COUNT);
}

static void ex_clamp_min(Call *c) { clamp_between(c, opnd_arg(c, "self"), opnd_arg(c, "min"), opnd_arg(c, "min"), true, false, TPK_DTYPE_COUNT); }
static void ex_clamp_max(Call *c) { clamp_between(c, opnd_arg(c, "self"), opnd_arg(c, "max"), opnd_arg(c, "max"), false, true, TPK_DTYPE_COUNT); }

static void ex_hardtanh(Call *c) {
  TpkValue *x = t_arg(c, "self");
  clamp_between(c, tensor_opnd(x, "self"), opnd_arg(c, "min_val"), opnd_arg(c, "max_val"), true, true, dt_of(x));
}

static void ex_leaky_relu(Call *c) {
  TpkValue *x = float_input(c, "self");
  Opnd slope = opnd_arg(c, "negative_slope");
  if (!x) return;
  TpkDType cd = opmath(dt_of(x));
  TpkValue *xf = cvt(c, x, cd);
  TpkValue *neg = op2(c, TPK_OP_MUL, xf, mat(c, &slope, cd, rank_of(x), x->type->dims));
  put(c, cvt(c, sel(c, op2(c, TPK_OP_GT, xf, splat(c, xf, 0)), xf, neg), dt_of(x)));
}

static void ex_reciprocal(Call *c) {
  TpkValue *x = t_arg(c, "self");
  x = cvt(c, x, x && is_float(dt_of(x)) ? dt_of(x) : TPK_F32);
  put(c, op2(c, TPK_OP_DIV, splat(c, x, 1), x));
}

static void ex_square(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (x && dt_of(x) == TPK_BOOL) x = cvt(c, x, TPK_I32); /* ATen's pow(bool, 2) is an integer */
  put(c, op2(c, TPK_OP_MUL, x, x));
}

/* floor, ceil, trunc, round: integers are their own rounding. */
static void rounding(Call *c, int how) {
  TpkValue *x = t_arg(c, "self");
  if (!x || !is_float(dt_of(x))) return put(c, x);
  if (how == 'f') return put(c, op1(c, TPK_OP_FLOOR, x));
  if (how == 'c') return put(c, op1(c, TPK_OP_CEIL, x));
  TpkValue *xf = cvt(c, x, TPK_F32);
  if (how == 't') return put(c, cvt(c, trunc_float(c, xf), dt_of(x)));
  /* half to even: up when the fraction is over a half, or a half above an odd number */
  TpkValue *f = op1(c, TPK_OP_FLOOR, xf), *frac = op2(c, TPK_OP_SUB, xf, f);
  TpkValue *half = splat(c, xf, 0.5);
  TpkValue *odd = op2(c, TPK_OP_NE, op2(c, TPK_OP_REM, f, splat(c, xf, 2)), splat(c, xf, 0));
  TpkValue *up = op2(c, TPK_OP_OR, op2(c, TPK_OP_GT, frac, half), op2(c, TPK_OP_AND, op2(c, TPK_OP_EQ, frac, half), odd));
  put(c, cvt(c, sel(c, up, op2(c, TPK_OP_ADD, f, splat(c, xf, 1)), f), dt_of(x)));
}

static void ex_floor(Call *c) { rounding(c, 'f'); }
static void ex_ceil(Call *c) { rounding(c, 'c'); }
static void ex_trunc(Call *c) { rounding(c, 't'); }
static void ex_round(Call *c) { rounding(c, 'r'); }

static void ex_sign(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x || dt_of(x) == TPK_BOOL) return put(c, x);
  TpkValue *zero = splat(c, x, 0);
  TpkValue *r = sel(c, op2(c, TPK_OP_GT, x, zero), splat(c, x, 1), sel(c, op2(c, TPK_OP_LT, x, zero), splat(c, x, -1), zero));
  if (is_float(dt_of(x))) r = sel(c, op2(c, TPK_OP_NE, x, x), x, r); /* NaN stays NaN */
  put(c, r);
}

/* ---- Activations and their gradients ------------------------------------------------------------ */

/* The float inputs of a gradient formula, promoted and broadcast, in f32. */
static TpkDType grad_operands(Call *c, const char *a, const char *b, TpkValue **v) {
  TpkValue *x = float_input(c, a), *y = float_input(c, b);
  if (!x || !y) return TPK_F32;
  Opnd o[2] = {tensor_opnd(x, a), tensor_opnd(y, b)};
  TpkDType out = result_dtype(c, 2, o);
  operands(c, 2, o, TPK_F32, v);
  return out;
}

static void ex_silu(Call *c) {
  TpkValue *x0 = float_input(c, "self"), *x = cvt(c, x0, TPK_F32);
  if (x) put(c, cvt(c, op2(c, TPK_OP_MUL, x, op1(c, TPK_OP_SIGMOID, x)), dt_of(x0)));
}

/* dy * s * (1 + x * (1 - s)), s = sigmoid(x) */
static void ex_silu_backward(Call *c) {
  TpkValue *v[2] = {0};
  TpkDType out = grad_operands(c, "grad_output", "self", v);
  TpkValue *dy = v[0], *x = v[1];
  if (!x) return;
  TpkValue *s = op1(c, TPK_OP_SIGMOID, x);
  TpkValue *inner = binop_k(c, TPK_OP_ADD, op2(c, TPK_OP_MUL, x, op2(c, TPK_OP_SUB, splat(c, s, 1), s)), 1);
  put(c, cvt(c, op2(c, TPK_OP_MUL, dy, op2(c, TPK_OP_MUL, s, inner)), out));
}

/* dy * (1 - y) * y */
static void ex_sigmoid_backward(Call *c) {
  TpkValue *v[2] = {0};
  TpkDType out = grad_operands(c, "grad_output", "output", v);
  if (!v[1]) return;
  put(c, cvt(c, op2(c, TPK_OP_MUL, op2(c, TPK_OP_MUL, v[0], op2(c, TPK_OP_SUB, splat(c, v[1], 1), v[1])), v[1]), out));
}

/* dy * (1 - y * y) */
static void ex_tanh_backward(Call *c) {
  TpkValue *v[2] = {0};
  TpkDType out = grad_operands(c, "grad_output", "output", v);
  if (!v[1]) return;
  put(c, cvt(c, op2(c, TPK_OP_MUL, v[0], op2(c, TPK_OP_SUB, splat(c, v[1], 1), op2(c, TPK_OP_MUL, v[1], v[1]))), out));
}

/* relu's gradient: dy where self > threshold, else 0. */
static void ex_threshold_backward(Call *c) {
  Opnd o[3] = {opnd_arg(c, "grad_output"), opnd_arg(c, "self"), opnd_arg(c, "threshold")};
  TpkDType out = result_dtype(c, 2, o);
  TpkValue *v[3] = {0};
  operands(c, 2, o, out, v);
  if (!v[1]) return;
  TpkValue *t = mat(c, &o[2], dt_of(v[1]), rank_of(v[1]), v[1]->type->dims);
  put(c, sel(c, op2(c, TPK_OP_LE, v[1], t), splat(c, v[0], 0), v[0]));
}

/* ---- Composite arithmetic (the optimizer's) ---------------------------------------------------- */

/* addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2. */
static void addc(Call *c, TpkOpcode opc) {
  Opnd o[4] = {opnd_arg(c, "self"), opnd_arg(c, "tensor1"), opnd_arg(c, "tensor2"), opnd_arg(c, "value")};
  TpkDType out = result_dtype(c, 3, o);
  if (c->failed) return;
  if (opc == TPK_OP_DIV && !is_float(dt_of(o[1].v)) && !is_float(dt_of(o[2].v)))
    return (void)INVALID(c, "integer division with addcdiv is not supported (as in PyTorch): tensor1 %s, tensor2 %s",
                         ty(c, o[1].v), ty(c, o[2].v));
  if (!is_float(out) && (o[3].v ? is_float(dt_of(o[3].v)) : o[3].num == 'f'))
    return (void)INVALID(c, "for integer tensors, 'value' must be an integer");
  TpkValue *v[4] = {0};
  operands(c, 4, o, opmath(out), v);
  TpkValue *p = op2(c, opc, v[1], v[2]);
  if (!num_is(&o[3], 1)) p = op2(c, TPK_OP_MUL, v[3], p);
  put(c, cvt(c, op2(c, TPK_OP_ADD, v[0], p), out));
}

static void ex_addcmul(Call *c) { addc(c, TPK_OP_MUL); }
static void ex_addcdiv(Call *c) { addc(c, TPK_OP_DIV); }

/* lerp: self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w),
 * as ATen's kernel computes it. */
static void ex_lerp(Call *c) {
  TpkValue *self = float_input(c, "self"), *end = t_arg(c, "end");
  Opnd w = opnd_arg(c, "weight");
  if (!self || !end) return;
  if (dt_of(self) != dt_of(end)) return (void)INVALID(c, "self %s and end %s must have one dtype", ty(c, self), ty(c, end));
  if (w.v && dt_of(w.v) != dt_of(self) && !w.wrapped)
    return (void)INVALID(c, "weight %s must have self's dtype %s", ty(c, w.v), dt_name(dt_of(self)));
  Opnd o[3] = {tensor_opnd(self, "self"), tensor_opnd(end, "end"), w};
  TpkValue *v[3] = {0};
  operands(c, 3, o, opmath(dt_of(self)), v);
  TpkValue *diff = op2(c, TPK_OP_SUB, v[1], v[0]);
  TpkValue *low = op2(c, TPK_OP_ADD, v[0], op2(c, TPK_OP_MUL, v[2], diff));
  TpkValue *high = op2(c, TPK_OP_SUB, v[1], op2(c, TPK_OP_MUL, diff, op2(c, TPK_OP_SUB, splat(c, v[2], 1), v[2])));
  TpkValue *r;
  if (is_num(&w) && !w.dim)
    r = fabs(w.f) < 0.5 ? low : high;
  else
    r = sel(c, op2(c, TPK_OP_LT, op1(c, TPK_OP_ABS, v[2]), splat(c, v[2], 0.5)), low, high);
  put(c, cvt(c, r, dt_of(self)));
}

/* ---- Conversions ------------------------------------------------------------------------------------ */

static void ex_to_copy(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (x) put(c, cvt(c, x, dtype_arg(c, "dtype", dt_of(x))));
}

static void ex_type_as(Call *c) { put(c, cvt(c, t_arg(c, "self"), dt_of(t_arg(c, "other")))); }

/* copy: src broadcast to self's shape, in self's dtype. */
static void ex_copy(Call *c) {
  TpkValue *x = t_arg(c, "self"), *src = t_arg(c, "src");
  Opnd o[2] = {tensor_opnd(x, "self"), tensor_opnd(src, "src")};
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shape(c, 2, o, &rank, dims)) return;
  if (!has_shape(x, rank, dims)) return (void)INVALID(c, "src %s does not broadcast to self %s", ty(c, src), ty(c, x));
  put(c, bcast_like(c, cvt(c, src, dt_of(x)), x));
}

/* The one element of self as a rank-0 value (the caller reads it back). */
static void ex_local_scalar_dense(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  if (!dim_is(numel(c, x), 1)) return (void)INVALID(c, "needs a tensor of one element, got %s", ty(c, x));
  put(c, reshape(c, x, 0, NULL));
}

/* ---- More views --------------------------------------------------------------------------------------- */

static void ex_squeeze(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  int rank = rank_of(x);
  bool drop[TPK_MAX_RANK] = {0};
  if (strcmp(c->ov->name, "default") == 0) {
    for (int i = 0; i < rank; i++) drop[i] = dim_is(x->type->dims[i], 1);
  } else {
    int64_t dims[MAX_LIST];
    int n = ints_arg(c, "dim", dims, MAX_LIST);
    for (int i = 0; i < n && !c->failed; i++) {
      int d = wrap_dim(c, dims[i], rank, "dim", x);
      if (rank) drop[d] = dim_is(x->type->dims[d], 1); /* a dim of another size stays, as in ATen */
    }
  }
  const TpkDim *kept[TPK_MAX_RANK];
  int k = 0;
  for (int i = 0; i < rank; i++)
    if (!drop[i]) kept[k++] = x->type->dims[i];
  put(c, reshape(c, x, k, kept));
}

static void ex_flatten(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  int rank = rank_of(x);
  if (rank == 0) {
    const TpkDim *one = tpk_dim_const(c->m, 1);
    return put(c, reshape(c, x, 1, &one));
  }
  int a = wrap_dim(c, i_arg(c, "start_dim"), rank, "start_dim", x), b = wrap_dim(c, i_arg(c, "end_dim"), rank, "end_dim", x);
  if (c->failed) return;
  if (a > b) return (void)INVALID(c, "start_dim %d comes after end_dim %d", a, b);
  const TpkDim *dims[TPK_MAX_RANK];
  int k = 0;
  for (int i = 0; i < a; i++) dims[k++] = x->type->dims[i];
  dims[k++] = product(c, b - a + 1, x->type->dims + a);
  for (int i = b + 1; i < rank; i++) dims[k++] = x->type->dims[i];
  put(c, reshape(c, x, k, dims));
}

static void ex_unflatten(Call *c) {
  TpkValue *x = t_arg(c, "self");
  const TpkDim *sizes[MAX_LIST];
  int n = dims_arg(c, "sizes", sizes, MAX_LIST);
  if (!x || c->failed) return;
  int rank = rank_of(x), d = wrap_dim(c, i_arg(c, "dim"), rank, "dim", x);
  if (c->failed) return;
  if (rank - 1 + n > TPK_MAX_RANK) return (void)INVALID(c, "the result would have rank %d, more than %d", rank - 1 + n, TPK_MAX_RANK);
  /* sizes must make dim d; its -1 is what they leave of it */
  const TpkDim *piece = x->type->dims[d];
  const TpkDim *known = tpk_dim_const(c->m, 1);
  int infer = -1;
  for (int i = 0; i < n; i++)
    if (sizes[i]) known = tpk_dim_binary(c->m, TPK_DIM_MUL, known, sizes[i]);
    else if (infer < 0) infer = i;
    else return (void)INVALID(c, "only one of sizes can be -1");
  if (infer >= 0 && !(sizes[infer] = dims_exact_div(c->m, piece, known))) {
    sizes[infer] = tpk_dim_const(c->m, -1);
    return (void)INVALID(c, "sizes %s do not divide dim %d (%s) of %s", shape_text(c, n, sizes), d, dim_text(c, piece), ty(c, x));
  }
  if (infer < 0 && known != piece)
    return (void)INVALID(c, "sizes %s do not make dim %d (%s) of %s", shape_text(c, n, sizes), d, dim_text(c, piece), ty(c, x));
  const TpkDim *dims[TPK_MAX_RANK];
  int k = 0;
  for (int i = 0; i < d; i++) dims[k++] = x->type->dims[i];
  for (int i = 0; i < n; i++) dims[k++] = sizes[i];
  for (int i = d + 1; i < rank; i++) dims[k++] = x->type->dims[i];
  put(c, reshape(c, x, k, dims));
}

static void ex_expand_as(Call *c) {
  TpkValue *x = t_arg(c, "self"), *o = t_arg(c, "other");
  Opnd s[2] = {tensor_opnd(x, "self"), tensor_opnd(o, "other")};
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shape(c, 2, s, &rank, dims)) return;
  if (!has_shape(o, rank, dims)) return (void)INVALID(c, "self %s does not expand to other %s", ty(c, x), ty(c, o));
  put(c, bcast_like(c, x, o));
}

/* repeat: x tiled; [r0, d0, r1, d1, ...] broadcast from [1, d0, 1, d1, ...]. */
static void ex_repeat(Call *c) {
  TpkValue *x = t_arg(c, "self");
  const TpkDim *reps[MAX_LIST];
  int n = size_arg(c, "repeats", reps);
  if (!x || c->failed) return;
  int rank = rank_of(x);
  if (n < rank) return (void)INVALID(c, "repeats has %d entries, fewer than the rank of %s", n, ty(c, x));
  if (2 * n > TPK_MAX_RANK) return (void)UNSUPPORTED(c, "repeat over %d dims (at most %d)", n, TPK_MAX_RANK / 2);
  const TpkDim *one = tpk_dim_const(c->m, 1), *src[TPK_MAX_RANK], *wide[TPK_MAX_RANK], *res[TPK_MAX_RANK];
  for (int i = 0; i < n; i++) {
    const TpkDim *d = i >= n - rank ? x->type->dims[i - (n - rank)] : one;
    src[2 * i] = one;
    src[2 * i + 1] = d;
    wide[2 * i] = reps[i];
    wide[2 * i + 1] = d;
    res[i] = tpk_dim_binary(c->m, TPK_DIM_MUL, reps[i], d);
  }
  put(c, reshape(c, bcast(c, reshape(c, x, 2 * n, src), 2 * n, wide), n, res));
}

/* x[..., index, ...] along axis: a slice with an 's' index. */
static TpkValue *select_at(Call *c, TpkValue *x, int axis, TpkValue *index) {
  if (!x || !index || c->failed) return NULL;
  TpkIndexPattern pat = {.rank = rank_of(x)};
  const TpkDim *dims[TPK_MAX_RANK];
  int k = 0;
  for (int i = 0; i < rank_of(x); i++) {
    pat.dim[i] = i == axis ? TPK_INDEX_SCALAR : TPK_INDEX_ALL;
    if (i != axis) dims[k++] = x->type->dims[i];
  }
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), k, dims);
  TpkValue *in[2] = {x, index};
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_SLICE, 2, in, 1, &t));
  if (r) tpk_op_set_index(c->m, r->def, "index", &pat);
  return r;
}

/* x[..., start:start+len, ...] along axis: a slice with an 'r' index. */
static TpkValue *slice_range(Call *c, TpkValue *x, int axis, const TpkDim *start, const TpkDim *len) {
  if (!x || !start || !len || c->failed) return NULL;
  if (dim_is(start, 0) && len == x->type->dims[axis]) return x;
  TpkIndexPattern pat = {.rank = rank_of(x)};
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0; i < rank_of(x); i++) {
    pat.dim[i] = i == axis ? TPK_INDEX_RANGE : TPK_INDEX_ALL;
    dims[i] = i == axis ? len : x->type->dims[i];
  }
  const TpkType *t = tpk_type_tensor(c->m, dt_of(x), rank_of(x), dims);
  TpkValue *in[2] = {x, dim_value(c, start)};
  if (!in[1]) return NULL;
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_SLICE, 2, in, 1, &t));
  if (r) tpk_op_set_index(c->m, r->def, "index", &pat);
  return r;
}

static TpkValue *gather_axis(Call *c, TpkValue *table, TpkValue *ids, int axis) {
  if (!table || !ids || c->failed) return NULL;
  const TpkDim *dims[TPK_MAX_RANK];
  int k = 0;
  for (int i = 0; i < axis; i++) dims[k++] = table->type->dims[i];
  for (int i = 0; i < rank_of(ids); i++) dims[k++] = ids->type->dims[i];
  for (int i = axis + 1; i < rank_of(table); i++) dims[k++] = table->type->dims[i];
  const TpkType *t = tpk_type_tensor(c->m, dt_of(table), k, dims);
  TpkValue *in[2] = {table, ids};
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_GATHER, 2, in, 1, &t));
  if (r) tpk_op_set_int(c->m, r->def, "axis", axis);
  return r;
}

static TpkValue *scatter_axis(Call *c, TpkValue *base, TpkValue *ids, TpkValue *updates, int axis, TpkStoreMode mode) {
  if (!base || !ids || !updates || c->failed) return NULL;
  TpkValue *in[3] = {base, ids, updates};
  TpkValue *r = built_op(c, tpk_build(c->b, TPK_OP_SCATTER, 3, in, 1, &base->type));
  if (!r) return NULL;
  tpk_op_set_int(c->m, r->def, "axis", axis);
  tpk_op_set_store_mode(c->m, r->def, mode);
  return r;
}

/* start + step * i for i < len, i32. */
static TpkValue *strided_ids(Call *c, const TpkDim *start, int64_t step, const TpkDim *len) {
  TpkValue *i = iota(c, TPK_I32, 1, &len, 0);
  if (step != 1) i = binop_k(c, TPK_OP_MUL, i, (double)step);
  return dim_is(start, 0) ? i : op2(c, TPK_OP_ADD, i, bcast(c, dim_value(c, start), 1, &len));
}

static void ex_select(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  if (rank_of(x) == 0) return (void)INVALID(c, "cannot select from a rank-0 tensor %s", ty(c, x));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  const TpkDim *index = dim_arg(c, "index"), *size = c->failed ? NULL : x->type->dims[axis];
  int64_t i, n;
  if (!index) return;
  if (tpk_dim_is_const(index, &i)) {
    bool sized = tpk_dim_is_const(size, &n);
    if (sized && (i < -n || i >= n)) return (void)INVALID(c, "index %" PRId64 " is out of range for dim %d of %s", i, axis, ty(c, x));
    if (i < 0) index = sized ? tpk_dim_const(c->m, i + n) : tpk_dim_binary(c->m, TPK_DIM_ADD, size, index);
  }
  put(c, select_at(c, x, axis, dim_value(c, index)));
}

/* ATen's slice bounds: None is the end, negative counts from the end,
 * constants are clamped to the dim (a symbolic bound is trusted). */
static const TpkDim *slice_bound(Call *c, const char *name, const TpkDim *size, bool is_end) {
  if (is_none(c, name)) return is_end ? size : tpk_dim_const(c->m, 0);
  const TpkDim *d = dim_arg(c, name);
  int64_t v, n;
  if (!d || !tpk_dim_is_const(d, &v)) return d;
  bool sized = tpk_dim_is_const(size, &n);
  if (v >= ((int64_t)1 << 62)) return size; /* sys.maxsize: to the end */
  if (v < 0) {
    if (!sized) return tpk_dim_binary(c->m, TPK_DIM_ADD, size, d);
    v = v + n < 0 ? 0 : v + n;
  }
  if (sized && v > n) v = n;
  return tpk_dim_const(c->m, v);
}

/* The length of [start, end) by step (0 when empty, for constants). */
static const TpkDim *slice_len(Call *c, const TpkDim *start, const TpkDim *end, int64_t step) {
  const TpkDim *len = tpk_dim_binary(c->m, TPK_DIM_SUB, end, start);
  int64_t v;
  if (len && tpk_dim_is_const(len, &v) && v < 0) len = tpk_dim_const(c->m, 0);
  if (len && step > 1) len = tpk_dim_binary(c->m, TPK_DIM_CDIV, len, tpk_dim_const(c->m, step));
  return len ? len : nomem(c);
}

static void ex_slice(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  if (rank_of(x) == 0) return (void)INVALID(c, "cannot slice a rank-0 tensor %s", ty(c, x));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  int64_t step = i_arg(c, "step");
  if (c->failed) return;
  if (step <= 0) return (void)INVALID(c, "step must be positive, got %" PRId64, step);
  const TpkDim *size = x->type->dims[axis];
  const TpkDim *start = slice_bound(c, "start", size, false), *end = slice_bound(c, "end", size, true);
  if (!start || !end) return;
  const TpkDim *len = slice_len(c, start, end, step);
  if (step == 1) return put(c, slice_range(c, x, axis, start, len));
  put(c, gather_axis(c, x, strided_ids(c, start, step, len), axis));
}

/* split_with_sizes, split (pieces of split_size, the last smaller), chunk,
 * unbind: slices along dim. */
static void split_pieces(Call *c, TpkValue *x, int axis, const TpkDim *const *sizes, int n) {
  const TpkDim *start = tpk_dim_const(c->m, 0);
  for (int i = 0; i < n && !c->failed; i++) {
    put(c, slice_range(c, x, axis, start, sizes[i]));
    start = tpk_dim_binary(c->m, TPK_DIM_ADD, start, sizes[i]);
  }
}

static void ex_split_with_sizes(Call *c) {
  TpkValue *x = t_arg(c, "self");
  const TpkDim *sizes[MAX_LIST];
  int n = size_arg(c, c->params[1].name, sizes); /* split_sizes; split.sizes calls it split_size */
  if (!x || c->failed) return;
  if (rank_of(x) == 0) return (void)INVALID(c, "cannot split a rank-0 tensor %s", ty(c, x));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  if (c->failed) return;
  const TpkDim *total = tpk_dim_const(c->m, 0);
  for (int i = 0; i < n; i++) total = tpk_dim_binary(c->m, TPK_DIM_ADD, total, sizes[i]);
  if (total != x->type->dims[axis])
    return (void)INVALID(c, "split_sizes %s sum to %s, but dim %d of %s is %s", shape_text(c, n, sizes), dim_text(c, total), axis,
                         ty(c, x), dim_text(c, x->type->dims[axis]));
  split_pieces(c, x, axis, sizes, n);
}

/* The constant size of x's dim `axis` (the number of pieces depends on it). */
static int64_t const_size(Call *c, const TpkValue *x, int axis) {
  int64_t n;
  if (!tpk_dim_is_const(x->type->dims[axis], &n))
    return UNSUPPORTED(c, "dim %d of %s is symbolic, but the number of results depends on it", axis, ty(c, x)), 0;
  return n;
}

/* Pieces of `each` along axis, the last one smaller. */
static void split_even(Call *c, TpkValue *x, int axis, int64_t each) {
  int64_t size = const_size(c, x, axis);
  if (c->failed) return;
  if (each <= 0 && size > 0) return (void)INVALID(c, "split size %" PRId64 " must be positive", each);
  int64_t count = size == 0 ? 1 : (size + each - 1) / each;
  if (count > MAX_OUTS) return (void)UNSUPPORTED(c, "%" PRId64 " pieces (at most %d)", count, MAX_OUTS);
  const TpkDim *sizes[MAX_OUTS];
  for (int64_t i = 0; i < count; i++) sizes[i] = tpk_dim_const(c->m, size == 0 ? 0 : i + 1 < count ? each : size - each * i);
  split_pieces(c, x, axis, sizes, (int)count);
}

static TpkValue *ranked_input(Call *c, const char *what) {
  TpkValue *x = t_arg(c, "self");
  if (x && rank_of(x) == 0) return INVALID(c, "cannot %s a rank-0 tensor %s", what, ty(c, x));
  return x;
}

static void ex_split(Call *c) {
  TpkValue *x = ranked_input(c, "split");
  if (!x) return;
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  const TpkDim *each = dim_arg(c, "split_size");
  int64_t k;
  if (c->failed) return;
  if (!tpk_dim_is_const(each, &k)) return (void)UNSUPPORTED(c, "a symbolic split_size (%s) is not supported", dim_text(c, each));
  split_even(c, x, axis, k);
}

static void ex_chunk(Call *c) {
  TpkValue *x = ranked_input(c, "chunk");
  if (!x) return;
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  int64_t chunks = i_arg(c, "chunks"), size = c->failed ? 0 : const_size(c, x, axis);
  if (c->failed) return;
  if (chunks <= 0) return (void)INVALID(c, "chunks must be positive, got %" PRId64, chunks);
  split_even(c, x, axis, size == 0 ? 1 : (size + chunks - 1) / chunks);
}

static void ex_unbind(Call *c) {
  TpkValue *x = ranked_input(c, "unbind");
  if (!x) return;
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  int64_t size = c->failed ? 0 : const_size(c, x, axis);
  if (c->failed) return;
  if (size > MAX_OUTS) return (void)UNSUPPORTED(c, "%" PRId64 " pieces (at most %d)", size, MAX_OUTS);
  for (int64_t i = 0; i < size; i++) put(c, select_at(c, x, axis, konst_int(c, TPK_I32, i)));
}

/* ---- Gathers and scatters ---------------------------------------------------------------------------- */

static TpkValue *index_input(Call *c, const char *name) {
  TpkValue *ix = t_arg(c, name);
  if (ix && is_float(dt_of(ix))) return INVALID(c, "%s must be an integer tensor, got %s", name, ty(c, ix));
  return cvt(c, ix, TPK_I32);
}

static TpkValue *flat(Call *c, TpkValue *x);

/* For ATen's gather and scatter along `axis` of self with index: the
 * position in self, flattened, of each element of index (whose value is
 * the coordinate along axis; the others are its own). */
static TpkValue *flat_positions(Call *c, const TpkValue *self, TpkValue *index, int axis) {
  int rank = rank_of(self);
  if (rank_of(index) != rank && !(rank <= 1 && rank_of(index) <= 1))
    return INVALID(c, "index %s must have the rank of self %s", ty(c, index), ty(c, self));
  for (int d = 0; d < rank && rank_of(index) == rank; d++) {
    int64_t a, b;
    if (d != axis && tpk_dim_is_const(index->type->dims[d], &a) && tpk_dim_is_const(self->type->dims[d], &b) && a > b)
      return INVALID(c, "index %s is larger than self %s in dim %d", ty(c, index), ty(c, self), d);
  }
  if (rank <= 1) return index;
  /* index checked against self's size along axis: a gather from 0..size-1
   * fails on one outside it, naming it, where its flattened position could
   * land in another row of self */
  const TpkDim *size = self->type->dims[axis];
  TpkValue *checked = reshape(c, gather_axis(c, iota(c, TPK_I32, 1, &size, 0), flat(c, index), 0), rank_of(index),
                              index->type->dims);
  TpkValue *pos = NULL;
  const TpkDim *stride = tpk_dim_const(c->m, 1);
  for (int d = rank - 1; d >= 0 && !c->failed; d--) {
    TpkValue *coord = d == axis ? checked : iota(c, TPK_I32, rank, index->type->dims, d);
    if (!dim_is(stride, 1)) coord = op2(c, TPK_OP_MUL, coord, bcast_like(c, dim_value(c, stride), coord));
    pos = pos ? op2(c, TPK_OP_ADD, pos, coord) : coord;
    stride = tpk_dim_binary(c->m, TPK_DIM_MUL, stride, self->type->dims[d]);
  }
  return pos;
}

static TpkValue *flat(Call *c, TpkValue *x) {
  const TpkDim *n = x ? numel(c, x) : NULL;
  return n ? reshape(c, x, 1, &n) : NULL;
}

static void ex_gather(Call *c) {
  TpkValue *x = t_arg(c, "self"), *index = index_input(c, "index");
  if (!x || !index) return;
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  TpkValue *pos = c->failed ? NULL : flat_positions(c, x, index, axis);
  if (!pos) return;
  TpkValue *got = gather_axis(c, flat(c, x), flat(c, pos), 0);
  put(c, reshape(c, got, rank_of(index), index->type->dims));
}

/* scatter (src or value; reduce "add"), scatter_add: into self's elements
 * at the index positions. */
static void ex_scatter(Call *c) {
  TpkValue *x = t_arg(c, "self"), *index = index_input(c, "index");
  if (!x || !index) return;
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  TpkStoreMode mode = strcmp(c->ov->packet, "scatter_add") == 0 ? TPK_STORE_ADD : TPK_STORE_SET;
  bool has_reduce = strcmp(c->ov->name, "reduce") == 0 || strcmp(c->ov->name, "value_reduce") == 0;
  char buf[32];
  const char *how = has_reduce ? s_arg(c, "reduce", buf, sizeof buf) : NULL;
  if (how && strcmp(how, "add") == 0) mode = TPK_STORE_ADD;
  else if (how) return (void)UNSUPPORTED(c, "reduce=\"%s\" is not supported (\"add\" is)", how);
  TpkValue *pos = c->failed ? NULL : flat_positions(c, x, index, axis);
  if (!pos) return;
  TpkValue *upd;
  const TpkDim *n = numel(c, index);
  if (strcmp(c->ov->name, "value") == 0 || strcmp(c->ov->name, "value_reduce") == 0) {
    Opnd v = opnd_arg(c, "value");
    upd = mat(c, &v, dt_of(x), 1, &n);
  } else {
    TpkValue *src = t_arg(c, "src");
    if (rank_of(src) != rank_of(index)) return (void)INVALID(c, "src %s must have the rank of index %s", ty(c, src), ty(c, index));
    for (int d = 0; d < rank_of(src); d++) /* the part of src the index covers */
      src = slice_range(c, src, d, tpk_dim_const(c->m, 0), index->type->dims[d]);
    upd = flat(c, cvt(c, src, dt_of(x)));
  }
  TpkValue *r = scatter_axis(c, flat(c, x), flat(c, pos), upd, 0, mode);
  put(c, reshape(c, r, rank_of(x), x->type->dims));
}

static void ex_index_select(Call *c) {
  TpkValue *x = t_arg(c, "self"), *index = index_input(c, "index");
  if (!x || !index) return;
  if (rank_of(index) > 1) return (void)INVALID(c, "index must be a vector, got %s", ty(c, index));
  const TpkDim *n = numel(c, index);
  if (rank_of(x) == 0) return put(c, reshape(c, gather_axis(c, flat(c, x), reshape(c, index, 1, &n), 0), 0, NULL));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  if (!c->failed) put(c, gather_axis(c, x, reshape(c, index, 1, &n), axis));
}

static void ex_embedding(Call *c) {
  TpkValue *w = t_arg(c, "weight"), *ix = index_input(c, "indices");
  if (!w || !ix) return;
  if (rank_of(w) != 2) return (void)INVALID(c, "weight must be 2-D, got %s", ty(c, w));
  if (rank_of(ix) + 1 > TPK_MAX_RANK) return (void)UNSUPPORTED(c, "indices %s: the result would have rank %d", ty(c, ix), rank_of(ix) + 1);
  TpkValue *rows = gather_axis(c, w, flat(c, ix), 0);
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, ix->type->dims, (size_t)rank_of(ix) * sizeof *dims);
  dims[rank_of(ix)] = w->type->dims[1];
  put(c, reshape(c, rows, rank_of(ix) + 1, dims));
}

/* The rows of grad_output added into a [num_weights, D] zero tensor at
 * their indices; rows of padding_idx add nothing. */
static void ex_embedding_dense_backward(Call *c) {
  TpkValue *g = float_input(c, "grad_output"), *ix = index_input(c, "indices");
  const TpkDim *nw = dim_arg(c, "num_weights"), *pad = dim_arg(c, "padding_idx");
  if (!g || !ix || !nw || !pad) return;
  if (b_arg(c, "scale_grad_by_freq")) return (void)UNSUPPORTED(c, "scale_grad_by_freq=True is not supported");
  if (rank_of(g) != rank_of(ix) + 1 || memcmp(g->type->dims, ix->type->dims, (size_t)rank_of(ix) * sizeof(void *)) != 0)
    return (void)INVALID(c, "grad_output %s must be indices %s with one more dim", ty(c, g), ty(c, ix));
  const TpkDim *n = numel(c, ix), *d = g->type->dims[rank_of(g) - 1];
  const TpkDim *rows_dims[2] = {n, d}, *out_dims[2] = {nw, d};
  TpkValue *ids = flat(c, ix), *rows = reshape(c, g, 2, rows_dims);
  int64_t p;
  if (!(tpk_dim_is_const(pad, &p) && p < 0)) {
    TpkValue *keep = op2(c, TPK_OP_NE, ids, bcast_like(c, dim_value(c, pad), ids));
    rows = sel(c, bcast_like(c, reshape(c, keep, 2, (const TpkDim *[]){n, tpk_dim_const(c->m, 1)}), rows), rows, splat(c, rows, 0));
  }
  TpkValue *zeros = bcast(c, konst(c, dt_of(g), 0), 2, out_dims);
  put(c, scatter_axis(c, zeros, ids, rows, 0, TPK_STORE_ADD));
}

/* Advanced indexing, x[i0, i1, ...] (ATen's index and index_put): index
 * tensors for x's leading k dims, broadcast together to B. Seen as rows,
 * x is `rows` [P, rest...] (its leading k dims as one) and the result
 * [B..., rest...] is the rows `row` [n] picks. */
typedef struct Indexed {
  TpkValue *rows, *row;
  int rank; /* of the result: B's and rest's dims in dims */
  const TpkDim *dims[TPK_MAX_RANK];
  const TpkDim *n;
} Indexed;

static bool index_rows(Call *c, TpkValue *x, Indexed *r) {
  TpkValue *ix[TPK_MAX_RANK];
  int k = values_arg(c, "indices", ix, TPK_MAX_RANK);
  if (!x || c->failed) return false;
  if (k == 0) return INVALID(c, "indices must hold at least one tensor"), false;
  if (k > rank_of(x)) return INVALID(c, "%d index tensors for self %s", k, ty(c, x)), false;
  Opnd o[TPK_MAX_RANK];
  for (int i = 0; i < k; i++) {
    if (dt_of(ix[i]) == TPK_BOOL || dt_of(ix[i]) == TPK_U8)
      return UNSUPPORTED(c, "indices[%d] %s is a mask: how many elements it selects is known only at run time", i, ty(c, ix[i])), false;
    if (is_float(dt_of(ix[i]))) return INVALID(c, "indices[%d] must be an integer tensor, got %s", i, ty(c, ix[i])), false;
    o[i] = tensor_opnd(ix[i] = cvt(c, ix[i], TPK_I32), "an index");
  }
  int nb;
  if (!broadcast_shape(c, k, o, &nb, r->dims)) return false;
  r->rank = nb + rank_of(x) - k;
  if (r->rank > TPK_MAX_RANK) return UNSUPPORTED(c, "self[indices] would have rank %d", r->rank), false;
  for (int d = k; d < rank_of(x); d++) r->dims[nb + d - k] = x->type->dims[d];
  r->n = product(c, nb, r->dims);
  r->row = NULL;
  const TpkDim *stride = tpk_dim_const(c->m, 1);
  for (int d = k - 1; d >= 0 && !c->failed; d--) {
    const TpkDim *size = x->type->dims[d];
    TpkValue *i = reshape(c, bcast(c, ix[d], nb, r->dims), 1, &r->n);
    i = sel(c, binop_k(c, TPK_OP_LT, i, 0), op2(c, TPK_OP_ADD, i, bcast_like(c, dim_value(c, size), i)), i);
    if (k > 1) /* one outside 0..size-1 fails, named, where its row could be another's (the gather or scatter checks rows) */
      i = gather_axis(c, iota(c, TPK_I32, 1, &size, 0), i, 0);
    if (!dim_is(stride, 1)) i = op2(c, TPK_OP_MUL, i, bcast_like(c, dim_value(c, stride), i));
    r->row = r->row ? op2(c, TPK_OP_ADD, r->row, i) : i;
    stride = tpk_dim_binary(c->m, TPK_DIM_MUL, stride, size);
  }
  const TpkDim *rows_dims[TPK_MAX_RANK] = {stride};
  for (int d = k; d < rank_of(x); d++) rows_dims[1 + d - k] = x->type->dims[d];
  r->rows = reshape(c, x, 1 + rank_of(x) - k, rows_dims);
  return !c->failed;
}

static void ex_index(Call *c) {
  Indexed r;
  if (index_rows(c, t_arg(c, "self"), &r)) put(c, reshape(c, gather_axis(c, r.rows, r.row, 0), r.rank, r.dims));
}

/* index_put (index_put_, _index_put_impl_): self with self[indices] set to
 * values (broadcast), or values added there (accumulate: repeated indices
 * add up): a scatter of rows. */
static void ex_index_put(Call *c) {
  TpkValue *x = t_arg(c, "self");
  Opnd v = opnd_arg(c, "values");
  Indexed r;
  if (!index_rows(c, x, &r)) return;
  if (v.v && dt_of(v.v) != dt_of(x)) return (void)INVALID(c, "values %s must have self's dtype %s", ty(c, v.v), dt_name(dt_of(x)));
  bool fits = !v.v || rank_of(v.v) <= r.rank;
  for (int d = 0; fits && d < rank_of(v.v); d++) {
    const TpkDim *have = v.v->type->dims[d], *want = r.dims[r.rank - rank_of(v.v) + d];
    fits = have == want || dim_is(have, 1);
  }
  if (!fits) return (void)INVALID(c, "values %s do not broadcast to self[indices] %s", ty(c, v.v), shape_text(c, r.rank, r.dims));
  int rest = rank_of(r.rows);
  const TpkDim *upd_dims[TPK_MAX_RANK] = {r.n};
  for (int d = 1; d < rest; d++) upd_dims[d] = r.rows->type->dims[d];
  TpkValue *upd = reshape(c, mat(c, &v, dt_of(x), r.rank, r.dims), rest, upd_dims);
  TpkStoreMode mode = b_arg(c, "accumulate") ? TPK_STORE_ADD : TPK_STORE_SET;
  put(c, reshape(c, scatter_axis(c, r.rows, r.row, upd, 0, mode), rank_of(x), x->type->dims));
}

/* grad_output placed into zeros of input_sizes at `index` along dim. */
static void ex_select_backward(Call *c) {
  TpkValue *g = t_arg(c, "grad_output");
  const TpkDim *sizes[MAX_LIST];
  int n = size_arg(c, "input_sizes", sizes);
  const TpkDim *index = dim_arg(c, "index");
  if (!g || !index || c->failed) return;
  if (n == 0) return (void)INVALID(c, "input_sizes must not be empty");
  int axis = wrap_dim(c, i_arg(c, "dim"), n, "dim", NULL);
  if (c->failed) return;
  TpkValue *up = unsqueeze(c, g, axis);
  const TpkDim *want[TPK_MAX_RANK];
  memcpy(want, sizes, (size_t)n * sizeof *want);
  want[axis] = tpk_dim_const(c->m, 1);
  if (!up || !has_shape(up, n, want))
    return (void)INVALID(c, "grad_output %s does not fit input_sizes %s without dim %d", ty(c, g), shape_text(c, n, sizes), axis);
  int64_t i;
  if (tpk_dim_is_const(index, &i) && i < 0) index = tpk_dim_binary(c->m, TPK_DIM_ADD, sizes[axis], index);
  const TpkDim *one = tpk_dim_const(c->m, 1);
  TpkValue *ids = bcast(c, dim_value(c, index), 1, &one);
  put(c, scatter_axis(c, bcast(c, konst(c, dt_of(g), 0), n, sizes), ids, up, axis, TPK_STORE_SET));
}

static void ex_slice_backward(Call *c) {
  TpkValue *g = t_arg(c, "grad_output");
  const TpkDim *sizes[MAX_LIST];
  int n = size_arg(c, "input_sizes", sizes);
  if (!g || c->failed) return;
  if (n == 0) return (void)INVALID(c, "input_sizes must not be empty");
  int axis = wrap_dim(c, i_arg(c, "dim"), n, "dim", NULL);
  int64_t step = i_arg(c, "step");
  if (c->failed) return;
  if (step <= 0) return (void)INVALID(c, "step must be positive, got %" PRId64, step);
  const TpkDim *start = slice_bound(c, "start", sizes[axis], false), *end = slice_bound(c, "end", sizes[axis], true);
  const TpkDim *len = start && end ? slice_len(c, start, end, step) : NULL;
  if (!len) return;
  const TpkDim *want[TPK_MAX_RANK];
  memcpy(want, sizes, (size_t)n * sizeof *want);
  want[axis] = len;
  if (!has_shape(g, n, want))
    return (void)INVALID(c, "grad_output %s must be %s (input_sizes with the slice's length)", ty(c, g), shape_text(c, n, want));
  if (dim_is(start, 0) && step == 1 && len == sizes[axis]) return put(c, g);
  TpkValue *zeros = bcast(c, konst(c, dt_of(g), 0), n, sizes);
  put(c, scatter_axis(c, zeros, strided_ids(c, start, step, len), g, axis, TPK_STORE_SET));
}

/* ---- More reductions -------------------------------------------------------------------------------------- */

/* amax, amin (dim=[]: every axis). */
static void amax_amin(Call *c, TpkReduceKind kind) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  int64_t axes[TPK_MAX_RANK];
  int n = axes_arg(c, "dim", x, axes);
  put(c, reduce(c, x, kind, axes, n, b_arg(c, "keepdim")));
}

static void ex_amax(Call *c) { amax_amin(c, TPK_REDUCE_MAX); }
static void ex_amin(Call *c) { amax_amin(c, TPK_REDUCE_MIN); }

/* The index of the first maximum (minimum) along axis, a NaN counting as
 * the extreme (max and min propagate it); i32. */
static TpkValue *arg_extreme(Call *c, TpkValue *x, int axis, TpkReduceKind kind, bool keepdim, TpkValue **values) {
  TpkValue *m = reduce1(c, x, kind, axis, true);
  if (!m) return NULL;
  if (values) { /* m without the kept dim */
    const TpkDim *dims[TPK_MAX_RANK];
    int k = 0;
    for (int i = 0; i < rank_of(x); i++)
      if (i != axis) dims[k++] = x->type->dims[i];
    *values = keepdim ? m : reshape(c, m, k, dims);
  }
  TpkValue *hit = op2(c, TPK_OP_EQ, x, bcast_like(c, m, x));
  if (is_float(dt_of(x))) hit = op2(c, TPK_OP_OR, hit, op2(c, TPK_OP_NE, x, x));
  TpkValue *io = iota(c, TPK_I32, rank_of(x), x->type->dims, axis);
  TpkValue *none = bcast_like(c, dim_value(c, x->type->dims[axis]), io);
  return reduce1(c, sel(c, hit, io, none), TPK_REDUCE_MIN, axis, keepdim);
}

/* max.default, max.dim (values, indices), max.other; min alike. */
static void max_min(Call *c, TpkReduceKind kind) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  if (strcmp(c->ov->name, "other") == 0)
    return put(c, arith(c, kind == TPK_REDUCE_MAX ? TPK_OP_MAX : TPK_OP_MIN, tensor_opnd(x, "self"), opnd_arg(c, "other"), TPK_DTYPE_COUNT));
  if (strcmp(c->ov->name, "default") == 0) {
    int64_t axes[TPK_MAX_RANK];
    for (int i = 0; i < rank_of(x); i++) axes[i] = i;
    return put(c, reduce(c, x, kind, axes, rank_of(x), false));
  }
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  bool keep = b_arg(c, "keepdim");
  if (c->failed) return;
  if (rank_of(x) == 0) {
    put(c, x);
    return put(c, konst_int(c, TPK_I32, 0));
  }
  TpkValue *values = NULL, *idx = arg_extreme(c, x, axis, kind, keep, &values);
  put(c, values);
  put(c, idx);
}

static void ex_max(Call *c) { max_min(c, TPK_REDUCE_MAX); }
static void ex_min(Call *c) { max_min(c, TPK_REDUCE_MIN); }

static void argmax_argmin(Call *c, TpkReduceKind kind) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  bool keep = b_arg(c, "keepdim");
  if (is_none(c, "dim")) { /* over the flattened tensor */
    TpkValue *idx = arg_extreme(c, flat(c, x), 0, kind, false, NULL);
    const TpkDim *ones[TPK_MAX_RANK];
    for (int i = 0; i < rank_of(x); i++) ones[i] = tpk_dim_const(c->m, 1);
    return put(c, keep ? reshape(c, idx, rank_of(x), ones) : idx);
  }
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
  if (c->failed) return;
  if (rank_of(x) == 0) return put(c, konst_int(c, TPK_I32, 0));
  put(c, arg_extreme(c, x, axis, kind, keep, NULL));
}

static void ex_argmax(Call *c) { argmax_argmin(c, TPK_REDUCE_MAX); }
static void ex_argmin(Call *c) { argmax_argmin(c, TPK_REDUCE_MIN); }

static void ex_prod(Call *c) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  TpkDType dt = dtype_arg(c, "dtype", is_float(dt_of(x)) ? dt_of(x) : TPK_I32);
  int64_t axes[TPK_MAX_RANK];
  int n = rank_of(x);
  bool keep = false;
  if (strcmp(c->ov->name, "default") == 0) {
    for (int i = 0; i < n; i++) axes[i] = i;
  } else {
    axes[0] = wrap_dim(c, i_arg(c, "dim"), rank_of(x), "dim", x);
    n = rank_of(x) ? 1 : 0;
    keep = b_arg(c, "keepdim");
  }
  put(c, reduce(c, cvt(c, x, dt), TPK_REDUCE_PROD, axes, n, keep));
}

/* any, all: whether some (every) element is nonzero; bool (u8 stays u8, as
 * in ATen). */
static void any_all(Call *c, TpkReduceKind kind) {
  TpkValue *x = t_arg(c, "self");
  if (!x) return;
  int64_t axes[TPK_MAX_RANK];
  int n;
  bool keep = false;
  if (strcmp(c->ov->name, "default") == 0) {
    n = rank_of(x);
    for (int i = 0; i < n; i++) axes[i] = i;
  } else {
    n = axes_arg(c, "dim", x, axes);
    keep = b_arg(c, "keepdim");
  }
  TpkValue *r = reduce(c, cvt(c, cvt(c, x, TPK_BOOL), TPK_I32), kind, axes, n, keep);
  put(c, cvt(c, r, dt_of(x) == TPK_U8 ? TPK_U8 : TPK_BOOL));
}

static void ex_any(Call *c) { any_all(c, TPK_REDUCE_MAX); }
static void ex_all(Call *c) { any_all(c, TPK_REDUCE_MIN); }

/* var: sum((x - mean)^2) / (N - correction); unbiased is correction 1. */
static void ex_var(Call *c) {
  TpkValue *x = float_input(c, "self");
  if (!x) return;
  int64_t axes[TPK_MAX_RANK];
  int n;
  double correction = 1;
  bool keep = false;
  if (strcmp(c->ov->name, "default") == 0) {
    n = rank_of(x);
    for (int i = 0; i < n; i++) axes[i] = i;
    correction = b_arg(c, "unbiased");
  } else {
    n = axes_arg(c, "dim", x, axes);
    keep = b_arg(c, "keepdim");
    if (strcmp(c->ov->name, "dim") == 0) correction = b_arg(c, "unbiased");
    else if (!is_none(c, "correction")) correction = f_arg(c, "correction");
  }
  TpkValue *xf = cvt(c, x, TPK_F32);
  const TpkDim *count = tpk_dim_const(c->m, 1);
  for (int i = 0; i < n; i++) count = tpk_dim_binary(c->m, TPK_DIM_MUL, count, x->type->dims[axes[i]]);
  TpkValue *mean = reduce(c, xf, TPK_REDUCE_MEAN, axes, n, true);
  TpkValue *d = op2(c, TPK_OP_SUB, xf, bcast_like(c, mean, xf));
  TpkValue *ss = reduce(c, op2(c, TPK_OP_MUL, d, d), TPK_REDUCE_SUM, axes, n, keep);
  TpkValue *denom = binop_k(c, TPK_OP_SUB, cvt(c, dim_value(c, count), TPK_F32), correction);
  put(c, cvt(c, op2(c, TPK_OP_DIV, ss, bcast_like(c, denom, ss)), dt_of(x)));
}

/* log(sum(exp(x - m))) + m, m the maximum (0 where it is infinite). */
static void ex_logsumexp(Call *c) {
  TpkValue *x0 = t_arg(c, "self");
  if (!x0) return;
  TpkDType out = is_float(dt_of(x0)) ? dt_of(x0) : TPK_F32;
  TpkValue *x = cvt(c, x0, TPK_F32);
  int64_t axes[TPK_MAX_RANK];
  int n = axes_arg(c, "dim", x, axes);
  bool keep = b_arg(c, "keepdim");
  TpkValue *m = reduce(c, x, TPK_REDUCE_MAX, axes, n, true);
  if (!m) return;
  TpkValue *finite = op2(c, TPK_OP_NE, op1(c, TPK_OP_ABS, m), splat(c, m, INFINITY));
  m = sel(c, finite, m, splat(c, m, 0));
  TpkValue *s = reduce(c, op1(c, TPK_OP_EXP, op2(c, TPK_OP_SUB, x, bcast_like(c, m, x))), TPK_REDUCE_SUM, axes, n, true);
  TpkValue *r = op2(c, TPK_OP_ADD, op1(c, TPK_OP_LOG, s), m);
  if (!keep && r) {
    const TpkDim *dims[TPK_MAX_RANK];
    int k = 0;
    for (int i = 0, j = 0; i < rank_of(x); i++)
      if (j < n && axes[j] == i) j++;
      else dims[k++] = x->type->dims[i];
    r = reshape(c, r, k, dims);
  }
  put(c, cvt(c, r, out));
}

/* ---- Softmax gradients, losses ----------------------------------------------------------------------- */

/* _softmax_backward_data: y * (dy - sum(dy * y)); the log form
 * dy - exp(y) * sum(dy); in f32, the result in input_dtype. */
static void softmax_backward(Call *c, bool log_space) {
  TpkValue *dy = float_input(c, "grad_output"), *y = float_input(c, "output");
  if (!dy || !y) return;
  if (!has_shape(dy, rank_of(y), y->type->dims))
    return (void)INVALID(c, "grad_output %s and output %s must have one shape", ty(c, dy), ty(c, y));
  TpkDType out = dtype_arg(c, "input_dtype", dt_of(y));
  int axis = wrap_dim(c, i_arg(c, "dim"), rank_of(y), "dim", y);
  if (c->failed) return;
  if (rank_of(y) == 0) return put(c, cvt(c, log_space ? dy : splat(c, dy, 0), out));
  TpkValue *g = cvt(c, dy, TPK_F32), *yf = cvt(c, y, TPK_F32);
  TpkValue *r;
  if (log_space) {
    TpkValue *s = bcast_like(c, reduce1(c, g, TPK_REDUCE_SUM, axis, true), g);
    r = op2(c, TPK_OP_SUB, g, op2(c, TPK_OP_MUL, op1(c, TPK_OP_EXP, yf), s));
  } else {
    TpkValue *s = bcast_like(c, reduce1(c, op2(c, TPK_OP_MUL, g, yf), TPK_REDUCE_SUM, axis, true), g);
    r = op2(c, TPK_OP_MUL, yf, op2(c, TPK_OP_SUB, g, s));
  }
  put(c, cvt(c, r, out));
}

static void ex_softmax_backward(Call *c) { softmax_backward(c, false); }
static void ex_log_softmax_backward(Call *c) { softmax_backward(c, true); }

/* nll_loss's operands: self [N, C] (or [C]) as f32 [N, C], target as i32
 * [N] with ignored entries at class 0, the per-row weights (0 where
 * ignored) and the mask of rows that count. */
typedef struct Nll {
  TpkValue *x, *target, *w, *valid;
  const TpkDim *n, *k;
  TpkDType dt;
  bool batched;
  int64_t reduction;
} Nll;

static bool nll_operands(Call *c, Nll *l) {
  TpkValue *x = float_input(c, "self"), *t = index_input(c, "target"), *w = float_input(c, "weight");
  const TpkDim *ignore = dim_arg(c, "ignore_index");
  l->reduction = i_arg(c, "reduction");
  if (!x || !t || !ignore || c->failed) return false;
  if (l->reduction < 0 || l->reduction > 2) return INVALID(c, "reduction must be 0 (none), 1 (mean) or 2 (sum), got %" PRId64, l->reduction), false;
  l->batched = rank_of(x) == 2;
  if (!(rank_of(x) == 2 && rank_of(t) == 1 && t->type->dims[0] == x->type->dims[0]) && !(rank_of(x) == 1 && rank_of(t) == 0))
    return INVALID(c, "self %s and target %s must be [N, C] and [N], or [C] and []", ty(c, x), ty(c, t_arg(c, "target"))), false;
  l->dt = dt_of(x);
  l->n = l->batched ? x->type->dims[0] : tpk_dim_const(c->m, 1);
  l->k = x->type->dims[rank_of(x) - 1];
  if (w && !has_shape(w, 1, &l->k)) return INVALID(c, "weight %s must be [%s], a weight per class", ty(c, w), dim_text(c, l->k)), false;
  const TpkDim *nk[2] = {l->n, l->k};
  l->x = reshape(c, cvt(c, x, TPK_F32), 2, nk);
  TpkValue *tt = reshape(c, t, 1, &l->n);
  l->valid = op2(c, TPK_OP_NE, tt, bcast_like(c, dim_value(c, ignore), tt));
  l->target = sel(c, l->valid, tt, splat(c, tt, 0));
  TpkValue *wt = w ? gather_axis(c, cvt(c, w, TPK_F32), l->target, 0) : bcast(c, konst(c, TPK_F32, 1), 1, &l->n);
  l->w = sel(c, l->valid, wt, splat(c, wt, 0));
  return !c->failed;
}

/* nll_loss_forward: (output, total_weight); -x[i, t_i] * w_i summed,
 * averaged by the weights (mean) or per row (none, total_weight 0). */
static void ex_nll_loss_forward(Call *c) {
  Nll l;
  if (!nll_operands(c, &l)) return;
  const TpkDim *nk[2] = {l.n, l.k};
  TpkValue *rows = iota(c, TPK_I32, 1, &l.n, 0);
  TpkValue *pos = op2(c, TPK_OP_ADD, op2(c, TPK_OP_MUL, rows, bcast(c, dim_value(c, l.k), 1, &l.n)), l.target);
  const TpkDim *total = product(c, 2, nk);
  TpkValue *picked = gather_axis(c, reshape(c, l.x, 1, &total), pos, 0);
  TpkValue *loss = sel(c, l.valid, op1(c, TPK_OP_NEG, op2(c, TPK_OP_MUL, picked, l.w)), splat(c, l.w, 0));
  TpkValue *wsum = reduce1(c, l.w, TPK_REDUCE_SUM, 0, false);
  TpkValue *o;
  if (l.reduction == 0) {
    o = l.batched ? loss : reshape(c, loss, 0, NULL);
    put(c, cvt(c, o, l.dt));
    put(c, konst(c, l.dt, 0));
    return;
  }
  o = reduce1(c, loss, TPK_REDUCE_SUM, 0, false);
  if (l.reduction == 1) o = op2(c, TPK_OP_DIV, o, wsum);
  put(c, cvt(c, o, l.dt));
  put(c, cvt(c, wsum, l.dt));
}

/* nll_loss_backward: -w_i * g (/ total_weight for mean) at [i, t_i], 0
 * elsewhere: a one-hot select, elementwise over [N, C]. */
static void ex_nll_loss_backward(Call *c) {
  Nll l;
  if (!nll_operands(c, &l)) return;
  TpkValue *g = float_input(c, "grad_output"), *tw = float_input(c, "total_weight");
  if (!g || !tw) return;
  bool per_row = l.reduction == 0 && l.batched;
  if (per_row ? !has_shape(g, 1, &l.n) : rank_of(g) != 0)
    return (void)INVALID(c, "grad_output %s must be %s", ty(c, g), per_row ? "[N], one per row" : "a scalar");
  if (rank_of(tw) != 0) return (void)INVALID(c, "total_weight %s must be a scalar", ty(c, tw));
  TpkValue *gf = bcast(c, cvt(c, per_row ? g : reshape(c, g, 0, NULL), TPK_F32), 1, &l.n);
  TpkValue *coef = op1(c, TPK_OP_NEG, op2(c, TPK_OP_MUL, l.w, gf));
  if (l.reduction == 1) coef = op2(c, TPK_OP_DIV, coef, bcast(c, cvt(c, tw, TPK_F32), 1, &l.n));
  const TpkDim *nk[2] = {l.n, l.k}, *n1[2] = {l.n, tpk_dim_const(c->m, 1)};
  TpkValue *cls = iota(c, TPK_I32, 2, nk, 1);
  TpkValue *hit = op2(c, TPK_OP_EQ, cls, bcast(c, reshape(c, l.target, 2, n1), 2, nk));
  hit = op2(c, TPK_OP_AND, hit, bcast(c, reshape(c, l.valid, 2, n1), 2, nk));
  TpkValue *grad = sel(c, hit, bcast(c, reshape(c, coef, 2, n1), 2, nk), splat(c, l.x, 0));
  TpkValue *x = t_arg(c, "self");
  put(c, cvt(c, reshape(c, grad, rank_of(x), x->type->dims), l.dt));
}

/* mse_loss: (x - t)^2, averaged (1), summed (2) or not (0). */
static void ex_mse_loss(Call *c) {
  Opnd o[2] = {opnd_arg(c, "self"), opnd_arg(c, "target")};
  int64_t reduction = i_arg(c, "reduction");
  TpkDType out = result_dtype(c, 2, o);
  if (c->failed) return;
  if (!is_float(out)) return (void)INVALID(c, "needs float tensors, got %s", dt_name(out));
  if (reduction < 0 || reduction > 2) return (void)INVALID(c, "reduction must be 0, 1 or 2, got %" PRId64, reduction);
  TpkValue *v[2] = {0};
  operands(c, 2, o, TPK_F32, v);
  TpkValue *d = op2(c, TPK_OP_SUB, v[0], v[1]), *sq = op2(c, TPK_OP_MUL, d, d);
  if (reduction && sq) {
    int64_t axes[TPK_MAX_RANK];
    for (int i = 0; i < rank_of(sq); i++) axes[i] = i;
    sq = reduce(c, sq, reduction == 1 ? TPK_REDUCE_MEAN : TPK_REDUCE_SUM, axes, rank_of(sq), false);
  }
  put(c, cvt(c, sq, out));
}

/* ---- Attention: the standard flash-attention kernels ------------------------------------------------- */

/* The standard kernel `name`, from the builder's lookup. */
static const TpkFunc *std_kernel(Call *c, const char *name) {
  if (c->failed) return NULL;
  if (!c->gb->lookup)
    return UNSUPPORTED(c, "calls the standard kernel '%s', which this builder cannot reach (build the graph with tpk_graph_*)", name);
  TpkError e = {0};
  const TpkFunc *k = c->gb->lookup(c->gb->lookup_ctx, name, &e);
  return k ? k : UNSUPPORTED(c, "needs the standard kernel '%s': %s", name, e.message);
}

/* The checks both SDPA forms share; q, k, v as bf16 (the kernels' dtype:
 * PyTorch's f32 attention is computed with bf16 operands and f32
 * accumulation, see the kernels' header) and the scale as an f32 value. */
static bool sdpa_operands(Call *c, TpkValue **q16, TpkValue **k16, TpkValue **v16, TpkValue **scale) {
  TpkValue *q = float_input(c, "query"), *k = float_input(c, "key"), *v = float_input(c, "value");
  if (!q || !k || !v) return false;
  if (f_arg(c, "dropout_p") != 0) return UNSUPPORTED(c, "dropout_p=%g: tpk's attention has no dropout", f_arg(c, "dropout_p")), false;
  if (!is_none(c, "attn_mask")) return UNSUPPORTED(c, "an attn_mask is not supported (is_causal is)"), false;
  if (rank_of(q) != 4 || rank_of(k) != 4 || rank_of(v) != 4)
    return INVALID(c, "query %s, key %s and value %s must be 4-D [B, H, L, E]", ty(c, q), ty(c, k), ty(c, v)), false;
  if (dt_of(q) != dt_of(k) || dt_of(q) != dt_of(v))
    return INVALID(c, "query %s, key %s and value %s must have one dtype", ty(c, q), ty(c, k), ty(c, v)), false;
  const TpkDim *const *qd = q->type->dims, *const *kd = k->type->dims;
  if (k->type != v->type) return INVALID(c, "key %s and value %s must have one shape", ty(c, k), ty(c, v)), false;
  if (qd[0] != kd[0] || qd[3] != kd[3])
    return INVALID(c, "query %s and key %s differ in batch or head size", ty(c, q), ty(c, k)), false;
  int64_t h, hk;
  if (qd[1] != kd[1] && !(tpk_dim_is_const(qd[1], &h) && tpk_dim_is_const(kd[1], &hk) && hk > 0 && h % hk == 0))
    return INVALID(c, "query's heads (%s) must be a multiple of key's (%s)", dim_text(c, qd[1]), dim_text(c, kd[1])), false;
  if (b_arg(c, "is_causal") && qd[2] != kd[2])
    return UNSUPPORTED(c, "is_causal with query length %s and key length %s: PyTorch aligns the mask top-left, tpk's kernel "
                          "bottom-right; they agree only for equal lengths", dim_text(c, qd[2]), dim_text(c, kd[2])), false;
  *q16 = cvt(c, q, TPK_BF16);
  *k16 = cvt(c, k, TPK_BF16);
  *v16 = cvt(c, v, TPK_BF16);
  int64_t e;
  if (!is_none(c, "scale"))
    *scale = konst(c, TPK_F32, f_arg(c, "scale"));
  else if (tpk_dim_is_const(qd[3], &e))
    *scale = konst(c, TPK_F32, 1.0 / sqrt((double)e));
  else
    *scale = op1(c, TPK_OP_RSQRT, cvt(c, dim_value(c, qd[3]), TPK_F32));
  return !c->failed;
}

/* (output, logsumexp); logsumexp f32 [B, H, L], natural log. */
static void ex_sdpa_flash(Call *c) {
  TpkValue *in[4], *res[2];
  if (!sdpa_operands(c, &in[0], &in[1], &in[2], &in[3])) return;
  const TpkFunc *k = std_kernel(c, b_arg(c, "is_causal") ? "flash_attention_causal" : "flash_attention");
  int n;
  if (!k || tpk_gb_call_values(c->gb, k, c->ov->packet, in, 4, res, 2, &n, c->err) != TPK_OK) return (void)(c->failed = true);
  put(c, cvt(c, res[0], dt_of(t_arg(c, "query"))));
  put(c, res[1]);
}

/* (grad_query, grad_key, grad_value) in the inputs' dtype. */
static void ex_sdpa_flash_backward(Call *c) {
  TpkValue *in[7], *res[3];
  if (!sdpa_operands(c, &in[0], &in[1], &in[2], &in[6])) return;
  TpkValue *q = t_arg(c, "query"), *o = float_input(c, "out"), *dout = float_input(c, "grad_out"), *lse = float_input(c, "logsumexp");
  if (!o || !dout || !lse) return;
  if (!has_shape(o, 4, q->type->dims) || !has_shape(dout, 4, q->type->dims))
    return (void)INVALID(c, "out %s and grad_out %s must have query's shape %s", ty(c, o), ty(c, dout), ty(c, q));
  if (!has_shape(lse, 3, q->type->dims)) return (void)INVALID(c, "logsumexp %s must be [B, H, L] of query %s", ty(c, lse), ty(c, q));
  in[3] = cvt(c, o, TPK_BF16);
  in[4] = cvt(c, dout, TPK_BF16);
  in[5] = cvt(c, lse, TPK_F32);
  const TpkFunc *k = std_kernel(c, b_arg(c, "is_causal") ? "flash_attention_causal_bwd" : "flash_attention_bwd");
  int n;
  if (!k || c->failed || tpk_gb_call_values(c->gb, k, c->ov->packet, in, 7, res, 3, &n, c->err) != TPK_OK) return (void)(c->failed = true);
  for (int i = 0; i < 3; i++) put(c, cvt(c, res[i], dt_of(q)));
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
    {"linalg_vector_norm", "default", "Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None", ex_linalg_vector_norm, 0},
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
    {"new_empty_strided", "default", "Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
    {"empty_strided", "default", "SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", ex_full, 0},
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
    {"_softmax_backward_data", "default", "Tensor grad_output, Tensor output, int dim, ScalarType input_dtype", ex_softmax_backward, 0},
    {"_log_softmax_backward_data", "default", "Tensor grad_output, Tensor output, int dim, ScalarType input_dtype", ex_log_softmax_backward, 0},
    {"silu", "default", "Tensor self", ex_silu, 0},
    {"silu_backward", "default", "Tensor grad_output, Tensor self", ex_silu_backward, 0},
    {"sigmoid_backward", "default", "Tensor grad_output, Tensor output", ex_sigmoid_backward, 0},
    {"tanh_backward", "default", "Tensor grad_output, Tensor output", ex_tanh_backward, 0},
    {"threshold_backward", "default", "Tensor grad_output, Tensor self, Scalar threshold", ex_threshold_backward, 0},
    {"leaky_relu", "default", "Tensor self, Scalar negative_slope=0.01", ex_leaky_relu, 0},
    {"hardtanh", "default", "Tensor self, Scalar min_val=-1, Scalar max_val=1", ex_hardtanh, 0},
    {"maximum", "default", "Tensor self, Tensor other", ex_maximum, 0},
    {"minimum", "default", "Tensor self, Tensor other", ex_minimum, 0},
    {"clamp", "default", "Tensor self, Scalar? min=None, Scalar? max=None", ex_clamp, 0},
    {"clamp", "Tensor", "Tensor self, Tensor? min=None, Tensor? max=None", ex_clamp, 0},
    {"clamp_min", "default", "Tensor self, Scalar min", ex_clamp_min, 0},
    {"clamp_min", "Tensor", "Tensor self, Tensor min", ex_clamp_min, 0},
    {"clamp_max", "default", "Tensor self, Scalar max", ex_clamp_max, 0},
    {"clamp_max", "Tensor", "Tensor self, Tensor max", ex_clamp_max, 0},
    {"pow", "Tensor_Tensor", "Tensor self, Tensor exponent", ex_pow, 0},
    {"pow", "Tensor_Scalar", "Tensor self, Scalar exponent", ex_pow, 0},
    {"pow", "Scalar", "Scalar self, Tensor exponent", ex_pow, 0},
    {"remainder", "Tensor", "Tensor self, Tensor other", ex_remainder, 0},
    {"remainder", "Scalar", "Tensor self, Scalar other", ex_remainder, 0},
    {"remainder", "Scalar_Tensor", "Scalar self, Tensor other", ex_remainder, 0},
    {"fmod", "Tensor", "Tensor self, Tensor other", ex_fmod, 0},
    {"fmod", "Scalar", "Tensor self, Scalar other", ex_fmod, 0},
    {"bitwise_and", "Tensor", "Tensor self, Tensor other", ex_bitwise_and, 0},
    {"bitwise_and", "Scalar", "Tensor self, Scalar other", ex_bitwise_and, 0},
    {"bitwise_or", "Tensor", "Tensor self, Tensor other", ex_bitwise_or, 0},
    {"bitwise_or", "Scalar", "Tensor self, Scalar other", ex_bitwise_or, 0},
    {"bitwise_not", "default", "Tensor self", ex_bitwise_not, 0},
    {"reciprocal", "default", "Tensor self", ex_reciprocal, 0},
    {"square", "default", "Tensor self", ex_square, 0},
    {"floor", "default", "Tensor self", ex_floor, 0},
    {"ceil", "default", "Tensor self", ex_ceil, 0},
    {"trunc", "default", "Tensor self", ex_trunc, 0},
    {"round", "default", "Tensor self", ex_round, 0},
    {"sign", "default", "Tensor self", ex_sign, 0},
    {"addcmul", "default", "Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1", ex_addcmul, 0},
    {"addcdiv", "default", "Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1", ex_addcdiv, 0},
    {"lerp", "Scalar", "Tensor self, Tensor end, Scalar weight", ex_lerp, 0},
    {"lerp", "Tensor", "Tensor self, Tensor end, Tensor weight", ex_lerp, 0},
    {"_to_copy", "default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None", ex_to_copy, 0},
    {"type_as", "default", "Tensor self, Tensor other", ex_type_as, 0},
    {"copy", "default", "Tensor self, Tensor src, bool non_blocking=False", ex_copy, 0},
    {"_local_scalar_dense", "default", "Tensor self", ex_local_scalar_dense, 0},
    {"contiguous", "default", "Tensor self, *, MemoryFormat memory_format=0", ex_identity, 0},
    {"squeeze", "default", "Tensor self", ex_squeeze, 0},
    {"squeeze", "dim", "Tensor self, int dim", ex_squeeze, 0},
    {"squeeze", "dims", "Tensor self, int[] dim", ex_squeeze, 0},
    {"flatten", "using_ints", "Tensor self, int start_dim=0, int end_dim=-1", ex_flatten, 0},
    {"unflatten", "int", "Tensor self, int dim, SymInt[] sizes", ex_unflatten, 0},
    {"expand_as", "default", "Tensor self, Tensor other", ex_expand_as, 0},
    {"repeat", "default", "Tensor self, SymInt[] repeats", ex_repeat, 0},
    {"select", "int", "Tensor self, int dim, SymInt index", ex_select, 0},
    {"slice", "Tensor", "Tensor self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1", ex_slice, 0},
    {"split_with_sizes", "default", "Tensor self, SymInt[] split_sizes, int dim=0", ex_split_with_sizes, 0},
    {"split", "Tensor", "Tensor self, SymInt split_size, int dim=0", ex_split, 0},
    {"split", "sizes", "Tensor self, SymInt[] split_size, int dim=0", ex_split_with_sizes, 0},
    {"chunk", "default", "Tensor self, int chunks, int dim=0", ex_chunk, 0},
    {"unbind", "int", "Tensor self, int dim=0", ex_unbind, 0},
    {"gather", "default", "Tensor self, int dim, Tensor index, *, bool sparse_grad=False", ex_gather, 0},
    {"scatter", "src", "Tensor self, int dim, Tensor index, Tensor src", ex_scatter, 0},
    {"scatter", "value", "Tensor self, int dim, Tensor index, Scalar value", ex_scatter, 0},
    {"scatter", "reduce", "Tensor self, int dim, Tensor index, Tensor src, *, str reduce", ex_scatter, 0},
    {"scatter", "value_reduce", "Tensor self, int dim, Tensor index, Scalar value, *, str reduce", ex_scatter, 0},
    {"scatter_add", "default", "Tensor self, int dim, Tensor index, Tensor src", ex_scatter, 0},
    {"index_select", "default", "Tensor self, int dim, Tensor index", ex_index_select, 0},
    {"index", "Tensor", "Tensor self, Tensor?[] indices", ex_index, 0},
    {"index_put", "default", "Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False", ex_index_put, 0},
    {"index_put_", "default", "Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False", ex_index_put, INPLACE},
    {"_index_put_impl_", "default", "Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False, bool unsafe=False", ex_index_put, INPLACE},
    {"embedding", "default", "Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False", ex_embedding, 0},
    {"embedding_dense_backward", "default", "Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq", ex_embedding_dense_backward, 0},
    {"select_backward", "default", "Tensor grad_output, SymInt[] input_sizes, int dim, SymInt index", ex_select_backward, 0},
    {"slice_backward", "default", "Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt end, SymInt step", ex_slice_backward, 0},
    {"amax", "default", "Tensor self, int[1] dim=[], bool keepdim=False", ex_amax, 0},
    {"amin", "default", "Tensor self, int[1] dim=[], bool keepdim=False", ex_amin, 0},
    {"max", "default", "Tensor self", ex_max, 0},
    {"max", "dim", "Tensor self, int dim, bool keepdim=False", ex_max, 0},
    {"max", "other", "Tensor self, Tensor other", ex_max, 0},
    {"min", "default", "Tensor self", ex_min, 0},
    {"min", "dim", "Tensor self, int dim, bool keepdim=False", ex_min, 0},
    {"min", "other", "Tensor self, Tensor other", ex_min, 0},
    {"argmax", "default", "Tensor self, int? dim=None, bool keepdim=False", ex_argmax, 0},
    {"argmin", "default", "Tensor self, int? dim=None, bool keepdim=False", ex_argmin, 0},
    {"prod", "default", "Tensor self, *, ScalarType? dtype=None", ex_prod, 0},
    {"prod", "dim_int", "Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None", ex_prod, 0},
    {"any", "default", "Tensor self", ex_any, 0},
    {"any", "dim", "Tensor self, int dim, bool keepdim=False", ex_any, 0},
    {"any", "dims", "Tensor self, int[]? dim=None, bool keepdim=False", ex_any, 0},
    {"all", "default", "Tensor self", ex_all, 0},
    {"all", "dim", "Tensor self, int dim, bool keepdim=False", ex_all, 0},
    {"all", "dims", "Tensor self, int[]? dim=None, bool keepdim=False", ex_all, 0},
    {"var", "default", "Tensor self, bool unbiased=True", ex_var, 0},
    {"var", "dim", "Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False", ex_var, 0},
    {"var", "correction", "Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False", ex_var, 0},
    {"logsumexp", "default", "Tensor self, int[1] dim, bool keepdim=False", ex_logsumexp, 0},
    {"nll_loss_forward", "default", "Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index", ex_nll_loss_forward, 0},
    {"nll_loss_backward", "default", "Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index, Tensor total_weight", ex_nll_loss_backward, 0},
    {"mse_loss", "default", "Tensor self, Tensor target, int reduction=1", ex_mse_loss, 0},
    {"_scaled_dot_product_flash_attention_for_cpu", "default", "Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None", ex_sdpa_flash, 0},
    {"_scaled_dot_product_flash_attention_for_cpu_backward", "default", "Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, float? scale=None", ex_sdpa_flash_backward, 0},
    /* in place: the result replaces self */
    {"add_", "Tensor", POINTWISE_ALPHA, ex_add, INPLACE},
    {"add_", "Scalar", "Tensor self, Scalar other, Scalar alpha=1", ex_add, INPLACE},
    {"sub_", "Tensor", POINTWISE_ALPHA, ex_sub, INPLACE},
    {"sub_", "Scalar", "Tensor self, Scalar other, Scalar alpha=1", ex_sub, INPLACE},
    {"mul_", "Tensor", "Tensor self, Tensor other", ex_mul, INPLACE},
    {"mul_", "Scalar", "Tensor self, Scalar other", ex_mul, INPLACE},
    {"div_", "Tensor", "Tensor self, Tensor other", ex_div, INPLACE},
    {"div_", "Scalar", "Tensor self, Scalar other", ex_div, INPLACE},
    {"div_", "Tensor_mode", "Tensor self, Tensor other, *, str? rounding_mode", ex_div, INPLACE},
    {"div_", "Scalar_mode", "Tensor self, Scalar other, *, str? rounding_mode", ex_div, INPLACE},
    {"addcmul_", "default", "Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1", ex_addcmul, INPLACE},
    {"addcdiv_", "default", "Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1", ex_addcdiv, INPLACE},
    {"lerp_", "Scalar", "Tensor self, Tensor end, Scalar weight", ex_lerp, INPLACE},
    {"lerp_", "Tensor", "Tensor self, Tensor end, Tensor weight", ex_lerp, INPLACE},
    {"pow_", "Scalar", "Tensor self, Scalar exponent", ex_pow, INPLACE},
    {"pow_", "Tensor", "Tensor self, Tensor exponent", ex_pow, INPLACE},
    {"clamp_", "default", "Tensor self, Scalar? min=None, Scalar? max=None", ex_clamp, INPLACE},
    {"clamp_", "Tensor", "Tensor self, Tensor? min=None, Tensor? max=None", ex_clamp, INPLACE},
    {"clamp_min_", "default", "Tensor self, Scalar min", ex_clamp_min, INPLACE},
    {"clamp_max_", "default", "Tensor self, Scalar max", ex_clamp_max, INPLACE},
    {"sqrt_", "default", "Tensor self", ex_sqrt, INPLACE},
    {"exp_", "default", "Tensor self", ex_exp, INPLACE},
    {"neg_", "default", "Tensor self", ex_neg, INPLACE},
    {"relu_", "default", "Tensor self", ex_relu, INPLACE},
    {"fill_", "Scalar", "Tensor self, Scalar value", ex_fill, INPLACE},
    {"fill_", "Tensor", "Tensor self, Tensor value", ex_fill, INPLACE},
    {"zero_", "default", "Tensor self", ex_fill, INPLACE},
    {"copy_", "default", "Tensor self, Tensor src, bool non_blocking=False", ex_copy, INPLACE},
    {"masked_fill_", "Scalar", "Tensor self, Tensor mask, Scalar value", ex_masked_fill, INPLACE},
    {"masked_fill_", "Tensor", "Tensor self, Tensor mask, Tensor value", ex_masked_fill, INPLACE},
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

/* Whether the table has op: its packet and, when it names one, the overload
 * ("default" only where the packet has one); arguments aside. */
bool tpk_aten_known(const char *op) {
  char packet[96], overload[64];
  if (!op || !split_name(op, packet, sizeof packet, overload, sizeof overload)) return false;
  for (int i = 0; i < NOVERLOADS; i++)
    if (strcmp(OVERLOADS[i].packet, packet) == 0 && (!overload[0] || strcmp(OVERLOADS[i].name, overload) == 0)) return true;
  return false;
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
  /* A named overload is tried first, then the packet's others: ATen takes a
   * number for a Tensor argument (add.Tensor(x, 1.0) in FX graphs), which
   * is the Scalar overload here. */
  int named = -1;
  if (overload[0]) {
    for (int k = first; k <= last && named < 0; k++)
      if (strcmp(OVERLOADS[k].name, overload) == 0) named = k;
    if (named < 0 && strcmp(overload, "default") == 0)
      return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s': %s has no default overload", op, packet);
    if (named < 0) return tpk_error(err, TPK_ERR_UNSUPPORTED, "aten op '%s': tpk knows no overload '%s' of %s", op, overload, packet);
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
  /* The first overload whose schema the arguments fit; then, as ATen does,
   * with numbers given for Tensors wrapped. The reasons are the first pass's. */
  TpkStr why = {0};
  const Overload *chosen = NULL;
  for (int pass = 0; pass < 2 && !chosen; pass++)
    for (int t = first - (named >= 0); t <= last && !chosen; t++) {
      int i = t < first ? named : t;
      if (t >= first && t == named) continue;
      char reason[300];
      if (bind(c, &OVERLOADS[i], args, nargs, pass == 1, reason, sizeof reason))
        chosen = &OVERLOADS[i];
      else if (pass == 1)
        continue;
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
    gb->index_args = index_args(c, args, nargs);
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
