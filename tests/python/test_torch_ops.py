"""tpk kernels as PyTorch custom ops (python/tpk/torch.py): a user's
kernel with its backward, every standard kernel through torch.ops.tpk,
opcheck, gradcheck, torch.compile without graph breaks, threads, and every
bad input the issue lists.

tpk has no float64, so gradcheck runs on float32 at tolerances chosen for
it (GRADCHECK below says why); bf16 kernels (flash attention) are checked
against PyTorch's autograd instead.
"""
import os
import threading
import warnings

import numpy as np
import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F

import tpk
import tpk.torch
from user_kernels import AXPY, SCALED_SOFTMAX

HERE = os.path.dirname(os.path.abspath(__file__))

# A user's kernels: a softmax with a temperature and its backward, an
# in-place update (user_kernels.py), and one with a requirement on its
# sizes (a launch that fails after the checks).
USER = SCALED_SOFTMAX + AXPY + """

kernel pairs(x: f32[N]) -> (y: f32[N])
  tune B in [64]
  require N >= 4
{
  for i in tiles(N, B) {
    y[i] = x[i] * 2.0;
  }
}
"""

ops = tpk.torch.load_source(USER, namespace="tpktest")
std = tpk.torch.std


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def ref_scaled_softmax(x, t):
    return torch.softmax(x * t, -1)


# ---- registration ----

def test_ops_are_defined_in_the_namespace():
    assert ops.scaled_softmax is torch.ops.tpktest.scaled_softmax
    assert set(ops) == {"scaled_softmax", "scaled_softmax_bwd", "axpy", "pairs"}
    schema = str(torch.ops.tpktest.scaled_softmax.default._schema)
    assert schema == "tpktest::scaled_softmax(Tensor x, float t) -> Tensor"
    assert str(torch.ops.tpktest.axpy.default._schema) == "tpktest::axpy(Tensor(a!) y, Tensor x, float a) -> ()"


def test_loading_the_same_source_again_keeps_the_ops():
    again = tpk.torch.load_source(USER, namespace="tpktest")
    assert again.scaled_softmax is ops.scaled_softmax


def test_another_source_under_taken_names_is_refused():
    # refused as a whole, before any op of the file is defined
    changed = USER.replace("x[i] * a", "x[i] * a * 1.0") + "kernel extra(x: f32[N]) -> (y: f32[N]) { y = x; }\n"
    with pytest.raises(tpk.TpkError, match=r"tpktest::\w+ is already defined by another source"):
        tpk.torch.load_source(changed, namespace="tpktest")
    assert not hasattr(torch.ops.tpktest, "extra")


def test_a_file_with_errors_raises_tpk_check_output(tmp_path):
    bad = tmp_path / "bad.tpk"
    bad.write_text("kernel k(x: f32[N]) -> (y: f32[N]) {\n  y = x +* 2.0;\n}\n")
    import subprocess
    tpk_cli = os.path.join(os.environ.get("TPK_BUILD", os.path.join(HERE, "..", "..", "build")), "tpk")
    check = subprocess.run([tpk_cli, "check", str(bad)], capture_output=True, text=True)
    assert check.returncode != 0
    with pytest.raises(tpk.TpkError) as err:
        tpk.torch.load(str(bad), namespace="tpkbad")
    assert str(err.value).strip() == (check.stdout + check.stderr).strip()


# ---- eager calls ----

@pytest.mark.parametrize("device", ["host", "sim:v5e"])
def test_user_op_matches_pytorch(device):
    x = rand(37, 130)
    with tpk.device(device):
        y = torch.ops.tpktest.scaled_softmax(x, 0.5)
    torch.testing.assert_close(y, ref_scaled_softmax(x, 0.5), rtol=1e-5, atol=1e-7)


def test_simulated_time_of_an_op_is_readable():
    x = rand(256, 512)
    with tpk.device("sim:v5e"):
        y = torch.ops.tpk.softmax(x)
    report = tpk.torch.last_report(torch.ops.tpk.softmax)
    assert report.simulated and report.chip == "v5e" and report.device == "sim:v5e"
    assert 0 < report.roofline_seconds <= report.seconds
    assert 0 < report.hbm_utilisation <= 1
    torch.testing.assert_close(y, torch.softmax(x, -1))
    torch.ops.tpk.softmax(x)  # on the host: nothing simulated
    assert not tpk.torch.last_report("tpk::softmax").simulated


def test_inout_is_updated_in_place():
    y, x = rand(100, seed=1), rand(100, seed=2)
    want = y + 3 * x
    ptr = y.data_ptr()
    assert torch.ops.tpktest.axpy(y, x, 3.0) is None
    assert y.data_ptr() == ptr
    torch.testing.assert_close(y, want)


def test_non_contiguous_inputs_are_copied_and_inout_written_back():
    x = rand(130, 37).t()  # [37, 130], not contiguous
    torch.testing.assert_close(torch.ops.tpktest.scaled_softmax(x, 2.0), ref_scaled_softmax(x, 2.0))
    base = torch.zeros(200)
    y = base[::2]  # a strided view: the op writes through it
    x = rand(100, seed=3)
    torch.ops.tpktest.axpy(y, x, 1.0)
    torch.testing.assert_close(base[::2], x)
    assert torch.count_nonzero(base[1::2]) == 0


def test_modes_see_the_op():
    # a call that needs no gradient skips the generic autograd kernel only
    # for plain CPU tensors with nothing in the way: a dispatch mode sees it
    seen = []

    class Log(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x = rand(4, 6)
    with Log():
        y = torch.ops.tpk.softmax(x)
    assert "tpk.softmax.default" in seen
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_backprop_through_an_op_without_backward_is_an_error():
    a = rand(3, 4).requires_grad_()
    c = torch.ops.tpk.matmul(a, rand(4, 5))
    assert c.requires_grad
    with pytest.raises(RuntimeError, match="tpk::matmul has no backward kernel"):
        c.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(torch.ops.tpk.matmul(a, rand(4, 5)), a @ rand(4, 5))


def test_in_place_op_refuses_tensors_that_need_grad():
    y = rand(100).requires_grad_()
    with pytest.raises(RuntimeError, match="tpktest::axpy writes 'y' in place and has no backward"):
        torch.ops.tpktest.axpy(y, rand(100, seed=1), 1.0)
    with torch.no_grad():
        torch.ops.tpktest.axpy(y, rand(100, seed=1), 1.0)


# ---- autograd ----

# gradcheck perturbs inputs by eps and compares finite differences with the
# analytic gradient. In float32 (tpk has no float64) a central difference
# at eps = 1e-3 on O(1) values has a rounding error of about
# ulp(1) / eps = 1e-4 and a truncation error of about eps^2 = 1e-6, so
# atol = 1e-3 leaves a margin of ~10x and still catches a wrong formula
# (errors of O(1)); PyTorch's own f32 kernels pass at the same tolerances
# and fail at gradcheck's float64 defaults (dsl/README.md, "Backward
# kernels").
GRADCHECK = dict(eps=1e-3, atol=1e-3, rtol=1e-2)


def gradcheck(fn, *inputs):
    with warnings.catch_warnings():  # float32 on purpose (above)
        warnings.filterwarnings("ignore", message=r"Input #\d+ requires gradient and is not a double")
        assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_gradcheck_user_kernel():
    x = rand(6, 9).requires_grad_()
    gradcheck(lambda x: torch.ops.tpktest.scaled_softmax(x, 0.7), x)


def test_backward_matches_pytorch_autograd():
    x = rand(37, 130).requires_grad_()
    g = rand(37, 130, seed=5)
    (got,) = torch.autograd.grad(torch.ops.tpktest.scaled_softmax(x, 0.5), x, g)
    (want,) = torch.autograd.grad(ref_scaled_softmax(x, 0.5), x, g)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


# ---- the standard library through torch.ops.tpk ----

def ids(n, high, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (n,), generator=g, dtype=torch.int32)


def positive(*shape, seed=0):
    return rand(*shape, seed=seed).abs() + 0.1


# Sample arguments of every standard kernel (small, ragged sizes), and a
# PyTorch reference where one is a line long; tests/std checks every kernel
# against PyTorch at many more shapes, so here the subject is the op: its
# schema, its output shapes and dtypes, its fake, its registration.
M, N, K, V = 5, 11, 3, 13
STD_ARGS = {
    "softmax": lambda: (rand(M, N),),
    "log_softmax": lambda: (rand(M, N),),
    "softmax_bwd": lambda: (torch.softmax(rand(M, N), -1), rand(M, N, seed=1)),
    "log_softmax_bwd": lambda: (torch.log_softmax(rand(M, N), -1), rand(M, N, seed=1)),
    "layernorm": lambda: (rand(M, N), rand(N, seed=1), rand(N, seed=2), 1e-5),
    "layernorm_bwd": lambda: (rand(M, N), rand(M, N, seed=1), rand(N, seed=2), rand(M, seed=3), positive(M, seed=4)),
    "rmsnorm": lambda: (rand(M, N), rand(N, seed=1), 1e-6),
    "rmsnorm_bwd": lambda: (rand(M, N), rand(M, N, seed=1), rand(N, seed=2), positive(M, seed=3)),
    "gelu": lambda: (rand(M, N),),
    "gelu_tanh": lambda: (rand(M, N),),
    "silu": lambda: (rand(M, N),),
    "swiglu": lambda: (rand(M, N), rand(M, N, seed=1)),
    "gelu_bwd": lambda: (rand(M, N), rand(M, N, seed=1)),
    "gelu_tanh_bwd": lambda: (rand(M, N), rand(M, N, seed=1)),
    "silu_bwd": lambda: (rand(M, N), rand(M, N, seed=1)),
    "swiglu_bwd": lambda: (rand(M, N), rand(M, N, seed=1), rand(M, N, seed=2)),
    "adamw": lambda: (rand(N), rand(N, seed=1), rand(N, seed=2), positive(N, seed=3), 1e-3, 0.9, 0.999, 1e-8, 0.01, 3),
    "flash_attention": lambda: attention_args(),
    "flash_attention_causal": lambda: attention_args(),
    "flash_attention_bwd": lambda: attention_bwd_args(False),
    "flash_attention_causal_bwd": lambda: attention_bwd_args(True),
    "bmm": lambda: (rand(2, M, K), rand(2, K, N, seed=1)),
    "conv2d_nhwc_valid": lambda: (rand(2, 6, 7, 3), rand(3, 2, 3, 4, seed=1), rand(4, seed=2)),
    "conv2d_nhwc_same": lambda: (rand(2, 6, 7, 3), rand(3, 3, 3, 4, seed=1), rand(4, seed=2)),
    "conv2d_nhwc": lambda: (rand(2, 6, 7, 3), rand(3, 3, 3, 4, seed=1), rand(4, seed=2), 1, 0, 6, 5),
    "cross_entropy": lambda: (rand(M, V), ids(M, V)),
    "cross_entropy_bwd": lambda: (rand(M, V), ids(M, V), torch.logsumexp(rand(M, V), -1), rand(M, seed=1)),
    "embedding": lambda: (rand(V, K), ids(7, V)),
    "embedding_bwd": lambda: (ids(7, V), rand(7, K), V),
    "scatter_add": lambda: (rand(V, K), ids(7, V), rand(7, K, seed=1)),
    "matmul": lambda: (rand(M, K), rand(K, N, seed=1)),
    "matmul_bf16": lambda: (rand(M, K, dtype=torch.bfloat16), rand(K, N, seed=1, dtype=torch.bfloat16)),
    "matmul_i8": lambda: (torch.randint(-9, 9, (M, K), dtype=torch.int8), torch.randint(-9, 9, (K, N), dtype=torch.int8)),
    "matmul_bias": lambda: (rand(M, K), rand(K, N, seed=1), rand(N, seed=2)),
    "matmul_bias_relu": lambda: (rand(M, K), rand(K, N, seed=1), rand(N, seed=2)),
    "matmul_bias_gelu": lambda: (rand(M, K), rand(K, N, seed=1), rand(N, seed=2)),
    "sum_rows": lambda: (rand(M, N),),
    "mean_rows": lambda: (rand(M, N),),
    "max_rows": lambda: (rand(M, N),),
    "sum_all": lambda: (rand(N),),
    "max_all": lambda: (rand(N),),
    "topk": lambda: (rand(M, N), K),
    "transpose": lambda: (rand(M, N),),
}


def attention_args():
    b, h, hkv, s, t, d = 1, 4, 2, 9, 12, 16
    bf = torch.bfloat16
    return rand(b, h, s, d, dtype=bf), rand(b, hkv, t, d, seed=1, dtype=bf), rand(b, hkv, t, d, seed=2, dtype=bf), 0.25


def attention_bwd_args(causal):
    q, k, v, scale = attention_args()
    fwd = torch.ops.tpk.flash_attention_causal if causal else torch.ops.tpk.flash_attention
    o, lse = fwd(q, k, v, scale)
    return q, k, v, o, rand(*o.shape, seed=3, dtype=torch.bfloat16), lse, scale


# One-line PyTorch references, compared at f32 tolerances.
STD_REF = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "gelu": lambda x: F.gelu(x),
    "silu": lambda x: F.silu(x),
    "bmm": torch.bmm,
    "matmul": torch.mm,
    "transpose": lambda x: x.t(),
    "sum_rows": lambda x: x.sum(-1),
    "embedding": lambda table, i: table[i.long()],
    "embedding_bwd": lambda i, dout, v: torch.zeros(v, dout.shape[1]).index_add_(0, i.long(), dout),
    "topk": lambda x, k: (torch.topk(x, k).values, torch.topk(x, k).indices.int()),
    "conv2d_nhwc_valid": lambda x, w, b: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), b).permute(0, 2, 3, 1),
    "matmul_bf16": lambda a, b: a.float() @ b.float(),
    "flash_attention": lambda q, k, v, scale: (
        F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1), v.float().repeat_interleave(2, 1),
                                       scale=scale).bfloat16(),
        torch.logsumexp(q.float() @ k.float().repeat_interleave(2, 1).transpose(-1, -2) * scale, -1)),
}


def test_every_standard_kernel_has_sample_arguments():
    assert set(tpk.std.kernel_names) == set(STD_ARGS)


@pytest.mark.parametrize("name", sorted(STD_ARGS))
def test_standard_kernel_through_torch_ops(name):
    args = STD_ARGS[name]()
    op = getattr(torch.ops.tpk, name)
    clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    got = op(*clones)
    outs = got if isinstance(got, tuple) else () if got is None else (got,)
    kernel = tpk.std[name]
    if not any(p.dtype == "bf16" for p in kernel.params):
        # the same kernel through the NumPy API, on the same values: the op
        # passes every argument in its place and sizes every output right
        n = len(kernel.inputs)
        syms = {a.name: v for a, v in zip(op.default._schema.arguments[n:], args[n:])}
        arrays = [a.numpy().copy() if isinstance(a, torch.Tensor) else a for a in args[:n]]
        want = kernel(*arrays, syms=syms or None)
        want = want if isinstance(want, tuple) else () if want is None else (want,)
        inouts = [i for i, p in enumerate(kernel.params[:n]) if p.kind == "inout"]
        for g, w in zip(list(outs) + [clones[i] for i in inouts], list(want) + [arrays[i] for i in inouts]):
            np.testing.assert_array_equal(g.numpy(), w)
    if name in STD_REF:
        want = STD_REF[name](*args)
        tol = 1e-2 if name == "flash_attention" else 1e-5  # bf16 output: 2^-8 relative, rounded twice
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, check_dtype=True)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        faked = op(*fakes)
    faked = faked if isinstance(faked, tuple) else () if faked is None else (faked,)
    assert [(o.shape, o.dtype) for o in outs] == [(f.shape, f.dtype) for f in faked]


@pytest.mark.parametrize("name", sorted(STD_ARGS))
def test_opcheck_standard_kernel(name):
    args = STD_ARGS[name]()
    if name in ("embedding", "layernorm", "rmsnorm", "softmax", "log_softmax", "gelu", "silu", "swiglu",
                "cross_entropy"):
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                     for a in args)
    torch.library.opcheck(getattr(torch.ops.tpk, name).default, args)


def test_opcheck_user_kernels():
    torch.library.opcheck(torch.ops.tpktest.scaled_softmax.default, (rand(7, 9).requires_grad_(), 0.3))
    torch.library.opcheck(torch.ops.tpktest.axpy.default, (rand(70), rand(70, seed=1), 2.0))


# gradcheck of every standard kernel that names a backward kernel, in
# float32 (GRADCHECK); the inputs that are not differentiated (ids,
# targets) are fixed.
STD_GRADCHECK = {
    "softmax": lambda: ((rand(4, 6),), lambda x: torch.ops.tpk.softmax(x)),
    "log_softmax": lambda: ((rand(4, 6),), lambda x: torch.ops.tpk.log_softmax(x)),
    "layernorm": lambda: ((rand(4, 6), rand(6, seed=1), rand(6, seed=2)),
                          lambda x, w, b: torch.ops.tpk.layernorm(x, w, b, 1e-5)[0]),
    "rmsnorm": lambda: ((rand(4, 6), rand(6, seed=1)), lambda x, w: torch.ops.tpk.rmsnorm(x, w, 1e-6)[0]),
    "gelu": lambda: ((rand(4, 6),), lambda x: torch.ops.tpk.gelu(x)),
    "gelu_tanh": lambda: ((rand(4, 6),), lambda x: torch.ops.tpk.gelu_tanh(x)),
    "silu": lambda: ((rand(4, 6),), lambda x: torch.ops.tpk.silu(x)),
    "swiglu": lambda: ((rand(4, 6), rand(4, 6, seed=1)), lambda a, b: torch.ops.tpk.swiglu(a, b)),
    "cross_entropy": lambda: ((rand(4, 7),), lambda x: torch.ops.tpk.cross_entropy(x, ids(4, 7))[0]),
    "embedding": lambda: ((rand(7, 3),), lambda t: torch.ops.tpk.embedding(t, ids(5, 7))),
}


@pytest.mark.parametrize("name", sorted(STD_GRADCHECK))
def test_gradcheck_standard_kernel(name):
    inputs, fn = STD_GRADCHECK[name]()
    gradcheck(fn, *(x.requires_grad_() for x in inputs))


def test_every_standard_backward_is_registered():
    have = {n for n in tpk.std.kernel_names if tpk.std[n].backward}
    assert have == set(STD_GRADCHECK) | {"flash_attention", "flash_attention_causal"}


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gradients_match_pytorch(causal):
    # bf16 inputs: finite differences mean nothing at 8 bits of mantissa,
    # so the gradients are compared with PyTorch's autograd of the same
    # bf16 inputs in float32 (the kernel accumulates in f32).
    q, k, v, scale = attention_args()
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    fwd = torch.ops.tpk.flash_attention_causal if causal else torch.ops.tpk.flash_attention
    o, _ = fwd(q, k, v, scale)
    do = rand(*o.shape, seed=7, dtype=torch.bfloat16)
    got = torch.autograd.grad(o, (q, k, v), do)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    s, t = q.shape[2], k.shape[2]
    # tpk's causal kernels align the diagonal bottom-right (kernels/attention.tpk)
    mask = torch.arange(t)[None, :] <= torch.arange(s)[:, None] + (t - s) if causal else None
    ref = F.scaled_dot_product_attention(q32, k32.repeat_interleave(rep, 1), v32.repeat_interleave(rep, 1),
                                         attn_mask=mask, scale=scale)
    want = torch.autograd.grad(ref, (q32, k32, v32), do.float())
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w, rtol=2e-2, atol=2e-2)


# ---- torch.compile ----

class Block(torch.nn.Module):
    """Linear -> tpk layernorm -> tpk gelu -> Linear -> the user's softmax."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.inp = torch.nn.Linear(16, 32)
        self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(32, generator=g))
        self.b = torch.nn.Parameter(0.1 * torch.randn(32, generator=g))
        self.out = torch.nn.Linear(32, 8)

    def forward(self, x):
        h, _, _ = torch.ops.tpk.layernorm(self.inp(x), self.w, self.b, 1e-5)
        return torch.ops.tpktest.scaled_softmax(self.out(torch.ops.tpk.gelu(h)), 0.5)


def forward_backward(model, x):
    y = model(x)
    loss = (y * torch.arange(y.shape[1], dtype=y.dtype)).sum()
    grads = torch.autograd.grad(loss, [x] + list(model.parameters()))
    return y.detach(), grads


@pytest.mark.parametrize("backend,dynamic", [("aot_eager", False), ("aot_eager", True), ("inductor", False),
                                             ("inductor", True)])
def test_compile_without_graph_breaks(backend, dynamic):
    torch._dynamo.reset()
    model = Block()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=dynamic)
    rows = [3, 5, 8] if dynamic else [5]
    for m in rows:
        x = rand(m, 16, seed=m).requires_grad_()
        got_y, got_g = forward_backward(compiled, x)
        want_y, want_g = forward_backward(model, x)
        torch.testing.assert_close(got_y, want_y, rtol=1e-5, atol=1e-6)
        for g, w in zip(got_g, want_g):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 1  # one graph, and with dynamic=True one for every size


# ---- threads ----

def test_ops_from_eight_threads():
    errors = []

    def work(t):
        try:
            for i in range(20):
                x = rand(3 + t, 5 + i, seed=t * 100 + i)
                torch.testing.assert_close(torch.ops.tpk.softmax(x), torch.softmax(x, -1))
                y, _, _ = torch.ops.tpk.layernorm(x, torch.ones(x.shape[1]), torch.zeros(x.shape[1]), 1e-5)
                torch.testing.assert_close(y, F.layer_norm(x, (x.shape[1],), eps=1e-5), rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001  (reported below, with the thread)
            errors.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


class OpsDataset(torch.utils.data.Dataset):
    """Items computed by tpk ops, at a new size each (compiled in the worker)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        x = torch.full((3, 5 + i), float(i))
        return torch.ops.tpktest.scaled_softmax(x, 1.0).sum(), torch.ops.tpk.gelu(x).sum()


def test_ops_in_dataloader_workers():
    # the workers are forked from a process whose context, compiled code and
    # worker threads already exist
    torch.ops.tpktest.scaled_softmax(rand(3, 4), 1.0)
    got = [b for batch in torch.utils.data.DataLoader(OpsDataset(), batch_size=4, num_workers=2) for b in zip(*batch)]
    for i, (rows, gelu) in enumerate(got):
        assert rows.item() == pytest.approx(3.0)
        assert gelu.item() == pytest.approx(F.gelu(torch.full((3, 5 + i), float(i))).sum().item(), rel=1e-5)


# ---- bad input ----

def test_wrong_dtype_names_the_parameter():
    with pytest.raises(TypeError, match=r"'x'.*f32.*float64|'x'.*float64.*f32"):
        torch.ops.tpk.softmax(rand(4, 4).double())


def test_wrong_rank_names_the_parameter():
    with pytest.raises(ValueError, match="'x'"):
        torch.ops.tpk.softmax(rand(4))


def test_mismatched_sizes_name_both_parameters():
    with pytest.raises(Exception, match=r"(?s)(?=.*'x')(?=.*'w')"):
        torch.ops.tpk.layernorm(rand(5, 11), rand(10), rand(11), 1e-5)


def test_tensors_on_two_devices_are_refused():
    with pytest.raises(RuntimeError, match="device"):
        torch.ops.tpk.layernorm(rand(5, 11), torch.empty(11, device="meta"), rand(11), 1e-5)


def test_meta_tensors_give_shapes_only():
    y, mean, rstd = torch.ops.tpk.layernorm(torch.empty(5, 11, device="meta"), torch.empty(11, device="meta"),
                                            torch.empty(11, device="meta"), 1e-5)
    assert (y.device.type, y.shape, mean.shape, rstd.shape) == ("meta", (5, 11), (5,), (5,))


def test_failed_launch_raises_tpk_message_and_writes_nothing():
    x = rand(3)
    before = x.clone()
    with pytest.raises(tpk.TpkError, match="requires N >= 4"):
        torch.ops.tpktest.pairs(x)
    torch.testing.assert_close(x, before, rtol=0, atol=0)
    y, before = rand(100), None
    before = y.clone()
    with pytest.raises(Exception, match=r"(?s)(?=.*'y')(?=.*'x')"):
        torch.ops.tpktest.axpy(y, rand(99), 1.0)
    torch.testing.assert_close(y, before, rtol=0, atol=0)
