/*
 * parse.c — reads the IR's text form (print.c writes it) back into a
 * module. A hand-written lexer and recursive-descent parser: the grammar is
 * small and regular, and errors name `line:col: expected X, found Y`.
 *
 * Hostile input is bounded: nesting (regions, parenthesised dims) stops at
 * MAX_DEPTH, the module arena has a limit proportional to the text, and the
 * parsed module is verified before it is returned.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

enum { MAX_DEPTH = 200 };

typedef enum Tok {
  T_EOF,
  T_IDENT,  /* op names, dtypes, keywords, symbols: [A-Za-z_][A-Za-z0-9_.]* */
  T_VALUE,  /* %name */
  T_FUNC,   /* @name */
  T_INT,
  T_FLOAT,
  T_STRING, /* text holds the raw token; decoded on use */
  T_ARROW,  /* -> */
  T_PUNCT   /* one of ( ) { } [ ] < > , : = ^ * / + - */
} Tok;

typedef struct Token {
  Tok kind;
  const char *text;
  size_t len;
  int line, col;
} Token;

typedef struct Lexer {
  const char *pos, *end;
  int line, col;
} Lexer;

typedef struct Parser {
  Lexer lx;
  Token tok; /* current token */
  TpkModule *m;
  TpkError *err;
  bool failed;
  TpkArena scratch;
  TpkPtrMap names; /* interned value name -> TpkValue*, per function */
  TpkBuilder b;
  int depth;
} Parser;

static bool is_ident_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c) || c == '.'; }

/* ---- Errors ---------------------------------------------------------------- */

static bool error_at(Parser *p, int line, int col, const char *fmt, ...) TPK_PRINTF(4, 5);
static bool error_at(Parser *p, int line, int col, const char *fmt, ...) {
  if (p->failed) return false;
  p->failed = true;
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tpk_error(p->err, TPK_ERR_PARSE, "%d:%d: %s", line, col, msg);
  return false;
}

/* "'{'", "end of input": how the current token reads in a message. */
static const char *describe(const Token *t, char *buf, size_t n) {
  if (t->kind == T_EOF) return "end of input";
  size_t len = t->len > 32 ? 32 : t->len;
  snprintf(buf, n, "'%.*s%s'", (int)len, t->text, t->len > 32 ? "..." : "");
  return buf;
}

static bool expected(Parser *p, const char *what) {
  char buf[48];
  return error_at(p, p->tok.line, p->tok.col, "expected %s, found %s", what, describe(&p->tok, buf, sizeof buf));
}

/* ---- Lexer ----------------------------------------------------------------- */

static void advance_char(Lexer *lx) {
  if (*lx->pos == '\n') {
    lx->line++;
    lx->col = 1;
  } else {
    lx->col++;
  }
  lx->pos++;
}

/* The next token from lx; lexical errors are reported through p. */
static Token lex(Parser *p, Lexer *lx) {
  for (;;) { /* blanks and // comments */
    while (lx->pos < lx->end && (*lx->pos == ' ' || *lx->pos == '\t' || *lx->pos == '\n' || *lx->pos == '\r'))
      advance_char(lx);
    if (lx->end - lx->pos >= 2 && lx->pos[0] == '/' && lx->pos[1] == '/') {
      while (lx->pos < lx->end && *lx->pos != '\n') advance_char(lx);
      continue;
    }
    break;
  }
  Token t = {T_EOF, lx->pos, 0, lx->line, lx->col};
  if (lx->pos >= lx->end) return t;
  const char *start = lx->pos;
  char c = *lx->pos;
  if (is_ident_start(c)) {
    t.kind = T_IDENT;
    while (lx->pos < lx->end && is_ident_char(*lx->pos)) advance_char(lx);
  } else if ((c == '%' || c == '@') && lx->pos + 1 < lx->end && is_ident_char(lx->pos[1])) {
    t.kind = c == '%' ? T_VALUE : T_FUNC;
    advance_char(lx);
    while (lx->pos < lx->end && is_ident_char(*lx->pos)) advance_char(lx);
  } else if (is_digit(c)) {
    t.kind = T_INT;
    while (lx->pos < lx->end && is_digit(*lx->pos)) advance_char(lx);
    if (lx->pos < lx->end && *lx->pos == '.') {
      t.kind = T_FLOAT;
      advance_char(lx);
      while (lx->pos < lx->end && is_digit(*lx->pos)) advance_char(lx);
    }
    if (lx->pos < lx->end && (*lx->pos == 'e' || *lx->pos == 'E')) {
      const char *q = lx->pos + 1;
      if (q < lx->end && (*q == '+' || *q == '-')) q++;
      if (q < lx->end && is_digit(*q)) {
        t.kind = T_FLOAT;
        while (lx->pos < q) advance_char(lx);
        while (lx->pos < lx->end && is_digit(*lx->pos)) advance_char(lx);
      }
    }
  } else if (c == '"') {
    t.kind = T_STRING;
    advance_char(lx);
    while (lx->pos < lx->end && *lx->pos != '"' && *lx->pos != '\n') {
      if (*lx->pos == '\\' && lx->pos + 1 < lx->end) advance_char(lx);
      advance_char(lx);
    }
    if (lx->pos >= lx->end || *lx->pos != '"') {
      error_at(p, t.line, t.col, "unterminated string");
      t.kind = T_EOF;
      return t;
    }
    advance_char(lx);
  } else if (c == '-' && lx->pos + 1 < lx->end && lx->pos[1] == '>') {
    t.kind = T_ARROW;
    advance_char(lx);
    advance_char(lx);
  } else if (strchr("(){}[]<>,:=^*/+-", c)) {
    t.kind = T_PUNCT;
    advance_char(lx);
  } else {
    if (c >= 0x20 && c < 0x7f)
      error_at(p, t.line, t.col, "unexpected character '%c'", c);
    else
      error_at(p, t.line, t.col, "unexpected byte 0x%02x", (unsigned char)c);
    t.kind = T_EOF;
    return t;
  }
  t.len = (size_t)(lx->pos - start);
  return t;
}

static void next(Parser *p) {
  if (!p->failed) p->tok = lex(p, &p->lx);
  if (p->failed) p->tok.kind = T_EOF;
}

static Token peek(Parser *p) {
  Lexer copy = p->lx;
  return lex(p, &copy);
}

static Token peek2(Parser *p) {
  Lexer copy = p->lx;
  lex(p, &copy);
  return lex(p, &copy);
}

static bool is_punct(const Token *t, char c) { return t->kind == T_PUNCT && t->text[0] == c; }
static bool is_word(const Token *t, const char *w) {
  return t->kind == T_IDENT && t->len == strlen(w) && memcmp(t->text, w, t->len) == 0;
}

static bool accept(Parser *p, char c) {
  if (!is_punct(&p->tok, c)) return false;
  next(p);
  return true;
}

static bool expect(Parser *p, char c) {
  if (accept(p, c)) return true;
  char what[4] = {'\'', c, '\'', 0};
  return expected(p, what);
}

static bool accept_word(Parser *p, const char *w) {
  if (!is_word(&p->tok, w)) return false;
  next(p);
  return true;
}

/* ---- Literals -------------------------------------------------------------- */

/* An integer with an optional leading '-', range-checked. */
static bool parse_int(Parser *p, int64_t *out) {
  bool neg = accept(p, '-');
  if (p->tok.kind != T_INT) return expected(p, "an integer");
  uint64_t v = 0;
  for (size_t i = 0; i < p->tok.len; i++) {
    unsigned d = (unsigned)(p->tok.text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return error_at(p, p->tok.line, p->tok.col, "integer out of range");
    v = v * 10 + d;
  }
  if (v > (uint64_t)INT64_MAX + neg) return error_at(p, p->tok.line, p->tok.col, "integer out of range");
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  next(p);
  return true;
}

/* A string token's contents, unescaped and interned. */
static const char *string_value(Parser *p) {
  const Token *t = &p->tok;
  char *buf = tpk_arena_alloc(&p->scratch, t->len + 1);
  if (!buf) return NULL;
  size_t n = 0;
  for (size_t i = 1; i + 1 < t->len; i++) {
    char c = t->text[i];
    if (c != '\\') {
      buf[n++] = c;
      continue;
    }
    c = t->text[++i];
    if (c == 'n') {
      buf[n++] = '\n';
    } else if (c == 't') {
      buf[n++] = '\t';
    } else if (c == 'x' && i + 2 < t->len - 1) {
      char hex[3] = {t->text[i + 1], t->text[i + 2], 0};
      char *endp;
      long v = strtol(hex, &endp, 16);
      if (*endp || v == 0) {
        error_at(p, t->line, t->col, "bad \\x escape in string");
        return NULL;
      }
      buf[n++] = (char)v;
      i += 2;
    } else if (c == '"' || c == '\\') {
      buf[n++] = c;
    } else {
      error_at(p, t->line, t->col, "unknown escape '\\%c' in string", c);
      return NULL;
    }
  }
  const char *s = tpk_module_intern(p->m, buf, n);
  if (!s) error_at(p, t->line, t->col, "out of memory");
  next(p);
  return s;
}

/* ---- Dims and types -------------------------------------------------------- */

static const TpkDim *parse_dim(Parser *p);

static const TpkDim *dim_result(Parser *p, const TpkDim *d, const Token *at) {
  if (!d && !p->failed) error_at(p, at->line, at->col, "invalid dimension (division by a constant <= 0, or overflow)");
  return d;
}

static const TpkDim *parse_dim_atom(Parser *p) {
  Token at = p->tok;
  if (++p->depth > MAX_DEPTH) {
    error_at(p, at.line, at.col, "nesting deeper than %d", MAX_DEPTH);
    return NULL;
  }
  const TpkDim *d = NULL;
  Token after = peek(p);
  bool next_is_paren = is_punct(&after, '(');
  if (is_punct(&p->tok, '(')) {
    next(p);
    d = parse_dim(p);
    if (d && !expect(p, ')')) d = NULL;
  } else if (is_word(&p->tok, "cdiv") && next_is_paren) {
    next(p);
    next(p);
    const TpkDim *a = parse_dim(p);
    const TpkDim *b = a && expect(p, ',') ? parse_dim(p) : NULL;
    if (b && expect(p, ')')) d = dim_result(p, tpk_dim_binary(p->m, TPK_DIM_CDIV, a, b), &at);
  } else if (p->tok.kind == T_IDENT) {
    const char *name = tpk_module_intern(p->m, p->tok.text, p->tok.len);
    next(p);
    d = dim_result(p, name ? tpk_dim_sym(p->m, name) : NULL, &at);
  } else if (p->tok.kind == T_INT || is_punct(&p->tok, '-')) {
    int64_t v;
    if (parse_int(p, &v)) d = dim_result(p, tpk_dim_const(p->m, v), &at);
  } else {
    expected(p, "a dimension");
  }
  p->depth--;
  return d;
}

static const TpkDim *parse_dim_product(Parser *p) {
  const TpkDim *d = parse_dim_atom(p);
  while (d && (is_punct(&p->tok, '*') || is_punct(&p->tok, '/'))) {
    Token at = p->tok;
    TpkDimKind op = at.text[0] == '*' ? TPK_DIM_MUL : TPK_DIM_DIV;
    next(p);
    const TpkDim *b = parse_dim_atom(p);
    d = b ? dim_result(p, tpk_dim_binary(p->m, op, d, b), &at) : NULL;
  }
  return d;
}

static const TpkDim *parse_dim(Parser *p) {
  const TpkDim *d = parse_dim_product(p);
  while (d && (is_punct(&p->tok, '+') || is_punct(&p->tok, '-'))) {
    Token at = p->tok;
    TpkDimKind op = at.text[0] == '+' ? TPK_DIM_ADD : TPK_DIM_SUB;
    next(p);
    const TpkDim *b = parse_dim_product(p);
    d = b ? dim_result(p, tpk_dim_binary(p->m, op, d, b), &at) : NULL;
  }
  return d;
}

const TpkDim *tpk_dim_parse(TpkModule *m, const char *text, TpkError *err) {
  if (!m || !text) {
    tpk_error(err, TPK_ERR_INVALID, "no dimension text");
    return NULL;
  }
  Parser p = {.lx = {text, text + strlen(text), 1, 1}, .m = m, .err = err};
  tpk_arena_init(&p.scratch, 0);
  next(&p);
  const TpkDim *d = parse_dim(&p);
  if (d && p.tok.kind != T_EOF) {
    expected(&p, "the end of the dimension");
    d = NULL;
  }
  tpk_arena_free(&p.scratch);
  if (!d && !p.failed) tpk_error(err, TPK_ERR_PARSE, "'%s' is not a dimension", text);
  return d;
}

/* DTYPE [ '[' dims ']' ] */
static bool parse_value_type(Parser *p, TpkDType *dt, int *rank, const TpkDim **dims) {
  *dt = p->tok.kind == T_IDENT ? tpk_dtype_from_name(p->tok.text, p->tok.len) : TPK_DTYPE_COUNT;
  if (*dt == TPK_DTYPE_COUNT) return expected(p, "a dtype");
  next(p);
  *rank = 0;
  if (!accept(p, '[')) return true;
  if (accept(p, ']')) return true;
  do {
    if (*rank == TPK_MAX_RANK) return error_at(p, p->tok.line, p->tok.col, "more than %d dimensions", TPK_MAX_RANK);
    if (!(dims[(*rank)++] = parse_dim(p))) return false;
  } while (accept(p, ','));
  return expect(p, ']');
}

static const TpkType *parse_type(Parser *p) {
  Token at = p->tok;
  const TpkType *t = NULL;
  TpkDType dt;
  int rank;
  const TpkDim *dims[TPK_MAX_RANK];
  if (accept_word(p, "ref")) {
    if (!expect(p, '<') || !parse_value_type(p, &dt, &rank, dims)) return NULL;
    TpkMemSpace space = TPK_MEM_HBM;
    if (accept(p, ',')) {
      if (accept_word(p, "hbm")) space = TPK_MEM_HBM;
      else if (accept_word(p, "vmem")) space = TPK_MEM_VMEM;
      else if (accept_word(p, "smem")) space = TPK_MEM_SMEM;
      else return expected(p, "a memory space (hbm, vmem, smem)"), NULL;
    }
    if (!expect(p, '>')) return NULL;
    t = tpk_type_ref(p->m, dt, rank, dims, space);
  } else if (accept_word(p, "tile")) {
    const TpkDim *block = expect(p, '<') ? parse_dim(p) : NULL;
    if (!block || !expect(p, '>')) return NULL;
    int64_t v;
    if (tpk_dim_is_const(block, &v) && v <= 0) return error_at(p, at.line, at.col, "tile block size must be positive"), NULL;
    t = tpk_type_tile_dim(p->m, block);
  } else if (accept_word(p, "dma")) {
    t = tpk_type_dma(p->m);
  } else {
    if (p->tok.kind != T_IDENT || tpk_dtype_from_name(p->tok.text, p->tok.len) == TPK_DTYPE_COUNT)
      return expected(p, "a type"), NULL;
    if (!parse_value_type(p, &dt, &rank, dims)) return NULL;
    t = tpk_type_tensor(p->m, dt, rank, dims);
  }
  if (!t) error_at(p, at.line, at.col, "out of memory");
  return t;
}

/* ---- Values ---------------------------------------------------------------- */

static const char *value_key(Parser *p) {
  const char *k = tpk_module_intern(p->m, p->tok.text + 1, p->tok.len - 1);
  if (!k) error_at(p, p->tok.line, p->tok.col, "out of memory");
  return k;
}

/* Names with a leading digit are counters the printer made up, not hints. */
static const char *hint_of(const char *key) { return key && !is_digit(key[0]) ? key : NULL; }

static bool define(Parser *p, const Token *at, const char *key, TpkValue *v) {
  if (tpk_ptrmap_get(&p->names, key, NULL))
    return error_at(p, at->line, at->col, "value %%%s is defined twice", key);
  if (!tpk_ptrmap_put(&p->names, key, v)) return error_at(p, at->line, at->col, "out of memory");
  return true;
}

static TpkValue *use(Parser *p) {
  if (p->tok.kind != T_VALUE) return expected(p, "a value"), NULL;
  const char *key = value_key(p);
  if (!key) return NULL;
  void *v = NULL;
  if (!tpk_ptrmap_get(&p->names, key, &v))
    return error_at(p, p->tok.line, p->tok.col, "undefined value %%%s", key), NULL;
  next(p);
  return v;
}

static bool parse_loc(Parser *p, TpkLoc *loc) {
  if (!is_word(&p->tok, "loc")) return true;
  Token at = p->tok;
  next(p);
  int64_t line, col;
  if (!expect(p, '(') || !parse_int(p, &line) || !expect(p, ':') || !parse_int(p, &col) || !expect(p, ')')) return false;
  if (line <= 0 || col < 0 || line > INT32_MAX || col > INT32_MAX)
    return error_at(p, at.line, at.col, "location out of range");
  loc->line = (int)line;
  loc->col = (int)col;
  return true;
}

/* ---- Growable scratch arrays ----------------------------------------------- */

typedef struct Vec {
  void **items;
  int n, cap;
} Vec;

static bool vec_push(Parser *p, Vec *v, void *item) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 8;
    void **items = tpk_arena_alloc(&p->scratch, (size_t)cap * sizeof *items);
    if (!items) return error_at(p, p->tok.line, p->tok.col, "out of memory");
    if (v->n) memcpy(items, v->items, (size_t)v->n * sizeof *items);
    v->items = items;
    v->cap = cap;
  }
  v->items[v->n++] = item;
  return true;
}

/* ---- Ops ------------------------------------------------------------------- */

static bool parse_attr(Parser *p, TpkOp *op) {
  if (p->tok.kind != T_IDENT) return expected(p, "an attribute name");
  Token at = p->tok;
  const char *key = tpk_module_intern(p->m, at.text, at.len);
  if (!key) return error_at(p, at.line, at.col, "out of memory");
  if (tpk_op_attr(op, key)) return error_at(p, at.line, at.col, "duplicate attribute '%s'", key);
  next(p);
  if (!expect(p, '=')) return false;
  Token vt = p->tok;
  bool neg = is_punct(&vt, '-');
  Token num = neg ? peek(p) : vt;
  if (num.kind == T_FLOAT || (num.kind == T_IDENT && (is_word(&num, "inf") || (!neg && is_word(&num, "nan"))))) {
    double f;
    if (num.kind == T_IDENT) {
      f = is_word(&num, "inf") ? __builtin_inf() : __builtin_nan("");
    } else {
      char buf[128];
      if (num.len >= sizeof buf) return error_at(p, num.line, num.col, "number too long");
      memcpy(buf, num.text, num.len);
      buf[num.len] = 0;
      f = strtod(buf, NULL);
    }
    if (neg) next(p);
    next(p);
    tpk_op_set_float(p->m, op, key, neg ? -f : f);
  } else if (num.kind == T_INT) {
    int64_t v;
    if (!parse_int(p, &v)) return false;
    tpk_op_set_int(p->m, op, key, v);
  } else if (accept_word(p, "true") || accept_word(p, "false")) {
    tpk_op_set_bool(p->m, op, key, is_word(&vt, "true"));
  } else if (vt.kind == T_STRING) {
    const char *s = string_value(p);
    if (!s) return false;
    TpkError e = {0};
    if (tpk_op_set_text(p->m, op, key, s, &e) != TPK_OK) return error_at(p, vt.line, vt.col, "%s", e.message);
  } else if (accept(p, '[')) {
    Vec items = {0};
    int64_t *vals = NULL;
    int n = 0;
    if (!accept(p, ']')) {
      do {
        int64_t v;
        if (!parse_int(p, &v)) return false;
        int64_t *cell = tpk_arena_alloc(&p->scratch, sizeof *cell);
        if (!cell) return error_at(p, vt.line, vt.col, "out of memory");
        *cell = v;
        if (!vec_push(p, &items, cell)) return false;
      } while (accept(p, ','));
      if (!expect(p, ']')) return false;
      n = items.n;
      vals = tpk_arena_alloc(&p->scratch, (size_t)n * sizeof *vals);
      if (!vals) return error_at(p, vt.line, vt.col, "out of memory");
      for (int i = 0; i < n; i++) vals[i] = *(int64_t *)items.items[i];
    }
    tpk_op_set_ints(p->m, op, key, n, vals);
  } else {
    return expected(p, "an attribute value");
  }
  if (!tpk_op_attr(op, key)) return error_at(p, at.line, at.col, "out of memory");
  return true;
}

static bool parse_block(Parser *p, TpkBlock *b);

/* One region: '{' ['^(' args '):'] ops '}' */
static bool parse_region(Parser *p, TpkBlock *b) {
  Token at = p->tok;
  if (!expect(p, '{')) return false;
  if (++p->depth > MAX_DEPTH) return error_at(p, at.line, at.col, "nesting deeper than %d", MAX_DEPTH);
  if (is_punct(&p->tok, '^')) {
    next(p);
    if (!expect(p, '(')) return false;
    if (!is_punct(&p->tok, ')')) do {
        if (p->tok.kind != T_VALUE) return expected(p, "a value");
        Token vt = p->tok;
        const char *key = value_key(p);
        if (!key) return false;
        next(p);
        if (!expect(p, ':')) return false;
        const TpkType *t = parse_type(p);
        if (!t) return false;
        TpkValue *arg = tpk_block_add_arg(p->m, b, t, hint_of(key));
        if (!arg) return error_at(p, vt.line, vt.col, "out of memory");
        if (!define(p, &vt, key, arg)) return false;
      } while (accept(p, ','));
    if (!expect(p, ')') || !expect(p, ':')) return false;
  }
  if (!parse_block(p, b) || !expect(p, '}')) return false;
  p->depth--;
  return true;
}

static bool parse_op(Parser *p) {
  Vec keys = {0}, toks = {0}, operands = {0}, types = {0};
  Token start = p->tok;
  while (p->tok.kind == T_VALUE) { /* results */
    Token *vt = tpk_arena_alloc(&p->scratch, sizeof *vt);
    const char *key = value_key(p);
    if (!vt || !key) return error_at(p, p->tok.line, p->tok.col, "out of memory");
    *vt = p->tok;
    if (!vec_push(p, &keys, (void *)key) || !vec_push(p, &toks, vt)) return false;
    next(p);
    if (accept(p, '=')) break;
    if (!expect(p, ',')) return false;
  }
  if (p->tok.kind != T_IDENT) return expected(p, keys.n ? "an op name" : "an op");
  Token name = p->tok;
  TpkOpcode opc = tpk_opcode_from_name(name.text, name.len);
  if (opc == TPK_OP_COUNT) return error_at(p, name.line, name.col, "unknown op '%.*s'", (int)(name.len > 40 ? 40 : name.len), name.text);
  next(p);
  if (p->tok.kind == T_VALUE) do {
      TpkValue *v = use(p);
      if (!v || !vec_push(p, &operands, v)) return false;
    } while (accept(p, ','));
  /* Attributes are parsed into a stub and moved to the op once it exists
   * (its result types come after them). `{ name =` starts attributes; any
   * other `{` starts a region. */
  TpkOp stub = {.opcode = opc};
  Token key = peek(p), eq = peek2(p);
  if (is_punct(&p->tok, '{') && key.kind == T_IDENT && is_punct(&eq, '=')) {
    next(p);
    do {
      if (!parse_attr(p, &stub)) return false;
    } while (accept(p, ','));
    if (!expect(p, '}')) return false;
  }
  if (keys.n && !is_punct(&p->tok, ':')) return expected(p, "':' and the result types");
  if (accept(p, ':')) do {
      const TpkType *t = parse_type(p);
      if (!t || !vec_push(p, &types, (void *)t)) return false;
    } while (accept(p, ','));
  TpkLoc loc = {0, 0};
  if (!parse_loc(p, &loc)) return false;
  if (types.n != keys.n)
    return error_at(p, start.line, start.col, "'%s' has %d result names but %d result types", tpk_op_info(opc)->name, keys.n,
                    types.n);
  p->b.loc = loc;
  TpkOp *op = tpk_build(&p->b, opc, operands.n, (TpkValue *const *)operands.items, types.n,
                        (const TpkType *const *)types.items);
  if (!op) return error_at(p, name.line, name.col, "out of memory");
  op->attrs = stub.attrs;
  op->nattr = stub.nattr;
  for (int i = 0; i < keys.n; i++) {
    op->out[i].name = hint_of(keys.items[i]);
    if (!define(p, toks.items[i], keys.items[i], &op->out[i])) return false;
  }
  TpkBlock *outer = p->b.block;
  for (int r = 0; r < op->nregion; r++) {
    p->b.block = op->regions[r];
    bool ok = parse_region(p, op->regions[r]);
    p->b.block = outer;
    if (!ok) return false;
  }
  return true;
}

/* Ops until the closing '}' (not consumed). */
static bool parse_block(Parser *p, TpkBlock *b) {
  TpkBlock *outer = p->b.block;
  p->b.block = b;
  while (!p->failed && !is_punct(&p->tok, '}')) {
    if (p->tok.kind == T_EOF) return expected(p, "'}'");
    if (!parse_op(p)) break;
  }
  p->b.block = outer;
  return !p->failed;
}

/* ---- Functions and the module ---------------------------------------------- */

static bool parse_tunes(Parser *p, TpkFunc *f) {
  Vec tunes = {0};
  if (!expect(p, '{')) return false;
  do {
    if (p->tok.kind != T_IDENT) return expected(p, "a tunable name");
    TpkTune *t = tpk_arena_alloc(&p->m->arena, sizeof *t);
    if (!t || !(t->name = tpk_module_intern(p->m, p->tok.text, p->tok.len)))
      return error_at(p, p->tok.line, p->tok.col, "out of memory");
    next(p);
    t->bound = accept(p, '=');
    if (t->bound && !parse_int(p, &t->value)) return false;
    if (!t->bound && !is_word(&p->tok, "in")) return expected(p, "'=' or 'in'");
    if (accept_word(p, "in")) {
      Vec choices = {0};
      if (!expect(p, '[')) return false;
      do {
        int64_t *c = tpk_arena_alloc(&p->scratch, sizeof *c);
        if (!c) return error_at(p, p->tok.line, p->tok.col, "out of memory");
        if (!parse_int(p, c) || !vec_push(p, &choices, c)) return false;
      } while (accept(p, ','));
      if (!expect(p, ']')) return false;
      int64_t *cs = tpk_arena_alloc(&p->m->arena, (size_t)choices.n * sizeof *cs);
      if (!cs) return error_at(p, p->tok.line, p->tok.col, "out of memory");
      for (int i = 0; i < choices.n; i++) cs[i] = *(int64_t *)choices.items[i];
      t->choices = cs;
      t->nchoices = choices.n;
      if (!t->bound) t->value = cs[0];
    }
    if (!vec_push(p, &tunes, t)) return false;
  } while (accept(p, ','));
  if (!expect(p, '}')) return false;
  f->tunes = tpk_arena_alloc(&p->m->arena, (size_t)tunes.n * sizeof *f->tunes);
  if (!f->tunes) return error_at(p, p->tok.line, p->tok.col, "out of memory");
  for (int i = 0; i < tunes.n; i++) f->tunes[i] = *(TpkTune *)tunes.items[i];
  f->ntunes = tunes.n;
  return true;
}

/* require{le(K, N) loc(26:11), ...}: comparisons of two dims. */
static bool parse_requires(Parser *p, TpkFunc *f) {
  Vec reqs = {0};
  if (!expect(p, '{')) return false;
  do {
    Token at = p->tok;
    TpkOpcode cmp = at.kind == T_IDENT ? tpk_opcode_from_name(at.text, at.len) : TPK_OP_COUNT;
    if (cmp == TPK_OP_COUNT || !tpk_require_cmp_text(cmp)) return expected(p, "a comparison (eq, ne, lt, le, gt, ge)");
    next(p);
    TpkRequire *r = tpk_arena_alloc(&p->scratch, sizeof *r);
    if (!r) return error_at(p, at.line, at.col, "out of memory");
    r->cmp = cmp;
    if (!expect(p, '(') || !(r->lhs = parse_dim(p)) || !expect(p, ',') || !(r->rhs = parse_dim(p)) || !expect(p, ')') ||
        !parse_loc(p, &r->loc) || !vec_push(p, &reqs, r))
      return false;
  } while (accept(p, ','));
  if (!expect(p, '}')) return false;
  f->requires = tpk_arena_alloc(&p->m->arena, (size_t)reqs.n * sizeof *f->requires);
  if (!f->requires) return error_at(p, p->tok.line, p->tok.col, "out of memory");
  for (int i = 0; i < reqs.n; i++) f->requires[i] = *(TpkRequire *)reqs.items[i];
  f->nrequires = reqs.n;
  return true;
}

typedef struct ParamText {
  const char *key;
  Token at;
  TpkParamRole role;
  bool zero;
  TpkLoc loc;
  int nsample;
  bool sample_range;
  int64_t *sample;
} ParamText;

/* ` in range(lo, hi)` or ` in [v, ...]` after a parameter's type: its
 * declared distribution (TpkParam.sample). */
static bool parse_sample(Parser *p, ParamText *pt) {
  if (!accept_word(p, "in")) return true;
  pt->sample_range = accept_word(p, "range");
  if (!expect(p, pt->sample_range ? '(' : '[')) return false;
  Vec vals = {0};
  do {
    int64_t *v = tpk_arena_alloc(&p->scratch, sizeof *v);
    if (!v) return error_at(p, p->tok.line, p->tok.col, "out of memory");
    if (!parse_int(p, v) || !vec_push(p, &vals, v)) return false;
  } while (accept(p, ','));
  if (!expect(p, pt->sample_range ? ')' : ']')) return false;
  if (pt->sample_range && vals.n != 2) return error_at(p, p->tok.line, p->tok.col, "range(lo, hi) takes two integers");
  int64_t *vs = tpk_arena_alloc(&p->m->arena, (size_t)vals.n * sizeof *vs);
  if (!vs) return error_at(p, p->tok.line, p->tok.col, "out of memory");
  for (int i = 0; i < vals.n; i++) vs[i] = *(int64_t *)vals.items[i];
  pt->sample = vs;
  pt->nsample = vals.n;
  return true;
}

static bool parse_func(Parser *p) {
  bool is_kernel = is_word(&p->tok, "kernel");
  if (!is_kernel && !is_word(&p->tok, "func")) return expected(p, "'kernel' or 'func'");
  next(p);
  if (p->tok.kind != T_FUNC) return expected(p, "a function name (@name)");
  const char *name = tpk_module_intern(p->m, p->tok.text + 1, p->tok.len - 1);
  if (!name) return error_at(p, p->tok.line, p->tok.col, "out of memory");
  Token name_tok = p->tok;
  next(p);
  Vec params = {0}, types = {0};
  if (!expect(p, '(')) return false;
  if (!is_punct(&p->tok, ')')) do {
      if (p->tok.kind != T_VALUE) return expected(p, "a parameter (%name)");
      ParamText *pt = tpk_arena_alloc(&p->scratch, sizeof *pt);
      if (!pt || !(pt->key = value_key(p))) return error_at(p, p->tok.line, p->tok.col, "out of memory");
      pt->at = p->tok;
      next(p);
      if (!expect(p, ':')) return false;
      if (accept_word(p, "out")) pt->role = TPK_PARAM_OUT;
      else if (accept_word(p, "inout")) pt->role = TPK_PARAM_INOUT;
      pt->zero = accept_word(p, "zero");
      const TpkType *t = parse_type(p);
      if (!t || !parse_sample(p, pt) || !parse_loc(p, &pt->loc) || !vec_push(p, &params, pt) || !vec_push(p, &types, (void *)t)) return false;
    } while (accept(p, ','));
  if (!expect(p, ')')) return false;
  Vec results = {0};
  if (p->tok.kind == T_ARROW) {
    next(p);
    if (!expect(p, '(')) return false;
    if (!is_punct(&p->tok, ')')) do {
        const TpkType *t = parse_type(p);
        if (!t || !vec_push(p, &results, (void *)t)) return false;
      } while (accept(p, ','));
    if (!expect(p, ')')) return false;
  }
  const char **names = tpk_arena_alloc(&p->scratch, (size_t)(params.n + 1) * sizeof *names);
  TpkParamRole *roles = tpk_arena_alloc(&p->scratch, (size_t)(params.n + 1) * sizeof *roles);
  if (!names || !roles) return error_at(p, name_tok.line, name_tok.col, "out of memory");
  for (int i = 0; i < params.n; i++) {
    ParamText *pt = params.items[i];
    names[i] = hint_of(pt->key);
    roles[i] = pt->role;
  }
  TpkFunc *f = tpk_func_new(p->m, name, is_kernel, params.n, (const TpkType *const *)types.items, names, roles);
  if (!f) return error_at(p, name_tok.line, name_tok.col, "out of memory");
  p->names = (TpkPtrMap){.arena = &p->scratch}; /* names are per function */
  for (int i = 0; i < params.n; i++) {
    ParamText *pt = params.items[i];
    f->params[i].zero_init = pt->zero;
    f->params[i].nsample = pt->nsample;
    f->params[i].sample_range = pt->sample_range;
    f->params[i].sample = pt->sample;
    f->params[i].loc = pt->loc;
    if (!define(p, &pt->at, pt->key, f->params[i].value)) return false;
  }
  f->nresults = results.n;
  f->results = tpk_arena_alloc(&p->m->arena, (size_t)(results.n + 1) * sizeof *f->results);
  if (!f->results) return error_at(p, name_tok.line, name_tok.col, "out of memory");
  for (int i = 0; i < results.n; i++) f->results[i] = results.items[i];
  if (is_word(&p->tok, "backward")) {
    next(p);
    if (p->tok.kind != T_FUNC) return expected(p, "the backward kernel's name (@name)");
    if (!(f->backward = tpk_module_intern(p->m, p->tok.text + 1, p->tok.len - 1)))
      return error_at(p, p->tok.line, p->tok.col, "out of memory");
    next(p);
  }
  if (is_word(&p->tok, "tune")) {
    next(p);
    if (!parse_tunes(p, f)) return false;
  }
  if (is_word(&p->tok, "require")) {
    next(p);
    if (!parse_requires(p, f)) return false;
  }
  if (!parse_loc(p, &f->loc) || !expect(p, '{')) return false;
  if (!parse_block(p, f->body)) return false;
  return expect(p, '}');
}

TpkModule *tpk_ir_parse(const char *text, size_t len, const char *source_name, TpkError *err) {
  if (!text && len) {
    tpk_error(err, TPK_ERR_INVALID, "no text");
    return NULL;
  }
  TpkModule *m = tpk_module_new(source_name);
  if (!m) {
    tpk_error(err, TPK_ERR_NOMEM, "out of memory");
    return NULL;
  }
  /* The IR is a few dozen times larger than its text; bound it. */
  size_t limit = ((size_t)64 << 20) + (len < ((size_t)1 << 32) ? len * 64 : (size_t)1 << 38);
  m->arena.limit = limit;
  Parser p = {.lx = {text ? text : "", (text ? text : "") + len, 1, 1}, .m = m, .err = err};
  tpk_arena_init(&p.scratch, limit);
  p.names = (TpkPtrMap){.arena = &p.scratch};
  p.b.m = m;
  next(&p);
  if (accept_word(&p, "module")) {
    m->source = NULL;
    if (p.tok.kind == T_STRING) m->source = string_value(&p);
  }
  while (!p.failed && p.tok.kind != T_EOF) {
    if (!parse_func(&p)) break;
  }
  if (!p.failed && (m->arena.exhausted || p.scratch.exhausted)) {
    p.failed = true;
    tpk_error(err, TPK_ERR_NOMEM, "out of memory (the IR text is too large)");
  }
  tpk_arena_free(&p.scratch);
  if (!p.failed) {
    TpkError verr;
    if (tpk_ir_verify(m, &verr) != TPK_OK) {
      p.failed = true;
      tpk_error(err, verr.code == TPK_ERR_NOMEM ? TPK_ERR_NOMEM : TPK_ERR_PARSE, "%s", verr.message);
    }
  }
  if (p.failed) {
    tpk_module_free(m);
    return NULL;
  }
  return m;
}
