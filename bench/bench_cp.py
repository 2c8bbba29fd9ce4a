#!/usr/bin/env python3
"""bench_cp.py: context parallelism on a long sequence (issue 16): one
model (L=2 H=4 C=64, a 256-token vocabulary, T = 4096 tokens per sequence,
global batch 2 = 2 micro-batches of 1 sequence) at cp 1, 2 and 4, ring and
all-gather, 1 thread per rank (cp 4 is 4 ranks on this 2-core machine:
oversubscribed, its times are not a speed-up figure). In one run, per row:

- activation bytes per rank (the metrics' activation_bytes: the activation
  sets, the backward scratch and the context-attention buffers, from the
  engine's own allocation sizes) and their ratio to cp 1's / cp; target
  within 15% of 1/cp (PASS or MISS, nothing fails);
- tokens/s, the context-parallel bytes each rank sends per step and the
  time blocked on them (exposed CP communication, rank 0) and its share of
  the step; ring against all-gather at the same cp;
- the planner's reality check: `batchscale bench --calibrate` (sgemm by
  size, memory bandwidth, the collectives between 2 ranks) measured in the
  same run, then `batchscale plan --calibrate` predicts each layout's step
  and its CP communication (every rank on this one machine, sharing its
  cores); predicted / measured is printed, nothing fails.

The first step is a warm-up and dropped; figures are medians of the rest.
usage: bench_cp.py BATCHSCALE OUT_JSON"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_scaling import write_shard  # noqa: E402

L, H, C, T, V = 2, 4, 64, 4096, 256
STEPS = int(os.environ.get("BS_BENCH_STEPS", 3))
MEMORY_TOLERANCE = 0.15
LAYOUTS = [(1, "ring"), (2, "ring"), (2, "allgather"), (4, "ring"), (4, "allgather")]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle",
          "1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run(bs, shard, cp, algo, tmp):
    metrics = os.path.join(tmp, f"cp{cp}-{algo}.jsonl")
    cmd = [bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H), "--channels",
           str(C), "--seq-len", str(T), "--micro-batch", "1", "--global-batch", "2", "--steps", str(STEPS),
           "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet", "--metrics", metrics]
    if cp > 1:
        cmd = MPIRUN + ["-np", str(cp)] + cmd + ["--cp", str(cp), "--cp-algo", algo]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        raise SystemExit(f"bench_cp: cp {cp} {algo} failed (exit {p.returncode}):\n{p.stderr}")
    rows = [json.loads(line) for line in open(metrics)][1:]

    def median(key, default=0.0):
        return statistics.median(r.get(key, default) for r in rows)
    return dict(cp=cp, algo=algo, tokens_per_s=median("tokens_per_s"), ms=median("ms"),
                activation_bytes=rows[-1]["activation_bytes"], peak_rss_bytes=max(r["peak_rss_bytes"] for r in rows),
                cp_bytes=median("cp_bytes"), cp_exposed_ms=median("cp_exposed_ms"), steps_timed=len(rows))


def calibrate(bs, tmp):
    cal = os.path.join(tmp, "calibration.json")
    subprocess.run(MPIRUN + ["-np", "2", bs, "bench", "--calibrate", cal, "--threads", "1"], check=True,
                   capture_output=True, env=ENV)
    return cal


def predict(bs, cal, cp, algo):
    """The planner's step and exposed CP time (seconds) for the layout on this machine."""
    cmd = [bs, "plan", "--calibrate", cal, "--layers", str(L), "--hidden", str(C), "--heads", str(H), "--vocab",
           str(V), "--seq-len", str(T), "--gpus", str(cp), "--gpus-per-node", str(cp), "--cp", str(cp), "--cp-algo",
           algo, "--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--global-batch", "2", "--jitter", "0",
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None
    step = json.loads(p.stdout)["plan"]["step_time"]
    return dict(step_ms=step["step"] * 1e3, cp_ms=step.get("cp_comm", 0.0) * 1e3)


def print_reality(results):
    print("planner reality check (plan --calibrate of this machine, measured in this run):")
    print(f"{'layout':<16} {'measured ms':>11} {'predicted ms':>12} {'error':>7} {'CP exposed ms':>13} {'predicted':>9}")
    for r in results:
        p = r.get("predicted")
        label = f"cp {r['cp']} {r['algo'] if r['cp'] > 1 else ''}"
        if not p:
            print(f"{label:<16} (the planner could not plan this layout)")
            continue
        r["prediction_error"] = p["step_ms"] / r["ms"] - 1
        print(f"{label:<16} {r['ms']:>11.0f} {p['step_ms']:>12.0f} {r['prediction_error']:>+7.0%} "
              f"{r['cp_exposed_ms']:>13.1f} {p['cp_ms']:>9.1f}")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    if STEPS < 2:
        raise SystemExit(f"bench_cp: BS_BENCH_STEPS={STEPS}: at least 2 (the first step is a warm-up)")
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, f"rand{V}.bin")
        write_shard(shard, V)
        results = [run(bs, shard, cp, algo, tmp) for cp, algo in LAYOUTS]
        cal = calibrate(bs, tmp)
        for r in results:
            r["predicted"] = predict(bs, cal, r["cp"], r["algo"])
    base = results[0]["activation_bytes"]
    print(f"context parallelism: L={L} H={H} C={C} T={T} V={V}, micro-batch 1, global batch 2, 1 thread per rank "
          "(cp 4: 4 ranks on 2 cores)")
    print(f"{'layout':<16} {'act MB/rank':>11} {'x cp / cp1':>10} {'target':>6} {'peak RSS MB':>11} {'tokens/s':>8} "
          f"{'CP MB/step':>10} {'CP exposed ms':>13} {'share':>6}")
    for r in results:
        r["memory_ratio"] = r["activation_bytes"] * r["cp"] / base
        ok = abs(r["memory_ratio"] - 1) <= MEMORY_TOLERANCE
        r["memory_verdict"] = "PASS" if ok else "MISS"
        share = r["cp_exposed_ms"] / r["ms"] if r["ms"] else 0
        label = f"cp {r['cp']} {r['algo'] if r['cp'] > 1 else ''}"
        print(f"{label:<16} {r['activation_bytes'] / 1e6:>11.1f} {r['memory_ratio']:>10.3f} "
              f"{r['memory_verdict'] if r['cp'] > 1 else '-':>6} {r['peak_rss_bytes'] / 1e6:>11.0f} "
              f"{r['tokens_per_s']:>8.0f} {r['cp_bytes'] / 1e6:>10.1f} {r['cp_exposed_ms']:>13.1f} {share:>6.1%}")
    by = {(r["cp"], r["algo"]): r for r in results}
    for cp in (2, 4):
        ring, gather = by[(cp, "ring")], by[(cp, "allgather")]
        print(f"cp {cp}: ring / all-gather tokens/s {ring['tokens_per_s'] / gather['tokens_per_s']:.2f}, "
              f"exposed CP ms {ring['cp_exposed_ms']:.1f} vs {gather['cp_exposed_ms']:.1f}")
    print_reality(results)
    config = dict(layers=L, heads=H, channels=C, seq_len=T, vocab=V, micro_batch=1, global_batch=2, steps=STEPS,
                  mpirun=MPIRUN, memory_target=f"within {MEMORY_TOLERANCE:.0%} of 1/cp of cp 1's activation bytes")
    with open(out_json, "w") as f:
        json.dump(dict(config=config, results=results, machine=machine), f, indent=1)


if __name__ == "__main__":
    main()
