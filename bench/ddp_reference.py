#!/usr/bin/python3
"""PyTorch Python DDP reference for bench/ddp_bench.py.

Trains what elastrun-train trains, from the same resolved config
(`elastrun-train --config F [overrides] --print-config > resolved.yaml`):

- the same MLP / CNN (trainer/models.cc), the same torch default init;
- the same Fashion-MNIST gzipped IDX files, held in memory as uint8 and
  batched the same way (index_select, /255, -mean, /std; trainer/data.cc);
- torch's DistributedSampler (seed, shuffle, pad), which elastrun-train
  reproduces bit for bit;
- SGD (momentum, Nesterov) with YOLOv5's three parameter groups (biases,
  decayed weights, norm weights) and weight decay scaled by
  global batch x accumulate / nbs; YOLOv5's warm-up and one-cycle schedule,
  counted in samples trained as the trainer counts it (the warm-up lasts
  YOLOv5's warm-up iterations x the global batch, in samples), gradient
  accumulation to nbs (trainer/optimizer.cc, trainer/schedule.cc);
- torch.set_num_threads(1) by default (train.threads), Gloo from the
  torchrun environment, DistributedDataParallel with its defaults (1 MiB
  first bucket, 25 MiB buckets, broadcast_buffers=True);
- a loss.item() every iteration, as the trainer's progress line does;
- train.device and train.amp / train.amp_dtype as trainer/device.cc reads
  them: `auto` is the LOCAL_RANK's GPU when CUDA is usable, else the CPU;
  `cuda` (the LOCAL_RANK's GPU), `cuda:N` and `cpu` force it. On a GPU the
  batches are gathered as uint8 into pinned memory, copied non_blocking and
  normalized there (trainer/data.cc MakeBatchOn), and the process group is
  NCCL (Gloo on a CPU). AMP: torch.autocast on the device around the forward
  and the loss; float16 scales the loss with a GradScaler set as elastrun's
  LossScaler (init 2^16, growth 2, backoff 0.5, interval 2000; inf/nan steps
  skipped) and autocasts on CUDA only (on a CPU the scaler runs alone, in
  fp32); bfloat16 autocasts on either device, unscaled.

images_per_sec is measured as the trainer does: from the start of the epoch
(before set_epoch) to the end of its last iteration, images of all ranks
(summed) / rank 0's seconds; evaluation is not in it. Rank 0 writes
<output_dir>/metrics.csv with elastrun-train's columns.

With data.synthetic: true it draws the trainer's synthetic set
(trainer/data.cc: class prototypes from the seed, noise per split) instead of
reading files.

Checkpoints (off by default; bench/goodput.py turns them on), as YOLOv5's
train.py: --checkpoint-dir DIR makes rank 0 save DIR/last.pt at the end of
every epoch (model, optimizer, epoch, the optimizer-step counter and the RNG
state; written to a temporary file, fsynced and renamed, so a kill mid-save
leaves the previous one, as elastrun-train's checkpoints do). With --resume
every rank loads DIR/last.pt when it exists and training continues at the
next epoch ("resumed from ...: epoch E, iteration 0"); the work of a partly
done epoch is lost, as in YOLOv5. --log-period N prints elastrun-train's
non-tty progress line ("epoch E/N iter I/T loss ...") every N iterations.

--sample-log DIR appends one line per batch to DIR/rank<RANK>.log, as
elastrun-train does with ELASTRUN_TRAIN_SAMPLE_LOG=DIR: "<attempt> <epoch>
<iteration> <sample index>..." (attempt = TORCHELASTIC_RESTART_COUNT, epoch
and iteration from 0), written unbuffered in one write() when the batch
starts, so a killed rank leaves whole lines (bench/node_goodput.py counts the
samples trained again from them).

For restart benchmarks (bench/gpu_bench.py through launch_bench.py):
--ready-dir DIR makes every rank write DIR/ready.<TORCHELASTIC_RESTART_COUNT>.<RANK>
(CLOCK_REALTIME ns) once its first iteration is done (its loss on the host:
CUDA context, data, the first step and, with several ranks, the first
allreduce all behind it), and --hang then blocks until a signal kills it.

Usage: /usr/bin/python3 bench/ddp_reference.py --config resolved.yaml \
           [--output-dir DIR] [--epochs N] [--log-period N] \
           [--checkpoint-dir DIR [--resume]] [--ready-dir DIR [--hang]] \
           [--sample-log DIR]
Run alone (1 process) or under `elastrun run` / torchrun (env://).
"""

import argparse
import contextlib
import gzip
import math
import os
import signal
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import yaml

from reference_device import Precision, make_batch, resolve_device

MIN_WARMUP_ITERS = 100


# ---- data (trainer/idx.cc, trainer/data.cc) --------------------------------

def read_idx(path, rank):
    if not os.path.exists(path) and path.endswith(".gz") and os.path.exists(path[:-3]):
        path = path[:-3]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 8 or ndim != rank:
        raise SystemExit(f"{path}: not a rank-{rank} unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = bytearray(data[4 + 4 * ndim:])
    return torch.frombuffer(body, dtype=torch.uint8).reshape(dims).clone()


def load_split(root, train):
    prefix = "train" if train else "t10k"
    images = read_idx(f"{root}/{prefix}-images-idx3-ubyte.gz", 3)
    labels = read_idx(f"{root}/{prefix}-labels-idx1-ubyte.gz", 1).to(torch.long)
    return images.unsqueeze(1), labels  # [n, 1, 28, 28] uint8, [n] int64


def synthetic_split(data, train, seed):
    """trainer/data.cc Synthetic(): learnable random images, same generators."""
    n = int(data.get("synthetic_train_size" if train else "synthetic_test_size",
                     60000 if train else 10000))
    s, classes = int(data.get("image_size", 28)), int(data.get("num_classes", 10))
    protos = torch.Generator().manual_seed(seed)
    noise = torch.Generator().manual_seed(seed * 2 + (1 if train else 2))
    prototypes = torch.rand((classes, 1, s, s), generator=protos)
    labels = torch.randint(classes, (n,), generator=noise, dtype=torch.long)
    x = prototypes.index_select(0, labels) * 0.6 + torch.rand((n, 1, s, s), generator=noise) * 0.4
    return (x * 255).round().clamp(0, 255).to(torch.uint8), labels


def load_data(data, train, seed):
    if data.get("synthetic", False):
        return synthetic_split(data, train, seed)
    return load_split(data["root"], train)


# ---- models (trainer/models.cc) ---------------------------------------------

def make_model(m, image_size):
    layers = []
    if m["_target_"] == "MLP":
        layers.append(nn.Flatten())
        n_in = int(m.get("in_features", 784))
        for h in m.get("hidden", [256, 256]):
            layers += [nn.Linear(n_in, h), nn.ReLU()]
            if float(m.get("dropout", 0.0)) > 0:
                layers.append(nn.Dropout(float(m["dropout"])))
            n_in = h
        layers.append(nn.Linear(n_in, int(m.get("num_classes", 10))))
    elif m["_target_"] == "CNN":
        channels_last = bool(m.get("channels_last", True))
        if channels_last:
            layers.append(ToChannelsLast())
        n_in = int(m.get("in_channels", 1))
        k = int(m.get("kernel_size", 3))
        size = int(m.get("image_size", image_size))
        for c in m.get("channels", [32, 64]):
            layers += [nn.Conv2d(n_in, c, k, padding=k // 2, bias=False),
                       nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            n_in = c
            size //= 2
        hidden = int(m.get("hidden", 128))
        layers += [nn.Flatten(), nn.Linear(n_in * size * size, hidden), nn.ReLU()]
        if float(m.get("dropout", 0.0)) > 0:
            layers.append(nn.Dropout(float(m["dropout"])))
        layers.append(nn.Linear(hidden, int(m.get("num_classes", 10))))
        if channels_last:
            return nn.Sequential(*layers).to(memory_format=torch.channels_last)
    else:
        raise SystemExit(f"model._target_ {m['_target_']!r}: only MLP and CNN")
    return nn.Sequential(*layers)


class ToChannelsLast(nn.Module):
    """NHWC activations, as the CNN's `channels_last: true` (trainer/models.cc)."""

    def forward(self, x):
        return x.contiguous(memory_format=torch.channels_last)


# ---- optimizer and schedule (trainer/optimizer.cc, trainer/schedule.cc) -----

def parameter_groups(model):
    bias, decay, norm = [], [], []
    for module in model.modules():
        is_norm = "Norm" in type(module).__name__
        for name, p in module.named_parameters(recurse=False):
            if name == "bias":
                bias.append(p)
            elif name == "weight" and is_norm:
                norm.append(p)
            else:
                decay.append(p)
    return bias, decay, norm


def interp(x, x0, x1, y0, y1):
    if x <= x0:
        return y0
    if x >= x1:
        return y1
    return y0 + (x - x0) * (y1 - y0) / (x1 - x0)


class Schedule:
    def __init__(self, s, lr0, nb, nbs, global_batch):
        self.s, self.lr0, self.nbs, self.gb = s, lr0, nbs, global_batch
        self.warmup_iters = max(round(float(s["warmup_epochs"]) * nb), MIN_WARMUP_ITERS)
        # As elastrun-train (trainer/schedule.h): the schedule counts samples
        # trained, the warm-up lasting warmup_iters global batches of them.
        self.warmup_samples = self.warmup_iters * global_batch
        self.accumulate = max(round(nbs / global_batch), 1)

    def lr_factor(self, epoch):
        n, lrf = float(self.s["epochs"]), float(self.s["lrf"])
        if self.s.get("one_cycle", True):
            return ((1 - math.cos(epoch * math.pi / n)) / 2) * (lrf - 1.0) + 1.0
        return (1 - epoch / n) * (1.0 - lrf) + lrf

    def at(self, seen, epoch):
        """Values for the batch trained after `seen` samples of the run."""
        target = self.lr0 * self.lr_factor(epoch)
        mom = float(self.s["momentum"])
        if seen <= self.warmup_samples:
            nw = self.warmup_samples
            return dict(
                bias_lr=interp(seen, 0, nw, float(self.s["warmup_bias_lr"]), target),
                lr=interp(seen, 0, nw, 0.0, target),
                momentum=interp(seen, 0, nw, float(self.s["warmup_momentum"]), mom),
                accumulate=max(1, round(interp(seen, 0, nw, 1.0, self.nbs / self.gb))))
        return dict(bias_lr=target, lr=target, momentum=mom, accumulate=self.accumulate)


# ---- checkpoints (YOLOv5's last.pt, every epoch) ------------------------------

def save_checkpoint(path, model, optimizer, scaler, epoch, last_opt_step, final):
    """Rank 0 after epoch `epoch` (0-based): atomically replaces `path`."""
    state = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=epoch,
                 last_opt_step=last_opt_step, rng=torch.get_rng_state(), final=final,
                 scaler=scaler.state_dict() if scaler else None,
                 cuda_rng=torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path, model, optimizer, scaler):
    """Returns (next epoch, last_opt_step, final) from `path`."""
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if scaler and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    if state.get("cuda_rng") is not None and torch.cuda.is_initialized():
        torch.cuda.set_rng_state(state["cuda_rng"])
    return state["epoch"] + 1, state["last_opt_step"], state["final"]


def open_sample_log(directory, rank):
    """DIR/rank<RANK>.log for appending, unbuffered (a raw fd)."""
    os.makedirs(directory, exist_ok=True)
    return os.open(os.path.join(directory, f"rank{rank}.log"),
                   os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def log_samples(fd, attempt, epoch, i, idx):
    """One write per batch, so a killed rank's lines are whole."""
    line = f"{attempt} {epoch} {i} " + " ".join(str(k) for k in idx.tolist()) + "\n"
    os.write(fd, line.encode())


def write_ready(directory, rank):
    """DIR/ready.<restart>.<rank> holding CLOCK_REALTIME ns, created atomically."""
    name = f"ready.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}.{rank}"
    tmp = os.path.join(directory, f".{name}.tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{time.clock_gettime_ns(time.CLOCK_REALTIME)}\n")
    os.rename(tmp, os.path.join(directory, name))


# ---- the loop (trainer/trainer.cc) --------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="resolved YAML (--print-config)")
    ap.add_argument("--output-dir", help="overrides train.output_dir")
    ap.add_argument("--epochs", type=int, help="overrides train.epochs (and the schedule's)")
    ap.add_argument("--log-period", type=int, default=0,
                    help="progress line every N iterations on rank 0 (default: none)")
    ap.add_argument("--checkpoint-dir",
                    help="rank 0 saves DIR/last.pt after every epoch (default: no checkpoints)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from DIR/last.pt when it exists (needs --checkpoint-dir)")
    ap.add_argument("--ready-dir", help="every rank writes DIR/ready.<restart>.<rank> "
                    "(CLOCK_REALTIME ns) once its first iteration is done")
    ap.add_argument("--sample-log", help="append each batch's sample indices to "
                    "DIR/rank<RANK>.log (elastrun-train's ELASTRUN_TRAIN_SAMPLE_LOG format)")
    ap.add_argument("--hang", action="store_true",
                    help="after the first iteration (and the ready file), block until killed")
    args = ap.parse_args()
    if args.resume and not args.checkpoint_dir:
        ap.error("--resume needs --checkpoint-dir")
    return args


def make_optimizer(model, opt, global_batch, schedule, nbs):
    """SGD over YOLOv5's groups; returns (optimizer, the groups' kinds)."""
    wd = float(opt.get("weight_decay", 5e-4)) * global_batch * schedule.accumulate / nbs
    if opt["_target_"] != "SGD":
        raise SystemExit("the reference implements SGD only")
    bias, decay, norm = parameter_groups(model)
    groups, kinds = [], []
    for params, kind, group_wd in ((bias, "bias", 0.0), (decay, "decay", wd),
                                   (norm, "norm", 0.0)):
        if params:
            groups.append(dict(params=params, weight_decay=group_wd))
            kinds.append(kind)
    optimizer = torch.optim.SGD(groups, lr=float(opt["lr0"]), momentum=float(opt["momentum"]),
                                nesterov=bool(opt.get("nesterov", True)))
    return optimizer, kinds


def evaluate(model, test_x, test_y, rank, world, precision, distributed):
    """Each rank scores a strided shard (not timed); [correct, loss sum, count]
    summed over ranks, on the device until the one read at the end."""
    device = precision.device
    model.eval()
    ev = torch.zeros(3, dtype=torch.float64, device=device)
    with torch.no_grad():
        shard = torch.arange(rank, len(test_y), world)
        for b in range(0, len(shard), 1000):
            x, y = make_batch(test_x, test_y, shard[b:b + 1000], device)
            with precision.autocast():
                logits = model(x)
                loss = F.cross_entropy(logits, y, reduction="sum")
            ev[0] += logits.argmax(1).eq(y).sum()
            ev[1] += loss.to(torch.float64)
            ev[2] += len(y)
    if distributed:
        dist.all_reduce(ev)
    model.train()
    return ev.cpu()


def main():
    args = parse_args()
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    data, train, opt, sched = cfg["data"], cfg["train"], cfg["optimizer"], cfg["scheduler"]
    if args.epochs:
        train["epochs"] = sched["epochs"] = args.epochs
    output_dir = args.output_dir or train["output_dir"]
    threads = int(train.get("threads", 1))
    if threads > 0:
        torch.set_num_threads(threads)

    distributed = "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ
    device = resolve_device(train.get("device", "auto"), int(os.environ.get("LOCAL_RANK", "0")))
    precision = Precision(train, device)
    scaler = precision.scaler
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    world = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0
    leader = rank == 0
    seed = int(train.get("seed", 0))

    torch.manual_seed(seed)
    model = make_model(cfg["model"], int(data.get("image_size", 28))).to(device)
    train_x, train_y = load_data(data, True, seed)
    test_x, test_y = load_data(data, False, seed)
    sampler = torch.utils.data.DistributedSampler(
        range(len(train_y)), num_replicas=world, rank=rank, shuffle=True, seed=seed,
        drop_last=bool(data.get("drop_last", False)))
    bs = int(data["batch_size"])
    nb = (sampler.num_samples + bs - 1) // bs
    global_batch = bs * world
    nbs = int(opt.get("nbs", 64))
    schedule = Schedule(sched, float(opt["lr0"]), nb, nbs, global_batch)
    optimizer, kinds = make_optimizer(model, opt, global_batch, schedule, nbs)
    start_epoch, last_opt_step, final = 0, -1, None
    last_pt = os.path.join(args.checkpoint_dir, "last.pt") if args.checkpoint_dir else None
    if args.resume and os.path.exists(last_pt):
        # Before DDP's constructor, which broadcasts rank 0's parameters anyway.
        start_epoch, last_opt_step, final = load_checkpoint(last_pt, model, optimizer, scaler)
        if leader:
            print(f"resumed from checkpoint {last_pt}: epoch {start_epoch + 1}, iteration 0",
                  flush=True)
    net = model
    if distributed:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)

    metrics = None
    if leader:
        os.makedirs(output_dir, exist_ok=True)
        if last_pt:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
        metrics = open(os.path.join(output_dir, "metrics.csv"), "a" if start_epoch else "w")
        if not start_epoch:
            metrics.write("epoch,train_loss,test_loss,test_acc,lr,seconds,images_per_sec\n")
        print(f"ddp_reference: {world} rank(s), batch {bs} x {world}, {nb} iterations/epoch, "
              f"warm-up {schedule.warmup_iters}, accumulate {schedule.accumulate}, "
              f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
              f"device {device}, {precision.name}", flush=True)

    sample_log = open_sample_log(args.sample_log, rank) if args.sample_log else None
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model.train()
    micro = 0
    epochs = int(train["epochs"])
    for epoch in range(start_epoch, epochs):
        epoch_start = time.perf_counter()
        sampler.set_epoch(epoch)
        indices = torch.tensor(list(iter(sampler)), dtype=torch.long)
        loss_sum, seen = 0.0, 0.0
        for i in range(nb):
            ni = i + nb * epoch
            v = schedule.at(epoch * len(train_y) + min(len(train_y), i * global_batch), epoch)
            for g, kind in zip(optimizer.param_groups, kinds):
                g["lr"] = v["bias_lr"] if kind == "bias" else v["lr"]
                g["momentum"] = v["momentum"]
            step = micro + 1 >= v["accumulate"]
            idx = indices[i * bs:(i + 1) * bs]
            if sample_log is not None:
                log_samples(sample_log, attempt, epoch, i, idx)
            x, y = make_batch(train_x, train_y, idx, device)
            # Without a step DDP only accumulates; backward outside autocast,
            # as PyTorch's AMP recipe (and the trainer) has it.
            with net.no_sync() if distributed and not step else contextlib.nullcontext():
                with precision.autocast():
                    loss = F.cross_entropy(net(x), y)
                (scaler.scale(loss) if scaler else loss).backward()
            micro += 1
            if step:
                if scaler:
                    scaler.unscale_(optimizer)
                if micro != 1:
                    with torch.no_grad():
                        for p in model.parameters():
                            if p.grad is not None:
                                p.grad.mul_(1.0 / micro)
                if scaler:  # skips the step when a gradient is inf/nan
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad()
                micro, last_opt_step = 0, ni
            n = float(len(idx))
            loss_item = loss.item()
            loss_sum += loss_item * n
            seen += n
            if args.ready_dir and ni == start_epoch * nb:
                write_ready(args.ready_dir, rank)
            if args.hang:
                while True:  # until a signal kills us (SIGTERM's default action)
                    signal.pause()
            if leader and args.log_period > 0 and ((i + 1) % args.log_period == 0 or i + 1 == nb):
                rate = (i + 1) / max(time.perf_counter() - epoch_start, 1e-9)
                print(f"epoch {epoch + 1}/{epochs} iter {i + 1}/{nb} loss {loss_item:.4f} "
                      f"lr {v['lr']:.4g} {rate:.1f} it/s eta {(nb - i - 1) / rate:.0f}s",
                      flush=True)
        train_s = time.perf_counter() - epoch_start
        sums = torch.tensor([loss_sum, seen], dtype=torch.float64, device=device)
        if distributed:
            dist.all_reduce(sums)
        sums = sums.cpu()
        ev = evaluate(model, test_x, test_y, rank, world, precision, distributed)
        epoch_s = time.perf_counter() - epoch_start
        if leader:
            ips = float(sums[1]) / train_s
            train_loss = float(sums[0] / sums[1])
            test_acc, test_loss = float(ev[0] / ev[2]), float(ev[1] / ev[2])
            lr = optimizer.param_groups[kinds.index("decay")]["lr"] if "decay" in kinds else 0
            metrics.write(f"{epoch + 1},{train_loss:.6f},{test_loss:.6f},{test_acc:.6f},"
                          f"{lr:.7g},{epoch_s:.3f},{ips:.1f}\n")
            metrics.flush()
            print(f"epoch {epoch + 1}/{epochs}: train_loss {train_loss:.4f} test_loss "
                  f"{test_loss:.4f} test_acc {test_acc:.4f} lr {lr:.5g} {epoch_s:.1f}s "
                  f"{ips:.0f} img/s", flush=True)
            final = dict(test_acc=test_acc, train_loss=train_loss)
            if last_pt:
                save_checkpoint(last_pt, model, optimizer, scaler, epoch, last_opt_step, final)
    if leader:
        metrics.close()
        print(f"final: epoch={epochs} test_acc={final['test_acc']:.4f} "
              f"train_loss={final['train_loss']:.4f}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
