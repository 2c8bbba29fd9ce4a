/* moe_parallel.h: the MoE layer (model/moe.h) with expert parallelism. Each
 * rank of an EP group routes its own rows (router, aux and z losses
 * locally; the router weight is replicated), its rows travel to the ranks
 * holding their experts (parallel/expert_exchange.h), the experts compute
 * there, and the outputs come back; backward moves the gradients the same
 * two ways. Rank r holds experts [r E/ep, (r+1) E/ep).
 *
 * Capacity is global over the EP group: ceil(group rows K / E x factor)
 * per expert, decided on the expert's rank from every assignment the group
 * sent it, lowest score first, ties to the later position, positions
 * counted over the group's rows in rank order. So the same assignments are
 * dropped as one process (moe_forward) over all ranks' rows concatenated in
 * rank order. Dropped rows still travel (their score is only compared on
 * the expert's rank) and come back as zeros.
 *
 * Gradients: the expert weights' are complete on their rank for the
 * group's rows; the router weight's are this rank's part (the caller sums
 * them over the data-parallel group, as for any dense weight). Statistics:
 * routed, prob, tokens and lse_sq count this rank's rows, kept this rank's
 * experts; their sum over the group is the group's. */
#ifndef BS_PARALLEL_MOE_PARALLEL_H
#define BS_PARALLEL_MOE_PARALLEL_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/moe.h"

typedef struct MoeParallel MoeParallel;

/* Up to max_rows rows per rank per forward; E divisible by the group size. */
MoeParallel *moe_parallel_create(const MoeConfig *cfg, Comm *ep_group, size_t max_rows);
void moe_parallel_free(MoeParallel *p);
/* This rank's experts: the first index and how many. */
int moe_parallel_first_expert(const MoeParallel *p);
int moe_parallel_local_experts(const MoeParallel *p);

/* out (N,C) written for this rank's rows x (N,C); experts: this rank's
 * expert blocks. Collective over the group. */
void moe_parallel_forward(MoeParallel *p, float *out, const float *x, size_t N, const float *router_w,
                          const float *experts, const float *bias, MoeStats *stats);
/* dx (N,C) +=, drouter_w +=, dexperts (this rank's) += (global: the summed
 * statistics). Collective over the group. */
void moe_parallel_backward(MoeParallel *p, float *dx, float *drouter_w, float *dexperts, const float *dout,
                           const float *x, const float *router_w, const float *experts, const MoeStats *global);
/* Capacity per group of `rows` consecutive positions of the group's rows
 * (moe_set_capacity_group; the GPT passes its sequence length: each
 * sequence its own capacity group, ceil(rows K / E x factor) per expert);
 * 0, the default: the group's rows are one capacity group. */
void moe_parallel_set_capacity_group(MoeParallel *p, size_t rows);
/* The losses' gradient coefficients (moe_set_loss_coefs). */
void moe_parallel_set_loss_coefs(MoeParallel *p, double aux_coef, double z_coef);
/* Tensor parallelism over the experts (model/moe.h's moe_set_tensor_parallel):
 * the EP group is one tensor-parallel rank's; each rank's experts are slices. */
void moe_parallel_set_tensor_parallel(MoeParallel *layer, bool lead, MoeSumFn sum, void *ctx);
/* Bytes sent to other ranks by this rank's exchanges so far, and moves. */
uint64_t moe_parallel_bytes(const MoeParallel *p);
uint64_t moe_parallel_moves(const MoeParallel *p);

#endif
