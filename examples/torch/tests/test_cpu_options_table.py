#!/usr/bin/env python3
"""One behaviour per input, from the PyTorch plug-in's Python side, without
torch (ctest torch_cpu_options_table): every bad value of
tests/bad_options.txt given to gcpressure.torch.configure() (each option by
its keyword: the limits, policy and backend reach gcp_torch_init, the others
gcp_torch_set_option; gc_budget also as budget=) and each bad limit to
set_limits() must fail with the C API's message after the option's name
(Note [One error per bad value], core/src/config_detail.hpp). The expected
texts are the C API's own, written at build time by
examples/runtimes/bad_options_reasons.c into
$GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED. set_limits() takes the same size
strings as the constructor ("64 MB", "50%": Note [Limits as text],
examples/torch/gcpressure_torch.cpp).

gcpressure.torch imports torch only in install(): configure() and
set_limits() run here without it. A refused configure() configures
nothing, so one process tries every row."""
from __future__ import annotations

import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gcpressure_torch as gcp  # noqa: E402

LIB = None
MiB = 1 << 20


def rows():
    """(OPTION, VALUE, REASON) per line of the expected texts."""
    path = os.environ.get("GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED")
    if not path:
        raise SystemExit("GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED is not set (ctest sets it)")
    with open(path) as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def reason(msg: str, name: str) -> str:
    _, key, rest = msg.partition(f"invalid value for {name}: ")
    return rest if key else f"<no 'invalid value for {name}: ' in {msg!r}>"


class PluginOptionsTable(unittest.TestCase):
    def refused(self, what, fn, name, expected):
        with self.subTest(entry=what):
            with self.assertRaises(gcp.GcpressureTorchError, msg=f"{what}: accepted") as cm:
                fn()
            msg = str(cm.exception)
            self.assertEqual(reason(msg, name), expected, what)
            self.assertEqual(msg.count("gcpressure"), 1, f"{what}: said twice: {msg}")

    def test_1_every_bad_value_at_configure(self):
        table = rows()
        self.assertGreaterEqual(len(table), 20)
        for name, value, expected in table:
            kw = {name: value} if name == "backend" else {"backend": "host", name: value}
            self.refused(f"configure({name}={value!r})", lambda: gcp.configure(lib=LIB, **kw), name, expected)
            if name == "gc_budget":
                self.refused(f"configure(budget={value!r})",
                             lambda: gcp.configure(backend="host", budget=value, lib=LIB), name, expected)
            if value.lstrip("-").isdigit() and name not in ("hard_limit", "soft_limit", "backend", "policy"):
                # An int is written in decimal: the same text, the same message.
                self.refused(f"configure({name}={int(value)})",
                             lambda: gcp.configure(backend="host", lib=LIB, **{name: int(value)}), name, expected)

    def test_2_set_limits_reads_sizes_as_the_constructor_does(self):
        gcp.configure(backend="host", hard_limit="64 MB", soft_limit="32MiB", budget=0.1, lib=LIB,
                      host_capacity="1GiB", every_n=2, pool=True, verbose=False)
        gcp.set_limits()  # nothing to change; device 0 joins (the stats list devices that joined)
        dev = lambda: gcp.raw_stats()["devices"][0]  # noqa: E731
        self.assertEqual((dev()["hard_limit"], dev()["soft_limit"]), (64 * MiB, 32 * MiB))
        self.assertEqual(gcp.raw_stats()["settings"]["gc_budget"], 0.1)
        for name, value, expected in rows():
            if name in ("hard_limit", "soft_limit"):
                arg = "hard" if name == "hard_limit" else "soft"
                self.refused(f"set_limits({arg}={value!r})", lambda: gcp.set_limits(**{arg: value}), name, expected)
        self.assertEqual((dev()["hard_limit"], dev()["soft_limit"]), (64 * MiB, 32 * MiB), "a refused limit changed one")
        gcp.set_limits(hard="50%")  # of the simulated device's 1 GiB
        self.assertEqual(dev()["hard_limit"], 512 * MiB)
        gcp.set_limits(soft="64 MB")
        self.assertEqual(dev()["soft_limit"], 64 * MiB)
        gcp.set_limits(soft=16 * MiB, hard=0)  # bytes as before; 0 leaves the hard limit
        self.assertEqual((dev()["hard_limit"], dev()["soft_limit"]), (512 * MiB, 16 * MiB))
        with self.assertRaises(gcp.GcpressureTorchError) as cm:
            gcp.set_limits(hard="80%avail")
        self.assertIn("invalid value for hard_limit: '80%avail' (N%avail follows the memory", str(cm.exception))
        with self.assertRaises(gcp.GcpressureTorchError) as cm:
            gcp.set_limits(soft="1GiB")
        self.assertRegex(str(cm.exception), r"^gcpressure: soft limit above hard limit \(soft 1\.00 GiB, hard 512")


def main() -> None:
    global LIB
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=None)
    args, rest = ap.parse_known_args()
    LIB = args.lib
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
