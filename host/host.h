/*
 * host.h — the host backend: tile-level IR to readable C (emit_c.c), which
 * the JIT tiers (jit.h) compile and the primitive library (prims.h, gemm.h)
 * serves; the standard library's ahead-of-time code is looked up in std.h.
 *
 *   lowered kernel + plan ─► emit_c ─► C ─► libtcc / cc -O3 (jit.c) ─► TpkKernelFn
 */
#ifndef TPK_HOST_H
#define TPK_HOST_H

#include "lower/lower.h"

/* The host target. Its VMEM budget is vmem_bytes, or when that is 0 the
 * default, 128 MiB, the VMEM of a TPU v5e, so that a kernel that would not
 * fit on the chip fails the same way on the host. (The runtime reads
 * $TPK_HOST_VMEM and passes it here; the compiler reads no environment.) */
TpkTarget tpk_target_host(int64_t vmem_bytes);

/* Emit readable C for kernel f as a function named `entry` with the
 * TpkKernelFn signature (host/jit.h), and `<entry>_workspace`, which
 * returns the workspace bytes a launch needs (TpkWorkspaceFn). Shapes may be
 * constant (one launch's) or symbolic: then the code reads the shape symbols
 * from syms[], in the order of tpk_func_symbols(f), and serves every shape.
 * Each statement is preceded by its .tpk source line as a comment when
 * `source` is given. */
enum { TPK_EMIT_NO_PRELUDE = 1 }; /* leave out the helpers (for a second kernel in one C file) */
TpkStatus tpk_emit_c(const TpkFunc *f, const TpkPlan *plan, const char *entry, const char *source, unsigned flags,
                     TpkStr *out, TpkError *err);

/* Threads (emit_c.c): the top-level grid a launch may share among parts
 * (TpkPrims.part/parts), or NULL when part 0 must run the whole kernel. A
 * grid is shared when it is the kernel's only one; no instance adds into a
 * place another instance may add into (a `+=` must be indexed by every grid
 * variable as it is, the same way in every add into that parameter; else
 * duplicates would accumulate in another order), uses an atomic, or
 * writes a parameter at a position computed from loaded data (instances could
 * collide, which the contract forbids but a sequential run makes
 * deterministic); the ops around it write no parameter and the ops before
 * it read no output. */
const TpkOp *tpk_split_grid(const TpkFunc *f);
/* The number of instances of a grid whose bounds are constants, else -1. */
int64_t tpk_grid_instances(const TpkOp *grid);

/* Everything for the host in one call: tpk_lower, then emit (flags as for
 * tpk_emit_c). *workspace_bytes is the plan's, -1 for symbolic shapes; a
 * launch needs what the code's <entry>_workspace says, which may be more
 * (right operands of dots packed once: emit_c.c). */
TpkStatus tpk_lower_to_c(TpkFunc *f, const TpkTarget *t, const char *entry, const char *source, unsigned flags,
                         TpkStr *out, int64_t *workspace_bytes, TpkError *err);

#endif
