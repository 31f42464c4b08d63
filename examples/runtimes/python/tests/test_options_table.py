#!/usr/bin/env python3
"""One behaviour per input, from Python: every bad value of
tests/bad_options.txt gets, from the binding (gcpressure.Allocator's
keywords, gcpressure.parse_size), the message the C API's
gcpressure_options_set gives and the GCPRESSURE_* variable gets
(Note [One error per bad value], core/src/config_detail.hpp); sizes mean
one thing ("1GB" is 2**30, as in C++); errors say what they say once."""
from __future__ import annotations

import ctypes
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import gcpressure_py as gp  # noqa: E402

BAD = os.environ.get("GCPRESSURE_BAD_OPTIONS") or os.path.join(HERE, "..", "..", "..", "..", "tests",
                                                                 "bad_options.txt")


def bad_rows():
    rows = []
    with open(BAD) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, value = line.split(" | ", 1)
            rows.append((name.strip(), value))
    return rows


def reason(msg: str, what: str) -> str:
    key = f"gcpressure: invalid value for {what}: "
    at = msg.find(key)
    return msg[at + len(key):] if at >= 0 else f"<no {key!r} in {msg!r}>"


class OptionsTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = gp.load()

    def c_message(self, name, value):
        o = gp._capi.Options()
        self.lib.fast.gcpressure_options_init(ctypes.byref(o))
        st = self.lib.fast.gcpressure_options_set(ctypes.byref(o), name.encode(), value.encode())
        self.assertEqual(st, gp._capi.ERR_INVALID, f"{name}={value!r} accepted by the C API")
        return self.lib.fast.gcpressure_last_error().decode()

    def test_every_bad_value_gets_the_c_message(self):
        rows = bad_rows()
        self.assertGreaterEqual(len(rows), 20)
        for name, value in rows:
            with self.subTest(option=name, value=value):
                expected = reason(self.c_message(name, value), name)
                self.assertTrue(expected.startswith(f"'{value}' ("), expected)
                with self.assertRaises(gp.InvalidArgument) as cm:
                    gp.Allocator(backend="host", **{name: value}) if name != "backend" else gp.Allocator(
                        backend=value)
                self.assertEqual(reason(str(cm.exception), name), expected)
                self.assertEqual(str(cm.exception).count("gcpressure"), 1, f"said twice: {cm.exception}")
                # The variable, read by gcpressure_create: the same text after its name.
                env = "GCPRESSURE_" + name.upper()
                os.environ[env] = value
                try:
                    with self.assertRaises(gp.InvalidArgument) as ce:
                        gp.Allocator(backend="host" if name != "backend" else None, collector=False)
                finally:
                    del os.environ[env]
                self.assertEqual(reason(str(ce.exception), env), expected)

    def test_sizes_are_the_c_librarys(self):
        self.assertEqual(gp.parse_size("1GB"), 1 << 30)
        self.assertEqual(gp.parse_size("64 MB"), 64 << 20)
        self.assertEqual(gp.parse_size("1.5GiB"), 3 << 29)
        self.assertEqual(gp.parse_size("50%", device_total=1 << 30), 1 << 29)
        with self.assertRaises(gp.InvalidArgument) as cm:
            gp.parse_size("50%")
        self.assertIn("must be bytes, not a percentage", str(cm.exception))
        # One object, one meaning: the constructor's "1GB" and set_limits' "1GB".
        a = gp.Allocator(backend="host", hard_limit="2GB", soft_limit="1GB", collector=False)
        try:
            s = a.stats()
            self.assertEqual(s["hard_limit"], 2 << 30)
            self.assertEqual(s["soft_limit"], 1 << 30)
            a.set_limits(soft="1GB")
            self.assertEqual(a.stats()["soft_limit"], 1 << 30)
            a.set_limits(hard="50%", soft="25%")  # of the simulated device, as the plug-in's set_limits
            total = a.stats()["device_total"]
            self.assertEqual((a.stats()["hard_limit"], a.stats()["soft_limit"]), (total // 2, total // 4))
        finally:
            a.close()

    def test_aliases_and_other_options(self):
        for backend in ("cuda_sync", "cuda-async", "CUDA"):
            with self.subTest(backend=backend):
                try:
                    gp.Allocator(backend=backend, collector=False).close()
                except gp.UnsupportedError as e:  # no GPU here: accepted, then refused for want of one
                    self.assertRegex(str(e), r"^gcpressure: no usable CUDA device \(.+\); use backend host or auto$")
        a = gp.Allocator(backend="host", pool=False, verbose=False, async_release_threshold="0", collector=False)
        a.close()

    def test_soft_above_hard_says_it_once(self):
        with self.assertRaises(gp.InvalidArgument) as cm:
            gp.Allocator(backend="host", soft_limit="512MiB", hard_limit="256MiB", collector=False)
        msg = str(cm.exception)
        self.assertRegex(msg, r"^gcpressure: soft limit above hard limit \(soft 512\.00 MiB, hard 256\.00 MiB\)")
        self.assertNotIn("gcpressure_create", msg)
        a = gp.Allocator(backend="host", hard_limit="256MiB", collector=False)
        try:
            with self.assertRaises(gp.InvalidArgument) as cm:
                a.set_limits(soft="512MiB")
            self.assertRegex(str(cm.exception), r"^gcpressure: soft limit above hard limit")
        finally:
            a.close()

    def test_option_names_are_the_tables(self):
        names = self.lib.option_names
        for n in ("backend", "hard_limit", "soft_limit", "policy", "gc_budget", "every_n", "verbose", "pool"):
            self.assertIn(n, names)
        with self.assertRaises(gp.InvalidArgument) as cm:
            gp.Allocator(backend="host", hard_limt="1GiB")
        self.assertIn("unknown option 'hard_limt'", str(cm.exception))
        self.assertTrue(re.search(r"\bhard_limit\b", str(cm.exception)))


if __name__ == "__main__":
    unittest.main()
