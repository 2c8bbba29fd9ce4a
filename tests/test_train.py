#!/usr/bin/python3
"""test_train.py: the training job's invariants through the CLI.

- determinism: the same flags give a bitwise identical loss sequence and model;
- thread count: 1 and 2 threads give the same bits (the kernels reduce in a
  fixed order; OpenBLAS splits sgemm over M and N, never over K);
- accumulation: micro 2 x accumulation 4 equals micro 8 (one big batch)
  within 1e-5 relative over 10 steps, losses and parameters;
- resume: stopping at a checkpoint and resuming gives the uninterrupted run's
  losses and final weights bit for bit;
- help: `train --help` lists the options by section, each area's flags under
  its heading (all the --lora-* flags and --save-adapters together), and hides
  the test-only --debug-* options, which `--help-debug` lists; their old names
  are unknown options.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import TempDir, make_corpus, read_metrics, read_model, run, tiny_train_args  # noqa: E402


def losses(path):
    return [m["loss"] for m in read_metrics(path)]


class TrainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.dir = cls.tmp.__enter__()
        cls.data = make_corpus(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def train(self, name, **kw):
        metrics = os.path.join(self.dir, name + ".jsonl")
        model = os.path.join(self.dir, name + ".bin")
        run(tiny_train_args(self.data, metrics=metrics, **{"save-model": model}, **kw))
        return losses(metrics), read_model(model)[1]

    def test_same_flags_bitwise_identical(self):
        l1, p1 = self.train("det1")
        l2, p2 = self.train("det2")
        self.assertEqual(l1, l2)
        self.assertTrue(np.array_equal(p1, p2))
        self.assertLess(l1[-1], l1[0])  # it learns

    def test_thread_count_bitwise_identical(self):
        l1, p1 = self.train("thr1", threads=1)
        l2, p2 = self.train("thr2", threads=2)
        self.assertEqual(l1, l2)
        self.assertTrue(np.array_equal(p1, p2))

    def test_accumulation_equals_big_batch(self):
        l_big, p_big = self.train("big", **{"micro-batch": 8, "global-batch": 8})
        l_acc, p_acc = self.train("acc", **{"micro-batch": 2, "global-batch": 8})
        self.assertEqual(len(l_big), 10)
        for a, b in zip(l_acc, l_big):
            self.assertLess(abs(a - b) / abs(b), 1e-5)
        err = np.max(np.abs(p_acc - p_big)) / np.max(np.abs(p_big))
        self.assertLess(err, 1e-5)

    def test_resume_is_bitwise(self):
        ck = os.path.join(self.dir, "ck")
        full, p_full = self.train("full", steps=12, **{"ckpt-dir": ck, "ckpt-every": 6, "keep-last": 0})
        self.assertTrue(os.path.isdir(os.path.join(ck, "step_00000006")))
        resumed, p_res = self.train("res", steps=12, resume=os.path.join(ck, "step_00000006"),
                                    **{"ckpt-dir": os.path.join(self.dir, "ck2")})
        self.assertEqual(resumed, full[6:])
        self.assertTrue(np.array_equal(p_full, p_res))

    def test_resume_latest_picks_newest(self):
        ck = os.path.join(self.dir, "ck3")
        self.train("l1", steps=6, **{"ckpt-dir": ck, "ckpt-every": 2, "keep-last": 2})
        steps = sorted(d for d in os.listdir(ck) if d.startswith("step_"))
        self.assertEqual(steps, ["step_00000004", "step_00000006"])  # keep-last 2
        resumed, _ = self.train("l2", steps=8, resume="latest", **{"ckpt-dir": ck})
        self.assertEqual(len(resumed), 2)  # steps 7 and 8


def sections(text):
    """{heading: [flag, ...]} of a --help text: the lines before the first heading under "", those after a
    section's blank line (--help, --help-debug) under "end"."""
    out, heading = {"": [], "end": []}, ""
    for line in text.splitlines():
        if not line and heading:
            heading = "end"
        elif line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            out[heading] = []
        elif line.startswith("  --"):
            out[heading].append(line.split()[0])
    return out


class HelpTest(unittest.TestCase):
    DEBUG = ["--debug-inject-fault", "--debug-outlier-scale", "--debug-skip-pipe-wait", "--debug-moe-skew"]

    def test_sections(self):
        s = sections(run(["train", "--help"]).stdout)
        for heading in ("Model", "Precision", "Batch size", "Optimizer and schedule", "Data", "Parallelism",
                        "Checkpoints and output", "LoRA fine-tuning", "Mixture of Experts", "DiLoCo / FedAvg "
                        "(low-communication training)", "Noise scale and goodput"):
            self.assertIn(heading, s)
        self.assertEqual(s[""], [], "every option stands under a section heading")
        self.assertEqual(s["end"], ["--help", "--help-debug"])
        lora = s["LoRA fine-tuning"]
        for flag in ("--lora-rank", "--lora-alpha", "--lora-init", "--lora-dropout", "--save-adapters", "--base-weights"):
            self.assertIn(flag, lora)
        self.assertIn("--experts", s["Mixture of Experts"])
        self.assertIn("--tp", s["Parallelism"])
        listed = [flag for flags in s.values() for flag in flags]
        self.assertEqual(len(listed), len(set(listed)), "an option listed twice")
        for flag in self.DEBUG + ["--inject-fault", "--outlier-scale", "--moe-skew"]:
            self.assertNotIn(flag, listed)

    def test_debug_help(self):
        s = sections(run(["train", "--help-debug"]).stdout)
        debug = [flags for heading, flags in s.items() if heading.startswith("Debugging")]
        self.assertEqual(debug, [self.DEBUG])
        self.assertIn("--lora-rank", s["LoRA fine-tuning"])

    def test_old_test_flags_unknown(self):
        for flag in ("--inject-fault", "--outlier-scale", "--moe-skew"):
            p = run(["train", flag, "1"], check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr.strip().splitlines(), [f"batchscale: error: unknown option '{flag}' (see --help)"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
