#!/usr/bin/python3
"""YOLOv5 Python DDP reference for bench/detect_bench.py: YOLOv5n training
throughput, PyTorch's DistributedDataParallel on Gloo.

Trains what elastrun-train's detector trains (trainer/detect/), written the
way YOLOv5's train.py does it:

- YOLOv5n (v6 layout, models/yolov5n.yaml: depth 0.33, width 0.25), the
  network of trainer/detect/model.h, transcribed from YOLOv5's
  models/common.py and models/yolo.py (the same transcription that
  trainer/detect/model_test.cc checks the C++ model against): BatchNorm eps
  1e-3 momentum 0.03, Detect's bias prior (_initialize_biases), COCO's
  anchors, nc from data.yaml;
- YOLOv5's loss (utils/loss.py ComputeLoss: build_targets with anchor_t and
  the neighbour cells, CIoU box loss, objectness balance [4, 1, 0.4], class
  BCE), with train.py's gain scaling (box x 3/nl, cls x nc/80 x 3/nl, obj x
  (imgsz/640)^2 x 3/nl) and `loss *= WORLD_SIZE`; the transcription of
  trainer/detect/loss_test.cc;
- hyp.scratch-low.yaml (or --hyp FILE), SGD (Nesterov) over YOLOv5's three
  parameter groups (BatchNorm weights without decay, other weights with
  weight_decay x global batch x accumulate / 64, biases without decay),
  the warm-up (max(3 epochs, 100) iterations: bias lr from warmup_bias_lr,
  other lrs from 0, momentum from warmup_momentum, accumulate from 1 to
  64 / global batch), the linear lr schedule, gradient accumulation to a
  nominal batch of 64, clip_grad_norm_(10) and the model EMA (--ema off
  drops it); fp32 (YOLOv5 turns AMP off on a CPU);
- the dataset in YOLOv5's layout (data.yaml, images/, labels/), as
  `elastrun-detect-data OUT --size S` writes it: each image letterboxed to
  --img S (YOLOv5's load_image + letterbox without augmentation: the long
  side resized to S, grey 114 padding centred), labels moved with it;
  torch's DistributedSampler (shuffle, seed), batch --batch per rank,
  YOLOv5's collate (targets [n, 6] = image, class, x, y, w, h);
- DDP(static_graph=True) as YOLOv5's smart_DDP on torch >= 1.11, Gloo from
  the torchrun environment (env://), torch.set_num_threads(--threads).

Images are decoded with PIL when it is installed, else (PNG only) by the
small zlib decoder below: generate the dataset with `--format png` then.
With --cache ram (default, YOLOv5's --cache ram) every image is decoded and
letterboxed once before training; with --cache none each batch decodes its
images inside the timed loop (YOLOv5 does that in DataLoader workers).

--mosaic on is not implemented (no augmentation: the figure is the
training step).

images/s: images trained by all ranks after the first --warmup-iters
iterations (summed over ranks) / rank 0's seconds from the barrier after
those iterations to the barrier after the last. Rank 0 prints one JSON
line: {"side": "python", "images_per_sec": ..., ...}.

Usage:
  /usr/bin/python3 -m torch.distributed.run --nproc-per-node 2 \\
      bench/detect_reference.py --data OUT/data.yaml --img 128 --batch 16 \\
      [--epochs 1] [--iters N] [--warmup-iters 3] [--threads 1] [--hyp F]
Run alone it trains on one process (no process group).
"""

import argparse
import glob
import json
import math
import os
import struct
import sys
import time
import zlib
from copy import deepcopy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import yaml

try:
    from PIL import Image
except ImportError:  # python3-pil missing: PNG only, through read_png
    Image = None

# hyp.scratch-low.yaml (trainer/detect/hyp.h's defaults).
SCRATCH_LOW = dict(
    lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_epochs=3.0,
    warmup_momentum=0.8, warmup_bias_lr=0.1, box=0.05, cls=0.5, cls_pw=1.0, obj=1.0,
    obj_pw=1.0, iou_t=0.20, anchor_t=4.0, fl_gamma=0.0, hsv_h=0.015, hsv_s=0.7, hsv_v=0.4,
    degrees=0.0, translate=0.1, scale=0.5, shear=0.0, perspective=0.0, flipud=0.0, fliplr=0.5,
    mosaic=1.0, mixup=0.0, copy_paste=0.0, label_smoothing=0.0)
ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
STRIDES = [8.0, 16.0, 32.0]
NBS = 64  # YOLOv5's nominal batch size
IMG_FORMATS = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")


# ---- images (PIL, or PNG through zlib) ---------------------------------------

def read_png(path):
    """8-bit grey / grey+alpha / RGB / RGBA PNG, not interlaced -> uint8 [h, w, 3]."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG (without python3-pil only PNG is read: "
                         "generate the dataset with --format png)")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    w, h, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise SystemExit(f"{path}: only 8-bit, non-interlaced grey/RGB(A) PNGs are read")
    raw = zlib.decompress(b"".join(idat))
    bpp, stride = channels, w * channels
    out = bytearray(h * stride)
    prev = bytearray(stride)
    for y in range(h):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ftype == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        out[y * stride:(y + 1) * stride] = line
        prev = line
    img = torch.frombuffer(out, dtype=torch.uint8).reshape(h, w, channels)
    if channels in (1, 2):
        img = img[..., :1].expand(h, w, 3)
    return img[..., :3].contiguous()


def read_image(path):
    """uint8 [h, w, 3] RGB."""
    if Image is None:
        return read_png(path)
    with Image.open(path) as im:
        im = im.convert("RGB")
        return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).reshape(
            im.height, im.width, 3)


def letterbox(img, labels, size):
    """YOLOv5's load_image + letterbox(auto=False, scaleup=False): the long side
    resized to `size` (area when shrinking, bilinear when growing), grey 114
    padding centred. labels [n, 5] (class, x, y, w, h normalized to the
    original) -> normalized to the letterboxed image. Returns uint8 [3, S, S]."""
    h0, w0 = img.shape[:2]
    r = size / max(h0, w0)
    x = img.permute(2, 0, 1)
    if r != 1:
        nh, nw = max(round(h0 * r), 1), max(round(w0 * r), 1)
        mode = "area" if r < 1 else "bilinear"
        kwargs = {} if mode == "area" else {"align_corners": False}
        x = F.interpolate(x[None].float(), size=(nh, nw), mode=mode, **kwargs)[0]
        x = x.round().clamp(0, 255).to(torch.uint8)
    else:
        nh, nw = h0, w0
    dh, dw = (size - nh) / 2, (size - nw) / 2
    top, left = round(dh - 0.1), round(dw - 0.1)
    out = torch.full((3, size, size), 114, dtype=torch.uint8)
    out[:, top:top + nh, left:left + nw] = x
    if len(labels):
        labels = labels.clone()
        labels[:, 1] = (labels[:, 1] * nw + left) / size
        labels[:, 2] = (labels[:, 2] * nh + top) / size
        labels[:, 3] = labels[:, 3] * nw / size
        labels[:, 4] = labels[:, 4] * nh / size
    return out, labels


def read_labels(path):
    """YOLOv5 label file -> float [n, 5]; a missing file is an image without objects."""
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    rows.append([float(v) for v in line.split()[:5]])
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, 5)


def image_files(data_yaml, split):
    with open(data_yaml) as f:
        d = yaml.safe_load(f)
    root = d.get("path") or os.path.dirname(os.path.abspath(data_yaml))
    if not os.path.isabs(root):
        root = os.path.join(os.path.dirname(os.path.abspath(data_yaml)), root)
    entries = d[split] if isinstance(d[split], list) else [d[split]]
    files = []
    for entry in entries:
        p = entry if os.path.isabs(entry) else os.path.join(root, entry)
        if os.path.isdir(p):
            files += glob.glob(os.path.join(p, "**", "*.*"), recursive=True)
        else:  # a list file, one image path a line, relative to the root
            with open(p) as f:
                files += [os.path.join(root, l.strip()) for l in f if l.strip()]
    files = sorted(f for f in files if f.lower().endswith(IMG_FORMATS))
    if not files:
        raise SystemExit(f"{data_yaml}: no images under {split}")
    return files, int(d["nc"])


def label_path(image_path):
    """YOLOv5's img2label_paths: the last /images/ becomes /labels/, .ext -> .txt."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(image_path.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


class Dataset(torch.utils.data.Dataset):
    def __init__(self, files, size, cache):
        self.files, self.size = files, size
        self.labels = [read_labels(label_path(f)) for f in files]
        self.cache = [self.load(i) for i in range(len(files))] if cache else None

    def load(self, i):
        return letterbox(read_image(self.files[i]), self.labels[i], self.size)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.cache[i] if self.cache is not None else self.load(i)


def collate(items):
    """YOLOv5's collate_fn: uint8 images stacked, targets [n, 6]."""
    imgs = torch.stack([im for im, _ in items])
    targets = [torch.cat((torch.full((len(l), 1), float(i)), l), 1)
               for i, (_, l) in enumerate(items)]
    return imgs, torch.cat(targets, 0)


# ---- the model (models/common.py, models/yolo.py) ----------------------------

class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1, self.cv2 = Conv(c1, c_, 1, 1), Conv(c_, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = int(c2 * 0.5)
        self.cv1, self.cv2, self.cv3 = Conv(c1, c_, 1, 1), Conv(c1, c_, 1, 1), Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_, 1, 1), Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class YoloV5n(nn.Module):
    """models/yolov5n.yaml; forward() returns Detect's training output: per level
    [bs, na, ny, nx, 5 + nc]."""

    def __init__(self, nc):
        super().__init__()

        def ch(c):  # make_divisible(c * 0.25, 8)
            return math.ceil(c * 0.25 / 8) * 8

        self.nc, self.na, self.no = nc, 3, nc + 5
        self.b = nn.ModuleList([
            Conv(3, ch(64), 6, 2, 2), Conv(ch(64), ch(128), 3, 2), C3(ch(128), ch(128), 1),
            Conv(ch(128), ch(256), 3, 2), C3(ch(256), ch(256), 2), Conv(ch(256), ch(512), 3, 2),
            C3(ch(512), ch(512), 3), Conv(ch(512), ch(1024), 3, 2), C3(ch(1024), ch(1024), 1),
            SPPF(ch(1024), ch(1024), 5)])
        self.h10 = Conv(ch(1024), ch(512), 1, 1)
        self.h13 = C3(ch(512) * 2, ch(512), 1, False)
        self.h14 = Conv(ch(512), ch(256), 1, 1)
        self.h17 = C3(ch(256) * 2, ch(256), 1, False)
        self.h18 = Conv(ch(256), ch(256), 3, 2)
        self.h20 = C3(ch(256) * 2, ch(512), 1, False)
        self.h21 = Conv(ch(512), ch(512), 3, 2)
        self.h23 = C3(ch(512) * 2, ch(1024), 1, False)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.m = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1)
                               for c in (ch(256), ch(512), ch(1024)))
        # Detect's anchors in grid units (check_anchor_order: already ascending).
        self.register_buffer("anchors", torch.tensor(ANCHORS, dtype=torch.float32).view(3, 3, 2)
                             / torch.tensor(STRIDES).view(3, 1, 1))
        for mi, s in zip(self.m, STRIDES):  # _initialize_biases (cf=None)
            b = mi.bias.view(self.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5:5 + nc] += math.log(0.6 / (nc - 0.99999))

    def forward(self, x):
        y = {}
        for i, m in enumerate(self.b):
            x = m(x)
            y[i] = x
        x = self.h10(x)
        p10 = x
        x = self.h13(torch.cat((self.up(x), y[6]), 1))
        x = self.h14(x)
        p14 = x
        p17 = self.h17(torch.cat((self.up(x), y[4]), 1))
        p20 = self.h20(torch.cat((self.h18(p17), p14), 1))
        p23 = self.h23(torch.cat((self.h21(p20), p10), 1))
        out = []
        for i, p in enumerate((p17, p20, p23)):
            p = self.m[i](p)
            bs, _, ny, nx = p.shape
            out.append(p.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


class ModelEMA:
    """utils/torch_utils.py ModelEMA: decay 0.9999 x (1 - exp(-updates / 2000))."""

    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema = deepcopy(model).eval()
        self.updates, self.decay, self.tau = 0, decay, tau
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        msd = model.state_dict()
        with torch.no_grad():
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1 - d) * msd[k].detach()


# ---- the loss (utils/loss.py, utils/metrics.py) ------------------------------

def bbox_ciou(box1, box2, eps=1e-7):
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (torch.min(b1_x2, b2_x2) - torch.max(b1_x1, b2_x1)).clamp(0) * \
            (torch.min(b1_y2, b2_y2) - torch.max(b1_y1, b2_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.max(b1_x2, b2_x2) - torch.min(b1_x1, b2_x1)
    ch = torch.max(b1_y2, b2_y2) - torch.min(b1_y1, b2_y1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


class FocalLoss(nn.Module):
    def __init__(self, loss_fcn, gamma=1.5, alpha=0.25):
        super().__init__()
        self.loss_fcn, self.gamma, self.alpha = loss_fcn, gamma, alpha
        self.loss_fcn.reduction = "none"

    def forward(self, pred, true):
        loss = self.loss_fcn(pred, true)
        p = torch.sigmoid(pred)
        p_t = true * p + (1 - true) * (1 - p)
        a = true * self.alpha + (1 - true) * (1 - self.alpha)
        return (loss * a * (1.0 - p_t) ** self.gamma).mean()


class ComputeLoss:
    def __init__(self, anchors, nc, hyp):
        self.anchors, self.nc, self.hyp = anchors, nc, hyp
        self.na, self.nl = anchors.shape[1], anchors.shape[0]
        self.BCEcls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["cls_pw"]]))
        self.BCEobj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["obj_pw"]]))
        eps = hyp.get("label_smoothing", 0.0)
        self.cp, self.cn = 1.0 - 0.5 * eps, 0.5 * eps
        if hyp["fl_gamma"] > 0:
            self.BCEcls = FocalLoss(self.BCEcls, hyp["fl_gamma"])
            self.BCEobj = FocalLoss(self.BCEobj, hyp["fl_gamma"])
        self.balance = [4.0, 1.0, 0.4]

    def __call__(self, p, targets):
        lcls, lbox, lobj = torch.zeros(1), torch.zeros(1), torch.zeros(1)
        tcls, tbox, indices, anch = self.build_targets(p, targets)
        for i, pi in enumerate(p):
            b, a, gj, gi = indices[i]
            tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype)
            n = b.shape[0]
            if n:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, self.nc), 1)
                pxy = pxy.sigmoid() * 2 - 0.5
                pwh = (pwh.sigmoid() * 2) ** 2 * anch[i]
                iou = bbox_ciou(torch.cat((pxy, pwh), 1), tbox[i]).squeeze()
                lbox += (1.0 - iou).mean()
                tobj[b, a, gj, gi] = iou.detach().clamp(0).type(tobj.dtype)
                if self.nc > 1:
                    t = torch.full_like(pcls, self.cn)
                    t[range(n), tcls[i]] = self.cp
                    lcls += self.BCEcls(pcls, t)
            lobj += self.BCEobj(pi[..., 4], tobj) * self.balance[i]
        lbox *= self.hyp["box"]
        lobj *= self.hyp["obj"]
        lcls *= self.hyp["cls"]
        bs = p[0].shape[0]
        return (lbox + lobj + lcls) * bs, torch.cat((lbox, lobj, lcls)).detach()

    def build_targets(self, p, targets):
        na, nt = self.na, targets.shape[0]
        tcls, tbox, indices, anch = [], [], [], []
        gain = torch.ones(7)
        ai = torch.arange(na, dtype=torch.float32).view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)
        g = 0.5
        off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], dtype=torch.float32) * g
        for i in range(self.nl):
            a_i, shape = self.anchors[i], p[i].shape
            gain[2:6] = torch.tensor(shape, dtype=torch.float32)[[3, 2, 3, 2]]
            t = targets * gain
            if nt:
                r = t[..., 4:6] / a_i[:, None]
                j = torch.max(r, 1 / r).max(2)[0] < self.hyp["anchor_t"]
                t = t[j]
                gxy = t[:, 2:4]
                gxi = gain[[2, 3]] - gxy
                j, k = ((gxy % 1 < g) & (gxy > 1)).T
                l, m = ((gxi % 1 < g) & (gxi > 1)).T
                j = torch.stack((torch.ones_like(j), j, k, l, m))
                t = t.repeat((5, 1, 1))[j]
                offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]
            else:
                t = targets[0]
                offsets = 0
            bc, gxy, gwh, a = t.chunk(4, 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            indices.append((b, a, gj.clamp_(0, shape[2] - 1), gi.clamp_(0, shape[3] - 1)))
            tbox.append(torch.cat((gxy - gij, gwh), 1))
            anch.append(a_i[a])
            tcls.append(c)
        return tcls, tbox, indices, anch


# ---- the optimizer (utils/torch_utils.py smart_optimizer) ---------------------

def smart_optimizer(model, lr, momentum, decay):
    g = [], [], []  # weights (decay), BatchNorm weights (no decay), biases (no decay)
    bn = tuple(v for k, v in nn.__dict__.items() if "Norm" in k)
    for v in model.modules():
        for p_name, p in v.named_parameters(recurse=False):
            if p_name == "bias":
                g[2].append(p)
            elif p_name == "weight" and isinstance(v, bn):
                g[1].append(p)
            else:
                g[0].append(p)
    optimizer = torch.optim.SGD(g[2], lr=lr, momentum=momentum, nesterov=True)
    optimizer.add_param_group({"params": g[0], "weight_decay": decay})
    optimizer.add_param_group({"params": g[1], "weight_decay": 0.0})
    return optimizer


# ---- training (train.py) ------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="YOLOv5 data.yaml")
    ap.add_argument("--img", type=int, default=640, help="train image size (default %(default)s)")
    ap.add_argument("--batch", type=int, default=16, help="images per rank (default %(default)s)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs (default %(default)s)")
    ap.add_argument("--iters", type=int, default=0,
                    help="stop after N iterations in all (0: run --epochs whole)")
    ap.add_argument("--warmup-iters", type=int, default=3,
                    help="first iterations left out of images/s (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--hyp", help="YOLOv5 hyp.yaml (default: hyp.scratch-low's values)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", choices=("ram", "none"), default="ram",
                    help="ram: decode and letterbox every image before training; none: "
                    "inside the loop (default %(default)s)")
    ap.add_argument("--ema", choices=("on", "off"), default="on", help="YOLOv5's model EMA")
    ap.add_argument("--mosaic", choices=("off", "on"), default="off",
                    help="mosaic augmentation (only off is implemented)")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and batches in NHWC (YOLOv5 does not)")
    args = ap.parse_args(argv)
    if args.mosaic == "on":
        ap.error("--mosaic on is not implemented in this reference")
    if args.img % 32:
        ap.error("--img must be a multiple of 32 (the largest stride)")
    if args.batch < 1 or args.epochs < 1 or args.iters < 0 or args.warmup_iters < 0:
        ap.error("--batch and --epochs must be >= 1, --iters and --warmup-iters >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    distributed = world > 1
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)

    hyp = dict(SCRATCH_LOW)
    if args.hyp:
        with open(args.hyp) as f:
            hyp.update(yaml.safe_load(f) or {})
    files, nc = image_files(args.data, "train")
    t_load = time.monotonic()
    dataset = Dataset(files, args.img, cache=args.cache == "ram")
    load_s = time.monotonic() - t_load
    sampler = (torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True,
                                                               seed=args.seed)
               if distributed else None)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=sampler is None,
                                         sampler=sampler, num_workers=0, collate_fn=collate)
    nb = len(loader)

    model = YoloV5n(nc)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    nl = 3
    hyp["box"] *= 3 / nl
    hyp["cls"] *= nc / 80 * 3 / nl
    hyp["obj"] *= (args.img / 640) ** 2 * 3 / nl
    batch_size = args.batch * world  # YOLOv5's total batch
    accumulate = max(round(NBS / batch_size), 1)
    hyp["weight_decay"] *= batch_size * accumulate / NBS
    optimizer = smart_optimizer(model, hyp["lr0"], hyp["momentum"], hyp["weight_decay"])

    def lf(x):  # linear schedule (train.py without --cos-lr)
        return (1 - x / args.epochs) * (1.0 - hyp["lrf"]) + hyp["lrf"]

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model) if args.ema == "on" and rank == 0 else None
    compute_loss = ComputeLoss(model.anchors, nc, hyp)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, static_graph=True)

    nw = max(round(hyp["warmup_epochs"] * nb), 100)
    last_opt_step = -1
    optimizer.zero_grad()
    total_iters = args.iters or args.epochs * nb
    done = 0
    timed_images = 0
    t0 = None
    loss_items = None
    model.train()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for i, (imgs, targets) in enumerate(loader):
            if done == args.warmup_iters:
                if distributed:
                    dist.barrier()
                t0 = time.monotonic()
            ni = i + nb * epoch
            imgs = imgs.float().div_(255).contiguous(memory_format=memory_format)
            if ni <= nw:  # warm-up
                xi = [0, nw]
                accumulate = max(1, round(interp(ni, xi, [1, NBS / batch_size])))
                for j, x in enumerate(optimizer.param_groups):
                    start = hyp["warmup_bias_lr"] if j == 0 else 0.0
                    x["lr"] = interp(ni, xi, [start, x["initial_lr"] * lf(epoch)])
                    x["momentum"] = interp(ni, xi, [hyp["warmup_momentum"], hyp["momentum"]])
            pred = model(imgs)
            loss, loss_items = compute_loss(pred, targets)
            if distributed:
                loss *= world
            loss.backward()
            if ni - last_opt_step >= accumulate:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                optimizer.step()
                optimizer.zero_grad()
                if ema:
                    ema.update(model.module if distributed else model)
                last_opt_step = ni
            done += 1
            if t0 is not None:
                timed_images += imgs.shape[0]
            if done >= total_iters:
                break
        scheduler.step()
        if done >= total_iters:
            break
    if distributed:
        dist.barrier()
    seconds = time.monotonic() - t0 if t0 is not None else 0.0
    count = torch.tensor([timed_images], dtype=torch.float64)
    if distributed:
        dist.all_reduce(count)
    if rank == 0:
        print(json.dumps(dict(
            side="python", model="yolov5n", ranks=world, batch_per_rank=args.batch,
            image_size=args.img, train_images=len(dataset), iters=done,
            warmup_iters=args.warmup_iters, iters_timed=max(done - args.warmup_iters, 0),
            images_timed=int(count.item()), seconds=round(seconds, 4),
            images_per_sec=round(count.item() / seconds, 3) if seconds > 0 else None,
            threads=args.threads, cache=args.cache, ema=args.ema == "on",
            channels_last=args.channels_last, load_seconds=round(load_s, 3),
            decoder="PIL" if Image is not None else "png-zlib",
            loss=[round(v, 5) for v in loss_items.tolist()] if loss_items is not None else None,
            torch=torch.__version__)), flush=True)
    if distributed:
        dist.destroy_process_group()
    if t0 is None:
        sys.exit(f"only {done} iterations, none after --warmup-iters {args.warmup_iters}: "
                 "nothing timed (more images, epochs or --iters)")


def interp(x, xp, fp):
    """numpy.interp for two points."""
    if x <= xp[0]:
        return fp[0]
    if x >= xp[1]:
        return fp[1]
    return fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])


if __name__ == "__main__":
    main()
