#!/usr/bin/env python3
"""Record op streams: what a PyTorch training step sends tpk's eager runtime,
as text (bench/streams/*.ops) that cli/opstream.c replays (`tpk replay`, bench/bench_eager.c) through the C API
(tpk_stream_op), in any eager mode and at any sizes.

    python3 tools/record_streams.py            # (re)write bench/streams/*.ops
    python3 tools/record_streams.py --check    # exit 1 if they differ from a fresh recording

A step is traced with make_fx (symbolic sizes, functionalized: in-place
updates become the functional op and an output), with no decomposition: the
ops are ATen's as the `tpk` device sees them eagerly (addmm, gelu_backward,
native_layer_norm_backward, nll_loss_forward, the SDPA op and its backward).

The format, one statement a line (`#` starts a comment):

    sizes s0=64 s1=256               the sizes it was recorded at
    input %x f32[s0,s1] randn        an input: dtype, dims (symbols), how to fill it
                                     (randn, zeros, randint(LO,HI))
    %a, %b = native_layer_norm(%x, [s1], %w, %b, 1e-05)
    %v = view(%a, [s0*s1])           ints may be expressions of the symbols
    %y = sum.dim_IntList(%x, [0], keepdim=True)
    output %y, %v

An op is ATen's name with its overload; arguments are %values, ints, floats
(always with `.` or `e`), True/False, None, [lists], dtypes (f32, i64, ...),
"strings", and NAME=ARG for keyword arguments.
"""
import argparse
import os
import re
import sys

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functional_call

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "bench", "streams")
sys.path.insert(0, HERE)
from aten_ops import Block, Mlp  # noqa: E402

DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64",
          torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}
# keyword arguments that say nothing to a device that has one layout and one memory
DROPPED = ("pin_memory", "memory_format", "layout", "device", "non_blocking")


def adamw(params, grads, m, v, step, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    """torch.optim.AdamW's update (capturable: the step count is a tensor)."""
    step = step + 1
    bc1, bc2 = 1 - torch.pow(b1, step), 1 - torch.pow(b2, step)
    out = []
    for p, g, mm, vv in zip(params, grads, m, v):
        p = p * (1 - lr * wd)
        mm = torch.lerp(mm, g, 1 - b1)
        vv = vv * b2 + (1 - b2) * g * g
        p = p - (lr / bc1) * mm / (vv.sqrt() / bc2.sqrt() + eps)
        out += [p, mm, vv]
    return out + [step]


def mlp_train(batch=64):
    torch.manual_seed(0)
    model = Mlp(d_in=256, hidden=512)
    names = [n for n, _ in model.named_parameters()]

    def step(params, m, v, t, x, target):
        loss = functional_call(model, dict(zip(names, params)), (x, target))
        grads = torch.autograd.grad(loss, params)
        return [loss] + adamw(params, grads, m, v, t)

    params = [p.detach().requires_grad_() for p in model.parameters()]
    zeros = [torch.zeros_like(p) for p in params]
    x, target = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
    return step, (params, zeros, [z.clone() for z in zeros], torch.tensor(0.0), x, target)


def block_train(batch=4, seq=64):
    torch.manual_seed(0)
    model = Block(d=128, heads=4, hidden=256, down_bias=False, mean_square=True)
    names = [n for n, _ in model.named_parameters()]

    def step(params, x):
        loss = functional_call(model, dict(zip(names, params)), (x,))
        return [loss] + list(torch.autograd.grad(loss, params))

    params = [p.detach().requires_grad_() for p in model.parameters()]
    return step, (params, torch.randn(batch, seq, 128))


STREAMS = {
    "mlp_train": ("an MLP training step (forward, backward, AdamW update)", mlp_train),
    "block_train": ("a transformer block's forward and backward (RMSNorm, causal SDPA, SwiGLU)", block_train),
}


class Writer:
    def __init__(self):
        self.names, self.lines, self.sizes = {}, [], {}

    def name(self, node):
        if node not in self.names:
            self.names[node] = "%" + str(len(self.names))
        return self.names[node]

    def symint(self, s):
        if isinstance(s, torch.SymInt):
            expr = s.node.expr
            for sym in expr.free_symbols:
                self.sizes[str(sym)] = s.node.shape_env.backed_var_to_val[sym]
            return str(expr).replace(" ", "")
        return str(int(s))

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            if isinstance(a.meta.get("val"), torch.SymInt):  # size arithmetic: written as its expression
                return self.symint(a.meta["val"])
            return self.name(a)
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, bool) or a is None:
            return str(a)
        if isinstance(a, (int, torch.SymInt)):
            return self.symint(a)
        if isinstance(a, float):
            return repr(a) if ("." in repr(a) or "e" in repr(a) or "inf" in repr(a) or "nan" in repr(a)) else repr(a) + ".0"
        if isinstance(a, torch.dtype):
            return DTYPES[a]
        if isinstance(a, str):
            return '"' + a + '"'
        raise ValueError(f"cannot write argument {a!r}")

    def value_type(self, val):
        return DTYPES[val.dtype] + "[" + ",".join(self.symint(d) for d in val.shape) + "]"


def init_of(example):
    """How a replay fills an input like the example: indices stay in range."""
    if not example.dtype.is_floating_point:
        return f"randint({int(example.min())},{int(example.max()) + 1})"
    if not example.any():
        return "zeros"
    return "randn"


def record(fn, args):
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    w = Writer()
    body, inputs = [], []
    flat_args = torch.utils._pytree.tree_leaves(args)
    getitems = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target.__name__ == "getitem":
            getitems.setdefault(node.args[0], {})[node.args[1]] = node
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            body.append(f"input {w.name(node)} {w.value_type(node.meta['val'])} {init_of(flat_args[len(inputs)])}")
            inputs.append(node)
        elif node.op == "output":
            outs = [a for a in torch.fx.node.map_arg(node.args[0], lambda n: n) if isinstance(a, torch.fx.Node)] \
                if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            body.append("output " + ", ".join(w.arg(o) for o in outs))
        elif isinstance(node.meta.get("val"), torch.SymInt) or node.target.__name__ == "getitem":
            continue
        else:
            op = node.target
            name = op._opname + ("" if op._overloadname == "default" else "." + op._overloadname)
            args = [w.arg(a) for a in node.args]
            args += [f"{k}={w.arg(v)}" for k, v in node.kwargs.items() if k not in DROPPED]
            if node in getitems:
                results = ", ".join(w.name(getitems[node][i]) if i in getitems[node] else "_"
                                    for i in range(len(node.meta["val"])))
            else:
                results = w.name(node)
            body.append(f"{results} = {name}({', '.join(args)})")
    # symbols renamed s0, s1, ... in order of first appearance
    order = {}
    for line in body:
        for sym in re.findall(r"\bs\d+\b", line):
            order.setdefault(sym, f"s{len(order)}")
    body = [re.sub(r"\bs\d+\b", lambda m: order[m.group(0)], line) for line in body]
    sizes = " ".join(f"{order[k]}={w.sizes[k]}" for k in order)
    return [f"sizes {sizes}"] + body


def text_of(key):
    title, make = STREAMS[key]
    fn, args = make()
    lines = record(fn, args)
    nops = sum(1 for ln in lines if "=" in ln and not ln.startswith(("sizes", "input")))
    head = [f"# {title}: {nops} ops, recorded by tools/record_streams.py on torch {torch.__version__.split('+')[0]}"]
    return "\n".join(head + lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if bench/streams differs from a fresh recording")
    a = ap.parse_args()
    bad = 0
    for key in STREAMS:
        path = os.path.join(OUT, key + ".ops")
        text = text_of(key)
        if a.check:
            with open(path) as f:
                if f.read() != text:
                    print(f"{path}: differs from a fresh recording (run tools/record_streams.py)")
                    bad = 1
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {path}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
