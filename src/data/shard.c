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

/* Reads bytes at offset of fd into dst, all of them (false: an error, or with errno 0 the file ended). */
static bool read_at(int fd, void *dst, size_t bytes, size_t offset) {
    for (size_t done = 0; done < bytes;) {
        const ssize_t got = pread(fd, (char *)dst + done, bytes - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got == 0) errno = 0;
        if (got <= 0) return false;
        done += (size_t)got;
    }
    return true;
}

/* The vocabulary check over count tokens, read through a buffer (the mapping stays untouched): "" when every
 * token is below vocab_size, else the reason. */
static void check_vocabulary(int fd, const char *path, size_t count, int vocab_size, char *why, size_t why_size) {
    enum { CHUNK = 1 << 15 };
    uint16_t buf[CHUNK];
    why[0] = '\0';
    for (size_t first = 0; first < count && !why[0]; first += CHUNK) {
        const size_t n = count - first < CHUNK ? count - first : CHUNK;
        if (!read_at(fd, buf, n * sizeof(uint16_t), SHARD_HEADER_INTS * sizeof(int32_t) + first * sizeof(uint16_t))) {
            snprintf(why, why_size, "cannot read token shard %s: %s", path, errno ? strerror(errno) : "it ended early");
            return;
        }
        for (size_t i = 0; i < n; i++)
            if (buf[i] >= vocab_size) {
                snprintf(why, why_size,
                         "%s: token %u at position %zu is outside the vocabulary (size %d); was it prepared with "
                         "another tokenizer?", path, buf[i], first + i, vocab_size);
                return;
            }
    }
}

/* The header's checks against the file's size: "" when it is a shard of count tokens, else the reason. */
static void check_header(const int32_t *header, const char *path, size_t bytes, char *why, size_t why_size) {
    const size_t header_bytes = SHARD_HEADER_INTS * sizeof(int32_t), count = header[2] < 0 ? 0 : (size_t)header[2];
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
}

/* Every check of shard_open, returning the reason instead of dying. The
 * checks read the file through a buffer, so a process that then reads a few
 * windows (shard_read) never holds the shard's pages in its resident memory
 * (a read through the mapping maps whole page-cache folios around it). */
bool shard_try_open(TokenShard *shard, const char *path, int vocab_size, char *why, size_t why_size) {
    memset(shard, 0, sizeof *shard);
    shard->fd = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(why, why_size, "cannot open token shard %s: %s%s", path, strerror(errno),
                 errno == EMFILE ? " (each shard stays open while training reads it: raise ulimit -n)" : "");
        return false;
    }
    struct stat st = {0};
    int32_t header[SHARD_HEADER_INTS] = {0};
    why[0] = '\0';
    if (fstat(fd, &st) != 0)
        snprintf(why, why_size, "cannot stat token shard %s: %s", path, strerror(errno));
    else if ((size_t)st.st_size < sizeof header)
        snprintf(why, why_size, "%s is not a token shard: %zu bytes, shorter than the 1024-byte header", path,
                 (size_t)st.st_size);
    else if (!read_at(fd, header, sizeof header, 0))
        snprintf(why, why_size, "cannot read token shard %s: %s", path, errno ? strerror(errno) : "it ended early");
    else
        check_header(header, path, (size_t)st.st_size, why, why_size);
    const size_t bytes = (size_t)st.st_size, count = why[0] ? 0 : (size_t)header[2];
    if (!why[0] && vocab_size > 0) check_vocabulary(fd, path, count, vocab_size, why, why_size);
    void *map = why[0] ? MAP_FAILED : mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (!why[0] && map == MAP_FAILED) snprintf(why, why_size, "cannot map token shard %s: %s", path, strerror(errno));
    if (why[0]) {
        close(fd);
        return false;
    }
    shard->path = strdup(path);
    shard->fd = fd;
    shard->map = map;
    shard->map_bytes = bytes;
    shard->tokens = (const uint16_t *)((const char *)map + sizeof header);
    shard->num_tokens = count;
    return true;
}

void shard_read(const TokenShard *shard, size_t first, size_t n, uint16_t *dst) {
    if (first > shard->num_tokens || n > shard->num_tokens - first)
        bs_die("internal: tokens %zu..%zu of %s, which holds %zu", first, first + n, shard->path, shard->num_tokens);
    if (!read_at(shard->fd, dst, n * sizeof(uint16_t), SHARD_HEADER_INTS * sizeof(int32_t) + first * sizeof(uint16_t)))
        bs_die("cannot read token shard %s: %s", shard->path, errno ? strerror(errno) : "it ended early");
}

void shard_open(TokenShard *shard, const char *path, int vocab_size) {
    char why[4400];
    if (!shard_try_open(shard, path, vocab_size, why, sizeof why)) bs_die("%s", why);
}

void shard_close(TokenShard *shard) {
    if (shard->map) munmap(shard->map, shard->map_bytes);
    if (shard->path) close(shard->fd);
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
