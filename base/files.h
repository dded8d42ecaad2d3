/*
 * files.h — the file helpers tpk's caches on disk share: the JIT's compiled
 * code (host/jit.c) and the tuning results (runtime/tune.c) live side by
 * side under one root, in folders only this user can write.
 */
#ifndef TPK_RUNTIME_FILES_H
#define TPK_RUNTIME_FILES_H

#include <stdbool.h>
#include <stddef.h>

/* The caches' root (heap): $TPK_CACHE_DIR, else $XDG_CACHE_HOME/tpk, else
 * ~/.cache/tpk; NULL when $TPK_CACHE_DIR is "" (caching disabled), no home
 * is known, or out of memory. */
char *tpk_cache_root(void);

/* "dir/name" (heap), or NULL. */
char *tpk_path_join(const char *dir, const char *name);
/* A folder this user owns and no one else can write (what is loaded from a
 * cache may be code). */
bool tpk_dir_is_private(const char *path);
/* mkdir -p; folders it creates are private (0700). */
bool tpk_make_dirs(const char *path);
/* write(2) until done, retrying on EINTR. */
bool tpk_write_all(int fd, const void *data, size_t n);

#endif
