/* feature_balance.c: --balance (train/balance.h) as a feature
 * (train/feature.h): micro-batches shared among the data-parallel replicas by
 * their measured speed, so a straggling machine gets less work. Before the
 * forward it sets this replica's micro-batches and first sequence, after the
 * step it shares the next steps' from every rank's compute time (the step's
 * all-gather), and the split goes into the metrics
 * ("micro_batches_per_replica"). On with --balance. */
#include <stdlib.h>

#include "core/error.h"
#include "train/balance.h"
#include "train/feature.h"

static bool wanted(const TrainConfig *cfg) { return cfg->guards.balance; }

static void *create(const TrainContext *cx) {
    Balance *b = bs_calloc(1, sizeof *b);
    const Grid *g = engine_grid(cx->engine);
    balance_init(b, true, cx->dp_size, cx->dp_index, g->tp * g->pp, cx->cfg->batch.micro_batch);
    return b;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    balance_free(state);
    free(state);
}

static void before_forward(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    s->r->accum_steps = balance_micro_batches(state, s->r->batch);
    s->replica_start = balance_first_sequence(state);
}

static void after_step(void *state, const TrainContext *cx, TrainStep *s) {
    (void)cx;
    balance_update(state, s->stats->compute);
}

static void metrics(void *state, const TrainContext *cx, json_t *record) {
    const Balance *b = state;
    json_t *split = json_array();
    for (int d = 0; d < cx->dp_size; d++) json_array_append_new(split, json_integer(b->split[d]));
    json_object_set_new(record, "micro_batches_per_replica", split);
}

const Feature balance_feature = {
    .name = "balance", .wanted = wanted, .create = create, .free = destroy, .before_forward = before_forward,
    .after_step = after_step, .metrics = metrics,
};
