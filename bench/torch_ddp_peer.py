"""torch_ddp_peer.py: PyTorch DDP (gloo) weak-scaling peer: a GPT-2 written
as nanoGPT writes it (an nn.ModuleList of blocks, each with its own Linear
and LayerNorm parameters, the output layer tied to the token embedding), so
DDP's autograd hooks can all-reduce a bucket of late layers while backward
still computes the early ones. DDP's default bucket size (25 MB) is kept.
Trained by WORLD processes of one thread each, micro-batch B per process, on
random tokens, with what `batchscale train` does by default: AdamW (betas
0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings only) and
the global gradient norm clipped to 1.0. The same shapes as batchscale's GPT
(tanh GELU, biases, learned positions; 6 x params + 12 x L x C x T FLOPs per
token): the parameter count is checked against llm.c's formula. WORLD 1 runs
the same model without DDP. Prints one JSON line: version, world, global
tokens/s (median step after two, slowest rank), the parameter count, the
bucket size and the kernels rank 0 ran.
usage: torch_ddp_peer.py WORLD STEPS L H C V T B"""
import json
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402

GRAD_CLIP = 1.0  # batchscale train --grad-clip default
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8)  # --lr, --beta1, --beta2, --eps defaults
WEIGHT_DECAY = 0.1  # --weight-decay default (matrices and embeddings)


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's initialisation, as nanoGPT does it
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def llmc_param_count(L, C, V, T):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def optimizer(model):
    decay = [p for p in model.parameters() if p.dim() == 2]  # matrices and embeddings
    keep = [p for p in model.parameters() if p.dim() < 2]  # biases and LayerNorm
    return torch.optim.AdamW([dict(params=decay, weight_decay=WEIGHT_DECAY), dict(params=keep, weight_decay=0.0)],
                             **ADAMW)


def worker(rank, world, steps, shape, port, queue):
    L, H, C, V, T, B = shape
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same initial parameters on every rank (DDP also broadcasts rank 0's)
    model = GPT(L, H, C, V, T)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = optimizer(model)
    g = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(steps):
        tokens = torch.randint(0, V, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times[2:])])
    if world > 1:
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
    if rank == 0:
        queue.put(dict(tokens_per_s=world * B * T / med.item(), params=sum(p.numel() for p in model.parameters()),
                       bucket_cap_mb=ddp.bucket_bytes_cap / 2**20 if world > 1 else None,
                       kernels=kernel_report.this_process()))


def main():
    world, steps, L, H, C, V, T, B = map(int, sys.argv[1:9])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(world, steps, (L, H, C, V, T, B), port, queue), nprocs=world, join=True)
    r = queue.get()
    if r["params"] != llmc_param_count(L, C, V, T):
        raise SystemExit(f"torch_ddp_peer: {r['params']} parameters, batchscale's GPT has {llmc_param_count(L, C, V, T)}")
    print(json.dumps(dict(version=torch.__version__, world=world, **r)))


if __name__ == "__main__":
    main()
