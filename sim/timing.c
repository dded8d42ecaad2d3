/*
 * timing.c — the time a kernel would take on a chip, without computing
 * anything: bind its sizes and tunables, run the host's passes and the
 * memory plan against the chip's VMEM, and schedule it.
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

#include "lower/lower.h"

TpkStatus tpk_sim_time_kernel(const TpkFunc *f, const TpkBinding *binds, int nbinds, const TpkChip *chip,
                              TpkSimReport *rep, TpkError *err) {
  memset(rep, 0, sizeof *rep);
  TpkModule *m = tpk_module_new(f->name);
  if (!m) return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  TpkFunc *g;
  TpkStatus st = tpk_bind(m, f, binds, nbinds, &g, err);
  if (st == TPK_OK) {
    char device[64];
    snprintf(device, sizeof device, "sim:%s", chip->name);
    TpkTarget target = tpk_sim_target(chip, device);
    TpkPlan plan;
    st = tpk_lower(g, &target, &plan, err);
    tpk_plan_free(&plan);
    if (st == TPK_OK) st = tpk_sim_schedule(g, chip, rep, NULL, err);
  }
  tpk_module_free(m);
  return st;
}

TpkTarget tpk_sim_target(const TpkChip *chip, const char *device) {
  return (TpkTarget){.name = device, .vmem_bytes = (int64_t)chip->vmem_bytes, .tile_bytes = 1 << 20,
                     .cores = chip->megacore ? chip->tensorcores : 1};
}
