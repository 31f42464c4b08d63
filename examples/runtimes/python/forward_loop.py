#!/usr/bin/env python3
"""The forward loop of examples/forward_loop, in CPython.

`layers` Dense layers y = relu(W x + b) per iteration. Each layer allocates
its broadcast temporary (W x) and its output as DeviceArrays, and records
each in an autograd-like graph Node that points back at it (array.node ->
node, node.out -> array, node.inputs -> the input arrays): a reference cycle,
so refcounting frees none of them and only CPython's cyclic collector can
(PyTorch issue #50185). W, b and the input x stay alive for the whole run.

Compute (memory behaviour is what this shows, not FLOPs):
  touch  host backend: memset each new array with a tag byte, and check the
         tags of its inputs (a block handed out again while still referenced
         would show up as a wrong tag). The default on the host backend.
  exact  host backend, small shapes: the real float32 y = relu(W x + b) in
         pure Python over the device memory, checked against a reference.
  cuda   cudaMemset through libcudart when it can be loaded (CUDA backends).
  none   allocate only.

The last line of output is one JSON object: the summary examples/forward_loop
prints (policy, backend, iterations, ooms, peak_live_bytes,
peak_reserved_bytes, collections_minor, collections_full,
collections_full_steady, max_pause_seconds, gc_seconds, wall_seconds,
finalized, ...) plus CPython's own collection counts (python_gc_*).

--policy explicit_free is the oracle: the loop frees each array
(DeviceArray.free) the moment it dies. --workload steady|promote|burst|varied
are the C++ loop's workloads (workloads.py has their definitions). Each
iteration ends with the iteration hint, then synchronize() (the sync point;
--no-sync leaves it out, --no-hints the hint).

Exit status: 0; 1 when --assert-bounded or --expect-oom did not hold; 2 on
a usage or library error; 77 only with --skip-without-backend, a CUDA backend
and that backend unsupported here (no GPU) when the allocator is created. On
the host backend, and anywhere after the allocator exists, an unsupported
error is a failure (2), never a skip.

Baselines (see README.md):
  --collector none          the library's hook off: no collector registered,
                            CPython collects on its own object-count schedule
  --collector none --python-gc off   nothing collects: the cycles pile up
  --policy at_limit         collect only when an allocation fails
  --policy runtime_native   CPython's own answer only: the library asks for no
                            collection and the loop calls gc.collect() every
                            --collect-every (1) iterations, what users write
                            (Note [CPython's own mechanism: gc.collect() every N])
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gcpressure_py as gp  # noqa: E402
from workloads import NAMES as WORKLOADS, Workload  # noqa: E402


class Node:
    """An autograd-like graph node: the op, its inputs and its output."""

    __slots__ = ("op", "inputs", "out")

    def __init__(self, op, inputs, out):
        self.op = op
        self.inputs = inputs
        self.out = out
        out.node = self  # the cycle: out -> node -> out


# --- compute ---------------------------------------------------------------------


class Compute:
    def __init__(self, mode: str, backend: str):
        self.mode = mode
        self.tag = 0
        self.errors = 0
        self.cudart = None
        if mode == "cuda":
            for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
                try:
                    self.cudart = ctypes.CDLL(name)
                    break
                except OSError:
                    pass
            if self.cudart is None:
                print("forward_loop.py: libcudart not found; compute none", file=sys.stderr)
                self.mode = "none"
            else:
                self.cudart.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
                self.cudart.cudaMemset.restype = ctypes.c_int

    def fill(self, a) -> None:
        """Gives a new array its contents (a fresh tag)."""
        self.tag = self.tag % 255 + 1
        a.tag = self.tag
        if self.mode == "touch":
            ctypes.memset(a.ptr, a.tag, a.nbytes)
        elif self.mode == "cuda":
            if self.cudart.cudaMemset(a.ptr, a.tag, a.nbytes) != 0:
                self.errors += 1

    def check(self, a) -> None:
        """The array still holds what fill() wrote (touch mode)."""
        if self.mode != "touch" or not a.tag:
            return
        n = a.nbytes
        for off in (0, n // 2, n - 1):
            if ctypes.c_uint8.from_address(a.ptr + off).value != a.tag:
                self.errors += 1
                print(f"forward_loop.py: {a!r} lost its contents at byte {off}", file=sys.stderr)
                return


def floats(a):
    return (ctypes.c_float * (a.nbytes // 4)).from_address(a.ptr)


def dense_exact(W, b, x, tmp, out, d, batch) -> None:
    """tmp = W x; out = relu(tmp + b), float32, row-major (d x d)(d x batch)."""
    w, xv, bv, t, o = floats(W), floats(x), floats(b), floats(tmp), floats(out)
    for i in range(d):
        row = i * d
        for c in range(batch):
            s = 0.0
            for k in range(d):
                s += w[row + k] * xv[k * batch + c]
            t[i * batch + c] = s
            v = t[i * batch + c] + bv[i]  # the float32 temporary, as the device would
            o[i * batch + c] = v if v > 0 else 0.0


def reference(Ws, bs, x0, d, batch):
    """The same layers on Python floats rounded to float32 at every store."""
    f32 = lambda v: ctypes.c_float(v).value  # noqa: E731
    x = list(x0)
    for W, b in zip(Ws, bs):
        y = [0.0] * (d * batch)
        for i in range(d):
            for c in range(batch):
                s = 0.0
                for k in range(d):
                    s += W[i * d + k] * x[k * batch + c]
                v = f32(f32(s) + b[i])
                y[i * batch + c] = v if v > 0 else 0.0
        x = y
    return x


# --- the loop ---------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # Values go to the C library's options table as given (its names, aliases
    # and sizes, its message for a bad one); only the loop's own flags parse here.
    p.add_argument("--backend", default="host")
    p.add_argument("--policy", default="pressure")
    p.add_argument("--collector", default="python", choices=["python", "none"],
                   help="python: gc.collect as the library's collector; none: no collector registered")
    p.add_argument("--minor-generation", type=int, default=1, choices=[0, 1])
    p.add_argument("--python-gc", default="on", choices=["on", "off"],
                   help="CPython's own automatic collections (gc.enable / gc.disable)")
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hard-limit", default="64MiB")
    p.add_argument("--soft-limit", default=None)
    p.add_argument("--host-capacity", default="8GiB")
    p.add_argument("--gc-budget", default=None)
    p.add_argument("--every-n", default=None)
    p.add_argument("--collect-every", type=int, default=1,
                   help="runtime_native: the loop's gc.collect() every N iterations (>= 1)")
    p.add_argument("--compute", default=None, choices=["touch", "exact", "cuda", "none"],
                   help="default: touch on the host backend, cuda otherwise")
    p.add_argument("--workload", default="steady", choices=WORKLOADS, help="workloads.py has their definitions")
    p.add_argument("--promote-share", type=float, default=0.25)
    p.add_argument("--burst-every", type=int, default=50)
    p.add_argument("--burst-fraction", type=float, default=0.5)
    p.add_argument("--no-hints", action="store_true", help="do not call gcpressure_iteration() per iteration")
    p.add_argument("--no-sync", action="store_true", help="do not call synchronize() per iteration")
    p.add_argument("--stop-on-oom", action="store_true")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--lib", default=None, help="libgcpressure.so (default: $GCPRESSURE_LIB or the build tree)")
    p.add_argument("--quiet", action="store_true", help="only the JSON line")
    p.add_argument("--assert-bounded", action="store_true",
                   help="fail unless ooms == 0, peak reserved <= hard limit, finalizers freed the cycles, "
                        "and total allocation >= --min-ratio x hard limit")
    p.add_argument("--min-ratio", type=float, default=20.0)
    p.add_argument("--expect-oom", action="store_true", help="fail unless at least one allocation ran out of memory")
    p.add_argument("--skip-without-backend", action="store_true",
                   help="exit 77 (skipped) when a CUDA backend is unsupported here (no usable GPU)")
    return p.parse_args(argv)


class BackendUnavailable(Exception):
    """A CUDA backend cannot be created here (no usable GPU): the only skip."""


class ForwardLoop:
    """One run: the allocator, the model, the workload, then the loop's state."""

    def __init__(self, args):
        self.args = args
        backend = args.backend
        self.compute_mode = args.compute or ("touch" if backend == "host" else "cuda")
        if self.compute_mode in ("touch", "exact") and backend != "host":
            raise SystemExit("forward_loop.py: --compute touch/exact need the host backend")
        if self.compute_mode == "exact" and args.d * args.d * args.batch * args.layers > 2_000_000:
            raise SystemExit("forward_loop.py: --compute exact is pure Python: use small shapes (e.g. --d 16 --batch 4)")
        if args.python_gc == "off":
            gc.disable()
        else:
            gc.enable()
        gc.collect()
        try:
            self.alloc = gp.Allocator(backend=backend, hard_limit=args.hard_limit, soft_limit=args.soft_limit,
                                      policy=args.policy, host_capacity=args.host_capacity,
                                      gc_budget=args.gc_budget, every_n=args.every_n,
                                      collector=(args.collector == "python"),
                                      minor_generation=args.minor_generation, library=args.lib)
        except gp.UnsupportedError as e:
            if backend != "host":
                raise BackendUnavailable(f"backend {backend}: {e}") from e
            raise
        self.comp = Compute(self.compute_mode, backend)
        self.d, self.batch, self.L = args.d, args.batch, args.layers
        self.explicit = self.alloc.policy == "explicit_free"
        self.make_model()
        self.wl = Workload(args.workload, self.alloc, self.comp.fill, oracle=self.explicit,
                           hard_limit=self.alloc.stats()["hard_limit"], seed=args.seed,
                           promote_share=args.promote_share, burst_every=args.burst_every,
                           burst_fraction=args.burst_fraction)
        self.inflight = []  # under the oracle: this iteration's arrays (an OOM must not leak them)
        self.mismatches = 0
        self.checksum = 0.0

    def make_model(self) -> None:
        """W, b per layer and the input x, alive for the whole run."""
        d, batch, alloc, comp, exact = self.d, self.batch, self.alloc, self.comp, self.compute_mode == "exact"
        rng = random.Random(self.args.seed)
        self.Ws, self.bs = [], []
        host_W, host_b = [], []
        for _ in range(self.L):
            W, b = alloc.array((d, d)), alloc.array((d,))
            if exact:
                hw = [ctypes.c_float(rng.uniform(-1, 1) / math.sqrt(d)).value for _ in range(d * d)]
                hb = [ctypes.c_float(rng.uniform(-0.1, 0.1)).value for _ in range(d)]
                floats(W)[:] = hw
                floats(b)[:] = hb
                host_W.append(hw)
                host_b.append(hb)
            else:
                comp.fill(W)
                comp.fill(b)
            self.Ws.append(W)
            self.bs.append(b)
        self.x = alloc.array((d, batch))
        self.expected = None
        if exact:
            hx = [ctypes.c_float(rng.uniform(-1, 1)).value for _ in range(d * batch)]
            floats(self.x)[:] = hx
            self.expected = reference(host_W, host_b, hx, d, batch)
        else:
            comp.fill(self.x)
        self.model_bytes = sum(a.nbytes for a in self.Ws + self.bs) + self.x.nbytes

    def new_array(self):
        a = self.alloc.array((self.d, self.batch))
        if self.explicit:
            self.inflight.append(a)
        return a

    def forward(self, it):
        """One forward pass from x; returns the output (the oracle freed the rest)."""
        h, wl = self.x, self.wl
        for layer in range(self.L):
            W, b = self.Ws[layer], self.bs[layer]
            self.comp.check(h)
            tmp = self.new_array()
            Node("matmul", (W, h), tmp)
            out = self.new_array()
            Node("bias_relu", (tmp, b), out)
            if self.compute_mode == "exact":
                dense_exact(W, b, h, tmp, out, self.d, self.batch)
            else:
                self.comp.fill(tmp)
                self.comp.fill(out)
            wl.after_layer(it, tmp, out)
            wl.died(tmp)  # the oracle: free each array as soon as it is dead
            if h is not self.x:
                wl.died(h)
            h = out
        return h

    def iteration(self, it) -> None:
        """One iteration's arrays (raises OutOfDeviceMemory); frees under the oracle."""
        try:
            self.wl.begin_iteration(it)
            h = self.forward(it)
            if self.expected is not None:
                y = floats(h)
                d, batch = self.d, self.batch
                if any(y[i] != self.expected[i] for i in range(d * batch)):
                    self.mismatches += 1
                self.checksum = sum(y[i * batch] for i in range(d))
            self.wl.died(h)
            self.wl.end_iteration(it)
        finally:
            h = y = None  # the whole chain is now garbage in cycles
            for a in self.inflight:  # the oracle: what an OOM left behind
                self.wl.died(a)
            self.inflight.clear()


def run(args) -> dict:
    fl = ForwardLoop(args)
    alloc, wl = fl.alloc, fl.wl
    py0 = gp.python_gc_counts()
    col = alloc.collector
    col0 = col.snapshot() if col else None
    # Steady state as in the C++ loop: after the first 10% of iterations.
    steady_from = args.iters // 10
    full_at_steady = None
    first_oom = None
    first_oom_message = None
    max_iter = 0.0
    iterations = 0
    progress_every = max(1, args.iters // 10)
    # Note [CPython's own mechanism: gc.collect() every N]
    # CPython has no call for memory it does not see: its collector runs on
    # object counts (gc.set_threshold, generation 0 after 700 net
    # allocations), and a DeviceArray is one object whatever its bytes. What
    # users write instead (PyTorch issue #50185's workaround, the gc module's
    # docs: "gc.collect(): run a full collection") is a gc.collect() every N
    # iterations. Under --policy runtime_native the library asks for nothing
    # and the loop does that; CPython's automatic collections run as well.
    native_every = args.collect_every if alloc.policy == "runtime_native" else 0
    if args.collect_every < 1:
        raise SystemExit("forward_loop.py: --collect-every needs N >= 1")
    t_start = time.perf_counter()
    for it in range(args.iters):
        if it == steady_from:
            full_at_steady = blocking_counts(alloc.stats())
        t0 = time.perf_counter()
        try:
            fl.iteration(it)
        except gp.OutOfDeviceMemory as e:
            if first_oom is None:
                first_oom = it
                first_oom_message = str(e)
                if not args.quiet:
                    print(f"iteration {it}: out of device memory: {str(e).splitlines()[0]}", file=sys.stderr)
            if args.stop_on_oom:
                iterations += 1
                break
        if native_every and (it + 1) % native_every == 0:
            gc.collect()  # Note [CPython's own mechanism: gc.collect() every N]
        if not args.no_hints:
            alloc.iteration()
        if not args.no_sync:
            alloc.synchronize()  # the sync point (cudaMemset is queued on the default stream)
        iterations += 1
        max_iter = max(max_iter, time.perf_counter() - t0)
        if not args.quiet and (it + 1) % progress_every == 0:
            live, reserved = alloc.usage()
            print(f"iteration {it + 1}: live {live / 2**20:.1f} MiB, reserved {reserved / 2**20:.1f} MiB, "
                  f"python collections {sum(gp.python_gc_counts()) - sum(py0)}", flush=True)
    wall = time.perf_counter() - t_start
    wl.release()
    py_by_gen = [b - a for a, b in zip(py0, gp.python_gc_counts())]
    r = summary(args, fl, wall, iterations, py_by_gen, col0, full_at_steady or (0, 0))
    r.update({"max_iteration_seconds": max_iter, "first_oom_iteration": first_oom, "first_oom": first_oom_message})
    # Tear down: drop the model, collect what is left, give everything back.
    fl.Ws = fl.bs = fl.x = None
    gc.collect()
    alloc.drain()  # finalizers only queued their blocks
    r["live_at_exit_bytes"] = alloc.usage()[0]
    alloc.close()
    gc.enable()
    return r


def blocking_counts(s) -> tuple[int, int]:
    """(the policy's blocking fulls, blocking whole-heap collections of any
    origin: those, the policy's back-to-back cycles and CPython's own
    generation-2 collections, all stop-the-world and exact)."""
    g = s["gc"]
    policy = g["by_kind"]["blocking_full"]
    return policy, policy + g.get("blocking_cycles", 0) + g.get("runtime_full_collections", 0)


def summary(args, fl, wall, iterations, py_by_gen, col0, full_at_steady) -> dict:
    """The JSON summary: the C++ loop's keys, then CPython's own."""
    alloc, col = fl.alloc, fl.alloc.collector
    s = alloc.stats()
    now_policy, now_any = blocking_counts(s)
    g = s["gc"]
    kinds = g["by_kind"]
    d, batch, L = fl.d, fl.batch, fl.L
    return {
        "runtime": "cpython",
        "python": sys.version.split()[0],
        "policy": g["policy"] or "none",
        "collector": args.collector,
        "backend": s["backend"],
        "compute": fl.comp.mode,
        "workload": args.workload,
        "explicit_frees": fl.wl.explicit_frees,
        "synchronize": not args.no_sync,
        "iterations": iterations,
        "iterations_requested": args.iters,
        "stopped_early": iterations < args.iters,
        "ooms": s["ooms"],
        "peak_live_bytes": s["requested"]["peak"],
        "peak_reserved_bytes": s["reserved"]["peak"],
        "final_live_bytes": s["requested"]["current"],
        "final_reserved_bytes": s["reserved"]["current"],
        "collections_minor": kinds["minor"],
        "collections_full": kinds["incremental_full"] + kinds["blocking_full"],
        "collections_incremental_full": kinds["incremental_full"],
        "collections_blocking_full": kinds["blocking_full"],
        # As the C++ loop: blocking whole-heap collections of any origin after the first 10%.
        "collections_full_steady": now_any - full_at_steady[1],
        "collections_full_steady_any": now_any - full_at_steady[1],
        "collections_full_steady_policy": now_policy - full_at_steady[0],
        "collections_by_reason": g["by_reason"],
        "incremental_slices": g["incremental_slices"],
        "ladder_full_collections": s["ladder"]["full_collection"],
        "max_pause_seconds": g["longest_pause_seconds"],
        "gc_seconds": g["gc_seconds"],
        "gc_fraction": g["gc_seconds"] / wall if wall > 0 else 0,
        "wall_seconds": wall,
        "time_per_iter": wall / max(1, iterations),
        "finalized": g["finalized"],
        # Every collection, whoever started it (the library's view; None: an older library).
        "collections_runtime": g.get("runtime_collections"),
        "exposed_gc_seconds": g.get("exposed_gc_seconds"),
        "gc_seconds_all": g.get("gc_seconds_all"),
        # CPython's own collections (gc.callbacks: exact counts and times), not the policy's.
        "python_own_collections": col.own_collections - col0["own_collections"] if col else None,
        "python_own_full_collections": col.own_full_collections - col0["own_full_collections"] if col else None,
        "python_own_seconds": col.own_seconds - col0["own_seconds"] if col else None,
        "allocations": s["allocations"],
        # CPython's own view (every collection, the library's requests included)
        "runtime_collections": sum(py_by_gen),
        "runtime_full_collections": py_by_gen[2],
        "runtime_gc_seconds": (col.python_seconds - col0["python_seconds"]) if col else None,
        "python_gc_enabled": args.python_gc == "on",
        "python_gc_collections": sum(py_by_gen),
        "python_gc_collections_by_generation": py_by_gen,
        "minor_generation": args.minor_generation if col else None,
        "layers": L, "d": d, "batch": batch,
        "bytes_per_iteration": 2 * L * d * batch * 4,
        "model_bytes": fl.model_bytes,
        "total_allocated_bytes": s["requested"]["total"],
        "allocation_to_limit_ratio": round(s["requested"]["total"] / max(1, s["hard_limit"]), 2),
        "hard_limit": s["hard_limit"], "soft_limit": s["soft_limit"],
        "device_total": s["device_total"],
        "gc_budget": float(args.gc_budget or 0.05),
        "oom_retried": alloc.oom_retried,
        "check_errors": fl.comp.errors + fl.mismatches,
        "release_errors": alloc.release_errors,
        "checksum": fl.checksum,
        # Which figures are bounds, and why (the C++ loop's "bounds" object).
        "bounds": {
            "collections_runtime": "exact: CPython's own collections seen by gc.callbacks",
            "runtime_full_collections": "exact: generation-2 collections",
            "runtime_gc_seconds": "exact: timed from gc.callbacks start to stop",
            "exposed_gc_seconds": "the policy's part measured where the backend times its events, else an "
                                  "upper bound; CPython's own time all counted",
            "collections_full_steady": "exact: CPython's collections are stop-the-world",
        },
    }


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        r = run(args)
    except BackendUnavailable as e:
        if args.skip_without_backend:
            print(f"forward_loop.py: skipped: {e}", file=sys.stderr)
            return 77
        print(f"forward_loop.py: {e}", file=sys.stderr)
        return 2
    except gp.GcpressureError as e:
        print(f"forward_loop.py: {e}", file=sys.stderr)
        return 2
    ok = True
    if not args.quiet:
        print(f"{r['policy']} / collector {r['collector']} / python gc {'on' if r['python_gc_enabled'] else 'off'}: "
              f"{r['iterations']} iterations, {r['ooms']} OOMs, peak reserved {r['peak_reserved_bytes'] / 2**20:.1f} "
              f"MiB of {r['hard_limit'] / 2**20:.0f} MiB, {r['total_allocated_bytes'] / 2**30:.2f} GiB allocated "
              f"({r['allocation_to_limit_ratio']}x the limit), library collections {r['collections_minor']} minor + "
              f"{r['collections_full']} full, python collections {r['python_gc_collections']}, "
              f"{r['wall_seconds']:.2f} s", file=sys.stderr)
    if args.assert_bounded:
        fails = []
        if r["ooms"]:
            fails.append(f"{r['ooms']} OOMs")
        if r["peak_reserved_bytes"] > r["hard_limit"]:
            fails.append(f"peak reserved {r['peak_reserved_bytes']} > hard limit {r['hard_limit']}")
        if r["iterations"] < args.iters:
            fails.append(f"only {r['iterations']} of {args.iters} iterations")
        if r["total_allocated_bytes"] < args.min_ratio * r["hard_limit"]:
            fails.append(f"allocated {r['total_allocated_bytes']} < {args.min_ratio} x hard limit")
        if r["check_errors"] or r["release_errors"]:
            fails.append(f"{r['check_errors']} check errors, {r['release_errors']} release errors")
        if r["live_at_exit_bytes"]:
            fails.append(f"{r['live_at_exit_bytes']} bytes still live after the final gc.collect()")
        for f in fails:
            print(f"forward_loop.py: FAILED: {f}", file=sys.stderr)
        ok = ok and not fails
    if args.expect_oom and not r["ooms"]:
        print("forward_loop.py: FAILED: expected an out-of-memory error, none happened", file=sys.stderr)
        ok = False
    print(json.dumps(r, separators=(",", ":")), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
