/* metrics.h: the metrics file (--metrics), one JSON object per step. Opening
 * it to resume at step k keeps its lines of steps <= k (a run that died after
 * its last checkpoint wrote steps that are now done again). JSON has no NaN or
 * infinity: such values are written as null. Rank 0 writes it; the values
 * come from the step's result and the state the caller passes. */
#ifndef BS_TRAIN_METRICS_H
#define BS_TRAIN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "train/step_result.h"

typedef struct {
    FILE *file;                   /* NULL: no metrics (another rank, or no --metrics) */
    int seq_len, ranks, pp;       /* pp > 1: the pipeline's bubble fields */
    int replicas;                 /* data-parallel */
    bool noise_scale;             /* --noise-scale: B_simple */
    double baseline_tokens_per_s; /* one process's rate for the scaling efficiency (0: none) */
    bool curvature, goodput;      /* --noise-scale-every; --batch-schedule goodput (train/estimators.h) */
    bool probe;                   /* --noise-probe-every (train/noise_probe.h) */
} Metrics;

/* The run's state beside the step's result. */
typedef struct {
    long step;
    uint64_t tokens;   /* consumed so far */
    double val_loss;   /* NaN: not evaluated at this step */
    double ckpt_stall; /* seconds the previous step's checkpoint stopped training (0: none) */
    size_t state_bytes, buffer_bytes; /* this rank's parameters, gradients and optimizer state; buffers */
    size_t activation_bytes;          /* this rank's activation sets, backward scratch, context-attention buffers */
    void (*add)(void *ctx, json_t *record); /* the features' keys (train/feature.h), last (NULL: none) */
    void *add_ctx;
} MetricsStep;

/* The file at path for a run at step `step` (0: a new file). */
FILE *metrics_open(const char *path, long step);
void metrics_write(const Metrics *m, const StepResult *r, const MetricsStep *s);
void metrics_close(Metrics *m);
/* x as a JSON number, or null when it is not finite. */
json_t *metrics_number(double x);

#endif
