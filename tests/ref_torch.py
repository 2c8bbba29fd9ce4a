#!/usr/bin/python3
"""ref_torch.py: the C engine against an independent PyTorch GPT-2.

1. Forward/backward: for several shapes (including V not a multiple of 64,
   T not a power of two, one layer, one head) the logits, the loss and every
   parameter gradient of `gpt_dump` equal PyTorch's (float32).
2. Training: `batchscale train` for 10 AdamW steps with clipping, warm-up and
   cosine decay gives the loss sequence, the gradient norms and the final
   weights of torch.optim.AdamW with clip_grad_norm_ and the same schedule.
   The clip threshold lies inside the range of the run's gradient norms, so
   both paths are covered: steps where clipping scales the gradient and steps
   where the norm is below the threshold and the gradient is used as it is
   (the test fails unless both kinds occur, and unless every norm is clear of
   the threshold, so C and PyTorch take the same branch on every step).

Tolerance: max |c - t| / max |t| per tensor <= 1e-5 (forward/backward), and
1e-5 relative for the 10 losses. The trained weights are compared with a
float64 PyTorch run at 1e-5, or at twice torch float32's own distance from
float64 where float32 rounding alone exceeds 1e-5 (the key bias, whose exact
gradient is zero: Adam turns its float noise into full-size steps).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt as tg  # noqa: E402

torch.set_num_threads(1)
failures = []


def rel_err(c, t):
    c = np.asarray(c, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    return float(np.max(np.abs(c - t)) / max(np.max(np.abs(t)), 1e-30))


def check(label, err, tol):
    ok = err <= tol
    print(f"  {'ok  ' if ok else 'FAIL'} {label}: {err:.2e} (tol {tol:.0e})")
    if not ok:
        failures.append(label)


def check_forward_backward(dump, cfg, B, T, seed, tmp):
    print(f"config L={cfg['L']} H={cfg['H']} C={cfg['C']} V={cfg['V']} maxT={cfg['maxT']} B={B} T={T}")
    p = tg.init_params(cfg, seed)
    model_path = os.path.join(tmp, "model.bin")
    tg.write_model(model_path, cfg, p)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg["V"], (B, T + 1), generator=g)
    idx, tgt = tokens[:, :-1], tokens[:, 1:]
    idx.numpy().astype(np.int32).tofile(os.path.join(tmp, "in.bin"))
    tgt.numpy().astype(np.int32).tofile(os.path.join(tmp, "tg.bin"))
    out = os.path.join(tmp, "out.bin")
    subprocess.run([dump, model_path, os.path.join(tmp, "in.bin"), os.path.join(tmp, "tg.bin"), str(B), str(T), out],
                   check=True)
    got = np.fromfile(out, dtype=np.float32)

    params = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    logits, loss = tg.forward(cfg, params, idx, tgt)
    loss.backward()

    pos = 0
    n = B * T * cfg["V"]
    check("logits", rel_err(got[pos:pos + n], logits.detach().numpy().ravel()), 1e-5)
    pos += n
    check("loss", abs(got[pos] - loss.item()) / loss.item(), 1e-6)
    pos += 1
    for name, _, _ in tg.TENSORS:
        grad = params[name].grad.numpy().ravel()
        check(f"grad {name}", rel_err(got[pos:pos + grad.size], grad), 1e-5)
        pos += grad.size
    assert pos == got.size, f"dump has {got.size} floats, expected {pos}"


def check_training(batchscale, tmp):
    cfg = dict(L=2, H=2, C=32, V=70, maxT=24)
    B, T, steps = 4, 24, 10
    # measured on this problem: the pre-clip gradient norms run from 0.60 to 0.83 over the 10 steps; 0.72 clips
    # steps 1, 2 and 4 and leaves the other seven unclipped (the smallest margin to the threshold is 3.7%)
    lr, min_lr, warmup, wd, clip = 3e-3, 3e-4, 3, 0.1, 0.72
    print(f"training: 10 AdamW steps, L=2 H=2 C=32 V=70 T=24 B=4, clip {clip}, warm-up {warmup}, cosine to {min_lr}")
    p = tg.init_params(cfg, 7)
    model_path = os.path.join(tmp, "init.bin")
    tg.write_model(model_path, cfg, p)
    g = torch.Generator().manual_seed(11)
    stream = torch.randint(0, cfg["V"], (steps * B * T + 1,), generator=g)
    shard = os.path.join(tmp, "train.bin")
    tg.write_shard(shard, stream.numpy())
    final = os.path.join(tmp, "final.bin")
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = [batchscale, "train", "--init-from", model_path, "--data", shard, "--data-order", "sequential",
           "--seq-len", str(T), "--micro-batch", str(B), "--global-batch", str(B), "--steps", str(steps),
           "--lr", str(lr), "--min-lr", str(min_lr), "--warmup", str(warmup), "--weight-decay", str(wd),
           "--grad-clip", str(clip), "--eval-every", "0", "--sample-every", "0", "--sample-tokens", "0",
           "--threads", "1", "--metrics", metrics, "--save-model", final, "--quiet"]
    subprocess.run(cmd, check=True)
    import json
    c_lines = [json.loads(line) for line in open(metrics)]
    c_losses = [m["loss"] for m in c_lines]
    c_norms = [m["grad_norm"] for m in c_lines]

    def torch_run(dtype):
        params = {k: v.clone().to(dtype).requires_grad_(True) for k, v in p.items()}
        opt = torch.optim.AdamW(tg.param_groups(params, lr, wd), lr=lr, betas=(0.9, 0.95), eps=1e-8)
        losses, norms = [], []
        for step in range(steps):
            pos = step + 1
            if pos <= warmup:
                cur = lr * pos / warmup
            else:
                cur = min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * (pos - warmup) / (steps - warmup)))
            for group in opt.param_groups:
                group["lr"] = cur
            # sequential order: sequence s is tokens [s*T, s*T + T + 1)
            idx = torch.stack([stream[(step * B + b) * T:(step * B + b) * T + T] for b in range(B)])
            tgt = torch.stack([stream[(step * B + b) * T + 1:(step * B + b) * T + T + 1] for b in range(B)])
            opt.zero_grad()
            _, loss = tg.forward(cfg, params, idx, tgt)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(list(params.values()), clip)  # the norm before clipping
            opt.step()
            losses.append(loss.item())
            norms.append(norm.item())
        return params, losses, norms

    params, t_losses, t_norms = torch_run(torch.float32)
    params64, t64_losses, _ = torch_run(torch.float64)
    clipped = [s + 1 for s, n in enumerate(t_norms) if n > clip]
    unclipped = [s + 1 for s, n in enumerate(t_norms) if n <= clip]
    print(f"  gradient norms {min(t_norms):.3f}..{max(t_norms):.3f}: clipped at steps {clipped}, unclipped at {unclipped}")
    if not clipped or not unclipped:
        failures.append(f"clip {clip} must leave some steps clipped and some not (clipped {clipped}, unclipped "
                        f"{unclipped}); the check would not cover both paths")
    margin = min(abs(n - clip) / clip for n in t_norms)
    if margin < 1e-3:
        failures.append(f"a gradient norm lies within {margin:.1e} of the clip threshold: C and PyTorch may take "
                        "different branches; choose another threshold")
    if len(c_losses) != steps:
        failures.append(f"expected {steps} losses, got {len(c_losses)}")
    check("loss sequence", max(abs(a - b) / b for a, b in zip(c_losses, t_losses)), 1e-5)
    check("gradient norm sequence (before clipping)", max(abs(a - b) / b for a, b in zip(c_norms, t_norms)), 1e-5)
    _, final_p = tg.read_model(final)
    for name, _, _ in tg.TENSORS:
        c_err = rel_err(final_p[name].numpy(), params64[name].detach().numpy())
        t_err = rel_err(params[name].detach().numpy(), params64[name].detach().numpy())
        ct_err = rel_err(final_p[name].numpy(), params[name].detach().numpy())
        # float32 rounding alone moves torch32 away from float64 by t_err; the key
        # bias (exactly zero gradient in exact arithmetic, so Adam amplifies its
        # float noise) is the one tensor where that exceeds 1e-5.
        tol = max(1e-5, 2 * t_err)
        print(f"  {name}: C vs torch32 {ct_err:.2e}, torch32 vs f64 {t_err:.2e}")
        check(f"trained {name} (vs float64)", c_err, tol)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--batchscale", required=True)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    configs = [
        (dict(L=2, H=4, C=64, V=128, maxT=32), 3, 32),   # plain
        (dict(L=1, H=1, C=24, V=101, maxT=20), 2, 13),   # one layer, one head, V % 64 != 0, odd T < maxT
        (dict(L=3, H=3, C=48, V=67, maxT=80), 2, 80),    # T = 80, not a power of two; T > attention block
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (cfg, B, T) in enumerate(configs):
            check_forward_backward(args.dump, cfg, B, T, 100 + i, tmp)
        if not args.skip_training:
            check_training(args.batchscale, tmp)
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("all reference checks passed")


if __name__ == "__main__":
    main()
