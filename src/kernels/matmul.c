/* matmul.c: the linear layer y = x W^T + b through BLAS gemm, forward and
 * backward. No hand-written matmul: gemm does the FLOPs, the bias gradient
 * is a column sum done here in a fixed order. */
#include "kernels/kernels.h"

void matmul_forward(real *out, const real *inp, const real *weight, const real *bias, size_t N, int IC, int OC) {
    real beta = 0;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) out[i * OC + o] = bias[o];
        beta = 1;
    }
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, OC, IC, 1, inp, IC, weight, IC, beta, out, OC);
}

void matmul_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, size_t N, int IC, int OC) {
    /* dinp (N,IC) = dout (N,OC) @ weight (OC,IC) */
    if (dinp)
        bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, IC, OC, 1, dout, OC, weight, IC, 0, dinp, IC);
    /* dweight (OC,IC) += dout^T (OC,N) @ inp (N,IC) */
    bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, (int)N, 1, dout, OC, inp, IC, 1, dweight, IC);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

void bias_backward(real *dbias, const real *dout, size_t N, int OC) {
    const int slice = 64;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += slice) {
        int o1 = o0 + slice < OC ? o0 + slice : OC;
        for (size_t i = 0; i < N; i++) {
            const real *d = dout + i * OC;
            for (int o = o0; o < o1; o++) dbias[o] += d[o];
        }
    }
}
