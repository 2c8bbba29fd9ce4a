/* curvature.c: B_noise = tr(H Sigma) / (G^T H G) and v^T H v by central differences (see curvature.h). */
#include "optim/curvature.h"

#include <math.h>

#include "optim/grad_norm.h"

void curvature_init(Curvature *c, double ema_decay) {
    *c = (Curvature){.ema_decay = ema_decay, .trace_ema = 0.0, .ghg_ema = 0.0, .ema_weight = 0.0};
}

void curvature_probe_signs(Rng *rng, int micro_batches, float *signs) {
    for (int i = 0; i < micro_batches; i++) signs[i] = i < micro_batches / 2 ? 1.0f : -1.0f;
    for (int i = micro_batches - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)rng_below(rng, (uint64_t)i + 1);
        float t = signs[i];
        signs[i] = signs[j];
        signs[j] = t;
    }
}

double curvature_probe_gain(int micro_batches) {
    return micro_batches % 2 == 0 ? 1.0 + 1.0 / (micro_batches - 1) : 1.0 + 1.0 / micro_batches;
}

bool curvature_estimates(double zhz, double ghg, double b_small, int micro_batches, double *trace_hs,
                         double *ghg_true) {
    if (micro_batches < 2 || !(b_small > 0) || !isfinite(zhz) || !isfinite(ghg)) return false;
    double trace = b_small / (micro_batches - 1) * zhz / curvature_probe_gain(micro_batches);
    *trace_hs = trace;
    *ghg_true = ghg - trace / (b_small * micro_batches);
    return true;
}

bool curvature_update(Curvature *c, double zhz, double ghg, double b_small, int micro_batches) {
    double trace, ghg_true;
    if (!curvature_estimates(zhz, ghg, b_small, micro_batches, &trace, &ghg_true)) return false;
    double d = c->ema_decay;
    c->trace_ema = d * c->trace_ema + (1.0 - d) * trace;
    c->ghg_ema = d * c->ghg_ema + (1.0 - d) * ghg_true;
    c->ema_weight = d * c->ema_weight + (1.0 - d);
    return true;
}

double curvature_noise_scale(const Curvature *c) {
    if (c->ema_weight <= 0.0 || c->ghg_ema <= 0.0) return NAN;
    return c->trace_ema / c->ghg_ema; /* the bias corrections cancel */
}

double curvature_step(const float *w, const float *v, size_t n) {
    double v_norm = sqrt(sum_of_squares(v, n));
    return v_norm > 0 ? CURVATURE_STEP * sqrt(sum_of_squares(w, n)) / v_norm : 0.0;
}

void curvature_precondition(const Preconditioner *p, const float *v, float *out, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = (float)(v[i] / (sqrt((double)p->v[i]) * p->v_scale + p->eps));
}

/* w = saved_w + sign h v, in float as the model holds it. */
static void move_weights(float *w, const float *saved_w, const float *v, size_t n, double step) {
    const float h = (float)step;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) w[i] = saved_w[i] + h * v[i];
}

double curvature_form(float *w, const float *saved_w, const float *v, size_t n, double h, GradientAt grad,
                      void *ctx, float *hv) {
    if (h == 0) {
        if (hv)
            for (size_t i = 0; i < n; i++) hv[i] = 0;
        return 0;
    }
    move_weights(w, saved_w, v, n, h);
    const float *g = grad(ctx);
    double plus = dot_product(v, g, n);
    if (hv)
        for (size_t i = 0; i < n; i++) hv[i] = g[i];
    move_weights(w, saved_w, v, n, -h);
    g = grad(ctx);
    double minus = dot_product(v, g, n);
    if (hv)
        for (size_t i = 0; i < n; i++) hv[i] = (float)(((double)hv[i] - g[i]) / (2.0 * h));
    for (size_t i = 0; i < n; i++) w[i] = saved_w[i];
    return (plus - minus) / (2.0 * h);
}
