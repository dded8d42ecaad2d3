/*
 * test_passes.c — the lowering passes, IR text in, IR text out (QBE's style).
 *
 * Each tests/lower/passes/NAME.ir is one cmocka test named NAME: the input IR
 * (ir/README.md's text form), one `// run:` line naming the passes to run in
 * order, then a `// expect:` line and the text the run must print: the IR of
 * each function after the passes, the plan listing (tpk_plan_print) for a
 * run ending in `plan`, or `error: MESSAGE` when a pass fails.
 *
 *   // run: tile tile=4K | simplify
 *   // run: plan vmem=1M
 *
 * IR a pass leaves behind must verify; that is checked after every pass and
 * is not something an expectation can record. Nor are two more checks: the
 * printed IR parses back and prints the same, and a pass marked idempotent,
 * run again on that parsed-back IR, changes nothing. TPK_UPDATE_EXPECT=1
 * rewrites the expectations with what the passes print (review the diff).
 * An argument runs the tests whose names match a pattern:
 * `test_passes 'simplify-*'`.
 * tests/lower/README.md has the details.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

#define PASSES_DIR "tests/lower/passes"
#define RUN_PREFIX "// run:"
#define EXPECT_LINE "// expect:"

enum { MAX_FILES = 512, MAX_STEPS = 8, MAX_OPTIONS = 16 };

/* What a run prints when it ends with a pass. */
typedef enum Prints { PRINTS_IR, PRINTS_PLAN, PRINTS_IR_AND_PLAN, PRINTS_MODULE } Prints;

/*
 * The passes a `// run:` line may name, one line each in PASSES. The field
 * that holds a pass is chosen by its signature, which also decides the
 * options its steps take:
 *   in_place      void (TpkFunc *)                                    none
 *   checked       TpkStatus (TpkFunc *, TpkError *)                      none
 *   for_target    TpkStatus (TpkFunc *, const TpkTarget *, TpkError *)  vmem=, tile=
 *   planning      the same with a TpkPlan * before the error            vmem=, tile=
 *   specialising  TpkStatus (TpkModule *dst, const TpkFunc *, const TpkBinding *, int,
 *                 TpkFunc **out, TpkError *): later steps see the copy  NAME=INTEGER
 *   graph         TpkStatus (TpkFunc *, TpkError *) on each graph func   none
 *                 of the module, adding kernels: the first step only;
 *                 later steps run on the kernels it added, and the run
 *                 prints the whole module
 */
typedef struct Pass {
  const char *name;
  Prints prints;
  bool idempotent; /* an IR pass that, run again on its printed output, prints the same */
  void (*in_place)(TpkFunc *f);
  TpkStatus (*checked)(TpkFunc *f, TpkError *err);
  TpkStatus (*for_target)(TpkFunc *f, const TpkTarget *t, TpkError *err);
  TpkStatus (*planning)(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err);
  TpkStatus (*specialising)(TpkModule *dst, const TpkFunc *f, const TpkBinding *binds, int nbinds, TpkFunc **out,
                            TpkError *err);
  TpkStatus (*graph)(TpkFunc *f, TpkError *err);
} Pass;

/* tpk_plan_memory, whose function is const */
static TpkStatus plan_memory(TpkFunc *f, const TpkTarget *t, TpkPlan *plan, TpkError *err) {
  return tpk_plan_memory(f, t, plan, err);
}

static TpkStatus fuse_all(TpkFunc *f, TpkError *err) { return tpk_fuse(f, TPK_FUSE_ALL, err); }
static TpkStatus fuse_none(TpkFunc *f, TpkError *err) { return tpk_fuse(f, TPK_FUSE_NONE, err); }

static const Pass PASSES[] = {
    {"simplify", PRINTS_IR, .idempotent = true, .in_place = tpk_simplify},
    {"bind", PRINTS_IR, .specialising = tpk_bind},
    {"tile", PRINTS_IR, .idempotent = true, .for_target = tpk_tile_whole_arrays},
    {"decide", PRINTS_IR, .idempotent = true, .checked = tpk_decide},
    {"plan", PRINTS_PLAN, .planning = plan_memory},
    {"lower", PRINTS_IR_AND_PLAN, .planning = tpk_lower},
    {"fuse", PRINTS_MODULE, .idempotent = true, .graph = fuse_all},
    {"fuse-none", PRINTS_MODULE, .idempotent = true, .graph = fuse_none},
};

/* The target passes see unless a step says otherwise: the host's sizes. */
static const TpkTarget DEFAULT_TARGET = {.name = "test", .vmem_bytes = (int64_t)128 << 20, .tile_bytes = (int64_t)256 << 10};

/* Everything one file's test allocates, freed by its teardown also when the
 * test fails half way (cmocka leaves a failing test by a long jump). */
typedef struct Case {
  const char *file; /* "simplify-dce.ir" */
  char *text, *input;
  TpkModule *module;
  TpkModule *owned[32]; /* modules specialising passes made */
  int nowned;
  TpkPlan plan;
  bool planned;
  TpkStr actual;
  TpkStr message;      /* for a failure: a diff, printed IR, the known passes */
  TpkStr printed;      /* one function's IR after the passes */
  TpkModule *reparsed; /* `printed` parsed back */
  TpkStr reprinted;    /* `reparsed` printed, after the last pass again if idempotent */
} Case;

static int free_case(void **state) {
  Case *c = *state;
  free(c->text);
  free(c->input);
  if (c->planned) tpk_plan_free(&c->plan);
  for (int i = 0; i < c->nowned; i++) tpk_module_free(c->owned[i]);
  if (c->module) tpk_module_free(c->module);
  tpk_str_free(&c->actual);
  tpk_str_free(&c->message);
  tpk_str_free(&c->printed);
  if (c->reparsed) tpk_module_free(c->reparsed);
  tpk_str_free(&c->reprinted);
  *c = (Case){.file = c->file};
  return 0;
}

/* ---- the run line ------------------------------------------------------------ */

typedef struct Step {
  const Pass *pass;
  int noptions;
  TpkBinding options[MAX_OPTIONS]; /* NAME=VALUE, names point into `words` */
  char words[256];
} Step;

static const Pass *find_pass(const char *name) {
  for (size_t i = 0; i < sizeof PASSES / sizeof *PASSES; i++)
    if (strcmp(PASSES[i].name, name) == 0) return &PASSES[i];
  return NULL;
}

/* An integer with an optional K, M or G suffix (powers of 1024). */
static bool parse_size(const char *s, int64_t *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s) return false;
  int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (*end) return false;
  *out = (int64_t)v * ((int64_t)1 << shift);
  return true;
}

/* "tile tile=4K" -> a step; fails the test on a word it does not know. */
static void parse_step(Case *c, const char *text, size_t len, Step *step) {
  const char *file = c->file;
  memset(step, 0, sizeof *step);
  if (len >= sizeof step->words) fail_msg("%s: run step too long", file);
  memcpy(step->words, text, len);
  char *save = NULL;
  char *word = strtok_r(step->words, " \t", &save);
  if (!word) fail_msg("%s: an empty step in the run line", file);
  step->pass = find_pass(word);
  if (!step->pass) {
    for (size_t i = 0; i < sizeof PASSES / sizeof *PASSES; i++) tpk_str_printf(&c->message, " %s", PASSES[i].name);
    fail_msg("%s: unknown pass '%s' (known:%s)", file, word, c->message.data);
  }
  while ((word = strtok_r(NULL, " \t", &save))) {
    char *eq = strchr(word, '=');
    int64_t value = 0;
    if (!eq || eq == word || !parse_size(eq + 1, &value))
      fail_msg("%s: '%s' is not NAME=INTEGER (K, M, G suffixes allowed)", file, word);
    if (step->noptions == MAX_OPTIONS) fail_msg("%s: more than %d options in one step", file, MAX_OPTIONS);
    *eq = 0;
    step->options[step->noptions++] = (TpkBinding){word, value};
  }
}

/* The steps of the one `// run:` line of the input. */
static int parse_run_line(Case *c, const char *input, Step *steps) {
  const char *file = c->file;
  const char *run = NULL;
  for (const char *line = input; line && *line;) {
    const char *p = line + strspn(line, " \t");
    if (strncmp(p, RUN_PREFIX, strlen(RUN_PREFIX)) == 0) {
      if (run) fail_msg("%s: more than one '%s' line", file, RUN_PREFIX);
      run = p + strlen(RUN_PREFIX);
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  if (!run) fail_msg("%s: no '%s' line", file, RUN_PREFIX);
  const char *end = run + strcspn(run, "\n");
  int n = 0;
  for (const char *p = run; p < end;) {
    const char *bar = memchr(p, '|', (size_t)(end - p));
    const char *stop = bar ? bar : end;
    if (n == MAX_STEPS) fail_msg("%s: more than %d steps", file, MAX_STEPS);
    parse_step(c, p, (size_t)(stop - p), &steps[n++]);
    p = bar ? bar + 1 : end;
  }
  return n;
}

/* ---- running the passes ----------------------------------------------------------- */

static TpkTarget step_target(const char *file, const Step *s) {
  TpkTarget t = DEFAULT_TARGET;
  for (int i = 0; i < s->noptions; i++) {
    const TpkBinding *o = &s->options[i];
    if (strcmp(o->name, "vmem") == 0) t.vmem_bytes = o->value;
    else if (strcmp(o->name, "tile") == 0) t.tile_bytes = o->value;
    else if (strcmp(o->name, "cores") == 0) t.cores = (int)o->value;
    else fail_msg("%s: pass '%s' takes vmem=, tile= and cores=, not '%s'", file, s->pass->name, o->name);
  }
  return t;
}

static void fail_unverified(Case *c, const char *pass, const TpkFunc *f, const TpkError *err) {
  tpk_ir_print_func(&c->message, f);
  fail_msg("%s: after '%s' the IR does not verify: %s\n%s", c->file, pass, err->message, c->message.data);
}

/* Apply one step to *f; a specialising pass replaces *f with its copy. */
static TpkStatus apply_step(Case *c, TpkFunc **f, const Step *s, TpkError *err) {
  const Pass *p = s->pass;
  if ((p->in_place || p->checked || p->graph) && s->noptions) fail_msg("%s: pass '%s' takes no options", c->file, p->name);
  if (p->graph) fail_msg("%s: pass '%s' works on a whole module: only as the first step", c->file, p->name);
  if (p->in_place) {
    p->in_place(*f);
    return TPK_OK;
  }
  if (p->checked) return p->checked(*f, err);
  if (p->for_target) {
    TpkTarget t = step_target(c->file, s);
    return p->for_target(*f, &t, err);
  }
  if (p->planning) {
    TpkTarget t = step_target(c->file, s);
    if (c->planned) tpk_plan_free(&c->plan);
    TpkStatus st = p->planning(*f, &t, &c->plan, err);
    c->planned = st == TPK_OK;
    return st;
  }
  if (c->nowned == (int)(sizeof c->owned / sizeof *c->owned)) fail_msg("%s: too many specialisations", c->file);
  TpkModule *dst = tpk_module_new((*f)->module->source);
  assert_non_null(dst);
  c->owned[c->nowned++] = dst;
  TpkFunc *copy = NULL;
  TpkStatus st = p->specialising(dst, *f, s->options, s->noptions, &copy, err);
  if (st == TPK_OK) *f = copy;
  return st;
}

static void check_verifies(Case *c, const char *pass, const TpkFunc *f) {
  TpkError err = {0};
  if (tpk_ir_verify(f->module, &err) != TPK_OK) fail_unverified(c, pass, f, &err);
}

static void unified_diff(TpkStr *s, const char *want, const char *got);

/* The text form is how passes are handed IR, so what a run prints must read
 * back as the same IR: f's printed text parses and prints the same. For an
 * idempotent last pass, running it again on the parsed-back function must
 * print the same too (a decision recorded in the IR is seen as taken). */
static void check_printed_ir(Case *c, const TpkFunc *f, const Step *last) {
  const char *pass = last->pass->name;
  c->printed.len = 0, c->reprinted.len = 0;
  tpk_ir_print_func(&c->printed, f);
  assert_false(c->printed.failed);
  if (c->reparsed) tpk_module_free(c->reparsed);
  TpkError err = {0};
  c->reparsed = tpk_ir_parse(c->printed.data, c->printed.len, c->file, &err);
  if (!c->reparsed)
    fail_msg("%s: the IR after '%s' does not parse back: %s\n%s", c->file, pass, err.message, c->printed.data);
  assert_int_equal(c->reparsed->nfuncs, 1);
  TpkFunc *back = c->reparsed->funcs[0];
  const char *what = "parsed back, it prints";
  if (last->pass->idempotent) {
    assert_int_equal(last->pass->prints, PRINTS_IR);
    if (apply_step(c, &back, last, &err) != TPK_OK)
      fail_msg("%s: running '%s' again fails: %s", c->file, pass, err.message);
    check_verifies(c, pass, back);
    what = "run again on its printed output, it prints";
  }
  tpk_ir_print_func(&c->reprinted, back);
  if (strcmp(c->printed.data, c->reprinted.data) != 0) {
    unified_diff(&c->message, c->printed.data, c->reprinted.data);
    fail_msg("%s: '%s' is not stable: %s something else (expected: the IR after the passes)\n%s", c->file, pass,
             what, c->message.data);
  }
}

/* Run the steps on f (the function may be replaced: bind makes a copy) and
 * append what the last one prints to c->actual. */
static void run_steps(Case *c, TpkFunc *f, const Step *steps, int nsteps) {
  TpkStr *out = &c->actual;
  for (int k = 0; k < nsteps; k++) {
    const Step *s = &steps[k];
    TpkError err = {0};
    if (apply_step(c, &f, s, &err) != TPK_OK) {
      tpk_str_printf(out, "error: %s\n", err.message);
      break;
    }
    check_verifies(c, s->pass->name, f);
    if (k == nsteps - 1) {
      Prints prints = s->pass->prints;
      if (prints != PRINTS_PLAN) {
        check_printed_ir(c, f, s);
        tpk_str_puts(out, c->printed.data);
      }
      if (prints != PRINTS_IR) tpk_plan_print(out, &c->plan, f);
    }
  }
  if (c->planned) tpk_plan_free(&c->plan);
  c->planned = false;
}

/* A run starting with a graph pass: it rewrites each graph func of the
 * module and adds kernels (the clusters); the later steps run on those; the
 * whole module is printed. The printed module must parse back and print the
 * same, and, when the graph pass is the only step and idempotent, running
 * it again on the parsed-back module changes nothing. */
static void run_module(Case *c, TpkModule *m, const Step *steps, int nsteps) {
  const Pass *graph = steps[0].pass;
  if (steps[0].noptions) fail_msg("%s: pass '%s' takes no options", c->file, graph->name);
  /* the functions before: fusion may drop a kernel it no longer calls,
   * so the kernels it added are those that were not there */
  int nfuncs = m->nfuncs;
  TpkFunc **before = malloc((size_t)(nfuncs ? nfuncs : 1) * sizeof *before);
  assert_non_null(before);
  memcpy(before, m->funcs, (size_t)nfuncs * sizeof *before);
  TpkError err = {0};
  for (int i = 0; i < nfuncs; i++) {
    if (before[i]->is_kernel) continue;
    if (graph->graph(before[i], &err) != TPK_OK) {
      tpk_str_printf(&c->actual, "error: %s\n", err.message);
      free(before);
      return;
    }
    check_verifies(c, graph->name, before[i]);
  }
  for (int i = 0; i < m->nfuncs; i++) {
    TpkFunc *f = m->funcs[i];
    bool added = true;
    for (int j = 0; j < nfuncs && added; j++) added = before[j] != f;
    if (!added) continue;
    for (int k = 1; k < nsteps; k++) {
      if (steps[k].pass->prints != PRINTS_IR) fail_msg("%s: after '%s' only passes that print IR", c->file, graph->name);
      if (apply_step(c, &f, &steps[k], &err) != TPK_OK) {
        tpk_str_printf(&c->actual, "error: %s\n", err.message);
        free(before);
        return;
      }
      check_verifies(c, steps[k].pass->name, f);
    }
  }
  free(before);
  tpk_ir_print(&c->printed, m);
  assert_false(c->printed.failed);
  c->reparsed = tpk_ir_parse(c->printed.data, c->printed.len, c->file, &err);
  if (!c->reparsed) fail_msg("%s: the module after '%s' does not parse back: %s\n%s", c->file, graph->name, err.message, c->printed.data);
  const char *what = "parsed back, it prints";
  if (nsteps == 1 && graph->idempotent) {
    int n = c->reparsed->nfuncs;
    for (int i = 0; i < n; i++)
      if (!c->reparsed->funcs[i]->is_kernel && graph->graph(c->reparsed->funcs[i], &err) != TPK_OK)
        fail_msg("%s: running '%s' again fails: %s", c->file, graph->name, err.message);
    what = "run again on its printed output, it prints";
  }
  tpk_ir_print(&c->reprinted, c->reparsed);
  if (strcmp(c->printed.data, c->reprinted.data) != 0) {
    unified_diff(&c->message, c->printed.data, c->reprinted.data);
    fail_msg("%s: '%s' is not stable: %s something else (expected: the module after the passes)\n%s", c->file,
             graph->name, what, c->message.data);
  }
  tpk_str_puts(&c->actual, c->printed.data);
}

/* ---- comparing ------------------------------------------------------------------ */

typedef struct Lines {
  const char **at; /* start of each line */
  int *len;
  int n;
} Lines;

static Lines split_lines(const char *text) {
  Lines l = {0};
  int cap = 1;
  for (const char *p = text; *p; p++) cap += *p == '\n';
  l.at = malloc((size_t)cap * sizeof *l.at);
  l.len = malloc((size_t)cap * sizeof *l.len);
  assert_true(l.at && l.len);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    l.at[l.n] = p;
    l.len[l.n++] = (int)len;
    p += len + (nl != NULL);
  }
  return l;
}

static bool same_line(const Lines *a, int i, const Lines *b, int j) {
  return a->len[i] == b->len[j] && memcmp(a->at[i], b->at[j], (size_t)a->len[i]) == 0;
}

/* A unified diff of the expected and the actual text, 3 lines of context,
 * from a longest common subsequence (the texts are short). */
static void unified_diff(TpkStr *s, const char *want, const char *got) {
  Lines a = split_lines(want), b = split_lines(got);
  int w = b.n + 1;
  int *lcs = calloc((size_t)(a.n + 1) * (size_t)w, sizeof *lcs); /* lcs[i*w+j]: of a[i..], b[j..] */
  assert_non_null(lcs);
  for (int i = a.n - 1; i >= 0; i--)
    for (int j = b.n - 1; j >= 0; j--)
      lcs[i * w + j] = same_line(&a, i, &b, j) ? lcs[(i + 1) * w + j + 1] + 1
                       : lcs[(i + 1) * w + j] > lcs[i * w + j + 1] ? lcs[(i + 1) * w + j]
                                                                 : lcs[i * w + j + 1];
  /* the edit script: ' ', '-' or '+' with the line */
  int nedits = 0;
  char *kind = malloc((size_t)(a.n + b.n + 1));
  int *line = malloc((size_t)(a.n + b.n + 1) * sizeof *line);
  assert_true(kind && line);
  for (int i = 0, j = 0; i < a.n || j < b.n;) {
    if (i < a.n && j < b.n && same_line(&a, i, &b, j)) kind[nedits] = ' ', line[nedits++] = i++, j++;
    else if (i < a.n && (j == b.n || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) kind[nedits] = '-', line[nedits++] = i++;
    else kind[nedits] = '+', line[nedits++] = j++;
  }
  tpk_str_puts(s, "--- expected\n+++ actual\n");
  enum { CONTEXT = 3 };
  for (int e = 0; e < nedits;) {
    if (kind[e] == ' ') {
      e++;
      continue;
    }
    /* a hunk: from CONTEXT lines before this change to CONTEXT after the
     * last change closer than 2*CONTEXT to the previous one */
    int lo = e - CONTEXT < 0 ? 0 : e - CONTEXT, hi = e;
    for (int k = e; k < nedits && k - hi <= 2 * CONTEXT; k++)
      if (kind[k] != ' ') hi = k;
    hi = hi + CONTEXT + 1 > nedits ? nedits : hi + CONTEXT + 1;
    int a0 = 0, b0 = 0, an = 0, bn = 0; /* hunk header positions */
    for (int k = 0; k < lo; k++) a0 += kind[k] != '+', b0 += kind[k] != '-';
    for (int k = lo; k < hi; k++) an += kind[k] != '+', bn += kind[k] != '-';
    tpk_str_printf(s, "@@ -%d,%d +%d,%d @@\n", a0 + 1, an, b0 + 1, bn);
    for (int k = lo; k < hi; k++) {
      const Lines *from = kind[k] == '+' ? &b : &a;
      tpk_str_putc(s, kind[k]);
      tpk_str_putn(s, from->at[line[k]], (size_t)from->len[line[k]]);
      tpk_str_putc(s, '\n');
    }
    e = hi;
  }
  free(kind);
  free(line);
  free(lcs);
  free(a.at);
  free(a.len);
  free(b.at);
  free(b.len);
}

/* ---- one file --------------------------------------------------------------------- */

/* Where the `// expect:` line starts, or NULL. */
static const char *find_expect_line(const char *text) {
  size_t n = strlen(EXPECT_LINE);
  for (const char *line = text; line && *line;) {
    if (strncmp(line, EXPECT_LINE, n) == 0 && (line[n] == '\n' || line[n] == 0)) return line;
    line = strchr(line, '\n');
    if (line) line++;
  }
  return NULL;
}

static void write_expectation(const char *path, const char *input, size_t input_len, const char *actual) {
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot write %s", path);
  fwrite(input, 1, input_len, f);
  if (input_len && input[input_len - 1] != '\n') fputc('\n', f);
  fprintf(f, "%s\n%s", EXPECT_LINE, actual);
  fclose(f);
}

static void run_file(void **state) {
  Case *c = *state;
  const char *file = c->file;
  char rel[512];
  snprintf(rel, sizeof rel, PASSES_DIR "/%s", file);
  char path[4096];
  snprintf(path, sizeof path, "%s", test_path(rel));
  char *text = c->text = test_read_file(path, NULL);
  if (!text) fail_msg("cannot read %s", path);
  const char *expect_at = find_expect_line(text);
  size_t input_len = expect_at ? (size_t)(expect_at - text) : strlen(text);
  const char *expected = expect_at ? expect_at + strlen(EXPECT_LINE) + (expect_at[strlen(EXPECT_LINE)] == '\n') : NULL;
  char *input = c->input = strndup(text, input_len);
  assert_non_null(input);

  Step steps[MAX_STEPS];
  int nsteps = parse_run_line(c, input, steps);
  TpkError err = {0};
  TpkModule *m = c->module = tpk_ir_parse(input, input_len, file, &err);
  if (!m) fail_msg("%s: the input does not parse: %s", file, err.message);

  int nfuncs = m->nfuncs; /* passes may add functions */
  if (steps[0].pass->graph) run_module(c, m, steps, nsteps);
  for (int i = 0; i < nfuncs && !steps[0].pass->graph; i++) {
    if (i) tpk_str_putc(&c->actual, '\n');
    run_steps(c, m->funcs[i], steps, nsteps);
  }
  const char *got = c->actual.data ? c->actual.data : "";

  const char *update = getenv("TPK_UPDATE_EXPECT");
  if (update && strcmp(update, "1") == 0) {
    if (!expected || strcmp(expected, got) != 0) {
      write_expectation(path, text, input_len, got);
      print_message("%s: expectation updated\n", file);
    }
  } else if (!expected) {
    fail_msg("%s: no '%s' line; the passes print:\n%s(TPK_UPDATE_EXPECT=1 writes it)", file, EXPECT_LINE, got);
  } else if (strcmp(expected, got) != 0) {
    unified_diff(&c->message, expected, got);
    fail_msg("%s: the passes print something else\n%s", file, c->message.data);
  }
}

int main(int argc, char **argv) {
  char *files[MAX_FILES];
  int n = test_list_files(PASSES_DIR, ".ir", files, MAX_FILES);
  struct CMUnitTest *tests = calloc((size_t)(n ? n : 1), sizeof *tests);
  char **names = calloc((size_t)(n ? n : 1), sizeof *names);
  Case *cases = calloc((size_t)(n ? n : 1), sizeof *cases);
  if (!tests || !names || !cases) return 1;
  for (int i = 0; i < n; i++) {
    names[i] = strndup(files[i], strlen(files[i]) - strlen(".ir"));
    cases[i].file = files[i];
    tests[i] = (struct CMUnitTest){.name = names[i], .test_func = run_file, .teardown_func = free_case,
                                   .initial_state = &cases[i]};
  }
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  int failed = _cmocka_run_group_tests("passes", tests, (size_t)n, NULL, NULL);
  for (int i = 0; i < n; i++) free(names[i]);
  test_names_free(files, n);
  free(names);
  free(cases);
  free(tests);
  return failed;
}
