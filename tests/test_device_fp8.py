#!/usr/bin/python3
"""test_device_fp8.py: `train --device sim|cuda --precision fp8` (both recipes) against the CPU's FP8 run.

The model of tests/layout_floor.py (L4 H4 C64, T 64, global batch 8, ten AdamW steps on its pair shards),
delayed with --fp8-high-precision fp32 and bf16 (the default: the weights' bf16 copy, inputs and output
gradients rounded before their FP8 quantization, as on the CPU), block with fp32. sim's FP8 linear layers (DK_FP8_LINEAR_*) run the CPU's own FP8 arithmetic with the
scales of the host's delayed-scaling state, so the device differs from the CPU only by the fp32 summation order
of its other kernels (LayerNorm, attention, the classifier, the gradient sums), which FP8 rounding amplifies as
bf16's does:
- losses and parameters within K = 4 x the noise floor measured beside it (layout_floor.Floor: the CPU process
  against itself with its sums reordered; layout_floor.py says why K);
- the amax history (every linear layer's X, W and dY, read from the checkpoint's fp8 scaling files, which keep
  all ten steps): step 1's within 8 ulps of the CPU's (the same parameters and batches; an amax is a maximum,
  which reordered sums reach only through the values: 0 in the Release build, 9.9e-8 in the Debug one), and every
  step's largest relative gap over the tensors within K x the largest such gap between the CPU process and its
  reorderings (layout_floor.floor_runs) over the run. Not per step: the device also reorders the forward's sums
  (LayerNorm, attention), which the CPU's reorderings leave alone, so in bf16 its amaxes part from the CPU's
  at step 3 (1.2e-2: a bf16 step of a rounded input or gradient) where the reorderings' still agree; from then
  on both spread alike (the chaotic amplification layout_floor.py describes for the losses). A scale taken
  from the wrong step, an amax missed or counted from evaluation moves step 1 or the spread by far more.
  Every tensor's history holds ten non-zero steps (the scales were updated every step);
- the FP8 statistics reported (the run used FP8);
- the block recipe (no state: each block's power-of-two scale from its own amax): losses and parameters within
  K x its own floor, measured the same way;
- tp 2 and pp 2 in delayed FP8 (2 ranks, micro-batches of 2) against the CPU's same layout: losses and parameters
  within K x the delayed floor above, the amax history as above (the tensor group's amaxes max-reduced first);
- the block recipe with --tp, --cp or --pp refused in one line: its tp 2 read 6.4 x the block floor from the CPU's
  tp 2, and on another corpus the CPU's own tp 2 read 6.4e-4 from its one process where the device's one process
  read 4.7e-4 and micro-batches of 4 5.8e-5: block's spread is wider than its floor samples, so this bound cannot
  hold a layout yet;
- `--device cuda --precision fp8` passes the configuration's checks (no refusal naming FP8 where no GPU answers).
`test_device_fp8.py cuda` runs the same checks on a GPU, whose FP8 linear layers are cuBLASLt's FP8 GEMMs
(device/fp8_gemm.h; they also differ from the CPU's only by fp32 summation order, test_device_fp8_gemm.c): the
losses, parameters and amax history against the CPU's within the same floors, step for step over the ten steps;
skipped with the reason where no GPU answers, a failure under BS_REQUIRE_GPU=1 (tests/harness/device_runs.py).
"""
import glob
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, one_line_error  # noqa: E402
from harness.device_runs import assert_refused, device_from_argv, main_on  # noqa: E402
from layout_floor import STEPS, K, Floor, loss_gap, param_gap, train  # noqa: E402

FP8 = ["--precision", "fp8", "--fp8-recipe", "delayed", "--fp8-high-precision", "fp32"]
FP8_BF16 = ["--precision", "fp8", "--fp8-recipe", "delayed", "--fp8-high-precision", "bf16"]
BLOCK = ["--precision", "fp8", "--fp8-recipe", "block", "--fp8-high-precision", "fp32"]
FLOOR_SPLITS = (4, 2)  # as test_fp8_train.py's
HEAD_BYTES = 16  # an fp8 scaling file: 8 bytes of magic, then (history, floats) as uint32
DEVICE = device_from_argv()


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
    floors = {}  # tag -> (Floor, the one process's amax history, the amax floor per step): measured once per class

    def delayed_floor(self, tag, flags):
        """The floor of the one process in `flags` (its runs keep their checkpoints: the amax histories of the CPU
        process and its reorderings), and each step's largest amax gap between them."""
        if tag not in DeviceFp8Test.floors:
            floor = Floor(self, tag, flags, FLOOR_SPLITS, run_flags=lambda prefix: ["--ckpt-dir", prefix + "-ckpt"])
            cpu = amax_history(floor.one_prefix + "-ckpt")
            amax_floor = np.zeros(STEPS)
            for prefix in floor.prefixes.values():
                amax_floor = np.maximum(amax_floor, step_gaps(amax_history(prefix + "-ckpt"), cpu))
            DeviceFp8Test.floors[tag] = (floor, cpu, amax_floor)
        return DeviceFp8Test.floors[tag]

    def run_saving(self, tag, flags, extra, micro=8, ranks=1):
        ckpt = self.path(f"ckpt-{tag}")
        m, p, _ = train(self.data, self.path(tag), ranks=ranks, micro=micro, extra=extra + flags + ["--ckpt-dir", ckpt])
        return m, p, amax_history(ckpt)

    def test_delayed_within_the_floor(self):
        self.check_delayed("fp8", FP8)

    def test_delayed_bf16_within_the_floor(self):
        self.check_delayed("fp8-bf16", FP8_BF16)

    def check_delayed(self, tag, flags):
        floor, cpu, amax_floor = self.delayed_floor(tag, flags)
        m, p, dev = self.run_saving(f"{tag}-{DEVICE}", flags, floor.pairs + ["--device", DEVICE])
        self.assertIn("fp8_underflow", m[-1], "no FP8 statistics: did the device run use FP8?")
        floor.check(f"--device {DEVICE}", m, p)
        self.check_amaxes(tag, dev, cpu, amax_floor)

    def check_amaxes(self, tag, dev, cpu, amax_floor):
        """The device's amax history `dev` against the CPU's `cpu`: step 1 within 8 ulps, every step within K x
        the floor's largest gap."""
        self.assertTrue(np.all(cpu > 0) and np.all(dev > 0), "a tensor's amax history lacks a step")
        gaps = step_gaps(dev, cpu)
        for s in range(STEPS):
            print(f"  {tag} step {s + 1}: amax gap {gaps[s]:.2e}, floor {amax_floor[s]:.2e}", flush=True)
        # Step 1's amaxes: the same weights and batch, so only the forward's fp32 sums differ in order (the
        # device's kernels against the CPU's): an amax moves by a few ulps at most. Measured: 0 in the Release
        # build, 9.9e-8 in the Debug (ASan) build, where the compiler contracts the two paths' sums differently.
        # 1e-6 is 8 ulps; a wrong scale, tensor or site moves an amax by far more.
        self.assertLessEqual(gaps[0], 1e-6, "step 1's amaxes differ from the CPU's beyond fp32 reordering")
        self.assertLessEqual(gaps.max(), K * amax_floor.max(), "the device's amaxes left the floor")

    def test_layouts_within_the_floor(self):
        """Tensor (tp 2) and pipeline (pp 2) parallelism in delayed FP8 on 2 ranks (micro-batches of 2) against the
        CPU's same layout: losses and parameters within K x the one process's floor, the amax history as above
        (under TP each shard's amax is max-reduced over the tensor group before the scales, as on the CPU: a shard's
        own would move step 1's weight amaxes by far more than 8 ulps)."""
        floor, _, amax_floor = self.delayed_floor("fp8", FP8)
        tag, flags = "fp8", FP8
        for name, layout in (("tp2", ["--tp", "2"]), ("pp2", ["--pp", "2"])):
            extra = floor.pairs + layout
            m, p, dev = self.run_saving(f"{tag}-{name}-{DEVICE}", flags, extra + ["--device", DEVICE], micro=2, ranks=2)
            cpu_m, cpu_p, cpu = self.run_saving(f"{tag}-{name}-cpu", flags, extra, micro=2, ranks=2)
            self.assertIn("fp8_underflow", m[-1], f"{name}: no FP8 statistics: did the device run use FP8?")
            self.check_amaxes(f"{tag} {name}", dev, cpu, amax_floor)
            self.assertEqual(len(m), len(cpu_m))
            lg, pg = loss_gap(m, cpu_m), param_gap(p, cpu_p)
            print(f"  {tag} {name} --device {DEVICE} against the CPU's {name}: loss gap {lg:.2e} = "
                  f"{lg / floor.loss:.2f} x floor, parameters {pg:.2e} = {pg / floor.param:.2f} x floor", flush=True)
            self.assertLessEqual(lg, K * floor.loss, f"{tag} {name}: loss gap {lg:.3g} > {K} x floor {floor.loss:.3g}")
            self.assertLessEqual(pg, K * floor.param, f"{tag} {name}: parameters {pg:.3g} > {K} x floor {floor.param:.3g}")

    def test_block_within_the_floor(self):
        floor = Floor(self, "block", BLOCK, FLOOR_SPLITS)
        m, p, _ = train(self.data, self.path(f"block-{DEVICE}"), extra=floor.pairs + BLOCK + ["--device", DEVICE])
        self.assertIn("fp8_underflow", m[-1], "no FP8 statistics: did the device run use FP8?")
        floor.check(f"--device {DEVICE}", m, p)

    def test_block_with_layouts_refused(self):
        # the device's tp 2 in block FP8 read 6.4 x the block floor from the CPU's tp 2 (loss): see the docstring
        for layout in (["--tp", "2"], ["--cp", "2", "--seq-len", "256"], ["--pp", "2"]):
            assert_refused(self, ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "2",
                                  "--heads", "2", "--channels", "32", "--micro-batch", "2", "--steps", "1", "--quiet",
                                  "--device", DEVICE] + BLOCK + layout, 2,
                           "--fp8-recipe block together with --tp, --cp or --pp")

    @unittest.skipIf(DEVICE == "cuda", "the GPU runs FP8: the checks above")
    def test_cuda_not_refused(self):
        base = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--steps", "1", "--quiet"]
        p = launch(base + ["--device", "cuda"] + FP8, 1, check=False)
        if p.returncode == 0:
            return  # a GPU answered and ran it
        line = one_line_error(p)
        self.assertIsNotNone(line, f"not one line of stderr: {p.stderr!r}")
        self.assertNotIn("fp8", line.lower(), "--device cuda --precision fp8 refused")


if __name__ == "__main__":
    main_on(DEVICE)
