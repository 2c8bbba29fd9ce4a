/* placement.c: parallel groups by rank order (see placement.h). */
#include "plan/placement.h"

static bool megatron(const Layout *l) { return l->rank_order == ORDER_TP_CP_EP_DP_PP; }

Group placement_tp(const Layout *l, int gpus_per_node) { return group_of(l->tp, 1, gpus_per_node); }

Group placement_cp(const Layout *l, int gpus_per_node) { return group_of(l->cp, l->tp, gpus_per_node); }

/* With expert tensor parallelism below tp, Megatron regroups a stage's
 * tp x cp x dp ranks as etp x ep x expert-data, etp fastest. */
static bool regrouped(const Layout *l) { return layout_expert_tp(l) != l->tp; }

Group placement_ep(const Layout *l, int gpus_per_node) {
    int stride = regrouped(l) ? layout_expert_tp(l) : l->tp * l->cp * (megatron(l) ? 1 : l->pp);
    return group_of(l->ep, stride, gpus_per_node);
}

Group placement_dp(const Layout *l, int gpus_per_node) {
    int n = l->dp * l->cp;
    if (megatron(l)) return group_of(n, l->tp, gpus_per_node);
    /* cp ranks are tp apart, then dp ranks tp cp pp apart */
    int per_tp = gpus_per_node / l->tp;
    int cp_in = l->cp < per_tp ? l->cp : (per_tp > 1 ? per_tp : 1);
    int stride = l->tp * l->cp * l->pp;
    int dp_in = stride >= gpus_per_node ? 1 : (l->dp < gpus_per_node / stride ? l->dp : gpus_per_node / stride);
    Group g = {n, cp_in * dp_in};
    return g;
}

Group placement_expert_dp(const Layout *l, int gpus_per_node) {
    int stride = regrouped(l) ? layout_expert_tp(l) * l->ep : l->tp * l->cp * l->ep * (megatron(l) ? 1 : l->pp);
    return group_of(layout_expert_dp(l), stride, gpus_per_node);
}

bool placement_pp_same_node(const Layout *l, int gpus_per_node) {
    long long span = (long long)l->tp * l->cp * l->pp * (megatron(l) ? l->dp : 1);
    return span <= gpus_per_node;
}
