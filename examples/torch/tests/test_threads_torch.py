#!/usr/bin/env python3
"""No deadlock with autograd's threads and other Python threads allocating.

One interpreter, gcpressure installed under a tight limit, and at once:
  main      the training loop of test_training.py, with a Python autograd
            Function in the middle (its backward runs Python code — with the
            GIL — on autograd's device thread, allocates, and leaves cyclic
            garbage) and a tensor hook; everything else of backward runs on
            the device thread without the GIL;
  cycles    a second Python thread: the reference-cycle loop (32 MiB tensors
            in cycles) on its own CUDA stream, plus a small model's
            forward/backward from that thread every few iterations;
  gil       a third Python thread calling gcp_torch_alloc through
            ctypes.PyDLL, i.e. holding the GIL inside the allocator (as
            PyTorch code that keeps the GIL does), blocks freed by __del__ of
            reference cycles.
A watchdog (faulthandler.dump_traceback_later, exit) fails the run if
anything hangs. Configurations (each a fresh interpreter): the helper handoff
(default), and the Py_AddPendingCall handoff with a short gil_wait (whose
waits must give up, not hang, while the main thread sits in backward()).

Asserts: every configuration finishes; default handoff: zero OOMs, backward
ran on a thread other than the main one, collections were requested from
threads without the GIL (handed off) and allocations arrived with the GIL
held. Prints JSON lines: one per configuration and a summary.
"""
from __future__ import annotations

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as cm  # noqa: E402
import test_training as tt  # noqa: E402


def child(args) -> None:
    torch = cm.need_torch_gpu("threads_torch")
    cm.watchdog(args.timeout)
    import gcpressure_torch as gcp
    opts = {}
    if args.child == "pending":
        opts = dict(handoff="pending", gil_wait=0.05)
    L = cm.install(gcp, hard_limit=int(args.hard_limit_gib * (1 << 30)), lib=args.lib, **opts)
    tt.deterministic(torch)
    main_ident = threading.get_ident()
    backward_threads: set[int] = set()
    errors: list[str] = []
    stop = threading.Event()
    counts = {"cycles": 0, "gil_blocks": 0, "side_backward": 0, "gil_ooms": 0, "cycles_ooms": 0}

    class Node:
        pass

    class PyScale(torch.autograd.Function):
        """Python backward on autograd's device thread: allocates, leaves cycles."""

        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            backward_threads.add(threading.get_ident())
            a, b = Node(), Node()
            a.peer, b.peer = b, a
            a.t = torch.empty(args.backward_garbage, device=g.device)  # 16 MiB of cyclic garbage
            return g * 1.0

    def middle(h):
        h = PyScale.apply(h)
        h.register_hook(lambda g: g + 0.0)  # Python hook, also on the device thread
        return h

    def cycles_thread():
        try:
            ctx, s = cm.stream(torch)
            side = torch.nn.Linear(256, 256).to(cm.DEV)
            with ctx:
                i = 0
                while not stop.is_set():
                    try:
                        a, b = Node(), Node()
                        a.peer, b.peer = b, a
                        a.t = torch.empty(args.cycle_floats, device=cm.DEV)  # 32 MiB
                        a.t.fill_(float(i))
                        if i % 8 == 0:  # a backward from this thread too
                            x = torch.randn(512, 256, device=cm.DEV, requires_grad=True)
                            side(x).square().sum().backward()
                            counts["side_backward"] += 1
                        del a, b
                    except RuntimeError as e:
                        if not cm.is_oom(e):
                            raise
                        counts["cycles_ooms"] += 1
                    i += 1
                    counts["cycles"] = i
                    time.sleep(args.cycle_pause)  # ~12 GB/s of cyclic garbage, not a flood
                if s is not None:
                    s.synchronize()
        except BaseException as e:  # noqa: BLE001
            errors.append(f"cycles: {e!r}")

    def gil_thread():
        try:
            stream = cm.current_stream_handle(torch)
            n = 2 << 20

            class Block:
                def __init__(self):
                    # The GIL stays held inside (PyDLL). A C++ exception cannot
                    # cross ctypes: the nothrow variant returns NULL on OOM.
                    self.p = L.py.gcp_torch_alloc_nothrow(n, 0, stream)
                    self.me = self
                    if not self.p:
                        counts["gil_ooms"] += 1

                def __del__(self):
                    if self.p:
                        L.py.gcp_torch_free(self.p, n, 0, stream)

            while not stop.is_set():
                Block()
                counts["gil_blocks"] += 1
                time.sleep(0.0005)
        except BaseException as e:  # noqa: BLE001
            errors.append(f"gil: {e!r}")

    side_threads = [threading.Thread(target=cycles_thread, name="cycles"),
                    threading.Thread(target=gil_thread, name="gil")]
    body, head, opt, gen = tt.build(torch, args, args.seed)
    for t in side_threads:
        t.start()
    t0 = time.perf_counter()
    losses = []
    oom = None
    try:
        for step in range(args.steps):
            loss, garbage = tt.train_step(torch, step, body, head, opt, gen, args, middle=middle)
            losses.append(loss)
            del garbage
    except RuntimeError as e:
        if not cm.is_oom(e):
            raise
        oom = str(e).splitlines()[0][:300]
    finally:
        stop.set()
        for t in side_threads:
            t.join()
    cm.sync(torch)
    wall = time.perf_counter() - t0
    s = gcp.stats()
    raw = s.pop("raw")
    last = float(losses[-1]) if losses else None
    cm.result({
        "test": "threads_torch", "mode": args.child, "steps": len(losses), "oom": oom, "errors": errors,
        "last_loss": last, "wall_seconds": wall, "counts": counts,
        "backward_on_other_thread": bool(backward_threads) and main_ident not in backward_threads,
        "backward_threads": len(backward_threads), "gcpressure": s, "gcpressure_python": raw["python"],
        "gcpressure_entries": raw["entries"],
    })


def main() -> int:
    p = tt.parser()
    p.set_defaults(steps=200, hard_limit_gib=4.0, timeout=300)
    p.add_argument("--cycle-floats", type=int, default=8 << 20, help="the cycles thread's tensors (32 MiB)")
    p.add_argument("--backward-garbage", type=int, default=4 << 20, help="floats left in cycles per backward")
    p.add_argument("--cycle-pause", type=float, default=0.002, help="seconds between the cycles thread's tensors")
    args = p.parse_args()
    if args.quick:
        args.steps = min(args.steps, 40)
    if args.child:
        child(args)
        return 0
    cm.need_torch_gpu("threads_torch")
    script = os.path.abspath(__file__)
    common = ["--cycle-floats", str(args.cycle_floats), "--backward-garbage", str(args.backward_garbage),
              "--cycle-pause", str(args.cycle_pause),
              "--steps", str(args.steps), "--batch", str(args.batch), "--inputs", str(args.inputs),
              "--width", str(args.width), "--depth", str(args.depth), "--classes", str(args.classes),
              "--seed", str(args.seed), "--hard-limit-gib", str(args.hard_limit_gib),
              "--timeout", str(args.timeout)] + (["--lib", args.lib] if args.lib else [])
    failures = []
    res = {}
    for mode in ("helper", "pending"):
        r = cm.run_child(script, ["--child", mode] + common, args.timeout + 60)
        res[mode] = r
        cm.emit(r)
        if r.get("rc") != 0:
            why = "deadlock (watchdog)" if r.get("rc") == 1 and "Timeout" in r.get("stderr_tail", "") else "failed"
            failures.append(f"{mode}: {why} (rc {r.get('rc')}, timed out: {r.get('timed_out', False)})")
            continue
        if r["errors"]:
            failures.append(f"{mode}: thread errors {r['errors']}")
        if mode == "helper":
            if r["oom"] or r["gcpressure"]["ooms"] or r["counts"]["cycles_ooms"] or r["counts"]["gil_ooms"]:
                failures.append(f"helper: out of memory ({r['oom']}, library OOMs {r['gcpressure']['ooms']}, "
                                f"counts {r['counts']})")
            if r["steps"] != args.steps:
                failures.append(f"helper: {r['steps']}/{args.steps} steps")
            if not r["backward_on_other_thread"]:
                failures.append("helper: backward did not run on autograd's worker thread")
            if r["gcpressure_python"]["handed_off"] == 0:
                failures.append("helper: no collection was requested from a thread without the GIL")
            if r["gcpressure_entries"]["entries_with_gil"] == 0:
                failures.append("helper: no allocation arrived with the GIL held")
    cm.emit({"test": "threads_torch", "summary": True, "steps": args.steps, "hard_limit_gib": args.hard_limit_gib,
             "failures": failures, "passed": not failures})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
