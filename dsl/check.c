/*
 * check.c — from a parsed .tpk file to IR.
 *
 * One pass over each kernel resolves names, infers dtypes and symbolic
 * shapes, enforces every rule of the language and builds the tile-level IR
 * as it goes (the way Lua's parser emits code while it parses). Building and
 * checking together keeps one copy of each rule: the place that knows a
 * shape is the place that builds the op.
 *
 * Errors are reported at the culprit's span and checking goes on: an
 * expression that failed evaluates to an error value that silences further
 * complaints about it, so one mistake gives one diagnostic.
 *
 * Mutable variables become SSA: a `var` assigned inside a loop becomes a
 * loop-carried value (iter arg + yield), one assigned inside an `if` becomes
 * an if result. Which variables those are is found by a pre-scan of the body.
 *
 * Compile-time integers (literals, consts, tunables, shape symbols and their
 * arithmetic) are evaluated as TpkDims, so `f32[BM, D]` and `B*H` are shapes.
 * Literals are weakly typed (JAX's rule): `x * 2` keeps x's dtype.
 */
#include "dsl/dsl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- What names and expressions denote ---------------------------------------- */

typedef enum SymKind {
  SYM_CONST,  /* file-level const: val is V_INT or V_FLT */
  SYM_TUNE,   /* tunable: dim (a symbol, or a constant when chosen) */
  SYM_SHAPE,  /* shape symbol: dim */
  SYM_REF,    /* tensor parameter, output or scratch: val V_REF */
  SYM_SCALAR, /* scalar parameter: val V_VAL */
  SYM_LET,    /* immutable binding */
  SYM_VAR,    /* mutable binding: val is its current SSA value */
  SYM_INDEX,  /* loop index from 0..N: val V_VAL i32 */
  SYM_TILE    /* tile index from tiles(N, B): val V_TILE */
} SymKind;

typedef enum ValKind {
  V_ERR,  /* already reported: stay silent */
  V_NONE, /* no value (wait(c)) */
  V_VAL,  /* an SSA value: tensor, scalar or dma handle */
  V_INT,  /* compile-time integer, weakly typed */
  V_DIM,  /* compile-time integer known as a dimension (a tunable), weakly typed */
  V_FLT,  /* compile-time float, weakly typed */
  V_REF,  /* a memory ref not yet loaded (x in `x + y`, y in `y[i] = ..`) */
  V_TILE  /* a tile index */
} ValKind;

typedef struct Sym Sym;

/* Where a const is in its evaluation (eval_const). */
typedef enum ConstState {
  CONST_PENDING,
  CONST_ACTIVE, /* its dependencies are being evaluated: it is on the stack */
  CONST_DONE    /* val holds its value, or ERR */
} ConstState;

typedef struct Val {
  ValKind k;
  TpkValue *v; /* V_VAL, V_REF, V_TILE */
  int64_t i;   /* V_INT */
  const TpkDim *dim; /* V_DIM */
  double f;    /* V_FLT */
  Sym *sym;    /* V_REF: the parameter/output/scratch it names */
} Val;

struct Sym {
  SymKind kind;
  const char *name;
  TpkSpan span; /* the declaration */
  Sym *next;    /* enclosing entries of the scope chain */
  Val val;
  const TpkDim *dim;     /* SYM_SHAPE, SYM_TUNE */
  TpkParamRole role;     /* SYM_REF: parameter role */
  bool scratch;          /* SYM_REF: VMEM scratch */
  bool semaphore;        /* SYM_REF: DMA semaphores (SMEM counters), only copy_async and wait take them */
  const TpkType *type;   /* SYM_VAR: the declared type, fixed for life */
  int grid_depth;        /* SYM_VAR: grid nesting where declared */
  const TpkAst *decl;    /* SYM_CONST: the definition, evaluated lazily */
  ConstState state;      /* SYM_CONST */
  bool cyclic;           /* SYM_CONST: its definition reaches itself (reported) */
  Sym **deps;            /* SYM_CONST, once active: the consts its definition names */
  int ndeps, next_dep;   /* ... and the next of them to evaluate */
  Sym *waiter;           /* SYM_CONST, while active: the const waiting for this one */
};

/* The state of checking one file. */
typedef struct Checker {
  TpkDiags *diags;
  const TpkCheckOptions *opts;
  TpkModule *m;
  TpkBuilder b;
  Sym *globals;   /* consts, also in consts */
  TpkPtrMap consts; /* interned name -> its const's Sym (in the module arena) */
  Sym *scope;     /* innermost first; ends in globals */
  /* per kernel */
  bool in_kernel;
  int grid_depth; /* 1 inside a grid body */
  int grid_rank;
  /* `seq` grid axes (trailing): their loop indices, for program_id(axis) */
  int grid_parallel;
  TpkValue *seq_index[TPK_MAX_RANK];
  const TpkAst *hoisted; /* a grid body whose scratch is declared before its seq loops */
  const TpkTune *tunes; /* the kernel's tunables */
  int ntunes;
  const bool *bind_used; /* parallel to opts->binds */
  bool *bind_seen, *tune_seen;
} Checker;

static const Val ERR = {.k = V_ERR};

/* ---- Small helpers ------------------------------------------------------------ */

#define SHAPE_BUF 256

static const char *shape_str(Checker *c, int rank, const TpkDim *const *dims) {
  TpkStr s = {0};
  tpk_shape_print(&s, rank, dims);
  const char *r = tpk_arena_strdup(&c->m->arena, s.data ? s.data : "[]");
  tpk_str_free(&s);
  return r ? r : "[?]";
}

static const char *type_str(Checker *c, const TpkType *t) {
  TpkStr s = {0};
  tpk_type_print(&s, t);
  const char *r = tpk_arena_strdup(&c->m->arena, s.data ? s.data : "?");
  tpk_str_free(&s);
  return r ? r : "?";
}

/* The source text of a node, for hints that quote the user's code. */
static const char *src_text(Checker *c, const TpkAst *n) {
  const TpkSource *src = c->diags->src;
  if (!src || n->span.offset + n->span.len > src->len) return "...";
  const char *r = tpk_arena_strndup(&c->m->arena, src->text + n->span.offset, n->span.len);
  return r ? r : "...";
}

static TpkLoc loc_of(const TpkAst *n) { return (TpkLoc){n->span.line, n->span.col}; }

static void at(Checker *c, const TpkAst *n) { c->b.loc = loc_of(n); }

static Val val_of(TpkValue *v) { return v ? (Val){.k = V_VAL, .v = v} : ERR; }
static Val int_val(int64_t i) { return (Val){.k = V_INT, .i = i}; }
static Val flt_val(double f) { return (Val){.k = V_FLT, .f = f}; }
/* A compile-time integer as a dimension: a constant folds to V_INT. */
static Val dim_val(const TpkDim *d) {
  int64_t k;
  if (!d) return (Val){.k = V_ERR};
  return tpk_dim_is_const(d, &k) ? int_val(k) : (Val){.k = V_DIM, .dim = d};
}

static int count_list(const TpkAst *n) {
  int k = 0;
  for (; n; n = n->next) k++;
  return k;
}

/* "did you mean 'x'?" among candidate names (tpk_suggest's rule), or NULL. */
static const char *suggest(Checker *c, const char *name, const char *const *cands, int n) {
  const char *best = tpk_suggest(name, cands, n);
  return best ? tpk_arena_printf(&c->m->arena, "did you mean '%s'?", best) : NULL;
}

/* ---- Scopes -------------------------------------------------------------------- */

/* A name owned by the module: the AST (and its strings) is freed after
 * checking, the IR lives on. */
static const char *module_name(Checker *c, const char *name) {
  return name ? tpk_module_intern(c->m, name, strlen(name)) : NULL;
}

/* Sym names are interned in the module, so a lookup interns the name once
 * and compares pointers: along the kernel's scope chain, then in the const
 * table (a file may hold hundreds of consts). */
static Sym *const_find(const Checker *c, const char *key) {
  void *s = NULL;
  if (key) tpk_ptrmap_get(&c->consts, key, &s);
  return s;
}

static Sym *lookup(Checker *c, const char *name) {
  const char *key = module_name(c, name);
  for (Sym *s = c->scope; s && s != c->globals; s = s->next)
    if (s->name == key) return s;
  return const_find(c, key);
}

/* The const named `name`, wherever the scope is (while the consts are being
 * declared the scope chain is all consts, too long to walk per lookup). */
static Sym *const_lookup(Checker *c, const char *name) { return const_find(c, module_name(c, name)); }

static Sym *declare(Checker *c, SymKind kind, const char *name, TpkSpan span) {
  Sym *s = tpk_arena_alloc(&c->m->arena, sizeof *s);
  if (!s) return NULL;
  s->kind = kind;
  s->name = module_name(c, name);
  if (!s->name) return NULL;
  s->span = span;
  s->next = c->scope;
  s->grid_depth = c->grid_depth;
  c->scope = s;
  return s;
}

static const char *sym_what(const Sym *s) {
  switch (s->kind) {
  case SYM_CONST: return "a const";
  case SYM_TUNE: return "a tunable";
  case SYM_SHAPE: return "a shape symbol";
  case SYM_REF: return s->scratch ? "a scratch buffer" : s->role == TPK_PARAM_IN ? "an input" : "an output";
  case SYM_SCALAR: return "a scalar parameter";
  case SYM_LET: return "a let binding";
  case SYM_VAR: return "a var";
  case SYM_INDEX: return "a loop index";
  case SYM_TILE: return "a tile index";
  }
  return "a name";
}

/* Declare a kernel-local name, refusing to shadow another kernel-level name
 * of this kernel (shadowing is a classic source of kernel bugs; consts may be
 * shadowed since they are file-wide). */
static Sym *declare_local(Checker *c, SymKind kind, const char *name, TpkSpan span) {
  Sym *old = lookup(c, name);
  if (old && old->kind != SYM_CONST) {
    tpk_diag_error(c->diags, span, "'%s' is already declared as %s", name, sym_what(old));
    if (old->span.line) tpk_diag_note(c->diags, old->span, "'%s' was declared here", name);
  }
  return declare(c, kind, name, span);
}

static void unknown_name(Checker *c, const TpkAst *n) {
  const char *cands[64];
  int k = 0;
  for (Sym *s = c->scope; s && k < 64; s = s->next) cands[k++] = s->name;
  tpk_diag_error_hint(c->diags, n->span, suggest(c, n->name, cands, k), "unknown name '%s'", n->name);
}

/* ---- Compile-time evaluation ------------------------------------------------------ */

static Val eval_const(Checker *c, Sym *s);
static Val eval(Checker *c, const TpkAst *n);
static TpkValue *convert(Checker *c, TpkValue *v, TpkDType dt);
static TpkValue *value_of_dim(Checker *c, const TpkAst *n, const TpkDim *d);

/* Evaluate n as a dimension: an integer built from literals, consts,
 * tunables, shape symbols and tile sizes with + - * /. In parameter and output
 * shapes (`declare_syms`), unknown names become new shape symbols. */
static const TpkDim *eval_dim_x(Checker *c, const TpkAst *n, bool declare_syms) {
  switch (n->kind) {
  case TPK_AST_INT:
    return tpk_dim_const(c->m, n->ival);
  case TPK_AST_NAME: {
    Sym *s = lookup(c, n->name);
    if (!s && declare_syms) {
      s = declare(c, SYM_SHAPE, n->name, n->span);
      if (!s) return NULL;
      int64_t v = 0;
      bool bound = false;
      for (int i = 0; c->opts && i < c->opts->nbinds; i++)
        if (strcmp(c->opts->binds[i].name, n->name) == 0) {
          v = c->opts->binds[i].value;
          bound = true;
          c->bind_seen[i] = true;
        }
      if (bound && v < 0) {
        tpk_diag_error(c->diags, n->span, "shape symbol %s is bound to %lld; sizes cannot be negative", n->name,
                       (long long)v);
        bound = false;
      }
      s->dim = bound ? tpk_dim_const(c->m, v) : tpk_dim_sym(c->m, tpk_module_intern(c->m, n->name, strlen(n->name)));
      return s->dim;
    }
    if (!s) {
      unknown_name(c, n);
      return NULL;
    }
    if (s->kind == SYM_SHAPE || s->kind == SYM_TUNE) return s->dim;
    Val v = s->kind == SYM_CONST ? eval_const(c, s) : s->val;
    if (v.k == V_ERR) return NULL;
    if ((s->kind == SYM_CONST || s->kind == SYM_LET) && v.k == V_INT) return tpk_dim_const(c->m, v.i);
    if (s->kind == SYM_LET && v.k == V_DIM) return v.dim;
    tpk_diag_error(c->diags, n->span, "'%s' is %s, not a compile-time integer; sizes are built from integer literals, consts, tunables and shape symbols",
                   n->name, sym_what(s));
    return NULL;
  }
  case TPK_AST_FIELD:
    if (n->lhs->kind == TPK_AST_NAME && strcmp(n->name, "size") == 0) {
      Sym *s = lookup(c, n->lhs->name);
      if (s && s->kind == SYM_TILE) return s->val.v->type->block;
    }
    break;
  case TPK_AST_UNARY:
    if (n->op == '-') {
      const TpkDim *a = eval_dim_x(c, n->lhs, declare_syms);
      return a ? tpk_dim_binary(c->m, TPK_DIM_SUB, tpk_dim_const(c->m, 0), a) : NULL;
    }
    break;
  case TPK_AST_BINARY: {
    TpkDimKind k;
    switch (n->op) {
    case '+': k = TPK_DIM_ADD; break;
    case '-': k = TPK_DIM_SUB; break;
    case '*': k = TPK_DIM_MUL; break;
    case '/': k = TPK_DIM_DIV; break;
    default: goto bad;
    }
    const TpkDim *a = eval_dim_x(c, n->lhs, declare_syms);
    const TpkDim *b = eval_dim_x(c, n->rhs, declare_syms);
    if (!a || !b) return NULL;
    const TpkDim *r = tpk_dim_binary(c->m, k, a, b);
    if (!r) tpk_diag_error(c->diags, n->rhs->span, "division by zero or by a negative size");
    return r;
  }
  default:
    break;
  }
bad:
  tpk_diag_error(c->diags, n->span,
                 "expected a size: an integer built from literals, consts, tunables and shape symbols with + - * /");
  return NULL;
}

static const TpkDim *eval_dim(Checker *c, const TpkAst *n) { return eval_dim_x(c, n, false); }

/* A compile-time integer (axis=, block sizes, slice bounds). */
static bool eval_int(Checker *c, const TpkAst *n, int64_t *out) {
  Val v = eval(c, n);
  if (v.k == V_ERR) return false;
  if (v.k == V_INT) {
    *out = v.i;
    return true;
  }
  tpk_diag_error(c->diags, n->span, "expected a compile-time integer (a literal, const or tunable)");
  return false;
}

/* The consts that expression n names (n's list siblings too when `list`),
 * stored into out[k...] when out is non-NULL; returns the new k. The walk
 * recurses only as deep as the expression, which the parser bounds. */
static int const_refs(Checker *c, const TpkAst *n, bool list, Sym **out, int k) {
  for (; n; n = list ? n->next : NULL) {
    if (n->kind == TPK_AST_NAME) {
      Sym *s = lookup(c, n->name);
      if (s && s->kind == SYM_CONST) {
        if (out) out[k] = s;
        k++;
      }
    }
    k = const_refs(c, n->lhs, true, out, k);
    k = const_refs(c, n->rhs, true, out, k);
    k = const_refs(c, n->args, true, out, k);
    k = const_refs(c, n->dims, true, out, k);
  }
  return k;
}

static bool const_activate(Checker *c, Sym *s, Sym *waiter) {
  s->state = CONST_ACTIVE;
  s->waiter = waiter;
  s->ndeps = const_refs(c, s->decl->rhs, false, NULL, 0);
  s->deps = tpk_arena_alloc(&c->m->arena, (size_t)(s->ndeps ? s->ndeps : 1) * sizeof *s->deps);
  if (!s->deps) return false;
  const_refs(c, s->decl->rhs, false, s->deps, 0);
  return true;
}

/* Evaluate an active const whose dependencies are all done (or cyclic). */
static void const_finish(Checker *c, Sym *s) {
  Val v = eval(c, s->decl->rhs);
  if (v.k != V_ERR && v.k != V_INT && v.k != V_FLT) {
    tpk_diag_error(c->diags, s->decl->rhs->span, "a const must be a compile-time number");
    v = ERR;
  }
  s->val = s->cyclic ? ERR : v;
  s->state = CONST_DONE;
}

/* The value of const s. Consts are evaluated in dependency order with an
 * explicit stack (linked through `waiter`), never by eval() recursing into
 * the consts an expression names: a file may chain any number of them
 * (`const E0 = E1; const E1 = E2; ...`), far deeper than the C stack. A
 * const met again while it is active closes a cycle: that is reported once,
 * at that const, and every const on the cycle is ERR. */
static Val eval_const(Checker *c, Sym *s) {
  if (s->state == CONST_DONE) return s->val;
  if (s->state == CONST_ACTIVE) { /* reached by eval; const_refs found it first */
    if (!s->cyclic) tpk_diag_error(c->diags, s->decl->name_span, "const '%s' depends on itself", s->name);
    s->cyclic = true;
    return ERR;
  }
  /* Consts see only other consts, wherever the reference came from. */
  Sym *saved = c->scope;
  bool saved_kernel = c->in_kernel;
  c->scope = c->globals;
  c->in_kernel = false;
  Sym *top = const_activate(c, s, NULL) ? s : NULL;
  while (top) {
    if (top->next_dep == top->ndeps) {
      const_finish(c, top);
      top = top->waiter;
      continue;
    }
    Sym *d = top->deps[top->next_dep++];
    if (d->state == CONST_ACTIVE && !d->cyclic) {
      tpk_diag_error(c->diags, d->decl->name_span, "const '%s' depends on itself", d->name);
      d->cyclic = true;
    } else if (d->state == CONST_PENDING) {
      if (!const_activate(c, d, top)) break; /* out of memory: reported by tpk_check */
      top = d;
    }
  }
  c->scope = saved;
  c->in_kernel = saved_kernel;
  return s->state == CONST_DONE ? s->val : ERR;
}

/* ---- Turning compile-time values into SSA values ------------------------------- */

/* Ops can only be built inside a kernel; elsewhere (a const) the expression
 * must fold. */
static bool can_build(Checker *c, const TpkAst *n) {
  if (c->b.block) return true;
  tpk_diag_error(c->diags, n->span, "not a compile-time constant");
  return false;
}

static bool int_fits(int64_t v, TpkDType dt) {
  switch (dt) {
  case TPK_I32: return v >= INT32_MIN && v <= INT32_MAX;
  case TPK_I16: return v >= INT16_MIN && v <= INT16_MAX;
  case TPK_I8: return v >= INT8_MIN && v <= INT8_MAX;
  case TPK_U8: return v >= 0 && v <= UINT8_MAX;
  case TPK_U16: return v >= 0 && v <= UINT16_MAX;
  case TPK_U32: return v >= 0 && v <= UINT32_MAX;
  case TPK_BOOL: return v == 0 || v == 1;
  default: return true;
  }
}

/* A constant of type t (a scalar, or a splat of a tensor type) from a
 * compile-time value, checking that it fits. */
static TpkValue *const_of_type(Checker *c, const TpkAst *n, Val v, const TpkType *t) {
  if (!can_build(c, n)) return NULL;
  at(c, n);
  TpkDType dt = t->dtype;
  if (tpk_dtype_is_float(dt)) return tpk_build_const_float(&c->b, t, v.k == V_INT ? (double)v.i : v.f);
  int64_t i = v.i;
  if (v.k == V_FLT) {
    if (!isfinite(v.f) || v.f != trunc(v.f) || fabs(v.f) > 9.2e18) {
      tpk_diag_error(c->diags, n->span, "%g is not a whole number; it cannot be %s", v.f, tpk_dtype_name(dt));
      return NULL;
    }
    i = (int64_t)v.f;
  }
  if (!int_fits(i, dt)) {
    tpk_diag_error(c->diags, n->span, "%lld does not fit in %s", (long long)i, tpk_dtype_name(dt));
    return NULL;
  }
  return tpk_build_const_int(&c->b, t, i);
}

static TpkValue *const_scalar(Checker *c, const TpkAst *n, Val v, TpkDType dt) {
  return const_of_type(c, n, v, tpk_type_scalar(c->m, dt));
}

/* The ref as a whole value: `w` in `d * w`. */
static TpkValue *load_whole(Checker *c, const TpkAst *n, TpkValue *ref) {
  if (!can_build(c, n)) return NULL;
  at(c, n);
  const TpkType *rt = ref->type;
  TpkIndexPattern whole = {.rank = rt->rank};
  for (int i = 0; i < rt->rank; i++) whole.dim[i] = TPK_INDEX_ALL;
  const TpkType *t = tpk_type_tensor(c->m, rt->dtype, rt->rank, rt->dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_LOAD, 1, &ref, 1, &t);
  if (!op) return NULL;
  tpk_op_set_index(c->m, op, "index", &whole);
  return &op->out[0];
}

static void tile_misuse(Checker *c, const TpkAst *n) {
  const char *name = n->kind == TPK_AST_NAME ? n->name : "i";
  tpk_diag_error_hint(c->diags, n->span,
                      tpk_arena_printf(&c->m->arena, "use %s.id (the tile number) or %s.start (its first element)",
                                       name, name),
                      "'%s' is a tile index, not a number", src_text(c, n));
}

/* Any value as an SSA value. Weak constants take dtype `hint` when it is a
 * dtype (TPK_DTYPE_COUNT: no hint): an int literal takes any numeric dtype,
 * a float literal a float dtype, else f32. */
static Val materialize(Checker *c, const TpkAst *n, Val v, TpkDType hint) {
  switch (v.k) {
  case V_ERR:
  case V_VAL:
    return v;
  case V_INT:
    return val_of(const_scalar(c, n, v, hint != TPK_DTYPE_COUNT && hint != TPK_BOOL ? hint : TPK_I32));
  case V_DIM: { /* an i32 at run time until bound; takes a numeric hint as a literal does */
    if (!can_build(c, n)) return ERR;
    at(c, n);
    TpkValue *x = value_of_dim(c, n, v.dim);
    return val_of(x && hint != TPK_DTYPE_COUNT && hint != TPK_BOOL ? convert(c, x, hint) : x);
  }
  case V_FLT:
    return val_of(const_scalar(c, n, v, tpk_dtype_is_float(hint) ? hint : TPK_F32));
  case V_REF:
    return val_of(load_whole(c, n, v.v));
  case V_TILE:
    tile_misuse(c, n);
    return ERR;
  case V_NONE:
    tpk_diag_error(c->diags, n->span, "'%s' has no value", src_text(c, n));
    return ERR;
  }
  return ERR;
}

/* A value that must be a tensor or scalar (not a dma handle). */
static bool is_data(const TpkValue *v) { return v->type->kind == TPK_TYPE_TENSOR; }

static Val need_data(Checker *c, const TpkAst *n, Val v, TpkDType hint) {
  v = materialize(c, n, v, hint);
  if (v.k == V_VAL && !is_data(v.v)) {
    tpk_diag_error(c->diags, n->span, "'%s' is a copy handle; only wait() takes it", src_text(c, n));
    return ERR;
  }
  return v;
}

static TpkValue *convert(Checker *c, TpkValue *v, TpkDType dt) {
  if (!v || v->type->dtype == dt) return v;
  return tpk_build_convert(&c->b, v, dt);
}

/* NumPy broadcasting of two shapes: trailing alignment, size-1 dims stretch.
 * Dims are compared structurally; M and N are different even if they might
 * be equal at run time. */
static bool broadcast_shapes(int ra, const TpkDim *const *da, int rb, const TpkDim *const *db, int *rr,
                             const TpkDim **dr) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    const TpkDim *a = i < ra ? da[ra - 1 - i] : NULL;
    const TpkDim *b = i < rb ? db[rb - 1 - i] : NULL;
    int64_t k;
    const TpkDim *d;
    if (!a) d = b;
    else if (!b || a == b) d = a;
    else if (tpk_dim_is_const(a, &k) && k == 1) d = b;
    else if (tpk_dim_is_const(b, &k) && k == 1) d = a;
    else return false;
    dr[r - 1 - i] = d;
  }
  *rr = r;
  return true;
}

static TpkValue *broadcast_to(Checker *c, TpkValue *v, int rank, const TpkDim *const *dims) {
  if (!v) return NULL;
  const TpkType *t = v->type;
  if (t->rank == rank && memcmp(t->dims, dims, (size_t)rank * sizeof *dims) == 0) return v;
  return tpk_build_broadcast(&c->b, v, rank, dims);
}

/* ---- Arithmetic -------------------------------------------------------------------- */

/* LOGICAL: && || on bool; BITWISE: & | ^ on integers (and bool); SHIFT:
 * << >> on integers, the count converted to the shifted value's dtype. */
typedef enum OpClass { ARITH, COMPARE, LOGICAL, BITWISE, SHIFT } OpClass;

typedef struct BinOp {
  int ast_op;
  TpkOpcode opcode;
  OpClass cls;
  const char *text; /* quoted, as messages show it */
} BinOp;

static const BinOp BINOPS[] = {
    {'+', TPK_OP_ADD, ARITH, "'+'"},        {'-', TPK_OP_SUB, ARITH, "'-'"},       {'*', TPK_OP_MUL, ARITH, "'*'"},
    {'/', TPK_OP_DIV, ARITH, "'/'"},        {'%', TPK_OP_REM, ARITH, "'%'"},       {'<', TPK_OP_LT, COMPARE, "'<'"},
    {'>', TPK_OP_GT, COMPARE, "'>'"},       {TPK_BIN_LE, TPK_OP_LE, COMPARE, "'<='"}, {TPK_BIN_GE, TPK_OP_GE, COMPARE, "'>='"},
    {TPK_BIN_EQ, TPK_OP_EQ, COMPARE, "'=='"}, {TPK_BIN_NE, TPK_OP_NE, COMPARE, "'!='"}, {TPK_BIN_AND, TPK_OP_AND, LOGICAL, "'&&'"},
    {TPK_BIN_OR, TPK_OP_OR, LOGICAL, "'||'"},
    {'&', TPK_OP_AND, BITWISE, "'&'"},      {'|', TPK_OP_OR, BITWISE, "'|'"},      {'^', TPK_OP_XOR, BITWISE, "'^'"},
    {TPK_BIN_SHL, TPK_OP_SHL, SHIFT, "'<<'"}, {TPK_BIN_SHR, TPK_OP_SHR, SHIFT, "'>>'"},
};

static const BinOp *binop_of(int ast_op) {
  for (size_t i = 0; i < TPK_ARRAY_LEN(BINOPS); i++)
    if (BINOPS[i].ast_op == ast_op) return &BINOPS[i];
  return NULL;
}

/* Fold an operator over two compile-time numbers. Returns false when it does
 * not fold (comparisons, which yield bool values). */
static bool fold(Checker *c, const TpkAst *n, TpkOpcode op, Val a, Val b, Val *out) {
  if (a.k == V_INT && b.k == V_INT) {
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
    case TPK_OP_ADD: overflow = __builtin_add_overflow(a.i, b.i, &r); break;
    case TPK_OP_SUB: overflow = __builtin_sub_overflow(a.i, b.i, &r); break;
    case TPK_OP_MUL: overflow = __builtin_mul_overflow(a.i, b.i, &r); break;
    case TPK_OP_AND: r = a.i & b.i; break;
    case TPK_OP_OR: r = a.i | b.i; break;
    case TPK_OP_XOR: r = a.i ^ b.i; break;
    case TPK_OP_SHL:
    case TPK_OP_SHR: /* constants are 64-bit integers until they meet a dtype */
      if (b.i < 0 || b.i > 62) {
        tpk_diag_error(c->diags, n->span, "shift count %lld is out of range in a constant expression (0 to 62)",
                       (long long)b.i);
        *out = ERR;
        return true;
      }
      if (op == TPK_OP_SHR) r = a.i < 0 ? ~(~a.i >> b.i) : a.i >> b.i;
      else if (a.i > (INT64_MAX >> b.i) || a.i < -(INT64_MAX >> b.i) - 1) overflow = true;
      else r = (int64_t)((uint64_t)a.i << b.i);
      break;
    case TPK_OP_DIV:
    case TPK_OP_REM:
      if (b.i == 0) {
        tpk_diag_error(c->diags, n->span, "division by zero in a constant expression");
        *out = ERR;
        return true;
      }
      if (a.i == INT64_MIN && b.i == -1) overflow = true;
      else r = op == TPK_OP_DIV ? a.i / b.i : a.i % b.i;
      break;
    default: return false;
    }
    if (overflow) {
      tpk_diag_error(c->diags, n->span, "integer overflow in a constant expression");
      *out = ERR;
    } else {
      *out = int_val(r);
    }
    return true;
  }
  if (tpk_op_info(op)->flags & TPK_OPF_INT_ONLY) return false; /* a float operand: reported by binary() */
  double x = a.k == V_INT ? (double)a.i : a.f, y = b.k == V_INT ? (double)b.i : b.f;
  switch (op) {
  case TPK_OP_ADD: *out = flt_val(x + y); return true;
  case TPK_OP_SUB: *out = flt_val(x - y); return true;
  case TPK_OP_MUL: *out = flt_val(x * y); return true;
  case TPK_OP_DIV: *out = flt_val(x / y); return true;
  case TPK_OP_REM: *out = flt_val(fmod(x, y)); return true;
  default: return false;
  }
}

static bool is_const(Val v) { return v.k == V_INT || v.k == V_FLT; }
/* Weakly typed: takes the dtype of what it meets (literals, tunables). */
static bool is_weak(Val v) { return is_const(v) || v.k == V_DIM; }

/* Integer arithmetic over tunables and literals stays a dimension:
 * BM * 2 is a size as much as BM is. */
static bool fold_dim(Checker *c, TpkOpcode op, Val a, Val b, Val *out) {
  if ((a.k != V_DIM && a.k != V_INT) || (b.k != V_DIM && b.k != V_INT) || (a.k != V_DIM && b.k != V_DIM)) return false;
  TpkDimKind kind;
  switch (op) {
  case TPK_OP_ADD: kind = TPK_DIM_ADD; break;
  case TPK_OP_SUB: kind = TPK_DIM_SUB; break;
  case TPK_OP_MUL: kind = TPK_DIM_MUL; break;
  case TPK_OP_DIV: kind = TPK_DIM_DIV; break;
  default: return false;
  }
  const TpkDim *x = a.k == V_DIM ? a.dim : tpk_dim_const(c->m, a.i);
  const TpkDim *y = b.k == V_DIM ? b.dim : tpk_dim_const(c->m, b.i);
  int64_t k;
  if (op == TPK_OP_DIV && (!tpk_dim_is_const(y, &k) || k <= 0)) return false; /* a run-time division */
  *out = dim_val(tpk_dim_binary(c->m, kind, x, y));
  return out->k != V_ERR;
}

/* Materialize a and b to SSA values of one dtype: a weak constant takes the
 * other side's dtype; two values promote (bf16 + f32 -> f32). */
static bool unify_dtypes(Checker *c, const TpkAst *na, Val *a, const TpkAst *nb, Val *b) {
  if (is_weak(*a) && !is_weak(*b)) {
    *b = need_data(c, nb, *b, TPK_DTYPE_COUNT);
    if (b->k == V_ERR) return false;
    TpkDType h = b->v->type->dtype;
    *a = need_data(c, na, *a, a->k == V_FLT && !tpk_dtype_is_float(h) ? TPK_F32 : h);
  } else {
    *a = need_data(c, na, *a, TPK_DTYPE_COUNT);
    if (a->k == V_ERR) return false;
    TpkDType h = a->v->type->dtype;
    *b = need_data(c, nb, *b, b->k == V_FLT && !tpk_dtype_is_float(h) ? TPK_F32 : h);
  }
  if (a->k == V_ERR || b->k == V_ERR) return false;
  TpkDType dt = tpk_dtype_promote(a->v->type->dtype, b->v->type->dtype);
  if (dt == TPK_DTYPE_COUNT) {
    tpk_diag_error_hint(c->diags, nb->span, "convert one side with `as`, e.g. (x as u32)",
                        "no dtype holds both %s and %s", tpk_dtype_name(a->v->type->dtype),
                        tpk_dtype_name(b->v->type->dtype));
    return false;
  }
  a->v = convert(c, a->v, dt);
  b->v = convert(c, b->v, dt);
  return a->v && b->v;
}

/* Broadcast both to their common shape, or report which shapes clash. */
static bool unify_shapes(Checker *c, const TpkAst *n, const char *what, TpkValue **a, TpkValue **b) {
  const TpkType *ta = (*a)->type, *tb = (*b)->type;
  int r;
  const TpkDim *dims[TPK_MAX_RANK];
  if (!broadcast_shapes(ta->rank, ta->dims, tb->rank, tb->dims, &r, dims)) {
    tpk_diag_error(c->diags, n->span, "cannot broadcast %s with %s in %s", shape_str(c, ta->rank, ta->dims),
                   shape_str(c, tb->rank, tb->dims), what);
    return false;
  }
  *a = broadcast_to(c, *a, r, dims);
  *b = broadcast_to(c, *b, r, dims);
  return *a && *b;
}

static bool unify_shapes(Checker *c, const TpkAst *n, const char *what, TpkValue **a, TpkValue **b);

/* a & b, a | b, a ^ b (integers or bools, promoted as arithmetic is) and
 * a << b, a >> b (integers; the result has a's dtype and b is converted to
 * it, so `x << 13` and `x >> (k as u32)` read as written). Floats are
 * refused: their bits are reached with bitcast(). */
static Val bitwise(Checker *c, const TpkAst *n, const BinOp *bop, const TpkAst *na, Val a, const TpkAst *nb, Val b) {
  if (bop->cls == SHIFT) {
    if (is_weak(a) && !is_weak(b)) {
      b = need_data(c, nb, b, TPK_DTYPE_COUNT);
      if (b.k == V_ERR) return ERR;
      a = need_data(c, na, a, b.v->type->dtype);
    } else {
      a = need_data(c, na, a, TPK_DTYPE_COUNT);
      if (a.k == V_ERR) return ERR;
      b = need_data(c, nb, b, a.v->type->dtype);
    }
    if (a.k == V_ERR || b.k == V_ERR) return ERR;
  } else if (!unify_dtypes(c, na, &a, nb, &b)) {
    return ERR;
  }
  TpkDType dt = a.v->type->dtype, dtb = b.v->type->dtype;
  const TpkAst *bad = !tpk_dtype_is_int(dt) && (bop->cls == SHIFT || dt != TPK_BOOL) ? na
                      : !tpk_dtype_is_int(dtb) && (bop->cls == SHIFT || dtb != TPK_BOOL) ? nb : NULL;
  if (bad) {
    TpkDType got = bad == na ? dt : dtb;
    const char *hint = tpk_dtype_is_float(got) ? "work on a float's bits with bitcast(x, u32) (same width)"
                       : got == TPK_BOOL      ? "shift integers: (c as i32) << k"
                                              : NULL;
    tpk_diag_error_hint(c->diags, bad->span, hint, "%s needs integer operands; got %s", bop->text,
                        tpk_dtype_name(got));
    return ERR;
  }
  at(c, n);
  if (bop->cls == SHIFT) b.v = convert(c, b.v, dt);
  if (!unify_shapes(c, n, bop->text, &a.v, &b.v)) return ERR;
  at(c, n);
  return val_of(tpk_build_binary(&c->b, bop->opcode, a.v, b.v));
}

/* The elementwise binary op `opcode` over a and b, with the language's
 * promotion and broadcasting; n is the whole expression, na/nb the operands. */
static Val binary(Checker *c, const TpkAst *n, TpkOpcode opcode, const char *what, const TpkAst *na, Val a,
                  const TpkAst *nb, Val b) {
  if (a.k == V_ERR || b.k == V_ERR) return ERR;
  const TpkOpInfo *info = tpk_op_info(opcode);
  if (is_const(a) && is_const(b)) {
    Val r;
    if (opcode != TPK_OP_POW && opcode != TPK_OP_MAX && opcode != TPK_OP_MIN && fold(c, n, opcode, a, b, &r)) return r;
  }
  Val folded;
  if (fold_dim(c, opcode, a, b, &folded)) return folded;
  if (!can_build(c, n)) return ERR;
  at(c, n);
  const BinOp *bop = NULL;
  for (size_t i = 0; i < TPK_ARRAY_LEN(BINOPS); i++)
    if (BINOPS[i].opcode == opcode && strcmp(BINOPS[i].text, what) == 0) bop = &BINOPS[i];
  if (bop && (bop->cls == BITWISE || bop->cls == SHIFT)) return bitwise(c, n, bop, na, a, nb, b);
  if (!unify_dtypes(c, na, &a, nb, &b)) return ERR;
  TpkDType dt = a.v->type->dtype;
  bool logical = opcode == TPK_OP_AND || opcode == TPK_OP_OR;
  if (logical && dt != TPK_BOOL) {
    tpk_diag_error_hint(c->diags, n->span, "compare first, e.g. x != 0", "%s needs bool operands; got %s", what,
                        tpk_dtype_name(dt));
    return ERR;
  }
  if (!logical && !(info->flags & TPK_OPF_COMPARE) && dt == TPK_BOOL) {
    tpk_diag_error_hint(c->diags, n->span, "convert first, e.g. (c as i32)", "%s is not defined on bool values",
                        what);
    return ERR;
  }
  if ((info->flags & TPK_OPF_INT_ONLY) && !logical && !tpk_dtype_is_int(dt)) {
    tpk_diag_error(c->diags, n->span, "%s needs integer operands; got %s", what, tpk_dtype_name(dt));
    return ERR;
  }
  if ((info->flags & TPK_OPF_FLOAT_ONLY) && !tpk_dtype_is_float(dt)) {
    a.v = convert(c, a.v, TPK_F32);
    b.v = convert(c, b.v, TPK_F32);
  }
  if (!unify_shapes(c, n, what, &a.v, &b.v)) return ERR;
  at(c, n); /* loading an operand moved the location */
  return val_of(tpk_build_binary(&c->b, opcode, a.v, b.v));
}

/* exp(x) and friends: float-only functions turn integer input into f32. */
static Val unary_fn(Checker *c, const TpkAst *n, TpkOpcode opcode, const TpkAst *na, Val a) {
  if (a.k == V_ERR) return ERR;
  const TpkOpInfo *info = tpk_op_info(opcode);
  a = need_data(c, na, a, (a.k == V_INT || a.k == V_DIM) && (info->flags & TPK_OPF_FLOAT_ONLY) ? TPK_F32 : TPK_DTYPE_COUNT);
  if (a.k == V_ERR) return ERR;
  at(c, n);
  TpkDType dt = a.v->type->dtype;
  if (dt == TPK_BOOL && opcode != TPK_OP_NOT) {
    tpk_diag_error(c->diags, n->span, "%s() is not defined on bool values", info->name);
    return ERR;
  }
  if ((info->flags & TPK_OPF_FLOAT_ONLY) && !tpk_dtype_is_float(dt)) a.v = convert(c, a.v, TPK_F32);
  return val_of(tpk_build_unary(&c->b, opcode, a.v));
}

/* -a; n is the whole expression, operand the node of a. */
static Val negate(Checker *c, const TpkAst *n, const TpkAst *operand, Val a) {
  if (a.k == V_INT) {
    if (a.i == INT64_MIN) {
      tpk_diag_error(c->diags, n->span, "integer overflow in a constant expression");
      return ERR;
    }
    return int_val(-a.i);
  }
  if (a.k == V_FLT) return flt_val(-a.f);
  if (a.k == V_DIM) return dim_val(tpk_dim_binary(c->m, TPK_DIM_SUB, tpk_dim_const(c->m, 0), a.dim));
  return unary_fn(c, n, TPK_OP_NEG, operand, a);
}

static Val logical_not(Checker *c, const TpkAst *n, Val a) {
  a = need_data(c, n->lhs, a, TPK_BOOL);
  if (a.k == V_ERR) return ERR;
  if (a.v->type->dtype != TPK_BOOL) {
    tpk_diag_error_hint(c->diags, n->span,
                        tpk_dtype_is_int(a.v->type->dtype) ? "compare first (x == 0), or flip the bits with ~x"
                                                           : "compare first, e.g. x == 0",
                        "'!' needs a bool operand; got %s", type_str(c, a.v->type));
    return ERR;
  }
  at(c, n);
  return val_of(tpk_build_unary(&c->b, TPK_OP_NOT, a.v));
}

/* ~x: every bit of an integer flipped (a constant stays a 64-bit constant). */
static Val bit_not(Checker *c, const TpkAst *n, Val a) {
  if (a.k == V_INT) return int_val(~a.i);
  a = need_data(c, n->lhs, a, TPK_DTYPE_COUNT);
  if (a.k == V_ERR) return ERR;
  TpkDType dt = a.v->type->dtype;
  if (!tpk_dtype_is_int(dt)) {
    tpk_diag_error_hint(c->diags, n->span,
                        dt == TPK_BOOL ? "use !c for a bool"
                                       : "work on a float's bits with bitcast(x, u32) (same width)",
                        "'~' needs an integer operand; got %s", type_str(c, a.v->type));
    return ERR;
  }
  at(c, n);
  return val_of(tpk_build_unary(&c->b, TPK_OP_NOT, a.v));
}

static Val cast(Checker *c, const TpkAst *n, Val a, TpkDType to) {
  if (a.k == V_ERR) return ERR;
  if (is_const(a)) {
    if (tpk_dtype_is_float(to)) return val_of(const_scalar(c, n, a, to));
    if (a.k == V_FLT) {
      if (!isfinite(a.f) || fabs(a.f) > 9.2e18) {
        tpk_diag_error(c->diags, n->span, "%g cannot be converted to %s", a.f, tpk_dtype_name(to));
        return ERR;
      }
      a = int_val((int64_t)a.f); /* toward zero, as C */
    }
    if (to == TPK_BOOL) a.i = a.i != 0;
    return val_of(const_scalar(c, n, a, to));
  }
  a = need_data(c, n->lhs, a, TPK_DTYPE_COUNT);
  if (a.k == V_ERR) return ERR;
  at(c, n);
  return val_of(convert(c, a.v, to));
}

/* ---- Sizes as values --------------------------------------------------------------- */

/* An i32 scalar holding a dimension's value at run time. */
static TpkValue *value_of_dim(Checker *c, const TpkAst *n, const TpkDim *d) {
  int64_t k;
  if (tpk_dim_is_const(d, &k)) return const_scalar(c, n, int_val(k), TPK_I32);
  if (d->kind == TPK_DIM_SYM) return tpk_build_sym(&c->b, d->sym);
  TpkValue *a = value_of_dim(c, n, d->a), *b = value_of_dim(c, n, d->b);
  if (!a || !b) return NULL;
  static const TpkOpcode OPS[] = {[TPK_DIM_ADD] = TPK_OP_ADD, [TPK_DIM_SUB] = TPK_OP_SUB, [TPK_DIM_MUL] = TPK_OP_MUL,
                                  [TPK_DIM_DIV] = TPK_OP_DIV, [TPK_DIM_CDIV] = TPK_OP_CDIV};
  return tpk_build_binary(&c->b, OPS[d->kind], a, b);
}

/* ---- Indexing ------------------------------------------------------------------------ */

/* A block of a ref or value selected by an index expression, in the IR's
 * index-pattern form (see ir/ir.h). */
typedef struct Access {
  Sym *sym;      /* refs: the parameter/output/scratch; NULL for values */
  TpkValue *base; /* the ref or value indexed */
  TpkIndexPattern pattern;
  int nops;
  TpkValue *ops[TPK_MAX_RANK];
  int rank; /* the selected block's shape */
  const TpkDim *dims[TPK_MAX_RANK];
  bool gather;
} Access;

static const char *ordinal_dim(Checker *c, int i) { return tpk_arena_printf(&c->m->arena, "dimension %d", i); }

/* `ds(start, size)` (Pallas's pl.ds): `size` elements from `start`, an i32
 * scalar computed when the kernel runs (from data or arithmetic); `size` is
 * a compile-time size. Elements before 0 or past the end are masked as a
 * ragged tile's are: loads read `other`, stores drop them. */
static bool dynamic_slice(Checker *c, const TpkAst *item, int axis, Access *acc) {
  const TpkAst *args[3] = {0};
  int n = 0;
  for (const TpkAst *a = item->args; a; a = a->next) {
    if (a->kind == TPK_AST_KWARG || n == 2) {
      tpk_diag_error_hint(c->diags, a->span, "usage: ds(start, size), e.g. x[ds(offsets[g], BM), :]",
                          "ds() takes two arguments: a start and a compile-time size");
      return false;
    }
    args[n++] = a;
  }
  if (n != 2) {
    tpk_diag_error_hint(c->diags, item->span, "usage: ds(start, size), e.g. x[ds(offsets[g], BM), :]",
                        "ds() takes two arguments: a start and a compile-time size");
    return false;
  }
  Val start = eval(c, args[0]);
  if (start.k == V_ERR) return false;
  if (start.k == V_FLT || start.k == V_TILE) {
    tpk_diag_error_hint(c->diags, args[0]->span, start.k == V_TILE ? "use the tile's start: i.start" : NULL,
                        "the start of ds() must be an integer scalar; got %s", start.k == V_TILE ? "a tile index" : "a float");
    return false;
  }
  start = need_data(c, args[0], start, TPK_I32);
  if (start.k == V_ERR) return false;
  const TpkType *t = start.v->type;
  if (!tpk_dtype_is_int(t->dtype) || t->rank != 0) {
    tpk_diag_error_hint(c->diags, args[0]->span, t->rank ? "a vector of rows is a gather: index with it directly" : NULL,
                        "the start of ds() must be an integer scalar; got %s", type_str(c, t));
    return false;
  }
  Sym *named = args[1]->kind == TPK_AST_NAME ? lookup(c, args[1]->name) : NULL;
  if (named && (named->kind == SYM_LET || named->kind == SYM_VAR) && named->val.k != V_INT && named->val.k != V_DIM) {
    tpk_diag_error_hint(c->diags, args[1]->span,
                        tpk_arena_printf(&c->m->arena,
                                         "a block's size is a literal, const, tunable or shape symbol: take the largest "
                                         "block and mask what is past '%s' with where()",
                                         args[1]->name),
                        "the size of ds() must be known at compile time; '%s' is computed when the kernel runs",
                        args[1]->name);
    return false;
  }
  const TpkDim *size = eval_dim(c, args[1]);
  if (!size) return false; /* eval_dim said why: sizes are compile-time */
  int64_t k;
  if (tpk_dim_is_const(size, &k) && k <= 0) {
    tpk_diag_error(c->diags, args[1]->span, "the size of ds() must be positive; got %lld", (long long)k);
    return false;
  }
  at(c, item);
  acc->pattern.dim[axis] = TPK_INDEX_RANGE;
  acc->ops[acc->nops++] = convert(c, start.v, TPK_I32);
  acc->dims[acc->rank++] = size;
  return true;
}

/* One index item of `base[...]` against dimension `dim`; appends to acc. */
static bool index_item(Checker *c, const TpkAst *item, int axis, const TpkDim *dim, Access *acc) {
  int64_t size_k;
  bool size_known = tpk_dim_is_const(dim, &size_k);
  if (item->kind == TPK_AST_SLICE) {
    if (!item->lhs && !item->rhs) {
      acc->pattern.dim[axis] = TPK_INDEX_ALL;
      acc->dims[acc->rank++] = dim;
      return true;
    }
    const TpkDim *lo = item->lhs ? eval_dim(c, item->lhs) : tpk_dim_const(c->m, 0);
    const TpkDim *hi = item->rhs ? eval_dim(c, item->rhs) : dim;
    if (!lo || !hi) return false;
    const TpkDim *size = tpk_dim_binary(c->m, TPK_DIM_SUB, hi, lo);
    int64_t l, h, s;
    bool lo_k = tpk_dim_is_const(lo, &l), hi_k = tpk_dim_is_const(hi, &h);
    if (tpk_dim_is_const(size, &s) && s <= 0) {
      tpk_diag_error(c->diags, item->span, "slice %s is empty", src_text(c, item));
      return false;
    }
    if ((lo_k && l < 0) || (hi_k && size_known && h > size_k)) {
      tpk_diag_error(c->diags, item->span, "slice %s is out of bounds for %s of size %lld", src_text(c, item),
                     ordinal_dim(c, axis), (long long)size_k);
      return false;
    }
    TpkValue *start = value_of_dim(c, item, lo);
    if (!start) return false;
    acc->pattern.dim[axis] = TPK_INDEX_RANGE;
    acc->ops[acc->nops++] = start;
    acc->dims[acc->rank++] = size;
    return true;
  }
  if (item->kind == TPK_AST_CALL && strcmp(item->name, "ds") == 0) return dynamic_slice(c, item, axis, acc);
  Val v = eval(c, item);
  if (v.k == V_ERR) return false;
  if (v.k == V_TILE) {
    acc->pattern.dim[axis] = TPK_INDEX_TILE;
    acc->ops[acc->nops++] = v.v;
    acc->dims[acc->rank++] = v.v->type->block;
    return true;
  }
  if (v.k == V_INT && size_known && (v.i < 0 || v.i >= size_k)) {
    tpk_diag_error(c->diags, item->span, "index %lld is out of bounds for %s of size %lld", (long long)v.i,
                   ordinal_dim(c, axis), (long long)size_k);
    return false;
  }
  if (v.k == V_FLT) {
    tpk_diag_error(c->diags, item->span, "an index must be an integer; got a float");
    return false;
  }
  v = need_data(c, item, v, TPK_I32);
  if (v.k == V_ERR) return false;
  const TpkType *t = v.v->type;
  if (!tpk_dtype_is_int(t->dtype)) {
    tpk_diag_error(c->diags, item->span, "an index must be an integer; got %s", type_str(c, t));
    return false;
  }
  if (t->rank > 1) {
    tpk_diag_error(c->diags, item->span, "a gather index must be 1-D; got %s", type_str(c, t));
    return false;
  }
  if (t->rank == 1 && acc->gather) {
    tpk_diag_error(c->diags, item->span, "only one dimension may be indexed by a vector (gather)");
    return false;
  }
  at(c, item);
  TpkValue *iv = convert(c, v.v, TPK_I32);
  acc->ops[acc->nops++] = iv;
  if (t->rank == 0) {
    acc->pattern.dim[axis] = TPK_INDEX_SCALAR;
  } else {
    acc->pattern.dim[axis] = TPK_INDEX_GATHER;
    acc->gather = true;
    acc->dims[acc->rank++] = t->dims[0];
  }
  return true;
}

/* The index list of n (an INDEX node) against a base of the given shape. */
static bool index_items(Checker *c, const TpkAst *n, const char *base_name, int rank, const TpkDim *const *dims,
                        Access *acc) {
  int given = count_list(n->args);
  if (given > rank) {
    const TpkAst *extra = n->args;
    for (int i = 0; i < rank; i++) extra = extra->next;
    tpk_diag_error(c->diags, extra->span, "'%s' has %d dimension%s but %d indices are given", base_name, rank,
                   rank == 1 ? "" : "s", given);
    return false;
  }
  int axis = 0;
  bool ok = true;
  for (const TpkAst *item = n->args; item; item = item->next, axis++)
    ok = index_item(c, item, axis, dims[axis], acc) && ok;
  for (; axis < rank; axis++) { /* missing trailing indices take the whole dimension */
    acc->pattern.dim[axis] = TPK_INDEX_ALL;
    acc->dims[acc->rank++] = dims[axis];
  }
  acc->pattern.rank = rank;
  return ok;
}

/* Resolve `x` or `x[...]` where x names a ref (parameter, output, scratch).
 * Returns false (silently) when n does not name a ref; *is_ref tells. */
static bool resolve_access_x(Checker *c, const TpkAst *n, Access *acc, bool *is_ref);

/* A semaphore is not data: only copy_async(..., sem=) and wait() take one. */
static bool resolve_access(Checker *c, const TpkAst *n, Access *acc, bool *is_ref) {
  if (!resolve_access_x(c, n, acc, is_ref)) return false;
  if (acc->sym && acc->sym->semaphore) {
    tpk_diag_error_hint(c->diags, n->span, "start copies with copy_async(src, dst, sem=s[i]) and wait(s[i]) for them",
                        "'%s' is a semaphore, not data", acc->sym->name);
    return false;
  }
  return true;
}

static bool resolve_access_x(Checker *c, const TpkAst *n, Access *acc, bool *is_ref) {
  memset(acc, 0, sizeof *acc);
  *is_ref = false;
  const TpkAst *base = n->kind == TPK_AST_INDEX ? n->lhs : n;
  if (base->kind != TPK_AST_NAME) return false;
  Sym *s = lookup(c, base->name);
  if (!s || s->kind != SYM_REF) return false;
  *is_ref = true; /* a ref whose declaration failed stays silent: V_ERR */
  if (s->val.k != V_REF) return false;
  acc->sym = s;
  acc->base = s->val.v;
  const TpkType *rt = acc->base->type;
  if (n->kind != TPK_AST_INDEX) {
    for (int i = 0; i < rt->rank; i++) {
      acc->pattern.dim[i] = TPK_INDEX_ALL;
      acc->dims[i] = rt->dims[i];
    }
    acc->pattern.rank = rt->rank;
    acc->rank = rt->rank;
    return true;
  }
  return index_items(c, n, base->name, rt->rank, rt->dims, acc);
}

static TpkValue *build_load(Checker *c, const TpkAst *n, const Access *acc, const Val *other) {
  if (!can_build(c, n)) return NULL;
  at(c, n);
  TpkValue *ins[TPK_MAX_RANK + 1];
  ins[0] = acc->base;
  for (int i = 0; i < acc->nops; i++) ins[i + 1] = acc->ops[i];
  const TpkType *t = tpk_type_tensor(c->m, acc->base->type->dtype, acc->rank, acc->dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_LOAD, acc->nops + 1, ins, 1, &t);
  if (!op) return NULL;
  tpk_op_set_index(c->m, op, "index", &acc->pattern);
  if (other) {
    if (tpk_dtype_is_float(t->dtype)) tpk_op_set_float(c->m, op, "other", other->k == V_INT ? (double)other->i : other->f);
    else tpk_op_set_int(c->m, op, "other", other->i);
  }
  return &op->out[0];
}

/* base[...] in an expression: a load from a ref, or a slice of a value. */
static Val eval_index(Checker *c, const TpkAst *n) {
  Access acc;
  bool is_ref;
  if (resolve_access(c, n, &acc, &is_ref)) return val_of(build_load(c, n, &acc, NULL));
  if (is_ref) return ERR;
  Val base = eval(c, n->lhs);
  if (base.k == V_ERR) return ERR;
  if (base.k != V_VAL && base.k != V_REF) {
    tpk_diag_error(c->diags, n->lhs->span, "'%s' cannot be indexed", src_text(c, n->lhs));
    return ERR;
  }
  base = need_data(c, n->lhs, base, TPK_DTYPE_COUNT);
  if (base.k == V_ERR) return ERR;
  const TpkType *t = base.v->type;
  if (t->rank == 0) {
    tpk_diag_error(c->diags, n->lhs->span, "'%s' is a scalar and cannot be indexed", src_text(c, n->lhs));
    return ERR;
  }
  memset(&acc, 0, sizeof acc);
  acc.base = base.v;
  if (!index_items(c, n, src_text(c, n->lhs), t->rank, t->dims, &acc)) return ERR;
  at(c, n);
  TpkValue *ins[TPK_MAX_RANK + 1];
  ins[0] = acc.base;
  for (int i = 0; i < acc.nops; i++) ins[i + 1] = acc.ops[i];
  const TpkType *rt = tpk_type_tensor(c->m, t->dtype, acc.rank, acc.dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_SLICE, acc.nops + 1, ins, 1, &rt);
  if (!op) return ERR;
  tpk_op_set_index(c->m, op, "index", &acc.pattern);
  return val_of(&op->out[0]);
}

/* ---- Builtin functions ------------------------------------------------------------- */

enum { MAX_POS = 4, MAX_KW = 3 };

typedef struct Args {
  const TpkAst *pos[MAX_POS];
  int npos;
  const TpkAst *kw[MAX_KW]; /* by the builtin's keyword order; NULL if absent */
} Args;

typedef struct Builtin Builtin;
typedef Val (*BuiltinFn)(Checker *c, const TpkAst *call, const Builtin *bi, const Args *a);

struct Builtin {
  const char *name;
  int min_pos, max_pos;
  const char *kw[MAX_KW]; /* keyword arguments it takes */
  BuiltinFn fn;
  TpkOpcode op; /* for the elementwise families */
  const char *usage;
  const char *what; /* "maximum()": the name messages use */
};

static Val bi_unary(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  return unary_fn(c, n, bi->op, a->pos[0], eval(c, a->pos[0]));
}

static Val bi_binary(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  Val x = eval(c, a->pos[0]), y = eval(c, a->pos[1]);
  return binary(c, n, bi->op, bi->what, a->pos[0], x, a->pos[1], y);
}

/* bitcast(x, T): x's bits read as dtype T of the same width (f32 <-> u32,
 * bf16 <-> u16, ...). A literal takes the unsigned integer type of T's width. */
static Val bi_bitcast(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  const TpkAst *tn = a->pos[1];
  if (tn->kind != TPK_AST_TYPE || tn->args) {
    tpk_diag_error_hint(c->diags, tn->span, "e.g. bitcast(x, u32)", "bitcast() takes a dtype as its second argument");
    return ERR;
  }
  TpkDType to = tn->dtype;
  unsigned bits = tpk_dtype_info(to)->bits;
  TpkDType lit = bits == 32 ? TPK_U32 : bits == 16 ? TPK_U16 : TPK_U8;
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), lit);
  if (x.k == V_ERR) return ERR;
  TpkDType from = x.v->type->dtype;
  if (from == TPK_BOOL || to == TPK_BOOL) {
    tpk_diag_error_hint(c->diags, from == TPK_BOOL ? a->pos[0]->span : tn->span, "convert with `as` instead",
                        "bitcast() does not take bool values");
    return ERR;
  }
  if (tpk_dtype_info(from)->bits != bits) {
    tpk_diag_error_hint(c->diags, tn->span,
                        tpk_arena_printf(&c->m->arena, "convert the value with `x as %s`; bitcast keeps the bits",
                                         tpk_dtype_name(to)),
                        "bitcast() needs a dtype of the same width: %s has %u bits, %s has %u",
                        tpk_dtype_name(from), tpk_dtype_info(from)->bits, tpk_dtype_name(to), bits);
    return ERR;
  }
  if (from == to) return x;
  at(c, n);
  const TpkType *rt = tpk_type_with_dtype(c->m, x.v->type, to);
  TpkOp *op = tpk_build(&c->b, TPK_OP_BITCAST, 1, &x.v, 1, &rt);
  return op ? val_of(&op->out[0]) : ERR;
}

static Val bi_where(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Val cond = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_BOOL);
  Val x = eval(c, a->pos[1]), y = eval(c, a->pos[2]);
  if (cond.k == V_ERR || x.k == V_ERR || y.k == V_ERR) return ERR;
  if (cond.v->type->dtype != TPK_BOOL) {
    tpk_diag_error_hint(c->diags, a->pos[0]->span, "compare first, e.g. where(x > 0, a, b)",
                        "where() needs a bool condition; got %s", type_str(c, cond.v->type));
    return ERR;
  }
  at(c, n);
  if (!unify_dtypes(c, a->pos[1], &x, a->pos[2], &y)) return ERR;
  TpkValue *cv = cond.v;
  if (!unify_shapes(c, n, "where()", &x.v, &y.v) || !unify_shapes(c, n, "where()", &cv, &x.v) ||
      !unify_shapes(c, n, "where()", &x.v, &y.v))
    return ERR;
  at(c, n);
  return val_of(tpk_build_select(&c->b, cv, x.v, y.v));
}

/* axis= as a list of axes (an int or [ints]), normalised and sorted. */
static bool axes_arg(Checker *c, const TpkAst *kw, int rank, int64_t *axes, int *naxes) {
  const TpkAst *items = kw->rhs->kind == TPK_AST_LIST ? kw->rhs->args : kw->rhs;
  bool list = kw->rhs->kind == TPK_AST_LIST;
  *naxes = 0;
  for (const TpkAst *it = items; it; it = list ? it->next : NULL) {
    int64_t ax;
    if (!eval_int(c, it, &ax)) return false;
    if (ax < -rank || ax >= rank) {
      tpk_diag_error(c->diags, it->span, "axis %lld is out of range for a value of rank %d", (long long)ax, rank);
      return false;
    }
    if (ax < 0) ax += rank;
    for (int i = 0; i < *naxes; i++)
      if (axes[i] == ax) {
        tpk_diag_error(c->diags, it->span, "axis %lld is given twice", (long long)ax);
        return false;
      }
    if (*naxes == TPK_MAX_RANK) return false;
    axes[(*naxes)++] = ax;
  }
  for (int i = 1; i < *naxes; i++) /* insertion sort: at most 8 */
    for (int j = i; j > 0 && axes[j - 1] > axes[j]; j--) {
      int64_t t = axes[j];
      axes[j] = axes[j - 1];
      axes[j - 1] = t;
    }
  return true;
}

static bool bool_arg(Checker *c, const TpkAst *n, bool *out) {
  if (n->kind == TPK_AST_BOOL) {
    *out = n->ival != 0;
    return true;
  }
  tpk_diag_error(c->diags, n->span, "expected true or false");
  return false;
}

static Val bi_reduce(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  if (a->npos == 2) {
    const char *ew = strcmp(bi->name, "max") == 0 ? "maximum" : "minimum";
    tpk_diag_error_hint(c->diags, n->span,
                        tpk_arena_printf(&c->m->arena, "for the elementwise %s of two values use %s(a, b)", ew, ew),
                        "%s() reduces one value along axis=; it takes one positional argument", bi->name);
    return ERR;
  }
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_DTYPE_COUNT);
  if (x.k == V_ERR) return ERR;
  const TpkType *t = x.v->type;
  int64_t axes[TPK_MAX_RANK];
  int naxes = t->rank;
  for (int i = 0; i < t->rank; i++) axes[i] = i;
  if (a->kw[0] && !axes_arg(c, a->kw[0], t->rank, axes, &naxes)) return ERR;
  bool keepdims = false;
  if (a->kw[1] && !bool_arg(c, a->kw[1]->rhs, &keepdims)) return ERR;
  at(c, n);
  TpkDType dt = t->dtype;
  int kind = TPK_REDUCE_SUM;
  tpk_enum_from_name(TPK_ENUM_REDUCE_KIND, bi->name, &kind); /* the builtins are named as the IR's kinds */
  /* Integer sums accumulate in i32 (u32 in u32); a mean of integers is a float. */
  if (kind == TPK_REDUCE_MEAN && !tpk_dtype_is_float(dt)) dt = TPK_F32;
  else if (kind == TPK_REDUCE_SUM && !tpk_dtype_is_float(dt) && dt != TPK_U32) dt = TPK_I32;
  else if (dt == TPK_BOOL) {
    tpk_diag_error(c->diags, n->span, "%s() is not defined on bool values", bi->name);
    return ERR;
  }
  TpkValue *v = convert(c, x.v, dt);
  const TpkDim *dims[TPK_MAX_RANK];
  int rank = 0;
  for (int i = 0, k = 0; i < t->rank; i++) {
    bool reduced = k < naxes && axes[k] == i;
    if (reduced) k++;
    if (!reduced) dims[rank++] = t->dims[i];
    else if (keepdims) dims[rank++] = tpk_dim_const(c->m, 1);
  }
  const TpkType *rt = tpk_type_tensor(c->m, dt, rank, dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_REDUCE, 1, &v, 1, &rt);
  if (!op) return ERR;
  tpk_op_set_reduce_kind(c->m, op, (TpkReduceKind)kind);
  tpk_op_set_ints(c->m, op, "axes", naxes, axes);
  tpk_op_set_bool(c->m, op, "keepdims", keepdims);
  return val_of(&op->out[0]);
}

/* cumsum(x, axis=K) and friends: inclusive scans, x's shape. The axis may
 * be left out for a 1-D value. Sums accumulate as sum() does (integers and
 * bool in i32, u32 in u32), so a count of flags is cumsum(flags). */
static Val bi_scan(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_DTYPE_COUNT);
  if (x.k == V_ERR) return ERR;
  const TpkType *t = x.v->type;
  if (t->rank == 0) {
    tpk_diag_error(c->diags, a->pos[0]->span, "%s() scans along an axis; '%s' is a scalar", bi->name,
                   src_text(c, a->pos[0]));
    return ERR;
  }
  int64_t axis = 0;
  if (a->kw[0]) {
    if (!eval_int(c, a->kw[0]->rhs, &axis)) return ERR;
    if (axis < -t->rank || axis >= t->rank) {
      tpk_diag_error(c->diags, a->kw[0]->rhs->span, "axis %lld is out of range for a value of rank %d",
                     (long long)axis, t->rank);
      return ERR;
    }
    if (axis < 0) axis += t->rank;
  } else if (t->rank > 1) {
    tpk_diag_error_hint(c->diags, n->span,
                        tpk_arena_printf(&c->m->arena, "e.g. %s(%s, axis=%d)", bi->name, src_text(c, a->pos[0]),
                                         t->rank - 1),
                        "%s() of a value of rank %d needs axis=", bi->name, t->rank);
    return ERR;
  }
  at(c, n);
  TpkDType dt = t->dtype;
  TpkReduceKind kind = (TpkReduceKind)bi->op;
  if (kind == TPK_REDUCE_SUM && !tpk_dtype_is_float(dt) && dt != TPK_U32) dt = TPK_I32;
  else if (dt == TPK_BOOL) {
    tpk_diag_error_hint(c->diags, n->span, "convert first: (c as i32)", "%s() is not defined on bool values", bi->name);
    return ERR;
  }
  TpkValue *v = convert(c, x.v, dt);
  const TpkType *rt = v->type;
  TpkOp *op = tpk_build(&c->b, TPK_OP_SCAN, 1, &v, 1, &rt);
  if (!op) return ERR;
  tpk_op_set_reduce_kind(c->m, op, kind);
  tpk_op_set_int(c->m, op, "axis", axis);
  return val_of(&op->out[0]);
}

static TpkValue *i32_from(Checker *c, const TpkAst *n, Val v, const char *what);

/* tile(id, B): the tile index with id `id` (an i32 scalar computed any way:
 * a swizzled grid order) over blocks of B, a compile-time integer as in
 * tiles(N, B). It indexes like a loop's tile; elements past the end of a
 * dimension are masked. */
static Val bi_tile(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Val idv = eval(c, a->pos[0]);
  if (idv.k == V_TILE) {
    tpk_diag_error_hint(c->diags, a->pos[0]->span, "use its id: tile(i.id, B)", "'%s' is a tile index already",
                        src_text(c, a->pos[0]));
    return ERR;
  }
  TpkValue *id = i32_from(c, a->pos[0], idv, "a tile id");
  Val bval = eval(c, a->pos[1]);
  if (!id || bval.k == V_ERR) return ERR;
  if (bval.k != V_INT && bval.k != V_DIM) {
    tpk_diag_error(c->diags, a->pos[1]->span,
                   "the block size of tile() must be a compile-time integer (a literal, const or tunable)");
    return ERR;
  }
  if (bval.k == V_INT && bval.i <= 0) {
    tpk_diag_error(c->diags, a->pos[1]->span, "the block size of tile() must be positive; got %lld", (long long)bval.i);
    return ERR;
  }
  at(c, n);
  const TpkType *t = tpk_type_tile_dim(c->m, bval.k == V_DIM ? bval.dim : tpk_dim_const(c->m, bval.i));
  TpkOp *op = tpk_build(&c->b, TPK_OP_TILE_OF, 1, &id, 1, &t);
  return op ? (Val){.k = V_TILE, .v = &op->out[0]} : ERR;
}

/* concat([a, b, ...], axis=K): values of one rank joined along K (the
 * other dims equal); stack([a, b, ...], axis=K): values of one shape joined
 * along a new axis K. Dtypes promote as for arithmetic; a weak literal is
 * not a value to join. */
static Val bi_concat(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  bool stack = strcmp(bi->name, "stack") == 0;
  const TpkAst *list = a->pos[0];
  if (list->kind != TPK_AST_LIST || !list->args) {
    tpk_diag_error_hint(c->diags, list->span, tpk_arena_printf(&c->m->arena, "usage: %s", bi->usage),
                        "%s() takes a list of values: [a, b]", bi->name);
    return ERR;
  }
  enum { MAX_PARTS = 64 };
  TpkValue *parts[MAX_PARTS];
  const TpkAst *nodes[MAX_PARTS];
  int np = 0;
  bool ok = true;
  TpkDType dt = TPK_DTYPE_COUNT;
  for (const TpkAst *it = list->args; it; it = it->next) {
    if (np == MAX_PARTS) {
      tpk_diag_error(c->diags, it->span, "%s() joins at most %d values", bi->name, MAX_PARTS);
      return ERR;
    }
    Val v = eval(c, it);
    if (v.k == V_INT || v.k == V_FLT || v.k == V_DIM) {
      tpk_diag_error_hint(c->diags, it->span, "make it a value of the others' shape: full(f32[BM, 1], 0.0)",
                          "%s() joins tensors; '%s' is a number", bi->name, src_text(c, it));
      ok = false;
      continue;
    }
    v = need_data(c, it, v, TPK_DTYPE_COUNT);
    if (v.k == V_ERR) {
      ok = false;
      continue;
    }
    if (v.v->type->rank == 0 && !stack) {
      tpk_diag_error_hint(c->diags, it->span, "use stack() to join scalars into a vector",
                          "concat() joins along an axis; '%s' is a scalar", src_text(c, it));
      ok = false;
      continue;
    }
    TpkDType d = v.v->type->dtype;
    TpkDType p = dt == TPK_DTYPE_COUNT ? d : tpk_dtype_promote(dt, d);
    if (p == TPK_DTYPE_COUNT) {
      tpk_diag_error_hint(c->diags, it->span, "convert one with `as`", "no dtype holds both %s and %s",
                          tpk_dtype_name(dt), tpk_dtype_name(d));
      ok = false;
      continue;
    }
    dt = p;
    nodes[np] = it;
    parts[np++] = v.v;
  }
  if (!ok) return ERR;
  const TpkType *t0 = parts[0]->type;
  int rank = stack ? t0->rank + 1 : t0->rank;
  int64_t axis = stack ? 0 : -1;
  if (a->kw[0]) {
    if (!eval_int(c, a->kw[0]->rhs, &axis)) return ERR;
    if (axis < -rank || axis >= rank) {
      tpk_diag_error(c->diags, a->kw[0]->rhs->span, "axis %lld is out of range for %s() of rank-%d values",
                     (long long)axis, bi->name, t0->rank);
      return ERR;
    }
  } else if (!stack && rank > 1) {
    tpk_diag_error_hint(c->diags, n->span, tpk_arena_printf(&c->m->arena, "e.g. concat([...], axis=%d)", rank - 1),
                        "concat() of rank-%d values needs axis=", rank);
    return ERR;
  }
  if (axis < 0) axis += rank;
  for (int i = 1; i < np; i++) {
    const TpkType *t = parts[i]->type;
    bool same = t->rank == t0->rank;
    for (int d = 0; same && d < t0->rank; d++) same = (!stack && d == axis) || t->dims[d] == t0->dims[d];
    if (!same) {
      tpk_diag_error(c->diags, nodes[i]->span, "%s() needs %s; '%s' is %s and '%s' is %s", bi->name,
                     stack                    ? "values of one shape"
                     : t->rank != t0->rank    ? "values of one rank"
                                              : tpk_arena_printf(&c->m->arena, "equal dims outside axis %lld", (long long)axis),
                     src_text(c, nodes[0]), shape_str(c, t0->rank, t0->dims), src_text(c, nodes[i]),
                     shape_str(c, t->rank, t->dims));
      return ERR;
    }
  }
  at(c, n);
  for (int i = 0; i < np; i++) {
    parts[i] = convert(c, parts[i], dt);
    if (stack) { /* a size-1 axis where the new one goes */
      const TpkType *t = parts[i]->type;
      const TpkDim *dims[TPK_MAX_RANK];
      for (int d = 0, k = 0; d < rank; d++) dims[d] = d == axis ? tpk_dim_const(c->m, 1) : t->dims[k++];
      const TpkType *rt = tpk_type_tensor(c->m, dt, rank, dims);
      TpkOp *r = tpk_build(&c->b, TPK_OP_RESHAPE, 1, &parts[i], 1, &rt);
      parts[i] = r ? &r->out[0] : NULL;
    }
    if (!parts[i]) return ERR;
  }
  const TpkDim *dims[TPK_MAX_RANK];
  memcpy(dims, parts[0]->type->dims, sizeof dims);
  for (int i = 1; i < np; i++) dims[axis] = tpk_dim_binary(c->m, TPK_DIM_ADD, dims[axis], parts[i]->type->dims[axis]);
  if (!dims[axis]) {
    tpk_diag_error(c->diags, n->span, "the joined size overflows");
    return ERR;
  }
  const TpkType *rt = tpk_type_tensor(c->m, dt, rank, dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_CONCAT, np, parts, 1, &rt);
  if (!op) return ERR;
  tpk_op_set_int(c->m, op, "axis", axis);
  return val_of(&op->out[0]);
}

static bool call_is(const TpkAst *n, const char *name) {
  return n->kind == TPK_AST_CALL && strcmp(n->name, name) == 0;
}

/* dot(a, b): [M,K]x[K,N] or batched [B,M,K]x[B,K,N]. A transpose() operand
 * is folded into the contracting dimensions, never materialised. */
static Val bi_dot(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  const TpkAst *arg[2] = {a->pos[0], a->pos[1]};
  bool transposed[2] = {false, false}, no_perm[2] = {false, false};
  Val v[2];
  for (int i = 0; i < 2; i++) {
    const TpkAst *e = arg[i];
    /* transpose(x) of a 2-D x, or transpose(x, perm=[0,2,1]) of a 3-D one. */
    if (call_is(e, "transpose") && e->args && !e->args->next) {
      transposed[i] = no_perm[i] = true;
      e = e->args;
    } else if (call_is(e, "transpose") && e->args && e->args->next && e->args->next->kind == TPK_AST_KWARG &&
               !e->args->next->next && e->args->next->rhs->kind == TPK_AST_LIST) {
      int64_t p[3];
      int np = 0;
      bool ok = true;
      for (const TpkAst *it = e->args->next->rhs->args; it; it = it->next)
        ok = ok && np < 3 && it->kind == TPK_AST_INT && ((p[np++] = it->ival), true);
      if (ok && np == 3 && p[0] == 0 && p[1] == 2 && p[2] == 1) {
        transposed[i] = true;
        e = e->args;
      }
    }
    v[i] = need_data(c, e, eval(c, e), TPK_DTYPE_COUNT);
    arg[i] = e;
  }
  if (v[0].k == V_ERR || v[1].k == V_ERR) return ERR;
  const TpkType *ta = v[0].v->type, *tb = v[1].v->type;
  for (int i = 0; i < 2; i++)
    if (no_perm[i] && v[i].v->type->rank != 2) {
      tpk_diag_error_hint(c->diags, a->pos[i]->span, "give the order of the axes, e.g. transpose(x, perm=[0, 2, 1])",
                          "transpose() without perm= needs a 2-D value; got %s", type_str(c, v[i].v->type));
      return ERR;
    }
  if (ta->rank != tb->rank || ta->rank < 2 || ta->rank > 3) {
    tpk_diag_error(c->diags, n->span, "dot() needs [M,K] x [K,N] or batched [B,M,K] x [B,K,N]; got %s x %s",
                   shape_str(c, ta->rank, ta->dims), shape_str(c, tb->rank, tb->dims));
    return ERR;
  }
  int r = ta->rank, batch = r - 2;
  int a_k = transposed[0] ? batch : batch + 1, a_m = transposed[0] ? batch + 1 : batch;
  int b_k = transposed[1] ? batch + 1 : batch, b_n = transposed[1] ? batch : batch + 1;
  bool ok = ta->dims[a_k] == tb->dims[b_k] && (batch == 0 || ta->dims[0] == tb->dims[0]);
  if (!ok) {
    const char *want = batch ? "[B,M,K] x [B,K,N]" : "[M,K] x [K,N]";
    const TpkDim *ad[TPK_MAX_RANK], *bd[TPK_MAX_RANK];
    memcpy(ad, ta->dims, sizeof ad);
    memcpy(bd, tb->dims, sizeof bd);
    if (transposed[0]) { const TpkDim *t = ad[batch]; ad[batch] = ad[batch + 1]; ad[batch + 1] = t; }
    if (transposed[1]) { const TpkDim *t = bd[batch]; bd[batch] = bd[batch + 1]; bd[batch + 1] = t; }
    const char *hint = NULL;
    if (!transposed[1] && ta->dims[a_k] == tb->dims[batch + 1])
      hint = tpk_arena_printf(&c->m->arena, "did you mean dot(%s, transpose(%s))?", src_text(c, a->pos[0]),
                              src_text(c, a->pos[1]));
    tpk_diag_error_hint(c->diags, a->pos[1]->span, hint, "dot() needs %s; got %s x %s", want,
                        shape_str(c, r, ad), shape_str(c, r, bd));
    return ERR;
  }
  TpkDType common = tpk_dtype_promote(ta->dtype, tb->dtype);
  if (common == TPK_BOOL) {
    tpk_diag_error(c->diags, n->span, "dot() is not defined on bool values");
    return ERR;
  }
  at(c, n);
  TpkValue *x = convert(c, v[0].v, common), *y = convert(c, v[1].v, common);
  TpkDType acc = tpk_dtype_is_float(common) ? TPK_F32 : TPK_I32;
  const TpkDim *dims[3];
  int k = 0;
  if (batch) dims[k++] = ta->dims[0];
  dims[k++] = ta->dims[a_m];
  dims[k++] = tb->dims[b_n];
  const TpkType *rt = tpk_type_tensor(c->m, acc, r, dims);
  TpkValue *ins[2] = {x, y};
  TpkOp *op = tpk_build(&c->b, TPK_OP_DOT, 2, ins, 1, &rt);
  if (!op) return ERR;
  int64_t lc = a_k, rc = b_k, bt = 0;
  tpk_op_set_ints(c->m, op, "lhs_contract", 1, &lc);
  tpk_op_set_ints(c->m, op, "rhs_contract", 1, &rc);
  tpk_op_set_ints(c->m, op, "lhs_batch", batch, &bt);
  tpk_op_set_ints(c->m, op, "rhs_batch", batch, &bt);
  return val_of(&op->out[0]);
}

static Val bi_transpose(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_DTYPE_COUNT);
  if (x.k == V_ERR) return ERR;
  const TpkType *t = x.v->type;
  int64_t perm[TPK_MAX_RANK];
  if (!a->kw[0]) {
    if (t->rank != 2) {
      tpk_diag_error_hint(c->diags, n->span, "give the order of the axes, e.g. transpose(x, perm=[0, 2, 1])",
                          "transpose() without perm= needs a 2-D value; got %s", type_str(c, t));
      return ERR;
    }
    perm[0] = 1;
    perm[1] = 0;
  } else {
    const TpkAst *list = a->kw[0]->rhs;
    int np = 0;
    if (list->kind != TPK_AST_LIST) {
      tpk_diag_error(c->diags, list->span, "perm= takes a list of axes, e.g. [0, 2, 1]");
      return ERR;
    }
    bool seen[TPK_MAX_RANK] = {false};
    for (const TpkAst *it = list->args; it; it = it->next) {
      int64_t p;
      if (!eval_int(c, it, &p)) return ERR;
      if (np >= t->rank || p < 0 || p >= t->rank || seen[p]) {
        tpk_diag_error(c->diags, list->span, "perm= must be a permutation of 0..%d for a value of rank %d",
                       t->rank - 1, t->rank);
        return ERR;
      }
      seen[p] = true;
      perm[np++] = p;
    }
    if (np != t->rank) {
      tpk_diag_error(c->diags, list->span, "perm= must be a permutation of 0..%d for a value of rank %d",
                     t->rank - 1, t->rank);
      return ERR;
    }
  }
  at(c, n);
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[perm[i]];
  const TpkType *rt = tpk_type_tensor(c->m, t->dtype, t->rank, dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_TRANSPOSE, 1, &x.v, 1, &rt);
  if (!op) return ERR;
  tpk_op_set_ints(c->m, op, "perm", t->rank, perm);
  return val_of(&op->out[0]);
}

/* A shape written as a list: [a, b]. */
static bool shape_list(Checker *c, const TpkAst *list, int *rank, const TpkDim **dims) {
  if (list->kind != TPK_AST_LIST) {
    tpk_diag_error(c->diags, list->span, "expected a shape such as [M, 128]");
    return false;
  }
  *rank = 0;
  for (const TpkAst *it = list->args; it; it = it->next) {
    if (*rank == TPK_MAX_RANK) {
      tpk_diag_error(c->diags, it->span, "at most %d dimensions are supported", TPK_MAX_RANK);
      return false;
    }
    const TpkDim *d = eval_dim(c, it);
    int64_t k;
    if (!d) return false;
    if (tpk_dim_is_const(d, &k) && k < 0) {
      tpk_diag_error(c->diags, it->span, "a size cannot be negative");
      return false;
    }
    dims[(*rank)++] = d;
  }
  return true;
}

static const TpkDim *num_elements(Checker *c, int rank, const TpkDim *const *dims) {
  const TpkDim *n = tpk_dim_const(c->m, 1);
  for (int i = 0; i < rank; i++) n = tpk_dim_binary(c->m, TPK_DIM_MUL, n, dims[i]);
  return n;
}

static Val bi_reshape(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_DTYPE_COUNT);
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (x.k == V_ERR || !shape_list(c, a->pos[1], &rank, dims)) return ERR;
  const TpkType *t = x.v->type;
  char witness[128] = "";
  if (!tpk_dims_equal_when_tuned(c->m, c->tunes, c->ntunes, num_elements(c, t->rank, t->dims),
                                 num_elements(c, rank, dims), witness, sizeof witness)) {
    tpk_diag_error(c->diags, n->span, "reshape() must keep the number of elements: %s cannot become %s%s%s",
                   shape_str(c, t->rank, t->dims), shape_str(c, rank, dims), *witness ? " when " : "", witness);
    return ERR;
  }
  at(c, n);
  const TpkType *rt = tpk_type_tensor(c->m, t->dtype, rank, dims);
  TpkOp *op = tpk_build(&c->b, TPK_OP_RESHAPE, 1, &x.v, 1, &rt);
  return op ? val_of(&op->out[0]) : ERR;
}

static Val bi_broadcast(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Val x = need_data(c, a->pos[0], eval(c, a->pos[0]), TPK_DTYPE_COUNT);
  int rank, r;
  const TpkDim *dims[TPK_MAX_RANK], *out[TPK_MAX_RANK];
  if (x.k == V_ERR || !shape_list(c, a->pos[1], &rank, dims)) return ERR;
  const TpkType *t = x.v->type;
  if (!broadcast_shapes(t->rank, t->dims, rank, dims, &r, out) || r != rank ||
      memcmp(out, dims, (size_t)rank * sizeof *dims) != 0) {
    tpk_diag_error(c->diags, n->span, "cannot broadcast %s to %s", shape_str(c, t->rank, t->dims),
                   shape_str(c, rank, dims));
    return ERR;
  }
  at(c, n);
  return val_of(broadcast_to(c, x.v, rank, dims));
}

/* A type argument: f32[BM, BN] or a bare dtype. */
static const TpkType *type_arg(Checker *c, const TpkAst *n) {
  if (n->kind != TPK_AST_TYPE) {
    tpk_diag_error(c->diags, n->span, "expected a type such as f32[BM, BN]");
    return NULL;
  }
  int rank = 0;
  const TpkDim *dims[TPK_MAX_RANK];
  for (const TpkAst *it = n->args; it; it = it->next) {
    if (rank == TPK_MAX_RANK) {
      tpk_diag_error(c->diags, it->span, "at most %d dimensions are supported", TPK_MAX_RANK);
      return NULL;
    }
    const TpkDim *d = eval_dim(c, it);
    int64_t k;
    if (!d) return NULL;
    if (tpk_dim_is_const(d, &k) && k <= 0) {
      tpk_diag_error(c->diags, it->span, "a size must be positive; got %lld", (long long)k);
      return NULL;
    }
    dims[rank++] = d;
  }
  return tpk_type_tensor(c->m, n->dtype, rank, dims);
}

/* A constant op carries its own shape: zeros(f32[BM, BN]) is one op. */
static Val splat(Checker *c, const TpkAst *n, const TpkType *t, Val v) { return val_of(const_of_type(c, n, v, t)); }

static Val bi_zeros(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  const TpkType *t = type_arg(c, a->pos[0]);
  if (!t || !can_build(c, n)) return ERR;
  at(c, n);
  return splat(c, n, t, int_val(strcmp(bi->name, "ones") == 0));
}

static Val bi_full(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  const TpkType *t = type_arg(c, a->pos[0]);
  Val v = eval(c, a->pos[1]);
  if (!t || v.k == V_ERR || !can_build(c, n)) return ERR;
  at(c, n);
  if (is_const(v)) return splat(c, a->pos[1], t, v);
  v = need_data(c, a->pos[1], v, t->dtype);
  if (v.k == V_ERR) return ERR;
  if (v.v->type->rank != 0) {
    tpk_diag_error(c->diags, a->pos[1]->span, "full() takes a scalar fill value; got %s", type_str(c, v.v->type));
    return ERR;
  }
  return val_of(broadcast_to(c, convert(c, v.v, t->dtype), t->rank, t->dims));
}

static Val bi_iota(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  const TpkType *t = type_arg(c, a->pos[0]);
  if (!t || !can_build(c, n)) return ERR;
  int64_t axis = 0;
  if (a->kw[0]) {
    if (!eval_int(c, a->kw[0]->rhs, &axis)) return ERR;
  } else if (t->rank != 1) {
    tpk_diag_error(c->diags, n->span, "iota() of a %d-D type needs axis=", t->rank);
    return ERR;
  }
  if (t->rank == 0 || axis < 0 || axis >= t->rank) {
    tpk_diag_error(c->diags, n->span, "iota() axis %lld is out of range for %s", (long long)axis, type_str(c, t));
    return ERR;
  }
  if (t->dtype == TPK_BOOL) {
    tpk_diag_error(c->diags, a->pos[0]->span, "iota() needs a numeric type");
    return ERR;
  }
  at(c, n);
  TpkOp *op = tpk_build(&c->b, TPK_OP_IOTA, 0, NULL, 1, &t);
  if (!op) return ERR;
  tpk_op_set_int(c->m, op, "axis", axis);
  return val_of(&op->out[0]);
}

static Val bi_load(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  Access acc;
  bool is_ref;
  if (!resolve_access(c, a->pos[0], &acc, &is_ref)) {
    if (!is_ref)
      tpk_diag_error(c->diags, a->pos[0]->span, "load() reads a block of a parameter, output or scratch, e.g. load(x[i, :])");
    return ERR;
  }
  Val other = int_val(0);
  if (a->kw[0]) {
    other = eval(c, a->kw[0]->rhs);
    if (other.k == V_ERR) return ERR;
    if (!is_const(other)) {
      tpk_diag_error(c->diags, a->kw[0]->rhs->span, "other= must be a compile-time number such as 0 or -inf");
      return ERR;
    }
    TpkDType dt = acc.base->type->dtype;
    if (!tpk_dtype_is_float(dt) && (other.k == V_FLT || !int_fits(other.i, dt))) {
      tpk_diag_error(c->diags, a->kw[0]->rhs->span, "other= value %s does not fit in %s", src_text(c, a->kw[0]->rhs),
                     tpk_dtype_name(dt));
      return ERR;
    }
  }
  return val_of(build_load(c, n, &acc, a->kw[0] ? &other : NULL));
}

static Val bi_program(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  int64_t axis;
  if (!eval_int(c, a->pos[0], &axis)) return ERR;
  if (!c->grid_depth) {
    tpk_diag_error(c->diags, n->span, "%s() is only meaningful inside the grid (the outermost for loop)", bi->name);
    return ERR;
  }
  if (axis < 0 || axis >= c->grid_rank) {
    tpk_diag_error(c->diags, a->pos[0]->span, "the grid has %d ax%s; axis %lld does not exist", c->grid_rank,
                   c->grid_rank == 1 ? "is" : "es", (long long)axis);
    return ERR;
  }
  at(c, n);
  if (axis >= c->grid_parallel) { /* a seq axis: its loop's index and extent */
    TpkValue *iv = c->seq_index[axis];
    if (!iv) return ERR;
    const TpkOp *loop = iv->block->parent;
    if (bi->op == TPK_OP_NUM_PROGRAMS) return val_of(loop->in[1]);
    if (iv->type->kind != TPK_TYPE_TILE) return val_of(iv);
    const TpkType *i32 = tpk_type_scalar(c->m, TPK_I32);
    TpkOp *id = tpk_build(&c->b, TPK_OP_TILE_ID, 1, &iv, 1, &i32);
    return id ? val_of(&id->out[0]) : ERR;
  }
  const TpkType *t = tpk_type_scalar(c->m, TPK_I32);
  TpkOp *op = tpk_build(&c->b, bi->op, 0, NULL, 1, &t);
  if (!op) return ERR;
  tpk_op_set_int(c->m, op, "axis", axis);
  return val_of(&op->out[0]);
}

static bool writable(Checker *c, const TpkAst *n, const Access *acc) {
  if (acc->sym->role != TPK_PARAM_IN || acc->sym->scratch) return true;
  tpk_diag_error_hint(c->diags, n->span,
                      tpk_arena_printf(&c->m->arena, "declare it as `inout %s: ...` to update it in place",
                                       acc->sym->name),
                      "'%s' is an input and cannot be written", acc->sym->name);
  return false;
}

static TpkValue *coerce(Checker *c, const TpkAst *n, Val v, TpkDType dt, int rank, const TpkDim *const *dims,
                        const TpkAst *target_node, bool is_var);

/* atomic_add(y[...], v), atomic_max, atomic_min: each element of the block
 * becomes old + v (max, min) at once, and the call's value is the old
 * block: a counter's ticket, the running max before this instance's. The
 * target is an output, inout or scratch block (any index, a gather
 * included); v is converted (widening) and broadcast as a store's value. */
static Val bi_atomic(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  Access acc;
  bool is_ref;
  if (!resolve_access(c, a->pos[0], &acc, &is_ref)) {
    if (!is_ref)
      tpk_diag_error_hint(c->diags, a->pos[0]->span, "e.g. atomic_add(counts[e], 1)",
                          "%s() updates a block of an output, inout or scratch buffer; '%s' is not one", bi->name,
                          src_text(c, a->pos[0]));
    return ERR;
  }
  if (!writable(c, a->pos[0], &acc)) return ERR;
  const TpkType *rt = acc.base->type;
  if (rt->dtype == TPK_BOOL) {
    tpk_diag_error(c->diags, a->pos[0]->span, "%s() is not defined on bool values", bi->name);
    return ERR;
  }
  Val v = eval(c, a->pos[1]);
  if (v.k == V_ERR || !can_build(c, n)) return ERR;
  TpkValue *val = coerce(c, a->pos[1], v, rt->dtype, acc.rank, acc.dims, a->pos[0], false);
  if (!val) return ERR;
  at(c, n);
  TpkValue *ins[TPK_MAX_RANK + 2];
  ins[0] = acc.base;
  for (int i = 0; i < acc.nops; i++) ins[i + 1] = acc.ops[i];
  ins[acc.nops + 1] = val;
  TpkOp *op = tpk_build(&c->b, TPK_OP_ATOMIC, acc.nops + 2, ins, 1, &val->type);
  if (!op) return ERR;
  tpk_op_set_index(c->m, op, "index", &acc.pattern);
  tpk_op_set_reduce_kind(c->m, op, (TpkReduceKind)bi->op);
  return val_of(&op->out[0]);
}

static TpkValue *i32_scalar(Checker *c, const TpkAst *n, const char *what);

/* `s[i]` naming one semaphore of a `scratch s: semaphore[N];` into *sem,
 * *slot; false (reported) otherwise. */
static bool semaphore_slot(Checker *c, const TpkAst *n, TpkValue **sem, TpkValue **slot) {
  const char *hint = "declare `scratch sems: semaphore[2];` and name one: sems[slot]";
  const TpkAst *base = n->kind == TPK_AST_INDEX ? n->lhs : n;
  Sym *s = base->kind == TPK_AST_NAME ? lookup(c, base->name) : NULL;
  if (!s || s->kind != SYM_REF || !s->semaphore) {
    tpk_diag_error_hint(c->diags, n->span, hint, "expected a semaphore, s[i]; got '%s'", src_text(c, n));
    return false;
  }
  if (s->val.k != V_REF) return false;
  if (n->kind != TPK_AST_INDEX || count_list(n->args) != 1 || n->args->kind == TPK_AST_SLICE) {
    tpk_diag_error_hint(c->diags, n->span, tpk_arena_printf(&c->m->arena, "e.g. %s[p %% 2] for the slot of step p", s->name),
                        "name one semaphore of '%s' with one index: %s[i]", s->name, s->name);
    return false;
  }
  TpkValue *i = i32_scalar(c, n->args, "a semaphore index");
  if (!i) return false;
  *sem = s->val.v;
  *slot = i;
  return true;
}

static Val bi_copy_async(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  TpkValue *sem = NULL, *slot = NULL;
  if (a->kw[0] && !semaphore_slot(c, a->kw[0]->rhs, &sem, &slot)) return ERR;
  Access src, dst;
  bool ref0, ref1;
  bool ok0 = resolve_access(c, a->pos[0], &src, &ref0), ok1 = resolve_access(c, a->pos[1], &dst, &ref1);
  for (int i = 0; i < 2; i++)
    if (!(i ? ref1 : ref0))
      tpk_diag_error(c->diags, a->pos[i]->span, "copy_async() copies between a parameter/output block and a scratch buffer");
  if (!ok0 || !ok1) return ERR;
  if (src.sym->scratch == dst.sym->scratch) {
    tpk_diag_error(c->diags, n->span, "copy_async() copies between HBM (a parameter or output) and VMEM (a scratch buffer); both sides are %s",
                   src.sym->scratch ? "scratch" : "in HBM");
    return ERR;
  }
  if (src.gather || dst.gather) {
    tpk_diag_error(c->diags, n->span, "copy_async() cannot gather; copy a contiguous block");
    return ERR;
  }
  if (!writable(c, a->pos[1], &dst)) return ERR;
  if (src.rank != dst.rank || memcmp(src.dims, dst.dims, (size_t)src.rank * sizeof *src.dims) != 0 ||
      src.base->type->dtype != dst.base->type->dtype) {
    tpk_diag_error(c->diags, n->span, "copy_async() needs blocks of one type; got %s%s and %s%s",
                   tpk_dtype_name(src.base->type->dtype), shape_str(c, src.rank, src.dims),
                   tpk_dtype_name(dst.base->type->dtype), shape_str(c, dst.rank, dst.dims));
    return ERR;
  }
  /* A slice (lo..hi, ds) takes its size from what it meets; the IR's copy
   * has no size of its own, so on each axis one side must be a tile or the
   * whole dimension. */
  for (int i = 0, j = 0, axis = 0; i < src.pattern.rank && j < dst.pattern.rank; axis++) {
    while (i < src.pattern.rank && src.pattern.dim[i] == TPK_INDEX_SCALAR) i++;
    while (j < dst.pattern.rank && dst.pattern.dim[j] == TPK_INDEX_SCALAR) j++;
    if (i == src.pattern.rank || j == dst.pattern.rank) break;
    TpkIndexKind from = src.pattern.dim[i++], to = dst.pattern.dim[j++];
    if (from == TPK_INDEX_RANGE && to == TPK_INDEX_RANGE) {
      tpk_diag_error_hint(c->diags, n->span,
                          "slice one side only: copy into a scratch buffer of the block's size, or from a tile",
                          "copy_async() slices axis %d of the block on both sides; the copy's size on an axis comes from a side that is not sliced there",
                          axis);
      return ERR;
    }
  }
  /* len=n: only the first n entries along the block's first axis move
   * (Pallas's pl.ds(0, n) with n from data); a compile-time n is checked
   * against the block here, a run-time one by checked mode */
  TpkValue *len = NULL;
  if (a->kw[1]) {
    if (src.rank == 0) {
      tpk_diag_error(c->diags, a->kw[1]->span, "copy_async(len=...) needs a block with at least one axis; this one is a single element");
      return ERR;
    }
    Val lv = eval(c, a->kw[1]->rhs);
    int64_t rows;
    if (lv.k == V_INT && (lv.i < 0 || (tpk_dim_is_const(src.dims[0], &rows) && lv.i > rows))) {
      tpk_diag_error_hint(c->diags, a->kw[1]->rhs->span, "len counts entries along the block's first axis, 0 to its size",
                          "copy_async(len=%lld) is outside the block %s", (long long)lv.i, shape_str(c, src.rank, src.dims));
      return ERR;
    }
    len = i32_from(c, a->kw[1]->rhs, lv, "the length of a copy");
    if (!len) return ERR;
  }
  if (!can_build(c, n)) return ERR;
  at(c, n);
  TpkValue *ins[2 * TPK_MAX_RANK + 3];
  int k = 0;
  ins[k++] = src.base;
  for (int i = 0; i < src.nops; i++) ins[k++] = src.ops[i];
  ins[k++] = dst.base;
  for (int i = 0; i < dst.nops; i++) ins[k++] = dst.ops[i];
  if (len) ins[k++] = len; /* the optional last operand */
  const TpkType *t = tpk_type_dma(c->m);
  TpkOp *op = tpk_build(&c->b, TPK_OP_DMA_START, k, ins, 1, &t);
  if (!op) return ERR;
  tpk_op_set_index(c->m, op, "src_index", &src.pattern);
  tpk_op_set_index(c->m, op, "dst_index", &dst.pattern);
  if (sem) { /* the copy signals the semaphore; wait(s[i]) waits for it */
    TpkValue *sig[3] = {&op->out[0], sem, slot};
    tpk_build(&c->b, TPK_OP_DMA_SIGNAL, 3, sig, 0, NULL);
    return (Val){.k = V_NONE};
  }
  return val_of(&op->out[0]);
}

static Val bi_wait(Checker *c, const TpkAst *n, const Builtin *bi, const Args *a) {
  (void)bi;
  const TpkAst *arg = a->pos[0];
  const TpkAst *base = arg->kind == TPK_AST_INDEX ? arg->lhs : arg;
  Sym *s = base->kind == TPK_AST_NAME ? lookup(c, base->name) : NULL;
  if (s && s->kind == SYM_REF && s->semaphore) { /* wait(s[i]): the oldest copy in flight on it */
    TpkValue *sem, *slot, *bytes = NULL;
    if (!semaphore_slot(c, arg, &sem, &slot)) return ERR;
    if (a->kw[0]) { /* wait(s[i], bytes=n): until n bytes of its copies have landed */
      Val bv = eval(c, a->kw[0]->rhs);
      if (bv.k == V_INT && bv.i <= 0) {
        tpk_diag_error(c->diags, a->kw[0]->rhs->span, "a wait counts a positive number of bytes; got %lld", (long long)bv.i);
        return ERR;
      }
      if (!(bytes = i32_from(c, a->kw[0]->rhs, bv, "the bytes a wait counts"))) return ERR;
    }
    at(c, n);
    TpkValue *ins[3] = {sem, slot, bytes};
    tpk_build(&c->b, TPK_OP_DMA_WAIT_SEM, bytes ? 3 : 2, ins, 0, NULL);
    return (Val){.k = V_NONE};
  }
  if (a->kw[0]) {
    tpk_diag_error_hint(c->diags, a->kw[0]->span, "wait(handle) waits for its one copy",
                        "bytes= counts the bytes of the copies that signal a semaphore: wait(sems[i], bytes=n)");
    return ERR;
  }
  Val h = eval(c, a->pos[0]);
  if (h.k == V_ERR) return ERR;
  if (h.k != V_VAL || h.v->type->kind != TPK_TYPE_DMA) {
    tpk_diag_error_hint(c->diags, a->pos[0]->span, "or a semaphore the copies signal: wait(sems[i])",
                        "wait() takes the handle returned by copy_async()");
    return ERR;
  }
  at(c, n);
  tpk_build(&c->b, TPK_OP_DMA_WAIT, 1, &h.v, 0, NULL);
  return (Val){.k = V_NONE};
}

#define EW1(name, OP) {name, 1, 1, {0}, bi_unary, TPK_OP_##OP, name "(x)", name "()"}
static const Builtin BUILTINS[] = {
    EW1("exp", EXP), EW1("log", LOG), EW1("sqrt", SQRT), EW1("rsqrt", RSQRT), EW1("tanh", TANH),
    EW1("sigmoid", SIGMOID), EW1("erf", ERF), EW1("abs", ABS), EW1("floor", FLOOR), EW1("ceil", CEIL),
    EW1("round", ROUND),
    {"bitcast", 2, 2, {0}, bi_bitcast, TPK_OP_BITCAST, "bitcast(x, u32)", "bitcast()"},
    {"maximum", 2, 2, {0}, bi_binary, TPK_OP_MAX, "maximum(a, b)", "maximum()"},
    {"minimum", 2, 2, {0}, bi_binary, TPK_OP_MIN, "minimum(a, b)", "minimum()"},
    {"pow", 2, 2, {0}, bi_binary, TPK_OP_POW, "pow(a, b)", "pow()"},
    {"mulhi", 2, 2, {0}, bi_binary, TPK_OP_MULHI, "mulhi(a, b)", "mulhi()"},
    {"where", 3, 3, {0}, bi_where, TPK_OP_SELECT, "where(cond, a, b)"},
    {"sum", 1, 2, {"axis", "keepdims"}, bi_reduce, TPK_OP_REDUCE, "sum(x, axis=K, keepdims=false)"},
    {"max", 1, 2, {"axis", "keepdims"}, bi_reduce, TPK_OP_REDUCE, "max(x, axis=K, keepdims=false)"},
    {"min", 1, 2, {"axis", "keepdims"}, bi_reduce, TPK_OP_REDUCE, "min(x, axis=K, keepdims=false)"},
    {"mean", 1, 1, {"axis", "keepdims"}, bi_reduce, TPK_OP_REDUCE, "mean(x, axis=K, keepdims=false)"},
    /* scans: `op` holds the TpkReduceKind */
    {"cumsum", 1, 1, {"axis"}, bi_scan, (TpkOpcode)TPK_REDUCE_SUM, "cumsum(x, axis=K)", "cumsum()"},
    {"cumprod", 1, 1, {"axis"}, bi_scan, (TpkOpcode)TPK_REDUCE_PROD, "cumprod(x, axis=K)", "cumprod()"},
    {"cummax", 1, 1, {"axis"}, bi_scan, (TpkOpcode)TPK_REDUCE_MAX, "cummax(x, axis=K)", "cummax()"},
    {"cummin", 1, 1, {"axis"}, bi_scan, (TpkOpcode)TPK_REDUCE_MIN, "cummin(x, axis=K)", "cummin()"},
    {"dot", 2, 2, {0}, bi_dot, TPK_OP_DOT, "dot(a, b)"},
    {"tile", 2, 2, {0}, bi_tile, TPK_OP_TILE_OF, "tile(id, B)", "tile()"},
    {"concat", 1, 1, {"axis"}, bi_concat, TPK_OP_CONCAT, "concat([a, b], axis=K)", "concat()"},
    {"stack", 1, 1, {"axis"}, bi_concat, TPK_OP_CONCAT, "stack([a, b], axis=K)", "stack()"},
    {"transpose", 1, 1, {"perm"}, bi_transpose, TPK_OP_TRANSPOSE, "transpose(x, perm=[...])"},
    {"reshape", 2, 2, {0}, bi_reshape, TPK_OP_RESHAPE, "reshape(x, [a, b])"},
    {"broadcast", 2, 2, {0}, bi_broadcast, TPK_OP_BROADCAST, "broadcast(x, [a, b])"},
    {"zeros", 1, 1, {0}, bi_zeros, TPK_OP_CONST, "zeros(f32[M, N])"},
    {"ones", 1, 1, {0}, bi_zeros, TPK_OP_CONST, "ones(f32[M, N])"},
    {"full", 2, 2, {0}, bi_full, TPK_OP_CONST, "full(f32[M, N], value)"},
    {"iota", 1, 1, {"axis"}, bi_iota, TPK_OP_IOTA, "iota(i32[M, N], axis=K)"},
    {"load", 1, 1, {"other"}, bi_load, TPK_OP_LOAD, "load(x[i, :], other=0)"},
    {"program_id", 1, 1, {0}, bi_program, TPK_OP_PROGRAM_ID, "program_id(axis)"},
    {"num_programs", 1, 1, {0}, bi_program, TPK_OP_NUM_PROGRAMS, "num_programs(axis)"},
    {"copy_async", 2, 2, {"sem", "len"}, bi_copy_async, TPK_OP_DMA_START, "copy_async(src, dst) or copy_async(src, dst, sem=s[i], len=n)"},
    /* atomics: `op` holds the TpkReduceKind */
    {"atomic_add", 2, 2, {0}, bi_atomic, (TpkOpcode)TPK_REDUCE_SUM, "atomic_add(y[i], v)", "atomic_add()"},
    {"atomic_max", 2, 2, {0}, bi_atomic, (TpkOpcode)TPK_REDUCE_MAX, "atomic_max(y[i], v)", "atomic_max()"},
    {"atomic_min", 2, 2, {0}, bi_atomic, (TpkOpcode)TPK_REDUCE_MIN, "atomic_min(y[i], v)", "atomic_min()"},
    {"wait", 1, 1, {"bytes"}, bi_wait, TPK_OP_DMA_WAIT, "wait(handle), wait(s[i]) or wait(s[i], bytes=n)"},
};
#undef EW1

static Val eval_call(Checker *c, const TpkAst *n) {
  const Builtin *bi = NULL;
  for (size_t i = 0; i < TPK_ARRAY_LEN(BUILTINS); i++)
    if (strcmp(BUILTINS[i].name, n->name) == 0) bi = &BUILTINS[i];
  if (!bi) {
    const char *cands[TPK_ARRAY_LEN(BUILTINS)];
    for (size_t i = 0; i < TPK_ARRAY_LEN(BUILTINS); i++) cands[i] = BUILTINS[i].name;
    const char *hint = suggest(c, n->name, cands, (int)TPK_ARRAY_LEN(BUILTINS));
    Sym *s = lookup(c, n->name);
    if (!hint && s) hint = tpk_arena_printf(&c->m->arena, "'%s' is %s, not a function", n->name, sym_what(s));
    tpk_diag_error_hint(c->diags, n->span, hint, "unknown function '%s'", n->name);
    return ERR;
  }
  if (!c->b.block) {
    tpk_diag_error(c->diags, n->span, "not a compile-time constant: %s() is computed when the kernel runs", bi->name);
    return ERR;
  }
  Args a = {0};
  bool ok = true;
  for (const TpkAst *arg = n->args; arg; arg = arg->next) {
    if (arg->kind != TPK_AST_KWARG) {
      if (a.kw[0] || a.kw[1] || a.kw[2]) {
        tpk_diag_error(c->diags, arg->span, "positional arguments must come before keyword arguments");
        ok = false;
      } else if (a.npos == bi->max_pos) {
        tpk_diag_error_hint(c->diags, arg->span, tpk_arena_printf(&c->m->arena, "usage: %s", bi->usage),
                            "too many arguments to %s()", bi->name);
        return ERR;
      } else {
        a.pos[a.npos++] = arg;
      }
      continue;
    }
    int slot = -1;
    for (int k = 0; k < MAX_KW; k++)
      if (bi->kw[k] && strcmp(bi->kw[k], arg->name) == 0) slot = k;
    if (slot < 0) {
      tpk_diag_error_hint(c->diags, arg->span, tpk_arena_printf(&c->m->arena, "usage: %s", bi->usage),
                          "%s() has no argument '%s'", bi->name, arg->name);
      ok = false;
    } else if (a.kw[slot]) {
      tpk_diag_error(c->diags, arg->span, "argument '%s' is given twice", arg->name);
      ok = false;
    } else {
      a.kw[slot] = arg;
    }
  }
  if (!ok) return ERR;
  if (a.npos < bi->min_pos) {
    tpk_diag_error_hint(c->diags, n->span, tpk_arena_printf(&c->m->arena, "usage: %s", bi->usage),
                        "%s() needs %d argument%s; got %d", bi->name, bi->min_pos, bi->min_pos == 1 ? "" : "s", a.npos);
    return ERR;
  }
  return bi->fn(c, n, bi, &a);
}

/* ---- Expressions ----------------------------------------------------------------------- */

static Val eval_field(Checker *c, const TpkAst *n) {
  Val base = eval(c, n->lhs);
  if (base.k == V_ERR) return ERR;
  if (base.k != V_TILE) {
    tpk_diag_error(c->diags, n->span, "'.%s' applies to tile indices (from tiles(N, B)); '%s' is not one", n->name,
                   src_text(c, n->lhs));
    return ERR;
  }
  if (strcmp(n->name, "size") == 0) return dim_val(base.v->type->block);
  TpkOpcode op = strcmp(n->name, "id") == 0 ? TPK_OP_TILE_ID : strcmp(n->name, "start") == 0 ? TPK_OP_TILE_START : TPK_OP_COUNT;
  if (op == TPK_OP_COUNT) {
    tpk_diag_error(c->diags, n->span, "a tile index has no field '%s'; its fields are id, start and size", n->name);
    return ERR;
  }
  at(c, n);
  const TpkType *t = tpk_type_scalar(c->m, TPK_I32);
  TpkOp *o = tpk_build(&c->b, op, 1, &base.v, 1, &t);
  return o ? val_of(&o->out[0]) : ERR;
}

static Val eval_name(Checker *c, const TpkAst *n) {
  Sym *s = lookup(c, n->name);
  if (!s) {
    unknown_name(c, n);
    return ERR;
  }
  switch (s->kind) {
  case SYM_CONST:
    return eval_const(c, s);
  case SYM_SHAPE: {
    int64_t k;
    if (tpk_dim_is_const(s->dim, &k)) return int_val(k);
    if (!can_build(c, n)) return ERR;
    at(c, n);
    return val_of(value_of_dim(c, n, s->dim));
  }
  case SYM_TUNE:
    return dim_val(s->dim);
  default:
    return s->val;
  }
}

static Val eval(Checker *c, const TpkAst *n) {
  switch (n->kind) {
  case TPK_AST_INT:
    return int_val(n->ival);
  case TPK_AST_FLOAT:
    return flt_val(n->fval);
  case TPK_AST_BOOL:
    return val_of(const_scalar(c, n, int_val(n->ival), TPK_BOOL));
  case TPK_AST_NAME:
    return eval_name(c, n);
  case TPK_AST_UNARY: {
    Val a = eval(c, n->lhs);
    if (a.k == V_ERR) return ERR;
    return n->op == '-' ? negate(c, n, n->lhs, a) : n->op == '~' ? bit_not(c, n, a) : logical_not(c, n, a);
  }
  case TPK_AST_BINARY: {
    const BinOp *bop = binop_of(n->op);
    Val a = eval(c, n->lhs), b = eval(c, n->rhs);
    if (!bop) return ERR;
    return binary(c, n, bop->opcode, bop->text, n->lhs, a, n->rhs, b);
  }
  case TPK_AST_CAST:
    return cast(c, n, eval(c, n->lhs), n->dtype);
  case TPK_AST_CALL:
    return eval_call(c, n);
  case TPK_AST_INDEX:
    return eval_index(c, n);
  case TPK_AST_FIELD:
    return eval_field(c, n);
  case TPK_AST_SLICE:
    tpk_diag_error(c->diags, n->span, "a range '%s' is only valid inside an index or as a for-loop range", src_text(c, n));
    return ERR;
  case TPK_AST_TYPE:
    tpk_diag_error(c->diags, n->span, "a type is only valid as the argument of zeros(), ones(), full() or iota()");
    return ERR;
  case TPK_AST_LIST:
    tpk_diag_error(c->diags, n->span, "a list is only valid as an argument, e.g. reshape(x, [a, b])");
    return ERR;
  default:
    tpk_diag_error(c->diags, n->span, "expected an expression");
    return ERR;
  }
}

/* ---- Assignments and stores ---------------------------------------------------------- */

/* How messages name the target of a write: var 'acc', or 'y[i, :]'. Built
 * only when a message needs it. */
static const char *target_text(Checker *c, const TpkAst *target, bool is_var) {
  return tpk_arena_printf(&c->m->arena, is_var ? "var '%s'" : "'%s'", is_var ? target->name : src_text(c, target));
}

/* v converted to dtype dt and broadcast to shape (rank, dims) for a write
 * into `target_node` (a var's name, or a store's left-hand side). */
static TpkValue *coerce(Checker *c, const TpkAst *n, Val v, TpkDType dt, int rank, const TpkDim *const *dims,
                        const TpkAst *target_node, bool is_var) {
  v = need_data(c, n, v, dt);
  if (v.k == V_ERR) return NULL;
  const TpkType *t = v.v->type;
  const char *target = NULL;
  if (!tpk_dtype_widens_to(t->dtype, dt)) {
    target = target_text(c, target_node, is_var);
    tpk_diag_error_hint(c->diags, n->span, tpk_arena_printf(&c->m->arena, "convert explicitly: (%s) as %s", src_text(c, n), tpk_dtype_name(dt)),
                        "cannot write %s into %s of dtype %s without a cast", tpk_dtype_name(t->dtype), target,
                        tpk_dtype_name(dt));
    return NULL;
  }
  int r;
  const TpkDim *out[TPK_MAX_RANK];
  if (!broadcast_shapes(t->rank, t->dims, rank, dims, &r, out) || r != rank ||
      memcmp(out, dims, (size_t)rank * sizeof *dims) != 0) {
    target = target_text(c, target_node, is_var);
    tpk_diag_error(c->diags, n->span, "cannot write a value of shape %s into %s of shape %s",
                   shape_str(c, t->rank, t->dims), target, shape_str(c, rank, dims));
    return NULL;
  }
  at(c, n);
  return broadcast_to(c, convert(c, v.v, dt), rank, dims);
}

static TpkOpcode compound_op(int op) {
  switch (op) {
  case TPK_ASSIGN_ADD: return TPK_OP_ADD;
  case TPK_ASSIGN_SUB: return TPK_OP_SUB;
  case TPK_ASSIGN_MUL: return TPK_OP_MUL;
  case TPK_ASSIGN_DIV: return TPK_OP_DIV;
  default: return TPK_OP_COUNT;
  }
}

static const char *assign_text(int op) {
  switch (op) {
  case TPK_ASSIGN_ADD: return "'+='";
  case TPK_ASSIGN_SUB: return "'-='";
  case TPK_ASSIGN_MUL: return "'*='";
  case TPK_ASSIGN_DIV: return "'/='";
  default: return "'='";
  }
}

static void assign_var(Checker *c, const TpkAst *st, Sym *s) {
  if (c->grid_depth && !s->grid_depth) {
    tpk_diag_error_hint(c->diags, st->lhs->span, "declare it inside the for loop",
                        "'%s' is declared outside the grid; grid instances run in parallel and cannot update it",
                        s->name);
    return;
  }
  Val v = eval(c, st->rhs);
  if (st->op != TPK_ASSIGN_SET)
    v = binary(c, st, compound_op(st->op), assign_text(st->op), st->lhs, s->val, st->rhs, v);
  if (v.k == V_ERR || s->val.k == V_ERR) return;
  TpkValue *nv = coerce(c, st->rhs, v, s->type->dtype, s->type->rank, s->type->dims, st->lhs, true);
  if (!nv) return;
  if (!nv->name) nv->name = s->name;
  s->val = val_of(nv);
}

static void store(Checker *c, const TpkAst *st, const Access *acc) {
  if (!writable(c, st->lhs, acc)) return;
  Val v = eval(c, st->rhs);
  if (v.k == V_ERR || !can_build(c, st)) return;
  const TpkType *rt = acc->base->type;
  TpkStoreMode mode = TPK_STORE_SET;
  switch (st->op) {
  case TPK_ASSIGN_SET: break;
  case TPK_ASSIGN_ADD: mode = TPK_STORE_ADD; break;
  case TPK_ASSIGN_SUB:
    mode = TPK_STORE_ADD;
    v = negate(c, st->rhs, st->rhs, v);
    break;
  default: {
    if (acc->gather) {
      tpk_diag_error(c->diags, st->span, "only =, += and -= may write through a gather index");
      return;
    }
    Val old = val_of(build_load(c, st->lhs, acc, NULL));
    v = binary(c, st, compound_op(st->op), assign_text(st->op), st->lhs, old, st->rhs, v);
  }
  }
  if (v.k == V_ERR) return;
  TpkValue *val = coerce(c, st->rhs, v, rt->dtype, acc->rank, acc->dims, st->lhs, false);
  if (!val) return;
  at(c, st);
  TpkValue *ins[TPK_MAX_RANK + 2];
  ins[0] = acc->base;
  for (int i = 0; i < acc->nops; i++) ins[i + 1] = acc->ops[i];
  ins[acc->nops + 1] = val;
  TpkOp *op = tpk_build(&c->b, TPK_OP_STORE, acc->nops + 2, ins, 0, NULL);
  if (!op) return;
  tpk_op_set_index(c->m, op, "index", &acc->pattern);
  tpk_op_set_store_mode(c->m, op, mode);
}

static void check_assign(Checker *c, const TpkAst *st) {
  const TpkAst *t = st->lhs;
  Access acc;
  bool is_ref;
  if (resolve_access(c, t, &acc, &is_ref)) {
    store(c, st, &acc);
    return;
  }
  if (is_ref) return; /* the index was wrong, already reported */
  const TpkAst *base = t->kind == TPK_AST_INDEX ? t->lhs : t;
  if (base->kind != TPK_AST_NAME) {
    tpk_diag_error(c->diags, t->span, "cannot assign to this expression");
    return;
  }
  Sym *s = lookup(c, base->name);
  if (!s) {
    unknown_name(c, base);
    return;
  }
  if (s->kind == SYM_VAR && t == base) {
    assign_var(c, st, s);
    return;
  }
  if (s->kind == SYM_VAR) {
    tpk_diag_error_hint(c->diags, t->span, "compute the whole new value, e.g. with where()",
                        "a var is updated as a whole; '%s' cannot be assigned element by element", s->name);
    return;
  }
  if (s->kind == SYM_LET) {
    tpk_diag_error_hint(c->diags, t->span, tpk_arena_printf(&c->m->arena, "declare it with `var %s = ...`", s->name),
                        "'%s' is a let binding and cannot be changed", s->name);
    return;
  }
  tpk_diag_error(c->diags, t->span, "cannot assign to '%s': it is %s", s->name, sym_what(s));
}

/* ---- Statements ------------------------------------------------------------------------- */

static void check_stmts(Checker *c, const TpkAst *stmts, bool top);
static void check_stmt(Checker *c, const TpkAst *st, bool top);

/* Names assigned in stmts that are not declared inside them: the outer vars
 * a loop carries or an if merges. */
typedef struct NameNode {
  const char *name;
  struct NameNode *next;
} NameNode;

static bool name_in(const NameNode *l, const char *name) {
  for (; l; l = l->next)
    if (strcmp(l->name, name) == 0) return true;
  return false;
}

static NameNode *name_push(Checker *c, NameNode *l, const char *name) {
  NameNode *n = tpk_arena_alloc(&c->m->arena, sizeof *n);
  if (!n) return l;
  n->name = name;
  n->next = l;
  return n;
}

static void collect_assigned(Checker *c, const TpkAst *stmts, NameNode *declared, NameNode **out) {
  for (const TpkAst *s = stmts; s; s = s->next) {
    switch (s->kind) {
    case TPK_AST_LET:
    case TPK_AST_VAR:
    case TPK_AST_SCRATCH:
      declared = name_push(c, declared, s->name);
      break;
    case TPK_AST_ASSIGN:
      if (s->lhs->kind == TPK_AST_NAME && !name_in(declared, s->lhs->name) && !name_in(*out, s->lhs->name))
        *out = name_push(c, *out, s->lhs->name);
      break;
    case TPK_AST_IF:
      collect_assigned(c, s->body, declared, out);
      collect_assigned(c, s->els, declared, out);
      break;
    case TPK_AST_WHILE:
      collect_assigned(c, s->body, declared, out);
      break;
    case TPK_AST_FOR: {
      NameNode *inner = declared;
      for (const TpkAst *r = s->ranges; r; r = r->next) inner = name_push(c, inner, r->name);
      collect_assigned(c, s->body, inner, out);
      break;
    }
    default:
      break;
    }
  }
}

enum { MAX_CARRIED = 64 };

/* The vars of the enclosing scopes that stmts assign. */
static int carried_vars(Checker *c, const TpkAst *a, const TpkAst *b, Sym **out) {
  NameNode *names = NULL;
  collect_assigned(c, a, NULL, &names);
  collect_assigned(c, b, NULL, &names);
  int n = 0;
  for (NameNode *l = names; l && n < MAX_CARRIED; l = l->next) {
    Sym *s = lookup(c, l->name);
    if (s && s->kind == SYM_VAR && s->val.k == V_VAL && !(c->grid_depth && !s->grid_depth)) out[n++] = s;
  }
  return n;
}

/* A block for code whose enclosing op could not be built (its condition or
 * range had an error): the statements are still checked for diagnostics, and
 * the ops go nowhere since a module with errors is discarded. */
static TpkBlock *detached_block(Checker *c) { return tpk_arena_alloc(&c->m->arena, sizeof(TpkBlock)); }

static void yield_carried(Checker *c, const TpkAst *at_node, int n, Sym **vars) {
  TpkValue *vals[MAX_CARRIED];
  for (int i = 0; i < n; i++) vals[i] = vars[i]->val.v;
  at(c, at_node);
  if (n) tpk_build_yield(&c->b, n, vals);
}

/* Check a nested statement list in its own scope, building into `block`. */
static void check_region(Checker *c, TpkBlock *block, const TpkAst *stmts) {
  TpkBlock *saved_block = c->b.block;
  Sym *saved_scope = c->scope;
  c->b.block = block;
  check_stmts(c, stmts, false);
  c->scope = saved_scope;
  c->b.block = saved_block;
}

static void check_if(Checker *c, const TpkAst *st) {
  Val cond = need_data(c, st->lhs, eval(c, st->lhs), TPK_BOOL);
  if (cond.k == V_VAL && (cond.v->type->dtype != TPK_BOOL || cond.v->type->rank != 0)) {
    const char *hint = cond.v->type->rank ? "use where(c, a, b) to choose elementwise"
                                          : tpk_arena_printf(&c->m->arena, "compare it, e.g. if %s != 0", src_text(c, st->lhs));
    tpk_diag_error_hint(c->diags, st->lhs->span, hint, "an if condition must be a bool scalar; got %s",
                        type_str(c, cond.v->type));
    cond = ERR;
  }
  Sym *vars[MAX_CARRIED];
  int n = carried_vars(c, st->body, st->els, vars);
  Val before[MAX_CARRIED];
  const TpkType *types[MAX_CARRIED];
  for (int i = 0; i < n; i++) {
    before[i] = vars[i]->val;
    types[i] = vars[i]->type;
  }
  TpkOp *op = NULL;
  if (cond.k == V_VAL) {
    at(c, st);
    op = tpk_build(&c->b, TPK_OP_IF, 1, &cond.v, n, types);
  }
  for (int r = 0; r < 2; r++) {
    const TpkAst *stmts = r == 0 ? st->body : st->els;
    TpkBlock *blk = op ? op->regions[r] : detached_block(c);
    if (!blk) return;
    check_region(c, blk, stmts);
    TpkBlock *saved = c->b.block;
    c->b.block = blk;
    yield_carried(c, st, n, vars);
    c->b.block = saved;
    for (int i = 0; i < n; i++) vars[i]->val = before[i];
  }
  for (int i = 0; i < n; i++) {
    vars[i]->val = op ? val_of(&op->out[i]) : ERR;
    if (op) op->out[i].name = vars[i]->name;
  }
}

/* The bounds and index type of one for-loop range. */
typedef struct Range {
  TpkValue *lo, *hi;
  const TpkType *iv_type;
} Range;

/* v (the value of n) as an i32 scalar. */
static TpkValue *i32_from(Checker *c, const TpkAst *n, Val v, const char *what) {
  if (v.k == V_FLT) {
    tpk_diag_error(c->diags, n->span, "%s must be an integer; got a float", what);
    return NULL;
  }
  v = need_data(c, n, v, TPK_I32);
  if (v.k == V_ERR) return NULL;
  if (!tpk_dtype_is_int(v.v->type->dtype) || v.v->type->rank != 0) {
    tpk_diag_error(c->diags, n->span, "%s must be an integer scalar; got %s", what, type_str(c, v.v->type));
    return NULL;
  }
  at(c, n);
  return convert(c, v.v, TPK_I32);
}

static TpkValue *i32_scalar(Checker *c, const TpkAst *n, const char *what) { return i32_from(c, n, eval(c, n), what); }

static bool eval_range(Checker *c, const TpkAst *r, Range *out) {
  at(c, r);
  if (r->kind == TPK_AST_RANGE) {
    if (!r->lhs || !r->rhs) {
      tpk_diag_error(c->diags, r->span, "a loop range needs both bounds: lo..hi");
      return false;
    }
    out->lo = i32_scalar(c, r->lhs, "a loop bound");
    out->hi = i32_scalar(c, r->rhs, "a loop bound");
    out->iv_type = tpk_type_scalar(c->m, TPK_I32);
    return out->lo && out->hi;
  }
  Val extent = eval(c, r->lhs);
  TpkValue *n = extent.k == V_INT ? NULL : i32_from(c, r->lhs, extent, "the extent of tiles()");
  /* the block size is a compile-time integer: a literal, a const, or a
   * tunable (then symbolic until the kernel is bound) */
  Val bval = eval(c, r->rhs);
  if (bval.k == V_ERR || (!n && extent.k != V_INT)) return false;
  if (bval.k != V_INT && bval.k != V_DIM) {
    tpk_diag_error(c->diags, r->rhs->span, "the block size of tiles() must be a compile-time integer (a literal, const or tunable)");
    return false;
  }
  if (bval.k == V_INT && bval.i <= 0) {
    tpk_diag_error(c->diags, r->rhs->span, "the block size of tiles() must be positive; got %lld", (long long)bval.i);
    return false;
  }
  const TpkDim *b = bval.k == V_DIM ? bval.dim : tpk_dim_const(c->m, bval.i);
  at(c, r);
  out->lo = const_scalar(c, r, int_val(0), TPK_I32);
  if (!n && bval.k == V_INT) { /* a constant extent and block: the tile count is known now */
    out->hi = const_scalar(c, r->lhs, int_val(tpk_ceildiv(extent.i, bval.i)), TPK_I32);
  } else {
    if (!n) n = const_scalar(c, r->lhs, extent, TPK_I32);
    at(c, r->rhs);
    TpkValue *bv = value_of_dim(c, r->rhs, b);
    out->hi = n && bv ? tpk_build_binary(&c->b, TPK_OP_CDIV, n, bv) : NULL;
  }
  out->iv_type = tpk_type_tile_dim(c->m, b);
  return out->lo && out->hi;
}

static void bind_index(Checker *c, const TpkAst *r, TpkValue *iv) {
  Sym *s = declare_local(c, iv->type->kind == TPK_TYPE_TILE ? SYM_TILE : SYM_INDEX, r->name, r->name_span);
  if (!s) return;
  s->val = (Val){.k = iv->type->kind == TPK_TYPE_TILE ? V_TILE : V_VAL, .v = iv};
  iv->name = module_name(c, r->name);
}

/* A loop index whose range had an error still gets declared, poisoned, so
 * its uses stay silent. */
static void bind_index_or_poison(Checker *c, const TpkAst *r, TpkValue *iv) {
  if (iv) {
    bind_index(c, r, iv);
    return;
  }
  Sym *s = declare_local(c, SYM_LET, r->name, r->name_span);
  if (s) s->val = ERR;
}

/* Sequential loops: `for a in R1, b in R2 { }` nests one for op per range;
 * every level carries the vars the body assigns. */
static void check_for_ranges(Checker *c, const TpkAst *st, const TpkAst *r, Sym **vars, int n) {
  if (!r) {
    check_stmts(c, st->body, false);
    return;
  }
  Range rg;
  TpkOp *op = NULL;
  if (eval_range(c, r, &rg)) {
    TpkValue *ins[MAX_CARRIED + 2];
    const TpkType *types[MAX_CARRIED];
    ins[0] = rg.lo;
    ins[1] = rg.hi;
    for (int i = 0; i < n; i++) {
      ins[i + 2] = vars[i]->val.v;
      types[i] = vars[i]->type;
    }
    at(c, r);
    op = tpk_build(&c->b, TPK_OP_FOR, n + 2, ins, n, types);
  }
  TpkBlock *blk = op ? op->regions[0] : detached_block(c);
  if (!blk) return;
  TpkBlock *saved_block = c->b.block;
  Sym *saved_scope = c->scope;
  c->b.block = blk;
  TpkValue *iv = op ? tpk_block_add_arg(c->m, blk, rg.iv_type, r->name) : NULL;
  bind_index_or_poison(c, r, iv);
  for (int i = 0; i < n && iv; i++) vars[i]->val = val_of(tpk_block_add_arg(c->m, blk, vars[i]->type, vars[i]->name));
  check_for_ranges(c, st, r->next, vars, n);
  yield_carried(c, st, op ? n : 0, vars);
  c->scope = saved_scope;
  c->b.block = saved_block;
  for (int i = 0; i < n; i++) {
    vars[i]->val = op ? val_of(&op->out[i]) : ERR;
    if (op) op->out[i].name = vars[i]->name;
  }
}

static void check_for(Checker *c, const TpkAst *st) {
  Sym *vars[MAX_CARRIED];
  int n = carried_vars(c, st->body, NULL, vars);
  check_for_ranges(c, st, st->ranges, vars, n);
}

/* The condition of a while loop: a bool scalar, or NULL (reported). */
static TpkValue *while_condition(Checker *c, const TpkAst *st) {
  Val cond = need_data(c, st->lhs, eval(c, st->lhs), TPK_BOOL);
  if (cond.k != V_VAL) return NULL;
  if (cond.v->type->dtype != TPK_BOOL || cond.v->type->rank != 0) {
    const char *hint = cond.v->type->rank ? "reduce it first, e.g. while max(x) > 0.0"
                                          : tpk_arena_printf(&c->m->arena, "compare it, e.g. while %s != 0", src_text(c, st->lhs));
    tpk_diag_error_hint(c->diags, st->lhs->span, hint, "a while condition must be a bool scalar; got %s",
                        type_str(c, cond.v->type));
    return NULL;
  }
  return cond.v;
}

/* `while COND { body }`: one while op whose first carried value is the
 * condition. COND is evaluated before the loop and again at the end of
 * every iteration, from the vars the body assigned (they are carried). */
static void check_while(Checker *c, const TpkAst *st) {
  Sym *vars[MAX_CARRIED];
  int n = carried_vars(c, st->body, NULL, vars);
  TpkValue *cond = while_condition(c, st);
  TpkOp *op = NULL;
  if (cond) {
    TpkValue *ins[MAX_CARRIED + 1];
    const TpkType *types[MAX_CARRIED + 1];
    ins[0] = cond;
    types[0] = cond->type;
    for (int i = 0; i < n; i++) {
      ins[i + 1] = vars[i]->val.v;
      types[i + 1] = vars[i]->type;
    }
    at(c, st);
    op = tpk_build(&c->b, TPK_OP_WHILE, n + 1, ins, n + 1, types);
  }
  TpkBlock *blk = op ? op->regions[0] : detached_block(c);
  if (!blk) return;
  TpkBlock *saved_block = c->b.block;
  Sym *saved_scope = c->scope;
  c->b.block = blk;
  if (op) {
    tpk_block_add_arg(c->m, blk, cond->type, "cond");
    for (int i = 0; i < n; i++) vars[i]->val = val_of(tpk_block_add_arg(c->m, blk, vars[i]->type, vars[i]->name));
  }
  check_stmts(c, st->body, false);
  c->scope = saved_scope;
  if (op) { /* the condition again, from this iteration's values; it checked clean once */
    TpkValue *again = while_condition(c, st);
    TpkValue *vals[MAX_CARRIED + 1];
    vals[0] = again;
    for (int i = 0; i < n; i++) vals[i + 1] = vars[i]->val.v;
    at(c, st);
    if (again) tpk_build_yield(&c->b, n + 1, vals);
  }
  c->b.block = saved_block;
  for (int i = 0; i < n; i++) {
    vars[i]->val = op ? val_of(&op->out[i + 1]) : ERR;
    if (op) op->out[i + 1].name = vars[i]->name;
  }
}

/* The seq axes of a grid (Pallas's "arbitrary" dimensions): sequential
 * loops inside each instance, one per axis, in order; axis is the first's
 * number for program_id. */
static void check_seq_axes(Checker *c, const TpkAst *st, const TpkAst *r, int axis) {
  if (!r) {
    check_stmts(c, st->body, false);
    return;
  }
  Range rg;
  TpkOp *op = NULL;
  if (eval_range(c, r, &rg)) {
    TpkValue *ins[2] = {rg.lo, rg.hi};
    at(c, r);
    op = tpk_build(&c->b, TPK_OP_FOR, 2, ins, 0, NULL);
  }
  TpkBlock *blk = op ? op->regions[0] : detached_block(c);
  if (!blk) return;
  TpkBlock *saved_block = c->b.block;
  Sym *saved_scope = c->scope;
  c->b.block = blk;
  TpkValue *iv = op ? tpk_block_add_arg(c->m, blk, rg.iv_type, r->name) : NULL;
  bind_index_or_poison(c, r, iv);
  c->seq_index[axis] = iv;
  check_seq_axes(c, st, r->next, axis + 1);
  c->scope = saved_scope;
  c->b.block = saved_block;
}

/* The outermost loop nest: each iteration is an independent program. */
static void check_grid(Checker *c, const TpkAst *st) {
  TpkValue *ins[2 * TPK_MAX_RANK];
  int nranges = count_list(st->ranges);
  if (nranges > TPK_MAX_RANK) {
    tpk_diag_error(c->diags, st->span, "a grid has at most %d axes; this one has %d", TPK_MAX_RANK, nranges);
    return;
  }
  Range rg[TPK_MAX_RANK] = {{0}};
  bool ok = true;
  int k = 0, nparallel = 0;
  const TpkAst *first_seq = NULL;
  for (const TpkAst *r = st->ranges; r; r = r->next) {
    if (r->sequential) {
      if (!first_seq) first_seq = r;
      continue;
    }
    if (first_seq) {
      tpk_diag_error_hint(c->diags, r->span, "put the seq axes last: for b in 0..B, seq p in 0..P",
                          "a parallel grid axis cannot follow a seq axis");
      return;
    }
    ok = eval_range(c, r, &rg[k]) && ok;
    ins[2 * k] = rg[k].lo;
    ins[2 * k + 1] = rg[k].hi;
    k++;
  }
  nparallel = k;
  TpkOp *op = NULL;
  if (ok) {
    at(c, st);
    op = tpk_build(&c->b, TPK_OP_GRID, 2 * nparallel, ins, 0, NULL);
  }
  TpkBlock *blk = op ? op->regions[0] : detached_block(c);
  if (!blk) return;
  TpkBlock *saved_block = c->b.block;
  Sym *saved_scope = c->scope;
  c->b.block = blk;
  c->grid_depth = 1;
  c->grid_rank = nranges;
  c->grid_parallel = nparallel;
  k = 0;
  for (const TpkAst *r = st->ranges; r != first_seq; r = r->next, k++)
    bind_index_or_poison(c, r, op ? tpk_block_add_arg(c->m, blk, rg[k].iv_type, r->name) : NULL);
  if (first_seq) { /* the scratch of an instance keeps its value along the seq axes */
    for (const TpkAst *s = st->body; s; s = s->next)
      if (s->kind == TPK_AST_SCRATCH) check_stmt(c, s, false);
    c->hoisted = st->body;
    check_seq_axes(c, st, first_seq, nparallel);
    c->hoisted = NULL;
  } else {
    check_stmts(c, st->body, false);
  }
  c->grid_depth = 0;
  c->grid_rank = 0;
  c->grid_parallel = 0;
  memset(c->seq_index, 0, sizeof c->seq_index);
  c->scope = saved_scope;
  c->b.block = saved_block;
}

static void check_binding(Checker *c, const TpkAst *st) {
  Val v = eval(c, st->rhs);
  if (v.k == V_NONE) {
    tpk_diag_error(c->diags, st->rhs->span, "'%s' has no value", src_text(c, st->rhs));
    v = ERR;
  }
  if (st->kind == TPK_AST_VAR && v.k != V_ERR) {
    v = need_data(c, st->rhs, v, TPK_DTYPE_COUNT);
  } else if (v.k == V_REF) {
    v = materialize(c, st->rhs, v, TPK_DTYPE_COUNT);
  }
  Sym *s = declare_local(c, st->kind == TPK_AST_VAR ? SYM_VAR : SYM_LET, st->name, st->name_span);
  if (!s) return;
  s->val = v;
  if (v.k == V_VAL) {
    if (!v.v->name) v.v->name = s->name;
    s->type = v.v->type;
  }
}

static void check_scratch(Checker *c, const TpkAst *st) {
  int rank = 0;
  const TpkDim *dims[TPK_MAX_RANK];
  bool ok = true;
  for (const TpkAst *d = st->dims; d; d = d->next) {
    const TpkDim *dim = rank < TPK_MAX_RANK ? eval_dim(c, d) : NULL;
    int64_t k;
    if (dim && tpk_dim_is_const(dim, &k) && k <= 0) {
      tpk_diag_error(c->diags, d->span, "a size must be positive; got %lld", (long long)k);
      dim = NULL;
    }
    ok = ok && dim;
    if (dim) dims[rank++] = dim;
  }
  Sym *s = declare_local(c, SYM_REF, st->name, st->name_span);
  if (!s) return;
  s->scratch = true;
  s->semaphore = st->semaphore;
  s->role = TPK_PARAM_INOUT;
  s->val = ERR;
  if (ok && st->semaphore && rank != 1) {
    tpk_diag_error_hint(c->diags, st->span, "e.g. `scratch sems: semaphore[2];`, one per buffer slot",
                        "semaphores are declared as a 1-D array");
    ok = false;
  }
  if (!ok || !can_build(c, st)) return;
  at(c, st);
  const TpkType *t = tpk_type_ref(c->m, st->dtype, rank, dims, st->semaphore ? TPK_MEM_SMEM : TPK_MEM_VMEM);
  TpkOp *op = tpk_build(&c->b, TPK_OP_ALLOC, 0, NULL, 1, &t);
  if (!op) return;
  op->out[0].name = s->name;
  s->val = (Val){.k = V_REF, .v = &op->out[0], .sym = s};
}

static void check_expr_stmt(Checker *c, const TpkAst *st) {
  Val v = eval(c, st->lhs);
  if (v.k == V_ERR || v.k == V_NONE) return;
  if (v.k == V_VAL && v.v->type->kind == TPK_TYPE_DMA) {
    tpk_diag_error_hint(c->diags, st->lhs->span, "bind it: `let c = copy_async(src, dst);` then `wait(c);`",
                        "the handle of copy_async() is dropped, so the copy can never be waited for");
    return;
  }
  if (v.k == V_VAL && v.v->def && v.v->def->opcode == TPK_OP_ATOMIC) return; /* its effect is the point */
  tpk_diag_error(c->diags, st->lhs->span, "the value of this expression is unused");
}

static void check_stmt(Checker *c, const TpkAst *st, bool top) {
  switch (st->kind) {
  case TPK_AST_LET:
  case TPK_AST_VAR: check_binding(c, st); break;
  case TPK_AST_ASSIGN: check_assign(c, st); break;
  case TPK_AST_IF: check_if(c, st); break;
  case TPK_AST_FOR:
    if (top) check_grid(c, st);
    else check_for(c, st);
    break;
  case TPK_AST_WHILE:
    if (top) {
      tpk_diag_error_hint(c->diags, st->span, "put it inside the grid: for b in 0..B { while ... { } }",
                          "a while loop cannot be a kernel's grid; the grid's extent must be known before it runs");
      break;
    }
    check_while(c, st);
    break;
  case TPK_AST_EXPR: check_expr_stmt(c, st); break;
  case TPK_AST_SCRATCH: check_scratch(c, st); break;
  default: tpk_diag_error(c->diags, st->span, "expected a statement"); break;
  }
}

static void check_stmts(Checker *c, const TpkAst *stmts, bool top) {
  bool hoisted = stmts && stmts == c->hoisted;
  for (const TpkAst *st = stmts; st; st = st->next) {
    if (hoisted && st->kind == TPK_AST_SCRATCH) continue; /* declared before the seq loops */
    check_stmt(c, st, top);
    if (c->m->arena.exhausted) return;
  }
}

/* ---- Kernels ---------------------------------------------------------------------------- */

static bool tune_choice(Checker *c, const TpkAst *t, int64_t *choices, int *nchoices) {
  *nchoices = 0;
  bool ok = true;
  for (const TpkAst *v = t->args; v; v = v->next) {
    int64_t k;
    if (!eval_int(c, v, &k)) {
      ok = false;
      continue;
    }
    if (k <= 0) {
      tpk_diag_error(c->diags, v->span, "tunable values must be positive integers; got %lld", (long long)k);
      ok = false;
    }
    if (*nchoices < 64) choices[(*nchoices)++] = k;
  }
  if (!*nchoices && ok) {
    tpk_diag_error(c->diags, t->span, "tunable '%s' needs at least one value", t->name);
    ok = false;
  }
  return ok;
}

static void check_tunables(Checker *c, const TpkAst *k, TpkFunc *f) {
  int n = count_list(k->tunes), i = 0;
  f->tunes = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *f->tunes);
  if (!f->tunes) return;
  for (const TpkAst *t = k->tunes; t; t = t->next) {
    int64_t choices[64];
    int nchoices;
    bool ok = tune_choice(c, t, choices, &nchoices);
    Sym *s = declare_local(c, SYM_TUNE, t->name, t->name_span);
    if (!s) return;
    s->val = ERR;
    if (!ok) continue;
    int64_t chosen = choices[0];
    for (int b = 0; c->opts && b < c->opts->ntunes; b++) {
      if (strcmp(c->opts->tunes[b].name, t->name) != 0) continue;
      c->tune_seen[b] = true;
      bool listed = false;
      for (int j = 0; j < nchoices; j++) listed |= choices[j] == c->opts->tunes[b].value;
      if (!listed) {
        TpkStr list = {0};
        for (int j = 0; j < nchoices; j++) tpk_str_printf(&list, "%s%lld", j ? ", " : "", (long long)choices[j]);
        tpk_diag_error(c->diags, t->name_span, "%s=%lld is not one of the declared values [%s]", t->name,
                       (long long)c->opts->tunes[b].value, list.data ? list.data : "");
        tpk_str_free(&list);
        ok = false;
      }
      chosen = c->opts->tunes[b].value;
    }
    if (!ok) continue;
    bool bound = false;
    for (int b = 0; c->opts && b < c->opts->ntunes; b++) bound |= strcmp(c->opts->tunes[b].name, t->name) == 0;
    s->dim = bound ? tpk_dim_const(c->m, chosen) : tpk_dim_sym(c->m, tpk_module_intern(c->m, t->name, strlen(t->name)));
    int64_t *copy = tpk_arena_alloc(&c->m->arena, (size_t)nchoices * sizeof *copy);
    if (!copy) return;
    memcpy(copy, choices, (size_t)nchoices * sizeof *copy);
    f->tunes[i++] = (TpkTune){.name = tpk_module_intern(c->m, s->name, strlen(s->name)), .bound = bound, .value = chosen,
                              .nchoices = nchoices, .choices = copy};
  }
  f->ntunes = i;
}

/* A parameter's or output's type. Unknown names in its dims become shape
 * symbols. */
static const TpkType *param_type(Checker *c, const TpkAst *p, bool is_output) {
  if (!p->dims) {
    if (p->inout) tpk_diag_error(c->diags, p->span, "a scalar parameter cannot be inout; pass a 1-element tensor");
    if (is_output) {
      tpk_diag_error_hint(c->diags, p->span, tpk_arena_printf(&c->m->arena, "write `%s: %s[1]`", p->name, tpk_dtype_name(p->dtype)),
                          "outputs are tensors; '%s' has no shape", p->name);
      return NULL;
    }
    return tpk_type_scalar(c->m, p->dtype);
  }
  int rank = 0;
  const TpkDim *dims[TPK_MAX_RANK];
  bool ok = true;
  for (const TpkAst *d = p->dims; d; d = d->next) {
    if (rank == TPK_MAX_RANK) {
      tpk_diag_error(c->diags, d->span, "at most %d dimensions are supported", TPK_MAX_RANK);
      return NULL;
    }
    const TpkDim *dim = eval_dim_x(c, d, true);
    int64_t k;
    if (dim && tpk_dim_is_const(dim, &k) && k <= 0) {
      tpk_diag_error(c->diags, d->span, "a size must be positive; got %lld", (long long)k);
      dim = NULL;
    }
    if (dim && !is_output && dim->kind != TPK_DIM_CONST && dim->kind != TPK_DIM_SYM) {
      tpk_diag_error_hint(c->diags, d->span, "name the size with a new symbol and compute outputs from it",
                          "an input dimension must be a symbol or a constant; '%s' is an expression", src_text(c, d));
      dim = NULL;
    }
    ok = ok && dim;
    dims[rank++] = dim;
  }
  return ok ? tpk_type_ref(c->m, p->dtype, rank, dims, TPK_MEM_HBM) : NULL;
}

static bool is_zero_literal(const TpkAst *n) {
  return (n->kind == TPK_AST_INT && n->ival == 0) || (n->kind == TPK_AST_FLOAT && n->fval == 0.0);
}

/* The first name in n (an expression) that is a tunable, or NULL. */
static const TpkAst *tunable_in(Checker *c, const TpkAst *n) {
  for (; n; n = n->next) {
    if (n->kind == TPK_AST_NAME) {
      Sym *s = lookup(c, n->name);
      if (s && s->kind == SYM_TUNE) return n;
    }
    const TpkAst *found = tunable_in(c, n->lhs);
    if (!found) found = tunable_in(c, n->rhs);
    if (!found) found = tunable_in(c, n->args);
    if (found) return found;
  }
  return NULL;
}

/* `require K <= N, ...`: comparisons of sizes built from shape symbols,
 * consts and literals, which every launch checks once it has bound the
 * sizes (ir.h's TpkRequire). Tunables are refused: a requirement is on what
 * the caller gives, and must hold whichever tunables are chosen. One that
 * is decided already (constant sizes, or sizes given with --bind) is
 * checked here. */
static void check_requires(Checker *c, const TpkAst *k, TpkFunc *f) {
  int n = count_list(k->requires), kept = 0;
  TpkRequire *reqs = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *reqs);
  if (!reqs) return;
  for (const TpkAst *q = k->requires; q; q = q->next) {
    const BinOp *bop = q->kind == TPK_AST_BINARY ? binop_of(q->op) : NULL;
    if (!bop || !tpk_require_cmp_text(bop->opcode)) {
      tpk_diag_error_hint(c->diags, q->span, "list several requirements with commas: `require 1 <= K, K <= N`",
                          "a requirement compares two sizes, like `K <= N`");
      continue;
    }
    const TpkAst *tune = tunable_in(c, q);
    if (tune) {
      tpk_diag_error(c->diags, tune->span,
                     "'%s' is a tunable; a requirement is on the sizes a launch gives (shape symbols, consts and literals)",
                     tune->name);
      continue;
    }
    const TpkDim *a = eval_dim(c, q->lhs), *b = eval_dim(c, q->rhs);
    if (!a || !b) continue;
    int64_t x, y;
    if (tpk_dim_is_const(a, &x) && tpk_dim_is_const(b, &y)) {
      TpkStr why = {0};
      const char *ln = q->lhs->kind == TPK_AST_INT ? NULL : src_text(c, q->lhs);
      const char *rn = q->rhs->kind == TPK_AST_INT ? NULL : src_text(c, q->rhs);
      if (!tpk_require_holds(bop->opcode, ln, x, rn, y, &why))
        tpk_diag_error(c->diags, q->span, "this requirement does not hold: %s", why.data ? why.data : "?");
      tpk_str_free(&why);
      continue;
    }
    reqs[kept++] = (TpkRequire){.cmp = bop->opcode, .lhs = a, .rhs = b, .loc = loc_of(q)};
  }
  if (f) {
    f->requires = reqs;
    f->nrequires = kept;
  }
}

/* `lengths: i32[B] in 1..1025` or `in [16, 256]`: the values an integer
 * input takes, declared for timing without data (the tuner), into *out
 * (TpkParam.sample); false after reporting misuse. */
static bool check_sample(Checker *c, const TpkAst *p, TpkDType dt, TpkParam *out) {
  const TpkAst *d = p->rhs;
  if (!tpk_dtype_is_int(dt)) {
    tpk_diag_error_hint(c->diags, d->span, "timing follows the integers that steer control flow: lengths, counts, block tables",
                        "only integer inputs declare the values they take; '%s' is %s", p->name, tpk_dtype_name(dt));
    return false;
  }
  const TpkAst *items[2] = {d->lhs, d->rhs};
  const TpkAst *first = d->kind == TPK_AST_RANGE ? items[0] : d->kind == TPK_AST_LIST ? d->args : NULL;
  int n = d->kind == TPK_AST_RANGE ? 2 : d->kind == TPK_AST_LIST ? count_list(d->args) : 0;
  if (n == 0) {
    tpk_diag_error_hint(c->diags, d->span, "e.g. `lengths: i32[B] in 1..1025` or `in [128, 1024]`",
                        "expected a range lo..hi or a list [a, b, ...] of the values '%s' takes", p->name);
    return false;
  }
  int64_t *vs = tpk_arena_alloc(&c->m->arena, (size_t)n * sizeof *vs);
  if (!vs) return false;
  const TpkAst *e = first;
  for (int i = 0; i < n; i++, e = d->kind == TPK_AST_RANGE ? items[1] : e->next) {
    Val v = eval(c, e);
    if (v.k == V_ERR) return false;
    if (v.k != V_INT) {
      tpk_diag_error(c->diags, e->span, "the values an input takes must be compile-time integers (literals or consts)");
      return false;
    }
    /* a range's end is one past its last value */
    int64_t last = d->kind == TPK_AST_RANGE && i == 1 ? v.i - 1 : v.i;
    if (!int_fits(last, dt)) {
      tpk_diag_error(c->diags, e->span, "%lld does not fit in %s, the dtype of '%s'", (long long)last, tpk_dtype_name(dt), p->name);
      return false;
    }
    vs[i] = v.i;
  }
  if (d->kind == TPK_AST_RANGE && vs[0] >= vs[1]) {
    tpk_diag_error_hint(c->diags, d->span, "lo..hi is lo up to hi - 1, as in a loop range",
                        "the range %lld..%lld is empty", (long long)vs[0], (long long)vs[1]);
    return false;
  }
  *out = (TpkParam){.nsample = n, .sample_range = d->kind == TPK_AST_RANGE, .sample = vs};
  return true;
}

static void check_kernel(Checker *c, const TpkAst *k) {
  c->scope = c->globals;
  c->in_kernel = true;
  c->b.block = NULL;
  int n = count_list(k->params) + count_list(k->outputs);
  const TpkType **types = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *types);
  const char **names = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *names);
  TpkParamRole *roles = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *roles);
  const TpkAst **decls = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *decls);
  if (!types || !names || !roles || !decls) return;

  /* Tunables first: shapes may use them. They go into a function created
   * once the parameter types are known, so collect them in a stand-in. */
  TpkFunc tunes = {0};
  check_tunables(c, k, &tunes);
  c->tunes = tunes.tunes;
  c->ntunes = tunes.ntunes;

  bool ok = true;
  int i = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (const TpkAst *p = pass ? k->outputs : k->params; p; p = p->next, i++) {
      for (int j = 0; j < i; j++)
        if (strcmp(names[j], p->name) == 0) {
          tpk_diag_error(c->diags, p->name_span, "'%s' is declared twice in kernel '%s'", p->name, k->name);
          ok = false;
        }
      types[i] = param_type(c, p, pass == 1);
      names[i] = p->name;
      decls[i] = p;
      roles[i] = pass ? TPK_PARAM_OUT : p->inout ? TPK_PARAM_INOUT : TPK_PARAM_IN;
      if (pass && p->rhs && !is_zero_literal(p->rhs)) {
        tpk_diag_error(c->diags, p->rhs->span, "an output can only start zeroed (`= 0`); other initial values are not supported");
        ok = false;
      }
      ok = ok && types[i];
    }
  }
  /* declared distributions of integer inputs */
  TpkParam *samples = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *samples);
  if (!samples) return;
  for (i = 0; i < n; i++) {
    samples[i] = (TpkParam){0};
    if (roles[i] != TPK_PARAM_OUT && decls[i]->rhs && types[i])
      ok = check_sample(c, decls[i], types[i]->dtype, &samples[i]) && ok;
  }
  /* Parameter names are declared after all shapes, so a name used as both a
   * shape symbol and a parameter is reported. */
  TpkFunc *f = ok ? tpk_func_new(c->m, k->name, true, n, types, names, roles) : NULL;
  for (i = 0; i < n; i++) {
    const TpkAst *p = decls[i];
    bool scalar = types[i] && types[i]->kind == TPK_TYPE_TENSOR;
    bool duplicate = false;
    for (int j = 0; j < i; j++) duplicate |= strcmp(names[j], p->name) == 0;
    if (duplicate) continue; /* reported above */
    Sym *s = declare_local(c, scalar ? SYM_SCALAR : SYM_REF, p->name, p->name_span);
    if (!s) return;
    s->role = roles[i];
    s->val = ERR;
    if (!f) continue;
    TpkValue *v = f->params[i].value;
    f->params[i].zero_init = roles[i] == TPK_PARAM_OUT && p->rhs != NULL;
    f->params[i].nsample = samples[i].nsample;
    f->params[i].sample_range = samples[i].sample_range;
    f->params[i].sample = samples[i].sample;
    f->params[i].loc = loc_of(p);
    s->val = scalar ? val_of(v) : (Val){.k = V_REF, .v = v, .sym = s};
  }
  if (f) {
    f->loc = loc_of(k);
    f->ntunes = tunes.ntunes;
    f->tunes = tunes.tunes;
    f->backward = k->backward ? module_name(c, k->backward->name) : NULL;
  }
  check_requires(c, k, f);
  /* The body is checked even when the signature had errors, into a detached
   * block, so its mistakes are reported too. */
  c->b = (TpkBuilder){.m = c->m, .block = f ? f->body : detached_block(c)};
  if (c->b.block) check_stmts(c, k->body, true);
  c->b.block = NULL;
  c->in_kernel = false;
  c->scope = c->globals;
}

/* ---- Backward kernels -------------------------------------------------------------------- */

/* `kernel F(...) -> (...) backward B`: B computes the gradients of F's
 * inputs. Its signature is matched against F's by name, so that a caller
 * (the PyTorch layer) can wire B's arguments from F's call without more
 * declarations: B's inputs are F's tensor inputs and outputs, each as F
 * declares it, and gradients d<o> of F's outputs; its scalars are F's; its
 * outputs are gradients d<i> of F's float tensor inputs. A gradient has the
 * dims of what it is the gradient of, and its dtype, or f32 when that is a
 * 16- or 8-bit float (the caller converts). Types are interned, so equal
 * pointers are equal dtypes and structurally equal dims. */

static const TpkAst *file_kernel(const TpkAst *file, const char *name) {
  for (const TpkAst *d = file->body; d; d = d->next)
    if (d->kind == TPK_AST_KERNEL && strcmp(d->name, name) == 0) return d;
  return NULL;
}

static const TpkParam *func_param(const TpkFunc *f, const char *name) {
  for (int i = 0; i < f->nparams; i++)
    if (strcmp(f->params[i].name, name) == 0) return &f->params[i];
  return NULL;
}

static bool param_is_scalar(const TpkParam *p) { return p->value->type->kind == TPK_TYPE_TENSOR; }

/* "f32[M,N]", "f32" for a scalar. */
static const char *param_type_text(Checker *c, const TpkType *t) {
  if (t->kind == TPK_TYPE_TENSOR && t->rank == 0) return tpk_dtype_name(t->dtype);
  return tpk_arena_printf(&c->m->arena, "%s%s", tpk_dtype_name(t->dtype), shape_str(c, t->rank, t->dims));
}

static bool low_precision_float(TpkDType dt) { return tpk_dtype_is_float(dt) && dt != TPK_F32; }

/* The parameter of F that `name` is the gradient of (d<name>), of the given
 * role, or NULL. */
static const TpkParam *gradient_of(const TpkFunc *f, const char *name, TpkParamRole role) {
  if (name[0] != 'd' || !name[1]) return NULL;
  const TpkParam *p = func_param(f, name + 1);
  return p && p->role == role ? p : NULL;
}

/* The gradient `p` of B (type t) against what it is the gradient of, `of`
 * (an input or an output of F): dims, dtype, and that `of` is a float. */
static bool check_gradient(Checker *c, const TpkAst *p, const TpkType *t, const TpkParam *of, const char *what) {
  const TpkType *ot = of->value->type;
  if (param_is_scalar(of)) {
    tpk_diag_error_hint(c->diags, p->name_span, "only tensors have gradients here: pass a 1-element tensor to differentiate a scalar",
                        "'%s' would be the gradient of scalar parameter '%s'", p->name, of->name);
    return false;
  }
  if (!tpk_dtype_is_float(ot->dtype)) {
    tpk_diag_error_hint(c->diags, p->name_span,
                        tpk_arena_printf(&c->m->arena, "integer and bool %ss have no gradient", what),
                        "'%s' would be the gradient of %s '%s', which is %s", p->name, what, of->name,
                        tpk_dtype_name(ot->dtype));
    return false;
  }
  bool dims_ok = t->rank == ot->rank;
  for (int i = 0; dims_ok && i < t->rank; i++) dims_ok = t->dims[i] == ot->dims[i];
  bool dtype_ok = t->dtype == ot->dtype || (t->dtype == TPK_F32 && low_precision_float(ot->dtype));
  if (dims_ok && dtype_ok) return true;
  const char *want = low_precision_float(ot->dtype)
                         ? tpk_arena_printf(&c->m->arena, "%s or f32%s", param_type_text(c, ot), shape_str(c, ot->rank, ot->dims))
                         : param_type_text(c, ot);
  tpk_diag_error_hint(c->diags, p->name_span,
                      "a gradient has the dims of what it is the gradient of, and its dtype, or f32 for a 16- or 8-bit float",
                      "'%s', the gradient of %s '%s' (%s), must be %s; it is %s here", p->name, what, of->name,
                      param_type_text(c, ot), want, param_type_text(c, t));
  return false;
}

/* Names of F's parameters of one kind, "x, w" ("none" when there are none):
 * what its backward kernel may take and return. */
typedef enum SigNames { SIG_TENSOR_INPUTS, SIG_OUTPUTS, SIG_OUTPUT_GRADIENTS, SIG_INPUT_GRADIENTS } SigNames;

static const char *sig_names(Checker *c, const TpkFunc *f, SigNames which) {
  TpkStr s = {0};
  for (int i = 0; i < f->nparams; i++) {
    const TpkParam *p = &f->params[i];
    bool is_float = tpk_dtype_is_float(p->value->type->dtype);
    bool in = p->role == TPK_PARAM_IN && !param_is_scalar(p), out = p->role == TPK_PARAM_OUT;
    bool take = which == SIG_TENSOR_INPUTS ? in : which == SIG_OUTPUTS ? out
              : which == SIG_OUTPUT_GRADIENTS ? out && is_float : in && is_float;
    bool gradient = which == SIG_OUTPUT_GRADIENTS || which == SIG_INPUT_GRADIENTS;
    if (take) tpk_str_printf(&s, "%s%s%s", s.len ? ", " : "", gradient ? "d" : "", p->name);
  }
  const char *r = tpk_arena_strdup(&c->m->arena, s.data ? s.data : "none");
  tpk_str_free(&s);
  return r;
}

/* One input of B (AST p, type t); true when it is an output gradient. */
static bool check_backward_input(Checker *c, const TpkAst *fk, const TpkFunc *ff, const TpkAst *bk, const TpkAst *p,
                                 const TpkType *t, bool *ok) {
  const TpkParam *fp = func_param(ff, p->name);
  if (p->inout) {
    tpk_diag_error_hint(c->diags, p->name_span, "it reads the forward kernel's tensors and returns the gradients as outputs",
                        "a backward kernel does not update '%s' in place", p->name);
    *ok = false;
    return false;
  }
  if (t->kind == TPK_TYPE_TENSOR) { /* a scalar */
    if (fp && param_is_scalar(fp) && fp->value->type == t) return false;
    if (fp && param_is_scalar(fp))
      tpk_diag_error_hint(c->diags, p->name_span, "a backward kernel's scalars are its forward kernel's, as declared there",
                          "scalar '%s' is %s here but %s in '%s'", p->name, tpk_dtype_name(t->dtype),
                          tpk_dtype_name(fp->value->type->dtype), fk->name);
    else
      tpk_diag_error_hint(c->diags, p->name_span, "a backward kernel's scalars are its forward kernel's, as declared there",
                          "scalar '%s' of backward kernel '%s' is not a scalar parameter of '%s'", p->name, bk->name, fk->name);
    *ok = false;
    return false;
  }
  if (fp && param_is_scalar(fp)) {
    tpk_diag_error_hint(c->diags, p->name_span, tpk_arena_printf(&c->m->arena, "declare it as in '%s': `%s: %s`", fk->name,
                                                                 p->name, tpk_dtype_name(fp->value->type->dtype)),
                        "'%s' is a scalar parameter of '%s', not a tensor", p->name, fk->name);
    *ok = false;
    return false;
  }
  if (fp) {
    if (fp->value->type == t) return false;
    tpk_diag_error_hint(c->diags, p->name_span,
                        tpk_arena_printf(&c->m->arena, "declare it as in '%s': `%s: %s`", fk->name, p->name,
                                         param_type_text(c, fp->value->type)),
                        "'%s' is %s here but %s in '%s'", p->name, param_type_text(c, t),
                        param_type_text(c, fp->value->type), fk->name);
    *ok = false;
    return false;
  }
  const TpkParam *out = gradient_of(ff, p->name, TPK_PARAM_OUT);
  if (out) {
    if (!check_gradient(c, p, t, out, "output")) *ok = false;
    return true;
  }
  const TpkParam *in = gradient_of(ff, p->name, TPK_PARAM_IN);
  if (in) {
    tpk_diag_error_hint(c->diags, p->name_span,
                        tpk_arena_printf(&c->m->arena, "declare it among the outputs: -> (%s: ...)", p->name),
                        "'%s' is the gradient of input '%s' of '%s': an output of the backward kernel, not an input",
                        p->name, in->name, fk->name);
    *ok = false;
    return false;
  }
  const char *cands[3 * 64];
  int n = 0;
  for (int i = 0; i < ff->nparams && n + 2 <= (int)TPK_ARRAY_LEN(cands); i++) {
    const TpkParam *q = &ff->params[i];
    if (param_is_scalar(q)) continue;
    cands[n++] = q->name;
    if (q->role == TPK_PARAM_OUT) cands[n++] = tpk_arena_printf(&c->m->arena, "d%s", q->name);
  }
  const char *hint = suggest(c, p->name, cands, n);
  tpk_diag_error_hint(c->diags, p->name_span,
                      hint ? hint
                           : tpk_arena_printf(&c->m->arena,
                                              "the backward kernel of '%s' takes its tensor inputs (%s), outputs (%s) "
                                              "and output gradients (%s)",
                                              fk->name, sig_names(c, ff, SIG_TENSOR_INPUTS), sig_names(c, ff, SIG_OUTPUTS),
                                              sig_names(c, ff, SIG_OUTPUT_GRADIENTS)),
                      "'%s' is not an input, output or output gradient of '%s'", p->name, fk->name);
  *ok = false;
  return false;
}

/* One output of B (AST p, type t). */
static bool check_backward_output(Checker *c, const TpkAst *fk, const TpkFunc *ff, const TpkAst *p, const TpkType *t) {
  const TpkParam *in = gradient_of(ff, p->name, TPK_PARAM_IN);
  if (in) return check_gradient(c, p, t, in, "input");
  const TpkParam *out = gradient_of(ff, p->name, TPK_PARAM_OUT);
  if (out)
    tpk_diag_error_hint(c->diags, p->name_span, "the backward kernel takes it as an input and returns the inputs' gradients",
                        "'%s' is the gradient of output '%s' of '%s': an input of the backward kernel, not an output",
                        p->name, out->name, fk->name);
  else
    tpk_diag_error_hint(c->diags, p->name_span,
                        tpk_arena_printf(&c->m->arena, "name each output d<input> after an input of '%s': %s", fk->name,
                                         sig_names(c, ff, SIG_INPUT_GRADIENTS)),
                        "output '%s' is not the gradient of an input of '%s'", p->name, fk->name);
  return false;
}

static void check_backward(Checker *c, const TpkAst *file, const TpkAst *fk) {
  const TpkAst *at = fk->backward;
  const TpkAst *bk = file_kernel(file, at->name);
  if (!bk) {
    const char *cands[256];
    int n = 0;
    for (const TpkAst *d = file->body; d && n < 256; d = d->next)
      if (d->kind == TPK_AST_KERNEL) cands[n++] = d->name;
    const char *hint = suggest(c, at->name, cands, n);
    tpk_diag_error_hint(c->diags, at->span, hint ? hint : "a backward kernel is defined in the same file as its forward kernel",
                        "no kernel named '%s' in this file", at->name);
    return;
  }
  if (bk == fk) {
    tpk_diag_error_hint(c->diags, at->span, "name the kernel that computes the gradients of its inputs",
                        "kernel '%s' cannot be its own backward kernel", fk->name);
    return;
  }
  bool ok = true;
  for (const TpkAst *p = fk->params; p; p = p->next)
    if (p->inout) {
      tpk_diag_error_hint(c->diags, p->name_span,
                          "in-place kernels have no autograd here: the gradient would need the values the kernel overwrote; "
                          "return the result as an output instead",
                          "'%s' is inout, so kernel '%s' cannot have a backward kernel", p->name, fk->name);
      ok = false;
    }
  /* Both signatures are needed: not there when they had errors (reported)
   * or when only F is checked (opts->only_kernel). */
  const TpkFunc *ff = tpk_module_find(c->m, fk->name), *bf = tpk_module_find(c->m, bk->name);
  if (!ok || !ff || !bf) return;
  int i = 0, grads = 0;
  for (const TpkAst *p = bk->params; p; p = p->next, i++)
    grads += check_backward_input(c, fk, ff, bk, p, bf->params[i].value->type, &ok);
  for (const TpkAst *p = bk->outputs; p; p = p->next, i++) check_backward_output(c, fk, ff, p, bf->params[i].value->type);
  if (!bk->outputs)
    tpk_diag_error_hint(c->diags, at->span,
                        tpk_arena_printf(&c->m->arena, "its outputs are gradients of inputs of '%s': %s", fk->name,
                                         sig_names(c, ff, SIG_INPUT_GRADIENTS)),
                        "backward kernel '%s' returns no gradient", bk->name);
  else if (ok && grads == 0)
    tpk_diag_error_hint(c->diags, at->span,
                        tpk_arena_printf(&c->m->arena, "take the gradient of at least one output of '%s': %s", fk->name,
                                         sig_names(c, ff, SIG_OUTPUT_GRADIENTS)),
                        "backward kernel '%s' takes no output gradient of '%s'", bk->name, fk->name);
}

/* ---- Files ------------------------------------------------------------------------------- */

static int cmp_kernel_name(const void *a, const void *b) {
  const TpkAst *x = *(const TpkAst *const *)a, *y = *(const TpkAst *const *)b;
  int r = strcmp(x->name, y->name);
  return r ? r : (x->span.offset > y->span.offset) - (x->span.offset < y->span.offset);
}

static void declare_globals(Checker *c, const TpkAst *file) {
  for (const TpkAst *d = file->body; d; d = d->next) {
    if (d->kind != TPK_AST_CONST) continue;
    Sym *old = const_lookup(c, d->name);
    if (old) {
      tpk_diag_error(c->diags, d->name_span, "const '%s' is defined twice", d->name);
      tpk_diag_note(c->diags, old->span, "the first definition is here");
      continue;
    }
    Sym *s = declare(c, SYM_CONST, d->name, d->name_span);
    if (!s) return;
    s->decl = d;
    if (!tpk_ptrmap_put(&c->consts, s->name, s)) return;
  }
  c->globals = c->scope;
  /* Duplicate kernels: sort by name (then position) so a file with
   * thousands of kernels is not compared pairwise. */
  int n = 0;
  for (const TpkAst *d = file->body; d; d = d->next) n += d->kind == TPK_AST_KERNEL;
  const TpkAst **ks = tpk_arena_alloc(&c->m->arena, (size_t)(n ? n : 1) * sizeof *ks);
  if (!ks) return;
  n = 0;
  for (const TpkAst *d = file->body; d; d = d->next)
    if (d->kind == TPK_AST_KERNEL) ks[n++] = d;
  qsort(ks, (size_t)n, sizeof *ks, cmp_kernel_name);
  for (int i = 1; i < n; i++) {
    if (strcmp(ks[i]->name, ks[i - 1]->name) != 0) continue;
    int first = i - 1;
    while (first > 0 && strcmp(ks[first - 1]->name, ks[i]->name) == 0) first--;
    tpk_diag_error(c->diags, ks[i]->name_span, "kernel '%s' is defined twice", ks[i]->name);
    tpk_diag_note(c->diags, ks[first]->name_span, "the first definition is here");
  }
}

static void unused_options(Checker *c) {
  for (int i = 0; c->opts && i < c->opts->nbinds; i++)
    if (!c->bind_seen[i])
      tpk_diag_error(c->diags, (TpkSpan){0}, "--bind %s: no kernel in this file has a shape symbol '%s'",
                     c->opts->binds[i].name, c->opts->binds[i].name);
  for (int i = 0; c->opts && i < c->opts->ntunes; i++)
    if (!c->tune_seen[i])
      tpk_diag_error(c->diags, (TpkSpan){0}, "--tune %s: no kernel in this file has a tunable '%s'",
                     c->opts->tunes[i].name, c->opts->tunes[i].name);
}

/* --kernel NAME must name a kernel of the file. */
static bool kernel_exists(Checker *c, const TpkAst *file, const char *name) {
  TpkStr list = {0};
  for (const TpkAst *d = file->body; d; d = d->next) {
    if (d->kind != TPK_AST_KERNEL) continue;
    if (strcmp(d->name, name) == 0) {
      tpk_str_free(&list);
      return true;
    }
    tpk_str_printf(&list, "%s%s", list.len ? ", " : "", d->name);
  }
  tpk_diag_error(c->diags, (TpkSpan){0}, "no kernel named '%s' in this file%s%s", name, list.len ? "; it has: " : "",
                 list.data ? list.data : "");
  tpk_str_free(&list);
  return false;
}

TpkStatus tpk_check(const TpkParsed *parsed, const TpkCheckOptions *opts, TpkDiags *diags, TpkModule **out) {
  *out = NULL;
  if (!parsed->file) return TPK_ERR_PARSE;
  Checker c = {.diags = diags, .opts = opts};
  c.m = tpk_module_new(diags->src && diags->src->name ? diags->src->name : "<input>");
  if (!c.m) return TPK_ERR_NOMEM;
  c.consts = (TpkPtrMap){.arena = &c.m->arena};
  int nb = opts ? opts->nbinds : 0, nt = opts ? opts->ntunes : 0;
  c.bind_seen = tpk_arena_alloc(&c.m->arena, (size_t)(nb + 1) * sizeof(bool));
  c.tune_seen = tpk_arena_alloc(&c.m->arena, (size_t)(nt + 1) * sizeof(bool));
  int errors_before = diags->errors;
  const char *only = opts ? opts->only_kernel : NULL;
  if (c.bind_seen && c.tune_seen && (!only || kernel_exists(&c, parsed->file, only))) {
    declare_globals(&c, parsed->file);
    for (const TpkAst *d = parsed->file->body; d; d = d->next) {
      if (d->kind == TPK_AST_CONST) {
        Sym *s = const_lookup(&c, d->name);
        if (s && s->decl == d) eval_const(&c, s);
      } else if (d->kind == TPK_AST_KERNEL && (!only || strcmp(d->name, only) == 0)) {
        check_kernel(&c, d);
      }
      if (c.m->arena.exhausted) break;
    }
    /* Backward kernels once every signature is known: B may come after F. */
    for (const TpkAst *d = parsed->file->body; d && !c.m->arena.exhausted; d = d->next)
      if (d->kind == TPK_AST_KERNEL && d->backward && (!only || strcmp(d->name, only) == 0)) check_backward(&c, parsed->file, d);
    unused_options(&c);
  }
  if (c.m->arena.exhausted) tpk_diag_error(diags, (TpkSpan){0}, "out of memory: the file is too large to compile");
  if (diags->errors == errors_before) {
    TpkError err = {0};
    if (tpk_ir_verify(c.m, &err) != TPK_OK)
      tpk_diag_error(diags, (TpkSpan){0}, "internal error: the IR built for this file is invalid (%s); please report it",
                     err.message);
  }
  if (diags->errors != errors_before) {
    tpk_module_free(c.m);
    return TPK_ERR_PARSE;
  }
  *out = c.m;
  return TPK_OK;
}

TpkStatus tpk_compile_source(const TpkSource *src, const TpkCheckOptions *opts, TpkDiags *diags, TpkModule **out) {
  *out = NULL;
  TpkParsed parsed;
  TpkStatus st = tpk_parse(src, &parsed, diags);
  if (st == TPK_OK) st = tpk_check(&parsed, opts, diags, out);
  else if (st != TPK_ERR_NOMEM) st = TPK_ERR_PARSE;
  tpk_parsed_free(&parsed);
  return st;
}
