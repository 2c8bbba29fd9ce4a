/* lora.c: the LoRA branch forward and backward, merging, the targets
 * flag and the frozen base's hash (see lora.h). */
#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/gpt.h"
#include "core/reason.h"

static const char *const target_names[LORA_NUM_TARGETS] = {"qkv", "attproj", "fc", "fcproj"};

static uint64_t mix(uint64_t z) { return rng_mix64(z); }

void lora_row_keys(uint64_t *keys, const int32_t *tokens, int b, int t, uint64_t seed, long step) {
    const uint64_t start = mix(mix(seed) + (uint64_t)step);
    for (int s = 0; s < b; s++) {
        uint64_t h = start;
        for (int i = 0; i < t; i++) h = mix(h + (uint64_t)(uint32_t)tokens[(size_t)s * t + i]);
        for (int i = 0; i < t; i++) keys[(size_t)s * t + i] = mix(h + (uint64_t)i);
    }
}

uint64_t lora_salt(int layer, int target) {
    return mix((uint64_t)(LORA_NUM_TARGETS * layer + target + 1) * 0x9e3779b97f4a7c15ULL);
}

void lora_dropout_apply(const LoraDropout *d, float *dst, const float *src, size_t N, int IC) {
    const uint64_t threshold = (uint64_t)llround((double)d->p * 16777216.0);
    const float keep = 1.0f / (1.0f - d->p);
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        const uint64_t row = mix(d->row_key[n] ^ d->salt);
        for (int c = 0; c < IC; c++) {
            const bool kept = mix(row + (uint64_t)(d->column_offset + c)) >> 40 >= threshold;
            dst[n * IC + c] = kept ? src[n * IC + c] * keep : 0.0f;
        }
    }
}

/* The branch's input: inp itself, or with its dropout mask applied into s.dropped. */
static const float *branch_input(const LoraBranch *b, LoraScratch s, const float *inp, size_t N, int IC) {
    if (b->dropout.p <= 0) return inp;
    lora_dropout_apply(&b->dropout, s.dropped, inp, N, IC);
    return s.dropped;
}

void lora_forward(const LoraBranch *b, float *out, float *u, LoraScratch s, const float *inp, size_t N, int IC,
                  int OC) {
    const size_t nu = N * (size_t)b->rank, nout = N * (size_t)OC;
    float *tmp = s.tmp;
    matmul_forward(u, branch_input(b, s, inp, N, IC), b->A, NULL, N, IC, b->rank);
    for (size_t i = 0; i < nu; i++) u[i] *= b->scale;
    if (b->row_parallel && b->tp) comm_allreduce(b->tp, u, nu); /* each rank held a partial sum of x A^T */
    if (b->row_parallel && !b->lead) return; /* B u is replicated: rank 0 adds it, the layer's all-reduce spreads it */
    matmul_forward(tmp, u, b->B, NULL, N, b->rank, OC);
    for (size_t i = 0; i < nout; i++) out[i] += tmp[i];
}

void lora_backward(const LoraBranch *b, float *dinp, const float *dout, const float *u, const float *inp,
                   LoraScratch s, size_t N, int IC, int OC) {
    const size_t nu = N * (size_t)b->rank, nin = N * (size_t)IC;
    float *du = s.du, *tmp = s.tmp;
    matmul_backward(du, b->dB, NULL, dout, u, b->B, N, b->rank, OC);
    for (size_t i = 0; i < nu; i++) du[i] *= b->scale;
    matmul_backward(tmp, NULL, NULL, du, NULL, b->A, N, IC, b->rank);
    if (b->dropout.p > 0) lora_dropout_apply(&b->dropout, tmp, tmp, N, IC); /* through the same mask */
    for (size_t i = 0; i < nin; i++) dinp[i] += tmp[i];
    /* column-parallel: du was this rank's share (B split by rows); dA needs all of it */
    if (!b->row_parallel && b->tp) comm_allreduce(b->tp, du, nu);
    matmul_backward(NULL, b->dA, NULL, du, branch_input(b, s, inp, N, IC), NULL, N, IC, b->rank);
}

void lora_merge(float *W, const float *A, const float *B, int rank, float scale, int IC, int OC) {
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < rank; k++) {
            const float s = scale * B[(size_t)o * rank + k];
            const float *a = A + (size_t)k * IC;
            float *w = W + (size_t)o * IC;
            for (int i = 0; i < IC; i++) w[i] += s * a[i];
        }
}

void gpt_merge_adapters(GPT *model) {
    const GPTConfig *cfg = &model->cfg;
    const int C = cfg->channels, widths[LORA_NUM_TARGETS][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    for (int l = 0; l < gpt_stage_layers(cfg); l++) {
        size_t off, count;
        gpt_block_range(cfg, gpt_first_layer(cfg) + l + 1, &off, &count);
        LayerTensors t = gpt_layer_tensors(cfg, model->params + off, gpt_first_layer(cfg) + l);
        float *weights[LORA_NUM_TARGETS] = {t.qkvw, t.attprojw, t.fcw, t.fcprojw};
        for (int k = 0; k < LORA_NUM_TARGETS; k++)
            if (t.lora_a[k])
                lora_merge(weights[k], t.lora_a[k], t.lora_b[k], cfg->lora_rank, model->lora_scale, widths[k][0],
                           widths[k][1]);
    }
}

bool lora_parse_targets(const char *text, int *mask, char *why, size_t why_size) {
    *mask = 0;
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf) {
        return bs_reason(why, why_size, "lora_targets", "the list of adapted layers is too long");
    }
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = strcmp(tok, "all") == 0 ? (1 << LORA_NUM_TARGETS) - 1 : 0;
        for (int t = 0; t < LORA_NUM_TARGETS && !found; t++)
            if (strcmp(tok, target_names[t]) == 0) found = 1 << t;
        if (!found) {
            return bs_reason(why, why_size, "lora_targets",
                             "unknown adapted layer '%s' (qkv, attproj, fc, fcproj or all)", tok);
        }
        *mask |= found;
    }
    if (*mask == 0) {
        return bs_reason(why, why_size, "lora_targets", "the adapted layers name no layer (qkv, attproj, fc, fcproj or all)");
    }
    return true;
}

const char *lora_targets_text(int mask) {
    static const char *const text[1 << LORA_NUM_TARGETS] = {
        "", "qkv", "attproj", "qkv,attproj", "fc", "qkv,fc", "attproj,fc", "qkv,attproj,fc", "fcproj", "qkv,fcproj",
        "attproj,fcproj", "qkv,attproj,fcproj", "fc,fcproj", "qkv,fc,fcproj", "attproj,fc,fcproj",
        "qkv,attproj,fc,fcproj"}; /* by mask, in target order */
    return text[mask & ((1 << LORA_NUM_TARGETS) - 1)];
}

void lora_format_targets(int mask, char *out, size_t size) { snprintf(out, size, "%s", lora_targets_text(mask)); }
