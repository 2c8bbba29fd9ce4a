#!/usr/bin/python3
"""test_recompute.py: activation recomputation (--recompute selective|full) trains bit for bit as --recompute none.

usage: test_recompute.py one|layouts|flags|gpu

Recomputation reruns the forward arithmetic it dropped (selective: each layer's attention probabilities from its
kept q, k, v; full: the whole layer from its kept input), so ten AdamW steps must give the same losses and the same
final parameters, every bit, as keeping everything (the issue's criterion). A recomputation that reads a stale
buffer (another layer's probabilities left in the shared copy, say) moves both at once.
- one (unit): one process, fp32 and bf16 (widen: the rounding of the matmul inputs is recomputed too), with packed
  documents masked (--doc-mask on: the recomputed probabilities keep the mask); on --device sim (the device step:
  full reruns each layer's launches; selective is what its flash2 attention does already), and full in bf16 with
  the device's unfused causal attention; fp8 (delayed; full also with the block recipe: the recomputed layer
  quantizes with the step's scales and records no FP8 statistics twice) and MoE layers; LoRA (dropout on
  the adapters' input, an nf4 base: the recomputed layer dequantizes and drops out as forward did).
- layouts: 2 processes, --pp 2 (each stage recomputes its own layers; 1F1B and interleaved, whose micro-batches in
  flight share the recomputed buffers; zbh1's split backward: selective, whose W pass reads no probabilities, and
  full, whose W pass recomputes the layer again, also in fp8), --cp 2 (the recomputed attention runs the ring
  exchange of keys and values again)
  --tp 2 (the recomputed layer's all-reduces run again on both ranks) and --dp 2 --zero 3 (backward gathers each
  layer's parameters once for both its recomputation and its gradients), MoE full over --dp 2 (the recomputed
  layer's router statistics summed over the ranks again, as backward's aux-loss gradient reads them, and not added
  to the step's losses twice) and --ep 2 (the all-to-alls run again), against the same layout without
  recomputation.
- gpu (label gpu, slow tier; skips with the reason where no CUDA GPU runs): the same on --device cuda, fp32 and
  bf16, after none against none (the bitwise claim needs a step that repeats its own bits).
- flags (unit): the combinations not built (on a device, selective with the causal kernel) refused in one line
  naming the flag, before any training; selective on --device sim accepted (its flash2 attention stores no probabilities: selective is what it does).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402

from bstest import SKIP, WORDS, Checks, launch, make_corpus, one_line_error, read_metrics, run, tiny_train_args  # noqa: E402

MODES = ("selective", "full")
SHAPE = ["--layers", "3", "--heads", "2", "--channels", "32", "--seq-len", "32"]
failures = Checks()


def train(tmp, prefix, shape, ranks, mode, model_suffix):
    """Ten steps of the layout tests' job (bstest.layout_run's flags) with --recompute mode: (losses, model bytes)."""
    data = os.path.join(tmp, "data")
    if not os.path.isdir(data):
        make_corpus(tmp)
    metrics, model = prefix + ".jsonl", prefix + model_suffix
    launch(["train", "--data", os.path.join(data, "train_000000.bin")] + list(shape) + [
        "--micro-batch", "2", "--global-batch", "8", "--steps", "10", "--lr", "3e-3", "--warmup", "2", "--eval-every",
        "0", "--sample-tokens", "0", "--threads", "1", "--comm-timeout", "60", "--metrics", metrics, "--save-model",
        model, "--recompute", mode], ranks)
    with open(model, "rb") as f:
        return [m["loss"] for m in read_metrics(metrics) if "loss" in m], f.read()


def same_bits(tmp, tag, shape, ranks=1, modes=MODES):
    """Each mode's ten steps against none's on the same layout: losses and the saved model bitwise."""
    suffix = ".safetensors" if "--experts" in shape else ".bin"  # an llm.c file holds a dense GPT-2 only
    ref_losses, ref_model = train(tmp, os.path.join(tmp, tag + "_none"), shape, ranks, "none", suffix)
    for mode in modes:
        losses, model = train(tmp, os.path.join(tmp, f"{tag}_{mode}"), shape, ranks, mode, suffix)
        failures(len(losses) == 10 and losses == ref_losses, f"{tag} {mode}: 10 losses equal none's bitwise")
        failures(model == ref_model, f"{tag} {mode}: the saved model (final parameters) equals none's bitwise "
                                     f"({len(model)} bytes)")


def sft_data(tmp):
    """Short prompt/response examples packed into windows of 32 tokens (SFT data: several documents a window)."""
    rng = random.Random(0)
    src, out = os.path.join(tmp, "sft.jsonl"), os.path.join(tmp, "sft")
    with open(src, "w") as f:
        for _ in range(400):
            words = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))  # noqa: E731
            f.write(json.dumps({"prompt": words(), "response": words()}) + "\n")
    run(["prepare", "--format", "chat-jsonl", "--in", src, "--out", out, "--val-fraction", "0", "--seq-len", "32",
         "--quiet"])
    return out


def one(tmp):
    same_bits(tmp, "fp32", SHAPE)
    same_bits(tmp, "bf16", SHAPE + ["--precision", "bf16", "--bf16-matmul", "widen"])
    same_bits(tmp, "docs", SHAPE + ["--data", sft_data(tmp), "--doc-mask", "on"])
    same_bits(tmp, "fp8", SHAPE + ["--precision", "fp8"])
    same_bits(tmp, "fp8_block", SHAPE + ["--precision", "fp8", "--fp8-recipe", "block"], modes=("full",))
    same_bits(tmp, "moe", SHAPE + ["--experts", "4"])
    same_bits(tmp, "lora", SHAPE + ["--lora-rank", "4", "--lora-dropout", "0.1", "--base-weights", "nf4"])
    same_bits(tmp, "sim", SHAPE + ["--device", "sim"])
    same_bits(tmp, "sim_bf16_causal", SHAPE + ["--device", "sim", "--precision", "bf16", "--attention", "causal"],
              modes=("full",))
    return 0


def layouts(tmp):
    same_bits(tmp, "pp2", SHAPE + ["--pp", "2"], ranks=2)
    same_bits(tmp, "tp2", SHAPE + ["--tp", "2"], ranks=2)
    same_bits(tmp, "dp2_zero3", SHAPE + ["--zero", "3"], ranks=2)
    same_bits(tmp, "moe_dp2", SHAPE + ["--experts", "4"], ranks=2, modes=("full",))
    same_bits(tmp, "moe_ep2", SHAPE + ["--experts", "4", "--ep", "2"], ranks=2, modes=("full",))
    same_bits(tmp, "pp2_zbh1", SHAPE + ["--pp", "2", "--pp-schedule", "zbh1"], ranks=2)
    same_bits(tmp, "pp2_zbh1_fp8", SHAPE + ["--pp", "2", "--pp-schedule", "zbh1", "--precision", "fp8"], ranks=2,
              modes=("full",))
    same_bits(tmp, "cp2", SHAPE + ["--layers", "2", "--cp", "2", "--seq-len", "256"], ranks=2)
    same_bits(tmp, "pp2_interleaved", SHAPE + ["--layers", "4", "--pp", "2", "--pp-schedule", "interleaved",
                                               "--virtual-stages", "2"], ranks=2)
    return 0


def gpu(tmp):
    """On a CUDA GPU: the device step's full recomputation (and selective, flash2's own) bitwise as on sim; first
    none against itself, since the bitwise claim needs a step that repeats its own bits."""
    data = make_corpus(tmp, nbytes=20_000)
    p = run(tiny_train_args(data, steps=1) + ["--device", "cuda"], check=False)
    if p.returncode != 0:
        print(f"SKIP no CUDA device here: {p.stderr.strip()}")
        return SKIP
    for tag, extra in (("cuda", []), ("cuda_bf16", ["--precision", "bf16"])):
        shape = SHAPE + ["--device", "cuda"] + extra
        again = [train(tmp, os.path.join(tmp, f"{tag}_none{k}"), shape, 1, "none", ".bin") for k in range(2)]
        failures(again[0] == again[1], f"{tag}: none twice gives the same losses and model (the step repeats its bits)")
        same_bits(tmp, tag, shape)
    return 0


def flags(tmp):
    data = make_corpus(tmp, nbytes=20_000)
    refused = [
        (["--recompute", "selective", "--device", "sim", "--attention", "causal"], "--attention flash2"),
        (["--recompute", "some"], "--recompute"),
    ]
    p = run(tiny_train_args(data, steps=1) + ["--recompute", "selective", "--device", "sim"], check=False)
    failures(p.returncode == 0, f"--recompute selective --device sim (flash2: what it does already) runs ({p.returncode})")
    for extra, flag in refused:
        p = run(tiny_train_args(data, steps=1) + extra, check=False)
        line = one_line_error(p)
        failures(p.returncode != 0 and line is not None and flag in line,
                 f"{' '.join(extra)}: one line naming {flag} ({line!r}, exit {p.returncode})")
    return 0


if __name__ == "__main__":
    parts = {"one": one, "layouts": layouts, "flags": flags, "gpu": gpu}
    if len(sys.argv) != 2 or sys.argv[1] not in parts:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as scratch:
        code = parts[sys.argv[1]](scratch)
    print(f"FAILED {len(failures.failed)} check(s)" if failures.failed else "skipped" if code == SKIP else "ok")
    sys.exit(1 if failures.failed else code)
