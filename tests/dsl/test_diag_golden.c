/*
 * Golden diagnostics: every tests/diag/NAME.tpk is an invalid input whose
 * rendered diagnostics must equal tests/diag/NAME.err exactly.
 *
 * Leading comment lines may set checker options:
 *   // bind: D=64,N=8     // tune: BM=16     // kernel: softmax
 *
 * TPK_UPDATE_GOLDEN=1 rewrites the .err files instead of comparing; review
 * the resulting diff before committing it.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CASES = 512, MAX_OPTS = 16 };

typedef struct Options {
  TpkCheckOptions check;
  TpkBinding binds[MAX_OPTS], tunes[MAX_OPTS];
  char kernel[64];
  char names[2 * MAX_OPTS][64];
} Options;

static void parse_list(const char *text, TpkBinding *out, int *n, char (*names)[64], int *nnames) {
  while (*text && *n < MAX_OPTS) {
    char name[64] = {0};
    long long value = 0;
    int used = 0;
    if (sscanf(text, " %63[A-Za-z0-9_] = %lld%n", name, &value, &used) != 2) break;
    snprintf(names[*nnames], 64, "%s", name);
    out[*n] = (TpkBinding){names[*nnames], value};
    (*nnames)++;
    (*n)++;
    text += used;
    while (*text == ',' || *text == ' ') text++;
  }
}

/* Options from the file's leading `// key: value` lines. */
static void read_options(const char *text, Options *o) {
  memset(o, 0, sizeof *o);
  int nnames = 0;
  for (const char *line = text; line && strncmp(line, "//", 2) == 0;) {
    const char *end = strchr(line, '\n');
    char buf[256] = {0};
    size_t len = end ? (size_t)(end - line) : strlen(line);
    memcpy(buf, line, len < sizeof buf - 1 ? len : sizeof buf - 1);
    if (strncmp(buf, "// bind:", 8) == 0) parse_list(buf + 8, o->binds, &o->check.nbinds, o->names, &nnames);
    if (strncmp(buf, "// tune:", 8) == 0) parse_list(buf + 8, o->tunes, &o->check.ntunes, o->names, &nnames);
    if (strncmp(buf, "// kernel:", 10) == 0) sscanf(buf + 10, " %63s", o->kernel);
    line = end ? end + 1 : NULL;
  }
  o->check.binds = o->binds;
  o->check.tunes = o->tunes;
  o->check.only_kernel = o->kernel[0] ? o->kernel : NULL;
}

static void test_golden_diagnostics(void **state) {
  (void)state;
  char *names[MAX_CASES];
  int n = test_list_tpk("tests/diag", names, MAX_CASES);
  /* The issue asks for at least 40 invalid inputs; fewer means the corpus
   * was lost, not that the compiler got better. */
  assert_true(n >= 40);
  bool update = getenv("TPK_UPDATE_GOLDEN") && strcmp(getenv("TPK_UPDATE_GOLDEN"), "1") == 0;
  int failures = 0;
  for (int i = 0; i < n; i++) {
    char rel[512], err_path[512];
    snprintf(rel, sizeof rel, "tests/diag/%s", names[i]);
    char *text = test_read_file(test_path(rel), NULL);
    assert_non_null(text);
    Options o;
    read_options(text, &o);
    TestCompile c;
    test_compile(&c, names[i], text, &o.check);
    snprintf(err_path, sizeof err_path, "%s", test_path(rel));
    strcpy(err_path + strlen(err_path) - 4, ".err");
    if (update) {
      FILE *f = fopen(err_path, "wb");
      assert_non_null(f);
      fputs(c.rendered, f);
      fclose(f);
    } else {
      char *want = test_read_file(err_path, NULL);
      if (!want) {
        fprintf(stderr, "%s: missing golden file %s\n", names[i], err_path);
        failures++;
      } else if (strcmp(want, c.rendered) != 0) {
        fprintf(stderr, "%s: diagnostics differ\n--- expected\n%s--- got\n%s", names[i], want, c.rendered);
        failures++;
      }
      free(want);
    }
    /* Every case is an invalid input: it must fail, with an error line. */
    if (c.status == TPK_OK || !strstr(c.rendered, ": error: ")) {
      fprintf(stderr, "%s: expected an error, got status %d\n%s", names[i], c.status, c.rendered);
      failures++;
    }
    test_compile_free(&c);
    free(text);
    free(names[i]);
  }
  assert_int_equal(failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden_diagnostics)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
