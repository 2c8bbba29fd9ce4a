"""torch_peer.py: the PyTorch peer for the engine benchmark: the same GPT-2
(tests/torch_gpt.py: fused tanh GELU, scaled_dot_product_attention where the
version has it) trained with AdamW on random tokens. Prints one JSON line:
{"version", "threads", "tokens_per_s", "ms_per_step"} (median over steps after
the first two), and "kernels": what the process ran (kernel_report.this_process:
OpenBLAS core, or MKL's and oneDNN's ISA, ATen's CPU capability).
usage: torch_peer.py THREADS STEPS L H C V T B"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]
import torch  # noqa: E402

import kernel_report  # noqa: E402
import torch_gpt as tg  # noqa: E402


def main():
    threads, steps, L, H, C, V, T, B = map(int, sys.argv[1:9])
    torch.set_num_threads(threads)
    cfg = dict(L=L, H=H, C=C, V=V, maxT=T)
    params = {k: v.requires_grad_(True) for k, v in tg.init_params(cfg, 0).items()}
    opt = torch.optim.AdamW(tg.param_groups(params, 1e-3, 0.1), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps):
        tokens = torch.randint(0, V, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = tg.forward(cfg, params, tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times[2:]) * 1e3
    print(json.dumps(dict(version=torch.__version__, threads=threads, tokens_per_s=B * T / ms * 1e3, ms_per_step=ms,
                     kernels=kernel_report.this_process())))


if __name__ == "__main__":
    main()
