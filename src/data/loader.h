/* loader.h: deterministic, resumable access to training sequences.
 *
 * The shards are cut into windows of T+1 tokens at stride T (a window never
 * crosses a shard boundary). Sequence number s (counted from the start of
 * training over all ranks) maps to window perm_e[s mod W] of epoch e = s / W,
 * where perm_e is a seeded shuffle (or the identity with shuffle off). The
 * loader keeps no position of its own: the trainer's count of consumed
 * sequences is the position, so resuming or re-splitting the global batch
 * over another number of ranks reads exactly the same sequences.
 *
 * Shards with loss masks (data/loss_mask.h: SFT data; all of a source's
 * shards or none) give target -1 where the loss does not count. */
#ifndef BS_DATA_LOADER_H
#define BS_DATA_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/loss_mask.h"
#include "data/shard.h"

typedef struct {
    int num_shards;
    TokenShard *shards;
    size_t *first_window; /* first_window[i] = windows in shards before i; [num_shards] = total */
    size_t num_windows;
    size_t num_tokens;
    int T;
    uint64_t seed;
    bool shuffle;
    uint32_t *perm; /* permutation of the current epoch (shuffle only) */
    uint64_t perm_epoch;
    LossMask *masks; /* per shard, NULL when the source has none */
    uint16_t *window; /* the T+1 tokens of the sequence being read (shard_read) */
} DataLoader;

/* source: a shard file, a directory (its *.bin files, sorted), or a glob. */
void loader_open(DataLoader *loader, const char *source, int T, int vocab_size, uint64_t seed, bool shuffle);
void loader_close(DataLoader *loader);
/* Whether the source's shards have loss masks (its first shard has one). */
bool loader_has_masks(const char *source);
/* inputs/targets: T tokens each (targets shifted by one; -1 where masked). */
void loader_sequence(DataLoader *loader, uint64_t seq, int32_t *inputs, int32_t *targets);
/* The targets the loss counts in sequences [first, first + n): n T without masks. */
uint64_t loader_counted(DataLoader *loader, uint64_t first, uint64_t n);

#endif
