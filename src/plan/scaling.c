/* scaling.c: the scaling sweep (see scaling.h). */
#include "plan/scaling.h"

#include <math.h>

int scaling_sweep(const PlanInput *in, const SearchSpace *space, bool weak, int from, int to, ScalePoint *points,
                  int *baseline) {
    int n = 0, plan_gpus = fleet_gpus(&in->fleet);
    *baseline = -1;
    SearchSpace s = *space;
    s.top = 1;
    s.dp = 0; /* the data-parallel degree always follows the GPU count */
    for (int gpus = from; gpus <= to && n < SCALING_MAX_POINTS; gpus *= 2, n++) {
        PlanInput at = *in;
        at.fleet.kinds = 1;
        at.fleet.count[0] = gpus;
        if (weak)
            for (int i = 0; i < at.batch.n; i++) {
                double seqs = round(in->batch.batch[i] / in->model.seq_len * gpus / plan_gpus);
                at.batch.batch[i] = (seqs < 1 ? 1 : seqs) * in->model.seq_len;
            }
        SearchStats stats;
        points[n].gpus = gpus;
        points[n].found = plan_search(&at, &s, &points[n].best, &stats) > 0;
        points[n].efficiency = 0;
        if (points[n].found && *baseline < 0) *baseline = n;
    }
    if (*baseline >= 0) {
        const ScalePoint *b = &points[*baseline];
        double per_gpu = b->best.tokens_per_s / b->gpus;
        for (int i = 0; i < n; i++)
            if (points[i].found) points[i].efficiency = points[i].best.tokens_per_s / points[i].gpus / per_gpu;
    }
    return n;
}
