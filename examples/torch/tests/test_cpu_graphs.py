#!/usr/bin/env python3
"""CPU tests (host backend, no torch) of the synchronize hint (issue 11) and
the CUDA-graph capture path (issue 14; Note [Graph capture] in
torch_graphs.hpp), with a stand-in for torch whose CUDAGraph.capture_begin /
capture_end make a stream "capture" through the library's test hook
(gcp_torch_test_capture): what install() hooks on the real torch, driven here
without a GPU. On the H200, tests/test_graphs.py runs real captures.

Checks: synchronize() and the wrapped torch.cuda.synchronize reach the policy
(its sync counter) and then the original; uninstall() restores it. During a
capture: allocations come from a graph pool (not the main pool), no policy
hook runs (an eager allocation on another stream skips it), blocks freed in
the capture are reused by it; after the capture, eager allocations never get
a graph block; a second capture into the same pool reuses its blocks; the
pool is released (bytes back) when its graphs are gone; an unannounced
capture gets an anonymous pool that is kept; the hard limit holds during a
capture (NULL, with a message); with GCP_TORCH_PROFILE=1 the profile counts
every call; with capture_check=announced only announced captures are looked
for."""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gcpressure_torch as gcp  # noqa: E402

MiB = 1 << 20
S = T = None  # two host streams (the capturing one, another): made in main()


def dev_stats():
    r = gcp.raw_stats()
    return r["devices"][0], r["graphs"][0], r


def fake_torch(L):
    """Just what _hook_torch touches: torch.cuda.{synchronize, current_device,
    current_stream} and torch.cuda.graphs.CUDAGraph."""
    calls = {"sync": 0}
    cuda = types.SimpleNamespace()

    def synchronize(device=None):
        calls["sync"] += 1

    class CUDAGraph:
        captures = 0

        def capture_begin(self, pool=None, capture_error_mode="global"):
            CUDAGraph.captures += 1
            assert L.c.gcp_torch_test_capture(0, S, 1000 + CUDAGraph.captures) == 0

        def capture_end(self):
            assert L.c.gcp_torch_test_capture(0, S, 0) == 0

    cuda.synchronize = synchronize
    cuda.current_device = lambda: 0
    cuda.current_stream = lambda dev=None: types.SimpleNamespace(cuda_stream=S)
    cuda.graphs = types.SimpleNamespace(CUDAGraph=CUDAGraph)
    return types.SimpleNamespace(cuda=cuda), calls


def alloc(L, n, stream):
    return L.c.gcp_torch_alloc_nothrow(n, 0, stream)


def free(L, p, n, stream):
    L.c.gcp_torch_free(p, n, 0, stream)


def check_sync(L, torch, calls):
    d0, _, _ = dev_stats()
    gcp.synchronize()
    d1, _, _ = dev_stats()
    assert d1["gc"]["syncs"] == d0["gc"]["syncs"] + 1, (d0["gc"], d1["gc"])
    orig = torch.cuda.synchronize
    gcp._hook_torch(torch)
    assert torch.cuda.synchronize is not orig and torch.cuda.synchronize.__wrapped__ is orig
    torch.cuda.synchronize()
    d2, _, _ = dev_stats()
    assert calls["sync"] == 1 and d2["gc"]["syncs"] == d1["gc"]["syncs"] + 1, (calls, d2["gc"])
    print("sync: OK (gcp.synchronize and the wrapped torch.cuda.synchronize reach the policy, then the original)")
    return orig


def capture(torch, graph, pool=None):
    graph.capture_begin(pool=pool) if pool is not None else graph.capture_begin()


def check_graphs(L, torch):
    G = torch.cuda.graphs.CUDAGraph
    e1 = alloc(L, 3 * MiB, S)  # eager, before any capture
    d0, g0, _ = dev_stats()
    g1 = G()
    capture(torch, g1)
    a1, a2 = alloc(L, 3 * MiB, S), alloc(L, 5 * MiB, S)
    e2 = alloc(L, 1 * MiB, T)  # eager on another stream while S captures
    d1, gs, _ = dev_stats()
    assert a1 and a2 and e2
    assert gs["allocations"] == 2 and gs["live_blocks"] == 2 and gs["running_captures"] == 1, gs
    assert d1["allocations"] == d0["allocations"] + 1, "only the eager allocation may reach the main pool"
    assert gs["hook_skipped"] >= 1, "the policy's hook ran during a capture"
    sync0 = d1["gc"]["syncs"]
    gcp.synchronize(stream=S)
    assert dev_stats()[0]["gc"]["syncs"] == sync0, "synchronize did something during a capture"
    free(L, a1, 3 * MiB, S)
    a3 = alloc(L, 3 * MiB, S)
    assert a3 == a1, "a block freed during the capture is reused by it (same stream)"
    g1.capture_end()
    free(L, a2, 5 * MiB, S)
    free(L, a3, 3 * MiB, S)
    graph_blocks = {a1, a2}
    eager = [alloc(L, n, s) for n in (3 * MiB, 5 * MiB, 1 * MiB) for s in (S, T)]
    assert not graph_blocks & set(eager), "an eager allocation got a graph block"
    for p, n in zip(eager, [3 * MiB] * 2 + [5 * MiB] * 2 + [MiB] * 2):
        free(L, p, n, S)
    _, gs, _ = dev_stats()
    assert gs["pools"] == 1 and gs["live_blocks"] == 0 and gs["reserved"] > 0, gs
    # A second graph into the same pool (PyTorch: pool=g1.pool()): our key
    # for g1's own pool is not PyTorch's, so share through an explicit handle.
    h = (0, 777)
    g2, g3 = G(), G()
    capture(torch, g2, pool=h)
    b1 = alloc(L, 3 * MiB, S)
    g2.capture_end()
    free(L, b1, 3 * MiB, S)
    capture(torch, g3, pool=h)
    b2 = alloc(L, 3 * MiB, S)
    g3.capture_end()
    assert b2 == b1, "a capture into a shared pool reuses its free blocks"
    _, gs, _ = dev_stats()
    assert gs["pools"] == 2 and gs["captures_announced"] == 3, gs
    del g1
    gc.collect()
    _, gs, _ = dev_stats()
    assert gs["pools"] == 1 and gs["pools_released"] == 1, f"g1's pool must go with g1: {gs}"
    del g2
    gc.collect()
    _, gs, _ = dev_stats()
    assert gs["pools"] == 1, "the shared pool stays while g3 lives"
    del g3
    gc.collect()
    _, gs, _ = dev_stats()
    assert gs["pools"] == 1 and gs["live_blocks"] == 1, "b2 is live: the pool waits for it"
    free(L, b2, 3 * MiB, S)
    assert gcp.trim() is None
    _, gs, _ = dev_stats()
    assert gs["pools"] == 0 and gs["reserved"] == 0 and gs["pools_released"] == 2, gs
    free(L, e1, 3 * MiB, S)
    free(L, e2, 1 * MiB, T)
    print("graphs: OK (graph pools, reuse within a pool, none across, shared pools, release with the graphs)")


def check_anonymous_and_limit(L):
    assert L.c.gcp_torch_test_capture(0, S, 4242) == 0  # nobody announces it
    p = alloc(L, 2 * MiB, S)
    assert p
    big = alloc(L, 1 << 30, S)  # beyond the 256 MiB hard limit, and nothing may be collected
    msg = L.c.gcp_torch_last_error().decode()
    assert not big and "graph capture" in msg, msg
    assert L.c.gcp_torch_test_capture(0, S, 0) == 0
    free(L, p, 2 * MiB, S)
    gcp.trim()
    _, gs, _ = dev_stats()
    assert gs["captures_anonymous"] == 1 and gs["pools"] == 1 and gs["reserved"] > 0, gs
    print(f"anonymous capture: OK (pool kept, {gs['reserved']} bytes); hard limit during a capture: OK ({msg[:60]}...)")


def child_profile(lib):
    L = gcp.configure(hard_limit="64MiB", backend="host", host_capacity="256MiB", oom="null", lib=lib)
    s = L.c.gcp_torch_test_host_stream()
    for _ in range(100):
        p = L.c.gcp_torch_alloc_nothrow(4096, 0, s)
        L.c.gcp_torch_free(p, 4096, 0, s)
    for _ in range(10):  # the null stream: never capturing, not asked (gcpressure_torch.cpp, alloc_impl)
        p = L.c.gcp_torch_alloc_nothrow(4096, 0, None)
        L.c.gcp_torch_free(p, 4096, 0, None)
    prof = gcp.raw_stats()["profile"]
    assert prof["enabled"] and prof["alloc"]["calls"] == 110 and prof["free"]["calls"] == 110, prof
    assert prof["allocate_core"]["calls"] == 110 and prof["capture_check"]["calls"] == 100, prof
    assert prof["alloc"]["ns"] >= prof["allocate_core"]["ns"] > 0, prof
    print("profile: OK", {k: v for k, v in prof.items() if k != "enabled"})


def child_announced(lib):
    """capture_check=announced: only announced captures are seen."""
    global S, T
    L = gcp.configure(hard_limit="64MiB", backend="host", host_capacity="256MiB", oom="null", lib=lib,
                      capture_check="announced")
    S, T = L.c.gcp_torch_test_host_stream(), L.c.gcp_torch_test_host_stream()
    torch, _ = fake_torch(L)
    gcp._hook_torch(torch)
    assert L.c.gcp_torch_test_capture(0, S, 31) == 0  # unannounced: not looked for
    p = alloc(L, MiB, S)
    assert dev_stats()[1]["allocations"] == 0, "announced mode asked an unannounced stream"
    assert L.c.gcp_torch_test_capture(0, S, 0) == 0
    free(L, p, MiB, S)
    g = torch.cuda.graphs.CUDAGraph()
    g.capture_begin()
    q = alloc(L, MiB, S)
    g.capture_end()
    _, gs, r = dev_stats()
    assert gs["allocations"] == 1 and r["settings"]["capture_check"] == "announced", (gs, r["settings"])
    free(L, q, MiB, S)
    print("capture_check=announced: OK (unannounced capture not looked for, announced one served by a graph pool)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--child-profile", action="store_true")
    ap.add_argument("--child-announced", action="store_true")
    a = ap.parse_args()
    if a.child_profile:
        return child_profile(a.lib)
    if a.child_announced:
        return child_announced(a.lib)
    L = gcp.configure(hard_limit="256MiB", backend="host", host_capacity="1GiB", oom="null", lib=a.lib)
    global S, T
    S, T = L.c.gcp_torch_test_host_stream(), L.c.gcp_torch_test_host_stream()
    assert S and T
    free(L, alloc(L, 4096, None), 4096, None)  # the device's allocator exists from here
    torch, calls = fake_torch(L)
    orig = check_sync(L, torch, calls)
    check_graphs(L, torch)
    check_anonymous_and_limit(L)
    gcp.uninstall()
    assert torch.cuda.synchronize is orig, "uninstall() must restore torch.cuda.synchronize"
    print("uninstall: OK")
    for flag, env in (("--child-profile", dict(os.environ, GCP_TORCH_PROFILE="1")),
                      ("--child-announced", dict(os.environ))):
        cmd = [sys.executable, os.path.abspath(__file__), flag] + (["--lib", a.lib] if a.lib else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        assert r.returncode == 0, f"{flag} child failed"
    print("test_cpu_graphs: all OK")


if __name__ == "__main__":
    main()
