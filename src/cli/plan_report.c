/* plan_report.c: the readable report of `batchscale plan` and the
 * explanation of why a search's winner wins (see plan_report.h).
 *
 * The explanation is computed, not canned: it compares the winner with the
 * runner-up component by component, names the fastest layout that did not
 * fit, and evaluates the winner's neighbours (half the pipeline or tensor
 * degree, less recomputation, a lower ZeRO stage) to say what stops each. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/plan_report.h"
#include "cli/plan_stack.h"
#include "plan/comms.h"
#include "plan/presets.h"

#define GIB 1073741824.0

static const char *const PART_NAMES[] = {"compute", "TP communication", "CP communication", "EP communication",
                                         "pipeline sends", "pipeline bubble", "DP communication", "optimizer step",
                                         "stragglers"};
#define N_PARTS 9

static void parts_of(const StepTime *t, double *out) {
    double v[N_PARTS] = {t->compute, t->tp_comm, t->cp_comm, t->ep_comm, t->pp_comm, t->bubble, t->dp_comm, t->optimizer, t->straggler};
    memcpy(out, v, sizeof v);
}

double report_cost(const PlanReport *r, const PlanResult *p, const Reliability *rel) {
    double hours = rel->wall_s / 3600.0, usd = 0;
    if (r->in.fleet.kinds == 1) return layout_gpus(&p->layout) * hours * planning_rate(&r->money[0]);
    for (int k = 0; k < r->in.fleet.kinds; k++) usd += r->in.fleet.count[k] * hours * planning_rate(&r->money[k]);
    return usd;
}

/* 1.2K, 3.4M, 5.6B, 7.8T */
static const char *human(double x, char *buf, size_t n) {
    const char *units = " KMBT";
    int u = 0;
    while (fabs(x) >= 1000 && u < 4) x /= 1000, u++;
    if (u == 0) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%.*f%c", fabs(x) < 10 ? 2 : fabs(x) < 100 ? 1 : 0, x, units[u]);
    return buf;
}

static const char *duration(double s, char *buf, size_t n) {
    if (s < 1) snprintf(buf, n, "%.1f ms", s * 1e3);
    else if (s < 120) snprintf(buf, n, "%.1f s", s);
    else if (s < 7200) snprintf(buf, n, "%.1f min", s / 60);
    else if (s < 3 * 86400) snprintf(buf, n, "%.1f h", s / 3600);
    else snprintf(buf, n, "%.1f days", s / 86400);
    return buf;
}

static const char *money(double usd, char *buf, size_t n) {
    char h[24];
    if (usd < 1000) snprintf(buf, n, "$%.2f", usd);
    else snprintf(buf, n, "$%s", human(usd, h, sizeof h));
    return buf;
}

static int largest_part(const StepTime *t, bool overheads_only) {
    double p[N_PARTS];
    parts_of(t, p);
    int best = overheads_only ? 1 : 0;
    for (int i = best; i < N_PARTS; i++)
        if (p[i] > p[best]) best = i;
    return best;
}

/* "bubble 120 ms less, DP communication 30 ms more" for b against a. */
static void differences(const StepTime *a, const StepTime *b, char *buf, size_t n) {
    double pa[N_PARTS], pb[N_PARTS];
    parts_of(a, pa);
    parts_of(b, pb);
    int first = -1, second = -1;
    for (int i = 0; i < N_PARTS; i++) {
        double d = fabs(pb[i] - pa[i]);
        if (first < 0 || d > fabs(pb[first] - pa[first])) second = first, first = i;
        else if (second < 0 || d > fabs(pb[second] - pa[second])) second = i;
    }
    char d1[32], d2[32];
    snprintf(buf, n, "%s %s %s, %s %s %s", PART_NAMES[first], duration(fabs(pb[first] - pa[first]), d1, sizeof d1),
             pb[first] > pa[first] ? "more" : "less", PART_NAMES[second],
             duration(fabs(pb[second] - pa[second]), d2, sizeof d2), pb[second] > pa[second] ? "more" : "less");
}

static size_t append(char *buf, size_t used, size_t n, const char *fmt, const char *a, const char *b, const char *c) {
    if (used >= n) return used;
    int w = snprintf(buf + used, n - used, fmt, a, b, c);
    return w > 0 ? used + (size_t)w : used;
}

/* What stops a neighbour of the winner from beating it. */
static size_t neighbour(const PlanReport *r, Layout l, const char *what, char *buf, size_t used, size_t n) {
    char why[256], line[320], d[32];
    if (!layout_check(&r->in, &l, why, sizeof why)) {
        if (l.schedule != SCHEDULE_INTERLEAVED) return used;
        l.schedule = SCHEDULE_1F1B, l.virtual_stages = 1; /* interleaving needs m to be a multiple of p */
        if (!layout_check(&r->in, &l, why, sizeof why)) return used;
    }
    PlanResult res;
    plan_evaluate(&r->in, &l, &res);
    if (!res.fits) {
        snprintf(line, sizeof line, "%.1f GiB per GPU, over the %.1f GiB usable", (res.memory.total - res.memory.reserve) / GIB,
                 (res.memory.capacity - res.memory.reserve) / GIB);
        return append(buf, used, n, " %s would not fit: %s.", what, line, "");
    }
    if (res.train_seconds <= r->plan.train_seconds) return used;
    snprintf(d, sizeof d, "%.1f%%", 100.0 * (res.train_seconds / r->plan.train_seconds - 1));
    differences(&r->plan.time, &res.time, line, sizeof line);
    return append(buf, used, n, " %s fits but is %s slower (%s).", what, d, line);
}

void report_why(const PlanReport *r, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    char layout[128], line[320], pct[32];
    const PlanResult *w = &r->plan;
    if (r->n_top > 1) {
        layout_format(&r->top[1].layout, layout, sizeof layout);
        double lead = 100.0 * (r->top[1].train_seconds / w->train_seconds - 1);
        snprintf(pct, sizeof pct, "%.1f%%", lead);
        differences(&w->time, &r->top[1].time, line, sizeof line);
        used = append(buf, used, n, "It beats #2 (%s) by %s: #2 has %s.", layout, pct, line);
    }
    if (r->stats.have_fastest_unfit) {
        const PlanResult *u = &r->stats.fastest_unfit;
        layout_format(&u->layout, layout, sizeof layout);
        snprintf(pct, sizeof pct, "%.1f%%", 100.0 * (1 - u->train_seconds / w->train_seconds));
        snprintf(line, sizeof line, "%.1f GiB per GPU (%.1f GiB of activations) where %.1f GiB are usable",
                 (u->memory.total - u->memory.reserve) / GIB, u->memory.activations / GIB,
                 (u->memory.capacity - u->memory.reserve) / GIB);
        used = append(buf, used, n, " The fastest layout of all, %s, would be %s faster but needs %s.", layout, pct, line);
    }
    Layout l = w->layout;
    char what[64];
    if (l.pp > 1 && l.pp % 2 == 0) {
        Layout v = l;
        v.pp /= 2, v.dp *= 2;
        snprintf(what, sizeof what, "Half the pipeline (pp%d dp%d)", v.pp, v.dp);
        used = neighbour(r, v, what, buf, used, n);
    }
    if (l.tp > 1) {
        Layout v = l;
        v.tp /= 2, v.dp *= 2;
        v.sequence_parallel = v.sequence_parallel && v.tp > 1;
        snprintf(what, sizeof what, "Half the tensor parallelism (tp%d dp%d)", v.tp, v.dp);
        used = neighbour(r, v, what, buf, used, n);
    }
    if (l.recompute != RECOMPUTE_NONE) {
        Layout v = l;
        v.recompute = RECOMPUTE_NONE;
        used = neighbour(r, v, "Without recomputation it", buf, used, n);
    }
    if (l.zero > 0) {
        Layout v = l;
        v.zero = l.zero - 1;
        snprintf(what, sizeof what, "ZeRO %d", v.zero);
        used = neighbour(r, v, what, buf, used, n);
    }
    int big = largest_part(&w->time, true);
    double p[N_PARTS];
    parts_of(&w->time, p);
    snprintf(pct, sizeof pct, "%.1f%%", 100.0 * p[big] / w->time.step);
    used = append(buf, used, n, " Its largest overhead is the %s (%s of the step).", PART_NAMES[big], pct, "");
}

static void print_memory(const PlanReport *r) {
    const MemoryBreakdown *m = &r->plan.memory;
    const char *names[] = {"weights", "gradients", "optimizer state", "activations", "logits (last stage)", "ZeRO-3 gathered layers", "reserve (runtime, buffers)"};
    double v[] = {m->weights, m->grads, m->optimizer, m->activations, m->logits, m->transient, m->reserve};
    printf("\nmemory per GPU (the fullest, %s)        GiB\n", r->in.fleet.hw[r->plan.memory_kind].name);
    for (int i = 0; i < 7; i++)
        if (v[i] > 0) printf("  %-34s %8.2f\n", names[i], v[i] / GIB);
    printf("  %-34s %8.2f  of %.1f GiB: %s (%.0f%%)\n", "total", m->total / GIB, m->capacity / GIB,
           r->plan.fits ? "fits" : "DOES NOT FIT", 100.0 * m->total / m->capacity);
}

/* MoE: what the step is not priced for, per ms. A dropless dispatcher waits
 * on the host for each MoE layer's token counts, and launches outside CUDA
 * graphs can leave the GPU idle; neither has a source the model could take
 * (docs/PLANNER.md, "Where it misses": 0-10 ms per MoE layer and micro-batch
 * in published Megatron-Bridge runs), so the report gives the sensitivity. */
static void print_moe_host(const PlanReport *r) {
    if (!model_is_moe(&r->in.model)) return;
    const PlanResult *p = &r->plan;
    int layers = 0;
    for (int k = 0; k < r->in.fleet.kinds; k++)
        if (p->kind[k].layers > layers) layers = p->kind[k].layers;
    double per_ms = 1e-3 * layers * p->micro_batches; /* seconds per step for 1 ms per layer and micro-batch */
    printf("host       not priced: host time the GPU waits for in MoE layers (a dropless dispatcher's token counts,\n"
           "           launches outside CUDA graphs): each 1 ms per layer and micro-batch adds %.0f ms (%d layers x %d\n"
           "           micro-batches), %.1f%% of the step; published Megatron-Bridge MoE runs lost 0-10 ms, most of them\n"
           "           2-10 (docs/PLANNER.md, \"Where it misses\")\n",
           per_ms * 1e3, layers, p->micro_batches, 100 * per_ms / p->time.step);
}

static void print_step(const PlanReport *r) {
    const StepTime *t = &r->plan.time;
    double p[N_PARTS];
    parts_of(t, p);
    printf("\nstep time (exposed)                        ms    share\n");
    for (int i = 0; i < N_PARTS; i++)
        if (p[i] > 0) printf("  %-34s %10.1f  %5.1f%%\n", PART_NAMES[i], p[i] * 1e3, 100.0 * p[i] / t->step);
    printf("  %-34s %10.1f  100.0%%\n", "step", t->step * 1e3);
    print_moe_host(r);
}

static void print_header(const PlanReport *r) {
    const PlanInput *in = &r->in;
    const ModelShape *m = &in->model;
    char a[32], b[32], c[32];
    printf("batchscale plan: %s on ", m->name);
    for (int k = 0; k < in->fleet.kinds; k++)
        printf("%s%d x %s", k ? " + " : "", in->fleet.count[k], in->fleet.hw[k].name);
    printf(", %s, %s attention\n", precision_name(in->precision), attention_name(in->attention));
    printf("model      %s parameters: %d layers, hidden %d, %d heads", human(model_params(m), a, sizeof a), m->layers, m->hidden, m->heads);
    if (m->kv_heads != m->heads) printf(" (%d KV)", m->kv_heads);
    printf(", %s MLP %d", m->act == ACT_SWIGLU ? "SwiGLU" : "GELU", m->ffn);
    if (model_is_moe(m)) printf(" x %d experts (top %d)", m->experts, m->top_k);
    if (model_is_moe(m) && m->shared_experts > 0) printf(" + %d shared", m->shared_experts);
    if (m->mtp_layers > 0) printf(", %d MTP module%s", m->mtp_layers, m->mtp_layers > 1 ? "s" : "");
    printf(", vocab %d, seq %d\n", m->vocab, m->seq_len);
    printf("           %s FLOP per token for training (full attention counted; %s with recomputation)\n",
           human(model_train_flops_per_token(m, RECOMPUTE_NONE), b, sizeof b),
           human(model_train_flops_per_token(m, r->plan.layout.recompute), c, sizeof c));
    printf("training   global batch %s tokens (%.0f sequences)", human(r->plan.batch_tokens, a, sizeof a),
           r->plan.batch_tokens / m->seq_len);
    if (in->batch.n > 1) printf(" at the end of a %d-step schedule", in->batch.n);
    printf("; %s tokens in total\n", human(in->total_tokens, b, sizeof b));
    if (r->note[0]) printf("note       %s\n", r->note);
    plan_stack_print(&r->assumptions);
}

static void print_layout(const PlanReport *r) {
    const PlanResult *p = &r->plan;
    char layout[128];
    layout_format(&p->layout, layout, sizeof layout);
    printf("layout     %s%s\n", layout, r->searched ? "   (the search's best)" : "");
    printf("           ");
    for (int k = 0; k < r->in.fleet.kinds; k++)
        printf("%s%d stage%s of up to %d layers on %s", k ? "; " : "", p->kind[k].stages, p->kind[k].stages == 1 ? "" : "s",
               p->kind[k].layers, r->in.fleet.hw[k].name);
    printf(" (last: %d + output layer); %d micro-batch%s per step\n", p->last_stage_layers, p->micro_batches,
           p->micro_batches == 1 ? "" : "es");
}

static void print_outcome(const PlanReport *r) {
    const PlanResult *p = &r->plan;
    char a[32], b[32], c[32], d[32], e[32];
    double gpus = layout_gpus(&p->layout);
    double peak = 0;
    for (int k = 0; k < r->in.fleet.kinds; k++) peak += r->in.fleet.count[k] * hardware_peak(&r->in.fleet.hw[k], r->in.precision);
    printf("\nthroughput %s tokens/s (%s per GPU); MFU %.1f%%, HFU %.1f%% (%.0f model TFLOP/s per GPU)\n",
           human(p->tokens_per_s, a, sizeof a), human(p->tokens_per_s / gpus, b, sizeof b), 100 * p->mfu, 100 * p->hfu,
           p->mfu * peak / gpus / 1e12);
    printf("scaling    %.0f%% of the step is compute", 100 * p->compute_fraction);
    if (r->linear_efficiency > 0)
        printf("; linear scaling efficiency %.1f%% (against %d x one GPU computing alone)", 100 * r->linear_efficiency,
               layout_gpus(&p->layout));
    if (r->have_reference)
        printf("; %.1f%% of the tokens/s per GPU on %d GPUs", 100 * r->reference_efficiency, r->reference_gpus);
    printf("\n");
    printf("time       %s to train without failures; %s GPU-hours\n", duration(p->train_seconds, a, sizeof a),
           human(p->gpu_hours, b, sizeof b));
    const Reliability *rel = &r->reliability;
    const ReliabilityInput *ri = &r->reliability_in;
    printf("failures   MTBF %s GPU-hours per GPU -> %s for the job; %.1f interruptions expected\n",
           human(ri->mtbf_gpu_hours, a, sizeof a), duration(rel->job_mtbf_s, b, sizeof b), rel->interruptions);
    printf("           checkpoint %s every %s (Daly; Young: %s), restart %s: goodput %.1f%%, %s wall clock\n",
           duration(ri->checkpoint_seconds, a, sizeof a), duration(rel->daly_s, b, sizeof b), duration(rel->young_s, c, sizeof c),
           duration(ri->restart_seconds, d, sizeof d), 100 * rel->goodput, duration(rel->wall_s, e, sizeof e));
    double wall_gpu_hours = rel->wall_s / 3600 * gpus;
    printf("cost       ");
    bool any = false;
    for (int k = 0; k < r->in.fleet.kinds; k++) {
        const MoneyInput *m = &r->money[k];
        double n = r->in.fleet.kinds == 1 ? gpus : r->in.fleet.count[k], hours = rel->wall_s / 3600 * n;
        const char *label[] = {"plan", "ownership", "on-demand", "spot"};
        double rate[] = {m->usd_per_gpu_hour, ownership_rate(m), m->on_demand_usd_per_gpu_hour, m->spot_usd_per_gpu_hour};
        for (int i = 0; i < 4; i++)
            if (rate[i] > 0) {
                printf("%s%s%s%s $%.2f/GPU-h: %s", any ? "; " : "", r->in.fleet.kinds > 1 ? r->in.fleet.hw[k].name : "",
                       r->in.fleet.kinds > 1 ? " " : "", label[i], rate[i], money(rate[i] * hours, a, sizeof a));
                any = true;
            }
    }
    if (!any) printf("%s GPU-hours with failures (give --usd-per-gpu-hour or --gpu-price-usd for money)", human(wall_gpu_hours, a, sizeof a));
    printf("\n");
    for (int k = 0; k < r->in.fleet.kinds; k++) {
        const MoneyInput *m = &r->money[k];
        double od = break_even_utilisation(m, m->on_demand_usd_per_gpu_hour), spot = break_even_utilisation(m, m->spot_usd_per_gpu_hour);
        if (od > 0 || spot > 0)
            printf("           %s%sowning pays above %.0f%% utilisation against on-demand, %.0f%% against spot (price / (years x 8766 h x (cloud - power)))\n",
                   r->in.fleet.kinds > 1 ? r->in.fleet.hw[k].name : "", r->in.fleet.kinds > 1 ? ": " : "", 100 * od, 100 * spot);
    }
    double ratio = p->batch_tokens / r->critical_batch;
    printf("batch      critical batch %s tokens at loss %.2f nats (Kaplan et al. 2020%s); the batch is %.2fx it\n",
           human(r->critical_batch, a, sizeof a), r->loss, r->loss_given ? "" : ", loss from L(N, D)", ratio);
    if (ratio > 2)
        printf("warning    the global batch is far above the critical batch: reaching the loss takes about %.1fx the minimum tokens (E/E_min = 1 + B/B_crit)\n",
               data_inefficiency(p->batch_tokens, r->critical_batch));
}

static void print_alternatives(const PlanReport *r) {
    if (r->n_alone == 0) return;
    char a[32], b[32];
    printf("\nmixed fleet against each kind alone (the slowest device sets the pace of its stages)\n");
    printf("  %-28s %12s %14s\n", "fleet", "time", "cost");
    printf("  %-28s %12s %14s\n", "the mix", duration(r->plan.train_seconds, a, sizeof a), r->cost_usd > 0 ? money(r->cost_usd, b, sizeof b) : "-");
    for (int i = 0; i < r->n_alone; i++) {
        const FleetAlternative *alt = &r->alone[i];
        if (!alt->found) printf("  %-28s %12s %14s\n", alt->label, "no fit", "-");
        else printf("  %-28s %12s %14s\n", alt->label, duration(alt->best.train_seconds, a, sizeof a),
                    alt->cost_usd > 0 ? money(alt->cost_usd, b, sizeof b) : "-");
    }
}

static void print_search(const PlanReport *r) {
    char a[32], layout[128];
    printf("\nsearch     %ld layouts evaluated, %ld fit, in %.3f s; best by %s:\n", r->stats.evaluated, r->stats.fitting,
           r->search_seconds, r->rank_by);
    printf("  #  %-44s %5s %12s %10s %6s %9s %10s\n", "layout", "GPUs", "time", "tokens/s", "MFU", "GiB", "cost");
    for (int i = 0; i < r->n_top; i++) {
        const PlanResult *p = &r->top[i];
        layout_format(&p->layout, layout, sizeof layout);
        char t[32], c[32];
        printf(" %2d  %-44s %5d %12s %10s %5.1f%% %9.1f %10s\n", i + 1, layout, layout_gpus(&p->layout),
               duration(p->train_seconds, t, sizeof t), human(p->tokens_per_s, a, sizeof a), 100 * p->mfu, p->memory.total / GIB,
               r->top_cost[i] > 0 ? money(r->top_cost[i], c, sizeof c) : "-");
    }
    char why[2048];
    report_why(r, why, sizeof why);
    printf("why #1     %s\n", why);
}

static void print_sweep(const PlanReport *r) {
    if (r->n_points == 0) return;
    char a[32], b[32], layout[128];
    printf("\nscaling (%s: %s), best layout at each size\n", r->weak ? "weak" : "strong",
           r->weak ? "the tokens per GPU per step of this plan" : "the global batch of this plan");
    printf("  %6s  %-40s %10s %8s %7s %8s %7s %6s %8s  %s\n", "GPUs", "layout", "tokens/s", "per GPU", "linear",
           "+failures", "vs ref", "MFU", "compute", "largest overhead");
    for (int i = 0; i < r->n_points; i++) {
        const ScalePoint *s = &r->points[i];
        if (!s->found) {
            printf("  %6d  %-40s\n", s->gpus, "(nothing fits, or the batch does not split)");
            continue;
        }
        const PlanResult *p = &s->best;
        layout_format(&p->layout, layout, sizeof layout);
        int big = largest_part(&p->time, true);
        double parts[N_PARTS];
        parts_of(&p->time, parts);
        Reliability rel = reliability_estimate(&r->reliability_in, s->gpus, p->train_seconds);
        printf("  %6d  %-40s %10s %8s %6.1f%% %7.1f%% %6.1f%% %5.1f%% %7.1f%%  %s %.1f%%\n", s->gpus, layout,
               human(p->tokens_per_s, a, sizeof a), human(p->tokens_per_s / s->gpus, b, sizeof b), 100 * s->linear,
               100 * s->linear * rel.goodput, 100 * s->efficiency, 100 * p->mfu, 100 * p->compute_fraction,
               PART_NAMES[big], 100.0 * parts[big] / p->time.step);
    }
    printf("  linear: tokens/s against GPUs x one GPU computing alone; +failures: times goodput");
    if (r->baseline >= 0) printf("; vs ref: tokens/s per GPU against %d GPUs", r->points[r->baseline].gpus);
    printf("\n");
}

void report_print(const PlanReport *r) {
    print_header(r);
    print_layout(r);
    print_memory(r);
    print_step(r);
    print_outcome(r);
    print_alternatives(r);
    if (r->searched) print_search(r);
    print_sweep(r);
}
