"""test_ops_tensorboard.py: watching a run (issue 20, part 5).

`--tensorboard DIR` writes TensorBoard event files; the metrics JSON carries
per-layer gradient and weight norms and per-rank local gradient norms.

- Per-layer norms against one process: a 2-rank job under ZeRO 0 (each
  model-parallel group holds a copy) and under ZeRO 1 (every rank a shard)
  gives the same per-layer gradient norms as one process with the same
  global batch, within 1e-6 relative (the invariant: equal up to summation
  order); the layers' norms add up (in squares) to the step's grad_norm.
- The last step's per-layer weight norms equal numpy's norms of the final
  model file's tensors (llm.c layout), within 1e-6 relative (the file and the
  metrics sum the same floats in another order, in double).
- Per-rank norms (--noise-scale): one per rank, finite, positive, and the two
  ranks' differ (their data differ).
- TensorBoard's own reader (PyPI tensorboard in the test venv; skipped with
  the reason where it is missing): every record's masked CRC-32C matches, and
  each step's loss, validation loss, learning rate, global batch, grad norm,
  tokens/s, MFU, exposed communication, noise scale and per-layer and per-rank
  norms equal the metrics JSON's value rounded to float32 (TensorBoard's
  simple_value is a float).
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import BATCHSCALE, MPIRUN, read_metrics  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PYTHON = os.environ.get("BS_TEST_PYTHON", "")
L, C, T = 2, 32, 32
STEPS = 4
PEAK_GFLOPS = 50


def train(args, ranks):
    cmd = ([BATCHSCALE] if ranks == 1 else MPIRUN + ["-np", str(ranks), BATCHSCALE]) + ["train"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def layer_weight_norms(model_path):
    """Per block (embeddings, layers, final LayerNorm) of an llm.c model file, with numpy."""
    header, body = bstest.read_model(model_path)
    V, Vp = int(header[3]), int(header[7])
    sizes = [("wte", Vp * C), ("wpe", T * C)]
    per_layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    sq = np.zeros(L + 2)
    pos = 0
    for _, n in sizes:
        sq[0] += np.sum(body[pos:pos + n].astype(np.float64) ** 2)
        pos += n
    for n in per_layer:  # kind-major: every layer's tensor of one kind, then the next kind
        for layer in range(L):
            sq[1 + layer] += np.sum(body[pos:pos + n].astype(np.float64) ** 2)
            pos += n
    sq[L + 1] = np.sum(body[pos:pos + 2 * C].astype(np.float64) ** 2)
    assert pos + 2 * C == body.size and V > 0
    return np.sqrt(sq)


class TensorBoardAndNorms(bstest.CorpusTest):
    CORPUS_BYTES = 40_000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.data
        cls.base = ["--data", os.path.join(d, "train_000000.bin"), "--val-data", os.path.join(d, "val_000000.bin"),
                    "--layers", str(L), "--heads", "2", "--channels", str(C), "--seq-len", str(T),
                    "--micro-batch", "2", "--global-batch", "8", "--steps", str(STEPS), "--lr", "3e-3",
                    "--warmup", "1", "--eval-every", "2", "--val-batches", "2", "--sample-tokens", "0",
                    "--threads", "1", "--noise-scale", "--bucket-mb", "0.05", "--quiet", "--peak-gflops", str(PEAK_GFLOPS)]
        cls.runs = {}
        for name, ranks, extra in [("one", 1, []), ("zero0", 2, ["--zero", "0"]), ("zero1", 2, ["--zero", "1"])]:
            out = os.path.join(cls.dir, name)
            train(cls.base + extra + ["--out", out, "--metrics", os.path.join(out, "m.jsonl"),
                                      "--tensorboard", os.path.join(out, "tb")], ranks)
            cls.runs[name] = out

    def metrics(self, name):
        return read_metrics(os.path.join(self.runs[name], "m.jsonl"))

    def test_layer_norms_equal_one_process(self):
        one = self.metrics("one")
        for name in ("zero0", "zero1"):
            for a, b in zip(one, self.metrics(name), strict=True):
                np.testing.assert_allclose(b["grad_norm_layers"], a["grad_norm_layers"], rtol=1e-6, err_msg=name)
                np.testing.assert_allclose(b["weight_norm_layers"], a["weight_norm_layers"], rtol=1e-6, err_msg=name)
        for m in one + self.metrics("zero1"):
            self.assertEqual(len(m["grad_norm_layers"]), L + 2)
            total = np.sqrt(np.sum(np.square(m["grad_norm_layers"])))
            self.assertAlmostEqual(total / m["grad_norm"], 1.0, delta=1e-9)

    def test_weight_norms_equal_model_file(self):
        for name in self.runs:
            expected = layer_weight_norms(os.path.join(self.runs[name], "model.bin"))
            np.testing.assert_allclose(self.metrics(name)[-1]["weight_norm_layers"], expected, rtol=1e-6)

    def test_mfu(self):
        """MFU = tokens/s x FLOPs per token (6 x trained parameters + 12 L C T) / (ranks x peak)."""
        header, _ = bstest.read_model(os.path.join(self.runs["one"], "model.bin"))
        V = int(header[3])
        flops = 6 * (V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C) + 12 * L * C * T
        for name, ranks in (("one", 1), ("zero1", 2)):
            for m in self.metrics(name):
                self.assertAlmostEqual(m["mfu"] * ranks * PEAK_GFLOPS * 1e9 / (m["tokens_per_s"] * flops), 1.0,
                                       delta=1e-12)

    def test_rank_norms(self):
        self.assertEqual(len(self.metrics("one")[0]["grad_norm_ranks"]), 1)
        for m in self.metrics("zero1"):
            ranks = m["grad_norm_ranks"]
            self.assertEqual(len(ranks), 2)
            self.assertTrue(all(np.isfinite(ranks)) and min(ranks) > 0)
            self.assertNotEqual(ranks[0], ranks[1])

    def test_tensorboard_reader(self):
        if not VENV_PYTHON or not os.path.exists(VENV_PYTHON):
            self.skipTest(f"no test-venv python at '{VENV_PYTHON}' (BS_TEST_PYTHON): run scripts/test-venv.sh")
        probe = subprocess.run([VENV_PYTHON, "-c", "import tensorboard"], capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest(f"{VENV_PYTHON} has no tensorboard (offline?): run scripts/test-venv.sh")
        for name in ("one", "zero1"):
            p = subprocess.run([VENV_PYTHON, os.path.join(HERE, "tb_read.py"), os.path.join(self.runs[name], "tb")],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
            self.assertEqual(got["files"], 1)
            self.assertTrue(got["crc_ok"], "a record's masked CRC-32C does not match TensorBoard's")
            self.assertEqual(got["records"], 1 + STEPS)  # file_version, then one Event per step
            self.check_values(got["scalars"], self.metrics(name))

    def check_values(self, scalars, metrics):
        f32 = lambda x: float(np.float32(x))  # noqa: E731
        expect = {}
        for m in metrics:
            s = m["step"]
            pairs = {"train/loss": m["loss"], "train/lr": m["lr"], "train/global_batch": m["batch"],
                     "train/grad_norm": m["grad_norm"], "perf/tokens_per_s": m["tokens_per_s"], "perf/mfu": m["mfu"],
                     "perf/comm_exposed_ms": m["comm_exposed_ms"], "train/noise_scale": m.get("noise_scale")}
            if "val_loss" in m:
                pairs["val/loss"] = m["val_loss"]
            for b, v in enumerate(m["grad_norm_layers"]):
                tag = "embeddings" if b == 0 else "final_ln" if b == L + 1 else f"layer_{b - 1:02d}"
                pairs[f"grad_norm/{tag}"] = v
                pairs[f"weight_norm/{tag}"] = m["weight_norm_layers"][b]
            for k, v in enumerate(m["grad_norm_ranks"]):
                pairs[f"grad_norm_rank/{k:03d}"] = v
            for tag, v in pairs.items():
                if v is not None:
                    expect.setdefault(tag, []).append([s, f32(v)])
        self.assertEqual(sorted(list(expect) + ["perf/comm_exposed_share"]), sorted(scalars))
        share = [[m["step"], m["comm_exposed_ms"] / m["ms"]] for m in metrics]  # the same ratio, scaled by 1e3 twice
        for (s, v), (s2, w) in zip(scalars["perf/comm_exposed_share"], share, strict=True):
            self.assertEqual(s, s2)
            self.assertAlmostEqual(v, w, delta=1e-6 * max(w, 1e-30))
        self.assertEqual([s for s, _ in expect["val/loss"]], [2, 4])
        for tag, values in expect.items():
            self.assertEqual(scalars[tag], values, tag)


if __name__ == "__main__":
    unittest.main()
