#!/usr/bin/env python3
"""bench_lora.py: LoRA fine-tuning at the batch sizes people fine-tune with
(issue 18). A model trained first on byte-level KJV (L=4 H=4 C=128 T=64,
BS_BENCH_STEPS steps, default 300, batch 8, lr 1e-3) is fine-tuned on a
second corpus, the license texts Debian's base-files package ships in
/usr/share/common-licenses (the 14 regular files, one document each; the
symlinks GPL, LGPL, GFDL left out as duplicates; the last 5% of each is the
validation set), with rank-8 adapters on all four linear layers (alpha 16,
lr 2e-3 cosine to 2e-4, warm-up over the first 8,192 tokens whatever the
batch), at global batch 4, 16, 64 and 256 sequences (micro-batch 4,
accumulated), for the same 262,144 tokens each (16 steps at 256, 1,024 at
4). Printed: the validation loss (32 batches) at 8 token counts per batch
and before fine-tuning, with a PNG of it (build/bench/lora.png) when
Debian's python3-matplotlib is installed, else the plot is skipped with the
reason printed. At batch 16 also: full fine-tuning (lr 5e-4) against LoRA,
parameter + gradient + optimizer bytes (the metrics' state_bytes), final
loss, and tokens/s (the median step of 2 rounds of 16 steps per run, the
runs interleaved in each round so a shared machine's load hits them alike;
still noisy); and --base-weights bf16 and int8 (the frozen base in 2 or 1
bytes), the same three.
usage: bench_lora.py BATCHSCALE OUT_JSON"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_fp8 import corpus  # noqa: E402

STEPS = int(os.environ.get("BS_BENCH_STEPS", 300))  # the base's steps; a smoke run also shortens the fine-tuning
SEQ = 64
MICRO = 4
BATCHES = [4, 16, 64, 256]
TOKENS = 256 * SEQ * max(1, min(16, STEPS * 16 // 300))  # 262,144 at the default: 16 steps of the largest batch
EVALS = 8
LICENSES = "/usr/share/common-licenses"
LORA = ["--lora-rank", "8", "--lora-alpha", "16", "--lr", "2e-3", "--min-lr", "2e-4"]
FULL = ["--lr", "5e-4", "--min-lr", "5e-5"]
COMPARE_BATCH = 16
SPEED_ROUNDS, SPEED_STEPS = 2, 16
ENV = dict(os.environ, OMP_NUM_THREADS="2")


def run(bs, data, d, name, extra):
    """One training run on data's shards; its metrics rows."""
    metrics = os.path.join(d, name + ".jsonl")
    cmd = [bs, "train", "--data", data + "/train_000000.bin", "--val-data", data + "/val_000000.bin",
           "--seq-len", str(SEQ), "--val-batches", "32", "--sample-tokens", "0", "--threads", "2", "--quiet",
           "--metrics", metrics] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        raise SystemExit(f"bench_lora: {name} failed (exit {p.returncode}):\n{p.stderr}")
    return [json.loads(line) for line in open(metrics)]


def second_corpus(bs, d):
    """The regular files of /usr/share/common-licenses (base-files), prepared byte-level like KJV."""
    src = os.path.join(d, "licenses")
    os.makedirs(src)
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.isfile(path) and not os.path.islink(path):
            shutil.copy(path, src)
    subprocess.run([bs, "prepare", "--in", src, "--out", os.path.join(d, "lic")], check=True, capture_output=True)
    return os.path.join(d, "lic"), sorted(os.listdir(src))


def fine_tune(bs, data, d, name, base, batch, extra):
    """Fine-tune base at this global batch for TOKENS tokens: the validation curve, state bytes, tokens/s."""
    steps = TOKENS // (batch * SEQ)
    rows = run(bs, data, d, name, ["--init-from", base, "--micro-batch", str(MICRO), "--global-batch", str(batch),
                                   "--steps", str(steps), "--warmup-tokens", str(TOKENS // 32),
                                   "--eval-every", str(max(1, steps // EVALS))] + extra)
    curve = [(r["tokens"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    return dict(batch=batch, steps=steps, accumulation=rows[-1]["accumulation"], curve=curve,
                val_loss=curve[-1][1], state_bytes=rows[-1]["state_bytes"])


def speeds(bs, data, d, base, runs):
    """Median tokens/s per step of each run at COMPARE_BATCH: SPEED_ROUNDS rounds of SPEED_STEPS steps, the runs
    interleaved within each round so that the load of a shared machine hits them alike."""
    per_step = {name: [] for name in runs}
    for _ in range(SPEED_ROUNDS):
        for name, extra in runs.items():
            rows = run(bs, data, d, "speed", ["--init-from", base, "--micro-batch", str(MICRO), "--global-batch",
                                              str(COMPARE_BATCH), "--steps", str(SPEED_STEPS), "--eval-every", "0"]
                       + extra)
            per_step[name] += [r["tokens_per_s"] for r in rows[1:]]
    return {name: statistics.median(v) for name, v in per_step.items()}


def plot(results, start, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: skipped (Debian's python3-matplotlib is not installed)")
        return
    for r in results.values():
        tokens, loss = zip(*([(0, start)] + r["curve"]))
        plt.plot(tokens, loss, marker="o", label=f"batch {r['batch']}")
    plt.xlabel("fine-tuning tokens")
    plt.ylabel("validation loss (licenses)")
    plt.title("LoRA rank 8 over a KJV-trained model")
    plt.legend()
    plt.savefig(path, dpi=100)
    print(f"plot: {path}")


def print_curves(results, start):
    marks = [TOKENS // 8, TOKENS // 4, TOKENS // 2, TOKENS]
    print(f"\nLoRA fine-tuning on licenses, {TOKENS:,} tokens per batch size; validation loss before: {start:.4f}")
    print(f"{'batch':>5} {'steps':>6} {'accum':>5} " + " ".join(f"{f'@{t:,}':>10}" for t in marks))
    for r in results.values():
        at = dict(r["curve"])
        print(f"{r['batch']:>5} {r['steps']:>6} {r['accumulation']:>5} " +
              " ".join(f"{at[t]:>10.4f}" if t in at else f"{'-':>10}" for t in marks))


def print_memory(rows):
    lora = rows["lora"]
    print(f"\nat batch {COMPARE_BATCH}: state bytes (parameters + gradients + optimizer), tokens/s (median step of "
          f"{SPEED_ROUNDS} interleaved rounds of {SPEED_STEPS} steps; noisy), final validation loss")
    print(f"{'run':<18} {'state bytes':>12} {'vs full':>8} {'tokens/s':>9} {'vs lora':>8} {'val loss':>9} "
          f"{'vs lora':>10}")
    for name, r in rows.items():
        print(f"{name:<18} {r['state_bytes']:>12,} {r['state_bytes'] / rows['full fine-tune']['state_bytes']:>8.1%} "
              f"{r['tokens_per_s']:>9.0f} {r['tokens_per_s'] / lora['tokens_per_s']:>8.2f} {r['val_loss']:>9.4f} "
              f"{r['val_loss'] / lora['val_loss'] - 1:>+10.2e}")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    with tempfile.TemporaryDirectory() as d:
        kjv = corpus(bs, d)
        lic, files = second_corpus(bs, d)
        base = os.path.join(d, "base.bin")
        base_rows = run(bs, kjv, d, "base", ["--layers", "4", "--heads", "4", "--channels", "128", "--micro-batch",
                                             "8", "--steps", str(STEPS), "--lr", "1e-3", "--warmup", "20",
                                             "--eval-every", str(STEPS), "--save-model", base])
        print(f"base: {STEPS} steps on KJV, validation loss {base_rows[-1]['val_loss']:.4f}; second corpus: "
              f"{len(files)} files of {LICENSES} (base-files)")
        start = run(bs, lic, d, "start", ["--init-from", base, "--micro-batch", str(MICRO), "--steps", "1",
                                          "--eval-every", "1", "--lr", "0", "--min-lr", "0"] + LORA[:4])[-1]["val_loss"]
        curves = {b: fine_tune(bs, lic, d, f"lora{b}", base, b, LORA) for b in BATCHES}
        runs = {"lora": LORA, "full fine-tune": FULL, "lora, bf16 base": LORA + ["--base-weights", "bf16"],
                "lora, int8 base": LORA + ["--base-weights", "int8"]}
        compare = {name: curves[COMPARE_BATCH] if name == "lora" else
                   fine_tune(bs, lic, d, name.replace(" ", "_"), base, COMPARE_BATCH, extra)
                   for name, extra in runs.items()}
        for name, tokens_per_s in speeds(bs, lic, d, base, runs).items():
            compare[name] = dict(compare[name], tokens_per_s=tokens_per_s)
    print_curves(curves, start)
    print_memory(compare)
    plot(curves, start, os.path.join(os.path.dirname(os.path.abspath(out_json)), "lora.png"))
    with open(out_json, "w") as f:
        json.dump(dict(config=dict(base_steps=STEPS, tokens=TOKENS, batches=BATCHES, micro_batch=MICRO, lora=LORA,
                                   full=FULL, corpus=LICENSES, files=files),
                       base_val_loss=base_rows[-1]["val_loss"], start_val_loss=start,
                       curves={str(b): r for b, r in curves.items()}, compare=compare, machine=machine), f, indent=1)


if __name__ == "__main__":
    main()
