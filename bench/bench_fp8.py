#!/usr/bin/env python3
"""bench_fp8.py: FP8 training against bf16 and fp32 at equal tokens (issue 19).

On the shipped corpus (the King James Bible, byte-level; L=2 C=64 T=64,
global batch 8, BS_BENCH_STEPS steps, default 300): the final validation
loss of fp32, bf16, FP8 delayed and FP8 block, each FP8 run's underflow
(non-zero values flushed to zero) and overflow (saturated) shares per tensor
kind (input, weight, grad; mean over the steps, from the metrics), and the
same with the outlier injection (--debug-outlier-scale 1000) for bf16 and both
recipes. Tokens/s are recorded but mean nothing about FP8 speed: this CPU
has no FP8 arithmetic, the FP8 layer here is fp32 sgemm plus quantization.
Bytes saved by FP8 parameter gathers: 2 ranks, ZeRO 3, FP8 delayed, 4 steps,
with and without --fp8-param-gather: the bytes each rank sends per step (the
metrics' comm_bytes, gradient reduce-scatter included). Nothing is asserted
(tests/test_fp8_train.py does).
usage: bench_fp8.py BATCHSCALE OUT_JSON"""
import json
import os
import subprocess
import sys
import tempfile

RUNS = {"fp32": [], "bf16": ["--precision", "bf16"], "fp8-delayed": ["--precision", "fp8", "--fp8-recipe", "delayed"],
        "fp8-block": ["--precision", "fp8", "--fp8-recipe", "block"]}
OUTLIER = ("bf16", "fp8-delayed", "fp8-block")


def corpus(bs, d):
    text = os.path.join(d, "kjv.txt")
    with open(text, "w") as f:
        subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], stdout=f, check=True)
    subprocess.run([bs, "prepare", "--in", text, "--out", os.path.join(d, "kjv")], check=True, capture_output=True)
    return os.path.join(d, "kjv")


def train(bs, data, d, name, extra, steps):
    metrics = os.path.join(d, name + ".jsonl")
    args = [bs, "train", "--data", os.path.join(data, "train_000000.bin"), "--val-data",
            os.path.join(data, "val_000000.bin"), "--layers", "2", "--heads", "4", "--channels", "64", "--seq-len",
            "64", "--micro-batch", "8", "--global-batch", "8", "--steps", str(steps), "--lr", "3e-3", "--warmup", "2",
            "--eval-every", str(steps), "--val-batches", "8", "--sample-tokens", "0", "--threads", "2", "--quiet",
            "--metrics", metrics] + extra
    subprocess.run(args, check=True, capture_output=True)
    m = [json.loads(line) for line in open(metrics)]
    out = {"val_loss": m[-1]["val_loss"], "tokens_per_s": m[-1]["tokens_per_s"]}
    for key in ("fp8_underflow", "fp8_overflow"):
        if key in m[-1]:
            out[key] = {k: sum(x[key][k] for x in m) / len(m) for k in ("input", "weight", "grad")}
    return out


def gather_bytes(bs, data, d):
    """comm_bytes per step of 2 ranks at ZeRO 3 in FP8, without and with --fp8-param-gather."""
    out = {}
    for name, extra in (("fp32 gathers", []), ("fp8 gathers", ["--fp8-param-gather"])):
        metrics = os.path.join(d, name.replace(" ", "_") + ".jsonl")
        args = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2", bs, "train",
                "--data", os.path.join(data, "train_000000.bin"), "--layers", "4", "--heads", "4", "--channels", "64",
                "--seq-len", "64", "--micro-batch", "4", "--global-batch", "8", "--steps", "4", "--eval-every", "0",
                "--sample-tokens", "0", "--threads", "1", "--quiet", "--zero", "3", "--precision", "fp8",
                "--fp8-recipe", "delayed", "--metrics", metrics] + extra
        subprocess.run(args, check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        out[name] = [json.loads(line) for line in open(metrics)][-1]["comm_bytes"]
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bench_fp8.py BATCHSCALE OUT_JSON")
    bs, out = sys.argv[1], sys.argv[2]
    steps = int(os.environ.get("BS_BENCH_STEPS", "300"))
    results = {"steps": steps, "tokens": steps * 8 * 64, "runs": {}, "fp8_param_gather_bytes_saved": None}
    with tempfile.TemporaryDirectory() as d:
        data = corpus(bs, d)
        for name, extra in RUNS.items():
            results["runs"][name] = train(bs, data, d, name, extra, steps)
        for name in OUTLIER:
            results["runs"][name + "+outlier"] = train(bs, data, d, name + "_outlier",
                                                       RUNS[name] + ["--debug-outlier-scale", "1000"], steps)
        results["gather_bytes"] = gather_bytes(bs, data, d)
    g = results["gather_bytes"]
    results["fp8_param_gather_bytes_saved"] = 1 - g["fp8 gathers"] / g["fp32 gathers"]
    ref = results["runs"]["bf16"]["val_loss"]
    print(f"fp8 (issue 19): validation loss after {steps} steps ({results['tokens']} tokens), KJV, L=2 C=64 T=64")
    for name, r in results["runs"].items():
        under = r.get("fp8_underflow")
        extra = (f"  underflow in/w/grad {under['input']:.2e}/{under['weight']:.2e}/{under['grad']:.2e}"
                 f"  overflow in/w/grad " + "/".join(f"{r['fp8_overflow'][k]:.2e}" for k in ("input", "weight", "grad"))
                 if under else "")
        print(f"  {name:20s} {r['val_loss']:.4f} ({(r['val_loss'] - ref) / ref * 100:+.2f}% vs bf16){extra}")
    print(f"  ZeRO 3 on 2 ranks, bytes per rank per step: {g['fp32 gathers']} with fp32 gathers, {g['fp8 gathers']} with "
          f"--fp8-param-gather ({results['fp8_param_gather_bytes_saved']:.1%} fewer)")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
