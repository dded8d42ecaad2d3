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
