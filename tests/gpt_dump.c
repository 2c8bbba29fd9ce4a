/* gpt_dump.c: test helper for the PyTorch reference check (ref_torch.py).
 * Loads an llm.c model file and a batch, runs forward and backward, and
 * writes logits (B,T,V), the mean loss, and every gradient in llm.c order
 * (wte without its padded rows) as raw float32.
 * usage: gpt_dump MODEL INPUTS TARGETS B T OUT [bf16|bf16-onednn|bf16-widen|docs:ID]
 * (INPUTS/TARGETS: raw int32, a target -1 not counted; bf16 picks the matmul path as the trainer's auto; docs:ID
 * keeps attention inside documents that start at token ID) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "model/gpt.h"
#include "model/model_file.h"

static int32_t *read_tokens(const char *path, size_t n) {
    int32_t *t = bs_malloc(n * sizeof(int32_t));
    FILE *f = bs_fopen(path, "rb");
    bs_fread_exact(t, n * sizeof(int32_t), f, path);
    fclose(f);
    return t;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8)
        bs_die("usage: gpt_dump MODEL INPUTS TARGETS B T OUT [bf16|bf16-onednn|bf16-widen|docs:ID]");
    int B = atoi(argv[4]), T = atoi(argv[5]);
    GPTConfig cfg;
    model_file_read_config(argv[1], &cfg);
    GPT model;
    gpt_create(&model, &cfg);
    model_file_read_params(argv[1], &model);
    if (argc == 8) {
        if (strcmp(argv[7], "bf16") == 0) gpt_enable_bf16(&model, MATMUL_BF16_AUTO);
        else if (strcmp(argv[7], "bf16-onednn") == 0) gpt_enable_bf16(&model, MATMUL_BF16_ONEDNN);
        else if (strcmp(argv[7], "bf16-widen") == 0) gpt_enable_bf16(&model, MATMUL_BF16_WIDEN);
        else if (strncmp(argv[7], "docs:", 5) == 0) model.doc_separator = atoi(argv[7] + 5); /* packed documents */
        else bs_die("gpt_dump: unknown precision '%s'", argv[7]);
    }
    int32_t *inputs = read_tokens(argv[2], (size_t)B * T);
    int32_t *targets = read_tokens(argv[3], (size_t)B * T);
    GPTActs acts;
    gpt_acts_create(&acts, &cfg, B, T, true);
    FILE *out = bs_fopen(argv[6], "wb");

    gpt_forward(&model, &acts, inputs, NULL, B, T, 0.0f, NULL);
    for (size_t i = 0; i < (size_t)B * T; i++)
        bs_fwrite_all(acts.logits + i * cfg.padded_vocab_size, (size_t)cfg.vocab_size * sizeof(float), out, argv[6]);
    float dloss = 1.0f / (float)(B * T);
    double loss_sum = gpt_forward(&model, &acts, inputs, targets, B, T, dloss, NULL);
    float loss = (float)(loss_sum / (B * T));
    bs_fwrite_all(&loss, sizeof loss, out, argv[6]);
    gpt_zero_grads(&model);
    gpt_backward(&model, &acts, inputs, B, T, NULL);
    for (int k = 0; k < TK_BASE_COUNT; k++) {
        TensorKind kind = (TensorKind)k;
        int layers = gpt_tensor_is_per_layer(kind) ? cfg.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            size_t n = kind == TK_WTE ? (size_t)cfg.vocab_size * cfg.channels : gpt_tensor_numel(&cfg, kind);
            bs_fwrite_all(model.grads + gpt_tensor_offset(&cfg, kind, l), n * sizeof(float), out, argv[6]);
        }
    }
    fclose(out);
    gpt_acts_free(&acts);
    gpt_free(&model);
    free(inputs);
    free(targets);
    return 0;
}
