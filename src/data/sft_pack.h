/* sft_pack.h: supervised fine-tuning examples packed whole into the
 * loader's sequence windows.
 *
 * The loader (data/loader.h) reads window k of a shard as tokens kT..kT+T
 * (T inputs, T targets). The packer writes blocks of exactly T tokens, each
 * holding whole examples one after another, every example starting with
 * end-of-text (its document separator: attention and positions restart
 * there), and pads the rest of a block with end-of-text tokens that the loss
 * does not count, so no example is ever cut across two windows. An example
 * that does not fit a window alone (its separator and tokens over T) is
 * dropped and counted. The end-of-text that follows an example (the next
 * separator, the first padding token, or the final token) is counted when
 * the example's last token is: predicting it ends the response. Blocks go
 * to a windowed shard writer (data/shard_writer.h), which gives the last
 * window of every shard its last target. */
#ifndef BS_DATA_SFT_PACK_H
#define BS_DATA_SFT_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/shard_writer.h"

typedef struct {
    ShardWriter *out; /* windowed (shard_writer_init_windows with the same T) */
    int T;
    int32_t eot;
    int used;             /* tokens of the current block written */
    bool last_counted;    /* the last example's last token was counted */
    size_t packed, dropped;
} SftPacker;

void sft_packer_init(SftPacker *p, ShardWriter *out, int T, int32_t eot);
/* One example without its separator: n tokens and a loss-mask byte (0 or 1)
 * each. Returns false when it is longer than a window allows (dropped). */
bool sft_packer_add(SftPacker *p, const int32_t *tokens, const uint8_t *counted, size_t n);
/* Pads the last block, writes the final end-of-text and finishes the writer. */
void sft_packer_finish(SftPacker *p);

#endif
