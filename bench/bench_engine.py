#!/usr/bin/env python3
"""bench_engine.py: the engine benchmark (issue: training engine).

Trains L=6 H=6 C=384 V=8192 T=256 micro-batch 8 on random tokens and prints,
from one run, tokens/s and achieved GFLOP/s (6 x params + 12 x L x C x T per
token) for batchscale, the current PyTorch (PyPI, in its own virtual
environment) and Debian's PyTorch 1.13, at 1 and 2 threads, beside the
OpenBLAS sgemm rate on the model's largest matmul (the logits: 2048 x 8192 x
384). Also --precision bf16 on the path this CPU gets (auto) and with oneDNN's
bf16 primitives forced (--bf16-matmul onednn; emulated on a CPU without bf16
arithmetic). Ratios are printed; nothing is asserted. Results also go to a
JSON file.
usage: bench_engine.py BATCHSCALE OUT_JSON [VENV_PYTHON]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scaling import write_shard  # noqa: E402

L, H, C, V, T, B = 6, 6, 384, 8192, 256, 8
STEPS = 12
HERE = os.path.dirname(os.path.abspath(__file__))


def flops_per_token():
    params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * params + 12 * L * C * T


def env_for(threads):
    # Debian's OpenBLAS misdetects this virtual CPU as Prescott; batchscale
    # fixes that itself, and the peers get the same fix so the comparison is fair.
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads), OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "SkylakeX"))


def run_batchscale(bs, shard, threads, tmp, extra=()):
    metrics = os.path.join(tmp, f"m{threads}{len(extra)}.jsonl")
    subprocess.run([bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
                    "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(B), "--steps", str(STEPS),
                    "--eval-every", "0", "--sample-tokens", "0", "--threads", str(threads), "--metrics", metrics,
                    "--quiet"] + list(extra), check=True, env=env_for(threads))
    ms = statistics.median(json.loads(line)["ms"] for line in list(open(metrics))[2:])
    return dict(tokens_per_s=B * T / ms * 1e3, ms_per_step=ms)


def run_torch(python, threads):
    out = subprocess.run([python, os.path.join(HERE, "torch_peer.py"), str(threads), str(STEPS), str(L), str(H),
                          str(C), str(V), str(T), str(B)], check=True, capture_output=True, text=True,
                         env=env_for(threads))
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_gemm(bs, threads):
    out = subprocess.run([bs, "bench", "gemm", "--m", str(B * T), "--n", str(V), "--k", str(C), "--threads",
                          str(threads)], check=True, capture_output=True, text=True, env=env_for(threads)).stdout
    return float(out.split(":")[1].split("GFLOP/s")[0])


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    venv_python = sys.argv[3] if len(sys.argv) > 3 else None
    fpt = flops_per_token()
    results = {"config": dict(L=L, H=H, C=C, V=V, T=T, B=B, flops_per_token=fpt), "threads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        for threads in (1, 2):
            row = {"batchscale": run_batchscale(bs, shard, threads, tmp), "sgemm_gflops": run_gemm(bs, threads),
                   "batchscale_bf16": run_batchscale(bs, shard, threads, tmp, ["--precision", "bf16"]),
                   "batchscale_bf16_onednn": run_batchscale(bs, shard, threads, tmp,
                                                            ["--precision", "bf16", "--bf16-matmul", "onednn"])}
            row["torch_debian"] = run_torch("/usr/bin/python3", threads)
            if venv_python:
                row["torch_pypi"] = run_torch(venv_python, threads)
            results["threads"][threads] = row
    print(f"engine benchmark: GPT L={L} H={H} C={C} V={V} T={T} B={B}, {fpt / 1e6:.1f} MFLOP/token (attention counted in full)")
    print(f"{'threads':>7} {'system':<24} {'tokens/s':>9} {'GFLOP/s':>8} {'vs sgemm':>9} {'bs speed-up':>11}")
    for threads, row in results["threads"].items():
        ours = row["batchscale"]["tokens_per_s"]
        entries = [("batchscale", row["batchscale"]), ("batchscale bf16 (auto)", row["batchscale_bf16"]),
                   ("batchscale bf16 oneDNN", row["batchscale_bf16_onednn"])]
        entries += [(f"PyTorch {row[k]['version']}", row[k]) for k in ("torch_pypi", "torch_debian") if k in row]
        for name, e in entries:
            gf = e["tokens_per_s"] * fpt / 1e9
            print(f"{threads:>7} {name:<24} {e['tokens_per_s']:>9.0f} {gf:>8.1f} {gf / row['sgemm_gflops']:>8.0%} "
                  f"{ours / e['tokens_per_s']:>10.2f}x")
        print(f"{threads:>7} {'OpenBLAS sgemm (logits)':<24} {'':>9} {row['sgemm_gflops']:>8.1f}")
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
