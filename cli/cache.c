/*
 * cache.c — `tpk cache stats|clear|path`: the compilation cache on disk,
 * through the public API (tpk.h's tpk_cache_*).
 */
#include "cli/cli.h"
#include "tpk.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum { SUB_STATS, SUB_CLEAR, SUB_PATH, NSUBS };
static const char *const SUBS[NSUBS] = {"stats", "clear", "path"};

/* "1.4 MiB": sizes as people read them. */
static void format_bytes(char *out, size_t size, int64_t b) {
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(out, size, "%" PRId64 " bytes", b);
  else snprintf(out, size, "%.1f %s", v, units[u]);
}

static int show_stats(TpkContext *ctx) {
  TpkCacheStats s;
  if (tpk_cache_stats(ctx, &s) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    return CLI_FAIL;
  }
  if (!s.path) {
    printf("folder   none (TPK_CACHE_DIR is empty, or no home folder is known): nothing is kept\n");
    return CLI_OK;
  }
  char bytes[32], max[32];
  format_bytes(bytes, sizeof bytes, s.bytes);
  format_bytes(max, sizeof max, s.max_bytes);
  printf("folder   %s\n", s.path);
  if (s.enabled) printf("state    in use\n");
  else printf("state    off%s%s\n", s.note ? ": " : "", s.note ? s.note : "");
  printf("key      %s\n", s.key_file ? s.key_file : "none");
  printf("entries  %" PRId64 " (kernels' code, graphs and windows, sizes' facts), %s\n", s.entries, bytes);
  printf("limit    %s (TPK_CACHE_MAX); the least recently used go first\n", max);
  printf("builds   %" PRId64 " folder%s under way, or left by processes that were killed\n", s.build_folders,
         s.build_folders == 1 ? "" : "s");
  /* what the processes that used the folder found in their in-memory caches */
  static const char *const kinds[] = {"kernels", "eager", "graphs"};
  printf("lookups  of compiled units by the processes that used this folder, since it was cleared:\n");
  for (int k = 0; k < 3; k++)
    printf("  %-7s %" PRId64 " hit%s, %" PRId64 " miss%s\n", kinds[k], s.folder_unit_hits[k], s.folder_unit_hits[k] == 1 ? "" : "s",
           s.folder_unit_misses[k], s.folder_unit_misses[k] == 1 ? "" : "es");
  return CLI_OK;
}

static int clear(TpkContext *ctx) {
  int64_t entries, builds;
  const char *path = tpk_cache_path(ctx);
  if (tpk_cache_clear(ctx, &entries, &builds) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    return CLI_FAIL;
  }
  printf("removed %" PRId64 " entr%s and %" PRId64 " stale build folder%s from %s\n", entries, entries == 1 ? "y" : "ies",
         builds, builds == 1 ? "" : "s", path);
  return CLI_OK;
}

int cli_cache(const CliCommand *cmd, int argc, char **argv) {
  (void)cmd;
  if (argc < 2) return cli_usage_error("cache", "expects stats, clear or path");
  int sub = -1;
  for (int i = 0; i < NSUBS; i++)
    if (strcmp(argv[1], SUBS[i]) == 0) sub = i;
  if (sub < 0) {
    const char *s = tpk_suggest(argv[1], SUBS, NSUBS);
    if (s) return cli_usage_error("cache", "unknown subcommand '%s'; did you mean '%s'?", argv[1], s);
    return cli_usage_error("cache", "unknown subcommand '%s'; expected stats, clear or path", argv[1]);
  }
  if (argc > 2) return cli_usage_error("cache", "%s takes no arguments, got '%s'", SUBS[sub], argv[2]);
  TpkContext *ctx;
  if (tpk_context_create(&ctx) != TPK_OK) {
    cli_print_error("tpk", tpk_last_error());
    return CLI_FAIL;
  }
  int status = CLI_OK;
  if (sub == SUB_STATS) {
    status = show_stats(ctx);
  } else if (sub == SUB_CLEAR) {
    status = clear(ctx);
  } else if (tpk_cache_path(ctx)) {
    printf("%s\n", tpk_cache_path(ctx));
  } else {
    fprintf(stderr, "tpk: no cache folder (TPK_CACHE_DIR is empty, or no home folder is known)\n");
    status = CLI_FAIL;
  }
  tpk_context_destroy(ctx);
  return status;
}
