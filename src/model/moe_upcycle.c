/* moe_upcycle.c: an MoE model from a dense one (see moe_upcycle.h). */
#include "model/moe_upcycle.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rng.h"

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* dst = src + noise x rms(src) x N(0, 1) per element (noise 0: a copy, no draws). */
static void perturbed_copy(float *dst, const float *src, size_t n, double noise, Rng *rng) {
    const double scale = noise * rms(src, n);
    for (size_t i = 0; i < n; i++) dst[i] = noise > 0 ? (float)(src[i] + scale * rng_normal(rng)) : src[i];
}

static bool same_shape(const GPTConfig *a, const GPTConfig *b) {
    return a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->channels == b->channels &&
           a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size;
}

bool moe_upcycle(const GPT *dense, GPT *moe, uint64_t seed, double noise, char *why, size_t why_size) {
    const GPTConfig *d = &dense->cfg, *m = &moe->cfg;
    if (gpt_is_moe(d) || !gpt_is_moe(m) || !same_shape(d, m)) {
        snprintf(why, why_size, "upcycling needs a dense model and an MoE model of the same shape");
        return false;
    }
    if (m->moe_ffn != 4 * m->channels) {
        snprintf(why, why_size, "each expert's hidden width %d must be the dense MLP's %d to upcycle it", m->moe_ffn,
                 4 * m->channels);
        return false;
    }
    gpt_copy_tensors(d, dense->params, m, moe->params); /* all but the MoE layers' router and experts */
    const MoeConfig cfg = gpt_moe_config(m);
    const TensorKind parts[4] = {TK_FCW, TK_FCB, TK_FCPROJW, TK_FCPROJB}; /* an expert block's order */
    Rng rng;
    rng_seed(&rng, seed ^ 0x75706379636c65ULL); /* "upcycle": a stream apart from the initialisation's */
    for (int l = 0; l < m->num_layers; l++) {
        if (!gpt_layer_is_moe(m, l)) continue;
        float *expert = moe->params + gpt_tensor_offset(m, TK_EXPERTS, l);
        for (int e = 0; e < m->experts; e++, expert += moe_expert_numel(&cfg))
            for (size_t p = 0, at = 0; p < 4; p++) {
                const size_t n = gpt_tensor_numel(d, parts[p]);
                perturbed_copy(expert + at, dense->params + gpt_tensor_offset(d, parts[p], l), n, noise, &rng);
                at += n;
            }
    }
    if (moe->moe_bias) memset(moe->moe_bias, 0, (size_t)gpt_stage_layers(m) * m->experts * sizeof(float));
    return true;
}
