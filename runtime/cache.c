/*
 * cache.c — the compilation cache of tpk.h: the disk cache of the
 * context's JIT (host/jit.h, where the trust model is), as the public API
 * shows it.
 */
#include "runtime/internal.h"
#include "host/jit.h"

const char *tpk_cache_path(TpkContext *ctx) {
  TpkJitCacheInfo info;
  TpkError err = {0};
  if (!ctx) return NULL;
  if (tpk_jit_cache_info(tpk_context_jit(ctx), &info, &err) != TPK_OK) {
    tpk_runtime_set_error(err.code, err.message);
    return NULL;
  }
  return info.dir;
}

TpkStatus tpk_cache_stats(TpkContext *ctx, TpkCacheStats *out) {
  if (!ctx || !out) return tpk_runtime_set_error(TPK_ERR_INVALID, "tpk_cache_stats: missing argument");
  TpkJit *jit = tpk_context_jit(ctx);
  TpkJitCacheInfo info;
  TpkError err = {0};
  if (tpk_jit_cache_info(jit, &info, &err) != TPK_OK) return tpk_runtime_set_error(err.code, err.message);
  TpkJitStats s = tpk_jit_stats(jit);
  *out = (TpkCacheStats){
      .path = info.dir,
      .enabled = info.in_use,
      .note = info.note,
      .key_file = info.key_file,
      .entries = info.entries,
      .bytes = info.bytes,
      .max_bytes = info.max_bytes,
      .build_folders = info.build_folders,
      .hits = s.cache_hits,
      .misses = s.cache_misses,
      .rejected = s.cache_rejects,
  };
  return TPK_OK;
}

TpkStatus tpk_cache_clear(TpkContext *ctx, int64_t *entries_removed, int64_t *builds_removed) {
  if (!ctx) return tpk_runtime_set_error(TPK_ERR_INVALID, "tpk_cache_clear: missing context");
  int64_t entries, builds;
  TpkError err = {0};
  TpkStatus st = tpk_jit_cache_clear(tpk_context_jit(ctx), &entries, &builds, &err);
  if (entries_removed) *entries_removed = entries;
  if (builds_removed) *builds_removed = builds;
  return st == TPK_OK ? TPK_OK : tpk_runtime_set_error(st, err.message);
}
