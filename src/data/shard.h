/* shard.h: token shards in llm.c's format: an int32[256] header (magic
 * 20240520, version 1, token count) then the tokens as uint16. Shards are
 * memory-mapped read-only; opening one validates its header, its size and
 * (if asked) that every token is below the vocabulary size, and dies with a
 * line naming the file otherwise (shard_try_open returns the line instead).
 * The checks read the file through a buffer and the loader reads its
 * windows with shard_read (pread), so a training process holds in resident
 * memory only the tokens it copied, not the shard's pages (a read through
 * the mapping maps whole page-cache folios around it: on ext4, 4 MiB of an
 * 8 MiB shard after 3 random windows). */
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
    const uint16_t *tokens; /* mapped, for reads in place */
    size_t num_tokens;
    int fd;                 /* open while the shard is (shard_read): one file descriptor per shard */
} TokenShard;

/* vocab_size > 0: every token must be < vocab_size. */
void shard_open(TokenShard *shard, const char *path, int vocab_size);
/* The same checks without dying: false and a reason naming the file (for
 * callers that must survive bad input, such as the fuzzer). */
bool shard_try_open(TokenShard *shard, const char *path, int vocab_size, char *why, size_t why_size);
void shard_close(TokenShard *shard);
/* Tokens first .. first+n-1 into dst, read from the file (dies with a line naming it if that fails). */
void shard_read(const TokenShard *shard, size_t first, size_t n, uint16_t *dst);
/* Writes atomically (PATH.tmp, fsync, rename). */
void shard_write(const char *path, const uint16_t *tokens, size_t num_tokens);

#endif
