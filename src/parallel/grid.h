/* grid.h: the process grid: tensor (TP), context (CP), pipeline (PP) and
 * data (DP) parallel groups over the world.
 *
 *   rank = ((dp_index * PP + pp_index) * CP + cp_index) * TP + tp_index
 *
 * TP varies fastest, so a tensor-parallel group (the heaviest traffic, an
 * all-reduce per sub-block) sits inside a node; then CP (ring attention's
 * neighbour traffic); then PP; DP outermost. The CP ranks of a replica hold
 * the same parameters and split each sequence, so gradients are reduced, and
 * ZeRO shards, over the dp x cp ranks of a (pipeline, tensor) position: that
 * is dp_group. Each rank also has its model-parallel group (the TP x PP
 * ranks of its replica with its cp_index). Layers are split into PP
 * contiguous stages, evenly or as --pp-split says. Impossible layouts are
 * refused with a message saying what to change, before any work starts.
 *
 * Expert parallelism (MoE, ep > 1) folds inside DP, ep fastest:
 *   dp_index = edp_index * ep + ep_index
 * The EP group (the experts' all-to-all) is the ep ranks of equal (edp, pp,
 * cp, tp); the expert-data-parallel group (expert gradients) the dp / ep
 * replicas x cp of equal (ep_index, pp, tp). ep must divide dp. */
#ifndef BS_PARALLEL_GRID_H
#define BS_PARALLEL_GRID_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"

typedef struct {
    int tp, cp, pp, dp;             /* sizes: dp counts data replicas (each cp ranks) */
    int tp_index, cp_index, pp_index, dp_index;
    Comm *world, *tp_group, *cp_group, *pp_group, *mp_group;
    Comm *dp_group;                 /* gradient reduction and ZeRO: the dp x cp ranks */
    int *stage_first, *stage_layers; /* per stage */
    int ep, ep_index, edp_index;    /* expert parallelism inside DP (1, 0, dp_index: none) */
    Comm *ep_group, *edp_group;     /* the EP group; expert gradients' data-parallel group */
} Grid;

/* The sizes of a layout; dp 0 means world / (tp x cp x pp). */
typedef struct {
    int tp, cp, pp, dp;
    int ep; /* expert parallelism inside dp (0 or 1: none) */
} GridShape;

/* tp, cp, pp >= 1. layers_per_stage: pp counts (from grid_parse_split,
 * grid_even_split or grid_balanced_layers), NULL for the even split. Dies
 * with one line if the layout cannot be built. */
Grid *grid_create_split(Comm *world, GridShape shape, const int *layers_per_stage, int num_layers, int num_heads);
void grid_free(Grid *g);
/* Grid coordinates of a world rank. */
typedef struct {
    int dp, pp, cp, tp;
} GridCoord;
GridCoord grid_coord_of(const Grid *g, int rank);

/* ---- splitting layers over pipeline stages (no communication) ---- */

/* num_layers / stages layers each, the first num_layers % stages one more. */
void grid_even_split(int num_layers, int stages, int *layers_per_stage);
/* "n0,n1,...": exactly `stages` counts, each at least 1, adding up to
 * num_layers; "" or NULL gives the even split. On bad text returns false
 * with why = the text quoted and what is wrong (no flag name: the caller
 * says where the text came from). */
bool grid_parse_split(const char *spec, int num_layers, int stages, int *layers_per_stage, char *why,
                      size_t why_size);
/* The counts as "n0,n1,..." (what grid_parse_split reads back). */
void grid_format_split(const int *layers_per_stage, int stages, char *out, size_t out_size);
/* The contiguous split of num_layers layers into pp stages whose largest
 * cost is smallest, each layer costing layer_cost and the last stage also
 * last_cost (the output layer and loss). Ties go to the split with more
 * layers on the last stage (in 1F1B it keeps the fewest micro-batches'
 * activations alive). */
void grid_balanced_layers(int num_layers, int pp, double layer_cost, double last_cost, int *layers_per_stage);

#endif
