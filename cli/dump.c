/*
 * dump.c — `tpk dump (--ast | --ir) FILE`: print the syntax tree or the IR.
 *
 * The file is parsed first; --kernel, --bind and --tune names are then
 * checked against the tree, so a typo gets an answer naming what the file
 * does define ("its tunables: BM") instead of a silently ignored option.
 * Only then, for --ir, does the checker build the IR.
 */
#include "cli/cli.h"
#include "host/host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_AST = 1, OPT_IR, OPT_KERNEL, OPT_BIND, OPT_TUNE, OPT_LOWERED, OPT_C };

static const CliOption OPTIONS[] = {
    {"ast", 0, false, OPT_AST},         {"ir", 0, false, OPT_IR},     {"lowered", 0, false, OPT_LOWERED},
    {"c", 0, false, OPT_C},     {"kernel", 0, true, OPT_KERNEL},
    {"bind", 0, true, OPT_BIND},        {"tune", 0, true, OPT_TUNE},
};

/* ---- Names a file defines ----------------------------------------------------------- */

/* A small set of names, in first-seen order (for messages). */
typedef struct Names {
  const char **items;
  int count, cap;
} Names;

static bool names_has(const Names *s, const char *name) {
  for (int i = 0; i < s->count; i++)
    if (strcmp(s->items[i], name) == 0) return true;
  return false;
}

static void names_add(Names *s, const char *name) {
  if (!name || names_has(s, name)) return;
  if (s->count == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    const char **items = realloc(s->items, (size_t)cap * sizeof *items);
    if (!items) return; /* a shorter list only makes a message shorter */
    s->items = items;
    s->cap = cap;
  }
  s->items[s->count++] = name;
}

static void names_free(Names *s) {
  free(s->items);
  memset(s, 0, sizeof *s);
}

/* "M, N" or `none` when empty. */
static void names_print(FILE *f, const Names *s, const char *none) {
  if (s->count == 0) fputs(none, f);
  for (int i = 0; i < s->count; i++) fprintf(f, "%s%s", i ? ", " : "", s->items[i]);
}

/* Every NAME inside a dimension expression (B*H -> B, H). */
static void collect_dim_names(const TpkAst *e, Names *out, int depth) {
  for (; e && depth < TPK_MAX_DEPTH; e = e->next) {
    if (e->kind == TPK_AST_NAME) names_add(out, e->name);
    collect_dim_names(e->lhs, out, depth + 1);
    collect_dim_names(e->rhs, out, depth + 1);
    collect_dim_names(e->args, out, depth + 1);
  }
}

/* Shape symbols of a kernel: the names in its parameter and output
 * dimensions that are neither file constants nor its tunables. */
static void kernel_symbols(const TpkAst *k, const Names *consts, Names *out) {
  Names raw = {0};
  for (const TpkAst *p = k->params; p; p = p->next) collect_dim_names(p->dims, &raw, 0);
  for (const TpkAst *p = k->outputs; p; p = p->next) collect_dim_names(p->dims, &raw, 0);
  Names tunes = {0};
  for (const TpkAst *t = k->tunes; t; t = t->next) names_add(&tunes, t->name);
  for (int i = 0; i < raw.count; i++)
    if (!names_has(consts, raw.items[i]) && !names_has(&tunes, raw.items[i])) names_add(out, raw.items[i]);
  names_free(&raw);
  names_free(&tunes);
}

static void kernel_tunables(const TpkAst *k, Names *out) {
  for (const TpkAst *t = k->tunes; t; t = t->next) names_add(out, t->name);
}

typedef struct Dump Dump;
static int lower_all(TpkModule *m, const Dump *d, const TpkSource *src, TpkStr *out);

/* ---- The command ---------------------------------------------------------------------- */

struct Dump {
  bool ast, ir, lowered, c;
  const char *path;
  const char *kernel; /* --kernel, or NULL */
  CliBindings binds, tunes;
};

static int parse_args(Dump *d, const CliCommand *cmd, int argc, char **argv) {
  CliArgs args;
  cli_args_init(&args, cmd->name, argc, argv, OPTIONS, (int)TPK_ARRAY_LEN(OPTIONS));
  const char *value;
  int id;
  while ((id = cli_next_arg(&args, &value)) != CLI_ARG_END) {
    switch (id) {
    case CLI_ARG_ERROR: return CLI_USAGE;
    case OPT_AST: d->ast = true; break;
    case OPT_IR: d->ir = true; break;
    case OPT_LOWERED: d->lowered = true; break;
    case OPT_C: d->c = true; break;
    case OPT_KERNEL:
      if (d->kernel) return cli_usage_error(cmd->name, "--kernel given twice");
      d->kernel = value;
      break;
    case OPT_BIND:
      if (!cli_bindings_parse(&d->binds, "bind", value)) return CLI_USAGE;
      break;
    case OPT_TUNE:
      if (!cli_bindings_parse(&d->tunes, "tune", value)) return CLI_USAGE;
      break;
    case CLI_ARG_POSITIONAL:
      if (d->path) return cli_usage_error(cmd->name, "one FILE at a time (got '%s' and '%s')", d->path, value);
      d->path = value;
      break;
    }
  }
  int modes = d->ast + d->ir + d->lowered + d->c;
  if (modes != 1)
    return cli_usage_error(cmd->name, modes ? "--ast, --ir, --lowered and --c are exclusive; choose one"
                                            : "say what to print: --ast (syntax tree), --ir (IR), --lowered (IR after "
                                              "the host passes) or --c (generated C)");
  if (!d->path) return cli_usage_error(cmd->name, "no input file (usage: tpk dump (--ast | --ir | --lowered | --c) FILE)");
  if (d->ast && (d->binds.count || d->tunes.count))
    return cli_usage_error(cmd->name, "--bind and --tune shape the IR; they apply to --ir only");
  return CLI_OK;
}

/* What --bind or --tune names: a kind of kernel name, and the names of that
 * kind the selected kernels have. */
typedef struct NameKind {
  const char *flag;   /* "--bind" */
  const char *noun;   /* "shape symbol" */
  const char *plural; /* "symbols" */
  const char *how;    /* "give its size with" */
  const Names *names;
} NameKind;

/* Each name given to own.flag must be of kind `own`; a name of the other kind
 * or a constant gets a message that points at the right option. */
static int check_kind(const CliBindings *given, const NameKind *own, const NameKind *other, const Names *consts,
                      const char *shown_name, const char *where) {
  for (int i = 0; i < given->count; i++) {
    const char *name = given->items[i].name;
    if (names_has(own->names, name)) continue;
    if (names_has(other->names, name)) {
      fprintf(stderr, "tpk: %s: '%s' is a %s, not a %s; %s %s %s=%lld\n", own->flag, name, other->noun, own->noun,
              other->how, other->flag, name, (long long)given->items[i].value);
    } else if (names_has(consts, name)) {
      fprintf(stderr, "tpk: %s: '%s' is a constant of %s (const %s = ...), not a %s\n", own->flag, name, shown_name,
              name, own->noun);
    } else {
      fprintf(stderr, "tpk: %s: %s has no %s '%s' (its %s: ", own->flag, where, own->noun, name, own->plural);
      names_print(stderr, own->names, "none");
      const char *s = tpk_suggest(name, own->names->items, own->names->count);
      fprintf(stderr, ")%s%s%s\n", s ? "; did you mean '" : "", s ? s : "", s ? "'?" : "");
    }
    return CLI_USAGE;
  }
  return CLI_OK;
}

/* Every --bind and --tune name must exist in one of the selected kernels. */
static int check_names(const Dump *d, const TpkAst *file, const char *shown_name) {
  Names consts = {0}, symbols = {0}, tunables = {0};
  for (const TpkAst *n = file->body; n; n = n->next)
    if (n->kind == TPK_AST_CONST) names_add(&consts, n->name);
  for (const TpkAst *k = file->body; k; k = k->next) {
    if (k->kind != TPK_AST_KERNEL || (d->kernel && (!k->name || strcmp(k->name, d->kernel) != 0))) continue;
    kernel_symbols(k, &consts, &symbols);
    kernel_tunables(k, &tunables);
  }
  /* "kernel 'softmax'" or "softmax.tpk" for the messages. */
  char where[256];
  if (d->kernel)
    snprintf(where, sizeof where, "kernel '%s'", d->kernel);
  else
    snprintf(where, sizeof where, "%s", shown_name);

  const NameKind symbol = {"--bind", "shape symbol", "symbols", "give its size with", &symbols};
  const NameKind tunable = {"--tune", "tunable", "tunables", "choose it with", &tunables};
  fflush(stdout);
  int status = check_kind(&d->binds, &symbol, &tunable, &consts, shown_name, where);
  if (status == CLI_OK) status = check_kind(&d->tunes, &tunable, &symbol, &consts, shown_name, where);
  names_free(&consts);
  names_free(&symbols);
  names_free(&tunables);
  return status;
}

/* --kernel NAME must be a kernel of the file; the answer lists those that are. */
static int check_kernel(const Dump *d, const TpkAst *file, const char *shown_name, const TpkAst **found) {
  *found = NULL;
  if (!d->kernel) return CLI_OK;
  Names kernels = {0};
  for (const TpkAst *k = file->body; k; k = k->next) {
    if (k->kind != TPK_AST_KERNEL || !k->name) continue;
    names_add(&kernels, k->name);
    if (!*found && strcmp(k->name, d->kernel) == 0) *found = k;
  }
  if (!*found) {
    fflush(stdout);
    fprintf(stderr, "tpk: no kernel named '%s' in %s", d->kernel, shown_name);
    if (kernels.count) {
      fprintf(stderr, "; it defines: ");
      names_print(stderr, &kernels, "");
      const char *s = tpk_suggest(d->kernel, kernels.items, kernels.count);
      if (s) fprintf(stderr, " (did you mean '%s'?)", s);
      fputc('\n', stderr);
    } else {
      fprintf(stderr, "; it defines no kernels\n");
    }
  }
  names_free(&kernels);
  return *found ? CLI_OK : CLI_USAGE;
}

static void render(const TpkDiags *diags) {
  TpkStr s = {0};
  tpk_diags_render(&s, diags);
  cli_err(s.data, s.len);
  tpk_str_free(&s);
}

static int dump(Dump *d) {
  TpkSource src;
  TpkError err = {0};
  if (cli_source_read(&src, d->path, &err) != TPK_OK) {
    fflush(stdout);
    fprintf(stderr, "tpk: %s\n", err.message);
    return CLI_FAIL;
  }
  TpkDiags diags;
  tpk_diags_init(&diags, &src);
  TpkParsed parsed = {0};
  TpkModule *m = NULL;
  TpkStr out = {0};
  int status = CLI_OK;

  TpkStatus st = tpk_parse(&src, &parsed, &diags);
  if (st != TPK_OK || diags.errors > 0 || !parsed.file) {
    render(&diags);
    if (diags.errors == 0) fprintf(stderr, "tpk: internal error: %s did not parse but no error was reported\n", src.name);
    status = CLI_FAIL;
    goto done;
  }
  const TpkAst *kernel;
  if ((status = check_kernel(d, parsed.file, src.name, &kernel)) != CLI_OK) goto done;

  if (d->ast) {
    render(&diags); /* warnings, if any */
    if (kernel) {
      /* The tree of just that kernel: a FILE node holding a copy of it. */
      TpkAst file = *parsed.file, only = *kernel;
      only.next = NULL;
      file.body = &only;
      tpk_ast_print(&out, &file);
    } else {
      tpk_ast_print(&out, parsed.file);
    }
  } else {
    if ((status = check_names(d, parsed.file, src.name)) != CLI_OK) goto done;
    TpkCheckOptions opts = {
        .binds = d->binds.items,
        .nbinds = d->binds.count,
        .tunes = d->tunes.items,
        .ntunes = d->tunes.count,
        .only_kernel = d->kernel,
    };
    st = tpk_check(&parsed, &opts, &diags, &m);
    render(&diags);
    if (st != TPK_OK || !m || diags.errors > 0) {
      if (diags.errors == 0)
        fprintf(stderr, "tpk: internal error: %s did not check (%s) but no error was reported\n", src.name,
                tpk_status_name(st));
      status = CLI_FAIL;
      goto done;
    }
    if (d->lowered || d->c) {
      if ((status = lower_all(m, d, &src, &out)) != CLI_OK) goto done;
    } else {
      tpk_ir_print(&out, m);
    }
    if (tpk_ir_verify(m, &err) != TPK_OK) {
      /* Print it anyway: the dump is how one finds the bad op. */
      cli_out(out.data, out.len);
      tpk_str_free(&out);
      fprintf(stderr, "tpk: internal error: the IR built for %s does not verify: %s\n", src.name, err.message);
      status = CLI_FAIL;
      goto done;
    }
  }
  if (out.failed) {
    fprintf(stderr, "tpk: out of memory printing %s\n", src.name);
    status = CLI_FAIL;
  } else {
    cli_out(out.data, out.len);
  }

done:
  tpk_str_free(&out);
  if (m) tpk_module_free(m);
  tpk_parsed_free(&parsed);
  tpk_diags_free(&diags);
  tpk_source_free(&src);
  return status;
}

/* --lowered and --c: the host pipeline on every kernel of m, bound as a
 * launch binds it (tunables not chosen at their defaults). Unbound shape
 * symbols give the code that serves every shape (read from syms[]). */
static int lower_all(TpkModule *m, const Dump *d, const TpkSource *src, TpkStr *out) {
  TpkTarget host = tpk_target_host(tpk_parse_bytes(getenv("TPK_HOST_VMEM")));
  TpkModule *bound = tpk_module_new(src->name);
  if (!bound) {
    fprintf(stderr, "tpk: out of memory\n");
    return CLI_FAIL;
  }
  int status = CLI_OK;
  for (int i = 0; i < m->nfuncs && status == CLI_OK; i++) {
    TpkFunc *f;
    TpkError err = {0};
    TpkStatus st = tpk_bind(bound, m->funcs[i], NULL, 0, &f, &err);
    if (st != TPK_OK) {
      TpkStr msg = {0};
      tpk_render_error_at(&msg, src->name, src->text, src->len, &err);
      fprintf(stderr, "%s", msg.data ? msg.data : err.message);
      tpk_str_free(&msg);
      status = CLI_FAIL;
      break;
    }
    if (d->c) {
      char entry[160];
      snprintf(entry, sizeof entry, "tpk_kernel_%s", f->name);
      st = tpk_lower_to_c(f, &host, entry, src->text, i ? TPK_EMIT_NO_PRELUDE : 0, out, NULL, &err);
    } else {
      st = tpk_lower_ir(f, &host, &err);
      if (st == TPK_OK) tpk_ir_print_func(out, f);
    }
    if (st != TPK_OK) {
      fprintf(stderr, "tpk: %s: %s\n", src->name, err.message);
      status = CLI_FAIL;
    }
  }
  tpk_module_free(bound);
  return status;
}

int cli_dump(const CliCommand *cmd, int argc, char **argv) {
  Dump d = {0};
  int status = parse_args(&d, cmd, argc, argv);
  if (status == CLI_OK) status = dump(&d);
  cli_bindings_free(&d.binds);
  cli_bindings_free(&d.tunes);
  return status;
}
