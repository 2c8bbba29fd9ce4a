/* gpt.c: GPT-2 parameter layout, initialisation, forward and backward (see gpt.h). */
#include "model/gpt.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"

int gpt_padded_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

bool gpt_config_check(GPTConfig *cfg, char *why, size_t why_size) {
    const char *fixed = NULL;
    if (cfg->num_layers < 1) fixed = "--layers must be at least 1";
    else if (cfg->num_heads < 1) fixed = "--heads must be at least 1";
    else if (cfg->channels < 1) fixed = "--channels must be at least 1";
    else if (cfg->max_seq_len < 1) fixed = "--seq-len must be at least 1";
    else if (cfg->vocab_size < 2) fixed = "the vocabulary must have at least 2 tokens";
    else if (cfg->vocab_size > (1 << 30) || cfg->channels > (1 << 16) || cfg->max_seq_len > (1 << 20))
        fixed = "the model is too large for this engine (vocab > 2^30, channels > 65536 or seq-len > 2^20)";
    if (fixed) {
        snprintf(why, why_size, "%s", fixed);
        return false;
    }
    if (cfg->channels % cfg->num_heads != 0) {
        snprintf(why, why_size, "--heads %d does not divide --channels %d", cfg->num_heads, cfg->channels);
        return false;
    }
    cfg->padded_vocab_size = gpt_padded_vocab(cfg->vocab_size);
    return true;
}

static const char *const tensor_names[TK_COUNT] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

const char *gpt_tensor_name(TensorKind k) { return tensor_names[k]; }

bool gpt_tensor_is_per_layer(TensorKind k) { return k >= TK_FIRST_LAYER_KIND && k <= TK_LAST_LAYER_KIND; }

bool gpt_tensor_decays(TensorKind k) {
    return k == TK_WTE || k == TK_WPE || k == TK_QKVW || k == TK_ATTPROJW || k == TK_FCW || k == TK_FCPROJW;
}

size_t gpt_tensor_numel(const GPTConfig *cfg, TensorKind k) {
    size_t C = (size_t)cfg->channels;
    switch (k) {
    case TK_WTE: return (size_t)cfg->padded_vocab_size * C;
    case TK_WPE: return (size_t)cfg->max_seq_len * C;
    case TK_QKVW: return 3 * C * C;
    case TK_QKVB: return 3 * C;
    case TK_ATTPROJW: return C * C;
    case TK_FCW: return 4 * C * C;
    case TK_FCB: return 4 * C;
    case TK_FCPROJW: return 4 * C * C;
    case TK_LN1W: case TK_LN1B: case TK_ATTPROJB: case TK_LN2W: case TK_LN2B:
    case TK_FCPROJB: case TK_LNFW: case TK_LNFB: return C;
    case TK_COUNT: break;
    }
    return 0;
}

static size_t layer_numel(const GPTConfig *cfg) {
    size_t n = 0;
    for (int k = TK_FIRST_LAYER_KIND; k <= TK_LAST_LAYER_KIND; k++) n += gpt_tensor_numel(cfg, (TensorKind)k);
    return n;
}

static size_t embeddings_numel(const GPTConfig *cfg) {
    return gpt_tensor_numel(cfg, TK_WTE) + gpt_tensor_numel(cfg, TK_WPE);
}

size_t gpt_tensor_offset(const GPTConfig *cfg, TensorKind k, int layer) {
    if (k == TK_WTE) return 0;
    if (k == TK_WPE) return gpt_tensor_numel(cfg, TK_WTE);
    size_t layers_start = embeddings_numel(cfg);
    if (!gpt_tensor_is_per_layer(k)) {
        size_t off = layers_start + (size_t)cfg->num_layers * layer_numel(cfg);
        return k == TK_LNFW ? off : off + gpt_tensor_numel(cfg, TK_LNFW);
    }
    size_t off = layers_start + (size_t)layer * layer_numel(cfg);
    for (int j = TK_FIRST_LAYER_KIND; j < (int)k; j++) off += gpt_tensor_numel(cfg, (TensorKind)j);
    return off;
}

size_t gpt_num_params(const GPTConfig *cfg) {
    return embeddings_numel(cfg) + (size_t)cfg->num_layers * layer_numel(cfg) + 2 * (size_t)cfg->channels;
}

size_t gpt_num_trained_params(const GPTConfig *cfg) {
    return gpt_num_params(cfg) - (size_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels;
}

int gpt_num_blocks(const GPTConfig *cfg) { return cfg->num_layers + 2; }

void gpt_block_range(const GPTConfig *cfg, int block, size_t *offset, size_t *count) {
    if (block == 0) {
        *offset = 0;
        *count = embeddings_numel(cfg);
    } else if (block <= cfg->num_layers) {
        *offset = gpt_tensor_offset(cfg, TK_FIRST_LAYER_KIND, block - 1);
        *count = layer_numel(cfg);
    } else {
        *offset = gpt_tensor_offset(cfg, TK_LNFW, 0);
        *count = 2 * (size_t)cfg->channels;
    }
}

int gpt_max_segments(const GPTConfig *cfg) { return TK_COUNT * (cfg->num_layers + 2); }

int gpt_param_segments(const GPTConfig *cfg, ParamSegment *out, int capacity) {
    int n = 0;
    for (int block = 0; block < gpt_num_blocks(cfg); block++) {
        int first, last, layer = block - 1;
        if (block == 0) first = TK_WTE, last = TK_WPE;
        else if (block <= cfg->num_layers) first = TK_FIRST_LAYER_KIND, last = TK_LAST_LAYER_KIND;
        else first = TK_LNFW, last = TK_LNFB;
        for (int k = first; k <= last; k++) {
            if (n == capacity) bs_die("internal: too many parameter segments");
            out[n].kind = (TensorKind)k;
            out[n].layer = gpt_tensor_is_per_layer((TensorKind)k) ? layer : 0;
            out[n].offset = gpt_tensor_offset(cfg, (TensorKind)k, out[n].layer);
            out[n].count = gpt_tensor_numel(cfg, (TensorKind)k);
            n++;
        }
    }
    return n;
}

LayerTensors gpt_layer_tensors(const GPTConfig *cfg, float *block) {
    const size_t start = gpt_tensor_offset(cfg, TK_FIRST_LAYER_KIND, 0);
#define AT(kind) (block + (gpt_tensor_offset(cfg, kind, 0) - start))
    LayerTensors t = {
        .ln1w = AT(TK_LN1W), .ln1b = AT(TK_LN1B), .qkvw = AT(TK_QKVW), .qkvb = AT(TK_QKVB),
        .attprojw = AT(TK_ATTPROJW), .attprojb = AT(TK_ATTPROJB), .ln2w = AT(TK_LN2W), .ln2b = AT(TK_LN2B),
        .fcw = AT(TK_FCW), .fcb = AT(TK_FCB), .fcprojw = AT(TK_FCPROJW), .fcprojb = AT(TK_FCPROJB),
    };
#undef AT
    return t;
}

void gpt_create(GPT *model, const GPTConfig *cfg) { gpt_create_with(model, cfg, GPT_ALLOC_PARAMS | GPT_ALLOC_GRADS); }

void gpt_create_with(GPT *model, const GPTConfig *cfg, int alloc) {
    model->cfg = *cfg;
    model->num_params = gpt_num_params(cfg);
    model->params = (alloc & GPT_ALLOC_PARAMS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
    model->grads = (alloc & GPT_ALLOC_GRADS) ? bs_calloc(model->num_params, sizeof(float)) : NULL;
}

void gpt_free(GPT *model) {
    free(model->params);
    free(model->grads);
    model->params = model->grads = NULL;
}

void gpt_init_range(const GPTConfig *cfg, uint64_t seed, float *dst, size_t offset, size_t count) {
    Rng rng;
    rng_seed(&rng, seed);
    int cap = gpt_max_segments(cfg);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(cfg, segs, cap);
    const double residual_std = 0.02 / sqrt(2.0 * cfg->num_layers);
    const size_t end = offset + count;
    for (int i = 0; i < n; i++) {
        TensorKind k = segs[i].kind;
        size_t lo = segs[i].offset, hi = segs[i].offset + segs[i].count;
        size_t random = gpt_tensor_decays(k) ? segs[i].count : 0; /* values drawn for this tensor */
        if (k == TK_WTE) random = (size_t)cfg->vocab_size * cfg->channels; /* padded rows stay 0 */
        double std = (k == TK_ATTPROJW || k == TK_FCPROJW) ? residual_std : 0.02;
        bool ones = k == TK_LN1W || k == TK_LN2W || k == TK_LNFW;
        for (size_t j = lo; j < hi; j++) {
            bool mine = j >= offset && j < end;
            float v = ones ? 1.0f : 0.0f;
            if (j - lo < random) {
                if (mine) v = (float)(std * rng_normal(&rng));
                else rng_next(&rng), rng_next(&rng); /* rng_normal draws two words */
            }
            if (mine) dst[j - offset] = v;
        }
    }
    free(segs);
}

void gpt_init_weights(GPT *model, uint64_t seed) {
    gpt_init_range(&model->cfg, seed, model->params, 0, model->num_params);
}

void gpt_zero_grads(GPT *model) {
    if (model->grads) memset(model->grads, 0, model->num_params * sizeof(float));
}

/* One layer's activations inside acts->layers. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
} LayerActs;

static size_t layer_acts_numel(const GPTConfig *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels;
    return BT * C * (1 + 3 + 1 + 1 + 1 + 4 + 4 + 1) + BT * 4 + (size_t)B * cfg->num_heads * T * T;
}

static LayerActs layer_acts(const GPTActs *acts, const GPTConfig *cfg, int layer) {
    size_t BT = (size_t)acts->B * acts->T, C = (size_t)cfg->channels;
    float *p = acts->layers + (size_t)layer * acts->layer_stride;
    LayerActs a;
#define TAKE(field, n) (a.field = p, p += (n))
    TAKE(ln1, BT * C);
    TAKE(ln1_mean, BT);
    TAKE(ln1_rstd, BT);
    TAKE(qkv, 3 * BT * C);
    TAKE(atty, BT * C);
    TAKE(att, (size_t)acts->B * cfg->num_heads * acts->T * acts->T);
    TAKE(residual2, BT * C);
    TAKE(ln2, BT * C);
    TAKE(ln2_mean, BT);
    TAKE(ln2_rstd, BT);
    TAKE(fch, 4 * BT * C);
    TAKE(fch_gelu, 4 * BT * C);
    TAKE(residual3, BT * C);
#undef TAKE
    return a;
}

static size_t forward_numel(const GPTConfig *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels;
    return BT * C /* encoded */ + (size_t)cfg->num_layers * layer_acts_numel(cfg, B, T) + BT * C /* lnf */
           + 2 * BT + BT * (size_t)cfg->padded_vocab_size + BT /* losses */ + BT * C /* proj_out */;
}

static size_t backward_numel(const GPTConfig *cfg, int B, int T, int slots) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels;
    return BT * C * (1 + 1 + 1 + 3 + 4) + (size_t)slots * T * T;
}

size_t gpt_acts_bytes(const GPTConfig *cfg, int B, int T, bool for_training) {
    size_t n = forward_numel(cfg, B, T);
    if (for_training) n += backward_numel(cfg, B, T, omp_get_max_threads());
    return n * sizeof(float);
}

void gpt_acts_create(GPTActs *acts, const GPTConfig *cfg, int B, int T, bool for_training) {
    memset(acts, 0, sizeof *acts);
    acts->B = B;
    acts->T = T;
    size_t BT = (size_t)B * T, C = (size_t)cfg->channels;
    acts->memory = bs_malloc(forward_numel(cfg, B, T) * sizeof(float));
    acts->layer_stride = layer_acts_numel(cfg, B, T);
    float *p = acts->memory;
    acts->encoded = p, p += BT * C;
    acts->layers = p, p += (size_t)cfg->num_layers * acts->layer_stride;
    acts->lnf = p, p += BT * C;
    acts->lnf_mean = p, p += BT;
    acts->lnf_rstd = p, p += BT;
    acts->logits = p, p += BT * cfg->padded_vocab_size;
    acts->losses = p, p += BT;
    acts->proj_out = p;
    if (!for_training) return;
    acts->scratch_slots = omp_get_max_threads();
    acts->grad_memory = bs_malloc(backward_numel(cfg, B, T, acts->scratch_slots) * sizeof(float));
    p = acts->grad_memory;
    acts->dresidual = p, p += BT * C;
    acts->dln = p, p += BT * C;
    acts->datty = p, p += BT * C;
    acts->dqkv = p, p += 3 * BT * C;
    acts->dfch = p, p += 4 * BT * C;
    acts->att_scratch = p;
}

void gpt_acts_free(GPTActs *acts) {
    free(acts->memory);
    free(acts->grad_memory);
    memset(acts, 0, sizeof *acts);
}

/* The model's own buffers, when no BlockAccess is given. */
static float *block_start(const GPTConfig *cfg, float *base, int block) {
    size_t off, count;
    gpt_block_range(cfg, block, &off, &count);
    return base + off;
}

static float *params_of(const GPT *model, const BlockAccess *a, int block) {
    return a ? a->params(a->ctx, block) : block_start(&model->cfg, model->params, block);
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

double gpt_forward(const GPT *model, GPTActs *acts, const int32_t *inputs, const int32_t *targets, int b, int t,
                   float dloss, const BlockAccess *access) {
    const GPTConfig *cfg = &model->cfg;
    const int C = cfg->channels, H = cfg->num_heads, L = cfg->num_layers;
    const size_t N = (size_t)b * t;
    if (b > acts->B || t > acts->T) bs_die("internal: batch %dx%d exceeds the activations' %dx%d", b, t, acts->B, acts->T);
    float *emb = params_of(model, access, 0);
    float *wte = emb, *wpe = emb + gpt_tensor_numel(cfg, TK_WTE);
    encoder_forward(acts->encoded, inputs, wte, wpe, b, t, C);
    const float *residual = acts->encoded;
    for (int l = 0; l < L; l++) {
        LayerTensors w = gpt_layer_tensors(cfg, params_of(model, access, l + 1));
        LayerActs a = layer_acts(acts, cfg, l);
        layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
        matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, N, C, 3 * C);
        attention_forward(a.atty, a.att, a.qkv, b, t, C, H);
        matmul_forward(acts->proj_out, a.atty, w.attprojw, w.attprojb, N, C, C);
        residual_forward(a.residual2, residual, acts->proj_out, N * C);
        layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, N, C);
        matmul_forward(a.fch, a.ln2, w.fcw, w.fcb, N, C, 4 * C);
        gelu_forward(a.fch_gelu, a.fch, N * 4 * C);
        matmul_forward(acts->proj_out, a.fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
        residual_forward(a.residual3, a.residual2, acts->proj_out, N * C);
        residual = a.residual3;
        params_done(access, l + 1);
    }
    float *lnf = params_of(model, access, L + 1);
    layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, residual, lnf, lnf + C, N, C);
    params_done(access, L + 1);
    matmul_forward(acts->logits, acts->lnf, wte, NULL, N, C, cfg->padded_vocab_size);
    params_done(access, 0);
    if (!targets) return 0;
    return softmax_xent_forward_backward(acts->logits, acts->losses, targets, N, cfg->vocab_size,
                                         cfg->padded_vocab_size, dloss);
}

void gpt_backward(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access) {
    const GPTConfig *cfg = &model->cfg;
    const int C = cfg->channels, H = cfg->num_heads, L = cfg->num_layers;
    const size_t N = (size_t)b * t;
    if (!acts->grad_memory) bs_die("internal: activations were created without backward buffers");
    const size_t wpe_offset = gpt_tensor_numel(cfg, TK_WTE);
    float *demb = grads_of(model, access, 0); /* first: it marks the start of backward */
    float *emb = params_of(model, access, 0);

    /* logits = lnf @ wte^T; acts->logits already holds dlogits */
    matmul_backward(acts->dln, demb, NULL, acts->logits, acts->lnf, emb, N, C, cfg->padded_vocab_size);
    memset(acts->dresidual, 0, N * C * sizeof(float));
    const float *last = L > 0 ? layer_acts(acts, cfg, L - 1).residual3 : acts->encoded;
    float *lnf = params_of(model, access, L + 1), *dlnf = grads_of(model, access, L + 1);
    layernorm_backward(acts->dresidual, dlnf, dlnf + C, acts->dln, last, lnf, acts->lnf_mean, acts->lnf_rstd, N, C);
    grads_done(access, L + 1);
    params_done(access, L + 1);

    for (int l = L - 1; l >= 0; l--) {
        LayerTensors w = gpt_layer_tensors(cfg, params_of(model, access, l + 1));
        LayerTensors g = gpt_layer_tensors(cfg, grads_of(model, access, l + 1));
        LayerActs a = layer_acts(acts, cfg, l);
        const float *inp = l == 0 ? acts->encoded : layer_acts(acts, cfg, l - 1).residual3;
        /* MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))) */
        matmul_backward(acts->dfch, g.fcprojw, g.fcprojb, acts->dresidual, a.fch_gelu, w.fcprojw, N, 4 * C, C);
        gelu_backward(acts->dfch, a.fch, acts->dfch, N * 4 * C);
        matmul_backward(acts->dln, g.fcw, g.fcb, acts->dfch, a.ln2, w.fcw, N, C, 4 * C);
        layernorm_backward(acts->dresidual, g.ln2w, g.ln2b, acts->dln, a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd,
                           N, C);
        /* attention: residual2 = inp + attproj(attention(qkv(ln1(inp)))) */
        matmul_backward(acts->datty, g.attprojw, g.attprojb, acts->dresidual, a.atty, w.attprojw, N, C, C);
        attention_backward(acts->dqkv, acts->att_scratch, acts->scratch_slots, acts->datty, a.qkv, a.att, b, t, C, H);
        matmul_backward(acts->dln, g.qkvw, g.qkvb, acts->dqkv, a.ln1, w.qkvw, N, C, 3 * C);
        layernorm_backward(acts->dresidual, g.ln1w, g.ln1b, acts->dln, inp, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
        grads_done(access, l + 1);
        params_done(access, l + 1);
    }
    encoder_backward(demb, demb + wpe_offset, acts->dresidual, inputs, b, t, C);
    grads_done(access, 0);
    params_done(access, 0);
}

double gpt_flops_per_token(const GPTConfig *cfg, int seq_len) {
    return 6.0 * (double)gpt_num_trained_params(cfg) + 12.0 * cfg->num_layers * cfg->channels * (double)seq_len;
}
