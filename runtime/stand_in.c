/*
 * stand_in.c — TEMPORARY, branch `eager` only: the functions this branch
 * calls that the `fuse` branch (tpk_fuse, lower/fuse.c) and the `graph`
 * branch (runtime/graph.c, ir/graph.c) define, so that the library links
 * before they are merged. Each refuses. Deleted when main brings the real
 * ones (their definitions and these would clash at link time, loudly).
 */
#include "runtime/internal.h"

#include "ir/graph.h"

TpkStatus tpk_fuse(TpkFunc *f, TpkFusePolicy policy, TpkError *err) {
  (void)policy;
  return tpk_error(err, TPK_ERR_UNSUPPORTED, "graph '%s': graph fusion (lower/fuse.c) is not in this build yet", f->name);
}

TpkGraphBuilder *tpk_graph_builder(TpkGraph *g) {
  (void)g;
  return NULL;
}

TpkContext *tpk_graph_context(const TpkGraph *g) {
  (void)g;
  return NULL;
}

TpkFunc *tpk_gb_func(TpkGraphBuilder *gb) {
  (void)gb;
  return NULL;
}
