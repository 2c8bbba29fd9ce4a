#!/usr/bin/python3
"""test_device_acts_bf16.py: `train --device sim|cuda --precision bf16 --activations bf16` (each layer's activations
kept in bf16, model/acts_bf16_device.h) through the CLI.

- floor: ten AdamW steps of tests/layout_floor.py's model within K = 4 x the noise floor measured beside it (the one
  CPU process against itself reordered; layout_floor.py says why these reorderings and why K) against the CPU's bf16
  run, and bit for bit the plain device path's (--activations fp32) on the same device: the store keeps only values
  the bf16 step has rounded to bf16 already (model/acts_bf16_device.h), so the bound derived from bf16 rounding is 0.
- memory: on sim, the smallest --sim-memory (MiB) a step needs, found by bisection, with and without bf16
  activations; the difference is the one derived from the buffers, within the MiB steps of the search: of the 16 C
  floats per token a layer keeps, ln1, atty, ln2 and fch_gelu (7 C) go to bf16 in every layer, and one fp32 copy of
  them (7 C) is shared: saved N C (4 (7 L) - 2 (7 L) - 4 (7)) = N C (14 L - 28) bytes.
- refusals: one line naming why, where bf16 activations do not run (the CPU, fp32 or FP8 products, full
  recomputation, pipeline and tensor parallelism).

`test_device_acts_bf16.py sim|cuda -k floor|memory|refusals`.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, one_line_error, run  # noqa: E402
from harness.device_runs import device_from_argv, main_on  # noqa: E402
from layout_floor import Floor, loss_gap, param_gap, train  # noqa: E402

DEVICE = device_from_argv()
FLOOR_MICRO = (4, 2, 1)  # as test_device_bf16.py's
BF16 = ["--precision", "bf16"]
ACTS = ["--activations", "bf16"]
MEMORY_SHAPE = dict(layers=8, channels=64, heads=4, seq_len=128, micro=8)  # activations about 3/4 of the device's bytes


class DeviceActsBf16Test(CorpusTest):
    CORPUS_BYTES = 400_000

    def test_floor(self):
        floor = Floor(self, "bf16", BF16, FLOOR_MICRO)
        device = ["--device", DEVICE]
        plain, plain_p, _ = train(self.data, self.path("plain"), extra=floor.pairs + BF16 + device)
        kept, kept_p, _ = train(self.data, self.path("acts"), extra=floor.pairs + BF16 + device + ACTS)
        floor.check(f"--device {DEVICE} --activations bf16", kept, kept_p)
        lg, pg = loss_gap(kept, plain), param_gap(kept_p, plain_p)
        print(f"  against the plain device path: loss gap {lg:.2e}, parameters {pg:.2e} (bound 0)")
        self.assertEqual([m["loss"] for m in kept], [m["loss"] for m in plain], "losses: not the plain device path's")
        self.assertTrue(np.array_equal(kept_p, plain_p), "parameters: not the plain device path's bits")

    def fits(self, mib, extra):
        s = MEMORY_SHAPE
        args = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", str(s["layers"]),
                "--heads", str(s["heads"]), "--channels", str(s["channels"]), "--seq-len", str(s["seq_len"]),
                "--micro-batch", str(s["micro"]), "--steps", "1", "--sample-tokens", "0", "--quiet", "--eval-every",
                "0", "--device", "sim", "--sim-memory", str(mib)] + BF16 + extra
        p = run(args, check=False)
        self.assertTrue(p.returncode == 0 or "out of device memory" in p.stderr, p.stderr)
        return p.returncode == 0

    def smallest(self, extra):
        lo, hi = 1, 64
        self.assertTrue(self.fits(hi, extra), "the memory test's model does not fit 64 MiB")
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.fits(mid, extra) else (mid + 1, hi)
        return lo

    def test_memory(self):
        if DEVICE != "sim":
            self.skipTest("sim's memory limit measures the bytes")
        plain, kept = self.smallest([]), self.smallest(ACTS)
        s = MEMORY_SHAPE
        tokens_channels = s["micro"] * s["seq_len"] * s["channels"]
        derived = tokens_channels * (14 * s["layers"] - 28) / 2**20
        print(f"  sim: a step needs {plain} MiB with fp32 activations, {kept} MiB with bf16: {plain - kept} MiB "
              f"saved, derived {derived:.2f} MiB")
        self.assertLessEqual(abs(plain - kept - derived), 1.0, "bf16 activations: not the derived saving")

    def test_refusals(self):
        base = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "1", "--channels", "32",
                "--heads", "1", "--seq-len", "16", "--micro-batch", "1", "--steps", "1", "--quiet"] + ACTS
        for extra, says in ((BF16, "needs --device cuda or sim"),
                            (["--device", DEVICE], "needs --precision bf16 (got fp32)"),
                            (["--device", DEVICE, "--precision", "fp8"], "needs --precision bf16 (got fp8)"),
                            (["--device", DEVICE, "--recompute", "full"] + BF16, "--recompute full"),
                            (["--device", DEVICE, "--pp", "2", "--layers", "2"] + BF16, "does not work with --pp"),
                            (["--device", DEVICE, "--tp", "2", "--heads", "2"] + BF16, "does not work with --tp")):
            p = run(base + extra, check=False)
            self.assertNotEqual(p.returncode, 0, says)
            self.assertIn(says, one_line_error(p) or f"not one line: {p.stderr!r}")


if __name__ == "__main__":
    main_on(DEVICE)
