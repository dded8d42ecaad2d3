"""The tpk package's tests: the package from python/ (built by `make`), on the
host and a simulated v5e.

TPK_TIER=tcc unless the environment says otherwise: these tests check
values and bindings, and the cc tier is tested in C (as in tests/std). It
must be set before tpk's context is created, at the first call.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TPK_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TPK_TIER", "tcc")

DEVICES = ["host", "sim:v5e"]


def corpus(name):
    """A kernel file of tests/corpus, loaded."""
    import tpk
    return tpk.load(os.path.join(ROOT, "tests", "corpus", name))


def bf16(x):
    """float32 rounded to bf16 (nearest even), kept as float32."""
    import numpy as np
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.view(np.float32)
