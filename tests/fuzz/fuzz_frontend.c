/*
 * fuzz_frontend.c — libFuzzer target for the whole frontend: bytes in as a
 * .tpk source, parse + check, diagnostics rendered, and when a module comes
 * out, its IR printed, parsed back and printed again.
 *
 * What it asserts (abort() on violation, so libFuzzer keeps the input):
 *   - no crash, hang or unbounded allocation anywhere (the sanitizers and
 *     libFuzzer's -timeout/-rss_limit_mb catch those);
 *   - a failed compilation always says why (at least one error), and a
 *     successful one reports no error and yields a module;
 *   - the IR of a successful compilation verifies;
 *   - the IR text form round-trips: print -> parse -> print is identical.
 *
 * Build and run with `make fuzz` (FUZZ_SECONDS=60 by default); seeds are in
 * tests/fuzz/corpus/, tokens in tests/fuzz/tpk.dict.
 */
#include "dsl/dsl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *detail, const char *ir) {
  fprintf(stderr, "fuzz_frontend: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  if (ir) fprintf(stderr, "---- IR ----\n%s\n------------\n", ir);
  abort();
}

/* The first line where a and b differ, to make a mismatch readable. */
static void report_mismatch(const char *a, const char *b) {
  int line = 1;
  const char *la = a, *lb = b;
  while (*a && *a == *b) {
    if (*a == '\n') {
      line++;
      la = a + 1;
      lb = b + 1;
    }
    a++;
    b++;
  }
  fprintf(stderr, "fuzz_frontend: IR round trip differs at line %d\n  printed:  %.*s\n  reprinted: %.*s\n", line,
          (int)strcspn(la, "\n"), la, (int)strcspn(lb, "\n"), lb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The frontend reads NUL-terminated text with an explicit length. */
  char *text = malloc(size + 1);
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  text[size] = 0;
  TpkSource src = {.name = "fuzz.tpk", .text = text, .len = size};

  TpkDiags diags;
  tpk_diags_init(&diags, &src);
  TpkModule *m = NULL;
  TpkCheckOptions opts = {0};
  TpkStatus st = tpk_compile_source(&src, &opts, &diags, &m);

  TpkStr rendered = {0};
  tpk_diags_render(&rendered, &diags);
  if (st != TPK_OK && diags.errors == 0) fail("compilation failed without reporting an error", tpk_status_name(st), NULL);
  if (st == TPK_OK && (!m || diags.errors > 0)) fail("TPK_OK with errors or without a module", rendered.data, NULL);
  if (st != TPK_OK && m) fail("a module was returned for a failed compilation", tpk_status_name(st), NULL);

  if (m) {
    TpkError err = {0};
    TpkStr first = {0}, second = {0};
    tpk_ir_print(&first, m);
    if (tpk_ir_verify(m, &err) != TPK_OK) fail("checker built IR that does not verify", err.message, first.data);
    if (!first.failed) {
      TpkModule *back = tpk_ir_parse(first.data ? first.data : "", first.len, "fuzz.tpk", &err);
      if (!back) fail("printed IR does not parse back", err.message, first.data);
      tpk_ir_print(&second, back);
      if (!second.failed && (first.len != second.len || memcmp(first.data, second.data, first.len) != 0)) {
        report_mismatch(first.data, second.data ? second.data : "");
        fail("IR print -> parse -> print is not identical", NULL, first.data);
      }
      tpk_module_free(back);
    }
    tpk_str_free(&first);
    tpk_str_free(&second);
    tpk_module_free(m);
  }
  tpk_str_free(&rendered);
  tpk_diags_free(&diags);
  free(text);
  return 0;
}
