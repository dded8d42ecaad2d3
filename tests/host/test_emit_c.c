/*
 * test_emit_c.c — host/emit_c.c: which kernels share their grid among threads
 * (tpk_split_grid), how many instances a grid has, and the C that goes with
 * each answer; and that it follows lowering's decisions as the IR states
 * them. The values threads compute are checked in
 * tests/runtime/test_host.c.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"

/* Kernel `name` of text with every shape symbol bound to `size`; *c owns it. */
static TpkFunc *bound(TestCompile *c, const char *text, const char *name, int64_t size) {
  TestCompile open;
  const char *names[8];
  int n = tpk_func_symbols(test_compile_kernel(&open, text, name, NULL), names, 8);
  TpkBinding binds[8];
  for (int i = 0; i < n; i++) binds[i] = (TpkBinding){names[i], size};
  TpkCheckOptions o = {.binds = binds, .nbinds = n, .only_kernel = name};
  test_compile(c, "test.tpk", text, &o);
  test_compile_free(&open);
  if (!c->module) fail_msg("compile failed:\n%s", c->rendered);
  TpkFunc *f = tpk_module_find(c->bound, name);
  assert_non_null(f);
  return f;
}

/* The same, lowered for the host. */
static TpkFunc *lowered(TestCompile *c, const char *text, const char *name, int64_t size) {
  TpkFunc *f = bound(c, text, name, size);
  TpkTarget host = tpk_target_host(0);
  TpkPlan plan;
  TpkError err = {0};
  if (tpk_lower(f, &host, &plan, &err) != TPK_OK) fail_msg("%s: %s", name, err.message);
  tpk_plan_free(&plan);
  return f;
}

static const char *SHARED =
    "kernel rows(x: f32[M, N], b: f32[N]) -> (y: f32[M, N])\n"
    "  tune BM in [8]\n"
    "{\n"
    "  let bias = b[:] * 2.0;\n" /* a load of an input before the grid: every part makes its own */
    "  for i in tiles(M, BM) { y[i, :] = x[i, :] + bias; }\n"
    "}\n"
    "kernel blocks(x: f32[M, N]) -> (amax: f32[((M + 7) / 8) * ((N + 15) / 16)])\n"
    "{\n"
    "  for i in tiles(M, 8), j in tiles(N, 16) {\n"
    "    amax[program_id(0) * num_programs(1) + program_id(1)] = max(abs(x[i, j]));\n"
    "  }\n"
    "}\n"
    "kernel gather_rows(ids: i32[N], table: f32[V, 4]) -> (y: f32[N, 4])\n"
    "{\n"
    "  for i in tiles(N, 2) { y[i, :] = table[ids[i], :]; }\n" /* data picks what is read, not where it goes */
    "}\n"
    "kernel own_adds(x: f32[M, N]) -> (y: f32[M, N] = 0)\n"
    "{\n"
    "  for i in tiles(M, 8), j in tiles(N, 16) {\n" /* each instance adds into its own block only */
    "    for k in 0..3 { y[i, j] += x[i, j]; y[i, j] += 1.0; }\n"
    "  }\n"
    "}\n"
    "kernel grouped_adds(x: f32[M, 6, N]) -> (y: f32[M, 6, N] = 0)\n"
    "{\n"
    "  for b in 0..M, hk in 0..3 {\n" /* instance (b, hk) adds into heads 2 hk and 2 hk + 1 of row b */
    "    let group = 2;\n"
    "    for j in tiles(N, 8) { for g in 0..group { y[b, hk * group + g, j] += x[b, hk * group + g, j]; } }\n"
    "  }\n"
    "}\n"
    "kernel grouped_by_size(x: f32[M, N]) -> (y: f32[M, N] = 0)\n"
    "{\n"
    "  for b in 0..M, hk in 0..2 {\n" /* a run's length from a shape: the same in every instance */
    "    let n = N / 2;\n"
    "    for r in 0..n { y[b, r + n * hk] += x[b, r + n * hk]; }\n"
    "  }\n"
    "}\n";

static const char *NOT_SHARED =
    "kernel two_grids(x: f32[N]) -> (y: f32[N], z: f32[N])\n"
    "{\n"
    "  for i in tiles(N, 8) { y[i] = x[i] * 2.0; }\n"
    "  for i in tiles(N, 8) { z[i] = y[i] + 1.0; }\n"
    "}\n"
    "kernel store_after(x: f32[N]) -> (y: f32[N], first: f32[1])\n"
    "{\n"
    "  for i in tiles(N, 8) { y[i] = x[i] * 2.0; }\n"
    "  first[0] = x[0];\n"
    "}\n"
    "kernel scatter(ids: i32[N], g: f32[N, 4]) -> (grad: f32[V, 4] = 0)\n"
    "{\n"
    "  for t in tiles(N, 8) { grad[ids[t], :] += g[t, :]; }\n"
    "}\n"
    "kernel placed_by_data(pos: i32[N], x: f32[N, 4], inout cache: f32[V, 4]) -> ()\n"
    "{\n"
    "  for b in 0..N { cache[pos[b], :] = x[b, :]; }\n"
    "}\n"
    "kernel reads_output_first(x: f32[N], inout acc: f32[N]) -> ()\n"
    "{\n"
    "  let a0 = acc[0];\n"
    "  for i in tiles(N, 8) { acc[i] = x[i] + a0; }\n"
    "}\n"
    "kernel adds_across(x: f32[M, N]) -> (s: f32[M] = 0)\n"
    "{\n"
    "  for i in tiles(M, 8), j in tiles(N, 16) { s[i] += sum(x[i, j], axis=1); }\n" /* every j adds into s[i] */
    "}\n"
    "kernel adds_crossed(x: f32[N, N]) -> (y: f32[N, N] = 0)\n"
    "{\n"
    "  for i in tiles(N, 8), j in tiles(N, 8) { y[i, j] += x[i, j]; y[j, i] += x[j, i]; }\n" /* (0, 1) and (1, 0) meet */
    "}\n"
    "kernel grouped_overlap(x: f32[N, 8]) -> (y: f32[N, 8] = 0)\n"
    "{\n"
    "  for b in 0..N, hk in 0..2 { for g in 0..3 { y[b, hk * 2 + g] += x[b, g]; } }\n" /* heads 0..3 and 2..5 */
    "}\n"
    "kernel grouped_mixed(x: f32[N, 8]) -> (y: f32[N, 8] = 0)\n"
    "{\n"
    "  for b in 0..N, hk in 0..2 { y[b, hk] += x[b, 0]; for g in 0..2 { y[b, hk * 2 + g] += x[b, g]; } }\n"
    "}\n"
    "kernel grouped_by_instance(x: f32[N, 8]) -> (y: f32[N, 8] = 0)\n"
    "{\n" /* runs of hk + 1: instance 1 adds into 1..3, instance 2 into 4..7, ... but instance 0 into 0..1 */
    "  for b in 0..N, hk in 0..3 { let n = hk + 1; for g in 0..n { y[b, hk * n + g] += x[b, g]; } }\n"
    "}\n"
    "kernel grouped_by_data(n: i32[1], x: f32[N, 8]) -> (y: f32[N, 8] = 0)\n"
    "{\n"
    "  for b in 0..N, hk in 0..2 { let m = n[0]; for g in 0..m { y[b, hk * m + g] += x[b, g]; } }\n"
    "}\n"
    "kernel adds_atomically(x: f32[N]) -> (y: f32[N] = 0)\n"
    "{\n"
    "  for i in tiles(N, 8) { let old = atomic_add(y[i], x[i]); }\n"
    "}\n";

static void test_split_grids(void **state) {
  (void)state;
  static const struct { const char *kernel; int64_t size, instances; } CASES[] = {
      {"rows", 37, 5},   /* ceil(37 / 8) */
      {"rows", 1, 1},
      {"blocks", 37, 15}, /* 5 x 3, flattened */
      {"gather_rows", 9, 5},
      {"own_adds", 37, 15}, /* 5 x 3 */
      {"grouped_adds", 37, 111}, /* 37 x 3 */
      {"grouped_by_size", 37, 74},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    TestCompile c;
    TpkFunc *f = lowered(&c, SHARED, CASES[i].kernel, CASES[i].size);
    const TpkOp *grid = tpk_split_grid(f);
    if (!grid) fail_msg("%s: the grid is not shared", CASES[i].kernel);
    assert_int_equal(grid->opcode, TPK_OP_GRID);
    assert_int_equal(tpk_grid_instances(grid), CASES[i].instances);
    test_compile_free(&c);
  }
}

static void test_grids_kept_whole(void **state) {
  (void)state;
  static const char *const KERNELS[] = {"two_grids",          "store_after",  "scatter",     "placed_by_data",
                                      "reads_output_first", "adds_across", "adds_crossed", "grouped_overlap",
                                      "grouped_mixed", "grouped_by_instance", "grouped_by_data", "adds_atomically"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(KERNELS); i++) {
    TestCompile c;
    TpkFunc *f = lowered(&c, NOT_SHARED, KERNELS[i], 37);
    if (tpk_split_grid(f)) fail_msg("%s: the grid is shared but must run whole", KERNELS[i]);
    test_compile_free(&c);
  }
}

/* Shared grids iterate over this part's share; kernels that run whole
 * return at once in every part but the first. Symbolic sizes share too. */
static void test_generated_c(void **state) {
  (void)state;
  static const struct { const char *text, *kernel; bool shared; } CASES[] = {
      {NULL, "rows", true}, {NULL, "blocks", true}, {NULL, "two_grids", false}, {NULL, "scatter", false}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    const char *text = CASES[i].shared ? SHARED : NOT_SHARED;
    for (int symbolic = 0; symbolic < 2; symbolic++) {
      TestCompile c;
      TpkFunc *f = symbolic ? test_compile_kernel(&c, text, CASES[i].kernel, NULL) : bound(&c, text, CASES[i].kernel, 37);
      TpkTarget host = tpk_target_host(0);
      TpkStr out = {0};
      TpkError err = {0};
      if (tpk_lower_to_c(f, &host, "k", text, 0, &out, NULL, &err) != TPK_OK) fail_msg("%s", err.message);
      const char *body = strstr(out.data, "\nTPK_KERNEL int k(");
      assert_non_null(body);
      bool shares = strstr(body, "tpk_share(p, ") != NULL;
      bool guards = strstr(body, "if (p->parts > 1 && p->part != 0) return 0;") != NULL;
      if (shares != CASES[i].shared || guards == CASES[i].shared)
        fail_msg("%s (%s sizes): shares %d, guards %d\n%s", CASES[i].kernel, symbolic ? "symbolic" : "constant", shares,
                 guards, body);
      tpk_str_free(&out);
      test_compile_free(&c);
    }
  }
}

/* The C of kernel `name` of text, shapes bound to `size` (heap). */
static char *c_of(const char *text, const char *name, int64_t size) {
  TestCompile c;
  TpkFunc *f = bound(&c, text, name, size);
  TpkTarget host = tpk_target_host(0);
  TpkStr out = {0};
  TpkError err = {0};
  if (tpk_lower_to_c(f, &host, "k", text, 0, &out, NULL, &err) != TPK_OK) fail_msg("%s", err.message);
  test_compile_free(&c);
  return tpk_str_take(&out);
}

/* A dot by blocks of rows whose right operand is loaded whole before the
 * grid packs it once, before the grid, and every block's gemm reads it
 * packed, past the plan's workspace; a right operand loaded inside the grid
 * is packed by each gemm as before. Symbolic sizes too. */
static void test_packed_rhs(void **state) {
  (void)state;
  const char *src =
      "kernel whole(x: f32[M, K], w: f32[K, N]) -> (o: f32[M, N])\n"
      "{\n"
      "  o = dot(x, w) * 2.0;\n"
      "}\n"
      "kernel blocked(x: f32[M, K], w: f32[K, N]) -> (o: f32[M, N])\n"
      "{\n"
      "  for i in tiles(M, 64), j in tiles(N, 64) { o[i, j] = dot(x[i, :], w[:, j]); }\n"
      "}\n";
  for (int symbolic = 0; symbolic < 2; symbolic++) {
    TestCompile c;
    TpkFunc *f = symbolic ? test_compile_kernel(&c, src, "whole", NULL) : bound(&c, src, "whole", 300);
    TpkTarget host = tpk_target_host(0);
    TpkStr out = {0};
    TpkError err = {0};
    if (tpk_lower_to_c(f, &host, "k", src, 0, &out, NULL, &err) != TPK_OK) fail_msg("%s", err.message);
    const char *body = strstr(out.data, "\nTPK_KERNEL int k(");
    assert_non_null(body);
    const char *pack = strstr(body, "p->gemm_pack_b(TPK_PRIM_F32, "), *grid = strstr(body, "for (int64_t grid_q");
    const char *use = strstr(body, "p->gemm_packed(TPK_PRIM_F32, ");
    if (!pack || !grid || !use || pack > grid || use < grid || strstr(pack + 1, "p->gemm_pack_b(") || strstr(body, "p->gemm_f32("))
      fail_msg("whole (%s sizes): not packed once before the grid\n%s", symbolic ? "symbolic" : "constant", body);
    const char *ws = strstr(out.data, symbolic ? "int64_t k_layout(" : "int64_t k_workspace(");
    assert_non_null(ws);
    if (symbolic ? !strstr(ws, "TPK_GEMM_PACKED_BYTES(") : !!strstr(ws, "TPK_GEMM_PACKED_BYTES("))
      fail_msg("whole: the workspace does not count the packed operand\n%s", ws);
    if (!symbolic) { /* 300 rows by 64: the plan's blocks, then w packed: 300 x 320 floats, aligned within 64 more bytes */
      long long total = atoll(strstr(ws, "return ") + 7), plan = atoll(strstr(out.data, "workspace ") + 10);
      if (total != (plan + 63) / 64 * 64 + 300 * 320 * 4 + 64) fail_msg("whole: workspace %lld, plan %lld", total, plan);
    }
    tpk_str_free(&out);
    test_compile_free(&c);
  }
  char *blocked = c_of(src, "blocked", 300);
  if (strstr(blocked, "gemm_pack") || !strstr(blocked, "p->gemm_f32("))
    fail_msg("blocked: the right operand is a block of the grid and must not be packed once\n%s", blocked);
  free(blocked);
}

/* The last elementwise op before a store writes the tensor directly when
 * the block is in range (no tile, no copy); not when the store adds, is
 * not right after it, or goes into memory the expression reads in place. */
static void test_direct_store(void **state) {
  (void)state;
  const char *src =
      "kernel direct(x: f32[M, N]) -> (y: f32[M, N])\n"
      "{\n"
      "  for i in tiles(M, 8) { let t = x[i, :]; y[i, :] = t / sum(t, axis=1, keepdims=true); }\n"
      "}\n"
      "kernel adds(x: f32[M, N], inout y: f32[M, N]) -> ()\n"
      "{\n"
      "  for i in tiles(M, 8) { y[i, :] += x[i, :] * 2.0; }\n"
      "}\n"
      "kernel not_next(x: f32[M, N]) -> (y: f32[M, N], z: f32[M, N])\n"
      "{\n"
      "  for i in tiles(M, 8) { let a = x[i, :] * 2.0; z[i, :] = x[i, :]; y[i, :] = a; }\n"
      "}\n"
      "kernel in_place(inout x: f32[M, N]) -> ()\n"
      "{\n"
      "  for i in tiles(M, 8) { x[i, :] = x[i, :] * 2.0; }\n"
      "}\n";
  static const struct { const char *kernel; bool direct; } CASES[] = {
      {"direct", true}, {"adds", false}, {"not_next", false}, {"in_place", false}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    char *code = c_of(src, CASES[i].kernel, 37);
    bool direct = strstr(code, "/* in range: computed straight into ") != NULL;
    if (direct != CASES[i].direct) fail_msg("%s: direct store %d\n%s", CASES[i].kernel, direct, code);
    free(code);
  }
}

/* A block load is a view of its tensor when in range if its later blocked
 * dimensions span their dimension (x[i, j] by blocks of the row's 16
 * columns, as x[i, :]); not when its blocks are narrower than the row, nor
 * when the tensor is written while the block is still read. */
static void test_load_views(void **state) {
  (void)state;
  const char *src =
      "kernel whole(x: f32[M, 16]) -> (y: f32[M, 16])\n"
      "{\n"
      "  for i in tiles(M, 8), j in tiles(16, 16) { y[i, j] = x[i, j] * 3.0; }\n"
      "}\n"
      "kernel narrow(x: f32[M, 32]) -> (y: f32[M, 32])\n"
      "{\n"
      "  for i in tiles(M, 8), j in tiles(32, 16) { y[i, j] = x[i, j] * 3.0; }\n"
      "}\n"
      "kernel written(inout x: f32[M, 16]) -> (y: f32[M, 16])\n"
      "{\n"
      "  for i in tiles(M, 8), j in tiles(16, 16) { let t = x[i, j]; x[i, j] = t * 2.0; y[i, j] = t + 1.0; }\n"
      "}\n";
  static const struct { const char *kernel; bool view; } CASES[] = {{"whole", true}, {"narrow", false}, {"written", false}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    char *code = c_of(src, CASES[i].kernel, 37);
    bool view = strstr(code, "/* in range: a view of the tensor, no copy */") != NULL;
    if (view != CASES[i].view) fail_msg("%s: view %d\n%s", CASES[i].kernel, view, code);
    free(code);
  }
}

/* A product only stored goes straight into the output when the block is
 * in range, its rows the output's row stride apart; not when something
 * else reads it or it accumulates into an addend. */
static void test_dot_stored(void **state) {
  (void)state;
  const char *src =
      "kernel direct(x: f32[M, K], w: f32[K, N]) -> (o: f32[M, N])\n"
      "{\n"
      "  o = dot(x, w);\n"
      "}\n"
      "kernel blocked(x: f32[M, K], w: f32[K, N]) -> (o: f32[M, N])\n"
      "{\n"
      "  for i in tiles(M, 64), j in tiles(N, 64) { o[i, j] = dot(x[i, :], w[:, j]); }\n"
      "}\n"
      "kernel read_again(x: f32[M, K], w: f32[K, N]) -> (o: f32[M, N], r: f32[M, N])\n"
      "{\n"
      "  let p = dot(x, w);\n"
      "  o = p;\n"
      "  r = p * 2.0;\n"
      "}\n"
      "kernel accumulates(x: f32[M, K], w: f32[K, N], b: f32[M, N]) -> (o: f32[M, N])\n"
      "{\n"
      "  o = b + dot(x, w);\n"
      "}\n";
  static const struct { const char *kernel; bool direct; } CASES[] = {
      {"direct", true}, {"blocked", true}, {"read_again", false}, {"accumulates", false}};
  for (size_t i = 0; i < TPK_ARRAY_LEN(CASES); i++) {
    char *code = c_of(src, CASES[i].kernel, 300);
    bool direct = strstr(code, "/* in range: the product straight into ") != NULL;
    if (direct != CASES[i].direct) fail_msg("%s: product stored directly %d\n%s", CASES[i].kernel, direct, code);
    free(code);
  }
}

/* An iota feeding an elementwise op is an index in its loop, not a tile. */
static void test_iota_fuses(void **state) {
  (void)state;
  const char *src = "kernel pick(x: f32[M, N], col: i32[M]) -> (y: f32[M])\n"
                    "{\n"
                    "  for i in tiles(M, 8), j in tiles(N, 16) {\n"
                    "    let cols = j.start + iota(i32[8, 16], axis=1);\n"
                    "    y[i] = reshape(sum(where(cols == reshape(col[i], [8, 1]), x[i, j], 0.0), axis=1, keepdims=true), [8]);\n"
                    "  }\n"
                    "}\n";
  TestCompile c;
  TpkFunc *f = lowered(&c, src, "pick", 37);
  const TpkOp *grid = f->body->first;
  while (grid && grid->opcode != TPK_OP_GRID) grid = grid->next;
  assert_non_null(grid);
  int iotas = 0;
  for (const TpkOp *op = grid->regions[0]->first; op; op = op->next)
    if (op->opcode == TPK_OP_IOTA) {
      assert_true(tpk_op_is_fused(op));
      iotas++;
    }
  assert_int_equal(iotas, 1);
  test_compile_free(&c);
}

/* A sum or mean over trailing axes or leading ones takes an element
 * expression without storing it; other reductions (max) read a stored
 * tile. */
static void test_sum_fuses(void **state) {
  (void)state;
  const char *src = "kernel stats(x: f32[M, N]) -> (a: f32[M], b: f32[N], c: f32[M])\n"
                    "{\n"
                    "  let t = x[:, :];\n"
                    "  a = reshape(mean(t * t, axis=1, keepdims=true), [M]);\n"
                    "  b = sum(t * 2.0, axis=0);\n"
                    "  c = max(t * 3.0, axis=1);\n"
                    "}\n";
  TestCompile c;
  TpkFunc *f = lowered(&c, src, "stats", 37);
  int muls = 0;
  for (const TpkOp *op = f->body->first; op; op = op->next) {
    const TpkBlock *b = op->opcode == TPK_OP_GRID ? op->regions[0] : NULL;
    for (const TpkOp *o = b ? b->first : op; o; o = b ? o->next : NULL) {
      if (o->opcode != TPK_OP_MUL) continue;
      const TpkOp *use = tpk_value_single_user(&o->out[0]);
      assert_non_null(use);
      bool want = use->opcode == TPK_OP_REDUCE && tpk_op_reduce_kind(use) != TPK_REDUCE_MAX;
      if (tpk_op_is_fused(o) != want)
        fail_msg("a mul feeding a %s reduce: fused %d", tpk_enum_name(TPK_ENUM_REDUCE_KIND, tpk_op_reduce_kind(use)), !want);
      muls++;
      if (!b) break;
    }
  }
  assert_int_equal(muls, 3);
  test_compile_free(&c);
}

/* The C for IR text as it stands (no passes): the emitter follows the
 * decisions written in the IR. NULL and *err filled when emitting fails. */
static char *emit_ir(const char *text, TpkError *err) {
  TpkModule *m = tpk_ir_parse(text, strlen(text), "test", err);
  if (!m) fail_msg("%s", err->message);
  TpkTarget host = tpk_target_host(0);
  TpkPlan plan;
  if (tpk_plan_memory(m->funcs[0], &host, &plan, err) != TPK_OK) fail_msg("%s", err->message);
  TpkStr c = {0};
  TpkStatus st = tpk_emit_c(m->funcs[0], &plan, "k", NULL, TPK_EMIT_NO_PRELUDE, &c, err);
  tpk_plan_free(&plan);
  tpk_module_free(m);
  if (st == TPK_OK) return tpk_str_take(&c);
  tpk_str_free(&c);
  return NULL;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* A mul marked fused=true gets no tile and is computed in the add's loop;
 * unmarked, it is a tile of its own. A value marked fused into a max (which
 * the host cannot fuse into) is an error, not a guess. */
/* The kernel of test_fusion_read_from_ir with the given attributes on the
 * mul feeding an add and the mul feeding a max. */
static char *two_muls(const char *into_add, const char *into_max) {
  TpkStr s = {0};
  tpk_str_puts(&s, "kernel @k(%x: ref<f32[8,16]>, %y: out ref<f32[8,16]>, %z: out ref<f32[8]>) {\n"
                   "  %a = load %x {index=\"::\"} : f32[8,16]\n");
  tpk_str_printf(&s, "  %%m = mul %%a, %%a%s : f32[8,16]\n", into_add);
  tpk_str_printf(&s, "  %%n = mul %%a, %%a%s : f32[8,16]\n", into_max);
  /* the max before the add: the add is in no run with the mul (emit_run) */
  tpk_str_puts(&s, "  %r = reduce %n {kind=\"max\", axes=[1], keepdims=false} : f32[8]\n"
                   "  store %z, %r {index=\":\", mode=\"set\"}\n"
                   "  %s = add %m, %a : f32[8,16]\n"
                   "  store %y, %s {index=\"::\", mode=\"set\"}\n"
                   "}\n");
  return tpk_str_take(&s);
}

/* A mul marked fused=true gets no tile and is computed in the add's loop;
 * unmarked, it is a tile of its own. A value marked fused into a max (which
 * the host cannot fuse into) is an error, not a guess. */
static void test_fusion_read_from_ir(void **state) {
  (void)state;
  TpkError err = {0};
  char *text = two_muls("", "");
  char *plain = emit_ir(text, &err);
  free(text);
  text = two_muls(" {fused=true}", "");
  char *fused = emit_ir(text, &err);
  free(text);
  assert_non_null(plain);
  assert_non_null(fused);
  assert_int_equal(count(plain, " bytes */"), count(fused, " bytes */") + 1);
  free(plain);
  free(fused);
  text = two_muls("", " {fused=true}");
  assert_null(emit_ir(text, &err));
  free(text);
  assert_non_null(strstr(err.message, "the host fuses only into f32 sums and means over trailing or leading axes"));
}

/* Element ops over one shape are one loop (emit_run): values only the run
 * reads are C locals, not tiles; stores write from the loop; a value a
 * reduction reads after the run keeps its tile. */
static void test_runs(void **state) {
  (void)state;
  const char *text = "kernel @k(%x: ref<f32[8,16]>, %y: ref<f32[8,16]>, %o1: out ref<f32[8,16]>, "
                     "%o2: out ref<f32[8,16]>, %o3: out ref<f32[8]>) {\n"
                     "  %a = load %x {index=\"::\"} : f32[8,16]\n"
                     "  %b = load %y {index=\"::\"} : f32[8,16]\n"
                     "  %m = mul %a, %b : f32[8,16]\n"
                     "  store %o1, %m {index=\"::\", mode=\"set\"}\n"
                     "  %t = sub %m, %a : f32[8,16]\n"
                     "  %u = add %t, %m : f32[8,16]\n"
                     "  store %o2, %u {index=\"::\", mode=\"set\"}\n"
                     "  %r = reduce %t {kind=\"max\", axes=[1], keepdims=false} : f32[8]\n"
                     "  store %o3, %r {index=\":\", mode=\"set\"}\n"
                     "}\n";
  TpkError err = {0};
  char *c = emit_ir(text, &err);
  assert_non_null(c);
  assert_non_null(strstr(c, "one loop: 3 element ops"));
  assert_int_equal(count(c, "#pragma GCC ivdep"), 1);
  assert_int_equal(count(c, "(W + "), 4); /* tiles a, b, t (the max reads it), r: not m, not u */
  free(c);
}

/* A tile stored once and read again is its stored block when that is in
 * range (store_view_of): computed there, copied only otherwise. Not when
 * anything else touches the memory: here a second store into it. */
static void test_stored_tile_is_the_block(void **state) {
  (void)state;
#define STORED_AND_READ                                                                                      \
  "kernel @k(%x: ref<f32[8,16]>, %w: ref<f32[16,16]>, %y: out ref<f32[8,16]>, %z: out ref<f32[8,16]>) {\n"      \
  "  %a = load %x {index=\"::\"} : f32[8,16]\n"                                                                  \
  "  %b = load %w {index=\"::\"} : f32[16,16]\n"                                                                 \
  "  %h = dot %a, %b {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[8,16]\n"           \
  "  store %y, %h {index=\"::\", mode=\"set\"}\n"                                                                \
  "  %g = tanh %h : f32[8,16]\n"                                                                               \
  "  store %z, %g {index=\"::\", mode=\"set\"}\n"
  TpkError err = {0};
  char *c = emit_ir(STORED_AND_READ "}\n", &err);
  assert_non_null(c);
  assert_int_equal(count(c, "the block it is stored to"), 1);
  assert_non_null(strstr(c, "if (!(1)) {")); /* the store's copy, when the block is not the tile */
  free(c);
  c = emit_ir(STORED_AND_READ "  store %y, %g {index=\"::\", mode=\"set\"}\n}\n", &err);
  assert_non_null(c);
  assert_null(strstr(c, "the block it is stored to"));
  free(c);
#undef STORED_AND_READ
  /* x @ w + b: b's rows go straight into the product's tile, which is the
   * stored block (starts_dot): no tile of the broadcast's own */
  c = emit_ir("kernel @k(%x: ref<f32[8,16]>, %w: ref<f32[16,16]>, %b: ref<f32[16]>, %y: out ref<f32[8,16]>) {\n"
              "  %a = load %x {index=\"::\"} : f32[8,16]\n"
              "  %v = load %w {index=\"::\"} : f32[16,16]\n"
              "  %c = load %b {index=\":\"} : f32[16]\n"
              "  %r = broadcast %c : f32[8,16]\n"
              "  %h = dot %a, %v, %r {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[8,16]\n"
              "  store %y, %h {index=\"::\", mode=\"set\"}\n"
              "}\n",
              &err);
  assert_non_null(c);
  assert_int_equal(count(c, "(W + "), 4); /* a, v, c and the product: not the broadcast */
  assert_int_equal(count(c, "the block it is stored to"), 1);
  free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_grids),
      cmocka_unit_test(test_grids_kept_whole),
      cmocka_unit_test(test_generated_c),
      cmocka_unit_test(test_direct_store),
      cmocka_unit_test(test_load_views),
      cmocka_unit_test(test_dot_stored),
      cmocka_unit_test(test_iota_fuses),
      cmocka_unit_test(test_sum_fuses),
      cmocka_unit_test(test_fusion_read_from_ir),
      cmocka_unit_test(test_runs),
      cmocka_unit_test(test_stored_tile_is_the_block),
      cmocka_unit_test(test_packed_rhs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
