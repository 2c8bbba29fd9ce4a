/* train_setup.c: the training job's set-up and tear-down (see
 * train_setup.h): the tokenizer, the model's shape and layer split, the
 * engine, the batch plan, the policies, data, schedules and outputs. */
#include "train/train_setup.h"

#include <jansson.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/io.h"
#include "model/model_file.h"
#include "train/lora_flags.h"
#include "train/train_ckpt.h"


/* The prepare.json beside a source's shards (NULL if none), and its path in path. */
static json_t *prepare_summary(const char *source, char *path, size_t n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", source);
    if (!bs_is_dir(dir)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, n, "%s/prepare.json", dir);
    return bs_path_exists(path) ? json_load_file(path, 0, NULL) : NULL;
}

/* SFT data packed whole into windows (data/sft_pack.h) must be read in windows of the same length. */
static void check_packed_windows(const char *source, int seq_len) {
    char path[4200];
    json_t *j = prepare_summary(source, path, sizeof path);
    json_t *packed = json_object_get(j, "seq_len");
    if (json_is_integer(packed) && json_integer_value(packed) != seq_len)
        bs_die("--seq-len %d: %s packs its examples whole into windows of %lld tokens (%s): train with --seq-len %lld "
               "or prepare it again with --seq-len %d", seq_len, source, (long long)json_integer_value(packed), path,
               (long long)json_integer_value(packed), seq_len);
    const char *format = json_string_value(json_object_get(j, "format"));
    if (!packed && format && strcmp(format, "chat-jsonl") == 0)
        bs_warn("%s was prepared before examples were packed whole into windows (no seq_len in %s): some examples "
                "are cut across two sequences; prepare it again with --seq-len %d", source, path, seq_len);
    json_decref(j);
}

/* The tokenizer: --tokenizer, else the one the data was prepared with
 * (prepare.json beside the shards), else byte-level. */
static Tokenizer *load_tokenizer(const TrainConfig *c) {
    if (option_given(c->tokenizer)) return tokenizer_load(c->tokenizer, c->vocab_dir);
    char path[4200];
    json_t *j = prepare_summary(c->data, path, sizeof path);
    const char *name = j ? json_string_value(json_object_get(j, "tokenizer")) : NULL;
    Tokenizer *t = tokenizer_load(name ? name : "byte", NULL);
    json_decref(j);
    return t;
}

/* The whole model's shape: from the flags, or from --init-from's file. */
static GPTConfig model_shape(Trainer *tr) {
    TrainConfig *c = &tr->cfg;
    tr->tok = load_tokenizer(c);
    int vocab = c->vocab_size > 0 ? c->vocab_size : tokenizer_vocab_size(tr->tok);
    GPTConfig mc = {.max_seq_len = c->seq_len, .vocab_size = vocab, .num_layers = c->layers,
                    .num_heads = c->heads, .channels = c->channels};
    if (option_given(c->init_from)) {
        model_file_read_config(c->init_from, &mc); /* the flags agree with it (cli/model_flags.c); --heads stands
                                                     where the file declares none */
        if (c->seq_len > mc.max_seq_len)
            bs_die("--seq-len %d is longer than the model's maximum sequence length %d (from %s)", c->seq_len,
                   mc.max_seq_len, c->init_from);
        c->vocab_size = mc.vocab_size;
        c->layers = mc.num_layers, c->heads = mc.num_heads, c->channels = mc.channels; /* the file's, from here on */
    }
    if (mc.vocab_size != tokenizer_vocab_size(tr->tok)) { /* e.g. random-token benchmarks: no text to show */
        tokenizer_free(tr->tok);
        tr->tok = NULL;
    }
    char why[256];
    if (c->experts > 1) {
        mc.experts = c->experts, mc.moe_top_k = c->moe_top_k, mc.moe_ffn = c->moe_ffn, mc.moe_router = c->moe_router;
        mc.moe_aux_coef = c->moe_aux_loss, mc.moe_z_coef = c->moe_z_loss, mc.moe_bias_update = c->moe_bias_update;
        mc.moe_every = c->moe_every;
        mc.moe_gates = train_moe_gates(c), mc.moe_routed_scale = c->moe_routed_scale;
        if (!train_capacity_factor(c, &mc.capacity_factor, why, sizeof why)) bs_die("%s", why);
    }
    if (!gpt_config_check(&mc, why, sizeof why)) bs_die("%s", why);
    mc.lora_rank = c->lora_rank;
    mc.base_weights = c->base_weights;
    if (c->lora_rank > 0 && !lora_parse_targets(c->lora_targets, &mc.lora_targets, why, sizeof why)) bs_die("%s", why);
    if (c->lora_rank > mc.channels) /* every adapted layer's smaller side is C (qkv C->3C, fc C->4C, ...) */
        bs_die("--lora-rank %d is larger than the model's width %d, the smaller side of every adapted layer (a "
               "rank above it adds parameters and no capacity)", c->lora_rank, mc.channels);
    return mc;
}

/* Layers per pipeline stage: --pp-split as given, even, or balanced by FLOPs
 * (per token, forward and backward: 6 x a layer's or the head's weights, +
 * attention; the output layer counted on the last stage). */
static int *stage_layers(const TrainConfig *c, const GPTConfig *mc) {
    int *layers = bs_malloc(sizeof(int) * (size_t)c->pp);
    char why[512];
    if (strcmp(c->pp_split, "auto") == 0) {
        double C = mc->channels, layer = 6 * 12 * C * C + 12 * C * c->seq_len;
        grid_balanced_layers(mc->num_layers, c->pp, layer, 6 * C * gpt_padded_vocab(mc->vocab_size), layers);
    } else if (!grid_parse_split(c->pp_split, mc->num_layers, c->pp, layers, why, sizeof why)) {
        bs_die("--pp-split %s", why);
    }
    return layers;
}

/* --doc-mask: attention inside packed documents (auto: with loss-masked SFT data), which start at end-of-text. */
static void setup_doc_mask(Trainer *tr, EngineConfig *ec) {
    const TrainConfig *c = &tr->cfg;
    ec->doc_mask = c->doc_mask == DOC_MASK_ON || (c->doc_mask == DOC_MASK_AUTO && loader_has_masks(c->data));
    if (!ec->doc_mask) return;
    if (c->cp > 1)
        bs_die("--doc-mask: attention inside documents is not supported with --cp yet (the training data %s has loss "
               "masks, which turn it on: give --doc-mask off to train across documents)", c->data);
    if (!tr->tok)
        bs_die("--doc-mask needs the data's tokenizer (prepare.json beside %s) to know its end-of-text token", c->data);
    ec->doc_separator = tokenizer_eot(tr->tok);
}

/* A run whose activations cannot fit is refused before allocating them. The bound is the whole model's
 * activations for one micro-batch (and its weights) shared evenly by the tp x pp x cp ranks that split it: no
 * rank holds less than that share, so this refuses no run that would fit. */
static void check_memory(const TrainConfig *c, const GPTConfig *mc) {
    const double split = (double)c->tp * c->pp * c->cp;
    const double params = (double)gpt_padded_vocab(mc->vocab_size) * mc->channels +
                          (double)mc->max_seq_len * mc->channels + 12.0 * mc->num_layers * mc->channels * mc->channels;
    const double need = ((double)gpt_acts_bytes(mc, c->micro_batch, c->seq_len, true) + 4 * params) / split;
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
        bs_die("--seq-len %d with --micro-batch %d needs at least %.1f GB per process (activations of a micro-batch "
               "and the weights of a %d-layer, %d-wide model), more than this machine's %.1f GB: lower --seq-len or "
               "--micro-batch", c->seq_len, c->micro_batch, need / 1e9, mc->num_layers, mc->channels, have / 1e9);
}

/* The engine: grid, model chunks, their data-parallel shards and optimizer state, the pipeline. */
static void setup_engine(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    tr->model = model_shape(tr);
    check_memory(c, &tr->model);
    int *layers = stage_layers(c, &tr->model);
    EngineConfig ec = {.tp = c->tp, .pp = c->pp, .dp = c->dp, .cp = c->cp, .ep = c->ep, .cp_algo = c->cp_algo,
                       .cp_split = c->cp_split, .virtual_stages = c->virtual_stages,
                       .stage_layers = layers, .schedule = c->pp_schedule, .micro_batch = c->micro_batch,
                       .seq_len = c->seq_len, .seed = (uint64_t)c->seed,
                       .init_from = option_given(c->init_from) ? c->init_from : NULL,
                       .upcycle_noise = c->upcycle_noise,
                       .bf16 = c->precision == PRECISION_BF16, .bf16_path = c->bf16_matmul,
                       .measure_micro_norms = c->noise_scale};
    const Fp8Options fp8 = {c->fp8_recipe, c->fp8_amax_history, c->fp8_amax_algo, c->fp8_margin};
    if (c->precision == PRECISION_FP8) {
        ec.fp8 = &fp8;
        ec.bf16 = c->fp8_high_precision == PRECISION_BF16;
    }
    ec.outlier_scale = c->outlier_scale;
    ec.lora_alpha = (float)c->lora_alpha;
    ec.lora_dropout = (float)c->lora_dropout;
    ec.lora_init = option_given(c->lora_init) ? c->lora_init : NULL;
    setup_doc_mask(tr, &ec);
    ec.on_device = c->device != TRAIN_DEVICE_CPU;
    ec.device = c->device == TRAIN_DEVICE_CUDA ? DEVICE_CUDA : DEVICE_SIM;
    ec.sim_memory = (size_t)c->sim_memory_mb << 20;
    ec.data_parallel = (DPOptions){.zero_stage = c->zero, .bucket_floats = (size_t)(c->bucket_mb * 1024 * 1024 / sizeof(float)),
                        .overlap = !c->no_overlap};
    ec.optimizer = (OptimizerConfig){c->optimizer, (float)c->beta1, (float)c->beta2, (float)c->eps,
                                     (float)c->weight_decay, (float)c->momentum, (float)c->dampening, c->nesterov,
                                     (float)c->lars_eta, c->lamb_clamp};
    features_configure(&tr->cx, &ec);
    tr->engine = engine_create(tr->world, &tr->model, &ec);
    free(layers);
    const Grid *g = engine_grid(tr->engine);
    tr->dp_size = g->dp;
    tr->dp_index = g->dp_index;
    tr->cx.engine = tr->engine;
    tr->cx.dp_size = tr->dp_size, tr->cx.dp_index = tr->dp_index;
}

/* Parses the batch schedule and plans the run's length in steps and tokens. */
static void setup_batch_schedule(Trainer *tr) {
    TrainConfig *c = &tr->cfg;
    char why[256];
    uint64_t budget = c->train_tokens > 0 ? (uint64_t)c->train_tokens
                                          : (uint64_t)c->steps * (uint64_t)c->global_batch * (uint64_t)c->seq_len;
    const bool goodput = strncmp(c->batch_schedule, "goodput", 7) == 0; /* estimators.h; otherwise as adaptive */
    if (strncmp(c->batch_schedule, "adaptive", 8) == 0 || goodput) {
        const char *kind = goodput ? "goodput" : "adaptive";
        long lo, hi;
        char tail, format[32];
        snprintf(format, sizeof format, "%s:%%ld:%%ld%%c", kind);
        if (sscanf(c->batch_schedule, format, &lo, &hi, &tail) != 2 || lo < 1 || hi < lo)
            bs_die("--batch-schedule %s:MIN:MAX needs 1 <= MIN <= MAX sequences (got '%s')", kind, c->batch_schedule);
        if (lo < 2L * c->micro_batch)
            bs_die("--batch-schedule %s:%ld:%ld: MIN must hold at least two micro-batches (%d) so the noise "
                   "scale can be measured", kind, lo, hi, 2 * c->micro_batch);
        tr->batch.adaptive = true;
        tr->batch.adaptive_batch = lo;
        tr->batch.adaptive_max = hi;
        c->noise_scale = true; /* the policy follows the measured noise scale */
        if (c->train_tokens == 0)
            bs_die("--batch-schedule %s needs --train-tokens (the number of steps is not known)", kind);
        tr->batch_schedule.kind = BATCH_CONSTANT; /* unused */
    } else {
        if (!batch_schedule_parse(c->batch_schedule, &tr->batch_schedule, why, sizeof why)) bs_die("%s", why);
        if (!batch_schedule_prepare(&tr->batch_schedule, c->global_batch, budget, why, sizeof why)) bs_die("%s", why);
    }
    tr->batch.base_batch = c->base_batch > 0 ? c->base_batch : c->global_batch;
    if (tr->batch.adaptive) { /* steps unknown: stop on tokens */
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

/* The pipeline schedule must run every step's micro-batches (interleaved:
 * a multiple of the stages): checked before any work for every batch size
 * the run can reach (the schedule's, step by step; an adaptive one's every
 * whole number of micro-steps between its bounds). */
static void check_schedule_at(Trainer *tr, long batch) {
    const Grid *g = engine_grid(tr->engine);
    ScheduleShape shape = {tr->cfg.pp_schedule, g->pp, engine_num_chunks(tr->engine),
                           (int)(batch / ((long)tr->cfg.micro_batch * tr->dp_size))};
    char why[256];
    if (!schedule_check(&shape, why, sizeof why)) {
        if (batch == tr->cfg.global_batch) bs_die("%s", why);
        bs_die("%s (at a batch of %ld sequences, which --batch-schedule %s reaches)", why, batch, tr->cfg.batch_schedule);
    }
}

static void check_schedule(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    check_schedule_at(tr, c->global_batch);
    if (c->pp_schedule != PIPE_INTERLEAVED) return; /* the others run any number of micro-batches */
    const long granule = (long)c->micro_batch * tr->dp_size;
    char ignore[256];
    long realised;
    if (tr->batch.adaptive) { /* MIN, then whole micro-steps up to MAX */
        batch_round(tr->batch.adaptive_batch, granule, false, &realised, ignore, sizeof ignore);
        check_schedule_at(tr, realised);
        for (long b = (tr->batch.adaptive_batch + granule - 1) / granule * granule; b <= tr->batch.adaptive_max; b += granule)
            check_schedule_at(tr, b);
        return;
    }
    uint64_t tokens = 0;
    for (long step = 0; step < tr->total_steps && tokens < tr->total_tokens && step < 10000000; step++) {
        batch_round(batch_at(&tr->batch_schedule, tokens), granule, false, &realised, ignore, sizeof ignore);
        check_schedule_at(tr, realised);
        tokens += (uint64_t)realised * (uint64_t)c->seq_len;
    }
}

/* Every output path is checked on rank 0 (the one that writes them) before any work, so a run does not train
 * for nothing and fail to write its result. */
static void check_outputs(const TrainConfig *c, int rank) {
    const struct { const char *flag, *path; bool is_dir; } outputs[] = {
        {"--save-model", c->save_model, false}, {"--save-adapters", c->save_adapters, true},
        {"--out", c->out, true}, {"--ckpt-dir", c->ckpt_dir, true}, {"--metrics", c->metrics, false},
        {"--trace", c->trace, false}, {"--tensorboard", c->tensorboard, true}};
    char why[4400];
    for (size_t i = 0; rank == 0 && i < sizeof outputs / sizeof outputs[0]; i++)
        if (option_given(outputs[i].path) && !bs_check_writable(outputs[i].path, outputs[i].is_dir, why, sizeof why))
            bs_die("%s %s: %s", outputs[i].flag, outputs[i].path, why);
}

/* LoRA: a model file saved without the adapters is the frozen base; said once set-up has passed every check. */
static void warn_base_only(const TrainConfig *c, int rank) {
    if (rank == 0 && c->lora_rank > 0 && option_given(c->save_model) && !c->lora_merge && !option_given(c->save_adapters))
        bs_warn("--save-model %s gets the frozen base without the trained adapters: add --lora-merge (folded into "
                "the weights) or --save-adapters DIR (a peft directory)", c->save_model);
}

/* The step's statistics across ranks. */
static void setup_policies(Trainer *tr) { step_stats_init(&tr->stats, tr->world, tr->cfg.straggler_threshold); }

void train_setup(Trainer *tr, const TrainConfig *cfg, Comm *world) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    TrainConfig *c = &tr->cfg;
    tr->world = world;
    tr->rank = comm_rank(world);
    tr->cx = (TrainContext){.cfg = c, .world = world, .model = &tr->model, .rank = tr->rank,
                            .world_size = comm_size(world), .batch = &tr->batch, .train_data = &tr->train_data};
    if (c->threads > 0) omp_set_num_threads(c->threads);
    char why[512];
    if (!lora_flags_resolve(c, why, sizeof why)) bs_die("%s", why); /* callers other than the command line */
    if (!train_config_check(c, why, sizeof why)) bs_die("%s", why);
    check_outputs(c, tr->rank);
    if (strncmp(c->batch_schedule, "adaptive", 8) == 0 || strncmp(c->batch_schedule, "goodput", 7) == 0 ||
        c->noise_scale_every > 0 || c->noise_probe_every > 0)
        c->noise_scale = true; /* the policy follows the noise scale; the others are logged beside B_simple */
    setup_engine(tr); /* builds the grid: the data-parallel size is known from here on */
    if (tr->rank == 0) lora_flags_check_base(c, engine_base_hash(tr->engine));
    int per_step = c->micro_batch * tr->dp_size;
    if (c->global_batch == 0) c->global_batch = per_step;
    if (c->global_batch % per_step != 0)
        bs_die("--global-batch %d is not a multiple of --micro-batch %d x %d data-parallel ranks", c->global_batch,
               c->micro_batch, tr->dp_size);
    setup_batch_schedule(tr);
    check_schedule(tr);
    tr->cx.total_steps = tr->total_steps;
    features_create(&tr->features, &tr->cx); /* after the schedule (an adaptive one measures the noise scale),
                                                before a resume replaces the parameters */
    setup_policies(tr);
    trace_init(&tr->trace, option_given(c->trace));
    engine_set_trace(tr->engine, option_given(c->trace) ? &tr->trace : NULL);
    bool shuffle = c->data_order == DATA_SHUFFLED;
    check_packed_windows(c->data, c->seq_len);
    if (option_given(c->val_data)) check_packed_windows(c->val_data, c->seq_len);
    loader_open(&tr->train_data, c->data, c->seq_len, tr->model.vocab_size, (uint64_t)c->seed, shuffle);
    if (option_given(c->val_data)) {
        loader_open(&tr->val_data, c->val_data, c->seq_len, tr->model.vocab_size, 0, false);
        tr->has_val = true;
    }

    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5ca1ab1eULL);
    double step_tokens = (double)c->global_batch * c->seq_len; /* of the final batch */
    double warmup = c->warmup_tokens > 0 ? (double)c->warmup_tokens : c->warmup * step_tokens;
    tr->lr = (LrSchedule){c->lr, c->min_lr, warmup, (double)tr->total_tokens};

    if (option_given(c->ckpt_dir)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s", c->ckpt_dir);
    else if (option_given(c->out)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s/ckpt", c->out);
    if (option_given(c->resume)) train_resume(tr);
    tr->cx.step = tr->step, tr->cx.seqs_consumed = tr->seqs_consumed;
    if (option_given(c->resume) && !tr->batch.adaptive && tr->step > tr->total_steps)
        bs_die("--resume %s is at step %ld, past the %ld step(s) of this run (%s): nothing to train", c->resume,
               tr->step, tr->total_steps, c->train_tokens > 0 ? "--train-tokens" : "--steps");
    tr->metrics = (Metrics){NULL, c->seq_len, comm_size(world), engine_grid(tr->engine)->pp, tr->dp_size,
                            c->noise_scale, c->baseline_tokens_per_s, c->noise_scale_every > 0,
                            strncmp(c->batch_schedule, "goodput", 7) == 0, c->noise_probe_every > 0};
    if (tr->rank == 0) {
        if (tr->ckpt_dir[0]) bs_mkdir_p(tr->ckpt_dir);
        if (option_given(c->out)) bs_mkdir_p(c->out);
        if (option_given(c->metrics)) tr->metrics.file = metrics_open(c->metrics, tr->step);
    }
    warn_base_only(c, tr->rank);
    progress_init(&tr->progress, stdout, c->log_every);
}

void train_teardown(Trainer *tr) {
    metrics_close(&tr->metrics);
    loader_close(&tr->train_data);
    if (tr->has_val) loader_close(&tr->val_data);
    trace_free(&tr->trace);
    features_free(&tr->features, &tr->cx); /* before the engine: 1-bit Adam's momentum may be its state */
    engine_free(tr->engine);
    if (tr->tok) tokenizer_free(tr->tok);
    step_stats_free(&tr->stats);
    train_save_free(tr);
}

