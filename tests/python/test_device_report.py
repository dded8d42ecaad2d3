"""tpk.torch.profile() / report(): what the simulated chip did in a block —
per op (debug, strict) or fused window, simulated time, FLOPs, bytes,
utilisation, compiles and cache hits — and its Perfetto trace."""
import json

import pytest
import torch
import torch.nn.functional as F

import tpk.torch


@pytest.fixture(params=["debug", "strict", "fused"])
def mode(request):
    tpk.torch.set_eager_mode(request.param)
    yield request.param
    tpk.torch.set_eager_mode("strict")


def step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_a_training_step_reported_and_traced(mode, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 10)).to("tpk")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 32).to("tpk"), torch.randint(0, 10, (16,)).to("tpk")
    for _ in range(2):  # compiles (the first step makes the optimizer's state)
        step(model, opt, x, y)
    with tpk.torch.profile() as prof:
        step(model, opt, x, y)
    r = prof.report
    assert r is tpk.torch.report()
    assert r.device == "sim:v5e" and r.mode == mode
    assert r.compiles == 0 and r.cache_hits == len(r.launches) > 0  # the second step only looks up
    assert r.cpu_ops == 0
    assert r.sim_seconds > 0 and abs(sum(row.seconds for row in r.rows) - r.sim_seconds) < 1e-12
    assert r.flops > 0 and 0 < r.mxu_utilisation <= 1
    assert sum(row.ops for row in r.rows) == r.ops
    if mode == "fused":
        assert r.windows == len(r.launches) == 1 and "addmm" in r.rows[0].label
    else:
        assert len(r.launches) == r.ops and {"addmm", "gelu", "mm"} <= {row.label for row in r.rows}
    text = str(r)
    assert "simulated time" in text and r.rows[0].label in text
    trace = json.loads(open(r.write_trace(tmp_path / "step.json")).read())["traceEvents"]
    slices = [e for e in trace if e["ph"] == "X"]
    assert [e["name"] for e in slices] == [l.label for l in r.launches]
    ends = [e["ts"] + e["dur"] for e in slices]
    assert all(e["ts"] == pytest.approx(end) for e, end in zip(slices[1:], ends))  # end to end on the chip
    assert ends[-1] == pytest.approx(r.sim_seconds * 1e6)


def test_the_report_on_the_host_has_no_simulated_time():
    tpk.torch.set_device("host")
    try:
        with tpk.torch.profile() as prof:
            (torch.ones(4, device="tpk") * 2).cpu()
        assert prof.report.sim_seconds is None and "no simulated time" in str(prof.report)
        with pytest.raises(ValueError, match="no simulated time"):
            prof.report.trace()
    finally:
        tpk.torch.set_device("sim:v5e")
