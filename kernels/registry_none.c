/* An empty standard library, for linking kernels/aot.c (which builds the real
 * one, build/kernels/registry.c). */
#include "host/std.h"

const TpkStdFile tpk_std_files[] = {{0, 0, 0}};
const int tpk_std_nfiles = 0;
const TpkStdEntry tpk_std_entries[] = {{0, 0, 0, 0, 0, 0, 0}};
const int tpk_std_nentries = 0;
const char tpk_std_tuned_tsv[] = "";
