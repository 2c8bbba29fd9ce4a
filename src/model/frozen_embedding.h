/* frozen_embedding.h: LoRA's frozen token embedding wte (tied to the output
 * head) kept in bf16 when the frozen base is stored reduced (--base-weights
 * bf16|int8|nf4), as QLoRA keeps the modules it does not quantise in the
 * compute dtype. No fp32 copy of it exists at any moment: it is filled a
 * block of rows at a time, the encoder widens the rows it gathers, and the
 * head (logits = x wte^T and its input gradient dx = dlogits wte) runs over
 * the vocabulary in fixed blocks of FROZEN_HEAD_BLOCK rows, each widened
 * into the fp32 scratch the frozen linear weights are dequantized into (idle
 * while the head runs). A frozen wte kept in fp32 goes through the
 * same blocks (read in place), so both give the same bits on the same
 * values, and at any thread count (the blocks do not depend on it). wte has
 * no gradient: under LoRA it is frozen. */
#ifndef BS_MODEL_FROZEN_EMBEDDING_H
#define BS_MODEL_FROZEN_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

enum { FROZEN_HEAD_BLOCK = 1024 }; /* vocabulary rows per block (the scratch holds at least one) */

typedef struct {
    size_t rows;    /* the shard's vocabulary rows (padding included) */
    int C;
    bf16 *codes;    /* (rows, C) */
} FrozenEmbedding;

/* The frozen wte the head reads: fp32 values in place, or (values NULL) bf16 codes widened a block at a time
 * into scratch (FROZEN_HEAD_BLOCK x C floats). */
typedef struct {
    const float *values;
    const FrozenEmbedding *codes;
    float *scratch;
    size_t rows;
    int C;
} FrozenWte;

FrozenEmbedding *frozen_embedding_create(size_t rows, int C);
void frozen_embedding_free(FrozenEmbedding *f);
size_t frozen_embedding_bytes(const FrozenEmbedding *f);
/* Rows row0 .. row0+n-1 from fp32 src (rounded to nearest even), or their values into dst. */
void frozen_embedding_store(FrozenEmbedding *f, size_t row0, size_t n, const float *src);
void frozen_embedding_load(const FrozenEmbedding *f, size_t row0, size_t n, float *dst);

/* out (B,T,C) = wte[token - v_begin] + wpe[pos(t)], as encoder_forward (kernels.h) on the widened rows. */
void frozen_embedding_encode(const FrozenEmbedding *f, float *out, const int32_t *tokens, const float *wpe,
                             const int32_t *positions, int v_begin, int v_end, int B, int T);
/* logits (N, rows) = x (N, C) @ wte^T. */
void frozen_head_forward(FrozenWte w, float *logits, const float *x, size_t N);
/* dx (N, C) = dlogits (N, rows) @ wte (written, not added). */
void frozen_head_backward(FrozenWte w, float *dx, const float *dlogits, size_t N);

#endif
