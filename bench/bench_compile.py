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
  (TPK_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR); warm: another new process on the
  folder the cold one filled. Beside it, tpk's own part of the cold compile
  (translating and compiling its graphs: CompiledGraph.compile_seconds).
- steady-state step time: the median of 30 steps after 5 (tpk: after the
  background cc builds landed), tpk against eager and against Inductor, one
  thread (torch.set_num_threads(1) and TPK_HOST_THREADS=1) and all threads.
- the step on a simulated v5e: its simulated time and the MXU's utilisation
  (forward and backward, weighted by time), for the record.

Each measurement that needs its own process (a cache state, a thread count:
tpk reads TPK_HOST_THREADS when its context is created) runs this file
again as a worker (--worker JSON). ratio = the other's time / tpk's: > 1
means tpk was faster.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

STEPS, WARMUP = 30, 5


def models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.norm, self.fc2 = nn.Linear(512, 1024), nn.LayerNorm(1024), nn.Linear(1024, 10)

        def forward(self, x, target):
            return F.cross_entropy(self.fc2(self.norm(F.gelu(self.fc1(x)))), target)

    class RmsNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Block(nn.Module):
        def __init__(self, d=256, heads=4, hidden=512):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = RmsNorm(d), RmsNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(a)
            h = self.n2(x)
            return (x + self.down(F.silu(self.gate(h)) * self.up(h))).sum()

    return {
        "MLP": (Mlp, lambda: (torch.randn(256, 512), torch.randint(0, 10, (256,)))),
        "transformer block": (Block, lambda: (torch.randn(4, 128, 256),)),
    }


def step(fn, args):
    fn(*args).backward()


def steady_ms(fn, args, settle=None):
    for _ in range(WARMUP):
        step(fn, args)
    if settle:
        settle()
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        step(fn, args)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def worker(job):
    """One process's measurements; returns a dict."""
    import torch
    torch.set_num_threads(job["threads"])
    make_model, make_args = models()[job["model"]]
    torch.manual_seed(0)
    model, args = make_model(), make_args()
    out = {}
    if job["backend"] == "tpk":
        import tpk
        import tpk.torch
        fn = torch.compile(model, backend="tpk")
        t = time.perf_counter()
        step(fn, args)
        out["first_step_s"] = time.perf_counter() - t
        graphs = tpk.torch.compile_report().graphs
        out["tpk_compile_s"] = sum(g.compile_seconds for g in graphs)
        out["compiler_runs"] = tpk.cache_stats()["compiler_runs"]
        if job.get("steady"):
            out["step_ms"] = steady_ms(fn, args, settle=tpk._C.wait_compiles)
            out["eager_ms"] = steady_ms(model, args)
        if job.get("sim"):
            with tpk.device("sim:v5e"):
                step(fn, args)
            reports = [g.last_report for g in graphs]
            seconds = sum(r.seconds for r in reports)
            out["sim_us"] = seconds * 1e6
            out["sim_mxu"] = sum(r.mxu_utilisation * r.seconds for r in reports) / seconds
    else:
        fn = torch.compile(model, backend="inductor")
        t = time.perf_counter()
        step(fn, args)
        out["first_step_s"] = time.perf_counter() - t
        if job.get("steady"):
            for threads in job["steady"]:
                torch.set_num_threads(threads)
                out[f"step_ms_{threads}"] = steady_ms(fn, args)
    return out


def run_worker(job, env):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)], env=env,
                       stdout=subprocess.PIPE, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"bench_compile: worker {job} failed (exit status {p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def row(name, value, unit, baseline=None, base_value=None, device="host"):
    ratio = None if base_value is None else base_value / value
    print(json.dumps({"name": name, "device": device, "value": round(value, 4), "unit": unit,
                      "baseline": baseline, "ratio": None if ratio is None else round(ratio, 3)}), flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
        return 0
    cores = os.cpu_count() or 1
    all_threads = f"all threads ({cores})"
    for model in models():
        with tempfile.TemporaryDirectory(prefix="tpk-bench-compile-") as tmp:
            tpk_env = dict(os.environ, TPK_CACHE_DIR=os.path.join(tmp, "tpk"), TPK_TIER="auto")
            ind_env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
            ind_cold = run_worker({"model": model, "backend": "inductor", "threads": cores}, ind_env)
            ind_warm = run_worker({"model": model, "backend": "inductor", "threads": cores, "steady": [1, cores]},
                                  ind_env)
            tpk_cold = run_worker({"model": model, "backend": "tpk", "threads": 1, "steady": True, "sim": True},
                                  dict(tpk_env, TPK_HOST_THREADS="1"))
            tpk_warm = run_worker({"model": model, "backend": "tpk", "threads": cores, "steady": True},
                                  dict(tpk_env, TPK_HOST_THREADS=str(cores)))
        what = f"{model} training step"
        row(f"compile: {what}, cold cache", tpk_cold["first_step_s"], "s", "inductor (CPU), cold cache",
            ind_cold["first_step_s"])
        row(f"compile: {what}, warm cache", tpk_warm["first_step_s"], "s", "inductor (CPU), warm cache",
            ind_warm["first_step_s"])
        row(f"compile: {what}, cold cache, tpk's graphs alone", tpk_cold["tpk_compile_s"], "s")
        row(f"compile: {what}, warm cache: compiler runs", tpk_warm["compiler_runs"], "runs")
        for label, run, threads in (("one thread", tpk_cold, 1), (all_threads, tpk_warm, cores)):
            row(f"steady state: {what}, {label}", run["step_ms"], "ms", "torch eager", run["eager_ms"])
            row(f"steady state: {what}, {label} (vs Inductor)", run["step_ms"], "ms", "inductor (CPU)",
                ind_warm[f"step_ms_{threads}"])
        row(f"simulated: {what}", tpk_cold["sim_us"], "us", device="sim:v5e")
        row(f"simulated: {what}, MXU utilisation", 100 * tpk_cold["sim_mxu"], "%", device="sim:v5e")
    return 0


if __name__ == "__main__":
    sys.exit(main())
