/*
 * openblas.h — OpenBLAS as the benchmarks' one-thread reference
 * (bench_gemm.c, bench_host.c).
 *
 * OpenBLAS reads two settings when it is loaded, before main runs:
 *   - OPENBLAS_NUM_THREADS: the threads it starts. Started threads spin for
 *     a while after loading and after each call, beside the one being
 *     measured, even when openblas_set_num_threads(1) keeps them from work.
 *   - OPENBLAS_CORETYPE: the kernels of a DYNAMIC_ARCH build. One that does
 *     not recognise the CPU (a virtual machine's "Intel Xeon Processor")
 *     falls back to its SSE3 "Prescott" kernels, a fifth of its speed on an
 *     AVX-512 CPU: a baseline tpk would beat without trying.
 * bench_openblas_setup sets both (a core type only when none is given, from
 * the instruction set tpk's own gemm uses) and runs the program again.
 */
#ifndef TPK_BENCH_OPENBLAS_H
#define TPK_BENCH_OPENBLAS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/prims.h"

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char *openblas_get_corename(void);

static void bench_openblas_setup(char **argv) {
  const char *isa = tpk_gemm_isa();
  const char *core = strcmp(isa, "avx512") == 0 ? "SkylakeX" : strcmp(isa, "avx2") == 0 ? "Haswell" : NULL;
  const char *threads = getenv("OPENBLAS_NUM_THREADS");
  if (threads && strcmp(threads, "1") == 0 && (!core || getenv("OPENBLAS_CORETYPE"))) return;
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  if (core && !getenv("OPENBLAS_CORETYPE")) setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  perror("bench: cannot run again with OpenBLAS set up (/proc/self/exe)"); /* the one-thread checks still hold */
}

/* One thread for OpenBLAS, or exit: the rows say one thread. */
static void bench_openblas_one_thread(const char *prog) {
  openblas_set_num_threads(1);
  if (openblas_get_num_threads() != 1) {
    fprintf(stderr, "%s: OpenBLAS runs on %d threads, not 1\n", prog, openblas_get_num_threads());
    exit(1);
  }
  fprintf(stderr, "%s: OpenBLAS with its %s kernels, one thread\n", prog, openblas_get_corename());
}

#endif
