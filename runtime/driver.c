/*
 * driver.c — running a compiled graph. lower/fuse.c leaves a graph func as
 * a driver (ir/README.md, "Graphs"): `call`s of cluster kernels and of the
 * kernels the graph called, in order, `reshape`s of contiguous results and
 * a `return`. A launch of the graph runs it:
 *
 *   - every value gets bytes: an input is the launch's buffer; a call's
 *     result is the output buffer it is returned in (written in place) or
 *     part of one block of intermediate memory; a reshape is the bytes of
 *     what it reshapes (no copy); a rank-0 constant is the plan's own;
 *   - each call runs its kernel (runtime.c's tpk_kernel_run: the code
 *     serving every shape, compiled once, or the library's) with the sizes
 *     of its arguments, evaluated from the graph's shape symbols;
 *   - outputs that could not be written in place (an input returned, a
 *     value returned twice, an output buffer that overlaps an input) are
 *     copied at the end.
 *
 * What the launch reports sums its calls: on a sim device the simulated
 * time, FLOPs and bytes of every call, utilisations weighted by time, and
 * as the trace the timeline of the call that took longest (each call is
 * timed on its own; the trace of a graph is that of its slowest kernel).
 * The plan is made once per compiled graph; a launch takes only the
 * intermediate block, from the context's scratch memory (runtime.c), which
 * the next launch of any graph or kernel reuses. Intermediates whose lives
 * (from the call that writes one to the last that reads it) do not meet
 * share its bytes: the block is what is alive at once, not the sum (a
 * transformer block's forward and backward: 6.0 -> 3.5 MB), so a new
 * process has fewer fresh pages to fault in.
 */
#include "runtime/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/prims.h"
#include "runtime/pool.h"

enum { MAX_SYMS = 64 };

typedef enum SlotKind { SLOT_PARAM, SLOT_RESULT, SLOT_VIEW, SLOT_CONST } SlotKind;

/* A value of the driver and where its bytes are. */
typedef struct Slot {
  SlotKind kind;
  const TpkType *type;
  int root;   /* the slot whose bytes these are: itself, or what a view looks at */
  int param;  /* SLOT_PARAM: the graph's input */
  int output; /* a SLOT_RESULT written in place into this output's buffer, else -1 */
  uint64_t value; /* SLOT_CONST: the rank-0 value in its dtype's storage */
  /* A root SLOT_RESULT's life: the call that writes it, and the last call
   * that reads it or a view of it (ncalls: it is returned, copied at the
   * end). Intermediates whose lives do not meet share bytes. */
  int def, last;
} Slot;

/* One call: which slot each of the callee's parameters reads or writes,
 * and the driver dims that give the callee's shape symbols. */
typedef struct Call {
  TpkKernel *k;
  const char *callee;
  int nparams;
  int *slot;      /* per parameter */
  int *copy_from; /* inout: the slot whose contents it starts from, else -1 */
  int nsyms;
  const TpkDim **sym_dim; /* per callee shape symbol, in its order */
} Call;

struct TpkDriver {
  const char *name; /* the graph's */
  TpkArena arena;   /* everything below */
  int nslots;
  Slot *slots;
  int ncalls;
  Call *calls;
  int nparams;  /* the graph's inputs: a launch's args, then nresults outputs */
  int nresults;
  int *results; /* the slot of each output */
  int nsymbols;
  const char **symbols; /* the graph's shape symbols, in launch order */
};

static TpkStatus plan_fail(TpkDriver *d, const char *what) {
  return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "graph '%s': the driver %s", d->name, what);
}

/* The rank-0 constant of op in its dtype's storage (host/prims.h). */
static void const_value(const TpkOp *op, uint64_t *out) {
  const TpkAttr *a = tpk_op_attr(op, "value");
  TpkDType dt = op->out[0].type->dtype;
  double v = a && a->kind == TPK_ATTR_FLOAT ? a->f : a ? (double)a->i : 0;
  *out = 0;
  if (tpk_dtype_is_float(dt)) {
    float f = (float)v;
    tpk_prims()->convert(TPK_PRIM_F32, (int)dt, &f, out, 1);
  } else {
    int32_t i = (int32_t)v;
    tpk_prims()->convert(TPK_PRIM_I32, (int)dt, &i, out, 1);
  }
}

/* The slot of v, or -1 (with an error) when the driver does not define it. */
static int slot_of(TpkDriver *d, const TpkPtrMap *slots, const TpkValue *v) {
  void *at;
  if (tpk_ptrmap_get(slots, v, &at)) return (int)(intptr_t)at - 1;
  plan_fail(d, "uses a value it does not define");
  return -1;
}

static int new_slot(TpkDriver *d, TpkPtrMap *slots, const TpkValue *v, SlotKind kind) {
  int i = d->nslots++;
  d->slots[i] = (Slot){.kind = kind, .type = v->type, .root = i, .param = -1, .output = -1, .def = d->ncalls - 1,
                       .last = d->ncalls - 1};
  return tpk_ptrmap_put(slots, v, (void *)(intptr_t)(i + 1)) ? i : -1;
}

/* The plan of a call op: the callee's parameters in declaration order take
 * the call's operands (in, inout) and results (out, inout) in turn. */
static TpkStatus plan_call(TpkDriver *d, const TpkFunc *driver, TpkPtrMap *slots, const TpkOp *op, TpkKernel *k, Call *c) {
  const TpkFunc *f = tpk_kernel_ir(k);
  c->k = k;
  c->callee = tpk_op_str(op, "callee", "?");
  c->nparams = f->nparams;
  c->slot = tpk_arena_alloc(&d->arena, sizeof *c->slot * (size_t)(f->nparams + 1));
  c->copy_from = tpk_arena_alloc(&d->arena, sizeof *c->copy_from * (size_t)(f->nparams + 1));
  c->nsyms = tpk_kernel_symbol_count(k);
  c->sym_dim = tpk_arena_alloc(&d->arena, sizeof *c->sym_dim * (size_t)(c->nsyms + 1));
  if (!c->slot || !c->copy_from || !c->sym_dim) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  int in = 0, out = 0;
  for (int i = 0; i < f->nparams; i++) {
    TpkParamRole role = f->params[i].role;
    c->copy_from[i] = -1;
    const TpkValue *v = NULL;
    if (role != TPK_PARAM_OUT) {
      if (in >= op->nin) return plan_fail(d, "calls a kernel with too few arguments");
      v = op->in[in++];
    }
    if (role != TPK_PARAM_IN) {
      if (out >= op->nout) return plan_fail(d, "calls a kernel with too few results");
      if (v && (c->copy_from[i] = slot_of(d, slots, v)) < 0) return TPK_ERR_UNSUPPORTED;
      v = &op->out[out++];
      if (new_slot(d, slots, v, SLOT_RESULT) < 0) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    }
    if ((c->slot[i] = slot_of(d, slots, v)) < 0) return TPK_ERR_UNSUPPORTED;
  }
  if (in != op->nin || out != op->nout) return plan_fail(d, "calls a kernel with arguments or results its parameters do not take");
  for (int i = 0; i < f->nparams; i++) { /* what it reads lives until it has run */
    int read = f->params[i].role == TPK_PARAM_IN ? c->slot[i] : c->copy_from[i];
    if (read >= 0) d->slots[d->slots[read].root].last = d->ncalls - 1;
  }
  /* each shape symbol of the callee from the first parameter dim that is
   * it; a symbol only inside products (a cluster's [s0*s1]), or in none
   * of its parameters (a cluster making an iota), is the graph's own:
   * fusion gives clusters the graph's symbols */
  for (int s = 0; s < c->nsyms; s++) {
    const char *sym = tpk_kernel_symbol_name(k, s);
    c->sym_dim[s] = NULL;
    for (int i = 0; i < f->nparams && !c->sym_dim[s]; i++) {
      const TpkType *t = f->params[i].value->type;
      for (int j = 0; j < t->rank && !c->sym_dim[s]; j++)
        if (t->dims[j]->kind == TPK_DIM_SYM && strcmp(t->dims[j]->sym, sym) == 0)
          c->sym_dim[s] = d->slots[c->slot[i]].type->dims[j];
    }
    if (!c->sym_dim[s] && f->module == driver->module) {
      const char *name = tpk_module_intern(driver->module, sym, strlen(sym));
      c->sym_dim[s] = name ? tpk_dim_sym(driver->module, name) : NULL;
    }
    if (!c->sym_dim[s])
      return tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "graph '%s': kernel '%s' has shape symbol %s in no dimension of its own",
                              d->name, c->callee, sym);
  }
  return TPK_OK;
}

TpkStatus tpk_driver_new(const TpkFunc *f, TpkKernel *(*callee)(void *ctx, const char *name), void *ctx, TpkDriver **out) {
  *out = NULL;
  TpkDriver *d = calloc(1, sizeof *d);
  if (!d) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  tpk_arena_init(&d->arena, 0);
  d->name = tpk_arena_strdup(&d->arena, f->name);
  int nvalues = f->nparams, nops = 0;
  for (const TpkOp *op = f->body->first; op; op = op->next) nvalues += op->nout, nops++;
  d->slots = tpk_arena_alloc(&d->arena, sizeof *d->slots * (size_t)(nvalues + 1));
  d->calls = tpk_arena_alloc(&d->arena, sizeof *d->calls * (size_t)(nops + 1));
  d->symbols = tpk_arena_alloc(&d->arena, sizeof *d->symbols * MAX_SYMS);
  TpkPtrMap slots = {.arena = &d->arena};
  TpkStatus st = d->name && d->slots && d->calls && d->symbols ? TPK_OK : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  if (st == TPK_OK) d->nsymbols = tpk_func_symbols(f, d->symbols, MAX_SYMS);
  if (st == TPK_OK && d->nsymbols > MAX_SYMS)
    st = tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "graph '%s' has more than %d shape symbols", d->name, MAX_SYMS);
  for (int i = 0; st == TPK_OK && i < f->nparams; i++) {
    int s = new_slot(d, &slots, f->params[i].value, SLOT_PARAM);
    if (s < 0) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
    else d->slots[s].param = d->nparams++;
  }
  const TpkOp *ret = NULL;
  for (const TpkOp *op = f->body->first; st == TPK_OK && op; op = op->next) {
    switch (op->opcode) {
    case TPK_OP_CALL: {
      const char *name = tpk_op_str(op, "callee", "");
      TpkKernel *k = callee(ctx, name);
      if (!k) {
        st = tpk_runtime_fail(TPK_ERR_UNSUPPORTED, "graph '%s': the driver calls '%s', which is not a kernel of the graph", d->name, name);
        break;
      }
      st = plan_call(d, f, &slots, op, k, &d->calls[d->ncalls++]);
      break;
    }
    case TPK_OP_RESHAPE: { /* every slot is contiguous: a reshape looks at the same bytes */
      int src = slot_of(d, &slots, op->in[0]), s = src < 0 ? -1 : new_slot(d, &slots, &op->out[0], SLOT_VIEW);
      if (s < 0) st = src < 0 ? TPK_ERR_UNSUPPORTED : tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
      else d->slots[s].root = d->slots[src].root;
      break;
    }
    case TPK_OP_CONST: {
      if (op->out[0].type->rank != 0) {
        st = plan_fail(d, "has a constant that is not a scalar");
        break;
      }
      int s = new_slot(d, &slots, &op->out[0], SLOT_CONST);
      if (s < 0) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
      else const_value(op, &d->slots[s].value);
      break;
    }
    case TPK_OP_RETURN: ret = op; break;
    default: {
      char what[96];
      snprintf(what, sizeof what, "has a '%s' op; it holds only calls, reshapes and a return", tpk_op_info(op->opcode)->name);
      st = plan_fail(d, what);
    }
    }
  }
  if (st == TPK_OK && (!ret || ret->nin != f->nresults)) st = plan_fail(d, "does not end with a return of its results");
  if (st == TPK_OK && !(d->results = tpk_arena_alloc(&d->arena, sizeof *d->results * (size_t)(f->nresults + 1))))
    st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  /* A result is computed straight into the output buffer that returns it
   * first (or a reshape of it); other outputs are copies. */
  for (int i = 0; st == TPK_OK && i < f->nresults; i++) {
    int s = slot_of(d, &slots, ret->in[i]);
    if (s < 0) st = TPK_ERR_UNSUPPORTED;
    else {
      d->results[d->nresults++] = s;
      Slot *root = &d->slots[d->slots[s].root];
      root->last = d->ncalls; /* read by the copy at the end, unless written in place */
      if (root->kind == SLOT_RESULT && root->output < 0) root->output = i;
    }
  }
  if (st != TPK_OK) {
    tpk_driver_free(d);
    return st;
  }
  *out = d;
  return TPK_OK;
}

int tpk_driver_calls(const TpkDriver *d) { return d->ncalls; }

void tpk_driver_free(TpkDriver *d) {
  if (!d) return;
  tpk_arena_free(&d->arena);
  free(d);
}

/* ---- a launch -------------------------------------------------------------------- */

typedef struct Sizes {
  const TpkDriver *d;
  const int64_t *values;
} Sizes;

static bool size_lookup(void *ctx, const char *sym, int64_t *value) {
  const Sizes *s = ctx;
  for (int i = 0; i < s->d->nsymbols; i++)
    if (strcmp(s->d->symbols[i], sym) == 0) {
      *value = s->values[i];
      return true;
    }
  return false;
}

static TpkStatus slot_bytes(const TpkDriver *d, const Sizes *sizes, const Slot *s, size_t *out) {
  size_t n = tpk_dtype_size(s->type->dtype);
  for (int i = 0; i < s->type->rank; i++) {
    int64_t v;
    if (!tpk_dim_eval(s->type->dims[i], size_lookup, (void *)sizes, &v) || v < 0 ||
        (v && n > SIZE_MAX / 2 / (size_t)v))
      return tpk_runtime_fail(TPK_ERR_INVALID, "graph '%s': a size of its values does not evaluate with these inputs", d->name);
    n *= (size_t)v;
  }
  *out = n;
  return TPK_OK;
}

/* Do the bytes [a, a+na) and [b, b+nb) overlap? */
static bool overlap(const void *a, size_t na, const void *b, size_t nb) {
  return na && nb && (const char *)a < (const char *)b + nb && (const char *)b < (const char *)a + na;
}

/* Add what one call did to what the graph's launch reports. */
static void add_report(TpkLaunchResult *sum, const TpkLaunchResult *r, double *longest, bool first) {
  if (first || (strcmp(sum->tier, "aot") == 0 && strcmp(r->tier, "aot") != 0)) sum->tier = r->tier;
  if (!sum->note[0] && r->note[0]) memcpy(sum->note, r->note, sizeof sum->note);
  if (!r->simulated) return;
  TpkSimStats *s = &sum->sim;
  const TpkSimStats *x = &r->sim;
  double t = s->seconds + x->seconds;
  if (t > 0) {
    s->mxu_utilisation = (s->mxu_utilisation * s->seconds + x->mxu_utilisation * x->seconds) / t;
    s->vpu_utilisation = (s->vpu_utilisation * s->seconds + x->vpu_utilisation * x->seconds) / t;
    s->hbm_utilisation = (s->hbm_utilisation * s->seconds + x->hbm_utilisation * x->seconds) / t;
  }
  if (!sum->simulated || x->matmul_flops > s->matmul_flops) s->peak_flops = x->peak_flops;
  sum->simulated = true;
  s->chip = x->chip;
  s->clock_hz = x->clock_hz;
  s->hbm_bytes_per_s = x->hbm_bytes_per_s;
  s->seconds = t;
  s->cycles += x->cycles;
  s->flops += x->flops;
  s->matmul_flops += x->matmul_flops;
  s->hbm_bytes += x->hbm_bytes;
  s->roofline_seconds += x->roofline_seconds;
  s->memory_bound = s->hbm_bytes_per_s > 0 && s->peak_flops > 0 &&
                    s->hbm_bytes / s->hbm_bytes_per_s > s->matmul_flops / s->peak_flops;
  if (x->seconds > *longest) {
    *longest = x->seconds;
    sum->trace = r->trace;
  }
}

/* The intermediates' offsets in their block (into at[slot[i]] as offset
 * + 1), in the order they are written: each at the lowest offset (64-byte
 * aligned) where it meets no intermediate placed before it that is alive
 * at once; lives meet when one is written before the other's last read
 * (so a call never writes where it reads). `busy` has room for n ranges.
 * The block's size. */
static size_t place_intermediates(const TpkDriver *d, const int *slot, int n, const size_t *bytes, void **at,
                                  size_t (*busy)[2]) {
  size_t block = 0;
  for (int a = 0; a < n; a++) {
    const Slot *s = &d->slots[slot[a]];
    size_t size = (bytes[slot[a]] + 63) / 64 * 64, offset = 0;
    int nbusy = 0;
    for (int b = 0; b < a; b++) { /* the ranges of those alive with it, by offset */
      const Slot *t = &d->slots[slot[b]];
      if (!(s->def <= t->last && t->def <= s->last)) continue;
      size_t from = (uintptr_t)at[slot[b]] - 1, to = from + (bytes[slot[b]] + 63) / 64 * 64;
      int j = nbusy++;
      for (; j > 0 && busy[j - 1][0] > from; j--) memcpy(busy[j], busy[j - 1], sizeof busy[j]);
      busy[j][0] = from;
      busy[j][1] = to;
    }
    for (int j = 0; j < nbusy && busy[j][0] < offset + size; j++) /* the first gap that fits */
      if (busy[j][1] > offset) offset = busy[j][1];
    at[slot[a]] = (void *)(uintptr_t)(offset + 1);
    if (offset + size > block) block = offset + size;
  }
  return block;
}

TpkStatus tpk_driver_run(TpkDriver *d, TpkDevice *dev, const int64_t *sizes, TpkBuffer *const *args,
                         TpkLaunchResult *result) {
  Sizes sz = {d, sizes};
  int nparams = d->nparams;
  void **at = calloc((size_t)d->nslots + 1, sizeof *at);
  size_t *bytes = calloc((size_t)d->nslots + 1, sizeof *bytes);
  if (!at || !bytes) {
    free(at);
    free(bytes);
    return tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory running graph '%s'", d->name);
  }
  TpkStatus st = TPK_OK;
  /* Where each root's bytes are: inputs are the launch's; a result goes
   * into its output buffer unless that overlaps an input, else into the
   * intermediate block at an offset (place_intermediates). */
  size_t block = 0;
  int *placed = calloc((size_t)d->nslots + 1, sizeof *placed), nplaced = 0;
  size_t(*busy)[2] = calloc((size_t)d->nslots + 1, sizeof *busy);
  if (!placed || !busy) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory running graph '%s'", d->name);
  for (int i = 0; st == TPK_OK && i < d->nslots; i++) {
    Slot *s = &d->slots[i];
    st = slot_bytes(d, &sz, s, &bytes[i]);
    if (st != TPK_OK) break;
    if (s->kind == SLOT_PARAM) at[i] = tpk_buffer_memory(args[s->param]);
    else if (s->kind == SLOT_CONST) at[i] = &s->value;
  }
  for (int i = 0; st == TPK_OK && i < d->nslots; i++) {
    Slot *s = &d->slots[i];
    if (s->kind != SLOT_RESULT) continue;
    TpkBuffer *o = s->output >= 0 ? args[nparams + s->output] : NULL;
    for (int p = 0; o && p < nparams; p++)
      if (overlap(tpk_buffer_memory(o), o->bytes, tpk_buffer_memory(args[p]), args[p]->bytes)) o = NULL;
    if (o && o->bytes == bytes[i]) at[i] = tpk_buffer_memory(o);
    else placed[nplaced++] = i;
  }
  if (st == TPK_OK) block = place_intermediates(d, placed, nplaced, bytes, at, busy);
  free(busy);
  /* the intermediate block, from the context's scratch memory */
  void *memory = NULL;
  size_t memory_cap = 0;
  bool reserved = false;
  if (st == TPK_OK && block) {
    memory = tpk_scratch_take(dev->ctx, block, &memory_cap);
    if (!memory) st = tpk_runtime_fail(TPK_ERR_NOMEM, "out of host memory for graph '%s''s %zu bytes of intermediates", d->name, block);
    else reserved = (st = tpk_device_reserve(dev, block)) == TPK_OK;
  }
  for (int i = 0; st == TPK_OK && i < nplaced; i++) at[placed[i]] = (char *)memory + (uintptr_t)at[placed[i]] - 1;
  free(placed);
  for (int i = 0; i < d->nslots; i++)
    if (d->slots[i].kind == SLOT_VIEW) at[i] = at[d->slots[i].root];
  /* the calls, in order, the workers kept from sleeping between them */
  TpkPool *held = d->ncalls > 1 ? tpk_context_hold_workers(dev->ctx) : NULL;
  TpkLaunchResult sum = {.tier = "aot", .tunes_from = "declared defaults"}, one;
  double longest = -1;
  void *cargs[256];
  size_t cbytes[256];
  int64_t csyms[MAX_SYMS];
  for (int c = 0; st == TPK_OK && c < d->ncalls; c++) {
    const Call *call = &d->calls[c];
    for (int i = 0; i < call->nparams && i < 256; i++) {
      cargs[i] = at[call->slot[i]];
      cbytes[i] = bytes[call->slot[i]];
      if (call->copy_from[i] >= 0 && at[call->copy_from[i]] != cargs[i])
        memcpy(cargs[i], at[call->copy_from[i]], cbytes[i]);
    }
    for (int s = 0; s < call->nsyms && st == TPK_OK; s++)
      if (!tpk_dim_eval(call->sym_dim[s], size_lookup, &sz, &csyms[s]))
        st = tpk_runtime_fail(TPK_ERR_INVALID, "graph '%s': a size of kernel '%s' does not evaluate", d->name, call->callee);
    if (st != TPK_OK) break;
    memset(&one, 0, sizeof one);
    st = tpk_kernel_run(call->k, dev, csyms, cargs, cbytes, result ? &one : NULL);
    if (st != TPK_OK) {
      char *why = strdup(tpk_last_error());
      st = tpk_runtime_fail(st, "graph '%s', call %d of '%s': %s", d->name, c, call->callee, why ? why : "out of memory");
      free(why);
    } else if (result) {
      add_report(&sum, &one, &longest, c == 0);
    }
  }
  tpk_pool_release(held);
  /* outputs not written in place */
  for (int i = 0; st == TPK_OK && i < d->nresults; i++) {
    TpkBuffer *o = args[nparams + i];
    const void *src = at[d->results[i]];
    void *dst = tpk_buffer_memory(o);
    if (src != dst) memcpy(dst, src, o->bytes);
  }
  if (reserved) atomic_fetch_sub(&dev->used, block);
  if (memory) tpk_scratch_give(dev->ctx, memory, memory_cap);
  free(at);
  free(bytes);
  if (st == TPK_OK && result) *result = sum;
  return st;
}
