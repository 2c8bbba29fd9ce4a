#!/usr/bin/python3
"""test_plan_reality.py: does the planner predict this project's own step
time on this machine? A measurement, not a CTest (tests never assert on
wall-clock time); run it by hand on an otherwise idle machine:

    tests/test_plan_reality.py [--layouts 1x1x1,2x1x1z1,1x2x1,1x1x2] [--steps 12]

1. `mpirun -np 2 batchscale bench --calibrate` measures sgemm by size and
   memory bandwidth (one process, --threads threads, is one planner "GPU")
   and the all-reduce of each algorithm between two processes.
2. For each layout DPxTPxPP[zZERO], `batchscale train` runs the demo model
   (4 layers, 192 wide, 4 heads, seq 128, micro-batch 16, global batch 16 x
   dp x pp) under mpirun and the median step time after two warm-up steps is
   taken from its metrics.
3. `batchscale plan --calibrate FILE` predicts the same layout; the script
   prints measured and predicted times and the error, and exits 1 if any
   error exceeds the target (25% on the CPU).

On a device (`--device cuda|sim`) the calibration measures the device
(`bench --calibrate --device`: its products, fused attention, element-wise
kernels, copies and, under mpirun, all-reduces of device buffers) and the
runs train with `--device`; scripts/gpu-check.sh runs it on a lent GPU for
GPT-2 124M and 350M on one GPU (`--model gpt2-124m`, target 15%):

    tests/test_plan_reality.py --device cuda --model gpt2-124m --layouts 1x1x1 --micro-batch 8 --target 0.15

All ranks run on this machine, so the plan puts them on one node
(--gpus-per-node): where ranks x threads exceed the cores, the planner
time-slices them (each rank's calibrated rates scaled by cores / threads).
Collectives: if the calibration has no "collectives" section, the
planner assumes shared memory at a quarter of the measured bandwidth.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import BATCHSCALE, MPIRUN, make_corpus  # noqa: E402

# The planner's presets as train's flags (the byte corpus's tokens fit any vocabulary).
MODELS = {
    "demo": ["--layers", "4", "--heads", "4", "--channels", "192", "--seq-len", "128"],
    "gpt2-124m": ["--layers", "12", "--heads", "12", "--channels", "768", "--seq-len", "1024", "--vocab-size", "50257"],
    "gpt2-350m": ["--layers", "24", "--heads", "16", "--channels", "1024", "--seq-len", "1024", "--vocab-size", "50257"],
}


def parse_layout(text):
    """'2x1x1z1' -> (dp, tp, pp, zero)."""
    grid, _, zero = text.partition("z")
    dp, tp, pp = (int(x) for x in grid.split("x"))
    return dp, tp, pp, int(zero or 0)


def measure(data, layout, steps, micro_batch, threads, workdir, a):
    dp, tp, pp, zero = layout
    ranks, name = dp * tp * pp, "_".join(str(x) for x in layout)
    metrics = os.path.join(workdir, f"m_{name}.jsonl")
    batch = micro_batch * dp * pp  # pp micro-batches per pipeline
    cmd = ([] if ranks == 1 else MPIRUN + ["-np", str(ranks)]) + [BATCHSCALE, "train", "--data", data] + MODELS[a.model] + [
        "--micro-batch", str(micro_batch), "--global-batch", str(batch), "--steps", str(steps), "--dp", str(dp),
        "--tp", str(tp), "--pp", str(pp), "--zero", str(zero), "--threads", str(threads), "--eval-every", "0",
        "--sample-tokens", "0", "--quiet", "--metrics", metrics, "--out", os.path.join(workdir, f"run_{name}")]
    if a.device != "cpu":
        cmd += ["--device", a.device, "--precision", a.precision]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=1800)
    with open(metrics) as f:
        ms = [json.loads(line)["ms"] for line in f][2:]
    return statistics.median(ms) / 1e3


def predict(cal, layout, micro_batch, model):
    dp, tp, pp, zero = layout
    args = [BATCHSCALE, "plan", "--calibrate", cal, "--model", model, "--gpus", str(dp * tp * pp), "--tp", str(tp),
            "--pp", str(pp), "--dp", str(dp), "--zero", str(zero), "--micro-batch", str(micro_batch),
            "--global-batch", str(micro_batch * dp * pp), "--jitter", "0", "--json",
            "--gpus-per-node", str(dp * tp * pp)]  # every rank runs on this one machine, sharing its cores
    p = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(p.stdout)["plan"]["step_time"]["step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", default="1x1x1,2x1x1,2x1x1z1,1x2x1,1x1x2,4x1x1z1",
                    help="DPxTPxPP[zZERO], comma-separated")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calibration", help="use this calibration file instead of measuring one")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "sim"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="on a device")
    ap.add_argument("--model", default="demo", choices=sorted(MODELS))
    ap.add_argument("--target", type=float, default=0.25, help="the largest error allowed")
    a = ap.parse_args()
    device = [] if a.device == "cpu" else ["--device", a.device, "--precision", a.precision]
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        cal = a.calibration or os.path.join(d, "cal.json")
        if not a.calibration:
            # under mpirun when a layout has several ranks, so the calibration also measures the all-reduce
            ranks = max(dp * tp * pp for dp, tp, pp, _ in map(parse_layout, a.layouts.split(",")))
            launcher = MPIRUN + ["-np", "2"] if ranks > 1 else []
            subprocess.run(launcher + [BATCHSCALE, "bench", "--calibrate", cal, "--threads", str(a.threads)] + device,
                           check=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
        data = os.path.join(make_corpus(d, nbytes=400_000), "train_000000.bin")
        print(f"{'layout':>8} {'measured ms':>12} {'predicted ms':>13} {'error':>7}")
        for text in a.layouts.split(","):
            layout = parse_layout(text)
            t = measure(data, layout, a.steps, a.micro_batch, a.threads, d, a)
            p = predict(cal, layout, a.micro_batch, a.model)
            err = p / t - 1
            worst = max(worst, abs(err))
            print(f"{text:>8} {1e3 * t:>12.1f} {1e3 * p:>13.1f} {100 * err:>+6.1f}%")
    print(f"worst error {100 * worst:.1f}% (target {100 * a.target:.0f}%, {a.model} on {a.device})")
    return 0 if worst <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())
