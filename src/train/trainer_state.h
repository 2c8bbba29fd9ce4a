/* trainer_state.h: the trainer's state, shared by the files of train/ that
 * run the job (trainer.c) and save or restore it (train_ckpt.c). */
#ifndef BS_TRAIN_TRAINER_STATE_H
#define BS_TRAIN_TRAINER_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "core/rng.h"
#include "core/trace.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "parallel/data_parallel.h"
#include "train/progress.h"
#include "train/trainer.h"

typedef struct {
    TrainConfig cfg;
    Comm *world, *dpc; /* dpc: the data-parallel group */
    int rank, dp_size;
    GPT model;
    DataParallel *dp;
    GPTActs acts;
    DataLoader train_data, val_data;
    bool has_val;
    size_t update_offset, update_count; /* the range this rank's optimizer updates */
    float *m, *v;                       /* AdamW moments of that range */
    ParamSegment *segments;
    int num_segments;
    int32_t *inputs, *targets;
    int accum_steps;
    long step;              /* optimizer steps done */
    uint64_t seqs_consumed; /* data position */
    long optimizer_step;
    Rng sample_rng;
    LrSchedule lr;
    FILE *metrics;
    Progress progress;
    Trace trace;
    char ckpt_dir[4096];
    char fault_kind; /* 0, 's'tall or 'e'xit */
    int fault_rank, fault_step;
} Trainer;

typedef struct {
    double loss, grad_norm, lr;
    double seconds, slowest, fastest; /* this rank's step; max and min over ranks */
    double peak_rss;                  /* largest peak resident memory over ranks, bytes */
    double comm_exposed, comm_busy;   /* this rank's blocked time; operations' total time */
    uint64_t comm_bytes;
} StepResult;

#endif
