#!/usr/bin/env python3
"""The binding and the C API from CPython: errors as exceptions, lifetimes,
refcounting vs. cycles, re-entrancy from finalizers."""
from __future__ import annotations

import gc
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gcpressure_py as gp  # noqa: E402

MiB = 1 << 20


class Node:
    __slots__ = ("inputs", "out")

    def __init__(self, inputs, out):
        self.inputs = inputs
        self.out = out
        out.node = self


def cyclic(alloc, nbytes):
    """An array in a reference cycle with its node; returns nothing that
    keeps it alive."""
    a = alloc.array((nbytes // 4,))
    Node((), a)


class Base(unittest.TestCase):
    def setUp(self):
        self._gc = gc.isenabled()
        gc.disable()  # every collection in these tests is one we can see
        gc.collect()

    def tearDown(self):
        gc.collect()
        if self._gc:
            gc.enable()


class Errors(Base):
    def test_bad_options(self):
        with self.assertRaises(gp.InvalidArgument) as cm:
            gp.Allocator(policy="no_such_policy")
        self.assertIn("no_such_policy", str(cm.exception))
        with self.assertRaises(gp.InvalidArgument):
            gp.Allocator(hard_limit="lots")
        with self.assertRaises(gp.InvalidArgument):
            gp.Allocator(backend="abacus")

    def test_zero_size_double_free_foreign(self):
        with gp.Allocator(hard_limit="8MiB") as a:
            with self.assertRaises(gp.InvalidArgument):
                a.alloc(0)
            p = a.alloc(4096)
            a.free(p, 4096)
            with self.assertRaises(gp.MisuseError) as cm:
                a.free(p, 4096)
            self.assertEqual(cm.exception.status, 3)
            with self.assertRaises(gp.MisuseError):
                a.free(0x1000, 64)
            x = a.array((16,))
            x.free()
            with self.assertRaises(gp.MisuseError):
                x.free()
            del x  # its finalizer does nothing after free()
            a.drain()
            self.assertEqual(a.usage()[0], 0)
            self.assertEqual(a.release_errors, 0)

    def test_oom_is_memory_error(self):
        with gp.Allocator(hard_limit="4MiB", collector=None) as a:
            with self.assertRaises(MemoryError) as cm:
                a.alloc(8 * MiB)
            self.assertIsInstance(cm.exception, gp.OutOfDeviceMemory)
            self.assertIn("hard limit", str(cm.exception))
            self.assertEqual(a.stats()["ooms"], 1)

    def test_use_after_close(self):
        a = gp.Allocator(hard_limit="8MiB")
        x = a.array((1024,))
        a.close()
        a.close()  # idempotent
        with self.assertRaises(gp.ShutdownError):
            a.alloc(64)
        with self.assertRaises(gp.ShutdownError):
            a.stats()
        del x  # finalizer after destroy: ignored, no error
        self.assertEqual(a.release_errors, 0)

    def test_stats_keys(self):
        with gp.Allocator(hard_limit="8MiB") as a:
            s = a.stats()
            for k in ("requested", "reserved", "ooms", "hard_limit", "soft_limit", "ladder", "gc"):
                self.assertIn(k, s)
            self.assertEqual(s["gc"]["policy"], "pressure")
            self.assertEqual(s["hard_limit"], 8 * MiB)
            self.assertEqual(s["soft_limit"], 6 * MiB)


class Lifetimes(Base):
    def test_refcount_frees_at_once(self):
        with gp.Allocator(hard_limit="8MiB") as a:
            x = a.array((MiB // 8,))  # 512 KiB: below the policy's smallest young budget (1 MiB)
            self.assertEqual(a.usage()[0], MiB // 2)
            del x
            a.drain()
            self.assertEqual(a.usage()[0], 0)
            self.assertEqual(a.collector.requested_minor + a.collector.requested_full, 0)

    def test_cycles_wait_for_the_collector(self):
        with gp.Allocator(hard_limit="64MiB") as a:
            for _ in range(4):  # 512 KiB: below the policy's smallest young budget (1 MiB)
                cyclic(a, MiB // 8)
            a.drain()
            self.assertEqual(a.usage()[0], MiB // 2)  # refcounting freed nothing
            gc.collect()
            a.drain()
            self.assertEqual(a.usage()[0], 0)
            self.assertEqual(a.stats()["gc"]["finalized"], 4)

    def test_pressure_collects_cycles_with_gc_disabled(self):
        with gp.Allocator(hard_limit="16MiB") as a:
            for _ in range(50 * 16):  # 50x the hard limit, all in cycles
                cyclic(a, MiB)
            s = a.stats()
            self.assertEqual(s["ooms"], 0)
            self.assertLessEqual(s["reserved"]["peak"], 16 * MiB)
            self.assertGreater(a.collector.requested_minor, 0)
            self.assertEqual(a.collector.callback_errors, 0)

    def test_no_collector_runs_out(self):
        with gp.Allocator(hard_limit="16MiB", collector=None) as a:
            with self.assertRaises(gp.OutOfDeviceMemory):
                for _ in range(50 * 16):
                    cyclic(a, MiB)
            self.assertEqual(a.stats()["gc"]["policy"], "")

    def test_at_limit_ladder_collects(self):
        with gp.Allocator(hard_limit="16MiB", policy="at_limit") as a:
            for _ in range(20 * 16):
                cyclic(a, MiB)
            s = a.stats()
            self.assertEqual(s["ooms"], 0)
            self.assertGreater(s["gc"]["by_reason"]["ladder"], 0)
            self.assertEqual(s["gc"]["by_reason"]["early"], 0)

    def test_one_collector_two_allocators(self):
        c = gp.CPythonCollector(minor_generation=0)
        with gp.Allocator(hard_limit="16MiB", collector=c) as a, gp.Allocator(hard_limit="16MiB", collector=c) as b:
            for _ in range(10 * 16):
                cyclic(a, MiB)
                cyclic(b, MiB)
            self.assertEqual(a.stats()["ooms"] + b.stats()["ooms"], 0)
            self.assertEqual(c.attached, 2)
            self.assertGreater(c.python_collections[0], 0)


class Reentrancy(Base):
    """Finalizers run inside collections the library started."""

    def test_finalizer_calls(self):
        a = gp.Allocator(hard_limit="16MiB")
        seen = {"busy": 0, "alloc": 0, "other": []}

        class Probe:
            def __init__(self):
                self.me = self  # a cycle: only the collector frees it

            def __del__(self):
                try:
                    a.collect()  # not from a collection
                except gp.BusyError:
                    seen["busy"] += 1
                except Exception as e:  # noqa: BLE001
                    seen["other"].append(repr(e))
                try:
                    y = a.array((1024,))  # finalizer-safe, no nested collection
                    a.usage()
                    a.stats()
                    del y
                    seen["alloc"] += 1
                except Exception as e:  # noqa: BLE001
                    seen["other"].append(repr(e))

        for _ in range(20):
            Probe()
        for _ in range(4 * 16):  # device pressure makes the library collect
            cyclic(a, MiB)
        self.assertGreater(a.collector.requested_minor, 0)
        self.assertEqual(seen["other"], [])
        self.assertEqual(seen["busy"], 20)
        self.assertEqual(seen["alloc"], 20)
        self.assertEqual(a.stats()["ooms"], 0)
        a.close(collect=True)

    def test_finalizer_of_an_own_collection_is_inside_a_collection(self):
        # A collection CPython runs by itself (here the program's gc.collect())
        # is inside the library's collection scope from gc.callbacks "start"
        # to "stop": its finalizers allocate without collecting and may not
        # ask for a collection (Note [Inside a collection]).
        seen = {}
        with gp.Allocator(hard_limit="16MiB") as a:
            fast = a._lib.fast

            class Probe:
                def __init__(self):
                    self.me = self

                def __del__(self):
                    seen["inside"] = fast.gcpressure_in_collection()
                    try:
                        a.collect()
                        seen["collect"] = "ran"
                    except gp.BusyError:
                        seen["collect"] = "busy"
                    y = a.array((1024,))
                    del y
                    seen["alloc"] = True

            self.assertEqual(fast.gcpressure_in_collection(), 0)
            minors0 = a.collector.requested_minor + a.collector.requested_full
            Probe()
            gc.collect()
            self.assertEqual(seen, {"inside": 1, "collect": "busy", "alloc": True})
            self.assertEqual(fast.gcpressure_in_collection(), 0, "the collection's stop did not leave the scope")
            self.assertEqual(a.collector.requested_minor + a.collector.requested_full, minors0)
            self.assertEqual(fast.gcpressure_leave_collection(), gp._capi.ERR_MISUSE)

    def test_collection_already_running_on_another_thread(self):
        # Thread B is inside gc.collect(), in a finalizer that let the GIL go.
        # A collection the library asks for meanwhile must wait for it and
        # then really collect (gc.collect() alone would return 0 and do
        # nothing): Note [A collection already running].
        import threading
        import time

        started = threading.Event()

        class Slow:
            def __init__(self):
                self.me = self

            def __del__(self):
                started.set()
                time.sleep(0.3)  # releases the GIL mid-collection

        def other():
            Slow()
            gc.collect()

        with gp.Allocator(hard_limit="16MiB") as a:
            t = threading.Thread(target=other)
            t.start()
            self.assertTrue(started.wait(10))
            cyclic(a, MiB // 4)  # garbage the requested collection must find
            a.collect()
            a.drain()
            live = a.usage()[0]
            t.join()
            self.assertEqual(live, 0)
            self.assertGreaterEqual(a.collector.waits, 1)
            self.assertEqual(a.collector.skipped, 0)

    def test_collect_and_hints_outside_collections(self):
        with gp.Allocator(hard_limit="16MiB") as a:
            cyclic(a, MiB)
            a.collect()
            a.drain()
            self.assertEqual(a.usage()[0], 0)
            cyclic(a, MiB)
            a.collect(full=True)
            a.iteration()
            a.quiet_moment()
            a.trim()
            s = a.stats()
            self.assertEqual(s["gc"]["by_reason"]["user"], 2)
            self.assertEqual(a.collector.requested_full, 1)


class SyncHint(Base):
    """gcpressure_synchronize and quiet_moment(will_block) (issue 11)."""

    def test_synchronize_and_will_block(self):
        with gp.Allocator(hard_limit="16MiB") as a:
            syncs0 = a.stats()["gc"].get("syncs", 0)
            for i in range(64):
                cyclic(a, MiB // 4)
                a.iteration()
                a.synchronize()
                a.quiet_moment(will_block=(i % 8 == 0))
            a.synchronize(None)
            s = a.stats()
            self.assertEqual(s["ooms"], 0)
            self.assertEqual(s["gc"]["syncs"], syncs0 + 65)

    def test_synchronize_from_a_finalizer_is_busy(self):
        a = gp.Allocator(hard_limit="16MiB")
        seen = []

        class Probe:
            def __init__(self):
                self.me = self

            def __del__(self):
                try:
                    a.synchronize()
                    seen.append("ok")
                except gp.BusyError:
                    seen.append("busy")

        Probe()
        a.collect()  # the library's collection runs the finalizer inside it
        self.assertEqual(seen, ["busy"])
        a.close(collect=True)
        with self.assertRaises(gp.ShutdownError):
            a.synchronize()


class OwnCollections(Base):
    """CPython's own collections reach the library (Note [CPython's own collections])."""

    def test_own_vs_requested(self):
        with gp.Allocator(hard_limit="16MiB") as a:
            g0 = a.stats()["gc"]
            gc.collect()     # the program's own: whole-heap (generation 2)
            gc.collect(0)    # the program's own: young
            g1 = a.stats()["gc"]
            self.assertEqual(g1["runtime_collections"], g0["runtime_collections"] + 2)
            self.assertEqual(g1["runtime_full_collections"], g0["runtime_full_collections"] + 1)
            self.assertGreater(g1["runtime_gc_seconds"], g0["runtime_gc_seconds"])
            self.assertTrue(g1["runtime_seconds_exact"])
            a.collect()      # requested by the library: the policy's, not CPython's own
            a.collect(full=True)
            g2 = a.stats()["gc"]
            self.assertEqual(g2["runtime_collections"], g1["runtime_collections"])
            self.assertEqual(a.collector.requested_minor + a.collector.requested_full, 2)
            self.assertEqual(g2["collector_collections"], g1["collector_collections"] + 2)


class Environment(unittest.TestCase):
    """GCPRESSURE_* is the default layer; explicit options override it (issue 12)."""

    def run_child(self, env, code):
        import subprocess
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("GCPRESSURE_") or k == "GCPRESSURE_LIB"}
        child_env.update(env)
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        p = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); import gcpressure_py as gp; "
                            + code], env=child_env, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout.strip(), p.stderr

    def test_env_defaults_and_explicit_override(self):
        env = {"GCPRESSURE_HARD_LIMIT": "12MiB", "GCPRESSURE_POLICY": "at_limit"}
        rc, out, err = self.run_child(env, "a = gp.Allocator(); s = a.stats(); "
                                           "print(s['hard_limit'], s['gc']['policy'], a.policy, s['backend'])")
        self.assertEqual((rc, out), (0, f"{12 * MiB} at_limit at_limit host"), err)
        rc, out, err = self.run_child(env, "a = gp.Allocator(hard_limit='20MiB', policy='cudajl'); s = a.stats(); "
                                           "print(s['hard_limit'], s['gc']['policy'])")
        self.assertEqual((rc, out), (0, f"{20 * MiB} cudajl"), err)

    def test_bad_env_value_names_the_variable(self):
        rc, out, err = self.run_child({"GCPRESSURE_HARD_LIMIT": "lots"},
                                      "\ntry:\n gp.Allocator()\nexcept gp.InvalidArgument as e:\n print(e)")
        self.assertEqual(rc, 0, err)
        self.assertIn("GCPRESSURE_HARD_LIMIT", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
