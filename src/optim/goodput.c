/* goodput.c: the goodput-maximising batch from a step-time table (see goodput.h). */
#include "optim/goodput.h"

#include <math.h>
#include <stddef.h>

void goodput_init(Goodput *g, long min, long max, long granule, long base) {
    *g = (Goodput){0};
    g->granule = granule > 0 ? granule : 1;
    g->min = (min + g->granule - 1) / g->granule * g->granule;
    g->max = max / g->granule * g->granule;
    if (g->max < g->min) g->max = g->min;
    g->base = base;
}

static GoodputSize *find(Goodput *g, long batch) {
    for (int i = 0; i < g->sizes; i++)
        if (g->size[i].batch == batch) return &g->size[i];
    return NULL;
}

void goodput_record(Goodput *g, long batch, double seconds) {
    if (!(seconds > 0) || !isfinite(seconds)) return;
    GoodputSize *s = find(g, batch);
    if (!s) {
        if (g->sizes == GOODPUT_MAX_SIZES) return;
        s = &g->size[g->sizes++];
        *s = (GoodputSize){batch, seconds, 1};
        return;
    }
    s->seconds = GOODPUT_EMA * s->seconds + (1.0 - GOODPUT_EMA) * seconds;
    s->steps++;
}

bool goodput_fit(const Goodput *g, double *a, double *b) {
    if (g->sizes < 2) return false;
    double n = g->sizes, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < g->sizes; i++) {
        double x = (double)g->size[i].batch, y = g->size[i].seconds;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double det = n * sxx - sx * sx;
    *b = det > 0 ? (n * sxy - sx * sy) / det : 0;
    *a = (sy - *b * sx) / n;
    if (*a < 0 || !(det > 0)) { /* through the origin: no fixed cost */
        *a = 0;
        *b = sxy / sxx;
    }
    return *b > 0;
}

/* Seconds per step at batch, given the fit (fitted: whether a, b hold one). */
static double seconds_at(const Goodput *g, long batch, bool fitted, double a, double b) {
    if (fitted && g->fitted_times) return a + b * (double)batch;
    const GoodputSize *s = find((Goodput *)g, batch);
    if (s) return s->seconds;
    return fitted ? a + b * (double)batch : NAN;
}

double goodput_step_seconds(const Goodput *g, long batch) {
    double a, b;
    bool fitted = goodput_fit(g, &a, &b);
    return seconds_at(g, batch, fitted, a, b);
}

double goodput_efficiency(double b_noise, long base, long batch) {
    return (b_noise + (double)base) / (b_noise + (double)batch);
}

/* The first decisions: a second size to measure, so the fit has two points. */
static long explore(const Goodput *g, long current) {
    long next = current * 2 / g->granule * g->granule;
    if (next > g->max) next = g->max;
    if (next == current) next = current - g->granule >= g->min ? current - g->granule : g->min;
    return next;
}

long goodput_choose(const Goodput *g, double b_noise, long current, double *goodput, double *efficiency) {
    *goodput = *efficiency = NAN;
    if (!(b_noise > 0) || !isfinite(b_noise)) return current;
    double a, b;
    if (!goodput_fit(g, &a, &b)) {
        long next = g->sizes == 1 && g->size[0].batch == current ? explore(g, current) : current;
        *efficiency = goodput_efficiency(b_noise, g->base, next);
        return next;
    }
    long best = current;
    double best_goodput = -1;
    for (long batch = g->min; batch <= g->max; batch += g->granule) {
        double seconds = seconds_at(g, batch, true, a, b); /* the fit once per decision, not per candidate */
        double value = (double)batch / seconds * goodput_efficiency(b_noise, g->base, batch);
        if (value > best_goodput) {
            best_goodput = value;
            best = batch;
        }
    }
    *goodput = best_goodput;
    *efficiency = goodput_efficiency(b_noise, g->base, best);
    return best;
}

void goodput_pack(const Goodput *g, double *words) {
    words[0] = g->sizes;
    for (int i = 0; i < GOODPUT_MAX_SIZES; i++) {
        const GoodputSize *s = &g->size[i];
        bool used = i < g->sizes;
        words[1 + 3 * i] = used ? (double)s->batch : 0;
        words[2 + 3 * i] = used ? s->seconds : 0;
        words[3 + 3 * i] = used ? (double)s->steps : 0;
    }
}

bool goodput_unpack(Goodput *g, const double *words) {
    if (!(words[0] >= 0 && words[0] <= GOODPUT_MAX_SIZES)) return false;
    g->sizes = (int)words[0];
    for (int i = 0; i < g->sizes; i++)
        g->size[i] = (GoodputSize){(long)words[1 + 3 * i], words[2 + 3 * i], (long)words[3 + 3 * i]};
    return true;
}
