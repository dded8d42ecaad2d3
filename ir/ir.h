/*
 * ir.h — tpk's one IR: a typed SSA form with structured regions.
 *
 * Every entrance (a .tpk kernel, an eager op stream, a torch.compile graph)
 * becomes this IR, and every backend consumes it. Two levels share one set of
 * ops:
 *   - graph level: functions whose parameters and results are tensor values
 *     (`func`), built by the eager and torch.compile paths;
 *   - tile level: kernels whose parameters are memory refs (`kernel`), with a
 *     grid, loads and stores of blocks, loops and scratch memory. A .tpk kernel
 *     is written at this level; lower/ tiles graph functions into it.
 *
 * Values are SSA: defined once, by an op result or a block argument. Mutable
 * .tpk variables become loop-carried values (`for` iter args, `yield`) and
 * `if` results. Each op lives in a block; ops with regions (grid, for, if)
 * own one block per region.
 *
 * Shapes are symbolic: a dimension is an interned integer expression over
 * shape symbols (M, N, B*H). Interning makes structural equality pointer
 * equality, for dims and for types alike.
 *
 * Text form (printer and parser round-trip exactly; see tpk_ir_print and
 * ir/README.md for the full grammar):
 *
 *   module "softmax.tpk"
 *
 *   kernel @softmax(%x: ref<f32[M,N]>, %y: out ref<f32[M,N]>) tune{BM=8 in [8, 16, 32]} loc(1:1) {
 *     %0 = sym {name="M"} : i32 loc(4:3)
 *     %1 = const {value=8} : i32
 *     %2 = cdiv %0, %1 : i32
 *     %3 = const {value=0} : i32
 *     grid %3, %2 {
 *     ^(%i: tile<8>):
 *       %t = load %x, %i {index="t:", other=-inf} : f32[8,N]
 *       ...
 *       store %y, %i, %v {index="t:", mode="set"}
 *     }
 *   }
 *
 *   func @g(%a: f32[M,K], %b: f32[K,N]) -> (f32[M,N]) {
 *     %0 = dot %a, %b {lhs_contract=[1], rhs_contract=[0], lhs_batch=[], rhs_batch=[]} : f32[M,N]
 *     return %0
 *   }
 *
 * Grammar of one op line:
 *   [%r0, %r1 = ] NAME [%a, %b, ...] [{key=value, ...}] [: T0, T1] [loc(L:C)]
 *   followed by one `{ [^(%arg: T, ...):] ops }` per region (`{ } { }` for if).
 * Params: `%name: [out|inout] [zero] T [loc(L:C)]`; funcs always print
 * `-> (T, ...)`, kernels never; tunables `tune{BM=8 in [8, 16], BK=256}`.
 * Attributes print in signature order; `//` comments are accepted.
 * Attribute values: integers (`3`), floats (always with `.`, `e`, or
 * inf/-inf/nan), `true`/`false`, strings ("..." with \" and \\ escapes),
 * integer lists `[1, 2]`. Types: `f32`, `f32[8,N]`, `f32[B*H,S]`,
 * `ref<f32[M,N]>`, `ref<f32[8,128], vmem>`, `tile<8>`, `dma`.
 * Dims print parenthesised only where needed: `B*H`, `(M+1)/2`, `M-1`,
 * `cdiv(M,8)`.
 * Value names: `%12` or `%name` / `%name.3` from name hints (unique per
 * function; hints that are not identifiers print as counters).
 */
#ifndef TPK_IR_H
#define TPK_IR_H

#include "base/base.h"

typedef struct TpkModule TpkModule;
typedef struct TpkFunc TpkFunc;
typedef struct TpkBlock TpkBlock;
typedef struct TpkOp TpkOp;
typedef struct TpkValue TpkValue;

/* A source position; line 0 means "no location" (synthetic op). */
typedef struct TpkLoc {
  int line, col;
} TpkLoc;

/* ---- Dimensions ------------------------------------------------------------ */

typedef enum TpkDimKind {
  TPK_DIM_CONST, /* value */
  TPK_DIM_SYM,   /* sym: a shape symbol bound at call time */
  TPK_DIM_ADD,   /* a + b */
  TPK_DIM_SUB,   /* a - b */
  TPK_DIM_MUL,   /* a * b */
  TPK_DIM_DIV,   /* a / b, floor division */
  TPK_DIM_CDIV   /* ceil(a / b) */
} TpkDimKind;

/* Interned per module: two dims are equal iff their pointers are equal.
 * Constructors fold constants and order the operands of + and * canonically,
 * so B*H and H*B are the same dim. */
typedef struct TpkDim {
  TpkDimKind kind;
  int64_t value;             /* CONST */
  const char *sym;           /* SYM, interned name */
  const struct TpkDim *a, *b; /* operators */
} TpkDim;

const TpkDim *tpk_dim_const(TpkModule *m, int64_t v);
const TpkDim *tpk_dim_sym(TpkModule *m, const char *name);
/* Build a op b with folding; returns NULL for division by a constant <= 0
 * or when a constant overflows int64. */
const TpkDim *tpk_dim_binary(TpkModule *m, TpkDimKind op, const TpkDim *a, const TpkDim *b);
bool tpk_dim_is_const(const TpkDim *d, int64_t *value);
/* Replace symbols by values where lookup returns true (binding at call time). */
typedef bool (*TpkSymLookup)(void *ctx, const char *sym, int64_t *value);
const TpkDim *tpk_dim_substitute(TpkModule *m, const TpkDim *d, TpkSymLookup lookup, void *ctx);
/* Evaluate with every symbol bound; false if a symbol is unbound or a
 * division by zero happens. */
bool tpk_dim_eval(const TpkDim *d, TpkSymLookup lookup, void *ctx, int64_t *value);
void tpk_dim_print(TpkStr *s, const TpkDim *d);

/* ---- Types ----------------------------------------------------------------- */

enum { TPK_MAX_RANK = 8 };

typedef enum TpkTypeKind {
  TPK_TYPE_TENSOR, /* a value: rank 0 is a scalar, else a tile or a whole array */
  TPK_TYPE_REF,    /* memory: kernel parameters (HBM), scratch (VMEM/SMEM) */
  TPK_TYPE_TILE,   /* a tile index from tiles(N, B): carries id, block size B */
  TPK_TYPE_DMA     /* the handle of a started copy_async */
} TpkTypeKind;

typedef enum TpkMemSpace { TPK_MEM_HBM, TPK_MEM_VMEM, TPK_MEM_SMEM } TpkMemSpace;

/* Interned per module: equal types have equal pointers. */
typedef struct TpkType {
  TpkTypeKind kind;
  TpkDType dtype;    /* TENSOR, REF */
  TpkMemSpace space; /* REF */
  int rank;          /* TENSOR, REF */
  const TpkDim *dims[TPK_MAX_RANK];
  const TpkDim *block; /* TILE: the block size B (a tunable until bound) */
} TpkType;

const TpkType *tpk_type_tensor(TpkModule *m, TpkDType dt, int rank, const TpkDim *const *dims);
const TpkType *tpk_type_scalar(TpkModule *m, TpkDType dt);
const TpkType *tpk_type_ref(TpkModule *m, TpkDType dt, int rank, const TpkDim *const *dims, TpkMemSpace space);
const TpkType *tpk_type_tile(TpkModule *m, int64_t block);
/* A tile whose block size is a dimension: a constant, or a tunable's symbol
 * until the kernel is bound (lower/bind). NULL for a constant <= 0. */
const TpkType *tpk_type_tile_dim(TpkModule *m, const TpkDim *block);
/* The block size of a tile type when it is a constant, else -1. Every stage
 * after binding sees constants. */
int64_t tpk_tile_block(const TpkType *t);
const TpkType *tpk_type_dma(TpkModule *m);
/* Same kind, shape and space with another dtype. */
const TpkType *tpk_type_with_dtype(TpkModule *m, const TpkType *t, TpkDType dt);
bool tpk_type_is_scalar(const TpkType *t); /* rank-0 tensor */
/* "f32", "f32[8,N]", "ref<f32[M,N]>", "ref<f32[8,128], vmem>", "tile<8>", "dma" */
void tpk_type_print(TpkStr *s, const TpkType *t);
/* Just the shape: "[8,N]" ("[]" for a scalar). */
void tpk_shape_print(TpkStr *s, int rank, const TpkDim *const *dims);

/* ---- Ops ------------------------------------------------------------------- */

/* Op flags */
enum {
  TPK_OPF_PURE = 1 << 0,        /* no side effects: CSE and DCE may touch it */
  TPK_OPF_ELEMENTWISE = 1 << 1, /* operands and result have one shape */
  TPK_OPF_COMMUTATIVE = 1 << 2,
  TPK_OPF_TERMINATOR = 1 << 3,  /* ends a block (yield, return) */
  TPK_OPF_COMPARE = 1 << 4,     /* elementwise, result dtype bool */
  TPK_OPF_FLOAT_ONLY = 1 << 5,  /* operands must be floats (exp, log, ...) */
  TPK_OPF_INT_ONLY = 1 << 6     /* operands must be integers or bool (cdiv, and, or, not) */
};

/*
 * The op table: X(ENUM, "text name", min operands, max operands (-1: any),
 *                 results (-1: any), regions, flags, attribute signature)
 * The attribute signature lists key:kind pairs, kinds int|float|num|bool|str|ints;
 * a leading `?` marks an optional attribute. `num` is int or float.
 * Semantics of each op are in ir/README.md.
 */
#define TPK_OPS(X)                                                                               \
  /* values */                                                                                   \
  X(CONST, "const", 0, 0, 1, 0, TPK_OPF_PURE, "value:num")                                      \
  X(SYM, "sym", 0, 0, 1, 0, TPK_OPF_PURE, "name:str")                                           \
  X(PROGRAM_ID, "program_id", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                             \
  X(NUM_PROGRAMS, "num_programs", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                         \
  X(TILE_ID, "tile.id", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
  X(TILE_START, "tile.start", 1, 1, 1, 0, TPK_OPF_PURE, "")                                     \
  /* elementwise unary */                                                                        \
  X(NEG, "neg", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE, "")                             \
  X(NOT, "not", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_INT_ONLY, "")           \
  X(ABS, "abs", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE, "")                             \
  X(EXP, "exp", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")         \
  X(LOG, "log", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")         \
  X(SQRT, "sqrt", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")       \
  X(RSQRT, "rsqrt", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")     \
  X(TANH, "tanh", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")       \
  X(SIGMOID, "sigmoid", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "") \
  X(ERF, "erf", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")         \
  X(FLOOR, "floor", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")     \
  X(CEIL, "ceil", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")       \
  /* convert: same shape, dtype from the result type; floats round to nearest even */           \
  X(CONVERT, "convert", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
  /* elementwise binary: both operands of one type */                                            \
  X(ADD, "add", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE, "")        \
  X(SUB, "sub", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE, "")                             \
  X(MUL, "mul", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE, "")        \
  X(DIV, "div", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE, "")                             \
  X(REM, "rem", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE, "")                             \
  X(CDIV, "cdiv", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_INT_ONLY, "")         \
  X(MAX, "max", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE, "")        \
  X(MIN, "min", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE, "")        \
  X(POW, "pow", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")         \
  X(AND, "and", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE | TPK_OPF_INT_ONLY, "") \
  X(OR, "or", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE | TPK_OPF_INT_ONLY, "")   \
  X(EQ, "eq", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE | TPK_OPF_COMMUTATIVE, "")    \
  X(NE, "ne", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE | TPK_OPF_COMMUTATIVE, "")    \
  X(LT, "lt", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE, "")             \
  X(LE, "le", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE, "")             \
  X(GT, "gt", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE, "")             \
  X(GE, "ge", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMPARE, "")             \
  /* select(cond: bool, a, b): cond, a and b of one shape */                                    \
  X(SELECT, "select", 3, 3, 1, 0, TPK_OPF_PURE, "")                                             \
  /* shape ops; result shape from the result type */                                            \
  X(BROADCAST, "broadcast", 1, 1, 1, 0, TPK_OPF_PURE, "")                                       \
  X(RESHAPE, "reshape", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
  X(TRANSPOSE, "transpose", 1, 1, 1, 0, TPK_OPF_PURE, "perm:ints")                              \
  X(SLICE, "slice", 1, -1, 1, 0, TPK_OPF_PURE, "index:str")                                     \
  X(CONCAT, "concat", 1, -1, 1, 0, TPK_OPF_PURE, "axis:int")                                    \
  X(IOTA, "iota", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                                         \
  X(REDUCE, "reduce", 1, 1, 1, 0, TPK_OPF_PURE, "kind:str,axes:ints,keepdims:bool")             \
  X(DOT, "dot", 2, 2, 1, 0, TPK_OPF_PURE,                                                        \
    "lhs_contract:ints,rhs_contract:ints,lhs_batch:ints,rhs_batch:ints")                         \
  X(GATHER, "gather", 2, 2, 1, 0, TPK_OPF_PURE, "axis:int")                                     \
  X(SCATTER, "scatter", 3, 3, 1, 0, TPK_OPF_PURE, "axis:int,mode:str")                          \
  /* memory */                                                                                   \
  X(LOAD, "load", 1, -1, 1, 0, 0, "index:str,?other:num")                                       \
  X(STORE, "store", 2, -1, 0, 0, 0, "index:str,mode:str")                                       \
  X(ALLOC, "alloc", 0, 0, 1, 0, 0, "")                                                          \
  X(DMA_START, "dma_start", 2, -1, 1, 0, 0, "src_index:str,dst_index:str")                      \
  X(DMA_WAIT, "dma_wait", 1, 1, 0, 0, 0, "")                                                    \
  /* control */                                                                                  \
  X(GRID, "grid", 2, -1, 0, 1, 0, "")                                                           \
  X(FOR, "for", 2, -1, -1, 1, 0, "")                                                            \
  X(IF, "if", 1, -1, -1, 2, 0, "")                                                              \
  X(YIELD, "yield", 0, -1, 0, 0, TPK_OPF_TERMINATOR, "")                                        \
  X(RETURN, "return", 0, -1, 0, 0, TPK_OPF_TERMINATOR, "")                                      \
  X(CALL, "call", 0, -1, -1, 0, 0, "callee:str")

typedef enum TpkOpcode {
#define TPK_OP_ENUM(e, ...) TPK_OP_##e,
  TPK_OPS(TPK_OP_ENUM)
#undef TPK_OP_ENUM
  TPK_OP_COUNT
} TpkOpcode;

typedef struct TpkOpInfo {
  const char *name;
  int min_in, max_in; /* max -1: unbounded */
  int nout;           /* -1: any */
  int nregion;
  unsigned flags;
  const char *attrs;  /* signature, see TPK_OPS */
} TpkOpInfo;

const TpkOpInfo *tpk_op_info(TpkOpcode op);
/* Opcode from its text name; TPK_OP_COUNT when unknown. */
TpkOpcode tpk_opcode_from_name(const char *name, size_t len);

/*
 * Index patterns (load, store, slice, dma_start): one character per
 * dimension of the indexed ref or value, consuming operands in order:
 *   't'  a tile<B> operand: the block [id*B, id*B+B), result dim B;
 *        elements past the end are masked (loads yield `other`, stores drop)
 *   ':'  the whole dimension, no operand
 *   's'  an i32 scalar operand: that element; the dimension is removed
 *   'r'  an i32 scalar operand `start`: the block [start, start+size) where
 *        size is the matching dim of the result type (static slices lo..hi)
 *   'g'  an i32 rank-1 tensor operand: gather/scatter along that dimension;
 *        result dim is the index vector's length
 * A load's result type has the non-'s' dims in order. A store's value
 * operand (last) has that shape. store mode "add" accumulates (scatter-add:
 * duplicate 'g' indices all add), "set" overwrites.
 */

/* ---- Attributes ------------------------------------------------------------ */

typedef enum TpkAttrKind { TPK_ATTR_INT, TPK_ATTR_FLOAT, TPK_ATTR_BOOL, TPK_ATTR_STR, TPK_ATTR_INTS } TpkAttrKind;

typedef struct TpkAttr {
  const char *key;
  TpkAttrKind kind;
  int64_t i;           /* INT, BOOL */
  double f;            /* FLOAT */
  const char *s;       /* STR */
  int n;               /* INTS */
  const int64_t *ints; /* INTS */
} TpkAttr;

/* ---- Values, ops, blocks, functions, modules -------------------------------- */

struct TpkValue {
  const TpkType *type;
  TpkOp *def;       /* the op whose result this is; NULL for a block argument */
  TpkBlock *block;  /* block arguments: the block; results: NULL */
  int index;        /* result number in def, or argument number in block */
  const char *name; /* print hint ("acc"), may be NULL */
};

struct TpkOp {
  TpkOpcode opcode;
  TpkLoc loc;
  int nin;
  TpkValue **in;
  int nout;
  TpkValue *out; /* array of nout values */
  int nregion;
  TpkBlock **regions;
  int nattr;
  TpkAttr *attrs;
  TpkOp *prev, *next;
  TpkBlock *parent;
};

struct TpkBlock {
  int nargs;
  TpkValue *args; /* array of nargs values */
  TpkOp *first, *last;
  TpkOp *parent; /* the op owning this region; NULL for a function body */
  TpkFunc *func;
};

typedef enum TpkParamRole {
  TPK_PARAM_IN,    /* read-only input (tensor ref or scalar) */
  TPK_PARAM_OUT,   /* output the kernel writes */
  TPK_PARAM_INOUT  /* updated in place */
} TpkParamRole;

typedef struct TpkParam {
  const char *name;
  TpkParamRole role;
  bool zero_init; /* output declared `= 0` */
  TpkValue *value; /* the body block argument */
  TpkLoc loc;
} TpkParam;

typedef struct TpkTune {
  const char *name;
  int64_t value;       /* the value this IR was built with */
  int nchoices;
  const int64_t *choices; /* the declared candidates, first is the default */
} TpkTune;

struct TpkFunc {
  const char *name;
  bool is_kernel;      /* kernel: ref/scalar params, outputs are out params;
                          func: tensor params, results via `return` */
  int nparams;
  TpkParam *params;    /* body->args[i] is params[i].value */
  int nresults;
  const TpkType **results; /* func only */
  int ntunes;
  TpkTune *tunes;
  TpkBlock *body;
  TpkLoc loc;
  TpkModule *module;
};

struct TpkModule {
  TpkArena arena;      /* every node of this module */
  const char *source;  /* file name the module came from, for printing */
  int nfuncs, capfuncs;
  TpkFunc **funcs;
  struct TpkIntern *intern; /* dims, types, names */
};

TpkModule *tpk_module_new(const char *source_name);
void tpk_module_free(TpkModule *m);
/* Intern a string in the module (names, symbols). */
const char *tpk_module_intern(TpkModule *m, const char *s, size_t n);
TpkFunc *tpk_module_find(TpkModule *m, const char *name);

/* ---- Building -------------------------------------------------------------- */

/* A new function with `nparams` parameters of the given types; body block
 * arguments are created to match. Adds it to the module. */
TpkFunc *tpk_func_new(TpkModule *m, const char *name, bool is_kernel, int nparams, const TpkType *const *types,
                      const char *const *names, const TpkParamRole *roles);

/* Where new ops go: appended to `block`. `loc` is stamped on each op. */
typedef struct TpkBuilder {
  TpkModule *m;
  TpkBlock *block;
  TpkLoc loc;
} TpkBuilder;

/* The generic constructor: an op with operands, result types and `nregion`
 * empty regions (each a block with the given argument types, see
 * tpk_block_add_arg), appended at the builder's position. Never fails except
 * for arena exhaustion (returns NULL). Result types are taken as given; the
 * verifier checks them. */
TpkOp *tpk_build(TpkBuilder *b, TpkOpcode opc, int nin, TpkValue *const *in, int nout, const TpkType *const *out);
/* Appends an argument. When the block's argument array grows (past 8, 16,
 * ...) the arguments move: uses in the IR are redirected, but pointers from
 * earlier calls go stale, so add a region's arguments before using them. */
TpkValue *tpk_block_add_arg(TpkModule *m, TpkBlock *block, const TpkType *type, const char *name);

void tpk_op_set_int(TpkModule *m, TpkOp *op, const char *key, int64_t v);
void tpk_op_set_float(TpkModule *m, TpkOp *op, const char *key, double v);
void tpk_op_set_bool(TpkModule *m, TpkOp *op, const char *key, bool v);
void tpk_op_set_str(TpkModule *m, TpkOp *op, const char *key, const char *v);
void tpk_op_set_ints(TpkModule *m, TpkOp *op, const char *key, int n, const int64_t *v);
const TpkAttr *tpk_op_attr(const TpkOp *op, const char *key);
int64_t tpk_op_int(const TpkOp *op, const char *key, int64_t dflt);
const char *tpk_op_str(const TpkOp *op, const char *key, const char *dflt);

/* Convenience builders for common ops; each computes its result type. */
TpkValue *tpk_build_const_int(TpkBuilder *b, const TpkType *type, int64_t v);
TpkValue *tpk_build_const_float(TpkBuilder *b, const TpkType *type, double v);
TpkValue *tpk_build_sym(TpkBuilder *b, const char *name); /* i32 scalar */
/* Elementwise unary/binary; binary operands must already share one type. */
TpkValue *tpk_build_unary(TpkBuilder *b, TpkOpcode opc, TpkValue *x);
TpkValue *tpk_build_binary(TpkBuilder *b, TpkOpcode opc, TpkValue *x, TpkValue *y);
TpkValue *tpk_build_convert(TpkBuilder *b, TpkValue *x, TpkDType to);
TpkValue *tpk_build_broadcast(TpkBuilder *b, TpkValue *x, int rank, const TpkDim *const *dims);
TpkValue *tpk_build_select(TpkBuilder *b, TpkValue *c, TpkValue *x, TpkValue *y);
TpkValue *tpk_build_yield(TpkBuilder *b, int n, TpkValue *const *vals); /* returns NULL: no result */

/* The shape symbols of a kernel or func, in order of first appearance in
 * its parameters' types (then results): the order in which callers pass
 * their values. Writes up to max names and returns how many there are. */
int tpk_func_symbols(const TpkFunc *f, const char **names, int max);

/* The load that read index vector v as a block ('t' or 'r') of a rank-1
 * tensor, or NULL. Its lanes past the tensor's end are padding: a store
 * through v (a scatter) drops them, as stores to out-of-range elements are
 * dropped (dsl/README.md, "Ragged edges"). */
const TpkOp *tpk_index_vector_load(const TpkValue *v);

/* Remove an op (it must have no remaining uses) / replace every use of a
 * value inside func. */
void tpk_op_erase(TpkOp *op);
void tpk_func_replace_uses(TpkFunc *f, TpkValue *from, TpkValue *to);

/* ---- Checking, printing, parsing ------------------------------------------- */

/* Structural and type checks of every op in the module: operand counts,
 * attribute signatures, type rules, index patterns, dominance (a value is
 * used only after its definition, in its block or a nested one), terminators
 * and yields matching loop/if results. Returns TPK_OK or the first problem,
 * with the function, op and location in err. */
TpkStatus tpk_ir_verify(const TpkModule *m, TpkError *err);

/* Text form of the whole module / one function, appended to out. */
void tpk_ir_print(TpkStr *out, const TpkModule *m);
void tpk_ir_print_func(TpkStr *out, const TpkFunc *f);
/* The names tpk_ir_print_func gives f's values, without the '%' ("x",
 * "acc.1", "3"): value -> name (a string in `arena`) put into `names` for
 * every parameter, op result and region argument, so listings about f (a
 * memory plan) can refer to the printed IR. false when memory ran out. */
bool tpk_ir_value_names(const TpkFunc *f, TpkArena *arena, TpkPtrMap *names);

/* Parse the text form into a new module. On failure returns NULL and err
 * says `line:col: what was expected`. Parsed modules are verified. */
TpkModule *tpk_ir_parse(const char *text, size_t len, const char *source_name, TpkError *err);

#endif
