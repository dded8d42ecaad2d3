/*
 * host.c — the host target, and the host pipeline in one call.
 */
#include "host/host.h"

TpkTarget tpk_target_host(int64_t vmem_bytes) {
  return (TpkTarget){.name = "host", .vmem_bytes = vmem_bytes > 0 ? vmem_bytes : (int64_t)128 << 20,
                     .tile_bytes = (int64_t)256 << 10, .cores = 2 /* code serves any number of threads */};
}

TpkStatus tpk_lower_to_c(TpkFunc *f, const TpkTarget *t, const char *entry, const char *source, unsigned flags,
                         TpkStr *out, int64_t *workspace_bytes, TpkError *err) {
  TpkPlan plan;
  TpkStatus st = tpk_lower(f, t, &plan, err);
  if (st != TPK_OK) return st;
  st = tpk_emit_c(f, &plan, entry, source, flags, out, err);
  if (workspace_bytes) *workspace_bytes = plan.workspace_bytes;
  tpk_plan_free(&plan);
  return st;
}
