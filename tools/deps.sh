#!/bin/sh
# Install what the build and tests need and is missing; safe to run twice.
# Debian packages: re2c (lexer), lemon (parser), libtcc (JIT), cmocka (tests),
# clang (libFuzzer, for `make fuzz`), OpenBLAS (the baseline of bench_gemm).
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
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
need libopenblas-dev "/usr/include/$multiarch/openblas-pthread/cblas.h"
if [ -n "$missing" ]; then
  echo "deps: installing$missing"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# Python: NumPy reads and writes the .npy files of the tutorials and tests.
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import numpy" 2>/dev/null; then
  echo "deps: installing numpy"
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet numpy
fi
echo "deps: all present (re2c $(re2c --version | cut -d' ' -f2), lemon, libtcc, cmocka, clang, OpenBLAS, numpy)"
