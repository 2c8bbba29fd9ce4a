/* noise_scale.c: McCandlish et al.'s two-batch estimator with EMAs (see noise_scale.h). */
#include "optim/noise_scale.h"

#include <math.h>

void noise_scale_init(NoiseScale *ns, double ema_decay) {
    *ns = (NoiseScale){.ema_decay = ema_decay, .grad_sq_ema = 0.0, .trace_ema = 0.0, .ema_weight = 0.0};
}

bool noise_scale_estimates(double small_sq, double b_small, double big_sq, double b_big, double *grad_sq,
                           double *trace) {
    if (!(b_small > 0 && b_big > b_small) || !isfinite(small_sq) || !isfinite(big_sq)) return false;
    *grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small);
    *trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big);
    return true;
}

bool noise_scale_update(NoiseScale *ns, double small_sq, double b_small, double big_sq, double b_big) {
    double grad_sq, trace;
    if (!noise_scale_estimates(small_sq, b_small, big_sq, b_big, &grad_sq, &trace)) return false;
    double d = ns->ema_decay;
    ns->grad_sq_ema = d * ns->grad_sq_ema + (1.0 - d) * grad_sq;
    ns->trace_ema = d * ns->trace_ema + (1.0 - d) * trace;
    ns->ema_weight = d * ns->ema_weight + (1.0 - d);
    return true;
}

double noise_scale_simple(const NoiseScale *ns) {
    if (ns->ema_weight <= 0.0 || ns->grad_sq_ema <= 0.0) return NAN;
    return ns->trace_ema / ns->grad_sq_ema; /* the bias corrections cancel */
}

static double bias_corrected(const NoiseScale *ns, double ema) {
    return ns->ema_weight > 0.0 ? ema / ns->ema_weight : NAN;
}

double noise_scale_grad_sq(const NoiseScale *ns) { return bias_corrected(ns, ns->grad_sq_ema); }

double noise_scale_trace(const NoiseScale *ns) { return bias_corrected(ns, ns->trace_ema); }
