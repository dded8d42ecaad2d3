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
target builds them), or write a bench/bench_*.py script (run with this
Python), that prints such rows, and add its target to TARGETS.

Then the standard-kernel suite: `tpk bench --suite std --json FILE` (see
bench/README.md). Its rows join the others, one per kernel and device
("std: softmax M=4096,N=4096"; host rows in ms with the reference's ratio,
simulator rows in us), with extra fields (kernel, shape, rate, rate_unit,
roofline_fraction, peak_fraction) and, for the rows the suite states goals
for, the goal (target) and whether it was met (met). RESULTS.md gets the
suite's own table as one more section.

    python3 bench/run.py --build build [--only NAME-SUBSTRING] [--no-suite] [--merge]

--merge keeps what earlier runs measured of the benchmarks not run now
(`--only bench_device --merge`: the device's rows replaced, the rest kept).
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

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
    # ratio = torch.softmax's time / the op's: within 4x is >= 0.25
    "op call overhead: torch.ops.tpk.softmax 8x8 f32, one thread": ("<= 4x torch.softmax",
                                                                     lambda r: r is not None and r >= 0.25, "ratio"),
    # ratio = host time / simulator time; the simulator within 3x of the host
    "f32 matmul 1024^3 on sim:v5e, wall time": ("within 3x of the host", lambda r: r is not None and r >= 1 / 3,
                                                 "ratio"),
}
# The eager modes (bench_eager): ratio = strict's time / fused's; the warm
# first step's ratio = steady / first (within 2x is >= 0.5).
for _stream in ("MLP training step", "transformer block fwd+bwd"):
    for _clock in ("host wall time", "simulated v5e time"):
        TARGETS[f"eager {_stream}: fused vs strict, {_clock}"] = (">= 1.5x strict (target 2x)",
                                                                   lambda r: r is not None and r >= 1.5, "ratio")
    TARGETS[f"eager {_stream}: first step with a warm disk cache vs steady state (fused)"] = (
        "within 2x of steady state", lambda r: r is not None and r >= 0.5, "ratio")
    TARGETS[f"eager {_stream}: compiles in the first step with a warm disk cache (fused)"] = ("0", lambda v: v == 0)
for _mode in ("strict", "fused"):
    TARGETS[f"eager transformer block fwd+bwd: compiles after the first step, sequence length changing every step "
            f"({_mode})"] = ("0", lambda v: v == 0)

# torch.compile(backend="tpk") (bench_compile.py): ratio = Inductor's time / tpk's
for _model in ("MLP", "transformer block"):
    TARGETS[f"compile: {_model} training step, cold cache"] = ("<= 0.05x Inductor's cold compile",
                                                               lambda r: r is not None and r >= 20, "ratio")
    for _threads in ("one thread", f"all threads ({os.cpu_count() or 1})"):
        TARGETS[f"steady state: {_model} training step, {_threads} (vs Inductor)"] = (
            ">= 1.0x Inductor", lambda r: r is not None and r >= 1.0, "ratio")

# The tpk device (bench_device.py): the per-op ratio = the CPU's time / tpk's
# (within 3x is >= 1/3); fused vs strict = strict / fused; the host device =
# CPU eager's time / tpk's.
TARGETS["device: x + y, 16 elements, strict mode, one thread: per-op cost"] = (
    "<= 3x CPU tensors", lambda r: r is not None and r >= 1 / 3, "ratio")
TARGETS["device: char-GPT training step: fused vs strict, simulated v5e time"] = (
    ">= 1.5x strict", lambda r: r is not None and r >= 1.5, "ratio")
for _threads in ("one thread", f"all threads ({os.cpu_count() or 1})"):
    TARGETS[f"device: char-GPT training step on the host device (fused) vs CPU eager, {_threads}"] = (
        ">= 1.0x CPU eager", lambda r: r is not None and r >= 1.0, "ratio")

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
    """The built bench_* binaries, then the bench/bench_*.py scripts (run
    with this Python: they measure tpk's Python package)."""
    out = []
    folder = os.path.join(build, "bench")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if name.startswith("bench_") and os.path.isfile(path) and os.access(path, os.X_OK):
            out.append(path)
    for name in sorted(os.listdir(HERE)):
        if name.startswith("bench_") and name.endswith(".py"):
            out.append(os.path.join(HERE, name))
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
        command = [sys.executable, path] if path.endswith(".py") else [path]
        # scripts import this tree's package, as binaries run this tree's build
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(os.path.dirname(HERE), "python"),
                                                                        os.environ.get("PYTHONPATH")])))
        p = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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


SUITE = "suite_std"  # the name --only matches for the suite


def run_suite(build, timeout):
    """Run `tpk bench --suite std`; returns its JSON document, or None."""
    tpk = os.path.join(build, "tpk")
    print(f"run.py: {os.path.relpath(tpk)} bench --suite std --threads 1", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "suite.json")
        try:
            # one thread: the goals are stated for one thread (matmul
            # against single-threaded OpenBLAS; PyTorch on as many as tpk)
            p = subprocess.run([tpk, "bench", "--suite", "std", "--threads", "1", "--json", path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"run.py: the suite took more than {timeout} s; no rows from it", file=sys.stderr)
            return None
        for line in p.stdout.splitlines():
            print(f"  {line}")
        # status 1 = some kernels missing or failed: their rows say so, the rest stand
        if p.returncode not in (0, 1) or not os.path.exists(path):
            print(f"run.py: the suite failed (exit status {p.returncode})", file=sys.stderr)
            return None
        with open(path) as f:
            return json.load(f)


def suite_rows(suite):
    """The suite's measurements as rows of this script's format."""
    goals = {(g["kernel"], g["device"]): g for g in suite["goals"]}
    rows = []
    for r in suite["rows"]:
        if r["status"] != "ok":
            continue
        name = f"std: {r['kernel']} {r['shape']}"
        extra = {"suite": suite["suite"], "kernel": r["kernel"], "shape": r["shape"]}
        if r["host"]:
            ref = r["reference"] or {}
            rows.append({"name": name, "device": "host", "value": r["host"]["ms"], "unit": "ms",
                         "baseline": ref.get("name"), "ratio": ref.get("ratio"), **extra,
                         "rate": r["host"]["rate"], "rate_unit": r["rate_unit"]})
        for s in r["sim"]:
            rows.append({"name": name, "device": s["device"], "value": s["us"], "unit": "us", "baseline": None,
                         "ratio": None, **extra, "roofline_fraction": s["roofline_fraction"],
                         "peak_fraction": s["peak_fraction"]})
    for row in rows:
        g = goals.get((row["kernel"], row["device"]))
        if g:
            row["target"], row["met"] = g["target"], g["met"]
    return rows


def fmt_value(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def verdict(row):
    if "target" in row:  # the suite judged it
        return row["target"], ("met" if row["met"] else "n/a" if row["met"] is None else "**missed**")
    t = TARGETS.get(row["name"])
    if not t:
        return "", ""
    text, ok, field = (t + ("value",))[:3]
    return text, ("met" if ok(row[field]) else "**missed**")


def pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def suite_markdown(suite):
    """The suite's table, as `tpk bench --suite std` prints it."""
    sims = [d for d in suite["devices"] if d.startswith("sim:")]
    refs = suite["references"]
    lines = ["## Standard kernels (`tpk bench --suite std`)", "",
             f"Kernels from `{suite['kernels_dir']}`; the host on {suite['threads']} thread"
             f"{'' if suite['threads'] == 1 else 's'}, the references on as many: "
             f"{refs['openblas'] or 'OpenBLAS n/a (' + str(refs['openblas_note']) + ')'}, "
             f"PyTorch {refs['torch'] or 'n/a (' + str(refs['torch_note']) + ')'}. Host time: median of "
             f"{suite['repeat']} calls, interleaved with the reference's; ratio = reference time / tpk time "
             "(> 1: tpk is faster).", ""]
    head = ["kernel", "shape", "host ms", "host rate", "reference", "ref ms", "ratio"]
    for d in sims:
        head += [f"{d} µs", "roofline", "peak"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in suite["rows"]:
        cells = [r["kernel"], r["shape"]]
        if r["status"] != "ok":
            cells += [f"{r['status']}: {r['message']}"] + [""] * (len(head) - 3)
        else:
            h, ref = r["host"], r["reference"]
            cells += [f"{h['ms']:.3f}" if h else "-",
                      f"{h['rate']:.3g} {r['rate_unit']}" if h and h["rate"] is not None else "-",
                      ref["name"] if ref else "-",
                      f"{ref['ms']:.3f}" if ref and ref["ms"] is not None else ("n/a" if ref else "-"),
                      f"{ref['ratio']:.2f}x" if ref and ref["ratio"] is not None else "-"]
            by_dev = {s["device"]: s for s in r["sim"]}
            for d in sims:
                s = by_dev.get(d)
                cells += [f"{s['us']:.1f}", pct(s["roofline_fraction"]), pct(s["peak_fraction"])] if s else ["-"] * 3
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "Goals:", ""]
    for g in suite["goals"]:
        if g["met"] is None:
            lines.append(f"- n/a: {g['goal']} ({g['note']})")
        else:
            v = f"{100 * g['value']:.1f}%" if g["kind"] == "peak_fraction" else f"{g['value']:.2f}x"
            lines.append(f"- {'PASS' if g['met'] else '**FAIL**'}: {g['goal']}: {v}")
    s = suite["summary"]
    lines += ["", f"{s['rows']} rows: {s['ok']} measured, {s['missing']} missing, {s['errors']} failed.", ""]
    return lines


def kept_suite_section(path):
    """RESULTS.md's standard-kernel section, as the last full run wrote it
    (for --merge without the suite), or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start = text.find("## Standard kernels")
    if start < 0:
        return None
    end = text.find("\n## Benchmarks that failed", start)
    return text[start:end if end >= 0 else len(text)].rstrip("\n").split("\n") + [""]


def merged(old_path, rows):
    """rows over the results.json at old_path: a row replaces the old one
    of its name and device (one name may be measured on several), the other
    old rows stay where they were, new ones go last."""
    try:
        with open(old_path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return rows
    fresh = {(r["name"], r["device"]): r for r in rows}
    out = [fresh.pop((r["name"], r["device"]), r) for r in old]
    return out + [r for r in rows if (r["name"], r["device"]) in fresh]


def write_markdown(path, rows, mach, failed, suite=None, suite_lines=None):
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
    if suite or suite_lines:
        lines += ["- the standard kernels' goals: see below", ""] + (suite_markdown(suite) if suite else suite_lines)
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
    ap.add_argument("--suite-timeout", type=float, default=3600, help="seconds allowed for the suite")
    ap.add_argument("--no-suite", action="store_true", help=f"skip `tpk bench --suite std` ({SUITE})")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of benchmarks not run from the results.json in --out (a row replaces the "
                         "one of its name), and RESULTS.md's standard-kernel section when the suite does not run")
    args = ap.parse_args()

    benches = [b for b in find_benches(args.build) if not args.only or args.only in os.path.basename(b)]
    with_suite = not args.no_suite and (not args.only or args.only in SUITE)
    if not benches and not with_suite:
        raise SystemExit(f"run.py: no benchmark binaries in {args.build}/bench (run `make bench`)")
    rows, failed, suite = [], [], None
    for b in benches:
        got = run_bench(b, args.timeout)
        if got is None:
            failed.append(os.path.basename(b))
        else:
            rows += got
    if with_suite:
        suite = run_suite(args.build, args.suite_timeout)
        if suite is None:
            failed.append("tpk bench --suite std")
        else:
            rows += suite_rows(suite)

    mach = machine()
    suite_lines = None
    if args.merge:
        rows = merged(os.path.join(args.out, "results.json"), rows)
        suite_lines = None if suite else kept_suite_section(os.path.join(args.out, "RESULTS.md"))
    os.makedirs(args.out, exist_ok=True)  # --out may name a new folder
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    write_markdown(os.path.join(args.out, "RESULTS.md"), rows, mach, failed, suite, suite_lines)

    width = max([len(r["name"]) for r in rows] + [9])
    for r in rows:
        target, result = verdict(r)
        print(f"  {r['name']:<{width}}  {fmt_value(r['value']):>8} {r['unit']:<4} {target} {result}".rstrip())
    print(f"run.py: {len(rows)} rows -> {os.path.relpath(os.path.join(args.out, 'results.json'))}, "
          f"{os.path.relpath(os.path.join(args.out, 'RESULTS.md'))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
