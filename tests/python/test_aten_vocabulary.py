"""The ATen vocabulary issue 12's graph builder must cover, measured by
tools/aten_ops.py and kept in aten_ops.txt: the test fails when the pinned
torch produces other ops than the file says, so the file (and the table
built against it) stay true."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_measured_aten_ops_match_the_file():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "aten_ops.py"), "--check",
                           os.path.join(HERE, "aten_ops.txt")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
