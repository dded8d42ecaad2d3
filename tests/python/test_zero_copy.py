"""Arrays and tensors cross without copies: the kernel reads the input's own
memory and writes the output's, on the host and on a simulated chip."""
import numpy as np
import pytest
import torch

import tpk
from conftest import DEVICES

# y[i] = x[i], in order: when y is x shifted by one element of the same
# memory, later reads see earlier writes (values repeat, in a pattern that
# depends on how the code moves blocks), which happens only if the kernel
# reads the caller's memory: a copy of x gives the shifted values.
SHIFT = tpk.load_source("kernel copy(x: f32[N]) -> (y: f32[N]) { for i in 0..N { y[i] = x[i]; } }", name="copy.tpk")


@pytest.mark.parametrize("device", DEVICES)
def test_the_kernel_reads_the_inputs_memory(device):
    shifted = [0, 0, 1, 2, 3, 4, 5, 6, 7]
    buf = np.arange(9, dtype=np.float32)
    SHIFT.copy(buf[:-1].copy(), buf[1:], device=device)
    assert buf.tolist() == shifted
    buf = np.arange(9, dtype=np.float32)
    SHIFT.copy(buf[:-1], buf[1:], device=device)
    assert buf.tolist() != shifted and len(set(buf.tolist())) < 8
    t = torch.arange(9, dtype=torch.float32)
    SHIFT.copy.launch([t[:-1], t[1:]], device=device)
    assert t.tolist() != shifted and len(set(t.tolist())) < 8


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_are_written_in_place(device):
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    y = np.full_like(x, np.nan)
    address = y.__array_interface__["data"][0]
    assert tpk.std.softmax(x, y, device=device) is y
    assert y.__array_interface__["data"][0] == address
    np.testing.assert_allclose(y.sum(axis=1), np.ones(16), rtol=1e-5)
    # into a slice of a bigger array: only its rows change
    big = np.zeros((20, 32), np.float32)
    tpk.std.softmax(x, big[2:18], device=device)
    assert not big[:2].any() and not big[18:].any()
    assert np.array_equal(big[2:18], y)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_tensors(device):
    x = torch.randn(12, 40)
    y = torch.full((12, 40), float("nan"))
    report = tpk.std.softmax.launch([x, y], device=device)
    assert report.device == device and report.simulated == (device != "host")
    torch.testing.assert_close(y, torch.softmax(x, -1))
    # views with an offset into their storage, tensors that require grad, integer tensors
    rows = torch.randn(20, 40)[3:15]
    leaf = torch.randn(12, 40, requires_grad=True)
    out = torch.empty(12, 40)
    tpk.std.softmax.launch([rows, out], device=device)
    torch.testing.assert_close(out, torch.softmax(rows, -1))
    tpk.std.softmax.launch([leaf, out], device=device)
    torch.testing.assert_close(out, torch.softmax(leaf.detach(), -1))
    table, ids, emb = torch.randn(10, 6), torch.tensor([3, 0, 9], dtype=torch.int32), torch.empty(3, 6)
    tpk.std.embedding.launch([table, ids, emb], device=device)
    assert torch.equal(emb, table[ids.long()])


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_tensors(device):
    q, k, v = (torch.randn(1, 2, 16, 32).to(torch.bfloat16) for _ in range(3))
    o = torch.empty(1, 2, 16, 32, dtype=torch.bfloat16)
    kernel = tpk.std.flash_attention
    assert [p.dtype for p in kernel.params[:3]] == ["bf16"] * 3
    args = [q, k, v] + [0.125 if p.kind == "scalar" else None for p in kernel.params[3:]]
    shapes = tpk.param_shapes(kernel, {"q": q.shape, "k": k.shape, "v": v.shape})
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    for i, p in enumerate(kernel.params):
        if p.kind == "out":
            args[i] = o if p.name == "o" else torch.empty(shapes[p.name], dtype=dtypes[p.dtype])
    kernel.launch(args, device=device)
    ref = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * 0.125, -1) @ v.float()
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    a, b = torch.randn(8, 16).to(torch.bfloat16), torch.randn(16, 4).to(torch.bfloat16)
    c = torch.empty(8, 4)
    tpk.std.matmul_bf16.launch([a, b, c], device=device)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
