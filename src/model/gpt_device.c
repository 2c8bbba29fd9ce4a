/* gpt_device.c: the GPT-2 step on a device (gpt_device.h), op for op as
 * gpt.c runs it on the CPU (the same buffers' roles, the same accumulation
 * into the residual's gradient), each op one launch on the compute stream. */
#include "model/gpt_device.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/adamw_table.h"
#include "device/flash_math.h"
#include "model/acts_bf16_device.h"
#include "model/classifier_device.h"
#include "model/fp8_device.h"
#include "model/gpt_device_stage.h"

#define TRY(x)                                                                                                        \
    do {                                                                                                              \
        if ((x) != 0) return -1;                                                                                      \
    } while (0)

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
} DeviceLayerActs;

struct GPTDevice {
    Device *dev;
    DeviceStream *compute, *copy;
    DeviceEvent *tokens_ready;
    GPTConfig cfg;
    int B, T, debug, nseg;
    bool fused_attention; /* DK_FLASH_* (the default), or the unfused kernels keeping P */
    size_t nparams;
    float *params, *grads, *m, *v, *acts;
    int32_t *tokens; /* inputs (B T), targets (B T), each token's document start (B T) */
    int32_t doc_separator, *host_doc_start;
    double *sums;    /* per tensor */
    int64_t *offsets; /* where each tensor starts, then the end (nseg + 1), clipped to the update range */
    size_t range_offset, range_count; /* gpt_device_set_update_range: what AdamW updates (default: all) */
    ParamSegment *segs;
    AdamWSegment *adamw_tensors, *adamw_table; /* the layout's trained tensors (host); those in the range (device) */
    int adamw_nsegs;
    size_t adamw_n; /* the parameters AdamW updates: one launch over adamw_table */
    int32_t *flags;  /* non-finite flags: one per layer (forward), then one per block (gradients) */
    float *host_losses;
    double *host_sums;
    int32_t *host_flags;
    float poison;    /* NaN: the host source of gpt_device_poison_grad's copy */
    bool bf16;               /* gpt_device_enable_bf16 */
    uint16_t *params_bf16;   /* bf16: every parameter's bf16 copy, at the layout's offsets */
    uint16_t *in_bf16, *dout_bf16; /* bf16: a product's input and output gradient as bf16 operands */
    float *wte_rounded;      /* bf16: wte rounded to bf16 (the encoder reads it, as gpt.c's bf16 copy) */
    Fp8Device *fp8;          /* gpt_device_enable_fp8 (NULL: off) */
    ActsBf16 *acts_bf16;     /* gpt_device_enable_bf16_activations (NULL: the activations kept in fp32) */
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
    const size_t N = (size_t)g->B * g->T, C = (size_t)g->cfg.channels;
    const size_t att = (size_t)g->B * g->cfg.num_heads * g->T * (g->fused_attention ? 1 : g->T); /* fused: each row's lse */
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
        a->ln1 = take(&c, N * C), a->ln1_mean = take(&c, N), a->ln1_rstd = take(&c, N), a->qkv = take(&c, 3 * N * C);
        a->atty = take(&c, N * C), a->att = take(&c, att), a->residual2 = take(&c, N * C), a->ln2 = take(&c, N * C);
        a->ln2_mean = take(&c, N), a->ln2_rstd = take(&c, N), a->fch = take(&c, 4 * N * C);
        a->fch_gelu = take(&c, 4 * N * C), a->residual3 = take(&c, N * C);
    }
    g->encoded = take(&c, N * C), g->proj_out = take(&c, N * C), g->lnf = take(&c, N * C);
    g->lnf_mean = take(&c, N), g->lnf_rstd = take(&c, N), g->logits = take(&c, classifier_rows(g) * g->cfg.padded_vocab_size);
    g->losses = take(&c, N), g->dresidual = take(&c, N * C), g->dln = take(&c, N * C), g->datty = take(&c, N * C);
    g->dqkv = take(&c, 3 * N * C), g->dfch = take(&c, 4 * N * C), g->scratch = take(&c, g->fused_attention ? 0 : att);
    return (size_t)(c - base);
}

static const char *unsupported(const GPTConfig *cfg) {
    if (gpt_tp_size(cfg) > 1 || gpt_cp_size(cfg) > 1)
        return "a device runs the whole model or a pipeline stage for now (no tensor or context parallelism)";
    if (gpt_is_moe(cfg)) return "a device runs dense models for now (no MoE)";
    if (cfg->lora_rank > 0) return "a device does not train LoRA adapters yet";
    if (cfg->recompute == GPT_RECOMPUTE_SELECTIVE && cfg->channels / cfg->num_heads > FLASH_MAX_HEAD)
        return "selective recomputation on a device is the fused attention's, and this model's heads are too wide for it";
    return NULL;
}

static size_t clamp(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

int gpt_device_set_update_range(GPTDevice *g, size_t offset, size_t count) {
    g->range_offset = offset;
    g->range_count = count;
    int64_t *off = malloc(sizeof *off * (size_t)(g->nseg + 1));
    if (!off) return -1;
    AdamWSegment *table = calloc((size_t)g->nseg + 1, sizeof *table);
    if (!table) return free(off), -1;
    for (int i = 0; i <= g->nseg; i++) {
        const size_t at = i < g->nseg ? g->segs[i].offset : g->nseg ? g->segs[i - 1].offset + g->segs[i - 1].count : 0;
        off[i] = (int64_t)clamp(at, offset, offset + count);
    }
    g->adamw_n = adamw_table_clip(g->adamw_tensors, g->nseg, offset, offset + count, table, &g->adamw_nsegs);
    int rc = device_copy(g->dev, g->compute, g->offsets, off, sizeof *off * (size_t)(g->nseg + 1), COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_copy(g->dev, g->compute, g->adamw_table, table, sizeof *table * (size_t)(g->nseg + 1), COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_stream_sync(g->dev, g->compute);
    free(off);
    free(table);
    return rc;
}

/* The layout's tensors, on the host and (their offsets, the whole range's) on the device. */
static int make_segments(GPTDevice *g) {
    g->segs = malloc(sizeof *g->segs * (size_t)gpt_max_segments(&g->cfg));
    if (!g->segs) return -1;
    g->nseg = gpt_param_segments(&g->cfg, g->segs, gpt_max_segments(&g->cfg));
    g->host_sums = malloc(sizeof *g->host_sums * (size_t)g->nseg);
    g->sums = device_alloc(g->dev, sizeof *g->sums * (size_t)g->nseg);
    g->offsets = device_alloc(g->dev, sizeof *g->offsets * (size_t)(g->nseg + 1));
    g->adamw_tensors = malloc(sizeof *g->adamw_tensors * (size_t)(g->nseg + 1));
    g->adamw_table = device_alloc(g->dev, sizeof *g->adamw_table * (size_t)(g->nseg + 1));
    if (!g->host_sums || !g->sums || !g->offsets || !g->adamw_tensors || !g->adamw_table) return -1;
    for (int i = 0; i < g->nseg; i++) /* wte's padded rows are not trained */
        g->adamw_tensors[i] = (AdamWSegment){(int64_t)g->segs[i].offset, 0, (int64_t)gpt_tensor_trained(&g->cfg, g->segs[i].kind),
                                             gpt_tensor_decays(g->segs[i].kind)};
    return gpt_device_set_update_range(g, 0, g->nparams);
}

/* a flag per layer, then one per block (L + 2) */
static int num_flags(const GPTDevice *g) { return 2 * g->cfg.num_layers + 2; }

static int allocate(GPTDevice *g) {
    const size_t bytes = g->nparams * sizeof(float), N = (size_t)g->B * g->T;
    g->layer = calloc((size_t)g->cfg.num_layers, sizeof *g->layer);
    g->host_losses = malloc(sizeof(float) * N);
    g->host_doc_start = malloc(sizeof(int32_t) * N);
    g->host_flags = malloc(sizeof(int32_t) * (size_t)num_flags(g));
    if (!g->layer || !g->host_losses || !g->host_doc_start || !g->host_flags) return -1;
    g->compute = device_stream_create(g->dev);
    g->copy = device_stream_create(g->dev);
    g->tokens_ready = device_event_create(g->dev);
    if (!g->compute || !g->copy || !g->tokens_ready) return -1;
    float **state[] = {&g->params, &g->grads, &g->m, &g->v};
    for (int i = 0; i < 4; i++)
        if (!(*state[i] = device_alloc(g->dev, bytes))) return -1;
    if (!(g->tokens = device_alloc(g->dev, sizeof(int32_t) * 3 * N))) return -1;
    if (!(g->flags = device_alloc(g->dev, sizeof(int32_t) * (size_t)num_flags(g)))) return -1;
    g->stage.dev = g->dev;
    if (gpt_device_stage_open(&g->stage) != 0) return -1;
    if (gpt_has_head(&g->cfg) && !gpt_has_embeddings(&g->cfg) &&
        gpt_device_stage_open_head(&g->stage, g->dev, gpt_tensor_numel(&g->cfg, TK_WTE)) != 0)
        return -1;
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
                     .fused_attention = cfg->channels / cfg->num_heads <= FLASH_MAX_HEAD};
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
                           g->offsets, g->adamw_table, g->flags, g->params_bf16, g->in_bf16, g->dout_bf16, g->wte_rounded};
    for (size_t i = 0; i < sizeof dev_buffers / sizeof dev_buffers[0]; i++) device_free(g->dev, dev_buffers[i]);
    acts_bf16_free(g->acts_bf16);
    fp8_device_free(g->fp8);
    device_event_destroy(g->dev, g->tokens_ready);
    device_stream_destroy(g->dev, g->copy);
    device_stream_destroy(g->dev, g->compute);
    free(g->layer);
    free(g->segs);
    free(g->adamw_tensors);
    free(g->host_losses);
    free(g->host_doc_start);
    free(g->host_sums);
    free(g->host_flags);
    free(g);
}

static int round_bf16(GPTDevice *g, float *out, uint16_t *out_bf16, const float *inp, size_t n) {
    DeviceCall call = {.kernel = DK_BF16_ROUND, .a.round = {out, out_bf16, inp, n}};
    return device_launch(g->dev, g->compute, &call);
}

static float *tensor(const GPTDevice *g, float *base, TensorKind k) { return base + gpt_tensor_offset(&g->cfg, k, 0); }

/* bf16: the encoder's wte, rounded as the products' */
static int refresh_wte(GPTDevice *g) {
    return g->bf16 ? round_bf16(g, g->wte_rounded, NULL, tensor(g, g->params, TK_WTE), gpt_tensor_numel(&g->cfg, TK_WTE)) : 0;
}

int gpt_device_enable_bf16(GPTDevice *g) {
    const size_t N = rows(g), C = (size_t)g->cfg.channels, Vp = (size_t)g->cfg.padded_vocab_size;
    g->bf16 = true;
    g->params_bf16 = device_alloc(g->dev, sizeof(uint16_t) * g->nparams);
    g->in_bf16 = device_alloc(g->dev, sizeof(uint16_t) * N * 4 * C);                  /* the largest input: fch_gelu */
    g->dout_bf16 = device_alloc(g->dev, sizeof(uint16_t) * N * (Vp > 4 * C ? Vp : 4 * C)); /* the logits' or fc's */
    g->wte_rounded = device_alloc(g->dev, sizeof(float) * gpt_tensor_numel(&g->cfg, TK_WTE));
    return g->params_bf16 && g->in_bf16 && g->dout_bf16 && g->wte_rounded ? 0 : -1;
}

int gpt_device_enable_fp8(GPTDevice *g, Fp8State *fp8) {
    g->fp8 = fp8_device_create(g->dev, fp8, g->bf16 ? rows(g) * 4 * (size_t)g->cfg.channels : 0); /* fc's dout */
    return g->fp8 ? 0 : -1;
}

int gpt_device_fp8_begin_step(GPTDevice *g) { return g->fp8 ? fp8_device_begin_step(g->fp8, g->compute) : 0; }
int gpt_device_fp8_end_step(GPTDevice *g) { return g->fp8 ? fp8_device_end_step(g->fp8, g->compute) : 0; }

/* The parameters' bf16 copies after the fp32 masters changed on the device. */
static int refresh_copies(GPTDevice *g) {
    if (g->bf16) TRY(round_bf16(g, NULL, g->params_bf16, g->params, g->nparams));
    return refresh_wte(g);
}

int gpt_device_set_state(GPTDevice *g, const float *params, const float *m, const float *v) {
    TRY(allocate_acts(g));
    const size_t whole = g->nparams * sizeof(float), part = g->range_count * sizeof(float);
    const float *src[] = {params, m, v};
    float *dst[] = {g->params, g->m + g->range_offset, g->v + g->range_offset};
    for (int i = 0; i < 3; i++) {
        const size_t bytes = i ? part : whole;
        TRY(src[i] ? device_copy(g->dev, g->compute, dst[i], src[i], bytes, COPY_HOST_TO_DEVICE)
                   : device_zero(g->dev, g->compute, dst[i], bytes));
    }
    TRY(refresh_copies(g));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_get_state(GPTDevice *g, float *params, float *grads, float *m, float *v) {
    const size_t whole = g->nparams * sizeof(float), part = g->range_count * sizeof(float), at = g->range_offset;
    float *dst[] = {params, grads, m, v};
    const float *src[] = {g->params, g->grads + at, g->m + at, g->v + at};
    for (int i = 0; i < 4; i++)
        if (dst[i]) TRY(device_copy(g->dev, g->compute, dst[i], src[i], i ? part : whole, COPY_DEVICE_TO_HOST));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_params_changed(GPTDevice *g) {
    TRY(refresh_copies(g));
    return device_stream_sync(g->dev, g->compute);
}

DeviceStream *gpt_device_compute_stream(const GPTDevice *g) { return g->compute; }

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
    if (!g->bf16 || g->fp8 || g->cfg.recompute == GPT_RECOMPUTE_FULL) {
        snprintf(reason, reason_size, "bf16 activations need bf16 products (not fp32 or FP8) and no full recomputation");
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

int gpt_device_zero_grads(GPTDevice *g) {
    if (g->debug & GPT_DEVICE_SKIP_GRAD_ZERO) return 0;
    const size_t wte_bytes = gpt_tensor_numel(&g->cfg, TK_WTE) * sizeof(float);
    if (g->stage.head_dwte) TRY(device_zero(g->dev, g->compute, g->stage.head_dwte, wte_bytes)); /* the head's copy's */
    return device_zero(g->dev, g->compute, g->grads, g->nparams * sizeof(float));
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
    a->weight_bf16 = g->params_bf16 + (a->weight - g->params);
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
    if (g->fp8) return fp8_device_linear(g->fp8, g->compute, k, FP8_LINEARS_PER_LAYER * l + which, &a);
    return product(g, k, a);
}

static int elementwise(GPTDevice *g, DeviceKernel k, float *out, const float *a, const float *b, size_t n) {
    DeviceCall call = {.kernel = k, .a.elementwise = {out, a, b, n}};
    return launch(g, &call);
}

/* Each token's document start on the device, NULL without documents. */
static const int32_t *doc_starts(const GPTDevice *g) { return g->doc_separator >= 0 ? g->tokens + 2 * rows(g) : NULL; }

static int attention(GPTDevice *g, DeviceKernel k, const DeviceLayerActs *a) {
    DeviceCall call = {.kernel = k};
    if (g->fused_attention) { /* att holds each row's log-sum-exp */
        call.kernel = k == DK_ATTENTION_FORWARD ? DK_FLASH_FORWARD : DK_FLASH_BACKWARD;
        call.a.flash = flash_self_attention(a->atty, a->att, g->dqkv, a->qkv, g->datty, doc_starts(g), g->B, g->T,
                                            g->cfg.channels, g->cfg.num_heads);
        return launch(g, &call);
    }
    call.a.attention = (AttentionArgs){a->atty, a->att, g->dqkv, g->scratch, a->qkv, g->datty, doc_starts(g),
                                       g->B, g->T, g->cfg.channels, g->cfg.num_heads};
    return launch(g, &call);
}

static LayerTensors layer_tensors(const GPTDevice *g, float *base, int l) {
    return gpt_layer_tensors(&g->cfg, base + gpt_tensor_offset(&g->cfg, TK_LN1W, l), l);
}

static int nonfinite(GPTDevice *g, int32_t *flag, const float *x, size_t n) {
    DeviceCall call = {.kernel = DK_NONFINITE, .a.nonfinite = {flag, x, n}};
    return launch(g, &call);
}

/* --activations bf16: x's bf16 bits (layer's activation k) kept for its products and backward. */
static int keep(GPTDevice *g, int layer, ActKind k, const float *x) {
    return g->acts_bf16 ? acts_bf16_keep(g->acts_bf16, g->compute, layer, k, x) : 0;
}

/* The layernorm at the input of layer l (l = L: the final one), reading inp. */
static LayernormArgs input_norm(const GPTDevice *g, int l, const float *inp) {
    if (l == g->cfg.num_layers) {
        const float *lnf = tensor(g, g->params, TK_LNFW);
        return (LayernormArgs){.out = g->lnf, .mean = g->lnf_mean, .rstd = g->lnf_rstd, .inp = inp, .weight = lnf,
                               .bias = lnf + g->cfg.channels};
    }
    const LayerTensors p = layer_tensors(g, g->params, l);
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

/* One layer's forward from residual (N,C) to a->residual3, as gpt_forward. normed: its first layernorm
 * ran already (the previous layer's fused residual); fuse_next: the next layernorm (layer l + 1's or the
 * final one) fused with the last residual add. */
static int layer_forward(GPTDevice *g, int l, const float *residual, bool normed, bool fuse_next) {
    const int C = g->cfg.channels;
    const LayerTensors p = layer_tensors(g, g->params, l);
    const DeviceLayerActs *a = &g->layer[l];
    if (!normed) TRY(layernorm(g, DK_LAYERNORM_FORWARD, input_norm(g, l, residual)));
    TRY(keep(g, l, ACT_LN1, a->ln1));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_QKV, (MatmulArgs){.out = a->qkv, .inp = a->ln1, .weight = p.qkvw, .bias = p.qkvb}, C, 3 * C));
    TRY(attention(g, DK_ATTENTION_FORWARD, a));
    TRY(keep(g, l, ACT_ATTY, a->atty));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_ATTPROJ, (MatmulArgs){.out = g->proj_out, .inp = a->atty, .weight = p.attprojw, .bias = p.attprojb}, C, C));
    const LayernormArgs ln2 = {.out = a->ln2, .mean = a->ln2_mean, .rstd = a->ln2_rstd, .weight = p.ln2w, .bias = p.ln2b};
    TRY(residual_norm(g, a->residual2, residual, g->proj_out, &ln2));
    TRY(keep(g, l, ACT_LN2, a->ln2));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_FC, (MatmulArgs){.out = a->fch_gelu, .pre_gelu = a->fch, .inp = a->ln2, .weight = p.fcw,
                                                  .bias = p.fcb}, C, 4 * C)); /* the GELU epilogue */
    TRY(keep(g, l, ACT_FCH_GELU, a->fch_gelu));
    TRY(linear(g, DK_MATMUL_FORWARD, l, LINEAR_FCPROJ, (MatmulArgs){.out = g->proj_out, .inp = a->fch_gelu, .weight = p.fcprojw, .bias = p.fcprojb}, 4 * C, C));
    const LayernormArgs next = input_norm(g, l + 1, a->residual3);
    TRY(residual_norm(g, a->residual3, a->residual2, g->proj_out, fuse_next ? &next : NULL));
    return nonfinite(g, &g->flags[l], a->residual3, rows(g) * (size_t)C); /* the guard's: gpt.c checks each layer's output */
}

/* One layer's backward: g->dresidual from its output's gradient to its input's, as gpt.c's layer_pass. */
static int layer_backward(GPTDevice *g, int l, const float *inp) {
    const int C = g->cfg.channels;
    const LayerTensors p = layer_tensors(g, g->params, l), d = layer_tensors(g, g->grads, l);
    const DeviceLayerActs *a = &g->layer[l];
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FCPROJ, (MatmulArgs){.dinp = g->dfch, .dweight = d.fcprojw, .dbias = d.fcprojb, .dout = g->dresidual,
                                                   .inp = a->fch_gelu, .weight = p.fcprojw}, 4 * C, C));
    TRY(elementwise(g, DK_GELU_BACKWARD, g->dfch, a->fch, g->dfch, 4 * rows(g) * (size_t)C));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_FC, (MatmulArgs){.dinp = g->dln, .dweight = d.fcw, .dbias = d.fcb, .dout = g->dfch,
                                                   .inp = a->ln2, .weight = p.fcw}, C, 4 * C));
    TRY(layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = g->dresidual, .dweight = d.ln2w, .dbias = d.ln2b, .dout = g->dln,
                                                             .inp = a->residual2, .weight = p.ln2w, .mean = a->ln2_mean, .rstd = a->ln2_rstd}));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_ATTPROJ, (MatmulArgs){.dinp = g->datty, .dweight = d.attprojw, .dbias = d.attprojb, .dout = g->dresidual,
                                                   .inp = a->atty, .weight = p.attprojw}, C, C));
    TRY(attention(g, DK_ATTENTION_BACKWARD, a));
    TRY(linear(g, DK_MATMUL_BACKWARD, l, LINEAR_QKV, (MatmulArgs){.dinp = g->dln, .dweight = d.qkvw, .dbias = d.qkvb, .dout = g->dqkv,
                                                   .inp = a->ln1, .weight = p.qkvw}, C, 3 * C));
    return layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = g->dresidual, .dweight = d.ln1w, .dbias = d.ln1b, .dout = g->dln,
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

/* The tokens in on the copy stream; the compute stream waits for them. */
static int upload_tokens(GPTDevice *g, const int32_t *inputs, const int32_t *targets) {
    const size_t bytes = rows(g) * sizeof(int32_t);
    TRY(gpt_device_stage_tokens_wait(&g->stage, g->compute, g->copy)); /* a set's tokens read by a backward still queued */
    TRY(device_copy(g->dev, g->copy, g->tokens, inputs, bytes, COPY_HOST_TO_DEVICE));
    TRY(device_copy(g->dev, g->copy, g->tokens + rows(g), targets, bytes, COPY_HOST_TO_DEVICE));
    if (g->doc_separator >= 0) {
        document_starts(g, inputs);
        TRY(device_copy(g->dev, g->copy, g->tokens + 2 * rows(g), g->host_doc_start, bytes, COPY_HOST_TO_DEVICE));
    }
    TRY(device_event_record(g->dev, g->copy, g->tokens_ready));
    return g->debug & GPT_DEVICE_SKIP_TOKEN_WAIT ? 0 : device_stream_wait(g->dev, g->compute, g->tokens_ready);
}

/* A pipeline stage runs its layers [first, last]; without the encoder its
 * input is g->encoded (the previous stage's output, received there), without
 * the head its output stays in layer[last].residual3. */
static int forward(GPTDevice *g, float dloss) {
    const GPTConfig *cfg = &g->cfg;
    const int C = cfg->channels, first = gpt_first_layer(cfg), last = first + gpt_stage_layers(cfg) - 1;
    DeviceCall enc = {.kernel = DK_ENCODER_FORWARD};
    enc.a.encoder = (EncoderArgs){.out = g->encoded, .wte = g->bf16 ? g->wte_rounded : tensor(g, g->params, TK_WTE),
                                  .wpe = tensor(g, g->params, TK_WPE),
                                  .tokens = g->tokens, .doc_start = doc_starts(g), .B = g->B, .T = g->T, .C = C,
                                  .V = cfg->vocab_size};
    if (gpt_has_encoder(cfg)) TRY(launch(g, &enc));
    const bool has_head = gpt_has_head(cfg);
    /* each layer's last residual add fused with the next layernorm: the next layer's of this stage, or the final one */
    for (int l = first; l <= last; l++)
        TRY(layer_forward(g, l, l > first ? g->layer[l - 1].residual3 : g->encoded, false, l < last || has_head));
    if (!has_head) return 0;
    /* the loss and, training, the gradients into lnf (g->dln) and wte (the last stage's copy: head_wte), a block of rows at a time */
    const bool copy = g->stage.head_wte != NULL;
    ClassifierArgs head = {g->losses, g->dln, copy ? g->stage.head_dwte : tensor(g, g->grads, TK_WTE), g->logits, g->lnf,
                           copy ? g->stage.head_wte : tensor(g, g->params, TK_WTE),
                           g->tokens + rows(g), (int)rows(g), C, cfg->vocab_size, cfg->padded_vocab_size,
                           (int)classifier_rows(g), dloss};
    return classifier_device(g->dev, g->compute, &head, classifier_product, g);
}

/* --activations bf16: what layer l's fp32 kernels read of the store widened (the attention's output;
 * the products read the bits). */
static int restore_layer(GPTDevice *g, int l) {
    float *const dst[ACT_KINDS] = {[ACT_ATTY] = g->layer[l].atty};
    return acts_bf16_restore(g->acts_bf16, g->compute, l, dst);
}

/* Without the head g->dresidual holds the output's gradient (from the next
 * stage); without the encoder it is left holding the input's. */
static int backward(GPTDevice *g) {
    const GPTConfig *cfg = &g->cfg;
    const int C = cfg->channels, first = gpt_first_layer(cfg), last = first + gpt_stage_layers(cfg) - 1;
    float *dwte = tensor(g, g->grads, TK_WTE), *lnf = tensor(g, g->params, TK_LNFW), *dlnf = tensor(g, g->grads, TK_LNFW);
    if (gpt_has_head(cfg)) {
        TRY(device_zero(g->dev, g->compute, g->dresidual, rows(g) * (size_t)C * sizeof(float)));
        TRY(layernorm(g, DK_LAYERNORM_BACKWARD, (LayernormArgs){.dinp = g->dresidual, .dweight = dlnf, .dbias = dlnf + C, .dout = g->dln,
                                                                 .inp = g->layer[last].residual3, .weight = lnf, .mean = g->lnf_mean, .rstd = g->lnf_rstd}));
    }
    for (int l = last; l >= first; l--) {
        const float *inp = l > first ? g->layer[l - 1].residual3 : g->encoded;
        if (cfg->recompute == GPT_RECOMPUTE_FULL) TRY(layer_forward(g, l, inp, false, false)); /* the same launches: the same bits */
        if (g->acts_bf16) TRY(restore_layer(g, l));
        TRY(layer_backward(g, l, inp));
    }
    if (!gpt_has_encoder(cfg)) return 0;
    DeviceCall enc = {.kernel = DK_ENCODER_BACKWARD};
    enc.a.encoder = (EncoderArgs){.dwte = dwte, .dwpe = tensor(g, g->grads, TK_WPE), .dout = g->dresidual, .tokens = g->tokens,
                                  .doc_start = doc_starts(g), .B = g->B, .T = g->T, .C = C, .V = cfg->vocab_size};
    return launch(g, &enc);
}

/* The losses (the head's) and the stage's layers' non-finite flags of the work queued, to the host. */
static int collect(GPTDevice *g, double *loss_sum) {
    const bool head = gpt_has_head(&g->cfg);
    const int first = gpt_first_layer(&g->cfg);
    if (head) TRY(device_copy(g->dev, g->compute, g->host_losses, g->losses, rows(g) * sizeof(float), COPY_DEVICE_TO_HOST));
    TRY(device_copy(g->dev, g->compute, g->host_flags, g->flags, sizeof(int32_t) * (size_t)g->cfg.num_layers,
                    COPY_DEVICE_TO_HOST));
    TRY(device_stream_sync(g->dev, g->compute));
    double sum = 0;
    for (size_t i = 0; head && i < rows(g); i++) sum += g->host_losses[i];
    *loss_sum = sum;
    g->nonfinite_layer = -1;
    for (int l = first + gpt_stage_layers(&g->cfg) - 1; l >= first; l--)
        if (g->host_flags[l]) g->nonfinite_layer = l;
    return 0;
}

int gpt_device_step(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss, double *loss_sum) {
    TRY(allocate_acts(g)); /* once: made by gpt_device_set_state */
    TRY(upload_tokens(g, inputs, targets));
    TRY(forward(g, dloss));
    if (dloss != 0) TRY(backward(g));
    return collect(g, loss_sum);
}

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

int gpt_device_tensor_sum_squares(GPTDevice *g, GPTDeviceArray which, double *per_tensor) {
    DeviceCall call = {.kernel = DK_SUM_OF_SQUARES,
                       .a.sumsq = {g->sums, which == GPT_DEVICE_GRADS ? g->grads : g->params, g->offsets, g->nseg}};
    TRY(launch(g, &call));
    TRY(device_copy(g->dev, g->compute, per_tensor, g->sums, sizeof(double) * (size_t)g->nseg, COPY_DEVICE_TO_HOST));
    return device_stream_sync(g->dev, g->compute);
}

int gpt_device_grad_sum_squares(GPTDevice *g, double *out) {
    TRY(gpt_device_tensor_sum_squares(g, GPT_DEVICE_GRADS, g->host_sums));
    double s = 0;
    for (int i = 0; i < g->nseg; i++) s += g->host_sums[i];
    *out = s;
    return 0;
}

int gpt_device_adamw(GPTDevice *g, const AdamWStep *s) {
    DeviceCall call = {.kernel = DK_ADAMW}; /* every tensor's part of the range in one launch */
    call.a.adamw = (AdamWArgs){g->params, g->m, g->v, g->bf16 ? g->params_bf16 : NULL, g->grads, g->adamw_table,
                               g->adamw_nsegs, g->adamw_n, s->beta1, s->beta2, s->eps, s->grad_scale,
                               s->lr / (1.0f - powf(s->beta1, (float)s->step)),
                               {1.0f - s->lr * 0.0f, 1.0f - s->lr * s->weight_decay}, /* as the tensors' own launches */
                               sqrtf(1.0f - powf(s->beta2, (float)s->step))};
    if (g->adamw_n > 0) TRY(launch(g, &call));
    TRY(refresh_wte(g));
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
    return collect(g, loss_sum);
}

int gpt_device_stage_backward(GPTDevice *g) { return backward(g); }

float *gpt_device_head_wte(const GPTDevice *g, GPTDeviceArray which) {
    return which == GPT_DEVICE_GRADS ? g->stage.head_dwte : g->stage.head_wte;
}
