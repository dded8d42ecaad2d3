/*
 * decide.c — lowering's decisions, written into the IR.
 *
 * How the host computes a tiled kernel is decided here, once, and recorded
 * in the IR; the memory planner, the C emitter and the simulator read the
 * record (tpk_dot_accumulator, tpk_op_is_fused) and never decide again, so
 * they cannot disagree. Input: a simplified, tiled kernel. Output: the same
 * kernel with its decisions; it still verifies. Two decisions:
 *
 * Accumulation. `x + dot(a, b)` where the dot's one use is that add, in the
 * dot's block, becomes one op, the add turned into
 *     %s = dot %a, %b, %x {...}
 * (the same result value, so no use changes; the dot op goes). The products
 * continue x's sums, k ascending, as an MXU accumulates into its result
 * buffer: the emitter copies x into the result and runs one accumulating
 * gemm, the planner gives the product alone no buffer, the simulator drains
 * it into the result. This is the only dot/add rewrite: values differ from
 * `x + dot` by rounding only.
 *
 * Fusion. A chain of elementwise ops and broadcasts over one tile is one
 * loop on the host: `d * r * w + b` reads d, r, w and b once and writes one
 * tile, instead of a broadcast and a temporary per op. An op gets `fused=true`
 * (its result is computed inside its one user's loop, never stored) when
 *   - it is a broadcast, an iota (`j.start + iota(...)` column indices cost
 *     an index, not a tile), or an elementwise op or select the C emitter
 *     computes one element at a time: not one the primitive library
 *     computes on a whole f32 tile (exp, log, ...; erf, sqrt and rsqrt are
 *     computed in the chain, but not into a broadcast, which would compute
 *     them once per element it spreads to), not a conversion other than
 *     f32 <-> bf16,
 *     not an integer division (it must report division by zero); and
 *   - its result is used exactly once, in its own block, by an op that is
 *     itself computed element by element, or by an f32 sum or mean over
 *     trailing axes or leading ones, which adds the elements as its loop
 *     computes them, in the primitive's order: `mean(d * d)` never stores
 *     `d * d`, nor does a bias gradient its masked block.
 * Accumulation is decided first: the accumulator of a dot is read by a
 * gemm, so it is never fused, and an accumulating dot is not an element
 * loop, so nothing fuses through it.
 */
#include "lower/lower.h"

#include <string.h>

/* ---- accumulation ------------------------------------------------------------- */

/* Is v a plain dot's result whose one use, in the dot's block, is add?
 * (The add's operands and result then have the dot's type: verified.) */
static bool accumulates_into(const TpkValue *v, const TpkOp *add) {
  const TpkOp *dot = v->def;
  if (!dot || dot->opcode != TPK_OP_DOT || tpk_dot_accumulator(dot) || dot->parent != add->parent) return false;
  return tpk_value_single_user(v) == add;
}

/* add (x + dot, either order) becomes `dot a, b, x` in place, as
 * simplify.c folds ops: its result value, and so every use, stays. The dot
 * goes. */
static TpkStatus accumulate(TpkModule *m, TpkOp *add, int dot_operand, TpkError *err) {
  TpkOp *dot = add->in[dot_operand]->def;
  TpkValue *in[3] = {dot->in[0], dot->in[1], add->in[1 - dot_operand]};
  if (!tpk_op_set_operands(m, add, 3, in)) return tpk_error(err, TPK_ERR_NOMEM, "out of memory deciding accumulation");
  add->opcode = TPK_OP_DOT;
  add->nattr = dot->nattr; /* the dot is erased: its attributes move */
  add->attrs = dot->attrs;
  add->loc = dot->loc; /* messages about the product name the dot's line */
  tpk_op_erase(dot);
  return TPK_OK;
}

static TpkStatus decide_accumulation(TpkModule *m, TpkBlock *b, TpkError *err) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) {
      TpkStatus st = decide_accumulation(m, op->regions[r], err);
      if (st != TPK_OK) return st;
    }
    if (op->opcode != TPK_OP_ADD) continue;
    for (int i = 0; i < 2; i++)
      if (accumulates_into(op->in[i], op)) {
        TpkStatus st = accumulate(m, op, i, err);
        if (st != TPK_OK) return st;
        break;
      }
  }
  return TPK_OK;
}

/* ---- fusion -------------------------------------------------------------------- */

/* Transcendental functions the primitive library computes on f32 tiles
 * faster than generated code does inside a chain. Not erf: cc's code of it
 * (16 lanes wide where the CPU has them) is as fast as the primitive's, and
 * GELU fused is one pass, not three (0.55 -> 0.48 ms on 512x1024, one
 * thread; host/README.md). Not sqrt and rsqrt: one instruction (and a
 * division), the same bits as the primitive's; AdamW's update is one pass
 * instead of three. The others lose fused (exp's subnormal path is
 * computed for every lane, and tanh and sigmoid divide): SiLU 0.38 -> 0.58,
 * softmax 0.37 -> 0.53, gelu_tanh 0.55 -> 0.57. */
static bool prim_unary_f32(const TpkOp *op) {
  switch (op->opcode) {
  case TPK_OP_EXP: case TPK_OP_LOG: case TPK_OP_TANH: case TPK_OP_SIGMOID:
    return op->in[0]->type->dtype == TPK_F32;
  default:
    return false;
  }
}

/* Conversions between f32 and bf16, which generated code rounds inline
 * exactly as the primitive does (round to nearest even, NaN kept quiet). */
static bool inline_convert(const TpkOp *op) {
  TpkDType from = op->in[0]->type->dtype, to = op->out[0].type->dtype;
  return (from == TPK_F32 && to == TPK_BF16) || (from == TPK_BF16 && to == TPK_F32);
}

/* Does the C emitter compute op's tile one element at a time? */
static bool element_loop(const TpkOp *op) {
  if (op->nout != 1 || op->out[0].type->kind != TPK_TYPE_TENSOR || op->out[0].type->rank == 0) return false;
  if (op->opcode == TPK_OP_CONVERT) return inline_convert(op);
  if (op->opcode == TPK_OP_BROADCAST || op->opcode == TPK_OP_SELECT || op->opcode == TPK_OP_IOTA) return true;
  if (!(tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE)) return false;
  return !prim_unary_f32(op);
}

/* An f32 sum or mean over trailing axes (rows) or leading axes (columns),
 * which adds its operand's elements as its loop computes them. */
static bool sum_takes_elements(const TpkOp *op) {
  if (op->opcode != TPK_OP_REDUCE || op->in[0]->type->dtype != TPK_F32) return false;
  TpkReduceKind kind = tpk_op_reduce_kind(op);
  if (kind != TPK_REDUCE_SUM && kind != TPK_REDUCE_MEAN) return false;
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  if (!axes || axes->n == 0) return false;
  bool trailing = true, leading = true;
  for (int i = 0; i < axes->n; i++) { /* the last axes->n axes, or the first, in order */
    trailing &= axes->ints[i] == op->in[0]->type->rank - axes->n + i;
    leading &= axes->ints[i] == i;
  }
  return trailing || leading;
}

static bool int_division(const TpkOp *op) {
  return (op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV) &&
         !tpk_dtype_is_float(op->in[0]->type->dtype);
}

static bool fuses(const TpkOp *op);

/* Would op's elements, computed in its user's loop, be computed again for
 * each element a broadcast down the chain of fused users spreads them to? */
static bool spread(const TpkOp *op) {
  for (const TpkOp *use = tpk_value_single_user(&op->out[0]); use && element_loop(use);
       use = tpk_value_single_user(&use->out[0])) {
    if (use->opcode == TPK_OP_BROADCAST) return true;
    if (!fuses(use)) return false;
  }
  return false;
}

static bool fuses(const TpkOp *op) {
  if (!element_loop(op) || int_division(op)) return false;
  const TpkOp *use = tpk_value_single_user(&op->out[0]);
  if (!use || use->parent != op->parent) return false;
  if (!element_loop(use) && !sum_takes_elements(use)) return false;
  bool costly = op->opcode == TPK_OP_ERF || op->opcode == TPK_OP_SQRT || op->opcode == TPK_OP_RSQRT;
  return !costly || !spread(op); /* too dear to compute again for every element a broadcast spreads it to */
}

static TpkStatus decide_fusion(TpkModule *m, TpkBlock *b, TpkError *err) {
  for (TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) {
      TpkStatus st = decide_fusion(m, op->regions[r], err);
      if (st != TPK_OK) return st;
    }
    if (tpk_op_is_fused(op) || !fuses(op)) continue;
    tpk_op_set_bool(m, op, "fused", true);
    if (!tpk_op_is_fused(op)) return tpk_error(err, TPK_ERR_NOMEM, "out of memory deciding fusion");
  }
  return TPK_OK;
}

TpkStatus tpk_decide(TpkFunc *f, TpkError *err) {
  TpkStatus st = decide_accumulation(f->module, f->body, err);
  return st == TPK_OK ? decide_fusion(f->module, f->body, err) : st;
}
