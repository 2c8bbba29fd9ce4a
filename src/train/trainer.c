/* trainer.c: the training job (see trainer.h): set-up, the step loop with
 * gradient accumulation over data-parallel ranks, evaluation, sampling,
 * metrics, trace and checkpoints. Rank 0 prints and writes metrics. */
#include "train/trainer.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
#include "train/compression.h"
#include "train/fault.h"
#include "train/guard.h"
#include "train/progress.h"
#include "train/sample.h"
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

static bool is_set(const char *s) { return s && *s; }

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

/* Peak resident memory of this process (VmHWM), 0 if unknown. */
static long long peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
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

/* Where a non-finite value first appeared, agreed by all ranks (collective). */
static bool locate_nonfinite(Trainer *tr, char *reason, size_t size) {
    const int world = comm_size(tr->world), L = tr->model.cfg.num_layers;
    double key[2];
    guard_nonfinite_keys(tr->rank, world, L, tr->model.first_nonfinite_layer, dp_first_nonfinite_block(tr->dp), key);
    comm_allreduce_max_double(tr->world, key, 2);
    return guard_nonfinite_reason(key, world, L, reason, size);
}

/* Stragglers: every rank's compute time; ranks slower than the median by
 * more than the threshold are named, and with --balance the micro-batches of
 * the next steps are shared in proportion to speed. Collective. */
static void straggler_stats(Trainer *tr, StepResult *r, double compute) {
    int world = comm_size(tr->world);
    double *times = tr->rank_times;
    memset(times, 0, sizeof(double) * (size_t)world);
    times[tr->rank] = compute;
    comm_allreduce_double(tr->world, times, world);
    double *sorted = tr->rank_times_sorted;
    memcpy(sorted, times, sizeof(double) * (size_t)world);
    for (int i = 1; i < world; i++) /* insertion sort: worlds here are small */
        for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    r->median_compute = sorted[(world - 1) / 2]; /* the lower median: with two ranks, the faster */
    r->straggler = -1;
    for (int i = 0; i < world; i++)
        if (times[i] > r->median_compute * (1 + tr->cfg.straggler_threshold) &&
            (r->straggler < 0 || times[i] > times[r->straggler]))
            r->straggler = i;
    balance_update(&tr->balance, times);
}

static StepResult train_step(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const int B = c->micro_batch, T = c->seq_len;
    StepResult r = {0};
    r.batch = current_batch(tr);
    r.accum_steps = balance_micro_batches(&tr->balance, r.batch);
    const float dloss = 1.0f / ((float)r.batch * (float)T);
    comm_reset_stats(tr->dpc);
    double t_start = bs_now();
    const bool onebit = onebit_compressing(tr);
    dp_set_local_gradients(tr->dp, onebit); /* 1-bit Adam reduces its momentum, not the gradient */
    dp_begin_step(tr->dp);
    tr->model.first_nonfinite_layer = -1;
    if (fault_nan_now(&tr->fault, tr->rank, tr->step + 1))
        dp_inject_nan(tr->dp, tr->fault.block); /* a layer's gradient: block 0 is the embeddings */
    mp_start_tied_grads(tr->grid, &tr->model, &tr->tied);
    MicroSource src = {tr, &tr->train_data, tr->seqs_consumed, tr->dp_size, balance_first_sequence(&tr->balance)};
    r.my_micro = r.accum_steps;
    const Grid *g = tr->grid;
    PipeHooks hooks = {g->pp > 1 && g->pp_index == 0 ? before_last_backward : NULL,
                       g->pp > 1 && g->pp_index == g->pp - 1 ? after_last_backward : NULL, tr};
    PipeStats ps = pipeline_train(tr->pipe, r.accum_steps, dloss, load_micro, &src, &hooks);
    mp_finish_tied_grads(&tr->tied);
    double compute = ps.busy + fault_slow_down(&tr->fault, tr->rank, ps.busy);
    double loss_sum = tr->grid->tp_index == 0 ? ps.loss_sum : 0; /* tensor-parallel ranks share one loss */
    r.pipe_busy = ps.busy;
    r.pipe_idle = ps.idle;
    r.max_live = ps.max_live;
    double t_opt = bs_now();
    double grad_sq = onebit ? onebit_grad_sum_squares(tr) : mp_grad_sum_squares(tr->grid, &tr->model, tr->dp, c->zero);
    double sums[2] = {loss_sum, dp_micro_sum_squares(tr->dp)};
    comm_allreduce_double(tr->world, sums, 2);
    r.loss = sums[0] / ((double)r.batch * T);
    r.grad_norm = sqrt(grad_sq);
    /* warm-up and decay on the token axis, so a changing batch does not distort them */
    double tokens_after = (double)(tr->seqs_consumed + (uint64_t)r.batch) * T;
    r.lr = lr_at(&tr->lr, tokens_after) * lr_scaling_factor(tr->lr_scaling, r.batch, tr->base_batch);
    r.skipped = locate_nonfinite(tr, r.skip_reason, sizeof r.skip_reason) ||
                guard_skip(&tr->guard, r.loss, grad_sq, r.skip_reason, sizeof r.skip_reason);
    if (!r.skipped) {
        if (onebit) onebit_update(tr, r.lr);
        else optimizer_update(tr, r.lr, clip_coefficient(r.grad_norm, c->grad_clip));
        dp_after_update(tr->dp);
        mp_share_output_weights(tr->grid, &tr->model, tr->dp);
        gpt_refresh_bf16(&tr->model);
        guard_accept(&tr->guard, r.loss);
    } else {
        guard_reject(&tr->guard);
        compression_reset_feedback(tr); /* what a bad step left unsent is not worth sending */
    }
    trace_add(&tr->trace, "optimizer", "compute", t_opt, bs_now());
    /* statistics across ranks: step time max and -min, memory, bubble */
    double dt = bs_now() - t_start;
    double extremes[4] = {dt, -dt, (double)peak_rss_bytes(), ps.busy + ps.idle > 0 ? ps.idle / (ps.busy + ps.idle) : 0};
    comm_allreduce_max_double(tr->world, extremes, 4);
    straggler_stats(tr, &r, compute);
    r.bubble = extremes[3];
    CommStats cs = comm_stats(tr->dpc), node = dp_node_stats(tr->dp);
    r.noise_scale = NAN;
    if (c->noise_scale && !r.skipped) {
        /* micro-step gradients are of the loss scaled by 1/(batch T): rescale to mean-loss units */
        double micro_batches = (double)r.batch / B;
        double small_sq = sums[1] * micro_batches; /* mean over micro-batches of (M |g_m|)^2 */
        noise_scale_update(&tr->noise, small_sq, B, grad_sq, (double)r.batch);
        r.noise_scale = noise_scale_simple(&tr->noise);
        adapt_batch(tr, r.noise_scale);
    }
    r.seconds = bs_now() - t_start;
    r.slowest = extremes[0];
    r.fastest = -extremes[1];
    r.peak_rss = extremes[2];
    r.comm_bytes = cs.bytes_sent + node.bytes_sent;
    r.comm_bytes_fp32 = cs.uncompressed_bytes + node.uncompressed_bytes;
    r.comm_exposed = cs.wait_seconds + node.wait_seconds;
    r.comm_busy = cs.busy_seconds + node.busy_seconds;
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
    if (!is_set(c->save_model) && !is_set(c->out)) return;
    GPT m = full_model(tr);
    if (tr->rank == 0) {
        if (is_set(c->save_model)) llmc_model_write(c->save_model, &m);
        if (is_set(c->out)) {
            char path[4200];
            snprintf(path, sizeof path, "%s/model.bin", c->out);
            llmc_model_write(path, &m);
        }
    }
    gpt_free(&m);
}

/* ---- set-up ---- */

/* The metrics file; resuming at step k keeps its lines of steps <= k (a run
 * that died after its last checkpoint wrote steps that are now done again). */
static FILE *open_metrics(const char *path, long step) {
    if (step == 0 || !bs_path_exists(path)) return bs_fopen(path, "wb");
    size_t len;
    char *text = bs_read_file(path, &len);
    FILE *f = bs_fopen(path, "wb");
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *s = j ? json_object_get(j, "step") : NULL;
        if (json_is_integer(s) && json_integer_value(s) <= step) fprintf(f, "%s\n", line);
        json_decref(j);
    }
    free(text);
    fflush(f);
    return f;
}

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
    if (is_set(c->tokenizer)) return tokenizer_load(c->tokenizer, c->vocab_dir);
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
    if (is_set(c->init_from)) {
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
    if (is_set(c->init_from)) {
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
    if (tr->fault.kind == FAULT_NAN || tr->fault.kind == FAULT_NANS) {
        const Grid *g = tr->grid;
        FaultLayout layout = {comm_size(world), tr->model.cfg.num_layers, g->tp, g->pp, g->stage_first, g->stage_layers};
        fault_target_nan(&tr->fault, &layout);
    }
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
    int processes = comm_size(tr->world);
    tr->rank_times = bs_calloc((size_t)processes, sizeof(double));
    tr->rank_times_sorted = bs_calloc((size_t)processes, sizeof(double));
    balance_init(&tr->balance, c->balance, tr->dp_size, tr->dp_index, tr->grid->tp * tr->grid->pp, c->micro_batch);
    guard_init(&tr->guard, c->skip_spikes, c->spike_window, c->max_skips);
    tr->last_straggler = -1;
    trace_init(&tr->trace, is_set(c->trace));
    comm_set_trace(tr->dpc, is_set(c->trace) ? &tr->trace : NULL);
    pipeline_set_trace(tr->pipe, is_set(c->trace) ? &tr->trace : NULL);
    bool shuffle = strcmp(c->data_order, "shuffled") == 0;
    loader_open(&tr->train_data, c->data, c->seq_len, tr->model.cfg.vocab_size, (uint64_t)c->seed, shuffle);
    if (is_set(c->val_data)) {
        loader_open(&tr->val_data, c->val_data, c->seq_len, tr->model.cfg.vocab_size, 0, false);
        tr->has_val = true;
    }

    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5ca1ab1eULL);
    double step_tokens = (double)c->global_batch * c->seq_len; /* of the final batch */
    double warmup = c->warmup_tokens > 0 ? (double)c->warmup_tokens : c->warmup * step_tokens;
    tr->lr = (LrSchedule){c->lr, c->min_lr, warmup, (double)tr->total_tokens};
    if (c->noise_scale) dp_measure_micro_norms(tr->dp);
    noise_scale_init(&tr->noise, c->noise_ema);

    if (is_set(c->ckpt_dir)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s", c->ckpt_dir);
    else if (is_set(c->out)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s/ckpt", c->out);
    if (is_set(c->resume)) train_resume(tr);
    if (strcmp(c->precision, "bf16") == 0) gpt_enable_bf16(&tr->model, bf16_path); /* after the masters are final */
    if (tr->rank == 0) {
        if (tr->ckpt_dir[0]) bs_mkdir_p(tr->ckpt_dir);
        if (is_set(c->out)) bs_mkdir_p(c->out);
        if (is_set(c->metrics)) tr->metrics = open_metrics(c->metrics, tr->step);
    }
    progress_init(&tr->progress, stdout, c->log_every);
}

static void teardown(Trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
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
    free(tr->rank_times);
    free(tr->rank_times_sorted);
    balance_free(&tr->balance);
    guard_free(&tr->guard);
    train_save_free(tr);
}

/* ---- reporting ---- */

static void print_compression(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (strcmp(c->grad_compression, "none") != 0 || c->zero_quant_grads)
        printf("compression: gradients %s (%s scheme, blocks of %d), %s\n", c->zero_quant_grads ? "int8 (qgZ)" :
               c->grad_compression, c->zero_quant_grads ? "hierarchical all-to-all" : is_set(c->compression_scheme) ?
               c->compression_scheme : "default", c->compression_block, c->zero_quant_grads ? "no error feedback "
               "(as ZeRO++)" : c->no_error_feedback ? "NO error feedback" : "error feedback");
    if (c->zero_quant_weights || c->zero_hpz)
        printf("compression: ZeRO++%s%s\n", c->zero_quant_weights ? " qwZ (int8 parameter gathers)" : "",
               c->zero_hpz ? " hpZ (backward gathers inside the node)" : "");
    if (tr->onebit.on)
        printf("compression: 1-bit Adam, full precision for %d steps, then 1-bit momentum with error feedback\n",
               c->freeze_step);
}

static void print_header(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const GPTConfig *mc = &tr->model.cfg;
    const Grid *g = tr->grid;
    char mine[160];
    snprintf(mine, sizeof mine, "  rank %d: dp %d, pp %d, tp %d: layers [%d, %d), %zu parameters here", tr->rank,
             g->dp_index, g->pp_index, g->tp_index, gpt_first_layer(mc), gpt_first_layer(mc) + gpt_stage_layers(mc),
             tr->model.num_params);
    char *all = (g->tp > 1 || g->pp > 1) ? comm_gather_text(tr->world, mine, "\n", 0) : NULL;
    if (tr->rank != 0 || c->quiet) {
        free(all);
        return;
    }
    if (all) {
        printf("layout: tp %d x pp %d x dp %d = %d processes, %s pipeline schedule\n%s\n", g->tp, g->pp, g->dp,
               g->tp * g->pp * g->dp, c->pp_schedule, all);
        free(all);
    }
    printf("model: L=%d H=%d C=%d T=%d V=%d (padded %d), %.2fM parameters, %.1f MFLOP/token\n", mc->num_layers,
           mc->num_heads, mc->channels, mc->max_seq_len, mc->vocab_size, mc->padded_vocab_size,
           gpt_num_trained_params(mc) / 1e6, gpt_flops_per_token(mc, c->seq_len) / 1e6);
    printf("batch: global %d sequences = micro %d x accumulation %d x dp %d (%d tokens/step); %d threads/process\n",
           c->global_batch, c->micro_batch, c->global_batch / (c->micro_batch * tr->dp_size), tr->dp_size,
           c->global_batch * c->seq_len, omp_get_max_threads());
    if (strcmp(c->batch_schedule, "constant") != 0 || strcmp(c->lr_scaling, "none") != 0)
        printf("schedule: batch %s, lr scaling %s (base batch %ld), %ld steps, %.3g tokens\n", c->batch_schedule,
               c->lr_scaling, tr->base_batch, tr->total_steps, (double)tr->total_tokens);
    printf("optimizer: %s\n", c->optimizer);
    if (tr->model.bf16)
        printf("precision: bf16 matmuls on %s (this CPU %s bf16 arithmetic), fp32 masters and accumulation\n",
               matmul_bf16_path_name(matmul_bf16_path(tr->model.bf16_matmul)),
               matmul_bf16_cpu_has_bf16() ? "has" : "lacks");
    if (tr->dp_size > 1 || c->zero > 0) {
        DPMemory mem = dp_memory(tr->dp);
        double P = (double)tr->model.num_params * 4, N = tr->dp_size;
        double formula[4] = {16 * P, 8 * P + 8 * P / N, 4 * P + 12 * P / N, 16 * P / N};
        double opt_bytes = (double)tr->update_count * 4 * optimizer_state_arrays(tr->opt.cfg.kind);
        printf("data parallel: %d ranks, ZeRO stage %d, %s collectives, buckets of %.1f MB%s\n", tr->dp_size, c->zero,
               c->comm_algo, c->bucket_mb, c->no_overlap ? " (no overlap)" : "");
        print_compression(tr);
        printf("per-rank state: params %.1f MB, grads %.1f MB, optimizer %.1f MB = %.1f MB (ZeRO formula %.1f MB) "
               "+ buffers %.1f MB\n", mem.param_bytes / 1e6, mem.grad_bytes / 1e6, opt_bytes / 1e6,
               (mem.param_bytes + mem.grad_bytes + opt_bytes) / 1e6, formula[c->zero] / 1e6, mem.buffer_bytes / 1e6);
    }
    printf("data: %s (%zu tokens, %zu sequences, %s)\n", c->data, tr->train_data.num_tokens,
           tr->train_data.num_windows, c->data_order);
}

/* JSON has no NaN or infinity: such values are written as null. */
static json_t *number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static void write_metrics(Trainer *tr, const StepResult *r, double tokens_per_s, double val_loss) {
    if (!tr->metrics) return;
    json_t *j = json_object();
    json_object_set_new(j, "step", json_integer(tr->step));
    json_object_set_new(j, "loss", number(r->loss));
    json_object_set_new(j, "lr", number(r->lr));
    json_object_set_new(j, "grad_norm", number(r->grad_norm));
    json_object_set_new(j, "tokens", json_integer((json_int_t)(tr->seqs_consumed * (uint64_t)tr->cfg.seq_len)));
    json_object_set_new(j, "ms", number(r->seconds * 1e3));
    json_object_set_new(j, "tokens_per_s", number(tokens_per_s));
    json_object_set_new(j, "compute_ms", number((r->seconds - r->comm_exposed) * 1e3));
    json_object_set_new(j, "comm_exposed_ms", number(r->comm_exposed * 1e3));
    json_object_set_new(j, "comm_busy_ms", number(r->comm_busy * 1e3));
    json_object_set_new(j, "comm_bytes", json_integer((json_int_t)r->comm_bytes));
    json_object_set_new(j, "comm_bytes_fp32", json_integer((json_int_t)r->comm_bytes_fp32));
    if (r->comm_bytes > 0)
        json_object_set_new(j, "compression_ratio", number((double)r->comm_bytes_fp32 / (double)r->comm_bytes));
    json_object_set_new(j, "step_ms_max", number(r->slowest * 1e3));
    json_object_set_new(j, "step_ms_min", number(r->fastest * 1e3));
    json_object_set_new(j, "ranks", json_integer(comm_size(tr->world)));
    if (tr->grid->pp > 1) {
        json_object_set_new(j, "bubble", number(r->bubble));
        json_object_set_new(j, "bubble_theory", number((double)(tr->grid->pp - 1) / r->accum_steps));
        json_object_set_new(j, "pipe_busy_ms", number(r->pipe_busy * 1e3));
        json_object_set_new(j, "pipe_idle_ms", number(r->pipe_idle * 1e3));
    }
    json_object_set_new(j, "max_live_microbatches", json_integer(r->max_live));
    json_object_set_new(j, "batch", json_integer(r->batch));
    json_object_set_new(j, "accumulation", json_integer(r->accum_steps));
    if (tr->cfg.balance) {
        json_t *split = json_array();
        for (int d = 0; d < tr->dp_size; d++) json_array_append_new(split, json_integer(tr->balance.split[d]));
        json_object_set_new(j, "micro_batches_per_replica", split);
    }
    if (r->skipped) json_object_set_new(j, "skipped", json_string(r->skip_reason));
    json_object_set_new(j, "skips", json_integer(tr->guard.skips));
    if (tr->last_ckpt_stall > 0) json_object_set_new(j, "ckpt_stall_ms", number(tr->last_ckpt_stall * 1e3));
    json_object_set_new(j, "compute_ms_median", number(r->median_compute * 1e3));
    if (r->straggler >= 0) json_object_set_new(j, "straggler", json_integer(r->straggler));
    if (tr->cfg.noise_scale && !isnan(r->noise_scale)) {
        json_object_set_new(j, "noise_scale", number(r->noise_scale));
        json_object_set_new(j, "noise_scale_tokens", number(r->noise_scale * tr->cfg.seq_len));
    }
    DPMemory mem = dp_memory(tr->dp);
    size_t opt_bytes = tr->update_count * sizeof(float) * (size_t)optimizer_state_arrays(tr->opt.cfg.kind);
    json_object_set_new(j, "state_bytes", json_integer((json_int_t)(mem.param_bytes + mem.grad_bytes + opt_bytes)));
    json_object_set_new(j, "buffer_bytes", json_integer((json_int_t)mem.buffer_bytes));
    json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)r->peak_rss));
    if (tr->cfg.baseline_tokens_per_s > 0)
        json_object_set_new(j, "scaling_efficiency",
                            number(tokens_per_s / (tr->dp_size * tr->cfg.baseline_tokens_per_s)));
    if (!isnan(val_loss)) json_object_set_new(j, "val_loss", number(val_loss));
    char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(tr->metrics, "%s\n", line);
    fflush(tr->metrics);
    free(line);
    json_decref(j);
}

static void write_trace(Trainer *tr, double origin) {
    if (!is_set(tr->cfg.trace)) return;
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

int train_run(const TrainConfig *cfg, Comm *world) {
    Trainer *tr = bs_calloc(1, sizeof *tr);
    setup(tr, cfg, world);
    const TrainConfig *c = &tr->cfg;
    const bool talk = tr->rank == 0 && !c->quiet;
    double flops_per_token = gpt_flops_per_token(&tr->model.cfg, c->seq_len);
    print_header(tr);
    double origin = bs_now();
    double first_val = NAN, last_val = NAN;
    if (tr->step == 0 && tr->has_val && c->eval_every > 0) {
        first_val = evaluate(tr);
        if (talk) progress_line(&tr->progress, "step 0: val loss %.4f", first_val);
    }
    double time_sum = 0, exposed_sum = 0, tokens_timed = 0;
    long timed_steps = 0, start_step = tr->step;
    while (tr->step < tr->total_steps && tr->seqs_consumed * (uint64_t)c->seq_len < tr->total_tokens) {
        fault_maybe_stop(&tr->fault, tr->rank, tr->step + 1);
        StepResult r = train_step(tr);
        if (r.skipped && talk)
            progress_line(&tr->progress, "step %ld skipped (no update): %s", tr->step, r.skip_reason);
        if (r.straggler >= 0 && talk && r.straggler != tr->last_straggler)
            progress_line(&tr->progress, "rank %d is a straggler: %.1f ms of compute against a median of %.1f ms%s",
                          r.straggler, tr->rank_times[r.straggler] * 1e3, r.median_compute * 1e3,
                          c->balance ? " (rebalancing micro-batches)" : " (--balance shifts work away from it)");
        tr->last_straggler = r.straggler;
        if (tr->step > start_step + 1 || tr->total_steps - start_step == 1) {
            tokens_timed += (double)r.batch * c->seq_len;
            time_sum += r.slowest;
            exposed_sum += r.comm_exposed;
            timed_steps++;
        }
        double avg = timed_steps ? time_sum / timed_steps : r.seconds;
        double tokens_per_s = (double)r.batch * c->seq_len / r.slowest;
        double val_loss = NAN;
        bool last = tr->step == tr->total_steps || tr->seqs_consumed * (uint64_t)c->seq_len >= tr->total_tokens;
        if (tr->has_val && c->eval_every > 0 && (tr->step % c->eval_every == 0 || last)) {
            val_loss = evaluate(tr);
            last_val = val_loss;
        }
        /* the step's metrics line before its checkpoint: a run killed between the two resumes from the
         * checkpoint before, never past a line that was not written; so a checkpoint's stall is reported on the
         * next step's line */
        if (tr->rank == 0) write_metrics(tr, &r, tokens_per_s, val_loss);
        tr->last_ckpt_stall = 0;
        train_save_poll(tr);
        if (tr->ckpt_dir[0] && c->ckpt_every > 0 && tr->step % c->ckpt_every == 0 && !last) {
            double stall = train_save(tr);
            if (talk) progress_line(&tr->progress, "checkpoint at step %ld: training stalled %.1f ms%s", tr->step,
                                    stall * 1e3, c->async_ckpt ? " (copy; written in the background)" : "");
            tr->last_ckpt_stall = stall;
        }
        guard_stop_if_stuck(&tr->guard, tr->step, r.skip_reason);
        if (talk) {
            char extra[160] = "";
            int n = 0;
            if (tr->dp_size > 1)
                n += snprintf(extra, sizeof extra, "comm %.0f%% exposed", 100 * r.comm_exposed / r.seconds);
            if (tr->dp_size > 1 && r.comm_bytes < r.comm_bytes_fp32)
                n += snprintf(extra + n, sizeof extra - (size_t)n, ", %.1f MB sent = %.1f%% of fp32",
                              (double)r.comm_bytes / 1e6, 100.0 * (double)r.comm_bytes / (double)r.comm_bytes_fp32);
            if (c->noise_scale && !isnan(r.noise_scale))
                n += snprintf(extra + n, sizeof extra - (size_t)n, "%sB_noise %.0f seq, batch %ld", n ? " | " : "",
                              r.noise_scale, r.batch);
            if (!isnan(val_loss)) snprintf(extra + n, sizeof extra - (size_t)n, "%sval %.4f", n ? " | " : "", val_loss);
            long shown_total = tr->total_steps; /* adaptive: estimated from the tokens still to go */
            if (tr->adaptive)
                shown_total = (long)ceil(tr->step * (double)tr->total_tokens / ((double)tr->seqs_consumed * c->seq_len));
            progress_step(&tr->progress, tr->step, shown_total, r.loss, r.lr, tokens_per_s, r.slowest * 1e3,
                          avg * (double)(shown_total - tr->step), extra);
        }
        if (c->target_val_loss > 0 && !isnan(val_loss) && val_loss <= c->target_val_loss) {
            if (talk) progress_line(&tr->progress, "target validation loss %.4f reached at step %ld (%.4g tokens)",
                                    c->target_val_loss, tr->step, (double)tr->seqs_consumed * c->seq_len);
            break;
        }
        if (c->sample_every > 0 && tr->step % c->sample_every == 0 && !last) print_sample(tr);
    }
    if (talk) progress_finish(&tr->progress);
    if (tr->ckpt_dir[0] && (tr->step > start_step || tr->resharded)) train_save(tr); /* resharding is a plain run */
    train_save_finish(tr);
    export_models(tr);
    write_trace(tr, origin);
    if (talk && timed_steps > 0) {
        double tps = tokens_timed / time_sum;
        printf("done: %.0f tokens/s, %.1f GFLOP/s (%.1f ms/step)", tps, tps * flops_per_token / 1e9,
               1e3 * time_sum / timed_steps);
        if (tr->dp_size > 1) printf(", communication exposed %.1f%% of step time", 100 * exposed_sum / time_sum);
        if (c->baseline_tokens_per_s > 0)
            printf(", scaling efficiency %.1f%% vs %.0f tokens/s on one process",
                   100 * tps / (tr->dp_size * c->baseline_tokens_per_s), c->baseline_tokens_per_s);
        printf("\n");
    }
    if (talk && !isnan(first_val) && !isnan(last_val)) printf("val loss: %.4f -> %.4f\n", first_val, last_val);
    if (c->sample_tokens > 0) print_sample(tr);
    teardown(tr);
    free(tr);
    return 0;
}
