/*
 * internal.h — what the files of runtime/ share and nobody else sees.
 */
#ifndef TPK_RUNTIME_INTERNAL_H
#define TPK_RUNTIME_INTERNAL_H

#include "tpk.h"

/* Set this thread's tpk_last_error() message and return st. */
TpkStatus tpk_runtime_set_error(TpkStatus st, const char *message);

#endif
