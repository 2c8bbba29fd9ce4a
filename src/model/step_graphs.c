/* step_graphs.c: the device step's graphs (step_graphs.h): capture on the
 * second call with a key, replay after. */
#include "model/step_graphs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One captured piece of work: warmed up under key, then its graph. */
typedef struct {
    DeviceGraph *graph;
    uint32_t key;
    int calls; /* with this key: 1 after the warm-up */
} Replay;

struct StepGraphs {
    Device *dev;
    size_t tokens;
    int32_t *staged;                 /* pinned: inputs then targets (tokens each) */
    AdamWStepScalars *host_scalars;  /* pinned: the next update's values */
    AdamWStepScalars *scalars;       /* device: what the update graph reads */
    DeviceEvent *fork;
    Replay micro, update;
};

StepGraphs *step_graphs_create(Device *dev, size_t tokens) {
    StepGraphs *sg = calloc(1, sizeof *sg);
    if (!sg) return NULL; /* device_error says nothing: the caller's reason is "out of host memory" */
    sg->dev = dev;
    sg->tokens = tokens;
    sg->staged = device_host_alloc(dev, 2 * tokens * sizeof(int32_t));
    sg->host_scalars = device_host_alloc(dev, sizeof *sg->host_scalars);
    sg->scalars = device_alloc(dev, sizeof *sg->scalars);
    sg->fork = device_event_create(dev);
    if (!sg->staged || !sg->host_scalars || !sg->scalars || !sg->fork) {
        step_graphs_free(sg);
        return NULL;
    }
    return sg;
}

void step_graphs_free(StepGraphs *sg) {
    if (!sg) return;
    device_graph_free(sg->dev, sg->micro.graph);
    device_graph_free(sg->dev, sg->update.graph);
    device_event_destroy(sg->dev, sg->fork);
    device_free(sg->dev, sg->scalars);
    device_host_free(sg->dev, sg->host_scalars);
    device_host_free(sg->dev, sg->staged);
    free(sg);
}

int step_graphs_fork(StepGraphs *sg, DeviceStream *from, DeviceStream *to) {
    if (device_event_record(sg->dev, from, sg->fork) != 0) return -1;
    return device_stream_wait(sg->dev, to, sg->fork);
}

typedef enum { RUN_WARM_UP, RUN_CAPTURE, RUN_REPLAY } RunMode;

/* How r's work runs this time: the first call with a key warms up, the second captures, the rest replay (a new
 * key drops the old graph). */
static RunMode run_mode(StepGraphs *sg, Replay *r, uint32_t key) {
    if (r->calls > 0 && r->key != key) {
        device_graph_free(sg->dev, r->graph);
        *r = (Replay){0};
    }
    r->key = key;
    if (r->graph) return RUN_REPLAY;
    return ++r->calls == 1 ? RUN_WARM_UP : RUN_CAPTURE;
}

static int begin_capture(StepGraphs *sg, DeviceStream *stream) { return device_capture_begin(sg->dev, stream); }

/* The capture ended (even after the work failed) and its graph launched. */
static int end_and_launch(StepGraphs *sg, DeviceStream *stream, Replay *r, int work_rc) {
    r->graph = device_capture_end(sg->dev, stream);
    if (work_rc != 0 || !r->graph) return -1;
    return device_graph_launch(sg->dev, stream, r->graph);
}

int step_graphs_micro_batch(StepGraphs *sg, DeviceStream *stream, const int32_t *inputs, const int32_t *targets,
                            float dloss, MicroBatchWork work, void *model) {
    const size_t n = sg->tokens;
    memcpy(sg->staged, inputs, n * sizeof *inputs);
    memcpy(sg->staged + n, targets, n * sizeof *targets);
    uint32_t key;
    memcpy(&key, &dloss, sizeof key);
    switch (run_mode(sg, &sg->micro, key)) {
    case RUN_WARM_UP: return work(model, sg->staged, sg->staged + n, dloss);
    case RUN_CAPTURE:
        if (begin_capture(sg, stream) != 0) return -1;
        return end_and_launch(sg, stream, &sg->micro, work(model, sg->staged, sg->staged + n, dloss));
    default: return device_graph_launch(sg->dev, stream, sg->micro.graph);
    }
}

AdamWStepScalars adamw_step_scalars(const AdamWStep *s) {
    return (AdamWStepScalars){.grad_scale = s->grad_scale,
                              .step_size = s->lr / (1.0f - powf(s->beta1, (float)s->step)),
                              .bias2_sqrt = sqrtf(1.0f - powf(s->beta2, (float)s->step)),
                              .decay = 1.0f - s->lr * s->weight_decay};
}

int step_graphs_adamw(StepGraphs *sg, DeviceStream *stream, const AdamWStep *s, UpdateWork work, void *model) {
    *sg->host_scalars = adamw_step_scalars(s);
    if (device_copy(sg->dev, stream, sg->scalars, sg->host_scalars, sizeof *sg->scalars, COPY_HOST_TO_DEVICE) != 0)
        return -1;
    switch (run_mode(sg, &sg->update, 0)) {
    case RUN_WARM_UP: return work(model, s, sg->scalars);
    case RUN_CAPTURE:
        if (begin_capture(sg, stream) != 0) return -1;
        return end_and_launch(sg, stream, &sg->update, work(model, s, sg->scalars));
    default: return device_graph_launch(sg->dev, stream, sg->update.graph);
    }
}
