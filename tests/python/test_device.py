"""The tpk PyTorch device (python/tpk/_torch_device.cpp, tpk/torch_device.py):
ordinary tensors on device="tpk", against the same code on the CPU.

Factories, copies both ways, views and writes through them (slices,
transposes, in-place ops on views: the defect the issue names is a write
through a view that is lost), an MLP trained with SGD and AdamW matching
the CPU, ops tpk does not have running on the CPU with one warning (or an
error with the fallback off), the three eager modes giving the same results,
and the environment. The device is sim:v5e unless a test says otherwise.
"""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import tpk.torch

import char_gpt  # the one-block character GPT (tests/python/char_gpt.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["debug", "strict", "fused"]


@pytest.fixture(params=MODES)
def mode(request):
    tpk.torch.set_eager_mode(request.param)
    yield request.param
    tpk.torch.set_eager_mode("strict")


def on_tpk(*tensors):
    return [t.to("tpk") for t in tensors]


def same(got, want, atol=1e-5, rtol=1e-4):
    """got (a tpk tensor) equals want (a CPU tensor): device, dtype, shape, values."""
    assert got.device.type == "tpk"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def cpu_ops():
    return set(tpk.torch.stats()["cpu_op_names"])


# ---- the device and its factories ----

def test_the_device_is_registered():
    assert torch._C._get_privateuse1_backend_name() == "tpk"
    assert torch.tpk.is_available() and torch.tpk.device_count() == 1 and torch.tpk.current_device() == 0
    for device in ("tpk", "tpk:0", torch.device("tpk"), torch.device("tpk", 0)):
        x = torch.ones(2, device=device)
        assert x.device == torch.device("tpk:0") and x.is_tpk and not x.is_cpu
    assert torch.ones(2).tpk().is_tpk
    assert tpk.torch.device_name() == "sim:v5e"
    torch.tpk.synchronize()
    with pytest.raises(RuntimeError, match="one device"):
        torch.ones(2, device="tpk:1")


def test_factories():
    same(torch.zeros(3, 4, device="tpk"), torch.zeros(3, 4))
    same(torch.ones(5, device="tpk", dtype=torch.bfloat16), torch.ones(5, dtype=torch.bfloat16))
    same(torch.full((2, 3), 7, device="tpk", dtype=torch.int32), torch.full((2, 3), 7, dtype=torch.int32))
    same(torch.arange(10, device="tpk"), torch.arange(10))  # int64: its bytes, ops on the CPU
    same(torch.empty(0, 3, device="tpk"), torch.empty(0, 3))
    assert torch.empty(2, 3, device="tpk").shape == (2, 3)
    torch.manual_seed(3)
    want = torch.randn(4, 5)
    torch.manual_seed(3)
    same(torch.randn(4, 5, device="tpk"), want)  # a seed gives the numbers the CPU gives from it


def test_the_device_has_a_generator_of_its_own():
    torch.tpk.manual_seed(5)
    assert torch.tpk.initial_seed() == 5
    state = torch.tpk.get_rng_state()
    cpu_state = torch.get_rng_state()
    a = torch.rand(6, device="tpk")
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU generator did not move
    torch.tpk.set_rng_state(state)
    same(torch.rand(6, device="tpk"), a.cpu())
    torch.tpk.manual_seed(5)
    got = torch.randn(3, 3, device="tpk") * torch.rand(3, device="tpk")
    torch.manual_seed(5)
    same(got, torch.randn(3, 3) * torch.rand(3))
    g = torch.Generator().manual_seed(7)  # a CPU generator given to a tpk op is used
    want = torch.randn(4, generator=torch.Generator().manual_seed(7))
    same(torch.randn(4, generator=g).to("tpk"), want)
    torch.manual_seed(9)  # seeds every device
    a = torch.rand(4, device="tpk").cpu()
    torch.tpk.manual_seed(9)
    assert torch.equal(torch.rand(4, device="tpk").cpu(), a)


def test_storage_is_a_tpk_buffer():
    x = torch.zeros(4, 4, device="tpk")
    base = x.data_ptr()
    assert base != 0 and x.untyped_storage().nbytes() == 64
    assert x[1].data_ptr() == base + 16 and x.t().data_ptr() == base
    assert x.view(16).untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


# ---- copies and sync points ----

def test_copies_both_ways():
    c = torch.randn(5, 6)
    x = c.to("tpk")
    same(x, c)
    assert torch.equal(x.cpu(), c)
    same(x.to(torch.float16), c.to(torch.float16))
    same(c.double().to("tpk").float(), c)           # float64 to tpk: its bytes, converted on the CPU
    y = torch.zeros(5, 6, device="tpk")
    y.copy_(c)
    same(y, c)
    y.copy_(x * 2)                                   # tpk to tpk
    same(y, c * 2)
    y.copy_(x.t().t()[:, :1])                        # broadcast from a strided view
    same(y, c[:, :1].expand(5, 6))
    y.view(-1)[1:].copy_(y.view(-1)[:-1].clone())
    flat = x.view(-1)
    flat[1:].copy_(flat[:-1])                        # overlapping bytes of one storage
    want = c.clone().view(-1)
    want[1:] = c.view(-1)[:-1]
    same(x, want.view(5, 6))
    before = cpu_ops()
    h = torch.zeros(6, device="tpk", dtype=torch.bfloat16)
    h.copy_(x[0])                                    # converted on the stream
    same(h, want[:6].to(torch.bfloat16))
    assert cpu_ops() == before
    z = torch.zeros(6, 5)
    z.copy_(x.t())                                   # from a transposed view to the CPU
    assert torch.equal(z, want.view(5, 6).t())
    assert x[2, 3].item() == want.view(5, 6)[2, 3].item()
    text = repr(x[:2, :2])
    assert "device='tpk:0'" in text and f"{c[0, 0].item():.4f}" in text
    assert x.sum().item() == pytest.approx(want.sum().item(), rel=1e-5)


# ---- views and writes through them ----

def test_views_read_the_storage(mode):
    c = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    x = c.to("tpk")
    for view in (lambda t: t[1:4, 2::2], lambda t: t.t(), lambda t: t.t()[1:3, 2:6], lambda t: t[:, 3],
                 lambda t: t.view(4, 12)[1:], lambda t: t[2:3].expand(4, 8), lambda t: t.unsqueeze(1)[::2],
                 lambda t: t.reshape(2, 3, 8).permute(2, 0, 1), lambda t: t[:, 2:6],
                 lambda t: t.view(6, 2, 4)[:, 1:].permute(2, 0, 1)):
        same(view(x) + 0.5, view(c) + 0.5)
        same(view(x).exp(), view(c).exp())


def test_writes_through_views_land(mode):
    def writes(y):
        y[:, 1].add_(10)             # a column: a strided view
        y.t()[2:4].mul_(2)           # rows of a transpose: columns of y
        y[0] = 7                     # setitem: fill_ of a view
        y[3:5, ::3] = y[1:3, :3]     # copy_ into a strided view, from another
        y[5].clamp_(min=-0.5)
        y.view(48)[40:].zero_()
        return y

    c = torch.randn(6, 8)
    want = writes(c.clone())
    x = c.to("tpk")
    got = writes(x)
    same(got, want)
    same(x, want)                     # the same tensor, written in place


def test_in_place_ops_are_seen_by_every_view(mode):
    c = torch.randn(4, 6)
    x = c.to("tpk")
    flat, col, tr = x.view(24), x[:, 2], x.t()
    x.add_(1)
    x.mul_(x)
    want = (c + 1) * (c + 1)
    same(flat, want.view(24))
    same(col, want[:, 2])
    same(tr, want.t())
    p = torch.nn.Parameter(torch.ones(3, device="tpk"))
    with torch.no_grad():
        p.sub_(torch.full((3,), 0.25, device="tpk"))
    same(p.detach(), torch.full((3,), 0.75))


def test_autograd_through_views(mode):
    c = torch.randn(4, 6)
    x = c.to("tpk").requires_grad_()
    ((x.t()[1:4] * 3).sum() + x[:, 0].exp().sum()).backward()
    cx = c.clone().requires_grad_()
    ((cx.t()[1:4] * 3).sum() + cx[:, 0].exp().sum()).backward()
    same(x.grad, cx.grad)


def test_backward_runs_on_the_calling_thread():
    """An autograd device thread would drop the backward's graph task after
    backward() returned, and its stashed Python context with it: at the
    end of a script that races the interpreter's shutdown and aborts
    ("terminate called without an active exception", seen in CI)."""
    import threading
    threads = []
    x = torch.randn(5, device="tpk").requires_grad_()
    y = x * 2
    y.register_hook(lambda g: threads.append(threading.get_ident()))
    y.sum().backward()
    assert threads == [threading.get_ident()]
    same(x.grad, torch.full((5,), 2.0))


# ---- ops against the CPU, in each mode ----

OPS = {
    "add": lambda x, w, b: x + 1.5,
    "mm": lambda x, w, b: x @ w,
    "linear": lambda x, w, b: F.linear(x, w.t(), b),
    "transpose": lambda x, w, b: x.t() * 2,
    "slice": lambda x, w, b: x[1:4, 2::2] + 1,
    "softmax": lambda x, w, b: torch.softmax(x, -1),
    "log_softmax": lambda x, w, b: F.log_softmax(x, 0),
    "sum": lambda x, w, b: x.sum(0),
    "mean": lambda x, w, b: x.mean(),
    "gelu": lambda x, w, b: F.gelu(x),
    "where": lambda x, w, b: torch.where(x > 0, x, 0.0),
    "cat": lambda x, w, b: torch.cat([x, x[:2]]),
    "broadcast": lambda x, w, b: b.expand(3, 5) * b,
    "to_bf16": lambda x, w, b: x.to(torch.bfloat16),
    "int32": lambda x, w, b: (x * 10).to(torch.int32) + 3,
    "layer_norm": lambda x, w, b: F.layer_norm(x, (8,)),
    "cross_entropy": lambda x, w, b: F.cross_entropy(x, torch.tensor([0, 7, 2, 3, 1, 5], device=x.device)),
    "amax": lambda x, w, b: x.amax(1, keepdim=True),
    "index": lambda x, w, b: x[torch.tensor([5, 0, -1, 0], device=x.device)] * 2,
    "index_by_cpu_tensor": lambda x, w, b: x[torch.tensor([[1, 2], [3, 0]])] + 1,
    "index_two_dims": lambda x, w, b: x[torch.tensor([0, 5]), torch.tensor([[1], [-7]], device=x.device)],
    "index_put_accumulate": lambda x, w, b: x.index_put((torch.tensor([1, 4, 4, 1], device=x.device),), x[:4] * 2,
                                                        accumulate=True),
    "setitem": lambda x, w, b: setitem(x.clone(), torch.tensor([0, 3], device=x.device), 7.0),
    "setitem_add": lambda x, w, b: setitem(x.clone(), (torch.tensor([2, 2]), torch.tensor([1, 6])), 1.5, add=True),
}


def setitem(x, i, v, add=False):
    if add:
        x[i] += v
    else:
        x[i] = v
    return x


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_match_the_cpu(mode, name):
    torch.manual_seed(0)
    xc, wc, bc = torch.randn(6, 8), torch.randn(8, 5), torch.randn(5)
    before = cpu_ops()
    same(OPS[name](*on_tpk(xc, wc, bc)), OPS[name](xc, wc, bc))
    assert cpu_ops() == before, f"{name} ran an op on the CPU"


def test_an_index_with_a_none_in_it_runs_on_the_cpu(mode):
    """x[:, i] += v: index_put with a None index, which tpk has not: the CPU's,
    right (the write lands in x's storage)."""
    x, i, v = torch.randn(3, 5), torch.tensor([0, 3]), torch.randn(3, 2)
    xt = x.to("tpk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xt[:, i.to("tpk")] += v.to("tpk")
    x[:, i] += v
    same(xt, x)


def test_compiled_graphs_take_int64_inputs_off_the_cpu():
    """A compiled graph's int64 inputs on tpk (token ids) become i32 without
    an op on the CPU; one past i32 runs the graph in PyTorch, right."""
    torch._dynamo.reset()
    fn = torch.compile(lambda x, i: x[i] * (i > 5).unsqueeze(-1), backend="tpk")
    x, small, large = torch.randn(7, 3), torch.tensor([1, 6, 3]), torch.tensor([1, 2 ** 40, 3])
    before = cpu_ops()
    same(fn(x.to("tpk"), small.to("tpk")), x[small] * (small > 5).unsqueeze(-1))
    assert cpu_ops() == before
    fn = torch.compile(lambda x, i: x * (i > 5), backend="tpk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # int64 ops of PyTorch's run on the CPU
        same(fn(x[0].to("tpk"), large.to("tpk")), x[0] * (large > 5))  # i32 would take 2**40 for 0
    graph = tpk.torch.compile_report().graphs[-1]
    assert graph.calls == 0 and graph.eager_runs == 1


def test_debug_mode_errors_name_the_op():
    tpk.torch.set_eager_mode("debug")
    try:
        with pytest.raises(RuntimeError, match="log"):
            torch.zeros(4, device="tpk").log()
    finally:
        tpk.torch.set_eager_mode("strict")
    assert torch.zeros(4, device="tpk").log().cpu()[0].item() == float("-inf")  # strict does not check


# ---- a model trained on the device ----

def train(device, optimizer, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    g = torch.Generator().manual_seed(1)
    data, labels = torch.randn(64, 20, generator=g), torch.randint(0, 4, (64,), generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(data.to(device)), labels.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mlp_trains_as_on_the_cpu(mode, optimizer):
    before = cpu_ops()
    losses, params = train("tpk", optimizer)
    want_losses, want_params = train("cpu", optimizer)
    assert cpu_ops() == before, "an op of the training step ran on the CPU"
    torch.testing.assert_close(losses, want_losses, atol=1e-5, rtol=1e-5)
    for p, q in zip(params, want_params):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
    assert losses[-1] < losses[0]


def test_the_modes_agree():
    results = {}
    for m in MODES:
        tpk.torch.set_eager_mode(m)
        results[m] = train("tpk", "adamw", steps=3)
    tpk.torch.set_eager_mode("strict")
    for m in ("debug", "fused"):
        torch.testing.assert_close(results[m][0], results["strict"][0], atol=1e-5, rtol=1e-5)


def test_fused_mode_runs_windows():
    tpk.torch.set_eager_mode("fused")
    try:
        before = tpk.torch.stats()
        x = torch.randn(8, 8, device="tpk")
        y = ((x * 2).exp() + x).sum(1)
        y.cpu()
        after = tpk.torch.stats()
    finally:
        tpk.torch.set_eager_mode("strict")
    assert after["windows"] > before["windows"]
    assert after["launches"] - before["launches"] < after["ops"] - before["ops"]  # fused: fewer launches than ops


def test_attention_heads_of_a_split_projection_stay_in_the_window():
    """q, k and v of one projection, split and viewed to heads (slices of
    its buffer), are read by ops in fused mode: the forward and backward
    of the character GPT are one window, not cut where SDPA reads them."""
    # 4 heads of a batch of 4; heads of 16 over a sequence of 16 (copied
    # on the host: a window would take one size for the other), right all the same
    for sizes, one_window in (({"dim": 32, "heads": 4}, True), ({"dim": 64, "heads": 2}, True),
                              ({"dim": 32, "heads": 2}, False)):
        text = char_gpt.synthetic_text()
        grads = []
        for device in ("cpu", "tpk"):
            model, _ = char_gpt.make(device, **sizes)
            tpk.torch.set_eager_mode("fused")
            try:
                before = tpk.torch.stats()
                logits = model(text[:, :-1].to(device))
                F.cross_entropy(logits.reshape(-1, model.vocab), text[:, 1:].reshape(-1).to(device)).backward()
                torch.tpk.synchronize()
                windows = tpk.torch.stats()["windows"] - before["windows"]
            finally:
                tpk.torch.set_eager_mode("strict")
            grads.append([p.grad.cpu() for p in model.parameters()])
        assert windows == 1 or not one_window
        for got, want in zip(*reversed(grads)):
            torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


# ---- ops tpk does not have ----

def test_an_op_tpk_lacks_runs_on_the_cpu_with_one_warning():
    c = torch.randn(3, 5)
    x = c.to("tpk")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.cumsum(x, 1)
        again = torch.cumsum(x * 2, 0)
    same(got, torch.cumsum(c, 1))
    same(again, torch.cumsum(c * 2, 0))
    named = [str(w.message) for w in caught if "aten::cumsum" in str(w.message)]
    assert len(named) == 1 and "runs on the CPU" in named[0]  # (cumsum.out: cumsum decomposes into it)
    assert "aten::cumsum.out" in cpu_ops()


def test_with_the_fallback_off_an_op_tpk_lacks_raises():
    x = torch.randn(4, device="tpk")
    tpk.torch.set_fallback(False)
    try:
        with pytest.raises(NotImplementedError, match="aten::_cummax_helper"):
            torch.cummax(x, 0)
        same(x + 1, x.cpu() + 1)  # ops tpk has still run
    finally:
        tpk.torch.set_fallback(True)


def test_the_environment_picks_device_mode_and_fallback():
    script = (
        "import torch, tpk.torch\n"
        "print(tpk.torch.device_name(), tpk.torch.eager_mode())\n"
        "x = torch.ones(3, device='tpk')\n"
        "print((x + 1).cpu().tolist())\n"
        "try:\n"
        "    torch.cumsum(x, 0)\n"
        "except NotImplementedError as e:\n"
        "    print('refused', 'aten::cumsum' in str(e))\n")
    env = dict(os.environ, TPK_DEVICE="host", TPK_EAGER="fused", TPK_FALLBACK="0",
               PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["host fused", "[2.0, 2.0, 2.0]", "refused True"]


def test_the_streams_launches_keep_tpks_threads():
    """On the host device with two threads, the stream's launches (fused
    windows, strict ops run inline) share their grids among tpk's own
    workers, not torch's intra-op threads: between the stream's launches
    those have nothing to do, and each lent launch woke them to spin on the
    cores the stream needs (torch.compile's graphs still lend them:
    test_compile.py). Same results."""
    script = (
        "import torch, tpk.torch\n"
        "torch.set_num_threads(2)\n"
        "c = torch.randn(1024, 1024)\n"
        "for mode in ('fused', 'strict'):\n"
        "    tpk.torch.set_eager_mode(mode)\n"
        "    x = c.to('tpk')\n"
        "    y = (x * 0.5).exp() + 1.0\n"
        "    assert torch.allclose(y.cpu(), (c * 0.5).exp() + 1.0)\n"
        "print(tpk.torch.stats()['launches'] > 0, tpk.torch.stats()['torch_thread_launches'])\n")
    env = dict(os.environ, TPK_DEVICE="host", TPK_HOST_THREADS="2", PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0"]


def test_set_device():
    c = torch.randn(4, 4)
    tpk.torch.set_device("host")
    try:
        assert tpk.torch.device_name() == "host"
        same((c.to("tpk") @ c.to("tpk")).relu(), (c @ c).relu())
    finally:
        tpk.torch.set_device("sim:v5e")
    with pytest.raises(RuntimeError):
        tpk.torch.set_device("sim:nothing")
    assert tpk.torch.device_name() == "sim:v5e"


def train_block(device, steps=4):
    model, opt = char_gpt.make(device)
    text = char_gpt.synthetic_text()
    return [char_gpt.step(model, opt, text, device).item() for _ in range(steps)]


@pytest.mark.parametrize("block_mode", ["strict", "fused"])
def test_transformer_block_trains_as_on_the_cpu(block_mode):
    tpk.torch.set_eager_mode(block_mode)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # clip_grad_norm_'s norms run on the CPU
            before = cpu_ops()
            losses = train_block("tpk")
    finally:
        tpk.torch.set_eager_mode("strict")
    # attention runs tpk's flash kernels: their rounding is not the CPU's
    torch.testing.assert_close(losses, train_block("cpu"), atol=1e-3, rtol=1e-3)
    assert cpu_ops() - before <= {"aten::linalg_vector_norm.out"}
