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
 * caller's. Header-only (static inline): sim's tests and the CUDA backend
 * (which links before the device layer) read it alike. */
#ifndef BS_DEVICE_FP8_GEMM_H
#define BS_DEVICE_FP8_GEMM_H

#include <string.h>

#include "device/device_kernels.h"
#include "device/fp8_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One product: its operands' quantizations (codes, scale_inv unset until
 * fp8_gemm_bind) and the product. */
typedef struct {
    Fp8QuantizeArgs qa, qb;
    Fp8ProductArgs product;
} Fp8Gemm;

enum { FP8_ALONG_ROWS, FP8_ALONG_COLS, FP8_TILES }; /* a block's shape by its role, as kernels/matmul_fp8.c's */

/* An operand's quantization (rows, cols) for its role; its statistics counted or not. */
static inline Fp8QuantizeArgs fp8_gemm_operand(const float *src, const uint16_t *src_bf16, int rows, int cols,
                                               const DeviceFp8Operand *op, int role, int transpose, int counted) {
    Fp8QuantizeArgs q;
    memset(&q, 0, sizeof q);
    q.stats = counted ? op->stats : NULL;
    q.src = src;
    q.src_bf16 = src_bf16;
    q.layout.rows = rows;
    q.layout.cols = cols;
    q.layout.transpose = transpose;
    q.layout.e5m2 = op->e5m2;
    if (op->blocks) {
        q.layout.block_rows = role == FP8_ALONG_ROWS ? 1 : FM_BLOCK;
        q.layout.block_cols = role == FP8_ALONG_COLS ? 1 : FM_BLOCK;
    } else {
        q.scale = op->scale;
    }
    return q;
}

/* out (n, m) = beta out + A (m, k) B (n, k)^T (+ bias) of the two quantized operands. */
static inline Fp8Gemm fp8_gemm_of(Fp8QuantizeArgs qa, Fp8QuantizeArgs qb, float *out, const float *bias, int m, int n,
                                  int k, float beta) {
    Fp8Gemm g;
    memset(&g, 0, sizeof g);
    g.qa = qa;
    g.qb = qb;
    g.product.out = out;
    g.product.bias = bias;
    g.product.la = qa.layout;
    g.product.lb = qb.layout;
    g.product.m = m;
    g.product.n = n;
    g.product.k = k;
    g.product.beta = beta;
    return g;
}

/* The products of an FP8 linear call, in order (0 to 2; the table above). */
static inline int fp8_gemm_plan(const Fp8LinearArgs *a, int forward, Fp8Gemm gemms[2]) {
    const int N = a->N, IC = a->IC, OC = a->OC;
    if (N == 0) return 0;
    if (forward) {
        gemms[0] = fp8_gemm_of(fp8_gemm_operand(a->weight, a->weight_bf16, OC, IC, &a->w, FP8_TILES, 0, 1),
                               fp8_gemm_operand(a->inp, NULL, N, IC, &a->x, FP8_ALONG_ROWS, 0, 1), a->out, a->bias,
                               OC, N, IC, 0);
        return 1;
    }
    int count = 0;
    if (a->dinp)
        gemms[count++] = fp8_gemm_of(fp8_gemm_operand(a->weight, a->weight_bf16, OC, IC, &a->w, FP8_TILES, 1, 0),
                                     fp8_gemm_operand(a->dout, NULL, N, OC, &a->g, FP8_ALONG_ROWS, 0, 1), a->dinp,
                                     NULL, IC, N, OC, 0);
    if (a->dweight)
        gemms[count++] = fp8_gemm_of(fp8_gemm_operand(a->inp, NULL, N, IC, &a->x, FP8_ALONG_COLS, 1, 0),
                                     fp8_gemm_operand(a->dout, NULL, N, OC, &a->g, FP8_ALONG_COLS, 1, !a->dinp),
                                     a->dweight, NULL, IC, OC, N, 1);
    return count;
}

/* The bytes of codes and the floats of scales a quantized operand takes. */
static inline size_t fp8_codes_bytes(const DeviceFp8Layout *l) { return (size_t)l->rows * (size_t)l->cols; }

static inline size_t fp8_scale_floats(const DeviceFp8Layout *l) {
    const FmTiling t = fm_tiling(l);
    return fm_scale_count(&t);
}

/* g's A operand in codes[0] and scales[0], B in codes[1] and scales[1]. */
static inline void fp8_gemm_bind(Fp8Gemm *g, uint8_t *const codes[2], float *const scales[2]) {
    g->qa.codes = codes[0];
    g->qa.scale_inv = scales[0];
    g->qb.codes = codes[1];
    g->qb.scale_inv = scales[1];
    g->product.a = codes[0];
    g->product.a_scale_inv = scales[0];
    g->product.b = codes[1];
    g->product.b_scale_inv = scales[1];
}

#ifdef __cplusplus
}
#endif

#endif
