#!/usr/bin/env python3
"""The reference-cycle loop of issue 7 / PyTorch issue #50185.

Each iteration keeps one 64 MiB tensor alive inside a reference cycle (two
objects pointing at each other, one holding the tensor); the previous
iteration's cycle becomes garbage that only CPython's cyclic collector can
free. Under a 4 GiB limit, 1000 iterations:

  plain           PyTorch's allocator, set_per_process_memory_fraction(4 GiB):
                  runs out of memory after ~64 iterations (CPython's collector
                  counts objects, not bytes, and never runs)
  plain_gc_every  the same with gc.collect() every iteration (survives, slowly)
  acyclic         the same loop without the cycle (refcounting frees each
                  tensor: PyTorch's best case, for reference)
  gcpressure      gcpressure_torch.install(hard_limit=4 GiB), default policy

Asserts for gcpressure: zero OOMs over all iterations, peak reserved within
4 GiB, CPython collections (all of them, from gc.get_stats) at most
iterations/5 (--max-collections), every kept tensor still holds its value, and time per iteration
<= 1.2x plain PyTorch's before its OOM. Each configuration runs in its own
interpreter (the allocator is chosen before CUDA's first allocation).

--cpu-sim runs the same loop without torch or a GPU: the host backend with
64 MiB blocks owned by small objects whose __del__ frees them, and a big old
Python heap (as a process that imported torch has), against the control
(policy explicit_free: no collection asked for), which must run out of memory.

Prints JSON lines: one per configuration, then the summary.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as cm  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--lib")
p.add_argument("--iters", type=int, default=1000)
p.add_argument("--mib", type=int, default=64)
p.add_argument("--limit-gib", type=float, default=4.0)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--max-ratio", type=float, default=1.2)
p.add_argument("--max-collections", type=float, default=0.2,
               help="CPython collections (all generations, ours and its own) per iteration, at most")
p.add_argument("--gc-every-iters", type=int, default=100, help="iterations of plain_gc_every (it is slow)")
p.add_argument("--quick", action="store_true", help="200 iterations")
p.add_argument("--cpu-sim", action="store_true")
p.add_argument("--child")
p.add_argument("--timeout", type=float, default=600)
args = p.parse_args()
if args.quick:
    args.iters = min(args.iters, 200)
    args.gc_every_iters = min(args.gc_every_iters, 30)
LIMIT = int(args.limit_gib * (1 << 30))
NBYTES = args.mib << 20


class Node:
    pass


def child_torch(mode: str) -> None:
    torch = cm.need_torch_gpu("cycle_loop")
    cm.watchdog(args.timeout)
    gcp = None
    if mode == "gcpressure":
        import gcpressure_torch as gcp
        cm.install(gcp, hard_limit=LIMIT, lib=args.lib)
    else:
        cm.limit_torch(torch, LIMIT)
    torch.empty(1, device=cm.DEV)  # CUDA context, outside the timing
    cm.sync(torch)
    n = NBYTES // 4
    iters = args.gc_every_iters if mode == "plain_gc_every" else args.iters
    kept = []          # every 100th tensor stays alive for a while: its value is checked at the end
    oom_at = None
    oom_msg = None
    g0 = cm.gc_counts()
    t_timed = None
    done = 0
    t_host = 0.0
    for i in range(iters):
        if i == args.warmup:
            cm.sync(torch)
            t_timed = time.perf_counter()
        t0 = time.perf_counter()
        try:
            a = Node()
            b = Node()
            a.peer, b.peer = b, a
            t = torch.empty(n, dtype=torch.float32, device=cm.DEV)
            t.fill_(float(i))
            a.t = t
            del t
            if mode == "acyclic":
                a.peer = b.peer = None
            if i % 100 == 0:
                kept.append((i, a.t))
                if len(kept) > 4:
                    kept.pop(0)
            del a, b
            if mode == "plain_gc_every":
                gc.collect()
        except RuntimeError as e:
            if not cm.is_oom(e):
                raise
            oom_at, oom_msg = i, str(e).splitlines()[0][:300]
            break
        if i >= args.warmup:
            t_host += time.perf_counter() - t0
        done = i + 1
    cm.sync(torch)
    t_end = time.perf_counter()
    g1 = cm.gc_counts()
    timed = done - args.warmup
    per_iter = (t_end - t_timed) / timed if t_timed is not None and timed > 0 else None
    bad_values = sum(1 for i, t in kept if float(t[-1]) != float(i) or float(t[0]) != float(i))
    out = {
        "test": "cycle_loop", "mode": mode, "iterations": done, "asked": iters, "oom_at": oom_at,
        "oom_message": oom_msg, "seconds_per_iter": per_iter, "host_seconds_per_iter": t_host / timed if timed > 0 else None,
        "python_collections": [b - a for a, b in zip(g0, g1)], "bad_values": bad_values,
        "torch": torch.__version__, "python": sys.version.split()[0],
    }
    if gcp:
        s = gcp.stats()
        raw = s.pop("raw")
        out["gcpressure"] = s
        out["gcpressure_python"] = raw["python"]
        out["gcpressure_entries"] = raw["entries"]
    else:
        out["torch_max_reserved"] = cm.max_reserved(torch)
    cm.result(out)


def child_sim(mode: str) -> None:
    """No torch: 64 MiB host blocks owned by small objects (their __del__
    frees), with a 300k-object old heap as in a process that imported torch."""
    import ctypes
    import gcpressure_torch as gcp
    cm.watchdog(args.timeout)
    heap = [[i, str(i)] for i in range(300_000)]
    gc.collect()
    t = time.perf_counter()
    gc.collect()
    full_ms = (time.perf_counter() - t) * 1e3
    policy = "explicit_free" if mode == "sim_control" else "pressure"
    L = gcp.configure(hard_limit=LIMIT, policy=policy, backend="host", lib=args.lib,
                      host_capacity=2 * LIMIT, oom="null")

    class Block:
        def __init__(self, i):
            self.p = L.c.gcp_torch_alloc(NBYTES, 0, None) or 0
            if self.p:
                ctypes.c_uint64.from_address(self.p).value = i
                ctypes.c_uint64.from_address(self.p + NBYTES - 8).value = i

        def __del__(self):
            if self.p:
                L.c.gcp_torch_free(self.p, NBYTES, 0, None)

    kept = []
    oom_at = None
    g0 = cm.gc_counts()
    t0 = time.perf_counter()
    done = 0
    for i in range(args.iters):
        a = Node()
        b = Node()
        a.peer, b.peer = b, a
        a.t = Block(i)
        if not a.t.p:
            oom_at = i
            break
        if i % 100 == 0:
            kept.append((i, a.t))
            if len(kept) > 4:
                kept.pop(0)
        x = 0
        for k in range(300):  # ~10 us of Python work, about what a PyTorch iteration costs
            x += k
        del a, b
        done = i + 1
    wall = time.perf_counter() - t0
    g1 = cm.gc_counts()
    del heap
    bad = sum(1 for i, blk in kept
              if ctypes.c_uint64.from_address(blk.p).value != i
              or ctypes.c_uint64.from_address(blk.p + NBYTES - 8).value != i)
    s = gcp.stats()
    raw = s.pop("raw")
    cm.result({"test": "cycle_loop", "mode": mode, "iterations": done, "asked": args.iters, "oom_at": oom_at,
               "seconds_per_iter": wall / max(done, 1), "python_collections": [b - a for a, b in zip(g0, g1)],
               "bad_values": bad, "full_collection_ms": full_ms, "gcpressure": s, "gcpressure_python": raw["python"]})


def main() -> int:
    script = os.path.abspath(__file__)
    common = ["--iters", str(args.iters), "--mib", str(args.mib), "--limit-gib", str(args.limit_gib),
              "--warmup", str(args.warmup), "--gc-every-iters", str(args.gc_every_iters),
              "--timeout", str(args.timeout)] + (["--lib", args.lib] if args.lib else [])
    failures = []
    if args.cpu_sim:
        res = {m: cm.run_child(script, ["--child", m] + common, args.timeout + 60) for m in ("sim_control", "sim")}
        for r in res.values():
            cm.emit(r)
        ours, ctl = res["sim"], res["sim_control"]
        if ctl.get("oom_at") is None:
            failures.append("control (no collections) did not run out of memory: the loop proves nothing")
    else:
        cm.need_torch_gpu("cycle_loop")
        modes = ("plain", "plain_gc_every", "acyclic", "gcpressure")
        res = {m: cm.run_child(script, ["--child", m] + common, args.timeout + 60) for m in modes}
        for r in res.values():
            cm.emit(r)
        ours, plain = res["gcpressure"], res["plain"]
        ratio = None
        if ours.get("seconds_per_iter") and plain.get("seconds_per_iter"):
            ratio = ours["seconds_per_iter"] / plain["seconds_per_iter"]
        if ratio is None:
            failures.append("no time per iteration for plain PyTorch or for gcpressure")
        elif ratio > args.max_ratio:
            failures.append(f"time per iteration {ratio:.3f}x plain PyTorch's (> {args.max_ratio})")
        summary_extra = {
            "ratio_vs_plain": ratio,
            "ratio_vs_acyclic": (ours["seconds_per_iter"] / res["acyclic"]["seconds_per_iter"]
                                 if ours.get("seconds_per_iter") and res["acyclic"].get("seconds_per_iter") else None),
            "ratio_vs_gc_every": (ours["seconds_per_iter"] / res["plain_gc_every"]["seconds_per_iter"]
                                  if ours.get("seconds_per_iter") and res["plain_gc_every"].get("seconds_per_iter")
                                  else None),
            "plain_oom_at": plain.get("oom_at"),
            "plain_python_collections": plain.get("python_collections"),
        }
    for name, r in res.items():
        if r.get("rc") != 0:
            failures.append(f"{name}: child failed (rc {r.get('rc')}, timed out: {r.get('timed_out', False)})")
    if ours.get("rc") == 0:
        g = ours["gcpressure"]
        if ours["iterations"] != args.iters or ours.get("oom_at") is not None or g["ooms"]:
            failures.append(f"gcpressure: {ours['iterations']}/{args.iters} iterations, OOM at {ours.get('oom_at')}, "
                            f"library OOMs {g['ooms']}")
        if g["peak_reserved_bytes"] > LIMIT:
            failures.append(f"gcpressure: peak reserved {g['peak_reserved_bytes']} > limit {LIMIT}")
        pyc = sum(ours["python_collections"])
        if pyc > args.iters * args.max_collections:
            failures.append(f"gcpressure: {pyc} CPython collections for {args.iters} iterations "
                            f"(> {args.max_collections} per iteration)")
        if ours["bad_values"]:
            failures.append(f"gcpressure: {ours['bad_values']} kept tensors lost their values")
    summary = {"test": "cycle_loop", "summary": True, "cpu_sim": args.cpu_sim, "iterations": args.iters,
               "limit_bytes": LIMIT, "tensor_bytes": NBYTES,
               "gcpressure_seconds_per_iter": ours.get("seconds_per_iter"),
               "gcpressure_collections": (ours.get("gcpressure") or {}).get("collections"),
               "gcpressure_gc_seconds": (ours.get("gcpressure") or {}).get("gc_seconds"),
               "gcpressure_peak_reserved": (ours.get("gcpressure") or {}).get("peak_reserved_bytes"),
               "gcpressure_python_collections": ours.get("python_collections"),
               "failures": failures, "passed": not failures}
    if not args.cpu_sim:
        summary.update(summary_extra)
    cm.emit(summary)
    return 1 if failures else 0


if __name__ == "__main__":
    if args.child:
        if args.child.startswith("sim"):
            child_sim(args.child)
        else:
            child_torch(args.child)
        sys.exit(0)
    sys.exit(main())
