"""torch.compile(model, backend="tpk"): PyTorch models through tpk's graphs.

    import torch, tpk.torch                  # registers the backend (the package's
    f = torch.compile(model, backend="tpk")  # torch_dynamo_backends entry point does too)
    f = torch.compile(model, backend="tpk", options={"device": "sim:v5e"})
    with tpk.device("sim:v5e"):              # or where the call runs
        loss = f(x)
    tpk.torch.compile_report()               # the graphs, their IR and simulated time

Dynamo captures the model's FX graph; AOTAutograd (boxed compilers) traces
its forward and backward into ATen graphs with the core ATen decompositions,
minus the three that split scaled_dot_product_attention's forward while
keeping its backward whole (tools/aten_ops.py measured them). Each graph is
translated node by node into a tpk graph (tpk._C.Graph over tpk.h's
tpk_graph_*: ATen names map one to one; a `tpk.torch.load` op is a call of
its kernel), compiled once by tpk_graph_compile (fused into clusters,
lowered, cached by the IR's structure in the context's one compilation
cache) and launched as one kernel on the tensors' own memory.

- Nodes tpk cannot run (an op outside the vocabulary, a dtype tpk has not:
  float64, complex; an argument an op refuses) are partitioned out
  (CapabilityBasedPartitioner): the supported parts run in tpk, the rest in
  PyTorch, and a FallbackWarning names those ops once per process. No node
  is dropped.
- Sizes: a graph traced with dynamic shapes (dynamic=True, mark_dynamic)
  has SymInt sizes; they become tpk's shape symbols ("s0", "s0*s1"), so one
  compiled graph serves every size.
- Where it runs: options={"device": ...} fixes the device; otherwise each
  call runs on tpk.current_device() (the host, or a `tpk.device` block's).
- int64: tpk has no int64; int64 tensors are i32 in the graphs (indices,
  targets). Inputs are converted with a range check (values outside i32:
  that call runs the graph in PyTorch instead), outputs widened back.
"""
import functools
import itertools
import operator
import sys
import threading
import time
import warnings

import sympy
import torch
import torch.fx
from torch._decomp import _core_aten_decompositions_post_autograd, core_aten_decompositions
from torch._dynamo import disable
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import default_partition
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

import tpk
from tpk import _C

__all__ = ["backend", "compile_report", "clear_compile_report", "CompileReport", "CompiledGraph", "FallbackWarning",
           "register"]

# scaled_dot_product_attention stays whole: the core table decomposes its
# forward (into matmuls and a softmax) but not its backward, and tpk has a
# kernel for both.
KEEP_WHOLE = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_attention_math")


def _without_sdpa(table):
    return {op: fn for op, fn in table.items() if op.name().split("::")[-1].split(".")[0] not in KEEP_WHOLE}


@functools.lru_cache(maxsize=None)
def decompositions():
    """The core ATen decompositions minus the entries of KEEP_WHOLE: the
    table's own decompositions (_core_aten_decompositions_post_autograd).
    core_aten_decompositions() adds an entry for every CompositeImplicit
    op, which runs the op's own decomposition: what AOTAutograd's tracing
    does with such ops anyway, and listing them takes a third of a second
    of every first compile. tests/python/test_compile.py checks that both
    tables give the same graphs."""
    return _without_sdpa(_core_aten_decompositions_post_autograd())


def full_decompositions():
    """core_aten_decompositions() minus the entries of KEEP_WHOLE."""
    return _without_sdpa(core_aten_decompositions())


# torch dtype -> tpk dtype; int64 is i32 in tpk's graphs
DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i32", torch.int32: "i32",
          torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}
DROPPED = (torch.device, torch.layout, torch.memory_format)  # tpk has one of each
# int64 tensors are i32 in tpk's graphs: indices, targets, positions and
# counts, whose values fit. Ops that could take int64 values past i32 (int64
# in, int64 out) run in PyTorch.
INT64_GROWING = {"add", "sub", "rsub", "mul", "sum", "prod", "pow", "cumsum", "cumprod", "mm", "bmm", "addmm", "neg",
                 "abs", "square", "addcmul", "scatter_add", "index_add", "lerp", "mean"}
I32 = (-2 ** 31, 2 ** 31 - 1)


# ATen ops that are others of the vocabulary for a graph: a fresh copy of a
# constant (torch.tensor(...) in a model) is a clone
ALIASES = {torch.ops.aten.lift_fresh_copy.default: "aten::clone"}


class FallbackWarning(UserWarning):
    """Ops of a compiled model that ran in PyTorch, not in tpk."""


class Unsupported(Exception):
    """Something tpk's graphs cannot take: `reason`, and the FX node it is
    (None when it is no one node's)."""

    def __init__(self, reason, node=None):
        super().__init__(f"{op_label(node)}: {reason}" if node is not None else reason)
        self.reason, self.node = reason, node


# ---- sizes -------------------------------------------------------------------

def size_text(expr):
    """A sympy size expression as tpk writes sizes ("s0", "2*s0", "s0-1",
    "(s0+1)/2": floor division); Unsupported for what tpk's sizes cannot say."""
    if isinstance(expr, (torch.SymInt, torch.SymFloat)):
        expr = expr.node.expr
    if isinstance(expr, int) or getattr(expr, "is_Integer", False):
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if isinstance(expr, sympy.Add):
        terms = sorted(expr.args, key=lambda a: a.could_extract_minus_sign())  # positive terms first
        out = ""
        for a in terms:
            if a.could_extract_minus_sign():
                out += "-" + size_text(-a) if out else size_text(a)
            else:
                out += ("+" if out else "") + size_text(a)
        return f"({out})"
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff == -1:
            return f"(0-{size_text(rest)})"
        return "(" + "*".join(size_text(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + "*".join([size_text(expr.base)] * int(expr.exp)) + ")"
    name = type(expr).__name__
    if name == "FloorDiv":
        return f"({size_text(expr.args[0])}/{size_text(expr.args[1])})"
    if name == "CeilDiv" or name == "CleanDiv":
        fn = "cdiv" if name == "CeilDiv" else ""
        return f"{fn}({size_text(expr.args[0])}{',' if fn else '/'}{size_text(expr.args[1])})"
    raise Unsupported(f"the size {expr} is not a sum, product or quotient of sizes")


def size_arg(value):
    """What a graph op takes for an int or SymInt: the int, or a tpk Sym."""
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        return _C.Sym(size_text(expr))
    return value


class SizeFunction:
    """A size as tpk prints it ("s0*s1", "(s0+1)/2", "cdiv(s0,4)"),
    evaluated on the symbols' values: how a call sizes its outputs."""

    def __init__(self, text):
        self.text = text
        py = text.replace("/", "//")
        self.code = compile(py, f"<size {text}>", "eval")

    def __call__(self, syms):
        return eval(self.code, {"cdiv": lambda a, b: -(-a // b)}, syms)


# ---- what tpk runs -------------------------------------------------------------

def _is_size_node(node):
    """A node computing an int or SymInt (sym_size, operator.mul on sizes):
    no op of tpk's, its value an expression of the graph's symbols."""
    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool) and node.op == "call_function"


def _tensors_of(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_of(v)


def tpk_op(target):
    """The tpk.torch OpKernel of a custom op's overload, or None."""
    ops = sys.modules.get("tpk.torch")
    if ops is None or not isinstance(target, torch._ops.OpOverload):
        return None
    return ops._ops.get(target._schema.name)


def unsupported_reason(node):
    """Why tpk's graphs cannot take this call_function node, or None."""
    target = node.target
    if target is operator.getitem:
        return None
    if not isinstance(target, torch._ops.OpOverload):
        return f"{getattr(target, '__name__', target)} is not an ATen op"
    name = target.name()
    custom = tpk_op(target)
    if custom is not None:
        if any(a.kind == "inout" for a in custom.args):
            return "a tpk op with inout parameters"
        if custom.extra:
            return f"its output size needs {', '.join(custom.extra)}, which a graph call cannot give"
    elif target.namespace != "aten" or not _C.graph_op_known(ALIASES.get(target, name)):
        return "not in tpk's graph vocabulary"
    for v in itertools.chain(_tensors_of(node.meta.get("val")),
                             *(_tensors_of(a.meta.get("val")) for a in node.all_input_nodes)):
        if v.dtype not in DTYPES:
            return f"tpk has no {str(v.dtype).replace('torch.', '')}"
    for a in itertools.chain(node.args, node.kwargs.values()):
        if isinstance(a, torch.dtype) and a not in DTYPES:
            return f"tpk has no {str(a).replace('torch.', '')}"
        if isinstance(a, (list, tuple)) and any(x is None for x in a):
            return "a list with None in it (index_put's x[:, i] = v)"
    if target.namespace == "aten" and target._opname.rstrip("_") in INT64_GROWING and _has_int64(node.meta.get("val")) \
            and any(_has_int64(a.meta.get("val")) for a in node.all_input_nodes):
        return "int64 arithmetic (tpk computes int64 tensors as i32)"
    return None


def _has_int64(value):
    return any(t.dtype == torch.int64 for t in _tensors_of(value))


def op_label(node):
    """How messages name a node's op: "aten.cumsum.default"."""
    return str(node.target) if isinstance(node.target, torch._ops.OpOverload) else \
        getattr(node.target, "__name__", str(node.target))


VIEWS = {torch.ops.aten.permute.default, torch.ops.aten.t.default, torch.ops.aten.transpose.int,
         torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default,
         torch.ops.aten.expand.default, torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim,
         torch.ops.aten.squeeze.dims, torch.ops.aten.squeeze.default, torch.ops.aten.slice.Tensor,
         torch.ops.aten.select.int}


def view_chain(node):
    """(placeholder, [(op, args, kwargs), ...]) when node is views of a
    graph input with constant arguments, else None."""
    chain = []
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in VIEWS:
        rest = node.args[1:]
        if any(isinstance(a, torch.fx.Node) or (isinstance(a, (list, tuple)) and
                                                 any(isinstance(x, torch.fx.Node) for x in a)) for a in rest):
            return None  # a size known only at run time
        chain.append((node.target, rest, dict(node.kwargs)))
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return None
    return node, chain[::-1]


def dense_order(val):
    """For a tensor whose strides are those of a contiguous tensor with its
    dims permuted (a transposed weight), the permutation perm for which
    val.permute(perm) is contiguous; None for a contiguous tensor and for
    anything else (symbolic strides included: such inputs are copied)."""
    if any(not isinstance(s, int) for s in (*val.shape, *val.stride())) or val.is_contiguous():
        return None
    perm = sorted(range(val.dim()), key=lambda d: -val.stride()[d])
    return perm if val.permute(perm).is_contiguous() else None


# ---- an FX graph as a tpk graph ----------------------------------------------------

OPAQUE = object()  # a graph input tpk cannot take (a float64 tensor, a generator)


def _describe(val):
    return str(val.dtype).replace("torch.", "") if isinstance(val, torch.Tensor) else f"a {type(val).__name__}"


class Translation:
    """An FX graph of ATen ops (all of which tpk takes) as a tpk graph, and
    what a call needs to run its kernel: where each input, symbol and
    output comes from."""

    def __init__(self, gm, example_values, name):
        start = time.perf_counter()
        self.gm = gm
        self.name = name
        g = self.graph = _C.Graph(name)
        env = {}
        self.inputs = []      # (placeholder position, torch dtype, permutation or None) of each graph input
        self.sym_inputs = {}  # symbol -> placeholder position of a SymInt input that is just that symbol
        self.constants = []   # tensors of get_attr nodes: the graph's inputs after the placeholders'
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_values):
            raise Unsupported(f"{len(placeholders)} placeholders but {len(example_values)} example inputs")
        for i, (node, val) in enumerate(zip(placeholders, example_values)):
            if isinstance(val, torch.Tensor) and val.dtype not in DTYPES or \
                    not isinstance(val, (torch.Tensor, torch.SymInt, int, float, bool, type(None))):
                env[node] = OPAQUE  # no op of the graph may use it (unsupported_reason), an output may be it
            elif isinstance(val, torch.Tensor):
                sizes = [size_arg(s).text if isinstance(size_arg(s), _C.Sym) else s for s in val.shape]
                perm = dense_order(val)
                if perm is None:
                    env[node] = g.input(DTYPES[val.dtype], sizes)
                else:  # a transposed tensor (a weight saved for the backward): its memory as it lies, then a view
                    base = g.input(DTYPES[val.dtype], [sizes[d] for d in perm])
                    env[node] = g.op("permute", base, [perm.index(d) for d in range(len(perm))])
                self.inputs.append((i, val.dtype, perm))
            elif isinstance(val, torch.SymInt):
                env[node] = size_arg(val)
                if val.node.expr.is_Symbol:
                    self.sym_inputs.setdefault(val.node.expr.name, i)
            else:
                env[node] = val
        out_node = None
        for node in gm.graph.nodes:
            if node.op == "call_function":
                try:
                    env[node] = self._node(node, env)
                except (Unsupported, tpk.TpkError, TypeError, ValueError) as e:
                    raise Unsupported(getattr(e, "reason", str(e)), node) from e
            elif node.op == "output":
                out_node = node
            elif node.op == "get_attr":  # a constant tensor of the graph: an input, given at every call
                env[node] = self._constant(node)
            elif node.op != "placeholder":
                raise Unsupported(f"a {node.op} node ({node.target})")
        self._outputs(out_node, env, placeholders)
        self.seconds = time.perf_counter() - start

    def _constant(self, node):
        value = self.gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor) or value.dtype not in DTYPES:
            raise Unsupported(f"the constant {node.target} is {getattr(value, 'dtype', type(value).__name__)}", node)
        with unset_fake_temporarily():  # compilers run under the tracing's fake mode; the constant is real
            value = value.detach()
            if value.dtype == torch.int64:
                if value.numel() and not (I32[0] <= int(value.min()) and int(value.max()) <= I32[1]):
                    raise Unsupported(f"the constant {node.target} has values outside i32", node)
                value = value.to(torch.int32)
            self.constants.append(value.contiguous())
        return self.graph.input(DTYPES[value.dtype], list(value.shape))

    def _arg(self, a, env):
        if isinstance(a, torch.fx.Node):
            if env[a] is OPAQUE:
                raise Unsupported(f"its argument {a.name} is {_describe(a.meta.get('val'))}, which tpk has not")
            return env[a]
        if isinstance(a, (list, tuple)):
            return [self._arg(x, env) for x in a]
        if isinstance(a, DROPPED):
            return None
        if isinstance(a, torch.SymInt):
            return size_arg(a)
        return a

    def _node(self, node, env):
        if node.target is operator.getitem:
            return env[node.args[0]][node.args[1]]
        if _is_size_node(node):
            return size_arg(node.meta["val"])
        reason = unsupported_reason(node)
        if reason:
            raise Unsupported(reason)
        args = [self._arg(a, env) for a in node.args]
        kwargs = {k: self._arg(a, env) for k, a in node.kwargs.items()}
        custom = tpk_op(node.target)
        if custom is not None:
            return self.graph.call(custom.kernel, *args, **kwargs)
        return self.graph.op(ALIASES.get(node.target, str(node.target)), *args, **kwargs)

    def _outputs(self, out_node, env, placeholders):
        """Each FX output: a graph output (its position among the kernel's
        outputs), an input passed through, a size, a constant or None."""
        position = {n: i for i, n in enumerate(placeholders)}
        # ("tpk", index, torch dtype) | ("input", position) | ("view", position, chain) | ("size", SizeFunction)
        # | ("const", v)
        self.outputs = []
        values = []
        results = out_node.args[0]
        self.single = not isinstance(results, (list, tuple))
        for r in ([results] if self.single else results):
            if isinstance(r, torch.fx.Node) and r.op == "placeholder":
                self.outputs.append(("input", position[r]))
                continue
            chain = view_chain(r)
            if chain is not None:  # a view of an input (a transposed weight): made by PyTorch, no copy
                self.outputs.append(("view", position[chain[0]], chain[1]))
                continue
            v = env[r] if isinstance(r, torch.fx.Node) else r
            if isinstance(v, _C.Value):
                dtype = r.meta["val"].dtype
                self.outputs.append(("tpk", len(values), dtype))
                values.append(v)
            elif isinstance(v, _C.Sym):
                self.outputs.append(("size", SizeFunction(v.text)))
            else:
                self.outputs.append(("const", v))
        self.graph.output(*values)
        # the kernel's outputs: shapes as functions of the symbols, torch dtypes as tpk computes them
        self.out_specs = []
        for v, (_, _, dtype) in zip(values, [o for o in self.outputs if o[0] == "tpk"]):
            shape = [s if isinstance(s, int) else SizeFunction(s) for s in v.shape]
            self.out_specs.append((shape, torch.int32 if dtype == torch.int64 else dtype, dtype == torch.int64))
        self.symbolic = any(not isinstance(s, int) for shape, _, _ in self.out_specs for s in shape)


# ---- compiled graphs ----------------------------------------------------------------

class CompiledGraph:
    """One tpk graph the backend compiled: a forward or backward graph of
    AOTAutograd, or the part of one tpk runs when some of its ops run in
    PyTorch. Called with the FX graph's inputs, it returns its outputs.

    name         "forward_0", "backward_0_p1" (the 2nd tpk part of a graph)
    kind         "forward", "backward" or "inference"
    ir           the graph's IR, as built (TPK_DUMP_IR=1 also logs its clusters)
    kernel       the compiled graph: a tpk.Kernel (inputs, then outputs)
    device       the device it is fixed to (options={"device": ...}), or None:
                 each call's tpk.current_device()
    fallback     {op: reason} of its FX graph's ops that run in PyTorch
    calls        how many times it has run
    compile_seconds  what building and compiling it took (tpk's part of the
                 compile: Dynamo's and AOTAutograd's tracing come before)
    last_report  the tpk.Report of its latest run: on a sim:<chip> device the
                 simulated `seconds`, `flops`, utilisations, ... (None before one)
    """

    def __init__(self, translation, kernel, kind, device, fallback):
        t = translation
        self.name, self.kind, self.device, self.fallback = t.name, kind, device, fallback
        self.ir = t.graph.ir()
        self.kernel = kernel
        self.calls = 0
        self.last_report = None
        self.eager_runs = 0  # calls run in PyTorch (an int64 input outside i32)
        self._gm = t.gm
        self._inputs = t.inputs
        self._constants = t.constants
        self._outputs = t.outputs
        self._out_specs = t.out_specs
        self._single = t.single
        # where each symbol's value comes from: a SymInt input, else the first
        # input dim that is just the symbol
        self._symbols = dict(t.sym_inputs)
        self._sym_dims = {}
        for k, (pos, _, perm) in enumerate(t.inputs):
            p = kernel.params[k]
            for d, text in enumerate(p.dims):
                if text in kernel.symbols and text not in self._symbols and text not in self._sym_dims:
                    self._sym_dims[text] = (pos, perm[d] if perm else d)
        # symbols no tensor input binds go to the launch by name
        self._launch_syms = [s for s in kernel.symbols if s not in self._sym_dims and s in self._symbols]
        self._needs_syms = t.symbolic or any(o[0] == "size" for o in t.outputs) or bool(self._launch_syms)
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<tpk CompiledGraph {self.name} ({self.kind}), {self.calls} calls>"

    def _syms(self, args):
        syms = {s: int(args[pos]) for s, pos in self._symbols.items()}
        for s, (pos, d) in self._sym_dims.items():
            syms[s] = args[pos].shape[d]
        return syms

    def __call__(self, *args):
        launch = []
        for pos, dtype, perm in self._inputs:
            t = args[pos]
            if perm is not None:
                t = t.permute(perm)
            if dtype is torch.int64 and t.device.type == "tpk":
                t = torch.ops.tpk_device.int64_as_i32(t)  # on the host: tpk's streams have no int64
                if t is None:
                    return self._eager(args)
            elif dtype is torch.int64:
                if t.numel():
                    low, high = torch.aminmax(t)
                    if low < I32[0] or high > I32[1]:
                        return self._eager(args)
                t = t.to(torch.int32)
            if not t.is_contiguous():
                t = t.contiguous()
            launch.append(t)
        if launch and launch[0].device.type == "tpk":
            return self._on_device(args, launch)
        launch += self._constants
        syms = self._syms(args) if self._needs_syms else None
        if syms is None:  # sizes known at compile time
            outs = [torch.empty(shape, dtype=dtype) for shape, dtype, _ in self._out_specs]
        else:
            outs = [torch.empty([s if type(s) is int else s(syms) for s in shape], dtype=dtype)
                    for shape, dtype, _ in self._out_specs]
        device = self.device or tpk.current_device()
        if self._launch_syms:
            report = self.kernel.launch(launch + outs, device=device, syms={s: syms[s] for s in self._launch_syms})
        else:
            report = self.kernel.launch(launch + outs, device=device)
        self.last_report = report
        self.calls += 1
        return self._results(args, outs, syms)

    def _on_device(self, args, launch):
        """A call on tpk tensors (the tpk device): the compiled graph launched
        on the tensors' own buffers, after the device's stream has run what
        was submitted before (a sync point); its outputs are new tpk tensors.
        On a simulated chip its time is `last_sim_seconds` (and a row of
        tpk.torch.profile's report)."""
        with self._lock:
            if getattr(self, "_device_constants", None) is None:
                self._device_constants = [c.to("tpk") for c in self._constants]
        launch += self._device_constants
        syms = self._syms(args) if self._needs_syms else None
        outs = [torch.empty([s if type(s) is int else s(syms) for s in shape], dtype=dtype, device="tpk")
                for shape, dtype, _ in self._out_specs]
        if self._launch_syms:  # a size no tensor gives: the launch on the tensors' buffers cannot bind it
            raise NotImplementedError(f"tpk graph {self.name}: sizes no input tensor gives ({', '.join(self._launch_syms)}) "
                                      f"are not bound on the tpk device")
        self.last_sim_seconds = torch.ops.tpk_device.launch(self.kernel._handle, self.name, launch + outs)
        self.calls += 1
        return self._results(args, outs, syms)

    def _results(self, args, outs, syms):
        results = []
        for o in self._outputs:
            kind = o[0]
            if kind == "tpk":
                t = outs[o[1]]
                results.append(t.to(torch.int64) if o[2] is torch.int64 else t)
            elif kind == "input":
                results.append(args[o[1]])
            elif kind == "view":
                t = args[o[1]]
                for op, rest, kwargs in o[2]:
                    t = op(t, *rest, **kwargs)
                results.append(t)
            elif kind == "size":
                results.append(o[1](syms))
            else:
                results.append(o[1])
        return results[0] if self._single else results

    def _eager(self, args):
        with self._lock:
            self.eager_runs += 1
        out = self._gm(*args)
        return out if self._single else list(out)


class CompileReport:
    """What the backend compiled in this process since the last
    clear_compile_report(): `graphs` (CompiledGraph, in compile order),
    `fallback` ({op: reason}: ops that ran in PyTorch), and on a simulated
    chip `sim_seconds` (the latest run of every graph, added up: a training
    step's forward and backward) and `flops`; str() gives a table."""

    def __init__(self, graphs):
        self.graphs = list(graphs)
        self.fallback = {}
        for g in self.graphs:
            self.fallback.update(g.fallback)

    def _sum(self, field):
        reports = [g.last_report for g in self.graphs if g.last_report is not None]
        if not reports or not all(r.simulated for r in reports):
            return None
        return sum(getattr(r, field) for r in reports)

    @property
    def sim_seconds(self):
        return self._sum("seconds")

    @property
    def flops(self):
        return self._sum("flops")

    def __str__(self):
        lines = [f"{'graph':<22} {'kind':<10} {'calls':>6} {'device':<10} {'sim us':>10} {'MXU':>5} {'VPU':>5} {'HBM':>5}"]
        for g in self.graphs:
            r = g.last_report
            if r is not None and r.simulated:
                sim = f"{r.seconds * 1e6:10.2f} {r.mxu_utilisation:5.0%} {r.vpu_utilisation:5.0%} {r.hbm_utilisation:5.0%}"
            else:
                sim = f"{'-':>10} {'-':>5} {'-':>5} {'-':>5}"
            lines.append(f"{g.name:<22} {g.kind:<10} {g.calls:>6} {(r.device if r else '-'):<10} {sim}")
        if self.fallback:
            lines.append("ran in PyTorch: " + ", ".join(sorted(self.fallback)))
        return "\n".join(lines)

    def __repr__(self):
        return f"<tpk CompileReport: {len(self.graphs)} graphs>"


_lock = threading.Lock()
_graphs = []       # every CompiledGraph since the last clear
_counters = {}     # kind -> graphs compiled of it (names)
_warned = set()    # ops a FallbackWarning named


def compile_report():
    """A CompileReport of the graphs compiled since the last clear."""
    with _lock:
        return CompileReport(_graphs)


def clear_compile_report():
    """Forget the graphs compiled so far (they keep working)."""
    with _lock:
        _graphs.clear()


def _new_name(kind):
    with _lock:
        n = _counters.get(kind, 0)
        _counters[kind] = n + 1
    return f"{kind}_{n}"


def _warn_fallback(fallback):
    with _lock:
        new = {op: why for op, why in fallback.items() if op not in _warned}
        _warned.update(new)
    if new:
        listing = "; ".join(f"{op} ({why})" for op, why in sorted(new.items()))
        warnings.warn(f"torch.compile(backend=\"tpk\"): these ops run in PyTorch, not in tpk: {listing}",
                      FallbackWarning, stacklevel=2)


def _compile_translation(t, kind, device, fallback):
    start = time.perf_counter()
    kernel = t.graph.compile()
    graph = CompiledGraph(t, kernel, kind, device, fallback)
    graph.compile_seconds = t.seconds + time.perf_counter() - start
    with _lock:
        _graphs.append(graph)
    return graph


def _compile_or_warn(t, kind, device, fallback):
    """The CompiledGraph of a translation, or None (a FallbackWarning says
    why) when tpk fails to compile it: PyTorch runs it then."""
    try:
        return _compile_translation(t, kind, device, fallback)
    except tpk.TpkError as e:
        warnings.warn(f"torch.compile(backend=\"tpk\"): tpk could not compile graph {t.name}, which runs in "
                      f"PyTorch: {e}", FallbackWarning, stacklevel=2)
        return None


# ---- partitions -----------------------------------------------------------------------

class _Support(OperatorSupportBase):
    """The nodes a tpk part may hold: ops tpk takes, minus those it refused
    when built (by name: the partitioner works on a copy)."""

    def __init__(self, refused):
        super().__init__()
        self.refused = refused

    def is_node_supported(self, submodules, node):
        if node.op != "call_function" or node.name in self.refused or _is_size_node(node):
            return False
        if node.target is operator.getitem:
            return self.is_node_supported(submodules, node.args[0])
        return unsupported_reason(node) is None


def compile_graph(gm, example_inputs, kind, device):
    """An FX graph of ATen ops as a boxed callable: one tpk graph, or tpk
    graphs for its supported parts with the rest run in PyTorch."""
    name = _new_name(kind)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("val", e) for n, e in zip(placeholders, example_inputs)]
    refused = {}  # node name -> why tpk does not take it
    for node in gm.graph.nodes:
        if node.op == "call_function" and not _is_size_node(node) and node.target is not operator.getitem:
            reason = unsupported_reason(node)
            if reason:
                refused[node.name] = reason
    if not refused:
        try:
            t = Translation(gm, values, name)
        except Unsupported as e:
            if e.node is None:
                raise
            refused[e.node.name] = e.reason
        else:
            graph = _compile_or_warn(t, kind, device, {})
            return _boxed(graph if graph is not None else _Unboxed(gm))
    while True:  # a part that fails to build gives its failing node to PyTorch, and the graph is partitioned again
        try:
            return _boxed(_partitioned(gm, name, kind, device, refused))
        except Unsupported as e:
            if e.node is None or e.node.name in refused:
                raise
            refused[e.node.name] = e.reason


def _partitioned(gm, name, kind, device, refused):
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))  # node_copy keeps names and meta
    work = torch.fx.GraphModule(gm, graph)
    partitioner = CapabilityBasedPartitioner(work, _Support(refused), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    inside = {n for p in partitions for n in p.nodes}
    fallback = {}
    for node in work.graph.nodes:
        if node.op == "call_function" and node not in inside and not _is_size_node(node) \
                and node.target is not operator.getitem:
            fallback[op_label(node)] = refused.get(node.name) or unsupported_reason(node) or "?"
    fused = partitioner.fuse_partitions(partitions)
    compiled = []
    for i, node in enumerate([n for n in fused.graph.nodes if n.op == "call_module"]):
        sub = getattr(fused, node.target)
        values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
        compiled.append((node, Translation(sub, values, f"{name}_p{i}")))  # Unsupported: its node's name is gm's
    for node, t in compiled:
        graph = _compile_or_warn(t, kind, device, fallback)
        if graph is not None:  # else the part's submodule stays: PyTorch runs it
            setattr(fused, node.target, _Part(graph))
    fused.recompile()
    _warn_fallback(fallback)
    return _Unboxed(fused)


class _Part(torch.nn.Module):
    """A tpk part of a partitioned graph, where its submodule was."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph

    def forward(self, *args):
        return self.graph(*args)


class _Unboxed:
    """A GraphModule's call as a boxed call's target."""

    def __init__(self, gm):
        self.gm = gm

    def __call__(self, *args):
        return self.gm(*args)


def _boxed(fn):
    def run(args):
        out = fn(*args)
        args.clear()  # the boxed convention: the inputs may go now
        return out
    run._boxed_call = True
    run.graph = fn
    return run


# ---- the backend ---------------------------------------------------------------------------

def backend(gm, example_inputs, options=None, mode=None):
    """The torch.compile backend: torch.compile(model, backend="tpk",
    options={"device": "sim:v5e"}). Options: `device` ("host",
    "sim:<chip>"; default: each call's tpk.current_device()). No modes."""
    if mode not in (None, "default"):
        raise ValueError(f"backend=\"tpk\" has no mode {mode!r}")
    options = dict(options or {})
    device = options.pop("device", None)
    if options:
        raise ValueError(f"backend=\"tpk\" takes the option 'device', not {', '.join(map(repr, options))}")
    if device is not None:
        _C.open_device(device)  # an unknown device fails here, not at the first call

    def compiler(kind):
        def compile_fn(fx, inputs):
            return compile_graph(fx, inputs, kind, device)
        return compile_fn

    kwargs = dict(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                  inference_compiler=compiler("inference"), decompositions=decompositions(),
                  partition_fn=default_partition)
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        return aot_autograd(**kwargs)(gm, example_inputs)  # it flattens such inputs first
    return _aot_module(gm, example_inputs, **kwargs)


def _aot_module(gm, example_inputs, bw_compiler, **kwargs):
    """What Dynamo's aot_autograd(**kwargs)(gm, example_inputs) does for
    flat inputs, without its `import torch._inductor.debug` (67 modules,
    0.065 s of CPU in a cold process; for TORCH_COMPILE_DEBUG's AOT logs,
    which TORCH_LOGS=aot_graphs gives too). As there, Dynamo must trace
    neither the backward compiler, nor the backward it returns, nor the
    compiled forward."""
    def compile_backward(*args, **kw):
        compiled = disable(bw_compiler, reason="do not trace backward compiler function")(*args, **kw)
        return disable(compiled, reason="do not trace generated backwards pass")

    compiled = aot_module_simplified(gm, example_inputs, bw_compiler=compile_backward, **kwargs)
    return disable(compiled, reason="do not trace AOT-compiled graph")


def register():
    """Register "tpk" with Dynamo (once; the entry point may have done it)."""
    from torch._dynamo.backends import registry
    if "tpk" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=backend, name="tpk")
