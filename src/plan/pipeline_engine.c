/* pipeline_engine.c: pipeline sends per micro-batch by implementation (see
 * pipeline_engine.h). */
#include "plan/pipeline_engine.h"

#include <stddef.h>

const char *const PIPELINE_ENGINE_WORDS[] = {"megatron", "deepspeed", NULL};

double pipeline_sends_per_micro_batch(PipelineEngine engine, const Hardware *hw, double activation_bytes, Group tp,
                                      int v, bool same_node) {
    double part = activation_bytes / tp.n;
    if (engine == PIPE_ENGINE_MEGATRON) return 2.0 * v * p2p_time(hw, part, same_node);
    if (tp.n <= 1) return 4.0 * p2p_time(hw, activation_bytes, same_node);
    double send = p2p_time(hw, DEEPSPEED_META_BYTES, same_node) + p2p_time(hw, part, same_node);
    return 4.0 * send + 3.0 * collective_time(hw, COLL_ALLGATHER, activation_bytes, tp, NULL);
}
