/* feature_fault.c: --debug-inject-fault (train/fault.h) as a feature
 * (train/feature.h): the plan is checked before the engine is built, its
 * NaN's target once the layers are placed; a rank stalls or dies before its
 * step, a NaN goes into a layer's gradient, a slow rank idles after its
 * backward. On with --debug-inject-fault. */
#include <stdlib.h>

#include "core/error.h"
#include "train/fault.h"
#include "train/feature.h"

static bool wanted(const TrainConfig *cfg) { return cfg->debug.inject_fault && *cfg->debug.inject_fault; }

static void configure(const TrainContext *cx, EngineConfig *ec) {
    (void)ec;
    FaultPlan plan;
    fault_parse(&plan, cx->cfg->debug.inject_fault);
    fault_check_rank(&plan, cx->world_size);
}

/* A NaN's target must exist: the rank, and a layer on that rank's pipeline
 * stage (with virtual stages, in the stage's first chunk). */
static void target_nan(FaultPlan *plan, const TrainContext *cx) {
    const Grid *g = engine_grid(cx->engine);
    int *first = bs_malloc(sizeof(int) * (size_t)g->pp), *count = bs_malloc(sizeof(int) * (size_t)g->pp);
    for (int s = 0; s < g->pp; s++) engine_stage_layers(cx->engine, s, &first[s], &count[s]);
    FaultLayout layout = {cx->world_size, cx->model->num_layers, g->tp, g->pp, first, count};
    fault_target_nan(plan, &layout);
    free(first);
    free(count);
}

static void *create(const TrainContext *cx) {
    FaultPlan *plan = bs_calloc(1, sizeof *plan);
    fault_parse(plan, cx->cfg->debug.inject_fault);
    if (plan->kind == FAULT_NAN || plan->kind == FAULT_NANS) target_nan(plan, cx);
    return plan;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    free(state);
}

static void before_step(void *state, const TrainContext *cx, TrainStep *s) {
    (void)s;
    fault_maybe_stop(state, cx->rank, cx->step + 1);
}

static void before_forward(void *state, const TrainContext *cx, TrainStep *s) {
    (void)s;
    const FaultPlan *plan = state;
    if (fault_nan_now(plan, cx->rank, cx->step + 1))
        engine_inject_nan(cx->engine, plan->block); /* a layer's gradient: block 0 is the embeddings */
}

static void after_backward(void *state, const TrainContext *cx, TrainStep *s) {
    s->compute += fault_slow_down(state, cx->rank, s->engine->busy);
}

const Feature fault_feature = {
    .name = "fault", .wanted = wanted, .configure = configure, .create = create, .free = destroy,
    .before_step = before_step, .before_forward = before_forward, .after_backward = after_backward,
};
