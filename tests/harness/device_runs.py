"""device_runs.py: what the device tests share: the device a test runs on (its first argument, sim or cuda;
sim by default), whether that device answers, how far a device layout's run is from one CPU process, and
the parameters of the checkpoints its runs wrote."""
import os
import sys
import unittest

import numpy as np

from bstest import TempDir, launch, make_corpus, one_line_error, read_model, rel, run

EQUIVALENCE_KEYS = ("loss", "grad_norm", "grad_norm_layers", "weight_norm_layers")


def distance(got, oracle):
    """The worst relative gap of run `got` from run `oracle` (each (metrics lines, final parameters, ...)): per
    metric in EQUIVALENCE_KEYS over every step, and the final parameters (max |a-b| / max |b|)."""
    if len(got[0]) != len(oracle[0]):
        raise AssertionError(f"{len(got[0])} metrics lines, the reference has {len(oracle[0])}")
    worst = {}
    for key in EQUIVALENCE_KEYS:
        a, b = (np.array([m[key] for m in lines], np.float64) for lines in (got[0], oracle[0]))
        worst[key] = float(np.max(np.abs(a - b) / np.abs(b)))
    worst["parameters"] = rel(got[1], oracle[1])
    return worst


def assert_equivalent(test, got, oracle, what, tolerance, parameters=None):
    """Every gap of distance(got, oracle) within tolerance, the parameters' within `parameters` if given (printed
    first: the figures the reports quote)."""
    worst = distance(got, oracle)
    print(f"{what}: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + " from one CPU process")
    for key, value in worst.items():
        bound = parameters if key == "parameters" and parameters is not None else tolerance
        test.assertLessEqual(value, bound, f"{what}: {key}")


def device_from_argv():
    """The device named by the command line's first argument (removed from sys.argv), else sim."""
    return sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1] in ("sim", "cuda") else "sim"


def device_answers(device):
    """None if `device` opens, else why not (a tiny run's one line)."""
    if device == "sim":
        return None
    with TempDir() as d:
        data = make_corpus(d, nbytes=20_000)
        p = run(["train", "--device", "cuda", "--steps", "1", "--layers", "1", "--channels", "32", "--heads", "1",
                 "--seq-len", "16", "--micro-batch", "1", "--quiet", "--sample-tokens", "0", "--eval-every", "0",
                 "--data", os.path.join(data, "train_000000.bin")], check=False)
        return None if p.returncode == 0 else p.stderr.strip()


def main_on(device):
    """A device test's main: unittest's where `device` answers; else a skip (exit 77) with the reason, or a
    failure under BS_REQUIRE_GPU=1 (the GPU check, where a skip would hide a missing GPU)."""
    why = device_answers(device)
    if why:
        required = os.environ.get("BS_REQUIRE_GPU") == "1"
        print(("FAIL (BS_REQUIRE_GPU=1): " if required else "skipped: ") + why)
        sys.exit(1 if required else 77)
    unittest.main()


def checkpoint_params(test, runs, step):
    """{name: the parameters of checkpoint `step` of each run directory in runs {name: directory}}, through `ckpt
    export` into the test's temporary directory (test.path)."""
    params = {}
    for name, d in runs.items():
        path = test.path(f"{name}_ck{step}.bin")
        launch(["ckpt", "export", "--out", path, os.path.join(d, "ckpt", f"step_{step:08d}")], 1)
        params[name] = read_model(path)[1]
    return params


def assert_refused(test, args, ranks, says):
    """`batchscale` args on `ranks` ranks exits non-zero with one line of ours containing `says`."""
    p = launch(args, ranks, check=False)
    test.assertNotEqual(p.returncode, 0)
    line = one_line_error(p, ranks)
    test.assertIsNotNone(line, p.stderr)
    test.assertIn(says, line)


def assert_resumes_on_one_process(test, shape, out, step=5):
    """Checkpoint `step` of the run saved under `out` (model flags `shape`, the layout tests' batch) read by one CPU
    process, which saves it at once (a resume into another layout saves): the same parameters bit for bit."""
    copy = out + "_cpu_copy"
    launch(["train", "--data", os.path.join(test.data, "train_000000.bin"), *shape, "--micro-batch", "2",
            "--global-batch", "8", "--steps", str(step), "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
            "--sample-tokens", "0", "--threads", "1", "--quiet", "--out", copy,
            "--resume", os.path.join(out, "ckpt", f"step_{step:08d}")], 1)
    params = checkpoint_params(test, {"device": out, "cpu": copy}, step)
    test.assertTrue(np.array_equal(params["cpu"], params["device"]), f"{out}: one CPU process read other parameters")
