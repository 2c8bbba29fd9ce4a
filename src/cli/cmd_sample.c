/* cmd_sample.c: `batchscale sample`: text from a checkpoint or an llm.c
 * model file, decoded with the byte-level tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "data/bytetok.h"
#include "model/llmc_file.h"
#include "train/sample.h"

int cmd_sample(int argc, char **argv) {
    const char *ckpt = "", *model_file = "", *prompt = "";
    int tokens = 200, top_k = 40;
    double temperature = 0.8;
    long long seed = 42;
    const OptionSpec specs[] = {
        {"ckpt", OPT_STRING, &ckpt, OPT_NO_RANGE, "DIR", "a checkpoint, or a checkpoint directory (its newest)"},
        {"model", OPT_STRING, &model_file, OPT_NO_RANGE, "FILE", "an llm.c model file instead of a checkpoint"},
        {"prompt", OPT_STRING, &prompt, OPT_NO_RANGE, "TEXT", "text to continue (default: start of a document)"},
        {"tokens", OPT_INT, &tokens, 1, 1e6, "N", "tokens to generate"},
        {"temperature", OPT_DOUBLE, &temperature, 0, 100, "T", "sampling temperature (0: greedy)"},
        {"top-k", OPT_INT, &top_k, 0, 1 << 30, "K", "sample among the K most likely tokens (0: all)"},
        {"seed", OPT_LONG, &seed, 0, 9.2e18, "N", "sampling seed"},
    };
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), argc, argv,
                       "usage: batchscale sample (--ckpt DIR | --model FILE) [options]\n\nGenerates text."))
        return 0;
    if (!*ckpt == !*model_file) bs_die("give exactly one of --ckpt DIR or --model FILE");
    GPT model;
    if (*ckpt) {
        char dir[4096], manifest[4200];
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ckpt);
        if (bs_path_exists(manifest)) snprintf(dir, sizeof dir, "%s", ckpt);
        else ckpt_resolve("latest", ckpt, dir, sizeof dir);
        CkptManifest *m = bs_malloc(sizeof *m);
        ckpt_read_manifest(dir, m);
        char why[600];
        if (!ckpt_verify(dir, m, why, sizeof why)) bs_die("%s", why);
        gpt_create(&model, &m->model);
        ckpt_read_range(dir, m, 0, model.num_params, model.params, NULL);
        free(m);
    } else {
        GPTConfig cfg;
        llmc_model_read_config(model_file, &cfg);
        gpt_create(&model, &cfg);
        llmc_model_read_params(model_file, &model);
    }
    if (model.cfg.vocab_size != BYTETOK_VOCAB)
        bs_die("this model has a vocabulary of %d; sampling decodes the byte-level tokenizer (257)", model.cfg.vocab_size);
    size_t plen = strlen(prompt);
    int32_t *seq = bs_malloc((plen + 1 + (size_t)tokens) * sizeof(int32_t));
    seq[0] = BYTETOK_EOT;
    for (size_t i = 0; i < plen; i++) seq[1 + i] = (unsigned char)prompt[i];
    GPTActs acts;
    gpt_acts_create(&acts, &model.cfg, 1, model.cfg.max_seq_len, false);
    Rng rng;
    rng_seed(&rng, (uint64_t)seed);
    SampleParams sp = {(float)temperature, top_k};
    int len = sample_generate(&model, &acts, seq, (int)plen + 1, tokens, &sp, &rng);
    unsigned char *text = bs_malloc((size_t)len);
    size_t n = bytetok_decode(seq + 1, (size_t)len - 1, text);
    fwrite(text, 1, n, stdout);
    printf("\n");
    free(text);
    free(seq);
    gpt_acts_free(&acts);
    gpt_free(&model);
    return 0;
}
