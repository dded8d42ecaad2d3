"""The `tpk` PyTorch device: PyTorch's PrivateUse1 slot as `tpk`.

    import torch, tpk.torch
    x = torch.randn(4, 4, device="tpk")     # an ordinary torch.Tensor on a simulated v5e
    tpk.torch.set_device("host")            # what tpk:0 is: sim:v5e (default), sim:<chip>, host
    tpk.torch.set_eager_mode("fused")       # debug, strict (default), fused

`import tpk.torch` runs this module once: it sets the C++ shim
(tpk/_torch_device.cpp, which does the device's work through tpk.h) up on
tpk._C's context, renames PrivateUse1 to "tpk", registers `torch.tpk` and the
`Tensor.tpk()` / `Tensor.is_tpk` / `Module.tpk()` methods, and makes tpk
tensors print through the CPU. python/README.md ("The tpk device") has the
design.

Environment: TPK_DEVICE (the device, default sim:v5e), TPK_EAGER (the eager
mode, read by tpk's context), TPK_FALLBACK=0 (ops tpk does not have raise
instead of running on the CPU).
"""
import os
import types

import torch

from . import _C

try:
    from . import _torch_device as _shim
except ImportError as e:  # pragma: no cover - a build without torch's headers
    raise ImportError(f"the tpk device's shim (tpk/_torch_device.cpp) is not built: run make ({e})") from e

__all__ = ["set_device", "device_name", "set_eager_mode", "eager_mode", "synchronize", "set_fallback", "stats",
           "profile", "report", "Report"]

DEFAULT_DEVICE = "sim:v5e"


def set_device(name):
    """What tpk:0 is: "sim:v5e", any "sim:<chip>", or "host". Syncs the
    stream; tensors made before keep their memory on the old device (an op
    mixing them runs on the CPU)."""
    _shim.set_device(name)


def device_name():
    """The tpk device tpk:0 is: "sim:v5e"."""
    return _shim.device()


def set_eager_mode(mode):
    """"debug", "strict" or "fused" (tpk.h, "Eager streams"): syncs the
    stream and goes on in the new mode."""
    _shim.set_eager_mode(mode)


def eager_mode():
    return _shim.eager_mode()


def synchronize():
    """Run every op submitted so far; raises the first error of their work."""
    _shim.synchronize()


def set_fallback(on):
    """Whether an op tpk does not have runs on the CPU (with a warning naming
    it once) or raises NotImplementedError naming it."""
    _shim.set_fallback(bool(on))


def stats():
    """What the device did since the process started: ops submitted to the
    stream, launches, fused windows, compiles and cache hits, simulated
    seconds (on sim:<chip>), calls that ran on the CPU and the names of
    those ops, and host launches whose parts ran on torch's intra-op
    threads (torch_thread_launches: those of the thread that imported
    tpk.torch, such as torch.compile's graphs)."""
    return _shim.stats()


# ---- the profiler: tpk.torch.profile() and report() ----

class Launch:
    """One launch of the device's stream: an op (debug, strict) or a fused
    window (its ops by name), with its simulated time on the chip."""

    __slots__ = ("label", "first", "last", "kernels", "tier", "simulated", "seconds", "flops", "matmul_flops",
                 "hbm_bytes", "mxu_utilisation", "vpu_utilisation", "hbm_utilisation")

    def __init__(self, t):
        for name, value in zip(self.__slots__, t):
            setattr(self, name, value)

    @property
    def ops(self):
        return self.last - self.first + 1


class Row:
    """The launches of one op or window label, added up."""

    def __init__(self, label):
        self.label, self.calls, self.ops, self.kernels = label, 0, 0, 0
        self.seconds = self.flops = self.hbm_bytes = 0.0
        self._busy = [0.0, 0.0, 0.0]  # utilisations weighted by time

    def add(self, launch):
        self.calls += 1
        self.ops += launch.ops
        self.kernels += launch.kernels
        self.seconds += launch.seconds
        self.flops += launch.flops
        self.hbm_bytes += launch.hbm_bytes
        for i, u in enumerate((launch.mxu_utilisation, launch.vpu_utilisation, launch.hbm_utilisation)):
            self._busy[i] += u * launch.seconds

    def _util(self, i):
        return self._busy[i] / self.seconds if self.seconds else 0.0

    mxu_utilisation = property(lambda self: self._util(0))
    vpu_utilisation = property(lambda self: self._util(1))
    hbm_utilisation = property(lambda self: self._util(2))


class Report:
    """What the device did during a `tpk.torch.profile()` block: the stream's
    launches (`launches`, in order) and, per op or fused window (`rows`,
    by simulated time), the simulated time on the chip, FLOPs, HBM bytes and
    the MXU, VPU and HBM utilisation; the block's counts (`ops`, `launches`
    as kernels run, `windows`, `compiles`, `cache_hits`, `cpu_ops` and
    `cpu_op_names`); `sim_seconds` (None on the host); `wall_seconds`.
    `str()` is a table; `write_trace(path)` a Perfetto trace."""

    def __init__(self, device, mode, launches, before, after, wall_seconds):
        self.device, self.mode, self.wall_seconds = device, mode, wall_seconds
        self.launches = [Launch(t) for t in launches]
        for key in ("ops", "launches", "windows", "compiles", "cache_hits", "cpu_ops"):
            setattr(self, key if key != "launches" else "kernels", after[key] - before[key])
        self.cpu_op_names = sorted(set(after["cpu_op_names"]) - set(before["cpu_op_names"]))
        self.simulated = any(l.simulated for l in self.launches)
        self.sim_seconds = sum(l.seconds for l in self.launches) if self.simulated else None
        rows = {}
        for l in self.launches:
            rows.setdefault(l.label, Row(l.label)).add(l)
        self.rows = sorted(rows.values(), key=lambda r: (-r.seconds, -r.calls, r.label))
        total = Row("total")
        for l in self.launches:
            total.add(l)
        self.total = total

    @property
    def flops(self):
        return self.total.flops

    @property
    def mxu_utilisation(self):
        return self.total.mxu_utilisation

    @property
    def vpu_utilisation(self):
        return self.total.vpu_utilisation

    @property
    def hbm_utilisation(self):
        return self.total.hbm_utilisation

    def __str__(self):
        head = (f"tpk:0 = {self.device}, {self.mode} mode: {self.ops} ops, {len(self.launches)} launches "
                f"({self.kernels} kernels), {self.windows} fused windows, {self.compiles} compiles, "
                f"{self.cache_hits} cache hits, {self.cpu_ops} ops on the CPU"
                + (f" ({', '.join(self.cpu_op_names)})" if self.cpu_op_names else "")
                + f"; host wall time {self.wall_seconds * 1e3:.1f} ms")
        if not self.simulated:
            return head + "\n(no simulated time: the device is the host)"
        t = self.total
        lines = [head,
                 f"simulated time {self.sim_seconds * 1e6:.1f} us, {t.flops / self.sim_seconds / 1e12 if self.sim_seconds else 0:.2f} "
                 f"TFLOP/s; utilisation MXU {t.mxu_utilisation:.1%}, VPU {t.vpu_utilisation:.1%}, HBM {t.hbm_utilisation:.1%}",
                 f"{'sim us':>10} {'%':>6} {'calls':>6} {'ops':>6} {'GFLOP':>8} {'HBM MB':>8} {'MXU':>6} {'VPU':>6} {'HBM':>6}  op or window"]
        for r in self.rows:
            share = r.seconds / self.sim_seconds if self.sim_seconds else 0.0
            lines.append(f"{r.seconds * 1e6:10.2f} {share:6.1%} {r.calls:6d} {r.ops:6d} {r.flops / 1e9:8.3f} "
                         f"{r.hbm_bytes / 1e6:8.3f} {r.mxu_utilisation:6.1%} {r.vpu_utilisation:6.1%} "
                         f"{r.hbm_utilisation:6.1%}  {r.label}")
        return "\n".join(lines)

    def trace(self):
        """The launches laid end to end on the simulated chip as Chrome-trace
        events (what write_trace writes): one slice per launch on the
        chip's track, its ops' positions, FLOPs, bytes and utilisations as
        arguments, and the MXU, VPU and HBM utilisation as counters."""
        if not self.simulated:
            raise ValueError("no simulated time to trace: the device is the host (tpk.torch.set_device('sim:v5e'))")
        pid, tid = 1, 1
        events = [
            {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"tpk:0 {self.device} ({self.mode})"}},
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": "chip"}},
        ]
        at = 0.0
        for l in self.launches:
            us = l.seconds * 1e6
            events.append({"ph": "X", "pid": pid, "tid": tid, "ts": at, "dur": us, "name": l.label,
                           "cat": "window" if l.ops > 1 or self.mode == "fused" else "op",
                           "args": {"ops": f"#{l.first}" if l.ops == 1 else f"#{l.first}-#{l.last}",
                                    "kernels": l.kernels, "flops": l.flops, "hbm_bytes": l.hbm_bytes,
                                    "mxu_utilisation": l.mxu_utilisation, "vpu_utilisation": l.vpu_utilisation,
                                    "hbm_utilisation": l.hbm_utilisation, "tier": l.tier}})
            events.append({"ph": "C", "pid": pid, "ts": at, "name": "utilisation",
                           "args": {"mxu": l.mxu_utilisation, "vpu": l.vpu_utilisation, "hbm": l.hbm_utilisation}})
            at += us
        events.append({"ph": "C", "pid": pid, "ts": at, "name": "utilisation", "args": {"mxu": 0, "vpu": 0, "hbm": 0}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_trace(self, path):
        """A Perfetto trace (Chrome-trace JSON: open it in ui.perfetto.dev) of
        the block on the simulated chip."""
        import json
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return path


_last_report = None


class profile:
    """`with tpk.torch.profile() as prof:` records what the device runs in the
    block (it syncs at both ends); then `prof.report` (and
    `tpk.torch.report()`) is its Report."""

    def __init__(self):
        self.report = None

    def __enter__(self):
        import time
        self._before = stats()
        _shim.profile(True)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        import time
        global _last_report
        launches = _shim.profile(False)
        wall = time.perf_counter() - self._start
        self.report = _last_report = Report(device_name(), eager_mode(), launches, self._before, stats(), wall)
        return False


def report():
    """The Report of the latest `tpk.torch.profile()` block."""
    if _last_report is None:
        raise RuntimeError("no profile yet: run a step under `with tpk.torch.profile():`, then call tpk.torch.report()")
    return _last_report


def _env_fallback():
    value = os.environ.get("TPK_FALLBACK", "1")
    if value not in ("0", "1"):
        raise ValueError(f"TPK_FALLBACK={value}: expected 0 or 1")
    return value == "1"


# ---- torch.tpk: the device module PyTorch asks a backend for ----

def _module():
    m = types.ModuleType("torch.tpk", "The tpk device (tpk.torch): one device, tpk:0, a simulated TPU or the host.")

    def is_available():
        return True

    def device_count():
        return 1

    def current_device():
        return 0

    def set_device_index(device):
        index = torch.device(device).index if isinstance(device, (str, torch.device)) else device
        if index not in (None, 0):
            raise ValueError(f"tpk has one device, tpk:0, not {device}")

    def synchronize_device(device=None):
        synchronize()

    # Random ops run on the CPU route, drawing from the device's own
    # generator (the shim's): seeded here and by torch.manual_seed.
    def manual_seed(seed):
        _shim.generator_seed(int(seed))

    def get_rng_state(device="tpk"):
        return torch.frombuffer(bytearray(_shim.generator_state()), dtype=torch.uint8)

    def set_rng_state(state, device="tpk"):
        _shim.generator_state(bytes(state.to(torch.uint8).contiguous().numpy().tobytes()))

    def _is_in_bad_fork():
        return False

    m.is_available = is_available
    m.is_initialized = is_available
    m.device_count = device_count
    m.current_device = current_device
    m._get_device_index = lambda device=None, optional=False: 0
    m.set_device = set_device_index
    m.synchronize = synchronize_device
    m.manual_seed = manual_seed
    m.manual_seed_all = manual_seed
    m.seed = lambda: _shim.generator_seed(None)
    m.initial_seed = _shim.generator_initial_seed
    m.get_rng_state = get_rng_state
    m.set_rng_state = set_rng_state
    m.get_rng_state_all = lambda: [get_rng_state()]
    m.set_rng_state_all = lambda states: set_rng_state(states[0])
    m._is_in_bad_fork = _is_in_bad_fork
    return m


def _print_through_the_cpu():
    """Printing a tensor runs ops on it element by element (masked_select,
    item per value): tpk tensors print from a CPU copy, one sync, as PyTorch
    does for xla and lazy tensors."""
    import torch._tensor_str as tensor_str
    formatted = tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tpk":
            self = self.cpu()
        return formatted(self, indent)

    tensor_str._tensor_str = _tensor_str


# the ATen ops registered for the device by name (the rest reach its fallback)
REGISTERED_OPS = tuple(_shim.init(_C.context_capsule(), os.environ.get("TPK_DEVICE") or DEFAULT_DEVICE, _env_fallback()))
torch.utils.rename_privateuse1_backend("tpk")
torch._register_device_module("tpk", _module())
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
_print_through_the_cpu()
# The backward of tpk tensors runs on the thread that calls backward(), not on
# an autograd device thread: the device has its own queue, so such a thread
# buys no overlap, and it releases each backward's graph task (with the Python
# context torch stashes in it) after backward() returned, which at the end of
# a script races the interpreter's shutdown and aborts the process
# (pytorch/pytorch#190489). The setting is the importing thread's.
torch.autograd.set_multithreading_enabled(False)
