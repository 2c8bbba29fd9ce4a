/* lora.c: the LoRA branch forward and backward, merging, and the targets
 * flag (see lora.h). */
#include "model/lora.h"

#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/gpt.h"

static const char *const target_names[LORA_NUM_TARGETS] = {"qkv", "attproj", "fc", "fcproj"};

void lora_forward(const LoraBranch *b, float *out, float *u, float *tmp, const float *inp, size_t N, int IC, int OC) {
    const size_t nu = N * (size_t)b->rank, nout = N * (size_t)OC;
    matmul_forward(u, inp, b->A, NULL, N, IC, b->rank);
    for (size_t i = 0; i < nu; i++) u[i] *= b->scale;
    if (b->row_parallel && b->tp) comm_allreduce(b->tp, u, nu); /* each rank held a partial sum of x A^T */
    if (b->row_parallel && !b->lead) return; /* B u is replicated: rank 0 adds it, the layer's all-reduce spreads it */
    matmul_forward(tmp, u, b->B, NULL, N, b->rank, OC);
    for (size_t i = 0; i < nout; i++) out[i] += tmp[i];
}

void lora_backward(const LoraBranch *b, float *dinp, const float *dout, const float *u, const float *inp, float *du,
                   float *tmp, size_t N, int IC, int OC) {
    const size_t nu = N * (size_t)b->rank, nin = N * (size_t)IC;
    matmul_backward(du, b->dB, NULL, dout, u, b->B, N, b->rank, OC);
    for (size_t i = 0; i < nu; i++) du[i] *= b->scale;
    matmul_backward(tmp, NULL, NULL, du, NULL, b->A, N, IC, b->rank);
    for (size_t i = 0; i < nin; i++) dinp[i] += tmp[i];
    /* column-parallel: du was this rank's share (B split by rows); dA needs all of it */
    if (!b->row_parallel && b->tp) comm_allreduce(b->tp, du, nu);
    matmul_backward(NULL, b->dA, NULL, du, inp, NULL, N, IC, b->rank);
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
        LayerTensors t = gpt_layer_tensors(cfg, model->params + off);
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
        snprintf(why, why_size, "--lora-targets is too long");
        return false;
    }
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = strcmp(tok, "all") == 0 ? (1 << LORA_NUM_TARGETS) - 1 : 0;
        for (int t = 0; t < LORA_NUM_TARGETS && !found; t++)
            if (strcmp(tok, target_names[t]) == 0) found = 1 << t;
        if (!found) {
            snprintf(why, why_size, "--lora-targets: unknown target '%s' (qkv, attproj, fc, fcproj or all)", tok);
            return false;
        }
        *mask |= found;
    }
    if (*mask == 0) {
        snprintf(why, why_size, "--lora-targets names no layer (qkv, attproj, fc, fcproj or all)");
        return false;
    }
    return true;
}

void lora_format_targets(int mask, char *out, size_t size) {
    size_t n = 0;
    out[0] = '\0';
    for (int t = 0; t < LORA_NUM_TARGETS; t++)
        if (mask >> t & 1) n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", n ? "," : "", target_names[t]);
}
