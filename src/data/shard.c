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

/* Every check of shard_open, returning the reason instead of dying; the
 * file is unmapped again on failure. */
bool shard_try_open(TokenShard *shard, const char *path, int vocab_size, char *why, size_t why_size) {
    memset(shard, 0, sizeof *shard);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(why, why_size, "cannot open token shard %s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_size, "cannot stat token shard %s: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    size_t bytes = (size_t)st.st_size;
    const size_t header_bytes = SHARD_HEADER_INTS * sizeof(int32_t);
    if (bytes < header_bytes) {
        snprintf(why, why_size, "%s is not a token shard: %zu bytes, shorter than the 1024-byte header", path, bytes);
        close(fd);
        return false;
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(why, why_size, "cannot map token shard %s: %s", path, strerror(errno));
        return false;
    }
    const int32_t *header = map;
    const uint16_t *tokens = (const uint16_t *)((const char *)map + header_bytes);
    size_t count = header[2] < 0 ? 0 : (size_t)header[2];
    if (header[0] != SHARD_MAGIC)
        snprintf(why, why_size, "%s is not a token shard: wrong magic %d (expected %d, llm.c's format)", path,
                 header[0], SHARD_MAGIC);
    else if (header[1] != SHARD_VERSION)
        snprintf(why, why_size, "%s has token-shard version %d; this build reads version %d (uint16 tokens)", path,
                 header[1], SHARD_VERSION);
    else if (header[2] < 0)
        snprintf(why, why_size, "%s is corrupt: negative token count %d", path, header[2]);
    else if (bytes != header_bytes + 2 * count)
        snprintf(why, why_size,
                 "%s is truncated or corrupt: its header says %zu tokens (%zu bytes) but the file has %zu bytes", path,
                 count, header_bytes + 2 * count, bytes);
    else
        why[0] = '\0';
    for (size_t i = 0; !why[0] && vocab_size > 0 && i < count; i++)
        if (tokens[i] >= vocab_size)
            snprintf(why, why_size,
                     "%s: token %u at position %zu is outside the vocabulary (size %d); was it prepared with "
                     "another tokenizer?", path, tokens[i], i, vocab_size);
    if (why[0]) {
        munmap(map, bytes);
        return false;
    }
    shard->path = strdup(path);
    shard->map = map;
    shard->map_bytes = bytes;
    shard->tokens = tokens;
    shard->num_tokens = count;
    return true;
}

void shard_open(TokenShard *shard, const char *path, int vocab_size) {
    char why[4400];
    if (!shard_try_open(shard, path, vocab_size, why, sizeof why)) bs_die("%s", why);
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
