/* sample.c: generation from a trained model (see sample.h). */
#include "train/sample.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

/* k-th largest of x[0..n) (k >= 1), reordering x (quickselect). */
static float kth_largest(float *x, int n, int k) {
    int lo = 0, hi = n - 1, target = k - 1;
    while (lo < hi) {
        float pivot = x[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) {
                float t = x[i];
                x[i] = x[j];
                x[j] = t;
                i++, j--;
            }
        }
        if (target <= j) hi = j;
        else if (target >= i) lo = i;
        else break;
    }
    return x[target];
}

int32_t sample_next(const float *logits, int V, const SampleParams *p, Rng *rng, float *scratch) {
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (p->temperature <= 0) return best;
    float threshold = -INFINITY;
    if (p->top_k > 0 && p->top_k < V) {
        for (int j = 0; j < V; j++) scratch[j] = logits[j];
        threshold = kth_largest(scratch, V, p->top_k);
    }
    double sum = 0;
    for (int j = 0; j < V; j++) {
        double e = logits[j] >= threshold ? exp((logits[j] - logits[best]) / p->temperature) : 0.0;
        scratch[j] = (float)e;
        sum += e;
    }
    double r = rng_uniform(rng) * sum, acc = 0;
    for (int j = 0; j < V; j++) {
        acc += scratch[j];
        if (r < acc) return j;
    }
    return best;
}

int sample_generate(GPT *model, GPTActs *acts, int32_t *tokens, int len, int n, const SampleParams *p,
                    Rng *rng) {
    const GPTConfig *cfg = &model->cfg;
    const int T = cfg->max_seq_len;
    float *scratch = bs_malloc((size_t)cfg->vocab_size * sizeof(float));
    for (int i = 0; i < n; i++) {
        int t = len < T ? len : T;
        const int32_t *context = tokens + (len - t);
        gpt_forward(model, acts, context, NULL, 1, t, 0.0f, NULL);
        const float *row = acts->logits + (size_t)(t - 1) * cfg->padded_vocab_size;
        tokens[len++] = sample_next(row, cfg->vocab_size, p, rng, scratch);
    }
    free(scratch);
    return len;
}
