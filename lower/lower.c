/*
 * lower.c — the host pipeline in one call, and the host target.
 */
#include "lower/lower.h"

#include <stdlib.h>
#include <string.h>

/* "64M", "1G", "4096" -> bytes; 0 when malformed. */
static int64_t parse_bytes(const char *s) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || v <= 0) return 0;
  switch (*end) {
  case 'k': case 'K': v <<= 10; end++; break;
  case 'm': case 'M': v <<= 20; end++; break;
  case 'g': case 'G': v <<= 30; end++; break;
  default: break;
  }
  return *end ? 0 : v;
}

TpkTarget tpk_target_host(void) {
  TpkTarget t = {.name = "host", .vmem_bytes = (int64_t)128 << 20, .tile_bytes = (int64_t)256 << 10};
  const char *env = getenv("TPK_HOST_VMEM");
  int64_t v = env ? parse_bytes(env) : 0;
  if (v > 0) t.vmem_bytes = v;
  return t;
}

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
