/* test_plan_answer.c: the planner's answer (src/plan/answer.h,
 * explain.h) computed by a program that links src/plan alone, as the
 * command's printers read it. Each field is checked against the planner's
 * own parts called directly: the ranking by time is the search's order,
 * each layout's cost is GPUs x wall hours (failures included) x the rate,
 * the ranking by cost is ascending and never dearer than the fastest
 * layout, the fleet shrinks to the cheapest layout's GPUs, the scaling
 * points' goodput and the linear efficiency are the reliability model's
 * and the ideal GPU's, the explanation names the runner-up's layout and the
 * winner's largest overhead, and durations are written in the unit their
 * size calls for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/answer.h"
#include "plan/explain.h"
#include "plan/presets.h"

#define RATE 2.0 /* USD per GPU-hour */

static bool close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

/* Llama 3 8B on `gpus` H100s at $2 per GPU-hour, with a GPU failing every 50,000 hours. */
static PlanAnswer *question(int gpus) {
    PlanAnswer *a = calloc(1, sizeof *a);
    ModelPreset mp;
    CHECK(model_preset("llama3-8b", &mp), "llama3-8b preset");
    a->in.model = mp.shape;
    a->in.fleet.kinds = 1;
    CHECK(hardware_preset("h100-sxm", &a->in.fleet.hw[0]), "h100-sxm preset");
    a->in.fleet.count[0] = gpus;
    a->in.precision = PREC_BF16;
    a->in.attention = ATTN_FLASH;
    a->in.batch = plan_batch_constant(1024.0 * mp.shape.seq_len);
    a->in.total_tokens = 1e11;
    a->in.reserve_bytes = -1;
    a->money[0].usd_per_gpu_hour = RATE;
    a->reliability_in = (ReliabilityInput){50000, 30, 600};
    a->rank_by = "time";
    return a;
}

static double cost_of(const PlanAnswer *a, const PlanResult *p) {
    const int gpus = layout_gpus(&p->layout);
    return gpus * reliability_estimate(&a->reliability_in, gpus, p->train_seconds).wall_s / 3600 * RATE;
}

static void test_by_time(void) {
    PlanAnswer *a = question(256);
    SearchSpace space = search_space_all(8);
    plan_answer_search(a, &space, false);
    CHECK(a->searched && a->n_top == 8, "8 layouts ranked, got %d", a->n_top);
    PlanResult direct[SEARCH_MAX_TOP];
    SearchStats stats;
    const int n = plan_search(&a->in, &space, direct, &stats);
    CHECK(n == a->n_top && stats.evaluated == a->stats.evaluated, "the search's own ranking: %d of %ld", n, stats.evaluated);
    for (int i = 0; i < a->n_top && i < n; i++) {
        CHECK(a->top[i].train_seconds == direct[i].train_seconds, "#%d: %.6g s, the search's %.6g s", i + 1,
              a->top[i].train_seconds, direct[i].train_seconds);
        CHECK(close_rel(a->top_cost[i], cost_of(a, &a->top[i]), 1e-12), "#%d costs $%.2f, by hand $%.2f", i + 1,
              a->top_cost[i], cost_of(a, &a->top[i]));
    }
    CHECK(memcmp(&a->plan, &a->top[0], sizeof a->plan) == 0, "the plan is the search's first");
    CHECK(a->in.fleet.count[0] == 256, "ranked by time, the fleet stays whole");
    plan_answer_finish(a, &space, true, 64, 512);
    CHECK(close_rel(a->cost_usd, cost_of(a, &a->plan), 1e-12), "the plan's cost $%.2f, by hand $%.2f", a->cost_usd,
          cost_of(a, &a->plan));
    const double ideal = ideal_single_gpu_tokens_per_s(&a->in);
    CHECK(close_rel(a->linear_efficiency, a->plan.tokens_per_s / 256 / ideal, 1e-12), "linear efficiency %.4f",
          a->linear_efficiency);
    CHECK(a->n_points == 4, "the sweep 64, 128, 256, 512 GPUs: %d points", a->n_points);
    for (int i = 0; i < a->n_points; i++) {
        const ScalePoint *s = &a->points[i];
        if (!s->found) continue;
        const double goodput = reliability_estimate(&a->reliability_in, s->gpus, s->best.train_seconds).goodput;
        CHECK(a->point_goodput[i] == goodput, "%d GPUs: goodput %.6f, the model's %.6f", s->gpus, a->point_goodput[i],
              goodput);
    }
    char runner_up[128], start[200], overhead[200];
    layout_format(&a->top[1].layout, runner_up, sizeof runner_up);
    snprintf(start, sizeof start, "It beats #2 (%s) by ", runner_up);
    snprintf(overhead, sizeof overhead, "Its largest overhead is the %s (",
             plan_step_part_name(plan_largest_part(&a->plan.time, true)));
    CHECK(strncmp(a->why, start, strlen(start)) == 0, "why starts with the runner-up: %s", a->why);
    CHECK(strstr(a->why, overhead) != NULL, "why names the largest overhead: %s", a->why);
    free(a);
}

static void test_by_cost(void) {
    PlanAnswer *fastest = question(256), *a = question(256);
    SearchSpace space = search_space_all(8);
    plan_answer_search(fastest, &space, false);
    plan_answer_search(a, &space, true);
    CHECK(a->n_top == 8, "8 layouts ranked by cost, got %d", a->n_top);
    for (int i = 0; i < a->n_top; i++) {
        CHECK(close_rel(a->top_cost[i], cost_of(a, &a->top[i]), 1e-12), "#%d costs $%.2f, by hand $%.2f", i + 1,
              a->top_cost[i], cost_of(a, &a->top[i]));
        CHECK(i == 0 || a->top_cost[i] >= a->top_cost[i - 1], "#%d: $%.2f after $%.2f", i + 1, a->top_cost[i],
              a->top_cost[i - 1]);
    }
    CHECK(a->top_cost[0] <= fastest->top_cost[0], "the cheapest $%.2f, the fastest $%.2f", a->top_cost[0],
          fastest->top_cost[0]);
    CHECK(a->in.fleet.count[0] == layout_gpus(&a->plan.layout), "the fleet becomes the cheapest layout's %d GPUs, got %d",
          layout_gpus(&a->plan.layout), a->in.fleet.count[0]);
    free(fastest);
    free(a);
}

static void test_durations(void) {
    const struct {
        double seconds;
        const char *text;
    } cases[] = {{0.0123, "12.3 ms"}, {1, "1.0 s"}, {119.9, "119.9 s"}, {120, "2.0 min"},  {7199, "120.0 min"},
                 {7200, "2.0 h"},     {3 * 86400 - 360, "71.9 h"},      {3 * 86400, "3.0 days"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        plan_duration_text(cases[i].seconds, buf, sizeof buf);
        CHECK(strcmp(buf, cases[i].text) == 0, "%g s written '%s', expected '%s'", cases[i].seconds, buf, cases[i].text);
    }
}

int main(void) {
    test_by_time();
    test_by_cost();
    test_durations();
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures > 0;
}
