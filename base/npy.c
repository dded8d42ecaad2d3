/*
 * npy.c — NumPy .npy files (format 1.0, 2.0, 3.0), see npy.h.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.x, u32 LE
 * for 2.x/3.x), then the header: a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and ending in '\n', then the raw row-major data.
 *
 * Reading is strict: the three keys exactly once each and nothing else, a
 * known descr, C order, a shape of at most TPK_NPY_MAX_RANK non-negative
 * dims whose byte size does not overflow, and exactly that many data bytes
 * after the header. Every failure is an error naming the file and what was
 * wrong; no input can make it read out of bounds or allocate more than the
 * header's declared (and present) data.
 */
#include "base/npy.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/refnum.h"

enum { HEADER_LIMIT = 1 << 20 }; /* NumPy itself refuses headers past ~10 KB */

static bool host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- Header parsing ----------------------------------------------------------- */

typedef struct Parser {
  const char *p, *end;
} Parser;

static void skip_ws(Parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool accept(Parser *ps, char c) {
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == c) {
    ps->p++;
    return true;
  }
  return false;
}

/* A quoted string ('...' or "..."), no escapes (none occur in headers). */
static bool parse_string(Parser *ps, char *out, size_t cap) {
  skip_ws(ps);
  if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) return false;
  char q = *ps->p++;
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != q) {
    if (*ps->p == '\\' || n + 1 >= cap) return false;
    out[n++] = *ps->p++;
  }
  if (ps->p >= ps->end) return false;
  ps->p++;
  out[n] = 0;
  return true;
}

static bool parse_word(Parser *ps, const char *w) {
  skip_ws(ps);
  size_t n = strlen(w);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0) return false;
  ps->p += n;
  return true;
}

/* (d0, d1, ...) with an optional trailing comma; () for a scalar. A single
 * entry needs no comma here (NumPy always writes one; we are lenient). */
static bool parse_shape(Parser *ps, int *rank, int64_t *shape, const char **why) {
  *rank = 0;
  if (!accept(ps, '(')) return *why = "shape is not a tuple", false;
  if (accept(ps, ')')) return true;
  for (;;) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return *why = "shape entries must be non-negative integers", false;
    int64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      if (v > (INT64_MAX - 9) / 10) return *why = "a shape entry is too large", false;
      v = v * 10 + (*ps->p++ - '0');
    }
    if (*rank >= TPK_NPY_MAX_RANK) return *why = "shape has more than 8 dimensions", false;
    shape[(*rank)++] = v;
    if (accept(ps, ')')) return true;
    if (!accept(ps, ',')) return *why = "shape entries must be separated by commas", false;
    if (accept(ps, ')')) return true;
  }
}

typedef struct Descr {
  const char *name;  /* without the byte-order character */
  TpkDType dtype;    /* what we store */
  size_t size;       /* bytes per element in the file */
  const char *numpy; /* NumPy's name of the type */
} Descr;

static const Descr DESCRS[] = {
    {"f4", TPK_F32, 4, "float32"}, {"f2", TPK_F16, 2, "float16"}, {"i4", TPK_I32, 4, "int32"},
    {"i2", TPK_I16, 2, "int16"},   {"i1", TPK_I8, 1, "int8"},     {"u1", TPK_U8, 1, "uint8"},
    {"b1", TPK_BOOL, 1, "bool"},   {"f8", TPK_F32, 8, "float64"}, {"i8", TPK_I32, 8, "int64"},
    {"u4", TPK_U32, 4, "uint32"},  {"u2", TPK_U16, 2, "uint16"},
};

static TpkStatus parse_descr(const char *path, const char *d, const Descr **out, TpkError *err) {
  char order = d[0];
  if (order == '>')
    return tpk_error(err, TPK_ERR_INVALID, "%s: big-endian data ('%s') is not supported", path, d);
  if (order != '<' && order != '|' && order != '=')
    return tpk_error(err, TPK_ERR_INVALID, "%s: unsupported dtype descr '%s'", path, d);
  for (size_t i = 0; i < TPK_ARRAY_LEN(DESCRS); i++)
    if (strcmp(d + 1, DESCRS[i].name) == 0) {
      /* '|' (no byte order) only makes sense for 1-byte types; '=' is the
       * host's order, which we read only on little-endian hosts. */
      if ((order == '|' && DESCRS[i].size != 1) || (order == '=' && DESCRS[i].size != 1 && !host_little_endian()))
        return tpk_error(err, TPK_ERR_INVALID, "%s: dtype descr '%s' has no usable byte order", path, d);
      *out = &DESCRS[i];
      return TPK_OK;
    }
  return tpk_error(err, TPK_ERR_INVALID,
                   "%s: unsupported dtype descr '%s' (expected <f4 <f2 <i4 <i2 |i1 |u1 |b1 <f8 <i8)", path, d);
}

/* Parse the header dict; fills dtype descr, rank and shape. */
static TpkStatus parse_header(const char *path, const char *text, size_t len, const Descr **descr, int *rank,
                              int64_t *shape, TpkError *err) {
  Parser ps = {text, text + len};
  bool seen_descr = false, seen_order = false, seen_shape = false;
  const char *why = NULL;
  if (!accept(&ps, '{')) return tpk_error(err, TPK_ERR_INVALID, "%s: header is not a dict", path);
  while (!accept(&ps, '}')) {
    char key[32], val[32];
    if (!parse_string(&ps, key, sizeof key)) return tpk_error(err, TPK_ERR_INVALID, "%s: header: expected a quoted key", path);
    if (!accept(&ps, ':')) return tpk_error(err, TPK_ERR_INVALID, "%s: header: expected ':' after '%s'", path, key);
    if (!strcmp(key, "descr")) {
      if (seen_descr) return tpk_error(err, TPK_ERR_INVALID, "%s: header: 'descr' given twice", path);
      seen_descr = true;
      if (!parse_string(&ps, val, sizeof val))
        return tpk_error(err, TPK_ERR_INVALID, "%s: header: 'descr' must be a simple type string (structured dtypes are not supported)", path);
      TpkStatus st = parse_descr(path, val, descr, err);
      if (st != TPK_OK) return st;
    } else if (!strcmp(key, "fortran_order")) {
      if (seen_order) return tpk_error(err, TPK_ERR_INVALID, "%s: header: 'fortran_order' given twice", path);
      seen_order = true;
      if (parse_word(&ps, "True"))
        return tpk_error(err, TPK_ERR_INVALID, "%s: Fortran-order arrays are not supported (save a C-order copy)", path);
      if (!parse_word(&ps, "False"))
        return tpk_error(err, TPK_ERR_INVALID, "%s: header: 'fortran_order' must be True or False", path);
    } else if (!strcmp(key, "shape")) {
      if (seen_shape) return tpk_error(err, TPK_ERR_INVALID, "%s: header: 'shape' given twice", path);
      seen_shape = true;
      if (!parse_shape(&ps, rank, shape, &why)) return tpk_error(err, TPK_ERR_INVALID, "%s: header: %s", path, why);
    } else {
      return tpk_error(err, TPK_ERR_INVALID, "%s: header: unexpected key '%s'", path, key);
    }
    if (!accept(&ps, ',')) {
      if (!accept(&ps, '}')) return tpk_error(err, TPK_ERR_INVALID, "%s: header: expected ',' or '}'", path);
      break;
    }
  }
  skip_ws(&ps);
  if (ps.p != ps.end) return tpk_error(err, TPK_ERR_INVALID, "%s: header: unexpected text after the dict", path);
  if (!seen_descr || !seen_order || !seen_shape)
    return tpk_error(err, TPK_ERR_INVALID, "%s: header lacks '%s'", path,
                     !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
  return TPK_OK;
}

/* ---- Reading -------------------------------------------------------------------- */

static uint64_t le(const unsigned char *b, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static TpkStatus read_exact(FILE *fp, const char *path, void *buf, size_t n, const char *what, TpkError *err) {
  if (n && fread(buf, 1, n, fp) != n)
    return tpk_error(err, ferror(fp) ? TPK_ERR_IO : TPK_ERR_INVALID, "%s: truncated file (%s)", path, what);
  return TPK_OK;
}

static TpkStatus read_body(FILE *fp, const char *path, TpkNpy *out, TpkError *err) {
  unsigned char pre[12];
  TpkStatus st = read_exact(fp, path, pre, 8, "magic and version", err);
  if (st != TPK_OK) return st;
  if (memcmp(pre, "\x93NUMPY", 6) != 0) return tpk_error(err, TPK_ERR_INVALID, "%s: not a .npy file (bad magic)", path);
  int major = pre[6];
  if (major < 1 || major > 3)
    return tpk_error(err, TPK_ERR_INVALID, "%s: unsupported .npy format version %d.%d", path, major, pre[7]);
  int lenbytes = major == 1 ? 2 : 4;
  if ((st = read_exact(fp, path, pre + 8, (size_t)lenbytes, "header length", err)) != TPK_OK) return st;
  uint64_t hlen = le(pre + 8, lenbytes);
  if (hlen > HEADER_LIMIT)
    return tpk_error(err, TPK_ERR_INVALID, "%s: header length %" PRIu64 " is implausibly large", path, hlen);
  char *text = malloc((size_t)hlen + 1);
  if (!text) return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory", path);
  st = read_exact(fp, path, text, (size_t)hlen, "header", err);
  const Descr *d = NULL;
  if (st == TPK_OK) {
    text[hlen] = 0;
    if (memchr(text, 0, (size_t)hlen)) st = tpk_error(err, TPK_ERR_INVALID, "%s: header contains a NUL byte", path);
  }
  if (st == TPK_OK) st = parse_header(path, text, (size_t)hlen, &d, &out->rank, out->shape, err);
  free(text);
  if (st != TPK_OK) return st;

  /* Element count and byte sizes, refusing overflow. */
  uint64_t n = 1;
  for (int i = 0; i < out->rank; i++) {
    uint64_t dim = (uint64_t)out->shape[i];
    if (dim && n > (UINT64_MAX / 8) / dim)
      return tpk_error(err, TPK_ERR_INVALID, "%s: shape is too large", path);
    n *= dim;
  }
  uint64_t fbytes = n * d->size, mbytes = n * tpk_dtype_size(d->dtype);
  if (fbytes > SIZE_MAX / 2) return tpk_error(err, TPK_ERR_INVALID, "%s: shape is too large", path);
  /* Check the data is really there before allocating for it. */
  long here = ftell(fp);
  if (here >= 0 && fseek(fp, 0, SEEK_END) == 0) {
    long endpos = ftell(fp);
    if (endpos >= 0 && (uint64_t)(endpos - here) != fbytes)
      return tpk_error(err, TPK_ERR_INVALID, "%s: %s: the header promises %" PRIu64 " data bytes, the file has %ld", path,
                       (uint64_t)(endpos - here) < fbytes ? "truncated data" : "trailing bytes after the data", fbytes,
                       endpos - here);
    if (fseek(fp, here, SEEK_SET) != 0) return tpk_error(err, TPK_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
  }
  unsigned char *raw = malloc(fbytes ? (size_t)fbytes : 1);
  if (!raw) return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes", path, fbytes);
  if ((st = read_exact(fp, path, raw, (size_t)fbytes, "data", err)) != TPK_OK) {
    free(raw);
    return st;
  }
  if (fgetc(fp) != EOF) { /* for unseekable inputs: the size check again */
    free(raw);
    return tpk_error(err, TPK_ERR_INVALID, "%s: trailing bytes after the data", path);
  }
  void *data = malloc(mbytes ? (size_t)mbytes : 1);
  if (!data) {
    free(raw);
    return tpk_error(err, TPK_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes", path, mbytes);
  }
  /* Decode little-endian elements one at a time (portable to any host). */
  for (uint64_t i = 0; i < n; i++) {
    const unsigned char *e = raw + i * d->size;
    uint64_t bits = le(e, (int)d->size);
    switch (d->dtype) {
    case TPK_F32:
      if (d->size == 8) {
        double x;
        memcpy(&x, &bits, 8);
        ((float *)data)[i] = (float)x; /* round to nearest even */
      } else {
        uint32_t b32 = (uint32_t)bits;
        memcpy((float *)data + i, &b32, 4);
      }
      break;
    case TPK_F16:
    case TPK_U16:
    case TPK_I16: ((uint16_t *)data)[i] = (uint16_t)bits; break;
    case TPK_U32: ((uint32_t *)data)[i] = (uint32_t)bits; break;
    case TPK_I32:
      if (d->size == 8) {
        int64_t v = (int64_t)bits; /* two's complement on every host C11 targets */
        if (v < INT32_MIN || v > INT32_MAX) {
          free(raw), free(data);
          return tpk_error(err, TPK_ERR_INVALID, "%s: element %" PRIu64 " = %" PRId64 " does not fit i32", path, i, v);
        }
        ((int32_t *)data)[i] = (int32_t)v;
      } else {
        uint32_t b32 = (uint32_t)bits;
        memcpy((int32_t *)data + i, &b32, 4);
      }
      break;
    case TPK_I8:
    case TPK_U8: ((uint8_t *)data)[i] = (uint8_t)bits; break;
    case TPK_BOOL: ((uint8_t *)data)[i] = bits != 0; break;
    default: break;
    }
  }
  free(raw);
  out->dtype = d->dtype;
  out->file_dtype = d->numpy;
  out->data = data;
  out->bytes = (size_t)mbytes;
  return TPK_OK;
}

TpkStatus tpk_npy_read(const char *path, TpkNpy *out, TpkError *err) {
  if (!out) return tpk_error(err, TPK_ERR_INVALID, "tpk_npy_read: no output given");
  memset(out, 0, sizeof *out);
  if (!path) return tpk_error(err, TPK_ERR_INVALID, "tpk_npy_read: no path given");
  FILE *fp = fopen(path, "rb");
  if (!fp) return tpk_error(err, TPK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  TpkStatus st = read_body(fp, path, out, err);
  fclose(fp);
  if (st != TPK_OK) tpk_npy_free(out);
  return st;
}

void tpk_npy_free(TpkNpy *n) {
  if (!n) return;
  free(n->data);
  memset(n, 0, sizeof *n);
}

/* ---- Writing -------------------------------------------------------------------- */

/* What the writer needs, validated by tpk_npy_write. */
typedef struct NpyOut {
  TpkDType dtype;
  const void *data;
  uint64_t n;    /* elements */
  size_t fsize;  /* bytes per element in the file */
  char head[512]; /* the header dict, padded, ending in '\n' */
  int len;
} NpyOut;

static TpkStatus npy_fill(FILE *fp, void *arg, TpkError *err) {
  (void)err;
  const NpyOut *o = arg;
  TpkDType dtype = o->dtype;
  const void *data = o->data;
  int len = o->len;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
  fwrite(pre, 1, 10, fp);
  fwrite(o->head, 1, (size_t)len, fp);
  /* Elements in little-endian order, buffered in chunks. */
  unsigned char chunk[4096];
  size_t used = 0;
  for (uint64_t i = 0; i < o->n && !ferror(fp); i++) {
    uint32_t bits = 0;
    switch (dtype) {
    case TPK_F32: memcpy(&bits, (const float *)data + i, 4); break;
    case TPK_BF16:
    case TPK_F8E4M3:
    case TPK_F8E5M2: {
      float x = (float)tpk_ref_get(dtype, data, (int64_t)i); /* exact widening */
      memcpy(&bits, &x, 4);
      break;
    }
    case TPK_F16:
    case TPK_U16:
    case TPK_I16: bits = ((const uint16_t *)data)[i]; break;
    case TPK_U32:
    case TPK_I32: memcpy(&bits, (const int32_t *)data + i, 4); break;
    case TPK_BOOL: bits = ((const uint8_t *)data)[i] != 0; break;
    default: bits = ((const uint8_t *)data)[i]; break;
    }
    for (size_t b = 0; b < o->fsize; b++) chunk[used++] = (unsigned char)(bits >> (8 * b));
    if (used + 4 > sizeof chunk) {
      fwrite(chunk, 1, used, fp);
      used = 0;
    }
  }
  if (used) fwrite(chunk, 1, used, fp);
  return TPK_OK; /* write errors: tpk_file_write sees them on fp */
}

TpkStatus tpk_npy_write(const char *path, TpkDType dtype, int rank, const int64_t *shape, const void *data,
                        TpkError *err) {
  if (!path) return tpk_error(err, TPK_ERR_INVALID, "tpk_npy_write: no path given");
  if ((unsigned)dtype >= TPK_DTYPE_COUNT) return tpk_error(err, TPK_ERR_INVALID, "%s: invalid dtype %d", path, (int)dtype);
  if (rank < 0 || rank > TPK_NPY_MAX_RANK || (rank > 0 && !shape))
    return tpk_error(err, TPK_ERR_INVALID, "%s: rank %d is not in [0, %d]", path, rank, TPK_NPY_MAX_RANK);
  uint64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return tpk_error(err, TPK_ERR_INVALID, "%s: negative dimension %" PRId64, path, shape[i]);
    if (shape[i] && n > (UINT64_MAX / 8) / (uint64_t)shape[i]) return tpk_error(err, TPK_ERR_INVALID, "%s: shape is too large", path);
    n *= (uint64_t)shape[i];
  }
  if (n && !data) return tpk_error(err, TPK_ERR_INVALID, "%s: no data given", path);
  NpyOut o = {.dtype = dtype, .data = data, .n = n};
  const char *descr;
  switch (dtype) {
  case TPK_F16: descr = "<f2", o.fsize = 2; break;
  case TPK_I32: descr = "<i4", o.fsize = 4; break;
  case TPK_I16: descr = "<i2", o.fsize = 2; break;
  case TPK_I8: descr = "|i1", o.fsize = 1; break;
  case TPK_U8: descr = "|u1", o.fsize = 1; break;
  case TPK_U16: descr = "<u2", o.fsize = 2; break;
  case TPK_U32: descr = "<u4", o.fsize = 4; break;
  case TPK_BOOL: descr = "|b1", o.fsize = 1; break;
  default: descr = "<f4", o.fsize = 4; break; /* f32, and bf16/f8 widened exactly */
  }
  char *head = o.head;
  size_t cap = sizeof o.head;
  int len = snprintf(head, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < rank; i++) len += snprintf(head + len, cap - (size_t)len, "%s%" PRId64, i ? ", " : "", shape[i]);
  len += snprintf(head + len, cap - (size_t)len, "%s), }", rank == 1 ? "," : "");
  /* Pad with spaces so magic + header is a multiple of 64, ending in '\n'. */
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  memset(head + len, ' ', (size_t)pad);
  len += pad;
  head[len++] = '\n';
  o.len = len;
  return tpk_file_write(path, 0666, npy_fill, &o, err);
}
