/* grid.h: the 3D process grid: tensor (TP), pipeline (PP) and data (DP)
 * parallel groups over the world.
 *
 *   rank = (dp_index * PP + pp_index) * TP + tp_index
 *
 * TP varies fastest, so a tensor-parallel group (the heaviest traffic, an
 * all-reduce per sub-block) sits inside a node; PP next; DP outermost. Each
 * rank belongs to one group of each kind, plus its model-parallel group
 * (all TP x PP ranks of its data-parallel replica). Layers are split into PP
 * contiguous stages, evenly or as --pp-split says. Impossible layouts are
 * refused with a message saying what to change, before any work starts. */
#ifndef BS_PARALLEL_GRID_H
#define BS_PARALLEL_GRID_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"

typedef struct {
    int tp, pp, dp;                 /* sizes */
    int tp_index, pp_index, dp_index;
    Comm *world, *tp_group, *pp_group, *dp_group, *mp_group;
    int *stage_first, *stage_layers; /* per stage */
} Grid;

/* tp, pp >= 1; dp 0 means world / (tp x pp). layers_per_stage: pp counts
 * (from grid_parse_split, grid_even_split or grid_balanced_layers), NULL for
 * the even split. Dies with one line if the layout cannot be built. */
Grid *grid_create_split(Comm *world, int tp, int pp, int dp, const int *layers_per_stage, int num_layers,
                        int num_heads);
void grid_free(Grid *g);
/* World rank of the grid coordinate. */
int grid_rank_of(const Grid *g, int dp_index, int pp_index, int tp_index);

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
