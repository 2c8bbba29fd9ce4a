/* step_result.h: what one optimizer step did, as the trainer returns it to
 * the loop that reports it (train/report.h) and writes it (train/metrics.h). */
#ifndef BS_TRAIN_STEP_RESULT_H
#define BS_TRAIN_STEP_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include "parallel/engine.h"
#include "train/step_stats.h"

typedef struct {
    bool skipped;           /* the guard kept the update from happening */
    char skip_reason[192];
    double median_compute;  /* median over ranks of compute seconds */
    int straggler;          /* the slowest rank beyond the threshold, or -1 */
    double straggler_compute; /* its compute seconds */
    long batch;      /* global batch of this step, sequences */
    uint64_t counted; /* its tokens the loss counts (all of them without loss masks) */
    int accum_steps; /* micro-steps per rank */
    double loss, grad_norm, lr;
    double noise_scale; /* B_simple in sequences, NaN until resolved */
    double noise_precond, noise_curvature; /* train/estimators.h: B_simple of P g and B_noise, NaN until resolved */
    double noise_curvature_precond;        /* B_noise(P) of the update direction P g, NaN until resolved */
    double noise_probe, noise_probe_grad_sq, noise_probe_trace; /* train/noise_probe.h: at probe steps, else NaN */
    double noise_probe_precond, noise_probe_precond_grad_sq, noise_probe_precond_trace; /* the same of P g_i */
    long extra_passes;                     /* curvature's extra forward+backward passes so far */
    long probe_micro_batches;              /* the probe's extra micro-batch passes on this rank so far */
    double extra_seconds;                  /* this step's time in them and in the noise probe */
    double goodput, efficiency;            /* --batch-schedule goodput: of this step's batch (NaN: unknown) */
    long next_batch;                       /* goodput: the batch chosen at this step's decision (0: none) */
    double seconds, slowest, fastest; /* this rank's step; max and min over ranks (train/step_stats.h) */
    double peak_rss;                  /* largest peak resident memory over ranks, bytes */
    double pipe_busy, pipe_idle;      /* this rank's pipeline compute and wait time */
    double bubble;                    /* largest idle share of a step over ranks */
    double bubble_theory;             /* the schedule's idle share of a step in theory (parallel/schedule.h), with
                                         this rank's measured seconds per action */
    double bubble_simulated;          /* the worst stage's idle share with each stage's measured seconds per action
                                         (the schedule replayed on these stages, unequal ones included) */
    int max_live;                     /* activation sets alive at once on this rank */
    double comm_exposed, comm_busy;   /* this rank's blocked time; operations' total time */
    uint64_t comm_bytes;
    uint64_t comm_bytes_fp32;         /* what the same operations would send uncompressed */
    uint64_t cp_bytes;                /* context parallelism: keys, values and their gradients sent by this rank */
    double cp_exposed;                /* context parallelism: this rank's time blocked on them */
    uint64_t moe_a2a_bytes;           /* expert parallelism: rows, counts and gradients this rank's all-to-alls sent */
    double moe_a2a_exposed;           /* expert parallelism: this rank's time blocked on them */
    int stop_signal;                  /* a rank was asked to stop (train/preempt.h): the job ends after this step */
    bool fp8;                         /* --precision fp8: the FP8 tensors' statistics below, over every rank */
    double fp8_underflow[3];          /* per kind (input, weight, grad): share of non-zero values flushed to zero */
    double fp8_overflow[3];           /* per kind: share of values saturated at the format's max */
} StepResult;

/* The exchange's statistics (step_stats.h), the engine's and its traffic into r; `after`: this rank's seconds
 * since the exchange. */
void step_result_record(StepResult *r, const StepStats *st, const EngineStepStats *es, const Engine *e,
                        double after);

/* Tokens per second of the step, timed by its slowest rank. */
static inline double step_tokens_per_s(const StepResult *r, int seq_len) {
    return (double)r->batch * seq_len / r->slowest;
}

#endif
