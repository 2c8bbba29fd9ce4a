/* placement.h: where each parallel group's ranks sit, by the layout's rank
 * order (layout.h), as the Group of comms.h (members, and how many of them
 * share a node). tp is always fastest, so a TP group of up to a node's GPUs
 * is inside one node and a CP group's members are tp ranks apart.
 *
 *   tp-cp-pp-dp (the engine, Llama 3): EP members tp cp pp ranks apart;
 *     a stage's DP group has its cp ranks, then dp ranks tp cp pp apart;
 *     pipeline neighbours share a node when tp cp pp GPUs fit in one.
 *   tp-cp-ep-dp-pp (Megatron): EP members tp cp apart; the DP group's
 *     dp x cp ranks are tp apart; pipeline neighbours tp cp dp apart.
 * In Megatron's order EP 8 of a TP 1 model fills one node, so its
 * all-to-all runs on NVLink; in the engine's order a pipeline of p stages
 * puts p - 1 stages between expert-parallel ranks. */
#ifndef BS_PLAN_PLACEMENT_H
#define BS_PLAN_PLACEMENT_H

#include <stdbool.h>

#include "plan/comms.h"
#include "plan/layout.h"

Group placement_tp(const Layout *l, int gpus_per_node);
Group placement_cp(const Layout *l, int gpus_per_node);
Group placement_ep(const Layout *l, int gpus_per_node);
/* The gradient group of dense parameters: the dp x cp ranks of one stage. */
Group placement_dp(const Layout *l, int gpus_per_node);
/* The gradient group of expert parameters: dp x cp / ep ranks. */
Group placement_expert_dp(const Layout *l, int gpus_per_node);
/* Whether neighbouring pipeline stages share a node. */
bool placement_pp_same_node(const Layout *l, int gpus_per_node);

#endif
