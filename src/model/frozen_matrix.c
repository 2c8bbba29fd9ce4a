/* frozen_matrix.c: LoRA's frozen products over a weight matrix read a block
 * of rows at a time (see frozen_matrix.h). */
#include "model/frozen_matrix.h"

#include <stdbool.h>

#include "kernels/kernels.h"

/* Rows r0 .. r0+n-1 of w in fp32: in place, or widened into the scratch. */
static const float *block_rows(FrozenMatrix w, size_t r0, size_t n) {
    if (w.values) return w.values + r0 * (size_t)w.cols;
    w.widen(w.source, w.index, r0, n, w.scratch);
    return w.scratch;
}

static size_t block_size(FrozenMatrix w, size_t r0) { return w.rows - r0 < w.block ? w.rows - r0 : w.block; }

void frozen_matrix_forward(FrozenMatrix w, float *out, const float *x, const float *bias, size_t N) {
    for (size_t r0 = 0; r0 < w.rows; r0 += w.block) {
        const size_t n = block_size(w, r0);
        matmul_forward_columns(out + r0, w.rows, x, block_rows(w, r0, n), bias ? bias + r0 : NULL, N, w.cols,
                               (int)n);
    }
}

void frozen_matrix_backward(FrozenMatrix w, float *dx, const float *dout, size_t N) {
    for (size_t r0 = 0; r0 < w.rows; r0 += w.block) {
        const size_t n = block_size(w, r0);
        matmul_backward_input_columns(dx, dout + r0, w.rows, block_rows(w, r0, n), N, w.cols, (int)n, r0 > 0);
    }
}
