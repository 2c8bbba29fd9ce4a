"""torch_ddp_peer.py: PyTorch DDP (gloo) weak-scaling peer: the GPT of
tests/torch_gpt.py wrapped in a Module, trained with AdamW on random tokens
by WORLD processes of one thread each, micro-batch B per process. Prints one
JSON line: version, world, global tokens/s (median step after two).
usage: torch_ddp_peer.py WORLD STEPS L H C V T B"""
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_gpt as tg  # noqa: E402


class GPT(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in tg.init_params(cfg, 0).items()})

    def forward(self, idx, tgt):
        return tg.forward(self.cfg, dict(self.p.items()), idx, tgt)[1]


def worker(rank, world, steps, cfg, B, port, queue):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = GPT(cfg)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    times = []
    T, V = cfg["maxT"], cfg["V"]
    for _ in range(steps):
        tokens = torch.randint(0, V, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if world > 1:
        t = torch.tensor([statistics.median(times[2:])])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
        med = t.item()
    else:
        med = statistics.median(times[2:])
    if rank == 0:
        queue.put(world * B * T / med)


def main():
    world, steps, L, H, C, V, T, B = map(int, sys.argv[1:9])
    cfg = dict(L=L, H=H, C=C, V=V, maxT=T)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(world, steps, cfg, B, port, queue), nprocs=world, join=True)
    print(json.dumps(dict(version=torch.__version__, world=world, tokens_per_s=queue.get())))


if __name__ == "__main__":
    main()
