/*
 * clone.c — copying a function into another module, substituting symbols.
 *
 * Specialisation starts here: the IR a program was loaded as is never
 * changed; each specialisation clones it into a module of its own, with the
 * sizes and tunables it binds substituted into every dimension on the way
 * (lower/bind.c does the rest). Types and dims are re-interned in the
 * destination, names and attributes copied, so the clone outlives nothing
 * of the original.
 */
#include "ir/ir.h"

#include <stdio.h>
#include <string.h>

typedef struct Cloner {
  TpkModule *dst;
  TpkSymLookup subst;
  void *ctx;
  TpkPtrMap map; /* source value -> cloned value */
  TpkError *err;
  bool failed;
} Cloner;

static bool clone_fail(Cloner *c, TpkLoc loc, const char *what) {
  if (!c->failed) tpk_error_at(c->err, TPK_ERR_INVALID, loc.line, loc.col, "%s", what);
  c->failed = true;
  return false;
}

static const TpkDim *clone_dim(Cloner *c, const TpkDim *d) {
  int64_t v;
  switch (d->kind) {
  case TPK_DIM_CONST: return tpk_dim_const(c->dst, d->value);
  case TPK_DIM_SYM:
    if (c->subst && c->subst(c->ctx, d->sym, &v)) return tpk_dim_const(c->dst, v);
    return tpk_dim_sym(c->dst, tpk_module_intern(c->dst, d->sym, strlen(d->sym)));
  default: {
    const TpkDim *a = clone_dim(c, d->a), *b = a ? clone_dim(c, d->b) : NULL;
    return a && b ? tpk_dim_binary(c->dst, d->kind, a, b) : NULL;
  }
  }
}

/* The type in the destination, or NULL when a size does not fold (it
 * overflows, divides by zero) or is not positive once bound. */
static const TpkType *clone_type(Cloner *c, const TpkType *t, TpkLoc loc, const char *what) {
  if (!t) return NULL;
  const TpkDim *dims[TPK_MAX_RANK];
  const TpkType *r = NULL;
  int64_t v;
  for (int i = 0; i < t->rank; i++) {
    dims[i] = clone_dim(c, t->dims[i]);
    if (!dims[i]) {
      TpkStr s = {0};
      tpk_dim_print(&s, t->dims[i]);
      char msg[512];
      snprintf(msg, sizeof msg, "the size %s of %s overflows or divides by zero with these sizes and tunables",
               s.data ? s.data : "?", what);
      tpk_str_free(&s);
      return clone_fail(c, loc, msg), NULL;
    }
    if (tpk_dim_is_const(dims[i], &v) && v < 0) {
      TpkStr s = {0};
      tpk_dim_print(&s, t->dims[i]);
      char msg[512];
      snprintf(msg, sizeof msg, "the size %s of %s is %lld with these sizes and tunables; sizes cannot be negative",
               s.data ? s.data : "?", what, (long long)v);
      tpk_str_free(&s);
      return clone_fail(c, loc, msg), NULL;
    }
  }
  switch (t->kind) {
  case TPK_TYPE_TENSOR: r = tpk_type_tensor(c->dst, t->dtype, t->rank, dims); break;
  case TPK_TYPE_REF: r = tpk_type_ref(c->dst, t->dtype, t->rank, dims, t->space); break;
  case TPK_TYPE_DMA: r = tpk_type_dma(c->dst); break;
  case TPK_TYPE_TILE: {
    const TpkDim *b = clone_dim(c, t->block);
    if (b && tpk_dim_is_const(b, &v) && v <= 0) {
      char msg[256];
      snprintf(msg, sizeof msg, "a tile's block size is %lld with these tunables; it must be positive", (long long)v);
      return clone_fail(c, loc, msg), NULL;
    }
    r = b ? tpk_type_tile_dim(c->dst, b) : NULL;
    break;
  }
  }
  if (!r) clone_fail(c, loc, "out of memory cloning the IR");
  return r;
}

static const char *clone_str(Cloner *c, const char *s) {
  return s ? tpk_module_intern(c->dst, s, strlen(s)) : NULL;
}

static bool clone_attrs(Cloner *c, TpkOp *to, const TpkOp *from) {
  return tpk_op_copy_attrs(c->dst, to, from) || clone_fail(c, from->loc, "out of memory cloning the IR");
}

static TpkValue *mapped(Cloner *c, const TpkValue *v) {
  void *r = NULL;
  tpk_ptrmap_get(&c->map, v, &r);
  return r;
}

static bool map_value(Cloner *c, const TpkValue *from, TpkValue *to) {
  to->name = clone_str(c, from->name);
  return tpk_ptrmap_put(&c->map, from, to) || clone_fail(c, (TpkLoc){0}, "out of memory cloning the IR");
}

static bool clone_block(Cloner *c, TpkBlock *to, const TpkBlock *from);

static bool clone_op(Cloner *c, TpkBlock *into, const TpkOp *op) {
  TpkValue *in[op->nin ? op->nin : 1];
  const TpkType *out[op->nout ? op->nout : 1];
  for (int i = 0; i < op->nin; i++)
    if (!(in[i] = mapped(c, op->in[i]))) return clone_fail(c, op->loc, "internal error: an operand is used before its definition");
  for (int i = 0; i < op->nout; i++)
    if (!(out[i] = clone_type(c, op->out[i].type, op->loc, "a value"))) return false;
  TpkBuilder b = {.m = c->dst, .block = into, .loc = op->loc};
  TpkOp *to = tpk_build(&b, op->opcode, op->nin, in, op->nout, out);
  if (!to) return clone_fail(c, op->loc, "out of memory cloning the IR");
  if (!clone_attrs(c, to, op)) return false;
  for (int i = 0; i < op->nout; i++)
    if (!map_value(c, &op->out[i], &to->out[i])) return false;
  for (int r = 0; r < op->nregion; r++)
    if (!clone_block(c, to->regions[r], op->regions[r])) return false;
  return true;
}

static bool clone_block(Cloner *c, TpkBlock *to, const TpkBlock *from) {
  TpkLoc loc = from->parent ? from->parent->loc : (TpkLoc){0};
  /* every argument first: then the values are where they stay (a
   * function's body has its parameters already) */
  for (int i = to->nargs; i < from->nargs; i++) {
    const TpkType *t = clone_type(c, from->args[i]->type, loc, "a loop value");
    if (!t || !tpk_block_add_arg(c->dst, to, t, NULL)) return t ? clone_fail(c, loc, "out of memory cloning the IR") : false;
  }
  for (int i = 0; i < from->nargs; i++)
    if (!map_value(c, from->args[i], to->args[i])) return false; /* parameters again: harmless */
  for (const TpkOp *op = from->first; op; op = op->next)
    if (!clone_op(c, to, op)) return false;
  return true;
}

TpkFunc *tpk_func_clone(TpkModule *dst, const TpkFunc *f, TpkSymLookup subst, void *ctx, TpkError *err) {
  Cloner c = {.dst = dst, .subst = subst, .ctx = ctx, .err = err};
  int n = f->nparams;
  const TpkType *types[n ? n : 1];
  const char *names[n ? n : 1];
  TpkParamRole roles[n ? n : 1];
  TpkFunc *g = NULL;
  for (int i = 0; i < n; i++) {
    char what[160];
    snprintf(what, sizeof what, "'%s'", f->params[i].name ? f->params[i].name : "?");
    types[i] = clone_type(&c, f->params[i].value->type, f->params[i].loc, what);
    names[i] = f->params[i].name;
    roles[i] = f->params[i].role;
    if (!types[i]) goto done;
  }
  g = tpk_func_new(dst, f->name, f->is_kernel, n, types, names, roles);
  if (!g) {
    clone_fail(&c, f->loc, "out of memory cloning the IR");
    goto done;
  }
  g->loc = f->loc;
  g->backward = clone_str(&c, f->backward);
  if (f->backward && !g->backward) {
    clone_fail(&c, f->loc, "out of memory cloning the IR");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    g->params[i].zero_init = f->params[i].zero_init;
    g->params[i].nsample = f->params[i].nsample;
    g->params[i].sample_range = f->params[i].sample_range;
    if (f->params[i].nsample) {
      int64_t *vs = tpk_arena_alloc(&dst->arena, (size_t)f->params[i].nsample * sizeof *vs);
      if (!vs) {
        clone_fail(&c, f->loc, "out of memory cloning the IR");
        goto done;
      }
      memcpy(vs, f->params[i].sample, (size_t)f->params[i].nsample * sizeof *vs);
      g->params[i].sample = vs;
    }
    g->params[i].loc = f->params[i].loc;
    if (!map_value(&c, f->params[i].value, g->params[i].value)) goto done;
  }
  g->nresults = f->nresults;
  g->results = tpk_arena_alloc(&dst->arena, (size_t)(f->nresults ? f->nresults : 1) * sizeof *g->results);
  g->tunes = tpk_arena_alloc(&dst->arena, (size_t)(f->ntunes ? f->ntunes : 1) * sizeof *g->tunes);
  if (!g->results || !g->tunes) {
    clone_fail(&c, f->loc, "out of memory cloning the IR");
    goto done;
  }
  for (int i = 0; i < f->nresults; i++)
    if (!(g->results[i] = clone_type(&c, f->results[i], f->loc, "a result"))) goto done;
  g->nrequires = f->nrequires;
  g->requires = tpk_arena_alloc(&dst->arena, (size_t)(f->nrequires ? f->nrequires : 1) * sizeof *g->requires);
  if (!g->requires) {
    clone_fail(&c, f->loc, "out of memory cloning the IR");
    goto done;
  }
  for (int i = 0; i < f->nrequires; i++) {
    const TpkRequire *r = &f->requires[i];
    const TpkDim *lhs = clone_dim(&c, r->lhs), *rhs = lhs ? clone_dim(&c, r->rhs) : NULL;
    if (!lhs || !rhs) {
      clone_fail(&c, r->loc, "a size a requirement compares overflows or divides by zero with these sizes");
      goto done;
    }
    g->requires[i] = (TpkRequire){.cmp = r->cmp, .lhs = lhs, .rhs = rhs, .loc = r->loc};
  }
  g->ntunes = f->ntunes;
  for (int i = 0; i < f->ntunes; i++) {
    const TpkTune *t = &f->tunes[i];
    int64_t *choices = tpk_arena_alloc(&dst->arena, (size_t)(t->nchoices ? t->nchoices : 1) * sizeof *choices);
    if (!choices) {
      clone_fail(&c, f->loc, "out of memory cloning the IR");
      goto done;
    }
    if (t->nchoices) memcpy(choices, t->choices, (size_t)t->nchoices * sizeof *choices);
    g->tunes[i] = (TpkTune){.name = clone_str(&c, t->name), .bound = t->bound, .value = t->value,
                            .nchoices = t->nchoices, .choices = choices};
    int64_t v;
    if (!t->bound && subst && subst(ctx, t->name, &v)) g->tunes[i].bound = true, g->tunes[i].value = v;
  }
  clone_block(&c, g->body, f->body);
done:
  tpk_ptrmap_free(&c.map);
  return c.failed ? NULL : g;
}
