/* moe_hooks.h: the model's expert-parallel MoE layer (model/gpt.h's
 * MoeExpertHooks) over parallel/moe_parallel.h: per layer and activation
 * set one MoeParallel over the EP group, each sequence its own capacity
 * group (so one process, which routes sequence by sequence, stays the
 * oracle). The all-to-all traffic is the EP group's (comm_stats). Not here:
 * the reduction of the gradients (the engine's). */
#ifndef BS_PARALLEL_MOE_HOOKS_H
#define BS_PARALLEL_MOE_HOOKS_H

#include "comm/comm.h"
#include "model/gpt.h"

typedef struct {
    MoeExpertHooks hooks; /* what the model calls; hooks.ctx is this */
    MoeConfig cfg;
    Comm *ep_group;
    Comm *tp_group; /* tensor parallelism over the experts' hidden units (size 1: none) */
    bool tp_lead;
} MoeEpContext;

/* Fills ctx for the MoE model shard cfg (its tensor-parallel slice of the
 * experts) over ep_group (experts divisible by its size) and tp_group. */
void moe_hooks_init(MoeEpContext *ctx, const GPTConfig *cfg, Comm *ep_group, Comm *tp_group);

#endif
