#!/usr/bin/python3
"""test_guards.py: guards and stragglers.

- A NaN injected into one rank's gradient skips exactly that step on every
  rank (parameters and optimizer state unchanged: the checkpoints before and
  after it are byte-identical), and the message names the rank and layer.
  So in every layout, at a chosen rank and layer (a middle layer, the last
  layer, a stage's non-first layer) of a 3-layer model: ZeRO-2, ZeRO-3,
  tp 2, pp 2 and tp 2 x pp 2 (4 ranks); the run goes on, exits 0, every
  other step's loss is finite. A target that does not exist (a rank, a layer,
  a layer on another pipeline stage) is one line naming --debug-inject-fault.
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
from bstest import BATCHSCALE, MPIRUN, CorpusTest, one_line_error, read_manifest, read_metrics  # noqa: E402


def train(data, prefix, ranks=2, extra=(), steps=8, check=True, shard="train_000000.bin", layers=2):
    metrics = prefix + ".jsonl"
    args = [BATCHSCALE, "train", "--data", os.path.join(data, shard), "--layers", str(layers), "--heads", "2",
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
                     extra=["--debug-inject-fault", "nan:1:3", "--ckpt-dir", ck, "--ckpt-every", "1", "--keep-last", "0"])
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

    def test_nan_named_in_every_layout(self):
        # (processes, layout, rank, layer); pp 2 splits the 3 layers 2,1; rank = pp_index x tp + tp_index
        cases = [(2, ["--zero", "2"], 1, 1), (2, ["--zero", "3"], 0, 2), (2, ["--tp", "2"], 1, 2),
                 (2, ["--pp", "2"], 0, 1), (2, ["--pp", "2"], 1, 2), (4, ["--tp", "2", "--pp", "2"], 2, 2)]
        for ranks, layout, rank, layer in cases:
            label = "_".join(layout).replace("-", "") + f"_r{rank}_l{layer}"
            ck = self.path("ck_" + label)
            m, p = train(self.data, self.path(label), ranks=ranks, steps=5, layers=3, check=False,
                         extra=layout + ["--debug-inject-fault", f"nan:{rank}:3:{layer}", "--ckpt-dir", ck,
                                         "--ckpt-every", "1", "--keep-last", "0"])
            self.assertEqual(p.returncode, 0, f"{label}: {p.stderr}")
            reason = f"non-finite value on rank {rank} at layer {layer}"
            self.assertEqual([(x["step"], x.get("skipped")) for x in m if "skipped" in x], [(3, reason)], label)
            self.assertIn(f"step 3 skipped (no update): {reason}", p.stdout, label)
            self.assertEqual([x["step"] for x in m], [1, 2, 3, 4, 5], label)
            self.assertTrue(all(np.isfinite(x["loss"]) for x in m if x["step"] != 3), label)
            sums = [[f["xxh64"] for f in read_manifest(ck, step)["files"]] for step in (2, 3, 4)]
            self.assertEqual(len(sums[0]), ranks, label)
            self.assertEqual(sums[0], sums[1], f"{label}: the skipped step changed parameters or optimizer state")
            self.assertNotEqual(sums[1], sums[2], f"{label}: the next step should update again")

    def test_nan_target_must_exist(self):
        syntax = "error: the injected fault must be stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER] or slow"
        flag = " (flags: --debug-inject-fault)"
        cases = [(1, [], "nan:0:3:3", "error: the injected fault nan:0:3:3: layer 3 does not exist (3 layers)" + flag),
                 (2, [], "nan:2:3", "error: the injected fault nan:2:3: rank 2 does not exist (2 processes)" + flag),
                 (2, ["--pp", "2"], "nan:0:3:2", "error: the injected fault nan:0:3:2: rank 0 holds layers [0, 2), not "
                                                 "layer 2" + flag),
                 (1, [], "nan:0:3:-1", syntax), (1, [], "exit:0:3:1", syntax)]
        for ranks, layout, spec, message in cases:
            _, p = train(self.data, self.path("bad_target"), ranks=ranks, steps=2, layers=3, check=False,
                         extra=layout + ["--debug-inject-fault", spec])
            self.assertEqual(p.returncode, 2, spec)  # a usage error, found at set-up
            line = one_line_error(p, ranks)
            self.assertIsNotNone(line, f"{spec}: not one line:\n{p.stderr}")
            self.assertIn(message, line, spec)

    def test_consecutive_skips_stop_the_run(self):
        m, p = train(self.data, self.path("blowup"), steps=30, check=False,
                     extra=["--debug-inject-fault", "nans:0:5", "--max-skips", "3"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("3 steps in a row skipped", p.stderr)
        self.assertIn("allow more skips (flags: --lr, --max-skips)", p.stderr)
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
        slow, p = train(self.data, self.path("slow"), extra=["--debug-inject-fault", "slow:1:3"])
        self.assertIn("rank 1 is a straggler", p.stdout)
        self.assertTrue(any(x.get("straggler") == 1 for x in slow))
        bal, _ = train(self.data, self.path("balanced"), extra=["--debug-inject-fault", "slow:1:3", "--balance"])
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
