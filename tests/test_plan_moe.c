/* test_plan_moe.c: the planner's mixture-of-experts terms against hand
 * computations: shared experts in the FLOPs and parameters, the copies a
 * token sends under device- and node-limited routing (DeepSeek-V2 and V3),
 * the all-to-all time they give, what --ep-overlap hides (never more than
 * the compute beside it), Megatron-core's combined 1F1B pairing and its
 * unpaired warm-up, DualPipe's bubble against its paper's table, and
 * expert tensor parallelism below tp (the
 * tokens each rank dispatches, its experts' shapes and groups), and the
 * default rank order of an expert-parallel layout. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/comms.h"
#include "plan/compute.h"
#include "plan/memory.h"
#include "plan/moe_comm.h"
#include "plan/placement.h"
#include "plan/plan.h"
#include "plan/presets.h"
#include "plan/search.h"
#include "check.h"
#include "plan_subjects.h"

static bool close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

/* DeepSeek-V3 in the planner's vocabulary (tests/test_plan_validation.py):
 * 8 routed experts of 2048 and 1 shared, at most 4 nodes per token. */
static ModelShape deepseek_v3(void) {
    ModelShape m = {.layers = 61, .hidden = 7168, .heads = 128, .kv_heads = 1, .ffn = 2048, .vocab = 129280,
                    .seq_len = 4096, .vocab_multiple = 1, .act = ACT_SWIGLU, .norm = NORM_RMSNORM, .experts = 256,
                    .top_k = 8, .head_dim = 122, .shared_experts = 1, .moe_node_limit = 4};
    return m;
}

static Hardware h800(void) {
    Hardware hw;
    hardware_preset("h100-sxm", &hw);
    hw.nvlink_bw = 200e9; /* 400 GB/s both directions */
    return hw;
}

/* Every token passes through its top-k routed experts and the shared ones:
 * MLP FLOPs 2 x 3 h f (k + shared); the shared experts' weights count with
 * the dense parameters (every EP rank holds them), the routed ones with the
 * experts. */
static void test_shared_experts(void) {
    ModelShape m = deepseek_v3();
    double h = m.hidden, f = m.ffn, expert = 3.0 * h * f;
    ModelShape plain = m;
    plain.shared_experts = 0;
    CHECK(close_rel(model_layer_flops(&m) - model_layer_flops(&plain), 2.0 * expert, 1e-12),
          "one shared expert adds 2 x 3 h f FLOPs per token and layer");
    CHECK(close_rel(model_layer_dense_params(&m) - model_layer_dense_params(&plain), expert, 1e-12) &&
              model_layer_expert_params(&m) == model_layer_expert_params(&plain) &&
              close_rel(model_layer_expert_params(&m), 256.0 * expert, 1e-12),
          "shared weights with the dense parameters, routed ones with the experts");
    CHECK(close_rel(model_active_params(&m) - model_active_params(&plain), m.layers * expert, 1e-12),
          "active parameters count the shared expert once per layer");
    char why[256];
    ModelShape dense = {.layers = 2, .hidden = 64, .heads = 4, .kv_heads = 4, .ffn = 256, .vocab = 100, .seq_len = 8,
                        .shared_experts = 1};
    CHECK(!model_check(&dense, why, sizeof why) && strstr(why, "--shared-experts"), "a dense model refuses shared experts: %s",
          why);
}

/* Copies per token from one rank of an EP group of n ranks, k per node. */
static void test_token_copies(void) {
    ModelShape m = deepseek_v3();
    /* V3: EP 64 over 8 nodes. Unlimited: 8 (56/64) = 7 over the network, 8 (7/64)
     * over NVLink. Node-limited to 4 of 8 nodes: 4 (7/8) = 3.5 over the
     * network; NVLink carries the same-node copies and forwards the 7
     * off-node copies to (7/8) of the receiving node's GPUs: 0.875 + 6.125. */
    TokenCopies c = moe_token_copies(&m, 64, 8);
    CHECK(close_rel(c.network, 3.5, 1e-12) && close_rel(c.nvlink, 7.0, 1e-12), "V3 node-limited: %.4f network, %.4f NVLink",
          c.network, c.nvlink);
    m.moe_node_limit = 0;
    c = moe_token_copies(&m, 64, 8);
    CHECK(close_rel(c.network, 7.0, 1e-12) && close_rel(c.nvlink, 0.875, 1e-12), "unlimited: %.4f network, %.4f NVLink",
          c.network, c.nvlink);
    m.moe_node_limit = 8; /* a limit above the copies changes nothing on the network */
    c = moe_token_copies(&m, 64, 8);
    CHECK(close_rel(c.network, 7.0, 1e-12), "a loose node limit: %.4f network copies", c.network);
    /* V2: 6 routed experts on at most 3 of the 8 ranks of one node, sent once to each: 3 (7/8) */
    ModelShape v2 = m;
    v2.top_k = 6, v2.moe_node_limit = 0, v2.moe_device_limit = 3;
    c = moe_token_copies(&v2, 8, 8);
    CHECK(c.network == 0.0 && close_rel(c.nvlink, 2.625, 1e-12), "V2 device-limited: %.4f NVLink copies", c.nvlink);
    c = moe_token_copies(&v2, 1, 8);
    CHECK(c.network == 0.0 && c.nvlink == 0.0, "no expert parallelism, no copies");
}

/* V3's all-to-all on H800: T = 4096 tokens of 7168 BF16 values (58.7 MB),
 * 3.5 copies at 45 GB/s of InfiniBand against 7 at 160 GB/s of NVLink:
 * the network sets it, 4.567 ms, plus 63 steps of 6 us. */
static void test_alltoall_time(void) {
    ModelShape m = deepseek_v3();
    Hardware hw = h800();
    Layout l = layout_default();
    l.pp = 16, l.dp = 128, l.ep = 64, l.rank_order = ORDER_TP_CP_EP_DP_PP;
    double bytes = 2.0 * 4096 * 7168;
    double expected = 63 * 6e-6 + 3.5 * bytes / (50e9 * 0.9);
    double t = moe_alltoall_time(&m, &l, &hw, 2.0, 4096);
    CHECK(close_rel(t, expected, 1e-12) && close_rel(t, 4.945e-3, 1e-3), "V3 all-to-all %.4f ms, by hand %.4f", 1e3 * t,
          1e3 * expected);
    /* inside one node the planner's plain all-to-all of the copies' bytes */
    l.ep = 8;
    m.moe_node_limit = 0;
    double one_node = moe_alltoall_time(&m, &l, &hw, 2.0, 4096);
    double plain = collective_time(&hw, COLL_ALLTOALL, 8.0 * bytes, placement_ep(&l, 8), NULL);
    CHECK(close_rel(one_node, plain, 1e-12), "EP 8 in a node: %.4f ms, the all-to-all of 8 copies %.4f", 1e3 * one_node,
          1e3 * plain);
}

/* --ep-overlap: four passes of the exchange per block and micro-batch (six
 * with full recomputation); shared hides the forward pair behind the shared
 * MLP's forward and the backward pair behind its backward (twice as long);
 * dualpipe hides all of it behind the block's compute. A hidden second costs
 * OVERLAP_INTERFERENCE; what exceeds the compute stays exposed. */
static void test_overlap(void) {
    ModelShape m = deepseek_v3();
    Hardware hw = h800();
    Layout l = layout_default();
    l.pp = 16, l.dp = 128, l.ep = 64, l.rank_order = ORDER_TP_CP_EP_DP_PP;
    double a = moe_alltoall_time(&m, &l, &hw, 2.0, 4096), I = OVERLAP_INTERFERENCE;
    LayerCompute c = {0};
    c.linear.shared = 1e-3, c.forward = 10e-3, c.backward = 20e-3;
    CHECK(close_rel(moe_exposed(&m, &l, &hw, 2.0, &c, 8), 4.0 * a, 1e-12), "off: four exchanges exposed");
    l.ep_overlap = EP_OVERLAP_SHARED;
    double shared = (2 * a - 1e-3 + I * 1e-3) + (2 * a - 2e-3 + I * 2e-3);
    CHECK(close_rel(moe_exposed(&m, &l, &hw, 2.0, &c, 8), shared, 1e-12), "shared: %.4f ms, by hand %.4f",
          1e3 * moe_exposed(&m, &l, &hw, 2.0, &c, 8), 1e3 * shared);
    l.ep_overlap = EP_OVERLAP_DUALPIPE;
    CHECK(close_rel(moe_exposed(&m, &l, &hw, 2.0, &c, 8), I * 4.0 * a, 1e-12), "dualpipe: 4 x %.3f ms under 30 ms of compute",
          1e3 * a);
    c.forward = 2e-3, c.backward = 4e-3; /* less compute than exchange */
    double left = 4.0 * a - 6e-3 + I * 6e-3;
    CHECK(close_rel(moe_exposed(&m, &l, &hw, 2.0, &c, 8), left, 1e-12), "dualpipe hides at most the compute: %.4f ms, by hand %.4f",
          1e3 * moe_exposed(&m, &l, &hw, 2.0, &c, 8), 1e3 * left);
    l.recompute = RECOMPUTE_FULL, c.recompute = c.forward;
    left = 6.0 * a - 8e-3 + I * 8e-3;
    CHECK(close_rel(moe_exposed(&m, &l, &hw, 2.0, &c, 8), left, 1e-12), "full recomputation: six exchanges");
}

/* Combined 1F1B (Megatron-core's --overlap-moe-expert-parallel-comm): per
 * paired block F.attn | B.combine, B.expert | F.dispatch, F.expert |
 * B.dispatch, B.attn | F.combine. With the routed experts' forward 1 ms
 * (0.6 + 0.4), the rest of the forward 2 ms, the experts' backward 2 ms and
 * the rest of the backward 5 ms, an exchange a of 2-5 ms costs
 * (a - 2) + (a - 2) + (a - 1) + 0 exposed plus 0.1 (2 + 2 + 1 + a) hidden.
 * Unpaired passes, all four exposed: on 16 stages with 2 chunks, Megatron's
  * warm-up 2 x 15 + 1 x 16 and the overlap's one more, 47 of the 64 x 2
 * chunk passes of 64 micro-batches; without a pipeline 1 of m. The memory
 * holds that one more forward chunk: (2 x 15 + 1 x 16 + 1 + 1) / 2 = 24
 * micro-batches on stage 0 (23.5 without), 2 without PP. */
static void test_combined_1f1b(void) {
    ModelShape m = deepseek_v3();
    Hardware hw = h800();
    Layout l = layout_default();
    l.pp = 16, l.dp = 128, l.ep = 64, l.rank_order = ORDER_TP_CP_EP_DP_PP, l.ep_overlap = EP_OVERLAP_COMBINED_1F1B;
    l.schedule = SCHEDULE_INTERLEAVED, l.virtual_stages = 2;
    double a = moe_alltoall_time(&m, &l, &hw, 2.0, 4096), I = OVERLAP_INTERFERENCE;
    CHECK(a > 2e-3 && a < 5e-3, "the exchange (%.3f ms) lies between the parts this hand computation assumes", 1e3 * a);
    LayerCompute c = {0};
    c.linear.up = 0.6e-3, c.linear.down = 0.4e-3, c.forward = 3e-3, c.backward = 7e-3;
    double paired = (a - 2e-3) + (a - 2e-3) + (a - 1e-3) + I * (2e-3 + 2e-3 + 1e-3 + a);
    double u = 47.0 / 128.0;
    CHECK(close_rel(combined_1f1b_unpaired(&l, 64), u, 1e-12), "16 stages x 2 chunks, 64 micro-batches: %.4f unpaired",
          combined_1f1b_unpaired(&l, 64));
    double want = (1 - u) * paired + u * 4.0 * a, got = moe_exposed(&m, &l, &hw, 2.0, &c, 64);
    CHECK(close_rel(got, want, 1e-12), "combined 1F1B: %.4f ms exposed, by hand %.4f (of %.4f without overlap)", 1e3 * got,
          1e3 * want, 4e3 * a);
    CHECK(combined_1f1b_unpaired(&l, 16) == 1.0, "a warm-up longer than the step pairs nothing");
    CHECK(close_rel(in_flight_micro_batches(&l, 0, 64), 24.0, 1e-12), "one more micro-batch in the warm-up: %.2f",
          in_flight_micro_batches(&l, 0, 64));
    l.pp = 1, l.dp = 2048, l.schedule = SCHEDULE_1F1B, l.virtual_stages = 1;
    CHECK(close_rel(combined_1f1b_unpaired(&l, 8), 1.0 / 8.0, 1e-12) && in_flight_micro_batches(&l, 0, 8) == 2.0,
          "no pipeline: the first forward unpaired, two micro-batches in flight");
}

/* DualPipe's bubble over 1F1B's (DeepSeek-V3, Table 2): with F = 1, B = 2,
 * W = 1 on 16 stages, 7 (F + 2B - 3W) / (15 (F + B)) = 14/45; recomputing
 * the forward (R = 1) makes a backward chunk 3: 7 (1 + 6 - 3) / (15 x 4). */
static void test_dualpipe_bubble(void) {
    CHECK(fabs(dualpipe_bubble_share(16, 1, 2, 0) - 14.0 / 45.0) < 1e-12, "DualPipe, 16 stages: %.6f of 1F1B's bubble",
          dualpipe_bubble_share(16, 1, 2, 0));
    CHECK(fabs(dualpipe_bubble_share(16, 1, 2, 1) - 28.0 / 60.0) < 1e-12, "with recomputation: %.6f",
          dualpipe_bubble_share(16, 1, 2, 1));
    CHECK(dualpipe_bubble_share(1, 1, 2, 0) == 1.0, "no pipeline: nothing to scale");
}

/* Expert tensor parallelism 1 under tp 2 (Megatron-Bridge's DeepSeek-V3
 * recipe: TP 2, EP 64, ETP 1 on 1024 GPUs, PP 8): each rank dispatches the
 * T / 2 tokens sequence parallelism left it, its 4 experts are whole
 * (f = 2048, not 1024), its EP group is 64 adjacent ranks (8 per node), and
 * the expert gradients' group is tp x dp / ep = 2 ranks. */
static void test_expert_tp(void) {
    PlanInput in = {0};
    in.model = deepseek_v3();
    in.model.moe_node_limit = 0;
    in.fleet.kinds = 1;
    in.fleet.hw[0] = h800();
    in.fleet.count[0] = 1024;
    in.precision = PREC_BF16;
    in.attention = ATTN_FLASH;
    in.batch = plan_batch_constant(8192.0 * 4096);
    in.total_tokens = 1e12;
    in.reserve_bytes = -1;
    Layout l = layout_default();
    l.tp = 2, l.pp = 8, l.dp = 64, l.ep = 64, l.etp = 1, l.sequence_parallel = true, l.rank_order = ORDER_TP_CP_EP_DP_PP;
    char why[256];
    CHECK(layout_check(&in, &l, why, sizeof why), "TP 2, EP 64, ETP 1: %s", why);
    Group g = placement_ep(&l, 8);
    CHECK(g.n == 64 && g.per_node == 8 && layout_expert_dp(&l) == 2, "EP group %d x %d per node, expert-data %d", g.n,
          g.per_node, layout_expert_dp(&l));
    const Hardware *hw = &in.fleet.hw[0];
    LayerCompute c = layer_compute(&in.model, &l, hw, in.precision, in.attention);
    double rows = 2048.0 * 8 * 64 / 256; /* per expert: T/2 tokens x top-8 from each of 64 ranks over 256 experts */
    double down = gemm_time(hw, in.precision, rows, 7168, 2048, 4);
    CHECK(close_rel(c.linear.down, down, 1e-12), "experts whole: down %.4f ms, by hand %.4f", 1e3 * c.linear.down, 1e3 * down);
    double a2a = moe_alltoall_time(&in.model, &l, hw, 2.0, 4096);
    double expected = 63 * 6e-6 + 7.0 * (2.0 * 2048 * 7168) / (50e9 * 0.9);
    CHECK(close_rel(a2a, expected, 1e-12), "ETP 1 dispatches T/2 tokens: %.4f ms, by hand %.4f", 1e3 * a2a, 1e3 * expected);
    StageShape s = {8, false, false, 1};
    double dense, expert;
    stage_params(&in.model, &l, &s, &dense, &expert);
    CHECK(close_rel(expert, 8.0 * model_layer_expert_params(&in.model) / 64, 1e-12), "expert weights split over ep only");
    l.rank_order = ORDER_TP_CP_PP_DP;
    CHECK(!layout_check(&in, &l, why, sizeof why) && strstr(why, "--etp"), "ETP below TP needs Megatron's order: %s", why);
    l.rank_order = ORDER_TP_CP_EP_DP_PP, l.etp = 3;
    CHECK(!layout_check(&in, &l, why, sizeof why) && strstr(why, "expert tensor-parallel degree 3") && strstr(why, "--etp"), "ETP must divide TP: %s",
          why);
    l.etp = 1, l.ep_overlap = EP_OVERLAP_SHARED, in.model.shared_experts = 0;
    CHECK(!layout_check(&in, &l, why, sizeof why) && strstr(why, "--shared-experts"), "shared overlap needs shared experts: %s",
          why);
}

/* The rank order when none is given (search_space_all; issue 47, round 15's
 * cause C): Mixtral 8x7B on 64 H100s with PP 4 and EP 8 pinned. Llama 3's
 * tp-cp-pp-dp would put the EP 8 group's ranks 4 apart (2 per node); the
 * default for an expert-parallel layout is Megatron-core's tp-cp-ep-dp-pp
 * (parallel_state.initialize_model_parallel's order), where EP 8 fills one
 * node. The same job as a dense model keeps the engine's and Llama 3's order. */
static void test_default_rank_order(void) {
    ModelPreset mp;
    PlanInput in = {0};
    CHECK(model_preset("mixtral-8x7b", &mp), "mixtral-8x7b preset");
    in.model = mp.shape;
    in.fleet.kinds = 1;
    CHECK(hardware_preset("h100-sxm", &in.fleet.hw[0]), "h100-sxm preset");
    in.fleet.count[0] = 64;
    in.precision = PREC_BF16;
    in.attention = ATTN_FLASH;
    in.batch = plan_batch_constant(256.0 * in.model.seq_len);
    in.total_tokens = 1e11;
    in.reserve_bytes = -1;
    SearchSpace space = search_space_all(1);
    space.tp = 1, space.pp = 4, space.ep = 8, space.micro_batch = 1;
    PlanResult top[1];
    SearchStats stats;
    CHECK(plan_search(&in, &space, top, &stats) == 1, "an EP 8 layout fits");
    const Layout *l = &top[0].layout;
    Group g = placement_ep(l, 8);
    CHECK(l->ep == 8 && l->rank_order == ORDER_TP_CP_EP_DP_PP && g.n == 8 && g.per_node == 8,
          "EP %d default order %s: EP group %d, %d per node (want Megatron-core's order, the group in one node)", l->ep,
          rank_order_name(l->rank_order), g.n, g.per_node);
    in.model.experts = 1, in.model.top_k = 1;
    space.ep = 0;
    CHECK(plan_search(&in, &space, top, &stats) == 1, "the dense layout fits");
    CHECK(top[0].layout.ep == 1 && top[0].layout.rank_order == ORDER_TP_CP_PP_DP, "dense default order %s, want tp-cp-pp-dp",
          rank_order_name(top[0].layout.rank_order));
}

int main(void) {
    plan_name_subjects(); /* reasons end with the flags, as `batchscale plan` prints them */
    test_shared_experts();
    test_token_copies();
    test_alltoall_time();
    test_overlap();
    test_dualpipe_bubble();
    test_combined_1f1b();
    test_expert_tp();
    test_default_rank_order();
    if (failures) {
        fprintf(stderr, "%d planner MoE checks failed\n", failures);
        return 1;
    }
    printf("all planner MoE checks passed\n");
    return 0;
}
