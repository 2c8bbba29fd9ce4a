/* feature_grad_norm_ranks.c: --log-grad-norm-per-rank, each rank's local
 * gradient norm before the reduction in the metrics, without --noise-scale.
 *
 * The engine measures every micro-step's local gradient before it is
 * reduced (what the noise scale measures); a rank's norm is the root of the
 * sum over its micro-steps of their squared norms, in the units of the
 * step's loss (the mean over the global batch's tokens). With one micro-step
 * per rank it is the norm of the rank's own gradient; under tensor or
 * pipeline parallelism each rank's is of the shard it holds. After backward
 * the ranks all-gather their values (one double each) and rank 0 writes them
 * as "grad_norm_per_rank", in world-rank order, to each step's metrics
 * line. A demonstration of the feature interface (train/feature.h): this
 * file, its line in the feature list and the flag's line are all it takes. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "train/feature.h"
#include "train/metrics.h"

typedef struct {
    double *norms; /* per world rank, the last step's */
} GradNormRanks;

static bool wanted(const TrainConfig *cfg) { return cfg->estimators.log_grad_norm_per_rank; }

static void configure(const TrainContext *cx, EngineConfig *ec) {
    (void)cx;
    ec->measure_micro_norms = true;
}

static void *create(const TrainContext *cx) {
    GradNormRanks *g = bs_calloc(1, sizeof *g);
    g->norms = bs_calloc((size_t)cx->world_size, sizeof(double));
    return g;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    GradNormRanks *g = state;
    free(g->norms);
    free(g);
}

/* A collective over the world, every step. */
static void after_backward(void *state, const TrainContext *cx, TrainStep *s) {
    GradNormRanks *g = state;
    const double mine = sqrt(s->engine->micro_sum_squares);
    comm_allgather_bytes(cx->world, &mine, sizeof mine, g->norms);
}

static void metrics(void *state, const TrainContext *cx, json_t *record) {
    const GradNormRanks *g = state;
    json_t *ranks = json_array();
    for (int r = 0; r < cx->world_size; r++) json_array_append_new(ranks, metrics_number(g->norms[r]));
    json_object_set_new(record, "grad_norm_per_rank", ranks);
}

const Feature grad_norm_ranks_feature = {
    .name = "grad_norm_ranks", .wanted = wanted, .configure = configure, .create = create, .free = destroy,
    .after_backward = after_backward, .metrics = metrics,
};
