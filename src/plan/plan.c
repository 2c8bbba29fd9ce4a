/* plan.c: one layout of one job, evaluated (see plan.h).
 *
 * The step of a pipeline with m micro-batches and v virtual stages is
 *   m x (slowest stage's time per micro-batch) + bubble
 *   + exposed data-parallel communication + optimizer step,
 * where bubble = (sum of all stage times - slowest) / v, which is the
 * (p-1)/m and (p-1)/(v m) fractions of Narayanan et al. 2021 for balanced
 * stages. A stage's time per micro-batch is its blocks' forward, backward and
 * recomputation plus their exposed TP, CP and EP communication, plus its
 * point-to-point sends (pipeline_engine.h: 2 v per micro-batch in Megatron,
 * DeepSpeed's four blocking ones and TP all-gathers) and, on the last stage, the
 * output layer. Stragglers: a synchronous step waits for the slowest of N
 * GPUs; with per-GPU step times of coefficient of variation c, the expected
 * maximum of N normal draws is about c sqrt(2 ln N) above the mean. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>

#include "plan/comms.h"
#include "plan/compute.h"
#include "plan/moe_comm.h"
#include "plan/op_checkpoint.h"
#include "plan/placement.h"
#include "plan/tp_overlap.h"
#include "core/reason.h"

#define GIB 1073741824.0

int fleet_gpus(const Fleet *f) {
    int n = 0;
    for (int k = 0; k < f->kinds; k++) n += f->count[k];
    return n;
}

double plan_reserve(const PlanInput *in, const Hardware *hw) {
    return in->reserve_bytes >= 0 ? in->reserve_bytes : GIB + 0.05 * hw->hbm_bytes;
}

double usable_memory(const PlanInput *in, const Hardware *hw) { return hw->hbm_bytes - plan_reserve(in, hw); }

static int micro_batches_at(const PlanInput *in, const Layout *l, double batch_tokens) {
    return (int)llround(batch_tokens / in->model.seq_len / ((double)l->dp * l->micro_batch));
}

static bool batch_splits(const PlanInput *in, const Layout *l, double batch_tokens, char *why, size_t n) {
    double seqs = batch_tokens / in->model.seq_len;
    if (seqs < 1 || fabs(seqs - round(seqs)) > 1e-9 * seqs) {
        return bs_reason(why, n, "seq_len", "a global batch of %.0f tokens is not a whole number of %d-token sequences: use a multiple of the sequence length",
                         batch_tokens, in->model.seq_len);
    }
    double per = (double)l->dp * l->micro_batch;
    if (fmod(round(seqs), per) != 0) {
        return bs_reason(why, n, "dp micro_batch", "a global batch of %.0f sequences does not split into dp %d x micro-batch %d: choose them so that dp x micro-batch divides %.0f",
                         round(seqs), l->dp, l->micro_batch, round(seqs));
    }
    return true;
}

/* The expert-parallel fields: ep and etp against the model and the grid,
 * and what each --ep-overlap needs. */
static bool moe_layout_ok(const ModelShape *m, const Layout *l, char *why, size_t n) {
    if (l->ep > 1 && !model_is_moe(m)) {
        return bs_reason(why, n, "ep experts", "expert parallelism of degree %d needs a mixture-of-experts model (more than 1 expert)", l->ep);
    }
    int etp = layout_expert_tp(l);
    if (etp != l->tp && (!model_is_moe(m) || etp < 1 || l->tp % etp || m->ffn % etp || l->rank_order != ORDER_TP_CP_EP_DP_PP)) {
        return bs_reason(why, n, "etp tp ffn rank_order", "an expert tensor-parallel degree %d needs a mixture-of-experts model, must divide the tensor-parallel degree %d and the MLP width, and needs the rank order tp-cp-ep-dp-pp",
                         etp, l->tp);
    }
    if (l->ep > 1 && (m->experts % l->ep || (etp == l->tp ? (l->dp * l->cp) % l->ep : (l->tp * l->cp * l->dp) % (etp * l->ep)))) {
        if (etp == l->tp)
            return bs_reason(why, n, "ep experts dp cp", "the expert-parallel degree %d must divide the %d experts and dp x cp = %d", l->ep, m->experts, l->dp * l->cp);
        return bs_reason(why, n, "ep experts etp", "the expert-parallel degree %d must divide the %d experts, and etp x ep = %d the stage's tp x cp x dp = %d", l->ep,
                         m->experts, etp * l->ep, l->tp * l->cp * l->dp);
    }
    if (l->ep_overlap == EP_OVERLAP_DUALPIPE && l->pp > 1 && (l->pp % 2 || l->schedule != SCHEDULE_1F1B)) {
        return bs_reason(why, n, "ep_overlap pp schedule", "the dualpipe expert overlap is its own pipeline schedule: it needs an even number of stages and the 1f1b schedule (DualPipe feeds micro-batches from both ends)");
    }
    if (l->ep_overlap == EP_OVERLAP_COMBINED_1F1B && ((l->pp > 1 && (l->schedule != SCHEDULE_INTERLEAVED || l->virtual_stages < 2)) ||
                                                     l->recompute == RECOMPUTE_FULL)) {
        return bs_reason(why, n, "ep_overlap schedule virtual_stages recompute", "the combined-1f1b expert overlap extends the interleaved schedule: with more than 1 stage it needs the interleaved schedule and 2 or more virtual stages, and no full recomputation (Megatron-core rejects both)");
    }
    if (l->ep_overlap == EP_OVERLAP_SHARED && m->shared_experts < 1) {
        return bs_reason(why, n, "ep_overlap shared_experts", "the shared expert overlap needs 1 or more shared experts (the all-to-all runs beside the shared experts' MLP)");
    }
    return true;
}

/* The layer split names whole layers on every stage (layer_split.h). */
static bool layer_split_ok(const PlanInput *in, const Layout *l, char *why, size_t n) {
    if (!in->split.even && (in->split.first > 0 || in->split.last > 0)) {
        return bs_reason(why, n, "first_stage_layers last_stage_layers layer_split", "the first and last stages' layers fix the split: split evenly");
    }
    int first, middle, last, chunks = layout_chunks(l);
    return !in->split.even || layer_split_even(&in->split, in->model.layers, l->pp, chunks, &first, &middle, &last, why, n);
}

bool layout_check(const PlanInput *in, const Layout *l, char *why, size_t n) {
    const ModelShape *m = &in->model;
    if (in->zero1_allreduce && l->zero != 1) {
        return bs_reason(why, n, "zero1_reduce zero", "the ZeRO-1 all-reduce of gradients is a ZeRO-1 optimizer's (DeepSpeed's BF16_Optimizer): use ZeRO stage 1");
    }
    if (in->pipe_engine == PIPE_ENGINE_DEEPSPEED && l->pp > 1 && l->schedule != SCHEDULE_1F1B) {
        return bs_reason(why, n, "pipeline_engine schedule", "DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule: use the 1f1b schedule");
    }
    int gpus = fleet_gpus(&in->fleet), model_par = l->tp * l->cp * l->pp;
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->cp < 1 || l->ep < 1 || l->micro_batch < 1) {
        return bs_reason(why, n, "tp pp dp cp ep micro_batch", "the tensor-, pipeline-, data-, context- and expert-parallel degrees and the micro-batch must be >= 1");
    }
    if (layout_gpus(l) != gpus) {
        if (gpus % model_par == 0)
            return bs_reason(why, n, "tp cp pp dp gpus", "tp %d x cp %d x pp %d x dp %d = %d GPUs, but the fleet has %d: use dp %d or change the fleet",
                             l->tp, l->cp, l->pp, l->dp, layout_gpus(l), gpus, gpus / model_par);
        return bs_reason(why, n, "tp cp pp", "tp %d x cp %d x pp %d = %d does not divide the fleet's %d GPUs: change tp, cp or pp",
                         l->tp, l->cp, l->pp, model_par, gpus);
    }
    if (m->heads % l->tp) {
        return bs_reason(why, n, "tp heads", "the tensor-parallel degree %d does not divide the %d attention heads: use one that divides the number of heads", l->tp, m->heads);
    }
    if (m->kv_heads % l->tp && l->tp % m->kv_heads) {
        return bs_reason(why, n, "tp kv_heads", "the tensor-parallel degree %d and the %d key-value heads: one must divide the other", l->tp, m->kv_heads);
    }
    if (m->ffn % l->tp) {
        return bs_reason(why, n, "tp ffn", "the tensor-parallel degree %d does not divide the MLP width %d: use one that divides it", l->tp, m->ffn);
    }
    if (m->seq_len % l->cp) {
        return bs_reason(why, n, "cp seq_len", "the context-parallel degree %d does not divide the sequence length %d", l->cp, m->seq_len);
    }
    if (l->pp > m->layers) {
        return bs_reason(why, n, "pp layers", "%d pipeline stages exceed the %d layers: every pipeline stage needs at least one layer", l->pp, m->layers);
    }
    if (l->tp_overlap && l->tp > 1 && !l->sequence_parallel) {
        return bs_reason(why, n, "tp_overlap sequence_parallel", "the tensor-parallel overlap needs sequence parallelism (the userbuffer overlap pipelines the sequence-parallel all-gathers and reduce-scatters)");
    }
    if (l->zero < 0 || l->zero > 3) {
        return bs_reason(why, n, "zero", "the ZeRO stage must be 0, 1, 2 or 3");
    }
    if (!moe_layout_ok(m, l, why, n)) return false;
    if (l->recompute == RECOMPUTE_OP && (model_is_moe(m) || !attention_is_fused(in->attention))) {
        return bs_reason(why, n, "recompute experts attention", "per-op recomputation (torchtitan's policy) is priced for dense blocks with fused attention: drop the experts or use flash or flash2 attention");
    }
    for (int i = 0; i < in->batch.n; i++)
        if (!batch_splits(in, l, in->batch.batch[i], why, n)) return false;
    if (!layer_split_ok(in, l, why, n)) return false;
    if (l->schedule == SCHEDULE_INTERLEAVED) {
        if (l->pp < 2 || l->virtual_stages < 2) {
            return bs_reason(why, n, "schedule pp virtual_stages", "the interleaved schedule needs 2 or more pipeline stages and 2 or more virtual stages");
        }
        if (l->virtual_stages > m->layers / l->pp) {
            return bs_reason(why, n, "virtual_stages", "%d virtual stages exceed the %d layers per pipeline stage", l->virtual_stages,
                             m->layers / l->pp);
        }
        for (int i = 0; i < in->batch.n; i++) {
            int mb = micro_batches_at(in, l, in->batch.batch[i]);
            if (mb % l->pp) {
                return bs_reason(why, n, "pp micro_batch", "interleaving needs the micro-batches per step (%d) to be a multiple of the %d pipeline stages: change the micro-batch or the batch",
                                 mb, l->pp);
            }
        }
    }
    if (in->fleet.kinds > 1)
        for (int k = 0; k < in->fleet.kinds; k++)
            if (((long long)l->pp * in->fleet.count[k]) % gpus) {
                return bs_reason(why, n, "pp hardware", "mixed fleet: %d pipeline stages cannot give %s (%d of %d GPUs) whole stages: choose pp so that pp x %d / %d is whole",
                                 l->pp, in->fleet.hw[k].name, in->fleet.count[k], gpus, in->fleet.count[k], gpus);
            }
    return true;
}

/* What one block costs on one kind of GPU, per micro-batch. */
typedef struct {
    double compute, tp, cp, ep; /* seconds: compute, exposed communication */
    double forward, backward;   /* compute parts, for overlap windows (backward with recomputation) */
    double recompute;           /* the recomputed part of backward */
} BlockCost;

static Group tp_group(const Layout *l, const Hardware *hw) { return placement_tp(l, hw->gpus_per_node); }

/* Exposed context-parallel time of one block per micro-batch. The local K
 * and V (2 e T kv / t bytes) go to every rank of the CP group.
 *   ring: cp steps, each the attention of the local queries against one K/V
 *     block (1/cp of the layer's attention: the zigzag split gives every step
 *     the same causal work) while the next block is in flight, so a step
 *     takes max(compute of one block, transfer of one K/V block); exposed is
 *     (cp - 1) x max(0, transfer - compute) plus the interference of the
 *     hidden part. Backward carries K/V and their gradients (twice the bytes)
 *     against the backward attention; full recomputation repeats the forward.
 *   allgather: the K/V all-gather before attention, and in backward the
 *     all-gather again and the reduce-scatter of dK/dV, all exposed. */
static double cp_exposed(const PlanInput *in, const Layout *l, const Hardware *hw, const LayerCompute *c) {
    const ModelShape *m = &in->model;
    double e = precision_activation_bytes(in->precision);
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double kv_bytes = 2.0 * e * T * model_kv_dim(m) / l->tp;
    double forwards = l->recompute == RECOMPUTE_FULL ? 2.0 : 1.0;
    if (l->cp_algo == CP_ALLGATHER) {
        Group g = placement_cp(l, hw->gpus_per_node);
        double gather = collective_time(hw, COLL_ALLGATHER, l->cp * kv_bytes, g, NULL);
        return (forwards + 2.0) * gather;
    }
    double hop = p2p_time(hw, kv_bytes, l->tp * l->cp <= hw->gpus_per_node);
    return forwards * pipelined_cost(l->cp, hop, c->attention / l->cp) +
           pipelined_cost(l->cp, 2.0 * hop, c->attention_backward / l->cp);
}

static BlockCost block_cost(const PlanInput *in, const Layout *l, const Hardware *hw, int micro_batches) {
    const ModelShape *m = &in->model;
    BlockCost b = {0};
    LayerCompute c = layer_compute(m, l, hw, in->precision, in->attention);
    b.compute = c.forward + c.backward + c.recompute;
    b.forward = c.forward;
    b.backward = c.backward + c.recompute;
    b.recompute = c.recompute;
    double e = precision_activation_bytes(in->precision);
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    b.tp = tp_exposed(l, collective_time(hw, COLL_ALLGATHER, e * T * m->hidden, tp_group(l, hw), NULL), &c.linear, hw->sms);
    if (l->cp > 1) b.cp = cp_exposed(in, l, hw, &c);
    if (l->ep > 1) b.ep = moe_exposed(m, l, hw, e, &c, micro_batches); /* dispatch and combine, forward and backward */
    return b;
}

/* A pipeline stage role: the regular stages of one kind, or the last stage. */
typedef struct {
    int kind, count, position; /* fleet kind, how many such stages, pipeline position of the first */
    bool first, last;
    double per_layer, overhead; /* seconds per micro-batch: per block, fixed (p2p, output layer) */
    int cap;                    /* most blocks that fit in memory (-1: not even the fixed part) */
    int layers;                 /* assigned blocks on the fullest stage of this role */
    int short_by_one;           /* stages of this role holding layers - 1 */
} Role;

static StageShape role_shape(const Layout *l, const Role *r, int layers, int micro_batches) {
    StageShape s = {layers, r->first, r->last, in_flight_micro_batches(l, r->position, micro_batches)};
    return s;
}

static double role_memory(const PlanInput *in, const Layout *l, const Role *r, int layers, int micro_batches) {
    const Hardware *hw = &in->fleet.hw[r->kind];
    StageShape s = role_shape(l, r, layers, micro_batches);
    return stage_memory(&in->model, l, in->attention, in->precision, &s, hw->hbm_bytes, plan_reserve(in, hw)).total;
}

/* Memory grows linearly in blocks beyond the first (the first may add a
 * recomputation working set), so two evaluations give the cap. */
static int blocks_that_fit(const PlanInput *in, const Layout *l, const Role *r, int micro_batches) {
    double cap = in->fleet.hw[r->kind].hbm_bytes;
    double m0 = role_memory(in, l, r, 0, micro_batches), m1 = role_memory(in, l, r, 1, micro_batches);
    double m2 = role_memory(in, l, r, 2, micro_batches);
    if (m1 > cap) return m0 <= cap && r->last ? 0 : -1;
    double slope = m2 - m1;
    if (slope <= 0) return in->model.layers;
    double extra = floor((cap - m1) / slope);
    return extra + 1 > in->model.layers ? in->model.layers : (int)extra + 1;
}

static int role_blocks_within(const Role *r, double target, bool use_caps) {
    double room = (target - r->overhead) / r->per_layer;
    int j = room < 0 ? -1 : (int)floor(room + 1e-9);
    if (use_caps && j > r->cap) j = r->cap;
    return j;
}

/* Smallest slowest-stage time at which the roles hold all blocks; false if
 * none (with caps: the model does not fit). Fills each role's layers. */
static bool balance(Role *roles, int n_roles, int layers, bool use_caps) {
    double best = INFINITY;
    for (int i = 0; i < n_roles; i++)
        for (int j = roles[i].last ? 0 : 1; j <= layers; j++) {
            double target = j * roles[i].per_layer + roles[i].overhead;
            if (target >= best) break;
            long long held = 0;
            bool ok = true;
            for (int q = 0; q < n_roles && ok; q++) {
                int b = role_blocks_within(&roles[q], target, use_caps);
                ok = b >= (roles[q].last ? 0 : 1);
                held += (long long)roles[q].count * b;
            }
            if (ok && held >= layers) best = target;
        }
    if (!isfinite(best)) return false;
    long long held = 0;
    for (int q = 0; q < n_roles; q++) {
        roles[q].layers = role_blocks_within(&roles[q], best, use_caps);
        roles[q].short_by_one = 0;
        held += (long long)roles[q].count * roles[q].layers;
    }
    /* Give back the surplus: the last stage first, then one block at a time
     * from the stages with the dearest blocks. */
    long long surplus = held - layers;
    for (int q = 0; q < n_roles && surplus > 0; q++)
        if (roles[q].last) {
            int give = surplus < roles[q].layers ? (int)surplus : roles[q].layers;
            roles[q].layers -= give;
            surplus -= give;
        }
    while (surplus > 0) {
        int dear = -1;
        for (int q = 0; q < n_roles; q++)
            if (!roles[q].last && roles[q].layers > 1 && (dear < 0 || roles[q].per_layer > roles[dear].per_layer)) dear = q;
        if (dear < 0) break;
        long long room = roles[dear].count - roles[dear].short_by_one;
        long long give = surplus < room ? surplus : room;
        roles[dear].short_by_one += (int)give;
        surplus -= give;
        if (roles[dear].short_by_one == roles[dear].count) roles[dear].layers--, roles[dear].short_by_one = 0;
    }
    return true;
}

/* A framework's fixed split (layer_split.h): the first stage, the last and
 * the middle ones hold what the rule gives them; false if a role's layers
 * exceed what fits. */
static bool assign_even(const PlanInput *in, const Layout *l, Role *roles, int n_roles) {
    int first, middle, last, chunks = layout_chunks(l);
    char why[256];
    /* layout_check has accepted this split */
    layer_split_even(&in->split, in->model.layers, l->pp, chunks, &first, &middle, &last, why, sizeof why);
    bool fits = true;
    for (int q = 0; q < n_roles; q++) {
        Role *r = &roles[q];
        r->layers = r->last ? last : r->position == 0 ? first : middle;
        r->short_by_one = 0;
        if (r->layers > r->cap) fits = false;
    }
    return fits;
}

static double role_time(const Role *r) { return r->layers * r->per_layer + r->overhead; }

/* One all-reduce of a stage's parameters at `bytes` per parameter over its
 * data-parallel group (dp x cp ranks), and of MoE experts over their own
 * smaller group: the unit the data-parallel collectives are priced in (a
 * reduce-scatter or an all-gather is half of it). */
static double dp_group_bytes_time(const PlanInput *in, const Layout *l, const Hardware *hw, double dense, double expert,
                                  double bytes, CollectiveAlgo *algo) {
    bool moe = model_is_moe(&in->model);
    int gpn = hw->gpus_per_node;
    double t = collective_time(hw, COLL_ALLREDUCE, (moe ? dense : dense + expert) * bytes, placement_dp(l, gpn), algo);
    if (moe && expert > 0) t += collective_time(hw, COLL_ALLREDUCE, expert * bytes, placement_expert_dp(l, gpn), NULL);
    return t;
}

/* ZeRO-3 (FSDP) per micro-batch: every layer's weights gathered for the
 * forward and again for the backward, its gradients reduce-scattered after
 * it. FSDP gathers one layer ahead (PyTorch FSDP's forward and backward
 * prefetch, FSDP2 and Megatron FSDP alike; Zhao et al. 2023, "PyTorch FSDP",
 * on backward and forward prefetching), so each collective hides behind its
 * neighbour's compute, except at the ends: the first layer's forward
 * gather, the first backward gather and the last layer's reduce-scatter
 * have no compute beside them.
 * With `layers` equal units those three are one layer's share, exposed; the
 * rest costs the overlap interference. gather and reduce are one all-reduce
 * of the stage's weights and of its gradients (their byte widths differ when
 * gradients are reduced in FP32). */
static double zero3_exposed(double gather, double reduce, int layers, double compute, bool overlap) {
    double total = gather + 0.5 * reduce; /* two all-gathers and a reduce-scatter */
    if (!overlap || layers < 1) return total;
    double edges = total / layers;
    return edges + overlapped_cost(total - edges, compute);
}

typedef struct { /* what the step time at any micro-batch count is made of */
    double slowest, bubble_sum, v;
    double dp_fixed, zero3_per_mb, optimizer, straggle;
} StepParts;

static void step_at(const StepParts *sp, int micro_batches, StepTime *t, double compute_mb, double tp_mb, double cp_mb,
                    double ep_mb, double pp_mb) {
    double m = micro_batches;
    t->compute = m * compute_mb;
    t->tp_comm = m * tp_mb;
    t->cp_comm = m * cp_mb;
    t->ep_comm = m * ep_mb;
    t->pp_comm = m * pp_mb;
    t->bubble = sp->bubble_sum / sp->v;
    t->dp_comm = sp->dp_fixed + m * sp->zero3_per_mb;
    t->optimizer = sp->optimizer;
    double base = t->compute + t->tp_comm + t->cp_comm + t->ep_comm + t->pp_comm + t->bubble + t->dp_comm + t->optimizer;
    t->straggler = base * sp->straggle;
    t->step = base + t->straggler;
}

/* The pipeline's roles in pipeline order: per kind its first stage (the
 * one holding most activations) and the rest of its regular stages (the
 * slower kind first, so the output layer sits on the faster one), then on
 * the last kind the output stage. Returns how many; out->kind[].stages set. */
static int pipeline_roles(const PlanInput *in, const Layout *l, const BlockCost *cost, const double *head,
                          const double *head_tp, const double *p2p, Role *roles, PlanResult *out) {
    const Fleet *f = &in->fleet;
    const int gpus = fleet_gpus(f);
    int order[PLAN_MAX_KINDS] = {0, 1};
    if (f->kinds == 2 && cost[1].compute > cost[0].compute) order[0] = 1, order[1] = 0;
    int n_roles = 0, position = 0;
    for (int i = 0; i < f->kinds; i++) {
        int k = order[i];
        int stages = (int)((long long)l->pp * f->count[k] / gpus);
        bool holds_last = i == f->kinds - 1;
        int regular = stages - (holds_last ? 1 : 0);
        out->kind[k].stages = stages;
        Role base = {.kind = k, .per_layer = cost[k].compute + cost[k].tp + cost[k].cp + cost[k].ep, .overhead = p2p[k]};
        if (regular >= 1) {
            roles[n_roles] = base;
            roles[n_roles].count = 1, roles[n_roles].position = position, roles[n_roles].first = position == 0;
            n_roles++;
        }
        if (regular >= 2) {
            roles[n_roles] = base;
            roles[n_roles].count = regular - 1, roles[n_roles].position = position + 1;
            n_roles++;
        }
        position += regular;
        if (holds_last) {
            roles[n_roles] = base;
            roles[n_roles].count = 1, roles[n_roles].position = l->pp - 1, roles[n_roles].first = l->pp == 1;
            roles[n_roles].last = true;
            roles[n_roles].overhead += head[k] + head_tp[k] + in->model.mtp_layers * (cost[k].cp + cost[k].ep);
            n_roles++;
        }
    }
    return n_roles;
}

/* Data parallelism: each role's gradients, after its last backward: the
 * exposed synchronisation (or ZeRO-3's per micro-batch), the optimizer step
 * and the bytes, into sp and out. */
static void data_parallel_parts(const PlanInput *in, const Layout *l, const BlockCost *cost, const Role *roles,
                                int n_roles, int micro_batches, double v, StepParts *sp, PlanResult *out) {
    const ModelShape *m = &in->model;
    const Fleet *f = &in->fleet;
    double gb = state_bytes(in->precision).grads, wb = state_bytes(in->precision).weights;
    double rb = in->grad_reduce_fp32 ? 4.0 : gb;
    for (int q = 0; q < n_roles; q++) {
        const Hardware *hw = &f->hw[roles[q].kind];
        const BlockCost *c = &cost[roles[q].kind];
        StageShape s = role_shape(l, &roles[q], roles[q].layers, micro_batches);
        double dense, expert;
        stage_params(m, l, &s, &dense, &expert);
        CollectiveAlgo algo;
        double reduce = dp_group_bytes_time(in, l, hw, dense, expert, rb, &algo);
        double gather = rb == wb ? reduce : dp_group_bytes_time(in, l, hw, dense, expert, wb, NULL);
        double bwd = roles[q].layers * c->backward, fwd = roles[q].layers * c->forward;
        double exposed = 0.0;
        if (l->zero >= 3) {
            double per_mb = zero3_exposed(gather, reduce, roles[q].layers, roles[q].layers * c->compute, l->overlap);
            if (per_mb > sp->zero3_per_mb) sp->zero3_per_mb = per_mb;
        } else {
            /* ZeRO 0: the gradients' all-reduce; 1 and 2: their reduce-scatter
             * (or, --zero1-reduce allreduce, a full all-reduce) and the updated
             * weights' all-gather. Stage i finishes its last backward i stages'
             * backward before stage 0: idle time, free for communication; then
             * the overlap window */
            double sync = l->zero >= 1 ? (in->zero1_allreduce ? reduce : 0.5 * reduce) + 0.5 * gather : reduce;
            double slack = roles[q].position * bwd / v;
            double window = l->overlap ? bwd + (l->zero >= 1 ? fwd : 0.0) : 0.0;
            exposed = overlapped_cost(fmax(0.0, sync - slack), window);
        }
        sp->dp_fixed = fmax(sp->dp_fixed, exposed);
        if ((dense + expert) * rb > out->dp_bytes) out->dp_bytes = (dense + expert) * rb, out->dp_algo = algo;
        double opt_params = dense / (l->zero >= 1 ? (double)l->dp * l->cp : 1.0) +
                            expert / (l->zero >= 1 ? (model_is_moe(m) ? (double)layout_expert_dp(l) : (double)l->dp * l->cp) : 1.0);
        double opt = optimizer_time(hw, in->precision, opt_params);
        if (opt > sp->optimizer) sp->optimizer = opt;
    }
}

void plan_evaluate(const PlanInput *in, const Layout *l, PlanResult *out) {
    const ModelShape *m = &in->model;
    const Fleet *f = &in->fleet;
    int gpus = fleet_gpus(f);
    *out = (PlanResult){0};
    out->layout = *l;
    double final_batch = plan_batch_final(&in->batch, in->total_tokens);
    int micro_batches = micro_batches_at(in, l, final_batch);
    double v = layout_chunks(l);
    double e = precision_activation_bytes(in->precision);
    double T = (double)l->micro_batch * m->seq_len / l->cp;

    BlockCost cost[PLAN_MAX_KINDS];
    double head[PLAN_MAX_KINDS], head_tp[PLAN_MAX_KINDS], p2p[PLAN_MAX_KINDS];
    for (int k = 0; k < f->kinds; k++) {
        const Hardware *hw = &f->hw[k];
        cost[k] = block_cost(in, l, hw, micro_batches);
        /* the output layer and, beside the loss, each MTP module: its block, projection and output-layer pass */
        head[k] = head_compute(m, l, hw, in->precision) + mtp_extra_compute(m, l, hw, in->precision) +
                  m->mtp_layers * cost[k].compute;
        head_tp[k] = (1 + m->mtp_layers) * 2.0 * collective_time(hw, COLL_ALLREDUCE, e * T * m->hidden, tp_group(l, hw), NULL) +
                     m->mtp_layers * cost[k].tp;
        bool same_node = f->kinds == 1 && placement_pp_same_node(l, hw->gpus_per_node);
        p2p[k] = l->pp > 1 ? pipeline_sends_per_micro_batch(in->pipe_engine, hw, e * T * m->hidden, tp_group(l, hw), (int)v,
                                                             same_node)
                           : 0.0;
        /* Megatron's overlap_p2p_comm (interleaved): each chunk's sends and
         * receives are posted before the next chunk computes; DualPipe runs
         * them beside the paired chunk */
        if ((l->pp_overlap && l->schedule == SCHEDULE_INTERLEAVED) || l->ep_overlap == EP_OVERLAP_DUALPIPE)
            p2p[k] = overlapped_cost(p2p[k], cost[k].compute * m->layers / l->pp);
    }

    Role roles[2 * PLAN_MAX_KINDS + 1];
    const int n_roles = pipeline_roles(in, l, cost, head, head_tp, p2p, roles, out);
    for (int q = 0; q < n_roles; q++) roles[q].cap = blocks_that_fit(in, l, &roles[q], micro_batches);
    if (in->split.even) {
        out->fits = assign_even(in, l, roles, n_roles);
    } else {
        out->fits = balance(roles, n_roles, m->layers, true);
        if (!out->fits) balance(roles, n_roles, m->layers, false);
    }

    /* Memory: the fullest GPU relative to its capacity. */
    double worst = -1;
    for (int q = 0; q < n_roles; q++) {
        const Hardware *hw = &f->hw[roles[q].kind];
        StageShape s = role_shape(l, &roles[q], roles[q].layers, micro_batches);
        MemoryBreakdown mem = stage_memory(m, l, in->attention, in->precision, &s, hw->hbm_bytes, plan_reserve(in, hw));
        if (mem.total / mem.capacity > worst) worst = mem.total / mem.capacity, out->memory = mem, out->memory_kind = roles[q].kind;
        KindStages *ks = &out->kind[roles[q].kind];
        if (roles[q].layers > ks->layers) ks->layers = roles[q].layers;
        if (role_time(&roles[q]) > ks->stage_time) ks->stage_time = role_time(&roles[q]);
        if (roles[q].last) out->last_stage_layers = roles[q].layers;
    }
    out->fits = out->fits && out->memory.total <= out->memory.capacity;

    /* Pipeline: the slowest stage and the bubble. */
    StepParts sp = {.v = v};
    int slow = 0;
    double sum = 0;
    for (int q = 0; q < n_roles; q++) {
        double blocks = (double)roles[q].count * roles[q].layers - roles[q].short_by_one;
        sum += blocks * roles[q].per_layer + roles[q].count * roles[q].overhead;
        if (role_time(&roles[q]) > role_time(&roles[slow])) slow = q;
    }
    sp.slowest = role_time(&roles[slow]);
    sp.bubble_sum = l->pp > 1 ? sum - sp.slowest : 0.0;
    if (l->ep_overlap == EP_OVERLAP_DUALPIPE && l->pp > 1) {
        const BlockCost *b = &cost[roles[slow].kind];
        sp.bubble_sum *= dualpipe_bubble_share(l->pp, b->forward, b->backward - b->recompute, b->recompute);
    }

    data_parallel_parts(in, l, cost, roles, n_roles, micro_batches, v, &sp, out);
    sp.straggle = gpus > 1 ? in->jitter * sqrt(2.0 * log((double)gpus)) : 0.0;

    /* Split the slowest stage's time per micro-batch into its parts. */
    const Role *r = &roles[slow];
    const BlockCost *c = &cost[r->kind];
    double compute_mb = r->layers * c->compute + (r->last ? head[r->kind] : 0.0);
    double tp_mb = r->layers * c->tp + (r->last ? head_tp[r->kind] : 0.0);
    double pp_mb = p2p[r->kind];
    int blocks = r->layers + (r->last ? m->mtp_layers : 0); /* the MTP modules' blocks exchange and gather too */
    step_at(&sp, micro_batches, &out->time, compute_mb, tp_mb, blocks * c->cp, blocks * c->ep, pp_mb);

    /* Throughput and utilization at the final batch. */
    out->micro_batches = micro_batches;
    out->batch_tokens = final_batch;
    out->tokens_per_s = final_batch / out->time.step;
    double peak = 0;
    for (int k = 0; k < f->kinds; k++) peak += f->count[k] * hardware_peak(&f->hw[k], in->precision);
    out->mfu = model_train_flops_per_token(m, RECOMPUTE_NONE) * out->tokens_per_s / peak;
    double hardware_flops = model_train_flops_per_token(m, l->recompute);
    if (l->recompute == RECOMPUTE_OP) /* the policy's recomputed matmuls depend on the precision */
        hardware_flops += (m->layers + m->mtp_layers) * (op_checkpoint_recomputed_flops(m, in->precision) - op_checkpoint_recomputed_flops(m, PREC_BF16));
    out->hfu = hardware_flops * out->tokens_per_s / peak;
    out->compute_fraction = out->time.compute / out->time.step;

    /* The whole run: every segment of the batch schedule at its own step time. */
    for (int i = 0; i < in->batch.n; i++) {
        double tokens = plan_batch_segment_tokens(&in->batch, i, in->total_tokens);
        if (tokens <= 0) continue;
        StepTime st;
        step_at(&sp, micro_batches_at(in, l, in->batch.batch[i]), &st, compute_mb, tp_mb, blocks * c->cp, blocks * c->ep,
                pp_mb);
        out->train_seconds += tokens / in->batch.batch[i] * st.step;
    }
    out->gpu_hours = out->train_seconds / 3600.0 * gpus;
}
