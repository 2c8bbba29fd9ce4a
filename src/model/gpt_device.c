/* gpt_device.c: the GPT-2 step on a device (gpt_device.h), op for op as
 * gpt.c runs it on the CPU (the same buffers' roles, the same accumulation
 * into the residual's gradient), each op one launch on the compute stream. */
#include "model/gpt_device.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "device/adamw_table.h"
#include "device/flash_math.h"
#include "model/acts_bf16_device.h"
#include "model/classifier_device.h"
#include "model/fp8_device.h"
#include "model/gpt_device_stage.h"
#include "model/gpt_device_cp.h"
#include "model/gpt_device_tp.h"
#include "model/step_graphs.h"
#include "model/moe_device.h"

#define TRY(x)                                                                                                        \
    do {                                                                                                              \
        if ((x) != 0) return -1;                                                                                      \
    } while (0)

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
    /* the split backward's stash (gpt_device_enable_split_backward, else NULL): each op's output gradient, kept by B for W */
    float *dfcproj, *dfch, *dln2, *dattproj, *dqkv, *dln1;
} DeviceLayerActs;

struct GPTDevice {
    Device *dev;
    DeviceStream *compute, *copy;
    DeviceEvent *tokens_ready;
    GPTConfig cfg;
    int B, T, debug, nseg;
    int Cl, Hl, F;   /* the shard's attention channels, heads and MLP width (the whole model's without TP) */
    bool lead;       /* tensor rank 0: adds the row-parallel products' (replicated) biases */
    GPTDeviceTP *tp; /* gpt_device_set_tensor_group (NULL: the whole model) */
    GPTDeviceCP *cp; /* gpt_device_set_context_group (NULL: whole sequences) */
    bool fused_attention; /* DK_FLASH_* (the default), or the unfused kernels keeping P */
    size_t nparams;
    float *params, *grads, *m, *v, *acts;
    int32_t *tokens; /* inputs (B T), targets (B T), each token's document start (B T) */
    int32_t doc_separator, *host_doc_start;
    double *sums;    /* per tensor */
    int64_t *offsets; /* where each tensor starts, then the end (nseg + 1), clipped to the update range; then the same from the range's start */
    size_t range_offset, range_count; /* gpt_device_set_update_range: what AdamW updates (default: all) */
    GPTDevicePiece *pieces; /* gpt_device_set_update_pieces (one: the range) */
    int npieces;
    bool own_pieces;  /* set by gpt_device_set_update_pieces: every piece counts in the sums, the dense tensors' on every ep rank */
    int offset_tables, adamw_cap; /* what offsets (tables of nseg + 1) and adamw_table hold on the device */
    double *host_part_sums;   /* one piece's per-tensor sums */
    ParamSegment *segs;
    GPTDeviceGradHooks hooks; /* gpt_device_set_grad_hooks (grads NULL: none) */
    size_t state_floats[4];   /* what grads, m, v and params hold (size_state) */
    bool grad_part;           /* gpt_device_keep_grad_part: grads holds the update range only */
    GPTDeviceParamHooks phooks; /* gpt_device_set_param_hooks (params NULL: none) */
    bool param_part;          /* gpt_device_keep_param_part: params holds the update range only */
    AdamWSegment *adamw_tensors, *adamw_table; /* the layout's trained tensors (host); those in the range (device) */
    int adamw_nsegs;
    size_t adamw_n; /* the parameters AdamW updates: one launch over adamw_table */
    int32_t *flags;  /* non-finite flags: one per layer (forward), then one per block (gradients) */
    float *host_losses;
    double *host_sums;
    int32_t *host_flags;
    float poison;    /* NaN: the host source of gpt_device_poison_grad's copy */
    bool bf16;               /* gpt_device_enable_bf16 */
    bool split;              /* gpt_device_enable_split_backward: every set carves its layers' stash */
    uint16_t *params_bf16;   /* bf16: every parameter's bf16 copy, at the layout's offsets */
    uint16_t *in_bf16, *dout_bf16; /* bf16: a product's input and output gradient as bf16 operands */
    float *wte_rounded;      /* bf16: wte rounded to bf16 (the encoder reads it, as gpt.c's bf16 copy); TP: the whole vocabulary's */
    uint16_t *wte_bits;      /* bf16 under TP: the whole wte's bf16 bits (the classifier's weight operand), else NULL */
    Fp8Device *fp8;          /* gpt_device_enable_fp8 (NULL: off) */
    ActsBf16 *acts_bf16;     /* gpt_device_enable_bf16_activations (NULL: the activations kept in fp32) */
    StepGraphs *graphs;      /* gpt_device_enable_graphs (NULL: off) */
    MoeDevice *moe;          /* the MoE layers (moe_device.h), NULL in a dense model */
    int nonfinite_layer;
    /* activations (pointers into acts) */
    float *encoded, *proj_out, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dresidual, *dln, *datty, *dqkv, *dfch, *scratch;
    DeviceLayerActs *layer;
    GPTDeviceStage stage; /* pipeline stages (gpt_device_stage.c): activation sets, the tied head's weights */
};

static size_t rows(const GPTDevice *g) { return (size_t)g->B * g->T; }

/* Rows of logits the classifier keeps at a time (classifier_device.h). */
static size_t classifier_rows(const GPTDevice *g) {
    const size_t N = (size_t)g->B * g->T;
    return N < CLASSIFIER_BLOCK_ROWS ? N : CLASSIFIER_BLOCK_ROWS;
}

static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

/* Carves the activations from one allocation; returns the floats it needs (base NULL: only counts).
 * With full recomputation (GPT_RECOMPUTE_FULL) every layer keeps only its
 * output (the next one's input) and shares layer 0's other buffers, which
 * backward refills layer by layer; selective is what the fused attention
 * does already (it keeps each row's log-sum-exp, not the probabilities). */
static size_t carve_acts(GPTDevice *g, float *base) {
    const size_t N = (size_t)g->B * g->T, C = (size_t)g->cfg.channels, Cl = (size_t)g->Cl, F = (size_t)g->F;
    const size_t att = (size_t)g->B * g->Hl * g->T * (g->fused_attention ? 1 : g->T); /* fused: each row's lse */
    float *c = base;
    const int first = gpt_first_layer(&g->cfg);
    for (int l = first; l < first + gpt_stage_layers(&g->cfg); l++) {
        DeviceLayerActs *a = &g->layer[l];
        if (l > first && g->acts_bf16) { /* the first layer's ln1, atty, ln2, fch_gelu: the bf16 store keeps each layer's */
            *a = g->layer[first];
            a->ln1_mean = take(&c, N), a->ln1_rstd = take(&c, N), a->qkv = take(&c, 3 * N * C), a->att = take(&c, att);
            a->residual2 = take(&c, N * C), a->ln2_mean = take(&c, N), a->ln2_rstd = take(&c, N);
            a->fch = take(&c, 4 * N * C), a->residual3 = take(&c, N * C);
            continue;
        }
        if (l > first && g->cfg.recompute == GPT_RECOMPUTE_FULL) { /* the first layer's buffers, recomputed; its own output */
            *a = g->layer[first];
            a->residual3 = take(&c, N * C);
            continue;
        }
        a->ln1 = take(&c, N * C), a->ln1_mean = take(&c, N), a->ln1_rstd = take(&c, N), a->qkv = take(&c, 3 * N * Cl);
        a->atty = take(&c, N * Cl), a->att = take(&c, att), a->residual2 = take(&c, N * C), a->ln2 = take(&c, N * C);
        a->ln2_mean = take(&c, N), a->ln2_rstd = take(&c, N), a->fch = take(&c, N * F);
        a->fch_gelu = take(&c, N * F), a->residual3 = take(&c, N * C);
        if (g->split)
            a->dfcproj = take(&c, N * C), a->dfch = take(&c, N * F), a->dln2 = take(&c, N * C),
            a->dattproj = take(&c, N * C), a->dqkv = take(&c, 3 * N * Cl), a->dln1 = take(&c, N * C);
    }
    g->encoded = take(&c, N * C), g->proj_out = take(&c, N * C), g->lnf = take(&c, N * C);
    g->lnf_mean = take(&c, N), g->lnf_rstd = take(&c, N), g->logits = take(&c, classifier_rows(g) * g->cfg.padded_vocab_size);
    g->losses = take(&c, N), g->dresidual = take(&c, N * C), g->dln = take(&c, N * C), g->datty = take(&c, N * Cl);
    g->dqkv = take(&c, 3 * N * Cl), g->dfch = take(&c, N * F), g->scratch = take(&c, g->fused_attention ? 0 : att);
    return (size_t)(c - base);
}

static const char *unsupported(const GPTConfig *cfg) {
    if (gpt_is_moe(cfg) && (gpt_tp_size(cfg) > 1 || !gpt_has_encoder(cfg) || !gpt_has_head(cfg) || gpt_cp_size(cfg) > 1))
        return "a device runs MoE layers in the whole model in one process for now (no tensor, pipeline or context parallelism)";
    if (gpt_is_moe(cfg) && moe_device_unsupported(cfg)) return moe_device_unsupported(cfg);
    if (cfg->lora_rank > 0) return "a device does not train LoRA adapters yet";
    if (cfg->recompute == GPT_RECOMPUTE_SELECTIVE && cfg->channels / cfg->num_heads > FLASH_MAX_HEAD)
        return "selective recomputation on a device is the fused attention's, and this model's heads are too wide for it";
    return NULL;
}

static size_t clamp(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The offsets tables: per tensor, clipped to piece k (k = 0 .. n-1); one
 * piece: clipped to it, then the same from its start (gpt_device_keep_grad_part). */
static int64_t *offset_tables(const GPTDevice *g, int tables) {
    int64_t *off = malloc(sizeof *off * (size_t)tables * (size_t)(g->nseg + 1));
    if (!off) return NULL;
    for (int k = 0; k < tables; k++) {
        const GPTDevicePiece *p = &g->pieces[g->npieces > 1 ? k : 0];
        for (int i = 0; i <= g->nseg; i++) {
            const size_t at = i < g->nseg ? g->segs[i].offset : g->nseg ? g->segs[i - 1].offset + g->segs[i - 1].count : 0;
            off[k * (g->nseg + 1) + i] = (int64_t)clamp(at, p->offset, p->offset + p->count);
            if (g->npieces == 1 && k == 1) off[g->nseg + 1 + i] = off[i] - (int64_t)p->offset; /* in the gradient part */
        }
    }
    return off;
}

/* The fused AdamW's table: the trained tensors clipped to each piece, numbered on across them. */
static AdamWSegment *adamw_pieces(GPTDevice *g, int *nsegs) {
    AdamWSegment *table = calloc((size_t)g->nseg * (size_t)g->npieces + 1, sizeof *table);
    if (!table) return NULL;
    *nsegs = 0;
    g->adamw_n = 0;
    for (int k = 0; k < g->npieces; k++) {
        int added;
        const size_t n = adamw_table_clip(g->adamw_tensors, g->nseg, g->pieces[k].offset,
                                          g->pieces[k].offset + g->pieces[k].count, table + *nsegs, &added);
        for (int i = 0; i < added; i++) table[*nsegs + i].first += (int64_t)g->adamw_n;
        *nsegs += added;
        g->adamw_n += n;
    }
    return table;
}

/* buf (device) holding at least want of size bytes each: reallocated when it holds fewer (*have). */
static int fit(GPTDevice *g, void **buf, int *have, int want, size_t size) {
    if (want <= *have) return 0;
    device_free(g->dev, *buf);
    *have = want;
    return (*buf = device_alloc(g->dev, size * (size_t)want)) ? 0 : -1;
}

static int set_pieces(GPTDevice *g, const GPTDevicePiece *pieces, int n) {
    GPTDevicePiece *copy = malloc(sizeof *copy * (size_t)n);
    if (!copy) return -1;
    memcpy(copy, pieces, sizeof *copy * (size_t)n);
    free(g->pieces);
    g->pieces = copy;
    g->npieces = n;
    g->range_offset = n == 1 ? pieces[0].offset : 0; /* several: m and v hold the whole layout, AdamW updates the pieces */
    g->range_count = n == 1 ? pieces[0].count : g->nparams;
    const int tables = n > 1 ? n : 2;
    int64_t *off = offset_tables(g, tables);
    int nsegs = 0;
    AdamWSegment *table = off ? adamw_pieces(g, &nsegs) : NULL;
    int rc = table ? 0 : -1;
    rc = rc ? rc : fit(g, (void **)&g->offsets, &g->offset_tables, tables, sizeof *off * (size_t)(g->nseg + 1));
    rc = rc ? rc : fit(g, (void **)&g->adamw_table, &g->adamw_cap, nsegs ? nsegs : 1, sizeof *table);
    g->adamw_nsegs = nsegs;
    rc = rc ? rc : device_copy(g->dev, g->compute, g->offsets, off, sizeof *off * (size_t)tables * (size_t)(g->nseg + 1), COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_copy(g->dev, g->compute, g->adamw_table, table, sizeof *table * (size_t)(nsegs ? nsegs : 1), COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_stream_sync(g->dev, g->compute);
    free(off);
    free(table);
    return rc;
}

int gpt_device_set_update_pieces(GPTDevice *g, const GPTDevicePiece *pieces, int n) {
    g->own_pieces = true;
    return set_pieces(g, pieces, n);
}

int gpt_device_set_update_range(GPTDevice *g, size_t offset, size_t count) {
    const GPTDevicePiece one = {offset, count, 0};
    g->own_pieces = false;
    return set_pieces(g, &one, 1);
}

/* The layout's tensors, on the host and (their offsets, the whole range's) on the device. */
static int make_segments(GPTDevice *g) {
    g->segs = malloc(sizeof *g->segs * (size_t)gpt_max_segments(&g->cfg));
    if (!g->segs) return -1;
    g->nseg = gpt_param_segments(&g->cfg, g->segs, gpt_max_segments(&g->cfg));
    g->host_sums = malloc(sizeof *g->host_sums * (size_t)g->nseg);
    g->host_part_sums = malloc(sizeof *g->host_part_sums * (size_t)g->nseg);
    g->sums = device_alloc(g->dev, sizeof *g->sums * (size_t)g->nseg);
    g->adamw_tensors = malloc(sizeof *g->adamw_tensors * (size_t)(g->nseg + 1));
    if (!g->host_sums || !g->host_part_sums || !g->sums || !g->adamw_tensors) return -1;
    for (int i = 0; i < g->nseg; i++) /* wte's padded rows are not trained */
        g->adamw_tensors[i] = (AdamWSegment){(int64_t)g->segs[i].offset, 0, (int64_t)gpt_tensor_trained(&g->cfg, g->segs[i].kind),
                                             gpt_tensor_decays(g->segs[i].kind)};
    return gpt_device_set_update_range(g, 0, g->nparams);
}

/* a flag per layer, then one per block (L + 2) */
static int num_flags(const GPTDevice *g) { return 2 * g->cfg.num_layers + 2; }

static int allocate(GPTDevice *g) {
    const size_t N = (size_t)g->B * g->T; /* the parameters, gradient and moments: size_state */
    g->layer = calloc((size_t)g->cfg.num_layers, sizeof *g->layer);
    g->host_losses = device_host_alloc(g->dev, sizeof(float) * N); /* pinned: a graph's copies read and write them */
    g->host_doc_start = device_host_alloc(g->dev, sizeof(int32_t) * N);
    g->host_flags = device_host_alloc(g->dev, sizeof(int32_t) * (size_t)num_flags(g));
    if (!g->layer || !g->host_losses || !g->host_doc_start || !g->host_flags) return -1;
    g->compute = device_stream_create(g->dev);
    g->copy = device_stream_create(g->dev);
    g->tokens_ready = device_event_create(g->dev);
    if (!g->compute || !g->copy || !g->tokens_ready) return -1;
    if (!(g->tokens = device_alloc(g->dev, sizeof(int32_t) * 3 * N))) return -1;
    if (!(g->flags = device_alloc(g->dev, sizeof(int32_t) * (size_t)num_flags(g)))) return -1;
    g->stage.dev = g->dev;
    if (gpt_device_stage_open(&g->stage) != 0) return -1;
    if (gpt_has_head(&g->cfg) && !gpt_has_embeddings(&g->cfg) &&
        gpt_device_stage_open_head(&g->stage, g->dev, gpt_tensor_numel(&g->cfg, TK_WTE)) != 0)
        return -1;
    if (gpt_is_moe(&g->cfg) && !(g->moe = moe_device_create(g->dev, &g->cfg, N))) return -1;
    return make_segments(g);
}

/* The activations' one allocation, made when the state first arrives (after every option that shapes them). */
static int allocate_acts(GPTDevice *g) {
    if (g->acts) return 0;
    if (!(g->acts = device_alloc(g->dev, sizeof(float) * carve_acts(g, NULL)))) return -1;
    carve_acts(g, g->acts);
    return 0;
}

/* Their shapes changed: allocated again when the state arrives. */
static void drop_acts(GPTDevice *g) {
    device_free(g->dev, g->acts);
    g->acts = NULL;
}

GPTDevice *gpt_device_create(Device *dev, const GPTConfig *cfg, int B, int T, int debug, char *reason,
                             size_t reason_size) {
    const char *why = unsupported(cfg);
    if (why) {
        snprintf(reason, reason_size, "%s", why);
        return NULL;
    }
    GPTDevice *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(reason, reason_size, "out of host memory");
        return NULL;
    }
    *g = (GPTDevice){.dev = dev, .cfg = *cfg, .B = B, .T = T, .debug = debug, .nparams = gpt_num_params(cfg),
                     .doc_separator = -1, .poison = NAN, .nonfinite_layer = -1,
                     .fused_attention = cfg->channels / cfg->num_heads <= FLASH_MAX_HEAD,
                     .Cl = cfg->channels / gpt_tp_size(cfg), .Hl = cfg->num_heads / gpt_tp_size(cfg),
                     .F = 4 * cfg->channels / gpt_tp_size(cfg), .lead = gpt_tp_rank(cfg) == 0};
    if (allocate(g) != 0) {
        snprintf(reason, reason_size, "%s", device_error(dev)[0] ? device_error(dev) : "out of host memory");
        gpt_device_free(g);
        return NULL;
    }
    return g;
}

void gpt_device_free(GPTDevice *g) {
    if (!g) return;
    g->tokens = gpt_device_stage_own_tokens(&g->stage, g->tokens);
    gpt_device_stage_close(&g->stage);
    void *dev_buffers[] = {g->params, g->grads,    g->m,     g->v,           g->acts,     g->tokens,    g->sums,
                           g->offsets, g->adamw_table, g->flags, g->params_bf16, g->in_bf16, g->dout_bf16, g->wte_rounded,
                           g->wte_bits};
    for (size_t i = 0; i < sizeof dev_buffers / sizeof dev_buffers[0]; i++) device_free(g->dev, dev_buffers[i]);
    acts_bf16_free(g->acts_bf16);
    fp8_device_free(g->fp8);
    gpt_device_tp_free(g->tp);
    gpt_device_cp_free(g->cp);
    step_graphs_free(g->graphs);
    moe_device_free(g->moe);
    device_event_destroy(g->dev, g->tokens_ready);
    device_stream_destroy(g->dev, g->copy);
    device_stream_destroy(g->dev, g->compute);
    free(g->layer);
    free(g->segs);
    free(g->adamw_tensors);
    device_host_free(g->dev, g->host_losses);
    device_host_free(g->dev, g->host_doc_start);
    free(g->host_sums);
    free(g->host_part_sums);
    free(g->pieces);
    device_host_free(g->dev, g->host_flags);
    free(g);
}

int gpt_device_set_tensor_group(GPTDevice *g, DeviceComm *comm) {
    if (gpt_tp_size(&g->cfg) == 1) return 0;
    g->tp = gpt_device_tp_create(g->dev, g->compute, &g->cfg, comm, g->debug & GPT_DEVICE_SKIP_TP_WAIT);
    return g->tp ? 0 : -1;
}

void gpt_device_set_expert_group(GPTDevice *g, Comm *ep_group, DeviceComm *comm) {
    moe_device_set_expert_group(g->moe, ep_group, comm);
}

int gpt_device_set_context_group(GPTDevice *g, DeviceComm *comm, int size, int rank, CpAlgo algo, CpSplit split,
                                 char *reason, size_t reason_size) {
    if (!g->fused_attention) {
        snprintf(reason, reason_size, "context parallelism on a device runs the fused attention only");
        return -1;
    }
    g->cp = gpt_device_cp_create(g->dev, g->compute, comm, size, rank, algo, split, g->B, g->T, g->Cl, g->Hl);
    if (!g->cp) snprintf(reason, reason_size, "%s", device_error(g->dev));
    return g->cp ? 0 : -1;
}

static int round_bf16(GPTDevice *g, float *out, uint16_t *out_bf16, const float *inp, size_t n) {
    DeviceCall call = {.kernel = DK_BF16_ROUND, .a.round = {out, out_bf16, inp, n}};
    return device_launch(g->dev, g->compute, &call);
}

static float *tensor(const GPTDevice *g, float *base, TensorKind k) { return base + gpt_tensor_offset(&g->cfg, k, 0); }

/* The gradient / the parameters at flat offset off (in the update range when only its part is kept). */
static float *grad_at(const GPTDevice *g, size_t off) { return g->grads + (off - (g->grad_part ? g->range_offset : 0)); }
static float *param_at(const GPTDevice *g, size_t off) { return g->params + (off - (g->param_part ? g->range_offset : 0)); }
static size_t grad_floats(const GPTDevice *g) { return g->grad_part ? g->range_count : g->nparams; }
static size_t param_floats(const GPTDevice *g) { return g->param_part ? g->range_count : g->nparams; }

/* Where block's floats are for this use (its first): the hook's buffer, else the flat buffer's (at). */
static float *block_at(GPTDevice *g, int block, float *(*hook)(void *, int), void *ctx,
                       float *(*at)(const GPTDevice *, size_t)) {
    size_t off, count;
    gpt_block_range(&g->cfg, block, &off, &count);
    float *p = hook ? hook(ctx, block) : NULL;
    return p ? p : at(g, off);
}

static float *grad_block(GPTDevice *g, int block) { return block_at(g, block, g->hooks.grads, g->hooks.ctx, grad_at); }
static float *param_block(GPTDevice *g, int block) { return block_at(g, block, g->phooks.params, g->phooks.ctx, param_at); }

/* Tensor k inside the block whose floats start at base. */
static float *in_block(const GPTDevice *g, float *base, int block, TensorKind k) {
    size_t off, count;
    gpt_block_range(&g->cfg, block, &off, &count);
    return base + (gpt_tensor_offset(&g->cfg, k, 0) - off);
}

static float *grad_tensor(GPTDevice *g, int block, TensorKind k) { return in_block(g, grad_block(g, block), block, k); }

static void grad_done(GPTDevice *g, int block) {
    if (g->hooks.grads_done) g->hooks.grads_done(g->hooks.ctx, block);
}

static void param_done(GPTDevice *g, int block) {
    if (g->phooks.params_done) g->phooks.params_done(g->phooks.ctx, block);
}

void gpt_device_set_grad_hooks(GPTDevice *g, const GPTDeviceGradHooks *hooks) {
    g->hooks = hooks ? *hooks : (GPTDeviceGradHooks){0};
}

void gpt_device_set_param_hooks(GPTDevice *g, const GPTDeviceParamHooks *hooks) {
    g->phooks = hooks ? *hooks : (GPTDeviceParamHooks){0};
}

void gpt_device_keep_grad_part(GPTDevice *g) { g->grad_part = true; }
void gpt_device_keep_param_part(GPTDevice *g) { g->param_part = true; }

/* The state sized to what this rank keeps (the moments and, with
 * gpt_device_keep_grad_part / _param_part, the gradient / the parameters: the update range),
 * allocated at the first gpt_device_set_state, so no larger size is ever
 * allocated first (sim's peak counts every allocation). */
static int size_state(GPTDevice *g) {
    const size_t want[] = {grad_floats(g), g->range_count, g->range_count, param_floats(g)};
    float **buf[] = {&g->grads, &g->m, &g->v, &g->params};
    for (int i = 0; i < 4; i++) {
        if (*buf[i] && g->state_floats[i] == want[i]) continue;
        device_free(g->dev, *buf[i]);
        if (!(*buf[i] = device_alloc(g->dev, sizeof(float) * (want[i] ? want[i] : 1)))) return -1;
        g->state_floats[i] = want[i];
    }
    return 0;
}

/* The tied wte (the whole vocabulary's under TP) and the gradient the encoder and the classifier add to. */
static const float *whole_wte(const GPTDevice *g) { return g->tp ? gpt_device_tp_wte(g->tp) : tensor(g, g->params, TK_WTE); }
static float *whole_dwte(const GPTDevice *g) { return g->tp ? gpt_device_tp_dwte(g->tp) : tensor(g, g->grads, TK_WTE); }
static size_t whole_wte_floats(const GPTDevice *g) { return gpt_tensor_numel(&g->cfg, TK_WTE) * (size_t)gpt_tp_size(&g->cfg); }

/* bf16: the encoder's wte, rounded as the products' (under TP the whole one, with its bits for the classifier) */
static int refresh_wte(GPTDevice *g) {
    if (g->tp && gpt_has_embeddings(&g->cfg) && !g->param_part) /* tensor parallel: the whole wte (a last stage: gpt_device_head_changed; ZeRO 3: gathered in forward) */
        TRY(gpt_device_tp_gather_wte(g->tp, tensor(g, g->params, TK_WTE)));
    return g->bf16 ? round_bf16(g, g->wte_rounded, g->wte_bits, whole_wte(g), whole_wte_floats(g)) : 0;
}

int gpt_device_enable_bf16(GPTDevice *g) {
    const size_t N = rows(g), C = (size_t)g->cfg.channels, Vp = (size_t)g->cfg.padded_vocab_size;
    g->bf16 = true;
    g->params_bf16 = device_alloc(g->dev, sizeof(uint16_t) * g->nparams);
    g->in_bf16 = device_alloc(g->dev, sizeof(uint16_t) * N * 4 * C);                  /* the largest input: fch_gelu */
    g->dout_bf16 = device_alloc(g->dev, sizeof(uint16_t) * N * (Vp > 4 * C ? Vp : 4 * C)); /* the logits' or fc's */
    g->wte_rounded = device_alloc(g->dev, sizeof(float) * whole_wte_floats(g));
    if (gpt_tp_size(&g->cfg) > 1 && !(g->wte_bits = device_alloc(g->dev, sizeof(uint16_t) * whole_wte_floats(g)))) return -1;
    if (!(g->params_bf16 && g->in_bf16 && g->dout_bf16 && g->wte_rounded)) return -1;
    return gpt_device_stage_open_head_bf16(&g->stage, gpt_tensor_numel(&g->cfg, TK_WTE));
}

int gpt_device_enable_fp8(GPTDevice *g, Fp8State *fp8) {
    g->fp8 = fp8_device_create(g->dev, fp8, g->bf16 ? rows(g) * 4 * (size_t)g->cfg.channels : 0); /* fc's dout */
    return g->fp8 ? 0 : -1;
}

int gpt_device_fp8_begin_step(GPTDevice *g) { return g->fp8 ? fp8_device_begin_step(g->fp8, g->compute) : 0; }
int gpt_device_fp8_end_step(GPTDevice *g) { return g->fp8 ? fp8_device_end_step(g->fp8, g->compute) : 0; }

int gpt_device_head_changed(GPTDevice *g) {
    if (g->tp && g->stage.head_wte) TRY(gpt_device_tp_gather_wte(g->tp, g->stage.head_wte)); /* its rows of the whole */
    if (!g->stage.head_wte_bf16) return 0;
    return round_bf16(g, NULL, g->stage.head_wte_bf16, g->stage.head_wte, gpt_tensor_numel(&g->cfg, TK_WTE));
}

/* The parameters' bf16 copies after the fp32 masters changed on the device. */
static int refresh_copies(GPTDevice *g) {
    if (g->bf16) TRY(round_bf16(g, NULL, g->params_bf16, g->params, g->nparams));
    return refresh_wte(g);
}

/* m or v between the device and the host's packed copy: the range, or each piece (the device's then the whole layout's). */
static int copy_moments(GPTDevice *g, float *dev, float *host, DeviceCopyKind kind) {
    if (g->npieces == 1) {
        float *dst = kind == COPY_HOST_TO_DEVICE ? dev : host;
        return device_copy(g->dev, g->compute, dst, dst == dev ? host : dev, g->range_count * sizeof(float), kind);
    }
    for (int k = 0; k < g->npieces; k++) {
        const GPTDevicePiece *p = &g->pieces[k];
        float *on_dev = dev + p->offset, *on_host = host + p->packed;
        TRY(kind == COPY_HOST_TO_DEVICE ? device_copy(g->dev, g->compute, on_dev, on_host, p->count * sizeof(float), kind)
                                        : device_copy(g->dev, g->compute, on_host, on_dev, p->count * sizeof(float), kind));
    }
    return 0;
}

int gpt_device_set_state(GPTDevice *g, const float *params, const float *m, const float *v) {
    TRY(allocate_acts(g));
    TRY(size_state(g));
    const size_t whole = param_floats(g) * sizeof(float), part = g->range_count * sizeof(float);
    TRY(params ? device_copy(g->dev, g->compute, g->params, params, whole, COPY_HOST_TO_DEVICE)
               : device_zero(g->dev, g->compute, g->params, whole));
    const float *src[] = {m, v};
    float *dst[] = {g->m, g->v};
    for (int i = 0; i < 2; i++) {
        if (!src[i] || g->npieces > 1) TRY(device_zero(g->dev, g->compute, dst[i], part)); /* pieces: the rest stays 0 */
        if (src[i]) TRY(copy_moments(g, dst[i], (float *)src[i], COPY_HOST_TO_DEVICE));
    }
    TRY(refresh_copies(g));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_get_state(GPTDevice *g, float *params, float *grads, float *m, float *v) {
    if (params) TRY(device_copy(g->dev, g->compute, params, g->params, param_floats(g) * sizeof(float), COPY_DEVICE_TO_HOST));
    if (grads) TRY(gpt_device_get_grads(g, g->range_offset, g->range_count, grads));
    if (m) TRY(copy_moments(g, g->m, m, COPY_DEVICE_TO_HOST));
    if (v) TRY(copy_moments(g, g->v, v, COPY_DEVICE_TO_HOST));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_get_grads(GPTDevice *g, size_t offset, size_t count, float *grads) {
    TRY(device_copy(g->dev, g->compute, grads, grad_at(g, offset), count * sizeof(float), COPY_DEVICE_TO_HOST));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_params_changed(GPTDevice *g) {
    TRY(refresh_copies(g));
    return device_stream_sync(g->dev, g->compute);
}

DeviceStream *gpt_device_compute_stream(const GPTDevice *g) { return g->compute; }
const GPTConfig *gpt_device_config(const GPTDevice *g) { return &g->cfg; }

void gpt_device_update_range(const GPTDevice *g, size_t *offset, size_t *count) {
    *offset = g->range_offset;
    *count = g->range_count;
}

float *gpt_device_array(const GPTDevice *g, GPTDeviceArray which) {
    return which == GPT_DEVICE_GRADS ? g->grads : g->params;
}

void gpt_device_set_doc_separator(GPTDevice *g, int32_t separator) { g->doc_separator = separator; }

int gpt_device_set_fused_attention(GPTDevice *g, bool fused, char *reason, size_t reason_size) {
    if (fused && g->cfg.channels / g->cfg.num_heads > FLASH_MAX_HEAD) {
        snprintf(reason, reason_size, "fused attention takes heads of up to %d channels (this model's have %d)",
                 FLASH_MAX_HEAD, g->cfg.channels / g->cfg.num_heads);
        return -1;
    }
    if (!fused && g->cfg.recompute == GPT_RECOMPUTE_SELECTIVE) { /* the unfused kernels keep P */
        snprintf(reason, reason_size, "selective recomputation on a device is the fused attention's: it needs it");
        return -1;
    }
    if (fused == g->fused_attention) return 0;
    g->fused_attention = fused; /* the activations again: P (B,H,T,T) and its scratch, or only the lse (B,H,T) */
    drop_acts(g);
    return 0;
}

int gpt_device_enable_bf16_activations(GPTDevice *g, char *reason, size_t reason_size) {
    if (!g->bf16 || g->fp8 || g->cfg.recompute == GPT_RECOMPUTE_FULL || gpt_tp_size(&g->cfg) > 1) {
        snprintf(reason, reason_size, "bf16 activations need bf16 products (not fp32 or FP8), no full recomputation and "
                 "no tensor parallelism (the store keeps whole layers' widths)");
        return -1;
    }
    if (g->acts_bf16) return 0;
    drop_acts(g); /* the layers now share one set of fp32 buffers */
    if (!(g->acts_bf16 = acts_bf16_create(g->dev, g->cfg.num_layers, rows(g), (size_t)g->cfg.channels))) {
        snprintf(reason, reason_size, "%s", device_error(g->dev));
        return -1;
    }
    return 0;
}

int gpt_device_enable_split_backward(GPTDevice *g) {
    if (g->split) return 0;
    g->split = true;
    drop_acts(g); /* every set carves its layers' stash: allocated again when the state arrives */
    return 0;
}

int gpt_device_zero_grads(GPTDevice *g) {
    if (g->debug & GPT_DEVICE_SKIP_GRAD_ZERO) return 0;
    const size_t wte_bytes = gpt_tensor_numel(&g->cfg, TK_WTE) * sizeof(float);
    if (g->stage.head_dwte) TRY(device_zero(g->dev, g->compute, g->stage.head_dwte, wte_bytes)); /* the head's copy's */
    if (g->tp) TRY(gpt_device_tp_zero_dwte(g->tp));
    return device_zero(g->dev, g->compute, g->grads, grad_floats(g) * sizeof(float));
}

static int launch(GPTDevice *g, const DeviceCall *call) { return device_launch(g->dev, g->compute, call); }

static int layernorm(GPTDevice *g, DeviceKernel k, LayernormArgs a) {
    DeviceCall call = {.kernel = k, .a.layernorm = a};
    call.a.layernorm.N = (int)rows(g);
    call.a.layernorm.C = g->cfg.channels;
    return launch(g, &call);
}

/* bf16: a product's operands as bf16. Forward rounds its input in place
 * (read by products only, as gpt.c's round_input) and takes its bf16 bits;
 * backward takes the (already rounded) input's and dout's bits, dout itself
 * kept in fp32 for the bias gradient. The weight's bits are the copy AdamW
 * refreshes. */
static int bf16_operands(GPTDevice *g, DeviceKernel k, MatmulArgs *a) {
    const size_t N = (size_t)a->N;
    if (!a->inp_bf16) { /* set: the input's bits kept by --activations bf16 */
        TRY(round_bf16(g, k == DK_MATMUL_FORWARD ? (float *)a->inp : NULL, g->in_bf16, a->inp, N * (size_t)a->IC));
        a->inp_bf16 = g->in_bf16;
    }
    const bool head_copy = a->weight == g->stage.head_wte; /* the last stage's tied weights: their own bf16 copy */
    const bool whole = g->tp && a->weight == whole_wte(g); /* TP's whole wte (the classifier): its bits */
    a->weight_bf16 = head_copy ? g->stage.head_wte_bf16 : whole ? g->wte_bits : g->params_bf16 + (a->weight - g->params);
    if (k == DK_MATMUL_FORWARD) return 0;
    a->dout_bf16 = g->dout_bf16;
    return round_bf16(g, NULL, g->dout_bf16, a->dout, N * (size_t)a->OC);
}

/* A product of a->N rows (N, IC, OC set), on bf16 operands in bf16 mode. */
static int product(GPTDevice *g, DeviceKernel k, MatmulArgs a) {
    DeviceCall call = {.kernel = k, .a.matmul = a};
    if (g->bf16) TRY(bf16_operands(g, k, &call.a.matmul));
    return launch(g, &call);
}

/* The classifier's products, a block of rows at a time (classifier_device.h). */
static int classifier_product(void *model, DeviceKernel k, const MatmulArgs *a) { return product(model, k, *a); }

/* Linear layer `which` (gpt.c's FP8 site order: qkv, attproj, fc, fcproj) of layer l; in FP8 in fp8 mode. */
enum { LINEAR_QKV, LINEAR_ATTPROJ, LINEAR_FC, LINEAR_FCPROJ };
static int linear(GPTDevice *g, DeviceKernel k, int l, int which, MatmulArgs a, int IC, int OC) {
    static const ActKind INPUT_OF[] = {ACT_LN1, ACT_ATTY, ACT_LN2, ACT_FCH_GELU}; /* each linear layer's input */
    a.N = (int)rows(g);
    a.IC = IC;
    a.OC = OC;
    if (g->acts_bf16) a.inp_bf16 = acts_bf16_bits(g->acts_bf16, l, INPUT_OF[which]);
    if (g->fp8 && g->bf16) a.weight_bf16 = g->params_bf16 + (a.weight - g->params);
    const int site = FP8_LINEARS_PER_LAYER * (l - gpt_first_layer(&g->cfg)) + which; /* the stage's layers: its sites */
    if (g->fp8) return fp8_device_linear(g->fp8, g->compute, k, site, &a);
    return product(g, k, a);
}

static int elementwise(GPTDevice *g, DeviceKernel k, float *out, const float *a, const float *b, size_t n) {
    DeviceCall call = {.kernel = k, .a.elementwise = {out, a, b, n}};
    return launch(g, &call);
}

/* Each token's document start on the device, NULL without documents. */
static const int32_t *doc_starts(const GPTDevice *g) { return g->doc_separator >= 0 ? g->tokens + 2 * rows(g) : NULL; }

/* Each token's true position under context parallelism (NULL: its row). */
static const int32_t *positions(const GPTDevice *g) { return g->cp ? gpt_device_cp_positions(g->cp) : NULL; }

/* dqkv: where backward writes the gradient of qkv. */
static int attention(GPTDevice *g, DeviceKernel k, const DeviceLayerActs *a, float *dqkv) {
    DeviceCall call = {.kernel = k};
    if (g->cp && k == DK_ATTENTION_FORWARD) return gpt_device_cp_forward(g->cp, a->atty, a->att, a->qkv);
    if (g->cp) return gpt_device_cp_backward(g->cp, dqkv, g->datty, a->qkv, a->atty, a->att); /* dqkv: zbh1's B, the stash */
    if (g->fused_attention) { /* att holds each row's log-sum-exp */
        call.kernel = k == DK_ATTENTION_FORWARD ? DK_FLASH_FORWARD : DK_FLASH_BACKWARD;
        call.a.flash = flash_self_attention(a->atty, a->att, dqkv, a->qkv, g->datty, doc_starts(g), g->B, g->T,
                                            g->Cl, g->Hl);
        return launch(g, &call);
    }
    call.a.attention = (AttentionArgs){a->atty, a->att, dqkv, g->scratch, a->qkv, g->datty, doc_starts(g),
                                       g->B, g->T, g->Cl, g->Hl};
    return launch(g, &call);
}

static int nonfinite(GPTDevice *g, int32_t *flag, const float *x, size_t n) {
    DeviceCall call = {.kernel = DK_NONFINITE, .a.nonfinite = {flag, x, n}};
    return launch(g, &call);
}

/* A row-parallel product's output or a column-parallel one's input gradient summed over the tensor group. */
static int tp_sum(GPTDevice *g, float *x) { return g->tp ? gpt_device_tp_sum(g->tp, x, rows(g) * (size_t)g->cfg.channels) : 0; }

/* A row-parallel product's bias: added by tensor rank 0 alone. */
static const float *row_bias(const GPTDevice *g, const float *bias) { return g->lead ? bias : NULL; }

/* --activations bf16: x's bf16 bits (layer's activation k) kept for its products and backward. */
static int keep(GPTDevice *g, int layer, ActKind k, const float *x) {
    return g->acts_bf16 ? acts_bf16_keep(g->acts_bf16, g->compute, layer, k, x) : 0;
}

/* The layernorm at the input of layer l (l = L: the final one), reading inp. */
static LayernormArgs input_norm(GPTDevice *g, int l, const float *inp) {
    if (l == g->cfg.num_layers) {
        const float *lnf = tensor(g, g->params, TK_LNFW);
        return (LayernormArgs){.out = g->lnf, .mean = g->lnf_mean, .rstd = g->lnf_rstd, .inp = inp, .weight = lnf,
                               .bias = lnf + g->cfg.channels};
    }
    const LayerTensors p = gpt_layer_tensors(&g->cfg, param_block(g, l + 1), l);
    const DeviceLayerActs *a = &g->layer[l];
    return (LayernormArgs){.out = a->ln1, .mean = a->ln1_mean, .rstd = a->ln1_rstd, .inp = inp, .weight = p.ln1w, .bias = p.ln1b};
}

/* x = a + b and (norm not NULL) the layernorm of x, in one launch (DK_RESIDUAL_LAYERNORM_FORWARD). */
static int residual_norm(GPTDevice *g, float *x, const float *a, const float *b, const LayernormArgs *norm) {
    if (!norm) return elementwise(g, DK_RESIDUAL_FORWARD, x, a, b, rows(g) * (size_t)g->cfg.channels);
    DeviceCall call = {.kernel = DK_RESIDUAL_LAYERNORM_FORWARD};
    call.a.residual_ln = (ResidualLayernormArgs){.ln = *norm, .residual = x, .a = a, .b = b};
    call.a.residual_ln.ln.inp = x;
    call.a.residual_ln.ln.N = (int)rows(g);
    call.a.residual_ln.ln.C = g->cfg.channels;
    return launch(g, &call);
}

/* One layer's forward from residual (N,C) to a->residual3, as gpt_forward, with its parameters at
 * block_params (ZeRO 3: a gathered slot); under TP the shard's products, their outputs summed over the
 * tensor group. normed: its first layernorm ran already (the previous layer's fused residual);
 * fuse_next: the next layernorm (layer l + 1's or the final one, read from the flat parameters) fused
 * with the last residual add. */
static int layer_forward(GPTDevice *g, int l, const float *residual, float *block_params, bool normed, bool fuse_next) {
    const int C = g->cfg.channels, Cl = g->Cl, F = g->F;
    const LayerTensors p = gpt_layer_tensors(&g->cfg, block_params, l);
    const DeviceLayerActs *a = &g->layer[l];
    if (!normed)
        TRY(layernorm(g, DK_LAYERNORM_FORWARD, (LayernormArgs){.out = a->ln1, .mean = a->ln1_mean, .rstd = a->ln1_rstd,
                                                                .inp = residual, .weight = p.ln1w, .bias = p.ln1b}));
    TRY(keep(g, l, ACT_LN1, a->ln1));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_QKV, (MatmulArgs){.out = a->qkv, .inp = a->ln1, .weight = p.qkvw, .bias = p.qkvb}, C, 3 * Cl));
    TRY(attention(g, DK_ATTENTION_FORWARD, a, g->dqkv));
    TRY(keep(g, l, ACT_ATTY, a->atty));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_ATTPROJ, (MatmulArgs){.out = g->proj_out, .inp = a->atty, .weight = p.attprojw, .bias = row_bias(g, p.attprojb)}, Cl, C));
    TRY(tp_sum(g, g->proj_out));
    const LayernormArgs ln2 = {.out = a->ln2, .mean = a->ln2_mean, .rstd = a->ln2_rstd, .weight = p.ln2w, .bias = p.ln2b};
    TRY(residual_norm(g, a->residual2, residual, g->proj_out, &ln2));
    TRY(keep(g, l, ACT_LN2, a->ln2));
    if (gpt_layer_is_moe(&g->cfg, l)) { /* whole models only: no TP, no bf16 */
        TRY(moe_device_forward(g->moe, g->compute, l, g->proj_out, a->ln2, p.router, p.experts));
    } else {
        TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_FC, (MatmulArgs){.out = a->fch_gelu, .pre_gelu = a->fch, .inp = a->ln2, .weight = p.fcw,
                                                      .bias = p.fcb}, C, F)); /* the GELU epilogue */
        TRY(keep(g, l, ACT_FCH_GELU, a->fch_gelu));
        TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_FCPROJ, (MatmulArgs){.out = g->proj_out, .inp = a->fch_gelu, .weight = p.fcprojw, .bias = row_bias(g, p.fcprojb)}, F, C));
        TRY(tp_sum(g, g->proj_out));
    }
    LayernormArgs next;
    if (fuse_next) next = input_norm(g, l + 1, a->residual3); /* the flat parameters' (not under ZeRO 3) */
    TRY(residual_norm(g, a->residual3, a->residual2, g->proj_out, fuse_next ? &next : NULL));
    return nonfinite(g, &g->flags[l], a->residual3, rows(g) * (size_t)C); /* the guard's: gpt.c checks each layer's output */
}

/* One layer's backward: g->dresidual from its output's gradient to its
 * input's, as gpt.c's layer_pass, with its parameters at block_params; under
 * TP the shard's input gradients summed over the tensor group. split (B of a
 * split backward): no parameter gradient; each op's output gradient stays in
 * the layer's stash for layer_weight (the ones written in place are written there). */
static int layer_backward(GPTDevice *g, int l, const float *inp, float *block_params, bool split) {
    const int C = g->cfg.channels, Cl = g->Cl, F = g->F;
    const size_t NC = rows(g) * (size_t)C;
    const LayerTensors p = gpt_layer_tensors(&g->cfg, block_params, l);
    const LayerTensors d = split ? (LayerTensors){0} : gpt_layer_tensors(&g->cfg, grad_block(g, l + 1), l);
    const DeviceLayerActs *a = &g->layer[l];
    float *dfch = split ? a->dfch : g->dfch, *dln2 = split ? a->dln2 : g->dln, *dqkv = split ? a->dqkv : g->dqkv;
    float *dln1 = split ? a->dln1 : g->dln;
    if (split) TRY(device_copy(g->dev, g->compute, a->dfcproj, g->dresidual, NC * sizeof(float), COPY_DEVICE_TO_DEVICE));
    if (gpt_layer_is_moe(&g->cfg, l)) { /* whole models only: no split backward, no TP */
        TRY(moe_device_backward(g->moe, g->compute, l, dln2, d.router, d.experts, g->dresidual, a->ln2, p.router, p.experts));
    } else {
        TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FCPROJ, (MatmulArgs){.dinp = dfch, .dweight = d.fcprojw, .dbias = d.fcprojb, .dout = g->dresidual,
                                                       .inp = a->fch_gelu, .weight = p.fcprojw}, F, C));
        TRY(elementwise(g, DK_GELU_BACKWARD, dfch, a->fch, dfch, rows(g) * (size_t)F));
        TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FC, (MatmulArgs){.dinp = dln2, .dweight = d.fcw, .dbias = d.fcb, .dout = dfch,
                                                       .inp = a->ln2, .weight = p.fcw}, C, F));
        TRY(tp_sum(g, dln2));
    }
    TRY(layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = g->dresidual, .dweight = d.ln2w, .dbias = d.ln2b, .dout = dln2,
                                                             .inp = a->residual2, .weight = p.ln2w, .mean = a->ln2_mean, .rstd = a->ln2_rstd}));
    if (split) TRY(device_copy(g->dev, g->compute, a->dattproj, g->dresidual, NC * sizeof(float), COPY_DEVICE_TO_DEVICE));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_ATTPROJ, (MatmulArgs){.dinp = g->datty, .dweight = d.attprojw, .dbias = d.attprojb, .dout = g->dresidual,
                                                   .inp = a->atty, .weight = p.attprojw}, Cl, C));
    TRY(attention(g, DK_ATTENTION_BACKWARD, a, dqkv));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_QKV, (MatmulArgs){.dinp = dln1, .dweight = d.qkvw, .dbias = d.qkvb, .dout = dqkv,
                                                   .inp = a->ln1, .weight = p.qkvw}, C, 3 * Cl));
    TRY(tp_sum(g, dln1));
    return layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = g->dresidual, .dweight = d.ln1w, .dbias = d.ln1b, .dout = dln1,
                                                                .inp = inp, .weight = p.ln1w, .mean = a->ln1_mean, .rstd = a->ln1_rstd});
}

/* W of one layer: its parameter gradients from the stash B left, in layer_backward's order. */
static int layer_weight(GPTDevice *g, int l, const float *inp, float *block_params) {
    const int C = g->cfg.channels, Cl = g->Cl, F = g->F;
    const LayerTensors p = gpt_layer_tensors(&g->cfg, block_params, l), d = gpt_layer_tensors(&g->cfg, grad_block(g, l + 1), l);
    const DeviceLayerActs *a = &g->layer[l];
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FCPROJ, (MatmulArgs){.dweight = d.fcprojw, .dbias = d.fcprojb, .dout = a->dfcproj,
                                                   .inp = a->fch_gelu, .weight = p.fcprojw}, F, C));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FC, (MatmulArgs){.dweight = d.fcw, .dbias = d.fcb, .dout = a->dfch,
                                                   .inp = a->ln2, .weight = p.fcw}, C, F));
    TRY(layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dweight = d.ln2w, .dbias = d.ln2b, .dout = a->dln2,
                                                             .inp = a->residual2, .weight = p.ln2w, .mean = a->ln2_mean, .rstd = a->ln2_rstd}));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_ATTPROJ, (MatmulArgs){.dweight = d.attprojw, .dbias = d.attprojb, .dout = a->dattproj,
                                                   .inp = a->atty, .weight = p.attprojw}, Cl, C));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_QKV, (MatmulArgs){.dweight = d.qkvw, .dbias = d.qkvb, .dout = a->dqkv,
                                                   .inp = a->ln1, .weight = p.qkvw}, C, 3 * Cl));
    return layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dweight = d.ln1w, .dbias = d.ln1b, .dout = a->dln1,
                                                                .inp = inp, .weight = p.ln1w, .mean = a->ln1_mean, .rstd = a->ln1_rstd});
}

/* Each token's document: the position of the last separator at or before it in its sequence (0 if none). */
static void document_starts(GPTDevice *g, const int32_t *inputs) {
    for (int b = 0; b < g->B; b++)
        for (int t = 0, start = 0; t < g->T; t++) {
            if (inputs[(size_t)b * g->T + t] == g->doc_separator) start = t;
            g->host_doc_start[(size_t)b * g->T + t] = start;
        }
}

/* The tokens in on the copy stream; the compute stream waits for them
 * (captured: the copy stream joins the capture first, as a graph needs). */
static int upload_tokens(GPTDevice *g, const int32_t *inputs, const int32_t *targets) {
    const size_t bytes = rows(g) * sizeof(int32_t);
    TRY(gpt_device_stage_tokens_wait(&g->stage, g->compute, g->copy)); /* a set's tokens read by a backward still queued */
    if (g->graphs) TRY(step_graphs_fork(g->graphs, g->compute, g->copy));
    TRY(device_copy(g->dev, g->copy, g->tokens, inputs, bytes, COPY_HOST_TO_DEVICE));
    TRY(device_copy(g->dev, g->copy, g->tokens + rows(g), targets, bytes, COPY_HOST_TO_DEVICE));
    if (g->doc_separator >= 0) {
        if (!g->graphs) document_starts(g, inputs); /* graphs: before the launch (gpt_device_step) */
        TRY(device_copy(g->dev, g->copy, g->tokens + 2 * rows(g), g->host_doc_start, bytes, COPY_HOST_TO_DEVICE));
    }
    TRY(device_event_record(g->dev, g->copy, g->tokens_ready));
    return g->debug & GPT_DEVICE_SKIP_TOKEN_WAIT ? 0 : device_stream_wait(g->dev, g->compute, g->tokens_ready);
}

/* ZeRO 2 under TP, where the embeddings are: the whole wte gradient starts each micro-batch from zero, as the
 * bucket's buffer that takes this rank's rows of it. A last stage's head keeps the step's sum there instead (its
 * rows sent to the first stage after the step). */
static int fresh_micro_dwte(GPTDevice *g) {
    return g->tp && g->grad_part && gpt_has_embeddings(&g->cfg) ? gpt_device_tp_zero_dwte(g->tp) : 0;
}

/* A pipeline stage runs its layers [first, last]; without the encoder its
 * input is g->encoded (the previous stage's output, received there), without
 * the head its output stays in layer[last].residual3. */
static int forward(GPTDevice *g, float dloss) {
    const GPTConfig *cfg = &g->cfg;
    const int C = cfg->channels, L = cfg->num_layers, first = gpt_first_layer(cfg), last = first + gpt_stage_layers(cfg) - 1;
    DeviceCall enc = {.kernel = DK_ENCODER_FORWARD};
    float *emb = param_block(g, 0);
    /* ZeRO 3: from the slot (a last stage has none: its whole wte is the tied copy's, gpt_device_head_changed) */
    if (g->tp && g->param_part && gpt_has_embeddings(cfg)) TRY(gpt_device_tp_gather_wte(g->tp, in_block(g, emb, 0, TK_WTE)));
    if (dloss != 0 && gpt_has_head(cfg)) TRY(fresh_micro_dwte(g)); /* the classifier writes first */
    enc.a.encoder = (EncoderArgs){.out = g->encoded, .wte = g->bf16 ? g->wte_rounded : g->tp ? whole_wte(g) : in_block(g, emb, 0, TK_WTE),
                                  .wpe = in_block(g, emb, 0, TK_WPE),
                                  .tokens = g->tokens, .doc_start = doc_starts(g), .positions = positions(g),
                                  .B = g->B, .T = g->T, .C = C, .V = cfg->vocab_size};
    if (gpt_has_encoder(cfg)) TRY(launch(g, &enc));
    param_done(g, 0);
    const bool has_head = gpt_has_head(cfg), fuse = !g->phooks.params; /* ZeRO 3: each block's parameters apart */
    /* each layer's last residual add fused with the next layernorm: the next layer's of this stage, or the final one */
    for (int l = first; l <= last; l++) {
        const float *inp = l > first ? g->layer[l - 1].residual3 : g->encoded;
        TRY(layer_forward(g, l, inp, param_block(g, l + 1), fuse && l > first, fuse && (l < last || has_head)));
        param_done(g, l + 1);
    }
    if (!has_head) return 0;
    if (!fuse) {
        float *lnf = in_block(g, param_block(g, L + 1), L + 1, TK_LNFW);
        TRY(layernorm(g, DK_LAYERNORM_FORWARD, (LayernormArgs){.out = g->lnf, .mean = g->lnf_mean, .rstd = g->lnf_rstd,
                                                                .inp = g->layer[last].residual3, .weight = lnf, .bias = lnf + C}));
        param_done(g, L + 1);
    }
    /* the loss and, training, the gradients into lnf (g->dln) and wte (the last stage's copy: head_wte; TP's whole one), a block of rows at a time */
    const bool last_stage = g->stage.head_wte != NULL; /* a pipeline's last stage: no embeddings block of its own */
    const bool copy = last_stage && !g->tp; /* TP: the whole one, gathered from the copies' rows */
    float *dwte = copy ? g->stage.head_dwte : g->tp ? whole_dwte(g) : dloss != 0 ? grad_tensor(g, 0, TK_WTE) : NULL;
    float *emb_again = last_stage ? NULL : param_block(g, 0); /* the classifier's use (ZeRO 3 gathers it, TP too) */
    const float *wte = copy ? g->stage.head_wte : g->tp ? whole_wte(g) : in_block(g, emb_again, 0, TK_WTE);
    ClassifierArgs head = {g->losses, g->dln, dwte, g->logits, g->lnf, wte,
                           g->tokens + rows(g), (int)rows(g), C, cfg->vocab_size, cfg->padded_vocab_size,
                           (int)classifier_rows(g), dloss};
    TRY(classifier_device(g->dev, g->compute, &head, classifier_product, g));
    param_done(g, 0);
    return 0;
}

/* --activations bf16: what layer l's fp32 kernels read of the store widened (the attention's output;
 * the products read the bits). */
static int restore_layer(GPTDevice *g, int l) {
    float *const dst[ACT_KINDS] = {[ACT_ATTY] = g->layer[l].atty};
    return acts_bf16_restore(g->acts_bf16, g->compute, l, dst);
}

enum { PASS_FUSED, PASS_INPUT, PASS_WEIGHT }; /* the fused backward, or a split one's B or W */

/* Without the head g->dresidual holds the output's gradient (from the next
 * stage); without the encoder it is left holding the input's. B leaves
 * every parameter gradient to W, which reads the layers' stash, g->dln (the
 * final LayerNorm's output gradient) and g->dresidual (the encoder's): the
 * set's own buffers, which nothing writes between the two. */
static int backward(GPTDevice *g, int pass) {
    const GPTConfig *cfg = &g->cfg;
    const int C = cfg->channels, L = cfg->num_layers, first = gpt_first_layer(cfg), last = first + gpt_stage_layers(cfg) - 1;
    const bool input = pass != PASS_WEIGHT, params = pass != PASS_INPUT;
    if (gpt_has_head(cfg)) {
        float *lnf = in_block(g, param_block(g, L + 1), L + 1, TK_LNFW), *dlnf = grad_tensor(g, L + 1, TK_LNFW);
        if (input) TRY(device_zero(g->dev, g->compute, g->dresidual, rows(g) * (size_t)C * sizeof(float)));
        TRY(layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = input ? g->dresidual : NULL, .dweight = params ? dlnf : NULL,
                                                                 .dbias = params ? dlnf + C : NULL, .dout = g->dln, .inp = g->layer[last].residual3,
                                                                 .weight = lnf, .mean = g->lnf_mean, .rstd = g->lnf_rstd}));
        param_done(g, L + 1);
        if (params) grad_done(g, L + 1);
        if (params && g->tp && g->stage.head_dwte) TRY(gpt_device_tp_take_dwte(g->tp, g->stage.head_dwte)); /* its rows, for the first stage */
    }
    for (int l = last; l >= first; l--) {
        const float *inp = l > first ? g->layer[l - 1].residual3 : g->encoded;
        float *p = param_block(g, l + 1);
        if (pass == PASS_WEIGHT) {
            TRY(layer_weight(g, l, inp, p));
        } else {
            if (cfg->recompute == GPT_RECOMPUTE_FULL) TRY(layer_forward(g, l, inp, p, false, false)); /* the same launches: the same bits */
            if (g->acts_bf16) TRY(restore_layer(g, l));
            TRY(layer_backward(g, l, inp, p, pass == PASS_INPUT));
        }
        param_done(g, l + 1);
        if (params) grad_done(g, l + 1);
    }
    if (!gpt_has_encoder(cfg) || !params) return 0;
    if (!gpt_has_head(cfg)) TRY(fresh_micro_dwte(g)); /* a first stage: the encoder writes first (zbh1: W, after later forwards) */
    DeviceCall enc = {.kernel = DK_ENCODER_BACKWARD};
    enc.a.encoder = (EncoderArgs){.dwte = g->tp ? whole_dwte(g) : grad_tensor(g, 0, TK_WTE), .dwpe = grad_tensor(g, 0, TK_WPE),
                                  .dout = g->dresidual, .tokens = g->tokens, .doc_start = doc_starts(g),
                                  .positions = positions(g), .B = g->B, .T = g->T, .C = C, .V = cfg->vocab_size};
    TRY(launch(g, &enc));
    if (g->tp) TRY(gpt_device_tp_take_dwte(g->tp, grad_tensor(g, 0, TK_WTE))); /* ZeRO 2: into the bucket's buffer */
    grad_done(g, 0);
    return 0;
}

/* The losses (the head's) and the stage's layers' non-finite flags of the work queued, to the host. */
static int queue_results(GPTDevice *g) {
    if (gpt_has_head(&g->cfg))
        TRY(device_copy(g->dev, g->compute, g->host_losses, g->losses, rows(g) * sizeof(float), COPY_DEVICE_TO_HOST));
    return device_copy(g->dev, g->compute, g->host_flags, g->flags, sizeof(int32_t) * (size_t)g->cfg.num_layers,
                       COPY_DEVICE_TO_HOST);
}

/* One micro-batch's work queued: tokens in, forward, backward (dloss != 0), losses and flags out. */
static int queue_micro_batch(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss) {
    TRY(upload_tokens(g, inputs, targets));
    TRY(forward(g, dloss));
    if (dloss != 0) TRY(backward(g, PASS_FUSED));
    return queue_results(g);
}

static int capture_micro_batch(void *model, const int32_t *inputs, const int32_t *targets, float dloss) {
    return queue_micro_batch(model, inputs, targets, dloss);
}

/* The queued work run: the loss sum (the head's) and the first non-finite layer of the stage's. */
static int collect(GPTDevice *g, double *loss_sum) {
    const bool head = gpt_has_head(&g->cfg);
    const int first = gpt_first_layer(&g->cfg);
    TRY(device_stream_sync(g->dev, g->compute));
    if (g->tp) gpt_device_tp_finish(g->tp);
    double sum = 0;
    for (size_t i = 0; head && i < rows(g); i++) sum += g->host_losses[i];
    *loss_sum = sum;
    g->nonfinite_layer = -1;
    for (int l = first + gpt_stage_layers(&g->cfg) - 1; l >= first; l--)
        if (g->host_flags[l]) g->nonfinite_layer = l;
    return 0;
}

int gpt_device_step(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss, double *loss_sum) {
    if (gpt_tp_size(&g->cfg) > 1 && !g->tp) bs_die("internal error: a tensor-parallel shard on a device without its group");
    TRY(allocate_acts(g)); /* once: made by gpt_device_set_state */
    if (g->moe) moe_device_set_training(g->moe, dloss != 0);
    if (g->graphs && g->doc_separator >= 0) document_starts(g, inputs);
    if (g->graphs && dloss != 0) /* training: replayed (forward only, evaluation, is not) */
        TRY(step_graphs_micro_batch(g->graphs, g->compute, inputs, targets, dloss, capture_micro_batch, g));
    else
        TRY(queue_micro_batch(g, inputs, targets, dloss));
    TRY(collect(g, loss_sum));
    if (g->moe && dloss != 0) moe_device_add_micro_step(g->moe); /* the forward's statistics, on the host now */
    return 0;
}

MoeDevice *gpt_device_moe(const GPTDevice *g) { return g->moe; }

int gpt_device_nonfinite_layer(const GPTDevice *g) { return g->nonfinite_layer; }

int gpt_device_first_nonfinite_block(GPTDevice *g, int *block) {
    const int L = g->cfg.num_layers;
    int32_t *flags = g->flags + L;
    for (int b = 0; b < L + 2; b++) {
        size_t off, count;
        gpt_block_range(&g->cfg, b, &off, &count);
        TRY(nonfinite(g, &flags[b], g->grads + off, count));
    }
    TRY(device_copy(g->dev, g->compute, g->host_flags + L, flags, sizeof(int32_t) * (size_t)(L + 2), COPY_DEVICE_TO_HOST));
    TRY(device_stream_sync(g->dev, g->compute));
    *block = -1;
    for (int b = L + 1; b >= 0 && *block < 0; b--) /* backward finishes the blocks from the head down */
        if (g->host_flags[L + b]) *block = b;
    return 0;
}

int gpt_device_poison_grad(GPTDevice *g, int block) {
    size_t off, count;
    gpt_block_range(&g->cfg, block, &off, &count);
    if (count == 0) return 0;
    TRY(device_copy(g->dev, g->compute, g->grads + off, &g->poison, sizeof(float), COPY_HOST_TO_DEVICE));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_num_tensors(const GPTDevice *g) { return g->nseg; }

/* Each tensor's sum over the update range, or over each piece's part of it (added). */
int gpt_device_tensor_sum_squares(GPTDevice *g, GPTDeviceArray which, double *per_tensor) {
    const bool part = which == GPT_DEVICE_GRADS ? g->grad_part : g->param_part;
    memset(per_tensor, 0, sizeof *per_tensor * (size_t)g->nseg);
    for (int k = 0; k < g->npieces; k++) {
        DeviceCall call = {.kernel = DK_SUM_OF_SQUARES,
                           .a.sumsq = {g->sums, which == GPT_DEVICE_GRADS ? g->grads : g->params,
                                       g->offsets + (size_t)(part ? 1 : k) * (size_t)(g->nseg + 1), g->nseg}};
        TRY(launch(g, &call));
        TRY(device_copy(g->dev, g->compute, g->host_part_sums, g->sums, sizeof(double) * (size_t)g->nseg, COPY_DEVICE_TO_HOST));
        TRY(device_stream_sync(g->dev, g->compute));
        for (int i = 0; i < g->nseg; i++) per_tensor[i] += g->host_part_sums[i];
    }
    for (int i = 0; i < g->nseg; i++)
        if (!g->own_pieces && !gpt_tensor_primary(&g->cfg, g->segs[i].kind)) per_tensor[i] = 0; /* another rank's copy counts */
    return 0;
}

int gpt_device_grad_sum_squares(GPTDevice *g, double *out) {
    TRY(gpt_device_tensor_sum_squares(g, GPT_DEVICE_GRADS, g->host_sums));
    double s = 0;
    for (int i = 0; i < g->nseg; i++) s += g->host_sums[i];
    *out = s;
    return 0;
}

/* The update: every tensor's part of the range in one launch; with scalars (device memory) the step's values are read from there. */
static int queue_adamw(GPTDevice *g, const AdamWStep *s, const AdamWStepScalars *scalars) {
    const int64_t r0 = (int64_t)g->range_offset; /* m and v hold the range; params and grads the layout, or their part */
    DeviceCall call = {.kernel = DK_ADAMW};
    call.a.adamw = (AdamWArgs){g->params, g->m, g->v, g->bf16 ? g->params_bf16 : NULL, g->grads, g->adamw_table, g->adamw_nsegs,
                               g->adamw_n, g->param_part ? r0 : 0, g->grad_part ? r0 : 0, r0, s->beta1, s->beta2, s->eps,
                               adamw_step_scalars(s), scalars};
    if (g->adamw_n > 0) TRY(launch(g, &call));
    return refresh_wte(g);
}

static int capture_adamw(void *model, const AdamWStep *s, const AdamWStepScalars *scalars) {
    GPTDevice *g = model;
    return queue_adamw(g, s, g->debug & GPT_DEVICE_GRAPH_STEP_BY_VALUE ? NULL : scalars);
}

int gpt_device_adamw(GPTDevice *g, const AdamWStep *s) {
    TRY(g->graphs ? step_graphs_adamw(g->graphs, g->compute, s, capture_adamw, g) : queue_adamw(g, s, NULL));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_use_acts(GPTDevice *g, int set) {
    float *acts;
    int32_t *tokens;
    TRY(gpt_device_stage_set(&g->stage, set, g->acts, g->tokens, carve_acts(g, NULL), 3 * rows(g), &acts, &tokens));
    carve_acts(g, acts);
    g->tokens = tokens;
    return 0;
}

float *gpt_device_stage_input(const GPTDevice *g) { return g->encoded; }
float *gpt_device_stage_output(const GPTDevice *g) {
    return g->layer[gpt_first_layer(&g->cfg) + gpt_stage_layers(&g->cfg) - 1].residual3;
}
float *gpt_device_stage_grad(const GPTDevice *g) { return g->dresidual; }

int gpt_device_stage_forward(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss, double *loss_sum) {
    TRY(allocate_acts(g)); /* once: made by gpt_device_set_state */
    TRY(upload_tokens(g, inputs, targets));
    TRY(forward(g, dloss));
    TRY(queue_results(g));
    return collect(g, loss_sum);
}

int gpt_device_stage_backward(GPTDevice *g) { return backward(g, PASS_FUSED); }
int gpt_device_stage_backward_input(GPTDevice *g) { return g->split ? backward(g, PASS_INPUT) : -1; }
int gpt_device_stage_backward_weight(GPTDevice *g) { return g->split ? backward(g, PASS_WEIGHT) : -1; }

float *gpt_device_head_wte(const GPTDevice *g, GPTDeviceArray which) {
    return which == GPT_DEVICE_GRADS ? g->stage.head_dwte : g->stage.head_wte;
}

int gpt_device_enable_graphs(GPTDevice *g) {
    g->graphs = step_graphs_create(g->dev, rows(g));
    return g->graphs ? 0 : -1;
}
