"""numba.cuda's names an EMM plug-in and its users meet; one device (0)."""
from .cudadrv import driver as _driver
from .cudadrv.driver import (BaseCUDAMemoryManager, GetIpcHandleMixin, HostOnlyCUDAMemoryManager,  # noqa: F401
                             MemoryInfo, MemoryPointer, set_memory_manager)

_contexts = {}


def current_context():
    if 0 not in _contexts:
        _contexts[0] = _driver.Context(_driver.Device(0))
    return _contexts[0]


def get_current_device():
    return current_context().device


class DeviceNDArray:
    """Keeps its MemoryPointer as Numba's DeviceNDArray keeps gpu_data."""

    def __init__(self, n, itemsize=4):
        self.size = n
        self.nbytes = n * itemsize
        self.gpu_data = current_context().memalloc(self.nbytes) if n else None


def device_array(n, dtype=None):
    return DeviceNDArray(int(n))


def stream(handle=0):
    return _driver.Stream(handle)


def synchronize():
    _driver.synchronized.append(None)
