#!/usr/bin/python3
"""test_guards.py: guards and stragglers.

- A NaN injected into one rank's gradient skips exactly that step on every
  rank (parameters and optimizer state unchanged: the checkpoints before and
  after it are byte-identical), and the message names the rank and layer.
- A run that keeps producing non-finite values stops after --max-skips
  skips in a row with a clear message instead of looping.
- A loss spike beyond --skip-spikes standard deviations is skipped.
- A slow rank is named; with --balance its micro-batches move to the faster
  rank while the losses stay those of the unbalanced run (1e-5).
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import BATCHSCALE, MPIRUN, CorpusTest, read_metrics  # noqa: E402


def train(data, prefix, ranks=2, extra=(), steps=8, check=True, shard="train_000000.bin"):
    metrics = prefix + ".jsonl"
    args = [BATCHSCALE, "train", "--data", os.path.join(data, shard), "--layers", "2", "--heads", "2",
            "--channels", "32", "--seq-len", "32", "--micro-batch", "2", "--global-batch", "16", "--steps",
            str(steps), "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--sample-tokens", "0", "--threads",
            "1", "--log-every", "1", "--metrics", metrics] + list(extra)
    cmd = MPIRUN + ["-np", str(ranks)] + args if ranks > 1 else args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return (read_metrics(metrics) if os.path.exists(metrics) else []), p


class GuardTest(CorpusTest):
    def test_nan_skips_exactly_that_step(self):
        ck = self.path("ck_nan")
        m, p = train(self.data, self.path("nan"),
                     extra=["--inject-fault", "nan:1:3", "--ckpt-dir", ck, "--ckpt-every", "1", "--keep-last", "0"])
        skipped = [x["step"] for x in m if "skipped" in x]
        self.assertEqual(skipped, [3])
        self.assertIn("rank 1", m[2]["skipped"])
        self.assertIn("layer 0", m[2]["skipped"])
        self.assertIn("step 3 skipped", p.stdout)
        manifests = []
        for step in (2, 3, 4):
            with open(os.path.join(ck, f"step_{step:08d}", "manifest.json")) as f:
                manifests.append(json.load(f))
        sums = [[f["xxh64"] for f in man["files"]] for man in manifests]
        self.assertEqual(sums[0], sums[1], "the skipped step changed parameters or optimizer state")
        self.assertNotEqual(sums[1], sums[2], "the next step should update again")

    def test_consecutive_skips_stop_the_run(self):
        m, p = train(self.data, self.path("blowup"), steps=30, check=False,
                     extra=["--inject-fault", "nans:0:5", "--max-skips", "3"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("3 steps in a row skipped", p.stderr)
        self.assertEqual([x["step"] for x in m if "skipped" in x], [5, 6, 7])
        self.assertEqual(len(m), 7)

    def test_loss_spike_is_skipped(self):
        # sequential order over a shard whose second half is random bytes: the loss jumps there
        text = os.path.join(self.data, "train_000000.bin")
        raw = np.fromfile(text, dtype=np.uint8)
        header, tokens = raw[:1024].view(np.int32).copy(), raw[1024:].view(np.uint16)
        n = 40 * 16 * 32
        mixed = np.concatenate([tokens[:n], np.random.default_rng(0).integers(0, 256, n).astype(np.uint16)])
        header[2] = len(mixed)
        spiky = os.path.join(self.dir, "spiky.bin")
        with open(spiky, "wb") as f:
            f.write(header.tobytes())
            f.write(mixed.tobytes())
        m, _ = train(self.dir, self.path("spike"), ranks=1, steps=44, shard="spiky.bin",
                     extra=["--data-order", "sequential", "--skip-spikes", "4", "--spike-window", "20"])
        skipped = [x for x in m if "skipped" in x]
        self.assertTrue(skipped, "no step was skipped")
        self.assertIn("loss spike", skipped[0]["skipped"])
        self.assertGreater(skipped[0]["step"], 40)  # not before the random bytes start

    def test_straggler_named_and_balanced(self):
        plain, _ = train(self.data, self.path("plain"))
        slow, p = train(self.data, self.path("slow"), extra=["--inject-fault", "slow:1:3"])
        self.assertIn("rank 1 is a straggler", p.stdout)
        self.assertTrue(any(x.get("straggler") == 1 for x in slow))
        bal, _ = train(self.data, self.path("balanced"), extra=["--inject-fault", "slow:1:3", "--balance"])
        split = bal[-1]["micro_batches_per_replica"]
        self.assertEqual(sum(split), 8)
        self.assertGreater(split[0], split[1], "the faster rank should take more micro-batches")
        for a, b in zip(bal, plain):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"step {a['step']}")

    def test_balance_refused_with_zero2(self):
        _, p = train(self.data, self.path("bad"), check=False, extra=["--balance", "--zero", "2"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--balance", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
