/* trainer.c: the training job (see trainer.h): the step loop over the
 * parallel engine (parallel/engine.h: forward and backward of the step's
 * micro-batches, the gradient norm, the update), with the policies around
 * it: batch size and learning rate per step, the guard, evaluation,
 * sampling, checkpoints and the trace. The policies live in their own files
 * (guard.h, balance.h, step_stats.h, fault.h; what rank 0 prints and writes
 * is banner.h's, report.h's and metrics.h's), the set-up in train_setup.c. */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "core/timer.h"
#include "core/trace.h"
#include "model/adapter_config.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "model/safetensors_file.h"
#include "optim/grad_norm.h"
#include "parallel/engine.h"
#include "train/balance.h"
#include "train/banner.h"
#include "train/compression.h"
#include "train/diloco.h"
#include "train/estimators.h"
#include "train/fault.h"
#include "train/guard.h"
#include "train/metrics.h"
#include "train/preempt.h"
#include "train/report.h"
#include "train/sample.h"
#include "train/step_stats.h"
#include "train/train_ckpt.h"
#include "train/train_setup.h"
#include "train/moe_train.h"
#include "train/trainer_state.h"

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
    const int B = src->tr->cfg.batch.micro_batch, T = src->tr->cfg.model.seq_len;
    uint64_t start = src->replica_start >= 0
                         ? src->first + (uint64_t)src->replica_start + (uint64_t)micro * (uint64_t)B
                         : src->first + ((uint64_t)micro * (uint64_t)src->stride + (uint64_t)src->tr->dp_index) *
                                            (uint64_t)B;
    for (int b = 0; b < B; b++)
        loader_sequence(src->loader, start + (uint64_t)b, inputs + (size_t)b * T, targets + (size_t)b * T);
}

/* Adaptive batch: grow toward the measured noise scale B_simple, at
 * accumulation granularity, never shrinking, within [MIN, MAX]. */
static void adapt_batch(Trainer *tr, double noise_scale) {
    if (!tr->adaptive || tr->est.goodput_on || isnan(noise_scale)) return; /* goodput: estimators.h decides */
    long granule = (long)tr->cfg.batch.micro_batch * tr->dp_size;
    long target = (long)(noise_scale / granule) * granule;
    if (target > tr->adaptive_max) target = tr->adaptive_max;
    if (target > tr->adaptive_batch) tr->adaptive_batch = target;
}

/* The global batch of the step starting now, rounded to whole micro-steps. */
static long current_batch(Trainer *tr) {
    char why[256] = "";
    long realised, want = tr->adaptive ? tr->adaptive_batch
                                       : batch_at(&tr->batch_schedule, tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len);
    if (!batch_round(want, (long)tr->cfg.batch.micro_batch * tr->dp_size, tr->cfg.batch.strict, &realised, why, sizeof why))
        bs_die("%s", why);
    if (why[0] && !tr->batch_warned && tr->rank == 0) bs_warn("%s", why);
    if (why[0]) tr->batch_warned = true;
    return realised;
}

/* d(step loss)/d(token loss): the mean over the step's counted tokens. */
static float loss_scale(Trainer *tr, const StepResult *r) {
    return diloco_loss_scale(tr) / (float)(r->counted > 0 ? r->counted : 1);
}

/* Forward and backward over this replica's micro-batches through the engine. */
static EngineStepStats forward_backward(Trainer *tr, const StepResult *r, bool onebit) {
    const float dloss = loss_scale(tr, r);
    /* 1-bit Adam reduces its momentum, DiLoCo its workers' weights, not the gradient */
    engine_set_local_gradients(tr->engine, onebit || tr->diloco.on);
    if (fault_nan_now(&tr->fault, tr->rank, tr->step + 1))
        engine_inject_nan(tr->engine, tr->fault.block); /* a layer's gradient: block 0 is the embeddings */
    MicroSource src = {tr, &tr->train_data, tr->seqs_consumed, tr->dp_size, balance_first_sequence(&tr->balance)};
    return engine_forward_backward(tr->engine, r->accum_steps, dloss, load_micro, &src);
}

/* The curvature measurement's gradient passes (estimators.h): the step's
 * batch again at the weights as they are now, reduced. */
typedef struct {
    Trainer *tr;
    const StepResult *r;
} GradientPass;

static const float *gradient_pass(void *ctx) {
    const GradientPass *p = ctx;
    Trainer *tr = p->tr;
    MicroSource src = {tr, &tr->train_data, tr->seqs_consumed, tr->dp_size, -1};
    engine_forward_backward(tr->engine, p->r->accum_steps, loss_scale(tr, p->r), load_micro, &src);
    return dp_update_grads(engine_chunk(tr->engine, 0)->dp);
}

/* This rank's record of the step, exchanged with every rank's (collective). */
static StepStats exchange_stats(Trainer *tr, const EngineStepStats *es, double compute, double seconds) {
    StepRecord mine = {.loss_sum = es->loss_sum, .micro_sq = es->micro_sum_squares, .compute = compute,
                       .micro_sq_precond = tr->est.precond_on ? dp_micro_precond_sum_squares(engine_chunk(tr->engine, 0)->dp) : 0,
                       .seconds = seconds, .pipe_busy = es->busy, .pipe_idle = es->idle,
                       .stop_signal = preempt_signal()};
    guard_nonfinite_keys(tr->rank, comm_size(tr->world), tr->model.num_layers,
                         engine_first_nonfinite_layer(tr->engine), engine_first_nonfinite_block(tr->engine),
                         mine.nonfinite);
    return step_stats_exchange(&tr->stats, &mine);
}

/* The guard's decision: a non-finite value on any rank (named), a non-finite
 * loss or gradient, a loss spike. */
static bool skip_update(Trainer *tr, StepResult *r, const StepStats *st, double grad_sq) {
    return guard_nonfinite_reason(st->nonfinite, comm_size(tr->world), tr->model.num_layers, r->skip_reason,
                                  sizeof r->skip_reason) ||
           guard_skip(&tr->guard, r->loss, grad_sq, r->skip_reason, sizeof r->skip_reason);
}

static void apply_update(Trainer *tr, const StepResult *r, bool onebit) {
    if (onebit) {
        onebit_update(tr, r->lr);
        engine_after_update(tr->engine);
    } else {
        if (diloco_idle(tr, tr->step + 1)) return; /* --local-steps-jitter: this worker's window is done */
        diloco_prox(tr);
        double norm = tr->diloco.on ? tr->diloco.worker_grad_norm : r->grad_norm; /* a worker clips its own */
        engine_update(tr->engine, r->lr, clip_coefficient(norm, tr->cfg.optim.grad_clip));
    }
}

/* The gradient noise scale B_simple from this step (NaN when off or skipped);
 * an adaptive batch follows it. */
static double measure_noise(Trainer *tr, const StepResult *r, double micro_sq, double grad_sq) {
    const int B = tr->cfg.batch.micro_batch;
    if (!tr->cfg.estimators.noise_scale || r->skipped) return NAN;
    /* micro-step gradients are of the loss scaled by 1/(batch T): rescale to mean-loss units */
    double micro_batches = (double)r->batch / B;
    double small_sq = micro_sq * micro_batches; /* mean over micro-batches of (M |g_m|)^2 */
    noise_scale_update(&tr->noise, small_sq, B, grad_sq, (double)r->batch);
    double b_simple = noise_scale_simple(&tr->noise);
    adapt_batch(tr, b_simple);
    return b_simple;
}

/* fp8: the step's FP8 underflow and overflow shares per tensor kind (a collective). */
static void record_fp8(Trainer *tr, StepResult *r) {
    Fp8Stats st[FP8_KINDS];
    engine_fp8_stats(tr->engine, st);
    r->fp8 = true;
    for (int k = 0; k < FP8_KINDS; k++) {
        r->fp8_underflow[k] = st[k].nonzero ? (double)st[k].underflow / (double)st[k].nonzero : 0;
        r->fp8_overflow[k] = st[k].values ? (double)st[k].overflow / (double)st[k].values : 0;
    }
}

/* The step's statistics into its result; `after`: this rank's seconds since the exchange. */
static void record_stats(Trainer *tr, StepResult *r, const StepStats *st, const EngineStepStats *es, double after) {
    r->pipe_busy = es->busy;
    r->pipe_idle = es->idle;
    r->max_live = es->max_live;
    r->bubble = st->bubble;
    r->stop_signal = st->stop_signal;
    r->bubble_theory = es->bubble_theory;
    r->bubble_simulated = es->bubble_simulated;
    r->median_compute = st->median_compute;
    r->straggler = st->straggler;
    r->straggler_compute = st->straggler >= 0 ? st->compute[st->straggler] : 0;
    r->slowest = st->slowest + after;
    r->fastest = st->fastest + after;
    r->peak_rss = st->peak_rss;
    CommStats cs = engine_comm_stats(tr->engine);
    r->comm_bytes = cs.bytes_sent;
    r->comm_bytes_fp32 = cs.uncompressed_bytes;
    r->comm_exposed = cs.wait_seconds;
    r->comm_busy = cs.busy_seconds;
    CommStats context = engine_context_stats(tr->engine);
    r->cp_bytes = context.bytes_sent;
    r->cp_exposed = context.wait_seconds;
    CommStats experts = engine_expert_stats(tr->engine);
    r->moe_a2a_bytes = experts.bytes_sent;
    r->moe_a2a_exposed = experts.wait_seconds;
    if (tr->cfg.precision.mode == PRECISION_FP8) record_fp8(tr, r);
}

static StepResult train_step(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    StepResult r = {0};
    r.batch = current_batch(tr);
    r.accum_steps = balance_micro_batches(&tr->balance, r.batch);
    r.counted = loader_counted(&tr->train_data, tr->seqs_consumed, (uint64_t)r.batch); /* every rank: the whole batch */
    double t_start = bs_now();
    const bool onebit = onebit_compressing(tr);
    estimators_before_step(tr, &r);
    EngineStepStats es = forward_backward(tr, &r, onebit);
    double compute = es.busy + fault_slow_down(&tr->fault, tr->rank, es.busy);
    double t_opt = bs_now();
    double grad_sq = onebit ? onebit_grad_sum_squares(tr)
                     : tr->diloco.on ? diloco_grad_sum_squares(tr) : engine_grad_sum_squares(tr->engine);
    StepStats st = exchange_stats(tr, &es, compute, bs_now() - t_start);
    double t_exchanged = bs_now();
    r.loss = st.loss_sum / (double)(r.counted > 0 ? r.counted : 1);
    r.grad_norm = sqrt(grad_sq);
    /* warm-up and decay on the token axis, so a changing batch does not distort them */
    double tokens_after = (double)(tr->seqs_consumed + (uint64_t)r.batch) * c->model.seq_len;
    r.lr = lr_at(&tr->lr, tokens_after) * lr_scaling_factor(c->batch.lr_scaling, r.batch, tr->base_batch);
    r.skipped = skip_update(tr, &r, &st, grad_sq);
    if (!r.skipped) {
        GradientPass pass = {tr, &r};
        estimators_after_backward(tr, &r, gradient_pass, &pass); /* before the update: the step's weights */
        apply_update(tr, &r, onebit);
        guard_accept(&tr->guard, r.loss);
    } else {
        guard_reject(&tr->guard);
        compression_reset_feedback(tr); /* what a bad step left unsent is not worth sending */
    }
    moe_train_end_step(tr, !r.skipped);
    diloco_after_step(tr, tr->step + 1); /* a window's end: the outer step (a skipped inner step included) */
    trace_add(&tr->trace, "optimizer", "compute", t_opt, bs_now());
    record_stats(tr, &r, &st, &es, bs_now() - t_exchanged);
    balance_update(&tr->balance, st.compute);
    r.noise_scale = measure_noise(tr, &r, st.micro_sq, grad_sq);
    r.seconds = bs_now() - t_start;
    estimators_after_step(tr, &r, st.micro_sq_precond);
    tr->seqs_consumed += (uint64_t)r.batch;
    tr->step++;
    return r;
}

/* ---- evaluation and sampling ---- */

/* Validation batch i goes to replica i mod dp; every replica runs the same
 * number of forwards (collectives under ZeRO-3 and pipelines need it) and
 * counts only real batches. */
static double evaluate(Trainer *tr) {
    if (!tr->has_val || tr->cfg.eval.val_batches <= 0) return NAN;
    const int B = tr->cfg.batch.micro_batch;
    const int rounds = (tr->cfg.eval.val_batches + tr->dp_size - 1) / tr->dp_size;
    const int mine = tr->cfg.eval.val_batches / tr->dp_size + (tr->dp_index < tr->cfg.eval.val_batches % tr->dp_size ? 1 : 0);
    MicroSource src = {tr, &tr->val_data, 0, tr->dp_size, -1};
    double loss = engine_evaluate(tr->engine, rounds, mine, load_micro, &src);
    const Grid *g = engine_grid(tr->engine);
    bool counts = g->tp_index == 0 && g->pp_index == g->pp - 1; /* the loss ranks; their cp ranks share sequences */
    double counted = 0;
    for (int i = 0; counts && g->cp_index == 0 && i < mine; i++)
        counted += (double)loader_counted(&tr->val_data, ((uint64_t)i * tr->dp_size + tr->dp_index) * B, B);
    double stats[2] = {counts ? loss : 0, counted};
    comm_allreduce_double(tr->world, stats, 2);
    return stats[0] / stats[1];
}

/* The whole model on rank 0, for sampling and export (a collective: every
 * rank calls it). Returns a model the caller frees with gpt_free (params
 * NULL on other ranks). */
static GPT full_model(Trainer *tr) {
    GPT m;
    gpt_create_with(&m, &tr->model, tr->rank == 0 ? GPT_ALLOC_PARAMS : 0);
    if (tr->model.lora_rank > 0) m.lora_scale = (float)(tr->cfg.lora.alpha / tr->cfg.lora.rank);
    engine_gather_model(tr->engine, m.params);
    if (m.moe_bias) moe_gather_bias(tr, m.moe_bias); /* MoE: the selection bias of every stage, for sampling */
    return m;
}

static void print_sample(Trainer *tr) {
    if (tr->cfg.eval.sample_tokens <= 0 || tr->cfg.output.quiet || !tr->tok) return;
    GPT m = full_model(tr);
    if (tr->rank == 0) {
        GPTActs acts;
        gpt_acts_create(&acts, &m.cfg, 1, m.cfg.max_seq_len, false);
        int n = tr->cfg.eval.sample_tokens;
        int32_t *tokens = bs_malloc((size_t)(n + 1) * sizeof(int32_t));
        tokens[0] = tokenizer_eot(tr->tok);
        SampleParams sp = {(float)tr->cfg.eval.temperature, tr->cfg.eval.top_k};
        int len = sample_generate(&m, &acts, tokens, 1, n, &sp, &tr->sample_rng);
        size_t bytes;
        unsigned char *text = tokenizer_decode(tr->tok, tokens + 1, (size_t)len - 1, &bytes);
        progress_line(&tr->progress, "--- sample at step %ld (temperature %.2f, top-k %d) ---\n%s\n---", tr->step,
                      tr->cfg.eval.temperature, tr->cfg.eval.top_k, (char *)text);
        free(text);
        free(tokens);
        gpt_acts_free(&acts);
    }
    gpt_free(&m);
}

/* LoRA: the adapters as a peft directory. */
static void export_adapters(const Trainer *tr, const GPT *m) {
    const char *dir = tr->cfg.lora.save_adapters;
    char path[4200];
    bs_mkdir_p(dir);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    safetensors_write_adapters(path, &m->cfg, m->params);
    AdapterConfig a = {m->cfg.lora_rank, tr->cfg.lora.alpha, tr->cfg.lora.dropout, m->cfg.lora_targets, "",
                       engine_base_hash(tr->engine)};
    if (option_given(tr->cfg.model.init_from) && !realpath(tr->cfg.model.init_from, a.base_model)) /* the base's path, absolute */
        snprintf(a.base_model, sizeof a.base_model, "%s", tr->cfg.model.init_from);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    adapter_config_write(path, &a);
}

static void export_models(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    if (!option_given(c->output.save_model) && !option_given(c->output.out) && !option_given(c->lora.save_adapters)) return;
    GPT m = full_model(tr);
    if (tr->rank == 0 && option_given(c->lora.save_adapters)) export_adapters(tr, &m);
    if (tr->rank == 0 && c->lora.merge) gpt_merge_adapters(&m); /* model files hold the base tensors only */
    if (tr->rank == 0) {
        if (option_given(c->output.save_model)) model_file_write(c->output.save_model, &m);
        if (option_given(c->output.out)) { /* an MoE model in safetensors: llm.c's file cannot hold its experts */
            char path[4200];
            snprintf(path, sizeof path, gpt_is_moe(&m.cfg) ? "%s/model.safetensors" : "%s/model.bin", c->output.out);
            model_file_write(path, &m);
        }
    }
    gpt_free(&m);
}

/* ---- metrics and trace ---- */

/* The step's metrics line (rank 0, with --metrics). */
static void write_step_metrics(Trainer *tr, const StepResult *r, double val_loss) {
    if (!tr->metrics.file) return;
    DPMemory mem = engine_memory(tr->engine);
    size_t opt_bytes = 0;
    for (int c = 0; c < engine_num_chunks(tr->engine); c++)
        opt_bytes += engine_chunk(tr->engine, c)->update_count * sizeof(float) *
                     (size_t)optimizer_state_arrays(tr->cfg.optim.kind);
    MetricsStep s = {tr->step, tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len, tr->guard.skips, val_loss,
                     tr->last_ckpt_stall, tr->balance.split, mem.param_bytes + mem.grad_bytes + opt_bytes,
                     mem.buffer_bytes, engine_activation_bytes(tr->engine), &tr->watch,
                     tr->moe.layers, tr->moe.metrics, tr->moe.aux_loss, tr->moe.z_loss};
    metrics_write(&tr->metrics, r, &s);
}

static void write_trace(Trainer *tr, double origin) {
    if (!option_given(tr->cfg.output.trace)) return;
    char *mine = trace_events_json(&tr->trace, tr->rank, origin);
    char *all = comm_gather_text(engine_grid(tr->engine)->dp_group, mine, ",\n", 0);
    free(mine);
    if (tr->rank == 0) {
        FILE *f = bs_fopen(tr->cfg.output.trace, "wb");
        fprintf(f, "{\"traceEvents\":[\n%s\n],\"displayTimeUnit\":\"ms\"}\n", all);
        bs_fclose_synced(f, tr->cfg.output.trace);
        free(all);
    }
}

/* ---- the job ---- */

static bool run_done(const Trainer *tr) {
    return tr->step >= tr->total_steps || tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len >= tr->total_tokens;
}

/* The steps the progress line shows: planned, or (adaptive) estimated from the tokens still to go. */
static long shown_total(const Trainer *tr) {
    if (!tr->adaptive) return tr->total_steps;
    return (long)ceil(tr->step * (double)tr->total_tokens / ((double)tr->seqs_consumed * tr->cfg.model.seq_len));
}

/* A periodic checkpoint is due after the step just done (the last step's is the end's). */
static bool checkpoint_due(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    return tr->ckpt_dir[0] && c->output.ckpt_every > 0 && tr->step % c->output.ckpt_every == 0 && !run_done(tr);
}

/* Between two steps: evaluation, metrics, checkpoint, the guard's patience,
 * the progress line, sampling. Returns false once the target validation loss
 * is reached. */
static bool after_step(Trainer *tr, Report *rp, const StepResult *r, long start_step) {
    const TrainConfig *c = &tr->cfg;
    report_events(rp, r, tr->step);
    const bool last = run_done(tr);
    const bool evaluated = tr->has_val && c->eval.every > 0 && (tr->step % c->eval.every == 0 || last);
    const double val_loss = evaluated ? evaluate(tr) : NAN;
    watch_measure(&tr->watch, tr->engine, c, &tr->stats); /* per-layer norms: a collective when on */
    if (tr->rank == 0) watch_write_tensorboard(&tr->watch, r, tr->step, val_loss, c->model.seq_len);
    /* the step's metrics line before its checkpoint: a run killed between the two resumes from the checkpoint
     * before, never past a line that was not written; so a checkpoint's stall is reported on the next step's line */
    write_step_metrics(tr, r, val_loss);
    tr->last_ckpt_stall = 0;
    train_save_poll(tr);
    if (checkpoint_due(tr)) {
        tr->last_ckpt_stall = train_save(tr);
        report_checkpoint(rp, tr->step, tr->last_ckpt_stall, c->output.async_ckpt);
    }
    guard_stop_if_stuck(&tr->guard, tr->step, r->skip_reason);
    bool timed = tr->step > start_step + 1 || tr->total_steps - start_step == 1;
    report_step(rp, r, &(ReportStep){tr->step, shown_total(tr), timed, evaluated, val_loss});
    if (c->eval.target_val_loss > 0 && !isnan(val_loss) && val_loss <= c->eval.target_val_loss) {
        report_target_reached(rp, c->eval.target_val_loss, tr->step, (double)tr->seqs_consumed * c->model.seq_len);
        return false;
    }
    if (c->eval.sample_every > 0 && tr->step % c->eval.sample_every == 0 && !last) print_sample(tr);
    return true;
}

/* The one line of a preempted job (rank 0, on stderr, even with --quiet). */
static void report_preempted(const Trainer *tr, int sig) {
    if (tr->rank != 0) return;
    char name[32], where[4200];
    if (tr->ckpt_dir[0]) ckpt_step_dir(where, sizeof where, tr->ckpt_dir, tr->step);
    fprintf(stderr, "preempted: %s; stopped after step %ld of %ld, %s%s; exit %d (resume: --resume latest, or "
                    "under batchscale run)\n",
            preempt_signal_name(sig, name, sizeof name), tr->step, tr->total_steps,
            tr->ckpt_dir[0] ? "checkpoint " : "no checkpoint (no --ckpt-dir or --out)", tr->ckpt_dir[0] ? where : "",
            PREEMPT_EXIT_CODE);
    fflush(stderr);
}

int train_run(const TrainConfig *cfg, Comm *world) {
    Trainer *tr = bs_calloc(1, sizeof *tr);
    preempt_catch(); /* a signal during set-up stops the job after its first step */
    train_setup(tr, cfg, world);
    bs_die_status(BS_EXIT_ERROR); /* set up: a failure from here on may pass, `batchscale run` restarts */
    const TrainConfig *c = &tr->cfg;
    banner_print(tr);
    watch_init(&tr->watch, c, tr->rank, comm_size(world), tr->model.num_layers,
               gpt_flops_per_token(&tr->model, c->model.seq_len));
    double origin = bs_now();
    Report rp;
    report_init(&rp, &tr->progress, tr->rank == 0 && !c->output.quiet, c, tr->dp_size,
                gpt_flops_per_token(&tr->model, c->model.seq_len));
    if (tr->step == 0 && tr->has_val && c->eval.every > 0) report_first_val(&rp, evaluate(tr));
    const long start_step = tr->step;
    int stopped_by = 0;  /* the stop signal every rank agreed on */
    long saved_at = -1;  /* the step of the last periodic checkpoint */
    while (!run_done(tr) && !stopped_by) {
        fault_maybe_stop(&tr->fault, tr->rank, tr->step + 1);
        StepResult r = train_step(tr);
        if (checkpoint_due(tr)) saved_at = tr->step; /* after_step writes it */
        if (!after_step(tr, &rp, &r, start_step)) break;
        stopped_by = r.stop_signal;
    }
    report_end_steps(&rp);
    if (tr->ckpt_dir[0] && (tr->step > start_step || tr->resharded) && saved_at != tr->step)
        train_save(tr); /* resharding is a plain run */
    train_save_finish(tr);
    if (stopped_by) report_preempted(tr, stopped_by);
    else export_models(tr);
    write_trace(tr, origin);
    if (!stopped_by) report_summary(&rp);
    if (c->eval.sample_tokens > 0 && !stopped_by) print_sample(tr);
    watch_free(&tr->watch);
    train_teardown(tr);
    preempt_release();
    free(tr);
    return stopped_by ? PREEMPT_EXIT_CODE : 0;
}
