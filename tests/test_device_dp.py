#!/usr/bin/python3
"""test_device_dp.py: data parallelism on device buffers (`train --device sim|cuda` under mpirun) against one process.

The first argument names the device: sim (CI) or cuda (the GPU check: the ranks share the one GPU through the host
path; the memory test is sim's alone, and the nccl refusal is the GPU's: two ranks on one GPU).

- Equivalence: 2 and 4 ranks at ZeRO 0, 1, 2 and 3, global batch 8 in micro-batches of 2, give the
  losses of one CPU process computing the whole batch within 1e-5 relative over 10 steps, and its final parameters
  within 1e-5 (max |a-b| / max |b|). Not bitwise: the device's kernels sum in other orders than the CPU's (one
  device process against one CPU process already differs by ~2e-6 in the parameters here). The metrics' gradient
  norm and per-layer gradient and weight norms within 1e-5 too. On 2 ranks ZeRO 1 equals ZeRO 0 bit for bit
  (fp32, and bf16): the host path sums two ranks' floats (a + b either way, bucket by bucket or whole) and AdamW is
  elementwise. ZeRO 2 reduces every micro-batch and adds the rank's part up, as the CPU's ZeRO 2 (a1 + b1) + (a2 +
  b2) where ZeRO 0-1 reduce the step's sum (a1 + a2) + (b1 + b2): equal within the bound, not bit for bit. ZeRO 3
  (each block's parameters all-gathered before each use) sums as ZeRO 2 and gathers copies: ZeRO 2's bits.
- Memory (sim's count of device allocations, the banner's "device memory" line): ZeRO 1 holds 8 bytes less per
  parameter it does not update (AdamW's two moments), exactly; ZeRO 2 4 bytes less again (the gradient) and three
  bucket buffers more (the embeddings' and two of the largest other bucket), exactly, on a model of 8 layers where
  that is a saving; ZeRO 3 4 bytes less again (the parameters) and four parameter slots more (the embeddings, the
  final LayerNorm, two layers), exactly.
- The data-parallel line names the path the device buffers take ("device buffers over host").
- A checkpoint the 2-rank device run (ZeRO 1 and 3: each rank holds half of the moments, at 3 of the parameters
  too) writes at step 5 is read by
  one CPU process and by the same layout on 2 CPU ranks, each saving it again at once: the same parameters bit for bit; read back from that copy by 2
  device ranks and saved, the same state as the first, file checksums included (a file per rank's moments, so
  the copies on one process and on two ranks are compared through the round trip).
- The guard: a NaN planted in one rank's gradient skips the step naming that rank, as on the CPU.
- Bad input, one line each: --gpu-comm nccl with --device sim, --gpu-comm host on the CPU, --zero 3 in bf16 on a
  device.
- The guard at ZeRO 2: each micro-batch's blocks checked before they are reduced, the step skipped naming the rank.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, layout_run, one_line_error, read_manifest, read_model, rel  # noqa: E402
from harness.device_runs import assert_equivalent, checkpoint_params, device_from_argv, main_on  # noqa: E402

DEVICE = device_from_argv()  # sim (CI), or cuda: the GPU check's, ranks sharing the GPU through the host path

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
        """(metrics lines, final parameters, stdout) of `ranks` devices (sim, or ranks sharing a GPU) at ZeRO `zero`."""
        return layout_run(self.data, self.path(name), SHAPE, ranks, ["--device", DEVICE, "--zero", str(zero), *extra])

    def assert_equivalent(self, got, what):
        """Losses, the gradient's norm, the per-layer gradient and weight norms (the ranks' parts summed at ZeRO >=
        1) and the final parameters within TOLERANCE of one CPU process."""
        assert_equivalent(self, got, self.oracle(), what, TOLERANCE)

    def test_zero_stages_equal_one_process(self):
        zero0 = self.device_run("dev2_z0", 2, 0)
        self.assert_equivalent(zero0, "2 ranks, ZeRO 0")
        self.assertIn("device buffers over host", zero0[2])
        zero1 = self.device_run("dev2_z1", 2, 1)
        self.assert_equivalent(zero1, "2 ranks, ZeRO 1")
        self.assertTrue(np.array_equal(zero1[1], zero0[1]), "ZeRO 1: other parameters than ZeRO 0")
        zero2 = self.device_run("dev2_z2", 2, 2)
        self.assert_equivalent(zero2, "2 ranks, ZeRO 2")
        zero3 = self.device_run("dev2_z3", 2, 3)
        self.assert_equivalent(zero3, "2 ranks, ZeRO 3")
        self.assertTrue(np.array_equal(zero3[1], zero2[1]), "ZeRO 3: other parameters than ZeRO 2")

    def test_bf16_sharded_equals_replicated(self):
        """bf16: after the parameters' all-gather each rank's bf16 copies follow the other ranks' halves too."""
        runs = [self.device_run(f"dev2_bf16_z{zero}", 2, zero, "--precision", "bf16")[1] for zero in (0, 1)]
        self.assertTrue(np.array_equal(runs[1], runs[0]), "bf16 at ZeRO 1: other parameters than at ZeRO 0")

    def test_four_ranks(self):
        """4 ranks: the parts' edges fall inside more tensors (AdamW and the norms clipped to each)."""
        for zero in (0, 1, 2, 3):
            self.assert_equivalent(self.device_run(f"dev4_z{zero}", 4, zero), f"4 ranks, ZeRO {zero}")

    def test_zero2_reuses_bucket_buffers(self):
        """ZeRO 2 on 3 layers with a bucket per layer (--bucket-mb 0.001): backward needs a third bucket buffer
        while two are reduced, so the oldest one's part is added first (after its own reduction's event); on 2 ranks
        the same bits as one bucket for all layers (a + b per element either way, the parts added in the same
        micro-batch order)."""
        shape = ["--layers", "3", *SHAPE[2:]]
        runs = [layout_run(self.data, self.path(f"dev2_z2_b{mb}"), shape, 2,
                           ["--device", DEVICE, "--zero", "2", "--bucket-mb", mb])[1] for mb in ("8", "0.001")]
        self.assertTrue(np.array_equal(runs[1], runs[0]), "small buckets: other parameters than one bucket")

    def device_memory(self, ranks, zero, shape, bucket_mb):
        """The banner's device memory of rank 0 (bytes, sim's count) for one step."""
        p = launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *shape, "--micro-batch", "2",
                    "--global-batch", "8", "--steps", "1", "--eval-every", "0", "--sample-tokens", "0", "--threads",
                    "1", "--device", "sim", "--zero", str(zero), "--bucket-mb", str(bucket_mb)], ranks)
        line = [l for l in p.stdout.splitlines() if l.startswith("device memory: ")]
        self.assertEqual(len(line), 1, p.stdout)
        return int(line[0].split()[2])

    def test_zero2_keeps_the_gradients_part(self):
        if DEVICE != "sim":
            self.skipTest("sim's count of device allocations; a GPU's allocator adds its own blocks")
        C, T, L, Vp, bucket_mb = 64, 32, 8, 384, 0.01
        shape = ["--layers", str(L), "--heads", "2", "--channels", str(C), "--seq-len", str(T)]
        emb, layer, lnf = Vp * C + T * C, 12 * C * C + 13 * C, 2 * C
        P = emb + L * layer + lnf
        target, pool, filled = int(bucket_mb * 1024 * 1024 / 4), 0, None  # data_parallel.c's plan_buckets
        for size in [lnf] + [layer] * L:  # backward's order; the embeddings are a bucket of their own
            filled = size if filled is None or filled >= target else filled + size
            pool = max(pool, filled)
        for ranks in (2, 4):
            self.assertEqual(P % ranks, 0)
            part = P // ranks
            peak = [self.device_memory(ranks, zero, shape, bucket_mb) for zero in (0, 1, 2, 3)]
            print(f"{ranks} ranks, {P} parameters: device memory at ZeRO 0, 1, 2, 3: {peak} bytes")
            self.assertEqual(peak[0] - peak[1], 8 * (P - part), f"{ranks} ranks: ZeRO 1's moments")
            self.assertEqual(peak[1] - peak[2], 4 * (P - part) - 4 * (emb + 2 * pool), f"{ranks} ranks: ZeRO 2's gradient")
            self.assertLess(peak[2], peak[1])
            slots = emb + lnf + 2 * layer
            self.assertEqual(peak[2] - peak[3], 4 * (P - part) - 4 * slots, f"{ranks} ranks: ZeRO 3's parameters")

    def test_guard_names_the_rank_as_cpu(self):
        """A NaN planted in rank 1's gradient of layer 1 at step 3: the step skipped naming rank 1 (each rank checks
        its own gradient before the reduction, the flags combined as on the CPU), the rest trained as on the CPU; at
        ZeRO 0 (the step's sum checked) and 2 (each micro-batch's bucket checked before its reduce-scatter)."""
        for zero in ("0", "2"):
            runs = {}
            for device in (DEVICE, "cpu"):
                metrics, params, _ = layout_run(self.data, self.path(f"nan_{device}_z{zero}"), SHAPE, 2,
                                                ["--device", device, "--zero", zero, "--debug-inject-fault", "nan:1:3:1"],
                                                steps=5)
                runs[device] = ([(m["step"], m["skipped"]) for m in metrics if "skipped" in m], params)
            self.assertEqual(runs[DEVICE][0], [(3, "non-finite value on rank 1 at layer 1")], f"ZeRO {zero}")
            self.assertEqual(runs[DEVICE][0], runs["cpu"][0], f"ZeRO {zero}")
            self.assertLessEqual(rel(runs[DEVICE][1], runs["cpu"][1]), TOLERANCE, f"ZeRO {zero}")

    def resave(self, name, ranks, source, *flags, zero="1"):
        """`name` on `ranks` processes reads checkpoint 5 of the run saved under `source` and saves it at once (a resume
        into another layout saves; --steps 5 trains nothing)."""
        launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                "--global-batch", "8", "--steps", "5", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
                "--sample-tokens", "0", "--threads", "1", "--quiet", "--zero", zero, "--out", self.path(name),
                "--resume", os.path.join(source, "ckpt", "step_00000005"), *flags], ranks)

    def test_checkpoint_resumes_on_one_cpu_process(self):
        """Step 5 of 2 device ranks at ZeRO 1 and 3, read by one CPU process and saved: the same parameters bit for
        bit; that copy read back by 2 device ranks (at the same stage) and saved: the first checkpoint's state
        (manifest and checksums)."""
        for zero in ("1", "3"):
            out = self.path(f"dev2_ck_z{zero}")
            self.device_run(f"dev2_ck_run_z{zero}", 2, int(zero), "--out", out, "--ckpt-every", "5")
            self.resave(f"cpu_copy_z{zero}", 1, out, zero=zero)
            cpu2 = self.path(f"cpu2_z{zero}.bin")  # the same layout on 2 CPU ranks (no new checkpoint: its final model)
            self.resave(f"cpu2_copy_z{zero}", 2, out, "--save-model", cpu2, zero=zero)
            params = checkpoint_params(self, {"device": out, "cpu": self.path(f"cpu_copy_z{zero}")}, 5)
            params["cpu2"] = read_model(cpu2)[1]
            self.assertTrue(np.array_equal(params["cpu"], params["device"]), f"ZeRO {zero}: one CPU process read other parameters")
            self.assertTrue(np.array_equal(params["cpu2"], params["device"]), f"ZeRO {zero}: 2 CPU ranks read other parameters")
            self.resave(f"dev2_back_z{zero}", 2, self.path(f"cpu_copy_z{zero}"), "--device", DEVICE, zero=zero)
            state = lambda d: {k: v for k, v in read_manifest(os.path.join(d, "ckpt"), 5).items() if k != "layout"}
            self.assertEqual(state(self.path(f"dev2_back_z{zero}")), state(out),
                             f"ZeRO {zero}: the state changed on its way through one process")

    def refused(self, ranks, *flags):
        p = launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *SHAPE, "--micro-batch", "2",
                    "--steps", "1", "--quiet", *flags], ranks, check=False)
        self.assertNotEqual(p.returncode, 0, flags)
        line = one_line_error(p, ranks)
        self.assertIsNotNone(line, p.stderr)
        return line

    def test_refusals(self):
        if DEVICE == "sim":
            self.assertIn("--gpu-comm nccl needs --device cuda", self.refused(2, "--device", "sim", "--gpu-comm", "nccl"))
        else:  # two ranks on the one GPU: NCCL would refuse them, so the run does first, in one line
            self.assertIn("nccl needs one GPU per rank", self.refused(2, "--device", DEVICE, "--gpu-comm", "nccl"))
        self.assertIn("--gpu-comm host needs --device", self.refused(1, "--gpu-comm", "host"))
        self.assertIn("--zero 3 in bf16 or FP8", self.refused(2, "--device", DEVICE, "--zero", "3", "--precision", "bf16"))


if __name__ == "__main__":
    main_on(DEVICE)
