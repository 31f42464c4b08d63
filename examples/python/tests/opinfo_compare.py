#!/usr/bin/env python3
"""PyTorch's OpInfo samples (torch.testing._internal.common_methods_invocations.op_db)
under gcpressure.torch and under PyTorch's own allocator: the same outputs.

Each allocator runs in its own interpreter over op_db in order (float32,
CUDA, sample inputs seeded per op) for at most --seconds, hashing every
output (bytes of each tensor, moved to the host; errors by type). The ops
both runs reached are compared: same hash, or same error type. Ops whose
outputs are not deterministic on their own (random ops, uninitialised memory:
empty*, new_empty, ...) are run but not compared: run twice under PyTorch's
allocator, they differ too (`nondeterministic`, found by a second plain run).
One JSON line per allocator, then the comparison.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def digest(x, h):
    import torch
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.is_complex():
            t = torch.view_as_real(t)
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, (list, tuple)):
        for y in x:
            digest(y, h)
    elif isinstance(x, dict):
        for k in sorted(x):
            digest(x[k], h)
    else:
        h.update(repr(x).encode())


# Note [A stand-in for expecttest]
# torch.testing._internal.common_utils imports expecttest (a test-only
# package PyTorch's wheel does not depend on) at module level and derives its
# TestCase from expecttest.TestCase; the GPU machine has no package registry,
# so where expecttest is missing op_db does not import at all. This script
# never calls assertExpected*, so a stand-in whose TestCase is unittest's
# makes op_db importable and changes no op's output; the child's JSON says
# it was used. A real expecttest is never shadowed.
def install_expecttest_stub() -> bool:
    import importlib.util
    import types
    import unittest
    if importlib.util.find_spec("expecttest") is not None:
        return False
    m = types.ModuleType("expecttest", "opinfo_compare.py's stand-in (Note [A stand-in for expecttest])")
    m.TestCase = type("TestCase", (unittest.TestCase,), {"__module__": "expecttest"})
    sys.modules["expecttest"] = m
    return True


def child(mode, seconds):
    stub = install_expecttest_stub()
    import torch
    if mode == "gcpressure":
        import gcpressure.torch as gcp
        gcp.install(hard_limit="16GiB")
    from torch.testing._internal.common_methods_invocations import op_db
    t_end = time.monotonic() + seconds
    out = {}
    for op in op_db:
        if time.monotonic() > t_end:
            break
        if torch.float32 not in op.supported_dtypes("cuda"):
            continue
        key = f"{op.name}.{op.variant_test_name}"
        h = hashlib.sha256()
        try:
            torch.manual_seed(0)
            for s in op.sample_inputs("cuda", torch.float32, requires_grad=False):
                digest(op(s.input, *s.args, **s.kwargs), h)
            torch.cuda.synchronize()
            out[key] = h.hexdigest()[:16]
        except Exception as e:  # noqa: BLE001
            out[key] = "error:" + e.__class__.__name__
    res = {"mode": mode, "ops": out, "expecttest_stub": stub}
    if mode == "gcpressure":
        res["stats"] = {k: v for k, v in gcp.stats().items() if k != "raw"}
    print(json.dumps(res, default=str), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--child")
    ap.add_argument("--logs", default="", help="a folder for each child's stderr (whole)")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.seconds)
    runs = {}
    for mode in ("plain", "gcpressure", "plain2"):
        p = subprocess.run([sys.executable, __file__, "--child", mode.rstrip("2"), "--seconds", str(a.seconds)],
                           capture_output=True, text=True, timeout=a.seconds * 3 + 300)
        if a.logs:
            os.makedirs(a.logs, exist_ok=True)
            with open(os.path.join(a.logs, f"opinfo_{mode}.stderr"), "w") as f:
                f.write(p.stderr)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode or not line:
            print(json.dumps({"mode": mode, "rc": p.returncode, "stderr": p.stderr[-2000:]}), flush=True)
            sys.exit(1)
        runs[mode] = json.loads(line[-1])
        print(json.dumps({"mode": mode, "ops_run": len(runs[mode]["ops"]), **({"stats": runs[mode].get("stats")}
                                                                             if "stats" in runs[mode] else {})}),
              flush=True)
    pl, gp, p2 = runs["plain"]["ops"], runs["gcpressure"]["ops"], runs["plain2"]["ops"]
    both = [k for k in pl if k in gp and k in p2]
    nondet = [k for k in both if pl[k] != p2[k]]
    compared = [k for k in both if k not in nondet]
    differ = [k for k in compared if pl[k] != gp[k]]
    print(json.dumps({"summary": True, "compared": len(compared), "same": len(compared) - len(differ),
                      "differ": differ, "nondeterministic": nondet,
                      "errors_in_both": sum(1 for k in compared if pl[k].startswith("error:"))}), flush=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
