#!/usr/bin/env python3
"""bench_engine.py: the engine benchmark (issue: training engine).

Trains L=6 H=6 C=384 V=8192 T=256 micro-batch 8 on random tokens and prints,
from one run, tokens/s and achieved GFLOP/s (6 x params + 12 x L x C x T per
token) for batchscale, the current PyTorch (PyPI, in its own virtual
environment) and Debian's PyTorch 1.13, at 1 and 2 threads, beside the
OpenBLAS sgemm rate on the model's largest matmul (the logits: 2048 x 8192 x
384) from `batchscale bench gemm` and from numpy (Debian's and PyPI's, BLAS
builds batchscale does not call). Also --precision bf16 on the path this CPU
gets (auto) and with oneDNN's bf16 primitives forced (--bf16-matmul onednn;
recorded as skipped, with batchscale's reason, where oneDNN has no bf16
matmul on this CPU). Ratios are printed; nothing is asserted. Results also
go to a JSON file, with the kernels each process ran: "machine" (`batchscale
bench cpu`: CPU model, OpenBLAS core detected/set/in effect, oneDNN ISA),
each batchscale run's bf16 path, the sgemm core, and each peer's own report
(kernel_report.this_process). Debian's OpenBLAS processes get OPENBLAS_CORETYPE
only where batchscale's rule sets it (kernel_report.openblas_env).
usage: bench_engine.py BATCHSCALE OUT_JSON [VENV_PYTHON]"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_scaling import write_shard  # noqa: E402

L, H, C, V, T, B = 6, 6, 384, 8192, 256, 8
STEPS = int(os.environ.get("BS_BENCH_STEPS", 12))  # shorter for a smoke run (run.sh)
HERE = os.path.dirname(os.path.abspath(__file__))


def flops_per_token():
    params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * params + 12 * L * C * T


def env_for(threads):
    """Threads only: batchscale applies its OpenBLAS rule itself, PyPI's PyTorch
    (MKL) and numpy (its own OpenBLAS) detect the CPU themselves; Debian's
    OpenBLAS processes get kernel_report.openblas_env on top."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads))


def run_batchscale(bs, shard, threads, tmp, extra=()):
    """tokens/s, and the bf16 path from the run's precision line; a run batchscale
    refuses (--bf16-matmul onednn where oneDNN has no bf16 matmul) is recorded
    with its message as the reason, not timed."""
    metrics = os.path.join(tmp, f"m{threads}{len(extra)}.jsonl")
    p = subprocess.run([bs, "train", "--data", shard, "--vocab-size", str(V), "--layers", str(L), "--heads", str(H),
                        "--channels", str(C), "--seq-len", str(T), "--micro-batch", str(B), "--steps", str(STEPS),
                        "--eval-every", "0", "--sample-tokens", "0", "--threads", str(threads), "--metrics", metrics,
                        "--log-every", str(STEPS)] + list(extra), capture_output=True, text=True, env=env_for(threads))
    if p.returncode != 0:
        if "--bf16-matmul" in extra:
            return dict(skipped=(p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1])
        raise SystemExit(f"batchscale train {' '.join(extra)} failed:\n{p.stderr}")
    ms = statistics.median(json.loads(line)["ms"] for line in list(open(metrics))[2:])
    precision = next((line.split(":", 1)[1].strip() for line in p.stdout.splitlines()
                      if line.startswith("precision:")), "fp32")
    return dict(tokens_per_s=B * T / ms * 1e3, ms_per_step=ms, precision=precision)


def run_json(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_torch(python, threads, env):
    return run_json([python, os.path.join(HERE, "torch_peer.py"), str(threads), str(STEPS), str(L), str(H), str(C),
                     str(V), str(T), str(B)], env)


def run_numpy_sgemm(python, env):
    return run_json([python, os.path.join(HERE, "numpy_sgemm_peer.py"), str(B * T), str(V), str(C), "10"], env)


def run_gemm(bs, threads):
    """`batchscale bench gemm`: GFLOP/s and the OpenBLAS core that ran it."""
    out = subprocess.run([bs, "bench", "gemm", "--m", str(B * T), "--n", str(V), "--k", str(C), "--threads",
                          str(threads)], check=True, capture_output=True, text=True, env=env_for(threads)).stdout
    return float(out.split(":")[1].split("GFLOP/s")[0]), out.split("core=")[1].split(":")[0]


def measure(bs, shard, threads, tmp, venv_python, m):
    gflops, core = run_gemm(bs, threads)
    row = {"batchscale": run_batchscale(bs, shard, threads, tmp), "sgemm_gflops": gflops, "sgemm_core": core,
           "batchscale_bf16": run_batchscale(bs, shard, threads, tmp, ["--precision", "bf16"]),
           "batchscale_bf16_onednn": run_batchscale(bs, shard, threads, tmp,
                                                    ["--precision", "bf16", "--bf16-matmul", "onednn"])}
    debian = kernel_report.openblas_env(env_for(threads), m)
    row["torch_debian"] = run_torch("/usr/bin/python3", threads, debian)
    row["sgemm_numpy_debian"] = run_numpy_sgemm("/usr/bin/python3", debian)
    if venv_python:
        row["torch_pypi"] = run_torch(venv_python, threads, env_for(threads))
        row["sgemm_numpy_pypi"] = run_numpy_sgemm(venv_python, env_for(threads))
    return row


def peer_kernels(e):
    """What a peer ran, in a few words: OpenBLAS core, or MKL / oneDNN ISA."""
    k = e.get("kernels", {})
    t = k.get("torch", {})
    if t.get("blas") == "mkl":
        isa = re.search(r"\(Intel\(R\) (AVX[^)]*)\)", t.get("mkl_isa") or "")
        mkl = (isa.group(1) if isa else "?") + ("+AMX" if "AMX" in (t.get("mkl_isa") or "") else "")
        return f"MKL {mkl}, ATen {t.get('aten_cpu_capability')}, oneDNN {t.get('onednn_isa')}"
    cores = ",".join(lib["core"] or "?" for lib in k.get("openblas", []))
    return f"OpenBLAS {cores}" + (f", ATen {t['aten_cpu_capability']}" if t else "")


def report(results, fpt):
    print(f"engine benchmark: GPT L={L} H={H} C={C} V={V} T={T} B={B}, {fpt / 1e6:.1f} MFLOP/token (attention counted in full)")
    print(f"{'threads':>7} {'system':<24} {'tokens/s':>9} {'GFLOP/s':>8} {'vs sgemm':>9} {'bs speed-up':>11}  kernels")
    for threads, row in results["threads"].items():
        ours = row["batchscale"]["tokens_per_s"]
        entries = [("batchscale", row["batchscale"]), ("batchscale bf16 (auto)", row["batchscale_bf16"]),
                   ("batchscale bf16 oneDNN", row["batchscale_bf16_onednn"])]
        entries += [(f"PyTorch {row[k]['version']}", row[k]) for k in ("torch_pypi", "torch_debian") if k in row]
        for name, e in entries:
            if "skipped" in e:
                print(f"{threads:>7} {name:<24} skipped: {e['skipped']}")
                continue
            gf = e["tokens_per_s"] * fpt / 1e9
            path = e.get("precision", "").split(" (")[0].replace(" matmuls on", " on")  # "bf16 on onednn-bf16"
            what = f"OpenBLAS {results['machine']['openblas_core']}, {path}" if path else peer_kernels(e)
            print(f"{threads:>7} {name:<24} {e['tokens_per_s']:>9.0f} {gf:>8.1f} {gf / row['sgemm_gflops']:>8.0%} "
                  f"{ours / e['tokens_per_s']:>10.2f}x  {what}")
        print(f"{threads:>7} {'OpenBLAS sgemm (logits)':<24} {'':>9} {row['sgemm_gflops']:>8.1f} {'':>9} {'':>11}  "
              f"batchscale bench gemm, core {row['sgemm_core']}")
        for k in ("sgemm_numpy_pypi", "sgemm_numpy_debian"):
            if k in row:
                e = row[k]
                print(f"{threads:>7} {'numpy ' + e['version'] + ' sgemm':<24} {'':>9} {e['gflops']:>8.1f} {'':>9} "
                      f"{'':>11}  {peer_kernels(e)}")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    venv_python = sys.argv[3] if len(sys.argv) > 3 else None
    fpt = flops_per_token()
    m = kernel_report.machine(bs)
    print(kernel_report.summary(m))
    note = kernel_report.environment_note(m)
    if note:
        print(note)
    results = {"config": dict(L=L, H=H, C=C, V=V, T=T, B=B, flops_per_token=fpt, steps=STEPS), "machine": m,
               "threads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "rand.bin")
        write_shard(shard, V)
        for threads in (1, 2):
            results["threads"][threads] = measure(bs, shard, threads, tmp, venv_python, m)
    report(results, fpt)
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
