#!/usr/bin/env python3
"""bench_bf16.py: the bf16 linear layer against fp32 and PyTorch bf16 (issue 8).

For the engine benchmark's matmul shapes (N = B*T = 2048 rows; (IC, OC) of
qkv, attproj, fc, fcproj and the logits), forward and backward, at 1 and 2
threads, in one run:
  bf16      matmul_bf16_forward/backward (src/kernels/matmul_bf16.c) on the
            path this CPU gets (auto), forward including the activation's
            conversion to bf16 as the model will do it; also the oneDNN bf16
            primitives forced, when auto picked the widened-fp32 path (a CPU
            without bf16 arithmetic, where oneDNN emulates it)
  fp32      matmul_forward/backward (OpenBLAS), this project's fp32 layer
  sgemm     `batchscale bench gemm` (forward's sgemm alone)
  torch     the current PyTorch (PyPI, bench venv): torch.matmul on bf16 CPU
            tensors, the same three products
Prints GFLOP/s (2 N IC OC per product) and ratios, then what the matmul
speed-up means for the whole model: with a fraction f of the fp32 step in
these matmuls, step speed-up = 1 / ((1 - f) + f / r), r the FLOP-weighted
matmul speed-up over one step's products. Nothing is asserted. The JSON
records the kernels: "machine" (`batchscale bench cpu`: CPU, OpenBLAS core,
oneDNN ISA), each shape's oneDNN kernel (the driver's "kernel"), and the
PyTorch peer's report ("kernels", kernel_report.this_process, once per
thread count).
usage: bench_bf16.py BATCHSCALE OUT_JSON [VENV_PYTHON]"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_report  # noqa: E402

N = 2048
L = 6
SHAPES = {"qkv": (384, 1152), "attproj": (384, 384), "fc": (384, 1536), "fcproj": (1536, 384), "logits": (384, 8192)}
PER_STEP = {"qkv": L, "attproj": L, "fc": L, "fcproj": L, "logits": 1}  # products per step of each shape
MATMUL_FRACTION = 0.64  # of the fp32 step in sgemm (profile of the engine benchmark, issue 8)
REPS = 7

TORCH_PEER = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[6])
import kernel_report
threads, n, ic, oc, reps = map(int, sys.argv[1:6])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
x = torch.randn(n, ic, generator=g).bfloat16()
w = (0.02 * torch.randn(oc, ic, generator=g)).bfloat16()
d = (0.01 * torch.randn(n, oc, generator=g)).bfloat16()
def median_ms(f):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); f(); times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[reps // 2]
with torch.no_grad():
    fwd = median_ms(lambda: torch.matmul(x, w.t()))
    bwd = median_ms(lambda: (torch.matmul(d, w), torch.matmul(d.t(), x)))
report = kernel_report.this_process() if sys.argv[7] == "1" else None
print(json.dumps({"version": torch.__version__, "fwd_ms": fwd, "bwd_ms": bwd, "kernels": report}))
"""


def env_for(threads):
    """Threads only: the driver applies batchscale's OpenBLAS rule itself (blas_ensure_cpu_kernels), PyPI's
    PyTorch detects the CPU itself (MKL, oneDNN)."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads))


def run_json(cmd, threads, may_refuse=False):
    """The command's last line as JSON; with may_refuse, a failure is {"skipped": its last message line}."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env_for(threads))
    if p.returncode != 0:
        if may_refuse:
            return {"skipped": (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]}
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def sgemm_gflops(bs, threads, ic, oc):
    out = subprocess.run([bs, "bench", "gemm", "--m", str(N), "--n", str(oc), "--k", str(ic), "--threads",
                          str(threads), "--reps", str(REPS)], check=True, capture_output=True, text=True,
                         env=env_for(threads)).stdout
    return float(out.split(":")[1].split("GFLOP/s")[0])


def gflops(ms, products, ic, oc):
    return products * 2.0 * N * ic * oc / (ms * 1e-3) / 1e9


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    venv_python = sys.argv[3] if len(sys.argv) > 3 else None
    driver = os.path.join(os.path.dirname(os.path.abspath(bs)), "tests", "bf16_driver")
    results = {"N": N, "shapes": SHAPES, "machine": kernel_report.machine(bs), "threads": {}}
    print(kernel_report.summary(results["machine"]))
    note = kernel_report.environment_note(results["machine"])
    if note:
        print(note)
    for threads in (1, 2):
        rows = {}
        for name, (ic, oc) in SHAPES.items():
            auto = run_json([driver, "bench", "auto", str(N), str(ic), str(oc), str(REPS)], threads)
            row = {"auto": auto, "sgemm_gflops": sgemm_gflops(bs, threads, ic, oc)}
            if auto["path"] != "onednn-bf16":
                row["onednn"] = run_json([driver, "bench", "onednn", str(N), str(ic), str(oc), str(REPS)], threads,
                                         may_refuse=True)
            if venv_python:
                first = "1" if not rows else "0"  # the peer's kernels, once per thread count
                row["torch"] = run_json([venv_python, "-c", TORCH_PEER, str(threads), str(N), str(ic), str(oc),
                                         str(REPS), HERE, first], threads)
            rows[name] = row
        results["threads"][threads] = rows
    report(results)
    with open(out_json, "w") as f:
        json.dump(results, f, indent=2)


def report(results):
    first = next(iter(results["threads"].values()))
    auto = next(iter(first.values()))["auto"]
    torch_version = next((r["torch"]["version"] for r in first.values() if "torch" in r), None)
    refused = next((r["onednn"]["skipped"] for r in first.values() if "skipped" in r.get("onednn", {})), None)
    print(f"bf16 linear layer, N={N}: GFLOP/s (2*N*IC*OC per product; backward = dinp + dweight)")
    print(f"  bf16 = matmul_bf16 on path '{auto['path']}' (kernel: {auto['kernel']}), fp32 = matmul.c "
          f"(OpenBLAS), sgemm = batchscale bench gemm" + (f", torch = PyTorch {torch_version} bf16 matmul"
                                                            if torch_version else ""))
    if refused:
        print(f"  oneDNN bf16 forced: skipped ({refused})")
    torch_kernels = next((r["torch"]["kernels"] for r in first.values() if r.get("torch", {}).get("kernels")), None)
    if torch_kernels and "torch" in torch_kernels:
        print(f"  torch kernels: oneDNN {torch_kernels['torch']['onednn_isa']}; MKL {torch_kernels['torch']['mkl_isa']}")
    header = f"{'thr':>3} {'layer':<8} {'IC':>5} {'OC':>5} {'pass':<4} {'bf16':>7} {'fp32':>7} {'sgemm':>7}"
    header += f" {'oneDNN bf16':>11} {'torch':>7} {'bf16/fp32':>9} {'bf16/sgemm':>10} {'bf16/torch':>10}"
    print(header)
    for threads, rows in results["threads"].items():
        t_bf16 = t_fp32 = 0.0
        for name, row in rows.items():
            ic, oc = SHAPES[name]
            a = row["auto"]
            for p, products in (("fwd", 1), ("bwd", 2)):
                g16 = gflops(a[f"bf16_{p}_ms"], products, ic, oc)
                g32 = gflops(a[f"fp32_{p}_ms"], products, ic, oc)
                sg = row["sgemm_gflops"] if p == "fwd" else None
                native = (gflops(row["onednn"][f"bf16_{p}_ms"], products, ic, oc)
                          if "onednn" in row and "skipped" not in row["onednn"] else None)
                tg = gflops(row["torch"][f"{p}_ms"], products, ic, oc) if "torch" in row else None
                fmt = lambda v, w=7: f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}}"
                ratio = lambda a_, b_, w: f"{a_ / b_:>{w - 1}.2f}x" if b_ else f"{'-':>{w}}"
                print(f"{threads:>3} {name:<8} {ic:>5} {oc:>5} {p:<4} {fmt(g16)} {fmt(g32)} {fmt(sg)} "
                      f"{fmt(native, 11)} {fmt(tg)} {ratio(g16, g32, 9)} {ratio(g16, sg, 10)} {ratio(g16, tg, 10)}")
                t_bf16 += PER_STEP[name] * a[f"bf16_{p}_ms"]
                t_fp32 += PER_STEP[name] * a[f"fp32_{p}_ms"]
        r = t_fp32 / t_bf16
        step = 1 / ((1 - MATMUL_FRACTION) + MATMUL_FRACTION / r)
        results["threads"][threads]["estimate"] = {"matmul_speedup": r, "step_speedup": step}
        print(f"{threads:>3} one step's matmuls (L={L}): bf16 {t_bf16:.0f} ms vs fp32 {t_fp32:.0f} ms = {r:.2f}x; "
              f"with {MATMUL_FRACTION:.0%} of the fp32 step in matmuls: whole step {step:.2f}x fp32")


if __name__ == "__main__":
    main()
