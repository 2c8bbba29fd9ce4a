/* feature_estimators.c: the gradient noise scale as a feature
 * (train/feature.h): B_simple from the step's micro-batch norms
 * (optim/noise_scale.h), which an adaptive batch follows, and the estimators
 * beyond it with the goodput policy (train/estimators.h), which steer the
 * trainer's batch policy (cx->batch). Always on (each part by its flags):
 * its state is in every checkpoint's manifest. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "train/estimators.h"
#include "train/feature.h"

static void *create(const TrainContext *cx) {
    Estimators *e = bs_calloc(1, sizeof *e);
    noise_scale_init(&e->simple, cx->cfg->estimators.noise_ema);
    e->goodput_on = strncmp(cx->cfg->batch.schedule, "goodput", 7) == 0;
    estimators_setup(cx, e);
    return e;
}

static void destroy(void *state, const TrainContext *cx) {
    estimators_free(cx, state);
    free(state);
}

static void before_forward(void *state, const TrainContext *cx, TrainStep *s) {
    estimators_before_step(cx, state, s->r);
}

static void record(void *state, const TrainContext *cx, StepRecord *mine) {
    const Estimators *e = state;
    if (e->precond_on) mine->micro_sq_precond = engine_chunk_micro_precond_sum_squares(engine_chunk(cx->engine, 0));
}

/* Before the update: the step's weights. */
static void before_update(void *state, const TrainContext *cx, TrainStep *s) {
    estimators_after_backward(cx, state, s->r, s->gradient_pass, s->pass_ctx);
}

/* Adaptive batch: grow toward the measured noise scale B_simple, at
 * accumulation granularity, never shrinking, within [MIN, MAX]. */
static void adapt_batch(const TrainContext *cx, const Estimators *e, double noise_scale) {
    BatchPolicy *b = cx->batch;
    if (!b->adaptive || e->goodput_on || isnan(noise_scale)) return; /* goodput: estimators.h decides */
    long granule = (long)cx->cfg->batch.micro_batch * cx->dp_size;
    long target = (long)(noise_scale / granule) * granule;
    if (target > b->adaptive_max) target = b->adaptive_max;
    if (target > b->adaptive_batch) b->adaptive_batch = target;
}

/* The gradient noise scale B_simple from this step (NaN when off or skipped); an adaptive batch follows it. */
static double measure_noise(const TrainContext *cx, Estimators *e, const StepResult *r, double micro_sq,
                            double grad_sq) {
    const int B = cx->cfg->batch.micro_batch;
    if (!cx->cfg->estimators.noise_scale || r->skipped) return NAN;
    /* micro-step gradients are of the loss scaled by 1/(batch T): rescale to mean-loss units */
    double micro_batches = (double)r->batch / B;
    double small_sq = micro_sq * micro_batches; /* mean over micro-batches of (M |g_m|)^2 */
    noise_scale_update(&e->simple, small_sq, B, grad_sq, (double)r->batch);
    double b_simple = noise_scale_simple(&e->simple);
    adapt_batch(cx, e, b_simple);
    return b_simple;
}

static void after_step(void *state, const TrainContext *cx, TrainStep *s) {
    s->r->noise_scale = measure_noise(cx, state, s->r, s->stats->micro_sq, s->grad_sq);
    estimators_after_step(cx, state, s->r, s->stats->micro_sq_precond);
}

static void pack(void *state, const TrainContext *cx, CkptManifest *m) {
    (void)cx;
    const Estimators *e = state;
    const NoiseScale *ns = &e->simple;
    double noise[4] = {ns->ema_decay, ns->grad_sq_ema, ns->trace_ema, ns->ema_weight};
    memcpy(m->noise_scale, noise, sizeof noise);
    m->num_estimator_words = ESTIMATOR_STATE_WORDS;
    estimators_pack(e, m->estimators);
}

static void unpack(void *state, const TrainContext *cx, const CkptManifest *m) {
    (void)cx;
    Estimators *e = state;
    e->simple.grad_sq_ema = m->noise_scale[1];
    e->simple.trace_ema = m->noise_scale[2];
    e->simple.ema_weight = m->noise_scale[3];
    estimators_unpack(e, m->estimators, m->num_estimator_words);
}

const Feature estimators_feature = {
    .name = "estimators", .create = create, .free = destroy, .before_forward = before_forward, .record = record,
    .before_update = before_update, .after_step = after_step, .pack = pack, .unpack = unpack,
};
