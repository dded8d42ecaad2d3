"""Unchanged PyTorch scripts on the tpk device (issue 14, "Unchanged
scripts"): each script is written once, as for any PyTorch device, and run
with only its `device` changed, against the same script on the CPU — in the
three eager modes, and compiled (aot_eager, tpk) on tpk tensors:

- an MLP classifier on synthetic data, trained with SGD and with AdamW;
- a small character-level GPT (embedding, causal
  F.scaled_dot_product_attention, layernorm, MLP, cross-entropy, AdamW,
  clip_grad_norm_) for a few hundred steps: its loss curve matches the CPU's;
- a model with a custom .tpk op that has a backward kernel.

Every op of these scripts runs on the tpk stream but argmax, whose result is
int64, which tpk has not: it runs on the CPU. arange's int64 positions are
made on the host and copied into the device's buffer, without a sync.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpk.torch
from user_kernels import SCALED_SOFTMAX

MODES = ["debug", "strict", "fused"]


@pytest.fixture(params=MODES)
def mode(request):
    tpk.torch.set_eager_mode(request.param)
    yield request.param
    tpk.torch.set_eager_mode("strict")


def cpu_ops():
    return set(tpk.torch.stats()["cpu_op_names"]) - {"aten::argmax"}


# ---- the scripts: ordinary PyTorch, `device` their one parameter ----

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


def train_mlp(device, optimizer, steps=30):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data, labels = torch.randn(256, 20, generator=g), torch.randint(0, 4, (256,), generator=g)
    model = MLP().to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for step in range(steps):
        i = (step * 32) % 256
        x, y = data[i:i + 32].to(device), labels[i:i + 32].to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(data.to(device)).argmax(-1).cpu() == labels).float().mean().item()
    return losses, accuracy


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab, d=32, heads=2, block=16, layers=1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def train_gpt(device, steps, compile=None):
    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT])
    model = CharGPT(len(chars)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    step_fn = torch.compile(model, backend=compile) if compile else model
    g = torch.Generator().manual_seed(2)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - 17, (4,), generator=g)
        x = torch.stack([data[s:s + 16] for s in starts]).to(device)
        y = torch.stack([data[s + 1:s + 17] for s in starts]).to(device)
        loss = step_fn(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


ops = tpk.torch.load_source(SCALED_SOFTMAX, namespace="tpkscripts")


class Gated(nn.Module):
    """A layer whose gate is a custom .tpk op (a softmax with a temperature)."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(16, 32), nn.Linear(32, 3)

    def forward(self, x):
        h = self.inp(x)
        return self.out(h * ops.scaled_softmax(h, 0.5))


def train_gated(device, steps=10, compile=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    data, labels = torch.randn(64, 16, generator=g), torch.randint(0, 3, (64,), generator=g)
    model = Gated().to(device)
    fn = torch.compile(model, backend=compile) if compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(fn(data.to(device)), labels.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---- the tests: the same script on the CPU and on tpk ----

_cpu = {}


def on_cpu(name, fn, *args):
    """A script's CPU run, once per session."""
    if name not in _cpu:
        _cpu[name] = fn("cpu", *args)
    return _cpu[name]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mlp_classifier(mode, optimizer):
    want_losses, want_acc = on_cpu(f"mlp-{optimizer}", train_mlp, optimizer)
    before = cpu_ops()
    losses, acc = train_mlp("tpk", optimizer)
    torch.testing.assert_close(losses, want_losses, atol=1e-4, rtol=1e-4)
    assert abs(acc - want_acc) <= 1 / 256 and losses[-1] < losses[0]
    assert cpu_ops() == before


# Steps per mode, for the suite's time (some 0.1 s a step on sim:v5e on the
# 2-core machine, shared; debug mode syncs and scans every op's outputs)
GPT_STEPS = {"debug": 30, "strict": 100, "fused": 200}


def test_char_gpt_loss_curve_matches_the_cpu(mode):
    want = on_cpu("gpt", train_gpt, GPT_STEPS["fused"])[:GPT_STEPS[mode]]
    before, calls = cpu_ops(), tpk.torch.stats()["cpu_ops"]
    got = train_gpt("tpk", GPT_STEPS[mode])
    assert got[-1] < 0.5 * got[0]  # it learns
    diff = max(abs(a - b) for a, b in zip(got, want))
    assert diff < 2e-2, f"the loss curves differ by up to {diff}"
    assert cpu_ops() == before and tpk.torch.stats()["cpu_ops"] == calls  # arange too: no op on the CPU


def test_a_custom_op_with_a_backward_kernel_in_a_model(mode):
    want = on_cpu("gated", train_gated)
    got = train_gated("tpk")
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", ["aot_eager", "tpk"])
def test_compiled_on_tpk_tensors(backend):
    torch._dynamo.reset()
    want = on_cpu("gpt-20", train_gpt, 20)
    got = train_gpt("tpk", 20, compile=backend)
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    want = on_cpu("gated", train_gated)
    got = train_gated("tpk", compile=backend)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
