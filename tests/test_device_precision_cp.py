#!/usr/bin/python3
"""test_device_precision_cp.py: context parallelism on the device in bf16 and in delayed FP8 (`train --device
sim|cuda --cp 2 --precision bf16|fp8` on 2 ranks) against the CPU's own cp 2 run in the same precision.

The bound is tests/layout_floor.py's: losses (the largest relative gap over ten AdamW steps) and final parameters
within K = 4 x the noise floor measured beside them (the one CPU process against itself with its sums reordered:
micro-batches, the pairs' order, the other bf16 matmul path where oneDNN runs; layout_floor.py says why these and
why K), as tests/test_device_bf16.py and test_device_fp8.py hold the device's other layouts. The shape is context
parallelism's smallest (32 channels, T 256: each rank's two chunks of 64 rows, the CPU's attention row block), not
the floor model of those tests (T 64, which cp 2 cannot cut): the floor is measured at this shape. bf16 runs 2
layers; FP8 4 (4 heads): at 2 layers its floor's reorderings (micro-batches, the pairs' order; the other bf16 path
changes nothing in fp32) read 1.4e-4 in the parameters, while one E5M2 code flipped by any fp32 reordering moves
them by ~7e-4 (measured on an Intel Xeon, 2 cores: the device's one process, the CPU's cp 2, the device's cp 2
against the CPU's one process: 6.8e-4, 7.0e-4, 6.5e-4; the device's cp 2 against the CPU's cp 2: 1.0e-4 on one
corpus, 1.1e-3 = 7.7 x floor on the test's); at 4 layers the floor samples such flips (the micro-batches of 4 alone
read 2e-3). What differs from the CPU's cp 2 is the device's kernels' fp32 summation order (attention merged by
log-sum-exp on both) and, in FP8, nothing else: the amaxes are max-reduced over the data-parallel group, which
spans dp x cp, as on the CPU (each context rank sees half of every sequence).

`test_device_precision_cp.py sim` (every machine) or `cuda` (skipped with exit 77 and the reason where no GPU
answers, a failure under BS_REQUIRE_GPU=1).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest  # noqa: E402
from harness.device_runs import device_from_argv, main_on  # noqa: E402
from layout_floor import K, Floor, loss_gap, param_gap, train  # noqa: E402

DEVICE = device_from_argv()
SEQ = 256


def shape(layers):
    """Flags over train()'s model (the last of a repeated flag wins)."""
    return ["--layers", str(layers), "--heads", str(layers), "--channels", "32", "--seq-len", str(SEQ)]


# tag -> (flags, the floor's splits as test_device_bf16.py's and test_device_fp8.py's, the model, whether the floor
# samples the other bf16 matmul path: not in FP8 with fp32 outside it, no bf16 product there (it read 0 there))
PRECISIONS = {"bf16": (["--precision", "bf16"], (4, 2, 1), shape(2), True),
              "fp8": (["--precision", "fp8", "--fp8-recipe", "delayed", "--fp8-high-precision", "fp32"], (4, 2),
                      shape(4), False)}


class DevicePrecisionContextTest(CorpusTest):
    CORPUS_BYTES = 400_000

    def check_cp2(self, tag):
        flags, splits, model, other_path = PRECISIONS[tag]
        flags = flags + model
        floor = Floor(self, tag, flags, splits, seq_len=SEQ, other_path=other_path)
        extra = ["--cp", "2"] + floor.pairs + flags
        m, p, _ = train(self.data, self.path(f"{tag}-device"), ranks=2, micro=2, extra=extra + ["--device", DEVICE])
        cpu_m, cpu_p, _ = train(self.data, self.path(f"{tag}-cpu"), ranks=2, micro=2, extra=extra)
        if tag == "fp8":
            self.assertIn("fp8_underflow", m[-1], "no FP8 statistics: did the device run use FP8?")
        self.assertEqual(len(m), len(cpu_m))
        lg, pg = loss_gap(m, cpu_m), param_gap(p, cpu_p)
        print(f"  {tag} cp 2 --device {DEVICE} against the CPU's cp 2: loss gap {lg:.2e} = {lg / floor.loss:.2f} x "
              f"floor, parameters {pg:.2e} = {pg / floor.param:.2f} x floor", flush=True)
        self.assertLessEqual(lg, K * floor.loss, f"{tag} cp 2: loss gap {lg:.3g} > {K} x floor {floor.loss:.3g}")
        self.assertLessEqual(pg, K * floor.param, f"{tag} cp 2: parameters {pg:.3g} > {K} x floor {floor.param:.3g}")

    def test_bf16_within_the_floor(self):
        self.check_cp2("bf16")

    def test_fp8_within_the_floor(self):
        self.check_cp2("fp8")


if __name__ == "__main__":
    main_on(DEVICE)
