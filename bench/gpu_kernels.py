#!/usr/bin/env python3
"""gpu_kernels.py: the matmul and attention rates the planner models, measured on one CUDA GPU.

The planner (src/plan/gemm_model.h, src/plan/attention_kernels.h) prices a
matmul by its per-GPU shape and a fused attention kernel by its block length
and head dimension. This script measures the same quantities on a real GPU so
the curves can be checked against a machine nobody here modelled:

  gemm       cuBLAS through PyTorch, BF16 (torch.matmul in nn.Linear's three
             layouts: forward x W^T, input gradient g W, weight gradient g^T x)
             and FP8 e4m3 (torch._scaled_mm, tensor-wise scales, the TN layout
             Transformer Engine gives every FP8 product), at
             - a grid of large shapes (the best one is this GPU's MAMF),
             - DeepGEMM's published m = 4096 shapes and a k ramp at m = 4096,
             - the per-GPU shapes of the planner's validation models at their
               tensor-parallel splits (forward, input and weight gradients),
             - mixture-of-experts expert shapes (few rows per expert).
  attention  torch's scaled_dot_product_attention, causal, BF16, with the
             FlashAttention-2 backend and cuDNN's (the Hopper kernels), head
             dimensions 64 and 128, 16K tokens per batch (FlashAttention-3's
             benchmark setting: hidden 2048) at sequence lengths 512 ... 32K;
             forward and backward timed apart.
  copy       device-to-device copy bandwidth (bytes read plus written).
  elementwise  a Llama 3 8B layer's RMSNorm, SwiGLU and residual add at 8,192 tokens, forward and backward,
             against the bytes each must move (the planner prices element-wise work at HBM bandwidth).

Every rate is the median of three timed rounds, each long enough (30 ms) to
hide launch overhead, after a warm-up; random normal data. Results go to a
JSON file; `nvidia-smi` clocks and power are sampled beside it by the caller.

Without a GPU it says so and exits 0 (nothing here is part of the test suite);
`--smoke` runs a few tiny shapes on the CPU to check the script itself.

    python3 bench/gpu_kernels.py --out kernels.json [--deadline 330]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch

# (name, hidden, query width, kv width, ffn, gated MLP, tokens per micro-batch, tensor-parallel sizes)
MODELS = [
    ("mpt-1b", 2048, 2048, 2048, 8192, False, 8192, [1]),
    ("mpt-7b", 4096, 4096, 4096, 16384, False, 8192, [1]),
    ("llama3-8b", 4096, 4096, 1024, 14336, True, 8192, [1, 2, 4]),
    ("llama3-70b", 8192, 8192, 1024, 28672, True, 8192, [2, 4, 8]),
    ("gpt3-175b", 12288, 12288, 12288, 49152, False, 2048, [4, 8]),
    ("llama3-405b", 16384, 16384, 1024, 53248, True, 8192, [8]),
    ("nemotron4-340b", 18432, 18432, 1024, 73728, False, 4096, [8]),
]
# (name, hidden, expert ffn, rows per expert): DeepSeek-V3, Qwen3-30B-A3B and Mixtral experts (gated)
EXPERTS = [
    ("deepseek-v3", 7168, 2048, [1024, 2048, 4096]),
    ("qwen3-30b-a3b", 2048, 768, [1024, 4096]),
    ("mixtral-8x7b", 4096, 14336, [4096]),
]
DEEPGEMM = [(4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512), (4096, 7168, 16384), (4096, 4096, 7168),
            (4096, 7168, 2048)]


def graph_of(fn, reps=1, warmups=3):
    """A CUDA graph of `reps` calls of fn, captured after warm-up calls on a side stream (as capture requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return graph


class Timer:
    """Median seconds per call of fn: CUDA events on a GPU, perf_counter on the CPU. With graph=True the
    timed calls are captured in one CUDA graph and replayed, so a short kernel is timed without the host's
    launch cost (in eager mode a product shorter than the framework's per-call overhead times the host)."""

    def __init__(self, cuda, min_seconds, graph=False):
        self.cuda = cuda
        self.min_seconds = min_seconds
        self.graph = graph and cuda

    def _run(self, fn, reps):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def seconds(self, fn, rounds=3):
        fn()
        once = self._run(fn, 1)
        reps = int(min(500 if self.graph else 200, max(2, math.ceil(self.min_seconds / max(once, 1e-7)))))
        if not self.graph:
            return statistics.median(self._run(fn, reps) for _ in range(rounds))
        graph = graph_of(fn, reps, warmups=2)
        graph.replay()
        return statistics.median(self._run(graph.replay, 1) / reps for _ in range(rounds))


def linear_passes(m, n, k):
    """The planner's (m, n, k) of a linear layer's three products: forward (tokens, out, in), input gradient
    (tokens, in, out), weight gradient (out, in, tokens)."""
    return [("fwd", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (n, k, m))]


def bf16_product(kind, m, n, k, dev):
    """A closure running one BF16 product of shape (m, n, k) in nn.Linear's layout for that pass."""
    def randn(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16)
    if kind == "fwd":  # y[m, n] = x[m, k] W[n, k]^T
        x, w = randn(m, k), randn(n, k)
        return lambda: torch.nn.functional.linear(x, w)
    if kind == "dgrad":  # dx[m, n] = g[m, k] W[k, n]
        g, w = randn(m, k), randn(k, n)
        return lambda: torch.matmul(g, w)
    gt, x = randn(k, m), randn(k, n)  # dW[m, n] = g[k, m]^T x[k, n]
    return lambda: torch.matmul(gt.t(), x)


def fp8_product(m, n, k, dev, fast_accum):
    """A closure running one FP8 e4m3 product (TN layout, tensor-wise scales, BF16 output)."""
    a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=dev)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)


class Recorder:
    """Collects rows, stops starting new work past the deadline, and writes the JSON after every section."""

    def __init__(self, out, deadline, meta):
        self.out, self.deadline, self.t0 = out, deadline, time.time()
        self.result = {"meta": meta, "gemm": [], "attention": [], "copy": [], "elementwise": [], "skipped": []}
        self.sweep = 0

    def late(self):
        return time.time() - self.t0 > self.deadline

    def add(self, section, row):
        self.result[section].append(row)

    def skip(self, what, why):
        self.result["skipped"].append({"what": what, "why": why})
        print(f"skipped {what}: {why}", flush=True)

    def save(self):
        self.result["meta"]["seconds"] = round(time.time() - self.t0, 1)
        with open(self.out, "w") as f:
            json.dump(self.result, f, indent=1)


def measure_gemm(rec, timer, dev, group, label, m, n, k, kind, precision, fast_accum=False):
    if rec.late():
        rec.skip(f"{group} {label} {precision} {m}x{n}x{k}", "deadline")
        return
    try:
        fn = fp8_product(m, n, k, dev, fast_accum) if precision == "fp8" else bf16_product(kind, m, n, k, dev)
        sec = timer.seconds(fn)
    except Exception as e:  # noqa: BLE001 (an op this torch or GPU lacks: recorded, not fatal)
        rec.skip(f"{group} {label} {precision} {m}x{n}x{k}", (str(e).splitlines() or [type(e).__name__])[0][:200])
        return
    rate = 2.0 * m * n * k / sec
    rec.add("gemm", {"sweep": rec.sweep, "group": group, "label": label, "precision": precision, "pass": kind, "m": m, "n": n, "k": k,
                     "fast_accum": fast_accum, "seconds": sec, "tflops": rate / 1e12})
    print(f"{group:10s} {label:28s} {precision} {kind:5s} {m:6d} x {n:6d} x {k:6d}  {rate / 1e12:7.1f} TFLOP/s",
          flush=True)


def model_shapes(tokens_scale):
    """(label, m, n, k) forward shapes of every model layer's linear products at each TP size."""
    out = []
    for name, h, q, kv, f, gated, tokens, tps in MODELS:
        T = max(16, tokens // tokens_scale)
        for t in tps:
            up = 2 if gated else 1
            for part, n, k in (("qkv", (q + 2 * kv) // t, h), ("proj", h, q // t), ("fc1", up * f // t, h),
                               ("fc2", h, f // t)):
                out.append((f"{name} tp{t} {part}", T, n, k))
    return out


def expert_shapes(tokens_scale):
    out = []
    for name, h, f, rows_list in EXPERTS:
        for rows in rows_list:
            r = max(16, rows // tokens_scale)
            out.append((f"{name} rows{rows} fc1", r, 2 * f, h))
            out.append((f"{name} rows{rows} fc2", r, h, f))
    return out


def gemm_jobs(smoke, fp8):
    """Every product to measure: (group, label, m, n, k, pass, precision, fast accumulation)."""
    s = 64 if smoke else 1
    precisions = ["bf16"] + (["fp8"] if fp8 else [])
    sizes = [1024, 2048, 4096, 8192] if not smoke else [64]
    ks = [4096, 8192, 13312, 16384] if not smoke else [128]
    jobs = []
    for p in precisions:  # the large-shape grid: its best is the MAMF
        jobs += [("mamf", "grid", m, n, k, "fwd", p, False) for m in sizes for n in sizes for k in ks]
        jobs.append(("mamf", "bekman bf16", 2048 // s, 2048 // s, 13312 // s, "fwd", p, False))
        jobs.append(("mamf", "bekman fp8", 1024 // s, 9216 // s, 14336 // s, "fwd", p, False))
        jobs += [("deepgemm", "m4096", m // s, n // s, k // s, "fwd", p, False) for m, n, k in DEEPGEMM]
        jobs += [("k-ramp", f"n{n}", 4096 // s, n // s, max(16, k // s), "fwd", p, False) for n in (4096, 7168)
                 for k in (256, 512, 1024, 2048, 4096, 8192, 16384)]
        for group, shapes in (("model", model_shapes(s)), ("expert", expert_shapes(s))):
            for label, m, n, k in shapes:
                dims = (m, n, k) if not smoke else (m, max(16, n // s), max(16, k // s))
                jobs += [(group, label, a, b, c, kind, p, False) for kind, (a, b, c) in linear_passes(*dims)]
    if fp8:
        jobs += [("deepgemm", "m4096 fast-accum", m // s, n // s, k // s, "fwd", "fp8", True) for m, n, k in DEEPGEMM]
    return jobs


def gemm_sections(rec, timer, dev, smoke, fp8, reverse=False):
    jobs = gemm_jobs(smoke, fp8)
    for i, (group, label, m, n, k, kind, p, fast) in enumerate(reversed(jobs) if reverse else jobs):
        measure_gemm(rec, timer, dev, group, label, m, n, k, kind, p, fast)
        if i % 50 == 49:
            rec.save()
    rec.save()


def attention_sections(rec, timer, dev, smoke):
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        rec.skip("attention", f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel")
        return
    backends = [("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if smoke:
        backends = [("math", SDPBackend.MATH)]
    total, hidden = (16384, 2048) if not smoke else (256, 128)
    seqs = [512, 1024, 2048, 4096, 8192, 16384, 32768] if not smoke else [64, 128]
    for name, backend in backends:
        for d in (64, 128):
            for s in seqs:
                what = f"attention {name} d{d} s{s}"
                if rec.late():
                    rec.skip(what, "deadline")
                    continue
                b, heads = max(1, total // s), hidden // d
                try:
                    # (batch, heads, seq, dim) views of (batch, seq, heads, dim) storage, as a model passes them
                    q, k, v, dout = (torch.randn(b, s, heads, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
                                     .detach().requires_grad_(i < 3) for i in range(4))
                    with sdpa_kernel(backend):
                        def fwd():
                            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                        fwd_s = timer.seconds(fwd)
                        both_s = timer.seconds(lambda: torch.autograd.grad(fwd(), (q, k, v), dout))
                except Exception as e:  # noqa: BLE001 (a backend this torch or GPU lacks: recorded, not fatal)
                    rec.skip(what, (str(e).splitlines() or [type(e).__name__])[0][:200])
                    continue
                flops = 4.0 * b * heads * s * s * d / 2  # causal half, forward
                bwd_s = max(both_s - fwd_s, 1e-12)
                rec.add("attention", {"backend": name, "head_dim": d, "seq": s, "batch": b, "heads": heads,
                                      "fwd_seconds": fwd_s, "bwd_seconds": bwd_s, "fwd_tflops": flops / fwd_s / 1e12,
                                      "bwd_tflops": 2.5 * flops / bwd_s / 1e12})
                print(f"{what:32s} fwd {flops / fwd_s / 1e12:6.1f}  bwd {2.5 * flops / bwd_s / 1e12:6.1f} TFLOP/s",
                      flush=True)
                q = k = v = dout = None
    rec.save()


def copy_section(rec, timer, dev, smoke):
    n = (1 << 30) if not smoke else (1 << 20)  # 2 GiB of BF16
    a = torch.empty(n, device=dev, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    sec = timer.seconds(lambda: b.copy_(a))
    rec.add("copy", {"bytes_moved": 4 * n, "seconds": sec, "tbps": 4 * n / sec / 1e12})
    print(f"copy {4 * n / sec / 1e12:.2f} TB/s (read + write)", flush=True)
    rec.save()


def elementwise_section(rec, timer, dev, smoke):
    """A Llama 3 8B layer's element-wise work at 8,192 tokens, forward and backward (autograd), against the bytes it
    must move (each input read and each output written once): the planner prices it at HBM bandwidth."""
    T, h, f = (8192, 4096, 14336) if not smoke else (64, 32, 64)
    e = 2  # BF16 bytes

    def randn(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
    x, w, gate, up, res = randn(T, h), randn(h), randn(T, f), randn(T, f), randn(T, h)
    for t in (x, w, gate, up, res):
        t.requires_grad_(True)
    g_h, g_f = randn(T, h), randn(T, f)
    norm = getattr(torch.nn.functional, "rms_norm", None)
    # name: (forward closure, inputs with gradients, output's gradient, bytes forward, bytes backward); the residual
    # add's backward passes its gradient on without a kernel
    cases = {
        "rmsnorm": ((lambda: norm(x, (h,), w, 1e-5)) if norm else None, (x, w), g_h, 2 * T * h * e, 3 * T * h * e),
        "swiglu": (lambda: torch.nn.functional.silu(gate) * up, (gate, up), g_f, 3 * T * f * e, 5 * T * f * e),
        "residual": (lambda: x + res, (), g_h, 3 * T * h * e, 0),
    }
    for name, (fwd, inputs, grad, fwd_bytes, bwd_bytes) in cases.items():
        if fwd is None:
            rec.skip(f"elementwise {name}", f"torch {torch.__version__} has no rms_norm")
            continue
        fwd_s = timer.seconds(fwd)
        row = {"op": name, "tokens": T, "fwd_seconds": fwd_s, "fwd_tbps": fwd_bytes / fwd_s / 1e12}
        if bwd_bytes:  # gradients returned, not accumulated into .grad (which would add kernels)
            bwd_s = max(timer.seconds(lambda: torch.autograd.grad(fwd(), inputs, grad)) - fwd_s, 1e-12)
            row.update(bwd_seconds=bwd_s, bwd_tbps=bwd_bytes / bwd_s / 1e12)
        rec.add("elementwise", row)
        print(f"elementwise {name:9s} forward {row['fwd_tbps']:.2f} TB/s, backward "
              f"{row.get('bwd_tbps', float('nan')):.2f} TB/s of the bytes it must move", flush=True)
    rec.save()


def meta_of(cuda):
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                            time.gmtime())}
    if cuda:
        p = torch.cuda.get_device_properties(0)
        meta.update(device=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", cublas=getattr(torch.backends.cuda, "cublas_version", None),
                    cudnn=torch.backends.cudnn.version())
    return meta


def base_parser(doc):
    """The GPU scripts' common options: --out and --smoke."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks the script, not a GPU")
    return ap


def parse_for_device(ap, script):
    """The parsed options and the device: "cuda", "cpu" for --smoke, or None (said on stdout) where no CUDA GPU is
    visible, with nothing to measure."""
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.smoke:
        return args, "cpu"
    if not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU visible to torch; nothing measured (use --smoke to check the script)")
        return args, None
    return args, "cuda"


def main():
    ap = base_parser(__doc__)
    ap.add_argument("--deadline", type=float, default=330, help="seconds after which no new measurement starts")
    ap.add_argument("--timing", choices=["eager", "graph"], default="graph",
                    help="products timed as eager calls or replayed from a CUDA graph (default)")
    ap.add_argument("--sweeps", type=int, default=1, help="times the product list is measured (odd sweeps reversed)")
    ap.add_argument("--sections", default="gemm,attention,copy,elementwise",
                    help="comma-separated: gemm, attention, copy, elementwise")
    args, dev = parse_for_device(ap, "gpu_kernels")
    if dev is None:
        return 0
    rec = Recorder(args.out, args.deadline, dict(meta_of(dev == "cuda"), timing=args.timing))
    cuda = dev == "cuda"
    timer = Timer(cuda, 0.03 if cuda else 0.002)
    fp8 = cuda and hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(0) >= (8, 9)
    if not fp8:
        rec.skip("fp8 products", "needs a CUDA GPU of compute capability 8.9 or later and torch.float8_e4m3fn")
    if "gemm" in args.sections:
        for sweep in range(args.sweeps):  # later sweeps in reverse order: the spread between sweeps is the noise
            rec.sweep = sweep
            gemm_sections(rec, Timer(cuda, timer.min_seconds, args.timing == "graph"), dev, args.smoke, fp8,
                          reverse=sweep % 2 == 1)
    if "attention" in args.sections:
        attention_sections(rec, timer, dev, args.smoke)
    if "copy" in args.sections:
        copy_section(rec, timer, dev, args.smoke)
    if "elementwise" in args.sections:
        elementwise_section(rec, timer, dev, args.smoke)
    rec.save()
    print(f"gpu_kernels: {len(rec.result['gemm'])} products, {len(rec.result['attention'])} attention rows, "
          f"{len(rec.result['skipped'])} skipped, {rec.result['meta']['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
