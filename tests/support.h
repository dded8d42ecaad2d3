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

#include "base/refnum.h"
#include "dsl/dsl.h"
#include "tpk.h"

/* Result of compiling one source text. */
typedef struct TestCompile {
  TpkSource src;
  TpkDiags diags;
  TpkModule *module; /* NULL when there were errors: the checker's IR */
  TpkModule *bound;  /* every function of module bound (lower/bind.c): tunables
                        the options did not choose at their defaults, as a
                        launch runs them; NULL when module is */
  char *rendered;    /* rendered diagnostics (heap, "" when none) */
  TpkStatus status;
} TestCompile;

/* Parse and check `text` as if it were file `name`, then bind. */
void test_compile(TestCompile *c, const char *name, const char *text, const TpkCheckOptions *opts);
void test_compile_free(TestCompile *c);

/* Compile .tpk text that must check clean and return its kernel `name`,
 * bound with tunes like "BM=128,BN=8" (NULL: the defaults), sizes symbolic.
 * Fails the test otherwise; free c with test_compile_free. The _file form
 * reads a file under the root. */
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
/* The same for the files whose names end in `ext` (".ir"). */
int test_list_files(const char *rel, const char *ext, char **names, int max);
void test_names_free(char **names, int n);

/* Read a whole file (heap, NUL-terminated), or NULL. `*len` may be NULL. */
char *test_read_file(const char *path, size_t *len);

/* A new empty folder under $TMPDIR (else /tmp) named prefix-XXXXXX (heap);
 * fails the test otherwise. test_remove_tree deletes it and what it holds. */
char *test_temp_dir(const char *prefix);
void test_remove_tree(const char *path);

/* The repository root: $TPK_ROOT, else the current directory. */
const char *test_root(void);
/* Path under the root, in a static buffer (valid until the next call). */
const char *test_path(const char *rel);

/* ---- launches against the reference interpreter ---- */

int64_t test_buffer_numel(const TpkBuffer *b);
/* Do n elements of dtype dt agree within its tolerance (integers exactly)?
 * The absolute part scales with the largest value, since accumulation
 * orders differ. Otherwise `why` names the first element that does not. */
bool test_outputs_close(TpkDType dt, const void *got, const void *want, int64_t n, char *why, size_t whylen);

/* Launch k on dev with every shape symbol = size, inputs seeded random
 * (tpk_fill_random from `seed`), float scalars 0.5 and integer scalars
 * `int_scalar`; returns the bytes of its outputs and inouts, concatenated
 * (heap, *len), and what the launch did in *ran (if not NULL). A failed
 * launch fails the test, naming `what`. */
char *test_launch_outputs(TpkKernel *k, TpkDevice *dev, int64_t size, uint64_t seed, double int_scalar,
                          const char *what, size_t *len, TpkLaunchResult *ran);
/* The same, with the tunables `tunes` names ("BM=8,BN=128"; NULL: none). */
char *test_launch_outputs_tuned(TpkKernel *k, TpkDevice *dev, int64_t size, uint64_t seed, double int_scalar,
                                const char *tunes, const char *what, size_t *len, TpkLaunchResult *ran);

typedef struct TestTally {
  int passed, compared, both_failed;
} TestTally;
/* Launch kernel `kname` of prog (whose text is `text`, named `file`) on dev
 * with every shape symbol = size, random inputs and scalars 0.5 (floats) or 3
 * (integers), and the reference interpreter on the same inputs; outputs must
 * agree, or both fail with an out-of-range error. */
void test_launch_vs_interpreter(TpkDevice *dev, TpkProgram *prog, const char *file, const char *text,
                                const char *kname, int64_t size, const TpkBinding *tunes, int ntunes,
                                TestTally *tally);

/* A new context, device `device` opened in it, and kernel `kernel` of
 * `text` loaded as file `name`; fails the test otherwise. The caller
 * destroys *ctx. */
TpkKernel *test_kernel(TpkContext **ctx, TpkDevice **dev, const char *device, const char *name, const char *text,
                       const char *kernel);

/* cmocka_run_group_tests over the tests that $TPK_TESTS names (names or
 * globs separated by commas or spaces, "test_queue_*,test_launch_in_*"),
 * or over all of them when it is unset or empty: how a suite (make
 * test-tsan) runs part of a test binary. */
#define test_run_tests(tests) test_run_selected(#tests, (tests), sizeof(tests) / sizeof((tests)[0]))
int test_run_selected(const char *group, const struct CMUnitTest *tests, size_t n);

/* ---- running the tpk command ---- */

typedef struct TestRun {
  int status;     /* exit status */
  char *out, *err; /* what it wrote (heap) */
} TestRun;

typedef struct TestRunOptions {
  const char *prog;       /* NULL: build/tpk, or $TPK_BUILD/tpk (found on PATH otherwise) */
  const char *const *env; /* NAME=VALUE settings, NULL-terminated; may be NULL */
  const char *input;      /* standard input (NULL: empty) */
  bool close_stdout;      /* stdout is a pipe nobody reads (a closed `| head`) */
} TestRunOptions;

/* Run a program (o may be NULL) with args (NULL-terminated) and LC_ALL=C;
 * fails the test when it is killed by a signal or cannot be started. */
TestRun test_run(const TestRunOptions *o, const char *const *args);
void test_run_free(TestRun *r);
/* r exited with `status` and its stdout and stderr contain out and err
 * (either may be NULL: not checked); frees r. */
void test_run_expect(TestRun r, int status, const char *out, const char *err);
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define RUN(...) test_run(NULL, ARGS(__VA_ARGS__))

#define assert_contains(hay, needle)                                                  \
  do {                                                                                \
    if (!strstr((hay), (needle))) fail_msg("expected '%s' in:\n%s", (needle), (hay)); \
  } while (0)

/* A cache folder of the test's own (dir a mkdtemp template, "/tmp/x-XXXXXX"),
 * made TPK_CACHE_DIR until closed; closing removes it. */
void test_cache_dir_open(char *dir);
void test_cache_dir_close(const char *dir);

#endif
