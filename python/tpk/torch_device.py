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

__all__ = ["set_device", "device_name", "set_eager_mode", "eager_mode", "synchronize", "set_fallback", "stats"]

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
    those ops."""
    return _shim.stats()


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

    # Random ops run on the CPU, with the CPU's generator: seeding one seeds
    # both, and tpk tensors get the numbers CPU tensors would.
    def manual_seed(seed):
        torch.random.default_generator.manual_seed(int(seed))

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
    m.seed = lambda: torch.random.default_generator.seed()
    m.initial_seed = lambda: torch.random.default_generator.initial_seed()
    m.get_rng_state = lambda device="tpk": torch.random.default_generator.get_state()
    m.set_rng_state = lambda state, device="tpk": torch.random.default_generator.set_state(state)
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
