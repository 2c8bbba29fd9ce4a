/* sweep_bound.c: what changing the batch could win, from the sweep's fits (see sweep_bound.h). */
#include "cli/sweep_bound.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

void sweep_step_time_parse(const char *text, double *a, double *b) {
    char *end;
    *a = strtod(text, &end);
    if (end != text && *end == ':') {
        const char *at = end + 1;
        *b = strtod(at, &end);
        if (end != at && !*end && *a > 0 && *b > 0 && isfinite(*a) && isfinite(*b)) return;
    }
    bs_die("batch-sweep: --step-time '%s': give A:B, seconds per step = A + B x batch in sequences, both above 0 "
           "(e.g. --step-time 0.21:0.003)", text);
}

void sweep_bound_print(const SweepBound *s) {
    printf("\nwhat changing the batch can win at best (each stretch of the loss takes dS_min (1 + B_local / B) steps;\n"
           "a step takes %.4g + %.4g x B seconds):\n", s->a, s->b);
    if (!s->computed) {
        printf("  not computed: no stretch of the loss has a located critical batch\n");
        return;
    }
    const ScheduleBound *r = &s->bound;
    printf("  best constant batch %.2f sequences (sqrt(%.4g x %.2f / %.4g); %.2f: the stretches' step-weighted "
           "B_local): %.1f s\n", r->best_batch, s->a, r->mean_local, s->b, r->mean_local, r->constant_seconds);
    printf("  each stretch at its own best batch: %.1f s, %.1f%% less (%d stretch%s", r->oracle_seconds,
           100 * fmax(0, r->gain), s->stretches, s->stretches == 1 ? "" : "es");
    if (s->left_out) printf("; %d without a located B_local left out", s->left_out);
    printf("): no schedule does better under this model\n");
    printf("  (at the step time that favours adapting most, A = B x %.2f: %.1f%% less)\n", r->mean_local,
           100 * fmax(0, r->gain_ceiling));
}

json_t *sweep_bound_json(const SweepBound *s) {
    json_t *j = json_pack("{s:f, s:f, s:i, s:i, s:b}", "step_time_a", s->a, "step_time_b", s->b, "stretches",
                          s->stretches, "left_out", s->left_out, "computed", s->computed);
    if (s->computed) {
        const ScheduleBound *r = &s->bound;
        json_object_set_new(j, "mean_local_sequences", json_real(r->mean_local));
        json_object_set_new(j, "best_constant_sequences", json_real(r->best_batch));
        json_object_set_new(j, "constant_seconds", json_real(r->constant_seconds));
        json_object_set_new(j, "oracle_seconds", json_real(r->oracle_seconds));
        json_object_set_new(j, "gain", json_real(r->gain));
        json_object_set_new(j, "gain_ceiling", json_real(r->gain_ceiling));
    }
    return j;
}
