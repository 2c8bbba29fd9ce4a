/* cmd_plan.c: `batchscale plan`: flags (or a JSON config) -> the job, the
 * fleet and a layout or a search -> the report (table, JSON, chart).
 *
 * This file only turns options into plan/ inputs and picks what to ask;
 * the answer (search, comparisons, explanation) is plan/answer.h's, the
 * printing plan_report.c's, plan_json.c's and plan_plot.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/config_file.h"
#include "cli/plan_config.h"
#include "cli/subject_flags.h"
#include "cli/plan_report.h"
#include "cli/plan_stack.h"
#include "core/error.h"
#include "core/timer.h"
#include "plan/pipeline_engine.h"
#include "plan/presets.h"

/* The words of the plan's enumerated flags, in the order their indices mean. */
static const char *const GRAD_REDUCE_WORDS[] = {"weights", "fp32", NULL};
static const char *const ZERO1_REDUCE_WORDS[] = {"reduce-scatter", "allreduce", NULL};
static const char *const LAYER_SPLIT_WORDS[] = {"balanced", "even", NULL};
static const char *const MOE_PROBS_WORDS[] = {"combine", "activation", NULL};
static const char *const FP8_LINEARS_WORDS[] = {"te", "te-delayed", "torchao", NULL};
static const char *const ON_OFF_WORDS[] = {"on", "off", NULL};
enum { ON, OFF }; /* ON_OFF_WORDS */

typedef struct {
    const char *model, *activation, *attention, *precision, *hardware, *calibrate;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, seq_len, experts, top_k;
    int shared_experts, moe_device_limit, moe_node_limit;
    int attention_window, window_layers, mtp_layers;
    double moe_imbalance;
    bool dropout;
    long long global_batch, batch_tokens, tokens;
    const char *batch_schedule;
    int gpus;
    double peak_tflops, gemm_efficiency, hbm_gb, hbm_tbps, nvlink_gbps, net_gbps, net_latency_us;
    int gpus_per_node;
    int tp, pp, dp, cp, ep, etp, zero, micro_batch, virtual_stages;
    int recompute, schedule; /* indices into their words; -1: not given (searched, or the default) */
    int sequence_parallel, overlap, in_network, tp_overlap, pp_overlap; /* ON or OFF */
    int cp_algo, rank_order, ep_overlap; /* indices into their words */
    int grad_reduce, pipeline_engine, zero1_reduce, layer_split, moe_probs, fp8_linears; /* indices into their words */
    int first_stage_layers, last_stage_layers;
    bool search;
    int top;
    const char *rank_by;
    double jitter, reserve_gb;
    double mtbf_gpu_hours, ckpt_seconds, ckpt_write_gbps, restart_minutes, target_loss;
    const char *usd, *gpu_price, *power, *on_demand, *spot;
    double amortize_years, hours_per_year;
    bool json, scaling;
    const char *plot, *scaling_mode, *config;
    const char *stack;       /* --stack NAME[@VERSION] */
    Assumptions assumptions; /* each modelling switch's origin (plan_stack.c) */
    int scaling_from, scaling_to;
} PlanArgs;

static PlanArgs plan_args_defaults(void) {
    PlanArgs a = {0};
    a.hardware = "h100-sxm";
    a.precision = "bf16";
    a.zero = -1;
    a.top = 10;
    a.rank_by = "time";
    a.jitter = 0.01;
    a.moe_imbalance = 1.0;
    a.reserve_gb = -1;
    a.mtbf_gpu_hours = LLAMA3_MTBF_GPU_HOURS;
    a.ckpt_seconds = -1;
    a.ckpt_write_gbps = 100;
    a.restart_minutes = 10;
    a.amortize_years = 4;
    a.hours_per_year = 8766;
    a.scaling_mode = "weak";
    a.scaling_from = 8;
    a.scaling_to = 16384;
    a.recompute = a.schedule = -1;
    return a;
}

static const char USAGE[] =
    "usage: batchscale plan [options]\n\n"
    "Sizes a training run before paying for it: memory per GPU, step time, MFU,\n"
    "time and cost to train, failures, for an explicit layout or the best ones\n"
    "(--search; also when no layout option is given). Model and hardware\n"
    "presets, formulas and their sources: docs/PLANNER.md.\n\n"
    "  batchscale plan --model llama3-405b --gpus 16384 --hardware h100-sxm --search\n"
    "  batchscale plan --model gpt3-175b --gpus 1024 --tp 8 --pp 8 --recompute selective\n"
    "  batchscale plan --model llama3-70b --hardware a100-80g:512,h100-sxm:512 --search\n"
    "  batchscale plan --config job.json --json";

/* A list of one number per fleet kind ("2.5" or "1.2,2.5"). */
static void parse_per_kind(const char *flag, const char *text, int kinds, double *out) {
    for (int k = 0; k < PLAN_MAX_KINDS; k++) out[k] = 0;
    if (!text || !*text) return;
    const char *p = text;
    for (int k = 0; k < kinds; k++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || v < 0 || !isfinite(v)) bs_die("--%s '%s': expected a number per GPU kind (e.g. 2.5 or 1.2,2.5)", flag, text);
        out[k] = v;
        if (*end == ',') {
            p = end + 1;
            if (k == kinds - 1) bs_die("--%s '%s': %d values for %d GPU kinds", flag, text, k + 2, kinds);
        } else if (*end == '\0') {
            for (int j = k + 1; j < kinds; j++) out[j] = v; /* one value: the same for every kind */
            return;
        } else {
            bs_die("--%s '%s': expected a number per GPU kind (e.g. 2.5 or 1.2,2.5)", flag, text);
        }
    }
}

static ModelShape build_model(const PlanArgs *a, double *batch_tokens, double *train_tokens) {
    ModelShape m = {0};
    *batch_tokens = *train_tokens = 0;
    if (a->model) {
        ModelPreset p;
        if (!model_preset(a->model, &p)) {
            char names[512];
            model_preset_names(names, sizeof names);
            bs_die("--model '%s' is not a preset (%s); or give --layers, --hidden, --heads", a->model, names);
        }
        m = p.shape;
        *batch_tokens = p.batch_tokens;
        *train_tokens = p.train_tokens;
    } else {
        if (a->layers <= 0 || a->hidden <= 0 || a->heads <= 0)
            bs_die("give --model NAME or an explicit shape: --layers, --hidden and --heads (see --help)");
        bool swiglu = a->activation && strcmp(a->activation, "swiglu") == 0;
        /* GELU shapes follow GPT-2/3 (biases, tied embeddings, learned positions),
         * SwiGLU shapes follow Llama (no biases, untied, RMSNorm, rotary positions). */
        m = (ModelShape){.vocab = 50257, .seq_len = 2048, .vocab_multiple = 1, .act = swiglu ? ACT_SWIGLU : ACT_GELU,
                         .norm = swiglu ? NORM_RMSNORM : NORM_LAYERNORM, .bias = !swiglu, .tied_embeddings = !swiglu,
                         .learned_positions = !swiglu};
        snprintf(m.name, sizeof m.name, "custom");
        m.ffn = swiglu ? (int)ceil(8.0 * a->hidden / 3.0 / 256.0) * 256 : 4 * a->hidden;
    }
    if (a->layers > 0) m.layers = a->layers;
    if (a->hidden > 0) m.hidden = a->hidden;
    if (a->heads > 0) m.heads = a->heads, m.kv_heads = a->heads;
    if (!a->model && a->ffn <= 0 && a->hidden > 0 && m.act == ACT_GELU) m.ffn = 4 * m.hidden;
    if (a->kv_heads > 0) m.kv_heads = a->kv_heads;
    if (a->head_dim > 0) m.head_dim = a->head_dim;
    if (m.kv_heads <= 0) m.kv_heads = m.heads;
    if (a->ffn > 0) m.ffn = a->ffn;
    if (a->vocab > 0) m.vocab = a->vocab;
    if (a->seq_len > 0) m.seq_len = a->seq_len;
    if (a->experts > 0) m.experts = a->experts, m.top_k = a->top_k > 0 ? a->top_k : 2;
    if (a->top_k > 0) m.top_k = a->top_k;
    m.moe_imbalance = a->moe_imbalance;
    m.shared_experts = a->shared_experts;
    m.moe_device_limit = a->moe_device_limit;
    m.moe_node_limit = a->moe_node_limit;
    /* a stack's MoE setting leaves a dense model as it is */
    m.moe_probs_in_activation = a->moe_probs == 1 && (m.experts > 1 || a->assumptions.origin[SWITCH_MOE_PROBS] != ORIGIN_STACK);
    m.fp8_linears = (Fp8Linears)a->fp8_linears;
    m.attention_window = a->attention_window;
    m.window_layers = a->attention_window > 0 && a->window_layers == 0 ? m.layers : a->window_layers;
    m.mtp_layers = a->mtp_layers;
    if (a->dropout) m.dropout = true;
    if (a->activation) {
        if (strcmp(a->activation, "gelu") == 0) m.act = ACT_GELU;
        else if (strcmp(a->activation, "swiglu") == 0) m.act = ACT_SWIGLU;
        else bs_die("--activation must be gelu or swiglu (got '%s')", a->activation);
    }
    char why[256];
    if (!model_check(&m, why, sizeof why)) bs_die("%s", why);
    return m;
}

static void apply_hardware_overrides(const PlanArgs *a, Fleet *f) {
    bool any = a->peak_tflops > 0 || a->gemm_efficiency > 0 || a->hbm_gb > 0 || a->hbm_tbps > 0 || a->nvlink_gbps > 0 ||
               a->net_gbps > 0 || a->net_latency_us > 0 || a->gpus_per_node > 0;
    if (!any) return;
    if (f->kinds > 1) bs_die("hardware overrides (--peak-tflops, --hbm-gb, ...) need a single --hardware kind");
    Hardware *hw = &f->hw[0];
    if (a->peak_tflops > 0) hw->peak_bf16 = hw->peak_fp32 = a->peak_tflops * 1e12, hw->peak_fp8 = 2 * a->peak_tflops * 1e12;
    if (a->gemm_efficiency > 0) hw->gemm_efficiency = a->gemm_efficiency;
    if (a->hbm_gb > 0) hw->hbm_bytes = a->hbm_gb * 1073741824.0;
    if (a->hbm_tbps > 0) hw->hbm_bw = a->hbm_tbps * 1e12;
    if (a->nvlink_gbps > 0) hw->nvlink_bw = a->nvlink_gbps * 1e9;
    if (a->net_gbps > 0) hw->net_bw = a->net_gbps * 1e9;
    if (a->net_latency_us > 0) hw->net_latency = a->net_latency_us * 1e-6;
    if (a->gpus_per_node > 0) hw->gpus_per_node = a->gpus_per_node;
    size_t len = strlen(hw->name); /* a star marks a preset with overrides */
    if (len + 1 < sizeof hw->name) hw->name[len] = '*', hw->name[len + 1] = '\0';
}

/* "h100-sxm" (with --gpus) or "a100-80g:8192,h100-sxm:8192". */
static Fleet build_fleet(const PlanArgs *a, char *note, size_t note_size) {
    Fleet f = {0};
    note[0] = '\0';
    if (a->calibrate) {
        calibration_read(a->calibrate, &f.hw[0], note, note_size);
        f.kinds = 1;
        f.count[0] = a->gpus > 0 ? a->gpus : f.hw[0].gpus_per_node;
        int calibrated_node = f.hw[0].gpus_per_node;
        apply_hardware_overrides(a, &f);
        Hardware *hw = &f.hw[0];
        if (a->hbm_gb <= 0) hw->hbm_bytes *= (double)calibrated_node / hw->gpus_per_node; /* the node's memory, split */
        double share = hardware_share_cores(hw);
        if (share < 1) {
            size_t used = strlen(note);
            snprintf(note + used, note_size - used, "%s%d processes of %d thread%s share %d cores: each runs %.0f%% of the time",
                     used ? "; " : "", hw->gpus_per_node, hw->threads_per_gpu, hw->threads_per_gpu > 1 ? "s" : "",
                     hw->cpu_cores, 100 * share);
        }
        return f;
    }
    char spec[256];
    snprintf(spec, sizeof spec, "%s", a->hardware);
    char *save = NULL;
    for (char *part = strtok_r(spec, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        if (f.kinds == PLAN_MAX_KINDS) bs_die("--hardware '%s': at most %d GPU kinds", a->hardware, PLAN_MAX_KINDS);
        char *colon = strchr(part, ':');
        if (colon) *colon = '\0';
        if (!hardware_preset(part, &f.hw[f.kinds])) {
            char names[256];
            hardware_preset_names(names, sizeof names);
            bs_die("--hardware: unknown GPU '%s' (presets: %s; or --calibrate FILE)", part, names);
        }
        double count;
        if (colon && (!parse_count(colon + 1, &count) || count < 1 || count != floor(count) || count > 1e7))
            bs_die("--hardware '%s': '%s' is not a GPU count", a->hardware, colon + 1);
        f.count[f.kinds] = colon ? (int)count : 0;
        f.kinds++;
    }
    if (f.kinds == 0) bs_die("--hardware is empty");
    if (f.kinds == 1 && f.count[0] == 0) f.count[0] = a->gpus > 0 ? a->gpus : f.hw[0].gpus_per_node;
    for (int k = 0; k < f.kinds; k++)
        if (f.count[k] == 0) bs_die("--hardware '%s': a mixed fleet needs a count per kind (e.g. a100-80g:8192,h100-sxm:8192)", a->hardware);
    if (a->gpus > 0 && fleet_gpus(&f) != a->gpus)
        bs_die("--gpus %d disagrees with --hardware '%s' (%d GPUs): drop one of them", a->gpus, a->hardware, fleet_gpus(&f));
    apply_hardware_overrides(a, &f);
    bool in_network = a->in_network == ON;
    for (int k = 0; k < f.kinds; k++) f.hw[k].in_network = in_network;
    return f;
}

static bool layout_given(const PlanArgs *a) {
    return a->tp > 0 || a->pp > 0 || a->dp > 0 || a->cp > 0 || a->ep > 0 || a->micro_batch > 0 || a->zero >= 0 ||
           a->virtual_stages > 0 || a->recompute >= 0 || a->schedule >= 0;
}

/* Neither --rank-order nor the stack set the order: the planner's default, per layout (rank_order_default). */
static bool order_is_default(const PlanArgs *a) { return a->assumptions.origin[SWITCH_RANK_ORDER] == ORIGIN_DEFAULT; }

static Layout explicit_layout(const PlanArgs *a, const PlanInput *in) {
    Layout l = layout_default();
    l.tp = a->tp > 0 ? a->tp : 1;
    l.pp = a->pp > 0 ? a->pp : 1;
    l.cp = a->cp > 0 ? a->cp : 1;
    l.ep = a->ep > 0 ? a->ep : 1;
    int gpus = fleet_gpus(&in->fleet), model_par = l.tp * l.pp * l.cp;
    l.dp = a->dp > 0 ? a->dp : (gpus % model_par == 0 ? gpus / model_par : 0);
    if (l.dp == 0)
        bs_die("--tp %d x --cp %d x --pp %d = %d does not divide the fleet's %d GPUs: change --tp, --cp, --pp or --gpus", l.tp,
               l.cp, l.pp, model_par, gpus);
    l.micro_batch = a->micro_batch > 0 ? a->micro_batch : 1;
    l.zero = a->zero >= 0 ? a->zero : (l.dp * l.cp > 1 ? 1 : 0);
    if (a->recompute >= 0) l.recompute = (Recompute)a->recompute;
    l.virtual_stages = a->virtual_stages > 0 ? a->virtual_stages : 1;
    l.schedule = a->schedule >= 0 ? (PlanSchedule)a->schedule : (l.virtual_stages > 1 ? SCHEDULE_INTERLEAVED : SCHEDULE_1F1B);
    l.sequence_parallel = a->sequence_parallel == ON && l.tp > 1;
    l.overlap = a->overlap == ON;
    l.cp_algo = (CpAlgo)a->cp_algo;
    l.tp_overlap = a->tp_overlap == ON && l.tp > 1;
    l.pp_overlap = a->pp_overlap == ON && l.schedule == SCHEDULE_INTERLEAVED;
    l.rank_order = order_is_default(a) ? rank_order_default(l.ep) : (RankOrder)a->rank_order;
    l.ep_overlap = l.ep > 1 ? (EpOverlap)a->ep_overlap : EP_OVERLAP_OFF;
    l.etp = a->etp;
    return l;
}

static SearchSpace search_space(const PlanArgs *a) {
    SearchSpace s = search_space_all(a->top);
    s.tp = a->tp, s.pp = a->pp, s.dp = a->dp, s.cp = a->cp, s.ep = a->ep, s.micro_batch = a->micro_batch;
    s.virtual_stages = a->virtual_stages;
    s.zero = a->zero;
    if (a->recompute >= 0) s.recompute = a->recompute;
    if (a->schedule >= 0) s.schedule = a->schedule;
    s.overlap = a->overlap == ON;
    s.sequence_parallel = a->sequence_parallel == ON;
    s.cp_algo = (CpAlgo)a->cp_algo;
    s.tp_overlap = a->tp_overlap == ON;
    s.pp_overlap = a->pp_overlap == ON;
    s.rank_order = (RankOrder)a->rank_order;
    s.rank_order_default = order_is_default(a);
    s.ep_overlap = (EpOverlap)a->ep_overlap;
    s.etp = a->etp;
    return s;
}

static void die_fits_nowhere(const PlanAnswer *r) {
    const PlanResult *lean = &r->stats.least_memory;
    const Hardware *hw = &r->in.fleet.hw[lean->memory_kind];
    int gpus = fleet_gpus(&r->in.fleet);
    if (!r->stats.have_least_memory) { /* nothing passed layout_check: say why for plain data parallelism */
        char why[512];
        Layout l = layout_default();
        l.dp = gpus;
        if (!layout_check(&r->in, &l, why, sizeof why)) bs_die("no layout of %d GPUs can run this job; data parallelism alone: %s", gpus, why);
        bs_die("no layout of %d GPUs can split this job (global batch, heads, layers): change --gpus or the batch", gpus);
    }
    char layout[128];
    layout_format(&lean->layout, layout, sizeof layout);
    double need = lean->memory.total - lean->memory.reserve, usable = lean->memory.capacity - lean->memory.reserve;
    double factor = need / usable;
    long suggest = 1;
    while (suggest < (long)ceil(gpus * factor)) suggest *= 2;
    bs_die("%s does not fit on %d x %s with any layout: the leanest (%s) needs %.1f GiB per GPU of %.1f GiB usable: use about %ld GPUs or more, GPUs with more memory, or a shorter --seq-len",
           r->in.model.name, gpus, hw->name, layout, need / 1073741824.0, usable / 1073741824.0, suggest);
}

/* The batch over training (a schedule or one batch, whole sequences), and how many tokens in all. */
static void set_batch(const PlanArgs *a, PlanInput *in, double preset_batch, double preset_tokens) {
    double seq = in->model.seq_len;
    in->total_tokens = a->tokens > 0 ? (double)a->tokens : preset_tokens > 0 ? preset_tokens : 20.0 * model_params(&in->model);
    char why[512];
    if (a->batch_schedule) {
        if (a->global_batch > 0 || a->batch_tokens > 0) bs_die("give --batch-schedule or a fixed --global-batch / --batch-tokens, not both");
        if (!plan_batch_parse(a->batch_schedule, &in->batch, why, sizeof why)) bs_die("%s", why);
    } else {
        double tokens = a->global_batch > 0 ? (double)a->global_batch * seq : (double)a->batch_tokens;
        if (a->global_batch > 0 && a->batch_tokens > 0) bs_die("give --global-batch (sequences) or --batch-tokens, not both");
        if (tokens <= 0) tokens = fmax(1.0, round((preset_batch > 0 ? preset_batch : 4194304.0) / seq)) * seq;
        in->batch = plan_batch_constant(tokens);
    }
    for (int i = 0; i < in->batch.n; i++) {
        double seqs = in->batch.batch[i] / seq;
        if (seqs != floor(seqs))
            bs_die("%s: %.0f tokens is not a whole number of %d-token sequences: use a multiple of %d (e.g. %.0f)",
                   a->batch_schedule ? "--batch-schedule" : "--batch-tokens", in->batch.batch[i], (int)seq, (int)seq,
                   fmax(1.0, round(seqs)) * seq);
    }
}

/* The rates per GPU kind, the failure model's inputs, the loss the critical batch is read at, and what to rank by
 * and how to scale. */
static void set_costs(const PlanArgs *a, PlanAnswer *r) {
    const PlanInput *in = &r->in;
    MoneyInput *money = r->money;
    double rate[PLAN_MAX_KINDS], price[PLAN_MAX_KINDS], power[PLAN_MAX_KINDS], od[PLAN_MAX_KINDS], spot[PLAN_MAX_KINDS];
    int kinds = in->fleet.kinds;
    parse_per_kind("usd-per-gpu-hour", a->usd, kinds, rate);
    parse_per_kind("gpu-price-usd", a->gpu_price, kinds, price);
    parse_per_kind("power-usd-per-gpu-hour", a->power, kinds, power);
    parse_per_kind("on-demand-usd-per-gpu-hour", a->on_demand, kinds, od);
    parse_per_kind("spot-usd-per-gpu-hour", a->spot, kinds, spot);
    for (int k = 0; k < kinds; k++)
        money[k] = (MoneyInput){rate[k], price[k], a->amortize_years, a->hours_per_year, power[k], od[k], spot[k]};

    StateBytes sb = state_bytes(in->precision);
    r->reliability_in.mtbf_gpu_hours = a->mtbf_gpu_hours;
    r->reliability_in.checkpoint_seconds =
        a->ckpt_seconds >= 0 ? a->ckpt_seconds : model_params(&in->model) * (sb.weights + sb.optimizer) / (a->ckpt_write_gbps * 1e9);
    r->reliability_in.restart_seconds = a->restart_minutes * 60.0;

    double non_embedding = model_params(&in->model) - model_embedding_params(&in->model);
    r->loss_given = a->target_loss > 0;
    r->loss = r->loss_given ? a->target_loss : kaplan_loss(non_embedding, in->total_tokens);
    r->critical_batch = critical_batch_tokens(r->loss);
    r->rank_by = a->rank_by;
    if (strcmp(a->rank_by, "time") != 0 && strcmp(a->rank_by, "cost") != 0) bs_die("--rank-by must be time or cost (got '%s')", a->rank_by);
    if (strcmp(a->scaling_mode, "weak") != 0 && strcmp(a->scaling_mode, "strong") != 0)
        bs_die("--scaling-mode must be weak or strong (got '%s')", a->scaling_mode);
    r->weak = strcmp(a->scaling_mode, "weak") == 0;
}

/* Searches (or evaluates the given layout) and completes the answer. */
static void answer(const PlanArgs *a, PlanAnswer *r) {
    PlanInput *in = &r->in;
    char why[512];
    SearchSpace space = search_space(a);
    plan_stack_restrict(&a->assumptions, &space);
    if (a->search || !layout_given(a)) {
        const bool by_cost = strcmp(a->rank_by, "cost") == 0;
        if (by_cost && in->fleet.kinds > 1) bs_die("--rank-by cost needs one GPU kind (it varies the GPU count)");
        double t0 = bs_now();
        plan_answer_search(r, &space, by_cost);
        r->search_seconds = bs_now() - t0;
        if (r->n_top == 0) die_fits_nowhere(r);
    } else {
        Layout l = explicit_layout(a, in);
        if (!layout_check(in, &l, why, sizeof why)) bs_die("%s", why);
        plan_evaluate(in, &l, &r->plan);
    }
    r->assumptions = a->assumptions;
    assumptions_read_values(&r->assumptions, in, &r->plan.layout);
    if (r->searched) assumptions_check_search(&r->assumptions, in, &r->plan);
    const bool scaling = a->scaling || a->plot;
    if (scaling && in->fleet.kinds > 1) bs_die("--scaling and --plot need a single GPU kind");
    if (scaling && (a->scaling_from < 1 || a->scaling_to < a->scaling_from))
        bs_die("--scaling-from must be >= 1 and <= --scaling-to");
    plan_answer_finish(r, &space, scaling, a->scaling_from, a->scaling_to);
}

static void run(const PlanArgs *a) {
    PlanAnswer *r = bs_calloc(1, sizeof *r);
    PlanInput *in = &r->in;
    double preset_batch, preset_tokens;
    in->model = build_model(a, &preset_batch, &preset_tokens);
    in->fleet = build_fleet(a, r->note, sizeof r->note);
    if (!precision_parse(a->precision, &in->precision)) bs_die("--precision must be bf16, fp8 or fp32 (got '%s')", a->precision);
    if (a->calibrate) in->precision = in->fleet.hw[0].peak_bf16 > 0 ? PREC_BF16 : PREC_FP32; /* as measured */
    if (in->precision != PREC_FP8 && a->assumptions.origin[SWITCH_FP8_LINEARS] == ORIGIN_STACK)
        in->model.fp8_linears = FP8_TE; /* a stack's FP8 linears leave a BF16 run as it is */
    if (in->model.fp8_linears != FP8_TE && in->precision != PREC_FP8)
        bs_die("--fp8-linears %s needs --precision fp8", FP8_LINEARS_WORDS[in->model.fp8_linears]);
    for (int k = 0; k < in->fleet.kinds; k++)
        if (hardware_peak(&in->fleet.hw[k], in->precision) <= 0)
            bs_die("%s has no %s peak: use --precision bf16", in->fleet.hw[k].name, precision_name(in->precision));
    in->attention = !a->calibrate ? ATTN_FLASH : in->fleet.hw[0].attention_flops > 0 ? ATTN_FLASH2 : ATTN_CAUSAL;
    if (a->attention && !attention_parse(a->attention, &in->attention))
        bs_die("--attention must be full, causal, flash or flash2 (got '%s')", a->attention);
    in->jitter = a->jitter;
    in->grad_reduce_fp32 = a->grad_reduce == 1;
    in->pipe_engine = (PipelineEngine)a->pipeline_engine;
    in->zero1_allreduce = a->zero1_reduce == 1;
    in->split = (LayerSplit){.even = a->layer_split == 1, .first = a->first_stage_layers, .last = a->last_stage_layers};
    in->reserve_bytes = a->reserve_gb >= 0 ? a->reserve_gb * 1073741824.0 : -1;

    set_batch(a, in, preset_batch, preset_tokens);
    set_costs(a, r);
    answer(a, r);
    if (a->json) report_print_json(r);
    else report_print(r);
    if (a->plot) report_plot(r, a->plot);
    if (!r->plan.fits) {
        const MemoryBreakdown *m = &r->plan.memory;
        const double gib = 1073741824.0;
        bs_die("this layout does not fit: it needs %.1f GiB per GPU (activations %.1f GiB), %.1f GiB usable on %s: try --recompute full, --zero 3, a larger --pp or --tp, or --search",
               (m->total - m->reserve) / gib, m->activations / gib, (m->capacity - m->reserve) / gib,
               in->fleet.hw[r->plan.memory_kind].name);
    }
    free(r);
}

int cmd_plan(int argc, char **argv) {
    cli_name_plan_subjects(); /* the planner's reasons name plan's flags (--hidden, --ffn, --zero) */
    PlanArgs a = plan_args_defaults();
    const OptionSpec specs[] = {
        {"config", OPT_STRING, &a.config, OPT_NO_RANGE, "FILE", "JSON object of these options (keys without --); flags override it", NULL, NULL},
        {"model", OPT_STRING, &a.model, OPT_NO_RANGE, "NAME", "preset: gpt2-124m/350m/774m/1.5b, gpt3-175b, llama3-8b/70b/405b, mixtral-8x7b, demo", NULL, NULL},
        {"layers", OPT_INT, &a.layers, 0, 100000, "N", "transformer blocks (overrides the preset)", NULL, NULL},
        {"hidden", OPT_INT, &a.hidden, 0, 1 << 20, "N", "model width", NULL, NULL},
        {"heads", OPT_INT, &a.heads, 0, 1 << 16, "N", "attention heads", NULL, NULL},
        {"kv-heads", OPT_INT, &a.kv_heads, 0, 1 << 16, "N", "key/value heads (GQA; default: heads)", NULL, NULL},
        {"head-dim", OPT_INT, &a.head_dim, 0, 1 << 16, "N", "dimension per head (default hidden / heads)", NULL, NULL},
        {"ffn", OPT_INT, &a.ffn, 0, 1 << 24, "N", "MLP width (default 4 x hidden; SwiGLU 8/3 x hidden)", NULL, NULL},
        {"activation", OPT_STRING, &a.activation, OPT_NO_RANGE, "gelu|swiglu", "MLP kind (explicit shapes: gelu = GPT style, swiglu = Llama style)", NULL, NULL},
        {"vocab", OPT_INT, &a.vocab, 0, 1 << 30, "N", "vocabulary size", NULL, NULL},
        {"seq-len", OPT_INT, &a.seq_len, 0, 1 << 24, "TOKENS", "sequence length", NULL, NULL},
        {"experts", OPT_INT, &a.experts, 0, 4096, "N", "MoE experts per layer (0: dense)", NULL, NULL},
        {"top-k", OPT_INT, &a.top_k, 0, 4096, "N", "MoE experts per token", NULL, NULL},
        {"moe-imbalance", OPT_DOUBLE, &a.moe_imbalance, 1, 1e3, "F",
         "MoE: busiest expert rank's tokens over the mean (1: balanced, as loss-free balancing)", NULL, NULL},
        {"shared-experts", OPT_INT, &a.shared_experts, 0, 4096, "N", "MoE: experts every token also passes through, on every rank (DeepSeekMoE)", NULL, NULL},
        {"moe-device-limit", OPT_INT, &a.moe_device_limit, 0, 4096, "M", "MoE: a token's experts on at most M EP ranks, sent once to each (DeepSeek-V2; 0: none)", NULL, NULL},
        {"moe-node-limit", OPT_INT, &a.moe_node_limit, 0, 1 << 20, "M", "MoE: ... on at most M nodes, once over the network to each (DeepSeek-V3; 0: none)", NULL, NULL},
        {"fp8-linears", OPT_ENUM, &a.fp8_linears, OPT_NO_RANGE, "te|te-delayed|torchao", "FP8: whose linear layers (te: Transformer Engine, FP8 copies of the inputs kept; te-delayed: and under delayed scaling the norms write the QKV and FC1 inputs in FP8; torchao: Float8Linear, BF16 inputs kept, w1 and w3 cast apart)", "te", FP8_LINEARS_WORDS},
        {"moe-probs", OPT_ENUM, &a.moe_probs, OPT_NO_RANGE, "combine|activation", "MoE: where the routing probabilities scale the experts (activation: Megatron-core >= 0.13's weighted SwiGLU, which keeps no expert output)", "combine", MOE_PROBS_WORDS},
        {"dropout", OPT_FLAG, &a.dropout, OPT_NO_RANGE, "", "the model stores dropout masks (Megatron GPT)", NULL, NULL},
        {"attention", OPT_STRING, &a.attention, OPT_NO_RANGE, "full|causal|flash|flash2", "attention kernel (default flash; flash2: FlashAttention-2, slower on Hopper; with --calibrate: causal, flash2 on a device)", NULL, NULL},
        {"attention-window", OPT_INT, &a.attention_window, 0, 1 << 30, "W", "sliding window: a query sees at most W keys (fused kernels; 0: none)", NULL, NULL},
        {"window-layers", OPT_INT, &a.window_layers, 0, 1 << 20, "N", "layers with the window (default all; GPT-OSS: every other one)", NULL, NULL},
        {"mtp-layers", OPT_INT, &a.mtp_layers, 0, 64, "D", "multi-token prediction modules on the last stage, each a block, a 2h x h projection and one more output-layer pass (DeepSeek-V3: 1; 0: none)", NULL, NULL},
        {"precision", OPT_STRING, &a.precision, OPT_NO_RANGE, "bf16|fp8|fp32", "matmul precision (with --calibrate: the file's)", NULL, NULL},
        {"global-batch", OPT_LONG, &a.global_batch, 0, 1e12, "SEQS", "global batch in sequences (default: the preset's, else 4M tokens)", NULL, NULL},
        {"batch-tokens", OPT_LONG, &a.batch_tokens, 0, 1e15, "TOKENS", "global batch in tokens (k/M/G/T suffixes)", NULL, NULL},
        {"batch-schedule", OPT_STRING, &a.batch_schedule, OPT_NO_RANGE, "0:4M,252M:8M", "batch in tokens from a token count on", NULL, NULL},
        {"tokens", OPT_LONG, &a.tokens, 0, 1e18, "TOKENS", "tokens to train (default: the preset's, else 20 x parameters)", NULL, NULL},
        {"gpus", OPT_INT, &a.gpus, 0, 1e7, "N", "GPUs (default one node)", NULL, NULL},
        {"hardware", OPT_STRING, &a.hardware, OPT_NO_RANGE, "GPU[:N][,GPU:N]", "a100-40g, a100-80g, h100-sxm, h200, b200; two kinds make a mixed fleet", NULL, NULL},
        {"calibrate", OPT_STRING, &a.calibrate, OPT_NO_RANGE, "FILE", "this machine, from `batchscale bench --calibrate FILE`", NULL, NULL},
        {"peak-tflops", OPT_DOUBLE, &a.peak_tflops, 0, 1e6, "TFLOP/s", "override: dense peak at the precision", NULL, NULL},
        {"gemm-efficiency", OPT_DOUBLE, &a.gemm_efficiency, 0, 1, "X", "override: best fraction of peak for large matmuls", NULL, NULL},
        {"hbm-gb", OPT_DOUBLE, &a.hbm_gb, 0, 1e6, "GiB", "override: memory per GPU", NULL, NULL},
        {"hbm-tbps", OPT_DOUBLE, &a.hbm_tbps, 0, 1e3, "TB/s", "override: memory bandwidth", NULL, NULL},
        {"gpus-per-node", OPT_INT, &a.gpus_per_node, 0, 4096, "N", "override: GPUs in one NVLink domain", NULL, NULL},
        {"nvlink-gbps", OPT_DOUBLE, &a.nvlink_gbps, 0, 1e5, "GB/s", "override: NVLink per GPU per direction", NULL, NULL},
        {"net-gbps", OPT_DOUBLE, &a.net_gbps, 0, 1e5, "GB/s", "override: inter-node per GPU per direction", NULL, NULL},
        {"in-network-reduction", OPT_ENUM, &a.in_network, OPT_NO_RANGE, "on|off", "switches reduce all-reduces (NVLink SHARP where the GPU has it, InfiniBand SHARP)", "off", ON_OFF_WORDS},
        {"net-latency-us", OPT_DOUBLE, &a.net_latency_us, 0, 1e6, "US", "override: inter-node latency per step", NULL, NULL},
        {"tp", OPT_INT, &a.tp, 0, 1 << 20, "N", "tensor parallel (layout options pin a --search)", NULL, NULL},
        {"pp", OPT_INT, &a.pp, 0, 1 << 20, "N", "pipeline parallel", NULL, NULL},
        {"dp", OPT_INT, &a.dp, 0, 1 << 24, "N", "data parallel (default: GPUs / (tp x cp x pp))", NULL, NULL},
        {"cp", OPT_INT, &a.cp, 0, 1 << 20, "N", "context parallel", NULL, NULL},
        {"cp-algo", OPT_ENUM, &a.cp_algo, OPT_NO_RANGE, "ring|allgather", "context parallelism: ring (overlapped) or all-gather of K/V (exposed; Llama 3)", "ring", CP_ALGO_WORDS},
        {"ep", OPT_INT, &a.ep, 0, 1 << 20, "N", "expert parallel (MoE)", NULL, NULL},
        {"etp", OPT_INT, &a.etp, 0, 1 << 20, "N", "MoE: expert tensor parallel (0: tp; below tp, Megatron's expert_tensor_parallel_size)", NULL, NULL},
        {"zero", OPT_INT, &a.zero, -1, 3, "STAGE", "ZeRO stage over dp x cp (-1: 1 when dp > 1)", NULL, NULL},
        {"micro-batch", OPT_INT, &a.micro_batch, 0, 1 << 20, "SEQS", "sequences per micro-batch", NULL, NULL},
        {"recompute", OPT_ENUM, &a.recompute, OPT_NO_RANGE, "none|selective|full|op", "activation recomputation (default none; op: torchtitan's per-op policy)", NULL, RECOMPUTE_WORDS},
        {"schedule", OPT_ENUM, &a.schedule, OPT_NO_RANGE, "1f1b|gpipe|interleaved", "pipeline schedule", NULL, PLAN_SCHEDULE_WORDS},
        {"virtual-stages", OPT_INT, &a.virtual_stages, 0, 1024, "V", "model chunks per stage (interleaved)", NULL, NULL},
        {"sequence-parallel", OPT_ENUM, &a.sequence_parallel, OPT_NO_RANGE, "on|off", "shard norms and dropout over tp", "on", ON_OFF_WORDS},
        {"overlap", OPT_ENUM, &a.overlap, OPT_NO_RANGE, "on|off", "overlap DP communication with compute", "on", ON_OFF_WORDS},
        {"zero1-reduce", OPT_ENUM, &a.zero1_reduce, OPT_NO_RANGE, "reduce-scatter|allreduce", "ZeRO-1's gradient reduction (allreduce: DeepSpeed's BF16_Optimizer, all of a stage's gradients)", "reduce-scatter", ZERO1_REDUCE_WORDS},
        {"layer-split", OPT_ENUM, &a.layer_split, OPT_NO_RANGE, "balanced|even", "layers per pipeline stage: the planner's balance, or a framework's even split (Megatron-core, DeepSpeed type:transformer, torchtitan)", "balanced", LAYER_SPLIT_WORDS},
        {"first-stage-layers", OPT_INT, &a.first_stage_layers, 0, 100000, "N", "with --layer-split even: layers on the first stage (Megatron's num_layers_in_first_pipeline_stage; default: as the middle stages)", NULL, NULL},
        {"last-stage-layers", OPT_INT, &a.last_stage_layers, 0, 100000, "N", "with --layer-split even: layers on the last stage (num_layers_in_last_pipeline_stage)", NULL, NULL},
        {"pipeline-engine", OPT_ENUM, &a.pipeline_engine, OPT_NO_RANGE, "megatron|deepspeed", "whose pipeline sends the activations (deepspeed: PipelineEngine's blocking, partitioned sends)", "megatron", PIPELINE_ENGINE_WORDS},
        {"grad-reduce", OPT_ENUM, &a.grad_reduce, OPT_NO_RANGE, "weights|fp32", "precision of the gradient reduction (fp32: FSDP's reduce_dtype float32, Composer's DEFAULT)", "weights", GRAD_REDUCE_WORDS},
        {"tp-overlap", OPT_ENUM, &a.tp_overlap, OPT_NO_RANGE, "on|off", "TP collectives pipelined with their GEMMs (userbuffers; needs sequence parallelism)", "off", ON_OFF_WORDS},
        {"pp-overlap", OPT_ENUM, &a.pp_overlap, OPT_NO_RANGE, "on|off", "interleaved schedule: pipeline sends beside compute (Megatron's overlap_p2p_comm)", "off", ON_OFF_WORDS},
        {"ep-overlap", OPT_ENUM, &a.ep_overlap, OPT_NO_RANGE, "off|shared|dualpipe|combined-1f1b", "MoE all-to-all beside the shared experts (DeepSeek-V2), the paired micro-batch (DeepSeek-V3's DualPipe) or the adjacent micro-batch's forward/backward (Megatron-core's combined 1F1B)", "off", EP_OVERLAP_WORDS},
        {"rank-order", OPT_ENUM, &a.rank_order, OPT_NO_RANGE, "tp-cp-pp-dp|tp-cp-ep-dp-pp", "rank order: the engine's and Llama 3's, or Megatron's (ep next to cp, pp outermost; the default where ep > 1)", "tp-cp-pp-dp", RANK_ORDER_WORDS},
        {"stack", OPT_STRING, &a.stack, OPT_NO_RANGE, "NAME[@VERSION]", "training stack whose defaults set the modelling switches not given, and whose layouts bound --search: megatron-lm, megatron-core, nemo, deepspeed, llm-foundry, torchtitan (docs/reference/stacks.md)", NULL, NULL},
        {"search", OPT_FLAG, &a.search, OPT_NO_RANGE, "", "search all layouts (layout options pin fields)", NULL, NULL},
        {"top", OPT_INT, &a.top, 1, SEARCH_MAX_TOP, "N", "layouts to list", NULL, NULL},
        {"rank-by", OPT_STRING, &a.rank_by, OPT_NO_RANGE, "time|cost", "cost also tries fewer nodes", NULL, NULL},
        {"jitter", OPT_DOUBLE, &a.jitter, 0, 1, "CV", "per-GPU step-time variation (stragglers)", NULL, NULL},
        {"memory-reserve-gb", OPT_DOUBLE, &a.reserve_gb, -1, 1e6, "GiB", "per GPU not usable (-1: 1 GiB + 5%)", NULL, NULL},
        {"mtbf-gpu-hours", OPT_DOUBLE, &a.mtbf_gpu_hours, 1, 1e12, "H", "mean time between failures per GPU (default: Llama 3)", NULL, NULL},
        {"ckpt-seconds", OPT_DOUBLE, &a.ckpt_seconds, -1, 1e9, "S", "checkpoint write stall (-1: size / --ckpt-write-gbps)", NULL, NULL},
        {"ckpt-write-gbps", OPT_DOUBLE, &a.ckpt_write_gbps, 1e-6, 1e9, "GB/s", "aggregate checkpoint write bandwidth", NULL, NULL},
        {"restart-minutes", OPT_DOUBLE, &a.restart_minutes, 0, 1e6, "MIN", "detect, reschedule and reload after a failure", NULL, NULL},
        {"target-loss", OPT_DOUBLE, &a.target_loss, 0, 100, "NATS", "loss for the critical batch (default Kaplan L(N, D))", NULL, NULL},
        {"usd-per-gpu-hour", OPT_STRING, &a.usd, OPT_NO_RANGE, "USD[,USD]", "rate to plan with (per GPU kind)", NULL, NULL},
        {"gpu-price-usd", OPT_STRING, &a.gpu_price, OPT_NO_RANGE, "USD[,USD]", "ownership: price per GPU (with its server share)", NULL, NULL},
        {"amortize-years", OPT_DOUBLE, &a.amortize_years, 0.01, 100, "Y", "ownership: years to amortize over", NULL, NULL},
        {"hours-per-year", OPT_DOUBLE, &a.hours_per_year, 1, 8784, "H", "ownership: hours of use per year", NULL, NULL},
        {"power-usd-per-gpu-hour", OPT_STRING, &a.power, OPT_NO_RANGE, "USD[,USD]", "ownership: power and cooling", NULL, NULL},
        {"on-demand-usd-per-gpu-hour", OPT_STRING, &a.on_demand, OPT_NO_RANGE, "USD[,USD]", "cloud on-demand rate, shown beside", NULL, NULL},
        {"spot-usd-per-gpu-hour", OPT_STRING, &a.spot, OPT_NO_RANGE, "USD[,USD]", "cloud spot rate, shown beside", NULL, NULL},
        {"json", OPT_FLAG, &a.json, OPT_NO_RANGE, "", "print JSON instead of the table", NULL, NULL},
        {"scaling", OPT_FLAG, &a.scaling, OPT_NO_RANGE, "", "also sweep GPU counts (--scaling-from .. --scaling-to)", NULL, NULL},
        {"scaling-mode", OPT_STRING, &a.scaling_mode, OPT_NO_RANGE, "weak|strong", "weak keeps tokens per GPU, strong the batch", NULL, NULL},
        {"scaling-from", OPT_INT, &a.scaling_from, 1, 1e7, "N", "first GPU count of the sweep", NULL, NULL},
        {"scaling-to", OPT_INT, &a.scaling_to, 1, 1e7, "N", "last GPU count of the sweep", NULL, NULL},
        {"plot", OPT_STRING, &a.plot, OPT_NO_RANGE, "FILE", "scaling chart (.png or .svg)", NULL, NULL},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    ConfigArgs merged = config_file_expand(specs, n_specs, argc, argv); /* the file's options first: flags override */
    bool given[sizeof specs / sizeof specs[0]];
    const OptionTable table = {specs, n_specs, NULL, 0, given};
    bool go = options_parse_table(&table, merged.argc, merged.argv, USAGE);
    if (go) {
        a.search = a.search || !layout_given(&a); /* before the stack's values, which are not the user's layout */
        plan_stack_apply(a.stack, &table, a.search, &a.assumptions);
        if (a.plot) {
            const char *dot = strrchr(a.plot, '.');
            if (!dot || (strcasecmp(dot, ".png") != 0 && strcasecmp(dot, ".svg") != 0))
                bs_die("--plot %s: the file name must end in .png or .svg", a.plot);
        }
        run(&a);
    }
    config_args_free(&merged);
    return 0;
}
