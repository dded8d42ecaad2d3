/*
 * load.c — a program's text checked into IR, once, when it is loaded.
 *
 * The one place the runtime meets the language frontend (dsl/): everything
 * after loading — specialising, tuning, timing, launching — starts from the
 * IR this returns and never reads the text again (except to quote a line in
 * a message).
 */
#include "runtime/internal.h"

#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"

TpkStatus tpk_runtime_read_file(const char *path, char **text, size_t *len, TpkError *err) {
  TpkSource src;
  TpkStatus st = tpk_source_read(&src, path, err);
  if (st != TPK_OK) return st;
  free((char *)src.name);
  *text = (char *)src.text;
  *len = src.len;
  return TPK_OK;
}

TpkStatus tpk_runtime_check(const char *name, const char *text, size_t len, TpkModule **out, TpkStr *diagnostics) {
  *out = NULL;
  if (len > TPK_SOURCE_MAX) {
    tpk_str_printf(diagnostics, "%s is larger than %d MiB", name, TPK_SOURCE_MAX >> 20);
    return TPK_ERR_INVALID;
  }
  TpkSource src = {.name = name, .text = text, .len = len};
  TpkDiags diags;
  tpk_diags_init(&diags, &src);
  TpkStatus st = tpk_compile_source(&src, NULL, &diags, out);
  if (st != TPK_OK) {
    tpk_diags_render(diagnostics, &diags);
    if (!diagnostics->len) tpk_str_puts(diagnostics, "the program did not check");
  }
  tpk_diags_free(&diags);
  return st;
}
