/*
 * test_lexer.c — dsl/lexer.re: token codes, values and spans, literal forms,
 * comments, lexical errors, and that the lexer never reads past the text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/grammar.h"
#include "dsl/parse_int.h"

/* Lex a whole text; the source is copied into a buffer of exactly len+1
 * bytes so AddressSanitizer catches any read past the terminating NUL. */
typedef struct Lexed {
  TpkSource src;
  TpkArena arena;
  TpkDiags diags;
  TpkToken toks[256];
  int codes[256];
  int n; /* tokens before end of file */
  char *text;
  char *rendered;
} Lexed;

static void lex_n(Lexed *l, const char *text, size_t len) {
  memset(l, 0, sizeof *l);
  l->text = malloc(len + 1);
  assert_non_null(l->text);
  memcpy(l->text, text, len);
  l->text[len] = 0;
  l->src = (TpkSource){"t.tpk", l->text, len};
  tpk_arena_init(&l->arena, 0);
  tpk_diags_init(&l->diags, &l->src);
  TpkLexer lx;
  tpk_lexer_init(&lx, &l->src, &l->arena, &l->diags);
  for (;;) {
    assert_true(l->n < 256);
    int code = tpk_lex(&lx, &l->toks[l->n]);
    if (code == 0) break;
    l->codes[l->n++] = code;
  }
  TpkStr s = {0};
  tpk_diags_render(&s, &l->diags);
  l->rendered = tpk_str_take(&s);
}

static void lex(Lexed *l, const char *text) { lex_n(l, text, strlen(text)); }

static void lexed_free(Lexed *l) {
  tpk_diags_free(&l->diags);
  tpk_arena_free(&l->arena);
  free(l->text);
  free(l->rendered);
}

static void assert_codes(const Lexed *l, const int *codes, int n) {
  assert_int_equal(l->n, n);
  for (int i = 0; i < n; i++) assert_int_equal(l->codes[i], codes[i]);
}

static void assert_text(const Lexed *l, int i, const char *want) {
  assert_int_equal(l->toks[i].span.len, strlen(want));
  assert_memory_equal(l->text + l->toks[i].span.offset, want, strlen(want));
}

static void assert_span(const TpkToken *t, uint32_t offset, uint32_t len, int line, int col) {
  assert_int_equal(t->span.offset, offset);
  assert_int_equal(t->span.len, len);
  assert_int_equal(t->span.line, line);
  assert_int_equal(t->span.col, col);
}

static void test_keywords_and_names(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "kernel const let var if else for scratch backward tune require in inout tiles as true false kernels _x1 f32x "
          "backwards");
  const int want[] = {TK_KERNEL, TK_CONST, TK_LET,   TK_VAR, TK_IF,   TK_ELSE,  TK_FOR,  TK_SCRATCH, TK_BACKWARD, TK_TUNE,
                      TK_REQUIRE, TK_IN,   TK_INOUT, TK_TILES, TK_AS, TK_TRUE,  TK_FALSE, TK_NAME,   TK_NAME,     TK_NAME,
                      TK_NAME};
  assert_codes(&l, want, (int)TPK_ARRAY_LEN(want));
  assert_text(&l, 17, "kernels");
  assert_text(&l, 18, "_x1");
  assert_text(&l, 19, "f32x");
  assert_text(&l, 20, "backwards");
  assert_string_equal(l.rendered, "");
  lexed_free(&l);
}

static void test_dtypes(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "f32 f16 bf16 f8e4m3 f8e5m2 i32 i16 i8 u8 bool");
  assert_int_equal(l.n, 10);
  const TpkDType want[] = {TPK_F32, TPK_F16, TPK_BF16, TPK_F8E4M3, TPK_F8E5M2,
                           TPK_I32, TPK_I16, TPK_I8,   TPK_U8,     TPK_BOOL};
  for (int i = 0; i < 10; i++) {
    assert_int_equal(l.codes[i], TK_DTYPE);
    assert_int_equal(l.toks[i].v.dtype, want[i]);
  }
  lexed_free(&l);
}

static void test_numbers(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "0 42 0x10 0XfF 9223372036854775807 1.5 1e-5 2. 3E+2 0.25e1 inf nan");
  const int want[] = {TK_INT,   TK_INT,   TK_INT,   TK_INT,   TK_INT,   TK_FLOAT,
                      TK_FLOAT, TK_FLOAT, TK_FLOAT, TK_FLOAT, TK_FLOAT, TK_FLOAT};
  assert_codes(&l, want, (int)TPK_ARRAY_LEN(want));
  assert_int_equal(l.toks[0].v.ival, 0);
  assert_int_equal(l.toks[1].v.ival, 42);
  assert_int_equal(l.toks[2].v.ival, 16);
  assert_int_equal(l.toks[3].v.ival, 255);
  assert_true(l.toks[4].v.ival == INT64_MAX);
  assert_true(l.toks[5].v.fval == 1.5);
  assert_true(l.toks[6].v.fval == 1e-5);
  assert_true(l.toks[7].v.fval == 2.0);
  assert_true(l.toks[8].v.fval == 300.0);
  assert_true(l.toks[9].v.fval == 2.5);
  assert_true(isinf(l.toks[10].v.fval) && l.toks[10].v.fval > 0);
  assert_true(isnan(l.toks[11].v.fval));
  assert_string_equal(l.rendered, "");
  lexed_free(&l);
}

/* `0..N` is a range, not the float `0.` followed by `.N`. */
static void test_range_dots(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "0..N a.. ..8 x.start 1..2");
  const int want[] = {TK_INT,  TK_DOTDOT, TK_NAME, TK_NAME, TK_DOTDOT, TK_DOTDOT, TK_INT,
                      TK_NAME, TK_DOT,    TK_NAME, TK_INT,  TK_DOTDOT, TK_INT};
  assert_codes(&l, want, (int)TPK_ARRAY_LEN(want));
  assert_span(&l.toks[0], 0, 1, 1, 1);
  assert_span(&l.toks[1], 1, 2, 1, 2);
  assert_int_equal(l.toks[10].v.ival, 1);
  assert_int_equal(l.toks[12].v.ival, 2);
  lexed_free(&l);
}

static void test_punctuation(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "( ) [ ] { } , ; : . .. = += -= *= /= + - * / % == != < <= > >= && || ! ->");
  const int want[] = {TK_LPAREN, TK_RPAREN,  TK_LBRACKET, TK_RBRACKET, TK_LBRACE, TK_RBRACE,  TK_COMMA,
                      TK_SEMI,   TK_COLON,   TK_DOT,      TK_DOTDOT,   TK_ASSIGN, TK_PLUSEQ,  TK_MINUSEQ,
                      TK_STAREQ, TK_SLASHEQ, TK_PLUS,     TK_MINUS,    TK_STAR,   TK_SLASH,   TK_PERCENT,
                      TK_EQ,     TK_NE,      TK_LT,       TK_LE,       TK_GT,     TK_GE,      TK_ANDAND,
                      TK_OROR,   TK_NOT,     TK_ARROW};
  assert_codes(&l, want, (int)TPK_ARRAY_LEN(want));
  assert_string_equal(l.rendered, "");
  lexed_free(&l);
}

static void test_comments_and_positions(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "a // one\n/* two\n three */ b\n\t c /**/d/***/e");
  const int want[] = {TK_NAME, TK_NAME, TK_NAME, TK_NAME, TK_NAME};
  assert_codes(&l, want, 5);
  assert_span(&l.toks[0], 0, 1, 1, 1);
  assert_span(&l.toks[1], 26, 1, 3, 11);
  assert_span(&l.toks[2], 30, 1, 4, 3); /* col counts bytes: the tab is one */
  assert_span(&l.toks[3], 36, 1, 4, 9);
  assert_span(&l.toks[4], 42, 1, 4, 15);
  assert_string_equal(l.rendered, "");
  lexed_free(&l);
}

static void test_unterminated_comment(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "a\n  /* never closed\n b c");
  assert_int_equal(l.n, 1);
  assert_string_equal(l.rendered, "t.tpk:2:3: error: unterminated comment\n"
                                  "     /* never closed\n"
                                  "     ^~\n");
  lexed_free(&l);
}

static void test_invalid_characters(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "a @ b\xc3\xa9 c $ d ```");
  const int want[] = {TK_NAME, TK_ILLEGAL, TK_NAME, TK_ILLEGAL, TK_NAME, TK_ILLEGAL, TK_NAME, TK_ILLEGAL};
  assert_codes(&l, want, (int)TPK_ARRAY_LEN(want));
  assert_span(&l.toks[3], 5, 2, 1, 6); /* one error for the whole UTF-8 character */
  assert_string_equal(l.rendered, "t.tpk:1:3: error: invalid character '@'\n"
                                  "   a @ b\xc3\xa9 c $ d ```\n"
                                  "     ^\n"
                                  "t.tpk:1:6: error: invalid character\n"
                                  "   a @ b\xc3\xa9 c $ d ```\n"
                                  "        ^~\n"
                                  "t.tpk:1:11: error: invalid character '$'\n"
                                  "   a @ b\xc3\xa9 c $ d ```\n"
                                  "             ^\n"
                                  "t.tpk:1:15: error: invalid character\n"
                                  "   a @ b\xc3\xa9 c $ d ```\n"
                                  "                 ^~~\n");
  lexed_free(&l);
}

/* NUL inside the text is a bad character; only the NUL at text[len] ends it. */
static void test_embedded_nul(void **state) {
  (void)state;
  Lexed l;
  lex_n(&l, "a\0b // c\0d\n e", 13);
  const int want[] = {TK_NAME, TK_ILLEGAL, TK_NAME, TK_NAME};
  assert_codes(&l, want, 4);
  assert_span(&l.toks[3], 12, 1, 2, 2);
  assert_string_equal(l.rendered, "t.tpk:1:2: error: invalid character (NUL byte)\n"
                                  "   a?b // c?d\n"
                                  "    ^\n"
                                  "t.tpk:1:9: error: invalid character (NUL byte)\n"
                                  "   a?b // c?d\n"
                                  "           ^\n");
  lexed_free(&l);
}

static void test_bad_numbers(void **state) {
  (void)state;
  Lexed l;
  lex(&l, "9223372036854775808 0x8000000000000000 12ab 0x 1e999");
  const int want[] = {TK_INT, TK_INT, TK_INT, TK_INT, TK_FLOAT};
  assert_codes(&l, want, 5);
  assert_int_equal(l.diags.count, 5);
  assert_string_equal(l.diags.items[0].message, "integer literal is too large (the limit is 2^63-1)");
  assert_string_equal(l.diags.items[1].message, "integer literal is too large (the limit is 2^63-1)");
  assert_string_equal(l.diags.items[2].message, "invalid number '12ab'");
  assert_string_equal(l.diags.items[3].message, "invalid number '0x'");
  assert_string_equal(l.diags.items[4].message, "float literal is too large");
  lexed_free(&l);
}

/* Texts that end in the middle of every kind of token: under ASan any read
 * past text[len] fails the test. */
static void test_truncated_tokens(void **state) {
  (void)state;
  const char *texts[] = {"/*", "/* *", "//", "1.", "1e", "1e+", "0x", "..", "-", "&", "|", "a", "\xc3", "12.5e"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(texts); i++) {
    Lexed l;
    lex(&l, texts[i]);
    lexed_free(&l);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keywords_and_names),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_range_dots),
      cmocka_unit_test(test_punctuation),
      cmocka_unit_test(test_comments_and_positions),
      cmocka_unit_test(test_unterminated_comment),
      cmocka_unit_test(test_invalid_characters),
      cmocka_unit_test(test_embedded_nul),
      cmocka_unit_test(test_bad_numbers),
      cmocka_unit_test(test_truncated_tokens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
