/* cmd_sample.c: `batchscale sample`: text from a checkpoint or an llm.c
 * model file. The prompt is encoded and the output decoded with --tokenizer
 * (default: byte-level); the model's vocabulary must be the tokenizer's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "train/train_ckpt.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "data/tokenizer.h"
#include "model/model_file.h"
#include "train/sample.h"
#include "train/moe_train.h"

int cmd_sample(int argc, char **argv) {
    const char *ckpt = "", *model_file = "", *prompt = "", *tokenizer = "", *vocab_dir = "";
    int tokens = 200, top_k = 40;
    double temperature = 0.8;
    long long seed = 42;
    const OptionSpec specs[] = {
        {"ckpt", OPT_STRING, &ckpt, OPT_NO_RANGE, "DIR", "a checkpoint, or a checkpoint directory (its newest)", NULL, NULL},
        {"model", OPT_STRING, &model_file, OPT_NO_RANGE, "FILE", "a model file (llm.c or safetensors, or a Hugging Face directory) instead of a checkpoint", NULL, NULL},
        {"prompt", OPT_STRING, &prompt, OPT_NO_RANGE, "TEXT", "text to continue (default: start of a document)", NULL, NULL},
        {"tokenizer", OPT_STRING, &tokenizer, OPT_NO_RANGE, "NAME", "byte, gpt2 (with --vocab-dir) or a file (default: the checkpoint's, else byte)", NULL, NULL},
        {"vocab-dir", OPT_STRING, &vocab_dir, OPT_NO_RANGE, "DIR", "GPT-2's encoder.json and vocab.bpe, or a Hugging Face tokenizer directory (vocab.json, merges.txt), for --tokenizer gpt2", NULL, NULL},
        {"tokens", OPT_INT, &tokens, 1, 1e6, "N", "tokens to generate", NULL, NULL},
        {"temperature", OPT_DOUBLE, &temperature, 0, 100, "T", "sampling temperature (0: greedy)", NULL, NULL},
        {"top-k", OPT_INT, &top_k, 0, 1 << 30, "K", "sample among the K most likely tokens (0: all)", NULL, NULL},
        {"seed", OPT_LONG, &seed, 0, 9.2e18, "N", "sampling seed", NULL, NULL},
    };
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), argc, argv,
                       "usage: batchscale sample (--ckpt DIR | --model FILE) [options]\n\nGenerates text."))
        return 0;
    if (!*ckpt == !*model_file) bs_die("give exactly one of --ckpt DIR or --model FILE");
    GPT model;
    char recorded[1024] = ""; /* the tokenizer a checkpoint's manifest names */
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
        train_ckpt_read(dir, m, &model.cfg, 0, model.num_params, model.params, NULL);
        if (gpt_is_moe(&model.cfg)) moe_bias_file_load(dir, &model); /* routing needs the selection bias */
        snprintf(recorded, sizeof recorded, "%s", m->tokenizer);
        free(m);
    } else {
        GPTConfig cfg = {0}; /* no heads but the file's */
        model_file_read_config(model_file, &cfg);
        gpt_create(&model, &cfg);
        model_file_read_params(model_file, &model);
    }
    Tokenizer *tok = tokenizer_load(*tokenizer ? tokenizer : recorded, vocab_dir);
    if (model.cfg.vocab_size != tokenizer_vocab_size(tok))
        bs_die("the model has a vocabulary of %d but tokenizer %s has %d tokens; give the one it was trained with "
               "(--tokenizer byte|gpt2|FILE)", model.cfg.vocab_size, tokenizer_spec(tok), tokenizer_vocab_size(tok));
    TokenList seq = {0};
    token_list_push(&seq, tokenizer_eot(tok));
    TokenizerEncoder *enc = tokenizer_encoder_new(tok);
    tokenizer_encode(enc, (const unsigned char *)prompt, strlen(prompt), &seq);
    tokenizer_encoder_free(enc);
    token_list_reserve(&seq, (size_t)tokens);
    GPTActs acts;
    gpt_acts_create(&acts, &model.cfg, 1, model.cfg.max_seq_len, false);
    Rng rng;
    rng_seed(&rng, (uint64_t)seed);
    SampleParams sp = {(float)temperature, top_k};
    int len = sample_generate(&model, &acts, seq.ids, (int)seq.len, tokens, &sp, &rng);
    size_t n;
    unsigned char *text = tokenizer_decode(tok, seq.ids + 1, (size_t)len - 1, &n);
    fwrite(text, 1, n, stdout);
    printf("\n");
    free(text);
    token_list_free(&seq);
    tokenizer_free(tok);
    gpt_acts_free(&acts);
    gpt_free(&model);
    return 0;
}
