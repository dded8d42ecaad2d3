"""The corpus kernels of issue 15 that skip work the data says is absent —
a grouped matmul over group offsets, block-sparse matmuls, an int4-weight
matmul over a ragged batch, a segmented sum with a scan over a ragged
stream — checked against NumPy on the host and a
simulated v5e, and timed on the simulator at two sparsity levels: the
sparser one is faster, in proportion to the live work."""

import numpy as np
import pytest

import tpk
from conftest import DEVICES, bf16, corpus

rng = np.random.default_rng(1515)


def sim_seconds(kernel, *args, **kw):
    kernel(*args, device="sim:v5e", convert=True, **kw)
    r = kernel.last_report
    assert 0 < r.roofline_seconds <= r.seconds
    return r.seconds, r


# ---- grouped matmul (megablox) ---------------------------------------------------------


def gmm_ref(x, w, ends):
    out = np.zeros((x.shape[0], w.shape[2]))
    for g in range(w.shape[0]):
        s, e = ends[g - 1] if g else 0, ends[g]
        out[s:e] = x[s:e].astype(np.float64) @ w[g].astype(np.float64)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_matmul_matches_numpy(device):
    prog = corpus("grouped_matmul.tpk")
    M, K, N, G = 300, 200, 160, 5
    x = bf16(rng.standard_normal((M, K)))
    w = bf16(rng.standard_normal((G, K, N)))
    # an empty group, groups inside one row block, one across several, padding rows at the end
    ends = np.array([0, 5, 140, 141, 290], dtype=np.int32)
    out = prog.gmm(x, w, ends, tune={"BM": 64, "BN": 128, "BK": 256}, device=device, convert=True)
    np.testing.assert_allclose(out, gmm_ref(x, w, ends), rtol=1e-4, atol=1e-3)
    assert not out[290:].any()


def test_grouped_matmul_time_follows_the_rows():
    prog = corpus("grouped_matmul.tpk")
    M, K, N, G = 4096, 1024, 1024, 8
    x = bf16(rng.standard_normal((M, K)))
    w = bf16(rng.standard_normal((G, K, N)))
    full = np.arange(1, G + 1, dtype=np.int32) * (M // G)
    half = np.arange(1, G + 1, dtype=np.int32) * (M // G // 2)  # half the rows routed, the rest dropped
    t_full, _ = sim_seconds(prog.gmm, x, w, full)
    t_half, _ = sim_seconds(prog.gmm, x, w, half)
    print(f"gmm: all rows {t_full * 1e6:.1f} us, half {t_half * 1e6:.1f} us, ratio {t_half / t_full:.3f}")
    assert 0.45 <= t_half / t_full <= 0.6, (t_full, t_half)


# ---- block-sparse matmuls ----------------------------------------------------------------


def bsr_inputs(M, K, N, density):
    BM = BK = 128
    TM, TK = -(-M // BM), -(-K // BK)
    a = bf16(rng.standard_normal((M, K)))
    b = bf16(rng.standard_normal((K, N)))
    nnz = np.array([max(1, round(TK * density))] * TM, dtype=np.int32)
    k_ids = np.zeros((TM, TK), dtype=np.int32)
    dense = np.zeros((M, K), np.float32)
    for r in range(TM):
        ids = np.sort(rng.permutation(TK)[:nnz[r]])
        k_ids[r, :nnz[r]] = ids
        for k in ids:
            dense[r * BM:(r + 1) * BM, k * BK:(k + 1) * BK] = a[r * BM:(r + 1) * BM, k * BK:(k + 1) * BK]
    return a, b, nnz, k_ids, dense


@pytest.mark.parametrize("device", DEVICES)
def test_bsr_matmul_matches_numpy(device):
    prog = corpus("block_sparse_matmul.tpk")
    a, b, nnz, k_ids, dense = bsr_inputs(300, 600, 200, 0.5)  # ragged in M, K and N
    nnz[1] = 0                                                  # an empty block row
    dense[128:256] = 0
    k_ids[0, nnz[0]:] = 99                                      # the unused tail is never read
    c = prog.bsr_matmul(a, b, nnz, k_ids, device=device, convert=True)
    np.testing.assert_allclose(c, dense.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_matmul_matches_numpy(device):
    prog = corpus("block_sparse_matmul.tpk")
    M, K, N = 300, 100, 260
    a, b = bf16(rng.standard_normal((M, K))), bf16(rng.standard_normal((K, N)))
    live = (rng.random((3, 3)) < 0.5).astype(np.int32)
    c = prog.masked_matmul(a, b, live, tune={"BN": 128}, device=device, convert=True)
    mask = np.repeat(np.repeat(live, 128, 0), 128, 1)[:M, :N] != 0
    np.testing.assert_allclose(c, np.where(mask, a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-3)


def test_bsr_matmul_time_follows_the_live_blocks():
    prog = corpus("block_sparse_matmul.tpk")
    secs = {}
    for density in (0.5, 0.25):
        a, b, nnz, k_ids, _ = bsr_inputs(2048, 4096, 2048, density)
        secs[density], _ = sim_seconds(prog.bsr_matmul, a, b, nnz, k_ids)
    print(f"bsr_matmul: half the K-blocks {secs[0.5] * 1e6:.1f} us, a quarter {secs[0.25] * 1e6:.1f} us, "
          f"ratio {secs[0.25] / secs[0.5]:.3f}")
    assert 0.45 <= secs[0.25] / secs[0.5] <= 0.55, secs


def test_masked_matmul_time_follows_the_live_blocks():
    prog = corpus("block_sparse_matmul.tpk")
    M, K, N = 2048, 2048, 2048
    a, b = bf16(rng.standard_normal((M, K))), bf16(rng.standard_normal((K, N)))
    T = M // 128
    diag = np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
    secs, blocks = {}, {}
    for band in (12, 8, 4, 0):  # a local-attention band of 2*band-1 blocks per row; 0: none live
        live = (diag < band).astype(np.int32)
        secs[band], _ = sim_seconds(prog.masked_matmul, a, b, live, tune={"BN": 128})
        blocks[band] = int(live.sum())
    print(f"masked_matmul: {blocks[8]} live blocks {secs[8] * 1e6:.1f} us, {blocks[4]} live blocks "
          f"{secs[4] * 1e6:.1f} us, none {secs[0] * 1e6:.1f} us (the {T * T} grid steps' overhead), "
          f"ratio {secs[4] / secs[8]:.3f}")
    assert secs[0] < secs[4] < secs[8] < secs[12]
    # every live block costs the same (each row's A block is loaded once, the
    # grid steps' overhead is the same for all)
    per_block = (secs[12] - secs[8]) / (blocks[12] - blocks[8]), (secs[8] - secs[4]) / (blocks[8] - blocks[4])
    assert abs(per_block[0] / per_block[1] - 1) < 0.1, (secs, blocks)


# ---- int4-weight matmul --------------------------------------------------------------------


def int4_inputs(M, K, N):
    x = bf16(rng.standard_normal((M, K)))
    q = rng.integers(0, 16, size=(K, N), dtype=np.uint32)
    packed = np.zeros((K // 8, N), np.uint32)
    for s in range(8):
        packed |= q[s::8] << np.uint32(4 * s)
    scale = (rng.random(N) * 0.1 + 0.01).astype(np.float32)
    return x, q, packed, scale


@pytest.mark.parametrize("device", DEVICES)
def test_int4_matmul_matches_dequantised_numpy(device):
    prog = corpus("int4_matmul.tpk")
    M, K, N = 100, 1040, 300  # ragged in every dimension (K: 2 blocks of 512, one of 16)
    x, q, packed, scale = int4_inputs(M, K, N)
    y = prog.matmul_int4(x, packed, scale, 40, tune={"BM": 64, "BN": 256, "BK": 512}, device=device,
                         convert=True)
    w = (q.astype(np.float64) - 8) * scale  # dequantise, then matmul
    ref = np.zeros((M, N))
    ref[:64] = x[:64].astype(np.float64) @ w  # 40 live rows: the first block of 64, its padding rows too
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)


def test_int4_matmul_time_follows_the_live_rows():
    prog = corpus("int4_matmul.tpk")
    M, K, N = 2048, 4096, 4096
    x, _, packed, scale = int4_inputs(M, K, N)
    t_all, _ = sim_seconds(prog.matmul_int4, x, packed, scale, M)
    t_half, _ = sim_seconds(prog.matmul_int4, x, packed, scale, M // 2)
    print(f"matmul_int4: {M} rows {t_all * 1e6:.1f} us, {M // 2} rows {t_half * 1e6:.1f} us, "
          f"ratio {t_half / t_all:.3f}")
    assert 0.45 <= t_half / t_all <= 0.55, (t_all, t_half)


# ---- a segmented sum with a scan ------------------------------------------------------------


def segmented_cumsum_ref(x, seg, n):
    y = np.zeros(len(x))
    for t in range(n):
        y[t] = x[t] + (y[t - 1] if t > 0 and seg[t] == seg[t - 1] else 0.0)
    return y


@pytest.mark.parametrize("device", DEVICES)
def test_segmented_cumsum_blocks_matches_numpy(device):
    prog = corpus("scans.tpk")
    T = 1000
    x = rng.standard_normal(T).astype(np.float32)
    seg = np.repeat(np.arange(40), rng.multinomial(T, [1 / 40] * 40)).astype(np.int32)  # runs cross blocks
    seg[300:600] = 7  # one run across two whole blocks
    y = prog.segmented_cumsum_blocks(x, seg, T, tune={"BT": 256}, device=device)
    np.testing.assert_allclose(y, segmented_cumsum_ref(x, seg, T), rtol=1e-4, atol=1e-4)
    y = prog.segmented_cumsum_blocks(x, seg, 300, tune={"BT": 256}, device=device)  # 300 live: two blocks
    np.testing.assert_allclose(y[:512], segmented_cumsum_ref(x, seg, 512)[:512], rtol=1e-4, atol=1e-4)
    assert not y[512:].any()


def test_segmented_cumsum_time_follows_the_live_tokens():
    prog = corpus("scans.tpk")
    T = 1 << 21
    x = rng.standard_normal(T).astype(np.float32)
    seg = np.sort(rng.integers(0, 4096, T)).astype(np.int32)
    t_all, _ = sim_seconds(prog.segmented_cumsum_blocks, x, seg, T)
    t_half, _ = sim_seconds(prog.segmented_cumsum_blocks, x, seg, T // 2)
    print(f"segmented_cumsum_blocks: {T} tokens {t_all * 1e6:.1f} us, {T // 2} {t_half * 1e6:.1f} us, "
          f"ratio {t_half / t_all:.3f}")
    assert 0.45 <= t_half / t_all <= 0.55, (t_all, t_half)
