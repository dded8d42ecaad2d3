/*
 * lexer.re — .tpk text to tokens (re2c). One call returns one token with its
 * span; whitespace and comments are skipped here, lexical errors reported
 * here. The grammar's token codes come from the lemon-generated grammar.h.
 *
 * Bounds: re2c's "sentinel with bounds checks" method (re2c:eof). The text
 * is NUL-terminated (TpkSource's contract), and a NUL is only taken for the
 * end when the cursor has reached `lim`, so a NUL inside the text is an
 * ordinary invalid character and nothing is ever read past text[len].
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/grammar.h"
#include "dsl/parse_int.h"

void tpk_lexer_init(TpkLexer *lx, const TpkSource *src, TpkArena *arena, TpkDiags *diags) {
  memset(lx, 0, sizeof *lx);
  lx->src = src;
  lx->cur = (const unsigned char *)src->text;
  lx->lim = lx->cur + src->len;
  /* a UTF-8 byte order mark (editors on Windows write one) is not text:
   * columns on line 1 count from after it */
  if (src->len >= 3 && memcmp(lx->cur, "\xEF\xBB\xBF", 3) == 0) lx->cur += 3;
  lx->line_start = lx->cur;
  lx->line = 1;
  lx->arena = arena;
  lx->diags = diags;
}

static TpkSpan span_of(const TpkLexer *lx, const unsigned char *start, const unsigned char *end) {
  TpkSpan s;
  s.offset = (uint32_t)(start - (const unsigned char *)lx->src->text);
  s.len = (uint32_t)(end - start);
  s.line = lx->line;
  s.col = (int)(start - lx->line_start) + 1;
  return s;
}

/* Walk a comment's bytes: count its lines, and reject NULs, which dsl.h
 * promises are invalid anywhere in a file. */
static void skip_comment_body(TpkLexer *lx, const unsigned char *p, const unsigned char *end) {
  for (; p < end; p++) {
    if (*p == '\n') {
      lx->line++;
      lx->line_start = p + 1;
    } else if (*p == 0) {
      tpk_diag_error(lx->diags, span_of(lx, p, p + 1), "invalid character (NUL byte)");
    }
  }
}

/* The value of a decimal or 0x literal; past 2^63-1 an error, and the
 * largest value so parsing goes on. */
static int64_t int_value(TpkLexer *lx, const unsigned char *start, const unsigned char *end) {
  const unsigned char *p = start;
  uint64_t base = 10, v = 0;
  if (end - start > 2 && (start[1] == 'x' || start[1] == 'X')) {
    base = 16;
    p += 2;
  }
  for (; p < end; p++) {
    uint64_t d = *p <= '9' ? (uint64_t)(*p - '0') : (uint64_t)((*p | 0x20) - 'a' + 10);
    if (v > ((uint64_t)INT64_MAX - d) / base) {
      tpk_diag_error(lx->diags, span_of(lx, start, end), "integer literal is too large (the limit is 2^63-1)");
      return INT64_MAX;
    }
    v = v * base + d;
  }
  return (int64_t)v;
}

/* strtod wants a NUL-terminated string; literals are short, so a small
 * buffer does, and absurdly long ones go through the arena. */
static double lex_float(TpkLexer *lx, const unsigned char *p, size_t n, bool *range_error) {
  char small[64];
  char *buf = small;
  if (n >= sizeof small) {
    buf = tpk_arena_strndup(lx->arena, (const char *)p, n);
    if (!buf) return 0;
  } else {
    memcpy(small, p, n);
    small[n] = 0;
  }
  double v = strtod(buf, NULL);
  *range_error = isinf(v);
  return v;
}

/* Bytes that can be part of some token, or separate tokens. */
static bool valid_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != 0 && strchr("_ \t\n\r\f\v()[]{},;:.=+-*/%<>!&|^~", c) != NULL);
}

int tpk_lex(TpkLexer *lx, TpkToken *tok) {
  const unsigned char *YYCURSOR = lx->cur, *YYLIMIT = lx->lim, *YYMARKER = YYCURSOR;
  for (;;) {
    const unsigned char *start = YYCURSOR;
    memset(tok, 0, sizeof *tok);
#define TOKEN(code)                                    \
  do {                                                 \
    tok->span = span_of(lx, start, YYCURSOR);          \
    lx->cur = YYCURSOR;                                \
    return TK_##code;                                  \
  } while (0)
    /*!re2c
      re2c:define:YYCTYPE = "unsigned char";
      re2c:yyfill:enable = 0;
      re2c:eof = 0;

      dec = [0-9]+;
      exp = [eE] [+-]? [0-9]+;
      ident = [a-zA-Z_] [a-zA-Z0-9_]*;

      $ {
        tok->span = span_of(lx, start, start);
        lx->cur = start;
        return 0;
      }

      [ \t\r\f\v]+ { continue; }
      "\n" { lx->line++; lx->line_start = YYCURSOR; continue; }
      "//" [^\n]* { skip_comment_body(lx, start, YYCURSOR); continue; }
      "/*" ([^*] | "*"+ [^*/])* "*"+ "/" { skip_comment_body(lx, start, YYCURSOR); continue; }
      "/*" {
        /* No closing "*" "/" anywhere after this one: the longer rule above
           failed, so the comment runs to the end of the file. */
        tpk_diag_error(lx->diags, span_of(lx, start, YYCURSOR), "unterminated comment");
        lx->unterminated_comment = true;
        skip_comment_body(lx, YYCURSOR, YYLIMIT);
        YYCURSOR = YYLIMIT;
        continue;
      }

      "kernel" { TOKEN(KERNEL); }
      "const" { TOKEN(CONST); }
      "let" { TOKEN(LET); }
      "var" { TOKEN(VAR); }
      "if" { TOKEN(IF); }
      "else" { TOKEN(ELSE); }
      "for" { TOKEN(FOR); }
      "while" { TOKEN(WHILE); }
      "seq" { TOKEN(SEQ); }
      "semaphore" { TOKEN(SEMAPHORE); }
      "scratch" { TOKEN(SCRATCH); }
      "backward" { TOKEN(BACKWARD); }
      "tune" { TOKEN(TUNE); }
      "require" { TOKEN(REQUIRE); }
      "in" { TOKEN(IN); }
      "inout" { TOKEN(INOUT); }
      "tiles" { TOKEN(TILES); }
      "as" { TOKEN(AS); }
      "true" { TOKEN(TRUE); }
      "false" { TOKEN(FALSE); }
      "inf" { tok->v.fval = INFINITY; TOKEN(FLOAT); }
      "nan" { tok->v.fval = NAN; TOKEN(FLOAT); }
      "f32" | "f16" | "bf16" | "f8e4m3" | "f8e5m2" | "i32" | "i16" | "i8" | "u8" | "u16" | "u32" | "bool" {
        tok->v.dtype = tpk_dtype_from_name((const char *)start, (size_t)(YYCURSOR - start));
        TOKEN(DTYPE);
      }
      ident { TOKEN(NAME); } /* its text is copied only if a node keeps it */

      dec { tok->v.ival = int_value(lx, start, YYCURSOR); TOKEN(INT); }
      "0" [xX] [0-9a-fA-F]+ { tok->v.ival = int_value(lx, start, YYCURSOR); TOKEN(INT); }
      dec "." dec exp? | dec exp | dec "." exp {
        bool big = false;
        tok->v.fval = lex_float(lx, start, (size_t)(YYCURSOR - start), &big);
        if (big) tpk_diag_error(lx->diags, span_of(lx, start, YYCURSOR), "float literal is too large");
        TOKEN(FLOAT);
      }
      dec "." {
        /* `2.` is a float, but in `0..N` the first dot starts a range. */
        if (*YYCURSOR == '.') {
          YYCURSOR--;
          tok->v.ival = int_value(lx, start, YYCURSOR);
          TOKEN(INT);
        }
        bool big = false;
        tok->v.fval = lex_float(lx, start, (size_t)(YYCURSOR - start), &big);
        if (big) tpk_diag_error(lx->diags, span_of(lx, start, YYCURSOR), "float literal is too large");
        TOKEN(FLOAT);
      }
      (dec | "0" [xX] [0-9a-fA-F]* | dec "." dec exp? | dec exp) [a-zA-Z_] [a-zA-Z0-9_]* {
        /* 12abc, 0xZZ, 1.5f: one error for the whole word, and an INT so
           the parser goes on without a second message. */
        tpk_diag_error(lx->diags, span_of(lx, start, YYCURSOR), "invalid number '%.*s'",
                       (int)(YYCURSOR - start > 40 ? 40 : YYCURSOR - start), (const char *)start);
        TOKEN(INT);
      }

      "(" { TOKEN(LPAREN); }
      ")" { TOKEN(RPAREN); }
      "[" { TOKEN(LBRACKET); }
      "]" { TOKEN(RBRACKET); }
      "{" { TOKEN(LBRACE); }
      "}" { TOKEN(RBRACE); }
      "," { TOKEN(COMMA); }
      ";" { TOKEN(SEMI); }
      ":" { TOKEN(COLON); }
      "." { TOKEN(DOT); }
      ".." { TOKEN(DOTDOT); }
      "->" { TOKEN(ARROW); }
      "=" { TOKEN(ASSIGN); }
      "+=" { TOKEN(PLUSEQ); }
      "-=" { TOKEN(MINUSEQ); }
      "*=" { TOKEN(STAREQ); }
      "/=" { TOKEN(SLASHEQ); }
      "+" { TOKEN(PLUS); }
      "-" { TOKEN(MINUS); }
      "*" { TOKEN(STAR); }
      "/" { TOKEN(SLASH); }
      "%" { TOKEN(PERCENT); }
      "==" { TOKEN(EQ); }
      "!=" { TOKEN(NE); }
      "<" { TOKEN(LT); }
      "<=" { TOKEN(LE); }
      ">" { TOKEN(GT); }
      ">=" { TOKEN(GE); }
      "&&" { TOKEN(ANDAND); }
      "||" { TOKEN(OROR); }
      "!" { TOKEN(NOT); }
      "~" { TOKEN(TILDE); }
      "&" { TOKEN(AMP); }
      "|" { TOKEN(PIPE); }
      "^" { TOKEN(CARET); }
      "<<" { TOKEN(SHL); }
      ">>" { TOKEN(SHR); }

      * {
        /* A run of bad bytes (a UTF-8 character, a pasted ```) is one error,
           not one per byte. */
        while (YYCURSOR < YYLIMIT && !valid_byte(*YYCURSOR)) YYCURSOR++;
        TpkSpan at = span_of(lx, start, YYCURSOR);
        if (at.len == 1 && *start > 32 && *start < 127)
          tpk_diag_error(lx->diags, at, "invalid character '%c'", *start);
        else if (at.len == 1 && *start == 0)
          tpk_diag_error(lx->diags, at, "invalid character (NUL byte)");
        else
          tpk_diag_error(lx->diags, at, "invalid character");
        TOKEN(ILLEGAL);
      }
    */
#undef TOKEN
  }
}
