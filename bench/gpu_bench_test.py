#!/usr/bin/env python3
"""Tests of bench/gpu_bench.py: python3 bench/gpu_bench_test.py

- With no GPU visible (CUDA_VISIBLE_DEVICES=""), it says so and exits 77,
  measuring nothing.
- `--device cpu --quick` runs both parts end to end on the CPU (the real
  elastrun, elastrun-train and bench/ddp_reference.py) and prints both
  tables, every row with a figure.

Needs the binaries ($GPU_BENCH_BIN_DIR or the argument, else build/bin) and
an interpreter with torch (this one or /usr/bin/python3); exits 77 without
them."""

import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "gpu_bench.py")
BIN_DIR = os.environ.get("GPU_BENCH_BIN_DIR") or os.path.join(HERE, "..", "build", "bin")
FIGURE = r"\d[\d,.]*"  # a number as the tables print it: 1,234 or 0.130


def torch_python():
    for python in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
            return python
    return None


def table_rows(out, title):
    """The data rows of the Markdown table that follows the line starting with `title`."""
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(title))
    rows = []
    for line in lines[start + 1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not line.startswith("|-"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # without the header


class GpuBenchTest(unittest.TestCase):
    def run_bench(self, *args, env=None, timeout=240):
        return subprocess.run([sys.executable, BENCH, "--bin-dir", BIN_DIR,
                               "--python", PYTHON, *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **(env or {})))

    def test_without_a_gpu_it_says_so_and_exits_77(self):
        p = self.run_bench(env={"CUDA_VISIBLE_DEVICES": ""})
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
        self.assertIn("no usable GPU", p.stderr)
        self.assertIn("--device cpu", p.stderr)
        self.assertNotIn("|", p.stdout)  # no table: nothing was measured

    def test_cpu_quick_prints_both_tables(self):
        p = self.run_bench("--device", "cpu", "--quick")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"# gpu_bench .*CPU: .*torch ")
        rows = table_rows(p.stdout, "## (a)")
        self.assertEqual(sorted((r[0], r[1], r[2]) for r in rows), sorted(
            (prec, "1", prog) for prec in ("fp32", "amp float16", "amp bfloat16")
            for prog in ("elastrun-train", "Python DDP (ddp_reference.py)")))
        losses = {}
        for r in rows:
            self.assertRegex(r[3], rf"^{FIGURE} \({FIGURE}-{FIGURE}\)$", r)
            if r[2] == "elastrun-train":
                self.assertRegex(r[4], rf"^{FIGURE}x$", r)
            losses.setdefault(r[0], []).append(float(r[6]))
        # The same training on both sides, AMP included (float16 on a CPU is
        # the loss scaler alone: a scale left on the gradients would diverge).
        for prec, (a, b) in losses.items():
            self.assertAlmostEqual(a, b, delta=0.01, msg=prec)
        rows = table_rows(p.stdout, "## (b)")
        self.assertEqual([(r[1], r[2]) for r in rows], [
            (worker, launcher) for worker in ("ddp_reference.py", "elastrun-train")
            for launcher in ("elastrun", "elastrun-standby", "torchrun")])
        for r in rows:
            self.assertRegex(r[3], rf"^{FIGURE}$", r)  # launch, no [failed]
            self.assertRegex(r[4], rf"^{FIGURE}$", r)  # restart
        for standby in (rows[1], rows[4]):
            self.assertRegex(standby[5], rf"^{FIGURE}$", standby)  # standbys idle


PYTHON = torch_python()

if __name__ == "__main__":
    missing = [b for b in ("elastrun", "elastrun-train")
               if not os.access(os.path.join(BIN_DIR, b), os.X_OK)]
    if missing:
        print(f"gpu_bench_test: skipped: {' and '.join(missing)} not built in {BIN_DIR}",
              file=sys.stderr)
        sys.exit(77)
    if PYTHON is None:
        print(f"gpu_bench_test: skipped: no torch in {sys.executable} or /usr/bin/python3",
              file=sys.stderr)
        sys.exit(77)
    unittest.main()
