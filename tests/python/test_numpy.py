"""NumPy calls: the same values on the host and a simulated v5e, several
outputs, inout parameters, scalars, tunables, symbols, reports and traces,
the default device, conversions, programs from files and text, signatures."""
import json
import threading

import numpy as np
import pytest

import tpk
from conftest import DEVICES

rng = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax(device):
    x = rand(37, 130)
    y = tpk.std.softmax(x, device=device)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)


def test_host_and_sim_agree_bit_for_bit():
    x = rand(64, 100)
    w, b = rand(100), rand(100)
    assert np.array_equal(tpk.std.softmax(x), tpk.std.softmax(x, device="sim:v5e"))
    host = tpk.std.layernorm(x, w, b, 1e-5)
    sim = tpk.std.layernorm(x, w, b, 1e-5, device="sim:v5e")
    for h, s in zip(host, sim):
        assert np.array_equal(h, s)


@pytest.mark.parametrize("device", DEVICES)
def test_several_outputs_are_a_tuple(device):
    x, w, b = rand(9, 33), rand(33), rand(33)
    y, mean, rstd = tpk.std.layernorm(x, w, b, 1e-5, device=device)
    mu = x.astype(np.float64).mean(axis=1)
    var = x.astype(np.float64).var(axis=1)
    np.testing.assert_allclose(mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(var + 1e-5), rtol=1e-5)
    np.testing.assert_allclose(y, (x - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * w + b, rtol=1e-4, atol=1e-5)
    logits, target = rand(6, 50), rng.integers(0, 50, 6).astype(np.int32)
    loss, lse = tpk.std.cross_entropy(logits, target, device=device)
    ref_lse = np.log(np.exp(logits.astype(np.float64)).sum(axis=1))
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5)
    np.testing.assert_allclose(loss, ref_lse - logits[np.arange(6), target], rtol=1e-5, atol=1e-6)


def adamw_ref(param, grad, m, v, lr, beta1, beta2, eps, wd, step):
    param = param * (1 - lr * wd)
    m = m + (1 - beta1) * (grad - m)
    v = v * beta2 + (1 - beta2) * grad * grad
    denom = np.sqrt(v) / np.sqrt(1 - beta2 ** step) + eps
    return param - lr / (1 - beta1 ** step) * m / denom, m, v


@pytest.mark.parametrize("device", DEVICES)
def test_inout_parameters_are_updated_in_place(device):
    param, grad = rand(5000), rand(5000)
    m, v = np.zeros(5000, np.float32), np.zeros(5000, np.float32)
    want = [param.copy(), m.copy(), v.copy()]
    ids = [id(param), id(m), id(v)]
    for step in (1, 2):
        out = tpk.std.adamw(param, grad, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, device=device)
        assert out is None  # no outputs: the inout arrays are the result
        want = adamw_ref(*want[:1], grad, *want[1:], 1e-2, 0.9, 0.999, 1e-8, 0.01, step)
    assert [id(param), id(m), id(v)] == ids
    for got, ref in zip((param, m, v), want):
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-7)


def test_scalars_positional_or_keyword():
    x, w, b = rand(4, 16), rand(16), rand(16)
    by_position = tpk.std.layernorm(x, w, b, 0.5)
    by_name = tpk.std.layernorm(x, w, b, eps=0.5)
    all_by_name = tpk.std.layernorm(eps=0.5, b=b, w=w, x=x)
    for p, n, a in zip(by_position, by_name, all_by_name):
        assert np.array_equal(p, n) and np.array_equal(p, a)
    assert not np.array_equal(by_position[2], tpk.std.layernorm(x, w, b, 1e-5)[2])
    with pytest.raises(TypeError, match="multiple values for argument 'eps'"):
        tpk.std.layernorm(x, w, b, 0.5, eps=0.5)
    with pytest.raises(TypeError, match="missing argument 'eps'"):
        tpk.std.layernorm(x, w, b)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilon'.*x, w, b, eps -> y, mean, rstd"):
        tpk.std.layernorm(x, w, b, epsilon=0.5)


def test_outputs_given_by_position_or_name():
    x = rand(8, 8)
    y1, y2 = np.zeros_like(x), np.zeros_like(x)
    assert tpk.std.softmax(x, y1) is y1
    assert tpk.std.softmax(x, y=y2) is y2
    np.testing.assert_allclose(y1, softmax_ref(x), rtol=1e-5)
    assert np.array_equal(y1, y2)
    y, mean, rstd = np.empty((8, 8), np.float32), np.empty(8, np.float32), np.empty(8, np.float32)
    out = tpk.std.layernorm(x, rand(8), rand(8), 1e-5, y, mean, rstd)
    assert out[0] is y and out[1] is mean and out[2] is rstd
    _, mean2, _ = tpk.std.layernorm(x, rand(8), rand(8), 1e-5, mean=np.full(8, 7, np.float32))
    assert np.allclose(mean2, mean)  # the others allocated


@pytest.mark.parametrize("device", DEVICES)
def test_tune_and_report(device):
    x = rand(200, 64)
    y = tpk.std.softmax(x, tune={"BM": 64}, device=device)
    report = tpk.std.softmax.last_report
    assert report.tunes == {"BM": 64} and report.tunes_from == "given"
    assert report.kernel == "softmax" and report.device == device
    assert report.tier == "aot"  # the standard library needs no compiler
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)
    tpk.std.softmax(x, device=device)
    assert tpk.std.softmax.last_report.tunes_from != "given"
    assert "BM" in tpk.std.softmax.last_report.tunes


def test_tunables_that_size_outputs():
    prog = tpk.load_source("kernel rows(x: f32[N]) -> (y: f32[G, N])\n"
                           "  tune G in [4, 2]\n"
                           "{ for g in 0..G { y[g, :] = x * ((g + 1) as f32); } }\n", name="rows.tpk")
    x = rand(5)
    assert prog.rows(x).shape == (4, 5)  # the declared default
    y = prog.rows(x, tune={"G": 2})
    np.testing.assert_allclose(y, np.stack([x, 2 * x]), rtol=1e-6)
    assert tpk.param_shapes(prog.rows, {"x": (5,)}, tune={"G": 2}) == {"x": (5,), "y": (2, 5)}


def test_symbols_only_outputs_have():
    x = rand(6, 20)
    values, indices = tpk.std.topk(x, syms={"K": 3})
    order = np.argsort(-x, axis=1, kind="stable")[:, :3]
    assert np.array_equal(indices, order)
    assert np.array_equal(values, np.take_along_axis(x, order, axis=1))
    with pytest.raises(tpk.TpkArgumentError, match="syms="):
        tpk.std.topk(x)
    with pytest.raises(tpk.TpkArgumentError, match="has no shape symbol 'Q'; it has M, N, K"):
        tpk.std.topk(x, syms={"Q": 3})


def test_simulated_report_and_trace(tmp_path):
    a, b = rand(256, 512), rand(512, 128)
    c = tpk.std.matmul(a, b, device="sim:v5e")
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    r = tpk.std.matmul.last_report
    assert r.simulated and r.chip == "v5e"
    assert set(r.tunes) == {"BM", "BN", "BK"} and all(isinstance(v, int) for v in r.tunes.values())
    assert r.seconds > 0 and r.cycles > 0 and r.clock_hz > 0
    assert abs(r.cycles / r.clock_hz - r.seconds) <= 1e-9 * max(1.0, r.seconds)
    assert r.matmul_flops >= 2 * 256 * 512 * 128 and r.flops >= r.matmul_flops  # the chip computes whole blocks
    assert r.hbm_bytes >= 4 * (256 * 512 + 512 * 128 + 256 * 128)
    assert 0 < r.roofline_seconds <= r.seconds
    assert isinstance(r.memory_bound, bool)
    for u in (r.mxu_utilisation, r.vpu_utilisation, r.hbm_utilisation):
        assert 0 <= u <= 1
    assert r.peak_flops > 0 and r.hbm_bytes_per_s > 0
    path = tmp_path / "matmul.json"
    r.write_trace(str(path), name="matmul in a test")
    trace = json.loads(path.read_text())
    assert trace["traceEvents"]
    assert "matmul in a test" in path.read_text()
    assert "v5e" in repr(r)


def test_host_report_has_no_simulation(tmp_path):
    tpk.std.softmax(rand(4, 4))
    r = tpk.std.softmax.last_report
    assert not r.simulated and r.chip is None and r.seconds is None and r.memory_bound is None
    with pytest.raises(tpk.TpkError, match="not simulated"):
        r.write_trace(str(tmp_path / "t.json"))


def test_default_device_for_a_block():
    x = rand(4, 4)
    assert tpk.current_device() == "host"
    with tpk.device("sim:v5e"):
        assert tpk.current_device() == "sim:v5e"
        tpk.std.softmax(x)
        assert tpk.std.softmax.last_report.device == "sim:v5e"
        tpk.std.softmax(x, device="host")  # a call's own device wins
        assert tpk.std.softmax.last_report.device == "host"
        r = tpk.std.softmax.launch([x, np.empty_like(x)])
        assert r.device == "sim:v5e" and r.simulated
        with tpk.device("host"):
            tpk.std.softmax(x)
            assert tpk.std.softmax.last_report.device == "host"
        seen = []
        t = threading.Thread(target=lambda: seen.append(tpk.current_device()))
        t.start()
        t.join()
        assert seen == ["host"]  # a ContextVar: another thread starts with the default
    assert tpk.current_device() == "host"
    with pytest.raises(tpk.TpkError, match="unknown device 'tpu'"):
        with tpk.device("tpu"):
            pass


def test_convert_is_explicit():
    x64 = rng.standard_normal((8, 8))
    with pytest.raises(TypeError, match="convert=True"):
        tpk.std.softmax(x64)
    np.testing.assert_allclose(tpk.std.softmax(x64, convert=True), softmax_ref(x64), rtol=1e-5)
    np.testing.assert_allclose(tpk.std.softmax(x64.T, convert=True), softmax_ref(x64.T), rtol=1e-5)
    np.testing.assert_allclose(tpk.std.softmax([[1.0, 2.0], [3.0, 5.0]], convert=True),
                               softmax_ref(np.array([[1.0, 2.0], [3.0, 5.0]])), rtol=1e-6)
    # an inout that had to be converted is converted back into the caller's array
    param, grad = rng.standard_normal(100), rng.standard_normal(100)
    m, v = np.zeros(100), np.zeros(100)
    want = adamw_ref(param, grad, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1)
    tpk.std.adamw(param, grad, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1, convert=True)
    assert param.dtype == np.float64
    for got, ref in zip((param, m, v), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


def bf16_round(a):
    """float32 rounded to bf16 (nearest even) and back, in NumPy."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def test_bf16_from_float32_with_convert():
    a, b = rand(16, 32), rand(32, 8)
    with pytest.raises(TypeError, match=r"bf16\[M, K\]; the array holds float32 \(convert=True"):
        tpk.std.matmul_bf16(a, b)
    c = tpk.std.matmul_bf16(a, b, convert=True)
    assert c.dtype == np.float32
    np.testing.assert_allclose(c, bf16_round(a).astype(np.float64) @ bf16_round(b), rtol=1e-5, atol=1e-5)
    prog = tpk.load_source("kernel half(x: f32[N]) -> (y: bf16[N]) { y = x as bf16; }", name="half.tpk")
    with pytest.raises(TypeError, match="NumPy has no bf16"):
        prog.half(a[0])
    assert np.array_equal(prog.half(a[0], convert=True), bf16_round(a[0]))


def test_f16_is_numpy_float16_without_copies():
    prog = tpk.load_source("kernel twice(x: f16[N]) -> (y: f16[N]) { y = (x as f32 * 2.0) as f16; }", name="f16.tpk")
    x = rand(40).astype(np.float16)
    y = np.empty_like(x)
    assert prog.twice(x, y) is y
    assert np.array_equal(y, (x.astype(np.float32) * 2).astype(np.float16))


def test_load_a_file(tmp_path):
    path = tmp_path / "two.tpk"
    path.write_text("kernel add(a: f32[N], b: f32[N]) -> (c: f32[N]) { c = a + b; }\n"
                    "kernel scale(x: f32[N], s: f32) -> (y: f32[N]) { y = x * s; }\n")
    prog = tpk.load(path)
    assert prog.name == str(path) and prog.kernel_names == ("add", "scale") and len(prog) == 2
    assert "add" in prog and [k.name for k in prog] == ["add", "scale"]
    assert prog.add is prog["add"]  # one Kernel per name: last_report stays
    a, b = rand(7), rand(7)
    np.testing.assert_allclose(prog.add(a, b), a + b)
    np.testing.assert_allclose(prog.scale(a, 3), a * 3, rtol=1e-6)
    np.testing.assert_allclose(prog.scale(a, s=np.float32(0.5)), a * 0.5)
    with pytest.raises(AttributeError, match="has no kernel 'mul'; it has: add, scale"):
        prog.mul
    with pytest.raises(tpk.TpkError, match="cannot"):
        tpk.load(tmp_path / "missing.tpk")


def test_signature():
    prog = tpk.load_source("kernel heads(x: f32[B, H, 2 * 64], inout acc: f32[B, H], scale: f32)\n"
                           "    -> (y: bf16[B * H, 128], n: i32[H / 2 + 1])\n"
                           "  tune BM in [16, 8], BN in [4]\n"
                           "{\n"
                           "  for b in 0..B { for h in 0..H {\n"
                           "    y[b * H + h, :] = (x[b, h, :] * scale) as bf16;\n"
                           "    acc[b, h] = acc[b, h] + 1.0; } }\n"
                           "  for j in 0..H / 2 + 1 { n[j] = j; }\n"
                           "}\n", name="heads.tpk")
    k = prog.heads
    assert k.name == "heads"
    assert [tuple(p) for p in k.params] == [
        ("x", "in", "f32", ("B", "H", "128")),
        ("acc", "inout", "f32", ("B", "H")),
        ("scale", "scalar", "f32", ()),
        ("y", "out", "bf16", ("B*H", "128")),
        ("n", "out", "i32", ("H/2+1",)),
    ]
    assert k.params[0].dims == ("B", "H", "128") and k.params[3].kind == "out"
    assert k.inputs == ("x", "acc", "scale") and k.outputs == ("y", "n") and k.symbols == ("B", "H")
    assert [tuple(t) for t in k.tunables] == [("BM", 16, (16, 8)), ("BN", 4, (4,))]
    assert repr(k) == ("<tpk.Kernel heads(x: f32[B, H, 128], inout acc: f32[B, H], scale: f32) -> "
                       "(y: bf16[B*H, 128], n: i32[H/2+1])>")
    assert tpk.param_shapes(k, {"x": (2, 5, 128)}) == {"x": (2, 5, 128), "acc": (2, 5), "y": (10, 128), "n": (3,)}
    assert [tpk.dim_value(t, {"N": 9}) for t in ("N", "N-1", "N/2", "cdiv(N,4)", "2*N+1", "(N+1)*2", "7")] == \
        [9, 8, 4, 3, 19, 20, 7]
    with pytest.raises(tpk.TpkArgumentError, match="needs H"):
        tpk.dim_value("B*H", {"B": 2})
    x, acc = rand(2, 5, 128), np.zeros((2, 5), np.float32)
    y, n = k(x, acc, 2.0, convert=True)
    assert y.dtype == np.float32 and y.shape == (10, 128) and n.tolist() == [0, 1, 2]
    assert np.array_equal(y, bf16_round(x.reshape(10, 128) * 2)) and np.array_equal(acc, np.ones((2, 5)))
    assert tpk.std.softmax.program is None and k.program is not None
