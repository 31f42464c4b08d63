"""gcpressure.numba: Numba-CUDA's device memory through gcpressure's pool, as
an External Memory Management (EMM) plug-in.

    import gcpressure.numba
    gcpressure.numba.install(hard_limit="4GiB")   # = numba.cuda.set_memory_manager(GcpressureNumbaManager)
    # or, with no code change: NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba
    #   (settings then from the GCPRESSURE_* variables, e.g. GCPRESSURE_HARD_LIMIT=4GiB)

Numba's default memory manager frees through a pending-deallocation list
flushed in batches; a DeviceNDArray held in a reference cycle reaches that
list only when CPython's cyclic collector runs, which counts objects, not
bytes. GcpressureNumbaManager allocates from the one stream-aware pool per
device this package keeps for every framework (Note [Frameworks share the
devices] in examples/torch/torch_clients.cpp), whose pressure policy asks
CPython for a collection when device bytes justify one.

The EMM interface (numba-cuda docs, "External Memory Management (EMM) Plugin
interface", interface_version 1) is followed as RMM's RMMNumbaManager does:
a HostOnlyCUDAMemoryManager subclass (Numba keeps pinned and mapped host
memory), memalloc returns a MemoryPointer whose finalizer returns the block;
the block's owner is kept in self.allocations, so reset() (a context reset)
frees what the context still holds, as Numba's own manager does.

Streams: version 1 of the interface gives memalloc no stream ("does not
provide support for asynchronous allocation and deallocation"), so blocks are
allocated and freed on the legacy default stream, which orders against every
blocking stream (Numba's cuda.stream() makes blocking streams): a block is
reused only after the work queued before its free, on any such stream,
completed. synchronize(stream=None) takes a Numba stream (its `handle`) or
none (the default stream): the policy's hint before the host waits;
install() makes numba.cuda.synchronize() and Stream.synchronize() give it.

Out of memory: numba.cuda.cudadrv.driver.CudaAPIError with code
CUDA_ERROR_OUT_OF_MEMORY (what Numba's own manager raises, and what its
_attempt_allocation retries on), whose message is the library's whole report.

defer_cleanup(): frees here never synchronize and never wait (they are
stream-ordered returns to the pool), so there is nothing to defer on the
device side; the host-side (pinned memory) cleanup is deferred by
HostOnlyCUDAMemoryManager's, which this one holds.

get_memory_info(): (hard limit - live bytes, hard limit) of the device.
"""
from __future__ import annotations

import ctypes
import functools
import os

from numba import cuda as _cuda
from numba.cuda.cudadrv import driver as _driver

from . import _plugin
from ._plugin import (GcpressureTorchError, collect, iteration, quiet_moment, raw_stats, reset_peaks,  # noqa: F401
                      set_limits, stats, stats_text, trim, usage)

__all__ = ["GcpressureNumbaManager", "install", "uninstall", "synchronize", "stats", "raw_stats", "collect", "iteration",
           "quiet_moment", "usage", "set_limits", "reset_peaks", "trim", "stats_text"]


def _oom_code():
    binding = getattr(_driver, "binding", None)
    if binding is not None and hasattr(binding, "CUresult"):
        return binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    from numba.cuda.cudadrv import enums
    return enums.CUDA_ERROR_OUT_OF_MEMORY


def _library() -> _plugin.Library:
    if _plugin._lib is not None:
        return _plugin._lib
    # NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba: nothing installed; the
    # library reads the GCPRESSURE_* variables (the backend too, if set).
    return _plugin.ensure("numba", backend=None if os.environ.get("GCPRESSURE_BACKEND") else "cuda_async")


def _device_ordinal(context) -> int:
    """The ordinal of a Numba context's device. Note [A third party's context]:
    Numba's own contexts hold a Device (`.id`); a primary context a third party
    made and Numba attached to (numba-cuda's Test3rdPartyContext) holds the
    driver's raw CUdevice, which only converts with int(). Both work; anything
    else is an error that says what it got."""
    dev = context.device
    ordinal = getattr(dev, "id", None)
    if ordinal is None:
        try:
            ordinal = int(dev)
        except (TypeError, ValueError):
            raise GcpressureTorchError(
                f"gcpressure.numba: cannot tell the device of context {context!r} (device {dev!r})") from None
    return int(ordinal)


class GcpressureNumbaManager(_driver.GetIpcHandleMixin, _driver.HostOnlyCUDAMemoryManager):
    """Numba's memory manager over gcpressure's pool (see the module
    docstring). One instance per context (Numba makes them)."""

    def initialize(self) -> None:
        lib = _library()
        self._alloc_owned = lib.alloc_owned
        self._client = lib.client_id("numba")
        self._device = _device_ordinal(self.context)

    def memalloc(self, size: int):
        if not hasattr(self, "_alloc_owned"):
            self.initialize()
        if size == 0:
            return _driver.MemoryPointer(self.context, ctypes.c_void_p(0), 0)
        r = self._alloc_owned(size, self._device, None, self._client, None)
        if r is None:
            msg = _plugin._lib.last_error()
            if msg.startswith("CUDA out of memory"):
                raise _driver.CudaAPIError(_oom_code(), msg)
            raise GcpressureTorchError(f"gcpressure.numba: allocation of {size} bytes failed: {msg}")
        ptr, owner = r
        # The owner lives in self.allocations until the MemoryPointer dies
        # (its finalizer pops it: the block goes back) or reset() clears them.
        self.allocations[ptr] = owner
        fin = functools.partial(self.allocations.pop, ptr, None)
        return _driver.MemoryPointer(self.context, ctypes.c_void_p(ptr), size, finalizer=fin)

    def get_memory_info(self):
        if not hasattr(self, "_device"):
            self.initialize()
        live, _ = usage(self._device)
        hard = next((d["hard_limit"] for d in stats()["devices"] if d["device"] == self._device), 0)
        if not hard:  # nothing allocated on this device yet: the configured limit is not known per device
            free, total = _driver.driver.cuMemGetInfo()
            return _driver.MemoryInfo(free=free, total=total)
        return _driver.MemoryInfo(free=max(hard - live, 0), total=hard)

    @property
    def interface_version(self) -> int:
        return 1


# NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba (numba-cuda docs, "Environment variable").
_numba_memory_manager = GcpressureNumbaManager


_hooks: list = []  # (owner, name, original) to restore in uninstall()


def _handle(stream) -> int:
    """A Numba stream's CUstream as an int (0: the default stream)."""
    if stream is None:
        return 0
    h = getattr(stream, "handle", stream)
    h = getattr(h, "value", h)  # ctypes c_void_p (Numba's ctypes binding)
    return int(h or 0)


def synchronize(stream=None) -> None:
    """The host is about to wait for `stream` (a Numba stream, or None: the
    legacy default stream, which waits for every blocking stream): due
    collection work runs first, while the device still works, then it waits
    until the stream's queued work has completed. Not from a finalizer."""
    _plugin.synchronize_stream(_handle(stream) or None, _cuda.get_current_device().id)


def _hook(owner, name: str, make) -> None:
    orig = getattr(owner, name)
    wrapped = make(orig)
    wrapped.__wrapped__ = orig
    wrapped.__doc__ = orig.__doc__
    _hooks.append((owner, name, orig))
    setattr(owner, name, wrapped)


def _hint(stream) -> None:
    try:  # our hint first; its errors never break the caller's synchronize
        if _plugin._lib is not None:
            synchronize(stream)
    except Exception:  # noqa: BLE001
        pass


def install(soft_limit=None, hard_limit=None, policy: str | None = None, budget: float | None = None, *,
            lib: str | None = None, backend: str = "cuda_async", hook_synchronize: bool = True,
            **options) -> _plugin.Library:
    """Configures the library (arguments as in gcpressure.torch.configure();
    the first framework installed in a process sets them, later ones share its
    devices and policy) and makes GcpressureNumbaManager Numba's memory
    manager. Call it before Numba makes a context (its first CUDA use).
    hook_synchronize: numba.cuda.synchronize() and Stream.synchronize() give
    the policy's hint (synchronize()) first; uninstall() removes the hooks."""
    L = _plugin.ensure("numba", soft_limit, hard_limit, policy, budget, backend=backend, lib=lib, **options)
    _cuda.set_memory_manager(GcpressureNumbaManager)
    if hook_synchronize and not _hooks:
        _hook(_driver.Stream, "synchronize", lambda orig: lambda self: (_hint(self), orig(self))[1])
        _hook(_cuda, "synchronize", lambda orig: lambda: (_hint(None), orig())[1])
    return L


def uninstall() -> None:
    """Removes install()'s synchronize hooks. The memory manager stays
    (Numba has made its contexts' managers); blocks stay valid."""
    while _hooks:
        owner, name, orig = _hooks.pop()
        setattr(owner, name, orig)
