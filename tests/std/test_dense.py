"""Reference tests of the dense-math kernels: kernels/matmul.tpk, bmm.tpk and
activations.tpk, against NumPy (float64) and PyTorch on the CPU (float64, and
autograd for the backward kernels), at tiny, ragged and block-sized shapes,
on every device of tpkrun.DEVICES, with the default tunables and with one
other declared value.

Tolerances, and why:
- f32 matmul: a dot of K terms accumulated in f32 is within K * 2^-24 *
  (|a| @ |b|) of the exact result (the classic gamma_K bound); we allow
  twice that per element, against a float64 reference of the same inputs.
- bf16 matmul: the same bound, once the reference rounds its inputs to bf16
  the way tpk does (to nearest even): bf16 x bf16 products are exact in f32.
- i8 matmul: exact.
- epilogues: the matmul bound times the epilogue's slope (1 for bias and ReLU,
  at most 1.13 for GELU), plus a few ulps of the result for erf.
- activations: rtol 1e-5 (a few dozen ulps: erf, tanh, exp and sigmoid are
  approximations) and atol 2e-6, which covers the cancellation in
  1 + erf(x) for x < -3 that PyTorch's f32 GELU has too. The inputs include
  +-50 and +-1e4 so saturation is tested.
"""
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpkrun

DEVICES = tpkrun.DEVICES
EPS32 = 2.0 ** -24


def _rng(*key):
    """A generator seeded by the test's kernel and shape, the same every run."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _uniform(rng, shape, scale=1.0):
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32)


def _bf16(x):
    """Round float32 values to bf16 (nearest even), back as float32."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).to(torch.float32).numpy()


def _assert_within(actual, expected, bound, what):
    """|actual - expected| <= bound elementwise (bound broadcasts)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    excess = np.abs(actual - expected) - np.broadcast_to(bound, expected.shape)
    assert not np.isnan(actual).any(), f"{what}: NaN in the result"
    if excess.size:
        worst = np.unravel_index(np.argmax(excess), excess.shape)
        assert excess[worst] <= 0, (f"{what}: element {tuple(int(i) for i in worst)} is {actual[worst]!r}, "
                                    f"expected {expected[worst]!r} within {np.broadcast_to(bound, expected.shape)[worst]:.3g}")


def _dims(shape):
    return "x".join(f"{k}{v}" for k, v in shape.items())


# ---- matmul.tpk and bmm.tpk ----

# (M, K, N): the tiny ones, one of mixed small sizes, one aligned to small
# blocks, and one ragged against the default f32 blocks (512) that spans two
# blocks in every dimension. bf16 and i8 default to BN = BK = 1024, so
# WIDE_SHAPE crosses those too (M stays small: every block, even a partial
# one, costs a whole 512 x 1024 x 1024 product, and i8 is slow on the host).
MATMUL_SHAPES = [dict(M=1, K=1, N=1), dict(M=3, K=7, N=5), dict(M=37, K=67, N=130),
                 dict(M=64, K=128, N=256), dict(M=515, K=530, N=520)]
WIDE_SHAPE = dict(M=3, K=1030, N=1027)

EPILOGUES = {
    "matmul": lambda h: h,
    "matmul_bias": lambda h: h,
    "matmul_bias_relu": lambda h: np.maximum(h, 0.0),
    "matmul_bias_gelu": lambda h: F.gelu(torch.from_numpy(h)).numpy(),
}
# Largest slope of each epilogue: the matmul's error grows by at most this.
SLOPE = {"matmul": 1.0, "matmul_bias": 1.0, "matmul_bias_relu": 1.0, "matmul_bias_gelu": 1.13}


def _matmul_inputs(kernel, shape):
    rng = _rng(kernel, tuple(shape.values()))
    m, k, n = shape["M"], shape["K"], shape["N"]
    if kernel == "matmul_i8":
        return {"a": rng.integers(-128, 128, size=(m, k), dtype=np.int8),
                "b": rng.integers(-128, 128, size=(k, n), dtype=np.int8)}
    inputs = {"a": _uniform(rng, (m, k)), "b": _uniform(rng, (k, n))}
    if "bias" in kernel:
        inputs["bias"] = _uniform(rng, (n,))
    return inputs


def _check_matmul(kernel, shape, device, tune=None):
    inputs = _matmul_inputs(kernel, shape)
    out = tpkrun.run("matmul.tpk", kernel, shape, inputs, tune=tune, device=device, outputs=["c"])["c"]
    what = f"{kernel} {_dims(shape)} on {device}"
    if kernel == "matmul_i8":
        expected = inputs["a"].astype(np.int64) @ inputs["b"].astype(np.int64)
        assert out.dtype == np.int32, what
        np.testing.assert_array_equal(out, expected, err_msg=what)
        return
    a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    if kernel == "matmul_bf16":
        a, b = _bf16(inputs["a"]).astype(np.float64), _bf16(inputs["b"]).astype(np.float64)
    h = a @ b
    bound = 2 * shape["K"] * EPS32 * (np.abs(a) @ np.abs(b))
    if "bias" in kernel:
        h = h + inputs["bias"]
        bound = bound + 2 * EPS32 * np.abs(h)          # the f32 add of the bias
    expected = EPILOGUES.get(kernel, EPILOGUES["matmul"])(h)
    bound = SLOPE.get(kernel, 1.0) * bound + 4 * EPS32 * np.abs(expected) + 1e-30
    assert out.dtype == np.float32, what
    _assert_within(out, expected, bound, what)


MATMUL_KERNELS = ["matmul", "matmul_bf16", "matmul_i8", "matmul_bias", "matmul_bias_relu", "matmul_bias_gelu"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
def test_matmul(kernel, shape, device):
    _check_matmul(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["matmul_bf16", "matmul_i8"])
def test_matmul_ragged_wide_blocks(kernel, device):
    """bf16 and i8 default to BN = BK = 1024: cross those block edges too."""
    _check_matmul(kernel, WIDE_SHAPE, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", MATMUL_KERNELS)
def test_matmul_small_blocks(kernel, device):
    """Non-default tunables, with a shape ragged against them."""
    _check_matmul(kernel, dict(M=130, K=300, N=260), device, tune=dict(BM=128, BN=128, BK=256))


BMM_SHAPES = [dict(B=1, M=1, K=1, N=1), dict(B=2, M=3, K=7, N=5), dict(B=3, M=37, K=67, N=130),
              dict(B=2, M=64, K=128, N=256), dict(B=2, M=515, K=530, N=520)]


def _check_bmm(shape, device, tune=None):
    rng = _rng("bmm", tuple(shape.values()))
    a = _uniform(rng, (shape["B"], shape["M"], shape["K"]))
    b = _uniform(rng, (shape["B"], shape["K"], shape["N"]))
    out = tpkrun.run("bmm.tpk", "bmm", shape, {"a": a, "b": b}, tune=tune, device=device, outputs=["c"])["c"]
    expected = torch.bmm(torch.from_numpy(a).double(), torch.from_numpy(b).double()).numpy()
    bound = 2 * shape["K"] * EPS32 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    _assert_within(out, expected, bound, f"bmm {_dims(shape)} on {device}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", BMM_SHAPES, ids=_dims)
def test_bmm(shape, device):
    _check_bmm(shape, device)


@pytest.mark.parametrize("device", DEVICES)
def test_bmm_small_blocks(device):
    _check_bmm(dict(B=3, M=130, K=300, N=260), device, tune=dict(BM=128, BN=128, BK=256))


# ---- activations.tpk ----

# [M, N]: tiny, small, aligned, and ragged against the default 32 x 1024
# block in both dimensions, spanning two row and three column blocks.
ACT_SHAPES = [dict(M=1, N=1), dict(M=3, N=5), dict(M=37, N=130), dict(M=64, N=256), dict(M=37, N=2100)]
EXTREMES = np.array([-1e4, 1e4, -50, 50, -12, 12, -6, 6, -3, 3, 0], dtype=np.float32)


def _act_x(rng, shape):
    x = _uniform(rng, (shape["M"], shape["N"]), scale=4.0)
    flat = x.reshape(-1)
    n = min(flat.size, EXTREMES.size)
    flat[:n] = EXTREMES[:n]
    return x


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x)).double()


FORWARD = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x),
}


def _check_activation(kernel, shape, device, tune=None):
    rng = _rng(kernel, tuple(shape.values()))
    m, n = shape["M"], shape["N"]
    if kernel in FORWARD:
        x = _act_x(rng, shape)
        out = tpkrun.run("activations.tpk", kernel, shape, {"x": x}, tune=tune, device=device, outputs=["y"])
        expected = {"y": FORWARD[kernel](_t(x)).numpy()}
    elif kernel == "swiglu":
        a, b = _act_x(rng, shape), _uniform(rng, (m, n), 2.0)
        out = tpkrun.run("activations.tpk", kernel, shape, {"a": a, "b": b}, tune=tune, device=device,
                         outputs=["y"])
        expected = {"y": (F.silu(_t(a)) * _t(b)).numpy()}
    elif kernel == "swiglu_bwd":
        a, b, dy = _act_x(rng, shape), _uniform(rng, (m, n), 2.0), _uniform(rng, (m, n))
        out = tpkrun.run("activations.tpk", kernel, shape, {"dy": dy, "a": a, "b": b}, tune=tune,
                         device=device, outputs=["da", "db"])
        ta, tb = _t(a).requires_grad_(), _t(b).requires_grad_()
        (F.silu(ta) * tb).backward(_t(dy))
        expected = {"da": ta.grad.numpy(), "db": tb.grad.numpy()}
    else:                                    # gelu_bwd, gelu_tanh_bwd, silu_bwd
        x, dy = _act_x(rng, shape), _uniform(rng, (m, n))
        out = tpkrun.run("activations.tpk", kernel, shape, {"dy": dy, "x": x}, tune=tune, device=device,
                         outputs=["dx"])
        tx = _t(x).requires_grad_()
        FORWARD[kernel[:-4]](tx).backward(_t(dy))
        expected = {"dx": tx.grad.numpy()}
    for name, ref in expected.items():
        tpkrun.assert_close(out[name], ref, rtol=1e-5, atol=2e-6, what=f"{kernel}.{name} {_dims(shape)} on {device}")


ACT_KERNELS = ["gelu", "gelu_tanh", "silu", "swiglu", "gelu_bwd", "gelu_tanh_bwd", "silu_bwd", "swiglu_bwd"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", ACT_SHAPES, ids=_dims)
@pytest.mark.parametrize("kernel", ACT_KERNELS)
def test_activation(kernel, shape, device):
    _check_activation(kernel, shape, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ACT_KERNELS)
def test_activation_other_blocks(kernel, device):
    _check_activation(kernel, dict(M=70, N=1100), device, tune=dict(BM=8, BN=512))
