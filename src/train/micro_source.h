/* micro_source.h: which sequences a micro-batch of this data-parallel
 * replica reads. Micro-batch i of replica d reads sequences
 * first + (i x replicas + d) x B + b (the replicas interleaved), or, with
 * --balance (train/balance.h), first + replica_start + i x B + b. */
#ifndef BS_TRAIN_MICRO_SOURCE_H
#define BS_TRAIN_MICRO_SOURCE_H

#include <stdint.h>

#include "data/loader.h"

typedef struct {
    DataLoader *loader;
    int micro_batch, seq_len;
    uint64_t first;        /* the batch's first sequence */
    int replicas, replica; /* data-parallel replicas; this one */
    int64_t replica_start; /* --balance: this replica's first sequence in the batch (-1: interleaved) */
} MicroSource;

/* The engine's PipeLoad (parallel/pipeline.h) over a MicroSource. */
void micro_source_load(void *source, int micro, int32_t *inputs, int32_t *targets);

#endif
