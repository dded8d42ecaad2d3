/*
 * _C.c — tpk's Python extension: programs, kernels and launches over tpk.h.
 *
 * The hot path of the package. A launch takes one Python object per kernel
 * parameter: arrays for tensors (anything that exports a buffer, as NumPy
 * arrays do, or a torch CPU tensor) and numbers for scalars. Arrays cross
 * without copies: their memory is wrapped as tpk buffers (tpk_buffer_wrap)
 * for the launch and unwrapped after it. What an array must satisfy (dtype,
 * rank, C-contiguous strides, alignment, writable when written) is checked
 * here before anything runs, so the error names the parameter and says what
 * was expected; what only the whole signature can tell (a shape symbol
 * given two sizes) is tpk's own message. The GIL is released while the
 * kernel runs, so threads launch in parallel.
 *
 * Torch tensors are read through attributes (dtype, is_cpu, shape,
 * stride(), data_ptr()): about 0.5 us for all of them, where torch's
 * __dlpack__ alone took 2.7 us per call (and refuses tensors that require
 * grad).
 *
 * Objects and lifetimes. One context serves the process, created on first
 * use and never destroyed: programs, kernels and reports may outlive any
 * point at which it could end (a report's trace is its program's memory),
 * and the OS takes its memory at exit. A Program owns its TpkProgram; a
 * Kernel holds its Program (none for the standard library's, whose programs
 * are the context's); a Report holds the Program too, since its trace
 * belongs to it. Nothing refers back, so reference counting frees them in
 * whatever order Python drops them. Wrapped arrays get no release callback:
 * each buffer is destroyed before its launch returns, while the caller's
 * object is still held here, and the context never ends, which is the one
 * other way a wrapped buffer's memory is handed back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpk.h"

enum {
  SMALL_PARAMS = 64, /* parameters a launch keeps on the stack; more go to the heap */
  MAX_SYMBOLS = 64, /* shape symbols, and tunables, of one kernel */
};

/* ---- module state --------------------------------------------------------------- */

static TpkContext *the_context;
static PyObject *TpkError, *TpkArgumentError;
static PyObject *device_var;     /* contextvars.ContextVar: the default device's name */
static PyObject *default_device; /* "host" */
static PyObject *devices;        /* device name -> TpkDevice* (an int): the ones opened */
/* NumPy's functions and dtypes, looked up on first use */
static PyObject *np_ndarray, *np_empty, *np_ascontiguousarray, *np_copyto;
static PyObject *np_dtypes[TPK_DTYPE_COUNT]; /* NULL where NumPy has no such dtype */
/* torch.Tensor and torch's dtypes, looked up once torch is imported */
static PyObject *torch_tensor_type;
static PyObject *torch_dtypes[TPK_DTYPE_COUNT];
/* interned names */
static PyObject *s_dtype, *s_is_cpu, *s_shape, *s_stride, *s_data_ptr, *s_device, *s_tune, *s_syms, *s_convert,
    *s_args, *s_casting, *s_unsafe;

static PyTypeObject ProgramType, KernelType, ReportType;
static PyTypeObject ParamType, TunableType;

/* tpk's message as a Python exception: tpk.TpkArgumentError (a ValueError
 * too) for bad arguments, tpk.TpkError otherwise. */
static void *raise_tpk(TpkStatus st) {
  PyErr_SetString(st == TPK_ERR_INVALID ? TpkArgumentError : TpkError, tpk_last_error());
  return NULL;
}

/* The context's log (tpk_context_set_log): what the library has to say
 * (TPK_DUMP_IR=1's dumps) goes to Python's sys.stderr, so it shows where
 * the program's other messages do and follows a redirected sys.stderr. It
 * may be called on any thread, with or without the GIL. */
static void log_to_stderr(void *user, const char *text) {
  (void)user;
  if (!Py_IsInitialized()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback); /* a call may be under way with an exception set */
  PyObject *err = PySys_GetObject("stderr"); /* borrowed */
  PyObject *done = err && err != Py_None ? PyObject_CallMethod(err, "write", "s", text) : NULL;
  Py_XDECREF(done);
  PyErr_Clear(); /* a stderr that cannot be written is not the call's failure */
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(gil);
}

static TpkContext *context(void) {
  if (!the_context) {
    if (tpk_context_create(&the_context) != TPK_OK) {
      the_context = NULL;
      return raise_tpk(TPK_ERR_INVALID);
    }
    tpk_context_set_log(the_context, log_to_stderr, NULL);
  }
  return the_context;
}

/* The device named `name` (a str), opened once and kept. */
static TpkDevice *device_of(PyObject *name) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "a device is a name such as \"host\" or \"sim:v5e\", not %.80s", Py_TYPE(name)->tp_name);
    return NULL;
  }
  PyObject *known = PyDict_GetItemWithError(devices, name);
  if (known) return PyLong_AsVoidPtr(known);
  if (PyErr_Occurred()) return NULL;
  const char *text = PyUnicode_AsUTF8(name);
  TpkContext *ctx = context();
  if (!text || !ctx) return NULL;
  TpkDevice *dev;
  TpkStatus st = tpk_device_open(ctx, text, &dev);
  if (st != TPK_OK) return raise_tpk(st);
  PyObject *ptr = PyLong_FromVoidPtr(dev);
  bool failed = !ptr || PyDict_SetItem(devices, name, ptr) < 0;
  Py_XDECREF(ptr);
  return failed ? NULL : dev;
}

/* `device` when given, else the default of the current context (tpk.device). */
static PyObject *device_name(PyObject *device) {
  if (device && device != Py_None) return Py_NewRef(device);
  PyObject *name;
  if (PyContextVar_Get(device_var, default_device, &name) < 0) return NULL;
  return name;
}

static bool numpy_ready(void) {
  if (np_empty) return true;
  static const char *const NAMES[TPK_DTYPE_COUNT] = {
      [TPK_F32] = "float32", [TPK_F16] = "float16", [TPK_I32] = "int32", [TPK_I16] = "int16",
      [TPK_I8] = "int8",     [TPK_U8] = "uint8",    [TPK_BOOL] = "bool",   [TPK_U32] = "uint32",
      [TPK_U16] = "uint16",
  };
  PyObject *np = PyImport_ImportModule("numpy");
  if (!np) return false;
  PyObject *dtype = PyObject_GetAttrString(np, "dtype");
  bool ok = dtype != NULL;
  for (int t = 0; ok && t < TPK_DTYPE_COUNT; t++)
    if (NAMES[t] && !np_dtypes[t]) ok = (np_dtypes[t] = PyObject_CallFunction(dtype, "s", NAMES[t])) != NULL;
  Py_XDECREF(dtype);
  if (ok) {
    np_ndarray = PyObject_GetAttrString(np, "ndarray");
    np_ascontiguousarray = PyObject_GetAttrString(np, "ascontiguousarray");
    np_copyto = PyObject_GetAttrString(np, "copyto");
    ok = np_ndarray && np_ascontiguousarray && np_copyto;
    if (ok) ok = (np_empty = PyObject_GetAttrString(np, "empty")) != NULL; /* last: the rest is there */
  }
  Py_DECREF(np);
  return ok;
}

/* torch.Tensor if torch has been imported (tpk never imports it), else NULL
 * with no exception. */
static PyObject *torch_tensor(void) {
  if (torch_tensor_type) return torch_tensor_type;
  static const char *const NAMES[TPK_DTYPE_COUNT] = {
      [TPK_F32] = "float32",      [TPK_F16] = "float16", [TPK_BF16] = "bfloat16", [TPK_F8E4M3] = "float8_e4m3fn",
      [TPK_F8E5M2] = "float8_e5m2", [TPK_I32] = "int32",   [TPK_I16] = "int16",     [TPK_I8] = "int8",
      [TPK_U8] = "uint8",         [TPK_BOOL] = "bool",   [TPK_U32] = "uint32",   [TPK_U16] = "uint16",
  };
  PyObject *name = PyUnicode_FromString("torch");
  PyObject *torch = name ? PyImport_GetModule(name) : NULL;
  Py_XDECREF(name);
  if (!torch) {
    PyErr_Clear();
    return NULL;
  }
  PyObject *type = PyObject_GetAttrString(torch, "Tensor");
  if (!type || !PyType_Check(type)) { /* torch half imported */
    PyErr_Clear();
    Py_XDECREF(type);
    Py_DECREF(torch);
    return NULL;
  }
  for (int t = 0; t < TPK_DTYPE_COUNT; t++)
    if (!(torch_dtypes[t] = PyObject_GetAttrString(torch, NAMES[t]))) PyErr_Clear(); /* a torch without it */
  Py_DECREF(torch);
  return torch_tensor_type = type;
}

static bool is_torch_tensor(PyObject *obj) {
  PyObject *type = torch_tensor();
  return type && PyObject_TypeCheck(obj, (PyTypeObject *)type);
}

/* "(8, 8)" */
static void dims_text(char *out, size_t size, int rank, const int64_t *v) {
  size_t n = (size_t)snprintf(out, size, "(");
  for (int d = 0; d < rank && n < size; d++)
    n += (size_t)snprintf(out + n, size - n, "%s%lld", d ? ", " : "", (long long)v[d]);
  if (n < size) snprintf(out + n, size - n, rank == 1 ? ",)" : ")");
}

/* ---- the signature ------------------------------------------------------------ */

static PyStructSequence_Field PARAM_FIELDS[] = {
    {"name", "the parameter's name"},
    {"kind", "'in', 'out', 'inout' or 'scalar'"},
    {"dtype", "its dtype as .tpk writes it: 'f32', 'bf16', ..."},
    {"dims", "each dimension as the signature writes it: ('M', 'N'), ('B*H', '128'); () for a scalar"},
    {NULL, NULL},
};
static PyStructSequence_Desc PARAM_DESC = {"tpk.Param", "A kernel parameter.", PARAM_FIELDS, 4};
static PyStructSequence_Field TUNABLE_FIELDS[] = {
    {"name", "the tunable's name"},
    {"default", "its declared default, the first choice"},
    {"choices", "the values it may take"},
    {NULL, NULL},
};
static PyStructSequence_Desc TUNABLE_DESC = {"tpk.Tunable", "A kernel's tunable (`tune BM in [16, 8]`).", TUNABLE_FIELDS,
                                             3};

typedef struct ParamInfo {
  PyObject *name;      /* str */
  PyObject *type_text; /* "f32[M, N]", for messages */
  TpkParamKind kind;
  TpkDType dtype;
  int rank;
} ParamInfo;

typedef struct KernelObject {
  PyObject_HEAD
  TpkKernel *k;
  PyObject *owner; /* the Program that holds k, or NULL: a standard kernel (the context's) */
  PyObject *name, *params, *inputs, *outputs, *symbols, *tunables;
  PyObject *last_report; /* of the latest call through kernel(...) on any thread, or NULL */
  PyObject *weakrefs;
  int nparams, nsymbols, ntunables;
  ParamInfo *param; /* nparams */
  const char *symbol[MAX_SYMBOLS];  /* the kernel's strings */
  const char *tunable[MAX_SYMBOLS];
} KernelObject;

static const char *const KIND_NAMES[] = {
    [TPK_PARAM_KIND_INPUT] = "in", [TPK_PARAM_KIND_OUTPUT] = "out", [TPK_PARAM_KIND_INOUT] = "inout",
    [TPK_PARAM_KIND_SCALAR] = "scalar"};

/* One Param for parameter i, filling K->param[i]. */
static PyObject *param_new(KernelObject *K, int i) {
  ParamInfo *p = &K->param[i];
  p->kind = tpk_kernel_param_kind(K->k, i);
  p->dtype = tpk_kernel_param_dtype(K->k, i);
  p->rank = p->kind == TPK_PARAM_KIND_SCALAR ? 0 : tpk_kernel_param_rank(K->k, i);
  p->name = PyUnicode_FromString(tpk_kernel_param_name(K->k, i));
  PyObject *dims = PyTuple_New(p->rank), *param = PyStructSequence_New(&ParamType);
  PyObject *text = PyUnicode_FromString(tpk_dtype_name(p->dtype));
  if (!p->name || !dims || !param || !text) goto fail;
  if (p->kind != TPK_PARAM_KIND_SCALAR) {
    for (int d = 0; d < p->rank; d++) {
      PyObject *dim = PyUnicode_FromString(tpk_kernel_param_dim(K->k, i, d));
      if (!dim) goto fail;
      PyTuple_SET_ITEM(dims, d, dim);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *inner = sep ? PyUnicode_Join(sep, dims) : NULL;
    Py_XDECREF(sep);
    if (!inner) goto fail;
    Py_SETREF(text, PyUnicode_FromFormat("%U[%U]", text, inner));
    Py_DECREF(inner);
    if (!text) goto fail;
  }
  p->type_text = text;
  PyStructSequence_SET_ITEM(param, 0, Py_NewRef(p->name));
  PyStructSequence_SET_ITEM(param, 1, PyUnicode_FromString(KIND_NAMES[p->kind]));
  PyStructSequence_SET_ITEM(param, 2, PyUnicode_FromString(tpk_dtype_name(p->dtype)));
  PyStructSequence_SET_ITEM(param, 3, dims);
  if (!PyStructSequence_GET_ITEM(param, 1) || !PyStructSequence_GET_ITEM(param, 2)) {
    Py_DECREF(param);
    return NULL;
  }
  return param;
fail:
  Py_XDECREF(dims);
  Py_XDECREF(param);
  Py_XDECREF(text);
  return NULL;
}

static PyObject *tunable_new(const TpkKernel *k, int i) {
  const int64_t *values;
  int n = tpk_kernel_tunable_choices(k, i, &values);
  PyObject *t = PyStructSequence_New(&TunableType), *choices = PyTuple_New(n);
  if (!t || !choices) {
    Py_XDECREF(t);
    Py_XDECREF(choices);
    return NULL;
  }
  for (int c = 0; c < n; c++) PyTuple_SET_ITEM(choices, c, PyLong_FromLongLong(values[c]));
  PyStructSequence_SET_ITEM(t, 0, PyUnicode_FromString(tpk_kernel_tunable_name(k, i)));
  PyStructSequence_SET_ITEM(t, 1, PyLong_FromLongLong(tpk_kernel_tunable_default(k, i)));
  PyStructSequence_SET_ITEM(t, 2, choices);
  if (PyErr_Occurred()) Py_CLEAR(t);
  return t;
}

/* The names of the parameters after `->` (outputs) or before it. */
static PyObject *names_where(KernelObject *K, bool outputs) {
  PyObject *list = PyList_New(0);
  for (int i = 0; list && i < K->nparams; i++)
    if ((K->param[i].kind == TPK_PARAM_KIND_OUTPUT) == outputs && PyList_Append(list, K->param[i].name) < 0)
      Py_CLEAR(list);
  PyObject *tuple = list ? PyList_AsTuple(list) : NULL;
  Py_XDECREF(list);
  return tuple;
}

/* The Kernel object for k, named `name`, of the Program `owner` (NULL: a
 * standard kernel). */
static PyObject *kernel_new(TpkKernel *k, const char *name, PyObject *owner) {
  int n = tpk_kernel_param_count(k), nsym = tpk_kernel_symbol_count(k), ntune = tpk_kernel_tunable_count(k);
  if (nsym > MAX_SYMBOLS || ntune > MAX_SYMBOLS) {
    PyErr_Format(TpkError, "kernel '%s' has %d shape symbols and %d tunables; Python launches kernels of up to %d of each", name,
                 nsym, ntune, MAX_SYMBOLS);
    return NULL;
  }
  KernelObject *K = (KernelObject *)KernelType.tp_alloc(&KernelType, 0); /* zeroed */
  if (!K) return NULL;
  K->k = k;
  if (!(K->param = PyMem_Calloc((size_t)n + 1, sizeof *K->param))) {
    Py_DECREF(K);
    return PyErr_NoMemory();
  }
  if (!(K->name = PyUnicode_FromString(name))) goto fail;
  K->owner = Py_XNewRef(owner);
  K->nparams = n;
  K->nsymbols = nsym;
  K->ntunables = ntune;
  PyObject *params = PyTuple_New(n), *symbols = PyTuple_New(nsym), *tunables = PyTuple_New(ntune);
  K->params = params;
  K->symbols = symbols;
  K->tunables = tunables;
  if (!params || !symbols || !tunables) goto fail;
  for (int i = 0; i < n; i++) {
    PyObject *p = param_new(K, i);
    if (!p) goto fail;
    PyTuple_SET_ITEM(params, i, p);
  }
  for (int i = 0; i < nsym; i++) {
    K->symbol[i] = tpk_kernel_symbol_name(k, i);
    PyObject *s = PyUnicode_FromString(K->symbol[i]);
    if (!s) goto fail;
    PyTuple_SET_ITEM(symbols, i, s);
  }
  for (int i = 0; i < ntune; i++) {
    K->tunable[i] = tpk_kernel_tunable_name(k, i);
    PyObject *t = tunable_new(k, i);
    if (!t) goto fail;
    PyTuple_SET_ITEM(tunables, i, t);
  }
  if (!(K->inputs = names_where(K, false)) || !(K->outputs = names_where(K, true))) goto fail;
  return (PyObject *)K;
fail:
  Py_DECREF(K);
  return NULL;
}

static void kernel_dealloc(KernelObject *K) {
  if (K->weakrefs) PyObject_ClearWeakRefs((PyObject *)K);
  for (int i = 0; K->param && i < K->nparams; i++) {
    Py_XDECREF(K->param[i].name);
    Py_XDECREF(K->param[i].type_text);
  }
  PyMem_Free(K->param);
  Py_XDECREF(K->name);
  Py_XDECREF(K->params);
  Py_XDECREF(K->inputs);
  Py_XDECREF(K->outputs);
  Py_XDECREF(K->symbols);
  Py_XDECREF(K->tunables);
  Py_XDECREF(K->last_report);
  Py_XDECREF(K->owner); /* last: it may destroy the program k belongs to */
  Py_TYPE(K)->tp_free((PyObject *)K);
}

/* "softmax(x: f32[M, N]) -> (y: f32[M, N])" */
static PyObject *kernel_repr(KernelObject *K) {
  PyObject *parts[2] = {PyList_New(0), PyList_New(0)};
  for (int i = 0; parts[0] && parts[1] && i < K->nparams; i++) {
    const ParamInfo *p = &K->param[i];
    PyObject *s = PyUnicode_FromFormat("%s%U: %U", p->kind == TPK_PARAM_KIND_INOUT ? "inout " : "", p->name, p->type_text);
    if (!s || PyList_Append(parts[p->kind == TPK_PARAM_KIND_OUTPUT], s) < 0) Py_CLEAR(parts[0]);
    Py_XDECREF(s);
  }
  PyObject *sep = PyUnicode_FromString(", "), *repr = NULL;
  if (parts[0] && parts[1] && sep) {
    PyObject *in = PyUnicode_Join(sep, parts[0]), *out = PyUnicode_Join(sep, parts[1]);
    if (in && out) repr = PyUnicode_FromFormat("<tpk.Kernel %U(%U) -> (%U)>", K->name, in, out);
    Py_XDECREF(in);
    Py_XDECREF(out);
  }
  Py_XDECREF(sep);
  Py_XDECREF(parts[0]);
  Py_XDECREF(parts[1]);
  return repr;
}

/* ---- reports -------------------------------------------------------------------- */

typedef struct ReportObject {
  PyObject_HEAD
  TpkLaunchResult r;
  PyObject *owner; /* the Program whose memory holds r.trace, or NULL (a standard kernel) */
  PyObject *kernel, *device; /* names */
} ReportObject;

static PyObject *report_new(const KernelObject *K, const TpkLaunchResult *r, PyObject *device) {
  ReportObject *R = PyObject_New(ReportObject, &ReportType);
  if (!R) return NULL;
  R->r = *r;
  R->owner = Py_XNewRef(K->owner);
  R->kernel = Py_NewRef(K->name);
  R->device = Py_NewRef(device);
  return (PyObject *)R;
}

static void report_dealloc(ReportObject *R) {
  Py_XDECREF(R->kernel);
  Py_XDECREF(R->device);
  Py_XDECREF(R->owner);
  PyObject_Free(R);
}

static PyObject *report_tier(ReportObject *R, void *closure) {
  (void)closure;
  return PyUnicode_FromString(R->r.tier ? R->r.tier : "");
}
static PyObject *report_tunes_from(ReportObject *R, void *closure) {
  (void)closure;
  return PyUnicode_FromString(R->r.tunes_from ? R->r.tunes_from : "");
}
static PyObject *report_note(ReportObject *R, void *closure) {
  (void)closure;
  return PyUnicode_FromString(R->r.note);
}
static PyObject *report_simulated(ReportObject *R, void *closure) {
  (void)closure;
  return PyBool_FromLong(R->r.simulated);
}
static PyObject *report_chip(ReportObject *R, void *closure) {
  (void)closure;
  if (!R->r.simulated || !R->r.sim.chip) Py_RETURN_NONE;
  return PyUnicode_FromString(R->r.sim.chip);
}
static PyObject *report_memory_bound(ReportObject *R, void *closure) {
  (void)closure;
  if (!R->r.simulated) Py_RETURN_NONE;
  return PyBool_FromLong(R->r.sim.memory_bound);
}

/* "BM=16,BN=128" as {"BM": 16, "BN": 128} */
static PyObject *report_tunes(ReportObject *R, void *closure) {
  (void)closure;
  PyObject *dict = PyDict_New();
  for (const char *s = R->r.tunes; dict && *s;) {
    const char *eq = strchr(s, '='), *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (!eq || eq > end) break;
    PyObject *key = PyUnicode_FromStringAndSize(s, eq - s);
    PyObject *value = PyLong_FromLongLong(strtoll(eq + 1, NULL, 10));
    if (!key || !value || PyDict_SetItem(dict, key, value) < 0) Py_CLEAR(dict);
    Py_XDECREF(key);
    Py_XDECREF(value);
    s = *end ? end + 1 : end;
  }
  return dict;
}

/* The simulator's numbers, None when the launch was not simulated. */
static const size_t SIM_FIELDS[] = {
    offsetof(TpkSimStats, seconds),          offsetof(TpkSimStats, cycles),          offsetof(TpkSimStats, clock_hz),
    offsetof(TpkSimStats, flops),            offsetof(TpkSimStats, matmul_flops),    offsetof(TpkSimStats, hbm_bytes),
    offsetof(TpkSimStats, peak_flops),       offsetof(TpkSimStats, hbm_bytes_per_s), offsetof(TpkSimStats, roofline_seconds),
    offsetof(TpkSimStats, mxu_utilisation), offsetof(TpkSimStats, vpu_utilisation), offsetof(TpkSimStats, hbm_utilisation),
};
static PyObject *report_sim_number(ReportObject *R, void *closure) {
  if (!R->r.simulated) Py_RETURN_NONE;
  double v;
  memcpy(&v, (const char *)&R->r.sim + SIM_FIELDS[(intptr_t)closure], sizeof v);
  return PyFloat_FromDouble(v);
}

static PyObject *report_write_trace(ReportObject *R, PyObject *args, PyObject *kwargs) {
  static char *KEYWORDS[] = {"path", "name", NULL};
  PyObject *path = NULL;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|z:write_trace", KEYWORDS, PyUnicode_FSConverter, &path, &name)) return NULL;
  if (!R->r.simulated || !R->r.trace) {
    Py_DECREF(path);
    return PyErr_Format(TpkError, "the launch of %U on %U was not simulated: traces come from sim:<chip> devices", R->kernel,
                        R->device);
  }
  TpkStatus st;
  Py_BEGIN_ALLOW_THREADS
  st = tpk_trace_write(R->r.trace, name, PyBytes_AS_STRING(path));
  Py_END_ALLOW_THREADS
  Py_DECREF(path);
  if (st != TPK_OK) return raise_tpk(st);
  Py_RETURN_NONE;
}

static PyObject *report_repr(ReportObject *R) {
  char tunes[300] = "";
  if (R->r.tunes[0]) snprintf(tunes, sizeof tunes, ", %s (%s)", R->r.tunes, R->r.tunes_from ? R->r.tunes_from : "");
  if (!R->r.simulated) return PyUnicode_FromFormat("<tpk.Report %U on %U: %s%s>", R->kernel, R->device, R->r.tier, tunes);
  char timing[160];
  snprintf(timing, sizeof timing, "%.4g us on %s, %.0f%% of the roofline", R->r.sim.seconds * 1e6, R->r.sim.chip,
           R->r.sim.seconds > 0 ? 100 * R->r.sim.roofline_seconds / R->r.sim.seconds : 0.0);
  return PyUnicode_FromFormat("<tpk.Report %U on %U: %s%s; %s>", R->kernel, R->device, R->r.tier, tunes, timing);
}

/* ---- a launch ------------------------------------------------------------------- */

/* One parameter's argument while a launch is marshalled. */
typedef struct Arg {
  PyObject *obj;     /* an array held for the launch (a torch tensor, an allocated or converted array), or NULL */
  Py_buffer view;    /* the array's buffer, when it exported one (view.obj set) */
  TpkBuffer *buf;    /* what the kernel gets */
  PyObject *caller;  /* convert=True: the caller's array that obj is a converted copy of, to copy back into */
  bool staged;       /* convert=True: buf is tpk's memory holding view's float32 values in the parameter's dtype */
} Arg;

typedef struct Launch {
  KernelObject *kernel;
  PyObject *device; /* its name */
  TpkDevice *dev;
  bool convert;
  Arg *arg; /* per parameter: the stack's below, or the heap's for a kernel with more */
  TpkBuffer **bufs;
  double *scalars;
  Arg small_arg[SMALL_PARAMS];
  TpkBuffer *small_bufs[SMALL_PARAMS];
  double small_scalars[SMALL_PARAMS];
  TpkNamedInt syms[MAX_SYMBOLS], tunes[MAX_SYMBOLS];
  int nsyms, ntunes;
} Launch;

/* False (MemoryError set) when a large kernel's arrays do not fit; then
 * launch_release still may be called. */
static bool launch_init(Launch *L, KernelObject *K) {
  L->kernel = K;
  L->device = NULL;
  L->convert = false;
  L->nsyms = L->ntunes = 0;
  L->arg = L->small_arg;
  L->bufs = L->small_bufs;
  L->scalars = L->small_scalars;
  if (K->nparams > SMALL_PARAMS) {
    L->arg = PyMem_Calloc((size_t)K->nparams, sizeof *L->arg);
    L->bufs = PyMem_Calloc((size_t)K->nparams, sizeof *L->bufs);
    L->scalars = PyMem_Calloc((size_t)K->nparams, sizeof *L->scalars);
    if (!L->arg || !L->bufs || !L->scalars) {
      PyMem_Free(L->arg);
      PyMem_Free(L->bufs);
      PyMem_Free(L->scalars);
      L->arg = NULL; /* nothing to release */
      L->bufs = NULL;
      L->scalars = NULL;
      PyErr_NoMemory();
      return false;
    }
  }
  for (int i = 0; i < K->nparams; i++) {
    L->arg[i].obj = L->arg[i].caller = NULL;
    L->arg[i].view.obj = NULL;
    L->arg[i].buf = NULL;
    L->arg[i].staged = false;
    L->bufs[i] = NULL;
    L->scalars[i] = 0;
  }
  return true;
}

static void arg_release(Arg *a) {
  if (a->buf) tpk_buffer_destroy(a->buf);
  a->buf = NULL;
  if (a->view.obj) PyBuffer_Release(&a->view);
  a->view.obj = NULL;
  Py_CLEAR(a->obj);
  Py_CLEAR(a->caller);
  a->staged = false;
}

static void launch_release(Launch *L) {
  for (int i = 0; L->arg && i < L->kernel->nparams; i++) arg_release(&L->arg[i]);
  if (L->arg != L->small_arg) {
    PyMem_Free(L->arg);
    PyMem_Free(L->bufs);
    PyMem_Free(L->scalars);
  }
  Py_CLEAR(L->device);
}

static bool launch_device(Launch *L, PyObject *device) {
  L->device = device_name(device);
  return L->device && (L->dev = device_of(L->device)) != NULL;
}

/* A buffer format's dtype ("f", "<f", "e", "i", ...); TPK_DTYPE_COUNT when
 * tpk has none. */
static TpkDType format_dtype(const char *format, Py_ssize_t itemsize) {
  const char *f = format ? format : "B";
  if (*f == '<' || *f == '=' || *f == '@') f++; /* little-endian, as this machine is */
  if (!f[0] || f[1]) return TPK_DTYPE_COUNT;
  TpkDType t;
  switch (f[0]) {
  case 'f': t = TPK_F32; break;
  case 'e': t = TPK_F16; break;
  case 'i': case 'l': case 'q': t = TPK_I32; break; /* by size below: int32 only */
  case 'h': t = TPK_I16; break;
  case 'b': t = TPK_I8; break;
  case 'B': t = TPK_U8; break;
  case 'I': case 'L': t = TPK_U32; break; /* by size below */
  case 'H': t = TPK_U16; break;
  case '?': t = TPK_BOOL; break;
  default: return TPK_DTYPE_COUNT;
  }
  return (size_t)itemsize == tpk_dtype_size(t) ? t : TPK_DTYPE_COUNT;
}

/* What the array holds, as its library names it: "float64", "torch.float64". */
static PyObject *array_dtype_text(PyObject *obj, const Py_buffer *view) {
  PyObject *dtype = PyObject_GetAttr(obj, s_dtype);
  if (dtype) {
    PyObject *s = PyObject_Str(dtype);
    Py_DECREF(dtype);
    return s;
  }
  PyErr_Clear();
  return PyUnicode_FromFormat("format '%s'", view && view->format ? view->format : "B");
}

static int arg_error(const Launch *L, int i, PyObject *type, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *what = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (what)
    PyErr_Format(type, "kernel '%U': parameter '%U' is %U; %U", L->kernel->name, L->kernel->param[i].name,
                 L->kernel->param[i].type_text, what);
  Py_XDECREF(what);
  return -1;
}

/* Wrap `obj`'s memory as parameter i's buffer. 0: done; -1: an exception
 * is set; 1 (only when may_convert, for anything but a torch tensor): obj
 * cannot be used as it is, no exception set. */
static int wrap_array(Launch *L, int i, PyObject *obj, bool may_convert) {
  const ParamInfo *p = &L->kernel->param[i];
  Arg *a = &L->arg[i];
  bool writes = p->kind != TPK_PARAM_KIND_INPUT;
  int64_t shape[TPK_MAX_DIMS], strides[TPK_MAX_DIMS];
  int rank;
  void *data;
  TpkDType dtype;
  bool torch = false;
  if (PyObject_CheckBuffer(obj)) {
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
      a->view.obj = NULL;
      return -1;
    }
    dtype = format_dtype(a->view.format, a->view.itemsize);
    rank = a->view.ndim;
    data = a->view.buf;
    for (int d = 0; d < rank && d < TPK_MAX_DIMS; d++) {
      shape[d] = a->view.shape[d];
      /* a stride that is not a whole number of elements is never contiguous */
      strides[d] = a->view.strides[d] % a->view.itemsize ? INT64_MIN : a->view.strides[d] / a->view.itemsize;
    }
  } else if (is_torch_tensor(obj)) {
    torch = true;
    a->obj = Py_NewRef(obj);
    PyObject *t_dtype = PyObject_GetAttr(obj, s_dtype), *cpu = t_dtype ? PyObject_GetAttr(obj, s_is_cpu) : NULL;
    dtype = TPK_DTYPE_COUNT;
    for (int t = 0; t_dtype && t < TPK_DTYPE_COUNT; t++)
      if (torch_dtypes[t] == t_dtype) dtype = (TpkDType)t;
    Py_XDECREF(t_dtype);
    if (!cpu) return -1;
    bool on_cpu = cpu == Py_True;
    Py_DECREF(cpu);
    if (!on_cpu) {
      PyObject *where = PyObject_GetAttr(obj, s_device);
      if (where) arg_error(L, i, PyExc_ValueError, "the tensor is on %S, and tpk runs on CPU tensors' memory", where);
      Py_XDECREF(where);
      return -1;
    }
    PyObject *t_shape = PyObject_GetAttr(obj, s_shape);
    PyObject *t_strides = t_shape ? PyObject_CallMethodNoArgs(obj, s_stride) : NULL;
    PyObject *t_data = t_strides ? PyObject_CallMethodNoArgs(obj, s_data_ptr) : NULL;
    bool ok = t_data && PyTuple_Check(t_shape) && PyTuple_Check(t_strides);
    rank = ok ? (int)PyTuple_GET_SIZE(t_shape) : 0;
    data = ok ? PyLong_AsVoidPtr(t_data) : NULL;
    for (int d = 0; ok && d < rank && d < TPK_MAX_DIMS; d++) {
      shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(t_shape, d));
      strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(t_strides, d));
    }
    Py_XDECREF(t_shape);
    Py_XDECREF(t_strides);
    Py_XDECREF(t_data);
    if (!ok || PyErr_Occurred()) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a torch tensor whose shape or stride() is not a tuple");
      return -1;
    }
  } else {
    if (may_convert) return 1;
    return arg_error(L, i, PyExc_TypeError, "it takes an array (a NumPy array, or a CPU torch tensor), not %s",
                     Py_TYPE(obj)->tp_name);
  }

  if (dtype != p->dtype) {
    if (may_convert && !torch) goto convert;
    PyObject *held = array_dtype_text(obj, torch ? NULL : &a->view);
    if (held) arg_error(L, i, PyExc_TypeError, "the array holds %U%s", held,
                        torch ? "" : " (convert=True copies it into the parameter's dtype)");
    Py_XDECREF(held);
    return -1;
  }
  if (rank != p->rank) {
    if (rank > TPK_MAX_DIMS) return arg_error(L, i, PyExc_ValueError, "the array has %d dimensions", rank);
    char text[200];
    dims_text(text, sizeof text, rank, shape);
    return arg_error(L, i, PyExc_ValueError, "it has %d dimension%s, the array %d (shape %s)", p->rank, p->rank == 1 ? "" : "s",
                     rank, text);
  }
  int64_t want[TPK_MAX_DIMS], step = 1, elements = 1;
  bool contiguous = true;
  for (int d = rank - 1; d >= 0; d--) {
    want[d] = step;
    contiguous &= shape[d] == 1 || strides[d] == want[d];
    step *= shape[d];
    elements *= shape[d];
  }
  size_t esize = tpk_dtype_size(dtype);
  if (elements && (!contiguous || (uintptr_t)data % esize)) {
    if (may_convert && !torch) goto convert;
    char got[200], shp[200], need[200];
    dims_text(shp, sizeof shp, rank, shape);
    if (!contiguous) {
      dims_text(got, sizeof got, rank, strides);
      dims_text(need, sizeof need, rank, want);
      for (int d = 0; d < rank; d++)
        if (strides[d] == INT64_MIN) snprintf(got, sizeof got, "that are not whole elements");
      return arg_error(L, i, PyExc_ValueError,
                       "tpk needs C-contiguous memory, but the array of shape %s has strides %s (in elements), "
                       "where C-contiguous is %s: copy it first (numpy.ascontiguousarray, tensor.contiguous())",
                       shp, got, need);
    }
    return arg_error(L, i, PyExc_ValueError, "its data at %p is not aligned to its %zu-byte elements", data, esize);
  }
  if (writes && a->view.obj && a->view.readonly)
    return arg_error(L, i, PyExc_ValueError, "the kernel writes it, but the array is read-only");
  TpkStatus st = tpk_buffer_wrap(L->dev, dtype, rank, shape, NULL, data, NULL, NULL, &a->buf);
  if (st != TPK_OK) return raise_tpk(st), -1;
  L->bufs[i] = a->buf;
  return 0;
convert:
  arg_release(a);
  return 1;
}

/* convert=True: parameter i (bf16 or f8, which NumPy lacks) from the
 * C-contiguous float32 array `f32`, converted into a buffer of tpk's. */
static int stage_array(Launch *L, int i, PyObject *f32) {
  const ParamInfo *p = &L->kernel->param[i];
  Arg *a = &L->arg[i];
  if (PyObject_GetBuffer(f32, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
    a->view.obj = NULL;
    return -1;
  }
  int64_t shape[TPK_MAX_DIMS];
  if (a->view.ndim != p->rank)
    return arg_error(L, i, PyExc_ValueError, "it has %d dimension%s, the array %d", p->rank, p->rank == 1 ? "" : "s",
                     a->view.ndim);
  size_t n = 1;
  for (int d = 0; d < p->rank; d++) n *= (size_t)(shape[d] = a->view.shape[d]);
  TpkStatus st = tpk_buffer_create(L->dev, p->dtype, p->rank, shape, &a->buf);
  if (st != TPK_OK) return raise_tpk(st), -1;
  tpk_dtype_convert(TPK_F32, a->view.buf, p->dtype, tpk_buffer_data(a->buf), n);
  a->staged = true;
  L->bufs[i] = a->buf;
  return 0;
}

/* convert=True: `obj` (anything numpy.asarray takes) copied into a
 * C-contiguous array of the parameter's dtype (float32 for bf16 and f8,
 * staged into tpk's memory); copied back into obj after the launch when
 * the kernel writes it. */
static int convert_arg(Launch *L, int i, PyObject *obj) {
  const ParamInfo *p = &L->kernel->param[i];
  Arg *a = &L->arg[i];
  PyObject *target = np_dtypes[p->dtype] ? np_dtypes[p->dtype] : np_dtypes[TPK_F32];
  PyObject *copy = PyObject_CallFunctionObjArgs(np_ascontiguousarray, obj, target, NULL);
  if (!copy) return -1;
  a->obj = copy;
  if (p->kind != TPK_PARAM_KIND_INPUT && copy != obj) {
    int is_array = PyObject_IsInstance(obj, np_ndarray);
    if (is_array < 0) return -1;
    if (!is_array)
      return arg_error(L, i, PyExc_TypeError, "the kernel writes it, so it must be a NumPy array, not %s", Py_TYPE(obj)->tp_name);
    a->caller = Py_NewRef(obj);
  }
  return np_dtypes[p->dtype] ? wrap_array(L, i, copy, false) : stage_array(L, i, copy);
}

/* After a launch that ran: written values back where convert=True copied. */
static int write_back(Launch *L) {
  for (int i = 0; i < L->kernel->nparams; i++) {
    const ParamInfo *p = &L->kernel->param[i];
    Arg *a = &L->arg[i];
    if (p->kind != TPK_PARAM_KIND_OUTPUT && p->kind != TPK_PARAM_KIND_INOUT) continue;
    if (a->staged)
      tpk_dtype_convert(p->dtype, tpk_buffer_data(a->buf), TPK_F32, a->view.buf, tpk_buffer_bytes(a->buf) / tpk_dtype_size(p->dtype));
    if (a->caller) {
      PyObject *args = PyTuple_Pack(2, a->caller, a->obj), *kwargs = Py_BuildValue("{OO}", s_casting, s_unsafe);
      PyObject *done = args && kwargs ? PyObject_Call(np_copyto, args, kwargs) : NULL;
      Py_XDECREF(args);
      Py_XDECREF(kwargs);
      if (!done) return -1;
      Py_DECREF(done);
    }
  }
  return 0;
}

static int scalar_arg(Launch *L, int i, PyObject *obj) {
  double v = PyFloat_AsDouble(obj);
  if (v == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
    PyErr_Clear();
    return arg_error(L, i, PyExc_TypeError, "it takes a number, not %s", Py_TYPE(obj)->tp_name);
  }
  L->scalars[i] = v;
  return 0;
}

/* tune={"BM": 64} or syms={"K": 4} into the launch, each name mapped to the
 * kernel's own string (which outlives the launch, as a dict's keys need not
 * while the GIL is released). */
static int named_ints(Launch *L, PyObject *mapping, bool tunables) {
  if (!mapping || mapping == Py_None) return 0;
  KernelObject *K = L->kernel;
  const char *what = tunables ? "tunable" : "shape symbol";
  if (!PyDict_Check(mapping)) {
    PyErr_Format(PyExc_TypeError, "kernel '%U': %s takes a dict of names to ints, not %s", K->name, tunables ? "tune" : "syms",
                 Py_TYPE(mapping)->tp_name);
    return -1;
  }
  int n = tunables ? K->ntunables : K->nsymbols;
  const char *const *names = tunables ? K->tunable : K->symbol;
  TpkNamedInt *out = tunables ? L->tunes : L->syms;
  int *count = tunables ? &L->ntunes : &L->nsyms;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(mapping, &pos, &key, &value)) {
    const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    if (!name) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "kernel '%U': %s names are strings, not %s", K->name, what, Py_TYPE(key)->tp_name);
      return -1;
    }
    int at = -1;
    for (int j = 0; j < n && at < 0; j++)
      if (strcmp(names[j], name) == 0) at = j;
    if (at < 0) {
      PyObject *list = PyUnicode_FromString(n ? "it has " : "it has none");
      for (int j = 0; list && j < n; j++) {
        PyObject *more = PyUnicode_FromFormat("%U%s%s", list, j ? ", " : "", names[j]);
        Py_SETREF(list, more);
      }
      if (list) PyErr_Format(TpkArgumentError, "kernel '%U' has no %s '%s'; %U", K->name, what, name, list);
      Py_XDECREF(list);
      return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) {
      if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "kernel '%U': %s %s takes an int, not %s", K->name, what, name, Py_TYPE(value)->tp_name);
      }
      return -1;
    }
    out[(*count)++] = (TpkNamedInt){names[at], v};
  }
  return 0;
}

/* Run the marshalled launch with the GIL released; its report, or NULL. */
static PyObject *launch_run(Launch *L) {
  TpkLaunchResult result;
  TpkLaunch tl = {.args = L->bufs, .scalars = L->scalars, .syms = L->syms, .nsyms = L->nsyms, .tunes = L->tunes,
                  .ntunes = L->ntunes, .result = &result};
  TpkStatus st;
  Py_BEGIN_ALLOW_THREADS
  st = tpk_kernel_launch(L->kernel->k, &tl);
  Py_END_ALLOW_THREADS
  if (st != TPK_OK) return raise_tpk(st);
  return report_new(L->kernel, &result, L->device);
}

/* Parse positional-or-keyword options of a fastcall method: names[i] ->
 * out[i] (borrowed; untouched when absent). */
static bool parse_options(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int n,
                          PyObject *const *names, PyObject **out) {
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, n, nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; k++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int at = -1;
    for (int j = 0; j < n && at < 0; j++)
      if (key == names[j] || PyUnicode_Compare(key, names[j]) == 0) at = j;
    if (at < 0 || (at < nargs)) {
      PyErr_Format(PyExc_TypeError, at < 0 ? "%s() got an unexpected keyword argument '%U'" : "%s() got multiple values for '%U'", fn,
                   key);
      return false;
    }
    out[at] = args[nargs + k];
  }
  return true;
}

/* kernel.launch(args, device=None, tune=None, syms=None) -> Report: the
 * low-level entry (python/README.md): every parameter given, in order. */
static PyObject *kernel_launch(KernelObject *K, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *names[] = {s_args, s_device, s_tune, s_syms}, *opt[4] = {NULL, NULL, NULL, NULL};
  if (!parse_options("launch", args, nargs, kwnames, 4, names, opt)) return NULL;
  if (!opt[0]) return PyErr_Format(PyExc_TypeError, "launch() needs its args: one argument per parameter of '%U'", K->name);
  PyObject *seq = PySequence_Fast(opt[0], "launch() takes a list or tuple of arguments, one per parameter");
  if (!seq) return NULL;
  PyObject *report = NULL;
  Launch L;
  if (!launch_init(&L, K)) goto done;
  if (PySequence_Fast_GET_SIZE(seq) != K->nparams) {
    PyObject *sep = PyUnicode_FromString(", "), *list = sep ? PyUnicode_Join(sep, K->inputs) : NULL;
    PyObject *outs = sep ? PyUnicode_Join(sep, K->outputs) : NULL;
    if (list && outs)
      PyErr_Format(PyExc_TypeError, "kernel '%U' has %d parameters (%U -> %U); launch() got %zd arguments", K->name, K->nparams, list,
                   outs, PySequence_Fast_GET_SIZE(seq));
    Py_XDECREF(sep);
    Py_XDECREF(list);
    Py_XDECREF(outs);
    goto done;
  }
  if (!launch_device(&L, opt[1])) goto done;
  for (int i = 0; i < K->nparams; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    int rc;
    if (K->param[i].kind == TPK_PARAM_KIND_SCALAR) rc = scalar_arg(&L, i, item);
    else if (item == Py_None) rc = arg_error(&L, i, PyExc_TypeError, "launch() takes every array, outputs too (calling the kernel allocates them)");
    else rc = wrap_array(&L, i, item, false);
    if (rc) goto done;
  }
  if (named_ints(&L, opt[2], true) < 0 || named_ints(&L, opt[3], false) < 0) goto done;
  report = launch_run(&L);
done:
  launch_release(&L);
  Py_DECREF(seq);
  return report;
}

/* The shape of output i, from the launch's syms and tunables and the sizes
 * of the arrays given: each shape symbol takes the size of the first
 * dimension, of an input and then of a given output, that is just it. */
static int output_shape(Launch *L, int i, int64_t *shape) {
  KernelObject *K = L->kernel;
  TpkNamedInt named[2 * MAX_SYMBOLS];
  int n = 0;
  for (int j = 0; j < L->nsyms; j++) named[n++] = L->syms[j];
  for (int j = 0; j < L->ntunes; j++) named[n++] = L->tunes[j];
  for (int s = 0; s < K->nsymbols; s++) {
    bool bound = false;
    for (int j = 0; j < L->nsyms && !bound; j++) bound = strcmp(L->syms[j].name, K->symbol[s]) == 0;
    for (int pass = 0; pass < 2 && !bound; pass++)
      for (int j = 0; j < K->nparams && !bound; j++) {
        if (!L->arg[j].buf || (pass == 0) != (K->param[j].kind != TPK_PARAM_KIND_OUTPUT)) continue;
        for (int d = 0; d < K->param[j].rank && !bound; d++)
          if (strcmp(tpk_kernel_param_dim(K->k, j, d), K->symbol[s]) == 0) {
            named[n++] = (TpkNamedInt){K->symbol[s], tpk_buffer_shape(L->arg[j].buf)[d]};
            bound = true;
          }
      }
  }
  if (tpk_kernel_param_shape(K->k, i, named, n, shape) == TPK_OK) return 0;
  PyErr_Format(TpkArgumentError, "%s: give the output, or the symbol's size in syms={...}", tpk_last_error());
  return -1;
}

/* A new array for output i (float32 for bf16 and f8 with convert=True). */
static int allocate_output(Launch *L, int i) {
  const ParamInfo *p = &L->kernel->param[i];
  Arg *a = &L->arg[i];
  if (!np_dtypes[p->dtype] && !L->convert)
    return arg_error(L, i, PyExc_TypeError,
                     "NumPy has no %s: give the output (a torch %s tensor), or pass convert=True to get it as float32",
                     tpk_dtype_name(p->dtype), tpk_dtype_name(p->dtype));
  int64_t shape[TPK_MAX_DIMS];
  if (output_shape(L, i, shape) < 0) return -1;
  PyObject *dims = PyTuple_New(p->rank);
  for (int d = 0; dims && d < p->rank; d++) {
    PyObject *v = PyLong_FromLongLong(shape[d]);
    if (!v) Py_CLEAR(dims);
    else PyTuple_SET_ITEM(dims, d, v);
  }
  if (!dims) return -1;
  PyObject *dtype = np_dtypes[p->dtype] ? np_dtypes[p->dtype] : np_dtypes[TPK_F32];
  PyObject *array = PyObject_CallFunctionObjArgs(np_empty, dims, dtype, NULL);
  Py_DECREF(dims);
  if (!array) return -1;
  int rc = np_dtypes[p->dtype] ? wrap_array(L, i, array, false) : stage_array(L, i, array);
  a->obj = array;
  return rc;
}

/* kernel(*args, device=None, tune=None, syms=None, convert=False, **params):
 * the NumPy call. Arguments bind to parameters in declaration order (inputs,
 * then outputs) or by name; outputs not given are allocated. Returns the
 * outputs: None, one array, or a tuple. */
static PyObject *kernel_call_given(KernelObject *K, PyObject *args, PyObject *kwargs, PyObject **given);

static PyObject *kernel_call(KernelObject *K, PyObject *args, PyObject *kwargs) {
  PyObject *small[SMALL_PARAMS] = {NULL}, **given = small;
  if (K->nparams > SMALL_PARAMS && !(given = PyMem_Calloc((size_t)K->nparams, sizeof *given))) return PyErr_NoMemory();
  PyObject *outputs = kernel_call_given(K, args, kwargs, given);
  if (given != small) PyMem_Free(given);
  return outputs;
}

/* kernel_call with given[] zeroed, one slot per parameter. */
static PyObject *kernel_call_given(KernelObject *K, PyObject *args, PyObject *kwargs, PyObject **given) {
  PyObject *device = NULL, *tune = NULL, *syms = NULL;
  int convert = 0;
  Py_ssize_t npos = PyTuple_GET_SIZE(args);
  if (npos > K->nparams)
    return PyErr_Format(PyExc_TypeError, "%U() takes at most %d arguments (%zd given)", K->name, K->nparams, npos);
  for (Py_ssize_t i = 0; i < npos; i++) given[i] = PyTuple_GET_ITEM(args, i);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    if (PyUnicode_Compare(key, s_device) == 0) device = value;
    else if (PyUnicode_Compare(key, s_tune) == 0) tune = value;
    else if (PyUnicode_Compare(key, s_syms) == 0) syms = value;
    else if (PyUnicode_Compare(key, s_convert) == 0) {
      if ((convert = PyObject_IsTrue(value)) < 0) return NULL;
    } else {
      int at = -1;
      for (int i = 0; i < K->nparams && at < 0; i++)
        if (PyUnicode_Compare(key, K->param[i].name) == 0) at = i;
      if (at < 0) {
        PyObject *sep = PyUnicode_FromString(", "), *list = sep ? PyUnicode_Join(sep, K->inputs) : NULL;
        PyObject *outs = sep ? PyUnicode_Join(sep, K->outputs) : NULL;
        if (list && outs)
          PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%S'; its parameters are %U -> %U", K->name, key,
                       list, outs);
        Py_XDECREF(sep);
        Py_XDECREF(list);
        Py_XDECREF(outs);
        return NULL;
      }
      if (given[at]) return PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%U'", K->name, K->param[at].name);
      given[at] = value;
    }
  }
  bool allocates = false;
  for (int i = 0; i < K->nparams; i++) {
    if (given[i] == Py_None && K->param[i].kind == TPK_PARAM_KIND_OUTPUT) given[i] = NULL;
    if (given[i]) continue;
    if (K->param[i].kind != TPK_PARAM_KIND_OUTPUT)
      return PyErr_Format(PyExc_TypeError, "%U() missing argument '%U' (%U)", K->name, K->param[i].name, K->param[i].type_text);
    allocates = true;
  }
  if ((allocates || convert) && !numpy_ready()) return NULL;

  PyObject *outputs = NULL;
  Launch L;
  if (!launch_init(&L, K)) goto done;
  L.convert = convert;
  if (!launch_device(&L, device)) goto done;
  for (int i = 0; i < K->nparams; i++) {
    if (!given[i]) continue;
    int rc = K->param[i].kind == TPK_PARAM_KIND_SCALAR ? scalar_arg(&L, i, given[i]) : wrap_array(&L, i, given[i], convert);
    if (rc == 1) rc = convert_arg(&L, i, given[i]);
    if (rc) goto done;
  }
  if (named_ints(&L, tune, true) < 0 || named_ints(&L, syms, false) < 0) goto done;
  for (int i = 0; i < K->nparams; i++)
    if (!given[i] && allocate_output(&L, i) < 0) goto done;
  PyObject *report = launch_run(&L);
  if (!report) goto done;
  Py_XSETREF(K->last_report, report);
  if (write_back(&L) < 0) goto done;

  int nout = (int)PyTuple_GET_SIZE(K->outputs), o = 0;
  if (nout != 1 && !(outputs = PyTuple_New(nout))) goto done;
  for (int i = 0; i < K->nparams; i++) {
    if (K->param[i].kind != TPK_PARAM_KIND_OUTPUT) continue;
    PyObject *out = Py_NewRef(given[i] ? given[i] : L.arg[i].obj);
    if (nout == 1) outputs = out;
    else PyTuple_SET_ITEM(outputs, o++, out);
  }
  if (nout == 0) Py_SETREF(outputs, Py_NewRef(Py_None));
done:
  launch_release(&L);
  return outputs;
}

/* ---- programs ------------------------------------------------------------------- */

typedef struct ProgramObject {
  PyObject_HEAD
  TpkProgram *prog;
  PyObject *name;
  PyObject *weakrefs;
} ProgramObject;

static void program_dealloc(ProgramObject *P) {
  if (P->weakrefs) PyObject_ClearWeakRefs((PyObject *)P);
  if (P->prog) tpk_program_destroy(P->prog);
  Py_XDECREF(P->name);
  PyObject_Free(P);
}

static PyObject *program_new(TpkProgram *prog, PyObject *name) {
  ProgramObject *P = PyObject_New(ProgramObject, &ProgramType);
  if (!P) {
    tpk_program_destroy(prog);
    return NULL;
  }
  P->prog = prog;
  P->name = Py_NewRef(name);
  P->weakrefs = NULL;
  return (PyObject *)P;
}

static PyObject *program_kernel(ProgramObject *P, PyObject *name) {
  const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  if (!text) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "a kernel's name is a str");
  TpkKernel *k;
  TpkStatus st = tpk_program_kernel(P->prog, text, &k);
  if (st != TPK_OK) return raise_tpk(st);
  return kernel_new(k, text, (PyObject *)P);
}

static PyObject *program_kernel_names(ProgramObject *P, void *closure) {
  (void)closure;
  int n = tpk_program_kernel_count(P->prog);
  PyObject *names = PyTuple_New(n);
  for (int i = 0; names && i < n; i++) {
    PyObject *s = PyUnicode_FromString(tpk_program_kernel_name(P->prog, i));
    if (!s) Py_CLEAR(names);
    else PyTuple_SET_ITEM(names, i, s);
  }
  return names;
}

static PyObject *program_repr(ProgramObject *P) { return PyUnicode_FromFormat("<tpk._C.Program %R>", P->name); }

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f)

/* ---- graphs (tpk.h, "Graphs") ------------------------------------------------------
 *
 * A Graph is built with input(), op() (ATen ops by name, arguments as
 * ATen's: tensors are Values, numbers, None, strings, lists, dtypes) and
 * call() of kernels; output() marks results; compile() gives the graph's
 * kernel, launched like any other. A symbolic size is a Sym ("B*S"): in
 * shapes (a str there too) and for SymInt arguments. A Value holds its
 * graph, which holds its TpkGraph. */

typedef struct GraphObject {
  PyObject_HEAD
  TpkGraph *g;
  PyObject *name;
} GraphObject;

typedef struct ValueObject {
  PyObject_HEAD
  GraphObject *graph;
  int id;
} ValueObject;

typedef struct SymObject {
  PyObject_HEAD
  PyObject *text;
} SymObject;

static PyTypeObject GraphType, ValueType, SymType;

static void graph_dealloc(GraphObject *G) {
  if (G->g) tpk_graph_destroy(G->g);
  Py_XDECREF(G->name);
  PyObject_Free(G);
}

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *KEYWORDS[] = {"name", NULL};
  const char *name = "graph";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|s:Graph", KEYWORDS, &name)) return NULL;
  TpkContext *ctx = context();
  if (!ctx) return NULL;
  TpkGraph *g;
  TpkStatus st = tpk_graph_create(ctx, name, &g);
  if (st != TPK_OK) return raise_tpk(st);
  GraphObject *G = (GraphObject *)type->tp_alloc(type, 0);
  if (!G || !(G->name = PyUnicode_FromString(name))) {
    tpk_graph_destroy(g);
    Py_XDECREF(G);
    return NULL;
  }
  G->g = g;
  return (PyObject *)G;
}

static PyObject *value_new(GraphObject *G, int id) {
  if (id < 0) return Py_NewRef(Py_None);
  ValueObject *V = PyObject_New(ValueObject, &ValueType);
  if (!V) return NULL;
  V->graph = (GraphObject *)Py_NewRef((PyObject *)G);
  V->id = id;
  return (PyObject *)V;
}

static void value_dealloc(ValueObject *V) {
  Py_XDECREF(V->graph);
  PyObject_Free(V);
}

static PyObject *value_dtype(ValueObject *V, void *unused) {
  (void)unused;
  return PyUnicode_FromString(tpk_dtype_name(tpk_graph_value_dtype(V->graph->g, V->id)));
}

/* (4, 'B*S'): constant dims as ints, symbolic ones as their text */
static PyObject *value_shape(ValueObject *V, void *unused) {
  (void)unused;
  int rank = tpk_graph_value_rank(V->graph->g, V->id);
  PyObject *shape = PyTuple_New(rank < 0 ? 0 : rank);
  for (int d = 0; shape && d < rank; d++) {
    const char *text = tpk_graph_value_dim(V->graph->g, V->id, d);
    char *end;
    long long v = text ? strtoll(text, &end, 10) : 0;
    PyObject *x = !text ? PyErr_NoMemory() : *text && !*end ? PyLong_FromLongLong(v) : PyUnicode_FromString(text);
    if (!x) Py_CLEAR(shape);
    else PyTuple_SET_ITEM(shape, d, x);
  }
  return shape;
}

static PyObject *value_repr(ValueObject *V) {
  PyObject *shape = value_shape(V, NULL), *dtype = value_dtype(V, NULL);
  PyObject *r = shape && dtype ? PyUnicode_FromFormat("<tpk._C.Value %d: %U%R>", V->id, dtype, shape) : NULL;
  Py_XDECREF(shape);
  Py_XDECREF(dtype);
  return r;
}

static PyObject *sym_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *KEYWORDS[] = {"text", NULL};
  PyObject *text;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U:Sym", KEYWORDS, &text)) return NULL;
  SymObject *S = (SymObject *)type->tp_alloc(type, 0);
  if (S) S->text = Py_NewRef(text);
  return (PyObject *)S;
}

static void sym_dealloc(SymObject *S) {
  Py_XDECREF(S->text);
  Py_TYPE(S)->tp_free((PyObject *)S);
}

static PyObject *sym_repr(SymObject *S) { return PyUnicode_FromFormat("Sym(%R)", S->text); }

static PyObject *torch_int64; /* torch.int64: i32 in graphs (tpk has no int64) */

/* torch.int64 once torch is imported, else NULL (no exception). */
static PyObject *int64_dtype(void) {
  if (torch_int64 || !torch_tensor()) return torch_int64;
  PyObject *torch = PyImport_ImportModule("torch");
  torch_int64 = torch ? PyObject_GetAttrString(torch, "int64") : NULL;
  Py_XDECREF(torch);
  PyErr_Clear();
  return torch_int64;
}

/* A dtype: a tpk name ("bf16"), a NumPy dtype or a torch dtype; int64 is
 * i32 (ATen's index and integer results are i32 in tpk's graphs). */
static bool dtype_from(PyObject *o, TpkDType *out) {
  if (PyUnicode_Check(o)) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) return false;
    *out = tpk_dtype_from_name(s, (size_t)n);
    if (*out != TPK_DTYPE_COUNT) return true;
    PyErr_Format(PyExc_ValueError, "'%s' is not a tpk dtype (f32, f16, bf16, f8e4m3, f8e5m2, i32, i16, i8, u8, bool)", s);
    return false;
  }
  PyObject *i64 = int64_dtype();
  for (int t = 0; t < TPK_DTYPE_COUNT; t++)
    if (torch_dtypes[t] && o == torch_dtypes[t]) return *out = (TpkDType)t, true;
  if (i64 && o == i64) return *out = TPK_I32, true;
  if (numpy_ready()) {
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *dtype = np ? PyObject_GetAttrString(np, "dtype") : NULL;
    PyObject *d = dtype && o != Py_None && !PyLong_Check(o) && !PyFloat_Check(o) ? PyObject_CallOneArg(dtype, o) : NULL;
    Py_XDECREF(np);
    Py_XDECREF(dtype);
    if (!d) PyErr_Clear();
    for (int t = 0; d && t < TPK_DTYPE_COUNT; t++) {
      int eq = np_dtypes[t] ? PyObject_RichCompareBool(d, np_dtypes[t], Py_EQ) : 0;
      if (eq > 0) {
        Py_DECREF(d);
        return *out = (TpkDType)t, true;
      }
      if (eq < 0) PyErr_Clear();
    }
    Py_XDECREF(d);
  }
  PyErr_Format(PyExc_TypeError, "%R is not a dtype tpk knows", o);
  return false;
}

/* A torch dtype, a NumPy dtype or NumPy scalar type (np.float32). */
static bool is_dtype_object(PyObject *o) {
  PyObject *i64 = int64_dtype();
  for (int t = 0; t < TPK_DTYPE_COUNT; t++)
    if (torch_dtypes[t] && o == torch_dtypes[t]) return true;
  if (i64 && o == i64) return true;
  if (PyType_Check(o)) return strncmp(((PyTypeObject *)o)->tp_name, "numpy.", 6) == 0;
  return strncmp(Py_TYPE(o)->tp_name, "numpy.dtype", 11) == 0;
}

/* Memory an op's arguments borrow until the call returns. */
typedef struct ArgScratch {
  void *blocks[64];
  int n;
} ArgScratch;

static void *scratch_alloc(ArgScratch *s, size_t bytes) {
  if (s->n == 64) return PyErr_Format(PyExc_ValueError, "too many list arguments");
  void *p = PyMem_Calloc(1, bytes ? bytes : 1);
  if (!p) return PyErr_NoMemory();
  return s->blocks[s->n++] = p;
}

static void scratch_free(ArgScratch *s) {
  for (int i = 0; i < s->n; i++) PyMem_Free(s->blocks[i]);
  s->n = 0;
}

static bool sym_text(PyObject *o, const char **text) {
  *text = PyUnicode_AsUTF8(((SymObject *)o)->text);
  return *text != NULL;
}

/* One Python argument as a TpkArg (strings and lists borrowed from o). */
static bool graph_arg(GraphObject *G, PyObject *o, TpkArg *a, ArgScratch *s) {
  memset(a, 0, sizeof *a);
  if (o == Py_None) {
    a->kind = TPK_ARG_NONE;
  } else if (PyObject_TypeCheck(o, &ValueType)) {
    if (((ValueObject *)o)->graph != G) return PyErr_Format(PyExc_ValueError, "a value of another graph"), false;
    a->kind = TPK_ARG_VALUE;
    a->value = ((ValueObject *)o)->id;
  } else if (PyBool_Check(o)) {
    a->kind = TPK_ARG_BOOL;
    a->i = o == Py_True;
  } else if (PyLong_Check(o)) {
    a->kind = TPK_ARG_INT;
    a->i = PyLong_AsLongLong(o);
    if (a->i == -1 && PyErr_Occurred()) return false;
  } else if (PyFloat_Check(o)) {
    a->kind = TPK_ARG_FLOAT;
    a->f = PyFloat_AS_DOUBLE(o);
  } else if (PyObject_TypeCheck(o, &SymType)) {
    a->kind = TPK_ARG_INT;
    if (!sym_text(o, &a->sym)) return false;
  } else if (PyUnicode_Check(o)) {
    a->kind = TPK_ARG_STR;
    if (!(a->str = PyUnicode_AsUTF8(o))) return false;
  } else if (PyList_Check(o) || PyTuple_Check(o)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject **items = PySequence_Fast_ITEMS(o);
    bool values = n > 0 && PyObject_TypeCheck(items[0], &ValueType);
    a->kind = values ? TPK_ARG_VALUES : TPK_ARG_INTS;
    a->n = (int)n;
    if (values) {
      int *ids = scratch_alloc(s, (size_t)n * sizeof *ids);
      if (!ids) return false;
      for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(items[i], &ValueType) || ((ValueObject *)items[i])->graph != G)
          return PyErr_Format(PyExc_TypeError, "a list of tensors holds %R, not a value of this graph", items[i]), false;
        ids[i] = ((ValueObject *)items[i])->id;
      }
      a->values = ids;
    } else {
      int64_t *ints = scratch_alloc(s, (size_t)n * sizeof *ints);
      const char **syms = scratch_alloc(s, (size_t)n * sizeof *syms);
      if (!ints || !syms) return false;
      bool any_sym = false;
      for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_TypeCheck(items[i], &SymType)) {
          if (!sym_text(items[i], &syms[i])) return false;
          any_sym = true;
        } else if (PyLong_Check(items[i])) {
          ints[i] = PyLong_AsLongLong(items[i]);
          if (ints[i] == -1 && PyErr_Occurred()) return false;
        } else {
          return PyErr_Format(PyExc_TypeError, "a list argument holds %R: lists are of ints (and Syms) or of values", items[i]), false;
        }
      }
      a->ints = ints;
      a->syms = any_sym ? syms : NULL;
    }
  } else if (is_dtype_object(o)) {
    a->kind = TPK_ARG_DTYPE;
    if (!dtype_from(o, &a->dtype)) return false;
  } else {
    return PyErr_Format(PyExc_TypeError, "%R (a %.80s) is not an argument a graph op takes", o, Py_TYPE(o)->tp_name), false;
  }
  return true;
}

/* The arguments of op() and call(): positional, then keywords by name. */
static bool graph_args(GraphObject *G, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, TpkArg *out, int max, int *n,
                       ArgScratch *s) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw > max) return PyErr_Format(PyExc_ValueError, "more than %d arguments", max), false;
  for (Py_ssize_t i = 0; i < nargs + nkw; i++) {
    if (!graph_arg(G, args[i], &out[i], s)) return false;
    if (i >= nargs && !(out[i].name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i - nargs)))) return false;
  }
  *n = (int)(nargs + nkw);
  return true;
}

static PyObject *results_object(GraphObject *G, const int *ids, int n) {
  if (n == 1) return value_new(G, ids[0]);
  PyObject *t = PyTuple_New(n);
  for (int i = 0; t && i < n; i++) {
    PyObject *v = value_new(G, ids[i]);
    if (!v) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

enum { MAX_GRAPH_ARGS = 32, MAX_GRAPH_RESULTS = 64 };

/* op(name, *args, **kwargs) -> Value, or a tuple of them (None where ATen
 * gives no tensor) */
static PyObject *graph_op(GraphObject *G, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  if (nargs < 1 || !PyUnicode_Check(args[0])) return PyErr_Format(PyExc_TypeError, "op(name, *args, **kwargs): name is a str");
  const char *name = PyUnicode_AsUTF8(args[0]);
  TpkArg a[MAX_GRAPH_ARGS];
  int na, ids[MAX_GRAPH_RESULTS], n = 0;
  ArgScratch s = {0};
  if (!name || !graph_args(G, args + 1, nargs - 1, kwnames, a, MAX_GRAPH_ARGS, &na, &s)) {
    scratch_free(&s);
    return NULL;
  }
  TpkStatus st = tpk_graph_op(G->g, name, a, na, ids, MAX_GRAPH_RESULTS, &n);
  scratch_free(&s);
  if (st != TPK_OK) return raise_tpk(st);
  return results_object(G, ids, n);
}

/* call(kernel, *args) -> Value or a tuple: the kernel's out and inout
 * parameters */
static PyObject *graph_call(GraphObject *G, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  if (nargs < 1 || !PyObject_TypeCheck(args[0], &KernelType))
    return PyErr_Format(PyExc_TypeError, "call(kernel, *args): kernel is a tpk.Kernel");
  TpkArg a[MAX_GRAPH_ARGS];
  int na, ids[MAX_GRAPH_RESULTS], n = 0;
  ArgScratch s = {0};
  if (!graph_args(G, args + 1, nargs - 1, kwnames, a, MAX_GRAPH_ARGS, &na, &s)) {
    scratch_free(&s);
    return NULL;
  }
  TpkStatus st = tpk_graph_call(G->g, ((KernelObject *)args[0])->k, a, na, ids, MAX_GRAPH_RESULTS, &n);
  scratch_free(&s);
  if (st != TPK_OK) return raise_tpk(st);
  return results_object(G, ids, n);
}

/* input(dtype, shape) -> Value; shape entries are ints or size texts ("B", "B*S") */
static PyObject *graph_input(GraphObject *G, PyObject *args, PyObject *kwargs) {
  static char *KEYWORDS[] = {"dtype", "shape", NULL};
  PyObject *dtype, *shape;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:input", KEYWORDS, &dtype, &shape)) return NULL;
  TpkDType dt;
  if (!dtype_from(dtype, &dt)) return NULL;
  PyObject *fast = PySequence_Fast(shape, "shape must be a sequence of sizes");
  if (!fast) return NULL;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(fast);
  char texts[8][64];
  const char *dims[8];
  if (rank > 8) {
    Py_DECREF(fast);
    return PyErr_Format(PyExc_ValueError, "rank %zd is more than 8", rank);
  }
  for (Py_ssize_t i = 0; i < rank; i++) {
    PyObject *d = PySequence_Fast_GET_ITEM(fast, i);
    const char *text = NULL;
    if (PyObject_TypeCheck(d, &SymType)) sym_text(d, &text);
    else if (PyUnicode_Check(d)) text = PyUnicode_AsUTF8(d);
    if (text) snprintf(texts[i], sizeof texts[i], "%s", text);
    else if (PyLong_Check(d)) snprintf(texts[i], sizeof texts[i], "%lld", PyLong_AsLongLong(d));
    else if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "a size is an int or a str, not %R", d);
    if (PyErr_Occurred()) {
      Py_DECREF(fast);
      return NULL;
    }
    dims[i] = texts[i];
  }
  Py_DECREF(fast);
  int id;
  TpkStatus st = tpk_graph_input(G->g, dt, (int)rank, dims, &id);
  if (st != TPK_OK) return raise_tpk(st);
  return value_new(G, id);
}

/* output(*values): the graph's next results */
static PyObject *graph_output(GraphObject *G, PyObject *args) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
    PyObject *v = PyTuple_GET_ITEM(args, i);
    if (!PyObject_TypeCheck(v, &ValueType) || ((ValueObject *)v)->graph != G)
      return PyErr_Format(PyExc_TypeError, "output(*values): %R is not a value of this graph", v);
    TpkStatus st = tpk_graph_output(G->g, ((ValueObject *)v)->id);
    if (st != TPK_OK) return raise_tpk(st);
  }
  Py_RETURN_NONE;
}

static PyObject *graph_ir(GraphObject *G, PyObject *unused) {
  (void)unused;
  return PyUnicode_FromString(tpk_graph_ir(G->g));
}

/* compile() -> Kernel: the graph's one kernel (its inputs, then its outputs) */
static PyObject *graph_compile(GraphObject *G, PyObject *unused) {
  (void)unused;
  TpkProgram *prog;
  TpkStatus st = tpk_graph_compile(G->g, &prog);
  if (st != TPK_OK) return raise_tpk(st);
  PyObject *program = program_new(prog, G->name);
  if (!program) return NULL;
  PyObject *kernel = program_kernel((ProgramObject *)program, G->name);
  Py_DECREF(program);
  return kernel;
}

/* The ATen ops graphs know, in table order. */
static PyObject *graph_ops(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  int n = tpk_graph_op_count();
  PyObject *t = PyTuple_New(n);
  for (int i = 0; t && i < n; i++) {
    PyObject *s = PyUnicode_FromString(tpk_graph_op_name(i));
    if (!s) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

/* wait_compiles(): tpk_context_wait_compiles, the GIL released (benchmarks:
 * the background cc builds done, later launches run their code). */
static PyObject *wait_compiles(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  TpkContext *ctx = context();
  if (!ctx) return NULL;
  Py_BEGIN_ALLOW_THREADS
  tpk_context_wait_compiles(ctx);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* graph_op_known(name) -> bool: tpk_graph_op_known */
static PyObject *graph_op_known(PyObject *module, PyObject *name) {
  (void)module;
  const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  if (!text) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "an op's name is a str, not %.80s", Py_TYPE(name)->tp_name);
  return PyBool_FromLong(tpk_graph_op_known(text));
}

/* cache_stats() -> dict: tpk_cache_stats of the process's context, and
 * tpk_context_compiler_runs. */
static PyObject *cache_stats(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  TpkContext *ctx = context();
  if (!ctx) return NULL;
  TpkCacheStats st;
  TpkStatus rc = tpk_cache_stats(ctx, &st);
  if (rc != TPK_OK) return raise_tpk(rc);
  static const char *const KINDS[] = {[TPK_UNIT_KERNEL] = "kernel", [TPK_UNIT_EAGER] = "eager", [TPK_UNIT_GRAPH] = "graph"};
  PyObject *units = PyDict_New(), *folder = PyDict_New();
  for (int k = 0; units && folder && k < 3; k++) {
    PyObject *mine = Py_BuildValue("{sLsLsL}", "hits", (long long)st.unit_hits[k], "misses", (long long)st.unit_misses[k], "loads",
                                   (long long)st.unit_loads[k]);
    PyObject *all = Py_BuildValue("{sLsL}", "hits", (long long)st.folder_unit_hits[k], "misses", (long long)st.folder_unit_misses[k]);
    if (!mine || !all || PyDict_SetItemString(units, KINDS[k], mine) < 0 || PyDict_SetItemString(folder, KINDS[k], all) < 0) {
      Py_CLEAR(units);
    }
    Py_XDECREF(mine);
    Py_XDECREF(all);
  }
  PyObject *d = units && folder
                    ? Py_BuildValue("{szsOszszsLsLsLsLsisisisOsLsOsisLsL}", "path", st.path, "enabled", st.enabled ? Py_True : Py_False,
                                    "note", st.note, "key_file", st.key_file, "entries", (long long)st.entries, "bytes",
                                    (long long)st.bytes, "max_bytes", (long long)st.max_bytes, "build_folders",
                                    (long long)st.build_folders, "hits", st.hits, "misses", st.misses, "rejected", st.rejected,
                                    "units", units, "units_held", (long long)st.units, "folder_units", folder, "compiler_runs",
                                    tpk_context_compiler_runs(ctx), "emitted", (long long)st.emitted, "lowered",
                                    (long long)st.lowered)
                    : NULL;
  Py_XDECREF(units);
  Py_XDECREF(folder);
  return d;
}

static PyMethodDef GRAPH_METHODS[] = {
    {"input", (PyCFunction)(void (*)(void))graph_input, METH_VARARGS | METH_KEYWORDS,
     "input(dtype, shape) -> Value: a new input; sizes are ints or texts of shape symbols ('B', 'B*S')"},
    {"op", FASTCALL(graph_op), METH_FASTCALL | METH_KEYWORDS,
     "op(name, *args, **kwargs) -> Value or tuple: an ATen op ('add', 'aten::add.Tensor'), arguments as ATen's"},
    {"call", FASTCALL(graph_call), METH_FASTCALL | METH_KEYWORDS, "call(kernel, *args) -> Value or tuple: a call of a kernel"},
    {"output", (PyCFunction)graph_output, METH_VARARGS, "output(*values): the graph's next results"},
    {"ir", (PyCFunction)graph_ir, METH_NOARGS, "ir() -> str: the graph's IR in the text form"},
    {"compile", (PyCFunction)graph_compile, METH_NOARGS, "compile() -> Kernel: the graph as one kernel (inputs, then outputs)"},
    {NULL},
};

static PyMemberDef GRAPH_MEMBERS[] = {
    {"name", T_OBJECT_EX, offsetof(GraphObject, name), READONLY, "the graph's name"},
    {NULL},
};

static PyTypeObject GraphType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk._C.Graph",
    .tp_doc = "Graph(name='graph'): a graph of ATen ops and kernel calls, built into tpk's IR.",
    .tp_basicsize = sizeof(GraphObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = graph_new,
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_methods = GRAPH_METHODS,
    .tp_members = GRAPH_MEMBERS,
};

static PyGetSetDef VALUE_GETSET[] = {
    {"dtype", (getter)value_dtype, NULL, "the value's dtype, a tpk name ('f32')", NULL},
    {"shape", (getter)value_shape, NULL, "its shape: ints, and texts for symbolic sizes", NULL},
    {NULL},
};

static PyMemberDef VALUE_MEMBERS[] = {
    {"id", T_INT, offsetof(ValueObject, id), READONLY, "the value's id in its graph"},
    {"graph", T_OBJECT_EX, offsetof(ValueObject, graph), READONLY, "its graph"},
    {NULL},
};

static PyTypeObject ValueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk._C.Value",
    .tp_doc = "A tensor value of a graph.",
    .tp_basicsize = sizeof(ValueObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)value_dealloc,
    .tp_repr = (reprfunc)value_repr,
    .tp_getset = VALUE_GETSET,
    .tp_members = VALUE_MEMBERS,
};

static PyMemberDef SYM_MEMBERS[] = {
    {"text", T_OBJECT_EX, offsetof(SymObject, text), READONLY, "the size's text ('B*S')"},
    {NULL},
};

static PyTypeObject SymType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk._C.Sym",
    .tp_doc = "Sym(text): a symbolic size ('S', 'B*S') given for a SymInt argument.",
    .tp_basicsize = sizeof(SymObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = sym_new,
    .tp_dealloc = (destructor)sym_dealloc,
    .tp_repr = (reprfunc)sym_repr,
    .tp_members = SYM_MEMBERS,
};

/* ---- module functions ------------------------------------------------------------ */

static PyObject *load(PyObject *module, PyObject *path) {
  (void)module;
  PyObject *bytes;
  if (!PyUnicode_FSConverter(path, &bytes)) return NULL;
  TpkContext *ctx = context();
  TpkProgram *prog = NULL;
  TpkStatus st = ctx ? tpk_program_load_file(ctx, PyBytes_AS_STRING(bytes), &prog) : TPK_OK;
  PyObject *name = ctx ? PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(bytes)) : NULL;
  Py_DECREF(bytes);
  if (st != TPK_OK) {
    Py_XDECREF(name);
    return raise_tpk(st);
  }
  PyObject *program = name ? program_new(prog, name) : NULL;
  if (!name && prog) tpk_program_destroy(prog);
  Py_XDECREF(name);
  return program;
}

static PyObject *load_source(PyObject *module, PyObject *args, PyObject *kwargs) {
  (void)module;
  static char *KEYWORDS[] = {"text", "name", NULL};
  const char *text;
  Py_ssize_t len;
  PyObject *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|U:load_source", KEYWORDS, &text, &len, &name)) return NULL;
  const char *label = name ? PyUnicode_AsUTF8(name) : "<source>";
  TpkContext *ctx = context();
  if (!label || !ctx) return NULL;
  TpkProgram *prog;
  TpkStatus st = tpk_program_load_source(ctx, label, text, (size_t)len, &prog);
  if (st != TPK_OK) return raise_tpk(st);
  PyObject *pname = name ? Py_NewRef(name) : PyUnicode_FromString(label);
  PyObject *program = pname ? program_new(prog, pname) : NULL;
  if (!pname) tpk_program_destroy(prog);
  Py_XDECREF(pname);
  return program;
}

static PyObject *std_kernel(PyObject *module, PyObject *name) {
  (void)module;
  const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  if (!text) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "a kernel's name is a str");
  TpkContext *ctx = context();
  if (!ctx) return NULL;
  TpkKernel *k;
  TpkStatus st = tpk_std_kernel(ctx, text, &k);
  if (st != TPK_OK) return raise_tpk(st);
  return kernel_new(k, text, NULL);
}

/* ((kernel, file), ...) of the standard library */
static PyObject *std_kernels(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  int n = tpk_std_kernel_count();
  PyObject *list = PyTuple_New(n);
  for (int i = 0; list && i < n; i++) {
    PyObject *pair = Py_BuildValue("(ss)", tpk_std_kernel_name(i), tpk_std_kernel_file(i));
    if (!pair) Py_CLEAR(list);
    else PyTuple_SET_ITEM(list, i, pair);
  }
  return list;
}

static PyObject *open_device(PyObject *module, PyObject *name) {
  (void)module;
  return device_of(name) ? Py_NewRef(name) : NULL;
}

/* The process's context, for tpk's other extensions (the torch device's
 * shim), which must share it: kernels, streams and the cache are one. */
static PyObject *context_capsule(PyObject *module, PyObject *unused) {
  (void)module, (void)unused;
  TpkContext *ctx = context();
  return ctx ? PyCapsule_New(ctx, "tpk._C.context", NULL) : NULL;
}

/* ---- types and the module --------------------------------------------------------- */

static PyMemberDef KERNEL_MEMBERS[] = {
    {"name", T_OBJECT_EX, offsetof(KernelObject, name), READONLY, "the kernel's name"},
    {"params", T_OBJECT_EX, offsetof(KernelObject, params), READONLY, "every parameter (tpk.Param), in declaration order"},
    {"inputs", T_OBJECT_EX, offsetof(KernelObject, inputs), READONLY, "names of the parameters before `->`: in, inout, scalars"},
    {"outputs", T_OBJECT_EX, offsetof(KernelObject, outputs), READONLY, "names of the parameters after `->`"},
    {"symbols", T_OBJECT_EX, offsetof(KernelObject, symbols), READONLY, "the shape symbols, in order of first appearance"},
    {"tunables", T_OBJECT_EX, offsetof(KernelObject, tunables), READONLY, "the tunables (tpk.Tunable)"},
    {"program", T_OBJECT, offsetof(KernelObject, owner), READONLY, "the tpk._C.Program it belongs to (None: the standard library)"},
    {"last_report", T_OBJECT, offsetof(KernelObject, last_report), READONLY,
     "the report of the latest kernel(...) call, from any thread (None before one)"},
    {NULL},
};

/* The backward kernel's name (tpk_kernel_backward), or None. */
static PyObject *kernel_backward(KernelObject *K, void *unused) {
  (void)unused;
  const char *name = tpk_kernel_backward(K->k);
  return name ? PyUnicode_FromString(name) : Py_NewRef(Py_None);
}

/* The TpkKernel's address, for the tpk device's shim (tpk/_torch_device.cpp),
 * which calls the kernel on the device's stream: valid while K lives. */
static PyObject *kernel_handle(KernelObject *K, void *unused) {
  (void)unused;
  return PyLong_FromVoidPtr(K->k);
}

static PyGetSetDef KERNEL_GETSET[] = {
    {"backward", (getter)kernel_backward, NULL, "the name of the kernel's backward kernel in its program, or None", NULL},
    {"_handle", (getter)kernel_handle, NULL, "the TpkKernel's address (for the tpk device's shim), valid while the kernel lives", NULL},
    {NULL},
};

static PyMethodDef KERNEL_METHODS[] = {
    {"launch", FASTCALL(kernel_launch), METH_FASTCALL | METH_KEYWORDS,
     "launch(args, device=None, tune=None, syms=None) -> Report\n\nRun the kernel on args, one per parameter in declaration "
     "order, outputs too (written in place)."},
    {NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk.Kernel",
    .tp_doc = "A kernel of a program: call it on NumPy arrays, or launch it.",
    .tp_basicsize = sizeof(KernelObject),
    .tp_weaklistoffset = offsetof(KernelObject, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_repr = (reprfunc)kernel_repr,
    .tp_call = (ternaryfunc)kernel_call,
    .tp_members = KERNEL_MEMBERS,
    .tp_getset = KERNEL_GETSET,
    .tp_methods = KERNEL_METHODS,
};

#define SIM_NUMBER(name, i, doc) {name, (getter)report_sim_number, NULL, doc, (void *)(intptr_t)(i)}
static PyGetSetDef REPORT_GETSET[] = {
    {"tier", (getter)report_tier, NULL, "the code that ran: 'aot', 'tcc', 'cc' or 'cache'", NULL},
    {"tunes", (getter)report_tunes, NULL, "the tunables it ran with, {'BM': 16}", NULL},
    {"tunes_from", (getter)report_tunes_from, NULL,
     "where they came from: 'given', 'tuning cache', 'shipped defaults', 'tuned at launch', 'declared defaults'", NULL},
    {"note", (getter)report_note, NULL, "something tpk wants to say about the launch, or ''", NULL},
    {"simulated", (getter)report_simulated, NULL, "whether it ran on a sim:<chip> device", NULL},
    {"chip", (getter)report_chip, NULL, "the simulated chip, 'v5e' (None on the host)", NULL},
    {"memory_bound", (getter)report_memory_bound, NULL, "HBM traffic, not matmul work, sets the roofline", NULL},
    SIM_NUMBER("seconds", 0, "the kernel's time on the chip"),
    SIM_NUMBER("cycles", 1, "... in the chip's cycles"),
    SIM_NUMBER("clock_hz", 2, "the chip's clock"),
    SIM_NUMBER("flops", 3, "matmul FLOPs (2MNK) plus one per element of elementwise ops"),
    SIM_NUMBER("matmul_flops", 4, "matmul FLOPs"),
    SIM_NUMBER("hbm_bytes", 5, "bytes moved between HBM and VMEM"),
    SIM_NUMBER("peak_flops", 6, "the chip's peak FLOP/s for the kernel's matmul dtype"),
    SIM_NUMBER("hbm_bytes_per_s", 7, "the chip's HBM bandwidth"),
    SIM_NUMBER("roofline_seconds", 8, "the least time the work could take"),
    SIM_NUMBER("mxu_utilisation", 9, "the matrix units' busy fraction"),
    SIM_NUMBER("vpu_utilisation", 10, "the vector units' busy fraction"),
    SIM_NUMBER("hbm_utilisation", 11, "HBM's busy fraction"),
    {NULL},
};

static PyMemberDef REPORT_MEMBERS[] = {
    {"kernel", T_OBJECT_EX, offsetof(ReportObject, kernel), READONLY, "the kernel's name"},
    {"device", T_OBJECT_EX, offsetof(ReportObject, device), READONLY, "the device it ran on"},
    {NULL},
};

static PyMethodDef REPORT_METHODS[] = {
    {"write_trace", (PyCFunction)(void (*)(void))report_write_trace, METH_VARARGS | METH_KEYWORDS,
     "write_trace(path, name=None): the simulated timeline as Perfetto / Chrome-trace JSON"},
    {NULL},
};

static PyTypeObject ReportType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk.Report",
    .tp_doc = "What a launch did: the code that ran, its tunables, and on sim:<chip> the simulated time.",
    .tp_basicsize = sizeof(ReportObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)report_dealloc,
    .tp_repr = (reprfunc)report_repr,
    .tp_getset = REPORT_GETSET,
    .tp_members = REPORT_MEMBERS,
    .tp_methods = REPORT_METHODS,
};

static PyMethodDef PROGRAM_METHODS[] = {
    {"kernel", (PyCFunction)program_kernel, METH_O, "kernel(name) -> Kernel"},
    {NULL},
};

static PyGetSetDef PROGRAM_GETSET[] = {
    {"kernel_names", (getter)program_kernel_names, NULL, "the program's kernels, in order", NULL},
    {NULL},
};

static PyMemberDef PROGRAM_MEMBERS[] = {
    {"name", T_OBJECT_EX, offsetof(ProgramObject, name), READONLY, "the file, or the name given to load_source"},
    {NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tpk._C.Program",
    .tp_doc = "A loaded, checked .tpk program.",
    .tp_basicsize = sizeof(ProgramObject),
    .tp_weaklistoffset = offsetof(ProgramObject, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)program_dealloc,
    .tp_repr = (reprfunc)program_repr,
    .tp_methods = PROGRAM_METHODS,
    .tp_getset = PROGRAM_GETSET,
    .tp_members = PROGRAM_MEMBERS,
};

static PyMethodDef MODULE_METHODS[] = {
    {"load", load, METH_O, "load(path) -> Program: load and check a .tpk file"},
    {"load_source", (PyCFunction)(void (*)(void))load_source, METH_VARARGS | METH_KEYWORDS,
     "load_source(text, name='<source>') -> Program"},
    {"std_kernel", std_kernel, METH_O, "std_kernel(name) -> Kernel: a kernel of the standard library"},
    {"std_kernels", std_kernels, METH_NOARGS, "((kernel, file), ...) of the standard library"},
    {"open_device", open_device, METH_O, "open_device(name): open a device (an error if there is none by that name)"},
    {"graph_ops", graph_ops, METH_NOARGS, "the ATen ops graphs know (tpk_graph_op_name), in table order"},
    {"graph_op_known", graph_op_known, METH_O,
     "graph_op_known(name) -> bool: whether graphs know the op, overload included ('aten::add.Tensor'; tpk_graph_op_known)"},
    {"wait_compiles", wait_compiles, METH_NOARGS,
     "wait_compiles(): block until the background (cc -O3) compiles of every kernel launched so far are done"},
    {"cache_stats", cache_stats, METH_NOARGS,
     "cache_stats() -> dict: the compilation cache (tpk_cache_stats) and the compiler runs of the process's context"},
    {"context_capsule", context_capsule, METH_NOARGS, "the process's TpkContext in a capsule named 'tpk._C.context'"},
    {NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, .m_name = "tpk._C", .m_doc = "tpk's C extension: programs, kernels and launches over tpk.h.",
    .m_size = -1, .m_methods = MODULE_METHODS,
};

static bool intern(PyObject **out, const char *s) { return (*out = PyUnicode_InternFromString(s)) != NULL; }

PyMODINIT_FUNC PyInit__C(void) {
  if (!intern(&s_dtype, "dtype") || !intern(&s_is_cpu, "is_cpu") || !intern(&s_shape, "shape") || !intern(&s_stride, "stride") ||
      !intern(&s_data_ptr, "data_ptr") || !intern(&s_device, "device") || !intern(&s_tune, "tune") || !intern(&s_syms, "syms") ||
      !intern(&s_convert, "convert") || !intern(&s_args, "args") || !intern(&s_casting, "casting") || !intern(&s_unsafe, "unsafe") ||
      !intern(&default_device, "host"))
    return NULL;
  if (PyStructSequence_InitType2(&ParamType, &PARAM_DESC) < 0 || PyStructSequence_InitType2(&TunableType, &TUNABLE_DESC) < 0 ||
      PyType_Ready(&KernelType) < 0 || PyType_Ready(&ReportType) < 0 || PyType_Ready(&ProgramType) < 0 ||
      PyType_Ready(&GraphType) < 0 || PyType_Ready(&ValueType) < 0 || PyType_Ready(&SymType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&MODULE);
  if (!m) return NULL;
  TpkError = PyErr_NewExceptionWithDoc("tpk.TpkError", "An error tpk reported, with its message.", PyExc_Exception, NULL);
  PyObject *bases = TpkError ? PyTuple_Pack(2, TpkError, PyExc_ValueError) : NULL;
  TpkArgumentError = bases ? PyErr_NewExceptionWithDoc("tpk.TpkArgumentError",
                                                       "tpk refused an argument (sizes that disagree, a value out of range): "
                                                       "a TpkError and a ValueError.",
                                                       bases, NULL)
                           : NULL;
  Py_XDECREF(bases);
  device_var = PyContextVar_New("tpk.device", NULL);
  devices = PyDict_New();
  if (!TpkArgumentError || !device_var || !devices || PyModule_AddObjectRef(m, "TpkError", TpkError) < 0 ||
      PyModule_AddObjectRef(m, "TpkArgumentError", TpkArgumentError) < 0 || PyModule_AddObjectRef(m, "device_var", device_var) < 0 ||
      PyModule_AddObjectRef(m, "Kernel", (PyObject *)&KernelType) < 0 ||
      PyModule_AddObjectRef(m, "Report", (PyObject *)&ReportType) < 0 ||
      PyModule_AddObjectRef(m, "Program", (PyObject *)&ProgramType) < 0 ||
      PyModule_AddObjectRef(m, "Param", (PyObject *)&ParamType) < 0 ||
      PyModule_AddObjectRef(m, "Tunable", (PyObject *)&TunableType) < 0 ||
      PyModule_AddObjectRef(m, "Graph", (PyObject *)&GraphType) < 0 ||
      PyModule_AddObjectRef(m, "Value", (PyObject *)&ValueType) < 0 ||
      PyModule_AddObjectRef(m, "Sym", (PyObject *)&SymType) < 0 ||
      PyModule_AddStringConstant(m, "version", TPK_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
