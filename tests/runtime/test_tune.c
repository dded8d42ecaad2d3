/*
 * test_tune.c — autotuning (runtime/tune.c, sim/timing.c): keys, the disk
 * cache (round trip, and every way a file can be wrong), the defaults
 * table and the shipped kernels/tuned.tsv, and the search on the simulator
 * (against launches timed independently), past its budget, with held
 * tunables, skipping what does not fit, and on the host.
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/tune.h"
#include "tpk.h"

static const char *MATMUL = "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
                            "  tune BM in [128, 256], BN in [128, 256], BK in [128, 256]\n"
                            "{\n"
                            "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                            "    var acc = zeros(f32[BM, BN]);\n"
                            "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                            "    c[i, j] = acc;\n"
                            "  }\n"
                            "}\n";

/* 125 configurations: more than a small budget */
static const char *WIDE = "kernel matmul(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])\n"
                          "  tune BM in [128, 256, 512, 1024, 2048], BN in [128, 256, 512, 1024, 2048],\n"
                          "       BK in [128, 256, 512, 1024, 2048]\n"
                          "{\n"
                          "  for i in tiles(M, BM), j in tiles(N, BN) {\n"
                          "    var acc = zeros(f32[BM, BN]);\n"
                          "    for k in tiles(K, BK) { acc += dot(a[i, k], b[k, j]); }\n"
                          "    c[i, j] = acc;\n"
                          "  }\n"
                          "}\n";

/* Row blocks of 2048 x 4096 f32 (32 MiB each for x and y) do not fit v4's
 * 16 MiB of VMEM. */
static const char *SCALE = "kernel scale(x: f32[M, N], s: f32) -> (y: f32[M, N])\n"
                           "  tune BM in [256, 2048, 8]\n"
                           "{\n"
                           "  for i in tiles(M, BM) { y[i, :] = x[i, :] * s; }\n"
                           "}\n";

/* Programs the searches tune, in one context the group tears down. */
static TpkContext *programs;
static TpkProgram *loaded[64];
static int nloaded;

static TpkProgram *program(const char *name, const char *text) {
  if (!programs && tpk_context_create(&programs) != TPK_OK) fail_msg("%s", tpk_last_error());
  TpkProgram *p;
  if (tpk_program_load_source(programs, name, text, strlen(text), &p) != TPK_OK) fail_msg("%s", tpk_last_error());
  assert_true(nloaded < 64);
  return loaded[nloaded++] = p;
}

/* The kernel `name` of text checked with nothing bound (the program's view). */
static const TpkFunc *unbound(TestCompile *c, const char *text, const char *name) {
  test_compile(c, "t.tpk", text, NULL);
  if (!c->module) fail_msg("%s", c->rendered);
  const TpkFunc *f = tpk_module_find(c->module, name);
  assert_non_null(f);
  return f;
}

static char tmp_root[] = "/tmp/tpk-test-tune-XXXXXX";

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(tmp_root)) return -1;
  /* the JIT's cache of the host tests goes there too */
  setenv("TPK_CACHE_DIR", tmp_root, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tpk_context_destroy(programs);
  for (int i = 0; i < nloaded; i++) tpk_program_destroy(loaded[i]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  return system(cmd) == 0 ? 0 : -1;
}

static void write_text(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void key_of(TpkTuneKey *key, const TpkFunc *f, const char *device, int64_t m, int64_t n, int64_t k) {
  TpkBinding syms[] = {{"M", m}, {"N", n}, {"K", k}};
  TpkError err = {0};
  if (tpk_tune_key(key, f, tpk_tune_ir_hash(f), syms, 3, device, &err) != TPK_OK) fail_msg("%s", err.message);
}

/* ---- keys ------------------------------------------------------------------------ */

static void test_ir_hash(void **state) {
  (void)state;
  TestCompile a, b, c, d, e;
  uint64_t h = tpk_tune_ir_hash(unbound(&a, MATMUL, "matmul"));
  assert_true(h != 0);
  /* the kernel checked alone (as a launch specialises it) hashes the same */
  TpkCheckOptions only = {.only_kernel = "matmul"};
  test_compile(&b, "t.tpk", MATMUL, &only);
  assert_non_null(b.module);
  assert_true(tpk_tune_ir_hash(b.module->funcs[0]) == h);
  /* comments move source locations, not the kernel's structure */
  char *moved = malloc(strlen(MATMUL) + 64);
  sprintf(moved, "// a comment\n\n%s", MATMUL);
  assert_true(tpk_tune_ir_hash(unbound(&c, moved, "matmul")) == h);
  /* so does a renamed variable (the IR's structure is the same) */
  TestCompile r;
  char *renamed = strdup(MATMUL);
  for (char *p = renamed; (p = strstr(p, "acc")); p += 3) memcpy(p, "tot", 3);
  assert_true(tpk_tune_ir_hash(unbound(&r, renamed, "matmul")) == h);
  free(renamed);
  test_compile_free(&r);
  /* an edit to the body or to the declared values changes it */
  char *edited = strdup(MATMUL);
  memcpy(strstr(edited, "acc += dot"), "acc -= dot", 10);
  assert_true(tpk_tune_ir_hash(unbound(&d, edited, "matmul")) != h);
  char *choices = strdup(MATMUL);
  memcpy(strstr(choices, "BK in [128, 256]"), "BK in [128, 512]", 16);
  assert_true(tpk_tune_ir_hash(unbound(&e, choices, "matmul")) != h);
  free(moved);
  free(edited);
  free(choices);
  test_compile_free(&a);
  test_compile_free(&b);
  test_compile_free(&c);
  test_compile_free(&d);
  test_compile_free(&e);
}

static void test_keys(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey k1, k2;
  key_of(&k1, f, "sim:v5e", 512, 256, 1024);
  assert_string_equal(k1.kernel, "matmul");
  assert_string_equal(k1.shapes, "M=512,K=1024,N=256"); /* symbols in order of first appearance */
  assert_string_equal(k1.device, "sim:v5e");
  key_of(&k2, f, "sim:trillium", 512, 256, 1024);
  assert_string_equal(k2.device, "sim:v6e"); /* aliases resolve */
  key_of(&k2, f, "host", 512, 256, 1024);
  assert_string_equal(k2.device, "host");

  /* every part of the key names a different file */
  char *p1 = tpk_tune_cache_path("/c", &k1);
  const char *variants[] = {"shapes", "device", "hash", "kernel"};
  for (size_t i = 0; i < TPK_ARRAY_LEN(variants); i++) {
    k2 = k1;
    if (i == 0) snprintf(k2.shapes, sizeof k2.shapes, "M=512,K=1024,N=512");
    if (i == 1) snprintf(k2.device, sizeof k2.device, "sim:v6e");
    if (i == 2) k2.ir_hash ^= 1;
    if (i == 3) snprintf(k2.kernel, sizeof k2.kernel, "matmul2");
    char *p2 = tpk_tune_cache_path("/c", &k2);
    if (strcmp(p1, p2) == 0) fail_msg("changing the %s kept the path %s", variants[i], p1);
    free(p2);
  }
  assert_int_equal(strncmp(p1, "/c/tune/", 8), 0);
  free(p1);

  /* errors */
  TpkError err = {0};
  TpkBinding two[] = {{"M", 1}, {"N", 2}};
  assert_int_equal(tpk_tune_key(&k2, f, 1, two, 2, "sim:v5e", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'matmul' needs the size of shape symbol K (its symbols are M, K, N)");
  TpkBinding extra[] = {{"M", 1}, {"N", 2}, {"K", 3}, {"Q", 4}};
  assert_int_equal(tpk_tune_key(&k2, f, 1, extra, 4, "sim:v5e", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'matmul' has no shape symbol 'Q'; its symbols are M, K, N");
  TpkBinding twice[] = {{"M", 1}, {"M", 2}};
  assert_int_equal(tpk_tune_key(&k2, f, 1, twice, 2, "sim:v5e", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "shape symbol M is given twice");
  assert_int_equal(tpk_tune_key(&k2, f, 1, extra, 3, "gpu", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "unknown device 'gpu'; devices are \"host\" and \"sim:<chip>\" (e.g. sim:v5e)");
  assert_int_equal(tpk_tune_key(&k2, f, 1, extra, 3, "sim:v9", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "unknown chip 'v9'"));
  assert_int_equal(tpk_tune_key(&k2, f, 1, extra, 3, "sim:v5e-2x2", &err), TPK_ERR_UNSUPPORTED);
  test_compile_free(&c);
}

/* ---- the cache -------------------------------------------------------------------------- */

static void test_cache_round_trip(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey key, other;
  key_of(&key, f, "sim:v5e", 512, 512, 512);
  TpkTuneConfig got = {0};
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got)); /* nothing yet */
  assert_false(tpk_tune_lookup(&key, f, tmp_root, NULL, &got));

  int64_t values[] = {256, 128, 256};
  char *path = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, values, 1.25e-4, &path, &err), TPK_OK);
  assert_non_null(path);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_true(tpk_tune_cache_load(tmp_root, &key, f, &got));
  assert_int_equal(got.n, 3);
  assert_string_equal(got.tunes[0].name, "BM");
  assert_int_equal(got.tunes[0].value, 256);
  assert_string_equal(got.tunes[1].name, "BN");
  assert_int_equal(got.tunes[1].value, 128);
  assert_int_equal(got.tunes[2].value, 256);
  assert_true(got.seconds == 1.25e-4);
  assert_string_equal(got.from, "cache");
  memset(&got, 0, sizeof got);
  assert_true(tpk_tune_lookup(&key, f, tmp_root, NULL, &got));
  assert_int_equal(got.tunes[0].value, 256);

  /* other shapes, another device, another version of the kernel: misses */
  key_of(&other, f, "sim:v5e", 512, 512, 1024);
  assert_false(tpk_tune_lookup(&other, f, tmp_root, NULL, &got));
  key_of(&other, f, "sim:v6e", 512, 512, 512);
  assert_false(tpk_tune_lookup(&other, f, tmp_root, NULL, &got));
  other = key;
  other.ir_hash ^= 0x10;
  assert_false(tpk_tune_lookup(&other, f, tmp_root, NULL, &got));
  /* "" means no cache */
  assert_false(tpk_tune_lookup(&key, f, "", NULL, &got));
  /* NULL means the default root: $TPK_CACHE_DIR, set to tmp_root in setup */
  assert_true(tpk_tune_lookup(&key, f, NULL, NULL, &got));

  /* a new winner replaces the old one */
  int64_t better[] = {128, 256, 128};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, better, 1e-4, NULL, &err), TPK_OK);
  assert_true(tpk_tune_cache_load(tmp_root, &key, f, &got));
  assert_int_equal(got.tunes[0].value, 128);
  assert_int_equal(got.tunes[1].value, 256);
  assert_true(got.seconds == 1e-4);
  free(path);
  test_compile_free(&c);
}

/* Each way an entry can be wrong; none is used, none crashes. */
static void test_cache_damaged(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey key, other;
  key_of(&key, f, "sim:v5e", 640, 640, 640);
  key_of(&other, f, "sim:v5e", 640, 640, 1280);
  int64_t values[] = {256, 256, 128};
  char *path = NULL, *other_path = NULL;
  TpkError err = {0};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &other, f, values, 2e-3, &other_path, &err), TPK_OK);
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, values, 2e-3, &path, &err), TPK_OK);
  size_t len;
  char *good = test_read_file(path, &len);
  assert_non_null(good);
  TpkTuneConfig got;
  assert_true(tpk_tune_cache_load(tmp_root, &key, f, &got));

  /* truncated anywhere */
  for (size_t n = 0; n < len; n++) {
    write_text(path, good, n);
    if (tpk_tune_cache_load(tmp_root, &key, f, &got)) fail_msg("a file cut to %zu of %zu bytes was used", n, len);
  }
  /* edited: each replacement of the good text must make it unusable */
  const char *edits[][2] = {
      {"BM=256", "BM=384"},          /* a value the kernel does not declare */
      {"BM=256", "BX=256"},          /* a tunable it does not have */
      {"BN=256", "BM=256"},          /* one given twice, one missing */
      {",BK=128", ""},               /* one missing */
      {"tpk 0.1.0", "tpk 0.0.9"},    /* another version of tpk wrote it */
      {"end\n", "end\nmore\n"},      /* trailing garbage */
      {"seconds 0.002", "seconds x"}, /* not a number */
      {"seconds 0.002", "seconds -1"},
      {"tpk-tune 1", "tpk-tune 2"},
      {"BK=128", "BK=128\0"},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(edits); i++) {
    char *at = strstr(good, edits[i][0]);
    if (!at) fail_msg("'%s' is not in the entry:\n%s", edits[i][0], good);
    size_t before = (size_t)(at - good), from = strlen(edits[i][0]);
    size_t to = i == TPK_ARRAY_LEN(edits) - 1 ? 7 : strlen(edits[i][1]); /* the last one has a NUL */
    char *bad = malloc(len + 64);
    memcpy(bad, good, before);
    memcpy(bad + before, edits[i][1], to);
    memcpy(bad + before + to, at + from, len - before - from);
    write_text(path, bad, len - from + to);
    if (tpk_tune_cache_load(tmp_root, &key, f, &got)) fail_msg("the edit '%s' -> '%s' was used", edits[i][0], edits[i][1]);
    free(bad);
  }
  /* another key's entry under this name (a foreign file) */
  char *foreign = test_read_file(other_path, &len);
  write_text(path, foreign, len);
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  /* binary garbage, and a huge file */
  char junk[8192];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 131 + 7);
  write_text(path, junk, sizeof junk);
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  /* the good text again, but writable by others; then a symlink; then a folder */
  write_text(path, good, strlen(good));
  assert_true(tpk_tune_cache_load(tmp_root, &key, f, &got));
  assert_int_equal(chmod(path, 0666), 0);
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  if (geteuid() == 0) { /* another user's (only root can arrange that): not planted by them */
    assert_int_equal(chmod(path, 0644), 0);
    assert_true(tpk_tune_cache_load(tmp_root, &key, f, &got));
    assert_int_equal(chown(path, 65534, 65534), 0);
    assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  }
  assert_int_equal(unlink(path), 0);
  assert_int_equal(symlink(other_path, path), 0);
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  assert_int_equal(unlink(path), 0);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_false(tpk_tune_cache_load(tmp_root, &key, f, &got));
  assert_false(tpk_tune_lookup(&key, f, tmp_root, NULL, &got));
  /* storing over a folder fails with a message, and does not crash */
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, values, 1, NULL, &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "cannot write"));
  assert_int_equal(rmdir(path), 0);
  /* a root that cannot be created */
  assert_int_equal(tpk_tune_cache_store("/proc/no/such", &key, f, values, 1, NULL, &err), TPK_ERR_IO);
  free(good);
  free(foreign);
  free(path);
  free(other_path);
  test_compile_free(&c);
}

/* ---- the defaults table -------------------------------------------------------------------- */

static void test_table(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey key;
  key_of(&key, f, "sim:v5e", 768, 768, 768);
  char text[1024];
  snprintf(text, sizeof text,
           "# a comment\n"
           "\n"
           "matmul\t%016llx\tmm.tpk\tsim:v5e\tM=768,K=768,N=768\tBM=256,BN=256,BK=128\t0.00012\n"
           "matmul\t%016llx\tmm.tpk\tsim:v6e\tM=768,K=768,N=768\tBM=128,BN=256,BK=128\t5e-05\n"
           "matmul\t%016llx\tmm.tpk\tsim:v5p\tM=768,K=768,N=768\tBM=999,BN=256,BK=128\t5e-05\n",
           (unsigned long long)key.ir_hash, (unsigned long long)key.ir_hash, (unsigned long long)key.ir_hash);
  TpkTuneTable t;
  TpkError err = {0};
  assert_int_equal(tpk_tune_table_parse(&t, text, strlen(text), "tuned.tsv", &err), TPK_OK);
  assert_int_equal(t.nrows, 5);
  TpkTuneConfig got;
  assert_true(tpk_tune_table_find(&t, &key, f, &got));
  assert_int_equal(got.tunes[0].value, 256);
  assert_int_equal(got.tunes[2].value, 128);
  assert_string_equal(got.from, "defaults");
  assert_true(got.seconds == 0.00012);
  TpkTuneKey v6 = key, v5p = key, stale = key;
  snprintf(v6.device, sizeof v6.device, "sim:v6e");
  snprintf(v5p.device, sizeof v5p.device, "sim:v5p");
  stale.ir_hash ^= 1;
  assert_true(tpk_tune_table_find(&t, &v6, f, &got));
  assert_int_equal(got.tunes[0].value, 128);
  assert_false(tpk_tune_table_find(&t, &v5p, f, &got));  /* 999 is not a declared BM */
  assert_false(tpk_tune_table_find(&t, &stale, f, &got)); /* the kernel changed since */

  /* lookup: the cache first, then the defaults */
  assert_true(tpk_tune_lookup(&key, f, "", &t, &got));
  assert_string_equal(got.from, "defaults");
  int64_t values[] = {128, 128, 256};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, values, 1e-4, NULL, &err), TPK_OK);
  assert_true(tpk_tune_lookup(&key, f, tmp_root, &t, &got));
  assert_string_equal(got.from, "cache");
  assert_int_equal(got.tunes[2].value, 256);

  /* render is the text, and put replaces the row of the same kernel, file,
   * device and shapes, even with an older hash */
  char *out = tpk_tune_table_render(&t);
  assert_string_equal(out, text);
  free(out);
  assert_int_equal(tpk_tune_table_put(&t, &stale, "mm.tpk", "BM=128,BN=128,BK=128", 7e-5, &err), TPK_OK);
  assert_int_equal(t.nrows, 5);
  assert_true(tpk_tune_table_find(&t, &stale, f, &got));
  assert_false(tpk_tune_table_find(&t, &key, f, &got));
  assert_int_equal(tpk_tune_table_put(&t, &key, "other.tpk", "BM=128,BN=128,BK=128", 7e-5, &err), TPK_OK);
  assert_int_equal(t.nrows, 6);
  out = tpk_tune_table_render(&t);
  TpkTuneTable again;
  assert_int_equal(tpk_tune_table_parse(&again, out, strlen(out), "x", &err), TPK_OK);
  char *out2 = tpk_tune_table_render(&again);
  assert_string_equal(out, out2);
  assert_true(strncmp(out, "# a comment\n\nmatmul\t", 20) == 0); /* comments stay in place */
  free(out);
  free(out2);
  tpk_tune_table_free(&again);
  tpk_tune_table_free(&t);

  /* malformed rows are errors naming the line */
  const char *bad[][2] = {
      {"# ok\nmatmul\t0123456789abcdef\tf\tsim:v5e\tM=1\tBM=1\n", "tuned.tsv:2: expected 7 tab-separated fields (kernel, ir-hash, file, device, shapes, tunables, seconds), got 6"},
      {"matmul\t0123\tf\tsim:v5e\tM=1\tBM=1\t1\n", "tuned.tsv:1: the IR hash is not 16 lowercase hex digits"},
      {"mat mul\t0123456789abcdef\tf\tsim:v5e\tM=1\tBM=1\t1\n", "tuned.tsv:1: the kernel name is not an identifier"},
      {"matmul\t0123456789abcdef\tf\tsim:trillium\tM=1\tBM=1\t1\n", "tuned.tsv:1: the device is not \"host\" or \"sim:<chip>\" with the chip's short name"},
      {"matmul\t0123456789abcdef\tf\tsim:v5e\tM=1,\tBM=1\t1\n", "tuned.tsv:1: the shapes are not NAME=INTEGER[,NAME=INTEGER...]"},
      {"matmul\t0123456789abcdef\tf\tsim:v5e\tM=1\tBM=-1\t1\n", "tuned.tsv:1: the tunables are not NAME=INTEGER[,NAME=INTEGER...]"},
      {"matmul\t0123456789abcdef\tf\tsim:v5e\tM=1\tBM=1\tfast\n", "tuned.tsv:1: the seconds are not a number >= 0"},
      {"matmul\t0123456789abcdef\t\tsim:v5e\tM=1\tBM=1\t1\n", "tuned.tsv:1: the file is empty"},
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(bad); i++) {
    assert_int_equal(tpk_tune_table_parse(&t, bad[i][0], strlen(bad[i][0]), "tuned.tsv", &err), TPK_ERR_PARSE);
    assert_string_equal(err.message, bad[i][1]);
    assert_int_equal(t.nrows, 0);
  }

  /* tpk_tune_defaults_save: creates the file with a header, then updates
   * its row in place */
  char path[256];
  snprintf(path, sizeof path, "%s/tuned.tsv", tmp_root);
  assert_int_equal(tpk_tune_defaults_save(path, &key, "mm.tpk", "BM=256,BN=128,BK=128", 3e-4, &err), TPK_OK);
  assert_int_equal(tpk_tune_defaults_save(path, &v6, "mm.tpk", "BM=256,BN=256,BK=128", 1e-4, &err), TPK_OK);
  assert_int_equal(tpk_tune_defaults_save(path, &key, "mm.tpk", "BM=128,BN=128,BK=256", 2e-4, &err), TPK_OK);
  size_t len;
  char *saved = test_read_file(path, &len);
  assert_int_equal(tpk_tune_table_parse(&t, saved, len, path, &err), TPK_OK);
  int rows = 0;
  for (int i = 0; i < t.nrows; i++) rows += !t.rows[i].text;
  assert_int_equal(rows, 2);
  assert_true(saved[0] == '#');
  assert_true(tpk_tune_table_find(&t, &key, f, &got));
  assert_int_equal(got.tunes[0].value, 128);
  assert_int_equal(got.tunes[2].value, 256);
  tpk_tune_table_free(&t);
  /* a file that is not a table is left alone */
  write_text(path, "not a table\n", 12);
  assert_int_equal(tpk_tune_defaults_save(path, &key, "mm.tpk", "BM=128,BN=128,BK=256", 2e-4, &err), TPK_ERR_PARSE);
  free(saved);
  saved = test_read_file(path, NULL);
  assert_string_equal(saved, "not a table\n");
  free(saved);
  test_compile_free(&c);
}

/* Sizes no row names take the row of the nearest sizes of their kernel and
 * device, when each size is within a factor of 4 of it; else nothing. */
static void test_table_nearest(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey key;
  key_of(&key, f, "host", 768, 768, 768);
  unsigned long long h = (unsigned long long)key.ir_hash;
  char text[1024];
  snprintf(text, sizeof text,
           "matmul\t%016llx\tmm.tpk\thost\tM=768,K=768,N=768\tBM=256,BN=256,BK=128\t0.00012\n"
           "matmul\t%016llx\tmm.tpk\thost\tM=64,K=64,N=64\tBM=128,BN=128,BK=256\t1e-06\n"
           "matmul\t%016llx\tmm.tpk\thost\tM=128,K=64,N=64\tBM=256,BN=128,BK=256\t1e-06\n"
           "matmul\t%016llx\tmm.tpk\tsim:v5e\tM=100,K=64,N=64\tBM=128,BN=256,BK=128\t1e-06\n",
           h, h, h, h);
  TpkTuneTable t;
  TpkError err = {0};
  assert_int_equal(tpk_tune_table_parse(&t, text, strlen(text), "tuned.tsv", &err), TPK_OK);
  TpkTuneConfig got;
  struct {
    int64_t m, n, k;
    const char *want, *near; /* want NULL: no row */
  } cases[] = {
      {768, 768, 768, "256,256,128", NULL},            /* its own row, though a later one is near too */
      {1536, 768, 768, "256,256,128", "M=768,K=768,N=768"},
      {80, 64, 64, "128,128,256", "M=64,K=64,N=64"},   /* log2(80/64) < log2(128/80) */
      {120, 64, 64, "256,128,256", "M=128,K=64,N=64"},
      {96, 64, 64, "256,128,256", "M=128,K=64,N=64"},  /* by ratio: 128/96 < 96/64 */
      {64, 200, 64, "128,128,256", "M=64,K=64,N=64"},  /* the sum over sizes: 200/64 against 2 * 200/64 */
      {64, 300, 64, NULL, NULL},                       /* N is more than 4x 64 */
      {64, 257, 1024, NULL, NULL},                     /* N within 4x of 64 but K 16x */
      {3100, 768, 768, NULL, NULL},                    /* M is more than 4x 768 and 128 */
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(cases); i++) {
    TpkTuneKey k;
    key_of(&k, f, "host", cases[i].m, cases[i].n, cases[i].k);
    memset(&got, 0, sizeof got);
    bool found = tpk_tune_table_nearest(&t, &k, f, &got);
    if (found != (cases[i].want != NULL)) fail_msg("case %zu: found %d", i, found);
    TpkTuneConfig exact;
    assert_int_equal(tpk_tune_table_find(&t, &k, f, &exact), i == 0); /* exact rows only */
    if (!found) continue;
    char tunes[64];
    snprintf(tunes, sizeof tunes, "%lld,%lld,%lld", (long long)got.tunes[0].value, (long long)got.tunes[1].value,
             (long long)got.tunes[2].value);
    assert_string_equal(tunes, cases[i].want);
    assert_string_equal(got.from, "defaults");
    if (cases[i].near) assert_string_equal(got.near, cases[i].near);
    else assert_null(got.near);
  }
  /* another device's rows, and another version of the kernel, are never near */
  TpkTuneKey v6 = key, stale = key;
  key_of(&v6, f, "sim:v6e", 100, 64, 64);
  stale.ir_hash ^= 1;
  assert_false(tpk_tune_table_nearest(&t, &v6, f, &got));
  assert_false(tpk_tune_table_nearest(&t, &stale, f, &got));
  /* what a launch takes: the cache's row for its exact sizes before a near default */
  TpkTuneKey k;
  key_of(&k, f, "host", 80, 64, 64);
  assert_true(tpk_tune_lookup(&k, f, "", &t, &got));
  assert_string_equal(got.near, "M=64,K=64,N=64");
  int64_t values[] = {256, 256, 256};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &k, f, values, 1e-4, NULL, &err), TPK_OK);
  assert_true(tpk_tune_lookup(&k, f, tmp_root, &t, &got));
  assert_string_equal(got.from, "cache");
  assert_null(got.near);
  tpk_tune_table_free(&t);
  test_compile_free(&c);
}

/* kernels/tuned.tsv parses, and every row still describes its kernel: a row
 * whose kernel was edited since it was tuned fails here (retune it with
 * `tpk tune ... --save-default kernels/tuned.tsv`). */
static void test_shipped_defaults(void **state) {
  (void)state;
  size_t len;
  char *text = test_read_file(test_path("kernels/tuned.tsv"), &len);
  assert_non_null(text);
  TpkTuneTable t;
  TpkError err = {0};
  if (tpk_tune_table_parse(&t, text, len, "kernels/tuned.tsv", &err) != TPK_OK) fail_msg("%s", err.message);
  int rows = 0;
  for (int i = 0; i < t.nrows; i++) {
    const TpkTuneRow *row = &t.rows[i];
    if (row->text) continue;
    rows++;
    char *src = test_read_file(test_path(row->file), NULL);
    if (!src) fail_msg("kernels/tuned.tsv: row %d names %s, which cannot be read", i + 1, row->file);
    TestCompile c;
    const TpkFunc *f = unbound(&c, src, row->kernel);
    if (tpk_tune_ir_hash(f) != row->ir_hash)
      fail_msg("kernels/tuned.tsv: kernel %s of %s changed since it was tuned (hash %016llx, the row has %016llx)",
               row->kernel, row->file, (unsigned long long)tpk_tune_ir_hash(f), (unsigned long long)row->ir_hash);
    int64_t values[TPK_TUNE_MAX_TUNABLES];
    if (!tpk_tune_parse(f, row->tunes, strlen(row->tunes), values))
      fail_msg("kernels/tuned.tsv: '%s' is not a configuration of %s", row->tunes, row->kernel);
    /* the row is found under the key a launch would build */
    TpkBinding syms[16];
    char names[16][32];
    int n = 0;
    for (const char *p = row->shapes; *p && n < 16; n++) {
      size_t eq = strcspn(p, "=");
      snprintf(names[n], sizeof names[n], "%.*s", (int)eq, p);
      syms[n] = (TpkBinding){names[n], atoll(p + eq + 1)};
      p += strcspn(p, ",");
      p += *p == ',';
    }
    TpkTuneKey key;
    if (tpk_tune_key(&key, f, row->ir_hash, syms, n, row->device, &err) != TPK_OK) fail_msg("%s", err.message);
    TpkTuneConfig got;
    assert_true(tpk_tune_table_find(&t, &key, f, &got));
    free(src);
    test_compile_free(&c);
  }
  assert_true(rows > 0);
  tpk_tune_table_free(&t);
  free(text);
}

/* ---- the search ---------------------------------------------------------------------------- */

typedef struct Seen {
  int calls;
  double best_so_far;
  bool monotone;
} Seen;

static void count_progress(void *user, const TpkTuneReport *r, const TpkTunePoint *p) {
  Seen *s = user;
  s->calls++;
  assert_true(p == &r->points[r->npoints - 1]);
  if (r->best >= 0) {
    if (s->best_so_far && r->points[r->best].seconds > s->best_so_far) s->monotone = false;
    s->best_so_far = r->points[r->best].seconds;
  }
}

/* The cycles a launch on the sim device reports for one configuration: the
 * runtime's own path (specialise, JIT, schedule), not the tuner's. */
static double launch_cycles(TpkKernel *k, TpkBuffer **args, const TpkTuneReport *r, const int64_t *v) {
  TpkNamedInt tunes[TPK_TUNE_MAX_TUNABLES];
  for (int i = 0; i < r->ntunables; i++) tunes[i] = (TpkNamedInt){r->f->tunes[i].name, v[i]};
  TpkLaunchResult ran;
  TpkLaunch L = {.args = args, .tunes = tunes, .ntunes = r->ntunables, .result = &ran};
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s", tpk_last_error());
  assert_true(ran.simulated);
  return ran.sim.cycles;
}

static void test_sim_search_finds_the_fastest(void **state) {
  (void)state;
  TpkProgram *src = program("mm.tpk", MATMUL);
  TpkBinding syms[] = {{"M", 512}, {"N", 384}, {"K", 640}};
  Seen seen = {.monotone = true};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 3, .progress = count_progress, .user = &seen};
  TpkTuneReport r;
  TpkError err = {0};
  if (tpk_tune_search(src, "matmul", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 8);
  assert_int_equal(r.space, 8);
  assert_true(r.exhaustive);
  assert_int_equal(r.ntimed, 8);
  assert_int_equal(seen.calls, 8);
  assert_true(seen.monotone);
  assert_int_equal(r.start, 0);
  int64_t defaults[] = {128, 128, 128};
  assert_memory_equal(r.points[0].values, defaults, sizeof defaults);
  assert_string_equal(r.key.device, "sim:v5e");
  assert_string_equal(r.key.shapes, "M=512,K=640,N=384");
  /* every configuration once */
  for (int i = 0; i < r.npoints; i++)
    for (int j = 0; j < i; j++) assert_memory_not_equal(r.points[i].values, r.points[j].values, 3 * sizeof(int64_t));

  /* each configuration launched on sim:v5e through the runtime, and the
   * fastest of those */
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &dev), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "mm.tpk", MATMUL, strlen(MATMUL), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "matmul", &k), TPK_OK);
  TpkBuffer *a, *b, *c;
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, (int64_t[]){512, 640}, &a), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, (int64_t[]){640, 384}, &b), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){512, 384}, &c), TPK_OK);
  TpkBuffer *args[] = {a, b, c};
  int fastest = -1;
  double fastest_cycles = 0;
  bool differ = false;
  for (int i = 0; i < r.npoints; i++) {
    double cyc = launch_cycles(k, args, &r, r.points[i].values);
    if (fabs(cyc - r.points[i].cycles) > 1e-9 * cyc)
      fail_msg("configuration %d: the tuner timed %.0f cycles, a launch %.0f", i, r.points[i].cycles, cyc);
    if (fastest < 0 || cyc < fastest_cycles) {
      fastest = i;
      fastest_cycles = cyc;
    }
    differ |= cyc != r.points[0].cycles;
  }
  assert_true(differ); /* the configurations are not all alike: the choice matters */
  assert_int_equal(r.best, fastest);
  tpk_buffer_destroy(a);
  tpk_buffer_destroy(b);
  tpk_buffer_destroy(c);
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  tpk_tune_report_free(&r);
}

static void test_sim_search_skips_what_does_not_fit(void **state) {
  (void)state;
  TpkProgram *src = program("scale.tpk", SCALE);
  TpkBinding syms[] = {{"M", 4096}, {"N", 4096}};
  TpkTuneOptions o = {.device = "sim:v4", .syms = syms, .nsyms = 2};
  TpkTuneReport r;
  TpkError err = {0};
  if (tpk_tune_search(src, NULL, &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 3);
  assert_int_equal(r.ntimed, 2);
  assert_int_equal(r.nskipped, 1);
  const TpkTunePoint *big = &r.points[1];
  assert_int_equal(big->values[0], 2048);
  assert_int_equal(big->status, TPK_ERR_NOMEM);
  assert_true(big->no_fit);
  assert_non_null(strstr(big->reason, "needs 32.0 MiB of VMEM for one grid instance but sim:v4 has 16.0 MiB"));
  assert_true(r.best == 0 || r.best == 2);
  assert_true(r.points[r.best].seconds <= r.points[2 - r.best].seconds);
  tpk_tune_report_free(&r);

  /* when nothing fits, the search fails with the first reason */
  TpkBinding fixed[] = {{"BM", 2048}};
  o.fixed = fixed;
  o.nfixed = 1;
  assert_int_equal(tpk_tune_search(src, NULL, &o, &r, &err), TPK_ERR_NOMEM);
  assert_int_equal(r.npoints, 1);
  assert_non_null(strstr(err.message, "none of the 1 configurations of kernel 'scale' ran; the first: kernel 'scale' needs"));
  tpk_tune_report_free(&r);
}

/* Seconds of one configuration of WIDE at 2048^3 on v5e, on its own. */
static double wide_seconds(const int64_t *v) {
  TestCompile c;
  const TpkFunc *f = unbound(&c, WIDE, "matmul");
  TpkBinding binds[] = {{"M", 2048}, {"N", 2048}, {"K", 2048}, {"BM", v[0]}, {"BN", v[1]}, {"BK", v[2]}};
  TpkSimReport rep;
  TpkError err = {0};
  if (tpk_sim_time_kernel(f, binds, 6, tpk_sim_chip_find("v5e"), &rep, &err) != TPK_OK) fail_msg("%s", err.message);
  test_compile_free(&c);
  return rep.seconds;
}

static void test_search_past_the_budget(void **state) {
  (void)state;
  TpkProgram *src = program("wide.tpk", WIDE);
  TpkBinding syms[] = {{"M", 2048}, {"N", 2048}, {"K", 2048}};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 3, .max_points = 10};
  TpkTuneReport r;
  TpkError err = {0};
  /* a budget of 10 of the 125 */
  if (tpk_tune_search(src, "matmul", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.space, 125);
  assert_false(r.exhaustive);
  assert_int_equal(r.npoints, 10);
  assert_true(r.points[r.best].seconds < r.points[0].seconds);
  tpk_tune_report_free(&r);

  /* with room to finish, the descent stops where no single change helps */
  o.max_points = 100;
  if (tpk_tune_search(src, "matmul", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_false(r.exhaustive);
  assert_true(r.npoints < 100);
  for (int i = 0; i < r.npoints; i++)
    for (int j = 0; j < i; j++) assert_memory_not_equal(r.points[i].values, r.points[j].values, 3 * sizeof(int64_t));
  const TpkTunePoint *best = &r.points[r.best];
  assert_true(fabs(wide_seconds(best->values) - best->seconds) <= 1e-12);
  for (int t = 0; t < 3; t++)
    for (int c = 0; c < r.f->tunes[t].nchoices; c++) {
      int64_t v[3] = {best->values[0], best->values[1], best->values[2]};
      v[t] = r.f->tunes[t].choices[c];
      if (wide_seconds(v) < best->seconds)
        fail_msg("BM=%lld,BN=%lld,BK=%lld is faster than the descent's result", (long long)v[0], (long long)v[1],
                 (long long)v[2]);
    }
  tpk_tune_report_free(&r);
}

static void test_held_tunables(void **state) {
  (void)state;
  TpkProgram *src = program("mm.tpk", MATMUL);
  TpkBinding syms[] = {{"M", 512}, {"N", 512}, {"K", 512}};
  TpkBinding fixed[] = {{"BK", 256}};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 3, .fixed = fixed, .nfixed = 1};
  TpkTuneReport r;
  TpkError err = {0};
  if (tpk_tune_search(src, "matmul", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 4);
  for (int i = 0; i < r.npoints; i++) assert_int_equal(r.points[i].values[2], 256);
  assert_int_equal(r.points[0].values[0], 128); /* the start: defaults, with BK held */
  tpk_tune_report_free(&r);

  TpkBinding unknown[] = {{"BX", 256}};
  o.fixed = unknown;
  assert_int_equal(tpk_tune_search(src, "matmul", &o, &r, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'matmul' has no tunable 'BX'; its tunables are BM, BN, BK");
  tpk_tune_report_free(&r);
  TpkBinding undeclared[] = {{"BK", 384}};
  o.fixed = undeclared;
  assert_int_equal(tpk_tune_search(src, "matmul", &o, &r, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "tunable BK of kernel 'matmul' is one of [128, 256], not 384");
  tpk_tune_report_free(&r);
  TpkBinding twice[] = {{"BK", 128}, {"BK", 256}};
  o.fixed = twice;
  o.nfixed = 2;
  assert_int_equal(tpk_tune_search(src, "matmul", &o, &r, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "tunable BK is held twice");
  tpk_tune_report_free(&r);
}

static void test_search_errors(void **state) {
  (void)state;
  TpkProgram *src = program("mm.tpk", MATMUL);
  TpkBinding syms[] = {{"M", 512}, {"N", 512}, {"K", 512}};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 3};
  TpkTuneReport r;
  TpkError err = {0};
  assert_int_equal(tpk_tune_search(src, "matmal", &o, &r, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "mm.tpk has no kernel 'matmal'; it has: matmul");
  tpk_tune_report_free(&r);
  o.nsyms = 2;
  assert_int_equal(tpk_tune_search(src, "matmul", &o, &r, &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "kernel 'matmul' needs the size of shape symbol K (its symbols are M, K, N)");
  tpk_tune_report_free(&r);
  o.nsyms = 3;
  o.device = "tpu";
  assert_int_equal(tpk_tune_search(src, "matmul", &o, &r, &err), TPK_ERR_INVALID);
  tpk_tune_report_free(&r);
  o.device = "sim:v5e";

  TpkProgram *plain = program("add.tpk", "kernel add(x: f32[N]) -> (y: f32[N]) { y = x + 1.0; }\n");
  TpkBinding n[] = {{"N", 64}};
  o.syms = n;
  o.nsyms = 1;
  assert_int_equal(tpk_tune_search(plain, NULL, &o, &r, &err), TPK_ERR_UNSUPPORTED);
  assert_string_equal(err.message, "kernel 'add' declares no tunables (`tune NAME in [...]`): nothing to tune");
  tpk_tune_report_free(&r);

}

static void test_host_search(void **state) {
  (void)state;
  TpkProgram *src = program("scale.tpk", SCALE);
  TpkBinding syms[] = {{"M", 64}, {"N", 256}};
  TpkBinding fixed[] = {{"BM", 8}};
  double scalars[] = {0, 2.0, 0};
  TpkTuneOptions o = {.device = "host", .syms = syms, .nsyms = 2, .scalars = scalars, .repeat = 3};
  TpkTuneReport r;
  TpkError err = {0};
  if (tpk_tune_search(src, "scale", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 3);
  assert_int_equal(r.ntimed, 3);
  assert_string_equal(r.key.device, "host");
  for (int i = 0; i < r.npoints; i++) {
    assert_int_equal(r.points[i].status, TPK_OK);
    assert_true(r.points[i].seconds > 0);
    assert_true(strcmp(r.points[i].tier, "cc") == 0 || strcmp(r.points[i].tier, "tcc") == 0);
    assert_true(r.points[r.best].seconds <= r.points[i].seconds);
  }
  tpk_tune_report_free(&r);
  /* held to one configuration */
  o.fixed = fixed;
  o.nfixed = 1;
  if (tpk_tune_search(src, "scale", &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  assert_int_equal(r.npoints, 1);
  assert_int_equal(r.best, 0);
  tpk_tune_report_free(&r);
}

/* One matmul launch of M x 100 by 100 x 200 on dev; "BM=..,BN=..,BK=.. (from)" in got. */
static void launch_matmul(TpkDevice *dev, TpkKernel *k, int64_t m, const TpkNamedInt *given, int ngiven, char *got,
                          size_t size) {
  TpkBuffer *b[3];
  int64_t sa[] = {m, 100}, sb[] = {100, 200}, sc[] = {m, 200};
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, sa, &b[0]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_BF16, 2, sb, &b[1]), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 2, sc, &b[2]), TPK_OK);
  TpkLaunchResult ran;
  TpkLaunch L = {.args = b, .tunes = given, .ntunes = ngiven, .result = &ran};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  snprintf(got, size, "%s (%s)", ran.tunes, ran.tunes_from);
  for (int i = 0; i < 3; i++) tpk_buffer_destroy(b[i]);
}

/* Launches that name no tunables take the cache's winner for their sizes and
 * device; on a chip, sizes nobody tuned are searched at the launch (the
 * search's winner, then filed in the cache); on the host they keep the
 * declared defaults; named tunables win. */
static void test_launches_use_the_cache(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, MATMUL, "matmul");
  TpkTuneKey key, searched;
  key_of(&key, f, "sim:v5e", 300, 200, 100);
  key_of(&searched, f, "sim:v5e", 301, 200, 100);
  int64_t values[] = {256, 128, 256};
  TpkError err = {0};
  assert_int_equal(tpk_tune_cache_store(tmp_root, &key, f, values, 1e-4, NULL, &err), TPK_OK);
  /* what a search of M = 301 finds */
  TpkBinding syms[] = {{"M", 301}, {"N", 200}, {"K", 100}};
  TpkTuneOptions o = {.device = "sim:v5e", .syms = syms, .nsyms = 3};
  TpkTuneReport r;
  if (tpk_tune_search_chip(f, tpk_tune_ir_hash(f), &o, &r, &err) != TPK_OK) fail_msg("%s", err.message);
  TpkStr best = {0};
  tpk_tune_format(&best, f, r.points[r.best].values);
  char want_searched[300];
  snprintf(want_searched, sizeof want_searched, "%s (tuned at launch)", best.data);
  TpkTuneConfig filed;
  assert_false(tpk_tune_cache_load(tmp_root, &searched, f, &filed));

  TpkContext *ctx;
  TpkDevice *dev, *host;
  TpkProgram *prog;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "sim:v5e", &dev), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_program_load_source(ctx, "matmul.tpk", MATMUL, strlen(MATMUL), &prog), TPK_OK);
  assert_int_equal(tpk_program_kernel(prog, "matmul", &k), TPK_OK);
  char got[300];
  launch_matmul(dev, k, 300, NULL, 0, got, sizeof got);
  assert_string_equal(got, "BM=256,BN=128,BK=256 (tuning cache)");
  launch_matmul(dev, k, 301, NULL, 0, got, sizeof got); /* sizes nobody tuned */
  assert_string_equal(got, want_searched);
  assert_true(tpk_tune_cache_load(tmp_root, &searched, f, &filed));
  for (int i = 0; i < f->ntunes; i++) assert_int_equal(filed.tunes[i].value, r.points[r.best].values[i]);
  TpkNamedInt given[] = {{"BK", 128}};
  launch_matmul(dev, k, 300, given, 1, got, sizeof got);
  assert_string_equal(got, "BM=128,BN=128,BK=128 (given)");
  launch_matmul(host, k, 301, NULL, 0, got, sizeof got); /* the host compiles rather than search */
  assert_string_equal(got, "BM=128,BN=128,BK=128 (declared defaults)");
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
  tpk_str_free(&best);
  tpk_tune_report_free(&r);
  test_compile_free(&c);
}

/* Attention-like blocks: BQ tiles S (a grid), BKV a loop over min(T, ...)
 * keys, BX an extent nobody can bound before the launch. */
static const char *BLOCKS = "kernel attend(q: f32[S, D], k: f32[T, D]) -> (o: f32[S, D])\n"
                            "  tune BQ in [256, 128, 64], BKV in [256, 64], BX in [64, 8]\n"
                            "{\n"
                            "  for i in tiles(S, BQ) {\n"
                            "    var acc = zeros(f32[BQ, D]);\n"
                            "    for j in tiles(minimum(T, i.start + BQ), BKV) { acc += dot(dot(q[i, :], transpose(k[j, :])), k[j, :]); }\n"
                            "    for x in tiles(T * 2, BX) { acc += 1.0; }\n"
                            "    o[i, :] = acc;\n"
                            "  }\n"
                            "}\n";

/* Declared defaults larger than the extents they tile take the smallest
 * declared choice that covers the largest of them; a library kernel
 * launched on the host at sizes nobody tuned runs them. */
static void test_fit_defaults(void **state) {
  (void)state;
  TestCompile c;
  const TpkFunc *f = unbound(&c, BLOCKS, "attend");
  struct {
    int64_t s, t;
    bool changed;
    int64_t bq, bkv, bx;
  } cases[] = {
      {4, 4, true, 64, 64, 64},      /* one block of the smallest choice each; BX's extent is unknown */
      {100, 100, true, 128, 256, 64}, /* 128 covers 100; no choice of BKV between 100 and 256 */
      {100, 50, true, 128, 64, 64},
      {300, 300, false, 256, 256, 64},
      {64, 1000, true, 64, 256, 64}, /* min(T, i.start + BQ) is bounded by T alone: unknown i.start */
  };
  for (size_t i = 0; i < TPK_ARRAY_LEN(cases); i++) {
    TpkBinding syms[] = {{"S", cases[i].s}, {"T", cases[i].t}, {"D", 8}};
    int64_t v[3];
    bool changed = tpk_tune_fit_defaults(f, syms, 3, v);
    if (changed != cases[i].changed || v[0] != cases[i].bq || v[1] != cases[i].bkv || v[2] != cases[i].bx)
      fail_msg("case %zu: %d BQ=%lld BKV=%lld BX=%lld", i, changed, (long long)v[0], (long long)v[1], (long long)v[2]);
  }
  /* a library kernel launched on the host at sizes no shipped row is near:
   * causal attention over 4-long sequences takes 64x64 blocks, not 256x256 */
  TpkContext *ctx;
  TpkDevice *host;
  TpkKernel *k;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, "host", &host), TPK_OK);
  assert_int_equal(tpk_std_kernel(ctx, "flash_attention_causal", &k), TPK_OK);
  int64_t shape[] = {1, 2, 4, 8}, rows[] = {1, 2, 4};
  TpkBuffer *b[6] = {NULL};
  for (int i = 0; i < 5; i++) /* q, k, v, o; b[3] is the scale */
    if (i != 3) assert_int_equal(tpk_buffer_create(host, TPK_BF16, 4, shape, &b[i]), TPK_OK);
  assert_int_equal(tpk_buffer_create(host, TPK_F32, 3, rows, &b[5]), TPK_OK);
  double scalars[6] = {[3] = 0.35};
  TpkLaunchResult ran;
  TpkLaunch L = {.args = b, .scalars = scalars, .result = &ran};
  assert_int_equal(tpk_kernel_launch(k, &L), TPK_OK);
  assert_string_equal(ran.tunes, "BQ=64,BKV=64");
  assert_string_equal(ran.tunes_from, "declared defaults fitted to the sizes");
  assert_int_equal(tpk_context_compiler_runs(ctx), 0);
  for (int i = 0; i < 6; i++)
    if (b[i]) tpk_buffer_destroy(b[i]);
  tpk_context_destroy(ctx);
  test_compile_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ir_hash),
      cmocka_unit_test(test_keys),
      cmocka_unit_test(test_cache_round_trip),
      cmocka_unit_test(test_cache_damaged),
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_table_nearest),
      cmocka_unit_test(test_shipped_defaults),
      cmocka_unit_test(test_sim_search_finds_the_fastest),
      cmocka_unit_test(test_sim_search_skips_what_does_not_fit),
      cmocka_unit_test(test_search_past_the_budget),
      cmocka_unit_test(test_held_tunables),
      cmocka_unit_test(test_search_errors),
      cmocka_unit_test(test_host_search),
      cmocka_unit_test(test_launches_use_the_cache),
      cmocka_unit_test(test_fit_defaults),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
