/* layer_split.h: how many decoder layers each pipeline stage holds.
 *
 * BALANCED is the planner's own placement (plan.c): the smallest slowest
 * stage within memory, so the stage with the output layer and loss gets
 * fewer layers when they are heavy. No framework does that by itself; each
 * places layers by a fixed rule, EVEN here:
 *   - Megatron-core builds num_layers / pp layers on every stage, and with
 *     interleaving num_layers / pp / vp in each of the pp x vp model chunks
 *     (megatron/core/transformer/transformer_block.py,
 *     get_num_layers_to_build), whatever the output layer costs, unless the
 *     configuration sets num_layers_in_first_pipeline_stage /
 *     num_layers_in_last_pipeline_stage (then those, and the rest evenly
 *     over the middle stages);
 *   - DeepSpeed's PipelineModule with partition_method "type:transformer",
 *     which Megatron-DeepSpeed's GPTModelPipe passes: the transformer layers
 *     uniformly over the stages; BLOOM's "type:transformer|embedding"
 *     counts the two embedding layers as layers too, so its first and last
 *     stages hold one transformer layer fewer (first/last below);
 *   - torchtitan's generate_split_points (no split points given): stage 0
 *     and the last stage get layers / stages, the middle stages one more
 *     each while the remainder lasts (first/last below, per rank);
 *   - Llama 3 (section 3.3.2): one layer fewer on the first and last stages.
 * first and last (0: as the middle stages) are the layers on pipeline
 * stage 0 and stage pp - 1; the middle stages share the rest evenly. */
#ifndef BS_PLAN_LAYER_SPLIT_H
#define BS_PLAN_LAYER_SPLIT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    bool even;       /* false: BALANCED */
    int first, last; /* EVEN: layers on the first and last stage (0: as the middle) */
} LayerSplit;

/* The EVEN split of `layers` over `pp` stages: the first, a middle and the
 * last stage's layers (all three the same stage's when pp is 1). False with
 * a one-line reason naming the flag when they are not whole layers, or when
 * interleaving with `v` chunks needs whole layers per chunk (Megatron-core's
 * uniform split: checked only without first/last). */
bool layer_split_even(const LayerSplit *s, int layers, int pp, int v, int *first, int *middle, int *last, char *why,
                      size_t n);

#endif
