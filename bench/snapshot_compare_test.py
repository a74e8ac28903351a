#!/usr/bin/env python3
"""Tests of bench/snapshot_compare.py (standard library only):
python3 bench/snapshot_compare_test.py. The smoke test runs the real
snapshot_bench ($SNAPSHOT_BENCH, else build/bin/) when it is built
(`ninja -C build snapshot_bench`), and is skipped otherwise."""

import json
import math
import os
import subprocess
import sys
import unittest

import snapshot_compare

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.environ.get("SNAPSHOT_BENCH") or os.path.join(HERE, "..", "build", "bin",
                                                          "snapshot_bench")


def cpp_line(model="mlp", params=100, nbytes=2_000_000, memcpy=(1.0, 3.0, 2.0),
             snapshot=(2.5, 1.5, 9.0)):
    return {"model": model, "description": "MLP", "params": params, "bytes": nbytes,
            "memcpy_ms": list(memcpy), "snapshot_ms": list(snapshot),
            "checkpoint_ms": [3.0, 4.0, 5.0], "persist_ms": [10.0, 30.0, 20.0],
            "old_ms": [40.0, 50.0, 60.0], "serialize_ms": [20.0, 25.0, 30.0]}


class RowTest(unittest.TestCase):
    def test_medians_and_ratio(self):
        row = snapshot_compare.make_row(
            cpp_line(), {"params": 100, "bytes": 2_100_000, "save_ms": [8.0, 6.0, 7.0]})
        self.assertEqual(row["mb"], 2.0)
        self.assertEqual(row["memcpy_ms"], 2.0)
        self.assertEqual(row["snapshot_ms"], 2.5)
        self.assertEqual(row["ratio"], 1.25)
        self.assertEqual(row["checkpoint_ms"], 4.0)
        self.assertEqual(row["persist_ms"], 20.0)
        self.assertEqual(row["old_ms"], 50.0)
        self.assertEqual(row["serialize_ms"], 25.0)
        self.assertEqual(row["python_ms"], 7.0)
        self.assertEqual(row["spread"]["snapshot_ms"], (1.5, 9.0))

    def test_without_python(self):
        row = snapshot_compare.make_row(cpp_line(), None)
        self.assertTrue(math.isnan(row["python_ms"]))
        self.assertIn("| nan |", snapshot_compare.format_table([row]))

    def test_other_model_in_python_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "101 parameters, the C.. one 100"):
            snapshot_compare.make_row(cpp_line(), {"params": 101, "bytes": 1, "save_ms": [1.0]})


class VerdictTest(unittest.TestCase):
    def test_holds_at_exactly_two(self):
        rows = [snapshot_compare.make_row(cpp_line(snapshot=(4.0,)), None),
                snapshot_compare.make_row(cpp_line("cnn", snapshot=(3.0,)), None)]
        ok, sentence = snapshot_compare.verdict(rows)
        self.assertTrue(ok)
        self.assertIn("worst mlp, 2.00x", sentence)

    def test_missed_names_the_model(self):
        rows = [snapshot_compare.make_row(cpp_line(snapshot=(1.0,)), None),
                snapshot_compare.make_row(cpp_line("big", snapshot=(4.2,)), None)]
        ok, sentence = snapshot_compare.verdict(rows)
        self.assertFalse(ok)
        self.assertIn("big 2.10x", sentence)
        self.assertNotIn("mlp", sentence)


class TableTest(unittest.TestCase):
    def test_one_row_per_model_with_every_column(self):
        rows = [snapshot_compare.make_row(cpp_line(m), None) for m in ("mlp", "cnn")]
        lines = snapshot_compare.format_table(rows).splitlines()
        self.assertEqual(len(lines), 4)
        self.assertEqual(lines[0].count("|"), 10)
        self.assertTrue(lines[2].startswith("| mlp (MLP) | 2.00 | 2.000 | 2.500 | 1.25x |"))


class ArgsTest(unittest.TestCase):
    def test_quick_is_small(self):
        args = snapshot_compare.parse_args(["--quick"])
        self.assertEqual(args.models, ["mlp", "cnn"])
        self.assertEqual(args.reps, 3)

    def test_default_is_every_model(self):
        args = snapshot_compare.parse_args([])
        self.assertEqual(args.models, ["mlp", "cnn", "big"])
        self.assertGreaterEqual(args.reps, 5)

    def test_unknown_model_is_refused(self):
        with self.assertRaises(SystemExit):
            snapshot_compare.parse_args(["--models", "mlp,resnet"])


@unittest.skipUnless(os.access(BINARY, os.X_OK), "snapshot_bench is not built")
class SmokeTest(unittest.TestCase):
    def test_binary_measures_and_verifies(self):
        p = subprocess.run([BINARY, "--json", "--models", "mlp", "--reps", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        (line,) = [json.loads(l) for l in p.stdout.splitlines()]
        # Parameters and momentum of the 784-256-256-10 MLP, in float32.
        self.assertGreater(line["bytes"], 2 * 4 * 269_322)
        for key in ("memcpy_ms", "snapshot_ms", "checkpoint_ms", "persist_ms", "old_ms",
                    "serialize_ms"):
            self.assertEqual(len(line[key]), 2)
            self.assertTrue(all(x > 0 for x in line[key]), key)


if __name__ == "__main__":
    unittest.main()
