/* plan_json.c: `batchscale plan --json`: the whole report as one JSON
 * object (jansson). Units: bytes, seconds, tokens, FLOP/s, US dollars;
 * fractions in [0, 1]. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/plan_report.h"
#include "cli/plan_stack.h"
#include "core/error.h"

static json_t *layout_json(const Layout *l) {
    char text[128];
    layout_format(l, text, sizeof text);
    return json_pack("{s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:s, s:s, s:i, s:b, s:b, s:b, s:b, s:s, s:s, s:i, s:s}", "tp", l->tp, "pp", l->pp, "dp",
                     l->dp, "cp", l->cp, "cp_algo", cp_algo_name(l->cp_algo), "ep", l->ep, "zero", l->zero, "micro_batch", l->micro_batch, "recompute",
                     recompute_name(l->recompute), "schedule", plan_schedule_name(l->schedule), "virtual_stages",
                     l->virtual_stages, "sequence_parallel", l->sequence_parallel, "overlap", l->overlap, "tp_overlap", l->tp_overlap, "pp_overlap", l->pp_overlap,
                     "rank_order", rank_order_name(l->rank_order), "ep_overlap", ep_overlap_name(l->ep_overlap), "etp", layout_expert_tp(l), "text", text);
}

static json_t *memory_json(const MemoryBreakdown *m) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "weights", m->weights, "gradients", m->grads,
                     "optimizer", m->optimizer, "activations", m->activations, "logits", m->logits, "transient",
                     m->transient, "reserve", m->reserve, "total", m->total, "capacity", m->capacity);
}

static json_t *time_json(const StepTime *t) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "compute", t->compute, "tp_comm", t->tp_comm,
                     "cp_comm", t->cp_comm, "ep_comm", t->ep_comm, "pp_comm", t->pp_comm, "bubble", t->bubble, "dp_comm",
                     t->dp_comm, "optimizer", t->optimizer, "straggler", t->straggler, "step", t->step);
}

static json_t *result_json(const PlanAnswer *r, const PlanResult *p) {
    json_t *stages = json_array();
    for (int k = 0; k < r->in.fleet.kinds; k++)
        json_array_append_new(stages, json_pack("{s:s, s:i, s:i, s:f}", "hardware", r->in.fleet.hw[k].name, "stages",
                                                p->kind[k].stages, "max_layers", p->kind[k].layers, "stage_time",
                                                p->kind[k].stage_time));
    return json_pack("{s:o, s:i, s:b, s:o, s:o, s:o, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:f}", "layout",
                     layout_json(&p->layout), "gpus", layout_gpus(&p->layout), "fits", p->fits, "memory",
                     memory_json(&p->memory), "step_time", time_json(&p->time), "stages", stages, "last_stage_layers",
                     p->last_stage_layers, "micro_batches", p->micro_batches, "batch_tokens", p->batch_tokens,
                     "tokens_per_s", p->tokens_per_s, "mfu", p->mfu, "hfu", p->hfu, "compute_fraction",
                     p->compute_fraction, "train_seconds", p->train_seconds, "gpu_hours", p->gpu_hours, "dp_algorithm",
                     algo_name(p->dp_algo), "dp_bytes", p->dp_bytes);
}

static json_t *model_json(const ModelShape *m) {
    return json_pack("{s:s, s:f, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "name", m->name,
                     "parameters", model_params(m), "layers", m->layers, "hidden", m->hidden, "heads", m->heads,
                     "kv_heads", m->kv_heads, "ffn", m->ffn, "activation", m->act == ACT_SWIGLU ? "swiglu" : "gelu",
                     "vocab", m->vocab, "seq_len", m->seq_len, "experts", m->experts, "top_k", m->top_k,
                     "shared_experts", m->shared_experts, "mtp_layers", m->mtp_layers, "flops_per_token",
                     model_train_flops_per_token(m, RECOMPUTE_NONE));
}

static json_t *fleet_json(const Fleet *f, Precision p) {
    json_t *a = json_array();
    for (int k = 0; k < f->kinds; k++)
        json_array_append_new(a, json_pack("{s:s, s:i, s:f, s:f, s:f, s:i}", "hardware", f->hw[k].name, "count",
                                           f->count[k], "peak_flops", hardware_peak(&f->hw[k], p), "memory_bytes",
                                           f->hw[k].hbm_bytes, "memory_bandwidth", f->hw[k].hbm_bw, "gpus_per_node",
                                           f->hw[k].gpus_per_node));
    return a;
}

static json_t *money_json(const PlanAnswer *r) {
    json_t *a = json_array();
    for (int k = 0; k < r->in.fleet.kinds; k++) {
        const MoneyInput *m = &r->money[k];
        double od = break_even_utilisation(m, m->on_demand_usd_per_gpu_hour), spot = break_even_utilisation(m, m->spot_usd_per_gpu_hour);
        json_array_append_new(a, json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:f}", "hardware", r->in.fleet.hw[k].name,
                                           "usd_per_gpu_hour", m->usd_per_gpu_hour, "ownership_usd_per_gpu_hour",
                                           ownership_rate(m), "on_demand_usd_per_gpu_hour", m->on_demand_usd_per_gpu_hour,
                                           "spot_usd_per_gpu_hour", m->spot_usd_per_gpu_hour, "break_even_on_demand",
                                           isfinite(od) ? od : -1.0, "break_even_spot", isfinite(spot) ? spot : -1.0));
    }
    return a;
}

void report_print_json(const PlanAnswer *r) {
    const PlanInput *in = &r->in;
    json_t *schedule = json_array();
    for (int i = 0; i < in->batch.n; i++)
        json_array_append_new(schedule, json_pack("{s:f, s:f}", "from_tokens", in->batch.from[i], "batch_tokens", in->batch.batch[i]));
    const Reliability *rel = &r->reliability;
    double ratio = r->plan.batch_tokens / r->critical_batch;
    json_t *root = json_pack(
        "{s:o, s:o, s:s, s:s, s:{s:o, s:f}, s:o, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}, s:{s:f, s:o}, "
        "s:{s:f, s:b, s:f, s:f, s:f, s:b}}",
        "model", model_json(&in->model), "fleet", fleet_json(&in->fleet, in->precision), "precision",
        precision_name(in->precision), "attention", attention_name(in->attention), "training", "batch_schedule", schedule,
        "total_tokens", in->total_tokens, "plan", result_json(r, &r->plan), "reliability", "mtbf_gpu_hours",
        r->reliability_in.mtbf_gpu_hours, "job_mtbf_s", rel->job_mtbf_s, "checkpoint_s", r->reliability_in.checkpoint_seconds,
        "restart_s", r->reliability_in.restart_seconds, "young_interval_s", rel->young_s, "daly_interval_s", rel->daly_s,
        "interruptions", rel->interruptions, "goodput", rel->goodput, "wall_s", rel->wall_s, "cost", "usd", r->cost_usd,
        "rates", money_json(r), "batch", "loss", r->loss, "loss_given", r->loss_given, "critical_batch_tokens",
        r->critical_batch, "ratio", ratio, "data_inefficiency", data_inefficiency(r->plan.batch_tokens, r->critical_batch),
        "warning", ratio > 2);
    if (r->have_reference)
        json_object_set_new(root, "reference", json_pack("{s:i, s:f}", "gpus", r->reference_gpus, "efficiency", r->reference_efficiency));
    if (r->note[0]) json_object_set_new(root, "note", json_string(r->note));
    json_object_set_new(root, "assumptions", plan_stack_json(&r->assumptions));
    if (r->linear_efficiency > 0) json_object_set_new(root, "linear_efficiency", json_real(r->linear_efficiency));
    if (r->searched) {
        json_t *layouts = json_array();
        for (int i = 0; i < r->n_top; i++) {
            json_t *one = result_json(r, &r->top[i]);
            json_object_set_new(one, "cost_usd", json_real(r->top_cost[i]));
            json_array_append_new(layouts, one);
        }
        json_object_set_new(root, "search", json_pack("{s:I, s:I, s:f, s:s, s:o, s:s}", "evaluated", (json_int_t)r->stats.evaluated,
                                                      "fitting", (json_int_t)r->stats.fitting, "seconds", r->search_seconds,
                                                      "rank_by", r->rank_by, "layouts", layouts, "why", r->why));
    }
    if (r->n_alone) {
        json_t *alts = json_array();
        for (int i = 0; i < r->n_alone; i++) {
            const FleetAlternative *a = &r->alone[i];
            json_t *one = json_pack("{s:s, s:i, s:b, s:f}", "fleet", a->label, "gpus", a->gpus, "fits", a->found, "cost_usd", a->cost_usd);
            if (a->found) json_object_set_new(one, "plan", result_json(r, &a->best));
            json_array_append_new(alts, one);
        }
        json_object_set_new(root, "alternatives", alts);
    }
    if (r->n_points) {
        json_t *pts = json_array();
        for (int i = 0; i < r->n_points; i++) {
            const ScalePoint *s = &r->points[i];
            json_t *one = json_pack("{s:i, s:b, s:f, s:f}", "gpus", s->gpus, "found", s->found, "efficiency", s->efficiency,
                                    "linear_efficiency", s->linear);
            if (s->found) json_object_set_new(one, "plan", result_json(r, &s->best));
            json_array_append_new(pts, one);
        }
        json_object_set_new(root, "scaling", json_pack("{s:s, s:i, s:o}", "mode", r->weak ? "weak" : "strong", "baseline_gpus",
                                                       r->baseline >= 0 ? r->points[r->baseline].gpus : 0, "points", pts));
    }
    if (!root) bs_die("internal error: could not build the JSON report");
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    printf("%s\n", text);
    free(text);
    json_decref(root);
}
