/* train_config.c: the configuration's words and its checks before any
 * process group exists (see train_config.h). */
#include "train/train_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/model_file.h"

const char *const TRAIN_PRECISION_WORDS[] = {"fp32", "bf16", "fp8", NULL};
const char *const TRAIN_DEVICE_WORDS[] = {"cpu", "cuda", "sim", NULL};
const char *const TRAIN_BF16_MATMUL_WORDS[] = {"auto", "onednn", "widen", NULL};
const char *const TRAIN_DATA_ORDER_WORDS[] = {"shuffled", "sequential", NULL};
const char *const TRAIN_MOE_ROUTER_WORDS[] = {"softmax", "sigmoid", NULL};
const char *const TRAIN_MOE_GATES_WORDS[] = {"auto", "normalized", "unnormalized", "pre-softmax", NULL};
const char *const TRAIN_OPTIMIZER_WORDS[] = {"adamw", "sgd", "lamb", "lars", "onebit-adam", NULL};
const char *const TRAIN_LR_SCALING_WORDS[] = {"none", "linear", "sqrt", NULL};
const char *const TRAIN_PP_SCHEDULE_WORDS[] = {"gpipe", "1f1b", "interleaved", "zbh1", NULL};
const char *const TRAIN_COMM_ALGO_WORDS[] = {"mpi", "ring", "hierarchical", NULL};
const char *const TRAIN_CP_ALGO_WORDS[] = {"ring", "allgather", NULL};
const char *const TRAIN_CP_SPLIT_WORDS[] = {"zigzag", "contiguous", NULL};
const char *const TRAIN_OUTER_OPTIMIZER_WORDS[] = {"nesterov", "sgd", "avg", NULL};
const char *const TRAIN_DOC_MASK_WORDS[] = {"auto", "on", "off", NULL};
const char *const TRAIN_BASE_WEIGHTS_WORDS[] = {"fp32", "bf16", "int8", "nf4", NULL};
const char *const TRAIN_GOODPUT_ESTIMATOR_WORDS[] = {"simple", "precond", "curvature", "curvature-precond", "probe",
                                                     "probe-precond", NULL};
const char *const TRAIN_FP8_RECIPE_WORDS[] = {"delayed", "block", NULL};
const char *const TRAIN_FP8_AMAX_ALGO_WORDS[] = {"max", "most_recent", NULL};
const char *const TRAIN_FP8_HIGH_PRECISION_WORDS[] = {"fp32", "bf16", NULL};

/* Context parallelism: the sequence's chunks, and what does not compose with it yet. */
static bool check_context(const TrainConfig *c, char *why, size_t n) {
    if (c->cp <= 1) return true;
    const int chunk = c->seq_len / (2 * c->cp);
    const char *refused = c->balance ? "--balance"
                          : strcmp(c->grad_compression, "none") != 0 || c->zero_quant_grads ? "--grad-compression"
                          : c->optimizer == OPTIM_ONEBIT_ADAM ? "--optimizer onebit-adam"
                          : c->noise_scale || strncmp(c->batch_schedule, "adaptive", 8) == 0 ||
                                    strncmp(c->batch_schedule, "goodput", 7) == 0 ? "--noise-scale"
                          : NULL;
    if (c->seq_len % (2 * c->cp) != 0)
        snprintf(why, n, "--seq-len %d is not a multiple of 2 x --cp %d (each sequence is cut into 2 cp chunks)",
                 c->seq_len, c->cp);
    else if (chunk < ATTENTION_ROW_BLOCK)
        snprintf(why, n, "--cp %d cuts --seq-len %d into chunks of %d tokens, shorter than one attention row block "
                 "(%d): use --seq-len %d or more, or a smaller --cp", c->cp, c->seq_len, chunk, ATTENTION_ROW_BLOCK,
                 2 * c->cp * ATTENTION_ROW_BLOCK);
    else if (refused)
        snprintf(why, n, "%s with --cp is not supported yet (its statistics are per rank, and context-parallel ranks "
                 "hold parts of one sequence)", refused);
    else if (c->doc_mask == DOC_MASK_ON)
        snprintf(why, n, "--doc-mask on with --cp is not supported yet (documents would have to be found across the "
                 "context-parallel ranks' chunks)");
    return why[0] == 0;
}

/* The pipeline flags as far as they are known without the process count. */
static bool check_pipeline(const TrainConfig *c, char *why, size_t n) {
    const char *name = TRAIN_PP_SCHEDULE_WORDS[c->pp_schedule];
    if ((c->pp_schedule == PIPE_ZBH1 || c->pp_schedule == PIPE_INTERLEAVED) && c->pp == 1) {
        snprintf(why, n, "--pp-schedule %s needs --pp 2 or more (with one stage there is no pipeline to schedule)",
                 name);
        return false;
    }
    if (c->virtual_stages > 1 && c->pp_schedule != PIPE_INTERLEAVED) {
        snprintf(why, n, "--virtual-stages %d needs --pp-schedule interleaved (got %s)", c->virtual_stages, name);
        return false;
    }
    if (c->pp_schedule == PIPE_INTERLEAVED && c->virtual_stages < 2) {
        snprintf(why, n, "--pp-schedule interleaved needs --virtual-stages 2 or more");
        return false;
    }
    if (c->virtual_stages > 1 && !c->pp_split[0] && c->layers % (c->pp * c->virtual_stages) != 0) {
        snprintf(why, n, "--virtual-stages %d does not divide the layers of each pipeline stage (--layers %d over "
                 "--pp %d: each stage's layers are split into %d equal chunks)", c->virtual_stages, c->layers, c->pp,
                 c->virtual_stages);
        return false;
    }
    return true;
}

/* What the layers below need of each other's flags. */
static bool check_combinations(const TrainConfig *c, char *why, size_t n) {
    if (c->min_lr > c->lr) {
        snprintf(why, n, "--min-lr %g is larger than --lr %g", c->min_lr, c->lr);
        return false;
    }
    const bool bf16 = c->precision == PRECISION_BF16 ||
                      (c->precision == PRECISION_FP8 && c->fp8_high_precision == PRECISION_BF16);
    if (bf16 && c->bf16_matmul == MATMUL_BF16_ONEDNN && !matmul_bf16_onednn_available()) {
        snprintf(why, n, "--bf16-matmul onednn: oneDNN has no bf16 matmul on this CPU (its ISA: %s; it needs "
                 "AVX-512): use auto or widen", matmul_bf16_cpu_isa());
        return false;
    }
    if (c->outlier_scale != 0 && c->zero >= 3) {
        snprintf(why, n, "--outlier-scale needs each rank's parameters whole: not with --zero 3");
        return false;
    }
    if (c->balance && c->zero >= 2) {
        snprintf(why, n, "--balance needs --zero 0 or 1: ZeRO 2 and 3 reduce every micro-step, so every replica must "
                 "run the same number");
        return false;
    }
    if (c->balance && (strncmp(c->batch_schedule, "adaptive", 8) == 0 || strncmp(c->batch_schedule, "goodput", 7) == 0)) {
        snprintf(why, n, "--balance and --batch-schedule %s cannot be combined yet",
                 strncmp(c->batch_schedule, "goodput", 7) == 0 ? "goodput" : "adaptive");
        return false;
    }
    if (c->balance && c->pp_schedule == PIPE_INTERLEAVED) {
        snprintf(why, n, "--balance and --pp-schedule interleaved cannot be combined: --balance changes each "
                 "replica's micro-batches with its measured speed, and interleaving needs a multiple of --pp");
        return false;
    }
    if (c->goodput_noise_scale > 0 && strncmp(c->batch_schedule, "goodput", 7) != 0) {
        snprintf(why, n, "--goodput-noise-scale needs --batch-schedule goodput:MIN:MAX (got %s)", c->batch_schedule);
        return false;
    }
    if (c->goodput_noise_curve && *c->goodput_noise_curve &&
        (strncmp(c->batch_schedule, "goodput", 7) != 0 || c->goodput_noise_scale > 0)) {
        snprintf(why, n, "--goodput-noise-curve needs --batch-schedule goodput:MIN:MAX and no --goodput-noise-scale "
                 "(got --batch-schedule %s%s)", c->batch_schedule, c->goodput_noise_scale > 0 ? " and one" : "");
        return false;
    }
    if (c->goodput_temperature && strncmp(c->batch_schedule, "goodput", 7) != 0) {
        snprintf(why, n, "--goodput-temperature needs --batch-schedule goodput:MIN:MAX (got %s)", c->batch_schedule);
        return false;
    }
    const bool resume = c->resume && *c->resume;
    if (c->resume_new_batch && (!resume || strcmp(c->batch_schedule, "constant") != 0)) {
        snprintf(why, n, "--resume-new-batch needs --resume DIR and --batch-schedule constant (got %s%s)",
                 resume ? "--batch-schedule " : "no --resume", resume ? c->batch_schedule : "");
        return false;
    }
    if (c->virtual_stages > 1 && (strcmp(c->grad_compression, "none") != 0 || c->zero_quant_grads)) {
        snprintf(why, n, "--virtual-stages with --grad-compression or --zero-quant-grads is not supported yet (the "
                 "error-feedback residuals are per chunk)");
        return false;
    }
    return true;
}

/* LoRA: its flags need --lora-rank; what it does not compose with (the engine checks the layout). */
static bool check_lora(const TrainConfig *c, char *why, size_t n) {
    int mask;
    if (c->lora_rank == 0) {
        const char *flag = c->lora_init && *c->lora_init ? "--lora-init" : c->lora_merge ? "--lora-merge"
                           : c->save_adapters && *c->save_adapters ? "--save-adapters"
                           : c->base_weights != BASE_WEIGHTS_FP32 ? "--base-weights"
                           : c->lora_dropout > 0 ? "--lora-dropout" : NULL;
        if (flag) snprintf(why, n, "%s needs --lora-rank R (LoRA adapters to train)", flag);
        return !flag;
    }
    if (!lora_parse_targets(c->lora_targets, &mask, why, n)) return false;
    if (c->optimizer == OPTIM_ONEBIT_ADAM) {
        snprintf(why, n, "--lora-rank with --optimizer onebit-adam is not supported yet");
        return false;
    }
    return true;
}

static bool check_local_steps(const TrainConfig *c, char *why, size_t n) {
    if (c->local_steps_jitter > 0 && c->local_steps == 0) {
        snprintf(why, n, "--local-steps-jitter needs --local-steps H (DiLoCo/FedAvg windows)");
        return false;
    }
    return true;
}

bool train_capacity_factor(const TrainConfig *c, double *factor, char *why, size_t n) {
    *factor = 0;
    if (!c->capacity_factor || !*c->capacity_factor) return true;
    char *end;
    double f = strtod(c->capacity_factor, &end);
    if (*end || !(f > 0 && isfinite(f))) {
        snprintf(why, n, "--capacity-factor must be a number > 0 (got %s); --dropless never drops", c->capacity_factor);
        return false;
    }
    *factor = f;
    return true;
}

/* What an MoE model does not compose with yet: one line each. */
static const char *moe_refusal(const TrainConfig *c) {
    return c->pp > 1 && c->pp_schedule == PIPE_ZBH1 ? "--pp-schedule zbh1 (the split backward does not train MoE layers)"
           : c->cp > 1 && c->capacity_factor && *c->capacity_factor
               ? "--cp and --capacity-factor (a sequence's capacity decision would span its context-parallel "
                 "ranks; --dropless works)"
           : c->zero == 3 ? "--zero 3 (use --zero 0, 1 or 2)"
           : c->precision != PRECISION_FP32 ? "--precision bf16 or fp8 (MoE layers train in fp32)"
           : c->lora_rank > 0 ? "--lora-rank"
           : c->balance ? "--balance (every replica runs the same micro-steps: the MoE statistics are summed per micro-step)"
           : c->local_steps > 0 ? "--local-steps (DiLoCo workers would share routing statistics every micro-step)"
           : (c->save_model && *c->save_model && !model_file_is_safetensors_name(c->save_model))
               ? "--save-model to an llm.c file (it holds a dense GPT-2: give a name ending in .safetensors)"
           : NULL;
}

static bool check_moe(const TrainConfig *c, char *why, size_t n) {
    double factor;
    if (!train_capacity_factor(c, &factor, why, n)) return false;
    if (c->experts <= 1) {
        const char *flag = factor > 0 ? "--capacity-factor" : c->dropless ? "--dropless"
                           : c->moe_bias_update > 0 ? "--moe-bias-update" : c->ep > 1 ? "--ep"
                           : c->moe_skew != 1 ? "--moe-skew" : c->moe_every != 1 ? "--moe-every"
                           : c->moe_gates != 0 ? "--moe-gates" : c->moe_routed_scale != 1 ? "--moe-routed-scale"
                           : NULL;
        if (flag) snprintf(why, n, "%s needs --experts E (E > 1: a Mixture-of-Experts model)", flag);
        return !flag;
    }
    const char *no = moe_refusal(c);
    if (no) snprintf(why, n, "--experts %d does not work with %s", c->experts, no);
    else if (c->moe_every > c->layers)
        snprintf(why, n, "--moe-every %d is more than --layers %d: no layer would be MoE (layer l is when (l + 1) %% "
                 "%d == 0)", c->moe_every, c->layers, c->moe_every);
    else if (c->ep > 1 && c->experts % c->ep != 0)
        snprintf(why, n, "--ep %d must divide --experts %d (each EP rank holds experts / ep of them)", c->ep,
                 c->experts);
    else if (c->tp > 1 && (c->moe_ffn > 0 ? c->moe_ffn : 4 * c->channels) % c->tp != 0)
        snprintf(why, n, "--tp %d does not divide --moe-ffn %d (tensor parallelism splits each expert's hidden units)",
                 c->tp, c->moe_ffn > 0 ? c->moe_ffn : 4 * c->channels);
    else if (c->moe_top_k > c->experts)
        snprintf(why, n, "--moe-top-k %d must be at most --experts %d", c->moe_top_k, c->experts);
    else if (c->dropless && factor > 0)
        snprintf(why, n, "--dropless and --capacity-factor %s contradict each other (dropless never drops)",
                 c->capacity_factor);
    else
        return true;
    return false;
}

int train_moe_gates(const TrainConfig *c) { return c->moe_gates > 0 ? c->moe_gates - 1 : (int)moe_default_gates(c->moe_top_k); }

/* --device cuda|sim runs the plain step of one process for now (model/gpt_device.h). */
static bool check_device(const TrainConfig *c, char *why, size_t n) {
    if (c->sim_memory_mb > 0 && c->device != TRAIN_DEVICE_SIM) {
        snprintf(why, n, "--sim-memory needs --device sim (got --device %s)", TRAIN_DEVICE_WORDS[c->device]);
        return false;
    }
    if (c->device == TRAIN_DEVICE_CPU) return true;
    const char *flag = c->precision != PRECISION_FP32 ? "--precision bf16 or fp8"
                       : c->optimizer != OPTIM_ADAMW ? "--optimizer other than adamw"
                       : c->tp > 1 || c->pp > 1 || c->cp > 1 || c->virtual_stages > 1 ? "--tp, --pp, --cp or --virtual-stages"
                       : c->experts > 1 ? "--experts" : c->lora_rank > 0 ? "--lora-rank"
                       : c->local_steps > 0 ? "--local-steps" : c->noise_scale || c->noise_scale_every > 0 ? "--noise-scale"
                       : strncmp(c->batch_schedule, "adaptive", 8) == 0 || strncmp(c->batch_schedule, "goodput", 7) == 0
                           ? "--batch-schedule adaptive or goodput"
                       : strcmp(c->grad_compression, "none") != 0 ? "--grad-compression"
                       : c->outlier_scale != 0 ? "--outlier-scale"
                       : c->inject_fault && strncmp(c->inject_fault, "nan", 3) == 0 ? "--inject-fault nan (host gradients)"
                       : NULL;
    if (flag) snprintf(why, n, "--device %s does not work with %s yet (the device runs fp32 AdamW on one process)",
                       TRAIN_DEVICE_WORDS[c->device], flag);
    return !flag;
}

bool train_config_check(const TrainConfig *c, char *why, size_t why_size) {
    why[0] = 0;
    if (!check_local_steps(c, why, why_size)) return false;
    return check_combinations(c, why, why_size) && check_pipeline(c, why, why_size) &&
           check_context(c, why, why_size) && check_lora(c, why, why_size) && check_moe(c, why, why_size) &&
           check_device(c, why, why_size);
}
