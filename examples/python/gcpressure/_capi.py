"""ctypes binding of gcpressure/gcpressure.h (the library's stable C API).

Two handles on the same libgcpressure.so:

* ``lib`` (ctypes.CDLL) releases the GIL for the duration of each call. Every
  call that may run a collection or wait goes through it (create, destroy,
  set_collector, alloc, free, collect, iteration, quiet_moment(_ex),
  synchronize, drain, trim):
  while the library runs the collector callbacks, the GIL is free, and the
  callbacks (CFUNCTYPE) take it back with PyGILState_Ensure.
* ``fast`` (ctypes.PyDLL) keeps the GIL. Only for calls that never collect,
  never wait on a lock a collection holds, and return at once
  (release_from_finalizer is a lock-free push; usage and set_limits are
  atomics; enter/leave/in_collection touch only a thread-local depth;
  stats_json and last_error take only short internal locks that are
  never held across a collector callback). Keeping the GIL there means a
  finalizer running inside gc.collect() does not hand the GIL to another
  thread in the middle of the collection.

See Note [GIL and collector callbacks] in collector.py.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_double, c_int, c_size_t,
                    c_void_p)

# --- enums (gcpressure.h) ------------------------------------------------------

OK = 0
ERR_INVALID = 1
ERR_OOM = 2
ERR_MISUSE = 3
ERR_SHUTDOWN = 4
ERR_CUDA = 5
ERR_UNSUPPORTED = 6
ERR_BUSY = 7
ERR_TRUNCATED = 8
ERR_INTERNAL = 9

BACKENDS = {"auto": 0, "host": 1, "cuda": 2, "cuda_async": 3}
COLLECTOR_CALLBACKS = 0
COLLECTOR_BOEHM = 1


class GcpressureError(RuntimeError):
    """A gcpressure call failed. ``status`` is the gcpressure_status code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class InvalidArgument(GcpressureError, ValueError):
    pass


class OutOfDeviceMemory(GcpressureError, MemoryError):
    """GCPRESSURE_ERR_OOM: out of device memory after the reclaim ladder."""


class MisuseError(GcpressureError):
    """Double free, foreign pointer, size mismatch."""


class ShutdownError(GcpressureError):
    """The allocator was destroyed."""


class BusyError(GcpressureError):
    """Called from inside a collection where that is not allowed."""


class UnsupportedError(GcpressureError):
    pass


_ERRORS = {
    ERR_INVALID: InvalidArgument,
    ERR_OOM: OutOfDeviceMemory,
    ERR_MISUSE: MisuseError,
    ERR_SHUTDOWN: ShutdownError,
    ERR_BUSY: BusyError,
    ERR_UNSUPPORTED: UnsupportedError,
}

# --- structs -------------------------------------------------------------------


class Options(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("backend", c_int),
        ("device", c_int),
        ("host_capacity", c_size_t),
        ("soft_limit", c_char_p),
        ("hard_limit", c_char_p),
        ("policy", c_char_p),
        ("gc_budget", c_double),
        ("every_n", c_int),
        ("read_env", c_int),
        ("collector", c_int),
        ("devices", c_char_p),  # API version 3: "0,1" (None: GCPRESSURE_DEVICES, else device)
        # API version 5 (set through gcpressure_options_set):
        ("host_shared", c_char_p),
        ("pool", c_int),
        ("async_release_threshold", c_size_t),
        ("verbose", c_int),
    ]


VOID_CB = CFUNCTYPE(None, c_void_p)
COUNT_CB = CFUNCTYPE(c_size_t, c_void_p)
STEP_CB = CFUNCTYPE(c_int, c_void_p, c_double)
OWN_CB = CFUNCTYPE(None, c_void_p, POINTER(ctypes.c_uint64), POINTER(ctypes.c_uint64), POINTER(c_double),
                   POINTER(c_int))


class CollectorCallbacks(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("context", c_void_p),
        ("minor", VOID_CB),
        ("full", VOID_CB),
        ("run_finalizers", COUNT_CB),
        ("start_full", VOID_CB),
        ("step_full", STEP_CB),
        ("heap_bytes", COUNT_CB),
        ("minor_is_full", ctypes.c_int),
        ("own_collections", OWN_CB),  # API version 2
    ]


# --- finding and loading the library ---------------------------------------------

ENV_VAR = "GCPRESSURE_LIB"
_HERE = os.path.dirname(os.path.abspath(__file__))
# gcpressure -> python -> examples -> repository root
REPO_ROOT = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))


def candidate_paths() -> list[str]:
    """Where find_library() looks, in order."""
    out = []
    env = os.environ.get(ENV_VAR)
    if env:
        out.append(os.path.join(env, "libgcpressure.so") if os.path.isdir(env) else env)
    # Bundled by the wheel (gcp_build_backend.py builds it where Boehm GC is found).
    bundled = os.path.join(_HERE, "libgcpressure.so")
    if os.path.exists(bundled):
        out.append(bundled)
    # The build trees of this checkout, newest first: build*/gc_bridge (a
    # build folder of one's own) and build*/*/gc_bridge (scripts/test.sh and
    # demo.sh build into build/release, build/asan, ...).
    found = glob.glob(os.path.join(REPO_ROOT, "build*", "gc_bridge", "libgcpressure.so"))
    found += glob.glob(os.path.join(REPO_ROOT, "build*", "*", "gc_bridge", "libgcpressure.so"))
    found.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    out.extend(found)
    sys_lib = ctypes.util.find_library("gcpressure")
    if sys_lib:
        out.append(sys_lib)
    return out


def find_library(path: str | None = None) -> str:
    """The libgcpressure.so to load: `path`, else $GCPRESSURE_LIB (a file or a
    directory), else the newest build*/gc_bridge/libgcpressure.so or
    build*/*/gc_bridge/libgcpressure.so of this checkout, else an installed one."""
    if path:
        return os.path.join(path, "libgcpressure.so") if os.path.isdir(path) else path
    cands = candidate_paths()
    for c in cands:
        if os.sep not in c or os.path.exists(c):
            return c
    raise OSError(
        "gcpressure: libgcpressure.so not found. Build it (cmake --build build/release --target gcpressure_c, "
        f"found there) or set {ENV_VAR}=BUILD/gc_bridge/libgcpressure.so; looked in: "
        f"{cands or REPO_ROOT + '/build*/gc_bridge, build*/*/gc_bridge and the system library path (nothing there)'}"
    )


class Library:
    """The loaded library: `lib` (releases the GIL) and `fast` (keeps it)."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.fast = ctypes.PyDLL(path)
        A = c_void_p  # opaque handles
        for dll in (self.lib, self.fast):
            dll.gcpressure_options_init.argtypes = [POINTER(Options)]
            dll.gcpressure_options_init.restype = None
            dll.gcpressure_collector_callbacks_init.argtypes = [POINTER(CollectorCallbacks)]
            dll.gcpressure_collector_callbacks_init.restype = None
            dll.gcpressure_last_error.argtypes = []
            dll.gcpressure_last_error.restype = c_char_p
            dll.gcpressure_status_string.argtypes = [c_int]
            dll.gcpressure_status_string.restype = c_char_p
            dll.gcpressure_version.argtypes = []
            dll.gcpressure_version.restype = c_char_p
            dll.gcpressure_create.argtypes = [POINTER(Options), POINTER(c_void_p)]
            dll.gcpressure_destroy.argtypes = [A]
            dll.gcpressure_set_collector.argtypes = [A, POINTER(CollectorCallbacks)]
            dll.gcpressure_alloc.argtypes = [A, c_size_t, c_void_p, POINTER(c_void_p)]
            dll.gcpressure_free.argtypes = [A, c_void_p, c_size_t, c_void_p]
            dll.gcpressure_release_from_finalizer.argtypes = [A, c_void_p, c_size_t, c_void_p]
            for name in ("quiet_moment", "iteration", "drain", "trim"):
                getattr(dll, "gcpressure_" + name).argtypes = [A]
            dll.gcpressure_collect.argtypes = [A, c_int]
            dll.gcpressure_quiet_moment_ex.argtypes = [A, c_int]
            dll.gcpressure_synchronize.argtypes = [A, c_void_p]
            dll.gcpressure_set_limits.argtypes = [A, c_size_t, c_size_t]
            dll.gcpressure_usage.argtypes = [A, POINTER(c_size_t), POINTER(c_size_t)]
            dll.gcpressure_stats_json.argtypes = [A, c_char_p, c_size_t, POINTER(c_size_t)]
            dll.gcpressure_options_set.argtypes = [POINTER(Options), c_char_p, c_char_p]
            dll.gcpressure_parse_size.argtypes = [c_char_p, c_size_t, POINTER(c_size_t)]
            dll.gcpressure_option_names.argtypes = []
            dll.gcpressure_option_names.restype = POINTER(c_char_p)
            for name in ("enter_collection", "leave_collection", "in_collection"):
                getattr(dll, "gcpressure_" + name).argtypes = []
            for name in ("create", "destroy", "set_collector", "alloc", "free", "release_from_finalizer",
                         "quiet_moment", "quiet_moment_ex", "synchronize", "iteration", "collect", "drain",
                         "trim", "set_limits", "usage", "stats_json", "enter_collection", "leave_collection",
                         "in_collection", "options_set", "parse_size"):
                getattr(dll, "gcpressure_" + name).restype = c_int
        # ABI check: the structs above must be the C ones.
        o = Options()
        self.fast.gcpressure_options_init(byref(o))
        if o.struct_size != ctypes.sizeof(Options):
            raise OSError(f"gcpressure_py: {path}: gcpressure_options is {o.struct_size} bytes, "
                          f"the binding's is {ctypes.sizeof(Options)}; rebuild or update the binding")
        c = CollectorCallbacks()
        self.fast.gcpressure_collector_callbacks_init(byref(c))
        if c.struct_size != ctypes.sizeof(CollectorCallbacks):
            raise OSError(f"gcpressure_py: {path}: gcpressure_collector_callbacks is {c.struct_size} bytes, "
                          f"the binding's is {ctypes.sizeof(CollectorCallbacks)}")
        self.version = self.fast.gcpressure_version().decode()
        names = self.fast.gcpressure_option_names()
        self.option_names = []
        while names[len(self.option_names)]:
            self.option_names.append(names[len(self.option_names)].decode())

    def error(self, status: int, what: str = "") -> GcpressureError:
        """The exception for `status`, with this thread's last message. Call
        right after the failing call, on the same thread."""
        msg = (self.fast.gcpressure_last_error() or b"").decode(errors="replace")
        if not msg:
            msg = self.fast.gcpressure_status_string(status).decode()
        if what:
            msg = f"{what}: {msg}"
        return _ERRORS.get(status, GcpressureError)(status, msg)

    def check(self, status: int, what: str = "") -> None:
        if status != OK:
            raise self.error(status, what)


_loaded: Library | None = None


def load(path: str | None = None) -> Library:
    """Loads the library once per process (later calls return the same one;
    a different explicit `path` after the first load is an error)."""
    global _loaded
    if _loaded is None:
        _loaded = Library(find_library(path))
    elif path and os.path.realpath(find_library(path)) != os.path.realpath(_loaded.path):
        raise OSError(f"gcpressure_py: {_loaded.path} is already loaded; cannot also load {path}")
    return _loaded
