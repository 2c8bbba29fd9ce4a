/* matmul.c: the linear layer y = x W^T + b through BLAS gemm, forward and
 * backward. No hand-written matmul: gemm does the FLOPs, the bias gradient
 * is a column sum done here in a fixed order.
 *
 * Bitwise the same for any thread count, by construction: each product is
 * cut into fixed blocks (MATMUL_ROW_BLOCK rows of out and dinp; for dweight
 * MATMUL_DWEIGHT_BLOCK rows of dweight, i.e. output channels, the reduction
 * over the N rows never split), and each block is one single-threaded gemm
 * inside this file's OpenMP loop. A multi-threaded gemm is not enough:
 * OpenBLAS partitions the matrix by the thread count, and its edge tiles sum
 * K in another order than its inner tiles (OpenBLAS 0.3.21's Haswell kernel
 * on AMD Zen: 1 vs 2 threads changed 2142 of 12288 elements of a
 * 128x96x32 product). A gemm called inside an OpenMP parallel region runs
 * single-threaded (Debian's OpenMP build of OpenBLAS); with one thread the
 * region is not active but OpenBLAS then has one thread anyway. */
#include <stdbool.h>

#include "kernels/kernels.h"

static size_t block_count(size_t n, size_t block) { return (n + block - 1) / block; }

/* Row block b of out (rows, ldo apart) = inp @ weight^T (+ bias): one single-threaded gemm. */
static void forward_block(real *out, size_t ldo, const real *inp, const real *weight, const real *bias, size_t N,
                          int IC, int OC, size_t b) {
    const size_t r0 = b * MATMUL_ROW_BLOCK;
    const size_t rows = N - r0 < MATMUL_ROW_BLOCK ? N - r0 : MATMUL_ROW_BLOCK;
    real *o = out + r0 * ldo;
    real beta = 0;
    if (bias) {
        for (size_t i = 0; i < rows; i++)
            for (int c = 0; c < OC; c++) o[i * ldo + c] = bias[c];
        beta = 1;
    }
    /* out[r0:r0+rows] (rows,OC) = inp[r0:r0+rows] (rows,IC) @ weight^T (IC,OC) */
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, OC, IC, 1, inp + r0 * IC, IC, weight, IC, beta, o,
            (int)ldo);
}

void matmul_forward(real *out, const real *inp, const real *weight, const real *bias, size_t N, int IC, int OC) {
    const size_t blocks = block_count(N, MATMUL_ROW_BLOCK);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t b = 0; b < blocks; b++) forward_block(out, (size_t)OC, inp, weight, bias, N, IC, OC, b);
}

void matmul_forward_columns(real *out, size_t ldo, const real *inp, const real *weight, const real *bias, size_t N,
                            int IC, int OC) {
    const size_t blocks = block_count(N, MATMUL_ROW_BLOCK);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t b = 0; b < blocks; b++) forward_block(out, ldo, inp, weight, bias, N, IC, OC, b);
}

/* Row block b of dinp (rows,IC) = dout (rows,OC; ldd apart) @ weight (OC,IC) + beta dinp. */
static void input_block(real *dinp, const real *dout, size_t ldd, const real *weight, size_t N, int IC, int OC,
                        real beta, size_t b) {
    const size_t r0 = b * MATMUL_ROW_BLOCK;
    const size_t rows = N - r0 < MATMUL_ROW_BLOCK ? N - r0 : MATMUL_ROW_BLOCK;
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, IC, OC, 1, dout + r0 * ldd, (int)ldd, weight, IC,
            beta, dinp + r0 * IC, IC);
}

void matmul_backward_input_columns(real *dinp, const real *dout, size_t ldd, const real *weight, size_t N, int IC,
                                   int OC, bool accumulate) {
    const size_t blocks = block_count(N, MATMUL_ROW_BLOCK);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t b = 0; b < blocks; b++) input_block(dinp, dout, ldd, weight, N, IC, OC, accumulate ? 1 : 0, b);
}

void matmul_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, size_t N, int IC, int OC) {
    const size_t row_blocks = dinp ? block_count(N, MATMUL_ROW_BLOCK) : 0;
    const size_t out_blocks = dweight ? block_count((size_t)OC, MATMUL_DWEIGHT_BLOCK) : 0;
    /* a dinp block is ROW_BLOCK x IC x OC multiply-adds, a dweight block DWEIGHT_BLOCK x IC x N */
    const bool dinp_first = (double)MATMUL_ROW_BLOCK * OC >= (double)MATMUL_DWEIGHT_BLOCK * N;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < row_blocks + out_blocks; i++) {
        /* the kind with the larger blocks first, so the dynamic schedule ends
         * on small pieces (a GPT MLP at 2 threads: 2 dinp blocks beside 4
         * dweight blocks of half their size come out even) */
        const size_t b = dinp_first ? i : (i + row_blocks) % (row_blocks + out_blocks);
        if (b < row_blocks) {
            input_block(dinp, dout, (size_t)OC, weight, N, IC, OC, 0, b);
        } else {
            /* dweight[o0:o0+n] (n,IC) += dout[:, o0:o0+n]^T (n,N) @ inp (N,IC) */
            const size_t o0 = (b - row_blocks) * MATMUL_DWEIGHT_BLOCK;
            const size_t n = (size_t)OC - o0 < MATMUL_DWEIGHT_BLOCK ? (size_t)OC - o0 : MATMUL_DWEIGHT_BLOCK;
            bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, IC, (int)N, 1, dout + o0, OC, inp, IC, 1,
                    dweight + o0 * IC, IC);
        }
    }
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
