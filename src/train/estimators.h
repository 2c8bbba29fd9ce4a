/* estimators.h: the trainer's noise-scale estimators beyond B_simple, and the
 * goodput batch policy that follows one of them.
 *
 *  - precond: B_simple on Adam's preconditioned gradient P g, P = 1 /
 *    (sqrt(v_hat) + eps) with the optimizer's second moment as it stands
 *    before the step's update (bias-corrected; Pollux's estimator for adaptive
 *    optimizers). The micro-batch norms are taken where the raw ones are
 *    (data_parallel.c), the reduced one on the step's gradient. Measured
 *    once v_hat averages PRECOND_FROM_STEP updates: after one update v_hat
 *    is one squared gradient, so P g is each element over one sample of its
 *    own size, heavy-tailed and dominated by elements whose gradient is a
 *    cancellation (measured on the test model: float summation order alone
 *    moves the first step's estimate by 1e-5, from the fifth by 1e-7). With --noise-scale,
 *    --optimizer adamw, ZeRO 0 and no tensor, pipeline or context
 *    parallelism (the whole v must be where the gradient is); otherwise off,
 *    and refused only where asked for (--goodput-estimator precond).
 *  - curvature (--noise-scale-every N): B_noise = tr(H Sigma) / (G^T H G)
 *    (optim/curvature.h) every N steps, before the update, from one signed
 *    sum of the micro-batch gradients (Rademacher signs drawn from the seed,
 *    the step and the micro-batch's place in the global batch, so every
 *    layout draws the same) and two central differences, each two extra
 *    forward+backward passes over the step's global batch: 4 per measurement,
 *    counted in `noise_extra_passes`. Memory: three more flat buffers of the
 *    model's size on every rank (the probe, the saved gradient and the saved
 *    weights), so ZeRO 0 only, fp32, no tensor, pipeline or context
 *    parallelism, no --balance, 1-bit Adam or DiLoCo: refused otherwise.
 *  - curvature-precond: B_noise(P) = tr(P H P Sigma) / (G^T P H P G), the
 *    curvature noise scale of the update direction Adam takes, -lr P g
 *    (optim/curvature.h), with the precond estimator's P. At the curvature
 *    estimator's steps whenever both it and precond are on, once P exists
 *    (PRECOND_FROM_STEP): the probe becomes P z, and two more central
 *    differences along P z and P g, 4 more passes per measurement (counted in
 *    `noise_extra_passes`); its own EMA with the curvature decay; one more
 *    flat buffer (P g).
 *  - goodput (--batch-schedule goodput:MIN:MAX, optim/goodput.h): every
 *    --goodput-every steps the batch in [MIN, MAX] with the largest goodput
 *    for the estimator --goodput-estimator, with B_0 = MIN. Step times are
 *    rank 0's (broadcast, so every rank decides the same), without the
 *    curvature passes; --goodput-time-model A:B plants t = A + B x batch
 *    instead, for deterministic runs (tests). --goodput-estimator probe follows
 *    the noise probe (train/noise_probe.h), the last probe's value between probes.
 *    --goodput-noise-scale B follows a given value instead, --goodput-noise-curve
 *    a given curve of the step's training loss (optim/noise_curve.h); with
 *    --goodput-temperature the followed value is multiplied by the lr
 *    schedule's factor (the step's lr over --lr, --lr-scaling's batch factor
 *    divided out): at a lower lr a step feels proportionally less noise.
 *
 * The EMA state, the pass count and the step-time table are saved in
 * checkpoints (estimators_pack). Deliberately not here: B_simple itself
 * (optim/noise_scale.h), the step loop (trainer.c). */
#ifndef BS_TRAIN_ESTIMATORS_H
#define BS_TRAIN_ESTIMATORS_H

#include <stdbool.h>

#include "optim/curvature.h"
#include "optim/goodput.h"
#include "optim/noise_curve.h"
#include "optim/noise_scale.h"
#include "train/feature.h"

#define PRECOND_FROM_STEP 5 /* optimizer updates in v_hat before the preconditioned estimator starts */
#define ESTIMATOR_STATE_WORDS_V1 (4 + 4 + 1 + GOODPUT_STATE_WORDS) /* checkpoints before B_noise(P) */
#define ESTIMATOR_STATE_WORDS_V2 (ESTIMATOR_STATE_WORDS_V1 + 4) /* checkpoints before the probe */
#define ESTIMATOR_STATE_WORDS_V3 (ESTIMATOR_STATE_WORDS_V2 + 5) /* checkpoints before the preconditioned probe */
#define ESTIMATOR_STATE_WORDS (ESTIMATOR_STATE_WORDS_V3 + 4)    /* estimators_pack */

/* The noise-scale estimators and the goodput policy: the noise-scale feature's state. */
typedef struct {
    NoiseScale simple;        /* B_simple (optim/noise_scale.h), which an adaptive batch follows */
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


/* After the engine and batch schedule are set up: what is on, the buffers;
 * one line naming the flag for what cannot be done. */
void estimators_setup(const TrainContext *cx, Estimators *e);
void estimators_free(const TrainContext *cx, Estimators *e);
/* Before the step's forward and backward: the noise probe's measurement
 * when due (train/noise_probe.h), the preconditioner and the curvature's signed sum. */
void estimators_before_step(const TrainContext *cx, Estimators *e, StepResult *r);
/* After backward, before the update: |P G|^2 and (if due) the curvature
 * measurement, which calls grad (the gradient over the step's batch at the
 * weights as they are, reduced) four times and leaves weights and gradient
 * as they were. Adds the time it took to r->extra_seconds (the probe's is there already). */
void estimators_after_backward(const TrainContext *cx, Estimators *e, StepResult *r, GradientAt grad, void *ctx);
/* After the step: the EMAs, the values in r, and (goodput) the step time and
 * the batch of the steps to come (cx->batch). */
void estimators_after_step(const TrainContext *cx, Estimators *e, StepResult *r, double micro_precond_sq);
/* Adam's preconditioner P = 1 / (sqrt(v_hat) + eps) before this step's update: false unless the
 * preconditioned estimator is on (--noise-scale, AdamW, a flat layout) and v_hat averages PRECOND_FROM_STEP
 * updates. */
bool estimators_preconditioner(const TrainContext *cx, Estimators *e, Preconditioner *p);
/* The state saved in checkpoints (ESTIMATOR_STATE_WORDS doubles), and back. */
void estimators_pack(const Estimators *e, double *words);
void estimators_unpack(Estimators *e, const double *words, int count);

/* Noise scale and goodput: the flag-combination rules of this area, run by train_config_check in its order (the first broken
 * one is reported): false with a one-line reason. */
bool estimators_check_config(const TrainConfig *c, char *why, size_t n);

#endif
