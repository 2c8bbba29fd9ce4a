/* loss_mask.c: loss masks beside token shards (see loss_mask.h). */
#include "data/loss_mask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

void loss_mask_path(char *out, size_t n, const char *shard_path) {
    size_t len = strlen(shard_path);
    if (len > 4 && strcmp(shard_path + len - 4, ".bin") == 0) len -= 4;
    snprintf(out, n, "%.*s.mask", (int)len, shard_path);
}

bool loss_mask_open(LossMask *mask, const char *shard_path, size_t num_tokens) {
    memset(mask, 0, sizeof *mask);
    char path[4200];
    loss_mask_path(path, sizeof path, shard_path);
    if (!bs_path_exists(path)) return false;
    size_t len;
    mask->counted = (uint8_t *)bs_read_file(path, &len);
    if (len != num_tokens)
        bs_die("%s holds %zu bytes but its shard %s has %zu tokens (one byte per token)", path, len, shard_path,
               num_tokens);
    for (size_t i = 0; i < len; i++)
        if (mask->counted[i] > 1) bs_die("%s is corrupt: byte %zu is %d (a loss mask holds 0 or 1)", path, i, mask->counted[i]);
    mask->num_tokens = len;
    return true;
}

void loss_mask_free(LossMask *mask) {
    free(mask->counted);
    memset(mask, 0, sizeof *mask);
}

void loss_mask_write(const char *shard_path, const uint8_t *counted, size_t num_tokens) {
    char path[4200];
    loss_mask_path(path, sizeof path, shard_path);
    bs_write_file_atomic(path, counted, num_tokens);
}
