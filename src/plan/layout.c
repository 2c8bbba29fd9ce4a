/* layout.c: names and defaults of a parallel layout (see layout.h). */
#include "plan/layout.h"

#include <stdio.h>
#include <string.h>

const char *const RECOMPUTE_WORDS[] = {"none", "selective", "full", "op", NULL};
const char *const PLAN_SCHEDULE_WORDS[] = {"1f1b", "gpipe", "interleaved", NULL};
static const char *const ATTENTION_NAMES[] = {"full", "causal", "flash", "flash2"};
const char *const CP_ALGO_WORDS[] = {"ring", "allgather", NULL};
const char *const RANK_ORDER_WORDS[] = {"tp-cp-pp-dp", "tp-cp-ep-dp-pp", NULL};
const char *const EP_OVERLAP_WORDS[] = {"off", "shared", "dualpipe", "combined-1f1b", NULL};

int layout_chunks(const Layout *l) { return l->schedule == SCHEDULE_INTERLEAVED ? l->virtual_stages : 1; }

Layout layout_default(void) {
    Layout l = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .zero = 1, .micro_batch = 1,
                .recompute = RECOMPUTE_NONE, .schedule = SCHEDULE_1F1B, .virtual_stages = 1,
                .sequence_parallel = true, .overlap = true};
    return l;
}

int layout_gpus(const Layout *l) { return l->tp * l->pp * l->dp * l->cp; }
int layout_expert_tp(const Layout *l) { return l->etp > 0 ? l->etp : l->tp; }
int layout_expert_dp(const Layout *l) {
    int group = layout_expert_tp(l) * l->ep;
    return group > 0 ? l->tp * l->cp * l->dp / group : 1;
}

const char *recompute_name(Recompute r) { return RECOMPUTE_WORDS[r]; }
const char *plan_schedule_name(PlanSchedule s) { return PLAN_SCHEDULE_WORDS[s]; }
const char *attention_name(AttentionImpl a) { return ATTENTION_NAMES[a]; }
bool attention_is_fused(AttentionImpl a) { return a == ATTN_FLASH || a == ATTN_FLASH2; }
const char *cp_algo_name(CpAlgo c) { return CP_ALGO_WORDS[c]; }
const char *rank_order_name(RankOrder o) { return RANK_ORDER_WORDS[o]; }
RankOrder rank_order_default(int ep) { return ep > 1 ? ORDER_TP_CP_EP_DP_PP : ORDER_TP_CP_PP_DP; }
const char *ep_overlap_name(EpOverlap o) { return EP_OVERLAP_WORDS[o]; }

static bool parse_name(const char *s, const char *const *names, int count, int *out) {
    for (int i = 0; i < count; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return true;
        }
    return false;
}

bool recompute_parse(const char *s, Recompute *out) {
    int i;
    if (!parse_name(s, RECOMPUTE_WORDS, 4, &i)) return false;
    *out = (Recompute)i;
    return true;
}

bool plan_schedule_parse(const char *s, PlanSchedule *out) {
    int i;
    if (!parse_name(s, PLAN_SCHEDULE_WORDS, 3, &i)) return false;
    *out = (PlanSchedule)i;
    return true;
}

bool attention_parse(const char *s, AttentionImpl *out) {
    int i;
    if (!parse_name(s, ATTENTION_NAMES, 4, &i)) return false;
    *out = (AttentionImpl)i;
    return true;
}

bool cp_algo_parse(const char *s, CpAlgo *out) {
    int i;
    if (!parse_name(s, CP_ALGO_WORDS, 2, &i)) return false;
    *out = (CpAlgo)i;
    return true;
}

bool rank_order_parse(const char *s, RankOrder *out) {
    int i;
    if (!parse_name(s, RANK_ORDER_WORDS, 2, &i)) return false;
    *out = (RankOrder)i;
    return true;
}

bool ep_overlap_parse(const char *s, EpOverlap *out) {
    int i;
    if (!parse_name(s, EP_OVERLAP_WORDS, 4, &i)) return false;
    *out = (EpOverlap)i;
    return true;
}

void layout_format(const Layout *l, char *buf, size_t n) {
    int w = snprintf(buf, n, "tp%d pp%d dp%d cp%d", l->tp, l->pp, l->dp, l->cp);
    if (l->cp > 1 && l->cp_algo == CP_ALLGATHER && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " %s", cp_algo_name(l->cp_algo));
    if (l->ep > 1 && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " ep%d", l->ep);
    if (layout_expert_tp(l) != l->tp && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " etp%d", layout_expert_tp(l));
    if (w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " mb%d z%d rc=%s", l->micro_batch, l->zero, recompute_name(l->recompute));
    if (l->pp > 1 && w >= 0 && (size_t)w < n) {
        if (l->schedule == SCHEDULE_INTERLEAVED)
            w += snprintf(buf + w, n - (size_t)w, " v%d", l->virtual_stages);
        else
            w += snprintf(buf + w, n - (size_t)w, " %s", plan_schedule_name(l->schedule));
    }
    if (l->tp_overlap && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " tp-overlap");
    if (l->pp_overlap && w >= 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, " pp-overlap");
    if (l->ep_overlap != EP_OVERLAP_OFF && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " ep-overlap=%s", ep_overlap_name(l->ep_overlap));
    if (l->rank_order != ORDER_TP_CP_PP_DP && w >= 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, " order=%s", rank_order_name(l->rank_order));
}
