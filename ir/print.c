/*
 * print.c — the IR's text form (grammar in ir.h and ir/README.md).
 *
 * The output is deterministic and parse.c reads it back to the same IR,
 * so print -> parse -> print is byte-identical: value names are assigned in
 * print order, dims and attributes print in canonical order, floats print
 * in the shortest form that reads back to the same double.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* ---- Dims and types -------------------------------------------------------- */

/* Binding strength: 1 a sum, 2 a product, 3 an atom. */
static int dim_level(const TpkDim *d) {
  switch (d->kind) {
  case TPK_DIM_ADD:
  case TPK_DIM_SUB: return 1;
  case TPK_DIM_MUL:
  case TPK_DIM_DIV: return 2;
  default: return 3;
  }
}

/* Print d where the context needs binding strength `need`; operators are
 * left-associative, so a right operand needs one level more. */
static void dim_print(TpkStr *s, const TpkDim *d, int need) {
  if (!d) {
    tpk_str_puts(s, "?");
    return;
  }
  bool paren = dim_level(d) < need;
  if (paren) tpk_str_putc(s, '(');
  switch (d->kind) {
  case TPK_DIM_CONST: tpk_str_printf(s, "%" PRId64, d->value); break;
  case TPK_DIM_SYM: tpk_str_puts(s, d->sym); break;
  case TPK_DIM_CDIV:
    tpk_str_puts(s, "cdiv(");
    dim_print(s, d->a, 0);
    tpk_str_putc(s, ',');
    dim_print(s, d->b, 0);
    tpk_str_putc(s, ')');
    break;
  case TPK_DIM_ADD:
    dim_print(s, d->a, 1);
    /* x + (-3) is canonical for x - 3 (see tpk_dim_binary) and prints so */
    if (d->b && d->b->kind == TPK_DIM_CONST && d->b->value < 0 && d->b->value != INT64_MIN) {
      tpk_str_printf(s, "-%" PRId64, -d->b->value);
    } else {
      tpk_str_putc(s, '+');
      dim_print(s, d->b, 2);
    }
    break;
  case TPK_DIM_SUB:
    dim_print(s, d->a, 1);
    tpk_str_putc(s, '-');
    dim_print(s, d->b, 2);
    break;
  case TPK_DIM_MUL:
  case TPK_DIM_DIV:
    dim_print(s, d->a, 2);
    tpk_str_putc(s, d->kind == TPK_DIM_MUL ? '*' : '/');
    dim_print(s, d->b, 3);
    break;
  }
  if (paren) tpk_str_putc(s, ')');
}

void tpk_dim_print(TpkStr *s, const TpkDim *d) { dim_print(s, d, 0); }

void tpk_shape_print(TpkStr *s, int rank, const TpkDim *const *dims) {
  tpk_str_putc(s, '[');
  for (int i = 0; i < rank; i++) {
    if (i) tpk_str_putc(s, ',');
    tpk_dim_print(s, dims[i]);
  }
  tpk_str_putc(s, ']');
}

static void value_type_print(TpkStr *s, const TpkType *t) {
  tpk_str_puts(s, tpk_dtype_name(t->dtype));
  if (t->rank > 0) tpk_shape_print(s, t->rank, t->dims);
}

void tpk_type_print(TpkStr *s, const TpkType *t) {
  static const char *const SPACES[] = {"hbm", "vmem", "smem"};
  if (!t) {
    tpk_str_puts(s, "<null>");
    return;
  }
  switch (t->kind) {
  case TPK_TYPE_TENSOR: value_type_print(s, t); break;
  case TPK_TYPE_REF:
    tpk_str_puts(s, "ref<");
    value_type_print(s, t);
    if (t->space != TPK_MEM_HBM) tpk_str_printf(s, ", %s", (unsigned)t->space < 3 ? SPACES[t->space] : "?");
    tpk_str_putc(s, '>');
    break;
  case TPK_TYPE_TILE:
    tpk_str_puts(s, "tile<");
    tpk_dim_print(s, t->block);
    tpk_str_putc(s, '>');
    break;
  case TPK_TYPE_DMA: tpk_str_puts(s, "dma"); break;
  }
}

/* ---- Attribute values ------------------------------------------------------ */

/* The shortest %g form that reads back to the same double, always marked
 * as a float (a `.`, an exponent, or inf/nan). */
static void float_print(TpkStr *s, double f) {
  if (isnan(f)) {
    tpk_str_puts(s, "nan");
    return;
  }
  if (isinf(f)) {
    tpk_str_puts(s, f > 0 ? "inf" : "-inf");
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (strtod(buf, NULL) == f) break;
  }
  tpk_str_puts(s, buf);
  if (!strpbrk(buf, ".e")) tpk_str_puts(s, ".0");
}

static void string_print(TpkStr *s, const char *text) {
  tpk_str_putc(s, '"');
  for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      tpk_str_printf(s, "\\%c", *p);
    else if (*p == '\n')
      tpk_str_puts(s, "\\n");
    else if (*p == '\t')
      tpk_str_puts(s, "\\t");
    else if (*p < 0x20 || *p == 0x7f)
      tpk_str_printf(s, "\\x%02x", *p);
    else
      tpk_str_putc(s, (char)*p);
  }
  tpk_str_putc(s, '"');
}

static void attr_print(TpkStr *s, const TpkAttr *a) {
  tpk_str_printf(s, "%s=", a->key);
  switch (a->kind) {
  case TPK_ATTR_INT: tpk_str_printf(s, "%" PRId64, a->i); break;
  case TPK_ATTR_FLOAT: float_print(s, a->f); break;
  case TPK_ATTR_BOOL: tpk_str_puts(s, a->i ? "true" : "false"); break;
  case TPK_ATTR_STR: string_print(s, a->s); break;
  case TPK_ATTR_INTS:
    tpk_str_putc(s, '[');
    for (int i = 0; i < a->n; i++) tpk_str_printf(s, "%s%" PRId64, i ? ", " : "", a->ints[i]);
    tpk_str_putc(s, ']');
    break;
  case TPK_ATTR_ENUM: { /* closed sets print as the strings they are read from */
    const char *name = a->i >= 0 && a->i <= INT32_MAX ? tpk_enum_name(a->set, (int)a->i) : NULL;
    string_print(s, name ? name : "?");
    break;
  }
  case TPK_ATTR_INDEX:
    tpk_str_putc(s, '"');
    if (a->index) tpk_index_print(s, a->index);
    tpk_str_putc(s, '"');
    break;
  }
}

/* Attributes in the order of the op's signature, then any others in the
 * order they were set: the same op prints the same however it was built. */
static void attrs_print(TpkStr *s, const TpkOp *op) {
  if (op->nattr == 0) return;
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  const char *sig = info ? info->attrs : "";
  bool first = true;
  enum { MAX_ATTRS = 64 };
  bool done[MAX_ATTRS] = {0};
  tpk_str_puts(s, " {");
  while (*sig) {
    if (*sig == '?') sig++;
    const char *colon = strchr(sig, ':');
    if (!colon) break;
    size_t n = (size_t)(colon - sig);
    for (int i = 0; i < op->nattr && i < MAX_ATTRS; i++)
      if (!done[i] && strlen(op->attrs[i].key) == n && memcmp(op->attrs[i].key, sig, n) == 0) {
        if (!first) tpk_str_puts(s, ", ");
        attr_print(s, &op->attrs[i]);
        done[i] = true;
        first = false;
      }
    const char *comma = strchr(colon, ',');
    sig = comma ? comma + 1 : colon + strlen(colon);
  }
  for (int i = 0; i < op->nattr; i++)
    if (i >= MAX_ATTRS || !done[i]) {
      if (!first) tpk_str_puts(s, ", ");
      attr_print(s, &op->attrs[i]);
      first = false;
    }
  tpk_str_putc(s, '}');
}

/* ---- Values and ops -------------------------------------------------------- */

typedef struct Printer {
  TpkStr *out;
  TpkArena arena;
  TpkPtrMap names; /* TpkValue* -> its name (without %) */
  TpkStrSet used;  /* names taken in this function */
  int counter;
} Printer;

/* A hint is printed as is when the parser reads it back as the same name. */
static bool hint_ok(const char *h) {
  if (!h || !(*h == '_' || (*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z'))) return false;
  for (const char *p = h; *p; p++)
    if (!(*p == '_' || *p == '.' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
      return false;
  return true;
}

static const char *value_name(Printer *p, const TpkValue *v) {
  void *known = NULL;
  if (tpk_ptrmap_get(&p->names, v, &known)) return known;
  const char *name;
  char buf[32];
  const char *cand;
  if (hint_ok(v->name)) {
    cand = v->name;
    for (int k = 1; cand && tpk_strset_has(&p->used, cand, strlen(cand)); k++)
      cand = tpk_arena_printf(&p->arena, "%s.%d", v->name, k);
  } else {
    /* counters are digits only, never clashing with a hint */
    snprintf(buf, sizeof buf, "%d", p->counter++);
    cand = buf;
  }
  name = cand ? tpk_strset_add(&p->used, cand, strlen(cand)) : NULL;
  if (!name || !tpk_ptrmap_put(&p->names, v, (void *)name)) return "?";
  return name;
}

static void value_print(Printer *p, const TpkValue *v) {
  tpk_str_putc(p->out, '%');
  tpk_str_puts(p->out, v ? value_name(p, v) : "<null>");
}

static void indent(TpkStr *s, int depth) {
  for (int i = 0; i < depth; i++) tpk_str_puts(s, "  ");
}

static void loc_print(TpkStr *s, TpkLoc loc) {
  if (loc.line > 0) tpk_str_printf(s, " loc(%d:%d)", loc.line, loc.col);
}

static void block_print(Printer *p, const TpkBlock *b, int depth);

static void op_print(Printer *p, const TpkOp *op, int depth) {
  TpkStr *s = p->out;
  const TpkOpInfo *info = tpk_op_info(op->opcode);
  indent(s, depth);
  for (int i = 0; i < op->nout; i++) {
    if (i) tpk_str_puts(s, ", ");
    value_print(p, &op->out[i]);
  }
  if (op->nout) tpk_str_puts(s, " = ");
  tpk_str_puts(s, info ? info->name : "?");
  for (int i = 0; i < op->nin; i++) {
    tpk_str_puts(s, i ? ", " : " ");
    value_print(p, op->in[i]);
  }
  attrs_print(s, op);
  for (int i = 0; i < op->nout; i++) {
    tpk_str_puts(s, i ? ", " : " : ");
    tpk_type_print(s, op->out[i].type);
  }
  loc_print(s, op->loc);
  for (int r = 0; r < op->nregion; r++) {
    tpk_str_puts(s, " {\n"); /* a second region follows the first's `}` */
    block_print(p, op->regions[r], depth);
    indent(s, depth);
    tpk_str_putc(s, '}');
  }
  tpk_str_putc(s, '\n');
}

/* A region: its arguments at the owner's depth, its ops one deeper. */
static void block_print(Printer *p, const TpkBlock *b, int depth) {
  if (!b) return;
  if (b->nargs) {
    indent(p->out, depth);
    tpk_str_puts(p->out, "^(");
    for (int i = 0; i < b->nargs; i++) {
      if (i) tpk_str_puts(p->out, ", ");
      value_print(p, b->args[i]);
      tpk_str_puts(p->out, ": ");
      tpk_type_print(p->out, b->args[i]->type);
    }
    tpk_str_puts(p->out, "):\n");
  }
  for (const TpkOp *op = b->first; op; op = op->next) op_print(p, op, depth + 1);
}

static void func_print(TpkStr *out, const TpkFunc *f) {
  static const char *const ROLES[] = {"", "out ", "inout "};
  Printer p = {.out = out};
  tpk_arena_init(&p.arena, 0);
  p.names = (TpkPtrMap){.arena = &p.arena};
  p.used = (TpkStrSet){.arena = &p.arena};

  tpk_str_printf(out, "%s @%s(", f->is_kernel ? "kernel" : "func", f->name ? f->name : "_");
  for (int i = 0; i < f->nparams; i++) {
    const TpkParam *prm = &f->params[i];
    if (i) tpk_str_puts(out, ", ");
    value_print(&p, prm->value);
    tpk_str_puts(out, ": ");
    tpk_str_puts(out, (unsigned)prm->role < 3 ? ROLES[prm->role] : "");
    if (prm->zero_init) tpk_str_puts(out, "zero ");
    tpk_type_print(out, prm->value ? prm->value->type : NULL);
    if (prm->nsample) {
      tpk_str_puts(out, prm->sample_range ? " in range(" : " in [");
      for (int j = 0; j < prm->nsample; j++) tpk_str_printf(out, "%s%" PRId64, j ? ", " : "", prm->sample[j]);
      tpk_str_putc(out, prm->sample_range ? ')' : ']');
    }
    loc_print(out, prm->loc);
  }
  tpk_str_putc(out, ')');
  if (!f->is_kernel) {
    tpk_str_puts(out, " -> (");
    for (int i = 0; i < f->nresults; i++) {
      if (i) tpk_str_puts(out, ", ");
      tpk_type_print(out, f->results[i]);
    }
    tpk_str_putc(out, ')');
  }
  if (f->backward) tpk_str_printf(out, " backward @%s", f->backward);
  if (f->ntunes) {
    tpk_str_puts(out, " tune{");
    for (int i = 0; i < f->ntunes; i++) {
      const TpkTune *t = &f->tunes[i];
      tpk_str_printf(out, "%s%s", i ? ", " : "", t->name ? t->name : "_");
      if (t->bound || t->nchoices == 0) tpk_str_printf(out, "=%" PRId64, t->value);
      if (t->nchoices > 0) {
        tpk_str_puts(out, " in [");
        for (int c = 0; c < t->nchoices; c++) tpk_str_printf(out, "%s%" PRId64, c ? ", " : "", t->choices[c]);
        tpk_str_putc(out, ']');
      }
    }
    tpk_str_putc(out, '}');
  }
  if (f->nrequires) {
    tpk_str_puts(out, " require{");
    for (int i = 0; i < f->nrequires; i++) {
      const TpkRequire *r = &f->requires[i];
      tpk_str_printf(out, "%s%s(", i ? ", " : "", tpk_op_info(r->cmp)->name);
      tpk_dim_print(out, r->lhs);
      tpk_str_puts(out, ", ");
      tpk_dim_print(out, r->rhs);
      tpk_str_putc(out, ')');
      loc_print(out, r->loc);
    }
    tpk_str_putc(out, '}');
  }
  loc_print(out, f->loc);
  tpk_str_puts(out, " {\n");
  /* parameters are the body's arguments: already printed in the header */
  if (f->body)
    for (const TpkOp *op = f->body->first; op; op = op->next) op_print(&p, op, 1);
  tpk_str_puts(out, "}\n");
  tpk_arena_free(&p.arena);
}

/* Names in print order: parameters, then each op's results before its
 * regions' arguments and ops, as func_print assigns them. */
static bool name_block(Printer *p, const TpkBlock *b, TpkArena *arena, TpkPtrMap *names);

static bool name_value(Printer *p, const TpkValue *v, TpkArena *arena, TpkPtrMap *names) {
  const char *name = tpk_arena_strdup(arena, value_name(p, v));
  return name && tpk_ptrmap_put(names, v, (void *)name);
}

static bool name_block(Printer *p, const TpkBlock *b, TpkArena *arena, TpkPtrMap *names) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int i = 0; i < op->nout; i++)
      if (!name_value(p, &op->out[i], arena, names)) return false;
    for (int r = 0; r < op->nregion; r++) {
      const TpkBlock *region = op->regions[r];
      for (int i = 0; i < region->nargs; i++)
        if (!name_value(p, region->args[i], arena, names)) return false;
      if (!name_block(p, region, arena, names)) return false;
    }
  }
  return true;
}

bool tpk_ir_value_names(const TpkFunc *f, TpkArena *arena, TpkPtrMap *names) {
  Printer p = {0};
  tpk_arena_init(&p.arena, 0);
  p.names = (TpkPtrMap){.arena = &p.arena};
  p.used = (TpkStrSet){.arena = &p.arena};
  bool ok = true;
  for (int i = 0; ok && i < f->nparams; i++) ok = !f->params[i].value || name_value(&p, f->params[i].value, arena, names);
  ok = ok && (!f->body || name_block(&p, f->body, arena, names));
  tpk_arena_free(&p.arena);
  return ok;
}

void tpk_ir_print_func(TpkStr *out, const TpkFunc *f) {
  if (out && f) func_print(out, f);
}

void tpk_ir_print(TpkStr *out, const TpkModule *m) {
  if (!out || !m) return;
  tpk_str_puts(out, "module");
  if (m->source) {
    tpk_str_putc(out, ' ');
    string_print(out, m->source);
  }
  tpk_str_putc(out, '\n');
  for (int i = 0; i < m->nfuncs; i++) {
    tpk_str_putc(out, '\n');
    func_print(out, m->funcs[i]);
  }
}
