#!/usr/bin/python3
"""test_bench_gpu_scripts.py: the GPU measurement scripts (bench/gpu_kernels.py, bench/gpu_moe_layer.py,
bench/gpu_dense_layer.py, and bench/gpu_torch_gpt.py, the PyTorch peer of scripts/gpu-check.sh, whose --device cpu
runs a tiny model of the shape given: each row echoes it, and its FLOPs per token and tokens/s follow from it) keep
working
where no GPU is, as CI is: without a CUDA GPU each says so in one line and exits 0, writing nothing; with --smoke each
runs its whole measurement on tiny shapes on the CPU and writes rows whose derived figures follow from its timings
(a product's TFLOP/s from its shape and seconds; a MoE layer's experts' rate from its products' time; a block's
forward and its forward and backward both timed: which is shorter is not asserted, since tiny CPU shapes on a
loaded machine can time either way). The GPU-only
parts (FP8, attention backends, CUDA graphs, grouped products) are recorded as skipped with their reason."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                          timeout=300)


class GpuScriptsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "out.json")

    def tearDown(self):
        self.tmp.cleanup()

    def test_without_a_gpu_nothing_is_measured(self):
        for script in ("gpu_kernels.py", "gpu_moe_layer.py", "gpu_dense_layer.py"):
            r = run(script, "--out", self.out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("no CUDA GPU visible to torch; nothing measured", r.stdout)
            self.assertFalse(os.path.exists(self.out), f"{script} wrote {self.out} without measuring")

    def smoke(self, script, *args):
        """The JSON a --smoke run of script writes, after checking it exited 0."""
        r = run(script, "--smoke", *args, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            return json.load(f)

    def test_torch_gpt_shape_on_the_cpu(self):
        r = run("gpu_torch_gpt.py", "--steps", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no CUDA GPU visible to torch; nothing measured", r.stdout)
        shape = dict(L=2, H=2, C=32, V=100, T=16, B=3)
        args = [a for k, v in shape.items() for a in ("--" + k, str(v))]
        r = run("gpu_torch_gpt.py", "--device", "cpu", "--steps", "3", "--warmup", "1", *args, "--modes",
                "eager-fp32,eager-bf16,compile-bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([row["mode"] for row in rows], ["eager-fp32", "eager-bf16", "compile-bf16"])
        L, C, V, T = shape["L"], shape["C"], shape["V"], shape["T"]
        n = V * C + L * (12 * C * C + 13 * C) + 2 * C  # the docstring's 6 N + 12 L C T, N without wpe
        for row in rows[:2]:
            self.assertEqual({k: row[k] for k in shape}, shape)
            self.assertEqual(row["flops_per_token"], 6 * n + 12 * L * C * T)
            self.assertAlmostEqual(row["tokens_per_s"], shape["B"] * T / row["ms_per_step"] * 1e3, delta=1e-6)
            self.assertIsNone(row["peak_memory_bytes"])  # torch.cuda's figure: none on the CPU
        compiled = rows[2]  # measured, or said why not (torch without torch.compile)
        self.assertTrue("tokens_per_s" in compiled or "no torch.compile" in compiled.get("skipped", ""), compiled)

    def test_kernels_smoke(self):
        d = self.smoke("gpu_kernels.py", "--sweeps", "2")
        self.assertEqual({row["sweep"] for row in d["gemm"]}, {0, 1})
        self.assertGreater(len(d["gemm"]), 300)
        for row in d["gemm"]:
            self.assertAlmostEqual(row["tflops"], 2 * row["m"] * row["n"] * row["k"] / row["seconds"] / 1e12, delta=1e-9)
        self.assertTrue(all(s["why"] for s in d["skipped"]), d["skipped"])
        self.assertEqual(len(d["copy"]), 1)

    def test_moe_layer_smoke(self):
        rows = self.smoke("gpu_moe_layer.py")["rows"]
        self.assertEqual(len(rows), 4)
        for row in rows:
            h, f, e, n = row["hidden"], row["ffn"], row["local_experts"], row["rows_per_expert"]
            flops = 2 * 3 * e * n * (h * 2 * f + f * h)
            self.assertAlmostEqual(row["experts_tflops"], flops / row["experts_s"] / 1e12, delta=1e-12)
            self.assertGreater(row["eager_s"], 0)
            self.assertTrue("grouped_s" in row or row.get("grouped_error"), row)

    def test_dense_layer_smoke(self):
        rows = self.smoke("gpu_dense_layer.py")["rows"]
        self.assertEqual(len(rows), 13)
        for row in rows:
            if row["precision"] == "fp8":  # the CPU has no FP8 products: said, not measured
                self.assertIn("compute capability", row["skipped"])
                continue
            self.assertTrue(0 < row["fwd_s"] and 0 < row["eager_s"], row)  # timed; which is shorter is the clock's
            if row["recompute"] != "none":  # timed with its recomputation too, or the reason why not said
                self.assertTrue("eager_rc_s" in row or row.get("eager_rc_error"), row)
            d, kv = row["hidden"] // row["heads"], row["kv_heads"]
            per_token = 2 * row["hidden"] * (2 * row["hidden"] + 2 * kv * d) + 2 * row["hidden"] * row["ffn"] * (
                2 if row["kind"] == "mpt" else 3)
            self.assertEqual(row["flops"], 3 * row["micro_batch"] * row["seq"] * (per_token + 2 * row["seq"] *
                                                                                  row["hidden"]))


if __name__ == "__main__":
    unittest.main()
