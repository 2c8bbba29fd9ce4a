/* shard.h: token shards in llm.c's format: an int32[256] header (magic
 * 20240520, version 1, token count) then the tokens as uint16. Shards are
 * memory-mapped read-only; opening one validates its header, its size and
 * (if asked) that every token is below the vocabulary size, and dies with a
 * line naming the file otherwise (shard_try_open returns the line instead). */
#ifndef BS_DATA_SHARD_H
#define BS_DATA_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

typedef struct {
    char *path;
    void *map;
    size_t map_bytes;
    const uint16_t *tokens;
    size_t num_tokens;
} TokenShard;

/* vocab_size > 0: every token must be < vocab_size. */
void shard_open(TokenShard *shard, const char *path, int vocab_size);
/* The same checks without dying: false and a reason naming the file (for
 * callers that must survive bad input, such as the fuzzer). */
bool shard_try_open(TokenShard *shard, const char *path, int vocab_size, char *why, size_t why_size);
void shard_close(TokenShard *shard);
/* Writes atomically (PATH.tmp, fsync, rename). */
void shard_write(const char *path, const uint16_t *tokens, size_t num_tokens);

#endif
