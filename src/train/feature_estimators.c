/* feature_estimators.c: the gradient noise scale as a feature
 * (train/feature.h): B_simple from the step's micro-batch norms
 * (optim/noise_scale.h), which an adaptive batch follows, and the estimators
 * beyond it with the goodput policy (train/estimators.h). Always on (each
 * part by its flags). Not yet narrowed to the context: it reads and sets the
 * trainer's batch policy and noise state through cx->trainer. */
#include <math.h>

#include "train/estimators.h"
#include "train/feature.h"

static void *create(const TrainContext *cx) {
    estimators_setup(cx->trainer);
    return cx->trainer;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    estimators_free(state);
}

static void before_forward(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    estimators_before_step(state, s->r);
}

static void record(void *state, const TrainContext *cx, StepRecord *mine) {
    const Trainer *tr = state;
    if (tr->est.precond_on) mine->micro_sq_precond = engine_chunk_micro_precond_sum_squares(engine_chunk(cx->engine, 0));
}

/* Before the update: the step's weights. */
static void before_update(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    estimators_after_backward(state, s->r, s->gradient_pass, s->pass_ctx);
}

/* Adaptive batch: grow toward the measured noise scale B_simple, at
 * accumulation granularity, never shrinking, within [MIN, MAX]. */
static void adapt_batch(Trainer *tr, double noise_scale) {
    if (!tr->adaptive || tr->est.goodput_on || isnan(noise_scale)) return; /* goodput: estimators.h decides */
    long granule = (long)tr->cfg.micro_batch * tr->dp_size;
    long target = (long)(noise_scale / granule) * granule;
    if (target > tr->adaptive_max) target = tr->adaptive_max;
    if (target > tr->adaptive_batch) tr->adaptive_batch = target;
}

/* The gradient noise scale B_simple from this step (NaN when off or skipped); an adaptive batch follows it. */
static double measure_noise(Trainer *tr, const StepResult *r, double micro_sq, double grad_sq) {
    const int B = tr->cfg.micro_batch;
    if (!tr->cfg.noise_scale || r->skipped) return NAN;
    /* micro-step gradients are of the loss scaled by 1/(batch T): rescale to mean-loss units */
    double micro_batches = (double)r->batch / B;
    double small_sq = micro_sq * micro_batches; /* mean over micro-batches of (M |g_m|)^2 */
    noise_scale_update(&tr->noise, small_sq, B, grad_sq, (double)r->batch);
    double b_simple = noise_scale_simple(&tr->noise);
    adapt_batch(tr, b_simple);
    return b_simple;
}

static void after_step(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    s->r->noise_scale = measure_noise(state, s->r, s->stats->micro_sq, s->grad_sq);
    estimators_after_step(state, s->r, s->stats->micro_sq_precond);
}

static void pack(void *state, const TrainContext *cx, CkptManifest *m) {
    (void)cx;
    m->num_estimator_words = ESTIMATOR_STATE_WORDS;
    estimators_pack(state, m->estimators);
}

static void unpack(void *state, const TrainContext *cx, const CkptManifest *m) {
    (void)cx;
    estimators_unpack(state, m->estimators, m->num_estimator_words);
}

const Feature estimators_feature = {
    .name = "estimators", .create = create, .free = destroy, .before_forward = before_forward, .record = record,
    .before_update = before_update, .after_step = after_step, .pack = pack, .unpack = unpack,
};
