#!/usr/bin/env python3
"""Several devices under the one policy (Note [Devices join the policy] in
gcpressure_torch.cpp), on the host backend, without torch: devices 0, 1, ...
are simulated devices, met lazily as PyTorch meets its GPUs.

Cases (each in a fresh interpreter; one JSON line each):
  join            device 1's first allocation joins device 0's policy: both
                  report policy_devices 2, one policy name, collections
                  counted once in stats(), the table has a row per device;
                  synchronize on device 1 goes to the policy.
  cross_device    at_limit policy: a collection started by device 1's failed
                  allocation (its hard limit) also frees device 0's garbage
                  (blocks held by reference cycles); each device reports its
                  own reclaimed bytes.
  small_device    pressure policy: device 1 small (16 MiB), device 0 large
                  (512 MiB); cycles on both, 25x device 1's limit through
                  it: no OOM on device 1, garbage of both reclaimed.
  concurrent_join four threads each meet a new device while the others
                  allocate and collect: all join, no OOM, no deadlock.
"""
from __future__ import annotations

import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MODDIR, lib_arg, run_cases  # noqa: E402

LIB = lib_arg()

PRELUDE = textwrap.dedent(f"""
    import ctypes, faulthandler, gc, json, sys, threading
    faulthandler.dump_traceback_later(100, exit=True)   # deadlock watchdog
    sys.path.insert(0, {MODDIR!r})
    import gcpressure_torch as gcp
    LIB = {LIB!r}
    MiB = 1 << 20
    class B:
        # A block of `dev` held by a reference cycle: freed only by a collection.
        def __init__(s, L, n, dev, with_gil=True):
            s.L, s.n, s.dev, s.me = L, n, dev, None
            s.p = (L.py if with_gil else L.c).gcp_torch_alloc(n, dev, None)
            if s.p:
                s.me = s
        def __del__(s):
            if s.p:
                s.L.py.gcp_torch_free(s.p, s.n, s.dev, None)
    def dev_stats(d):
        return next(x for x in gcp.raw_stats()["devices"] if x["device"] == d)
""")

CASES = {
    "join": """
        L = gcp.configure(hard_limit="64MiB", backend="host", lib=LIB, host_capacity="256MiB", oom="null")
        p0 = L.py.gcp_torch_alloc(MiB, 0, None)
        assert p0
        r = gcp.raw_stats()
        assert r["policy"] == {"name": "pressure", "devices": 1}, r["policy"]
        assert dev_stats(0)["gc"]["policy_devices"] == 1
        p1 = L.py.gcp_torch_alloc(2 * MiB, 1, None)
        assert p1
        r = gcp.raw_stats()
        assert r["policy"] == {"name": "pressure", "devices": 2}, r["policy"]
        assert [d["device"] for d in r["devices"]] == [0, 1]
        for d in r["devices"]:
            assert d["gc"]["policy_devices"] == 2, d["gc"]
            assert d["gc"]["policy"] == "pressure", d["gc"]
        assert gcp.usage(0)[0] == MiB and gcp.usage(1)[0] == 2 * MiB
        # One policy: collections are the same seen from either device and
        # counted once in the summary.
        gcp.collect(full=True, device=1)
        s = gcp.stats()
        g0, g1 = (d["gc"] for d in s["raw"]["devices"])
        assert g0["by_kind"] == g1["by_kind"] and g0["by_reason"]["user"] == 1, (g0, g1)
        assert s["collections_total"] == sum(g0["by_kind"].values()), s["collections"]
        assert s["by_reason"]["user"] == 1, s["by_reason"]
        assert s["policy_devices"] == 2 and [d["policy_devices"] for d in s["devices"]] == [2, 2], s["devices"]
        t = gcp.stats_text()
        rows = [l.split() for l in t.splitlines()[2:]]
        assert "policy pressure over 2 device(s)" in t and [r[:2] for r in rows] == [["0", "2"], ["1", "2"]], t
        # synchronize on device 1 is the policy's, on device 1's allocator.
        assert L.c.gcp_torch_synchronize(1, None) == 0, L.c.gcp_torch_last_error()
        assert dev_stats(1)["gc"]["syncs"] == 1 and dev_stats(0)["gc"]["syncs"] == 1
        L.py.gcp_torch_free(p0, MiB, 0, None)
        L.py.gcp_torch_free(p1, 2 * MiB, 1, None)
        out = {"policy": r["policy"], "table": t.splitlines()}
    """,
    "cross_device": """
        # at_limit: nothing collects before an allocation fails, so the one
        # collection below is the one device 1's failure starts.
        L = gcp.configure(hard_limit="512MiB", policy="at_limit", backend="host", lib=LIB,
                          host_capacity="1GiB", oom="null")
        gc.disable()
        for _ in range(24):
            B(L, MiB, 0)                       # device 0: 24 MiB of garbage, far below its limit
        gcp.set_limits(8 * MiB, 16 * MiB, device=1)
        kept = [B(L, MiB, 1) for _ in range(4)]  # device 1: 4 MiB live
        for _ in range(12):
            B(L, MiB, 1)                       # and 12 MiB of garbage: device 1 is full
        assert gcp.usage(0)[0] == 24 * MiB and gcp.usage(1)[0] == 16 * MiB
        assert sum(dev_stats(1)["gc"]["by_kind"].values()) == 0
        extra = B(L, MiB, 1)                   # fails, the ladder collects, the retry fits
        assert extra.p, L.py.gcp_torch_last_error()
        d0, d1 = dev_stats(0), dev_stats(1)
        assert d1["gc"]["by_reason"]["ladder"] >= 1 and d1["gc"]["by_reason"]["user"] == 0, d1["gc"]
        assert gcp.usage(0)[0] == 0, gcp.usage(0)          # device 0's garbage went too
        assert gcp.usage(1)[0] == 5 * MiB, gcp.usage(1)
        assert d0["gc"]["reclaimed_bytes"] == 24 * MiB, d0["gc"]
        assert d1["gc"]["reclaimed_bytes"] == 12 * MiB, d1["gc"]
        assert d0["ooms"] == 0 and d1["ooms"] == 0 and gcp.raw_stats()["entries"]["ooms"] == 0
        out = {"reclaimed": [d0["gc"]["reclaimed_bytes"], d1["gc"]["reclaimed_bytes"]],
               "collections": d1["gc"]["by_kind"]}
    """,
    "small_device": """
        L = gcp.configure(hard_limit="512MiB", backend="host", lib=LIB, host_capacity="1GiB", oom="null")
        gc.disable()                           # only the policy collects
        B(L, MiB, 0)                           # device 0 first: it makes the policy
        gcp.set_limits(0, 16 * MiB, device=1)
        kept = []
        fails = 0
        for i in range(400):                   # 400 MiB through device 1: 25x its limit
            b = B(L, MiB, 1, with_gil=(i % 2 == 0))
            fails += not b.p
            if i % 4 == 0:
                B(L, 2 * MiB, 0)               # device 0's garbage: 200 MiB, under its own budget
            if i % 50 == 0:
                kept.append(b)
        d0, d1 = dev_stats(0), dev_stats(1)
        assert fails == 0 and d1["ooms"] == 0, (fails, d1["ooms"], L.py.gcp_torch_last_error())
        assert d1["reserved"]["peak"] <= 16 * MiB, d1["reserved"]
        assert d0["gc"]["policy_devices"] == 2 and d1["gc"]["policy_devices"] == 2
        assert d1["gc"]["reclaimed_bytes"] > 0 and d0["gc"]["reclaimed_bytes"] > 0, (d0["gc"], d1["gc"])
        # Every collection measured both devices: device 0's garbage did not
        # pile up to its limit while device 1 decided.
        assert d0["requested"]["peak"] < 256 * MiB, d0["requested"]
        out = {"collections": d1["gc"]["by_kind"], "reclaimed": [d0["gc"]["reclaimed_bytes"],
               d1["gc"]["reclaimed_bytes"]], "peak_live": [d0["requested"]["peak"], d1["requested"]["peak"]]}
    """,
    "concurrent_join": """
        L = gcp.configure(hard_limit="16MiB", backend="host", lib=LIB, host_capacity="1GiB", oom="null",
                          gil_wait=2.0)
        gc.disable()
        fails = [0] * 4
        go = threading.Barrier(4)
        def work(d):
            go.wait()
            for i in range(120):
                b = B(L, MiB, d, with_gil=(i % 3 != 0))
                fails[d] += not b.p
        ts = [threading.Thread(target=work, args=(d,)) for d in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        r = gcp.raw_stats()
        assert r["policy"]["devices"] == 4, r["policy"]
        assert sorted(d["device"] for d in r["devices"]) == [0, 1, 2, 3]
        assert all(d["gc"]["policy_devices"] == 4 for d in r["devices"])
        assert sum(fails) == 0 and r["entries"]["ooms"] == 0, (fails, r["entries"])
        assert all(d["reserved"]["peak"] <= 16 * MiB for d in r["devices"])
        out = {"reclaimed": [d["gc"]["reclaimed_bytes"] for d in r["devices"]]}
    """,
}

run_cases("torch_cpu_devices", PRELUDE, CASES, timeout=150)
