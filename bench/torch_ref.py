#!/usr/bin/env python3
"""PyTorch CPU eager references for `tpk bench --suite std`.

`tpk bench --suite std` starts this script once and talks to it over a pipe,
one JSON request per line on stdin, one JSON answer per line on stdout, so
the tpk side can interleave its own measurements with PyTorch's (this
machine's speed drifts; measuring both in alternating blocks makes a slow
spell hit both). It also answers a single request piped in by hand:

    echo '{"threads": 1, "ops": [{"op": "softmax", "sym": {"M": 4096, "N": 4096},
           "dtype": "f32", "repeat": 5}]}' | python3 bench/torch_ref.py

Request:
    threads   torch.set_num_threads(threads): the number of threads tpk's host
              device uses, so the comparison is one core against one core
    ops       a list of {"op": KEY, "sym": {symbol: size}, "dtype": "f32" | "bf16"
              | "f16", "scalars": {name: value}, "int_max": SYMBOL or null,
              "repeat": N}; KEY is one of OPS below; integer inputs (targets,
              ids) are uniform in [0, sym[int_max]) (or [0, 8) without one),
              floats uniform in [-1, 1); "warmup": W
              untimed calls before the timed ones (default 0)

Answer:
    {"torch": "2.13.0+cpu", "threads": 1, "results": [{"op": KEY, "name":
     "torch.softmax", "times_ms": [...], "median_ms": 1.23, "error": null}]}
    or, without PyTorch, {"torch": null, "error": "...", "hint": "..."}.

The first request for an op and shape builds its inputs and calls it twice
(warm-up: allocator, oneDNN primitive caches); later requests for the same
op and shape reuse them, so asking for 5 timings 3 times costs 15 calls.
"""
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    TORCH_ERROR = None
except Exception as e:  # ImportError, or a broken installation
    torch = None
    TORCH_ERROR = f"{type(e).__name__}: {e}"

HINT = "install PyTorch for this python to get the reference column: pip install torch"

DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


class Inputs:
    """Seeded random tensors of one request."""

    def __init__(self, spec):
        self.sym = spec.get("sym", {})
        self.scalars = spec.get("scalars", {}) or {}
        self.dtype = getattr(torch, DTYPES.get(spec.get("dtype") or "f32", "float32"))
        int_max = spec.get("int_max")
        self.int_high = int(self.sym[int_max]) if int_max else 8
        self.gen = torch.Generator().manual_seed(0)

    def s(self, *names):
        missing = [n for n in names if n not in self.sym]
        if missing:
            raise KeyError(f"needs shape symbol{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        vals = [int(self.sym[n]) for n in names]
        return vals[0] if len(vals) == 1 else vals

    def scalar(self, name, default):
        return float(self.scalars.get(name, default))

    def floats(self, *shape, grad=False, low=-1.0):
        t = (torch.rand(*shape, generator=self.gen) * (1.0 - low) + low).to(self.dtype)
        return t.requires_grad_(grad)

    def ints(self, *shape, dtype=None):
        return torch.randint(0, self.int_high, shape, generator=self.gen, dtype=dtype or torch.int64)


def backward_of(forward, inputs, grad_out):
    """Time the backward pass alone: the graph is built once and kept."""
    out = forward()
    return lambda: torch.autograd.grad(out, inputs, grad_out, retain_graph=True)


# ---- the ops: KEY -> (name shown, builder(Inputs) -> a call to time) ----

def matmul_like(epilogue):
    def build(x):
        m, n, k = x.s("M", "N", "K")
        a, b, bias = x.floats(m, k), x.floats(k, n), x.floats(n)
        return lambda: epilogue(torch.addmm(bias, a, b))
    return build


def int_mm(x):
    m, n, k = x.s("M", "N", "K")
    a = torch.randint(-128, 128, (m, k), generator=x.gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=x.gen, dtype=torch.int8)
    return lambda: torch._int_mm(a, b)


def bmm(x):
    b, m, n, k = x.s("B", "M", "N", "K")
    p, q = x.floats(b, m, k), x.floats(b, k, n)
    return lambda: torch.bmm(p, q)


def rowwise(fn):
    def build(x):
        m, n = x.s("M", "N")
        t = x.floats(m, n)
        return lambda: fn(t)
    return build


def layer_norm(x):
    m, n = x.s("M", "N")
    t, w, b = x.floats(m, n), x.floats(n), x.floats(n)
    eps = x.scalar("eps", 1e-5)
    return lambda: F.layer_norm(t, (n,), w, b, eps)


def layer_norm_bwd(x):
    m, n = x.s("M", "N")
    t, w, b = x.floats(m, n, grad=True), x.floats(n, grad=True), x.floats(n, grad=True)
    eps = x.scalar("eps", 1e-5)
    return backward_of(lambda: F.layer_norm(t, (n,), w, b, eps), (t, w, b), x.floats(m, n))


def rms_norm(x):
    m, n = x.s("M", "N")
    t, w = x.floats(m, n), x.floats(n)
    eps = x.scalar("eps", 1e-6)
    return lambda: F.rms_norm(t, (n,), w, eps)


def rms_norm_bwd(x):
    m, n = x.s("M", "N")
    t, w = x.floats(m, n, grad=True), x.floats(n, grad=True)
    eps = x.scalar("eps", 1e-6)
    return backward_of(lambda: F.rms_norm(t, (n,), w, eps), (t, w), x.floats(m, n))


def elementwise(fn):
    def build(x):
        m, n = x.s("M", "N")
        t = x.floats(m, n)
        return lambda: fn(t)
    return build


def elementwise_bwd(fn):
    def build(x):
        m, n = x.s("M", "N")
        t = x.floats(m, n, grad=True)
        return backward_of(lambda: fn(t), (t,), x.floats(m, n))
    return build


def swiglu(x):
    m, n = x.s("M", "N")
    a, b = x.floats(m, n), x.floats(m, n)
    return lambda: F.silu(a) * b


def swiglu_bwd(x):
    m, n = x.s("M", "N")
    a, b = x.floats(m, n, grad=True), x.floats(m, n, grad=True)
    return backward_of(lambda: F.silu(a) * b, (a, b), x.floats(m, n))


def cross_entropy(x):
    m, v = x.s("M", "V")
    logits, target = x.floats(m, v), x.ints(m)
    return lambda: F.cross_entropy(logits, target, reduction="none")


def cross_entropy_bwd(x):
    m, v = x.s("M", "V")
    logits, target = x.floats(m, v, grad=True), x.ints(m)
    return backward_of(lambda: F.cross_entropy(logits, target, reduction="none"), (logits,), x.floats(m))


def attention_inputs(x, grad=False):
    b, h, hkv, s, t, d = x.s("B", "H", "HKV", "S", "T", "D")
    q = x.floats(b, h, s, d, grad=grad)
    k, v = x.floats(b, hkv, t, d, grad=grad), x.floats(b, hkv, t, d, grad=grad)
    return q, k, v, dict(scale=x.scalar("scale", d ** -0.5), enable_gqa=h != hkv)


def sdpa(causal):
    def build(x):
        q, k, v, kw = attention_inputs(x)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
    return build


def sdpa_bwd(causal):
    def build(x):
        q, k, v, kw = attention_inputs(x, grad=True)
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
        return backward_of(fwd, (q, k, v), x.floats(*q.shape))
    return build


def embedding(x):
    v, d, t = x.s("V", "D", "T")
    table, ids = x.floats(v, d), x.ints(t)
    return lambda: F.embedding(ids, table)


def embedding_bwd(x):
    v, d, t = x.s("V", "D", "T")
    g, ids = x.floats(t, d), x.ints(t)
    return lambda: torch.ops.aten.embedding_dense_backward(g, ids, v, -1, False)


def index_add(x):
    v, d, t = x.s("V", "D", "T")
    dst, src, ids = x.floats(v, d), x.floats(t, d), x.ints(t)
    return lambda: dst.index_add_(0, ids, src)


def whole(fn):
    def build(x):
        t = x.floats(x.s("N"))
        return lambda: fn(t)
    return build


def transpose(x):
    m, n = x.s("M", "N")
    t = x.floats(m, n)
    return lambda: t.t().contiguous()


def adamw(x):
    n = x.s("N")
    p, g = x.floats(n), x.floats(n)
    p.grad = g
    kw = dict(lr=x.scalar("lr", 1e-3), betas=(x.scalar("beta1", 0.9), x.scalar("beta2", 0.999)),
              eps=x.scalar("eps", 1e-8), weight_decay=x.scalar("weight_decay", 1e-2))
    try:  # the fastest CPU implementation when this PyTorch has it
        opt = torch.optim.AdamW([p], fused=True, **kw)
        opt.step()
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW([p], foreach=False, **kw)
    return opt.step


def conv2d(padding):
    def build(x):
        n, h, w, c, f, kh, kw = x.s("N", "H", "W", "C", "F", "KH", "KW")
        inp = x.floats(n, c, h, w).contiguous(memory_format=torch.channels_last)  # NHWC in memory
        weight = x.floats(f, c, kh, kw).contiguous(memory_format=torch.channels_last)
        bias = x.floats(f)
        return lambda: F.conv2d(inp, weight, bias, padding=padding)
    return build


def topk(x):
    m, n, k = x.s("M", "N", "K")
    t = x.floats(m, n)
    return lambda: torch.topk(t, k, dim=1)


def gelu_tanh(t):
    return F.gelu(t, approximate="tanh")


OPS = {
    "addmm": ("torch.addmm", matmul_like(lambda y: y)),
    "addmm_relu": ("relu(addmm)", matmul_like(lambda y: torch.relu(y))),
    "addmm_gelu": ("gelu(addmm)", matmul_like(lambda y: F.gelu(y))),
    "int_mm": ("torch._int_mm", int_mm),
    "bmm": ("torch.bmm", bmm),
    "softmax": ("torch.softmax", rowwise(lambda t: torch.softmax(t, -1))),
    "log_softmax": ("torch.log_softmax", rowwise(lambda t: torch.log_softmax(t, -1))),
    "softmax_bwd": ("torch.softmax bwd", elementwise_bwd(lambda t: torch.softmax(t, -1))),
    "log_softmax_bwd": ("torch.log_softmax bwd", elementwise_bwd(lambda t: torch.log_softmax(t, -1))),
    "layer_norm": ("F.layer_norm", layer_norm),
    "layer_norm_bwd": ("F.layer_norm bwd", layer_norm_bwd),
    "rms_norm": ("F.rms_norm", rms_norm),
    "rms_norm_bwd": ("F.rms_norm bwd", rms_norm_bwd),
    "gelu": ("F.gelu", elementwise(lambda t: F.gelu(t))),
    "gelu_tanh": ("F.gelu(tanh)", elementwise(gelu_tanh)),
    "silu": ("F.silu", elementwise(lambda t: F.silu(t))),
    "swiglu": ("silu(a)*b", swiglu),
    "gelu_bwd": ("F.gelu bwd", elementwise_bwd(lambda t: F.gelu(t))),
    "gelu_tanh_bwd": ("F.gelu(tanh) bwd", elementwise_bwd(gelu_tanh)),
    "silu_bwd": ("F.silu bwd", elementwise_bwd(lambda t: F.silu(t))),
    "swiglu_bwd": ("silu(a)*b bwd", swiglu_bwd),
    "cross_entropy": ("F.cross_entropy", cross_entropy),
    "cross_entropy_bwd": ("F.cross_entropy bwd", cross_entropy_bwd),
    "sdpa": ("F.sdpa", sdpa(False)),
    "sdpa_causal": ("F.sdpa causal", sdpa(True)),
    "sdpa_bwd": ("F.sdpa bwd", sdpa_bwd(False)),
    "sdpa_causal_bwd": ("F.sdpa causal bwd", sdpa_bwd(True)),
    "embedding": ("F.embedding", embedding),
    "embedding_bwd": ("embedding bwd", embedding_bwd),
    "index_add": ("index_add_", index_add),
    "sum_rows": ("torch.sum", rowwise(lambda t: t.sum(1))),
    "mean_rows": ("torch.mean", rowwise(lambda t: t.mean(1))),
    "max_rows": ("torch.amax", rowwise(lambda t: t.amax(1))),
    "sum_all": ("torch.sum", whole(lambda t: t.sum())),
    "max_all": ("torch.amax", whole(lambda t: t.amax())),
    "transpose": ("t().contiguous()", transpose),
    "adamw": ("optim.AdamW", adamw),
    "conv2d_same": ("F.conv2d NHWC", conv2d("same")),
    "conv2d_valid": ("F.conv2d NHWC", conv2d("valid")),
    "topk": ("torch.topk", topk),
}

_built = {"key": None, "call": None}  # the last op built, reused by the next rounds


def measure(spec):
    key = spec.get("op")
    name = OPS[key][0] if key in OPS else key
    result = {"op": key, "name": name, "times_ms": [], "median_ms": None, "error": None}
    try:
        if key not in OPS:
            raise KeyError(f"unknown op '{key}'")
        ident = json.dumps({k: v for k, v in spec.items() if k not in ("repeat", "warmup")}, sort_keys=True)
        if _built["key"] != ident:
            _built["key"], _built["call"] = None, None  # free the previous op's tensors first
            call = OPS[key][1](Inputs(spec))
            call()
            call()
            _built["key"], _built["call"] = ident, call
        call = _built["call"]
        for _ in range(max(0, int(spec.get("warmup", 0)))):
            call()
        times = []
        for _ in range(max(1, int(spec.get("repeat", 5)))):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        result["times_ms"] = times
        result["median_ms"] = statistics.median(times)
    except Exception as e:  # an answer, never a crash: tpk shows the message in the row
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        result["error"] = f"{name}: {msg}".splitlines()[0]
    return result


def answer(request):
    if torch is None:
        return {"torch": None, "error": TORCH_ERROR, "hint": HINT}
    threads = int(request.get("threads", 1))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "results": [measure(op) for op in request.get("ops", [])]}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as e:
            reply = {"torch": torch.__version__ if torch else None, "error": f"malformed request: {e}"}
        else:
            reply = answer(request)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
