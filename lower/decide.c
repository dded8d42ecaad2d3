/*
 * fuse.c — which tiles are computed inside their consumer's loop.
 *
 * A chain of elementwise ops and broadcasts over one tile is one loop on the
 * host: `d * r * w + b` reads d, r, w and b once and writes one tile, instead
 * of materialising a broadcast and a temporary per op. A value is fused into
 * its consumer when it is
 *   - a broadcast, an iota (`j.start + iota(...)` column indices cost an
 *     index, not a tile), or an elementwise op or select the C emitter
 *     computes one element at a time (not one the primitive library
 *     computes on a whole f32 tile, not a conversion other than f32 <->
 *     bf16, not an integer division, which must report division by zero),
 *     and
 *   - used exactly once, in its own block, by an op that is itself computed
 *     element by element (elementwise, select or broadcast), and is not the
 *     addend of a fused `x + dot(a, b)`; or by an f32 sum or mean over
 *     trailing axes (tpk_reduce_takes_fused), which adds the elements as its
 *     loop computes them, in the primitive's lane order: `mean(d * d)`
 *     never stores `d * d`.
 * The planner gives fused values no memory and the emitter inlines them; this
 * file is the one place that decides, so they cannot disagree.
 */
#include "lower/lower.h"

#include <string.h>

/* Transcendental functions the primitive library computes on f32 tiles. */
static bool prim_unary_f32(const TpkOp *op) {
  switch (op->opcode) {
  case TPK_OP_EXP: case TPK_OP_LOG: case TPK_OP_SQRT: case TPK_OP_RSQRT:
  case TPK_OP_TANH: case TPK_OP_SIGMOID: case TPK_OP_ERF:
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

bool tpk_op_is_element_loop(const TpkOp *op) {
  if (op->nout != 1 || op->out[0].type->kind != TPK_TYPE_TENSOR || op->out[0].type->rank == 0) return false;
  if (op->opcode == TPK_OP_CONVERT) return inline_convert(op);
  if (op->opcode == TPK_OP_BROADCAST || op->opcode == TPK_OP_SELECT || op->opcode == TPK_OP_IOTA) return true;
  if (!(tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE)) return false;
  return !prim_unary_f32(op);
}

bool tpk_reduce_takes_fused(const TpkOp *op) {
  if (op->opcode != TPK_OP_REDUCE || op->in[0]->type->dtype != TPK_F32) return false;
  TpkReduceKind kind = tpk_op_reduce_kind(op);
  if (kind != TPK_REDUCE_SUM && kind != TPK_REDUCE_MEAN) return false;
  const TpkAttr *axes = tpk_op_attr(op, "axes");
  if (!axes || axes->n == 0) return false;
  for (int i = 0; i < axes->n; i++) /* the last axes->n axes, in order */
    if (axes->ints[i] != op->in[0]->type->rank - axes->n + i) return false;
  return true;
}

static bool int_division(const TpkOp *op) {
  return (op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV) &&
         !tpk_dtype_is_float(op->in[0]->type->dtype);
}

bool tpk_value_is_fused(const TpkValue *v) {
  const TpkOp *def = v->def;
  if (!def || !tpk_op_is_element_loop(def) || int_division(def)) return false;
  const TpkOp *use = tpk_value_single_user(v);
  if (!use || use->parent != def->parent) return false;
  if (!tpk_op_is_element_loop(use) && !tpk_reduce_takes_fused(use)) return false;
  if (use->opcode == TPK_OP_ADD) /* the addend of acc + dot is copied, then accumulated into */
    for (int i = 0; i < 2; i++) {
      const TpkValue *d = use->in[i];
      if (d != v && d->def && d->def->opcode == TPK_OP_DOT && tpk_dot_fuses_into_add(d->def, NULL)) return false;
    }
  return true;
}

/* The op that computes v's elements: v's own op, or, when v is fused, the
 * (transitive) consumer it is inlined into. */
const TpkOp *tpk_fused_root(const TpkValue *v) {
  const TpkOp *op = v->def;
  while (op && tpk_value_is_fused(&op->out[0])) op = tpk_value_single_user(&op->out[0]);
  return op;
}
