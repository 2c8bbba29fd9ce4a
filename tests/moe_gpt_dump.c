/* moe_gpt_dump.c: test helper for test_moe_model.py: an MoE GPT's loss, aux
 * and z losses and every gradient on one batch, for the PyTorch reference.
 * usage: moe_gpt_dump OUT B T L C H E K ROUTER CAPACITY AUX Z SEED [EVERY [GATES SCALE]]
 * (EVERY: --moe-every, default 1: layer l has the MoE MLP when (l + 1) % EVERY == 0; GATES, SCALE:
 * --moe-gates and --moe-routed-scale, default normalized and 1). The model (vocabulary 64) starts from gpt_init_weights(SEED), then every
 * parameter gets N(0, 0.02) added and the router weights are scaled by 10
 * (scores far apart, so no choice or drop falls between nearly equal
 * scores), tokens and targets drawn from SEED. OUT gets raw float32: the
 * flat parameters, the mean language-model loss, the aux and z losses, the
 * flat gradients, then per MoE layer the routed and kept assignments.
 * usage: moe_gpt_dump --logits MODEL OUT B T SEED: the model read from a
 * model file or directory (model/model_file.h, the MoE selection bias
 * included) on B x T tokens drawn from SEED; OUT gets the tokens (int32) and
 * the logits (B, T, V) as float32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/model_file.h"

static void write_floats(FILE *f, const float *x, size_t n, const char *path) { bs_fwrite_all(x, n * sizeof(float), f, path); }

/* --logits: a model file's logits, as the engine reads and runs it. */
static int dump_logits(int argc, char **argv) {
    if (argc != 7) bs_die("usage: moe_gpt_dump --logits MODEL OUT B T SEED");
    const char *model_path = argv[2], *path = argv[3];
    const int B = atoi(argv[4]), T = atoi(argv[5]);
    GPTConfig cfg = {0};
    model_file_read_config(model_path, &cfg);
    GPT model;
    gpt_create_with(&model, &cfg, GPT_ALLOC_PARAMS);
    model_file_read_params(model_path, &model);
    Rng rng;
    rng_seed(&rng, strtoull(argv[6], NULL, 10));
    const size_t N = (size_t)B * T, V = (size_t)cfg.vocab_size;
    int32_t *inputs = bs_malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inputs[i] = (int32_t)(rng_next(&rng) % V);
    GPTActs acts;
    gpt_acts_create(&acts, &cfg, B, T, false);
    gpt_forward(&model, &acts, inputs, NULL, B, T, 0, NULL);
    FILE *f = bs_fopen(path, "wb");
    bs_fwrite_all(inputs, N * sizeof(int32_t), f, path);
    for (size_t r = 0; r < N; r++) write_floats(f, acts.logits + r * (size_t)cfg.padded_vocab_size, V, path);
    bs_fclose_synced(f, path);
    gpt_acts_free(&acts);
    gpt_free(&model);
    free(inputs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--logits") == 0) return dump_logits(argc, argv);
    if (argc != 14 && argc != 15 && argc != 17)
        bs_die("usage: moe_gpt_dump OUT B T L C H E K ROUTER CAPACITY AUX Z SEED [EVERY [GATES SCALE]]");
    MoeGates gates = MOE_GATES_NORMALIZED;
    if (argc == 17 && !moe_parse_gates(argv[15], &gates)) bs_die("moe_gpt_dump: unknown gates %s", argv[15]);
    const char *path = argv[1];
    int B = atoi(argv[2]), T = atoi(argv[3]);
    MoeRouter router;
    if (!moe_parse_router(argv[9], &router)) bs_die("moe_gpt_dump: unknown router %s", argv[9]);
    GPTConfig cfg = {.max_seq_len = T, .vocab_size = 64, .num_layers = atoi(argv[4]), .channels = atoi(argv[5]),
                     .num_heads = atoi(argv[6]), .experts = atoi(argv[7]), .moe_top_k = atoi(argv[8]),
                     .moe_router = (int)router, .capacity_factor = atof(argv[10]), .moe_aux_coef = atof(argv[11]),
                     .moe_z_coef = atof(argv[12]), .moe_every = argc > 14 ? atoi(argv[14]) : 1,
                     .moe_gates = (int)gates, .moe_routed_scale = argc == 17 ? atof(argv[16]) : 1};
    uint64_t seed = strtoull(argv[13], NULL, 10);
    char why[256];
    if (!gpt_config_check(&cfg, why, sizeof why)) bs_die("%s", why);
    GPT model;
    gpt_create(&model, &cfg);
    gpt_init_weights(&model, seed);
    Rng rng;
    rng_seed(&rng, seed + 1);
    for (size_t i = 0; i < model.num_params; i++) model.params[i] += (float)(0.02 * rng_normal(&rng));
    for (int l = 0; l < cfg.num_layers; l++) {
        if (!gpt_layer_is_moe(&cfg, l)) continue;
        float *r = model.params + gpt_tensor_offset(&cfg, TK_ROUTER, l);
        for (size_t i = 0; i < gpt_tensor_numel(&cfg, TK_ROUTER); i++) r[i] *= 10;
    }
    const size_t wte_rows = (size_t)cfg.padded_vocab_size;
    for (size_t r = (size_t)cfg.vocab_size; r < wte_rows; r++) /* padded rows stay 0 */
        memset(model.params + r * cfg.channels, 0, sizeof(float) * (size_t)cfg.channels);
    const size_t N = (size_t)B * T;
    int32_t *inputs = bs_malloc(N * sizeof(int32_t)), *targets = bs_malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) {
        inputs[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
        targets[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
    }
    GPTActs acts;
    gpt_acts_create(&acts, &cfg, B, T, true);
    gpt_moe_begin_step(&model);
    gpt_zero_grads(&model);
    double loss_sum = gpt_forward(&model, &acts, inputs, targets, B, T, 1.0f / (float)N, NULL);
    gpt_backward(&model, &acts, inputs, B, T, NULL);
    FILE *f = bs_fopen(path, "wb");
    bs_fwrite_all(inputs, N * sizeof(int32_t), f, path);
    bs_fwrite_all(targets, N * sizeof(int32_t), f, path);
    write_floats(f, model.params, model.num_params, path);
    const float losses[3] = {(float)(loss_sum / (double)N), (float)model.moe_aux, (float)model.moe_z};
    write_floats(f, losses, 3, path);
    write_floats(f, model.grads, model.num_params, path);
    for (int l = 0; l < cfg.num_layers; l++) {
        if (!gpt_layer_is_moe(&cfg, l)) continue;
        float counts[2] = {0, 0};
        for (int e = 0; e < cfg.experts; e++)
            counts[0] += (float)model.moe_step[l].routed[e], counts[1] += (float)model.moe_step[l].kept[e];
        write_floats(f, counts, 2, path);
    }
    bs_fclose_synced(f, path);
    gpt_acts_free(&acts);
    gpt_free(&model);
    free(inputs);
    free(targets);
    return 0;
}
