/* explain.c: why a search's winner wins, and the parts of a step (see explain.h). */
#include "plan/explain.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB 1073741824.0

static const char *const PART_NAMES[] = {"compute", "TP communication", "CP communication", "EP communication",
                                         "pipeline sends", "pipeline bubble", "DP communication", "optimizer step",
                                         "stragglers"};

const char *plan_step_part_name(int part) { return PART_NAMES[part]; }

void plan_step_parts(const StepTime *t, double *out) {
    double v[PLAN_STEP_PARTS] = {t->compute, t->tp_comm, t->cp_comm, t->ep_comm, t->pp_comm, t->bubble, t->dp_comm, t->optimizer, t->straggler};
    memcpy(out, v, sizeof v);
}

const char *plan_duration_text(double s, char *buf, size_t n) {
    if (s < 1) snprintf(buf, n, "%.1f ms", s * 1e3);
    else if (s < 120) snprintf(buf, n, "%.1f s", s);
    else if (s < 7200) snprintf(buf, n, "%.1f min", s / 60);
    else if (s < 3 * 86400) snprintf(buf, n, "%.1f h", s / 3600);
    else snprintf(buf, n, "%.1f days", s / 86400);
    return buf;
}

int plan_largest_part(const StepTime *t, bool overheads_only) {
    double p[PLAN_STEP_PARTS];
    plan_step_parts(t, p);
    int best = overheads_only ? 1 : 0;
    for (int i = best; i < PLAN_STEP_PARTS; i++)
        if (p[i] > p[best]) best = i;
    return best;
}

/* "bubble 120 ms less, DP communication 30 ms more" for b against a. */
static void differences(const StepTime *a, const StepTime *b, char *buf, size_t n) {
    double pa[PLAN_STEP_PARTS], pb[PLAN_STEP_PARTS];
    plan_step_parts(a, pa);
    plan_step_parts(b, pb);
    int first = -1, second = -1;
    for (int i = 0; i < PLAN_STEP_PARTS; i++) {
        double d = fabs(pb[i] - pa[i]);
        if (first < 0 || d > fabs(pb[first] - pa[first])) second = first, first = i;
        else if (second < 0 || d > fabs(pb[second] - pa[second])) second = i;
    }
    char d1[32], d2[32];
    snprintf(buf, n, "%s %s %s, %s %s %s", PART_NAMES[first], plan_duration_text(fabs(pb[first] - pa[first]), d1, sizeof d1),
             pb[first] > pa[first] ? "more" : "less", PART_NAMES[second],
             plan_duration_text(fabs(pb[second] - pa[second]), d2, sizeof d2), pb[second] > pa[second] ? "more" : "less");
}

static size_t append(char *buf, size_t used, size_t n, const char *fmt, const char *a, const char *b, const char *c) {
    if (used >= n) return used;
    int w = snprintf(buf + used, n - used, fmt, a, b, c);
    return w > 0 ? used + (size_t)w : used;
}

/* What stops a neighbour of the winner from beating it. */
static size_t neighbour(const PlanAnswer *r, Layout l, const char *what, char *buf, size_t used, size_t n) {
    char why[256], line[320], d[32];
    if (!layout_check(&r->in, &l, why, sizeof why)) {
        if (l.schedule != SCHEDULE_INTERLEAVED) return used;
        l.schedule = SCHEDULE_1F1B, l.virtual_stages = 1; /* interleaving needs m to be a multiple of p */
        if (!layout_check(&r->in, &l, why, sizeof why)) return used;
    }
    PlanResult res;
    plan_evaluate(&r->in, &l, &res);
    if (!res.fits) {
        snprintf(line, sizeof line, "%.1f GiB per GPU, over the %.1f GiB usable", (res.memory.total - res.memory.reserve) / GIB,
                 (res.memory.capacity - res.memory.reserve) / GIB);
        return append(buf, used, n, " %s would not fit: %s.", what, line, "");
    }
    if (res.train_seconds <= r->plan.train_seconds) return used;
    snprintf(d, sizeof d, "%.1f%%", 100.0 * (res.train_seconds / r->plan.train_seconds - 1));
    differences(&r->plan.time, &res.time, line, sizeof line);
    return append(buf, used, n, " %s fits but is %s slower (%s).", what, d, line);
}

void plan_explain_winner(const PlanAnswer *r, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    char layout[128], line[320], pct[32];
    const PlanResult *w = &r->plan;
    if (r->n_top > 1) {
        layout_format(&r->top[1].layout, layout, sizeof layout);
        double lead = 100.0 * (r->top[1].train_seconds / w->train_seconds - 1);
        snprintf(pct, sizeof pct, "%.1f%%", lead);
        differences(&w->time, &r->top[1].time, line, sizeof line);
        used = append(buf, used, n, "It beats #2 (%s) by %s: #2 has %s.", layout, pct, line);
    }
    if (r->stats.have_fastest_unfit) {
        const PlanResult *u = &r->stats.fastest_unfit;
        layout_format(&u->layout, layout, sizeof layout);
        snprintf(pct, sizeof pct, "%.1f%%", 100.0 * (1 - u->train_seconds / w->train_seconds));
        snprintf(line, sizeof line, "%.1f GiB per GPU (%.1f GiB of activations) where %.1f GiB are usable",
                 (u->memory.total - u->memory.reserve) / GIB, u->memory.activations / GIB,
                 (u->memory.capacity - u->memory.reserve) / GIB);
        used = append(buf, used, n, " The fastest layout of all, %s, would be %s faster but needs %s.", layout, pct, line);
    }
    Layout l = w->layout;
    char what[64];
    if (l.pp > 1 && l.pp % 2 == 0) {
        Layout v = l;
        v.pp /= 2, v.dp *= 2;
        snprintf(what, sizeof what, "Half the pipeline (pp%d dp%d)", v.pp, v.dp);
        used = neighbour(r, v, what, buf, used, n);
    }
    if (l.tp > 1) {
        Layout v = l;
        v.tp /= 2, v.dp *= 2;
        v.sequence_parallel = v.sequence_parallel && v.tp > 1;
        snprintf(what, sizeof what, "Half the tensor parallelism (tp%d dp%d)", v.tp, v.dp);
        used = neighbour(r, v, what, buf, used, n);
    }
    if (l.recompute != RECOMPUTE_NONE) {
        Layout v = l;
        v.recompute = RECOMPUTE_NONE;
        used = neighbour(r, v, "Without recomputation it", buf, used, n);
    }
    if (l.zero > 0) {
        Layout v = l;
        v.zero = l.zero - 1;
        snprintf(what, sizeof what, "ZeRO %d", v.zero);
        used = neighbour(r, v, what, buf, used, n);
    }
    int big = plan_largest_part(&w->time, true);
    double p[PLAN_STEP_PARTS];
    plan_step_parts(&w->time, p);
    snprintf(pct, sizeof pct, "%.1f%%", 100.0 * p[big] / w->time.step);
    used = append(buf, used, n, " Its largest overhead is the %s (%s of the step).", PART_NAMES[big], pct, "");
}
