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
#include "core/reason.h"
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
        bs_die_about("seq_len data", "the sequence length %d: %s packs its examples whole into windows of %lld tokens "
                     "(%s): train with a sequence length of %lld or prepare it again with %d", seq_len, source,
                     (long long)json_integer_value(packed), path, (long long)json_integer_value(packed), seq_len);
    const char *format = json_string_value(json_object_get(j, "format"));
    if (!packed && format && strcmp(format, "chat-jsonl") == 0)
        bs_warn("%s was prepared before examples were packed whole into windows (no seq_len in %s): some examples "
                "are cut across two sequences; prepare it again with a sequence length of %d", source, path, seq_len);
    json_decref(j);
}

/* The tokenizer: --tokenizer, else the one the data was prepared with
 * (prepare.json beside the shards), else byte-level. */
static Tokenizer *load_tokenizer(const TrainConfig *c) {
    if (option_given(c->model.tokenizer)) return tokenizer_load(c->model.tokenizer, c->model.vocab_dir);
    char path[4200];
    json_t *j = prepare_summary(c->data.train, path, sizeof path);
    const char *name = j ? json_string_value(json_object_get(j, "tokenizer")) : NULL;
    Tokenizer *t = tokenizer_load(name ? name : "byte", NULL);
    json_decref(j);
    return t;
}

/* The whole model's shape: from the flags, or from --init-from's file. */
static GPTConfig model_shape(Trainer *tr) {
    TrainConfig *c = &tr->cfg;
    tr->tok = load_tokenizer(c);
    int vocab = c->model.vocab_size > 0 ? c->model.vocab_size : tokenizer_vocab_size(tr->tok);
    GPTConfig mc = {.max_seq_len = c->model.seq_len, .vocab_size = vocab, .num_layers = c->model.layers,
                    .num_heads = c->model.heads, .channels = c->model.channels};
    if (option_given(c->model.init_from)) {
        model_file_read_config(c->model.init_from, &mc); /* the flags agree with it (cli/model_flags.c); --heads stands
                                                     where the file declares none */
        if (c->model.seq_len > mc.max_seq_len)
            bs_die_about("seq_len init_from", "the sequence length %d is longer than the model's maximum sequence "
                         "length %d (from %s)", c->model.seq_len, mc.max_seq_len, c->model.init_from);
        c->model.vocab_size = mc.vocab_size;
        c->model.layers = mc.num_layers, c->model.heads = mc.num_heads, c->model.channels = mc.channels; /* the file's, from here on */
    }
    if (mc.vocab_size != tokenizer_vocab_size(tr->tok)) { /* e.g. random-token benchmarks: no text to show */
        tokenizer_free(tr->tok);
        tr->tok = NULL;
    }
    char why[256];
    if (c->moe.experts > 1) {
        mc.experts = c->moe.experts, mc.moe_top_k = c->moe.top_k, mc.moe_ffn = c->moe.ffn, mc.moe_router = c->moe.router;
        mc.moe_aux_coef = c->moe.aux_loss, mc.moe_z_coef = c->moe.z_loss, mc.moe_bias_update = c->moe.bias_update;
        mc.moe_every = c->moe.every;
        mc.moe_gates = train_moe_gates(c), mc.moe_routed_scale = c->moe.routed_scale;
        if (!train_capacity_factor(c, &mc.capacity_factor, why, sizeof why)) bs_die("%s", why);
    }
    if (!gpt_config_check(&mc, why, sizeof why)) bs_die("%s", why);
    mc.lora_rank = c->lora.rank;
    mc.recompute = c->model.recompute;
    mc.base_weights = c->lora.base_weights;
    if (c->lora.rank > 0 && !lora_parse_targets(c->lora.targets, &mc.lora_targets, why, sizeof why)) bs_die("%s", why);
    if (c->lora.rank > mc.channels) /* every adapted layer's smaller side is C (qkv C->3C, fc C->4C, ...) */
        bs_die_about("lora_rank channels", "the LoRA rank %d is larger than the model's width %d, the smaller side of "
                     "every adapted layer (a rank above it adds parameters and no capacity)", c->lora.rank, mc.channels);
    return mc;
}

/* Layers per pipeline stage: --pp-split as given, even, or balanced by FLOPs
 * (per token, forward and backward: 6 x a layer's or the head's weights, +
 * attention; the output layer counted on the last stage). */
static int *stage_layers(const TrainConfig *c, const GPTConfig *mc) {
    int *layers = bs_malloc(sizeof(int) * (size_t)c->parallel.pp);
    char why[512];
    if (strcmp(c->parallel.pp_split, "auto") == 0) {
        double C = mc->channels, layer = 6 * 12 * C * C + 12 * C * c->model.seq_len;
        grid_balanced_layers(mc->num_layers, c->parallel.pp, layer, 6 * C * gpt_padded_vocab(mc->vocab_size), layers);
    } else if (!grid_parse_split(c->parallel.pp_split, mc->num_layers, c->parallel.pp, layers, why, sizeof why)) {
        bs_die_about("pp_split", "the pipeline stages' layer split %s", why);
    }
    return layers;
}

/* --doc-mask: attention inside packed documents (auto: with loss-masked SFT data), which start at end-of-text. */
static void setup_doc_mask(Trainer *tr, EngineConfig *ec) {
    const TrainConfig *c = &tr->cfg;
    ec->doc_mask = c->data.doc_mask == DOC_MASK_ON || (c->data.doc_mask == DOC_MASK_AUTO && loader_has_masks(c->data.train));
    if (!ec->doc_mask) return;
    if (c->parallel.cp > 1)
        bs_die_about("doc_mask cp", "attention inside documents is not supported with context parallelism yet (the "
                     "training data %s has loss masks, which turn it on: turn the document mask off to train across "
                     "documents)", c->data.train);
    if (!tr->tok)
        bs_die_about("doc_mask", "the document mask needs the data's tokenizer (prepare.json beside %s) to know its "
                     "end-of-text token", c->data.train);
    ec->doc_separator = tokenizer_eot(tr->tok);
}

/* A run whose activations cannot fit is refused before allocating them. The bound is the whole model's
 * activations for one micro-batch (and its weights) shared evenly by the tp x pp x cp ranks that split it: no
 * rank holds less than that share, so this refuses no run that would fit. */
static void check_memory(const TrainConfig *c, const GPTConfig *mc) {
    const double split = (double)c->parallel.tp * c->parallel.pp * c->parallel.cp;
    const double params = (double)gpt_padded_vocab(mc->vocab_size) * mc->channels +
                          (double)mc->max_seq_len * mc->channels + 12.0 * mc->num_layers * mc->channels * mc->channels;
    const double need = ((double)gpt_acts_bytes(mc, c->batch.micro_batch, c->model.seq_len, true) + 4 * params) / split;
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
        bs_die_about("seq_len micro_batch", "a sequence length of %d with micro-batches of %d needs at least %.1f GB "
                     "per process (activations of a micro-batch and the weights of a %d-layer, %d-wide model), more "
                     "than this machine's %.1f GB: lower either", c->model.seq_len, c->batch.micro_batch, need / 1e9,
                     mc->num_layers, mc->channels, have / 1e9);
}

/* The engine: grid, model chunks, their data-parallel shards and optimizer state, the pipeline. */
static void setup_engine(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    tr->model = model_shape(tr);
    check_memory(c, &tr->model);
    int *layers = stage_layers(c, &tr->model);
    EngineConfig ec = {.tp = c->parallel.tp, .pp = c->parallel.pp, .dp = c->parallel.dp, .cp = c->parallel.cp, .ep = c->moe.ep, .cp_algo = c->parallel.cp_algo,
                       .cp_split = c->parallel.cp_split, .virtual_stages = c->parallel.virtual_stages,
                       .stage_layers = layers, .schedule = c->parallel.pp_schedule, .micro_batch = c->batch.micro_batch,
                       .seq_len = c->model.seq_len, .seed = (uint64_t)c->model.seed,
                       .init_from = option_given(c->model.init_from) ? c->model.init_from : NULL,
                       .upcycle_noise = c->moe.upcycle_noise,
                       .bf16 = c->precision.mode == PRECISION_BF16, .bf16_path = c->precision.bf16_matmul,
                       .measure_micro_norms = c->estimators.noise_scale};
    const Fp8Options fp8 = {c->precision.fp8_recipe, c->precision.fp8_amax_history, c->precision.fp8_amax_algo, c->precision.fp8_margin};
    if (c->precision.mode == PRECISION_FP8) {
        ec.fp8 = &fp8;
        ec.bf16 = c->precision.fp8_high_precision == PRECISION_BF16;
    }
    ec.outlier_scale = c->debug.outlier_scale;
    ec.skip_pipe_wait = c->debug.skip_pipe_wait;
    ec.lora_alpha = (float)c->lora.alpha;
    ec.lora_dropout = (float)c->lora.dropout;
    ec.lora_init = option_given(c->lora.init) ? c->lora.init : NULL;
    setup_doc_mask(tr, &ec);
    ec.on_device = c->device.kind != TRAIN_DEVICE_CPU;
    ec.device = c->device.kind == TRAIN_DEVICE_CUDA ? DEVICE_CUDA : DEVICE_SIM;
    ec.sim_memory = (size_t)c->device.sim_memory_mb << 20;
    ec.gpu_comm = c->parallel.gpu_comm;
    ec.fused_attention = c->device.attention == TRAIN_ATTENTION_AUTO ? -1 : c->device.attention == TRAIN_ATTENTION_FLASH2;
    ec.bf16_activations = c->precision.activations == PRECISION_BF16;
    ec.cuda_graphs = c->device.cuda_graphs == TRAIN_CUDA_GRAPHS_ON;
    ec.data_parallel = (DPOptions){.zero_stage = c->parallel.zero, .bucket_floats = (size_t)(c->parallel.bucket_mb * 1024 * 1024 / sizeof(float)),
                        .overlap = !c->parallel.no_overlap};
    ec.optimizer = (OptimizerConfig){c->optim.kind, (float)c->optim.beta1, (float)c->optim.beta2, (float)c->optim.eps,
                                     (float)c->optim.weight_decay, (float)c->optim.momentum, (float)c->optim.dampening, c->optim.nesterov,
                                     (float)c->optim.lars_eta, c->optim.lamb_clamp};
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
    uint64_t budget = c->optim.train_tokens > 0 ? (uint64_t)c->optim.train_tokens
                                          : (uint64_t)c->optim.steps * (uint64_t)c->batch.global_batch * (uint64_t)c->model.seq_len;
    const bool goodput = strncmp(c->batch.schedule, "goodput", 7) == 0; /* estimators.h; otherwise as adaptive */
    if (strncmp(c->batch.schedule, "adaptive", 8) == 0 || goodput) {
        const char *kind = goodput ? "goodput" : "adaptive";
        long lo, hi;
        char tail, format[32];
        snprintf(format, sizeof format, "%s:%%ld:%%ld%%c", kind);
        if (sscanf(c->batch.schedule, format, &lo, &hi, &tail) != 2 || lo < 1 || hi < lo)
            bs_die_about("batch_schedule", "the batch schedule %s:MIN:MAX needs 1 <= MIN <= MAX sequences (got '%s')",
                         kind, c->batch.schedule);
        if (lo < 2L * c->batch.micro_batch)
            bs_die_about("batch_schedule micro_batch", "the batch schedule %s:%ld:%ld: MIN must hold at least two "
                         "micro-batches (%d) so the noise scale can be measured", kind, lo, hi, 2 * c->batch.micro_batch);
        tr->batch.adaptive = true;
        tr->batch.adaptive_batch = lo;
        tr->batch.adaptive_max = hi;
        c->estimators.noise_scale = true; /* the policy follows the measured noise scale */
        if (c->optim.train_tokens == 0)
            bs_die_about("batch_schedule train_tokens", "the %s batch schedule needs a number of training tokens (the "
                         "number of steps is not known)", kind);
        tr->batch_schedule.kind = BATCH_CONSTANT; /* unused */
    } else {
        if (!batch_schedule_parse(c->batch.schedule, &tr->batch_schedule, why, sizeof why)) bs_die("%s", why);
        if (!batch_schedule_prepare(&tr->batch_schedule, c->batch.global_batch, budget, why, sizeof why)) bs_die("%s", why);
    }
    tr->batch.base_batch = c->batch.base_batch > 0 ? c->batch.base_batch : c->batch.global_batch;
    if (tr->batch.adaptive) { /* steps unknown: stop on tokens */
        tr->total_steps = LONG_MAX;
        tr->total_tokens = budget;
    } else if (c->optim.train_tokens > 0) { /* count the steps the schedule takes to spend the budget */
        uint64_t tokens = 0;
        long steps = 0, granule = (long)c->batch.micro_batch * tr->dp_size;
        while (tokens < budget) {
            long realised;
            char ignore[256];
            batch_round(batch_at(&tr->batch_schedule, tokens), granule, false, &realised, ignore, sizeof ignore);
            tokens += (uint64_t)realised * (uint64_t)c->model.seq_len;
            steps++;
        }
        tr->total_steps = steps;
        tr->total_tokens = budget;
    } else {
        tr->total_steps = c->optim.steps;
        tr->total_tokens = budget;
    }
}

/* The pipeline schedule must run every step's micro-batches (interleaved:
 * a multiple of the stages): checked before any work for every batch size
 * the run can reach (the schedule's, step by step; an adaptive one's every
 * whole number of micro-steps between its bounds). */
static void check_schedule_at(Trainer *tr, long batch) {
    const Grid *g = engine_grid(tr->engine);
    ScheduleShape shape = {tr->cfg.parallel.pp_schedule, g->pp, engine_num_chunks(tr->engine),
                           (int)(batch / ((long)tr->cfg.batch.micro_batch * tr->dp_size))};
    char why[256];
    if (!schedule_check(&shape, why, sizeof why)) {
        if (batch == tr->cfg.batch.global_batch) bs_die("%s", why);
        bs_die("%s (at a batch of %ld sequences, which the batch schedule %s reaches)", why, batch, tr->cfg.batch.schedule);
    }
}

static void check_schedule(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    check_schedule_at(tr, c->batch.global_batch);
    if (c->parallel.pp_schedule != PIPE_INTERLEAVED) return; /* the others run any number of micro-batches */
    const long granule = (long)c->batch.micro_batch * tr->dp_size;
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
        tokens += (uint64_t)realised * (uint64_t)c->model.seq_len;
    }
}

/* Every output path is checked on rank 0 (the one that writes them) before any work, so a run does not train
 * for nothing and fail to write its result. */
static void check_outputs(const TrainConfig *c, int rank) {
    const struct { const char *subject, *what, *path; bool is_dir; } outputs[] = {
        {"save_model", "the model file", c->output.save_model, false},
        {"save_adapters", "the adapters directory", c->lora.save_adapters, true},
        {"out", "the output directory", c->output.out, true},
        {"ckpt_dir", "the checkpoint directory", c->output.ckpt_dir, true},
        {"metrics", "the metrics file", c->output.metrics, false}, {"trace", "the trace file", c->output.trace, false},
        {"tensorboard", "the TensorBoard directory", c->output.tensorboard, true}};
    char why[4400];
    for (size_t i = 0; rank == 0 && i < sizeof outputs / sizeof outputs[0]; i++)
        if (option_given(outputs[i].path) && !bs_check_writable(outputs[i].path, outputs[i].is_dir, why, sizeof why))
            bs_die_about(outputs[i].subject, "%s %s: %s", outputs[i].what, outputs[i].path, why);
}

/* LoRA: a model file saved without the adapters is the frozen base; said once set-up has passed every check. */
static void warn_base_only(const TrainConfig *c, int rank) {
    if (rank == 0 && c->lora.rank > 0 && option_given(c->output.save_model) && !c->lora.merge && !option_given(c->lora.save_adapters)) {
        char line[1024];
        bs_reason(line, sizeof line, "save_model lora_merge save_adapters", "the model file %s gets the frozen base "
                  "without the trained adapters: merge them (folded into the weights) or save them too (a peft "
                  "directory)", c->output.save_model);
        bs_warn("%s", line);
    }
}

/* The step's statistics across ranks. */
static void setup_policies(Trainer *tr) { step_stats_init(&tr->stats, tr->world, tr->cfg.guards.straggler_threshold); }

void train_setup(Trainer *tr, const TrainConfig *cfg, Comm *world) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    TrainConfig *c = &tr->cfg;
    tr->world = world;
    tr->rank = comm_rank(world);
    tr->cx = (TrainContext){.cfg = c, .world = world, .model = &tr->model, .rank = tr->rank,
                            .world_size = comm_size(world), .batch = &tr->batch, .train_data = &tr->train_data};
    if (c->parallel.threads > 0) omp_set_num_threads(c->parallel.threads);
    char why[512];
    if (!lora_flags_resolve(c, why, sizeof why)) bs_die("%s", why); /* callers other than the command line */
    if (!train_config_check(c, why, sizeof why)) bs_die("%s", why);
    check_outputs(c, tr->rank);
    if (strncmp(c->batch.schedule, "adaptive", 8) == 0 || strncmp(c->batch.schedule, "goodput", 7) == 0 ||
        c->estimators.noise_scale_every > 0 || c->estimators.noise_probe_every > 0)
        c->estimators.noise_scale = true; /* the policy follows the noise scale; the others are logged beside B_simple */
    setup_engine(tr); /* builds the grid: the data-parallel size is known from here on */
    if (tr->rank == 0) lora_flags_check_base(c, engine_base_hash(tr->engine));
    int per_step = c->batch.micro_batch * tr->dp_size;
    if (c->batch.global_batch == 0) c->batch.global_batch = per_step;
    if (c->batch.global_batch % per_step != 0)
        bs_die_about("global_batch micro_batch dp", "the global batch %d is not a multiple of the micro-batch %d x %d "
                     "data-parallel ranks", c->batch.global_batch, c->batch.micro_batch, tr->dp_size);
    setup_batch_schedule(tr);
    check_schedule(tr);
    tr->cx.total_steps = tr->total_steps;
    features_create(&tr->features, &tr->cx); /* after the schedule (an adaptive one measures the noise scale),
                                                before a resume replaces the parameters */
    setup_policies(tr);
    trace_init(&tr->trace, option_given(c->output.trace));
    engine_set_trace(tr->engine, option_given(c->output.trace) ? &tr->trace : NULL);
    bool shuffle = c->data.order == DATA_SHUFFLED;
    check_packed_windows(c->data.train, c->model.seq_len);
    if (option_given(c->data.val)) check_packed_windows(c->data.val, c->model.seq_len);
    loader_open(&tr->train_data, c->data.train, c->model.seq_len, tr->model.vocab_size, (uint64_t)c->model.seed, shuffle);
    if (option_given(c->data.val)) {
        loader_open(&tr->val_data, c->data.val, c->model.seq_len, tr->model.vocab_size, 0, false);
        tr->has_val = true;
    }

    rng_seed(&tr->sample_rng, (uint64_t)c->model.seed ^ 0x5ca1ab1eULL);
    double step_tokens = (double)c->batch.global_batch * c->model.seq_len; /* of the final batch */
    double warmup = c->optim.warmup_tokens > 0 ? (double)c->optim.warmup_tokens : c->optim.warmup * step_tokens;
    tr->lr = (LrSchedule){c->optim.lr, c->optim.min_lr, warmup, (double)tr->total_tokens};

    if (option_given(c->output.ckpt_dir)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s", c->output.ckpt_dir);
    else if (option_given(c->output.out)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s/ckpt", c->output.out);
    if (option_given(c->output.resume)) train_resume(tr);
    tr->cx.step = tr->step, tr->cx.seqs_consumed = tr->seqs_consumed;
    if (option_given(c->output.resume) && !tr->batch.adaptive && tr->step > tr->total_steps)
        bs_die_about(c->optim.train_tokens > 0 ? "resume train_tokens" : "resume steps", "the checkpoint %s is at step "
                     "%ld, past the %ld step(s) of this run: nothing to train", c->output.resume, tr->step,
                     tr->total_steps);
    tr->metrics = (Metrics){NULL, c->model.seq_len, comm_size(world), engine_grid(tr->engine)->pp, tr->dp_size,
                            c->estimators.noise_scale, c->output.baseline_tokens_per_s, c->estimators.noise_scale_every > 0,
                            strncmp(c->batch.schedule, "goodput", 7) == 0, c->estimators.noise_probe_every > 0};
    if (tr->rank == 0) {
        if (tr->ckpt_dir[0]) bs_mkdir_p(tr->ckpt_dir);
        if (option_given(c->output.out)) bs_mkdir_p(c->output.out);
        if (option_given(c->output.metrics)) tr->metrics.file = metrics_open(c->output.metrics, tr->step);
    }
    warn_base_only(c, tr->rank);
    progress_init(&tr->progress, stdout, c->output.log_every);
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

