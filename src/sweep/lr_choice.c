/* lr_choice.c: the per-batch learning-rate choice and its bootstrap (see lr_choice.h). */
#include "sweep/lr_choice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

void lr_cells(const LrGrid *g, LrCell *cells) {
    const int count = g->num_batches * g->num_lrs;
    for (int c = 0; c < count; c++) cells[c] = (LrCell){0, 0, 0};
    for (int i = 0; i < g->n; i++) {
        const GridRun *u = &g->runs[i];
        LrCell *c = &cells[u->batch * g->num_lrs + u->lr];
        c->runs++;
        if (u->reached) c->mean_log_steps += log(u->steps);
        else c->missed++;
    }
    for (int c = 0; c < count; c++) {
        const int reached = cells[c].runs - cells[c].missed;
        cells[c].mean_log_steps = reached > 0 ? cells[c].mean_log_steps / reached : NAN;
    }
}

/* True if cell a ranks before cell b under rules 1 and 2 (rule 3 is the caller's order). */
static bool better(const LrCell *a, const LrCell *b) {
    if (a->missed != b->missed) return a->missed < b->missed;
    return a->mean_log_steps < b->mean_log_steps;
}

int lr_best(const LrCell *cells, int num_lrs) {
    int best = -1;
    for (int l = 0; l < num_lrs; l++) {
        if (cells[l].runs == cells[l].missed) continue; /* none reached: never chosen */
        if (best < 0 || better(&cells[l], &cells[best])) best = l;
    }
    return best;
}

void lr_choose(const LrGrid *g, LrCell *cells, int *chosen) {
    lr_cells(g, cells);
    for (int b = 0; b < g->num_batches; b++) chosen[b] = lr_best(cells + (size_t)b * g->num_lrs, g->num_lrs);
}

int lr_chosen_points(const LrGrid *g, const int *chosen, TradeoffPoint *points) {
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        const GridRun *u = &g->runs[i];
        if (u->reached && chosen[u->batch] == u->lr) points[n++] = (TradeoffPoint){u->steps, u->tokens, u->batch};
    }
    return n;
}

/* The runs grouped by (batch, lr): the indices of cell c's runs are members[start[c] .. start[c + 1]), ascending. */
typedef struct {
    int *start, *members;
} Cells;

static Cells group_cells(const LrGrid *g) {
    const int count = g->num_batches * g->num_lrs;
    Cells c = {bs_calloc((size_t)count + 1, sizeof(int)), bs_malloc(sizeof(int) * (size_t)(g->n > 0 ? g->n : 1))};
    for (int i = 0; i < g->n; i++) c.start[g->runs[i].batch * g->num_lrs + g->runs[i].lr + 1]++;
    for (int k = 0; k < count; k++) c.start[k + 1] += c.start[k];
    int *fill = bs_malloc(sizeof(int) * (size_t)count);
    memcpy(fill, c.start, sizeof(int) * (size_t)count);
    for (int i = 0; i < g->n; i++) c.members[fill[g->runs[i].batch * g->num_lrs + g->runs[i].lr]++] = i;
    free(fill);
    return c;
}

/* One resample: run i replaced by a run drawn from its own (batch, lr), in the grid's order. */
static void resample(const LrGrid *g, const Cells *c, Rng *rng, GridRun *draw) {
    for (int i = 0; i < g->n; i++) {
        const int cell = g->runs[i].batch * g->num_lrs + g->runs[i].lr;
        const int size = c->start[cell + 1] - c->start[cell];
        draw[i] = g->runs[c->members[c->start[cell] + (int)rng_below(rng, (uint64_t)size)]];
    }
}

void lr_choice_bootstrap(const LrGrid *g, int resamples, double level, uint64_t seed, TradeoffInterval *out,
                         int *choice_counts) {
    const size_t cell_count = (size_t)g->num_batches * (size_t)g->num_lrs;
    Cells cells = group_cells(g);
    GridRun *draw = bs_malloc(sizeof *draw * (size_t)(g->n > 0 ? g->n : 1));
    TradeoffPoint *points = bs_malloc(sizeof *points * (size_t)(g->n > 0 ? g->n : 1));
    LrCell *scores = bs_malloc(sizeof *scores * cell_count);
    int *chosen = bs_malloc(sizeof(int) * (size_t)g->num_batches);
    double *values = bs_malloc(sizeof(double) * 3 * (size_t)resamples);
    if (choice_counts) memset(choice_counts, 0, sizeof(int) * cell_count);
    Rng rng;
    rng_seed(&rng, seed);
    out->resamples = resamples;
    out->unbracketed = out->unfitted = 0;
    int fits = 0;
    for (int r = 0; r < resamples; r++) {
        resample(g, &cells, &rng, draw);
        const LrGrid drawn = {draw, g->n, g->num_batches, g->num_lrs};
        lr_choose(&drawn, scores, chosen);
        for (int b = 0; b < g->num_batches && choice_counts; b++)
            if (chosen[b] >= 0) choice_counts[b * g->num_lrs + chosen[b]]++;
        TradeoffFit f;
        char why[160];
        if (!tradeoff_fit(points, lr_chosen_points(&drawn, chosen, points), &f, why, sizeof why)) {
            out->unfitted++; /* fewer than two batches kept a run that reached the target */
            continue;
        }
        values[fits] = f.s_min, values[resamples + fits] = f.e_min, values[2 * resamples + fits] = f.b_crit;
        out->unbracketed += !f.bracketed;
        fits++;
    }
    tradeoff_percentiles(values, resamples, fits, level, out);
    free(values);
    free(chosen);
    free(scores);
    free(points);
    free(draw);
    free(cells.members);
    free(cells.start);
}
