#!/usr/bin/python3
"""test_device_graphs.py: `train --device sim|cuda --cuda-graphs on` against `--cuda-graphs off` through the CLI.

`test_device_graphs.py sim` (every machine) and `test_device_graphs.py cuda` (a GPU; skipped with exit 77 and the
reason where none answers):
- L2 H2 C32 T32, micro-batch 2 accumulated to 4, 10 AdamW steps with warm-up and clipping (the learning rate and
  the clipping scale change every step): the losses and the saved model bitwise equal with and without graphs, in
  fp32 and bf16; and with a batch warm-up (ramp:2:2:256: 2 sequences, then 4, so the loss scale passed to the
  micro-batch graph changes and it is captured again), likewise (documents, and what sim catches:
  test_gpt_device_graphs.c); and (DeviceGraphsLayoutsTest, the layouts tier) over 2 data-parallel ranks at ZeRO 0
  and 1;
- refusals, one line each: --cuda-graphs on with --device cpu, and with --precision fp8 (its scales change on
  the host between steps).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, launch, one_line_error, read_metrics, run  # noqa: E402
from harness.device_runs import device_from_argv, main_on  # noqa: E402

DEVICE = device_from_argv()
SHAPE = ["--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32", "--micro-batch", "2",
         "--global-batch", "4", "--warmup", "4", "--grad-clip", "0.5", "--sample-tokens", "0", "--threads", "1",
         "--quiet", "--eval-every", "0"]


class GraphRuns(CorpusTest):
    """Runs with and without graphs, compared."""

    def train(self, name, *extra, ranks=1):
        out = os.path.join(self.dir, name)
        launch(["train", *SHAPE, "--data", os.path.join(self.data, "train_000000.bin"), "--device", DEVICE,
                "--out", out, "--metrics", out + ".jsonl", *extra], ranks)
        with open(os.path.join(out, "model.bin"), "rb") as f:
            return [m["loss"] for m in read_metrics(out + ".jsonl")], f.read()

    def assert_graphs_bitwise(self, name, *extra, ranks=1):
        off = self.train(name + "_off", "--steps", "10", "--cuda-graphs", "off", *extra, ranks=ranks)
        on = self.train(name + "_on", "--steps", "10", "--cuda-graphs", "on", *extra, ranks=ranks)
        print(f"{name}: losses {on[0][0]:.9g} ... {on[0][-1]:.9g}, graphs "
              f"{'bitwise equal' if on == off else 'DIFFERENT'}")
        self.assertEqual(on[0], off[0], name + ": losses")
        self.assertTrue(on[1] == off[1], name + ": the saved models differ")



class DeviceGraphsTest(GraphRuns):
    def test_fp32(self):
        self.assert_graphs_bitwise("fp32")

    def test_bf16(self):
        self.assert_graphs_bitwise("bf16", "--precision", "bf16")

    def test_batch_ramp_recaptures(self):
        self.assert_graphs_bitwise("ramp", "--batch-schedule", "ramp:2:2:256")

    def refused(self, *extra):
        p = run(["train", *SHAPE, "--steps", "1", "--data", os.path.join(self.data, "train_000000.bin"),
                 "--cuda-graphs", "on", *extra], check=False)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        line = one_line_error(p)
        self.assertIsNotNone(line, p.stderr)
        return line

    def test_refusals(self):
        self.assertIn("--cuda-graphs on needs --device cuda or sim", self.refused("--device", "cpu"))
        self.assertIn("--precision fp8", self.refused("--device", "sim", "--precision", "fp8"))


class DeviceGraphsLayoutsTest(GraphRuns):
    """The layouts tier's part (ctest runs each class alone)."""

    def test_data_parallel(self):
        """2 ranks: the collectives run between the graphs' launches (ZeRO 1: the update graph covers the rank's
        range, the all-gather follows it)."""
        for zero in ("0", "1"):
            self.assert_graphs_bitwise("dp2_zero" + zero, "--global-batch", "8", "--zero", zero, ranks=2)


if __name__ == "__main__":
    main_on(DEVICE)
