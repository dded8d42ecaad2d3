/*
 * gemm.h — the gemm primitives of one instruction set, for tests and
 * benchmarks that compare instruction sets (the library itself and generated
 * code use host/prims.h, whose entry points pick the best one).
 *
 * Every implementation follows the numerics of prims.h exactly (one
 * accumulator per output element, k ascending, fused multiply-add), so all of
 * them give bit-identical results for the same inputs, NaN payloads aside.
 */
#ifndef TPK_GEMM_H
#define TPK_GEMM_H

#include "host/prims.h"

typedef struct TpkGemmImpl {
  const char *isa; /* "avx512", "avx2" or "generic" */
  TpkGemmF32 f32;
  TpkGemmU16 bf16;
  TpkGemmU16 f16;
  TpkGemmI8 i8;
  TpkGemmI32 i32;
  TpkGemmPackB pack_b;  /* B packed once for gemm_packed (prims.h) */
  TpkGemmPacked packed; /* gemm with B packed by this implementation's pack_b */
} TpkGemmImpl;

/* The implementation for `isa`, or NULL when this CPU (or this build's
 * target architecture) lacks it. "generic" is always there. */
const TpkGemmImpl *tpk_gemm_impl(const char *isa);

#endif
