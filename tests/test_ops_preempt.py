"""test_ops_preempt.py: preemption (issue 20, part 3).

A scheduler warns a job before it kills it (SLURM: SIGTERM, or SIGUSR1 with
--signal=USR1@120; Kubernetes: SIGTERM, then SIGKILL after the grace
period). The trainer finishes the step it is in on every rank, writes a
checkpoint, prints one line and exits 75; `batchscale run` resumes from it.

- SIGTERM to ONE rank of a 2-rank job under `batchscale run`: both ranks stop
  after the same step (the flag travels in the step's all-gather), the
  checkpoint is that step's (not a --ckpt-every multiple), the launcher logs
  "preempted" and resumes, and the final parameters, optimizer state and
  every step's loss equal an uninterrupted run's bitwise.
- SIGTERM to the launcher itself (what a scheduler does to the batch
  script's process): it passes the request on, the job checkpoints, the
  launcher exits 75 without restarting; the same command run again (a
  requeued job) resumes from that checkpoint and ends bitwise equal.
- One process: SIGUSR1 stops it the same way; two SIGINTs end it at once
  (status 130) without a new checkpoint.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.ft_jobs import (BATCHSCALE, CorpusTest, job, losses_by_step, rank_pids, read_checkpoint,  # noqa: E402
                             read_log, run, step_dir, train_args, wait_for_lines)

STEPS, EVERY = 24, 10
SLOW = ["--debug-inject-fault", "slow:0:40"]  # rank 0 sleeps 39x its compute: a step lasts long enough to signal into
PREEMPTED = 75


class Preemption(CorpusTest):
    CORPUS_BYTES = 60_000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ref_metrics = os.path.join(cls.dir, "ref.jsonl")
        cls.ref_ckpt = os.path.join(cls.dir, "ref_ckpt")
        run(job(2, train_args(cls.data, cls.ref_ckpt, STEPS, extra=["--ckpt-every", str(EVERY), "--quiet",
                                                                     "--metrics", cls.ref_metrics])))

    def assert_equals_reference(self, ckpt, metrics):
        _, ref_params, ref_state = read_checkpoint(step_dir(self.ref_ckpt, STEPS))
        _, params, state = read_checkpoint(step_dir(ckpt, STEPS))
        self.assertTrue(np.array_equal(params.view(np.uint32), ref_params.view(np.uint32)))
        self.assertTrue(np.array_equal(state.view(np.uint32), ref_state.view(np.uint32)))
        self.assertEqual(losses_by_step(metrics), losses_by_step(self.ref_metrics))

    def launcher(self, name, extra=()):
        ckpt, metrics, log = self.path(name + "_ckpt"), self.path(name + ".jsonl"), self.path(name + "_log.jsonl")
        cmd = [BATCHSCALE, "run", "--restart-delay", "0", "--log", log, "--"] + job(
            2, train_args(self.data, ckpt, STEPS, extra=["--ckpt-every", str(EVERY), "--quiet", "--metrics",
                                                         metrics] + list(extra)))
        return cmd, ckpt, metrics, log

    def start(self, cmd):
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, OMP_NUM_THREADS="1"))

    def test_one_rank_signalled_under_run(self):
        cmd, ckpt, metrics, log = self.launcher("rank", SLOW)
        launcher = self.start(cmd)
        wait_for_lines(metrics, 3, launcher)
        os.kill(rank_pids(ckpt)[1], signal.SIGTERM)  # rank 1 only: rank 0 learns it from the step's all-gather
        out, err = launcher.communicate(timeout=120)
        self.assertEqual(launcher.returncode, 0, err)
        events = read_log(log)
        self.assertEqual([e["event"] for e in events], ["start", "preempted", "restart", "done"], err)
        stop = events[1]["ckpt_step"]
        self.assertNotEqual(stop % EVERY, 0, "the checkpoint is the preempted step's, not a periodic one")
        self.assertIn(f"preempted: SIGTERM; stopped after step {stop} of {STEPS}, checkpoint "
                      f"{step_dir(ckpt, stop)}; exit {PREEMPTED}", err)
        self.assertEqual(err.count("preempted: SIGTERM"), 1, "one line, from rank 0")
        self.assertIn("(resume from the latest checkpoint, or under batchscale run) (flags: --resume)", err)
        self.assertIn("--resume latest", events[2]["command"])
        self.assertNotIn("--debug-inject-fault", events[2]["command"])
        self.assert_equals_reference(ckpt, metrics)

    def test_launcher_signalled_then_requeued(self):
        cmd, ckpt, metrics, log = self.launcher("term", SLOW)
        launcher = self.start(cmd)
        wait_for_lines(metrics, 3, launcher)
        t0 = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=120)
        print(f"SIGTERM to the launcher: the job ended {time.monotonic() - t0:.2f} s later", file=sys.stderr)
        self.assertEqual(launcher.returncode, PREEMPTED, err)
        events = read_log(log)
        self.assertEqual([e["event"] for e in events], ["start", "interrupted"], err)
        self.assertTrue(events[1]["preempted"], err)
        stop = events[1]["ckpt_step"]
        self.assertTrue(0 < stop < STEPS and os.path.isdir(step_dir(ckpt, stop)), err)
        self.assertEqual(rank_pids(ckpt), {}, "no rank outlives the job")
        # the requeued job: the same command, which finds the checkpoint and resumes
        again = run([w for w in cmd if w not in SLOW])
        events = read_log(log)[2:]
        self.assertEqual([e["event"] for e in events], ["start", "done"], again.stderr)
        self.assertEqual(events[0]["from_step"], stop)
        self.assertIn("--resume latest", events[0]["command"])
        self.assert_equals_reference(ckpt, metrics)

    def one_process(self, name, micro=2, extra=("--debug-inject-fault", "slow:0:400")):  # steps of about 0.1 s
        ckpt, metrics = self.path(name + "_ckpt"), self.path(name + ".jsonl")
        cmd = job(1, train_args(self.data, ckpt, 1000, micro=micro, global_batch=micro,
                                extra=["--ckpt-every", "500", "--quiet", "--metrics", metrics] + list(extra)))
        proc = self.start(cmd)
        wait_for_lines(metrics, 2, proc)
        return proc, ckpt

    def test_one_process_sigusr1(self):
        proc, ckpt = self.one_process("usr1")
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, PREEMPTED, err)
        self.assertRegex(err, r"preempted: SIGUSR1; stopped after step (\d+) of 1000")
        stop = int(err.split("stopped after step ")[1].split()[0])
        self.assertEqual(os.listdir(ckpt), [os.path.basename(step_dir(ckpt, stop))])

    def test_second_sigint_exits_at_once(self):
        # a wider model: a step of computing (0.2 s or more), which no signal cuts short as it does a sleep
        proc, ckpt = self.one_process("int", 16, ["--channels", "384", "--heads", "4", "--seq-len", "128"])
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)  # apart, or the kernel merges them into one pending signal
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGINT, err)
        self.assertIn("second SIGINT: exiting at once, no checkpoint", err)
        self.assertNotIn("preempted:", err)
        self.assertFalse(os.path.exists(ckpt) and os.listdir(ckpt), "no checkpoint was written")


if __name__ == "__main__":
    unittest.main()
