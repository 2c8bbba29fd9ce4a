/* moe_comm.c: the MoE all-to-all's copies, time and exposure (see
 * moe_comm.h). */
#include "plan/moe_comm.h"

#include <math.h>

#include "plan/comms.h"
#include "plan/placement.h"

TokenCopies moe_token_copies(const ModelShape *m, int n, int per_node) {
    TokenCopies c = {0};
    if (n <= 1) return c;
    double k = per_node < n ? per_node : n, nodes = n / k;
    double D = m->moe_device_limit > 0 && m->moe_device_limit < m->top_k ? m->moe_device_limit : m->top_k;
    double off = D * (n - k) / n;
    c.nvlink = D * (k - 1) / n;
    c.network = off;
    if (m->moe_node_limit > 0 && nodes > 1) {
        c.network = fmin(off, m->moe_node_limit * (nodes - 1) / nodes);
        c.nvlink += off * (k - 1) / k; /* forwarded inside the receiving node */
    }
    return c;
}

double moe_alltoall_time(const ModelShape *m, const Layout *l, const Hardware *hw, double e, double T) {
    Group g = placement_ep(l, hw->gpus_per_node);
    if (g.n <= 1) return 0.0;
    double routed_T = T * layout_expert_tp(l) / l->tp; /* the tokens this rank's etp group holds */
    double token_bytes = e * routed_T * m->hidden * model_moe_imbalance(m);
    TokenCopies c = moe_token_copies(m, g.n, g.per_node);
    if (g.per_node >= g.n) /* one node: the plain all-to-all of the copies */
        return collective_time(hw, COLL_ALLTOALL, token_bytes * c.nvlink * g.n / (g.n - 1.0), g, NULL);
    double n = g.n;
    return (n - 1) * hw->net_latency +
           fmax(c.network * token_bytes / inter_node_busbw(hw), c.nvlink * token_bytes / intra_node_busbw(hw));
}

double dualpipe_bubble_share(int pp, double forward, double backward, double recompute) {
    double F = forward, chunk = backward + recompute, W = 0.5 * backward;
    if (pp < 2 || F + chunk <= 0) return 1.0;
    return (pp / 2.0 - 1.0) * (F + chunk + chunk - 3.0 * W) / ((pp - 1.0) * (F + chunk));
}

double combined_1f1b_unpaired(const Layout *l, int micro_batches) {
    double p = l->pp, v = layout_chunks(l), m = micro_batches;
    double warmup = 2.0 * (p - 1) + (v - 1) * p + 1.0; /* 1 without a pipeline: the first forward */
    return m > 0 ? fmin(1.0, warmup / (m * v)) : 1.0;
}

/* Combined 1F1B's four pairs for one block, a the time of one pass. */
static double combined_1f1b_paired(double a, const LayerCompute *c) {
    double f_expert = c->linear.up + c->linear.down, b_expert = 2.0 * f_expert;
    double f_attn = c->forward - f_expert, b_attn = c->backward + c->recompute - b_expert;
    return overlapped_cost(a, f_attn) + overlapped_cost(a, b_expert) + overlapped_cost(a, f_expert) +
           overlapped_cost(a, b_attn);
}

double moe_exposed(const ModelShape *m, const Layout *l, const Hardware *hw, double e, const LayerCompute *c,
                   int micro_batches) {
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double a2a = moe_alltoall_time(m, l, hw, e, T);
    double forwards = l->recompute == RECOMPUTE_FULL ? 2.0 : 1.0;
    switch (l->ep_overlap) {
    case EP_OVERLAP_SHARED:
        return forwards * overlapped_cost(2.0 * a2a, c->linear.shared) + overlapped_cost(2.0 * a2a, 2.0 * c->linear.shared);
    case EP_OVERLAP_DUALPIPE:
        return overlapped_cost((2.0 * forwards + 2.0) * a2a, c->forward + c->backward + c->recompute);
    case EP_OVERLAP_COMBINED_1F1B: {
        double u = combined_1f1b_unpaired(l, micro_batches);
        return (1.0 - u) * combined_1f1b_paired(a2a, c) + u * 4.0 * a2a;
    }
    case EP_OVERLAP_OFF: break;
    }
    return (2.0 * forwards + 2.0) * a2a;
}
