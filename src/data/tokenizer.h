/* tokenizer.h: the one interface over batchscale's tokenizers, chosen by a
 * name (the --tokenizer flag):
 *
 *   byte          one token per byte, end-of-text 256, vocabulary 257 (the default)
 *   gpt2          GPT-2's BPE from vocab_dir (encoder.json, vocab.bpe): 50,257 tokens, end-of-text 50256
 *   gpt2:DIR      the same, with the directory in the name
 *   DIR           a directory holding encoder.json and vocab.bpe (as gpt2:DIR)
 *   FILE, bpe:FILE  a tokenizer made by `batchscale tokenizer train` (bpe_file.h)
 *
 * tokenizer_spec() is the canonical name ("byte", "gpt2:/abs/dir" or
 * "bpe:/abs/file") to record in a checkpoint manifest;
 * tokenizer_load(spec, NULL) loads the same tokenizer again.
 *
 * Encoding never produces end-of-text from text (the text "<|endoftext|>"
 * is encoded as ordinary text); callers put it between documents. Decoding
 * is the exact inverse of encoding for any byte string; end-of-text
 * decodes to "<|endoftext|>". A loaded tokenizer is read-only and shared
 * by threads; each thread encodes with its own TokenizerEncoder. */
#ifndef BS_DATA_TOKENIZER_H
#define BS_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"
#include "data/pretokenize.h"
#include "data/token_list.h"

typedef struct Tokenizer Tokenizer;
typedef BpeEncoder TokenizerEncoder;

/* name: as above (NULL or "" is byte); vocab_dir: for "gpt2" (NULL or ""
 * otherwise). Dies with one line on a bad name or a missing or malformed file. */
Tokenizer *tokenizer_load(const char *name, const char *vocab_dir);
void tokenizer_free(Tokenizer *t);
int tokenizer_vocab_size(const Tokenizer *t);
int32_t tokenizer_eot(const Tokenizer *t);
const char *tokenizer_spec(const Tokenizer *t);
const BpeModel *tokenizer_model(const Tokenizer *t);

TokenizerEncoder *tokenizer_encoder_new(const Tokenizer *t);
void tokenizer_encoder_free(TokenizerEncoder *e);
/* Appends the tokens of text[0..n) to out. */
void tokenizer_encode(TokenizerEncoder *e, const unsigned char *text, size_t n, TokenList *out);

/* One encoder per thread, for encoding many texts at once. */
typedef struct {
    int threads;
    TokenizerEncoder *encoders;
} TokenizerPool;

/* threads <= 0: OpenMP's default (OMP_NUM_THREADS or all cores). */
void tokenizer_pool_init(TokenizerPool *p, const Tokenizer *t, int threads);
void tokenizer_pool_free(TokenizerPool *p);
/* out[i] = the tokens of texts[i] (replacing what it held), in parallel. */
void tokenizer_pool_encode(TokenizerPool *p, const TextSpan *texts, size_t n, TokenList *out);

/* The bytes of ids[0..n), malloc'ed and NUL-terminated (*len excludes the
 * NUL). Dies on an id outside the vocabulary. */
unsigned char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len);

#endif
