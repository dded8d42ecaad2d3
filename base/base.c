/*
 * base.c — arena, growable strings, error values, suggestions, the clock,
 * JSON strings and the dtype table (maps and hashing are in map.c).
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Arena ---------------------------------------------------------------- */

struct TpkArenaChunk {
  TpkArenaChunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

enum { ARENA_CHUNK = 64 * 1024 };
static const size_t ARENA_DEFAULT_LIMIT = (size_t)1 << 30;

void tpk_arena_init(TpkArena *a, size_t limit) {
  memset(a, 0, sizeof *a);
  a->limit = limit ? limit : ARENA_DEFAULT_LIMIT;
}

void *tpk_arena_alloc(TpkArena *a, size_t size) {
  if (a->limit == 0) a->limit = ARENA_DEFAULT_LIMIT;
  size = (size + 15) & ~(size_t)15;
  if (size > a->limit || a->used > a->limit - size) {
    a->exhausted = true;
    return NULL;
  }
  TpkArenaChunk *c = a->chunks;
  if (!c || c->size - c->used < size) {
    size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
    c = malloc(sizeof *c + cap);
    if (!c) {
      a->exhausted = true;
      return NULL;
    }
    c->size = cap;
    c->used = 0;
    c->next = a->chunks;
    a->chunks = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  a->used += size;
  memset(p, 0, size);
  return p;
}

char *tpk_arena_strndup(TpkArena *a, const char *s, size_t n) {
  char *p = tpk_arena_alloc(a, n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *tpk_arena_strdup(TpkArena *a, const char *s) { return tpk_arena_strndup(a, s, strlen(s)); }

char *tpk_arena_printf(TpkArena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n < 0 ? NULL : tpk_arena_alloc(a, (size_t)n + 1);
  if (p) vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

void tpk_arena_free(TpkArena *a) {
  TpkArenaChunk *c = a->chunks;
  while (c) {
    TpkArenaChunk *next = c->next;
    free(c);
    c = next;
  }
  a->chunks = NULL;
  a->used = 0;
}

/* ---- Growable string ------------------------------------------------------ */

static bool str_reserve(TpkStr *s, size_t extra) {
  if (s->failed) return false;
  if (s->len + extra + 1 <= s->cap) return true;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < s->len + extra + 1) cap *= 2;
  char *p = realloc(s->data, cap);
  if (!p) {
    s->failed = true;
    return false;
  }
  s->data = p;
  s->cap = cap;
  return true;
}

void tpk_str_putn(TpkStr *s, const char *text, size_t n) {
  if (!str_reserve(s, n)) return;
  memcpy(s->data + s->len, text, n);
  s->len += n;
  s->data[s->len] = 0;
}

void tpk_str_puts(TpkStr *s, const char *text) { tpk_str_putn(s, text, strlen(text)); }
void tpk_str_putc(TpkStr *s, char c) { tpk_str_putn(s, &c, 1); }

void tpk_str_vprintf(TpkStr *s, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n >= 0 && str_reserve(s, (size_t)n)) {
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap2);
    s->len += (size_t)n;
  }
  va_end(ap2);
}

void tpk_str_printf(TpkStr *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpk_str_vprintf(s, fmt, ap);
  va_end(ap);
}

void tpk_str_free(TpkStr *s) {
  free(s->data);
  memset(s, 0, sizeof *s);
}

char *tpk_str_take(TpkStr *s) {
  char *p = s->data;
  if (!p) p = calloc(1, 1);
  memset(s, 0, sizeof *s);
  return p;
}

/* ---- "Did you mean" ---------------------------------------------------------- */

int tpk_edit_distance(const char *a, const char *b) {
  enum { MAX = 64 };
  size_t n = strlen(a), m = strlen(b);
  if (n >= MAX || m >= MAX) return 1 << 20;
  /* three rows of the table: i-2, i-1 and i */
  int rows[3][MAX], *before = rows[0], *prev = rows[1], *cur = rows[2];
  for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int best = prev[j] + 1;                                        /* delete */
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;              /* insert */
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);                /* substitute */
      if (sub < best) best = sub;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && before[j - 2] + 1 < best)
        best = before[j - 2] + 1;                                    /* swap */
      cur[j] = best;
    }
    int *t = before;
    before = prev;
    prev = cur;
    cur = t;
  }
  return prev[m];
}

const char *tpk_suggest(const char *word, const char *const *candidates, int n) {
  const char *best = NULL;
  int best_d = 1 << 30;
  size_t wlen = strlen(word);
  for (int i = 0; i < n; i++) {
    if (!candidates[i]) continue;
    int d = tpk_edit_distance(word, candidates[i]);
    int limit = strlen(candidates[i]) <= 4 ? 1 : 2;
    if (d <= limit && d < best_d && (size_t)d < wlen) {
      best = candidates[i];
      best_d = d;
    }
  }
  if (best || wlen < 2) return best;
  for (int i = 0; i < n; i++)
    if (candidates[i] && strncmp(candidates[i], word, wlen) == 0) {
      if (best) return NULL; /* not unique */
      best = candidates[i];
    }
  return best;
}

/* ---- Clock ----------------------------------------------------------------------- */

double tpk_now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double tpk_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- JSON ------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one.
 * The checks stop at a NUL, which is never a continuation byte. */
static int utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    /* no overlong forms (E0 80..9F) and no surrogates (ED A0..BF) */
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0;
    return (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    /* no overlong forms (F0 80..8F), nothing past U+10FFFF (F4 90..) */
    if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0;
    return (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
  }
  return 0;
}

void tpk_str_put_json(TpkStr *s, const char *text) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)text, *run = p;
  tpk_str_putc(s, '"');
  while (*p) {
    unsigned c = *p;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      p++;
      continue;
    }
    int n = c >= 0x80 ? utf8_len(p) : 1;
    if (c >= 0x80 && n > 0) {
      p += n;
      continue;
    }
    tpk_str_putn(s, (const char *)run, (size_t)(p - run));
    char esc[7] = {'\\', 0};
    size_t elen = 2;
    switch (c) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\n': esc[1] = 'n'; break;
    case '\t': esc[1] = 't'; break;
    case '\r': esc[1] = 'r'; break;
    case '\b': esc[1] = 'b'; break;
    case '\f': esc[1] = 'f'; break;
    default:
      if (c >= 0x80) memcpy(esc, "\\ufffd", 6);
      else memcpy(esc, (char[]){'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}, 6);
      elen = 6;
    }
    tpk_str_putn(s, esc, elen);
    run = ++p;
  }
  tpk_str_putn(s, (const char *)run, (size_t)(p - run));
  tpk_str_putc(s, '"');
}

/* ---- Errors --------------------------------------------------------------- */

static TpkStatus verror(TpkError *err, TpkStatus code, int line, int col, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    err->line = line;
    err->col = col;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
  }
  return code;
}

TpkStatus tpk_error(TpkError *err, TpkStatus code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(err, code, 0, 0, fmt, ap);
  va_end(ap);
  return code;
}

TpkStatus tpk_error_at(TpkError *err, TpkStatus code, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(err, code, line, col, fmt, ap);
  va_end(ap);
  return code;
}

const char *tpk_status_name(TpkStatus s) {
  switch (s) {
  case TPK_OK: return "ok";
  case TPK_ERR_INVALID: return "invalid argument";
  case TPK_ERR_PARSE: return "parse error";
  case TPK_ERR_NOMEM: return "out of memory";
  case TPK_ERR_IO: return "i/o error";
  case TPK_ERR_UNSUPPORTED: return "unsupported";
  case TPK_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

/* ---- Dtypes --------------------------------------------------------------- */

static const TpkDTypeInfo DTYPES[TPK_DTYPE_COUNT] = {
    [TPK_F32] = {"f32", 32, true, true, 23, 8},
    [TPK_F16] = {"f16", 16, true, true, 10, 5},
    [TPK_BF16] = {"bf16", 16, true, true, 7, 8},
    [TPK_F8E4M3] = {"f8e4m3", 8, true, true, 3, 4},
    [TPK_F8E5M2] = {"f8e5m2", 8, true, true, 2, 5},
    [TPK_I32] = {"i32", 32, false, true, 0, 0},
    [TPK_I16] = {"i16", 16, false, true, 0, 0},
    [TPK_I8] = {"i8", 8, false, true, 0, 0},
    [TPK_U8] = {"u8", 8, false, false, 0, 0},
    [TPK_BOOL] = {"bool", 8, false, false, 0, 0},
    [TPK_U32] = {"u32", 32, false, false, 0, 0},
    [TPK_U16] = {"u16", 16, false, false, 0, 0},
};

const TpkDTypeInfo *tpk_dtype_info(TpkDType t) { return (unsigned)t < TPK_DTYPE_COUNT ? &DTYPES[t] : NULL; }
const char *tpk_dtype_name(TpkDType t) { return (unsigned)t < TPK_DTYPE_COUNT ? DTYPES[t].name : "?"; }
size_t tpk_dtype_size(TpkDType t) { return (unsigned)t < TPK_DTYPE_COUNT ? DTYPES[t].bits / 8 : 0; }
bool tpk_dtype_is_float(TpkDType t) { return (unsigned)t < TPK_DTYPE_COUNT && DTYPES[t].is_float; }
bool tpk_dtype_is_int(TpkDType t) { return (unsigned)t < TPK_DTYPE_COUNT && !DTYPES[t].is_float && t != TPK_BOOL; }

TpkDType tpk_dtype_from_name(const char *name, size_t len) {
  for (int t = 0; t < TPK_DTYPE_COUNT; t++)
    if (strlen(DTYPES[t].name) == len && memcmp(DTYPES[t].name, name, len) == 0) return (TpkDType)t;
  return TPK_DTYPE_COUNT;
}

/* Does float type `big` hold every value of float type `small` exactly? */
static bool float_contains(TpkDType big, TpkDType small) {
  return DTYPES[big].mantissa >= DTYPES[small].mantissa && DTYPES[big].exponent >= DTYPES[small].exponent;
}

TpkDType tpk_dtype_promote(TpkDType a, TpkDType b) {
  if (a == b) return a;
  if (a == TPK_BOOL) return b;
  if (b == TPK_BOOL) return a;
  bool fa = DTYPES[a].is_float, fb = DTYPES[b].is_float;
  if (fa && !fb) return a; /* int + float -> the float (JAX's rule) */
  if (fb && !fa) return b;
  if (fa && fb) {
    if (float_contains(a, b)) return a;
    if (float_contains(b, a)) return b;
    /* Neither holds the other (f16 vs bf16; e4m3 vs e5m2): the smallest
     * float that holds both. */
    static const TpkDType ladder[] = {TPK_F16, TPK_BF16, TPK_F32};
    for (size_t i = 0; i < TPK_ARRAY_LEN(ladder); i++)
      if (float_contains(ladder[i], a) && float_contains(ladder[i], b)) return ladder[i];
    return TPK_F32;
  }
  /* Both integers. Same signedness: the wider. Mixed: a signed type wider
   * than the unsigned one (u8 + i8 -> i16). */
  bool sa = DTYPES[a].is_signed, sb = DTYPES[b].is_signed;
  unsigned ba = DTYPES[a].bits, bb = DTYPES[b].bits;
  if (sa == sb) return ba >= bb ? a : b;
  TpkDType s = sa ? a : b, u = sa ? b : a;
  if (DTYPES[s].bits > DTYPES[u].bits) return s;
  if (DTYPES[u].bits >= 32) return TPK_DTYPE_COUNT; /* u32 and a signed type: no i64 holds both */
  return DTYPES[u].bits >= 16 ? TPK_I32 : TPK_I16;
}

bool tpk_dtype_widens_to(TpkDType from, TpkDType to) { return tpk_dtype_promote(from, to) == to; }

int64_t tpk_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t tpk_ceildiv(int64_t a, int64_t b) { return -tpk_floordiv(-a, b); }

int64_t tpk_parse_bytes(const char *s) {
  if (!s) return 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || v <= 0) return 0;
  int shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  default: break;
  }
  if (*end || v > (INT64_MAX >> shift)) return 0;
  return (int64_t)v << shift;
}

/* ---- Source excerpts ------------------------------------------------------ */

/* The source line holding byte `offset`, and the caret line under
 * [offset, offset+len). Tabs in the source are copied into the caret line's
 * indentation so the caret lines up in any terminal. Non-printable bytes are
 * shown as '?' so binary input cannot garble the terminal. */
void tpk_render_excerpt(TpkStr *out, const char *text, size_t text_len, size_t offset, size_t len) {
  if (!text || offset > text_len) return;
  size_t start = offset, end = offset;
  while (start > 0 && text[start - 1] != '\n') start--;
  if (start == 0 && text_len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 && offset >= 3) start = 3; /* a byte order mark */
  while (end < text_len && text[end] != '\n') end++;
  if (end > start && text[end - 1] == '\r') end--;
  enum { MAX_SHOWN = 240 }; /* a minified line is cut, not dumped */
  if (end - start > MAX_SHOWN && offset - start < MAX_SHOWN) end = start + MAX_SHOWN;
  if (offset - start >= MAX_SHOWN) return;
  tpk_str_puts(out, "   ");
  for (size_t i = start; i < end; i++) {
    unsigned char c = (unsigned char)text[i];
    tpk_str_putc(out, (c == '\t' || (c >= 32 && c < 127) || c >= 128) ? (char)c : '?');
  }
  tpk_str_puts(out, "\n   ");
  for (size_t i = start; i < offset; i++) tpk_str_putc(out, text[i] == '\t' ? '\t' : ' ');
  tpk_str_putc(out, '^');
  size_t stop = offset + (len ? len : 1);
  if (stop > end) stop = end;
  for (size_t i = offset + 1; i < stop; i++) tpk_str_putc(out, '~');
  tpk_str_putc(out, '\n');
}


void tpk_render_error_at(TpkStr *out, const char *file, const char *text, size_t text_len, const TpkError *err) {
  if (err->line <= 0) {
    tpk_str_printf(out, "%s\n", err->message);
    return;
  }
  tpk_str_printf(out, "%s:%d:%d: error: %s\n", file ? file : "<input>", err->line, err->col, err->message);
  size_t offset = 0;
  for (int line = 1; text && line < err->line && offset < text_len; offset++)
    if (text[offset] == '\n') line++;
  if (text && offset + (size_t)(err->col > 0 ? err->col - 1 : 0) <= text_len)
    tpk_render_excerpt(out, text, text_len, offset + (size_t)(err->col > 0 ? err->col - 1 : 0), 1);
}
