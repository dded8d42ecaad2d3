"""kernels/reductions.tpk, kernels/adamw.tpk and kernels/conv2d.tpk against
PyTorch and NumPy on the CPU.

Tolerances (all f32 kernels; the references sum in other orders):
- sums and means: |a - e| <= 1e-5 * sum|x| of the row (or vector) + 1e-6;
  max is exact (it selects an element);
- AdamW: rtol 1e-5, atol 1e-7 on the updated param and states (PyTorch
  computes the bias corrections in double, the kernel in f32);
- conv2d: rtol 1e-4, atol 1e-4 (KH*KW*C <= a few hundred products of
  values <= 1 in magnitude, accumulated in f32 in another order).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpkrun

# ---- row reductions ----------------------------------------------------------------------

ROW_CASES = [
    ("tiny", dict(M=1, N=1), None),
    ("ragged", dict(M=37, N=1300), None),
    ("small_blocks", dict(M=70, N=300), dict(BM=8, BN=256)),
    ("moderate", dict(M=256, N=4096), None),
]

ROW_REFS = {
    "sum_rows": lambda x: x.double().sum(dim=1),
    "mean_rows": lambda x: x.double().mean(dim=1),
    "max_rows": lambda x: x.amax(dim=1),
}


def row_tolerance(x):
    return 1e-5 * np.abs(x).sum(axis=1).astype(np.float64) + 1e-6


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", ROW_CASES, ids=[c[0] for c in ROW_CASES])
@pytest.mark.parametrize("kernel", sorted(ROW_REFS))
def test_row_reduction(kernel, name, shape, tune, device):
    x = np.random.default_rng(1).uniform(-1, 1, (shape["M"], shape["N"])).astype(np.float32)
    # Rows of one sign expose a kernel that forgets part of a row (cancellation would hide it).
    x[0] = np.abs(x[0]) + 0.5
    out = tpkrun.run("reductions.tpk", kernel, shape, dict(x=x), tune=tune, device=device, outputs=["y"])
    ref = ROW_REFS[kernel](torch.from_numpy(x)).numpy()
    what = f"{kernel} {name} {device}"
    if kernel == "max_rows":
        np.testing.assert_array_equal(out["y"], ref, err_msg=what)
    else:
        tol = row_tolerance(x) / (shape["N"] if kernel == "mean_rows" else 1)
        assert out["y"].shape == ref.shape, what
        bad = np.abs(out["y"] - ref) > tol
        assert not bad.any(), f"{what}: rows {np.flatnonzero(bad)[:5]}: {out['y'][bad][:5]} != {ref[bad][:5]}"


def test_max_rows_propagates_nan_and_handles_neg_inf():
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [-5.0, -np.inf, -2.0]], np.float32)
    out = tpkrun.run("reductions.tpk", "max_rows", dict(M=3, N=3), dict(x=x), outputs=["y"])
    np.testing.assert_array_equal(out["y"], torch.from_numpy(x).amax(dim=1).numpy())


# ---- full reductions ---------------------------------------------------------------------

ALL_CASES = [
    ("tiny", dict(N=1), None),
    ("ragged", dict(N=5001), None),
    ("small_blocks", dict(N=1537), dict(BN=512)),
    ("moderate", dict(N=300000), None),
]


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", ALL_CASES, ids=[c[0] for c in ALL_CASES])
@pytest.mark.parametrize("kernel", ["sum_all", "max_all"])
def test_full_reduction(kernel, name, shape, tune, device):
    rng = np.random.default_rng(2)
    # Negative data: a kernel that let padding (0) into the max would be caught.
    x = (rng.uniform(-1, 1, shape["N"]) - (1.5 if kernel == "max_all" else 0.0)).astype(np.float32)
    out = tpkrun.run("reductions.tpk", kernel, shape, dict(x=x), tune=tune, device=device, outputs=["total"])
    xt = torch.from_numpy(x)
    what = f"{kernel} {name} {device}"
    if kernel == "max_all":
        np.testing.assert_array_equal(out["total"], xt.amax().reshape(1).numpy(), err_msg=what)
    else:
        ref = xt.double().sum().reshape(1).numpy()
        tpkrun.assert_close(out["total"], ref, rtol=0, atol=1e-6 * np.abs(x).sum() + 1e-6, what=what)


# ---- AdamW -------------------------------------------------------------------------------

ADAMW_CASES = [
    ("tiny", dict(N=1), None, 1),
    ("ragged", dict(N=5001), None, 1),
    ("small_blocks_step7", dict(N=3000), dict(BN=1024), 7),
    ("moderate_step100", dict(N=100003), None, 100),
]


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune,step", ADAMW_CASES, ids=[c[0] for c in ADAMW_CASES])
def test_adamw(name, shape, tune, step, device):
    rng = np.random.default_rng(3)
    N = shape["N"]
    param = rng.uniform(-1, 1, N).astype(np.float32)
    grad = rng.uniform(-1, 1, N).astype(np.float32)
    exp_avg = (0.1 * rng.uniform(-1, 1, N)).astype(np.float32) if step > 1 else np.zeros(N, np.float32)
    exp_avg_sq = (0.01 * rng.uniform(0, 1, N)).astype(np.float32) if step > 1 else np.zeros(N, np.float32)
    hyper = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)

    # PyTorch: one AdamW step from the same state (its step count is incremented to `step`).
    p = torch.nn.Parameter(torch.from_numpy(param.copy()))
    p.grad = torch.from_numpy(grad.copy())
    opt = torch.optim.AdamW([p], lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                            weight_decay=hyper["weight_decay"], foreach=False)
    opt.state[p] = dict(step=torch.tensor(float(step - 1)), exp_avg=torch.from_numpy(exp_avg.copy()),
                        exp_avg_sq=torch.from_numpy(exp_avg_sq.copy()))
    opt.step()

    out = tpkrun.run("adamw.tpk", "adamw", shape,
                     dict(param=param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq),
                     scalars=dict(hyper, step=step), tune=tune, device=device,
                     outputs=["param", "exp_avg", "exp_avg_sq"])
    state = opt.state[p]
    assert float(state["step"]) == step
    what = f"adamw {name} {device}"
    tpkrun.assert_close(out["exp_avg"], state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7, what=what + " exp_avg")
    tpkrun.assert_close(out["exp_avg_sq"], state["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-7,
                        what=what + " exp_avg_sq")
    tpkrun.assert_close(out["param"], p.detach().numpy(), rtol=1e-5, atol=1e-7, what=what + " param")
    # The step really moved the parameters (a kernel doing nothing would fail above, but say so).
    assert np.abs(out["param"] - param).max() > 1e-4, what


# ---- conv2d ------------------------------------------------------------------------------

# name, kernel, shape, scalars (pads), tunables
CONV_CASES = [
    ("tiny_valid", "conv2d_nhwc_valid", dict(N=1, H=1, W=1, C=1, KH=1, KW=1, F=1), None, None),
    ("tiny_same", "conv2d_nhwc_same", dict(N=1, H=1, W=1, C=1, KH=3, KW=3, F=1), None, None),
    ("ragged_valid", "conv2d_nhwc_valid", dict(N=2, H=9, W=37, C=5, KH=3, KW=2, F=7), None, None),
    ("ragged_same_even_kernel", "conv2d_nhwc_same", dict(N=2, H=9, W=37, C=5, KH=4, KW=2, F=7), None, None),
    ("same_small_blocks", "conv2d_nhwc_same", dict(N=1, H=12, W=20, C=70, KH=3, KW=3, F=40), None,
     dict(BW=8, BF=32, BC=32)),
    ("valid_small_blocks", "conv2d_nhwc_valid", dict(N=1, H=8, W=30, C=40, KH=5, KW=5, F=33), None,
     dict(BW=8, BF=32, BC=32)),
    ("padded", "conv2d_nhwc", dict(N=2, H=9, W=17, C=6, KH=3, KW=4, F=5, HO=11, WO=16),
     dict(pad_h=2, pad_w=1), None),
    # HO, WO larger than symmetric padding gives: 2 extra rows at the bottom, 3 extra columns on the right.
    ("padded_asymmetric", "conv2d_nhwc", dict(N=1, H=6, W=10, C=3, KH=2, KW=3, F=4, HO=9, WO=13),
     dict(pad_h=1, pad_w=2), dict(BW=8)),
    ("moderate_same", "conv2d_nhwc_same", dict(N=2, H=16, W=16, C=64, KH=3, KW=3, F=64), None, None),
]


def conv_reference(x, w, bias, kernel, shape, scalars):
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)      # NHWC -> NCHW
    wt = torch.from_numpy(w).permute(3, 2, 0, 1)      # [KH, KW, C, F] -> [F, C, KH, KW]
    bt = torch.from_numpy(bias)
    if kernel == "conv2d_nhwc_valid":
        y = F.conv2d(xt, wt, bt, padding=0)
    elif kernel == "conv2d_nhwc_same":
        y = F.conv2d(xt, wt, bt, padding="same")
    else:  # top/left padding given, bottom/right implied by HO, WO
        ph, pw = scalars["pad_h"], scalars["pad_w"]
        bottom = shape["HO"] - (shape["H"] + ph - shape["KH"] + 1)
        right = shape["WO"] - (shape["W"] + pw - shape["KW"] + 1)
        y = F.conv2d(F.pad(xt, (pw, right, ph, bottom)), wt, bt)
    return y.permute(0, 2, 3, 1).contiguous().numpy()


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,kernel,shape,scalars,tune", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv2d(name, kernel, shape, scalars, tune, device):
    rng = np.random.default_rng(4)
    s = shape
    x = rng.uniform(-1, 1, (s["N"], s["H"], s["W"], s["C"])).astype(np.float32)
    w = rng.uniform(-1, 1, (s["KH"], s["KW"], s["C"], s["F"])).astype(np.float32)
    bias = rng.uniform(-1, 1, s["F"]).astype(np.float32)
    out = tpkrun.run("conv2d.tpk", kernel, shape, dict(x=x, w=w, bias=bias), scalars=scalars, tune=tune,
                     device=device, outputs=["y"])
    tpkrun.assert_close(out["y"], conv_reference(x, w, bias, kernel, shape, scalars), rtol=1e-4, atol=1e-4,
                        what=f"{kernel} {name} {device}")
