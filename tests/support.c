#include "support.h"

#include <dirent.h>
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

TpkFunc *test_compile_kernel(TestCompile *c, const char *text, const char *name, const char *tunes) {
  TpkBinding tb[8];
  int nt = 0;
  char buf[256];
  if (tunes) {
    snprintf(buf, sizeof buf, "%s", tunes);
    for (char *tok = strtok(buf, ","); tok && nt < 8; tok = strtok(NULL, ",")) {
      char *eq = strchr(tok, '=');
      if (!eq) fail_msg("tunes must be NAME=VALUE lists, got '%s'", tunes);
      *eq = 0;
      tb[nt].name = tok;
      tb[nt++].value = atoll(eq + 1);
    }
  }
  TpkCheckOptions opts = {.tunes = tb, .ntunes = nt, .only_kernel = name};
  test_compile(c, "test.tpk", text, &opts);
  if (!c->module) fail_msg("compile failed:\n%s", c->rendered);
  TpkFunc *f = tpk_module_find(c->module, name);
  assert_non_null(f);
  return f;
}

TpkFunc *test_compile_kernel_file(TestCompile *c, const char *rel, const char *name, const char *tunes) {
  char *text = test_read_file(test_path(rel), NULL);
  assert_non_null(text);
  TpkFunc *f = test_compile_kernel(c, text, name, tunes);
  free(text); /* the module keeps no pointer into the text */
  return f;
}

void test_symbol_values(const TpkFunc *f, const char *spec, int64_t *out) {
  const char *names[16];
  int n = tpk_func_symbols(f, names, 16);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names[i]);
    bool found = false;
    for (const char *p = spec; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
      if (strncmp(p, names[i], len) == 0 && p[len] == '=') {
        out[i] = atoll(p + len + 1);
        found = true;
        break;
      }
    if (!found) fail_msg("no value for symbol %s", names[i]);
  }
}

bool test_small_symbol(void *ctx, const char *sym, int64_t *value) {
  (void)ctx;
  *value = 3 + (int64_t)(strlen(sym) + (unsigned char)sym[0]) % 3;
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int test_list_tpk(const char *rel, char **names, int max) {
  DIR *d = opendir(test_path(rel));
  if (!d) fail_msg("cannot open %s (run from the repository root or set TPK_ROOT)", test_path(rel));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len <= 4 || strcmp(e->d_name + len - 4, ".tpk") != 0) continue;
    if (n == max) {
      closedir(d);
      test_names_free(names, n);
      fail_msg("%s holds more than %d .tpk files", rel, max);
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  return n;
}

void test_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
}
