/* train_config.c: the configuration's words and its checks before any
 * process group exists (see train_config.h). */
#include "train/train_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/flash_math.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/model_file.h"

const char *const TRAIN_PRECISION_WORDS[] = {"fp32", "bf16", "fp8", NULL};
const char *const TRAIN_DEVICE_WORDS[] = {"cpu", "cuda", "sim", NULL};
const char *const TRAIN_ATTENTION_WORDS[] = {"auto", "causal", "flash2", NULL};
const char *const TRAIN_BF16_MATMUL_WORDS[] = {"auto", "onednn", "widen", NULL};
const char *const TRAIN_DATA_ORDER_WORDS[] = {"shuffled", "sequential", NULL};
const char *const TRAIN_MOE_ROUTER_WORDS[] = {"softmax", "sigmoid", NULL};
const char *const TRAIN_MOE_GATES_WORDS[] = {"auto", "normalized", "unnormalized", "pre-softmax", NULL};
const char *const TRAIN_OPTIMIZER_WORDS[] = {"adamw", "sgd", "lamb", "lars", "onebit-adam", NULL};
const char *const TRAIN_LR_SCALING_WORDS[] = {"none", "linear", "sqrt", NULL};
const char *const TRAIN_PP_SCHEDULE_WORDS[] = {"gpipe", "1f1b", "interleaved", "zbh1", NULL};
const char *const TRAIN_COMM_ALGO_WORDS[] = {"mpi", "ring", "hierarchical", NULL};
const char *const TRAIN_GPU_COMM_WORDS[] = {"auto", "nccl", "host", NULL};
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
    if (c->parallel.cp <= 1) return true;
    const int chunk = c->model.seq_len / (2 * c->parallel.cp);
    const char *refused = c->guards.balance ? "--balance"
                          : strcmp(c->compression.codec, "none") != 0 || c->parallel.zero_quant_grads ? "--grad-compression"
                          : c->optim.kind == OPTIM_ONEBIT_ADAM ? "--optimizer onebit-adam"
                          : c->estimators.noise_scale || strncmp(c->batch.schedule, "adaptive", 8) == 0 ||
                                    strncmp(c->batch.schedule, "goodput", 7) == 0 ? "--noise-scale"
                          : NULL;
    if (c->model.seq_len % (2 * c->parallel.cp) != 0)
        snprintf(why, n, "--seq-len %d is not a multiple of 2 x --cp %d (each sequence is cut into 2 cp chunks)",
                 c->model.seq_len, c->parallel.cp);
    else if (chunk < ATTENTION_ROW_BLOCK)
        snprintf(why, n, "--cp %d cuts --seq-len %d into chunks of %d tokens, shorter than one attention row block "
                 "(%d): use --seq-len %d or more, or a smaller --cp", c->parallel.cp, c->model.seq_len, chunk, ATTENTION_ROW_BLOCK,
                 2 * c->parallel.cp * ATTENTION_ROW_BLOCK);
    else if (refused)
        snprintf(why, n, "%s with --cp is not supported yet (its statistics are per rank, and context-parallel ranks "
                 "hold parts of one sequence)", refused);
    else if (c->data.doc_mask == DOC_MASK_ON)
        snprintf(why, n, "--doc-mask on with --cp is not supported yet (documents would have to be found across the "
                 "context-parallel ranks' chunks)");
    return why[0] == 0;
}

/* The pipeline flags as far as they are known without the process count. */
static bool check_pipeline(const TrainConfig *c, char *why, size_t n) {
    const char *name = TRAIN_PP_SCHEDULE_WORDS[c->parallel.pp_schedule];
    if ((c->parallel.pp_schedule == PIPE_ZBH1 || c->parallel.pp_schedule == PIPE_INTERLEAVED) && c->parallel.pp == 1) {
        snprintf(why, n, "--pp-schedule %s needs --pp 2 or more (with one stage there is no pipeline to schedule)",
                 name);
        return false;
    }
    if (c->parallel.virtual_stages > 1 && c->parallel.pp_schedule != PIPE_INTERLEAVED) {
        snprintf(why, n, "--virtual-stages %d needs --pp-schedule interleaved (got %s)", c->parallel.virtual_stages, name);
        return false;
    }
    if (c->parallel.pp_schedule == PIPE_INTERLEAVED && c->parallel.virtual_stages < 2) {
        snprintf(why, n, "--pp-schedule interleaved needs --virtual-stages 2 or more");
        return false;
    }
    if (c->parallel.virtual_stages > 1 && !c->parallel.pp_split[0] && c->model.layers % (c->parallel.pp * c->parallel.virtual_stages) != 0) {
        snprintf(why, n, "--virtual-stages %d does not divide the layers of each pipeline stage (--layers %d over "
                 "--pp %d: each stage's layers are split into %d equal chunks)", c->parallel.virtual_stages, c->model.layers, c->parallel.pp,
                 c->parallel.virtual_stages);
        return false;
    }
    return true;
}

/* Optimizer and schedule. */
static bool check_optim(const TrainConfig *c, char *why, size_t n) {
    if (c->optim.min_lr > c->optim.lr) {
        snprintf(why, n, "--min-lr %g is larger than --lr %g", c->optim.min_lr, c->optim.lr);
        return false;
    }
    return true;
}

/* Precision: bf16 products through oneDNN need a CPU with bf16 arithmetic. */
static bool check_precision(const TrainConfig *c, char *why, size_t n) {
    const bool bf16 = c->precision.mode == PRECISION_BF16 ||
                      (c->precision.mode == PRECISION_FP8 && c->precision.fp8_high_precision == PRECISION_BF16);
    if (bf16 && c->precision.bf16_matmul == MATMUL_BF16_ONEDNN && !matmul_bf16_onednn_available()) {
        snprintf(why, n, "--bf16-matmul onednn: oneDNN has no bf16 matmul on this CPU (its ISA: %s; it needs "
                 "AVX-512): use auto or widen", matmul_bf16_cpu_isa());
        return false;
    }
    return true;
}

/* The test-only knobs. */
static bool check_debug(const TrainConfig *c, char *why, size_t n) {
    if (c->debug.outlier_scale != 0 && c->parallel.zero >= 3) {
        snprintf(why, n, "--debug-outlier-scale needs each rank's parameters whole: not with --zero 3");
        return false;
    }
    return true;
}

/* Guards and stragglers: --balance against what needs every replica in step. */
static bool check_guards(const TrainConfig *c, char *why, size_t n) {
    if (c->guards.balance && c->parallel.zero >= 2) {
        snprintf(why, n, "--balance needs --zero 0 or 1: ZeRO 2 and 3 reduce every micro-step, so every replica must "
                 "run the same number");
        return false;
    }
    if (c->guards.balance && (strncmp(c->batch.schedule, "adaptive", 8) == 0 || strncmp(c->batch.schedule, "goodput", 7) == 0)) {
        snprintf(why, n, "--balance and --batch-schedule %s cannot be combined yet",
                 strncmp(c->batch.schedule, "goodput", 7) == 0 ? "goodput" : "adaptive");
        return false;
    }
    if (c->guards.balance && c->parallel.pp_schedule == PIPE_INTERLEAVED) {
        snprintf(why, n, "--balance and --pp-schedule interleaved cannot be combined: --balance changes each "
                 "replica's micro-batches with its measured speed, and interleaving needs a multiple of --pp");
        return false;
    }
    return true;
}

/* Noise scale and goodput: the goodput flags need --batch-schedule goodput. */
static bool check_estimators(const TrainConfig *c, char *why, size_t n) {
    if (c->estimators.goodput_noise_scale > 0 && strncmp(c->batch.schedule, "goodput", 7) != 0) {
        snprintf(why, n, "--goodput-noise-scale needs --batch-schedule goodput:MIN:MAX (got %s)", c->batch.schedule);
        return false;
    }
    if (c->estimators.goodput_noise_curve && *c->estimators.goodput_noise_curve &&
        (strncmp(c->batch.schedule, "goodput", 7) != 0 || c->estimators.goodput_noise_scale > 0)) {
        snprintf(why, n, "--goodput-noise-curve needs --batch-schedule goodput:MIN:MAX and no --goodput-noise-scale "
                 "(got --batch-schedule %s%s)", c->batch.schedule, c->estimators.goodput_noise_scale > 0 ? " and one" : "");
        return false;
    }
    if (c->estimators.goodput_temperature && strncmp(c->batch.schedule, "goodput", 7) != 0) {
        snprintf(why, n, "--goodput-temperature needs --batch-schedule goodput:MIN:MAX (got %s)", c->batch.schedule);
        return false;
    }
    return true;
}

/* Checkpoints and output. */
static bool check_output(const TrainConfig *c, char *why, size_t n) {
    const bool resume = c->output.resume && *c->output.resume;
    if (c->output.resume_new_batch && (!resume || strcmp(c->batch.schedule, "constant") != 0)) {
        snprintf(why, n, "--resume-new-batch needs --resume DIR and --batch-schedule constant (got %s%s)",
                 resume ? "--batch-schedule " : "no --resume", resume ? c->batch.schedule : "");
        return false;
    }
    return true;
}

/* Gradient compression. */
static bool check_compression(const TrainConfig *c, char *why, size_t n) {
    if (c->parallel.virtual_stages > 1 && (strcmp(c->compression.codec, "none") != 0 || c->parallel.zero_quant_grads)) {
        snprintf(why, n, "--virtual-stages with --grad-compression or --zero-quant-grads is not supported yet (the "
                 "error-feedback residuals are per chunk)");
        return false;
    }
    return true;
}

/* LoRA: its flags need --lora-rank; what it does not compose with (the engine checks the layout). */
static bool check_lora(const TrainConfig *c, char *why, size_t n) {
    int mask;
    if (c->lora.rank == 0) {
        const char *flag = c->lora.init && *c->lora.init ? "--lora-init" : c->lora.merge ? "--lora-merge"
                           : c->lora.save_adapters && *c->lora.save_adapters ? "--save-adapters"
                           : c->lora.base_weights != BASE_WEIGHTS_FP32 ? "--base-weights"
                           : c->lora.dropout > 0 ? "--lora-dropout" : NULL;
        if (flag) snprintf(why, n, "%s needs --lora-rank R (LoRA adapters to train)", flag);
        return !flag;
    }
    if (!lora_parse_targets(c->lora.targets, &mask, why, n)) return false;
    if (c->optim.kind == OPTIM_ONEBIT_ADAM) {
        snprintf(why, n, "--lora-rank with --optimizer onebit-adam is not supported yet");
        return false;
    }
    return true;
}

/* DiLoCo / FedAvg. */
static bool check_diloco(const TrainConfig *c, char *why, size_t n) {
    if (c->diloco.local_steps_jitter > 0 && c->diloco.local_steps == 0) {
        snprintf(why, n, "--local-steps-jitter needs --local-steps H (DiLoCo/FedAvg windows)");
        return false;
    }
    return true;
}

bool train_capacity_factor(const TrainConfig *c, double *factor, char *why, size_t n) {
    *factor = 0;
    if (!c->moe.capacity_factor || !*c->moe.capacity_factor) return true;
    char *end;
    double f = strtod(c->moe.capacity_factor, &end);
    if (*end || !(f > 0 && isfinite(f))) {
        snprintf(why, n, "--capacity-factor must be a number > 0 (got %s); --dropless never drops", c->moe.capacity_factor);
        return false;
    }
    *factor = f;
    return true;
}

/* What an MoE model does not compose with yet: one line each. */
static const char *moe_refusal(const TrainConfig *c) {
    return c->parallel.pp > 1 && c->parallel.pp_schedule == PIPE_ZBH1 ? "--pp-schedule zbh1 (the split backward does not train MoE layers)"
           : c->parallel.cp > 1 && c->moe.capacity_factor && *c->moe.capacity_factor
               ? "--cp and --capacity-factor (a sequence's capacity decision would span its context-parallel "
                 "ranks; --dropless works)"
           : c->parallel.zero == 3 ? "--zero 3 (use --zero 0, 1 or 2)"
           : c->precision.mode != PRECISION_FP32 ? "--precision bf16 or fp8 (MoE layers train in fp32)"
           : c->lora.rank > 0 ? "--lora-rank"
           : c->guards.balance ? "--balance (every replica runs the same micro-steps: the MoE statistics are summed per micro-step)"
           : c->diloco.local_steps > 0 ? "--local-steps (DiLoCo workers would share routing statistics every micro-step)"
           : (c->output.save_model && *c->output.save_model && !model_file_is_safetensors_name(c->output.save_model))
               ? "--save-model to an llm.c file (it holds a dense GPT-2: give a name ending in .safetensors)"
           : NULL;
}

static bool check_moe(const TrainConfig *c, char *why, size_t n) {
    double factor;
    if (!train_capacity_factor(c, &factor, why, n)) return false;
    if (c->moe.experts <= 1) {
        const char *flag = factor > 0 ? "--capacity-factor" : c->moe.dropless ? "--dropless"
                           : c->moe.bias_update > 0 ? "--moe-bias-update" : c->moe.ep > 1 ? "--ep"
                           : c->debug.moe_skew != 1 ? "--debug-moe-skew" : c->moe.every != 1 ? "--moe-every"
                           : c->moe.gates != 0 ? "--moe-gates" : c->moe.routed_scale != 1 ? "--moe-routed-scale"
                           : NULL;
        if (flag) snprintf(why, n, "%s needs --experts E (E > 1: a Mixture-of-Experts model)", flag);
        return !flag;
    }
    const char *no = moe_refusal(c);
    if (no) snprintf(why, n, "--experts %d does not work with %s", c->moe.experts, no);
    else if (c->moe.every > c->model.layers)
        snprintf(why, n, "--moe-every %d is more than --layers %d: no layer would be MoE (layer l is when (l + 1) %% "
                 "%d == 0)", c->moe.every, c->model.layers, c->moe.every);
    else if (c->moe.ep > 1 && c->moe.experts % c->moe.ep != 0)
        snprintf(why, n, "--ep %d must divide --experts %d (each EP rank holds experts / ep of them)", c->moe.ep,
                 c->moe.experts);
    else if (c->parallel.tp > 1 && (c->moe.ffn > 0 ? c->moe.ffn : 4 * c->model.channels) % c->parallel.tp != 0)
        snprintf(why, n, "--tp %d does not divide --moe-ffn %d (tensor parallelism splits each expert's hidden units)",
                 c->parallel.tp, c->moe.ffn > 0 ? c->moe.ffn : 4 * c->model.channels);
    else if (c->moe.top_k > c->moe.experts)
        snprintf(why, n, "--moe-top-k %d must be at most --experts %d", c->moe.top_k, c->moe.experts);
    else if (c->moe.dropless && factor > 0)
        snprintf(why, n, "--dropless and --capacity-factor %s contradict each other (dropless never drops)",
                 c->moe.capacity_factor);
    else
        return true;
    return false;
}

int train_moe_gates(const TrainConfig *c) { return c->moe.gates > 0 ? c->moe.gates - 1 : (int)moe_default_gates(c->moe.top_k); }

/* --precision fp8 on a device: on sim only for now (gpt_device.h). */
static bool check_device_fp8(const TrainConfig *c, char *why, size_t n) {
    if (c->precision.mode != PRECISION_FP8 || c->device.kind != TRAIN_DEVICE_CUDA) return true;
    snprintf(why, n, "--device cuda does not run --precision fp8 yet (its cuBLASLt FP8 products are not written; --device sim runs it)");
    return false;
}

/* --gpu-comm moves device buffers, so it needs a device; NCCL needs GPUs. */
static bool check_gpu_comm(const TrainConfig *c, char *why, size_t n) {
    if (c->parallel.gpu_comm == GPU_COMM_AUTO || c->device.kind == TRAIN_DEVICE_CUDA) return true;
    if (c->device.kind == TRAIN_DEVICE_CPU)
        snprintf(why, n, "--gpu-comm %s needs --device cuda or sim (CPU ranks exchange host memory)",
                 TRAIN_GPU_COMM_WORDS[c->parallel.gpu_comm]);
    else if (c->parallel.gpu_comm == GPU_COMM_NCCL)
        snprintf(why, n, "--gpu-comm nccl needs --device cuda (sim moves device buffers through the host: --gpu-comm host or auto)");
    else
        return true;
    return false;
}

/* --device cuda|sim runs the plain step, over data-parallel ranks at ZeRO 0-2 (parallel/engine_device.h). */
static bool check_device(const TrainConfig *c, char *why, size_t n) {
    if (c->device.sim_memory_mb > 0 && c->device.kind != TRAIN_DEVICE_SIM) {
        snprintf(why, n, "--sim-memory needs --device sim (got --device %s)", TRAIN_DEVICE_WORDS[c->device.kind]);
        return false;
    }
    const int head = c->model.channels / c->model.heads;
    if (c->device.attention == TRAIN_ATTENTION_FLASH2 && (c->device.kind == TRAIN_DEVICE_CPU || head > FLASH_MAX_HEAD)) {
        if (c->device.kind == TRAIN_DEVICE_CPU) snprintf(why, n, "--attention flash2 needs --device cuda or sim (the CPU runs the causal kernel)");
        else snprintf(why, n, "--attention flash2 takes heads of up to %d channels (--channels / --heads is %d)", FLASH_MAX_HEAD, head);
        return false;
    }
    if (!check_gpu_comm(c, why, n)) return false;
    if (c->device.kind == TRAIN_DEVICE_CPU) return true;
    if (!check_device_fp8(c, why, n)) return false;
    const char *flag = c->optim.kind != OPTIM_ADAMW ? "--optimizer other than adamw"
                       : c->parallel.tp > 1 || c->parallel.pp > 1 || c->parallel.cp > 1 || c->parallel.virtual_stages > 1 ? "--tp, --pp, --cp or --virtual-stages"
                       : c->parallel.zero >= 3 ? "--zero 3" : c->parallel.zero_quant_grads ? "--zero-quant-grads"
                       : c->moe.experts > 1 ? "--experts" : c->lora.rank > 0 ? "--lora-rank"
                       : c->diloco.local_steps > 0 ? "--local-steps" : c->estimators.noise_scale || c->estimators.noise_scale_every > 0 ? "--noise-scale"
                       : strncmp(c->batch.schedule, "adaptive", 8) == 0 || strncmp(c->batch.schedule, "goodput", 7) == 0
                           ? "--batch-schedule adaptive or goodput"
                       : strcmp(c->compression.codec, "none") != 0 ? "--grad-compression"
                       : NULL;
    if (flag) snprintf(why, n, "--device %s does not work with %s yet (the device runs fp32 or bf16 AdamW, data parallel at ZeRO 0-2)",
                       TRAIN_DEVICE_WORDS[c->device.kind], flag);
    return !flag;
}

/* Each area's rules, in the order they are checked (the first broken one is reported). */
typedef bool (*AreaCheck)(const TrainConfig *c, char *why, size_t n);
static const AreaCheck AREA_CHECKS[] = {check_diloco, check_optim,    check_precision, check_debug,
                                        check_guards, check_estimators, check_output,  check_compression,
                                        check_pipeline, check_context,  check_lora,    check_moe,
                                        check_device};

bool train_config_check(const TrainConfig *c, char *why, size_t why_size) {
    why[0] = 0;
    for (size_t i = 0; i < sizeof AREA_CHECKS / sizeof AREA_CHECKS[0]; i++)
        if (!AREA_CHECKS[i](c, why, why_size)) return false;
    return true;
}
