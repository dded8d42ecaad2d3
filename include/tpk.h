/*
 * tpk.h — the public C API of tpk, a kernel toolkit for TPU-style accelerators.
 *
 * This is the only header users include. It grows with the runtime (devices,
 * buffers, modules, queues); today it holds the vocabulary every layer shares:
 * element types and status codes.
 */
#ifndef TPK_H
#define TPK_H

#include <stddef.h>
#include <stdint.h>

#define TPK_VERSION "0.1.0"

/* Element types of the .tpk language (contract §1). The order is part of the
 * ABI: append only. */
typedef enum TpkDType {
  TPK_F32,
  TPK_F16,
  TPK_BF16,
  TPK_F8E4M3,
  TPK_F8E5M2,
  TPK_I32,
  TPK_I16,
  TPK_I8,
  TPK_U8,
  TPK_BOOL,
  TPK_DTYPE_COUNT
} TpkDType;

/* Every fallible call returns one of these; details go in the error message. */
typedef enum TpkStatus {
  TPK_OK = 0,
  TPK_ERR_INVALID,     /* bad argument: wrong shape, dtype, name, option */
  TPK_ERR_PARSE,       /* source text did not parse or check */
  TPK_ERR_NOMEM,       /* host or simulated memory exhausted */
  TPK_ERR_IO,          /* file could not be read or written */
  TPK_ERR_UNSUPPORTED, /* valid request this build cannot do */
  TPK_ERR_INTERNAL     /* a bug in tpk: please report it */
} TpkStatus;

/* Name of a dtype as written in .tpk ("f32", "bf16", ...). */
const char *tpk_dtype_name(TpkDType t);
/* Size of one element in bytes (bool is one byte). */
size_t tpk_dtype_size(TpkDType t);
/* Parse a dtype name; returns TPK_DTYPE_COUNT when the name is not a dtype. */
TpkDType tpk_dtype_from_name(const char *name, size_t len);
/* Short, stable name of a status code ("invalid argument", ...). */
const char *tpk_status_name(TpkStatus s);

#endif
