/* calibration.c: alpha-beta fit and the shared-memory default (see
 * calibration.h). */
#include "plan/calibration.h"

bool fit_allreduce(const double *bytes, const double *seconds, int k, int ranks, CollectiveFit *out) {
    if (k < 2 || ranks < 2) return false;
    /* seconds = a x + b y with x = 2(n-1), y = 2(n-1)/n bytes: one regressor
     * after dividing out, so fit seconds = c0 + c1 y with c0 = a x. Weighted
     * by 1/seconds^2 (relative errors): timings span 4 KiB to 64 MiB, and
     * plain least squares lets the largest decide alone, leaving the
     * intercept (the latency) at the mercy of their noise. */
    double n = ranks, sw = 0, sy = 0, st = 0, syy = 0, syt = 0, smallest = seconds[0];
    for (int i = 0; i < k; i++) {
        if (!(seconds[i] > 0)) return false;
        double y = 2.0 * (n - 1) / n * bytes[i], w = 1.0 / (seconds[i] * seconds[i]);
        sw += w, sy += w * y, st += w * seconds[i], syy += w * y * y, syt += w * y * seconds[i];
        smallest = seconds[i] < smallest ? seconds[i] : smallest;
    }
    double det = sw * syy - sy * sy;
    if (det <= 0) return false;
    double slope = (sw * syt - sy * st) / det, intercept = (st - slope * sy) / sw;
    if (slope <= 0) return false;
    out->present = true;
    out->busbw = 1.0 / slope;
    /* a latency the fit cannot resolve is at most the fastest operation measured */
    out->alpha = (intercept > 0 ? intercept : smallest) / (2.0 * (n - 1));
    return true;
}

CollectiveFit assumed_shared_memory_fit(double memory_bandwidth) {
    CollectiveFit f = {true, SHARED_MEMORY_ALPHA, memory_bandwidth / 4.0};
    return f;
}
