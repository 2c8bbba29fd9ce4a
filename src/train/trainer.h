/* trainer.h: the training job: configuration and the step loop.
 *
 * One optimizer step consumes one global batch of sequences:
 *   global_batch = micro_batch x accumulation_steps x data_parallel_size.
 * The loss is the mean over every token of the global batch, so the update
 * is the one a single process would compute on the whole batch. */
#ifndef BS_TRAIN_TRAINER_H
#define BS_TRAIN_TRAINER_H

#include <stdbool.h>

typedef struct {
    /* model */
    int layers, heads, channels, seq_len, vocab_size;
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
    int threads, log_every;
    bool quiet;
} TrainConfig;

void train_config_defaults(TrainConfig *cfg);
/* Runs the whole job; returns the process exit status. */
int train_run(const TrainConfig *cfg);

#endif
