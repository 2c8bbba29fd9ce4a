"""test_ft_full_disk.py: a checkpoint write that runs out of space (issue 48, item 5).

On a small tmpfs sized from the checkpoint measured in the same test (S
bytes; the tmpfs holds 2.5 S):
- a resumed run whose next checkpoint finds the disk full (another file
  takes S - 64 KiB) fails with one line naming the full disk, and leaves no
  temporary directory behind;
- once that file is gone, `--resume latest` continues from the last good
  checkpoint and writes the next one: with the failed write's partial
  directory still there it would not fit (S - 64 KiB free);
- a temporary directory left by a process killed mid-write (made by hand,
  S - 64 KiB) does not stop the next `--resume latest` either: it is removed
  before the next checkpoint is written, not only after it.
All of it twice: with the checkpoint written by the main thread, and with
--async-ckpt (by a writer thread). Mounting needs root (CAP_SYS_ADMIN);
without it the test skips (77) and says why.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import SKIP, Checks, TempDir, make_corpus  # noqa: E402
from harness.ft_jobs import BATCHSCALE, run, step_dir, train_args  # noqa: E402

MARGIN = 64 * 1024


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def leftovers(ckpt):
    return [n for n in os.listdir(ckpt) if n.startswith(".tmp-step_")]


def fill(path, nbytes):
    with open(path, "wb") as f:
        f.write(b"\0" * nbytes)


def train(data, ckpt, steps, resume, writer):
    extra = ["--keep-last", "1", "--quiet"] + (["--resume", "latest"] if resume else []) + writer
    return run([BATCHSCALE] + train_args(data, ckpt, steps, extra=extra), check=False)


def scenario(data, disk, size, check, writer):
    ckpt = os.path.join(disk, "ckpt")
    first = train(data, ckpt, 2, resume=False, writer=writer)
    check(first.returncode == 0, f"a first checkpoint fits (step 2): {first.stderr.strip()}")
    filler = os.path.join(disk, "other_file")
    fill(filler, size - MARGIN)
    full = train(data, ckpt, 4, resume=True, writer=writer)
    errors = full.stderr.strip().splitlines()
    check(full.returncode == 1 and len(errors) == 1 and "No space left on device" in errors[0],
          f"the full disk stops the resumed run with one line, exit 1 (got {full.returncode}: {errors})")
    check(leftovers(ckpt) == [], f"the failed write removed its temporary directory (left: {leftovers(ckpt)})")
    os.remove(filler)
    again = train(data, ckpt, 5, resume=True, writer=writer)
    check(again.returncode == 0 and os.path.isdir(step_dir(ckpt, 5)) and not os.path.isdir(step_dir(ckpt, 2)),
          f"--resume latest continues from step 2 and writes step 5 (exit {again.returncode}: "
          f"{again.stderr.strip()})")
    for name in leftovers(ckpt):  # where a check above failed: this part starts from its own state
        shutil.rmtree(os.path.join(ckpt, name))
    crashed = os.path.join(ckpt, ".tmp-step_00000099")
    os.makedirs(crashed)
    fill(os.path.join(crashed, "rank_00000.bin"), size - MARGIN)  # what a killed writer leaves
    after_crash = train(data, ckpt, 6, resume=True, writer=writer)
    check(after_crash.returncode == 0 and os.path.isdir(step_dir(ckpt, 6)) and leftovers(ckpt) == [],
          f"a crashed write's directory is removed before the next write (exit {after_crash.returncode}: "
          f"{after_crash.stderr.strip()})")


def main():
    check = Checks()
    with TempDir() as tmp:
        data = make_corpus(tmp, nbytes=60_000)
        probe = os.path.join(tmp, "probe")
        run([BATCHSCALE] + train_args(data, probe, 2, extra=["--quiet"]))
        size = dir_bytes(step_dir(probe, 2))
        kib = (size * 5 // 2 + 1023) // 1024
        for writer in ([], ["--async-ckpt"]):  # the write from the main thread, and from the writer thread
            disk = tempfile.mkdtemp(dir=tmp)
            mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", disk],
                                   capture_output=True, text=True)
            if mount.returncode != 0:
                print(f"SKIP: cannot mount a {kib} KiB tmpfs (needs root): {mount.stderr.strip()}")
                return SKIP
            print(f"checkpoint {size} bytes; tmpfs {kib} KiB; train {' '.join(writer)}")
            try:
                scenario(data, disk, size, check, writer)
            finally:
                subprocess.run(["umount", disk], check=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
