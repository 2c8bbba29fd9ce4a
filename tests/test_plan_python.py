#!/usr/bin/python3
"""test_plan_python.py: the Python package (python/, issue 47) built and imported in a fresh virtual environment.

`pip install ./python` (from a copy of python/ and src/ in a temporary directory, so the checkout stays clean)
builds the planner as a native library; the module's answers must equal `batchscale plan --json`'s for a dozen
configurations (dense and MoE, context parallelism, a mixed fleet, a stack preset, a search, a batch schedule,
cost ranking, a scaling sweep), apart from the search's own wall-clock seconds; a bad argument raises ValueError
with the planner's one-line reason; read_metrics reads a run's metrics.jsonl; examples/plan_notebook.py runs. Skips (exit 77) with its reason
where venv or pip cannot be had (no network for the build's setuptools and no local setuptools and wheel).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCHSCALE = os.environ.get("BATCHSCALE", os.path.join(ROOT, "build", "batchscale"))

CONFIGS = [
    dict(model="llama3-8b", hardware="h100-sxm", gpus=8),
    dict(model="llama3-70b", hardware="h100-sxm", gpus=512, tp=4, pp=4, stack="nemo"),
    dict(model="gpt3-175b", hardware="a100-80g", gpus=1024, tp=8, pp=8, recompute="selective"),
    dict(model="mixtral-8x7b", gpus=64, ep=8, search=True, top=3),
    dict(model="llama3-405b", gpus=2048, cp=4, search=True, top=2),
    dict(model="llama3-70b", hardware="a100-80g:512,h100-sxm:512", usd_per_gpu_hour=[1.2, 2.5]),
    dict(model="gpt2-124m", gpus=8, stack="llm-foundry"),
    dict(layers=24, hidden=2048, heads=16, seq_len=4096, activation="swiglu", gpus=16, stack="torchtitan",
         precision="fp8", search=True, top=2),
    dict(model="llama3-70b", gpus=256, rank_by="cost", usd_per_gpu_hour=2.5, top=2),
    dict(layers=27, hidden=2048, heads=16, kv_heads=16, ffn=1408, vocab=102400, seq_len=4096, activation="swiglu",
         experts=64, top_k=6, shared_experts=2, gpus=128, ep=16, stack="megatron-core@0.13", search=True, top=2),
    dict(model="llama3-8b", gpus=64, batch_schedule="0:4194304,100G:8388608"),
    dict(model="llama3-8b", gpus=64, scaling=True, scaling_from=8, scaling_to=512),
]


def flags(options):
    """The command line of a configuration, as the package documents its keyword arguments."""
    out = []
    for k, v in options.items():
        out.append("--" + k.replace("_", "-"))
        if v is not True:
            out.append(",".join(map(str, v)) if isinstance(v, list) else str(v))
    return out


def cli_json(options):
    p = subprocess.run([BATCHSCALE, "plan", *flags(options), "--json"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"plan {' '.join(flags(options))}: {p.stderr}")
    return json.loads(p.stdout)


def without_timing(record):
    """The record less the search's wall-clock seconds (the one field that is not the planner's arithmetic)."""
    record = json.loads(json.dumps(record))
    record.get("search", {}).pop("seconds", None)
    return record


INNER = r"""
import json, sys, batchscale
configs = json.loads(sys.argv[1])
out = {"plans": [batchscale.plan(**c) for c in configs]}
out["search"] = batchscale.search(model="llama3-8b", gpus=64, top=4)
out["scaling"] = batchscale.scaling(model="llama3-8b", gpus=64, scaling_from=8, scaling_to=256)
try:
    batchscale.plan(model="llama3-8b", gpus=8, tp=3)
    out["error"] = None
except ValueError as e:
    out["error"] = str(e)
metrics = batchscale.read_metrics(sys.argv[2])
out["metrics"] = metrics.to_dict("records") if hasattr(metrics, "to_dict") else metrics
try:
    batchscale.read_metrics(sys.argv[3])
    out["bad_metrics"] = None
except ValueError as e:
    out["bad_metrics"] = str(e)
print(json.dumps(out))
"""


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(77)


class PythonPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bs_python_")
        venv = os.path.join(cls.tmp, "venv")
        p = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if p.returncode != 0:
            skip(f"python3 -m venv is not available here ({p.stderr.strip().splitlines()[-1:]})")
        cls.python = os.path.join(venv, "bin", "python")
        tree = os.path.join(cls.tmp, "tree")
        shutil.copytree(os.path.join(ROOT, "python"), os.path.join(tree, "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "_planner*"))
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(tree, "src"))
        pip = [cls.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--retries", "1",
               "--timeout", "20"]
        p = subprocess.run(pip + [os.path.join(tree, "python")], capture_output=True, text=True, timeout=1200)
        if p.returncode != 0 and ("setuptools" in p.stderr and "satisf" in p.stderr or "Network" in p.stderr
                                  or "connection" in p.stderr.lower()):
            local = subprocess.run([cls.python, "-c", "import setuptools, wheel"], capture_output=True)
            if local.returncode != 0:
                skip("pip cannot fetch setuptools for the build (offline?) and the fresh venv has no setuptools and "
                     "wheel to build without isolation")
            p = subprocess.run(pip + ["--no-build-isolation", os.path.join(tree, "python")], capture_output=True,
                               text=True, timeout=1200)
        if p.returncode != 0:
            raise AssertionError(f"pip install ./python failed:\n{p.stdout}\n{p.stderr}")
        metrics = os.path.join(cls.tmp, "run")
        os.makedirs(metrics)
        cls.steps = [{"step": 1, "loss": 5.5, "tokens": 4096}, {"step": 2, "loss": 5.25, "tokens": 8192}]
        with open(os.path.join(metrics, "metrics.jsonl"), "w") as f:
            f.write("".join(json.dumps(s) + "\n" for s in cls.steps))
        bad = os.path.join(cls.tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"step": 1}\n{"step": \n')
        p = subprocess.run([cls.python, "-c", INNER, json.dumps(CONFIGS), metrics, bad], capture_output=True,
                           text=True, timeout=1200, cwd=cls.tmp)
        if p.returncode != 0:
            raise AssertionError(f"the package in the fresh venv failed:\n{p.stderr}")
        cls.got = json.loads(p.stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_answers_equal_the_cli(self):
        for options, got in zip(CONFIGS, self.got["plans"]):
            with self.subTest(config=" ".join(flags(options))):
                self.assertEqual(without_timing(got), without_timing(cli_json(options)))

    def test_search_and_scaling(self):
        cli = cli_json(dict(model="llama3-8b", gpus=64, top=4, search=True))
        self.assertEqual(self.got["search"], cli["search"]["layouts"])
        self.assertEqual(len(self.got["search"]), 4)
        cli = cli_json(dict(model="llama3-8b", gpus=64, scaling=True, scaling_from=8, scaling_to=256))
        self.assertEqual(self.got["scaling"], cli["scaling"]["points"])
        self.assertEqual([p["gpus"] for p in self.got["scaling"]], [8, 16, 32, 64, 128, 256])

    def test_bad_argument_raises_the_planners_reason(self):
        p = subprocess.run([BATCHSCALE, "plan", "--model", "llama3-8b", "--gpus", "8", "--tp", "3"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        line = p.stderr.strip()
        self.assertEqual(len(line.splitlines()), 1, p.stderr)
        self.assertEqual("batchscale: error: " + self.got["error"], line)

    def test_example_script_runs(self):
        """examples/plan_notebook.py: its tables (and charts where matplotlib is installed) from the package."""
        p = subprocess.run([self.python, os.path.join(ROOT, "examples", "plan_notebook.py"), "--out-dir", self.tmp],
                           capture_output=True, text=True, timeout=600, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("GPUs   tokens/s/GPU  efficiency", p.stdout)
        self.assertRegex(p.stdout, r"\n 16384 .*\(frontier\)\n")
        self.assertTrue("matplotlib is not installed" in p.stdout or os.path.exists(os.path.join(self.tmp, "plan_frontier.png")))

    def test_read_metrics(self):
        self.assertEqual(self.got["metrics"], self.steps)
        self.assertRegex(self.got["bad_metrics"], r"bad\.jsonl:2: not a JSON record")


if __name__ == "__main__":
    unittest.main()
