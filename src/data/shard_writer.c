/* shard_writer.c: token shards written as they fill (see shard_writer.h). */
#include "data/shard_writer.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "data/loss_mask.h"
#include "data/shard.h"

void shard_writer_init(ShardWriter *w, const char *dir, const char *prefix, size_t shard_tokens, bool masked) {
    *w = (ShardWriter){dir, prefix, shard_tokens, masked, bs_malloc(shard_tokens * sizeof(uint16_t)),
                       masked ? bs_malloc(shard_tokens) : NULL, 0, 0, 0, 0, 0, false};
}

void shard_writer_init_windows(ShardWriter *w, const char *dir, const char *prefix, size_t shard_tokens, int T) {
    size_t windows = shard_tokens > (size_t)T ? (shard_tokens - 1) / (size_t)T : 1;
    shard_writer_init(w, dir, prefix, windows * (size_t)T + 1, true);
    w->windowed = true;
}

/* Writes the buffer as the next shard; a windowed writer keeps its last token
 * to start the next shard with. */
static void flush(ShardWriter *w) {
    if (w->len <= w->carried) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%06d.bin", w->dir, w->prefix, w->index++);
    shard_write(path, w->buf, w->len);
    if (w->masked) loss_mask_write(path, w->mask, w->len);
    w->total += w->len - w->carried;
    if (w->windowed) {
        w->buf[0] = w->buf[w->len - 1];
        w->mask[0] = w->mask[w->len - 1];
        w->len = w->carried = 1;
    } else {
        w->len = 0;
    }
}

void shard_writer_put(ShardWriter *w, const int32_t *tokens, size_t n, bool counted) {
    for (size_t i = 0; i < n; i++) {
        w->buf[w->len] = (uint16_t)tokens[i];
        if (w->masked) w->mask[w->len] = counted;
        w->counted += w->masked && counted;
        if (++w->len == w->shard_tokens) flush(w);
    }
}

void shard_writer_finish(ShardWriter *w) {
    flush(w);
    free(w->buf);
    free(w->mask);
    w->buf = NULL;
    w->mask = NULL;
}
