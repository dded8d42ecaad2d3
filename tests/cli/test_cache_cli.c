/*
 * test_cache_cli.c — `tpk cache` as a user meets it: help, usage errors
 * (exit 2), `path`, and `stats` and `clear` on a cache that a `tpk run`
 * with TPK_TIER=cc filled; a key file the rule refuses turns the cache off
 * with a note and kernels still run. Runs build/tpk (or $TPK_BUILD/tpk)
 * with its cache and key in a temporary folder.
 */
#include "support.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/tpk-test-cache-cli-XXXXXX";
static char cache_dir[256], config_dir[256], kernel_path[256], world_key[256];

static int setup(void **state) {
  (void)state;
  if (!mkdtemp(tmpdir)) return -1;
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", tmpdir);
  snprintf(config_dir, sizeof config_dir, "%s/config", tmpdir);
  snprintf(kernel_path, sizeof kernel_path, "%s/scale.tpk", tmpdir);
  snprintf(world_key, sizeof world_key, "%s/world.key", tmpdir);
  FILE *f = fopen(kernel_path, "w");
  if (!f) return -1;
  fputs("kernel scale(x: f32[N]) -> (y: f32[N]) { y = x * 3.0; }\n", f);
  fclose(f);
  int fd = open(world_key, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0 || write(fd, "0123456789abcdef0123456789abcdef", 32) != 32 || close(fd) != 0 || chmod(world_key, 0644) != 0)
    return -1;
  setenv("TPK_CACHE_DIR", cache_dir, 1);      /* the children's cache ... */
  setenv("XDG_CONFIG_HOME", config_dir, 1);   /* ... and their per-user key */
  unsetenv("TPK_CACHE_KEY_FILE");
  unsetenv("TPK_CACHE_MAX");
  unsetenv("TPK_TIER");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_help(void **state) {
  (void)state;
  TestRun a = RUN("help", "cache"), b = RUN("cache", "--help");
  assert_int_equal(a.status, 0);
  assert_string_equal(a.out, b.out);
  assert_contains(a.out, "Usage: tpk cache stats|clear|path");
  assert_contains(a.out, "TPK_CACHE_KEY_FILE");
  assert_contains(a.out, "TPK_CACHE_MAX");
  assert_contains(a.out, "HMAC-SHA256");
  test_run_free(&a);
  test_run_free(&b);
  test_run_expect(RUN("--help"), 0, "  cache   show or empty the compilation cache", NULL);
}

static void test_usage_errors(void **state) {
  (void)state;
  test_run_expect(RUN("cache"), 2, NULL, "tpk cache: expects stats, clear or path");
  test_run_expect(RUN("cache", "stat"), 2, NULL, "unknown subcommand 'stat'; did you mean 'stats'?");
  test_run_expect(RUN("cache", "purge"), 2, NULL, "unknown subcommand 'purge'; expected stats, clear or path");
  test_run_expect(RUN("cache", "clear", "now"), 2, NULL, "clear takes no arguments, got 'now'");
}

static void test_cache_path(void **state) {
  (void)state;
  char want[300];
  snprintf(want, sizeof want, "%s\n", cache_dir);
  TestRun r = RUN("cache", "path");
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, want);
  test_run_free(&r);
  const char *const off[] = {"TPK_CACHE_DIR=", NULL};
  TestRunOptions o = {.env = off};
  test_run_expect(test_run(&o, ARGS("cache", "path")), 1, NULL, "tpk: no cache folder");
  test_run_expect(test_run(&o, ARGS("cache", "stats")), 0, "folder   none", NULL);
}

/* A build folder left by a process that is gone, quiet for an hour. */
static void plant_stale_build(char *path, size_t size) {
  char host[65] = "";
  assert_int_equal(gethostname(host, sizeof host - 1), 0);
  for (char *p = host; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.')) *p = '_';
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  snprintf(path, size, "%s/tpk-build-%ld-%s-Ab12Cd", cache_dir, (long)dead, host);
  assert_int_equal(mkdir(path, 0700), 0);
  struct timespec t[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void test_stats_and_clear(void **state) {
  (void)state;
  const char *const cc[] = {"TPK_TIER=cc", NULL};
  TestRunOptions o = {.env = cc};
  test_run_expect(test_run(&o, ARGS("run", kernel_path, "--shape", "N=1000", "--check")), 0, NULL, NULL);
  char key[300], line[400];
  snprintf(key, sizeof key, "%s/tpk/cache.key", config_dir);
  struct stat st;
  assert_int_equal(stat(key, &st), 0); /* made on first use */
  assert_int_equal(st.st_mode & 0777, 0600);

  char stale[512];
  plant_stale_build(stale, sizeof stale);
  TestRun r = RUN("cache", "stats");
  assert_int_equal(r.status, 0);
  snprintf(line, sizeof line, "folder   %s\n", cache_dir);
  assert_contains(r.out, line);
  assert_contains(r.out, "state    in use\n");
  snprintf(line, sizeof line, "key      %s\n", key);
  assert_contains(r.out, line);
  assert_contains(r.out, "entries  1 (kernels' code, graphs and windows, sizes' facts), ");
  assert_contains(r.out, "limit    1.0 GiB (TPK_CACHE_MAX)");
  assert_contains(r.out, "builds   1 folder under way");
  /* the run's launches: the first built the kernel's specialisation */
  assert_contains(r.out, "lookups  of compiled units by the processes that used this folder");
  assert_contains(r.out, " hits, 1 miss\n  eager   0 hits, 0 misses\n  graphs  0 hits, 0 misses\n");
  test_run_free(&r);

  const char *const small[] = {"TPK_CACHE_MAX=512M", NULL};
  TestRunOptions so = {.env = small};
  test_run_expect(test_run(&so, ARGS("cache", "stats")), 0, "limit    512.0 MiB (TPK_CACHE_MAX)", NULL);

  snprintf(line, sizeof line, "removed 1 entry and 1 stale build folder from %s\n", cache_dir);
  test_run_expect(RUN("cache", "clear"), 0, line, NULL);
  assert_int_equal(access(stale, F_OK), -1);
  test_run_expect(RUN("cache", "stats"), 0, "entries  0 (kernels' code, graphs and windows, sizes' facts), 0 bytes", NULL);
  test_run_expect(RUN("cache", "stats"), 0, "  kernels 0 hits, 0 misses\n", NULL);
  /* the next run compiles again and stores again */
  test_run_expect(test_run(&o, ARGS("run", kernel_path, "--shape", "N=1000", "--check")), 0, NULL, NULL);
  test_run_expect(RUN("cache", "stats"), 0, "entries  1 (kernels' code, graphs and windows, sizes' facts), ", NULL);
}

/* A key file others can read authenticates nothing: the cache is off, the
 * stats say why, and kernels still compile and run. */
static void test_refused_key(void **state) {
  (void)state;
  char key_env[300];
  snprintf(key_env, sizeof key_env, "TPK_CACHE_KEY_FILE=%s", world_key);
  const char *const env[] = {key_env, "TPK_TIER=cc", NULL};
  TestRunOptions o = {.env = env};
  char note[600];
  snprintf(note, sizeof note,
           "state    off: the cache key file %s can be read by others: the compilation cache is off\n", world_key);
  test_run_expect(test_run(&o, ARGS("cache", "stats")), 0, note, NULL);
  test_run_expect(test_run(&o, ARGS("cache", "stats")), 0, "key      none\n", NULL);
  test_run_expect(test_run(&o, ARGS("run", kernel_path, "--shape", "N=777", "--check")), 0, NULL, NULL);
}

static void test_bad_limit(void **state) {
  (void)state;
  const char *const env[] = {"TPK_CACHE_MAX=lots", NULL};
  TestRunOptions o = {.env = env};
  test_run_expect(test_run(&o, ARGS("cache", "stats")), 1, NULL,
         "TPK_CACHE_MAX=lots: expected a size in bytes, such as 536870912, 512M or 2G");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),           cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_cache_path),           cmocka_unit_test(test_stats_and_clear),
      cmocka_unit_test(test_refused_key),    cmocka_unit_test(test_bad_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
