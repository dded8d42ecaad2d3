"""kernels/embedding.tpk, kernels/transpose.tpk and kernels/topk.tpk against
PyTorch and NumPy on the CPU.

Gathers, transposes and top-k values are exact (they move data), so they are
compared exactly. Scatter-adds sum in a different order than PyTorch, so they
get f32 tolerances (rtol 1e-5, atol 1e-5: at most a few hundred terms of
magnitude <= 1).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpkrun

# ---- embedding, embedding_bwd, scatter_add ---------------------------------------------

# name, shape (T tokens, D columns, V rows), tunables. T and D ragged w.r.t. the
# blocks; V small so that ids repeat (duplicates must accumulate).
EMB_CASES = [
    ("tiny", dict(T=1, D=1, V=1), None),
    ("ragged", dict(T=300, D=130, V=7), None),
    ("small_blocks", dict(T=150, D=200, V=50), dict(BT=64, BD=128)),
    ("moderate", dict(T=1000, D=600, V=300), None),
]


def emb_inputs(shape, seed):
    rng = np.random.default_rng(seed)
    T, D, V = shape["T"], shape["D"], shape["V"]
    ids = rng.integers(0, V, T).astype(np.int32)
    table = rng.uniform(-1, 1, (V, D)).astype(np.float32)
    rows = rng.uniform(-1, 1, (T, D)).astype(np.float32)
    return ids, table, rows


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", EMB_CASES, ids=[c[0] for c in EMB_CASES])
def test_embedding(name, shape, tune, device):
    ids, table, _ = emb_inputs(shape, seed=1)
    tune = {"BT": tune["BT"]} if tune else None
    out = tpkrun.run("embedding.tpk", "embedding", shape, dict(table=table, ids=ids), tune=tune,
                     device=device, outputs=["out"])
    ref = F.embedding(torch.from_numpy(ids).long(), torch.from_numpy(table)).numpy()
    np.testing.assert_array_equal(out["out"], ref, err_msg=f"embedding {name} {device}")


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", EMB_CASES, ids=[c[0] for c in EMB_CASES])
def test_embedding_bwd(name, shape, tune, device):
    ids, table, dout = emb_inputs(shape, seed=2)
    out = tpkrun.run("embedding.tpk", "embedding_bwd", shape, dict(ids=ids, dout=dout), tune=tune,
                     device=device, outputs=["dtable"])
    # The gradient of F.embedding with respect to its table, by autograd.
    weight = torch.from_numpy(table).requires_grad_(True)
    F.embedding(torch.from_numpy(ids).long(), weight).backward(torch.from_numpy(dout))
    tpkrun.assert_close(out["dtable"], weight.grad.numpy(), rtol=1e-5, atol=1e-5,
                        what=f"embedding_bwd {name} {device}")


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", EMB_CASES, ids=[c[0] for c in EMB_CASES])
def test_scatter_add(name, shape, tune, device):
    ids, dst, src = emb_inputs(shape, seed=3)
    out = tpkrun.run("embedding.tpk", "scatter_add", shape, dict(dst=dst, ids=ids, src=src), tune=tune,
                     device=device, outputs=["dst"])
    ref = torch.from_numpy(dst.copy()).index_add_(0, torch.from_numpy(ids).long(), torch.from_numpy(src))
    tpkrun.assert_close(out["dst"], ref.numpy(), rtol=1e-5, atol=1e-5, what=f"scatter_add {name} {device}")


def test_embedding_rejects_out_of_range_ids():
    shape = dict(T=5, D=3, V=4)
    ids = np.array([0, 1, 4, 2, 3], dtype=np.int32)  # 4 is past V
    table = np.zeros((4, 3), np.float32)
    with pytest.raises(tpkrun.TpkRunError, match="out of range"):
        tpkrun.run("embedding.tpk", "embedding", shape, dict(table=table, ids=ids))
    with pytest.raises(tpkrun.TpkRunError, match="out of range"):
        tpkrun.run("embedding.tpk", "embedding_bwd", shape, dict(ids=ids, dout=np.ones((5, 3), np.float32)))


# ---- transpose ---------------------------------------------------------------------------

T_CASES = [
    ("tiny", dict(M=1, N=1), None),
    ("ragged", dict(M=37, N=300), None),
    ("tall_small_blocks", dict(M=130, N=33), dict(B=32)),
    ("moderate", dict(M=600, N=520), dict(B=256)),
]


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,tune", T_CASES, ids=[c[0] for c in T_CASES])
def test_transpose(name, shape, tune, device):
    x = np.random.default_rng(4).uniform(-1, 1, (shape["M"], shape["N"])).astype(np.float32)
    out = tpkrun.run("transpose.tpk", "transpose", shape, dict(x=x), tune=tune, device=device, outputs=["y"])
    np.testing.assert_array_equal(out["y"], torch.from_numpy(x).t().contiguous().numpy(),
                                  err_msg=f"transpose {name} {device}")


# ---- topk ---------------------------------------------------------------------------------


def topk_reference(x, k):
    """Values and indices sorted by (NaN first, value descending, index ascending)."""
    cols = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    nan = np.isnan(x)
    order = np.stack([np.lexsort((c, -np.where(n, 0, r), ~n)) for r, n, c in zip(x, nan, cols)])[:, :k]
    return np.take_along_axis(x, order, axis=1), order.astype(np.int32)


def topk_data(kind, M, N, seed):
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.uniform(-1, 1, (M, N)).astype(np.float32)
    if kind == "ties":  # few distinct values: ties everywhere, plus +-inf
        x = rng.integers(-3, 3, (M, N)).astype(np.float32)
        x[rng.random((M, N)) < 0.05] = np.inf
        x[rng.random((M, N)) < 0.05] = -np.inf
        return x
    if kind == "nan":
        x = rng.uniform(-1, 1, (M, N)).astype(np.float32)
        x[rng.random((M, N)) < 0.1] = np.nan
        x[:, 0] = np.inf
        return x
    raise ValueError(kind)


TOPK_CASES = [
    ("tiny", dict(M=1, N=1, K=1), "uniform", None),
    ("ragged", dict(M=37, N=300, K=5), "uniform", None),
    ("ties_k_equals_n", dict(M=10, N=7, K=7), "ties", None),
    ("ties", dict(M=70, N=129, K=9), "ties", dict(BM=32)),
    ("nan", dict(M=13, N=50, K=8), "nan", None),
    ("moderate", dict(M=64, N=2000, K=16), "uniform", None),
]


@pytest.mark.parametrize("device", tpkrun.DEVICES)
@pytest.mark.parametrize("name,shape,data,tune", TOPK_CASES, ids=[c[0] for c in TOPK_CASES])
def test_topk(name, shape, data, tune, device):
    x = topk_data(data, shape["M"], shape["N"], seed=5)
    out = tpkrun.run("topk.tpk", "topk", shape, dict(x=x), tune=tune, device=device,
                     outputs=["values", "indices"])
    values, indices = topk_reference(x, shape["K"])
    what = f"topk {name} {device}"
    np.testing.assert_array_equal(out["values"], values, err_msg=what + " values")
    np.testing.assert_array_equal(out["indices"], indices, err_msg=what + " indices")
    # PyTorch agrees on the values (and on indices where the values are distinct).
    tv, ti = torch.topk(torch.from_numpy(x), shape["K"], dim=1, largest=True, sorted=True)
    np.testing.assert_array_equal(out["values"], tv.numpy(), err_msg=what + " values vs torch.topk")
    if data == "uniform":
        np.testing.assert_array_equal(out["indices"], ti.numpy(), err_msg=what + " indices vs torch.topk")


@pytest.mark.parametrize("device", tpkrun.DEVICES)
def test_topk_rejects_k_larger_than_n(device):
    # Past N there is nothing left to pick (it used to return index N and -inf).
    x = topk_data("uniform", 3, 8, seed=5)
    with pytest.raises(tpkrun.TpkRunError, match=r"K = 10 is larger than N = 8 \(it requires K <= N"):
        tpkrun.run("topk.tpk", "topk", dict(M=3, N=8, K=10), dict(x=x), device=device)
