#!/usr/bin/env python3
"""Tests of bench/node_goodput.py's reading of a run (standard library only):
python3 bench/node_goodput_test.py"""

import os
import shutil
import tempfile
import time
import unittest

import node_goodput as ng


def progress(t, epoch, it, iters, epochs=3):
    return (t, f"[rank0]:epoch {epoch}/{epochs} iter {it}/{iters} loss 2.3 lr 0 5.8 it/s eta 1s")


class StallTest(unittest.TestCase):
    def test_iterations_and_epoch_ends_are_not_stalls(self):
        # 0.1 s an iteration, 0.4 s across an epoch's end (its evaluation).
        lines, t = [], 0.0
        for epoch in (1, 2, 3):
            for it in range(1, 5):
                lines.append(progress(t, epoch, it, 4))
                t += 0.1
            t += 0.3
        stalls, inner = ng.find_stalls(ng.progress_events(lines), None)
        self.assertEqual(stalls, [])
        self.assertAlmostEqual(inner[4], 0.1)

    def test_a_gap_counts_above_the_usual_iteration(self):
        lines = [progress(0.1 * i, 1, i + 1, 40) for i in range(10)]
        # A kill: 3 s with nothing, then world size 1 (twice the iterations).
        lines += [progress(3.9 + 0.1 * i, 1, 19 + i, 80) for i in range(10)]
        stalls, inner = ng.find_stalls(ng.progress_events(lines), None)
        self.assertEqual(len(stalls), 1)
        t_from, t_to, s = stalls[0]
        self.assertAlmostEqual(t_from, 0.9)
        self.assertAlmostEqual(t_to, 3.9)
        self.assertAlmostEqual(s, 2.9)  # above one 0.1 s iteration at the new world size
        self.assertEqual(set(inner), {40, 80})

    def test_a_cut_run_ends_in_a_stall(self):
        lines = [progress(0.1 * i, 1, i + 1, 40) for i in range(10)]
        stalls, _ = ng.find_stalls(ng.progress_events(lines), 5.0)
        self.assertEqual(len(stalls), 1)
        self.assertAlmostEqual(stalls[0][2], 5.0 - 0.9 - 0.1)
        self.assertEqual(ng.find_stalls(ng.progress_events(lines), 1.0)[0], [])


class FaultOfTest(unittest.TestCase):
    FAULTS = [dict(kill=10.0, where="", back=20.0), dict(kill=40.0, where="", back=None)]

    def test_phases(self):
        f = self.FAULTS
        self.assertIsNone(ng.fault_of(f, 9.0))
        self.assertEqual(ng.fault_of(f, 15.0), (0, 0))
        self.assertEqual(ng.fault_of(f, 25.0), (0, 1))
        self.assertEqual(ng.fault_of(f, 45.0), (1, 0))  # not back yet
        # A stall across the kill is the kill's, even when it ends after the rejoin.
        self.assertEqual(ng.fault_of(f, 25.0, 9.9), (0, 0))
        # One that starts just before node 1 is back, after the kill: the rejoin's.
        self.assertEqual(ng.fault_of(f, 21.0, 19.9), (0, 1))


class RedoneTest(unittest.TestCase):
    def test_repeats_within_an_epoch_across_ranks_and_attempts(self):
        samples = [
            (1.0, 0, 0, (0, 2)), (1.0, 0, 0, (1, 3)),  # epoch 0 on 2 ranks
            (2.0, 0, 0, (0, 1, 2, 3)),                 # the epoch again on 1 rank
            (3.0, 1, 0, (0, 1, 2, 3)),                 # epoch 1: new, not redone
        ]
        trained, distinct, redone = ng.count_redone(samples)
        self.assertEqual(trained, 12)
        self.assertEqual(distinct, {0: 4, 1: 4})
        self.assertEqual(redone, [(2.0, 4)])

    def test_summary_attributes_to_the_fault_before(self):
        # 8 samples, batch 128 per rank is ng.BATCH: use indices only.
        train_size = ng.BATCH * 2 * 2  # 2 iterations an epoch on 2 ranks
        lines = [progress(0.0, 1, 1, 2), progress(0.1, 1, 2, 2), progress(0.2, 2, 1, 2),
                 progress(5.0, 2, 1, 4), progress(5.1, 2, 2, 4),
                 progress(5.2, 2, 3, 4), progress(5.3, 2, 4, 4)]
        lines.append((0.0, "[rank0]:elastrun-train: 2 rank(s), 512 train"))
        lines.append((4.9, "[rank0]:elastrun-train: 1 rank(s), 512 train"))
        first = tuple(range(ng.BATCH))
        samples = [(0.2, 1, 0, first), (0.2, 1, 0, tuple(range(ng.BATCH, 2 * ng.BATCH))),
                   (5.0, 1, 0, first), (5.1, 1, 1, tuple(range(2 * ng.BATCH, 3 * ng.BATCH)))]
        r = dict(lines=lines, samples=samples, end=6.0, faults=[dict(kill=0.5, where="x", back=4.0),
                                                         dict(kill=30.0, where="y", back=None)],
                 status="ran --minutes")
        ng.summarize(r, train_size, 64)
        self.assertEqual(r["starts"], [2, 1])
        self.assertEqual(r["redone"], ng.BATCH)
        self.assertEqual(r["per_fault"], [ng.BATCH, 0])
        self.assertEqual(r["split_redone"], [[0, ng.BATCH], [0, 0]])  # after node 1 was back
        self.assertEqual(r["unattributed"], 0)
        # Redone on 1 rank (4 iterations an epoch): one iteration's time.
        self.assertAlmostEqual(r["redone_s"], 0.1)
        self.assertEqual(r["missing"], 0)
        self.assertAlmostEqual(r["window"], 6.0)
        stall = sum(s for _, _, s in r["stalls"])
        self.assertAlmostEqual(stall, 4.8 - 0.1 + 0.7 - 0.1)  # the gap, then the cut end
        self.assertAlmostEqual(r["goodput"], 1 - (stall + 0.1) / 6.0)
        # The gap began before node 1 was back, the cut end after.
        self.assertEqual(len(r["split_stall"]), 2)
        self.assertAlmostEqual(r["split_stall"][0][0], 4.7)
        self.assertAlmostEqual(r["split_stall"][0][1], 0.6)

    def test_missing_samples_of_a_complete_epoch(self):
        samples = [(1.0, 0, 0, tuple(range(ng.BATCH))), (2.0, 1, 0, (0,))]
        r = dict(lines=[], samples=samples, end=None, faults=[], status="finished")
        ng.summarize(r, 2 * ng.BATCH, 64)
        self.assertEqual(r["missing"], ng.BATCH)
        self.assertIsNone(r["goodput"])


class SampleTailTest(unittest.TestCase):
    def test_whole_lines_only_and_new_files(self):
        folder = tempfile.mkdtemp()
        try:
            tail = ng.SampleTail([folder, os.path.join(folder, "absent")], time.monotonic())
            with open(os.path.join(folder, "rank0.log"), "w") as f:
                f.write("0 0 0 1 2\n0 0 1 3")
            with open(os.path.join(folder, "other.txt"), "w") as f:
                f.write("0 0 0 9\n")
            tail.poll()
            self.assertEqual([l[1:] for l in tail.lines], [(0, 0, (1, 2))])
            with open(os.path.join(folder, "rank0.log"), "a") as f:
                f.write(" 4\nbad\n")
            with open(os.path.join(folder, "rank1.log"), "w") as f:
                f.write("1 2 0 5\n")
            tail.poll()
            self.assertEqual([l[1:] for l in tail.lines],
                             [(0, 0, (1, 2)), (0, 1, (3, 4)), (2, 0, (5,))])
            self.assertEqual(tail.bad, 1)
        finally:
            shutil.rmtree(folder)


if __name__ == "__main__":
    unittest.main()
