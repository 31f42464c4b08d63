"""numba_cuda/numba/cuda/cudadrv/driver.py, the parts an EMM plug-in meets:
the manager classes, MemoryPointer (finalizer through weakref.finalize),
CudaAPIError, MemoryInfo, the per-device Context that makes its memory
manager (set_memory_manager / NUMBA_CUDA_MEMORY_MANAGER). No `binding`
attribute: the error code comes from enums (Numba's ctypes binding)."""
import contextlib
import importlib
import os
import weakref
from abc import ABCMeta, abstractmethod
from collections import namedtuple

from . import enums

MemoryInfo = namedtuple("MemoryInfo", "free,total")


class CudaDriverError(Exception):
    pass


class CudaAPIError(CudaDriverError):
    def __init__(self, code, msg):
        self.code = code
        self.msg = msg
        super().__init__(code, msg)

    def __str__(self):
        return "[%s] %s" % (self.code, self.msg)


class UniqueDict(dict):
    def __setitem__(self, key, value):
        if key in self:
            raise ValueError("key already exists")
        super().__setitem__(key, value)


class _FakeDriver:
    def cuMemGetInfo(self):
        return (1 << 30, 1 << 30)


driver = _FakeDriver()


class MemoryPointer:
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.context = context
        self.device_pointer = pointer
        self.size = size
        self.is_managed = finalizer is not None
        self.handle = pointer
        if finalizer is not None:
            self._finalizer = weakref.finalize(self, finalizer)

    @property
    def device_pointer_value(self):
        return getattr(self.device_pointer, "value", self.device_pointer) or 0

    def free(self):
        if self.is_managed:
            if not self._finalizer.alive:
                raise RuntimeError("Freeing dead memory")
            self._finalizer()


class BaseCUDAMemoryManager(metaclass=ABCMeta):
    def __init__(self, *args, **kwargs):
        if "context" not in kwargs:
            raise RuntimeError("Memory manager requires a context")
        self.context = kwargs.pop("context")

    @abstractmethod
    def memalloc(self, size): ...

    @abstractmethod
    def initialize(self): ...

    @abstractmethod
    def get_memory_info(self): ...

    @property
    @abstractmethod
    def interface_version(self): ...


class _PendingDeallocs:
    def __init__(self):
        self.disabled = 0

    @contextlib.contextmanager
    def disable(self):
        self.disabled += 1
        try:
            yield
        finally:
            self.disabled -= 1

    def clear(self):
        pass


class HostOnlyCUDAMemoryManager(BaseCUDAMemoryManager):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = UniqueDict()
        self.deallocations = _PendingDeallocs()

    def reset(self):
        self.allocations.clear()
        self.deallocations.clear()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.deallocations.disable():
            yield


class GetIpcHandleMixin:
    def get_ipc_handle(self, memory):
        raise NotImplementedError("IPC is not part of the fake")


_memory_manager = None


def _ensure_memory_manager():
    global _memory_manager
    if _memory_manager:
        return
    name = os.environ.get("NUMBA_CUDA_MEMORY_MANAGER", "default")
    if name == "default":
        raise RuntimeError("the fake has no default memory manager")
    try:
        mgr_module = importlib.import_module(name)
        set_memory_manager(mgr_module._numba_memory_manager)
    except Exception:
        raise RuntimeError("Failed to use memory manager from %s" % name)


def set_memory_manager(mm_plugin):
    global _memory_manager
    dummy = mm_plugin(context=None)
    if dummy.interface_version != 1:
        raise RuntimeError("EMM Plugin interface has version %d - version 1 required" % dummy.interface_version)
    _memory_manager = mm_plugin


synchronized = []  # handles synchronize() was called on (None: device-wide), in order


class Stream:
    """driver.Stream: `handle` (a CUstream; here an int) and synchronize()."""

    def __init__(self, handle=0):
        self.handle = handle

    def __int__(self):
        return int(self.handle)

    def synchronize(self):
        synchronized.append(int(self.handle))


class Device:
    def __init__(self, id):
        self.id = id


class Context:
    def __init__(self, device):
        self.device = device
        _ensure_memory_manager()
        self.memory_manager = _memory_manager(context=self)
        self.memory_manager.initialize()

    def memalloc(self, bytesize):
        return self.memory_manager.memalloc(bytesize)

    def get_memory_info(self):
        return self.memory_manager.get_memory_info()

    def reset(self):
        self.memory_manager.reset()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.memory_manager.defer_cleanup():
            yield
