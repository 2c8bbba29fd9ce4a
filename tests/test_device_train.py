#!/usr/bin/python3
"""test_device_train.py: `train --device` against `--device cpu` through the CLI.

`test_device_train.py sim` (every machine) and `test_device_train.py cuda`
(a GPU; skipped with exit 77 and the reason where none answers, a failure
under BS_REQUIRE_GPU=1):
- the whole model: L4 H4 C64 T64, micro-batch 4 accumulated to 8, 10 AdamW
  steps with clipping and two validations: losses (and the metrics' per-layer
  gradient norms) within 1e-5 relative of the CPU's, every parameter within
  1e-4 (the issue's bounds; fp32 on both, sums in other orders);
- checkpoints: the device's checkpoint holds the device's state bit for bit
  (exported, it equals the model the run saved from the device), the device
  resumes its own checkpoint bit for bit, and each side resumes the other's
  within the bounds above;
- bad input: one line on stderr and a non-zero exit for a flag the device
  does not run yet, (sim) for a model that does not fit the device
  (--sim-memory 1: a 1 MB device; on a GPU cudaMalloc's failure gives the
  same line, "out of GPU memory: ...", which no test forces), and (sim) for
  --device cuda where no GPU answers.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, TempDir, make_corpus, one_line_error, read_metrics, read_model, run  # noqa: E402

DEVICE = sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in ("sim", "cuda") else "sim"
SHAPE = ["--layers", "4", "--heads", "4", "--channels", "64", "--seq-len", "64", "--micro-batch", "4",
         "--global-batch", "8", "--warmup", "2", "--sample-tokens", "0", "--threads", "1", "--quiet"]


def device_answers():
    """None if DEVICE opens, else why not (a tiny run's one line)."""
    if DEVICE == "sim":
        return None
    with TempDir() as d:
        data = make_corpus(d, nbytes=20_000)
        p = run(["train", "--device", "cuda", "--steps", "1", "--layers", "1", "--channels", "32", "--heads", "1",
                 "--seq-len", "16", "--micro-batch", "1", "--quiet", "--sample-tokens", "0", "--eval-every", "0",
                 "--data", os.path.join(data, "train_000000.bin")], check=False)
        return None if p.returncode == 0 else p.stderr.strip()


class DeviceTrainTest(CorpusTest):
    def train(self, name, device, *extra):
        out = os.path.join(self.dir, name)
        run(["train", *SHAPE, "--data", os.path.join(self.data, "train_000000.bin"), "--device", device,
             "--out", out, "--metrics", out + ".jsonl", *extra])
        lines = read_metrics(out + ".jsonl")
        return ([m["loss"] for m in lines], [m["val_loss"] for m in lines if "val_loss" in m],
                read_model(os.path.join(out, "model.bin"))[1], [x for m in lines for x in m["grad_norm_layers"]])

    def assert_close(self, got, want, what):
        """losses, validation losses and per-layer gradient norms within 1e-5 relative, parameters within 1e-4"""
        got_l, got_v, got_p, got_n = got
        want_l, want_v, want_p, want_n = want
        for a, b in ((got_l, want_l), (got_v, want_v), (got_n, want_n)):
            self.assertEqual(len(a), len(b), what)
        rel = max(abs(a - b) / abs(b) for a, b in zip(got_l + got_v + got_n, want_l + want_v + want_n))
        diff = float(np.max(np.abs(got_p.astype(np.float64) - want_p)))
        print(f"{what}: losses and layer norms within {rel:.2g} relative, parameters within {diff:.2g}")
        self.assertLessEqual(rel, 1e-5, what)
        self.assertLessEqual(diff, 1e-4, what)

    def test_whole_model_equals_cpu(self):
        val = ["--eval-every", "5", "--val-data", os.path.join(self.data, "val_000000.bin"), "--val-batches", "2"]
        self.assert_close(self.train("dev", DEVICE, "--steps", "10", *val), self.train("cpu", "cpu", "--steps", "10", *val),
                          f"--device {DEVICE} vs cpu")

    def test_checkpoints_cross_devices(self):
        ck = ["--steps", "10", "--ckpt-every", "5", "--eval-every", "0"]
        dev = self.train("dev_ck", DEVICE, *ck)
        cpu = self.train("cpu_ck", "cpu", *ck)
        exported = os.path.join(self.dir, "exported.bin")
        run(["ckpt", "export", "--out", exported, os.path.join(self.dir, "dev_ck", "ckpt", "step_00000010")])
        self.assertTrue(np.array_equal(read_model(exported)[1], dev[2]), "the device's checkpoint is not its state")
        resume = lambda src: ["--steps", "10", "--eval-every", "0", "--resume",
                              os.path.join(self.dir, src, "ckpt", "step_00000005")]
        again = self.train("dev_again", DEVICE, *resume("dev_ck"))
        self.assertEqual(again[0], dev[0][5:], "the device's resume of its own checkpoint changed the losses")
        self.assertTrue(np.array_equal(again[2], dev[2]), "the device's resume of its own checkpoint changed the model")
        per_step = len(dev[3]) // len(dev[0])  # layer norms per metrics line
        tail = lambda run_: (run_[0][5:], run_[1], run_[2], run_[3][5 * per_step:])
        self.assert_close(self.train("cpu_from_dev", "cpu", *resume("dev_ck")), tail(dev), "cpu resumes the device's")
        self.assert_close(self.train("dev_from_cpu", DEVICE, *resume("cpu_ck")), tail(cpu), "the device resumes cpu's")

    def refused(self, *flags):
        p = run(["train", *SHAPE, "--steps", "1", "--data", os.path.join(self.data, "train_000000.bin"), *flags],
                check=False)
        self.assertNotEqual(p.returncode, 0, flags)
        line = one_line_error(p)
        self.assertIsNotNone(line, p.stderr)
        return line

    def test_refusals(self):
        self.assertIn("--precision", self.refused("--device", DEVICE, "--precision", "bf16"))
        self.assertIn("--tp", self.refused("--device", DEVICE, "--tp", "2"))
        self.assertIn("--debug-inject-fault", self.refused("--device", DEVICE, "--debug-inject-fault", "nan:0:1"))
        if DEVICE == "sim":  # a model that does not fit the (simulated) device
            self.assertIn("out of device memory", self.refused("--device", "sim", "--sim-memory", "1"))
            self.assertIn("--sim-memory", self.refused("--sim-memory", "1"))
        if DEVICE == "sim":  # where no GPU answers (or CUDA is not built in): one line naming --device cuda
            p = run(["train", *SHAPE, "--steps", "1", "--data", os.path.join(self.data, "train_000000.bin"),
                     "--device", "cuda"], check=False)
            if p.returncode != 0:
                line = one_line_error(p) or ""
                self.assertIn("the cuda device: ", line, p.stderr)
                self.assertIn("(flags: --device)", line, p.stderr)


if __name__ == "__main__":
    why = device_answers()
    if why:
        required = os.environ.get("BS_REQUIRE_GPU") == "1"
        print(("FAIL (BS_REQUIRE_GPU=1): " if required else "skipped: ") + why)
        sys.exit(1 if required else 77)
    unittest.main()
