/*
 * tune.c — autotuning (runtime/tune.h): keys, the disk cache of winners, the
 * shipped defaults table, and the search itself.
 *
 * On a simulated chip a configuration costs a check, the host's passes and
 * a schedule (sim/timing.c): no C is generated or compiled, so a matmul's
 * space of a few dozen block sizes is searched in well under a second. On
 * the host there is no model to ask: each configuration is compiled through
 * the ordinary launch path and measured.
 */
#include "runtime/tune.h"
#include "runtime/internal.h"
#include "base/files.h"
#include "base/refnum.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
  DEFAULT_BUDGET = 512,   /* exhaustive search up to this many configurations */
  LAUNCH_BUDGET = 64,     /* ... when a launch searches (tpk_tune_on_chip) */
  DEFAULT_REPEAT = 5,     /* host: timed launches per configuration */
  MAX_CACHE_FILE = 4096,  /* a cache entry is a few hundred bytes; larger files are not ours */
  MAX_PARAMS = 256,       /* as tpk_kernel_launch */
  MAX_SYMS = 64
};

static const char CACHE_MAGIC[] = "tpk-tune 1\n";

/* ---- Hashing and keys ------------------------------------------------------------- */

/* Locations move when a comment is added above the kernel; the kernel is
 * the same, and so is its best configuration: the structural hash leaves
 * them out (and the name, which the key holds on its own). 64 bits are
 * enough here: a row is used only when the kernel's name matches too, and
 * a wrong match would pick a declared, valid configuration. */
uint64_t tpk_tune_ir_hash(const TpkFunc *f) { return tpk_func_hash(f).lo; }

TpkStatus tpk_tune_device(const char *name, char *out, const TpkChip **chip, TpkError *err) {
  if (chip) *chip = NULL;
  if (!name) return tpk_error(err, TPK_ERR_INVALID, "no device");
  if (strcmp(name, "host") == 0) {
    snprintf(out, 64, "host");
    return TPK_OK;
  }
  if (strncmp(name, "sim:", 4) != 0)
    return tpk_error(err, TPK_ERR_INVALID, "unknown device '%s'; devices are \"host\" and \"sim:<chip>\" (e.g. sim:v5e)",
                     name);
  TpkSimTopology topo;
  TpkError terr = {0};
  if (tpk_sim_topology_parse(name + 4, &topo, &terr) != TPK_OK)
    return tpk_error(err, terr.code, "device '%s': %s", name, terr.message);
  if (topo.chips != 1)
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "device '%s': simulating %lld chips over ICI is not supported yet; use one chip, e.g. sim:%s",
                     name, (long long)topo.chips, topo.chip->name);
  snprintf(out, 64, "sim:%s", topo.chip->name);
  if (chip) *chip = topo.chip;
  return TPK_OK;
}

/* "M, N, K" into s. */
static void list_symbols(TpkStr *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++) tpk_str_printf(s, "%s%s", i ? ", " : "", names[i]);
  if (!n) tpk_str_puts(s, "(none)");
}

TpkStatus tpk_tune_key(TpkTuneKey *key, const TpkFunc *f, uint64_t ir_hash, const TpkBinding *syms, int nsyms,
                       const char *device, TpkError *err) {
  memset(key, 0, sizeof *key);
  if (strlen(f->name) >= sizeof key->kernel) return tpk_error(err, TPK_ERR_INVALID, "kernel name '%s' is too long", f->name);
  snprintf(key->kernel, sizeof key->kernel, "%s", f->name);
  key->ir_hash = ir_hash;
  TpkStatus st = tpk_tune_device(device, key->device, NULL, err);
  if (st != TPK_OK) return st;
  const char *names[MAX_SYMS];
  int n = tpk_func_symbols(f, names, MAX_SYMS);
  if (n > MAX_SYMS) return tpk_error(err, TPK_ERR_INVALID, "kernel '%s' has more than %d shape symbols", f->name, MAX_SYMS);
  for (int i = 0; i < nsyms; i++) {
    bool known = false;
    for (int j = 0; j < n; j++) known |= strcmp(names[j], syms[i].name) == 0;
    for (int j = 0; j < i; j++)
      if (strcmp(syms[j].name, syms[i].name) == 0)
        return tpk_error(err, TPK_ERR_INVALID, "shape symbol %s is given twice", syms[i].name);
    if (!known) {
      TpkStr s = {0};
      list_symbols(&s, names, n);
      tpk_error(err, TPK_ERR_INVALID, "kernel '%s' has no shape symbol '%s'; its symbols are %s", f->name, syms[i].name,
                s.data ? s.data : "?");
      tpk_str_free(&s);
      return TPK_ERR_INVALID;
    }
  }
  TpkStr shapes = {0};
  for (int j = 0; j < n; j++) {
    int found = -1;
    for (int i = 0; i < nsyms; i++)
      if (strcmp(syms[i].name, names[j]) == 0) found = i;
    if (found < 0) {
      TpkStr s = {0};
      list_symbols(&s, names, n);
      tpk_error(err, TPK_ERR_INVALID, "kernel '%s' needs the size of shape symbol %s (its symbols are %s)", f->name,
                names[j], s.data ? s.data : "?");
      tpk_str_free(&s);
      tpk_str_free(&shapes);
      return TPK_ERR_INVALID;
    }
    tpk_str_printf(&shapes, "%s%s=%lld", j ? "," : "", names[j], (long long)syms[found].value);
  }
  bool fits = !shapes.failed && shapes.len < sizeof key->shapes;
  if (fits && shapes.data) memcpy(key->shapes, shapes.data, shapes.len + 1);
  tpk_str_free(&shapes);
  return fits ? TPK_OK : tpk_error(err, TPK_ERR_INVALID, "kernel '%s': too many shape symbols for a tuning key", f->name);
}

/* ---- Configurations as text ---------------------------------------------------------- */

void tpk_tune_format(TpkStr *out, const TpkFunc *f, const int64_t *values) {
  for (int i = 0; i < f->ntunes; i++) tpk_str_printf(out, "%s%s=%lld", i ? "," : "", f->tunes[i].name, (long long)values[i]);
}

static bool parse_uint(const char *s, size_t n, int64_t *out) {
  if (n == 0 || n > 18) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

bool tpk_tune_parse(const TpkFunc *f, const char *text, size_t len, int64_t *values) {
  if (f->ntunes > TPK_TUNE_MAX_TUNABLES) return false;
  bool seen[TPK_TUNE_MAX_TUNABLES] = {false};
  const char *p = text, *end = text + len;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *item_end = comma ? comma : end;
    const char *eq = memchr(p, '=', (size_t)(item_end - p));
    if (!eq) return false;
    int t = -1;
    for (int i = 0; i < f->ntunes; i++)
      if (strlen(f->tunes[i].name) == (size_t)(eq - p) && strncmp(f->tunes[i].name, p, (size_t)(eq - p)) == 0) t = i;
    int64_t v;
    if (t < 0 || seen[t] || !parse_uint(eq + 1, (size_t)(item_end - eq - 1), &v)) return false;
    if (!tpk_tune_allows(&f->tunes[t], v)) return false;
    seen[t] = true;
    values[t] = v;
    if (!comma) break;
    p = comma + 1;
    if (p == end) return false; /* a trailing comma */
  }
  for (int i = 0; i < f->ntunes; i++)
    if (!seen[i]) return false;
  return true;
}

static void config_from_values(TpkTuneConfig *out, const TpkFunc *f, const int64_t *values, double seconds,
                               const char *from) {
  out->n = f->ntunes;
  for (int i = 0; i < f->ntunes; i++) out->tunes[i] = (TpkBinding){f->tunes[i].name, values[i]};
  out->seconds = seconds;
  out->from = from;
  out->near = NULL;
}

/* ---- Files ------------------------------------------------------------------------------ */

/* The whole file if it is a regular file of at most `max` bytes (heap,
 * NUL-terminated); with `private_only`, also owned by this user and
 * writable by no one else. NULL otherwise; errno ENOENT when it is absent. */
static char *read_small_file(const char *path, size_t max, bool private_only, size_t *len) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) goto done;
  if (private_only && (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))) goto done;
  buf = malloc((size_t)st.st_size + 1);
  size_t n = 0;
  while (buf && n < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  if (buf && n != (size_t)st.st_size) {
    free(buf);
    buf = NULL;
  }
  if (buf) {
    buf[n] = 0;
    if (len) *len = n;
  }
done:
  close(fd);
  if (!buf) errno = EINVAL;
  return buf;
}

/* ---- The cache ---------------------------------------------------------------------------- */

char *tpk_tune_cache_root(void) { return tpk_cache_root(); }

/* What identifies an entry, written at the top of its file and compared
 * whole when it is read back. */
static void cache_head(TpkStr *s, const TpkTuneKey *key) {
  tpk_str_puts(s, CACHE_MAGIC);
  tpk_str_printf(s, "tpk %s\nkernel %s\nir %016llx\ndevice %s\nshapes %s\n", TPK_VERSION, key->kernel,
                 (unsigned long long)key->ir_hash, key->device, key->shapes);
}

char *tpk_tune_cache_path(const char *root, const TpkTuneKey *key) {
  TpkStr head = {0};
  cache_head(&head, key);
  if (head.failed) {
    tpk_str_free(&head);
    return NULL;
  }
  char name[64];
  snprintf(name, sizeof name, "tune/%016llx.tune", (unsigned long long)tpk_hash_bytes(head.data, head.len));
  tpk_str_free(&head);
  return tpk_path_join(root, name);
}

TpkStatus tpk_tune_cache_store(const char *root, const TpkTuneKey *key, const TpkFunc *f, const int64_t *values,
                               double seconds, char **path_out, TpkError *err) {
  if (path_out) *path_out = NULL;
  if (!root || !*root) return tpk_error(err, TPK_ERR_INVALID, "no tuning cache folder (TPK_CACHE_DIR is empty and no home is known)");
  char *dir = tpk_path_join(root, "tune");
  char *path = tpk_tune_cache_path(root, key);
  TpkStr text = {0};
  cache_head(&text, key);
  tpk_str_puts(&text, "tunes ");
  tpk_tune_format(&text, f, values);
  tpk_str_printf(&text, "\nseconds %.9g\nend\n", seconds);
  TpkStatus st = TPK_OK;
  if (!dir || !path || text.failed) st = tpk_error(err, TPK_ERR_NOMEM, "out of memory writing the tuning cache");
  else if (!tpk_make_dirs(dir)) st = tpk_error(err, TPK_ERR_IO, "cannot create the tuning cache folder %s: %s", dir, strerror(errno));
  else st = tpk_file_write_bytes(path, 0600, text.data, text.len, err);
  tpk_str_free(&text);
  free(dir);
  if (st == TPK_OK && path_out) *path_out = path;
  else free(path);
  return st;
}

/* The text after `prefix` up to the end of its line, at *p; advances *p past
 * the line. */
static bool take_line(const char **p, const char *prefix, const char **value, size_t *len) {
  size_t n = strlen(prefix);
  if (strncmp(*p, prefix, n) != 0) return false;
  const char *nl = strchr(*p + n, '\n');
  if (!nl) return false;
  *value = *p + n;
  *len = (size_t)(nl - *value);
  *p = nl + 1;
  return true;
}

bool tpk_tune_cache_load(const char *root, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out) {
  if (!root || !*root || !key->ir_hash || f->ntunes > TPK_TUNE_MAX_TUNABLES) return false;
  char *path = tpk_tune_cache_path(root, key);
  if (!path) return false;
  size_t len = 0;
  char *text = read_small_file(path, MAX_CACHE_FILE, true, &len);
  free(path);
  if (!text) return false;
  bool ok = strlen(text) == len; /* no NUL inside */
  TpkStr head = {0};
  cache_head(&head, key);
  /* another key's entry (a hash collision of names) or an older tpk's is
   * not this one */
  ok = ok && !head.failed && strncmp(text, head.data, head.len) == 0;
  const char *p = text + (ok ? head.len : 0), *v;
  size_t n;
  int64_t values[TPK_TUNE_MAX_TUNABLES];
  double seconds = 0;
  ok = ok && take_line(&p, "tunes ", &v, &n) && tpk_tune_parse(f, v, n, values);
  if (ok && take_line(&p, "seconds ", &v, &n)) {
    char num[64], *end;
    ok = n > 0 && n < sizeof num;
    if (ok) {
      memcpy(num, v, n);
      num[n] = 0;
      seconds = strtod(num, &end);
      ok = *end == 0 && isfinite(seconds) && seconds >= 0;
    }
  } else {
    ok = false;
  }
  ok = ok && strcmp(p, "end\n") == 0; /* a truncated file lacks it */
  if (ok) config_from_values(out, f, values, seconds, "cache");
  tpk_str_free(&head);
  free(text);
  return ok;
}

/* ---- The defaults table ------------------------------------------------------------------- */

static bool is_ident(const char *s, size_t n) {
  if (!n || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
  for (size_t i = 1; i < n; i++)
    if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
      return false;
  return true;
}

/* NAME=INTEGER[,NAME=INTEGER...] */
static bool is_assignments(const char *s, size_t n) {
  const char *p = s, *end = s + n;
  if (!n) return false;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *item_end = comma ? comma : end;
    const char *eq = memchr(p, '=', (size_t)(item_end - p));
    int64_t v;
    if (!eq || !is_ident(p, (size_t)(eq - p)) || !parse_uint(eq + 1, (size_t)(item_end - eq - 1), &v)) return false;
    if (!comma) return true;
    p = comma + 1;
  }
  return false; /* a trailing comma */
}

static bool table_grow(TpkTuneTable *t) {
  if (t->nrows < t->cap) return true;
  int cap = t->cap ? t->cap * 2 : 16;
  TpkTuneRow *rows = realloc(t->rows, (size_t)cap * sizeof *rows);
  if (!rows) return false;
  t->rows = rows;
  t->cap = cap;
  return true;
}

static void row_free(TpkTuneRow *r) {
  free(r->text);
  free(r->kernel);
  free(r->file);
  free(r->device);
  free(r->shapes);
  free(r->tunes);
  memset(r, 0, sizeof *r);
}

void tpk_tune_table_free(TpkTuneTable *t) {
  for (int i = 0; i < t->nrows; i++) row_free(&t->rows[i]);
  free(t->rows);
  memset(t, 0, sizeof *t);
}

/* One row's seven fields, checked. */
static TpkStatus parse_row(TpkTuneRow *row, const char *line, size_t len, const char *name, int lineno, TpkError *err) {
  const char *field[8];
  size_t flen[8];
  int nf = 0;
  for (const char *p = line, *end = line + len;;) {
    const char *tab = memchr(p, '\t', (size_t)(end - p));
    if (nf < 8) {
      field[nf] = p;
      flen[nf] = (size_t)((tab ? tab : end) - p);
    }
    nf++;
    if (!tab) break;
    p = tab + 1;
  }
  if (nf != 7)
    return tpk_error(err, TPK_ERR_PARSE,
                     "%s:%d: expected 7 tab-separated fields (kernel, ir-hash, file, device, shapes, tunables, seconds), got %d",
                     name, lineno, nf);
  const char *what = NULL;
  char hex[17], dev[64], num[64];
  uint64_t hash = 0;
  double seconds = 0;
  if (!is_ident(field[0], flen[0])) what = "the kernel name is not an identifier";
  if (!what) {
    bool ok = flen[1] == 16;
    for (size_t i = 0; ok && i < 16; i++) ok = (field[1][i] >= '0' && field[1][i] <= '9') || (field[1][i] >= 'a' && field[1][i] <= 'f');
    if (ok) {
      memcpy(hex, field[1], 16);
      hex[16] = 0;
      hash = strtoull(hex, NULL, 16);
    } else {
      what = "the IR hash is not 16 lowercase hex digits";
    }
  }
  if (!what && !flen[2]) what = "the file is empty";
  if (!what) {
    char given[64];
    TpkError derr = {0};
    snprintf(given, sizeof given, "%.*s", (int)(flen[3] < 63 ? flen[3] : 63), field[3]);
    if (flen[3] >= 63 || tpk_tune_device(given, dev, NULL, &derr) != TPK_OK || strcmp(dev, given) != 0)
      what = "the device is not \"host\" or \"sim:<chip>\" with the chip's short name";
  }
  if (!what && !is_assignments(field[4], flen[4])) what = "the shapes are not NAME=INTEGER[,NAME=INTEGER...]";
  if (!what && !is_assignments(field[5], flen[5])) what = "the tunables are not NAME=INTEGER[,NAME=INTEGER...]";
  if (!what) {
    char *end;
    snprintf(num, sizeof num, "%.*s", (int)(flen[6] < 63 ? flen[6] : 63), field[6]);
    seconds = strtod(num, &end);
    if (!flen[6] || flen[6] >= 63 || *end || !isfinite(seconds) || seconds < 0) what = "the seconds are not a number >= 0";
  }
  if (what) return tpk_error(err, TPK_ERR_PARSE, "%s:%d: %s", name, lineno, what);
  row->kernel = strndup(field[0], flen[0]);
  row->file = strndup(field[2], flen[2]);
  row->device = strndup(field[3], flen[3]);
  row->shapes = strndup(field[4], flen[4]);
  row->tunes = strndup(field[5], flen[5]);
  row->ir_hash = hash;
  row->seconds = seconds;
  if (!row->kernel || !row->file || !row->device || !row->shapes || !row->tunes) {
    row_free(row);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory reading %s", name);
  }
  return TPK_OK;
}

TpkStatus tpk_tune_table_parse(TpkTuneTable *t, const char *text, size_t len, const char *name, TpkError *err) {
  memset(t, 0, sizeof *t);
  int lineno = 0;
  for (const char *p = text, *end = text + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    lineno++;
    if (memchr(p, 0, n)) {
      tpk_tune_table_free(t);
      return tpk_error(err, TPK_ERR_PARSE, "%s:%d: a NUL byte", name, lineno);
    }
    if (!table_grow(t)) {
      tpk_tune_table_free(t);
      return tpk_error(err, TPK_ERR_NOMEM, "out of memory reading %s", name);
    }
    TpkTuneRow *row = &t->rows[t->nrows];
    memset(row, 0, sizeof *row);
    bool blank = true;
    for (size_t i = 0; i < n; i++) blank &= p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
    if (blank || p[0] == '#') {
      row->text = strndup(p, n);
      if (!row->text) {
        tpk_tune_table_free(t);
        return tpk_error(err, TPK_ERR_NOMEM, "out of memory reading %s", name);
      }
    } else {
      TpkStatus st = parse_row(row, p, n, name, lineno, err);
      if (st != TPK_OK) {
        tpk_tune_table_free(t);
        return st;
      }
    }
    t->nrows++;
    p = nl ? nl + 1 : end;
  }
  return TPK_OK;
}

bool tpk_tune_table_find(const TpkTuneTable *t, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out) {
  if (!t || !key->ir_hash || f->ntunes > TPK_TUNE_MAX_TUNABLES) return false;
  for (int i = 0; i < t->nrows; i++) {
    const TpkTuneRow *r = &t->rows[i];
    if (r->text || r->ir_hash != key->ir_hash || strcmp(r->kernel, key->kernel) != 0 ||
        strcmp(r->device, key->device) != 0 || strcmp(r->shapes, key->shapes) != 0)
      continue;
    int64_t values[TPK_TUNE_MAX_TUNABLES];
    if (!tpk_tune_parse(f, r->tunes, strlen(r->tunes), values)) continue;
    config_from_values(out, f, values, r->seconds, "defaults");
    return true;
  }
  return false;
}

/* How far sizes `a` are from sizes `b` (both "M=64,K=32"): the sum over
 * their symbols of |log2(a / b)|, or -1 when they name other symbols, in
 * another order, or a size differs by more than NEAR_FACTOR (or is 0). */
enum { NEAR_FACTOR = 4 };
static double shapes_distance(const char *a, const char *b) {
  double sum = 0;
  for (;;) {
    size_t na = strcspn(a, "="), nb = strcspn(b, "=");
    if (na != nb || strncmp(a, b, na) != 0 || !a[na] || !b[nb]) return -1;
    char *ea, *eb;
    double va = strtod(a + na + 1, &ea), vb = strtod(b + nb + 1, &eb);
    if (va <= 0 || vb <= 0 || va > vb * NEAR_FACTOR || vb > va * NEAR_FACTOR) return -1;
    sum += fabs(log2(va / vb));
    if (*ea != *eb || (*ea != ',' && *ea)) return -1;
    if (!*ea) return sum;
    a = ea + 1;
    b = eb + 1;
  }
}

bool tpk_tune_table_nearest(const TpkTuneTable *t, const TpkTuneKey *key, const TpkFunc *f, TpkTuneConfig *out) {
  if (!t || !key->ir_hash || f->ntunes > TPK_TUNE_MAX_TUNABLES) return false;
  const TpkTuneRow *best = NULL;
  double best_distance = 0;
  int64_t values[TPK_TUNE_MAX_TUNABLES], best_values[TPK_TUNE_MAX_TUNABLES];
  for (int i = 0; i < t->nrows; i++) {
    const TpkTuneRow *r = &t->rows[i];
    if (r->text || r->ir_hash != key->ir_hash || strcmp(r->kernel, key->kernel) != 0 || strcmp(r->device, key->device) != 0)
      continue;
    double d = shapes_distance(r->shapes, key->shapes);
    if (d < 0 || (best && d >= best_distance) || !tpk_tune_parse(f, r->tunes, strlen(r->tunes), values)) continue;
    best = r;
    best_distance = d;
    memcpy(best_values, values, sizeof values);
  }
  if (!best) return false;
  config_from_values(out, f, best_values, best->seconds, "defaults");
  if (best_distance > 0) out->near = best->shapes;
  return true;
}

TpkStatus tpk_tune_table_put(TpkTuneTable *t, const TpkTuneKey *key, const char *file, const char *tunes,
                             double seconds, TpkError *err) {
  TpkTuneRow row = {.kernel = strdup(key->kernel), .file = strdup(file), .device = strdup(key->device),
                    .shapes = strdup(key->shapes), .tunes = strdup(tunes), .ir_hash = key->ir_hash, .seconds = seconds};
  if (!row.kernel || !row.file || !row.device || !row.shapes || !row.tunes) {
    row_free(&row);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  }
  for (int i = 0; i < t->nrows; i++) {
    TpkTuneRow *r = &t->rows[i];
    if (!r->text && strcmp(r->kernel, row.kernel) == 0 && strcmp(r->file, row.file) == 0 &&
        strcmp(r->device, row.device) == 0 && strcmp(r->shapes, row.shapes) == 0) {
      row_free(r);
      *r = row;
      return TPK_OK;
    }
  }
  if (!table_grow(t)) {
    row_free(&row);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  }
  t->rows[t->nrows++] = row;
  return TPK_OK;
}

char *tpk_tune_table_render(const TpkTuneTable *t) {
  TpkStr s = {0};
  for (int i = 0; i < t->nrows; i++) {
    const TpkTuneRow *r = &t->rows[i];
    if (r->text) tpk_str_printf(&s, "%s\n", r->text);
    else
      tpk_str_printf(&s, "%s\t%016llx\t%s\t%s\t%s\t%s\t%.6g\n", r->kernel, (unsigned long long)r->ir_hash, r->file,
                     r->device, r->shapes, r->tunes, r->seconds);
  }
  if (s.failed) {
    tpk_str_free(&s);
    return NULL;
  }
  return tpk_str_take(&s);
}

static const char TABLE_HEADER[] =
    "# Tuned configurations shipped with tpk, used when the tuning cache has none.\n"
    "# Written by `tpk tune FILE --shape ... --device ... --save-default kernels/tuned.tsv`.\n"
    "# kernel\tir-hash\tfile\tdevice\tshapes\ttunables\tseconds";

enum { TABLE_MAX = 64 << 20 }; /* bytes of a defaults table we read */

TpkStatus tpk_tune_defaults_save(const char *path, const TpkTuneKey *key, const char *file, const char *tunes,
                                 double seconds, TpkError *err) {
  size_t len = 0;
  errno = 0;
  char *text = read_small_file(path, TABLE_MAX, false, &len);
  if (!text && errno != ENOENT)
    return tpk_error(err, TPK_ERR_IO, "cannot read %s (not a regular file, or larger than %d MiB)", path, TABLE_MAX >> 20);
  TpkTuneTable t;
  TpkStatus st = tpk_tune_table_parse(&t, text ? text : TABLE_HEADER, text ? len : strlen(TABLE_HEADER), path, err);
  free(text);
  if (st != TPK_OK) return st;
  st = tpk_tune_table_put(&t, key, file, tunes, seconds, err);
  char *out = st == TPK_OK ? tpk_tune_table_render(&t) : NULL;
  if (st == TPK_OK && !out) st = tpk_error(err, TPK_ERR_NOMEM, "out of memory writing %s", path);
  if (st == TPK_OK) st = tpk_file_write_bytes(path, 0666, out, strlen(out), err);
  free(out);
  tpk_tune_table_free(&t);
  return st;
}

/* ---- Lookup --------------------------------------------------------------------------------- */

bool tpk_tune_lookup(const TpkTuneKey *key, const TpkFunc *f, const char *root, const TpkTuneTable *defaults,
                     TpkTuneConfig *out) {
  char *own = root ? NULL : tpk_tune_cache_root();
  const char *dir = root ? root : own;
  TpkTuneConfig c;
  bool found = dir && *dir && tpk_tune_cache_load(dir, key, f, &c);
  free(own);
  if (!found) found = tpk_tune_table_nearest(defaults, key, f, &c);
  if (found) *out = c;
  return found;
}

/* ---- Declared defaults fitted to the sizes ------------------------------------------------ */

/* An upper bound of the i32 scalar v given the sizes, or -1 when unknown. */
static int64_t extent_bound(const TpkValue *v, const TpkBinding *syms, int nsyms, int depth) {
  const TpkOp *op = v->def;
  int64_t c;
  if (!op || depth > 16) return -1;
  if (tpk_value_const_int(v, &c)) return c;
  if (op->opcode == TPK_OP_SYM) {
    const char *name = tpk_op_str(op, "name", "");
    for (int i = 0; i < nsyms; i++)
      if (strcmp(syms[i].name, name) == 0) return syms[i].value;
    return -1;
  }
  if (op->opcode == TPK_OP_MIN) {
    int64_t a = extent_bound(op->in[0], syms, nsyms, depth + 1), b = extent_bound(op->in[1], syms, nsyms, depth + 1);
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
  }
  return -1;
}

/* need[t]: the largest extent tunable t tiles (`cdiv(X, T)`, the tile count
 * of `tiles(X, T)`); 0 when it tiles none, -1 when some extent is unknown. */
static void tiled_extents(const TpkFunc *f, const TpkBlock *b, const TpkBinding *syms, int nsyms, int64_t *need) {
  for (const TpkOp *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) tiled_extents(f, op->regions[r], syms, nsyms, need);
    if (op->opcode != TPK_OP_CDIV || !op->in[1]->def || op->in[1]->def->opcode != TPK_OP_SYM) continue;
    const char *name = tpk_op_str(op->in[1]->def, "name", "");
    for (int t = 0; t < f->ntunes; t++) {
      if (strcmp(f->tunes[t].name, name) != 0 || need[t] < 0) continue;
      int64_t x = extent_bound(op->in[0], syms, nsyms, 0);
      need[t] = x < 0 ? -1 : x > need[t] ? x : need[t];
    }
  }
}

bool tpk_tune_fit_defaults(const TpkFunc *f, const TpkBinding *syms, int nsyms, int64_t *values) {
  if (f->ntunes > TPK_TUNE_MAX_TUNABLES) return false;
  int64_t need[TPK_TUNE_MAX_TUNABLES];
  for (int t = 0; t < f->ntunes; t++) need[t] = 0, values[t] = f->tunes[t].value;
  tiled_extents(f, f->body, syms, nsyms, need);
  bool changed = false;
  for (int t = 0; t < f->ntunes; t++) {
    const TpkTune *tu = &f->tunes[t];
    if (need[t] <= 0 || need[t] >= tu->value) continue; /* unknown, untiled, or the default fits */
    for (int c = 0; c < tu->nchoices; c++)
      if (tu->choices[c] >= need[t] && tu->choices[c] < values[t]) values[t] = tu->choices[c];
    changed |= values[t] != tu->value;
  }
  return changed;
}

/* ---- The search ------------------------------------------------------------------------------ */

typedef struct Host {
  TpkProgram *prog;
  TpkKernel *k;
  TpkBuffer *bufs[MAX_PARAMS];
  double scalars[MAX_PARAMS];
  TpkNamedInt syms[MAX_SYMS];
  int nsyms, nparams;
} Host;

typedef struct Search {
  TpkProgram *prog;
  const TpkTuneOptions *o;
  TpkTuneReport *r;
  const TpkFunc *f;
  const TpkChip *chip; /* NULL: the host */
  Host host;
  int nchoices[TPK_TUNE_MAX_TUNABLES];
  const int64_t *choices[TPK_TUNE_MAX_TUNABLES];
  int64_t fixed[TPK_TUNE_MAX_TUNABLES]; /* storage for held tunables' single choice */
  TpkBinding binds[MAX_SYMS];
  int nbinds;
  bool out_of_memory;
} Search;

/* One line of an error message for a progress line: the diagnostic's line
 * when there is one (`file:3:5: error: ...`), else the first. */
static void reason_from(char *out, size_t n, const char *msg) {
  const char *line = strstr(msg, ": error: ");
  if (line) {
    while (line > msg && line[-1] != '\n') line--;
  } else {
    line = msg;
    while (*line == '\n') line++;
  }
  size_t len = strcspn(line, "\n");
  snprintf(out, n, "%.*s", (int)len, line);
}

static void time_on_chip(Search *s, TpkTunePoint *p) {
  TpkBinding binds[MAX_SYMS + TPK_TUNE_MAX_TUNABLES];
  int n = 0;
  for (int i = 0; i < s->nbinds; i++) binds[n++] = s->binds[i];
  for (int i = 0; i < s->f->ntunes; i++) binds[n++] = (TpkBinding){s->f->tunes[i].name, p->values[i]};
  TpkSimReport rep;
  TpkError err = {0};
  p->status = tpk_sim_time_kernel(s->f, binds, n, s->chip, &rep, &err);
  if (p->status == TPK_OK) {
    p->seconds = rep.seconds;
    p->cycles = rep.cycles;
  } else {
    p->no_fit = p->status == TPK_ERR_NOMEM;
    reason_from(p->reason, sizeof p->reason, err.message);
  }
}

static bool host_launch(Search *s, const TpkLaunch *L, TpkTunePoint *p) {
  p->status = tpk_kernel_launch(s->host.k, L);
  if (p->status == TPK_OK) return true;
  p->no_fit = p->status == TPK_ERR_NOMEM;
  reason_from(p->reason, sizeof p->reason, tpk_last_error());
  return false;
}

/* Whether a launch ran code compiled with optimization (tpk.h's tiers). */
static bool optimized_tier(const char *tier) { return strcmp(tier, "tcc") != 0; }

/* Compile through the launch path, make sure the optimized tier runs, then
 * take the median of the timed launches. */
static void time_on_host(Search *s, TpkTunePoint *p) {
  TpkNamedInt tunes[TPK_TUNE_MAX_TUNABLES];
  for (int i = 0; i < s->f->ntunes; i++) tunes[i] = (TpkNamedInt){s->f->tunes[i].name, p->values[i]};
  TpkLaunchResult ran;
  TpkLaunch L = {.args = s->host.bufs, .scalars = s->host.scalars, .syms = s->host.syms, .nsyms = s->host.nsyms,
                 .tunes = tunes, .ntunes = s->f->ntunes, .result = &ran};
  if (!host_launch(s, &L, p)) return;
  if (!optimized_tier(ran.tier)) {
    /* tcc ran first: call it past the promotion threshold (3 by default),
     * then wait for cc -O3 */
    for (int i = 0; i < 3; i++)
      if (!host_launch(s, &L, p)) return;
    tpk_context_wait_compiles(tpk_program_context(s->prog));
    if (!host_launch(s, &L, p)) return;
  }
  snprintf(p->tier, sizeof p->tier, "%s", ran.tier);
  int repeat = s->o->repeat > 0 ? s->o->repeat : DEFAULT_REPEAT;
  double *times = malloc((size_t)repeat * sizeof *times);
  if (!times) {
    p->status = TPK_ERR_NOMEM;
    snprintf(p->reason, sizeof p->reason, "out of memory");
    return;
  }
  for (int i = 0; i < repeat; i++) {
    double t0 = tpk_now_seconds();
    if (!host_launch(s, &L, p)) {
      free(times);
      return;
    }
    times[i] = tpk_now_seconds() - t0;
  }
  p->seconds = tpk_median(times, repeat);
  free(times);
}

static int find_point(const TpkTuneReport *r, const int64_t *values) {
  for (int i = 0; i < r->npoints; i++)
    if (memcmp(r->points[i].values, values, (size_t)r->ntunables * sizeof *values) == 0) return i;
  return -1;
}

/* Time one configuration and record it; returns its index, or -1 when out
 * of memory. */
static int evaluate(Search *s, const int64_t *values) {
  TpkTuneReport *r = s->r;
  if (r->npoints == r->cap) {
    int cap = r->cap ? r->cap * 2 : 64;
    TpkTunePoint *pts = realloc(r->points, (size_t)cap * sizeof *pts);
    if (!pts) {
      s->out_of_memory = true;
      return -1;
    }
    r->points = pts;
    r->cap = cap;
  }
  TpkTunePoint *p = &r->points[r->npoints];
  memset(p, 0, sizeof *p);
  memcpy(p->values, values, (size_t)r->ntunables * sizeof *values);
  if (s->chip) time_on_chip(s, p);
  else time_on_host(s, p);
  int i = r->npoints++;
  if (p->status == TPK_OK) {
    r->ntimed++;
    if (r->best < 0 || p->seconds < r->points[r->best].seconds) r->best = i;
  } else {
    r->nskipped++;
  }
  if (s->o->progress) s->o->progress(s->o->user, r, p);
  return i;
}

static bool kept(const Search *s, const int64_t *values) {
  return !s->o->keep || s->o->keep(s->o->keep_user, values);
}

/* Every combination, the start first, then in odometer order (the last
 * tunable fastest). */
static void search_all(Search *s, const int64_t *start) {
  int n = s->r->ntunables;
  for (int64_t idx = 0; idx < s->r->space && !s->out_of_memory; idx++) {
    int64_t values[TPK_TUNE_MAX_TUNABLES], rest = idx;
    for (int t = n - 1; t >= 0; t--) {
      values[t] = s->choices[t][rest % s->nchoices[t]];
      rest /= s->nchoices[t];
    }
    if (memcmp(values, start, (size_t)n * sizeof *values) != 0 && kept(s, values)) evaluate(s, values);
  }
}

static double seconds_of(const TpkTuneReport *r, int i) {
  return i >= 0 && r->points[i].status == TPK_OK ? r->points[i].seconds : INFINITY;
}

/* Past the budget: from the start, sweep one tunable at a time over its
 * choices, keeping the others, and move to the fastest; repeat until a
 * round moves nothing or the budget is spent. It finds a configuration no
 * single change improves, not necessarily the best of the space. */
static void search_descent(Search *s, const int64_t *start) {
  TpkTuneReport *r = s->r;
  int n = r->ntunables;
  int64_t cur[TPK_TUNE_MAX_TUNABLES];
  memcpy(cur, start, (size_t)n * sizeof *cur);
  double cur_s = seconds_of(r, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int t = 0; t < n; t++) {
      if (s->nchoices[t] < 2) continue;
      int best = -1;
      for (int c = 0; c < s->nchoices[t]; c++) {
        int64_t v[TPK_TUNE_MAX_TUNABLES];
        memcpy(v, cur, (size_t)n * sizeof *v);
        v[t] = s->choices[t][c];
        int i = find_point(r, v);
        if (i < 0 && !kept(s, v)) continue;
        if (i < 0) {
          if (r->npoints >= r->budget) return;
          if ((i = evaluate(s, v)) < 0) return;
        }
        if (seconds_of(r, i) < seconds_of(r, best)) best = i;
      }
      if (seconds_of(r, best) < cur_s) {
        memcpy(cur, r->points[best].values, (size_t)n * sizeof *cur);
        cur_s = seconds_of(r, best);
        moved = true;
      }
    }
  }
}

/* A failed runtime call: its status, and tpk_last_error() after `what`. */
static TpkStatus runtime_error(TpkStatus st, TpkError *err, const char *what) {
  return tpk_error(err, st, "%s: %s", what, tpk_last_error());
}

/* The host's program, kernel and random arguments, in the caller's context. */
static TpkStatus host_setup(Search *s, TpkError *err) {
  const TpkTuneOptions *o = s->o;
  Host *h = &s->host;
  TpkDevice *dev;
  TpkStatus st;
  if ((st = tpk_device_open(tpk_program_context(s->prog), "host", &dev)) != TPK_OK)
    return runtime_error(st, err, "opening the host");
  if ((st = tpk_program_kernel(s->prog, s->f->name, &h->k)) != TPK_OK) return runtime_error(st, err, "the kernel");
  h->nparams = tpk_kernel_param_count(h->k);
  if (h->nparams > MAX_PARAMS)
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "kernel '%s' has more than %d parameters", s->f->name, MAX_PARAMS);
  for (int i = 0; i < s->nbinds; i++) h->syms[i] = (TpkNamedInt){s->binds[i].name, s->binds[i].value};
  h->nsyms = s->nbinds;
  uint64_t rng = o->seed;
  for (int i = 0; i < h->nparams; i++) {
    if (tpk_kernel_param_kind(h->k, i) == TPK_PARAM_KIND_SCALAR) {
      h->scalars[i] = o->scalars ? o->scalars[i] : 1.0;
      continue;
    }
    int64_t shape[TPK_MAX_DIMS];
    if ((st = tpk_kernel_param_shape(h->k, i, h->syms, h->nsyms, shape)) != TPK_OK ||
        (st = tpk_buffer_create(dev, tpk_kernel_param_dtype(h->k, i), tpk_kernel_param_rank(h->k, i), shape,
                                &h->bufs[i])) != TPK_OK)
      return runtime_error(st, err, "allocating the arguments");
    if (tpk_kernel_param_kind(h->k, i) != TPK_PARAM_KIND_OUTPUT) {
      TpkDType dt = tpk_buffer_dtype(h->bufs[i]);
      tpk_fill_random(tpk_buffer_data(h->bufs[i]), dt, (int64_t)(tpk_buffer_bytes(h->bufs[i]) / tpk_dtype_size(dt)), &rng);
    }
  }
  return TPK_OK;
}

static void host_teardown(Host *h) {
  for (int i = 0; i < h->nparams; i++) tpk_buffer_destroy(h->bufs[i]);
  memset(h, 0, sizeof *h);
}

/* "BM, BN, BK" or "128, 256" into s. */
static void list_tunables(TpkStr *s, const TpkFunc *f) {
  for (int i = 0; i < f->ntunes; i++) tpk_str_printf(s, "%s%s", i ? ", " : "", f->tunes[i].name);
}
/* The space: each tunable's declared choices, or the one value it is held
 * at. */
static TpkStatus build_space(Search *s, int64_t *start, TpkError *err) {
  const TpkFunc *f = s->f;
  const TpkTuneOptions *o = s->o;
  for (int i = 0; i < o->nfixed; i++) {
    int t = -1;
    for (int j = 0; j < f->ntunes; j++)
      if (strcmp(f->tunes[j].name, o->fixed[i].name) == 0) t = j;
    for (int j = 0; j < i; j++)
      if (strcmp(o->fixed[j].name, o->fixed[i].name) == 0)
        return tpk_error(err, TPK_ERR_INVALID, "tunable %s is held twice", o->fixed[i].name);
    TpkStr s2 = {0};
    if (t < 0) {
      list_tunables(&s2, f);
      tpk_error(err, TPK_ERR_INVALID, "kernel '%s' has no tunable '%s'; its tunables are %s", f->name, o->fixed[i].name,
                s2.data ? s2.data : "?");
      tpk_str_free(&s2);
      return TPK_ERR_INVALID;
    }
    if (!tpk_tune_allows(&f->tunes[t], o->fixed[i].value)) {
      tpk_tune_print_choices(&s2, &f->tunes[t]);
      tpk_error(err, TPK_ERR_INVALID, "tunable %s of kernel '%s' is one of [%s], not %lld", f->tunes[t].name, f->name,
                s2.data ? s2.data : "?", (long long)o->fixed[i].value);
      tpk_str_free(&s2);
      return TPK_ERR_INVALID;
    }
    s->fixed[t] = o->fixed[i].value;
    s->choices[t] = &s->fixed[t];
    s->nchoices[t] = 1;
  }
  s->r->space = 1;
  for (int t = 0; t < f->ntunes; t++) {
    if (!s->choices[t]) {
      s->choices[t] = f->tunes[t].choices;
      s->nchoices[t] = f->tunes[t].nchoices;
    }
    if (s->nchoices[t] < 1) return tpk_error(err, TPK_ERR_INTERNAL, "tunable %s declares no values", f->tunes[t].name);
    start[t] = s->choices[t][0]; /* the declared default, or the held value */
    s->r->space = s->r->space > INT64_MAX / s->nchoices[t] ? INT64_MAX : s->r->space * s->nchoices[t];
  }
  return TPK_OK;
}

TpkStatus tpk_tune_prepare(const TpkProgram *prog, const char *kernel, const char *device, const TpkBinding *syms,
                           int nsyms, const TpkFunc **kernel_out, TpkTuneKey *key, TpkError *err) {
  *kernel_out = NULL;
  const TpkModule *m = tpk_program_ir(prog);
  const char *file = tpk_program_name(prog);
  const TpkFunc *f = NULL;
  for (int i = 0; i < m->nfuncs; i++)
    if (m->funcs[i]->is_kernel && (kernel ? strcmp(m->funcs[i]->name, kernel) == 0 : m->nfuncs == 1)) f = m->funcs[i];
  if (!f) {
    TpkStr names = {0};
    for (int i = 0; i < m->nfuncs; i++) tpk_str_printf(&names, "%s%s", i ? ", " : "", m->funcs[i]->name);
    if (kernel)
      tpk_error(err, TPK_ERR_INVALID, "%s has no kernel '%s'; it has: %s", file, kernel, names.data ? names.data : "(none)");
    else
      tpk_error(err, TPK_ERR_INVALID, "%s has %d kernels; choose one: %s", file, m->nfuncs, names.data ? names.data : "(none)");
    tpk_str_free(&names);
    return TPK_ERR_INVALID;
  }
  *kernel_out = f;
  return tpk_tune_key(key, f, tpk_tune_ir_hash(f), syms, nsyms, device, err);
}

/* The search of f (key filled in): on the chip when s->chip, else on the
 * host through s->prog. */
static TpkStatus search(Search *s, TpkError *err) {
  const TpkTuneOptions *o = s->o;
  TpkTuneReport *r = s->r;
  const TpkFunc *f = s->f;
  double t0 = tpk_now_seconds();
  r->f = f;
  r->ntunables = f->ntunes;
  if (f->ntunes == 0)
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "kernel '%s' declares no tunables (`tune NAME in [...]`): nothing to tune", f->name);
  if (f->ntunes > TPK_TUNE_MAX_TUNABLES)
    return tpk_error(err, TPK_ERR_UNSUPPORTED, "kernel '%s' has %d tunables; the tuner handles at most %d", f->name, f->ntunes,
                     TPK_TUNE_MAX_TUNABLES);
  if (o->nsyms > MAX_SYMS) return tpk_error(err, TPK_ERR_INVALID, "more than %d shape symbols", MAX_SYMS);
  for (int i = 0; i < o->nsyms; i++) s->binds[s->nbinds++] = o->syms[i];
  int64_t start[TPK_TUNE_MAX_TUNABLES];
  TpkStatus st = build_space(s, start, err);
  if (st == TPK_OK && !s->chip) st = host_setup(s, err);
  if (st == TPK_OK) {
    r->budget = o->max_points > 0 ? o->max_points : DEFAULT_BUDGET;
    r->exhaustive = r->space <= r->budget;
    r->start = 0;
    if (evaluate(s, start) >= 0) {
      if (r->exhaustive) search_all(s, start);
      else search_descent(s, start);
    }
    if (s->out_of_memory) st = tpk_error(err, TPK_ERR_NOMEM, "out of memory during the search");
    else if (r->best < 0)
      st = tpk_error(err, r->points[0].status ? r->points[0].status : TPK_ERR_INTERNAL,
                     "none of the %d configurations of kernel '%s' ran; the first: %s", r->npoints, f->name,
                     r->points[0].reason);
  }
  host_teardown(&s->host);
  r->wall_seconds = tpk_now_seconds() - t0;
  return st;
}

TpkStatus tpk_tune_search(TpkProgram *prog, const char *kernel, const TpkTuneOptions *o, TpkTuneReport *r,
                          TpkError *err) {
  memset(r, 0, sizeof *r);
  r->best = -1;
  Search s = {.prog = prog, .o = o, .r = r};
  char device[64];
  TpkStatus st = tpk_tune_prepare(prog, kernel, o->device, o->syms, o->nsyms, &s.f, &r->key, err);
  if (st == TPK_OK) st = tpk_tune_device(o->device, device, &s.chip, err);
  return st == TPK_OK ? search(&s, err) : st;
}

TpkStatus tpk_tune_search_chip(const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneReport *r,
                               TpkError *err) {
  memset(r, 0, sizeof *r);
  r->best = -1;
  Search s = {.o = o, .r = r, .f = f};
  char device[64];
  TpkStatus st = tpk_tune_device(o->device, device, &s.chip, err);
  if (st == TPK_OK && !s.chip) st = tpk_error(err, TPK_ERR_INVALID, "tpk_tune_search_chip: '%s' is not a simulated chip", o->device);
  if (st == TPK_OK) st = tpk_tune_key(&r->key, f, ir_hash, o->syms, o->nsyms, o->device, err);
  return st == TPK_OK ? search(&s, err) : st;
}

bool tpk_tune_on_chip(const TpkFunc *f, uint64_t ir_hash, const TpkTuneOptions *o, TpkTuneConfig *out) {
  TpkTuneOptions own = *o;
  if (own.max_points <= 0) own.max_points = LAUNCH_BUDGET;
  TpkTuneReport r;
  TpkError err = {0};
  bool found = tpk_tune_search_chip(f, ir_hash, &own, &r, &err) == TPK_OK;
  if (found) {
    const TpkTunePoint *best = &r.points[r.best];
    char *root = tpk_tune_cache_root();
    /* a cache that cannot be written costs the next process a search */
    if (root && *root) (void)tpk_tune_cache_store(root, &r.key, f, best->values, best->seconds, NULL, &err);
    free(root);
    config_from_values(out, f, best->values, best->seconds, "search");
  }
  tpk_tune_report_free(&r);
  return found;
}

void tpk_tune_report_free(TpkTuneReport *r) {
  free(r->points);
  memset(r, 0, sizeof *r);
  r->best = -1;
}
