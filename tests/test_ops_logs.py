"""test_ops_logs.py: the progress output off a terminal (issue 20, part 8).

With standard output a pipe, training writes no carriage return and no escape
code, and prints one plain step line at step 1, every --log-every steps and at
the last step; the same under mpirun, whose ranks see a pseudo-terminal of
OpenMPI's even when mpirun's own output is a pipe (the case that filled `make
demo > log` with redraws). On a real terminal (a pty we open), alone and under
mpirun, the line is still redrawn in place."""
import os
import pty
import re
import select
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import BATCHSCALE, MPIRUN  # noqa: E402

STEPS, EVERY = 7, 3
REDRAW = "\r\033[K"


def read_pty(master, proc, limit_s=120):
    """Everything the child writes to the pty until it exits (bounded in time)."""
    chunks, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the slave side closed
                data = b""
            if not data and proc.poll() is not None:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    return b"".join(chunks).decode(errors="replace")


class LogsOffTerminal(bstest.CorpusTest):
    CORPUS_BYTES = 40_000

    def command(self, ranks):
        args = bstest.tiny_train_args(self.data, steps=STEPS, quiet=False, **{"log-every": EVERY, "micro-batch": 2})
        cmd = [BATCHSCALE] + args
        return MPIRUN + ["-np", str(ranks)] + cmd if ranks > 1 else cmd

    def run_to_pipe(self, ranks):
        env = dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm")
        p = subprocess.run(self.command(ranks), capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p.stdout

    def run_on_pty(self, ranks):
        master, slave = pty.openpty()
        env = dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm")
        proc = subprocess.Popen(self.command(ranks), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
        os.close(slave)
        try:
            out = read_pty(master, proc)
        finally:
            os.close(master)
        self.assertEqual(proc.returncode, 0, out)
        return out

    def check_plain(self, out):
        self.assertNotIn("\r", out)
        self.assertNotIn("\033", out)
        steps = [int(m.group(1)) for m in re.finditer(r"^step +(\d+)/%d " % STEPS, out, re.M)]
        self.assertEqual(steps, [1, 3, 6, 7], out)  # step 1, every 3rd, the last

    def test_pipe_one_process(self):
        self.check_plain(self.run_to_pipe(1))

    def test_pipe_under_mpirun(self):
        self.check_plain(self.run_to_pipe(2))

    def test_terminal_redraws(self):
        for ranks in (1, 2):
            with self.subTest(ranks=ranks):
                out = self.run_on_pty(ranks)
                redraws = out.count(REDRAW)
                self.assertGreaterEqual(redraws, STEPS, out)  # every step redrawn in place
                self.assertRegex(out, r"\r\033\[Kstep +%d/%d " % (STEPS, STEPS))


if __name__ == "__main__":
    unittest.main()
