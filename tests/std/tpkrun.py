"""Run one .tpk kernel through the `tpk run` command line, for the standard
kernel tests: inputs go in as .npy files, outputs come back as NumPy arrays.

The tests compare these outputs with an independent reference (NumPy or
PyTorch on the CPU), so nothing here knows what a kernel computes.
"""
import os
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TPK_BUILD", os.path.join(ROOT, "build"))
TPK = os.path.join(BUILD, "tpk")
KERNELS = os.path.join(ROOT, "kernels")

# Devices every standard kernel is tested on.
DEVICES = ["host", "sim:v5e"]


class TpkRunError(RuntimeError):
    pass


def _pairs(d):
    return ",".join(f"{k}={v}" for k, v in d.items())


def run(file, kernel, shape, inputs, scalars=None, tune=None, device="host", outputs=None):
    """Run `kernel` of kernels/`file` (or a path) once and return its outputs
    (and inout parameters) as a dict name -> np.ndarray.

    shape:   every shape symbol, {"M": 37, "N": 130}
    inputs:  name -> np.ndarray for every input (float32 arrays may feed
             bf16/f16 parameters; tpk rounds them to nearest even)
    scalars: name -> number; tune: name -> int
    Raises TpkRunError with tpk's message when the run fails.
    """
    path = file if os.path.isabs(file) or os.sep in file else os.path.join(KERNELS, file)
    with tempfile.TemporaryDirectory() as tmp:
        ins = {}
        for name, arr in inputs.items():
            p = os.path.join(tmp, f"in_{name}.npy")
            np.save(p, np.ascontiguousarray(arr))
            ins[name] = p
        out_dir = os.path.join(tmp, "out")
        cmd = [TPK, "run", path, "--kernel", kernel, "--shape", _pairs(shape), "--device", device,
               "--out", out_dir, "--repeat", "1"]
        if ins:
            cmd += ["--inputs", _pairs(ins)]
        if scalars:
            cmd += ["--scalar", _pairs(scalars)]
        if tune:
            cmd += ["--tune", _pairs(tune)]
        env = dict(os.environ)
        env.setdefault("TPK_TIER", "tcc")  # tests check values; the cc tier is tested in C
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:
            raise TpkRunError(f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        result = {}
        for f in sorted(os.listdir(out_dir)):
            if f.endswith(".npy"):
                result[f[:-4]] = np.load(os.path.join(out_dir, f))
        if outputs is not None:
            missing = set(outputs) - set(result)
            if missing:
                raise TpkRunError(f"{kernel}: no output {sorted(missing)}")
        return result


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, what=""):
    """Elementwise |a - e| <= atol + rtol*|e|, with the worst element named."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    if actual.size == 0:
        return
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    err = np.abs(a - e) - (atol + rtol * np.abs(e))
    nan_ok = np.isnan(a) == np.isnan(e)
    assert nan_ok.all(), f"{what}: NaN where the reference has none (or the reverse)"
    err = np.where(np.isnan(e), -1.0, err)
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err[worst] <= 0, (f"{what}: element {tuple(int(i) for i in worst)} is {a[worst]!r}, "
                             f"expected {e[worst]!r} (rtol {rtol}, atol {atol})")
