"""torch_bf16.py: whether PyTorch's own bf16 matmul is a usable reference on
this CPU, and PyTorch's bf16 autocast with its matmuls emulated where it is not.

Autocast promises bf16 operands, fp32 accumulation and a bf16 result. Where
Debian's torch 1.13 has oneDNN's bf16 matmul (AVX-512 CPUs) it keeps that
promise. Below AVX-512 its oneDNN has no bf16 matmul and torch falls back to
its own CPU gemm, which accumulates in bf16 for some operand layouts:
measured on an AVX2-only AMD EPYC (family 25 model 1), a 256x1536 by
1536x384 product is 8-10% off the exact one (of its largest element) with both operands row-major
(the form of a layer's input gradient), and within bf16's output rounding
with the second operand transposed (the forward). Such a result is not
autocast's and cannot be compared with.

`fp32_accumulation_breaks()` finds that out on the model's shapes, and
`EmulatedAutocastMatmul` is the reference where it does: every matmul on
bf16-rounded operands in torch's fp32 kernels, its result rounded to bf16,
inside autocast for every other operation. Autograd then rounds the
backward's operands and results to bf16 in the same way (the casts'
backward), so forward and backward keep autocast's promise."""
import torch
from torch.overrides import TorchFunctionMode

BF16 = torch.bfloat16
U = 2.0 ** -24


def gamma(n):
    return n * U / (1 - n * U)


def fp32_accumulation_breaks(M=256, K=1536, N=384):
    """None where torch's bf16 matmul stays within fp32 accumulation plus the bf16 output rounding for all three
    operand layouts of a linear layer (forward, input gradient, weight gradient); else a line saying which layout
    breaks it and by how much. Raises RuntimeError where torch's bf16 matmul cannot run at all."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(M, K, generator=g).to(BF16)
    b = torch.randn(K, N, generator=g).to(BF16)
    exact = a.double() @ b.double()
    abs_sum = a.double().abs() @ b.double().abs()
    bound = 2.0 ** -8 * (exact.abs() + gamma(K) * abs_sum) + gamma(K) * abs_sum
    layouts = {"A B": (a, b), "A B^T": (a, b.t().contiguous().t()), "A^T B": (a.t().contiguous().t(), b)}
    for name, (x, y) in layouts.items():
        err = ((x @ y).double() - exact).abs()
        if bool((err > bound).any()):
            rel = (err.max() / exact.abs().max()).item()
            return (f"torch {torch.__version__}'s bf16 matmul here does not accumulate in fp32 ({name} at {M}x{K}x{N}: "
                    f"max error {rel:.2g} of max|exact|, where fp32 accumulation and a bf16 result allow 2^-8 = 3.9e-3)")
    return None


class EmulatedAutocastMatmul(TorchFunctionMode):
    """Inside torch.autocast("cpu", dtype=torch.bfloat16): each matmul (`@`, torch.matmul) on bf16-rounded
    operands in fp32, its result rounded to bf16; everything else as autocast does it."""

    MATMULS = (torch.matmul, torch.Tensor.__matmul__, torch.Tensor.matmul)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.MATMULS:
            return func(*args, **kwargs)
        a, b = args
        with torch.autocast("cpu", enabled=False):
            return torch.matmul(a.to(BF16).float(), b.to(BF16).float()).to(BF16)
