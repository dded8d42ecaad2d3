"""tpk: `.tpk` kernels on NumPy arrays (and, with tpk.torch, as PyTorch ops).

    import tpk
    prog = tpk.load("softmax.tpk")          # or tpk.load_source(text), tpk.std
    y = prog.softmax(x)                     # x: numpy array -> numpy array
    y = prog.softmax(x, device="sim:v5e")   # same values, timed on a simulated v5e
    prog.softmax.last_report.seconds
    with tpk.device("sim:v5e"):             # the default device for a block
        y = prog.softmax(x)

The kernels are tpk.Kernel objects of the C extension (tpk._C), which does
the binding, checks and launches; see python/README.md for the rules
(zero-copy, conversions, errors) and the low-level `kernel.launch`.
"""
import ast
import contextlib
import functools
import os

from . import _C
from ._C import Kernel, Param, Report, TpkArgumentError, TpkError, Tunable

__all__ = [
    "Kernel", "Param", "Program", "Report", "TpkArgumentError", "TpkError", "Tunable", "cache_stats", "current_device",
    "device", "dim_value", "load", "load_source", "param_shapes", "std",
]
__version__ = _C.version


class Program:
    """A loaded, checked .tpk program. Its kernels are attributes
    (`prog.softmax`) and items (`prog["softmax"]`); each is created once, so
    `prog.softmax.last_report` is the report of the latest call."""

    def __init__(self, program):
        self._program = program
        self._kernels = {}

    @property
    def name(self):
        """The file, or the name given to load_source."""
        return self._program.name

    @property
    def kernel_names(self):
        return self._program.kernel_names

    def __getitem__(self, name):
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = self._kernels[name] = self._program.kernel(name)
        return kernel

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._program.kernel_names:
            raise AttributeError(f"{self.name} has no kernel '{name}'; it has: {', '.join(self.kernel_names)}")
        return self[name]

    def __contains__(self, name):
        return name in self._program.kernel_names

    def __iter__(self):
        return (self[name] for name in self._program.kernel_names)

    def __len__(self):
        return len(self._program.kernel_names)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._program.kernel_names))

    def __repr__(self):
        return f"<tpk.Program {self.name!r}: {', '.join(self.kernel_names)}>"


def load(path):
    """Load and check a .tpk file. A file with errors raises TpkError whose
    message is the diagnostics exactly as `tpk check` prints them."""
    return Program(_C.load(os.fspath(path)))


def load_source(text, name="<source>"):
    """Load and check .tpk source text; `name` is what messages call it."""
    return Program(_C.load_source(text, name))


class _StandardLibrary:
    """The standard kernel library (kernels/*.tpk), compiled ahead of time:
    `tpk.std.softmax(x)`. Kernel names are unique across its files."""

    def __init__(self):
        self._kernels = {}
        self._files = dict(_C.std_kernels())

    @property
    def kernel_names(self):
        return tuple(self._files)

    def file_of(self, name):
        """The standard file a kernel is in: "softmax.tpk"."""
        return self._files[name]

    def __getitem__(self, name):
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = self._kernels[name] = _C.std_kernel(name)
        return kernel

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._files:
            raise AttributeError(f"the standard library has no kernel '{name}'; it has: {', '.join(self._files)}")
        return self[name]

    def __contains__(self, name):
        return name in self._files

    def __iter__(self):
        return (self[name] for name in self._files)

    def __len__(self):
        return len(self._files)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._files))

    def __repr__(self):
        return f"<tpk.std: {len(self._files)} kernels>"


std = _StandardLibrary()


@contextlib.contextmanager
def device(name):
    """The default device of calls in this block (this thread, this asyncio
    task: a contextvars.ContextVar): "host" or "sim:<chip>". Calls that pass
    device= use theirs."""
    _C.open_device(name)  # an unknown device fails here, not at the first call
    token = _C.device_var.set(name)
    try:
        yield name
    finally:
        _C.device_var.reset(token)


def cache_stats():
    """The compilation cache as the process's context sees it (tpk.h, "The
    compilation cache"): a dict with `units` ({"kernel"|"eager"|"graph":
    {"hits", "misses"}}: lookups of compiled units in memory, a miss builds
    one), `compiler_runs` (libtcc or cc runs; code loaded from the disk
    cache is not one), the disk cache's `path`, `enabled`, `note`,
    `entries`, `bytes`, `hits`, `misses` and `rejected`, and `folder_units`
    (every context's lookups that used the folder)."""
    return _C.cache_stats()


def current_device():
    """The device calls use when they name none: "host" outside tpk.device."""
    return _C.device_var.get("host")


# ---- shapes from a signature (for callers that size outputs themselves) ----

@functools.lru_cache(maxsize=None)
def _dim_tree(text):
    return ast.parse(text, mode="eval").body


def _eval_dim(node, sizes, text):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            raise TpkArgumentError(f"the size {text} needs {node.id}, which is not bound")
        return sizes[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
        a, b = _eval_dim(node.left, sizes, text), _eval_dim(node.right, sizes, text)
        op = type(node.op)
        return a + b if op is ast.Add else a - b if op is ast.Sub else a * b if op is ast.Mult else a // b
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_dim(node.operand, sizes, text)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cdiv"
            and len(node.args) == 2):
        a, b = (_eval_dim(arg, sizes, text) for arg in node.args)
        return -(-a // b)
    raise ValueError(f"'{text}' is not a dimension tpk prints")


def dim_value(text, sizes):
    """The value of a dimension as Param.dims writes it ("M", "B*H", "N-1",
    "N/2" (floor), "cdiv(N,4)", "128") with the symbols in `sizes` (a dict;
    the values may be ints or anything with the same arithmetic, such as
    torch.SymInt)."""
    return _eval_dim(_dim_tree(text), sizes, text)


def param_shapes(kernel, shapes, syms=None, tune=None):
    """Every tensor parameter's shape, {name: tuple}, from the shapes of some
    of them (`shapes`: {name: shape}), as a launch would bind them: each
    shape symbol takes the size of the first dimension that is just that
    symbol, in an input and then in a given output; `syms` adds or
    overrides symbols, `tune` the tunables a shape may use (others take
    their declared defaults). Works with torch.SymInt sizes (fake tensors)."""
    sizes = {t.name: t.default for t in kernel.tunables}
    sizes.update(tune or {})
    bound = dict(syms or {})
    params = [p for p in kernel.params if p.kind != "scalar"]
    for outputs in (False, True):
        for p in params:
            if (p.kind == "out") != outputs or p.name not in shapes:
                continue
            shape = tuple(shapes[p.name])
            if len(shape) != len(p.dims):
                raise ValueError(f"kernel '{kernel.name}': parameter '{p.name}' has {len(p.dims)} dimensions, "
                                 f"the shape given {len(shape)}")
            for dim, size in zip(p.dims, shape):
                if dim in kernel.symbols and dim not in bound:
                    bound[dim] = size
    sizes.update(bound)
    return {p.name: tuple(dim_value(d, sizes) for d in p.dims) for p in params}
