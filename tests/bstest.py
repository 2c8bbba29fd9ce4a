"""bstest.py: the Python tests' harness: run batchscale (one process or under mpirun; independent runs side by
side on the cores ctest gave the test), make a small corpus, read metrics and llm.c model files, the named checks
(Checks), a refusal's one line, a test in parts and the skip code. Shared helpers of one area live in
tests/harness/; no test imports another."""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np

BATCHSCALE = os.environ.get("BATCHSCALE", "build/batchscale")
SKIP = 77  # a test that cannot run here exits with this after a line saying why: CTest's SKIP_RETURN_CODE
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

WORDS = ("the and of to in that he shall unto for his a lord they be is him not them it with all thou "
         "thy was god which my me said but ye their have will").split()


def process(cmd, env=None, timeout=600):
    """Runs cmd (batchscale, alone or under mpirun) with one OpenMP thread per process (unless `env` says
    otherwise) and its own OpenMPI session directory: every process started without mpirun (an isolated
    singleton) uses the same one under the base, and two at once, from runs side by side (concurrently, or
    another test), could remove it under each other ("A call to mkdir was unable to create the desired
    directory", seen beside other tests)."""
    with tempfile.TemporaryDirectory(prefix="bs-ompi-") as session:
        full_env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_orte_tmpdir_base=session)
        full_env.update(env or {})
        return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)


def run(args, check=True, env=None, timeout=600):
    p = process([BATCHSCALE] + args, env, timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"batchscale {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def make_corpus(directory, nbytes=200_000, seed=0):
    """A word-salad text corpus prepared into byte-level shards; returns the data dir."""
    rng = random.Random(seed)
    text = []
    size = 0
    while size < nbytes:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + ".\n"
        text.append(line)
        size += len(line)
    src = os.path.join(directory, "corpus.txt")
    with open(src, "w") as f:
        f.write("".join(text))
    out = os.path.join(directory, "data")
    run(["prepare", "--in", src, "--out", out])
    return out


def batch_shards(data, out, order, seq_len, steps, per_shard=1):
    """The first `steps` global batches of len(order) x per_shard sequences as shards of per_shard sequences each
    (random windows of data/train_000000.bin; within a shard a sequence's last target is the next one's first
    token), each batch's shards in `order`: read with the returned flags (--data-order sequential), a reordering
    permutes files and nothing else. Returns the flags, to go after a run's own --data (the last one counts)."""
    raw = np.fromfile(os.path.join(data, "train_000000.bin"), dtype=np.uint8)
    header, tokens = raw[:1024].view(np.int32).copy(), raw[1024:].view(np.uint16)
    T, slots = seq_len, len(order)
    windows = np.random.default_rng(0).choice((tokens.size - 1) // T, steps * slots * per_shard, replace=False)
    os.makedirs(out)
    for step in range(steps):
        for slot, shard in enumerate(order):
            starts = windows[per_shard * (step * slots + shard):][:per_shard]
            chunk = np.concatenate([tokens[a * T:a * T + T] for a in starts[:-1]] +
                                   [tokens[starts[-1] * T:starts[-1] * T + T + 1]])
            header[2] = chunk.size
            with open(os.path.join(out, f"{step * slots + slot:05d}.bin"), "wb") as f:
                f.write(header.tobytes() + chunk.tobytes())
    return ["--data", out, "--data-order", "sequential"]


def read_manifest(ckpt_dir, step):
    """The manifest of checkpoint `step` under ckpt_dir."""
    with open(os.path.join(ckpt_dir, f"step_{step:08d}", "manifest.json")) as f:
        return json.load(f)


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def read_model(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        body = np.frombuffer(f.read(), dtype=np.float32)
    return header, body


def tiny_train_args(data_dir, steps=10, **overrides):
    args = {
        "layers": 2, "heads": 2, "channels": 32, "seq-len": 32, "micro-batch": 4, "steps": steps,
        "lr": 3e-3, "warmup": 2, "eval-every": 0, "sample-tokens": 0, "threads": 1, "quiet": None,
        "data": os.path.join(data_dir, "train_000000.bin"),
    }
    args.update(overrides)
    out = ["train"]
    for k, v in args.items():
        if v is False:
            continue
        out.append("--" + k)
        if v is not None:
            out.append(str(v))
    return out


class TempDir:
    def __enter__(self):
        self.t = tempfile.TemporaryDirectory()
        return self.t.name

    def __exit__(self, *exc):
        self.t.cleanup()


class CorpusTest(unittest.TestCase):
    """A test class with a temporary directory and a word-salad corpus in it."""
    CORPUS_BYTES = 200_000

    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.dir = cls.tmp.__enter__()
        cls.data = cls.make_data(cls.dir)

    @classmethod
    def make_data(cls, directory):
        return make_corpus(directory, nbytes=cls.CORPUS_BYTES)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def path(self, name):
        return os.path.join(self.dir, name)


class Checks:
    """A test's named checks, the Python tests' one check API besides unittest's asserts: check(ok, what) prints one
    ok/FAIL line (with print_ok=False only the FAIL lines, for checks run by the thousand); failed lists the
    failures, and the test exits non-zero when it is not empty."""

    def __init__(self, print_ok=True):
        self.failed = []
        self.print_ok = print_ok

    def __call__(self, ok, what):
        if self.print_ok or not ok:
            print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failed.append(what)


def one_line_error(p, ranks=1):
    """The one line a refused command wrote to stderr, or None if it wrote none or more than one. A single
    process must write exactly one line. Under mpirun an error every rank finds is printed once, by rank 0
    ("batchscale: error: ..."), and one that a single rank finds by that rank alone ("batchscale: [rank R]
    error: ..."): exactly one line of ours in either case (returned without the rank), the launcher's own
    lines aside."""
    lines = p.stderr.strip().splitlines()
    if ranks == 1:
        return lines[0] if len(lines) == 1 else None
    ours = [x for x in lines if x.startswith("batchscale")]
    if len(ours) != 1:
        return None
    return re.sub(r"^batchscale: \[rank \d+\] ", "batchscale: ", ours[0])


def rel(a, b):
    """max |a - b| / max |b|: how far parameters a are from the reference b."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


def layout_run(data, prefix, shape, ranks=1, extra=(), steps=10, micro=2, check=True):
    """The layout tests' training job: `shape` (model flags) on the corpus in `data`, global batch 8, 1 thread per
    rank, on `ranks` processes. Returns (metrics lines, final parameters, stdout), or with check=False the
    CompletedProcess."""
    metrics, model = prefix + ".jsonl", prefix + ".bin"
    args = [BATCHSCALE, "train", "--data", os.path.join(data, "train_000000.bin")] + list(shape) + [
        "--micro-batch", str(micro), "--global-batch", "8", "--steps", str(steps), "--lr", "3e-3", "--warmup", "2",
        "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--comm-timeout", "60", "--metrics", metrics,
        "--save-model", model] + list(extra)
    cmd = MPIRUN + ["-np", str(ranks)] + args if ranks > 1 else args
    p = process(cmd)
    if not check:
        return p
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return read_metrics(metrics), read_model(model)[1], p.stdout


def launch(args, ranks, check=True):
    """batchscale ARGS (a list starting with the command) on `ranks` processes (under mpirun if more than one);
    raises with the output if it fails (with check=False the caller looks at the CompletedProcess)."""
    cmd = [BATCHSCALE] + list(args)
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    p = process(cmd)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return p


def slots():
    """How many processes a test may keep busy at once: BS_TEST_SLOTS, the cores ctest gave it
    (tests/harness/ctest_slots.cmake); 1 outside ctest."""
    return max(1, int(os.environ.get("BS_TEST_SLOTS", "1")))


def concurrently(jobs):
    """Calls each of `jobs` (functions of no argument that run one batchscale process each, independent of one
    another: their own files), up to slots() at once; returns their results in the jobs' order, or raises the
    first job's exception once all have ended."""
    with ThreadPoolExecutor(max_workers=slots()) as pool:
        futures = [pool.submit(job) for job in jobs]
    return [f.result() for f in futures]


def kjv_corpus(directory):
    """The shipped corpus: the King James Bible from Debian's bible-kjv, prepared byte-level; returns the data dir.
    Under CTest it is prepared once per run (the fixture data_kjv, `bstest.py kjv DIR`) and found in $BS_KJV_DATA;
    the tests only read it."""
    shared = os.environ.get("BS_KJV_DATA")
    if shared and os.path.isfile(os.path.join(shared, "train_000000.bin")):
        return shared
    text = os.path.join(directory, "kjv.txt")
    with open(text, "w") as f:
        subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], stdout=f, check=True)
    out = os.path.join(directory, "kjv")
    run(["prepare", "--in", text, "--out", out])
    return out


def probe_inputs():
    """Float32 probes of a format's rounding: every bf16 high half with 16 low halves (edges and random)."""
    rng = np.random.default_rng(1)
    lows = np.array([0x0000, 0x0001, 0x1000, 0x0fff, 0x1001, 0xffff] + list(rng.integers(0, 65536, 10)), np.uint32)
    highs = np.arange(65536, dtype=np.uint32)
    return (highs[:, None] << 16 | lows[None, :]).ravel().view(np.float32)


def run_parts(usage, parts, failures):
    """The main of a test in parts: sys.argv[2] names the part (a function of a scratch directory returning 0 or
    SKIP); exits 1 when `failures` is not empty, else with the part's code."""
    if len(sys.argv) != 3 or sys.argv[2] not in parts:
        sys.exit(usage)
    with tempfile.TemporaryDirectory() as tmp:
        code = parts[sys.argv[2]](tmp)
    if failures:
        print("FAILED", f"{len(failures)} failure(s)")
        sys.exit(1)
    print("skipped (see SKIP above)" if code == SKIP else "ok")
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] != ["kjv"] or len(sys.argv) != 3:
        sys.exit("usage: bstest.py kjv DIR   (prepares the KJV corpus into DIR/kjv; BATCHSCALE in the environment)")
    os.makedirs(sys.argv[2], exist_ok=True)
    print(kjv_corpus(sys.argv[2]))
