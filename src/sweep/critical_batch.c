/* critical_batch.c: the trade-off fit and its bootstrap (see critical_batch.h). */
#include "sweep/critical_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/rng.h"

#define GRID_PER_DECADE 10
#define BOUND_DECADES 3.0 /* the search runs from min(B) / 10^3 to max(B) x 10^3 */
#define GOLDEN_TOL 1e-10  /* in log B_crit */

/* log S_i and log B_i of the points, for the search. */
typedef struct {
    const double *log_steps, *log_batch;
    int n;
} LogPoints;

/* For a given log B_crit: the best log S_min (the mean residual) and the sum of squared residuals. */
static double profile(const LogPoints *p, double log_bcrit, double *log_smin) {
    double mean = 0;
    for (int i = 0; i < p->n; i++) mean += p->log_steps[i] - log1p(exp(log_bcrit - p->log_batch[i]));
    mean /= p->n;
    double ssr = 0;
    for (int i = 0; i < p->n; i++) {
        double r = p->log_steps[i] - log1p(exp(log_bcrit - p->log_batch[i])) - mean;
        ssr += r * r;
    }
    if (log_smin) *log_smin = mean;
    return ssr;
}

/* Golden-section search for the minimum of profile() on [a, b]. */
static double golden(const LogPoints *p, double a, double b) {
    const double g = (sqrt(5.0) - 1) / 2;
    double c = b - g * (b - a), d = a + g * (b - a);
    double fc = profile(p, c, NULL), fd = profile(p, d, NULL);
    while (b - a > GOLDEN_TOL) {
        if (fc <= fd) b = d, d = c, fd = fc, c = b - g * (b - a), fc = profile(p, c, NULL);
        else a = c, c = d, fc = fd, d = a + g * (b - a), fd = profile(p, d, NULL);
    }
    return (a + b) / 2;
}

/* The fit over points already in logs (lo, hi: the smallest and largest log batch). */
static void fit_logs(const LogPoints *p, double lo, double hi, TradeoffFit *fit) {
    const double step = log(10.0) / GRID_PER_DECADE, start = lo - BOUND_DECADES * log(10.0);
    const int cells = (int)ceil((hi - lo + 2 * BOUND_DECADES * log(10.0)) / step);
    int best = 0;
    double best_ssr = INFINITY;
    for (int k = 0; k <= cells; k++) {
        double ssr = profile(p, start + k * step, NULL);
        if (ssr < best_ssr) best_ssr = ssr, best = k;
    }
    double a = start + (best > 0 ? best - 1 : 0) * step, b = start + (best < cells ? best + 1 : cells) * step;
    double log_bcrit = golden(p, a, b), log_smin;
    double ssr = profile(p, log_bcrit, &log_smin);
    fit->s_min = exp(log_smin);
    fit->b_crit = exp(log_bcrit);
    fit->e_min = fit->s_min * fit->b_crit;
    fit->rms_log = sqrt(ssr / p->n);
    fit->bracketed = best > 0 && best < cells;
}

bool tradeoff_fit(const TradeoffPoint *points, int n, TradeoffFit *fit, char *why, size_t why_size) {
    if (n < 2) {
        snprintf(why, why_size, "the fit needs at least two runs at two batch sizes (got %d run%s)", n,
                 n == 1 ? "" : "s");
        return false;
    }
    double *logs = bs_malloc(sizeof(double) * 2 * (size_t)n), lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        const TradeoffPoint *q = &points[i];
        if (!(q->steps > 0 && q->tokens > 0 && isfinite(q->steps) && isfinite(q->tokens))) {
            snprintf(why, why_size, "run %d has steps %g and tokens %g: both must be positive and finite", i,
                     q->steps, q->tokens);
            free(logs);
            return false;
        }
        logs[i] = log(q->steps);
        logs[n + i] = log(q->tokens / q->steps);
        lo = fmin(lo, logs[n + i]), hi = fmax(hi, logs[n + i]);
    }
    if (hi - lo < 1e-9) {
        snprintf(why, why_size, "every run has the same batch (%g per step): the fit needs two batch sizes", exp(lo));
        free(logs);
        return false;
    }
    LogPoints p = {logs, logs + n, n};
    fit_logs(&p, lo, hi, fit);
    free(logs);
    return true;
}

double tradeoff_steps(const TradeoffFit *fit, double batch) { return fit->s_min * (1 + fit->b_crit / batch); }

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double quantile_sorted_in_place(double *values, int n, double p) {
    qsort(values, (size_t)n, sizeof(double), compare_doubles);
    double at = p * (n - 1);
    int i = (int)floor(at);
    if (i >= n - 1) return values[n - 1];
    return values[i] + (at - i) * (values[i + 1] - values[i]);
}

void tradeoff_percentiles(double *values, int stride, int count, double level, TradeoffInterval *out) {
    const double lo = (1 - level) / 2, hi = (1 + level) / 2;
    Interval *targets[3] = {&out->s_min, &out->e_min, &out->b_crit};
    out->level = level;
    for (int k = 0; k < 3; k++) {
        double *v = values + (size_t)k * stride;
        targets[k]->lo = count > 0 ? quantile_sorted_in_place(v, count, lo) : NAN;
        targets[k]->hi = count > 0 ? quantile_sorted_in_place(v, count, hi) : NAN;
    }
}

/* One resample: within each group, as many points as it has, drawn with replacement. */
static void resample(const TradeoffPoint *points, int n, Rng *rng, TradeoffPoint *out, int *members) {
    for (int i = 0; i < n; i++) {
        int count = 0;
        for (int j = 0; j < n; j++)
            if (points[j].group == points[i].group) members[count++] = j;
        out[i] = points[members[rng_below(rng, (uint64_t)count)]];
    }
}

void tradeoff_bootstrap(const TradeoffPoint *points, int n, int resamples, double level, uint64_t seed,
                        TradeoffInterval *out) {
    TradeoffPoint *draw = bs_malloc(sizeof *draw * (size_t)n);
    int *members = bs_malloc(sizeof(int) * (size_t)n);
    double *values = bs_malloc(sizeof(double) * 3 * (size_t)resamples);
    Rng rng;
    rng_seed(&rng, seed);
    out->level = level;
    out->resamples = resamples;
    out->unbracketed = out->unfitted = 0;
    for (int r = 0; r < resamples; r++) {
        resample(points, n, &rng, draw, members);
        TradeoffFit f;
        char why[160];
        if (!tradeoff_fit(draw, n, &f, why, sizeof why)) bs_die("bootstrap: %s", why); /* the groups keep 2 batches */
        values[r] = f.s_min, values[resamples + r] = f.e_min, values[2 * resamples + r] = f.b_crit;
        out->unbracketed += !f.bracketed;
    }
    tradeoff_percentiles(values, resamples, resamples, level, out);
    free(values);
    free(members);
    free(draw);
}
