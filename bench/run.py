#!/usr/bin/env python3
"""Run tpk's benchmarks and write bench/results.json and bench/RESULTS.md.

Every executable build/bench/bench_* is run; each prints one JSON object per
line on stdout (other lines and stderr are passed through):

    {"name": "...", "device": "host", "value": 12.3, "unit": "ms",
     "baseline": null, "ratio": null}

  name      what was measured; the key TARGETS below is looked up by
  device    where it ran ("host", "sim:v5e", ...)
  value     the measurement, in `unit`
  baseline  what was measured beside tpk in the same run (e.g. "numpy",
            "torch eager"), or null
  ratio     baseline / tpk for times, tpk / baseline for rates such as
            GFLOP/s (either way > 1 means tpk did better), null without a
            baseline

To add a benchmark: build another bench/bench_*.c (the Makefile's `bench`
target builds them) that prints such rows, and add its target to TARGETS.

    python3 bench/run.py --build build [--only NAME-SUBSTRING]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (target as shown, predicate on the row's value[, the row field the
# predicate reads instead of "value"]). Rows without a target are reported
# without a verdict.
TARGETS = {
    "frontend: parse+check a 10,000-line file": ("< 50 ms", lambda v: v < 50.0),
    "f32 matmul 1024^3, one thread (gemm primitive)": (">= 0.8x OpenBLAS", lambda r: r is not None and r >= 0.8,
                                                       "ratio"),
    "f32 matmul 1024^3 kernel, one thread, tcc tier": (">= 0.8x OpenBLAS", lambda r: r is not None and r >= 0.8,
                                                       "ratio"),
    "f32 matmul 1024^3 kernel, one thread, cc tier": (">= 0.8x OpenBLAS", lambda r: r is not None and r >= 0.8,
                                                      "ratio"),
    "compile a softmax kernel with libtcc": ("< 5 ms", lambda v: v < 5.0),
    # ratio = host time / simulator time; the simulator within 3x of the host
    "f32 matmul 1024^3 on sim:v5e, wall time": ("within 3x of the host", lambda r: r is not None and r >= 1 / 3,
                                                 "ratio"),
}

ROW_KEYS = ("name", "device", "value", "unit", "baseline", "ratio")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine():
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 0,
        "os": f"{platform.system()} {platform.release()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def find_benches(build):
    folder = os.path.join(build, "bench")
    if not os.path.isdir(folder):
        return []
    out = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith("bench_") and os.path.isfile(path) and os.access(path, os.X_OK):
            out.append(path)
    return out


def parse_rows(text, source):
    """JSON rows from a benchmark's stdout; other lines are echoed."""
    rows = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("{"):
            if s:
                print(f"  {os.path.basename(source)}: {s}")
            continue
        try:
            row = json.loads(s)
        except json.JSONDecodeError as e:
            raise SystemExit(f"run.py: {source} printed a malformed row ({e}): {s}")
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise SystemExit(f"run.py: {source}: row lacks {', '.join(missing)}: {s}")
        rows.append({k: row[k] for k in ROW_KEYS})
    return rows


def run_bench(path, timeout):
    print(f"run.py: {os.path.relpath(path)}", flush=True)
    try:
        p = subprocess.run([path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print(f"run.py: {path} took more than {timeout} s; no rows from it", file=sys.stderr)
        return None
    for line in p.stderr.splitlines():
        print(f"  {line}")
    if p.returncode != 0:
        print(f"run.py: {path} failed (exit status {p.returncode})", file=sys.stderr)
        return None
    return parse_rows(p.stdout, path)


def fmt_value(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def verdict(row):
    t = TARGETS.get(row["name"])
    if not t:
        return "", ""
    text, ok, field = (t + ("value",))[:3]
    return text, ("met" if ok(row[field]) else "**missed**")


def write_markdown(path, rows, mach, failed):
    lines = [
        "# tpk benchmark results",
        "",
        "Written by `make bench` (bench/run.py); do not edit by hand.",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['os']}. Date: {mach['date']}.",
        "",
        "| benchmark | device | tpk | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target, result = verdict(r)
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(f"| {r['name']} | {r['device']} | {fmt_value(r['value'])} {r['unit']} | "
                     f"{r['baseline'] or ''} | {ratio} | {target} | {result} |")
    lines += ["", "Ratio is baseline / tpk for times and tpk / baseline for rates, so above 1 means tpk did "
              "better.", ""]
    lines += ["## Targets", ""]
    lines += [f"- {name}: {t[0]}" for name, t in TARGETS.items()]
    if failed:
        lines += ["", "## Benchmarks that failed", ""] + [f"- `{f}`" for f in failed]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build folder holding bench/bench_* (default: build)")
    ap.add_argument("--out", default=HERE, help="where results.json and RESULTS.md go (default: bench/)")
    ap.add_argument("--only", default=None, help="run only benchmarks whose file name contains this")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per benchmark binary")
    args = ap.parse_args()

    benches = [b for b in find_benches(args.build) if not args.only or args.only in os.path.basename(b)]
    if not benches:
        raise SystemExit(f"run.py: no benchmark binaries in {args.build}/bench (run `make bench`)")
    rows, failed = [], []
    for b in benches:
        got = run_bench(b, args.timeout)
        if got is None:
            failed.append(os.path.basename(b))
        else:
            rows += got

    mach = machine()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    write_markdown(os.path.join(args.out, "RESULTS.md"), rows, mach, failed)

    width = max([len(r["name"]) for r in rows] + [9])
    for r in rows:
        target, result = verdict(r)
        print(f"  {r['name']:<{width}}  {fmt_value(r['value']):>8} {r['unit']:<4} {target} {result}".rstrip())
    print(f"run.py: {len(rows)} rows -> {os.path.relpath(os.path.join(args.out, 'results.json'))}, "
          f"{os.path.relpath(os.path.join(args.out, 'RESULTS.md'))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
