/* attention.c: causal multi-head self-attention, forward and backward.
 *
 * Per (batch, head): S = Q K^T / sqrt(hs), P = softmax over j <= i, O = P V.
 * All products go through gemm in row blocks of ATT_BLOCK, and each row
 * block only touches the columns up to its last row, so the masked upper
 * triangle costs (almost) no FLOPs. The softmax backward is the O(T^2)
 * form dS = P * (dP - rowsum(dP * P)). With document starts a row also
 * skips the keys before its document's first token (P = 0 there, so the
 * backward needs nothing more). The (batch, head) pairs are spread
 * over OpenMP threads; gemm runs single-threaded inside the region. */
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vecmath.h"

#define ATT_BLOCK ATTENTION_ROW_BLOCK

/* Rows [r0, r1): softmax over the keys [start_i, i] (start NULL: 0), 0 elsewhere. */
static void softmax_causal_rows(real *att, int r0, int r1, int T, const int32_t *start) {
    for (int i = r0; i < r1; i++) {
        const int s = start ? start[i] : 0, n = i - s + 1; /* the keys seen: [s, i] */
        real *row = att + (size_t)i * T, *seen = row + s;
        real m = seen[0];
#pragma omp simd reduction(max : m)
        for (int j = 1; j < n; j++) m = seen[j] > m ? seen[j] : m;
        real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; j++) {
            seen[j] = real_exp(seen[j] - m);
            sum += seen[j];
        }
        real inv = 1 / sum;
        for (int j = 0; j < n; j++) seen[j] *= inv;
        memset(row, 0, sizeof(real) * (size_t)s);
        memset(row + i + 1, 0, sizeof(real) * (size_t)(T - i - 1));
    }
}

void attention_forward(real *out, real *att, const real *qkv, int B, int T, int C, int H) {
    attention_forward_docs(out, att, qkv, NULL, B, T, C, H);
}

void attention_forward_docs(real *out, real *att, const real *qkv, const int32_t *doc_start, int B, int T, int C,
                            int H) {
    const int hs = C / H;
    const int C3 = 3 * C;
    const real scale = 1 / real_sqrt((real)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const real *q = qkv + (size_t)b * T * C3 + h * hs;
            const real *k = q + C;
            const real *v = q + 2 * C;
            real *a = att + ((size_t)b * H + h) * T * T;
            real *o = out + (size_t)b * T * C + h * hs;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
                /* a[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T */
                bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3,
                        k, C3, 0, a + (size_t)r0 * T, T);
                softmax_causal_rows(a, r0, r1, T, doc_start ? doc_start + (size_t)b * T : NULL);
                /* o[r0:r1] = a[r0:r1, 0:r1] @ v[0:r1] */
                bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1, a + (size_t)r0 * T, T, v,
                        C3, 0, o + (size_t)r0 * C, C);
            }
        }
    }
}

void attention_backward(real *dqkv, real *scratch, int scratch_slots, const real *dout, const real *qkv,
                        const real *att, int B, int T, int C, int H) {
    const int hs = C / H;
    const int C3 = 3 * C;
    const real scale = 1 / real_sqrt((real)hs);
    int nthreads = omp_get_max_threads();
    if (nthreads > scratch_slots) nthreads = scratch_slots;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            real *ds = scratch + (size_t)omp_get_thread_num() * T * T; /* dP, then dS in place */
            const real *q = qkv + (size_t)b * T * C3 + h * hs;
            const real *k = q + C;
            const real *v = q + 2 * C;
            real *dq = dqkv + (size_t)b * T * C3 + h * hs;
            real *dk = dq + C;
            real *dv = dq + 2 * C;
            const real *p = att + ((size_t)b * H + h) * T * T;
            const real *dout_h = dout + (size_t)b * T * C + h * hs;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
                /* dP[r0:r1, 0:r1] = dout[r0:r1] @ v[0:r1]^T */
                bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1, dout_h + (size_t)r0 * C, C,
                        v, C3, 0, ds + (size_t)r0 * T, T);
                for (int i = r0; i < r1; i++) {
                    real *row = ds + (size_t)i * T;
                    const real *prow = p + (size_t)i * T;
                    real dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int j = 0; j <= i; j++) dot += row[j] * prow[j];
#pragma omp simd
                    for (int j = 0; j <= i; j++) row[j] = prow[j] * (row[j] - dot);
                    memset(row + i + 1, 0, sizeof(real) * (size_t)(T - i - 1));
                }
                /* dq[r0:r1] = scale * dS[r0:r1, 0:r1] @ k[0:r1] */
                bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, scale, ds + (size_t)r0 * T, T,
                        k, C3, 0, dq + (size_t)r0 * C3, C3);
            }
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
                /* dk[c0:c1] = scale * dS[c0:T, c0:c1]^T @ q[c0:T] (dS is 0 above the diagonal) */
                bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, scale,
                        ds + (size_t)c0 * T + c0, T, q + (size_t)c0 * C3, C3, 0, dk + (size_t)c0 * C3, C3);
                /* dv[c0:c1] = P[c0:T, c0:c1]^T @ dout[c0:T] */
                bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1, p + (size_t)c0 * T + c0,
                        T, dout_h + (size_t)c0 * C, C, 0, dv + (size_t)c0 * C3, C3);
            }
        }
    }
}
