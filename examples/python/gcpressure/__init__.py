"""gcpressure: device memory collected by device pressure, for Python.

One package, one native pool and policy per device whichever frameworks a
process uses (Note [Frameworks share the devices] in
examples/torch/torch_clients.cpp):

    import gcpressure.torch as gcp;  gcp.install(hard_limit="4GiB")   # PyTorch
    import gcpressure.cupy as gcp;   gcp.install(hard_limit="4GiB")   # CuPy
    import gcpressure.numba as gcp;  gcp.install(hard_limit="4GiB")   # Numba-CUDA
    # or NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba

Those three go through libgcpressure_torch.so (no Boehm GC; CPython's
collector built in). This module itself is the binding of the C API
(libgcpressure.so, gcpressure/gcpressure.h) for embedding gcpressure in a
Python program of its own: device buffers owned by Python objects, with
CPython's cyclic collector driven by device memory pressure (formerly
gcpressure_py, which still imports as a shim).

    import gcpressure as gp
    a = gp.Allocator(backend="host", hard_limit="64MiB")   # pressure policy, gc.collect as collector
    x = a.array((1024, 256))                                # float32, a DeviceArray
    x.ptr                                                   # the device pointer (int)

A DeviceArray's device block is released by its finalizer (__del__), which
only queues it (gcpressure_release_from_finalizer); refcounting frees it at
once, a reference cycle at the next gc.collect() — which the library asks
for when device bytes justify it. See collector.py, Note [GIL and collector
callbacks], for the threading rules.

libgcpressure.so is found through $GCPRESSURE_LIB (a file or a directory),
else this package's folder, else this checkout's newest
build*/gc_bridge/libgcpressure.so or build*/*/gc_bridge/libgcpressure.so
(build/release: scripts/test.sh's and demo.sh's), else an installed one; or pass `library=`
to Allocator. Importing this package loads no library.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import json
import math
import os
import weakref

from . import _capi
from ._capi import (BusyError, GcpressureError, InvalidArgument, MisuseError, OutOfDeviceMemory,
                    ShutdownError, UnsupportedError, find_library, load)
from .collector import CPythonCollector, python_gc_counts

__all__ = [
    "Allocator", "DeviceArray", "CPythonCollector", "GcpressureError", "InvalidArgument", "OutOfDeviceMemory",
    "MisuseError", "ShutdownError", "BusyError", "UnsupportedError", "find_library", "load", "python_gc_counts",
    "parse_size",
]

def parse_size(text, device_total: int = 0) -> int:
    """'64MiB', '1.5GiB', '64 MB', '1000' -> bytes, parsed by the C library
    (gcpressure_parse_size: all units binary, so '1GB' is 2**30 here as in
    every other entry point). A percentage ('80%') needs `device_total`."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    lib = load()
    out = ctypes.c_size_t()
    lib.check(lib.fast.gcpressure_parse_size(str(text).encode(), device_total, ctypes.byref(out)))
    return out.value


def _option_text(value) -> str:
    """An option's value as the options table reads it (True -> '1')."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class DeviceArray:
    """A block of device memory owned by this object. `ptr` is the device
    address (int; 0 once freed), `nbytes` its size. `node` is a free slot for
    the caller (e.g. an autograd-like graph node, which may point back here)."""

    __slots__ = ("_owner", "ptr", "nbytes", "shape", "itemsize", "stream", "node", "tag", "__weakref__")

    def __del__(self):
        p = self.ptr
        if p:
            self.ptr = 0
            self._owner._release(p, self.nbytes, self.stream)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def free(self) -> None:
        """Frees now (gcpressure_free; the explicit_free policy's way). Raises
        MisuseError on a double free."""
        p = self.ptr
        if not p:
            raise MisuseError(_capi.ERR_MISUSE, "DeviceArray.free: already freed")
        self.ptr = 0
        self._owner.free(p, self.nbytes, self.stream)

    def __repr__(self):
        return f"<DeviceArray shape={self.shape} nbytes={self.nbytes} ptr={self.ptr:#x}>"


_open_allocators: "weakref.WeakSet[Allocator]" = weakref.WeakSet()


class Allocator:
    """One device's gcpressure allocator, with CPython's collector attached.

    backend: "host" (simulated device in host memory: pointers are real host
    memory), "cuda", "cuda_async" or "auto". Limits are strings the library
    parses ("64MiB", "80%") or ints (bytes). policy: a name of
    the C API's gcpressure_policy_names(), e.g. "pressure". Options left as None
    come from the GCPRESSURE_* environment, else the library's defaults
    (backend: "host" unless GCPRESSURE_BACKEND is set). Every other option of
    gcpressure_option_names() is a keyword too (pool=False, verbose=True,
    async_release_threshold="64MiB", host_shared=path, devices="0,1"); all are
    parsed by the C library's options table, as its GCPRESSURE_* variables
    are, with the same error for a bad value. collector: a
    CPythonCollector, True (a new one with `minor_generation`), or None/False: no
    collector registered at all (the library's hook is off: only the pool
    side of the reclaim ladder runs — the "plain PyTorch" baseline).
    """

    def __init__(self, backend=None, hard_limit=None, soft_limit=None, policy=None, *, device=None,
                 host_capacity=None, gc_budget=None, every_n=None, read_env=None, collector=True,
                 minor_generation=1, library=None, **options):
        # Note [Options and the environment]: only the options given are set;
        # gcpressure_create fills the rest from the GCPRESSURE_* environment,
        # then from its defaults (explicit options override the environment).
        # One exception: without GCPRESSURE_BACKEND the backend is "host" here
        # (the library's default is "auto"), so that a test never lands on a GPU.
        self._lib = load(library)
        if backend is None and not os.environ.get("GCPRESSURE_BACKEND"):
            backend = "host"
        o = _capi.Options()
        self._lib.fast.gcpressure_options_init(ctypes.byref(o))
        # Every option through the C library's options table
        # (gcpressure_options_set): one parser and one message per bad value
        # at every entry point.
        given = {"backend": backend, "hard_limit": hard_limit, "soft_limit": soft_limit, "policy": policy,
                 "device": device, "host_capacity": host_capacity, "gc_budget": gc_budget, "every_n": every_n}
        given.update(options)
        for name, value in given.items():
            if value is not None:
                self._lib.check(self._lib.fast.gcpressure_options_set(
                    ctypes.byref(o), name.encode(), _option_text(value).encode()))
        if read_env is not None:
            o.read_env = 1 if read_env else 0
        o.collector = _capi.COLLECTOR_CALLBACKS
        h = ctypes.c_void_p()
        self._h = None
        self._lib.check(self._lib.lib.gcpressure_create(ctypes.byref(o), ctypes.byref(h)))
        self._h = h.value
        self.backend = self.stats()["backend"]
        self.policy = policy
        # Bound once so that __del__ at interpreter shutdown needs no module globals.
        self._rel = self._lib.fast.gcpressure_release_from_finalizer
        self.release_errors = 0
        self.oom_retries = 2    # Note [Retrying an OOM under contention]
        self.oom_retried = 0
        self._entries = 0       # gcpressure_alloc calls begun, all threads
        self.collector = None
        if collector is True:
            collector = CPythonCollector(minor_generation=minor_generation)
        elif collector is False:
            collector = None
        if collector is not None:
            try:
                collector.attach(self._lib, self._h)
            except BaseException:
                self.close()
                raise
            self.collector = collector
        self.policy = self.stats()["gc"]["policy"] or policy  # the one the environment may have chosen
        _open_allocators.add(self)

    # --- allocation -----------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The gcpressure_allocator* (int), for other bindings of the same library."""
        if self._h is None:
            raise ShutdownError(_capi.ERR_SHUTDOWN, "gcpressure_py: allocator closed")
        return self._h

    def alloc(self, nbytes: int, stream=None) -> int:
        """Raw device memory; may run collections first. Raises OutOfDeviceMemory.

        Note [Retrying an OOM under contention]
        While one thread runs a collection (the reclaim ladder's included), the
        library lets other threads allocate without collecting, and a thread
        waiting for the GIL inside a collector callback can take a while. So
        another thread can use up what this thread's ladder just freed before
        its retry, and the ladder reports out of memory although the live set
        fits. When other threads entered gcpressure_alloc on this allocator
        during a failed call, the call is repeated (at most `oom_retries`
        times); a thread allocating alone gets the error at once."""
        h = self.handle
        out = ctypes.c_void_p()
        retries = 0
        while True:
            self._entries += 1
            e0 = self._entries
            st = self._lib.lib.gcpressure_alloc(h, nbytes, stream, ctypes.byref(out))
            if st == _capi.OK:
                return out.value
            err = self._lib.error(st, "gcpressure_alloc")
            if st != _capi.ERR_OOM or self._entries == e0 or retries >= self.oom_retries:
                raise err
            retries += 1
            self.oom_retried += 1

    def array(self, shape, itemsize: int = 4, stream=None) -> DeviceArray:
        """A DeviceArray of prod(shape) * itemsize bytes (float32 by default)."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        n = math.prod(shape) * itemsize
        p = self.alloc(n, stream)
        a = DeviceArray.__new__(DeviceArray)
        a._owner = self
        a.ptr = p
        a.nbytes = n
        a.shape = shape
        a.itemsize = itemsize
        a.stream = stream
        a.node = None
        a.tag = 0
        return a

    def free(self, ptr: int, nbytes: int, stream=None) -> None:
        """gcpressure_free: checked (MisuseError on double/foreign free)."""
        self._lib.check(self._lib.lib.gcpressure_free(self.handle, ptr, nbytes, stream), "gcpressure_free")

    def _release(self, ptr, nbytes, stream) -> None:
        # From finalizers: never raises. After close() the handle is a
        # tombstone and the library answers SHUTDOWN (the block went with it).
        h = self._h
        if h is None:
            return
        st = self._rel(h, ptr, nbytes, stream)
        if st and st != _capi.ERR_SHUTDOWN:
            self.release_errors += 1

    # --- policy hints and maintenance ------------------------------------------------------

    def iteration(self) -> None:
        self._lib.check(self._lib.lib.gcpressure_iteration(self.handle), "gcpressure_iteration")

    def quiet_moment(self, will_block: bool = False) -> None:
        """A hint: the host has nothing urgent to do. will_block: it is about to
        wait for the device (when that wait cannot go through synchronize)."""
        self._lib.check(self._lib.lib.gcpressure_quiet_moment_ex(self.handle, 1 if will_block else 0),
                        "gcpressure_quiet_moment_ex")

    def synchronize(self, stream=None) -> None:
        """Waits for the work queued on `stream` (None: the default stream; an
        int: a cudaStream_t) and lets the policy collect while it runs
        (gcpressure_synchronize). Not from a finalizer (BusyError inside a
        collection)."""
        self._lib.check(self._lib.lib.gcpressure_synchronize(self.handle, stream), "gcpressure_synchronize")

    def collect(self, full: bool = False) -> None:
        self._lib.check(self._lib.lib.gcpressure_collect(self.handle, 1 if full else 0), "gcpressure_collect")

    def drain(self) -> None:
        self._lib.check(self._lib.lib.gcpressure_drain(self.handle), "gcpressure_drain")

    def trim(self) -> None:
        self._lib.check(self._lib.lib.gcpressure_trim(self.handle), "gcpressure_trim")

    def set_limits(self, soft=0, hard=0) -> None:
        """Limits: bytes (0 leaves one unchanged) or sizes as the constructor
        reads them ("64MiB", "64 MB", "50%" of this device), so they mean what
        the PyTorch plug-in's set_limits makes of them."""
        total = self.stats()["device_total"]
        self._lib.check(self._lib.fast.gcpressure_set_limits(self.handle, parse_size(soft, total),
                                                             parse_size(hard, total)))

    def usage(self) -> tuple[int, int]:
        """(live, reserved) device bytes."""
        live, reserved = ctypes.c_size_t(), ctypes.c_size_t()
        self._lib.check(self._lib.fast.gcpressure_usage(self.handle, ctypes.byref(live), ctypes.byref(reserved)),
                        "gcpressure_usage")
        return live.value, reserved.value

    def stats(self) -> dict:
        """The library's stats JSON, parsed."""
        need = ctypes.c_size_t()
        cap = 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = self._lib.fast.gcpressure_stats_json(self.handle, buf, cap, ctypes.byref(need))
            if st == _capi.ERR_TRUNCATED:
                cap = need.value
                continue
            self._lib.check(st, "gcpressure_stats_json")
            return json.loads(buf.value.decode())

    # --- lifetime -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self, collect: bool = False) -> None:
        """Destroys the allocator. collect: run gc.collect() first, so that
        arrays that are garbage in cycles give their blocks back. Blocks still
        live are reported by the library on stderr (and must not be touched
        afterwards). Later calls raise ShutdownError; finalizers of arrays
        still alive do nothing. Not from inside a collection."""
        h = self._h
        if h is None:
            return
        if collect:
            gc.collect()
            self._lib.check(self._lib.lib.gcpressure_drain(h), "gcpressure_drain")
        self._lib.check(self._lib.lib.gcpressure_destroy(h), "gcpressure_destroy")
        self._h = None
        _open_allocators.discard(self)
        if self.collector is not None:
            self.collector.detached()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(collect=True)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # e.g. BUSY when dropped inside a collection: the handle leaks, never dangles


@atexit.register
def _close_all() -> None:
    # Before the interpreter goes away: no collector callback may run after
    # this. Collect first so that arrays in cycles give their blocks back.
    if not list(_open_allocators):
        return
    gc.collect()
    for a in list(_open_allocators):
        try:
            a.close(collect=False)
        except Exception:
            pass
