"""gcpressure.torch (also importable as gcpressure_torch): PyTorch's CUDA
memory, collected by device pressure.

    import gcpressure.torch as gcp          # or: import gcpressure_torch as gcp
    gcp.install(hard_limit="4GiB")          # before the first CUDA allocation
    ...                                     # ordinary PyTorch code
    print(gcp.stats())                      # collections by kind, GC seconds, peaks

PyTorch frees tensors by reference counting. A tensor held in a reference cycle
waits for CPython's cyclic collector, which counts objects, not bytes, so the
device fills up while it sleeps (PyTorch issue #50185). install() replaces
PyTorch's CUDA allocator (torch.cuda.memory.CUDAPluggableAllocator over
libgcpressure_torch.so) with gcpressure's stream-aware pool, whose pressure
policy asks CPython for a collection when device bytes justify one:
gc.collect(0) / gc.collect(1) for minor collections, gc.collect(2) for the
whole heap — before an allocation fails, within a GC time budget. The pool
and the policy are the ones gcpressure.cupy and gcpressure.numba use too
(Note [Frameworks share the devices] in examples/torch/torch_clients.cpp).

torch.cuda.memory_allocated() and friends do not work with pluggable
allocators; stats() gives this library's numbers instead.

synchronize() (and torch.cuda.synchronize, wrapped by install()) lets the
policy collect while the device still works before the host waits. CUDA
graph captures are served from graph pools (Note [Graph capture] in
torch_graphs.hpp); install() hooks CUDAGraph.capture_begin/capture_end so that
a graph's pool is released with the graph. uninstall() removes the hooks.

The library: see gcpressure._plugin (find_library). Threads and the GIL: see
Note [GIL and the collection lock] in torch_python.cpp.
"""
from __future__ import annotations

import ctypes

from . import _plugin
from ._plugin import (LIB_NAME, GcpressureTorchError, Library, _device, collect, configure, find_library,  # noqa: F401
                      iteration, quiet_moment, raw_stats, reset_peaks, set_limits, stats, stats_text, trim, usage)

__all__ = ["install", "uninstall", "configure", "stats", "raw_stats", "collect", "iteration", "quiet_moment",
           "synchronize", "usage", "set_limits", "reset_peaks", "trim", "find_library", "Library", "stats_text",
           "GcpressureTorchError"]

ALLOC_FN = "gcp_torch_alloc"
FREE_FN = "gcp_torch_free"


def __getattr__(name):
    # The process-wide state lives in gcpressure._plugin (shared with the
    # other frameworks); these names read it there, as they always could here.
    if name in ("_lib", "_config"):
        return getattr(_plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install(soft_limit=None, hard_limit=None, policy: str | None = None, budget: float | None = None, *,
            lib: str | None = None, hook_synchronize: bool = True, hook_graphs: bool = True,
            **options) -> Library:
    """Makes gcpressure PyTorch's CUDA allocator. Call it before the first
    CUDA allocation (PyTorch refuses to swap an allocator that has
    allocated). Arguments as in configure() (policy None: "pressure"); the
    backend is cuda_async. After gcpressure.cupy or gcpressure.numba
    installed it, PyTorch joins the same devices and policy (no settings then:
    Note [Frameworks share the devices]).
    hook_synchronize: torch.cuda.synchronize runs synchronize() first (due
    collection work while the device still works). hook_graphs:
    CUDAGraph.capture_begin/capture_end announce captures, so that each
    graph's memory is a pool of its own, released with the graph (Note [Graph
    capture] in torch_graphs.hpp; without it captures still work, their pools
    are never released). uninstall() removes both hooks."""
    import torch  # noqa: F401  (only here: configure() works without torch)
    import torch.cuda.memory as tcm

    if not torch.cuda.is_available():
        raise GcpressureTorchError("install: torch sees no CUDA device")
    L = _plugin.ensure("torch", soft_limit, hard_limit, policy, budget, backend="cuda_async", lib=lib, **options)
    alloc = tcm.CUDAPluggableAllocator(L.path, ALLOC_FN, FREE_FN)
    try:
        tcm.change_current_allocator(alloc)
    except RuntimeError as e:
        raise GcpressureTorchError(f"install: PyTorch refused the allocator ({e}); call install() before "
                                   "anything allocates CUDA memory") from e
    global _pluggable
    _pluggable = alloc  # keep it alive
    _hook_torch(torch, hook_synchronize, hook_graphs)
    return L


_pluggable = None
_hooks: list = []  # (owner, attribute name, original) to restore in uninstall()


def _stream_handle(stream, device: int):
    """A CUDA stream's handle for the library: None -> torch's current stream
    on `device` (the host backend: the default stream)."""
    if stream is None:
        if _plugin._config.get("backend") not in ("cuda_async", "cuda"):
            return None
        import torch
        return torch.cuda.current_stream(device).cuda_stream
    return getattr(stream, "cuda_stream", stream)


def synchronize(stream=None, device=None) -> None:
    """The host is about to wait for `stream` (default: torch's current
    stream): runs collection work that is due while the device still works,
    then blocks until the stream's queued work has completed (the policy
    learns the slack; Note [Collect in the device's time] in
    core/src/policy.cpp). Does nothing during a CUDA graph capture.
    Thread-safe; not from a __del__ (it may collect and block)."""
    dev = _device(device)
    _plugin.synchronize_stream(_stream_handle(stream, dev), dev)


def _set_hook(owner, name: str, value) -> None:
    _hooks.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def _hook_torch(torch, hook_synchronize: bool = True, hook_graphs: bool = True) -> None:
    """Installs the Python-level hooks on `torch` (install() calls it; tests
    pass a stand-in). Idempotent per process: uninstall() first to redo."""
    if _hooks:
        return
    if hook_synchronize:
        orig_sync = torch.cuda.synchronize

        def cuda_synchronize(device=None):
            # Our hint first (errors never break the caller's sync), then
            # PyTorch's own, device-wide synchronize.
            try:
                dev = torch.cuda.current_device() if device is None else _device(device)
                _plugin._lib.c.gcp_torch_synchronize(dev, torch.cuda.current_stream(dev).cuda_stream)
            except Exception:  # noqa: BLE001
                pass
            return orig_sync(device)

        cuda_synchronize.__wrapped__ = orig_sync
        cuda_synchronize.__doc__ = orig_sync.__doc__
        _set_hook(torch.cuda, "synchronize", cuda_synchronize)
    graph_cls = getattr(getattr(torch.cuda, "graphs", None), "CUDAGraph", None)
    if hook_graphs and graph_cls is not None:
        orig_begin, orig_end = graph_cls.capture_begin, graph_cls.capture_end

        def capture_begin(self, *args, **kwargs):
            orig_begin(self, *args, **kwargs)
            pool = kwargs.get("pool", args[0] if args else None)
            _announce_capture(torch, self, pool)

        def capture_end(self, *args, **kwargs):
            cap = getattr(self, "_gcp_capture", None)
            if cap is not None and _plugin._lib is not None:
                _plugin._lib.c.gcp_torch_capture_end(cap[0], cap[1])
            return orig_end(self, *args, **kwargs)

        _set_hook(graph_cls, "capture_begin", capture_begin)
        _set_hook(graph_cls, "capture_end", capture_end)


def _announce_capture(torch, graph, pool) -> None:
    """Tells the library which pool the capture just begun on the current
    stream allocates from, and releases that use when `graph` dies."""
    import weakref

    L = _plugin._lib
    if L is None:
        return
    dev = torch.cuda.current_device()
    handle = torch.cuda.current_stream(dev).cuda_stream
    hi, lo = (int(pool[0]), int(pool[1])) if pool is not None else (0, 0)
    out_hi, out_lo = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    if L.c.gcp_torch_capture_begin(dev, handle, hi, lo, ctypes.byref(out_hi), ctypes.byref(out_lo)) != 0:
        return  # not capturing after all: nothing to release
    graph._gcp_capture = (dev, handle)
    try:
        fin = weakref.finalize(graph, L.c.gcp_torch_graph_release, dev, out_hi.value, out_lo.value)
    except TypeError:
        return  # not weak-referenceable: the pool is never released (conservative)
    fin.atexit = False  # at exit the memory goes with the process: no cudaFree then


def uninstall() -> None:
    """Removes the hooks install() put on torch (torch.cuda.synchronize,
    CUDAGraph.capture_begin/capture_end). The allocator itself stays:
    PyTorch cannot swap an allocator that has allocated. Call it from one
    thread, not while install() runs."""
    while _hooks:
        owner, name, orig = _hooks.pop()
        setattr(owner, name, orig)
