#!/usr/bin/env python3
"""torch.compile(backend="tpk") against PyTorch eager and Inductor (CPU), in
one run; prints bench/run.py's JSON rows.

Two models, one training step each (forward + backward, no optimizer):

  MLP                B=256: Linear(512, 1024), GELU, LayerNorm, Linear(1024, 10),
                     cross-entropy
  transformer block  B=4, S=128, D=256, 4 heads: RMSNorm, causal SDPA, SwiGLU
                     (hidden 512), residuals, sum

- compile time, cold and warm cache: the wall time of the first step
  (Dynamo's capture, AOTAutograd and the backend's compile, then the step),
  tpk against Inductor. Cold: a new process with an empty cache folder
  (TPK_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR), one per compiler; warm: a new
  process on the folders the cold ones filled (tpk's: with the cc builds of
  its hot clusters), tpk first, then Inductor. Beside it, tpk's own part of
  the cold compile (translating and compiling its graphs:
  CompiledGraph.compile_seconds) and the compiler runs of the warm one.
- steady-state step time: in the warm process, the median of 30 steps after
  5 (tpk: after the background cc builds landed), tpk, Inductor and eager
  taking their steps in turn, so that the machine's load falls on all three;
  one thread (torch.set_num_threads(1) and TPK_HOST_THREADS=1) and all
  threads.
- the step on a simulated v5e: its simulated time and the MXU's utilisation
  (forward and backward, weighted by time), for the record.

Each measurement that needs its own process (a cache state, a thread count:
tpk reads TPK_HOST_THREADS when its context is created) runs this file
again as a worker (--worker JSON). ratio = the other's time / tpk's: > 1
means tpk was faster.
"""
import copy
import os
import statistics
import sys
import tempfile
import time

import rows  # bench/rows.py: beside this file

STEPS, WARMUP = 30, 5


def models():
    """The issue's MLP and transformer block (tools/aten_ops.py) at this
    benchmark's sizes, and their inputs."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from aten_ops import Block, Mlp

    return {
        "MLP": (lambda: Mlp(d_in=512, hidden=1024), lambda: (torch.randn(256, 512), torch.randint(0, 10, (256,)))),
        "transformer block": (lambda: Block(d=256, heads=4, hidden=512), lambda: (torch.randn(4, 128, 256),)),
    }


def step(fn, args):
    fn(*args).backward()


def first_step(fn, args):
    t = time.perf_counter()
    step(fn, args)
    return time.perf_counter() - t


def interleaved_ms(fns, args):
    """The median step time of each of fns ({name: fn}), their steps taken
    in turn so that a change of the machine's load falls on all of them."""
    for fn in fns.values():
        for _ in range(WARMUP):
            step(fn, args)
    times = {name: [] for name in fns}
    for _ in range(STEPS):
        for name, fn in fns.items():
            t = time.perf_counter()
            step(fn, args)
            times[name].append((time.perf_counter() - t) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def worker(job):
    """One process's measurements; returns a dict."""
    import torch
    threads = job["threads"]
    torch.set_num_threads(threads)
    make_model, make_args = models()[job["model"]]
    torch.manual_seed(0)
    model, args = make_model(), make_args()
    out = {}
    if job["kind"] == "inductor cold":
        out["inductor_first_s"] = first_step(torch.compile(model, backend="inductor"), args)
        return out
    import tpk
    import tpk.torch
    fn = torch.compile(model, backend="tpk")
    out["tpk_first_s"] = first_step(fn, args)
    graphs = tpk.torch.compile_report().graphs
    out["tpk_compile_s"] = sum(g.compile_seconds for g in graphs)
    out["compiler_runs"] = tpk.cache_stats()["compiler_runs"]
    if job["kind"] == "tpk cold":  # then the step on v5e, and the hot clusters' cc builds into the cache folder
        with tpk.device("sim:v5e"):
            step(fn, args)
        reports = [g.last_report for g in graphs]
        seconds = sum(r.seconds for r in reports)
        out["sim_us"] = seconds * 1e6
        out["sim_mxu"] = sum(r.mxu_utilisation * r.seconds for r in reports) / seconds
        for _ in range(WARMUP):
            step(fn, args)
        tpk._C.wait_compiles()
        return out
    # warm: Inductor's first step on the folder its cold process filled, then the three in turn
    inductor = torch.compile(copy.deepcopy(model), backend="inductor")
    out["inductor_first_s"] = first_step(inductor, args)
    for _ in range(WARMUP):
        step(fn, args)
    tpk._C.wait_compiles()  # the hot clusters' cc builds landed
    out.update(interleaved_ms({"tpk": fn, "inductor": inductor, "eager": model}, args))
    return out


def run_worker(job, env):
    return rows.run_worker(__file__, job, env, timeout=900)


def main():
    if rows.as_worker(worker):
        return 0
    cores = os.cpu_count() or 1
    for model in models():
        with tempfile.TemporaryDirectory(prefix="tpk-bench-compile-") as tmp:
            env = dict(os.environ, TPK_CACHE_DIR=os.path.join(tmp, "tpk"), TPK_TIER="auto",
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
            cold = run_worker({"model": model, "kind": "inductor cold", "threads": cores}, env)
            cold.update(run_worker({"model": model, "kind": "tpk cold", "threads": 1}, dict(env, TPK_HOST_THREADS="1")))
            one = run_worker({"model": model, "kind": "warm", "threads": 1}, dict(env, TPK_HOST_THREADS="1"))
            every = run_worker({"model": model, "kind": "warm", "threads": cores}, dict(env, TPK_HOST_THREADS=str(cores)))
        what = f"{model} training step"
        rows.row(f"compile: {what}, cold cache", cold["tpk_first_s"], "s", "inductor (CPU), cold cache",
            cold["inductor_first_s"])
        rows.row(f"compile: {what}, warm cache", one["tpk_first_s"], "s", "inductor (CPU), warm cache",
            one["inductor_first_s"])
        rows.row(f"compile: {what}, cold cache, tpk's graphs alone", cold["tpk_compile_s"], "s")
        rows.row(f"compile: {what}, warm cache: compiler runs", one["compiler_runs"], "runs")
        for label, run in (("one thread", one), (f"all threads ({cores})", every)):
            rows.row(f"steady state: {what}, {label}", run["tpk"], "ms", "torch eager", run["eager"])
            rows.row(f"steady state: {what}, {label} (vs Inductor)", run["tpk"], "ms", "inductor (CPU)", run["inductor"])
        rows.row(f"simulated: {what}", cold["sim_us"], "us", device="sim:v5e")
        rows.row(f"simulated: {what}, MXU utilisation", 100 * cold["sim_mxu"], "%", device="sim:v5e")
    return 0


if __name__ == "__main__":
    sys.exit(main())
