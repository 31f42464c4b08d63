#!/usr/bin/env python3
"""Counts the tests of each expected group and fails when one is missing or
below its floor; names every skipped test and fails on one that a missing
GPU does not explain (issue 25: every test can fail, every skip is seen).

    check-test-groups.py ctest ROUND BUILD_DIR JUNIT_XML
        after `ctest --test-dir BUILD_DIR --output-junit JUNIT_XML ...`:
        the labels of each entry from `ctest --show-only=json-v1`, counted
        over the entries that ran (the JUnit file), for ROUND's groups
    check-test-groups.py count ROUND N
        a script's own count of the checks it made (check-install.sh: round
        install; check_pip.sh: round pip)

The groups and their floors: scripts/test-groups.txt (one place; see there).
Exit 0 when every group of ROUND is at or above its floor and every skip is
a GPU skip; 1 otherwise (each reason printed); 2 on a usage error.
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

GROUPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-groups.txt")

# A skip is accepted only when the test is about a GPU (a label or its name
# says so) and its output says the GPU (or CUDA, or the torch that drives
# it) is missing here. Anything else that skips is a hole in the suite.
GPU_TEST = re.compile(r"gpu|cuda", re.I)
GPU_MISSING = re.compile(r"no (usable )?(CUDA|GPU)|CUDA device|needs a GPU|no torch|without a (usable )?GPU", re.I)


def read_groups(round_name: str) -> list[tuple[str, int, list[str]]]:
    groups = []
    with open(GROUPS_FILE) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 4:
                sys.exit(f"{GROUPS_FILE}:{n}: want ROUND GROUP FLOOR SELECTOR...")
            if line[0] == round_name:
                groups.append((line[1], int(line[2]), line[3:]))
    if not groups:
        sys.exit(f"check-test-groups: no groups for round '{round_name}' in {GROUPS_FILE}")
    return groups


def selected(labels: set[str], selector: list[str]) -> bool:
    return all((s[1:] not in labels) if s.startswith("!") else (s in labels) for s in selector)


def ctest_labels(build_dir: str) -> dict[str, set[str]]:
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    labels = {}
    for t in json.loads(out)["tests"]:
        ls = set()
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                ls = set(p["value"])
        labels[t["name"]] = ls
    return labels


def junit(path: str) -> tuple[set[str], dict[str, str]]:
    """The names of the entries that ran, and the skipped ones with their output."""
    ran, skipped = set(), {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name")
        ran.add(name)
        if tc.find("skipped") is not None:
            skipped[name] = tc.findtext("system-out") or ""
    return ran, skipped


def skip_reason(out: str) -> str:
    for ln in out.splitlines():
        if GPU_MISSING.search(ln):
            return ln.strip()
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def check_ctest(round_name: str, build_dir: str, junit_path: str) -> int:
    labels = ctest_labels(build_dir)
    ran, skipped = junit(junit_path)
    unknown = ran - labels.keys()
    if unknown:
        print(f"check-test-groups: {len(unknown)} entries in {junit_path} unknown to ctest in {build_dir}")
        return 1
    fails = []
    print(f"=== test groups, round {round_name}: {len(ran)} entries ran ({len(skipped)} skipped)")
    for group, floor, selector in read_groups(round_name):
        names = [n for n in ran if selected(labels[n], selector)]
        sk = sum(1 for n in names if n in skipped)
        verdict = "ok" if len(names) >= floor else "FAILED"
        print(f"  {group:<14} {len(names):4d} entries ({sk} skipped), floor {floor:4d}  [{' '.join(selector)}]  {verdict}")
        if len(names) < floor:
            fails.append(f"group {group} has {len(names)} entries in round {round_name}, fewer than its floor {floor}"
                         f" (is its dependency missing? the configure output says which runtime was skipped)")
    for name in sorted(skipped):
        out = skipped[name]
        gpu = GPU_TEST.search(name) or any(GPU_TEST.search(lb) for lb in labels[name])
        ok = gpu and GPU_MISSING.search(out)
        print(f"  skipped: {name}: {skip_reason(out)}" + ("" if ok else "   <- FAILED: not a missing-GPU skip"))
        if not ok:
            fails.append(f"{name} skipped, and only a test of a GPU may skip, for want of one")
    for f in fails:
        print(f"check-test-groups: FAILED: {f}")
    return 1 if fails else 0


def check_count(round_name: str, n: int) -> int:
    (group, floor, _), *_ = read_groups(round_name)
    ok = n >= floor
    print(f"=== test groups, round {round_name}: {group} {n} checks, floor {floor}  {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "ctest":
        return check_ctest(*argv[1:])
    if len(argv) == 3 and argv[0] == "count" and argv[2].isdigit():
        return check_count(argv[1], int(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
