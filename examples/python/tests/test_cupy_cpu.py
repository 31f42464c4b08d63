#!/usr/bin/env python3
"""gcpressure.cupy without a GPU: the adaptor against the CuPy stand-in
(fakes/cupy: set_allocator, UnownedMemory, MemoryPointer, the current
stream, OutOfMemoryError as cupy/cuda/memory.pyx has them) over the plug-in
library's host backend (real host memory). Each case in its own process."""
from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import time
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cases import Loaded, MiB, Node, cpu_share, cycle_loop, expect, main, raises  # noqa: E402


def setup(host_capacity_override=None, **kw):
    import cupy
    import gcpressure.cupy as g
    kw.setdefault("hard_limit", "64MiB")
    # GCP_CUPY_NATIVE=0: the Python reference malloc_py instead of the C malloc.
    L = g.install(backend="host", host_capacity=host_capacity_override or "256MiB", cupy=cupy,
                  native=os.environ.get("GCP_CUPY_NATIVE") != "0", **kw)
    return cupy, g, L


def live(g):
    return g.stats()["frameworks"].get("cupy", {}).get(0, {})


def owner_returns_block():
    cupy, g, _ = setup()
    native = os.environ.get("GCP_CUPY_NATIVE") != "0"
    expect(cupy.cuda.get_allocator() is (g.malloc if native else g.malloc_py), "install() set CuPy's allocator")
    expect(type(g.malloc).__name__ == "builtin_function_or_method", "malloc is the C function")
    a = cupy.empty(MiB // 4)
    mem = a.data.mem
    expect(isinstance(mem, cupy.cuda.UnownedMemory) and mem.size == MiB and mem.device_id == 0, "UnownedMemory")
    expect(type(mem._owner).__name__ == "PyCapsule", f"the owner is the library's capsule ({mem._owner!r})")
    ctypes.memset(a.data.ptr, 0x5A, MiB)  # real memory: write it all, read both ends
    expect(ctypes.string_at(a.data.ptr, 1) == b"\x5a" and ctypes.string_at(a.data.ptr + MiB - 1, 1) == b"\x5a",
           "the block is writable memory")
    c = live(g)
    expect(c["live_bytes"] == MiB and c["allocations"] == 1 and c["frees"] == 0, c)
    hits = g.stats()["pool_hits"]
    del a, mem
    c = live(g)
    expect(c["live_bytes"] == 0 and c["frees"] == 1, f"dropping the array gave the block back: {c}")
    b = cupy.empty(MiB // 4)
    expect(g.stats()["pool_hits"] == hits + 1, "the freed block came back from the pool")
    del b


def stream_kept_and_ordered():
    cupy, g, L = setup()
    h = L.c.gcp_torch_test_host_stream()  # a host-backend stream (an in-order worker)
    s = cupy.cuda.Stream(h)
    w = weakref.ref(s)
    with s:
        x = cupy.empty(MiB // 4)
    y = cupy.empty(MiB // 4)  # back on the null stream
    del s
    gc.collect()
    expect(w() is not None, "the owner keeps the allocation's stream alive")
    del x
    gc.collect()
    expect(w() is None, "the stream goes once its block is freed")
    expect(live(g)["live_bytes"] == MiB, "y still live")
    del y


def capture_check_skips_the_null_stream():
    # GCP_TORCH_PROFILE=1 (below): an allocation on the null stream (CuPy's
    # and Numba's default) asks no capture question (CUDA captures no work on
    # it); one on another stream does (Note [Graph capture]). Fails with the
    # stream != nullptr test removed (2 capture checks, not 1).
    cupy, g, L = setup()
    checks = lambda: g.raw_stats()["profile"]["capture_check"]["calls"]  # noqa: E731
    expect(g.raw_stats()["profile"]["enabled"], "GCP_TORCH_PROFILE=1")
    c0 = checks()
    x = cupy.empty(MiB // 4)
    expect(checks() == c0, f"the null stream was asked about a capture ({checks() - c0})")
    with cupy.cuda.Stream(L.c.gcp_torch_test_host_stream()):
        y = cupy.empty(MiB // 4)
    expect(checks() == c0 + 1, f"{checks() - c0} capture checks on a stream")
    del x, y


def cycles_collected():
    cupy, g, _ = setup()
    cycle_loop(lambda n: cupy.empty(n // 4))  # 8 MiB per iteration, 2.3 GiB through a 64 MiB limit
    s = g.stats()
    expect(s["ooms"] == 0, f"no OOM ({s['ooms']})")
    expect(s["peak_reserved_bytes"] <= 64 * MiB, s["peak_reserved_bytes"])
    expect(s["collections_total"] > 0 and s["requested_gen"] and sum(s["requested_gen"]) > 0, s["collections"])


def owner_cycle_peak(minor_generation, freeze=True):
    """Note [A minor promotes the owner it runs beside]: a minor at every
    allocation (asked for here, so that the cadence is exact), while the
    owner of the new array is alive. The peak of live bytes over one 8 MiB
    array per iteration, in a 2-object cycle, CPython's own collector off."""
    cupy, g, _ = setup(policy="explicit_free", hard_limit="512MiB", minor_generation=minor_generation,
                       freeze=freeze)
    gc.disable()
    peak = 0
    for _ in range(48):
        a, b = Node(), Node()
        a.p, b.p = b, a
        g.collect()  # the allocation's minor, the owner `a` alive
        a.x = cupy.empty(8 * MiB // 4)
        del a, b
        peak = max(peak, g.usage()[0])
    return peak / (8 * MiB), g


def whole_heap_minors_keep_cycles_at_2x():
    ratio, g = owner_cycle_peak("2")
    expect(ratio <= 2, f"minor_generation=2: peak live {ratio:.0f}x one iteration's array")
    expect(gc.get_freeze_count() > 0, "install(freeze=True) froze the import-time heap")
    expect(g.raw_stats()["python"]["requested_gen"][2] >= 48, g.raw_stats()["python"]["requested_gen"])


def generational_minors_miss_the_promoted_owner():
    # The control: gen-0 minors (and gen 1 every 4th) promote each owner
    # before it dies, so they hold many dead arrays; if this ever passes at
    # <= 2x, CPython stopped promoting at collections and the Note is stale.
    # Auto without a freeze: no whole-heap collection has been timed (the
    # collector is off), so the minors are the generational ones.
    ratio, g = owner_cycle_peak("auto", freeze=False)
    expect(ratio > 4, f"minor_generation=auto, freeze=False: peak live {ratio:.0f}x (expected well over 2x)")
    expect(g.raw_stats()["python"]["requested_gen"][2] == 0, g.raw_stats()["python"]["requested_gen"])


def auto_minors_are_whole_over_a_frozen_heap():
    # Note [Choosing the minor's generation]: with the defaults (freeze at
    # install, minor_generation auto) every minor is a whole-heap one, as
    # with minor_generation=2. Fails with auto's old rule (gen 0, gen 1
    # every 4th: 14x, as the control above) or without the freeze.
    ratio, g = owner_cycle_peak("auto", freeze=None)
    py = g.raw_stats()["python"]
    expect(ratio <= 2, f"defaults: peak live {ratio:.0f}x one iteration's array (gens {py['requested_gen']})")
    expect(gc.get_freeze_count() > 0 and py["cost_whole_us"] > 0, f"frozen {gc.get_freeze_count()}, {py}")
    expect(py["requested_gen"][0] == py["requested_gen"][1] == 0, py)


def auto_minors_stay_young_over_a_large_heap():
    # The other side of the Note: 300k objects made after install (what
    # numba-cuda's compiler leaves: 13-21 ms per whole-heap collection on the
    # H200) make a whole-heap minor ~100x a young one here; auto then runs
    # young minors, and re-measures the whole heap only once 1% of the wall
    # time since the last one pays for it. Fails if auto keeps whole-heap
    # minors (all 200 would be gen 2, ~4 s here). refreeze=0: else the first
    # whole-heap minor freezes that heap (the next case).
    cupy, g, _ = setup(policy="explicit_free", hard_limit="512MiB", refreeze=0)
    keep = [[Node() for _ in range(9)] for _ in range(30000)]  # ~300k tracked objects, alive
    gc.disable()
    t0 = time.perf_counter()
    for _ in range(200):
        a, b = Node(), Node()
        a.p, b.p = b, a
        g.collect()
        a.x = cupy.empty(MiB // 4)
        del a, b
    wall = time.perf_counter() - t0
    py = g.raw_stats()["python"]
    gens = py["requested_gen"]
    expect(gens[0] + gens[1] >= 190 and gens[2] <= 5, f"requested generations {gens}, costs {py['cost_young_us']:.0f} / "
           f"{py['cost_whole_us']:.0f} us, {wall:.2f} s")
    del keep


def grown_heap_loop(program_collects=False, keep_live=0, garbage_heap=False, iters=200, **kw):
    """Note [Freezing again after the heap grew]: 300k long-lived objects made
    after install (a stand-in for numba-cuda's first kernel compile), then
    one 8 MiB array per iteration in a 2-object cycle with a minor at every
    allocation (the owner alive). Returns (peak live / one array, wall, the
    python stats)."""
    cupy, g, _ = setup(policy="explicit_free", hard_limit="512MiB", **kw)
    held = [cupy.empty(8 * MiB // 4) for _ in range(keep_live)]
    keep = [[Node() for _ in range(9)] for _ in range(30000)]  # ~300k tracked objects
    if garbage_heap:  # the same objects, each list in a cycle and dropped: garbage, not a long-lived heap
        for k in keep:
            k[0].p = k
        keep = None
    gc.disable()
    if program_collects:
        gc.collect()  # the program's own whole-heap collection (not the policy's)
    peak, t0 = 0, time.perf_counter()
    for _ in range(iters):
        a, b = Node(), Node()
        a.p, b.p = b, a
        g.collect()
        a.x = cupy.empty(8 * MiB // 4)
        del a, b
        peak = max(peak, g.usage()[0] - keep_live * 8 * MiB)
    wall = time.perf_counter() - t0
    del keep, held
    return peak / (8 * MiB), wall, g.raw_stats()["python"]


def auto_refreezes_a_grown_heap():
    # The first whole-heap minor over the grown heap costs ~100x a young one
    # and finds ~nothing: its survivors are frozen, the whole-heap cost is
    # measured again at once, and the minors stay whole-heap (<= 2x). Fails
    # with refreeze=0 and with the cost not re-learned after the freeze: both
    # keep young minors, which hold every promoted owner's array until the
    # 256 MiB host capacity runs out.
    ratio, wall, py = grown_heap_loop()
    rf, gens = py["refreeze"], py["requested_gen"]
    expect(rf["done"] == 1 and rf["objects"] >= 300000 and rf["live_bytes"] <= 8 * MiB, rf)
    expect(ratio <= 2 and gens[2] >= 190, f"peak live {ratio:.0f}x, gens {gens}, {wall:.2f} s, {rf}")
    expect(wall < 2.0, f"{wall:.2f} s for 200 whole-heap minors over a frozen heap")


def refreeze_after_the_programs_collection():
    # A qualifying whole-heap collection that is not the policy's (the
    # program's gc.collect() after the heap grew) makes the next minor a
    # whole-heap one, where the rule runs: frozen at the first iteration.
    ratio, wall, py = grown_heap_loop(program_collects=True, iters=3)
    expect(py["refreeze"]["done"] == 1 and py["requested_gen"][2] >= 1, (py["refreeze"], py["requested_gen"]))


def refreeze_bounded():
    # (d): with 48 MiB live (> 512 MiB / 32) nothing is frozen, whatever the
    # heap: those blocks could be pinned. (c): a heap of garbage is freed by
    # the collection, not frozen (one decline). Fails with either check
    # removed (done == 1).
    _, _, py = grown_heap_loop(keep_live=6, iters=20)
    expect(py["refreeze"]["done"] == 0 and py["refreeze"]["objects"] == 0, py["refreeze"])
    expect(gc.get_freeze_count() < 100000, f"frozen {gc.get_freeze_count()}")


def refreeze_skips_garbage():
    _, _, py = grown_heap_loop(garbage_heap=True, iters=20)
    expect(py["refreeze"]["done"] == 0, py["refreeze"])


def pressure_policy_holds_slow_cycles_at_2x():
    # Issue 22's target where the 5% budget allows it: one 8 MiB array per
    # iteration in a 2-object cycle, ~300 us of host work per iteration (a
    # device-bound loop's pace), under the pressure policy with the
    # defaults. The budget rule spaces minors P / (0.05 T) iterations apart:
    # P ~ 4 us (whole heap, frozen) here, so one per iteration: <= 2x. Fails
    # without the freeze at install (freeze=False: 20x; the minors are then
    # generational and the whole-heap cycles that find the promoted owners
    # cost the unfrozen heap, ~1.5 ms, so the policy spaces them).
    # The premise is a core to itself: on a loaded machine a ~4 us collection
    # is preempted and measured at ~2 ms, the policy prices it so and spaces
    # the collections (4-24x seen beside two busy processes on 2 cores); such
    # a run is tried again (_cases.Loaded), a run with its core fails.
    cupy, g, _ = setup(hard_limit="256MiB", host_capacity_override="512MiB")
    gc.disable()

    def loop():
        peak = 0
        for _ in range(300):
            a, b = Node(), Node()
            a.p, b.p = b, a
            a.x = cupy.empty(8 * MiB // 4)
            del a, b
            end = time.perf_counter() + 300e-6
            while time.perf_counter() < end:
                pass
            peak = max(peak, g.usage()[1])
        return peak

    peak, share = cpu_share(loop)
    s = g.stats()
    what = (f"peak reserved {peak / (8 * MiB):.1f}x the live array, collections {s['collections']}, "
            f"gens {g.raw_stats()['python']['requested_gen']}, CPU share {share:.2f}")
    if s["ooms"] == 0 and peak > 2 * 8 * MiB and share < 0.9:
        raise Loaded(what)
    expect(s["ooms"] == 0 and peak <= 2 * 8 * MiB, what)


def control_runs_out():
    # The same loop with no collection asked for (explicit_free): the
    # cycles are never freed, and the error is CuPy's type with our report.
    cupy, g, _ = setup(policy="explicit_free")
    try:
        cycle_loop(lambda n: cupy.empty(n // 4))
    except cupy.cuda.memory.OutOfMemoryError as e:
        m = str(e)
        expect(isinstance(e, MemoryError), "a MemoryError, as CuPy's")
        expect("tried to allocate 8.00 MiB" in m and "hard limit 64.00 MiB" in m and "Reclaim ladder" in m, m)
        return
    raise AssertionError("the control did not run out of memory")


def nested_allocation_in_the_constructor():
    # A constructor that allocates through CuPy again while the outer call
    # is inside the binding (re-entrancy of the C malloc). Both blocks are
    # distinct and live, then both go back.
    import cupy
    base, depth = cupy.cuda.UnownedMemory, [0]

    class Nesting(base):
        def __init__(self, ptr, size, owner, device_id=-1):
            super().__init__(ptr, size, owner, device_id)
            if depth[0] == 0:
                depth[0] += 1
                self.inner = cupy.cuda.alloc(MiB)
                depth[0] -= 1

    cupy.cuda.UnownedMemory = Nesting  # what install() binds
    cupy, g, _ = setup()
    a = cupy.cuda.alloc(2 * MiB)
    inner = a.mem.inner
    expect(a.mem.size == 2 * MiB and inner.mem.size == MiB and inner.ptr != a.ptr, "two blocks")
    expect(type(a.mem._owner).__name__ == "PyCapsule" and a.mem._owner is not inner.mem._owner, "two owners")
    expect(live(g)["live_bytes"] == 3 * MiB, live(g))
    b = cupy.cuda.alloc(2 * MiB)  # after the nested call: the outer call's tuples are free again
    expect(live(g)["live_bytes"] == 6 * MiB, live(g))
    del a, b, inner
    expect(live(g)["live_bytes"] == 0 and live(g)["frees"] == 4, f"every block went back: {live(g)}")


def zero_size_and_errors():
    cupy, g, L = setup()
    z = cupy.empty(0)
    expect(z.data.ptr == 0 and z.data.mem.size == 0, "zero bytes: a null MemoryPointer")
    expect(live(g) == {}, "zero bytes allocate nothing")
    expect(L.alloc_owned(MiB, 0, None, 99, None) is None and "unknown framework" in L.last_error(), "bad index")
    expect(L.alloc_owned(0, 0, None, 1, None) is None and "zero-byte" in L.last_error(), "zero through the library")
    # Note [alloc_owned without ctypes]: the library's builtin, not a ctypes function.
    expect(type(L.alloc_owned).__name__ == "builtin_function_or_method", f"alloc_owned is {L.alloc_owned!r}")
    raises(TypeError, L.alloc_owned, MiB, 0)
    e = raises(g.GcpressureTorchError, g.install, hard_limit="1GiB", cupy=cupy, backend="host")
    expect("already installed" in str(e), e)
    big = raises(cupy.cuda.memory.OutOfMemoryError, cupy.empty, 65 * MiB // 4)
    expect("65.00 MiB" in str(big), big)
    g.uninstall()
    expect(cupy.cuda.get_allocator() is cupy.cuda.memory._malloc, "uninstall() restored CuPy's allocator")


def synchronize_hint():
    cupy, g, L = setup()
    from cupy.cuda import stream as st
    x = cupy.empty(MiB // 4)  # the device exists once something allocated

    def syncs():
        return g.raw_stats()["devices"][0]["gc"]["syncs"]

    s0 = syncs()
    cupy.cuda.Stream(L.c.gcp_torch_test_host_stream()).synchronize()
    expect(syncs() == s0 + 1 and len(st.synchronized) == 1, "Stream.synchronize gave the hint, then CuPy's")
    g.synchronize()
    expect(syncs() == s0 + 2, "synchronize() on the current stream")
    g.uninstall()
    cupy.cuda.Stream(0).synchronize()
    expect(syncs() == s0 + 2 and len(st.synchronized) == 2, "uninstall() removed the hook")
    del x


def threads():
    cupy, g, _ = setup()
    errors = []

    def work():
        try:
            for _ in range(200):
                a, b = Node(), Node()
                a.p, b.p = b, a
                a.x = cupy.empty(MiB)
                del a, b
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = g.stats()
    expect(not errors and s["ooms"] == 0, f"{errors[:1]} ooms={s['ooms']}")
    expect(s["frameworks"]["cupy"][0]["allocations"] == 800, s["frameworks"])


if __name__ == "__main__":
    cases = {f.__name__: f for f in (owner_returns_block, stream_kept_and_ordered, cycles_collected, control_runs_out,
                                     zero_size_and_errors, synchronize_hint, threads,
                                     nested_allocation_in_the_constructor,
                                     whole_heap_minors_keep_cycles_at_2x, generational_minors_miss_the_promoted_owner)}
    # The Python reference (malloc_py) through the same cases.
    py = {f"{n}_py": f for n, f in list(cases.items())}
    # The collector's choice of generation (Note [Choosing the minor's generation]): once, with the C malloc.
    cases["capture_check_skips_the_null_stream"] = capture_check_skips_the_null_stream
    choice = {f.__name__: f for f in (auto_minors_are_whole_over_a_frozen_heap, auto_minors_stay_young_over_a_large_heap,
                                      pressure_policy_holds_slow_cycles_at_2x, auto_refreezes_a_grown_heap,
                                      refreeze_after_the_programs_collection, refreeze_bounded,
                                      refreeze_skips_garbage)}
    main({**cases, **py, **choice}, {**{n: {"GCP_CUPY_NATIVE": "0"} for n in py},
                                     **{n: {"GCP_TORCH_PROFILE": "1"} for n in cases if n.startswith("capture_check")}})
