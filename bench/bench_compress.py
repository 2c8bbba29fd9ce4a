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

Then training itself: the engine config (micro-batch 8, 1 thread per rank)
for 6 steps per codec (--grad-compression, and 1-bit Adam with
--freeze-step 2), 2 and 4 ranks, shared memory and TCP: bytes per step,
the reductions' time and the part of it the step waited for, step time and
tokens/s against the uncompressed run of the same rank count and transport.
And once more on 2 ranks over TCP with the loopback shaped to 100 Mb/s by a
tc token bucket (as root; removed afterwards), where bandwidth, not the
codec's arithmetic, is what a step waits for. The JSON's "machine" is
`batchscale bench cpu` (the CPU model and kernels).
usage: bench_compress.py BATCHSCALE OUT_JSON"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_scaling import write_shard  # noqa: E402

L, H, C, V, T, B = 6, 6, 384, 8192, 256, 8
FLOATS = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # 13,891,584 (llm.c's GPT-2 parameter count)
BUCKET = 8 * 1024 * 1024 // 4
REPS = 7
STEPS = int(os.environ.get("BS_BENCH_STEPS", 6))  # training steps per codec; shorter for a smoke run (run.sh)
CASES = ["fp32-mpi", "fp32-ring", "fp16", "bf16", "fp8", "int8", "int8@exchange", "topk:0.01", "onebit"]
TRANSPORTS = {"shared memory": [], "tcp": ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]}
LINK_BYTES_PER_S = 1.25e9  # 10 Gb/s
SLOW_LINK = "100mbit"  # the loopback shaped with tc for the scarce-bandwidth runs
SLOW_CASES = ["none", "fp16", "int8", "topk:0.01", "onebit", "onebit-adam"]
TC_HANDLE = "7357:"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def collective_runs(driver, ranks, transport):
    cmd = MPIRUN + TRANSPORTS[transport] + ["-np", str(ranks), driver, "bench", str(FLOATS), str(BUCKET), str(REPS),
                                            ",".join(CASES)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


TRAIN_CASES = ["none", "fp16", "bf16", "fp8", "int8", "topk:0.01", "onebit", "onebit-adam"]


class ShapedLoopback:
    """TCP over the loopback limited to SLOW_LINK by a tc token bucket while
    in use (root only), and removed afterwards, also after a failure; a
    leftover of an interrupted run (same handle) is removed first."""

    def __enter__(self):
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", TC_HANDLE], capture_output=True)
        p = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", TC_HANDLE, "tbf", "rate", SLOW_LINK,
                            "burst", "1mb", "latency", "200ms"], capture_output=True, text=True)
        self.ok = p.returncode == 0
        self.why = p.stderr.strip()
        return self

    def __exit__(self, *exc):
        if self.ok:
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", TC_HANDLE], capture_output=True)


def train_runs(bs, ranks, transport, shard, cases=TRAIN_CASES):
    """The engine config trained for 6 steps per codec: median tokens/s, bytes, communication time."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in cases:
            metrics = os.path.join(tmp, "m.jsonl")
            codec = (["--optimizer", "onebit-adam", "--freeze-step", "2"] if spec == "onebit-adam"
                     else ["--grad-compression", spec])
            cmd = [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
                   "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(B), "--steps", str(STEPS),
                   "--metrics", metrics, "--quiet", "--threads", "1", "--eval-every", "0", "--sample-tokens", "0",
                   ] + codec
            subprocess.run(MPIRUN + TRANSPORTS[transport] + ["-np", str(ranks)] + cmd, check=True, env=ENV,
                           capture_output=True)
            rows = [json.loads(line) for line in open(metrics)][2:]  # 1-bit Adam compresses from step 3 on
            results[spec] = {k: statistics.median(r[k] for r in rows)
                             for k in ("tokens_per_s", "comm_bytes", "comm_bytes_fp32", "comm_busy_ms",
                                       "comm_exposed_ms", "ms")}
    return results


def print_train(rows, ranks, transport):
    none = rows["none"]
    print(f"\ntraining, engine config, {ranks} ranks, {transport} (median of steps 3-6; ratios to uncompressed):")
    print(f"  {'codec':12s} {'MB/step':>8s} {'bytes':>6s} {'comm ms':>8s} {'exposed ms':>10s} {'step ms':>8s} "
          f"{'tokens/s':>9s} {'speed':>6s}")
    for spec, r in rows.items():
        print(f"  {spec:12s} {r['comm_bytes'] / 1e6:8.2f} {r['comm_bytes'] / none['comm_bytes']:6.3f} "
              f"{r['comm_busy_ms']:8.1f} {r['comm_exposed_ms']:10.1f} {r['ms']:8.1f} {r['tokens_per_s']:9.0f} "
              f"{r['tokens_per_s'] / none['tokens_per_s']:6.2f}")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    driver = os.path.join(os.path.dirname(os.path.abspath(bs)), "tests", "cc_driver")
    results = {"floats": FLOATS, "bucket_floats": BUCKET, "machine": kernel_report.machine(bs), "runs": {}}
    print(kernel_report.summary(results["machine"]))
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
    results["train"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        for transport in TRANSPORTS:
            for ranks in (2, 4):
                rows = train_runs(bs, ranks, transport, shard)
                results["train"][f"{transport}/{ranks}"] = rows
                print_train(rows, ranks, transport)
        with ShapedLoopback() as link:
            if link.ok:
                rows = train_runs(bs, 2, "tcp", shard, SLOW_CASES)
                results["train"][f"tcp at {SLOW_LINK}/2"] = rows
                print_train(rows, 2, f"tcp over the loopback shaped to {SLOW_LINK} by tc")
            else:
                print(f"\ntraining over a shaped link: skipped (tc: {link.why or 'not permitted'})")
    print("  (comm ms: the reductions' start-to-finish time, overlapping backward; exposed: what the step waited;"
          " 1-bit Adam's momentum exchange runs after backward, so all of it is exposed)")
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
