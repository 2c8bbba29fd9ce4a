#!/usr/bin/python3
"""test_bf16_model.py: the model in bf16 (--precision bf16: matmuls take bf16
weights and inputs, accumulate in fp32; LayerNorm, softmax, GELU, loss and
masters fp32) against the fp32 path and against PyTorch's bf16 autocast on
CPU (Debian's python3-torch), on the shapes of the fp32 reference check.

Tolerance: max |a - b| / max |b| per tensor <= 1e-2 (the issue's "about
1e-2"). bf16 keeps 8 significant bits, so each matmul input moves by up to
2^-9 of itself (2e-3 relative); a few layers of matmuls, LayerNorms and
softmaxes compound that to a few 1e-3, which is also the measured distance
between PyTorch's own bf16 autocast and its fp32 on the same inputs
(printed beside ours). Autocast also runs attention's two matmuls in bf16,
which this engine keeps in fp32, so the two bf16 results differ from each
other by about as much as each differs from fp32.

One matmul path per run (--path; CTest bf16_model and bf16_model_onednn):
onednn is oneDNN's bf16 primitives (emulated on an AVX-512 CPU without bf16
arithmetic; on a CPU below AVX-512 oneDNN 2.6 has none, and this run prints
why and exits 77, counted as skipped), widen is fp32 sgemm on the bf16
values: the same bf16 operands, so they differ only in fp32 summation order.
Where torch's own bf16 autocast cannot run (its oneDNN has no bf16 matmul
below AVX-512 either), the comparison with it is skipped, said so, and the
comparison with fp32 still runs. Where it runs but its fallback gemm
accumulates in bf16 (an AVX2-only AMD EPYC: its gradients are then 2-7e-2
from fp32, ours 2-6e-3), autocast's matmuls are emulated in torch's fp32
kernels on bf16-rounded operands with bf16 results (tests/torch_bf16.py),
said so, and compared with as with autocast itself.
"""
import contextlib
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt as tg  # noqa: E402
from bf16_probe import onednn_or_skip  # noqa: E402
from torch_bf16 import EmulatedAutocastMatmul, fp32_accumulation_breaks  # noqa: E402

torch.set_num_threads(1)
TOL = 1e-2
failures = []


def rel(c, t):
    c, t = np.asarray(c, np.float64), np.asarray(t, np.float64)
    return float(np.max(np.abs(c - t)) / max(np.max(np.abs(t)), 1e-30))


def dump(exe, tmp, model_path, B, T, bf16):
    """bf16: None (fp32), or the matmul path, onednn or widen."""
    out = os.path.join(tmp, f"out-{bf16 or 'fp32'}.bin")
    args = [exe, model_path, os.path.join(tmp, "in.bin"), os.path.join(tmp, "tg.bin"), str(B), str(T), out]
    subprocess.run(args + ([f"bf16-{bf16}"] if bf16 else []), check=True)
    return np.fromfile(out, dtype=np.float32)


def torch_run(cfg, p, idx, tgt, autocast, emulate=False):
    """The flat results of torch's forward/backward; None where its bf16 autocast cannot run on this CPU.
    emulate: autocast's matmuls in fp32 kernels on bf16 operands (where torch's bf16 gemm is not fp32's)."""
    params = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    matmuls = EmulatedAutocastMatmul() if emulate else contextlib.nullcontext()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), matmuls:
            logits, loss = tg.forward(cfg, params, idx, tgt)
    except RuntimeError as e:
        if not autocast:
            raise
        print(f" torch {torch.__version__}'s bf16 autocast cannot run on this CPU ({e}): not compared with it")
        return None
    loss.float().backward()
    flat = [logits.float().detach().numpy().ravel(), np.array([loss.item()], np.float32)]
    flat += [params[n].grad.float().numpy().ravel() for n, _, _ in tg.TENSORS]
    return np.concatenate(flat)


def split(flat, cfg, B, T):
    names, sizes = ["logits", "loss"], [B * T * cfg["V"], 1]
    for name, per_layer, shape in tg.TENSORS:
        names.append("grad " + name)
        sizes.append(int(np.prod(shape(cfg))) * (cfg["L"] if per_layer else 1))
    out, pos = {}, 0
    for n, k in zip(names, sizes):
        out[n] = flat[pos:pos + k]
        pos += k
    assert pos == flat.size
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--driver", required=True, help="bf16_driver (its probe says whether oneDNN runs bf16 here)")
    ap.add_argument("--path", required=True, choices=("widen", "onednn"))
    args = ap.parse_args()
    if args.path == "onednn":
        onednn_or_skip(args.driver, "bf16_model_onednn")
    try:
        broken = fp32_accumulation_breaks()
        emulate = broken is not None
        if emulate:
            print(f" {broken}: compared with autocast whose matmuls are emulated in fp32 kernels "
                  "on bf16 operands, with bf16 results")
    except RuntimeError:
        emulate = False  # torch_run says it cannot run
    configs = [(dict(L=2, H=4, C=64, V=128, maxT=32), 3, 32), (dict(L=3, H=3, C=48, V=67, maxT=80), 2, 80)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (cfg, B, T) in enumerate(configs):
            print(f"config L={cfg['L']} H={cfg['H']} C={cfg['C']} V={cfg['V']} B={B} T={T}")
            p = tg.init_params(cfg, 200 + i)
            model_path = os.path.join(tmp, "model.bin")
            tg.write_model(model_path, cfg, p)
            g = torch.Generator().manual_seed(300 + i)
            tokens = torch.randint(0, cfg["V"], (B, T + 1), generator=g)
            idx, tgt = tokens[:, :-1], tokens[:, 1:]
            idx.numpy().astype(np.int32).tofile(os.path.join(tmp, "in.bin"))
            tgt.numpy().astype(np.int32).tofile(os.path.join(tmp, "tg.bin"))
            c32 = split(dump(args.dump, tmp, model_path, B, T, None), cfg, B, T)
            t16 = torch_run(cfg, p, idx, tgt, True, emulate)
            t16 = split(t16, cfg, B, T) if t16 is not None else None
            t32 = split(torch_run(cfg, p, idx, tgt, False), cfg, B, T)
            c16 = split(dump(args.dump, tmp, model_path, B, T, args.path), cfg, B, T)
            print(f" matmuls on {args.path}")
            for name in c16:
                a = rel(c16[name], c32[name])
                b, own = (rel(c16[name], t16[name]), rel(t16[name], t32[name])) if t16 else (0.0, float("nan"))
                ok = a <= TOL and b <= TOL and a > 0
                vs_torch = f"vs torch bf16 {b:.1e}  (torch bf16 vs fp32 {own:.1e})" if t16 else "vs torch bf16 -"
                print(f"  {'ok  ' if ok else 'FAIL'} {name:14} bf16 vs fp32 {a:.1e}  {vs_torch}")
                if not ok:
                    failures.append(f"{name} (config {i}, {args.path})")
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("bf16 checks passed")


if __name__ == "__main__":
    main()
