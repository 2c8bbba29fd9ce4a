/* micro_source.c: the sequences of a replica's micro-batch (see micro_source.h). */
#include "train/micro_source.h"

void micro_source_load(void *source, int micro, int32_t *inputs, int32_t *targets) {
    const MicroSource *src = source;
    const int B = src->micro_batch, T = src->seq_len;
    uint64_t start = src->replica_start >= 0
                         ? src->first + (uint64_t)src->replica_start + (uint64_t)micro * (uint64_t)B
                         : src->first + ((uint64_t)micro * (uint64_t)src->replicas + (uint64_t)src->replica) *
                                            (uint64_t)B;
    for (int b = 0; b < B; b++)
        loader_sequence(src->loader, start + (uint64_t)b, inputs + (size_t)b * T, targets + (size_t)b * T);
}
