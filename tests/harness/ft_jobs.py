"""ft_jobs.py: helpers of the fault-tolerance and operations tests (test_ft_*.py, test_ops_*.py):
a tiny training job's command line, running it (under mpirun for several
ranks), reading a checkpoint with numpy straight from its manifest and
rank files, independently of the engine's reader, and finding a running
job's ranks and waiting on its log."""
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bstest  # noqa: E402
from bstest import BATCHSCALE, MPIRUN, read_metrics  # noqa: E402,F401

MODEL = ["--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32"]


class CorpusTest(bstest.CorpusTest):
    CORPUS_BYTES = 100_000
RANK_HEADER_BYTES = 64
STATE_ARRAYS = 2


def train_args(data, ckpt_dir, steps, micro=2, global_batch=8, extra=()):
    """`train` and its flags for the tiny job (no program name)."""
    return (["train", "--data", os.path.join(data, "train_000000.bin")] + MODEL +
            ["--micro-batch", str(micro), "--global-batch", str(global_batch), "--steps", str(steps),
             "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1",
             "--bucket-mb", "0.05", "--ckpt-dir", ckpt_dir, "--comm-timeout", "20"] + list(extra))


def job(ranks, args):
    """The command that runs `batchscale ARGS` on `ranks` processes."""
    return MPIRUN + ["-np", str(ranks), BATCHSCALE] + args if ranks > 1 else [BATCHSCALE] + args


def run(cmd, env=None, check=True, timeout=300):
    full_env = dict(os.environ, OMP_NUM_THREADS="1")
    full_env.pop("BATCHSCALE_CKPT_FAULT", None)
    if env:
        full_env.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def step_dir(ckpt_dir, step):
    return os.path.join(ckpt_dir, f"step_{step:08d}")


def read_checkpoint(directory):
    """(manifest, params, state) of a checkpoint of the whole model (no tensor
    or pipeline split), from its files: the flat parameter layout and the
    optimizer's arrays, assembled from the ranges."""
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    m = manifest["model"]
    C, L, T, V = m["channels"], m["layers"], m["seq_len"], m["vocab"]
    Vp = (V + 127) // 128 * 128
    total = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    params = np.full(total, np.nan, dtype=np.float32)
    state = np.full((STATE_ARRAYS, total), np.nan, dtype=np.float32)
    for entry in manifest["files"]:
        assert entry.get("shard", 0) == 0, "a tensor- or pipeline-parallel checkpoint: ranges are per shard"
        with open(os.path.join(directory, entry["name"]), "rb") as f:
            raw = f.read()
        assert raw[:8] == b"BSCKPT01", entry["name"]
        offset, count, arrays = np.frombuffer(raw[8:32], dtype=np.uint64)
        assert (offset, count, arrays) == (entry["offset"], entry["count"], STATE_ARRAYS), entry
        body = np.frombuffer(raw[RANK_HEADER_BYTES:], dtype=np.float32).reshape(1 + STATE_ARRAYS, count)
        params[offset:offset + count] = body[0]
        state[:, offset:offset + count] = body[1:]
    assert not np.isnan(params).any() and not np.isnan(state).any(), f"{directory}: files leave a gap"
    return manifest, params, state


def losses_by_step(metrics_path):
    """Step -> loss; after a restart the steps redone since the checkpoint
    appear again in the metrics, and the last line of a step counts."""
    return {m["step"]: m["loss"] for m in read_metrics(metrics_path)}


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def rank_pids(marker):
    """Rank number -> pid of the live `batchscale train` processes whose command line holds marker."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if marker.encode() in words and b"train" in words and not words[0].endswith(b"mpirun"):
            out[int(env.get(b"OMPI_COMM_WORLD_RANK", b"0"))] = int(pid)
    return out


def wait_for_lines(path, n, proc, limit_s=60):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(path) as f:
                if len(f.read().splitlines()) >= n:
                    return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"{path} never reached {n} lines")
