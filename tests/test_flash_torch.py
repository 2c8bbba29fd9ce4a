#!/usr/bin/env python3
"""test_flash_torch.py: the fused attention kernels (sim) against PyTorch.

Debian's torch 1.13 has no scaled_dot_product_attention (added in 2.0), so
the peer is what that function's math backend computes: softmax(q k^T /
sqrt(hs) + causal mask) v in float64 with torch's autograd for dq, dk, dv.
One shape, B 2, T 77 (three tiles of 32, the last cut short), C 96, H 3
(head size 32): out and dqkv each within 1e-5 of torch's relative to the
largest magnitude (fp32 sums in another order; the same bound as the C tests).
usage: test_flash_torch.py TEST_DEVICE_FLASH"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

B, T, C, H = 2, 77, 96, 3
BOUND = 1e-5


def torch_attention(qkv, dout):
    x = torch.tensor(qkv, dtype=torch.float64, requires_grad=True)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in x.split(C, dim=2))
    s = q @ k.transpose(-1, -2) / (C // H) ** 0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return out.detach().numpy(), x.grad.numpy()


def main():
    rng = np.random.default_rng(45)
    qkv = rng.uniform(-1, 1, (B, T, 3 * C)).astype(np.float32)
    dout = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
        np.concatenate([qkv.ravel(), dout.ravel()]).tofile(src)
        subprocess.run([sys.argv[1], "sim", "--io", src, dst, str(B), str(T), str(C), str(H)], check=True)
        got = np.fromfile(dst, dtype=np.float32)
    out, dqkv = got[: B * T * C].reshape(B, T, C), got[B * T * C:].reshape(B, T, 3 * C)
    want_out, want_dqkv = torch_attention(qkv, dout)
    failed = False
    for name, mine, theirs in (("out", out, want_out), ("dq dk dv", dqkv, want_dqkv)):
        err = np.abs(mine - theirs).max() / np.abs(theirs).max()
        print(f"fused {name:9} vs torch: relative error {err:.3g} (bound {BOUND:.0e})")
        failed |= not err <= BOUND
    print("FAILED" if failed else "fused attention agrees with torch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
