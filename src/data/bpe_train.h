/* bpe_train.h: learns byte-level BPE merges from text.
 *
 * The text is split into pieces exactly as encoding splits it
 * (pretokenize.h) and each distinct piece is counted. Training starts from
 * the bytes and repeats: count every adjacent pair of tokens over all
 * pieces (weighted by how often the piece occurs), merge the most frequent
 * pair everywhere (left to right within a piece), record the merge. Ties go
 * to the pair with the smaller left id, then the smaller right id, so a run
 * is deterministic. Merged ids follow bpe_model_from_merges: the next free
 * id, or the existing token with the same bytes. Training stops when the
 * vocabulary (end-of-text included) reaches the size asked for, or when no
 * pair is left.
 *
 * Pair counts are kept up to date incrementally (each merge touches only
 * the pieces that hold the pair) and the best pair comes from a lazy heap,
 * so a few megabytes train in about a second. The text is not kept: only
 * the distinct pieces and their counts. */
#ifndef BS_DATA_BPE_TRAIN_H
#define BS_DATA_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"
#include "data/bpe_maps.h"

typedef struct {
    ByteMap pieces;   /* distinct piece -> index */
    uint64_t *counts; /* occurrences of each piece */
    size_t counts_cap;
    uint64_t bytes;   /* text seen */
} BpeTrainer;

void bpe_trainer_init(BpeTrainer *t);
void bpe_trainer_free(BpeTrainer *t);
/* Counts the pieces of text[0..n). Texts may be fed in parts cut where
 * pretok_find_cut allows (the counts are then those of the whole). */
void bpe_trainer_add_text(BpeTrainer *t, const unsigned char *text, size_t n);
/* Learns merges up to vocab_size tokens (>= 257) and builds the model. */
void bpe_trainer_train(const BpeTrainer *t, int vocab_size, BpeModel *out);

#endif
