/*
 * test_parser.c — dsl/grammar.y and dsl/parse.c: the contract's examples
 * parse, trees print exactly, spans cover their text, every syntax error
 * gives the one diagnostic we expect and parsing goes on, and hostile input
 * (deep nesting, huge sums, random bytes, a tiny arena) never crashes.
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

#include "dsl/parse_int.h"
#include "support.h"

typedef struct Parsed {
  TpkSource src;
  TpkDiags diags;
  TpkParsed parsed;
  TpkStatus status;
  char *rendered; /* diagnostics */
  char *ast;      /* tpk_ast_print */
} Parsed;

static void parse_limited(Parsed *p, const char *text, size_t len, size_t arena_limit) {
  memset(p, 0, sizeof *p);
  p->src = (TpkSource){"t.tpk", text, len};
  tpk_diags_init(&p->diags, &p->src);
  p->status = tpk_parse_with_limit(&p->src, &p->parsed, &p->diags, arena_limit);
  TpkStr s = {0};
  tpk_diags_render(&s, &p->diags);
  p->rendered = tpk_str_take(&s);
  tpk_ast_print(&s, p->parsed.file);
  p->ast = tpk_str_take(&s);
}

static void parse(Parsed *p, const char *text) { parse_limited(p, text, strlen(text), 0); }

static void parsed_free(Parsed *p) {
  tpk_diags_free(&p->diags);
  tpk_parsed_free(&p->parsed);
  free(p->rendered);
  free(p->ast);
}

static int count_items(const Parsed *p, TpkAstKind kind) {
  int n = 0;
  for (const TpkAst *i = p->parsed.file ? p->parsed.file->body : NULL; i; i = i->next) n += i->kind == kind;
  return n;
}

/* Check the tree invariant later passes rely on: depth is right and bounded. */
static int check_depth(const TpkAst *n) {
  int d = 0;
  const TpkAst *const single[] = {n->lhs, n->rhs};
  for (int i = 0; i < 2; i++)
    if (single[i]) {
      int c = check_depth(single[i]);
      if (c > d) d = c;
    }
  const TpkAst *const lists[] = {n->args,   n->dims,    n->body,  n->els,     n->ranges,
                                 n->params, n->outputs, n->tunes, n->requires};
  for (size_t i = 0; i < TPK_ARRAY_LEN(lists); i++)
    for (const TpkAst *c = lists[i]; c; c = c->next) {
      int cd = check_depth(c);
      if (cd > d) d = cd;
    }
  assert_int_equal(n->depth, d + 1);
  if (n->kind != TPK_AST_FILE) assert_true(n->depth <= TPK_MAX_DEPTH);
  return n->depth;
}

/* ---- the contract's §7 examples ---------------------------------------------- */

/* The contract's examples live in tests/corpus, one kernel a file; the
 * last one gathers the §1 and §6 constructs. Loaded by load_examples. */
static const char *const EXAMPLE_FILES[] = {"add", "softmax", "matmul", "layernorm", "flash_attention",
                                            "embedding_bwd"};
enum { NEXAMPLES = TPK_ARRAY_LEN(EXAMPLE_FILES) + 1 };
static char *EXAMPLES[NEXAMPLES];

static const char CONSTRUCTS[] =
    "// line comment            /* block comment */\n"
    "const LANES = 128;                       // integer compile-time constant\n"
    "kernel update(inout p: f32[N], g: f32[N], lr: f32) -> ()\n"
    "  tune BN in [LANES, 2 * LANES]\n"
    "{\n"
    "  for i in tiles(N, BN) {\n"
    "    scratch buf: f32[BN];\n"
    "    let c = copy_async(g[i], buf);\n"
    "    wait(c);\n"
    "    if program_id(0) == 0 { p[i] -= lr * buf; } else if lr > 0.5 { p[i] *= 1.; } else { p[i] /= 2; }\n"
    "  }\n"
    "}\n";

static int load_examples(void **state) {
  (void)state;
  for (size_t i = 0; i < TPK_ARRAY_LEN(EXAMPLE_FILES); i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/corpus/%s.tpk", EXAMPLE_FILES[i]);
    EXAMPLES[i] = test_read_file(test_path(rel), NULL);
    if (!EXAMPLES[i]) return -1;
  }
  EXAMPLES[NEXAMPLES - 1] = strdup(CONSTRUCTS);
  return EXAMPLES[NEXAMPLES - 1] ? 0 : -1;
}

static int free_examples(void **state) {
  (void)state;
  for (int i = 0; i < NEXAMPLES; i++) free(EXAMPLES[i]);
  return 0;
}

static void test_examples_parse(void **state) {
  (void)state;
  TpkStr all = {0};
  for (size_t i = 0; i < NEXAMPLES; i++) {
    Parsed p;
    parse(&p, EXAMPLES[i]);
    if (p.rendered[0]) fprintf(stderr, "example %zu:\n%s", i, p.rendered);
    assert_string_equal(p.rendered, "");
    assert_int_equal(p.status, TPK_OK);
    assert_int_equal(count_items(&p, TPK_AST_KERNEL), 1);
    check_depth(p.parsed.file);
    parsed_free(&p);
    tpk_str_puts(&all, EXAMPLES[i]);
  }
  Parsed p;
  parse(&p, all.data);
  assert_string_equal(p.rendered, "");
  assert_int_equal(count_items(&p, TPK_AST_KERNEL), (int)NEXAMPLES);
  assert_int_equal(count_items(&p, TPK_AST_CONST), 1);
  parsed_free(&p);
  tpk_str_free(&all);
}

/* ---- exact trees --------------------------------------------------------------- */

static void assert_ast(const char *text, const char *want) {
  Parsed p;
  parse(&p, text);
  assert_string_equal(p.rendered, "");
  assert_string_equal(p.ast, want);
  parsed_free(&p);
}

static void test_ast_add(void **state) {
  (void)state;
  assert_ast(EXAMPLES[0], "(file\n"
                          "  (kernel add\n"
                          "    (param x f32\n"
                          "      (name N))\n"
                          "    (param y f32\n"
                          "      (name N))\n"
                          "    (output o f32\n"
                          "      (name N))\n"
                          "    (body\n"
                          "      (assign =\n"
                          "        (name o)\n"
                          "        (binary +\n"
                          "          (name x)\n"
                          "          (name y))))))\n");
}

static void test_ast_empty(void **state) {
  (void)state;
  assert_ast("", "(file)\n");
  assert_ast("  // nothing\n/* at all */\n", "(file)\n");
  assert_ast("kernel e() -> () {}", "(file\n  (kernel e\n    (body)))\n");
}

/* Bitwise operators bind as in Python and Rust: | ^ & then shifts, all
 * looser than + - and tighter than comparisons, so `x & m == 0` is
 * `(x & m) == 0`. */
static void test_ast_bitwise_precedence(void **state) {
  (void)state;
  assert_ast("const F = a | b ^ c & d << 1 + 2 == ~e >> f;\n",
             "(file\n"
             "  (const F\n"
             "    (binary ==\n"
             "      (binary |\n"
             "        (name a)\n"
             "        (binary ^\n"
             "          (name b)\n"
             "          (binary &\n"
             "            (name c)\n"
             "            (binary <<\n"
             "              (name d)\n"
             "              (binary +\n"
             "                (int 1)\n"
             "                (int 2))))))\n"
             "      (binary >>\n"
             "        (unary ~\n"
             "          (name e))\n"
             "        (name f)))))\n");
}

static void test_ast_precedence(void **state) {
  (void)state;
  assert_ast("const A = 1 + 2 * 3 - 4 % 5 / 6;\n"
             "const B = -a as f32 * b as bf16;\n"
             "const C = !a && b || c != d;\n"
             "const D = x[0][1].id.start;\n"
             "const E = [];\n",
             "(file\n"
             "  (const A\n"
             "    (binary -\n"
             "      (binary +\n"
             "        (int 1)\n"
             "        (binary *\n"
             "          (int 2)\n"
             "          (int 3)))\n"
             "      (binary /\n"
             "        (binary %\n"
             "          (int 4)\n"
             "          (int 5))\n"
             "        (int 6))))\n"
             "  (const B\n"
             "    (binary *\n"
             "      (cast f32\n"
             "        (unary -\n"
             "          (name a)))\n"
             "      (cast bf16\n"
             "        (name b))))\n"
             "  (const C\n"
             "    (binary ||\n"
             "      (binary &&\n"
             "        (unary !\n"
             "          (name a))\n"
             "        (name b))\n"
             "      (binary !=\n"
             "        (name c)\n"
             "        (name d))))\n"
             "  (const D\n"
             "    (field start\n"
             "      (field id\n"
             "        (index\n"
             "          (index\n"
             "            (name x)\n"
             "            (int 0))\n"
             "          (int 1)))))\n"
             "  (const E\n"
             "    (list)))\n");
}

static void test_ast_constructs(void **state) {
  (void)state;
  assert_ast("const LANES = 0x80;\n"
             "kernel k(inout p: f32[N], eps: f32) -> (y: f32[B*H, 2] = 0) backward k_bwd tune BM in [8, 16] require 1 <= N {\n"
             "  scratch buf: f32[BM, 4];\n"
             "  let a = -x as bf16 * 2.5 + 1e-5;\n"
             "  var b = a[i, :, 0..64, j.., ..8].start;\n"
             "  b /= f(a, [1, 2], axis=1, keepdims=true);\n"
             "  if a == b && !c || d < 1 { y[i] = b; } else if d { } else { wait(c); }\n"
             "  for i in 0..N, t in tiles(T, BT) { x = i32; z = (i8[2]); }\n"
             "}\n",
             "(file\n"
             "  (const LANES\n"
             "    (int 128))\n"
             "  (kernel k\n"
             "    (param inout p f32\n"
             "      (name N))\n"
             "    (param eps f32)\n"
             "    (output y f32\n"
             "      (binary *\n"
             "        (name B)\n"
             "        (name H))\n"
             "      (int 2)\n"
             "      (init\n"
             "        (int 0)))\n"
             "    (backward k_bwd)\n"
             "    (tune BM\n"
             "      (int 8)\n"
             "      (int 16))\n"
             "    (require\n"
             "      (binary <=\n"
             "        (int 1)\n"
             "        (name N)))\n"
             "    (body\n"
             "      (scratch buf f32\n"
             "        (name BM)\n"
             "        (int 4))\n"
             "      (let a\n"
             "        (binary +\n"
             "          (binary *\n"
             "            (cast bf16\n"
             "              (unary -\n"
             "                (name x)))\n"
             "            (float 2.5))\n"
             "          (float 1e-05)))\n"
             "      (var b\n"
             "        (field start\n"
             "          (index\n"
             "            (name a)\n"
             "            (name i)\n"
             "            (slice)\n"
             "            (slice lo hi\n"
             "              (int 0)\n"
             "              (int 64))\n"
             "            (slice lo\n"
             "              (name j))\n"
             "            (slice hi\n"
             "              (int 8)))))\n"
             "      (assign /=\n"
             "        (name b)\n"
             "        (call f\n"
             "          (name a)\n"
             "          (list\n"
             "            (int 1)\n"
             "            (int 2))\n"
             "          (kwarg axis\n"
             "            (int 1))\n"
             "          (kwarg keepdims\n"
             "            (bool true))))\n"
             "      (if\n"
             "        (binary ||\n"
             "          (binary &&\n"
             "            (binary ==\n"
             "              (name a)\n"
             "              (name b))\n"
             "            (unary !\n"
             "              (name c)))\n"
             "          (binary <\n"
             "            (name d)\n"
             "            (int 1)))\n"
             "        (then\n"
             "          (assign =\n"
             "            (index\n"
             "              (name y)\n"
             "              (name i))\n"
             "            (name b)))\n"
             "        (else\n"
             "          (if\n"
             "            (name d)\n"
             "            (then)\n"
             "            (else\n"
             "              (expr\n"
             "                (call wait\n"
             "                  (name c)))))))\n"
             "      (for\n"
             "        (range i\n"
             "          (int 0)\n"
             "          (name N))\n"
             "        (tiles t\n"
             "          (name T)\n"
             "          (name BT))\n"
             "        (body\n"
             "          (assign =\n"
             "            (name x)\n"
             "            (type i32))\n"
             "          (assign =\n"
             "            (name z)\n"
             "            (type i8\n"
             "              (int 2))))))))\n");
}

/* Trailing commas are accepted where lists run over several lines. */
static void test_trailing_commas(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel k(a: f32[N], b: f32,) -> (c: f32[N],) tune B in [1, 2,] { c = f(a, b, [1, 2,],); }");
  assert_string_equal(p.rendered, "");
  parsed_free(&p);
}

/* ---- spans ----------------------------------------------------------------------- */

/* `node` spans exactly the first occurrence of `sub` in `text`. */
static void assert_covers(const char *text, TpkSpan span, const char *sub, int line, int col) {
  const char *at = strstr(text, sub);
  assert_non_null(at);
  assert_int_equal(span.offset, (uint32_t)(at - text));
  assert_int_equal(span.len, (uint32_t)strlen(sub));
  assert_int_equal(span.line, line);
  assert_int_equal(span.col, col);
}

static void test_spans(void **state) {
  (void)state;
  const char *text = "kernel add(x: f32[N], eps: f32) -> (o: f32[N]) {\n"
                     "  for i in tiles(N, 8) {\n"
                     "    o[i] = (x[i] + eps) as f32 * max(x, axis=0);\n"
                     "  }\n"
                     "}";
  Parsed p;
  parse(&p, text);
  assert_string_equal(p.rendered, "");
  const TpkAst *k = p.parsed.file->body;
  assert_covers(text, k->span, text, 1, 1);
  assert_covers(text, k->name_span, "add", 1, 8);
  assert_covers(text, k->params->span, "x: f32[N]", 1, 12);
  assert_covers(text, k->params->next->span, "eps: f32", 1, 23);
  assert_covers(text, k->params->next->name_span, "eps", 1, 23);
  assert_covers(text, k->outputs->span, "o: f32[N]", 1, 37);
  const TpkAst *f = k->body;
  assert_covers(text, f->span, "for i in tiles(N, 8) {\n    o[i] = (x[i] + eps) as f32 * max(x, axis=0);\n  }", 2, 3);
  assert_covers(text, f->ranges->span, "i in tiles(N, 8)", 2, 7);
  const TpkAst *a = f->body;
  assert_int_equal(a->kind, TPK_AST_ASSIGN);
  assert_covers(text, a->span, "o[i] = (x[i] + eps) as f32 * max(x, axis=0);", 3, 5);
  assert_covers(text, a->lhs->span, "o[i]", 3, 5);
  const TpkAst *mul = a->rhs;
  assert_int_equal(mul->kind, TPK_AST_BINARY);
  assert_covers(text, mul->span, "(x[i] + eps) as f32 * max(x, axis=0)", 3, 12);
  assert_covers(text, mul->lhs->span, "(x[i] + eps) as f32", 3, 12);
  assert_covers(text, mul->lhs->lhs->span, "(x[i] + eps)", 3, 12);
  assert_covers(text, mul->rhs->span, "max(x, axis=0)", 3, 34);
  assert_covers(text, mul->rhs->args->next->span, "axis=0", 3, 41);
  parsed_free(&p);
}

/* ---- syntax errors --------------------------------------------------------------- */

static void assert_diags(const char *text, const char *want) {
  Parsed p;
  parse(&p, text);
  assert_string_equal(p.rendered, want);
  assert_int_equal(p.status, TPK_ERR_PARSE);
  assert_non_null(p.parsed.file);
  check_depth(p.parsed.file);
  parsed_free(&p);
}

static void test_error_missing_semicolon(void **state) {
  (void)state;
  assert_diags("kernel a(x: f32[N]) -> (y: f32[N]) {\n"
               "  let t = x * 2\n"
               "  y = t;\n"
               "}\n",
               "t.tpk:3:3: error: expected ';' after expression, found 'y'\n"
               "     y = t;\n"
               "     ^\n");
  assert_diags("const A = 1 const B = 2;",
               "t.tpk:1:13: error: expected ';' after expression, found 'const'\n"
               "   const A = 1 const B = 2;\n"
               "               ^~~~~\n");
}

static void test_error_unclosed_paren(void **state) {
  (void)state;
  assert_diags("kernel a(x: f32[N]) -> (y: f32[N]) {\n"
               "  let t = (x + 1;\n"
               "  y = exp(t, 1;\n"
               "}\n",
               "t.tpk:2:17: error: expected ')', found ';'\n"
               "     let t = (x + 1;\n"
               "                   ^\n"
               "t.tpk:3:15: error: expected ')', found ';'\n"
               "     y = exp(t, 1;\n"
               "                 ^\n");
  assert_diags("const A = f(x, ];",
               "t.tpk:1:16: error: expected ')', found ']'\n"
               "   const A = f(x, ];\n"
               "                  ^\n");
}

static void test_error_unterminated_comment(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel a(x: f32[N]) -> (y: f32[N]) {\n"
            "  y = x; /* the rest\n"
            "}\n");
  /* one error: the end of file inside the comment is not a second one */
  assert_string_equal(p.rendered, "t.tpk:2:10: error: unterminated comment\n"
                                  "     y = x; /* the rest\n"
                                  "            ^~\n");
  assert_int_equal(count_items(&p, TPK_AST_KERNEL), 1);
  parsed_free(&p);
}

static void test_error_bad_character(void **state) {
  (void)state;
  assert_diags("kernel a(x: f32[N]) -> (y: f32[N]) {\n"
               "  y = x # 2;\n"
               "  y = x \xe2\x88\x97 2;\n"
               "}\n",
               "t.tpk:2:9: error: invalid character '#'\n"
               "     y = x # 2;\n"
               "           ^\n"
               "t.tpk:3:9: error: invalid character\n"
               "     y = x \xe2\x88\x97 2;\n"
               "           ^~~\n");
}

static void test_error_stray_brace(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel a(x: f32[N]) -> (y: f32[N]) {\n"
            "  y = x;\n"
            "}\n"
            "}\n"
            "const B = 4;\n");
  assert_string_equal(p.rendered, "t.tpk:4:1: error: unexpected '}'\n"
                                  "   }\n"
                                  "   ^\n");
  assert_int_equal(count_items(&p, TPK_AST_KERNEL), 1);
  assert_int_equal(count_items(&p, TPK_AST_CONST), 1);
  parsed_free(&p);
  assert_diags("const A = (1));",
               "t.tpk:1:14: error: unexpected ')'\n"
               "   const A = (1));\n"
               "                ^\n");
}

static void test_error_two_in_one_file(void **state) {
  (void)state;
  assert_diags("kernel a(x: f32[N]) -> (y: f32[N]) {\n"
               "  let = x;\n"
               "  y = x +* 2;\n"
               "}\n",
               "t.tpk:2:7: error: expected a name, found '='\n"
               "     let = x;\n"
               "         ^\n"
               "t.tpk:3:10: error: expected an expression, found '*'\n"
               "     y = x +* 2;\n"
               "            ^\n");
}

static void test_error_then_good_kernel(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel a(x f32[N]) -> (y: f32[N]) {\n"
            "  for i in tiles(N, 8) { y[i] = x[i]; }\n"
            "}\n"
            "kernel b(x: f32[N]) -> (y: f32[N]) {\n"
            "  if x < 1 {\n"
            "    y = (x;\n"
            "  }\n"
            "}\n"
            "kernel c(x: f32[N]) -> (y: f32[N]) { y = x; }\n");
  assert_string_equal(p.rendered, "t.tpk:1:12: error: expected ':', found 'f32'\n"
                                  "   kernel a(x f32[N]) -> (y: f32[N]) {\n"
                                  "              ^~~\n"
                                  "t.tpk:6:11: error: expected ')', found ';'\n"
                                  "       y = (x;\n"
                                  "             ^\n");
  /* a's header is broken: it is dropped; b lost one statement; c is whole */
  assert_string_equal(p.ast, "(file\n"
                             "  (kernel b\n"
                             "    (param x f32\n"
                             "      (name N))\n"
                             "    (output y f32\n"
                             "      (name N))\n"
                             "    (body\n"
                             "      (if\n"
                             "        (binary <\n"
                             "          (name x)\n"
                             "          (int 1))\n"
                             "        (then))))\n"
                             "  (kernel c\n"
                             "    (param x f32\n"
                             "      (name N))\n"
                             "    (output y f32\n"
                             "      (name N))\n"
                             "    (body\n"
                             "      (assign =\n"
                             "        (name y)\n"
                             "        (name x)))))\n");
  parsed_free(&p);
}

static void test_error_end_of_file(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel a(x: f32[N]) -> (y: f32[N]) {\n"
            "  for i in tiles(N, 8) {\n"
            "    y[i] = x[i];\n"
            "  }\n"
            "\n");
  assert_string_equal(p.rendered, "t.tpk:4:4: error: unexpected end of file\n"
                                  "     }\n"
                                  "      ^\n"
                                  "hint: the '{' on line 1 is never closed\n");
  assert_int_equal(count_items(&p, TPK_AST_KERNEL), 1); /* kept all the same */
  parsed_free(&p);
  assert_diags("const A = f(1,",
               "t.tpk:1:15: error: unexpected end of file\n"
               "   const A = f(1,\n"
               "                 ^\n"
               "hint: the '(' on line 1 is never closed\n");
}

static void test_error_kernel_inside_block(void **state) {
  (void)state;
  Parsed p;
  parse(&p, "kernel a(x: f32[N]) -> (y: f32[N]) {\n"
            "  y = x;\n"
            "\n"
            "kernel b(x: f32[N]) -> (y: f32[N]) { y = x; }\n");
  assert_string_equal(p.rendered, "t.tpk:4:1: error: expected '}', found 'kernel'\n"
                                  "   kernel b(x: f32[N]) -> (y: f32[N]) { y = x; }\n"
                                  "   ^~~~~~\n"
                                  "hint: the '{' on line 1 is never closed\n");
  assert_int_equal(count_items(&p, TPK_AST_KERNEL), 2);
  parsed_free(&p);
}

static void test_error_messages(void **state) {
  (void)state;
  assert_diags("const A = 1 < 2 < 3;",
               "t.tpk:1:17: error: comparison operators cannot be chained, found '<'\n"
               "   const A = 1 < 2 < 3;\n"
               "                   ^\n"
               "hint: write (a < b) && (b < c)\n");
  assert_diags("kernel k() -> () { if a = b { } }",
               "t.tpk:1:25: error: expected '{', found '='\n"
               "   kernel k() -> () { if a = b { } }\n"
               "                           ^\n"
               "hint: use '==' to compare\n");
  assert_diags("kernel k() { }",
               "t.tpk:1:12: error: expected '->', found '{'\n"
               "   kernel k() { }\n"
               "              ^\n");
  /* `backward` comes before the tunables and names one kernel */
  assert_diags("kernel k(x: f32[N]) -> (y: f32[N]) tune B in [1] backward k2 { }",
               "t.tpk:1:50: error: expected '{', found 'backward'\n"
               "   kernel k(x: f32[N]) -> (y: f32[N]) tune B in [1] backward k2 { }\n"
               "                                                    ^~~~~~~~\n");
  assert_diags("kernel k(x: f32[N]) -> (y: f32[N]) backward { }",
               "t.tpk:1:45: error: expected a name, found '{'\n"
               "   kernel k(x: f32[N]) -> (y: f32[N]) backward { }\n"
               "                                               ^\n");
  assert_diags("x = 1;",
               "t.tpk:1:1: error: expected 'kernel' or 'const', found 'x'\n"
               "   x = 1;\n"
               "   ^\n");
  assert_diags("kernel k() -> () { for i in 0 N { } }",
               "t.tpk:1:31: error: expected '..', found 'N'\n"
               "   kernel k() -> () { for i in 0 N { } }\n"
               "                                 ^\n");
  assert_diags("kernel k() -> () { else { } }",
               "t.tpk:1:20: error: expected a statement, found 'else'\n"
               "   kernel k() -> () { else { } }\n"
               "                      ^~~~\n");
  assert_diags("kernel k() -> () { let t = tiles(N, 128); }",
               "t.tpk:1:28: error: expected an expression, found 'tiles'\n"
               "   kernel k() -> () { let t = tiles(N, 128); }\n"
               "                              ^~~~~\n"
               "hint: tiles(N, B) is a loop range: for i in tiles(N, B) { ... }\n");
  assert_diags("kernel k() -> () { 1 + 2 = 3; f(a=1, 2); }",
               "t.tpk:1:20: error: cannot assign to this expression\n"
               "   kernel k() -> () { 1 + 2 = 3; f(a=1, 2); }\n"
               "                      ^~~~~\n"
               "hint: assign to a name (acc = ...) or a tensor element (y[i, :] = ...)\n"
               "t.tpk:1:38: error: positional argument after a keyword argument\n"
               "   kernel k() -> () { 1 + 2 = 3; f(a=1, 2); }\n"
               "                                        ^\n");
}

/* ---- limits and hostile input ------------------------------------------------------ */

static char *repeat_between(const char *head, const char *unit, size_t n, const char *mid, const char *tail_unit,
                            size_t m, const char *tail) {
  TpkStr s = {0};
  tpk_str_puts(&s, head);
  for (size_t i = 0; i < n; i++) tpk_str_puts(&s, unit);
  tpk_str_puts(&s, mid);
  for (size_t i = 0; i < m; i++) tpk_str_puts(&s, tail_unit);
  tpk_str_puts(&s, tail);
  return tpk_str_take(&s);
}

static void assert_one_error(const char *text, const char *message) {
  Parsed p;
  parse(&p, text);
  assert_int_equal(p.diags.errors, 1);
  assert_string_equal(p.diags.items[0].message, message);
  assert_non_null(p.parsed.file);
  check_depth(p.parsed.file);
  parsed_free(&p);
}

static void test_deep_parens(void **state) {
  (void)state;
  char *text = repeat_between("const A = ", "(", 100000, "1", ")", 100000, ";\nconst B = 2;\n");
  assert_one_error(text, "expression nested too deeply (limit 200)");
  free(text);
  text = repeat_between("const A = ", "[", 100000, "1", "]", 100000, ";");
  assert_one_error(text, "expression nested too deeply (limit 200)");
  free(text);
  /* exactly at the limit is fine */
  text = repeat_between("const A = ", "(", 150, "1", ")", 150, ";");
  Parsed p;
  parse(&p, text);
  assert_string_equal(p.rendered, "");
  parsed_free(&p);
  free(text);
}

static void test_long_sum(void **state) {
  (void)state;
  char *text = repeat_between("kernel k() -> () { let a = x", "+x", 100000, ";", "", 0, " }\nconst B = 1;");
  Parsed p;
  parse(&p, text);
  assert_int_equal(p.diags.errors, 1);
  assert_string_equal(p.diags.items[0].message, "expression nested too deeply (limit 200)");
  assert_int_equal(count_items(&p, TPK_AST_CONST), 1); /* parsing went on */
  check_depth(p.parsed.file);
  assert_true(strlen(p.ast) > 0);
  parsed_free(&p);
  free(text);
  /* a long chain that stays shallow is fine: 150 terms */
  text = repeat_between("const A = x", "+x", 150, ";", "", 0, "");
  parse(&p, text);
  assert_string_equal(p.rendered, "");
  parsed_free(&p);
  free(text);
}

static void test_deep_other_nesting(void **state) {
  (void)state;
  char *text = repeat_between("const A = ", "-", 100000, "1", "", 0, ";");
  assert_one_error(text, "nesting too deep");
  free(text);
  text = repeat_between("kernel k() -> () { ", "if a { ", 300, "", "}", 300, " }");
  assert_one_error(text, "blocks nested too deeply (limit 200)");
  free(text);
  text = repeat_between("kernel k() -> () { if a {} ", "else if a {} ", 100000, "", "", 0, " }");
  Parsed p;
  parse(&p, text);
  assert_int_equal(p.diags.errors, 1);
  parsed_free(&p);
  free(text);
  text = repeat_between("const A = x", ".f", 100000, "", " as f32", 1000, ";");
  assert_one_error(text, "expression nested too deeply (limit 200)");
  free(text);
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void test_random_input(void **state) {
  (void)state;
  static const char *const frags[] = {
      "kernel", "const", "let", "var", "if", "else", "for", "in", "tiles", "tune", "require", "scratch", "inout", "as",
      "true", "inf", "f32", "bf16", "x", "N", "0", "1.5", "0x1f", "2.", "(", ")", "[", "]", "{", "}", ",", ";",
      ":", ".", "..", "=", "+=", "+", "-", "*", "<", "==", "&&", "!", "->", "\n", "/*", "*/", "//", "@", "\xff"};
  uint64_t seed = 0x9e3779b97f4a7c15u;
  char buf[1024];
  for (int iter = 0; iter < 3000; iter++) {
    size_t len = 0, want = rng_next(&seed) % 600;
    if (iter % 2) {
      for (; len < want; len++) buf[len] = (char)(rng_next(&seed) & 0xff);
    } else {
      while (len < want) {
        const char *f = frags[rng_next(&seed) % TPK_ARRAY_LEN(frags)];
        size_t n = strlen(f);
        if (len + n + 1 >= sizeof buf) break;
        memcpy(buf + len, f, n);
        len += n;
        buf[len++] = ' ';
      }
    }
    buf[len] = 0;
    Parsed p;
    parse_limited(&p, buf, len, 0);
    assert_non_null(p.parsed.file);
    check_depth(p.parsed.file);
    parsed_free(&p);
  }
}

static void test_arena_exhaustion(void **state) {
  (void)state;
  for (size_t limit = 16; limit < 64 * 1024; limit = limit * 3 / 2) {
    Parsed p;
    parse_limited(&p, EXAMPLES[4], strlen(EXAMPLES[4]), limit);
    if (p.status == TPK_OK) {
      assert_string_equal(p.rendered, "");
    } else {
      assert_int_equal(p.status, TPK_ERR_NOMEM);
      assert_int_equal(p.diags.errors, 1);
      assert_string_equal(p.diags.items[0].message, "out of memory while parsing (the file is too large)");
      if (p.parsed.file) check_depth(p.parsed.file);
    }
    parsed_free(&p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples_parse),
      cmocka_unit_test(test_ast_add),
      cmocka_unit_test(test_ast_empty),
      cmocka_unit_test(test_ast_precedence),
      cmocka_unit_test(test_ast_bitwise_precedence),
      cmocka_unit_test(test_ast_constructs),
      cmocka_unit_test(test_trailing_commas),
      cmocka_unit_test(test_spans),
      cmocka_unit_test(test_error_missing_semicolon),
      cmocka_unit_test(test_error_unclosed_paren),
      cmocka_unit_test(test_error_unterminated_comment),
      cmocka_unit_test(test_error_bad_character),
      cmocka_unit_test(test_error_stray_brace),
      cmocka_unit_test(test_error_two_in_one_file),
      cmocka_unit_test(test_error_then_good_kernel),
      cmocka_unit_test(test_error_end_of_file),
      cmocka_unit_test(test_error_kernel_inside_block),
      cmocka_unit_test(test_error_messages),
      cmocka_unit_test(test_deep_parens),
      cmocka_unit_test(test_long_sum),
      cmocka_unit_test(test_deep_other_nesting),
      cmocka_unit_test(test_random_input),
      cmocka_unit_test(test_arena_exhaustion),
  };
  return cmocka_run_group_tests(tests, load_examples, free_examples);
}
