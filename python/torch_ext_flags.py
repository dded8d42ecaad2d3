"""The flags a C++ extension of the installed torch is built with, from
torch.utils.cpp_extension: the compiler's on the first line, the linker's
on the second. The Makefile runs this once (its output is
build/python/torch_flags, remade when torch changes) and builds
tpk/_torch_device.cpp with them, so nothing is compiled when Python runs.
With torch's OpenMP build, -fopenmp: the shim hands tpk's host launches to
at::parallel_for, whose parallel region is compiled into the caller, so that
tpk's parts run on torch's OpenMP threads (the libgomp torch loaded)."""
import sysconfig

import torch
from torch.utils import cpp_extension

includes = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
cflags = [f"-isystem {path}" for path in includes] + [
    f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
    "-std=c++20",
]
openmp = ["-fopenmp"] if torch.backends.openmp.is_available() else []
libs = cpp_extension.library_paths()
ldflags = [f"-L{path}" for path in libs] + [f"-Wl,-rpath,{path}" for path in libs] + ["-lc10", "-ltorch_cpu", "-ltorch"]
print(" ".join(cflags + openmp))
print(" ".join(ldflags + openmp))
