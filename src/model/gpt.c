/* gpt.c: the GPT's buffers, activations, forward and backward, whole or as a
 * tensor-parallel / pipeline shard (see gpt.h; the layout is gpt_layout.c).
 * Backward runs fused (gpt_backward) or split in two passes: B, the chain of
 * activation gradients, which keeps each op's output gradient in the
 * activation set's stash, and W, every parameter gradient from that stash.
 * Fused and B are one walk over the ops (backward_chain); each op's helper
 * either computes its parameter gradients at once or keeps what W needs, so
 * both run the same kernels on the same values and give the same bits. */
#include "model/gpt.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

/* Where LoRA's frozen base is kept in fp32: the BASE part, or without the linear weights and wte when they are
 * stored apart. */
static GPTConfig frozen_config(const GPTConfig *cfg) {
    return gpt_part_config(cfg, cfg->base_weights == BASE_WEIGHTS_FP32 ? GPT_PART_BASE : GPT_PART_BASE_FP32);
}

GPTConfig gpt_frozen_config(const GPTConfig *cfg) { return frozen_config(cfg); }

/* --base-weights bf16|int8|nf4: the shard's four linear weights per layer (out, in), and their scratch; wte
 * (its vocabulary rows) in bf16. */
static void create_frozen_linear(GPT *model) {
    const GPTConfig *cfg = &model->cfg;
    const size_t C = (size_t)cfg->channels, T = (size_t)gpt_tp_size(cfg);
    const size_t rows[FROZEN_LINEARS] = {3 * C / T, C, 4 * C / T, C}, cols[FROZEN_LINEARS] = {C, C / T, C, 4 * C / T};
    model->frozen_linear = frozen_linear_create(cfg->base_weights, gpt_stage_layers(cfg), rows, cols);
    size_t n = FROZEN_HEAD_BLOCK * C; /* one block of a matrix's rows (the largest), or of wte's */
    for (int m = 0; m < FROZEN_LINEARS; m++) {
        const size_t block = rows[m] < FROZEN_LINEAR_BLOCK ? rows[m] : FROZEN_LINEAR_BLOCK;
        n = n > block * cols[m] ? n : block * cols[m];
    }
    model->linear_scratch = bs_calloc(n, sizeof(float));
    const GPTConfig base = gpt_part_config(cfg, GPT_PART_BASE);
    model->frozen_wte = frozen_embedding_create(gpt_tensor_numel(&base, TK_WTE) / C, (int)C);
}

void gpt_create(GPT *model, const GPTConfig *cfg) { gpt_create_with(model, cfg, GPT_ALLOC_PARAMS | GPT_ALLOC_GRADS); }

void gpt_create_with(GPT *model, const GPTConfig *cfg, int alloc) {
    model->cfg = *cfg;
    model->num_params = gpt_num_params(cfg);
    model->params = (alloc & GPT_ALLOC_PARAMS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
    model->grads = (alloc & GPT_ALLOC_GRADS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
    model->tp = NULL;
    model->context = NULL;
    model->doc_separator = -1;
    model->head_wte = model->head_dwte = NULL;
    model->extra_wte_grad = NULL;
    model->first_nonfinite_layer = -1;
    model->bf16 = false;
    model->bf16_params = NULL;
    model->bf16_matmul = NULL;
    model->fp8 = NULL;
    GPTConfig base = frozen_config(cfg);
    model->frozen = cfg->part == GPT_PART_ADAPTERS ? bs_calloc(gpt_num_params(&base), sizeof(float)) : NULL;
    model->frozen_linear = NULL;
    model->frozen_wte = NULL;
    model->linear_scratch = NULL;
    if (model->frozen && cfg->base_weights != BASE_WEIGHTS_FP32) create_frozen_linear(model);
    model->lora_scale = 1.0f;
    model->lora_dropout = 0.0f;
    model->lora_seed = 0;
    model->lora_step = 0;
    model->moe_dp = NULL;
    model->moe_ep = NULL;
    model->moe_loss_weight = 1.0;
    model->moe_bias = NULL;
    model->moe_step = NULL;
    model->moe_aux = model->moe_z = 0;
    if (gpt_is_moe(cfg)) {
        model->moe_bias = bs_calloc((size_t)gpt_stage_layers(cfg) * cfg->experts, sizeof(float));
        model->moe_step = bs_calloc((size_t)gpt_stage_layers(cfg), sizeof(MoeStats));
    }
    if (gpt_has_head(cfg) && !gpt_has_encoder(cfg)) {
        model->head_wte = bs_calloc(gpt_tensor_numel(cfg, TK_WTE), sizeof(float));
        model->head_dwte = bs_calloc(gpt_tensor_numel(cfg, TK_WTE), sizeof(float));
    }
}

void gpt_free(GPT *model) {
    free(model->bf16_params);
    model->bf16_params = NULL;
    matmul_bf16_free(model->bf16_matmul);
    model->bf16_matmul = NULL;
    fp8_scaling_free(model->fp8);
    model->fp8 = NULL;
    free(model->params);
    free(model->grads);
    free(model->head_wte);
    free(model->head_dwte);
    free(model->frozen);
    frozen_linear_free(model->frozen_linear);
    model->frozen_linear = NULL;
    frozen_embedding_free(model->frozen_wte);
    model->frozen_wte = NULL;
    free(model->linear_scratch);
    model->linear_scratch = NULL;
    free(model->moe_bias);
    free(model->moe_step);
    model->moe_bias = NULL;
    model->moe_step = NULL;
    model->params = model->grads = model->head_wte = model->head_dwte = model->frozen = NULL;
}

void gpt_init_weights(GPT *model, uint64_t seed) {
    gpt_init_range(&model->cfg, seed, model->params, 0, model->num_params);
}

void gpt_round_block_matrices(const GPTConfig *cfg, float *block_base, int block) {
    if (!gpt_block_present(cfg, block)) return;
    if (block == 0) {
        bf16_round_floats(block_base, block_base, gpt_tensor_numel(cfg, TK_WTE));
        return;
    }
    if (block > cfg->num_layers) return; /* the final LayerNorm has no matrix */
    const int layer = block - 1;
    LayerTensors t = gpt_layer_tensors(cfg, block_base, layer);
    bf16_round_floats(t.qkvw, t.qkvw, gpt_layer_tensor_numel(cfg, TK_QKVW, layer));
    bf16_round_floats(t.attprojw, t.attprojw, gpt_layer_tensor_numel(cfg, TK_ATTPROJW, layer));
    if (t.fcw) bf16_round_floats(t.fcw, t.fcw, gpt_layer_tensor_numel(cfg, TK_FCW, layer));
    if (t.fcprojw) bf16_round_floats(t.fcprojw, t.fcprojw, gpt_layer_tensor_numel(cfg, TK_FCPROJW, layer));
}

void gpt_enable_bf16(GPT *model, MatmulBF16Path path) {
    model->bf16 = true;
    if (!model->bf16_matmul) model->bf16_matmul = matmul_bf16_create(path);
    if (model->params && !model->bf16_params) model->bf16_params = bs_malloc(model->num_params * sizeof(float));
    gpt_refresh_bf16(model);
}

void gpt_refresh_bf16(GPT *model) {
    if (!model->bf16) return;
    if (model->head_wte) bf16_round_floats(model->head_wte, model->head_wte, gpt_tensor_numel(&model->cfg, TK_WTE));
    if (!model->bf16_params) return; /* ZeRO-3: gathered blocks are rounded as they arrive */
    memcpy(model->bf16_params, model->params, model->num_params * sizeof(float));
    for (int b = 0; b < gpt_num_blocks(&model->cfg); b++) {
        size_t off, count;
        gpt_block_range(&model->cfg, b, &off, &count);
        gpt_round_block_matrices(&model->cfg, model->bf16_params + off, b);
    }
}

void gpt_enable_fp8(GPT *model, const Fp8Options *options) {
    if (!model->fp8) model->fp8 = fp8_scaling_create(options, FP8_LINEARS_PER_LAYER * gpt_stage_layers(&model->cfg));
}

void gpt_moe_begin_step(GPT *model) {
    if (model->moe_step) memset(model->moe_step, 0, sizeof(MoeStats) * (size_t)gpt_stage_layers(&model->cfg));
    model->moe_aux = model->moe_z = 0;
}

void gpt_zero_grads(GPT *model) {
    if (model->grads) memset(model->grads, 0, model->num_params * sizeof(float));
}

/* One layer's activations inside acts->layers (widths are the shard's). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
    float *lora_u[LORA_NUM_TARGETS]; /* LoRA: s (x A^T) of each target (N, r), NULL where absent */
} LayerActs;

/* The shard's widths: attention (C/tp), heads (H/tp), MLP (4C/tp), vocabulary (Vp/tp). */
typedef struct {
    int C, Cl, Hl, F, Vl, v_begin, V_valid;
} Widths;

static Widths widths(const GPTConfig *cfg) {
    int T = gpt_tp_size(cfg), r = gpt_tp_rank(cfg);
    Widths w = {cfg->channels, cfg->channels / T, cfg->num_heads / T, 4 * cfg->channels / T,
                cfg->padded_vocab_size / T, 0, 0};
    w.v_begin = r * w.Vl;
    int valid = cfg->vocab_size - w.v_begin;
    w.V_valid = valid < 0 ? 0 : valid > w.Vl ? w.Vl : valid;
    return w;
}

/* Each token's position (b,t) for the encoder: its true one under context
 * parallelism, counted from its document's first token (the separator) in
 * packed documents; NULL for 0..t-1 in every row (then nothing changes). */
static const int32_t *positions_of(const GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t) {
    if (model->context) {
        for (int s = 0; s < b; s++)
            memcpy(acts->positions + (size_t)s * t, context_attention_positions(model->context), sizeof(int32_t) * (size_t)t);
        return acts->positions;
    }
    if (model->doc_separator < 0 || !inputs) return NULL;
    for (int s = 0; s < b; s++) {
        int32_t start = 0;
        for (int i = 0; i < t; i++) {
            if (inputs[(size_t)s * t + i] == model->doc_separator) start = i;
            acts->positions[(size_t)s * t + i] = i - start;
        }
    }
    return acts->positions;
}

static bool has_adapter(const GPTConfig *cfg, int target) {
    return cfg->lora_rank > 0 && cfg->part != GPT_PART_BASE && (cfg->lora_targets >> target & 1);
}

/* The widest input or output of the shard's linear layers. */
static size_t lora_widest(const GPTConfig *cfg) {
    Widths w = widths(cfg);
    size_t widest = (size_t)(w.F > 3 * w.Cl ? w.F : 3 * w.Cl);
    return (size_t)w.C > widest ? (size_t)w.C : widest;
}

/* LoRA's scratch (lora.h's LoraScratch): two products at any width, and du (N, r). */
static size_t lora_scratch_numel(const GPTConfig *cfg, int B, int T) {
    if (cfg->lora_rank == 0 || cfg->part == GPT_PART_BASE || cfg->part == GPT_PART_BASE_FP32) return 0;
    return (size_t)B * T * (2 * lora_widest(cfg) + (size_t)cfg->lora_rank);
}

static LoraScratch lora_scratch_of(const GPTActs *acts, const GPTConfig *cfg) {
    const size_t rows = (size_t)acts->B * acts->T * lora_widest(cfg);
    return (LoraScratch){acts->lora_scratch, acts->lora_scratch + rows, acts->lora_scratch + 2 * rows};
}

/* Places one layer's activations: those recomputation keeps at kept +
 * *kept_n, the others at shared + *shared_n (a NULL base: only counts); both
 * counts advance. NONE keeps all, SELECTIVE all but the attention
 * probabilities, FULL only the layer's output (the next layer's input). */
static LayerActs place_layer_acts(const GPTConfig *cfg, int B, int T, float *kept, float *shared, size_t *kept_n,
                                  size_t *shared_n) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T;
    const bool full = cfg->recompute == GPT_RECOMPUTE_FULL;
    const bool probs = !full && cfg->recompute != GPT_RECOMPUTE_SELECTIVE;
    LayerActs a;
#define TAKE(field, n, keep)                                   \
    do {                                                       \
        float *base = (keep) ? kept : shared;                  \
        size_t *at = (keep) ? kept_n : shared_n;               \
        a.field = base ? base + *at : NULL, *at += (n);        \
    } while (0)
    TAKE(ln1, BT * w.C, !full);
    TAKE(ln1_mean, BT, !full);
    TAKE(ln1_rstd, BT, !full);
    TAKE(qkv, 3 * BT * w.Cl, !full);
    TAKE(atty, BT * w.Cl, !full);
    TAKE(att, (size_t)B * w.Hl * T * T * (size_t)gpt_cp_size(cfg), probs);
    TAKE(residual2, BT * w.C, !full);
    TAKE(ln2, BT * w.C, !full);
    TAKE(ln2_mean, BT, !full);
    TAKE(ln2_rstd, BT, !full);
    TAKE(fch, BT * w.F, !full);
    TAKE(fch_gelu, BT * w.F, !full);
    TAKE(residual3, BT * w.C, true);
    for (int t = 0; t < LORA_NUM_TARGETS; t++) {
        a.lora_u[t] = NULL;
        if (has_adapter(cfg, t)) TAKE(lora_u[t], BT * (size_t)cfg->lora_rank, !full);
    }
#undef TAKE
    return a;
}

/* Floats of one layer's kept activations, and of the shared ones. */
static size_t layer_kept_numel(const GPTConfig *cfg, int B, int T) {
    size_t kept = 0, shared = 0;
    place_layer_acts(cfg, B, T, NULL, NULL, &kept, &shared);
    return kept;
}

static size_t layer_shared_numel(const GPTConfig *cfg, int B, int T) {
    size_t kept = 0, shared = 0;
    place_layer_acts(cfg, B, T, NULL, NULL, &kept, &shared);
    return shared;
}

static LayerActs layer_acts(const GPTActs *acts, const GPTConfig *cfg, int local_layer) {
    size_t kept = 0, shared = 0;
    return place_layer_acts(cfg, acts->B, acts->T, acts->layers + (size_t)local_layer * acts->layer_stride,
                            acts->shared_layer, &kept, &shared);
}

static size_t forward_numel(const GPTConfig *cfg, int B, int T) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T, C = (size_t)w.C;
    size_t n = BT * C /* stage input */ + (size_t)gpt_stage_layers(cfg) * layer_kept_numel(cfg, B, T) +
               BT * C /* proj_out */ + BT /* losses */ + lora_scratch_numel(cfg, B, T);
    if (gpt_has_head(cfg)) n += BT * C + 2 * BT /* lnf */ + BT * (size_t)w.Vl /* logits */;
    return n;
}

static size_t backward_numel(const GPTConfig *cfg, int B, int T, int slots) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T;
    size_t att_scratch = gpt_cp_size(cfg) > 1 ? 0 : (size_t)slots * T * T; /* context attention has its own */
    return BT * ((size_t)w.C * 3 + (size_t)w.Cl * 4 + (size_t)w.F) + att_scratch;
}

/* What W needs from B for one layer (split sets): the fp32 output gradient
 * of each linear layer and LayerNorm, at the shard's widths. */
typedef struct {
    float *dfcproj, *dfch, *dln2, *dattproj, *dqkv, *dln1;
} LayerStash;

static size_t layer_stash_numel(const GPTConfig *cfg, int B, int T) {
    Widths w = widths(cfg);
    return (size_t)B * T * ((size_t)w.C * 4 + (size_t)w.F + 3 * (size_t)w.Cl);
}

/* The layers' stashes, then the final LayerNorm's output gradient (head)
 * and the residual gradient at the encoder (first stage); the head's dlogits
 * stay in acts->logits. */
static size_t stash_numel(const GPTConfig *cfg, int B, int T) {
    size_t BT_C = (size_t)B * T * (size_t)cfg->channels;
    return (size_t)gpt_stage_layers(cfg) * layer_stash_numel(cfg, B, T) + (gpt_has_head(cfg) ? BT_C : 0) +
           (gpt_has_encoder(cfg) ? BT_C : 0);
}

static LayerStash layer_stash(const GPTActs *acts, const GPTConfig *cfg, int local_layer) {
    Widths w = widths(cfg);
    size_t BT = (size_t)acts->B * acts->T;
    float *p = acts->stash + (size_t)local_layer * layer_stash_numel(cfg, acts->B, acts->T);
    LayerStash s;
    s.dfcproj = p, p += BT * w.C;
    s.dfch = p, p += BT * w.F;
    s.dln2 = p, p += BT * w.C;
    s.dattproj = p, p += BT * w.C;
    s.dqkv = p, p += 3 * BT * w.Cl;
    s.dln1 = p;
    return s;
}

static float *stash_dlnf(const GPTActs *acts, const GPTConfig *cfg) {
    return acts->stash + (size_t)gpt_stage_layers(cfg) * layer_stash_numel(cfg, acts->B, acts->T);
}

static float *stash_dencoded(const GPTActs *acts, const GPTConfig *cfg) {
    return stash_dlnf(acts, cfg) + (gpt_has_head(cfg) ? (size_t)acts->B * acts->T * cfg->channels : 0);
}

size_t gpt_acts_stash_bytes(const GPTConfig *cfg, int B, int T) { return stash_numel(cfg, B, T) * sizeof(float); }

size_t gpt_acts_bytes(const GPTConfig *cfg, int B, int T, bool for_training) {
    size_t n = forward_numel(cfg, B, T) + layer_shared_numel(cfg, B, T);
    if (for_training) n += backward_numel(cfg, B, T, omp_get_max_threads());
    return n * sizeof(float);
}

void gpt_acts_create(GPTActs *acts, const GPTConfig *cfg, int B, int T, bool for_training) {
    memset(acts, 0, sizeof *acts);
    Widths w = widths(cfg);
    acts->B = B;
    acts->T = T;
    size_t BT = (size_t)B * T, C = (size_t)w.C;
    acts->memory = bs_malloc(forward_numel(cfg, B, T) * sizeof(float));
    acts->layer_stride = layer_kept_numel(cfg, B, T);
    float *p = acts->memory;
    acts->encoded = p, p += BT * C;
    acts->layers = p, p += (size_t)gpt_stage_layers(cfg) * acts->layer_stride;
    acts->proj_out = p, p += BT * C;
    acts->losses = p, p += BT;
    acts->lora_scratch = p, p += lora_scratch_numel(cfg, B, T);
    if (gpt_has_head(cfg)) {
        acts->lnf = p, p += BT * C;
        acts->lnf_mean = p, p += BT;
        acts->lnf_rstd = p, p += BT;
        acts->logits = p;
    }
    if (layer_shared_numel(cfg, B, T) > 0)
        acts->shared_layer = acts->shared_memory = bs_malloc(layer_shared_numel(cfg, B, T) * sizeof(float));
    if (gpt_tp_size(cfg) > 1) acts->row_stats = bs_malloc(3 * BT * sizeof(double));
    acts->doc_start = bs_malloc(BT * sizeof(int32_t));
    acts->positions = bs_malloc(BT * sizeof(int32_t));
    if (lora_scratch_numel(cfg, B, T) > 0) acts->lora_row_keys = bs_malloc(BT * sizeof(uint64_t));
    if (gpt_is_moe(cfg)) {
        const MoeConfig moe = gpt_moe_config(cfg);
        const size_t n = (size_t)gpt_stage_layers(cfg);
        acts->moe = bs_malloc(n * sizeof(MoeLayer *));
        acts->moe_layers = n;
        for (size_t i = 0; i < n; i++) {
            acts->moe[i] = NULL; /* dense layers (--moe-every) have none */
            if (!gpt_layer_is_moe(cfg, gpt_first_layer(cfg) + (int)i)) continue;
            acts->moe[i] = moe_create(&moe, (size_t)B * T);
            moe_set_capacity_group(acts->moe[i], (size_t)T); /* every sequence its own capacity group */
        }
        acts->moe_stats = bs_calloc((size_t)gpt_stage_layers(cfg), sizeof(MoeStats));
    }
    if (!for_training) return;
    acts->scratch_slots = omp_get_max_threads();
    acts->grad_memory = bs_malloc(backward_numel(cfg, B, T, acts->scratch_slots) * sizeof(float));
    p = acts->grad_memory;
    acts->dresidual = p, p += BT * C;
    acts->dln = p, p += BT * C;
    acts->datty = p, p += BT * (size_t)w.Cl;
    acts->dqkv = p, p += 3 * BT * (size_t)w.Cl;
    acts->dfch = p, p += BT * (size_t)w.F;
    acts->dround = p, p += BT * C;
    acts->att_scratch = p;
}

void gpt_acts_create_split(GPTActs *acts, const GPTConfig *cfg, int B, int T) {
    gpt_acts_create(acts, cfg, B, T, true);
    acts->stash = bs_malloc(stash_numel(cfg, B, T) * sizeof(float));
}

void gpt_acts_share_backward(GPTActs *dst, const GPTActs *src) {
    free(dst->grad_memory);
    dst->grad_memory = NULL; /* not owned */
    dst->scratch_slots = src->scratch_slots;
    dst->dresidual = src->dresidual, dst->dln = src->dln, dst->datty = src->datty;
    dst->dqkv = src->dqkv, dst->dfch = src->dfch, dst->dround = src->dround, dst->att_scratch = src->att_scratch;
    free(dst->shared_memory);
    dst->shared_memory = NULL; /* not owned */
    dst->shared_layer = src->shared_layer;
}

void gpt_acts_free(GPTActs *acts) {
    if (acts->moe) {
        for (size_t i = 0; i < acts->moe_layers; i++) moe_free(acts->moe[i]);
        free(acts->moe);
        for (size_t i = 0; acts->moe_ep && i < acts->moe_layers; i++)
            if (acts->moe_ep[i]) acts->moe_ep_hooks->destroy(acts->moe_ep[i]);
        free(acts->moe_ep);
        free(acts->moe_stats);
    }
    free(acts->memory);
    free(acts->grad_memory);
    free(acts->shared_memory);
    free(acts->row_stats);
    free(acts->stash);
    free(acts->doc_start);
    free(acts->positions);
    free(acts->lora_row_keys);
    memset(acts, 0, sizeof *acts);
}

float *gpt_stage_input(const GPTConfig *cfg, GPTActs *acts) {
    (void)cfg;
    return acts->encoded;
}

float *gpt_stage_output(const GPTConfig *cfg, GPTActs *acts) {
    int n = gpt_stage_layers(cfg);
    return n > 0 ? layer_acts(acts, cfg, n - 1).residual3 : acts->encoded;
}

float *gpt_stage_grad(GPTActs *acts) { return acts->dresidual; }

/* The model's own buffers, when no BlockAccess is given. */
static float *block_start(const GPTConfig *cfg, float *base, int block) {
    size_t off, count;
    gpt_block_range(cfg, block, &off, &count);
    return base + off;
}

/* A block's parameters; in bf16 mode the copy whose matrices are rounded
 * (a ZeRO-3 block arrives rounded from its gather). */
static float *params_of(const GPT *model, const BlockAccess *a, int block) {
    float *p = a ? a->params(a->ctx, block) : block_start(&model->cfg, model->params, block);
    if (model->bf16_params && model->params && p >= model->params && p < model->params + model->num_params)
        return model->bf16_params + (p - model->params);
    return p;
}

/* bf16 mode: a matmul input rounded in place (it is read by matmuls only). */
static void round_input(const GPT *model, float *x, size_t n) {
    if (model->bf16) bf16_round_floats(x, x, n);
}

/* The linear layers of a transformer layer in fp8 mode (FP8 sites); the head's is NO_SITE. */
enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, NO_SITE = -1 };

static int fp8_site(const GPT *model, int local_layer, int linear) {
    return model->fp8 && linear != NO_SITE ? FP8_LINEARS_PER_LAYER * local_layer + linear : NO_SITE;
}

/* matmul_forward; at an FP8 site through the FP8 layer (the seam); else in
 * bf16 mode inp and weight hold bf16 values (rounded floats) and the product
 * runs on bf16_matmul's path. */
static void linear_forward(const GPT *model, int site, float *out, const float *inp, const float *weight,
                           const float *bias, size_t N, int IC, int OC) {
    if (site != NO_SITE) fp8_scaling_forward(model->fp8, site, out, inp, weight, bias, N, IC, OC);
    else if (model->bf16) matmul_bf16_forward_rounded(model->bf16_matmul, out, inp, weight, bias, N, IC, OC);
    else matmul_forward(out, inp, weight, bias, N, IC, OC);
}

/* LoRA: the frozen base model's block (NULL without LoRA). */
static float *frozen_block(const GPT *model, int block) {
    if (!model->frozen) return NULL;
    GPTConfig base = frozen_config(&model->cfg);
    return block_start(&base, model->frozen, block);
}

/* LoRA: linear weight `which` (qkv, attproj, fc, fcproj) of local layer i, (rows, cols), for the frozen
 * products (frozen_matrix.h): w read in place, or where the frozen base keeps it apart (w NULL) dequantized a
 * block of rows at a time into the scratch. Without LoRA: none (rows 0). */
static FrozenMatrix frozen_weight(const GPT *model, const float *w, int i, int which, int rows, int cols) {
    if (!model->frozen) return (FrozenMatrix){0};
    if (!w) return frozen_linear_matrix(model->frozen_linear, i, which, model->linear_scratch);
    return (FrozenMatrix){.values = w, .rows = (size_t)rows, .block = FROZEN_LINEAR_BLOCK, .cols = cols};
}

/* Linear layer `which` of local layer i forward: out (N,OC) = inp (N,IC) @ weight^T + bias; under LoRA over the
 * frozen matrix in blocks of rows. */
static void layer_linear_forward(const GPT *model, int i, int which, float *out, const float *inp,
                                 const float *weight, const float *bias, size_t N, int IC, int OC) {
    if (model->frozen) frozen_matrix_forward(frozen_weight(model, weight, i, which, OC, IC), out, inp, bias, N);
    else linear_forward(model, fp8_site(model, i, which), out, inp, weight, bias, N, IC, OC);
}

void gpt_frozen_base(const GPT *model, float *out) {
    GPTConfig kept = frozen_config(&model->cfg), base = gpt_part_config(&model->cfg, GPT_PART_BASE);
    gpt_copy_tensors(&kept, model->frozen, &base, out);
    const FrozenEmbedding *wte = model->frozen_wte;
    if (wte) frozen_embedding_load(wte, 0, wte->rows, out + gpt_tensor_offset(&base, TK_WTE, 0));
    for (int i = 0; i < gpt_stage_layers(&model->cfg) && model->frozen_linear; i++) {
        const int layer = gpt_first_layer(&base) + i;
        LayerTensors t = gpt_layer_tensors(&base, block_start(&base, out, layer + 1), layer);
        float *dst[FROZEN_LINEARS] = {t.qkvw, t.attprojw, t.fcw, t.fcprojw};
        for (int m = 0; m < FROZEN_LINEARS; m++) frozen_linear_load(model->frozen_linear, i, m, dst[m]);
    }
}

size_t gpt_frozen_bytes(const GPT *model) {
    if (!model->frozen) return 0;
    GPTConfig kept = frozen_config(&model->cfg);
    return gpt_num_params(&kept) * sizeof(float) + frozen_linear_bytes(model->frozen_linear) +
           frozen_embedding_bytes(model->frozen_wte);
}

void gpt_set_frozen_base(GPT *model, const float *base_values) {
    GPTConfig kept = frozen_config(&model->cfg), base = gpt_part_config(&model->cfg, GPT_PART_BASE);
    gpt_copy_tensors(&base, base_values, &kept, model->frozen);
    FrozenEmbedding *wte = model->frozen_wte;
    if (wte) frozen_embedding_store(wte, 0, wte->rows, base_values + gpt_tensor_offset(&base, TK_WTE, 0));
    for (int i = 0; i < gpt_stage_layers(&model->cfg) && model->frozen_linear; i++) {
        const int layer = gpt_first_layer(&base) + i;
        LayerTensors t = gpt_layer_tensors(&base, block_start(&base, (float *)base_values, layer + 1), layer);
        const float *src[FROZEN_LINEARS] = {t.qkvw, t.attprojw, t.fcw, t.fcprojw};
        for (int m = 0; m < FROZEN_LINEARS; m++) frozen_linear_store(model->frozen_linear, i, m, src[m]);
    }
}

/* A dense block's parameters: the frozen base's under LoRA (the adapters
 * hold none of the embeddings or the final LayerNorm). */
static float *dense_params(const GPT *model, const BlockAccess *a, int block) {
    return model->frozen ? frozen_block(model, block) : params_of(model, a, block);
}

/* Block 0's wpe (emb: the block): after wte, unless wte is kept apart (frozen in bf16). */
static const float *wpe_of(const GPT *model, const float *emb, Widths w) {
    return model->frozen_wte ? emb : emb + (size_t)w.Vl * w.C;
}

/* LoRA's frozen tied wte for the head (emb: block 0's parameters). */
static FrozenMatrix frozen_wte(const GPT *model, const float *emb, Widths w) {
    return frozen_head_matrix(model->frozen_wte ? NULL : emb, model->frozen_wte, model->linear_scratch,
                              (size_t)w.Vl, w.C);
}

/* A layer's parameters: under LoRA the frozen base's tensors with the adapters beside them. */
static LayerTensors layer_params(const GPT *model, const BlockAccess *a, int block) {
    LayerTensors p = gpt_layer_tensors(&model->cfg, params_of(model, a, block), block - 1);
    if (!model->frozen) return p;
    GPTConfig base = frozen_config(&model->cfg);
    LayerTensors t = gpt_layer_tensors(&base, frozen_block(model, block), block - 1); /* linear weights: frozen_weight */
    memcpy(t.lora_a, p.lora_a, sizeof t.lora_a);
    memcpy(t.lora_b, p.lora_b, sizeof t.lora_b);
    return t;
}

/* The LoRA branch of target t of local layer i (A NULL: none); g: its
 * gradients (may be zero); dropout when this set's forward trained. */
static LoraBranch lora_branch(const GPT *model, const GPTActs *acts, LayerTensors p, LayerTensors g, int i, int t) {
    const GPTConfig *cfg = &model->cfg;
    const bool row_parallel = t == LORA_TARGET_ATTPROJ || t == LORA_TARGET_FCPROJ;
    const Widths w = widths(cfg);
    const int local_in = t == LORA_TARGET_ATTPROJ ? w.Cl : w.F;
    LoraDropout drop = {acts->lora_dropout_on ? model->lora_dropout : 0.0f, acts->lora_row_keys,
                        lora_salt(gpt_first_layer(cfg) + i, t), row_parallel ? gpt_tp_rank(cfg) * local_in : 0};
    return (LoraBranch){p.lora_a[t], p.lora_b[t], g.lora_a[t], g.lora_b[t], cfg->lora_rank, model->lora_scale,
                        row_parallel, gpt_tp_size(cfg) > 1 ? model->tp : NULL, gpt_tp_rank(cfg) == 0, drop};
}

/* out += the LoRA branch of target t of local layer i on inp, when the layer has one. */
static void lora_add(const GPT *model, const GPTActs *acts, LayerTensors p, LayerActs *a, int i, int t, float *out,
                     const float *inp, size_t N, int IC, int OC) {
    if (!p.lora_a[t]) return;
    LoraBranch b = lora_branch(model, acts, p, (LayerTensors){0}, i, t);
    lora_forward(&b, out, a->lora_u[t], lora_scratch_of(acts, &model->cfg), inp, N, IC, OC);
}

static void params_done(const BlockAccess *a, int block) {
    if (a && a->params_done) a->params_done(a->ctx, block);
}

static float *grads_of(const GPT *model, const BlockAccess *a, int block) {
    return a ? a->grads(a->ctx, block) : block_start(&model->cfg, model->grads, block);
}

static void grads_done(const BlockAccess *a, int block) {
    if (a && a->grads_done) a->grads_done(a->ctx, block);
}

/* Sums a partial result over the tensor-parallel group (Megatron's f/g). */
static void tp_sum(const GPT *model, float *x, size_t n) {
    if (model->tp && gpt_tp_size(&model->cfg) > 1) comm_allreduce(model->tp, x, n);
}

/* Loss over the (possibly vocabulary-parallel) logits; see kernels.h. */
static double loss_forward(const GPT *model, GPTActs *acts, const int32_t *targets, size_t N, float dloss) {
    const GPTConfig *cfg = &model->cfg;
    if (gpt_tp_size(cfg) == 1)
        return softmax_xent_forward_backward(acts->logits, acts->losses, targets, N, cfg->vocab_size,
                                             cfg->padded_vocab_size, dloss);
    Widths w = widths(cfg);
    double *row_max = acts->row_stats, *row_sum = row_max + N, *target_logit = row_sum + N;
    xent_shard_max(acts->logits, row_max, N, w.V_valid, w.Vl);
    comm_allreduce_max_double(model->tp, row_max, (int)N);
    xent_shard_exp(acts->logits, row_max, row_sum, target_logit, targets, w.v_begin, N, w.V_valid, w.Vl);
    comm_allreduce_double(model->tp, row_sum, (int)(2 * N)); /* row_sum and target_logit are adjacent */
    return xent_shard_finish(acts->logits, acts->losses, row_sum, target_logit, targets, w.v_begin, N, w.V_valid,
                             w.Vl, dloss);
}

static void sum_over_tp(void *tp, float *values, size_t n) { comm_allreduce(tp, values, n); }

/* Expert parallelism: local layer i's hook state of this activation set. */
static void *moe_ep_state(const GPT *model, GPTActs *acts, int i) {
    if (!acts->moe_ep) {
        acts->moe_ep = bs_calloc((size_t)gpt_stage_layers(&model->cfg), sizeof(void *));
        acts->moe_ep_hooks = model->moe_ep;
    }
    if (!acts->moe_ep[i])
        acts->moe_ep[i] = model->moe_ep->create(model->moe_ep->ctx, (size_t)acts->B * acts->T, (size_t)acts->T);
    return acts->moe_ep[i];
}

/* What a layer's forward is for: evaluation, training, or a training
 * forward rerun in backward by full recomputation (which must leave what
 * backward reads as training left it, and count nothing twice). */
typedef enum { PASS_EVAL, PASS_TRAIN, PASS_RECOMPUTE } ForwardPass;

/* The MoE MLP of local layer i: proj_out = moe(ln2), sequence by sequence
 * (each a capacity group); in training the statistics are summed over the
 * data-parallel group (backward reads that sum) and the weighted losses added
 * to the step's (not again when recomputed). */
static void moe_mlp_forward(GPT *model, GPTActs *acts, LayerTensors p, const LayerActs *a, int i, int b, int t,
                            ForwardPass pass) {
    const int C = model->cfg.channels, E = model->cfg.experts;
    MoeStats *st = &acts->moe_stats[i];
    memset(st, 0, sizeof *st);
    if (model->moe_ep) {
        model->moe_ep->forward(moe_ep_state(model, acts, i), acts->proj_out, a->ln2, (size_t)b * t, p.router,
                               p.experts, model->moe_bias + (size_t)i * E, st);
    } else {
        MoeLayer *layer = acts->moe[i];
        if (model->tp && gpt_tp_size(&model->cfg) > 1) /* each TP rank a slice of every expert */
            moe_set_tensor_parallel(layer, gpt_tp_rank(&model->cfg) == 0, sum_over_tp, model->tp);
        moe_forward(layer, acts->proj_out, a->ln2, (size_t)b * t, p.router, p.experts, model->moe_bias + (size_t)i * E,
                    st);
    }
    tp_sum(model, acts->proj_out, (size_t)b * t * C);
    if (pass == PASS_EVAL) return;
    if (model->moe_dp && comm_size(model->moe_dp) > 1) comm_allreduce_double(model->moe_dp, (double *)st, (int)MOE_STATS_DOUBLES);
    if (pass == PASS_RECOMPUTE) return;
    double *sum = (double *)&model->moe_step[i];
    for (size_t k = 0; k < MOE_STATS_DOUBLES; k++) sum[k] += ((const double *)st)[k];
    const MoeConfig moe = gpt_moe_config(&model->cfg);
    double aux, z;
    moe_losses(&moe, st, st, &aux, &z);
    model->moe_aux += model->moe_loss_weight * aux;
    model->moe_z += model->moe_loss_weight * z;
}

/* Packed documents: each token's document start (its separator's position, or 0), NULL when off. */
static const int32_t *document_starts(const GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t) {
    if (model->doc_separator < 0 || !inputs) return NULL;
    for (int s = 0; s < b; s++) {
        int32_t start = 0;
        for (int i = 0; i < t; i++) {
            if (inputs[(size_t)s * t + i] == model->doc_separator) start = i;
            acts->doc_start[(size_t)s * t + i] = start;
        }
    }
    return acts->doc_start;
}

/* The attention core of a layer: atty and the probabilities att from qkv
 * (by document when the forward masked), atty rounded for its matmul in
 * bf16 mode. Backward's selective recomputation reruns it: the same bits. */
static void attention_core_forward(const GPT *model, GPTActs *acts, LayerActs *a, int b, int t) {
    const Widths w = widths(&model->cfg);
    if (model->context) context_attention_forward(model->context, a->atty, a->att, a->qkv, b, t);
    else attention_forward_docs(a->atty, a->att, a->qkv, acts->doc_masked ? acts->doc_start : NULL, b, t, w.Cl, w.Hl);
    round_input(model, a->atty, (size_t)b * t * w.Cl);
}

/* Local layer i forward from residual (its input) into a: residual3 =
 * residual2 + mlp(ln2(residual2)), residual2 = residual + attproj(attention(
 * qkv(ln1(residual)))); the MoE MLP's statistics are kept when training.
 * Backward's recomputation (GPT_RECOMPUTE_FULL) reruns it as it ran. */
static void layer_forward(GPT *model, GPTActs *acts, LayerTensors p, LayerActs *a, int i, const float *residual,
                          int b, int t, ForwardPass pass) {
    const GPTConfig *cfg = &model->cfg;
    const Widths w = widths(cfg);
    const int C = w.C;
    const bool lead = gpt_tp_rank(cfg) == 0; /* adds the replicated biases of row-parallel layers */
    const size_t N = (size_t)b * t;
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, residual, p.ln1w, p.ln1b, N, C);
    round_input(model, a->ln1, N * C);
    layer_linear_forward(model, i, SITE_QKV, a->qkv, a->ln1, p.qkvw, p.qkvb, N, C, 3 * w.Cl);
    lora_add(model, acts, p, a, i, LORA_TARGET_QKV, a->qkv, a->ln1, N, C, 3 * w.Cl);
    attention_core_forward(model, acts, a, b, t);
    layer_linear_forward(model, i, SITE_ATTPROJ, acts->proj_out, a->atty, p.attprojw, lead ? p.attprojb : NULL, N,
                         w.Cl, C);
    lora_add(model, acts, p, a, i, LORA_TARGET_ATTPROJ, acts->proj_out, a->atty, N, w.Cl, C);
    tp_sum(model, acts->proj_out, N * C);
    residual_forward(a->residual2, residual, acts->proj_out, N * C);
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, p.ln2w, p.ln2b, N, C);
    if (gpt_layer_is_moe(cfg, gpt_first_layer(cfg) + i)) {
        moe_mlp_forward(model, acts, p, a, i, b, t, pass);
    } else {
        round_input(model, a->ln2, N * C);
        layer_linear_forward(model, i, SITE_FC, a->fch, a->ln2, p.fcw, p.fcb, N, C, w.F);
        lora_add(model, acts, p, a, i, LORA_TARGET_FC, a->fch, a->ln2, N, C, w.F);
        gelu_forward(a->fch_gelu, a->fch, N * w.F);
        round_input(model, a->fch_gelu, N * w.F);
        layer_linear_forward(model, i, SITE_FCPROJ, acts->proj_out, a->fch_gelu, p.fcprojw, lead ? p.fcprojb : NULL,
                             N, w.F, C);
        lora_add(model, acts, p, a, i, LORA_TARGET_FCPROJ, acts->proj_out, a->fch_gelu, N, w.F, C);
        tp_sum(model, acts->proj_out, N * C);
    }
    residual_forward(a->residual3, a->residual2, acts->proj_out, N * C);
}

double gpt_forward(GPT *model, GPTActs *acts, const int32_t *inputs, const int32_t *targets, int b, int t,
                   float dloss, const BlockAccess *access) {
    const GPTConfig *cfg = &model->cfg;
    const Widths w = widths(cfg);
    const int C = w.C, L = cfg->num_layers, first = gpt_first_layer(cfg), nl = gpt_stage_layers(cfg);
    const bool lead = gpt_tp_rank(cfg) == 0; /* adds the replicated biases of row-parallel layers */
    const size_t N = (size_t)b * t;
    if (b > acts->B || t > acts->T) bs_die("internal: batch %dx%d exceeds the activations' %dx%d", b, t, acts->B, acts->T);
    acts->doc_masked = document_starts(model, acts, inputs, b, t) != NULL;
    acts->lora_dropout_on = dloss != 0 && model->lora_dropout > 0 && acts->lora_row_keys && inputs;
    if (acts->lora_dropout_on) lora_row_keys(acts->lora_row_keys, inputs, b, t, model->lora_seed, model->lora_step);
    float *emb = NULL;
    if (gpt_has_encoder(cfg)) {
        emb = dense_params(model, access, 0);
        const float *wpe = lead ? wpe_of(model, emb, w) : NULL;
        const int32_t *pos = positions_of(model, acts, inputs, b, t);
        if (model->frozen_wte)
            frozen_embedding_encode(model->frozen_wte, acts->encoded, inputs, wpe, pos, w.v_begin, w.v_begin + w.Vl, b,
                                    t);
        else
            encoder_forward(acts->encoded, inputs, emb, wpe, pos, w.v_begin, w.v_begin + w.Vl, b, t, C);
        tp_sum(model, acts->encoded, N * C);
        if (!gpt_has_head(cfg)) params_done(access, 0);
    }
    const float *residual = acts->encoded;
    for (int i = 0; i < nl; i++) {
        int block = first + i + 1;
        LayerActs a = layer_acts(acts, cfg, i);
        layer_forward(model, acts, layer_params(model, access, block), &a, i, residual, b, t,
                      dloss != 0 ? PASS_TRAIN : PASS_EVAL);
        residual = a.residual3;
        if (model->first_nonfinite_layer < 0 && !floats_all_finite(a.residual3, N * C)) model->first_nonfinite_layer = block - 1;
        params_done(access, block);
    }
    if (!gpt_has_head(cfg)) return 0;
    float *lnf = dense_params(model, access, L + 1);
    layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, residual, lnf, lnf + C, N, C);
    round_input(model, acts->lnf, N * C);
    params_done(access, L + 1);
    const float *wte = emb ? emb : model->head_wte;
    if (model->frozen) frozen_matrix_forward(frozen_wte(model, emb, w), acts->logits, acts->lnf, NULL, N); /* LoRA */
    else linear_forward(model, NO_SITE, acts->logits, acts->lnf, wte, NULL, N, C, w.Vl);
    if (emb) params_done(access, 0);
    if (!targets) return 0;
    return loss_forward(model, acts, targets, N, dloss);
}

/* ---- backward ---- */

/* What every op of one backward pass reads. A split pass (B) touches no
 * gradient buffer: where the fused pass accumulates an op's parameter
 * gradients, B keeps the op's output gradient in the set's stash for W. */
typedef struct {
    GPT *model;
    GPTActs *acts;
    const BlockAccess *access;
    Widths w;
    size_t N;
    int b, t;
    bool split;
} Pass;

static Pass begin_pass(GPT *model, GPTActs *acts, int b, int t, const BlockAccess *access, bool split) {
    if (!acts->dresidual) bs_die("internal: activations were created without backward buffers");
    if (split && model->frozen) bs_die("internal: the split backward does not train LoRA adapters");
    if (split && gpt_is_moe(&model->cfg)) bs_die("internal: the split backward does not train MoE layers");
    if (split && !acts->stash) bs_die("internal: split backward needs activations from gpt_acts_create_split");
    return (Pass){model, acts, access, widths(&model->cfg), (size_t)b * t, b, t, split};
}

/* A block's gradients in the fused pass; NULL in B (which never asks). */
static float *pass_grads(const Pass *x, int block) {
    return x->split ? NULL : grads_of(x->model, x->access, block);
}

/* A dense block's gradients: NULL under LoRA (frozen) and in B. */
static float *dense_grads(const Pass *x, int block) { return x->model->frozen ? NULL : pass_grads(x, block); }

static void pass_grads_done(const Pass *x, int block) {
    if (!x->split) grads_done(x->access, block);
}

/* One linear layer in backward: out (N,OC) = inp (N,IC) @ weight^T + bias. */
typedef struct {
    float *dout;      /* the gradient of out (fp32) */
    bool dout_reused; /* read again after this op, so not rounded in place in bf16 mode */
    const float *inp, *weight;
    float *dweight, *dbias; /* fused: accumulated here (dbias may be NULL) */
    float *stash;           /* B: dout kept here for W (dout itself when nothing overwrites it before W) */
    int IC, OC;
    int site; /* fp8 mode: its FP8 site, else NO_SITE */
    LoraBranch lora;       /* its LoRA branch (lora.A NULL: none), fused pass only */
    const float *lora_u;   /* the branch's u from forward */
    FrozenMatrix frozen;   /* LoRA: the frozen weight (frozen_weight; rows 0: none) */
} Linear;

/* dinp (written) = dout @ weight, and dweight, dbias (+=, may be NULL) in the same call; a frozen weight (no
 * gradients) in blocks of its rows. */
static void linear_grads(const Linear *op, float *dinp, float *dweight, float *dbias, size_t N) {
    if (op->frozen.rows) frozen_matrix_backward(op->frozen, dinp, op->dout, N);
    else matmul_backward(dinp, dweight, dbias, op->dout, op->inp, op->weight, N, op->IC, op->OC);
}

/* dinp (written), and fused the parameter gradients, else dout kept. In bf16
 * mode the matmuls take dout rounded (in place unless reused, else through
 * acts->dround) and the bias gradient sums the fp32 dout; an FP8 site then
 * quantizes that dout (the seam keeps its FP8 copies in its own scratch). */
static void linear_pass(const Pass *x, float *dinp, const Linear *op) {
    const GPT *model = x->model;
    const size_t N = x->N, n = N * (size_t)op->OC;
    if (x->split && op->stash != op->dout) memcpy(op->stash, op->dout, n * sizeof(float));
    float *dweight = x->split ? NULL : op->dweight, *dbias = x->split ? NULL : op->dbias;
    if (op->lora.A) {
        linear_grads(op, dinp, dweight, dbias, N);
        lora_backward(&op->lora, dinp, op->dout, op->lora_u, op->inp, lora_scratch_of(x->acts, &model->cfg), N,
                      op->IC, op->OC);
        return;
    }
    if (!model->bf16 && op->site == NO_SITE) {
        linear_grads(op, dinp, dweight, dbias, N);
        return;
    }
    if (dbias) bias_backward(dbias, op->dout, N, op->OC);
    float *d = op->dout;
    if (model->bf16) {
        d = op->dout_reused ? x->acts->dround : op->dout;
        bf16_round_floats(d, op->dout, n);
    }
    if (op->site != NO_SITE)
        fp8_scaling_backward(model->fp8, op->site, dinp, dweight, d, op->inp, op->weight, N, op->IC, op->OC);
    else
        matmul_bf16_backward_rounded(model->bf16_matmul, dinp, dweight, d, op->inp, op->weight, N, op->IC, op->OC);
}

/* W of a linear layer: dweight, dbias (may be NULL) += from the fp32 dout B
 * kept, rounded here in place after the bias as the fused pass rounds it
 * (rounding a value that is already bf16 leaves it as it is). */
static void linear_weight(const GPT *model, int site, float *dweight, float *dbias, float *dout, const float *inp,
                          size_t N, int IC, int OC) {
    if (!model->bf16 && site == NO_SITE) {
        matmul_backward(NULL, dweight, dbias, dout, inp, NULL, N, IC, OC);
        return;
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
    if (model->bf16) bf16_round_floats(dout, dout, N * (size_t)OC);
    if (site != NO_SITE) fp8_scaling_backward(model->fp8, site, NULL, dweight, dout, inp, NULL, N, IC, OC);
    else matmul_bf16_backward_rounded(model->bf16_matmul, NULL, dweight, dout, inp, NULL, N, IC, OC);
}

/* One LayerNorm in backward: out = layernorm(inp) * weight + bias. */
typedef struct {
    const float *dout, *inp, *weight, *mean, *rstd;
    float *dweight, *dbias; /* fused */
    float *stash;           /* B */
} Norm;

/* dinp (+=), and fused the parameter gradients, else dout kept. */
static void layernorm_pass(const Pass *x, float *dinp, const Norm *op) {
    const size_t N = x->N;
    const int C = x->w.C;
    if (!x->split && !op->dweight) { /* frozen */
        layernorm_backward_input(dinp, op->dout, op->inp, op->weight, op->mean, op->rstd, N, C);
        return;
    }
    if (!x->split) {
        layernorm_backward(dinp, op->dweight, op->dbias, op->dout, op->inp, op->weight, op->mean, op->rstd, N, C);
        return;
    }
    memcpy(op->stash, op->dout, N * C * sizeof(float));
    layernorm_backward_input(dinp, op->dout, op->inp, op->weight, op->mean, op->rstd, N, C);
}

/* The output layer and the final LayerNorm, from acts->logits (which holds
 * dlogits, and keeps them for W) to acts->dresidual. */
static void head_pass(const Pass *x, const float *wte, float *dwte) {
    GPTActs *acts = x->acts;
    const GPTConfig *cfg = &x->model->cfg;
    const int C = x->w.C, L = cfg->num_layers;
    const size_t N = x->N;
    /* logits = lnf @ wte^T; LoRA: wte frozen, its input gradient alone */
    if (x->model->frozen)
        frozen_matrix_backward(frozen_wte(x->model, wte, x->w), acts->dln, acts->logits, N);
    else
        linear_pass(x, acts->dln, &(Linear){.dout = acts->logits, .inp = acts->lnf, .weight = wte, .dweight = dwte,
                                            .stash = acts->logits, .IC = C, .OC = x->w.Vl, .site = NO_SITE});
    tp_sum(x->model, acts->dln, N * C);
    memset(acts->dresidual, 0, N * C * sizeof(float));
    float *dlnf = dense_grads(x, L + 1);
    float *lnf = dense_params(x->model, x->access, L + 1);
    layernorm_pass(x, acts->dresidual,
                   &(Norm){.dout = acts->dln, .inp = gpt_stage_output(cfg, acts), .weight = lnf,
                           .mean = acts->lnf_mean, .rstd = acts->lnf_rstd, .dweight = dlnf,
                           .dbias = dlnf ? dlnf + C : NULL, .stash = x->split ? stash_dlnf(acts, cfg) : NULL});
}

/* The MoE MLP of local layer i backward: acts->dln = d ln2 from
 * acts->dresidual, the router's and experts' gradients into g, the losses'
 * gradients from the forward's (data-parallel) statistics, weighted. */
static void moe_mlp_backward(const Pass *x, int i, LayerTensors p, LayerTensors g, const LayerActs *a) {
    GPTActs *acts = x->acts;
    const GPT *model = x->model;
    memset(acts->dln, 0, x->N * x->w.C * sizeof(float));
    const double aux_coef = model->moe_loss_weight * model->cfg.moe_aux_coef;
    const double z_coef = model->moe_loss_weight * model->cfg.moe_z_coef;
    if (model->moe_ep) {
        model->moe_ep->backward(acts->moe_ep[i], acts->dln, g.router, g.experts, acts->dresidual, a->ln2, p.router,
                                p.experts, &acts->moe_stats[i], aux_coef, z_coef);
    } else {
        moe_set_loss_coefs(acts->moe[i], aux_coef, z_coef);
        moe_backward(acts->moe[i], acts->dln, g.router, g.experts, acts->dresidual, a->ln2, p.router, p.experts,
                     &acts->moe_stats[i]);
    }
    tp_sum(model, acts->dln, x->N * x->w.C); /* the experts' slices' input gradients */
}

/* The dense MLP backward: acts->dln = d ln2 from acts->dresidual. */
static void mlp_pass(const Pass *x, int i, LayerTensors p, LayerTensors g, LayerStash s, const LayerActs *a) {
    GPTActs *acts = x->acts;
    const Widths w = x->w;
    const int C = w.C;
    const size_t N = x->N;
    linear_pass(x, acts->dfch, &(Linear){acts->dresidual, true, a->fch_gelu,
                                         p.fcprojw, g.fcprojw, g.fcprojb, s.dfcproj, w.F, C, fp8_site(x->model, i, SITE_FCPROJ),
                                        lora_branch(x->model, acts, p, g, i, LORA_TARGET_FCPROJ), a->lora_u[LORA_TARGET_FCPROJ],
                                        frozen_weight(x->model, p.fcprojw, i, SITE_FCPROJ, C, w.F)});
    gelu_backward(acts->dfch, a->fch, acts->dfch, N * w.F);
    linear_pass(x, acts->dln, &(Linear){acts->dfch, false, a->ln2, p.fcw, g.fcw, g.fcb,
                                        s.dfch, C, w.F, fp8_site(x->model, i, SITE_FC),
                                        lora_branch(x->model, acts, p, g, i, LORA_TARGET_FC), a->lora_u[LORA_TARGET_FC],
                                        frozen_weight(x->model, p.fcw, i, SITE_FC, w.F, C)});
    tp_sum(x->model, acts->dln, N * C);
}

/* Full recomputation: layer i's forward again from its kept input, as
 * training ran it (the same FP8 scales, the MoE statistics summed again)
 * with FP8's statistics not recorded a second time. */
static void recompute_layer(GPT *model, GPTActs *acts, LayerTensors p, LayerActs *a, int i, const float *inp, int b,
                            int t) {
    const bool recording = model->fp8 && fp8_scaling_recording(model->fp8);
    if (recording) fp8_scaling_set_recording(model->fp8, false);
    layer_forward(model, acts, p, a, i, inp, b, t, PASS_RECOMPUTE);
    if (recording) fp8_scaling_set_recording(model->fp8, true);
}

/* One layer, from acts->dresidual (the gradient of its output) to the
 * gradient of its input, in place. g: its gradients (fused); s: its stash (B). */
static void layer_pass(const Pass *x, int i, LayerTensors p, LayerTensors g, LayerStash s) {
    GPTActs *acts = x->acts;
    const GPTConfig *cfg = &x->model->cfg;
    const Widths w = x->w;
    const int C = w.C;
    const size_t N = x->N;
    LayerActs a = layer_acts(acts, cfg, i);
    const float *inp = i == 0 ? acts->encoded : layer_acts(acts, cfg, i - 1).residual3;
    if (cfg->recompute == GPT_RECOMPUTE_FULL) recompute_layer(x->model, acts, p, &a, i, inp, x->b, x->t);
    /* MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))), or the MoE layer's */
    if (gpt_layer_is_moe(cfg, gpt_first_layer(cfg) + i)) moe_mlp_backward(x, i, p, g, &a);
    else mlp_pass(x, i, p, g, s, &a);
    layernorm_pass(x, acts->dresidual,
                   &(Norm){acts->dln, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, g.ln2w, g.ln2b, s.dln2});
    /* attention: residual2 = inp + attproj(attention(qkv(ln1(inp)))) */
    linear_pass(x, acts->datty, &(Linear){acts->dresidual, true, a.atty, p.attprojw,
                                          g.attprojw, g.attprojb, s.dattproj, w.Cl, C, fp8_site(x->model, i, SITE_ATTPROJ),
                                        lora_branch(x->model, acts, p, g, i, LORA_TARGET_ATTPROJ), a.lora_u[LORA_TARGET_ATTPROJ],
                                        frozen_weight(x->model, p.attprojw, i, SITE_ATTPROJ, C, w.Cl)});
    if (cfg->recompute == GPT_RECOMPUTE_SELECTIVE) attention_core_forward(x->model, acts, &a, x->b, x->t);
    if (x->model->context)
        context_attention_backward(x->model->context, acts->dqkv, acts->datty, a.qkv, a.atty, a.att, x->b, x->t);
    else
        attention_backward(acts->dqkv, acts->att_scratch, acts->scratch_slots, acts->datty, a.qkv, a.att, x->b, x->t,
                           w.Cl, w.Hl);
    linear_pass(x, acts->dln, &(Linear){acts->dqkv, false, a.ln1, p.qkvw, g.qkvw, g.qkvb,
                                        s.dqkv, C, 3 * w.Cl, fp8_site(x->model, i, SITE_QKV),
                                        lora_branch(x->model, acts, p, g, i, LORA_TARGET_QKV), a.lora_u[LORA_TARGET_QKV],
                                        frozen_weight(x->model, p.qkvw, i, SITE_QKV, 3 * w.Cl, C)});
    tp_sum(x->model, acts->dln, N * C);
    layernorm_pass(x, acts->dresidual, &(Norm){acts->dln, inp, p.ln1w, a.ln1_mean, a.ln1_rstd, g.ln1w, g.ln1b, s.dln1});
}

/* W of one layer: its parameter gradients g from its stash s, in the order
 * of layer_pass. With full recomputation the layer's inputs to its products
 * are recomputed again first (B's recomputation shares them with the other
 * layers and micro-batches). */
static void layer_weight(const Pass *x, int i, LayerTensors g, LayerStash s) {
    GPT *model = x->model;
    const Widths w = x->w;
    const int C = w.C;
    const size_t N = x->N;
    LayerActs a = layer_acts(x->acts, &model->cfg, i);
    const float *inp = i == 0 ? x->acts->encoded : layer_acts(x->acts, &model->cfg, i - 1).residual3;
    if (model->cfg.recompute == GPT_RECOMPUTE_FULL) {
        const int block = gpt_first_layer(&model->cfg) + i + 1;
        recompute_layer(model, x->acts, layer_params(model, x->access, block), &a, i, inp, x->b, x->t);
        params_done(x->access, block);
    }
    linear_weight(model, fp8_site(model, i, SITE_FCPROJ), g.fcprojw, g.fcprojb, s.dfcproj, a.fch_gelu, N, w.F, C);
    linear_weight(model, fp8_site(model, i, SITE_FC), g.fcw, g.fcb, s.dfch, a.ln2, N, C, w.F);
    layernorm_backward_params(g.ln2w, g.ln2b, s.dln2, a.residual2, a.ln2_mean, a.ln2_rstd, N, C);
    linear_weight(model, fp8_site(model, i, SITE_ATTPROJ), g.attprojw, g.attprojb, s.dattproj, a.atty, N, w.Cl, C);
    linear_weight(model, fp8_site(model, i, SITE_QKV), g.qkvw, g.qkvb, s.dqkv, a.ln1, N, C, 3 * w.Cl);
    layernorm_backward_params(g.ln1w, g.ln1b, s.dln1, inp, a.ln1_mean, a.ln1_rstd, N, C);
}

/* The embeddings' gradients from dout, the gradient of the encoder's output,
 * then the last pipeline stage's share of the tied weights' gradient. */
static void encoder_grads(const Pass *x, float *demb, const float *dout, const int32_t *inputs) {
    GPT *model = x->model;
    const size_t n = gpt_tensor_numel(&model->cfg, TK_WTE);
    encoder_backward(demb, demb + n, dout, inputs, positions_of(model, x->acts, inputs, x->b, x->t), x->w.v_begin,
                     x->w.v_begin + x->w.Vl, x->b, x->t, x->w.C);
    if (model->extra_wte_grad) {
        for (size_t i = 0; i < n; i++) demb[i] += model->extra_wte_grad[i];
        model->extra_wte_grad = NULL;
    }
}

/* The fused pass or B: blocks L+1, L, ..., 1, 0 (block 0 also first when
 * the output layer is tied to it). */
static void backward_chain(const Pass *x, const int32_t *inputs) {
    GPT *model = x->model;
    GPTActs *acts = x->acts;
    const GPTConfig *cfg = &model->cfg;
    const int L = cfg->num_layers, first = gpt_first_layer(cfg), nl = gpt_stage_layers(cfg);
    float *demb = NULL, *emb = NULL;
    if (gpt_has_head(cfg)) {
        float *dwte = model->head_dwte, *wte = model->head_wte;
        if (gpt_has_encoder(cfg)) {
            dwte = demb = dense_grads(x, 0); /* first: it marks the start of backward */
            if (model->frozen) pass_grads(x, 0);
            wte = emb = dense_params(model, x->access, 0);
        }
        head_pass(x, wte, dwte);
        pass_grads_done(x, L + 1);
        params_done(x->access, L + 1);
    } /* else the caller wrote the gradient of the stage's output into acts->dresidual */
    for (int i = nl - 1; i >= 0; i--) {
        int block = first + i + 1;
        float *grads = pass_grads(x, block);
        LayerTensors g = grads ? gpt_layer_tensors(cfg, grads, block - 1) : (LayerTensors){0};
        LayerTensors p = layer_params(model, x->access, block);
        layer_pass(x, i, p, g, x->split ? layer_stash(acts, cfg, i) : (LayerStash){0});
        pass_grads_done(x, block);
        params_done(x->access, block);
    }
    if (gpt_has_encoder(cfg)) {
        if (x->split) {
            memcpy(stash_dencoded(acts, cfg), acts->dresidual, x->N * x->w.C * sizeof(float));
        } else {
            if (!demb && !model->frozen) demb = grads_of(model, x->access, 0);
            if (demb) encoder_grads(x, demb, acts->dresidual, inputs);
            grads_done(x->access, 0);
        }
        if (emb) params_done(x->access, 0);
    }
}

void gpt_backward(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access) {
    Pass x = begin_pass(model, acts, b, t, access, false);
    backward_chain(&x, inputs);
}

void gpt_backward_input(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access) {
    Pass x = begin_pass(model, acts, b, t, access, true);
    backward_chain(&x, inputs);
    acts->stashed_rows = x.N;
}

void gpt_backward_weight(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access) {
    Pass x = begin_pass(model, acts, b, t, access, true);
    if (acts->stashed_rows != x.N)
        bs_die("internal: gpt_backward_weight without a gpt_backward_input of %dx%d on these activations", b, t);
    acts->stashed_rows = 0;
    const GPTConfig *cfg = &model->cfg;
    const int C = x.w.C, L = cfg->num_layers, first = gpt_first_layer(cfg), nl = gpt_stage_layers(cfg);
    float *demb = NULL;
    if (gpt_has_head(cfg)) {
        float *dwte = model->head_dwte;
        if (gpt_has_encoder(cfg)) dwte = demb = grads_of(model, access, 0);
        linear_weight(model, NO_SITE, dwte, NULL, acts->logits, acts->lnf, x.N, C, x.w.Vl);
        float *dlnf = grads_of(model, access, L + 1);
        layernorm_backward_params(dlnf, dlnf + C, stash_dlnf(acts, cfg), gpt_stage_output(cfg, acts), acts->lnf_mean,
                                  acts->lnf_rstd, x.N, C);
        grads_done(access, L + 1);
    }
    for (int i = nl - 1; i >= 0; i--) {
        int block = first + i + 1;
        layer_weight(&x, i, gpt_layer_tensors(cfg, grads_of(model, access, block), block - 1), layer_stash(acts, cfg, i));
        grads_done(access, block);
    }
    if (gpt_has_encoder(cfg)) {
        if (!demb) demb = grads_of(model, access, 0);
        encoder_grads(&x, demb, stash_dencoded(acts, cfg), inputs);
        grads_done(access, 0);
    }
}

double gpt_flops_per_token(const GPTConfig *cfg, int seq_len) {
    double active = (double)gpt_num_trained_params(cfg);
    if (gpt_is_moe(cfg)) { /* a token runs K of the E experts */
        GPTConfig whole = gpt_logical_config(cfg);
        active -= (double)gpt_moe_layers_before(cfg, cfg->num_layers) * (double)gpt_tensor_numel(&whole, TK_EXPERTS) *
                  (cfg->experts - cfg->moe_top_k) / cfg->experts;
    }
    return 6.0 * active + 12.0 * cfg->num_layers * cfg->channels * (double)seq_len;
}
