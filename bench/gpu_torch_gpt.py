#!/usr/bin/python3
"""gpu_torch_gpt.py: the PyTorch peer of `batchscale train --device cuda`: the
project's GPT-2 (tests/torch_gpt.py: tanh GELU, scaled_dot_product_attention)
on one CUDA GPU with fused AdamW (clipping at 1.0), in fp32 (TF32 off) or with
bf16 autocast, eager or torch.compile, on random tokens. Prints one JSON line
per mode: tokens/s and ms per step (median of the steps after the first
`warmup`), and MFU: 6 N + 12 L C T FLOPs per token (N the parameters without
wpe, the attention's score and value products counted whole, causal or not)
against the GPU's dense peak for the mode (the peaks table below; unknown GPU:
mfu null), and peak_memory_bytes: torch.cuda.max_memory_allocated over the
mode's steps (the tensors PyTorch's allocator handed out; not its cache nor
the CUDA context). The model's shape comes from --L --H --C --V --T (GPT-2
124M by default; gpu-check.sh also runs L24 H16 C2048 T2048, 1.3B-class),
the micro-batch from --B. Without a CUDA GPU it says so in one line and exits
0; --device cpu runs the eager modes on the CPU instead (its own test: tiny
shapes, mfu and peak memory null, no fused AdamW).
usage: gpu_torch_gpt.py [--modes eager-fp32,eager-bf16,compile-bf16] [--steps N] [--L 12 --H 12 --C 768 --V 50257
                         --T 1024 --B 8] [--device cuda|cpu]"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests")]
import torch  # noqa: E402

import torch_gpt as tg  # noqa: E402

# Dense (no sparsity) peaks in TFLOP/s: NVIDIA's data sheets, SXM parts. fp32 is the CUDA cores' rate (TF32 off);
# fp8 the FP8 tensor cores' (E4M3/E5M2), which batchscale's --precision fp8 rows are measured against.
PEAKS = {"H100": {"bf16": 989.4, "fp32": 66.9, "fp8": 1978.9}, "H200": {"bf16": 989.4, "fp32": 66.9, "fp8": 1978.9},
         "A100": {"bf16": 312.0, "fp32": 19.5}}


def peak(name, precision):
    for key, rates in PEAKS.items():
        if key in name:
            return rates.get(precision)
    return None


def flops_per_token(cfg):
    L, C, V, T = cfg["L"], cfg["C"], cfg["V"], cfg["maxT"]
    n = V * C + L * (12 * C * C + 13 * C) + 2 * C  # wte (tied head), the layers, lnf
    return 6 * n + 12 * L * C * T


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def measure(cfg, B, steps, warmup, precision, compiled, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = device == "cuda"
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    params = {k: v.to(device).requires_grad_(True) for k, v in tg.init_params(cfg, 0).items()}
    fused = dict(fused=True) if gpu else {}  # PyTorch's fused AdamW runs on CUDA only
    opt = torch.optim.AdamW(tg.param_groups(params, 1e-3, 0.1), lr=1e-3, **fused)
    fwd = torch.compile(tg.forward, static_argnums=(0,)) if compiled else tg.forward
    gen = torch.Generator(device=device).manual_seed(0)
    times = []
    for _ in range(steps):
        tokens = torch.randint(0, cfg["V"], (B, cfg["maxT"] + 1), generator=gen, device=device)
        sync(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = fwd(cfg, params, tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        sync(device)
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times[warmup:]) * 1e3
    tokens_per_s = B * cfg["maxT"] / ms * 1e3
    p = peak(torch.cuda.get_device_name(), precision) if gpu else None
    mfu = tokens_per_s * flops_per_token(cfg) / (p * 1e12) if p else None
    return dict(tokens_per_s=tokens_per_s, ms_per_step=ms, mfu=mfu, loss=float(loss),
                peak_memory_bytes=torch.cuda.max_memory_allocated() if gpu else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="eager-fp32,eager-bf16,compile-bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    for k, v in dict(L=12, H=12, C=768, V=50257, T=1024, B=8).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU visible to torch; nothing measured")
        return
    cfg = dict(L=a.L, H=a.H, C=a.C, V=a.V, maxT=a.T)
    for mode in a.modes.split(","):
        how, precision = mode.split("-")
        if how == "compile" and not hasattr(torch, "compile"):
            print(json.dumps(dict(peer="pytorch", mode=mode, skipped=f"torch {torch.__version__} has no torch.compile")))
            continue
        r = measure(cfg, a.B, a.steps, a.warmup, precision, how == "compile", a.device)
        gpu = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
        print(json.dumps(dict(peer="pytorch", mode=mode, gpu=gpu, torch=torch.__version__,
                              L=a.L, H=a.H, C=a.C, V=a.V, T=a.T, B=a.B, flops_per_token=flops_per_token(cfg), **r)),
              flush=True)


if __name__ == "__main__":
    main()
