#!/usr/bin/python3
"""test_device_bf16.py: `train --device sim|cuda --precision bf16` against `--device cpu --precision bf16`.

The model of tests/layout_floor.py (L4 H4 C64, T 64, global batch 8, ten AdamW steps on its pair shards): the
device's run within K = 4 x the noise floor measured beside it, the one CPU process against itself with its sums
reordered (micro-batches of 4, 2 and 1 sequences, each batch's pairs in three other orders and, where oneDNN runs,
the other bf16 matmul path): layout_floor.py says why these reorderings and why K. The device computes the same
bf16 operands (weights from its bf16 copy, inputs and output gradients rounded, fp32 accumulation, the bias
gradients from the fp32 output gradients, the encoder on wte rounded) with its own kernels' summation orders, a
reordering of the kind the floor samples. Also a run in fp32 on the device must differ from the bf16 one by far
more than the floor (the precision took effect).

Pipeline stages (`--pp 2` on 2 ranks, micro-batches of 2): the device's run against the CPU's bf16 pp 2 run within
K x the same floor, loss gaps and parameters. The last stage multiplies by its own copy of the tied weights, whose
bf16 bits are rounded again each time the first stage sends it the updated wte (a stale copy, or none, is a real
error: the head's product on other weights than the embeddings').

Tensor parallelism (`--tp 2` on 2 ranks, micro-batches of 2): the same against the CPU's bf16 tp 2 run. The device
gathers the whole wte and multiplies by it on every rank: its bf16 bits (rounded from the whole vocabulary's, not this
rank's rows) are the classifier's weight operand and the encoder reads it rounded; the CPU rounds each rank's rows.

`test_device_bf16.py sim` (every machine) or `cuda` (a GPU; skipped with exit 77 and the reason where none
answers, a failure under BS_REQUIRE_GPU=1).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest  # noqa: E402
from harness.device_runs import device_from_argv, main_on  # noqa: E402
from layout_floor import K, Floor, loss_gap, param_gap, train  # noqa: E402

DEVICE = device_from_argv()
FLOOR_MICRO = (4, 2, 1)  # as test_bf16_train.py's
BF16 = ["--precision", "bf16"]


class DeviceBf16Test(CorpusTest):
    CORPUS_BYTES = 400_000
    measured = None  # the floor, measured once for the class's tests

    def floor(self):
        if DeviceBf16Test.measured is None:
            DeviceBf16Test.measured = Floor(self, "bf16", BF16, FLOOR_MICRO)
        return DeviceBf16Test.measured

    def test_bf16_within_the_floor(self):
        bf16, floor = BF16, self.floor()
        device = ["--device", DEVICE]
        m, p, _ = train(self.data, self.path("device"), extra=floor.pairs + bf16 + device)
        floor.check(f"--device {DEVICE}", m, p)
        # bf16 at work on the device: its run differs from the device's fp32 run far more than the device's fp32
        # run differs from the CPU's (the kernels' summation order alone: 4e-8 measured). A bf16 mode that
        # rounded nothing would land at that distance, or at 0.
        fp32, _, _ = train(self.data, self.path("device-fp32"), extra=floor.pairs + device)
        cpu32, _, _ = train(self.data, self.path("cpu-fp32"), extra=floor.pairs)
        fp32_noise, bf16_effect = loss_gap(fp32, cpu32), loss_gap(m, fp32)
        print(f"  --device {DEVICE}: bf16 against its fp32 run {bf16_effect:.2e}, fp32 against the CPU's {fp32_noise:.2e}")
        self.assertGreater(bf16_effect, 100 * fp32_noise, "the device's bf16 run looks like its fp32 one")
        self.assertGreater(bf16_effect, 0, "the device's bf16 run is its fp32 one")

    def check_layout(self, name, flags):
        """The layout `flags` on 2 ranks (micro-batches of 2) on the device against the CPU's same layout: loss gaps
        and final parameters within K x the floor."""
        floor = self.floor()
        extra = flags + floor.pairs + BF16
        m, p, _ = train(self.data, self.path(f"device-{name}"), ranks=2, micro=2, extra=extra + ["--device", DEVICE])
        cpu_m, cpu_p, _ = train(self.data, self.path(f"cpu-{name}"), ranks=2, micro=2, extra=extra)
        self.assertEqual(len(m), len(cpu_m))
        lg, pg = loss_gap(m, cpu_m), param_gap(p, cpu_p)
        print(f"  bf16 {name} --device {DEVICE} against the CPU's {name}: loss gap {lg:.2e} = {lg / floor.loss:.2f} x "
              f"floor, parameters {pg:.2e} = {pg / floor.param:.2f} x floor", flush=True)
        self.assertLessEqual(lg, K * floor.loss, f"bf16 {name}: loss gap {lg:.3g} > {K} x floor {floor.loss:.3g}")
        self.assertLessEqual(pg, K * floor.param, f"bf16 {name}: parameters {pg:.3g} > {K} x floor {floor.param:.3g}")

    def test_pipeline_within_the_floor(self):
        self.check_layout("pp2", ["--pp", "2"])

    def test_tensor_parallel_within_the_floor(self):
        self.check_layout("tp2", ["--tp", "2"])


if __name__ == "__main__":
    main_on(DEVICE)
