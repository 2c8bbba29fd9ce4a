#!/usr/bin/python3
"""test_pipeline_schedules.py: every pipeline schedule the engine runs as
action lists (gpipe, 1f1b, interleaved with virtual stages, zbh1 with the
backward split into B and W) against the single-process oracle.

- Layouts x schedules: pp 2 and 4, with tp and dp where 8 ranks allow, give
  the one-process loss sequence within 1e-5 relative over 10 steps and the
  same final parameters (max |a-b| / max |b| <= 1e-5); with ZeRO 1 and 3.
  The model has 8 layers so pp 4 x 2 virtual stages holds one layer per
  chunk; a global batch of 16 sequences in micro-batches of 2 gives m = 8
  (dp 1) or 4 (dp 2) micro-batches per step.
- The engine's own count of live activation sets: 1f1b at most p on the
  first stage (gpipe m); zbh1 at most p (ZB-H1 keeps 1F1B's peak);
  interleaved reports its measured bubble beside the theory.
- Resharding: a checkpoint written with pp 2 x 2 virtual stages exports
  (ckpt export) the parameters the writing layout holds, bitwise, and resumes
  with 1 virtual stage, whose checkpoint resumes on one process; each reads
  back bitwise the parameters the writing layout holds and continues with
  the losses of the uninterrupted run (1e-5; summation order differs).
- Bad input, one line each before any work: --virtual-stages not dividing
  a stage's layers, interleaved with fewer micro-batches than stages, zbh1
  or interleaved with --pp 1, --virtual-stages without interleaved, a batch
  a --batch-schedule reaches on the way that interleaving cannot split,
  --balance with interleaved.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, one_line_error, read_model, rel, run  # noqa: E402
from harness.model_parallel_runs import train as train_model  # noqa: E402

L = 8
SCHEDULES = {"gpipe": ["--pp-schedule", "gpipe"], "1f1b": ["--pp-schedule", "1f1b"],
             "interleaved": ["--pp-schedule", "interleaved", "--virtual-stages", "2"],
             "zbh1": ["--pp-schedule", "zbh1"]}


def train(data, prefix, ranks=1, extra=(), steps=10, micro=2, check=True):
    return train_model(data, prefix, ranks=ranks, steps=steps, micro=micro, check=check,
                       extra=["--layers", str(L), "--global-batch", "16"] + list(extra))


class PipelineScheduleTest(CorpusTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.oracle_m, cls.oracle_p, _ = train(cls.data, os.path.join(cls.dir, "oracle"), micro=16)

    def check(self, label, m, p):
        self.assertEqual(len(m), len(self.oracle_m), label)
        for a, b in zip(m, self.oracle_m):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"{label} step {a['step']}")
        self.assertLess(rel(p, self.oracle_p), 1e-5, label)

    def run_layout(self, schedule, tp, pp, dp, extra=()):
        label = f"{schedule} tp {tp} pp {pp} dp {dp} {' '.join(extra)}"
        m, p, out = train(self.data, self.path(f"{schedule}{tp}{pp}{dp}{len(extra)}"), ranks=tp * pp * dp,
                          extra=["--tp", str(tp), "--pp", str(pp)] + SCHEDULES[schedule] + list(extra))
        self.check(label, m, p)
        return m

    def test_layouts(self):
        for schedule in SCHEDULES:
            for tp, pp, dp in ((1, 2, 1), (1, 4, 1), (2, 2, 2), (1, 4, 2)):
                with self.subTest(schedule=schedule, tp=tp, pp=pp, dp=dp):
                    m = self.run_layout(schedule, tp, pp, dp)
                    micro = 16 // (2 * dp)
                    live = max(r["max_live_microbatches"] for r in m)
                    if schedule == "gpipe":
                        self.assertLessEqual(live, micro)
                    elif schedule in ("1f1b", "zbh1"):
                        self.assertLessEqual(live, pp, f"{schedule}: live activation sets")
                    self.assertIn("bubble_theory_share", m[-1])

    def test_zero(self):
        for schedule in SCHEDULES:
            for zero in ("1", "3"):
                with self.subTest(schedule=schedule, zero=zero):
                    self.run_layout(schedule, 1, 2, 2, ["--zero", zero])

    def test_reshard_virtual_stages(self):
        ck = self.path("ck_v2")
        v2 = SCHEDULES["interleaved"]
        full, _, _ = train(self.data, self.path("v2_full"), ranks=2,
                           extra=["--pp", "2", "--ckpt-dir", ck, "--ckpt-every", "4", "--keep-last", "0"] + v2)
        at4 = os.path.join(ck, "step_00000004")
        _, p4, _ = train(self.data, self.path("v2_ref4"), ranks=2, steps=4,
                         extra=["--pp", "2", "--resume", at4, "--ckpt-dir", self.path("ck_v2_ref")] + v2)
        ck1 = self.path("ck_v1")
        _, q4, _ = train(self.data, self.path("v1_read"), ranks=2, steps=4,
                         extra=["--pp", "2", "--resume", at4, "--ckpt-dir", self.path("ck_v1_read")])
        self.assertTrue(np.array_equal(q4, p4), "v=2 -> v=1: parameters read back differ")
        exported = self.path("v2_export.bin")  # ckpt export and inspect read the chunks' files as model stages
        run(["ckpt", "export", "--llmc", exported, at4])
        self.assertTrue(np.array_equal(read_model(exported)[1], p4), "ckpt export of a v=2 checkpoint differs")
        self.assertIn("2 virtual stages", run(["ckpt", "inspect", at4]).stdout)
        m1, _, _ = train(self.data, self.path("v1_cont"), ranks=2,
                         extra=["--pp", "2", "--resume", at4, "--ckpt-dir", ck1, "--ckpt-every", "7",
                                "--keep-last", "0"])
        at7 = os.path.join(ck1, "step_00000007")
        _, p7, _ = train(self.data, self.path("v1_ref7"), ranks=2, steps=7,
                         extra=["--pp", "2", "--resume", at7, "--ckpt-dir", self.path("ck_v1_ref")])
        _, q7, _ = train(self.data, self.path("one_read"), steps=7,
                         extra=["--resume", at7, "--ckpt-dir", self.path("ck_one_read")])
        self.assertTrue(np.array_equal(q7, p7), "v=1 -> one process: parameters read back differ")
        m0, _, _ = train(self.data, self.path("one_cont"),
                         extra=["--resume", at7, "--ckpt-dir", self.path("ck_one")])
        # the same --steps throughout: the learning-rate schedule spans the whole run
        for resumed, first in ((m1, 4), (m0, 7)):
            self.assertEqual(len(resumed), 10 - first)
            for a, b in zip(resumed, full[first:]):
                self.assertEqual(a["step"], b["step"])
                self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"resumed step {a['step']}")

    def refused(self, ranks, extra, words):
        p = train(self.data, self.path("bad"), ranks=ranks, extra=extra, check=False)
        self.assertNotEqual(p.returncode, 0, extra)
        line = one_line_error(p, ranks)
        self.assertIsNotNone(line, f"{extra}: not one line:\n{p.stderr}")
        for w in words:
            self.assertIn(w, line, f"{extra}: {p.stderr}")
        self.assertNotIn("step 1", p.stdout, "refused only after training started")

    def test_bad_input(self):
        self.refused(2, ["--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages", "3"],
                     ["--virtual-stages 3", "layers"])
        self.refused(4, ["--pp", "4", "--pp-schedule", "interleaved", "--virtual-stages", "2", "--micro-batch", "8"],
                     ["interleaved", "micro-batches"])
        self.refused(1, ["--pp-schedule", "zbh1"], ["zbh1", "--pp"])
        self.refused(1, ["--pp-schedule", "interleaved", "--virtual-stages", "2"], ["interleaved", "--pp"])
        self.refused(2, ["--pp", "2", "--virtual-stages", "2"], ["--virtual-stages", "interleaved"])
        # a batch the ramp reaches on the way (6 sequences = 3 micro-batches on 2 stages), found before the first step
        self.refused(2, ["--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages", "2", "--batch-schedule",
                         "ramp:4:2:2048"], ["a batch of 6 sequences", "ramp:4:2:2048"])
        self.refused(2, ["--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages", "2", "--balance"],
                     ["--balance", "interleaved"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
