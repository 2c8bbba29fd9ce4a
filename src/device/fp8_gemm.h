/* fp8_gemm.h: the FP8 linear layer (DK_FP8_LINEAR_*) cut into what a GPU
 * runs: per product, each operand quantized by DK_FP8_QUANTIZE into codes
 * laid out with the product's reduction contiguous (Hopper's FP8 GEMMs take
 * A transposed and B not: "TN"), then one FP8 GEMM, cuBLASLt's or the plain
 * DK_FP8_PRODUCT. As kernels/matmul_fp8.h, with out (N,OC), X (N,IC),
 * W (OC,IC), dY (N,OC) row-major and a product's out (n, m) = A (m,k) B (n,k)^T:
 *   forward  out    m OC, n N,  k IC: A = W (128x128),       B = X (1x128)
 *   dgrad    dinp   m IC, n N,  k OC: A = W^T (128x128),     B = dY (1x128)
 *   wgrad    dweight m IC, n OC, k N: A = X^T (128x1 of X),  B = dY^T (128x1), beta 1
 * Forward counts X and W; backward dY in its first product (the rest are
 * the same codes again, or the blocks along N, uncounted as on the CPU). The
 * bias is the forward product's; dbias (the fp32 dout's column sums) is the
 * caller's. */
#ifndef BS_DEVICE_FP8_GEMM_H
#define BS_DEVICE_FP8_GEMM_H

#include "device/device_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One product: its operands' quantizations (codes, scale_inv unset until
 * fp8_gemm_bind) and the product. */
typedef struct {
    Fp8QuantizeArgs qa, qb;
    Fp8ProductArgs product;
} Fp8Gemm;

/* The products of an FP8 linear call, in order (0 to 2). */
int fp8_gemm_plan(const Fp8LinearArgs *a, int forward, Fp8Gemm gemms[2]);
/* The bytes of codes and the floats of scales a quantized operand takes. */
size_t fp8_codes_bytes(const DeviceFp8Layout *l);
size_t fp8_scale_floats(const DeviceFp8Layout *l);
/* g's A operand in codes[0] and scales[0], B in codes[1] and scales[1]. */
void fp8_gemm_bind(Fp8Gemm *g, uint8_t *const codes[2], float *const scales[2]);

#ifdef __cplusplus
}
#endif

#endif
