#!/usr/bin/python3
"""test_device_cp.py: context parallelism on device buffers (`train --device sim|cuda --cp 2 --cp-algo allgather`
under mpirun) against one process. The device is the first argument (sim by default; cuda: the GPU check's, skipped
where none answers).

- Equivalence: cp 2 over zigzag and contiguous chunks (2 ranks) and tp 2 x cp 2 (4 ranks), global batch 8 in
  micro-batches of 2, give the losses of one CPU process computing whole sequences within 1e-5 relative over 10 steps,
  its gradient norm and per-layer norms too, and its final parameters within 1e-5 (max |a-b| / max |b|). The shape
  (4 layers, T 256: chunks of 64 rows, the CPU's smallest) is one where one device process is itself ~2e-6 from one
  CPU process (printed as the floor): at 2 layers AdamW's most sensitive element (a gradient near 0) puts one device
  process alone at ~1e-5.
- A checkpoint the cp 2 device run writes at step 5 is read by one CPU process and saved at once: the same parameters
  bit for bit.
- Bad input, one line: the ring algorithm on a device (the device's CP runs the all-gather only).
"""
import os
import sys
import unittest  # noqa: F401  (main_on runs unittest's main)

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, layout_run, one_line_error, rel  # noqa: E402
from harness.device_runs import checkpoint_params, device_from_argv, main_on  # noqa: E402

DEVICE = device_from_argv()
SHAPE = ["--layers", "4", "--heads", "4", "--channels", "32", "--seq-len", "256"]
TOLERANCE = 1e-5  # the bound; measured on an AMD EPYC: losses ~1e-8, parameters ~1-2e-6 (floor ~2e-6)
ALLGATHER = ["--cp-algo", "allgather"]


class DeviceContextParallelTest(CorpusTest):
    cpu = None

    def oracle(self):
        """One CPU process on whole sequences: (metrics lines, final parameters)."""
        if DeviceContextParallelTest.cpu is None:
            DeviceContextParallelTest.cpu = layout_run(self.data, self.path("cpu1"), SHAPE)[:2]
        return DeviceContextParallelTest.cpu

    def assert_equivalent(self, got, what):
        metrics, params = self.oracle()
        self.assertEqual(len(got[0]), len(metrics), what)
        worst = {}
        for key in ("loss", "grad_norm", "grad_norm_layers", "weight_norm_layers"):
            a, b = (np.array([m[key] for m in lines], np.float64) for lines in (got[0], metrics))
            worst[key] = float(np.max(np.abs(a - b) / np.abs(b)))
        worst["parameters"] = rel(got[1], params)
        print(f"{what}: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + " from one CPU process")
        for key, value in worst.items():
            self.assertLessEqual(value, TOLERANCE, f"{what}: {key}")

    def test_layouts_equal_one_process(self):
        floor = rel(layout_run(self.data, self.path("dev1"), SHAPE, 1, ["--device", DEVICE])[1], self.oracle()[1])
        print(f"floor: one device process, parameters {floor:.1e} from one CPU process")
        for split in ("zigzag", "contiguous"):
            run = layout_run(self.data, self.path(f"cp2_{split}"), SHAPE, 2,
                             ["--device", DEVICE, "--cp", "2", *ALLGATHER, "--cp-split", split])
            self.assert_equivalent(run, f"cp 2, {split}")
        run = layout_run(self.data, self.path("tp2cp2"), SHAPE, 4, ["--device", DEVICE, "--cp", "2", "--tp", "2", *ALLGATHER])
        self.assert_equivalent(run, "tp 2 x cp 2")
        self.assertIn("allgather context attention", run[2])

    def test_checkpoint_resumes_on_one_cpu_process(self):
        out = self.path("cp2_ck")
        layout_run(self.data, self.path("cp2_ck_run"), SHAPE, 2,
                   ["--device", DEVICE, "--cp", "2", *ALLGATHER, "--out", out, "--ckpt-every", "5"], steps=5)
        launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                "--global-batch", "8", "--steps", "5", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
                "--sample-tokens", "0", "--threads", "1", "--quiet", "--out", self.path("cpu_copy"),
                "--resume", os.path.join(out, "ckpt", "step_00000005")], 1)
        params = checkpoint_params(self, {"device": out, "cpu": self.path("cpu_copy")}, 5)
        self.assertTrue(np.array_equal(params["cpu"], params["device"]), "one CPU process read other parameters")

    def test_ring_refused(self):
        p = launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                    "--steps", "1", "--quiet", "--device", DEVICE, "--cp", "2"], 2, check=False)
        self.assertNotEqual(p.returncode, 0)
        line = one_line_error(p, 2)
        self.assertIsNotNone(line, p.stderr)
        self.assertIn("all-gather algorithm only", line)


if __name__ == "__main__":
    main_on(DEVICE)
