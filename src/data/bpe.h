/* bpe.h: byte-level BPE: the model (merges and token bytes) and the encoder
 * that applies it, shared by every tokenizer here (bytes, GPT-2's, trained).
 *
 * A model maps every byte to a token, and ranks merges "left + right ->
 * result". Encoding splits text into pieces (pretokenize.h); within a piece
 * the bytes become their tokens and, repeatedly, the adjacent pair of lowest
 * rank is merged (the leftmost on a tie) until no pair has a merge: OpenAI's
 * GPT-2 encoder and Hugging Face's BPE do the same. Decoding concatenates
 * token bytes, so decode(encode(x)) == x for every byte string.
 *
 * A model is read-only once built and shared by threads; each thread encodes
 * with its own BpeEncoder, which caches the tokens of short pieces (words
 * repeat) and holds the scratch of the merge loop. The end-of-text token is
 * never produced by encoding text; it decodes to "<|endoftext|>".
 *
 * Loading files is elsewhere: gpt2_bpe.h (encoder.json, vocab.bpe) and
 * bpe_file.h (batchscale's trained format). */
#ifndef BS_DATA_BPE_H
#define BS_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "data/bpe_maps.h"
#include "data/token_list.h"

#define BPE_EOT_TEXT "<|endoftext|>"

typedef struct {
    int vocab_size; /* ids 0 .. vocab_size-1, end-of-text included */
    int32_t eot;
    int32_t byte_token[256];
    int num_merges;
    int32_t *merge_left, *merge_right, *merge_result; /* by rank */
    PairMap merges;                                   /* (left, right) -> a: rank, b: result */
    uint32_t *token_offset;                           /* vocab_size + 1 offsets into token_bytes */
    unsigned char *token_bytes;
} BpeModel;

/* Takes ownership of the arrays (bs_malloc'ed): token t is the bytes
 * token_bytes[token_offset[t] .. token_offset[t+1]); merges are given by
 * rank. Checks the model (every byte has a token of that one byte, every
 * merge's result is the concatenation of its parts, no pair twice, and no
 * merge uses a token before the first merge that makes it, as training
 * guarantees; the encoder relies on it) and dies naming `source` on the
 * first problem. */
void bpe_model_build(BpeModel *m, int vocab_size, int32_t eot, uint32_t *token_offset, unsigned char *token_bytes,
                     int num_merges, int32_t *merge_left, int32_t *merge_right, int32_t *merge_result,
                     const char *source);
/* batchscale's own layout, from merges alone: tokens 0..255 are the bytes
 * (by value); merge i (of two ids already made) makes the next free id,
 * unless its joined bytes are already a token, whose id it then reuses; the
 * last id is end-of-text. The byte-level tokenizer is the one with no
 * merges. Copies the arrays. */
void bpe_model_from_merges(BpeModel *m, const int32_t *left, const int32_t *right, int num_merges,
                           const char *source);
void bpe_model_free(BpeModel *m);

static inline size_t bpe_token_len(const BpeModel *m, int32_t id) {
    return m->token_offset[id + 1] - m->token_offset[id];
}
static inline const unsigned char *bpe_token_bytes(const BpeModel *m, int32_t id) {
    return m->token_bytes + m->token_offset[id];
}

typedef struct {
    const BpeModel *model;
    ByteMap cache;  /* piece -> offset in cached: [count, tokens...] */
    int32_t *cached;
    size_t cached_len, cached_cap;
    /* merge-loop scratch, sized by the longest piece so far */
    size_t scratch_cap;
    int32_t *sym, *result, *next, *prev;
    uint32_t *rank;
    /* long pieces: per-rank lists of positions (see merge_long in bpe.c) */
    size_t entry_cap, batch_cap;
    int32_t *entry_pos, *entry_next, *batch;
    uint32_t *rank_heap;
    int32_t *rank_head; /* one per merge rank */
} BpeEncoder;

void bpe_encoder_init(BpeEncoder *e, const BpeModel *m);
void bpe_encoder_free(BpeEncoder *e);
/* Appends the tokens of text[0..n) to out. */
void bpe_encode(BpeEncoder *e, const unsigned char *text, size_t n, TokenList *out);
/* Appends the tokens of one piece (no pre-tokenisation). */
void bpe_encode_piece(BpeEncoder *e, const unsigned char *piece, size_t n, TokenList *out);

#endif
