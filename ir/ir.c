/*
 * ir.c — the IR's data: modules and their intern tables (strings, dims,
 * types), dimension algebra, functions, the builder, use lists, attributes
 * and their closed sets, and the op table.
 *
 * Everything lives in the module arena. Interning is hash-consing: a dim or
 * type is looked up by its fields before it is created, so structural
 * equality is pointer equality everywhere downstream. Values are allocated
 * once and never move; each keeps the list of its uses, which only the
 * functions here change.
 */
#include "ir/ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>


/* ---- Op table -------------------------------------------------------------- */

static const TpkOpInfo OPS[TPK_OP_COUNT] = {
#define TPK_OP_INFO(e, name, min_in, max_in, nout, nregion, flags, attrs) \
  [TPK_OP_##e] = {name, min_in, max_in, nout, nregion, flags, attrs},
    TPK_OPS(TPK_OP_INFO)
#undef TPK_OP_INFO
};

const TpkOpInfo *tpk_op_info(TpkOpcode op) { return (unsigned)op < TPK_OP_COUNT ? &OPS[op] : NULL; }

TpkOpcode tpk_opcode_from_name(const char *name, size_t len) {
  for (int i = 0; i < TPK_OP_COUNT; i++)
    if (strlen(OPS[i].name) == len && memcmp(OPS[i].name, name, len) == 0) return (TpkOpcode)i;
  return TPK_OP_COUNT;
}

/* ---- Intern tables --------------------------------------------------------- */

/* One open-addressing table of arena pointers with their hashes; `eq`
 * compares a stored entry with the key being looked up. */
typedef struct Table {
  const void **slots;
  uint64_t *hashes;
  size_t cap, n;
} Table;

struct TpkIntern {
  Table strs, dims, types;
};

typedef bool (*TableEq)(const void *entry, const void *key, size_t keylen);

/* Index of the slot holding key, or of the empty slot where it belongs. */
static size_t table_find(const Table *t, uint64_t h, TableEq eq, const void *key, size_t keylen) {
  size_t i = (size_t)h & (t->cap - 1);
  while (t->slots[i] && !(t->hashes[i] == h && eq(t->slots[i], key, keylen))) i = (i + 1) & (t->cap - 1);
  return i;
}

static const void *table_get(const Table *t, uint64_t h, TableEq eq, const void *key, size_t keylen) {
  if (!t->cap) return NULL;
  return t->slots[table_find(t, h, eq, key, keylen)];
}

/* Make room for one more entry (copy on grow: the old arrays stay in the arena). */
static bool table_reserve(TpkArena *a, Table *t) {
  if (t->cap && (t->n + 1) * 4 < t->cap * 3) return true;
  size_t cap = t->cap ? t->cap * 2 : 64;
  const void **slots = tpk_arena_alloc(a, cap * sizeof *slots);
  uint64_t *hashes = tpk_arena_alloc(a, cap * sizeof *hashes);
  if (!slots || !hashes) return false;
  for (size_t i = 0; i < t->cap; i++) {
    if (!t->slots[i]) continue;
    size_t j = (size_t)t->hashes[i] & (cap - 1);
    while (slots[j]) j = (j + 1) & (cap - 1);
    slots[j] = t->slots[i];
    hashes[j] = t->hashes[i];
  }
  t->slots = slots;
  t->hashes = hashes;
  t->cap = cap;
  return true;
}

static void table_insert(Table *t, uint64_t h, const void *entry) {
  size_t i = (size_t)h & (t->cap - 1);
  while (t->slots[i]) i = (i + 1) & (t->cap - 1);
  t->slots[i] = entry;
  t->hashes[i] = h;
  t->n++;
}

static bool str_eq(const void *entry, const void *key, size_t n) {
  const char *e = entry;
  return strncmp(e, key, n) == 0 && e[n] == 0;
}

const char *tpk_module_intern(TpkModule *m, const char *s, size_t n) {
  if (!s) return NULL;
  uint64_t h = tpk_hash_bytes(s, n);
  const char *found = table_get(&m->intern->strs, h, str_eq, s, n);
  if (found) return found;
  if (memchr(s, 0, n)) return NULL; /* interned names are C strings */
  if (!table_reserve(&m->arena, &m->intern->strs)) return NULL;
  char *copy = tpk_arena_strndup(&m->arena, s, n);
  if (!copy) return NULL;
  table_insert(&m->intern->strs, h, copy);
  return copy;
}

static const char *intern_cstr(TpkModule *m, const char *s) { return s ? tpk_module_intern(m, s, strlen(s)) : NULL; }

/* ---- Modules --------------------------------------------------------------- */

TpkModule *tpk_module_new(const char *source_name) {
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkModule *m = tpk_arena_alloc(&arena, sizeof *m);
  if (!m) {
    tpk_arena_free(&arena);
    return NULL;
  }
  m->arena = arena;
  m->intern = tpk_arena_alloc(&m->arena, sizeof *m->intern);
  if (!m->intern) {
    tpk_module_free(m);
    return NULL;
  }
  if (source_name) m->source = tpk_arena_strdup(&m->arena, source_name);
  return m;
}

void tpk_module_free(TpkModule *m) {
  if (!m) return;
  TpkArena arena = m->arena; /* m itself lives in the arena */
  tpk_arena_free(&arena);
}

TpkFunc *tpk_module_find(TpkModule *m, const char *name) {
  if (!m || !name) return NULL;
  for (int i = 0; i < m->nfuncs; i++)
    if (m->funcs[i]->name && strcmp(m->funcs[i]->name, name) == 0) return m->funcs[i];
  return NULL;
}

void tpk_module_remove(TpkModule *m, TpkFunc *f) {
  for (int i = 0; m && i < m->nfuncs; i++)
    if (m->funcs[i] == f) {
      memmove(&m->funcs[i], &m->funcs[i + 1], (size_t)(m->nfuncs - i - 1) * sizeof *m->funcs);
      m->nfuncs--;
      return;
    }
}

/* ---- Dimensions ------------------------------------------------------------ */

static uint64_t dim_hash(TpkDimKind kind, int64_t value, const char *sym, const TpkDim *a, const TpkDim *b) {
  uint64_t h = tpk_hash_mix((uint64_t)kind * 0x9e3779b97f4a7c15ULL ^ (uint64_t)value);
  h = tpk_hash_mix(h ^ (uint64_t)(uintptr_t)sym);
  h = tpk_hash_mix(h ^ (uint64_t)(uintptr_t)a);
  return tpk_hash_mix(h ^ (uint64_t)(uintptr_t)b * 31);
}

static bool dim_eq(const void *entry, const void *key, size_t unused) {
  (void)unused;
  const TpkDim *x = entry, *y = key;
  return x->kind == y->kind && x->value == y->value && x->sym == y->sym && x->a == y->a && x->b == y->b;
}

static const TpkDim *dim_node(TpkModule *m, TpkDimKind kind, int64_t value, const char *sym, const TpkDim *a,
                              const TpkDim *b) {
  TpkDim key = {kind, value, sym, a, b};
  uint64_t h = dim_hash(kind, value, sym, a, b);
  const TpkDim *found = table_get(&m->intern->dims, h, dim_eq, &key, 0);
  if (found) return found;
  if (!table_reserve(&m->arena, &m->intern->dims)) return NULL;
  TpkDim *d = tpk_arena_alloc(&m->arena, sizeof *d);
  if (!d) return NULL;
  *d = key;
  table_insert(&m->intern->dims, h, d);
  return d;
}

const TpkDim *tpk_dim_const(TpkModule *m, int64_t v) { return dim_node(m, TPK_DIM_CONST, v, NULL, NULL, NULL); }

const TpkDim *tpk_dim_sym(TpkModule *m, const char *name) {
  const char *s = intern_cstr(m, name);
  return s ? dim_node(m, TPK_DIM_SYM, 0, s, NULL, NULL) : NULL;
}

bool tpk_dim_is_const(const TpkDim *d, int64_t *value) {
  if (!d || d->kind != TPK_DIM_CONST) return false;
  if (value) *value = d->value;
  return true;
}

/* A structural order, the same in every module (pointer order is not), so
 * canonical operand order and hence the printed text are deterministic.
 * Symbols sort first and constants last: `B*H*2`, `M+1`. */
static int dim_rank(TpkDimKind k) {
  static const int rank[] = {[TPK_DIM_SYM] = 0, [TPK_DIM_ADD] = 1, [TPK_DIM_SUB] = 2, [TPK_DIM_MUL] = 3,
                             [TPK_DIM_DIV] = 4, [TPK_DIM_CDIV] = 5, [TPK_DIM_CONST] = 6};
  return rank[k];
}

static int dim_cmp(const TpkDim *x, const TpkDim *y) {
  if (x == y) return 0;
  if (x->kind != y->kind) return dim_rank(x->kind) - dim_rank(y->kind);
  switch (x->kind) {
  case TPK_DIM_CONST: return x->value < y->value ? -1 : 1;
  case TPK_DIM_SYM: return strcmp(x->sym, y->sym);
  default: {
    int c = dim_cmp(x->a, y->a);
    return c ? c : dim_cmp(x->b, y->b);
  }
  }
}

enum { MAX_TERMS = 64 };

/* The operands of a chain of `op` (ADD or MUL), flattened; the constants are
 * folded into *k. Returns FLAT_LONG when the chain is too long (the caller
 * falls back to a plain node) and FLAT_OVERFLOW when a constant overflows. */
typedef enum Flat { FLAT_OK, FLAT_LONG, FLAT_OVERFLOW } Flat;

static Flat flatten(const TpkDim *d, TpkDimKind op, const TpkDim **terms, int *n, int64_t *k) {
  if (d->kind == op) {
    Flat f = flatten(d->a, op, terms, n, k);
    return f != FLAT_OK ? f : flatten(d->b, op, terms, n, k);
  }
  if (d->kind == TPK_DIM_CONST) {
    bool over = op == TPK_DIM_ADD ? __builtin_add_overflow(*k, d->value, k) : __builtin_mul_overflow(*k, d->value, k);
    return over ? FLAT_OVERFLOW : FLAT_OK;
  }
  if (*n >= MAX_TERMS) return FLAT_LONG;
  terms[(*n)++] = d;
  return FLAT_OK;
}

/* Sorted terms, left-associated, the constant last unless it is the
 * identity of op. */
static const TpkDim *rebuild(TpkModule *m, TpkDimKind op, const TpkDim **terms, int n, int64_t k) {
  for (int i = 1; i < n; i++) /* insertion sort: chains are short */
    for (int j = i; j > 0 && dim_cmp(terms[j - 1], terms[j]) > 0; j--) {
      const TpkDim *t = terms[j];
      terms[j] = terms[j - 1];
      terms[j - 1] = t;
    }
  int64_t identity = op == TPK_DIM_ADD ? 0 : 1;
  if (op == TPK_DIM_MUL && k == 0) return tpk_dim_const(m, 0);
  const TpkDim *r = n ? terms[0] : tpk_dim_const(m, k);
  for (int i = 1; i < n && r; i++) r = dim_node(m, op, 0, NULL, r, terms[i]);
  if (n && k != identity && r) r = dim_node(m, op, 0, NULL, r, tpk_dim_const(m, k));
  return r;
}

static const TpkDim *assoc(TpkModule *m, TpkDimKind op, const TpkDim *a, const TpkDim *b) {
  const TpkDim *terms[MAX_TERMS];
  int n = 0;
  int64_t k = op == TPK_DIM_ADD ? 0 : 1;
  Flat f = flatten(a, op, terms, &n, &k);
  if (f == FLAT_OK) f = flatten(b, op, terms, &n, &k);
  if (f == FLAT_OVERFLOW) return NULL;
  if (f == FLAT_LONG) {
    if (dim_cmp(a, b) > 0) {
      const TpkDim *t = a;
      a = b;
      b = t;
    }
    return dim_node(m, op, 0, NULL, a, b);
  }
  return rebuild(m, op, terms, n, k);
}

/* a / c and cdiv(a, c) with c > 0: fold constants, x/1, and (x*k)/c when c
 * divides k exactly (so (x*c)/c is x). */
static const TpkDim *divide(TpkModule *m, TpkDimKind op, const TpkDim *a, int64_t c) {
  if (c == 1) return a;
  if (a->kind == TPK_DIM_CONST) return tpk_dim_const(m, op == TPK_DIM_DIV ? tpk_floordiv(a->value, c) : tpk_ceildiv(a->value, c));
  if (a->kind == TPK_DIM_MUL) {
    const TpkDim *terms[MAX_TERMS];
    int n = 0;
    int64_t k = 1;
    if (flatten(a, TPK_DIM_MUL, terms, &n, &k) == FLAT_OK && k % c == 0) return rebuild(m, TPK_DIM_MUL, terms, n, k / c);
  }
  return dim_node(m, op, 0, NULL, a, tpk_dim_const(m, c));
}

const TpkDim *tpk_dim_binary(TpkModule *m, TpkDimKind op, const TpkDim *a, const TpkDim *b) {
  if (!m || !a || !b) return NULL;
  int64_t x, y, r;
  bool ca = tpk_dim_is_const(a, &x), cb = tpk_dim_is_const(b, &y);
  switch (op) {
  case TPK_DIM_ADD:
  case TPK_DIM_MUL:
    return assoc(m, op, a, b);
  case TPK_DIM_SUB:
    if (a == b) return tpk_dim_const(m, 0);
    if (ca && cb) return __builtin_sub_overflow(x, y, &r) ? NULL : tpk_dim_const(m, r);
    if (cb && y != INT64_MIN) return assoc(m, TPK_DIM_ADD, a, tpk_dim_const(m, -y)); /* x-c is x+(-c) */
    { /* the terms of b cancel against a's: (x+y)-y is x, x-(x-1) is 1 */
      const TpkDim *terms[MAX_TERMS], *sub[MAX_TERMS];
      int n = 0, ns = 0;
      int64_t k = 0, ks = 0;
      if (flatten(a, TPK_DIM_ADD, terms, &n, &k) == FLAT_OK && flatten(b, TPK_DIM_ADD, sub, &ns, &ks) == FLAT_OK &&
          !__builtin_sub_overflow(k, ks, &r)) {
        bool all = true;
        for (int j = 0; j < ns && all; j++) {
          all = false;
          for (int i = 0; i < n && !all; i++)
            if (terms[i] == sub[j]) {
              terms[i] = terms[--n];
              all = true;
            }
        }
        if (all) return rebuild(m, TPK_DIM_ADD, terms, n, r);
      }
    }
    return dim_node(m, op, 0, NULL, a, b);
  case TPK_DIM_DIV:
  case TPK_DIM_CDIV:
    if (cb) return y <= 0 ? NULL : divide(m, op, a, y);
    return dim_node(m, op, 0, NULL, a, b);
  case TPK_DIM_CONST:
  case TPK_DIM_SYM:
    break;
  }
  return NULL;
}

const TpkDim *tpk_dim_substitute(TpkModule *m, const TpkDim *d, TpkSymLookup lookup, void *ctx) {
  if (!d || !lookup) return d;
  int64_t v;
  switch (d->kind) {
  case TPK_DIM_CONST: return d;
  case TPK_DIM_SYM: return lookup(ctx, d->sym, &v) ? tpk_dim_const(m, v) : d;
  default: {
    const TpkDim *a = tpk_dim_substitute(m, d->a, lookup, ctx), *b = tpk_dim_substitute(m, d->b, lookup, ctx);
    if (a == d->a && b == d->b) return d;
    return tpk_dim_binary(m, d->kind, a, b);
  }
  }
}

bool tpk_dim_eval(const TpkDim *d, TpkSymLookup lookup, void *ctx, int64_t *value) {
  if (!d) return false;
  int64_t a, b;
  switch (d->kind) {
  case TPK_DIM_CONST: *value = d->value; return true;
  case TPK_DIM_SYM: return lookup && lookup(ctx, d->sym, value);
  default: break;
  }
  if (!tpk_dim_eval(d->a, lookup, ctx, &a) || !tpk_dim_eval(d->b, lookup, ctx, &b)) return false;
  switch (d->kind) {
  case TPK_DIM_ADD: return !__builtin_add_overflow(a, b, value);
  case TPK_DIM_SUB: return !__builtin_sub_overflow(a, b, value);
  case TPK_DIM_MUL: return !__builtin_mul_overflow(a, b, value);
  case TPK_DIM_DIV:
    if (b <= 0) return false;
    *value = tpk_floordiv(a, b);
    return true;
  case TPK_DIM_CDIV:
    if (b <= 0) return false;
    *value = tpk_ceildiv(a, b);
    return true;
  default: return false;
  }
}

/* ---- Types ----------------------------------------------------------------- */

static uint64_t type_hash(const TpkType *t) {
  uint64_t h = tpk_hash_mix(((uint64_t)t->kind << 32) ^ ((uint64_t)t->dtype << 16) ^ ((uint64_t)t->space << 8) ^
                       (uint64_t)t->rank);
  h = tpk_hash_mix(h ^ (uint64_t)(uintptr_t)t->block);
  for (int i = 0; i < t->rank; i++) h = tpk_hash_mix(h ^ (uint64_t)(uintptr_t)t->dims[i]);
  return h;
}

static bool type_eq(const void *entry, const void *key, size_t unused) {
  (void)unused;
  const TpkType *x = entry, *y = key;
  if (x->kind != y->kind || x->dtype != y->dtype || x->space != y->space || x->rank != y->rank ||
      x->block != y->block)
    return false;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != y->dims[i]) return false;
  return true;
}

static const TpkType *type_intern(TpkModule *m, const TpkType *key) {
  uint64_t h = type_hash(key);
  const TpkType *found = table_get(&m->intern->types, h, type_eq, key, 0);
  if (found) return found;
  if (!table_reserve(&m->arena, &m->intern->types)) return NULL;
  TpkType *t = tpk_arena_alloc(&m->arena, sizeof *t);
  if (!t) return NULL;
  *t = *key;
  table_insert(&m->intern->types, h, t);
  return t;
}

static const TpkType *shaped(TpkModule *m, TpkTypeKind kind, TpkDType dt, int rank, const TpkDim *const *dims,
                             TpkMemSpace space) {
  if (!m || rank < 0 || rank > TPK_MAX_RANK || (unsigned)dt >= TPK_DTYPE_COUNT) return NULL;
  TpkType key;
  memset(&key, 0, sizeof key); /* padding too: keys are compared field by field, but keep them clean */
  key.kind = kind;
  key.dtype = dt;
  key.space = space;
  key.rank = rank;
  for (int i = 0; i < rank; i++) {
    if (!dims[i]) return NULL;
    key.dims[i] = dims[i];
  }
  return type_intern(m, &key);
}

const TpkType *tpk_type_tensor(TpkModule *m, TpkDType dt, int rank, const TpkDim *const *dims) {
  return shaped(m, TPK_TYPE_TENSOR, dt, rank, dims, TPK_MEM_HBM);
}

const TpkType *tpk_type_scalar(TpkModule *m, TpkDType dt) { return shaped(m, TPK_TYPE_TENSOR, dt, 0, NULL, TPK_MEM_HBM); }

const TpkType *tpk_type_ref(TpkModule *m, TpkDType dt, int rank, const TpkDim *const *dims, TpkMemSpace space) {
  if ((unsigned)space > TPK_MEM_SMEM) return NULL;
  return shaped(m, TPK_TYPE_REF, dt, rank, dims, space);
}

const TpkType *tpk_type_tile_dim(TpkModule *m, const TpkDim *block) {
  int64_t v;
  if (!m || !block || (tpk_dim_is_const(block, &v) && v <= 0)) return NULL;
  TpkType key;
  memset(&key, 0, sizeof key);
  key.kind = TPK_TYPE_TILE;
  key.block = block;
  return type_intern(m, &key);
}

const TpkType *tpk_type_tile(TpkModule *m, int64_t block) {
  return m && block > 0 ? tpk_type_tile_dim(m, tpk_dim_const(m, block)) : NULL;
}

int64_t tpk_tile_block(const TpkType *t) {
  int64_t v;
  return t && t->kind == TPK_TYPE_TILE && tpk_dim_is_const(t->block, &v) ? v : -1;
}

const TpkType *tpk_type_dma(TpkModule *m) {
  if (!m) return NULL;
  TpkType key;
  memset(&key, 0, sizeof key);
  key.kind = TPK_TYPE_DMA;
  return type_intern(m, &key);
}

const TpkType *tpk_type_with_dtype(TpkModule *m, const TpkType *t, TpkDType dt) {
  if (!t || (t->kind != TPK_TYPE_TENSOR && t->kind != TPK_TYPE_REF)) return NULL;
  return shaped(m, t->kind, dt, t->rank, t->dims, t->space);
}

bool tpk_type_is_scalar(const TpkType *t) { return t && t->kind == TPK_TYPE_TENSOR && t->rank == 0; }

/* ---- Functions and blocks -------------------------------------------------- */

/* Arrays whose capacity is implied by their length (no capacity field in
 * the public structs): the next power of two, at least `min`. */
static int implied_cap(int n, int min) {
  int c = min;
  while (c < n) c *= 2;
  return c;
}

static TpkBlock *block_new(TpkModule *m, TpkOp *parent, TpkFunc *f) {
  TpkBlock *b = tpk_arena_alloc(&m->arena, sizeof *b);
  if (!b) return NULL;
  b->parent = parent;
  b->func = f;
  return b;
}

enum { MIN_ARGS = 8 };

TpkValue *tpk_block_add_arg(TpkModule *m, TpkBlock *block, const TpkType *type, const char *name) {
  if (!m || !block) return NULL;
  int cap = implied_cap(block->nargs, MIN_ARGS);
  if (!block->args || block->nargs == cap) { /* only the array of pointers moves */
    int newcap = block->args ? cap * 2 : cap;
    TpkValue **args = tpk_arena_alloc(&m->arena, (size_t)newcap * sizeof *args);
    if (!args) return NULL;
    if (block->args) memcpy(args, block->args, (size_t)block->nargs * sizeof *args);
    block->args = args;
  }
  TpkValue *v = tpk_arena_alloc(&m->arena, sizeof *v);
  if (!v) return NULL;
  v->type = type;
  v->block = block;
  v->index = block->nargs;
  v->name = intern_cstr(m, name);
  block->args[block->nargs++] = v;
  return v;
}

enum { MIN_PARAMS = 8 };

TpkValue *tpk_func_add_param(TpkModule *m, TpkFunc *f, const TpkType *type, const char *name, TpkParamRole role) {
  if (!m || !f || !f->body) return NULL;
  int cap = implied_cap(f->nparams, MIN_PARAMS);
  if (!f->params || f->nparams == cap) {
    int newcap = f->params ? cap * 2 : cap;
    TpkParam *params = tpk_arena_alloc(&m->arena, (size_t)newcap * sizeof *params);
    if (!params) return NULL;
    if (f->params) memcpy(params, f->params, (size_t)f->nparams * sizeof *params);
    f->params = params;
  }
  TpkValue *v = tpk_block_add_arg(m, f->body, type, name);
  if (!v) return NULL;
  f->params[f->nparams++] = (TpkParam){.name = v->name, .role = role, .value = v};
  return v;
}

TpkFunc *tpk_func_new(TpkModule *m, const char *name, bool is_kernel, int nparams, const TpkType *const *types,
                      const char *const *names, const TpkParamRole *roles) {
  if (!m || nparams < 0) return NULL;
  TpkFunc *f = tpk_arena_alloc(&m->arena, sizeof *f);
  if (!f) return NULL;
  f->name = intern_cstr(m, name);
  f->is_kernel = is_kernel;
  f->module = m;
  f->body = block_new(m, NULL, f);
  if (!f->body || (name && !f->name)) return NULL;
  for (int i = 0; i < nparams; i++)
    if (!tpk_func_add_param(m, f, types ? types[i] : NULL, names ? names[i] : NULL, roles ? roles[i] : TPK_PARAM_IN))
      return NULL;
  if (m->nfuncs == m->capfuncs) {
    int cap = m->capfuncs ? m->capfuncs * 2 : 8;
    TpkFunc **funcs = tpk_arena_alloc(&m->arena, (size_t)cap * sizeof *funcs);
    if (!funcs) return NULL;
    if (m->funcs) memcpy(funcs, m->funcs, (size_t)m->nfuncs * sizeof *funcs);
    m->funcs = funcs;
    m->capfuncs = cap;
  }
  m->funcs[m->nfuncs++] = f;
  return f;
}

/* ---- Uses ------------------------------------------------------------------ */

static void use_link(TpkUse *u, TpkValue *v) {
  u->prev = NULL;
  u->next = v->uses;
  if (v->uses) v->uses->prev = u;
  v->uses = u;
  v->nuses++;
}

/* Does nothing when u is not in v's list (an erased op's uses are gone). */
static void use_unlink(TpkUse *u, TpkValue *v) {
  if (!u->prev && v->uses != u) return;
  if (u->prev)
    u->prev->next = u->next;
  else
    v->uses = u->next;
  if (u->next) u->next->prev = u->prev;
  u->prev = u->next = NULL;
  v->nuses--;
}

/* The operand slots are written here and in tpk_build only. */
static TpkValue **operands(TpkOp *op) { return (TpkValue **)op->in; }

void tpk_op_set_operand(TpkOp *op, int i, TpkValue *v) {
  if (!op || i < 0 || i >= op->nin || op->in[i] == v) return;
  if (op->in[i]) use_unlink(&op->uses[i], op->in[i]);
  operands(op)[i] = v;
  if (v) use_link(&op->uses[i], v);
}

static void drop_operands(TpkOp *op) {
  for (int i = 0; i < op->nin; i++)
    if (op->in[i]) use_unlink(&op->uses[i], op->in[i]);
}

/* Fill op's operand and use arrays (already sized for n) from in. */
static void link_operands(TpkOp *op, int n, TpkValue *const *in) {
  op->nin = n;
  for (int i = 0; i < n; i++) {
    operands(op)[i] = in[i];
    op->uses[i] = (TpkUse){.user = op, .index = i};
    if (in[i]) use_link(&op->uses[i], in[i]);
  }
}

bool tpk_op_set_operands(TpkModule *m, TpkOp *op, int n, TpkValue *const *in) {
  if (!m || !op || n < 0) return false;
  TpkValue **slots = operands(op);
  TpkUse *uses = op->uses;
  if (n > op->nin) { /* new arrays; the old ones stay in the arena */
    slots = tpk_arena_alloc(&m->arena, (size_t)n * sizeof *slots);
    uses = tpk_arena_alloc(&m->arena, (size_t)n * sizeof *uses);
    if (!slots || !uses) return false;
  }
  drop_operands(op);
  op->in = slots;
  op->uses = uses;
  link_operands(op, n, in);
  return true;
}

int tpk_value_use_count(const TpkValue *v) { return v ? v->nuses : 0; }

TpkOp *tpk_value_single_user(const TpkValue *v) { return v && v->nuses == 1 ? v->uses->user : NULL; }

void tpk_func_replace_uses(TpkFunc *f, TpkValue *from, TpkValue *to) {
  (void)f; /* the uses are from's own list */
  if (!from || from == to) return;
  while (from->uses) tpk_op_set_operand(from->uses->user, from->uses->index, to);
}

/* ---- Ops ------------------------------------------------------------------- */

TpkOp *tpk_build(TpkBuilder *b, TpkOpcode opc, int nin, TpkValue *const *in, int nout, const TpkType *const *out) {
  if (!b || !b->m || (unsigned)opc >= TPK_OP_COUNT || nin < 0 || nout < 0) return NULL;
  TpkModule *m = b->m;
  TpkOp *op = tpk_arena_alloc(&m->arena, sizeof *op);
  if (!op) return NULL;
  op->opcode = opc;
  op->loc = b->loc;
  op->in = tpk_arena_alloc(&m->arena, (size_t)(nin ? nin : 1) * sizeof *op->in);
  op->uses = tpk_arena_alloc(&m->arena, (size_t)(nin ? nin : 1) * sizeof *op->uses);
  op->nout = nout;
  op->out = tpk_arena_alloc(&m->arena, (size_t)(nout ? nout : 1) * sizeof *op->out);
  int nregion = OPS[opc].nregion;
  op->regions = tpk_arena_alloc(&m->arena, (size_t)(nregion ? nregion : 1) * sizeof *op->regions);
  if (!op->in || !op->uses || !op->out || !op->regions) return NULL;
  for (int i = 0; i < nout; i++) {
    op->out[i].type = out[i];
    op->out[i].def = op;
    op->out[i].index = i;
  }
  TpkFunc *f = b->block ? b->block->func : NULL;
  for (int r = 0; r < nregion; r++)
    if (!(op->regions[r] = block_new(m, op, f))) return NULL;
  op->nregion = nregion;
  link_operands(op, nin, in); /* last: a failed build leaves no uses behind */
  if (b->block && b->before) {
    op->parent = b->block;
    op->next = b->before;
    op->prev = b->before->prev;
    if (op->prev)
      op->prev->next = op;
    else
      b->block->first = op;
    b->before->prev = op;
  } else if (b->block) {
    op->parent = b->block;
    op->prev = b->block->last;
    if (b->block->last)
      b->block->last->next = op;
    else
      b->block->first = op;
    b->block->last = op;
  }
  return op;
}

static void drop_uses_within(TpkOp *op) {
  drop_operands(op);
  for (int r = 0; r < op->nregion; r++)
    for (TpkOp *o = op->regions[r] ? op->regions[r]->first : NULL; o; o = o->next) drop_uses_within(o);
}

void tpk_op_erase(TpkOp *op) {
  if (!op || !op->parent) return;
  drop_uses_within(op);
  TpkBlock *b = op->parent;
  if (op->prev)
    op->prev->next = op->next;
  else
    b->first = op->next;
  if (op->next)
    op->next->prev = op->prev;
  else
    b->last = op->prev;
  op->prev = op->next = NULL;
  op->parent = NULL;
}

/* ---- Attributes ------------------------------------------------------------ */

enum { MIN_ATTRS = 4 };

/* The slot for key: the existing one (overwritten) or a new one. */
static TpkAttr *attr_slot(TpkModule *m, TpkOp *op, const char *key) {
  if (!m || !op || !key) return NULL;
  for (int i = 0; i < op->nattr; i++)
    if (strcmp(op->attrs[i].key, key) == 0) {
      TpkAttr *a = &op->attrs[i];
      const char *k = a->key;
      memset(a, 0, sizeof *a);
      a->key = k;
      return a;
    }
  int cap = implied_cap(op->nattr, MIN_ATTRS);
  if (!op->attrs || op->nattr == cap) {
    int newcap = op->attrs ? cap * 2 : cap;
    TpkAttr *attrs = tpk_arena_alloc(&m->arena, (size_t)newcap * sizeof *attrs);
    if (!attrs) return NULL;
    if (op->attrs) memcpy(attrs, op->attrs, (size_t)op->nattr * sizeof *attrs);
    op->attrs = attrs;
  }
  TpkAttr *a = &op->attrs[op->nattr];
  if (!(a->key = intern_cstr(m, key))) return NULL;
  op->nattr++;
  return a;
}

void tpk_op_set_int(TpkModule *m, TpkOp *op, const char *key, int64_t v) {
  TpkAttr *a = attr_slot(m, op, key);
  if (a) a->kind = TPK_ATTR_INT, a->i = v;
}

void tpk_op_set_float(TpkModule *m, TpkOp *op, const char *key, double v) {
  TpkAttr *a = attr_slot(m, op, key);
  if (a) a->kind = TPK_ATTR_FLOAT, a->f = v;
}

void tpk_op_set_bool(TpkModule *m, TpkOp *op, const char *key, bool v) {
  TpkAttr *a = attr_slot(m, op, key);
  if (a) a->kind = TPK_ATTR_BOOL, a->i = v;
}

void tpk_op_set_str(TpkModule *m, TpkOp *op, const char *key, const char *v) {
  TpkAttr *a = attr_slot(m, op, key);
  if (a) a->kind = TPK_ATTR_STR, a->s = intern_cstr(m, v ? v : "");
}

void tpk_op_set_ints(TpkModule *m, TpkOp *op, const char *key, int n, const int64_t *v) {
  TpkAttr *a = attr_slot(m, op, key);
  if (!a) return;
  a->kind = TPK_ATTR_INTS;
  int64_t *copy = tpk_arena_alloc(&m->arena, (size_t)(n > 0 ? n : 1) * sizeof *copy);
  if (!copy) return;
  if (n > 0) memcpy(copy, v, (size_t)n * sizeof *copy);
  a->n = n > 0 ? n : 0;
  a->ints = copy;
}

const TpkAttr *tpk_op_attr(const TpkOp *op, const char *key) {
  if (!op || !key) return NULL;
  for (int i = 0; i < op->nattr; i++)
    if (strcmp(op->attrs[i].key, key) == 0) return &op->attrs[i];
  return NULL;
}

int64_t tpk_op_int(const TpkOp *op, const char *key, int64_t dflt) {
  const TpkAttr *a = tpk_op_attr(op, key);
  return a && (a->kind == TPK_ATTR_INT || a->kind == TPK_ATTR_BOOL) ? a->i : dflt;
}

bool tpk_value_const_int(const TpkValue *v, int64_t *out) {
  if (!v->def || v->def->opcode != TPK_OP_CONST || v->type->rank != 0) return false;
  const TpkAttr *a = tpk_op_attr(v->def, "value");
  if (!a || a->kind != TPK_ATTR_INT) return false;
  *out = a->i;
  return true;
}

const char *tpk_op_str(const TpkOp *op, const char *key, const char *dflt) {
  const TpkAttr *a = tpk_op_attr(op, key);
  return a && a->kind == TPK_ATTR_STR ? a->s : dflt;
}

/* ---- Closed sets ----------------------------------------------------------- */

static const char *const REDUCE_KINDS[] = {
    [TPK_REDUCE_SUM] = "sum", [TPK_REDUCE_MAX] = "max", [TPK_REDUCE_MIN] = "min", [TPK_REDUCE_MEAN] = "mean",
    [TPK_REDUCE_PROD] = "prod"};
static const char *const STORE_MODES[] = {[TPK_STORE_SET] = "set", [TPK_STORE_ADD] = "add"};

static const struct EnumSet {
  const char *name; /* in signatures */
  const char *const *members;
  int count;
} ENUM_SETS[TPK_ENUM_SET_COUNT] = {
    [TPK_ENUM_REDUCE_KIND] = {"reduce_kind", REDUCE_KINDS, (int)TPK_ARRAY_LEN(REDUCE_KINDS)},
    [TPK_ENUM_STORE_MODE] = {"store_mode", STORE_MODES, (int)TPK_ARRAY_LEN(STORE_MODES)},
};

/* The text form of each TpkIndexKind. */
static const char INDEX_CHARS[] = {[TPK_INDEX_TILE] = 't', [TPK_INDEX_ALL] = ':', [TPK_INDEX_SCALAR] = 's',
                                   [TPK_INDEX_RANGE] = 'r', [TPK_INDEX_GATHER] = 'g'};

const char *tpk_enum_set_name(TpkEnumSet set) { return (unsigned)set < TPK_ENUM_SET_COUNT ? ENUM_SETS[set].name : "?"; }

const char *tpk_enum_name(TpkEnumSet set, int value) {
  if ((unsigned)set >= TPK_ENUM_SET_COUNT || value < 0 || value >= ENUM_SETS[set].count) return NULL;
  return ENUM_SETS[set].members[value];
}

bool tpk_enum_from_name(TpkEnumSet set, const char *name, int *value) {
  for (int i = 0; name && (unsigned)set < TPK_ENUM_SET_COUNT && i < ENUM_SETS[set].count; i++)
    if (strcmp(ENUM_SETS[set].members[i], name) == 0) {
      *value = i;
      return true;
    }
  return false;
}

int tpk_index_operands(const TpkIndexPattern *p) {
  int n = 0;
  for (int d = 0; d < p->rank; d++) n += p->dim[d] != TPK_INDEX_ALL;
  return n;
}

const TpkValue *tpk_dma_length(const TpkOp *op) {
  if (op->opcode != TPK_OP_DMA_START) return NULL;
  const TpkIndexPattern *sp = tpk_op_index(op, "src_index"), *dp = tpk_op_index(op, "dst_index");
  if (!sp || !dp) return NULL;
  int end = 2 + tpk_index_operands(sp) + tpk_index_operands(dp);
  return op->nin == end + 1 ? op->in[end] : NULL;
}

void tpk_index_print(TpkStr *s, const TpkIndexPattern *p) {
  for (int d = 0; d < p->rank; d++)
    tpk_str_putc(s, (unsigned)p->dim[d] < sizeof INDEX_CHARS ? INDEX_CHARS[p->dim[d]] : '?');
}

static void op_set_enum(TpkModule *m, TpkOp *op, const char *key, TpkEnumSet set, int value) {
  TpkAttr *a = attr_slot(m, op, key);
  if (a) a->kind = TPK_ATTR_ENUM, a->set = set, a->i = value;
}

void tpk_op_set_reduce_kind(TpkModule *m, TpkOp *op, TpkReduceKind kind) {
  op_set_enum(m, op, "kind", TPK_ENUM_REDUCE_KIND, (int)kind);
}

void tpk_op_set_store_mode(TpkModule *m, TpkOp *op, TpkStoreMode mode) {
  op_set_enum(m, op, "mode", TPK_ENUM_STORE_MODE, (int)mode);
}

void tpk_op_set_index(TpkModule *m, TpkOp *op, const char *key, const TpkIndexPattern *p) {
  TpkAttr *a = attr_slot(m, op, key);
  if (!a || !p) return;
  TpkIndexPattern *copy = tpk_arena_alloc(&m->arena, sizeof *copy);
  if (!copy) return;
  *copy = *p;
  a->kind = TPK_ATTR_INDEX;
  a->index = copy;
}

bool tpk_op_copy_attrs(TpkModule *m, TpkOp *to, const TpkOp *from) {
  for (int i = 0; i < from->nattr; i++) {
    const TpkAttr *a = &from->attrs[i];
    switch (a->kind) {
    case TPK_ATTR_INT: tpk_op_set_int(m, to, a->key, a->i); break;
    case TPK_ATTR_FLOAT: tpk_op_set_float(m, to, a->key, a->f); break;
    case TPK_ATTR_BOOL: tpk_op_set_bool(m, to, a->key, a->i != 0); break;
    case TPK_ATTR_STR: tpk_op_set_str(m, to, a->key, a->s); break;
    case TPK_ATTR_INTS: tpk_op_set_ints(m, to, a->key, a->n, a->ints); break;
    case TPK_ATTR_INDEX: tpk_op_set_index(m, to, a->key, a->index); break;
    case TPK_ATTR_ENUM: {
      TpkAttr *e = attr_slot(m, to, a->key);
      if (!e) return false;
      e->kind = TPK_ATTR_ENUM;
      e->set = a->set;
      e->i = a->i;
      break;
    }
    }
    if (!tpk_op_attr(to, a->key)) return false; /* the setters say nothing when memory runs out */
  }
  return true;
}

static int64_t enum_attr(const TpkOp *op, const char *key, TpkEnumSet set, int64_t dflt) {
  const TpkAttr *a = tpk_op_attr(op, key);
  return a && a->kind == TPK_ATTR_ENUM && a->set == set ? a->i : dflt;
}

TpkReduceKind tpk_op_reduce_kind(const TpkOp *op) {
  return (TpkReduceKind)enum_attr(op, "kind", TPK_ENUM_REDUCE_KIND, TPK_REDUCE_SUM);
}

TpkStoreMode tpk_op_store_mode(const TpkOp *op) {
  return (TpkStoreMode)enum_attr(op, "mode", TPK_ENUM_STORE_MODE, TPK_STORE_SET);
}

const TpkIndexPattern *tpk_op_index(const TpkOp *op, const char *key) {
  static const TpkIndexPattern NONE = {0};
  const TpkAttr *a = tpk_op_attr(op, key);
  return a && a->kind == TPK_ATTR_INDEX && a->index ? a->index : &NONE;
}

/* The kind op's signature gives attribute key ("int", "reduce_kind", ...)
 * and its length; NULL when the signature does not name key. */
static const char *signature_kind(TpkOpcode opc, const char *key, size_t *len) {
  const char *sig = (unsigned)opc < TPK_OP_COUNT ? OPS[opc].attrs : "";
  size_t klen = strlen(key);
  while (*sig) {
    if (*sig == '?') sig++;
    const char *colon = strchr(sig, ':');
    if (!colon) break;
    const char *end = strchr(colon, ',');
    if (!end) end = colon + strlen(colon);
    if ((size_t)(colon - sig) == klen && memcmp(sig, key, klen) == 0) {
      *len = (size_t)(end - colon - 1);
      return colon + 1;
    }
    sig = *end ? end + 1 : end;
  }
  return NULL;
}

static bool is_kind(const char *kind, size_t len, const char *name) { return strlen(name) == len && memcmp(kind, name, len) == 0; }

static TpkStatus set_index_text(TpkModule *m, TpkOp *op, const char *key, const char *text, TpkError *err) {
  TpkIndexPattern p = {0};
  for (const char *c = text; *c; c++) {
    const char *at = memchr(INDEX_CHARS, *c, sizeof INDEX_CHARS);
    if (!at) return tpk_error(err, TPK_ERR_PARSE, "%s \"%s\" has an invalid entry '%c' (expected t : s r g)", key, text, *c);
    if (p.rank == TPK_MAX_RANK)
      return tpk_error(err, TPK_ERR_PARSE, "%s \"%s\" has more than %d entries", key, text, TPK_MAX_RANK);
    p.dim[p.rank++] = (TpkIndexKind)(at - INDEX_CHARS);
  }
  tpk_op_set_index(m, op, key, &p);
  return TPK_OK;
}

TpkStatus tpk_op_set_text(TpkModule *m, TpkOp *op, const char *key, const char *text, TpkError *err) {
  if (!m || !op || !key || !text) return tpk_error(err, TPK_ERR_INVALID, "no attribute");
  size_t len = 0;
  const char *kind = signature_kind(op->opcode, key, &len);
  if (kind && is_kind(kind, len, "index")) return set_index_text(m, op, key, text, err);
  for (int set = 0; kind && set < TPK_ENUM_SET_COUNT; set++) {
    if (!is_kind(kind, len, ENUM_SETS[set].name)) continue;
    int value;
    if (tpk_enum_from_name((TpkEnumSet)set, text, &value)) {
      op_set_enum(m, op, key, (TpkEnumSet)set, value);
      return TPK_OK;
    }
    TpkStr names = {0};
    for (int i = 0; i < ENUM_SETS[set].count; i++) tpk_str_printf(&names, "%s%s", i ? ", " : "", ENUM_SETS[set].members[i]);
    TpkStatus st = tpk_error(err, TPK_ERR_PARSE, "%s \"%s\" is not one of %s", key, text, names.data ? names.data : "");
    tpk_str_free(&names);
    return st;
  }
  tpk_op_set_str(m, op, key, text);
  return TPK_OK;
}

const TpkValue *tpk_dot_accumulator(const TpkOp *dot) {
  return dot->opcode == TPK_OP_DOT && dot->nin == 3 ? dot->in[2] : NULL;
}

bool tpk_op_is_fused(const TpkOp *op) {
  const TpkAttr *a = op ? tpk_op_attr(op, "fused") : NULL;
  return a && a->kind == TPK_ATTR_BOOL && a->i;
}

/* ---- Convenience builders -------------------------------------------------- */

static TpkValue *build1(TpkBuilder *b, TpkOpcode opc, int nin, TpkValue *const *in, const TpkType *t) {
  TpkOp *op = tpk_build(b, opc, nin, in, 1, &t);
  return op ? &op->out[0] : NULL;
}

TpkValue *tpk_build_const_int(TpkBuilder *b, const TpkType *type, int64_t v) {
  TpkValue *r = build1(b, TPK_OP_CONST, 0, NULL, type);
  if (r) tpk_op_set_int(b->m, r->def, "value", v);
  return r;
}

TpkValue *tpk_build_const_float(TpkBuilder *b, const TpkType *type, double v) {
  TpkValue *r = build1(b, TPK_OP_CONST, 0, NULL, type);
  if (r) tpk_op_set_float(b->m, r->def, "value", v);
  return r;
}

TpkValue *tpk_build_sym(TpkBuilder *b, const char *name) {
  if (!b) return NULL;
  TpkValue *r = build1(b, TPK_OP_SYM, 0, NULL, tpk_type_scalar(b->m, TPK_I32));
  if (r) tpk_op_set_str(b->m, r->def, "name", name);
  return r;
}

TpkValue *tpk_build_unary(TpkBuilder *b, TpkOpcode opc, TpkValue *x) {
  return x ? build1(b, opc, 1, &x, x->type) : NULL;
}

TpkValue *tpk_build_binary(TpkBuilder *b, TpkOpcode opc, TpkValue *x, TpkValue *y) {
  if (!b || !x || !y || (unsigned)opc >= TPK_OP_COUNT) return NULL;
  const TpkType *t = x->type;
  if (OPS[opc].flags & TPK_OPF_COMPARE) t = tpk_type_with_dtype(b->m, t, TPK_BOOL);
  TpkValue *in[2] = {x, y};
  return build1(b, opc, 2, in, t);
}

TpkValue *tpk_build_convert(TpkBuilder *b, TpkValue *x, TpkDType to) {
  if (!b || !x) return NULL;
  return build1(b, TPK_OP_CONVERT, 1, &x, tpk_type_with_dtype(b->m, x->type, to));
}

TpkValue *tpk_build_broadcast(TpkBuilder *b, TpkValue *x, int rank, const TpkDim *const *dims) {
  if (!b || !x || !x->type) return NULL;
  return build1(b, TPK_OP_BROADCAST, 1, &x, tpk_type_tensor(b->m, x->type->dtype, rank, dims));
}

TpkValue *tpk_build_select(TpkBuilder *b, TpkValue *c, TpkValue *x, TpkValue *y) {
  if (!c || !x || !y) return NULL;
  TpkValue *in[3] = {c, x, y};
  return build1(b, TPK_OP_SELECT, 3, in, x->type);
}

TpkValue *tpk_build_yield(TpkBuilder *b, int n, TpkValue *const *vals) {
  tpk_build(b, TPK_OP_YIELD, n, vals, 0, NULL);
  return NULL; /* yield has no result */
}

/* ---- Symbols of a function ----------------------------------------------- */

/* Adds the shape symbols of d not yet in names[0..n) (up to max kept),
 * skipping f's tunables; returns the new count. */
static int add_dim_symbols(const TpkFunc *f, const TpkDim *d, const char **names, int n, int max) {
  if (!d) return n;
  if (d->kind == TPK_DIM_SYM) {
    if (tpk_func_tune(f, d->sym)) return n;
    for (int i = 0; i < n && i < max; i++)
      if (names[i] == d->sym) return n; /* interned: pointers compare */
    if (n < max) names[n] = d->sym;
    return n + 1;
  }
  return add_dim_symbols(f, d->b, names, add_dim_symbols(f, d->a, names, n, max), max);
}

typedef struct Tuning {
  const TpkTune *used[8];
  int nused;
  int64_t value[8];
  bool too_many;
} Tuning;

static bool tuning_lookup(void *ctx, const char *sym, int64_t *value) {
  const Tuning *t = ctx;
  for (int i = 0; i < t->nused; i++)
    if (strcmp(t->used[i]->name, sym) == 0) return *value = t->value[i], true;
  return false;
}

static void tunables_in(const TpkTune *tunes, int ntunes, const TpkDim *d, Tuning *t) {
  if (!d) return;
  if (d->kind != TPK_DIM_SYM) {
    tunables_in(tunes, ntunes, d->a, t);
    tunables_in(tunes, ntunes, d->b, t);
    return;
  }
  for (int i = 0; i < ntunes; i++) {
    if (strcmp(tunes[i].name, d->sym) != 0 || tunes[i].nchoices == 0) continue;
    for (int j = 0; j < t->nused; j++)
      if (t->used[j] == &tunes[i]) return;
    if (t->nused < 8) t->used[t->nused++] = &tunes[i];
    else t->too_many = true;
  }
}

bool tpk_dims_equal_when_tuned(TpkModule *m, const TpkTune *tunes, int ntunes, const TpkDim *a, const TpkDim *b,
                               char *witness, size_t witness_size) {
  if (a == b) return true;
  if (!a || !b) return false;
  Tuning t = {.nused = 0};
  tunables_in(tunes, ntunes, a, &t);
  tunables_in(tunes, ntunes, b, &t);
  int64_t combos = 1;
  for (int i = 0; i < t.nused && combos <= 4096; i++) combos *= t.used[i]->nchoices;
  if (t.nused == 0 || t.too_many || combos > 4096) return false;
  for (int64_t k = 0; k < combos; k++) {
    int64_t rest = k;
    for (int i = 0; i < t.nused; i++) {
      t.value[i] = t.used[i]->choices[rest % t.used[i]->nchoices];
      rest /= t.used[i]->nchoices;
    }
    if (tpk_dim_substitute(m, a, tuning_lookup, &t) == tpk_dim_substitute(m, b, tuning_lookup, &t)) continue;
    size_t n = 0;
    for (int i = 0; witness && i < t.nused && n < witness_size; i++)
      n += (size_t)snprintf(witness + n, witness_size - n, "%s%s=%lld", i ? ", " : "", t.used[i]->name,
                            (long long)t.value[i]);
    return false;
  }
  return true;
}

bool tpk_tune_allows(const TpkTune *t, int64_t v) {
  if (t->nchoices == 0) return v == t->value;
  for (int c = 0; c < t->nchoices; c++)
    if (t->choices[c] == v) return true;
  return false;
}

void tpk_tune_print_choices(TpkStr *s, const TpkTune *t) {
  for (int c = 0; c < t->nchoices; c++) tpk_str_printf(s, "%s%" PRId64, c ? ", " : "", t->choices[c]);
}

static void make_const(TpkModule *m, TpkOp *op) {
  tpk_op_set_operands(m, op, 0, NULL);
  op->opcode = TPK_OP_CONST;
  op->nattr = 0;
  op->attrs = NULL;
}

void tpk_op_make_const_int(TpkModule *m, TpkOp *op, int64_t v) {
  make_const(m, op);
  tpk_op_set_int(m, op, "value", v);
}

void tpk_op_make_const_float(TpkModule *m, TpkOp *op, double v) {
  make_const(m, op);
  tpk_op_set_float(m, op, "value", v);
}

const TpkTune *tpk_func_tune(const TpkFunc *f, const char *name) {
  for (int i = 0; f && name && i < f->ntunes; i++)
    if (strcmp(f->tunes[i].name, name) == 0) return &f->tunes[i];
  return NULL;
}

int tpk_func_symbols(const TpkFunc *f, const char **names, int max) {
  int n = 0;
  for (int i = 0; i < f->nparams; i++) {
    const TpkType *t = f->params[i].value ? f->params[i].value->type : NULL;
    for (int k = 0; t && k < t->rank; k++) n = add_dim_symbols(f, t->dims[k], names, n, max);
  }
  for (int i = 0; i < f->nresults; i++)
    for (int k = 0; f->results[i] && k < f->results[i]->rank; k++)
      n = add_dim_symbols(f, f->results[i]->dims[k], names, n, max);
  return n;
}

/* ---- Requirements on sizes --------------------------------------------------- */

static const struct {
  TpkOpcode cmp;
  const char *text;   /* as written in .tpk */
  const char *broken; /* how `a cmp b` fails: "a is larger than b" */
} REQUIRE_CMPS[] = {
    {TPK_OP_LE, "<=", "is larger than"}, {TPK_OP_LT, "<", "is not smaller than"},
    {TPK_OP_GE, ">=", "is smaller than"}, {TPK_OP_GT, ">", "is not larger than"},
    {TPK_OP_EQ, "==", "differs from"},    {TPK_OP_NE, "!=", "equals"},
};

const char *tpk_require_cmp_text(TpkOpcode cmp) {
  for (size_t i = 0; i < TPK_ARRAY_LEN(REQUIRE_CMPS); i++)
    if (REQUIRE_CMPS[i].cmp == cmp) return REQUIRE_CMPS[i].text;
  return NULL;
}

static void put_size(TpkStr *s, const char *name, int64_t v) {
  if (name) tpk_str_printf(s, "%s = ", name);
  tpk_str_printf(s, "%lld", (long long)v);
}

bool tpk_require_holds(TpkOpcode cmp, const char *lhs, int64_t a, const char *rhs, int64_t b, TpkStr *s) {
  bool holds;
  switch (cmp) {
  case TPK_OP_LE: holds = a <= b; break;
  case TPK_OP_LT: holds = a < b; break;
  case TPK_OP_GE: holds = a >= b; break;
  case TPK_OP_GT: holds = a > b; break;
  case TPK_OP_EQ: holds = a == b; break;
  case TPK_OP_NE: holds = a != b; break;
  default: holds = false; break;
  }
  if (holds) return true;
  const char *broken = "is not comparable with";
  for (size_t i = 0; i < TPK_ARRAY_LEN(REQUIRE_CMPS); i++)
    if (REQUIRE_CMPS[i].cmp == cmp) broken = REQUIRE_CMPS[i].broken;
  put_size(s, lhs, a);
  tpk_str_printf(s, " %s ", broken);
  put_size(s, rhs, b);
  return false;
}

/* A side's name in messages: its text unless it is a constant. */
static const char *side_name(TpkStr *buf, const TpkDim *d) {
  if (d->kind == TPK_DIM_CONST) return NULL;
  tpk_dim_print(buf, d);
  return buf->data ? buf->data : "?";
}

TpkStatus tpk_require_check(const TpkFunc *f, const TpkRequire *r, TpkSymLookup lookup, void *ctx, TpkError *err) {
  const char *cmp = tpk_require_cmp_text(r->cmp);
  if (!cmp)
    return tpk_error(err, TPK_ERR_INTERNAL, "kernel '%s': requirement %d is not a comparison", f->name,
                     (int)(r - f->requires));
  int64_t a, b;
  bool known = tpk_dim_eval(r->lhs, lookup, ctx, &a) && tpk_dim_eval(r->rhs, lookup, ctx, &b);
  TpkStr s = {0}, ln = {0}, rn = {0};
  tpk_str_printf(&s, "kernel '%s': ", f->name);
  if (known && tpk_require_holds(r->cmp, side_name(&ln, r->lhs), a, side_name(&rn, r->rhs), b, &s)) {
    tpk_str_free(&s), tpk_str_free(&ln), tpk_str_free(&rn);
    return TPK_OK;
  }
  if (!known) tpk_str_puts(&s, "a size it requires is unbound or does not compute");
  tpk_str_puts(&s, " (it requires ");
  tpk_dim_print(&s, r->lhs);
  tpk_str_printf(&s, " %s ", cmp);
  tpk_dim_print(&s, r->rhs);
  if (r->loc.line) tpk_str_printf(&s, ", line %d", r->loc.line);
  tpk_str_putc(&s, ')');
  tpk_error(err, TPK_ERR_INVALID, "%s", s.data ? s.data : "a requirement does not hold");
  tpk_str_free(&s), tpk_str_free(&ln), tpk_str_free(&rn);
  return TPK_ERR_INVALID;
}

TpkStatus tpk_func_check_requires(const TpkFunc *f, TpkSymLookup lookup, void *ctx, TpkError *err) {
  for (int i = 0; i < f->nrequires; i++) {
    TpkStatus st = tpk_require_check(f, &f->requires[i], lookup, ctx, err);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

const TpkOp *tpk_index_vector_load(const TpkValue *v) {
  const TpkOp *d = v->def;
  if (!d || d->opcode != TPK_OP_LOAD || v->type->rank != 1 || d->in[0]->type->rank != 1) return NULL;
  const TpkIndexPattern *p = tpk_op_index(d, "index");
  return p->rank == 1 && (p->dim[0] == TPK_INDEX_TILE || p->dim[0] == TPK_INDEX_RANGE) ? d : NULL;
}
