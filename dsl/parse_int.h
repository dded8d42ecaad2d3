/*
 * parse_int.h — what the three parts of the parser share, and nobody else:
 *
 *   lexer.re  (re2c)  text -> TpkToken, one at a time
 *   grammar.y (lemon) tokens -> AST nodes, through the constructors below
 *   parse.c           drives both, recovers from syntax errors, prints trees
 *
 * Token codes (TK_*) come from the lemon-generated build/dsl/grammar.h.
 */
#ifndef TPK_PARSE_INT_H
#define TPK_PARSE_INT_H

#include "dsl/dsl.h"

/* A token as the lexer hands it to the grammar (lemon's %token_type). Kept
 * small: lemon copies it into every stack entry. */
typedef struct TpkToken {
  TpkSpan span;
  union {
    int64_t ival;     /* INT */
    double fval;      /* FLOAT (also inf, nan) */
    TpkDType dtype;   /* DTYPE */
  } v;
} TpkToken;

typedef struct TpkLexer {
  const TpkSource *src;
  const unsigned char *cur, *lim; /* lim = text + len; *lim is the NUL */
  const unsigned char *line_start;
  int line;
  TpkArena *arena;
  TpkDiags *diags;
  bool unterminated_comment; /* the rest of the file was swallowed */
} TpkLexer;

void tpk_lexer_init(TpkLexer *lx, const TpkSource *src, TpkArena *arena, TpkDiags *diags);
/* The next token's code (TK_*), or 0 at the end of the text. Lexical errors
 * are reported here; a bad character comes back as TK_ILLEGAL so the parser
 * skips its statement without a second message. */
int tpk_lex(TpkLexer *lx, TpkToken *tok);

/* A list under construction (a nonterminal's value): O(1) append. */
typedef struct TpkAstList {
  TpkAst *head, *tail;
  TpkSpan span; /* the list's text, brackets included where there are any */
} TpkAstList;

enum { TPK_PARSE_OPEN_MAX = TPK_MAX_DEPTH }; /* nested ( [ { accepted */

/* Everything one parse needs (lemon's %extra_context). */
typedef struct TpkParseState {
  const TpkSource *src;
  TpkArena *arena;
  TpkDiags *diags;
  TpkLexer lex;
  TpkAst *file;        /* items are appended as soon as they are reduced */
  TpkAst *file_tail;
  TpkAst *dummy;       /* handed out once the arena is exhausted */
  TpkToken cur;        /* the token being fed, for diagnostics */
  int last_line;       /* line of the last token the parser accepted */
  TpkSpan end;         /* where "unexpected end of file" points */
  bool have_end;
  bool abandoned;      /* stack overflow, out of memory, absurd nesting */
  bool depth_reported; /* "nested too deeply" is said once per file */
  bool depth_poison;   /* an expression got too deep: drop its statement */
  bool oom_reported;
  bool have_last_error;
  uint32_t last_error_offset; /* no second syntax error at one token */
  /* The brackets fed to the parser and not yet closed, innermost last; it
   * tells which '{' a missing '}' belongs to and what a ')' should close. */
  int open_count;
  int open_code[TPK_PARSE_OPEN_MAX];
  TpkSpan open_span[TPK_PARSE_OPEN_MAX];
} TpkParseState;

/* tpk_parse with an arena limit (0: the default), so tests can run it out
 * of memory. */
TpkStatus tpk_parse_with_limit(const TpkSource *src, TpkParsed *out, TpkDiags *diags, size_t arena_limit);

/* ---- constructors the grammar actions call (parse.c) ---- */
TpkAst *tpk_parse_node(TpkParseState *ps, TpkAstKind kind, TpkSpan span);
/* Compute n->depth from its children; past TPK_MAX_DEPTH report once and
 * cut the children off, so no later recursive pass can go deeper. */
TpkAst *tpk_parse_seal(TpkParseState *ps, TpkAst *n);
void tpk_parse_append(TpkParseState *ps, TpkAstList *l, TpkAst *n);
void tpk_parse_add_item(TpkParseState *ps, TpkAst *item);
/* A NAME token's text, copied into the arena ("" once it is exhausted). */
const char *tpk_parse_name(TpkParseState *ps, const TpkToken *tok);
TpkSpan tpk_span_join(TpkSpan a, TpkSpan b);

/* ---- called from lemon's hooks (grammar.y) ---- */
/* `expected` has one bit per token code the parser would have accepted. */
void tpk_parse_syntax_error(TpkParseState *ps, int code, const TpkToken *tok, const uint32_t *expected);
void tpk_parse_stack_overflow(TpkParseState *ps);

/* ---- the lemon parser (grammar.y) ---- */
void *tpk_grammarAlloc(void *(*alloc)(size_t), TpkParseState *ps);
void tpk_grammar(void *parser, int code, TpkToken tok);
void tpk_grammarFree(void *parser, void (*dealloc)(void *));
/* True while the parser sits on lemon's `error` symbol, waiting for TK_SYNC. */
bool tpk_grammar_in_error(void *parser);
enum { TPK_EXPECTED_WORDS = 4 }; /* bitset words; token codes < 128 */

#endif
