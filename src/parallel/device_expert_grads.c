/* device_expert_grads.c: the flat gradient cut into the expert ranges and
 * the ranges between them, each all-reduced (ZeRO 1-2: reduce-scattered, the
 * parameters all-gathered after the update) over its group (see
 * device_expert_grads.h). */
#include "parallel/device_expert_grads.h"

#include <stdlib.h>

#include "core/error.h"

typedef struct {
    size_t offset, count;
    DeviceComm *group; /* NULL: one rank, nothing to sum */
} GradRange;

struct DeviceExpertGrads {
    GradRange *ranges;
    int n;
    DeviceComm *data, *expert_data;
    bool sharded;
    size_t total;
};

static void add(DeviceExpertGrads *x, size_t offset, size_t count, DeviceComm *group) {
    if (count > 0) x->ranges[x->n++] = (GradRange){offset, count, group};
}

DeviceExpertGrads *device_expert_grads_create(const GPTConfig *cfg, DeviceComm *data, DeviceComm *expert_data,
                                              bool sharded) {
    DeviceExpertGrads *x = bs_calloc(1, sizeof *x);
    x->data = data, x->expert_data = expert_data;
    x->sharded = sharded;
    x->total = gpt_num_params(cfg);
    const int cap = gpt_max_segments(cfg);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    const int nseg = gpt_param_segments(cfg, segs, cap);
    x->ranges = bs_malloc(sizeof(GradRange) * (size_t)(2 * nseg + 1));
    size_t at = 0;
    for (int i = 0; i < nseg; i++) {
        if (segs[i].kind != TK_EXPERTS || segs[i].count == 0) continue;
        add(x, at, segs[i].offset - at, data);
        add(x, segs[i].offset, segs[i].count, expert_data);
        at = segs[i].offset + segs[i].count;
    }
    add(x, at, gpt_num_params(cfg) - at, data);
    free(segs);
    return x;
}

void device_expert_grads_free(DeviceExpertGrads *x) {
    if (!x) return;
    free(x->ranges);
    free(x);
}

/* The host waits for both groups' operations. */
static void finish(DeviceExpertGrads *x) {
    DeviceComm *groups[2] = {x->data, x->expert_data};
    for (int k = 0; k < 2; k++)
        if (groups[k]) device_comm_wait(groups[k]), device_comm_finish(groups[k]);
}

void device_expert_grads_reduce(DeviceExpertGrads *x, float *grads) {
    for (int i = 0; i < x->n; i++) {
        const GradRange *r = &x->ranges[i];
        if (!r->group) continue; /* buf: the window */
        if (x->sharded) device_comm_reduce_scatter(r->group, grads + r->offset, r->offset, r->count, x->total);
        else device_comm_allreduce(r->group, grads + r->offset, r->count, false);
    }
    finish(x);
}

void device_expert_grads_gather(DeviceExpertGrads *x, float *params) {
    for (int i = 0; i < x->n; i++) {
        const GradRange *r = &x->ranges[i];
        if (r->group) device_comm_allgather(r->group, params + r->offset, r->offset, r->count, x->total);
    }
    finish(x);
}
