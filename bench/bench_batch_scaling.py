#!/usr/bin/env python3
"""bench_batch_scaling.py: the steps/examples trade-off of McCandlish et al.
(2018) measured on the demo model and corpus.

Trains the tiny demo model (L=4 H=4 C=192 T=128, byte-level King James Bible)
at several global batch sizes until the validation loss reaches a target,
records steps, tokens and wall time, measures the gradient noise scale
B_noise on the way (--noise-scale), and fits (S/S_min - 1)(E/E_min - 1) = 1.
The critical batch B_crit = E_min / S_min should be near B_noise. Writes a
CSV and a PNG (gnuplot); the JSON's "machine" is `batchscale bench cpu` (the
CPU model and kernels). usage: bench_batch_scaling.py BATCHSCALE OUT_DIR"""
import csv
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402

BATCHES = [4, 8, 16, 32, 64]  # sequences of 128 tokens
TARGET = 2.45
T = 128
LR = 2e-3  # the same for every batch: the trade-off curve assumes each batch is trained well, and a
           # learning rate grown with the batch (sqrt rule) overshot at 64 sequences in trials


def run(bs, batch, out_dir):
    metrics = os.path.join(out_dir, f"batch{batch}.jsonl")
    micro = max(2, min(batch // 4, 16))  # at least two micro-batches per step, so B_noise is measured
    eval_every = max(1, 16384 // (batch * T))  # every ~16K tokens, so all batches are judged alike
    cmd = [bs, "train", "--data", "data/kjv/train_*.bin", "--val-data", "data/kjv/val_*.bin", "--layers", "4",
           "--heads", "4", "--channels", "192", "--seq-len", str(T), "--micro-batch", str(micro), "--global-batch",
           str(batch), "--steps", "100000", "--train-tokens", "6000000", "--lr", str(LR), "--min-lr",
           str(LR), "--warmup-tokens", "65536",
           "--eval-every", str(eval_every), "--val-batches", "8", "--target-val-loss", str(TARGET),
           "--sample-tokens", "0", "--threads", "2", "--quiet", "--metrics", metrics]
    cmd.append("--noise-scale")
    t0 = time.time()
    subprocess.run(cmd, check=True)
    wall = time.time() - t0
    rows = [json.loads(line) for line in open(metrics)]
    last = rows[-1]
    if last.get("val_loss", 1e9) > TARGET:
        raise SystemExit(f"batch {batch} did not reach validation loss {TARGET}")
    noise = [r["noise_scale"] for r in rows if "noise_scale" in r]
    return dict(batch=batch, steps=last["step"], tokens=last["tokens"], wall_s=round(wall, 1),
                noise_scale=noise[-1] if noise else float("nan"))


def fit(points):
    """S_min, E_min minimising the squared log-residual of (S/S_min - 1)(E/E_min - 1) = 1."""
    smin_hi, emin_hi = min(p["steps"] for p in points), min(p["tokens"] for p in points)
    best = None
    for i in range(1, 400):
        s_min = smin_hi * i / 400
        for j in range(1, 400):
            e_min = emin_hi * j / 400
            err = sum(math.log((p["steps"] / s_min - 1) * (p["tokens"] / e_min - 1)) ** 2 for p in points)
            if best is None or err < best[0]:
                best = (err, s_min, e_min)
    return best[1], best[2]


def main():
    bs, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run(["scripts/demo-data.sh", bs], check=True)
    points = [run(bs, b, out_dir) for b in BATCHES]
    s_min, e_min = fit(points)
    b_crit = e_min / s_min / T
    noise = [p["noise_scale"] for p in points if not math.isnan(p["noise_scale"])]
    b_noise = sorted(noise)[len(noise) // 2]
    csv_path = os.path.join(out_dir, "batch_scaling.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(points[0]))
        w.writeheader()
        w.writerows(points)
    print(f"target validation loss {TARGET} (demo model, byte-level KJV):")
    print(f"{'batch':>6} {'steps':>7} {'tokens':>9} {'wall_s':>7} {'B_noise':>8}")
    for p in points:
        print(f"{p['batch']:>6} {p['steps']:>7} {p['tokens']:>9} {p['wall_s']:>7} {p['noise_scale']:>8.1f}")
    print(f"fit (S/S_min - 1)(E/E_min - 1) = 1: S_min = {s_min:.0f} steps, E_min = {e_min:.0f} tokens, "
          f"B_crit = E_min/S_min = {b_crit:.1f} sequences; measured B_noise (median at target) = {b_noise:.1f}")
    png = os.path.join(out_dir, "batch_scaling.png")
    gp = f"""set terminal pngcairo size 800,560
set output '{png}'
set logscale xy
set xlabel 'optimizer steps to val loss {TARGET}'
set ylabel 'tokens to val loss {TARGET}'
set key top right
set datafile separator ','
Smin={s_min}; Emin={e_min}
set parametric
set trange [1.02:60]
plot '{csv_path}' using 2:3 skip 1 with points pt 7 ps 1.5 title 'measured (batch 4..64 seq)', \\
     Smin*t, Emin*(1+1/(t-1)) with lines lw 2 title sprintf('fit: S_{{min}}=%.0f, E_{{min}}=%.0f', Smin, Emin), \\
     Smin*(1+t), {b_noise * T}*Smin*(1+t) with lines dt 2 lw 2 title 'E = B_{{noise}} S (measured B_{{noise}}={b_noise:.1f} seq)'
"""
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    with open(os.path.join(out_dir, "batch_scaling.json"), "w") as f:
        json.dump(dict(machine=kernel_report.machine(bs), points=points, s_min=s_min, e_min=e_min, b_crit_seq=b_crit, b_noise_seq=b_noise), f, indent=2)
    print(f"wrote {csv_path} and {png}")


if __name__ == "__main__":
    main()
