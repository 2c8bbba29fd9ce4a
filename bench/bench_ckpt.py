#!/usr/bin/env python3
"""bench_ckpt.py: checkpoint write time, training stall and write bandwidth
on the engine benchmark config (L=6 H=6 C=384 V=8192 T=256), 1 and 2 ranks,
against the disk's own write bandwidth measured in the same run with
`dd conv=fsync` of the same number of bytes in the same directory.

The trainer reports in its metrics, on the line of the step after each
checkpoint, how long training stopped for it (ckpt_stall_ms): the whole write (files
fsynced, manifest written, directory renamed) when synchronous; only the
copy into the background writer's buffer with --async-ckpt, whose write
then takes as long as the synchronous one. Medians over the checkpoints of
a run; modes are the rows of MODES. The JSON's "machine" is `batchscale bench
cpu` (the CPU model and kernels).
usage: bench_ckpt.py BATCHSCALE OUT_JSON"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_scaling import ENV, MPIRUN, C, H, L, T, V, write_shard  # noqa: E402

MODES = {"sync": [], "async": ["--async-ckpt"]}
STEPS = int(os.environ.get("BS_BENCH_STEPS", 6))  # shorter for a smoke run (run.sh)
MICRO = 1  # the checkpoint's size does not depend on the batch; small steps keep the run short


def measure(bs, ranks, flags, shard, ckpt_dir):
    """The trainer reports, per checkpointing step, how long training stopped
    for the checkpoint (ckpt_stall_ms): the whole write when synchronous, the
    copy into the background writer's buffer with --async-ckpt."""
    metrics = os.path.join(ckpt_dir + ".jsonl")
    cmd = [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
           "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(MICRO), "--steps", str(STEPS),
           "--threads", "1", "--eval-every", "0", "--sample-tokens", "0", "--quiet", "--metrics", metrics,
           "--ckpt-dir", ckpt_dir, "--ckpt-every", "1", "--keep-last", "1"] + flags
    p = subprocess.run(MPIRUN + ["-np", str(ranks)] + cmd if ranks > 1 else cmd, capture_output=True, text=True,
                       env=ENV)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    rows = [json.loads(line) for line in open(metrics)]
    stalls = [r["ckpt_stall_ms"] / 1e3 for r in rows if "ckpt_stall_ms" in r]
    step = max(int(d[5:]) for d in os.listdir(ckpt_dir) if d.startswith("step_"))
    directory = os.path.join(ckpt_dir, f"step_{step:08d}")
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    stall = statistics.median(stalls)
    return dict(checkpoints=len(stalls), bytes=size, stall_s=stall, write_s=stall, write_mb_per_s=size / 1e6 / stall)


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
    results = {"config": dict(L=L, H=H, C=C, V=V, T=T, micro_batch=MICRO, steps=STEPS),
               "machine": kernel_report.machine(bs), "runs": []}
    print(kernel_report.summary(results["machine"]))
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
                if mode != "sync":  # the write itself happens in the background: as long as the synchronous one
                    sync = next(x for x in results["runs"] if x["mode"] == "sync" and x["ranks"] == ranks)
                    r["write_s"], r["write_mb_per_s"] = sync["write_s"], sync["write_mb_per_s"]
                r.update(mode=mode, ranks=ranks, dd_mb_per_s=dd_bandwidth(tmp, r["bytes"]))
                r["ratio_to_dd"] = r["write_mb_per_s"] / r["dd_mb_per_s"]
                results["runs"].append(r)
                print(f"{mode:6} {ranks:5d} {r['bytes'] / 1e6:7.1f} {r['write_s']:8.3f} {r['stall_s']:8.3f} "
                      f"{r['write_mb_per_s']:7.0f} {r['dd_mb_per_s']:8.0f} {r['ratio_to_dd']:8.2f}")
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
