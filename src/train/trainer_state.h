/* trainer_state.h: the trainer's state, shared by the files of train/ that
 * run the job (trainer.c), save or restore it (train_ckpt.c), compress its
 * communication (compression.c) and describe it (banner.c). The policy
 * pieces (guard, balance, fault, step statistics, metrics) keep their state
 * in small structs of their own and never see this one. */
#ifndef BS_TRAIN_TRAINER_STATE_H
#define BS_TRAIN_TRAINER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "comm/compressed.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_extra.h"
#include "core/rng.h"
#include "core/trace.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "optim/batch_schedule.h"
#include "optim/curvature.h"
#include "optim/goodput.h"
#include "optim/lr_scaling.h"
#include "optim/lr_schedule.h"
#include "optim/noise_curve.h"
#include "optim/noise_scale.h"
#include "optim/optimizer.h"
#include "optim/outer_optimizer.h"
#include "parallel/engine.h"
#include "train/balance.h"
#include "train/fault.h"
#include "train/guard.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/step_result.h"
#include "train/step_stats.h"
#include "train/trainer.h"
#include "train/watch.h"

/* A text option was given (not NULL or empty). */
static inline bool option_given(const char *value) { return value && *value; }

#define TRAIN_FEEDBACK_ARRAYS 10 /* per-rank arrays a checkpoint keeps: error feedback (train/compression.h), DiLoCo (train/diloco.h) */

#define TRAIN_MAX_CHUNKS PIPE_MAX_CHUNKS /* model chunks per rank (parallel/pipeline.h) */

/* One chunk's file of a checkpoint: what it holds, and (--async-ckpt) the copies. */
typedef struct {
    size_t offset, count;
    const float *params, *state[CKPT_STATE_ARRAYS];
    int shard;
    CkptFile file;
    float *buffers[1 + CKPT_STATE_ARRAYS]; /* --async-ckpt: the copied parameters and optimizer state */
    float *gathered[CKPT_STATE_ARRAYS]; /* experts sharded apart (EP, ZeRO 1-2): the range's state from its owners */
    size_t capacity;
} CkptPiece;

/* A checkpoint being written (in the background with --async-ckpt). */
typedef struct {
    bool pending;
    pthread_t thread;
    atomic_int done;
    char tmp[4096];
    int rank, num_pieces;
    CkptPiece pieces[TRAIN_MAX_CHUNKS];
    CkptManifest *manifest; /* rank 0: the state at the time of the copy */
    float *extra_buffer;    /* copied error-feedback residuals */
    size_t extra_capacity;
    CkptExtraArray extra[TRAIN_FEEDBACK_ARRAYS];
    int num_extra;
    char extra_label[CKPT_EXTRA_LABEL];
} AsyncCkpt;

/* 1-bit Adam's compression stage (train/compression.c). */
typedef struct {
    bool on;                 /* --optimizer onebit-adam */
    float *momentum;         /* m over the whole flat buffer, the same on every rank (ZeRO-1: apart from the shard's state) */
    bool momentum_current;   /* momentum holds m (else it is gathered from the optimizer state first) */
    float *worker_residual;  /* num_params floats */
    float *server_residual;  /* this rank's chunk */
    size_t server_count;
    CompressedScratch *scratch;
} OnebitState;

/* DiLoCo / FedAvg's outer loop (train/diloco.c), over chunk 0's flat buffer. */
typedef struct {
    bool on;
    OuterConfig outer;
    float *global, *velocity, *delta, *local; /* count floats each; local: the worker's weights while a checkpoint
                                                 holds the global ones */
    size_t count;
    Codec codec;                             /* the pseudo-gradient's (--grad-compression) */
    CompressedScheme scheme;
    float *worker_residual, *server_residual; /* error feedback of a lossy codec */
    size_t server_count;
    CompressedScratch *scratch;
    double worker_grad_norm;                 /* this worker's own gradient norm: what it clips by */
} DilocoState;

/* The noise-scale estimators beyond B_simple and the goodput policy (train/estimators.h). */
typedef struct {
    bool precond_on, curvature_on, goodput_on;
    NoiseScale precond;
    double precond_big_sq;    /* this step's |P G|^2 (NaN: not measured) */
    Curvature curvature;
    Curvature curvature_precond; /* B_noise(P) on the update direction P g (optim/curvature.h) */
    long extra_passes;        /* forward+backward passes over a global batch spent on curvature */
    bool probing;             /* this step measures curvature */
    float *probe, *saved_grad, *saved_params;
    float *precond_grad;      /* P g for B_noise(P) (NULL unless precond_on and curvature_on) */
    float *signs, *global_signs; /* the probe's: this rank's micro-steps, the global batch's micro-batches */
    int signs_capacity;
    bool probe_on;            /* --noise-probe-every (train/noise_probe.h) */
    NoiseScale probe_noise;   /* the probes' estimates, averaged with --noise-probe-ema */
    NoiseScale probe_precond; /* the same of Adam's preconditioned gradients P g_i (when precond_on) */
    long probe_micro_batches; /* the probe's micro-batch passes on this rank so far */
    Goodput goodput;
    long steps_timed;         /* steps this process timed (not saved: the first is not recorded) */
    bool planted;             /* --goodput-time-model */
    double planted_a, planted_b;
    bool curve_on;            /* --goodput-noise-curve */
    NoiseCurve noise_curve;
} Estimators;

typedef struct {
    TrainConfig cfg;
    Comm *world;
    int rank, dp_size, dp_index; /* world rank; data-parallel replicas and this one's index */
    Engine *engine;              /* the grid, this rank's model chunks, their optimizer state, the pipeline */
    GPTConfig model;             /* the whole model */
    Tokenizer *tok; /* decodes samples; NULL if the vocabulary is not the tokenizer's */
    DataLoader train_data, val_data;
    bool has_val;
    BatchSchedule batch_schedule;
    LrScaling lr_scaling;
    long base_batch;
    bool batch_warned;
    long total_steps;       /* planned optimizer steps (from --steps or --train-tokens) */
    uint64_t total_tokens;  /* planned tokens */
    NoiseScale noise;
    bool adaptive;                     /* --batch-schedule adaptive:MIN:MAX */
    long adaptive_batch, adaptive_max; /* its current batch (saved in checkpoints) and bound */
    long step;              /* optimizer steps done */
    uint64_t seqs_consumed; /* data position */
    Rng sample_rng;
    LrSchedule lr;
    Metrics metrics; /* rank 0, --metrics */
    Progress progress;
    Trace trace;
    char ckpt_dir[4096];
    FaultPlan fault; /* --debug-inject-fault */
    Guard guard;     /* skips a step's update on a non-finite value or a loss spike */
    StepStatsExchange stats; /* the step's statistics across ranks, one collective */
    Balance balance;     /* --balance: micro-batches per replica by measured speed */
    AsyncCkpt async;
    double last_ckpt_stall; /* seconds, for the metrics of the step after the one that wrote a checkpoint */
    bool resharded;         /* resumed from a checkpoint written under another layout */
    OnebitState onebit;
    DilocoState diloco;
    Watch watch; /* per-layer and per-rank norms, MFU, TensorBoard (train/watch.h) */
    Estimators est; /* precond and curvature noise scales, goodput (train/estimators.h) */
    struct {                 /* MoE models: the last step's (train/moe_train.h) */
        int layers;
        MoeMetrics *metrics; /* per layer: loads, dropped share, its aux and z losses */
        double aux_loss, z_loss; /* what the step added to the objective, summed over layers */
    } moe;
} Trainer;

#endif
