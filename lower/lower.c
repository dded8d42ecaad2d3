/*
 * lower.c — the lowering passes for a target, in order.
 */
#include "lower/lower.h"

#include <string.h>

TpkStatus tpk_lower(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err) {
  memset(plan, 0, sizeof *plan);
  tpk_simplify(f);
  TpkStatus st = tpk_tile_whole_arrays(f, t, err);
  if (st != TPK_OK) return st;
  tpk_simplify(f);
  TpkError verr = {0};
  if (tpk_ir_verify(f->module, &verr) != TPK_OK)
    return tpk_error(err, TPK_ERR_INTERNAL, "internal error: lowering '%s' produced invalid IR: %s", f->name,
                     verr.message);
  return tpk_plan_memory(f, t, plan, err);
}
