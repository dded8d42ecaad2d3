"""What the Python benchmarks share: a row of results as bench/run.py reads
it, and a measurement in a process of its own (the benchmark's file run
again with --worker JSON: a cache state, a thread count, an eager mode)."""
import json
import os
import subprocess
import sys


def row(name, value, unit, baseline=None, base_value=None, device="host"):
    """One result; ratio = the baseline's value / tpk's (> 1: tpk did better)."""
    ratio = None if base_value is None else base_value / value
    print(json.dumps({"name": name, "device": device, "value": round(value, 4), "unit": unit,
                      "baseline": baseline, "ratio": None if ratio is None else round(ratio, 3)}), flush=True)


def run_worker(script, job, env, timeout):
    """The dict `script`'s worker returned for `job`, run in a new process."""
    p = subprocess.run([sys.executable, os.path.abspath(script), "--worker", json.dumps(job)], env=env,
                       stdout=subprocess.PIPE, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"{os.path.basename(script)}: worker {job} failed (exit status {p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def as_worker(worker):
    """In a worker process (--worker JSON): prints worker(job) and returns
    True; otherwise False."""
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
        return True
    return False
