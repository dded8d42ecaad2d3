/*
 * files.c — file helpers of the caches on disk (base/files.h).
 */
#include "base/files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tpk_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

char *tpk_cache_root(void) {
  const char *d = getenv("TPK_CACHE_DIR");
  if (d) return *d ? strdup(d) : NULL;
  d = getenv("XDG_CACHE_HOME");
  if (d && d[0] == '/') return tpk_path_join(d, "tpk"); /* the XDG spec ignores relative values */
  d = getenv("HOME");
  if (d && d[0] == '/') return tpk_path_join(d, ".cache/tpk");
  return NULL;
}

bool tpk_dir_is_private(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         !(st.st_mode & (S_IWGRP | S_IWOTH));
}

bool tpk_make_dirs(const char *path) {
  char *p = strdup(path);
  if (!p) return false;
  bool ok = true;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST) ok = false;
    *s = c;
    if (!c || !ok) break;
  }
  free(p);
  return ok;
}

bool tpk_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= (size_t)w;
  }
  return true;
}
