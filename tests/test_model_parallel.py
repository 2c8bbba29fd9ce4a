#!/usr/bin/python3
"""test_model_parallel.py: tensor and pipeline parallelism (and 3D) against
the single-process oracle.

- Equivalence: layouts (tp, pp, dp) in {(2,1,1), (1,2,1), (2,2,1), (1,2,2),
  (2,1,2), (2,2,2)} with the same global batch give the one-process loss
  sequence within 1e-5 relative over 10 steps and the same final parameters
  (max |a-b| / max |b| <= 1e-5), for GPipe and 1F1B; composed with ZeRO 1
  and 3 on the data-parallel group.
- Per-rank parameters shrink by tp x pp: each rank holds exactly its share
  of the split tensors plus the tensors every tensor-parallel rank keeps
  whole (LayerNorms, row-parallel biases, position embeddings), stated and
  checked against the formula.
- 1F1B keeps at most pp micro-batches of activations alive on the first
  stage, GPipe all m (the engine's own count).
- Impossible layouts are refused before any work.
- --pp-split auto balances the stages by FLOPs with the output layer on the
  last stage (a Python transcription of the cost picks the split the
  trainer prints) and, like any split, gives the one-process run.
- A tp2 x pp2 checkpoint resumes on dp 4 (ZeRO 1) and on one process with
  bitwise the same parameters and the never-resharded run's losses (1e-5).
"""
import os
import re
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, rel  # noqa: E402
from harness.model_parallel_runs import C, L, T, VP, train  # noqa: E402


class ModelParallelTest(CorpusTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.oracle_m, cls.oracle_p, _ = train(cls.data, os.path.join(cls.dir, "oracle"), micro=8)

    def check_layout(self, tp, pp, dp, extra=()):
        label = f"tp {tp} pp {pp} dp {dp} {' '.join(extra)}"
        m, p, out = train(self.data, self.path(f"l{tp}{pp}{dp}{len(extra)}"), ranks=tp * pp * dp,
                          extra=["--tp", str(tp), "--pp", str(pp)] + list(extra))
        self.assertEqual(len(m), len(self.oracle_m), label)
        for a, b in zip(m, self.oracle_m):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"{label} step {a['step']}")
        self.assertLess(rel(p, self.oracle_p), 1e-5, label)
        return m, out

    def test_layouts_1f1b(self):
        for tp, pp, dp in ((2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 2, 2), (2, 1, 2), (2, 2, 2)):
            self.check_layout(tp, pp, dp, ["--pp-schedule", "1f1b"])

    def test_layouts_gpipe(self):
        for tp, pp, dp in ((1, 2, 1), (2, 2, 1), (1, 2, 2), (2, 2, 2)):
            self.check_layout(tp, pp, dp, ["--pp-schedule", "gpipe"])

    def test_with_zero(self):
        self.check_layout(2, 2, 2, ["--zero", "1"])
        self.check_layout(1, 2, 2, ["--zero", "3"])
        self.check_layout(2, 1, 2, ["--zero", "2"])

    def test_parameters_shrink_by_tp_times_pp(self):
        _, out = self.check_layout(2, 2, 1)
        held = {int(r): int(n) for r, n in re.findall(r"rank (\d+): .* (\d+) parameters here", out)}
        self.assertEqual(sorted(held), [0, 1, 2, 3])
        logical = VP * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        tp, layers = 2, L // 2
        # split: qkv w,b, attproj w, fc w,b, fcproj w; replicated: ln1 w,b, ln2 w,b, attproj b, fcproj b
        replicated_layer = 6 * C
        split_layer = (12 * C * C + 7 * C) // tp + replicated_layer
        first = VP // tp * C + T * C + layers * split_layer
        last = layers * split_layer + 2 * C
        for r, n in held.items():
            self.assertEqual(n, first if r < 2 else last, f"rank {r}")
        # nothing is held twice except what every tensor-parallel rank keeps whole: the sum over ranks is
        # the model plus (tp - 1) copies of those tensors (position embeddings, per-layer LayerNorms and
        # row-parallel biases, final LayerNorm)
        replicated = T * C + L * replicated_layer + 2 * C
        self.assertEqual(sum(held.values()), logical + (tp - 1) * replicated)
        self.assertLess(replicated / logical, 0.06)  # the stated overhead for this model: under 6%

    def test_activations_alive(self):
        m1, _ = self.check_layout(1, 2, 1, ["--pp-schedule", "1f1b"])
        mg, _ = self.check_layout(1, 2, 1, ["--pp-schedule", "gpipe"])
        accumulation = m1[0]["accumulation"]
        self.assertEqual(accumulation, 4)
        self.assertLessEqual(max(x["max_live_microbatches"] for x in m1), 2)  # pp stages on the first stage
        self.assertEqual(max(x["max_live_microbatches"] for x in mg), accumulation)
        for x in m1:
            self.assertAlmostEqual(x["bubble_theory"], 1 / 4)
            self.assertTrue(0 <= x["bubble"] <= 1)

    def test_auto_split_balances_flops(self):
        # a narrow model whose output layer (6 C Vp per token) outweighs a layer (72 C^2 + 12 C T): the even
        # split 2+2 would leave the last stage with 80k against 43k FLOP-units; auto moves a layer forward
        narrow = ["--channels", "16", "--seq-len", "16"]
        layer, head = 72 * 16 * 16 + 12 * 16 * 16, 6 * 16 * VP
        best = min(range(1, L), key=lambda k: (max((L - k) * layer, k * layer + head), -k))  # last stage: k layers
        self.assertEqual(best, 1)  # the split the cost model predicts: 3 + 1
        om, op, _ = train(self.data, self.path("auto_oracle"), micro=8, extra=narrow)
        m, p, out = train(self.data, self.path("auto"), ranks=2, extra=narrow + ["--pp", "2", "--pp-split", "auto"])
        self.assertIn(f"layers [{L - best}, {L})", out)
        self.assertEqual(len(m), len(om))
        for a, b in zip(m, om):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"step {a['step']}")
        self.assertLess(rel(p, op), 1e-5)

    def test_impossible_layouts(self):
        cases = [(4, ["--tp", "3"], "tp 3 x cp 1 x pp 1 = 3 does not divide the 4 processes launched (mpirun -np) "
                                      "(flags: --tp, --cp, --pp)"), (3, ["--tp", "3"], "--heads"), (8, ["--pp", "8"], "layers"),
                 (2, ["--pp", "2", "--pp-split", "1,2"], ("the pipeline stages' layer split '1,2' adds up to 3 layers, but the model has 4", "(flags: --pp-split)")),
                 (4, ["--tp", "2", "--dp", "3"],
                  "dp 3 = 6 ranks, but 4 processes were launched (mpirun -np) (flags: --tp, --cp, --pp, --dp)")]
        for ranks, extra, needles in cases:
            p = train(self.data, self.path("bad"), ranks=ranks, extra=extra, check=False)
            self.assertNotEqual(p.returncode, 0, extra)
            for needle in (needles,) if isinstance(needles, str) else needles:
                self.assertIn(needle, p.stderr, extra)
            self.assertNotIn("step ", p.stdout, f"{extra}: work started")

    def test_reshard_tp2_pp2_checkpoint(self):
        ck = self.path("ck_tp2pp2")
        full, _, _ = train(self.data, self.path("resh_full"), ranks=4,
                           extra=["--tp", "2", "--pp", "2", "--ckpt-dir", ck, "--ckpt-every", "5", "--keep-last", "0"])
        at5 = os.path.join(ck, "step_00000005")
        # resuming with nothing left to do exports the checkpoint's parameters as the layout reads them
        _, p5, _ = train(self.data, self.path("resh_ref5"), ranks=4, steps=5,
                         extra=["--tp", "2", "--pp", "2", "--resume", at5, "--ckpt-dir", self.path("ck_ref")])
        for ranks, extra in ((4, ["--zero", "1"]), (1, [])):
            _, q5, _ = train(self.data, self.path(f"resh_read{ranks}"), ranks=ranks, steps=5,
                             extra=extra + ["--resume", at5, "--ckpt-dir", self.path(f"ck_r{ranks}a")])
            self.assertTrue(np.array_equal(q5, p5), f"{ranks} ranks: parameters read back differ")
            m, _, _ = train(self.data, self.path(f"resh_cont{ranks}"), ranks=ranks,
                            extra=extra + ["--resume", at5, "--ckpt-dir", self.path(f"ck_r{ranks}b")])
            for a, b in zip(m, full[5:]):
                self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"{ranks} ranks step {a['step']}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
