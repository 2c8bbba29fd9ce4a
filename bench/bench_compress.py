#!/usr/bin/env python3
"""bench_compress.py: compressed all-reduce of a whole gradient (issue 7).

The gradient of the engine benchmark config (L=6 H=6 C=384 V=8192 T=256:
13,891,584 floats, 55.6 MB) in buckets of 8 MB (the trainer's --bucket-mb
default), all launched at once as backward launches them, then waited: one
"step". For 2 and 4 ranks, over shared memory (MPI's default transport) and
over TCP (`--mca pml ob1 --mca btl tcp,self`, loopback), every codec
against the uncompressed ring and MPI_Allreduce, in one run (tests/cc_driver
bench, which compresses with worker and server error feedback as training
would). Per case: bytes sent per rank per step, median seconds per step
(slowest rank; cases interleaved in rounds so load changes hit all alike),
effective algbw (55.6 MB / time, what the gradient sees), the time and
bytes as ratios to the fp32 ring, and the RMS error against the exact sum
of one step and of the running sum of 8 steps of one gradient (what error
feedback recovers: top-k and 1-bit lose most of one step). Also printed: what the bytes alone would cost on a
10 Gb/s link (bytes / 1.25 GB/s, arithmetic, not measured), where
compression pays.

Tokens/s per codec needs `batchscale train --grad-compression` (the data-
parallel integration); when `batchscale train --help` lists that flag, the
script also trains the engine config for a few steps per codec on 2 ranks
and prints tokens/s beside the uncompressed run (train_runs below).
usage: bench_compress.py BATCHSCALE OUT_JSON"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scaling import write_shard  # noqa: E402

L, H, C, V, T, B = 6, 6, 384, 8192, 256, 8
FLOATS = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # 13,891,584 (llm.c's GPT-2 parameter count)
BUCKET = 8 * 1024 * 1024 // 4
REPS = 7
CASES = ["fp32-mpi", "fp32-ring", "fp16", "bf16", "fp8", "int8", "int8@exchange", "topk:0.01", "onebit"]
TRANSPORTS = {"shared memory": [], "tcp": ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]}
LINK_BYTES_PER_S = 1.25e9  # 10 Gb/s
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def collective_runs(driver, ranks, transport):
    cmd = MPIRUN + TRANSPORTS[transport] + ["-np", str(ranks), driver, "bench", str(FLOATS), str(BUCKET), str(REPS),
                                            ",".join(CASES)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def train_runs(bs):
    """tokens/s per codec on 2 ranks, once the trainer takes --grad-compression."""
    help_text = subprocess.run([bs, "train", "--help"], capture_output=True, text=True).stdout
    if "--grad-compression" not in help_text:
        return None
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        for spec in ["none"] + [c for c in CASES if not c.startswith("fp32") and "@" not in c]:
            metrics = os.path.join(tmp, "m.jsonl")
            cmd = [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
                   "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(B), "--steps", "8",
                   "--metrics", metrics, "--quiet", "--threads", "1", "--eval-every", "0", "--sample-tokens", "0",
                   "--grad-compression", spec]
            subprocess.run(MPIRUN + ["-np", "2"] + cmd, check=True, env=ENV, capture_output=True)
            rows = [json.loads(line) for line in open(metrics)]
            results[spec] = statistics.median(r["tokens_per_s"] for r in rows[2:])
    return results


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    driver = os.path.join(os.path.dirname(os.path.abspath(bs)), "tests", "cc_driver")
    results = {"floats": FLOATS, "bucket_floats": BUCKET, "runs": {}}
    mb = FLOATS * 4 / 1e6
    print(f"compressed all-reduce of a {mb:.1f} MB gradient ({FLOATS} floats) in {BUCKET * 4 >> 20} MB buckets, "
          f"median of {REPS} steps, 1 thread per rank; ratios against the fp32 ring in the same run")
    for transport in TRANSPORTS:
        for ranks in (2, 4):
            rows = collective_runs(driver, ranks, transport)
            results["runs"][f"{transport}/{ranks}"] = rows
            ring = next(r for r in rows if r["case"] == "fp32-ring")
            print(f"\n{ranks} ranks, {transport}:")
            print(f"  {'case':14s} {'MB/rank':>8s} {'bytes':>6s} {'ms':>8s} {'time':>6s} {'algbw GB/s':>10s} "
                  f"{'err 1 step':>10s} {'err 8 steps':>11s} {'ms@10Gb/s':>9s}")
            for r in rows:
                print(f"  {r['case']:14s} {r['bytes_per_rank'] / 1e6:8.2f} {r['bytes_per_rank'] / ring['bytes_per_rank']:6.3f} "
                      f"{r['seconds'] * 1e3:8.1f} {r['seconds'] / ring['seconds']:6.2f} "
                      f"{mb / 1e3 / r['seconds']:10.2f} {r['rms_rel_error']:10.2e} {r['running_rms_rel_error']:11.2e} "
                      f"{r['bytes_per_rank'] / LINK_BYTES_PER_S * 1e3:9.1f}")
    print("\n  (bytes, time: ratios to the fp32 ring; err: RMS error / RMS of the exact sum, of one step and of the"
          " running sum of 8 steps of one gradient with error feedback; ms@10Gb/s: bytes per rank / 1.25 GB/s,"
          " arithmetic)")
    trained = train_runs(bs)
    results["train_tokens_per_s"] = trained
    if trained is None:
        print("training per codec: skipped (batchscale train has no --grad-compression yet)")
    else:
        print("training, engine config, 2 ranks: tokens/s " +
              ", ".join(f"{k} {v:.0f} ({v / trained['none']:.2f}x)" for k, v in trained.items()))
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
