/*
 * aot.c — the build's compiler for the standard kernel library.
 *
 *   aot c TUNED.tsv FILE.tpk OUT.c            C for every kernel of FILE,
 *                                             serving every shape, once per
 *                                             tunable setting
 *   aot registry TUNED.tsv OUT.c FILE.tpk...  the table host/std.h
 *                                             declares: the files' text,
 *                                             kernel -> entry points, and
 *                                             TUNED.tsv's text
 *
 * A kernel's tunable settings are its declared defaults, then each distinct
 * setting TUNED.tsv (kernels/tuned.tsv) ships for it (rows of its name and
 * IR hash, any device or sizes: a sim device's values are the host code's).
 * Entry points are named tpk_std_<file>_<kernel>_<n>, n counting the
 * settings; both commands enumerate them the same way, from the same files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "host/host.h"
#include "runtime/tune.h"

enum { MAX_SETTINGS = 32, MAX_TUNES = 16 };

/* One tunable setting of one kernel: values in declaration order. */
typedef struct Setting {
  int n;
  TpkBinding tunes[MAX_TUNES];
  char text[256]; /* canonical "BM=8,BN=128" */
} Setting;

static int fail(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "aot: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return 1;
}

/* "kernels/softmax.tpk" -> "softmax" (letters, digits, _ only). */
static void file_id(const char *path, char *out, size_t n) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t k = 0;
  for (const char *c = base; *c && *c != '.' && k + 1 < n; c++)
    out[k++] = ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')) ? *c : '_';
  out[k] = 0;
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b ? b + 1 : path;
}

/* s->text from s->tunes, in the runtime's form (tpk_tune_format). */
static void canonical(Setting *s, const TpkFunc *f) {
  int64_t values[MAX_TUNES];
  for (int i = 0; i < s->n; i++) values[i] = s->tunes[i].value;
  TpkStr t = {0};
  tpk_tune_format(&t, f, values);
  snprintf(s->text, sizeof s->text, "%s", t.data ? t.data : "");
  tpk_str_free(&t);
}

static TpkTuneTable tuned; /* kernels/tuned.tsv */
static char *tuned_text;

/* The settings of kernel f (unbound, as checked): its defaults first, then
 * the distinct settings the table ships for it. */
static int tune_settings(const TpkFunc *f, Setting *out) {
  if (f->ntunes > MAX_TUNES) return 0; /* not compiled ahead of time: the JIT serves it */
  Setting *d = &out[0];
  d->n = f->ntunes;
  for (int i = 0; i < d->n; i++) d->tunes[i] = (TpkBinding){f->tunes[i].name, f->tunes[i].value};
  canonical(d, f);
  int n = 1;
  if (f->ntunes == 0) return n;
  uint64_t hash = tpk_tune_ir_hash(f);
  for (int r = 0; r < tuned.nrows && n < MAX_SETTINGS; r++) {
    const TpkTuneRow *row = &tuned.rows[r];
    int64_t values[TPK_TUNE_MAX_TUNABLES];
    if (row->text || strcmp(row->kernel, f->name) != 0 || row->ir_hash != hash ||
        !tpk_tune_parse(f, row->tunes, strlen(row->tunes), values))
      continue;
    Setting *s = &out[n];
    s->n = d->n;
    for (int i = 0; i < s->n; i++) s->tunes[i] = (TpkBinding){f->tunes[i].name, values[i]};
    canonical(s, f);
    bool seen = false;
    for (int k = 0; k < n; k++) seen |= strcmp(out[k].text, s->text) == 0;
    if (!seen) n++;
  }
  return n;
}

static int load_tuned(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail("cannot read %s%s", path, "");
  TpkStr s = {0};
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) tpk_str_putn(&s, buf, got);
  fclose(f);
  tpk_str_puts(&s, "");
  tuned_text = tpk_str_take(&s);
  TpkError err = {0};
  if (!tuned_text || tpk_tune_table_parse(&tuned, tuned_text, strlen(tuned_text), path, &err) != TPK_OK)
    return fail("%s%s", err.message, "");
  return 0;
}

static TpkStatus load(const char *path, TpkSource *src, TpkModule **m) {
  TpkError err = {0};
  if (tpk_source_read(src, path, &err) != TPK_OK) {
    fail("%s%s", err.message, "");
    return err.code;
  }
  TpkDiags diags;
  tpk_diags_init(&diags, src);
  TpkStatus st = tpk_compile_source(src, NULL, &diags, m);
  if (st != TPK_OK) {
    TpkStr s = {0};
    tpk_diags_render(&s, &diags);
    fail("%s%s", s.data ? s.data : "the file did not check", "");
    tpk_str_free(&s);
  }
  tpk_diags_free(&diags);
  return st;
}

static int emit_file(const char *path, const char *out_path) {
  TpkSource src;
  TpkModule *m = NULL;
  if (load(path, &src, &m) != TPK_OK) return 1;
  char id[64];
  file_id(path, id, sizeof id);
  TpkStr out = {0};
  int status = 0, emitted = 0;
  for (int i = 0; i < m->nfuncs && !status; i++) {
    Setting settings[MAX_SETTINGS];
    int ns = tune_settings(m->funcs[i], settings);
    for (int s = 0; s < ns && !status; s++) {
      /* Each setting binds the kernel's tunables on its IR; shapes stay
       * symbolic: the code serves every size. */
      TpkModule *one = tpk_module_new(m->funcs[i]->name);
      TpkFunc *g = NULL;
      TpkError err = {0};
      char entry[200];
      snprintf(entry, sizeof entry, "tpk_std_%s_%s_%d", id, m->funcs[i]->name, s);
      TpkTarget host = tpk_target_host(tpk_parse_bytes(getenv("TPK_HOST_VMEM")));
      int64_t ws;
      if (!one) status = fail("out of memory%s%s", "", "");
      else if (tpk_bind(one, m->funcs[i], settings[s].tunes, settings[s].n, &g, &err) != TPK_OK ||
               tpk_lower_to_c(g, &host, entry, src.text, emitted ? TPK_EMIT_NO_PRELUDE : 0, &out, &ws, &err) != TPK_OK)
        status = fail("%s: %s", path, err.message);
      emitted++;
      if (one) tpk_module_free(one);
    }
  }
  if (!status) {
    FILE *f = fopen(out_path, "w");
    if (!f || fwrite(out.data ? out.data : "", 1, out.len, f) != out.len || fclose(f) != 0)
      status = fail("cannot write %s%s", out_path, "");
  }
  tpk_str_free(&out);
  tpk_module_free(m);
  tpk_source_free(&src);
  return status;
}

/* text as a C string literal, split into lines. */
static void c_string(TpkStr *s, const char *text, size_t len) {
  tpk_str_puts(s, "\"");
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n') tpk_str_puts(s, i + 1 < len ? "\\n\"\n    \"" : "\\n");
    else if (c == '\\' || c == '"') tpk_str_printf(s, "\\%c", c);
    else if (c == '?') tpk_str_puts(s, "\\?"); /* no trigraphs */
    else if (c < 32 || c >= 127) tpk_str_printf(s, "\\%03o", c);
    else tpk_str_putc(s, (char)c);
  }
  tpk_str_puts(s, "\"");
}

static int emit_registry(const char *out_path, int nfiles, char **paths) {
  TpkStr decl = {0}, files = {0}, entries = {0};
  int status = 0, nentries = 0;
  tpk_str_puts(&decl, "/* generated by kernels/aot.c: the standard kernels compiled ahead of time */\n"
                      "#include \"host/std.h\"\n\n");
  for (int fi = 0; fi < nfiles && !status; fi++) {
    TpkSource src;
    TpkModule *m = NULL;
    if (load(paths[fi], &src, &m) != TPK_OK) {
      status = 1;
      break;
    }
    char id[64];
    file_id(paths[fi], id, sizeof id);
    tpk_str_printf(&files, "  {\"%s\", ", base_name(paths[fi]));
    c_string(&files, src.text, src.len);
    tpk_str_printf(&files, ", %zu},\n", src.len);
    for (int i = 0; i < m->nfuncs; i++) {
      Setting settings[MAX_SETTINGS];
      int ns = tune_settings(m->funcs[i], settings);
      TpkFuncHash h = tpk_func_hash(m->funcs[i]);
      for (int s = 0; s < ns; s++) {
        char entry[200];
        snprintf(entry, sizeof entry, "tpk_std_%s_%s_%d", id, m->funcs[i]->name, s);
        tpk_str_printf(&decl, "int %s(const TpkPrims *, void *const *, const int64_t *, void *, char *);\n", entry);
        tpk_str_printf(&decl, "int64_t %s_workspace(const int64_t *);\n", entry);
        tpk_str_printf(&entries, "  {%d, \"%s\", \"%s\", %s, %s_workspace, 0x%016llxu, 0x%016llxu},\n", fi,
                       m->funcs[i]->name, settings[s].text, entry, entry, (unsigned long long)h.lo,
                       (unsigned long long)h.hi);
        nentries++;
      }
    }
    tpk_module_free(m);
    tpk_source_free(&src);
  }
  if (!status) {
    TpkStr all = {0};
    tpk_str_printf(&all, "%s\nconst TpkStdFile tpk_std_files[] = {\n%s  {0, 0, 0}\n};\nconst int tpk_std_nfiles = %d;\n\n",
                   decl.data ? decl.data : "", files.data ? files.data : "", nfiles);
    tpk_str_printf(&all, "const TpkStdEntry tpk_std_entries[] = {\n%s  {0, 0, 0, 0, 0, 0, 0}\n};\nconst int tpk_std_nentries = %d;\n",
                   entries.data ? entries.data : "", nentries);
    tpk_str_puts(&all, "\nconst char tpk_std_tuned_tsv[] =\n    ");
    c_string(&all, tuned_text, strlen(tuned_text));
    tpk_str_puts(&all, ";\n");
    FILE *f = fopen(out_path, "w");
    if (all.failed || !f || fwrite(all.data, 1, all.len, f) != all.len || fclose(f) != 0)
      status = fail("cannot write %s%s", out_path, "");
    tpk_str_free(&all);
  }
  tpk_str_free(&decl);
  tpk_str_free(&files);
  tpk_str_free(&entries);
  return status;
}

int main(int argc, char **argv) {
  int status = 2;
  if (argc == 5 && strcmp(argv[1], "c") == 0) status = load_tuned(argv[2]) ? 1 : emit_file(argv[3], argv[4]);
  else if (argc >= 4 && strcmp(argv[1], "registry") == 0)
    status = load_tuned(argv[2]) ? 1 : emit_registry(argv[3], argc - 4, argv + 4);
  else fprintf(stderr, "usage: aot c TUNED.tsv FILE.tpk OUT.c | aot registry TUNED.tsv OUT.c FILE.tpk...\n");
  tpk_tune_table_free(&tuned);
  free(tuned_text);
  return status;
}
