/*
 * test_base.c — the shared utilities of base/: hashing, the pointer map (on
 * the heap and in an arena), the string set, the one "did you mean" rule,
 * the clock and median, JSON string literals, and seeded random contents.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/refnum.h"
#include "host/prims.h"

/* Hashes on disk (tuned.tsv, the tuning cache) depend on these exact
 * values: FNV-1a from tpk's seed (base.h). */
static void test_hash(void **state) {
  (void)state;
  assert_true(tpk_hash_bytes("", 0) == UINT64_C(0x14650fb0739d0383));
  assert_true(tpk_hash_bytes("a", 1) == UINT64_C(0x44bd8ad473cd9906));
  assert_true(tpk_hash_bytes("foobar", 6) == UINT64_C(0x88fad7c0a8ff07f2));
  assert_true(tpk_hash_add(tpk_hash_bytes("foo", 3), "bar", 3) == tpk_hash_bytes("foobar", 6));
  assert_true(tpk_hash_mix(1) != tpk_hash_mix(2));
  uint64_t s = 0;
  assert_true(tpk_splitmix64(&s) == UINT64_C(0xe220a8397b1dcdaf)); /* the reference implementation's first */
}

static void check_map(TpkPtrMap *m) {
  enum { N = 5000 };
  static int keys[N];
  for (int i = 0; i < N; i++) assert_true(tpk_ptrmap_put(m, &keys[i], (void *)(intptr_t)i));
  assert_true(tpk_ptrmap_put(m, &keys[7], NULL)); /* present, with a NULL value */
  assert_int_equal(m->count, N);
  for (int i = 0; i < N; i++) {
    void *v = (void *)1;
    assert_true(tpk_ptrmap_get(m, &keys[i], &v));
    assert_true(v == (i == 7 ? NULL : (void *)(intptr_t)i));
  }
  int outside;
  assert_false(tpk_ptrmap_get(m, &outside, NULL));
  tpk_ptrmap_free(m);
  assert_false(tpk_ptrmap_get(m, &keys[0], NULL));
}

static void test_ptrmap(void **state) {
  (void)state;
  TpkPtrMap heap = {0};
  check_map(&heap);
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkPtrMap in_arena = {.arena = &arena};
  check_map(&in_arena);
  assert_ptr_equal(in_arena.arena, &arena);
  tpk_arena_free(&arena);
}

static void test_strset(void **state) {
  (void)state;
  TpkArena arena;
  tpk_arena_init(&arena, 0);
  TpkStrSet s = {.arena = &arena};
  char name[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(name, sizeof name, "v%d", i);
    const char *copy = tpk_strset_add(&s, name, strlen(name));
    assert_string_equal(copy, name);
    assert_ptr_equal(tpk_strset_add(&s, name, strlen(name)), copy);
  }
  assert_int_equal(s.count, 1000);
  assert_true(tpk_strset_has(&s, "v999x", 4));
  assert_false(tpk_strset_has(&s, "v1000", 5));
  tpk_arena_free(&arena);
}

/* One rule for every suggestion (base.h): swaps count one edit, short
 * candidates allow one edit and longer ones two, never as many edits as the
 * word has characters, and a unique prefix of two characters or more. */
static void test_suggest(void **state) {
  (void)state;
  assert_int_equal(tpk_edit_distance("kitten", "sitting"), 3);
  assert_int_equal(tpk_edit_distance("alpah", "alpha"), 1);
  assert_int_equal(tpk_edit_distance("", "abc"), 3);
  assert_true(tpk_edit_distance("x", "0123456789012345678901234567890123456789012345678901234567890123456789") > 100);
  const char *names[] = {"alpha", "beta", "exp", "log", "check", "chip", "N"};
  int n = (int)TPK_ARRAY_LEN(names);
  assert_string_equal(tpk_suggest("alpah", names, n), "alpha");  /* a swap */
  assert_string_equal(tpk_suggest("alhpaa", names, n), "alpha"); /* two edits of a long name */
  assert_null(tpk_suggest("bteaa", names, n));                   /* two edits of a short one */
  assert_string_equal(tpk_suggest("expp", names, n), "exp");
  assert_string_equal(tpk_suggest("lgo", names, n), "log");
  assert_null(tpk_suggest("lxx", names, n));                     /* two edits of a short name */
  assert_string_equal(tpk_suggest("NN", names, n), "N");
  assert_null(tpk_suggest("M", names, n));                       /* as many edits as characters */
  assert_string_equal(tpk_suggest("che", names, n), "check");    /* prefix: check (chip is 2 edits) */
  assert_null(tpk_suggest("c", names, n));                       /* too short a prefix */
  assert_null(tpk_suggest("gamma", names, n));
}

static void test_median_and_clock(void **state) {
  (void)state;
  double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
  assert_true(tpk_median(odd, 3) == 3 && odd[0] == 1);
  assert_true(tpk_median(even, 4) == 2.5 && even[0] == 1);
  assert_true(tpk_median(NULL, 0) == 0);
  double t0 = tpk_now_seconds(), t1 = tpk_now_seconds();
  assert_true(t0 > 0 && t1 >= t0);
}

static void expect_json(const char *text, const char *want) {
  TpkStr s = {0};
  tpk_str_put_json(&s, text);
  assert_string_equal(s.data, want);
  tpk_str_free(&s);
}

static void test_json(void **state) {
  (void)state;
  expect_json("", "\"\"");
  expect_json("matmul 4096", "\"matmul 4096\"");
  expect_json("a\"b\\c\n\t\x01\x7f", "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\"");
  expect_json("caf\xc3\xa9", "\"caf\xc3\xa9\"");                 /* UTF-8 passes */
  expect_json("x\xff" "y\xc3", "\"x\\ufffdy\\ufffd\"");           /* not UTF-8 */
  expect_json("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");       /* a surrogate */
}

/* tpk_fill_random writes what `tpk run`, the tuner and the tests wrote
 * before it was shared (the primitive library's conversions), for every
 * dtype: the same random inputs as ever. */
static void test_fill_random(void **state) {
  (void)state;
  enum { N = 4096 };
  for (int d = 0; d < TPK_DTYPE_COUNT; d++) {
    TpkDType dt = (TpkDType)d;
    size_t es = tpk_dtype_size(dt);
    unsigned char *got = calloc(N, es), *want = calloc(N, es);
    uint64_t s1 = 42, s2 = 42;
    tpk_fill_random(got, dt, N, &s1);
    for (int i = 0; i < N; i++) {
      uint64_t r = tpk_splitmix64(&s2);
      if (tpk_dtype_is_float(dt)) {
        float f = (float)((double)(r >> 11) / (double)(UINT64_C(1) << 53) * 2.0 - 1.0);
        tpk_prims()->convert(TPK_PRIM_F32, d, &f, want + (size_t)i * es, 1);
      } else {
        int32_t v = dt == TPK_BOOL ? (int32_t)(r & 1) : (int32_t)(r % 8);
        tpk_prims()->convert(TPK_PRIM_I32, d, &v, want + (size_t)i * es, 1);
      }
    }
    if (memcmp(got, want, N * es) != 0) fail_msg("tpk_fill_random differs for %s", tpk_dtype_name(dt));
    assert_true(s1 == s2);
    free(got), free(want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hash),    cmocka_unit_test(test_ptrmap),           cmocka_unit_test(test_strset),
      cmocka_unit_test(test_suggest), cmocka_unit_test(test_median_and_clock), cmocka_unit_test(test_json),
      cmocka_unit_test(test_fill_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
