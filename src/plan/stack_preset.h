/* stack_preset.h: what a training stack (Megatron-LM, Megatron-core, NeMo,
 * DeepSpeed's pipeline engine, Composer/llm-foundry, torchtitan) does by
 * default, in the planner's own modelling switches, and the part of the
 * layout search the stack can express (its ZeRO stages and recomputation
 * policies, whether it has a pipeline). Each value and its source in the
 * stack's code or documentation: docs/reference/stacks.md.
 *
 * Values are the planner's words ("on", "selective", "tp-cp-ep-dp-pp");
 * this file does not parse flags or apply the values (cli/ does). */
#ifndef BS_PLAN_STACK_PRESET_H
#define BS_PLAN_STACK_PRESET_H

#include <stdbool.h>
#include <stddef.h>

/* The modelling switches a preset sets and an answer accounts for. */
typedef enum {
    SWITCH_TP_OVERLAP,
    SWITCH_PP_OVERLAP,
    SWITCH_OVERLAP,
    SWITCH_SEQUENCE_PARALLEL,
    SWITCH_RECOMPUTE,
    SWITCH_ZERO,
    SWITCH_ATTENTION,
    SWITCH_GRAD_REDUCE,
    SWITCH_PIPELINE_ENGINE,
    SWITCH_LAYER_SPLIT,
    SWITCH_ZERO1_REDUCE,
    SWITCH_RANK_ORDER,
    SWITCH_FP8_LINEARS,
    SWITCH_MOE_PROBS,
    SWITCH_CP_ALGO,
    SWITCH_COUNT
} ModelSwitch;

typedef struct {
    const char *name;    /* "megatron-core" */
    const char *version; /* "0.13": the release from which these defaults hold */
    const char *what;    /* one line: which code and which runs */
    const char *value[SWITCH_COUNT]; /* the stack's default, in the planner's words; NULL: the planner's */
    unsigned zero_stages;            /* bit z: the stack can run ZeRO stage z (the search's space) */
    unsigned recompute_policies;     /* bit r (Recompute): the policies it can run */
    bool recompute_per_run;          /* the search picks the policy; value[SWITCH_RECOMPUTE] is the stack's
                                        own default, the reference a search's choice is compared with */
    bool tensor_parallel, context_parallel, pipeline; /* the parallelisms it has (without one, its degree is 1) */
} StackPreset;

/* "name" (its latest version) or "name@version"; false with a one-line
 * reason naming the known stacks. */
bool stack_preset_find(const char *spec, const StackPreset **out, char *why, size_t n);
/* Every preset, in order; *count gets their number. */
const StackPreset *stack_presets(int *count);
/* The switch's key in reports ("tp_overlap"). */
const char *model_switch_key(ModelSwitch s);

#endif
