/* shard.c: llm.c token shards: validate, map, write (see shard.h). */
#define _GNU_SOURCE
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/io.h"

void shard_open(TokenShard *shard, const char *path, int vocab_size) {
    memset(shard, 0, sizeof *shard);
    int fd = open(path, O_RDONLY);
    if (fd < 0) bs_die("cannot open token shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) bs_die("cannot stat token shard %s: %s", path, strerror(errno));
    size_t bytes = (size_t)st.st_size;
    const size_t header_bytes = SHARD_HEADER_INTS * sizeof(int32_t);
    if (bytes < header_bytes)
        bs_die("%s is not a token shard: %zu bytes, shorter than the 1024-byte header", path, bytes);
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) bs_die("cannot map token shard %s: %s", path, strerror(errno));
    const int32_t *header = map;
    if (header[0] != SHARD_MAGIC)
        bs_die("%s is not a token shard: wrong magic %d (expected %d, llm.c's format)", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION)
        bs_die("%s has token-shard version %d; this build reads version %d (uint16 tokens)", path, header[1],
               SHARD_VERSION);
    if (header[2] < 0) bs_die("%s is corrupt: negative token count %d", path, header[2]);
    size_t count = (size_t)header[2];
    if (bytes != header_bytes + 2 * count)
        bs_die("%s is truncated or corrupt: its header says %zu tokens (%zu bytes) but the file has %zu bytes", path,
               count, header_bytes + 2 * count, bytes);
    const uint16_t *tokens = (const uint16_t *)((const char *)map + header_bytes);
    if (vocab_size > 0) {
        for (size_t i = 0; i < count; i++) {
            if (tokens[i] >= vocab_size)
                bs_die("%s: token %u at position %zu is outside the vocabulary (size %d); was it prepared with "
                       "another tokenizer?", path, tokens[i], i, vocab_size);
        }
    }
    shard->path = strdup(path);
    shard->map = map;
    shard->map_bytes = bytes;
    shard->tokens = tokens;
    shard->num_tokens = count;
}

void shard_close(TokenShard *shard) {
    if (shard->map) munmap(shard->map, shard->map_bytes);
    free(shard->path);
    memset(shard, 0, sizeof *shard);
}

void shard_write(const char *path, const uint16_t *tokens, size_t num_tokens) {
    if (num_tokens > INT32_MAX) bs_die("cannot write %s: %zu tokens exceed a shard's limit", path, num_tokens);
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)num_tokens;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = bs_fopen(tmp, "wb");
    bs_fwrite_all(header, sizeof header, f, tmp);
    bs_fwrite_all(tokens, num_tokens * sizeof(uint16_t), f, tmp);
    bs_fclose_synced(f, tmp);
    if (rename(tmp, path) != 0) bs_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}
