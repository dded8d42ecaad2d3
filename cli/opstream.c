/*
 * opstream.c — parse and replay recorded op streams (opstream.h; the format
 * is documented in tools/record_streams.py).
 */
#include "cli/opstream.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SYMS = 32, MAX_ARGS = 16, MAX_RESULTS = 8, MAX_LIST = 16, MAX_RPN = 32 };

/* An integer expression of the symbols, in postfix: a size in an op's
 * arguments ("s0*s1", "(s2//4)"). */
typedef enum { RPN_CONST, RPN_SYM, RPN_ADD, RPN_SUB, RPN_MUL, RPN_FLOORDIV, RPN_NEG } RpnKind;
typedef struct Rpn {
  RpnKind kind;
  int64_t v; /* CONST: the value; SYM: the symbol's index */
} Rpn;
typedef struct Expr {
  int n;
  Rpn rpn[MAX_RPN];
} Expr;

typedef enum { A_NONE, A_VALUE, A_INT, A_FLOAT, A_BOOL, A_DTYPE, A_STR, A_INTS, A_VALUES } ArgKind;

typedef struct Arg {
  ArgKind kind;
  char *name;  /* keyword, or NULL */
  int value;   /* A_VALUE */
  Expr expr;   /* A_INT */
  double f;    /* A_FLOAT */
  bool b;      /* A_BOOL */
  TpkDType dtype;
  char *str;
  int n;               /* A_INTS, A_VALUES */
  Expr *exprs;         /* A_INTS (bools are 0/1) */
  int values[MAX_LIST]; /* A_VALUES */
} Arg;

typedef struct Op {
  char *name;
  int line;
  int nargs;
  Arg args[MAX_ARGS];
  int nres;
  int res[MAX_RESULTS]; /* value numbers; -1 for `_` */
  int nfree;            /* values whose last use this op is */
  int *frees;
} Op;

typedef enum { INIT_RANDN, INIT_ZEROS, INIT_RANDINT } InitKind;

typedef struct Input {
  int value;
  TpkDType dtype;
  int rank;
  Expr dims[TPK_MAX_DIMS];
  InitKind init;
  int64_t lo, hi;
} Input;

struct OpStream {
  int nsyms;
  char *sym_names[MAX_SYMS];
  int64_t recorded[MAX_SYMS];
  int ninputs, nops, noutputs, nvalues;
  Input *inputs;
  Op *ops;
  int *outputs;
};

/* ---- parsing ------------------------------------------------------------------------- */

typedef struct Parser {
  OpStream *s;
  bool *defined; /* value number -> made by an input or an op above */
  int ndefined;
  const char *name;
  const char *p;
  int line;
  char *err;
  size_t errlen;
  bool failed;
} Parser;

static bool fail(Parser *P, const char *fmt, ...) {
  if (P->failed) return false;
  P->failed = true;
  int n = snprintf(P->err, P->errlen, "%s:%d: ", P->name, P->line);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < P->errlen) vsnprintf(P->err + n, P->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

static void skip_space(Parser *P) {
  while (*P->p == ' ' || *P->p == '\t') P->p++;
}

static bool eat(Parser *P, const char *tok) {
  skip_space(P);
  size_t n = strlen(tok);
  if (strncmp(P->p, tok, n) != 0) return false;
  P->p += n;
  return true;
}

static bool expect(Parser *P, const char *tok) { return eat(P, tok) || fail(P, "expected '%s' at '%.20s'", tok, P->p); }

static char *word(Parser *P) {
  skip_space(P);
  const char *a = P->p;
  while (isalnum((unsigned char)*P->p) || *P->p == '_' || *P->p == '.') P->p++;
  if (P->p == a) return NULL;
  return strndup(a, (size_t)(P->p - a));
}

static int sym_index(const OpStream *s, const char *name, size_t n) {
  for (int i = 0; i < s->nsyms; i++)
    if (strlen(s->sym_names[i]) == n && strncmp(s->sym_names[i], name, n) == 0) return i;
  return -1;
}

static bool push(Parser *P, Expr *e, RpnKind k, int64_t v) {
  if (e->n == MAX_RPN) return fail(P, "size expression too long");
  e->rpn[e->n++] = (Rpn){k, v};
  return true;
}

static bool parse_sum(Parser *P, Expr *e);

static bool parse_factor(Parser *P, Expr *e) {
  skip_space(P);
  if (eat(P, "(")) return parse_sum(P, e) && expect(P, ")");
  if (eat(P, "-")) return parse_factor(P, e) && push(P, e, RPN_NEG, 0);
  if (isdigit((unsigned char)*P->p)) {
    char *end;
    long long v = strtoll(P->p, &end, 10);
    P->p = end;
    return push(P, e, RPN_CONST, v);
  }
  const char *a = P->p;
  while (isalnum((unsigned char)*P->p) || *P->p == '_') P->p++;
  int i = sym_index(P->s, a, (size_t)(P->p - a));
  if (i < 0) return fail(P, "'%.*s' is not a size symbol of the `sizes` line", (int)(P->p - a), a);
  return push(P, e, RPN_SYM, i);
}

static bool parse_product(Parser *P, Expr *e) {
  if (!parse_factor(P, e)) return false;
  for (;;) {
    if (eat(P, "//")) {
      if (!parse_factor(P, e) || !push(P, e, RPN_FLOORDIV, 0)) return false;
    } else if (eat(P, "*")) {
      if (!parse_factor(P, e) || !push(P, e, RPN_MUL, 0)) return false;
    } else {
      return true;
    }
  }
}

static bool parse_sum(Parser *P, Expr *e) {
  if (!parse_product(P, e)) return false;
  for (;;) {
    if (eat(P, "+")) {
      if (!parse_product(P, e) || !push(P, e, RPN_ADD, 0)) return false;
    } else if (eat(P, "-")) {
      if (!parse_product(P, e) || !push(P, e, RPN_SUB, 0)) return false;
    } else {
      return true;
    }
  }
}

static int64_t eval(const Expr *e, const int64_t *sizes) {
  int64_t st[MAX_RPN];
  int n = 0;
  for (int i = 0; i < e->n; i++) {
    const Rpn *r = &e->rpn[i];
    switch (r->kind) {
    case RPN_CONST: st[n++] = r->v; break;
    case RPN_SYM: st[n++] = sizes[r->v]; break;
    case RPN_NEG: st[n - 1] = -st[n - 1]; break;
    default: {
      int64_t b = st[--n], a = st[n - 1];
      st[n - 1] = r->kind == RPN_ADD   ? a + b
                  : r->kind == RPN_SUB ? a - b
                  : r->kind == RPN_MUL ? a * b
                  : b == 0             ? 0
                                       : (a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
    }
    }
  }
  return n ? st[0] : 0;
}

static TpkDType dtype_of(const char *w) {
  if (strcmp(w, "i64") == 0) return TPK_I32; /* tpk's index type */
  return tpk_dtype_from_name(w, strlen(w));
}

static bool value_ref(Parser *P, int *out) {
  if (!eat(P, "%")) return fail(P, "expected a %%value");
  char *end;
  long v = strtol(P->p, &end, 10);
  if (end == P->p || v < 0 || v > 1000000) return fail(P, "bad value name at '%.20s'", P->p);
  P->p = end;
  *out = (int)v;
  if (*out >= P->s->nvalues) P->s->nvalues = *out + 1;
  return true;
}

/* v is made here (an input, an op's result): once only. */
static bool define(Parser *P, int v) {
  if (v >= P->ndefined) {
    int n = v + 64;
    bool *d = realloc(P->defined, sizeof *d * (size_t)n);
    if (!d) return fail(P, "out of memory");
    memset(d + P->ndefined, 0, sizeof *d * (size_t)(n - P->ndefined));
    P->defined = d;
    P->ndefined = n;
  }
  if (P->defined[v]) return fail(P, "%%%d is made twice", v);
  P->defined[v] = true;
  return true;
}

/* A use of %N, which an input or an op above must have made. */
static bool use(Parser *P, int *out) {
  if (!value_ref(P, out)) return false;
  return (*out < P->ndefined && P->defined[*out]) || fail(P, "%%%d is used before it is made", *out);
}

static bool parse_arg(Parser *P, Arg *a) {
  skip_space(P);
  /* keyword? */
  const char *save = P->p;
  char *w = word(P);
  if (w && eat(P, "=")) {
    a->name = w;
  } else {
    free(w);
    P->p = save;
  }
  skip_space(P);
  if (*P->p == '%') {
    a->kind = A_VALUE;
    return use(P, &a->value);
  }
  if (*P->p == '[') {
    P->p++;
    skip_space(P);
    if (*P->p == '%') {
      a->kind = A_VALUES;
      do {
        if (a->n == MAX_LIST) return fail(P, "list too long");
        if (!use(P, &a->values[a->n++])) return false;
      } while (eat(P, ","));
      return expect(P, "]");
    }
    a->kind = A_INTS;
    a->exprs = calloc(MAX_LIST, sizeof *a->exprs);
    if (eat(P, "]")) return true;
    do {
      if (a->n == MAX_LIST) return fail(P, "list too long");
      Expr *e = &a->exprs[a->n++];
      if (eat(P, "True")) push(P, e, RPN_CONST, 1);
      else if (eat(P, "False")) push(P, e, RPN_CONST, 0);
      else if (!parse_sum(P, e)) return false;
    } while (eat(P, ","));
    return expect(P, "]");
  }
  if (*P->p == '"') {
    const char *b = ++P->p;
    while (*P->p && *P->p != '"' && *P->p != '\n') P->p++;
    if (*P->p != '"') return fail(P, "unterminated string");
    a->kind = A_STR;
    a->str = strndup(b, (size_t)(P->p - b));
    P->p++;
    return true;
  }
  if (eat(P, "True") || eat(P, "False")) {
    a->kind = A_BOOL;
    a->b = P->p[-1] == 'e' && P->p[-4] == 'T';
    return true;
  }
  if (eat(P, "None")) {
    a->kind = A_NONE;
    return true;
  }
  /* a number: a float has '.', 'e', inf or nan */
  const char *b = P->p;
  const char *q = b + (*b == '-');
  size_t span = strspn(q, "0123456789.e+-");
  bool is_float = strncmp(q, "inf", 3) == 0 || strncmp(q, "nan", 3) == 0 ||
                  (isdigit((unsigned char)*q) && (memchr(q, '.', span) || memchr(q, 'e', span)));
  if (is_float) {
    char *end;
    a->kind = A_FLOAT;
    a->f = strtod(b, &end);
    P->p = end;
    return true;
  }
  /* a dtype, else a size expression */
  char *d = word(P);
  TpkDType dt = d ? dtype_of(d) : TPK_DTYPE_COUNT;
  free(d);
  if (dt != TPK_DTYPE_COUNT) {
    a->kind = A_DTYPE;
    a->dtype = dt;
    return true;
  }
  P->p = b;
  a->kind = A_INT;
  return parse_sum(P, &a->expr);
}

static bool parse_dims(Parser *P, Input *in) {
  if (!expect(P, "[")) return false;
  if (eat(P, "]")) return true;
  do {
    if (in->rank == TPK_MAX_DIMS) return fail(P, "too many dims");
    if (!parse_sum(P, &in->dims[in->rank++])) return false;
  } while (eat(P, ","));
  return expect(P, "]");
}

static bool parse_line(Parser *P) {
  OpStream *s = P->s;
  skip_space(P);
  if (*P->p == '#' || *P->p == '\n' || !*P->p) return true;
  if (eat(P, "sizes")) {
    for (;;) {
      char *w = word(P);
      if (!w) return true;
      if (s->nsyms == MAX_SYMS) return fail(P, "too many symbols");
      s->sym_names[s->nsyms] = w;
      if (!expect(P, "=")) return false;
      s->recorded[s->nsyms++] = strtoll(P->p, (char **)&P->p, 10);
    }
  }
  if (eat(P, "input")) {
    Input *in = &s->inputs[s->ninputs++];
    if (!value_ref(P, &in->value) || !define(P, in->value)) return false;
    char *d = word(P);
    in->dtype = d ? dtype_of(d) : TPK_DTYPE_COUNT;
    free(d);
    if (in->dtype == TPK_DTYPE_COUNT) return fail(P, "unknown dtype");
    if (!parse_dims(P, in)) return false;
    if (eat(P, "randint(")) {
      in->init = INIT_RANDINT;
      in->lo = strtoll(P->p, (char **)&P->p, 10);
      if (!expect(P, ",")) return false;
      in->hi = strtoll(P->p, (char **)&P->p, 10);
      return expect(P, ")");
    }
    if (eat(P, "zeros")) in->init = INIT_ZEROS;
    else if (eat(P, "randn")) in->init = INIT_RANDN;
    else return fail(P, "expected randn, zeros or randint(LO,HI) after the input's type");
    return true;
  }
  if (eat(P, "output")) {
    do {
      if (!use(P, &s->outputs[s->noutputs++])) return false;
    } while (eat(P, ","));
    return true;
  }
  Op *op = &s->ops[s->nops++];
  op->line = P->line;
  do {
    if (op->nres == MAX_RESULTS) return fail(P, "too many results");
    if (eat(P, "_")) op->res[op->nres++] = -1;
    else if (!value_ref(P, &op->res[op->nres++])) return false;
  } while (eat(P, ","));
  if (!expect(P, "=")) return false;
  op->name = word(P);
  if (!op->name) return fail(P, "expected an op name");
  if (!expect(P, "(")) return false;
  if (!eat(P, ")")) {
    do {
      if (op->nargs == MAX_ARGS) return fail(P, "too many arguments");
      if (!parse_arg(P, &op->args[op->nargs++])) return false;
    } while (eat(P, ","));
    if (!expect(P, ")")) return false;
  }
  for (int r = 0; r < op->nres; r++)
    if (op->res[r] >= 0 && !define(P, op->res[r])) return false;
  return true;
}

/* Each value's last reader frees it after that op (outputs live on). */
static bool plan_frees(OpStream *s) {
  int *last = malloc(sizeof *last * (size_t)(s->nvalues ? s->nvalues : 1));
  if (!last) return false;
  for (int v = 0; v < s->nvalues; v++) last[v] = -2; /* never read */
  for (int i = 0; i < s->nops; i++)
    for (int a = 0; a < s->ops[i].nargs; a++) {
      const Arg *g = &s->ops[i].args[a];
      if (g->kind == A_VALUE) last[g->value] = i;
      for (int k = 0; g->kind == A_VALUES && k < g->n; k++) last[g->values[k]] = i;
    }
  for (int i = 0; i < s->noutputs; i++) last[s->outputs[i]] = -1;
  for (int i = 0; i < s->ninputs; i++) last[s->inputs[i].value] = -1; /* the caller's */
  /* a result nobody reads dies at once */
  for (int i = 0; i < s->nops; i++)
    for (int r = 0; r < s->ops[i].nres; r++)
      if (s->ops[i].res[r] >= 0 && last[s->ops[i].res[r]] == -2) last[s->ops[i].res[r]] = i;
  for (int v = 0; v < s->nvalues; v++)
    if (last[v] >= 0) {
      Op *op = &s->ops[last[v]];
      int *f = realloc(op->frees, sizeof *f * (size_t)(op->nfree + 1));
      if (!f) {
        free(last);
        return false;
      }
      op->frees = f;
      f[op->nfree++] = v;
    }
  free(last);
  return true;
}

OpStream *opstream_parse(const char *name, const char *text, char *err, size_t errlen) {
  int lines = 1;
  for (const char *c = text; *c; c++) lines += *c == '\n';
  OpStream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->inputs = calloc((size_t)lines, sizeof *s->inputs);
  s->ops = calloc((size_t)lines, sizeof *s->ops);
  s->outputs = calloc((size_t)lines * MAX_LIST, sizeof *s->outputs);
  Parser P = {.s = s, .name = name, .p = text, .line = 1, .err = err, .errlen = errlen};
  if (!s->inputs || !s->ops || !s->outputs) fail(&P, "out of memory");
  while (!P.failed && *P.p) {
    if (parse_line(&P)) {
      skip_space(&P);
      if (*P.p == '#') P.p += strcspn(P.p, "\n");
      if (*P.p && *P.p != '\n') fail(&P, "unexpected '%.20s'", P.p);
    }
    P.p += strcspn(P.p, "\n");
    if (*P.p) P.p++;
    P.line++;
  }
  free(P.defined);
  if (!P.failed && !plan_frees(s)) fail(&P, "out of memory");
  if (P.failed) {
    opstream_free(s);
    return NULL;
  }
  return s;
}

OpStream *opstream_load(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(text);
    snprintf(err, errlen, "%s: cannot read", path);
    return NULL;
  }
  fclose(f);
  text[n] = 0;
  OpStream *s = opstream_parse(path, text, err, errlen);
  free(text);
  return s;
}

void opstream_free(OpStream *s) {
  if (!s) return;
  for (int i = 0; i < s->nsyms; i++) free(s->sym_names[i]);
  for (int i = 0; s->ops && i < s->nops; i++) {
    Op *op = &s->ops[i];
    free(op->name);
    free(op->frees);
    for (int a = 0; a < op->nargs; a++) {
      free(op->args[a].name);
      free(op->args[a].str);
      free(op->args[a].exprs);
    }
  }
  free(s->inputs);
  free(s->ops);
  free(s->outputs);
  free(s);
}

int opstream_symbol_count(const OpStream *s) { return s->nsyms; }
const char *opstream_symbol_name(const OpStream *s, int i) { return s->sym_names[i]; }
int64_t opstream_symbol_recorded(const OpStream *s, int i) { return s->recorded[i]; }
int opstream_op_count(const OpStream *s) { return s->nops; }
int opstream_input_count(const OpStream *s) { return s->ninputs; }
int opstream_output_count(const OpStream *s) { return s->noutputs; }

/* ---- replaying ----------------------------------------------------------------------- */

/* splitmix64: the same inputs on every machine */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *state) { return (double)(next_random(state) >> 11) / 9007199254740992.0; }

TpkStatus opstream_make_inputs(const OpStream *s, TpkDevice *dev, const int64_t *sizes, uint64_t seed,
                               TpkBuffer **inputs) {
  if (!sizes) sizes = s->recorded;
  uint64_t state = seed;
  for (int i = 0; i < s->ninputs; i++) inputs[i] = NULL;
  for (int i = 0; i < s->ninputs; i++) {
    const Input *in = &s->inputs[i];
    int64_t shape[TPK_MAX_DIMS];
    size_t n = 1;
    for (int d = 0; d < in->rank; d++) n *= (size_t)(shape[d] = eval(&in->dims[d], sizes));
    TpkStatus st = tpk_buffer_create(dev, in->dtype, in->rank, shape, &inputs[i]);
    if (st != TPK_OK) return st;
    if (in->init == INIT_ZEROS) continue;
    float *f = malloc(sizeof *f * (n ? n : 1));
    void *data = malloc(tpk_buffer_bytes(inputs[i]) + 1);
    if (!f || !data) {
      free(f);
      free(data);
      return TPK_ERR_NOMEM;
    }
    for (size_t k = 0; k < n; k++) {
      if (in->init == INIT_RANDINT) {
        f[k] = (float)(in->lo + (int64_t)(next_random(&state) % (uint64_t)(in->hi - in->lo)));
      } else { /* a normal sample (Box-Muller), kept small */
        double u = uniform(&state), v = uniform(&state);
        f[k] = (float)(0.5 * __builtin_sqrt(-2.0 * __builtin_log(u + 1e-300)) * __builtin_cos(6.283185307179586 * v));
      }
    }
    tpk_dtype_convert(TPK_F32, f, in->dtype, data, n);
    st = tpk_buffer_write(inputs[i], data, tpk_buffer_bytes(inputs[i]));
    free(f);
    free(data);
    if (st != TPK_OK) return st;
  }
  return TPK_OK;
}

TpkStatus opstream_run(const OpStream *s, TpkStream *st, const int64_t *sizes, TpkBuffer *const *inputs,
                       TpkBuffer **outputs, int *failed) {
  if (!sizes) sizes = s->recorded;
  TpkBuffer **vals = calloc((size_t)(s->nvalues ? s->nvalues : 1), sizeof *vals);
  if (!vals) return TPK_ERR_NOMEM;
  for (int i = 0; i < s->ninputs; i++) vals[s->inputs[i].value] = inputs[i];
  TpkStatus status = TPK_OK;
  for (int i = 0; i < s->nops && status == TPK_OK; i++) {
    const Op *op = &s->ops[i];
    TpkArg args[MAX_ARGS];
    int64_t ints[MAX_ARGS][MAX_LIST];
    TpkBuffer *lists[MAX_ARGS][MAX_LIST];
    for (int a = 0; a < op->nargs; a++) {
      const Arg *g = &op->args[a];
      TpkArg *t = &args[a];
      switch (g->kind) {
      case A_NONE: *t = tpk_arg_none(); break;
      case A_VALUE: *t = tpk_arg_buffer(vals[g->value]); break;
      case A_INT: *t = tpk_arg_int(eval(&g->expr, sizes)); break;
      case A_FLOAT: *t = tpk_arg_float(g->f); break;
      case A_BOOL: *t = tpk_arg_bool(g->b); break;
      case A_DTYPE: *t = tpk_arg_dtype(g->dtype); break;
      case A_STR: *t = tpk_arg_str(g->str); break;
      case A_INTS:
        for (int k = 0; k < g->n; k++) ints[a][k] = eval(&g->exprs[k], sizes);
        *t = tpk_arg_ints(g->n, ints[a]);
        break;
      case A_VALUES:
        for (int k = 0; k < g->n; k++) lists[a][k] = vals[g->values[k]];
        *t = tpk_arg_buffers(g->n, lists[a]);
        break;
      }
      t->name = g->name;
    }
    TpkBuffer *outs[MAX_RESULTS] = {0};
    int n = 0;
    status = tpk_stream_op(st, op->name, args, op->nargs, outs, MAX_RESULTS, &n);
    if (status != TPK_OK) {
      if (failed) *failed = op->line;
      break;
    }
    for (int r = 0; r < n; r++) {
      if (r < op->nres && op->res[r] >= 0) vals[op->res[r]] = outs[r];
      else tpk_buffer_destroy(outs[r]); /* a result the step does not use */
    }
    for (int k = 0; k < op->nfree; k++) {
      tpk_buffer_destroy(vals[op->frees[k]]);
      vals[op->frees[k]] = NULL;
    }
  }
  for (int i = 0; i < s->noutputs; i++) {
    outputs[i] = status == TPK_OK ? vals[s->outputs[i]] : NULL;
    vals[s->outputs[i]] = NULL;
  }
  if (status != TPK_OK) /* what the failed replay made */
    for (int v = 0; v < s->nvalues; v++) {
      bool input = false;
      for (int i = 0; i < s->ninputs; i++) input |= s->inputs[i].value == v;
      if (!input && vals[v]) tpk_buffer_destroy(vals[v]);
    }
  free(vals);
  return status;
}
