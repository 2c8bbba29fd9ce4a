/* fp8_gemm.c: the FP8 linear layer's products (fp8_gemm.h). */
#include "device/fp8_gemm.h"

#include "device/fp8_math.h"
#include "kernels/fp8.h"

enum { ALONG_ROWS, ALONG_COLS, TILES }; /* a block's shape by its role, as kernels/matmul_fp8.c's */

static Fp8QuantizeArgs quantize(const float *src, const uint16_t *src_bf16, int rows, int cols,
                                const DeviceFp8Operand *op, int role, int transpose, int counted) {
    DeviceFp8Layout l = {rows, cols, 0, 0, transpose, op->e5m2};
    if (op->blocks) {
        l.block_rows = role == ALONG_ROWS ? 1 : FP8_BLOCK;
        l.block_cols = role == ALONG_COLS ? 1 : FP8_BLOCK;
    }
    return (Fp8QuantizeArgs){NULL, NULL, counted ? op->stats : NULL, src, src_bf16, l, op->blocks ? 0 : op->scale};
}

static Fp8Gemm gemm(Fp8QuantizeArgs qa, Fp8QuantizeArgs qb, float *out, const float *bias, int m, int n, int k,
                    float beta) {
    Fp8Gemm g = {qa, qb, {0}};
    g.product = (Fp8ProductArgs){out, NULL, NULL, NULL, NULL, bias, qa.layout, qb.layout, m, n, k, beta};
    return g;
}

int fp8_gemm_plan(const Fp8LinearArgs *a, int forward, Fp8Gemm gemms[2]) {
    const int N = a->N, IC = a->IC, OC = a->OC;
    if (N == 0) return 0;
    if (forward) {
        gemms[0] = gemm(quantize(a->weight, a->weight_bf16, OC, IC, &a->w, TILES, 0, 1),
                        quantize(a->inp, NULL, N, IC, &a->x, ALONG_ROWS, 0, 1), a->out, a->bias, OC, N, IC, 0);
        return 1;
    }
    int count = 0;
    if (a->dinp)
        gemms[count++] = gemm(quantize(a->weight, a->weight_bf16, OC, IC, &a->w, TILES, 1, 0),
                              quantize(a->dout, NULL, N, OC, &a->g, ALONG_ROWS, 0, 1), a->dinp, NULL, IC, N, OC, 0);
    if (a->dweight)
        gemms[count++] = gemm(quantize(a->inp, NULL, N, IC, &a->x, ALONG_COLS, 1, 0),
                              quantize(a->dout, NULL, N, OC, &a->g, ALONG_COLS, 1, !a->dinp), a->dweight, NULL, IC,
                              OC, N, 1);
    return count;
}

size_t fp8_codes_bytes(const DeviceFp8Layout *l) { return (size_t)l->rows * (size_t)l->cols; }

size_t fp8_scale_floats(const DeviceFp8Layout *l) {
    const FmTiling t = fm_tiling(l);
    return fm_scale_count(&t);
}

void fp8_gemm_bind(Fp8Gemm *g, uint8_t *const codes[2], float *const scales[2]) {
    g->qa.codes = codes[0];
    g->qa.scale_inv = scales[0];
    g->qb.codes = codes[1];
    g->qb.scale_inv = scales[1];
    g->product.a = codes[0];
    g->product.a_scale_inv = scales[0];
    g->product.b = codes[1];
    g->product.b_scale_inv = scales[1];
}
