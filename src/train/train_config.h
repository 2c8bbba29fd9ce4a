/* train_config.h: the training job's configuration, typed: enumerations
 * are C enums (the command line's words for each are the tables below, in
 * enum order), and train_config_check validates the whole configuration
 * before any process group exists, each error one line naming the flag.
 * The defaults live with the flags, in the option table of cli/train_options.c,
 * one section per area below; train_config_check runs each area's rules. */
#ifndef BS_TRAIN_TRAIN_CONFIG_H
#define BS_TRAIN_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "kernels/matmul_bf16.h"
#include "model/context_attention.h"
#include "model/fp8_scaling.h"
#include "model/frozen_linear.h"
#include "model/gpt.h"
#include "optim/lr_scaling.h"
#include "optim/optimizer.h"
#include "optim/outer_optimizer.h"
#include "parallel/engine.h" /* the engine's enums: schedule, context-parallel algorithm */

typedef enum { PRECISION_FP32, PRECISION_BF16, PRECISION_FP8 } Precision;
typedef enum { TRAIN_DEVICE_CPU, TRAIN_DEVICE_CUDA, TRAIN_DEVICE_SIM } TrainDevice;
/* --attention: auto (flash2 on a device where a head fits it, else causal), the unfused causal kernel, or fused FlashAttention-2 */
typedef enum { TRAIN_ATTENTION_AUTO, TRAIN_ATTENTION_CAUSAL, TRAIN_ATTENTION_FLASH2 } TrainAttention;
typedef enum { DATA_SHUFFLED, DATA_SEQUENTIAL } DataOrder;
typedef enum { DOC_MASK_AUTO, DOC_MASK_ON, DOC_MASK_OFF } DocMask;
typedef enum {
    GOODPUT_SIMPLE,
    GOODPUT_PRECOND,
    GOODPUT_CURVATURE,
    GOODPUT_CURVATURE_PRECOND,
    GOODPUT_PROBE,
    GOODPUT_PROBE_PRECOND
} GoodputEstimator;

/* The words of each enumeration, NULL-terminated, in enum order. */
extern const char *const TRAIN_PRECISION_WORDS[];
extern const char *const TRAIN_DEVICE_WORDS[];
extern const char *const TRAIN_ATTENTION_WORDS[];
extern const char *const TRAIN_BF16_MATMUL_WORDS[];
extern const char *const TRAIN_DATA_ORDER_WORDS[];
extern const char *const TRAIN_OPTIMIZER_WORDS[];
extern const char *const TRAIN_LR_SCALING_WORDS[];
extern const char *const TRAIN_PP_SCHEDULE_WORDS[];
extern const char *const TRAIN_COMM_ALGO_WORDS[];
extern const char *const TRAIN_GPU_COMM_WORDS[]; /* GpuCommKind's order */
extern const char *const TRAIN_CP_ALGO_WORDS[];
extern const char *const TRAIN_CP_SPLIT_WORDS[];
extern const char *const TRAIN_OUTER_OPTIMIZER_WORDS[];
extern const char *const TRAIN_DOC_MASK_WORDS[];
typedef enum { TRAIN_CUDA_GRAPHS_OFF, TRAIN_CUDA_GRAPHS_ON } TrainCudaGraphs;
extern const char *const TRAIN_CUDA_GRAPHS_WORDS[];
extern const char *const TRAIN_RECOMPUTE_WORDS[]; /* GPTRecompute order: plan's --recompute names */
extern const char *const TRAIN_BASE_WEIGHTS_WORDS[];
extern const char *const TRAIN_GOODPUT_ESTIMATOR_WORDS[];
extern const char *const TRAIN_FP8_RECIPE_WORDS[];
extern const char *const TRAIN_FP8_AMAX_ALGO_WORDS[];
extern const char *const TRAIN_MOE_ROUTER_WORDS[]; /* MoeRouter order */
extern const char *const TRAIN_MOE_GATES_WORDS[];  /* "auto", then MoeGates order */
extern const char *const TRAIN_ACTIVATIONS_WORDS[]; /* fp32, bf16: PRECISION_FP32, PRECISION_BF16 */
extern const char *const TRAIN_FP8_HIGH_PRECISION_WORDS[]; /* fp32, bf16: PRECISION_FP32, PRECISION_BF16 */

/* The configuration by area: one struct per section of `train --help`. */
typedef struct {
    int layers, heads, channels, seq_len;
    int vocab_size;                    /* 0: the tokenizer's */
    const char *tokenizer, *vocab_dir; /* "": the data's (prepare.json), else byte */
    const char *init_from; /* llm.c model file to start from */
    long long seed;        /* initial weights, data order and sampling */
    GPTRecompute recompute; /* activation recomputation in backward (model/gpt.h) */
} TrainModelConfig;

typedef struct {
    Precision mode;              /* fp32, bf16 (matmuls in bf16, fp32 accumulation and masters) or fp8 */
    MatmulBF16Path bf16_matmul;  /* bf16: auto, onednn or widen (see kernels/matmul_bf16.h) */
    /* FP8 training (--precision fp8: model/fp8_scaling.h) */
    Fp8Recipe fp8_recipe;         /* delayed or block */
    int fp8_amax_history;         /* delayed: steps of amax history */
    Fp8AmaxAlgo fp8_amax_algo;    /* delayed: max or most_recent */
    int fp8_margin;               /* delayed: scales divided by 2^margin */
    Precision fp8_high_precision; /* what is not FP8 (embedding, head, loss, ...): bf16 or fp32 */
    bool fp8_param_gather;        /* ZeRO-3: layers gathered with their weights as E4M3 codes (parallel/fp8_gather.h) */
    Precision activations;        /* on a device: what the layers keep for backward, fp32 or bf16 (model/acts_bf16_device.h) */
} TrainPrecisionConfig;

typedef struct {
    TrainDevice kind;  /* where the step runs: the CPU, a CUDA GPU, or sim (the device seam on the host, tests) */
    int sim_memory_mb; /* --device sim: the simulated device's memory (0: no limit) */
    TrainAttention attention; /* the attention kernel */
    TrainCudaGraphs cuda_graphs; /* the device step replayed from graphs */
} TrainDeviceConfig;

typedef struct {
    int micro_batch;      /* sequences per micro-step per rank */
    int global_batch;     /* sequences per optimizer step; 0: micro_batch x dp */
    const char *schedule; /* see optim/batch_schedule.h */
    bool strict;          /* error (not round down) on a batch that is not a multiple of micro_batch x dp */
    LrScaling lr_scaling;
    int base_batch;       /* sequences; 0: the final global batch */
} TrainBatchConfig;

typedef struct {
    OptimizerKind kind;
    int steps;
    double lr, min_lr;
    int warmup;               /* steps */
    long long warmup_tokens;  /* 0: --warmup steps of the final batch */
    long long train_tokens;   /* 0: --steps steps of the final batch */
    double weight_decay, grad_clip, beta1, beta2, eps;
    double momentum, dampening, lars_eta;
    bool nesterov, lamb_clamp;
    int freeze_step;          /* 1-bit Adam: the last step of full-precision Adam */
} TrainOptimConfig;

typedef struct {
    const char *train, *val;
    DataOrder order;
    DocMask doc_mask; /* attention inside each packed document: auto (with loss-masked data), on, off */
} TrainDataConfig;

typedef struct {
    int every, val_batches, sample_every, sample_tokens, top_k;
    double temperature;
    double target_val_loss; /* stop once the validation loss reaches this (0: off) */
} TrainEvalConfig;

typedef struct {
    const char *out, *metrics, *save_model;
    const char *ckpt_dir, *resume;
    bool resume_new_batch; /* --resume at another constant --global-batch than the checkpoint's */
    int ckpt_every, keep_last;
    bool async_ckpt;       /* write checkpoints from a background thread */
    int log_every;
    bool quiet;
    const char *trace;            /* Chrome trace-event JSON */
    const char *tensorboard;      /* TensorBoard event files go to this directory (train/tensorboard.h) */
    double peak_gflops;           /* one process's peak GFLOP/s, for the MFU (0: no MFU) */
    double baseline_tokens_per_s; /* 1-process rate for the scaling efficiency */
    const char *config;           /* --config: the JSON file the flags were read from (cli/config_file.h) */
} TrainOutputConfig;

typedef struct { /* tp x cp x pp x dp = processes */
    int tp, pp;        /* tensor and pipeline parallel sizes */
    int cp;            /* context parallel: each sequence split over cp ranks */
    CpAlgo cp_algo;    /* ring or allgather */
    CpSplit cp_split;  /* zigzag or contiguous chunks */
    PipeSchedule pp_schedule;
    int virtual_stages; /* layer groups per pipeline rank (interleaved) */
    const char *pp_split; /* "", "auto" or layers per stage "n0,n1,..." */
    int dp;            /* 0: processes / (tp x cp x pp) */
    int zero;          /* ZeRO stage 0..3 */
    double bucket_mb;  /* gradient bucket size */
    bool no_overlap;   /* reduce buckets after backward instead of during it */
    CommAlgo comm_algo;
    int ranks_per_node;
    double comm_timeout;
    GpuCommKind gpu_comm; /* --device cuda|sim over several ranks: nccl or host staging (auto: the rule) */
    int threads;
    bool zero_quant_weights; /* ZeRO-3: int8 parameter gathers (qwZ) */
    bool zero_quant_grads;   /* ZeRO >= 1: int8 gradient reduce-scatter (qgZ) */
    bool zero_hpz;           /* ZeRO-3: node-local secondary parameter shard (hpZ) */
} TrainParallelConfig;

typedef struct { /* compressed communication (comm/codec.h, comm/compressed.h) */
    const char *codec;      /* none, fp16, bf16, fp8, int8, topk:FRACTION, onebit */
    int block;              /* elements per scale (fp8, int8) */
    const char *scheme;     /* ring or exchange ("": the codec's default) */
    bool no_error_feedback; /* drop what a lossy codec did not send (to show why it is kept) */
} TrainCompressionConfig;

typedef struct {
    double skip_spikes;         /* skip a step whose loss is this many standard deviations high (0: off) */
    int spike_window, max_skips;
    double straggler_threshold; /* a rank this much slower than the median is named */
    bool balance;               /* share micro-batches by measured speed */
} TrainGuardConfig;

typedef struct {
    bool noise_scale;               /* estimate the gradient noise scale */
    bool log_grad_norm_per_rank;    /* each rank's local gradient norm in the metrics (train/feature_grad_norm_ranks.c) */
    double noise_ema;
    int noise_scale_every;          /* the curvature noise scale every N steps (0: off; optim/curvature.h) */
    int noise_probe_every;          /* the noise scale at the step's weights every N steps (0: off; train/noise_probe.h) */
    int noise_probe_batches;        /* its extra micro-batches per rank */
    double noise_probe_ema;         /* smoothing across probes (0: each probe alone) */
    int goodput_every;              /* --batch-schedule goodput: steps between decisions (0: 10) */
    bool goodput_temperature;       /* scale the followed noise scale by the lr schedule's factor (estimators.h) */
    GoodputEstimator goodput_estimator; /* the noise scale goodput follows */
    double goodput_noise_scale;     /* > 0: goodput follows this noise scale (sequences) instead of an estimate */
    const char *goodput_noise_curve; /* "TO:B,...": goodput follows this curve of the loss (optim/noise_curve.h) */
    const char *goodput_time_model; /* "A:B", seconds per step = A + B x batch instead of measured */
    bool goodput_time_fit;          /* seconds per step from the fitted line for tried sizes too (optim/goodput.h) */
} TrainEstimatorConfig;

typedef struct { /* low-communication training (train/diloco.h) */
    int local_steps;           /* H inner steps per outer step (0: plain data parallelism) */
    int local_steps_jitter;    /* J: worker w takes H - j of a window's steps, j in [0, J] (heterogeneous devices) */
    OuterKind outer_optimizer; /* nesterov, sgd or avg */
    double outer_lr, outer_momentum, prox_mu;
} TrainDilocoConfig;

typedef struct { /* LoRA fine-tuning (model/lora.h) */
    int rank;                /* 0: train the whole model (or left unset: --lora-init's) */
    double alpha, dropout;   /* not given (train/lora_flags.h): --lora-init's, else 16 and 0 */
    const char *targets;     /* --lora-targets text (not given: --lora-init's, else all) */
    const char *init;        /* peft adapters to start from */
    bool merge;              /* exports fold B A into the weights */
    const char *save_adapters; /* peft directory for the final adapters */
    BaseWeights base_weights;  /* the frozen base's linear weights: fp32, bf16 or int8 */
} TrainLoraConfig;

typedef struct { /* Mixture of Experts (model/moe.h): every layer's MLP with experts > 1 */
    int experts, top_k, ffn;     /* ffn 0: 4 x channels */
    int router;                  /* MoeRouter: softmax or sigmoid */
    int gates;                   /* 0 auto (moe_default_gates), else MoeGates + 1 (train_moe_gates) */
    double routed_scale;         /* every routed gate's factor (DeepSeek-V3's routed_scaling_factor) */
    const char *capacity_factor; /* --capacity-factor text ("": dropless) */
    bool dropless;
    double aux_loss, z_loss, bias_update;
    int every, ep;               /* ep: expert-parallel ranks inside dp (parallel/grid.h) */
    double upcycle_noise;        /* --init-from a dense file with --experts: each expert's perturbation */
} TrainMoeConfig;

typedef struct { /* test-only knobs */
    const char *inject_fault; /* stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER], slow:RANK:FACTOR */
    double outlier_scale;     /* LayerNorm 1's gain of channel 0 times this at initialisation (0: off) */
    double moe_skew;          /* every MoE layer's router row of expert 0 starts multiplied by this */
    bool skip_pipe_wait;      /* on a device, the compute stream does not wait for a received pipeline transfer */
} TrainDebugConfig;

/* The options the user gave (on the command line or in a --config file), as
 * the option parser recorded them (cli/options.h): the offsets in TrainConfig
 * of the fields their flags set. A field not given holds its option's
 * default; train_given tells the two apart, no sentinel value needed. */
#define TRAIN_GIVEN_MAX 256
typedef struct {
    int count;
    unsigned short offset[TRAIN_GIVEN_MAX];
} TrainGiven;

typedef struct {
    TrainModelConfig model;
    TrainPrecisionConfig precision;
    TrainDeviceConfig device;
    TrainBatchConfig batch;
    TrainOptimConfig optim;
    TrainDataConfig data;
    TrainEvalConfig eval;
    TrainOutputConfig output;
    TrainParallelConfig parallel;
    TrainCompressionConfig compression;
    TrainGuardConfig guards;
    TrainEstimatorConfig estimators;
    TrainDilocoConfig diloco;
    TrainLoraConfig lora;
    TrainMoeConfig moe;
    TrainDebugConfig debug;
    TrainGiven given;
} TrainConfig;

/* Everything that can be checked without the process group: flag
 * combinations, enumerations' preconditions (bf16 matmuls on this CPU),
 * the fault and batch-schedule specs, the pipeline schedule's shape as far
 * as the flags fix it. False with one line naming the flag. */
bool train_config_check(const TrainConfig *c, char *why, size_t why_size);
/* --capacity-factor's value (0: dropless); false with one line if it is not a number > 0. */
bool train_capacity_factor(const TrainConfig *c, double *factor, char *why, size_t why_size);
/* --moe-gates resolved: as given, or auto's choice for --moe-top-k (MoeGates). */
int train_moe_gates(const TrainConfig *c);
/* Whether the user gave the option that sets `field` (a field of c): c->given. */
bool train_given(const TrainConfig *c, const void *field);

#endif
