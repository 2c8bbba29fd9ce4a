#!/usr/bin/env python3
"""bench_parallel.py: the three ways to use two processes on the engine
benchmark config (L=6 H=6 C=384 V=8192 T=256): DP 2, TP 2 and PP 2 (1F1B and
GPipe, m = 8 micro-batches; 1F1B also with --pp-split auto, which moves a
layer off the last stage as it carries the output layer: 4 + 2), same global batch (8 micro-batches of
8 sequences), 1 thread per process. Prints tokens/s, the exposed communication
share, and for PP the measured bubble beside the theoretical (P-1)/m. The
JSON's "machine" is `batchscale bench cpu`: the CPU and the kernels the ranks ran.
usage: bench_parallel.py BATCHSCALE OUT_JSON"""
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
G = 8 * B  # global batch: 8 micro-batches of 8 sequences
STEPS = int(os.environ.get("BS_BENCH_STEPS", 6))  # shorter for a smoke run (run.sh)
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        layouts = {"DP 2": ["--dp", "2"], "TP 2": ["--tp", "2"], "PP 2 (1F1B)": ["--pp", "2", "--pp-schedule", "1f1b"],
                   "PP 2 (GPipe)": ["--pp", "2", "--pp-schedule", "gpipe"],
                   # the last stage also holds the 8192-wide output layer and the loss: balanced by FLOPs (4 + 2)
                   "PP 2 (1F1B, auto)": ["--pp", "2", "--pp-schedule", "1f1b", "--pp-split", "auto"]}
        for name, extra in layouts.items():
            metrics = os.path.join(tmp, "m.jsonl")
            subprocess.run(MPIRUN + [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L),
                                     "--heads", str(H), "--channels", str(C), "--seq-len", str(T), "--micro-batch",
                                     str(B), "--global-batch", str(G), "--steps", str(STEPS), "--eval-every", "0",
                                     "--sample-tokens", "0", "--threads", "1", "--quiet", "--metrics", metrics] + extra,
                           check=True, env=ENV)
            rows = [json.loads(line) for line in open(metrics)][2:]
            results[name] = dict(
                tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                exposed_comm=statistics.median(r["comm_exposed_ms"] / r["ms"] for r in rows),
                bubble=statistics.median(r["bubble"] for r in rows) if "bubble" in rows[0] else None,
                bubble_theory=rows[0].get("bubble_theory"))
    print(f"two processes, engine config, global batch {G} sequences (8 micro-batches), 1 thread each:")
    print(f"{'layout':<18} {'tokens/s':>9} {'exposed comm':>13} {'bubble':>8} {'theory':>7}")
    for name, r in results.items():
        bub = f"{r['bubble']:.1%}" if r["bubble"] is not None else "-"
        th = f"{r['bubble_theory']:.1%}" if r["bubble_theory"] is not None else "-"
        print(f"{name:<18} {r['tokens_per_s']:>9.0f} {r['exposed_comm']:>12.1%} {bub:>8} {th:>7}")
    with open(out_json, "w") as f:
        json.dump(dict(results, machine=machine), f, indent=2)


if __name__ == "__main__":
    main()
