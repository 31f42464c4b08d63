#!/usr/bin/env python3
"""CUDA graphs under the plug-in (issue 14; Note [Graph capture] in
torch_graphs.hpp), against PyTorch's own allocator. H200 test; exit 77
without torch or a GPU.

Each allocator runs in a fresh interpreter (PyTorch's allocator is chosen
before the first CUDA allocation):
  capture  an MLP's forward (3 Linear layers, batch 256) is warmed up on a side
           stream, captured with torch.cuda.graph and replayed on 6 inputs;
           then eager work allocates and fills ~160 MiB of tensors of the
           graph's sizes and frees it, and the 6 replays run again: they must
           equal the first ones bitwise (no eager tensor got a graph block);
           replays must match eager forwards (allclose); with the plug-in the
           capture used a graph pool, and deleting the graph releases it.
  compile  torch.compile(mode="reduce-overhead") on a small MLP, 8 calls x 2:
           allclose to eager; once with inductor's plain cudagraphify
           (triton.cudagraph_trees = False: torch.cuda.graph per compiled
           graph) and once with cudagraph trees (the default), which call
           torch._C._cuda_getCheckpointState after recording — a
           CUDAPluggableAllocator raises "does not yet support
           getCheckpointState" there (PyTorch, any pluggable allocator): that
           error is reported, not counted as a failure of the plug-in.
Across allocators: replay outputs bitwise equal, compiled outputs bitwise
equal. The summary line says what failed, with PyTorch's error text when a
step raised (e.g. cudaErrorStreamCaptureInvalidated, the bug this fixes)."""
from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import SMOKE, emit, need_torch_gpu, result, run_child, watchdog  # noqa: E402
import _common  # noqa: E402


def digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def mlp(torch, width: int):
    return torch.nn.Sequential(torch.nn.Linear(1024, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 1024)).cuda()


def graph_stats(gcp):
    return gcp.raw_stats()["graphs"][0] if gcp else None


def part_capture(torch, gcp, out: dict) -> None:
    torch.manual_seed(0)
    model = mlp(torch, 2048)
    inputs = [torch.randn(256, 1024, device="cuda") for _ in range(6)]
    static_x = torch.zeros(256, 1024, device="cuda")
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)

        def replay_all():
            ys = []
            for x in inputs:
                static_x.copy_(x)
                g.replay()
                ys.append(static_y.clone())
            torch.cuda.synchronize()
            return ys

        first = replay_all()
        out["after_capture"] = graph_stats(gcp)
        junk = []
        for i in range(40):  # ~160 MiB of eager tensors of the graph's sizes, filled
            junk.append(torch.full((256, 2048), float(i), device="cuda"))
            junk.append(torch.full((256, 1024), -float(i), device="cuda"))
            junk.append(model(torch.randn(256, 1024, device="cuda")))
        torch.cuda.synchronize()
        del junk
        second = replay_all()
    out["replay_digest"] = digest(first)
    out["replays_stable"] = all(bool(torch.equal(a, b)) for a, b in zip(first, second))
    out["replay_vs_eager_max_abs"] = max(float((a - b).abs().max()) for a, b in zip(first, eager))
    out["replay_matches_eager"] = all(bool(torch.allclose(a, b, rtol=1e-3, atol=1e-3)) for a, b in zip(first, eager))
    del g, static_y, first, second
    gc.collect()
    torch.cuda.synchronize()
    if gcp:
        gcp.trim()
    out["after_release"] = graph_stats(gcp)


def part_compile(torch, out: dict, trees: bool) -> None:
    import torch._dynamo
    import torch._inductor.config as ic
    torch._dynamo.reset()
    ic.triton.cudagraph_trees = trees
    tag = "compile_trees" if trees else "compile"
    torch.manual_seed(1)
    model = mlp(torch, 512)
    compiled = torch.compile(model, mode="reduce-overhead")
    inputs = [torch.randn(64, 1024, device="cuda") for _ in range(8)]
    with torch.no_grad():
        eager = [model(x).clone() for x in inputs]
        outs = []
        for _ in range(2):  # the first calls warm up and record; later ones replay
            outs = [compiled(x).clone() for x in inputs]
    torch.cuda.synchronize()
    out[tag + "_digest"] = digest(outs)
    out[tag + "_vs_eager_max_abs"] = max(float((a - b).abs().max()) for a, b in zip(outs, eager))
    out[tag + "_matches_eager"] = all(bool(torch.allclose(a, b, rtol=1e-3, atol=1e-3)) for a, b in zip(outs, eager))


def child(alloc: str) -> None:
    watchdog(540)
    torch = need_torch_gpu("graphs")
    gcp = None
    if alloc == "gcpressure":
        import gcpressure_torch as gcp
        _common.install(gcp, hard_limit="16GiB")
    out: dict = {"alloc": alloc}
    parts = (("capture", lambda: part_capture(torch, gcp, out)),
             ("compile", lambda: part_compile(torch, out, trees=False)),
             ("compile_trees", lambda: part_compile(torch, out, trees=True)))
    for name, fn in parts:
        try:
            fn()
            out[name] = "ok"
        except Exception as e:  # noqa: BLE001
            out[name] = f"{e.__class__.__name__}: {e}"[:800]
            out[name + "_traceback"] = traceback.format_exc()[-3000:]
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
    if gcp:
        s = gcp.stats()
        out["ooms"] = s["ooms"]
        out["profile_graphs"] = s["raw"].get("graphs")
    result(out)


def check(runs: dict) -> list[str]:
    f = []
    for a, r in runs.items():
        if r.get("rc") != 0:
            f.append(f"{a}: child rc {r.get('rc')}: {r.get('stderr_tail', '')[-400:]}")
            continue
        for part in ("capture", "compile", "compile_trees"):
            if r.get(part) == "ok" or (part == "compile_trees" and a == "gcpressure" and
                                       "CheckpointState" in str(r.get(part))):
                continue  # cudagraph trees need allocator checkpoints, which no pluggable allocator has
            f.append(f"{a}: {part} failed: {r.get(part)}")
        if r.get("capture") == "ok":
            if not r.get("replays_stable"):
                f.append(f"{a}: replays changed after eager allocations (a graph block was handed out)")
            if not r.get("replay_matches_eager"):
                f.append(f"{a}: replay differs from eager by {r.get('replay_vs_eager_max_abs')}")
        for part in ("compile", "compile_trees"):
            if r.get(part) == "ok" and not r.get(part + "_matches_eager"):
                f.append(f"{a}: {part} output differs from eager by {r.get(part + '_vs_eager_max_abs')}")
    g = runs.get("gcpressure", {})
    if g.get("capture") == "ok":
        ac, ar = g.get("after_capture") or {}, g.get("after_release") or {}
        if not ac.get("allocations") or ac.get("captures_announced", 0) < 1:
            f.append(f"gcpressure: the capture did not use an announced graph pool: {ac}")
        # Released, or held only by what the capture allocated for good (the
        # cuBLAS workspace of the capture stream, which PyTorch keeps for the
        # process): at most 2 live blocks, 64 MiB.
        if ar.get("pools_released", 0) < 1 and (ar.get("live_blocks", 99) > 2 or ar.get("live", 1 << 40) > 64 << 20):
            f.append(f"gcpressure: deleting the graph did not release its pool: {ar}")
        if g.get("ooms"):
            f.append(f"gcpressure: {g['ooms']} OOMs")
    t = runs.get("torch", {})
    for key in ("replay_digest", "compile_digest", "compile_trees_digest"):
        if key in t and key in g and t[key] != g[key]:
            f.append(f"{key}: torch {t[key]} != gcpressure {g[key]} (outputs not bitwise equal)")
    return f


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--quick", action="store_true")  # accepted for ctest/torch_h200.sh; the test is short
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.lib:
        os.environ["GCPRESSURE_TORCH_LIB"] = a.lib
    if a.child:
        child(a.child)
        return 0
    if SMOKE:
        emit({"test": "graphs", "skipped": "CUDA graphs need a GPU (no smoke mode)"})
        return 77
    need_torch_gpu("graphs")
    runs = {}
    for alloc in ("torch", "gcpressure"):
        runs[alloc] = run_child(os.path.abspath(__file__), ["--child", alloc], timeout=600)
        emit({"test": "graphs", "run": alloc, **{k: v for k, v in runs[alloc].items() if "traceback" not in k}})
    failures = check(runs)
    emit({"test": "graphs", "summary": True, "passed": not failures, "failures": failures,
          "replay_digests": {k: r.get("replay_digest") for k, r in runs.items()},
          "compile_digests": {k: r.get("compile_digest") for k, r in runs.items()},
          "compile_trees": {k: r.get("compile_trees") for k, r in runs.items()}})
    for r in runs.values():
        for k, v in r.items():
            if k.endswith("_traceback"):
                print(f"--- {r.get('alloc')} {k}\n{v}", file=sys.stderr)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
