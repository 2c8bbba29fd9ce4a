/* matmul_fp8.h: the FP8 linear layer, the one seam a GPU backend replaces.
 *
 * Same shapes and semantics as matmul_forward/matmul_backward (kernels.h):
 *   forward  out (N,OC) = X (N,IC) @ W (OC,IC)^T + bias (OC)
 *   dgrad    dinp (N,IC) = dY (N,OC) @ W            (written)
 *   wgrad    dweight (OC,IC) += dY^T @ X
 * but every operand of a product is first quantized to FP8 (kernels/fp8.h)
 * by its Fp8Operand, and the products accumulate in fp32. The caller gives
 * each tensor's format and, for per-tensor scaling, its scale; for block
 * scaling it asks for blocks (scaling = FP8_SCALING_BLOCKS) and this file
 * picks each operand's block shape by the role it plays, so that a block
 * always runs along the product's reduction:
 *   forward  X 1x128 (along IC), W 128x128
 *   dgrad    dY 1x128 (along OC), W 128x128
 *   wgrad    dY 128x1 and X 128x1 (along N: the transposed operands)
 * The bias and its gradient stay fp32 (the caller sums dbias from dY).
 *
 * This CPU computes the fp32 product of the FP8-rounded operands: each
 * operand dequantized (code * 1/scale in fp32; exact for power-of-two
 * scales) into this cache's scratch, then matmul.c's fp32 layer, in its
 * fixed blocks, so the bits do not depend on the thread count. A
 * CUDA/cuBLASLt implementation behind these two calls keeps the codes in
 * FP8 (e4m3/e5m2 tensors), passes the per-tensor scale_inv pointers (or the
 * block scales of the blockwise GEMM) to cublasLtMatmul with fp32
 * accumulation and the bias epilogue, and fills the same statistics; it may
 * keep the forward's FP8 X and W for backward (the CPU requantizes them:
 * the same codes, as the quantization is a pure function of the tensor and
 * its scale). Its results then differ from these only by fp32 summation
 * order.
 *
 * Statistics (fp8.h) go where an operand's stats points (NULL: not
 * counted); forward counts X and W, backward dY in its first product. */
#ifndef BS_KERNELS_MATMUL_FP8_H
#define BS_KERNELS_MATMUL_FP8_H

#include <stddef.h>

#include "kernels/fp8.h"

typedef enum { FP8_SCALING_TENSOR, FP8_SCALING_BLOCKS } Fp8Scaling;

typedef struct {
    Fp8Format format;
    Fp8Scaling scaling;
    float scale;     /* FP8_SCALING_TENSOR: codes = cast(x * scale) */
    Fp8Stats *stats; /* added to; NULL: not counted */
} Fp8Operand;

typedef struct Fp8Matmul Fp8Matmul;

Fp8Matmul *fp8_matmul_create(void);
void fp8_matmul_free(Fp8Matmul *mm);

/* out (N,OC) = fp8(inp) @ fp8(weight)^T + bias; bias may be NULL */
void fp8_linear_forward(Fp8Matmul *mm, float *out, const float *inp, const Fp8Operand *x, const float *weight,
                        const Fp8Operand *w, const float *bias, size_t N, int IC, int OC);
/* dinp (N,IC) written, dweight (OC,IC) +=; either may be NULL (skipped;
 * weight, resp. inp, then not read) */
void fp8_linear_backward(Fp8Matmul *mm, float *dinp, float *dweight, const float *dout, const Fp8Operand *g,
                         const float *inp, const Fp8Operand *x, const float *weight, const Fp8Operand *w, size_t N,
                         int IC, int OC);

#endif
