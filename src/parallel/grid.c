/* grid.c: the process grid (see grid.h). */
#include "parallel/grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int grid_rank_of(const Grid *g, int dp_index, int pp_index, int tp_index) {
    return (dp_index * g->pp + pp_index) * g->tp + tp_index;
}

static void split_layers(Grid *g, const char *pp_split, int num_layers) {
    g->stage_first = bs_calloc((size_t)g->pp, sizeof(int));
    g->stage_layers = bs_calloc((size_t)g->pp, sizeof(int));
    if (!pp_split || !*pp_split) {
        for (int s = 0; s < g->pp; s++) {
            g->stage_layers[s] = num_layers / g->pp + (s < num_layers % g->pp ? 1 : 0);
            g->stage_first[s] = s == 0 ? 0 : g->stage_first[s - 1] + g->stage_layers[s - 1];
        }
        return;
    }
    const char *p = pp_split;
    int total = 0;
    for (int s = 0; s < g->pp; s++) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1) bs_die("--pp-split '%s': stage %d needs a layer count of at least 1", pp_split, s);
        g->stage_first[s] = total;
        g->stage_layers[s] = (int)n;
        total += (int)n;
        p = end;
        if (s < g->pp - 1) {
            if (*p != ',') bs_die("--pp-split '%s' must list %d comma-separated layer counts (one per stage)", pp_split,
                                  g->pp);
            p++;
        }
    }
    if (*p) bs_die("--pp-split '%s' must list exactly %d layer counts (one per stage)", pp_split, g->pp);
    if (total != num_layers)
        bs_die("--pp-split '%s' adds up to %d layers, but the model has %d", pp_split, total, num_layers);
}

Grid *grid_create(Comm *world, int tp, int pp, int dp, const char *pp_split, int num_layers, int num_heads) {
    int size = comm_size(world);
    if (tp < 1 || pp < 1) bs_die("--tp and --pp must be at least 1");
    if (size % (tp * pp) != 0)
        bs_die("--tp %d x --pp %d = %d does not divide the %d processes launched (mpirun -np)", tp, pp, tp * pp, size);
    if (dp == 0) dp = size / (tp * pp);
    if (tp * pp * dp != size)
        bs_die("--tp %d x --pp %d x --dp %d = %d, but %d processes were launched (mpirun -np)", tp, pp, dp,
               tp * pp * dp, size);
    if (num_heads % tp != 0)
        bs_die("--tp %d does not divide --heads %d (tensor parallelism splits the attention heads)", tp, num_heads);
    if (num_layers < pp) bs_die("--pp %d stages need at least %d layers (the model has %d)", pp, pp, num_layers);
    Grid *g = bs_calloc(1, sizeof *g);
    g->tp = tp, g->pp = pp, g->dp = dp;
    int r = comm_rank(world);
    g->tp_index = r % tp;
    g->pp_index = (r / tp) % pp;
    g->dp_index = r / (tp * pp);
    g->world = world;
    g->tp_group = comm_split(world, g->dp_index * pp + g->pp_index, g->tp_index, "tensor-parallel");
    g->pp_group = comm_split(world, g->dp_index * tp + g->tp_index, g->pp_index, "pipeline");
    g->dp_group = comm_split(world, g->pp_index * tp + g->tp_index, g->dp_index, "data-parallel");
    g->mp_group = comm_split(world, g->dp_index, r, "model-parallel");
    split_layers(g, pp_split, num_layers);
    return g;
}

void grid_free(Grid *g) {
    if (!g) return;
    comm_free(g->tp_group);
    comm_free(g->pp_group);
    comm_free(g->dp_group);
    comm_free(g->mp_group);
    free(g->stage_first);
    free(g->stage_layers);
    free(g);
}

void grid_balanced_split(int num_layers, int pp, double layer_cost, double last_cost, char *out, size_t out_size) {
    /* Every stage but the last holds only layers, all of one cost, so for a
     * last stage of k layers the rest split evenly is best; try every k,
     * largest first, keeping the first best (see grid.h on ties). */
    if (pp <= 1) {
        snprintf(out, out_size, "%d", num_layers);
        return;
    }
    int best_k = 1;
    double best = -1;
    for (int k = num_layers - (pp - 1); k >= 1; k--) {
        int rest = num_layers - k, others = pp - 1;
        double front = layer_cost * (rest / others + (rest % others ? 1 : 0));
        double worst = front > k * layer_cost + last_cost ? front : k * layer_cost + last_cost;
        if (best < 0 || worst < best) best = worst, best_k = k;
    }
    size_t used = 0;
    int rest = num_layers - best_k;
    for (int s = 0; s < pp && used < out_size; s++) {
        int n = s == pp - 1 ? best_k : rest / (pp - 1) + (s < rest % (pp - 1) ? 1 : 0);
        used += (size_t)snprintf(out + used, out_size - used, "%s%d", s ? "," : "", n);
    }
}
