/* moe_comm.h: the expert-parallel all-to-all of one MoE block: how many
 * copies of each token cross NVLink and the network, and how much of the
 * exchange the step sees.
 *
 * Copies. Each token goes to its top_k routed experts (shared experts are
 * on every rank: no exchange). With destinations spread evenly over the n
 * ranks of the EP group, k per node, N = n / k nodes, a token sends
 *   D (n - k) / n copies over the network and D (k - 1) / n over NVLink,
 * D = top_k (each routed copy is sent, as Megatron's token dispatcher does).
 * Device-limited routing (DeepSeek-V2, section 2.1.2: a token's experts on
 * at most M devices, the communication "proportional to the number of
 * devices covered") sends a token once to each device: D = min(top_k, M).
 * Node-limited routing (DeepSeek-V3, section 2.1.2 and 3.2.2: at most M
 * nodes, each reached once over InfiniBand and forwarded over NVLink to its
 * GPUs there) sends min(D (n - k) / n, M (N - 1) / N) copies over the
 * network, and the copies that landed on another node, less the one on the
 * receiving GPU, (D (n - k) / n) (k - 1) / k, once more over NVLink. The
 * slower link sets the time (both run at once); the busiest rank carries
 * the imbalance times the mean.
 *
 * Exposure (the layout's ep_overlap): one block and micro-batch passes the
 * all-to-all four times (dispatch and combine, forward and backward; six
 * with full recomputation). OFF: all exposed. SHARED: the forward passes
 * beside the shared experts' forward MLP, the backward ones beside its
 * backward (twice the forward). DUALPIPE: every pass beside the other
 * micro-batch's chunk, i.e. the block's whole compute. COMBINED_1F1B
 * (Megatron-core's combined 1F1B, --overlap-moe-expert-parallel-comm; its
 * guide "Combined 1F1B: Expert-Parallel All-to-All Overlap"): in the steady
 * state the forward of micro-batch i+1 runs with the backward of micro-batch
 * i, layer by layer, on two streams, issued as
 *   F.attn | B.combine,  B.expert | F.dispatch,  F.expert | B.dispatch,
 *   B.attn | F.combine
 * (each all-to-all beside the one compute part that does not depend on it;
 * "attn" is everything of the block but the routed experts: attention,
 * norms, router, permutation; B.expert is the experts' input and weight
 * gradients, twice their forward), so each pair costs what its all-to-all
 * exceeds its compute by. The passes that have no partner, the warm-up
 * forwards and the cool-down backwards ("the first forward and final
 * backward remain exposed fill/drain phases"), expose all four: a share
 * combined_1f1b_unpaired of the passes. Overlap never hides more than the
 * compute beside it, and a hidden second still costs OVERLAP_INTERFERENCE
 * (comms.h). */
#ifndef BS_PLAN_MOE_COMM_H
#define BS_PLAN_MOE_COMM_H

#include "plan/compute.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model.h"

/* Copies per token sent over each link class from one rank. */
typedef struct {
    double network, nvlink;
} TokenCopies;

TokenCopies moe_token_copies(const ModelShape *m, int n, int per_node);
/* Seconds of one dispatch (or combine) of T tokens of e bytes per element. */
double moe_alltoall_time(const ModelShape *m, const Layout *l, const Hardware *hw, double e, double T);
/* Exposed all-to-all seconds of one block per micro-batch, in a step of
 * `micro_batches` micro-batches per pipeline. */
double moe_exposed(const ModelShape *m, const Layout *l, const Hardware *hw, double e, const LayerCompute *c,
                   int micro_batches);

/* Combined 1F1B: the share of a stage's forward (and backward) chunk passes
 * that have no partner, on the first stage (the longest warm-up): Megatron's
 * interleaved warm-up of 2 (pp - 1) + (v - 1) pp forward chunks, plus the one
 * more the overlap moves into it, of the m v a step runs; without a pipeline
 * the first forward alone (1 of m). At most 1. */
double combined_1f1b_unpaired(const Layout *l, int micro_batches);

/* DualPipe's pipeline bubble over 1F1B's for pp stages (even), from a
 * block's forward F, backward B and recomputation R: DeepSeek-V3's Table 2
 * gives (pp/2 - 1)(F&B + B' - 3W) against (pp - 1)(F + B'), where B' = B + R
 * is a backward chunk, F&B, a forward and a backward chunk run together,
 * takes F + B' when the exchange hides (the ep_overlap above), and W, the
 * weight-gradient half of the backward matmuls, is B/2. */
double dualpipe_bubble_share(int pp, double forward, double backward, double recompute);

#endif
