/* calibration.c: alpha-beta fit and the shared-memory default (see
 * calibration.h). */
#include "plan/calibration.h"

bool fit_allreduce(const double *bytes, const double *seconds, int k, int ranks, CollectiveFit *out) {
    if (k < 2 || ranks < 2) return false;
    /* seconds = a x + b y with x = 2(n-1), y = 2(n-1)/n bytes: one regressor
     * after dividing out, so fit seconds = c0 + c1 y with c0 = a x. */
    double n = ranks, sy = 0, st = 0, syy = 0, syt = 0;
    for (int i = 0; i < k; i++) {
        double y = 2.0 * (n - 1) / n * bytes[i];
        sy += y, st += seconds[i], syy += y * y, syt += y * seconds[i];
    }
    double det = k * syy - sy * sy;
    if (det <= 0) return false;
    double slope = (k * syt - sy * st) / det, intercept = (st - slope * sy) / k;
    if (slope <= 0) return false;
    out->present = true;
    out->busbw = 1.0 / slope;
    out->alpha = intercept > 0 ? intercept / (2.0 * (n - 1)) : 0.0;
    return true;
}

CollectiveFit assumed_shared_memory_fit(double memory_bandwidth) {
    CollectiveFit f = {true, SHARED_MEMORY_ALPHA, memory_bandwidth / 4.0};
    return f;
}
