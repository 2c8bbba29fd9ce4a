#!/usr/bin/python3
"""test_gpu_check_budget.py: scripts/gpu-check.sh holds its whole run to GPU_CHECK_SECONDS (one device call):
each phase's limit is cut to the time left and a phase with under 10 s left is skipped, said in the summary.
Runs where no GPU is: without its bundle the check stops after the unpack phase ("no binary: stopping", exit 1).
- GPU_CHECK_SECONDS=0: every phase before the stop is skipped, none runs;
- GPU_CHECK_SECONDS=12: the env phase (20 s of its own) runs under a 12 s limit."""
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def check(seconds, out):
    env = dict(os.environ, GPU_CHECK_SECONDS=str(seconds), OUT=out, BUNDLE=os.path.join(out, "no-bundle.tar.xz"))
    p = subprocess.run(["bash", "scripts/gpu-check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    with open(os.path.join(out, "summary.txt")) as f:
        return p.returncode, f.read().splitlines()


class GpuCheckBudgetTest(unittest.TestCase):
    def test_nothing_runs_without_time(self):
        with tempfile.TemporaryDirectory() as out:
            rc, lines = check(0, out)
        self.assertEqual(rc, 1)
        self.assertEqual(lines, ["env: skipped: the check's 0 s are spent", "unpack: skipped: the check's 0 s are spent",
                                 "no binary: stopping"])

    def test_limits_cut_to_the_time_left(self):
        with tempfile.TemporaryDirectory() as out:
            rc, lines = check(12, out)
        self.assertEqual(rc, 1)
        self.assertRegex(lines[0], r"^env: exit \d+ in \d+ s \(limit 12 s\)")
        self.assertEqual(lines[-1], "no binary: stopping")


if __name__ == "__main__":
    unittest.main()
