"""kernels/attention.tpk against PyTorch on the CPU.

Forward: F.scaled_dot_product_attention (enable_gqa=True; is_causal=True when
S == T, else an explicit bottom-right mask j <= i + T - S), and torch.logsumexp
of the scaled, masked scores for lse. Backward: torch.autograd through the same
SDPA call, fed the reference o and lse, so the backward kernels are tested
independently of the forward ones.

The reference computes in f32 (f64 for lse) from the bf16-rounded inputs the
kernel sees. Tolerances: o is bf16 and the kernel rounds p to bf16 before
p @ v, so |o - ref| <= 2e-2 (inputs are uniform in [-1, 1), |o| <= 1); lse is
all f32, 1e-4. Gradients are f32 but made from bf16 p, dS and o (in delta),
so they are compared within 2e-2 of the largest reference gradient (+ 2e-2
relative).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpkrun

FILE = "attention.tpk"

# name, shape, tunables. Ragged: S and T not multiples of BQ / BKV.
CASES = [
    ("tiny", dict(B=1, H=1, HKV=1, S=1, T=1, D=1), None),
    ("ragged_gqa", dict(B=2, H=4, HKV=2, S=150, T=130, D=24), dict(BQ=128, BKV=128)),
    ("mqa_small_blocks", dict(B=1, H=3, HKV=1, S=200, T=200, D=64), dict(BQ=64, BKV=64)),
    ("s_longer_than_t", dict(B=1, H=2, HKV=1, S=70, T=33, D=16), dict(BQ=64, BKV=64)),
    ("moderate_gqa", dict(B=1, H=4, HKV=2, S=600, T=530, D=64), None),
]


def bf16(x):
    """Round to bf16 and back to f32, as tpk does with a float32 .npy fed to a bf16 parameter."""
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32)


def inputs(shape, seed):
    rng = np.random.default_rng(seed)
    B, H, HKV, S, T, D = (shape[n] for n in ("B", "H", "HKV", "S", "T", "D"))
    q = rng.uniform(-1, 1, (B, H, S, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, HKV, T, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, HKV, T, D)).astype(np.float32)
    dout = rng.uniform(-1, 1, (B, H, S, D)).astype(np.float32)
    return q, k, v, dout


def mask_for(S, T, causal):
    """Bottom-right causal mask: query i attends key j iff j <= i + (T - S)."""
    if not causal:
        return None
    i = torch.arange(S)[:, None]
    j = torch.arange(T)[None, :]
    return j <= i + (T - S)


def reference_forward(q, k, v, scale, causal):
    """o and lse from PyTorch. Rows attending no key get o = 0, lse = -inf."""
    S, T = q.shape[2], k.shape[2]
    mask = mask_for(S, T, causal)
    if causal and S == T:
        o = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True, enable_gqa=True)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    group = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(group, dim=1)
    s = scale * q.double() @ kk.transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        o = o.masked_fill(~mask.any(dim=1)[:, None], 0.0)
    lse = torch.logsumexp(s, dim=-1)
    return o, lse


def reference_backward(q, k, v, dout, scale, causal):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    S, T = q.shape[2], k.shape[2]
    mask = mask_for(S, T, causal)
    if causal and S == T:
        o = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True, enable_gqa=True)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    if mask is not None:
        # Rows with no key: zero output and no gradient (PyTorch may give NaN there).
        o = o.masked_fill(~mask.any(dim=1)[:, None], 0.0)
    o.backward(dout)
    return q.grad, k.grad, v.grad


def scale_of(shape):
    return 1.0 / np.sqrt(shape["D"])


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_forward(causal, name, shape, tune, device):
    kernel = "flash_attention_causal" if causal else "flash_attention"
    q, k, v, _ = inputs(shape, seed=1)
    scale = scale_of(shape)
    out = tpkrun.run(FILE, kernel, shape, dict(q=q, k=k, v=v), scalars=dict(scale=scale), tune=tune,
                     device=device, outputs=["o", "lse"])
    o_ref, lse_ref = reference_forward(bf16(q), bf16(k), bf16(v), scale, causal)
    what = f"{kernel} {name} {device}"
    tpkrun.assert_close(out["o"], o_ref.numpy(), rtol=2e-2, atol=2e-2, what=what + " o")
    # -inf (rows with no key) must match exactly; assert_close treats inf - inf as NaN.
    lse, lse_ref = out["lse"], lse_ref.numpy()
    assert np.array_equal(np.isneginf(lse), np.isneginf(lse_ref)), what + " lse: -inf rows differ"
    finite = np.isfinite(lse_ref)
    tpkrun.assert_close(lse[finite], lse_ref[finite], rtol=1e-4, atol=1e-4, what=what + " lse")


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_backward(causal, name, shape, tune, device):
    kernel = "flash_attention_causal_bwd" if causal else "flash_attention_bwd"
    q, k, v, dout = inputs(shape, seed=2)
    scale = scale_of(shape)
    qt, kt, vt, dt = bf16(q), bf16(k), bf16(v), bf16(dout)
    o_ref, lse_ref = reference_forward(qt, kt, vt, scale, causal)
    feed = dict(q=q, k=k, v=v, o=o_ref.numpy(), do=dout, lse=lse_ref.float().numpy())
    out = tpkrun.run(FILE, kernel, shape, feed, scalars=dict(scale=scale), tune=tune, device=device,
                     outputs=["dq", "dk", "dv"])
    refs = dict(zip(("dq", "dk", "dv"), reference_backward(qt, kt, vt, dt, scale, causal)))
    for name_g, ref in refs.items():
        ref = ref.numpy()
        atol = 2e-2 * max(float(np.abs(ref).max()), 1e-3)
        tpkrun.assert_close(out[name_g], ref, rtol=2e-2, atol=atol, what=f"{kernel} {name} {device} {name_g}")
