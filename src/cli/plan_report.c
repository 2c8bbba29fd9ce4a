/* plan_report.c: the readable report of `batchscale plan` (see
 * plan_report.h); the explanation of why a search's winner wins is the
 * answer's (plan/explain.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/plan_report.h"
#include "cli/plan_stack.h"
#include "plan/comms.h"
#include "plan/explain.h"
#include "plan/presets.h"

#define GIB 1073741824.0

/* 1.2K, 3.4M, 5.6B, 7.8T */
static const char *human(double x, char *buf, size_t n) {
    const char *units = " KMBT";
    int u = 0;
    while (fabs(x) >= 1000 && u < 4) x /= 1000, u++;
    if (u == 0) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%.*f%c", fabs(x) < 10 ? 2 : fabs(x) < 100 ? 1 : 0, x, units[u]);
    return buf;
}

static const char *money(double usd, char *buf, size_t n) {
    char h[24];
    if (usd < 1000) snprintf(buf, n, "$%.2f", usd);
    else snprintf(buf, n, "$%s", human(usd, h, sizeof h));
    return buf;
}

static void print_memory(const PlanAnswer *r) {
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
static void print_moe_host(const PlanAnswer *r) {
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

static void print_step(const PlanAnswer *r) {
    const StepTime *t = &r->plan.time;
    double p[PLAN_STEP_PARTS];
    plan_step_parts(t, p);
    printf("\nstep time (exposed)                        ms    share\n");
    for (int i = 0; i < PLAN_STEP_PARTS; i++)
        if (p[i] > 0) printf("  %-34s %10.1f  %5.1f%%\n", plan_step_part_name(i), p[i] * 1e3, 100.0 * p[i] / t->step);
    printf("  %-34s %10.1f  100.0%%\n", "step", t->step * 1e3);
    print_moe_host(r);
}

static void print_header(const PlanAnswer *r) {
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

static void print_layout(const PlanAnswer *r) {
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

static void print_outcome(const PlanAnswer *r) {
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
    printf("time       %s to train without failures; %s GPU-hours\n", plan_duration_text(p->train_seconds, a, sizeof a),
           human(p->gpu_hours, b, sizeof b));
    const Reliability *rel = &r->reliability;
    const ReliabilityInput *ri = &r->reliability_in;
    printf("failures   MTBF %s GPU-hours per GPU -> %s for the job; %.1f interruptions expected\n",
           human(ri->mtbf_gpu_hours, a, sizeof a), plan_duration_text(rel->job_mtbf_s, b, sizeof b), rel->interruptions);
    printf("           checkpoint %s every %s (Daly; Young: %s), restart %s: goodput %.1f%%, %s wall clock\n",
           plan_duration_text(ri->checkpoint_seconds, a, sizeof a), plan_duration_text(rel->daly_s, b, sizeof b), plan_duration_text(rel->young_s, c, sizeof c),
           plan_duration_text(ri->restart_seconds, d, sizeof d), 100 * rel->goodput, plan_duration_text(rel->wall_s, e, sizeof e));
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

static void print_alternatives(const PlanAnswer *r) {
    if (r->n_alone == 0) return;
    char a[32], b[32];
    printf("\nmixed fleet against each kind alone (the slowest device sets the pace of its stages)\n");
    printf("  %-28s %12s %14s\n", "fleet", "time", "cost");
    printf("  %-28s %12s %14s\n", "the mix", plan_duration_text(r->plan.train_seconds, a, sizeof a), r->cost_usd > 0 ? money(r->cost_usd, b, sizeof b) : "-");
    for (int i = 0; i < r->n_alone; i++) {
        const FleetAlternative *alt = &r->alone[i];
        if (!alt->found) printf("  %-28s %12s %14s\n", alt->label, "no fit", "-");
        else printf("  %-28s %12s %14s\n", alt->label, plan_duration_text(alt->best.train_seconds, a, sizeof a),
                    alt->cost_usd > 0 ? money(alt->cost_usd, b, sizeof b) : "-");
    }
}

static void print_search(const PlanAnswer *r) {
    char a[32], layout[128];
    printf("\nsearch     %ld layouts evaluated, %ld fit, in %.3f s; best by %s:\n", r->stats.evaluated, r->stats.fitting,
           r->search_seconds, r->rank_by);
    printf("  #  %-44s %5s %12s %10s %6s %9s %10s\n", "layout", "GPUs", "time", "tokens/s", "MFU", "GiB", "cost");
    for (int i = 0; i < r->n_top; i++) {
        const PlanResult *p = &r->top[i];
        layout_format(&p->layout, layout, sizeof layout);
        char t[32], c[32];
        printf(" %2d  %-44s %5d %12s %10s %5.1f%% %9.1f %10s\n", i + 1, layout, layout_gpus(&p->layout),
               plan_duration_text(p->train_seconds, t, sizeof t), human(p->tokens_per_s, a, sizeof a), 100 * p->mfu, p->memory.total / GIB,
               r->top_cost[i] > 0 ? money(r->top_cost[i], c, sizeof c) : "-");
    }
    printf("why #1     %s\n", r->why);
}

static void print_sweep(const PlanAnswer *r) {
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
        int big = plan_largest_part(&p->time, true);
        double parts[PLAN_STEP_PARTS];
        plan_step_parts(&p->time, parts);
        printf("  %6d  %-40s %10s %8s %6.1f%% %7.1f%% %6.1f%% %5.1f%% %7.1f%%  %s %.1f%%\n", s->gpus, layout,
               human(p->tokens_per_s, a, sizeof a), human(p->tokens_per_s / s->gpus, b, sizeof b), 100 * s->linear,
               100 * s->linear * r->point_goodput[i], 100 * s->efficiency, 100 * p->mfu, 100 * p->compute_fraction,
               plan_step_part_name(big), 100.0 * parts[big] / p->time.step);
    }
    printf("  linear: tokens/s against GPUs x one GPU computing alone; +failures: times goodput");
    if (r->baseline >= 0) printf("; vs ref: tokens/s per GPU against %d GPUs", r->points[r->baseline].gpus);
    printf("\n");
}

void report_print(const PlanAnswer *r) {
    print_header(r);
    print_layout(r);
    print_memory(r);
    print_step(r);
    print_outcome(r);
    print_alternatives(r);
    if (r->searched) print_search(r);
    print_sweep(r);
}
