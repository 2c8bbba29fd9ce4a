/* trainer.c: the training job (see trainer.h): set-up, the step loop with
 * gradient accumulation, evaluation, sampling, metrics and checkpoints. */
#include "train/trainer.h"

#include <jansson.h>
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
#include "data/bytetok.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "model/llmc_file.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "optim/lr_schedule.h"
#include "train/progress.h"
#include "train/sample.h"

void train_config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof *c);
    c->layers = 4;
    c->heads = 4;
    c->channels = 128;
    c->seq_len = 128;
    c->vocab_size = BYTETOK_VOCAB;
    c->micro_batch = 8;
    c->global_batch = 0;
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
    c->sample_every = 0;
    c->sample_tokens = 200;
    c->top_k = 40;
    c->temperature = 0.8;
    c->out = "";
    c->metrics = "";
    c->save_model = "";
    c->ckpt_dir = "";
    c->resume = "";
    c->ckpt_every = 0;
    c->keep_last = 3;
    c->threads = 0;
    c->log_every = 10;
}

typedef struct {
    TrainConfig cfg;
    GPT model;
    GPTActs acts;
    DataLoader train_data, val_data;
    bool has_val;
    float *m, *v; /* AdamW moments over the parameters this rank updates */
    ParamSegment *segments;
    int num_segments;
    int32_t *inputs, *targets;
    int accum_steps;
    long step;               /* optimizer steps done */
    uint64_t seqs_consumed;  /* data position */
    long optimizer_step;
    Rng sample_rng;
    LrSchedule lr;
    FILE *metrics;
    Progress progress;
    char ckpt_dir[4096];
} Trainer;

static bool is_set(const char *s) { return s && *s; }

/* Loads one micro-batch: sequences [first, first + micro_batch) of the data order. */
static void load_micro_batch(Trainer *tr, uint64_t first) {
    int T = tr->cfg.seq_len;
    for (int b = 0; b < tr->cfg.micro_batch; b++)
        loader_sequence(&tr->train_data, first + (uint64_t)b, tr->inputs + (size_t)b * T, tr->targets + (size_t)b * T);
}

static double evaluate(Trainer *tr) {
    if (!tr->has_val || tr->cfg.val_batches <= 0) return NAN;
    int B = tr->cfg.micro_batch, T = tr->cfg.seq_len;
    double sum = 0;
    long tokens = 0;
    for (int i = 0; i < tr->cfg.val_batches; i++) {
        for (int b = 0; b < B; b++)
            loader_sequence(&tr->val_data, (uint64_t)i * B + (uint64_t)b, tr->inputs + (size_t)b * T,
                            tr->targets + (size_t)b * T);
        sum += gpt_forward(&tr->model, &tr->acts, tr->inputs, tr->targets, B, T, 0.0f);
        tokens += (long)B * T;
    }
    return sum / (double)tokens;
}

static void print_sample(Trainer *tr) {
    if (tr->cfg.sample_tokens <= 0) return;
    GPTActs acts;
    gpt_acts_create(&acts, &tr->model.cfg, 1, tr->model.cfg.max_seq_len, false);
    int n = tr->cfg.sample_tokens;
    int32_t *tokens = bs_malloc((size_t)(n + 1) * sizeof(int32_t));
    tokens[0] = BYTETOK_EOT;
    SampleParams sp = {(float)tr->cfg.temperature, tr->cfg.top_k};
    int len = sample_generate(&tr->model, &acts, tokens, 1, n, &sp, &tr->sample_rng);
    unsigned char *text = bs_malloc((size_t)len + 1);
    size_t bytes = bytetok_decode(tokens + 1, (size_t)len - 1, text);
    text[bytes] = '\0';
    progress_line(&tr->progress, "--- sample at step %ld (temperature %.2f, top-k %d) ---\n%s\n---", tr->step,
                  tr->cfg.temperature, tr->cfg.top_k, (char *)text);
    free(text);
    free(tokens);
    gpt_acts_free(&acts);
}

static void save_checkpoint(Trainer *tr) {
    char tmp[4096];
    ckpt_tmp_dir(tmp, sizeof tmp, tr->ckpt_dir, tr->step);
    bs_remove_tree(tmp);
    bs_mkdir_p(tmp);
    CkptManifest *m = bs_calloc(1, sizeof *m);
    const float *state[CKPT_STATE_ARRAYS] = {tr->m, tr->v};
    ckpt_write_rank_file(tmp, 0, 0, tr->model.num_params, tr->model.params, state, &m->files[0]);
    m->num_files = 1;
    m->step = tr->step;
    m->seqs_consumed = tr->seqs_consumed;
    m->tokens_consumed = tr->seqs_consumed * (uint64_t)tr->cfg.seq_len;
    m->model = tr->model.cfg;
    m->sample_rng = tr->sample_rng;
    m->data_seed = (uint64_t)tr->cfg.seed;
    m->data_shuffle = tr->train_data.shuffle;
    m->world = m->dp = m->tp = m->pp = 1;
    m->zero = 0;
    snprintf(m->optimizer, sizeof m->optimizer, "adamw");
    m->optimizer_step = tr->optimizer_step;
    ckpt_commit(tr->ckpt_dir, tmp, m, tr->cfg.keep_last);
    free(m);
    char dir[4096];
    ckpt_step_dir(dir, sizeof dir, tr->ckpt_dir, tr->step);
    if (!tr->cfg.quiet) progress_line(&tr->progress, "checkpoint written: %s", dir);
}

static void resume_from(Trainer *tr, const char *dir) {
    CkptManifest *m = bs_malloc(sizeof *m);
    ckpt_read_manifest(dir, m);
    char why[600];
    if (!ckpt_verify(dir, m, why, sizeof why)) bs_die("cannot resume: %s", why);
    const GPTConfig *a = &m->model, *b = &tr->model.cfg;
    if (a->num_layers != b->num_layers || a->num_heads != b->num_heads || a->channels != b->channels ||
        a->max_seq_len != b->max_seq_len || a->vocab_size != b->vocab_size)
        bs_die("checkpoint %s holds a model of shape L=%d H=%d C=%d T=%d V=%d but the flags ask for L=%d H=%d C=%d "
               "T=%d V=%d; pass the checkpoint's shape", dir, a->num_layers, a->num_heads, a->channels,
               a->max_seq_len, a->vocab_size, b->num_layers, b->num_heads, b->channels, b->max_seq_len, b->vocab_size);
    if (strcmp(m->optimizer, "adamw") != 0) bs_die("checkpoint %s was written by optimizer '%s', not adamw", dir, m->optimizer);
    float *state[CKPT_STATE_ARRAYS] = {tr->m, tr->v};
    ckpt_read_range(dir, m, 0, tr->model.num_params, tr->model.params, state);
    tr->step = m->step;
    tr->seqs_consumed = m->seqs_consumed;
    tr->optimizer_step = m->optimizer_step;
    tr->sample_rng = m->sample_rng;
    if (m->data_seed != (uint64_t)tr->cfg.seed || m->data_shuffle != tr->train_data.shuffle)
        bs_warn("resuming %s with another --seed or --data-order than it was written with: the data order changes",
                dir);
    free(m);
}

static void setup(Trainer *tr, const TrainConfig *cfg) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = *cfg;
    TrainConfig *c = &tr->cfg;
    if (c->threads > 0) omp_set_num_threads(c->threads);
    if (c->global_batch == 0) c->global_batch = c->micro_batch;
    if (c->global_batch % c->micro_batch != 0)
        bs_die("--global-batch %d is not a multiple of --micro-batch %d", c->global_batch, c->micro_batch);
    tr->accum_steps = c->global_batch / c->micro_batch;
    if (strcmp(c->data_order, "shuffled") != 0 && strcmp(c->data_order, "sequential") != 0)
        bs_die("--data-order must be 'shuffled' or 'sequential' (got '%s')", c->data_order);
    if (c->min_lr > c->lr) bs_die("--min-lr %g is larger than --lr %g", c->min_lr, c->lr);

    GPTConfig mc = {.max_seq_len = c->seq_len, .vocab_size = c->vocab_size, .num_layers = c->layers,
                    .num_heads = c->heads, .channels = c->channels};
    if (is_set(c->init_from)) {
        llmc_model_read_config(c->init_from, &mc);
        if (c->seq_len > mc.max_seq_len)
            bs_die("--seq-len %d is longer than the model's maximum sequence length %d (from %s)", c->seq_len,
                   mc.max_seq_len, c->init_from);
        c->vocab_size = mc.vocab_size;
    }
    char why[256];
    if (!gpt_config_check(&mc, why, sizeof why)) bs_die("%s", why);
    gpt_create(&tr->model, &mc);
    if (is_set(c->init_from)) llmc_model_read_params(c->init_from, &tr->model);
    else gpt_init_weights(&tr->model, (uint64_t)c->seed);

    bool shuffle = strcmp(c->data_order, "shuffled") == 0;
    loader_open(&tr->train_data, c->data, c->seq_len, mc.vocab_size, (uint64_t)c->seed, shuffle);
    if (is_set(c->val_data)) {
        loader_open(&tr->val_data, c->val_data, c->seq_len, mc.vocab_size, 0, false);
        tr->has_val = true;
    }
    gpt_acts_create(&tr->acts, &mc, c->micro_batch, c->seq_len, true);
    tr->inputs = bs_malloc((size_t)c->micro_batch * c->seq_len * sizeof(int32_t));
    tr->targets = bs_malloc((size_t)c->micro_batch * c->seq_len * sizeof(int32_t));
    tr->m = bs_calloc(tr->model.num_params, sizeof(float));
    tr->v = bs_calloc(tr->model.num_params, sizeof(float));
    tr->segments = bs_malloc(sizeof(ParamSegment) * (size_t)gpt_max_segments(&mc));
    tr->num_segments = gpt_param_segments(&mc, tr->segments, gpt_max_segments(&mc));
    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5ca1ab1eULL);
    tr->lr = (LrSchedule){c->lr, c->min_lr, c->warmup, c->steps};

    if (is_set(c->ckpt_dir)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s", c->ckpt_dir);
    else if (is_set(c->out)) snprintf(tr->ckpt_dir, sizeof tr->ckpt_dir, "%s/ckpt", c->out);
    if (is_set(c->resume)) {
        char dir[4096];
        ckpt_resolve(c->resume, tr->ckpt_dir, dir, sizeof dir);
        resume_from(tr, dir);
        if (!c->quiet) printf("resumed from %s at step %ld\n", dir, tr->step);
    }
    if (tr->ckpt_dir[0]) bs_mkdir_p(tr->ckpt_dir);
    if (is_set(c->out)) bs_mkdir_p(c->out);
    if (is_set(c->metrics)) tr->metrics = bs_fopen(c->metrics, tr->step > 0 ? "ab" : "wb");
    progress_init(&tr->progress, c->log_every);
}

static void teardown(Trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    loader_close(&tr->train_data);
    if (tr->has_val) loader_close(&tr->val_data);
    gpt_acts_free(&tr->acts);
    gpt_free(&tr->model);
    free(tr->m);
    free(tr->v);
    free(tr->segments);
    free(tr->inputs);
    free(tr->targets);
}

typedef struct {
    double loss, grad_norm, lr;
} StepResult;

static StepResult train_step(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const int B = c->micro_batch, T = c->seq_len;
    const float dloss = 1.0f / ((float)c->global_batch * (float)T);
    StepResult r = {0};
    gpt_zero_grads(&tr->model);
    double loss_sum = 0;
    for (int micro = 0; micro < tr->accum_steps; micro++) {
        load_micro_batch(tr, tr->seqs_consumed + (uint64_t)micro * B);
        loss_sum += gpt_forward(&tr->model, &tr->acts, tr->inputs, tr->targets, B, T, dloss);
        gpt_backward(&tr->model, &tr->acts, tr->inputs, B, T, NULL);
    }
    r.loss = loss_sum / ((double)c->global_batch * T);
    r.grad_norm = sqrt(sum_of_squares(tr->model.grads, tr->model.num_params));
    float scale = clip_coefficient(r.grad_norm, c->grad_clip);
    r.lr = lr_at(&tr->lr, (double)(tr->step + 1));
    tr->optimizer_step++;
    for (int i = 0; i < tr->num_segments; i++) {
        const ParamSegment *s = &tr->segments[i];
        AdamWStep as = {(float)r.lr, (float)c->beta1, (float)c->beta2, (float)c->eps,
                        gpt_tensor_decays(s->kind) ? (float)c->weight_decay : 0.0f, scale, tr->optimizer_step};
        size_t count = s->count;
        if (s->kind == TK_WTE) count = (size_t)tr->model.cfg.vocab_size * tr->model.cfg.channels; /* skip padding */
        adamw_update(tr->model.params + s->offset, tr->model.grads + s->offset, tr->m + s->offset,
                     tr->v + s->offset, count, &as);
    }
    tr->seqs_consumed += (uint64_t)c->global_batch;
    tr->step++;
    return r;
}

static void write_metrics(Trainer *tr, const StepResult *r, double ms, double tokens_per_s, double val_loss) {
    if (!tr->metrics) return;
    json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:I, s:f, s:f}", "step", (json_int_t)tr->step, "loss", r->loss, "lr",
                          r->lr, "grad_norm", r->grad_norm, "tokens",
                          (json_int_t)(tr->seqs_consumed * (uint64_t)tr->cfg.seq_len), "ms", ms, "tokens_per_s",
                          tokens_per_s);
    if (!isnan(val_loss)) json_object_set_new(j, "val_loss", json_real(val_loss));
    char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(tr->metrics, "%s\n", line);
    fflush(tr->metrics);
    free(line);
    json_decref(j);
}

int train_run(const TrainConfig *cfg) {
    Trainer *tr = bs_calloc(1, sizeof *tr);
    setup(tr, cfg);
    const TrainConfig *c = &tr->cfg;
    const GPTConfig *mc = &tr->model.cfg;
    double flops_per_token = gpt_flops_per_token(mc, c->seq_len);
    if (!c->quiet) {
        printf("model: L=%d H=%d C=%d T=%d V=%d (padded %d), %.2fM parameters, %.1f MFLOP/token\n", mc->num_layers,
               mc->num_heads, mc->channels, mc->max_seq_len, mc->vocab_size, mc->padded_vocab_size,
               gpt_num_trained_params(mc) / 1e6, flops_per_token / 1e6);
        printf("batch: global %d sequences = micro %d x accumulation %d x dp 1 (%d tokens/step); %d threads\n",
               c->global_batch, c->micro_batch, tr->accum_steps, c->global_batch * c->seq_len, omp_get_max_threads());
        printf("data: %s (%zu tokens, %zu sequences, %s)\n", c->data, tr->train_data.num_tokens,
               tr->train_data.num_windows, c->data_order);
    }
    double first_val = NAN, last_val = NAN;
    if (tr->step == 0 && tr->has_val && c->eval_every > 0) {
        first_val = evaluate(tr);
        if (!c->quiet) progress_line(&tr->progress, "step 0: val loss %.4f", first_val);
    }
    double time_sum = 0;
    long timed_steps = 0;
    long start_step = tr->step;
    while (tr->step < c->steps) {
        double t0 = bs_now();
        StepResult r = train_step(tr);
        double dt = bs_now() - t0;
        if (!isfinite(r.loss)) bs_die("loss is %g at step %ld; lower --lr or check the data", r.loss, tr->step);
        if (tr->step > start_step + 1 || c->steps - start_step == 1) time_sum += dt, timed_steps++;
        double avg = timed_steps ? time_sum / timed_steps : dt;
        double tokens_per_s = (double)c->global_batch * c->seq_len / dt;
        double val_loss = NAN;
        bool last = tr->step == c->steps;
        if (tr->has_val && c->eval_every > 0 && (tr->step % c->eval_every == 0 || last)) {
            val_loss = evaluate(tr);
            last_val = val_loss;
        }
        write_metrics(tr, &r, dt * 1e3, tokens_per_s, val_loss);
        if (!c->quiet) {
            char extra[64] = "";
            if (!isnan(val_loss)) snprintf(extra, sizeof extra, "val %.4f", val_loss);
            progress_step(&tr->progress, tr->step, c->steps, r.loss, r.lr, tokens_per_s, dt * 1e3,
                          avg * (double)(c->steps - tr->step), extra);
        }
        if (c->sample_every > 0 && tr->step % c->sample_every == 0 && !last) print_sample(tr);
        if (tr->ckpt_dir[0] && c->ckpt_every > 0 && tr->step % c->ckpt_every == 0 && !last) save_checkpoint(tr);
    }
    if (!c->quiet) progress_finish(&tr->progress);
    if (tr->ckpt_dir[0] && tr->step > start_step) save_checkpoint(tr);
    if (is_set(c->save_model)) llmc_model_write(c->save_model, &tr->model);
    if (is_set(c->out)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/model.bin", c->out);
        llmc_model_write(path, &tr->model);
    }
    if (!c->quiet) {
        if (timed_steps > 0) {
            double tps = (double)c->global_batch * c->seq_len * timed_steps / time_sum;
            printf("done: %.0f tokens/s, %.1f GFLOP/s (%.1f ms/step)\n", tps, tps * flops_per_token / 1e9,
                   1e3 * time_sum / timed_steps);
        }
        if (!isnan(first_val) && !isnan(last_val)) printf("val loss: %.4f -> %.4f\n", first_val, last_val);
    }
    if (c->sample_tokens > 0 && !c->quiet) print_sample(tr);
    teardown(tr);
    free(tr);
    return 0;
}
