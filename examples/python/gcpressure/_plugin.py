"""gcpressure._plugin: libgcpressure_torch.so, the native library every
framework adaptor of this package allocates through (gcpressure.torch,
gcpressure.cupy, gcpressure.numba): one pool per device and one pressure
policy per process, whose collector is CPython's (Note [Frameworks share the
devices] in examples/torch/torch_clients.cpp). The functions here are the
ones gcpressure.torch has always documented (configure, stats, collect, ...);
they act on the one policy whichever framework installed it.

The library is found through `lib=`, $GCPRESSURE_TORCH_LIB (a file or a
directory), this package's folder (where `pip install ./examples/python` puts
it), or this checkout's newest build*/examples/torch/libgcpressure_torch.so.

Threads and the GIL: see Note [GIL and the collection lock] in
torch_python.cpp. Calls that may collect (collect, iteration, quiet_moment,
trim, synchronize) go through ctypes.CDLL, which releases the GIL; attach,
shutdown and alloc_owned go through ctypes.PyDLL (they need it; alloc_owned
is the library's builtin where it has one, called with the GIL as well);
stats, usage, limits never collect.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import glob
import json
import os
import threading

import sys

__all__ = ["configure", "stats", "raw_stats", "collect", "iteration", "quiet_moment", "usage", "set_limits",
           "reset_peaks", "trim", "find_library", "Library", "stats_text", "GcpressureTorchError", "LIB_NAME"]

LIB_NAME = "libgcpressure_torch.so"
ALLOC_FN = "gcp_torch_alloc"
FREE_FN = "gcp_torch_free"


class GcpressureTorchError(RuntimeError):
    pass


def find_library(path: str | None = None) -> str:
    """The path of libgcpressure_torch.so (see the module docstring)."""
    cands = []
    for p in (path, os.environ.get("GCPRESSURE_TORCH_LIB")):
        if p:
            cands.append(os.path.join(p, LIB_NAME) if os.path.isdir(p) else p)
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, LIB_NAME))
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # examples/python/gcpressure -> repo
    built = glob.glob(os.path.join(root, "build*", "examples", "torch", LIB_NAME))
    built += glob.glob(os.path.join(root, "build*", "*", "examples", "torch", LIB_NAME))  # build/release
    cands.extend(sorted(built, key=os.path.getmtime, reverse=True))
    for c in cands:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise GcpressureTorchError(f"{LIB_NAME} not found (tried {cands}); build the gcpressure_torch target "
                               "or set GCPRESSURE_TORCH_LIB")


def _size(v):
    """A size or option value as the library's parser reads it: bytes or text."""
    if v is None:
        return None
    if isinstance(v, bool):
        return b"1" if v else b"0"
    return str(v).encode()


def _limit(v):
    """set_limits' value: None or 0 (int) leave the limit as it is."""
    return None if v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 0) else _size(v)


class Library:
    """The loaded library: `c` calls release the GIL (ctypes.CDLL), `py`
    calls keep it (ctypes.PyDLL); both name the same loaded object."""

    def __init__(self, path: str | None = None):
        self.path = find_library(path)
        self.c = ctypes.CDLL(self.path)
        self.py = ctypes.PyDLL(self.path)
        for lib in (self.c, self.py):
            for fn in ("gcp_torch_alloc", "gcp_torch_alloc_nothrow"):
                getattr(lib, fn).restype = ctypes.c_void_p
                getattr(lib, fn).argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.gcp_torch_free.restype = None
            lib.gcp_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.gcp_torch_init.restype = ctypes.c_int
            lib.gcp_torch_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_double]
            lib.gcp_torch_set_option.restype = ctypes.c_int
            lib.gcp_torch_set_option.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            lib.gcp_torch_attach_python.restype = ctypes.c_int
            lib.gcp_torch_attach_python.argtypes = [ctypes.c_int]
            lib.gcp_torch_python_shutdown.restype = None
            lib.gcp_torch_python_shutdown.argtypes = []
            for fn in ("gcp_torch_iteration", "gcp_torch_quiet_moment", "gcp_torch_trim", "gcp_torch_reset_peaks"):
                getattr(lib, fn).restype = ctypes.c_int
                getattr(lib, fn).argtypes = [ctypes.c_int]
            lib.gcp_torch_collect.restype = ctypes.c_int
            lib.gcp_torch_collect.argtypes = [ctypes.c_int, ctypes.c_int]
            lib.gcp_torch_set_limits.restype = ctypes.c_int
            lib.gcp_torch_set_limits.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
            lib.gcp_torch_set_limits_text.restype = ctypes.c_int
            lib.gcp_torch_set_limits_text.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]
            lib.gcp_torch_usage.restype = ctypes.c_int
            lib.gcp_torch_usage.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
            lib.gcp_torch_stats_json.restype = ctypes.c_size_t
            lib.gcp_torch_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            lib.gcp_torch_last_error.restype = ctypes.c_char_p
            lib.gcp_torch_last_error.argtypes = []
            lib.gcp_torch_synchronize.restype = ctypes.c_int
            lib.gcp_torch_synchronize.argtypes = [ctypes.c_int, ctypes.c_void_p]
            u64, pu64 = ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ulonglong)
            lib.gcp_torch_capture_begin.restype = ctypes.c_int
            lib.gcp_torch_capture_begin.argtypes = [ctypes.c_int, ctypes.c_void_p, u64, u64, pu64, pu64]
            lib.gcp_torch_capture_end.restype = ctypes.c_int
            lib.gcp_torch_capture_end.argtypes = [ctypes.c_int, ctypes.c_void_p]
            lib.gcp_torch_graph_release.restype = ctypes.c_int
            lib.gcp_torch_graph_release.argtypes = [ctypes.c_int, u64, u64]
            lib.gcp_torch_test_capture.restype = ctypes.c_int
            lib.gcp_torch_test_capture.argtypes = [ctypes.c_int, ctypes.c_void_p, u64]
            lib.gcp_torch_test_host_stream.restype = ctypes.c_void_p
            lib.gcp_torch_test_host_stream.argtypes = []
            lib.gcp_torch_selftest_native.restype = ctypes.c_long
            lib.gcp_torch_selftest_native.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                                                      ctypes.c_int]
            lib.gcp_torch_client_id.restype = ctypes.c_int
            lib.gcp_torch_client_id.argtypes = [ctypes.c_char_p]
        # Only with the GIL (it makes Python objects): PyDLL. Returns
        # (pointer, owner) or None (Note [Frameworks share the devices]).
        self.py.gcp_torch_alloc_owned.restype = ctypes.py_object
        self.py.gcp_torch_alloc_owned.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                  ctypes.py_object]
        self.alloc_owned = self.py.gcp_torch_alloc_owned
        # The same function as a builtin (no per-call ctypes conversion: Note
        # [alloc_owned without ctypes] in torch_clients.cpp), where the library has it.
        if hasattr(self.py, "gcp_torch_alloc_owned_builtin"):
            self.py.gcp_torch_alloc_owned_builtin.restype = ctypes.py_object
            self.py.gcp_torch_alloc_owned_builtin.argtypes = []
            fn = self.py.gcp_torch_alloc_owned_builtin()
            if fn is not None:
                self.alloc_owned = fn
        self.py.gcp_torch_cupy_allocator.restype = ctypes.py_object
        self.py.gcp_torch_cupy_allocator.argtypes = [ctypes.py_object] * 5 + [ctypes.c_int]

    def client_id(self, name: str) -> int:
        """The library's index of framework `name` ("torch", "cupy", "numba", "python")."""
        i = self.py.gcp_torch_client_id(name.encode())
        if i < 0:
            raise GcpressureTorchError(f"the library knows no framework {name!r}")
        return i

    def last_error(self) -> str:
        msg = self.py.gcp_torch_last_error()
        return msg.decode(errors="replace") if msg else "failed"

    def check(self, rc: int, what: str, lib=None) -> None:
        if rc != 0:
            # The message is thread-local: read it through the same kind of call.
            # The library's messages name their option or entry point already;
            # `what` only stands in for a missing one (never "x: x: ...").
            msg = (lib or self.py).gcp_torch_last_error()
            raise GcpressureTorchError(msg.decode(errors="replace") if msg else f"{what}: failed")

    def stats_json(self) -> str:
        n = self.py.gcp_torch_stats_json(None, 0)
        while True:
            buf = ctypes.create_string_buffer(n + 256)
            m = self.py.gcp_torch_stats_json(buf, len(buf))
            if m <= len(buf):
                return buf.value.decode()
            n = m


_lib: Library | None = None
_config: dict = {}
_lock = threading.Lock()


def _shutdown(lib: Library) -> None:
    # atexit: no Python code runs from the library after this (Note [Finalization]).
    lib.py.gcp_torch_python_shutdown()


# Note [Freezing the heap at install]
# configure() runs gc.collect() and gc.freeze() by default, so that a
# whole-heap collection costs what the program allocates after install, not
# its imports (with torch imported ~80 ms; frozen, a few microseconds), and
# the policy's minors can be whole-heap ones (Note [Choosing the minor's
# generation]). Why that is safe:
# - gc.freeze() only moves the objects CPython's collector tracks now to its
#   permanent generation, which collections do not examine. Reference
#   counting still frees them, and objects made later that they refer to
#   are still found reachable (a reference from an unexamined object counts
#   as external). What is lost is the cyclic garbage among them that appears
#   later: never more than the heap that existed at configure(), a bound
#   that does not grow, and in practice modules, classes and functions that
#   live until exit.
# - configure() runs before the first allocation of this package, so no
#   frozen object owns a block of ours: the freeze can leak no gcpressure
#   device memory. (An array of a framework's own pool made before install,
#   in a cycle that dies later, would stay: install first, as the adaptors'
#   docs say.)
# - At exit it is undone (atexit: gc.unfreeze()). Finalization collects
#   once before it clears the modules' dicts; with those dicts frozen, the
#   objects they hold were still reachable then, and cycles among them were
#   never finalized: a self-referencing object with __del__ kept in a
#   module global lost its __del__ at exit (ctest torch_cpu_api
#   exit_with_live_cycles: 10 blocks left live; python3 -c with gc.freeze()
#   alone shows the same).
# - The collection it runs first is the one CPython's next whole-heap
#   collection would have run anyway, once; gc.unfreeze() undoes the
#   freeze at any time, and freeze=False skips it. Calls of gc.freeze() by
#   the program itself (the pre-fork pattern CPython's docs give) are
#   unaffected: freezing again only adds.
def configure(soft_limit=None, hard_limit=None, policy: str | None = "pressure", budget: float | None = None, *,
              backend: str = "cuda_async", lib: str | None = None, options_by: str | None = None,
              **options) -> Library:
    """Loads and configures the library; does not touch any framework
    (gcpressure.torch.install() and the others do).
    Limits: ints (bytes) or strings the library parses ("4GiB", "80%"); soft
    defaults to 75% of hard, hard to the whole device. policy: a name of
    gcpressure::policy_names(), e.g. "pressure". budget: the
    fraction of wall time collections may take (default 0.05). backend:
    cuda_async (PyTorch), host (a simulated device in host memory, for tests
    without a GPU), cuda, auto. options: host_capacity, gil_wait,
    minor_generation ("auto", 0, 1, 2), gen1_every, handoff ("helper",
    "pending"), oom ("throw", "null"), every_n, verbose, freeze, refreeze. Once per
    process, before the first allocation.
    minor_generation: "auto" (the default) makes a minor a whole-heap
    gc.collect() while that costs about what a young one does, and gen 0
    (gen 1 every gen1_every-th) otherwise (Note [Choosing the minor's
    generation] in examples/torch/torch_python.cpp); 2 makes every minor
    whole-heap: a gen-0 minor at an allocation promotes the object about to
    own the new block, so a loop that drops one such owner in a cycle per
    iteration is found only by older generations' collections (Note [A minor
    promotes the owner it runs beside]).
    freeze (default True; Note [Freezing the heap at install]): first
    gc.collect(), then gc.freeze(): the heap that exists now (the imported
    modules) moves to CPython's permanent generation, which no collection
    examines again, so whole-heap collections cost what the program made
    since. Cyclic garbage among those frozen objects is never freed (it was
    alive at install time); gc.unfreeze() undoes it; freeze=False keeps the
    heap as it is.
    refreeze (default 2; 0 with freeze=False): with auto minors, how many
    times a long-lived heap that grew after install (a framework's compiler
    state) is frozen again, right after a whole-heap collection that cost
    too much for whole-heap minors and found little (Note [Freezing again
    after the heap grew] in examples/torch/torch_refreeze.cpp: what it can
    leak is bounded by the device bytes live then, at most 1/32 of the hard
    limit each time)."""
    global _lib
    with _lock:
        if _lib is not None:
            raise GcpressureTorchError(f"gcpressure is already configured in this process (by {_config.get('by')})")
        L = Library(lib)
        freeze = options.pop("freeze", None)
        freeze = True if freeze is None else bool(freeze)
        if not freeze:  # nothing frozen at install: no re-freeze either (Note [Freezing again after the heap grew])
            options.setdefault("refreeze", 0)
        # budget is the table's gc_budget: its parser, its range (0 is an error, not "unset").
        for k, v in dict(options, **({} if budget is None else {"gc_budget": budget})).items():
            if v is not None:
                L.check(L.py.gcp_torch_set_option(k.encode(), _size(v)), f"option {k}={v!r}")
        L.check(L.py.gcp_torch_init(_size(backend or None), _size(soft_limit), _size(hard_limit),
                                    _size(policy or None), 0.0), "gcp_torch_init")
        if freeze:  # Note [Freezing the heap at install]; before the gc hook, which would time it
            gc.collect()
            gc.freeze()
            atexit.register(gc.unfreeze)  # the exit's collections see the whole heap again (the Note)
        main = 1 if threading.current_thread() is threading.main_thread() else 0
        L.check(L.py.gcp_torch_attach_python(main), "gcp_torch_attach_python")
        atexit.register(_shutdown, L)
        if freeze:  # timed by the hook: what a whole-heap minor costs now (Note [Choosing the minor's generation]),
            gc.collect()  # twice: the first runs on cold caches (Note [A cold first sample], torch_python.cpp)
            gc.collect()
        _lib = L
        _config.update(dict(soft_limit=soft_limit, hard_limit=hard_limit, policy=policy, budget=budget,
                            backend=backend or json.loads(L.stats_json())["settings"]["backend"],
                            by=options_by or "configure", freeze=freeze, **options))
        return L


def ensure(framework: str, soft_limit=None, hard_limit=None, policy: str | None = None, budget: float | None = None,
           *, backend: str = "cuda_async", lib: str | None = None, **options) -> Library:
    """The library, configured once per process: the first framework to
    install configures it (the arguments as in configure(); policy None:
    "pressure"); a later one shares its devices and policy (Note [Frameworks
    share the devices]) and must not ask for other settings: limits, policy,
    budget or options passed then raise GcpressureTorchError (set_limits()
    changes limits at any time)."""
    with _lock:
        L = _lib
    if L is not None and _config.get("by") == framework:
        raise GcpressureTorchError(f"{framework}: gcpressure is already installed in this process")
    if L is None:
        try:
            return configure(soft_limit, hard_limit, policy or "pressure", budget, backend=backend, lib=lib,
                             options_by=framework, **options)
        except GcpressureTorchError:
            if _lib is None:
                raise
            L = _lib  # another thread configured it first
    asked = {k: v for k, v in dict(soft_limit=soft_limit, hard_limit=hard_limit, policy=policy, budget=budget,
                                   **options).items() if v is not None}
    if asked:
        raise GcpressureTorchError(f"{framework}: gcpressure is already configured in this process (by "
                                   f"{_config.get('by')}); {sorted(asked)} cannot change now (set_limits() can)")
    if backend is not None and backend != _config.get("backend"):
        raise GcpressureTorchError(f"{framework}: the library runs backend {_config.get('backend')!r}, "
                                   f"not {backend!r}")
    return L


def _need() -> Library:
    if _lib is None:
        raise GcpressureTorchError("gcpressure is not installed (call install() of gcpressure.torch, .cupy or "
                                   ".numba, or configure())")
    return _lib


def _device(device) -> int:
    if device is not None:
        return int(getattr(device, "index", device) or 0)
    if _config.get("backend") in ("cuda_async", "cuda"):
        # The current device of a framework this process already uses (never
        # imports one: importing torch takes seconds).
        try:
            if "torch" in sys.modules:
                return sys.modules["torch"].cuda.current_device()
            if "cupy" in sys.modules:
                return sys.modules["cupy"].cuda.runtime.getDevice()
        except Exception:
            return 0
    return 0


def raw_stats() -> dict:
    """The library's stats as one dict: settings, entry counters, the CPython
    side (collections requested by generation, how each was run, every CPython
    collection seen through gc.callbacks) and one core stats object per
    device (see core/src/stats.cpp)."""
    return json.loads(_need().stats_json())


def _device_summary(d: dict) -> dict:
    g = d.get("gc", {})
    return {"device": d["device"], "policy_devices": g.get("policy_devices", 1),
            "reclaimed_bytes": g.get("reclaimed_bytes", 0), "finalized": g.get("finalized", 0),
            "live_bytes": d["requested"]["current"], "peak_live_bytes": d["requested"]["peak"],
            "reserved_bytes": d["reserved"]["current"], "peak_reserved_bytes": d["reserved"]["peak"],
            "hard_limit": d["hard_limit"], "ooms": d["ooms"]}


def _frameworks(r: dict) -> dict:
    """Each framework's live and peak bytes per device (Note [Frameworks
    share the devices]): {name: {device: {live_bytes, peak_live_bytes,
    allocations, frees}}}, only frameworks that allocated."""
    out: dict = {}
    for c in r.get("clients", []):
        for name, v in c.items():
            if name != "device" and v.get("allocations"):
                out.setdefault(name, {})[c["device"]] = v
    return out


def synchronize_stream(handle, device=None) -> None:
    """The synchronize hint on a raw stream handle (int or None: the legacy
    default stream): due collection work runs while the device still works,
    then the host waits for the stream (gcp_torch_synchronize). The
    frameworks' synchronize() functions call it with their current stream."""
    L = _need()
    L.check(L.c.gcp_torch_synchronize(_device(device), handle), "synchronize", L.c)


def stats() -> dict:
    """A summary: collections by kind and reason (the one policy's, shared by
    every device), GC seconds, peak and current live/reserved bytes summed over
    devices, OOMs, CPython's collections; `devices` has each device's own
    figures (reclaimed bytes among them); `frameworks` each framework's
    bytes per device; `raw` holds raw_stats()."""
    r = raw_stats()
    devs = r.get("devices", [])
    # One policy serves every device (Note [Devices join the policy]): each
    # device reports the same collections, so they are counted once.
    g = devs[0].get("gc", {}) if devs else {}
    kinds = {"minor": 0, "incremental_full": 0, "blocking_full": 0}
    kinds.update(g.get("by_kind", {}))
    reasons = dict(g.get("by_reason", {}))
    gc_s = g.get("gc_seconds", 0.0)
    py = r.get("python", {})
    return {
        "policy": r.get("settings", {}).get("policy"),
        "policy_devices": r.get("policy", {}).get("devices", 0),
        "devices": [_device_summary(d) for d in devs],
        "backend": r.get("settings", {}).get("backend"),
        "collections": kinds,
        "collections_total": sum(kinds.values()),
        "by_reason": reasons,
        "gc_seconds": gc_s,
        "peak_live_bytes": sum(d["requested"]["peak"] for d in devs),
        "peak_reserved_bytes": sum(d["reserved"]["peak"] for d in devs),
        "live_bytes": sum(d["requested"]["current"] for d in devs),
        "reserved_bytes": sum(d["reserved"]["current"] for d in devs),
        "hard_limit": sum(d["hard_limit"] for d in devs),
        "soft_limit": sum(d["soft_limit"] for d in devs),
        "allocations": sum(d["allocations"] for d in devs),
        "pool_hits": sum(d["pool_hits"] for d in devs),
        "ooms": r.get("entries", {}).get("ooms", 0),
        "python_collections": py.get("python_collections"),
        "python_gc_seconds": py.get("python_gc_seconds"),
        "requested_gen": py.get("requested_gen"),
        "frameworks": _frameworks(r),
        "raw": r,
    }


def stats_text() -> str:
    """stats() as a table: the policy, then one row per device."""
    s = stats()
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    k = s["collections"]
    lines = [f"gcpressure_torch: policy {s['policy']} over {s['policy_devices']} device(s); collections: "
             f"minor {k['minor']}, incremental full {k['incremental_full']}, blocking full {k['blocking_full']}; "
             f"gc {s['gc_seconds']:.3f} s",
             f"{'device':>6} {'policy_devices':>14} {'live':>12} {'peak live':>12} {'reserved':>12} "
             f"{'hard limit':>12} {'reclaimed':>12} {'ooms':>5}"]
    for d in s["devices"]:
        lines.append(f"{d['device']:>6} {d['policy_devices']:>14} {mib(d['live_bytes']):>12} "
                     f"{mib(d['peak_live_bytes']):>12} {mib(d['reserved_bytes']):>12} {mib(d['hard_limit']):>12} "
                     f"{mib(d['reclaimed_bytes']):>12} {d['ooms']:>5}")
    return "\n".join(lines) + "\n"


def collect(full: bool = False, device=None) -> None:
    """A collection now (reason "user"): minor, or the whole heap."""
    L = _need()
    L.check(L.c.gcp_torch_collect(_device(device), 1 if full else 0), "collect", L.c)


def iteration(device=None) -> None:
    """Hint: an iteration boundary (few temporaries alive)."""
    L = _need()
    L.check(L.c.gcp_torch_iteration(_device(device)), "iteration", L.c)


def quiet_moment(device=None) -> None:
    """Hint: a quiet moment (e.g. after a synchronize)."""
    L = _need()
    L.check(L.c.gcp_torch_quiet_moment(_device(device)), "quiet_moment", L.c)


def trim(device=None) -> None:
    """Returns idle cached blocks to the driver (what torch.cuda.empty_cache does)."""
    L = _need()
    L.check(L.c.gcp_torch_trim(_device(device)), "trim", L.c)


def usage(device=None) -> tuple[int, int]:
    """(live bytes, reserved bytes) of a device."""
    L = _need()
    live, res = ctypes.c_size_t(), ctypes.c_size_t()
    L.py.gcp_torch_usage(_device(device), ctypes.byref(live), ctypes.byref(res))
    return live.value, res.value


def set_limits(soft=0, hard=0, device=None) -> None:
    """Limits: bytes (an int; 0 or None leaves one unchanged) or text the
    library's size parser reads as it reads GCPRESSURE_SOFT_LIMIT and the
    constructor's limits ("64MiB", "64 MB" = 64 MiB, "50%" of the device:
    Note [Limits as text] in examples/torch/gcpressure_torch.cpp)."""
    L = _need()
    L.check(L.py.gcp_torch_set_limits_text(_device(device), _limit(soft), _limit(hard)), "set_limits")


def reset_peaks(device=None) -> None:
    _need().py.gcp_torch_reset_peaks(_device(device))
