/* frozen_linear.h: LoRA's frozen base stored in low precision (QLoRA-like,
 * --base-weights): the four linear weight matrices of every layer of a shard
 * kept as bf16 codes, or as int8 codes with one fp32 scale per output row
 * (absmax: scale = max |w_row| / 127, q = round-half-even(w / scale)), and
 * turned back into fp32 for each use: w = bf16 value, or w = q x scale.
 * The rest of the base (embeddings, LayerNorms, biases) stays fp32 beside it
 * (GPT_PART_BASE_NONLINEAR). The adapters, their gradients and their
 * optimizer state are fp32. Dequantized values are exactly what a model file
 * holding them in fp32 would give, so a run on a pre-rounded file is this
 * run's oracle bit for bit. */
#ifndef BS_MODEL_FROZEN_LINEAR_H
#define BS_MODEL_FROZEN_LINEAR_H

#include <stddef.h>
#include <stdint.h>

typedef enum { BASE_WEIGHTS_FP32, BASE_WEIGHTS_BF16, BASE_WEIGHTS_INT8 } BaseWeights;

#define FROZEN_LINEARS 4 /* qkv, attproj, fc, fcproj */

typedef struct {
    BaseWeights kind;
    int layers;
    size_t rows[FROZEN_LINEARS], cols[FROZEN_LINEARS]; /* each matrix (out, in) */
    unsigned char *codes; /* layer by layer, matrix by matrix: 2 (bf16) or 1 (int8) bytes per element */
    float *scales;        /* int8: one per row, same order */
} FrozenLinear;

/* Storage for `layers` layers of the four matrices (bf16 or int8). */
FrozenLinear *frozen_linear_create(BaseWeights kind, int layers, const size_t rows[FROZEN_LINEARS],
                                   const size_t cols[FROZEN_LINEARS]);
void frozen_linear_free(FrozenLinear *f);
/* Quantizes matrix `which` of local layer `layer` from w (rows x cols, fp32). */
void frozen_linear_store(FrozenLinear *f, int layer, int which, const float *w);
/* Its fp32 values into w. */
void frozen_linear_load(const FrozenLinear *f, int layer, int which, float *w);
size_t frozen_linear_bytes(const FrozenLinear *f);

#endif
