/*
 * test_ir_hash.c — tpk_func_hash, through the text form: edits the text
 * form shows but that do not change what the function computes (names,
 * locations, the module, attribute order, how a dim is spelt) keep the
 * hash; every other kind of edit changes it; a clone hashes as its
 * original, a bound clone does not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* A kernel with everything the hash reads (params of each role, tunables
 * bound and not, a requirement, a backward kernel, a grid, a loop, an if,
 * attributes of each kind) and a func with results. */
static const char BASE[] =
    "module \"a.tpk\"\n"
    "\n"
    "kernel @k(%x: ref<f32[M,N]> loc(1:10), %y: out ref<f32[M,N]>, %s: i32) backward @k_bwd "
    "tune{BM in [8, 16], BK=256} require{le(M, N) loc(2:3)} loc(1:1) {\n"
    "  %m = sym {name=\"M\"} : i32 loc(3:3)\n"
    "  %bm = sym {name=\"BM\"} : i32\n"
    "  %nt = cdiv %m, %bm : i32\n"
    "  %c0 = const {value=0} : i32\n"
    "  %c1 = const {value=1} : i32\n"
    "  grid %c0, %nt {\n"
    "  ^(%i: tile<BM>):\n"
    "    %t = load %x, %i {index=\"t:\", other=-inf} : f32[BM,N] loc(5:13)\n"
    "    %buf = alloc : ref<f32[BM,N], vmem>\n"
    "    %a = exp %t : f32[BM,N]\n"
    "    %b = sub %t, %a : f32[BM,N]\n"
    "    %r = reduce %b {kind=\"max\", axes=[1], keepdims=true} : f32[BM,1]\n"
    "    %rb = broadcast %r : f32[BM,N]\n"
    "    %acc = for %c0, %s, %rb : f32[BM,N] {\n"
    "    ^(%kk: i32, %acc.1: f32[BM,N]):\n"
    "      %h = const {value=0.5} : f32[BM,N]\n"
    "      %n = mul %acc.1, %h : f32[BM,N]\n"
    "      yield %n\n"
    "    }\n"
    "    %z = eq %s, %c1 : bool\n"
    "    %o = if %z : f32[BM,N] {\n"
    "      yield %acc\n"
    "    } {\n"
    "      yield %b\n"
    "    }\n"
    "    store %y, %i, %o {index=\"t:\", mode=\"set\"}\n"
    "  }\n"
    "}\n"
    "\n"
    "func @g(%p: f32[4,B*H], %q: f32[4,B*H]) -> (f32[4,B*H]) {\n"
    "  %0 = add %p, %q : f32[4,B*H]\n"
    "  %1 = div %0, %q : f32[4,B*H]\n"
    "  return %1\n"
    "}\n";

/* `text` with `from` replaced by `to` (every occurrence when `all`). */
static char *edit(const char *text, const char *from, const char *to, bool all) {
  size_t nf = strlen(from), nt = strlen(to);
  char *out = malloc(strlen(text) * (nt + 1) + 1), *w = out;
  int n = 0;
  for (const char *p = text; *p;) {
    if ((all || n == 0) && strncmp(p, from, nf) == 0) {
      memcpy(w, to, nt);
      w += nt;
      p += nf;
      n++;
    } else {
      *w++ = *p++;
    }
  }
  *w = 0;
  if (!n) fail_msg("'%s' is not in the text", from);
  return out;
}

static TpkModule *parse(const char *text) {
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(text, strlen(text), "test", &err);
  if (!m) fail_msg("%s\n%s", err.message, text);
  return m;
}

/* The hash of function `name` of the module parsed from text. */
static TpkFuncHash hash_of(const char *text, const char *name) {
  TpkModule *m = parse(text);
  TpkFunc *f = tpk_module_find(m, name);
  if (!f) fail_msg("no function @%s", name);
  TpkFuncHash h = tpk_func_hash(f);
  assert_true(h.lo != 0);
  tpk_module_free(m);
  return h;
}

/* Equal, or different in both halves: the two chains are independent, so
 * an edit that changes one and not the other would be a bug. */
static bool same(TpkFuncHash a, TpkFuncHash b) {
  if ((a.lo == b.lo) != (a.hi == b.hi))
    fail_msg("the halves disagree: %016llx%016llx, %016llx%016llx", (unsigned long long)a.hi,
             (unsigned long long)a.lo, (unsigned long long)b.hi, (unsigned long long)b.lo);
  return tpk_func_hash_equal(a, b);
}

typedef struct Edit {
  const char *what, *from, *to;
  bool all;
  const char *func;      /* the function whose hash is compared (NULL: k) */
  const char *from2, *to2; /* a second edit, when one is not enough */
} Edit;

static void check_edits(const Edit *edits, size_t n, bool equal) {
  TpkFuncHash k = hash_of(BASE, "k"), g = hash_of(BASE, "g");
  assert_false(same(k, g));
  for (size_t i = 0; i < n; i++) {
    const Edit *e = &edits[i];
    char *text = edit(BASE, e->from, e->to, e->all);
    if (e->from2) {
      char *again = edit(text, e->from2, e->to2, false);
      free(text);
      text = again;
    }
    const char *name = e->func ? e->func : "k";
    TpkFuncHash before = strcmp(name, "g") == 0 ? g : k, after = hash_of(text, name);
    if (same(before, after) != equal)
      fail_msg("%s: the hash %s (%016llx, %016llx)", e->what, equal ? "changed" : "did not change",
               (unsigned long long)before.lo, (unsigned long long)after.lo);
    free(text);
  }
}

static void test_equal_when_only_names_and_places_differ(void **state) {
  (void)state;
  static const Edit same[] = {
      {"value names", "%t", "%tile_of_x", true, NULL},
      {"named values become numbered", "%c0", "%7", true, NULL},
      {"numbered values become named", "%0", "%sum", true, "g"},
      {"parameter names", "%x", "%input", true, NULL},
      {"a func's parameter names", "%q", "%other", true, "g"},
      {"an op's location dropped", " loc(5:13)", "", false, NULL},
      {"a parameter's location moved", "loc(1:10)", "loc(7:2)", false, NULL},
      {"the function's location moved", "loc(1:1)", "loc(30:1)", false, NULL},
      {"a requirement's location dropped", " loc(2:3)", "", false, NULL},
      {"the module's name", "module \"a.tpk\"", "module \"elsewhere.tpk\"", false, NULL},
      {"the kernel's name", "@k(", "@same_code(", false, "same_code"},
      {"attributes in another order", "{index=\"t:\", other=-inf}", "{other=-inf, index=\"t:\"}", false, NULL},
      {"a dim spelt another way", "f32[4,B*H]", "f32[4,H*B]", true, "g"},
      {"a dim spelt another way", "require{le(M, N)", "require{le(M*1+0, N)", false, NULL},
      /* the module interns other dims and types first: pointers differ */
      {"other functions first", "module \"a.tpk\"\n", "module \"a.tpk\"\nfunc @z(%a: f32[H*2,B,N,M]) -> () {\n}\n",
       false, NULL},
      {"other functions first", "module \"a.tpk\"\n", "module \"a.tpk\"\nfunc @z(%a: f32[H*2,B,N,M]) -> () {\n}\n",
       false, "g"},
  };
  check_edits(same, sizeof same / sizeof *same, true);
}

static void test_different_for_each_kind_of_difference(void **state) {
  (void)state;
  static const Edit differ[] = {
      {"an op", "exp %t", "log %t", false, NULL},
      {"operands swapped", "sub %t, %a", "sub %a, %t", false, NULL},
      {"a commutative op's operands swapped", "add %p, %q", "add %q, %p", false, "g"},
      {"an operand from another value", "%n = mul %acc.1, %h", "%n = mul %h, %h", false, NULL},
      {"an int attribute", "{value=1}", "{value=2}", false, NULL},
      {"a float attribute", "{value=0.5}", "{value=0.25}", false, NULL},
      {"a float attribute's sign", "other=-inf", "other=inf", false, NULL},
      {"an optional attribute dropped", ", other=-inf", "", false, NULL},
      {"a string attribute", "{name=\"M\"}", "{name=\"N\"}", false, NULL},
      {"an enum attribute", "kind=\"max\"", "kind=\"min\"", false, NULL},
      {"a store mode", "mode=\"set\"", "mode=\"add\"", false, NULL},
      {"a dtype", "f32[4,B*H]", "f16[4,B*H]", true, "g"},
      {"a dim's symbol", "B*H", "B*G", true, "g"},
      {"a dim's constant", "f32[4,B*H]", "f32[5,B*H]", true, "g"},
      {"a dim's expression", "f32[4,B*H]", "f32[4,B+H]", true, "g"},
      {"a memory space", "ref<f32[BM,N], vmem>", "ref<f32[BM,N], smem>", false, NULL},
      {"a parameter's role", "%y: out ref", "%y: inout ref", false, NULL},
      {"an output zeroed", "%y: out ref", "%y: out zero ref", false, NULL},
      {"a parameter's type", "%y: out ref<f32[M,N]>", "%y: out ref<f32[N,N]>", false, NULL},
      {"an output", "return %1", "return %0", false, "g"},
      {"the if's regions exchanged", "yield %acc\n    } {\n      yield %b", "yield %b\n    } {\n      yield %acc", false,
       NULL},
      {"an op added to a region", "      yield %n\n", "      %dead = neg %n : f32[BM,N]\n      yield %n\n", false, NULL},
      {"an op moved out of a region", "      %h = const {value=0.5} : f32[BM,N]\n", "", false, NULL, "    %acc = for",
       "    %h = const {value=0.5} : f32[BM,N]\n    %acc = for"},
      {"a tunable's name", "BM", "BT", true, NULL},
      {"a tunable's default", "BM in [8, 16]", "BM in [16, 8]", false, NULL},
      {"a tunable's choices", "BM in [8, 16]", "BM in [8, 32]", false, NULL},
      {"a tunable bound", "BM in [8, 16]", "BM=8 in [8, 16]", false, NULL},
      {"a bound tunable's value", "BK=256", "BK=128", false, NULL},
      {"a requirement's comparison", "le(M, N)", "lt(M, N)", false, NULL},
      {"a requirement's sides", "le(M, N)", "le(N, M)", false, NULL},
      {"a requirement dropped", " require{le(M, N) loc(2:3)}", "", false, NULL},
      {"the backward kernel", "@k_bwd", "@k_grad", false, NULL},
      {"the backward clause dropped", " backward @k_bwd", "", false, NULL},
  };
  check_edits(differ, sizeof differ / sizeof *differ, false);
}

/* Float attributes hash by value: -0.0 is not 0.0; every NaN is one. */
static void test_float_bits(void **state) {
  (void)state;
  char *neg = edit(BASE, "{value=0.5}", "{value=-0.0}", false), *pos = edit(BASE, "{value=0.5}", "{value=0.0}", false);
  assert_false(same(hash_of(neg, "k"), hash_of(pos, "k")));
  free(neg);
  free(pos);
  TpkModule *m = parse(BASE);
  TpkFunc *k = tpk_module_find(m, "k");
  TpkOp *grid = k->body->last, *load = grid->regions[0]->first;
  assert_int_equal(load->opcode, TPK_OP_LOAD);
  tpk_op_set_float(m, load, "other", __builtin_nan(""));
  TpkFuncHash h = tpk_func_hash(k);
  tpk_op_set_float(m, load, "other", -__builtin_nan("0x5"));
  assert_true(same(tpk_func_hash(k), h));
  tpk_module_free(m);
}

typedef struct Sizes {
  const TpkBinding *b;
  int n;
} Sizes;

static bool lookup(void *ctx, const char *sym, int64_t *value) {
  const Sizes *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->b[i].name, sym) == 0) return *value = s->b[i].value, true;
  return false;
}

static void test_clones(void **state) {
  (void)state;
  TpkModule *m = parse(BASE);
  TpkError err = {0};
  for (int i = 0; i < m->nfuncs; i++) {
    const TpkFunc *f = m->funcs[i];
    TpkFuncHash h = tpk_func_hash(f);
    TpkModule *dst = tpk_module_new("clone");
    TpkFunc *c = tpk_func_clone(dst, f, NULL, NULL, &err);
    if (!c) fail_msg("%s", err.message);
    assert_true(same(tpk_func_hash(c), h));
    tpk_module_free(dst);
  }
  const TpkFunc *k = tpk_module_find(m, "k");
  TpkFuncHash unbound = tpk_func_hash(k);
  /* bound to the tunables' defaults: the same code, but specialised */
  static const TpkBinding defaults[] = {{"BM", 8}};
  static const TpkBinding sizes[] = {{"M", 64}, {"N", 128}};
  static const TpkBinding both[] = {{"BM", 8}, {"M", 64}, {"N", 128}};
  const Sizes cases[] = {{defaults, 1}, {sizes, 2}, {both, 3}};
  TpkFuncHash seen[3];
  for (int i = 0; i < 3; i++) {
    TpkModule *dst = tpk_module_new("bound");
    Sizes s = cases[i];
    TpkFunc *c = tpk_func_clone(dst, k, lookup, &s, &err);
    if (!c) fail_msg("%s", err.message);
    seen[i] = tpk_func_hash(c);
    assert_false(same(seen[i], unbound));
    for (int j = 0; j < i; j++) assert_false(same(seen[j], seen[i]));
    /* and one clone of it, printed and parsed back, hashes as it */
    TpkStr text = {0};
    tpk_ir_print(&text, dst);
    assert_true(same(hash_of(text.data, "k"), seen[i]));
    tpk_str_free(&text);
    tpk_module_free(dst);
  }
  tpk_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_equal_when_only_names_and_places_differ),
      cmocka_unit_test(test_different_for_each_kind_of_difference),
      cmocka_unit_test(test_float_bits),
      cmocka_unit_test(test_clones),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
