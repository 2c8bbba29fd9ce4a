/* grid.c: the process grid (see grid.h). */
#include "parallel/grid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"

GridCoord grid_coord_of(const Grid *g, int rank) {
    return (GridCoord){rank / (g->tp * g->cp * g->pp), (rank / (g->tp * g->cp)) % g->pp, (rank / g->tp) % g->cp,
                       rank % g->tp};
}

/* ---- splitting layers over stages ---- */

void grid_even_split(int num_layers, int stages, int *layers_per_stage) {
    for (int s = 0; s < stages; s++) layers_per_stage[s] = num_layers / stages + (s < num_layers % stages ? 1 : 0);
}

bool grid_parse_split(const char *spec, int num_layers, int stages, int *layers_per_stage, char *why,
                      size_t why_size) {
    if (stages < 1 || num_layers < stages) {
        snprintf(why, why_size, "'%s': %d stages need at least %d layers (the model has %d)", spec ? spec : "",
                 stages, stages > 1 ? stages : 1, num_layers);
        return false;
    }
    if (!spec || !*spec) {
        grid_even_split(num_layers, stages, layers_per_stage);
        return true;
    }
    const char *p = spec;
    long total = 0;
    for (int s = 0; s < stages; s++) {
        char *end;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (end == p) {
            snprintf(why, why_size, "'%s': stage %d's layer count is not a number", spec, s);
            return false;
        }
        if (n < 1) {
            snprintf(why, why_size, "'%s': stage %d needs a layer count of at least 1", spec, s);
            return false;
        }
        if (n > num_layers || errno == ERANGE) {
            snprintf(why, why_size, "'%s': stage %d cannot hold more than the model's %d layers", spec, s, num_layers);
            return false;
        }
        layers_per_stage[s] = (int)n;
        total += n;
        p = end;
        if (s < stages - 1) {
            if (*p != ',') {
                snprintf(why, why_size, "'%s' must list %d comma-separated layer counts (one per stage)", spec, stages);
                return false;
            }
            p++;
        }
    }
    if (*p) {
        snprintf(why, why_size, "'%s' must list exactly %d layer counts (one per stage)", spec, stages);
        return false;
    }
    if (total != num_layers) {
        snprintf(why, why_size, "'%s' adds up to %ld layers, but the model has %d", spec, total, num_layers);
        return false;
    }
    return true;
}

void grid_format_split(const int *layers_per_stage, int stages, char *out, size_t out_size) {
    size_t used = 0;
    if (out_size) out[0] = '\0';
    for (int s = 0; s < stages && used < out_size; s++)
        used += (size_t)snprintf(out + used, out_size - used, "%s%d", s ? "," : "", layers_per_stage[s]);
}

void grid_balanced_layers(int num_layers, int pp, double layer_cost, double last_cost, int *layers_per_stage) {
    /* Every stage but the last holds only layers, all of one cost, so for a
     * last stage of k layers the rest split evenly is best; try every k,
     * largest first, keeping the first best (see grid.h on ties). */
    if (pp <= 1) {
        layers_per_stage[0] = num_layers;
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
    grid_even_split(num_layers - best_k, pp - 1, layers_per_stage);
    layers_per_stage[pp - 1] = best_k;
}

/* ---- the grid ---- */

/* Dies with one line if the sizes cannot form a grid; returns dp. */
static int check_layout(const Comm *world, GridShape sh, int num_layers, int num_heads) {
    int size = comm_size(world), model = sh.tp * sh.cp * sh.pp;
    if (sh.tp < 1 || sh.pp < 1 || sh.cp < 1) bs_die_about("tp cp pp", "the tensor-, context- and pipeline-parallel degrees must be at least 1");
    if (size % model != 0)
        bs_die_about("tp cp pp", "the model-parallel size tp %d x cp %d x pp %d = %d does not divide the %d processes launched (mpirun -np)", sh.tp, sh.cp,
               sh.pp, model, size);
    int dp = sh.dp == 0 ? size / model : sh.dp;
    if (model * dp != size)
        bs_die_about("tp cp pp dp", "tp %d x cp %d x pp %d x dp %d = %d ranks, but %d processes were launched (mpirun -np)", sh.tp,
               sh.cp, sh.pp, dp, model * dp, size);
    if (num_heads % sh.tp != 0)
        bs_die_about("tp heads", "the tensor-parallel degree %d does not divide the %d attention heads (tensor parallelism splits them)",
                     sh.tp, num_heads);
    const int ep = sh.ep > 1 ? sh.ep : 1;
    if (dp % ep != 0)
        bs_die_about("ep dp", "the expert-parallel degree %d does not divide the data-parallel size %d (expert parallelism folds over data-parallel ranks)",
               ep, dp);
    if (num_layers < sh.pp)
        bs_die_about("pp layers", "%d pipeline stages need at least %d layers (the model has %d)", sh.pp, sh.pp, num_layers);
    return dp;
}

Grid *grid_create_split(Comm *world, GridShape shape, const int *layers_per_stage, int num_layers, int num_heads) {
    const int dp = check_layout(world, shape, num_layers, num_heads), tp = shape.tp, cp = shape.cp, pp = shape.pp;
    Grid *g = bs_calloc(1, sizeof *g);
    g->tp = tp, g->cp = cp, g->pp = pp, g->dp = dp;
    g->stage_first = bs_calloc((size_t)pp, sizeof(int));
    g->stage_layers = bs_calloc((size_t)pp, sizeof(int));
    if (layers_per_stage) memcpy(g->stage_layers, layers_per_stage, sizeof(int) * (size_t)pp);
    else grid_even_split(num_layers, pp, g->stage_layers);
    int total = 0;
    for (int s = 0; s < pp; s++) {
        if (g->stage_layers[s] < 1) bs_die("internal: pipeline stage %d given %d layers", s, g->stage_layers[s]);
        g->stage_first[s] = total;
        total += g->stage_layers[s];
    }
    if (total != num_layers) bs_die("internal: the stages hold %d layers, the model %d", total, num_layers);
    int r = comm_rank(world);
    GridCoord at = grid_coord_of(g, r);
    g->tp_index = at.tp, g->cp_index = at.cp, g->pp_index = at.pp, g->dp_index = at.dp;
    g->world = world;
    /* each split's colour: the coordinates the group shares, in one number */
    g->tp_group = comm_split(world, (at.dp * pp + at.pp) * cp + at.cp, at.tp, "tensor-parallel");
    g->cp_group = comm_split(world, (at.dp * pp + at.pp) * tp + at.tp, at.cp, "context-parallel");
    g->pp_group = comm_split(world, (at.dp * cp + at.cp) * tp + at.tp, at.pp, "pipeline");
    g->dp_group = comm_split(world, at.pp * tp + at.tp, at.dp * cp + at.cp, "data-parallel");
    g->mp_group = comm_split(world, at.dp * cp + at.cp, r, "model-parallel");
    g->ep = shape.ep > 1 ? shape.ep : 1;
    g->ep_index = at.dp % g->ep, g->edp_index = at.dp / g->ep;
    g->ep_group = comm_split(world, ((g->edp_index * pp + at.pp) * cp + at.cp) * tp + at.tp, g->ep_index,
                             "expert-parallel");
    g->edp_group = comm_split(world, (g->ep_index * pp + at.pp) * tp + at.tp, g->edp_index * cp + at.cp,
                              "expert-data-parallel");
    return g;
}

void grid_free(Grid *g) {
    if (!g) return;
    comm_free(g->tp_group);
    comm_free(g->cp_group);
    comm_free(g->pp_group);
    comm_free(g->dp_group);
    comm_free(g->mp_group);
    comm_free(g->ep_group);
    comm_free(g->edp_group);
    free(g->stage_first);
    free(g->stage_layers);
    free(g);
}
