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
 * (ir/README.md) twice: once with every kernel as its header only (the
 * driver and the signatures it calls), with the kernels' hashes, then
 * whole (see tpk_program_save). A later process that finds it under the
 * unit's key parses the short text and makes the program
 * (tpk_program_from_kept) without building, fusing or hashing anything;
 * its clusters' code is then found by their keys (runtime.c), and a
 * standard kernel it calls by its name and hash (the build recorded it):
 * the kernels' bodies are parsed only if one must be bound. The eager
 * windows keep theirs the same way (eager.c).
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

/* The entry (tpk graph2): a header line, then one line per kernel
 * "<func index> <hash lo> <hash hi>" (hex), then the module's text with
 * every kernel as its header only (its body empty), `skeleton` bytes,
 * then the module's text whole:
 *
 *   tpk graph2 <driver's func index> <kernels> <skeleton bytes> <whole text's bytes>
 *
 * Restoring parses the short text (the driver and the kernels'
 * signatures: all a launch reads of them when their code and its sizes'
 * facts are in the folder), keys the kernels by the hashes written here,
 * and parses the bodies only if one must be bound (runtime.c,
 * kernel_body). The whole entry is authenticated (host/jit.c), so the
 * hashes are as trustworthy as the text; one that does not parse or does
 * not fit makes no program, and the window or graph is built again. */
bool tpk_program_save(const TpkProgram *p, TpkStr *out) {
  const TpkModule *m = tpk_program_ir(p);
  int driver = -1, nkernels = 0;
  for (int i = 0; m && i < m->nfuncs; i++) {
    if (!m->funcs[i]->is_kernel && strcmp(m->funcs[i]->name, tpk_program_name(p)) == 0) driver = i;
    nkernels += m->funcs[i]->is_kernel;
  }
  if (driver < 0) return false; /* not a compiled graph */
  TpkStr hashes = {0}, skeleton = {0}, whole = {0}, func = {0};
  tpk_ir_print(&whole, m);
  const char *first_line = whole.data ? strchr(whole.data, '\n') : NULL;
  if (first_line) tpk_str_putn(&skeleton, whole.data, (size_t)(first_line + 1 - whole.data)); /* module "..." */
  for (int i = 0; first_line && i < m->nfuncs; i++) {
    const TpkFunc *f = m->funcs[i];
    func.len = 0;
    tpk_ir_print_func(&func, f);
    const char *header_end = func.data ? strchr(func.data, '\n') : NULL;
    if (!header_end) {
      skeleton.failed = true;
      break;
    }
    tpk_str_putc(&skeleton, '\n');
    if (f->is_kernel) { /* "kernel @name(...) ... {" then "}" */
      TpkFuncHash h = tpk_func_hash(f);
      tpk_str_printf(&hashes, "%d %016llx %016llx\n", i, (unsigned long long)h.lo, (unsigned long long)h.hi);
      tpk_str_putn(&skeleton, func.data, (size_t)(header_end + 1 - func.data));
      tpk_str_puts(&skeleton, "}\n");
    } else {
      tpk_str_putn(&skeleton, func.data, func.len);
    }
  }
  bool ok = first_line && !hashes.failed && !skeleton.failed && !whole.failed && !func.failed;
  if (ok) {
    tpk_str_printf(out, "tpk graph2 %d %d %zu %zu\n", driver, nkernels, skeleton.len, whole.len);
    if (hashes.len) tpk_str_putn(out, hashes.data, hashes.len);
    tpk_str_putn(out, skeleton.data, skeleton.len);
    tpk_str_putn(out, whole.data, whole.len);
  }
  tpk_str_free(&hashes);
  tpk_str_free(&skeleton);
  tpk_str_free(&whole);
  tpk_str_free(&func);
  return ok && !out->failed;
}

/* A hexadecimal word of the entry's kernel lines, then a space or a line's end. */
static bool read_hex(const char **p, const char *end, char after, uint64_t *out) {
  uint64_t v = 0;
  int digits = 0;
  for (; *p < end && digits <= 16; (*p)++, digits++) {
    char c = **p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    v = v << 4 | (uint64_t)d;
  }
  if (digits == 0 || digits > 16 || *p >= end || **p != after) return false;
  (*p)++;
  *out = v;
  return true;
}

static bool read_int(const char **p, const char *end, char after, int64_t max, int64_t *out) {
  int64_t v = 0;
  const char *start = *p;
  for (; *p < end && **p >= '0' && **p <= '9' && v <= max; (*p)++) v = v * 10 + (**p - '0');
  if (*p == start || v > max || *p >= end || **p != after) return false;
  (*p)++;
  *out = v;
  return true;
}

TpkProgram *tpk_program_restore(TpkContext *ctx, const char *bytes, size_t len) {
  /* TPK_DUMP_IR promises the log each graph before and after fusion: the
   * graph is compiled again, not taken from the folder */
  if (tpk_context_dumps_ir(ctx)) return NULL;
  static const char tag[] = "tpk graph2 ";
  const char *p = bytes, *end = bytes + len;
  int64_t driver, nkernels, skeleton_len, whole_len;
  if (len < sizeof tag - 1 || memcmp(bytes, tag, sizeof tag - 1) != 0) return NULL;
  p += sizeof tag - 1;
  if (!read_int(&p, end, ' ', 1 << 20, &driver) || !read_int(&p, end, ' ', 1 << 20, &nkernels) ||
      !read_int(&p, end, ' ', (int64_t)len, &skeleton_len) || !read_int(&p, end, '\n', (int64_t)len, &whole_len))
    return NULL;
  int64_t *index = calloc((size_t)nkernels + 1, sizeof *index);
  TpkFuncHash *kept = calloc((size_t)nkernels + 1, sizeof *kept);
  bool ok = index && kept;
  for (int64_t i = 0; ok && i < nkernels; i++)
    ok = read_int(&p, end, ' ', 1 << 20, &index[i]) && read_hex(&p, end, ' ', &kept[i].lo) && read_hex(&p, end, '\n', &kept[i].hi);
  ok = ok && skeleton_len + whole_len == end - p; /* nothing cut */
  TpkError err = {0};
  TpkModule *m = ok ? tpk_ir_parse(p, (size_t)skeleton_len, "cache", &err) : NULL;
  TpkFuncHash *hashes = m ? calloc((size_t)m->nfuncs + 1, sizeof *hashes) : NULL;
  /* the kernels listed are every kernel of the module, each once, as its header only */
  ok = hashes && driver < m->nfuncs && !m->funcs[driver]->is_kernel;
  int64_t listed = 0;
  for (int i = 0; ok && i < m->nfuncs; i++) listed += m->funcs[i]->is_kernel;
  ok = ok && listed == nkernels;
  for (int64_t i = 0; ok && i < nkernels; i++) {
    const TpkFunc *f = index[i] < m->nfuncs ? m->funcs[index[i]] : NULL;
    ok = f && f->is_kernel && (!f->body || !f->body->first) && (kept[i].lo || kept[i].hi) && !(hashes[index[i]].lo || hashes[index[i]].hi);
    if (ok) hashes[index[i]] = kept[i];
  }
  TpkProgram *prog = NULL;
  if (ok) {
    const char *whole = p + skeleton_len;
    if (tpk_program_from_kept(ctx, m, m->funcs[driver], hashes, whole, (size_t)(end - whole), &prog) != TPK_OK) prog = NULL;
  } else if (m) {
    tpk_module_free(m);
  }
  free(index);
  free(kept);
  free(hashes);
  return prog;
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
