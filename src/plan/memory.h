/* memory.h: bytes per GPU: model states under ZeRO (Rajbhandari et al.
 * 2020) and activations per layer with tensor/sequence parallelism and
 * recomputation (Korthikanti et al. 2022), for one pipeline stage.
 *
 * Units are bytes. This file does not decide whether a layout is fast, only
 * what it holds at its peak (the start of the first backward). */
#ifndef BS_PLAN_MEMORY_H
#define BS_PLAN_MEMORY_H

#include <stdbool.h>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model.h"

/* Bytes per parameter for weights, gradients and Adam state. Mixed precision
 * (BF16/FP8): 2 + 2 + 12 (fp32 master weights, momentum, variance), the
 * ZeRO paper's K = 12. FP32: 4 + 4 + 8. */
typedef struct {
    double weights, grads, optimizer;
} StateBytes;

StateBytes state_bytes(Precision p);

/* Model-state bytes per GPU for `params` parameters replicated over
 * `shards` ranks at ZeRO `stage`: stage 0 keeps all three, 1 shards the
 * optimizer state, 2 also the gradients, 3 also the weights. */
void zero_states(double params, int shards, int stage, StateBytes b, double *weights, double *grads, double *optimizer);

/* Activation bytes one layer keeps for backward, for one micro-batch on one
 * GPU (Korthikanti et al. eq. 1-6, generalized to GQA, SwiGLU, MoE, context
 * parallelism and any activation width). */
double activation_bytes_per_layer(const ModelShape *m, const Layout *l, AttentionImpl a, Precision p, Recompute r);

/* Bytes per element of what a linear layer keeps of its input for the
 * weight gradient. Under FP8, Transformer Engine keeps the FP8 copy it cast
 * for the forward product and not the BF16 input: 1 byte (te.Linear and
 * LayerNormLinear at NVIDIA/TransformerEngine commit 0004dbd save
 * `inputmat_t`, the FP8 transpose, or with sequence parallelism the FP8
 * `inputmat`, and the norm's FP8 `ln_out`, keeping `inputmat_no_fp8` only
 * without FP8; TE 2's quantized tensors keep the column-wise FP8 data,
 * `update_usage(rowwise_usage=False, columnwise_usage=True)` in _Linear and
 * _GroupedLinear.forward; MXFP8 adds one E8M0 scale per 32 elements, not
 * counted). torchao's Float8Linear keeps the BF16 input
 * (`matmul_with_hp_or_float8_args.forward` saves `input_hp`, pytorch/ao
 * torchao/float8/float8_linear.py, commit 7ca1bfb): the model's
 * FP8_TORCHAO, 2 bytes. Otherwise the activation width. */
double linear_input_bytes(const ModelShape *m, Precision p);

/* Bytes of the experts' output, the routed copies before the combine, for
 * one micro-batch of one MoE layer on one GPU (0 for a dense model). The
 * combine reads them; they are kept for backward only where the routing
 * probabilities scale them there (the probabilities' gradient needs them).
 * Megatron-core moved that product into the experts' activation in v0.13
 * (weighted SwiGLU, which keeps its input and the probabilities: the
 * model's --moe-probs activation; NVIDIA/Megatron-LM
 * megatron/core/transformer/moe/README.md, "MCore v0.13": "moving the probs
 * multiplication from unpermutation to activation function of GroupedMLP";
 * TEGroupedMLP.forward in moe/experts.py), so there they are element-wise
 * traffic, not memory. */
double moe_routed_output_bytes(const ModelShape *m, const Layout *l, Precision p);

/* Micro-batches whose activations stage `stage` (0-based) holds at its peak:
 * GPipe all m; 1F1B min(m, p - stage); interleaved counts Megatron's
 * warm-up chunks, p + (p - 1)/v on the first stage. */
double in_flight_micro_batches(const Layout *l, int stage, int micro_batches);

typedef struct {
    double weights, grads, optimizer; /* model states after ZeRO */
    double activations;               /* kept for backward */
    double logits;                    /* last stage: one micro-batch of logits */
    double transient;                 /* ZeRO-3 gathered layers */
    double reserve;                   /* runtime, allocator, buffers */
    double total, capacity;
} MemoryBreakdown;

typedef struct {
    int layers;        /* transformer blocks on this stage */
    bool first, last;  /* holds the embedding / the output layer (and the MTP modules: model.h) */
    double in_flight;  /* micro-batches of activations held */
} StageShape;

/* Parameters a GPU of this stage holds (dense part, expert part). */
void stage_params(const ModelShape *m, const Layout *l, const StageShape *s, double *dense, double *expert);
MemoryBreakdown stage_memory(const ModelShape *m, const Layout *l, AttentionImpl a, Precision p, const StageShape *s,
                             double capacity, double reserve);

#endif
