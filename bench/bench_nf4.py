#!/usr/bin/env python3
"""bench_nf4.py: QLoRA's memory (issue 42): LoRA over a 124M-class frozen
base (GPT-2 small's shape: L=12 H=12 C=768, V=50257; a seeded random model
saved as an llm.c file, since no pretrained weights ship here) kept in fp32,
bf16 or NF4 (--base-weights), rank-8 adapters on all four linear layers,
fine-tuned on byte-level KJV at sequence 32, batch 1 (BS_BENCH_NF4_STEPS
steps, default 200, lr 1e-3 after 20 warm-up steps).

Printed: each run's peak resident memory (ru_maxrss of the process, measured
by a parent that runs nothing else) and its ratio to the fp32 base's; the
loss after the last step (a validation loss over 16 batches) of the NF4 and
bf16 bases and their relative gap; the bytes the frozen base holds
(state_bytes - the adapters' state). The fp32 run's memory is taken from a
3-step run (the peak is reached in the first step: nothing is allocated
inside the loop). The three runs go at once, one thread each: only memory
and losses are reported, which do not depend on the machine's load. With a
reduced base wte (50304 x 768 with its padding) is kept in bf16 (74 MiB, 147
in fp32); wpe, LayerNorms and biases stay fp32; one fp32 scratch of one
block of rows (64 of a linear weight or 256 of wte's: 0.75 MiB) holds what
the frozen matmul in progress dequantized. What every run holds alike
(activations, logits, the adapters' state, libraries: about 67 MiB) is most
of the rest (docs/PERFORMANCE.md).
usage: bench_nf4.py BATCHSCALE OUT_JSON"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_fp8 import corpus  # noqa: E402

STEPS = int(os.environ.get("BS_BENCH_NF4_STEPS", os.environ.get("BS_BENCH_STEPS", 200)))
SHAPE = ["--layers", "12", "--heads", "12", "--channels", "768", "--vocab-size", "50257", "--seq-len", "32"]
COMMON = ["--micro-batch", "1", "--global-batch", "1", "--sample-tokens", "0", "--threads", "1", "--quiet"]
LORA = ["--lora-rank", "8", "--lora-alpha", "16", "--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "20"]
PROBE = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def start(bs, data, d, name, extra):
    """One training run under the memory probe, started."""
    metrics = os.path.join(d, name + ".jsonl")
    cmd = [bs, "train", "--data", os.path.join(data, "train_000000.bin"), "--val-data",
           os.path.join(data, "val_000000.bin"), "--metrics", metrics] + SHAPE + COMMON + extra
    return subprocess.Popen([sys.executable, "-c", PROBE] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1")), metrics


def finish(name, started):
    """Its metrics rows and peak resident MB."""
    p, metrics = started
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"bench_nf4: {name} failed (exit {p.returncode}):\n{err}")
    return [json.loads(line) for line in open(metrics)], int(out.split()[-1]) / 1024


def main():
    bs, out = sys.argv[1], sys.argv[2]
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    with tempfile.TemporaryDirectory() as d:
        data = corpus(bs, d)
        base = os.path.join(d, "base124.bin")
        subprocess.run([bs, "train", "--data", os.path.join(data, "train_000000.bin"), "--steps", "1", "--lr", "0",
                        "--min-lr", "0", "--eval-every", "0", "--save-model", base] + SHAPE + COMMON,
                       check=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
        begin = ["--init-from", base] + LORA
        runs = {kind: start(bs, data, d, kind, begin + ["--base-weights", kind, "--steps", str(steps),
                                                         "--eval-every", str(steps), "--val-batches", "16"])
                for kind, steps in (("fp32", 3), ("bf16", STEPS), ("nf4", STEPS))}
        rows = {}
        for kind, started in runs.items():
            m, rss = finish(kind, started)
            last = m[-1]
            steps = last["step"]
            rows[kind] = {"peak_rss_mb": rss, "steps": steps, "val_loss": last.get("val_loss"),
                          "loss": last["loss"], "state_bytes": last["state_bytes"]}
        fp32 = rows["fp32"]["peak_rss_mb"]
        print(f"LoRA rank 8 over a 124M-class base (L=12 C=768 V=50257), seq 32, batch 1, {STEPS} steps:")
        print(f"{'base':6} {'peak RSS MB':>12} {'vs fp32':>8} {'state bytes':>12} {'val loss':>9}")
        for kind, r in rows.items():
            r["rss_vs_fp32"] = r["peak_rss_mb"] / fp32
            loss = f"{r['val_loss']:.4f}" if r["val_loss"] is not None and r["steps"] == STEPS else "-"
            print(f"{kind:6} {r['peak_rss_mb']:12.0f} {r['rss_vs_fp32']:8.2f} {r['state_bytes']:12d} {loss:>9}")
        gap = rows["nf4"]["val_loss"] / rows["bf16"]["val_loss"] - 1
        print(f"NF4 vs bf16 base after {STEPS} steps: validation loss {gap:+.2%}; peak memory "
              f"{rows['nf4']['rss_vs_fp32']:.2f}x the fp32 base's")
        result = {"steps": STEPS, "runs": rows, "nf4_vs_bf16_val_loss": gap, "machine": machine}
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
