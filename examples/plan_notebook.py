#!/usr/bin/env python3
"""plan_notebook.py: sizing a run from Python, as one would in a notebook (`pip install ./python` first).

Two charts of Llama 3 70B on H100s planned as Megatron-Bridge runs them (--stack nemo):
  1. the scaling curve from 8 to 16,384 GPUs (weak scaling: tokens per GPU kept), tokens/s per GPU and efficiency;
  2. cost against time to train: the best layout at each GPU count, and the frontier of counts no other beats on
     both (fewer days and fewer dollars).
Writes plan_scaling.png and plan_frontier.png (matplotlib), or prints the tables and says why where matplotlib is
not installed.

    python3 examples/plan_notebook.py [--model llama3-70b] [--usd-per-gpu-hour 2.5] [--out-dir .]
"""
import argparse
import os

import batchscale


def scaling_table(model, stack):
    points = batchscale.scaling(model=model, hardware="h100-sxm", gpus=1024, stack=stack, scaling_from=8,
                                scaling_to=16384)
    return [(p["gpus"], p["plan"]["tokens_per_s"] / p["gpus"], p["efficiency"]) for p in points if p["found"]]


def cost_time_table(model, stack, rate):
    rows = []
    for gpus in [64 * 2 ** i for i in range(9)]:  # 64 .. 16,384
        try:
            record = batchscale.plan(model=model, hardware="h100-sxm", gpus=gpus, stack=stack, search=True, top=1,
                                     usd_per_gpu_hour=rate)
        except ValueError as e:  # the planner's one-line reason (e.g. the batch does not split)
            print(f"{gpus:6d} GPUs: {e}")
            continue
        rows.append((gpus, record["reliability"]["wall_s"] / 86400, record["cost"]["usd"], record["plan"]["layout"]["text"]))
    return rows


def frontier(rows):
    """The rows no other row beats on both days and dollars."""
    return [r for r in rows if not any(o[1] <= r[1] and o[2] <= r[2] and o != r for o in rows)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--stack", default="nemo")
    ap.add_argument("--usd-per-gpu-hour", type=float, default=2.5)
    ap.add_argument("--out-dir", default=".")
    a = ap.parse_args()

    curve = scaling_table(a.model, a.stack)
    print("GPUs   tokens/s/GPU  efficiency")
    for gpus, per_gpu, eff in curve:
        print(f"{gpus:6d} {per_gpu:12.0f} {100 * eff:10.1f}%")
    rows = cost_time_table(a.model, a.stack, a.usd_per_gpu_hour)
    best = frontier(rows)
    print("\nGPUs   days    cost (USD)   layout")
    for gpus, days, usd, layout in rows:
        print(f"{gpus:6d} {days:7.1f} {usd:12.3g}   {layout}{'   (frontier)' if (gpus, days, usd, layout) in best else ''}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\nmatplotlib is not installed: no charts (pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(f"{a.model} on H100 ({a.stack}): weak scaling")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out_dir, "plan_scaling.png"), dpi=120)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter([r[1] for r in rows], [r[2] for r in rows], label="best layout per GPU count")
    ax.plot([r[1] for r in best], [r[2] for r in best], color="C1", label="frontier")
    for gpus, days, usd, _ in rows:
        ax.annotate(str(gpus), (days, usd), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("days to train")
    ax.set_ylabel("USD (with failures)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(a.out_dir, "plan_frontier.png"), dpi=120)
    print(f"\nwrote {os.path.join(a.out_dir, 'plan_scaling.png')} and plan_frontier.png")


if __name__ == "__main__":
    main()
