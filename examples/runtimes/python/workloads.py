"""The forward loop's workloads, as the C++ loop defines them
(bench/forward/workload.cpp, Note [The workloads]), for forward_loop.py.

  steady   every iteration allocates the same arrays (per layer: the W x
           temporary and the output) and drops them all.
  promote  as steady, and each array is also kept alive, with probability
           --promote-share (0.25), for a lifetime drawn uniformly from 1..50
           iterations (fixed seed), in a ring; it dies at the start of the
           iteration its lifetime ends. Only the array is kept, not the graph
           behind it: its node forgets its inputs (the array and its node stay
           a cycle, so only the cyclic collector frees it once dropped).
  burst    as steady, and the last iteration of every --burst-every (50)
           allocates --burst-fraction (0.5) of the hard limit in chunks of
           min(256 MiB, hard limit / 16), writes them, holds them all at once,
           then drops them.
  varied   as steady, and each layer also allocates one side array whose size
           is drawn log-uniformly (fixed seed) from 4 KiB to min(256 MiB, hard
           limit / 16), writes it and drops it at the end of the layer.

Python's random.Random, not the C++ loop's mt19937_64: the same
distributions, other draws. Under the oracle (explicit_free) every array is
freed (DeviceArray.free) the moment it dies, kept ones when their life ends.
"""
from __future__ import annotations

import math
import random

NAMES = ("steady", "promote", "burst", "varied")
MAX_LIFE = 50


def chunk_cap(hard_limit: int) -> int:
    return max(4096, min(256 << 20, hard_limit // 16))


class Workload:
    """The hooks the loop calls; `died` is the oracle's free."""

    def __init__(self, name: str, alloc, fill, *, oracle: bool, hard_limit: int, seed: int = 42,
                 promote_share: float = 0.25, burst_every: int = 50, burst_fraction: float = 0.5):
        if name not in NAMES:
            raise ValueError(f"unknown workload {name!r} (expected {', '.join(NAMES)})")
        self.name = name
        self.alloc = alloc
        self.fill = fill          # gives a new array its contents (the loop's compute)
        self.oracle = oracle
        self.explicit_frees = 0
        self.rng = random.Random(seed)
        self.share = promote_share
        self.every = burst_every
        self.burst_total = int(burst_fraction * hard_limit)
        self.chunk = chunk_cap(hard_limit)
        self.log_lo, self.log_hi = math.log(4096), math.log(self.chunk)
        self.ring: dict[int, tuple] = {}  # id -> (array, the iteration at whose start it dies)

    def died(self, a) -> None:
        """An array's last use is over: the oracle frees it (unless a workload keeps it)."""
        if self.oracle and a is not None and a.ptr and id(a) not in self.ring:
            a.free()
            self.explicit_frees += 1

    def begin_iteration(self, it: int) -> None:
        for key, (a, expiry) in list(self.ring.items()):
            if expiry <= it:
                del self.ring[key]
                self.died(a)

    def after_layer(self, it: int, tmp, out) -> None:
        if self.name == "promote":
            for a in (tmp, out):
                if self.rng.random() < self.share:
                    self.ring[id(a)] = (a, it + self.rng.randint(1, MAX_LIFE))
                    if a.node is not None:
                        a.node.inputs = ()
        elif self.name == "varied":
            lg = self.rng.uniform(self.log_lo, self.log_hi)
            side = self.alloc.array((max(1, (int(math.exp(lg)) & ~3) // 4),))
            self.fill(side)
            self.died(side)

    def end_iteration(self, it: int) -> None:
        if self.name != "burst" or (it + 1) % self.every or not self.burst_total:
            return
        held = []
        try:
            for got in range(0, self.burst_total, self.chunk):
                held.append(self.alloc.array((max(1, min(self.chunk, self.burst_total - got) // 4),)))
                self.fill(held[-1])
        finally:
            for a in held:
                self.died(a)

    def release(self) -> None:
        for a, _ in list(self.ring.values()):
            self.ring.pop(id(a), None)
            self.died(a)
