/*
 * files.h — file helpers: the caches on disk (the JIT's compiled code,
 * host/jit.c, and the tuning results, runtime/tune.c, side by side under one
 * root, in folders only this user can write), and tpk_file_write, the one way
 * tpk writes a file a user asked for (.npy outputs, traces, bench results).
 */
#ifndef TPK_RUNTIME_FILES_H
#define TPK_RUNTIME_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/base.h"

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

/* Writes a file's contents to f; returns TPK_OK, or an error in *err (then
 * nothing is written). Write errors on f need no checking: tpk_file_write
 * notices them. */
typedef TpkStatus (*TpkFileFill)(FILE *f, void *arg, TpkError *err);

/* Write the file `path` safely: `fill` writes the contents to a new file
 * created (O_EXCL) in the same folder, which is synced and renamed over
 * `path`; so a reader sees the old file or the whole new one, never part of
 * it, and a failure (or a crash) leaves the old file as it was. The file
 * gets the permission bits `mode` less the umask (0666 for a user's file,
 * 0600 for a private cache entry); one it replaces keeps its bits, within
 * `mode`.
 * Refused, writing nothing: an empty path or one ending in a folder ("out/",
 * ".") (TPK_ERR_INVALID); a symbolic link at the final component, never
 * followed whatever it points to (links among the folders above it are
 * followed: the user named them), a folder or anything but a regular file
 * at the path, and a file this user may not write (TPK_ERR_IO). */
TpkStatus tpk_file_write(const char *path, unsigned mode, TpkFileFill fill, void *arg, TpkError *err);
/* tpk_file_write of n bytes. */
TpkStatus tpk_file_write_bytes(const char *path, unsigned mode, const void *data, size_t n, TpkError *err);

#endif
