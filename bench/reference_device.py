"""Where and in what precision bench/ddp_reference.py trains: the Python twin
of trainer/device.cc (train.device, train.amp, train.amp_dtype) and of
trainer/data.cc's MakeBatchOn (batches on a GPU). Imported by the reference
from its own folder (python puts a script's folder first on sys.path, and
elastrun's Python standbys do the same)."""

import contextlib
import os
import re

import torch

PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530

# elastrun's LossScaler (trainer/loss_scaler.h): GradScaler's defaults.
SCALER_OPTIONS = dict(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                      growth_interval=2000)


def normalize(pixels):
    return pixels.to(torch.float32).mul_(1.0 / 255.0).sub_(PIXEL_MEAN).div_(PIXEL_STD)


def make_batch(images, labels, idx, device):
    """trainer/data.cc MakeBatchOn: on a GPU, uint8 pixels gathered into pinned
    memory travel (4x fewer bytes than floats) and are normalized there."""
    if device.type == "cpu":
        return normalize(images.index_select(0, idx)), labels.index_select(0, idx)
    pixels = torch.empty((len(idx),) + tuple(images.shape[1:]), dtype=torch.uint8,
                         pin_memory=True)
    y = torch.empty(len(idx), dtype=torch.long, pin_memory=True)
    torch.index_select(images, 0, idx, out=pixels)
    torch.index_select(labels, 0, idx, out=y)
    return (normalize(pixels.to(device, non_blocking=True)),
            y.to(device, non_blocking=True))


# ---- device and precision (trainer/device.cc) ----------------------------------

def resolve_device(spec, local_rank):
    """train.device -> torch.device, with the trainer's errors; makes a GPU current."""
    spec, usable = str(spec), torch.cuda.is_available()
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", spec):
        raise SystemExit(f"train.device {spec!r}: auto, cpu, cuda or cuda:N")
    if spec == "cpu" or (spec == "auto" and not usable):
        return torch.device("cpu")
    if not usable:
        raise SystemExit(f"train.device is {spec!r} but CUDA is not usable here (no GPU "
                         f"visible; CUDA_VISIBLE_DEVICES is "
                         f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    count = torch.cuda.device_count()
    index = int(spec[5:]) if spec.startswith("cuda:") else local_rank
    if index >= count:
        raise SystemExit(f"train.device is {spec!r} but GPU {index} (local rank "
                         f"{local_rank}) is not there: {count} visible")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


class HostScaler:
    """GradScaler's arithmetic where torch's GradScaler is CUDA-only (torch < 2.3)
    and the model is on a CPU: the subset this script calls."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval):
        self.scale_, self.tracker, self.found_inf = init_scale, 0, False
        self.growth, self.backoff, self.interval = growth_factor, backoff_factor, growth_interval

    def scale(self, loss):
        return loss * self.scale_

    def unscale_(self, optimizer):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        for grad in grads:
            grad.mul_(1.0 / self.scale_)
        self.found_inf = not all(bool(torch.isfinite(grad).all()) for grad in grads)

    def step(self, optimizer):
        if not self.found_inf:
            optimizer.step()

    def update(self):
        self.tracker = 0 if self.found_inf else self.tracker + 1
        if self.found_inf:
            self.scale_ *= self.backoff
        elif self.tracker == self.interval:
            self.scale_, self.tracker = self.scale_ * self.growth, 0
        self.found_inf = False

    def state_dict(self):
        return dict(scale=self.scale_, _growth_tracker=self.tracker)

    def load_state_dict(self, state):
        self.scale_, self.tracker = state["scale"], state["_growth_tracker"]


class Precision:
    """train.amp / train.amp_dtype on `device`, as trainer/device.cc's Placement."""

    def __init__(self, train, device):
        amp, dtype = bool(train.get("amp", False)), str(train.get("amp_dtype", "float16"))
        if dtype not in ("float16", "bfloat16"):
            raise SystemExit(f"train.amp_dtype {dtype!r}: float16 or bfloat16")
        self.device = device
        self.dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float16
        # CPU autocast knows bfloat16 only.
        self.autocasts = amp and (device.type == "cuda" or self.dtype == torch.bfloat16)
        self.scaler = None
        if amp and self.dtype == torch.float16:
            if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3: any device
                self.scaler = torch.amp.GradScaler(device.type, **SCALER_OPTIONS)
            elif device.type == "cuda":
                self.scaler = torch.cuda.amp.GradScaler(**SCALER_OPTIONS)
            else:
                self.scaler = HostScaler(**SCALER_OPTIONS)
        self.name = (f"amp {dtype}" + (" autocast" if self.autocasts else "")
                     + (" + loss scaling" if self.scaler else "")) if amp else "fp32"

    def autocast(self):
        if not self.autocasts:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)
