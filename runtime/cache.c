/*
 * cache.c — the compilation cache of tpk.h as the public API shows it: the
 * context's compiled units in memory (units.c) and the disk cache of its
 * JIT (host/jit.h, where the trust model is).
 *
 * The folder also keeps a tally of unit lookups, so that `tpk cache stats`
 * can say how every process using it fared: the file `units` holds one line
 * per kind ("kernel <hits> <misses>"), added to when a context that used
 * the folder ends, under a lock of the file. It is a count for people, not
 * trusted: a line that does not parse counts as zero.
 */
#define _DEFAULT_SOURCE /* flock */
#include "runtime/internal.h"
#include "host/jit.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static const char *const KIND_NAMES[3] = {"kernel", "eager", "graph"};

/* The tally in the open file fd (read from its start). */
static void read_tally(int fd, int64_t hits[3], int64_t misses[3]) {
  char text[512];
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = 0;
  for (const char *line = text; *line;) {
    char name[16];
    long long h, m;
    if (sscanf(line, "%15s %lld %lld", name, &h, &m) == 3 && h >= 0 && m >= 0)
      for (int k = 0; k < 3; k++)
        if (strcmp(name, KIND_NAMES[k]) == 0) hits[k] = h, misses[k] = m;
    const char *nl = strchr(line, '\n');
    line = nl ? nl + 1 : line + strlen(line);
  }
}

static int open_tally(const char *dir, int flags) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/units", dir) >= (int)sizeof path) return -1;
  return open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0644);
}

void tpk_cache_tally(TpkContext *ctx) {
  TpkJitCacheInfo info;
  TpkError err = {0};
  if (tpk_jit_cache_info(tpk_context_jit(ctx), &info, &err) != TPK_OK || !info.in_use) return;
  int64_t count, hits[3], misses[3], was_hits[3] = {0}, was_misses[3] = {0};
  tpk_units_stats(tpk_context_units(ctx), &count, hits, misses, NULL);
  if (!hits[0] && !hits[1] && !hits[2] && !misses[0] && !misses[1] && !misses[2]) return;
  int fd = open_tally(info.dir, O_RDWR | O_CREAT);
  if (fd < 0) return; /* a count for people: never a reason to fail */
  if (flock(fd, LOCK_EX) == 0) {
    read_tally(fd, was_hits, was_misses);
    char text[512];
    int n = 0;
    for (int k = 0; k < 3; k++)
      n += snprintf(text + n, sizeof text - (size_t)n, "%s %" PRId64 " %" PRId64 "\n", KIND_NAMES[k], was_hits[k] + hits[k],
                    was_misses[k] + misses[k]);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n) {
    }
    flock(fd, LOCK_UN);
  }
  close(fd);
}

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
  int64_t count;
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
  tpk_units_stats(tpk_context_units(ctx), &count, out->unit_hits, out->unit_misses, out->unit_loads);
  out->units = count;
  out->emitted = tpk_context_emitted(ctx);
  out->lowered = tpk_context_lowered(ctx);
  int fd = info.dir ? open_tally(info.dir, O_RDONLY) : -1;
  if (fd >= 0) {
    if (flock(fd, LOCK_SH) == 0) read_tally(fd, out->folder_unit_hits, out->folder_unit_misses);
    close(fd);
  }
  return TPK_OK;
}

TpkStatus tpk_cache_clear(TpkContext *ctx, int64_t *entries_removed, int64_t *builds_removed) {
  if (!ctx) return tpk_runtime_set_error(TPK_ERR_INVALID, "tpk_cache_clear: missing context");
  int64_t entries, builds;
  TpkError err = {0};
  TpkStatus st = tpk_jit_cache_clear(tpk_context_jit(ctx), &entries, &builds, &err);
  const char *dir = tpk_cache_path(ctx);
  char path[4096];
  if (st == TPK_OK && dir && snprintf(path, sizeof path, "%s/units", dir) < (int)sizeof path) unlink(path);
  if (entries_removed) *entries_removed = entries;
  if (builds_removed) *builds_removed = builds;
  return st == TPK_OK ? TPK_OK : tpk_runtime_set_error(st, err.message);
}
