/* layernorm.c: LayerNorm over the channel dimension (eps 1e-5), forward and
 * backward (whole, or its input and parameter parts apart). Weight and bias
 * gradients are summed per column in row order. */
#include "kernels/kernels.h"

#define LN_EPS 1e-5

void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                       const real *bias, size_t N, int C) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        const real *x = inp + i * C;
        real m = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        real v = 0;
        for (int c = 0; c < C; c++) {
            real d = x[c] - m;
            v += d * d;
        }
        v /= C;
        real s = 1 / real_sqrt(v + (real)LN_EPS);
        real *o = out + i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

/* dinp (N,C) += the input gradient; rows are independent */
void layernorm_backward_input(real *dinp, const real *dout, const real *inp, const real *weight, const real *mean,
                              const real *rstd, size_t N, int C) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        const real *d = dout + i * C;
        const real *x = inp + i * C;
        real m = mean[i], s = rstd[i];
        real dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int c = 0; c < C; c++) {
            real norm = (x[c] - m) * s;
            real dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        real *dx = dinp + i * C;
        for (int c = 0; c < C; c++) {
            real norm = (x[c] - m) * s;
            real dnorm = weight[c] * d[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

/* dweight (C) +=, dbias (C) +=; columns are independent, rows summed in order */
void layernorm_backward_params(real *dweight, real *dbias, const real *dout, const real *inp, const real *mean,
                               const real *rstd, size_t N, int C) {
    const int slice = 32;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += slice) {
        int c1 = c0 + slice < C ? c0 + slice : C;
        for (size_t i = 0; i < N; i++) {
            const real *d = dout + i * C;
            const real *x = inp + i * C;
            real m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) {
                dweight[c] += (x[c] - m) * s * d[c];
                dbias[c] += d[c];
            }
        }
    }
}

void layernorm_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                        const real *weight, const real *mean, const real *rstd, size_t N, int C) {
    layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
    layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C);
}
