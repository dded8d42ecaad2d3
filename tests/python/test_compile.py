"""torch.compile(model, backend="tpk") (python/tpk/backend.py): the models
of tools/aten_ops.py (an MLP with GELU, layer norm and cross-entropy; a
transformer block with RMSNorm, causal SDPA and SwiGLU;
nn.MultiheadAttention) and a model calling a user's .tpk matmul with a
backward kernel, compiled once each (a session fixture) and run on the host
and on a simulated v5e: forward and backward against eager PyTorch,
AdamW steps, the fallback of an unsupported op, dynamic sequence lengths
compiling once, the IR dump, the backend's registration (import and entry
point), and a second process compiling nothing.

The transformer's attention runs on tpk's bf16 flash-attention kernels,
hence its looser tolerance (as in test_graph_models.py).
"""
import copy
import importlib.util
import os
import subprocess
import sys
import textwrap
import tomllib
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpk
import tpk.backend
import tpk.torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("aten_ops", os.path.join(ROOT, "tools", "aten_ops.py"))
aten_ops = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("aten_ops", aten_ops)  # Dynamo looks modules of traced classes up by name
_spec.loader.exec_module(aten_ops)

# A user's matmul and its backward: a custom op inside the model, followed
# by a bias and GELU (the prologue/epilogue lower/fuse.c fuses into calls).
MATMUL = """
kernel mm(x: f32[M, K], w: f32[K, N]) -> (y: f32[M, N])
  backward mm_bwd
  tune BM in [32, 64], BN in [32, 64], BK in [32]
{
  for i in tiles(M, BM), j in tiles(N, BN) {
    var acc = zeros(f32[BM, BN]);
    for k in tiles(K, BK) { acc += dot(x[i, k], w[k, j]); }
    y[i, j] = acc;
  }
}

kernel mm_bwd(dy: f32[M, N], x: f32[M, K], w: f32[K, N]) -> (dx: f32[M, K], dw: f32[K, N])
  tune BM in [32, 64], BN in [32, 64], BK in [32]
{
  for i in tiles(M, BM), k in tiles(K, BK) {
    var acc = zeros(f32[BM, BK]);
    for j in tiles(N, BN) { acc += dot(dy[i, j], transpose(w[k, j])); }
    dx[i, k] = acc;
  }
  for k in tiles(K, BK), j in tiles(N, BN) {
    var acc = zeros(f32[BK, BN]);
    for i in tiles(M, BM) { acc += dot(transpose(x[i, k]), dy[i, j]); }
    dw[k, j] = acc;
  }
}
"""
tpk.torch.load_source(MATMUL, namespace="test_compile", name="matmul.tpk")


class CustomMlp(nn.Module):
    """gelu(x @ w + b) with the user's matmul, then a linear layer and
    cross-entropy."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32) * 0.25)
        self.b = nn.Parameter(torch.randn(32) * 0.1)
        self.out = nn.Linear(32, 10)

    def forward(self, x, target):
        return F.cross_entropy(self.out(F.gelu(torch.ops.test_compile.mm(x, self.w) + self.b)), target)


MODELS = {  # name -> (model, inputs, tolerance relative to the largest value)
    "mlp": (aten_ops.Mlp, lambda: (torch.randn(8, 16), torch.randint(0, 10, (8,))), 1e-4),
    "transformer": (aten_ops.Block, lambda: (torch.randn(2, 6, 32),), 5e-2),
    "mha": (aten_ops.Mha, lambda: (torch.randn(2, 6, 32),), 1e-4),
    "custom": (CustomMlp, lambda: (torch.randn(8, 16), torch.randint(0, 10, (8,))), 1e-4),
}
DEVICES = ["host", "sim:v5e"]


def close(got, want, rtol, what):
    scale = max(want.abs().max().item(), 1e-3)
    err = (got.double() - want.double()).abs().max().item()
    assert err <= rtol * scale, f"{what}: off by {err:.3g} (tolerance {rtol * scale:.3g})"


class Compiled:
    """A model compiled with backend="tpk" and the tpk graphs it made."""

    def __init__(self, name):
        make_model, make_args, self.rtol = MODELS[name]
        torch.manual_seed(0)
        self.model, self.args = make_model(), make_args()
        self.fn = torch.compile(self.model, backend="tpk")
        before = len(tpk.torch.compile_report().graphs)
        self.fn(*self.args).backward()  # compiles the forward and the backward
        self.graphs = tpk.torch.compile_report().graphs[before:]
        self.model.zero_grad()


@pytest.fixture(scope="session")
def compiled():
    torch._dynamo.reset()
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Compiled(name)
        return cache[name]
    return get


def forward_backward(model, fn, args):
    model.zero_grad()
    loss = fn(*args)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_backward_match_eager(compiled, name, device):
    c = compiled(name)
    assert [g.kind for g in c.graphs] == ["forward", "backward"]
    eager = copy.deepcopy(c.model)
    with tpk.device(device):
        loss, grads = forward_backward(c.model, c.fn, c.args)
    want_loss, want_grads = forward_backward(eager, eager, c.args)
    close(loss, want_loss, c.rtol, f"{name} loss")
    for n, g in grads.items():
        close(g, want_grads[n], c.rtol, f"{name} grad of {n}")
    for g in c.graphs:
        assert g.last_report.device == device
        if device == "host":
            assert not g.last_report.simulated
        else:  # each graph's simulated time, readable from Python
            assert g.last_report.chip == "v5e" and g.last_report.seconds > 0 and g.last_report.flops > 0


@pytest.mark.parametrize("name", ["mlp", "transformer", "mha"])
def test_decompositions_are_the_core_tables(name):
    """The backend's table (the core table's own decompositions) traces the
    models to the same forward and backward graphs as the whole of
    core_aten_decompositions(), whose CompositeImplicit entries AOTAutograd
    applies anyway."""
    from torch._functorch.aot_autograd import aot_module, make_boxed_func
    make_model, make_args, _ = MODELS[name]

    def graphs(table):
        torch.manual_seed(0)
        model, codes = make_model(), []

        def keep(gm, inputs):
            codes.append(gm.code)
            return make_boxed_func(gm)
        aot_module(model, fw_compiler=keep, bw_compiler=keep, decompositions=table)(*make_args()).backward()
        return codes
    assert graphs(tpk.backend.decompositions()) == graphs(tpk.backend.full_decompositions())


def test_custom_op_is_a_call_of_its_kernel(compiled):
    c = compiled("custom")
    forward, backward = c.graphs
    assert 'callee="mm"' in forward.ir and "torch" not in forward.ir
    assert 'callee="mm_bwd"' in backward.ir
    assert not forward.fallback and not backward.fallback


def test_saved_transposed_weights_are_not_copied(compiled):
    """The forward saves the transposed weights for the backward: PyTorch
    views of the weights, not copies tpk writes; the backward reads them as
    they lie (its input has the weight's own layout, with a permute in the
    graph)."""
    c = compiled("transformer")
    forward, backward = c.graphs
    weights = {tuple(p.shape) for p in c.model.parameters() if p.dim() == 2}
    transposed = {s[::-1] for s in weights} - weights  # the qkv projection's (32, 96)
    assert transposed
    outputs = [tuple(int(d) for d in p.dims) for p in forward.kernel.params if p.kind == "out" and
               all(d.isdigit() for d in p.dims)]
    assert not transposed & set(outputs), outputs
    inputs = [tuple(int(d) for d in p.dims) for p in backward.kernel.params if p.kind == "in" and
              all(d.isdigit() for d in p.dims)]
    assert (96, 32) in inputs


class Layer(aten_ops.Block):
    """The transformer block without its final sum: a layer to stack."""

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def test_a_deep_model_is_one_graph_each_way():
    """Four layers: graphs of over a hundred inputs and outputs, each still
    one tpk kernel (the extension launches kernels of any size)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[Layer() for _ in range(4)])
    eager = copy.deepcopy(model)
    x = torch.randn(2, 6, 32)
    tpk.torch.clear_compile_report()
    fn = torch.compile(model, backend="tpk")
    loss, grads = forward_backward(model, lambda x: fn(x).sum(), (x,))
    want_loss, want_grads = forward_backward(eager, lambda x: eager(x).sum(), (x,))
    close(loss, want_loss, 5e-2, "loss")
    for n, g in grads.items():
        close(g, want_grads[n], 5e-2, f"grad of {n}")
    forward, backward = tpk.torch.compile_report().graphs
    assert len(forward.kernel.params) > 64 and len(backward.kernel.params) > 64


def test_device_option_and_report():
    torch.manual_seed(0)
    model = aten_ops.Mlp()
    args = (torch.randn(8, 16), torch.randint(0, 10, (8,)))
    tpk.torch.clear_compile_report()
    fn = torch.compile(model, backend="tpk", options={"device": "sim:v5e"})
    loss = fn(*args)
    loss.backward()  # the option, not the block around the call, decides
    report = tpk.torch.compile_report()
    assert [g.device for g in report.graphs] == ["sim:v5e", "sim:v5e"]
    assert all(g.last_report.simulated and g.calls == 1 for g in report.graphs)
    assert report.sim_seconds == pytest.approx(sum(g.last_report.seconds for g in report.graphs))
    assert "forward_" in str(report) and "sim:v5e" in str(report)
    close(loss.detach(), model(*args).detach(), 1e-4, "loss")
    with pytest.raises(Exception, match="unknown chip 'nope'"):  # Dynamo wraps the backend's errors
        torch.compile(model, backend="tpk", options={"device": "sim:nope"})(*args)
    with pytest.raises(Exception, match="takes the option 'device'"):
        torch.compile(model, backend="tpk", options={"mode": "fast"})(*args)
    with pytest.raises(Exception, match="has no mode 'max-autotune'"):
        torch.compile(model, backend="tpk", mode="max-autotune")(*args)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_adamw_steps_give_eager_losses(compiled, name):
    c = compiled(name)
    eager = copy.deepcopy(c.model)
    runs = []
    for model, fn in ((c.model, c.fn), (eager, eager)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(1)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = fn(*c.args)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs.append(losses)
    for step, (got, want) in enumerate(zip(*runs)):
        assert got == pytest.approx(want, rel=c.rtol, abs=c.rtol), f"{name} step {step}: {runs}"


class WithCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return (torch.tanh(torch.cumsum(h, dim=1)) * h).sum()


def test_unsupported_op_falls_back_once_with_the_right_result():
    torch.manual_seed(0)
    model, x = WithCumsum(), torch.randn(5, 12)
    eager = copy.deepcopy(model)
    tpk.torch.clear_compile_report()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss, grads = forward_backward(model, torch.compile(model, backend="tpk"), (x,))
        again = copy.deepcopy(model)
        forward_backward(again, torch.compile(again, backend="tpk"), (x,))  # warned already
    # the forward's warning names cumsum, the backward's (compiled at the first
    # backward) what it adds: flip; the second model's, nothing new
    messages = [str(w.message) for w in caught if issubclass(w.category, tpk.backend.FallbackWarning)]
    assert len(messages) == 2, messages
    assert "aten.cumsum.default (not in tpk's graph vocabulary)" in messages[0]
    assert "aten.flip.default" in messages[1] and "cumsum" not in messages[1]
    want_loss, want_grads = forward_backward(eager, eager, (x,))
    close(loss, want_loss, 1e-4, "loss")
    for n, g in grads.items():
        close(g, want_grads[n], 1e-4, f"grad of {n}")
    report = tpk.torch.compile_report()
    assert "aten.cumsum.default" in report.fallback
    # the rest still ran in tpk: a part before the cumsum and one after it, each way
    assert {g.kind for g in report.graphs} == {"forward", "backward"} and all(g.calls for g in report.graphs)


def test_embedding_backward_is_an_index_put_in_tpk():
    """The core decompositions make an embedding's backward an index_put
    (accumulating repeated tokens): it runs in tpk, no fallback. An
    index_put with a None index (x[:, i] += v) falls back, named."""
    class Embedded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.out = torch.nn.Embedding(11, 6), torch.nn.Linear(6, 3)

        def forward(self, ids):
            return self.out(self.embed(ids)).square().sum()

    torch.manual_seed(0)
    model = Embedded()
    ids = torch.tensor([[1, 4, 4, 10], [0, 4, 7, 1]])  # repeats: their rows' gradients add up
    eager = copy.deepcopy(model)
    tpk.torch.clear_compile_report()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tpk.backend.FallbackWarning)
        loss, grads = forward_backward(model, torch.compile(model, backend="tpk"), (ids,))
    want_loss, want_grads = forward_backward(eager, eager, (ids,))
    close(loss, want_loss, 1e-5, "loss")
    for n, g in grads.items():
        close(g, want_grads[n], 1e-5, f"grad of {n}")
    assert not tpk.torch.compile_report().fallback

    def columns(x, i, v):
        x = x.clone()
        x[:, i] += v
        return x

    x, i, v = torch.randn(3, 5), torch.tensor([0, 3]), torch.randn(3, 2)
    with pytest.warns(tpk.backend.FallbackWarning, match=r"aten.index_put.default \(a list with None in it"):
        got = torch.compile(columns, backend="tpk")(x, i, v)
    close(got, columns(x, i, v), 1e-6, "x[:, i] += v")


def test_int64_inputs_outside_i32_run_in_pytorch():
    fn = torch.compile(lambda x, i: x * (i > 5), backend="tpk")
    x = torch.randn(3)
    small, large = torch.tensor([1, 7, 9]), torch.tensor([1, 2 ** 40, 9])
    assert torch.equal(fn(x, small), x * (small > 5))
    assert torch.equal(fn(x, large), x * (large > 5))  # i32 would take 2**40 for 0
    graph = tpk.torch.compile_report().graphs[-1]
    assert graph.calls == 1 and graph.eager_runs == 1


def test_float64_input_passed_through():
    fn = torch.compile(lambda x, d: (torch.relu(x), d), backend="tpk")
    x, d = torch.randn(3), torch.randn(2, dtype=torch.float64)
    y, same = fn(x, d)
    assert torch.equal(y, torch.relu(x)) and torch.equal(same, d)
    assert tpk.torch.compile_report().graphs[-1].calls == 1  # the relu ran in tpk


def test_a_graph_tpk_fails_to_compile_runs_in_pytorch(monkeypatch):
    def fails(*args):
        raise tpk.TpkError("a failure of tpk_graph_compile")
    monkeypatch.setattr(tpk.backend, "_compile_translation", fails)
    x = torch.randn(4)
    with pytest.warns(tpk.backend.FallbackWarning, match="could not compile graph inference_.*: a failure of"):
        y = torch.compile(lambda x: torch.relu(x) + 1, backend="tpk")(x)
    assert torch.equal(y, torch.relu(x) + 1)


def test_dynamic_sequence_lengths_compile_once():
    torch.manual_seed(0)
    model = aten_ops.Block()
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    tpk.torch.clear_compile_report()
    fn = torch.compile(model, backend="tpk", dynamic=True)
    compiler_runs = []
    for s in (3, 5, 8, 13, 16, 21, 30, 37):
        x = torch.randn(2, s, 32)
        loss, grads = forward_backward(model, fn, (x,))
        want_loss, want_grads = forward_backward(eager, eager, (x,))
        close(loss, want_loss, 5e-2, f"loss at S={s}")
        for n, g in grads.items():
            close(g, want_grads[n], 5e-2, f"grad of {n} at S={s}")
        compiler_runs.append(tpk.cache_stats()["compiler_runs"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # Dynamo's frame: once
    report = tpk.torch.compile_report()
    assert [(g.kind, g.calls) for g in report.graphs] == [("forward", 8), ("backward", 8)]  # tpk's graphs: once each
    assert "s" in report.graphs[0].kernel.symbols[0]
    assert len(set(compiler_runs)) == 1, f"compiler runs after each step: {compiler_runs}"


def run_python(code, env=None, timeout=120):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_dump_ir_goes_to_stderr_and_shows_the_call_fused():
    """TPK_DUMP_IR=1: each graph's IR and clusters on sys.stderr. The user's
    matmul with + bias and GELU after it is one call: its kernel with the
    epilogue at its stores (lower/fuse.c)."""
    code = """
        import torch, torch.nn.functional as F, tpk.torch
        tpk.torch.load_source(MATMUL, namespace="dump", name="matmul.tpk")
        w, b, x = torch.randn(16, 32), torch.randn(32), torch.randn(8, 16)
        with torch.no_grad():
            y = torch.compile(lambda x, w, b: F.gelu(torch.ops.dump.mm(x, w) + b), backend="tpk")(x, w, b)
        assert torch.allclose(y, F.gelu(x @ w + b), atol=1e-5)
    """
    proc = run_python(code.replace("MATMUL", repr(MATMUL)), {"TPK_DUMP_IR": "1"})
    assert "func @inference_0(%in0: f32[8,16], %in1: f32[16,32], %in2: f32[32])" in proc.stderr
    fused = proc.stderr.split("// graph, fused: the driver and its clusters")[1]
    driver = fused.split("\n}\n")[0]
    calls = [line for line in driver.splitlines() if " = call " in line]
    assert len(calls) == 1 and 'callee="inference_0.c0"' in calls[0], driver
    assert "kernel @inference_0.c0(%x: ref<f32[M,K]>" in fused  # the user's kernel, the bias beside it


def test_registered_by_import():
    """import tpk.torch registers "tpk" without importing Dynamo (a second of
    import for scripts that only define ops): when Dynamo's registry loads.
    Compiling imports no part of Inductor it does not use."""
    assert "tpk" in torch._dynamo.list_backends()
    run_python("""
        import sys, torch, tpk.torch
        assert "torch._dynamo" not in sys.modules
        x = torch.randn(5)
        assert torch.equal(torch.compile(lambda x: x * 2, backend="tpk")(x), x * 2)
        assert [g.name for g in tpk.torch.compile_report().graphs] == ["inference_0"]
        # a training step imports nothing of Inductor's debugging (aot_autograd's wrapper would)
        w = torch.randn(5, 5, requires_grad=True)
        torch.compile(lambda x: (x @ w).relu().sum(), backend="tpk")(x.view(1, 5)).backward()
        assert w.grad is not None and "torch._inductor.debug" not in sys.modules
    """)


def test_registered_by_the_entry_point(tmp_path):
    """Without `import tpk.torch`: Dynamo finds the backend through the
    package's torch_dynamo_backends entry point (pyproject.toml), as an
    installed tpk offers it; here a .dist-info on the path stands for the
    installation."""
    with open(os.path.join(ROOT, "python", "pyproject.toml"), "rb") as f:
        entry = tomllib.load(f)["project"]["entry-points"]["torch_dynamo_backends"]["tpk"]
    info = tmp_path / "tpk_entry_test-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tpk-entry-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[torch_dynamo_backends]\ntpk = {entry}\n")
    run_python("""
        import sys, torch
        assert "tpk" in torch._dynamo.list_backends()
        x = torch.randn(3, 4)
        assert torch.allclose(torch.compile(lambda x: torch.softmax(x, -1), backend="tpk")(x), torch.softmax(x, -1))
        import tpk.backend
        assert [g.name for g in tpk.backend.compile_report().graphs] == ["inference_0"]
        assert "tpk.torch" not in sys.modules
    """, {"PYTHONPATH": str(tmp_path)})


def test_second_process_compiles_nothing(tmp_path):
    """The compiled graphs and their clusters are kept on disk (the fused IR
    and the cc tier's code, by key) and a second process loads them: tpk
    runs no compiler and emits no C."""
    code = """
        import importlib.util, torch, tpk, tpk.torch
        spec = importlib.util.spec_from_file_location("aten_ops", "{root}/tools/aten_ops.py")
        aten_ops = importlib.util.module_from_spec(spec); spec.loader.exec_module(aten_ops)
        torch.manual_seed(0)
        model = aten_ops.Mlp()
        torch.compile(model, backend="tpk")(torch.randn(8, 16), torch.randint(0, 10, (8,))).backward()
        s = tpk.cache_stats()
        g = s["units"]["graph"]
        print(s["compiler_runs"], s["emitted"], g["misses"], g["loads"])
    """.format(root=ROOT)
    env = {"TPK_CACHE_DIR": str(tmp_path), "TPK_TIER": "cc"}
    first = run_python(code, env).stdout.split()
    second = run_python(code, env).stdout.split()
    runs, emitted, built, loaded = map(int, first)
    assert runs > 0 and emitted > 0 and built == 2 and loaded == 0
    runs, emitted, built, loaded = map(int, second)
    assert runs == 0 and emitted == 0 and built == 0 and loaded == 2


def test_graphs_run_their_parts_on_torchs_threads():
    """A compiled graph's launch from the thread that imported tpk.torch
    hands its parts to torch's intra-op (OpenMP) threads, which would
    otherwise spin on the cores tpk's own workers need; from another thread,
    to tpk's workers. Same results either way, and with torch on one thread
    (the parts then run one after another)."""
    run_python("""
        import threading, torch, tpk.torch
        torch.set_num_threads(2)
        f = torch.compile(lambda x: torch.exp(x * 0.5) + 1.0, backend="tpk", dynamic=False)
        x = torch.randn(1024, 1024)
        want = torch.exp(x * 0.5) + 1.0
        lent = lambda: tpk.torch.stats()["torch_thread_launches"]
        before = lent()
        assert torch.allclose(f(x), want)
        assert lent() > before, "the launch did not run on torch's threads"
        before, out = lent(), []
        t = threading.Thread(target=lambda: out.append(f(x)))
        t.start(); t.join()
        assert torch.allclose(out[0], want) and lent() == before
        torch.set_num_threads(1)
        assert torch.allclose(f(x), want) and lent() > before
    """, {"TPK_HOST_THREADS": "2"})
