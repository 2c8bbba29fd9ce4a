/* layout.h: how a training job is split over GPUs: tensor (tp), pipeline
 * (pp), data (dp), context (cp) and expert (ep) parallelism, ZeRO stage,
 * micro-batch, activation recomputation and pipeline schedule.
 *
 * Rank order (placement.h): by default, for a dense layout, as the engine's
 * grid (parallel/grid.h) and Llama 3: tp varies fastest, then cp, then pp,
 * then dp, so a TP group sits inside one node; Megatron-LM's order puts ep
 * next to cp and pp outermost (tp-cp-ep-dp-pp), the default for an
 * expert-parallel layout (rank_order_default). This file holds the vocabulary and the
 * names; the checks that need the model live in plan.c. */
#ifndef BS_PLAN_LAYOUT_H
#define BS_PLAN_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

/* SELECTIVE is Korthikanti et al.'s (the attention core), FULL the whole
 * block; OP is torchtitan's per-op selective checkpointing (ac mode
 * "selective", selective_ac_option "op"; op_checkpoint.h), which the search
 * does not try: it is a framework's policy, given with --recompute op. */
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_OP } Recompute;
/* How attention runs: FULL materializes all s x s scores (Megatron 2021-22
 * fused softmax), CAUSAL materializes only the lower triangle (this
 * project's CPU kernel), FLASH is a fused kernel that stores no scores
 * (cuDNN's or FlashAttention-3's generation on Hopper), FLASH2 the same
 * with FlashAttention-2's kernels (compute.h: slower on Hopper only). */
typedef enum { ATTN_FULL, ATTN_CAUSAL, ATTN_FLASH, ATTN_FLASH2 } AttentionImpl;
/* FLASH or FLASH2: fused, no scores stored. */
bool attention_is_fused(AttentionImpl a);
/* The schedules the cost model prices. Its own enum, not parallel/schedule.h's
 * PipeSchedule, because plan/ depends on nothing but core/. */
typedef enum { SCHEDULE_1F1B, SCHEDULE_GPIPE, SCHEDULE_INTERLEAVED } PlanSchedule;
/* How context parallelism moves keys and values: RING passes one K/V block
 * to the next rank per step, overlapped with the attention of the block in
 * hand; ALLGATHER gathers the whole sequence's K and V before attention and
 * reduce-scatters their gradients after it, exposed (Llama 3, section 3.3.2). */
typedef enum { CP_RING, CP_ALLGATHER } CpAlgo;
/* Which parallel dimension varies fastest over the ranks, after tp (always
 * first): TP_CP_PP_DP is the engine's grid and Llama 3's order (section
 * 3.3.2: "[TP, CP, PP, DP]"); TP_CP_EP_DP_PP is Megatron-core's default
 * (parallel_state.initialize_model_parallel, order="tp-cp-ep-dp-pp"), where
 * expert parallelism is carved out of the data-parallel ranks next to cp and
 * the pipeline is outermost. */
typedef enum { ORDER_TP_CP_PP_DP, ORDER_TP_CP_EP_DP_PP } RankOrder;
/* What the expert-parallel all-to-all runs beside (moe_comm.h): OFF nothing
 * (exposed); SHARED the shared experts' MLP of the same micro-batch
 * (DeepSeek-V2, section 3.1.3); DUALPIPE the compute of another
 * micro-batch's chunk on the same stage, as DeepSeek-V3's DualPipe pairs a
 * forward chunk with a backward one (section 3.2.1), which also hides the
 * pipeline sends; COMBINED_1F1B Megatron-core's combined 1F1B
 * (--overlap-moe-expert-parallel-comm): the forward of micro-batch i+1
 * paired with the backward of micro-batch i, layer by layer, each
 * all-to-all beside one compute part of the other (moe_comm.h). */
typedef enum { EP_OVERLAP_OFF, EP_OVERLAP_SHARED, EP_OVERLAP_DUALPIPE, EP_OVERLAP_COMBINED_1F1B } EpOverlap;

typedef struct {
    int tp, pp, dp, cp, ep;
    int zero;             /* ZeRO stage 0..3, sharded over the dp x cp ranks */
    int micro_batch;      /* sequences per micro-batch per pipeline */
    Recompute recompute;
    PlanSchedule schedule;
    int virtual_stages;   /* v: model chunks per pipeline stage (interleaved) */
    bool sequence_parallel; /* Korthikanti et al.: shard norms/dropout over tp */
    bool overlap;         /* DP communication overlapped with compute */
    CpAlgo cp_algo;       /* context parallelism's K/V exchange (cp > 1) */
    bool tp_overlap;      /* TP collectives pipelined with their GEMMs (tp_overlap.h) */
    bool pp_overlap;      /* interleaved schedule: pipeline sends beside compute (Megatron's overlap_p2p_comm) */
    RankOrder rank_order;
    EpOverlap ep_overlap; /* the all-to-all beside compute (ep > 1) */
    int etp;              /* expert tensor parallelism (0: tp). Megatron-core's expert_tensor_parallel_size:
                           * below tp, the etp x ep x expert-data ranks of a stage are its tp x cp x dp ranks
                           * regrouped, etp fastest (Megatron's rank order), and each rank dispatches the
                           * T etp / tp tokens its etp group holds (sequence parallelism shards them) */
} Layout;

/* tp = pp = dp = cp = ep = 1, ZeRO 1, micro-batch 1, no recomputation,
 * 1F1B, sequence parallel and overlap on, TP overlap off, the engine's rank
 * order. */
Layout layout_default(void);
/* Model chunks per pipeline stage the schedule runs: v when interleaved, else 1. */
int layout_chunks(const Layout *l);
int layout_gpus(const Layout *l);
/* The expert weights' tensor-parallel split: etp, or tp when unset. */
int layout_expert_tp(const Layout *l);
/* Ranks of a stage that hold the same experts (the expert gradients' group):
 * tp x cp x dp / (etp x ep). */
int layout_expert_dp(const Layout *l);

const char *recompute_name(Recompute r);
const char *plan_schedule_name(PlanSchedule s);
const char *attention_name(AttentionImpl a);
const char *cp_algo_name(CpAlgo c);
const char *rank_order_name(RankOrder o);
/* The rank order when neither the user nor a stack preset sets one, the one
 * place that decides it: an expert-parallel layout (ep > 1) gets
 * Megatron-core's tp-cp-ep-dp-pp (megatron/core/parallel_state.py,
 * initialize_model_parallel's default order="tp-cp-ep-dp-pp"; DeepSpeed-MoE
 * and torchtitan likewise put an expert group on adjacent ranks), which keeps
 * an EP group of up to a node's GPUs over tp x cp inside the node; a dense
 * layout keeps the engine's and Llama 3's tp-cp-pp-dp, which has no EP
 * dimension and would stride an EP group tp x cp x pp ranks apart. */
RankOrder rank_order_default(int ep);
const char *ep_overlap_name(EpOverlap o);
/* The names above, NULL-terminated, in enum order (the command line's words). */
extern const char *const RECOMPUTE_WORDS[];
extern const char *const PLAN_SCHEDULE_WORDS[];
extern const char *const CP_ALGO_WORDS[];
extern const char *const RANK_ORDER_WORDS[];
extern const char *const EP_OVERLAP_WORDS[];
/* Parse a name; false if unknown. */
bool recompute_parse(const char *s, Recompute *out);
bool plan_schedule_parse(const char *s, PlanSchedule *out);
bool attention_parse(const char *s, AttentionImpl *out);
bool cp_algo_parse(const char *s, CpAlgo *out);
bool rank_order_parse(const char *s, RankOrder *out);
bool ep_overlap_parse(const char *s, EpOverlap *out);

/* "tp8 pp16 dp128 cp1 mb1 z1 rc=none 1f1b" (ep and v only when > 1; "cp16
 * allgather" for the all-gather exchange; " tp-overlap", " pp-overlap" when on,
 * " ep-overlap=shared|dualpipe" when not off and
 * " order=tp-cp-ep-dp-pp" for Megatron's rank order, at the end). */
void layout_format(const Layout *l, char *buf, size_t n);

#endif
