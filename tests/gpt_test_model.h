/* gpt_test_model.h: what the GPT device tests share: the model's
 * configuration (checked; a bad one ends the test) and the seeded
 * micro-batches they train on: n tokens below vocab, one in 16 the document
 * separator, every 13th target masked (-1), the targets the inputs shifted
 * by one. */
#ifndef BS_TESTS_GPT_TEST_MODEL_H
#define BS_TESTS_GPT_TEST_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "model/gpt.h"

static inline GPTConfig gpt_test_config(int layers, int heads, int channels, int T, int vocab) {
    GPTConfig cfg = {.max_seq_len = T, .vocab_size = vocab, .num_layers = layers, .num_heads = heads,
                     .channels = channels};
    char why[256];
    if (!gpt_config_check(&cfg, why, sizeof why)) {
        printf("FAIL: test model: %s\n", why);
        exit(1);
    }
    return cfg;
}

static inline int32_t gpt_batch_token(Rng *rng, int vocab, int32_t separator) {
    return rng_below(rng, 16) == 0 ? separator : (int32_t)rng_below(rng, (uint64_t)vocab);
}

static inline void gpt_batch(uint64_t seed, int n, int vocab, int32_t separator, int32_t *inputs, int32_t *targets) {
    Rng rng;
    rng_seed(&rng, seed);
    int32_t next = gpt_batch_token(&rng, vocab, separator);
    for (int i = 0; i < n; i++) {
        inputs[i] = next;
        next = gpt_batch_token(&rng, vocab, separator);
        targets[i] = i % 13 == 5 ? -1 : next;
    }
}

#endif
