#!/usr/bin/python3
"""test_device_tp.py: tensor parallelism on device buffers (`train --device sim|cuda --tp 2` under mpirun) against one
process. The device is the first argument (sim by default; cuda: the GPU check's, skipped where none answers).

- Equivalence: tp 2 (2 ranks) and tp 2 x dp 2 at ZeRO 1 (4 ranks), global batch 8 in micro-batches of 2, give the
  losses of one CPU process computing the whole model and batch within 1e-5 relative over 10 steps, its gradient
  norm and per-layer gradient and weight norms (a replicated tensor counted once) too, and its final parameters within
  1e-5 (max |a-b| / max |b|). Not bitwise: the device's kernels sum in other orders than the CPU's (one device
  process already differs from one CPU process by ~2e-6 in the parameters here, test_device_dp.py).
- A checkpoint the tp 2 device run writes at step 5 is read by one CPU process and saved at once: the same
  parameters bit for bit; that copy read by the CPU's tp 2 layout and saved: the device's state, file checksums
  included (each tensor rank's shard file); read back by tp 2 on the device and saved: the device's state again.
  (bf16 and FP8 runs: tests/test_device_bf16.py and test_device_fp8.py hold them within their floors.)
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, layout_run, read_manifest, rel  # noqa: E402
from harness.device_runs import checkpoint_params, device_from_argv, main_on  # noqa: E402

DEVICE = device_from_argv()  # sim (CI), or cuda: the GPU check's, ranks sharing the GPU through the host path
SHAPE = ["--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32"]
TOLERANCE = 1e-5  # the bound; measured on an Intel Xeon (2 cores): losses ~1e-8, norms ~1e-7, parameters ~2e-6


class DeviceTensorParallelTest(CorpusTest):
    def assert_equivalent(self, got, cpu, what):
        """Losses, the gradient's norm, the per-layer gradient and weight norms and the final parameters within
        TOLERANCE of one CPU process."""
        self.assertEqual(len(got[0]), len(cpu[0]), what)
        worst = {}
        for key in ("loss", "grad_norm", "grad_norm_layers", "weight_norm_layers"):
            a, b = (np.array([m[key] for m in lines], np.float64) for lines in (got[0], cpu[0]))
            worst[key] = float(np.max(np.abs(a - b) / np.abs(b)))
        worst["parameters"] = rel(got[1], cpu[1])
        print(f"{what}: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + " from one CPU process")
        for key, value in worst.items():
            self.assertLessEqual(value, TOLERANCE, f"{what}: {key}")

    def test_layouts_equal_one_process(self):
        cpu = layout_run(self.data, self.path("cpu1"), SHAPE)
        tp2 = layout_run(self.data, self.path("tp2"), SHAPE, 2, ["--device", DEVICE, "--tp", "2"])
        self.assert_equivalent(tp2, cpu, "tp 2")
        self.assertIn("1f1b pipeline schedule, device buffers over host", tp2[2])  # the tensor group's path
        tp2dp2 = layout_run(self.data, self.path("tp2dp2"), SHAPE, 4, ["--device", DEVICE, "--tp", "2", "--zero", "1"])
        self.assert_equivalent(tp2dp2, cpu, "tp 2 x dp 2, ZeRO 1")
        self.assertIn("device buffers over host", tp2dp2[2])

    def resave(self, name, ranks, source, *flags):
        """`name` on `ranks` processes reads checkpoint 5 of the run saved under `source` and saves it at once (a resume
        into another layout saves; --steps 5 trains nothing)."""
        launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                "--global-batch", "8", "--steps", "5", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
                "--sample-tokens", "0", "--threads", "1", "--quiet", "--out", self.path(name),
                "--resume", os.path.join(source, "ckpt", "step_00000005"), *flags], ranks)

    def state(self, name):
        """Checkpoint 5's manifest under run `name` (or a path) without its layout: the state and its checksums."""
        d = name if os.path.isabs(name) else self.path(name)
        return {k: v for k, v in read_manifest(os.path.join(d, "ckpt"), 5).items() if k != "layout"}

    def test_checkpoint_resumes_on_cpu_layouts(self):
        out = self.path("tp2_ck")
        layout_run(self.data, self.path("tp2_ck_run"), SHAPE, 2,
                   ["--device", DEVICE, "--tp", "2", "--out", out, "--ckpt-every", "5"])
        self.resave("cpu_copy", 1, out)
        params = checkpoint_params(self, {"device": out, "cpu": self.path("cpu_copy")}, 5)
        self.assertTrue(np.array_equal(params["cpu"], params["device"]), "one CPU process read other parameters")
        self.resave("cpu_tp2", 2, self.path("cpu_copy"), "--tp", "2")
        self.assertEqual(self.state("cpu_tp2"), self.state(out), "the CPU's tp 2 layout saved another state")
        self.resave("dev_back", 2, self.path("cpu_copy"), "--device", DEVICE, "--tp", "2")
        self.assertEqual(self.state("dev_back"), self.state(out), "the state changed on its way through one process")


if __name__ == "__main__":
    main_on(DEVICE)
