"""device_runs.py: what the device tests share: the device a test runs on (its first argument, sim or cuda;
sim by default), whether that device answers, and the parameters of the checkpoints its runs wrote."""
import os
import sys
import unittest

from bstest import TempDir, launch, make_corpus, read_model, run


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
