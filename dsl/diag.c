/*
 * diag.c — collecting diagnostics and rendering them, in the one place the
 * contract's §8 form is produced:
 *
 *   file:line:col: error: message
 *      <the source line>
 *      ^~~~~
 *   hint: ...
 */
#include "dsl/dsl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tpk_diags_init(TpkDiags *d, const TpkSource *src) {
  memset(d, 0, sizeof *d);
  d->src = src;
}

void tpk_diags_free(TpkDiags *d) {
  for (int i = 0; i < d->count; i++) {
    free(d->items[i].message);
    free(d->items[i].hint);
  }
  free(d->items);
  d->items = NULL;
  d->count = d->cap = 0;
}

static char *vformat(const char *fmt, va_list ap) {
  TpkStr s = {0};
  tpk_str_vprintf(&s, fmt, ap);
  return tpk_str_take(&s);
}

static void add(TpkDiags *d, TpkSeverity sev, TpkSpan at, const char *hint, const char *fmt, va_list ap) {
  if (sev == TPK_SEV_ERROR) d->errors++;
  if (d->count >= TPK_DIAG_LIMIT) {
    if (sev == TPK_SEV_ERROR) d->truncated = true;
    return;
  }
  if (d->count == d->cap) {
    int cap = d->cap ? d->cap * 2 : 8;
    TpkDiag *items = realloc(d->items, (size_t)cap * sizeof *items);
    if (!items) return; /* the error count above still marks the failure */
    d->items = items;
    d->cap = cap;
  }
  TpkDiag *g = &d->items[d->count++];
  g->severity = sev;
  g->span = at;
  g->message = vformat(fmt, ap);
  g->hint = NULL;
  if (hint) {
    size_t n = strlen(hint);
    g->hint = malloc(n + 1);
    if (g->hint) memcpy(g->hint, hint, n + 1);
  }
}

void tpk_diag_error(TpkDiags *d, TpkSpan at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add(d, TPK_SEV_ERROR, at, NULL, fmt, ap);
  va_end(ap);
}

void tpk_diag_error_hint(TpkDiags *d, TpkSpan at, const char *hint, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add(d, TPK_SEV_ERROR, at, hint, fmt, ap);
  va_end(ap);
}

void tpk_diag_note(TpkDiags *d, TpkSpan at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add(d, TPK_SEV_NOTE, at, NULL, fmt, ap);
  va_end(ap);
}

static const char *SEVERITY[] = {"error", "warning", "note"};

void tpk_diags_render(TpkStr *out, const TpkDiags *d) {
  const char *file = d->src && d->src->name ? d->src->name : "<input>";
  for (int i = 0; i < d->count; i++) {
    const TpkDiag *g = &d->items[i];
    const char *msg = g->message ? g->message : "(out of memory)";
    if (g->span.line > 0)
      tpk_str_printf(out, "%s:%d:%d: %s: %s\n", file, g->span.line, g->span.col, SEVERITY[g->severity], msg);
    else /* about the file as a whole, e.g. a --bind naming no symbol */
      tpk_str_printf(out, "%s: %s: %s\n", file, SEVERITY[g->severity], msg);
    if (g->span.line > 0 && d->src) tpk_render_excerpt(out, d->src->text, d->src->len, g->span.offset, g->span.len);
    if (g->hint) tpk_str_printf(out, "hint: %s\n", g->hint);
  }
  if (d->truncated) {
    int shown = 0;
    for (int i = 0; i < d->count; i++) shown += d->items[i].severity == TPK_SEV_ERROR;
    tpk_str_printf(out, "%s: note: %d more errors not shown\n", file, d->errors - shown);
  }
}

TpkStatus tpk_source_read(TpkSource *src, const char *path, TpkError *err) {
  memset(src, 0, sizeof *src);
  FILE *f = fopen(path, "rb");
  if (!f) return tpk_error(err, TPK_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  TpkStr s = {0};
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    if (s.len + n > TPK_SOURCE_MAX) {
      fclose(f);
      tpk_str_free(&s);
      return tpk_error(err, TPK_ERR_INVALID, "%s is larger than %d MiB; refusing to compile it", path,
                       TPK_SOURCE_MAX >> 20);
    }
    tpk_str_putn(&s, buf, n);
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad || s.failed) {
    tpk_str_free(&s);
    return tpk_error(err, bad ? TPK_ERR_IO : TPK_ERR_NOMEM, "cannot read %s", path);
  }
  size_t name_len = strlen(path);
  char *name = malloc(name_len + 1);
  if (!name) {
    tpk_str_free(&s);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory reading %s", path);
  }
  memcpy(name, path, name_len + 1);
  src->len = s.len;
  src->text = tpk_str_take(&s);
  src->name = name;
  return TPK_OK;
}

void tpk_source_free(TpkSource *src) {
  free((char *)src->text);
  free((char *)src->name);
  memset(src, 0, sizeof *src);
}
