/*
 * test_fuse_run.c — graphs fused by lower/fuse.c compute what the graph
 * computes, at several sizes, from code compiled once.
 *
 * Each graph (IR text, as ir/graph.h's builder makes it) is fused twice:
 * TPK_FUSE_NONE (one cluster per op: the reference, run op by op by the
 * reference interpreter on the clusters as built) and TPK_FUSE_ALL. The
 * fused clusters are lowered ONCE, with their shape symbols symbolic (code
 * for every size, as the runtime compiles clusters), for a target with
 * small tiles so that blocks are many and the last one ragged, and two
 * cores as the host has (rows of a dot halved, stores without rows made by
 * a grid's first instance: lower/tile.c); then, at
 * three sizes each, the driver is executed here (calls in order, reshape
 * views, return) with every kernel run by
 *   - the reference interpreter on the lowered (tiled) kernels,
 *   - the host backend: emitted C compiled by the JIT (tcc) once per kernel,
 *   - the host again with the grid shared among three parts, as the
 *     runtime's threads share it.
 * Outputs are compared with the reference's within the usual tolerance
 * (sums run in other orders), and the JIT's compile count is checked: one
 * per kernel, whatever the sizes. Every cluster, of both policies, is also
 * timed on a simulated v5e (bound to a size, lowered for the chip, as a
 * launch on sim:v5e does). The graphs are twelve written here (the patterns
 * fusion is for, a training step among them) and 120 random ones
 * (TPK_RANDOM_GRAPHS=n for more, TPK_SHOW_GRAPH=k prints graph k).
 */
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/host.h"
#include "host/jit.h"
#include "interp/interp.h"
#include "lower/lower.h"
#include "sim/sim.h"

/* ---- the graphs ------------------------------------------------------------------ */

typedef struct Graph {
  const char *name; /* the func */
  const char *text;
  int64_t sizes[3]; /* every shape symbol of the graph takes each in turn */
  int64_t int_range; /* integer inputs are drawn from [0, int_range) */
  int fused_calls;   /* the calls of the driver TPK_FUSE_ALL makes, when the graph says (0: any) */
} Graph;

/* The graph being checked, named in every failure ("random graph 17"). */
static char current[64];
#define FAIL(fmt, ...) fail_msg("%s: " fmt, current, __VA_ARGS__)

static const Graph GRAPHS[] = {
    /* a two-layer MLP block: x @ W1 + b1, GELU (erf), @ W2, residual; h is a
     * second output (saved for a backward) */
    {"mlp",
     "func @mlp(%x: f32[B,16], %w1: f32[16,24], %b1: f32[24], %w2: f32[24,16]) -> (f32[B,16], f32[B,24]) {\n"
     "  %h0 = dot %x, %w1 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,24]\n"
     "  %bb = broadcast %b1 : f32[B,24]\n"
     "  %h = add %h0, %bb : f32[B,24]\n"
     "  %c = const {value=0.7071067811865476} : f32\n"
     "  %cb = broadcast %c : f32[B,24]\n"
     "  %hs = mul %h, %cb : f32[B,24]\n"
     "  %e = erf %hs : f32[B,24]\n"
     "  %one = const {value=1.0} : f32\n"
     "  %oneb = broadcast %one : f32[B,24]\n"
     "  %e1 = add %e, %oneb : f32[B,24]\n"
     "  %half = const {value=0.5} : f32\n"
     "  %halfb = broadcast %half : f32[B,24]\n"
     "  %g0 = mul %h, %e1 : f32[B,24]\n"
     "  %g = mul %g0, %halfb : f32[B,24]\n"
     "  %y0 = dot %g, %w2 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,16]\n"
     "  %y = add %y0, %x : f32[B,16]\n"
     "  return %y, %h\n"
     "}\n",
     {3, 29, 130}, 0},
    /* softmax and log-softmax over the last axis, both sizes symbolic */
    {"softmax",
     "func @softmax(%x: f32[M,N]) -> (f32[M,N], f32[M,N]) {\n"
     "  %m = reduce %x {kind=\"max\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %mb = broadcast %m : f32[M,N]\n"
     "  %d = sub %x, %mb : f32[M,N]\n"
     "  %e = exp %d : f32[M,N]\n"
     "  %s = reduce %e {kind=\"sum\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %sb = broadcast %s : f32[M,N]\n"
     "  %p = div %e, %sb : f32[M,N]\n"
     "  %ls = log %s : f32[M,1]\n"
     "  %lsb = broadcast %ls : f32[M,N]\n"
     "  %lp = sub %d, %lsb : f32[M,N]\n"
     "  return %p, %lp\n"
     "}\n",
     {2, 33, 70}, 0},
    /* layernorm forward, and its backward: dx by rows, the weight and bias
     * gradients reduced over the rows */
    {"layernorm",
     "func @layernorm(%x: f32[M,32], %w: f32[32], %b: f32[32], %dy: f32[M,32]) -> (f32[M,32], f32[M,32], f32[32], f32[32]) {\n"
     "  %mean = reduce %x {kind=\"mean\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %meanb = broadcast %mean : f32[M,32]\n"
     "  %xc = sub %x, %meanb : f32[M,32]\n"
     "  %sq = mul %xc, %xc : f32[M,32]\n"
     "  %var = reduce %sq {kind=\"mean\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %eps = const {value=1e-5} : f32\n"
     "  %epsb = broadcast %eps : f32[M,1]\n"
     "  %ve = add %var, %epsb : f32[M,1]\n"
     "  %rstd = rsqrt %ve : f32[M,1]\n"
     "  %rstdb = broadcast %rstd : f32[M,32]\n"
     "  %xhat = mul %xc, %rstdb : f32[M,32]\n"
     "  %wb = broadcast %w : f32[M,32]\n"
     "  %bb = broadcast %b : f32[M,32]\n"
     "  %xw = mul %xhat, %wb : f32[M,32]\n"
     "  %y = add %xw, %bb : f32[M,32]\n"
     "  %dxhat = mul %dy, %wb : f32[M,32]\n"
     "  %dyx = mul %dy, %xhat : f32[M,32]\n"
     "  %dw = reduce %dyx {kind=\"sum\", axes=[0], keepdims=false} : f32[32]\n"
     "  %db = reduce %dy {kind=\"sum\", axes=[0], keepdims=false} : f32[32]\n"
     "  %a = reduce %dxhat {kind=\"mean\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %dxx = mul %dxhat, %xhat : f32[M,32]\n"
     "  %c = reduce %dxx {kind=\"mean\", axes=[1], keepdims=true} : f32[M,1]\n"
     "  %ab = broadcast %a : f32[M,32]\n"
     "  %cb = broadcast %c : f32[M,32]\n"
     "  %t1 = sub %dxhat, %ab : f32[M,32]\n"
     "  %t2 = mul %xhat, %cb : f32[M,32]\n"
     "  %t3 = sub %t1, %t2 : f32[M,32]\n"
     "  %dx = mul %t3, %rstdb : f32[M,32]\n"
     "  return %y, %dx, %dw, %db\n"
     "}\n",
     {1, 20, 75}, 0},
    /* views: a reshape of an input (a driver view), an output that is a
     * transpose (materialised) and one that is a reshape of a result, a
     * select of an input (a load pattern), a transposed weight (folded into
     * the dot) and an expand */
    {"views",
     "func @views(%x: f32[B,S,8], %w: f32[8,8]) -> (f32[B,8,S], f32[B*S,8], f32[S,8], f32[B,S,8], f32[B,S,8]) {\n"
     "  %r = reshape %x : f32[B*S,8]\n"
     "  %p = dot %r, %w {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B*S,8]\n"
     "  %t = exp %p : f32[B*S,8]\n"
     "  %t3 = reshape %t : f32[B,S,8]\n"
     "  %tt = transpose %t3 {perm=[0, 2, 1]} : f32[B,8,S]\n"
     "  %zero = const {value=0} : i32\n"
     "  %first = slice %x, %zero {index=\"s::\"} : f32[S,8]\n"
     "  %wt = transpose %w {perm=[1, 0]} : f32[8,8]\n"
     "  %q = dot %first, %wt {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[S,8]\n"
     "  %xb = broadcast %q : f32[B,S,8]\n"
     "  %z = add %x, %xb : f32[B,S,8]\n"
     "  return %tt, %t, %q, %z, %t3\n"
     "}\n",
     {1, 6, 23}, 0},
    /* scalars: a full reduction, a rank-0 input, a rank-0 output broadcast back */
    {"scalars",
     "func @scalars(%x: f32[N,4], %scale: f32) -> (f32, f32[N,4]) {\n"
     "  %sq = mul %x, %x : f32[N,4]\n"
     "  %ss = reduce %sq {kind=\"mean\", axes=[0, 1], keepdims=false} : f32\n"
     "  %loss = mul %ss, %scale : f32\n"
     "  %lb = broadcast %loss : f32[N,4]\n"
     "  %y = mul %x, %lb : f32[N,4]\n"
     "  return %loss, %y\n"
     "}\n",
     {1, 17, 200}, 0},
    /* a call of a kernel between clusters, on a reshape of a result */
    {"calls",
     "kernel @twice(%a: ref<f32[R,C]>, %o: out ref<f32[R,C]>) {\n"
     "  %v = load %a {index=\"::\"} : f32[R,C]\n"
     "  %d = add %v, %v : f32[R,C]\n"
     "  store %o, %d {index=\"::\", mode=\"set\"}\n"
     "}\n"
     "func @calls(%x: f32[N,8]) -> (f32[N,8]) {\n"
     "  %a = exp %x : f32[N,8]\n"
     "  %r = reshape %a : f32[N*2,4]\n"
     "  %b = call %r {callee=\"twice\"} : f32[N*2,4]\n"
     "  %c = reshape %b : f32[N,8]\n"
     "  %d = neg %c : f32[N,8]\n"
     "  %e = mul %d, %a : f32[N,8]\n"
     "  return %e\n"
     "}\n",
     {1, 9, 64}, 0},
    /* gradients: x^T @ dy (by x's columns), a bias gradient, a total */
    {"grads",
     "func @grads(%x: f32[B,16], %dy: f32[B,8]) -> (f32[16,8], f32[8], f32) {\n"
     "  %xt = transpose %x {perm=[1, 0]} : f32[16,B]\n"
     "  %dw = dot %xt, %dy {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[16,8]\n"
     "  %db = reduce %dy {kind=\"sum\", axes=[0], keepdims=false} : f32[8]\n"
     "  %tot = reduce %dy {kind=\"sum\", axes=[0, 1], keepdims=false} : f32\n"
     "  return %dw, %db, %tot\n"
     "}\n",
     {2, 31, 100}, 0},
    /* integers: an embedding gather, positions from an iota, index arithmetic */
    {"embed",
     "func @embed(%ids: i32[T], %table: f32[16,8], %pos: f32[50,8]) -> (f32[T,8], i32[T]) {\n"
     "  %e = gather %table, %ids {axis=0} : f32[T,8]\n"
     "  %i = iota {axis=0} : i32[T]\n"
     "  %pe = gather %pos, %i {axis=0} : f32[T,8]\n"
     "  %y = add %e, %pe : f32[T,8]\n"
     "  %two = const {value=2} : i32\n"
     "  %twob = broadcast %two : i32[T]\n"
     "  %j = mul %ids, %twob : i32[T]\n"
     "  %k = add %j, %i : i32[T]\n"
     "  return %y, %k\n"
     "}\n",
     {1, 13, 50}, 16},
    /* attention for a batch of heads: q @ k^T, softmax, @ v */
    {"attention",
     "func @attention(%q: f32[H,S,8], %k: f32[H,S,8], %v: f32[H,S,8]) -> (f32[H,S,8]) {\n"
     "  %kt = transpose %k {perm=[0, 2, 1]} : f32[H,8,S]\n"
     "  %s = dot %q, %kt {lhs_contract=[2], rhs_contract=[1], lhs_batch=[0], rhs_batch=[0]} : f32[H,S,S]\n"
     "  %m = reduce %s {kind=\"max\", axes=[2], keepdims=true} : f32[H,S,1]\n"
     "  %mb = broadcast %m : f32[H,S,S]\n"
     "  %d = sub %s, %mb : f32[H,S,S]\n"
     "  %e = exp %d : f32[H,S,S]\n"
     "  %z = reduce %e {kind=\"sum\", axes=[2], keepdims=true} : f32[H,S,1]\n"
     "  %zb = broadcast %z : f32[H,S,S]\n"
     "  %p = div %e, %zb : f32[H,S,S]\n"
     "  %o = dot %p, %v {lhs_contract=[2], rhs_contract=[1], lhs_batch=[0], rhs_batch=[0]} : f32[H,S,8]\n"
     "  return %o\n"
     "}\n",
     {1, 5, 19}, 0},
    /* reductions over every axis of one input, and pairs of them */
    {"axes",
     "func @axes(%x: f32[B,S,4]) -> (f32[S,4], f32[B,4], f32[B,S], f32[S], f32) {\n"
     "  %a = reduce %x {kind=\"sum\", axes=[0], keepdims=false} : f32[S,4]\n"
     "  %b = reduce %x {kind=\"max\", axes=[1], keepdims=false} : f32[B,4]\n"
     "  %c = reduce %x {kind=\"mean\", axes=[2], keepdims=false} : f32[B,S]\n"
     "  %d = reduce %x {kind=\"min\", axes=[0, 2], keepdims=false} : f32[S]\n"
     "  %e = reduce %x {kind=\"sum\", axes=[0, 1, 2], keepdims=false} : f32\n"
     "  return %a, %b, %c, %d, %e\n"
     "}\n",
     {1, 7, 40}, 0},
    /* mixed precision: bf16 operands, an f32 product, a bf16 result */
    {"mixed",
     "func @mixed(%x: bf16[M,16], %w: bf16[16,8], %b: f32[8]) -> (bf16[M,8]) {\n"
     "  %p = dot %x, %w {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[M,8]\n"
     "  %bb = broadcast %b : f32[M,8]\n"
     "  %s = add %p, %bb : f32[M,8]\n"
     "  %zero = const {value=0.0} : f32\n"
     "  %zb = broadcast %zero : f32[M,8]\n"
     "  %r = max %s, %zb : f32[M,8]\n"
     "  %y = convert %r : bf16[M,8]\n"
     "  return %y\n"
     "}\n",
     {2, 17, 90}, 0},
    /* a training step: a linear layer, log-softmax cross-entropy (a one-hot
     * of the targets from an iota), its backward, AdamW on the weight */
    {"train_step",
     "func @train_step(%x: f32[B,32], %w: f32[32,16], %b: f32[16], %t: i32[B], %m: f32[32,16], %v: f32[32,16], %lr: f32) -> (f32, f32[32,16], f32[32,16], f32[32,16], f32[16]) {\n"
     "  %z0 = dot %x, %w {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[B,16]\n"
     "  %bb = broadcast %b : f32[B,16]\n"
     "  %z = add %z0, %bb : f32[B,16]\n"
     "  %mx = reduce %z {kind=\"max\", axes=[1], keepdims=true} : f32[B,1]\n"
     "  %mxb = broadcast %mx : f32[B,16]\n"
     "  %d = sub %z, %mxb : f32[B,16]\n"
     "  %e = exp %d : f32[B,16]\n"
     "  %s = reduce %e {kind=\"sum\", axes=[1], keepdims=true} : f32[B,1]\n"
     "  %ls = log %s : f32[B,1]\n"
     "  %lsb = broadcast %ls : f32[B,16]\n"
     "  %logp = sub %d, %lsb : f32[B,16]\n"
     "  %cols = iota {axis=1} : i32[B,16]\n"
     "  %tr = reshape %t : i32[B,1]\n"
     "  %tb = broadcast %tr : i32[B,16]\n"
     "  %hit = eq %cols, %tb : bool[B,16]\n"
     "  %one = const {value=1.0} : f32\n"
     "  %zero = const {value=0.0} : f32\n"
     "  %oneb = broadcast %one : f32[B,16]\n"
     "  %zerob = broadcast %zero : f32[B,16]\n"
     "  %oh = select %hit, %oneb, %zerob : f32[B,16]\n"
     "  %pl = mul %oh, %logp : f32[B,16]\n"
     "  %tot = reduce %pl {kind=\"sum\", axes=[0, 1], keepdims=false} : f32\n"
     "  %neg = neg %tot : f32\n"
     "  %bs = sym {name=\"B\"} : i32\n"
     "  %bf = convert %bs : f32\n"
     "  %loss = div %neg, %bf : f32\n"
     "  %sb = broadcast %s : f32[B,16]\n"
     "  %p = div %e, %sb : f32[B,16]\n"
     "  %dz0 = sub %p, %oh : f32[B,16]\n"
     "  %bfb = broadcast %bf : f32[B,16]\n"
     "  %dz = div %dz0, %bfb : f32[B,16]\n"
     "  %dw = dot %x, %dz {lhs_contract=[0], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[32,16]\n"
     "  %db = reduce %dz {kind=\"sum\", axes=[0], keepdims=false} : f32[16]\n"
     "  %b1 = const {value=0.9} : f32\n"
     "  %b1b = broadcast %b1 : f32[32,16]\n"
     "  %c1 = const {value=0.1} : f32\n"
     "  %c1b = broadcast %c1 : f32[32,16]\n"
     "  %m1a = mul %m, %b1b : f32[32,16]\n"
     "  %m1b = mul %dw, %c1b : f32[32,16]\n"
     "  %m1 = add %m1a, %m1b : f32[32,16]\n"
     "  %b2 = const {value=0.999} : f32\n"
     "  %b2b = broadcast %b2 : f32[32,16]\n"
     "  %c2 = const {value=0.001} : f32\n"
     "  %c2b = broadcast %c2 : f32[32,16]\n"
     "  %g2 = mul %dw, %dw : f32[32,16]\n"
     "  %v1a = mul %v, %b2b : f32[32,16]\n"
     "  %v1b = mul %g2, %c2b : f32[32,16]\n"
     "  %v1 = add %v1a, %v1b : f32[32,16]\n"
     "  %sq = sqrt %v1 : f32[32,16]\n"
     "  %eps = const {value=1e-8} : f32\n"
     "  %epsb = broadcast %eps : f32[32,16]\n"
     "  %den = add %sq, %epsb : f32[32,16]\n"
     "  %upd = div %m1, %den : f32[32,16]\n"
     "  %lrb = broadcast %lr : f32[32,16]\n"
     "  %step = mul %upd, %lrb : f32[32,16]\n"
     "  %w1 = sub %w, %step : f32[32,16]\n"
     "  return %loss, %w1, %m1, %v1, %db\n"
     "}\n",
     {1, 12, 70}, 16},
    /* a tiled matmul kernel (a K loop accumulating, one store per block),
     * then + bias and GELU (erf): fused, one kernel, the epilogue at the
     * store; blocks of 16 over B, H and K = 20, so every size is ragged */
    {"matmul_gelu",
     "kernel @mm(%a: ref<f32[M,K]>, %b: ref<f32[K,N]>, %c: out ref<f32[M,N]>) tune{BM in [16, 8], BN in [16, 8], BK in [16, 8]} {\n"
     "  %0 = sym {name=\"M\"} : i32\n"
     "  %1 = const {value=0} : i32\n"
     "  %2 = sym {name=\"BM\"} : i32\n"
     "  %3 = cdiv %0, %2 : i32\n"
     "  %4 = sym {name=\"N\"} : i32\n"
     "  %5 = sym {name=\"BN\"} : i32\n"
     "  %6 = cdiv %4, %5 : i32\n"
     "  grid %1, %3, %1, %6 {\n"
     "  ^(%i: tile<BM>, %j: tile<BN>):\n"
     "    %acc = const {value=0.0} : f32[BM,BN]\n"
     "    %7 = sym {name=\"K\"} : i32\n"
     "    %8 = sym {name=\"BK\"} : i32\n"
     "    %9 = cdiv %7, %8 : i32\n"
     "    %acc.1 = for %1, %9, %acc : f32[BM,BN] {\n"
     "    ^(%k: tile<BK>, %acc.2: f32[BM,BN]):\n"
     "      %10 = load %a, %i, %k {index=\"tt\"} : f32[BM,BK]\n"
     "      %11 = load %b, %k, %j {index=\"tt\"} : f32[BK,BN]\n"
     "      %12 = dot %10, %11 {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[BM,BN]\n"
     "      %acc.3 = add %acc.2, %12 : f32[BM,BN]\n"
     "      yield %acc.3\n"
     "    }\n"
     "    store %c, %i, %j, %acc.1 {index=\"tt\", mode=\"set\"}\n"
     "  }\n"
     "}\n"
     "func @matmul_gelu(%x: f32[B,20], %w: f32[20,H], %bias: f32[H]) -> (f32[B,H]) {\n"
     "  %y = call %x, %w {callee=\"mm\"} : f32[B,H]\n"
     "  %bb = broadcast %bias : f32[B,H]\n"
     "  %h = add %y, %bb : f32[B,H]\n"
     "  %c = const {value=0.7071067811865476} : f32\n"
     "  %cb = broadcast %c : f32[B,H]\n"
     "  %hs = mul %h, %cb : f32[B,H]\n"
     "  %e = erf %hs : f32[B,H]\n"
     "  %one = const {value=1.0} : f32\n"
     "  %oneb = broadcast %one : f32[B,H]\n"
     "  %e1 = add %e, %oneb : f32[B,H]\n"
     "  %half = const {value=0.5} : f32\n"
     "  %halfb = broadcast %half : f32[B,H]\n"
     "  %g0 = mul %h, %e1 : f32[B,H]\n"
     "  %g = mul %g0, %halfb : f32[B,H]\n"
     "  return %g\n"
     "}\n",
     {5, 29, 70}, 0, 1},
    /* epilogues at stores of other patterns: a row at a time ("st") with a
     * bias row, a row scale [B,1], a residual, a scalar input, a cast to
     * bf16; two range stores per row ("tr") with a residual; a prologue, a
     * cast to bf16 folded into a kernel's ragged loads */
    {"call_patterns",
     "kernel @rowwise(%x: ref<f32[M,N]>, %y: out ref<f32[M,N]>) {\n"
     "  %0 = sym {name=\"M\"} : i32\n"
     "  %1 = sym {name=\"N\"} : i32\n"
     "  %2 = const {value=0} : i32\n"
     "  %3 = const {value=16} : i32\n"
     "  %4 = cdiv %1, %3 : i32\n"
     "  grid %2, %0, %2, %4 {\n"
     "  ^(%r: i32, %j: tile<16>):\n"
     "    %5 = load %x, %r, %j {index=\"st\"} : f32[16]\n"
     "    %6 = tanh %5 : f32[16]\n"
     "    store %y, %r, %j, %6 {index=\"st\", mode=\"set\"}\n"
     "  }\n"
     "}\n"
     "kernel @halves(%x: ref<f32[M,16]>, %y: out ref<f32[M,16]>) {\n"
     "  %0 = sym {name=\"M\"} : i32\n"
     "  %1 = const {value=0} : i32\n"
     "  %2 = const {value=8} : i32\n"
     "  %3 = cdiv %0, %2 : i32\n"
     "  grid %1, %3 {\n"
     "  ^(%i: tile<8>):\n"
     "    %4 = load %x, %i, %1 {index=\"tr\"} : f32[8,8]\n"
     "    %5 = load %x, %i, %2 {index=\"tr\"} : f32[8,8]\n"
     "    store %y, %i, %1, %5 {index=\"tr\", mode=\"set\"}\n"
     "    store %y, %i, %2, %4 {index=\"tr\", mode=\"set\"}\n"
     "  }\n"
     "}\n"
     "kernel @bf16rows(%x: ref<bf16[M,N]>, %y: out ref<f32[M,N]>) {\n"
     "  %0 = sym {name=\"M\"} : i32\n"
     "  %1 = const {value=0} : i32\n"
     "  %2 = const {value=8} : i32\n"
     "  %3 = cdiv %0, %2 : i32\n"
     "  grid %1, %3 {\n"
     "  ^(%i: tile<8>):\n"
     "    %4 = load %x, %i {index=\"t:\"} : bf16[8,N]\n"
     "    %5 = convert %4 : f32[8,N]\n"
     "    %6 = exp %5 : f32[8,N]\n"
     "    store %y, %i, %6 {index=\"t:\", mode=\"set\"}\n"
     "  }\n"
     "}\n"
     "func @call_patterns(%x: f32[B,H], %bias: f32[H], %scale: f32[B,1], %res: f32[B,H], %s: f32, %z: f32[B,16]) -> (bf16[B,H], f32[B,16], f32[B,H]) {\n"
     "  %y = call %x {callee=\"rowwise\"} : f32[B,H]\n"
     "  %bb = broadcast %bias : f32[B,H]\n"
     "  %a = add %y, %bb : f32[B,H]\n"
     "  %sb = broadcast %scale : f32[B,H]\n"
     "  %b = mul %a, %sb : f32[B,H]\n"
     "  %c = add %b, %res : f32[B,H]\n"
     "  %sc = broadcast %s : f32[B,H]\n"
     "  %d = mul %c, %sc : f32[B,H]\n"
     "  %e = convert %d : bf16[B,H]\n"
     "  %u = call %z {callee=\"halves\"} : f32[B,16]\n"
     "  %v = sub %u, %z : f32[B,16]\n"
     "  %rb = convert %res : bf16[B,H]\n"
     "  %q = call %rb {callee=\"bf16rows\"} : f32[B,H]\n"
     "  return %e, %v, %q\n"
     "}\n",
     {3, 17, 40}, 0, 3},
};

/* ---- tensors and symbols ----------------------------------------------------------- */

typedef struct Tensor {
  TpkDType dt;
  int rank;
  int64_t dims[TPK_MAX_RANK];
  int64_t n;
  void *data;
  bool owns; /* a reshape view shares its source's data */
} Tensor;

typedef struct Syms {
  int n;
  const char *name[16];
  int64_t value[16];
} Syms;

static bool lookup(void *ctx, const char *sym, int64_t *value) {
  const Syms *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], sym) == 0) return *value = s->value[i], true;
  return false;
}

static void bind(Syms *s, const char *name, int64_t v) {
  int64_t have;
  if (lookup(s, name, &have)) {
    if (have != v) FAIL("symbol %s is %lld and %lld", name, (long long)have, (long long)v);
    return;
  }
  assert_true(s->n < 16);
  s->name[s->n] = name;
  s->value[s->n++] = v;
}

static Tensor *tensor_new(const TpkType *t, const Syms *s) {
  Tensor *x = calloc(1, sizeof *x);
  assert_non_null(x);
  x->dt = t->dtype;
  x->rank = t->rank;
  x->n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (!tpk_dim_eval(t->dims[i], lookup, (void *)s, &x->dims[i])) FAIL("%s", "a size the symbols do not give");
    x->n *= x->dims[i];
  }
  x->data = calloc((size_t)(x->n ? x->n : 1), tpk_dtype_size(t->dtype));
  assert_non_null(x->data);
  x->owns = true;
  return x;
}

static void tensor_free(Tensor *x) {
  if (x->owns) free(x->data);
  free(x);
}

static uint64_t next_random(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

static void fill(Tensor *x, uint64_t *state, int64_t int_range) {
  for (int64_t i = 0; i < x->n; i++) {
    uint64_t r = next_random(state);
    float f = (float)((double)(r % 20001) / 10000.0 - 1.0);
    if (x->dt == TPK_F32) ((float *)x->data)[i] = f;
    else if (x->dt == TPK_BF16) tpk_prims()->convert(TPK_PRIM_F32, TPK_PRIM_BF16, &f, (uint16_t *)x->data + i, 1);
    else if (x->dt == TPK_I32) ((int32_t *)x->data)[i] = (int32_t)(r % (uint64_t)(int_range > 0 ? int_range : 7));
    else FAIL("no random fill for %s", tpk_dtype_name(x->dt));
  }
}

/* ---- compiled kernels ------------------------------------------------------------- */

typedef enum Backend { REFERENCE, INTERP_LOWERED, HOST, HOST_PARTS } Backend;
enum { NBACKENDS = 4 };
static const char *const BACKEND_NAMES[NBACKENDS] = {"reference", "interpreter on the lowered clusters", "host",
                                                     "host, the grid in 3 parts"};

typedef struct Compiled {
  const TpkFunc *src;
  const char *name;
  TpkModule *module; /* the kernel bound with its sizes symbolic, then lowered */
  TpkFunc *k;
  TpkPlan plan;
  TpkCode *code;
} Compiled;

typedef struct Fixture {
  TpkModule *reference, *fused;
  TpkJit *jit;
  Compiled compiled[64];
  int ncompiled;
  int jit_compiles;
  int tcc_before; /* the JIT's count when the graph started */
} Fixture;

/* Small tiles, so that the sizes above make several blocks. */
static const TpkTarget SMALL = {.name = "small", .vmem_bytes = (int64_t)128 << 20, .tile_bytes = 512, .cores = 2};

static Compiled *compiled(Fixture *fx, const TpkFunc *f) {
  for (int i = 0; i < fx->ncompiled; i++)
    if (fx->compiled[i].src == f) return &fx->compiled[i];
  assert_true(fx->ncompiled < 64);
  Compiled *c = &fx->compiled[fx->ncompiled++];
  c->src = f;
  c->name = f->name;
  c->module = tpk_module_new(f->name);
  assert_non_null(c->module);
  TpkError err = {0};
  if (tpk_bind(c->module, f, NULL, 0, &c->k, &err) != TPK_OK) FAIL("bind %s: %s", f->name, err.message);
  if (tpk_lower(c->k, &SMALL, &c->plan, &err) != TPK_OK) FAIL("lower %s: %s", f->name, err.message);
  TpkStr src = {0};
  char entry[160];
  snprintf(entry, sizeof entry, "k_%d", fx->ncompiled);
  if (tpk_emit_c(c->k, &c->plan, entry, NULL, 0, &src, &err) != TPK_OK) FAIL("emit %s: %s", f->name, err.message);
  if (tpk_jit_compile(fx->jit, src.data, entry, &c->code, &err) != TPK_OK) FAIL("compile %s: %s", f->name, err.message);
  fx->jit_compiles++;
  tpk_str_free(&src);
  return c;
}

/* The code's own count (<entry>_workspace), as the runtime sizes a launch:
 * the emitter may add to the plan's storage (right operands packed once). */
static int64_t workspace(const Compiled *c, const int64_t *syms) {
  TpkWorkspaceFn ws = tpk_code_workspace(c->code);
  if (!ws) FAIL("%s: the code has no workspace function", c->name);
  return ws(syms);
}

/* Run kernel k (of the module the driver is in) on args, one pointer per
 * parameter; its symbols from its arrays (a called kernel names its own: a
 * clone with an epilogue keeps them), then the graph's (a cluster's
 * symbol no array carries). */
static void run_kernel(Fixture *fx, Backend be, const TpkFunc *k, void *const *args, Tensor *const *tensors,
                       const Syms *graph) {
  Syms s = {0};
  for (int i = 0; i < k->nparams; i++) {
    const TpkType *t = k->params[i].value->type;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d]->kind == TPK_DIM_SYM) bind(&s, t->dims[d]->sym, tensors[i]->dims[d]);
  }
  for (int i = 0; i < graph->n; i++) {
    int64_t have;
    if (!lookup(&s, graph->name[i], &have)) bind(&s, graph->name[i], graph->value[i]);
  }
  const char *names[16];
  int n = tpk_func_symbols(k, names, 16);
  int64_t syms[16];
  for (int i = 0; i < n; i++)
    if (!lookup(&s, names[i], &syms[i])) FAIL("%s: symbol %s unbound", k->name, names[i]);
  TpkError err = {0};
  if (be == REFERENCE) { /* the kernel as the graph has it, its tunables at their defaults */
    TpkModule *bound = k->ntunes ? tpk_module_new(k->name) : NULL;
    const TpkFunc *run = k;
    TpkFunc *b = NULL;
    if (bound && tpk_bind(bound, k, NULL, 0, &b, &err) != TPK_OK) FAIL("bind %s: %s", k->name, err.message);
    if (b) run = b;
    TpkStatus st = tpk_interp_run(run, args, syms, &err);
    if (bound) tpk_module_free(bound);
    if (st != TPK_OK) FAIL("interpreter, %s: %s", k->name, err.message);
    return;
  }
  Compiled *c = compiled(fx, k);
  if (be == INTERP_LOWERED) {
    if (tpk_interp_run(c->k, args, syms, &err) != TPK_OK) FAIL("interpreter, lowered %s: %s", k->name, err.message);
    return;
  }
  /* as the runtime shares a grid among threads: each part its own
   * workspace and table, here one after another */
  int parts = be == HOST_PARTS ? 3 : 1;
  int64_t ws = workspace(c, syms);
  for (int part = 0; part < parts; part++) {
    TpkPrims p = *tpk_prims();
    p.part = part;
    p.parts = parts;
    void *w = malloc((size_t)(ws > 0 ? ws : 1));
    assert_non_null(w);
    char msg[TPK_KERNEL_ERR_LEN] = "";
    int rc = tpk_code_entry(c->code)(&p, args, syms, w, msg);
    free(w);
    if (rc) FAIL("host, %s: %s", k->name, msg);
  }
}

/* Execute the driver func g (calls in order, reshape views, return) on
 * inputs; its results into out[]. Tensors it makes go to *made. */
static void run_driver(Fixture *fx, Backend be, const TpkFunc *g, Tensor **inputs, const Syms *syms, Tensor **out,
                       Tensor **made, int *nmade) {
  TpkPtrMap vals = {0};
  for (int i = 0; i < g->nparams; i++) assert_true(tpk_ptrmap_put(&vals, g->params[i].value, inputs[i]));
  for (const TpkOp *op = g->body->first; op; op = op->next) {
    void *p;
    if (op->opcode == TPK_OP_RESHAPE) {
      assert_true(tpk_ptrmap_get(&vals, op->in[0], &p));
      Tensor *x = tensor_new(op->out[0].type, syms), *src = p;
      assert_int_equal(x->n, src->n);
      free(x->data);
      x->data = src->data;
      x->owns = false;
      made[(*nmade)++] = x;
      assert_true(tpk_ptrmap_put(&vals, &op->out[0], x));
      continue;
    }
    if (op->opcode == TPK_OP_RETURN) {
      for (int i = 0; i < op->nin; i++) {
        assert_true(tpk_ptrmap_get(&vals, op->in[i], &p));
        out[i] = p;
      }
      continue;
    }
    if (op->opcode != TPK_OP_CALL) FAIL("'%s' in a driver", tpk_op_info(op->opcode)->name);
    const TpkFunc *k = tpk_module_find(g->module, tpk_op_str(op, "callee", ""));
    assert_non_null(k);
    assert_true(k->is_kernel);
    void *args[64];
    Tensor *tensors[64];
    int in = 0, res = 0;
    assert_true(k->nparams <= 64);
    for (int i = 0; i < k->nparams; i++) {
      Tensor *t;
      if (k->params[i].role == TPK_PARAM_OUT) {
        t = tensor_new(op->out[res].type, syms);
        made[(*nmade)++] = t;
        assert_true(tpk_ptrmap_put(&vals, &op->out[res++], t));
      } else {
        assert_int_not_equal(k->params[i].role, TPK_PARAM_INOUT);
        assert_true(tpk_ptrmap_get(&vals, op->in[in++], &p));
        t = p;
      }
      tensors[i] = t;
      args[i] = t->data;
    }
    run_kernel(fx, be, k, args, tensors, syms);
  }
  tpk_ptrmap_free(&vals);
}

static TpkModule *fused_module(const Graph *gr, TpkFusePolicy policy) {
  TpkError err = {0};
  TpkModule *m = tpk_ir_parse(gr->text, strlen(gr->text), gr->name, &err);
  if (!m) fail_msg("%s: %s", gr->name, err.message);
  TpkFunc *g = tpk_module_find(m, gr->name);
  assert_non_null(g);
  if (tpk_fuse(g, policy, &err) != TPK_OK) FAIL("fuse %s: %s", gr->name, err.message);
  return m;
}

static int setup(void **state) {
  Fixture *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  TpkJitOptions o = {.tier = TPK_TIER_TCC, .hot_calls = -1, .cache_dir = ""};
  TpkError err = {0};
  assert_int_equal(tpk_jit_create(&o, &fx->jit, &err), TPK_OK);
  *state = fx;
  return 0;
}

/* The graph's modules and compiled kernels go; the JIT stays. */
static void fixture_clear(Fixture *fx) {
  for (int i = 0; i < fx->ncompiled; i++) {
    tpk_plan_free(&fx->compiled[i].plan);
    tpk_module_free(fx->compiled[i].module);
  }
  fx->ncompiled = 0;
  fx->jit_compiles = 0;
  if (fx->reference) tpk_module_free(fx->reference);
  if (fx->fused) tpk_module_free(fx->fused);
  fx->reference = fx->fused = NULL;
}

static int teardown(void **state) {
  Fixture *fx = *state;
  fixture_clear(fx);
  if (fx->jit) tpk_jit_destroy(fx->jit);
  free(fx);
  return 0;
}

static void check_graph(void **state, const Graph *gr) {
  Fixture *fx = *state;
  if (strcmp(gr->name, "random") != 0) snprintf(current, sizeof current, "%s", gr->name);
  fx->tcc_before = tpk_jit_stats(fx->jit).tcc_compiles;
  fx->reference = fused_module(gr, TPK_FUSE_NONE);
  fx->fused = fused_module(gr, TPK_FUSE_ALL);
  const TpkFunc *ref = tpk_module_find(fx->reference, gr->name), *fused = tpk_module_find(fx->fused, gr->name);
  int kernels = 0; /* the driver's callees */
  for (int i = 0; i < fx->fused->nfuncs; i++) {
    const TpkFunc *k = fx->fused->funcs[i];
    bool called = false;
    for (const TpkOp *op = fused->body->first; op && !called; op = op->next)
      called = op->opcode == TPK_OP_CALL && strcmp(tpk_op_str(op, "callee", ""), k->name) == 0;
    kernels += called;
  }
  if (gr->fused_calls) {
    int calls = 0;
    for (const TpkOp *op = fused->body->first; op; op = op->next) calls += op->opcode == TPK_OP_CALL;
    if (calls != gr->fused_calls) FAIL("the fused driver makes %d calls, not %d", calls, gr->fused_calls);
  }
  for (int si = 0; si < 3; si++) {
    Syms syms = {0};
    const char *names[16];
    int n = tpk_func_symbols(ref, names, 16);
    for (int i = 0; i < n; i++) bind(&syms, names[i], gr->sizes[si]);
    Tensor *inputs[16], *made[NBACKENDS][256], *out[NBACKENDS][16];
    int nmade[NBACKENDS] = {0};
    uint64_t seed = 12345 + (uint64_t)si;
    assert_true(ref->nparams <= 16 && ref->nresults <= 16);
    for (int i = 0; i < ref->nparams; i++) {
      inputs[i] = tensor_new(ref->params[i].value->type, &syms);
      fill(inputs[i], &seed, gr->int_range);
    }
    for (int be = 0; be < NBACKENDS; be++)
      run_driver(fx, (Backend)be, be == REFERENCE ? ref : fused, inputs, &syms, out[be], made[be], &nmade[be]);
    for (int r = 0; r < ref->nresults; r++)
      for (int be = 1; be < NBACKENDS; be++) {
        char why[256];
        assert_int_equal(out[be][r]->n, out[0][r]->n);
        if (!test_outputs_close(out[0][r]->dt, out[be][r]->data, out[0][r]->data, out[0][r]->n, why, sizeof why))
          FAIL("at size %lld, result %d, %s: %s", (long long)gr->sizes[si], r, BACKEND_NAMES[be], why);
      }
    for (int i = 0; i < ref->nparams; i++) tensor_free(inputs[i]);
    for (int b = 0; b < NBACKENDS; b++)
      for (int i = 0; i < nmade[b]; i++) tensor_free(made[b][i]);
  }
  /* the simulator takes every cluster, bound to a size and lowered for its chip */
  const TpkChip *v5e = tpk_sim_chip_find("v5e");
  assert_non_null(v5e);
  TpkModule *mods[2] = {fx->reference, fx->fused};
  for (int mi = 0; mi < 2; mi++)
    for (int i = 0; i < mods[mi]->nfuncs; i++) {
      const TpkFunc *k = mods[mi]->funcs[i];
      if (!k->is_kernel || strncmp(k->name, gr->name, strlen(gr->name)) != 0) continue; /* a cluster "<g>.c<k>" */
      const char *names[16];
      int n = tpk_func_symbols(k, names, 16);
      TpkBinding binds[16];
      for (int j = 0; j < n; j++) binds[j] = (TpkBinding){names[j], gr->sizes[1]};
      TpkSimReport rep;
      TpkError err = {0};
      if (tpk_sim_time_kernel(k, binds, n, v5e, &rep, &err) != TPK_OK) FAIL("sim:v5e, %s: %s", k->name, err.message);
      assert_true(rep.seconds > 0 && rep.hbm_bytes > 0);
    }
  assert_int_equal(fx->jit_compiles, kernels); /* once each, for every size */
  TpkJitStats st = tpk_jit_stats(fx->jit);
  assert_int_equal(st.tcc_compiles - fx->tcc_before, kernels);
}

/* ---- random graphs ------------------------------------------------------------- */

/* Kinds of values in a random graph: D is 8, N the symbol. */
typedef enum Kind { ND, DN, DD, D1, N1, SC, FLAT, NKINDS } Kind;
static const char *const KIND_TYPE[NKINDS] = {"f32[N,8]", "f32[8,N]", "f32[8,8]", "f32[8]", "f32[N,1]", "f32", "f32[N*8]"};

typedef struct Gen {
  TpkStr text;
  uint64_t rng;
  int n;               /* values so far */
  Kind kind[256];
} Gen;

static int pick(Gen *g, Kind k) {
  int cand[256], n = 0;
  for (int i = 0; i < g->n; i++)
    if (g->kind[i] == k) cand[n++] = i;
  return n ? cand[next_random(&g->rng) % (uint64_t)n] : -1;
}

static int emit(Gen *g, Kind k, const char *fmt, ...) TPK_PRINTF(3, 4);
static int emit(Gen *g, Kind k, const char *fmt, ...) {
  tpk_str_printf(&g->text, "  %%v%d = ", g->n);
  va_list ap;
  va_start(ap, fmt);
  tpk_str_vprintf(&g->text, fmt, ap);
  va_end(ap);
  tpk_str_printf(&g->text, " : %s\n", KIND_TYPE[k]);
  g->kind[g->n] = k;
  return g->n++;
}

/* A graph of `nops` random ops over an [N, 8] world: elementwise chains,
 * reductions over rows, columns and everything, broadcasts back, transposes,
 * reshapes, dots, selects, scalars and a call, with a few results (views
 * among them). Values stay bounded (tanh after dots). */
static char *random_graph(uint64_t seed, int nops) {
  Gen g = {.rng = seed * 2654435761u + 1};
  static const Kind inputs[] = {ND, ND, DD, SC, D1};
  tpk_str_puts(&g.text, "kernel @twice(%a: ref<f32[R,C]>, %o: out ref<f32[R,C]>) {\n"
                        "  %v = load %a {index=\"::\"} : f32[R,C]\n  %d = add %v, %v : f32[R,C]\n"
                        "  store %o, %d {index=\"::\", mode=\"set\"}\n}\n");
  tpk_str_puts(&g.text, "func @random(");
  for (int i = 0; i < 5; i++) {
    tpk_str_printf(&g.text, "%s%%v%d: %s", i ? ", " : "", i, KIND_TYPE[inputs[i]]);
    g.kind[g.n++] = inputs[i];
  }
  TpkStr body = g.text;
  g.text = (TpkStr){0};
  static const char *const UNARY[] = {"tanh", "neg", "abs"}, *const BINARY[] = {"add", "sub", "mul", "max"};
  for (int k = 0; k < nops; k++) {
    int a, b, r = (int)(next_random(&g.rng) % 14);
    Kind kd = (Kind)(next_random(&g.rng) % NKINDS);
    switch (r) {
    case 0: case 1: /* unary */
      if ((a = pick(&g, kd)) >= 0) emit(&g, kd, "%s %%v%d", UNARY[next_random(&g.rng) % 3], a);
      break;
    case 2: case 3: case 4: /* binary */
      if ((a = pick(&g, kd)) >= 0 && (b = pick(&g, kd)) >= 0) emit(&g, kd, "%s %%v%d, %%v%d", BINARY[next_random(&g.rng) % 4], a, b);
      break;
    case 5: /* over rows, then back */
      if ((a = pick(&g, ND)) >= 0) {
        int m = emit(&g, N1, "reduce %%v%d {kind=\"%s\", axes=[1], keepdims=true}", a, next_random(&g.rng) % 2 ? "max" : "mean");
        emit(&g, ND, "broadcast %%v%d", m);
      }
      break;
    case 6: /* over columns, then back */
      if ((a = pick(&g, ND)) >= 0) {
        int c = emit(&g, D1, "reduce %%v%d {kind=\"%s\", axes=[0], keepdims=false}", a, next_random(&g.rng) % 2 ? "min" : "mean");
        emit(&g, ND, "broadcast %%v%d", c);
      }
      break;
    case 7: /* everything, then back */
      if ((a = pick(&g, ND)) >= 0) {
        int t = emit(&g, SC, "reduce %%v%d {kind=\"mean\", axes=[0, 1], keepdims=false}", a);
        emit(&g, next_random(&g.rng) % 2 ? ND : D1, "broadcast %%v%d", t);
      }
      break;
    case 8: /* transposes */
      if ((a = pick(&g, kd == DN ? DN : ND)) >= 0) emit(&g, kd == DN ? ND : DN, "transpose %%v%d {perm=[1, 0]}", a);
      break;
    case 9: /* reshapes */
      if ((a = pick(&g, kd == FLAT ? FLAT : ND)) >= 0) emit(&g, kd == FLAT ? ND : FLAT, "reshape %%v%d", a);
      break;
    case 10: /* x @ W, or x^T @ y */
      if (next_random(&g.rng) % 2 && (a = pick(&g, ND)) >= 0 && (b = pick(&g, DD)) >= 0) {
        int d = emit(&g, ND, "dot %%v%d, %%v%d {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]}", a, b);
        emit(&g, ND, "tanh %%v%d", d);
      } else if ((a = pick(&g, ND)) >= 0 && (b = pick(&g, ND)) >= 0) {
        int d = emit(&g, DD, "dot %%v%d, %%v%d {lhs_contract=[0], rhs_contract=[0], lhs_batch=[], rhs_batch=[]}", a, b);
        emit(&g, DD, "tanh %%v%d", d);
      }
      break;
    case 11: /* select */
      if ((a = pick(&g, ND)) >= 0 && (b = pick(&g, ND)) >= 0) {
        tpk_str_printf(&g.text, "  %%c%d = gt %%v%d, %%v%d : bool[N,8]\n", g.n, a, b);
        emit(&g, ND, "select %%c%d, %%v%d, %%v%d", g.n, a, b);
      }
      break;
    case 12: /* scalars */
      if ((a = pick(&g, SC)) >= 0 && (b = pick(&g, SC)) >= 0) emit(&g, SC, "%s %%v%d, %%v%d", BINARY[next_random(&g.rng) % 4], a, b);
      break;
    case 13: /* a call */
      if ((a = pick(&g, ND)) >= 0) emit(&g, ND, "call %%v%d {callee=\"twice\"}", a);
      break;
    }
  }
  /* results: the last value and two more at random */
  int res[3] = {g.n - 1, (int)(next_random(&g.rng) % (uint64_t)g.n), (int)(next_random(&g.rng) % (uint64_t)g.n)};
  tpk_str_puts(&body, ") -> (");
  for (int i = 0; i < 3; i++) tpk_str_printf(&body, "%s%s", i ? ", " : "", KIND_TYPE[g.kind[res[i]]]);
  tpk_str_printf(&body, ") {\n%s  return %%v%d, %%v%d, %%v%d\n}\n", g.text.data ? g.text.data : "", res[0], res[1], res[2]);
  tpk_str_free(&g.text);
  assert_false(body.failed);
  return tpk_str_take(&body);
}

/* Random graphs: fusion never fails (no cycle, every symbol bound) and the
 * fused clusters compute what the graph does, at three sizes. */
static void test_random_graphs(void **state) {
  Fixture *fx = *state;
  for (uint64_t seed = 0; seed < (getenv("TPK_RANDOM_GRAPHS") ? (uint64_t)atoi(getenv("TPK_RANDOM_GRAPHS")) : 120); seed++) {
    char *text = random_graph(seed, 6 + (int)(seed % 20));
    Graph gr = {"random", text, {1, 9, 40}, 0};
    snprintf(current, sizeof current, "random graph %d (TPK_SHOW_GRAPH=%d prints it)", (int)seed, (int)seed);
    const char *show = getenv("TPK_SHOW_GRAPH");
    if (show && atoi(show) == (int)seed) print_message("%s", text);
    check_graph(state, &gr);
    fixture_clear(fx);
    free(text);
  }
}

#define GRAPH_TEST(i)                                                       \
  static void test_##i(void **state) { check_graph(state, &GRAPHS[i]); }
GRAPH_TEST(0)
GRAPH_TEST(1)
GRAPH_TEST(2)
GRAPH_TEST(3)
GRAPH_TEST(4)
GRAPH_TEST(5)
GRAPH_TEST(6)
GRAPH_TEST(7)
GRAPH_TEST(8)
GRAPH_TEST(9)
GRAPH_TEST(10)
GRAPH_TEST(11)
GRAPH_TEST(12)
GRAPH_TEST(13)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_0, setup, teardown), cmocka_unit_test_setup_teardown(test_1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_2, setup, teardown), cmocka_unit_test_setup_teardown(test_3, setup, teardown),
      cmocka_unit_test_setup_teardown(test_4, setup, teardown), cmocka_unit_test_setup_teardown(test_5, setup, teardown),
      cmocka_unit_test_setup_teardown(test_6, setup, teardown), cmocka_unit_test_setup_teardown(test_7, setup, teardown),
      cmocka_unit_test_setup_teardown(test_8, setup, teardown), cmocka_unit_test_setup_teardown(test_9, setup, teardown),
      cmocka_unit_test_setup_teardown(test_10, setup, teardown), cmocka_unit_test_setup_teardown(test_11, setup, teardown),
      cmocka_unit_test_setup_teardown(test_12, setup, teardown), cmocka_unit_test_setup_teardown(test_13, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_graphs, setup, teardown),
  };
  _Static_assert(sizeof GRAPHS / sizeof *GRAPHS == 14, "one test per graph");
  return test_run_tests(tests);
}
