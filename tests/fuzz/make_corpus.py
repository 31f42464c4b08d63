#!/usr/bin/env python3
"""Writes the seed corpus of gcp_fuzz_capi (tests/fuzz/corpus/*.bin).

The input format is read by tests/fuzz/fuzz_capi.cpp: two header bytes (hard
limit index 0..7 -> 1, 2, 4, 8, 16, 24, 32, 64 MiB; policy index into
gcpressure_policy_names()), then operations,
each an opcode byte (taken mod 14) and its argument bytes. Regenerate with
  python3 tests/fuzz/make_corpus.py tests/fuzz/corpus
"""
import os
import re
import sys


def policy_names():
    """The policy names in the order of gcpressure::policy_names() (the fuzzer's
    policy byte indexes it), read from their one list in core/src/baselines.cpp."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "core", "src", "baselines.cpp")
    with open(src, encoding="utf-8") as f:
        m = re.search(r"k_names\[\]\s*=\s*\{([^}]*)\}", f.read())
    if not m:
        sys.exit(f"make_corpus.py: no k_names list in {src}")
    return re.findall(r'"([^"]+)"', m.group(1))


POLICIES = policy_names()


def alloc(cls, v, stream=0):          # 0: raw alloc
    return bytes([0, cls, v & 0xFF, (v >> 8) & 0xFF, stream])


def free(i, stream=3):                # 2: free a raw block (stream 3: its own)
    return bytes([2, i, stream])


def misuse(kind, i=0):                # 3: misuse kinds 0..7
    return bytes([3, kind, i])


def balloc(cls, v, stream, slot):     # 4: Boehm buffer into held slot
    return bytes([4, cls, v & 0xFF, (v >> 8) & 0xFF, stream, slot])


def unsafe_free(slot):                # 6
    return bytes([6, slot])


def drop(slot):                       # 7
    return bytes([7, slot])


def collect(full):                    # 8: through the policy, then an exact check
    return bytes([8, 1 if full else 0])


GCOLLECT = bytes([9])                 # the runtime's own collection
DRAIN = bytes([10])
TRIM = bytes([11])


def limits(hard_idx, soft_pct):       # 12: hard in {unchanged, 1, 4, 16, 32, 48, 64 MiB, 3 MiB+256}
    return bytes([12, hard_idx, soft_pct])


QUIET, ITERATION, CHECK = bytes([13, 0]), bytes([13, 1]), bytes([13, 2])


def seeds():
    s = {}
    s["basic"] = bytes([5, 0]) + alloc(0, 100) + alloc(1, 2000) + alloc(0, 4000) + CHECK + free(0) + free(0) + \
        free(0) + CHECK
    body = b"".join(balloc(1, 1000 + 37 * i, 0, i) for i in range(24)) + b"".join(drop(i) for i in range(24))
    s["boehm_drop_collect"] = bytes([3, 0]) + body + collect(True) + CHECK + body + GCOLLECT + DRAIN + CHECK
    s["unsafe_free_twice"] = bytes([4, 0]) + balloc(0, 512, 0, 1) + unsafe_free(1) + misuse(5, 1) + \
        balloc(0, 300, 1, 2) + unsafe_free(2) + misuse(5, 2) + CHECK
    s["misuse_all"] = bytes([4, 1]) + alloc(0, 999) + alloc(1, 99) + free(0) + b"".join(
        misuse(k, 0) for k in range(8)) + CHECK
    fill = b"".join(alloc(2, 16384) for _ in range(6))  # 2 MiB each
    s["limits"] = bytes([4, 1]) + fill + limits(1, 50) + alloc(2, 4096) + alloc(0, 10) + limits(6, 0) + fill + \
        limits(7, 99) + TRIM + CHECK + limits(0, 10) + CHECK
    s["streams"] = bytes([5, 0]) + b"".join(alloc(1, 5000 + i, 1 + i % 2) for i in range(10)) + \
        b"".join(free(0, 3) for _ in range(5)) + b"".join(alloc(1, 5000 + i, 2 - i % 2) for i in range(10)) + \
        TRIM + b"".join(balloc(1, 3000, 1 + i % 2, 10 + i) for i in range(8)) + \
        b"".join(drop(10 + i) for i in range(8)) + collect(False) + TRIM + CHECK
    s["edges"] = bytes([7, 1]) + b"".join(alloc(3, i) for i in range(18)) + CHECK + \
        b"".join(balloc(3, i, i % 3, 20 + i) for i in range(18)) + CHECK + TRIM
    for pi, name in enumerate(POLICIES):
        loop = b""
        for i in range(40):
            slot = i % 8
            loop += drop(slot) + balloc(1, 8000 + 97 * i, i % 3, slot)
            if i % 10 == 9:
                loop += QUIET + ITERATION
        s["policy_" + name] = bytes([2, pi]) + loop + collect(False) + collect(True) + CHECK
    s["pressure_ladder"] = bytes([2, 0]) + b"".join(drop(0) + balloc(2, 4096, 0, 0) for _ in range(30)) + CHECK
    s["runtime_gc"] = bytes([3, 5]) + b"".join(balloc(0, 2000, 0, i) + drop(i) + GCOLLECT for i in range(10)) + \
        DRAIN + CHECK
    s["mixed"] = bytes([6, 0]) + alloc(1, 1234, 1) + balloc(1, 4321, 2, 3) + free(0, 3) + drop(3) + \
        misuse(0, 0) + limits(3, 80) + collect(True) + alloc(0, 1, 2) + TRIM + QUIET + CHECK
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds())} seeds to {out}")


if __name__ == "__main__":
    main()
