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
 */
#include "runtime/internal.h"

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
  TpkStatus st = tpk_units_get(units, kind, key, (int)(sizeof key / sizeof *key), &unit, &claimed);
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
