"""gcpressure.cupy: CuPy's device memory through gcpressure's pool, collected
by device pressure.

    import gcpressure.cupy
    gcpressure.cupy.install(hard_limit="4GiB")    # then cupy.cuda.get_allocator() is gcpressure.cupy.malloc

CuPy's MemoryPool (cupy/cuda/memory.pyx, _try_malloc) raises OutOfMemoryError
at its set_limit without any collection, and without a limit calls
gc.collect() only after cudaMalloc itself has failed: an array held in a
reference cycle waits for CPython's cyclic collector, which counts objects,
not bytes. malloc() allocates from the one stream-aware pool per device this
package keeps for every framework (Note [Frameworks share the devices] in
examples/torch/torch_clients.cpp), whose pressure policy asks CPython for a
collection when device bytes justify one.

How memory is handed over (as RMM's rmm_cupy_allocator does): a
cupy.cuda.MemoryPointer over a cupy.cuda.UnownedMemory whose `owner` is the
library's owner object (a capsule). CuPy keeps the owner exactly as long as
the memory; when CuPy drops it, the block goes back to the pool on the stream
it was allocated on (CuPy's current stream at the allocation, kept alive by
the owner until then), stream-ordered: reused on another stream only after
the work queued before the free completed. No Python code runs at the free.

Out of memory: cupy.cuda.memory.OutOfMemoryError (CuPy's own type, a
MemoryError), whose message is the library's whole report (what was asked,
what is live and cached, the limits, what was tried).

synchronize(stream=None): the policy's hint that the host is about to wait
(collection work that is due runs while the device still works);
install(hook_synchronize=True) makes cupy.cuda.Stream.synchronize (and
ExternalStream's) give it first. cupy.cuda.Device.synchronize is a Cython
method and cannot be wrapped: call synchronize() there.

Thread-safe: CuPy may allocate from any thread (the collection runs on the
allocating thread, with the GIL, Note [GIL and the collection lock]).
"""
from __future__ import annotations

from . import _plugin
from ._plugin import (GcpressureTorchError, collect, iteration, quiet_moment, raw_stats, reset_peaks,  # noqa: F401
                      set_limits, stats, stats_text, trim, usage)

__all__ = ["install", "uninstall", "malloc", "malloc_py", "synchronize", "stats", "raw_stats", "collect", "iteration",
           "quiet_moment", "usage", "set_limits", "reset_peaks", "trim", "stats_text"]

# Bound at install() (the fast path reads no module attributes of cupy).
_cupy = None
_alloc_owned = None
_client = -1
_get_stream = None
_get_device_id = None
_Unowned = None
_Pointer = None
_previous = None  # the allocator install() replaced
_hooks: list = []


malloc = None  # the C version of malloc_py, made by bind() (Note [A C allocator for CuPy])


def bind(cupy, lib: _plugin.Library) -> None:
    """Binds malloc_py() and malloc() to `cupy` (the real module, or a
    stand-in in the CPU tests) and to the loaded library; install() calls it."""
    global _cupy, _alloc_owned, _client, _get_stream, _get_device_id, _Unowned, _Pointer, malloc
    _cupy = cupy
    _alloc_owned = lib.alloc_owned
    _client = lib.client_id("cupy")
    _get_stream = cupy.cuda.get_current_stream
    _get_device_id = cupy.cuda.device.get_device_id
    _Unowned = cupy.cuda.UnownedMemory
    _Pointer = cupy.cuda.MemoryPointer
    fn = lib.py.gcp_torch_cupy_allocator(_get_device_id, _get_stream, _Unowned, _Pointer, _out_of_memory, _client)
    if fn is None:
        raise GcpressureTorchError(f"gcpressure.cupy: {lib.last_error()}")
    malloc = fn


def malloc_py(nbytes: int):
    """The allocator for cupy.cuda.set_allocator: `nbytes` of device memory
    on CuPy's current device, ordered on CuPy's current stream, as a
    MemoryPointer. May collect. Raises cupy.cuda.memory.OutOfMemoryError.
    install() sets `malloc`, the same steps as one C function (Note [A C
    allocator for CuPy] in torch_clients.cpp; this is their reference, and
    install(native=False) uses it)."""
    dev = _get_device_id()
    if nbytes == 0:
        return _Pointer(_Unowned(0, 0, None, dev), 0)
    stream = _get_stream(dev)  # the device given: CuPy would ask the runtime for it again
    r = _alloc_owned(nbytes, dev, stream.ptr, _client, stream)
    if r is None:
        raise _out_of_memory(nbytes, dev)
    return _Pointer(_Unowned(r[0], nbytes, r[1], dev), 0)


def _out_of_memory(nbytes: int, dev: int):
    msg = _plugin._lib.last_error()
    if not msg.startswith("CUDA out of memory"):
        return GcpressureTorchError(f"gcpressure.cupy: allocation of {nbytes} bytes failed: {msg}")
    live, _ = usage(dev)
    hard = next((d["hard_limit"] for d in stats()["devices"] if d["device"] == dev), 0)
    e = _cupy.cuda.memory.OutOfMemoryError(nbytes, live, hard)
    e.args = (msg,)  # CuPy's type, the library's whole report
    return e


def synchronize(stream=None) -> None:
    """The host is about to wait for `stream` (default: CuPy's current
    stream): due collection work runs first, while the device still works,
    then it waits until the stream's queued work has completed. Not from a
    __del__ (it may collect and block)."""
    s = stream if stream is not None else _get_stream()
    _plugin.synchronize_stream(getattr(s, "ptr", s) or None, _get_device_id())


def install(soft_limit=None, hard_limit=None, policy: str | None = None, budget: float | None = None, *,
            lib: str | None = None, hook_synchronize: bool = True, cupy=None, backend: str = "cuda_async",
            native: bool = True, **options) -> _plugin.Library:
    """Makes malloc() CuPy's allocator (cupy.cuda.set_allocator). Arguments
    as in gcpressure.torch.configure(); the first framework installed in a
    process sets them, later ones share its devices and policy (then pass
    none). Call it before CuPy allocates: memory CuPy's own pool already holds
    stays there (uninstall() restores that pool). `cupy`/`backend`: for the
    CPU tests (a stand-in module, the host backend). native=False: CuPy gets
    malloc_py (the Python reference) instead of malloc."""
    if cupy is None:
        import cupy
    L = _plugin.ensure("cupy", soft_limit, hard_limit, policy, budget, backend=backend, lib=lib, **options)
    bind(cupy, L)
    global _previous
    _previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(malloc if native else malloc_py)
    if hook_synchronize and not _hooks:
        base = getattr(cupy.cuda.stream, "_BaseStream", None) or cupy.cuda.Stream
        orig = base.synchronize

        def stream_synchronize(self):
            try:  # our hint first; its errors never break the caller's sync
                _plugin.synchronize_stream(self.ptr or None, _get_device_id())
            except Exception:  # noqa: BLE001
                pass
            return orig(self)

        stream_synchronize.__wrapped__ = orig
        _hooks.append((base, "synchronize", orig))
        base.synchronize = stream_synchronize
    return L


def uninstall() -> None:
    """Gives CuPy back the allocator install() replaced and removes the
    synchronize hook. Memory malloc() handed out stays valid (and returns to
    gcpressure's pool when CuPy drops it)."""
    global _previous
    if _cupy is not None and _previous is not None:
        _cupy.cuda.set_allocator(_previous)
        _previous = None
    while _hooks:
        owner, name, orig = _hooks.pop()
        setattr(owner, name, orig)
