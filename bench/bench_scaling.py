#!/usr/bin/env python3
"""bench_scaling.py: weak scaling on this machine: 1 process x 1 thread vs
2 processes x 1 thread, micro-batch 8 per process, on the engine benchmark
config (L=6 H=6 C=384 V=8192 T=256), for batchscale (ZeRO 0 and 1, ring
collectives, bucketed overlap) and PyTorch DDP (gloo, the current release
from PyPI), all in one run. Efficiency = tokens/s on 2 / (2 x tokens/s on 1).
Also ZeRO-3 memory: peak resident memory per rank on 4 ranks, ZeRO-3 against
ZeRO-0, for a model whose parameter state dominates memory. The JSON records
the kernels: "machine" (`batchscale bench cpu`, what batchscale's ranks ran)
and each DDP run's "kernels" (rank 0's report, kernel_report.this_process).
The PyTorch peer is torch_ddp_peer.py: per-layer parameters, DDP's default
25 MB buckets, batchscale's AdamW and gradient clipping.
usage: bench_scaling.py BATCHSCALE OUT_JSON [VENV_PYTHON]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402

L, H, C, V, T, B = 6, 6, 384, 8192, 256, 8
STEPS = int(os.environ.get("BS_BENCH_STEPS", 12))  # shorter for a smoke run (run.sh)
# ZeRO-3 memory: 24 layers of width 768 (170M parameters, 2.7 GB of state per rank at ZeRO-0), small vocabulary
# and batch, so that state dominates; what is not state (activations, gathered blocks, bucket buffers, the
# process itself: about 250 MB here) is the same under both stages
MEM_L, MEM_H, MEM_C, MEM_V = 24, 12, 768, 2048
HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
# one thread per process; no OPENBLAS_CORETYPE: batchscale applies its own rule, the PyPI peer (MKL) detects the CPU
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def write_shard(path, vocab, n=1_000_000):
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, n]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.random.default_rng(0).integers(0, vocab, n).astype(np.uint16).tobytes())


def batchscale(bs, ranks, args, metrics):
    cmd = [bs, "train", "--metrics", metrics, "--quiet", "--threads", "1", "--eval-every", "0",
           "--sample-tokens", "0"] + args
    subprocess.run((MPIRUN + ["-np", str(ranks)] + cmd) if ranks > 1 else cmd, check=True, env=ENV)
    return [json.loads(line) for line in open(metrics)]


def median_tokens_per_s(metrics):
    return statistics.median(m["tokens_per_s"] for m in metrics[2:])


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    venv_python = sys.argv[3] if len(sys.argv) > 3 else None
    results = {"machine": kernel_report.machine(bs)}
    print(kernel_report.summary(results["machine"]))
    note = kernel_report.environment_note(results["machine"])
    if note:
        print(note)
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        model = ["--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H), "--channels", str(C),
                 "--seq-len", str(T), "--micro-batch", str(B), "--steps", str(STEPS)]
        one = median_tokens_per_s(batchscale(bs, 1, model, os.path.join(tmp, "one.jsonl")))
        results["batchscale_1"] = one
        for zero in (0, 1):
            m = batchscale(bs, 2, model + ["--zero", str(zero), "--baseline-tokens-per-s", str(one)],
                           os.path.join(tmp, f"two{zero}.jsonl"))
            results[f"batchscale_2_zero{zero}"] = dict(
                tokens_per_s=median_tokens_per_s(m),
                exposed_comm_share=statistics.median(x["comm_exposed_ms"] / x["ms"] for x in m[2:]),
                comm_mb_per_step=m[-1]["comm_bytes"] / 1e6)
        if venv_python:
            for world in (1, 2):
                out = subprocess.run([venv_python, os.path.join(HERE, "torch_ddp_peer.py"), str(world), str(STEPS),
                                      str(L), str(H), str(C), str(V), str(T), str(B)], check=True,
                                     capture_output=True, text=True, env=ENV).stdout
                results[f"torch_ddp_{world}"] = json.loads(out.strip().splitlines()[-1])

        mshard = os.path.join(tmp, "rand2k.bin")
        write_shard(mshard, MEM_V, 200_000)
        big = ["--data", mshard, "--vocab-size", str(MEM_V), "--layers", str(MEM_L), "--heads", str(MEM_H),
               "--channels", str(MEM_C), "--seq-len", "64", "--micro-batch", "1", "--steps", "2", "--bucket-mb", "4"]
        for zero in (0, 3):
            m = batchscale(bs, 4, big + ["--zero", str(zero)], os.path.join(tmp, f"mem{zero}.jsonl"))
            results[f"zero{zero}_4ranks_peak_rss_mb"] = m[-1]["peak_rss_bytes"] / 1e6
            results[f"zero{zero}_4ranks_state_mb"] = m[-1]["state_bytes"] / 1e6

    print("weak scaling, engine config, micro-batch 8 per process, 1 thread per process:")
    print(f"  batchscale 1 process:         {one:8.0f} tokens/s")
    for zero in (0, 1):
        r = results[f"batchscale_2_zero{zero}"]
        print(f"  batchscale 2 processes ZeRO-{zero}: {r['tokens_per_s']:8.0f} tokens/s, efficiency "
              f"{r['tokens_per_s'] / (2 * one):.1%}, exposed communication {r['exposed_comm_share']:.1%}, "
              f"{r['comm_mb_per_step']:.1f} MB sent/step/rank")
    if venv_python:
        t1, t2 = results["torch_ddp_1"], results["torch_ddp_2"]
        print(f"  PyTorch {t1['version']} 1 process:  {t1['tokens_per_s']:8.0f} tokens/s")
        print(f"  PyTorch DDP gloo 2 processes: {t2['tokens_per_s']:8.0f} tokens/s, efficiency "
              f"{t2['tokens_per_s'] / (2 * t1['tokens_per_s']):.1%} (per-layer parameters, "
              f"{t2['bucket_cap_mb']:.0f} MB buckets, gradient clipping; {t2['params']} parameters)")
    r0, r3 = results["zero0_4ranks_peak_rss_mb"], results["zero3_4ranks_peak_rss_mb"]
    print(f"ZeRO-3 memory, 4 ranks, L={MEM_L} C={MEM_C} V={MEM_V} ({results['zero0_4ranks_state_mb']:.0f} MB of state at "
          f"ZeRO-0): peak RSS per rank ZeRO-0 {r0:.0f} MB, ZeRO-3 {r3:.0f} MB = {r3 / r0:.1%}")
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
