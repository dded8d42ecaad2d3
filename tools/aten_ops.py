#!/usr/bin/env python3
"""The ATen ops tpk's graph builder must cover (issue 12), measured on the
models the issue names (a 2-layer MLP with GELU, layernorm and
cross-entropy; a transformer block with RMSNorm, causal SDPA and SwiGLU;
nn.MultiheadAttention):
  MODEL:forward, MODEL:backward  the graphs AOTAutograd with PyTorch's core
                                 ATen decompositions makes (torch.compile);
  MODEL:eager                    forward and backward run eagerly, no
                                 decomposition (what the `tpk` device sees);
  adamw                          an AdamW step, one tensor at a time.

    python3 tools/aten_ops.py            # one line per op: name, then where it was seen
    python3 tools/aten_ops.py --check F  # exit 1 if F (this script's output) differs

The decomposition table is core_aten_decompositions() minus the three
entries that split scaled_dot_product_attention's forward while keeping its
backward whole (the torch.compile issue names them). Ops are printed as
ATen overload packets (`aten.addmm`), sorted; the overloads seen follow.
tests/python/aten_ops.txt holds the output for the pinned torch.
"""
import argparse
import collections
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch._functorch.aot_autograd import aot_module, make_boxed_func
from torch.utils._python_dispatch import TorchDispatchMode

KEEP_WHOLE = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_attention_math")


def decompositions():
    table = core_aten_decompositions()
    return {op: fn for op, fn in table.items() if not any(op.name().split("::")[-1].split(".")[0] == k
                                                            for k in KEEP_WHOLE)}


# The models the issues name, at the sizes each user gives them (these
# tests' small ones by default; bench/streams and bench/bench_compile.py
# take larger ones).
class Mlp(nn.Module):
    """A 2-layer MLP: linear, GELU, layernorm, linear, cross-entropy."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, classes)

    def forward(self, x, target):
        return F.cross_entropy(self.fc2(self.norm(F.gelu(self.fc1(x)))), target)


class RmsNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class Block(nn.Module):
    """A transformer block: RMSNorm, causal SDPA, SwiGLU, residuals; its loss
    is the output's sum, or its mean square."""

    def __init__(self, d=32, heads=4, hidden=64, down_bias=True, mean_square=False):
        super().__init__()
        self.heads, self.mean_square = heads, mean_square
        self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=down_bias)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        h = self.n2(x)
        y = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return y.square().mean() if self.mean_square else y.sum()


class Mha(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0].sum()


def traced_ops(model, *args):
    """Overloads in the forward and backward graphs AOTAutograd makes."""
    seen = collections.defaultdict(set)

    def compiler(kind):
        def compile(gm, inputs):
            for node in gm.graph.nodes:
                if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                    seen[node.target].add(kind)
            return make_boxed_func(gm)
        return compile

    compiled = aot_module(model, fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                          decompositions=decompositions())
    out = compiled(*args)
    out.backward()
    return seen


class Recorder(TorchDispatchMode):
    def __init__(self, seen, kind):
        super().__init__()
        self.seen, self.kind = seen, kind

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen[func].add(self.kind)
        return func(*args, **(kwargs or {}))


def eager_ops(model, *args):
    """Overloads the model's forward and backward run eagerly, with no
    decomposition: what the `tpk` device sees (gelu_backward,
    native_layer_norm_backward, nll_loss_forward, ...)."""
    seen = collections.defaultdict(set)
    with Recorder(seen, "eager"):
        model(*args).backward()
    return seen


def optimizer_ops():
    """Overloads an AdamW step runs eagerly, one tensor at a time."""
    seen = collections.defaultdict(set)
    model = nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()  # the first step creates the state
    model(torch.randn(2, 8)).sum().backward()
    with Recorder(seen, "adamw"), torch.no_grad():
        opt.step()
    return seen


def measure():
    torch.manual_seed(0)
    seen = collections.defaultdict(set)
    runs = [
        ("mlp", Mlp(), (torch.randn(8, 16), torch.randint(0, 10, (8,)))),
        ("transformer", Block(), (torch.randn(2, 6, 32),)),
        ("mha", Mha(), (torch.randn(2, 6, 32),)),
    ]
    for name, model, args in runs:
        for op, kinds in traced_ops(model, *args).items():
            seen[op] |= {f"{name}:{k}" for k in kinds}
        for op, kinds in eager_ops(model, *args).items():
            seen[op] |= {f"{name}:{k}" for k in kinds}
    for op, kinds in optimizer_ops().items():
        seen[op] |= kinds
    packets = collections.defaultdict(lambda: (set(), set()))
    for op, kinds in seen.items():
        namespace, name = op.name().split("::")
        if namespace != "aten":
            continue
        packet = name.split(".")[0]
        packets[packet][0].add(op._overloadname)
        packets[packet][1].update(kinds)
    lines = []
    for packet in sorted(packets):
        overloads, kinds = packets[packet]
        lines.append(f"{packet}\t{','.join(sorted(overloads))}\t{' '.join(sorted(kinds))}")
    return f"# torch {torch.__version__.split('+')[0]}: ATen ops (packet, overloads, where seen)\n" + \
        "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", metavar="FILE", help="compare with FILE; exit 1 and show the difference if it differs")
    args = ap.parse_args()
    text = measure()
    if not args.check:
        sys.stdout.write(text)
        return 0
    with open(args.check) as f:
        want = f.read()
    if want == text:
        return 0
    import difflib
    sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), text.splitlines(True), args.check, "measured"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
