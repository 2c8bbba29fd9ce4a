#!/usr/bin/python3
"""test_device_memory_peak.py: `train --device sim --metrics` writes the device memory in use at its highest
("device_memory_peak_bytes", device_memory_peak in device/device.h) on every step's line. On sim that is the bytes
allocated through the device seam, so it is exactly the smallest memory a run fits: the run fits a --sim-memory of
the peak rounded up to whole MiB and refuses ("out of device memory") one MiB less. The figure never falls from step
to step, and grows with the micro-batch (the activations)."""
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, run  # noqa: E402

MIB = 2**20


class DeviceMemoryPeakTest(CorpusTest):
    CORPUS_BYTES = 200_000

    def train(self, micro, mib=None, name="m"):
        metrics = self.path(name + ".jsonl")
        args = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "2", "--heads", "2",
                "--channels", "64", "--seq-len", "64", "--micro-batch", str(micro), "--steps", "3",
                "--sample-tokens", "0", "--quiet", "--eval-every", "0", "--device", "sim", "--metrics", metrics]
        p = run(args + (["--sim-memory", str(mib)] if mib else []), check=False)
        if p.returncode != 0:
            self.assertIn("out of device memory", p.stderr)
            return None
        with open(metrics) as f:
            return [json.loads(line)["device_memory_peak_bytes"] for line in f]

    def test_peak_is_the_memory_a_run_needs(self):
        peaks = self.train(4)
        print(f"  sim, micro-batch 4: device memory peak {peaks} bytes")
        self.assertEqual(len(peaks), 3)
        self.assertEqual(peaks, sorted(peaks), "the peak fell")
        need = math.ceil(peaks[-1] / MIB)
        self.assertIsNotNone(self.train(4, need, "fits"), f"does not fit {need} MiB")
        self.assertIsNone(self.train(4, need - 1, "short"), f"fits {need - 1} MiB, under its peak")
        self.assertGreater(self.train(8, name="wide")[-1], peaks[-1], "twice the micro-batch, no more memory")


if __name__ == "__main__":
    unittest.main()
