/* frozen_linear.c: the low-precision frozen linear weights (see frozen_linear.h). */
#include "model/frozen_linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/bf16.h"
#include "model/nf4.h"

/* What one matrix of n elements and R rows occupies in each array. */
typedef struct {
    size_t bytes, scales, block_codes;
} Footprint;

static Footprint footprint(BaseWeights kind, size_t R, size_t n) {
    if (kind == BASE_WEIGHTS_BF16) return (Footprint){2 * n, 0, 0};
    if (kind == BASE_WEIGHTS_INT8) return (Footprint){n, R, 0};
    const Nf4Sizes s = nf4_sizes(n);
    return (Footprint){s.code_bytes, s.groups + 1, s.blocks}; /* absmax2 values and the offset */
}

static Footprint add(Footprint a, Footprint b) {
    return (Footprint){a.bytes + b.bytes, a.scales + b.scales, a.block_codes + b.block_codes};
}

/* Where matrix `which` of `layer` starts in each array (which = 0, layer = layers: the totals). */
static Footprint position(const FrozenLinear *f, int layer, int which) {
    Footprint per_layer = {0, 0, 0}, before = {0, 0, 0};
    for (int m = 0; m < FROZEN_LINEARS; m++) {
        if (m == which) before = per_layer;
        per_layer = add(per_layer, footprint(f->kind, f->rows[m], f->rows[m] * f->cols[m]));
    }
    const size_t L = (size_t)layer;
    return add((Footprint){L * per_layer.bytes, L * per_layer.scales, L * per_layer.block_codes}, before);
}

/* Matrix `which` of `layer` as an NF4 tensor. */
static Nf4Tensor nf4_tensor(const FrozenLinear *f, int layer, int which) {
    const Footprint at = position(f, layer, which);
    const Nf4Sizes s = nf4_sizes(f->rows[which] * f->cols[which]);
    return (Nf4Tensor){f->codes + at.bytes, f->block_codes + at.block_codes, f->scales + at.scales,
                       f->scales + at.scales + s.groups};
}

FrozenLinear *frozen_linear_create(BaseWeights kind, int layers, const size_t rows[FROZEN_LINEARS],
                                   const size_t cols[FROZEN_LINEARS]) {
    FrozenLinear *f = bs_calloc(1, sizeof *f);
    f->kind = kind;
    f->layers = layers;
    memcpy(f->rows, rows, sizeof f->rows);
    memcpy(f->cols, cols, sizeof f->cols);
    const Footprint all = position(f, layers, 0);
    f->codes = bs_calloc(all.bytes ? all.bytes : 1, 1);
    if (all.scales) f->scales = bs_calloc(all.scales, sizeof(float));
    if (all.block_codes) {
        f->block_codes = bs_calloc(all.block_codes, 1);
        size_t most = 0;
        for (int m = 0; m < FROZEN_LINEARS; m++) most = most > rows[m] * cols[m] ? most : rows[m] * cols[m];
        f->scratch = bs_calloc(nf4_sizes(most).blocks, sizeof(float));
        nf4_dynamic_map(f->map);
    }
    return f;
}

void frozen_linear_free(FrozenLinear *f) {
    if (!f) return;
    free(f->codes);
    free(f->scales);
    free(f->block_codes);
    free(f->scratch);
    free(f);
}

void frozen_linear_store_rows(FrozenLinear *f, int layer, int which, size_t row0, size_t n, const float *w) {
    const Footprint at = position(f, layer, which);
    const size_t R = f->rows[which], K = f->cols[which], first = row0 * K;
    if (f->kind == BASE_WEIGHTS_NF4) {
        const Nf4Tensor t = nf4_tensor(f, layer, which);
        nf4_quantize_range(w, first, n * K, t, f->scratch);
        if (row0 + n == R) nf4_quantize_finish(R * K, t, f->scratch); /* the last rows: the whole matrix is in */
        return;
    }
    if (f->kind == BASE_WEIGHTS_BF16) {
        bf16_from_floats((bf16 *)(void *)(f->codes + at.bytes) + first, w, n * K);
        return;
    }
    int8_t *codes = (int8_t *)f->codes + at.bytes + first;
    float *scales = f->scales + at.scales + row0;
    for (size_t r = 0; r < n; r++) {
        float amax = 0;
        for (size_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[r * K + k]));
        const float scale = amax > 0 ? amax / 127.0f : 1.0f;
        scales[r] = scale;
        for (size_t k = 0; k < K; k++) codes[r * K + k] = (int8_t)rintf(w[r * K + k] / scale);
    }
}

void frozen_linear_store(FrozenLinear *f, int layer, int which, const float *w) {
    frozen_linear_store_rows(f, layer, which, 0, f->rows[which], w);
}

void frozen_linear_load_rows(const FrozenLinear *f, int layer, int which, size_t row0, size_t n, float *w) {
    const Footprint at = position(f, layer, which);
    const size_t K = f->cols[which], first = row0 * K;
    if (f->kind == BASE_WEIGHTS_NF4) {
        nf4_dequantize_range(nf4_tensor(f, layer, which), f->map, first, n * K, w);
        return;
    }
    if (f->kind == BASE_WEIGHTS_BF16) {
        bf16_to_floats(w, (const bf16 *)(const void *)(f->codes + at.bytes) + first, n * K);
        return;
    }
    const int8_t *codes = (const int8_t *)f->codes + at.bytes + first;
    const float *scales = f->scales + at.scales + row0;
    for (size_t r = 0; r < n; r++)
        for (size_t k = 0; k < K; k++) w[r * K + k] = (float)codes[r * K + k] * scales[r];
}

void frozen_linear_load(const FrozenLinear *f, int layer, int which, float *w) {
    frozen_linear_load_rows(f, layer, which, 0, f->rows[which], w);
}

size_t frozen_linear_bytes(const FrozenLinear *f) {
    if (!f) return 0;
    const Footprint all = position(f, f->layers, 0);
    return all.bytes + all.scales * sizeof(float) + all.block_codes;
}

/* frozen_linear_load_rows on an untyped source (FrozenRows): index = layer x FROZEN_LINEARS + which. */
static void widen_rows(const void *source, int index, size_t row0, size_t n, float *dst) {
    frozen_linear_load_rows(source, index / FROZEN_LINEARS, index % FROZEN_LINEARS, row0, n, dst);
}

FrozenMatrix frozen_linear_matrix(const FrozenLinear *f, int layer, int which, float *scratch) {
    return (FrozenMatrix){NULL, widen_rows, f, layer * FROZEN_LINEARS + which, scratch, f->rows[which],
                          FROZEN_LINEAR_BLOCK, (int)f->cols[which]};
}
