#!/usr/bin/env python3
"""bench_diloco.py: low-communication data parallelism over a slow link
(issue 18): 2 ranks over TCP with the loopback shaped to 100 Mb/s by a tc
token bucket (bench_compress's ShapedLoopback: root only, removed
afterwards), the same model and tokens on KJV (L=4 H=4 C=128 T=64, 2
sequences per rank per step, 300 steps of AdamW at lr 1e-3), in one run:

    ddp             plain data parallelism (the gradient all-reduced every step)
    diloco-h50      --local-steps 50, outer Nesterov lr 0.7 momentum 0.9
    diloco-h50-int8 the same with int8 pseudo-gradients (error feedback)
    fedavg-h50      --outer-optimizer avg

Per row: bytes per step (this rank's, the metrics' comm_bytes), tokens/s
(the median over the whole run: a DiLoCo step that syncs is slow, the 49
between are not), the final validation loss (16 batches), and the ratios to
DDP. Targets (issue 18): at least 20x fewer bytes, at least 5x the tokens/s,
validation loss within 3% of DDP's; each printed PASS or MISS, nothing fails.
LoRA-only synchronisation is skipped until `train` has --lora-rank.
usage: bench_diloco.py BATCHSCALE OUT_JSON"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_compress import MPIRUN, TRANSPORTS, ShapedLoopback, SLOW_LINK  # noqa: E402
from bench_fp8 import corpus  # noqa: E402

STEPS = int(os.environ.get("BS_BENCH_STEPS", 300))
MODEL = ["--layers", "4", "--heads", "4", "--channels", "128", "--seq-len", "64", "--micro-batch", "2",
         "--global-batch", "4", "--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "20"]
RUNS = {"ddp": [], "diloco-h50": ["--local-steps", "50"],
        "diloco-h50-int8": ["--local-steps", "50", "--grad-compression", "int8"],
        "fedavg-h50": ["--local-steps", "50", "--outer-optimizer", "avg"]}
TARGETS = dict(bytes=20.0, speed=5.0, val_loss=0.03)
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def train(bs, data, d, name, extra):
    metrics = os.path.join(d, name + ".jsonl")
    cmd = MPIRUN + TRANSPORTS["tcp"] + ["-np", "2", bs, "train", "--data", data + "/train_000000.bin",
                                         "--val-data", data + "/val_000000.bin", "--steps", str(STEPS),
                                         "--eval-every", str(STEPS), "--val-batches", "16", "--sample-tokens", "0",
                                         "--threads", "1", "--quiet", "--metrics", metrics] + MODEL + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        raise SystemExit(f"bench_diloco: {name} failed (exit {p.returncode}):\n{p.stderr}")
    rows = [json.loads(line) for line in open(metrics)]
    val = [r["val_loss"] for r in rows if r.get("val_loss") is not None]
    tokens = sum(r["tokens_per_s"] * r["ms"] / 1e3 for r in rows)
    seconds = sum(r["ms"] for r in rows) / 1e3
    return dict(bytes_per_step=statistics.mean(r["comm_bytes"] for r in rows), tokens_per_s=tokens / seconds,
                median_step_ms=statistics.median(r["ms"] for r in rows), val_loss=val[-1] if val else None,
                steps=len(rows))


def verdict(ok):
    return "PASS" if ok else "MISS"


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    results = {}
    with tempfile.TemporaryDirectory() as d:
        data = corpus(bs, d)
        with ShapedLoopback() as link:
            if not link.ok:
                print(f"bench_diloco: skipped: the loopback cannot be shaped here (tc: {link.why or 'not permitted'})")
                return
            for name, extra in RUNS.items():
                results[name] = train(bs, data, d, name, extra)
    ddp = results["ddp"]
    print(f"low-communication training: 2 ranks over TCP, loopback shaped to {SLOW_LINK}, {STEPS} steps of "
          f"{' '.join(MODEL)}")
    print(f"{'run':<18} {'KB/step':>9} {'x fewer':>8} {'target':>6} {'tokens/s':>9} {'x DDP':>6} {'target':>6} "
          f"{'val loss':>9} {'vs DDP':>7} {'target':>6}")
    for name, r in results.items():
        fewer = ddp["bytes_per_step"] / r["bytes_per_step"] if r["bytes_per_step"] else float("inf")
        speed = r["tokens_per_s"] / ddp["tokens_per_s"]
        gap = r["val_loss"] / ddp["val_loss"] - 1 if r["val_loss"] and ddp["val_loss"] else float("nan")
        r.update(fewer_bytes=fewer, speedup=speed, val_gap=gap)
        marks = ("-", "-", "-") if name == "ddp" else (verdict(fewer >= TARGETS["bytes"]),
                                                        verdict(speed >= TARGETS["speed"]),
                                                        verdict(abs(gap) <= TARGETS["val_loss"]))
        print(f"{name:<18} {r['bytes_per_step'] / 1e3:>9.1f} {fewer:>8.1f} {marks[0]:>6} {r['tokens_per_s']:>9.0f} "
              f"{speed:>6.2f} {marks[1]:>6} {r['val_loss']:>9.4f} {gap:>+7.1%} {marks[2]:>6}")
    print("lora-only sync: skipped (this batchscale has no --lora-rank yet)")
    with open(out_json, "w") as f:
        json.dump(dict(config=dict(model=MODEL, steps=STEPS, link=SLOW_LINK, runs=RUNS, targets=TARGETS),
                       results=results, machine=machine), f, indent=1)


if __name__ == "__main__":
    main()
