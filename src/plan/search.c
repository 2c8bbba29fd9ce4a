/* search.c: exhaustive layout search with pruning by validity (see
 * search.h). Each candidate costs one plan_evaluate (microseconds), so all
 * layouts of a 16,384-GPU job take well under a second. */
#include "plan/search.h"

#include <string.h>

#define MAX_VIRTUAL 16

SearchSpace search_space_all(int top) {
    SearchSpace s = {.zero = -1, .recompute = -1, .schedule = -1, .overlap = true, .sequence_parallel = true, .top = top,
                     .rank_order_default = true,
                     .zero_stages = 0xFu, /* torchtitan's op policy only when given or a stack has it */
                     .recompute_policies = (1u << RECOMPUTE_NONE) | (1u << RECOMPUTE_SELECTIVE) | (1u << RECOMPUTE_FULL)};
    return s;
}

typedef struct {
    const PlanInput *in;
    const SearchSpace *space;
    PlanResult *top;
    int kept, limit;
    SearchStats *stats;
} Ranking;

static bool better(const PlanResult *a, const PlanResult *b) {
    if (a->train_seconds != b->train_seconds) return a->train_seconds < b->train_seconds;
    return a->memory.total < b->memory.total; /* equal speed: the one with more headroom */
}

/* Layouts that differ only in ZeRO stage or virtual stages count as one in
 * the ranking (the best of them is kept), so the list shows distinct choices. */
static bool same_grid(const Layout *a, const Layout *b) {
    return a->tp == b->tp && a->pp == b->pp && a->dp == b->dp && a->cp == b->cp && a->ep == b->ep &&
           a->micro_batch == b->micro_batch && a->recompute == b->recompute;
}

static void insert(Ranking *r, const PlanResult *res) {
    for (int i = 0; i < r->kept; i++)
        if (same_grid(&r->top[i].layout, &res->layout)) {
            if (!better(res, &r->top[i])) return;
            memmove(&r->top[i], &r->top[i + 1], (size_t)(r->kept - i - 1) * sizeof(PlanResult));
            r->kept--;
            break;
        }
    int pos = r->kept < r->limit ? r->kept : r->limit;
    while (pos > 0 && better(res, &r->top[pos - 1])) pos--;
    if (pos >= r->limit) return;
    int last = r->kept < r->limit ? r->kept : r->limit - 1;
    memmove(&r->top[pos + 1], &r->top[pos], (size_t)(last - pos) * sizeof(PlanResult));
    r->top[pos] = *res;
    if (r->kept < r->limit) r->kept++;
}

static void consider(Ranking *r, const Layout *l) {
    char why[256];
    if (!layout_check(r->in, l, why, sizeof why)) return;
    PlanResult res;
    plan_evaluate(r->in, l, &res);
    SearchStats *st = r->stats;
    st->evaluated++;
    double load = res.memory.total / res.memory.capacity;
    if (!st->have_least_memory || load < st->least_memory.memory.total / st->least_memory.memory.capacity)
        st->least_memory = res, st->have_least_memory = true;
    if (!res.fits) {
        if (!st->have_fastest_unfit || better(&res, &st->fastest_unfit)) st->fastest_unfit = res, st->have_fastest_unfit = true;
        return;
    }
    st->fitting++;
    insert(r, &res);
}

static bool pinned_or(int pin, int value) { return pin <= 0 || pin == value; }

/* Schedules, recomputation and ZeRO for a fixed grid and micro-batch. */
static void try_rest(Ranking *r, Layout l) {
    const SearchSpace *s = r->space;
    const ModelShape *m = &r->in->model;
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_OP; rc++) {
        if (s->recompute >= 0 ? s->recompute != rc : !(s->recompute_policies & (1u << rc))) continue;
        /* flash attention keeps no scores: selective equals none */
        if (rc == RECOMPUTE_SELECTIVE && attention_is_fused(r->in->attention) && s->recompute < 0) continue;
        l.recompute = (Recompute)rc;
        for (int z = 0; z <= 3; z++) {
            if (s->zero >= 0 ? s->zero != z : !(s->zero_stages & (1u << z))) continue;
            if (z > 0 && l.dp * l.cp == 1 && s->zero < 0) continue;
            l.zero = z;
            for (int sched = SCHEDULE_1F1B; sched <= SCHEDULE_INTERLEAVED; sched++) {
                if (s->schedule >= 0 ? s->schedule != sched : sched == SCHEDULE_GPIPE) continue;
                if (sched != SCHEDULE_1F1B && l.pp == 1) continue;
                l.schedule = (PlanSchedule)sched;
                l.pp_overlap = s->pp_overlap && sched == SCHEDULE_INTERLEAVED;
                if (sched != SCHEDULE_INTERLEAVED) {
                    l.virtual_stages = 1;
                    consider(r, &l);
                    continue;
                }
                /* Megatron needs whole layers per chunk when stages are even;
                 * uneven stages (Llama 3) take any v up to MAX_VIRTUAL; a
                 * pinned v may be larger (one layer per chunk) */
                int per_stage = m->layers / l.pp;
                bool even = m->layers % l.pp == 0;
                for (int v = 2; v <= per_stage; v++)
                    if ((v <= MAX_VIRTUAL || v == s->virtual_stages) && (!even || per_stage % v == 0) &&
                        pinned_or(s->virtual_stages, v)) {
                        l.virtual_stages = v;
                        consider(r, &l);
                    }
            }
        }
    }
}

static void try_grid(Ranking *r, Layout l) {
    const SearchSpace *s = r->space;
    const ModelShape *m = &r->in->model;
    double seqs = r->in->batch.batch[0] / m->seq_len;
    long per_dp = (long)(seqs / l.dp + 0.5);
    if (per_dp < 1 || (double)per_dp * l.dp != seqs) return;
    int max_ep = model_is_moe(m) ? m->experts : 1;
    for (int ep = 1; ep <= max_ep; ep *= 2) {
        if (!pinned_or(s->ep, ep) || (l.tp * l.cp * l.dp) % (layout_expert_tp(&l) * ep)) continue;
        l.ep = ep;
        if (s->rank_order_default) l.rank_order = rank_order_default(ep);
        l.ep_overlap = ep > 1 ? s->ep_overlap : EP_OVERLAP_OFF;
        for (long mb = 1; mb <= per_dp && mb <= 64; mb++)
            if (per_dp % mb == 0 && pinned_or(s->micro_batch, (int)mb)) {
                l.micro_batch = (int)mb;
                try_rest(r, l);
            }
    }
}

int plan_search(const PlanInput *in, const SearchSpace *space, PlanResult *top, SearchStats *stats) {
    memset(stats, 0, sizeof *stats);
    Ranking r = {in, space, top, 0, space->top < SEARCH_MAX_TOP ? space->top : SEARCH_MAX_TOP, stats};
    if (r.limit < 1) r.limit = 1;
    const ModelShape *m = &in->model;
    int gpus = fleet_gpus(&in->fleet), node = in->fleet.hw[0].gpus_per_node;
    for (int k = 1; k < in->fleet.kinds; k++)
        if (in->fleet.hw[k].gpus_per_node < node) node = in->fleet.hw[k].gpus_per_node;
    Layout l = layout_default();
    l.overlap = space->overlap;
    l.cp_algo = space->cp_algo;
    l.rank_order = space->rank_order;
    l.etp = space->etp;
    for (int tp = 1; tp <= node || tp == space->tp; tp *= 2) {
        if (!pinned_or(space->tp, tp) || m->heads % tp || m->ffn % tp || gpus % tp) continue;
        l.tp = tp;
        l.sequence_parallel = space->sequence_parallel && tp > 1;
        l.tp_overlap = space->tp_overlap && l.sequence_parallel;
        for (int cp = 1; cp <= 64 && (long)tp * cp <= gpus; cp *= 2) {
            if (!pinned_or(space->cp, cp) || m->seq_len % cp || gpus % (tp * cp)) continue;
            l.cp = cp;
            int rest = gpus / (tp * cp);
            for (int pp = 1; pp <= rest && pp <= m->layers; pp++) {
                if (rest % pp || !pinned_or(space->pp, pp) || !pinned_or(space->dp, rest / pp)) continue;
                l.pp = pp;
                l.dp = rest / pp;
                try_grid(&r, l);
            }
        }
    }
    if (r.kept > 0 && stats->have_fastest_unfit && !better(&stats->fastest_unfit, &top[0]))
        stats->have_fastest_unfit = false;
    return r.kept;
}
