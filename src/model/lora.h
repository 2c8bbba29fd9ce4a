/* lora.h: LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
 * Language Models"), the low-rank update of a frozen linear layer:
 *     y = W x + b + s B (A dropout(x)),   A (r, in), B (out, r), s = alpha / r
 * as peft computes it.
 *
 * Dropout (--lora-dropout p) on the branch's input, in training only, with
 * a mask that is a function of the data, not of the layout: element (token,
 * column) of layer l's target t is kept, scaled by 1/(1-p), unless
 *     u = mix(mix(row ^ salt(l, t)) + column) has (u >> 40) < round(p 2^24)
 * where mix is splitmix64's finaliser, column the layer's global input
 * column, salt(l, t) = mix((4 l + t + 1) x 0x9e3779b97f4a7c15), and row the
 * token's key: mix(h + position) with h = mix(mix(seed) + step) folded
 * over its sequence's tokens (h = mix(h + token)). So every data-parallel
 * split, accumulation and tensor-parallel shard drops the same elements,
 * backward regenerates the mask instead of storing it, and a resumed run
 * (the same optimizer step) the same as the uninterrupted one.
 *
 * The adapters are tensors of the model's layout (gpt.h: the ADAPTERS part
 * holds only them, the BASE part the frozen model); this file is their
 * arithmetic on N rows, in the fixed-block kernels of kernels.h:
 *   forward   u = s (x A^T) (N, r), kept for backward; out += u B^T
 *   backward  du = dy B (N, r), dB += dy^T u; du *= s;
 *             dA += du^T x, dx += du A
 * Under tensor parallelism (Megatron's column / row split of the base layer)
 * the adapter follows the layer: for a column-parallel layer A is whole and
 * B split by output rows, so u is whole and backward sums du over the group
 * after this rank's share of dx (which the layer's own all-reduce of dx then
 * completes); for a row-parallel layer A is split by input columns, so u is
 * summed over the group in forward, B is whole, and B u is added by the
 * group's rank 0 only (like the layer's bias) before the layer's all-reduce.
 *
 * Also here: the flag values (--lora-targets), folding B A into W
 * (--lora-merge) and the frozen base's hash. */
#ifndef BS_MODEL_LORA_H
#define BS_MODEL_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* The four linear layers of a transformer layer, as LoRA targets. */
enum { LORA_TARGET_QKV, LORA_TARGET_ATTPROJ, LORA_TARGET_FC, LORA_TARGET_FCPROJ, LORA_NUM_TARGETS };

typedef struct {
    float p;                 /* 0: none */
    const uint64_t *row_key; /* per row of the batch (lora_row_keys) */
    uint64_t salt;           /* lora_salt(layer, target) */
    int column_offset;       /* this shard's first input column in the layer's */
} LoraDropout;

/* One row key per token of b sequences of t tokens (see above). */
void lora_row_keys(uint64_t *keys, const int32_t *tokens, int b, int t, uint64_t seed, long step);
uint64_t lora_salt(int layer, int target);
/* dst (N, IC) = src with this layer's mask applied and kept values scaled by 1/(1-p); dst may be src. */
void lora_dropout_apply(const LoraDropout *d, float *dst, const float *src, size_t N, int IC);

/* Scratch for one branch: tmp (N, max(in, out)), dropped (N, in), du (N, r). */
typedef struct {
    float *tmp, *dropped, *du;
} LoraScratch;

typedef struct {
    const float *A, *B; /* this rank's shards */
    float *dA, *dB;     /* accumulated (+=) */
    int rank;           /* r */
    float scale;        /* alpha / r */
    bool row_parallel;  /* the layer splits its input over the tensor-parallel group */
    Comm *tp;           /* the group (NULL: none) */
    bool lead;          /* rank 0 of the group */
    LoraDropout dropout;
} LoraBranch;

/* out (N, OC) += the branch of inp (N, IC); u (N, r) kept. */
void lora_forward(const LoraBranch *b, float *out, float *u, LoraScratch s, const float *inp, size_t N, int IC,
                  int OC);
/* From dout (N, OC) and the forward's u: dA, dB +=, dinp (N, IC) += (this
 * rank's share; see above). */
void lora_backward(const LoraBranch *b, float *dinp, const float *dout, const float *u, const float *inp,
                   LoraScratch s, size_t N, int IC, int OC);

/* W (OC, IC) += s B A: the adapter folded into the base weight. */
void lora_merge(float *W, const float *A, const float *B, int rank, float scale, int IC, int OC);

/* Parses --lora-targets (comma-separated qkv, attproj, fc, fcproj, or all)
 * into a mask of 1 << LORA_TARGET_*; false with a one-line reason. */
bool lora_parse_targets(const char *text, int *mask, char *why, size_t why_size);
/* The mask back as text ("qkv,fc"), into out; or as a constant string. */
void lora_format_targets(int mask, char *out, size_t size);
const char *lora_targets_text(int mask);


#endif
