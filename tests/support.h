/*
 * support.h — helpers shared by the cmocka tests: compiling .tpk text,
 * rendering its diagnostics, and finding files in the source tree.
 */
#ifndef TPK_TEST_SUPPORT_H
#define TPK_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above first */
#include <cmocka.h>

#include "dsl/dsl.h"

/* Result of compiling one source text. */
typedef struct TestCompile {
  TpkSource src;
  TpkDiags diags;
  TpkModule *module; /* NULL when there were errors */
  char *rendered;    /* rendered diagnostics (heap, "" when none) */
  TpkStatus status;
} TestCompile;

/* Parse and check `text` as if it were file `name`. */
void test_compile(TestCompile *c, const char *name, const char *text, const TpkCheckOptions *opts);
void test_compile_free(TestCompile *c);

/* Compile .tpk text that must check clean and return its kernel `name`;
 * tunes like "BM=128,BN=8" or NULL. Fails the test otherwise; free c with
 * test_compile_free. The _file form reads a file under the root. */
TpkFunc *test_compile_kernel(TestCompile *c, const char *text, const char *name, const char *tunes);
TpkFunc *test_compile_kernel_file(TestCompile *c, const char *rel, const char *name, const char *tunes);

/* Values of f's shape symbols, in tpk_func_symbols order, from a spec like
 * "M=1000,N=64"; fails the test when one is missing. */
void test_symbol_values(const TpkFunc *f, const char *spec, int64_t *out);

/* A TpkSymLookup giving every symbol a small size (3..5), ragged against
 * every block size. */
bool test_small_symbol(void *ctx, const char *sym, int64_t *value);

/* The .tpk files of folder `rel` under the root, sorted by name, as heap
 * strings ("softmax.tpk"); fails the test when the folder cannot be read or
 * holds more than `max`. Free with test_names_free. */
int test_list_tpk(const char *rel, char **names, int max);
void test_names_free(char **names, int n);

/* Read a whole file (heap, NUL-terminated), or NULL. `*len` may be NULL. */
char *test_read_file(const char *path, size_t *len);

/* The repository root: $TPK_ROOT, else the current directory. */
const char *test_root(void);
/* Path under the root, in a static buffer (valid until the next call). */
const char *test_path(const char *rel);

#endif
