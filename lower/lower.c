/*
 * lower.c — the lowering passes for a target, in order.
 */
#include "lower/lower.h"

#include <string.h>

TpkStatus tpk_lower_ir(TpkFunc *f, const TpkTarget *t, TpkError *err) {
  tpk_simplify(f);
  TpkStatus st = tpk_tile_whole_arrays(f, t, err);
  if (st != TPK_OK) return st;
  tpk_simplify(f);
  st = tpk_decide(f, err);
  if (st != TPK_OK) return st;
  TpkError verr = {0};
  if (tpk_ir_verify(f->module, &verr) != TPK_OK)
    return tpk_error(err, TPK_ERR_INTERNAL, "internal error: lowering '%s' produced invalid IR: %s", f->name,
                     verr.message);
  return TPK_OK;
}

TpkStatus tpk_lower(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err) {
  memset(plan, 0, sizeof *plan);
  TpkStatus st = tpk_lower_ir(f, t, err);
  return st == TPK_OK ? tpk_plan_memory(f, t, plan, err) : st;
}
