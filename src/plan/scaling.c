/* scaling.c: the scaling sweep (see scaling.h). */
#include "plan/scaling.h"

#include <math.h>

double ideal_single_gpu_tokens_per_s(const PlanInput *in) {
    PlanInput one = *in;
    one.fleet.kinds = 1;
    one.fleet.count[0] = 1;
    double best = 0;
    for (int mb = 1; mb <= 16; mb *= 2) {
        Layout l = layout_default();
        l.zero = 0, l.micro_batch = mb, l.sequence_parallel = false;
        char why[256];
        if (!layout_check(&one, &l, why, sizeof why)) continue;
        PlanResult r;
        plan_evaluate(&one, &l, &r);
        if (r.tokens_per_s > best) best = r.tokens_per_s;
    }
    return best;
}

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
    double ideal = ideal_single_gpu_tokens_per_s(in);
    for (int i = 0; i < n; i++) {
        points[i].linear = points[i].found && ideal > 0 ? points[i].best.tokens_per_s / points[i].gpus / ideal : 0;
        if (*baseline >= 0 && points[i].found) {
            const ScalePoint *b = &points[*baseline];
            points[i].efficiency = points[i].best.tokens_per_s / points[i].gpus / (b->best.tokens_per_s / b->gpus);
        }
    }
    return n;
}
