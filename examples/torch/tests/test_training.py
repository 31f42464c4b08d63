#!/usr/bin/env python3
"""A real training loop under gcpressure vs PyTorch's own allocator.

An MLP on random data (seeded generator on the GPU): forward, cross-entropy,
backward, Adam step — plus, every step, a few cyclic objects holding device
memory, as real code has (a step record that points at itself and keeps the
step's activations and inputs; a dict that contains itself). Each
configuration runs in its own interpreter with the same seed:

  torch        PyTorch's caching allocator (no limit)
  gcpressure   gcpressure_torch.install(hard_limit=--hard-limit-gib), default policy

Asserts: the same losses at every step (bitwise equality reported; the check
allows --rtol), gcpressure's throughput within 10% of PyTorch's (best of
--repeats runs each, alternating), zero OOMs and peak reserved within the
hard limit (bounded memory). Prints JSON lines: one per run and a summary.

build()/train_step() are shared with test_threads_torch.py.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as cm  # noqa: E402


def deterministic(torch) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)


class StepRecord:
    """Cyclic garbage with device memory: the record points at itself (and
    from a list and a dict it owns), and keeps the step's tensors."""

    def __init__(self, step, **tensors):
        self.step = step
        self.tensors = tensors
        self.me = self
        self.history = [self]
        self.meta = {"record": self}


def build(torch, args, seed: int):
    nn = torch.nn
    torch.manual_seed(seed)
    layers = []
    d = args.inputs
    for _ in range(args.depth):
        layers += [nn.Linear(d, args.width), nn.ReLU()]
        d = args.width
    body = nn.Sequential(*layers).to(cm.DEV)
    head = nn.Linear(d, args.classes).to(cm.DEV)
    params = list(body.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)
    gen = torch.Generator(device=cm.DEV)
    gen.manual_seed(seed)
    return body, head, opt, gen


def train_step(torch, step, body, head, opt, gen, args, middle=None):
    """One step; returns (loss tensor, cyclic garbage). `middle` (optional)
    maps the hidden activation before the head (test_threads_torch puts a
    Python autograd Function there)."""
    F = torch.nn.functional
    x = torch.randn(args.batch, args.inputs, device=cm.DEV, generator=gen)
    y = torch.randint(0, args.classes, (args.batch,), device=cm.DEV, generator=gen)
    hidden = body(x)
    if middle is not None:
        hidden = middle(hidden)
    logits = head(hidden)
    loss = F.cross_entropy(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    rec = StepRecord(step, x=x, hidden=hidden.detach(), logits=logits.detach(), y=y)
    d = {"inputs": x * 1.0}
    d["self"] = d
    return loss.detach(), (rec, d)


def child(args) -> None:
    torch = cm.need_torch_gpu("training")
    cm.watchdog(args.timeout)
    gcp = None
    if args.child == "gcpressure":
        import gcpressure_torch as gcp
        cm.install(gcp, hard_limit=int(args.hard_limit_gib * (1 << 30)), lib=args.lib)
    deterministic(torch)
    body, head, opt, gen = build(torch, args, args.seed)
    losses = []
    g0 = cm.gc_counts()
    t0 = None
    oom = None
    for step in range(args.steps):
        if step == args.warmup:
            cm.sync(torch)
            t0 = time.perf_counter()
        try:
            loss, garbage = train_step(torch, step, body, head, opt, gen, args)
        except RuntimeError as e:
            if not cm.is_oom(e):
                raise
            oom = f"step {step}: {str(e).splitlines()[0][:300]}"
            break
        losses.append(loss)
        del garbage
    cm.sync(torch)
    t1 = time.perf_counter()
    g1 = cm.gc_counts()
    timed = len(losses) - args.warmup
    out = {
        "test": "training", "mode": args.child, "steps": len(losses), "oom": oom,
        "losses": [float(v) for v in torch.stack(losses).double().cpu()] if losses else [],
        "steps_per_second": timed / (t1 - t0) if t0 and timed > 0 else None,
        "python_collections": [b - a for a, b in zip(g0, g1)],
        "torch": torch.__version__,
    }
    if gcp:
        s = gcp.stats()
        raw = s.pop("raw")
        out["gcpressure"] = s
        out["gcpressure_python"] = raw["python"]
    else:
        out["torch_max_reserved"] = cm.max_reserved(torch)
        out["torch_max_allocated"] = cm.max_allocated(torch)
    cm.result(out)


def parser():
    p = argparse.ArgumentParser()
    p.add_argument("--lib")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--inputs", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hard-limit-gib", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-slowdown", type=float, default=0.10)
    p.add_argument("--rtol", type=float, default=1e-6)
    p.add_argument("--quick", action="store_true", help="60 steps, 1 repeat")
    p.add_argument("--child")
    p.add_argument("--timeout", type=float, default=600)
    return p


def main() -> int:
    args = parser().parse_args()
    if args.quick:
        args.steps, args.repeats, args.warmup = min(args.steps, 60), 1, min(args.warmup, 10)
    if args.child:
        child(args)
        return 0
    cm.need_torch_gpu("training")
    # cuBLAS's deterministic workspace, for both allocators (before CUDA starts).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    script = os.path.abspath(__file__)
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
              "--inputs", str(args.inputs), "--width", str(args.width), "--depth", str(args.depth),
              "--classes", str(args.classes), "--lr", str(args.lr), "--seed", str(args.seed),
              "--hard-limit-gib", str(args.hard_limit_gib), "--timeout", str(args.timeout)]
    if args.lib:
        common += ["--lib", args.lib]
    runs = {"torch": [], "gcpressure": []}
    for _ in range(args.repeats):
        for mode in ("torch", "gcpressure"):
            r = cm.run_child(script, ["--child", mode] + common, args.timeout + 60)
            runs[mode].append(r)
            cm.emit({k: v for k, v in r.items() if k != "losses"} | {"n_losses": len(r.get("losses", []))})
    failures = []
    for mode, rs in runs.items():
        for r in rs:
            if r.get("rc") != 0:
                failures.append(f"{mode}: child failed (rc {r.get('rc')}, timed out: {r.get('timed_out', False)})")
            elif r.get("oom") or len(r["losses"]) != args.steps:
                failures.append(f"{mode}: {len(r['losses'])}/{args.steps} steps, OOM: {r.get('oom')}")
    ok = [r for r in runs["torch"] + runs["gcpressure"] if r.get("rc") == 0 and r.get("losses")]
    summary = {"test": "training", "summary": True, "steps": args.steps, "hard_limit_gib": args.hard_limit_gib}
    if len(ok) == len(runs["torch"]) + len(runs["gcpressure"]):
        ref = runs["torch"][0]["losses"]
        worst = 0.0
        bitwise = True
        for r in ok:
            for a, b in zip(ref, r["losses"]):
                bitwise = bitwise and a == b
                if not (math.isfinite(a) and math.isfinite(b)):
                    worst = math.inf
                else:
                    worst = max(worst, abs(a - b) / max(abs(a), 1e-12))
        summary.update(losses_bitwise_equal=bitwise, losses_max_rel_diff=worst,
                       first_loss=ref[0], last_loss=ref[-1])
        if worst > args.rtol:
            failures.append(f"losses differ from PyTorch's allocator's: max relative difference {worst:.3g}")
        best_t = max(r["steps_per_second"] for r in runs["torch"])
        best_g = max(r["steps_per_second"] for r in runs["gcpressure"])
        summary.update(torch_steps_per_second=best_t, gcpressure_steps_per_second=best_g,
                       throughput_ratio=best_g / best_t)
        if best_g < (1 - args.max_slowdown) * best_t:
            failures.append(f"throughput {best_g:.2f} steps/s < {1 - args.max_slowdown:.2f}x PyTorch's {best_t:.2f}")
        limit = int(args.hard_limit_gib * (1 << 30))
        peaks = [r["gcpressure"]["peak_reserved_bytes"] for r in runs["gcpressure"]]
        summary.update(gcpressure_peak_reserved=max(peaks),
                       gcpressure_collections=runs["gcpressure"][0]["gcpressure"]["collections"],
                       gcpressure_gc_seconds=runs["gcpressure"][0]["gcpressure"]["gc_seconds"],
                       gcpressure_python_collections=runs["gcpressure"][0]["python_collections"],
                       torch_max_reserved=max(r["torch_max_reserved"] for r in runs["torch"]),
                       torch_python_collections=runs["torch"][0]["python_collections"])
        if max(peaks) > limit:
            failures.append(f"gcpressure peak reserved {max(peaks)} > hard limit {limit}")
        if any(r["gcpressure"]["ooms"] for r in runs["gcpressure"]):
            failures.append("gcpressure reported OOMs")
    summary.update(failures=failures, passed=not failures)
    cm.emit(summary)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
