#!/usr/bin/env python3
"""tpk kernels as PyTorch ops (`torch.ops.tpk.*`, tpk.torch) against
PyTorch's own CPU kernels, in one run; prints bench/run.py's JSON rows.

- Call overhead: a registered op on an 8x8 f32 softmax against
  `torch.softmax` and against `torch.softmax(..., out=)`, one thread
  (mean µs per call over many calls, best of several repeats).
- Kernels at the standard suite's shapes (bench/README.md): softmax,
  layernorm, rmsnorm, gelu and flash attention through `torch.ops.tpk.*`
  (which allocate their outputs, as ops do: a fresh 64 MiB tensor is
  first touched inside the kernel) and, kernel for kernel, the same tpk
  kernels launched into preallocated outputs (`kernel.launch`), against
  PyTorch writing into preallocated outputs where an out= form exists
  (`softmax.out`, `native_layer_norm.out`, `gelu.out`); rms_norm and
  scaled_dot_product_attention have none, so they allocate. Median ms of
  several calls, one thread and all threads: each in its own process,
  since tpk reads TPK_HOST_THREADS when its context is created.

ratio = PyTorch's time / tpk's time: > 1 means tpk was faster.
"""
import os
import statistics
import subprocess
import sys
import time
import timeit

import rows  # bench/rows.py: beside this file

KERNEL_REPEATS = 7




def per_call_us(fn, number=20000, repeat=7):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def median_ms(fn, repeat=KERNEL_REPEATS):
    fn()  # compile, tune lookup, first touch
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def overhead(torch):
    x = torch.randn(8, 8)
    y = torch.empty(8, 8)
    op = torch.ops.tpk.softmax
    tpk_us = per_call_us(lambda: op(x))
    ref_us = per_call_us(lambda: torch.softmax(x, -1))
    out_us = per_call_us(lambda: torch.softmax(x, -1, out=y))
    name = "op call overhead: torch.ops.tpk.softmax 8x8 f32, one thread"
    rows.row(name, tpk_us, "us", "torch.softmax", ref_us)
    rows.row(name + " (vs out=)", tpk_us, "us", "torch.softmax(out=)", out_us)


def kernels(torch, tpk_module, threads_label):
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    M = N = 4096
    x = torch.randn(M, N, generator=g)
    w, b = torch.randn(N, generator=g), torch.randn(N, generator=g)
    y, mean, rstd = torch.empty(M, N), torch.empty(M, 1), torch.empty(M, 1)
    tpk = torch.ops.tpk
    std = tpk_module.std
    ty, tmean, trstd = torch.empty(M, N), torch.empty(M), torch.empty(M)
    cases = [
        ("softmax M=N=4096", lambda: tpk.softmax(x), lambda: std.softmax.launch([x, ty]),
         "torch.softmax(out=)", lambda: torch.softmax(x, -1, out=y)),
        ("layernorm M=N=4096", lambda: tpk.layernorm(x, w, b, 1e-5),
         lambda: std.layernorm.launch([x, w, b, 1e-5, ty, tmean, trstd]), "aten.native_layer_norm.out",
         lambda: torch.ops.aten.native_layer_norm.out(x, [N], w, b, 1e-5, out0=y, out1=mean, out2=rstd)),
        ("rmsnorm M=N=4096", lambda: tpk.rmsnorm(x, w, 1e-6), lambda: std.rmsnorm.launch([x, w, 1e-6, ty, trstd]),
         "F.rms_norm (no out= form)", lambda: F.rms_norm(x, [N], w, 1e-6)),
        ("gelu M=N=4096", lambda: tpk.gelu(x), lambda: std.gelu.launch([x, ty]),
         "aten.gelu.out", lambda: torch.ops.aten.gelu.out(x, out=y)),
    ]
    B, H, S, D = 1, 8, 1024, 64
    q, k, v = (torch.randn(B, H, S, D, generator=g).bfloat16() for _ in range(3))
    o, lse = torch.empty(B, H, S, D, dtype=torch.bfloat16), torch.empty(B, H, S)
    cases.append(("flash_attention B=1,H=8,S=T=1024,D=64 bf16", lambda: tpk.flash_attention(q, k, v, 0.125),
                  lambda: std.flash_attention.launch([q, k, v, 0.125, o, lse]),
                  "F.scaled_dot_product_attention (no out= form)",
                  lambda: F.scaled_dot_product_attention(q, k, v, scale=0.125)))
    for what, run_op, run_kernel, baseline, run_ref in cases:
        t_ref = median_ms(run_ref)
        rows.row(f"torch.ops.tpk: {what}, {threads_label}", median_ms(run_op), "ms", baseline, t_ref)
        rows.row(f"tpk kernel into preallocated outputs: {what}, {threads_label}", median_ms(run_kernel), "ms",
            baseline, t_ref)


def child(threads):
    import torch
    import tpk
    import tpk.torch
    tpk.torch.std  # defines torch.ops.tpk
    torch.set_num_threads(threads)
    label = "one thread" if threads == 1 else f"all threads ({threads})"
    if threads == 1:
        overhead(torch)
    kernels(torch, tpk, label)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--threads":
        child(int(sys.argv[2]))
        return 0
    cores = os.cpu_count() or 1
    status = 0
    for threads in sorted({1, cores}):
        env = dict(os.environ, TPK_HOST_THREADS=str(threads))
        env.setdefault("TPK_TIER", "auto")
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", str(threads)], env=env)
        status = status or p.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
