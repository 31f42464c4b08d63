"""CPython's cyclic collector as a gcpressure collector.

CPython frees by reference counting; what refcounting cannot free (objects in
reference cycles, e.g. an array and the autograd-like node that points back
at it) waits for the cyclic collector, whose thresholds count container
objects, not bytes (PyTorch issue #50185). A DeviceArray is one small object
holding megabytes of device memory, so the collector never runs on its own
while the device fills up. This module lets the library's pressure policy
ask for collections by device bytes:

    minor  -> gc.collect(minor_generation)   (1 by default: generations 0 and 1)
    full   -> gc.collect(2)
    run_finalizers -> NULL: CPython runs __del__ and weakref callbacks inside
                      the collection itself, on the collecting thread.

The class is independent of DeviceArray and of how the allocator was made:
attach() takes any gcpressure_allocator* (e.g. one that a PyTorch pluggable
allocator created in C) as long as it lives in the same libgcpressure.so.

Note [GIL and collector callbacks]
The library calls minor/full on the thread that is allocating, from inside
gcpressure_alloc (or gcpressure_collect / iteration / quiet_moment, or the
reclaim ladder). Those calls go through ctypes.CDLL, which releases the GIL
for the duration of the foreign call; the callbacks are ctypes CFUNCTYPE
trampolines, which take the GIL back (PyGILState_Ensure, creating a thread
state for a thread Python has never seen) before running Python code and
release it after. So Python code never runs without the GIL, and:

* No deadlock: a thread that waits for the GIL inside a callback holds only
  the policy's collection mutex (no allocator lock is held across a collector
  call: Note [Locks and collections]). A thread that holds the GIL never
  waits for that mutex, because every call that may take it goes through
  CDLL (GIL released first). The calls that keep the GIL (ctypes.PyDLL:
  release_from_finalizer, usage, stats_json, set_limits, last_error) never
  take it.
* Finalizers run inside gc.collect(), with the GIL, on the collecting thread;
  they only queue the block (gcpressure_release_from_finalizer, a lock-free
  push, called through PyDLL so that the call itself does not let the GIL
  go); the policy drains the queue after the callback returns.
* Note [A collection already running]: CPython's collector is not
  re-entrant. gc.collect() while a collection is running returns 0 at once
  without collecting, and one can be running on another thread: finalizers
  are Python code, and the interpreter hands the GIL to other threads while
  running them (every switch interval, or in any blocking call). So a
  requested collection checks, through gc.callbacks, that it really ran; if
  not, it sleeps briefly (releasing the GIL so that the other collection can
  finish) and tries again, for at most `wait_seconds`. A collection running
  on the calling thread itself (a finalizer that allocates device memory)
  cannot be waited for: the request is skipped (counted in `skipped`). The
  other thread's finalizers never wait for this collection: while tracking,
  every CPython collection is inside the library's collection scope from its
  gc.callbacks "start" to its "stop" (gcpressure_enter_collection /
  gcpressure_leave_collection, Note [Inside a collection] in the library),
  so their gcpressure_alloc is served without collecting or waiting for the
  collection lock (or fails where only a collection would help), and
  gcpressure_collect from a finalizer returns GCPRESSURE_ERR_BUSY. The
  library, for its part, never starts a nested collection from inside its
  hook.
* Note [CPython's own collections]: gc.callbacks sees every collection, with
  its generation, on the thread that runs it, start and stop. One that runs
  on a thread while that thread is inside a requested collection (_run) is
  the library's; every other one is CPython's own (automatic, or the
  program's gc.collect()): own_collections, own_full_collections
  (generation 2 = the whole heap) and own_seconds (start to stop, timed in
  the callbacks) are exact. They reach the library through the collector's
  own-collections callback, where the C API has one.
* gc.disable() only stops CPython's automatic collections; gc.collect() still
  collects, so the policy keeps device memory bounded with the automatic
  collector off.
"""
from __future__ import annotations

import ctypes
import gc
import threading
import time

from . import _capi


class CPythonCollector:
    """Python's gc as the collector of one or more gcpressure allocators.

    minor_generation: what a minor collection collects: 0 (generation 0) or
    1 (the default: generations 0 and 1, so garbage that was still alive at
    the previous minor collection, and was promoted to generation 1 by it,
    is found too; survivors go to generation 2, which only the full
    collection examines).
    wait_seconds: how long a requested collection waits for a collection
    another thread is running (Note [A collection already running]).

    Every CPython collection (its automatic ones included) is observed through
    gc.callbacks while the collector is attached: counted, timed, and used to
    tell whether gc.collect() really ran.
    """

    def __init__(self, minor_generation: int = 1, wait_seconds: float = 1.0):
        if minor_generation not in (0, 1):
            raise ValueError("minor_generation must be 0 or 1 (2 is the full collection)")
        self.minor_generation = minor_generation
        self.requested_minor = 0      # minor callbacks the library ran
        self.requested_full = 0       # full callbacks the library ran
        self.requested_seconds = 0.0  # time inside those callbacks
        self.unreachable = 0          # objects they found unreachable (gc.collect's result)
        self.threads: set[int] = set()  # threads (ident) that ran a requested collection
        self.callback_errors = 0
        self.waits = 0                # times a requested collection waited for another thread's
        self.skipped = 0              # requested collections that could not run (see the Note)
        self.wait_seconds = wait_seconds
        # Every CPython collection, by generation (gc.callbacks), ours included.
        self.python_collections = [0, 0, 0]
        self.python_seconds = 0.0
        # Note [CPython's own collections]: those not run for a request of the
        # library (automatic ones, the program's own gc.collect()).
        self.own_collections = 0
        self.own_full_collections = 0
        self.own_seconds = 0.0
        self._requesting: set[int] = set()  # threads inside _run
        self._gc_t0: dict[int, float] = {}    # thread -> start of its running collection
        self._starts: dict[int, int] = {}     # thread -> collections started on it
        self._track = False
        self._lib: _capi.Library | None = None  # for enter/leave_collection (attach)
        self._entered: dict[int, int] = {}    # thread -> enters it still owes a leave
        # The trampolines must live as long as any allocator may call them.
        self._minor_cb = _capi.VOID_CB(self._minor)
        self._full_cb = _capi.VOID_CB(self._full)
        self._own_cb = _capi.OWN_CB(self._own)
        self.attached = 0

    # --- the callbacks (run with the GIL, see the Note) -------------------------

    def _run(self, generation: int) -> None:
        # Note [A collection already running]
        tid = threading.get_ident()
        t0 = time.perf_counter()
        self._requesting.add(tid)
        try:
            if tid in self._gc_t0:
                # Inside a collection on this very thread (a finalizer that
                # allocated): CPython's collector is not re-entrant.
                self.skipped += 1
                return
            if not self._track:  # cannot tell whether it ran: just ask
                self.unreachable += gc.collect(generation)
                return
            deadline = t0 + self.wait_seconds
            while True:
                started = self._starts.get(tid, 0)
                n = gc.collect(generation)
                if self._starts.get(tid, 0) != started:
                    self.unreachable += n
                    break
                # Another thread's collection is running (its finalizers let
                # the GIL go mid-collection): gc.collect() did nothing. Let it
                # finish, then collect for real.
                if time.perf_counter() > deadline:
                    self.skipped += 1
                    break
                self.waits += 1
                time.sleep(0.0002)  # releases the GIL
        except BaseException:  # never propagate into C
            self.callback_errors += 1
        finally:
            self._requesting.discard(tid)
            self.requested_seconds += time.perf_counter() - t0
            self.threads.add(tid)

    def _minor(self, _context) -> None:
        self.requested_minor += 1
        self._run(self.minor_generation)

    def _full(self, _context) -> None:
        self.requested_full += 1
        self._run(2)

    def _own(self, _context, collections, full_collections, seconds, exact) -> None:
        # The library asks for CPython's own collections (Note [CPython's own
        # collections]). Runs with the GIL (a CFUNCTYPE trampoline), like the
        # collection callbacks; only reads counters, never raises.
        try:
            collections[0] = self.own_collections
            full_collections[0] = self.own_full_collections
            seconds[0] = self.own_seconds
            exact[0] = 1 if self._track else 0
        except BaseException:
            self.callback_errors += 1

    def _on_gc(self, phase: str, info: dict) -> None:
        tid = threading.get_ident()
        if phase == "start":
            if not self._track:  # stopped, kept only for the leaves it owes
                return
            self._gc_t0[tid] = time.perf_counter()
            self._starts[tid] = self._starts.get(tid, 0) + 1
            if self._lib is not None and self._lib.fast.gcpressure_enter_collection() == _capi.OK:
                self._entered[tid] = self._entered.get(tid, 0) + 1
        else:
            owed = self._entered.get(tid, 0)
            if owed:  # only a leave for an enter of ours: a stop seen without its start ends nothing
                self._lib.fast.gcpressure_leave_collection()
                if owed == 1:
                    del self._entered[tid]
                else:
                    self._entered[tid] = owed - 1
            if not self._track:
                return
            t0 = self._gc_t0.pop(tid, None)
            dt = time.perf_counter() - t0 if t0 is not None else 0.0
            self.python_seconds += dt
            g = info.get("generation", 2)
            if 0 <= g < 3:
                self.python_collections[g] += 1
            if tid not in self._requesting:
                self.own_collections += 1
                self.own_full_collections += g == 2
                self.own_seconds += dt

    # --- wiring -----------------------------------------------------------------------

    def callbacks(self) -> _capi.CollectorCallbacks:
        """The gcpressure_collector_callbacks struct for this collector."""
        cb = _capi.CollectorCallbacks()
        cb.struct_size = ctypes.sizeof(cb)
        cb.context = None
        cb.minor = self._minor_cb
        cb.full = self._full_cb
        cb.own_collections = self._own_cb
        # run_finalizers, start_full, step_full, heap_bytes: NULL.
        return cb

    def attach(self, library: _capi.Library, handle: int) -> None:
        """Registers this collector with the allocator `handle` (a
        gcpressure_allocator* as an int). Not from inside a collection. The
        caller must keep this object alive until the allocator is destroyed."""
        cb = self.callbacks()
        library.check(library.lib.gcpressure_set_collector(handle, ctypes.byref(cb)), "gcpressure_set_collector")
        self._lib = library
        self.attached += 1
        self.start_tracking()

    def detached(self) -> None:
        """Tells the collector that an allocator it was attached to was
        destroyed; the last one stops the gc.callbacks tracking."""
        self.attached = max(0, self.attached - 1)
        if self.attached == 0:
            self.stop_tracking()

    def start_tracking(self) -> None:
        if not self._track:
            if self._on_gc not in gc.callbacks:
                gc.callbacks.append(self._on_gc)
            self._track = True

    def stop_tracking(self) -> None:
        # A thread inside a collection now (its finalizer let the GIL go)
        # still needs our "stop" to leave the collection scope: the callback
        # then stays, inert but for those leaves.
        if self._track:
            self._track = False
            if self._entered:
                return
            try:
                gc.callbacks.remove(self._on_gc)
            except ValueError:
                pass

    def snapshot(self) -> dict:
        return {
            "minor_generation": self.minor_generation,
            "requested_minor": self.requested_minor,
            "requested_full": self.requested_full,
            "requested_seconds": self.requested_seconds,
            "unreachable": self.unreachable,
            "threads": len(self.threads),
            "callback_errors": self.callback_errors,
            "waits": self.waits,
            "skipped": self.skipped,
            "python_collections": list(self.python_collections),
            "python_seconds": self.python_seconds,
            "own_collections": self.own_collections,
            "own_full_collections": self.own_full_collections,
            "own_seconds": self.own_seconds,
        }


def python_gc_counts() -> list[int]:
    """CPython's own cumulative collection counts per generation (gc.get_stats)."""
    return [s.get("collections", 0) for s in gc.get_stats()]
