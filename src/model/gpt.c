/* gpt.c: the GPT's buffers, activations, forward and backward, whole or as a
 * tensor-parallel / pipeline shard (see gpt.h; the layout is gpt_layout.c). */
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

void gpt_create(GPT *model, const GPTConfig *cfg) { gpt_create_with(model, cfg, GPT_ALLOC_PARAMS | GPT_ALLOC_GRADS); }

void gpt_create_with(GPT *model, const GPTConfig *cfg, int alloc) {
    model->cfg = *cfg;
    model->num_params = gpt_num_params(cfg);
    model->params = (alloc & GPT_ALLOC_PARAMS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
    model->grads = (alloc & GPT_ALLOC_GRADS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
    model->tp = NULL;
    model->head_wte = model->head_dwte = NULL;
    model->extra_wte_grad = NULL;
    model->first_nonfinite_layer = -1;
    model->bf16 = false;
    model->bf16_params = NULL;
    model->bf16_matmul = NULL;
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
    free(model->params);
    free(model->grads);
    free(model->head_wte);
    free(model->head_dwte);
    model->params = model->grads = model->head_wte = model->head_dwte = NULL;
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
    LayerTensors t = gpt_layer_tensors(cfg, block_base);
    bf16_round_floats(t.qkvw, t.qkvw, gpt_tensor_numel(cfg, TK_QKVW));
    bf16_round_floats(t.attprojw, t.attprojw, gpt_tensor_numel(cfg, TK_ATTPROJW));
    bf16_round_floats(t.fcw, t.fcw, gpt_tensor_numel(cfg, TK_FCW));
    bf16_round_floats(t.fcprojw, t.fcprojw, gpt_tensor_numel(cfg, TK_FCPROJW));
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

void gpt_zero_grads(GPT *model) {
    if (model->grads) memset(model->grads, 0, model->num_params * sizeof(float));
}

/* One layer's activations inside acts->layers (widths are the shard's). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
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

static size_t layer_acts_numel(const GPTConfig *cfg, int B, int T) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T;
    return BT * ((size_t)w.C * 5 + (size_t)w.Cl * 4 + (size_t)w.F * 2) + BT * 4 + (size_t)B * w.Hl * T * T;
}

static LayerActs layer_acts(const GPTActs *acts, const GPTConfig *cfg, int local_layer) {
    Widths w = widths(cfg);
    size_t BT = (size_t)acts->B * acts->T;
    float *p = acts->layers + (size_t)local_layer * acts->layer_stride;
    LayerActs a;
#define TAKE(field, n) (a.field = p, p += (n))
    TAKE(ln1, BT * w.C);
    TAKE(ln1_mean, BT);
    TAKE(ln1_rstd, BT);
    TAKE(qkv, 3 * BT * w.Cl);
    TAKE(atty, BT * w.Cl);
    TAKE(att, (size_t)acts->B * w.Hl * acts->T * acts->T);
    TAKE(residual2, BT * w.C);
    TAKE(ln2, BT * w.C);
    TAKE(ln2_mean, BT);
    TAKE(ln2_rstd, BT);
    TAKE(fch, BT * w.F);
    TAKE(fch_gelu, BT * w.F);
    TAKE(residual3, BT * w.C);
#undef TAKE
    return a;
}

static size_t forward_numel(const GPTConfig *cfg, int B, int T) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T, C = (size_t)w.C;
    size_t n = BT * C /* stage input */ + (size_t)gpt_stage_layers(cfg) * layer_acts_numel(cfg, B, T) +
               BT * C /* proj_out */ + BT /* losses */;
    if (gpt_has_head(cfg)) n += BT * C + 2 * BT /* lnf */ + BT * (size_t)w.Vl /* logits */;
    return n;
}

static size_t backward_numel(const GPTConfig *cfg, int B, int T, int slots) {
    Widths w = widths(cfg);
    size_t BT = (size_t)B * T;
    return BT * ((size_t)w.C * 3 + (size_t)w.Cl * 4 + (size_t)w.F) + (size_t)slots * T * T;
}

size_t gpt_acts_bytes(const GPTConfig *cfg, int B, int T, bool for_training) {
    size_t n = forward_numel(cfg, B, T);
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
    acts->layer_stride = layer_acts_numel(cfg, B, T);
    float *p = acts->memory;
    acts->encoded = p, p += BT * C;
    acts->layers = p, p += (size_t)gpt_stage_layers(cfg) * acts->layer_stride;
    acts->proj_out = p, p += BT * C;
    acts->losses = p, p += BT;
    if (gpt_has_head(cfg)) {
        acts->lnf = p, p += BT * C;
        acts->lnf_mean = p, p += BT;
        acts->lnf_rstd = p, p += BT;
        acts->logits = p;
    }
    if (gpt_tp_size(cfg) > 1) acts->row_stats = bs_malloc(3 * BT * sizeof(double));
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

void gpt_acts_share_backward(GPTActs *dst, const GPTActs *src) {
    free(dst->grad_memory);
    dst->grad_memory = NULL; /* not owned */
    dst->scratch_slots = src->scratch_slots;
    dst->dresidual = src->dresidual, dst->dln = src->dln, dst->datty = src->datty;
    dst->dqkv = src->dqkv, dst->dfch = src->dfch, dst->dround = src->dround, dst->att_scratch = src->att_scratch;
}

void gpt_acts_free(GPTActs *acts) {
    free(acts->memory);
    free(acts->grad_memory);
    free(acts->row_stats);
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

/* matmul_forward; in bf16 mode inp and weight hold bf16 values (rounded
 * floats) and the product runs on bf16_matmul's path. */
static void linear_forward(const GPT *model, float *out, const float *inp, const float *weight, const float *bias,
                           size_t N, int IC, int OC) {
    if (model->bf16) matmul_bf16_forward_rounded(model->bf16_matmul, out, inp, weight, bias, N, IC, OC);
    else matmul_forward(out, inp, weight, bias, N, IC, OC);
}

/* matmul_backward, with bf16 gradients into the matmuls in bf16 mode (the
 * bias gradient is summed from the fp32 dout). dout is rounded in place when
 * nothing else reads it, else through acts->dround. */
static void linear_backward(const GPT *model, GPTActs *acts, float *dinp, float *dweight, float *dbias, float *dout,
                            bool dout_reused, const float *inp, const float *weight, size_t N, int IC, int OC) {
    if (!model->bf16) {
        matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
        return;
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
    float *d = dout_reused ? acts->dround : dout;
    bf16_round_floats(d, dout, N * (size_t)OC);
    matmul_bf16_backward_rounded(model->bf16_matmul, dinp, dweight, d, inp, weight, N, IC, OC);
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

/* Whether x[0..n) holds only finite values (a NaN or inf makes the sum non-finite). */
static bool all_finite(const float *x, size_t n) {
    float sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += x[i] * 0.0f;
    return sum == 0.0f;
}

double gpt_forward(GPT *model, GPTActs *acts, const int32_t *inputs, const int32_t *targets, int b, int t,
                   float dloss, const BlockAccess *access) {
    const GPTConfig *cfg = &model->cfg;
    const Widths w = widths(cfg);
    const int C = w.C, L = cfg->num_layers, first = gpt_first_layer(cfg), nl = gpt_stage_layers(cfg);
    const bool lead = gpt_tp_rank(cfg) == 0; /* adds the replicated biases of row-parallel layers */
    const size_t N = (size_t)b * t;
    if (b > acts->B || t > acts->T) bs_die("internal: batch %dx%d exceeds the activations' %dx%d", b, t, acts->B, acts->T);
    float *emb = NULL;
    if (gpt_has_encoder(cfg)) {
        emb = params_of(model, access, 0);
        encoder_forward(acts->encoded, inputs, emb, lead ? emb + gpt_tensor_numel(cfg, TK_WTE) : NULL, w.v_begin,
                        w.v_begin + w.Vl, b, t, C);
        tp_sum(model, acts->encoded, N * C);
        if (!gpt_has_head(cfg)) params_done(access, 0);
    }
    const float *residual = acts->encoded;
    for (int i = 0; i < nl; i++) {
        int block = first + i + 1;
        LayerTensors p = gpt_layer_tensors(cfg, params_of(model, access, block));
        LayerActs a = layer_acts(acts, cfg, i);
        layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w, p.ln1b, N, C);
        round_input(model, a.ln1, N * C);
        linear_forward(model, a.qkv, a.ln1, p.qkvw, p.qkvb, N, C, 3 * w.Cl);
        attention_forward(a.atty, a.att, a.qkv, b, t, w.Cl, w.Hl);
        round_input(model, a.atty, N * w.Cl);
        linear_forward(model, acts->proj_out, a.atty, p.attprojw, lead ? p.attprojb : NULL, N, w.Cl, C);
        tp_sum(model, acts->proj_out, N * C);
        residual_forward(a.residual2, residual, acts->proj_out, N * C);
        layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, N, C);
        round_input(model, a.ln2, N * C);
        linear_forward(model, a.fch, a.ln2, p.fcw, p.fcb, N, C, w.F);
        gelu_forward(a.fch_gelu, a.fch, N * w.F);
        round_input(model, a.fch_gelu, N * w.F);
        linear_forward(model, acts->proj_out, a.fch_gelu, p.fcprojw, lead ? p.fcprojb : NULL, N, w.F, C);
        tp_sum(model, acts->proj_out, N * C);
        residual_forward(a.residual3, a.residual2, acts->proj_out, N * C);
        residual = a.residual3;
        if (model->first_nonfinite_layer < 0 && !all_finite(a.residual3, N * C)) model->first_nonfinite_layer = block - 1;
        params_done(access, block);
    }
    if (!gpt_has_head(cfg)) return 0;
    float *lnf = params_of(model, access, L + 1);
    layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, residual, lnf, lnf + C, N, C);
    round_input(model, acts->lnf, N * C);
    params_done(access, L + 1);
    const float *wte = emb ? emb : model->head_wte;
    linear_forward(model, acts->logits, acts->lnf, wte, NULL, N, C, w.Vl);
    if (emb) params_done(access, 0);
    if (!targets) return 0;
    return loss_forward(model, acts, targets, N, dloss);
}

void gpt_backward(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access) {
    const GPTConfig *cfg = &model->cfg;
    const Widths w = widths(cfg);
    const int C = w.C, L = cfg->num_layers, first = gpt_first_layer(cfg), nl = gpt_stage_layers(cfg);
    const size_t N = (size_t)b * t;
    if (!acts->dresidual) bs_die("internal: activations were created without backward buffers");
    float *demb = NULL, *emb = NULL;
    if (gpt_has_head(cfg)) {
        float *dwte = model->head_dwte, *wte = model->head_wte;
        if (gpt_has_encoder(cfg)) {
            dwte = demb = grads_of(model, access, 0); /* first: it marks the start of backward */
            wte = emb = params_of(model, access, 0);
        }
        /* logits = lnf @ wte^T; acts->logits already holds dlogits */
        linear_backward(model, acts, acts->dln, dwte, NULL, acts->logits, false, acts->lnf, wte, N, C, w.Vl);
        tp_sum(model, acts->dln, N * C);
        memset(acts->dresidual, 0, N * C * sizeof(float));
        const float *last = nl > 0 ? layer_acts(acts, cfg, nl - 1).residual3 : acts->encoded;
        float *dlnf = grads_of(model, access, L + 1);
        float *lnf = params_of(model, access, L + 1);
        layernorm_backward(acts->dresidual, dlnf, dlnf + C, acts->dln, last, lnf, acts->lnf_mean, acts->lnf_rstd, N,
                           C);
        grads_done(access, L + 1);
        params_done(access, L + 1);
    } /* else the caller wrote the gradient of the stage's output into acts->dresidual */

    for (int i = nl - 1; i >= 0; i--) {
        int block = first + i + 1;
        LayerTensors g = gpt_layer_tensors(cfg, grads_of(model, access, block));
        LayerTensors p = gpt_layer_tensors(cfg, params_of(model, access, block));
        LayerActs a = layer_acts(acts, cfg, i);
        const float *inp = i == 0 ? acts->encoded : layer_acts(acts, cfg, i - 1).residual3;
        /* MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))) */
        linear_backward(model, acts, acts->dfch, g.fcprojw, g.fcprojb, acts->dresidual, true, a.fch_gelu, p.fcprojw, N,
                        w.F, C);
        gelu_backward(acts->dfch, a.fch, acts->dfch, N * w.F);
        linear_backward(model, acts, acts->dln, g.fcw, g.fcb, acts->dfch, false, a.ln2, p.fcw, N, C, w.F);
        tp_sum(model, acts->dln, N * C);
        layernorm_backward(acts->dresidual, g.ln2w, g.ln2b, acts->dln, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd,
                           N, C);
        /* attention: residual2 = inp + attproj(attention(qkv(ln1(inp)))) */
        linear_backward(model, acts, acts->datty, g.attprojw, g.attprojb, acts->dresidual, true, a.atty, p.attprojw, N,
                        w.Cl, C);
        attention_backward(acts->dqkv, acts->att_scratch, acts->scratch_slots, acts->datty, a.qkv, a.att, b, t, w.Cl,
                           w.Hl);
        linear_backward(model, acts, acts->dln, g.qkvw, g.qkvb, acts->dqkv, false, a.ln1, p.qkvw, N, C, 3 * w.Cl);
        tp_sum(model, acts->dln, N * C);
        layernorm_backward(acts->dresidual, g.ln1w, g.ln1b, acts->dln, inp, p.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
        grads_done(access, block);
        params_done(access, block);
    }
    if (gpt_has_encoder(cfg)) {
        if (!demb) demb = grads_of(model, access, 0);
        encoder_backward(demb, demb + gpt_tensor_numel(cfg, TK_WTE), acts->dresidual, inputs, w.v_begin,
                         w.v_begin + w.Vl, b, t, C);
        if (model->extra_wte_grad) { /* the last pipeline stage's share of the tied weights' gradient */
            const size_t n = gpt_tensor_numel(cfg, TK_WTE);
            for (size_t i = 0; i < n; i++) demb[i] += model->extra_wte_grad[i];
            model->extra_wte_grad = NULL;
        }
        grads_done(access, 0);
        if (emb) params_done(access, 0);
    }
}

double gpt_flops_per_token(const GPTConfig *cfg, int seq_len) {
    return 6.0 * (double)gpt_num_trained_params(cfg) + 12.0 * cfg->num_layers * cfg->channels * (double)seq_len;
}
