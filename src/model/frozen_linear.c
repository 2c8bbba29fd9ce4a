/* frozen_linear.c: the low-precision frozen linear weights (see frozen_linear.h). */
#include "model/frozen_linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/bf16.h"

static size_t code_bytes(BaseWeights kind) { return kind == BASE_WEIGHTS_BF16 ? 2 : 1; }

/* Where matrix `which` of `layer` starts: its first element and its first row. */
static void position(const FrozenLinear *f, int layer, int which, size_t *element, size_t *row) {
    size_t per_layer = 0, rows_per_layer = 0, before = 0, rows_before = 0;
    for (int m = 0; m < FROZEN_LINEARS; m++) {
        if (m == which) before = per_layer, rows_before = rows_per_layer;
        per_layer += f->rows[m] * f->cols[m];
        rows_per_layer += f->rows[m];
    }
    *element = (size_t)layer * per_layer + before;
    *row = (size_t)layer * rows_per_layer + rows_before;
}

FrozenLinear *frozen_linear_create(BaseWeights kind, int layers, const size_t rows[FROZEN_LINEARS],
                                   const size_t cols[FROZEN_LINEARS]) {
    FrozenLinear *f = bs_calloc(1, sizeof *f);
    f->kind = kind;
    f->layers = layers;
    memcpy(f->rows, rows, sizeof f->rows);
    memcpy(f->cols, cols, sizeof f->cols);
    size_t elements, all_rows;
    position(f, layers, 0, &elements, &all_rows); /* one past the last layer */
    f->codes = bs_calloc(elements ? elements : 1, code_bytes(kind));
    if (kind == BASE_WEIGHTS_INT8) f->scales = bs_calloc(all_rows ? all_rows : 1, sizeof(float));
    return f;
}

void frozen_linear_free(FrozenLinear *f) {
    if (!f) return;
    free(f->codes);
    free(f->scales);
    free(f);
}

void frozen_linear_store(FrozenLinear *f, int layer, int which, const float *w) {
    size_t at, row0;
    position(f, layer, which, &at, &row0);
    const size_t R = f->rows[which], K = f->cols[which];
    if (f->kind == BASE_WEIGHTS_BF16) {
        bf16_from_floats((bf16 *)(void *)f->codes + at, w, R * K);
        return;
    }
    int8_t *codes = (int8_t *)f->codes + at;
    for (size_t r = 0; r < R; r++) {
        float amax = 0;
        for (size_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[r * K + k]));
        const float scale = amax > 0 ? amax / 127.0f : 1.0f;
        f->scales[row0 + r] = scale;
        for (size_t k = 0; k < K; k++) codes[r * K + k] = (int8_t)rintf(w[r * K + k] / scale);
    }
}

void frozen_linear_load(const FrozenLinear *f, int layer, int which, float *w) {
    size_t at, row0;
    position(f, layer, which, &at, &row0);
    const size_t R = f->rows[which], K = f->cols[which];
    if (f->kind == BASE_WEIGHTS_BF16) {
        bf16_to_floats(w, (const bf16 *)(const void *)f->codes + at, R * K);
        return;
    }
    const int8_t *codes = (const int8_t *)f->codes + at;
    for (size_t r = 0; r < R; r++)
        for (size_t k = 0; k < K; k++) w[r * K + k] = (float)codes[r * K + k] * f->scales[row0 + r];
}

size_t frozen_linear_bytes(const FrozenLinear *f) {
    if (!f) return 0;
    size_t elements, rows;
    position(f, f->layers, 0, &elements, &rows);
    return elements * code_bytes(f->kind) + (f->scales ? rows * sizeof(float) : 0);
}
