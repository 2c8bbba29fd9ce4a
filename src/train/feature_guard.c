/* feature_guard.c: the step guard as a feature (train/feature.h): where a
 * non-finite value first appeared goes into the step's all-gather, the
 * update is vetoed for a non-finite value on any rank, a non-finite loss or
 * gradient norm, or a loss spike (train/guard.h), the skips are counted in
 * the metrics, and --max-skips in a row stop the run. Always on. */
#include <stdlib.h>

#include "core/error.h"
#include "train/feature.h"
#include "train/guard.h"

static void *create(const TrainContext *cx) {
    Guard *g = bs_calloc(1, sizeof *g);
    guard_init(g, cx->cfg->guards.skip_spikes, cx->cfg->guards.spike_window, cx->cfg->guards.max_skips);
    return g;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    guard_free(state);
    free(state);
}

static void record(void *state, const TrainContext *cx, StepRecord *mine) {
    (void)state;
    guard_nonfinite_keys(cx->rank, cx->world_size, cx->model->num_layers, engine_first_nonfinite_layer(cx->engine),
                         engine_first_nonfinite_block(cx->engine), mine->nonfinite);
}

static bool veto(void *state, const TrainContext *cx, TrainStep *s) {
    StepResult *r = s->r;
    return guard_nonfinite_reason(s->stats->nonfinite, cx->world_size, cx->model->num_layers, r->skip_reason,
                                  sizeof r->skip_reason) ||
           guard_skip(state, r->loss, s->grad_sq, r->skip_reason, sizeof r->skip_reason);
}

static void after_update(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    if (s->r->skipped) guard_reject(state);
    else guard_accept(state, s->r->loss);
}

static void metrics(void *state, const TrainContext *cx, json_t *record) {
    (void)cx;
    json_object_set_new(record, "skips", json_integer(((const Guard *)state)->skips));
}

static void end_step(void *state, const TrainContext *cx, const StepResult *r) {
    guard_stop_if_stuck(state, cx->step, r->skip_reason);
}

const Feature guard_feature = {
    .name = "guard", .create = create, .free = destroy, .record = record, .veto = veto,
    .after_update = after_update, .metrics = metrics, .end_step = end_step,
};
