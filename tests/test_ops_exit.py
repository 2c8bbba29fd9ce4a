"""test_ops_exit.py: how a job under mpirun ends (issue 48, item 4).

- An error every rank meets (a bad flag, a layout that does not divide, a
  bad token shard) is one line, from rank 0, without OpenMPI's MPI_ABORT
  banner, and every rank exits 2 (a usage or configuration error). mpirun's
  own notice of a non-zero exit remains unless it runs with -q; with -q the
  whole output is that one line.
- An error one rank alone meets (MPMD: rank 1 is given a bad shard) is one
  line naming rank 1, without the MPI_ABORT banner.
- `batchscale run` does not restart a job that exits 2: one attempt, one
  error line, status 2.
- A scheduler that signals every process of the job (SLURM's scancel sends
  SIGTERM to all of them, mpirun included, and mpirun then exits 1): the
  ranks finish the step and checkpoint, and `batchscale run` exits 75.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.ft_jobs import (BATCHSCALE, MPIRUN, CorpusTest, job, read_log, run, step_dir,  # noqa: E402
                             train_args)
from harness.ft_jobs import rank_pids, wait_for_lines  # noqa: E402

USAGE, PREEMPTED = 2, 75
ABORT_BANNER = "MPI_ABORT"


def error_lines(text):
    return [line for line in text.splitlines() if "error" in line.lower()]


class ExitTest(CorpusTest):
    CORPUS_BYTES = 60_000

    def bad_shard(self):
        path = self.path("bad_magic.bin")
        with open(path, "wb") as f:
            f.write(b"\x01\x02\x03\x04" * 512)
        return path

    def run_job(self, cmd, quiet=False):
        if quiet:
            cmd = cmd[:1] + ["-q"] + cmd[1:]
        p = run(cmd, check=False, timeout=120)
        return p, p.stdout + p.stderr

    def assert_one_line(self, cmd, words, status=USAGE, rank=None):
        p, out = self.run_job(cmd)
        errors = error_lines(out)
        self.assertEqual(len(errors), 1, out)
        self.assertNotIn(ABORT_BANNER, out)
        self.assertNotIn("ORTE_ERROR_LOG", out)
        self.assertEqual(p.returncode, status, out)
        prefix = f"batchscale: [rank {rank}] error: " if rank is not None else "batchscale: error: "
        self.assertTrue(errors[0].startswith(prefix), errors[0])
        for w in words:
            self.assertIn(w, errors[0])
        return p

    def test_error_every_rank_meets(self):
        args = train_args(self.data, self.path("every_ckpt"), 2)
        shard = os.path.join(self.data, "train_000000.bin")
        undivided = list(args)
        undivided[args.index("--global-batch") + 1] = "6"  # not a multiple of 2 x 2 ranks
        cases = [(args + ["--bogus-flag"], ["--bogus-flag"]),
                 (undivided, ["global batch 6", "2 data-parallel ranks", "(flags: --global-batch, --micro-batch, --dp)"]),
                 ([a if a != shard else self.bad_shard() for a in args], ["bad_magic.bin", "magic"])]
        for train, words in cases:
            with self.subTest(words=words):
                self.assert_one_line(job(2, train), words)
                p, out = self.run_job(job(2, train), quiet=True)  # mpirun's own notice silenced: one line in all
                self.assertEqual(len(out.strip().splitlines()), 1, out)
                self.assertEqual(p.returncode, USAGE, out)

    def test_error_one_rank_meets(self):
        good = train_args(self.data, self.path("one_ckpt"), 2)
        shard = os.path.join(self.data, "train_000000.bin")
        bad = [a if a != shard else self.bad_shard() for a in good]
        cmd = MPIRUN + ["-np", "1", BATCHSCALE] + good + [":", "-np", "1", BATCHSCALE] + bad
        self.assert_one_line(cmd, ["bad_magic.bin"], rank=1)

    def test_usage_error_not_restarted(self):
        log = self.path("usage_log.jsonl")
        train = train_args(self.data, self.path("usage_ckpt"), 2, extra=["--ckpt-every", "1", "--bogus-flag"])
        p = run([BATCHSCALE, "run", "--max-restarts", "3", "--restart-delay", "0", "--log", log, "--"] +
                job(2, train), check=False)
        self.assertEqual(p.returncode, USAGE, p.stderr)
        self.assertEqual([e["event"] for e in read_log(log)], ["start", "failure", "give-up"], p.stderr)
        self.assertEqual(len([line for line in p.stderr.splitlines() if line.startswith("batchscale: error:")]), 1,
                         p.stderr)
        self.assertIn("usage or configuration error", p.stderr)

    def test_every_process_signalled(self):
        ckpt, metrics, log = self.path("all_ckpt"), self.path("all.jsonl"), self.path("all_log.jsonl")
        steps = 400  # rank 0 computes 40x slower: the signal after 3 steps finds the job mid-run on any machine
        train = train_args(self.data, ckpt, steps, extra=["--ckpt-every", "10", "--quiet", "--metrics", metrics,
                                                          "--debug-inject-fault", "slow:0:40"])
        launcher = subprocess.Popen([BATCHSCALE, "run", "--restart-delay", "0", "--log", log, "--"] + job(2, train),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
        wait_for_lines(metrics, 3, launcher)
        os.killpg(launcher.pid, signal.SIGTERM)  # what scancel does: the launcher, mpirun and every rank
        _, err = launcher.communicate(timeout=120)
        self.assertEqual(launcher.returncode, PREEMPTED, err)
        events = read_log(log)
        self.assertEqual([e["event"] for e in events], ["start", "interrupted"], err)
        self.assertTrue(events[1]["preempted"], err)
        stop = events[1]["ckpt_step"]
        self.assertTrue(0 < stop < steps and os.path.isdir(step_dir(ckpt, stop)), err)
        deadline = time.monotonic() + 10
        while rank_pids(ckpt) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(rank_pids(ckpt), {}, "no rank outlives the job")


if __name__ == "__main__":
    unittest.main()
