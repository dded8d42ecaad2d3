"""`.tpk` custom ops (tpk.torch.load) on tpk tensors: they run on the
device's eager stream (tpk_stream_call), in every mode, fused with their
neighbours in a fused window, with their backward kernels under autograd;
`inout` parameters are written in place. Each against the same op on the CPU.
"""
import pytest
import torch

import tpk.torch
from user_kernels import AXPY, SCALED_SOFTMAX

MODES = ["debug", "strict", "fused"]


ops = tpk.torch.load_source(SCALED_SOFTMAX + AXPY, namespace="tpkdevice")


@pytest.fixture(params=MODES)
def mode(request):
    tpk.torch.set_eager_mode(request.param)
    yield request.param
    tpk.torch.set_eager_mode("strict")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_a_kernel_runs_on_the_stream(mode):
    x = rand(16, 24)
    want = torch.softmax(x * 2 * 0.5, -1) + 1
    before = tpk.torch.stats()
    t = x.to("tpk")
    got = ops.scaled_softmax(t * 2, 0.5) + 1
    assert got.device.type == "tpk"
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    after = tpk.torch.stats()
    assert after["cpu_ops"] == before["cpu_ops"]  # nothing ran on the CPU
    assert after["ops"] - before["ops"] >= 3       # the mul, the kernel, the add: on the stream
    if mode == "fused":                            # one window: the kernel fused with its neighbours
        assert after["windows"] - before["windows"] == 1


def test_the_backward_kernel_runs_under_autograd(mode):
    x, dy = rand(8, 32, seed=1), rand(8, 32, seed=2)
    xc = x.clone().requires_grad_()
    ops.scaled_softmax(xc, 1.5).backward(dy)
    xt = x.to("tpk").requires_grad_()
    y = ops.scaled_softmax(xt, 1.5)
    assert y.requires_grad
    y.backward(dy.to("tpk"))
    assert xt.grad.device.type == "tpk"
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)


def test_inout_parameters_are_written_in_place(mode):
    y, x = rand(100, seed=3), rand(100, seed=4)
    want = y + x * 0.25
    yt, xt = y.to("tpk"), x.to("tpk")
    with torch.no_grad():
        assert ops.axpy(yt, xt, 0.25) is None
    torch.testing.assert_close(yt.cpu(), want)
    # a strided view of a tpk tensor is written through
    base = torch.zeros(2, 100).to("tpk")
    with torch.no_grad():
        ops.axpy(base[1], xt, 2.0)
    torch.testing.assert_close(base.cpu(), torch.stack([torch.zeros(100), x * 2]))


def test_a_kernel_checks_its_arguments_on_the_device():
    with pytest.raises(TypeError, match="'x' must be torch.float32"):
        ops.scaled_softmax(torch.ones(4, 4, dtype=torch.int32, device="tpk"), 1.0)
    with pytest.raises(RuntimeError, match="one device"):
        ops.axpy(torch.ones(4, device="tpk"), torch.ones(4), 1.0)
