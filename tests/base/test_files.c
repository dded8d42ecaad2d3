/*
 * test_files.c — base/files.c's tpk_file_write: a new file, a replaced one
 * (never seen half written, permission bits kept), and every refusal
 * (empty path, folder, symbolic link at the final component, read-only
 * file, a fill that fails), each leaving what was there untouched and no
 * temporary file behind.
 */
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tpk_files_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* dir/name in a rotating static buffer (a few may be live at once). */
static const char *at(const char *name) {
  static char bufs[4][256];
  static int next;
  char *p = bufs[next++ % 4];
  snprintf(p, 256, "%s/%s", dir, name);
  return p;
}

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void assert_file(const char *path, const char *want) {
  char *got = test_read_file(path, NULL);
  if (!got) fail_msg("%s: cannot read it", path);
  if (strcmp(got, want) != 0) fail_msg("%s holds '%s', expected '%s'", path, got, want);
  free(got);
}

/* Entries of dir other than . and .. */
static int entries(void) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

typedef struct Fill {
  const char *text;
  const char *target;     /* when set: the file being replaced, read mid-write */
  const char *target_was; /* what a reader must still see there */
  bool fail;
} Fill;

static TpkStatus fill(FILE *f, void *arg, TpkError *err) {
  Fill *x = arg;
  fputs(x->text, f);
  fflush(f);
  if (x->target) assert_file(x->target, x->target_was);
  if (x->fail) return tpk_error(err, TPK_ERR_NOMEM, "the fill failed");
  return TPK_OK;
}

static TpkStatus write_text(const char *path, const char *text, TpkError *err) {
  return tpk_file_write(path, 0666, fill, &(Fill){.text = text}, err);
}

static void test_new_and_replaced_files(void **state) {
  (void)state;
  TpkError err = {0};
  assert_int_equal(write_text(at("a.txt"), "one", &err), TPK_OK);
  assert_file(at("a.txt"), "one");
  assert_int_equal(entries(), 1); /* no temporary file left */
  /* replaced: a reader sees the old text until the new one is complete */
  assert_int_equal(chmod(at("a.txt"), 0640), 0);
  Fill f = {.text = "two", .target = at("a.txt"), .target_was = "one"};
  assert_int_equal(tpk_file_write(at("a.txt"), 0666, fill, &f, &err), TPK_OK);
  assert_file(at("a.txt"), "two");
  struct stat st;
  assert_int_equal(stat(at("a.txt"), &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);
  assert_int_equal(entries(), 1);
  /* a private file stays private, whatever the file it replaces allowed */
  assert_int_equal(chmod(at("a.txt"), 0666), 0);
  assert_int_equal(tpk_file_write_bytes(at("a.txt"), 0600, "three", 5, &err), TPK_OK);
  assert_file(at("a.txt"), "three");
  assert_int_equal(stat(at("a.txt"), &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(tpk_file_write_bytes(at("new.txt"), 0600, "four", 4, &err), TPK_OK);
  assert_int_equal(stat(at("new.txt"), &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  unlink(at("new.txt"));
  /* a relative path with no folder */
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(dir), 0);
  assert_int_equal(write_text("rel.txt", "here", &err), TPK_OK);
  assert_int_equal(chdir(cwd), 0);
  assert_file(at("rel.txt"), "here");
  unlink(at("a.txt"));
  unlink(at("rel.txt"));
}

static void test_refusals_write_nothing(void **state) {
  (void)state;
  TpkError err = {0};
  assert_int_equal(write_text("", "x", &err), TPK_ERR_INVALID);
  assert_string_equal(err.message, "no file name given (the path is empty)");
  assert_int_equal(write_text(NULL, "x", &err), TPK_ERR_INVALID);

  char path[300];
  snprintf(path, sizeof path, "%s/", dir);
  assert_int_equal(write_text(path, "x", &err), TPK_ERR_INVALID);
  assert_non_null(strstr(err.message, "it names a folder, not a file"));
  snprintf(path, sizeof path, "%s/.", dir);
  assert_int_equal(write_text(path, "x", &err), TPK_ERR_INVALID);

  assert_int_equal(mkdir(at("sub"), 0700), 0);
  assert_int_equal(write_text(at("sub"), "x", &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "it is a folder"));

  assert_int_equal(write_text(at("missing/x.txt"), "x", &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "missing/x.txt: No such file or directory"));

  /* a fill that fails: the old file stays */
  put(at("keep.txt"), "old");
  assert_int_equal(tpk_file_write(at("keep.txt"), 0666, fill, &(Fill){.text = "new", .fail = true}, &err), TPK_ERR_NOMEM);
  assert_string_equal(err.message, "the fill failed");
  assert_file(at("keep.txt"), "old");

  /* read-only: refused as opening it would be (root may write anything) */
  assert_int_equal(chmod(at("keep.txt"), 0444), 0);
  if (geteuid() != 0) {
    assert_int_equal(write_text(at("keep.txt"), "new", &err), TPK_ERR_IO);
    assert_non_null(strstr(err.message, "Permission denied"));
    assert_file(at("keep.txt"), "old");
  }
  assert_int_equal(entries(), 2); /* sub and keep.txt: no temporary file */
  unlink(at("keep.txt"));
  rmdir(at("sub"));
}

/* A symbolic link at the final component is never followed: not to a file
 * (which would be overwritten), not dangling (which would create its
 * target). A link among the folders above is the user's choice. */
static void test_symlinks(void **state) {
  (void)state;
  TpkError err = {0};
  put(at("victim.txt"), "precious");
  assert_int_equal(symlink(at("victim.txt"), at("link.txt")), 0);
  assert_int_equal(write_text(at("link.txt"), "overwritten", &err), TPK_ERR_IO);
  assert_non_null(strstr(err.message, "link.txt: it is a symbolic link, and tpk does not write through one"));
  assert_file(at("victim.txt"), "precious");
  struct stat st;
  assert_int_equal(lstat(at("link.txt"), &st), 0);
  assert_true(S_ISLNK(st.st_mode));

  assert_int_equal(symlink(at("created.txt"), at("dangling.txt")), 0);
  assert_int_equal(write_text(at("dangling.txt"), "x", &err), TPK_ERR_IO);
  assert_int_equal(access(at("created.txt"), F_OK), -1);

  assert_int_equal(mkdir(at("real"), 0700), 0);
  assert_int_equal(symlink(at("real"), at("linked")), 0);
  assert_int_equal(write_text(at("linked/x.txt"), "through the folder", &err), TPK_OK);
  assert_file(at("real/x.txt"), "through the folder");
  assert_int_equal(entries(), 5); /* victim, link, dangling, real, linked */
  unlink(at("real/x.txt"));
  rmdir(at("real"));
  unlink(at("linked"));
  unlink(at("link.txt"));
  unlink(at("dangling.txt"));
  unlink(at("victim.txt"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_and_replaced_files),
      cmocka_unit_test(test_refusals_write_nothing),
      cmocka_unit_test(test_symlinks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
