/* gpt_layout.c: the GPT's parameter layout, whole or sharded (tensor and
 * pipeline parallel), its map onto the whole model's layout, and the seeded
 * initialisation that gives every shard its part of the same model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/range.h"
#include "core/rng.h"
#include "model/gpt.h"

int gpt_padded_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

int gpt_tp_size(const GPTConfig *cfg) { return cfg->tp_size > 0 ? cfg->tp_size : 1; }
int gpt_tp_rank(const GPTConfig *cfg) { return cfg->tp_size > 0 ? cfg->tp_rank : 0; }
static int pp_size(const GPTConfig *cfg) { return cfg->pp_size > 0 ? cfg->pp_size : 1; }
static int pp_rank(const GPTConfig *cfg) { return cfg->pp_size > 0 ? cfg->pp_rank : 0; }
int gpt_first_layer(const GPTConfig *cfg) { return cfg->pp_size > 0 ? cfg->first_layer : 0; }
int gpt_stage_layers(const GPTConfig *cfg) { return cfg->pp_size > 0 ? cfg->stage_layers : cfg->num_layers; }
int gpt_cp_size(const GPTConfig *cfg) { return cfg->cp_size > 1 ? cfg->cp_size : 1; }
int gpt_ep_size(const GPTConfig *cfg) { return cfg->ep_size > 1 ? cfg->ep_size : 1; }
bool gpt_has_encoder(const GPTConfig *cfg) { return pp_rank(cfg) == 0; }
bool gpt_has_head(const GPTConfig *cfg) { return pp_rank(cfg) == pp_size(cfg) - 1; }
bool gpt_has_embeddings(const GPTConfig *cfg) { return gpt_has_encoder(cfg); }

GPTConfig gpt_logical_config(const GPTConfig *cfg) {
    GPTConfig whole = *cfg;
    whole.tp_size = whole.tp_rank = whole.pp_size = whole.pp_rank = whole.first_layer = whole.stage_layers = 0;
    whole.cp_size = whole.ep_size = whole.ep_rank = 0;
    return whole;
}

bool gpt_config_check(GPTConfig *cfg, char *why, size_t why_size) {
    const char *fixed = NULL, *subject = NULL;
    if (cfg->num_layers < 1) fixed = "the model needs at least 1 layer", subject = "layers";
    else if (cfg->num_heads < 1) fixed = "the model needs at least 1 attention head", subject = "heads";
    else if (cfg->channels < 1) fixed = "the width must be at least 1", subject = "channels";
    else if (cfg->max_seq_len < 1) fixed = "the sequence length must be at least 1", subject = "seq_len";
    else if (cfg->vocab_size < 2) fixed = "the vocabulary must have at least 2 tokens";
    else if (cfg->vocab_size > (1 << 30) || cfg->channels > (1 << 16) || cfg->max_seq_len > (1 << 20) ||
             cfg->num_layers > (1 << 20) || cfg->num_heads > (1 << 16))
        fixed = "the model is too large for this engine (vocab > 2^30, channels > 65536, seq-len > 2^20, "
                "layers > 2^20 or heads > 65536)";
    else if ((double)cfg->num_layers * 12.0 * cfg->channels * cfg->channels +
                 ((double)cfg->vocab_size + 128 + cfg->max_seq_len) * cfg->channels > 4e12)
        fixed = "the model is too large for this engine (more than 4e12 parameters)";
    if (fixed) return bs_reason(why, why_size, subject, "%s", fixed);
    if (cfg->channels % cfg->num_heads != 0)
        return bs_reason(why, why_size, "heads channels", "the %d attention heads do not divide the width %d",
                         cfg->num_heads, cfg->channels);
    cfg->padded_vocab_size = gpt_padded_vocab(cfg->vocab_size);
    if (!gpt_is_moe(cfg)) return true;
    if (cfg->moe_ffn == 0) cfg->moe_ffn = 4 * cfg->channels;
    if (cfg->moe_every < 0 || cfg->moe_every > cfg->num_layers) {
        return bs_reason(why, why_size, "moe_every layers", "every %d-th layer MoE: the spacing must be between 1 and "
                         "the %d layers (layer l is MoE when (l + 1) %% %d == 0)", cfg->moe_every, cfg->num_layers,
                         cfg->moe_every);
    }
    MoeConfig moe = gpt_moe_config(cfg);
    return moe_config_check(&moe, cfg->capacity_factor != 0, why, why_size);
}

bool gpt_is_moe(const GPTConfig *cfg) { return cfg->experts > 1; }

static int moe_every(const GPTConfig *cfg) { return cfg->moe_every > 1 ? cfg->moe_every : 1; }

bool gpt_layer_is_moe(const GPTConfig *cfg, int layer) { return gpt_is_moe(cfg) && (layer + 1) % moe_every(cfg) == 0; }

/* layers l < layer with (l + 1) % N == 0: l + 1 in N, 2N, .. <= layer */
int gpt_moe_layers_before(const GPTConfig *cfg, int layer) { return gpt_is_moe(cfg) ? layer / moe_every(cfg) : 0; }

MoeConfig gpt_moe_config(const GPTConfig *cfg) {
    /* a tensor-parallel shard's experts hold moe_ffn / tp of the hidden units */
    return (MoeConfig){.channels = cfg->channels, .hidden = cfg->moe_ffn / gpt_tp_size(cfg), .experts = cfg->experts,
                       .top_k = cfg->moe_top_k, .router = (MoeRouter)cfg->moe_router, .gates = (MoeGates)cfg->moe_gates,
                       .routed_scale = cfg->moe_routed_scale != 0 ? cfg->moe_routed_scale : 1,
                       .capacity_factor = cfg->capacity_factor, .aux_coef = cfg->moe_aux_coef,
                       .z_coef = cfg->moe_z_coef};
}

bool gpt_set_shard(GPTConfig *cfg, int tp_size, int tp_rank, int pp_size_, int pp_rank_, int first_layer,
                   int stage_layers, char *why, size_t why_size) {
    if (cfg->num_heads % tp_size != 0)
        return bs_reason(why, why_size, "tp heads", "the tensor-parallel degree %d does not divide the %d attention "
                         "heads (tensor parallelism splits the heads)", tp_size, cfg->num_heads);
    if (cfg->padded_vocab_size % tp_size != 0)
        return bs_reason(why, why_size, "tp", "the tensor-parallel degree %d does not divide the padded vocabulary %d",
                         tp_size, cfg->padded_vocab_size);
    if (stage_layers < 1 || first_layer < 0 || first_layer + stage_layers > cfg->num_layers) {
        snprintf(why, why_size, "pipeline stage %d would hold layers [%d, %d) of %d; every stage needs at least one",
                 pp_rank_, first_layer, first_layer + stage_layers, cfg->num_layers);
        return false;
    }
    if (gpt_is_moe(cfg) && cfg->moe_ffn % tp_size != 0)
        return bs_reason(why, why_size, "tp moe_ffn", "the tensor-parallel degree %d does not divide the experts' "
                         "hidden width %d (tensor parallelism splits each expert's hidden units)", tp_size, cfg->moe_ffn);
    cfg->tp_size = tp_size;
    cfg->tp_rank = tp_rank;
    cfg->pp_size = pp_size_;
    cfg->pp_rank = pp_rank_;
    cfg->first_layer = first_layer;
    cfg->stage_layers = stage_layers;
    return true;
}

static const char *const tensor_names[TK_COUNT] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
    "qkv_lora_a", "qkv_lora_b", "attproj_lora_a", "attproj_lora_b",
    "fc_lora_a", "fc_lora_b", "fcproj_lora_a", "fcproj_lora_b",
    "router", "experts",
};

const char *gpt_tensor_name(TensorKind k) { return tensor_names[k]; }

bool gpt_tensor_is_adapter(TensorKind k) { return k >= TK_FIRST_ADAPTER_KIND && k <= TK_LAST_ADAPTER_KIND; }

static bool is_moe_kind(TensorKind k) { return k >= TK_FIRST_MOE_KIND && k <= TK_LAST_MOE_KIND; }

bool gpt_tensor_is_per_layer(TensorKind k) {
    return (k >= TK_FIRST_LAYER_KIND && k <= TK_LAST_LAYER_KIND) || gpt_tensor_is_adapter(k) || is_moe_kind(k);
}

bool gpt_tensor_decays(TensorKind k) {
    /* the experts' tensor holds their small biases too (decayed with their matrices) */
    return k == TK_WTE || k == TK_WPE || k == TK_QKVW || k == TK_ATTPROJW || k == TK_FCW || k == TK_FCPROJW ||
           gpt_tensor_is_adapter(k) || is_moe_kind(k);
}

GPTConfig gpt_part_config(const GPTConfig *cfg, GPTPart part) {
    GPTConfig c = *cfg;
    c.part = part;
    return c;
}

/* Adapters: target t (0 qkv, 1 attproj, 2 fc, 3 fcproj) of kind k, and whether it is A. */
static int adapter_target(TensorKind k) { return (k - TK_FIRST_ADAPTER_KIND) / 2; }
static bool adapter_is_a(TensorKind k) { return (k - TK_FIRST_ADAPTER_KIND) % 2 == 0; }
/* Row-parallel targets (attproj, fcproj) split their input under tensor parallelism. */
static bool adapter_row_parallel(TensorKind k) { return adapter_target(k) == 1 || adapter_target(k) == 3; }
/* The dense MLP's tensors (and their adapters): in the layers without MoE only. */
static bool is_dense_mlp_kind(TensorKind k) {
    return (k >= TK_FCW && k <= TK_FCPROJB) || (gpt_tensor_is_adapter(k) && adapter_target(k) >= 2);
}
static bool has_dense_layer(const GPTConfig *cfg) { return gpt_moe_layers_before(cfg, cfg->num_layers) < cfg->num_layers; }

/* Tensors every tensor-parallel rank holds whole: LayerNorms, wpe, the
 * row-parallel biases; of the adapters, A of a column-parallel layer (its
 * input is whole) and B of a row-parallel one (its output is). */
static bool tp_replicated(TensorKind k) {
    if (gpt_tensor_is_adapter(k)) return adapter_is_a(k) != adapter_row_parallel(k);
    return k == TK_WPE || k == TK_LN1W || k == TK_LN1B || k == TK_ATTPROJB || k == TK_LN2W || k == TK_LN2B ||
           k == TK_FCPROJB || k == TK_LNFW || k == TK_LNFB || k == TK_ROUTER;
}

static bool in_part(const GPTConfig *cfg, TensorKind k) {
    if (gpt_tensor_is_adapter(k))
        return (cfg->part == GPT_PART_ALL || cfg->part == GPT_PART_ADAPTERS) && cfg->lora_rank > 0 &&
               (cfg->lora_targets >> adapter_target(k) & 1);
    if (is_moe_kind(k) && !gpt_is_moe(cfg)) return false;
    if (is_dense_mlp_kind(k) && !has_dense_layer(cfg)) return false;
    if (cfg->part == GPT_PART_BASE_FP32)
        return k != TK_WTE && k != TK_QKVW && k != TK_ATTPROJW && k != TK_FCW && k != TK_FCPROJW;
    return cfg->part != GPT_PART_ADAPTERS;
}

/* An adapter's elements: A (r, in), B (out, r), at the shard's widths. */
static size_t adapter_numel(const GPTConfig *cfg, TensorKind k) {
    static const size_t in_width[4] = {1, 1, 1, 4}, out_width[4] = {3, 1, 4, 1}; /* times C */
    const size_t C = (size_t)cfg->channels, T = (size_t)gpt_tp_size(cfg), r = (size_t)cfg->lora_rank;
    const int t = adapter_target(k);
    size_t width = adapter_is_a(k) ? in_width[t] * C : out_width[t] * C;
    if (!tp_replicated(k)) width /= T; /* the split side: the row-parallel input, the column-parallel output */
    return r * width;
}

/* Replicated over TP: rank 0's copy counts; over EP (everything but the
 * experts, which each ep rank holds its own of): ep rank 0's. */
bool gpt_tensor_primary(const GPTConfig *cfg, TensorKind k) {
    if (tp_replicated(k) && gpt_tp_rank(cfg) != 0) return false;
    return !(k != TK_EXPERTS && gpt_ep_size(cfg) > 1 && cfg->ep_rank != 0);
}

size_t gpt_tensor_numel(const GPTConfig *cfg, TensorKind k) {
    size_t C = (size_t)cfg->channels, T = (size_t)gpt_tp_size(cfg);
    if (!in_part(cfg, k)) return 0;
    if (gpt_tensor_is_adapter(k)) return adapter_numel(cfg, k);
    switch (k) {
    case TK_WTE: return (size_t)cfg->padded_vocab_size / T * C;
    case TK_WPE: return (size_t)cfg->max_seq_len * C;
    case TK_QKVW: return 3 * C / T * C;
    case TK_QKVB: return 3 * C / T;
    case TK_ATTPROJW: return C * (C / T);
    case TK_FCW: return 4 * C / T * C;
    case TK_FCB: return 4 * C / T;
    case TK_FCPROJW: return C * (4 * C / T);
    case TK_LN1W: case TK_LN1B: case TK_ATTPROJB: case TK_LN2W: case TK_LN2B:
    case TK_FCPROJB: case TK_LNFW: case TK_LNFB: return C;
    case TK_ROUTER: return (size_t)cfg->experts * C;
    case TK_EXPERTS: {
        MoeConfig moe = gpt_moe_config(cfg);
        return (size_t)(cfg->experts / gpt_ep_size(cfg)) * moe_expert_numel(&moe); /* this shard's experts */
    }
    default: break;
    }
    return 0;
}

/* Whether a layer of this kind (MoE MLP or dense) holds the per-layer kind k. */
static bool kind_in_layer(TensorKind k, bool moe_layer) {
    return moe_layer ? !is_dense_mlp_kind(k) : !is_moe_kind(k);
}

static size_t numel_in_layer(const GPTConfig *cfg, TensorKind k, bool moe_layer) {
    return kind_in_layer(k, moe_layer) ? gpt_tensor_numel(cfg, k) : 0;
}

size_t gpt_layer_tensor_numel(const GPTConfig *cfg, TensorKind k, int layer) {
    return gpt_tensor_is_per_layer(k) ? numel_in_layer(cfg, k, gpt_layer_is_moe(cfg, layer)) : gpt_tensor_numel(cfg, k);
}

size_t gpt_tensor_trained(const GPTConfig *cfg, TensorKind k) {
    if (k != TK_WTE) return gpt_tensor_numel(cfg, k);
    if (!in_part(cfg, k)) return 0;
    long rows = cfg->padded_vocab_size / gpt_tp_size(cfg);
    long valid = (long)cfg->vocab_size - (long)gpt_tp_rank(cfg) * rows;
    valid = valid < 0 ? 0 : valid > rows ? rows : valid;
    return (size_t)valid * (size_t)cfg->channels;
}

/* A layer block's kinds in buffer order: the base tensors (the MoE ones
 * after the dense MLP's), then the adapters. */
static int layer_kinds(TensorKind out[TK_COUNT]) {
    int n = 0;
    for (int k = TK_FIRST_LAYER_KIND; k <= TK_LAST_LAYER_KIND; k++) out[n++] = (TensorKind)k;
    for (int k = TK_FIRST_MOE_KIND; k <= TK_LAST_MOE_KIND; k++) out[n++] = (TensorKind)k;
    for (int k = TK_FIRST_ADAPTER_KIND; k <= TK_LAST_ADAPTER_KIND; k++) out[n++] = (TensorKind)k;
    return n;
}

/* One layer block's floats, of an MoE layer or a dense one. */
static size_t block_numel(const GPTConfig *cfg, bool moe_layer) {
    TensorKind kinds[TK_COUNT];
    size_t n = 0;
    for (int i = 0, count = layer_kinds(kinds); i < count; i++) n += numel_in_layer(cfg, kinds[i], moe_layer);
    return n;
}

static size_t layer_numel(const GPTConfig *cfg, int layer) { return block_numel(cfg, gpt_layer_is_moe(cfg, layer)); }

/* The floats of layer blocks [from, to): a prefix sum over the two block sizes. */
static size_t layers_numel(const GPTConfig *cfg, int from, int to) {
    const size_t moe = (size_t)(gpt_moe_layers_before(cfg, to) - gpt_moe_layers_before(cfg, from));
    return moe * block_numel(cfg, true) + ((size_t)(to - from) - moe) * block_numel(cfg, false);
}

static size_t stage_layers_numel(const GPTConfig *cfg) {
    return layers_numel(cfg, gpt_first_layer(cfg), gpt_first_layer(cfg) + gpt_stage_layers(cfg));
}

static size_t final_norm_numel(const GPTConfig *cfg) {
    return gpt_has_head(cfg) ? gpt_tensor_numel(cfg, TK_LNFW) + gpt_tensor_numel(cfg, TK_LNFB) : 0;
}

static size_t embeddings_numel(const GPTConfig *cfg) {
    return gpt_has_embeddings(cfg) ? gpt_tensor_numel(cfg, TK_WTE) + gpt_tensor_numel(cfg, TK_WPE) : 0;
}

size_t gpt_tensor_offset(const GPTConfig *cfg, TensorKind k, int layer) {
    if (k == TK_WTE) return 0;
    if (k == TK_WPE) return gpt_tensor_numel(cfg, TK_WTE);
    size_t layers_start = embeddings_numel(cfg);
    if (!gpt_tensor_is_per_layer(k)) {
        size_t off = layers_start + stage_layers_numel(cfg);
        return k == TK_LNFW ? off : off + gpt_tensor_numel(cfg, TK_LNFW);
    }
    size_t off = layers_start + layers_numel(cfg, gpt_first_layer(cfg), layer);
    TensorKind kinds[TK_COUNT];
    for (int i = 0, count = layer_kinds(kinds); i < count && kinds[i] != k; i++)
        off += gpt_layer_tensor_numel(cfg, kinds[i], layer);
    return off;
}

size_t gpt_num_params(const GPTConfig *cfg) {
    return embeddings_numel(cfg) + stage_layers_numel(cfg) + final_norm_numel(cfg);
}

size_t gpt_num_trained_params(const GPTConfig *cfg) {
    GPTConfig whole = gpt_logical_config(cfg);
    return gpt_num_params(&whole) - gpt_tensor_numel(&whole, TK_WTE) + gpt_tensor_trained(&whole, TK_WTE);
}

int gpt_num_blocks(const GPTConfig *cfg) { return cfg->num_layers + 2; }

bool gpt_block_present(const GPTConfig *cfg, int block) {
    if (block == 0) return gpt_has_embeddings(cfg);
    if (block > cfg->num_layers) return gpt_has_head(cfg);
    int layer = block - 1, first = gpt_first_layer(cfg);
    return layer >= first && layer < first + gpt_stage_layers(cfg);
}

void gpt_block_range(const GPTConfig *cfg, int block, size_t *offset, size_t *count) {
    *offset = 0;
    *count = 0;
    if (!gpt_block_present(cfg, block)) return;
    if (block == 0) {
        *count = embeddings_numel(cfg);
    } else if (block <= cfg->num_layers) {
        *offset = gpt_tensor_offset(cfg, TK_FIRST_LAYER_KIND, block - 1);
        *count = layer_numel(cfg, block - 1);
    } else {
        *offset = gpt_tensor_offset(cfg, TK_LNFW, 0);
        *count = final_norm_numel(cfg);
    }
}

int gpt_max_segments(const GPTConfig *cfg) { return TK_COUNT * (cfg->num_layers + 2); }

/* A block's kinds in buffer order (present or not in cfg's part). */
static int block_kinds(const GPTConfig *cfg, int block, TensorKind out[TK_COUNT]) {
    if (block == 0) return out[0] = TK_WTE, out[1] = TK_WPE, 2;
    if (block > cfg->num_layers) return out[0] = TK_LNFW, out[1] = TK_LNFB, 2;
    return layer_kinds(out);
}

int gpt_param_segments(const GPTConfig *cfg, ParamSegment *out, int capacity) {
    int n = 0;
    for (int block = 0; block < gpt_num_blocks(cfg); block++) {
        if (!gpt_block_present(cfg, block)) continue;
        TensorKind kinds[TK_COUNT];
        for (int i = 0, count = block_kinds(cfg, block, kinds); i < count; i++) {
            TensorKind k = kinds[i];
            const int layer = gpt_tensor_is_per_layer(k) ? block - 1 : 0;
            const size_t count = gpt_layer_tensor_numel(cfg, k, layer);
            if (count == 0) continue; /* not in this part or this layer */
            if (n == capacity) bs_die("internal: too many parameter segments");
            out[n] = (ParamSegment){gpt_tensor_offset(cfg, k, layer), count, k, layer};
            n++;
        }
    }
    return n;
}

LayerTensors gpt_layer_tensors(const GPTConfig *cfg, float *block, int layer) {
    const size_t start = gpt_tensor_offset(cfg, TK_FIRST_LAYER_KIND, layer);
#define AT(kind) (gpt_layer_tensor_numel(cfg, kind, layer) ? block + (gpt_tensor_offset(cfg, kind, layer) - start) : NULL)
    LayerTensors t = {
        .ln1w = AT(TK_LN1W), .ln1b = AT(TK_LN1B), .qkvw = AT(TK_QKVW), .qkvb = AT(TK_QKVB),
        .attprojw = AT(TK_ATTPROJW), .attprojb = AT(TK_ATTPROJB), .ln2w = AT(TK_LN2W), .ln2b = AT(TK_LN2B),
        .fcw = AT(TK_FCW), .fcb = AT(TK_FCB), .fcprojw = AT(TK_FCPROJW), .fcprojb = AT(TK_FCPROJB),
        .router = AT(TK_ROUTER), .experts = AT(TK_EXPERTS),
    };
    for (int target = 0; target < 4; target++) {
        t.lora_a[target] = AT((TensorKind)(TK_FIRST_ADAPTER_KIND + 2 * target));
        t.lora_b[target] = AT((TensorKind)(TK_FIRST_ADAPTER_KIND + 2 * target + 1));
    }
#undef AT
    return t;
}

void gpt_copy_tensors(const GPTConfig *from, const float *src, const GPTConfig *to, float *dst) {
    int cap = gpt_max_segments(from);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(from, segs, cap);
    for (int i = 0; i < n; i++)
        if (gpt_layer_tensor_numel(to, segs[i].kind, segs[i].layer) == segs[i].count)
            memcpy(dst + gpt_tensor_offset(to, segs[i].kind, segs[i].layer), src + segs[i].offset,
                   segs[i].count * sizeof(float));
    free(segs);
}

void gpt_copy_part(const GPTConfig *all, GPTPart part, const float *src, float *dst) {
    GPTConfig whole = gpt_logical_config(all), from = gpt_part_config(&whole, part);
    whole.part = GPT_PART_ALL;
    gpt_copy_tensors(&from, src, &whole, dst);
}

/* ---- the map onto the whole model ---- */

typedef struct {
    ShardRun *out;
    int n, capacity;
} RunList;

static void add_run(RunList *l, size_t local, size_t logical, size_t count, bool primary) {
    if (count == 0) return;
    if (l->n > 0) {
        ShardRun *p = &l->out[l->n - 1];
        if (p->local + p->count == local && p->logical + p->count == logical && p->primary == primary) {
            p->count += count;
            return;
        }
    }
    if (l->n == l->capacity) bs_die("internal: too many shard runs");
    l->out[l->n++] = (ShardRun){local, logical, count, primary};
}

int gpt_max_shard_runs(const GPTConfig *cfg) {
    const int expert_runs = gpt_is_moe(cfg) ? cfg->experts * (cfg->channels + 3) : 0; /* under TP: expert_runs */
    return (cfg->num_layers + 2) * (2 * cfg->channels + 2 * cfg->lora_rank + 2 * TK_COUNT + expert_runs) + 8;
}

/* This shard's experts as runs of the logical tensor: local expert j of ep
 * rank e is logical expert e E/ep + j; under TP rank r holds rows
 * [r F/T, (r+1) F/T) of its fc weight and bias, those columns of every
 * fcproj row, and the fcproj bias (rank 0's copy primary). One run per
 * expert block (merged) without TP. */
static void expert_runs(RunList *l, const GPTConfig *cfg, size_t local, size_t logical) {
    const MoeConfig part = gpt_moe_config(cfg);
    const size_t C = (size_t)cfg->channels, Fl = (size_t)part.hidden, F = Fl * (size_t)gpt_tp_size(cfg);
    const size_t r = (size_t)gpt_tp_rank(cfg), whole_numel = 2 * F * C + F + C;
    const int experts = cfg->experts / gpt_ep_size(cfg);
    const size_t first = (size_t)(gpt_ep_size(cfg) > 1 ? cfg->ep_rank : 0) * (size_t)experts;
    for (size_t j = 0; j < (size_t)experts; j++) {
        size_t at = local + j * moe_expert_numel(&part), from = logical + (first + j) * whole_numel;
        add_run(l, at, from + r * Fl * C, Fl * C, true), at += Fl * C; /* fc weight rows */
        add_run(l, at, from + F * C + r * Fl, Fl, true), at += Fl;    /* fc bias */
        for (size_t row = 0; row < C; row++, at += Fl) add_run(l, at, from + F * C + F + row * F + r * Fl, Fl, true);
        add_run(l, at, from + 2 * F * C + F, C, r == 0); /* fcproj bias */
    }
}

/* The local tensor k of `layer` as runs of the logical tensor. */
static void tensor_runs(RunList *l, const GPTConfig *cfg, const GPTConfig *whole, TensorKind k, int layer) {
    const size_t C = (size_t)cfg->channels, T = (size_t)gpt_tp_size(cfg), r = (size_t)gpt_tp_rank(cfg);
    const size_t local = gpt_tensor_offset(cfg, k, layer), logical = gpt_tensor_offset(whole, k, layer);
    const bool primary = gpt_tensor_primary(cfg, k);
    const size_t n = gpt_layer_tensor_numel(cfg, k, layer);
    const size_t rank = (size_t)cfg->lora_rank;
    switch (k) {
    case TK_QKVW: /* rows of q, k and v for this rank's heads */
    case TK_QKVB:
    case TK_QKV_LORA_B: {
        size_t part = n / 3, width = k == TK_QKVW ? C : k == TK_QKVB ? 1 : rank;
        for (size_t p = 0; p < 3; p++) add_run(l, local + p * part, logical + (p * C + r * (C / T)) * width, part, primary);
        break;
    }
    case TK_ATTPROJW: /* this rank's column block of every row */
    case TK_FCPROJW:
    case TK_ATTPROJ_LORA_A:
    case TK_FCPROJ_LORA_A: {
        size_t full = k == TK_ATTPROJW || k == TK_ATTPROJ_LORA_A ? C : 4 * C, cols = full / T;
        size_t rows = gpt_tensor_is_adapter(k) ? rank : C;
        for (size_t row = 0; row < rows; row++) add_run(l, local + row * cols, logical + row * full + r * cols, cols, primary);
        break;
    }
    case TK_EXPERTS: expert_runs(l, cfg, local, logical); break;
    default: /* whole tensors, or a contiguous row block (wte, fcw, fcb) */
        add_run(l, local, tp_replicated(k) ? logical : logical + r * n, n, primary);
        break;
    }
}

int gpt_shard_runs(const GPTConfig *cfg, ShardRun *out, int capacity) {
    RunList l = {out, 0, capacity};
    GPTConfig whole = gpt_logical_config(cfg);
    for (int block = 0; block < gpt_num_blocks(cfg); block++) {
        if (!gpt_block_present(cfg, block)) continue;
        TensorKind kinds[TK_COUNT];
        for (int i = 0, count = block_kinds(cfg, block, kinds); i < count; i++)
            if (gpt_layer_tensor_numel(cfg, kinds[i], block - 1)) tensor_runs(&l, cfg, &whole, kinds[i], block - 1);
    }
    return l.n;
}

ShardRun *gpt_shard_runs_alloc(const GPTConfig *cfg, int *n) {
    int cap = gpt_max_shard_runs(cfg);
    ShardRun *runs = bs_malloc(sizeof(ShardRun) * (size_t)cap);
    *n = gpt_shard_runs(cfg, runs, cap);
    return runs;
}

/* ---- initialisation ---- */

/* GPT-2's initial values of the whole model, walked in logical order. */
typedef struct {
    const GPTConfig *whole;
    ParamSegment *segs;
    int num_segs, seg;
    size_t pos; /* next logical index */
    Rng rng;
    double residual_std;
} InitStream;

/* LoRA's initial adapters (Hu et al. 2021, as peft): A Kaiming-uniform,
 * U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform_ with a = sqrt(5)),
 * B zero, so the adapted model starts as the base. Values of the stream's
 * segment g from s->pos, at most *count; returns dst advanced. */
static float *init_adapter(InitStream *s, const ParamSegment *g, size_t *count, float *dst) {
    const size_t end = g->offset + g->count;
    const bool a = adapter_is_a(g->kind);
    const double bound = a ? 1.0 / sqrt((double)g->count / (double)s->whole->lora_rank) : 0;
    for (; s->pos < end && *count > 0; s->pos++, (*count)--) {
        float u = a ? rng_uniform(&s->rng) : 0.0f; /* one word per value of A, skipped or not */
        if (dst) *dst++ = (float)(bound * (2.0 * u - 1.0));
    }
    return dst;
}

/* One value drawn N(0, std) (dst) or its two words skipped. */
static float draw_normal(InitStream *s, double std, bool keep) {
    if (keep) return (float)(std * rng_normal(&s->rng));
    rng_next(&s->rng), rng_next(&s->rng); /* rng_normal draws two words */
    return 0;
}

/* The experts' initial values, each like the dense MLP: fc N(0, 0.02),
 * fcproj N(0, residual std), biases 0. Segment g from s->pos, at most
 * *count; returns dst advanced. */
static float *init_experts(InitStream *s, const ParamSegment *g, size_t *count, float *dst) {
    const MoeConfig moe = gpt_moe_config(s->whole);
    const size_t end = g->offset + g->count, per = moe_expert_numel(&moe);
    const size_t fc = (size_t)moe.hidden * moe.channels, fcb_end = fc + moe.hidden, fcproj_end = fcb_end + fc;
    for (; s->pos < end && *count > 0; s->pos++, (*count)--) {
        const size_t at = (s->pos - g->offset) % per;
        float v = 0;
        if (at < fc) v = draw_normal(s, 0.02, dst != NULL);
        else if (at >= fcb_end && at < fcproj_end) v = draw_normal(s, s->residual_std, dst != NULL);
        if (dst) *dst++ = v;
    }
    return dst;
}

/* The next `count` values of the stream into dst (NULL: skip them). */
static void init_stream_take(InitStream *s, size_t count, float *dst) {
    while (count > 0) {
        const ParamSegment *g = &s->segs[s->seg];
        size_t end = g->offset + g->count;
        if (s->pos >= end) {
            s->seg++;
            continue;
        }
        TensorKind k = g->kind;
        if (gpt_tensor_is_adapter(k)) {
            dst = init_adapter(s, g, &count, dst);
            continue;
        }
        if (k == TK_EXPERTS) {
            dst = init_experts(s, g, &count, dst);
            continue;
        }
        size_t random = gpt_tensor_decays(k) ? g->count : 0; /* values drawn for this tensor */
        if (k == TK_WTE) random = (size_t)s->whole->vocab_size * s->whole->channels; /* padded rows stay 0 */
        double std = (k == TK_ATTPROJW || k == TK_FCPROJW) ? s->residual_std : 0.02;
        float constant = (k == TK_LN1W || k == TK_LN2W || k == TK_LNFW) ? 1.0f : 0.0f;
        for (; s->pos < end && count > 0; s->pos++, count--) {
            float v = constant;
            if (s->pos - g->offset < random) {
                if (dst) v = (float)(std * rng_normal(&s->rng));
                else rng_next(&s->rng), rng_next(&s->rng); /* rng_normal draws two words */
            }
            if (dst) *dst++ = v;
        }
    }
}

void gpt_init_range(const GPTConfig *cfg, uint64_t seed, float *dst, size_t offset, size_t count) {
    GPTConfig whole = gpt_logical_config(cfg);
    InitStream s = {.whole = &whole, .residual_std = 0.02 / sqrt(2.0 * cfg->num_layers)};
    rng_seed(&s.rng, seed);
    int cap = gpt_max_segments(&whole);
    s.segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    s.num_segs = gpt_param_segments(&whole, s.segs, cap);
    int nruns;
    ShardRun *runs = gpt_shard_runs_alloc(cfg, &nruns);
    const Range wanted = range_make(offset, count);
    for (int i = 0; i < nruns; i++) { /* runs ascend in logical order too */
        Range run = range_make(runs[i].local, runs[i].count), part = range_intersect(run, wanted);
        if (range_empty(part)) continue;
        size_t logical = runs[i].logical + range_offset_in(part, run);
        if (logical < s.pos) { /* a replicated copy seen again: restart the stream (rare) */
            rng_seed(&s.rng, seed);
            s.pos = 0;
            s.seg = 0;
        }
        init_stream_take(&s, logical - s.pos, NULL);
        init_stream_take(&s, part.count, dst + range_offset_in(part, wanted));
    }
    free(runs);
    free(s.segs);
}
