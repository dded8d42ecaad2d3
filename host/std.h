/*
 * std.h — the standard kernel library compiled ahead of time.
 *
 * The build compiles every kernel of the .tpk files in kernels/, for its
 * declared tunable defaults and for the tuned values kernels/tuned.tsv ships,
 * into C that serves every shape (the shape symbols are read at run time),
 * then cc -O3 into the library (kernels/aot.c writes the C and this registry). A launch
 * uses that code instead of the JIT when the program's source is byte for
 * byte a standard file (or a graph calls a kernel of a standard kernel's name
 * and recorded hash) and the kernel's tunables match an entry, so standard
 * kernels never wait on a compiler.
 */
#ifndef TPK_STD_H
#define TPK_STD_H

#include "host/jit.h"

typedef struct TpkStdFile {
  const char *name;   /* "softmax.tpk" */
  const char *source; /* its text */
  size_t len;
} TpkStdFile;

typedef struct TpkStdEntry {
  int file;           /* index into tpk_std_files */
  const char *kernel; /* "softmax" */
  const char *tunes;  /* canonical tunable values, "BM=8,BN=128" in declaration order ("" if none) */
  TpkKernelFn fn;
  TpkWorkspaceFn workspace;
  /* the kernel's structural hash (tpk_func_hash of its checked IR), as the
   * build computed it: a graph's callee is this kernel when its name and
   * hash are these, found without checking the file at run time */
  uint64_t hash_lo, hash_hi;
} TpkStdEntry;

extern const TpkStdFile tpk_std_files[];
extern const int tpk_std_nfiles;
extern const TpkStdEntry tpk_std_entries[];
extern const int tpk_std_nentries;
/* kernels/tuned.tsv: the tuned settings the library ships (runtime/tune.h). */
extern const char tpk_std_tuned_tsv[];

/* The file whose text is exactly text[0..len), or -1. */
int tpk_std_file_of(const char *text, size_t len);
/* The file of the library's kernel of this name and structural hash, or -1. */
int tpk_std_file_of_kernel(const char *kernel, uint64_t hash_lo, uint64_t hash_hi);
/* The compiled entry for (file, kernel, tunes), or NULL. */
const TpkStdEntry *tpk_std_find(int file, const char *kernel, const char *tunes);

#endif
