/* frozen_embedding.c: LoRA's frozen wte in bf16 and the tied head over it in
 * fixed vocabulary blocks (see frozen_embedding.h). */
#include "model/frozen_embedding.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

FrozenEmbedding *frozen_embedding_create(size_t rows, int C) {
    FrozenEmbedding *f = bs_calloc(1, sizeof *f);
    f->rows = rows;
    f->C = C;
    const size_t n = rows * (size_t)C;
    f->codes = bs_calloc(n > 0 ? n : 1, sizeof(bf16));
    return f;
}

void frozen_embedding_free(FrozenEmbedding *f) {
    if (!f) return;
    free(f->codes);
    free(f);
}

size_t frozen_embedding_bytes(const FrozenEmbedding *f) { return f ? f->rows * (size_t)f->C * sizeof(bf16) : 0; }

void frozen_embedding_store(FrozenEmbedding *f, size_t row0, size_t n, const float *src) {
    bf16_from_floats(f->codes + row0 * (size_t)f->C, src, n * (size_t)f->C);
}

void frozen_embedding_load(const FrozenEmbedding *f, size_t row0, size_t n, float *dst) {
    bf16_to_floats(dst, f->codes + row0 * (size_t)f->C, n * (size_t)f->C);
}

void frozen_embedding_encode(const FrozenEmbedding *f, float *out, const int32_t *tokens, const float *wpe,
                             const int32_t *positions, int v_begin, int v_end, int B, int T) {
    const int C = f->C;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const int token = tokens[b * T + t];
            const float *pe = wpe ? wpe + (size_t)(positions ? positions[t] : t) * C : NULL;
            if (token < v_begin || token >= v_end) { /* another shard's row */
                if (pe) memcpy(o, pe, sizeof(float) * (size_t)C);
                else memset(o, 0, sizeof(float) * (size_t)C);
                continue;
            }
            const bf16 *we = f->codes + (size_t)(token - v_begin) * C;
            if (pe) for (int c = 0; c < C; c++) o[c] = bf16_to_float(we[c]) + pe[c];
            else for (int c = 0; c < C; c++) o[c] = bf16_to_float(we[c]);
        }
    }
}

/* frozen_embedding_load on an untyped source (FrozenRows). */
static void widen_rows(const void *source, int index, size_t row0, size_t n, float *dst) {
    (void)index; /* one matrix */
    frozen_embedding_load(source, row0, n, dst);
}

FrozenMatrix frozen_head_matrix(const float *values, const FrozenEmbedding *f, float *scratch, size_t rows, int C) {
    return (FrozenMatrix){values, widen_rows, f, 0, scratch, rows, FROZEN_HEAD_BLOCK, C};
}
