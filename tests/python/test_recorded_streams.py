"""bench/streams/*.ops are what tools/record_streams.py records on this torch:
a change of PyTorch (or of the recorder) that changes the streams fails here,
so the benchmarks and `tpk replay` tests never run stale streams."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_streams_are_fresh():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "record_streams.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
