/*
 * dsl.h — the .tpk language: source files, diagnostics, the AST, the parser
 * and the checker that turns a parsed file into IR.
 *
 *   text ─► lexer.re (re2c) ─► grammar.y (lemon) ─► AST ─► check.c ─► IR
 *
 * The contract is ../shared/design/language.md; every decision it leaves open
 * is written down in dsl/README.md.
 */
#ifndef TPK_DSL_H
#define TPK_DSL_H

#include "ir/ir.h"

/* ---- Source and diagnostics ------------------------------------------------ */

/* A source file held in memory. `text` is NUL-terminated; embedded NULs are
 * rejected by the lexer as invalid characters. */
typedef struct TpkSource {
  const char *name; /* as shown in diagnostics */
  const char *text;
  size_t len;
} TpkSource;

/* A byte span in the source; line and col (1-based) of its start. */
typedef struct TpkSpan {
  uint32_t offset, len;
  int line, col;
} TpkSpan;

typedef enum TpkSeverity { TPK_SEV_ERROR, TPK_SEV_WARNING, TPK_SEV_NOTE } TpkSeverity;

typedef struct TpkDiag {
  TpkSeverity severity;
  TpkSpan span;
  char *message;
  char *hint; /* NULL when there is none */
} TpkDiag;

enum { TPK_DIAG_LIMIT = 50 }; /* errors kept per file; later ones are counted */

/* The diagnostics of one compilation. Owns its strings (heap). */
typedef struct TpkDiags {
  const TpkSource *src;
  TpkDiag *items;
  int count, cap;
  int errors;     /* all errors reported, including those past the limit */
  bool truncated; /* errors past TPK_DIAG_LIMIT were dropped */
} TpkDiags;

void tpk_diags_init(TpkDiags *d, const TpkSource *src);
void tpk_diags_free(TpkDiags *d);
/* Report at a span; `hint` may be NULL. Messages are printf-formatted. */
void tpk_diag_error(TpkDiags *d, TpkSpan at, const char *fmt, ...) TPK_PRINTF(3, 4);
void tpk_diag_error_hint(TpkDiags *d, TpkSpan at, const char *hint, const char *fmt, ...) TPK_PRINTF(4, 5);
void tpk_diag_note(TpkDiags *d, TpkSpan at, const char *fmt, ...) TPK_PRINTF(3, 4);
/* Render every diagnostic in the contract's §8 form:
 *   file:line:col: error: message
 *      <the source line>
 *      ^~~~~   (caret under the span)
 *   hint: ...
 * followed, when errors were dropped, by a line saying how many. */
void tpk_diags_render(TpkStr *out, const TpkDiags *d);

/* Load a file into a TpkSource (heap; free with tpk_source_free). Files over
 * TPK_SOURCE_MAX bytes are refused with a clear error. */
enum { TPK_SOURCE_MAX = 64 << 20 };
TpkStatus tpk_source_read(TpkSource *src, const char *path, TpkError *err);
void tpk_source_free(TpkSource *src);

/* ---- AST --------------------------------------------------------------------- */

typedef enum TpkAstKind {
  /* expressions */
  TPK_AST_INT,    /* ival */
  TPK_AST_FLOAT,  /* fval (inf and nan spelled as literals too) */
  TPK_AST_BOOL,   /* ival 0/1 */
  TPK_AST_NAME,   /* name */
  TPK_AST_UNARY,  /* op ('-', '!' or '~'), lhs */
  TPK_AST_BINARY, /* op, lhs, rhs */
  TPK_AST_CAST,   /* lhs as dtype */
  TPK_AST_CALL,   /* name(args): positional args, then KWARG nodes, in order */
  TPK_AST_KWARG,  /* name = rhs, inside a call's args */
  TPK_AST_INDEX,  /* lhs[args] */
  TPK_AST_FIELD,  /* lhs.name */
  TPK_AST_SLICE,  /* lhs..rhs inside an index, either may be NULL (`:` is
                     a SLICE with both NULL) */
  TPK_AST_TYPE,   /* dtype[args] as an expression: zeros(f32[BM, BN]); args
                     NULL for a scalar type */
  TPK_AST_LIST,   /* [args] */
  /* statements */
  TPK_AST_LET,     /* let name = rhs; */
  TPK_AST_VAR,     /* var name = rhs; */
  TPK_AST_ASSIGN,  /* lhs op rhs; op is '=' or TPK_ASSIGN_ADD... */
  TPK_AST_IF,      /* if lhs { body } else { els }; els may be an IF (else if) */
  TPK_AST_FOR,     /* for ranges { body } */
  TPK_AST_WHILE,   /* while lhs { body } */
  TPK_AST_EXPR,    /* lhs; (a call such as wait(c)) */
  TPK_AST_SCRATCH, /* scratch name: dtype[dims]; */
  /* parts */
  TPK_AST_RANGE,   /* name in lhs..rhs */
  TPK_AST_TILES,   /* name in tiles(lhs, rhs) */
  TPK_AST_PARAM,   /* [inout] name: dtype[dims]  (dims NULL: scalar) */
  TPK_AST_OUTPUT,  /* name: dtype[dims] [= rhs] */
  TPK_AST_TUNE,    /* name in [args] */
  /* top level */
  TPK_AST_CONST,   /* const name = rhs; */
  TPK_AST_KERNEL,  /* kernel name(params) -> (outputs) backward B tune tunes require requires { body } */
  TPK_AST_FILE     /* body: the list of CONST and KERNEL nodes */
} TpkAstKind;

/* Assignment operators in TPK_AST_ASSIGN.op */
enum { TPK_ASSIGN_SET = '=', TPK_ASSIGN_ADD = 256, TPK_ASSIGN_SUB, TPK_ASSIGN_MUL, TPK_ASSIGN_DIV };
/* Binary operators in TPK_AST_BINARY.op: single characters for + - * / % < > & | ^,
 * and these for the two-character ones. */
enum { TPK_BIN_EQ = 300, TPK_BIN_NE, TPK_BIN_LE, TPK_BIN_GE, TPK_BIN_AND, TPK_BIN_OR, TPK_BIN_SHL, TPK_BIN_SHR };

typedef struct TpkAst TpkAst;
/* One node type for the whole tree (chibicc's style): which fields a kind
 * uses is listed beside the kind. Lists are chained through `next`. */
struct TpkAst {
  TpkAstKind kind;
  TpkSpan span;   /* the whole node, for carets */
  TpkAst *next;   /* next item of the list this node is in */
  int depth;      /* nesting depth of this subtree (bounded by the parser) */

  const char *name; /* NAME, CALL, KWARG, FIELD, LET, VAR, SCRATCH, RANGE, TILES,
                       PARAM, OUTPUT, TUNE, CONST, KERNEL */
  TpkSpan name_span; /* where `name` is written, for declarations */
  int op;            /* UNARY, BINARY, ASSIGN */
  int64_t ival;      /* INT, BOOL */
  double fval;       /* FLOAT */
  TpkDType dtype;    /* CAST, TYPE, PARAM, OUTPUT, SCRATCH */
  bool inout;        /* PARAM */
  bool sequential;   /* RANGE, TILES: a `seq` grid axis */
  bool semaphore;    /* SCRATCH: DMA semaphores (`scratch s: semaphore[2];`) */

  TpkAst *lhs, *rhs; /* operands, see the kinds */
  TpkAst *args;      /* CALL, INDEX, TYPE, LIST, TUNE: the list */
  TpkAst *dims;      /* PARAM, OUTPUT, SCRATCH: dimension expressions */
  TpkAst *body;      /* IF then, FOR, WHILE, KERNEL, FILE: statement list */
  TpkAst *els;       /* IF else: statement list (or a single IF) */
  TpkAst *ranges;    /* FOR: RANGE and TILES nodes */
  TpkAst *params, *outputs, *tunes; /* KERNEL */
  TpkAst *requires;  /* KERNEL: `require` conditions, comparison expressions */
  TpkAst *backward;  /* KERNEL: the NAME after `backward`, or NULL */
};

/* A parsed file: its tree and the arena holding it. */
typedef struct TpkParsed {
  TpkArena arena;
  TpkAst *file; /* TPK_AST_FILE; NULL only when nothing could be parsed */
} TpkParsed;

enum { TPK_MAX_DEPTH = 200 }; /* deepest expression/statement nesting accepted */

/* Lex and parse src. Every syntax error goes into diags (parsing resumes at
 * the next statement); returns TPK_OK when there were none. The tree is
 * built even with errors, from what parsed. */
TpkStatus tpk_parse(const TpkSource *src, TpkParsed *out, TpkDiags *diags);
void tpk_parsed_free(TpkParsed *p);

/* Print the tree as an indented S-expression (tpk dump --ast). */
void tpk_ast_print(TpkStr *out, const TpkAst *file);

/* ---- Checking: AST -> IR ------------------------------------------------------ */

/* Values to build the IR with, for `tpk check` and `tpk dump`: shape
 * symbols bound (--bind M=1024) and tunables chosen (--tune BM=256), so that
 * errors that need the values are reported with a caret. Unbound symbols and
 * unchosen tunables stay symbolic: that is the IR a program is loaded as, and
 * lower/bind.c specialises it. */

typedef struct TpkCheckOptions {
  const TpkBinding *binds;
  int nbinds;
  const TpkBinding *tunes;
  int ntunes;
  const char *only_kernel; /* check and build just this kernel (NULL: all);
                              --bind/--tune then apply to it alone */
} TpkCheckOptions;

/* Resolve names, infer dtypes and shapes, check every rule of the language,
 * and build one IR kernel per .tpk kernel into a new module. Diagnostics go
 * into diags; on any error *out is NULL and the status is TPK_ERR_PARSE. */
TpkStatus tpk_check(const TpkParsed *parsed, const TpkCheckOptions *opts, TpkDiags *diags, TpkModule **out);

/* Everything in one call: parse + check a source (what `tpk check` does). */
TpkStatus tpk_compile_source(const TpkSource *src, const TpkCheckOptions *opts, TpkDiags *diags, TpkModule **out);

#endif
