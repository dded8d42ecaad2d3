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
 * `-> (T, ...)`, kernels never; a kernel's backward kernel `backward @name`;
 * tunables `tune{BM=8 in [8, 16], BK=256}`.
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
/* A dim from its text form ("128", "B*S", "(M+1)/2", "cdiv(M,8)"; ir/parse.c),
 * interned in m; NULL with err (TPK_ERR_PARSE, "1:3: expected ...") when the
 * text is not one dimension. */
const TpkDim *tpk_dim_parse(TpkModule *m, const char *text, TpkError *err);
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
 * The attribute signature lists key:kind pairs, kinds
 * int|float|num|bool|str|ints (num: int or float), reduce_kind|store_mode
 * (enums, TpkEnumSet) and index (an index pattern); a leading `?` marks an
 * optional attribute. Semantics of each op are in ir/README.md.
 */
#define TPK_OPS(X)                                                                               \
  /* values */                                                                                   \
  X(CONST, "const", 0, 0, 1, 0, TPK_OPF_PURE, "value:num")                                      \
  X(SYM, "sym", 0, 0, 1, 0, TPK_OPF_PURE, "name:str")                                           \
  X(PROGRAM_ID, "program_id", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                             \
  X(NUM_PROGRAMS, "num_programs", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                         \
  X(TILE_ID, "tile.id", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
  X(TILE_START, "tile.start", 1, 1, 1, 0, TPK_OPF_PURE, "")                                     \
  /* the tile index with id %0 (i32 >= 0) of the result's block: a swizzled grid's tiles */     \
  X(TILE_OF, "tile.of", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
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
  X(ROUND, "round", 1, 1, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_FLOAT_ONLY, "")     \
  /* convert: same shape, dtype from the result type; floats round to nearest even */           \
  X(CONVERT, "convert", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
  /* bitcast: same shape, the bits reread as the result's dtype of the same width */            \
  X(BITCAST, "bitcast", 1, 1, 1, 0, TPK_OPF_PURE, "")                                           \
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
  X(XOR, "xor", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE | TPK_OPF_INT_ONLY, "") \
  /* shifts by b bits; b outside [0, bits) gives 0 (shr of a negative signed value: -1) */      \
  X(SHL, "shl", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_INT_ONLY, "")          \
  X(SHR, "shr", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_INT_ONLY, "")          \
  /* the high half of the double-width product (Philox's mulhilo with mul) */                   \
  X(MULHI, "mulhi", 2, 2, 1, 0, TPK_OPF_PURE | TPK_OPF_ELEMENTWISE | TPK_OPF_COMMUTATIVE | TPK_OPF_INT_ONLY, "") \
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
  X(SLICE, "slice", 1, -1, 1, 0, TPK_OPF_PURE, "index:index")                                   \
  X(CONCAT, "concat", 1, -1, 1, 0, TPK_OPF_PURE, "axis:int")                                    \
  X(IOTA, "iota", 0, 0, 1, 0, TPK_OPF_PURE, "axis:int")                                         \
  X(REDUCE, "reduce", 1, 1, 1, 0, TPK_OPF_PURE, "kind:reduce_kind,axes:ints,keepdims:bool")     \
  /* inclusive scan along one axis: element i combines elements 0..i, in order */               \
  X(SCAN, "scan", 1, 1, 1, 0, TPK_OPF_PURE, "kind:reduce_kind,axis:int")                         \
  /* dot lhs, rhs [, acc]: with acc (lowering's decision), the products continue acc's sums */  \
  X(DOT, "dot", 2, 3, 1, 0, TPK_OPF_PURE,                                                        \
    "lhs_contract:ints,rhs_contract:ints,lhs_batch:ints,rhs_batch:ints")                         \
  X(GATHER, "gather", 2, 2, 1, 0, TPK_OPF_PURE, "axis:int")                                     \
  X(SCATTER, "scatter", 3, 3, 1, 0, TPK_OPF_PURE, "axis:int,mode:store_mode")                   \
  /* memory */                                                                                   \
  X(LOAD, "load", 1, -1, 1, 0, 0, "index:index,?other:num")                                     \
  X(STORE, "store", 2, -1, 0, 0, 0, "index:index,mode:store_mode")                              \
  /* ref, indices, value: each selected element becomes kind(old, value) at once; the result is \
   * the old block (an atomic fetch-and-add/max/min: grid instances combining, a counter) */     \
  X(ATOMIC, "atomic", 2, -1, 1, 0, 0, "index:index,kind:reduce_kind")                            \
  X(ALLOC, "alloc", 0, 0, 1, 0, 0, "")                                                          \
  X(DMA_START, "dma_start", 2, -1, 1, 0, 0, "src_index:index,dst_index:index")                  \
  /* dma_signal copy, sem, slot: the copy signals semaphore sem[slot] (a ref<i32[N], smem>) */    \
  X(DMA_SIGNAL, "dma_signal", 3, 3, 0, 0, 0, "")                                                \
  /* dma_wait_sem sem, slot[, bytes]: wait for the oldest copy in flight on sem[slot], or */     \
  /* for `bytes` bytes of its copies to land (Pallas: a DMA semaphore counts bytes) */           \
  X(DMA_WAIT_SEM, "dma_wait_sem", 2, 3, 0, 0, 0, "")                                            \
  X(DMA_WAIT, "dma_wait", 1, 1, 0, 0, 0, "")                                                    \
  /* control */                                                                                  \
  X(GRID, "grid", 2, -1, 0, 1, 0, "")                                                           \
  X(FOR, "for", 2, -1, -1, 1, 0, "")                                                            \
  /* while cond, inits...: the region runs while its first carried value (a bool) is true */  \
  X(WHILE, "while", 1, -1, -1, 1, 0, "")                                                        \
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

/* ---- Closed sets: reduction kinds, store modes, index patterns ------------ */

/* Attribute values from a closed set are enums in memory and names in the
 * text form (`kind="sum"`, `mode="add"`, `index="t:"`), converted in ir/
 * only: the parser rejects an unknown name, the verifier an enum out of
 * range, and no other stage compares names. */

typedef enum TpkReduceKind { TPK_REDUCE_SUM, TPK_REDUCE_MAX, TPK_REDUCE_MIN, TPK_REDUCE_MEAN, TPK_REDUCE_PROD } TpkReduceKind;

/* store and scatter: `set` overwrites, `add` accumulates (scatter-add:
 * duplicate 'g' indices all add). */
typedef enum TpkStoreMode { TPK_STORE_SET, TPK_STORE_ADD } TpkStoreMode;

/* The enums an attribute (TPK_ATTR_ENUM) can hold; the op table names them
 * in signatures as reduce_kind and store_mode. */
typedef enum TpkEnumSet { TPK_ENUM_REDUCE_KIND, TPK_ENUM_STORE_MODE, TPK_ENUM_SET_COUNT } TpkEnumSet;

/* The set's name in op signatures ("reduce_kind"). */
const char *tpk_enum_set_name(TpkEnumSet set);
/* A member's text name ("sum", "add"); NULL when out of range. */
const char *tpk_enum_name(TpkEnumSet set, int value);
/* The member with that name; false when there is none. */
bool tpk_enum_from_name(TpkEnumSet set, const char *name, int *value);

/*
 * Index patterns (load, store, slice, dma_start): one entry per dimension
 * of the indexed ref or value, consuming index operands in order. Text form:
 * one character per entry.
 *   't' TILE    a tile<B> operand: the block [id*B, id*B+B), result dim B;
 *               elements past the end are masked (loads yield `other`,
 *               stores drop)
 *   ':' ALL     the whole dimension, no operand
 *   's' SCALAR  an i32 scalar operand: that element; the dimension is removed
 *   'r' RANGE   an i32 scalar operand `start`: the block [start, start+size)
 *               where size is the matching dim of the result type (static
 *               slices lo..hi)
 *   'g' GATHER  an i32 rank-1 tensor operand: gather/scatter along that
 *               dimension; result dim is the index vector's length
 * A load's result type has the non-SCALAR dims in order. A store's value
 * operand (last) has that shape.
 */
typedef enum TpkIndexKind { TPK_INDEX_TILE, TPK_INDEX_ALL, TPK_INDEX_SCALAR, TPK_INDEX_RANGE, TPK_INDEX_GATHER } TpkIndexKind;

typedef struct TpkIndexPattern {
  int rank;                       /* entries: the indexed ref's or value's rank */
  TpkIndexKind dim[TPK_MAX_RANK]; /* one per dimension */
} TpkIndexPattern;

/* The index operands a pattern consumes (its entries other than ALL). */
int tpk_index_operands(const TpkIndexPattern *p);
/* A dma_start's length (its optional last operand: how many entries of the
 * block's first axis are copied), or NULL when it copies the whole block. */
const TpkValue *tpk_dma_length(const TpkOp *op);
/* The text form ("t:"), appended to s. */
void tpk_index_print(TpkStr *s, const TpkIndexPattern *p);

/* ---- Attributes ------------------------------------------------------------ */

typedef enum TpkAttrKind {
  TPK_ATTR_INT,
  TPK_ATTR_FLOAT,
  TPK_ATTR_BOOL,
  TPK_ATTR_STR,
  TPK_ATTR_INTS,
  TPK_ATTR_ENUM, /* a member of a closed set (TpkEnumSet) */
  TPK_ATTR_INDEX /* an index pattern */
} TpkAttrKind;

typedef struct TpkAttr {
  const char *key;
  TpkAttrKind kind;
  int64_t i;           /* INT, BOOL; ENUM: the member (a TpkReduceKind, ...) */
  double f;            /* FLOAT */
  const char *s;       /* STR */
  int n;               /* INTS */
  const int64_t *ints; /* INTS */
  TpkEnumSet set;      /* ENUM */
  const TpkIndexPattern *index; /* INDEX */
} TpkAttr;

/* ---- Values, ops, blocks, functions, modules -------------------------------- */

/* One use of a value: operand `index` of op `user`. An op owns one per
 * operand (op->uses[i] is the use of op->in[i]), linked into the used
 * value's list, so a value's uses are known without walking its function:
 *   for (const TpkUse *u = v->uses; u; u = u->next) ... u->user, u->index
 * The lists are kept by every API that changes operands (tpk_build,
 * tpk_op_set_operand(s), tpk_func_replace_uses, tpk_op_erase); the verifier
 * checks them. Their order is unspecified. */
typedef struct TpkUse {
  TpkOp *user;
  int index;
  struct TpkUse *prev, *next; /* the value's other uses */
} TpkUse;

struct TpkValue {
  const TpkType *type;
  TpkOp *def;       /* the op whose result this is; NULL for a block argument */
  TpkBlock *block;  /* block arguments: the block; results: NULL */
  int index;        /* result number in def, or argument number in block */
  const char *name; /* print hint ("acc"), may be NULL */
  TpkUse *uses;     /* first use, NULL when unused */
  int nuses;        /* the length of that list */
};

struct TpkOp {
  TpkOpcode opcode;
  TpkLoc loc;
  int nin;
  TpkValue *const *in; /* operands: read freely, change with tpk_op_set_operand(s) */
  TpkUse *uses;        /* uses[i] links in[i]'s use by this op */
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
  TpkValue **args; /* nargs arguments, each allocated once: a value keeps its
                      address when more arguments are added */
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
  /* The declared distribution of an integer input's values, which timing
   * without data samples (`lengths: i32[B] in 1..1025`, `in [16, 256]`):
   * nsample 0: none; sample_range: uniform in [sample[0], sample[1]);
   * else one of sample[0 .. nsample), equally likely. Text: `in
   * range(1, 1025)` or `in [16, 256]` after the type. */
  int nsample;
  bool sample_range;
  const int64_t *sample;
} TpkParam;

/* A tunable. Until it is bound (lower/bind), its name is a symbol in the
 * IR's dims and `sym` ops, like a shape symbol; binding replaces it with
 * `value` everywhere. Text: `BM in [8, 16]` unbound, `BM=16 in [8, 16]`
 * bound. */
typedef struct TpkTune {
  const char *name;
  bool bound;          /* the IR is built for `value` */
  int64_t value;       /* when bound: the value; else the declared default */
  int nchoices;
  const int64_t *choices; /* the declared candidates, first is the default */
} TpkTune;

/* A name bound to an integer: a shape symbol's size or a tunable's value. */
typedef struct TpkBinding {
  const char *name;
  int64_t value;
} TpkBinding;

/* A condition on a kernel's sizes (`require K <= N` in .tpk): two sizes
 * compared, checked with the sizes a launch binds (tpk_func_check_requires),
 * by the runtime and the interpreter alike. Sizes are built from shape
 * symbols and constants only, so a requirement holds for every tunable. */
typedef struct TpkRequire {
  TpkOpcode cmp;           /* TPK_OP_EQ, NE, LT, LE, GT or GE */
  const TpkDim *lhs, *rhs;
  TpkLoc loc;
} TpkRequire;

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
  int nrequires;
  TpkRequire *requires;
  /* kernel: the name of the kernel computing its input gradients from its
   * inputs, outputs and output gradients (`backward B` in .tpk, whose
   * checker matched the signatures), interned; NULL when none. A name, not
   * a pointer: a specialised clone lives in a module of its own. */
  const char *backward;
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
/* f leaves m's list of functions (the others keep their order); its nodes
 * stay in the arena until the module goes. Nothing may call it then: lower/
 * fuse.c drops the kernels a driver no longer calls. */
void tpk_module_remove(TpkModule *m, TpkFunc *f);

/* ---- Building -------------------------------------------------------------- */

/* A new function with `nparams` parameters of the given types; body block
 * arguments are created to match. Adds it to the module. */
TpkFunc *tpk_func_new(TpkModule *m, const char *name, bool is_kernel, int nparams, const TpkType *const *types,
                      const char *const *names, const TpkParamRole *roles);
/* Appends a parameter (and its body argument) to f, amortised O(1): a graph
 * builder adds inputs one at a time. Returns the parameter's value, which
 * keeps its address; f->params may move (do not hold TpkParam pointers). */
TpkValue *tpk_func_add_param(TpkModule *m, TpkFunc *f, const TpkType *type, const char *name, TpkParamRole role);

/* Where new ops go: appended to `block`, or inserted before `before` (an op
 * of `block`) when it is set. `loc` is stamped on each op. */
typedef struct TpkBuilder {
  TpkModule *m;
  TpkBlock *block;
  TpkLoc loc;
  TpkOp *before;
} TpkBuilder;

/* The generic constructor: an op with operands, result types and the op
 * table's number of empty regions (add their arguments with
 * tpk_block_add_arg), appended at the end of the builder's block (or put
 * before b->before) in O(1) (plus its operands and results); each operand
 * gets a use. Never fails
 * except for arena exhaustion (returns NULL). Result types are taken as
 * given; the verifier checks them. */
TpkOp *tpk_build(TpkBuilder *b, TpkOpcode opc, int nin, TpkValue *const *in, int nout, const TpkType *const *out);
/* Appends an argument (amortised O(1)); the returned value stays valid for
 * the module's lifetime, however many arguments follow. */
TpkValue *tpk_block_add_arg(TpkModule *m, TpkBlock *block, const TpkType *type, const char *name);

void tpk_op_set_int(TpkModule *m, TpkOp *op, const char *key, int64_t v);
void tpk_op_set_float(TpkModule *m, TpkOp *op, const char *key, double v);
void tpk_op_set_bool(TpkModule *m, TpkOp *op, const char *key, bool v);
void tpk_op_set_str(TpkModule *m, TpkOp *op, const char *key, const char *v);
void tpk_op_set_ints(TpkModule *m, TpkOp *op, const char *key, int n, const int64_t *v);
const TpkAttr *tpk_op_attr(const TpkOp *op, const char *key);
int64_t tpk_op_int(const TpkOp *op, const char *key, int64_t dflt);
/* Is v a scalar integer constant (a `const` of rank 0)? Its value in *out. */
bool tpk_value_const_int(const TpkValue *v, int64_t *out);
const char *tpk_op_str(const TpkOp *op, const char *key, const char *dflt);

/* Give `to` every attribute of `from` (to is usually a fresh op: tiling,
 * fusion and cloning copy ops), through the setters, so values live in m
 * and later setters may add attributes. false when m's arena is exhausted. */
bool tpk_op_copy_attrs(TpkModule *m, TpkOp *to, const TpkOp *from);

/* Closed sets, typed. A reduce's kind ("kind", sum when missing); a store's
 * or scatter's mode ("mode", set when missing); an index pattern: "index" of
 * a load, store or slice, "src_index" / "dst_index" of a dma_start (rank 0
 * when missing). */
TpkReduceKind tpk_op_reduce_kind(const TpkOp *op);
TpkStoreMode tpk_op_store_mode(const TpkOp *op);
const TpkIndexPattern *tpk_op_index(const TpkOp *op, const char *key);
void tpk_op_set_reduce_kind(TpkModule *m, TpkOp *op, TpkReduceKind kind);
void tpk_op_set_store_mode(TpkModule *m, TpkOp *op, TpkStoreMode mode);
void tpk_op_set_index(TpkModule *m, TpkOp *op, const char *key, const TpkIndexPattern *p);
/* Attribute key from a string of the text form, read as op's signature
 * says: an enum member's name, an index pattern, else a plain string.
 * TPK_ERR_PARSE with a message for a name that is not in its set. */
TpkStatus tpk_op_set_text(TpkModule *m, TpkOp *op, const char *key, const char *text, TpkError *err);

/* Lowering's decisions, as the IR records them (lower/decide.c writes them,
 * ir/README.md "Lowering decisions" gives their meaning):
 *   - a dot's third operand, its accumulator: `dot %a, %b, %acc`;
 *   - the unit attribute `fused=true`: the op's result is not stored but
 *     computed inside the loop of its one user, in the same block. */
const TpkValue *tpk_dot_accumulator(const TpkOp *dot); /* NULL without one */
bool tpk_op_is_fused(const TpkOp *op); /* false for NULL (a block argument's def) */

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
 * their values. Tunables are not shape symbols, even where a shape uses
 * one. Writes up to max names and returns how many there are. */
int tpk_func_symbols(const TpkFunc *f, const char **names, int max);

/* TPK_OK when every requirement of f holds with its symbols bound by
 * lookup; else TPK_ERR_INVALID and err names the sizes and the requirement:
 * "kernel 'topk': K = 10 is larger than N = 8 (it requires K <= N, line 26)".
 * A requirement with an unbound symbol is an error too. */
TpkStatus tpk_func_check_requires(const TpkFunc *f, TpkSymLookup lookup, void *ctx, TpkError *err);
/* The same for one requirement r of f. */
TpkStatus tpk_require_check(const TpkFunc *f, const TpkRequire *r, TpkSymLookup lookup, void *ctx, TpkError *err);
/* "<=" for TPK_OP_LE and the other comparisons a requirement may use; NULL
 * for any other opcode. */
const char *tpk_require_cmp_text(TpkOpcode cmp);
/* Whether `a cmp b` holds; when it does not, why, appended to s:
 * "K = 10 is larger than N = 8" (a side named NULL is shown as its value). */
bool tpk_require_holds(TpkOpcode cmp, const char *lhs, int64_t a, const char *rhs, int64_t b, TpkStr *s);

/* The load that read index vector v as a block ('t' or 'r') of a rank-1
 * tensor, or NULL. Its lanes past the tensor's end are padding: a store
 * through v (a scatter) drops them, as stores to out-of-range elements are
 * dropped (dsl/README.md, "Ragged edges"). */
const TpkOp *tpk_index_vector_load(const TpkValue *v);

/* ---- Uses and rewriting ---------------------------------------------------- */

/* Operand i of op becomes v: the use moves from the old value's list to v's. */
void tpk_op_set_operand(TpkOp *op, int i, TpkValue *v);
/* All operands of op become in[0..n) (n may differ from op->nin); false when
 * the arena is exhausted, op unchanged. */
bool tpk_op_set_operands(TpkModule *m, TpkOp *op, int n, TpkValue *const *in);
/* op becomes `const {value=v}` in place (its operands and attributes
 * dropped): its result value, and so every use, stays. For folding. */
void tpk_op_make_const_int(TpkModule *m, TpkOp *op, int64_t v);
void tpk_op_make_const_float(TpkModule *m, TpkOp *op, double v);
/* Number of uses of v (an op using v twice counts twice). */
int tpk_value_use_count(const TpkValue *v);
/* The op using v when v has exactly one use, else NULL. */
TpkOp *tpk_value_single_user(const TpkValue *v);
/* Every use of `from` becomes a use of `to`, in O(uses of from). Both are
 * values of f. */
void tpk_func_replace_uses(TpkFunc *f, TpkValue *from, TpkValue *to);
/* Unlink op from its block and drop the uses made by it and by the ops of
 * its regions. Its results must have no uses left (the verifier reports a use
 * of an erased op's result). An erased op is dead: do not link it again. */
void tpk_op_erase(TpkOp *op);

/* Whether dims a and b are equal for every value the tunables they use may
 * take. Tunables are symbols until bound, but each takes one of a few
 * declared values, so [BM] and [BM/8*8] agree when every choice of BM is a
 * multiple of 8. Equal dims agree at once; otherwise every combination of
 * the declared values is tried (up to 4096 of them; more: not equal). When
 * they disagree, `witness` (may be NULL) names one combination ("BM=4"). */
bool tpk_dims_equal_when_tuned(TpkModule *m, const TpkTune *tunes, int ntunes, const TpkDim *a, const TpkDim *b,
                               char *witness, size_t witness_size);

/* May tunable t take value v? One of its declared choices; with none
 * recorded (`BK=256` alone), only the value it is bound to. */
bool tpk_tune_allows(const TpkTune *t, int64_t v);
/* t's declared choices, "8, 16, 32", appended to s. */
void tpk_tune_print_choices(TpkStr *s, const TpkTune *t);

/* The tunable named `name` of f, or NULL. */
const TpkTune *tpk_func_tune(const TpkFunc *f, const char *name);

/* A copy of f in module dst (ir/clone.c) with every dimension's symbols
 * that `subst` knows replaced by their values (subst may be NULL: a plain
 * copy); tunables it knows are marked bound. Ops are copied as they are:
 * lower/bind.c turns `sym` ops into constants. NULL with err (and its
 * line/col: the op or parameter) when a size overflows, divides by zero or
 * is negative once substituted; dst may then hold a partial function. */
TpkFunc *tpk_func_clone(TpkModule *dst, const TpkFunc *f, TpkSymLookup subst, void *ctx, TpkError *err);

/* The structural hash of f (ir/hash.c): the key of f's compiled code and
 * tuned configurations. Equal for functions that differ only in value and
 * parameter names, locations, the module they live in and their own name;
 * different for any difference in ops, operand wiring, attributes, types
 * and dims (by structure: symbol names, constants, operators), regions,
 * parameters' roles and types, results, tunables, requirements or backward
 * kernel. The same in every process and on every machine (no pointers,
 * fixed seeds). 128 bits, so a cache of compiled code can trust a match;
 * `lo` alone (never 0) is the 64-bit key of the tuning tables. {0, 0} when
 * memory ran out. A caller for whom the name matters (the tuning table,
 * messages) keys on it as well. */
typedef struct TpkFuncHash {
  uint64_t lo, hi;
} TpkFuncHash;
TpkFuncHash tpk_func_hash(const TpkFunc *f);
bool tpk_func_hash_equal(TpkFuncHash a, TpkFuncHash b);

/* ---- Checking, printing, parsing ------------------------------------------- */

/* Structural and type checks of every op in the module: operand counts,
 * attribute signatures (closed-set values in range), use lists against the
 * operands, type rules, index patterns, dominance (a value is used only
 * after its definition, in its block or a nested one), terminators and
 * yields matching loop/if results. Returns TPK_OK or the first problem,
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
