/* answer.c: the planner's answer to one question (see answer.h). */
#include "plan/answer.h"

#include <stdio.h>
#include <string.h>

#include "plan/explain.h"

double plan_answer_cost(const PlanAnswer *r, const PlanResult *p, const Reliability *rel) {
    double hours = rel->wall_s / 3600.0, usd = 0;
    if (r->in.fleet.kinds == 1) return layout_gpus(&p->layout) * hours * planning_rate(&r->money[0]);
    for (int k = 0; k < r->in.fleet.kinds; k++) usd += r->in.fleet.count[k] * hours * planning_rate(&r->money[k]);
    return usd;
}

static void fill_reliability(PlanAnswer *r) {
    r->reliability = reliability_estimate(&r->reliability_in, layout_gpus(&r->plan.layout), r->plan.train_seconds);
    r->cost_usd = plan_answer_cost(r, &r->plan, &r->reliability);
}

/* Cost ranking: the same job on 1, 2, 4, ... nodes up to the fleet. */
static void search_by_cost(PlanAnswer *r, const SearchSpace *space) {
    int gpus = fleet_gpus(&r->in.fleet), node = r->in.fleet.hw[0].gpus_per_node;
    PlanResult found[SEARCH_MAX_TOP];
    r->n_top = 0;
    SearchSpace s = *space;
    s.dp = 0;
    for (int count = node < gpus ? node : gpus;; count = count * 2 < gpus ? count * 2 : gpus) {
        PlanInput at = r->in;
        at.fleet.count[0] = count;
        SearchStats stats;
        int n = plan_search(&at, &s, found, &stats);
        if (count == gpus) r->stats = stats;
        for (int i = 0; i < n; i++) {
            Reliability rel = reliability_estimate(&r->reliability_in, count, found[i].train_seconds);
            double cost = plan_answer_cost(r, &found[i], &rel);
            int pos = r->n_top < space->top ? r->n_top : space->top;
            while (pos > 0 && cost < r->top_cost[pos - 1]) pos--;
            if (pos >= space->top) continue;
            int last = r->n_top < space->top ? r->n_top : space->top - 1;
            memmove(&r->top[pos + 1], &r->top[pos], (size_t)(last - pos) * sizeof(PlanResult));
            memmove(&r->top_cost[pos + 1], &r->top_cost[pos], (size_t)(last - pos) * sizeof(double));
            r->top[pos] = found[i], r->top_cost[pos] = cost;
            if (r->n_top < space->top) r->n_top++;
        }
        if (count == gpus) break;
    }
}

/* Tokens/s per GPU against the smallest fleet of whole nodes that fits. */
static void compare_with_one_node(PlanAnswer *r, const SearchSpace *space) {
    if (r->in.fleet.kinds > 1) return;
    int gpus = layout_gpus(&r->plan.layout), node = r->in.fleet.hw[0].gpus_per_node;
    if (gpus <= node) return;
    PlanInput at = r->in;
    at.fleet.count[0] = gpus;
    at.batch = r->in.batch;
    ScalePoint pts[SCALING_MAX_POINTS];
    int base;
    for (int from = node; from < gpus; from *= 2) {
        int n = scaling_sweep(&at, space, true, from, from, pts, &base);
        if (n == 1 && base == 0) {
            r->have_reference = true;
            r->reference_gpus = from;
            r->reference_efficiency = (r->plan.tokens_per_s / gpus) / (pts[0].best.tokens_per_s / from);
            return;
        }
    }
}

/* Mixed fleet: each kind alone, at its own count and at the whole count. */
static void compare_kinds_alone(PlanAnswer *r, const SearchSpace *space) {
    if (r->in.fleet.kinds < 2) return;
    int total = fleet_gpus(&r->in.fleet);
    SearchSpace s = *space;
    s.top = 1;
    s.tp = s.pp = s.dp = s.cp = s.ep = 0;
    for (int k = 0; k < r->in.fleet.kinds; k++)
        for (int whole = 0; whole < 2; whole++) {
            FleetAlternative *alt = &r->alone[r->n_alone++];
            PlanInput at = r->in;
            at.fleet.kinds = 1;
            at.fleet.hw[0] = r->in.fleet.hw[k];
            at.fleet.count[0] = whole ? total : r->in.fleet.count[k];
            at.reserve_bytes = r->in.reserve_bytes;
            alt->gpus = at.fleet.count[0];
            snprintf(alt->label, sizeof alt->label, "%d x %s", alt->gpus, at.fleet.hw[0].name);
            SearchStats stats;
            alt->found = plan_search(&at, &s, &alt->best, &stats) > 0;
            if (alt->found) {
                PlanAnswer one = *r;
                one.in = at;
                one.money[0] = r->money[k];
                Reliability rel = reliability_estimate(&r->reliability_in, alt->gpus, alt->best.train_seconds);
                alt->cost_usd = plan_answer_cost(&one, &alt->best, &rel);
            }
        }
}

/* Ranked by time: each layout's cost beside its time. */
static void cost_each(PlanAnswer *r) {
    for (int i = 0; i < r->n_top; i++) {
        Reliability rel = reliability_estimate(&r->reliability_in, layout_gpus(&r->top[i].layout), r->top[i].train_seconds);
        r->top_cost[i] = plan_answer_cost(r, &r->top[i], &rel);
    }
}

void plan_answer_search(PlanAnswer *r, const SearchSpace *space, bool by_cost) {
    r->searched = true;
    if (by_cost) search_by_cost(r, space);
    else r->n_top = plan_search(&r->in, space, r->top, &r->stats);
    if (r->n_top == 0) return;
    r->plan = r->top[0];
    if (by_cost) r->in.fleet.count[0] = layout_gpus(&r->plan.layout);
    else cost_each(r);
}

void plan_answer_finish(PlanAnswer *r, const SearchSpace *space, bool scaling, int from, int to) {
    fill_reliability(r);
    if (r->in.fleet.kinds == 1) {
        r->ideal_gpu_tokens_per_s = ideal_single_gpu_tokens_per_s(&r->in);
        r->linear_efficiency = r->plan.tokens_per_s / layout_gpus(&r->plan.layout) / r->ideal_gpu_tokens_per_s;
    }
    compare_with_one_node(r, space);
    compare_kinds_alone(r, space);
    if (scaling) r->n_points = scaling_sweep(&r->in, space, r->weak, from, to, r->points, &r->baseline);
    for (int i = 0; i < r->n_points; i++)
        if (r->points[i].found)
            r->point_goodput[i] =
                reliability_estimate(&r->reliability_in, r->points[i].gpus, r->points[i].best.train_seconds).goodput;
    if (r->searched) plan_explain_winner(r, r->why, sizeof r->why);
}
