/* batch.c: batch schedules and Kaplan's critical batch (see batch.h). */
#include "plan/batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reason.h"

PlanBatch plan_batch_constant(double batch_tokens) {
    PlanBatch s = {.n = 1};
    s.batch[0] = batch_tokens;
    return s;
}

/* A count with an optional k/M/G/T suffix (powers of 1000); end set past it. */
static bool parse_tokens(const char *p, double *out, const char **end) {
    char *e;
    double v = strtod(p, &e);
    if (e == p || !isfinite(v) || v < 0) return false;
    const char *suffixes = "kKmMgGtT";
    const char *hit = *e ? strchr(suffixes, *e) : NULL;
    if (hit) {
        v *= pow(1000.0, (double)((hit - suffixes) / 2 + 1));
        e++;
    }
    *out = v;
    *end = e;
    return true;
}

bool plan_batch_parse(const char *text, PlanBatch *out, char *why, size_t n) {
    PlanBatch s = {0};
    const char *p = text;
    while (*p) {
        const char *e;
        double from, batch;
        if (s.n == BATCH_MAX_SEGMENTS) {
            return bs_reason(why, n, "batch_schedule", "the batch schedule: at most %d segments", BATCH_MAX_SEGMENTS);
        }
        if (!parse_tokens(p, &from, &e) || *e != ':' || !parse_tokens(e + 1, &batch, &e) || batch <= 0 ||
            (*e && *e != ',')) {
            return bs_reason(why, n, "batch_schedule", "the batch schedule '%s': expected START:BATCH[,START:BATCH...] in tokens, e.g. 0:4M,252M:8M",
                             text);
        }
        if ((s.n == 0 && from != 0) || (s.n > 0 && from <= s.from[s.n - 1])) {
            return bs_reason(why, n, "batch_schedule", "the batch schedule '%s': the first segment starts at 0 and starts must increase", text);
        }
        s.from[s.n] = from, s.batch[s.n] = batch, s.n++;
        p = *e ? e + 1 : e;
    }
    if (s.n == 0) {
        return bs_reason(why, n, "batch_schedule", "the batch schedule is empty");
    }
    *out = s;
    return true;
}

double plan_batch_segment_tokens(const PlanBatch *s, int i, double total) {
    double start = s->from[i], end = i + 1 < s->n ? s->from[i + 1] : total;
    if (end > total) end = total;
    return end > start ? end - start : 0.0;
}

double plan_batch_final(const PlanBatch *s, double total) {
    int last = 0;
    for (int i = 0; i < s->n; i++)
        if (s->from[i] < total || i == 0) last = i;
    return s->batch[last];
}

double critical_batch_tokens(double loss_nats) { return 2e8 / pow(loss_nats, 1.0 / 0.21); }

double kaplan_loss(double non_embedding_params, double tokens) {
    return pow(pow(8.8e13 / non_embedding_params, 0.076 / 0.095) + 5.4e13 / tokens, 0.095);
}

double data_inefficiency(double batch_tokens, double critical) { return 1.0 + batch_tokens / critical; }
