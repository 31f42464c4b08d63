#!/usr/bin/env python3
"""libgcpressure_torch.so's API surface on the host backend, without torch:
option and init errors, the calls before/after the first allocation, zero
sizes, NULL frees, misuse, user collections by generation, hints, limits,
stats JSON, GIL checks, and the shutdown path (no Python code after
gcp_torch_python_shutdown; frees still work during finalization).

Each case runs in a fresh interpreter (the library configures once per
process). Prints one JSON line per case.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MODDIR, lib_arg, run_cases  # noqa: E402

LIB = lib_arg()

PRELUDE = textwrap.dedent(f"""
    import ctypes, gc, json, os, sys, threading
    sys.path.insert(0, {MODDIR!r})
    import gcpressure_torch as gcp
    LIB = {LIB!r}
    def expect_error(fn, *a, contains=""):
        try:
            fn(*a)
        except gcp.GcpressureTorchError as e:
            assert contains in str(e), (contains, str(e))
            return str(e)
        raise AssertionError(f"no error from {{fn}}{{a}}")
""")

CASES = {
    # Errors before init; init; errors after the first allocation.
    "init_and_errors": """
        L = gcp.Library(LIB)
        assert L.py.gcp_torch_set_option(b"nonsense", b"1") == -1
        assert b"unknown option" in L.py.gcp_torch_last_error()
        assert L.py.gcp_torch_set_option(b"handoff", b"carrier-pigeon") == -1
        assert L.py.gcp_torch_set_option(b"minor_generation", b"3") == -1
        assert L.py.gcp_torch_init(b"tpu", None, None, None, 0.0) == -1
        assert b"invalid value for backend: 'tpu'" in L.py.gcp_torch_last_error()
        assert L.py.gcp_torch_init(b"host", None, None, b"psychic", 0.0) == -1
        assert b"invalid value for policy: 'psychic'" in L.py.gcp_torch_last_error()
        # The options table's rules: a junk boolean is an error, as GCPRESSURE_VERBOSE's is.
        assert L.py.gcp_torch_set_option(b"verbose", b"maybe") == -1
        assert b"invalid value for verbose: 'maybe'" in L.py.gcp_torch_last_error()
        assert L.py.gcp_torch_set_option(b"every_n", b"0") == -1
        assert L.py.gcp_torch_init(b"host", None, b"12 parsecs", None, 0.0) == -1
        assert L.py.gcp_torch_init(b"host", None, None, None, 2.0) == -1
        # attach needs the GIL: through CDLL it has none.
        assert L.c.gcp_torch_attach_python(0) == -1
        assert b"GIL" in L.c.gcp_torch_last_error()
        assert L.py.gcp_torch_set_option(b"host_capacity", b"256MiB") == 0
        assert L.py.gcp_torch_init(b"host", b"16MiB", b"32MiB", b"pressure", 0.1) == 0
        assert L.py.gcp_torch_attach_python(1) == 0
        assert L.py.gcp_torch_alloc(0, 0, None) is None          # zero bytes: NULL, no error
        L.py.gcp_torch_free(None, 0, 0, None)                   # NULL free: nothing
        p = L.c.gcp_torch_alloc(1 << 20, 0, None)
        assert p
        assert L.py.gcp_torch_init(b"host", None, None, None, 0.0) == -1
        assert b"too late" in L.py.gcp_torch_last_error()
        assert L.py.gcp_torch_set_option(b"gil_wait", b"3") == -1
        assert L.py.gcp_torch_set_option(b"oom", b"null") == 0   # allowed any time
        assert L.py.gcp_torch_set_limits(0, 64 << 20, 32 << 20) == -1   # soft above hard
        L.py.gcp_torch_free(p, 1 << 20, 0, None)
        r = json.loads(L.stats_json())
        assert r["settings"]["backend"] == "host" and r["settings"]["policy"] == "pressure", r["settings"]
        assert r["settings"]["gc_budget"] == 0.1, r["settings"]
        d = r["devices"][0]
        assert d["hard_limit"] == 32 << 20 and d["soft_limit"] == 16 << 20, d
        assert r["entries"]["zero_size"] == 1 and r["entries"]["free_calls"] == 2, r["entries"]
        out = {"stats_keys": sorted(r)}
    """,
    # The module: configure(), stats(), usage, limits, user collections by
    # generation, hints, trim; a second configure() is refused.
    "module": """
        # at_limit: no collection of its own before a failure, so the blocks
        # below stay until the user collections.
        # freeze=False: no whole-heap collection timed, so auto's minor is a
        # young one (Note [Choosing the minor's generation]).
        L = gcp.configure(hard_limit="64MiB", policy="at_limit", backend="host", lib=LIB,
                          host_capacity="256MiB", oom="null", freeze=False)
        expect_error(gcp.configure, contains="already configured")
        class B:
            def __init__(s, n):
                s.n = n; s.p = L.c.gcp_torch_alloc(n, 0, None); s.me = s
            def __del__(s):
                L.py.gcp_torch_free(s.p, s.n, 0, None)
        gc.disable()
        for _ in range(10):
            B(1 << 20)
        live, res = gcp.usage()
        assert live == 10 << 20, live
        before = gcp.raw_stats()["python"]
        gcp.collect(full=False)
        gcp.collect(full=True)
        after = gcp.raw_stats()["python"]
        assert after["requested_gen"][2] == before["requested_gen"][2] + 1, (before, after)
        assert sum(after["requested_gen"][:2]) == sum(before["requested_gen"][:2]) + 1
        assert after["python_collections"][2] >= before["python_collections"][2] + 1
        assert gcp.usage()[0] == 0, gcp.usage()
        s = gcp.stats()
        assert s["collections"]["minor"] >= 1 and s["collections"]["blocking_full"] >= 1, s["collections"]
        assert s["by_reason"]["user"] == 2, s["by_reason"]
        assert s["peak_live_bytes"] >= 10 << 20 and s["peak_reserved_bytes"] <= 64 << 20, s
        gcp.iteration(); gcp.quiet_moment(); gcp.trim()
        assert gcp.usage()[1] == 0, gcp.usage()     # trim returned every idle segment
        gcp.set_limits(8 << 20, 16 << 20)
        s = gcp.raw_stats()["devices"][0]
        assert s["hard_limit"] == 16 << 20 and s["soft_limit"] == 8 << 20, s
        gcp.reset_peaks()
        out = {"collections": s["gc"]["by_kind"], "python": after["python_collections"]}
    """,
    # A double free and a foreign pointer are reported (stderr, misuse
    # counter), never a crash.
    "misuse": """
        L = gcp.configure(hard_limit="32MiB", backend="host", lib=LIB, host_capacity="64MiB", oom="null")
        p = L.c.gcp_torch_alloc(4096, 0, None)
        L.py.gcp_torch_free(p, 4096, 0, None)
        L.py.gcp_torch_free(p, 4096, 0, None)
        buf = ctypes.create_string_buffer(4096)
        L.py.gcp_torch_free(ctypes.addressof(buf), 4096, 0, None)
        L.py.gcp_torch_free(p, 4096, 7, None)      # a device that never allocated
        d = gcp.raw_stats()["devices"][0]
        assert d["misuse_errors"] >= 2, d["misuse_errors"]
        out = {"misuse_errors": d["misuse_errors"]}
    """,
    # oom=null: a request over the hard limit returns NULL after the ladder,
    # with the whole story in gcp_torch_last_error.
    "oom_null": """
        L = gcp.configure(hard_limit="8MiB", backend="host", lib=LIB, host_capacity="64MiB", oom="null")
        assert L.c.gcp_torch_alloc(16 << 20, 0, None) is None
        msg = L.c.gcp_torch_last_error().decode()
        assert "out of memory" in msg and "Reclaim ladder tried" in msg, msg
        e = gcp.raw_stats()["entries"]
        assert e["ooms"] == 1, e
        out = {"message_head": msg[:60]}
    """,
    # After shutdown (what atexit does) no Python code runs: collections are
    # skipped, allocations and frees still work.
    "shutdown": """
        L = gcp.configure(hard_limit="16MiB", backend="host", lib=LIB, host_capacity="64MiB", oom="null")
        at_configure = gcp.raw_stats()["python"]["python_collections"][2]  # the freeze's timed one
        L.py.gcp_torch_python_shutdown()
        ps = [L.c.gcp_torch_alloc(1 << 20, 0, None) for _ in range(4)]
        assert all(ps)
        gcp.collect(full=True)
        py = gcp.raw_stats()["python"]
        # The user's full collection was asked for (the policy may have asked
        # for a whole-heap cycle too: its first one measures the live floor).
        assert py["skipped_no_python"] >= 1 and py["requested_gen"][2] >= 1 and py["python_collections"][2] == at_configure, py
        for p in ps:
            L.c.gcp_torch_free(p, 1 << 20, 0, None)
        out = {"skipped_no_python": py["skipped_no_python"]}
    """,
    # Blocks still held by cycles when the interpreter exits are freed during
    # finalization (after atexit), from __del__, with no collection asked for
    # and no crash; a helper thread that exists does not hang the exit.
    # Each __del__ writes one "FREED live=N" line (builtins bound as defaults:
    # they outlive the modules); exit_after_result checks the lines printed
    # after RESULT: every kept block freed there, live bytes back to 0.
    "exit_with_live_cycles": """
        L = gcp.configure(hard_limit="64MiB", backend="host", lib=LIB, host_capacity="128MiB", oom="null")
        FREE = L.py.gcp_torch_free
        class B:
            def __init__(s, n):
                s.n = n; s.p = L.c.gcp_torch_alloc(n, 0, None); s.me = s
            def __del__(s, FREE=FREE, USAGE=L.py.gcp_torch_usage, WRITE=os.write, byref=ctypes.byref,
                        live=ctypes.c_size_t(), res=ctypes.c_size_t()):
                FREE(s.p, s.n, 0, None)
                USAGE(0, byref(live), byref(res))
                WRITE(1, b"FREED live=%d\\n" % live.value)
        keep = []
        def work():
            for i in range(200):
                b = B(1 << 20)
                if i % 20 == 0:
                    keep.append(b)
        t = threading.Thread(target=work); t.start(); t.join()
        assert gcp.raw_stats()["python"]["handed_off"] >= 1   # the helper exists
        out = {"kept": len(keep)}
    """,
}



def exit_after_result(stdout: str) -> str | None:
    """exit_with_live_cycles: the kept blocks are freed after the case's end
    (during finalization), and nothing is live when the last one is."""
    after = stdout.split("RESULT ", 1)[1].splitlines()[1:]
    freed = [int(ln.split("=")[1]) for ln in after if ln.startswith("FREED live=")]
    kept = json.loads(stdout.split("RESULT ", 1)[1].splitlines()[0])["kept"]
    if len(freed) < kept:
        return f"{len(freed)} blocks freed during finalization, fewer than the {kept} kept at exit"
    if freed[-1] != 0:
        return f"{freed[-1]} bytes live after the last free at exit"
    return None


run_cases("torch_cpu_api", PRELUDE, CASES, timeout=120, after={"exit_with_live_cycles": exit_after_result})
