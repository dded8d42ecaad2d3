/*
 * args.c — command-line plumbing shared by the commands: option parsing,
 * NAME=INTEGER lists, typo suggestions, output and reading sources.
 */
#include "cli/cli.h"
#include "tpk.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- Options ------------------------------------------------------------------- */

void cli_args_init(CliArgs *a, const char *cmd, int argc, char **argv, const CliOption *opts, int nopts) {
  memset(a, 0, sizeof *a);
  a->cmd = cmd;
  a->argc = argc;
  a->argv = argv;
  a->i = 1; /* argv[0] is the command */
  a->opts = opts;
  a->nopts = nopts;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tpk %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun 'tpk %s --help' for usage.\n", cmd);
  return CLI_USAGE;
}

/* `--bnd` -> "did you mean '--bind'?" among the command's long options. */
static void unknown_option(const CliArgs *a, const char *arg) {
  const char *names[64];
  char spelled[64][40];
  int n = 0;
  for (int i = 0; i < a->nopts && n < 64; i++) {
    snprintf(spelled[n], sizeof spelled[n], "--%s", a->opts[i].name);
    names[n] = spelled[n];
    n++;
  }
  size_t len = strcspn(arg, "=");
  char word[64];
  snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), arg);
  const char *s = tpk_suggest(word, names, n);
  fflush(stdout);
  if (s)
    fprintf(stderr, "tpk %s: unknown option '%s'; did you mean '%s'?\n", a->cmd, word, s);
  else
    fprintf(stderr, "tpk %s: unknown option '%s'\n", a->cmd, word);
  fprintf(stderr, "Run 'tpk %s --help' for usage.\n", a->cmd);
}

int cli_next_arg(CliArgs *a, const char **value) {
  *value = NULL;
  if (a->i >= a->argc) return CLI_ARG_END;
  const char *arg = a->argv[a->i++];
  if (a->no_more_options || arg[0] != '-' || strcmp(arg, "-") == 0) {
    *value = arg;
    return CLI_ARG_POSITIONAL;
  }
  if (strcmp(arg, "--") == 0) {
    a->no_more_options = true;
    return cli_next_arg(a, value);
  }
  const CliOption *opt = NULL;
  const char *inline_value = NULL;
  if (arg[1] == '-') {
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    for (int i = 0; i < a->nopts; i++)
      if (strlen(a->opts[i].name) == len && strncmp(a->opts[i].name, name, len) == 0) opt = &a->opts[i];
    if (name[len] == '=') inline_value = name + len + 1;
  } else if (arg[2] == 0) {
    for (int i = 0; i < a->nopts; i++)
      if (a->opts[i].short_name == arg[1]) opt = &a->opts[i];
  }
  if (!opt) {
    unknown_option(a, arg);
    return CLI_ARG_ERROR;
  }
  if (!opt->takes_value) {
    if (inline_value) {
      cli_usage_error(a->cmd, "option '--%s' takes no value", opt->name);
      return CLI_ARG_ERROR;
    }
    return opt->id;
  }
  if (!inline_value) {
    if (a->i >= a->argc) {
      cli_usage_error(a->cmd, "option '--%s' needs a value", opt->name);
      return CLI_ARG_ERROR;
    }
    inline_value = a->argv[a->i++];
  }
  *value = inline_value;
  return opt->id;
}

/* ---- NAME=INTEGER lists ---------------------------------------------------------- */

static bool is_ident(const char *s, size_t n) {
  if (n == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

/* A non-negative decimal integer that fits in int64. Sizes and tunables are
 * never negative, so a sign is refused rather than guessed at. */
static bool parse_int(const char *s, size_t n, int64_t *out) {
  if (n == 0 || n > 19) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    int d = s[i] - '0';
    if (v > (INT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static bool bindings_add(CliBindings *b, const char *name, size_t n, int64_t value) {
  if (b->count == b->cap) {
    int cap = b->cap ? b->cap * 2 : 8;
    TpkBinding *items = realloc(b->items, (size_t)cap * sizeof *items);
    if (!items) return false;
    b->items = items;
    b->cap = cap;
  }
  char *copy = malloc(n + 1);
  if (!copy) return false;
  memcpy(copy, name, n);
  copy[n] = 0;
  b->items[b->count].name = copy;
  b->items[b->count].value = value;
  b->count++;
  return true;
}

bool cli_bindings_parse(CliBindings *b, const char *option, const char *text) {
  const char *p = text;
  fflush(stdout);
  for (;;) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    int64_t value = 0;
    if (!eq || !is_ident(p, (size_t)(eq - p)) || !parse_int(eq + 1, len - (size_t)(eq - p) - 1, &value)) {
      fprintf(stderr, "tpk: --%s expects NAME=INTEGER[,NAME=INTEGER...], got '%.*s'\n", option, (int)len, p);
      if (eq && is_ident(p, (size_t)(eq - p)) && eq + 1 < p + len && eq[1] == '-')
        fprintf(stderr, "hint: sizes and tunables are non-negative\n");
      return false;
    }
    size_t nlen = (size_t)(eq - p);
    for (int i = 0; i < b->count; i++) {
      if (strlen(b->items[i].name) == nlen && strncmp(b->items[i].name, p, nlen) == 0) {
        fprintf(stderr, "tpk: --%s: '%.*s' is given twice\n", option, (int)nlen, p);
        return false;
      }
    }
    if (!bindings_add(b, p, nlen, value)) {
      fprintf(stderr, "tpk: out of memory\n");
      return false;
    }
    if (p[len] == 0) return true;
    p += len + 1;
  }
}

void cli_bindings_free(CliBindings *b) {
  for (int i = 0; i < b->count; i++) free((char *)b->items[i].name);
  free(b->items);
  memset(b, 0, sizeof *b);
}

/* ---- NAME=VALUE lists ------------------------------------------------------------ */

static bool pairs_add(CliPairs *p, const char *name, size_t nlen, const char *text, size_t tlen) {
  if (p->count == p->cap) {
    int cap = p->cap ? p->cap * 2 : 8;
    CliPair *items = realloc(p->items, (size_t)cap * sizeof *items);
    if (!items) return false;
    p->items = items;
    p->cap = cap;
  }
  char *n = strndup(name, nlen), *t = strndup(text, tlen);
  if (!n || !t) {
    free(n);
    free(t);
    return false;
  }
  p->items[p->count++] = (CliPair){n, t};
  return true;
}

bool cli_pairs_parse(CliPairs *p, const char *option, const char *text) {
  fflush(stdout);
  for (const char *s = text;;) {
    size_t len = strcspn(s, ",");
    const char *eq = memchr(s, '=', len);
    if (!eq || eq == s || eq + 1 == s + len) {
      fprintf(stderr, "tpk: --%s expects NAME=VALUE[,NAME=VALUE...], got '%.*s'\n", option, (int)len, s);
      return false;
    }
    size_t nlen = (size_t)(eq - s);
    for (int i = 0; i < p->count; i++) {
      if (strlen(p->items[i].name) == nlen && strncmp(p->items[i].name, s, nlen) == 0) {
        fprintf(stderr, "tpk: --%s: '%.*s' is given twice\n", option, (int)nlen, s);
        return false;
      }
    }
    if (!pairs_add(p, s, nlen, eq + 1, len - nlen - 1)) {
      fprintf(stderr, "tpk: out of memory\n");
      return false;
    }
    if (s[len] == 0) return true;
    s += len + 1;
  }
}

const char *cli_pairs_find(const CliPairs *p, const char *name) {
  for (int i = 0; i < p->count; i++)
    if (strcmp(p->items[i].name, name) == 0) return p->items[i].text;
  return NULL;
}

void cli_pairs_free(CliPairs *p) {
  for (int i = 0; i < p->count; i++) {
    free(p->items[i].name);
    free(p->items[i].text);
  }
  free(p->items);
  memset(p, 0, sizeof *p);
}

bool cli_parse_seed(const char *text, uint64_t *out) {
  /* strtoull would take "-1" as 2^64 - 1, and skip leading spaces */
  if (!*text || strspn(text, "0123456789") != strlen(text)) return false;
  errno = 0;
  unsigned long long v = strtoull(text, NULL, 10);
  if (errno) return false;
  *out = v;
  return true;
}

/* ---- Output -------------------------------------------------------------------------- */

void cli_out(const char *s, size_t len) {
  if (len) fwrite(s, 1, len, stdout);
  fflush(stdout);
}

void cli_err(const char *s, size_t len) {
  fflush(stdout);
  if (len) fwrite(s, 1, len, stderr);
  fflush(stderr);
}

/* Is stdout a pipe whose reader has gone? (The errno of the write that failed
 * may be long gone when the failure is noticed.) */
void cli_log(void *user, const char *text) {
  (void)user;
  cli_err(text, strlen(text));
}

static bool reader_gone(void) {
  struct pollfd p = {.fd = STDOUT_FILENO, .events = POLLOUT};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

int cli_finish_output(int status) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return status;
  /* A reader that went away (`tpk dump --ir x.tpk | head`) is not an error
   * worth a message; anything else (a full disk) is. */
  if (errno != EPIPE && !reader_gone())
    fprintf(stderr, "tpk: cannot write output: %s\n", errno ? strerror(errno) : "write error");
  return status == CLI_OK ? CLI_FAIL : status;
}

/* ---- Sources --------------------------------------------------------------------------- */

static TpkStatus read_stdin(TpkSource *src, TpkError *err) {
  memset(src, 0, sizeof *src);
  TpkStr s = {0};
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
    if (s.len + n > TPK_SOURCE_MAX) {
      tpk_str_free(&s);
      return tpk_error(err, TPK_ERR_INVALID, "<stdin> is larger than %d MiB; refusing to compile it",
                       TPK_SOURCE_MAX >> 20);
    }
    tpk_str_putn(&s, buf, n);
  }
  if (ferror(stdin) || s.failed) {
    tpk_str_free(&s);
    return tpk_error(err, TPK_ERR_IO, "cannot read standard input");
  }
  char *name = malloc(sizeof "<stdin>");
  if (!name) {
    tpk_str_free(&s);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory reading standard input");
  }
  memcpy(name, "<stdin>", sizeof "<stdin>");
  src->len = s.len;
  src->text = tpk_str_take(&s);
  src->name = name;
  return TPK_OK;
}

/* "std:softmax.tpk", "std:softmax" (a file) or "std:flash_attention" (a
 * kernel): the text of a file of the standard library built into tpk. */
static TpkStatus read_std(TpkSource *src, const char *what, TpkError *err) {
  memset(src, 0, sizeof *src);
  char file[256];
  snprintf(file, sizeof file, "%s%s", what, strstr(what, ".tpk") ? "" : ".tpk");
  const char *text = tpk_std_source(file);
  for (int i = 0; !text && i < tpk_std_kernel_count(); i++)
    if (strcmp(tpk_std_kernel_name(i), what) == 0) {
      snprintf(file, sizeof file, "%s", tpk_std_kernel_file(i));
      text = tpk_std_source(file);
    }
  if (!text) {
    TpkStr list = {0};
    for (int i = 0; i < tpk_std_kernel_count(); i++) { /* kernels of one file are listed together */
      const char *f = tpk_std_kernel_file(i);
      if (i == 0 || strcmp(f, tpk_std_kernel_file(i - 1)) != 0) tpk_str_printf(&list, "%s%s", i ? ", " : "", f);
    }
    TpkStatus st = tpk_error(err, TPK_ERR_IO, "the standard library has no file or kernel '%s'; its files: %s", what,
                             list.data ? list.data : "(none)");
    tpk_str_free(&list);
    return st;
  }
  size_t len = strlen(text);
  char *copy = malloc(len + 1), *name = malloc(strlen(file) + 5);
  if (!copy || !name) {
    free(copy);
    free(name);
    return tpk_error(err, TPK_ERR_NOMEM, "out of memory");
  }
  memcpy(copy, text, len + 1);
  sprintf(name, "std:%s", file);
  *src = (TpkSource){.name = name, .text = copy, .len = len};
  return TPK_OK;
}

TpkStatus cli_source_read(TpkSource *src, const char *path, TpkError *err) {
  if (strcmp(path, "-") == 0) return read_stdin(src, err);
  if (strncmp(path, "std:", 4) == 0) return read_std(src, path + 4, err);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    memset(src, 0, sizeof *src);
    return tpk_error(err, TPK_ERR_IO, "cannot read %s: Is a directory", path);
  }
  return tpk_source_read(src, path, err);
}

void cli_print_error(const char *prefix, const char *msg) {
  size_t n = strlen(msg);
  bool rendered = strstr(msg, ": error: ") != NULL;
  fprintf(stderr, "%s%s%s%s", rendered ? "" : prefix, rendered ? "" : ": ", msg, n && msg[n - 1] == '\n' ? "" : "\n");
}
