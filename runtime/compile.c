/*
 * compile.c — a graph into a program: tpk_graph_compile, and the same for
 * the eager streams' windows and ops (eager.c).
 *
 *   graph func (ir/graph.h) ─► clone, with the kernels it calls, into a
 *   module of its own ─► tpk_fuse (lower/fuse.c): a driver of clusters ─►
 *   a program whose one kernel runs the driver (driver.c), its clusters
 *   compiled once for every shape (runtime.c)
 *
 * A func of a structure compiled before (tpk_func_hash: names aside, sizes
 * by their symbolic form, dtypes, the fusion policy) is the same program,
 * from the context's cache of compiled units (units.c); the program keeps
 * the name it was first compiled under (messages, traces), which is the
 * name of the graph when names do not differ.
 *
 * On disk, a compiled graph is its fused module in the IR's text form
 * (ir/README.md), after a line naming the driver: what fusion made, so a
 * later process that finds it under the unit's key parses it and makes the
 * program (tpk_program_from_driver) without building or fusing anything;
 * its clusters' code is then found by their own keys (runtime.c). The
 * eager windows keep theirs the same way (eager.c).
 */
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "lower/lower.h"

/* f and every function it calls, cloned into a new module. */
static TpkStatus clone_graph(const TpkFunc *f, TpkModule **module, TpkFunc **out, TpkError *err) {
  TpkModule *m = *module = tpk_module_new(f->name);
  if (!m) return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  /* the callees first, so the clone's calls name functions of its module */
  for (const TpkOp *op = f->body->first; op; op = op->next) {
    if (op->opcode != TPK_OP_CALL) continue;
    const char *name = tpk_op_str(op, "callee", "");
    if (tpk_module_find(m, name)) continue;
    const TpkFunc *callee = tpk_module_find(f->module, name);
    if (!callee) return tpk_error(err, TPK_ERR_INVALID, "graph '%s' calls '%s', which its module does not have", f->name, name);
    if (!tpk_func_clone(m, callee, NULL, NULL, err)) return err->code ? err->code : TPK_ERR_NOMEM;
  }
  *out = tpk_func_clone(m, f, NULL, NULL, err);
  return *out ? TPK_OK : err->code ? err->code : TPK_ERR_NOMEM;
}

/* TPK_DUMP_IR: the graph's IR, then what fusion made of it. */
static void dump(TpkContext *ctx, const char *when, const TpkModule *m) {
  TpkStr s = {0};
  tpk_str_printf(&s, "// %s\n", when);
  tpk_ir_print(&s, m);
  if (!s.failed) tpk_context_log(ctx, s.data);
  tpk_str_free(&s);
}

static TpkStatus compile(TpkContext *ctx, const TpkFunc *f, TpkFusePolicy policy, TpkProgram **out) {
  TpkModule *m;
  TpkFunc *g = NULL;
  TpkError err = {0};
  TpkStatus st = clone_graph(f, &m, &g, &err);
  bool dumps = tpk_context_dumps_ir(ctx);
  if (st == TPK_OK && dumps) dump(ctx, "graph, before fusion", m);
  if (st == TPK_OK) st = tpk_fuse_keeping(g, policy, tpk_std_kernel_is, ctx, &err);
  if (st != TPK_OK) {
    tpk_module_free(m);
    return tpk_runtime_fail(st, "graph '%s': %s", f->name, err.message[0] ? err.message : "out of memory");
  }
  if (dumps) dump(ctx, policy == TPK_FUSE_ALL ? "graph, fused: the driver and its clusters" : "graph, one cluster per op: the driver and its clusters", m);
  return tpk_program_from_driver(ctx, m, g, out);
}

TpkStatus tpk_compile_graph(TpkContext *ctx, const TpkFunc *f, TpkFusePolicy policy, TpkProgram **out) {
  *out = NULL;
  if (!tpk_context_enter(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "graph '%s': its context was destroyed", f->name);
  TpkStatus st = compile(ctx, f, policy, out);
  tpk_context_leave(ctx);
  return st;
}

static void program_unit_free(void *payload) { tpk_program_release(payload); }

bool tpk_program_save(const TpkProgram *p, TpkStr *out) {
  const TpkModule *m = tpk_program_ir(p);
  int driver = -1;
  for (int i = 0; m && i < m->nfuncs; i++)
    if (!m->funcs[i]->is_kernel && strcmp(m->funcs[i]->name, tpk_program_name(p)) == 0) driver = i;
  if (driver < 0) return false; /* not a compiled graph */
  tpk_str_printf(out, "tpk graph %d\n", driver);
  tpk_ir_print(out, m);
  return !out->failed;
}

TpkProgram *tpk_program_restore(TpkContext *ctx, const char *bytes, size_t len) {
  /* TPK_DUMP_IR promises the log each graph before and after fusion: the
   * graph is compiled again, not taken from the folder */
  if (tpk_context_dumps_ir(ctx)) return NULL;
  int driver, at = 0;
  if (sscanf(bytes, "tpk graph %d\n%n", &driver, &at) != 1 || at <= 0 || (size_t)at > len) return NULL;
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(bytes + at, len - (size_t)at, "cache", &err);
  if (!m) return NULL;
  if (driver < 0 || driver >= m->nfuncs || m->funcs[driver]->is_kernel) {
    tpk_module_free(m);
    return NULL;
  }
  TpkProgram *p;
  return tpk_program_from_driver(ctx, m, m->funcs[driver], &p) == TPK_OK ? p : NULL;
}

static bool graph_save(const void *payload, TpkStr *out) { return tpk_program_save(payload, out); }
static void *graph_load(TpkContext *ctx, const char *bytes, size_t len) { return tpk_program_restore(ctx, bytes, len); }
static const TpkUnitCodec graph_codec = {TPK_UNIT_GRAPH, graph_save, graph_load, program_unit_free};

TpkStatus tpk_compile_func(TpkContext *ctx, const TpkFunc *f, TpkFusePolicy policy, int kind, TpkProgram **out) {
  *out = NULL;
  TpkFuncHash h = tpk_func_hash(f);
  if (!h.lo && !h.hi) return tpk_runtime_fail(TPK_ERR_NOMEM, "out of memory");
  /* The name is in the key: it names the program's kernel. */
  uint64_t key[] = {TPK_UNIT_KEY_GRAPH, h.lo, h.hi, tpk_hash_bytes(f->name, strlen(f->name)), (uint64_t)policy};
  if (!tpk_context_enter(ctx)) return tpk_runtime_fail(TPK_ERR_INVALID, "graph '%s': its context was destroyed", f->name);
  TpkUnits *units = tpk_context_units(ctx);
  TpkUnit *unit;
  bool claimed;
  TpkStatus st = tpk_units_get_kept(units, kind, &graph_codec, key, (int)(sizeof key / sizeof *key), &unit, &claimed);
  if (st == TPK_OK && claimed) {
    TpkProgram *p;
    st = compile(ctx, f, policy, &p);
    if (st == TPK_OK) tpk_unit_ready(units, unit, p, program_unit_free);
    else tpk_unit_abandon(units, unit);
  }
  if (st == TPK_OK) {
    *out = tpk_unit_payload(unit);
    tpk_program_retain(*out);
    tpk_unit_release(unit);
  }
  tpk_context_leave(ctx);
  return st;
}

TpkStatus tpk_graph_compile(TpkGraph *g, TpkProgram **out) {
  if (!out) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_compile: no place for the program");
  *out = NULL;
  if (!g) return tpk_runtime_fail(TPK_ERR_INVALID, "tpk_graph_compile: no graph");
  return tpk_compile_func(tpk_graph_context(g), tpk_gb_func(tpk_graph_builder(g)), TPK_FUSE_ALL, TPK_UNIT_GRAPH, out);
}
