/*
 * test_npy.c — base/npy.c: round trips of every dtype, hand-made headers
 * of format versions 1, 2 and 3, strict refusals with clear messages, and
 * random corruptions of a valid file (never a crash; run under ASan by
 * `make test-asan`).
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/npy.h"

static char dir[64];
static char path_buf[128];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tpk_npy_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  remove(path_buf);
  rmdir(dir);
  return 0;
}

static const char *tmp_path(void) {
  snprintf(path_buf, sizeof path_buf, "%s/t.npy", dir);
  return path_buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* A .npy file of the given version with header text `dict` (padded to a
 * multiple of 64 and ending in '\n' like NumPy does) and data bytes. */
static size_t make_npy(unsigned char *out, int major, const char *dict, const void *data, size_t n) {
  size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
  size_t hlen = dl + 1;
  hlen += (64 - (pre + hlen) % 64) % 64;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (unsigned char)major, out[7] = 0;
  for (size_t b = 0; b < pre - 8; b++) out[8 + b] = (unsigned char)(hlen >> (8 * b));
  memcpy(out + pre, dict, dl);
  memset(out + pre + dl, ' ', hlen - dl - 1);
  out[pre + hlen - 1] = '\n';
  memcpy(out + pre + hlen, data, n);
  return pre + hlen + n;
}

static TpkStatus read_back(const void *bytes, size_t n, TpkNpy *out, TpkError *err) {
  write_bytes(tmp_path(), bytes, n);
  memset(err, 0, sizeof *err);
  return tpk_npy_read(tmp_path(), out, err);
}

/* Expect a refusal whose message contains `needle`. */
static void expect_error(const void *bytes, size_t n, const char *needle) {
  TpkNpy a;
  TpkError err;
  TpkStatus st = read_back(bytes, n, &a, &err);
  if (st == TPK_OK) fail_msg("accepted a bad file (wanted '%s')", needle);
  if (!strstr(err.message, needle)) fail_msg("message '%s' lacks '%s'", err.message, needle);
  assert_null(a.data);
}

static void test_round_trip_every_dtype(void **state) {
  (void)state;
  static const TpkDType types[] = {TPK_F32, TPK_F16, TPK_I32, TPK_I16, TPK_I8, TPK_U8, TPK_BOOL};
  int64_t shape[3] = {2, 3, 4};
  unsigned char data[24 * 4];
  for (int i = 0; i < (int)sizeof data; i++) data[i] = (unsigned char)(i * 37 + 1);
  for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
    size_t es = tpk_dtype_size(types[t]);
    if (types[t] == TPK_BOOL)
      for (int i = 0; i < 24; i++) data[i] = (unsigned char)(i % 3 == 0);
    for (int rank = 0; rank <= 3; rank++) {
      TpkError err = {0};
      assert_int_equal(tpk_npy_write(tmp_path(), types[t], rank, shape, data, &err), TPK_OK);
      TpkNpy a;
      assert_int_equal(tpk_npy_read(tmp_path(), &a, &err), TPK_OK);
      assert_int_equal(a.dtype, types[t]);
      assert_int_equal(a.rank, rank);
      size_t n = 1;
      for (int d = 0; d < rank; d++) assert_int_equal(a.shape[d], shape[d]), n *= (size_t)shape[d];
      assert_int_equal(a.bytes, n * es);
      assert_memory_equal(a.data, data, n * es);
      tpk_npy_free(&a);
    }
  }
  /* a zero-size array */
  int64_t zshape[2] = {0, 5};
  TpkError err = {0};
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_F32, 2, zshape, NULL, &err), TPK_OK);
  TpkNpy a;
  assert_int_equal(tpk_npy_read(tmp_path(), &a, &err), TPK_OK);
  assert_int_equal(a.rank, 2);
  assert_int_equal(a.shape[0], 0);
  assert_int_equal(a.bytes, 0);
  tpk_npy_free(&a);
}

/* The header NumPy expects: 64-byte alignment, "(n,)" for rank 1. */
static void test_written_header(void **state) {
  (void)state;
  int64_t shape[1] = {5};
  float x[5] = {1, 2, 3, 4, 5};
  TpkError err = {0};
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_F32, 1, shape, x, &err), TPK_OK);
  size_t len;
  char *text = test_read_file(tmp_path(), &len);
  assert_int_equal(len, 128 + 20); /* 10 + 58 + '\n' bytes, padded to 128 */
  assert_memory_equal(text, "\x93NUMPY\x01\x00\x76\x00", 10);
  assert_non_null(strstr(text + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }"));
  assert_int_equal(text[127], '\n');
  assert_int_equal(text[126], ' ');
  free(text);
}

static void test_bf16_f8_widen_to_f32(void **state) {
  (void)state;
  uint16_t bf[4] = {0x3f80, 0xc040, 0x7f80, 0x0001}; /* 1, -3, inf, smallest subnormal */
  int64_t shape[1] = {4};
  TpkError err = {0};
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_BF16, 1, shape, bf, &err), TPK_OK);
  TpkNpy a;
  assert_int_equal(tpk_npy_read(tmp_path(), &a, &err), TPK_OK);
  assert_int_equal(a.dtype, TPK_F32);
  float *f = a.data;
  assert_true(f[0] == 1.0f && f[1] == -3.0f && isinf(f[2]) && f[3] == 0x1p-133f);
  tpk_npy_free(&a);
  uint8_t e4[4] = {0x7e, 0x01, 0xc4, 0x7f}; /* 448, 2^-9, -3, NaN */
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_F8E4M3, 1, shape, e4, &err), TPK_OK);
  assert_int_equal(tpk_npy_read(tmp_path(), &a, &err), TPK_OK);
  f = a.data;
  assert_true(f[0] == 448.0f && f[1] == 0x1p-9f && f[2] == -3.0f && isnan(f[3]));
  tpk_npy_free(&a);
  uint8_t e5[4] = {0x7b, 0x7c, 0x01, 0x3c}; /* 57344, inf, 2^-16, 1 */
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_F8E5M2, 1, shape, e5, &err), TPK_OK);
  assert_int_equal(tpk_npy_read(tmp_path(), &a, &err), TPK_OK);
  f = a.data;
  assert_true(f[0] == 57344.0f && isinf(f[1]) && f[2] == 0x1p-16f && f[3] == 1.0f);
  tpk_npy_free(&a);
}

static void test_versions_and_conversions(void **state) {
  (void)state;
  unsigned char buf[512];
  float x[3] = {1.5f, -2, 3};
  TpkNpy a;
  TpkError err;
  for (int v = 1; v <= 3; v++) {
    size_t n = make_npy(buf, v, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", x, sizeof x);
    assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
    assert_int_equal(a.rank, 1);
    assert_memory_equal(a.data, x, sizeof x);
    assert_string_equal(a.file_dtype, "float32");
    tpk_npy_free(&a);
  }
  /* keys in another order, double quotes, no trailing comma, a 1-tuple
   * without its comma */
  size_t n = make_npy(buf, 1, "{\"shape\": (3), \"fortran_order\": False, \"descr\": \"<f4\"}", x, sizeof x);
  assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
  tpk_npy_free(&a);
  /* float64 rounds to f32; int64 narrows to i32 when in range */
  double d[2] = {0.1, 1e300};
  n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, sizeof d);
  assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
  assert_int_equal(a.dtype, TPK_F32);
  assert_string_equal(a.file_dtype, "float64"); /* what the file held: the caller may say it converted */
  assert_true(((float *)a.data)[0] == 0.1f && isinf(((float *)a.data)[1]));
  tpk_npy_free(&a);
  int64_t l[2] = {-5, 2147483647};
  n = make_npy(buf, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", l, sizeof l);
  assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
  assert_int_equal(a.dtype, TPK_I32);
  assert_string_equal(a.file_dtype, "int64");
  assert_int_equal(((int32_t *)a.data)[0], -5);
  assert_int_equal(((int32_t *)a.data)[1], 2147483647);
  tpk_npy_free(&a);
  l[1] = 2147483648;
  n = make_npy(buf, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", l, sizeof l);
  expect_error(buf, n, "element 1 = 2147483648 does not fit i32");
  /* bool bytes other than 0/1 read as true */
  unsigned char b[3] = {0, 7, 1};
  n = make_npy(buf, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", b, 3);
  assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
  assert_int_equal(((uint8_t *)a.data)[1], 1);
  tpk_npy_free(&a);
  /* a scalar */
  n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", x, 4);
  assert_int_equal(read_back(buf, n, &a, &err), TPK_OK);
  assert_int_equal(a.rank, 0);
  assert_true(((float *)a.data)[0] == 1.5f);
  tpk_npy_free(&a);
}

static void test_refusals(void **state) {
  (void)state;
  unsigned char buf[1024];
  float x[4] = {0};
  size_t n;
#define BAD(dict, data, len, needle)                 \
  n = make_npy(buf, 1, dict, data, len);             \
  expect_error(buf, n, needle)
  BAD("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", x, 16, "big-endian");
  BAD("{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", x, 16, "Fortran-order");
  BAD("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", x, 16, "unsupported dtype descr '<c8'");
  BAD("{'descr': '|f4', 'fortran_order': False, 'shape': (4,), }", x, 16, "no usable byte order");
  BAD("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", x, 16, "structured");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", x, 16, "unexpected key 'x'");
  BAD("{'descr': '<f4', 'fortran_order': False}", x, 16, "lacks 'shape'");
  BAD("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", x, 16, "'descr' given twice");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", x, 16, "non-negative");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", x, 4, "more than 8");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999,99999999999), }", x, 4, "too large");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", x, 16, "truncated data");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", x, 16, "trailing bytes");
  BAD("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk", x, 16, "after the dict");
  BAD("['descr', '<f4']", x, 16, "not a dict");
  BAD("{'descr': '<f4', 'fortran_order': 0, 'shape': (4,), }", x, 16, "True or False");
#undef BAD
  n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", x, 16);
  buf[0] = 'X';
  expect_error(buf, n, "bad magic");
  buf[0] = 0x93, buf[6] = 4;
  expect_error(buf, n, "version 4.0");
  n = make_npy(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", x, 16);
  buf[11] = 0x7f; /* header length ~2 GB */
  expect_error(buf, n, "implausibly large");
  expect_error(buf, 0, "truncated file");
  TpkNpy a;
  TpkError err;
  assert_int_equal(tpk_npy_read("/nonexistent/dir/x.npy", &a, &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "cannot open"));
  int64_t shape[1] = {-1};
  assert_int_equal(tpk_npy_write(tmp_path(), TPK_F32, 1, shape, x, &err), TPK_ERR_INVALID);
  assert_int_equal(tpk_npy_write("/nonexistent/dir/x.npy", TPK_F32, 0, NULL, x, &err), TPK_ERR_IO);
}

/* Truncation at every length, then random byte corruptions: each read either
 * succeeds with a consistent result or fails with a message. */
static void test_corruptions_never_crash(void **state) {
  (void)state;
  float x[24];
  for (int i = 0; i < 24; i++) x[i] = (float)i;
  unsigned char good[512], bad[600];
  size_t n = make_npy(good, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", x, sizeof x);
  TpkNpy a;
  TpkError err;
  for (size_t len = 0; len < n; len++) {
    TpkStatus st = read_back(good, len, &a, &err);
    assert_int_not_equal(st, TPK_OK);
    assert_true(err.message[0] != 0);
  }
  uint64_t r = 12345;
  int accepted = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(bad, good, n);
    size_t len = n;
    int edits = 1 + (int)(r % 4);
    for (int e = 0; e < edits; e++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      size_t at = (size_t)(r >> 8) % (it % 2 ? 80 : len ? len : 1); /* half the time, hit the header */
      if (at > len) at = len;
      switch (r % 5) {
      case 0: bad[at] ^= (unsigned char)(1u << (r >> 3) % 8); break;
      case 1: bad[at] = (unsigned char)(r >> 16); break;
      case 2: len = at; break; /* truncate */
      case 3: bad[at] = "(),:'{} 0123456789<>|fiub"[(r >> 20) % 25]; break;
      default:
        if (len < sizeof bad) { /* insert a byte */
          memmove(bad + at + 1, bad + at, len - at);
          bad[at] = (unsigned char)(r >> 24);
          len++;
        }
      }
    }
    TpkStatus st = read_back(bad, len, &a, &err);
    if (st == TPK_OK) {
      size_t cnt = 1;
      for (int d = 0; d < a.rank; d++) cnt *= (size_t)a.shape[d];
      assert_int_equal(a.bytes, cnt * tpk_dtype_size(a.dtype));
      accepted++;
      tpk_npy_free(&a);
    } else {
      assert_true(err.message[0] != 0);
      assert_null(a.data);
    }
  }
  assert_true(accepted > 0); /* some edits (in the data) leave a valid file */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_every_dtype),
      cmocka_unit_test(test_written_header),
      cmocka_unit_test(test_bf16_f8_widen_to_f32),
      cmocka_unit_test(test_versions_and_conversions),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_corruptions_never_crash),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
