"""Reference tests of the row-wise kernels: kernels/softmax.tpk,
layernorm.tpk, rmsnorm.tpk and cross_entropy.tpk, against PyTorch on the CPU
in float64 (autograd of the forward for every backward kernel), at tiny,
ragged and block-sized shapes, on every device of tpkrun.DEVICES, with the
default tunables and with one other declared value.

Tolerances, and why (f32 ulp at 1 is 1.2e-7):
- softmax: rtol 1e-5, atol 1e-9. The max is subtracted exactly (rows are
  offset by up to +-500 to make an unstable kernel overflow), exp and the
  division add a few ulps relative.
- log_softmax, cross-entropy loss and lse: atol 1e-5, rtol 1e-5: they are
  differences of O(10) numbers (x - max, log of a sum of up to 5000 terms),
  so the error is a few ulps of 10-30 absolute.
- layernorm / rmsnorm y, mean, rstd, dx: rtol 1e-5, atol 1e-5: means over
  N <= 1100 f32 terms of O(1) values (rows have offsets up to +-5 and scales
  0.5-2); the row statistics fed to the backward kernels are float64 values
  rounded to f32, as the forward kernel would give them.
- dw, db: sums over M <= 300 rows of O(1) terms: atol 2e-5, rtol 1e-5.
- cross_entropy_bwd: probabilities in [0, 1] times dloss in [-1, 1]:
  atol 1e-6, rtol 1e-5.
- softmax_bwd: dx = y * (dy - sum(dy * y)) with y in [0, 1] summing to 1
  and dy in [-1, 1], so |dx| <= 2 y: rtol 1e-5, atol 2e-7 (a few ulps of 1,
  the largest y; measured errors are below 4e-8).
- log_softmax_bwd: dx = dy - exp(y) * sum(dy), where |sum(dy)| grows to ~30
  over 1100 columns: rtol 1e-5, atol 2e-6 (a few ulps of that sum; measured
  errors are below 3e-7). y is fed as float64 rounded to f32, as the
  forward kernel would give it.
"""
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpkrun

DEVICES = tpkrun.DEVICES
EPS = 1e-5                       # the eps scalar passed to layernorm and rmsnorm


def _rng(*key):
    """A generator seeded by the test's kernel and shape, the same every run."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _dims(shape):
    return "x".join(f"{k}{v}" for k, v in shape.items())


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x)).double()


def _f32(x):
    return np.asarray(x.detach().numpy() if torch.is_tensor(x) else x, dtype=np.float32)


def _check(out, expected, rtol, atol, what):
    for name, ref in expected.items():
        tpkrun.assert_close(out[name], ref, rtol=rtol.get(name, rtol["*"]) if isinstance(rtol, dict) else rtol,
                            atol=atol.get(name, atol["*"]) if isinstance(atol, dict) else atol,
                            what=f"{what}: {name}")


# Row shapes [M, N]: tiny, small, aligned, and ragged against the default row
# blocks (BM = 16) and, for the backward passes' column grids (BN = 512
# columns, BR = 256 rows), spanning several of those blocks too.
ROW_SHAPES = [dict(M=1, N=1), dict(M=3, N=5), dict(M=37, N=130), dict(M=64, N=256), dict(M=300, N=1100)]


def _rows(rng, shape):
    """Rows with their own offset and scale, so a kernel that does not centre
    (or does not subtract the max) shows it."""
    m, n = shape["M"], shape["N"]
    offset = rng.uniform(-5.0, 5.0, size=(m, 1))
    scale = rng.uniform(0.5, 2.0, size=(m, 1))
    return (rng.uniform(-1.0, 1.0, size=(m, n)) * scale + offset).astype(np.float32)


# ---- softmax.tpk ----

def _check_softmax(kernel, shape, device, tune=None):
    rng = _rng(kernel, tuple(shape.values()))
    m, n = shape["M"], shape["N"]
    x = (rng.uniform(-10.0, 10.0, size=(m, n)) + rng.uniform(-500.0, 500.0, size=(m, 1))).astype(np.float32)
    out = tpkrun.run("softmax.tpk", kernel, shape, {"x": x}, tune=tune, device=device, outputs=["y"])
    what = f"{kernel} {_dims(shape)} on {device}"
    if kernel == "softmax":
        _check(out, {"y": torch.softmax(_t(x), -1).numpy()}, 1e-5, 1e-9, what)
    else:
        _check(out, {"y": torch.log_softmax(_t(x), -1).numpy()}, 1e-5, 1e-5, what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", ["softmax", "log_softmax"])
def test_softmax(kernel, shape, device):
    _check_softmax(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["softmax", "log_softmax"])
def test_softmax_other_block(kernel, device):
    _check_softmax(kernel, dict(M=70, N=300), device, tune=dict(BM=32))


def _check_softmax_bwd(kernel, shape, device, tune=None):
    """dx of softmax_bwd / log_softmax_bwd against autograd of the forward in
    float64, fed y as the forward kernel would give it (float64 rounded to
    f32) and dy in [-1, 1]."""
    rng = _rng(kernel, tuple(shape.values()))
    m, n = shape["M"], shape["N"]
    x = (rng.uniform(-10.0, 10.0, size=(m, n)) + rng.uniform(-500.0, 500.0, size=(m, 1))).astype(np.float32)
    dy = rng.uniform(-1.0, 1.0, size=(m, n)).astype(np.float32)
    tx = _t(x).requires_grad_()
    y = torch.softmax(tx, -1) if kernel == "softmax_bwd" else torch.log_softmax(tx, -1)
    y.backward(_t(dy))
    out = tpkrun.run("softmax.tpk", kernel, shape, {"dy": dy, "y": _f32(y)}, tune=tune, device=device,
                     outputs=["dx"])
    what = f"{kernel} {_dims(shape)} on {device}"
    _check(out, {"dx": tx.grad.numpy()}, 1e-5, 2e-7 if kernel == "softmax_bwd" else 2e-6, what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", ["softmax_bwd", "log_softmax_bwd"])
def test_softmax_bwd(kernel, shape, device):
    _check_softmax_bwd(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["softmax_bwd", "log_softmax_bwd"])
def test_softmax_bwd_other_block(kernel, device):
    _check_softmax_bwd(kernel, dict(M=70, N=300), device, tune=dict(BM=32))


# ---- layernorm.tpk and rmsnorm.tpk ----

def _stats64(x, centred):
    """float64 row statistics of the f32 input: mean (or 0) and rstd."""
    x64 = _t(x)
    mu = x64.mean(-1) if centred else torch.zeros(x64.shape[0], dtype=torch.float64)
    var = ((x64 - mu[:, None]) ** 2).mean(-1)
    return mu, 1.0 / torch.sqrt(var + EPS)


def _check_norm(kernel, shape, device, tune=None):
    rng = _rng(kernel, tuple(shape.values()))
    m, n = shape["M"], shape["N"]
    x = _rows(rng, shape)
    w = rng.uniform(-2.0, 2.0, size=n).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=n).astype(np.float32)
    dy = rng.uniform(-1.0, 1.0, size=(m, n)).astype(np.float32)
    layer = kernel.startswith("layernorm")
    mu, rstd = _stats64(x, centred=layer)
    tx, tw, tb = _t(x).requires_grad_(), _t(w).requires_grad_(), _t(b).requires_grad_()
    y = F.layer_norm(tx, (n,), tw, tb, EPS) if layer else F.rms_norm(tx, (n,), tw, EPS)
    file = "layernorm.tpk" if layer else "rmsnorm.tpk"
    what = f"{kernel} {_dims(shape)} on {device}"
    if kernel == "layernorm":
        out = tpkrun.run(file, kernel, shape, {"x": x, "w": w, "b": b}, scalars={"eps": EPS}, tune=tune,
                         device=device, outputs=["y", "mean", "rstd"])
        expected = {"y": y.detach().numpy(), "mean": mu.numpy(), "rstd": rstd.numpy()}
    elif kernel == "rmsnorm":
        out = tpkrun.run(file, kernel, shape, {"x": x, "w": w}, scalars={"eps": EPS}, tune=tune,
                         device=device, outputs=["y", "rstd"])
        expected = {"y": y.detach().numpy(), "rstd": rstd.numpy()}
    else:
        y.backward(_t(dy))
        inputs = {"dy": dy, "x": x, "w": w, "rstd": _f32(rstd)}
        expected = {"dx": tx.grad.numpy(), "dw": tw.grad.numpy()}
        if layer:
            inputs["mean"] = _f32(mu)
            expected["db"] = tb.grad.numpy()
        out = tpkrun.run(file, kernel, shape, inputs, tune=tune, device=device, outputs=list(expected))
    _check(out, expected, {"*": 1e-5}, {"*": 1e-5, "dw": 2e-5, "db": 2e-5}, what)


NORM_KERNELS = ["layernorm", "layernorm_bwd", "rmsnorm", "rmsnorm_bwd"]
NORM_TUNES = {"layernorm": dict(BM=8), "rmsnorm": dict(BM=32),
              "layernorm_bwd": dict(BM=16, BN=128, BR=16), "rmsnorm_bwd": dict(BM=32, BN=2048, BR=16)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", NORM_KERNELS)
def test_norm(kernel, shape, device):
    _check_norm(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", NORM_KERNELS)
def test_norm_other_blocks(kernel, device):
    _check_norm(kernel, dict(M=70, N=300), device, tune=NORM_TUNES[kernel])


# ---- cross_entropy.tpk ----

# [M, V]: tiny, small, aligned, and one spanning two row blocks of the
# default BM = 32 and three vocabulary blocks of BV = 2048 (both partial).
CE_SHAPES = [dict(M=1, V=1), dict(M=3, V=5), dict(M=37, V=130), dict(M=64, V=256), dict(M=37, V=5000)]


def _check_cross_entropy(kernel, shape, device, tune=None):
    rng = _rng(kernel, tuple(shape.values()))
    m, v = shape["M"], shape["V"]
    logits = (rng.uniform(-5.0, 5.0, size=(m, v)) + rng.uniform(-50.0, 50.0, size=(m, 1))).astype(np.float32)
    target = rng.integers(0, v, size=m).astype(np.int32)
    if m > 1:
        target[-1] = -100                    # PyTorch's ignore_index: loss 0, no gradient
    tl = _t(logits).requires_grad_()
    loss = F.cross_entropy(tl, torch.from_numpy(target).long(), reduction="none", ignore_index=-100)
    lse = torch.logsumexp(tl, -1)
    what = f"{kernel} {_dims(shape)} on {device}"
    if kernel == "cross_entropy":
        out = tpkrun.run("cross_entropy.tpk", kernel, shape, {"logits": logits, "target": target}, tune=tune,
                         device=device, outputs=["loss", "lse"])
        _check(out, {"loss": loss.detach().numpy(), "lse": lse.detach().numpy()}, 1e-5, 1e-5, what)
    else:
        dloss = rng.uniform(-1.0, 1.0, size=m).astype(np.float32)
        loss.backward(_t(dloss))
        inputs = {"logits": logits, "target": target, "lse": _f32(lse), "dloss": dloss}
        out = tpkrun.run("cross_entropy.tpk", kernel, shape, inputs, tune=tune, device=device,
                         outputs=["dlogits"])
        _check(out, {"dlogits": tl.grad.numpy()}, 1e-5, 1e-6, what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", CE_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", ["cross_entropy", "cross_entropy_bwd"])
def test_cross_entropy(kernel, shape, device):
    _check_cross_entropy(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["cross_entropy", "cross_entropy_bwd"])
def test_cross_entropy_other_blocks(kernel, device):
    _check_cross_entropy(kernel, dict(M=37, V=1300), device, tune=dict(BM=16, BV=512))
