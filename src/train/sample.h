/* sample.h: autoregressive text generation with temperature and top-k. */
#ifndef BS_TRAIN_SAMPLE_H
#define BS_TRAIN_SAMPLE_H

#include <stdint.h>

#include "core/rng.h"
#include "model/gpt.h"

typedef struct {
    float temperature; /* <= 0: greedy */
    int top_k;         /* 0: the whole vocabulary */
} SampleParams;

/* Picks the next token from one row of logits (V entries). scratch: V floats. */
int32_t sample_next(const float *logits, int V, const SampleParams *p, Rng *rng, float *scratch);

/* Appends n tokens to tokens[0..len) (capacity len + n) and returns the new
 * length. acts must be created with B >= 1 and T = the model's max length;
 * the context is the last T tokens. */
int sample_generate(GPT *model, GPTActs *acts, int32_t *tokens, int len, int n, const SampleParams *p,
                    Rng *rng);

#endif
