#!/usr/bin/python3
"""test_device_dp.py: data parallelism on device buffers (`train --device sim` under mpirun) against one process.

- Equivalence: 2 ranks at ZeRO 0, 1 and 2 and 4 ranks at ZeRO 0 and 1, global batch 8 in micro-batches of 2, give the
  losses of one CPU process computing the whole batch within 1e-5 relative over 10 steps, and its final parameters
  within 1e-5 (max |a-b| / max |b|). Not bitwise: the device's kernels sum in other orders than the CPU's (one
  device process against one CPU process already differs by ~2e-6 in the parameters here). The metrics' gradient
  norm and per-layer gradient and weight norms within 1e-5 too. On 2 ranks ZeRO 1 and 2 equal ZeRO 0 bit for bit
  (fp32, and bf16 at ZeRO 1): the host path sums two ranks' floats (a + b either way) and AdamW is elementwise.
- The data-parallel line names the path the device buffers take ("device buffers over host").
- A checkpoint the 2-rank device run (ZeRO 1: each rank holds half of the moments) writes at step 5 is read by
  one CPU process, which saves it again at once: the same parameters bit for bit; read back from that copy by 2
  device ranks and saved, the same state as the first, file checksums included (a file per rank's moments, so
  the copies on one process and on two ranks are compared through the round trip).
- The guard: a NaN planted in one rank's gradient skips the step naming that rank, as on the CPU.
- Bad input, one line each: --gpu-comm nccl with --device sim, --gpu-comm host on the CPU, --zero 3 on a device.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, layout_run, one_line_error, read_manifest, read_model, rel  # noqa: E402
from harness.device_runs import assert_equivalent, checkpoint_params  # noqa: E402

SHAPE = ["--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32"]
TOLERANCE = 1e-5  # the bound; measured on an AMD EPYC: losses ~1e-8, parameters ~2e-6


class DeviceDataParallelTest(CorpusTest):
    cpu = None

    def oracle(self):
        """One CPU process on the whole batch: (metrics lines, final parameters)."""
        if DeviceDataParallelTest.cpu is None:
            DeviceDataParallelTest.cpu = layout_run(self.data, self.path("cpu1"), SHAPE)[:2]
        return DeviceDataParallelTest.cpu

    def device_run(self, name, ranks, zero, *extra):
        """(metrics lines, final parameters, stdout) of `ranks` sim devices at ZeRO `zero`."""
        return layout_run(self.data, self.path(name), SHAPE, ranks, ["--device", "sim", "--zero", str(zero), *extra])

    def assert_equivalent(self, got, what):
        """Losses, the gradient's norm, the per-layer gradient and weight norms (the ranks' parts summed at ZeRO >=
        1) and the final parameters within TOLERANCE of one CPU process."""
        assert_equivalent(self, got, self.oracle(), what, TOLERANCE)

    def test_zero_stages_equal_one_process(self):
        zero0 = self.device_run("dev2_z0", 2, 0)
        self.assert_equivalent(zero0, "2 ranks, ZeRO 0")
        self.assertIn("device buffers over host", zero0[2])
        for zero in (1, 2):
            run = self.device_run(f"dev2_z{zero}", 2, zero)
            self.assert_equivalent(run, f"2 ranks, ZeRO {zero}")
            self.assertTrue(np.array_equal(run[1], zero0[1]), f"ZeRO {zero}: other parameters than ZeRO 0")

    def test_bf16_sharded_equals_replicated(self):
        """bf16: after the parameters' all-gather each rank's bf16 copies follow the other ranks' halves too."""
        runs = [self.device_run(f"dev2_bf16_z{zero}", 2, zero, "--precision", "bf16")[1] for zero in (0, 1)]
        self.assertTrue(np.array_equal(runs[1], runs[0]), "bf16 at ZeRO 1: other parameters than at ZeRO 0")

    def test_four_ranks(self):
        """4 ranks: the parts' edges fall inside more tensors (AdamW and the norms clipped to each)."""
        for zero in (0, 1):
            self.assert_equivalent(self.device_run(f"dev4_z{zero}", 4, zero), f"4 ranks, ZeRO {zero}")

    def test_guard_names_the_rank_as_cpu(self):
        """A NaN planted in rank 1's gradient of layer 1 at step 3: the step skipped naming rank 1 (each rank checks
        its own gradient before the reduction, the flags combined as on the CPU), the rest trained as on the CPU."""
        runs = {}
        for device in ("sim", "cpu"):
            metrics, params, _ = layout_run(self.data, self.path(f"nan_{device}"), SHAPE, 2,
                                            ["--device", device, "--debug-inject-fault", "nan:1:3:1"],
                                            steps=5)
            runs[device] = ([(m["step"], m["skipped"]) for m in metrics if "skipped" in m], params)
        self.assertEqual(runs["sim"][0], [(3, "non-finite value on rank 1 at layer 1")])
        self.assertEqual(runs["sim"][0], runs["cpu"][0])
        self.assertLessEqual(rel(runs["sim"][1], runs["cpu"][1]), TOLERANCE)

    def resave(self, name, ranks, source, *flags):
        """`name` on `ranks` processes reads checkpoint 5 of the run saved under `source` and saves it at once (a resume
        into another layout saves; --steps 5 trains nothing)."""
        launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                "--global-batch", "8", "--steps", "5", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
                "--sample-tokens", "0", "--threads", "1", "--quiet", "--zero", "1", "--out", self.path(name),
                "--resume", os.path.join(source, "ckpt", "step_00000005"), *flags], ranks)

    def test_checkpoint_resumes_on_one_cpu_process(self):
        """Step 5 of 2 device ranks at ZeRO 1, read by one CPU process and saved: the same parameters bit for bit;
        that copy read back by 2 device ranks and saved: the first checkpoint's state (manifest and checksums)."""
        out = self.path("dev2_ck")
        self.device_run("dev2_ck_run", 2, 1, "--out", out, "--ckpt-every", "5")
        self.resave("cpu_copy", 1, out)
        params = checkpoint_params(self, {"device": out, "cpu": self.path("cpu_copy")}, 5)
        self.assertTrue(np.array_equal(params["cpu"], params["device"]), "one CPU process read other parameters")
        self.resave("dev2_back", 2, self.path("cpu_copy"), "--device", "sim")
        state = lambda d: {k: v for k, v in read_manifest(os.path.join(d, "ckpt"), 5).items() if k != "layout"}
        self.assertEqual(state(self.path("dev2_back")), state(out), "the state changed on its way through one process")

    def refused(self, ranks, *flags):
        p = launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                    "--steps", "1", "--quiet", *flags], ranks, check=False)
        self.assertNotEqual(p.returncode, 0, flags)
        line = one_line_error(p, ranks)
        self.assertIsNotNone(line, p.stderr)
        return line

    def test_refusals(self):
        self.assertIn("--gpu-comm nccl needs --device cuda", self.refused(2, "--device", "sim", "--gpu-comm", "nccl"))
        self.assertIn("--gpu-comm host needs --device", self.refused(1, "--gpu-comm", "host"))
        self.assertIn("--zero 3", self.refused(2, "--device", "sim", "--zero", "3"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
