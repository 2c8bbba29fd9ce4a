/* noise_curve.c: a noise scale as a piecewise-constant function of the loss (see noise_curve.h). */
#include "optim/noise_curve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* One "TO:B" pair at *at; advances past it and its comma. */
static bool parse_pair(const char **at, double *loss, double *scale) {
    char *end;
    *loss = strtod(*at, &end);
    if (end == *at || *end != ':') return false;
    const char *b = end + 1;
    *scale = strtod(b, &end);
    if (end == b || (*end && *end != ',')) return false;
    *at = *end ? end + 1 : end;
    return !(*end && !**at); /* a trailing comma */
}

bool noise_curve_parse(const char *text, NoiseCurve *c, char *why, size_t n) {
    c->count = 0;
    const char *at = text;
    if (!*at) return snprintf(why, n, "'' is empty: give TO:B pairs, e.g. 2.8:9.5,2.6:12"), false;
    while (*at) {
        double loss, scale;
        if (!parse_pair(&at, &loss, &scale))
            return snprintf(why, n, "'%s': each entry is LOSS:B (the noise scale B in sequences until the loss falls "
                            "to LOSS), separated by commas, e.g. 2.8:9.5,2.6:12", text), false;
        if (!(isfinite(loss) && loss > 0 && isfinite(scale) && scale > 0))
            return snprintf(why, n, "'%s': losses and noise scales must be positive numbers (got %g:%g)", text, loss,
                            scale), false;
        if (c->count > 0 && !(loss < c->loss[c->count - 1]))
            return snprintf(why, n, "'%s': the losses must decrease (%g after %g)", text, loss,
                            c->loss[c->count - 1]), false;
        if (c->count == NOISE_CURVE_MAX)
            return snprintf(why, n, "'%s': at most %d pairs", text, NOISE_CURVE_MAX), false;
        c->loss[c->count] = loss, c->scale[c->count] = scale, c->count++;
    }
    return true;
}

double noise_curve_at(const NoiseCurve *c, double loss) {
    if (!isfinite(loss) || c->count == 0) return NAN;
    for (int k = 0; k < c->count; k++)
        if (c->loss[k] < loss) return c->scale[k];
    return c->scale[c->count - 1];
}
