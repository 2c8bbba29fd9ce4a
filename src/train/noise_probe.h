/* noise_probe.h: the gradient noise scale at the step's weights alone, "the
 * probe" (--noise-probe-every N).
 *
 * The in-run B_simple (optim/noise_scale.h) averages per-step estimates over
 * many steps whose weights differ; over a run |G|^2 falls ~100x and spikes,
 * so the average lags. The probe measures at one point: every N steps,
 * before the step's forward and backward (so at the weights the step's
 * update starts from), it runs K = --noise-probe-batches extra micro-batches
 * of --micro-batch sequences on every data-parallel rank, M = K x dp in all,
 * drawn from the training data by their own sampler: micro-batch i of the M
 * (i = k x dp + replica, as the step's are numbered) takes sequences keyed
 * by the seed, the step and i, within the training data's current epoch, so
 * every layout draws the same ones and the training batches are not moved.
 * From the M micro-batch gradients g_i (mean loss, before clipping) and
 * their mean g: tr(Sigma) = b/(M-1) sum |g_i - g|^2 and |G|^2 = |g|^2 -
 * tr(Sigma)/(M b), both unbiased: noise_scale_estimates() with B_small = b
 * (the mean of |g_i|^2) and B_big = M b (|g|^2). B_probe = tr / |G|^2,
 * successive probes averaged as B_simple is with --noise-probe-ema (0: each
 * probe alone, the default: the point is not to carry the lag). Where the
 * preconditioned B_simple runs (--noise-scale with AdamW, ZeRO 0, a flat
 * layout) and Adam's v_hat exists, the same from P g_i, P = 1/(sqrt(v_hat) +
 * eps) as it stands before the step: noise_scale_probe_precond, Pollux's
 * estimator at the step's weights.
 *
 * The training trajectory is bitwise that of a run without the probe: the
 * step's own pass zeroes the gradient and the micro-batch statistics the
 * probe's pass leaves behind, and nothing the probe does draws from the
 * training RNGs or the data position. Its cost: K micro-batch passes per
 * rank every N steps, counted in noise_probe_micro_batches, its time in
 * r->extra_seconds (kept out of goodput's step-time table).
 *
 * Layouts: data parallelism and accumulation, ZeRO 0-1, fp32, no tensor,
 * pipeline, context or expert parallelism, no 1-bit Adam or DiLoCo; refused
 * otherwise with one line. Deliberately not here: the estimator arithmetic
 * (optim/noise_scale.h), checkpoints (estimators_pack), policies acting on
 * it (estimators.c's goodput). */
#ifndef BS_TRAIN_NOISE_PROBE_H
#define BS_TRAIN_NOISE_PROBE_H

#include "train/estimators.h"

/* After the engine is built: on or off, the average; one line naming the flag for what cannot be done. */
void noise_probe_setup(const TrainContext *cx, Estimators *e);
/* One probe into the average ns, from what the engine's pass over M
 * micro-batches of b sequences leaves: micro_sum_sq = sum over the M of
 * |g_i / M|^2 (each micro-step's gradient is of the loss scaled by 1/M) and
 * mean_sq = |g|^2, g = sum_i g_i / M the reduced gradient. False (ns as it
 * was) when M < 2 or a norm is not finite. */
bool noise_probe_update(NoiseScale *ns, double micro_sum_sq, long M, double b, double mean_sq);
/* Before the step's forward and backward: the probe if this step is one
 * (r->noise_probe* set, r->extra_seconds += its time), else r->noise_probe*
 * NaN. A collective over the data-parallel ranks on probe steps. */
void noise_probe_measure(const TrainContext *cx, Estimators *e, StepResult *r);

#endif
