/*
 * timing.c — the time a kernel would take on a chip, without computing
 * anything: check it with its sizes and tunables bound, run the host's
 * passes and the memory plan against the chip's VMEM, and schedule it.
 *
 * This is what a launch on "sim:<chip>" does for its timing
 * (runtime/runtime.c), minus the C emitter and the JIT: `tpk tune` calls it
 * once per configuration, so a search over dozens of block sizes takes
 * milliseconds per point instead of a compile each. The lowering target
 * must stay the one the runtime uses for sim devices, or the tuner would
 * time a different program than the one that runs;
 * tests/runtime/test_tune.c compares the two.
 */
#include "sim/sim.h"

#include <stdio.h>
#include <string.h>

#include "dsl/dsl.h"
#include "lower/lower.h"

TpkStatus tpk_sim_time_kernel(const TpkSource *src, const char *kernel, const TpkBinding *binds, int nbinds,
                              const TpkBinding *tunes, int ntunes, const TpkChip *chip, TpkSimReport *rep,
                              TpkError *err) {
  memset(rep, 0, sizeof *rep);
  TpkCheckOptions o = {.binds = binds, .nbinds = nbinds, .tunes = tunes, .ntunes = ntunes, .only_kernel = kernel};
  TpkDiags diags;
  tpk_diags_init(&diags, src);
  TpkModule *m = NULL;
  TpkStatus st = tpk_compile_source(src, &o, &diags, &m);
  if (st != TPK_OK || !m || m->nfuncs != 1) {
    TpkStr s = {0};
    tpk_diags_render(&s, &diags);
    tpk_error(err, TPK_ERR_PARSE, "%s", s.data && s.len ? s.data : "the kernel did not check");
    tpk_str_free(&s);
    tpk_diags_free(&diags);
    if (m) tpk_module_free(m);
    return TPK_ERR_PARSE;
  }
  tpk_diags_free(&diags);
  char device[64];
  snprintf(device, sizeof device, "sim:%s", chip->name);
  TpkTarget target = tpk_sim_target(chip, device);
  TpkFunc *f = m->funcs[0];
  TpkPlan plan;
  st = tpk_lower(f, &target, &plan, err);
  tpk_plan_free(&plan);
  if (st == TPK_OK) st = tpk_sim_schedule(f, chip, rep, NULL, err);
  tpk_module_free(m);
  return st;
}

TpkTarget tpk_sim_target(const TpkChip *chip, const char *device) {
  return (TpkTarget){.name = device, .vmem_bytes = (int64_t)chip->vmem_bytes, .tile_bytes = 1 << 20};
}
