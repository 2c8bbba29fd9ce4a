/* moe_device_exchange.c: the device's expert-parallel moves (see
 * moe_device_exchange.h): per layer the counts' plan, then all-to-all-v
 * moves of whole rows whose received layout is kept as it lands. */
#include "model/moe_device_exchange.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"

typedef struct {
    size_t *recv_block; /* (ep, local): rows from source s for local expert e */
    size_t *send_rows, *recv_rows; /* (ep): rows to / from each rank */
} LayerPlan;

struct MoeDeviceExchange {
    Comm *comm;
    DeviceComm *rows;
    int ep, local, experts, layers;
    LayerPlan *plan; /* per layer */
    size_t *counts;  /* (E): one plan's counts as size_t */
};

MoeDeviceExchange *moe_device_exchange_create(Comm *ep_group, DeviceComm *rows, int experts, int layers) {
    MoeDeviceExchange *x = bs_calloc(1, sizeof *x);
    x->comm = ep_group, x->rows = rows, x->ep = comm_size(ep_group), x->experts = experts, x->layers = layers;
    if (experts % x->ep != 0) bs_die_about("ep experts", "the expert-parallel degree %d does not divide the %d experts", x->ep, experts);
    x->local = experts / x->ep;
    x->plan = bs_calloc((size_t)layers, sizeof *x->plan);
    for (int l = 0; l < layers; l++) {
        x->plan[l].recv_block = bs_calloc((size_t)experts, sizeof(size_t));
        x->plan[l].send_rows = bs_calloc((size_t)x->ep, sizeof(size_t));
        x->plan[l].recv_rows = bs_calloc((size_t)x->ep, sizeof(size_t));
    }
    x->counts = bs_calloc((size_t)experts, sizeof(size_t));
    return x;
}

void moe_device_exchange_free(MoeDeviceExchange *x) {
    if (!x) return;
    for (int l = 0; l < x->layers; l++) free(x->plan[l].recv_block), free(x->plan[l].send_rows), free(x->plan[l].recv_rows);
    free(x->plan), free(x->counts), free(x);
}

size_t moe_device_exchange_max_received(int experts, int ep, int top_k, size_t rows_per_rank) {
    const int local = experts / ep;
    return rows_per_rank * (size_t)ep * (size_t)(top_k < local ? top_k : local);
}

size_t moe_device_exchange_plan(MoeDeviceExchange *x, int l, const int32_t *expert_counts, size_t sent) {
    LayerPlan *p = &x->plan[l];
    int64_t sum = 0;
    for (int e = 0; e < x->experts; e++) sum += expert_counts[e] < 0 ? INT32_MIN : expert_counts[e];
    if (sum != (int64_t)sent) /* else the ranks' moves would not meet: one line, not a wait until the timeout */
        bs_die("internal error: MoE layer %d dispatched %lld of this rank's %zu assignments", l, (long long)sum, sent);
    for (int e = 0; e < x->experts; e++) x->counts[e] = (size_t)expert_counts[e];
    comm_alltoall_sizes(x->comm, x->counts, p->recv_block, x->local);
    size_t received = 0;
    for (int r = 0; r < x->ep; r++) {
        p->send_rows[r] = p->recv_rows[r] = 0;
        for (int e = 0; e < x->local; e++) {
            p->send_rows[r] += x->counts[r * x->local + e];
            p->recv_rows[r] += p->recv_block[r * x->local + e];
        }
        received += p->recv_rows[r];
    }
    return received;
}

int moe_device_exchange_blocks(const MoeDeviceExchange *x) { return x->experts; }
int moe_device_exchange_local_experts(const MoeDeviceExchange *x) { return x->local; }

size_t moe_device_exchange_block_rows(const MoeDeviceExchange *x, int l, int b) { return x->plan[l].recv_block[b]; }

void moe_device_exchange_dispatch(MoeDeviceExchange *x, int l, const float *rows, float *out, size_t width) {
    const LayerPlan *p = &x->plan[l];
    device_comm_alltoallv(x->rows, rows, p->send_rows, out, p->recv_rows, sizeof(float) * width);
    device_comm_wait(x->rows);
}

void moe_device_exchange_return(MoeDeviceExchange *x, int l, const float *rows, float *out, size_t width) {
    const LayerPlan *p = &x->plan[l];
    device_comm_alltoallv(x->rows, rows, p->recv_rows, out, p->send_rows, sizeof(float) * width);
    device_comm_wait(x->rows);
}
