#!/usr/bin/env python3
"""gpu_dense_layer.py: one dense transformer block's forward and backward on one CUDA GPU, at the per-GPU shapes of
the planner's FSDP validation rows, written as their frameworks write it.

The planner prices a block as its matmuls at their shapes, fused attention on a block-length curve and element-wise
work at HBM bandwidth (src/plan/compute.c). The MosaicML (llm-foundry) and torchtitan rows run FSDP without tensor
parallelism, so one GPU runs each whole block and one GPU is enough to time it:

  mpt    llm-foundry's MPTBlock without biases: LayerNorm, fused QKV, causal attention (SDPA's flash backend,
         FlashAttention-2, the kernels of the flash-attn package llm-foundry calls), output projection, LayerNorm,
         up 4h, GELU, down; BF16 weights (FSDP's mixed precision);
  llama  torchtitan's TransformerBlock: RMSNorm, wq wk wv, rotary embedding, K and V repeated for the grouped
         queries, causal attention, wo, RMSNorm, w1 and w3, SwiGLU, w2; in BF16, or (fp8) with every linear as
         torchao's tensor-wise dynamic Float8Linear computes it: each product's operands cast to e4m3 with their
         own amax, the BF16 input and weight kept and cast again for the backward, the output gradient cast to
         e5m2 (pytorch/ao torchao/float8/float8_linear.py).

Each block is timed, forward and backward of one micro-batch (gradients returned, as FSDP reduce-scatters them):
  eager    the Python calls as an eager framework makes them (llm-foundry);
  graph    the same captured in one CUDA graph and replayed: the GPU's own time, without the host's gaps;
  compile  torch.compile of the block (torchtitan compiles each block), with --compile.
and the eager forward alone; then the same with the row's recomputation (full: the whole block under
torch.utils.checkpoint, llm-foundry's activation checkpointing; op: torchtitan's per-op policy). Each is the median of three timed rounds of at least 0.1 s after a warm-up. One eager
call's kernels are also summed by kind (products, attention, the rest) with torch.profiler.

Without a GPU it says so and exits 0; `--smoke` runs tiny shapes on the CPU to check the script.

    python3 bench/gpu_dense_layer.py --out dense.json [--compile] [--deadline 300]
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from gpu_kernels import Timer, base_parser, graph_of, meta_of, parse_for_device

# (name, kind, hidden, heads, kv heads, ffn, sequence, micro-batch, precision, the rows' recomputation): the FSDP
# rows' blocks (tests/test_plan_validation.py: mpt() and fsdp() rows, titan_h200())
CONFIGS = [
    ("mpt-760m mb24", "mpt", 1536, 12, 12, 6144, 2048, 24, "bf16", "none"),
    ("mpt-1b mb14", "mpt", 2048, 16, 16, 8192, 2048, 14, "bf16", "none"),
    ("mpt-3b mb10", "mpt", 2560, 20, 20, 10240, 2048, 10, "bf16", "none"),
    ("mpt-3b mb6", "mpt", 2560, 20, 20, 10240, 2048, 6, "bf16", "none"),
    ("mpt-7b mb6", "mpt", 4096, 32, 32, 16384, 2048, 6, "bf16", "none"),
    ("mpt-13b mb2", "mpt", 5120, 40, 40, 20480, 2048, 2, "bf16", "none"),
    ("mpt-30b mb14", "mpt", 7168, 64, 64, 28672, 2048, 14, "bf16", "full"),
    ("mpt-30b s8k mb1", "mpt", 7168, 64, 64, 28672, 8192, 1, "bf16", "full"),
    ("mpt-70b mb8", "mpt", 8192, 64, 64, 32768, 2048, 8, "bf16", "full"),
    ("mpt-70b mb2", "mpt", 8192, 64, 64, 32768, 2048, 2, "bf16", "full"),
    ("mpt-7b s32k mb2", "mpt", 4096, 32, 32, 16384, 32768, 2, "bf16", "full"),
    ("llama3-8b fp8", "llama", 4096, 32, 8, 14336, 8192, 2, "fp8", "op"),
    ("llama3-8b bf16", "llama", 4096, 32, 8, 14336, 8192, 2, "bf16", "op"),
]
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def to_fp8(t, dtype, largest):
    """t cast with a tensor-wise scale from its own amax (torchao's dynamic scaling), and the inverse scale."""
    scale = largest / t.abs().amax().float().clamp(min=1e-12)
    return (t.float() * scale).clamp(-largest, largest).to(dtype), scale.reciprocal()


class Float8Matmul(torch.autograd.Function):
    """y = x W^T with FP8 operands in all three products; x and W kept in BF16 and cast again for the backward."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        x8, sx = to_fp8(x, torch.float8_e4m3fn, E4M3_MAX)
        w8, sw = to_fp8(w, torch.float8_e4m3fn, E4M3_MAX)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g8, sg = to_fp8(g, torch.float8_e5m2, E5M2_MAX)
        w8, sw = to_fp8(w, torch.float8_e4m3fn, E4M3_MAX)
        x8, sx = to_fp8(x, torch.float8_e4m3fn, E4M3_MAX)
        # _scaled_mm takes a row-major first operand and a column-major second: the transposes are copies
        dx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx,
                              out_dtype=torch.bfloat16)
        return dx, dw


def causal_attention(q, k, v):
    """(batch, heads, seq, dim) causal attention: torch's SDPA, or the plain softmax on a torch without it."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=True)
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(torch.nn.Module):
    """One transformer block as llm-foundry's MPT (kind mpt) or torchtitan's Llama (kind llama) writes it."""

    def __init__(self, kind, h, heads, kv_heads, ffn, seq, precision, dev, dtype):
        super().__init__()
        self.kind, self.heads, self.kv_heads, self.d = kind, heads, kv_heads, h // heads
        self.fp8 = precision == "fp8"

        def weight(n, k):
            return torch.nn.Parameter(torch.randn(n, k, device=dev, dtype=dtype) / math.sqrt(k))
        self.norm1 = torch.nn.Parameter(torch.ones(h, device=dev, dtype=dtype))
        self.norm2 = torch.nn.Parameter(torch.ones(h, device=dev, dtype=dtype))
        if kind == "mpt":
            self.wqkv, self.wo = weight(3 * h, h), weight(h, h)
            self.up, self.down = weight(ffn, h), weight(h, ffn)
        else:
            self.wq, self.wk, self.wv, self.wo = (weight(h, h), weight(kv_heads * self.d, h),
                                                  weight(kv_heads * self.d, h), weight(h, h))
            self.w1, self.w3, self.w2 = weight(ffn, h), weight(ffn, h), weight(h, ffn)
            angle = torch.arange(seq, device=dev).float()[:, None] * (
                500000.0 ** (-torch.arange(0, self.d, 2, device=dev).float() / self.d))[None, :]
            self.cos, self.sin = angle.cos().repeat(1, 2).to(dtype), angle.sin().repeat(1, 2).to(dtype)

    def linear(self, x, w):
        if not self.fp8:
            return F.linear(x, w)
        return Float8Matmul.apply(x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[0])

    def rotate(self, t):
        half = t.shape[-1] // 2
        return t * self.cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * self.sin

    def norm(self, x, w):
        if self.kind == "mpt":
            return F.layer_norm(x, (x.shape[-1],), w)
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def attention(self, x):
        b, s, _ = x.shape
        if self.kind == "mpt":
            q, k, v = self.linear(x, self.wqkv).view(b, s, 3, self.heads, self.d).unbind(2)
        else:
            q = self.linear(x, self.wq).view(b, s, self.heads, self.d)
            k = self.linear(x, self.wk).view(b, s, self.kv_heads, self.d)
            v = self.linear(x, self.wv).view(b, s, self.kv_heads, self.d)
            q, k = self.rotate(q.transpose(1, 2)).transpose(1, 2), self.rotate(k.transpose(1, 2)).transpose(1, 2)
            repeat = self.heads // self.kv_heads
            k, v = k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2)
        out = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.linear(out.transpose(1, 2).reshape(b, s, -1), self.wo)

    def mlp(self, x):
        if self.kind == "mpt":
            return self.linear(F.gelu(self.linear(x, self.up)), self.down)
        return self.linear(F.silu(self.linear(x, self.w1)) * self.linear(x, self.w3), self.w2)

    def forward(self, x):
        x = x + self.attention(self.norm(x, self.norm1))
        return x + self.mlp(self.norm(x, self.norm2))


def block_flops(kind, h, heads, kv_heads, ffn, seq, mb):
    """Matmul and causal attention FLOPs of forward + backward (3 x forward; attention's causal half)."""
    d = h // heads
    per_token = 2 * h * (h + 2 * kv_heads * d + h) + 2 * h * ffn * (2 if kind == "mpt" else 3)
    attention = 4 * seq * h / 2
    return 3 * mb * seq * (per_token + attention)


def attention_backend(name):
    """A context manager choosing SDPA's backend (flash2 or cudnn), or doing nothing where torch cannot choose."""
    import contextlib
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel({"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def short(e):
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def kernel_category(name):
    """attention (FlashAttention's and cuDNN's fused kernels), gemm (cuBLAS's and CUTLASS's products) or other
    (element-wise, norms, reductions, copies, FP8 casts)."""
    n = name.lower()
    if any(w in n for w in ("flash", "fmha", "sdpa", "attn")):
        return "attention"
    if any(w in n for w in ("gemm", "nvjet", "xmma", "cutlass", "matmul")):
        return "gemm"
    return "other"


def kernel_split(fn):
    """GPU seconds of one call's kernels by category (torch.profiler), and the kernel count."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    split = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    count = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        count += 1
        split[kernel_category(e.name)] += (getattr(e, "device_time", None) or getattr(e, "cuda_time", 0)) / 1e6
    return dict({f"kernels_{k}_s": v for k, v in split.items()}, kernels=count)


def op_checkpoint_context():
    """torchtitan's per-op policy (selective_ac_option "op", torchtitan of 2025-06): save the outputs of aten.mm
    except every second one, of the flash and memory-efficient attention kernels and of max (the amax of FP8
    scaling); recompute everything else, FP8's _scaled_mm included."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default, aten.max.default}
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = ("recompute" if ctx.is_recompute else "forward") + "_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


class Recomputed(torch.nn.Module):
    """The block under activation checkpointing: full (everything recomputed, llm-foundry's) or op (torchtitan's)."""

    def __init__(self, block, mode):
        super().__init__()
        self.block, self.mode = block, mode

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        more = {"context_fn": op_checkpoint_context} if self.mode == "op" else {}
        # no RNG state to keep (no dropout), and keeping it cannot be captured in a CUDA graph
        return checkpoint(self.block, x, use_reentrant=False, preserve_rng_state=False, **more)


def time_variant(row, suffix, variant, module, step, timer, dev, profile):
    """row's seconds of one variant of one module (forward + backward; eager also the forward alone and, with
    profile, the kernels by kind)."""
    if variant == "eager":
        row["fwd" + suffix + "_s"] = timer.seconds(lambda: module(step.x))
        row["eager" + suffix + "_s"] = timer.seconds(step(module))
        if dev == "cuda" and profile:
            row.update(kernel_split(step(module)))
    elif variant == "graph" and dev == "cuda":
        row["graph" + suffix + "_s"] = timer.seconds(graph_of(step(module)).replay)
    elif variant == "compile":
        t0 = time.time()
        torch._dynamo.reset()  # else a block compiled under another backend or policy is reused
        compiled = torch.compile(module)
        step(compiled)()
        row["compile" + suffix + "_build_s"] = round(time.time() - t0, 1)
        row["compile" + suffix + "_s"] = timer.seconds(step(compiled))


class Step:
    """Forward and backward of a module on fixed data: gradients returned, as FSDP reduce-scatters them."""

    def __init__(self, x, dout, params):
        self.x, self.dout, self.params = x, dout, params

    def __call__(self, module):
        return lambda: torch.autograd.grad(module(self.x), [self.x] + self.params, self.dout)


def measure(config, dev, smoke, timer, variants, late):
    """One block's row: seconds of forward alone and of forward + backward in each variant, and with the row's
    recomputation (suffix _rc, FlashAttention-2)."""
    name, kind, h, heads, kv, ffn, seq, mb, precision, recompute = config
    if smoke:
        h, ffn, seq, mb, heads, kv = 64, 128, 32, 2, 4, min(kv * 4 // heads, 4)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    row = {"config": name, "kind": kind, "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn, "seq": seq,
           "micro_batch": mb, "precision": precision, "recompute": recompute,
           "flops": block_flops(kind, h, heads, kv, ffn, seq, mb)}
    if precision == "fp8" and not (dev == "cuda" and torch.cuda.get_device_capability(0) >= (8, 9)):
        row["skipped"] = "fp8 needs a CUDA GPU of compute capability 8.9 or later"
        print(json.dumps(row), flush=True)
        return row
    block = Block(kind, h, heads, kv, ffn, seq, precision, dev, dtype)
    x = torch.randn(mb, seq, h, device=dev, dtype=dtype, requires_grad=True)
    step = Step(x, torch.randn(mb, seq, h, device=dev, dtype=dtype), list(block.parameters()))
    first = "math" if smoke else "flash2"
    cases = [(first, "", block)] + ([] if smoke else [("cudnn", "_cudnn", block)] if kind == "llama" else [])
    if recompute != "none":
        cases.append((first, "_rc", Recomputed(block, recompute)))
    for backend, suffix, module in cases:
        with attention_backend(backend):
            for variant in variants:
                if late():
                    row[f"{variant}{suffix}_error"] = "deadline"
                    continue
                try:
                    time_variant(row, suffix, variant, module, step, timer, dev, profile=not suffix)
                except Exception as e:  # noqa: BLE001 (a backend or variant this torch or GPU lacks: recorded)
                    row[f"{variant}{suffix}_error"] = short(e)
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = base_parser(__doc__)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of each llama block")
    ap.add_argument("--deadline", type=float, default=300, help="seconds after which no new measurement starts")
    args, dev = parse_for_device(ap, "gpu_dense_layer")
    if dev is None:
        return 0
    t0, cuda = time.time(), dev == "cuda"
    rows = []
    for config in CONFIGS:
        variants = ["eager", "graph"] + (["compile"] if args.compile and config[1] == "llama" else [])
        rows.append(measure(config, dev, args.smoke, Timer(cuda, 0.1 if cuda else 0.005), variants,
                            lambda: time.time() - t0 > args.deadline))
        if cuda:
            torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump({"meta": meta_of(cuda), "seconds": round(time.time() - t0, 1), "rows": rows}, f, indent=1)
    print(f"gpu_dense_layer: {len(rows)} blocks, {time.time() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
