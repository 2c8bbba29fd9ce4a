#!/usr/bin/python3
"""test_device_fp8.py: `train --device sim --precision fp8` (both recipes) against the CPU's FP8 run.

The model of tests/layout_floor.py (L4 H4 C64, T 64, global batch 8, ten AdamW steps on its pair shards),
--fp8-high-precision fp32. sim's FP8 linear layers (DK_FP8_LINEAR_*) run the CPU's own FP8 arithmetic with the
scales of the host's delayed-scaling state, so the device differs from the CPU only by the fp32 summation order
of its other kernels (LayerNorm, attention, the classifier, the gradient sums), which FP8 rounding amplifies as
bf16's does:
- losses and parameters within K = 4 x the noise floor measured beside it (layout_floor.Floor: the CPU process
  against itself with its sums reordered; layout_floor.py says why K);
- the amax history, step for step: each step's largest relative gap of any tensor's amax (every linear layer's
  X, W and dY, read from the checkpoint's fp8 scaling files, which keep all ten steps) within K x the same gap
  between the CPU process and its reorderings at that step. At step 1 that floor is 0 (the same parameters and
  batches; an amax is a maximum, which the order of sums inside a micro-batch reaches only through the values):
  the device's step-1 history must equal the CPU's bit for bit, and a scale taken from the wrong step, an amax
  missed or counted from evaluation moves it by far more. Every tensor's history holds ten non-zero steps (the
  scales were updated every step);
- the FP8 statistics reported (the run used FP8);
- the block recipe (no state: each block's power-of-two scale from its own amax): losses and parameters within
  K x its own floor, measured the same way;
- what the device does not run yet (bf16 outside FP8, CUDA) is refused in one line.
"""
import glob
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, one_line_error  # noqa: E402
from layout_floor import REORDERINGS, STEPS, K, Floor, pair_shards, train  # noqa: E402

FP8 = ["--precision", "fp8", "--fp8-recipe", "delayed", "--fp8-high-precision", "fp32"]
BLOCK = ["--precision", "fp8", "--fp8-recipe", "block", "--fp8-high-precision", "fp32"]
FLOOR_SPLITS = (4, 2)  # as test_fp8_train.py's
HEAD_BYTES = 16  # an fp8 scaling file: 8 bytes of magic, then (history, floats) as uint32


def amax_history(ckpt_dir):
    """(layers, linears, kinds, STEPS): each tensor's amaxes of the run's steps, from its last checkpoint."""
    files = sorted(glob.glob(os.path.join(ckpt_dir, "**", "fp8_layer_*.bin"), recursive=True))
    layers = []
    for f in files:
        raw = np.fromfile(f, np.uint8)
        history, floats = raw[8:HEAD_BYTES].view(np.uint32)
        body = raw[HEAD_BYTES:].view(np.float32)
        assert body.size == floats, f
        layers.append(body.reshape(4, 3, 1 + history)[..., 1 + history - STEPS:])  # the last STEPS slots
    return np.stack(layers)


def step_gaps(h, ref):
    """Each step's largest relative amax gap over every tensor."""
    return (np.abs(h.astype(np.float64) - ref) / np.abs(ref)).reshape(-1, STEPS).max(axis=0)


class DeviceFp8Test(CorpusTest):
    CORPUS_BYTES = 400_000

    def run_saving(self, tag, extra):
        ckpt = self.path(f"ckpt-{tag}")
        m, p, _ = train(self.data, self.path(tag), extra=extra + FP8 + ["--ckpt-dir", ckpt])
        return m, p, amax_history(ckpt)

    def test_delayed_within_the_floor(self):
        floor = Floor(self, "fp8", FP8, FLOOR_SPLITS)
        m, p, dev = self.run_saving("sim", floor.pairs + ["--device", "sim"])
        self.assertIn("fp8_underflow", m[-1], "no FP8 statistics: did the device run use FP8?")
        floor.check("--device sim", m, p)
        _, _, cpu = self.run_saving("cpu", floor.pairs)
        self.assertTrue(np.all(cpu > 0) and np.all(dev > 0), "a tensor's amax history lacks a step")
        amax_floor = np.zeros(STEPS)
        for order in REORDERINGS:
            shards = pair_shards(self.data, self.path(f"amax-data{''.join(map(str, order))}"), order)
            _, _, h = self.run_saving(f"cpu-{''.join(map(str, order))}", shards)
            amax_floor = np.maximum(amax_floor, step_gaps(h, cpu))
        gaps = step_gaps(dev, cpu)
        for s in range(STEPS):
            print(f"  step {s + 1}: amax gap {gaps[s]:.2e}, floor {amax_floor[s]:.2e}", flush=True)
            self.assertLessEqual(gaps[s], K * amax_floor[s], f"step {s + 1}: the device's amaxes left the floor")
        self.assertTrue(np.array_equal(dev[..., 0], cpu[..., 0]), "step 1's amaxes differ from the CPU's")

    def test_block_within_the_floor(self):
        floor = Floor(self, "block", BLOCK, FLOOR_SPLITS)
        m, p, _ = train(self.data, self.path("block-sim"), extra=floor.pairs + BLOCK + ["--device", "sim"])
        self.assertIn("fp8_underflow", m[-1], "no FP8 statistics: did the device run use FP8?")
        floor.check("--device sim", m, p)

    def test_refused_in_one_line(self):
        base = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--steps", "1", "--quiet"]
        for flags, word in ((["--device", "sim", "--precision", "fp8"], "--fp8-high-precision"),
                            (["--device", "cuda"] + FP8, "--device cuda")):
            p = launch(base + flags, 1, check=False)
            line = one_line_error(p)
            self.assertNotEqual(p.returncode, 0, flags)
            self.assertIsNotNone(line, f"{flags}: not one line of stderr: {p.stderr!r}")
            self.assertIn(word, line)


if __name__ == "__main__":
    unittest.main()
