/*
 * parse.c — drives the lexer (lexer.re) and the lemon parser (grammar.y):
 * builds the AST in the arena, turns syntax errors into one diagnostic each
 * and resynchronises after them, bounds nesting, and prints trees for
 * `tpk dump --ast`.
 *
 * Recovery (see also grammar.y). After an error lemon has popped back to the
 * innermost statement list or to the file and sits on `error`. We skip tokens
 * to a point where a statement or item surely ends or starts:
 *   ';'            the statement ends (it is consumed);
 *   '}'            the enclosing block ends (it is fed again after SYNC);
 *   let/var/for/if/scratch inside a block: a new statement starts;
 *   kernel/const   a new item starts, at any depth: the open blocks are
 *                  closed with synthetic '}' first;
 *   the '}' closing a '{' opened while skipping (an if/for/kernel body).
 * There we feed TK_SYNC, which completes `stmt ::= error SYNC`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/grammar.h"
#include "dsl/parse_int.h"

/* ---- nodes ------------------------------------------------------------------ */

static void report_oom(TpkParseState *ps) {
  if (ps->oom_reported) return;
  ps->oom_reported = true;
  ps->abandoned = true;
  tpk_diag_error(ps->diags, ps->cur.span, "out of memory while parsing (the file is too large)");
}

TpkAst *tpk_parse_node(TpkParseState *ps, TpkAstKind kind, TpkSpan span) {
  TpkAst *n = tpk_arena_alloc(ps->arena, sizeof *n);
  if (!n) {
    /* The grammar actions fill in whatever they get; the dummy absorbs it
     * and is reset to a leaf before tpk_parse returns. */
    report_oom(ps);
    return ps->dummy;
  }
  n->kind = kind;
  n->span = span;
  n->depth = 1;
  return n;
}

static int list_depth(const TpkAst *l) {
  int d = 0;
  for (; l; l = l->next)
    if (l->depth > d) d = l->depth;
  return d;
}

static int max_int(int a, int b) { return a > b ? a : b; }

static bool is_expr_kind(TpkAstKind k) { return k <= TPK_AST_LIST; }

TpkAst *tpk_parse_seal(TpkParseState *ps, TpkAst *n) {
  if (n == ps->dummy) return n;
  int d = 0;
  if (n->lhs) d = max_int(d, n->lhs->depth);
  if (n->rhs) d = max_int(d, n->rhs->depth);
  d = max_int(d, list_depth(n->args));
  d = max_int(d, list_depth(n->dims));
  d = max_int(d, list_depth(n->body));
  d = max_int(d, list_depth(n->els));
  d = max_int(d, list_depth(n->ranges));
  d = max_int(d, list_depth(n->params));
  d = max_int(d, list_depth(n->outputs));
  d = max_int(d, list_depth(n->tunes));
  d = max_int(d, list_depth(n->requires));
  n->depth = d + 1;
  if (n->depth > TPK_MAX_DEPTH) {
    if (!ps->depth_reported) {
      ps->depth_reported = true;
      tpk_diag_error(ps->diags, n->span, "%s nested too deeply (limit %d)",
                     is_expr_kind(n->kind) ? "expression" : "blocks", TPK_MAX_DEPTH);
    }
    /* Keep the node, drop what is below it: the file already has an error,
     * and a tree that never gets deeper than the limit is what lets every
     * later pass recurse freely. */
    n->lhs = n->rhs = n->args = n->dims = n->body = n->els = n->ranges = NULL;
    n->params = n->outputs = n->tunes = n->requires = n->backward = NULL;
    n->depth = 1;
    /* A long left-leaning chain (a+a+...+a) would go on allocating nodes
     * that are cut off again; the driver abandons the statement instead. */
    if (is_expr_kind(n->kind)) ps->depth_poison = true;
  }
  return n;
}

void tpk_parse_append(TpkParseState *ps, TpkAstList *l, TpkAst *n) {
  /* NULL: a statement lost to a syntax error. The out-of-memory dummy may be
   * handed out many times and must never be linked. */
  if (!n || n == ps->dummy) return;
  if (l->tail) l->tail->next = n;
  else l->head = n;
  l->tail = n;
}

void tpk_parse_add_item(TpkParseState *ps, TpkAst *item) {
  if (!item || item == ps->dummy || !ps->file) return;
  if (ps->file_tail) ps->file_tail->next = item;
  else ps->file->body = item;
  ps->file_tail = item;
}

const char *tpk_parse_name(TpkParseState *ps, const TpkToken *tok) {
  const char *name = tpk_arena_strndup(ps->arena, ps->src->text + tok->span.offset, tok->span.len);
  if (name) return name;
  report_oom(ps);
  return "";
}

TpkSpan tpk_span_join(TpkSpan a, TpkSpan b) {
  uint32_t end = a.offset + a.len, bend = b.offset + b.len;
  if (bend > end) end = bend;
  a.len = end - a.offset;
  return a;
}

/* ---- syntax errors ------------------------------------------------------------ */

/* How each token is named in "expected ..." lists. */
static const char *const TOKEN_NAME[] = {
    [0] = "end of file",
    [TK_KERNEL] = "'kernel'",
    [TK_CONST] = "'const'",
    [TK_LET] = "'let'",
    [TK_VAR] = "'var'",
    [TK_IF] = "'if'",
    [TK_ELSE] = "'else'",
    [TK_FOR] = "'for'",
    [TK_WHILE] = "'while'",
    [TK_SEQ] = "'seq'",
    [TK_SEMAPHORE] = "'semaphore'",
    [TK_SCRATCH] = "'scratch'",
    [TK_BACKWARD] = "'backward'",
    [TK_TUNE] = "'tune'",
    [TK_REQUIRE] = "'require'",
    [TK_IN] = "'in'",
    [TK_INOUT] = "'inout'",
    [TK_TILES] = "'tiles'",
    [TK_AS] = "'as'",
    [TK_TRUE] = "'true'",
    [TK_FALSE] = "'false'",
    [TK_NAME] = "a name",
    [TK_INT] = "an integer",
    [TK_FLOAT] = "a number",
    [TK_DTYPE] = "a type",
    [TK_SEMI] = "';'",
    [TK_RBRACE] = "'}'",
    [TK_LBRACE] = "'{'",
    [TK_RPAREN] = "')'",
    [TK_LPAREN] = "'('",
    [TK_RBRACKET] = "']'",
    [TK_LBRACKET] = "'['",
    [TK_COMMA] = "','",
    [TK_COLON] = "':'",
    [TK_DOT] = "'.'",
    [TK_DOTDOT] = "'..'",
    [TK_ARROW] = "'->'",
    [TK_ASSIGN] = "'='",
    [TK_PLUSEQ] = "'+='",
    [TK_MINUSEQ] = "'-='",
    [TK_STAREQ] = "'*='",
    [TK_SLASHEQ] = "'/='",
    [TK_SYNC] = NULL,
    [TK_ILLEGAL] = NULL,
    [TK_OROR] = "'||'",
    [TK_ANDAND] = "'&&'",
    [TK_EQ] = "'=='",
    [TK_NE] = "'!='",
    [TK_LT] = "'<'",
    [TK_LE] = "'<='",
    [TK_GT] = "'>'",
    [TK_GE] = "'>='",
    [TK_PLUS] = "'+'",
    [TK_MINUS] = "'-'",
    [TK_STAR] = "'*'",
    [TK_SLASH] = "'/'",
    [TK_PERCENT] = "'%'",
    [TK_NOT] = "'!'",
    [TK_TILDE] = "'~'",
    [TK_AMP] = "'&'",
    [TK_PIPE] = "'|'",
    [TK_CARET] = "'^'",
    [TK_SHL] = "'<<'",
    [TK_SHR] = "'>>'",
};
enum { TOKEN_COUNT = (int)TPK_ARRAY_LEN(TOKEN_NAME) };

static bool has(const uint32_t *set, int code) {
  return code > 0 && code < 32 * TPK_EXPECTED_WORDS && (set[code / 32] >> (code % 32)) & 1;
}

static bool is_opener(int code) { return code == TK_LPAREN || code == TK_LBRACKET || code == TK_LBRACE; }
static bool is_closer(int code) { return code == TK_RPAREN || code == TK_RBRACKET || code == TK_RBRACE; }
static int closer_of(int open) { return open == TK_LPAREN ? TK_RPAREN : open == TK_LBRACKET ? TK_RBRACKET : TK_RBRACE; }
static bool is_comparison(int code) { return code >= TK_EQ && code <= TK_GE; }
/* Tokens that can continue a complete expression; left out of "expected"
 * lists, which would otherwise name every operator. */
static bool continues_expr(int code) {
  return (code >= TK_OROR && code <= TK_NOT) || code == TK_AS || code == TK_LBRACKET || code == TK_DOT;
}

/* "'foo'" for the token as written, or "end of file". */
static void describe_found(TpkStr *s, const TpkParseState *ps, int code, const TpkToken *tok) {
  if (code == 0) {
    tpk_str_puts(s, "end of file");
    return;
  }
  enum { SHOWN = 32 };
  uint32_t n = tok->span.len;
  tpk_str_putc(s, '\'');
  tpk_str_putn(s, ps->src->text + tok->span.offset, n > SHOWN ? SHOWN : n);
  if (n > SHOWN) tpk_str_puts(s, "...");
  tpk_str_putc(s, '\'');
}

/* Innermost open bracket fed to the parser, or -1. */
static int innermost_open(const TpkParseState *ps) { return ps->open_count - 1; }

static int innermost_brace(const TpkParseState *ps) {
  for (int i = ps->open_count - 1; i >= 0; i--)
    if (ps->open_code[i] == TK_LBRACE) return i;
  return -1;
}

static void emit(TpkParseState *ps, TpkSpan at, const char *hint, TpkStr *msg) {
  if (msg->failed) tpk_diag_error(ps->diags, at, "syntax error");
  else if (hint) tpk_diag_error_hint(ps->diags, at, hint, "%s", msg->data ? msg->data : "syntax error");
  else tpk_diag_error(ps->diags, at, "%s", msg->data ? msg->data : "syntax error");
  tpk_str_free(msg);
}

static void report_eof(TpkParseState *ps, TpkSpan at) {
  TpkStr msg = {0};
  char hint[80] = "";
  int open = innermost_open(ps);
  tpk_str_puts(&msg, "unexpected end of file");
  if (open >= 0)
    snprintf(hint, sizeof hint, "the '%s' on line %d is never closed",
             ps->open_code[open] == TK_LPAREN ? "(" : ps->open_code[open] == TK_LBRACKET ? "[" : "{",
             ps->open_span[open].line);
  emit(ps, at, hint[0] ? hint : NULL, &msg);
}

void tpk_parse_syntax_error(TpkParseState *ps, int code, const TpkToken *tok, const uint32_t *expected) {
  if (code == TK_ILLEGAL) return; /* the lexer has said why */
  if (code == 0 && ps->lex.unterminated_comment) return;
  if (ps->have_last_error && ps->last_error_offset == tok->span.offset) return;
  ps->have_last_error = true;
  ps->last_error_offset = tok->span.offset;

  TpkStr msg = {0};
  char hint[160] = "";
  int open = innermost_open(ps);
  const char *tname = code >= 0 && code < TOKEN_COUNT && TOKEN_NAME[code] ? TOKEN_NAME[code] : "?";

  if (code == 0) {
    report_eof(ps, tok->span);
    return;
  }

  if (is_closer(code)) {
    if (open < 0 || (ps->open_code[open] == TK_LBRACE && code != TK_RBRACE)) {
      tpk_str_printf(&msg, "unexpected %s", tname);
      emit(ps, tok->span, NULL, &msg);
      return;
    }
    if (closer_of(ps->open_code[open]) != code) {
      tpk_str_printf(&msg, "expected %s, found %s", TOKEN_NAME[closer_of(ps->open_code[open])], tname);
      emit(ps, tok->span, NULL, &msg);
      return;
    }
  }

  if ((code == TK_KERNEL || code == TK_CONST) && innermost_brace(ps) >= 0) {
    tpk_str_printf(&msg, "expected '}', found %s", tname);
    snprintf(hint, sizeof hint, "the '{' on line %d is never closed", ps->open_span[innermost_brace(ps)].line);
    emit(ps, tok->span, hint, &msg);
    return;
  }

  if (has(expected, TK_NAME) && has(expected, TK_INT) && has(expected, TK_LPAREN)) {
    tpk_str_printf(&msg, "expected %s, found ", has(expected, TK_LET) ? "a statement" : "an expression");
  } else if (has(expected, TK_PLUS)) {
    /* A complete expression, then something that cannot follow it. */
    if (is_comparison(code) && !has(expected, code)) {
      tpk_str_puts(&msg, "comparison operators cannot be chained, found ");
      snprintf(hint, sizeof hint, "write (a < b) && (b < c)");
    } else if (open >= 0 && ps->open_code[open] == TK_LPAREN && has(expected, TK_RPAREN)) {
      tpk_str_puts(&msg, has(expected, TK_COMMA) ? "expected ',' or ')', found " : "expected ')', found ");
    } else if (open >= 0 && ps->open_code[open] == TK_LBRACKET && has(expected, TK_RBRACKET)) {
      tpk_str_puts(&msg, has(expected, TK_COMMA) ? "expected ',' or ']', found " : "expected ']', found ");
    } else if (has(expected, TK_SEMI)) {
      tpk_str_puts(&msg, "expected ';' after expression, found ");
    }
    if (code == TK_ASSIGN && has(expected, TK_EQ)) snprintf(hint, sizeof hint, "use '==' to compare");
  }

  if (msg.len == 0) {
    /* Name what was expected when it is short enough to read. */
    int names[5], n = 0;
    for (int t = 1; t < TOKEN_COUNT && n < 5; t++)
      if (has(expected, t) && TOKEN_NAME[t] && !(has(expected, TK_PLUS) && continues_expr(t))) names[n++] = t;
    if (n == 0 || n > 4) {
      tpk_str_puts(&msg, "unexpected ");
    } else {
      tpk_str_puts(&msg, "expected ");
      for (int i = 0; i < n; i++) {
        if (i > 0) tpk_str_puts(&msg, i == n - 1 ? " or " : ", ");
        tpk_str_puts(&msg, TOKEN_NAME[names[i]]);
      }
      tpk_str_puts(&msg, ", found ");
    }
  }
  if (code == TK_TILES && !hint[0])
    snprintf(hint, sizeof hint, "tiles(N, B) is a loop range: for i in tiles(N, B) { ... }");
  describe_found(&msg, ps, code, tok);
  emit(ps, tok->span, hint[0] ? hint : NULL, &msg);
}

void tpk_parse_stack_overflow(TpkParseState *ps) {
  ps->abandoned = true;
  if (ps->depth_reported) return;
  ps->depth_reported = true;
  tpk_diag_error(ps->diags, ps->cur.span, "nesting too deep");
}

/* ---- the driver --------------------------------------------------------------- */

/* Where "unexpected end of file" points: just past the last non-blank
 * character, so the caret sits at the end of the last line that has text. */
static TpkSpan end_span(const TpkSource *src) {
  size_t end = src->len;
  while (end > 0 && (src->text[end - 1] == ' ' || src->text[end - 1] == '\t' || src->text[end - 1] == '\n' ||
                     src->text[end - 1] == '\r'))
    end--;
  TpkSpan s = {(uint32_t)end, 0, 1, 1};
  for (size_t i = 0; i < end; i++) {
    if (src->text[i] == '\n') {
      s.line++;
      s.col = 1;
    } else {
      s.col++;
    }
  }
  return s;
}

static int next_token(TpkParseState *ps, TpkToken *tok) {
  int code = tpk_lex(&ps->lex, tok);
  if (code == 0) {
    /* computed once: the end of file can be asked for many times */
    if (!ps->have_end) ps->end = end_span(ps->src);
    ps->have_end = true;
    tok->span = ps->end;
  }
  return code;
}

static void feed(TpkParseState *ps, void *parser, int code, TpkToken tok) {
  ps->cur = tok;
  tpk_grammar(parser, code, tok);
}

/* Record a bracket the parser accepted. */
static void track(TpkParseState *ps, int code, TpkSpan span) {
  if (is_opener(code) && ps->open_count < TPK_PARSE_OPEN_MAX) {
    ps->open_code[ps->open_count] = code;
    ps->open_span[ps->open_count++] = span;
  } else if (is_closer(code) && ps->open_count > 0) {
    ps->open_count--;
  }
}

static bool starts_statement(int code) {
  return code == TK_LET || code == TK_VAR || code == TK_FOR || code == TK_WHILE || code == TK_IF || code == TK_SCRATCH;
}

/* Feed SYNC to end the erroneous statement. False if the parser refused it,
 * which would mean our picture of its state is wrong: stop rather than loop. */
static bool sync(TpkParseState *ps, void *parser, TpkSpan at) {
  TpkToken t = {0};
  t.span = at;
  t.span.len = 0;
  feed(ps, parser, TK_SYNC, t);
  if (ps->abandoned || tpk_grammar_in_error(parser)) {
    ps->abandoned = true;
    return false;
  }
  return true;
}

/* Close every open block with a synthetic '}' so a `kernel` or `const` that
 * turned up inside one can start a new item. */
static void close_blocks(TpkParseState *ps, void *parser, TpkSpan at) {
  while (ps->open_count > 0 && !ps->abandoned) {
    TpkToken t = {0};
    t.span = at;
    t.span.len = 0;
    feed(ps, parser, TK_RBRACE, t);
    if (tpk_grammar_in_error(parser)) ps->abandoned = true;
    ps->open_count--;
  }
}

/* Skip from the token that caused an error (already discarded by lemon) to a
 * synchronisation point. Leaves the token to feed next in code and tok, and
 * sets *refeed when that token is one the skip loop stopped at (so an error
 * on it is not resynchronised on again). */
static void recover(TpkParseState *ps, void *parser, int *code, TpkToken *tok, bool *refeed) {
  /* lemon popped back to the innermost block: forget the brackets it left. */
  int brace = innermost_brace(ps);
  ps->open_count = brace + 1;
  if (*refeed) {
    *code = next_token(ps, tok);
  } else if (ps->open_count > 0 && tok->span.line > ps->last_line && *code != TK_SEMI && *code != 0 &&
             *code != TK_KERNEL && *code != TK_CONST) {
    /* The error is at the first token of a line, as when a ';' is missing
     * at the end of the line before: that token most likely starts the
     * next statement, so keep it. */
    sync(ps, parser, tok->span);
    *refeed = true;
    return;
  }
  *refeed = false;
  int depth = 0; /* brackets opened while skipping */
  for (;;) {
    if (*code == 0) {
      /* Let the main loop close the open blocks, so what parsed is kept. */
      if (innermost_brace(ps) >= 0) sync(ps, parser, tok->span);
      else ps->abandoned = true;
      *refeed = true;
      return;
    }
    if (*code == TK_KERNEL || *code == TK_CONST) {
      if (sync(ps, parser, tok->span)) close_blocks(ps, parser, tok->span);
      *refeed = true;
      return;
    }
    if (depth == 0) {
      if (*code == TK_SEMI) {
        sync(ps, parser, tok->span);
        *code = next_token(ps, tok);
        return;
      }
      if ((*code == TK_RBRACE || starts_statement(*code)) && ps->open_count > 0) {
        sync(ps, parser, tok->span);
        *refeed = true;
        return;
      }
    }
    if (is_opener(*code)) {
      depth++;
    } else if (is_closer(*code) && depth > 0) {
      depth--;
      if (depth == 0 && *code == TK_RBRACE) {
        /* the end of a body that belonged to the broken statement */
        sync(ps, parser, tok->span);
        *code = next_token(ps, tok);
        return;
      }
    }
    *code = next_token(ps, tok);
  }
}

TpkStatus tpk_parse(const TpkSource *src, TpkParsed *out, TpkDiags *diags) {
  return tpk_parse_with_limit(src, out, diags, 0);
}

TpkStatus tpk_parse_with_limit(const TpkSource *src, TpkParsed *out, TpkDiags *diags, size_t arena_limit) {
  memset(out, 0, sizeof *out);
  tpk_arena_init(&out->arena, arena_limit);
  int errors_before = diags->errors;
  if (src->len > TPK_SOURCE_MAX || (!src->text && src->len)) {
    tpk_diag_error(diags, (TpkSpan){0, 0, 0, 0}, "source is larger than %d MiB; refusing to parse it",
                   TPK_SOURCE_MAX >> 20);
    return TPK_ERR_INVALID;
  }
  TpkSource empty = {src->name, "", 0};
  if (!src->text) src = &empty; /* a NULL text of length 0 is an empty file */

  TpkParseState *ps = calloc(1, sizeof *ps);
  if (!ps) {
    tpk_diag_error(diags, (TpkSpan){0, 0, 1, 1}, "out of memory while parsing");
    return TPK_ERR_NOMEM;
  }
  ps->src = src;
  ps->arena = &out->arena;
  ps->diags = diags;
  ps->cur.span = (TpkSpan){0, 0, 1, 1};
  ps->dummy = tpk_arena_alloc(&out->arena, sizeof *ps->dummy);
  ps->file = tpk_arena_alloc(&out->arena, sizeof *ps->file);
  void *parser = ps->dummy && ps->file ? tpk_grammarAlloc(malloc, ps) : NULL;
  if (!parser) {
    report_oom(ps);
    free(ps);
    out->file = NULL;
    return TPK_ERR_NOMEM;
  }
  ps->file->kind = TPK_AST_FILE;
  ps->file->span = (TpkSpan){0, (uint32_t)src->len, 1, 1};
  tpk_lexer_init(&ps->lex, src, &out->arena, diags);

  TpkToken tok;
  int code = next_token(ps, &tok);
  bool refeed = false;
  int eof_braces = 0;
  while (!ps->abandoned) {
    if (code == 0 && innermost_brace(ps) >= 0 && eof_braces++ <= TPK_PARSE_OPEN_MAX) {
      /* End of file inside a block: say so once, then close the blocks with
       * synthetic '}' (errors they cause sit at the same offset and are not
       * repeated), so the kernels that parsed are kept. */
      if (!(ps->have_last_error && ps->last_error_offset == tok.span.offset) && !ps->lex.unterminated_comment)
        report_eof(ps, tok.span);
      ps->have_last_error = true;
      ps->last_error_offset = tok.span.offset;
      code = TK_RBRACE;
    }
    if (is_opener(code) && ps->open_count >= TPK_PARSE_OPEN_MAX) {
      /* Checked here, before the parser's own stack or the tree can grow:
       * 100000 '(' cost one message and no recursion. */
      if (!ps->depth_reported)
        tpk_diag_error(diags, tok.span, "%s nested too deeply (limit %d)",
                       code == TK_LBRACE ? "blocks" : "expression", TPK_MAX_DEPTH);
      ps->depth_reported = true;
      ps->abandoned = true;
      break;
    }
    feed(ps, parser, code, tok);
    if (ps->abandoned || code == 0) break;
    if (tpk_grammar_in_error(parser)) {
      ps->depth_poison = false;
      recover(ps, parser, &code, &tok, &refeed);
      continue;
    }
    track(ps, code, tok.span);
    ps->last_line = tok.span.line;
    code = next_token(ps, &tok);
    refeed = false;
    if (ps->depth_poison) {
      /* The error is reported; make lemon give up the statement (TK_ILLEGAL
       * never fits and has no message of its own) and skip its rest. */
      ps->depth_poison = false;
      feed(ps, parser, TK_ILLEGAL, ps->cur);
      if (ps->abandoned) break;
      if (tpk_grammar_in_error(parser)) recover(ps, parser, &code, &tok, &refeed);
    }
  }
  tpk_grammarFree(parser, free);

  if (out->arena.exhausted) {
    report_oom(ps);
    /* Whatever pointed at the dummy now points at a harmless leaf. */
    memset(ps->dummy, 0, sizeof *ps->dummy);
    ps->dummy->kind = TPK_AST_INT;
    ps->dummy->depth = 1;
  }
  ps->file->depth = 1 + list_depth(ps->file->body);
  out->file = ps->file;
  free(ps);
  if (out->arena.exhausted) return TPK_ERR_NOMEM;
  return diags->errors > errors_before ? TPK_ERR_PARSE : TPK_OK;
}

void tpk_parsed_free(TpkParsed *p) {
  tpk_arena_free(&p->arena);
  p->file = NULL;
}

/* ---- printing ----------------------------------------------------------------- */

static const char *op_name(int op) {
  switch (op) {
  case TPK_BIN_EQ: return "==";
  case TPK_BIN_NE: return "!=";
  case TPK_BIN_LE: return "<=";
  case TPK_BIN_GE: return ">=";
  case TPK_BIN_AND: return "&&";
  case TPK_BIN_OR: return "||";
  case TPK_ASSIGN_SET: return "=";
  case TPK_ASSIGN_ADD: return "+=";
  case TPK_ASSIGN_SUB: return "-=";
  case TPK_ASSIGN_MUL: return "*=";
  case TPK_ASSIGN_DIV: return "/=";
  case '+': return "+";
  case '-': return "-";
  case '*': return "*";
  case '/': return "/";
  case '%': return "%";
  case '<': return "<";
  case '>': return ">";
  case '!': return "!";
  case '~': return "~";
  case '&': return "&";
  case '|': return "|";
  case '^': return "^";
  case TPK_BIN_SHL: return "<<";
  case TPK_BIN_SHR: return ">>";
  }
  return "?";
}

static const char *const KIND_NAME[] = {
    [TPK_AST_INT] = "int",       [TPK_AST_FLOAT] = "float",   [TPK_AST_BOOL] = "bool",
    [TPK_AST_NAME] = "name",     [TPK_AST_UNARY] = "unary",   [TPK_AST_BINARY] = "binary",
    [TPK_AST_CAST] = "cast",     [TPK_AST_CALL] = "call",     [TPK_AST_KWARG] = "kwarg",
    [TPK_AST_INDEX] = "index",   [TPK_AST_FIELD] = "field",   [TPK_AST_SLICE] = "slice",
    [TPK_AST_TYPE] = "type",     [TPK_AST_LIST] = "list",     [TPK_AST_LET] = "let",
    [TPK_AST_VAR] = "var",       [TPK_AST_ASSIGN] = "assign", [TPK_AST_IF] = "if",
    [TPK_AST_FOR] = "for",       [TPK_AST_WHILE] = "while",   [TPK_AST_EXPR] = "expr",     [TPK_AST_SCRATCH] = "scratch",
    [TPK_AST_RANGE] = "range",   [TPK_AST_TILES] = "tiles",   [TPK_AST_PARAM] = "param",
    [TPK_AST_OUTPUT] = "output", [TPK_AST_TUNE] = "tune",     [TPK_AST_CONST] = "const",
    [TPK_AST_KERNEL] = "kernel", [TPK_AST_FILE] = "file",
};

/* Shortest text that reads back as the same double. */
static void put_float(TpkStr *out, double v) {
  if (isnan(v)) {
    tpk_str_puts(out, "nan");
    return;
  }
  if (isinf(v)) {
    tpk_str_puts(out, v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  tpk_str_puts(out, buf);
  if (!strpbrk(buf, ".eE")) tpk_str_puts(out, ".0"); /* keep it visibly a float */
}

/* Trees from the parser are at most TPK_MAX_DEPTH deep; this guard is for
 * trees built elsewhere. */
enum { PRINT_LEVEL_MAX = 3 * TPK_MAX_DEPTH };

static void print_node(TpkStr *out, const TpkAst *n, int level);

static void newline(TpkStr *out, int level) {
  tpk_str_putc(out, '\n');
  for (int i = 0; i < level; i++) tpk_str_puts(out, "  ");
}

static void print_list(TpkStr *out, const TpkAst *l, int level) {
  for (; l; l = l->next) {
    newline(out, level);
    print_node(out, l, level);
  }
}

/* A labelled group: (body ...), (then ...), (else ...), (init ...). */
static void print_group(TpkStr *out, const char *label, const TpkAst *l, int level) {
  newline(out, level);
  tpk_str_printf(out, "(%s", label);
  if (level < PRINT_LEVEL_MAX) print_list(out, l, level + 1);
  tpk_str_putc(out, ')');
}

static void print_child(TpkStr *out, const TpkAst *n, int level) {
  if (!n) return;
  newline(out, level);
  print_node(out, n, level);
}

static void print_node(TpkStr *out, const TpkAst *n, int level) {
  if (level >= PRINT_LEVEL_MAX) {
    tpk_str_puts(out, "...");
    return;
  }
  const char *kind = (unsigned)n->kind < TPK_ARRAY_LEN(KIND_NAME) && KIND_NAME[n->kind] ? KIND_NAME[n->kind] : "?";
  const char *name = n->name ? n->name : "?";
  int in = level + 1;
  tpk_str_printf(out, "(%s", kind);
  switch (n->kind) {
  case TPK_AST_INT: tpk_str_printf(out, " %lld", (long long)n->ival); break;
  case TPK_AST_FLOAT: tpk_str_putc(out, ' '); put_float(out, n->fval); break;
  case TPK_AST_BOOL: tpk_str_puts(out, n->ival ? " true" : " false"); break;
  case TPK_AST_NAME:
  case TPK_AST_CALL:
  case TPK_AST_KWARG:
  case TPK_AST_FIELD:
  case TPK_AST_LET:
  case TPK_AST_VAR:
  case TPK_AST_RANGE:
  case TPK_AST_TILES: tpk_str_printf(out, "%s %s", n->sequential ? " seq" : "", name); break;
  case TPK_AST_TUNE:
  case TPK_AST_CONST:
  case TPK_AST_KERNEL: tpk_str_printf(out, " %s", name); break;
  case TPK_AST_UNARY:
  case TPK_AST_BINARY:
  case TPK_AST_ASSIGN: tpk_str_printf(out, " %s", op_name(n->op)); break;
  case TPK_AST_CAST:
  case TPK_AST_TYPE: tpk_str_printf(out, " %s", tpk_dtype_name(n->dtype)); break;
  case TPK_AST_SLICE: tpk_str_puts(out, n->lhs && n->rhs ? " lo hi" : n->lhs ? " lo" : n->rhs ? " hi" : ""); break;
  case TPK_AST_SCRATCH:
  case TPK_AST_OUTPUT: tpk_str_printf(out, " %s %s", name, tpk_dtype_name(n->dtype)); break;
  case TPK_AST_PARAM: tpk_str_printf(out, "%s %s %s", n->inout ? " inout" : "", name, tpk_dtype_name(n->dtype)); break;
  default: break;
  }
  switch (n->kind) {
  case TPK_AST_IF:
    print_child(out, n->lhs, in);
    print_group(out, "then", n->body, in);
    if (n->els) print_group(out, "else", n->els, in);
    break;
  case TPK_AST_FOR:
    print_list(out, n->ranges, in);
    print_group(out, "body", n->body, in);
    break;
  case TPK_AST_WHILE:
    print_child(out, n->lhs, in);
    print_group(out, "body", n->body, in);
    break;
  case TPK_AST_KERNEL:
    print_list(out, n->params, in);
    print_list(out, n->outputs, in);
    if (n->backward) {
      newline(out, in);
      tpk_str_printf(out, "(backward %s)", n->backward->name ? n->backward->name : "?");
    }
    print_list(out, n->tunes, in);
    if (n->requires) print_group(out, "require", n->requires, in);
    print_group(out, "body", n->body, in);
    break;
  case TPK_AST_PARAM:
    print_list(out, n->dims, in);
    if (n->rhs) { /* the declared distribution: a range or a list */
      newline(out, in);
      tpk_str_puts(out, "(in");
      if (n->rhs->kind == TPK_AST_RANGE) {
        print_child(out, n->rhs->lhs, in + 1);
        print_child(out, n->rhs->rhs, in + 1);
      } else {
        print_child(out, n->rhs, in + 1);
      }
      tpk_str_putc(out, ')');
    }
    break;
  case TPK_AST_OUTPUT:
    print_list(out, n->dims, in);
    if (n->rhs) {
      newline(out, in);
      tpk_str_puts(out, "(init");
      print_child(out, n->rhs, in + 1);
      tpk_str_putc(out, ')');
    }
    break;
  default:
    /* Everything else prints its children in field order. */
    print_child(out, n->lhs, in);
    print_child(out, n->rhs, in);
    print_list(out, n->args, in);
    print_list(out, n->dims, in);
    print_list(out, n->body, in);
    break;
  }
  tpk_str_putc(out, ')');
}

void tpk_ast_print(TpkStr *out, const TpkAst *file) {
  if (!file) {
    tpk_str_puts(out, "(file)\n");
    return;
  }
  print_node(out, file, 0);
  tpk_str_putc(out, '\n');
}
