/* sweep_along.c: the critical batch along the loss (see sweep_along.h). */
#include "cli/sweep_along.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

static int decreasing(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

int sweep_along_parse(const char *text, double target, double *losses) {
    int n = 0;
    const char *at = text;
    while (*at) {
        char *end;
        double loss = strtod(at, &end);
        if (end == at || (*end && *end != ',') || !isfinite(loss))
            bs_die("batch-sweep: --along '%s': each entry must be a validation loss, separated by commas (e.g. "
                   "--along 2.8,2.6)", text);
        if (!(loss > target))
            bs_die("batch-sweep: --along '%s': %g is not above --target-loss %g (the runs stop at the target, so "
                   "only higher losses are crossed)", text, loss, target);
        for (int i = 0; i < n; i++)
            if (losses[i] == loss) bs_die("batch-sweep: --along '%s': %g is given twice", text, loss);
        if (n == SWEEP_MAX_ALONG) bs_die("batch-sweep: --along '%s': at most %d losses", text, SWEEP_MAX_ALONG);
        losses[n++] = loss;
        at = *end ? end + 1 : end;
        if (*end && !*at) bs_die("batch-sweep: --along '%s' ends with a comma", text);
    }
    if (n == 0) bs_die("batch-sweep: --along '': give one or more losses above --target-loss, e.g. --along 2.8,2.6");
    qsort(losses, (size_t)n, sizeof *losses, decreasing);
    return n;
}

void sweep_along_print(const AlongPoint *p, int n, int seq_len) {
    const double t = seq_len;
    printf("\nthe critical batch along the loss (the same runs, each loss fitted on its own; local: the stretch from "
           "the loss above, dE_min / dS_min):\n");
    printf("%8s %5s %9s %12s %10s %20s %10s\n", "val loss", "runs", "S_min", "E_min", "B_crit", "[95%]", "local");
    char curve[SWEEP_MAX_ALONG * 32] = "";
    size_t used = 0;
    for (int k = 0; k < n; k++) {
        const AlongPoint *a = &p[k];
        if (!a->fitted) {
            printf("%8.4g %5d  not fitted: fewer than two batch sizes crossed it after their first evaluation\n",
                   a->loss, a->runs_used);
            continue;
        }
        char range[48] = "", local[24] = "not located";
        if (a->has_interval)
            snprintf(range, sizeof range, "[%.2f, %.2f]", a->interval.b_crit.lo / t, a->interval.b_crit.hi / t);
        if (isfinite(a->local)) {
            snprintf(local, sizeof local, "%.2f", a->local / t);
            used += (size_t)snprintf(curve + used, sizeof curve - used, "%s%.4g:%.3g", used ? "," : "", a->loss,
                                     a->local / t);
        }
        printf("%8.4g %5d %9.1f %12.0f %10.2f %20s %10s\n", a->loss, a->runs_used, a->fit.s_min, a->fit.e_min,
               a->fit.b_crit / t, range, local);
    }
    printf("(sequences; a goodput run can follow the local values: --goodput-noise-curve %s)\n",
           used ? curve : "(none located)");
}

static json_t *number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

json_t *sweep_along_json(const AlongPoint *p, int n, int seq_len) {
    const double t = seq_len;
    json_t *points = json_array();
    for (int k = 0; k < n; k++) {
        const AlongPoint *a = &p[k];
        json_t *j = json_pack("{s:f, s:b, s:i}", "val_loss", a->loss, "fitted", a->fitted, "runs_used", a->runs_used);
        if (a->fitted) {
            json_object_set_new(j, "s_min", number(a->fit.s_min));
            json_object_set_new(j, "e_min_tokens", number(a->fit.e_min));
            json_object_set_new(j, "b_crit_sequences", number(a->fit.b_crit / t));
            json_object_set_new(j, "local_b_sequences", number(a->local / t));
        }
        if (a->fitted && a->has_interval)
            json_object_set_new(j, "b_crit_sequences_interval",
                                json_pack("[o, o]", number(a->interval.b_crit.lo / t), number(a->interval.b_crit.hi / t)));
        json_array_append_new(points, j);
    }
    return json_pack("{s:s, s:o}", "method",
                     "each loss fitted from the same runs' crossings of it; local_b: (E_min - E_min of the loss "
                     "above) / (S_min - its S_min), the first from the sweep's start; null where either did not grow",
                     "points", points);
}
