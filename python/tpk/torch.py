"""`.tpk` kernels as PyTorch custom ops.

    import tpk.torch
    ops = tpk.torch.load("mykernels.tpk", namespace="mylib")
    y = torch.ops.mylib.softmax(x)          # or ops.softmax(x)

Each kernel of the file becomes the operator `namespace::kernel`, defined
with `torch.library`:

- its schema comes from the kernel's signature: tensor inputs are `Tensor`,
  scalars `float`/`int`/`bool`, `inout` parameters `Tensor(a!)` (mutated in
  place, nothing returned for them), outputs the returned tensors; a shape
  symbol that only outputs use (embedding_bwd's `V`) is a trailing `SymInt`;
- a fake implementation derived from the signature (output shapes from the
  shape symbols, dtypes from the outputs), so `torch.compile` and meta
  tensors see through the op, with `dynamic=True` too;
- a CPU kernel that runs the tpk kernel on the tensors' memory: no copies
  for contiguous tensors of the kernel's dtypes; other inputs are copied to
  contiguous memory first (`inout` ones are written back); a dtype that is
  not the kernel's is an error, never a silent cast;
- when the kernel names a backward kernel (`backward NAME` in its header),
  `register_autograd` with that kernel as the backward, itself an op of the
  same namespace; without one, backpropagating through the op is an error
  that says so, and an op with `inout` parameters refuses tensors that
  require grad.

The kernels run on `tpk`'s current device: the host unless a
`with tpk.device("sim:v5e"):` block says otherwise (`last_report` tells
what the latest run took there). `tpk.torch.std` is the standard library in
namespace `tpk` (`torch.ops.tpk.softmax`).
"""
import hashlib
import importlib.abc
import importlib.util
import re
import sys
import threading

import torch

import tpk

__all__ = ["load", "load_source", "last_report", "std", "Ops", "compile_report", "clear_compile_report", "set_device",
           "device_name", "set_eager_mode", "eager_mode", "synchronize", "set_fallback", "stats", "profile", "report",
           "Report"]

DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
    "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
    "u32": torch.uint32, "u16": torch.uint16,  # PyTorch's "limited support" unsigned types: storage, copies, views
}
FLOATS = ("f32", "f16", "bf16", "f8e4m3", "f8e5m2")
SCALAR_TYPES = {"bool": "bool", **{d: "float" for d in FLOATS}}  # the rest are "int"


class Dim:
    """One dimension of a parameter as the signature writes it: a symbol, a
    constant, or an expression of them ("B*H", "H-KH+1"), evaluated on ints
    or SymInts by tpk.dim_value."""

    def __init__(self, text, symbols):
        self.text = text
        self.symbol = text if text in symbols else None  # a bare symbol
        self.names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text)) - {"cdiv"}

    def value(self, syms):
        return tpk.dim_value(self.text, syms)


class Param:
    """A kernel parameter as the op sees it."""

    def __init__(self, index, p, symbols):
        self.index = index  # in the kernel's parameter list
        self.name = p.name
        self.kind = p.kind  # "in", "out", "inout", "scalar"
        self.dtype = p.dtype
        self.dims = tuple(Dim(d, symbols) for d in p.dims)

    @property
    def tensor(self):
        return self.kind != "scalar"


class OpKernel:
    """A tpk kernel, its op's schema, and how to call it."""

    def __init__(self, namespace, kernel):
        self.kernel = kernel
        self.name = kernel.name
        self.qualname = f"{namespace}::{kernel.name}"
        params = [Param(i, p, set(kernel.symbols)) for i, p in enumerate(kernel.params)]
        self.params = params
        self.args = [p for p in params if p.kind in ("in", "inout", "scalar")]
        self.outputs = [p for p in params if p.kind == "out"]
        # Symbols bound by the inputs' shapes: where each is first read.
        self.bound = {}
        for a in self.args:
            for d, dim in enumerate(a.dims):
                if dim.symbol and dim.symbol not in self.bound:
                    self.bound[dim.symbol] = (self.args.index(a), d)
        tunables = {t.name for t in kernel.tunables}
        self.extra = []  # symbols only outputs use: trailing SymInt arguments
        for o in self.outputs:
            for dim in o.dims:
                for s in sorted(dim.names):
                    if s in tunables:
                        raise tpk.TpkError(f"kernel '{self.name}': output '{o.name}' has a shape that depends on "
                                           f"the tunable '{s}', which a torch op cannot know before it runs")
                    if s not in self.bound and s not in self.extra:
                        self.extra.append(s)
        self.schema = self._schema()
        self._slots = None  # the CPU kernel's plan (_plan), made on its first call
        self.last_report = None  # of the latest launch, from any thread

    def _schema(self):
        args, alias = [], iter("abcdefghijklmnopqrstuvwxyz")
        for a in self.args:
            if a.kind == "scalar":
                args.append(f"{SCALAR_TYPES.get(a.dtype, 'int')} {a.name}")
            elif a.kind == "inout":
                args.append(f"Tensor({next(alias)}!) {a.name}")
            else:
                args.append(f"Tensor {a.name}")
        args += [f"SymInt {s}" for s in self.extra]
        outs = ", ".join("Tensor" for _ in self.outputs)
        ret = outs if len(self.outputs) == 1 else f"({outs})"
        return f"{self.name}({', '.join(args)}) -> {ret}"

    # ---- shapes ----

    def symbols(self, args):
        """Symbol name -> size from the inputs' shapes (and the trailing
        symbol arguments), ints or SymInts."""
        syms = {s: args[i].shape[d] for s, (i, d) in self.bound.items()}
        for s, v in zip(self.extra, args[len(self.args):]):
            syms[s] = v
        return syms

    def check(self, args):
        """What the kernel needs of the tensors (dtype, rank, sizes that must
        agree), as errors naming the parameter; in fake mode too, so
        torch.compile reports them while tracing."""
        device = None
        for a, v in zip(self.args, args):
            if not a.tensor:
                continue
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{self.qualname}: '{a.name}' must be a tensor, got {type(v).__name__}")
            if device is None:
                device = (a.name, v.device)
            elif v.device != device[1]:
                raise RuntimeError(f"{self.qualname}: '{device[0]}' is on {device[1]} but '{a.name}' on {v.device}; "
                                   f"a tpk op runs on tensors of one device")
            want = DTYPES[a.dtype]
            if v.dtype != want:
                raise TypeError(f"{self.qualname}: '{a.name}' must be {want} ({a.dtype}), got {v.dtype}")
            if v.dim() != len(a.dims):
                raise ValueError(f"{self.qualname}: '{a.name}' must have rank {len(a.dims)} "
                                 f"[{', '.join(d.text for d in a.dims)}], got shape {tuple(v.shape)}")
        syms, first = self.symbols(args), {}
        for a, v in zip(self.args, args):
            if not a.tensor:
                continue
            for d, dim in enumerate(a.dims):
                size = v.shape[d]
                if dim.symbol is None:
                    want_size = dim.value(syms) if dim.names <= syms.keys() else None
                    if want_size is not None:
                        torch._check(size == want_size, lambda a=a, d=d, dim=dim, size=size, w=want_size: (
                            f"{self.qualname}: '{a.name}' dim {d} ({dim.text}) must be {w}, got {size}"))
                elif dim.symbol in first:
                    other, od = first[dim.symbol]
                    torch._check(size == syms[dim.symbol], lambda a=a, d=d, dim=dim, size=size, other=other, od=od: (
                        f"{self.qualname}: shape symbol {dim.symbol} is {syms[dim.symbol]} from '{other}' "
                        f"(dim {od}) but {size} from '{a.name}' (dim {d})"))
                else:
                    first[dim.symbol] = (a.name, d)
        return syms

    def output_shapes(self, syms):
        return [tuple(d.value(syms) for d in o.dims) for o in self.outputs]

    # ---- the op's implementations ----

    def fake(self, *args):
        syms = self.check(args)
        ref = next(v for v in args if isinstance(v, torch.Tensor))
        outs = tuple(torch.empty(shape, dtype=DTYPES[o.dtype], device=ref.device)
                     for o, shape in zip(self.outputs, self.output_shapes(syms)))
        return self._result(outs)

    def _plan(self):
        """What the CPU kernel does on every call, worked out once: where
        each argument goes in the launch, and how each output's shape is
        read off the inputs (an input's whole shape, single sizes, or, for
        expressions, tpk.dim_value on the bound symbols)."""
        self._slots = [None] * len(self.params)
        self._tensor_args = [(j, a.index, a.kind == "inout", a.name) for j, a in enumerate(self.args) if a.tensor]
        self._scalar_args = [(j, a.index) for j, a in enumerate(self.args) if not a.tensor]
        plans = []
        for o in self.outputs:
            same = next((j for j, a in enumerate(self.args) if a.tensor and a.dims and
                         [d.text for d in a.dims] == [d.text for d in o.dims]), None)
            if same is not None:
                plans.append((o.index, DTYPES[o.dtype], same, None))
            elif all(d.symbol in self.bound or d.text.isdigit() for d in o.dims):
                sizes = [self.bound[d.symbol] if d.symbol in self.bound else int(d.text) for d in o.dims]
                plans.append((o.index, DTYPES[o.dtype], None, sizes))
            else:
                plans.append((o.index, DTYPES[o.dtype], None, None))
        self._out_plans = plans

    def cpu(self, *args):
        if self._slots is None:
            self._plan()
        launch = list(self._slots)
        writeback = None
        try:
            for j, index, inout, name in self._tensor_args:
                v = args[j]
                if not v.is_cpu:
                    raise RuntimeError(f"{self.qualname}: '{name}' is on {v.device}; tpk ops run on CPU tensors")
                if not v.is_contiguous():  # a documented copy (inout ones are written back)
                    c = v.contiguous()
                    if inout:
                        writeback = (writeback or []) + [(v, c)]
                    v = c
                launch[index] = v
            for j, index in self._scalar_args:
                launch[index] = args[j]
            outs, syms = [], None
            for index, dtype, same, sizes in self._out_plans:
                # (torch.empty_like of a contiguous tensor, or torch.empty of
                # int arguments: 1 us less than torch.empty of a torch.Size)
                if same is not None:
                    out = torch.empty_like(launch[self.args[same].index], dtype=dtype)
                else:
                    if sizes is not None:
                        shape = [s if type(s) is int else args[s[0]].shape[s[1]] for s in sizes]
                    else:
                        syms = syms or self.symbols(args)
                        shape = [int(d.value(syms)) for d in self.outputs[len(outs)].dims]
                    out = torch.empty(*shape, dtype=dtype)
                launch[index] = out
                outs.append(out)
        except (AttributeError, IndexError):  # not a tensor, or too few dims: say which
            self.check(args)
            raise
        if self.extra:
            syms = self.symbols(args)
            self.last_report = self.kernel.launch(launch, syms={s: int(syms[s]) for s in self.extra})
        else:
            self.last_report = self.kernel.launch(launch)
        if writeback:
            for v, c in writeback:
                v.copy_(c)
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def device(self, *args):
        """The kernel on tpk tensors: on the device's eager stream
        (tpk_stream_call through the shim), in its mode: fused with its
        neighbours in a fused window. A kernel with a symbol only outputs
        use (the stream has no way to bind it) runs on the CPU, on copies."""
        self.check(args)
        if self.extra:
            cpu = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
            outs = self.cpu(*cpu)
            for a, v, c in zip(self.args, args, cpu):
                if a.kind == "inout":
                    v.copy_(c)
            if outs is None:
                return None
            return outs.to(args[0].device) if isinstance(outs, torch.Tensor) else tuple(o.to(args[0].device) for o in outs)
        if self._slots is None:
            self._plan()
        tensors = [args[j] for j, _, _, _ in self._tensor_args]
        scalars = [args[j] for j, _ in self._scalar_args]
        outs = torch.ops.tpk_device.call(self.kernel._handle, self.qualname, tensors, scalars)
        return self._result(tuple(outs))

    def _result(self, outs):
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else outs


class Formula:
    """What register_autograd calls: setup_context, and backward, which
    gives the forward arguments' gradients (`gradients`, also called by the
    AutogradCPU kernel with its own needs_input_grad)."""

    def backward(self, ctx, *grads):
        return self.gradients(ctx, ctx.needs_input_grad, grads)


class Autograd(Formula):
    """register_autograd's two functions for a kernel with a backward
    kernel: which of the forward's inputs, outputs and output gradients the
    backward takes (by name), and which input gradients it gives."""

    def __init__(self, fwd, bwd, bwd_op):
        self.fwd, self.bwd, self.bwd_op = fwd, bwd, bwd_op
        arg_names = [a.name for a in fwd.args]
        out_names = [o.name for o in fwd.outputs]
        self.takes = []  # per backward argument: (source, index)
        for a in bwd.args:
            if a.name in arg_names:
                self.takes.append(("arg", arg_names.index(a.name), a))
            elif a.name in out_names:
                self.takes.append(("out", out_names.index(a.name), a))
            elif a.name.startswith("d") and a.name[1:] in out_names:
                self.takes.append(("grad", out_names.index(a.name[1:]), a))
            else:  # the checker refuses such a backward; say so if one slips by
                raise tpk.TpkError(f"backward kernel '{bwd.name}' of '{fwd.name}': '{a.name}' is neither an input "
                                   f"or output of '{fwd.name}' nor the gradient of an output")
        self.differentiable = {i for src, i, _ in self.takes if src == "grad"}
        self.gives = {}  # forward argument index -> backward output index
        for j, o in enumerate(bwd.outputs):
            self.gives[arg_names.index(o.name[1:])] = j
        # the backward's own output-only symbols, from the forward's symbols
        self.extra = list(bwd.extra)

    def setup_context(self, ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,) if output is not None else ()
        saved, where = [], []
        for src, i, _ in self.takes:
            if src == "arg" and isinstance(inputs[i], torch.Tensor):
                where.append(len(saved))
                saved.append(inputs[i])
            elif src == "out":
                where.append(len(saved))
                saved.append(outs[i])
            else:
                where.append(None)
        ctx.save_for_backward(*saved)
        ctx.tpk_where = where
        ctx.tpk_scalars = {i: inputs[i] for src, i, a in self.takes if src == "arg" and not a.tensor}
        syms = self.fwd.symbols(inputs)
        ctx.tpk_extra = [syms[s] for s in self.extra]
        ctx.tpk_outs = [(o.shape, o.dtype, o.device) for o in outs]
        nondiff = [o for i, o in enumerate(outs) if i not in self.differentiable]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)

    def gradients(self, ctx, needs, grads):
        """The forward arguments' gradients (None where not needed)."""
        saved = ctx.saved_tensors
        args = []
        for (src, i, a), w in zip(self.takes, ctx.tpk_where):
            if src == "grad":
                g = grads[i]
                if g is None:
                    shape, dtype, device = ctx.tpk_outs[i]
                    g = torch.zeros(shape, dtype=dtype, device=device)
                args.append(g.to(DTYPES[a.dtype]).contiguous())
            elif w is not None:
                args.append(saved[w])
            else:
                args.append(ctx.tpk_scalars[i])
        res = self.bwd_op(*args, *ctx.tpk_extra)
        res = res if isinstance(res, tuple) else (res,)
        out = [None] * (len(self.fwd.args) + len(self.fwd.extra))
        for i, j in self.gives.items():
            if needs[i]:
                out[i] = res[j].to(DTYPES[self.fwd.args[i].dtype])
        return tuple(out)


class NoBackward(Formula):
    """The autograd of a kernel that names no backward kernel: calls work,
    and backpropagating through its outputs is an error that says so (not a
    gradient silently missing)."""

    def __init__(self, fwd):
        self.fwd = fwd

    def setup_context(self, ctx, inputs, output):
        pass

    def gradients(self, ctx, needs, grads):
        raise RuntimeError(f"{self.fwd.qualname} has no backward kernel, so no gradient flows through it: name one "
                           f"with `backward NAME` in the kernel's header (dsl/README.md, \"Backward kernels\")")


_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
# What the dispatcher holds below autograd for a plain CPU tensor, when no
# mode, subclass or transform is in the way: only then is the CPU kernel
# what a redispatch would reach. (A key set's raw form is its bits, so the
# intersection is an `&` of ints: one call less than DispatchKeySet's.)
_AFTER_AUTOGRAD_BITS = _AFTER_AUTOGRAD.raw_repr()
_PLAIN_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU).raw_repr()


def below_autograd(op, keyset, args):
    """op run as the dispatcher would after its autograd key."""
    with torch._C._AutoDispatchBelowAutograd():
        return op.redispatch(keyset & _AFTER_AUTOGRAD, *args)


def autograd_cpu(k, formula, op):
    """The op's kernel at AutogradCPU, beside register_autograd's at
    Autograd, with the same formula: a call on plain CPU tensors that needs
    no gradient runs the CPU kernel at once (the generic autograd kernel
    costs some 5 us of Python and a second trip through the dispatcher per
    call); anything else goes the usual way."""

    def forward(ctx, keyset, *args):
        out = below_autograd(op, keyset, args)
        formula.setup_context(ctx, args, out)
        return out

    def backward(ctx, *grads):
        return (None,) + tuple(formula.gradients(ctx, ctx.needs_input_grad[1:], grads))

    function = type(f"TpkAutograd_{k.qualname.replace('::', '_')}", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    cpu, is_grad_enabled, any_requires_grad = k.cpu, torch._C.is_grad_enabled, torch._C._any_requires_grad

    def kernel(keyset, *args):
        if is_grad_enabled() and any_requires_grad(*args):
            return function.apply(keyset, *args)
        if keyset.raw_repr() & _AFTER_AUTOGRAD_BITS == _PLAIN_CPU:
            return cpu(*args)
        return below_autograd(op, keyset, args)

    return kernel


def autograd_mutating(k, op):
    """The Autograd kernel of a kernel with inout parameters (which has no
    backward: the checker refuses one): in place on tensors that need no
    gradient, and a clear error on ones that do, where PyTorch's fallback
    would mutate them behind autograd's back."""
    mutated = [a.name for a in k.args if a.kind == "inout"]

    def kernel(keyset, *args):
        if torch._C.is_grad_enabled() and torch._C._any_requires_grad(*args):
            raise RuntimeError(f"{k.qualname} writes {', '.join(repr(m) for m in mutated)} in place and has no "
                               f"backward: call it on tensors that do not require grad, or under torch.no_grad()")
        return below_autograd(op, keyset, args)

    return kernel


class Ops:
    """The ops of one program: `ops.softmax` is `torch.ops.<namespace>.softmax`."""

    def __init__(self, namespace, program, names):
        self.namespace = namespace
        self.program = program
        self.names = tuple(names)

    def __getattr__(self, name):
        if name in self.__dict__.get("names", ()):
            return getattr(getattr(torch.ops, self.namespace), name)
        raise AttributeError(f"no kernel '{name}' in namespace '{self.namespace}'")

    def __dir__(self):
        return list(self.names) + ["namespace", "program", "names"]

    def __iter__(self):
        return iter(self.names)

    def __repr__(self):
        return f"<tpk ops {self.namespace}: {', '.join(self.names)}>"


_lock = threading.Lock()
_libraries = {}  # namespace -> torch.library.Library (kept: it owns the registrations)
_defined = {}    # "ns::kernel" -> digest of the source that defined it
_ops = {}        # "ns::kernel" -> its OpKernel
_kept = []       # Autograd objects the registrations call


def last_report(op):
    """The tpk.Report of the latest run of a tpk op (from any thread), or
    None before one: the tier, the tunables, and on a simulated chip the
    time, utilisation and trace. `op` is "ns::kernel",
    torch.ops.ns.kernel or torch.ops.ns.kernel.default."""
    name = op if isinstance(op, str) else op._qualified_op_name if hasattr(op, "_qualified_op_name") else op.name()
    name = name.split(".")[0]
    if name not in _ops:
        raise KeyError(f"{name} is not an op tpk.torch defined")
    return _ops[name].last_report


def _register(namespace, program, digest):
    kernels = {name: OpKernel(namespace, program[name]) for name in program.kernel_names}
    with _lock:
        lib = _libraries.get(namespace)
        if lib is None:
            lib = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        new = []
        for k in kernels.values():
            had = _defined.get(k.qualname)
            if had == digest:
                continue  # the same source loaded again: its ops stand
            if had is not None:
                raise tpk.TpkError(f"{k.qualname} is already defined by another source; "
                                   f"load this file into another namespace")
            new.append(k)
        for k in new:
            lib.define(k.schema)
            lib.impl(k.name, k.cpu, "CPU")
            lib.impl(k.name, k.device, "PrivateUse1")  # tpk tensors: the device's stream
            torch.library.register_fake(k.qualname, k.fake, lib=lib)
            _defined[k.qualname] = digest
            _ops[k.qualname] = k
        space = getattr(torch.ops, namespace)
        for k in new:
            op = getattr(space, k.name).default
            if any(a.kind == "inout" for a in k.args):
                lib.impl(k.name, autograd_mutating(k, op), "Autograd", with_keyset=True)
                continue
            bwd_name = k.kernel.backward
            if bwd_name:
                bwd = kernels.get(bwd_name) or OpKernel(namespace, program[bwd_name])
                formula = Autograd(k, bwd, getattr(space, bwd_name))
            else:
                formula = NoBackward(k)
            torch.library.register_autograd(k.qualname, formula.backward, setup_context=formula.setup_context, lib=lib)
            lib.impl(k.name, autograd_cpu(k, formula, op), "AutogradCPU", with_keyset=True)
            _kept.append(formula)
    return Ops(namespace, program, kernels)


def load(path, namespace):
    """Define every kernel of the .tpk file at `path` as `torch.ops.<namespace>.<kernel>`."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return _register(namespace, tpk.load(path), digest)


def load_source(text, namespace, name="<source>"):
    """Define every kernel of .tpk source text as `torch.ops.<namespace>.<kernel>`."""
    return _register(namespace, tpk.load_source(text, name=name), hashlib.sha256(text.encode()).hexdigest())


_std = None

# ---- torch.compile(model, backend="tpk"): tpk/backend.py ----
#
# Dynamo costs over a second to import and a script that only defines ops
# should not pay for it: "tpk" is registered when Dynamo's backend registry
# is imported (by the first torch.compile), or now if it already is. The
# backend module is imported on the first compile.

def _compile_backend(gm, example_inputs, options=None, mode=None):
    from tpk import backend
    return backend.backend(gm, example_inputs, options=options, mode=mode)


def _register_backend(registry):
    if "tpk" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=_compile_backend, name="tpk")


class _RegisterWhenImported(importlib.abc.MetaPathFinder):
    """Registers the backend right after Dynamo's registry module runs."""

    NAME = "torch._dynamo.backends.registry"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register_backend(module)
        spec.loader.exec_module = exec_module
        return spec


if _RegisterWhenImported.NAME in sys.modules:
    _register_backend(sys.modules[_RegisterWhenImported.NAME])
else:
    sys.meta_path.insert(0, _RegisterWhenImported())


def compile_report():
    """What torch.compile(backend="tpk") compiled: tpk.backend.compile_report()."""
    from tpk import backend
    return backend.compile_report()


def clear_compile_report():
    """tpk.backend.clear_compile_report()."""
    from tpk import backend
    return backend.clear_compile_report()


def __getattr__(name):
    global _std
    if name == "std":  # defined on first use: some 40 ops
        if _std is None:
            _std = _register("tpk", tpk.std, "the standard library")
        return _std
    raise AttributeError(f"module 'tpk.torch' has no attribute '{name}'")


# The tpk device: PrivateUse1 as "tpk" (tpk/torch_device.py), registered here.
from .torch_device import (  # noqa: E402
    Report, device_name, eager_mode, profile, report, set_device, set_eager_mode, set_fallback, stats, synchronize)
