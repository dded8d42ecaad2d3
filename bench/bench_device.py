#!/usr/bin/env python3
"""The `tpk` PyTorch device (issue 14) against CPU tensors, in one run; prints
bench/run.py's JSON rows.

- per-op dispatch cost: `x + y` on two 16-element f32 tensors in strict mode,
  against the same op on CPU tensors, one thread (torch.set_num_threads(1),
  TPK_HOST_THREADS=1), sim:v5e as tpk:0 is by default. Blocks of 20,000 ops
  each side in turn, the tpk block ending with torch.tpk.synchronize() (its
  ops have run); the median over blocks of the time per op. ratio = the CPU's
  time / tpk's (within 3x is >= 1/3).
- the character GPT's training step (tests/python/char_gpt.py, the model the
  device tests train: embedding, layernorm, causal SDPA, MLP, cross-entropy,
  gradient clipping, AdamW) on sim:v5e, fused mode against strict: the
  step's simulated v5e time (tpk.torch.stats()'s sim_seconds) and its host
  wall time, the two modes taking rounds of steps in turn. ratio = strict /
  fused.
- the same step on the host-backed device (TPK_DEVICE=host) in fused mode
  against CPU eager PyTorch, one thread and all threads, steps taken in turn.
  ratio = the CPU's time / tpk's.

A step ends with loss.item() (a sync point). Each thread count runs in a
process of its own (TPK_HOST_THREADS is read when tpk's context is made):
this file again, as a worker (--worker JSON).
"""
import os
import statistics
import sys
import time

import rows  # bench/rows.py: beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(HERE), "python"),  # this tree's package, as run.py gives it
                os.path.join(os.path.dirname(HERE), "tests", "python")]  # char_gpt

OPS_PER_BLOCK, OP_BLOCKS = 20000, 7
ROUNDS, STEPS_PER_ROUND = 10, 3
# The GPT's sizes here: a small character model (the tests train a smaller one).
GPT = {"dim": 128, "heads": 4, "vocab": 65}
TEXT = {"vocab": 65, "batch": 8, "length": 65}


def per_op_us():
    import torch
    import tpk.torch
    tpk.torch.set_eager_mode("strict")
    c = torch.randn(16), torch.randn(16)
    t = c[0].to("tpk"), c[1].to("tpk")

    def block(x, y, sync):
        start = time.perf_counter()
        for _ in range(OPS_PER_BLOCK):
            x + y
        sync()
        return (time.perf_counter() - start) / OPS_PER_BLOCK * 1e6

    def nothing():
        pass

    block(*t, torch.tpk.synchronize)
    block(*c, nothing)
    tpk_us, cpu_us = [], []
    for _ in range(OP_BLOCKS):
        tpk_us.append(block(*t, torch.tpk.synchronize))
        cpu_us.append(block(*c, nothing))
    return {"tpk_us": statistics.median(tpk_us), "cpu_us": statistics.median(cpu_us)}


def gpt_steps(runs):
    """Median step time (ms) of each of runs ({name: (device, setup)}) and on
    tpk its median simulated seconds. Rounds of STEPS_PER_ROUND steps each,
    the runs taking their rounds in turn (so that the machine's load falls on
    all of them); a round starts with setup() (an eager mode: a new stream)
    and one step untimed. After the warm-up round, the background cc -O3
    builds of the kernels it ran are waited for (tpk._C.wait_compiles):
    steps while they build run tcc's code and share the machine with cc."""
    import torch
    import char_gpt
    import tpk.torch
    text = char_gpt.synthetic_text(**TEXT)
    models = {name: char_gpt.make(device, **GPT) for name, (device, _) in runs.items()}
    wall = {name: [] for name in runs}
    sim = {name: [] for name in runs}
    for r in range(ROUNDS + 1):  # the first round: warm-up (compiles)
        for name, (device, setup) in runs.items():
            setup()
            char_gpt.step(*models[name], text, device).item()
            for _ in range(STEPS_PER_ROUND):
                before = tpk.torch.stats()["sim_seconds"]
                start = time.perf_counter()
                char_gpt.step(*models[name], text, device).item()
                took = time.perf_counter() - start
                if r:
                    wall[name].append(took * 1e3)
                    sim[name].append(tpk.torch.stats()["sim_seconds"] - before)
        if r == 0:  # the steady state: the kernels' cc code, not tcc's while cc builds it beside the timed steps
            tpk._C.wait_compiles()
    return {name: {"ms": statistics.median(wall[name]), "sim_s": statistics.median(sim[name])} for name in runs}


def worker(job):
    import torch
    torch.set_num_threads(job["threads"])
    import tpk.torch
    if job["kind"] == "per op":
        return per_op_us()
    if job["kind"] == "modes":  # sim:v5e, fused against strict
        return gpt_steps({mode: ("tpk", lambda m=mode: tpk.torch.set_eager_mode(m)) for mode in ("strict", "fused")})
    tpk.torch.set_eager_mode("fused")  # the host device against CPU eager
    return gpt_steps({"tpk": ("tpk", lambda: None), "cpu": ("cpu", lambda: None)})


def run_worker(job, **env):
    return rows.run_worker(__file__, job, dict(os.environ, **env), timeout=1200)


def row(name, value, unit, baseline=None, base_value=None, device="sim:v5e"):
    rows.row(name, value, unit, baseline, base_value, device)


def main():
    if rows.as_worker(worker):
        return 0
    cores = os.cpu_count() or 1
    op = run_worker({"kind": "per op", "threads": 1}, TPK_HOST_THREADS="1")
    row("device: x + y, 16 elements, strict mode, one thread: per-op cost", op["tpk_us"], "us", "the same op on CPU tensors",
        op["cpu_us"])
    modes = run_worker({"kind": "modes", "threads": cores})
    what = "device: char-GPT training step"
    row(f"{what}: fused vs strict, simulated v5e time", modes["fused"]["sim_s"] * 1e3, "ms", "strict",
        modes["strict"]["sim_s"] * 1e3)
    row(f"{what}: fused vs strict, host wall time", modes["fused"]["ms"], "ms", "strict", modes["strict"]["ms"])
    for label, threads in (("one thread", 1), (f"all threads ({cores})", cores)):
        host = run_worker({"kind": "host", "threads": threads}, TPK_DEVICE="host", TPK_HOST_THREADS=str(threads))
        row(f"{what} on the host device (fused) vs CPU eager, {label}", host["tpk"]["ms"], "ms", "torch CPU eager",
            host["cpu"]["ms"], device="host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
