/* moe_device_exchange.h: expert parallelism's moves of rows on a device (the
 * device side of parallel/expert_exchange.h). An EP group of ep ranks shares
 * E experts, E/ep per rank: rank r holds experts [r E/ep, (r+1) E/ep), the
 * CPU's split (gpt_layout.c). Per MoE layer and forward, plan exchanges this
 * rank's rows per expert with the group over the host's MPI (the control
 * plane: E small host values per rank, comm_alltoall_sizes); dispatch moves
 * the rows in dispatch order (expert order, the DK_MOE_DISPATCH layout) to
 * the ranks holding their experts with one device all-to-all-v
 * (device_comm_alltoallv), where they land in source-rank order, each
 * source's rows in local-expert order: blocks (source s, local expert e),
 * which the experts compute block by block; the return moves rows of that
 * layout back to their sources in dispatch order. Backward uses the same
 * two moves with the layer's plan (the output gradients out, the input
 * gradients back). After either move the compute stream waits for it
 * (device_comm_wait): work queued next reads the rows. */
#ifndef BS_MODEL_MOE_DEVICE_EXCHANGE_H
#define BS_MODEL_MOE_DEVICE_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/device_comm.h"

typedef struct MoeDeviceExchange MoeDeviceExchange;

/* For `layers` layers' plans; ep_group and rows (its device collectives) kept
 * by the caller; experts divisible by the group's size. */
MoeDeviceExchange *moe_device_exchange_create(Comm *ep_group, DeviceComm *rows, int experts, int layers);
void moe_device_exchange_free(MoeDeviceExchange *x);
/* The worst rows one rank receives per move: every rank's rows (rows_per_rank
 * each) choosing min(top_k, E/ep) of this rank's experts. */
size_t moe_device_exchange_max_received(int experts, int ep, int top_k, size_t rows_per_rank);

/* Layer l's plan from this rank's rows per expert (E, expert order), which
 * must add up to `sent` (its rows x top-k; else the job ends with one line:
 * the other ranks would wait for rows never sent). Blocking, collective over
 * the group. Returns the rows this rank receives. */
size_t moe_device_exchange_plan(MoeDeviceExchange *x, int l, const int32_t *expert_counts, size_t sent);
/* Blocks of the received layout (ep x local experts); block b holds
 * moe_device_exchange_block_rows(x, l, b) rows of local expert b % local. */
int moe_device_exchange_blocks(const MoeDeviceExchange *x);
int moe_device_exchange_local_experts(const MoeDeviceExchange *x);
size_t moe_device_exchange_block_rows(const MoeDeviceExchange *x, int l, int b);
/* rows (sent, width floats each, dispatch order) -> out (received layout), layer l's plan. */
void moe_device_exchange_dispatch(MoeDeviceExchange *x, int l, const float *rows, float *out, size_t width);
/* rows (received layout) -> out (sent, dispatch order): the dispatch's reverse. */
void moe_device_exchange_return(MoeDeviceExchange *x, int l, const float *rows, float *out, size_t width);

#endif
