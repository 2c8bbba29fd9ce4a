/* feature_watch.c: watching a run (train/watch.h) as a feature
 * (train/feature.h): each layer's gradient and weight norm and each rank's
 * local gradient norm measured once the step is evaluated, the TensorBoard
 * scalars (rank 0), and the norms and MFU in the metrics line. Always
 * created; it measures only with --metrics or --tensorboard. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "train/feature.h"
#include "train/watch.h"

typedef struct {
    Watch watch;
    double mfu; /* the last step's */
} WatchState;

static void *create(const TrainContext *cx) {
    WatchState *w = bs_calloc(1, sizeof *w);
    watch_init(&w->watch, cx->cfg, cx->rank, cx->world_size, cx->model->num_layers,
               gpt_flops_per_token(cx->model, cx->cfg->model.seq_len));
    return w;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    watch_free(&((WatchState *)state)->watch);
    free(state);
}

static void observe(void *state, const TrainContext *cx, const StepResult *r, const StepRecord *records,
                    double val_loss) {
    WatchState *w = state;
    watch_measure(&w->watch, cx->engine, cx->cfg, records); /* per-layer norms: a collective when on */
    w->mfu = watch_mfu(&w->watch, r, cx->cfg->model.seq_len);
    if (cx->rank == 0) watch_write_tensorboard(&w->watch, r, cx->step, val_loss, cx->cfg->model.seq_len);
}

static void metrics(void *state, const TrainContext *cx, json_t *record) {
    (void)cx;
    const WatchState *w = state;
    watch_metrics(&w->watch, record, w->mfu);
}

const Feature watch_feature = {
    .name = "watch", .create = create, .free = destroy, .observe = observe, .metrics = metrics,
};
