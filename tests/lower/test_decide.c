/*
 * test_decide.c — lower/decide.c, IR text in, IR text out: which dots become
 * accumulating dots (`dot %a, %b, %x`) and which ops get `fused=true`.
 * Each case parses its input, runs tpk_decide, and compares the printed
 * module with the expected text; the result verifies, round-trips through
 * the text form, and a second run changes nothing.
 */
#include "support.h"

#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

static char *print_module(const TpkModule *m) {
  TpkStr s = {0};
  tpk_ir_print(&s, m);
  return tpk_str_take(&s);
}

static TpkModule *parse(const char *text) {
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(text, strlen(text), "test", &err);
  if (!m) fail_msg("parse failed: %s\n%s", err.message, text);
  return m;
}

static void decide_all(TpkModule *m) {
  for (int i = 0; i < m->nfuncs; i++) {
    TpkError err = {0};
    if (tpk_decide(m->funcs[i], &err) != TPK_OK) fail_msg("tpk_decide: %s", err.message);
  }
  TpkError err = {0};
  if (tpk_ir_verify(m, &err) != TPK_OK) fail_msg("decided IR does not verify: %s", err.message);
}

static void check_decide(const char *in, const char *want) {
  TpkModule *m = parse(in);
  decide_all(m);
  char *got = print_module(m);
  if (strcmp(got, want) != 0) fail_msg("--- got\n%s--- want\n%s", got, want);
  TpkModule *back = parse(got); /* the decisions read back, and a second run keeps them */
  decide_all(back);
  char *again = print_module(back);
  if (strcmp(again, want) != 0) fail_msg("--- reparsed and decided again\n%s--- want\n%s", again, want);
  free(got);
  free(again);
  tpk_module_free(m);
  tpk_module_free(back);
}

#define DOT_ATTRS "{lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]}"

/* ---- accumulation --------------------------------------------------------------- */

/* x + dot(a, b), either order: the add becomes the dot with x as its
 * accumulator, at the add's place, with the dot's location. */
static void test_dot_into_add(void **state) {
  (void)state;
  check_decide("func @f(%a: f32[8,4], %b: f32[4,8], %x: f32[8,8]) -> (f32[8,8], f32[8,8]) {\n"
               "  %d = dot %a, %b " DOT_ATTRS " : f32[8,8] loc(2:7)\n"
               "  %s = add %x, %d : f32[8,8] loc(2:3)\n"
               "  %e = dot %a, %b " DOT_ATTRS " : f32[8,8] loc(3:7)\n"
               "  %t = add %e, %x : f32[8,8] loc(3:3)\n"
               "  return %s, %t\n"
               "}\n",
               "module \"test\"\n"
               "\n"
               "func @f(%a: f32[8,4], %b: f32[4,8], %x: f32[8,8]) -> (f32[8,8], f32[8,8]) {\n"
               "  %s = dot %a, %b, %x " DOT_ATTRS " : f32[8,8] loc(2:7)\n"
               "  %t = dot %a, %b, %x " DOT_ATTRS " : f32[8,8] loc(3:7)\n"
               "  return %s, %t\n"
               "}\n");
}

/* The product is read elsewhere too, is converted before the add (the
 * conversion is fused into the add instead), or is added inside a loop it
 * is computed outside of: it stays a plain dot. */
static void test_dot_into_add_not_taken(void **state) {
  (void)state;
  const char *two_uses = "module \"test\"\n"
                         "\n"
                         "func @f(%a: f32[8,4], %b: f32[4,8], %x: f32[8,8]) -> (f32[8,8], f32[8,8]) {\n"
                         "  %d = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
                         "  %s = add %x, %d : f32[8,8]\n"
                         "  return %s, %d\n"
                         "}\n";
  check_decide(two_uses, two_uses);
  check_decide("func @f(%a: bf16[8,4], %b: bf16[4,8], %x: bf16[8,8]) -> (bf16[8,8]) {\n"
               "  %d = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
               "  %c = convert %d : bf16[8,8]\n"
               "  %s = add %x, %c : bf16[8,8]\n"
               "  return %s\n"
               "}\n",
               "module \"test\"\n"
               "\n"
               "func @f(%a: bf16[8,4], %b: bf16[4,8], %x: bf16[8,8]) -> (bf16[8,8]) {\n"
               "  %d = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
               "  %c = convert %d {fused=true} : bf16[8,8]\n"
               "  %s = add %x, %c : bf16[8,8]\n"
               "  return %s\n"
               "}\n");
  const char *other_block = "module \"test\"\n"
                            "\n"
                            "func @f(%a: f32[8,4], %b: f32[4,8], %x: f32[8,8]) -> (f32[8,8]) {\n"
                            "  %d = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
                            "  %0 = const {value=0} : i32\n"
                            "  %1 = const {value=4} : i32\n"
                            "  %acc = for %0, %1, %x : f32[8,8] {\n"
                            "  ^(%k: i32, %acc.1: f32[8,8]):\n"
                            "    %acc.2 = add %acc.1, %d : f32[8,8]\n"
                            "    yield %acc.2\n"
                            "  }\n"
                            "  return %acc\n"
                            "}\n";
  check_decide(other_block, other_block);
}

/* dot + dot: one product accumulates into the other, which keeps its tile;
 * x + dot + dot: two accumulations in a chain. */
static void test_dot_sums(void **state) {
  (void)state;
  check_decide("func @two(%a: f32[8,4], %b: f32[4,8], %c: f32[8,4], %d: f32[4,8]) -> (f32[8,8]) {\n"
               "  %p = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
               "  %q = dot %c, %d " DOT_ATTRS " : f32[8,8]\n"
               "  %s = add %p, %q : f32[8,8]\n"
               "  return %s\n"
               "}\n"
               "func @chain(%x: f32[8,8], %a: f32[8,4], %b: f32[4,8], %c: f32[8,4], %d: f32[4,8]) -> (f32[8,8]) {\n"
               "  %p = dot %a, %b " DOT_ATTRS " : f32[8,8]\n"
               "  %s = add %x, %p : f32[8,8]\n"
               "  %q = dot %c, %d " DOT_ATTRS " : f32[8,8]\n"
               "  %t = add %s, %q : f32[8,8]\n"
               "  return %t\n"
               "}\n",
               "module \"test\"\n"
               "\n"
               "func @two(%a: f32[8,4], %b: f32[4,8], %c: f32[8,4], %d: f32[4,8]) -> (f32[8,8]) {\n"
               "  %q = dot %c, %d " DOT_ATTRS " : f32[8,8]\n"
               "  %s = dot %a, %b, %q " DOT_ATTRS " : f32[8,8]\n"
               "  return %s\n"
               "}\n"
               "\n"
               "func @chain(%x: f32[8,8], %a: f32[8,4], %b: f32[4,8], %c: f32[8,4], %d: f32[4,8]) -> (f32[8,8]) {\n"
               "  %s = dot %a, %b, %x " DOT_ATTRS " : f32[8,8]\n"
               "  %t = dot %c, %d, %s " DOT_ATTRS " : f32[8,8]\n"
               "  return %t\n"
               "}\n");
}

/* ---- fusion --------------------------------------------------------------------- */

/* An elementwise chain runs in its last op's loop: broadcasts, iotas,
 * arithmetic, selects, bf16 exp, f32 <-> bf16 conversions are fused; the
 * op whose value leaves the chain (here: returned) is not. */
static void test_chain_into_element_loop(void **state) {
  (void)state;
  check_decide("func @f(%a: f32[8,16], %r: f32[16], %h: bf16[8,16]) -> (f32[8,16]) {\n"
               "  %rb = broadcast %r : f32[8,16]\n"
               "  %m = mul %a, %rb : f32[8,16]\n"
               "  %n = neg %m : f32[8,16]\n"
               "  %col = iota {axis=1} : f32[8,16]\n"
               "  %big = gt %n, %col : bool[8,16]\n"
               "  %sel = select %big, %n, %a : f32[8,16]\n"
               "  %e = exp %h : bf16[8,16]\n"
               "  %w = convert %e : f32[8,16]\n"
               "  %s = add %sel, %w : f32[8,16]\n"
               "  return %s\n"
               "}\n",
               "module \"test\"\n"
               "\n"
               "func @f(%a: f32[8,16], %r: f32[16], %h: bf16[8,16]) -> (f32[8,16]) {\n"
               "  %rb = broadcast %r {fused=true} : f32[8,16]\n"
               "  %m = mul %a, %rb {fused=true} : f32[8,16]\n"
               "  %n = neg %m : f32[8,16]\n"
               "  %col = iota {axis=1, fused=true} : f32[8,16]\n"
               "  %big = gt %n, %col {fused=true} : bool[8,16]\n"
               "  %sel = select %big, %n, %a {fused=true} : f32[8,16]\n"
               "  %e = exp %h {fused=true} : bf16[8,16]\n"
               "  %w = convert %e {fused=true} : f32[8,16]\n"
               "  %s = add %sel, %w : f32[8,16]\n"
               "  return %s\n"
               "}\n");
}

/* Ops the emitter does not compute element by element stay tiles: an f32
 * exp (the primitive library's), a conversion to an integer, an integer
 * division (it reports division by zero); and nothing fuses into them. */
static void test_not_element_loops(void **state) {
  (void)state;
  const char *text = "module \"test\"\n"
                     "\n"
                     "func @f(%a: f32[8,16], %i: i32[8,16]) -> (i32[8,16], i32[8,16]) {\n"
                     "  %m = mul %a, %a : f32[8,16]\n"
                     "  %e = exp %m : f32[8,16]\n"
                     "  %n = neg %e : f32[8,16]\n"
                     "  %c = convert %n : i32[8,16]\n"
                     "  %q = div %i, %i : i32[8,16]\n"
                     "  %r = add %q, %i : i32[8,16]\n"
                     "  return %c, %r\n"
                     "}\n";
  check_decide(text, text);
}

/* An f32 sum or mean over trailing axes adds its operand's elements as it
 * computes them; a max, a sum over a leading axis and an integer sum read
 * a stored tile. */
static void test_chain_into_sum(void **state) {
  (void)state;
  check_decide("func @f(%a: f32[8,16], %i: i32[8,16]) -> (f32[8], f32[8,1], f32[8], f32[16], i32[8]) {\n"
               "  %0 = mul %a, %a : f32[8,16]\n"
               "  %s = reduce %0 {kind=\"sum\", axes=[1], keepdims=false} : f32[8]\n"
               "  %1 = mul %a, %a : f32[8,16]\n"
               "  %2 = add %1, %a : f32[8,16]\n"
               "  %m = reduce %2 {kind=\"mean\", axes=[1], keepdims=true} : f32[8,1]\n"
               "  %3 = mul %a, %a : f32[8,16]\n"
               "  %x = reduce %3 {kind=\"max\", axes=[1], keepdims=false} : f32[8]\n"
               "  %4 = mul %a, %a : f32[8,16]\n"
               "  %l = reduce %4 {kind=\"sum\", axes=[0], keepdims=false} : f32[16]\n"
               "  %5 = mul %i, %i : i32[8,16]\n"
               "  %n = reduce %5 {kind=\"sum\", axes=[1], keepdims=false} : i32[8]\n"
               "  return %s, %m, %x, %l, %n\n"
               "}\n",
               "module \"test\"\n"
               "\n"
               "func @f(%a: f32[8,16], %i: i32[8,16]) -> (f32[8], f32[8,1], f32[8], f32[16], i32[8]) {\n"
               "  %0 = mul %a, %a {fused=true} : f32[8,16]\n"
               "  %s = reduce %0 {kind=\"sum\", axes=[1], keepdims=false} : f32[8]\n"
               "  %1 = mul %a, %a {fused=true} : f32[8,16]\n"
               "  %2 = add %1, %a {fused=true} : f32[8,16]\n"
               "  %m = reduce %2 {kind=\"mean\", axes=[1], keepdims=true} : f32[8,1]\n"
               "  %3 = mul %a, %a : f32[8,16]\n"
               "  %x = reduce %3 {kind=\"max\", axes=[1], keepdims=false} : f32[8]\n"
               "  %4 = mul %a, %a : f32[8,16]\n"
               "  %l = reduce %4 {kind=\"sum\", axes=[0], keepdims=false} : f32[16]\n"
               "  %5 = mul %i, %i : i32[8,16]\n"
               "  %n = reduce %5 {kind=\"sum\", axes=[1], keepdims=false} : i32[8]\n"
               "  return %s, %m, %x, %l, %n\n"
               "}\n");
}

/* A value read twice, read inside a loop it is computed outside of, or
 * stored, is a tile; scalars are never fused. */
static void test_chains_not_fused(void **state) {
  (void)state;
  const char *text = "module \"test\"\n"
                     "\n"
                     "kernel @k(%x: ref<f32[8,16]>, %y: out ref<f32[8,16]>, %s: f32) {\n"
                     "  %a = load %x {index=\"::\"} : f32[8,16]\n"
                     "  %twice = mul %a, %a : f32[8,16]\n"
                     "  %b = add %twice, %twice : f32[8,16]\n"
                     "  %out = mul %a, %a : f32[8,16]\n"
                     "  %0 = const {value=0} : i32\n"
                     "  %1 = const {value=4} : i32\n"
                     "  %acc = for %0, %1, %b : f32[8,16] {\n"
                     "  ^(%k: i32, %acc.1: f32[8,16]):\n"
                     "    %acc.2 = add %acc.1, %out : f32[8,16]\n"
                     "    yield %acc.2\n"
                     "  }\n"
                     "  %t = mul %s, %s : f32\n"
                     "  %tb = broadcast %t : f32[8,16]\n"
                     "  %c = add %acc, %tb : f32[8,16]\n"
                     "  store %y, %c {index=\"::\", mode=\"set\"}\n"
                     "}\n";
  check_decide(text, "module \"test\"\n"
                     "\n"
                     "kernel @k(%x: ref<f32[8,16]>, %y: out ref<f32[8,16]>, %s: f32) {\n"
                     "  %a = load %x {index=\"::\"} : f32[8,16]\n"
                     "  %twice = mul %a, %a : f32[8,16]\n"
                     "  %b = add %twice, %twice : f32[8,16]\n"
                     "  %out = mul %a, %a : f32[8,16]\n"
                     "  %0 = const {value=0} : i32\n"
                     "  %1 = const {value=4} : i32\n"
                     "  %acc = for %0, %1, %b : f32[8,16] {\n"
                     "  ^(%k: i32, %acc.1: f32[8,16]):\n"
                     "    %acc.2 = add %acc.1, %out : f32[8,16]\n"
                     "    yield %acc.2\n"
                     "  }\n"
                     "  %t = mul %s, %s : f32\n"
                     "  %tb = broadcast %t {fused=true} : f32[8,16]\n"
                     "  %c = add %acc, %tb : f32[8,16]\n"
                     "  store %y, %c {index=\"::\", mode=\"set\"}\n"
                     "}\n");
}

/* ---- both ---------------------------------------------------------------------- */

/* Issue 9, bug 1: dot(q_i, k_j^T) + a[i, j] summed over rows in a loop over
 * key blocks (flash attention with a bias). The add was fused into the sum
 * while the dot was left for the add to compute: the emitter never named the
 * dot. Now the add is an accumulating dot, which is no element loop, so the
 * sum reads its tile; the bias block is loaded before the product, so the
 * product's operands live until it runs. */
static void test_bias_sum_in_loop(void **state) {
  (void)state;
  check_decide(
      "kernel @k(%q: ref<f32[16,8]>, %a: ref<f32[16,16]>, %o: out ref<f32[16]>) {\n"
      "  %0 = const {value=0} : i32\n"
      "  %1 = const {value=2} : i32\n"
      "  grid %0, %1 {\n"
      "  ^(%i: tile<8>):\n"
      "    %acc = const {value=0.0} : f32[8]\n"
      "    %acc.1 = for %0, %1, %acc : f32[8] {\n"
      "    ^(%j: tile<8>, %acc.2: f32[8]):\n"
      "      %2 = load %q, %i {index=\"t:\"} : f32[8,8] loc(7:27)\n"
      "      %3 = load %q, %j {index=\"t:\"} : f32[8,8] loc(7:46)\n"
      "      %4 = dot %2, %3 {lhs_contract=[1], rhs_contract=[1], lhs_batch=[], rhs_batch=[]} : f32[8,8] loc(7:23)\n"
      "      %5 = load %a, %i, %j {index=\"tt\"} : f32[8,8] loc(7:58)\n"
      "      %6 = add %4, %5 : f32[8,8] loc(7:23)\n"
      "      %7 = reduce %6 {kind=\"sum\", axes=[1], keepdims=false} : f32[8] loc(7:19)\n"
      "      %acc.3 = add %acc.2, %7 : f32[8] loc(7:13)\n"
      "      yield %acc.3 loc(6:5)\n"
      "    }\n"
      "    store %o, %i, %acc.1 {index=\"t\", mode=\"set\"} loc(9:5)\n"
      "  }\n"
      "}\n",
      "module \"test\"\n"
      "\n"
      "kernel @k(%q: ref<f32[16,8]>, %a: ref<f32[16,16]>, %o: out ref<f32[16]>) {\n"
      "  %0 = const {value=0} : i32\n"
      "  %1 = const {value=2} : i32\n"
      "  grid %0, %1 {\n"
      "  ^(%i: tile<8>):\n"
      "    %acc = const {value=0.0} : f32[8]\n"
      "    %acc.1 = for %0, %1, %acc : f32[8] {\n"
      "    ^(%j: tile<8>, %acc.2: f32[8]):\n"
      "      %2 = load %q, %i {index=\"t:\"} : f32[8,8] loc(7:27)\n"
      "      %3 = load %q, %j {index=\"t:\"} : f32[8,8] loc(7:46)\n"
      "      %4 = load %a, %i, %j {index=\"tt\"} : f32[8,8] loc(7:58)\n"
      "      %5 = dot %2, %3, %4 {lhs_contract=[1], rhs_contract=[1], lhs_batch=[], rhs_batch=[]} : f32[8,8] loc(7:23)\n"
      "      %6 = reduce %5 {kind=\"sum\", axes=[1], keepdims=false} : f32[8] loc(7:19)\n"
      "      %acc.3 = add %acc.2, %6 : f32[8] loc(7:13)\n"
      "      yield %acc.3 loc(6:5)\n"
      "    }\n"
      "    store %o, %i, %acc.1 {index=\"t\", mode=\"set\"} loc(9:5)\n"
      "  }\n"
      "}\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dot_into_add),
      cmocka_unit_test(test_dot_into_add_not_taken),
      cmocka_unit_test(test_dot_sums),
      cmocka_unit_test(test_chain_into_element_loop),
      cmocka_unit_test(test_not_element_loops),
      cmocka_unit_test(test_chain_into_sum),
      cmocka_unit_test(test_chains_not_fused),
      cmocka_unit_test(test_bias_sum_in_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
