/* trainer.c: the training job (see trainer.h): llm.c's step loop over the
 * parallel engine (parallel/engine.h: forward and backward of the step's
 * micro-batches, the gradient norm, the update) with the policies around
 * it: the batch size and learning rate per step, the step's one exchange of
 * statistics, evaluation, metrics, checkpoints and the trace. Every other
 * technique is a feature (train/feature.h) whose hooks run at the step's
 * fixed points; the update path is the one chosen at set-up. The set-up is
 * train_setup.c's, the outputs train_output.c's, what rank 0 prints
 * banner.h's, report.h's and metrics.h's. */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "train/banner.h"
#include "train/micro_source.h"
#include "train/report.h"
#include "train/train_ckpt.h"
#include "train/train_output.h"
#include "train/train_setup.h"
#include "train/trainer_state.h"

/* ---- one optimizer step ---- */

/* The counters the features see, current. */
static void sync_context(Trainer *tr) {
    tr->cx.step = tr->step;
    tr->cx.seqs_consumed = tr->seqs_consumed;
}

/* The global batch of the step starting now, rounded to whole micro-steps. */
static long current_batch(Trainer *tr) {
    char why[256] = "";
    long realised, want = tr->batch.adaptive ? tr->batch.adaptive_batch
                                       : batch_at(&tr->batch_schedule, tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len);
    if (!batch_round(want, (long)tr->cfg.batch.micro_batch * tr->dp_size, tr->cfg.batch.strict, &realised, why, sizeof why))
        bs_die("%s", why);
    if (why[0] && !tr->batch_warned && tr->rank == 0) bs_warn("%s", why);
    if (why[0]) tr->batch_warned = true;
    return realised;
}

/* d(step loss)/d(token loss): the mean over the step's counted tokens. */
static float loss_scale(Trainer *tr, const StepResult *r) {
    return features_loss_scale(&tr->features, &tr->cx) / (float)(r->counted > 0 ? r->counted : 1);
}

static MicroSource train_source(Trainer *tr, int64_t replica_start) {
    return (MicroSource){&tr->train_data, tr->cfg.batch.micro_batch, tr->cfg.model.seq_len, tr->seqs_consumed, tr->dp_size,
                         tr->dp_index, replica_start};
}

/* Forward and backward over this replica's micro-batches through the engine. */
static EngineStepStats forward_backward(Trainer *tr, const TrainStep *s) {
    const StepResult *r = s->r;
    engine_set_local_gradients(tr->engine, features_local_gradients(&tr->features, &tr->cx));
    MicroSource src = train_source(tr, s->replica_start);
    return engine_forward_backward(tr->engine, r->accum_steps, loss_scale(tr, r), micro_source_load, &src);
}

/* A feature's gradient pass: the step's batch
 * again at the weights as they are now, reduced. */
typedef struct {
    Trainer *tr;
    const StepResult *r;
} GradientPass;

static const float *gradient_pass(void *ctx) {
    const GradientPass *p = ctx;
    Trainer *tr = p->tr;
    MicroSource src = train_source(tr, -1);
    engine_forward_backward(tr->engine, p->r->accum_steps, loss_scale(tr, p->r), micro_source_load, &src);
    return engine_reduced_gradients(tr->engine, 0);
}

/* This rank's record of the step, exchanged with every rank's (collective). */
static StepStats exchange_stats(Trainer *tr, const EngineStepStats *es, double compute, double seconds) {
    StepRecord mine = {.loss_sum = es->loss_sum, .micro_sq = es->micro_sum_squares, .compute = compute,
                       .seconds = seconds, .pipe_busy = es->busy, .pipe_idle = es->idle};
    FEATURES_CALL(&tr->features, record, &tr->cx, &mine);
    return step_stats_exchange(&tr->stats, &mine);
}

static StepResult train_step(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    FeatureList *f = &tr->features;
    StepResult r = {0};
    TrainStep s = {.r = &r, .replica_start = -1, .gradient_pass = gradient_pass};
    sync_context(tr);
    FEATURES_CALL(f, before_step, &tr->cx, &s);
    r.batch = current_batch(tr);
    r.accum_steps = (int)(r.batch / c->batch.micro_batch) / tr->dp_size; /* each replica an equal share */
    r.counted = loader_counted(&tr->train_data, tr->seqs_consumed, (uint64_t)r.batch); /* every rank: the whole batch */
    double t_start = bs_now();
    FEATURES_CALL(f, before_forward, &tr->cx, &s);
    EngineStepStats es = forward_backward(tr, &s);
    s.engine = &es;
    s.compute = es.busy;
    FEATURES_CALL(f, after_backward, &tr->cx, &s);
    double t_opt = bs_now();
    s.grad_sq = features_grad_sum_squares(f, &tr->cx);
    StepStats st = exchange_stats(tr, &es, s.compute, bs_now() - t_start);
    s.stats = &st;
    double t_exchanged = bs_now();
    r.loss = st.loss_sum / (double)(r.counted > 0 ? r.counted : 1);
    r.grad_norm = sqrt(s.grad_sq);
    /* warm-up and decay on the token axis, so a changing batch does not distort them */
    double tokens_after = (double)(tr->seqs_consumed + (uint64_t)r.batch) * c->model.seq_len;
    r.lr = lr_at(&tr->lr, tokens_after) * lr_scaling_factor(c->batch.lr_scaling, r.batch, tr->batch.base_batch);
    r.skipped = features_veto(f, &tr->cx, &s);
    if (!r.skipped) {
        GradientPass pass = {tr, &r};
        s.pass_ctx = &pass;
        FEATURES_CALL(f, before_update, &tr->cx, &s); /* the step's weights */
        features_update(f, &tr->cx, &r);
    }
    FEATURES_CALL(f, after_update, &tr->cx, &s);
    trace_add(&tr->trace, "optimizer", "compute", t_opt, bs_now());
    step_result_record(&r, &st, &es, tr->engine, bs_now() - t_exchanged);
    r.seconds = bs_now() - t_start;
    FEATURES_CALL(f, after_step, &tr->cx, &s);
    tr->seqs_consumed += (uint64_t)r.batch;
    tr->step++;
    sync_context(tr);
    return r;
}

/* ---- metrics ---- */

static void add_feature_metrics(void *ctx, json_t *record) {
    Trainer *tr = ctx;
    FEATURES_CALL(&tr->features, metrics, &tr->cx, record);
}

/* The step's metrics line (rank 0, with --metrics). */
static void write_step_metrics(Trainer *tr, const StepResult *r, double val_loss) {
    if (!tr->metrics.file) return;
    DPMemory mem = engine_memory(tr->engine);
    size_t opt_bytes = engine_optimizer_state_bytes(tr->engine, optimizer_state_arrays(tr->cfg.optim.kind));
    MetricsStep s = {tr->step, tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len, val_loss, tr->last_ckpt_stall,
                     mem.param_bytes + mem.grad_bytes + opt_bytes, mem.buffer_bytes,
                     engine_activation_bytes(tr->engine), add_feature_metrics, tr};
    metrics_write(&tr->metrics, r, &s);
}

/* ---- the job ---- */

static bool run_done(const Trainer *tr) {
    return tr->step >= tr->total_steps || tr->seqs_consumed * (uint64_t)tr->cfg.model.seq_len >= tr->total_tokens;
}

/* The steps the progress line shows: planned, or (adaptive) estimated from the tokens still to go. */
static long shown_total(const Trainer *tr) {
    if (!tr->batch.adaptive) return tr->total_steps;
    return (long)ceil(tr->step * (double)tr->total_tokens / ((double)tr->seqs_consumed * tr->cfg.model.seq_len));
}

/* A periodic checkpoint is due after the step just done (the last step's is the end's). */
static bool checkpoint_due(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    return tr->ckpt_dir[0] && c->output.ckpt_every > 0 && tr->step % c->output.ckpt_every == 0 && !run_done(tr);
}

/* Between two steps: evaluation, metrics, checkpoint, the features' end of
 * the step, the progress line, sampling. Returns false once the target validation loss
 * is reached. */
static bool after_step(Trainer *tr, Report *rp, const StepResult *r, long start_step) {
    const TrainConfig *c = &tr->cfg;
    report_events(rp, r, tr->step);
    const bool last = run_done(tr);
    const bool evaluated = tr->has_val && c->eval.every > 0 && (tr->step % c->eval.every == 0 || last);
    const double val_loss = evaluated ? train_evaluate(tr) : NAN;
    FEATURES_CALL(&tr->features, observe, &tr->cx, r, tr->stats.records, val_loss); /* e.g. per-layer norms */
    /* the step's metrics line before its checkpoint: a run killed between the two resumes from the checkpoint
     * before, never past a line that was not written; so a checkpoint's stall is reported on the next step's line */
    write_step_metrics(tr, r, val_loss);
    tr->last_ckpt_stall = 0;
    train_save_poll(tr);
    if (checkpoint_due(tr)) {
        tr->last_ckpt_stall = train_save(tr);
        report_checkpoint(rp, tr->step, tr->last_ckpt_stall, c->output.async_ckpt);
    }
    FEATURES_CALL(&tr->features, end_step, &tr->cx, r);
    bool timed = tr->step > start_step + 1 || tr->total_steps - start_step == 1;
    report_step(rp, r, &(ReportStep){tr->step, shown_total(tr), timed, evaluated, val_loss});
    if (c->eval.target_val_loss > 0 && !isnan(val_loss) && val_loss <= c->eval.target_val_loss) {
        report_target_reached(rp, c->eval.target_val_loss, tr->step, (double)tr->seqs_consumed * c->model.seq_len);
        return false;
    }
    if (c->eval.sample_every > 0 && tr->step % c->eval.sample_every == 0 && !last) train_print_sample(tr);
    return true;
}

int train_run(const TrainConfig *cfg, Comm *world) {
    Trainer *tr = bs_calloc(1, sizeof *tr);
    train_setup(tr, cfg, world);
    bs_die_status(BS_EXIT_ERROR); /* set up: a failure from here on may pass, `batchscale run` restarts */
    const TrainConfig *c = &tr->cfg;
    banner_print(tr);
    double origin = bs_now();
    Report rp;
    report_init(&rp, &tr->progress, tr->rank == 0 && !c->output.quiet, c, tr->dp_size,
                gpt_flops_per_token(&tr->model, c->model.seq_len));
    if (tr->step == 0 && tr->has_val && c->eval.every > 0) report_first_val(&rp, train_evaluate(tr));
    const long start_step = tr->step;
    int stopped_by = 0;  /* the stop signal every rank agreed on */
    long saved_at = -1;  /* the step of the last periodic checkpoint */
    while (!run_done(tr) && !stopped_by) {
        StepResult r = train_step(tr);
        if (checkpoint_due(tr)) saved_at = tr->step; /* after_step writes it */
        if (!after_step(tr, &rp, &r, start_step)) break;
        stopped_by = r.stop_signal;
    }
    report_end_steps(&rp);
    if (tr->ckpt_dir[0] && (tr->step > start_step || tr->resharded) && saved_at != tr->step)
        train_save(tr); /* resharding is a plain run */
    train_save_finish(tr);
    int status = stopped_by ? features_stopped(&tr->features, &tr->cx, stopped_by, tr->ckpt_dir) : 0;
    if (!stopped_by) train_export_models(tr);
    train_write_trace(tr, origin);
    if (!stopped_by) report_summary(&rp);
    if (c->eval.sample_tokens > 0 && !stopped_by) train_print_sample(tr);
    train_teardown(tr);
    free(tr);
    return status;
}
