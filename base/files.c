/*
 * files.c — file helpers of the caches on disk, and safe writes of the
 * files users ask for (base/files.h).
 */
#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
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

/* A new, empty file beside `path` (same folder, so rename() is atomic):
 * ".NAME.tmpXXXXXXXX", created O_EXCL so nothing already there (a file, or a
 * link someone planted) is opened. Its name in *tmp (heap). */
static int create_temp(const char *path, const char *base, unsigned mode, char **tmp) {
  static atomic_uint counter;
  size_t dirlen = (size_t)(base - path), baselen = strlen(base);
  if (baselen > 200) baselen = 200; /* ".NAME.tmpXXXXXXXX" stays within NAME_MAX */
  *tmp = malloc(dirlen + baselen + 16);
  if (!*tmp) {
    errno = ENOMEM;
    return -1;
  }
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    unsigned salt = (unsigned)getpid() * 2654435761u ^ atomic_fetch_add(&counter, 1) * 40503u ^
                    (unsigned)(tpk_now_seconds() * 1e9);
    sprintf(*tmp, "%.*s.%.*s.tmp%08x", (int)dirlen, path, (int)baselen, base, salt);
    fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    int e = errno;
    free(*tmp);
    *tmp = NULL;
    errno = e;
  }
  return fd;
}

TpkStatus tpk_file_write(const char *path, unsigned mode, TpkFileFill fill, void *arg, TpkError *err) {
  if (!path || !*path) return tpk_error(err, TPK_ERR_INVALID, "no file name given (the path is empty)");
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return tpk_error(err, TPK_ERR_INVALID, "cannot write %s: it names a folder, not a file", path);
  struct stat st;
  bool exists = lstat(path, &st) == 0;
  if (!exists && errno != ENOENT) return tpk_error(err, TPK_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  if (exists && S_ISLNK(st.st_mode))
    return tpk_error(err, TPK_ERR_IO,
                     "cannot write %s: it is a symbolic link, and tpk does not write through one "
                     "(remove it or choose another name)", path);
  if (exists && S_ISDIR(st.st_mode)) return tpk_error(err, TPK_ERR_IO, "cannot write %s: it is a folder", path);
  if (exists && !S_ISREG(st.st_mode)) return tpk_error(err, TPK_ERR_IO, "cannot write %s: it is not a regular file", path);
  /* Renaming over a read-only file would succeed: refuse as opening it would. */
  if (exists && access(path, W_OK) != 0) return tpk_error(err, TPK_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  char *tmp;
  int fd = create_temp(path, base, mode, &tmp);
  if (fd < 0) return tpk_error(err, TPK_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(tmp);
    free(tmp);
    return tpk_error(err, TPK_ERR_NOMEM, "cannot write %s: out of memory", path);
  }
  TpkStatus status = fill(f, arg, err);
  int io_errno = 0;
  errno = 0;
  if (status == TPK_OK && (fflush(f) != 0 || ferror(f) || (exists && fchmod(fd, st.st_mode & mode & 07777) != 0) ||
                           fsync(fd) != 0))
    io_errno = errno ? errno : EIO;
  if (fclose(f) != 0 && status == TPK_OK && !io_errno) io_errno = errno ? errno : EIO;
  if (status == TPK_OK && !io_errno && rename(tmp, path) != 0) io_errno = errno;
  if (status == TPK_OK && io_errno) status = tpk_error(err, TPK_ERR_IO, "cannot write %s: %s", path, strerror(io_errno));
  if (status != TPK_OK) unlink(tmp);
  free(tmp);
  return status;
}

typedef struct Bytes {
  const void *data;
  size_t n;
} Bytes;

static TpkStatus put_bytes(FILE *f, void *arg, TpkError *err) {
  (void)err;
  const Bytes *b = arg;
  fwrite(b->data, 1, b->n, f); /* a short write sets f's error flag */
  return TPK_OK;
}

TpkStatus tpk_file_write_bytes(const char *path, unsigned mode, const void *data, size_t n, TpkError *err) {
  return tpk_file_write(path, mode, put_bytes, &(Bytes){data, n}, err);
}
