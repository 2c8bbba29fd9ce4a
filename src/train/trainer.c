/* trainer.c: the training job (see trainer.h): set-up, the step loop with
 * gradient accumulation over data-parallel ranks, evaluation, sampling,
 * trace and checkpoints. The policies it applies live in their own files:
 * the guard (guard.h), --balance (balance.h), the step's statistics across
 * ranks (step_stats.h), injected faults (fault.h); what rank 0 prints and
 * writes is banner.h's, report.h's and metrics.h's. */
#include "train/trainer.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "core/io.h"
#include "core/rng.h"
#include "core/timer.h"
#include "core/trace.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "model/llmc_file.h"
#include "optim/grad_norm.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline.h"
#include "train/balance.h"
#include "train/banner.h"
#include "train/compression.h"
#include "train/fault.h"
#include "train/guard.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/report.h"
#include "train/sample.h"
#include "train/step_stats.h"
#include "train/train_ckpt.h"
#include "train/trainer_state.h"

void train_config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof *c);
    c->layers = 4;
    c->heads = 4;
    c->channels = 128;
    c->seq_len = 128;
    c->vocab_size = 0;
    c->tokenizer = c->vocab_dir = "";
    c->precision = "fp32";
    c->bf16_matmul = "auto";
    c->micro_batch = 8;
    c->steps = 100;
    c->lr = 1e-3;
    c->min_lr = 1e-4;
    c->warmup = 10;
    c->weight_decay = 0.1;
    c->grad_clip = 1.0;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->data = "data/train";
    c->val_data = "";
    c->data_order = "shuffled";
    c->seed = 1337;
    c->eval_every = 50;
    c->val_batches = 8;
    c->sample_tokens = 200;
    c->top_k = 40;
    c->temperature = 0.8;
    c->out = c->metrics = c->save_model = c->ckpt_dir = c->resume = c->init_from = "";
    c->keep_last = 3;
    c->log_every = 10;
    c->zero = 0;
    c->bucket_mb = 8;
    c->comm_algo = "ring";
    c->comm_timeout = 300;
    c->trace = c->inject_fault = "";
    c->optimizer = "adamw";
    c->momentum = 0.9;
    c->lars_eta = 1e-3;
    c->batch_schedule = "constant";
    c->lr_scaling = "none";
    c->noise_ema = 0.99;
    c->tp = c->pp = 1;
    c->spike_window = 50;
    c->max_skips = 10;
    c->straggler_threshold = 0.2;
    c->pp_schedule = "1f1b";
    c->pp_split = "";
    c->grad_compression = "none";
    c->compression_block = CODEC_DEFAULT_BLOCK;
    c->compression_scheme = "";
}

/* --bf16-matmul: where the bf16 products run (see kernels/matmul_bf16.h). onednn
 * in a bf16 run where oneDNN has no bf16 matmul (oneDNN 2.6 below AVX-512) is a
 * usage error, found here before any training work. */
static MatmulBF16Path bf16_matmul_path(const char *name, bool bf16) {
    if (strcmp(name, "auto") == 0) return MATMUL_BF16_AUTO;
    if (strcmp(name, "widen") == 0) return MATMUL_BF16_WIDEN;
    if (strcmp(name, "onednn") != 0) bs_die("--bf16-matmul must be auto, onednn or widen (got '%s')", name);
    if (bf16 && !matmul_bf16_onednn_available())
        bs_die("--bf16-matmul onednn: oneDNN has no bf16 matmul on this CPU (its ISA: %s; it needs AVX-512): use auto "
               "or widen",
               matmul_bf16_cpu_isa());
    return MATMUL_BF16_ONEDNN;
}

/* ---- one optimizer step ---- */

/* Micro-batch i of this data-parallel replica: sequences first + (i * dp + replica) * B + b. */
typedef struct {
    Trainer *tr;
    DataLoader *loader;
    uint64_t first;
    int stride;       /* data-parallel replicas */
    int64_t replica_start; /* --balance: this replica's first sequence in the batch (-1: interleaved) */
} MicroSource;

static void load_micro(void *ctx, int micro, int32_t *inputs, int32_t *targets) {
    const MicroSource *src = ctx;
    const int B = src->tr->cfg.micro_batch, T = src->tr->cfg.seq_len;
    uint64_t start = src->replica_start >= 0
                         ? src->first + (uint64_t)src->replica_start + (uint64_t)micro * (uint64_t)B
                         : src->first + ((uint64_t)micro * (uint64_t)src->stride + (uint64_t)src->tr->dp_index) *
                                            (uint64_t)B;
    for (int b = 0; b < B; b++)
        loader_sequence(src->loader, start + (uint64_t)b, inputs + (size_t)b * T, targets + (size_t)b * T);
}

/* LAMB and LARS sum per-tensor partial norms: over data-parallel shards
 * (ZeRO >= 1) and tensor-parallel pieces; a tensor every tensor-parallel rank
 * holds whole counts once (its other copies contribute 0). */
static void sum_tensor_norms(void *ctx, double *values, int n) {
    Trainer *tr = ctx;
    if (tr->cfg.zero >= 1 && tr->dp_size > 1) comm_allreduce_double(tr->dpc, values, n);
    if (tr->grid->tp > 1) {
        for (int t = 0; t < tr->opt.num_tensors && 2 * t + 1 < n; t++)
            if (!tr->tensor_primary[t]) values[2 * t] = values[2 * t + 1] = 0;
        comm_allreduce_double(tr->grid->tp_group, values, n);
    }
}

static void optimizer_update(Trainer *tr, double lr, float grad_scale) {
    OptimizerShard shard = {tr->update_offset, tr->update_count, dp_update_params(tr->dp), dp_update_grads(tr->dp),
                            {tr->state[0], tr->state[1]}};
    OptimizerStep step = {(float)lr, grad_scale, ++tr->optimizer_step};
    bool sharded = (tr->cfg.zero >= 1 && tr->dp_size > 1) || tr->grid->tp > 1;
    optimizer_step(&tr->opt, &shard, &step, sharded ? sum_tensor_norms : NULL, tr);
}

static void before_last_backward(void *ctx) {
    Trainer *tr = ctx;
    mp_wait_tied_grads(&tr->model, &tr->tied);
}

static void after_last_backward(void *ctx) {
    Trainer *tr = ctx;
    mp_send_tied_grads(tr->grid, &tr->model, &tr->tied);
}

/* Adaptive batch: grow toward the measured noise scale B_simple, at
 * accumulation granularity, never shrinking, within [MIN, MAX]. */
static void adapt_batch(Trainer *tr, double noise_scale) {
    if (!tr->adaptive || isnan(noise_scale)) return;
    long granule = (long)tr->cfg.micro_batch * tr->dp_size;
    long target = (long)(noise_scale / granule) * granule;
    if (target > tr->adaptive_max) target = tr->adaptive_max;
    if (target > tr->adaptive_batch) tr->adaptive_batch = target;
}

/* The global batch of the step starting now, rounded to whole micro-steps. */
static long current_batch(Trainer *tr) {
    char why[256] = "";
    long realised, want = tr->adaptive ? tr->adaptive_batch
                                       : batch_at(&tr->batch_schedule, tr->seqs_consumed * (uint64_t)tr->cfg.seq_len);
    if (!batch_round(want, (long)tr->cfg.micro_batch * tr->dp_size, tr->cfg.strict_batch, &realised, why, sizeof why))
        bs_die("%s", why);
    if (why[0] && !tr->batch_warned && tr->rank == 0) bs_warn("%s", why);
    if (why[0]) tr->batch_warned = true;
    return realised;
}

/* Forward and backward over this replica's micro-batches (the pipeline),
 * the tied-weight gradients exchanged around the last backward. */
static PipeStats forward_backward(Trainer *tr, const StepResult *r, bool onebit) {
    const Grid *g = tr->grid;
    const float dloss = 1.0f / ((float)r->batch * (float)tr->cfg.seq_len);
    dp_set_local_gradients(tr->dp, onebit); /* 1-bit Adam reduces its momentum, not the gradient */
    dp_begin_step(tr->dp);
    tr->model.first_nonfinite_layer = -1;
    if (fault_nan_now(&tr->fault, tr->rank, tr->step + 1))
        dp_inject_nan(tr->dp, tr->fault.block); /* a layer's gradient: block 0 is the embeddings */
    mp_start_tied_grads(tr->grid, &tr->model, &tr->tied);
    MicroSource src = {tr, &tr->train_data, tr->seqs_consumed, tr->dp_size, balance_first_sequence(&tr->balance)};
    PipeHooks hooks = {g->pp > 1 && g->pp_index == 0 ? before_last_backward : NULL,
                       g->pp > 1 && g->pp_index == g->pp - 1 ? after_last_backward : NULL, tr};
    PipeStats ps = pipeline_train(tr->pipe, r->accum_steps, dloss, load_micro, &src, &hooks);
    mp_finish_tied_grads(&tr->tied);
    return ps;
}

/* This rank's record of the step, exchanged with every rank's (collective). */
static StepStats exchange_stats(Trainer *tr, const PipeStats *ps, double compute, double seconds) {
    StepRecord mine = {.loss_sum = tr->grid->tp_index == 0 ? ps->loss_sum : 0, /* tensor-parallel ranks share one loss */
                       .micro_sq = dp_micro_sum_squares(tr->dp), .compute = compute, .seconds = seconds,
                       .pipe_busy = ps->busy, .pipe_idle = ps->idle};
    guard_nonfinite_keys(tr->rank, comm_size(tr->world), tr->model.cfg.num_layers, tr->model.first_nonfinite_layer,
                         dp_first_nonfinite_block(tr->dp), mine.nonfinite);
    return step_stats_exchange(&tr->stats, &mine);
}

/* The guard's decision: a non-finite value on any rank (named), a non-finite
 * loss or gradient, a loss spike. */
static bool skip_update(Trainer *tr, StepResult *r, const StepStats *st, double grad_sq) {
    return guard_nonfinite_reason(st->nonfinite, comm_size(tr->world), tr->model.cfg.num_layers, r->skip_reason,
                                  sizeof r->skip_reason) ||
           guard_skip(&tr->guard, r->loss, grad_sq, r->skip_reason, sizeof r->skip_reason);
}

static void apply_update(Trainer *tr, const StepResult *r, bool onebit) {
    if (onebit) onebit_update(tr, r->lr);
    else optimizer_update(tr, r->lr, clip_coefficient(r->grad_norm, tr->cfg.grad_clip));
    dp_after_update(tr->dp);
    mp_share_output_weights(tr->grid, &tr->model, tr->dp);
    gpt_refresh_bf16(&tr->model);
}

/* The gradient noise scale B_simple from this step (NaN when off or skipped);
 * an adaptive batch follows it. */
static double measure_noise(Trainer *tr, const StepResult *r, double micro_sq, double grad_sq) {
    const int B = tr->cfg.micro_batch;
    if (!tr->cfg.noise_scale || r->skipped) return NAN;
    /* micro-step gradients are of the loss scaled by 1/(batch T): rescale to mean-loss units */
    double micro_batches = (double)r->batch / B;
    double small_sq = micro_sq * micro_batches; /* mean over micro-batches of (M |g_m|)^2 */
    noise_scale_update(&tr->noise, small_sq, B, grad_sq, (double)r->batch);
    double b_simple = noise_scale_simple(&tr->noise);
    adapt_batch(tr, b_simple);
    return b_simple;
}

/* The step's statistics into its result; `after`: this rank's seconds since the exchange. */
static void record_stats(Trainer *tr, StepResult *r, const StepStats *st, const PipeStats *ps, double after) {
    r->pipe_busy = ps->busy;
    r->pipe_idle = ps->idle;
    r->max_live = ps->max_live;
    r->bubble = st->bubble;
    r->median_compute = st->median_compute;
    r->straggler = st->straggler;
    r->straggler_compute = st->straggler >= 0 ? st->compute[st->straggler] : 0;
    r->slowest = st->slowest + after;
    r->fastest = st->fastest + after;
    r->peak_rss = st->peak_rss;
    CommStats cs = comm_stats(tr->dpc), node = dp_node_stats(tr->dp);
    r->comm_bytes = cs.bytes_sent + node.bytes_sent;
    r->comm_bytes_fp32 = cs.uncompressed_bytes + node.uncompressed_bytes;
    r->comm_exposed = cs.wait_seconds + node.wait_seconds;
    r->comm_busy = cs.busy_seconds + node.busy_seconds;
}

static StepResult train_step(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    StepResult r = {0};
    r.batch = current_batch(tr);
    r.accum_steps = balance_micro_batches(&tr->balance, r.batch);
    comm_reset_stats(tr->dpc);
    double t_start = bs_now();
    const bool onebit = onebit_compressing(tr);
    PipeStats ps = forward_backward(tr, &r, onebit);
    double compute = ps.busy + fault_slow_down(&tr->fault, tr->rank, ps.busy);
    double t_opt = bs_now();
    double grad_sq = onebit ? onebit_grad_sum_squares(tr) : mp_grad_sum_squares(tr->grid, &tr->model, tr->dp, c->zero);
    StepStats st = exchange_stats(tr, &ps, compute, bs_now() - t_start);
    double t_exchanged = bs_now();
    r.loss = st.loss_sum / ((double)r.batch * c->seq_len);
    r.grad_norm = sqrt(grad_sq);
    /* warm-up and decay on the token axis, so a changing batch does not distort them */
    double tokens_after = (double)(tr->seqs_consumed + (uint64_t)r.batch) * c->seq_len;
    r.lr = lr_at(&tr->lr, tokens_after) * lr_scaling_factor(tr->lr_scaling, r.batch, tr->base_batch);
    r.skipped = skip_update(tr, &r, &st, grad_sq);
    if (!r.skipped) {
        apply_update(tr, &r, onebit);
        guard_accept(&tr->guard, r.loss);
    } else {
        guard_reject(&tr->guard);
        compression_reset_feedback(tr); /* what a bad step left unsent is not worth sending */
    }
    trace_add(&tr->trace, "optimizer", "compute", t_opt, bs_now());
    record_stats(tr, &r, &st, &ps, bs_now() - t_exchanged);
    balance_update(&tr->balance, st.compute);
    r.noise_scale = measure_noise(tr, &r, st.micro_sq, grad_sq);
    r.seconds = bs_now() - t_start;
    tr->seqs_consumed += (uint64_t)r.batch;
    tr->step++;
    return r;
}

/* ---- evaluation and sampling ---- */

/* Validation batch i goes to replica i mod dp; every replica runs the same
 * number of forwards (collectives under ZeRO-3 and pipelines need it) and
 * counts only real batches. */
static double evaluate(Trainer *tr) {
    if (!tr->has_val || tr->cfg.val_batches <= 0) return NAN;
    const int B = tr->cfg.micro_batch, T = tr->cfg.seq_len;
    const int rounds = (tr->cfg.val_batches + tr->dp_size - 1) / tr->dp_size;
    const int mine = tr->cfg.val_batches / tr->dp_size + (tr->dp_index < tr->cfg.val_batches % tr->dp_size ? 1 : 0);
    MicroSource src = {tr, &tr->val_data, 0, tr->dp_size, -1};
    double loss = pipeline_eval(tr->pipe, rounds, mine, load_micro, &src);
    bool counts = tr->grid->tp_index == 0 && tr->grid->pp_index == tr->grid->pp - 1;
    double stats[2] = {counts ? loss : 0, counts ? (double)mine * B * T : 0};
    comm_allreduce_double(tr->world, stats, 2);
    return stats[0] / stats[1];
}

/* The whole model on rank 0, for sampling and export (a collective: every
 * rank calls it). Returns a model the caller frees with gpt_free (params
 * NULL on other ranks). */
static GPT full_model(Trainer *tr) {
    GPT m;
    GPTConfig whole = gpt_logical_config(&tr->model.cfg);
    gpt_create_with(&m, &whole, tr->rank == 0 ? GPT_ALLOC_PARAMS : 0);
    mp_gather_logical(tr->grid, &tr->model, tr->dp, m.params);
    return m;
}

static void print_sample(Trainer *tr) {
    if (tr->cfg.sample_tokens <= 0 || tr->cfg.quiet || !tr->tok) return;
    GPT m = full_model(tr);
    if (tr->rank == 0) {
        GPTActs acts;
        gpt_acts_create(&acts, &m.cfg, 1, m.cfg.max_seq_len, false);
        int n = tr->cfg.sample_tokens;
        int32_t *tokens = bs_malloc((size_t)(n + 1) * sizeof(int32_t));
        tokens[0] = tokenizer_eot(tr->tok);
        SampleParams sp = {(float)tr->cfg.temperature, tr->cfg.top_k};
        int len = sample_generate(&m, &acts, tokens, 1, n, &sp, &tr->sample_rng);
        size_t bytes;
        unsigned char *text = tokenizer_decode(tr->tok, tokens + 1, (size_t)len - 1, &bytes);
        progress_line(&tr->progress, "--- sample at step %ld (temperature %.2f, top-k %d) ---\n%s\n---", tr->step,
                      tr->cfg.temperature, tr->cfg.top_k, (char *)text);
        free(text);
        free(tokens);
        gpt_acts_free(&acts);
    }
    gpt_free(&m);
}

static void export_models(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (!option_given(c->save_model) && !option_given(c->out)) return;
    GPT m = full_model(tr);
    if (tr->rank == 0) {
        if (option_given(c->save_model)) llmc_model_write(c->save_model, &m);
        if (option_given(c->out)) {
            char path[4200];
            snprintf(path, sizeof path, "%s/model.bin", c->out);
            llmc_model_write(path, &m);
        }
    }
    gpt_free(&m);
}

/* ---- set-up ---- */

/* The optimizer sees each tensor's trained elements (not wte's padded rows). */
static void setup_optimizer(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const GPTConfig *mc = &tr->model.cfg;
    char why[256];
    OptimizerKind kind;
    if (!optimizer_kind_parse(c->optimizer, &kind, why, sizeof why)) bs_die("%s", why);
    int cap = gpt_max_segments(mc);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(mc, segs, cap);
    OptimTensor *tensors = bs_malloc(sizeof(OptimTensor) * (size_t)n);
    for (int i = 0; i < n; i++)
        tensors[i] = (OptimTensor){segs[i].offset, gpt_tensor_trained(mc, segs[i].kind), gpt_tensor_decays(segs[i].kind)};
    OptimizerConfig oc = {kind, (float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay,
                          (float)c->momentum, (float)c->dampening, c->nesterov, (float)c->lars_eta, c->lamb_clamp};
    optimizer_init(&tr->opt, &oc, tensors, n);
    tr->tensor_primary = bs_malloc(sizeof(bool) * (size_t)n);
    for (int i = 0; i < n; i++) tr->tensor_primary[i] = gpt_tensor_primary(mc, segs[i].kind);
    free(tensors);
    free(segs);
    for (int k = 0; k < optimizer_state_arrays(kind); k++) tr->state[k] = bs_calloc(tr->update_count, sizeof(float));
}

/* The tokenizer: --tokenizer, else the one the data was prepared with
 * (prepare.json beside the shards), else byte-level. */
static Tokenizer *load_tokenizer(const TrainConfig *c) {
    if (option_given(c->tokenizer)) return tokenizer_load(c->tokenizer, c->vocab_dir);
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", c->data);
    if (!bs_is_dir(dir)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/prepare.json", dir);
    json_t *j = bs_path_exists(path) ? json_load_file(path, 0, NULL) : NULL;
    const char *name = j ? json_string_value(json_object_get(j, "tokenizer")) : NULL;
    Tokenizer *t = tokenizer_load(name ? name : "byte", NULL);
    json_decref(j);
    return t;
}

static void setup_model(Trainer *tr) {
    TrainConfig *c = &tr->cfg;
    tr->tok = load_tokenizer(c);
    int vocab = c->vocab_size > 0 ? c->vocab_size : tokenizer_vocab_size(tr->tok);
    GPTConfig mc = {.max_seq_len = c->seq_len, .vocab_size = vocab, .num_layers = c->layers,
                    .num_heads = c->heads, .channels = c->channels};
    if (option_given(c->init_from)) {
        llmc_model_read_config(c->init_from, &mc);
        if (c->seq_len > mc.max_seq_len)
            bs_die("--seq-len %d is longer than the model's maximum sequence length %d (from %s)", c->seq_len,
                   mc.max_seq_len, c->init_from);
        c->vocab_size = mc.vocab_size;
    }
    if (mc.vocab_size != tokenizer_vocab_size(tr->tok)) { /* e.g. random-token benchmarks: no text to show */
        tokenizer_free(tr->tok);
        tr->tok = NULL;
    }
    char why[256];
    if (!gpt_config_check(&mc, why, sizeof why)) bs_die("%s", why);
    char split[256];
    snprintf(split, sizeof split, "%s", c->pp_split);
    if (strcmp(split, "auto") == 0) { /* per token, forward and backward: 6 x a layer's or the head's weights, + attention */
        double C = mc.channels, layer = 6 * 12 * C * C + 12 * C * c->seq_len;
        grid_balanced_split(mc.num_layers, c->pp, layer, 6 * C * gpt_padded_vocab(mc.vocab_size), split, sizeof split);
    }
    tr->grid = grid_create(tr->world, c->tp, c->pp, c->dp, split, mc.num_layers, mc.num_heads);
    const Grid *g = tr->grid;
    if (mc.padded_vocab_size % g->tp != 0)
        bs_die("--tp %d does not divide the padded vocabulary %d", g->tp, mc.padded_vocab_size);
    tr->dpc = g->dp_group;
    tr->dp_size = g->dp;
    tr->dp_index = g->dp_index;
    GPTConfig whole = mc;
    mc = mp_shard_config(g, &whole, g->tp_index, g->pp_index);
    tr->model.cfg = mc;
    DPOptions opt = {.zero_stage = c->zero, .bucket_floats = (size_t)(c->bucket_mb * 1024 * 1024 / sizeof(float)),
                     .overlap = !c->no_overlap};
    compression_dp_options(c, &opt);
    tr->dp = dp_create(tr->dpc, &tr->model, &opt);
    size_t shard_off, shard_cnt;
    dp_shard_range(tr->dp, &shard_off, &shard_cnt);
    tr->model.tp = g->tp_group;
    if (option_given(c->init_from)) {
        GPT file;
        gpt_create_with(&file, &whole, GPT_ALLOC_PARAMS);
        llmc_model_read_params(c->init_from, &file);
        float *dst = dp_params_at(tr->dp, 0, tr->model.num_params);
        if (dst) mp_copy_from_logical(&mc, file.params, dst, 0, tr->model.num_params);
        else mp_copy_from_logical(&mc, file.params, dp_update_params(tr->dp), shard_off, shard_cnt);
        gpt_free(&file);
    } else if (tr->model.params) {
        gpt_init_weights(&tr->model, (uint64_t)c->seed);
    } else {
        gpt_init_range(&mc, (uint64_t)c->seed, dp_update_params(tr->dp), shard_off, shard_cnt);
    }
    dp_update_range(tr->dp, &tr->update_offset, &tr->update_count);
    setup_optimizer(tr);
    PipeSchedule schedule;
    if (!pipeline_parse_schedule(c->pp_schedule, &schedule))
        bs_die("--pp-schedule must be gpipe or 1f1b (got '%s')", c->pp_schedule);
    tr->pipe = pipeline_create(tr->grid, &tr->model, tr->dp, schedule, c->micro_batch, c->seq_len);
    mp_share_output_weights(tr->grid, &tr->model, tr->dp);
}

/* Parses the batch schedule and plans the run's length in steps and tokens. */
static void setup_batch_schedule(Trainer *tr) {
    TrainConfig *c = &tr->cfg;
    char why[256];
    uint64_t budget = c->train_tokens > 0 ? (uint64_t)c->train_tokens
                                          : (uint64_t)c->steps * (uint64_t)c->global_batch * (uint64_t)c->seq_len;
    if (strncmp(c->batch_schedule, "adaptive", 8) == 0) {
        long lo, hi;
        char tail;
        if (sscanf(c->batch_schedule, "adaptive:%ld:%ld%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo)
            bs_die("--batch-schedule adaptive:MIN:MAX needs 1 <= MIN <= MAX sequences (got '%s')", c->batch_schedule);
        if (lo < 2L * c->micro_batch)
            bs_die("--batch-schedule adaptive:%ld:%ld: MIN must hold at least two micro-batches (%d) so the noise "
                   "scale can be measured", lo, hi, 2 * c->micro_batch);
        tr->adaptive = true;
        tr->adaptive_batch = lo;
        tr->adaptive_max = hi;
        c->noise_scale = true; /* the policy follows the measured noise scale */
        if (c->train_tokens == 0) bs_die("--batch-schedule adaptive needs --train-tokens (the number of steps is not known)");
        tr->batch_schedule.kind = BATCH_CONSTANT; /* unused */
    } else {
        if (!batch_schedule_parse(c->batch_schedule, &tr->batch_schedule, why, sizeof why)) bs_die("%s", why);
        if (!batch_schedule_prepare(&tr->batch_schedule, c->global_batch, budget, why, sizeof why)) bs_die("%s", why);
    }
    if (!lr_scaling_parse(c->lr_scaling, &tr->lr_scaling, why, sizeof why)) bs_die("%s", why);
    tr->base_batch = c->base_batch > 0 ? c->base_batch : c->global_batch;
    if (tr->adaptive) { /* steps unknown: stop on tokens */
        tr->total_steps = LONG_MAX;
        tr->total_tokens = budget;
    } else if (c->train_tokens > 0) { /* count the steps the schedule takes to spend the budget */
        uint64_t tokens = 0;
        long steps = 0, granule = (long)c->micro_batch * tr->dp_size;
        while (tokens < budget) {
            long realised;
            char ignore[256];
            batch_round(batch_at(&tr->batch_schedule, tokens), granule, false, &realised, ignore, sizeof ignore);
            tokens += (uint64_t)realised * (uint64_t)c->seq_len;
            steps++;
        }
        tr->total_steps = steps;
        tr->total_tokens = budget;
    } else {
        tr->total_steps = c->steps;
        tr->total_tokens = budget;
    }
}

/* A NaN's target must exist: the rank, and a layer on that rank's pipeline stage. */
static void target_nan_fault(Trainer *tr) {
    const Grid *g = tr->grid;
    FaultLayout layout = {comm_size(tr->world), tr->model.cfg.num_layers, g->tp, g->pp, g->stage_first,
                          g->stage_layers};
    fault_target_nan(&tr->fault, &layout);
}

/* The step's statistics across ranks, --balance, the guard. */
static void setup_policies(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    step_stats_init(&tr->stats, tr->world, c->straggler_threshold);
    balance_init(&tr->balance, c->balance, tr->dp_size, tr->dp_index, tr->grid->tp * tr->grid->pp, c->micro_batch);
    guard_init(&tr->guard, c->skip_spikes, c->spike_window, c->max_skips);
}

static void setup(Trainer *tr, const TrainConfig *cfg, Comm *world) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    TrainConfig *c = &tr->cfg;
    tr->world = world;
    tr->rank = comm_rank(world);
    if (c->threads > 0) omp_set_num_threads(c->threads);
    if (strcmp(c->data_order, "shuffled") != 0 && strcmp(c->data_order, "sequential") != 0)
        bs_die("--data-order must be 'shuffled' or 'sequential' (got '%s')", c->data_order);
    if (c->min_lr > c->lr) bs_die("--min-lr %g is larger than --lr %g", c->min_lr, c->lr);
    if (strcmp(c->precision, "fp32") != 0 && strcmp(c->precision, "bf16") != 0)
        bs_die("--precision must be fp32 or bf16 (got '%s')", c->precision);
    MatmulBF16Path bf16_path = bf16_matmul_path(c->bf16_matmul, strcmp(c->precision, "bf16") == 0);
    fault_parse(&tr->fault, c->inject_fault);
    setup_model(tr); /* builds the grid: the data-parallel size is known from here on */
    if (tr->fault.kind == FAULT_NAN || tr->fault.kind == FAULT_NANS) target_nan_fault(tr);
    int per_step = c->micro_batch * tr->dp_size;
    if (c->global_batch == 0) c->global_batch = per_step;
    if (c->global_batch % per_step != 0)
        bs_die("--global-batch %d is not a multiple of --micro-batch %d x %d data-parallel ranks", c->global_batch,
               c->micro_batch, tr->dp_size);
    setup_batch_schedule(tr);
    onebit_setup(tr); /* after the schedule: an adaptive one measures the noise scale */
    if (c->balance && c->zero >= 2)
        bs_die("--balance needs --zero 0 or 1: ZeRO 2 and 3 reduce every micro-step, so every replica must run the "
               "same number");
    if (c->balance && tr->adaptive) bs_die("--balance and --batch-schedule adaptive cannot be combined yet");
    setup_policies(tr);
    trace_init(&tr->trace, option_given(c->trace));
    comm_set_trace(tr->dpc, option_given(c->trace) ? &tr->trace : NULL);
    pipeline_set_trace(tr->pipe, option_given(c->trace) ? &tr->trace : NULL);
    bool shuffle = strcmp(c->data_order, "shuffled") == 0;
    loader_open(&tr->train_data, c->data, c->seq_len, tr->model.cfg.vocab_size, (uint64_t)c->seed, shuffle);
    if (option_given(c->val_data)) {
        loader_open(&tr->val_data, c->val_data, c->seq_len, tr->model.cfg.vocab_size, 0, false);
        tr->has_val = true;
    }

    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5ca1ab1eULL);
    double step_tokens = (double)c->global_batch * c->seq_len; /* of the final batch */
    double warmup = c->warmup_tokens > 0 ? (double)c->warmup_tokens : c->warmup * step_tokens;
    tr->lr = (LrSchedule){c->lr, c->min_lr, warmup, (double)tr->total_tokens};
    if (c->noise_scale) dp_measure_micro_norms(tr->dp);
    noise_scale_init(&tr->noise, c->noise_ema);

    if (option_given(c->ckpt_dir)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s", c->ckpt_dir);
    else if (option_given(c->out)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s/ckpt", c->out);
    if (option_given(c->resume)) train_resume(tr);
    if (strcmp(c->precision, "bf16") == 0) gpt_enable_bf16(&tr->model, bf16_path); /* after the masters are final */
    tr->metrics = (Metrics){NULL, c->seq_len, comm_size(world), tr->grid->pp, tr->dp_size, c->balance, c->noise_scale,
                            c->baseline_tokens_per_s};
    if (tr->rank == 0) {
        if (tr->ckpt_dir[0]) bs_mkdir_p(tr->ckpt_dir);
        if (option_given(c->out)) bs_mkdir_p(c->out);
        if (option_given(c->metrics)) tr->metrics.file = metrics_open(c->metrics, tr->step);
    }
    progress_init(&tr->progress, stdout, c->log_every);
}

static void teardown(Trainer *tr) {
    metrics_close(&tr->metrics);
    loader_close(&tr->train_data);
    if (tr->has_val) loader_close(&tr->val_data);
    pipeline_free(tr->pipe);
    dp_free(tr->dp);
    free(tr->tied.buf);
    free(tr->tensor_primary);
    trace_free(&tr->trace);
    compression_free(tr); /* before the optimizer state: its momentum may be state[0] */
    for (int k = 0; k < OPTIMIZER_MAX_STATE; k++) free(tr->state[k]);
    optimizer_free(&tr->opt);
    grid_free(tr->grid);
    if (tr->tok) tokenizer_free(tr->tok);
    step_stats_free(&tr->stats);
    balance_free(&tr->balance);
    guard_free(&tr->guard);
    train_save_free(tr);
}

/* ---- metrics and trace ---- */

/* The step's metrics line (rank 0, with --metrics). */
static void write_step_metrics(Trainer *tr, const StepResult *r, double val_loss) {
    if (!tr->metrics.file) return;
    DPMemory mem = dp_memory(tr->dp);
    size_t opt_bytes = tr->update_count * sizeof(float) * (size_t)optimizer_state_arrays(tr->opt.cfg.kind);
    MetricsStep s = {tr->step, tr->seqs_consumed * (uint64_t)tr->cfg.seq_len, tr->guard.skips, val_loss,
                     tr->last_ckpt_stall, tr->balance.split, mem.param_bytes + mem.grad_bytes + opt_bytes,
                     mem.buffer_bytes};
    metrics_write(&tr->metrics, r, &s);
}

static void write_trace(Trainer *tr, double origin) {
    if (!option_given(tr->cfg.trace)) return;
    char *mine = trace_events_json(&tr->trace, tr->rank, origin);
    char *all = comm_gather_text(tr->dpc, mine, ",\n", 0);
    free(mine);
    if (tr->rank == 0) {
        FILE *f = bs_fopen(tr->cfg.trace, "wb");
        fprintf(f, "{\"traceEvents\":[\n%s\n],\"displayTimeUnit\":\"ms\"}\n", all);
        bs_fclose_synced(f, tr->cfg.trace);
        free(all);
    }
}

/* ---- the job ---- */

static bool run_done(const Trainer *tr) {
    return tr->step >= tr->total_steps || tr->seqs_consumed * (uint64_t)tr->cfg.seq_len >= tr->total_tokens;
}

/* The steps the progress line shows: planned, or (adaptive) estimated from the tokens still to go. */
static long shown_total(const Trainer *tr) {
    if (!tr->adaptive) return tr->total_steps;
    return (long)ceil(tr->step * (double)tr->total_tokens / ((double)tr->seqs_consumed * tr->cfg.seq_len));
}

/* Between two steps: evaluation, metrics, checkpoint, the guard's patience,
 * the progress line, sampling. Returns false once the target validation loss
 * is reached. */
static bool after_step(Trainer *tr, Report *rp, const StepResult *r, long start_step) {
    const TrainConfig *c = &tr->cfg;
    report_events(rp, r, tr->step);
    const bool last = run_done(tr);
    const bool evaluated = tr->has_val && c->eval_every > 0 && (tr->step % c->eval_every == 0 || last);
    const double val_loss = evaluated ? evaluate(tr) : NAN;
    /* the step's metrics line before its checkpoint: a run killed between the two resumes from the checkpoint
     * before, never past a line that was not written; so a checkpoint's stall is reported on the next step's line */
    write_step_metrics(tr, r, val_loss);
    tr->last_ckpt_stall = 0;
    train_save_poll(tr);
    if (tr->ckpt_dir[0] && c->ckpt_every > 0 && tr->step % c->ckpt_every == 0 && !last) {
        tr->last_ckpt_stall = train_save(tr);
        report_checkpoint(rp, tr->step, tr->last_ckpt_stall, c->async_ckpt);
    }
    guard_stop_if_stuck(&tr->guard, tr->step, r->skip_reason);
    bool timed = tr->step > start_step + 1 || tr->total_steps - start_step == 1;
    report_step(rp, r, &(ReportStep){tr->step, shown_total(tr), timed, evaluated, val_loss});
    if (c->target_val_loss > 0 && !isnan(val_loss) && val_loss <= c->target_val_loss) {
        report_target_reached(rp, c->target_val_loss, tr->step, (double)tr->seqs_consumed * c->seq_len);
        return false;
    }
    if (c->sample_every > 0 && tr->step % c->sample_every == 0 && !last) print_sample(tr);
    return true;
}

int train_run(const TrainConfig *cfg, Comm *world) {
    Trainer *tr = bs_calloc(1, sizeof *tr);
    setup(tr, cfg, world);
    const TrainConfig *c = &tr->cfg;
    banner_print(tr);
    double origin = bs_now();
    Report rp;
    report_init(&rp, &tr->progress, tr->rank == 0 && !c->quiet, c, tr->dp_size,
                gpt_flops_per_token(&tr->model.cfg, c->seq_len));
    if (tr->step == 0 && tr->has_val && c->eval_every > 0) report_first_val(&rp, evaluate(tr));
    const long start_step = tr->step;
    while (!run_done(tr)) {
        fault_maybe_stop(&tr->fault, tr->rank, tr->step + 1);
        StepResult r = train_step(tr);
        if (!after_step(tr, &rp, &r, start_step)) break;
    }
    report_end_steps(&rp);
    if (tr->ckpt_dir[0] && (tr->step > start_step || tr->resharded)) train_save(tr); /* resharding is a plain run */
    train_save_finish(tr);
    export_models(tr);
    write_trace(tr, origin);
    report_summary(&rp);
    if (c->sample_tokens > 0) print_sample(tr);
    teardown(tr);
    free(tr);
    return 0;
}
