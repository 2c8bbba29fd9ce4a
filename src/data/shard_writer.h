/* shard_writer.h: token shards written in order as they fill: DIR/PREFIX_NNNNNN.bin
 * of up to shard_tokens tokens each, and (SFT data) the loss mask beside each
 * (data/loss_mask.h). Token ids are uint16 (llm.c's format): the caller has
 * checked the vocabulary fits. */
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
} ShardWriter;

void shard_writer_init(ShardWriter *w, const char *dir, const char *prefix, size_t shard_tokens, bool masked);
/* n tokens, each counted by the loss or not (counted: ignored unless masked). */
void shard_writer_put(ShardWriter *w, const int32_t *tokens, size_t n, bool counted);
/* Writes what is buffered (a last, shorter shard) and frees the buffers. */
void shard_writer_finish(ShardWriter *w);

#endif
