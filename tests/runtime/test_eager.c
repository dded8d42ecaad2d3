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
  TpkBuffer *drop[] = {x, b, c, t, u, e, f, tt, c3};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) tpk_buffer_destroy(drop[i]);
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
  TpkBuffer *drop[] = {a, b, sum, prod, diff, eq, gt};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) tpk_buffer_destroy(drop[i]);
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
  TpkBuffer *drop[] = {x, w, b, g, h, a};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) tpk_buffer_destroy(drop[i]);
  return 5;
}

static const struct {
  const char *name;
  Stream run;
} CORPUS[] = {
    {"views_and_broadcasts", views_and_broadcasts},
    {"integer_ops", integer_ops},
    {"reductions", reductions},
    {"mlp_layer", mlp_layer},
};

/* The bytes of a stream's outputs, read (which syncs). */
typedef struct Outputs {
  int n;
  TpkDType dtype[MAX_OUT];
  size_t bytes[MAX_OUT];
  void *data[MAX_OUT];
} Outputs;

static void run_corpus(TpkEagerMode mode, int which, int64_t S, Outputs *o) {
  TpkContext *ctx = context(mode);
  TpkDevice *dev;
  CHECK(tpk_device_open(ctx, "host", &dev));
  TpkStream *s;
  CHECK(tpk_stream_create(dev, &s));
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
      for (int mode = 0; mode < 3; mode++) run_corpus((TpkEagerMode)mode, which, S, &o[mode]);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_modes_agree),
  };
  return test_run_tests(tests);
}
