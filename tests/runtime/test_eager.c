/*
 * test_eager.c — eager streams (runtime/eager.c): the three modes give the
 * same results on a corpus of op streams; sizes that change do not
 * recompile; errors name their op in debug mode at once and in strict mode
 * at the next sync; pending buffers are settled by whoever reads them;
 * streams, buffers and contexts end in any order; two streams run on two
 * threads.
 */
#include "support.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpk.h"

#define CHECK(call)                                         \
  do {                                                      \
    if ((call) != TPK_OK) fail_msg("%s", tpk_last_error()); \
  } while (0)

static TpkContext *context(TpkEagerMode mode) {
  TpkContext *ctx;
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  CHECK(tpk_context_set_eager_mode(ctx, mode));
  return ctx;
}

/* A context in one eager mode, a device of it and a stream on the device:
 * where most tests start. */
static void open_stream(TpkEagerMode mode, const char *device, TpkContext **ctx, TpkDevice **dev, TpkStream **s) {
  *ctx = context(mode);
  CHECK(tpk_device_open(*ctx, device, dev));
  CHECK(tpk_stream_create(*dev, s));
}

/* A list of buffers and its length, for destroy_buffers and close_stream. */
#define BUFFERS(...) (TpkBuffer *[]){__VA_ARGS__}, sizeof((TpkBuffer *[]){__VA_ARGS__}) / sizeof(TpkBuffer *)

static void destroy_buffers(TpkBuffer *const *buffers, size_t n) {
  for (size_t i = 0; i < n; i++) tpk_buffer_destroy(buffers[i]);
}

/* Ends a test's buffers, then its stream and its context. */
static void close_stream(TpkContext *ctx, TpkStream *s, TpkBuffer *const *buffers, size_t n) {
  destroy_buffers(buffers, n);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
}

static TpkBuffer *input(TpkDevice *dev, TpkDType dt, int rank, const int64_t *shape, uint64_t seed) {
  TpkBuffer *b;
  CHECK(tpk_buffer_create(dev, dt, rank, shape, &b));
  size_t n = tpk_buffer_bytes(b) / tpk_dtype_size(dt);
  float *v = malloc(sizeof *v * (n + 1));
  for (size_t i = 0; i < n; i++) v[i] = (float)((int64_t)(tpk_splitmix64(&seed) % 19) - 9) / (dt == TPK_I32 ? 1.0f : 4.0f);
  void *bytes = malloc(tpk_buffer_bytes(b) + 1);
  tpk_dtype_convert(TPK_F32, v, dt, bytes, n);
  CHECK(tpk_buffer_write(b, bytes, tpk_buffer_bytes(b)));
  free(bytes);
  free(v);
  return b;
}

/* One op with one output. */
static TpkBuffer *op(TpkStream *s, const char *name, int nargs, const TpkArg *args) {
  TpkBuffer *out;
  int n;
  if (tpk_stream_op(s, name, args, nargs, &out, 1, &n) != TPK_OK) fail_msg("%s: %s", name, tpk_last_error());
  assert_true(n >= 1);
  return out;
}

#define A(b) tpk_arg_buffer(b)
#define INTS(...) tpk_arg_ints((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* ---- the corpus: streams of ops, each given a stream and its size S ------------------- */

enum { MAX_OUT = 16 };
typedef int (*Stream)(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out);

/* Views and broadcasts: permute, transpose, expand, unsqueeze, view, a
 * bias over rows and columns. */
static int views_and_broadcasts(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out) {
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){S, 6}, 1), *b = input(dev, TPK_F32, 1, &S, 2);
  TpkBuffer *c = input(dev, TPK_F32, 1, (int64_t[]){6}, 3);
  TpkBuffer *t = op(s, "permute", 2, (TpkArg[]){A(x), INTS(1, 0)});        /* [6, S] */
  TpkBuffer *u = op(s, "add", 2, (TpkArg[]){A(t), A(b)});                   /* + b over rows */
  TpkBuffer *e = op(s, "unsqueeze", 2, (TpkArg[]){A(c), tpk_arg_int(1)});   /* [6, 1] */
  TpkBuffer *f = op(s, "expand", 2, (TpkArg[]){A(e), INTS(6, S)});         /* [6, S] */
  TpkBuffer *m = op(s, "mul", 2, (TpkArg[]){A(u), A(f)});
  TpkBuffer *tt = op(s, "transpose", 3, (TpkArg[]){A(m), tpk_arg_int(0), tpk_arg_int(1)}); /* [S, 6] */
  TpkBuffer *v = op(s, "view", 2, (TpkArg[]){A(tt), INTS(S * 6)});
  TpkBuffer *w = op(s, "view", 2, (TpkArg[]){A(tt), INTS(S, 2, 3)});
  TpkBuffer *c3 = op(s, "view", 2, (TpkArg[]){A(c), INTS(2, 3)});
  TpkBuffer *sub = op(s, "sub", 3, (TpkArg[]){A(w), A(c3), tpk_arg_named("alpha", tpk_arg_float(0.5))}); /* [S,2,3] - [2,3] */
  out[0] = v;
  out[1] = w;
  out[2] = m;
  out[3] = sub;
  destroy_buffers(BUFFERS(x, b, c, t, u, e, f, tt, c3));
  return 4;
}

/* Integer ops: arithmetic, comparisons, where, integer sums. */
static int integer_ops(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out) {
  TpkBuffer *a = input(dev, TPK_I32, 2, (int64_t[]){S, 5}, 4), *b = input(dev, TPK_I32, 2, (int64_t[]){S, 5}, 5);
  TpkBuffer *sum = op(s, "add", 2, (TpkArg[]){A(a), A(b)});
  TpkBuffer *prod = op(s, "mul", 2, (TpkArg[]){A(sum), tpk_arg_int(3)});
  TpkBuffer *diff = op(s, "sub", 2, (TpkArg[]){A(prod), A(a)});
  TpkBuffer *eq = op(s, "eq", 2, (TpkArg[]){A(a), A(b)});
  TpkBuffer *gt = op(s, "gt", 2, (TpkArg[]){A(diff), tpk_arg_int(0)});
  TpkBuffer *both = op(s, "logical_or", 2, (TpkArg[]){A(eq), A(gt)});
  TpkBuffer *sel = op(s, "where", 3, (TpkArg[]){A(both), A(diff), A(b)});
  TpkBuffer *rows = op(s, "sum", 2, (TpkArg[]){A(sel), INTS(1)});
  TpkBuffer *neg = op(s, "neg", 1, (TpkArg[]){A(sel)});
  out[0] = sel;
  out[1] = rows;
  out[2] = neg;
  out[3] = both;
  destroy_buffers(BUFFERS(a, b, sum, prod, diff, eq, gt));
  return 4;
}

/* Reductions over every axis and set of axes of a rank-3 tensor. */
static int reductions(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out) {
  TpkBuffer *x = input(dev, TPK_F32, 3, (int64_t[]){3, S, 4}, 6);
  int n = 0;
  static const int64_t axes[][3] = {{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}, {0, 1, 2}};
  static const int counts[] = {1, 1, 1, 2, 2, 2, 3};
  for (int i = 0; i < 7; i++) {
    TpkArg sum[] = {A(x), tpk_arg_ints(counts[i], axes[i]), tpk_arg_bool(i % 2)};
    out[n++] = op(s, "sum", 3, sum);
  }
  out[n++] = op(s, "mean", 2, (TpkArg[]){A(x), INTS(1)});
  out[n++] = op(s, "mean", 3, (TpkArg[]){A(x), INTS(0, 2), tpk_arg_bool(true)});
  out[n++] = op(s, "sum", 1, (TpkArg[]){A(x)});
  tpk_buffer_destroy(x);
  return n;
}

/* A layer: mm, bias, GELU, softmax, layer norm, a learning-rate step. */
static int mlp_layer(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out) {
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){S, 8}, 7), *w = input(dev, TPK_F32, 2, (int64_t[]){8, 12}, 8);
  TpkBuffer *b = input(dev, TPK_F32, 1, (int64_t[]){12}, 9), *g = input(dev, TPK_F32, 1, (int64_t[]){12}, 10);
  TpkBuffer *h = op(s, "addmm", 3, (TpkArg[]){A(b), A(x), A(w)});
  TpkBuffer *a = op(s, "gelu", 1, (TpkArg[]){A(h)});
  TpkBuffer *p = op(s, "_softmax", 3, (TpkArg[]){A(a), tpk_arg_int(-1), tpk_arg_bool(false)});
  TpkBuffer *ln[3];
  int n;
  TpkArg norm[] = {A(a), INTS(12), A(g), A(b), tpk_arg_float(1e-5)};
  CHECK(tpk_stream_op(s, "native_layer_norm", norm, 5, ln, 3, &n));
  assert_int_equal(n, 3);
  TpkBuffer *step = op(s, "add", 3, (TpkArg[]){A(w), A(w), tpk_arg_named("alpha", tpk_arg_float(-0.01 * (double)S))});
  out[0] = p;
  out[1] = ln[0];
  out[2] = ln[1];
  out[3] = ln[2];
  out[4] = step;
  destroy_buffers(BUFFERS(x, w, b, g, h, a));
  return 5;
}

/* bf16 in and out: strict rounds every op's result to bf16, fusion keeps
 * the chain's intermediates in f32 and rounds its outputs once, so the
 * modes agree within bf16's tolerance, not bit for bit. */
static int bf16_chain(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer **out) {
  TpkBuffer *x = input(dev, TPK_BF16, 2, (int64_t[]){S, 8}, 19), *y = input(dev, TPK_BF16, 1, (int64_t[]){8}, 20);
  TpkBuffer *a = op(s, "mul", 2, (TpkArg[]){A(x), A(y)});
  TpkBuffer *b = op(s, "exp", 1, (TpkArg[]){A(a)});
  TpkBuffer *c = op(s, "add", 3, (TpkArg[]){A(b), A(x), tpk_arg_named("alpha", tpk_arg_float(0.3))});
  TpkBuffer *d = op(s, "sum", 2, (TpkArg[]){A(c), INTS(1)});
  out[0] = c;
  out[1] = d;
  destroy_buffers(BUFFERS(x, y, a, b));
  return 2;
}

static const struct {
  const char *name;
  Stream run;
} CORPUS[] = {
    {"views_and_broadcasts", views_and_broadcasts},
    {"integer_ops", integer_ops},
    {"reductions", reductions},
    {"mlp_layer", mlp_layer},
    {"bf16_chain", bf16_chain},
};

/* The bytes of a stream's outputs, read (which syncs). */
typedef struct Outputs {
  int n;
  TpkDType dtype[MAX_OUT];
  size_t bytes[MAX_OUT];
  void *data[MAX_OUT];
} Outputs;

static void run_corpus(TpkEagerMode mode, const char *device, int which, int64_t S, Outputs *o, TpkStreamStats *stats) {
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(mode, device, &ctx, &dev, &s);
  assert_int_equal(tpk_stream_mode(s), mode);
  TpkBuffer *out[MAX_OUT];
  o->n = CORPUS[which].run(s, dev, S, out);
  for (int i = 0; i < o->n; i++) {
    o->dtype[i] = tpk_buffer_dtype(out[i]);
    o->bytes[i] = tpk_buffer_bytes(out[i]);
    o->data[i] = malloc(o->bytes[i] + 1);
    CHECK(tpk_buffer_read(out[i], o->data[i], o->bytes[i]));
    tpk_buffer_destroy(out[i]);
  }
  CHECK(tpk_stream_sync(s));
  if (stats) tpk_stream_stats(s, stats);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
}

/* Every stream of the corpus, in the three modes, at two sizes: the same
 * results (f32 within its tolerance: fusion keeps intermediates in f32 as
 * the ops do here, so only the order of sums differs; integers exactly). */
static void test_modes_agree(void **state) {
  (void)state;
  for (int which = 0; which < (int)(sizeof CORPUS / sizeof *CORPUS); which++)
    for (int64_t S = 5; S <= 7; S += 2) {
      Outputs o[3];
      for (int mode = 0; mode < 3; mode++) run_corpus((TpkEagerMode)mode, "host", which, S, &o[mode], NULL);
      for (int mode = 1; mode < 3; mode++) {
        assert_int_equal(o[mode].n, o[0].n);
        for (int i = 0; i < o[0].n; i++) {
          assert_int_equal(o[mode].dtype[i], o[0].dtype[i]);
          assert_int_equal(o[mode].bytes[i], o[0].bytes[i]);
          char why[256];
          if (!test_outputs_close(o[0].dtype[i], o[mode].data[i], o[0].data[i],
                                  (int64_t)(o[0].bytes[i] / tpk_dtype_size(o[0].dtype[i])), why, sizeof why))
            fail_msg("%s at S=%lld, output %d: %s differs from debug: %s", CORPUS[which].name, (long long)S, i,
                     tpk_eager_mode_name((TpkEagerMode)mode), why);
        }
      }
      for (int mode = 0; mode < 3; mode++)
        for (int i = 0; i < o[mode].n; i++) free(o[mode].data[i]);
    }
}

/* On a simulated chip: the same results as the host's, and the streams'
 * simulated time; fused runs fewer kernels than strict, in less time. */
static void test_modes_on_a_simulated_chip(void **state) {
  (void)state;
  Outputs host, sim[2];
  TpkStreamStats st[2];
  run_corpus(TPK_EAGER_STRICT, "host", 3, 9, &host, NULL);
  for (int i = 0; i < 2; i++) run_corpus(i ? TPK_EAGER_FUSED : TPK_EAGER_STRICT, "sim:v5e", 3, 9, &sim[i], &st[i]);
  for (int i = 0; i < 2; i++) {
    assert_true(st[i].sim_seconds > 0);
    for (int j = 0; j < host.n; j++) {
      char why[256];
      if (!test_outputs_close(host.dtype[j], sim[i].data[j], host.data[j], (int64_t)(host.bytes[j] / tpk_dtype_size(host.dtype[j])), why, sizeof why))
        fail_msg("output %d on sim:v5e (%s): %s", j, i ? "fused" : "strict", why);
    }
  }
  assert_true(st[1].launches < st[0].launches);
  assert_true(st[1].sim_seconds < st[0].sim_seconds);
  for (int j = 0; j < host.n; j++) {
    free(host.data[j]);
    free(sim[0].data[j]);
    free(sim[1].data[j]);
  }
}

/* ---- dynamic sizes ------------------------------------------------------------------ */

/* A transformer-ish step at sequence length S (D = 16 and 48 never equal
 * it): fused, every length after the first runs from the cache. */
static int seq_step(TpkStream *s, TpkDevice *dev, int64_t S, TpkBuffer *w, TpkBuffer *g, double lr, TpkBuffer **loss) {
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){S, 16}, (uint64_t)S);
  TpkBuffer *h = op(s, "mm", 2, (TpkArg[]){A(x), A(w)});                                /* [S, 48] */
  TpkBuffer *r = op(s, "relu", 1, (TpkArg[]){A(h)});
  TpkBuffer *v = op(s, "view", 2, (TpkArg[]){A(r), INTS(S, 3, 16)});
  TpkBuffer *m = op(s, "sum", 2, (TpkArg[]){A(v), INTS(1)});                            /* [S, 16] */
  TpkBuffer *p = op(s, "_softmax", 3, (TpkArg[]){A(m), tpk_arg_int(1), tpk_arg_bool(false)});
  TpkBuffer *q = op(s, "mul", 2, (TpkArg[]){A(p), A(g)});
  TpkBuffer *t = op(s, "add", 3, (TpkArg[]){A(q), A(x), tpk_arg_named("alpha", tpk_arg_float(lr))});
  *loss = op(s, "mean", 1, (TpkArg[]){A(t)});
  destroy_buffers(BUFFERS(x, h, r, v, m, p, q, t));
  return 1;
}

/* The loss of one step at length S in a new context (keys by value: no
 * hints from earlier steps). */
static float fresh_loss(TpkEagerMode mode, int64_t S, double lr) {
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(mode, "host", &ctx, &dev, &s);
  unsetenv("TPK_TIER");
  TpkBuffer *w = input(dev, TPK_F32, 2, (int64_t[]){16, 48}, 11), *g = input(dev, TPK_F32, 1, (int64_t[]){16}, 12), *loss;
  seq_step(s, dev, S, w, g, lr, &loss);
  float l;
  CHECK(tpk_buffer_read(loss, &l, sizeof l));
  close_stream(ctx, s, BUFFERS(w, g, loss));
  return l;
}

/* Sequence lengths (and a learning rate that changes every step) after
 * the first: nothing compiles. The window compiles once, its clusters once;
 * in strict mode each op once. `check`: each step's loss is the one a new
 * context computes. */
static void lengths_compile_once(const int64_t *lengths, int n, bool check) {
  for (int mode = TPK_EAGER_STRICT; mode <= TPK_EAGER_FUSED; mode++) {
    setenv("TPK_TIER", "tcc", 1);
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    unsetenv("TPK_TIER");
    TpkBuffer *w = input(dev, TPK_F32, 2, (int64_t[]){16, 48}, 11), *g = input(dev, TPK_F32, 1, (int64_t[]){16}, 12);
    int compiles = 0;
    for (int i = 0; i < n; i++) {
      TpkBuffer *loss;
      seq_step(s, dev, lengths[i], w, g, 0.1 / (1 + i), &loss);
      float l;
      CHECK(tpk_buffer_read(loss, &l, sizeof l));
      assert_true(isfinite(l));
      tpk_buffer_destroy(loss);
      float want = check ? fresh_loss((TpkEagerMode)mode, lengths[i], 0.1 / (1 + i)) : l;
      if (fabsf(l - want) > 1e-5f * (1 + fabsf(want))) fail_msg("S = %lld: loss %g, a new context's %g", (long long)lengths[i], l, want);
      if (i == 0) compiles = tpk_context_compiler_runs(ctx);
    }
    assert_true(compiles > 0);
    if (tpk_context_compiler_runs(ctx) != compiles)
      fail_msg("%s mode: %d compiler runs after the first step", mode == TPK_EAGER_FUSED ? "fused" : "strict",
               tpk_context_compiler_runs(ctx) - compiles);
    TpkStreamStats st;
    tpk_stream_stats(s, &st);
    assert_int_equal(st.ops, n * 8);
    if (mode == TPK_EAGER_FUSED) {
      assert_int_equal(st.windows, n);
      assert_int_equal(st.compiles, 1);
      assert_int_equal(st.cache_hits, n - 1);
    } else {
      assert_int_equal(st.compiles, 8);
      assert_int_equal(st.cache_hits, (n - 1) * 8);
    }
    TpkCacheStats cs;
    CHECK(tpk_cache_stats(ctx, &cs));
    assert_int_equal(cs.unit_misses[TPK_UNIT_EAGER], st.compiles);
    assert_int_equal(cs.unit_hits[TPK_UNIT_EAGER], st.cache_hits);
    close_stream(ctx, s, BUFFERS(w, g));
  }
}

/* More ops seen before than the memo has slots (300 sizes of an add, 256
 * slots): each is found there again, in every mode. One entry a slot
 * missed those whose hashes shared a slot (64 of the char-GPT step's 305
 * ops), and built them alone again. */
static void test_the_memo_keeps_ops_whose_slots_collide(void **state) {
  (void)state;
  enum { N = 300 };
  for (int mode = TPK_EAGER_DEBUG; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x[N];
    for (int i = 0; i < N; i++) x[i] = input(dev, TPK_F32, 1, (int64_t[]){i + 1}, (uint64_t)i);
    TpkStreamStats before, after;
    for (int round = 0; round < 2; round++) {
      tpk_stream_stats(s, &before);
      for (int i = 0; i < N; i++) tpk_buffer_destroy(op(s, "add", 2, (TpkArg[]){A(x[i]), A(x[i])}));
      CHECK(tpk_stream_sync(s));
      tpk_stream_stats(s, &after);
    }
    assert_int_equal(after.memo_hits - before.memo_hits, N);
    destroy_buffers(x, N);
    close_stream(ctx, s, NULL, 0);
  }
}

static void test_sequence_lengths_compile_once(void **state) {
  (void)state;
  int64_t lengths[20];
  for (int i = 0; i < 20; i++) lengths[i] = 20 + 3 * i;
  lengths_compile_once(lengths, 20, false);
}

/* Lengths that happen to equal another size of the stream (16 and 48 of
 * the weights, 3 of the view): the sizes keep the symbols they had
 * (before: each coincidence was another pattern of sizes, and compiled). */
static void test_coincident_lengths_compile_nothing(void **state) {
  (void)state;
  lengths_compile_once((int64_t[]){20, 16, 48, 3, 35, 17, 96, 16}, 8, true);
}

/* A step at length S whose window keeps a size constant (a split of [S,
 * 48] in parts of 16: the parts' count is 3 only when 48 and 16 are known)
 * and divides by a count of elements (S * 16: an int for a Scalar, lifted
 * to an input while it is a size). Its loss. */
static float split_step(TpkStream *s, TpkDevice *dev, int64_t S, double lr) {
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){S, 48}, (uint64_t)S), *parts[3], *loss;
  int n;
  CHECK(tpk_stream_op(s, "split", (TpkArg[]){A(x), tpk_arg_int(16), tpk_arg_int(-1)}, 3, parts, 3, &n));
  assert_int_equal(n, 3);
  TpkBuffer *y = op(s, "add", 3, (TpkArg[]){A(parts[0]), A(parts[1]), tpk_arg_named("alpha", tpk_arg_float(lr))});
  TpkBuffer *z = op(s, "div", 2, (TpkArg[]){A(y), tpk_arg_int(S * 16)});
  loss = op(s, "sum", 1, (TpkArg[]){A(z)});
  float l;
  CHECK(tpk_buffer_read(loss, &l, sizeof l));
  destroy_buffers(BUFFERS(x, parts[0], parts[1], parts[2], y, z, loss));
  return l;
}

/* A length equal to a size the window keeps constant (16), and to the
 * others (48, 3): it is a symbol as before, the count it makes stays an
 * input, and nothing compiles after the first step (before: the length
 * was the constant, the count no input, which moved the other scalars'
 * inputs and made another key of another structure, which no hint gave).
 * Each loss is the one a new context computes. */
static void test_a_length_equal_to_a_constant_size_compiles_nothing(void **state) {
  (void)state;
  const int64_t lengths[] = {20, 25, 16, 48, 3, 30, 16};
  setenv("TPK_TIER", "tcc", 1);
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  int compiles = 0;
  for (int i = 0; i < 7; i++) {
    double lr = 0.5 / (1 + i);
    float l = split_step(s, dev, lengths[i], lr);
    if (i == 0) compiles = tpk_context_compiler_runs(ctx);
    TpkContext *fresh_ctx;
    TpkDevice *fresh_dev;
    TpkStream *fresh;
    open_stream(TPK_EAGER_FUSED, "host", &fresh_ctx, &fresh_dev, &fresh);
    float want = split_step(fresh, fresh_dev, lengths[i], lr);
    close_stream(fresh_ctx, fresh, NULL, 0);
    if (fabsf(l - want) > 1e-5f * (1 + fabsf(want))) fail_msg("S = %lld: loss %g, a new context's %g", (long long)lengths[i], l, want);
  }
  unsetenv("TPK_TIER");
  assert_true(compiles > 0);
  if (tpk_context_compiler_runs(ctx) != compiles) fail_msg("%d compiler runs after the first step", tpk_context_compiler_runs(ctx) - compiles);
  TpkStreamStats st;
  tpk_stream_stats(s, &st);
  assert_int_equal(st.windows, 7);
  close_stream(ctx, s, NULL, 0);
}

/* ---- errors ---------------------------------------------------------------------------- */

/* What a failed call said. */
static char *last_error(void) { return strdup(tpk_last_error()); }

/* Debug mode: a NaN in an output, a shape mismatch and an out-of-range
 * gather, each at once, naming the op, its operands and its position. */
static void test_debug_errors_name_the_op(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_DEBUG, "host", &ctx, &dev, &s);
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){4, 3}, 13), *zero, *out;
  CHECK(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){4, 3}, &zero));
  int n;
  TpkBuffer *y = op(s, "mul", 2, (TpkArg[]){A(x), A(x)}); /* op #1 */
  assert_int_equal(tpk_stream_op(s, "div", (TpkArg[]){A(zero), A(zero)}, 2, &out, 1, &n), TPK_ERR_INVALID);
  char *msg = last_error();
  assert_contains(msg, "op #2 'div' (f32[4,3]): output 0 has NaN at element 0");
  free(msg);
  TpkBuffer *b5;
  CHECK(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){5}, &b5));
  assert_int_equal(tpk_stream_op(s, "add", (TpkArg[]){A(x), A(b5)}, 2, &out, 1, &n), TPK_ERR_INVALID);
  msg = last_error();
  assert_contains(msg, "op #3 'add' (f32[4,3], f32[5]): ");
  assert_contains(msg, "broadcast");
  free(msg);
  TpkBuffer *idx = input(dev, TPK_I32, 2, (int64_t[]){4, 3}, 14);
  int32_t bad[12] = {0, 1, 2, 0, 1, 2, 0, 7, 2, 0, 1, 2}; /* 7 is past dim 1's 3 */
  CHECK(tpk_buffer_write(idx, bad, sizeof bad));
  assert_int_not_equal(tpk_stream_op(s, "gather", (TpkArg[]){A(x), tpk_arg_int(1), A(idx)}, 3, &out, 1, &n), TPK_OK);
  msg = last_error();
  assert_contains(msg, "op #4 'gather' (f32[4,3], i32[4,3]): ");
  assert_contains(msg, "out of range");
  free(msg);
  /* past its dim, though its flattened position (row 0, 3: element [1, 0])
   * is inside x: it read the next row's element */
  int32_t next_row[12] = {3, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
  CHECK(tpk_buffer_write(idx, next_row, sizeof next_row));
  assert_int_not_equal(tpk_stream_op(s, "gather", (TpkArg[]){A(x), tpk_arg_int(1), A(idx)}, 3, &out, 1, &n), TPK_OK);
  msg = last_error();
  assert_contains(msg, "op #5 'gather' (f32[4,3], i32[4,3]): ");
  assert_contains(msg, "index 3 is out of range [0, 3)");
  free(msg);
  /* the stream goes on */
  TpkBuffer *z = op(s, "add", 2, (TpkArg[]){A(y), A(x)});
  float v[12], xv[12];
  CHECK(tpk_buffer_read(z, v, sizeof v));
  CHECK(tpk_buffer_read(x, xv, sizeof xv));
  for (int i = 0; i < 12; i++) assert_true(v[i] == xv[i] * xv[i] + xv[i]);
  CHECK(tpk_stream_sync(s));
  close_stream(ctx, s, BUFFERS(x, zero, y, b5, idx, z));
}

/* Strict and fused: an error of running surfaces at the next sync (strict
 * names the op); shape errors come at once in every mode. */
static void test_errors_at_the_next_sync(void **state) {
  (void)state;
  for (int mode = TPK_EAGER_STRICT; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){4, 3}, 15), *idx, *out, *b5;
    CHECK(tpk_buffer_create(dev, TPK_I32, 2, (int64_t[]){4, 3}, &idx));
    int32_t bad[12] = {0, 1, 2, 0, 1, 2, 0, -9, 2, 0, 1, 2};
    CHECK(tpk_buffer_write(idx, bad, sizeof bad));
    CHECK(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){5}, &b5));
    int n;
    TpkBuffer *y = op(s, "exp", 1, (TpkArg[]){A(x)});
    assert_int_equal(tpk_stream_op(s, "add", (TpkArg[]){A(y), A(b5)}, 2, &out, 1, &n), TPK_ERR_INVALID);
    char *msg = last_error();
    assert_contains(msg, "op #2 'add' (f32[4,3], f32[5]): ");
    free(msg);
    TpkBuffer *gat = op(s, "gather", 3, (TpkArg[]){A(y), tpk_arg_int(1), A(idx)}); /* op #3: fails when it runs */
    TpkBuffer *after = op(s, "neg", 1, (TpkArg[]){A(gat)});
    assert_int_not_equal(tpk_stream_sync(s), TPK_OK);
    msg = last_error();
    if (mode == TPK_EAGER_STRICT) assert_contains(msg, "op #3 'gather': ");
    else assert_contains(msg, "the fused window of ops #1 to #4: ");
    assert_contains(msg, "out of range");
    free(msg);
    CHECK(tpk_stream_sync(s)); /* the error was reported: cleared */
    close_stream(ctx, s, BUFFERS(x, idx, b5, y, gat, after));
  }
}

/* Strict: a small op runs on the caller's thread when the queue is idle,
 * and on the queue behind a large one (queued: 16 MB) still running; either
 * way an error of running surfaces at the next sync naming its op, and the
 * ops after it run, in order. */
static void test_strict_errors_inline_and_queued(void **state) {
  (void)state;
  for (int behind = 0; behind <= 1; behind++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream(TPK_EAGER_STRICT, "host", &ctx, &dev, &s);
    TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){4, 3}, 15), *idx, *big = NULL, *big_exp = NULL;
    CHECK(tpk_buffer_create(dev, TPK_I32, 2, (int64_t[]){4, 3}, &idx));
    int32_t bad[12] = {0, 1, 2, 0, 1, 2, 0, -9, 2, 0, 1, 2};
    CHECK(tpk_buffer_write(idx, bad, sizeof bad));
    if (behind) {
      CHECK(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){2048, 2048}, &big));
      big_exp = op(s, "exp", 1, (TpkArg[]){A(big)});
    }
    TpkBuffer *y = op(s, "exp", 1, (TpkArg[]){A(x)});
    TpkBuffer *gat = op(s, "gather", 3, (TpkArg[]){A(y), tpk_arg_int(1), A(idx)}); /* fails when it runs */
    TpkBuffer *after = op(s, "neg", 1, (TpkArg[]){A(y)});
    assert_int_not_equal(tpk_stream_sync(s), TPK_OK);
    char *msg = last_error();
    assert_contains(msg, behind ? "op #3 'gather': " : "op #2 'gather': ");
    assert_contains(msg, "out of range");
    free(msg);
    float ya[12], na[12];
    CHECK(tpk_buffer_read(y, ya, sizeof ya));
    CHECK(tpk_buffer_read(after, na, sizeof na));
    for (int i = 0; i < 12; i++) assert_true(na[i] == -ya[i]); /* the op after the failed one ran */
    CHECK(tpk_stream_sync(s));
    close_stream(ctx, s, BUFFERS(x, idx, y, gat, after, big, big_exp));
  }
}

/* An op seen before at the same sizes is launched (debug, strict) or
 * recorded (fused) as it was (the memo) — with its own operands (x + x is
 * not x + y), its own lifted scalars (alpha changes) and its constant
 * floats compared — compiling nothing; in debug and strict it counts as a
 * cache hit, in fused its window does. */
static void test_ops_seen_before(void **state) {
  (void)state;
  for (int mode = TPK_EAGER_DEBUG; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x = input(dev, TPK_F32, 1, (int64_t[]){16}, 1), *y = input(dev, TPK_F32, 1, (int64_t[]){16}, 2);
    float xv[16], yv[16], got[16];
    CHECK(tpk_buffer_read(x, xv, sizeof xv));
    CHECK(tpk_buffer_read(y, yv, sizeof yv));
    TpkStreamStats before, after;
    for (int round = 0; round < 3; round++) {
      if (round == 1) tpk_stream_stats(s, &before);
      for (int k = 0; k < 4; k++) {
        double alpha = 0.5 * k;
        TpkBuffer *a = op(s, "add", 3, (TpkArg[]){A(x), A(y), tpk_arg_named("alpha", tpk_arg_float(alpha))});
        TpkBuffer *b = op(s, "add", 3, (TpkArg[]){A(x), A(x), tpk_arg_named("alpha", tpk_arg_float(alpha))});
        double eps = k % 2 ? 1.0 : 1e-5; /* a float parameter: a constant of the op's graph */
        TpkBuffer *ln[3], *c;
        int n;
        CHECK(tpk_stream_op(s, "native_layer_norm",
                            (TpkArg[]){A(x), INTS(16), tpk_arg_none(), tpk_arg_none(), tpk_arg_float(eps)}, 5, ln, 3, &n));
        c = ln[0];
        tpk_buffer_destroy(ln[1]);
        tpk_buffer_destroy(ln[2]);
        CHECK(tpk_buffer_read(a, got, sizeof got));
        for (int i = 0; i < 16; i++) assert_float_equal(got[i], xv[i] + (float)alpha * yv[i], 1e-6);
        CHECK(tpk_buffer_read(b, got, sizeof got));
        for (int i = 0; i < 16; i++) assert_float_equal(got[i], xv[i] + (float)alpha * xv[i], 1e-6);
        CHECK(tpk_buffer_read(c, got, sizeof got));
        double mean = 0, var = 0;
        for (int i = 0; i < 16; i++) mean += xv[i] / 16.0;
        for (int i = 0; i < 16; i++) var += (xv[i] - mean) * (xv[i] - mean) / 16.0;
        for (int i = 0; i < 16; i++) assert_float_equal(got[i], (xv[i] - mean) / sqrt(var + eps), 1e-4);
        tpk_buffer_destroy(a);
        tpk_buffer_destroy(b);
        tpk_buffer_destroy(c);
      }
    }
    tpk_stream_stats(s, &after);
    assert_int_equal(after.compiles, before.compiles);
    if (mode == TPK_EAGER_FUSED) { /* one window per k, run by the first read */
      assert_int_equal(after.windows - before.windows, 2 * 4);
      assert_int_equal(after.cache_hits - before.cache_hits, 2 * 4);
    } else {
      assert_int_equal(after.cache_hits - before.cache_hits, 3 * 4 * 2);
    }
    close_stream(ctx, s, BUFFERS(x, y));
  }
}

/* A window run again as before (the same ops from the same memo entries,
 * on values wired alike) takes the program it ran without making its key,
 * and the lifted scalars its records hold now: two alphas equal before
 * (one input) and different now do not take that entry, and the values
 * are right either way. */
static void test_a_window_seen_before(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  TpkBuffer *x = input(dev, TPK_F32, 1, (int64_t[]){16}, 3);
  float xv[16], got[16];
  CHECK(tpk_buffer_read(x, xv, sizeof xv));
  static const double alphas[][2] = {{2, 2}, {2, 2}, {2, 3}, {2, 3}, {-1, 4}, {3, 3}, {0.5, 0.5}, {2, 3}};
  int n = (int)(sizeof alphas / sizeof alphas[0]);
  TpkStreamStats before, after;
  tpk_stream_stats(s, &before);
  for (int round = 0; round < n; round++) {
    double a = alphas[round][0], b = alphas[round][1];
    TpkBuffer *p = op(s, "add", 3, (TpkArg[]){A(x), A(x), tpk_arg_named("alpha", tpk_arg_float(a))});
    TpkBuffer *q = op(s, "add", 3, (TpkArg[]){A(p), A(x), tpk_arg_named("alpha", tpk_arg_float(b))});
    tpk_buffer_destroy(p);
    CHECK(tpk_buffer_read(q, got, sizeof got));
    for (int i = 0; i < 16; i++) assert_float_equal(got[i], (xv[i] + (float)a * xv[i]) + (float)b * xv[i], 1e-5);
    tpk_buffer_destroy(q);
  }
  tpk_stream_stats(s, &after);
  assert_int_equal(after.windows - before.windows, n);
  /* keyed: the first {2, 2} (one input for both alphas) and the first
   * {2, 3} (two): the others take the entry that has their inputs */
  assert_int_equal(after.windows_seen - before.windows_seen, n - 2);
  close_stream(ctx, s, BUFFERS(x));
}

/* ---- pending buffers ------------------------------------------------------------------- */

/* A pending buffer is computed before anyone reads it: a read, its data, a
 * kernel launch, another stream's op; a write of a buffer a pending window
 * reads waits for the window, which sees the old contents. */
static void test_pending_buffers_settle(void **state) {
  (void)state;
  for (int mode = TPK_EAGER_STRICT; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx = context((TpkEagerMode)mode);
    TpkDevice *dev;
    CHECK(tpk_device_open(ctx, "host", &dev));
    TpkStream *s, *other;
    CHECK(tpk_stream_create(dev, &s));
    CHECK(tpk_stream_create(dev, &other));
    TpkBuffer *x;
    CHECK(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){8, 8}, &x));
    float ones[64], twos[64], v[64];
    for (int i = 0; i < 64; i++) ones[i] = 1, twos[i] = 2;
    CHECK(tpk_buffer_write(x, ones, sizeof ones));
    /* data() of a pending output */
    TpkBuffer *y = op(s, "add", 2, (TpkArg[]){A(x), A(x)});
    const float *yd = tpk_buffer_data(y);
    assert_true(yd[63] == 2.0f);
    /* a write of what the window reads: the window ran with the old x */
    TpkBuffer *z = op(s, "mul", 2, (TpkArg[]){A(x), A(x)});
    CHECK(tpk_buffer_write(x, twos, sizeof twos));
    CHECK(tpk_buffer_read(z, v, sizeof v));
    assert_true(v[0] == 1.0f);
    /* a kernel launch reading a pending buffer */
    TpkBuffer *w = op(s, "add", 2, (TpkArg[]){A(x), A(x)}), *sm;
    TpkKernel *softmax;
    CHECK(tpk_std_kernel(ctx, "softmax", &softmax));
    CHECK(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){8, 8}, &sm));
    TpkLaunch L = {.args = (TpkBuffer *[]){w, sm}};
    CHECK(tpk_kernel_launch(softmax, &L));
    CHECK(tpk_buffer_read(sm, v, sizeof v));
    assert_true(fabsf(v[5] - 0.125f) < 1e-6f);
    /* another stream's op on a pending buffer, and a view of one */
    TpkBuffer *u = op(s, "mul", 2, (TpkArg[]){A(x), A(x)}), *view;
    CHECK(tpk_buffer_view(u, 0, TPK_F32, 1, (int64_t[]){64}, &view));
    TpkBuffer *t = op(other, "add", 2, (TpkArg[]){A(u), A(u)});
    TpkBuffer *tv = op(other, "neg", 1, (TpkArg[]){A(view)});
    CHECK(tpk_buffer_read(t, v, sizeof v));
    assert_true(v[10] == 8.0f);
    CHECK(tpk_buffer_read(tv, v, sizeof v));
    assert_true(v[10] == -4.0f);
    CHECK(tpk_stream_sync(s));
    CHECK(tpk_stream_sync(other));
    destroy_buffers(BUFFERS(x, y, z, w, sm, u, view, t, tv));
    tpk_stream_destroy(s);
    tpk_stream_destroy(other);
    tpk_context_destroy(ctx);
  }
}

/* A pending output's address is known at once and settles nothing: the
 * work runs at the sync, and the bytes are then where the address said. */
static void test_address_of_a_pending_buffer(void **state) {
  (void)state;
  for (int mode = TPK_EAGER_STRICT; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x;
    CHECK(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){64}, &x));
    float ones[64];
    for (int i = 0; i < 64; i++) ones[i] = 1;
    CHECK(tpk_buffer_write(x, ones, sizeof ones));
    TpkBuffer *y = op(s, "add", 2, (TpkArg[]){A(x), A(x)});
    const float *at = tpk_buffer_address(y);
    assert_non_null(at);
    TpkStreamStats stats;
    tpk_stream_stats(s, &stats);
    if (mode == TPK_EAGER_FUSED) assert_int_equal(stats.windows, 0); /* not run by the address */
    CHECK(tpk_stream_sync(s));
    assert_ptr_equal(at, tpk_buffer_data(y));
    assert_true(at[63] == 2.0f);
    assert_null(tpk_buffer_address(NULL));
    close_stream(ctx, s, BUFFERS(x, y));
  }
}

/* A fused op's outputs take memory only when the window computes them:
 * none at submission, and none ever for an intermediate destroyed before
 * the sync; one still held at the sync is computed and readable, and so
 * is a view of one (the view holds its bytes). The device's memory in
 * use, seen by an observer while the window's launch is done but the
 * window still holds its buffers, counts the inputs, what the window
 * computed and its lifted scalars (4 bytes each), nothing else. */
static void heard_memory(void *user, const TpkStreamLaunch *l) {
  (void)l;
  void **at = user;
  tpk_device_memory(at[0], NULL, at[1]);
}

static void test_fused_outputs_take_memory_when_computed(void **state) {
  (void)state;
  enum { N = 128 * 256 };
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  uint64_t used, at_launch = 0;
  tpk_stream_observe(s, heard_memory, (void *[]){dev, &at_launch});
  TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){128, 256}, 31);
  size_t bytes = tpk_buffer_bytes(x);
  tpk_device_memory(dev, NULL, &used);
  assert_int_equal(used, bytes);
  TpkBuffer *scaled = op(s, "mul", 2, (TpkArg[]){A(x), tpk_arg_float(0.5)}); /* destroyed: never computed */
  TpkBuffer *e = op(s, "exp", 1, (TpkArg[]){A(scaled)});                     /* held at the sync */
  TpkBuffer *negated = op(s, "neg", 1, (TpkArg[]){A(e)});                    /* destroyed */
  TpkBuffer *y = op(s, "add", 2, (TpkArg[]){A(negated), A(x)});              /* held */
  TpkBuffer *sg = op(s, "sigmoid", 1, (TpkArg[]){A(x)}), *view;              /* destroyed, a view held */
  CHECK(tpk_buffer_view(sg, 4 * 256 * sizeof(float), TPK_F32, 1, (int64_t[]){256}, &view));
  tpk_buffer_destroy(scaled);
  tpk_buffer_destroy(negated);
  tpk_buffer_destroy(sg);
  tpk_device_memory(dev, NULL, &used);
  assert_int_equal(used, bytes); /* nothing computed yet */
  CHECK(tpk_stream_sync(s));
  assert_int_equal(at_launch, 4 * bytes + 4); /* x, e, y, sigmoid's bytes; the scalar 0.5 */
  tpk_device_memory(dev, NULL, &used);
  assert_int_equal(used, 4 * bytes);
  float *xv = malloc(sizeof *xv * N), *ev = malloc(sizeof *ev * N), *yv = malloc(sizeof *yv * N), vv[256];
  CHECK(tpk_buffer_read(x, xv, bytes));
  CHECK(tpk_buffer_read(e, ev, bytes));
  CHECK(tpk_buffer_read(y, yv, bytes));
  CHECK(tpk_buffer_read(view, vv, sizeof vv));
  for (int i = 0; i < N; i++) {
    float want = expf(0.5f * xv[i]);
    assert_true(fabsf(ev[i] - want) <= 1e-5f * want);
    assert_true(fabsf(yv[i] - (xv[i] - want)) <= 1e-5f * (1 + want));
  }
  for (int i = 0; i < 256; i++) assert_true(fabsf(vv[i] - 1 / (1 + expf(-xv[4 * 256 + i]))) <= 1e-6f);
  destroy_buffers(BUFFERS(e, y, view));
  tpk_device_memory(dev, NULL, &used);
  assert_int_equal(used, bytes);
  free(xv);
  free(ev);
  free(yv);
  close_stream(ctx, s, BUFFERS(x));
}

/* A view made of a fused output before its window ran, of an output whose
 * window never ran (its stream's context ended) or failed, and the ways
 * its bytes are reached from outside (data, address, write, a kernel
 * launch writing it): each gives the bytes memory first. */
static void test_deferred_bytes_reached_from_outside(void **state) {
  (void)state;
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  TpkBuffer *x = input(dev, TPK_F32, 1, (int64_t[]){64}, 32);
  float xv[64], v[64];
  CHECK(tpk_buffer_read(x, xv, sizeof xv));
  /* written from outside while pending: the window runs first, then the write lands */
  TpkBuffer *a = op(s, "neg", 1, (TpkArg[]){A(x)}), *av;
  CHECK(tpk_buffer_view(a, 32 * sizeof(float), TPK_F32, 1, (int64_t[]){32}, &av));
  float twos[64];
  for (int i = 0; i < 64; i++) twos[i] = 2;
  CHECK(tpk_buffer_write(a, twos, sizeof twos));
  CHECK(tpk_buffer_read(av, v, 32 * sizeof(float)));
  assert_true(v[0] == 2.0f && v[31] == 2.0f);
  /* a kernel launch writing a pending output, and data() of another */
  TpkBuffer *b = op(s, "exp", 1, (TpkArg[]){A(x)}), *c = op(s, "abs", 1, (TpkArg[]){A(x)});
  TpkKernel *softmax;
  CHECK(tpk_std_kernel(ctx, "softmax", &softmax));
  TpkBuffer *x2, *b2;
  CHECK(tpk_buffer_view(x, 0, TPK_F32, 2, (int64_t[]){8, 8}, &x2));
  CHECK(tpk_buffer_view(b, 0, TPK_F32, 2, (int64_t[]){8, 8}, &b2));
  TpkLaunch L = {.args = (TpkBuffer *[]){x2, b2}};
  CHECK(tpk_kernel_launch(softmax, &L));
  CHECK(tpk_buffer_read(b, v, sizeof v));
  float sum = 0;
  for (int i = 0; i < 8; i++) sum += v[i];
  assert_true(fabsf(sum - 1) < 1e-5f);
  const float *cd = tpk_buffer_data(c);
  for (int i = 0; i < 64; i++) assert_true(cd[i] == fabsf(xv[i]));
  destroy_buffers(BUFFERS(a, av, b, b2, c, x2));
  /* the context ends with an output pending: its bytes never get memory */
  TpkBuffer *d = op(s, "neg", 1, (TpkArg[]){A(x)});
  tpk_context_destroy(ctx);
  assert_null(tpk_buffer_data(d));
  assert_null(tpk_buffer_address(d));
  assert_int_not_equal(tpk_buffer_read(d, v, sizeof v), TPK_OK);
  tpk_buffer_destroy(d);
  tpk_stream_destroy(s);
  tpk_buffer_destroy(x);
}

/* ---- lifetimes ----------------------------------------------------------------------- */

/* A stream destroyed with pending buffers runs their work first; buffers
 * destroyed before the sync are not computed; a context destroyed with a
 * stream open drops its work, and the handles stay safe to use and destroy. */
static void test_lifetimes(void **state) {
  (void)state;
  for (int mode = 0; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x = input(dev, TPK_F32, 1, (int64_t[]){100}, 16);
    TpkBuffer *kept = op(s, "mul", 2, (TpkArg[]){A(x), tpk_arg_float(3.0)});
    TpkBuffer *dropped = op(s, "exp", 1, (TpkArg[]){A(kept)});
    TpkBuffer *view;
    CHECK(tpk_buffer_view(dropped, 0, TPK_F32, 1, (int64_t[]){10}, &view)); /* keeps its bytes needed */
    tpk_buffer_destroy(dropped);
    TpkBuffer *gone = op(s, "neg", 1, (TpkArg[]){A(kept)});
    tpk_buffer_destroy(gone);
    tpk_buffer_destroy(x); /* an input, destroyed before it was read */
    tpk_stream_destroy(s);
    float v[100], e[10];
    CHECK(tpk_buffer_read(kept, v, sizeof v));
    CHECK(tpk_buffer_read(view, e, sizeof e));
    for (int i = 0; i < 10; i++) assert_true(fabsf(e[i] - expf(v[i])) <= 1e-5f * expf(v[i]));
    tpk_buffer_destroy(kept);
    tpk_buffer_destroy(view);

    /* the context ends with a stream open and work pending */
    CHECK(tpk_stream_create(dev, &s));
    x = input(dev, TPK_F32, 1, (int64_t[]){100}, 17);
    TpkBuffer *y = op(s, "sigmoid", 1, (TpkArg[]){A(x)}), *out;
    tpk_context_destroy(ctx);
    int n;
    assert_int_equal(tpk_stream_op(s, "neg", (TpkArg[]){A(y)}, 1, &out, 1, &n), TPK_ERR_INVALID);
    assert_int_not_equal(tpk_buffer_read(y, v, sizeof v), TPK_OK);
    tpk_stream_sync(s);
    tpk_buffer_destroy(x);
    tpk_stream_destroy(s);
    tpk_buffer_destroy(y);
  }
}

/* ---- threads ----------------------------------------------------------------------- */

typedef struct Worker {
  TpkDevice *dev;
  int seed;
  float got, want;
  char failure[256];
} Worker;

static void *worker(void *arg) {
  Worker *wk = arg;
  TpkStream *s;
  if (tpk_stream_create(wk->dev, &s) != TPK_OK) {
    snprintf(wk->failure, sizeof wk->failure, "%s", tpk_last_error());
    return NULL;
  }
  float acc = 0;
  for (int step = 0; step < 30 && !wk->failure[0]; step++) {
    int64_t n = 50 + step;
    TpkBuffer *x, *y = NULL, *z = NULL, *m = NULL;
    float v[100];
    for (int i = 0; i < n; i++) v[i] = (float)((i + wk->seed) % 5);
    bool ok = tpk_buffer_create(wk->dev, TPK_F32, 1, &n, &x) == TPK_OK && tpk_buffer_write(x, v, sizeof *v * (size_t)n) == TPK_OK;
    int k;
    ok = ok && tpk_stream_op(s, "mul", (TpkArg[]){A(x), A(x)}, 2, &y, 1, &k) == TPK_OK;
    ok = ok && tpk_stream_op(s, "add", (TpkArg[]){A(y), A(x), tpk_arg_named("alpha", tpk_arg_float(step))}, 3, &z, 1, &k) == TPK_OK;
    ok = ok && tpk_stream_op(s, "sum", (TpkArg[]){A(z)}, 1, &m, 1, &k) == TPK_OK;
    float total = 0, want = 0;
    ok = ok && tpk_buffer_read(m, &total, sizeof total) == TPK_OK;
    for (int i = 0; i < n; i++) want += v[i] * v[i] + (float)step * v[i];
    if (!ok) snprintf(wk->failure, sizeof wk->failure, "%s", tpk_last_error());
    else if (total != want) snprintf(wk->failure, sizeof wk->failure, "step %d: %g, want %g", step, total, want);
    acc += total;
    tpk_buffer_destroy(x);
    tpk_buffer_destroy(y);
    tpk_buffer_destroy(z);
    tpk_buffer_destroy(m);
  }
  wk->got = acc;
  if (tpk_stream_sync(s) != TPK_OK && !wk->failure[0]) snprintf(wk->failure, sizeof wk->failure, "%s", tpk_last_error());
  tpk_stream_destroy(s);
  return NULL;
}

/* Two streams on two threads, in each mode, on one context. */
static void test_two_streams_on_two_threads(void **state) {
  (void)state;
  for (int mode = 0; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx = context((TpkEagerMode)mode);
    TpkDevice *dev;
    CHECK(tpk_device_open(ctx, "host", &dev));
    Worker wk[2] = {{.dev = dev, .seed = 1}, {.dev = dev, .seed = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, worker, &wk[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
      if (wk[i].failure[0]) fail_msg("%s, thread %d: %s", tpk_eager_mode_name((TpkEagerMode)mode), i, wk[i].failure);
    tpk_context_destroy(ctx);
  }
}

/* ---- kernels in streams ------------------------------------------------------------------ */

/* A loaded kernel in a stream, beside ops, in every mode. */
static void test_kernel_calls(void **state) {
  (void)state;
  float want[24];
  for (int mode = 0; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkKernel *softmax;
    CHECK(tpk_std_kernel(ctx, "softmax", &softmax));
    TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){4, 6}, 18), *y, *z;
    int n;
    TpkBuffer *d = op(s, "mul", 2, (TpkArg[]){A(x), tpk_arg_float(2.0)});
    CHECK(tpk_stream_call(s, softmax, (TpkArg[]){A(d)}, 1, &y, 1, &n));
    assert_int_equal(n, 1);
    z = op(s, "add", 2, (TpkArg[]){A(y), A(x)});
    float v[24];
    CHECK(tpk_buffer_read(z, v, sizeof v));
    for (int i = 0; i < 24; i++) {
      if (mode == 0) want[i] = v[i];
      else assert_true(fabsf(v[i] - want[i]) <= 1e-6f);
    }
    close_stream(ctx, s, BUFFERS(x, y, z, d));
  }
}

/* ---- indices and slices ------------------------------------------------------------------ */

/* x[r][c] of a [rows, cols] buffer holding 0, 1, 2, ... */
static TpkBuffer *iota(TpkDevice *dev, int64_t rows, int64_t cols) {
  TpkBuffer *b;
  CHECK(tpk_buffer_create(dev, TPK_F32, 2, (int64_t[]){rows, cols}, &b));
  float v[64];
  for (int i = 0; i < rows * cols; i++) v[i] = (float)i;
  CHECK(tpk_buffer_write(b, v, tpk_buffer_bytes(b)));
  return b;
}

static void expect_values(TpkBuffer *b, const float *want, int n) {
  float v[64];
  assert_int_equal(tpk_buffer_bytes(b), sizeof *v * (size_t)n);
  CHECK(tpk_buffer_read(b, v, tpk_buffer_bytes(b)));
  for (int i = 0; i < n; i++)
    if (v[i] != want[i]) fail_msg("element %d: %g, expected %g", i, v[i], want[i]);
}

/* An index (select's, a slice's start, end and step) is never a shape
 * symbol of its own: select(x, 1, 3) of a [4, 8] x, which once grew a
 * symbol no input binds, and a slice's ints in a fused window, which once
 * became window symbols a later view could not match, in every mode. */
static void test_indices_are_not_sizes(void **state) {
  (void)state;
  for (int mode = 0; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "host", &ctx, &dev, &s);
    TpkBuffer *x = iota(dev, 4, 8), *y = iota(dev, 6, 8);
    TpkBuffer *col = op(s, "select", 3, (TpkArg[]){A(x), tpk_arg_int(1), tpk_arg_int(3)});
    TpkBuffer *row = op(s, "select", 3, (TpkArg[]){A(x), tpk_arg_int(0), tpk_arg_int(2)});
    TpkBuffer *cols = op(s, "slice", 5, (TpkArg[]){A(x), tpk_arg_int(1), tpk_arg_int(2), tpk_arg_int(7), tpk_arg_int(3)});
    TpkBuffer *flat = op(s, "view", 2, (TpkArg[]){A(y), INTS(48)});
    TpkBuffer *part = op(s, "slice", 4, (TpkArg[]){A(flat), tpk_arg_int(0), tpk_arg_int(8), tpk_arg_int(32)});
    TpkBuffer *cube = op(s, "view", 2, (TpkArg[]){A(part), INTS(3, 4, 2)});
    TpkBuffer *twice = op(s, "mul", 2, (TpkArg[]){A(cube), tpk_arg_float(2.0)});
    expect_values(col, (float[]){3, 11, 19, 27}, 4);
    expect_values(row, (float[]){16, 17, 18, 19, 20, 21, 22, 23}, 8);
    expect_values(cols, (float[]){2, 5, 10, 13, 18, 21, 26, 29}, 8);
    float want[24];
    for (int i = 0; i < 24; i++) want[i] = (float)(2 * (8 + i));
    expect_values(twice, want, 24);
    close_stream(ctx, s, BUFFERS(x, y, col, row, cols, flat, part, cube, twice));
  }
}

/* A fused window whose graph would take more buffers than a kernel takes
 * parameters (an optimizer's step over many tensors) runs in parts. */
static void test_a_window_of_many_buffers(void **state) {
  (void)state;
  enum { N = 100 };
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  TpkBuffer *x[N], *y[N], *z[N];
  for (int i = 0; i < N; i++) {
    x[i] = iota(dev, 2, 3);
    y[i] = op(s, "add", 3, (TpkArg[]){A(x[i]), A(x[i]), tpk_arg_named("alpha", tpk_arg_float((double)i))});
  }
  for (int i = 0; i < N; i++) z[i] = op(s, "mul", 2, (TpkArg[]){A(y[i]), A(x[(i + 1) % N])});
  CHECK(tpk_stream_sync(s));
  for (int i = 0; i < N; i++) {
    float want[6];
    for (int e = 0; e < 6; e++) want[e] = (float)e * (1 + (float)i) * (float)e;
    expect_values(z[i], want, 6);
  }
  TpkStreamStats stats;
  tpk_stream_stats(s, &stats);
  assert_true(stats.windows >= 2);
  for (int i = 0; i < N; i++) tpk_buffer_destroy(x[i]), tpk_buffer_destroy(y[i]), tpk_buffer_destroy(z[i]);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
}

/* What bounds a window is its graph's parameters, not the buffers it met:
 * an optimizer's step (every tensor scaled by the same learning rate, its
 * intermediates dropped) and a long chain run as one window each. A
 * lifted scalar is one input per distinct value, however many ops take it. */
static void test_a_window_of_many_ops_and_few_parameters(void **state) {
  (void)state;
  enum { N = 120, CHAIN = 150 };
  TpkContext *ctx;
  TpkDevice *dev;
  TpkStream *s;
  open_stream(TPK_EAGER_FUSED, "host", &ctx, &dev, &s);
  /* N inputs, N outputs, 2 scalar values: 242 parameters of 360 buffers met */
  TpkBuffer *x[N], *z[N];
  for (int i = 0; i < N; i++) {
    x[i] = iota(dev, 2, 3);
    TpkBuffer *y = op(s, "mul", 2, (TpkArg[]){A(x[i]), tpk_arg_float(0.5)});
    z[i] = op(s, "add", 3, (TpkArg[]){A(y), A(x[i]), tpk_arg_named("alpha", tpk_arg_float(0.25))});
    tpk_buffer_destroy(y);
  }
  CHECK(tpk_stream_sync(s));
  for (int i = 0; i < N; i++) expect_values(z[i], (float[]){0, 0.75f, 1.5f, 2.25f, 3, 3.75f}, 6);
  TpkStreamStats stats;
  tpk_stream_stats(s, &stats);
  assert_int_equal(stats.windows, 1);
  /* 300 ops on one buffer: x = x * 0.5 + 1, its intermediates dropped */
  TpkBuffer *c = iota(dev, 2, 3);
  for (int i = 0; i < CHAIN; i++) {
    TpkBuffer *half = op(s, "mul", 2, (TpkArg[]){A(c), tpk_arg_float(0.5)});
    tpk_buffer_destroy(c);
    c = op(s, "add", 2, (TpkArg[]){A(half), tpk_arg_float(1.0)});
    tpk_buffer_destroy(half);
  }
  CHECK(tpk_stream_sync(s));
  float want[6];
  for (int e = 0; e < 6; e++) {
    want[e] = (float)e;
    for (int i = 0; i < CHAIN; i++) want[e] = want[e] * 0.5f + 1.0f;
  }
  expect_values(c, want, 6);
  tpk_stream_stats(s, &stats);
  assert_int_equal(stats.windows, 2);
  tpk_buffer_destroy(c);
  for (int i = 0; i < N; i++) tpk_buffer_destroy(x[i]), tpk_buffer_destroy(z[i]);
  tpk_stream_destroy(s);
  tpk_context_destroy(ctx);
}

/* ---- observing launches ------------------------------------------------------------------ */

typedef struct Seen {
  int launches;
  double seconds;
  int64_t kernels, last;
  char labels[512];
} Seen;

static void see(void *user, const TpkStreamLaunch *l) {
  Seen *s = user;
  s->launches++;
  s->seconds += l->result->simulated ? l->result->sim.seconds : 0;
  s->kernels += l->kernels;
  assert_true(l->first > s->last && l->last >= l->first); /* in order */
  s->last = l->last;
  size_t at = strlen(s->labels);
  snprintf(s->labels + at, sizeof s->labels - at, "%s|", l->label);
}

/* The observer hears of every launch once it has run, in order: one per op
 * (debug, strict), one per window (fused, named by its ops); their
 * simulated times add up to the stream's. */
static void test_the_observer_hears_every_launch(void **state) {
  (void)state;
  for (int mode = 0; mode <= TPK_EAGER_FUSED; mode++) {
    TpkContext *ctx;
    TpkDevice *dev;
    TpkStream *s;
    open_stream((TpkEagerMode)mode, "sim:v5e", &ctx, &dev, &s);
    Seen seen = {0};
    tpk_stream_observe(s, see, &seen);
    TpkBuffer *x = input(dev, TPK_F32, 2, (int64_t[]){64, 128}, 21), *w = input(dev, TPK_F32, 2, (int64_t[]){128, 32}, 22);
    TpkBuffer *h = op(s, "mm", 2, (TpkArg[]){A(x), A(w)});
    TpkBuffer *g = op(s, "gelu", 1, (TpkArg[]){A(h)});
    TpkBuffer *y = op(s, "add", 2, (TpkArg[]){A(g), A(h)});
    CHECK(tpk_stream_sync(s));
    TpkStreamStats stats;
    tpk_stream_stats(s, &stats);
    assert_int_equal(seen.launches, mode == TPK_EAGER_FUSED ? 1 : 3);
    assert_int_equal(seen.kernels, stats.launches);
    assert_true(seen.seconds > 0 && fabs(seen.seconds - stats.sim_seconds) <= 1e-12);
    assert_string_equal(seen.labels, mode == TPK_EAGER_FUSED ? "mm, gelu, add (3 ops)|" : "mm|gelu|add|");
    tpk_stream_observe(s, NULL, NULL);
    TpkBuffer *z = op(s, "neg", 1, (TpkArg[]){A(y)});
    CHECK(tpk_stream_sync(s));
    assert_int_equal(seen.launches, mode == TPK_EAGER_FUSED ? 1 : 3);
    close_stream(ctx, s, BUFFERS(x, w, h, g, y, z));
  }
}

/* TPK_EAGER picks the mode of new contexts; a value that is no mode is an
 * error naming it. */
/* pow with an exponent ATen's kernel special-cases is computed as it
 * computes it (x * x * x for 3, 1 / sqrt(x) for -0.5), in every mode, though
 * strict and fused mode pass the exponent as a run-time scalar. */
static void test_pow_special_exponents(void **state) {
  (void)state;
  enum { N = 4096 };
  float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = 0.37f + 0.0137f * (float)i;
  static const TpkEagerMode modes[] = {TPK_EAGER_DEBUG, TPK_EAGER_STRICT, TPK_EAGER_FUSED};
  for (int m = 0; m < 3; m++)
    for (int k = 0; k < 2; k++) {
      TpkContext *ctx;
      TpkDevice *dev;
      TpkStream *s;
      open_stream(modes[m], "host", &ctx, &dev, &s);
      TpkBuffer *b;
      CHECK(tpk_buffer_create(dev, TPK_F32, 1, (int64_t[]){N}, &b));
      CHECK(tpk_buffer_write(b, x, sizeof x));
      TpkBuffer *r = op(s, "pow.Tensor_Scalar", 2, (TpkArg[]){A(b), tpk_arg_float(k ? -0.5 : 3.0)});
      CHECK(tpk_buffer_read(r, y, sizeof y));
      for (int i = 0; i < N; i++) {
        float want = k ? 1.0f / sqrtf(x[i]) : x[i] * x[i] * x[i];
        if (y[i] != want) fail_msg("mode %d: pow(%a, %s) = %a, want %a", (int)modes[m], (double)x[i], k ? "-0.5" : "3", (double)y[i], (double)want);
      }
      close_stream(ctx, s, BUFFERS(r, b));
    }
}

static void test_mode_from_the_environment(void **state) {
  (void)state;
  TpkContext *ctx;
  setenv("TPK_EAGER", "fused", 1);
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_context_eager_mode(ctx), TPK_EAGER_FUSED);
  tpk_context_destroy(ctx);
  setenv("TPK_EAGER", "lazy", 1);
  assert_int_equal(tpk_context_create(&ctx), TPK_ERR_INVALID);
  assert_string_equal(tpk_last_error(), "TPK_EAGER=lazy: expected debug, strict or fused");
  unsetenv("TPK_EAGER");
  assert_int_equal(tpk_context_create(&ctx), TPK_OK);
  assert_int_equal(tpk_context_eager_mode(ctx), TPK_EAGER_STRICT);
  assert_string_equal(tpk_eager_mode_name(TPK_EAGER_DEBUG), "debug");
  tpk_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_modes_agree),
      cmocka_unit_test(test_the_memo_keeps_ops_whose_slots_collide),
      cmocka_unit_test(test_pow_special_exponents),
      cmocka_unit_test(test_modes_on_a_simulated_chip),
      cmocka_unit_test(test_sequence_lengths_compile_once),
      cmocka_unit_test(test_coincident_lengths_compile_nothing),
      cmocka_unit_test(test_a_length_equal_to_a_constant_size_compiles_nothing),
      cmocka_unit_test(test_debug_errors_name_the_op),
      cmocka_unit_test(test_errors_at_the_next_sync),
      cmocka_unit_test(test_strict_errors_inline_and_queued),
      cmocka_unit_test(test_ops_seen_before),
      cmocka_unit_test(test_a_window_seen_before),
      cmocka_unit_test(test_pending_buffers_settle),
      cmocka_unit_test(test_address_of_a_pending_buffer),
      cmocka_unit_test(test_fused_outputs_take_memory_when_computed),
      cmocka_unit_test(test_deferred_bytes_reached_from_outside),
      cmocka_unit_test(test_lifetimes),
      cmocka_unit_test(test_two_streams_on_two_threads),
      cmocka_unit_test(test_kernel_calls),
      cmocka_unit_test(test_indices_are_not_sizes),
      cmocka_unit_test(test_a_window_of_many_buffers),
      cmocka_unit_test(test_a_window_of_many_ops_and_few_parameters),
      cmocka_unit_test(test_the_observer_hears_every_launch),
      cmocka_unit_test(test_mode_from_the_environment),
  };
  return test_run_tests(tests);
}
