#include "support.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/interp.h"
#include "lower/lower.h"
#include "host/prims.h"

void test_compile(TestCompile *c, const char *name, const char *text, const TpkCheckOptions *opts) {
  memset(c, 0, sizeof *c);
  c->src.name = name;
  c->src.text = text;
  c->src.len = strlen(text);
  tpk_diags_init(&c->diags, &c->src);
  c->status = tpk_compile_source(&c->src, opts, &c->diags, &c->module);
  TpkStr s = {0};
  tpk_diags_render(&s, &c->diags);
  c->rendered = tpk_str_take(&s);
  if (!c->module) return;
  c->bound = tpk_module_new(name);
  assert_non_null(c->bound);
  for (int i = 0; i < c->module->nfuncs; i++) {
    TpkFunc *f;
    TpkError err = {0};
    if (tpk_bind(c->bound, c->module->funcs[i], NULL, 0, &f, &err) != TPK_OK)
      fail_msg("binding %s: %s:%d:%d: %s", c->module->funcs[i]->name, name, err.line, err.col, err.message);
  }
}

void test_compile_free(TestCompile *c) {
  tpk_diags_free(&c->diags);
  if (c->module) tpk_module_free(c->module);
  if (c->bound) tpk_module_free(c->bound);
  free(c->rendered);
  memset(c, 0, sizeof *c);
}

/* Whether `name` matches one of the globs of `list` (separated by commas
 * or spaces). */
static bool named_in(const char *list, const char *name) {
  for (const char *at = list; *at;) {
    size_t len = strcspn(at, ", ");
    char glob[256];
    snprintf(glob, sizeof glob, "%.*s", (int)len, at);
    if (len && fnmatch(glob, name, 0) == 0) return true;
    at += len + (at[len] != 0);
  }
  return false;
}

int test_run_selected(const char *group, const struct CMUnitTest *tests, size_t n) {
  const char *list = getenv("TPK_TESTS");
  struct CMUnitTest *chosen = malloc((n ? n : 1) * sizeof *chosen);
  if (!chosen) return 1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!list || !*list || named_in(list, tests[i].name)) chosen[k++] = tests[i];
  int failures = _cmocka_run_group_tests(group, chosen, k, NULL, NULL);
  free(chosen);
  return failures;
}

TpkKernel *test_kernel(TpkContext **ctx, TpkDevice **dev, const char *device, const char *name, const char *text,
                       const char *kernel) {
  TpkProgram *prog;
  TpkKernel *k;
  if (tpk_context_create(ctx) != TPK_OK || tpk_device_open(*ctx, device, dev) != TPK_OK ||
      tpk_program_load_source(*ctx, name, text, strlen(text), &prog) != TPK_OK || tpk_program_kernel(prog, kernel, &k) != TPK_OK)
    fail_msg("%s: %s", name, tpk_last_error());
  return k;
}

char *test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  TpkStr s = {0};
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) tpk_str_putn(&s, buf, n);
  fclose(f);
  if (len) *len = s.len;
  return tpk_str_take(&s);
}

char *test_temp_dir(const char *prefix) {
  const char *base = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
  char *dir = strdup(path);
  if (!dir || !mkdtemp(dir)) fail_msg("cannot make a folder like %s", path);
  return dir;
}

void test_remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) test_remove_tree(sub);
      else unlink(sub);
    }
    closedir(d);
  }
  rmdir(path);
}

const char *test_root(void) {
  const char *r = getenv("TPK_ROOT");
  return r && *r ? r : ".";
}

const char *test_path(const char *rel) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", test_root(), rel);
  return buf;
}

TpkFunc *test_compile_kernel(TestCompile *c, const char *text, const char *name, const char *tunes) {
  TpkBinding tb[8];
  int nt = 0;
  char buf[256];
  if (tunes) {
    snprintf(buf, sizeof buf, "%s", tunes);
    for (char *tok = strtok(buf, ","); tok && nt < 8; tok = strtok(NULL, ",")) {
      char *eq = strchr(tok, '=');
      if (!eq) fail_msg("tunes must be NAME=VALUE lists, got '%s'", tunes);
      *eq = 0;
      tb[nt].name = tok;
      tb[nt++].value = atoll(eq + 1);
    }
  }
  TpkCheckOptions opts = {.tunes = tb, .ntunes = nt, .only_kernel = name};
  test_compile(c, "test.tpk", text, &opts);
  if (!c->module) fail_msg("compile failed:\n%s", c->rendered);
  TpkFunc *f = tpk_module_find(c->bound, name);
  assert_non_null(f);
  return f;
}

TpkFunc *test_compile_kernel_file(TestCompile *c, const char *rel, const char *name, const char *tunes) {
  char *text = test_read_file(test_path(rel), NULL);
  assert_non_null(text);
  TpkFunc *f = test_compile_kernel(c, text, name, tunes);
  free(text); /* the module keeps no pointer into the text */
  return f;
}

void test_symbol_values(const TpkFunc *f, const char *spec, int64_t *out) {
  const char *names[16];
  int n = tpk_func_symbols(f, names, 16);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names[i]);
    bool found = false;
    for (const char *p = spec; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
      if (strncmp(p, names[i], len) == 0 && p[len] == '=') {
        out[i] = atoll(p + len + 1);
        found = true;
        break;
      }
    if (!found) fail_msg("no value for symbol %s", names[i]);
  }
}

bool test_small_symbol(void *ctx, const char *sym, int64_t *value) {
  (void)ctx;
  *value = 3 + (int64_t)(strlen(sym) + (unsigned char)sym[0]) % 3;
  return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int test_list_tpk(const char *rel, char **names, int max) { return test_list_files(rel, ".tpk", names, max); }

int test_list_files(const char *rel, const char *ext, char **names, int max) {
  DIR *d = opendir(test_path(rel));
  if (!d) fail_msg("cannot open %s (run from the repository root or set TPK_ROOT)", test_path(rel));
  int n = 0;
  size_t elen = strlen(ext);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len <= elen || strcmp(e->d_name + len - elen, ext) != 0) continue;
    if (n == max) {
      closedir(d);
      test_names_free(names, n);
      fail_msg("%s holds more than %d %s files", rel, max, ext);
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  return n;
}

void test_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
}

/* ---- launches against the reference interpreter ------------------------------ */

int64_t test_buffer_numel(const TpkBuffer *b) {
  int64_t n = 1;
  for (int i = 0; i < tpk_buffer_rank(b); i++) n *= tpk_buffer_shape(b)[i];
  return n;
}

bool test_outputs_close(TpkDType dt, const void *got, const void *want, int64_t n, char *why, size_t whylen) {
  float *g = malloc((size_t)(n ? n : 1) * sizeof *g), *w = malloc((size_t)(n ? n : 1) * sizeof *w);
  double atol = dt == TPK_F32 ? 1e-5 : dt == TPK_F16 ? 1e-3 : dt == TPK_BF16 ? 1e-2 : tpk_dtype_is_float(dt) ? 0.25 : 0;
  double rtol = dt == TPK_F32 ? 1e-4 : dt == TPK_F16 ? 2e-3 : dt == TPK_BF16 ? 1.6e-2 : tpk_dtype_is_float(dt) ? 0.26 : 0;
  tpk_prims()->convert((int)dt, TPK_PRIM_F32, got, g, n);
  tpk_prims()->convert((int)dt, TPK_PRIM_F32, want, w, n);
  double scale = 0; /* accumulation order: absolute error grows with the terms (as tpk run --check) */
  for (int64_t i = 0; i < n; i++)
    if (isfinite(w[i]) && fabs((double)w[i]) > scale) scale = fabs((double)w[i]);
  if (scale > 1) atol *= scale;
  bool ok = true;
  for (int64_t i = 0; i < n && ok; i++) {
    if (isnan(g[i]) && isnan(w[i])) continue;
    double d = fabs((double)g[i] - (double)w[i]);
    if (g[i] == w[i]) d = 0;
    if (!(d <= atol + rtol * fabs((double)w[i]))) {
      snprintf(why, whylen, "element %lld: host %.9g, interpreter %.9g", (long long)i, (double)g[i], (double)w[i]);
      ok = false;
    }
  }
  free(g);
  free(w);
  return ok;
}


void test_launch_vs_interpreter(TpkDevice *dev, TpkProgram *prog, const char *file, const char *text,
                     const char *kname, int64_t size, const TpkBinding *tunes, int ntunes, TestTally *tally) {
  TpkKernel *k;
  assert_int_equal(tpk_program_kernel(prog, kname, &k), TPK_OK);
  int np = tpk_kernel_param_count(k);
  TpkNamedInt syms[32];
  TpkBinding binds[32];
  int ns = tpk_kernel_symbol_count(k);
  for (int i = 0; i < ns && i < 32; i++) {
    syms[i] = (TpkNamedInt){tpk_kernel_symbol_name(k, i), size};
    binds[i] = (TpkBinding){tpk_kernel_symbol_name(k, i), size};
  }
  TpkBuffer *bufs[64] = {0};
  void *ref[64] = {0};
  uint64_t sv[64];
  double scalars[64] = {0};
  void *iargs[64];
  uint64_t seed = (uint64_t)size * 7919u + (uint64_t)strlen(kname);
  for (int i = 0; i < np; i++) {
    TpkDType dt = tpk_kernel_param_dtype(k, i);
    if (tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR) {
      scalars[i] = tpk_dtype_is_float(dt) ? 0.5 : dt == TPK_BOOL ? 1 : 3;
      float fv = (float)scalars[i];
      int32_t iv = (int32_t)scalars[i];
      if (tpk_dtype_is_float(dt)) tpk_prims()->convert(TPK_PRIM_F32, (int)dt, &fv, &sv[i], 1);
      else tpk_prims()->convert(TPK_PRIM_I32, (int)dt, &iv, &sv[i], 1);
      iargs[i] = &sv[i];
      continue;
    }
    int64_t shape[8];
    assert_int_equal(tpk_kernel_param_shape(k, i, syms, ns, shape), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, dt, tpk_kernel_param_rank(k, i), shape, &bufs[i]), TPK_OK);
    if (tpk_kernel_param_kind(k, i) != TPK_PARAM_KIND_OUTPUT) tpk_fill_random(tpk_buffer_data(bufs[i]), dt, test_buffer_numel(bufs[i]), &seed);
    size_t bytes = tpk_buffer_bytes(bufs[i]);
    ref[i] = calloc(1, bytes ? bytes : 1);
    assert_non_null(ref[i]);
    memcpy(ref[i], tpk_buffer_data(bufs[i]), bytes);
    iargs[i] = ref[i];
  }
  TpkNamedInt tn[8];
  for (int i = 0; i < ntunes; i++) tn[i] = (TpkNamedInt){tunes[i].name, tunes[i].value};
  TpkLaunch launch = {.args = bufs, .scalars = scalars, .syms = syms, .nsyms = ns, .tunes = tn, .ntunes = ntunes};
  TpkStatus host = tpk_kernel_launch(k, &launch);
  char host_msg[512];
  snprintf(host_msg, sizeof host_msg, "%s", tpk_last_error());

  TpkCheckOptions o = {.binds = binds, .nbinds = ns, .tunes = tunes, .ntunes = ntunes, .only_kernel = kname};
  TestCompile c;
  test_compile(&c, file, text, &o);
  assert_int_equal(c.status, TPK_OK);
  TpkError err = {0};
  TpkStatus interp = tpk_interp_run(c.bound->funcs[0], iargs, NULL, &err);
  if (host != TPK_OK || interp != TPK_OK) {
    /* Both must fail, for the same reason (an index out of range). */
    if ((host == TPK_OK) != (interp == TPK_OK))
      fail_msg("%s:%s size %lld: host %s (%s), interpreter %s (%s)", file, kname, (long long)size,
               tpk_status_name(host), host_msg, tpk_status_name(interp), err.message);
    assert_non_null(strstr(host_msg, "out of range"));
    tally->both_failed++;
  } else {
    for (int i = 0; i < np; i++) {
      TpkParamKind kind = tpk_kernel_param_kind(k, i);
      if (kind != TPK_PARAM_KIND_OUTPUT && kind != TPK_PARAM_KIND_INOUT) continue;
      char why[256];
      if (!test_outputs_close(tpk_buffer_dtype(bufs[i]), tpk_buffer_data(bufs[i]), ref[i], test_buffer_numel(bufs[i]), why, sizeof why))
        fail_msg("%s:%s size %lld, output '%s': %s", file, kname, (long long)size, tpk_kernel_param_name(k, i), why);
      tally->compared++;
    }
    tally->passed++;
  }
  test_compile_free(&c);
  for (int i = 0; i < np; i++) {
    tpk_buffer_destroy(bufs[i]);
    free(ref[i]);
  }
}


char *test_launch_outputs(TpkKernel *k, TpkDevice *dev, int64_t size, uint64_t seed, double int_scalar,
                          const char *what, size_t *len, TpkLaunchResult *ran) {
  return test_launch_outputs_tuned(k, dev, size, seed, int_scalar, NULL, what, len, ran);
}

char *test_launch_outputs_tuned(TpkKernel *k, TpkDevice *dev, int64_t size, uint64_t seed, double int_scalar,
                                const char *tunes, const char *what, size_t *len, TpkLaunchResult *ran) {
  /* "BM=8,BN=128" as named tunables (names in a copy of the text) */
  char names[256] = "";
  TpkNamedInt given[16];
  int ngiven = 0;
  snprintf(names, sizeof names, "%s", tunes ? tunes : "");
  for (char *p = names, *next; *p && ngiven < 16; p = next) {
    char *eq = strchr(p, '='), *comma = strchr(p, ',');
    assert_non_null(eq);
    next = comma ? comma + 1 : p + strlen(p);
    if (comma) *comma = 0;
    *eq = 0;
    given[ngiven++] = (TpkNamedInt){p, strtoll(eq + 1, NULL, 10)};
  }
  int np = tpk_kernel_param_count(k), ns = tpk_kernel_symbol_count(k);
  TpkNamedInt syms[32];
  for (int i = 0; i < ns && i < 32; i++) syms[i] = (TpkNamedInt){tpk_kernel_symbol_name(k, i), size};
  TpkBuffer *bufs[64] = {0};
  double scalars[64] = {0};
  assert_true(np <= 64);
  for (int i = 0; i < np; i++) {
    TpkDType dt = tpk_kernel_param_dtype(k, i);
    if (tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR) {
      scalars[i] = tpk_dtype_is_float(dt) ? 0.5 : int_scalar;
      continue;
    }
    int64_t shape[8];
    assert_int_equal(tpk_kernel_param_shape(k, i, syms, ns, shape), TPK_OK);
    assert_int_equal(tpk_buffer_create(dev, dt, tpk_kernel_param_rank(k, i), shape, &bufs[i]), TPK_OK);
    if (tpk_kernel_param_kind(k, i) != TPK_PARAM_KIND_OUTPUT)
      tpk_fill_random(tpk_buffer_data(bufs[i]), dt, test_buffer_numel(bufs[i]), &seed);
  }
  TpkLaunch L = {.args = bufs, .scalars = scalars, .syms = syms, .nsyms = ns, .tunes = given, .ntunes = ngiven, .result = ran};
  if (tpk_kernel_launch(k, &L) != TPK_OK)
    fail_msg("%s on %s, size %lld: %s", what, tpk_device_name(dev), (long long)size, tpk_last_error());
  TpkStr out = {0};
  for (int i = 0; i < np; i++) {
    TpkParamKind kind = tpk_kernel_param_kind(k, i);
    if (kind == TPK_PARAM_KIND_OUTPUT || kind == TPK_PARAM_KIND_INOUT)
      tpk_str_putn(&out, tpk_buffer_data(bufs[i]), tpk_buffer_bytes(bufs[i]));
    tpk_buffer_destroy(bufs[i]);
  }
  tpk_str_puts(&out, "");
  *len = out.len;
  return tpk_str_take(&out);
}

/* ---- running the tpk command ------------------------------------------------------- */

static char *slurp_fd(int fd) {
  TpkStr s = {0};
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) tpk_str_putn(&s, buf, (size_t)n);
  tpk_str_puts(&s, "");
  return tpk_str_take(&s);
}

TestRun test_run(const TestRunOptions *o, const char *const *args) {
  TestRunOptions none = {0};
  if (!o) o = &none;
  char out_name[] = "/tmp/tpk-test-out-XXXXXX", err_name[] = "/tmp/tpk-test-err-XXXXXX",
       in_name[] = "/tmp/tpk-test-in-XXXXXX";
  int out = mkstemp(out_name), err = mkstemp(err_name), in = mkstemp(in_name);
  assert_true(out >= 0 && err >= 0 && in >= 0);
  if (o->input) assert_int_equal(write(in, o->input, strlen(o->input)), (ssize_t)strlen(o->input));
  lseek(in, 0, SEEK_SET);
  int dead[2] = {-1, -1};
  if (o->close_stdout) {
    assert_int_equal(pipe(dead), 0);
    close(dead[0]);
  }
  char tpk[4096];
  const char *b = getenv("TPK_BUILD");
  snprintf(tpk, sizeof tpk, "%s/tpk", b && *b ? b : "build");
  const char *argv[64] = {o->prog ? o->prog : tpk};
  int n = 1;
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;

  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(in, 0);
    dup2(o->close_stdout ? dead[1] : out, 1);
    dup2(err, 2);
    setenv("LC_ALL", "C", 1);
    for (int i = 0; o->env && o->env[i]; i++) {
      const char *eq = strchr(o->env[i], '=');
      char name[64];
      snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - o->env[i]) : 0, o->env[i]);
      if (eq) setenv(name, eq + 1, 1);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "cannot run %s\n", argv[0]);
    _exit(127);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  if (o->close_stdout) close(dead[1]);
  TestRun r = {.out = slurp_fd(out), .err = slurp_fd(err)};
  close(out), close(err), close(in);
  unlink(out_name), unlink(err_name), unlink(in_name);
  if (WIFSIGNALED(ws)) fail_msg("%s was killed by signal %d; stderr:\n%s", argv[0], WTERMSIG(ws), r.err);
  assert_true(WIFEXITED(ws));
  r.status = WEXITSTATUS(ws);
  if (r.status == 127 && strstr(r.err, "cannot run")) fail_msg("%s", r.err);
  return r;
}

void test_run_free(TestRun *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

void test_run_expect(TestRun r, int status, const char *out, const char *err) {
  if (r.status != status) fail_msg("exit %d, expected %d; stderr:\n%s\nstdout:\n%s", r.status, status, r.err, r.out);
  if (out) assert_contains(r.out, out);
  if (err) assert_contains(r.err, err);
  test_run_free(&r);
}

void test_cache_dir_open(char *dir) {
  assert_non_null(mkdtemp(dir));
  setenv("TPK_CACHE_DIR", dir, 1);
}

void test_cache_dir_close(const char *dir) {
  unsetenv("TPK_CACHE_DIR");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}
