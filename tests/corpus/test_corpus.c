/*
 * test_corpus.c — every kernel of tests/corpus/ must parse and check clean,
 * build IR that verifies and whose text form round-trips, also with shapes
 * bound and other tunables chosen; and each file must say what it is for.
 *
 * The corpus is the language contract in executable form: the six examples
 * of its §7 plus one file per topic. A new kernel that should work goes
 * there, not into a test's string.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FILES = 256 };

typedef struct Corpus {
  char *names[MAX_FILES]; /* "softmax.tpk" */
  int count;
} Corpus;

static void corpus_list(Corpus *c) {
  memset(c, 0, sizeof *c);
  c->count = test_list_tpk("tests/corpus", c->names, MAX_FILES);
}

static void corpus_free(Corpus *c) {
  test_names_free(c->names, c->count);
  c->count = 0;
}

static char *corpus_read(const char *name) {
  char rel[300];
  snprintf(rel, sizeof rel, "tests/corpus/%s", name);
  char *text = test_read_file(test_path(rel), NULL);
  if (!text) fail_msg("cannot read %s", test_path(rel));
  return text;
}

/* print -> parse -> print must give the same text; returns false (after
 * printing why) when it does not. */
static bool round_trips(const char *name, TpkModule *m) {
  TpkStr a = {0}, b = {0};
  TpkError err = {0};
  tpk_ir_print(&a, m);
  bool ok = true;
  TpkModule *back = tpk_ir_parse(a.data ? a.data : "", a.len, name, &err);
  if (!back) {
    print_error("%s: printed IR does not parse back: %s\n", name, err.message);
    ok = false;
  } else {
    tpk_ir_print(&b, back);
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
      print_error("%s: IR print -> parse -> print differs\n--- printed\n%s\n--- reprinted\n%s\n", name, a.data,
                  b.data ? b.data : "");
      ok = false;
    }
    tpk_module_free(back);
  }
  tpk_str_free(&a);
  tpk_str_free(&b);
  return ok;
}

/* One compilation of a corpus file; false (after printing why) on any error. */
static bool compile_clean(const char *name, const char *text, const TpkCheckOptions *opts, const char *what) {
  TestCompile c;
  test_compile(&c, name, text, opts);
  bool ok = true;
  if (c.status != TPK_OK || !c.module || c.diags.errors > 0) {
    print_error("%s (%s) does not check clean:\n%s\n", name, what, c.rendered);
    ok = false;
  } else {
    if (c.rendered[0]) print_message("%s (%s): warnings:\n%s", name, what, c.rendered);
    TpkError err = {0};
    if (tpk_ir_verify(c.module, &err) != TPK_OK) {
      print_error("%s (%s): IR does not verify: %s\n", name, what, err.message);
      ok = false;
    } else if (!round_trips(name, c.module)) {
      ok = false;
    }
  }
  test_compile_free(&c);
  return ok;
}

static void test_corpus_checks_clean(void **state) {
  (void)state;
  Corpus c;
  corpus_list(&c);
  assert_true(c.count >= 16);
  int failed = 0;
  for (int i = 0; i < c.count; i++) {
    char *text = corpus_read(c.names[i]);
    TpkCheckOptions opts = {0};
    failed += !compile_clean(c.names[i], text, &opts, "defaults");
    free(text);
  }
  corpus_free(&c);
  if (failed) fail_msg("%d corpus files failed", failed);
}

/* ---- With shapes bound and the last tunable choices ------------------------------------- */

typedef struct Names {
  const char *items[64];
  int count;
} Names;

static void names_add(Names *s, const char *name) {
  for (int i = 0; i < s->count; i++)
    if (strcmp(s->items[i], name) == 0) return;
  if (s->count < 64) s->items[s->count++] = name;
}

static bool names_has(const Names *s, const char *name) {
  for (int i = 0; i < s->count; i++)
    if (strcmp(s->items[i], name) == 0) return true;
  return false;
}

static void dim_names(const TpkAst *e, Names *out) {
  for (; e; e = e->next) {
    if (e->kind == TPK_AST_NAME) names_add(out, e->name);
    dim_names(e->lhs, out);
    dim_names(e->rhs, out);
    dim_names(e->args, out);
  }
}

/* True when every kernel of the file that declares tunable `name` lists
 * `value` among its choices. (Whether --tune applies to the kernels that
 * --kernel did not select is the checker's business; this test does not
 * depend on it.) */
static bool choice_valid_everywhere(const TpkAst *file, const char *name, int64_t value) {
  for (const TpkAst *k = file->body; k; k = k->next) {
    if (k->kind != TPK_AST_KERNEL) continue;
    for (const TpkAst *t = k->tunes; t; t = t->next) {
      if (strcmp(t->name, name) != 0) continue;
      bool listed = false;
      for (const TpkAst *v = t->args; v; v = v->next) listed |= v->kind == TPK_AST_INT && v->ival == value;
      if (!listed) return false;
    }
  }
  return true;
}

/* Each kernel on its own, every shape symbol bound to 256 (a multiple of
 * every block size and group the corpus uses) and every tunable whose
 * choices are literals set to its last choice. */
static void test_corpus_checks_bound(void **state) {
  (void)state;
  Corpus c;
  corpus_list(&c);
  int failed = 0, kernels = 0;
  for (int f = 0; f < c.count; f++) {
    char *text = corpus_read(c.names[f]);
    TpkSource src = {.name = c.names[f], .text = text, .len = strlen(text)};
    TpkDiags diags;
    tpk_diags_init(&diags, &src);
    TpkParsed parsed = {0};
    if (tpk_parse(&src, &parsed, &diags) != TPK_OK || !parsed.file) {
      failed++; /* reported by test_corpus_checks_clean */
    } else {
      Names consts = {0};
      for (const TpkAst *n = parsed.file->body; n; n = n->next)
        if (n->kind == TPK_AST_CONST) names_add(&consts, n->name);
      for (const TpkAst *k = parsed.file->body; k; k = k->next) {
        if (k->kind != TPK_AST_KERNEL) continue;
        kernels++;
        Names syms = {0}, tunes = {0};
        TpkBinding binds[64], choices[64];
        int nb = 0, nt = 0;
        for (const TpkAst *t = k->tunes; t; t = t->next) {
          names_add(&tunes, t->name);
          const TpkAst *last = NULL;
          bool literal = true;
          for (const TpkAst *v = t->args; v; v = v->next) {
            literal &= v->kind == TPK_AST_INT;
            last = v;
          }
          if (literal && last && nt < 64 && choice_valid_everywhere(parsed.file, t->name, last->ival))
            choices[nt++] = (TpkBinding){t->name, last->ival};
        }
        for (const TpkAst *p = k->params; p; p = p->next) dim_names(p->dims, &syms);
        for (const TpkAst *p = k->outputs; p; p = p->next) dim_names(p->dims, &syms);
        for (int i = 0; i < syms.count && nb < 64; i++)
          if (!names_has(&consts, syms.items[i]) && !names_has(&tunes, syms.items[i]))
            binds[nb++] = (TpkBinding){syms.items[i], 256};
        TpkCheckOptions opts = {.binds = binds, .nbinds = nb, .tunes = choices, .ntunes = nt, .only_kernel = k->name};
        char what[200];
        snprintf(what, sizeof what, "kernel %s, symbols = 256, last tunable choices", k->name);
        failed += !compile_clean(c.names[f], text, &opts, what);
      }
    }
    tpk_parsed_free(&parsed);
    tpk_diags_free(&diags);
    free(text);
  }
  corpus_free(&c);
  assert_true(kernels >= 60);
  if (failed) fail_msg("%d corpus kernels failed with bindings", failed);
}

/* ---- The corpus itself ------------------------------------------------------------------- */

static void test_corpus_has_contract_examples(void **state) {
  (void)state;
  static const char *const examples[] = {"add.tpk", "softmax.tpk", "matmul.tpk", "layernorm.tpk",
                                         "flash_attention.tpk", "embedding_bwd.tpk"};
  Corpus c;
  corpus_list(&c);
  for (size_t i = 0; i < TPK_ARRAY_LEN(examples); i++) {
    bool found = false;
    for (int j = 0; j < c.count; j++) found |= strcmp(c.names[j], examples[i]) == 0;
    if (!found) fail_msg("tests/corpus/%s (an example of the language contract, §7) is missing", examples[i]);
  }
  corpus_free(&c);
}

static void test_corpus_files_say_what_they_test(void **state) {
  (void)state;
  Corpus c;
  corpus_list(&c);
  for (int i = 0; i < c.count; i++) {
    char *text = corpus_read(c.names[i]);
    bool ok = strncmp(text, "// ", 3) == 0;
    free(text);
    if (!ok) fail_msg("tests/corpus/%s must start with a // comment saying what it exercises", c.names[i]);
  }
  corpus_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_corpus_has_contract_examples),
      cmocka_unit_test(test_corpus_files_say_what_they_test),
      cmocka_unit_test(test_corpus_checks_clean),
      cmocka_unit_test(test_corpus_checks_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
