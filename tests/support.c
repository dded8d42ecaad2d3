#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_compile(TestCompile *c, const char *name, const char *text, const TpkCheckOptions *opts) {
  memset(c, 0, sizeof *c);
  c->src.name = name;
  c->src.text = text;
  c->src.len = strlen(text);
  tpk_diags_init(&c->diags, &c->src);
  c->status = tpk_compile_source(&c->src, opts, &c->diags, &c->module);
  TpkStr s = {0};
  tpk_diags_render(&s, &c->diags);
  c->rendered = tpk_str_take(&s);
}

void test_compile_free(TestCompile *c) {
  tpk_diags_free(&c->diags);
  if (c->module) tpk_module_free(c->module);
  free(c->rendered);
  memset(c, 0, sizeof *c);
}

char *test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  TpkStr s = {0};
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) tpk_str_putn(&s, buf, n);
  fclose(f);
  if (len) *len = s.len;
  return tpk_str_take(&s);
}

const char *test_root(void) {
  const char *r = getenv("TPK_ROOT");
  return r && *r ? r : ".";
}

const char *test_path(const char *rel) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", test_root(), rel);
  return buf;
}
