#!/usr/bin/env python3
"""Checks that a runtime's --policy runtime_native is that runtime's own mechanism.

    check_native.py -- CMD ARG...

CMD is a forward loop of examples/runtimes whose last line of output is its
JSON summary. It is run twice: under --policy explicit_free (the oracle: the
runtime is told nothing about device bytes, the loop frees them) and under
--policy runtime_native (the binding reports each block through the
runtime's own call, or, for CPython, the loop runs gc.collect() every N).
Asserts (exit 1 otherwise): under runtime_native the library asked for no
collection (collections_minor == collections_full == 0), and the runtime ran
more collections of its own than under the oracle (collections_runtime): the
mechanism made the runtime collect. OOMs under runtime_native are reported,
not failed: that is the baseline's finding (bench/RESULTS.md).
"""
from __future__ import annotations

import sys

from oracle_compare import run, with_policy


def main() -> int:
    cmd = sys.argv[1:]
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        sys.exit(__doc__)
    oracle = run(with_policy(cmd, "explicit_free"))
    native = run(with_policy(cmd, "runtime_native"))
    fails = []
    asked = native["collections_minor"] + native["collections_full"]
    if asked:
        fails.append(f"runtime_native: the library asked for {asked} collections")
    if native["collections_runtime"] <= oracle["collections_runtime"]:
        fails.append(f"runtime_native: {native['collections_runtime']} collections of the runtime's own, not more "
                     f"than the oracle's {oracle['collections_runtime']}: the mechanism did not make it collect")
    for f in fails:
        print(f"check_native.py: FAILED: {f}", file=sys.stderr)
    print(f"check_native.py: runtime's own collections: oracle {oracle['collections_runtime']}, runtime_native "
          f"{native['collections_runtime']}; runtime_native peak {native['peak_reserved_bytes'] / 2**20:.1f} MiB, "
          f"{native['ooms']} OOMs (first at iteration {native.get('first_oom_iteration')})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
