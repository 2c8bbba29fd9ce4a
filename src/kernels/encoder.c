/* encoder.c: token + position embedding, forward and backward. */
#include "kernels/kernels.h"

void encoder_forward(real *out, const int32_t *tokens, const real *wte, const real *wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            real *o = out + ((size_t)b * T + t) * C;
            const real *we = wte + (size_t)tokens[b * T + t] * C;
            const real *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
    }
}

/* Parallel over channel slices: each thread owns whole columns and sums the
 * rows in order, so two tokens hitting the same row never race and the
 * result does not depend on the thread count. */
void encoder_backward(real *dwte, real *dwpe, const real *dout, const int32_t *tokens, int B, int T, int C) {
    const int slice = 16;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += slice) {
        int c1 = c0 + slice < C ? c0 + slice : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const real *d = dout + ((size_t)b * T + t) * C;
                real *we = dwte + (size_t)tokens[b * T + t] * C;
                real *pe = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) {
                    we[c] += d[c];
                    pe[c] += d[c];
                }
            }
        }
    }
}
