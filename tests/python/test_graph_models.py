"""Whole models through tpk's graphs, as the bridges will send them: the
models of tools/aten_ops.py (an MLP with GELU, layer norm and cross-entropy;
a transformer block with RMSNorm, causal SDPA and SwiGLU;
nn.MultiheadAttention), forward and backward,

  - as AOTAutograd graphs with the core ATen decompositions (what
    torch.compile hands a backend): each FX graph translated node by node
    into a tpk graph, compiled, run, and compared with the FX graph's own
    outputs;
  - as the eager op stream (what the `tpk` device sees): every op of the
    forward and the backward recorded into one tpk graph whose outputs are
    every op's results, compared with what PyTorch computed.

Arguments go through as PyTorch gives them (ints, lists, dtypes, None; the
device, layout and memory_format keywords are dropped: tpk has one of each).
The transformer's attention runs on the bf16 flash-attention kernels, hence
its looser tolerance.
"""
import importlib.util
import operator
import os

import numpy as np
import pytest
import torch
from torch._functorch.aot_autograd import aot_module
import torch.utils._pytree
from torch.utils._python_dispatch import TorchDispatchMode

import tpk  # noqa: F401  (sets up the package path and the extension)
from tpk import _C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("aten_ops", os.path.join(ROOT, "tools", "aten_ops.py"))
aten_ops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aten_ops)

TPK_DTYPE = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int64: "i32", torch.int32: "i32",
             torch.bool: "bool", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16"}
DROPPED = (torch.device, torch.layout, torch.memory_format)


def graph_arg(a, value_of):
    if isinstance(a, (list, tuple)):
        return [graph_arg(x, value_of) for x in a]
    if isinstance(a, DROPPED):
        return None
    v = value_of(a)
    return a if v is None else v


def for_tpk(t):
    return (t.to(torch.int32) if t.dtype == torch.int64 else t).detach().contiguous()


# Ops whose results' values ATen leaves undefined: only their shapes compare.
UNDEFINED_VALUES = ("aten.empty", "aten.new_empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty_strided")


def compare(got, want, rtol, what, op=""):
    want = want.detach()
    if op.split(".default")[0].split(".memory_format")[0] in UNDEFINED_VALUES:
        assert tuple(np.shape(got)) == tuple(want.shape), f"{what}: shape {np.shape(got)}, expected {tuple(want.shape)}"
        return
    if want.dtype == torch.bool:
        np.testing.assert_array_equal(np.asarray(got).astype(bool), want.numpy(), err_msg=what)
        return
    g = torch.as_tensor(np.asarray(got)).to(torch.float64)
    w = want.to(torch.float64)
    assert tuple(g.shape) == tuple(w.shape), f"{what}: shape {tuple(g.shape)}, expected {tuple(w.shape)}"
    scale = w.abs().max().item() if w.numel() else 0
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=rtol * max(scale, 1e-3), equal_nan=True, err_msg=what)


def run(g, inputs):
    outs = g.compile()(*inputs, convert=True)
    return list(outs) if isinstance(outs, tuple) else [outs]


def fx_to_graph(gm, example_inputs, name):
    """A tpk graph of an FX graph of ATen ops (example_inputs give its inputs'
    dtypes and shapes): the graph and its outputs (None where the FX graph
    returns no tensor)."""
    g = _C.Graph(name)
    env = {}
    placeholders = iter(example_inputs)
    outputs = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            t = next(placeholders)
            env[node] = g.input(TPK_DTYPE[t.dtype], list(t.shape))
        elif node.op == "call_function" and node.target is operator.getitem:
            env[node] = env[node.args[0]][node.args[1]]
        elif node.op == "call_function":
            value_of = lambda a: env[a] if isinstance(a, torch.fx.Node) else None  # noqa: E731
            args = [graph_arg(a, value_of) for a in node.args]
            kwargs = {k: graph_arg(a, value_of) for k, a in node.kwargs.items()}
            env[node] = g.op(str(node.target), *args, **kwargs)
        elif node.op == "output":
            outputs = [env[a] if isinstance(a, torch.fx.Node) else None for a in node.args[0]]
    g.output(*[o for o in outputs if o is not None])
    return g, outputs


MODELS = {
    "mlp": (lambda: aten_ops.Mlp(), lambda: (torch.randn(8, 16), torch.randint(0, 10, (8,))), 1e-4),
    "transformer": (lambda: aten_ops.Block(), lambda: (torch.randn(2, 6, 32),), 5e-2),
    "mha": (lambda: aten_ops.Mha(), lambda: (torch.randn(2, 6, 32),), 1e-4),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_aot_graphs(name):
    make_model, make_args, rtol = MODELS[name]
    torch.manual_seed(0)
    model, args = make_model(), make_args()
    checked = []

    def compiler(kind):
        def compile(gm, example_inputs):  # example_inputs are fake: run at the call
            g, outputs = fx_to_graph(gm, example_inputs, f"{name}_{kind}")
            kernel = g.compile()

            def run_both(args):
                want = gm(*args)
                got = kernel(*[for_tpk(a) for a in args], convert=True)
                got = list(got) if isinstance(got, tuple) else [got]
                wants = [w for w, o in zip(want, outputs) if o is not None]
                for i, (x, w) in enumerate(zip(got, wants)):
                    compare(x, w, rtol, f"{name} {kind} output {i}")
                checked.append(kind)
                return want
            run_both._boxed_call = True
            return run_both
        return compile

    compiled = aot_module(model, fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                          decompositions=aten_ops.decompositions())
    compiled(*args).backward()
    assert checked == ["forward", "backward"]


class StreamRecorder(TorchDispatchMode):
    """Every ATen op PyTorch runs (the profiler's markers aside): its name,
    arguments and results, tensors copied."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace != "aten":
            return func(*args, **kwargs)
        copy = lambda a: a.detach().clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
        before = (torch.utils._pytree.tree_map(copy, args), torch.utils._pytree.tree_map(copy, kwargs))
        out = func(*args, **kwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        self.ops.append((str(func), before[0], before[1], [copy(o) for o in outs]))
        return out


def run_op(name, args, kwargs, outs, rtol, what):
    """One op as a graph of its own, as a strict-mode stream runs it: its
    tensor arguments are inputs."""
    g = _C.Graph("op")
    inputs = []

    def value_of(a):
        if not isinstance(a, torch.Tensor):
            return None
        inputs.append(for_tpk(a))
        return g.input(TPK_DTYPE[a.dtype], list(a.shape))

    got = g.op(name, *[graph_arg(a, value_of) for a in args], **{k: graph_arg(a, value_of) for k, a in kwargs.items()})
    gots = list(got) if isinstance(got, tuple) else [got]
    pairs = [(v, o if isinstance(o, torch.Tensor) else torch.tensor(o)) for v, o in zip(gots, outs) if v is not None]
    g.output(*[v for v, _ in pairs])
    for x, (_, want) in zip(run(g, inputs), pairs):
        compare(x, want, rtol, what, str(name))


def record(name, make_model, make_args):
    torch.manual_seed(0)
    model, args = make_model(), make_args()
    rec = StreamRecorder()
    with rec:
        model(*args).backward()
    return rec.ops


@pytest.mark.parametrize("name", list(MODELS))
def test_eager_streams(name):
    make_model, make_args, rtol = MODELS[name]
    ops = record(name, make_model, make_args)
    assert len(ops) > 20
    for i, (op, args, kwargs, outs) in enumerate(ops):
        run_op(op, args, kwargs, outs, rtol, f"{name} op #{i}: {op}")


def test_adamw_step():
    """An AdamW step, one tensor at a time, as the device sees it (a learning
    rate and bias corrections among its Scalars)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    for step in range(2):
        model(torch.randn(2, 8)).sum().backward()
        if step == 0:
            opt.step()
    rec = StreamRecorder()
    with rec, torch.no_grad():
        opt.step()
    assert len(rec.ops) > 10
    for i, (op, args, kwargs, outs) in enumerate(rec.ops):
        run_op(op, args, kwargs, outs, 1e-5, f"adamw op #{i}: {op}")


class WindowRecorder(TorchDispatchMode):
    """The whole stream as one graph, as the fused mode builds a window:
    tensors seen for the first time are inputs, each op's results values
    (an in-place op's result self's new value), every result an output."""

    def __init__(self, name):
        super().__init__()
        self.g = _C.Graph(name)
        self.values, self.inputs, self.results = {}, [], []

    def value_of(self, t):
        if not isinstance(t, torch.Tensor):
            return None
        v = self.values.get(id(t))
        if v is None or v[0] is not t:
            v = (t, self.g.input(TPK_DTYPE[t.dtype], list(t.shape)))
            self.values[id(t)] = v
            self.inputs.append(for_tpk(t.clone()))
        return v[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace != "aten":
            return func(*args, **kwargs)
        gargs = [graph_arg(a, self.value_of) for a in args]
        gkwargs = {k: graph_arg(a, self.value_of) for k, a in kwargs.items()}
        out = func(*args, **kwargs)
        got = self.g.op(str(func), *gargs, **gkwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        gots = list(got) if isinstance(got, tuple) else [got]
        for t, v in zip(outs, gots):
            if v is not None and isinstance(t, torch.Tensor):
                self.values[id(t)] = (t, v)
                self.results.append((v, t.detach().clone(), str(func)))
        return out


@pytest.mark.parametrize("name", list(MODELS))
def test_eager_window(name):
    make_model, make_args, rtol = MODELS[name]
    torch.manual_seed(0)
    model, args = make_model(), make_args()
    rec = WindowRecorder(f"{name}_window")
    with rec:
        model(*args).backward()
    rec.g.output(*[v for v, _, _ in rec.results])
    got = run(rec.g, rec.inputs)
    for i, (x, (_, want, op)) in enumerate(zip(got, rec.results)):
        compare(x, want, rtol, f"{name} result {i}: {op}", op)
