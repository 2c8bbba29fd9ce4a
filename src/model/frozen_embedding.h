/* frozen_embedding.h: LoRA's frozen token embedding wte (tied to the output
 * head) kept in bf16 when the frozen base is stored reduced (--base-weights
 * bf16|int8|nf4), as QLoRA keeps the modules it does not quantise in the
 * compute dtype. No fp32 copy of it exists at any moment: it is filled a
 * block of rows at a time, the encoder widens the rows it gathers, and the
 * head (logits = x wte^T and its input gradient dx = dlogits wte) runs over
 * the vocabulary in fixed blocks of FROZEN_HEAD_BLOCK rows
 * (model/frozen_matrix.h), each widened into the fp32 scratch the frozen
 * linear weights' blocks are dequantized into (idle while the head runs).
 * A frozen wte kept in fp32 goes through the
 * same blocks (read in place), so both give the same bits on the same
 * values, and at any thread count (the blocks do not depend on it). wte has
 * no gradient: under LoRA it is frozen. */
#ifndef BS_MODEL_FROZEN_EMBEDDING_H
#define BS_MODEL_FROZEN_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"
#include "model/frozen_matrix.h"

typedef struct {
    size_t rows;    /* the shard's vocabulary rows (padding included) */
    int C;
    bf16 *codes;    /* (rows, C) */
} FrozenEmbedding;

FrozenEmbedding *frozen_embedding_create(size_t rows, int C);
void frozen_embedding_free(FrozenEmbedding *f);
size_t frozen_embedding_bytes(const FrozenEmbedding *f);
/* Rows row0 .. row0+n-1 from fp32 src (rounded to nearest even), or their values into dst. */
void frozen_embedding_store(FrozenEmbedding *f, size_t row0, size_t n, const float *src);
void frozen_embedding_load(const FrozenEmbedding *f, size_t row0, size_t n, float *dst);

/* out (B,T,C) = wte[token - v_begin] + wpe[pos(t)], as encoder_forward (kernels.h) on the widened rows. */
void frozen_embedding_encode(const FrozenEmbedding *f, float *out, const int32_t *tokens, const float *wpe,
                             const int32_t *positions, int v_begin, int v_end, int B, int T);
/* The tied head's matrix (model/frozen_matrix.h: logits = x wte^T, dx = dlogits wte): the fp32 wte read in
 * place (values), or (values NULL) f's bf16 codes widened a block of FROZEN_HEAD_BLOCK rows at a time into
 * scratch. */
FrozenMatrix frozen_head_matrix(const float *values, const FrozenEmbedding *f, float *scratch, size_t rows, int C);

#endif
