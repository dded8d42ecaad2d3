/*
 * test_ops_v2.c — the ops of language v2 (issue 15) through every backend:
 * each kernel of tests/corpus runs on the host, on sim:v5e and in the
 * reference interpreter with the same inputs, and all three must give the
 * answer a plain C reference (or a published known answer) gives.
 *
 *   - bit-level integers: Philox-4x32-10 against Random123's known answers,
 *     uniforms from its bits, int4 packing, float fields, round half to
 *     even, shifts past the width (tests/corpus/bits.tpk);
 *   - scans: row prefix sums carried across ragged blocks, running
 *     max/min/product, MoE routing slots, a segmented scan
 *     (tests/corpus/scans.tpk);
 *   - tiles joined and chosen: a grouped (swizzled) matmul grid order with
 *     tile(id, B), checked mode's view of a bad order, concat and stack
 *     (tests/corpus/tiles_joined.tpk);
 *   - atomics: a partition by tickets from a counter, a max and column
 *     sums combined across instances, and what checked mode reports
 *     (tests/corpus/atomics.tpk);
 *   - copies of data-dependent length, copy_async(..., len=n), and what
 *     checked mode reports of a length past the block
 *     (tests/corpus/dma_lengths.tpk); semaphore waits that count bytes
 *     (tests/corpus/dma_semaphores.tpk).
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "tpk.h"

/* ---- running one kernel three ways ------------------------------------------------- */

enum { MAX_ARGS = 8 };

/* One parameter of a launch: a tensor (rank >= 1) whose bytes are `data`
 * (inputs are read from it; outputs are written back into it), or a scalar
 * (rank 0, value `scalar`). */
typedef struct Arg {
  TpkDType dt;
  int rank;
  int64_t shape[4];
  void *data;
  double scalar;
} Arg;

static size_t arg_bytes(const Arg *a) {
  size_t n = tpk_dtype_size(a->dt);
  for (int d = 0; d < a->rank; d++) n *= (size_t)a->shape[d];
  return n;
}

/* Launch kernel `kname` of corpus file `file` on `device` (a fresh context),
 * its tensors' outputs copied back into their Arg's data. */
static void run_on(const char *device, const char *file, const char *kname, int n, Arg *args) {
  TpkContext *ctx;
  TpkDevice *dev;
  TpkProgram *prog;
  TpkKernel *k;
  char rel[256];
  snprintf(rel, sizeof rel, "tests/corpus/%s", file);
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_device_open(ctx, device, &dev), TPK_OK);
  if (tpk_program_load_file(ctx, test_path(rel), &prog) != TPK_OK) fail_msg("%s: %s", file, tpk_last_error());
  assert_int_equal(tpk_program_kernel(prog, kname, &k), TPK_OK);
  assert_int_equal(tpk_kernel_param_count(k), n);
  TpkBuffer *bufs[MAX_ARGS] = {0};
  double scalars[MAX_ARGS] = {0};
  for (int i = 0; i < n; i++) {
    if (args[i].rank == 0) {
      scalars[i] = args[i].scalar;
      continue;
    }
    assert_int_equal(tpk_buffer_create(dev, args[i].dt, args[i].rank, args[i].shape, &bufs[i]), TPK_OK);
    memcpy(tpk_buffer_data(bufs[i]), args[i].data, arg_bytes(&args[i]));
  }
  TpkLaunchResult ran;
  TpkLaunch L = {.args = bufs, .scalars = scalars, .result = &ran};
  if (tpk_kernel_launch(k, &L) != TPK_OK) fail_msg("%s on %s: %s", kname, device, tpk_last_error());
  if (strncmp(device, "sim:", 4) == 0) assert_true(ran.simulated && ran.sim.seconds > 0);
  for (int i = 0; i < n; i++)
    if (bufs[i]) {
      memcpy(args[i].data, tpk_buffer_data(bufs[i]), arg_bytes(&args[i]));
      tpk_buffer_destroy(bufs[i]);
    }
  tpk_program_destroy(prog);
  tpk_context_destroy(ctx);
}

/* The same in the reference interpreter; `syms` gives the shape symbols. */
static void run_interp(const char *file, const char *kname, int n, Arg *args, const char *syms) {
  char rel[256];
  snprintf(rel, sizeof rel, "tests/corpus/%s", file);
  TestCompile c;
  TpkFunc *f = test_compile_kernel_file(&c, rel, kname, NULL);
  int64_t sv[16] = {0};
  test_symbol_values(f, syms, sv);
  void *ptrs[MAX_ARGS];
  unsigned char scalar_bytes[MAX_ARGS][8];
  for (int i = 0; i < n; i++) {
    if (args[i].rank) {
      ptrs[i] = args[i].data;
      continue;
    }
    tpk_dtype_convert(TPK_F32, &(float){(float)args[i].scalar}, args[i].dt, scalar_bytes[i], 1);
    if (!tpk_dtype_is_float(args[i].dt)) { /* integers exactly, past f32's 24 bits */
      int32_t i32 = (int32_t)(uint32_t)(int64_t)args[i].scalar;
      tpk_dtype_convert(TPK_I32, &i32, args[i].dt, scalar_bytes[i], 1);
      if (args[i].dt == TPK_U32) memcpy(scalar_bytes[i], &(uint32_t){(uint32_t)(int64_t)args[i].scalar}, 4);
    }
    ptrs[i] = scalar_bytes[i];
  }
  TpkError err = {0};
  if (tpk_interp_run(f, ptrs, sv, &err) != TPK_OK) fail_msg("%s in the interpreter: %s", kname, err.message);
  test_compile_free(&c);
}

/* Run on the host, sim:v5e and the interpreter, each from a fresh copy of
 * the inputs; every output must be byte-identical across the three. The
 * host's outputs are left in args. */
static void run_everywhere(const char *file, const char *kname, int n, Arg *args, const char *syms) {
  Arg copies[2][MAX_ARGS];
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < n; i++) {
      copies[v][i] = args[i];
      if (args[i].rank) {
        copies[v][i].data = malloc(arg_bytes(&args[i]));
        memcpy(copies[v][i].data, args[i].data, arg_bytes(&args[i]));
      }
    }
  run_on("host", file, kname, n, args);
  run_on("sim:v5e", file, kname, n, copies[0]);
  run_interp(file, kname, n, copies[1], syms);
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < n; i++)
      if (args[i].rank) {
        if (memcmp(args[i].data, copies[v][i].data, arg_bytes(&args[i])) != 0)
          fail_msg("%s: parameter %d differs between the host and %s", kname, i, v ? "the interpreter" : "sim:v5e");
        free(copies[v][i].data);
      }
}

/* ---- bit-level integers ---------------------------------------------------------------- */

/* Philox-4x32-10 as Random123 defines it (philox.h), the test's reference. */
static void philox_ref(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void test_philox_known_answers(void **state) {
  (void)state;
  /* Random123's kat_vectors for philox4x32_10: counter, key, result */
  static const uint32_t KAT[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
       0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
       0x24126ea1},
  };
  enum { N = 131 }; /* ragged against both block sizes */
  static uint32_t ctr[N][4], key[N][2], r[N][4];
  for (int i = 0; i < N; i++) {
    /* the known answers first, then counters and keys spread over 32 bits */
    uint32_t spread = (uint32_t)i * 2654435761u;
    for (int j = 0; j < 4; j++) ctr[i][j] = i < 3 ? KAT[i][j] : spread * (uint32_t)(j + 1);
    for (int j = 0; j < 2; j++) key[i][j] = i < 3 ? KAT[i][4 + j] : spread ^ (0x5bd1e995u * (uint32_t)(j + 1));
  }
  Arg args[] = {{TPK_U32, 2, {N, 4}, ctr}, {TPK_U32, 2, {N, 2}, key}, {TPK_U32, 2, {N, 4}, r}};
  run_everywhere("bits.tpk", "philox4x32", 3, args, "N=131");
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      if (r[i][j] != KAT[i][6 + j]) fail_msg("KAT %d word %d: got 0x%08x, want 0x%08x", i, j, r[i][j], KAT[i][6 + j]);
  for (int i = 3; i < N; i++) {
    uint32_t want[4];
    philox_ref(ctr[i], key[i], want);
    assert_memory_equal(r[i], want, sizeof want);
  }
}

static void test_philox_uniform(void **state) {
  (void)state;
  enum { B = 3, N = 300 };
  static float u[B][N];
  Arg args[] = {{TPK_U32, 0, {0}, NULL, 0xDEADBEEF}, {TPK_U32, 0, {0}, NULL, 7}, {TPK_F32, 2, {B, N}, u}};
  run_everywhere("bits.tpk", "philox_uniform", 3, args, "B=3,N=300");
  double mean = 0;
  for (int b = 0; b < B; b++)
    for (int e = 0; e < N; e++) {
      uint32_t out[4], bits;
      philox_ref((uint32_t[]){(uint32_t)e, (uint32_t)b, 7, 0}, (uint32_t[]){0xDEADBEEF, 0}, out);
      bits = (out[0] >> 9) | 0x3F800000u;
      float want;
      memcpy(&want, &bits, 4);
      want -= 1.0f;
      if (u[b][e] != want) fail_msg("u[%d][%d] = %.9g, want %.9g", b, e, u[b][e], want);
      assert_true(u[b][e] >= 0 && u[b][e] < 1);
      mean += u[b][e];
    }
  mean /= B * N;
  assert_true(fabs(mean - 0.5) < 0.05);
}

static void test_int4_pack_unpack(void **state) {
  (void)state;
  enum { M = 37, K = 5 };
  static int8_t x[M][K][2], back[M][K][2];
  static uint8_t q[M][K];
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++)
      for (int h = 0; h < 2; h++) x[i][k][h] = (int8_t)((i * 7 + k * 3 + h * 5) % 16 - 8); /* -8..7 */
  Arg pack[] = {{TPK_I8, 3, {M, K, 2}, x}, {TPK_U8, 2, {M, K}, q}};
  run_everywhere("bits.tpk", "pack_int4", 2, pack, "M=37,K=5");
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) assert_int_equal(q[i][k], (uint8_t)((x[i][k][0] & 0xF) | ((x[i][k][1] & 0xF) << 4)));
  Arg unpack[] = {{TPK_U8, 2, {M, K}, q}, {TPK_I8, 3, {M, K, 2}, back}};
  run_everywhere("bits.tpk", "unpack_int4", 2, unpack, "M=37,K=5");
  assert_memory_equal(back, x, sizeof x);
}

static void test_float_fields(void **state) {
  (void)state;
  enum { N = 9 };
  static float x[N] = {1.0f, -2.5f, 0.0f, -0.0f, 3.4028235e38f, 1e-45f, 0.1f, -1e-3f, 65504.0f}, back[N];
  static uint32_t sign[N], mant[N];
  static int32_t expo[N];
  static uint16_t halves[N][2];
  Arg args[] = {{TPK_F32, 1, {N}, x},      {TPK_U32, 1, {N}, sign},  {TPK_I32, 1, {N}, expo},
                {TPK_U32, 1, {N}, mant},   {TPK_F32, 1, {N}, back},  {TPK_U16, 2, {N, 2}, halves}};
  run_everywhere("bits.tpk", "float_fields", 6, args, "N=9");
  for (int i = 0; i < N; i++) {
    uint32_t b;
    memcpy(&b, &x[i], 4);
    assert_int_equal(sign[i], b >> 31);
    assert_int_equal(expo[i], (int32_t)((b >> 23) & 0xFF) - 127);
    assert_int_equal(mant[i], b & 0x7FFFFF);
    assert_memory_equal(&back[i], &x[i], 4);
    assert_int_equal(halves[i][0], b & 0xFFFF);
    assert_int_equal(halves[i][1], b >> 16);
  }
}

static void test_round_half_even(void **state) {
  (void)state;
  enum { N = 12 };
  static float x[N] = {0.125f, 0.375f, 0.625f, -0.125f, -0.375f, 0.3f, -0.7f, 2.0f, 1e9f, -0.0f, 0.6249f, 7.9f},
               y[N];
  static int8_t q[N];
  Arg args[] = {{TPK_F32, 1, {N}, x}, {TPK_F32, 1, {N}, y}, {TPK_I8, 1, {N}, q}};
  run_everywhere("bits.tpk", "round_half_even", 3, args, "N=12");
  static const float WANT[4] = {0.0f, 2.0f, 2.0f, -0.0f}; /* 0.5, 1.5, 2.5, -0.5 */
  for (int i = 0; i < 4; i++) assert_memory_equal(&y[i], &WANT[i], 4);
  for (int i = 0; i < N; i++) {
    double t = (double)x[i] * 4, r = floor(t), frac = t - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2) != 0)) r += 1;
    assert_true(y[i] == (float)r && !signbit(y[i]) == !signbit(t));
    double rq = nearbyint((double)(float)(x[i] * 4.0f) * 16.0);
    assert_int_equal(q[i], rq < -128 ? -128 : rq > 127 ? 127 : (int)rq);
  }
}

/* The reference of `shifts`: counts outside [0, 32) give 0 (or -1 for a
 * negative value shifted right). */
static int32_t shl_ref(int32_t v, int32_t s) { return s < 0 || s >= 32 ? 0 : (int32_t)((uint32_t)v << s); }
static int32_t shr_ref(int32_t v, int32_t s) {
  if (s < 0 || s >= 32) return v < 0 ? -1 : 0;
  return v < 0 ? ~(~v >> s) : v >> s;
}

static void test_shifts_past_the_width(void **state) {
  (void)state;
  enum { N = 40 };
  static int32_t x[N], k[N], l[N], r[N];
  static uint32_t ul[N], ur[N];
  static int16_t b[N];
  for (int i = 0; i < N; i++) x[i] = (int32_t)(i * 37 % 11) - 2 + (i % 5 == 0 ? 1 << 30 : 0), k[i] = i % 8;
  Arg args[] = {{TPK_I32, 1, {N}, x},  {TPK_I32, 1, {N}, k},  {TPK_I32, 1, {N}, l}, {TPK_I32, 1, {N}, r},
                {TPK_U32, 1, {N}, ul}, {TPK_U32, 1, {N}, ur}, {TPK_I16, 1, {N}, b}};
  run_everywhere("bits.tpk", "shifts", 7, args, "N=40");
  for (int i = 0; i < N; i++) {
    int32_t v = x[i] - 4, s = k[i] * 5 - 3; /* s: -3, 2, 7, ..., 32 */
    uint32_t uv = (uint32_t)v, us = (uint32_t)s;
    assert_int_equal(l[i], shl_ref(v, s));
    assert_int_equal(r[i], shr_ref(v, s));
    assert_int_equal(ul[i], us >= 32 ? 0 : uv << us);
    assert_int_equal(ur[i], us >= 32 ? 0 : uv >> us);
    int16_t v16 = (int16_t)v;
    assert_int_equal(b[i], (int16_t)((~v16 ^ ((int16_t)(uint16_t)((uint16_t)v16 << 2) & 0x5555)) | 0x0100));
  }
}

/* ---- scans ------------------------------------------------------------------------ */

/* Small exact values, so any summation order gives the same floats. */
static float small_value(int i) { return (float)((i * 37 + 11) % 17 - 8) * 0.25f; }

static void test_cumsum_rows_across_blocks(void **state) {
  (void)state;
  enum { M = 19, N = 300 }; /* 300 = two full 128-blocks and a ragged one */
  static float x[M][N], y[M][N];
  for (int i = 0; i < M * N; i++) x[i / N][i % N] = small_value(i);
  Arg args[] = {{TPK_F32, 2, {M, N}, x}, {TPK_F32, 2, {M, N}, y}};
  run_everywhere("scans.tpk", "cumsum_rows", 2, args, "M=19,N=300");
  for (int i = 0; i < M; i++) {
    float acc = 0;
    for (int j = 0; j < N; j++) {
      acc += x[i][j];
      if (y[i][j] != acc) fail_msg("y[%d][%d] = %g, want %g", i, j, y[i][j], acc);
    }
  }
}

static void test_running_stats(void **state) {
  (void)state;
  enum { M = 23, N = 5 };
  static float x[M][N], hi[M][N], lo[M][N], prod[M][N];
  for (int i = 0; i < M * N; i++) x[i / N][i % N] = small_value(i);
  Arg args[] = {{TPK_F32, 2, {M, N}, x}, {TPK_F32, 2, {M, N}, hi}, {TPK_F32, 2, {M, N}, lo}, {TPK_F32, 2, {M, N}, prod}};
  run_everywhere("scans.tpk", "running_stats", 4, args, "M=23,N=5");
  for (int j = 0; j < N; j++) {
    float h = -INFINITY, l = INFINITY, p = 1;
    for (int i = 0; i < M; i++) {
      h = fmaxf(h, x[i][j]), l = fminf(l, x[i][j]), p = i ? p * (x[i][j] * 0.5f + 1.0f) : x[i][j] * 0.5f + 1.0f;
      assert_true(hi[i][j] == h && lo[i][j] == l && prod[i][j] == p);
    }
  }
}

static void test_route_positions(void **state) {
  (void)state;
  enum { T = 45, E = 6 };
  static int32_t expert[T], slot[T], counts[E];
  for (int t = 0; t < T; t++) expert[t] = (t * 7 + t / 5) % E;
  Arg args[] = {{TPK_I32, 1, {T}, expert}, {TPK_I32, 1, {T}, slot}, {TPK_I32, 1, {E}, counts}};
  run_everywhere("scans.tpk", "route_positions", 3, args, "T=45,E=6");
  int seen[E] = {0};
  for (int t = 0; t < T; t++) assert_int_equal(slot[t], seen[expert[t]]++);
  for (int e = 0; e < E; e++) assert_int_equal(counts[e], seen[e]);
}

static void test_segmented_cumsum(void **state) {
  (void)state;
  enum { T = 140 };
  static float x[T], y[T];
  static int32_t seg[T];
  for (int t = 0; t < T; t++) x[t] = small_value(t), seg[t] = (t * t) / 97 % 4; /* runs of many lengths */
  Arg args[] = {{TPK_F32, 1, {T}, x}, {TPK_I32, 1, {T}, seg}, {TPK_F32, 1, {T}, y}};
  run_everywhere("scans.tpk", "segmented_cumsum", 3, args, "T=140");
  float acc = 0;
  for (int t = 0; t < T; t++) {
    acc = t && seg[t] == seg[t - 1] ? acc + x[t] : x[t];
    if (y[t] != acc) fail_msg("y[%d] = %g, want %g", t, y[t], acc);
  }
}

/* ---- tiles joined and chosen ------------------------------------------------------- */

static void test_grouped_order_matmul(void **state) {
  (void)state;
  enum { M = 100, K = 70, N = 75 }; /* ragged against every block */
  static float a[M][K], b[K][N], c[M][N];
  for (int i = 0; i < M * K; i++) a[i / K][i % K] = small_value(i);
  for (int i = 0; i < K * N; i++) b[i / N][i % N] = small_value(i * 3 + 1);
  Arg args[] = {{TPK_F32, 2, {M, K}, a}, {TPK_F32, 2, {K, N}, b}, {TPK_F32, 2, {M, N}, c}};
  run_everywhere("tiles_joined.tpk", "matmul_grouped_order", 3, args, "M=100,K=70,N=75");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float want = 0; /* small exact values: any order gives these bits */
      for (int k = 0; k < K; k++) want += a[i][k] * b[k][j];
      if (c[i][j] != want) fail_msg("c[%d][%d] = %g, want %g", i, j, c[i][j], want);
    }
}

/* A grid order that sends two instances to one tile is a race checked mode
 * names; a negative tile id is an error on every backend. */
static void test_computed_tiles_checked(void **state) {
  (void)state;
  static const char *const BAD =
      "kernel half(x: f32[M]) -> (y: f32[M])\n"
      "  tune BM in [4]\n"
      "{\n"
      "  for p in 0..(M + 3) / 4 {\n"
      "    let i = tile(p / 2, BM);\n"
      "    y[i] = x[i];\n"
      "  }\n"
      "}\n"
      "kernel negative(x: f32[M]) -> (y: f32[M])\n"
      "  tune BM in [4]\n"
      "{\n"
      "  for p in 0..1 {\n"
      "    let i = tile(p - 1, BM);\n"
      "    y[i] = x[i];\n"
      "  }\n"
      "}\n";
  TestCompile c;
  TpkFunc *f = test_compile_kernel(&c, BAD, "half", NULL);
  float x[10] = {0}, y[10];
  void *args[] = {x, y};
  int64_t syms[] = {10};
  TpkStr rep = {0};
  int nviol = 0;
  TpkError err = {0};
  TpkInterpOptions o = {.checked = true};
  assert_int_equal(tpk_interp_run_checked(f, args, syms, &o, &rep, &nviol, &err), TPK_OK);
  assert_true(nviol >= 1);
  if (!strstr(rep.data, "line 6:5: grid instances (p=0) and (p=1) both write y[0]"))
    fail_msg("report:\n%s", rep.data);
  tpk_str_free(&rep);
  test_compile_free(&c);
  f = test_compile_kernel(&c, BAD, "negative", NULL);
  assert_int_equal(tpk_interp_run(f, args, syms, &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "tile id -1 is negative"));
  test_compile_free(&c);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkKernel *k = test_kernel(&ctx, &dev, "host", "neg.tpk", BAD, "negative");
  TpkBuffer *bx, *by;
  int64_t shape[] = {10};
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, shape, &bx), TPK_OK);
  assert_int_equal(tpk_buffer_create(dev, TPK_F32, 1, shape, &by), TPK_OK);
  TpkLaunch L = {.args = (TpkBuffer *[]){bx, by}};
  assert_int_not_equal(tpk_kernel_launch(k, &L), TPK_OK);
  assert_non_null(strstr(tpk_last_error(), "line 13: tile id -1 is negative"));
  tpk_buffer_destroy(bx);
  tpk_buffer_destroy(by);
  tpk_program_destroy(tpk_kernel_program(k));
  tpk_context_destroy(ctx);
}

static void test_concat_rope(void **state) {
  (void)state;
  enum { S = 37, D2 = 6 };
  static float x[S][D2][2], cs[S][D2], sn[S][D2], y[S][D2][2];
  for (int i = 0; i < S * D2 * 2; i++) ((float *)x)[i] = small_value(i);
  for (int i = 0; i < S * D2; i++) ((float *)cs)[i] = small_value(i + 5), ((float *)sn)[i] = small_value(i + 9);
  Arg args[] = {{TPK_F32, 3, {S, D2, 2}, x}, {TPK_F32, 2, {S, D2}, cs}, {TPK_F32, 2, {S, D2}, sn}, {TPK_F32, 3, {S, D2, 2}, y}};
  run_everywhere("tiles_joined.tpk", "rope_concat", 4, args, "S=37,D2=6");
  for (int s = 0; s < S; s++)
    for (int d = 0; d < D2; d++) {
      float x1 = x[s][d][0], x2 = x[s][d][1];
      assert_true(y[s][d][0] == x1 * cs[s][d] + -x2 * sn[s][d]);
      assert_true(y[s][d][1] == x2 * cs[s][d] + x1 * sn[s][d]);
    }
}

static void test_stack_rows_and_scalars(void **state) {
  (void)state;
  enum { M = 13, N = 11 };
  static float x[M][N], stats[M][4], total[2];
  for (int i = 0; i < M * N; i++) x[i / N][i % N] = small_value(i);
  Arg args[] = {{TPK_F32, 2, {M, N}, x}, {TPK_F32, 2, {M, 4}, stats}, {TPK_F32, 1, {2}, total}};
  run_everywhere("tiles_joined.tpk", "row_stats", 3, args, "M=13,N=11");
  float all = 0, top = -INFINITY;
  for (int i = 0; i < M; i++) {
    float s = 0, hi = -INFINITY, lo = INFINITY;
    for (int j = 0; j < N; j++) s += x[i][j], hi = fmaxf(hi, x[i][j]), lo = fminf(lo, x[i][j]);
    assert_true(stats[i][0] == s && stats[i][1] == hi && stats[i][2] == lo && stats[i][3] == s / N);
    all += s, top = fmaxf(top, hi);
  }
  assert_true(total[0] == all && total[1] == top);
}

static void test_int4_pairs_matmul(void **state) {
  (void)state;
  enum { M = 40, K = 9, N = 7 };
  static float a[M][K][2], c[M][N];
  static uint8_t w[K][N];
  for (int i = 0; i < M * K * 2; i++) ((float *)a)[i] = small_value(i);
  for (int i = 0; i < K * N; i++) ((uint8_t *)w)[i] = (uint8_t)(i * 77 + 3);
  Arg args[] = {{TPK_F32, 3, {M, K, 2}, a}, {TPK_U8, 2, {K, N}, w}, {TPK_F32, 2, {M, N}, c}};
  run_everywhere("tiles_joined.tpk", "matmul_int4_pairs", 3, args, "M=40,K=9,N=7");
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float want = 0;
      for (int k = 0; k < K; k++) {
        int lo = (int8_t)(w[k][j] << 4) >> 4, hi = (int8_t)w[k][j] >> 4; /* the nibbles, sign-extended */
        want += a[i][k][0] * (float)lo;
        want += a[i][k][1] * (float)hi;
      }
      if (c[i][j] != want) fail_msg("c[%d][%d] = %g, want %g", i, j, c[i][j], want);
    }
}

/* ---- atomics ------------------------------------------------------------------------ */

static void test_partition_by_tickets(void **state) {
  (void)state;
  enum { N = 100 };
  static float x[N];
  static int32_t slot[N], count[2];
  for (int i = 0; i < N; i++) x[i] = small_value(i * 5);
  Arg args[] = {{TPK_F32, 1, {N}, x}, {TPK_I32, 1, {N}, slot}, {TPK_I32, 1, {2}, count}};
  run_everywhere("atomics.tpk", "partition_positive", 3, args, "N=100");
  int positive = 0, seen[N] = {0};
  for (int i = 0; i < N; i++) positive += x[i] > 0;
  assert_int_equal(count[0], positive);
  assert_int_equal(count[1], N - positive);
  int last_front = -1, last_back = N;
  for (int i = 0; i < N; i++) { /* a permutation; in order at the front, reversed at the back */
    assert_true(slot[i] >= 0 && slot[i] < N && !seen[slot[i]]);
    seen[slot[i]] = 1;
    if (x[i] > 0) assert_true(slot[i] < positive && slot[i] > last_front), last_front = slot[i];
    else assert_true(slot[i] >= positive && slot[i] < last_back), last_back = slot[i];
  }
}

static void test_max_and_sums_across_instances(void **state) {
  (void)state;
  enum { M = 45, N = 9, B = 11 };
  static float x[M][N], m[1], colsum[N], colmax[N];
  static int32_t bins[M], hist[B];
  for (int i = 0; i < M * N; i++) x[i / N][i % N] = small_value(i * 7);
  for (int i = 0; i < M; i++) bins[i] = (i * i) % 11;
  Arg a1[] = {{TPK_F32, 2, {M, N}, x}, {TPK_F32, 1, {1}, m}};
  run_everywhere("atomics.tpk", "amax", 2, a1, "M=45,N=9");
  Arg a2[] = {{TPK_F32, 2, {M, N}, x}, {TPK_I32, 1, {M}, bins}, {TPK_F32, 1, {N}, colsum}, {TPK_F32, 1, {N}, colmax},
              {TPK_I32, 1, {B}, hist}};
  run_everywhere("atomics.tpk", "column_stats", 5, a2, "M=45,N=9,B=11");
  float want_m = 0;
  for (int j = 0; j < N; j++) {
    float s = 0, hi = -INFINITY;
    for (int i = 0; i < M; i++) s += x[i][j], hi = fmaxf(hi, x[i][j]), want_m = fmaxf(want_m, fabsf(x[i][j]));
    assert_true(colsum[j] == s && colmax[j] == hi);
  }
  assert_true(m[0] == want_m);
  int want_h[B] = {0};
  for (int i = 0; i < M; i++) want_h[bins[i]]++;
  assert_memory_equal(hist, want_h, sizeof want_h);
}

/* Atomics from many instances into one element are not a race; an atomic
 * and a store from two instances are. */
static void test_atomics_checked(void **state) {
  (void)state;
  static const char *const TEXT =
      "kernel counter(x: f32[N]) -> (c: i32[1] = 0, hi: f32[1] = 0)\n"
      "  tune BN in [4]\n"
      "{\n"
      "  for i in tiles(N, BN) {\n"
      "    atomic_add(c[0], 1);\n"
      "    atomic_max(hi[0], max(x[i]));\n"
      "  }\n"
      "}\n"
      "kernel mixed(x: f32[N]) -> (c: i32[1] = 0)\n"
      "  tune BN in [4]\n"
      "{\n"
      "  for i in tiles(N, BN) {\n"
      "    if i.id == 1 { c[0] = 7; } else { atomic_add(c[0], 1); }\n"
      "  }\n"
      "}\n";
  static const char *const KERNELS[] = {"counter", "mixed"};
  for (int k = 0; k < 2; k++) {
    TestCompile c;
    TpkFunc *f = test_compile_kernel(&c, TEXT, KERNELS[k], NULL);
    float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, hi[1] = {0};
    int32_t cnt[1] = {0};
    void *args[] = {x, cnt, hi};
    int64_t syms[] = {10};
    TpkStr rep = {0};
    int nviol = 0;
    TpkError err = {0};
    TpkInterpOptions o = {.checked = true};
    assert_int_equal(tpk_interp_run_checked(f, args, syms, &o, &rep, &nviol, &err), TPK_OK);
    if (k == 0) {
      if (nviol) fail_msg("counter: %s", rep.data);
      assert_int_equal(cnt[0], 3);
      assert_true(hi[0] == 10);
    } else if (!rep.data || !strstr(rep.data, "line 13:20: grid instance (i=0) adds to c[0] and (i=1) stores it")) {
      fail_msg("mixed: %s", rep.data ? rep.data : "(no report)");
    }
    tpk_str_free(&rep);
    test_compile_free(&c);
  }
}

/* ---- copies of data-dependent length ------------------------------------------------------ */

static void test_copies_of_data_length(void **state) {
  (void)state;
  enum { N = 20, D = 5, G = 5, BS = 8 };
  static float x[N][D], y[G][BS][D];
  for (int i = 0; i < N * D; i++) ((float *)x)[i] = small_value(i);
  /* a segment that starts before 0, one past the end, an empty one, a whole block */
  int32_t starts[G] = {-2, 3, 17, 9, 0}, counts[G] = {5, 8, 6, 0, 1};
  Arg args[] = {{TPK_F32, 2, {N, D}, x},       {TPK_I32, 1, {G}, starts},        {TPK_I32, 1, {G}, counts},
                {TPK_F32, 0, {0}, NULL, -1.5}, {TPK_F32, 3, {G, BS, D}, y}};
  run_everywhere("dma_lengths.tpk", "ragged_rows", 5, args, "N=20,D=5,G=5");
  for (int g = 0; g < G; g++)
    for (int r = 0; r < BS; r++)
      for (int d = 0; d < D; d++) {
        int row = starts[g] + r;
        float want = r >= counts[g] ? -1.5f : row < 0 || row >= N ? 0.0f : x[row][d];
        if (y[g][r][d] != want) fail_msg("y[%d][%d][%d] = %g, want %g", g, r, d, y[g][r][d], want);
      }
}

static void test_copy_length_past_the_block_checked(void **state) {
  (void)state;
  TestCompile c;
  TpkFunc *f = test_compile_kernel_file(&c, "tests/corpus/dma_lengths.tpk", "ragged_rows", NULL);
  float x[4][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}}, fill = 0, y[2][8][2];
  int32_t starts[2] = {0, 1}, counts[2] = {3, 9};
  void *args[] = {x, starts, counts, &fill, y};
  int64_t syms[16] = {0};
  test_symbol_values(f, "N=4,D=2,G=2", syms);
  TpkStr rep = {0};
  int nviol = 0;
  TpkError err = {0};
  TpkInterpOptions o = {.checked = true};
  assert_int_equal(tpk_interp_run_checked(f, args, syms, &o, &rep, &nviol, &err), TPK_OK);
  if (nviol != 1 || !strstr(rep.data, "copy_async(len=9) is outside its block of 8 entries along axis 0"))
    fail_msg("%d violations: %s", nviol, rep.data ? rep.data : "(no report)");
  tpk_str_free(&rep);
  test_compile_free(&c);
}

/* ---- semaphores that count bytes ---------------------------------------------------------- */

static void test_one_wait_counts_every_page(void **state) {
  (void)state;
  enum { P = 6, PS = 4, D = 3, B = 2, NP = 3 };
  static uint16_t k_pages[P][PS][D], k[B][NP][PS][D];
  for (int i = 0; i < P * PS * D; i++) ((uint16_t *)k_pages)[i] = (uint16_t)(0x3F80 + i); /* bf16 bits */
  int32_t pages[B][NP] = {{5, 0, 2}, {1, 1, 4}};
  Arg args[] = {{TPK_BF16, 3, {P, PS, D}, k_pages}, {TPK_I32, 2, {B, NP}, pages}, {TPK_BF16, 4, {B, NP, PS, D}, k}};
  run_everywhere("dma_semaphores.tpk", "gather_pages", 3, args, "P=6,PS=4,D=3,B=2,NP=3");
  for (int b = 0; b < B; b++)
    for (int p = 0; p < NP; p++)
      if (memcmp(k[b][p], k_pages[pages[b][p]], sizeof k[b][p]) != 0) fail_msg("k[%d][%d] is not page %d", b, p, pages[b][p]);
}

/* What checked mode reports of waits that count bytes: more bytes than are
 * in flight, and a read of the part of a buffer a wait did not cover. */
static void test_byte_waits_checked(void **state) {
  (void)state;
  static const char *const TEXT =
      "kernel too_many(x: f32[8]) -> (y: f32[8])\n"
      "{\n"
      "  for one in 0..1 {\n"
      "    scratch buf: f32[2, 4];\n"
      "    scratch sems: semaphore[1];\n"
      "    copy_async(x[0..4], buf[0, :], sem=sems[0]);\n"
      "    copy_async(x[4..8], buf[1, :], sem=sems[0]);\n"
      "    wait(sems[0], bytes=40);\n"
      "    y[0..4] = buf[0, :];\n"
      "  }\n"
      "}\n"
      "kernel half(x: f32[8]) -> (y: f32[8])\n"
      "{\n"
      "  for one in 0..1 {\n"
      "    scratch buf: f32[2, 4];\n"
      "    scratch sems: semaphore[1];\n"
      "    copy_async(x[0..4], buf[0, :], sem=sems[0]);\n"
      "    copy_async(x[4..8], buf[1, :], sem=sems[0]);\n"
      "    wait(sems[0], bytes=24);\n"
      "    y[0..4] = buf[0, :];\n"
      "    y[4..8] = buf[1, :];\n"
      "    wait(sems[0], bytes=8);\n"
      "  }\n"
      "}\n";
  static const char *const KERNELS[] = {"too_many", "half"};
  static const char *const WANT[] = {"line 8:5: wait on sems[0] for 40 bytes with 32 in flight on it (it would never end)",
                                     "line 21:15: load reads buf before the wait of its copy_async"};
  for (int i = 0; i < 2; i++) {
    TestCompile c;
    TpkFunc *f = test_compile_kernel(&c, TEXT, KERNELS[i], NULL);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0};
    void *args[] = {x, y};
    TpkStr rep = {0};
    int nviol = 0;
    TpkError err = {0};
    TpkInterpOptions o = {.checked = true};
    assert_int_equal(tpk_interp_run_checked(f, args, NULL, &o, &rep, &nviol, &err), TPK_OK);
    if (nviol != 1 || !strstr(rep.data, WANT[i])) fail_msg("%s: %d violations: %s", KERNELS[i], nviol, rep.data ? rep.data : "(none)");
    tpk_str_free(&rep);
    test_compile_free(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers), cmocka_unit_test(test_philox_uniform),
      cmocka_unit_test(test_int4_pack_unpack),     cmocka_unit_test(test_float_fields),
      cmocka_unit_test(test_round_half_even),      cmocka_unit_test(test_shifts_past_the_width),
      cmocka_unit_test(test_cumsum_rows_across_blocks), cmocka_unit_test(test_running_stats),
      cmocka_unit_test(test_route_positions),      cmocka_unit_test(test_segmented_cumsum),
      cmocka_unit_test(test_grouped_order_matmul), cmocka_unit_test(test_computed_tiles_checked),
      cmocka_unit_test(test_concat_rope),          cmocka_unit_test(test_stack_rows_and_scalars),
      cmocka_unit_test(test_int4_pairs_matmul),    cmocka_unit_test(test_partition_by_tickets),
      cmocka_unit_test(test_max_and_sums_across_instances), cmocka_unit_test(test_atomics_checked),
      cmocka_unit_test(test_copies_of_data_length), cmocka_unit_test(test_copy_length_past_the_block_checked),
      cmocka_unit_test(test_one_wait_counts_every_page), cmocka_unit_test(test_byte_waits_checked),
  };
  return test_run_tests(tests);
}
