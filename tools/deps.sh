#!/bin/sh
# Install what the build and tests need and is missing; safe to run twice.
# Debian packages: re2c (lexer), lemon (parser), libtcc (JIT), cmocka (tests),
# clang (libFuzzer, for `make fuzz`), OpenBLAS (the baseline of bench_gemm),
# g++ (the tpk PyTorch device's C++ shim, python/tpk/_torch_device.cpp).
set -e
missing=""
need() { # need PACKAGE FILE-THAT-PROVES-IT
  [ -e "$2" ] || missing="$missing $1"
}
need re2c /usr/bin/re2c
need lemon /usr/bin/lemon
need libtcc-dev /usr/include/libtcc.h
need tcc /usr/bin/tcc # libtcc1.a and tcc's include/, which libtcc needs at run time
need libcmocka-dev /usr/include/cmocka.h
need clang /usr/bin/clang
need make /usr/bin/make
need gcc /usr/bin/gcc
need g++ /usr/bin/g++
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
need libopenblas-dev "/usr/include/$multiarch/openblas-pthread/cblas.h"
if [ -n "$missing" ]; then
  echo "deps: installing$missing"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# Python: NumPy reads and writes the .npy files of the tutorials and tests;
# PyTorch (CPU build, pinned) and pytest are the standard kernels' references
# (tests/std) and the benchmarks' baseline.
PYTHON=${PYTHON:-python3}
pip_install() {
  echo "deps: installing $*"
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet "$@"
}
"$PYTHON" -c "import numpy" 2>/dev/null || pip_install numpy
"$PYTHON" -c "import pytest" 2>/dev/null || pip_install pytest
"$PYTHON" -c "import torch; assert torch.__version__.startswith('2.13.0')" 2>/dev/null || pip_install torch==2.13.0
# The tpk package, editable: a .pth file that puts this tree's python/ on the
# path (its extension is built by `make`). Reinstalled when the installed
# one is another tree's.
root=$(cd "$(dirname "$0")/.." && pwd)
"$PYTHON" -c "import sys, importlib.util as u; s = u.find_spec('tpk'); sys.exit(not s or s.origin != sys.argv[1])" \
  "$root/python/tpk/__init__.py" 2>/dev/null || pip_install -e "$root/python" --config-settings editable_mode=compat
echo "deps: all present (re2c $(re2c --version | cut -d' ' -f2), lemon, libtcc, cmocka, clang, OpenBLAS," \
  "numpy, pytest, torch $("$PYTHON" -c "import torch; print(torch.__version__)"), tpk (editable, $root/python))"
