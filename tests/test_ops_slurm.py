"""test_ops_slurm.py: SLURM for real (issue 20, part 4).

A one-node SLURM cluster (tests/slurm/cluster.py: Debian's munged, slurmctld
and slurmd) runs examples/train.sbatch, the script the README shows: it
starts `batchscale run -- mpirun -np 2 batchscale train ...` in the
allocation. Mid-run, `scancel --batch --signal=USR1 JOB` signals the batch
script (what --signal=B:USR1@120 does before a time limit): the ranks finish
their step, checkpoint and exit 75, and the script requeues the job. SLURM
holds a requeued job until its old job credential has expired (slurmd
refuses to start a job id whose credential it revoked: cred_expire, 120 s
by default; the test cluster sets 5 s and a 1 s scheduling interval). The
requeued job runs the script again, `batchscale run`
finds the checkpoint and resumes; the job completes with Restarts=1.

Asserted: the job's log has the preemption line and the resumed launch; the
first run stopped before the end and the requeued one resumed from that
step's checkpoint; the final parameters and optimizer state and every step's
loss equal an uninterrupted 2-rank run's bitwise. Where SLURM cannot run
(not root, packages missing, daemons that do not come up) it exits 77 with
the reason.
"""
import os
import re
import subprocess
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "slurm"))
from bstest import SKIP  # noqa: E402
from cluster import SlurmCluster, Unavailable, wait_until  # noqa: E402
from harness.ft_jobs import (BATCHSCALE, MPIRUN, CorpusTest, job, losses_by_step, read_checkpoint, run,  # noqa: E402
                             step_dir)

EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "train.sbatch")
STEPS, EVERY = 24, 10
SLOW = "--debug-inject-fault slow:0:40"  # rank 0 sleeps 39x its compute: steps long enough to signal into


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def train_flags(data, metrics):
    return (f"--data {os.path.join(data, 'train_000000.bin')} --layers 2 --heads 2 --channels 32 --seq-len 32 "
            f"--micro-batch 2 --global-batch 8 --steps {STEPS} --lr 3e-3 --warmup 2 --eval-every 0 "
            f"--sample-tokens 0 --threads 1 --bucket-mb 0.05 --comm-timeout 20 --quiet --metrics {metrics}")


class Slurm(CorpusTest):
    CORPUS_BYTES = 60_000

    cluster = None  # set by main()

    def test_preempted_job_requeues_and_resumes_bitwise(self):
        self.run_job(self.cluster)

    def run_job(self, cluster):
        ref, out = self.path("ref"), self.path("run")
        ref_metrics, metrics = self.path("ref.jsonl"), os.path.join(out, "m.jsonl")
        run(job(2, ["train"] + train_flags(self.data, ref_metrics).split() + ["--out", ref, "--ckpt-every", str(EVERY)]))
        env = dict(cluster.env, BATCHSCALE=BATCHSCALE, MPIRUN=" ".join(MPIRUN), RUN=out, CKPT_EVERY=str(EVERY),
                   TRAIN_ARGS=train_flags(self.data, metrics) + " " + SLOW, OMP_NUM_THREADS="1")
        log = self.path("job.out")
        sub = subprocess.run(["sbatch", "--parsable", "-o", log, EXAMPLE], capture_output=True, text=True, env=env,
                             timeout=30)
        self.assertEqual(sub.returncode, 0, sub.stderr)
        job_id = sub.stdout.strip().split(";")[0]
        wait_until(lambda: len(read_text(metrics).splitlines()) >= 5, 60, "the job wrote no 5 steps")
        sig = subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True, text=True,
                             env=env, timeout=10)
        self.assertEqual(sig.returncode, 0, sig.stderr)
        states = []  # the job's (state, reason, restarts) as polled, for a failure's message

        def job_state():
            j = cluster.job(job_id)
            now = (j.get("JobState"), j.get("Reason"), j.get("Restarts"))
            if not states or states[-1] != now:
                states.append(now)
            return j

        def wait_for(predicate, limit_s, what):
            try:
                wait_until(predicate, limit_s, what)
            except TimeoutError as e:
                raise AssertionError(f"{e}; job states {states}; slurmd: {cluster.log_tail('slurmd.log', 12)}; "
                                     f"slurmctld: {cluster.log_tail('slurmctld.log', 8)}; log:\n{read_text(log)}") from e

        # requeued: back to PENDING with one restart (passing through states such as REQUEUED or COMPLETING)
        wait_for(lambda: job_state().get("Restarts") == "1" and states[-1][0] == "PENDING", 60, "not requeued")
        second_run_ended = lambda: re.search(r"restart 1\n(.*\n)*train.sbatch: batchscale run exited", read_text(log))  # noqa: E731
        wait_for(lambda: job_state() and second_run_ended(), 120, "the requeued job did not run to its end")
        wait_for(lambda: job_state().get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 30, "no end")
        state = cluster.job(job_id)
        with open(log) as f:
            text = f.read()
        self.assertEqual(state["JobState"], "COMPLETED", text)
        self.assertIn("preempted: SIGUSR1; stopped after step", text)
        self.assertIn("restart 1", text)
        self.assertRegex(text, r"start: 2 ranks, checkpoint step \d+")
        stopped = int(re.search(r"stopped after step (\d+)", text).group(1))
        self.assertLess(stopped, STEPS, "the signal came before the end")
        self.assertIn(f"start: 2 ranks, checkpoint step {stopped}", text, "the requeued job resumed from it")
        _, ref_params, ref_state = read_checkpoint(step_dir(os.path.join(ref, "ckpt"), STEPS))
        _, params, state_arrays = read_checkpoint(step_dir(os.path.join(out, "ckpt"), STEPS))
        np.testing.assert_array_equal(params, ref_params)
        np.testing.assert_array_equal(state_arrays, ref_state)
        self.assertEqual(losses_by_step(metrics), losses_by_step(ref_metrics))
        print(f"slurm job {job_id}: preempted after step {stopped}, requeued (Restarts=1), resumed, completed "
              f"bitwise equal to the uninterrupted run")


def main():
    try:
        cluster = SlurmCluster().__enter__()
    except Unavailable as e:
        print(f"SKIP: SLURM cannot run here: {e}")
        return SKIP
    try:
        Slurm.cluster = cluster
        result = unittest.main(exit=False).result
    finally:
        cluster.__exit__(None, None, None)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
