/* trainer_state.h: the trainer's state, shared by the files of train/ that
 * run the job (trainer.c, train_output.c), set it up (train_setup.c), save or
 * restore it (train_ckpt.c) and describe it (banner.c). The features
 * (train/feature.h) keep their state to themselves and see only the context
 * (cx). */
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
#include "parallel/engine.h"
#include "train/features.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/step_result.h"
#include "train/step_stats.h"
#include "train/trainer.h"

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
    CkptExtraArray extra[FEATURE_ARRAYS_MAX]; /* the features' (train/features.h) */
    int num_extra;
    char extra_label[CKPT_EXTRA_LABEL];
} AsyncCkpt;

typedef struct Trainer {
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
    bool batch_warned;
    long total_steps;       /* planned optimizer steps (from --steps or --train-tokens) */
    uint64_t total_tokens;  /* planned tokens */
    BatchPolicy batch; /* --batch-schedule adaptive|goodput: the batch the noise-scale feature steers */
    long step;              /* optimizer steps done */
    uint64_t seqs_consumed; /* data position */
    Rng sample_rng;
    LrSchedule lr;
    Metrics metrics; /* rank 0, --metrics */
    Progress progress;
    Trace trace;
    char ckpt_dir[4096];
    StepStatsExchange stats; /* the step's statistics across ranks, one collective */
    AsyncCkpt async;
    double last_ckpt_stall; /* seconds, for the metrics of the step after the one that wrote a checkpoint */
    bool resharded;         /* resumed from a checkpoint written under another layout */
    TrainContext cx;       /* what the features see (train/feature.h) */
    FeatureList features;  /* the active ones, in hook order */
} Trainer;

#endif
