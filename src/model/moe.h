/* moe.h: a Mixture-of-Experts MLP over N rows of C channels, forward and
 * backward, on one process; and the two halves of it (the token side and
 * the expert side) that expert parallelism (parallel/moe_parallel.h) runs
 * on different ranks with an exchange between them.
 *
 * Parameters: a router weight (E,C) without bias (Mixtral, DeepSeek) and E
 * experts, each one contiguous block of moe_expert_numel floats: fc weight
 * (F,C), fc bias (F), fcproj weight (C,F), fcproj bias (C); an expert is
 * fcproj(gelu(fc(x))) with the model's GELU. Linear weights are (out, in).
 *
 * Routing, per row t with logits l = x Wr^T (E):
 *   softmax router: scores s = softmax(l)          (the router probabilities)
 *   sigmoid router: scores s = sigmoid(l)          (DeepSeek-V3)
 *   the K experts with the largest s_i + bias_i are chosen (bias: the
 *   loss-free balancing bias, for SELECTION only; ties go to the lower
 *   expert index), and their combine weights (gates) are, by cfg.gates:
 *     normalized:   w_k = S s_{e_k} / sum_j s_{e_j}  (Mixtral, norm_topk_prob;
 *                   for softmax scores equal to Megatron's default, top-k
 *                   of the logits then a softmax over the k)
 *     unnormalized: w_k = S s_{e_k}  (norm_topk_prob False)
 *     pre-softmax:  the same as unnormalized, Megatron's name for it with
 *                   softmax scores (moe_router_pre_softmax: the softmax over
 *                   all E before the top-k); softmax router only
 *   with S = cfg.routed_scale (DeepSeek-V3's routed_scaling_factor). A single
 *   normalized gate is S whatever the logits: top-1 normalized gives the
 *   router no gradient from the output (moe_default_gates avoids it).
 *   out[t] = sum_k w_k expert_{e_k}(x[t]), summed in slot order k = 0..K-1.
 * Capacity (capacity_factor > 0): each expert computes at most
 * ceil(tokens K / E x factor) rows; over that, the assignments with the
 * lowest score s (not s + bias) are dropped first, ties to the later token
 * position. A dropped assignment contributes zero (its weight is not
 * renormalised away). `tokens` is the rows one forward routes (one process)
 * or the rows of the whole EP group (parallel/moe_parallel.h), positions
 * counted in rank order: the same tokens are dropped either way.
 * capacity_factor 0: dropless.
 *
 * Losses (exact gradients into the logits), over the tokens of the GLOBAL
 * batch: the caller sums MoeStats over ranks and micro-batches and passes
 * the sums to backward and to moe_losses.
 *   L_aux = c E sum_i f_i P_i, f_i = routed_i / (tokens K) (assignments
 *   chosen for expert i before dropping; no gradient through f), P_i = prob_i
 *   / tokens, the mean router probability: softmax s_i, or for the sigmoid
 *   router the normalised score s_i / sum_j s_j (DeepSeek-V3's P_i).
 *   L_z = c_z sum_t logsumexp(l_t)^2 / tokens (both routers).
 * The loads that feed the bias update are routed_i (before dropping).
 *
 * Not here: the exchange between ranks, the optimizer, the residual and
 * LayerNorm around the block. No allocation after moe_create; not
 * thread-safe per layer. Builds in double for the gradient check (real.h). */
#ifndef BS_MODEL_MOE_H
#define BS_MODEL_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/real.h"

enum { MOE_MAX_EXPERTS = 256 };

typedef enum { MOE_ROUTER_SOFTMAX, MOE_ROUTER_SIGMOID } MoeRouter;
/* How the chosen scores become combine weights (see above). */
typedef enum { MOE_GATES_NORMALIZED, MOE_GATES_UNNORMALIZED, MOE_GATES_PRE_SOFTMAX } MoeGates;

typedef struct {
    int channels; /* C */
    int hidden;   /* F: each expert's hidden width (--moe-ffn) */
    int experts;  /* E (--experts) */
    int top_k;    /* K (--top-k) */
    MoeRouter router;
    MoeGates gates;         /* --moe-gates */
    double routed_scale;    /* S > 0 (--moe-routed-scale): every gate's factor */
    double capacity_factor; /* > 0: capacity ceil(tokens K / E x factor) per expert; 0: dropless */
    double aux_coef;        /* c (--moe-aux-loss) */
    double z_coef;          /* c_z (--moe-z-loss) */
} MoeConfig;

/* True if the config is valid; else a one-line reason naming the flag
 * (--experts, --top-k, --capacity-factor, --moe-ffn, ...). capacity_given:
 * the user passed --capacity-factor (it must then be > 0). */
bool moe_config_check(const MoeConfig *cfg, bool capacity_given, char *why, size_t why_size);
/* Expert parallelism's layout: ep >= 1 dividing the experts and the
 * data-parallel size (the EP group folds over data-parallel ranks). */
bool moe_ep_check(int experts, int ep, int dp_size, char *why, size_t why_size);
bool moe_parse_router(const char *name, MoeRouter *out);
const char *moe_router_name(MoeRouter router);
bool moe_parse_gates(const char *name, MoeGates *out);
const char *moe_gates_name(MoeGates gates); /* "normalized", "unnormalized", "pre-softmax" */
/* The gates a config gets when none is asked for: normalized for K > 1,
 * unnormalized for K = 1 (where one renormalised gate is constant). */
MoeGates moe_default_gates(int top_k);

size_t moe_router_numel(const MoeConfig *cfg); /* E C */
size_t moe_expert_numel(const MoeConfig *cfg); /* 2 F C + F + C */
typedef struct {
    real *fcw, *fcb, *fcprojw, *fcprojb;
} MoeExpert;
/* Expert e's tensors in a buffer of consecutive expert blocks. */
MoeExpert moe_expert(const MoeConfig *cfg, const real *experts, int e);
/* Rows each expert may compute for `tokens` routed rows; SIZE_MAX if dropless. */
size_t moe_capacity(const MoeConfig *cfg, size_t tokens);

/* Additive statistics of a forward; the caller zeroes them, forwards add,
 * and sums over ranks/micro-batches are plain sums of every field (all
 * doubles: MOE_STATS_DOUBLES of them, in order, for one all-reduce). */
typedef struct {
    double tokens;                  /* rows routed */
    double lse_sq;                  /* sum of logsumexp(logits)^2 */
    double routed[MOE_MAX_EXPERTS]; /* assignments chosen per expert, before dropping (the load) */
    double prob[MOE_MAX_EXPERTS];   /* sum of router probabilities (P_i x tokens) */
    double kept[MOE_MAX_EXPERTS];   /* assignments computed, after dropping (counted where computed) */
} MoeStats;
#define MOE_STATS_DOUBLES (sizeof(MoeStats) / sizeof(double))

/* The losses of the rows in `local`, with f_i and the token count of
 * `global` (local == global: the whole losses). Summed over ranks, the
 * local parts give the global losses. */
void moe_losses(const MoeConfig *cfg, const MoeStats *local, const MoeStats *global, double *aux, double *z);
typedef struct {
    double max_load, mean_load; /* over experts, of routed */
    double dropped_fraction;    /* 1 - sum kept / sum routed */
    double aux_loss, z_loss;
} MoeMetrics;
MoeMetrics moe_metrics(const MoeConfig *cfg, const MoeStats *global);
/* DeepSeek-V3's loss-free balancing: bias_i += u sign(mean load - load_i)
 * with the loads routed_i of the global batch. */
void moe_bias_update(const MoeConfig *cfg, real *bias, const MoeStats *global, double u);

typedef struct MoeLayer MoeLayer;
/* A layer for up to max_rows rows per forward, holding local_experts
 * experts (first_expert .. +local_experts of the E) and computing up to
 * max_expert_rows rows on them per forward. */
MoeLayer *moe_layer_create(const MoeConfig *cfg, size_t max_rows, int first_expert, int local_experts,
                           size_t max_expert_rows);
/* The one-process layer: all E experts, max_rows x K expert rows. */
MoeLayer *moe_create(const MoeConfig *cfg, size_t max_rows);
void moe_free(MoeLayer *layer);
const MoeConfig *moe_layer_config(const MoeLayer *layer);
/* The coefficients the losses' gradients use from now on (a model scales
 * them by its weight of a micro-step's losses in the objective). */
void moe_set_loss_coefs(MoeLayer *layer, double aux_coef, double z_coef);

/* Tensor parallelism over the experts (Megatron's expert tensor
 * parallelism): every rank of a TP group routes the same rows to the same
 * experts and holds a slice of each expert's hidden units (cfg.hidden is
 * the slice's width: fc rows and bias, fcproj columns), so its output is
 * a partial sum the caller sums over the group. The fcproj bias and the
 * router's input gradient belong to the lead rank (lead false: neither is
 * added); each combine weight's gradient, dout . y, needs the whole y, so
 * sum(ctx, values, n) adds the group's n partial values in place before the
 * router's backward. Default: lead, no sum (one rank holds whole experts). */
typedef void (*MoeSumFn)(void *ctx, real *values, size_t n);
void moe_set_tensor_parallel(MoeLayer *layer, bool lead, MoeSumFn sum, void *ctx);

/* One process. out (N,C) = moe(x (N,C)), written; router_w (E,C), experts
 * E blocks, bias (E) or NULL. stats += this forward's. Records what
 * backward needs (x must stay unchanged until then). */
void moe_forward(MoeLayer *layer, real *out, const real *x, size_t N, const real *router_w, const real *experts,
                 const real *bias, MoeStats *stats);
/* dx (N,C) +=, drouter_w (E,C) +=, dexperts += from dout (N,C) and the
 * losses' gradients (global: the summed statistics). */
void moe_backward(MoeLayer *layer, real *dx, real *drouter_w, real *dexperts, const real *dout, const real *x,
                  const real *router_w, const real *experts, const MoeStats *global);

/* ---- the token side: routing, dispatch order, combine ----
 * Dispatch order: the N K assignments sorted by expert, then by row. */
void moe_route(MoeLayer *layer, const real *x, size_t N, const real *router_w, const real *bias, MoeStats *stats);
/* Assignments per expert (E entries) in dispatch order, after moe_route. */
const size_t *moe_dispatch_counts(const MoeLayer *layer);
/* Each assignment's router score s (the capacity priority) in dispatch order. */
const real *moe_dispatch_scores(const MoeLayer *layer);
/* Each assignment's row in dispatch order. */
const int32_t *moe_dispatch_rows(const MoeLayer *layer);
/* rows (N K, C) = x's row of each assignment, in dispatch order. */
void moe_gather(const MoeLayer *layer, real *rows, const real *x);
/* out (N,C) = sum_k w_k y[assignment], y (N K, C) in dispatch order; written. */
void moe_combine(const MoeLayer *layer, real *out, const real *y);
/* dy (N K, C) = w dout[row], written; records each weight's gradient dout . y. */
void moe_combine_backward(MoeLayer *layer, real *dy, const real *dout, const real *y);
/* dx (N,C) += drows (N K, C, dispatch order) summed per row, plus the
 * router's input gradient; drouter_w +=. Uses moe_combine_backward's
 * weight gradients and the losses' (global statistics). */
void moe_route_backward(MoeLayer *layer, real *dx, real *drouter_w, const real *drows, const real *x,
                        const real *router_w, const MoeStats *global);

/* ---- the expert side: capacity and the expert MLPs ----
 * rows (M,C) grouped by local expert (counts[e] rows for local expert e),
 * each with its score and its token position (distinct within an expert).
 * y (M,C) written: each kept row's expert output, 0 for a dropped one.
 * stats->kept += per expert. capacity: moe_capacity over the tokens. */
void moe_experts_forward(MoeLayer *layer, real *y, const real *rows, const size_t *counts, const real *scores,
                         const int64_t *positions, size_t capacity, const real *experts, MoeStats *stats);
/* drows (M,C) written (0 for a dropped row) from dy (M,C); dexperts += . */
/* Capacity per group of `rows` consecutive positions (position / rows: the
 * group; each expert keeps up to capacity rows of each group); 0, the
 * default: one group. Expert parallelism sets it to the sequence length so
 * each sequence stays its own capacity group, as in the one-process GPT. */
void moe_set_capacity_group(MoeLayer *layer, size_t rows);
void moe_experts_backward(MoeLayer *layer, real *drows, const real *dy, const real *experts, real *dexperts);

#endif
