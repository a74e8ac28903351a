#!/usr/bin/python3
"""Tests of bench/detect_reference.py: /usr/bin/python3 bench/detect_reference_test.py

- YOLOv5n has YOLOv5's 1,872,157 parameters at 80 classes and Detect's
  training shapes; the loss is finite and back-propagates.
- SGD's groups are YOLOv5's: biases, weights with decay, BatchNorm weights
  without.
- letterbox moves the labels with the image; the zlib PNG decoder reads every
  filter type.
- End to end: 2 ranks under torchrun (Gloo, CPU) on a dataset from
  elastrun-detect-data print one JSON line with images/s (skipped without
  the binary: $DETECT_BENCH_BIN_DIR or build/bin).

Runs itself under /usr/bin/python3 when this interpreter has no torch; exits
77 (skipped) when neither has it."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

TORCH_PYTHON = "/usr/bin/python3"
try:
    import torch
except ImportError:  # CMake's python3 may lack torch: Debian's has it
    if os.path.realpath(sys.executable) != os.path.realpath(TORCH_PYTHON) and \
            os.access(TORCH_PYTHON, os.X_OK):
        os.execv(TORCH_PYTHON, [TORCH_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    print("no torch in this interpreter nor in /usr/bin/python3: skipped", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import detect_reference as ref  # noqa: E402
from launch_bench import TORCHRUN_PATCH  # noqa: E402

BIN_DIR = os.environ.get("DETECT_BENCH_BIN_DIR") or os.path.join(HERE, "..", "build", "bin")


def write_png(path, pixels, filters):
    """An RGB PNG of `pixels` (rows of bytes), row y filtered with filters[y]."""
    h, stride = len(pixels), len(pixels[0])
    raw, prev = bytearray(), bytes(stride)
    for y, row in enumerate(pixels):
        f = filters[y % len(filters)]
        out = bytearray()
        for i, v in enumerate(row):
            a = row[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            paeth = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            pred = [0, a, b, (a + b) >> 1, paeth][f]
            out.append((v - pred) & 255)
        raw += bytes([f]) + out
        prev = row

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", stride // 3, h,
                                                                   8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


class DetectReferenceTest(unittest.TestCase):
    def test_yolov5n_shapes_parameters_and_loss(self):
        torch.manual_seed(0)
        model = ref.YoloV5n(80)
        self.assertEqual(sum(p.numel() for p in model.parameters()), 1872157)
        m = ref.YoloV5n(10)
        out = m(torch.rand(2, 3, 64, 96))
        self.assertEqual([tuple(o.shape) for o in out],
                         [(2, 3, 8, 12, 15), (2, 3, 4, 6, 15), (2, 3, 2, 3, 15)])
        hyp = dict(ref.SCRATCH_LOW)
        targets = torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.4], [1, 7, 0.2, 0.7, 0.1, 0.2]])
        loss, items = ref.ComputeLoss(m.anchors, 10, hyp)(out, targets)
        self.assertTrue(torch.isfinite(loss).all() and loss.item() > 0)
        self.assertEqual(items.shape, (3,))
        loss.backward()
        self.assertTrue(all(p.grad is not None for p in m.parameters()))

    def test_optimizer_groups_are_yolov5s(self):
        m = ref.YoloV5n(10)
        opt = ref.smart_optimizer(m, 0.01, 0.937, 5e-4)
        bias, decay, bn = opt.param_groups
        self.assertEqual([g["weight_decay"] for g in opt.param_groups], [0, 5e-4, 0.0])
        self.assertTrue(all(p.dim() == 1 for p in bias["params"] + bn["params"]))
        self.assertTrue(all(p.dim() == 4 for p in decay["params"]))
        self.assertEqual(len(bias["params"]) + len(decay["params"]) + len(bn["params"]),
                         len(list(m.parameters())))
        self.assertTrue(bias["nesterov"])

    def test_letterbox_moves_labels(self):
        img = torch.zeros(100, 50, 3, dtype=torch.uint8)
        out, labels = ref.letterbox(img, torch.tensor([[3, 0.5, 0.25, 1.0, 0.5]]), 128)
        self.assertEqual(tuple(out.shape), (3, 128, 128))
        self.assertEqual(out[0, 0, 0].item(), 114)  # padding left and right
        self.assertEqual(out[0, 64, 64].item(), 0)
        torch.testing.assert_close(labels, torch.tensor([[3, 0.5, 0.25, 0.5, 0.5]]))
        same, kept = ref.letterbox(torch.ones(64, 64, 3, dtype=torch.uint8),
                                   torch.zeros(0, 5), 64)
        self.assertTrue(torch.equal(same, torch.ones(3, 64, 64, dtype=torch.uint8)))
        self.assertEqual(kept.shape, (0, 5))

    def test_png_decoder_reads_every_filter(self):
        g = torch.Generator().manual_seed(1)
        pixels = [bytes(torch.randint(0, 256, (3 * 7,), generator=g).tolist())
                  for _ in range(10)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "a.png")
            write_png(path, pixels, [0, 1, 2, 3, 4])
            img = ref.read_png(path)
        want = torch.tensor([list(r) for r in pixels], dtype=torch.uint8).reshape(10, 7, 3)
        self.assertTrue(torch.equal(img, want))

    @unittest.skipUnless(os.access(os.path.join(BIN_DIR, "elastrun-detect-data"), os.X_OK),
                         "elastrun-detect-data is not built")
    def test_two_ranks_print_images_per_sec(self):
        with tempfile.TemporaryDirectory() as d:
            fmt = "jpg" if ref.Image is not None else "png"
            subprocess.run([os.path.join(BIN_DIR, "elastrun-detect-data"), d, "--train", "16",
                            "--val", "2", "--size", "64", "--format", fmt, "--threads", "1"],
                           check=True, capture_output=True, timeout=120)
            p = subprocess.run(
                [sys.executable, "-c", TORCHRUN_PATCH, "--standalone", "--nproc_per_node", "2",
                 os.path.join(HERE, "detect_reference.py"), "--data",
                 os.path.join(d, "data.yaml"), "--img", "64", "--batch", "4", "--epochs", "2",
                 "--warmup-iters", "2"],
                capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        self.assertEqual(len(lines), 1, p.stdout)  # rank 0 only
        r = json.loads(lines[0])
        self.assertEqual((r["ranks"], r["iters"], r["iters_timed"], r["images_timed"]),
                         (2, 4, 2, 16))
        self.assertGreater(r["images_per_sec"], 0)
        self.assertTrue(all(v == v for v in r["loss"]))  # not NaN


if __name__ == "__main__":
    unittest.main()
