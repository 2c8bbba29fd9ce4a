/* frozen_linear.h: LoRA's frozen base stored in low precision
 * (--base-weights): the four linear weight matrices of every layer of a shard
 * kept as bf16 codes, as int8 codes with one fp32 scale per output row
 * (absmax: scale = max |w_row| / 127, q = round-half-even(w / scale)), or as
 * QLoRA's NF4 with double-quantised block scales, each matrix one tensor
 * (model/nf4.h), and turned back into fp32 for each use: w = bf16 value,
 * w = q x scale, or NF4's dequantisation, a block of rows at a time
 * (model/frozen_matrix.h).
 * wte is kept in bf16 beside it (model/frozen_embedding.h); the rest of the
 * base (wpe, LayerNorms, biases) stays fp32
 * (GPT_PART_BASE_FP32). The adapters, their gradients and their
 * optimizer state are fp32. Dequantized values are exactly what a model file
 * holding them in fp32 would give, so a run on a pre-rounded file is this
 * run's oracle bit for bit. */
#ifndef BS_MODEL_FROZEN_LINEAR_H
#define BS_MODEL_FROZEN_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "model/frozen_matrix.h"

typedef enum { BASE_WEIGHTS_FP32, BASE_WEIGHTS_BF16, BASE_WEIGHTS_INT8, BASE_WEIGHTS_NF4 } BaseWeights;

#define FROZEN_LINEARS 4 /* qkv, attproj, fc, fcproj */

typedef struct {
    BaseWeights kind;
    int layers;
    size_t rows[FROZEN_LINEARS], cols[FROZEN_LINEARS]; /* each matrix (out, in) */
    unsigned char *codes; /* layer by layer, matrix by matrix: 2 (bf16), 1 (int8) or 1/2 (nf4) bytes per element */
    float *scales;        /* int8: one per row, same order; nf4: each matrix's absmax2 values, then its offset */
    unsigned char *block_codes; /* nf4: each matrix's 8-bit absmax codes, one per block of 64 */
    float *scratch;       /* nf4: one matrix's block absmax values while quantizing */
    float map[256];       /* nf4: the dynamic map the absmax codes index */
} FrozenLinear;

/* Storage for `layers` layers of the four matrices (bf16, int8 or nf4). */
FrozenLinear *frozen_linear_create(BaseWeights kind, int layers, const size_t rows[FROZEN_LINEARS],
                                   const size_t cols[FROZEN_LINEARS]);
void frozen_linear_free(FrozenLinear *f);
/* Quantizes matrix `which` of local layer `layer` from w (rows x cols, fp32). */
void frozen_linear_store(FrozenLinear *f, int layer, int which, const float *w);
/* The same a block of rows at a time, with the same bits: rows row0 .. row0+n-1 from w (n x cols), the blocks
 * of a matrix given in order, row0 x cols a multiple of 64 (NF4's blocks; its double quantisation runs when the
 * last row is in). */
void frozen_linear_store_rows(FrozenLinear *f, int layer, int which, size_t row0, size_t n, const float *w);
/* Its fp32 values into w; or rows row0 .. row0+n-1 of it into w (n x cols). */
void frozen_linear_load(const FrozenLinear *f, int layer, int which, float *w);
void frozen_linear_load_rows(const FrozenLinear *f, int layer, int which, size_t row0, size_t n, float *w);
size_t frozen_linear_bytes(const FrozenLinear *f);
/* Matrix `which` of local layer `layer` for the frozen products (model/frozen_matrix.h): dequantized a block of
 * FROZEN_LINEAR_BLOCK rows at a time into scratch. */
FrozenMatrix frozen_linear_matrix(const FrozenLinear *f, int layer, int which, float *scratch);

#endif
