/* loss_mask.h: which tokens of a shard the loss counts (supervised
 * fine-tuning: the responses, not the prompts). The mask of X.bin is the
 * file X.mask beside it: one byte per token, 1 where predicting the token
 * counts, 0 where it does not. A shard without one counts every token. */
#ifndef BS_DATA_LOSS_MASK_H
#define BS_DATA_LOSS_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *counted; /* num_tokens bytes, 0 or 1 */
    size_t num_tokens;
} LossMask;

/* X.mask for the shard path X.bin. */
void loss_mask_path(char *out, size_t n, const char *shard_path);
/* The shard's mask if its file exists (false, nothing allocated, if not);
 * dies with one line naming the file if it is there but does not fit the
 * shard (size) or holds bytes other than 0 and 1. */
bool loss_mask_open(LossMask *mask, const char *shard_path, size_t num_tokens);
void loss_mask_free(LossMask *mask);
/* Writes X.mask atomically. */
void loss_mask_write(const char *shard_path, const uint8_t *counted, size_t num_tokens);

#endif
