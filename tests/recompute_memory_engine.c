/* recompute_memory_engine.c: test_recompute_memory's engine side: what a
 * training activation set of a GPT-2 shape allocates under a --recompute
 * mode, and the word `train --recompute` takes for it (apart, as model/gpt.h
 * and plan/ name some types alike). */
#include <stdio.h>
#include <stdlib.h>

#include "model/gpt.h"
#include "train/train_config.h"

double engine_acts_bytes(int layers, int channels, int heads, int seq_len, int batch, int mode);
const char *engine_recompute_word(int mode);

const char *engine_recompute_word(int mode) { return TRAIN_RECOMPUTE_WORDS[mode]; }

double engine_acts_bytes(int layers, int channels, int heads, int seq_len, int batch, int mode) {
    GPTConfig cfg = {.max_seq_len = seq_len, .vocab_size = 256, .num_layers = layers, .num_heads = heads,
                     .channels = channels, .recompute = mode};
    char why[256];
    if (!gpt_config_check(&cfg, why, sizeof why)) {
        fprintf(stderr, "FAIL config: %s\n", why);
        exit(1);
    }
    return (double)gpt_acts_bytes(&cfg, batch, seq_len, true);
}
