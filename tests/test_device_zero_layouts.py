#!/usr/bin/python3
"""test_device_zero_layouts.py: ZeRO 2 and 3 together with tensor, context and pipeline parallelism on device buffers
(`train --device sim|cuda` under mpirun, 4 ranks) against one CPU process. The device is the first argument (sim by
default; cuda: the GPU check's, skipped where none answers).

- Equivalence: tp 2 x dp 2, cp 2 x dp 2 (the data-parallel group spans dp x cp: 4 ranks) and pp 2 x dp 2 (1f1b, and
  zbh1: buckets around its W passes, gathers around B and W) at ZeRO 2 and 3, global batch 8 in micro-batches of 2,
  give the losses, the gradient's norm, the per-layer gradient and weight norms and the final parameters of one CPU
  process within 1e-5 relative over 10 steps (harness/device_runs.py). ZeRO 3 gathers copies of the parameters and
  sums as ZeRO 2: ZeRO 2's bits; zbh1's W adds what the fused backward adds: 1f1b's bits.
- A checkpoint pp 2 x dp 2 writes at ZeRO 3 at step 5 (each rank its part of its stage) is read by one CPU process
  and saved at once: the same parameters bit for bit.
- Memory (on sim: its count, the banner's "device memory" line of rank 0, one step): ZeRO 2 holds 4 bytes less per
  parameter of the rank's model (a TP shard, a CP rank's whole model, pipeline stage 0) it does not update, and
  three bucket buffers more (the embeddings' and two of the largest other bucket); ZeRO 3 4 bytes less again and four
  parameter slots more (the embeddings, the final LayerNorm, two layers; a block the stage lacks: one float), exactly;
  each a saving on these shapes.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, layout_run  # noqa: E402
from harness.device_runs import assert_equivalent, assert_resumes_on_one_process, device_from_argv, main_on  # noqa: E402

DEVICE = device_from_argv()
SHAPE = ["--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32"]
SHAPE_CP = ["--layers", "4", "--heads", "4", "--channels", "32", "--seq-len", "256"]  # test_device_cp.py's: T/4 >= 64
TOLERANCE = 1e-5  # the bound; measured on sim on an Intel Xeon (2 cores): losses ~1e-8, parameters ~2e-6
# a GPU's products sum in cuBLASLt's orders: its parameters within 1e-4, as test_device_pp.py holds them
PARAMETERS = 1e-4 if DEVICE == "cuda" else TOLERANCE
VP, BUCKET_MB = 384, 0.01  # the corpus's padded vocabulary; buckets of a layer each at C 64 (data_parallel.c's plan)


def layer_floats(C, tp=1):
    """One transformer layer's floats on a tensor rank (gpt_layout.c: qkv, fc column-split, attproj and fcproj
    row-split, the LayerNorms and the row-split products' biases whole)."""
    return (12 * C * C + 7 * C) // tp + 6 * C


def zero_savings(emb, layers, lnf, ranks):
    """Device bytes ZeRO 1 -> 2 and 2 -> 3 save on a rank whose model holds the embeddings (emb floats), `layers`
    (each its floats) and the final LayerNorm (lnf), under data_parallel.c's bucket plan (a bucket per layer at
    BUCKET_MB, the embeddings' their own) and part P / ranks: device_buckets.c's and device_gather.c's buffers (the
    slot of a block the model lacks: 1 float)."""
    P = emb + sum(layers) + lnf
    assert P % ranks == 0, P
    target, pool, filled = int(BUCKET_MB * 1024 * 1024 / 4), 0, None
    for size in ([lnf] if lnf else []) + layers[::-1]:
        filled = size if filled is None or filled >= target else filled + size
        pool = max(pool, filled)
    unkept = P - P // ranks
    return 4 * unkept - 4 * (emb + 2 * pool), 4 * unkept - 4 * (emb + max(lnf, 1) + 2 * max(layers))


class DeviceZeroLayoutsTest(CorpusTest):
    cpu = {}

    def oracle(self, shape):
        """One CPU process on the whole batch and model: (metrics lines, final parameters)."""
        key = " ".join(shape)
        if key not in DeviceZeroLayoutsTest.cpu:
            DeviceZeroLayoutsTest.cpu[key] = layout_run(self.data, self.path(f"cpu1_{len(self.cpu)}"), shape)[:2]
        return DeviceZeroLayoutsTest.cpu[key]

    def equivalent(self, name, flags, shape=SHAPE):
        """`flags` on 4 device ranks within TOLERANCE of one CPU process; returns the run."""
        run = layout_run(self.data, self.path(name), shape, 4, ["--device", DEVICE, *flags])
        assert_equivalent(self, run, self.oracle(shape), " ".join(flags), TOLERANCE, PARAMETERS)
        return run

    def test_tensor_parallel(self):
        z2 = self.equivalent("tp2dp2_z2", ["--tp", "2", "--zero", "2"])
        z3 = self.equivalent("tp2dp2_z3", ["--tp", "2", "--zero", "3"])
        self.assertTrue(np.array_equal(z3[1], z2[1]), "tp 2 x dp 2: ZeRO 3 other parameters than ZeRO 2")

    def test_context_parallel(self):
        z2 = self.equivalent("cp2dp2_z2", ["--cp", "2", "--zero", "2"], SHAPE_CP)
        z3 = self.equivalent("cp2dp2_z3", ["--cp", "2", "--zero", "3"], SHAPE_CP)
        self.assertTrue(np.array_equal(z3[1], z2[1]), "cp 2 x dp 2: ZeRO 3 other parameters than ZeRO 2")

    def test_pipeline(self):
        f1b = self.equivalent("pp2dp2_z2", ["--pp", "2", "--zero", "2"])
        for zero in ("2", "3"):
            zbh1 = self.equivalent(f"pp2dp2_z{zero}_zbh1", ["--pp", "2", "--zero", zero, "--pp-schedule", "zbh1"])
            self.assertTrue(np.array_equal(zbh1[1], f1b[1]), f"pp 2 x dp 2 at ZeRO {zero}: zbh1 other parameters than 1f1b")
        out = self.path("pp2dp2_z3_ck")
        z3 = self.equivalent("pp2dp2_z3", ["--pp", "2", "--zero", "3", "--out", out, "--ckpt-every", "5"])
        self.assertTrue(np.array_equal(z3[1], f1b[1]), "pp 2 x dp 2: ZeRO 3 other parameters than ZeRO 2")
        assert_resumes_on_one_process(self, SHAPE, out)

    def device_memory(self, zero, shape, flags):
        """The banner's device memory of rank 0 (bytes, sim's count) for one step on 4 ranks."""
        p = launch(["train", "--data", os.path.join(self.data, "train_000000.bin"), *shape, "--micro-batch", "2",
                    "--global-batch", "8", "--steps", "1", "--eval-every", "0", "--sample-tokens", "0", "--threads",
                    "1", "--device", DEVICE, "--zero", str(zero), "--bucket-mb", str(BUCKET_MB), *flags], 4)
        line = [l for l in p.stdout.splitlines() if l.startswith("device memory: ")]
        self.assertEqual(len(line), 1, p.stdout)
        return int(line[0].split()[2])

    def assert_memory(self, what, shape, flags, savings):
        peak = {zero: self.device_memory(zero, shape, flags) for zero in (1, 2, 3)}
        print(f"{what}: device memory of rank 0 at ZeRO 1, 2, 3: {list(peak.values())} bytes")
        self.assertEqual(peak[1] - peak[2], savings[0], f"{what}: ZeRO 2's gradient")
        self.assertLess(peak[2], peak[1], what)
        self.assertEqual(peak[2] - peak[3], savings[1], f"{what}: ZeRO 3's parameters")
        self.assertLess(peak[3], peak[2], what)

    def test_memory(self):
        if DEVICE != "sim":
            self.skipTest("sim counts each allocation's bytes; a GPU's allocator rounds them and holds its context")
        C, L, T = 64, 8, 32
        shape = ["--layers", str(L), "--heads", "2", "--channels", str(C), "--seq-len", str(T)]
        self.assert_memory("tp 2 x dp 2", shape, ["--tp", "2"],
                           zero_savings(VP * C // 2 + T * C, [layer_floats(C, 2)] * L, 2 * C, 2))
        L_cp, T_cp = 4, 256  # 4 layers suffice on a group of 4
        shape_cp = ["--layers", str(L_cp), "--heads", "2", "--channels", str(C), "--seq-len", str(T_cp)]
        self.assert_memory("cp 2 x dp 2", shape_cp, ["--cp", "2"],
                           zero_savings(VP * C + T_cp * C, [layer_floats(C)] * L_cp, 2 * C, 4))
        L_pp = 16  # stage 0: the embeddings and 8 layers (fewer would not make ZeRO 2 a saving on 2 ranks)
        shape_pp = ["--layers", str(L_pp), *shape[2:]]
        self.assert_memory("pp 2 x dp 2 (stage 0)", shape_pp, ["--pp", "2"],
                           zero_savings(VP * C + T * C, [layer_floats(C)] * (L_pp // 2), 0, 2))


if __name__ == "__main__":
    main_on(DEVICE)
