/* encoder.c: token + position embedding, forward and backward, over the
 * whole vocabulary or one shard of it (tensor parallelism). */
#include <string.h>

#include "kernels/kernels.h"

void encoder_forward(real *out, const int32_t *tokens, const real *wte, const real *wpe, const int32_t *positions,
                     int v_begin, int v_end, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            real *o = out + ((size_t)b * T + t) * C;
            int token = tokens[b * T + t];
            const real *pe = wpe ? wpe + (size_t)(positions ? positions[b * T + t] : t) * C : NULL;
            if (token >= v_begin && token < v_end) {
                const real *we = wte + (size_t)(token - v_begin) * C;
                if (pe) for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
                else memcpy(o, we, sizeof(real) * (size_t)C);
            } else {
                if (pe) memcpy(o, pe, sizeof(real) * (size_t)C);
                else memset(o, 0, sizeof(real) * (size_t)C);
            }
        }
    }
}

/* Parallel over channel slices: each thread owns whole columns and sums the
 * rows in order, so two tokens hitting the same row never race and the
 * result does not depend on the thread count. */
void encoder_backward(real *dwte, real *dwpe, const real *dout, const int32_t *tokens, const int32_t *positions,
                      int v_begin, int v_end, int B, int T, int C) {
    const int slice = 16;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += slice) {
        int c1 = c0 + slice < C ? c0 + slice : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const real *d = dout + ((size_t)b * T + t) * C;
                int token = tokens[b * T + t];
                if (token >= v_begin && token < v_end) {
                    real *we = dwte + (size_t)(token - v_begin) * C;
                    for (int c = c0; c < c1; c++) we[c] += d[c];
                }
                if (dwpe) {
                    real *pe = dwpe + (size_t)(positions ? positions[b * T + t] : t) * C;
                    for (int c = c0; c < c1; c++) pe[c] += d[c];
                }
            }
        }
    }
}
