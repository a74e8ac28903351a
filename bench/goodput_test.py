#!/usr/bin/env python3
"""Tests of bench/goodput.py's log reading and worker finding (standard
library only): python3 bench/goodput_test.py"""

import os
import signal
import subprocess
import sys
import unittest

import goodput

ELASTRUN_LOG = """\
elastrun: run goodput-elastrun-faults: 2 workers, max restarts 1000, logs in /tmp/x
[rank0]:no checkpoint of this run in /tmp/x/checkpoints; starting fresh
[rank0]:elastrun-train: 2 rank(s), 2560 train / 1024 test samples, batch 128 x 2, 10 iterations/epoch, warm-up 100 iterations, accumulate 1
[rank0]:epoch 1/3 iter 1/10 loss 2.3 lr 0 5.8 it/s eta 7s
[rank0]:epoch 1/3 iter 10/10 loss 2.1 lr 0 5.8 it/s eta 0s
[rank0]:epoch 1/3: train_loss 2.2 test_loss 2.2 test_acc 0.2 lr 0.0016 4.7s 582 img/s
[rank0]:epoch 2/3 iter 1/10 loss 2.0 lr 0 5.8 it/s eta 7s
[rank0]:epoch 2/3 iter 4/10 loss 2.0 lr 0 5.8 it/s eta 7s
elastrun: worker rank 1 failed with signal 9 (SIGKILL); restarting (1 of 1000)
[rank0]:resumed from rank 0's checkpoint: epoch 2, iteration 0
[rank0]:elastrun-train: 2 rank(s), 2560 train / 1024 test samples, batch 128 x 2, 10 iterations/epoch, warm-up 100 iterations, accumulate 1
[rank0]:epoch 2/3 iter 1/10 loss 2.0 lr 0 5.8 it/s eta 7s
[rank0]:epoch 3/3 iter 7/10 loss 2.0 lr 0 5.8 it/s eta 7s
elastrun: worker rank 0 failed with signal 9 (SIGKILL); restarting (2 of 1000)
[rank0]:resumed at epoch 3, iteration 0 from the snapshot in memory of rank 1 (every rank had it)
[rank0]:elastrun-train: 2 rank(s), 2560 train / 1024 test samples, batch 128 x 2, 10 iterations/epoch, warm-up 100 iterations, accumulate 1
[rank0]:epoch 3/3 iter 10/10 loss 2.0 lr 0 5.8 it/s eta 0s
[rank0]:final: epoch=3 test_acc=1.0000 train_loss=0.0321 params_sha256=ab
elastrun: run goodput-elastrun-faults succeeded
"""


def lines(text):
    return [(0.0, l) for l in text.splitlines()]


class AttemptsTest(unittest.TestCase):
    def test_elastrun_checkpoint_resumes(self):
        r = goodput.summarize(dict(status="ok", lines=lines(ELASTRUN_LOG), kills=[]))
        self.assertEqual(r["restarts"], 2)
        # Reached step 14 (epoch 2 iter 4), resumed at 10; reached 27, resumed at 20.
        self.assertEqual(r["redone"], [4, 7])
        self.assertEqual(r["sources"], ["checkpoint", "snapshot in memory"])
        self.assertEqual(r["final"], "acc 1.0000 loss 0.0321")
        self.assertEqual(r["status"], "ok")

    def test_reference_fresh_restart_then_checkpoint(self):
        log = """\
ddp_reference: 2 rank(s), batch 128 x 2, 10 iterations/epoch, warm-up 100
epoch 1/2 iter 6/10 loss 2.3 lr 0 5.8 it/s eta 1s
[WARNING] torchrun: restarting
ddp_reference: 2 rank(s), batch 128 x 2, 10 iterations/epoch, warm-up 100
epoch 1/2 iter 1/10 loss 2.3 lr 0 5.8 it/s eta 1s
epoch 2/2 iter 3/10 loss 2.3 lr 0 5.8 it/s eta 1s
resumed from checkpoint /tmp/run/weights/last.pt: epoch 2, iteration 0
ddp_reference: 2 rank(s), batch 128 x 2, 10 iterations/epoch, warm-up 100
epoch 2/2 iter 1/10 loss 2.3 lr 0 5.8 it/s eta 1s
"""
        r = goodput.summarize(dict(status="ok", lines=lines(log), kills=[]))
        self.assertEqual(r["redone"], [6, 3])
        self.assertEqual(r["sources"], ["fresh start", "checkpoint"])
        self.assertEqual(r["status"], "no final line")

    def test_resume_line_after_banner_names_its_tier(self):
        log = """\
[rank0]:elastrun-train: 2 rank(s), 2560 train
[rank0]:epoch 1/2 iter 8/10 loss 2.3
[rank0]:elastrun-train: 2 rank(s), 2560 train
[rank0]:resumed from the shared-memory snapshot (step 7): epoch 1, iteration 7
[rank0]:epoch 1/2 iter 8/10 loss 2.3
"""
        r = goodput.summarize(dict(status="ok", lines=lines(log), kills=[]))
        self.assertEqual(r["redone"], [1])
        self.assertEqual(r["sources"], ["the shared-memory snapshot (step 7)"])

    def test_without_resume_line_first_progress_tells(self):
        log = """\
[rank0]:elastrun-train: 2 rank(s)
[rank0]:epoch 1/2 iter 9/10 loss 2.3
[rank0]:elastrun-train: 2 rank(s)
[rank0]:continuing at step 8 from somewhere new
[rank0]:epoch 1/2 iter 9/10 loss 2.3
"""
        r = goodput.summarize(dict(status="ok", lines=lines(log), kills=[]))
        self.assertEqual(r["redone"], [1])
        self.assertEqual(r["sources"], ["(from progress)"])


# A launcher stand-in: a child that has exited (a zombie, the oldest), two
# workers in one process group, then a standby in a group of its own; prints
# the pids and waits.
FAKE_LAUNCHER = r"""
import os, subprocess, sys, time
done = subprocess.Popen(["true"])
os.waitid(os.P_PID, done.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
w0 = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setpgid(0, 0))
w1 = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setpgid(0, w0.pid))
time.sleep(0.05)  # the standby starts in a later clock tick, as under --standby
standby = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setpgid(0, 0))
print(done.pid, w0.pid, w1.pid, standby.pid, flush=True)
sys.stdin.read()
"""


class RunningWorkersTest(unittest.TestCase):
    def test_the_oldest_live_group_not_zombies_nor_standbys(self):
        with subprocess.Popen([sys.executable, "-c", FAKE_LAUNCHER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as p:
            pids = [int(x) for x in p.stdout.readline().split()]
            try:
                self.assertEqual(len(pids), 4)
                _, w0, w1, _ = pids
                self.assertEqual(goodput.children(p.pid), set(pids))
                self.assertEqual(goodput.running_workers(p.pid), sorted([w0, w1]))
            finally:
                for pid in pids[1:]:  # the sleeps, by pid; the zombie goes with p
                    os.kill(pid, signal.SIGKILL)
                p.kill()

    def test_no_children(self):
        with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE) as p:
            try:
                self.assertEqual(goodput.running_workers(p.pid), [])
            finally:
                p.kill()


if __name__ == "__main__":
    unittest.main()
