/* shard_writer.h: token shards written in order as they fill: DIR/PREFIX_NNNNNN.bin
 * of up to shard_tokens tokens each, and (SFT data) the loss mask beside each
 * (data/loss_mask.h). Token ids are uint16 (llm.c's format): the caller has
 * checked the vocabulary fits.
 *
 * Windowed writers (packed SFT data, data/sft_pack.h) cut shards on window
 * boundaries: the loader reads windows of T + 1 tokens at stride T inside a
 * shard, so a shard holds k whole windows of T tokens and then the next
 * window's first token (the last window's last target), which the next
 * shard starts with again. */
#ifndef BS_DATA_SHARD_WRITER_H
#define BS_DATA_SHARD_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *dir, *prefix;
    size_t shard_tokens;
    bool masked;      /* write a loss mask beside each shard */
    uint16_t *buf;
    uint8_t *mask;
    size_t len;
    int index;        /* shards written */
    size_t total;     /* tokens written */
    size_t counted;   /* of them, counted by the loss (masked writers) */
    size_t carried;   /* windowed: tokens at the buffer's start already written in the shard before (0 or 1) */
    bool windowed;
} ShardWriter;

void shard_writer_init(ShardWriter *w, const char *dir, const char *prefix, size_t shard_tokens, bool masked);
/* A masked writer whose shards hold whole windows of T tokens (as many as
 * fit shard_tokens - 1, at least one) plus the next window's first token. */
void shard_writer_init_windows(ShardWriter *w, const char *dir, const char *prefix, size_t shard_tokens, int T);
/* n tokens, each counted by the loss or not (counted: ignored unless masked). */
void shard_writer_put(ShardWriter *w, const int32_t *tokens, size_t n, bool counted);
/* Writes what is buffered (a last, shorter shard) and frees the buffers. */
void shard_writer_finish(ShardWriter *w);

#endif
