#!/usr/bin/python3
"""test_ft_restart.py: `batchscale run`, the restart launcher.

- Kill -9: a 2-rank job under the launcher loses a rank three times: once by
  --debug-inject-fault exit:R:S on the first launch (the launcher drops the flag
  on restarts), then twice by this test sending SIGKILL to a random rank
  process at a random step of later attempts. The final parameters, the
  optimizer state and every step's loss equal an uninterrupted run's
  bitwise, and the launcher logged each failure and restart.
- Elastic: a 4-rank job whose ranks 2 and 3 "cannot come back" (after the
  first failure, test_ft_lost_node.sh kills them at start-up whenever
  BATCHSCALE_RESTART > 0) fails twice more without progress, so the
  launcher continues on 2 ranks (8 sequences = 2 x 2 accumulation x 2
  ranks: the global batch stays) and reaches the uninterrupted 4-rank run's
  losses within 1e-5 (only the summation order differs).
- A stalled rank ends the attempt through the trainer's --comm-timeout and
  the launcher restarts it (it has no timer of its own and never hangs).
- SIGTERM to the launcher reaches the job and ends it without a restart;
  a job that keeps failing is given up after --max-restarts; bad usage gets
  one line.
"""
import os
import random
import signal
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.ft_jobs import (BATCHSCALE, MPIRUN, CorpusTest, job, losses_by_step, read_checkpoint,  # noqa: E402
                             read_log, read_metrics, run, step_dir, train_args)

HERE = os.path.dirname(os.path.abspath(__file__))


def rank_pids(marker):
    """pid -> rank of the live rank processes whose command line holds marker."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            if marker.encode() not in cmdline or b"train" not in cmdline or b"mpirun" in cmdline[0]:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            out[int(pid)] = int(env[b"OMPI_COMM_WORLD_RANK"])
    return out


def metric_lines(metrics):
    try:
        with open(metrics) as f:
            return len(f.read().splitlines())
    except OSError:
        return 0


class RestartTest(CorpusTest):
    CORPUS_BYTES = 100_000

    def test_kill_random_ranks_is_bitwise_invisible(self):
        steps, kills = 30, 2
        rng = random.Random(os.getpid())
        ref_ckpt = self.path("kill_ref")
        run(job(2, train_args(self.data, ref_ckpt, steps, extra=["--ckpt-every", "2", "--quiet",
                                                                  "--metrics", self.path("kill_ref.jsonl")])))
        ckpt, metrics, log = self.path("kill_ckpt"), self.path("kill.jsonl"), self.path("kill_log.jsonl")
        first = (rng.randrange(2), rng.randrange(3, 8))
        cmd = [BATCHSCALE, "run", "--max-restarts", "6", "--restart-delay", "0", "--log", log, "--"] + job(
            2, train_args(self.data, ckpt, steps, extra=["--ckpt-every", "2", "--quiet", "--metrics", metrics,
                                                         "--debug-inject-fault", f"exit:{first[0]}:{first[1]}"]))
        launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1"))
        killed = []  # (attempt, rank, step reached when killed)
        seen_attempt, baseline, target = 0, 0, 0
        deadline = time.time() + 240
        while launcher.poll() is None and time.time() < deadline:
            time.sleep(0.01)
            restarts = [e for e in read_log(log) if e["event"] == "restart"] if os.path.exists(log) else []
            if len(restarts) != seen_attempt:  # a new attempt: count its steps from here
                seen_attempt, baseline = len(restarts), metric_lines(metrics)
                target = rng.randrange(1, 5)
            if len(killed) == kills or seen_attempt != len(killed) + 1:
                continue
            done = metric_lines(metrics) - baseline  # steps this attempt has completed
            if done < target:
                continue
            pids = rank_pids(ckpt)
            if len(pids) < 2:
                continue
            pid = rng.choice(sorted(pids))
            os.kill(pid, signal.SIGKILL)
            killed.append((seen_attempt, pids[pid], restarts[-1]["from_step"] + done))
        out, err = launcher.communicate(timeout=60)
        self.assertEqual(launcher.returncode, 0, err)
        self.assertEqual(len(killed), kills, f"the job ended before every kill: {killed}\n{err}")
        print(f"killed (attempt, rank, step): {killed}; first launch exit:{first[0]}:{first[1]}", file=sys.stderr)

        events = read_log(log)
        failures = [e for e in events if e["event"] == "failure"]
        restarts = [e for e in events if e["event"] == "restart"]
        self.assertEqual(len(failures), 1 + kills, err)
        self.assertEqual(len(restarts), 1 + kills)
        self.assertEqual(events[-1]["event"], "done")
        for f in failures:
            self.assertNotEqual(f["exit_code"], 0)
            self.assertGreaterEqual(f["lost_s"], 0)
        self.assertIn("--debug-inject-fault", events[0]["command"])
        for r in restarts:
            self.assertNotIn("--debug-inject-fault", r["command"])
            self.assertIn("--resume latest", r["command"])
        self.assertEqual(failures[0]["ckpt_step"], (first[1] - 1) // 2 * 2, "the injected fault's checkpoint")
        self.assertEqual(err.count("batchscale run:"), len(events), "one stderr line per event")

        ref_manifest, ref_params, ref_state = read_checkpoint(step_dir(ref_ckpt, steps))
        manifest, params, state = read_checkpoint(step_dir(ckpt, steps))
        self.assertTrue(np.array_equal(params.view(np.uint32), ref_params.view(np.uint32)), f"kills {killed}")
        self.assertTrue(np.array_equal(state.view(np.uint32), ref_state.view(np.uint32)), f"kills {killed}")
        self.assertEqual(losses_by_step(metrics), losses_by_step(self.path("kill_ref.jsonl")))

    def test_elastic_continues_on_fewer_ranks(self):
        steps = 12
        ref_metrics = self.path("elastic_ref.jsonl")
        run(job(4, train_args(self.data, self.path("elastic_ref"), steps, extra=["--quiet", "--metrics",
                                                                                  ref_metrics])))
        ckpt, metrics, log = self.path("elastic_ckpt"), self.path("elastic.jsonl"), self.path("elastic_log.jsonl")
        train = train_args(self.data, ckpt, steps, extra=["--ckpt-every", "2", "--quiet", "--metrics", metrics,
                                                          "--debug-inject-fault", "exit:3:5"])
        cmd = ([BATCHSCALE, "run", "--elastic", "--min-ranks", "1", "--max-restarts", "5", "--restart-delay", "0",
                "--log", log, "--"] + MPIRUN + ["-np", "4", os.path.join(HERE, "test_ft_lost_node.sh"), BATCHSCALE] +
               train)
        p = run(cmd)
        events = read_log(log)
        kinds = [e["event"] for e in events]
        self.assertEqual(kinds, ["start", "failure", "restart", "failure", "restart", "failure", "shrink",
                                 "restart", "done"], p.stderr)
        failures = [e for e in events if e["event"] == "failure"]
        self.assertEqual([f["progress"] for f in failures], [True, False, False])
        self.assertEqual([f["ckpt_step"] for f in failures], [4, 4, 4])
        shrink = events[kinds.index("shrink")]
        self.assertEqual((shrink["from_ranks"], shrink["to_ranks"]), (4, 2))
        self.assertIn(" -np 2 ", events[-2]["command"])
        self.assertEqual(events[-1]["ranks"], 2)
        got, want = losses_by_step(metrics), losses_by_step(ref_metrics)
        self.assertEqual(sorted(got), list(range(1, steps + 1)))
        for step in range(5, steps + 1):  # computed on 2 ranks with accumulation 2
            self.assertLess(abs(got[step] - want[step]) / want[step], 1e-5, f"step {step}")
        last = read_metrics(metrics)[-1]
        self.assertEqual((last["ranks"], last["accumulation"], last["batch"]), (2, 2, 8))

    def test_stalled_rank_is_restarted(self):
        """A hung rank: the others time out (--comm-timeout), abort, and the launcher restarts."""
        ckpt, log = self.path("stall_ckpt"), self.path("stall_log.jsonl")
        args = train_args(self.data, ckpt, 8, extra=["--ckpt-every", "2", "--quiet", "--comm-timeout", "2",
                                                     "--debug-inject-fault", "stall:1:4"])
        p = run([BATCHSCALE, "run", "--restart-delay", "0", "--log", log, "--"] + job(2, args), timeout=120)
        self.assertIn("timed out after 2 s waiting for rank 1", p.stderr)
        kinds = [e["event"] for e in read_log(log)]
        self.assertEqual(kinds, ["start", "failure", "restart", "done"])
        self.assertEqual(read_log(log)[1]["ckpt_step"], 2)
        self.assertTrue(os.path.isdir(step_dir(ckpt, 8)))

    def test_sigterm_stops_without_restart(self):
        ckpt, log = self.path("term_ckpt"), self.path("term_log.jsonl")
        metrics = self.path("term.jsonl")
        cmd = [BATCHSCALE, "run", "--restart-delay", "0", "--log", log, "--"] + job(
            2, train_args(self.data, ckpt, 100000, extra=["--ckpt-every", "5", "--quiet", "--metrics", metrics]))
        launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.time() + 60
        while metric_lines(metrics) < 2 and time.time() < deadline and launcher.poll() is None:
            time.sleep(0.02)
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=60)
        self.assertNotEqual(launcher.returncode, 0)
        kinds = [e["event"] for e in read_log(log)]
        self.assertEqual(kinds, ["start", "interrupted"], err)
        self.assertEqual(rank_pids(ckpt), {}, "no rank outlives the job")

    def test_gives_up_after_max_restarts(self):
        log = self.path("giveup_log.jsonl")
        # a job that fails while it works, every time (exit 1); a usage error (exit 2) is not retried at all
        # (test_ops_exit.py)
        failing = self.path("failing/batchscale")
        os.makedirs(os.path.dirname(failing), exist_ok=True)
        with open(failing, "w") as f:
            f.write("#!/bin/sh\necho 'batchscale: error: a failure at run time' >&2\nexit 1\n")
        os.chmod(failing, 0o755)
        args = train_args(self.data, self.path("giveup_ckpt"), 5, extra=["--ckpt-every", "1"])
        p = run([BATCHSCALE, "run", "--max-restarts", "2", "--restart-delay", "0", "--log", log, "--", failing] + args,
                check=False)
        self.assertEqual(p.returncode, 1)
        kinds = [e["event"] for e in read_log(log)]
        self.assertEqual(kinds, ["start", "failure", "restart", "failure", "restart", "failure", "give-up"])
        self.assertIn("no restarts left (--max-restarts 2)", p.stderr)

    def test_bad_usage_is_one_line(self):
        data_args = train_args(self.data, self.path("usage"), 2)
        no_ckpt = [a for a in data_args if a not in ("--ckpt-dir", self.path("usage"))]
        cases = [
            ([], "give the job's command after --"),
            (["--", "mpirun", "-np", "2", "sleep", "1"], "must run `batchscale train`"),
            (["--"] + job(1, no_ckpt), "needs --ckpt-dir DIR (or --out DIR)"),
            (["--elastic", "--"] + job(1, data_args), "process count (-np N)"),
            (["--elastic", "--"] + job(2, [a for a in data_args if a not in ("--global-batch", "8")]),
             "--global-batch and --micro-batch explicitly"),
            (["--elastic", "--min-ranks", "3", "--"] + job(2, data_args), "--min-ranks 3 is more than"),
            (["--max-restarts", "-1", "--"] + job(1, data_args), "--max-restarts must be between"),
            (["--", "/nonexistent/batchscale", "train", "--ckpt-dir", "x", "--ckpt-every", "1"],
             "cannot run '/nonexistent/batchscale'"),
        ]
        for args, message in cases:
            p = run([BATCHSCALE, "run"] + args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
            # exactly one line besides the launcher's event log ("batchscale run: ..." once the job has started)
            lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("batchscale run:")]
            self.assertEqual(len(lines), 1, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
