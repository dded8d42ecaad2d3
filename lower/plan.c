/*
 * plan.c — where every tile lives: the workspace (VMEM) plan of a kernel.
 *
 * Every tensor value of rank >= 1 and every scratch buffer needs memory for
 * as long as it is live. Ops are numbered in program order (regions
 * inline); a value is live from its definition to its last use, and a use
 * inside a loop that does not contain the definition keeps the value live to
 * the end of that loop, since the next iteration reads it again.
 *
 * Values that can share one buffer are merged into a storage group before
 * offsets are assigned:
 *   - an elementwise result and an operand that dies at that op (in place),
 *     its own or one read by an elementwise op fused into it;
 *   - a reshape and its operand (same bytes, a view);
 *   - a loop-carried value: the loop's block argument, the loop's result,
 *     its initial value when that dies at the loop, and the yielded value when
 *     it is computed after the last read of the block argument;
 *   - an if's result and the values its branches yield when they die there;
 *   - an accumulating dot's result and its accumulator when that dies there
 *     (the emitter copies the accumulator into the result, then the gemm
 *     adds to it).
 * Lowering's decisions are read from the IR (lower/decide.c): a fused value
 * has no storage, and its operands are read where its user's loop runs.
 *
 * Groups get offsets first-fit in order of their start, 64-byte aligned, and
 * the peak is checked against the target's VMEM budget.
 *
 * A kernel compiled once for every shape (symbolic sizes) cannot be packed
 * here: its groups are numbered instead, each with its size as a dimension
 * expression, and the generated code lays them out one after another when it
 * starts (the emitter's layout function). Grouping only merges values whose
 * sizes are provably equal, so it is the same for every shape.
 */
#include "lower/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- value -> index ------------------------------------------------------------ */

static int index_get(const TpkPtrMap *m, const void *key) {
  void *v;
  return m && tpk_ptrmap_get(m, key, &v) ? (int)(intptr_t)v : -1;
}

static bool index_put(TpkPtrMap *m, const void *key, int i) { return tpk_ptrmap_put(m, key, (void *)(intptr_t)i); }

/* ---- liveness --------------------------------------------------------------- */

typedef struct Info {
  const TpkValue *v;
  int64_t bytes;           /* constant sizes; 0 when symbolic or never materialised */
  const TpkDim *bytes_dim; /* the size as a dimension (interned: equal sizes, equal pointers) */
  int start, end; /* program positions */
  int group;
  int last_user_pos; /* position of the last op using it directly (no loop extension) */
} Info;

typedef struct Planner {
  TpkModule *module;
  bool symbolic; /* some size depends on a shape symbol */
  TpkPlan *plan;
  TpkPtrMap *ix; /* value -> index into info */
  Info *info;
  int n, cap;
  int *group_parent;
  TpkError *err;
  bool failed;
  int pos;
  TpkPtrMap opix; /* op -> index into ops */
  struct OpPos { int pos, end; } *ops; /* program position of each op and of the end of its regions */
  int nops, capops;
} Planner;

static bool grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

/* v's size in bytes as a dimension; NULL if it overflows. */
static const TpkDim *value_bytes(TpkModule *m, const TpkValue *v) {
  const TpkType *t = v->type;
  const TpkDim *n = tpk_dim_const(m, (int64_t)tpk_dtype_size(t->dtype));
  for (int i = 0; i < t->rank && n; i++) n = tpk_dim_binary(m, TPK_DIM_MUL, n, t->dims[i]);
  return n;
}

static bool needs_storage(const TpkValue *v) {
  const TpkType *t = v->type;
  if (t->kind == TPK_TYPE_TENSOR) return t->rank > 0;
  return t->kind == TPK_TYPE_REF && t->space != TPK_MEM_HBM;
}

static int track(Planner *p, const TpkValue *v) {
  int i = index_get(p->ix, v);
  if (i >= 0 || !needs_storage(v)) return i;
  if (!grow((void **)&p->info, &p->cap, p->n + 1, sizeof *p->info) || !index_put(p->ix, v, p->n)) {
    p->failed = true;
    return -1;
  }
  Info *in = &p->info[p->n];
  memset(in, 0, sizeof *in);
  in->v = v;
  in->bytes_dim = value_bytes(p->module, v);
  if (in->bytes_dim && !tpk_dim_is_const(in->bytes_dim, &in->bytes)) p->symbolic = true;
  in->start = p->pos;
  in->end = p->pos;
  in->group = p->n;
  in->last_user_pos = p->pos;
  if (!in->bytes_dim && !p->failed) {
    TpkStr s = {0};
    tpk_type_print(&s, v->type);
    tpk_error(p->err, TPK_ERR_NOMEM, "a value of type %s is too large", s.data ? s.data : "?");
    tpk_str_free(&s);
    p->failed = true;
  }
  return p->n++;
}

static int op_index(Planner *p, const TpkOp *op) { return index_get(&p->opix, op); }
static int pos_of(Planner *p, const TpkOp *op) { return p->ops[op_index(p, op)].pos; }
static int end_of(Planner *p, const TpkOp *op) { return p->ops[op_index(p, op)].end; }

/* The end of the outermost loop among use's ancestors that does not contain
 * block `def` (the block of a definition); -1 if none. */
static int extending_loop(Planner *p, const TpkOp *use, const TpkBlock *def) {
  int best = -1;
  for (const TpkOp *a = use; a && a->parent && a->parent != def; a = a->parent->parent) {
    const TpkOp *up = a->parent->parent;
    if (!up) break;
    if (up->opcode == TPK_OP_FOR || up->opcode == TPK_OP_WHILE || up->opcode == TPK_OP_GRID) best = end_of(p, up);
  }
  return best;
}

static const TpkBlock *def_block(const TpkValue *v) { return v->def ? v->def->parent : v->block; }

static void use_value(Planner *p, const TpkValue *v, const TpkOp *user, int user_pos) {
  int i = index_get(p->ix, v);
  if (i < 0) return;
  Info *in = &p->info[i];
  int end = user_pos;
  int loop_end = extending_loop(p, user, def_block(v));
  if (loop_end > end) end = loop_end;
  if (end > in->end) in->end = end;
  if (user_pos > in->last_user_pos) in->last_user_pos = user_pos;
}

static void number_block(Planner *p, const TpkBlock *b);

/* The op whose loop reads op's operands: op, or when op is fused, the user
 * it is computed in (transitively). */
static const TpkOp *reading_op(const TpkOp *op) {
  while (op && tpk_op_is_fused(op)) op = tpk_value_single_user(&op->out[0]);
  return op;
}

static void number_op(Planner *p, const TpkOp *op) {
  int k = p->nops;
  if (!grow((void **)&p->ops, &p->capops, k + 1, sizeof *p->ops) || !index_put(&p->opix, op, k)) {
    p->failed = true;
    return;
  }
  p->nops++;
  p->ops[k].pos = ++p->pos;
  for (int r = 0; r < op->nregion; r++) number_block(p, op->regions[r]);
  p->ops[k].end = p->pos;
}

static void number_block(Planner *p, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op && !p->failed; op = op->next) number_op(p, op);
}

/* Second walk: definitions and uses, in the numbering of the first. */
static void scan_block(Planner *p, const TpkBlock *b);

static void scan_op(Planner *p, const TpkOp *op) {
  int pos = pos_of(p, op);
  /* a fused op's operands are read where its consumer's loop runs */
  const TpkOp *reader = reading_op(op);
  for (int i = 0; i < op->nin; i++) use_value(p, op->in[i], reader, pos_of(p, reader));
  p->pos = pos;
  for (int i = 0; i < op->nout; i++) track(p, &op->out[i]);
  for (int r = 0; r < op->nregion; r++) {
    const TpkBlock *b = op->regions[r];
    p->pos = pos; /* block arguments are defined where their op starts */
    for (int i = 0; i < b->nargs; i++) {
      int a = track(p, b->args[i]);
      /* a loop-carried tile lives for the whole loop */
      if (a >= 0 && end_of(p, op) > p->info[a].end) p->info[a].end = end_of(p, op);
    }
    scan_block(p, b);
  }
}

static void scan_block(Planner *p, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op && !p->failed; op = op->next) scan_op(p, op);
}

/* ---- groups ------------------------------------------------------------------ */

static int find(Planner *p, int i) {
  while (p->group_parent[i] != i) i = p->group_parent[i] = p->group_parent[p->group_parent[i]];
  return i;
}

static void unite(Planner *p, int a, int b) {
  a = find(p, a);
  b = find(p, b);
  if (a == b) return;
  if (p->info[b].start < p->info[a].start) {
    int t = a;
    a = b;
    b = t;
  }
  p->group_parent[b] = a;
  if (p->info[b].end > p->info[a].end) p->info[a].end = p->info[b].end;
  if (p->info[b].bytes > p->info[a].bytes) {
    p->info[a].bytes = p->info[b].bytes;
    p->info[a].bytes_dim = p->info[b].bytes_dim;
  }
}

/* May a and b share storage as far as their sizes go? Symbolic sizes only
 * when provably equal. */
static bool sizes_fit(Planner *p, int a, int b) {
  return p->symbolic ? p->info[a].bytes_dim == p->info[b].bytes_dim : true;
}

static bool same_size(Planner *p, int a, int b) { return p->info[a].bytes_dim == p->info[b].bytes_dim; }

/* Does value v die at op (its last direct use is op, and no loop keeps it)? */
static bool dies_at(Planner *p, const TpkValue *v, const TpkOp *op) {
  int i = index_get(p->ix, v);
  if (i < 0) return false;
  int pos = pos_of(p, op);
  Info *g = &p->info[find(p, i)];
  return p->info[i].end == pos && g->end == pos;
}

static bool is_param(const TpkValue *v) { return !v->def && v->block && !v->block->parent; }

static bool elementwise(const TpkOp *op) {
  return (tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE) || op->opcode == TPK_OP_SELECT ||
         op->opcode == TPK_OP_CONVERT;
}

/* Put result r of elementwise op `at` in the buffer of an operand of op
 * that dies at `at`: op's own, or one an elementwise op fused into it reads
 * (`exp(t - max)` computed in place in t's buffer: each element is read
 * before it is written; not through a broadcast, which reads an element
 * for many). */
static bool merge_operand_in_place(Planner *p, const TpkOp *op, const TpkOp *at, int r) {
  for (int i = 0; i < op->nin; i++) {
    const TpkValue *u = op->in[i];
    if (u->def && tpk_op_is_fused(u->def)) {
      if (elementwise(u->def) && merge_operand_in_place(p, u->def, at, r)) return true;
      continue;
    }
    int a = index_get(p->ix, u);
    if (a < 0 || is_param(u) || u->type->rank != at->out[0].type->rank) continue;
    if (!same_size(p, a, r)) continue;
    if (dies_at(p, u, at)) {
      unite(p, a, r);
      return true;
    }
  }
  return false;
}

static void merge_in_place(Planner *p, const TpkOp *op) {
  int r = op->nout == 1 ? index_get(p->ix, &op->out[0]) : -1;
  if (r < 0) return;
  if (op->opcode == TPK_OP_RESHAPE) {
    int a = index_get(p->ix, op->in[0]);
    if (a >= 0 && dies_at(p, op->in[0], op) && sizes_fit(p, a, r)) unite(p, a, r);
    return;
  }
  const TpkValue *acc = tpk_dot_accumulator(op);
  if (acc) { /* the accumulator is copied into the result, in place when it dies here */
    int a = index_get(p->ix, acc);
    if (a >= 0 && !is_param(acc) && dies_at(p, acc, op)) unite(p, a, r); /* one type: one size */
    return;
  }
  if (elementwise(op)) merge_operand_in_place(p, op, op, r);
}

/* May group g (holding the value a loop yields) take the loop's buffer,
 * whose block argument is `arg`? Every member must be computed after the
 * last read of the argument, and a member computed from the argument must
 * read each element before overwriting it: an elementwise op, or a dot
 * accumulating into the argument (the gemm adds to it where it lies). */
static bool can_take_loop_buffer(Planner *p, int g, const TpkValue *arg, int arg_last_use) {
  for (int i = 0; i < p->n; i++) {
    if (find(p, i) != g) continue;
    const TpkOp *d = p->info[i].v->def;
    if (!d || pos_of(p, d) < arg_last_use) return false;
    bool reads_arg = false;
    for (int j = 0; j < d->nin; j++) reads_arg |= d->in[j] == arg;
    const TpkOpInfo *info = tpk_op_info(d->opcode);
    bool accumulates = tpk_dot_accumulator(d) == arg && d->in[0] != arg && d->in[1] != arg;
    if (reads_arg && !(info->flags & TPK_OPF_ELEMENTWISE) && d->opcode != TPK_OP_SELECT && !accumulates) return false;
  }
  return true;
}

static void merge_region_results(Planner *p, const TpkOp *op) {
  int pos = pos_of(p, op);
  for (int i = 0; i < op->nout; i++) {
    int res = index_get(p->ix, &op->out[i]);
    if (res < 0) continue;
    if (op->opcode == TPK_OP_FOR || op->opcode == TPK_OP_WHILE) {
      /* a while's carried values are its operands and region arguments
       * from the first (the condition); a for's follow its bounds and index */
      int skip = op->opcode == TPK_OP_FOR;
      const TpkBlock *body = op->regions[0];
      const TpkValue *carried = body->args[i + skip];
      int arg = index_get(p->ix, carried);
      if (arg < 0) continue;
      unite(p, arg, res);
      const TpkValue *init = op->in[2 * skip + i];
      int ini = index_get(p->ix, init);
      if (ini >= 0 && !is_param(init) && p->info[ini].end == pos && p->info[find(p, ini)].end == pos)
        unite(p, ini, res);
      const TpkOp *y = body->last;
      if (y && y->opcode == TPK_OP_YIELD) {
        /* The yielded value is written straight into the loop buffer when
         * it is computed by an op of the body and read by nothing but the
         * yield. */
        const TpkValue *yv = y->in[i];
        int yi = index_get(p->ix, yv);
        if (yi >= 0 && yv->def && yv->def->parent == body && find(p, yi) != find(p, arg) &&
            p->info[find(p, yi)].end == pos_of(p, y) && same_size(p, yi, arg) &&
            can_take_loop_buffer(p, find(p, yi), carried, p->info[arg].last_user_pos))
          unite(p, yi, arg);
      }
    } else if (op->opcode == TPK_OP_IF) {
      for (int r = 0; r < 2; r++) {
        const TpkOp *y = op->regions[r]->last;
        if (!y || y->opcode != TPK_OP_YIELD) continue;
        const TpkValue *yv = y->in[i];
        int yi = index_get(p->ix, yv);
        if (yi >= 0 && yv->def && yv->def->parent == op->regions[r] && find(p, yi) == yi &&
            p->info[yi].end == pos_of(p, y) && same_size(p, yi, res))
          unite(p, yi, res);
      }
    }
  }
}

static void merge_block(Planner *p, const TpkBlock *b) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) merge_block(p, op->regions[r]);
    merge_in_place(p, op);
    if (op->opcode == TPK_OP_FOR || op->opcode == TPK_OP_WHILE || op->opcode == TPK_OP_IF) merge_region_results(p, op);
  }
}

/* ---- offsets ----------------------------------------------------------------- */

typedef struct Placed {
  int64_t offset, bytes;
  int end;
} Placed;

static int cmp_start(const void *a, const void *b, void *ctx) {
  const Info *info = ctx;
  int x = *(const int *)a, y = *(const int *)b;
  return info[x].start != info[y].start ? (info[x].start > info[y].start) - (info[x].start < info[y].start)
                                        : (x > y) - (x < y);
}

/* qsort_r is not C11: a small insertion-merge sort keeps this portable. */
static void sort_by_start(int *order, int n, const Info *info) {
  int *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
  if (!tmp) { /* insertion sort fallback */
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0 && cmp_start(&order[j - 1], &order[j], (void *)info) > 0; j--) {
        int t = order[j];
        order[j] = order[j - 1];
        order[j - 1] = t;
      }
    return;
  }
  for (int width = 1; width < n; width *= 2) {
    for (int lo = 0; lo < n; lo += 2 * width) {
      int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = cmp_start(&order[i], &order[j], (void *)info) <= 0 ? order[i++] : order[j++];
      while (i < mid) tmp[k++] = order[i++];
      while (j < hi) tmp[k++] = order[j++];
    }
    memcpy(order, tmp, (size_t)n * sizeof *order);
  }
  free(tmp);
}

static int64_t align64(int64_t x) { return (x + 63) & ~(int64_t)63; }

static void human(char *buf, size_t n, int64_t bytes) {
  if (bytes >= (int64_t)1 << 20) snprintf(buf, n, "%.1f MiB", (double)bytes / (1 << 20));
  else if (bytes >= 1024) snprintf(buf, n, "%.1f KiB", (double)bytes / 1024);
  else snprintf(buf, n, "%lld B", (long long)bytes);
}

static const char *func_name_of(const TpkValue *v) {
  const TpkBlock *b = v->def ? v->def->parent : v->block;
  while (b && b->parent) b = b->parent->parent;
  return b && b->func ? b->func->name : "?";
}

/* The over-budget message names the largest groups. */
static TpkStatus too_big(Planner *p, const int *roots, int nroots, int64_t peak, const TpkTarget *t) {
  char need[32], have[32];
  human(need, sizeof need, peak);
  human(have, sizeof have, t->vmem_bytes);
  TpkStr s = {0};
  tpk_str_printf(&s, "kernel '%s' needs %s of VMEM for one grid instance but %s has %s; largest buffers:",
                 nroots ? func_name_of(p->info[roots[0]].v) : "?", need, t->name, have);
  bool *shown = calloc((size_t)(nroots ? nroots : 1), sizeof *shown);
  for (int k = 0; k < 3 && shown; k++) {
    int best = -1;
    for (int i = 0; i < nroots; i++)
      if (!shown[i] && (best < 0 || p->info[roots[i]].bytes > p->info[roots[best]].bytes)) best = i;
    if (best < 0) break;
    shown[best] = true;
    const Info *in = &p->info[roots[best]];
    char size[32];
    human(size, sizeof size, in->bytes);
    TpkStr ty = {0};
    tpk_type_print(&ty, in->v->type);
    int line = in->v->def ? in->v->def->loc.line : 0;
    tpk_str_printf(&s, "%s %s%s %s (%s", k ? "," : "", in->v->name ? "%" : "", in->v->name ? in->v->name : "a value",
                   ty.data ? ty.data : "?", size);
    if (line > 0) tpk_str_printf(&s, ", line %d", line); /* no line: made by a pass or from IR text */
    tpk_str_putc(&s, ')');
    tpk_str_free(&ty);
  }
  free(shown);
  tpk_str_puts(&s, "; use smaller blocks (tunables) or tile the computation");
  TpkStatus st = tpk_error(p->err, TPK_ERR_NOMEM, "%s", s.data ? s.data : "out of VMEM");
  tpk_str_free(&s);
  /* the message is about the largest buffer's line */
  int largest = -1;
  for (int i = 0; i < nroots; i++)
    if (largest < 0 || p->info[roots[i]].bytes > p->info[roots[largest]].bytes) largest = i;
  const TpkOp *at = largest >= 0 ? p->info[roots[largest]].v->def : NULL;
  if (p->err && at) p->err->line = at->loc.line, p->err->col = at->loc.col;
  return st;
}

/* Symbolic sizes: number the storage groups in order of their start; the
 * generated code places them. */
static TpkStatus number_groups(Planner *p, const TpkFunc *f, const int *roots, int nroots) {
  TpkPlan *plan = p->plan;
  plan->symbolic = true;
  plan->workspace_bytes = -1;
  plan->ngroups = nroots;
  plan->group_bytes = tpk_arena_alloc(&plan->arena, (size_t)(nroots ? nroots : 1) * sizeof *plan->group_bytes);
  plan->slots = tpk_arena_alloc(&plan->arena, (size_t)(p->n ? p->n : 1) * sizeof *plan->slots);
  int *number = malloc((size_t)(p->n ? p->n : 1) * sizeof *number);
  if (!plan->group_bytes || !plan->slots || !number) {
    free(number);
    return tpk_error(p->err, TPK_ERR_NOMEM, "out of memory planning '%s'", f->name);
  }
  for (int i = 0; i < p->n; i++) number[i] = -1;
  for (int r = 0; r < nroots; r++) {
    number[roots[r]] = r;
    plan->group_bytes[r] = p->info[roots[r]].bytes_dim;
  }
  for (int i = 0; i < p->n; i++) {
    int g = find(p, i);
    plan->slots[i] = (TpkPlanSlot){.value = p->info[i].v, .offset = -1, .bytes = -1, .bytes_dim = p->info[g].bytes_dim,
                                   .group = number[g], .alias = g == i ? -1 : g};
  }
  plan->nslots = p->n;
  free(number);
  return TPK_OK;
}

TpkStatus tpk_plan_memory(const TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err) {
  memset(plan, 0, sizeof *plan);
  tpk_arena_init(&plan->arena, 0);
  Planner p = {.module = f->module, .plan = plan, .ix = &plan->index, .err = err};
  number_block(&p, f->body);
  p.pos = 0;
  if (!p.failed) scan_block(&p, f->body);
  TpkStatus st = TPK_OK;
  if (p.failed) {
    st = err && err->code != TPK_OK ? err->code : tpk_error(err, TPK_ERR_NOMEM, "out of memory planning '%s'", f->name);
    goto done;
  }
  p.group_parent = malloc((size_t)(p.n ? p.n : 1) * sizeof *p.group_parent);
  int *roots = malloc((size_t)(p.n ? p.n : 1) * sizeof *roots);
  Placed *active = malloc((size_t)(p.n ? p.n : 1) * sizeof *active);
  int64_t *group_offset = malloc((size_t)(p.n ? p.n : 1) * sizeof *group_offset);
  if (!p.group_parent || !roots || !active || !group_offset) {
    free(roots);
    free(active);
    free(group_offset);
    st = tpk_error(err, TPK_ERR_NOMEM, "out of memory planning '%s'", f->name);
    goto done;
  }
  for (int i = 0; i < p.n; i++) {
    p.group_parent[i] = i;
    const TpkOp *d = p.info[i].v->def;
    if (tpk_op_is_fused(d)) {
      p.info[i].bytes = 0; /* never materialised */
      p.info[i].bytes_dim = NULL;
    }
  }
  merge_block(&p, f->body);

  int nroots = 0;
  for (int i = 0; i < p.n; i++) {
    int64_t zero;
    const TpkDim *b = p.info[i].bytes_dim;
    if (find(&p, i) == i && b && !(tpk_dim_is_const(b, &zero) && zero == 0)) roots[nroots++] = i;
  }
  sort_by_start(roots, nroots, p.info);
  if (p.symbolic) {
    st = number_groups(&p, f, roots, nroots);
    goto placed;
  }
  /* First fit among the groups still live at each start. */
  int nactive = 0;
  int64_t peak = 0;
  for (int r = 0; r < nroots; r++) {
    const Info *g = &p.info[roots[r]];
    int keep = 0;
    for (int a = 0; a < nactive; a++)
      if (active[a].end >= g->start) active[keep++] = active[a];
    nactive = keep;
    /* sort active by offset (few entries) */
    for (int a = 1; a < nactive; a++)
      for (int b = a; b > 0 && active[b - 1].offset > active[b].offset; b--) {
        Placed tmp = active[b];
        active[b] = active[b - 1];
        active[b - 1] = tmp;
      }
    int64_t size = align64(g->bytes), off = 0;
    for (int a = 0; a < nactive; a++) {
      if (active[a].offset - off >= size) break;
      int64_t e = active[a].offset + align64(active[a].bytes);
      if (e > off) off = e;
    }
    active[nactive++] = (Placed){off, g->bytes, g->end};
    group_offset[roots[r]] = off;
    if (off + size > peak) peak = off + size;
  }
  plan->workspace_bytes = peak;
  if (t && t->vmem_bytes > 0 && peak > t->vmem_bytes) st = too_big(&p, roots, nroots, peak, t);

  if (st == TPK_OK) {
    plan->slots = tpk_arena_alloc(&plan->arena, (size_t)(p.n ? p.n : 1) * sizeof *plan->slots);
    if (!plan->slots) st = tpk_error(err, TPK_ERR_NOMEM, "out of memory planning '%s'", f->name);
    for (int i = 0; plan->slots && i < p.n; i++) {
      int g = find(&p, i);
      plan->slots[i] = (TpkPlanSlot){.value = p.info[i].v, .offset = group_offset[g], .bytes = p.info[g].bytes,
                                     .bytes_dim = p.info[g].bytes_dim, .group = -1, .alias = g == i ? -1 : g};
    }
    plan->nslots = p.n;
  }
placed:
  free(roots);
  free(active);
  free(group_offset);
done:
  free(p.info);
  free(p.group_parent);
  free(p.ops);
  tpk_ptrmap_free(&p.opix);
  if (st != TPK_OK) tpk_plan_free(plan); /* a failed plan owns nothing */
  return st;
}

const TpkPlanSlot *tpk_plan_slot(const TpkPlan *plan, const TpkValue *v) {
  int i = index_get(&plan->index, v);
  if (i < 0 || !plan->slots) return NULL;
  return &plan->slots[i];
}

void tpk_plan_print(TpkStr *out, const TpkPlan *plan, const TpkFunc *f) {
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkPtrMap names = {0};
  bool named = tpk_ir_value_names(f, &arena, &names);
  if (plan->symbolic) tpk_str_printf(out, "plan @%s: symbolic, %d groups\n", f->name, plan->ngroups);
  else tpk_str_printf(out, "plan @%s: workspace %lld bytes\n", f->name, (long long)plan->workspace_bytes);
  for (int i = 0; i < plan->nslots; i++) {
    const TpkPlanSlot *slot = &plan->slots[i];
    void *name = NULL;
    tpk_str_printf(out, "  %%%s: ", named && tpk_ptrmap_get(&names, slot->value, &name) ? (const char *)name : "?");
    if (!slot->bytes_dim || slot->bytes == 0) {
      tpk_str_puts(out, "no storage");
    } else if (plan->symbolic) {
      tpk_str_printf(out, "group %d, ", slot->group);
      tpk_dim_print(out, slot->bytes_dim);
      tpk_str_puts(out, " bytes");
    } else {
      tpk_str_printf(out, "offset %lld, %lld bytes", (long long)slot->offset, (long long)slot->bytes);
    }
    if (slot->alias >= 0 && tpk_ptrmap_get(&names, plan->slots[slot->alias].value, &name))
      tpk_str_printf(out, ", shares %%%s", (const char *)name);
    tpk_str_putc(out, '\n');
  }
  tpk_ptrmap_free(&names);
  tpk_arena_free(&arena);
}

void tpk_plan_free(TpkPlan *plan) {
  tpk_ptrmap_free(&plan->index);
  tpk_arena_free(&plan->arena);
  memset(plan, 0, sizeof *plan);
}
