/* schedule_bound.c: the best constant batch against an oracle schedule (see schedule_bound.h). */
#include "sweep/schedule_bound.h"

#include <math.h>

double schedule_constant_seconds(const LossStretch *s, int n, double a, double b, double batch) {
    double seconds = 0;
    for (int i = 0; i < n; i++) seconds += s[i].steps * (1 + s[i].local / batch) * (a + b * batch);
    return seconds;
}

bool schedule_bound(const LossStretch *s, int n, double a, double b, ScheduleBound *out) {
    if (n < 1 || !(a > 0) || !(b > 0) || !isfinite(a) || !isfinite(b)) return false;
    double steps = 0, weighted = 0, weighted_sqrt = 0, oracle = 0;
    for (int i = 0; i < n; i++) {
        if (!(s[i].steps > 0) || !(s[i].local > 0) || !isfinite(s[i].steps) || !isfinite(s[i].local)) return false;
        steps += s[i].steps;
        weighted += s[i].steps * s[i].local;
        weighted_sqrt += s[i].steps * sqrt(s[i].local);
        const double root = sqrt(a) + sqrt(b * s[i].local); /* (1 + B_i/B)(a + bB) at B = sqrt(a B_i / b) */
        oracle += s[i].steps * root * root;
    }
    ScheduleBound r;
    r.mean_local = weighted / steps;
    r.best_batch = sqrt(a * r.mean_local / b);
    r.constant_seconds = schedule_constant_seconds(s, n, a, b, r.best_batch);
    r.oracle_seconds = oracle;
    r.gain = 1 - oracle / r.constant_seconds;
    r.gain_ceiling = (1 - weighted_sqrt / steps / sqrt(r.mean_local)) / 2;
    *out = r;
    return true;
}
