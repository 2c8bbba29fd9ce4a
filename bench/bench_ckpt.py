#!/usr/bin/env python3
"""bench_ckpt.py: checkpoint write time, training stall and write bandwidth
on the engine benchmark config (L=6 H=6 C=384 V=8192 T=256), 1 and 2 ranks,
against the disk's own write bandwidth measured in the same run with
`dd conv=fsync` of the same number of bytes in the same directory.

The trainer does not report checkpoint time in its metrics yet, so it is
read from its output: every line is timestamped as it arrives (the trainer
flushes each one), and with --ckpt-every 1 --log-every 1
  write time = "checkpoint written" line - the "step k" line before it
               (rank 0 prints after every rank's file is fsynced, the
               manifest written and the directory renamed);
  stall      = time between two step lines - the later step's own "ms"
               (the time training did not run: the whole write when it is
               synchronous; only the copy with an asynchronous writer).
Medians over the checkpoints of a run. Modes are rows of MODES: a writer
with another flag (the planned --async-ckpt) is one more entry.
usage: bench_ckpt.py BATCHSCALE OUT_JSON"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scaling import ENV, MPIRUN, C, H, L, T, V, write_shard  # noqa: E402

MODES = {"sync": []}  # e.g. "async": ["--async-ckpt"] once the trainer has it
STEPS = 6
MICRO = 1  # the checkpoint's size does not depend on the batch; small steps keep the run short
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP_LINE = re.compile(r"^step\s+(\d+)/\d+ .*\|\s+([\d.]+) ms \|")


def timed_lines(cmd):
    """Runs cmd; returns its output lines, each with the time its last
    character arrived. Under mpirun rank 0's stdout is a terminal, so the
    progress line is ended by a carriage return and the next line's newline:
    output is read as it comes and split at either."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    text, arrivals = b"", []  # (end offset of a chunk, its arrival time)
    while chunk := os.read(p.stdout.fileno(), 1 << 16):
        text += chunk
        arrivals.append((len(text), time.monotonic()))
    err = p.stderr.read().decode()
    if p.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    lines, start = [], 0
    for m in re.finditer(rb"[\r\n]", text + b"\n"):
        segment = text[start:m.start()]
        start = m.end()
        if segment.strip():
            arrived = next(t for end, t in arrivals if end >= m.start())
            lines.append((arrived, ANSI.sub("", segment.decode(errors="replace"))))
    return lines


def measure(bs, ranks, flags, shard, ckpt_dir):
    cmd = [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
           "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(MICRO), "--steps", str(STEPS),
           "--threads", "1", "--eval-every", "0", "--sample-tokens", "0", "--log-every", "1",
           "--ckpt-dir", ckpt_dir, "--ckpt-every", "1", "--keep-last", "1"] + flags
    lines = timed_lines(MPIRUN + ["-np", str(ranks)] + cmd if ranks > 1 else cmd)
    writes, stalls, last_step = [], [], None
    for t, text in lines:
        m = STEP_LINE.match(text)
        if m:
            if last_step is not None:
                stalls.append(t - last_step[0] - float(m.group(2)) / 1e3)
            last_step = (t, int(m.group(1)))
        elif text.startswith("checkpoint written:") and last_step is not None:
            writes.append(t - last_step[0])
    step = max(int(d[5:]) for d in os.listdir(ckpt_dir) if d.startswith("step_"))
    directory = os.path.join(ckpt_dir, f"step_{step:08d}")
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    return dict(checkpoints=len(writes), bytes=size, write_s=statistics.median(writes),
                stall_s=statistics.median(stalls), write_mb_per_s=size / 1e6 / statistics.median(writes))


def dd_bandwidth(directory, size, runs=5):
    """Median MB/s of `runs` dd writes of `size` bytes to a new file with
    conv=fsync (single runs vary by 2x on a virtual disk)."""
    path = os.path.join(directory, "dd.bin")
    rates = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={max(1, size >> 20)}", "conv=fsync"],
                       check=True, capture_output=True)
        rates.append(os.path.getsize(path) / 1e6 / (time.monotonic() - t0))
        os.remove(path)
    return statistics.median(rates)


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    results = {"config": dict(L=L, H=H, C=C, V=V, T=T, micro_batch=MICRO, steps=STEPS), "runs": []}
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out_json))) as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V, 200_000)
        print("checkpoint writes, engine config L=6 H=6 C=384 V=8192 T=256 (median over "
              f"{STEPS} checkpoints; disk: median of 5 dd conv=fsync of the same size, same directory)")
        print(f"{'mode':6} {'ranks':>5} {'MB':>7} {'write s':>8} {'stall s':>8} {'MB/s':>7} {'dd MB/s':>8} "
              f"{'ckpt/dd':>8}")
        for mode, flags in MODES.items():
            for ranks in (1, 2):
                r = measure(bs, ranks, flags, shard, os.path.join(tmp, f"ckpt_{mode}_{ranks}"))
                r.update(mode=mode, ranks=ranks, dd_mb_per_s=dd_bandwidth(tmp, r["bytes"]))
                r["ratio_to_dd"] = r["write_mb_per_s"] / r["dd_mb_per_s"]
                results["runs"].append(r)
                print(f"{mode:6} {ranks:5d} {r['bytes'] / 1e6:7.1f} {r['write_s']:8.3f} {r['stall_s']:8.3f} "
                      f"{r['write_mb_per_s']:7.0f} {r['dd_mb_per_s']:8.0f} {r['ratio_to_dd']:8.2f}")
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
