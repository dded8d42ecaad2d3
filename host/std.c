/*
 * std.c — looking up the ahead-of-time standard kernels (host/std.h).
 * The tables come from the build (build/kernels/registry.c).
 */
#include "host/std.h"

#include <string.h>

int tpk_std_file_of(const char *text, size_t len) {
  for (int i = 0; i < tpk_std_nfiles; i++)
    if (tpk_std_files[i].len == len && memcmp(tpk_std_files[i].source, text, len) == 0) return i;
  return -1;
}

int tpk_std_file_of_kernel(const char *kernel, uint64_t hash_lo, uint64_t hash_hi) {
  for (int i = 0; i < tpk_std_nentries; i++) {
    const TpkStdEntry *e = &tpk_std_entries[i];
    if (e->hash_lo == hash_lo && e->hash_hi == hash_hi && strcmp(e->kernel, kernel) == 0) return e->file;
  }
  return -1;
}

const TpkStdEntry *tpk_std_find(int file, const char *kernel, const char *tunes) {
  for (int i = 0; i < tpk_std_nentries; i++) {
    const TpkStdEntry *e = &tpk_std_entries[i];
    if (e->file == file && strcmp(e->kernel, kernel) == 0 && strcmp(e->tunes, tunes) == 0) return e;
  }
  return NULL;
}
