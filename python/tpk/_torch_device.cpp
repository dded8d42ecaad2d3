/*
 * _torch_device.cpp — the `tpk` PyTorch device: what PyTorch's dispatcher
 * needs in C++ for its PrivateUse1 key, done through tpk.h.
 *
 * python/README.md ("The tpk device") has the design; in short:
 *   - a tpk tensor's storage holds a TpkBuffer (the DataPtr's context), and
 *     its data pointer is the buffer's bytes in host memory
 *     (tpk_buffer_address: known before the work that writes them has run);
 *   - views are PyTorch's own (view, as_strided, _reshape_alias here, the
 *     rest composite over them): they alias the storage;
 *   - every other ATen op reaches one boxed fallback, which runs it on the
 *     device's eager stream when tpk has it (tpk_stream_op, ATen's names) and
 *     otherwise on the CPU, on CPU tensors aliasing the tpk storages' bytes
 *     (after a sync), warning once per op or refusing when the fallback is
 *     off;
 *   - copies to and from the CPU, .item(), and torch.tpk.synchronize() sync
 *     the stream.
 *
 * One device, tpk:0, is one TpkDevice (sim:v5e by default) with one stream,
 * in the context's eager mode; the context is tpk._C's (init), so kernels,
 * the cache and the streams are one. The stream takes ops from one thread at
 * a time: `State::mu` is held around every call on it.
 *
 * The Python module (tpk._torch_device, CPython's API) has the few functions
 * tpk/torch_device.py calls: init, set_device, set_eager_mode, synchronize,
 * set_fallback, stats.
 */
#include <Python.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/item.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

extern "C" {
#include "tpk.h"
}

namespace {

constexpr c10::DeviceType kTpk = c10::DeviceType::PrivateUse1;
const c10::Device kDevice(kTpk, 0);

/* ---- the device's state -------------------------------------------------------- */

struct State {
  std::recursive_mutex mu; /* the stream (one thread at a time), the device, the counts */
  TpkContext *ctx = nullptr;
  TpkDevice *dev = nullptr;
  TpkStream *stream = nullptr;
  bool fallback = true;       /* ops tpk does not have run on the CPU (else raise) */
  TpkStreamStats past{};      /* of the streams set_device and set_eager_mode replaced */
  int64_t cpu_ops = 0;        /* calls that ran on the CPU */
  std::unordered_set<std::string> warned; /* ops that ran on the CPU, each warned once */
  bool profiling = false; /* the stream's launches are recorded (tpk.torch.profile) */
};

/* One launch of the stream, as its observer heard of it (profiling). */
struct Launch {
  std::string label, tier;
  int64_t first, last, kernels;
  bool simulated;
  double seconds, flops, matmul_flops, hbm_bytes, mxu, vpu, hbm;
};

/* What the observer records: its own lock, since it runs wherever the
 * stream runs its work (with the stream's lock held), on any thread. */
struct Record {
  std::mutex mu;
  std::vector<Launch> launches;
};

Record &record() {
  static Record r;
  return r;
}

State &state() {
  static State s;
  return s;
}

[[noreturn]] void fail_tpk(const char *what) { TORCH_CHECK(false, "tpk: ", what, ": ", tpk_last_error()); }

TpkDevice *device() {
  TpkDevice *dev = state().dev;
  TORCH_CHECK(dev, "the tpk device is not set up: import tpk.torch first");
  return dev;
}

/* The stream's work up to now: run, and its first error raised. */
void sync_locked(State &s) {
  if (s.stream && tpk_stream_sync(s.stream) != TPK_OK) TORCH_CHECK(false, "tpk: ", tpk_last_error());
}

void sync() {
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  sync_locked(s);
}

/* ---- dtypes ----------------------------------------------------------------------- */

/* tpk's dtype for a torch dtype (none for int64, float64, complex...). */
std::optional<TpkDType> tpk_dtype(at::ScalarType t) {
  switch (t) {
  case at::kFloat: return TPK_F32;
  case at::kHalf: return TPK_F16;
  case at::kBFloat16: return TPK_BF16;
  case at::kFloat8_e4m3fn: return TPK_F8E4M3;
  case at::kFloat8_e5m2: return TPK_F8E5M2;
  case at::kInt: return TPK_I32;
  case at::kShort: return TPK_I16;
  case at::kChar: return TPK_I8;
  case at::kByte: return TPK_U8;
  case at::kBool: return TPK_BOOL;
  case at::kUInt32: return TPK_U32;
  case at::kUInt16: return TPK_U16;
  default: return std::nullopt;
  }
}

at::ScalarType torch_dtype(TpkDType t) {
  static const at::ScalarType TYPES[TPK_DTYPE_COUNT] = {
      at::kFloat, at::kHalf, at::kBFloat16, at::kFloat8_e4m3fn, at::kFloat8_e5m2,
      at::kInt,   at::kShort, at::kChar,    at::kByte,          at::kBool,
      at::kUInt32, at::kUInt16,
  };
  return TYPES[t];
}

/* ---- storages are tpk buffers ------------------------------------------------------- */

void release_buffer(void *buffer) { tpk_buffer_destroy(static_cast<TpkBuffer *>(buffer)); }

/* A DataPtr that owns `b`: the storage of a tpk tensor. */
c10::DataPtr data_ptr_of(TpkBuffer *b) { return c10::DataPtr(tpk_buffer_address(b), b, &release_buffer, kDevice); }

/* The buffer a tpk storage holds (NULL for an empty one). */
TpkBuffer *buffer_of(const c10::Storage &s) {
  const c10::DataPtr &p = s.data_ptr();
  return p.get_deleter() == &release_buffer ? static_cast<TpkBuffer *>(p.get_context()) : nullptr;
}

/* Bytes of the current device, for storages PyTorch sizes itself (resize_,
 * UntypedStorage, layouts other than contiguous): u8[n] buffers. */
struct Allocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &release_buffer, kDevice);
    int64_t shape = (int64_t)n;
    TpkBuffer *b;
    if (tpk_buffer_create(device(), TPK_U8, 1, &shape, &b) != TPK_OK) fail_tpk("allocating a storage");
    return data_ptr_of(b);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  /* a storage's bytes copied by PyTorch (Storage.clone): settled first */
  void copy_data(void *dst, const void *src, size_t n) const override {
    sync();
    if (n) std::memcpy(dst, src, n);
  }
};

Allocator allocator;

c10::Storage storage_of(TpkBuffer *b) {
  return c10::Storage(c10::Storage::use_byte_size_t(), tpk_buffer_bytes(b), data_ptr_of(b), &allocator, /*resizable=*/true);
}

/* A tpk tensor on storage s with like's dtype, sizes, strides and offset. */
at::Tensor tensor_on(c10::Storage s, const at::Tensor &like) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(s), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return t;
}

/* The whole of buffer b as a contiguous tensor of its dtype and shape. */
at::Tensor tensor_of(TpkBuffer *b) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(storage_of(b), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          c10::scalarTypeToTypeMeta(torch_dtype(tpk_buffer_dtype(b))));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(c10::IntArrayRef(tpk_buffer_shape(b), tpk_buffer_rank(b)));
  return t;
}

bool is_tpk(const at::Tensor &t) { return t.defined() && t.device().type() == kTpk; }

/* ---- the device guard: one device, one stream ---------------------------------------- */

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpk; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return kDevice;
  }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  bool queryStream(const c10::Stream &) const override { return false; }
  void synchronizeStream(const c10::Stream &) const override { sync(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { sync(); }

private:
  static void check(c10::Device d) {
    TORCH_CHECK(d.type() == kTpk && d.index() <= 0, "tpk has one device, tpk:0, not ", d);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

/* The device's random generator: random ops (normal_, uniform_,
 * bernoulli_, randperm...) run on the CPU route with it when they are given
 * none, so tpk tensors draw from a generator of their own, seeded by
 * torch.tpk.manual_seed (and torch.manual_seed, which seeds every device).
 * It is a CPU generator (the CPU kernels draw from it), started from the
 * CPU's default seed, so a seed gives tpk tensors the numbers CPU tensors
 * get from the same seed. */
at::Generator &generator() {
  static at::Generator g = at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val);
  return g;
}

/* What PyTorch asks a PrivateUse1 backend beyond the guard (the autograd
 * engine whether the device is up, storages resized by Python, the
 * default generator). */
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator &getDefaultGenerator(c10::DeviceIndex) const override { return generator(); }
  at::Device getDeviceFromPtr(void *) const override { return kDevice; }
  bool isPinnedPtr(const void *) const override { return false; }
  c10::Allocator *getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void resizePrivateUse1Bytes(const c10::Storage &storage, size_t bytes) const override {
    sync();
    c10::StorageImpl *impl = storage.unsafeGetStorageImpl();
    c10::DataPtr bigger = allocator.allocate(bytes);
    size_t keep = std::min(bytes, impl->nbytes());
    if (keep) std::memcpy(bigger.get(), impl->data_ptr().get(), keep);
    impl->set_data_ptr_noswap(std::move(bigger));
    impl->set_nbytes(bytes);
  }
};

const bool hooks_registered = (at::RegisterPrivateUse1HooksInterface(new Hooks), true);

/* ---- the CPU route: CPU kernels on the tpk storages' bytes -------------------------------- */

/* CPU tensors that alias tpk tensors' bytes, one CPU storage per tpk storage
 * (so a CPU kernel sees which arguments overlap), for the length of a call. */
struct Aliases {
  struct Entry {
    c10::Storage tpk, cpu;
  };
  std::vector<Entry> entries;

  const Entry &entry(const c10::Storage &s) {
    for (const Entry &e : entries)
      if (e.tpk.unsafeGetStorageImpl() == s.unsafeGetStorageImpl()) return e;
    c10::Storage cpu(c10::Storage::use_byte_size_t(), s.nbytes(), c10::DataPtr(s.data_ptr().get(), c10::Device(c10::kCPU)),
                     c10::GetCPUAllocator(), /*resizable=*/true);
    entries.push_back({s, cpu});
    return entries.back();
  }

  at::Tensor of(const at::Tensor &t) {
    at::Tensor a = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(entry(t.storage()).cpu),
                                                            c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    a.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return a;
  }

  /* A CPU kernel's result as a tpk tensor: a view of a tpk storage it
   * aliases, or its own memory made a tpk buffer (no copy). */
  at::Tensor back(const at::Tensor &r);
};

void release_cpu_storage(void *storage, void *) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl *>(storage)); }

/* A CPU storage's memory as a tpk storage: the buffer holds the CPU storage. */
c10::Storage wrap_cpu_storage(const c10::Storage &cpu) {
  c10::StorageImpl *impl = cpu.unsafeGetStorageImpl();
  int64_t n = (int64_t)cpu.nbytes();
  c10::raw::intrusive_ptr::incref(impl);
  TpkBuffer *b;
  if (tpk_buffer_wrap(device(), TPK_U8, 1, &n, nullptr, impl->data_ptr().get(), release_cpu_storage, impl, &b) != TPK_OK) {
    c10::raw::intrusive_ptr::decref(impl);
    fail_tpk("making a CPU result a tpk tensor");
  }
  return storage_of(b);
}

at::Tensor Aliases::back(const at::Tensor &r) {
  if (!r.defined() || !r.device().is_cpu()) return r;
  for (const Entry &e : entries)
    if (e.cpu.unsafeGetStorageImpl() == r.storage().unsafeGetStorageImpl()) return tensor_on(e.tpk, r);
  return tensor_on(wrap_cpu_storage(r.storage()), r);
}

/* Ops that read tensors' shapes and dtypes, never their bytes: they run
 * on the CPU with no sync and no warning. */
bool reads_no_bytes(const c10::FunctionSchema &schema) { return schema.name() == "aten::_fused_sdp_choice"; }

/* SDPA's choice of kernel for tpk tensors (a dispatch stub, not an op):
 * the CPU's for the same shapes and dtypes, which reads no bytes, so causal
 * attention reaches _scaled_dot_product_flash_attention_for_cpu, which tpk
 * has, not the math decomposition (tril, masks). */
int64_t sdp_choice(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::optional<at::Tensor> &mask,
                   double dropout, bool causal, std::optional<double> scale, bool gqa) {
  /* CPU tensors of the same sizes, strides and dtypes over no bytes of
   * theirs (the choice reads none): tpk tensors' under torch.compile's
   * fake tensors have none to alias */
  static char nothing[16];
  auto like = [](const at::Tensor &t) {
    return at::from_blob(nothing, t.sizes(), t.strides(), t.options().device(c10::kCPU));
  };
  std::optional<at::Tensor> m = mask && is_tpk(*mask) ? std::optional<at::Tensor>(like(*mask)) : mask;
  /* the CPU's choice itself, not a Python mode's (a fake mode's, which
   * would refuse these tensors) */
  c10::impl::ExcludeDispatchKeyGuard no_modes(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::_fused_sdp_choice(like(q), like(k), like(v), m, dropout, causal, scale, gqa);
}

/* Whether an op only makes views: no argument written, every result an
 * alias. It reads no bytes, so it needs no sync. */
bool only_views(const c10::FunctionSchema &schema) {
  for (const c10::Argument &a : schema.arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return false;
  if (schema.returns().empty()) return false;
  for (const c10::Argument &r : schema.returns())
    if (!r.alias_info() || r.alias_info()->isWrite()) return false;
  return true;
}

/* An op is about to run on the CPU: warned once per op, or refused. */
void note_cpu_op(const c10::OperatorHandle &op, const std::string &why) {
  State &s = state();
  std::string name = c10::toString(op.schema().operator_name());
  bool first;
  {
    std::lock_guard<std::recursive_mutex> hold(s.mu);
    TORCH_CHECK_NOT_IMPLEMENTED(s.fallback, name, " is not supported on the tpk device (", why,
                                ") and the CPU fallback is off (tpk.torch.set_fallback(True) or TPK_FALLBACK=1 turns it on)");
    s.cpu_ops++;
    first = s.warned.insert(name).second;
  }
  if (first)
    TORCH_WARN(name, " runs on the CPU (", why,
               "): the tpk stream syncs first and the op is slower; tpk.torch.set_fallback(False) makes it an error "
               "(warned once per op)");
}

/* A tpk tensor whose CPU alias a kernel resized (out= arguments): the tpk
 * storage takes the alias's new memory and the tensor its new shape. */
void mirror_resize(const at::Tensor &t, const at::Tensor &alias) {
  c10::StorageImpl *tpk = t.storage().unsafeGetStorageImpl(), *cpu = alias.storage().unsafeGetStorageImpl();
  if (cpu->data_ptr().get() != tpk->data_ptr().get() || cpu->nbytes() != tpk->nbytes()) {
    c10::Storage wrapped = wrap_cpu_storage(alias.storage());
    tpk->set_data_ptr_noswap(std::move(wrapped.unsafeGetStorageImpl()->mutable_data_ptr()));
    tpk->set_nbytes(cpu->nbytes());
  }
  if (t.sizes() != alias.sizes() || t.strides() != alias.strides() || t.storage_offset() != alias.storage_offset())
    t.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
}

c10::TypePtr unwrap_optional(c10::TypePtr t);

void cpu_route(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const c10::FunctionSchema &schema = op.schema();
  const auto &params = schema.arguments();
  size_t nargs = params.size(), first = stack->size() - nargs;
  if (!only_views(schema) && !reads_no_bytes(schema)) sync();
  Aliases aliases;
  /* the arguments the kernel may write (and resize), with their aliases */
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (size_t i = 0; i < nargs; i++) {
    c10::IValue &v = (*stack)[first + i];
    bool writes = params[i].alias_info() && params[i].alias_info()->isWrite();
    if (v.isTensor()) {
      const at::Tensor &t = v.toTensor();
      if (!is_tpk(t)) continue;
      at::Tensor a = aliases.of(t);
      if (writes) written.emplace_back(t, a);
      v = std::move(a);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList(), cpu;
      for (const at::Tensor &t : list) {
        at::Tensor a = is_tpk(t) ? aliases.of(t) : t;
        if (writes && is_tpk(t)) written.emplace_back(t, a);
        cpu.push_back(a);
      }
      v = std::move(cpu);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList(), cpu;
      for (const std::optional<at::Tensor> &t : list) cpu.push_back(t && is_tpk(*t) ? std::optional<at::Tensor>(aliases.of(*t)) : t);
      v = std::move(cpu);
    } else if (v.isDevice() && v.toDevice().type() == kTpk) {
      v = c10::Device(c10::kCPU); /* a factory's device= */
    } else if (v.isNone() && unwrap_optional(params[i].real_type())->kind() == c10::TypeKind::GeneratorType) {
      v = generator(); /* a random op given no generator: the device's */
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (auto &[t, a] : written) mirror_resize(t, a);
  size_t nret = schema.returns().size(), at = stack->size() - nret;
  for (size_t i = 0; i < nret; i++) {
    c10::IValue &v = (*stack)[at + i];
    if (v.isTensor()) {
      v = aliases.back(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList(), tpk;
      for (const at::Tensor &t : list) tpk.push_back(aliases.back(t));
      v = std::move(tpk);
    }
  }
}

/* Whether t is all of its storage's bytes, laid out contiguously. */
bool covers_storage(const at::Tensor &t) {
  return t.is_contiguous() && t.storage_offset() == 0 && t.nbytes() == t.storage().nbytes();
}

/* ---- the stream route: ops tpk has, on the device's eager stream ---------------------------- */

/* tpk will not take an op as it is given (an argument it has no form for, a
 * dtype it lacks, its builder's refusal): the op runs on the CPU instead.
 * Thrown before anything the caller sees was written. */
struct Refused {
  std::string why;
};

/* The buffers one op makes for its arguments and results (views, inputs
 * read through stream ops, results not handed on): destroyed when it has
 * been submitted, as the stream holds what its work needs. A *fresh* one
 * has bytes of its own (an op's output); a view shares a tensor's. */
struct Temps {
  std::vector<TpkBuffer *> buffers, fresh;
  ~Temps() {
    for (TpkBuffer *b : buffers) tpk_buffer_destroy(b);
  }
  TpkBuffer *keep(TpkBuffer *b) {
    fresh.push_back(b);
    return view(b);
  }
  TpkBuffer *view(TpkBuffer *b) {
    buffers.push_back(b);
    return b;
  }
  bool owns(const TpkBuffer *b) const { return std::find(fresh.begin(), fresh.end(), b) != fresh.end(); }
  /* b handed on (a storage takes it): no longer destroyed here */
  TpkBuffer *give(TpkBuffer *b) {
    buffers.erase(std::find(buffers.begin(), buffers.end(), b));
    fresh.erase(std::find(fresh.begin(), fresh.end(), b));
    return b;
  }
};

/* tpk_stream_op, throwing: Refused when tpk does not build the op; an
 * error of running it (debug mode runs it here) is the user's. */
int submit(State &s, const char *name, const TpkArg *args, int nargs, TpkBuffer **outs, int max, Temps &temps) {
  TpkStreamStats before{};
  bool debug = tpk_stream_mode(s.stream) == TPK_EAGER_DEBUG;
  if (debug) tpk_stream_stats(s.stream, &before);
  int n = 0;
  if (tpk_stream_op(s.stream, name, args, nargs, outs, max, &n) != TPK_OK) {
    std::string why = tpk_last_error();
    TpkStreamStats after{};
    if (debug) tpk_stream_stats(s.stream, &after);
    /* a program found for the op: it was built, and what failed is its run */
    TORCH_CHECK(!debug || after.compiles + after.cache_hits == before.compiles + before.cache_hits, "tpk: ", why);
    throw Refused{why};
  }
  for (int i = 0; i < n && i < max; i++)
    if (outs[i]) temps.keep(outs[i]);
  return n;
}

TpkBuffer *submit1(State &s, const char *name, std::initializer_list<TpkArg> args, Temps &temps) {
  TpkBuffer *out = nullptr;
  if (submit(s, name, args.begin(), (int)args.size(), &out, 1, temps) < 1 || !out) throw Refused{std::string(name) + " gave no result"};
  return out;
}

TpkArg ints_arg(const std::vector<int64_t> &v) { return tpk_arg_ints((int)v.size(), v.data()); }

bool same_shape(const TpkBuffer *b, c10::IntArrayRef sizes) {
  return tpk_buffer_rank(b) == (int)sizes.size() && std::equal(sizes.begin(), sizes.end(), tpk_buffer_shape(b));
}

/* t's elements as a buffer of the stream's device, shaped and typed as t. */
TpkBuffer *input_buffer(State &s, const at::Tensor &t, Temps &temps) {
  std::optional<TpkDType> dt = tpk_dtype(t.scalar_type());
  if (!dt) throw Refused{std::string("tpk has no ") + c10::toString(t.scalar_type())};
  if (t.numel() == 0) throw Refused{"an empty tensor"};
  if (t.dim() > TPK_MAX_DIMS) throw Refused{"more than 8 dimensions"};
  TpkBuffer *b = buffer_of(t.storage());
  if (!b) throw Refused{"a tensor whose storage is not a tpk buffer"};
  if (tpk_buffer_device(b) != s.dev) throw Refused{"a tensor of another tpk device (made before set_device)"};
  bool same_dtype = tpk_buffer_dtype(b) == *dt;
  if (same_dtype && t.storage_offset() == 0 && same_shape(b, t.sizes()) && t.is_contiguous()) return b;
  size_t esize = tpk_dtype_size(*dt);
  int64_t elements = (int64_t)(tpk_buffer_bytes(b) / esize);
  /* In fused mode a view (tpk_buffer_view) of what the window made makes
   * the window run first: a reshape of the whole buffer is a view op
   * instead. (A part of it stays a tpk_buffer_view: a window whose slice of
   * a buffer is then viewed at constant sizes does not build today.) */
  bool by_ops = same_dtype && tpk_stream_mode(s.stream) == TPK_EAGER_FUSED;
  /* elements [start, start + prod(shape)) of the storage as `shape` */
  auto block = [&](int64_t start, const std::vector<int64_t> &shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    if (same_dtype && start == 0 && count == elements) {
      if (same_shape(b, shape)) return b;
      if (by_ops) return submit1(s, "view", {tpk_arg_buffer(b), ints_arg(shape)}, temps);
    }
    TpkBuffer *v;
    if (tpk_buffer_view(b, (size_t)start * esize, *dt, (int)shape.size(), shape.data(), &v) != TPK_OK) throw Refused{tpk_last_error()};
    return temps.view(v);
  };
  if (t.is_contiguous()) return block(t.storage_offset(), t.sizes().vec());

  /* A strided view whose strides nest (each a multiple of the next, past
   * its extent): a block of the storage viewed by the strides, sliced
   * (the innermost stride a slice's step), permuted back, expanded where a
   * stride is 0. (Slices, not select: select's index becomes a shape symbol
   * of the op's graph that no input binds.) */
  struct Dim {
    int64_t size, stride;
    int index;
  };
  std::vector<Dim> dims;
  std::vector<int64_t> kept_shape; /* t's sizes, 1 where a dim is dropped or expanded */
  bool expanded = false;
  for (int d = 0; d < t.dim(); d++) {
    int64_t size = t.size(d), stride = t.stride(d);
    if (size > 1 && stride > 0) dims.push_back({size, stride, d});
    expanded |= size > 1 && stride == 0;
    kept_shape.push_back(size > 1 && stride > 0 ? size : 1);
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim &a, const Dim &c) { return a.stride > c.stride; });
  int n = (int)dims.size();
  for (int k = 1; k < n; k++)
    if (dims[k - 1].stride % dims[k].stride || dims[k - 1].stride < dims[k].stride * dims[k].size)
      return nullptr; /* overlapping or interleaved: the caller copies on the host */
  int64_t offset = t.storage_offset(), inner = n ? dims[n - 1].stride : 1;
  int64_t rows = n ? dims[0].size : 1, row = n ? dims[0].stride : 1, rem = offset % row, first = offset - rem;
  if (first + rows * row > elements) return nullptr;
  /* the block: rows of `row` elements, each split by the strides; the
   * innermost stride stays in its dim, a slice's step */
  std::vector<int64_t> shape = {n > 1 || inner == 1 ? rows : rows * inner}, starts = {0};
  for (int k = 1; k < n; k++) {
    shape.push_back(dims[k - 1].stride / dims[k].stride * (k == n - 1 ? inner : 1));
    int64_t at = rem / dims[k].stride;
    rem %= dims[k].stride;
    if (at + dims[k].size > dims[k - 1].stride / dims[k].stride) return nullptr;
    starts.push_back(at * (k == n - 1 ? inner : 1) + (k == n - 1 ? rem : 0));
  }
  if (n == 1 && inner > 1) starts[0] = rem;
  auto sliced = [&](int k) {
    int64_t step = k == n - 1 ? inner : 1;
    return starts[k] || starts[k] + (dims[k].size - 1) * step + 1 != shape[k] || step != 1;
  };
  TpkBuffer *x;
  if (tpk_stream_mode(s.stream) == TPK_EAGER_FUSED) {
    /* A fused window builds a slice of a block whose inner sizes the view
     * made up (attention's q of a qkv projection: [B, T, 3*H, Dh] sliced
     * to H heads) with those sizes as symbols that the projection's own
     * ([B*T, 3*H*Dh]) cannot match. So the one dim sliced is sliced with
     * the dims inside it merged (columns [0, H*Dh) of [B, T, 3*H*Dh]) and
     * the slice viewed to its sizes after: sizes the window knows. Other
     * slices (two dims, a step) are copied on the host after a sync. */
    int cut = -1;
    for (int k = 0; k < n; k++)
      if (sliced(k)) {
        if (cut >= 0 || (k == n - 1 && inner != 1)) return nullptr;
        cut = k;
      }
    /* the view after the slice names the dims inside the cut by their
     * sizes, which a window takes for its symbols by value: one equal to
     * another dim's (heads of 16 over a sequence of 16) would be that
     * symbol, and the window would not build. Those are copied too. */
    for (int k = cut + 1; cut >= 0 && k < n; k++)
      for (int j = 0; j < k; j++)
        if (j != cut && shape[j] == shape[k]) return nullptr;
    if (cut < 0) {
      x = n ? block(first, shape) : block(offset, {});
    } else {
      std::vector<int64_t> merged(shape.begin(), shape.begin() + cut), parts(shape.begin(), shape.begin() + cut);
      int64_t within = 1;
      for (int k = cut + 1; k < n; k++) within *= shape[k];
      merged.push_back(shape[cut] * within);
      x = block(first, merged);
      x = submit1(s, "slice",
                  {tpk_arg_buffer(x), tpk_arg_int(cut), tpk_arg_int(starts[cut] * within),
                   tpk_arg_int((starts[cut] + dims[cut].size) * within), tpk_arg_int(1)},
                  temps);
      if (cut < n - 1) {
        parts.push_back(-1); /* the slice's count: ATen's -1, not a size that may equal another (4 heads of a batch of 4) */
        parts.insert(parts.end(), shape.begin() + cut + 1, shape.end());
        x = submit1(s, "view", {tpk_arg_buffer(x), ints_arg(parts)}, temps);
      }
    }
  } else {
    x = n ? block(first, shape) : block(offset, {}); /* no dim of its own: one element, broadcast */
    for (int k = 0; k < n; k++) {
      int64_t step = k == n - 1 ? inner : 1, end = starts[k] + (dims[k].size - 1) * step + 1;
      if (sliced(k))
        x = submit1(s, "slice", {tpk_arg_buffer(x), tpk_arg_int(k), tpk_arg_int(starts[k]), tpk_arg_int(end), tpk_arg_int(step)}, temps);
    }
  }
  /* x's dims are t's kept dims by decreasing stride: put them back in order */
  std::vector<int64_t> perm;
  for (int d = 0; d < t.dim(); d++)
    for (int k = 0; k < n; k++)
      if (dims[k].index == d) perm.push_back(k);
  bool moved = false;
  for (int k = 0; k < n; k++) moved |= perm[k] != k;
  if (moved) x = submit1(s, "permute", {tpk_arg_buffer(x), ints_arg(perm)}, temps);
  for (int d = 0; d < t.dim(); d++) /* the dims of size 1, and those expanded */
    if (kept_shape[d] == 1) x = submit1(s, "unsqueeze", {tpk_arg_buffer(x), tpk_arg_int(d)}, temps);
  if (expanded) x = submit1(s, "expand", {tpk_arg_buffer(x), ints_arg(t.sizes().vec())}, temps);
  return x;
}

/* A new buffer holding values (CPU memory: a CPU tensor, or the alias of a
 * tpk tensor's bytes after a sync) as `type`, one tpk has; nullptr when tpk
 * cannot make it (tpk_last_error says why). */
TpkBuffer *host_copy(State &s, at::ScalarType type, const at::Tensor &values) {
  TpkBuffer *c;
  if (tpk_buffer_create(s.dev, *tpk_dtype(type), values.dim(), values.sizes().data(), &c) != TPK_OK) return nullptr;
  try {
    at::from_blob(tpk_buffer_data(c), values.sizes(), values.options().dtype(type).device(c10::kCPU)).copy_(values);
  } catch (...) {
    tpk_buffer_destroy(c);
    throw;
  }
  return c;
}

/* values (integers on the host) as i32, or none when one does not fit. */
std::optional<at::Tensor> fitting_i32(const at::Tensor &values) {
  at::Tensor narrow = values.to(at::kInt);
  if (values.numel() && !narrow.to(values.scalar_type()).equal(values)) return std::nullopt;
  return narrow;
}

/* input_buffer, or a contiguous copy made on the host for the layouts it
 * cannot read (overlapping strides; slices in fused mode). */
TpkBuffer *read_buffer(State &s, const at::Tensor &t, Temps &temps) {
  if (TpkBuffer *b = input_buffer(s, t, temps)) return b;
  sync_locked(s);
  Aliases aliases;
  TpkBuffer *c = host_copy(s, t.scalar_type(), aliases.of(t));
  if (!c) throw Refused{tpk_last_error()};
  temps.keep(c);
  return c;
}

/* ATen's indices are int64, which tpk does not have; an index argument
 * (a loss's target, gather's index, embedding's indices) is read as the low
 * words of its elements, i32 (little-endian), which is its value whenever
 * the index is one at all: an index of a tensor tpk holds fits 32 bits
 * (ignore_index's -100 too). */
bool is_index(const c10::Argument &param) {
  const std::string &n = param.name();
  return n == "target" || n == "index" || n == "indices";
}

TpkBuffer *index_buffer(State &s, const at::Tensor &t, Temps &temps) {
  TpkBuffer *b = buffer_of(t.storage());
  if (!b || !t.is_contiguous() || t.numel() == 0 || t.dim() >= TPK_MAX_DIMS) throw Refused{"an int64 index tpk cannot read"};
  std::vector<int64_t> pairs = t.sizes().vec();
  pairs.push_back(2);
  TpkBuffer *v;
  if (tpk_buffer_view(b, (size_t)t.storage_offset() * 8, TPK_I32, (int)pairs.size(), pairs.data(), &v) != TPK_OK)
    throw Refused{tpk_last_error()};
  temps.view(v);
  TpkBuffer *low = submit1(s, "slice", {tpk_arg_buffer(v), tpk_arg_int(t.dim()), tpk_arg_int(0), tpk_arg_int(1), tpk_arg_int(1)}, temps);
  return submit1(s, "squeeze", {tpk_arg_buffer(low), tpk_arg_int(t.dim())}, temps);
}

/* An index tensor on the CPU in a tpk op's index list (x[i] with i a CPU
 * tensor, as PyTorch allows for a device's tensors): its values, checked
 * to fit, in a new i32 buffer. */
TpkBuffer *cpu_index_buffer(State &s, const at::Tensor &t, Temps &temps) {
  if (!t.is_cpu() || !at::isIntegralType(t.scalar_type(), false) || t.dim() > TPK_MAX_DIMS)
    throw Refused{"an index list with a tensor that is neither on tpk nor a CPU index"};
  std::optional<at::Tensor> i32 = fitting_i32(t);
  if (!i32) throw Refused{"an index that does not fit i32"};
  TpkBuffer *c = host_copy(s, at::kInt, *i32);
  if (!c) throw Refused{tpk_last_error()};
  temps.keep(c);
  return c;
}

/* Write buffer r (of dst's shape, or one that broadcasts to it) into dst.
 * When dst is all of its storage, the storage takes r (a buffer the op made)
 * as its bytes: nothing copied, nothing waited for. Otherwise dst is a view:
 * the stream syncs and r is copied into dst's elements on the host, so
 * the write lands in the storage every view of it shares. */
void write_into(State &s, const at::Tensor &dst, TpkBuffer *r, Temps &temps) {
  TpkDType want = *tpk_dtype(dst.scalar_type());
  if (tpk_buffer_dtype(r) != want)
    r = submit1(s, "_to_copy", {tpk_arg_buffer(r), tpk_arg_named("dtype", tpk_arg_dtype(want))}, temps);
  if (!same_shape(r, dst.sizes())) r = submit1(s, "expand", {tpk_arg_buffer(r), ints_arg(dst.sizes().vec())}, temps);
  /* a buffer of a tensor's (the source of a copy_): a copy, so that dst
   * neither shares it nor is written from bytes that overlap its own */
  if (!temps.owns(r)) r = submit1(s, "clone", {tpk_arg_buffer(r)}, temps);
  if (covers_storage(dst) && dst.dim() <= TPK_MAX_DIMS) {
    dst.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(data_ptr_of(temps.give(r)));
    return;
  }
  sync_locked(s);
  Aliases aliases;
  aliases.of(dst).copy_(at::from_blob(tpk_buffer_data(r), dst.sizes(), dst.options().device(c10::kCPU)));
}

/* What an op is to the stream route, worked out on its first call. */
struct Plan {
  enum Kind { FUNCTIONAL, INPLACE, OUT, NONE } kind = NONE;
  std::string name; /* for tpk_stream_op: "add.Tensor", "add_.Tensor"; an out= op by its packet, "add" */
  std::string why;  /* NONE: why not */
  std::vector<int> outs; /* OUT: the out arguments, in order */
};

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType();
  return t;
}

/* What tpk has, by tpk_graph_op_known: the overload itself for functional
 * and in-place ops ("add.Tensor", "add_.Tensor"), the packet for out= ops
 * ("add.out" is submitted as "add": tpk picks the overload by the
 * arguments). */
Plan make_plan(const c10::FunctionSchema &schema) {
  Plan p;
  const std::string &full = schema.name();
  if (full.rfind("aten::", 0) != 0) {
    p.why = "not an ATen op";
    return p;
  }
  std::string packet = full.substr(6), qualified = packet + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  const auto &params = schema.arguments();
  int written = 0;
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].alias_info() && params[i].alias_info()->isWrite()) {
      written++;
      if (params[i].is_out()) p.outs.push_back((int)i);
    }
  bool in_place = written == 1 && !params.empty() && params[0].alias_info() && params[0].alias_info()->isWrite() &&
                  params[0].type()->kind() == c10::TypeKind::TensorType && packet.back() == '_';
  if (!p.outs.empty() && (int)p.outs.size() == written) p.kind = Plan::OUT, p.name = packet;
  else if (in_place) p.kind = Plan::INPLACE, p.name = qualified;
  else if (written == 0) p.kind = Plan::FUNCTIONAL, p.name = qualified;
  else p.why = "it writes arguments the tpk device does not write yet";
  if (p.kind != Plan::NONE && !tpk_graph_op_known(p.name.c_str())) {
    p.kind = Plan::NONE;
    p.why = "tpk has no such op";
  }
  return p;
}

/* ATen's result dtypes for these argument types, found once by running the
 * op on meta tensors: tpk's must be the same, and int64 results (argmax, a
 * sum of ints) are dtypes tpk does not have. */
struct ResultTypes {
  bool ok;
  std::vector<at::ScalarType> types;
  /* per result, when ATen lays it out dense but not contiguous (SDPA's
   * output: [B, H, T, D] over [B, T, H, D] memory), its dims from the
   * outermost in memory; else empty. The stream's result is made so, as
   * code after the op (views in compiled graphs) relies on the strides. */
  std::vector<std::vector<int64_t>> orders;
};

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL + (h >> 29); }

ResultTypes result_types(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first) {
  static std::unordered_map<uint64_t, ResultTypes> known;
  const auto &params = op.schema().arguments();
  uint64_t h = mix(0xcbf29ce484222325ULL, (uint64_t)(uintptr_t)&op.schema());
  for (size_t i = 0; i < params.size(); i++) {
    const c10::IValue &v = stack[first + i];
    h = mix(h, v.isNone() ? 1 : v.isTensor() ? 2 : v.isDouble() ? 3 : v.isInt() ? 4 : v.isBool() ? 5 : 6);
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor &t = v.toTensor();
      h = mix(h, (uint64_t)t.scalar_type() << 8 | (uint64_t)(t.dim() == 0) << 4 | (uint64_t)t.unsafeGetTensorImpl()->is_wrapped_number() << 2 | is_tpk(t));
    } else if (v.isTensorList()) {
      for (const at::Tensor &t : v.toTensorList()) h = mix(h, (uint64_t)t.scalar_type() << 1 | (t.dim() == 0));
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor> &t : v.toOptionalTensorList())
        h = mix(h, t && t->defined() ? (uint64_t)t->scalar_type() << 1 | (t->dim() == 0) : 7);
    } else if (v.isString()) {
      h = mix(h, std::hash<std::string>()(v.toStringRef()));
    } else if (v.isInt() && unwrap_optional(params[i].real_type())->kind() == c10::TypeKind::ScalarTypeType) {
      h = mix(h, (uint64_t)v.toInt());
    }
  }
  auto found = known.find(h);
  if (found != known.end()) return found->second;
  ResultTypes r{true, {}};
  try {
    torch::jit::Stack meta(stack.begin() + (ptrdiff_t)first, stack.end());
    auto to_meta = [](const at::Tensor &t) {
      return t.defined() && is_tpk(t) ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)) : t;
    };
    for (c10::IValue &v : meta) {
      if (v.isTensor()) v = to_meta(v.toTensor());
      else if (v.isTensorList()) {
        c10::List<at::Tensor> list;
        for (const at::Tensor &t : v.toTensorList()) list.push_back(to_meta(t));
        v = std::move(list);
      } else if (v.isOptionalTensorList()) {
        c10::List<std::optional<at::Tensor>> list;
        for (const std::optional<at::Tensor> &t : v.toOptionalTensorList()) list.push_back(t ? std::optional<at::Tensor>(to_meta(*t)) : t);
        v = std::move(list);
      } else if (v.isDevice() && v.toDevice().type() == kTpk) v = c10::Device(c10::kMeta);
    }
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    for (const c10::IValue &v : meta) {
      if (!v.isTensor()) r.ok = false;
      else r.types.push_back(v.toTensor().defined() ? v.toTensor().scalar_type() : at::kFloat);
      std::vector<int64_t> order;
      if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_contiguous() && v.toTensor().is_non_overlapping_and_dense()) {
        const at::Tensor &t = v.toTensor();
        for (int64_t d = 0; d < t.dim(); d++) order.push_back(d);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
      }
      r.orders.push_back(order);
    }
  } catch (const c10::Error &) {
    r.ok = false;
  }
  known.emplace(h, r);
  return r;
}

/* The op's arguments as TpkArgs, by ATen's names. */
struct Args {
  std::vector<TpkArg> args;
  std::vector<std::vector<TpkBuffer *>> lists; /* Tensor[] arguments' buffers */
  std::vector<std::vector<int64_t>> ints;      /* int[] arguments */
};

void convert_args(State &s, const c10::FunctionSchema &schema, const torch::jit::Stack &stack, size_t first, Args &out,
                  Temps &temps) {
  const auto &params = schema.arguments();
  out.lists.reserve(params.size());
  out.ints.reserve(params.size());
  for (size_t i = 0; i < params.size(); i++) {
    const c10::Argument &param = params[i];
    const c10::IValue &v = stack[first + i];
    c10::TypePtr type = unwrap_optional(param.real_type());
    c10::TypeKind kind = type->kind();
    if (param.is_out() || kind == c10::TypeKind::LayoutType || kind == c10::TypeKind::DeviceObjType ||
        kind == c10::TypeKind::MemoryFormatType)
      continue; /* tpk's tensors are strided, on its device */
    const char *name = param.name().c_str();
    TpkArg a;
    if (v.isNone()) {
      out.args.push_back(tpk_arg_named(name, tpk_arg_none()));
      continue;
    }
    switch (kind) {
    case c10::TypeKind::TensorType: {
      const at::Tensor &t = v.toTensor();
      if (!t.defined()) {
        out.args.push_back(tpk_arg_named(name, tpk_arg_none()));
        continue;
      }
      if (is_tpk(t) && t.scalar_type() == at::kLong && is_index(param)) a = tpk_arg_buffer(index_buffer(s, t, temps));
      else if (is_tpk(t)) a = tpk_arg_buffer(read_buffer(s, t, temps));
      else if (t.dim() == 0 && t.is_cpu()) { /* a Python number, or a CPU scalar */
        c10::Scalar x = t.item();
        if (x.isBoolean()) a = tpk_arg_bool(x.toBool());
        else if (x.isIntegral(false)) a = tpk_arg_int(x.toLong());
        else if (x.isFloatingPoint()) a = tpk_arg_float(x.toDouble());
        else throw Refused{"a complex scalar"};
      } else
        throw Refused{"a tensor on " + c10::toString(t.device().type())};
      break;
    }
    case c10::TypeKind::ListType: {
      c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) {
        out.lists.emplace_back();
        for (const at::Tensor &t : v.toTensorList()) {
          if (!is_tpk(t)) throw Refused{"a list with a tensor not on tpk"};
          out.lists.back().push_back(read_buffer(s, t, temps));
        }
        a = tpk_arg_buffers((int)out.lists.back().size(), out.lists.back().data());
      } else if (unwrap_optional(elem)->kind() == c10::TypeKind::TensorType) { /* index_put's Tensor?[] indices */
        out.lists.emplace_back();
        for (const std::optional<at::Tensor> &t : v.toOptionalTensorList()) {
          if (!t || !t->defined()) throw Refused{"a list with None in it (x[:, i] = v)"};
          if (!is_tpk(*t)) out.lists.back().push_back(cpu_index_buffer(s, *t, temps));
          else if (t->scalar_type() == at::kLong && is_index(param)) out.lists.back().push_back(index_buffer(s, *t, temps));
          else out.lists.back().push_back(read_buffer(s, *t, temps));
        }
        a = tpk_arg_buffers((int)out.lists.back().size(), out.lists.back().data());
      } else if (elem->kind() == c10::TypeKind::IntType || elem->kind() == c10::TypeKind::SymIntType) {
        out.ints.emplace_back();
        if (v.isIntList()) out.ints.back() = v.toIntVector();
        else
          for (const c10::SymInt &x : v.toSymIntList()) out.ints.back().push_back(x.expect_int());
        a = ints_arg(out.ints.back());
      } else if (elem->kind() == c10::TypeKind::BoolType) {
        out.ints.emplace_back();
        for (bool x : v.toBoolList()) out.ints.back().push_back(x);
        a = ints_arg(out.ints.back());
      } else {
        throw Refused{"an argument of type " + type->str()};
      }
      break;
    }
    case c10::TypeKind::NumberType:
      if (v.isBool()) a = tpk_arg_bool(v.toBool());
      else if (v.isInt()) a = tpk_arg_int(v.toInt());
      else if (v.isDouble()) a = tpk_arg_float(v.toDouble());
      else throw Refused{"a Scalar that is not a real number"};
      break;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: a = tpk_arg_int(v.isSymInt() ? v.toSymInt().expect_int() : v.toInt()); break;
    case c10::TypeKind::FloatType: a = tpk_arg_float(v.toDouble()); break;
    case c10::TypeKind::BoolType: a = tpk_arg_bool(v.toBool()); break;
    case c10::TypeKind::StringType: a = tpk_arg_str(v.toStringRef().c_str()); break;
    case c10::TypeKind::ScalarTypeType: {
      std::optional<TpkDType> dt = tpk_dtype(static_cast<at::ScalarType>(v.toInt()));
      if (!dt) throw Refused{std::string("tpk has no ") + c10::toString(static_cast<at::ScalarType>(v.toInt()))};
      a = tpk_arg_dtype(*dt);
      break;
    }
    default: throw Refused{"an argument of type " + type->str()};
    }
    out.args.push_back(tpk_arg_named(name, a));
  }
}

/* Runs the op on the stream and leaves its results on the stack; Refused
 * (nothing written) when it cannot. */
void stream_route(State &s, const c10::OperatorHandle &op, torch::jit::Stack *stack, const Plan &plan) {
  const c10::FunctionSchema &schema = op.schema();
  size_t nargs = schema.arguments().size(), first = stack->size() - nargs;
  for (size_t i = first; i < stack->size(); i++) { /* every tensor a dtype tpk has (or an index) */
    const c10::IValue &v = (*stack)[i];
    if (v.isTensor() && is_tpk(v.toTensor()) && !tpk_dtype(v.toTensor().scalar_type()) &&
        !(v.toTensor().scalar_type() == at::kLong && is_index(schema.arguments()[i - first])))
      throw Refused{std::string("tpk has no ") + c10::toString(v.toTensor().scalar_type())};
  }
  ResultTypes types;
  if (plan.kind == Plan::FUNCTIONAL) {
    types = result_types(op, *stack, first);
    if (!types.ok) throw Refused{"its results are not tensors tpk makes"};
    for (at::ScalarType t : types.types)
      if (!tpk_dtype(t)) throw Refused{std::string("ATen's result is ") + c10::toString(t)};
  }
  Temps temps;
  Args args;
  convert_args(s, schema, *stack, first, args, temps);
  TpkBuffer *outs[16] = {};
  int n = submit(s, plan.name.c_str(), args.args.data(), (int)args.args.size(), outs, 16, temps);
  size_t nret = schema.returns().size();
  if (plan.kind == Plan::OUT) {
    if ((size_t)n < plan.outs.size()) throw Refused{"fewer results than out= arguments"};
    std::vector<c10::IValue> results;
    for (size_t j = 0; j < plan.outs.size(); j++) {
      const at::Tensor &dst = (*stack)[first + plan.outs[j]].toTensor();
      if (!is_tpk(dst) || !tpk_dtype(dst.scalar_type()) || !outs[j]) throw Refused{"an out= tensor tpk cannot write"};
    }
    for (size_t j = 0; j < plan.outs.size(); j++) {
      const at::Tensor &dst = (*stack)[first + plan.outs[j]].toTensor();
      c10::IntArrayRef shape(tpk_buffer_shape(outs[j]), tpk_buffer_rank(outs[j]));
      if (dst.sizes() != shape) at::native::resize_(dst, shape, std::nullopt); /* out='s rule: resized to the result */
      write_into(s, dst, outs[j], temps);
      results.push_back((*stack)[first + plan.outs[j]]);
    }
    torch::jit::drop(*stack, nargs);
    for (size_t j = 0; j < nret && j < results.size(); j++) stack->push_back(results[j]);
    return;
  }
  if (plan.kind == Plan::INPLACE) {
    if (n < 1 || !outs[0]) throw Refused{"no result"};
    c10::IValue self = (*stack)[first];
    write_into(s, self.toTensor(), outs[0], temps);
    torch::jit::drop(*stack, nargs);
    if (nret) stack->push_back(self);
    return;
  }
  if ((size_t)n != nret) throw Refused{"a different number of results than ATen's"};
  for (size_t j = 0; j < nret; j++)
    if (outs[j] && torch_dtype(tpk_buffer_dtype(outs[j])) != types.types[j])
      throw Refused{std::string("its result is ") + tpk_dtype_name(tpk_buffer_dtype(outs[j])) + " where ATen's is " +
                    c10::toString(types.types[j])};
  std::vector<at::Tensor> made;
  for (size_t j = 0; j < nret; j++) {
    const std::vector<int64_t> &order = j < types.orders.size() ? types.orders[j] : std::vector<int64_t>{};
    if (!outs[j] || order.empty() || order.size() != (size_t)tpk_buffer_rank(outs[j])) {
      made.push_back(outs[j] ? tensor_of(temps.give(outs[j])) : at::Tensor());
      continue;
    }
    /* ATen's layout: the result permuted into memory order, seen back through a view */
    TpkBuffer *memory = submit1(s, "permute", {tpk_arg_buffer(outs[j]), ints_arg(order)}, temps);
    std::vector<int64_t> back(order.size());
    for (size_t d = 0; d < order.size(); d++) back[(size_t)order[d]] = (int64_t)d;
    made.push_back(tensor_of(temps.give(memory)).permute(back));
  }
  torch::jit::drop(*stack, nargs);
  for (at::Tensor &t : made) stack->push_back(std::move(t));
}

/* ---- the fallback: every ATen op the shim does not register ----------------------------- */

void fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const c10::FunctionSchema &schema = op.schema();
  if (only_views(schema) || reads_no_bytes(schema)) return cpu_route(op, stack);
  State &s = state();
  std::string why;
  {
    std::lock_guard<std::recursive_mutex> hold(s.mu);
    static std::unordered_map<const void *, Plan> plans;
    auto it = plans.find(&schema);
    if (it == plans.end()) it = plans.emplace(&schema, make_plan(schema)).first;
    const Plan &plan = it->second;
    if (plan.kind == Plan::NONE) {
      why = plan.why;
    } else {
      TORCH_CHECK(s.stream, "the tpk device is not set up: import tpk.torch first");
      try {
        stream_route(s, op, stack, plan);
        return;
      } catch (const Refused &r) {
        why = "tpk refused it: " + r.why;
      }
    }
  }
  note_cpu_op(op, why);
  cpu_route(op, stack);
}

/* ---- binary ops without boxing -------------------------------------------------------------
 *
 * add, sub, mul and div of two tpk tensors of one float dtype, the bulk of a
 * training step's small ops, are registered unboxed: boxing their tensors
 * (the fallback's stack) costs PyTorch a round trip through the GIL per
 * tensor and per reference (their Python objects' counts), more than tpk's
 * own work on a small op. They go to the stream as the fallback would send
 * them (the same op and arguments, so the same keys); anything else (a CPU
 * scalar, mixed dtypes, an op tpk refuses) takes the boxed fallback. */

/* The op on the stream, or nothing when this way does not take it. */
std::optional<at::Tensor> binary_on_stream(const char *name, const at::Tensor &a, const at::Tensor &b,
                                           const c10::Scalar *alpha) {
  at::ScalarType t = a.scalar_type();
  if (!is_tpk(a) || !is_tpk(b) || b.scalar_type() != t || (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf))
    return std::nullopt;
  if (alpha && !alpha->isIntegral(false) && !alpha->isFloatingPoint()) return std::nullopt;
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  if (!s.stream) return std::nullopt;
  try {
    Temps temps;
    TpkArg args[3];
    int n = 0;
    args[n++] = tpk_arg_named("self", tpk_arg_buffer(read_buffer(s, a, temps)));
    args[n++] = tpk_arg_named("other", tpk_arg_buffer(read_buffer(s, b, temps)));
    if (alpha) args[n++] = tpk_arg_named("alpha", alpha->isFloatingPoint() ? tpk_arg_float(alpha->toDouble()) : tpk_arg_int(alpha->toLong()));
    TpkBuffer *out = nullptr;
    if (submit(s, name, args, n, &out, 1, temps) != 1 || !out || torch_dtype(tpk_buffer_dtype(out)) != t) return std::nullopt;
    return tensor_of(temps.give(out));
  } catch (const Refused &) {
    return std::nullopt;
  }
}

/* The op through the boxed fallback, as if it had not been registered here. */
at::Tensor boxed(const char *name, const char *overload, std::initializer_list<c10::IValue> args) {
  static std::unordered_map<std::string, c10::OperatorHandle> handles;
  std::string key = std::string(name) + "." + overload;
  auto it = handles.find(key);
  if (it == handles.end()) it = handles.emplace(key, c10::Dispatcher::singleton().findSchemaOrThrow(name, overload)).first;
  torch::jit::Stack stack(args);
  fallback(it->second, &stack);
  return stack.back().toTensor();
}

at::Tensor add_tensor(const at::Tensor &a, const at::Tensor &b, const c10::Scalar &alpha) {
  if (auto r = binary_on_stream("add.Tensor", a, b, &alpha)) return *r;
  return boxed("aten::add", "Tensor", {a, b, alpha});
}

at::Tensor sub_tensor(const at::Tensor &a, const at::Tensor &b, const c10::Scalar &alpha) {
  if (auto r = binary_on_stream("sub.Tensor", a, b, &alpha)) return *r;
  return boxed("aten::sub", "Tensor", {a, b, alpha});
}

at::Tensor mul_tensor(const at::Tensor &a, const at::Tensor &b) {
  if (auto r = binary_on_stream("mul.Tensor", a, b, nullptr)) return *r;
  return boxed("aten::mul", "Tensor", {a, b});
}

at::Tensor div_tensor(const at::Tensor &a, const at::Tensor &b) {
  if (auto r = binary_on_stream("div.Tensor", a, b, nullptr)) return *r;
  return boxed("aten::div", "Tensor", {a, b});
}

/* The ATen ops tpk has (tpk_graph_op_known), registered for PrivateUse1 by name so that the
 * dispatcher sends them here as they are (the fallback would see add.Tensor
 * as empty + add.out, a CompositeExplicitAutograd decomposition, and
 * native_layer_norm as batch norm): those with a kernel of their own for the
 * CPU, which every backend then has (composite ones keep decomposing:
 * their autograd is their decomposition's), that write nothing but
 * themselves. Their autograd is at the Autograd key, as for any backend. */
std::vector<std::string> register_vocabulary() {
  static torch::Library *library = nullptr;
  std::vector<std::string> names;
  if (library) return names;
  library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  c10::Dispatcher &d = c10::Dispatcher::singleton();
  for (const c10::OperatorName &name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || !tpk_graph_op_known(name.name.c_str())) continue;
    std::optional<c10::OperatorHandle> op = d.findOp(name);
    if (!op || only_views(op->schema())) continue;
    Plan::Kind kind = make_plan(op->schema()).kind;
    if ((kind != Plan::FUNCTIONAL && kind != Plan::INPLACE) || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
      continue;
    std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
    names.push_back(qualified);
  }
  return names;
}

/* ---- kernels registered for PrivateUse1 ------------------------------------------------------ */

void check_factory(std::optional<c10::Layout> layout, std::optional<c10::Device> dev, std::optional<bool> pin) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "tpk tensors are strided");
  TORCH_CHECK(!dev || (dev->type() == kTpk && dev->index() <= 0), "tpk has one device, tpk:0, not ", *dev);
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "pinned memory is the CPU's");
}

/* A new contiguous tensor: a buffer of its dtype and shape when tpk has the
 * dtype, so that ops take the buffer as it is; else bytes. */
at::Tensor empty_contiguous(c10::IntArrayRef size, at::ScalarType dtype) {
  std::optional<TpkDType> t = tpk_dtype(dtype);
  if (!t || size.size() > TPK_MAX_DIMS)
    return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, std::nullopt);
  TpkBuffer *b;
  if (tpk_buffer_create(device(), *t, (int)size.size(), size.data(), &b) != TPK_OK) fail_tpk("allocating a tensor");
  return tensor_of(b);
}

/* Strides that lay size out row-major (a dimension of size 1 may have any). */
bool row_major(c10::IntArrayRef size, c10::IntArrayRef stride) {
  int64_t step = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != step) return false;
    step *= size[d];
  }
  return true;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                               std::optional<c10::Device> dev, std::optional<bool> pin,
                               std::optional<c10::MemoryFormat> format) {
  check_factory(layout, dev, pin);
  at::ScalarType st = c10::dtype_or_default(dtype);
  c10::MemoryFormat mf = format.value_or(c10::MemoryFormat::Contiguous);
  if (mf == c10::MemoryFormat::Contiguous || mf == c10::MemoryFormat::Preserve) return empty_contiguous(size, st);
  return at::detail::empty_generic(size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st, format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> dev, std::optional<bool> pin) {
  check_factory(layout, dev, pin);
  at::ScalarType st = c10::dtype_or_default(dtype);
  if (row_major(size, stride)) return empty_contiguous(size, st);
  return at::detail::empty_strided_generic(size, stride, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

at::Tensor view(const at::Tensor &self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor as_strided(const at::Tensor &self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           offset ? std::optional<int64_t>(offset->expect_int()) : std::nullopt);
}

at::Tensor reshape_alias(const at::Tensor &self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

/* A resize copies the old bytes on the host: they are settled first. */
const at::Tensor &resize(const at::Tensor &self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat> format) {
  sync();
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), format);
}

at::Tensor &set_storage(at::Tensor &self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor &set_storage_offset(at::Tensor &self, c10::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor &set_tensor(at::Tensor &self, const at::Tensor &source) { return at::native::set_tensor_(self, source); }

/* copy_ between tpk and the CPU, and within tpk (copy_ sends every copy
 * that involves a device it does not know here). */
at::Tensor copy_from(const at::Tensor &src, const at::Tensor &dst, bool non_blocking) {
  (void)non_blocking; /* every copy is synchronous for the CPU's side */
  if (is_tpk(src) && !is_tpk(dst)) {
    sync();
    Aliases aliases;
    const_cast<at::Tensor &>(dst).copy_(aliases.of(src));
    return dst;
  }
  if (!is_tpk(src) && is_tpk(dst)) {
    TpkBuffer *b = buffer_of(dst.storage());
    if (b && covers_storage(dst) && src.dtype() == dst.dtype() && src.sizes() == dst.sizes() && src.is_contiguous()) {
      /* the pending ops that read the old bytes run first */
      std::lock_guard<std::recursive_mutex> hold(state().mu);
      if (tpk_buffer_write(b, src.const_data_ptr(), tpk_buffer_bytes(b)) != TPK_OK) fail_tpk("copying to the device");
      return dst;
    }
    sync();
    Aliases aliases;
    aliases.of(dst).copy_(src);
    return dst;
  }
  { /* within the device: on the stream (read, converted, broadcast, written) */
    State &s = state();
    std::lock_guard<std::recursive_mutex> hold(s.mu);
    try {
      TORCH_CHECK(s.stream, "the tpk device is not set up: import tpk.torch first");
      if (!tpk_dtype(dst.scalar_type())) throw Refused{std::string("tpk has no ") + c10::toString(dst.scalar_type())};
      Temps temps;
      write_into(s, dst, read_buffer(s, src, temps), temps);
      return dst;
    } catch (const Refused &) {
      /* dtypes tpk lacks (int64, float64): their bytes, copied on the host */
    }
  }
  sync();
  Aliases aliases;
  aliases.of(dst).copy_(aliases.of(src));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor &src, const at::Tensor &dst) {
  resize(dst, src.sym_sizes(), std::nullopt);
  return copy_from(src, dst, false);
}

/* arange into a tpk tensor (torch.arange(T, device="tpk"): int64
 * positions, which tpk keeps as bytes): its values made on the host and
 * written into the buffer as a copy from the CPU is, so the stream does not
 * sync (the CPU fallback syncs before any op it runs). */
at::Tensor &arange_out(const at::Scalar &start, const at::Scalar &end, const at::Scalar &step, at::Tensor &out) {
  at::Tensor values = at::arange(start, end, step, out.options().device(at::kCPU));
  if (out.sizes() != values.sizes()) resize(out, values.sym_sizes(), std::nullopt);
  out.copy_(values);
  return out;
}

/* .item(): a sync point */
at::Scalar local_scalar_dense(const at::Tensor &self) {
  sync();
  Aliases aliases;
  return at::_local_scalar_dense(aliases.of(self));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("view", view);
  m.impl("as_strided", as_strided);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("arange.start_out", arange_out);
  m.impl("add.Tensor", add_tensor);
  m.impl("sub.Tensor", sub_tensor);
  m.impl("mul.Tensor", mul_tensor);
  m.impl("div.Tensor", div_tensor);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

/* ---- .tpk kernels on tpk tensors (tpk.torch.load's ops) ------------------------------------ */

/* Kernel `kernel` (a TpkKernel's address: tpk.Kernel._handle) on the
 * stream (tpk_stream_call), so it runs in the stream's mode, fused with its
 * neighbours in a fused window. `tensors` are its `in` and `inout`
 * parameters and `scalars` its scalars, each in declaration order; `inout`
 * tensors are written in place (as an in-place op's self); the results are
 * its `out` tensors, in order. */
std::vector<at::Tensor> call_kernel(int64_t kernel, c10::string_view op, at::TensorList tensors, c10::ArrayRef<c10::Scalar> scalars) {
  auto *k = reinterpret_cast<TpkKernel *>(kernel);
  std::string name(op);
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  TORCH_CHECK(s.stream, "the tpk device is not set up: import tpk.torch first");
  Temps temps;
  std::vector<TpkArg> args;
  std::vector<int> results; /* per result: the tensor it writes (inout), or -1 (out) */
  size_t t = 0, x = 0;
  try {
    for (int i = 0; i < tpk_kernel_param_count(k); i++) {
      TpkParamKind kind = tpk_kernel_param_kind(k, i);
      if (kind == TPK_PARAM_KIND_OUTPUT) {
        results.push_back(-1);
      } else if (kind == TPK_PARAM_KIND_SCALAR) {
        TORCH_CHECK(x < scalars.size(), "tpk: kernel '", name, "': too few scalars");
        const c10::Scalar &v = scalars[x++];
        TpkDType dt = tpk_kernel_param_dtype(k, i);
        if (dt == TPK_BOOL) args.push_back(tpk_arg_bool(v.toBool()));
        else if (dt == TPK_I32 || dt == TPK_I16 || dt == TPK_I8 || dt == TPK_U8) args.push_back(tpk_arg_int(v.toLong()));
        else args.push_back(tpk_arg_float(v.toDouble()));
      } else {
        TORCH_CHECK(t < tensors.size(), "tpk: kernel '", name, "': too few tensors");
        const at::Tensor &v = tensors[t];
        TORCH_CHECK(is_tpk(v), "tpk: kernel '", name, "': '", tpk_kernel_param_name(k, i), "' is on ", v.device(), ", not tpk");
        if (kind == TPK_PARAM_KIND_INOUT) results.push_back((int)t);
        args.push_back(tpk_arg_buffer(read_buffer(s, v, temps)));
        t++;
      }
    }
  } catch (const Refused &r) {
    TORCH_CHECK(false, "tpk: kernel '", name, "' cannot read its arguments on the device: ", r.why);
  }
  TpkBuffer *outs[16] = {};
  int n = 0;
  if (tpk_stream_call(s.stream, k, args.data(), (int)args.size(), outs, 16, &n) != TPK_OK) fail_tpk(name.c_str());
  for (int j = 0; j < n && j < 16; j++)
    if (outs[j]) temps.keep(outs[j]);
  TORCH_CHECK((size_t)n == results.size(), "tpk: kernel '", name, "' gave ", n, " results, not ", results.size());
  std::vector<at::Tensor> made;
  try {
    for (size_t j = 0; j < results.size(); j++) {
      if (results[j] < 0) made.push_back(tensor_of(temps.give(outs[j])));
      else write_into(s, tensors[(size_t)results[j]], outs[j], temps);
    }
  } catch (const Refused &r) {
    TORCH_CHECK(false, "tpk: kernel '", name, "': ", r.why);
  }
  return made;
}

/* Kernel `kernel` launched on tpk tensors' own buffers, after a sync (a
 * torch.compile(backend="tpk") graph on tpk tensors: tpk/backend.py):
 * `tensors` are its tensor parameters in declaration order, outputs
 * included (written in place), each contiguous; it has no scalars. On a
 * sim device the launch is timed (and recorded when profiling, as `op`);
 * returns its simulated seconds (0 on the host). */
void observe(void *, const TpkStreamLaunch *l);

double launch_kernel(int64_t kernel, c10::string_view op, at::TensorList tensors) {
  auto *k = reinterpret_cast<TpkKernel *>(kernel);
  std::string name(op);
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  sync_locked(s);
  int np = tpk_kernel_param_count(k);
  TORCH_CHECK((size_t)np == tensors.size(), "tpk: ", name, " takes ", np, " tensors, got ", tensors.size());
  std::vector<TpkBuffer *> args((size_t)np), views;
  auto release = [&] {
    for (TpkBuffer *v : views) tpk_buffer_destroy(v);
  };
  for (int i = 0; i < np; i++) {
    const at::Tensor &t = tensors[(size_t)i];
    TpkDType want = tpk_kernel_param_dtype(k, i);
    TpkBuffer *b = is_tpk(t) ? buffer_of(t.storage()) : nullptr;
    if (!b || !t.is_contiguous() || tpk_kernel_param_kind(k, i) == TPK_PARAM_KIND_SCALAR || tpk_dtype(t.scalar_type()) != want) {
      release();
      TORCH_CHECK(false, "tpk: ", name, ": '", tpk_kernel_param_name(k, i), "' must be a contiguous tpk tensor of ",
                  tpk_dtype_name(want), ", got ", t.toString(), " on ", t.device());
    }
    if (tpk_buffer_dtype(b) == want && t.storage_offset() == 0 && same_shape(b, t.sizes())) {
      args[(size_t)i] = b;
      continue;
    }
    TpkBuffer *v;
    if (tpk_buffer_view(b, (size_t)t.storage_offset() * tpk_dtype_size(want), want, t.dim(), t.sizes().data(), &v) != TPK_OK) {
      release();
      fail_tpk(name.c_str());
    }
    views.push_back(args[(size_t)i] = v);
  }
  TpkLaunchResult r{};
  TpkLaunch L = {};
  L.args = args.data();
  L.result = &r;
  TpkStatus st = tpk_kernel_launch(k, &L);
  release();
  if (st != TPK_OK) fail_tpk(name.c_str());
  if (s.profiling) {
    TpkStreamLaunch l = {name.c_str(), 0, -1, 1, &r};
    observe(nullptr, &l);
  }
  return r.simulated ? r.sim.seconds : 0.0;
}

/* An int64 tensor's values as a new i32 tensor (a compiled graph's int64
 * input: ids, targets), or None when one does not fit (the graph then runs
 * in PyTorch). Read on the host after a sync, as no op of tpk's reads
 * int64; the graph's launch syncs anyway. */
std::optional<at::Tensor> int64_as_i32(const at::Tensor &t) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() <= TPK_MAX_DIMS, "tpk: int64_as_i32 takes an int64 tensor, got ", t.toString());
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  sync_locked(s);
  Aliases aliases;
  std::optional<at::Tensor> i32 = fitting_i32(aliases.of(t));
  if (!i32) return std::nullopt;
  TpkBuffer *b = host_copy(s, at::kInt, *i32);
  if (!b) fail_tpk("int64_as_i32");
  return tensor_of(b);
}

TORCH_LIBRARY(tpk_device, m) {
  m.def("call(int kernel, str op, Tensor[] tensors, Scalar[] scalars) -> Tensor[]");
  m.def("launch(int kernel, str op, Tensor[] tensors) -> float");
  m.def("int64_as_i32(Tensor t) -> Tensor?");
}

TORCH_LIBRARY_IMPL(tpk_device, PrivateUse1, m) {
  m.impl("call", call_kernel);
  m.impl("launch", launch_kernel);
  m.impl("int64_as_i32", int64_as_i32);
}

/* ---- the Python module ------------------------------------------------------------------- */

PyObject *raise_error(const char *what) {
  PyErr_SetString(PyExc_RuntimeError, what);
  return nullptr;
}

/* The stream's observer while profiling (tpk_stream_observe). */
void observe(void *, const TpkStreamLaunch *l) {
  const TpkLaunchResult *r = l->result;
  const TpkSimStats &m = r->sim;
  Record &rec = record();
  std::lock_guard<std::mutex> hold(rec.mu);
  rec.launches.push_back({l->label, r->tier ? r->tier : "", l->first, l->last, l->kernels, r->simulated, m.seconds, m.flops,
                          m.matmul_flops, m.hbm_bytes, m.mxu_utilisation, m.vpu_utilisation, m.hbm_utilisation});
}

/* A new stream on the current device in the context's mode, the old one
 * synced and destroyed (its counts kept). */
bool replace_stream(State &s, TpkDevice *dev) {
  if (s.stream) {
    if (tpk_stream_sync(s.stream) != TPK_OK) return false;
    TpkStreamStats st;
    tpk_stream_stats(s.stream, &st);
    s.past.ops += st.ops, s.past.launches += st.launches, s.past.windows += st.windows, s.past.compiles += st.compiles;
    s.past.cache_hits += st.cache_hits, s.past.sim_seconds += st.sim_seconds;
    tpk_stream_destroy(s.stream);
    s.stream = nullptr;
  }
  s.dev = dev;
  if (tpk_stream_create(dev, &s.stream) != TPK_OK) return false;
  if (s.profiling) tpk_stream_observe(s.stream, observe, nullptr);
  return true;
}

PyObject *set_device(PyObject *, PyObject *name) {
  const char *text = PyUnicode_AsUTF8(name);
  if (!text) return nullptr;
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  if (!s.ctx) return raise_error("tpk._torch_device.init has not run");
  TpkDevice *dev;
  if (tpk_device_open(s.ctx, text, &dev) != TPK_OK || !replace_stream(s, dev)) return raise_error(tpk_last_error());
  Py_RETURN_NONE;
}

/* tpk's host launches on torch's intra-op threads
 * (tpk_context_set_host_parallel): PyTorch's OpenMP workers spin for a
 * while after each op, on the cores tpk's own workers would need; lent,
 * they run tpk's parts instead, as they run Inductor's kernels. Only for
 * launches from the thread that set the device up (where torch.compile's
 * graphs run): another thread entering OpenMP would start a second team of
 * spinning workers, so the eager stream's queue keeps tpk's workers. */
std::thread::id lending_thread;
std::atomic<int64_t> lent_launches{0}; /* launches whose parts ran there (stats) */

int run_on_torch_threads(void *, int parts, TpkHostPartFn part, void *arg) {
  if (std::this_thread::get_id() != lending_thread) return 0;
  lent_launches.fetch_add(1, std::memory_order_relaxed);
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) part(arg, (int)i);
  });
  return 1;
}

PyObject *init(PyObject *, PyObject *args) {
  PyObject *capsule, *name;
  int fallback;
  if (!PyArg_ParseTuple(args, "OUp:init", &capsule, &name, &fallback)) return nullptr;
  auto *ctx = static_cast<TpkContext *>(PyCapsule_GetPointer(capsule, "tpk._C.context"));
  if (!ctx) return nullptr;
  {
    State &s = state();
    std::lock_guard<std::recursive_mutex> hold(s.mu);
    s.ctx = ctx;
    s.fallback = fallback;
  }
  lending_thread = std::this_thread::get_id();
  tpk_context_set_host_parallel(ctx, run_on_torch_threads, nullptr);
  PyObject *r = set_device(nullptr, name);
  if (!r) return nullptr;
  Py_DECREF(r);
  std::vector<std::string> names;
  try {
    names = register_vocabulary();
  } catch (const c10::Error &e) {
    return raise_error(e.what_without_backtrace());
  }
  PyObject *list = PyList_New((Py_ssize_t)names.size());
  for (size_t i = 0; list && i < names.size(); i++) {
    PyObject *n = PyUnicode_FromString(names[i].c_str());
    if (!n) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, n);
  }
  return list;
}

PyObject *device_name(PyObject *, PyObject *) {
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  return s.dev ? PyUnicode_FromString(tpk_device_name(s.dev)) : raise_error("the tpk device is not set up");
}

PyObject *set_eager_mode(PyObject *, PyObject *name) {
  const char *text = PyUnicode_AsUTF8(name);
  if (!text) return nullptr;
  int mode = -1;
  for (int m = TPK_EAGER_DEBUG; m <= TPK_EAGER_FUSED; m++)
    if (!strcmp(text, tpk_eager_mode_name((TpkEagerMode)m))) mode = m;
  if (mode < 0) {
    PyErr_Format(PyExc_ValueError, "an eager mode is debug, strict or fused, not %R", name);
    return nullptr;
  }
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  if (!s.dev) return raise_error("the tpk device is not set up");
  if (tpk_context_set_eager_mode(s.ctx, (TpkEagerMode)mode) != TPK_OK || !replace_stream(s, s.dev))
    return raise_error(tpk_last_error());
  Py_RETURN_NONE;
}

PyObject *eager_mode(PyObject *, PyObject *) {
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  return s.stream ? PyUnicode_FromString(tpk_eager_mode_name(tpk_stream_mode(s.stream)))
                  : raise_error("the tpk device is not set up");
}

PyObject *synchronize(PyObject *, PyObject *) {
  std::string error;
  Py_BEGIN_ALLOW_THREADS try {
    sync();
  } catch (const c10::Error &e) {
    error = e.what_without_backtrace();
  }
  Py_END_ALLOW_THREADS if (!error.empty()) return raise_error(error.c_str());
  Py_RETURN_NONE;
}

PyObject *set_fallback(PyObject *, PyObject *on) {
  int v = PyObject_IsTrue(on);
  if (v < 0) return nullptr;
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  s.fallback = v;
  Py_RETURN_NONE;
}

/* What the device did: the streams' counts (tpk_stream_stats) and the ops
 * that ran on the CPU. */
PyObject *stats(PyObject *, PyObject *) {
  State &s = state();
  std::lock_guard<std::recursive_mutex> hold(s.mu);
  TpkStreamStats st = s.past, now{};
  if (s.stream) tpk_stream_stats(s.stream, &now);
  PyObject *ops = PyList_New(0);
  for (const std::string &name : s.warned) {
    PyObject *n = PyUnicode_FromString(name.c_str());
    if (!n || PyList_Append(ops, n) < 0) {
      Py_XDECREF(n);
      Py_DECREF(ops);
      return nullptr;
    }
    Py_DECREF(n);
  }
  if (PyList_Sort(ops) < 0) return nullptr;
  return Py_BuildValue("{sLsLsLsLsLsdsLsNsL}", "ops", (long long)(st.ops + now.ops), "launches",
                       (long long)(st.launches + now.launches), "windows", (long long)(st.windows + now.windows), "compiles",
                       (long long)(st.compiles + now.compiles), "cache_hits", (long long)(st.cache_hits + now.cache_hits),
                       "sim_seconds", st.sim_seconds + now.sim_seconds, "cpu_ops", (long long)s.cpu_ops, "cpu_op_names", ops,
                       "torch_thread_launches", (long long)lent_launches.load());
}

/* profile(on) -> the launches recorded since profiling began, each a tuple
 * (label, first, last, kernels, tier, simulated, seconds, flops,
 * matmul_flops, hbm_bytes, mxu, vpu, hbm utilisation), after a sync;
 * profile(True) starts a new record, profile(False) stops. */
PyObject *profile(PyObject *, PyObject *on) {
  int v = PyObject_IsTrue(on);
  if (v < 0) return nullptr;
  std::string error;
  std::vector<Launch> taken;
  Py_BEGIN_ALLOW_THREADS try {
    State &s = state();
    std::lock_guard<std::recursive_mutex> hold(s.mu);
    try {
      sync_locked(s); /* what was submitted before is the ending profile's */
    } catch (const c10::Error &e) {
      error = e.what_without_backtrace();
    }
    {
      std::lock_guard<std::mutex> r(record().mu);
      taken.swap(record().launches);
    }
    s.profiling = v;
    if (s.stream) tpk_stream_observe(s.stream, v ? observe : nullptr, nullptr);
  } catch (const c10::Error &e) {
    error = e.what_without_backtrace();
  }
  Py_END_ALLOW_THREADS if (!error.empty()) return raise_error(error.c_str());
  PyObject *list = PyList_New((Py_ssize_t)taken.size());
  for (size_t i = 0; list && i < taken.size(); i++) {
    const Launch &l = taken[i];
    PyObject *t = Py_BuildValue("(sLLLsNddddddd)", l.label.c_str(), (long long)l.first, (long long)l.last,
                                (long long)l.kernels, l.tier.c_str(), PyBool_FromLong(l.simulated), l.seconds, l.flops,
                                l.matmul_flops, l.hbm_bytes, l.mxu, l.vpu, l.hbm);
    if (!t) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  return list;
}

/* generator_seed(seed) seeds the device's generator; generator_seed(None)
 * seeds it from the OS; either way the seed is returned. */
PyObject *generator_seed(PyObject *, PyObject *seed) {
  uint64_t v;
  if (seed == Py_None) {
    v = c10::detail::getNonDeterministicRandom();
  } else {
    v = PyLong_AsUnsignedLongLongMask(seed);
    if (PyErr_Occurred()) return nullptr;
  }
  at::Generator &g = generator();
  std::lock_guard<std::mutex> hold(g.mutex());
  g.set_current_seed(v);
  return PyLong_FromUnsignedLongLong(v);
}

PyObject *generator_initial_seed(PyObject *, PyObject *) {
  at::Generator &g = generator();
  std::lock_guard<std::mutex> hold(g.mutex());
  return PyLong_FromUnsignedLongLong(g.current_seed());
}

/* The generator's state as bytes (torch.tpk.get_rng_state), or, given
 * bytes, set from them. */
PyObject *generator_state(PyObject *, PyObject *args) {
  PyObject *state = nullptr;
  if (!PyArg_ParseTuple(args, "|O!:generator_state", &PyBytes_Type, &state)) return nullptr;
  at::Generator &g = generator();
  std::string error;
  PyObject *r = nullptr;
  try {
    std::lock_guard<std::mutex> hold(g.mutex());
    if (state) {
      at::Tensor t = at::detail::empty_cpu({(int64_t)PyBytes_GET_SIZE(state)}, at::kByte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
      std::memcpy(t.data_ptr(), PyBytes_AS_STRING(state), (size_t)PyBytes_GET_SIZE(state));
      g.set_state(t);
      Py_RETURN_NONE;
    }
    at::Tensor t = g.get_state();
    r = PyBytes_FromStringAndSize(static_cast<const char *>(t.data_ptr()), (Py_ssize_t)t.nbytes());
  } catch (const c10::Error &e) {
    return raise_error(e.what_without_backtrace());
  }
  return r;
}

PyMethodDef METHODS[] = {
    {"init", init, METH_VARARGS,
     "init(context_capsule, device, fallback) -> [ATen ops registered]: set the device up on tpk._C's context"},
    {"set_device", set_device, METH_O, "set_device(name): what tpk:0 is ('sim:v5e', 'host', ...)"},
    {"device", device_name, METH_NOARGS, "the name of the device tpk:0 is"},
    {"set_eager_mode", set_eager_mode, METH_O, "set_eager_mode('debug' | 'strict' | 'fused')"},
    {"eager_mode", eager_mode, METH_NOARGS, "the stream's eager mode"},
    {"synchronize", synchronize, METH_NOARGS, "run everything submitted; raise the first error"},
    {"set_fallback", set_fallback, METH_O, "set_fallback(bool): ops tpk does not have run on the CPU (else they raise)"},
    {"stats", stats, METH_NOARGS, "what the device did: the stream's counts, the ops that ran on the CPU"},
    {"generator_seed", generator_seed, METH_O, "generator_seed(seed | None) -> seed: seed the device's generator"},
    {"generator_initial_seed", generator_initial_seed, METH_NOARGS, "the seed of the device's generator"},
    {"generator_state", generator_state, METH_VARARGS, "generator_state([bytes]) -> bytes: the device generator's state (or set it)"},
    {"profile", profile, METH_O, "profile(on) -> [launch tuples] recorded until now: record the stream's launches (on) or stop"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "tpk._torch_device", "The tpk PyTorch device's C++ shim.", -1, METHODS,
                      nullptr, nullptr, nullptr, nullptr};

} // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &::sdp_choice)
} // namespace at::native

PyMODINIT_FUNC PyInit__torch_device(void) { return PyModule_Create(&MODULE); }
