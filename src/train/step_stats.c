/* step_stats.c: a step's statistics from one all-gather (see step_stats.h). */
#include "train/step_stats.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "train/straggler.h"

void step_stats_init(StepStatsExchange *x, Comm *world, double straggler_threshold) {
    x->world = world;
    x->ranks = comm_size(world);
    x->straggler_threshold = straggler_threshold;
    x->records = bs_calloc((size_t)x->ranks, sizeof(StepRecord));
    x->compute = bs_calloc((size_t)x->ranks, sizeof(double));
    x->scratch = bs_calloc((size_t)x->ranks, sizeof(double));
}

void step_stats_free(StepStatsExchange *x) {
    free(x->records);
    free(x->compute);
    free(x->scratch);
    x->records = NULL;
    x->compute = x->scratch = NULL;
}

/* Peak resident memory of this process (VmHWM), 0 if unknown. */
static long long peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static double larger(double a, double b) { return b > a ? b : a; }

StepStats step_stats_reduce(StepStatsExchange *x) {
    const StepRecord *rec = x->records;
    StepStats s = {0};
    s.slowest = s.fastest = rec[0].seconds;
    for (int i = 0; i < x->ranks; i++) {
        const StepRecord *r = &rec[i];
        s.loss_sum += r->loss_sum;
        s.micro_sq += r->micro_sq;
        s.micro_sq_precond += r->micro_sq_precond;
        s.nonfinite[0] = larger(s.nonfinite[0], r->nonfinite[0]);
        s.nonfinite[1] = larger(s.nonfinite[1], r->nonfinite[1]);
        s.slowest = larger(s.slowest, r->seconds);
        s.fastest = r->seconds < s.fastest ? r->seconds : s.fastest;
        s.peak_rss = larger(s.peak_rss, r->peak_rss);
        double cycle = r->pipe_busy + r->pipe_idle;
        s.bubble = larger(s.bubble, cycle > 0 ? r->pipe_idle / cycle : 0);
        s.stop_signal = (int)larger(s.stop_signal, r->stop_signal);
        x->compute[i] = r->compute;
    }
    s.median_compute = straggler_median(x->compute, x->ranks, x->scratch);
    s.straggler = straggler_find(x->compute, x->ranks, s.median_compute, x->straggler_threshold);
    s.compute = x->compute;
    return s;
}

StepStats step_stats_exchange(StepStatsExchange *x, StepRecord *mine) {
    mine->peak_rss = (double)peak_rss_bytes();
    comm_allgather_bytes(x->world, mine, sizeof *mine, x->records);
    return step_stats_reduce(x);
}
