/* model.h: the shape of a decoder-only transformer to be planned (GPT-2,
 * GPT-3, Llama style, optionally with mixture-of-experts MLPs), its
 * parameter count and its FLOPs per token.
 *
 * FLOP convention, used everywhere in plan/: a multiply-add is 2 FLOPs and
 * attention is counted in full (s x s scores, no causal halving), as in
 * Narayanan et al. 2021 eq. 3, so MFU figures compare with published ones.
 * Kernels that skip the masked half save time, not model FLOPs: compute.c
 * accounts for that. This file knows nothing of devices or layouts. */
#ifndef BS_PLAN_MODEL_H
#define BS_PLAN_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/layout.h"

typedef enum { ACT_GELU, ACT_SWIGLU } Activation;
typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;

/* The FP8 linear layers of a framework: Transformer Engine's (FP8 copies of
 * the inputs kept, gate and up one FC1 matmul, every input cast by its own
 * kernel as under current scaling), the same under delayed scaling, whose
 * norms write the QKV and FC1 inputs in FP8 themselves, or torchao's
 * Float8Linear (BF16 inputs kept, each linear casting its own input). */
typedef enum { FP8_TE, FP8_TE_DELAYED, FP8_TORCHAO } Fp8Linears;

typedef struct {
    char name[32];
    int layers, hidden, heads, kv_heads, ffn, vocab, seq_len;
    int vocab_multiple;     /* logits are computed over vocab rounded up to this (1: none) */
    Activation act;
    NormKind norm;
    bool bias;              /* linear layers have biases (GPT-2) */
    bool tied_embeddings;   /* the output layer is the input embedding */
    bool learned_positions; /* a (seq_len, hidden) position table */
    bool dropout;           /* dropout masks are stored for backward */
    int experts, top_k;     /* MoE: experts per layer and per token (experts <= 1: dense) */
    int head_dim;           /* per head (0: hidden / heads); Qwen3 has heads x head_dim != hidden */
    double moe_imbalance;   /* MoE: tokens on the busiest expert rank over the mean (<= 1: balanced) */
    int shared_experts;     /* MoE: experts every token passes through beside its top_k routed ones
                             * (DeepSeekMoE), replicated on every rank: no all-to-all */
    int moe_device_limit;   /* MoE: each token's routed experts on at most this many EP ranks, sent once
                             * to each (DeepSeek-V2's device-limited routing; 0: no limit) */
    int moe_node_limit;     /* MoE: ... on at most this many nodes, each crossed once over the network
                             * and forwarded over NVLink inside (DeepSeek-V3's node-limited routing; 0: none) */
    int attention_window;   /* sliding window: a query of a windowed layer sees at most this many keys (0: none) */
    int window_layers;      /* how many of the layers have the window (GPT-OSS: every other one) */
    bool moe_probs_in_activation; /* MoE: the routing probabilities scale the experts' activation (Megatron-core
                                   * >= 0.13), not their output at the combine: the output is not kept */
    Fp8Linears fp8_linears;       /* FP8: whose linear layers (what they keep and cast: memory.h, compute.c) */
    int mtp_layers; /* multi-token prediction modules (DeepSeek-V3 section 2.2, D): each one more block, a 2h x h
                     * projection of [norm(h); norm(embedding)] and one more pass of the shared output layer and
                     * loss, on the last pipeline stage beside the loss (Megatron-core's layout "...mL") */
} ModelShape;

int model_head_dim(const ModelShape *m);
int model_kv_dim(const ModelShape *m);
int model_q_dim(const ModelShape *m); /* heads x head_dim: the width of Q and of the attention output */
int model_padded_vocab(const ModelShape *m);
bool model_is_moe(const ModelShape *m);
/* Max over mean routed tokens of the busiest expert-parallel rank, >= 1 (1
 * for dense models): it scales that rank's expert MLP rows and its
 * all-to-all bytes, and the slowest rank sets the step (docs/PLANNER.md). */
double model_moe_imbalance(const ModelShape *m);
/* One-line reason naming the flag to change, or true. */
bool model_check(const ModelShape *m, char *why, size_t n);

/* Parameters (counts, not bytes). */
double model_layer_dense_params(const ModelShape *m);  /* attention, norms, router, shared experts */
double model_layer_expert_params(const ModelShape *m); /* MLP, all routed experts */
double model_mlp_params_one_expert(const ModelShape *m);
double model_embedding_params(const ModelShape *m);    /* token (+ position) embedding */
double model_head_params(const ModelShape *m);         /* final norm + untied output layer */
/* One multi-token prediction module beside its block: the 2h x h projection, its two input norms and its
 * output norm (Megatron-core's enorm, hnorm, eh_proj, final_layernorm; the embedding and the output layer are
 * shared with the main model). */
double model_mtp_extra_params(const ModelShape *m);
double model_params(const ModelShape *m);
/* Parameters a token passes through (MoE: top_k routed and the shared experts), for 6N-style rules. */
double model_active_params(const ModelShape *m);

/* Forward FLOPs per token. */
double model_layer_flops(const ModelShape *m);          /* one block, attention in full */
/* QK^T and AV per token and layer, counted in full: 4 s q (q = h unless head_dim says), and on the
 * window_layers windowed layers 4 min(W, s) q (the window in full, as the causal layer's s is): the mean
 * over the layers */
double model_attention_core_flops(const ModelShape *m);
/* The share of the layers that have the sliding window (0 without one). */
double model_window_share(const ModelShape *m);
double model_head_flops(const ModelShape *m);           /* output layer: 2 h V */
double model_mtp_projection_flops(const ModelShape *m); /* one MTP module's projection: 2 x 2h x h */
/* Training FLOPs per token: forward + backward (3x forward) of the blocks,
 * the output layer and the MTP modules (each a block, its projection and an
 * output-layer pass), plus the recomputed forward work when r is not NONE (hardware FLOPs; for OP the
 * matmuls torchtitan's policy recomputes in BF16: op_checkpoint.h). */
double model_train_flops_per_token(const ModelShape *m, Recompute r);

/* Narayanan et al. 2021 closed forms (GPT with tied embeddings, h = 4h MLP):
 * eq. 2 parameters P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)), and FLOPs
 * per iteration of B sequences: 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
 * without recomputation, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with. */
double megatron_params(double l, double h, double V, double s);
double megatron_flops_per_iteration(double B, double s, double l, double h, double V, bool recompute);

#endif
