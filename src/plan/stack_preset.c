/* stack_preset.c: the stack presets' table (values and sources:
 * docs/reference/stacks.md) and its lookup. A version names the release (or,
 * for stacks without numbered releases, the month) from which the defaults
 * hold; a later version is listed when a default changed. */
#include "plan/stack_preset.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "plan/layout.h"

#define BIT(x) (1u << (x))
#define ZERO_0 BIT(0)
#define ZERO_0_1 (BIT(0) | BIT(1))
#define ZERO_0_1_2 (BIT(0) | BIT(1) | BIT(2))
#define ZERO_0_1_3 (BIT(0) | BIT(1) | BIT(3))
#define ZERO_FSDP (BIT(0) | BIT(2) | BIT(3)) /* NO_SHARD, SHARD_GRAD_OP, FULL_SHARD */
#define RC_NONE_FULL (BIT(RECOMPUTE_NONE) | BIT(RECOMPUTE_FULL))
#define RC_MEGATRON (BIT(RECOMPUTE_NONE) | BIT(RECOMPUTE_SELECTIVE) | BIT(RECOMPUTE_FULL))
#define RC_TORCHTITAN (BIT(RECOMPUTE_NONE) | BIT(RECOMPUTE_FULL) | BIT(RECOMPUTE_OP))

/* Megatron-LM's training script before Megatron-core (the versions add sequence parallelism and recomputation). */
#define MEGATRON_LM                                                                                                   \
    [SWITCH_TP_OVERLAP] = "off", [SWITCH_PP_OVERLAP] = "off", [SWITCH_OVERLAP] = "off", [SWITCH_ZERO] = "0",           \
    [SWITCH_ATTENTION] = "full",                                                                                      \
    [SWITCH_GRAD_REDUCE] = "weights", [SWITCH_PIPELINE_ENGINE] = "megatron", [SWITCH_LAYER_SPLIT] = "even",            \
    [SWITCH_RANK_ORDER] = "tp-cp-ep-dp-pp"

/* Megatron-core under Megatron-LM's pretrain_gpt.py: its argument defaults and example configuration. */
#define MEGATRON_CORE                                                                                                 \
    [SWITCH_TP_OVERLAP] = "off", [SWITCH_PP_OVERLAP] = "on", [SWITCH_OVERLAP] = "off",                                 \
    [SWITCH_SEQUENCE_PARALLEL] = "on", [SWITCH_RECOMPUTE] = "none", [SWITCH_ZERO] = "0", [SWITCH_ATTENTION] = "flash", \
    [SWITCH_GRAD_REDUCE] = "fp32", [SWITCH_PIPELINE_ENGINE] = "megatron", [SWITCH_LAYER_SPLIT] = "even",            \
    [SWITCH_ZERO1_REDUCE] = "reduce-scatter", [SWITCH_RANK_ORDER] = "tp-cp-ep-dp-pp", [SWITCH_CP_ALGO] = "ring"

/* NeMo's recipes over Megatron-core: a distributed optimizer with overlapped
 * reduction, sequence parallelism, TP communication overlap. */
#define NEMO                                                                                                          \
    [SWITCH_TP_OVERLAP] = "on", [SWITCH_PP_OVERLAP] = "on", [SWITCH_OVERLAP] = "on",                                   \
    [SWITCH_SEQUENCE_PARALLEL] = "on", [SWITCH_RECOMPUTE] = "none", [SWITCH_ATTENTION] = "flash",                      \
    [SWITCH_GRAD_REDUCE] = "fp32", [SWITCH_PIPELINE_ENGINE] = "megatron", [SWITCH_LAYER_SPLIT] = "even",               \
    [SWITCH_ZERO1_REDUCE] = "reduce-scatter", [SWITCH_RANK_ORDER] = "tp-cp-ep-dp-pp", [SWITCH_CP_ALGO] = "ring"

/* Megatron-DeepSpeed: Megatron's layers, DeepSpeed's PipelineEngine. */
#define DEEPSPEED_PIPE                                                                                                \
    [SWITCH_TP_OVERLAP] = "off", [SWITCH_PP_OVERLAP] = "off", [SWITCH_OVERLAP] = "off",                                \
    [SWITCH_SEQUENCE_PARALLEL] = "off", [SWITCH_RECOMPUTE] = "full", [SWITCH_ATTENTION] = "full",                      \
    [SWITCH_PIPELINE_ENGINE] = "deepspeed", [SWITCH_LAYER_SPLIT] = "even", [SWITCH_RANK_ORDER] = "tp-cp-ep-dp-pp"

/* torchtitan: FSDP2 over dp x cp, SDPA, torchao Float8, FP32 reduction. */
#define TORCHTITAN                                                                                                    \
    [SWITCH_TP_OVERLAP] = "off", [SWITCH_OVERLAP] = "on", [SWITCH_SEQUENCE_PARALLEL] = "on",                           \
    [SWITCH_RECOMPUTE] = "op", [SWITCH_ZERO] = "3", [SWITCH_GRAD_REDUCE] = "fp32", [SWITCH_RANK_ORDER] = "tp-cp-ep-dp-pp", \
    [SWITCH_FP8_LINEARS] = "torchao", [SWITCH_CP_ALGO] = "allgather"

static const StackPreset PRESETS[] = {
    {"megatron-lm", "2021", "Megatron-LM v2 (Narayanan et al. 2021): materialized attention, full recomputation, no ZeRO",
     {MEGATRON_LM, [SWITCH_SEQUENCE_PARALLEL] = "off", [SWITCH_RECOMPUTE] = "full"}, ZERO_0, RC_NONE_FULL, false, true, false, true},
    {"megatron-lm", "2022", "Megatron-LM v3 (Korthikanti et al. 2022): sequence parallelism, selective recomputation, distributed optimizer",
     {MEGATRON_LM, [SWITCH_SEQUENCE_PARALLEL] = "on", [SWITCH_RECOMPUTE] = "selective",
      [SWITCH_ZERO1_REDUCE] = "reduce-scatter"},
     ZERO_0_1, RC_MEGATRON, false, true, false, true},
    {"megatron-core", "0.12", "Megatron-LM with Megatron-core, its argument defaults (TE attention, FP8 delayed scaling)",
     {MEGATRON_CORE, [SWITCH_FP8_LINEARS] = "te-delayed", [SWITCH_MOE_PROBS] = "combine"}, ZERO_0_1, RC_MEGATRON, true, true, true, true},
    {"megatron-core", "0.13", "Megatron-core 0.13 on: MoE routing probabilities in the experts' activation",
     {MEGATRON_CORE, [SWITCH_FP8_LINEARS] = "te-delayed", [SWITCH_MOE_PROBS] = "activation"}, ZERO_0_1, RC_MEGATRON, true,
     true, true, true},
    {"nemo", "24.07", "NeMo Framework Launcher recipes (NeMo 1, Megatron-core < 0.13, FP8 delayed scaling)",
     {NEMO, [SWITCH_ZERO] = "2", [SWITCH_FP8_LINEARS] = "te-delayed", [SWITCH_MOE_PROBS] = "combine"}, ZERO_0_1_2,
     RC_MEGATRON, true, true, true, true},
    {"nemo", "25.09", "Megatron-Bridge recipes (NeMo 25.09 on, Megatron-core >= 0.14, FP8 current scaling)",
     {NEMO, [SWITCH_ZERO] = "1", [SWITCH_FP8_LINEARS] = "te", [SWITCH_MOE_PROBS] = "activation"}, ZERO_0_1_3,
     RC_MEGATRON, true, true, true, true},
    {"deepspeed", "0.5", "Megatron-DeepSpeed on DeepSpeed's PipelineEngine, ZeRO off unless configured (MT-NLG)",
     {DEEPSPEED_PIPE, [SWITCH_ZERO] = "0", [SWITCH_GRAD_REDUCE] = "weights", [SWITCH_ZERO1_REDUCE] = "reduce-scatter"},
     ZERO_0_1, RC_NONE_FULL, false, true, false, true},
    {"deepspeed", "0.6", "Megatron-DeepSpeed with DeepSpeed's BF16_Optimizer: partitioned, FP32 gradients all-reduced (BLOOM)",
     {DEEPSPEED_PIPE, [SWITCH_ZERO] = "1", [SWITCH_GRAD_REDUCE] = "fp32", [SWITCH_ZERO1_REDUCE] = "allreduce"}, ZERO_0_1,
     RC_NONE_FULL, false, true, false, true},
    {"llm-foundry", "2023.08", "Composer FSDP (FULL_SHARD, mixed precision DEFAULT) with FlashAttention-2, no pipeline",
     {[SWITCH_TP_OVERLAP] = "off", [SWITCH_OVERLAP] = "on", [SWITCH_SEQUENCE_PARALLEL] = "off", [SWITCH_RECOMPUTE] = "none",
      [SWITCH_ZERO] = "3", [SWITCH_ATTENTION] = "flash2", [SWITCH_GRAD_REDUCE] = "fp32", [SWITCH_FP8_LINEARS] = "te"},
     ZERO_FSDP, RC_NONE_FULL, true, false, false, false},
    {"torchtitan", "2024.12", "torchtitan on PyTorch 2.5-2.8: SDPA's flash backend (FlashAttention-2)",
     {TORCHTITAN, [SWITCH_ATTENTION] = "flash2"}, ZERO_FSDP, RC_TORCHTITAN, true, true, true, true},
    {"torchtitan", "2025.09", "torchtitan on PyTorch 2.9 on: SDPA's cuDNN backend first again on H100",
     {TORCHTITAN, [SWITCH_ATTENTION] = "flash"}, ZERO_FSDP, RC_TORCHTITAN, true, true, true, true},
};

static const char *const SWITCH_KEYS[SWITCH_COUNT] = {
    "tp_overlap", "pp_overlap",  "overlap",    "sequence_parallel", "recompute",   "zero",      "attention", "grad_reduce",
    "pipeline_engine", "layer_split", "zero1_reduce", "rank_order", "fp8_linears", "moe_probs", "cp_algo"};

const StackPreset *stack_presets(int *count) {
    *count = (int)(sizeof PRESETS / sizeof PRESETS[0]);
    return PRESETS;
}

const char *model_switch_key(ModelSwitch s) { return s >= 0 && s < SWITCH_COUNT ? SWITCH_KEYS[s] : "?"; }

bool stack_preset_find(const char *spec, const StackPreset **out, char *why, size_t n) {
    const char *at = strchr(spec, '@');
    size_t name_len = at ? (size_t)(at - spec) : strlen(spec);
    int count;
    const StackPreset *all = stack_presets(&count);
    *out = NULL;
    for (int i = 0; i < count; i++) {
        if (strlen(all[i].name) != name_len || strncasecmp(all[i].name, spec, name_len) != 0) continue;
        if (!at || strcasecmp(all[i].version, at + 1) == 0) *out = &all[i]; /* no version: the latest */
    }
    if (*out) return true;
    size_t used = (size_t)snprintf(why, n, "unknown stack '%s' (known:", spec);
    for (int i = 0; i < count && used < n; i++)
        used += (size_t)snprintf(why + used, n - used, " %s@%s", all[i].name, all[i].version);
    if (used < n) snprintf(why + used, n - used, ")");
    return false;
}
