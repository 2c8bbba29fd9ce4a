/* trainer.h: the training job: configuration and the step loop.
 *
 * One optimizer step consumes one global batch of sequences:
 *   global_batch = micro_batch x accumulation_steps x data_parallel_size.
 * The loss is the mean over every token of the global batch, so the update
 * is the one a single process would compute on the whole batch. */
#ifndef BS_TRAIN_TRAINER_H
#define BS_TRAIN_TRAINER_H

#include <stdbool.h>

#include "comm/comm.h"

typedef struct {
    /* model */
    int layers, heads, channels, seq_len;
    const char *precision; /* fp32 or bf16 (matmuls in bf16, fp32 accumulation and masters) */
    const char *bf16_matmul; /* bf16: auto, onednn or widen (see kernels/matmul_bf16.h) */
    int vocab_size;                    /* 0: the tokenizer's */
    const char *tokenizer, *vocab_dir; /* "": the data's (prepare.json), else byte */
    const char *init_from; /* llm.c model file to start from */
    /* batch */
    int micro_batch;  /* sequences per micro-step per rank */
    int global_batch; /* sequences per optimizer step; 0: micro_batch x dp */
    /* optimizer and schedule */
    int steps;
    double lr, min_lr;
    int warmup; /* steps */
    double weight_decay, grad_clip, beta1, beta2, eps;
    /* data */
    const char *data, *val_data, *data_order;
    long long seed;
    /* evaluation, sampling */
    int eval_every, val_batches, sample_every, sample_tokens, top_k;
    double temperature;
    /* output */
    const char *out, *metrics, *save_model;
    const char *ckpt_dir, *resume;
    int ckpt_every, keep_last;
    bool async_ckpt; /* write checkpoints from a background thread */
    int threads, log_every;
    bool quiet;
    /* parallelism: tp x pp x dp = processes */
    int tp, pp;        /* tensor and pipeline parallel sizes */
    const char *pp_schedule, *pp_split;
    int dp;            /* 0: processes / (tp x pp) */
    int zero;          /* ZeRO stage 0..3 */
    double bucket_mb;  /* gradient bucket size */
    bool no_overlap;   /* reduce buckets after backward instead of during it */
    const char *comm_algo;
    int ranks_per_node;
    double comm_timeout;
    double baseline_tokens_per_s; /* 1-process rate for the scaling efficiency */
    const char *trace;            /* Chrome trace-event JSON */
    const char *inject_fault;     /* tests: stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER], slow:RANK:FACTOR */
    /* batch-size scaling */
    const char *optimizer;        /* adamw, sgd, lamb, lars */
    double momentum, dampening, lars_eta;
    bool nesterov, lamb_clamp;
    const char *batch_schedule;   /* see optim/batch_schedule.h */
    bool strict_batch;
    const char *lr_scaling;       /* none, linear, sqrt */
    int base_batch;               /* sequences; 0: the final global batch */
    long long warmup_tokens;      /* 0: --warmup steps of the final batch */
    long long train_tokens;       /* 0: --steps steps of the final batch */
    bool noise_scale;             /* estimate the gradient noise scale */
    double target_val_loss;       /* stop once the validation loss reaches this (0: off) */
    /* guards and stragglers */
    double skip_spikes;           /* skip a step whose loss is this many standard deviations high (0: off) */
    int spike_window, max_skips;
    double straggler_threshold;   /* a rank this much slower than the median is named */
    bool balance;                 /* share micro-batches by measured speed */
    double noise_ema;
    /* compressed communication (comm/codec.h, comm/compressed.h) */
    const char *grad_compression;   /* none, fp16, bf16, fp8, int8, topk:FRACTION, onebit */
    int compression_block;          /* elements per scale (fp8, int8) */
    const char *compression_scheme; /* ring or exchange ("": the codec's default) */
    bool no_error_feedback;         /* drop what a lossy codec did not send (to show why it is kept) */
    bool zero_quant_weights;        /* ZeRO-3: int8 parameter gathers (qwZ) */
    bool zero_quant_grads;          /* ZeRO >= 1: int8 gradient reduce-scatter (qgZ) */
    bool zero_hpz;                  /* ZeRO-3: node-local secondary parameter shard (hpZ) */
    int freeze_step;                /* 1-bit Adam: the last step of full-precision Adam */
} TrainConfig;

void train_config_defaults(TrainConfig *cfg);
/* Runs the whole job on the processes of `world`; returns the exit status. */
int train_run(const TrainConfig *cfg, Comm *world);

#endif
