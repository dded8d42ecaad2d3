/*
 * grammar.y — the .tpk grammar (lemon, LALR(1)). Input: tokens from
 * lexer.re; output: the AST of dsl.h, built in the arena through parse.c's
 * constructors. Top-level items are handed to parse.c as soon as they are
 * reduced, so whatever parsed survives a later error.
 *
 * Error recovery is shared with parse.c. A syntax error pops lemon's stack to
 * the innermost statement list (or the file) and shifts `error`; the only
 * token that may follow is TK_SYNC, which the lexer never produces. parse.c
 * then skips tokens to the end of the statement and feeds SYNC there, so the
 * error rules below never eat a '}' or the next kernel.
 *
 * Precedence, loosest first: || && (== != < <= > >=, non-associative) | ^ &
 * (<< >>) (+ -) (* / %) `as` (unary - ! ~) then postfix ([], ., calls) which the grammar
 * layers (postfix/primary) rather than declares.
 */

%name tpk_grammar
%token_prefix TK_
%token_type {TpkToken}
%extra_context {TpkParseState *ps}
%stack_size 4096
%start_symbol file

%include {
#include <stdlib.h>

#include "dsl/parse_int.h"

struct yyParser;
static bool grammar_accepts(struct yyParser *p, int code); /* in %code below */

#define NODE(kind, span) tpk_parse_node(ps, (kind), (span))
#define SEAL(n) tpk_parse_seal(ps, (n))

static TpkAstList list1(TpkParseState *ps, TpkAst *n, TpkSpan span) {
  TpkAstList l = {0};
  tpk_parse_append(ps, &l, n);
  l.span = span;
  return l;
}

static TpkAst *binary(TpkParseState *ps, int op, TpkAst *a, TpkAst *b) {
  TpkAst *n = NODE(TPK_AST_BINARY, tpk_span_join(a->span, b->span));
  n->op = op;
  n->lhs = a;
  n->rhs = b;
  return SEAL(n);
}

static TpkAst *named(TpkParseState *ps, TpkAstKind kind, TpkSpan span, const TpkToken *name) {
  TpkAst *n = NODE(kind, span);
  n->name = tpk_parse_name(ps, name);
  n->name_span = name->span;
  return n;
}

/* An assignment's target must be a variable or a store through an index;
 * the grammar accepts any expression there (to stay LALR(1)) and this
 * check names the mistake. */
static void check_lvalue(TpkParseState *ps, TpkAst *lhs) {
  if (lhs->kind == TPK_AST_NAME || lhs->kind == TPK_AST_INDEX || lhs == ps->dummy) return;
  tpk_diag_error_hint(ps->diags, lhs->span, "assign to a name (acc = ...) or a tensor element (y[i, :] = ...)",
                      "cannot assign to this expression");
}

/* Keyword arguments come after the positional ones (Python's rule), so the
 * checker can read positions without searching. */
static void check_arg_order(TpkParseState *ps, TpkAstList *args) {
  bool kw = false;
  for (TpkAst *a = args->head; a; a = a->next) {
    if (a->kind == TPK_AST_KWARG) kw = true;
    else if (kw) {
      tpk_diag_error(ps->diags, a->span, "positional argument after a keyword argument");
      return;
    }
  }
}
}

%code {
/* Would the parser accept token `code` now (after whatever reductions it
 * triggers)? Simulates lemon's loop on the state numbers only: the real
 * stack below the simulated top is read, never written. */
static bool grammar_accepts(struct yyParser *p, int code) {
  enum { SIM = 64 };
  YYACTIONTYPE top[SIM];
  int ntop = 0;
  long base = p->yytos - p->yystack + 1; /* real entries still in view */
  YYACTIONTYPE state = p->yytos->stateno;
  for (int steps = 0; steps < 1000; steps++) {
    YYACTIONTYPE act = yy_find_shift_action((YYCODETYPE)code, state);
    if (act <= YY_MAX_SHIFTREDUCE || act == YY_ACCEPT_ACTION) return true;
    if (act < YY_MIN_REDUCE) return false; /* error or no action */
    unsigned rule = act - YY_MIN_REDUCE;
    int pop = -yyRuleInfoNRhs[rule];
    if (pop <= ntop) ntop -= pop;
    else {
      base -= pop - ntop;
      ntop = 0;
    }
    if (base <= 0 && ntop == 0) return false;
    YYACTIONTYPE under = ntop ? top[ntop - 1] : p->yystack[base - 1].stateno;
    state = yy_find_reduce_action(under, yyRuleInfoLhs[rule]);
    if (ntop == SIM) return false;
    top[ntop++] = state;
  }
  return false;
}

bool tpk_grammar_in_error(void *parser) {
  yyParser *p = parser;
  return p->yytos > p->yystack && p->yytos->major == YYERRORSYMBOL;
}
}

%syntax_error {
  uint32_t expected[TPK_EXPECTED_WORDS] = {0};
  for (int t = 1; t < YYNTOKEN && t < 32 * TPK_EXPECTED_WORDS; t++)
    if (t != YYERRORSYMBOL && grammar_accepts(yypParser, t)) expected[t / 32] |= 1u << (t % 32);
  tpk_parse_syntax_error(ps, yymajor, &yyminor, expected);
}
%stack_overflow { tpk_parse_stack_overflow(ps); }
/* Failure (an error at end of file) was reported by %syntax_error. */
%parse_failure { ps->abandoned = true; }

/* Token order fixes the codes; it is also the order "expected ..." lists
 * name them in. SYNC and ILLEGAL never appear in a correct program. */
%token KERNEL CONST LET VAR IF ELSE FOR SCRATCH BACKWARD TUNE REQUIRE IN INOUT TILES AS TRUE FALSE.
%token WHILE SEQ SEMAPHORE.
%token NAME INT FLOAT DTYPE.
%token SEMI RBRACE LBRACE RPAREN LPAREN RBRACKET LBRACKET COMMA COLON DOT DOTDOT ARROW.
%token ASSIGN PLUSEQ MINUSEQ STAREQ SLASHEQ.
%token SYNC ILLEGAL.

%left OROR.
%left ANDAND.
%nonassoc EQ NE LT LE GT GE.
%left PIPE.
%left CARET.
%left AMP.
%left SHL SHR.
%left PLUS MINUS.
%left STAR SLASH PERCENT.
%left AS.
%right NOT TILDE.

%type expr {TpkAst *}
%type postfix {TpkAst *}
%type primary {TpkAst *}
%type type_expr {TpkAst *}
%type idx {TpkAst *}
%type arg {TpkAst *}
%type stmt {TpkAst *}
%type if_stmt {TpkAst *}
%type range {TpkAst *}
%type param {TpkAst *}
%type sample_opt {TpkAst *}
%type output {TpkAst *}
%type tune {TpkAst *}
%type backward {TpkAst *}
%type item {TpkAst *}
%type assign_op {int}
%type block {TpkAstList}
%type stmts {TpkAstList}
%type dims_opt {TpkAstList}
%type params {TpkAstList}
%type param_list {TpkAstList}
%type outputs {TpkAstList}
%type output_list {TpkAstList}
%type tunes {TpkAstList}
%type tune_list {TpkAstList}
%type requires {TpkAstList}
%type ranges {TpkAstList}
%type exprs {TpkAstList}
%type list_items {TpkAstList}
%type idxs {TpkAstList}
%type args {TpkAstList}
%type arg_list {TpkAstList}

/* ---- file ---- */

file ::= items.
items ::= .
items ::= items item(I). { tpk_parse_add_item(ps, I); }

item(A) ::= CONST(K) NAME(N) ASSIGN expr(E) SEMI(S). {
  A = named(ps, TPK_AST_CONST, tpk_span_join(K.span, S.span), &N);
  A->rhs = E;
  A = SEAL(A);
}
item(A) ::= KERNEL(K) NAME(N) LPAREN params(P) RPAREN ARROW LPAREN outputs(O) RPAREN backward(W) tunes(T) requires(Q) block(B). {
  A = named(ps, TPK_AST_KERNEL, tpk_span_join(K.span, B.span), &N);
  A->params = P.head;
  A->outputs = O.head;
  A->backward = W;
  A->tunes = T.head;
  A->requires = Q.head;
  A->body = B.head;
  A = SEAL(A);
}
item(A) ::= error SYNC. { A = NULL; }

/* ---- kernel header ---- */

params(A) ::= . { A = (TpkAstList){0}; }
params(A) ::= param_list(L). { A = L; }
params(A) ::= param_list(L) COMMA. { A = L; }
param_list(A) ::= param(P). { A = list1(ps, P, P->span); }
param_list(A) ::= param_list(L) COMMA param(P). { A = L; tpk_parse_append(ps, &A, P); }

param(A) ::= NAME(N) COLON DTYPE(T) dims_opt(D) sample_opt(S). {
  A = named(ps, TPK_AST_PARAM, S ? tpk_span_join(N.span, S->span) : D.head ? tpk_span_join(N.span, D.span) : tpk_span_join(N.span, T.span), &N);
  A->dtype = T.v.dtype;
  A->dims = D.head;
  A->rhs = S;
  A = SEAL(A);
}
param(A) ::= INOUT(I) NAME(N) COLON DTYPE(T) dims_opt(D) sample_opt(S). {
  A = named(ps, TPK_AST_PARAM, S ? tpk_span_join(I.span, S->span) : D.head ? tpk_span_join(I.span, D.span) : tpk_span_join(I.span, T.span), &N);
  A->dtype = T.v.dtype;
  A->dims = D.head;
  A->rhs = S;
  A->inout = true;
  A = SEAL(A);
}

/* `lengths: i32[B] in 1..1025` or `in [16, 256]`: the values timing without
 * data assumes (dsl/check.c). A RANGE node without a name, or the list. */
sample_opt(A) ::= . { A = NULL; }
sample_opt(A) ::= IN(K) expr(E). { A = E; (void)K; }
sample_opt(A) ::= IN(K) expr(L) DOTDOT expr(H). {
  A = NODE(TPK_AST_RANGE, tpk_span_join(K.span, H->span));
  A->lhs = L;
  A->rhs = H;
  A = SEAL(A);
}

dims_opt(A) ::= . { A = (TpkAstList){0}; }
dims_opt(A) ::= LBRACKET(L) exprs(E) RBRACKET(R). { A = E; A.span = tpk_span_join(L.span, R.span); }

outputs(A) ::= . { A = (TpkAstList){0}; }
outputs(A) ::= output_list(L). { A = L; }
outputs(A) ::= output_list(L) COMMA. { A = L; }
output_list(A) ::= output(P). { A = list1(ps, P, P->span); }
output_list(A) ::= output_list(L) COMMA output(P). { A = L; tpk_parse_append(ps, &A, P); }

output(A) ::= NAME(N) COLON DTYPE(T) dims_opt(D). {
  A = named(ps, TPK_AST_OUTPUT, D.head ? tpk_span_join(N.span, D.span) : tpk_span_join(N.span, T.span), &N);
  A->dtype = T.v.dtype;
  A->dims = D.head;
  A = SEAL(A);
}
output(A) ::= NAME(N) COLON DTYPE(T) dims_opt(D) ASSIGN expr(E). {
  A = named(ps, TPK_AST_OUTPUT, tpk_span_join(N.span, E->span), &N);
  A->dtype = T.v.dtype;
  A->dims = D.head;
  A->rhs = E;
  A = SEAL(A);
}

/* `backward layernorm_bwd`: the kernel computing this one's input gradients */
backward(A) ::= . { A = NULL; }
backward(A) ::= BACKWARD NAME(N). { A = SEAL(named(ps, TPK_AST_NAME, N.span, &N)); }

tunes(A) ::= . { A = (TpkAstList){0}; }
tunes(A) ::= TUNE tune_list(L). { A = L; }
tune_list(A) ::= tune(T). { A = list1(ps, T, T->span); }
tune_list(A) ::= tune_list(L) COMMA tune(T). { A = L; tpk_parse_append(ps, &A, T); }
tune(A) ::= NAME(N) IN LBRACKET list_items(V) RBRACKET(R). {
  A = named(ps, TPK_AST_TUNE, tpk_span_join(N.span, R.span), &N);
  A->args = V.head;
  A = SEAL(A);
}

/* `require K <= N, 1 <= K`: conditions on sizes, checked by dsl/check.c */
requires(A) ::= . { A = (TpkAstList){0}; }
requires(A) ::= REQUIRE exprs(L). { A = L; }

/* ---- statements ---- */

block(A) ::= LBRACE(L) stmts(S) RBRACE(R). { A = S; A.span = tpk_span_join(L.span, R.span); }
stmts(A) ::= . { A = (TpkAstList){0}; }
stmts(A) ::= stmts(L) stmt(S). { A = L; tpk_parse_append(ps, &A, S); }

stmt(A) ::= LET(K) NAME(N) ASSIGN expr(E) SEMI(S). {
  A = named(ps, TPK_AST_LET, tpk_span_join(K.span, S.span), &N);
  A->rhs = E;
  A = SEAL(A);
}
stmt(A) ::= VAR(K) NAME(N) ASSIGN expr(E) SEMI(S). {
  A = named(ps, TPK_AST_VAR, tpk_span_join(K.span, S.span), &N);
  A->rhs = E;
  A = SEAL(A);
}
stmt(A) ::= expr(L) assign_op(O) expr(R) SEMI(S). {
  check_lvalue(ps, L);
  A = NODE(TPK_AST_ASSIGN, tpk_span_join(L->span, S.span));
  A->op = O;
  A->lhs = L;
  A->rhs = R;
  A = SEAL(A);
}
stmt(A) ::= expr(E) SEMI(S). {
  A = NODE(TPK_AST_EXPR, tpk_span_join(E->span, S.span));
  A->lhs = E;
  A = SEAL(A);
}
stmt(A) ::= if_stmt(I). { A = I; }
stmt(A) ::= FOR(K) ranges(R) block(B). {
  A = NODE(TPK_AST_FOR, tpk_span_join(K.span, B.span));
  A->ranges = R.head;
  A->body = B.head;
  A = SEAL(A);
}
stmt(A) ::= WHILE(K) expr(C) block(B). {
  A = NODE(TPK_AST_WHILE, tpk_span_join(K.span, B.span));
  A->lhs = C;
  A->body = B.head;
  A = SEAL(A);
}
stmt(A) ::= SCRATCH(K) NAME(N) COLON DTYPE(T) LBRACKET exprs(D) RBRACKET SEMI(S). {
  A = named(ps, TPK_AST_SCRATCH, tpk_span_join(K.span, S.span), &N);
  A->dtype = T.v.dtype;
  A->dims = D.head;
  A = SEAL(A);
}
stmt(A) ::= SCRATCH(K) NAME(N) COLON SEMAPHORE LBRACKET exprs(D) RBRACKET SEMI(S). {
  A = named(ps, TPK_AST_SCRATCH, tpk_span_join(K.span, S.span), &N);
  A->dtype = TPK_I32;
  A->semaphore = true;
  A->dims = D.head;
  A = SEAL(A);
}
stmt(A) ::= error SYNC. { A = NULL; }

assign_op(A) ::= ASSIGN. { A = TPK_ASSIGN_SET; }
assign_op(A) ::= PLUSEQ. { A = TPK_ASSIGN_ADD; }
assign_op(A) ::= MINUSEQ. { A = TPK_ASSIGN_SUB; }
assign_op(A) ::= STAREQ. { A = TPK_ASSIGN_MUL; }
assign_op(A) ::= SLASHEQ. { A = TPK_ASSIGN_DIV; }

if_stmt(A) ::= IF(K) expr(C) block(B). {
  A = NODE(TPK_AST_IF, tpk_span_join(K.span, B.span));
  A->lhs = C;
  A->body = B.head;
  A = SEAL(A);
}
if_stmt(A) ::= IF(K) expr(C) block(B) ELSE block(E). {
  A = NODE(TPK_AST_IF, tpk_span_join(K.span, E.span));
  A->lhs = C;
  A->body = B.head;
  A->els = E.head;
  A = SEAL(A);
}
if_stmt(A) ::= IF(K) expr(C) block(B) ELSE if_stmt(E). {
  A = NODE(TPK_AST_IF, tpk_span_join(K.span, E->span));
  A->lhs = C;
  A->body = B.head;
  A->els = E;
  A = SEAL(A);
}

ranges(A) ::= range(R). { A = list1(ps, R, R->span); }
ranges(A) ::= ranges(L) COMMA range(R). { A = L; tpk_parse_append(ps, &A, R); }
ranges(A) ::= ranges(L) COMMA SEQ(K) range(R). {
  A = L;
  R->sequential = true;
  R->span = tpk_span_join(K.span, R->span);
  tpk_parse_append(ps, &A, R);
}
range(A) ::= NAME(N) IN expr(L) DOTDOT expr(H). {
  A = named(ps, TPK_AST_RANGE, tpk_span_join(N.span, H->span), &N);
  A->lhs = L;
  A->rhs = H;
  A = SEAL(A);
}
range(A) ::= NAME(N) IN TILES LPAREN expr(L) COMMA expr(H) RPAREN(R). {
  A = named(ps, TPK_AST_TILES, tpk_span_join(N.span, R.span), &N);
  A->lhs = L;
  A->rhs = H;
  A = SEAL(A);
}

/* ---- expressions ---- */

expr(A) ::= expr(L) OROR expr(R). { A = binary(ps, TPK_BIN_OR, L, R); }
expr(A) ::= expr(L) ANDAND expr(R). { A = binary(ps, TPK_BIN_AND, L, R); }
expr(A) ::= expr(L) EQ expr(R). { A = binary(ps, TPK_BIN_EQ, L, R); }
expr(A) ::= expr(L) NE expr(R). { A = binary(ps, TPK_BIN_NE, L, R); }
expr(A) ::= expr(L) LT expr(R). { A = binary(ps, '<', L, R); }
expr(A) ::= expr(L) LE expr(R). { A = binary(ps, TPK_BIN_LE, L, R); }
expr(A) ::= expr(L) GT expr(R). { A = binary(ps, '>', L, R); }
expr(A) ::= expr(L) GE expr(R). { A = binary(ps, TPK_BIN_GE, L, R); }
expr(A) ::= expr(L) PIPE expr(R). { A = binary(ps, '|', L, R); }
expr(A) ::= expr(L) CARET expr(R). { A = binary(ps, '^', L, R); }
expr(A) ::= expr(L) AMP expr(R). { A = binary(ps, '&', L, R); }
expr(A) ::= expr(L) SHL expr(R). { A = binary(ps, TPK_BIN_SHL, L, R); }
expr(A) ::= expr(L) SHR expr(R). { A = binary(ps, TPK_BIN_SHR, L, R); }
expr(A) ::= expr(L) PLUS expr(R). { A = binary(ps, '+', L, R); }
expr(A) ::= expr(L) MINUS expr(R). { A = binary(ps, '-', L, R); }
expr(A) ::= expr(L) STAR expr(R). { A = binary(ps, '*', L, R); }
expr(A) ::= expr(L) SLASH expr(R). { A = binary(ps, '/', L, R); }
expr(A) ::= expr(L) PERCENT expr(R). { A = binary(ps, '%', L, R); }
expr(A) ::= expr(L) AS DTYPE(T). {
  A = NODE(TPK_AST_CAST, tpk_span_join(L->span, T.span));
  A->lhs = L;
  A->dtype = T.v.dtype;
  A = SEAL(A);
}
expr(A) ::= MINUS(O) expr(E). [NOT] {
  A = NODE(TPK_AST_UNARY, tpk_span_join(O.span, E->span));
  A->op = '-';
  A->lhs = E;
  A = SEAL(A);
}
expr(A) ::= NOT(O) expr(E). {
  A = NODE(TPK_AST_UNARY, tpk_span_join(O.span, E->span));
  A->op = '!';
  A->lhs = E;
  A = SEAL(A);
}
expr(A) ::= TILDE(O) expr(E). {
  A = NODE(TPK_AST_UNARY, tpk_span_join(O.span, E->span));
  A->op = '~';
  A->lhs = E;
  A = SEAL(A);
}
expr(A) ::= postfix(P). { A = P; }
expr(A) ::= type_expr(T). { A = T; }

postfix(A) ::= primary(P). { A = P; }
postfix(A) ::= postfix(L) LBRACKET idxs(I) RBRACKET(R). {
  A = NODE(TPK_AST_INDEX, tpk_span_join(L->span, R.span));
  A->lhs = L;
  A->args = I.head;
  A = SEAL(A);
}
postfix(A) ::= postfix(L) DOT NAME(N). {
  A = named(ps, TPK_AST_FIELD, tpk_span_join(L->span, N.span), &N);
  A->lhs = L;
  A = SEAL(A);
}

primary(A) ::= NAME(N). { A = SEAL(named(ps, TPK_AST_NAME, N.span, &N)); }
primary(A) ::= INT(T). {
  A = NODE(TPK_AST_INT, T.span);
  A->ival = T.v.ival;
  A = SEAL(A);
}
primary(A) ::= FLOAT(T). {
  A = NODE(TPK_AST_FLOAT, T.span);
  A->fval = T.v.fval;
  A = SEAL(A);
}
primary(A) ::= TRUE(T). {
  A = NODE(TPK_AST_BOOL, T.span);
  A->ival = 1;
  A = SEAL(A);
}
primary(A) ::= FALSE(T). { A = SEAL(NODE(TPK_AST_BOOL, T.span)); }
/* Parentheses make no node, but the span grows to cover them, so the
 * caret under (acc / l) as bf16 starts at the '('. */
primary(A) ::= LPAREN(L) expr(E) RPAREN(R). {
  A = E;
  if (A != ps->dummy) A->span = tpk_span_join(L.span, R.span);
}
primary(A) ::= LBRACKET(L) RBRACKET(R). { A = SEAL(NODE(TPK_AST_LIST, tpk_span_join(L.span, R.span))); }
primary(A) ::= LBRACKET(L) list_items(V) RBRACKET(R). {
  A = NODE(TPK_AST_LIST, tpk_span_join(L.span, R.span));
  A->args = V.head;
  A = SEAL(A);
}
primary(A) ::= NAME(N) LPAREN args(G) RPAREN(R). {
  check_arg_order(ps, &G);
  A = named(ps, TPK_AST_CALL, tpk_span_join(N.span, R.span), &N);
  A->args = G.head;
  A = SEAL(A);
}

/* A dtype is an expression only as a whole: f32[BM, BN] is a type, never an
 * index into `f32`, which is why type_expr sits beside postfix. */
type_expr(A) ::= DTYPE(T). {
  A = NODE(TPK_AST_TYPE, T.span);
  A->dtype = T.v.dtype;
  A = SEAL(A);
}
type_expr(A) ::= DTYPE(T) LBRACKET exprs(D) RBRACKET(R). {
  A = NODE(TPK_AST_TYPE, tpk_span_join(T.span, R.span));
  A->dtype = T.v.dtype;
  A->args = D.head;
  A = SEAL(A);
}

exprs(A) ::= expr(E). { A = list1(ps, E, E->span); }
exprs(A) ::= exprs(L) COMMA expr(E). { A = L; tpk_parse_append(ps, &A, E); }
list_items(A) ::= exprs(L). { A = L; }
list_items(A) ::= exprs(L) COMMA. { A = L; }

idxs(A) ::= idx(I). { A = list1(ps, I, I->span); }
idxs(A) ::= idxs(L) COMMA idx(I). { A = L; tpk_parse_append(ps, &A, I); }
idx(A) ::= expr(E). { A = E; }
idx(A) ::= COLON(C). { A = SEAL(NODE(TPK_AST_SLICE, C.span)); }
idx(A) ::= DOTDOT(D). { A = SEAL(NODE(TPK_AST_SLICE, D.span)); }
idx(A) ::= expr(L) DOTDOT expr(H). {
  A = NODE(TPK_AST_SLICE, tpk_span_join(L->span, H->span));
  A->lhs = L;
  A->rhs = H;
  A = SEAL(A);
}
idx(A) ::= expr(L) DOTDOT(D). {
  A = NODE(TPK_AST_SLICE, tpk_span_join(L->span, D.span));
  A->lhs = L;
  A = SEAL(A);
}
idx(A) ::= DOTDOT(D) expr(H). {
  A = NODE(TPK_AST_SLICE, tpk_span_join(D.span, H->span));
  A->rhs = H;
  A = SEAL(A);
}

args(A) ::= . { A = (TpkAstList){0}; }
args(A) ::= arg_list(L). { A = L; }
args(A) ::= arg_list(L) COMMA. { A = L; }
arg_list(A) ::= arg(G). { A = list1(ps, G, G->span); }
arg_list(A) ::= arg_list(L) COMMA arg(G). { A = L; tpk_parse_append(ps, &A, G); }
arg(A) ::= expr(E). { A = E; }
arg(A) ::= NAME(N) ASSIGN expr(E). {
  A = named(ps, TPK_AST_KWARG, tpk_span_join(N.span, E->span), &N);
  A->rhs = E;
  A = SEAL(A);
}
