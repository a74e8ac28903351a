#!/usr/bin/python3
"""A plain torchrun-style DDP script: nothing in it knows about elastrun.

Launch tests run it unchanged under `elastrun run` to prove torchrun
compatibility. It trains a tiny MLP with DistributedDataParallel over Gloo
for a few SGD steps, then prints `rank R/W ok restart=N` (and, on rank 0,
`params <hash>` of the final parameters rounded to 1e-4: each rank's batch
is a shard of one global batch of 16, so the hash is the same for every
world size dividing 16, given the same --seed and --steps). It has the same failure and readiness flags as
elastrun-test-worker (--ready-dir, --fail-rank, --fail-mode
sigkill|exit:CODE|throw, --fail-restarts, --fail-at-step, --steps,
--step-ms, --hang).

Run it with Debian's interpreter (/usr/bin/python3), which has torch.
"""
import argparse
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=5, help="SGD steps")
    p.add_argument("--step-ms", type=int, default=0, help="sleep per step (ms)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ready-dir", help="create DIR/ready.<restart>.<rank> "
                   "(CLOCK_REALTIME ns) after init")
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-mode", default="throw",
                   help="sigkill | exit:CODE | throw")
    p.add_argument("--fail-restarts", type=int, default=1,
                   help="fail while TORCHELASTIC_RESTART_COUNT < K; -1: always")
    p.add_argument("--fail-at-step", type=int, default=-1,
                   help="fail at this step instead of right after init")
    p.add_argument("--hang", action="store_true",
                   help="after the first barrier (and the ready file), block "
                   "until killed")
    args = p.parse_args()
    mode = args.fail_mode
    if not (mode in ("sigkill", "throw") or
            (mode.startswith("exit:") and mode[5:].isdigit())):
        p.error(f"--fail-mode: {mode!r} is not sigkill, exit:CODE or throw")
    if args.fail_at_step >= args.steps:
        p.error(f"--fail-at-step {args.fail_at_step} needs --steps greater than it")
    return args


def write_ready(directory, restart, rank):
    name = f"ready.{restart}.{rank}"
    tmp = os.path.join(directory, f".{name}.tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{time.clock_gettime_ns(time.CLOCK_REALTIME)}\n")
    os.rename(tmp, os.path.join(directory, name))


def fail(mode, rank, restart, where):
    print(f"rank {rank}: injected failure {where} (restart {restart})",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode.startswith("exit:"):
        os._exit(int(mode[5:]))
    raise RuntimeError(f"injected failure on rank {rank} {where} (restart {restart})")


def params_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        # Rounded: summation order differs with the world size.
        h.update((torch.round(p.detach(), decimals=4) + 0.0).numpy().tobytes())
    return h.hexdigest()[:16]


@record
def main():
    args = parse_args()
    dist.init_process_group("gloo")  # env:// from the launcher's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    fails = rank == args.fail_rank and (
        args.fail_restarts < 0 or restart < args.fail_restarts)

    torch.manual_seed(args.seed)  # Same initial model and data everywhere.
    model = DDP(torch.nn.Sequential(
        torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dist.barrier()
    if args.ready_dir:
        write_ready(args.ready_dir, restart, rank)
    if fails and args.fail_at_step < 0:
        fail(args.fail_mode, rank, restart, "after the first barrier")
    if args.hang:
        while True:  # until a signal kills us (SIGTERM's default action)
            signal.pause()

    if GLOBAL_BATCH % world:
        raise ValueError(f"WORLD_SIZE={world} does not divide the batch of {GLOBAL_BATCH}")
    shard = GLOBAL_BATCH // world
    for step in range(args.steps):
        if fails and step == args.fail_at_step:
            fail(args.fail_mode, rank, restart, f"at step {step}")
        x = torch.randn(GLOBAL_BATCH, 10)
        y = torch.randn(GLOBAL_BATCH, 1)
        mine = slice(rank * shard, (rank + 1) * shard)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        loss.backward()  # DDP averages gradients over ranks here.
        opt.step()
        if args.step_ms:
            time.sleep(args.step_ms / 1000)

    dist.barrier()
    print(f"rank {rank}/{world} ok restart={restart}", flush=True)
    if rank == 0:
        print(f"params {params_hash(model.module)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
