#!/usr/bin/env python3
"""test_bf16_torch.py: the bf16 kernels against PyTorch (Debian's 1.13).

1. Conversion: every sign/exponent/top-mantissa pattern (2^16) with the low
   16 bits at 0, 1, ties 0x8000 (and 0x7fff, 0x8001 beside them), 0xffff and
   random values: our float -> bf16 must equal torch's .to(bfloat16) bit for
   bit (NaN compared as NaN: torch writes one canonical NaN, we keep the
   payload's top bits).
2. The linear layer on both paths (oneDNN bf16, widened fp32), forward and
   backward, on odd shapes, with inputs rounded to bf16 by torch:
   a. against the exact product in float64 of the same bf16 inputs:
      |ours - exact| <= gamma(K+1) * sum|a b| (+|c0|), gamma(n) = n u/(1-n u),
      u = 2^-24 (fp32 accumulation in any order is all that may differ);
   b. against torch's fp32 matmul of the same bf16 inputs (what autocast
      promises: bf16 operands, fp32 accumulation): 2 gamma(K+1) sum|a b|;
   c. against torch.matmul on the bf16 tensors (output rounded to bf16, so
      2^-8 of |result| more): |ours - torch| <= 2^-8 (|exact| + gamma(K)
      sum|a b|) + 2 gamma(K+1) sum|a b|, and max|ours - torch| / max|torch|
      <= 1e-2 (the issue's figure; it is the output rounding, about 2^-9).
      Torch 1.13's CPU bf16 matmul accumulates in bf16 on some small shapes
      (errors of 1-15% vs exact, measured; torch 2.x does not): where
      torch's own result breaks its fp32-accumulation bound, c is skipped
      and said so; at the model's shapes it must hold (oneDNN inside torch)
      wherever torch's bf16 matmul is oneDNN's. Below AVX-512 it is not:
      torch's oneDNN either cannot create it ("could not create a primitive
      descriptor", an AVX-512 CPU limited to AVX2) or torch falls back to its
      own gemm, which accumulates in bf16 for some operand layouts (an
      AVX2-only AMD EPYC: tests/torch_bf16.py). There c is checked only on the
      products where torch keeps its bound, the rest said so once, and a and b
      still run.
   dbias is the fp32 column sum of the unrounded dout: |ours - exact| <=
   gamma(N+1) (sum|dout| + |dbias0|).
usage: test_bf16_torch.py BF16_DRIVER widen|onednn
One matmul path per run (CTest bf16_torch and bf16_torch_onednn); the
conversion check runs with widen. onednn where oneDNN has no bf16 matmul
(oneDNN 2.6 below AVX-512) prints why and exits 77, counted as skipped."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_probe import onednn_or_skip  # noqa: E402
from bstest import Checks  # noqa: E402
from torch_bf16 import U, fp32_accumulation_breaks, gamma  # noqa: E402

if len(sys.argv) != 3 or sys.argv[2] not in ("widen", "onednn"):
    sys.exit("usage: test_bf16_torch.py BF16_DRIVER widen|onednn")
DRIVER, PATH = sys.argv[1], sys.argv[2]
expect = Checks(print_ok=False)  # FAIL lines only
TORCH_BF16_MATMUL = True  # set by main: whether torch's own bf16 matmul runs here
TORCH_BF16_IS_ONEDNN = True  # set by main: whether it accumulates in fp32 at the model's shapes (oneDNN's)


def test_conversion(tmp):
    rng = np.random.default_rng(1)
    lows = np.array([0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff] + list(rng.integers(0, 65536, 26)), np.uint32)
    highs = np.arange(65536, dtype=np.uint32)
    bits = (highs[:, None] << 16 | lows[None, :]).ravel()
    src, dst = os.path.join(tmp, "x.f32"), os.path.join(tmp, "x.bf16")
    bits.tofile(src)
    subprocess.run([DRIVER, "convert", src, dst], check=True)
    ours = np.fromfile(dst, np.uint16)
    theirs = torch.from_numpy(bits.view(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    ours_nan = (ours & 0x7fff) > 0x7f80
    theirs_nan = (theirs & 0x7fff) > 0x7f80
    expect(np.array_equal(ours_nan, theirs_nan), "conversion: NaN classes differ from torch")
    differ = np.flatnonzero((ours != theirs) & ~theirs_nan)
    expect(differ.size == 0, f"conversion: {differ.size} patterns differ from torch, e.g. "
           + ", ".join(f"{bits[i]:08x}->{ours[i]:04x} (torch {theirs[i]:04x})" for i in differ[:3]))
    print(f"conversion: {bits.size} float patterns equal to torch's bf16 rounding")


def bf16_round(x):
    return torch.from_numpy(x).to(torch.bfloat16)


def check_product(name, ours, a16, b16, c0, K):
    """ours ~ a16 @ b16 + c0, with a16, b16 bf16 tensors; c0 float64 array or 0.
    Returns max|ours - torch bf16| / max|torch bf16|, or None where torch's
    own bf16 matmul does not accumulate in fp32."""
    a, b = a16.double(), b16.double()
    exact = (a @ b).numpy() + c0
    abs_sum = (a.abs() @ b.abs()).numpy() + np.abs(c0)
    bound = gamma(K + 1) * abs_sum
    err = np.abs(ours - exact)
    expect(np.all(err <= bound), f"{name}: {np.sum(err > bound)} elements beyond the fp32-accumulation bound vs "
           f"the exact product (worst excess {np.max(err - bound):.3g})")
    fp32 = (a16.float() @ b16.float()).double().numpy() + c0  # torch, bf16 inputs, fp32 accumulation
    err = np.abs(ours - fp32)
    expect(np.all(err <= 2 * bound), f"{name}: {np.sum(err > 2 * bound)} elements beyond 2 gamma(K+1) sum|ab| "
           "vs torch fp32 on the bf16 inputs")
    if not TORCH_BF16_MATMUL:
        return None
    product = (a16 @ b16).double().numpy()  # torch's bf16 matmul: bf16 output
    exact_product = exact - c0
    rounding = 2.0 ** -8 * (np.abs(exact_product) + gamma(K) * abs_sum)
    if np.any(np.abs(product - exact_product) > rounding + gamma(K) * abs_sum):
        worst = np.max(np.abs(product - exact_product) / np.maximum(np.abs(exact_product), 1e-30))
        print(f"  {name}: torch {torch.__version__} bf16 matmul does not accumulate in fp32 here "
              f"(relative error up to {worst:.2g} vs exact); not compared with it")
        return None
    err = np.abs(ours - (product + c0))
    tol = rounding + 2 * bound
    expect(np.all(err <= tol), f"{name}: {np.sum(err > tol)} elements beyond the bound vs torch bf16")
    return np.max(err) / max(np.max(np.abs(product + c0)), 1e-30)


def test_layer(path, N, IC, OC, tmp):
    rng = np.random.default_rng(N * 7919 + IC * 31 + OC)
    data = {"inp": rng.standard_normal((N, IC)), "weight": 0.02 * rng.standard_normal((OC, IC)),
            "bias": rng.standard_normal(OC), "dout": 0.01 * rng.standard_normal((N, OC)),
            "dweight0": 0.01 * rng.standard_normal((OC, IC)), "dbias0": rng.standard_normal(OC)}
    data = {k: v.astype(np.float32) for k, v in data.items()}
    for k, v in data.items():
        v.tofile(os.path.join(tmp, k + ".f32"))
    run = subprocess.run([DRIVER, "layer", path, str(N), str(IC), str(OC), tmp], check=True, capture_output=True,
                         text=True)
    read = lambda name, shape: np.fromfile(os.path.join(tmp, name + ".f32"), np.float32).reshape(shape).astype(np.float64)
    out, dinp = read("out", (N, OC)), read("dinp", (N, IC))
    dweight, dbias = read("dweight", (OC, IC)), read("dbias", (OC,))
    x16, w16, d16 = bf16_round(data["inp"]), bf16_round(data["weight"]), bf16_round(data["dout"])
    tag = f"{run.stdout.strip()} {N}x{IC}x{OC}"
    rel = [check_product(f"{tag} out", out, x16, w16.t(), data["bias"].astype(np.float64), IC),
           check_product(f"{tag} dinp", dinp, d16, w16, 0, OC),
           check_product(f"{tag} dweight", dweight, d16.t(), x16, data["dweight0"].astype(np.float64), N)]
    dout = data["dout"].astype(np.float64)
    exact_db = dout.sum(0) + data["dbias0"]
    tol_db = gamma(N + 1) * (np.abs(dout).sum(0) + np.abs(data["dbias0"]))
    expect(np.all(np.abs(dbias - exact_db) <= tol_db), f"{tag} dbias beyond the fp32 summation bound")
    compared = [r for r in rel if r is not None]
    expect(all(r <= 1e-2 for r in compared),
           f"{tag}: max|ours - torch bf16| / max|torch| = {max(compared, default=0):.3g} > 1e-2")
    shown = " ".join(f"{n} {r:.2e}" if r is not None else f"{n} -" for n, r in zip(("out", "dinp", "dweight"), rel))
    print(f"{tag}: max|ours - torch bf16| / max|torch|: {shown}")
    return len(compared)


def torch_bf16_matmul_here():
    """(whether torch's own bf16 matmul runs on this CPU, whether it accumulates in fp32 at the model's shapes);
    says why not where either fails (its oneDNN has no bf16 matmul below AVX-512)."""
    try:
        broken = fp32_accumulation_breaks()
    except RuntimeError as e:
        print(f"torch {torch.__version__}'s bf16 matmul cannot run on this CPU ({e}): check c (against torch's bf16 "
              "output) skipped; a and b run")
        return False, False
    if broken:
        print(f"{broken}: its fallback gemm, not oneDNN's; check c runs only on the products where torch keeps "
              "its bound, a and b on all")
    return True, broken is None


def main():
    global TORCH_BF16_MATMUL, TORCH_BF16_IS_ONEDNN
    if PATH == "onednn":
        onednn_or_skip(DRIVER, "bf16_torch_onednn")
    TORCH_BF16_MATMUL, TORCH_BF16_IS_ONEDNN = torch_bf16_matmul_here()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if PATH == "widen":
            test_conversion(tmp)
        for N, IC, OC in ((1, 1, 1), (1, 7, 33), (5, 17, 3), (200, 1536, 97)):
            test_layer(PATH, N, IC, OC, tmp)
        # the model's shapes, where torch's bf16 matmul is oneDNN's (fp32 accumulation)
        compared = sum(test_layer(PATH, N, IC, OC, tmp) for N, IC, OC in ((256, 384, 1152), (256, 1536, 384)))
        expect(compared == 6 or not TORCH_BF16_IS_ONEDNN, f"{PATH}: torch's bf16 matmul was usable for {compared} of 6 "
               "products at the model's shapes")
    if expect.failed:
        print(f"{len(expect.failed)} failures")
        sys.exit(1)
    print(f"bf16 kernels on the {PATH} path agree with PyTorch")


if __name__ == "__main__":
    main()
