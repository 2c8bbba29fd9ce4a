#!/usr/bin/env python3
"""gpu_moe_layer.py: where one rank's mixture-of-experts layer spends its time on a CUDA GPU, in eager PyTorch.

The planner prices a MoE layer's experts as matmuls at their shapes (src/plan/compute.c) and finds several
published dropless MoE runs slower than that by a few milliseconds per layer and micro-batch (docs/PLANNER.md,
"Where it misses"). This script measures, for the layer shapes of those runs, one rank's share of the layer after
the dispatch (the all-to-all itself is not here: one GPU), forward and backward:

  eager      the layer as Megatron-core's dropless path runs it in eager mode: router (linear, softmax, top-k,
             load-balancing loss), the per-expert token counts copied to the host (the dispatcher's
             synchronisation), the received rows permuted by expert, one product pair per local expert in a loop
             (gate and up, SwiGLU, down: Transformer Engine's GroupedLinear launches a product per expert), the rows
             scaled by their routing weights and put back in order;
  no-sync    the same without the host copy of the counts (the split sizes known in advance);
  graph      the no-sync layer captured in one CUDA graph and replayed: the GPU's own time for every kernel, no
             host gaps;
  experts    only the experts' products (forward, input and weight gradients) in a CUDA graph: what a matmul
             model prices;
  grouped    the eager layer with one grouped product per matmul (torch._grouped_mm) instead of the loop.
Each is the median of three timed rounds after a warm-up. The kernels one eager layer launches are counted with
torch.profiler; with --host-only each layer is also run on rows so few that its time is the host's. eager - graph is the time the host adds; eager / kernels, a layer's host time per kernel where the
host is the bottleneck.

    python3 bench/gpu_moe_layer.py --out moe.json        (needs a CUDA GPU; --smoke checks the script on the CPU)
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

from gpu_kernels import Timer, base_parser, graph_of, parse_for_device

# (name, hidden, expert ffn, experts, top-k, local experts, rows per local expert, tokens per micro-batch):
# the validation rows' layouts (docs/PLANNER.md), rows per expert = tokens x top-k x EP / experts
CONFIGS = [
    ("gpt-oss-120b mb1 ep8", 2880, 2880, 128, 4, 16, 1024, 4096),
    ("gpt-oss-120b mb4 ep8", 2880, 2880, 128, 4, 16, 4096, 16384),
    ("qwen3-30b-a3b mb2 ep8", 2048, 768, 128, 8, 16, 4096, 8192),
    ("qwen3-235b-a22b mb1 ep32", 4096, 1536, 128, 8, 4, 8192, 4096),
]


class RankMoE:
    """One rank's MoE layer after dispatch: `tokens` router inputs, `local` experts of `rows` received rows each."""

    def __init__(self, h, f, experts, k, local, rows, tokens, dev, dtype):
        def param(*shape, scale=0.02):
            return (torch.randn(*shape, device=dev, dtype=dtype) * scale).requires_grad_()
        self.k, self.experts, self.local, self.rows = k, experts, local, rows
        self.router = param(experts, h)
        # one weight tensor per expert, as Transformer Engine's GroupedLinear keeps them (indexing one stacked
        # tensor per expert would make autograd add a zero-filled full-size gradient per expert); the grouped
        # product takes its own stacked copies
        self.w1, self.w2 = [param(2 * f, h) for _ in range(local)], [param(h, f) for _ in range(local)]
        self.w1s, self.w2s = param(local, 2 * f, h), param(local, h, f)
        self.x = param(tokens, h, scale=1.0)                 # the rank's tokens (router input)
        self.received = param(local * rows, h, scale=1.0)    # the all-to-all's output: rows for the local experts
        assign = torch.arange(local, device=dev).repeat_interleave(rows)
        self.expert_of_row = assign[torch.randperm(local * rows, device=dev)]  # arrival order is not expert order
        self.counts = [rows] * local
        self.offsets = torch.arange(1, local + 1, device=dev, dtype=torch.int32) * rows
        self.dout = torch.randn(local * rows, h, device=dev, dtype=dtype)

    def route(self, sync):
        logits = self.x @ self.router.t()
        probs = torch.softmax(logits.float(), dim=-1)
        top_p, top_i = probs.topk(self.k, dim=-1)
        flat = top_i.flatten()  # counted without bincount, which may wait for the GPU: the no-sync case must not
        tokens_per_expert = torch.zeros(self.experts, device=flat.device).scatter_add_(0, flat, torch.ones_like(
            flat, dtype=torch.float32))
        aux = (probs.mean(0) * tokens_per_expert).sum() / top_i.numel()
        if sync:
            tokens_per_expert.tolist()  # Megatron's dispatcher copies the counts to the host and waits
        # each received row's routing weight (stand-in values from this rank's top-k, tied to the router's graph)
        n = self.local * self.rows
        weights = top_p.flatten().repeat((n + top_p.numel() - 1) // top_p.numel())[:n]
        return weights, aux

    def experts_loop(self, rows):
        outs = []
        for e, chunk in enumerate(rows.split(self.counts)):
            gate, up = (chunk @ self.w1[e].t()).chunk(2, dim=-1)
            outs.append((F.silu(gate) * up) @ self.w2[e].t())
        return torch.cat(outs)

    def experts_grouped(self, rows):
        gate, up = torch._grouped_mm(rows, self.w1s.transpose(-2, -1), offs=self.offsets).chunk(2, dim=-1)
        return torch._grouped_mm(F.silu(gate) * up, self.w2s.transpose(-2, -1), offs=self.offsets)

    def step(self, sync=True, grouped=False):
        """Forward and backward of the layer."""
        weights, aux = self.route(sync)
        order = torch.argsort(self.expert_of_row, stable=True)
        permuted = self.received.index_select(0, order)
        y = self.experts_grouped(permuted) if grouped else self.experts_loop(permuted)
        y = y * weights[order].unsqueeze(-1).to(y.dtype)
        out = torch.empty_like(y).index_copy(0, order, y)
        torch.autograd.backward([out, aux], [self.dout, torch.ones_like(aux)])

    def products(self):
        """Only the experts' products, forward and backward, as closures of fixed tensors."""
        w1, w2 = [w.detach() for w in self.w1], [w.detach() for w in self.w2]

        def rand(cols):
            return [torch.randn(self.rows, cols, device=w1[0].device, dtype=w1[0].dtype) for _ in range(self.local)]
        a, hmid, g1, g2 = rand(w1[0].shape[1]), rand(w2[0].shape[1]), rand(w1[0].shape[0]), rand(w2[0].shape[0])

        def run():
            for e in range(self.local):
                a[e] @ w1[e].t(), hmid[e] @ w2[e].t()        # forward
                g1[e] @ w1[e], g2[e] @ w2[e]                  # input gradients
                g1[e].t() @ a[e], g2[e].t() @ hmid[e]         # weight gradients
        return run


def kernels_of(fn, cuda):
    """CUDA kernels one call launches, and their summed GPU time (s), by torch.profiler."""
    if not cuda:
        return None, None, None
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in events if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    def gpu_us(e):
        return getattr(e, "device_time", None) or getattr(e, "cuda_time", 0)
    busy = sum(gpu_us(e) for e in kernels) / 1e6
    by_name = {}
    for e in kernels:
        by_name[e.name[:90]] = by_name.get(e.name[:90], 0) + gpu_us(e) / 1e6
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    return len(kernels), busy, top


def measure(config, dev, smoke, timer, host_only=False):
    name, h, f, experts, k, local, rows, tokens = config
    if smoke or host_only:  # host_only: the same layer structure on rows so small the GPU waits for the host
        h, f, rows, tokens = 64, 32, 16, 64
        name += " host-only" if host_only else ""
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    layer = RankMoE(h, f, experts, k, local, rows, tokens, dev, dtype)
    row = {"config": name, "hidden": h, "ffn": f, "experts": experts, "top_k": k, "local_experts": local,
           "rows_per_expert": rows, "tokens": tokens}
    cases = {"eager": lambda: layer.step(sync=True), "no_sync": lambda: layer.step(sync=False)}
    for label, fn in cases.items():
        row[label + "_s"] = timer.seconds(fn)
    try:
        row["kernels"], row["kernel_busy_s"], row["top_kernels_s"] = kernels_of(cases["eager"], dev == "cuda")
    except Exception as e:  # noqa: BLE001 (a profiler this torch lacks: recorded, not fatal)
        row["kernels_error"] = (str(e).splitlines() or [type(e).__name__])[0][:200]
    products = layer.products()
    if dev == "cuda":
        for label, fn in (("graph_s", cases["no_sync"]), ("experts_s", products)):
            try:
                graph = graph_of(fn)
                row[label] = timer.seconds(graph.replay)
            except Exception as e:  # noqa: BLE001 (recorded, not fatal)
                row[label + "_error"] = (str(e).splitlines() or [type(e).__name__])[0][:200]
    else:
        row["experts_s"] = timer.seconds(products)
    try:
        row["grouped_s"] = timer.seconds(lambda: layer.step(sync=True, grouped=True))
    except Exception as e:  # noqa: BLE001 (torch without _grouped_mm, or a GPU it does not run on)
        row["grouped_error"] = (str(e).splitlines() or [type(e).__name__])[0][:200]
    flops = 2 * 3 * local * rows * (h * 2 * f + f * h)  # forward, input and weight gradients
    row["experts_tflops"] = flops / row["experts_s"] / 1e12 if row.get("experts_s") else None
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = base_parser(__doc__)
    ap.add_argument("--host-only", action="store_true",
                    help="also each layer on tiny rows, where its time is the host's (the GPU idles between kernels)")
    args, dev = parse_for_device(ap, "gpu_moe_layer")
    if dev is None:
        return 0
    t0, cuda = time.time(), dev == "cuda"
    rows = [measure(c, dev, args.smoke, Timer(cuda, 0.1 if cuda else 0.01)) for c in CONFIGS]
    if args.host_only:
        rows += [measure(c, dev, args.smoke, Timer(cuda, 0.1 if cuda else 0.01), True) for c in CONFIGS[1:]]
        for local in (1, 4, 32, 64):  # the host time's growth with the local experts, at one shape
            c = ("host-only local %d" % local, 2048, 768, 128, 8, local, 16, 64)
            rows.append(measure(c, dev, args.smoke, Timer(cuda, 0.1 if cuda else 0.01), True))
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                   "seconds": round(time.time() - t0, 1), "rows": rows}, f, indent=1)
    print(f"gpu_moe_layer: {len(rows)} layers, {time.time() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
