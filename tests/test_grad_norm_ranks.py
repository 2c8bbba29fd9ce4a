"""test_grad_norm_ranks.py: --log-grad-norm-per-rank (issue 46, the feature interface's demonstration).

Each rank's local gradient norm before the reduction goes into every metrics line as
"grad_norm_per_rank", without --noise-scale.

- Against the --noise-scale path: two ranks, two micro-steps each. The same job with --noise-scale
  (whose per-rank norms, "grad_norm_ranks", come from the same micro-step measurement through the
  step's all-gather) gives the same values, bit for bit, and the same losses: the flag measures, it
  does not change training. The two ranks' norms differ (their data differ) and are finite, positive.
- Against one process: one rank, one micro-step holding the whole batch. Its local gradient is the
  step's gradient, so its norm is the step's grad_norm up to summation order (the engine sums the
  measured norm bucket by bucket, the global norm tensor by tensor, both in double over the same
  floats: measured 2e-16 relative here; 1e-9 is far above that and far below any real difference).
- Without the flag no line carries the key.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import launch, read_metrics, tiny_train_args  # noqa: E402

STEPS = 3


class GradNormPerRank(bstest.CorpusTest):
    CORPUS_BYTES = 40_000

    def run_job(self, name, ranks, extra, **overrides):
        metrics = self.path(name + ".jsonl")
        args = tiny_train_args(self.data, steps=STEPS, **overrides) + ["--metrics", metrics] + extra
        launch(args, ranks)
        return read_metrics(metrics)

    def test_two_ranks_equal_noise_scale_path(self):
        flag = self.run_job("flag", 2, ["--log-grad-norm-per-rank"], **{"micro-batch": 2, "global-batch": 8})
        noise = self.run_job("noise", 2, ["--noise-scale"], **{"micro-batch": 2, "global-batch": 8})
        self.assertEqual(len(flag), STEPS)
        for a, b in zip(flag, noise, strict=True):
            ranks = a["grad_norm_per_rank"]
            self.assertEqual(len(ranks), 2)
            self.assertTrue(all(np.isfinite(ranks)) and min(ranks) > 0, ranks)
            self.assertNotEqual(ranks[0], ranks[1])
            self.assertEqual(ranks, b["grad_norm_ranks"])
            self.assertEqual(a["loss"], b["loss"])
            self.assertNotIn("noise_scale", a)

    def test_one_rank_is_the_step_norm(self):
        for m in self.run_job("one", 1, ["--log-grad-norm-per-rank"], **{"micro-batch": 8, "global-batch": 8}):
            self.assertEqual(len(m["grad_norm_per_rank"]), 1)
            self.assertAlmostEqual(m["grad_norm_per_rank"][0] / m["grad_norm"], 1.0, delta=1e-9)

    def test_off_by_default(self):
        for m in self.run_job("off", 1, [], **{"micro-batch": 4, "global-batch": 8}):
            self.assertNotIn("grad_norm_per_rank", m)


if __name__ == "__main__":
    unittest.main()
