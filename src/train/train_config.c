/* train_config.c: the configuration's words and its checks before any
 * process group exists (see train_config.h). */
#include "train/train_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/flash_math.h"
#include "kernels/kernels.h"
#include "model/moe.h"
#include "train/compression.h"
#include "train/diloco.h"
#include "train/estimators.h"
#include "train/lora_flags.h"
#include "train/moe_train.h"

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
const char *const TRAIN_CUDA_GRAPHS_WORDS[] = {"off", "on", NULL};
const char *const TRAIN_BASE_WEIGHTS_WORDS[] = {"fp32", "bf16", "int8", "nf4", NULL};
const char *const TRAIN_GOODPUT_ESTIMATOR_WORDS[] = {"simple", "precond", "curvature", "curvature-precond", "probe",
                                                     "probe-precond", NULL};
const char *const TRAIN_FP8_RECIPE_WORDS[] = {"delayed", "block", NULL};
const char *const TRAIN_FP8_AMAX_ALGO_WORDS[] = {"max", "most_recent", NULL};
const char *const TRAIN_FP8_HIGH_PRECISION_WORDS[] = {"fp32", "bf16", NULL};
const char *const TRAIN_ACTIVATIONS_WORDS[] = {"fp32", "bf16", NULL};
const char *const TRAIN_RECOMPUTE_WORDS[] = {"none", "selective", "full", NULL};

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

/* --activations bf16: the device step's, over its bf16 products, keeping each layer's activations. */
static bool check_activations(const TrainConfig *c, char *why, size_t n) {
    if (c->precision.activations == PRECISION_FP32) return true;
    if (c->device.kind == TRAIN_DEVICE_CPU)
        snprintf(why, n, "--activations bf16 needs --device cuda or sim (the CPU step keeps its activations in fp32)");
    else if (c->precision.mode != PRECISION_BF16)
        snprintf(why, n, "--activations bf16 needs --precision bf16 (got %s): its products are the ones that read bf16 inputs",
                 TRAIN_PRECISION_WORDS[c->precision.mode]);
    else if (c->model.recompute == GPT_RECOMPUTE_FULL)
        snprintf(why, n, "--activations bf16 does not work with --recompute full yet (full recomputation keeps only each layer's input)");
    else if (c->parallel.pp > 1)
        snprintf(why, n, "--activations bf16 does not work with --pp yet (its bf16 store keeps one micro-batch's activations, a pipeline stage several)");
    else if (c->parallel.tp > 1)
        snprintf(why, n, "--activations bf16 does not work with --tp yet (its bf16 store keeps whole layers' widths, a tensor-parallel shard's attention and MLP are split)");
    else
        return true;
    return false;
}

/* Precision: bf16 products through oneDNN need a CPU with bf16 arithmetic. */
static bool check_precision(const TrainConfig *c, char *why, size_t n) {
    if (!check_activations(c, why, n)) return false;
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

int train_moe_gates(const TrainConfig *c) { return c->moe.gates > 0 ? c->moe.gates - 1 : (int)moe_default_gates(c->moe.top_k); }

/* --cuda-graphs on: a device's step replayed from graphs, where the host changes nothing a graph reads by value. */
static bool check_cuda_graphs(const TrainConfig *c, char *why, size_t n) {
    if (c->device.cuda_graphs == TRAIN_CUDA_GRAPHS_OFF) return true;
    if (c->device.kind == TRAIN_DEVICE_CPU)
        snprintf(why, n, "--cuda-graphs on needs --device cuda or sim (the CPU step has no graphs)");
    else if (c->precision.mode == PRECISION_FP8)
        snprintf(why, n, "--cuda-graphs on does not work with --precision fp8 (its scales change on the host between steps and reach the products by value)");
    else if (c->parallel.tp > 1 || c->parallel.cp > 1 || c->parallel.pp > 1 || c->parallel.zero >= 2)
        snprintf(why, n, "--cuda-graphs on works with data parallelism at ZeRO 0-1 only for now (not --tp, --cp, --pp or --zero 2-3: their "
                 "collectives inside a micro-batch wait on the host)");
    else
        return true;
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

/* --experts on a device: dropless, in the whole model, at ZeRO 0-2, expert parallelism included (model/moe_device.h). */
static bool check_device_moe(const TrainConfig *c, char *why, size_t n) {
    if (c->moe.experts <= 1) return true;
    const char *flag = c->moe.capacity_factor && c->moe.capacity_factor[0] ? "--capacity-factor"
                       : c->parallel.tp > 1 || c->parallel.cp > 1 || c->parallel.pp > 1 ? "--tp, --cp or --pp"
                       : c->parallel.zero >= 3                                          ? "--zero 3"
                       : c->device.cuda_graphs == TRAIN_CUDA_GRAPHS_ON                  ? "--cuda-graphs on"
                                                                                        : NULL;
    if (flag) snprintf(why, n, "--device %s runs MoE layers dropless for now (not with %s)",
                       TRAIN_DEVICE_WORDS[c->device.kind], flag);
    return !flag;
}

/* --pp on a device: every schedule, interleaved virtual stages included (parallel/pipeline_device.h). */
static const char *device_pipeline_flag(const TrainConfig *c) {
    if (c->parallel.pp == 1) return NULL;
    if (c->parallel.virtual_stages > 1 && (c->parallel.tp > 1 || c->parallel.cp > 1))
        return "--virtual-stages together with --tp or --cp (interleaved stages run whole layers)";
    if (c->parallel.virtual_stages > 1 && c->parallel.zero >= 2)
        return "--virtual-stages with --zero 2-3 (interleaved stages reduce each chunk's gradient after backward)";
    if (c->parallel.virtual_stages > 1 && c->precision.mode == PRECISION_FP8)
        return "--virtual-stages with --precision fp8 (one chunk's scaling state)";
    if ((c->parallel.tp > 1 || c->parallel.cp > 1) && c->precision.mode != PRECISION_FP32)
        return "--pp together with --tp or --cp outside --precision fp32";
    return NULL;
}

/* --device cuda|sim runs the plain step, over data-parallel ranks at ZeRO 0-3 (3 in fp32), tensor- and context-parallel
 * ones, and pipeline stages (parallel/engine_device.h). */
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
    if (!check_gpu_comm(c, why, n) || !check_cuda_graphs(c, why, n)) return false;
    if (c->device.kind == TRAIN_DEVICE_CPU) return true;
    const char *flag = c->optim.kind != OPTIM_ADAMW ? "--optimizer other than adamw"
                       : device_pipeline_flag(c) ? device_pipeline_flag(c)
                       : c->precision.mode == PRECISION_FP8 && c->precision.fp8_recipe == FP8_RECIPE_BLOCK &&
                                 (c->parallel.tp > 1 || c->parallel.cp > 1 || c->parallel.pp > 1) ? "--fp8-recipe block together with --tp, --cp or --pp"
                       : c->parallel.zero >= 3 && c->precision.mode != PRECISION_FP32 ? "--zero 3 in bf16 or FP8"
                       : c->parallel.zero_quant_weights || c->parallel.zero_hpz ? "--zero-quant-weights or --zero-hpz"
                       : c->parallel.zero_quant_grads ? "--zero-quant-grads"
                       : c->lora.rank > 0 ? "--lora-rank"
                       : c->diloco.local_steps > 0 ? "--local-steps" : c->estimators.noise_scale || c->estimators.noise_scale_every > 0 ? "--noise-scale"
                       : strncmp(c->batch.schedule, "adaptive", 8) == 0 || strncmp(c->batch.schedule, "goodput", 7) == 0
                           ? "--batch-schedule adaptive or goodput"
                       : strcmp(c->compression.codec, "none") != 0 ? "--grad-compression"
                       : NULL;
    if (flag) snprintf(why, n, "--device %s does not work with %s yet (the device runs fp32 or bf16 AdamW, data parallel at ZeRO 0-3 (3 in fp32), tensor and context parallel, pipeline stages)",
                       TRAIN_DEVICE_WORDS[c->device.kind], flag);
    return !flag && check_device_moe(c, why, n);
}

/* --recompute: where each mode runs. On a device, FlashAttention-2 stores
 * no probabilities and recomputes them in backward: that is selective
 * recomputation, there only with it; full reruns each layer's launches. */
static bool check_recompute(const TrainConfig *c, char *why, size_t n) {
    const GPTRecompute r = c->model.recompute;
    if (r == GPT_RECOMPUTE_NONE || c->device.kind == TRAIN_DEVICE_CPU)
        return true; /* the CPU recomputes with every layout (context parallelism, MoE, FP8, ZB-H1's W pass) */
    const bool flash = c->device.attention == TRAIN_ATTENTION_FLASH2 ||
                       (c->device.attention == TRAIN_ATTENTION_AUTO && c->model.channels / c->model.heads <= FLASH_MAX_HEAD);
    if (r == GPT_RECOMPUTE_SELECTIVE && !flash)
        snprintf(why, n, "--recompute selective with --device %s needs --attention flash2 (it recomputes the "
                 "probabilities in backward; the causal kernel keeps them)", TRAIN_DEVICE_WORDS[c->device.kind]);
    return r != GPT_RECOMPUTE_SELECTIVE || flash;
}

/* Each area's rules, in the order they are checked (the first broken one is reported). */
typedef bool (*AreaCheck)(const TrainConfig *c, char *why, size_t n);
static const AreaCheck AREA_CHECKS[] = {diloco_check_config, check_optim,           check_precision,
                                        check_debug,         check_guards,          estimators_check_config,
                                        check_output,        compression_check_config, check_pipeline,
                                        check_context,       lora_flags_check,      moe_check_config,
                                        check_device,        check_recompute};

bool train_config_check(const TrainConfig *c, char *why, size_t why_size) {
    why[0] = 0;
    for (size_t i = 0; i < sizeof AREA_CHECKS / sizeof AREA_CHECKS[0]; i++)
        if (!AREA_CHECKS[i](c, why, why_size)) return false;
    return true;
}

bool train_given(const TrainConfig *c, const void *field) {
    const size_t offset = (size_t)((const char *)field - (const char *)c);
    for (int i = 0; i < c->given.count; i++)
        if (c->given.offset[i] == offset) return true;
    return false;
}
