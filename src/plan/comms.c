/* comms.c: alpha-beta collectives (see comms.h).
 *
 * For an all-reduce of S bytes over n ranks, k per node, N = n/k nodes,
 * B_in the NVLink bus bandwidth and B_out the per-GPU network bandwidth:
 *   ring          2 (n-1) alpha + 2 (n-1)/n S / B, where B = B_in inside a
 *                 node and min(B_in, k B_out) across nodes (NCCL runs one ring
 *                 per NIC, so k GPUs of a node drive k NICs at once);
 *   tree          2 ceil(log2 n) alpha + 2 S / B (double binary tree: log
 *                 latency, the full message on each link);
 *   hierarchical  reduce-scatter inside the node, all-reduce of S/k between
 *                 nodes on each GPU's own NIC, all-gather inside the node.
 *   in-network    (--in-network-reduction on) the switch reduces: each GPU
 *                 sends S once and receives S once. In a node (NVLink
 *                 SHARP): 2 alpha + S / min(B_in, B_nvls); across nodes
 *                 the node reduce-scatter and all-gather of S (through the
 *                 NVSwitch when it reduces, else a ring), chained chunk by
 *                 chunk with InfiniBand SHARP's all-reduce of S/k on each
 *                 GPU's NIC, (S/k) / B_out where a ring moves 2 (N-1)/N S/k:
 *                 the slower of the two parts sets the time. (The switch ALU's rate between nodes is
 *                 taken as the NIC's: an assumption, no measurement here.)
 * Reduce-scatter and all-gather are half an all-reduce. An all-to-all sends
 * (n-1)/n S per rank, the off-node share over the network. */
#include "plan/comms.h"

#include <math.h>

double overlapped_cost(double comm, double compute) {
    double hidden = fmin(comm, fmax(compute, 0.0));
    return comm - hidden + OVERLAP_INTERFERENCE * hidden;
}

double pipelined_cost(int steps, double transfer, double step_compute) {
    if (steps < 2) return 0.0;
    return (steps - 1) * overlapped_cost(transfer, step_compute);
}

double intra_node_busbw(const Hardware *hw) { return hw->nvlink_bw * NVLINK_EFFICIENCY; }
double inter_node_busbw(const Hardware *hw) { return hw->net_bw * NETWORK_EFFICIENCY; }

Group group_of(int n, int stride, int gpus_per_node) {
    Group g = {n, n};
    if (stride < 1) stride = 1;
    if ((long long)n * stride > gpus_per_node) {
        int k = gpus_per_node / stride;
        g.per_node = k < 1 ? 1 : k;
    }
    return g;
}

static double allreduce_modelled(const Hardware *hw, double S, Group g, CollectiveAlgo algo) {
    double n = g.n, k = g.per_node < g.n ? g.per_node : g.n;
    double b_in = intra_node_busbw(hw), b_out = inter_node_busbw(hw);
    bool one_node = g.per_node >= g.n;
    double alpha = one_node ? hw->nvlink_latency : hw->net_latency;
    double bus = one_node ? b_in : fmin(b_in, k * b_out);
    switch (algo) {
    case ALGO_RING: return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * S / bus;
    case ALGO_TREE: return 2.0 * ceil(log2(n)) * alpha + 2.0 * S / bus;
    case ALGO_IN_NETWORK: {
        if (!hw->in_network) return INFINITY;
        double b_sw = hw->nvls_bw > 0 ? fmin(b_in, hw->nvls_bw) : 0.0;
        if (one_node) return b_sw > 0 ? 2.0 * hw->nvlink_latency + S / b_sw : INFINITY;
        /* NCCL chains the node part and the network part chunk by chunk
         * (NVLS-tree, CollNet): the slower of the two sets the pace */
        double inside = b_sw > 0 ? (k - 1) / k * S / b_sw : 2.0 * (k - 1) / k * S / b_in;
        double latency = b_sw > 0 ? 2.0 * hw->nvlink_latency : 2.0 * (k - 1) * hw->nvlink_latency;
        return latency + 2.0 * hw->net_latency + fmax(inside, (S / k) / b_out);
    }
    case ALGO_HIERARCHICAL: {
        if (one_node) return INFINITY;
        double nodes = n / k;
        double inside = 2.0 * ((k - 1) * hw->nvlink_latency + (k - 1) / k * S / b_in);
        double across = 2.0 * (nodes - 1) * hw->net_latency + 2.0 * (nodes - 1) / nodes * (S / k) / b_out;
        return inside + across;
    }
    default: return INFINITY; /* MPI's own algorithm is only measured */
    }
}

static double allreduce_measured(const CollectiveFit *f, double S, Group g, CollectiveAlgo algo) {
    double n = g.n;
    double steps = algo == ALGO_TREE ? 2.0 * ceil(log2(n)) : 2.0 * (n - 1);
    return steps * f->alpha + 2.0 * (n - 1) / n * S / f->busbw;
}

static double allreduce_time(const Hardware *hw, double S, Group g, CollectiveAlgo *best_algo) {
    double best = INFINITY;
    CollectiveAlgo which = ALGO_RING;
    bool measured = false;
    for (int a = 0; a < ALGO_COUNT; a++) measured = measured || hw->coll[a].present;
    for (int a = 0; a < ALGO_COUNT; a++) {
        double t;
        if (measured) {
            if (!hw->coll[a].present) continue;
            t = allreduce_measured(&hw->coll[a], S, g, (CollectiveAlgo)a);
        } else {
            t = allreduce_modelled(hw, S, g, (CollectiveAlgo)a);
        }
        if (t < best) best = t, which = (CollectiveAlgo)a;
    }
    if (best_algo) *best_algo = which;
    return best;
}

static double alltoall_time(const Hardware *hw, double S, Group g) {
    double n = g.n, k = g.per_node < g.n ? g.per_node : g.n;
    bool one_node = g.per_node >= g.n;
    double b_in = intra_node_busbw(hw), b_out = inter_node_busbw(hw);
    if (one_node) return (n - 1) * hw->nvlink_latency + (n - 1) / n * S / b_in;
    double off = (n - k) / n * S, on = (k - 1) / n * S;
    return (n - 1) * hw->net_latency + fmax(off / b_out, on / b_in);
}

double collective_time(const Hardware *hw, Collective op, double bytes, Group g, CollectiveAlgo *algo) {
    if (algo) *algo = ALGO_RING;
    if (g.n <= 1 || bytes <= 0) return 0.0;
    switch (op) {
    case COLL_ALLREDUCE: return allreduce_time(hw, bytes, g, algo);
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: return 0.5 * allreduce_time(hw, bytes, g, algo);
    case COLL_ALLTOALL: return alltoall_time(hw, bytes, g);
    }
    return 0.0;
}

double p2p_time(const Hardware *hw, double bytes, int same_node) {
    if (bytes <= 0) return 0.0;
    if (same_node) return hw->nvlink_latency + bytes / intra_node_busbw(hw);
    return hw->net_latency + bytes / inter_node_busbw(hw);
}
