/*
 * hash.c — the structural hash of a function (tpk_func_hash), the key the
 * compilation cache and the tuning tables use for a kernel, a fused cluster
 * or a compiled graph.
 *
 * It walks the function once, without printing, and feeds a sequence of
 * 64-bit words to two chains, lo = mix(lo ^ word) and hi = mix(hi * K +
 * word), from different seeds: 128 bits, because a compilation cache that
 * took one function's code for another's would run the wrong kernel
 * silently (host/jit.c keys its files by SHA-256 for the same reason; a
 * cryptographic hash here would cost more than printing). Each step is a
 * bijection of the chain (the murmur finaliser is one), so two sequences of
 * equal length that differ in one word never collide; every list is
 * preceded by its length, so the sequence read back is unambiguous. Not
 * built to resist crafted collisions: the IR a process hashes is its own.
 * What goes in:
 *   - the function's kind, its parameters' roles, zero flags and types, its
 *     result types, tunables (name, bound, value, choices), requirements and
 *     backward kernel's name;
 *   - per block: its arguments' types and its ops; per op: its opcode's name,
 *     operands as the numbers of the values they use (values are numbered in
 *     definition order: parameters, then results and region arguments as the
 *     walk meets them), result types, attributes sorted by key, regions.
 * What stays out: value names and hints, parameter names, locations, the
 * module, and the function's own name (ir/README.md, "Structural hash").
 * Types and dims are hashed by structure (symbol names, constants,
 * operators), never by the interned pointers, and opcodes, dtypes and
 * closed-set members by their text names, so the hash is the same in every
 * process and module and does not move when the op table grows.
 */
#include "ir/ir.h"

#include <string.h>

enum {
  HASH_VERSION = 1, /* bump when what goes in changes */
  TYPE_CACHE = 64   /* types recently hashed (a function uses few) */
};

typedef struct Hasher {
  uint64_t lo, hi;
  TpkPtrMap numbers; /* value -> its number + 1 */
  uintptr_t next;
  bool failed;
  /* a type's hash by its interned pointer: the pointer finds the slot, only
   * its hash goes into the chains, so the result does not depend on the cache */
  const TpkType *cached[TYPE_CACHE];
  uint64_t cached_lo[TYPE_CACHE], cached_hi[TYPE_CACHE];
} Hasher;

/* Any odd multiplier keeps hi's step a bijection; the golden ratio's. */
#define HI_MULTIPLIER UINT64_C(0x9e3779b97f4a7c15)
#define HI_SEED UINT64_C(0x6a09e667f3bcc908) /* SHA-512's first word: any other than lo's */

static void put(Hasher *s, uint64_t word) {
  s->lo = tpk_hash_mix(s->lo ^ word);
  s->hi = tpk_hash_mix(s->hi * HI_MULTIPLIER + word);
}

/* Length, then the bytes eight at a time, little-endian whatever the host. */
static void put_bytes(Hasher *s, const char *p, size_t n) {
  put(s, n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    for (size_t j = 0; j < 8 && i + j < n; j++) w |= (uint64_t)(unsigned char)p[i + j] << (8 * j);
    put(s, w);
  }
}

/* NULL (no name) differs from every string, "" included. */
static void put_str(Hasher *s, const char *str) {
  if (!str) {
    put(s, UINT64_MAX);
    return;
  }
  put_bytes(s, str, strlen(str));
}

static void put_dim(Hasher *s, const TpkDim *d) {
  put(s, d->kind);
  switch (d->kind) {
  case TPK_DIM_CONST: put(s, (uint64_t)d->value); break;
  case TPK_DIM_SYM: put_str(s, d->sym); break;
  default:
    put_dim(s, d->a);
    put_dim(s, d->b);
    break;
  }
}

static void put_type_fields(Hasher *s, const TpkType *t) {
  put(s, t->kind);
  switch (t->kind) {
  case TPK_TYPE_REF:
  case TPK_TYPE_TENSOR:
    if (t->kind == TPK_TYPE_REF) put(s, t->space);
    put_str(s, tpk_dtype_info(t->dtype)->name);
    put(s, (uint64_t)t->rank);
    for (int i = 0; i < t->rank; i++) put_dim(s, t->dims[i]);
    break;
  case TPK_TYPE_TILE: put_dim(s, t->block); break;
  case TPK_TYPE_DMA: break;
  }
}

/* A type goes in as two words, its fields hashed from the seeds. */
static void put_type(Hasher *s, const TpkType *t) {
  size_t slot = (size_t)(tpk_hash_mix((uint64_t)(uintptr_t)t) % TYPE_CACHE);
  if (s->cached[slot] != t) {
    Hasher sub = {.lo = TPK_HASH_SEED, .hi = HI_SEED};
    put_type_fields(&sub, t);
    s->cached[slot] = t;
    s->cached_lo[slot] = sub.lo;
    s->cached_hi[slot] = sub.hi;
  }
  put(s, s->cached_lo[slot]);
  put(s, s->cached_hi[slot]);
}

static void number(Hasher *s, const TpkValue *v) {
  if (!tpk_ptrmap_put(&s->numbers, v, (void *)++s->next)) s->failed = true;
}

static void put_value_ref(Hasher *s, const TpkValue *v) {
  void *n = NULL;
  /* a value from outside the walk (IR the verifier would reject): all alike */
  put(s, tpk_ptrmap_get(&s->numbers, v, &n) ? (uint64_t)(uintptr_t)n : 0);
}

static void put_attr(Hasher *s, const TpkAttr *a) {
  put_str(s, a->key);
  put(s, a->kind);
  switch (a->kind) {
  case TPK_ATTR_INT:
  case TPK_ATTR_BOOL: put(s, (uint64_t)a->i); break;
  case TPK_ATTR_FLOAT: {
    /* the bits, -0.0 apart from 0.0; every NaN prints and reads as one */
    double f = a->f != a->f ? __builtin_nan("") : a->f;
    uint64_t bits;
    memcpy(&bits, &f, sizeof bits);
    put(s, bits);
    break;
  }
  case TPK_ATTR_STR: put_str(s, a->s); break;
  case TPK_ATTR_INTS:
    put(s, (uint64_t)a->n);
    for (int i = 0; i < a->n; i++) put(s, (uint64_t)a->ints[i]);
    break;
  case TPK_ATTR_ENUM:
    put_str(s, tpk_enum_set_name(a->set));
    put_str(s, tpk_enum_name(a->set, (int)a->i));
    break;
  case TPK_ATTR_INDEX: {
    static const char KINDS[] = "t:srg"; /* the text form's characters */
    put(s, (uint64_t)a->index->rank);
    for (int i = 0; i < a->index->rank; i++) put(s, (unsigned char)KINDS[a->index->dim[i]]);
    break;
  }
  }
}

/* Attributes in key order: the builder and the parser set them in any
 * order, the printer sorts them into the signature's. */
static void put_attrs(Hasher *s, const TpkOp *op) {
  put(s, (uint64_t)op->nattr);
  bool done[op->nattr ? op->nattr : 1];
  memset(done, 0, sizeof done);
  for (int k = 0; k < op->nattr; k++) {
    int next = -1;
    for (int i = 0; i < op->nattr; i++)
      if (!done[i] && (next < 0 || strcmp(op->attrs[i].key, op->attrs[next].key) < 0)) next = i;
    done[next] = true;
    put_attr(s, &op->attrs[next]);
  }
}

static void put_block(Hasher *s, const TpkBlock *b);

static void put_op(Hasher *s, const TpkOp *op) {
  put_str(s, tpk_op_info(op->opcode)->name);
  put(s, (uint64_t)op->nin);
  for (int i = 0; i < op->nin; i++) put_value_ref(s, op->in[i]);
  put(s, (uint64_t)op->nout);
  for (int i = 0; i < op->nout; i++) {
    put_type(s, op->out[i].type);
    number(s, &op->out[i]);
  }
  put_attrs(s, op);
  put(s, (uint64_t)op->nregion);
  for (int r = 0; r < op->nregion; r++) put_block(s, op->regions[r]);
}

static void put_block(Hasher *s, const TpkBlock *b) {
  put(s, (uint64_t)b->nargs);
  for (int i = 0; i < b->nargs; i++) {
    put_type(s, b->args[i]->type);
    number(s, b->args[i]);
  }
  uint64_t nops = 0;
  for (const TpkOp *op = b->first; op; op = op->next) {
    put_op(s, op);
    nops++;
  }
  put(s, nops); /* ends the list: ops are variable-length records */
}

TpkFuncHash tpk_func_hash(const TpkFunc *f) {
  Hasher s = {.lo = TPK_HASH_SEED, .hi = HI_SEED};
  put_str(&s, "tpk func hash");
  put(&s, HASH_VERSION);
  put(&s, f->is_kernel);
  put(&s, (uint64_t)f->nparams);
  for (int i = 0; i < f->nparams; i++) {
    put(&s, f->params[i].role);
    put(&s, f->params[i].zero_init);
    /* only when declared, so the hashes of kernels without one (tuned.tsv
     * rows, caches on disk) stay what they were */
    if (f->params[i].nsample) put(&s, (uint64_t)f->params[i].nsample * 2 + f->params[i].sample_range);
    for (int j = 0; j < f->params[i].nsample; j++) put(&s, (uint64_t)f->params[i].sample[j]);
  }
  put(&s, (uint64_t)f->nresults);
  for (int i = 0; i < f->nresults; i++) put_type(&s, f->results[i]);
  put(&s, (uint64_t)f->ntunes);
  for (int i = 0; i < f->ntunes; i++) {
    const TpkTune *t = &f->tunes[i];
    put_str(&s, t->name);
    put(&s, t->bound);
    put(&s, (uint64_t)t->value);
    put(&s, (uint64_t)t->nchoices);
    for (int j = 0; j < t->nchoices; j++) put(&s, (uint64_t)t->choices[j]);
  }
  put(&s, (uint64_t)f->nrequires);
  for (int i = 0; i < f->nrequires; i++) {
    put_str(&s, tpk_op_info(f->requires[i].cmp)->name);
    put_dim(&s, f->requires[i].lhs);
    put_dim(&s, f->requires[i].rhs);
  }
  put_str(&s, f->backward);
  /* the body's arguments are the parameters: their types are hashed there */
  put_block(&s, f->body);
  tpk_ptrmap_free(&s.numbers);
  if (s.failed) return (TpkFuncHash){0, 0};
  return (TpkFuncHash){s.lo ? s.lo : 1, s.hi};
}

bool tpk_func_hash_equal(TpkFuncHash a, TpkFuncHash b) { return a.lo == b.lo && a.hi == b.hi; }
