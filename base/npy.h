/*
 * npy.h — reading and writing NumPy .npy files (format versions 1.0-3.0),
 * so inputs and outputs of `tpk run` are readable by any tool.
 *
 * NumPy has no bf16 or f8 dtypes: such arrays are written as float32 (an
 * exact widening) and a float32 file read for a bf16/f16/f8 parameter is
 * rounded to nearest even by the caller. bool is '|b1'. Only C-order
 * (fortran_order False), little-endian or byte-order-free files are read;
 * anything else is refused with a clear message.
 */
#ifndef TPK_NPY_H
#define TPK_NPY_H

#include "base/base.h"

enum { TPK_NPY_MAX_RANK = 8 };

typedef struct TpkNpy {
  TpkDType dtype; /* as held in data: f32, f16, i32, i16, i8, u8, bool; see tpk_npy_read */
  const char *file_dtype; /* NumPy's name of the type in the file: "float64", "int32", ... */
  int rank;
  int64_t shape[TPK_NPY_MAX_RANK];
  void *data;     /* malloc'ed, row-major; free with tpk_npy_free */
  size_t bytes;
} TpkNpy;

/* Read a .npy file. Accepted element types: <f4 <f2 <i4 <i2 |i1 |u1 |b1, plus
 * <f8 (float64) and <i8 (int64), converted on reading to f32 and i32 (an
 * int64 value outside i32's range is an error naming it). A truncated or
 * malformed file is an error, never a crash. */
TpkStatus tpk_npy_read(const char *path, TpkNpy *out, TpkError *err);
/* Write data (dtype and shape as given; bf16/f8 are widened to float32),
 * replacing the file safely: tpk_file_write (base/files.h) says what is
 * refused. */
TpkStatus tpk_npy_write(const char *path, TpkDType dtype, int rank, const int64_t *shape, const void *data,
                        TpkError *err);
void tpk_npy_free(TpkNpy *n);

#endif
