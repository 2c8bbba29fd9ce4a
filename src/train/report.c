/* report.c: what rank 0 tells the user while training runs (see report.h). */
#include "train/report.h"

#include <math.h>
#include <stdio.h>

#include "core/reason.h"

void report_init(Report *rp, Progress *progress, bool talk, const TrainConfig *cfg, int replicas,
                 double flops_per_token) {
    *rp = (Report){.progress = progress, .talk = talk, .replicas = replicas, .seq_len = cfg->model.seq_len,
                   .noise_scale = cfg->estimators.noise_scale, .balance = cfg->guards.balance, .flops_per_token = flops_per_token,
                   .baseline_tokens_per_s = cfg->output.baseline_tokens_per_s, .last_straggler = -1, .first_val = NAN,
                   .last_val = NAN};
}

void report_first_val(Report *rp, double val_loss) {
    rp->first_val = val_loss;
    if (rp->talk) progress_line(rp->progress, "step 0: val loss %.4f", val_loss);
}

void report_events(Report *rp, const StepResult *r, long step) {
    if (r->skipped && rp->talk) progress_line(rp->progress, "step %ld skipped (no update): %s", step, r->skip_reason);
    if (r->straggler >= 0 && rp->talk && r->straggler != rp->last_straggler) {
        char hint[128] = " (rebalancing micro-batches)";
        if (!rp->balance) bs_reason(hint, sizeof hint, "balance", " (balancing micro-batches shifts work away from it)");
        progress_line(rp->progress, "rank %d is a straggler: %.1f ms of compute against a median of %.1f ms%s",
                      r->straggler, r->straggler_compute * 1e3, r->median_compute * 1e3, hint);
    }
    rp->last_straggler = r->straggler;
}

void report_checkpoint(const Report *rp, long step, double stall_s, bool async) {
    if (rp->talk)
        progress_line(rp->progress, "checkpoint at step %ld: training stalled %.1f ms%s", step, stall_s * 1e3,
                      async ? " (copy; written in the background)" : "");
}

/* After the progress line's fixed fields: communication, compression, noise scale, validation. */
static void format_extra(const Report *rp, const StepResult *r, double val_loss, char *extra, size_t size) {
    int n = 0;
    extra[0] = '\0';
    if (rp->replicas > 1) n += snprintf(extra, size, "comm %.0f%% exposed", 100 * r->comm_exposed / r->seconds);
    if (rp->replicas > 1 && r->comm_bytes < r->comm_bytes_fp32)
        n += snprintf(extra + n, size - (size_t)n, ", %.1f MB sent = %.1f%% of fp32", (double)r->comm_bytes / 1e6,
                      100.0 * (double)r->comm_bytes / (double)r->comm_bytes_fp32);
    if (rp->noise_scale && !isnan(r->noise_scale))
        n += snprintf(extra + n, size - (size_t)n, "%sB_noise %.0f seq, batch %ld", n ? " | " : "", r->noise_scale,
                      r->batch);
    if (!isnan(val_loss)) snprintf(extra + n, size - (size_t)n, "%sval %.4f", n ? " | " : "", val_loss);
}

void report_step(Report *rp, const StepResult *r, const ReportStep *s) {
    if (s->timed) {
        rp->tokens_timed += (double)r->batch * rp->seq_len;
        rp->time_sum += r->slowest;
        rp->exposed_sum += r->comm_exposed;
        rp->timed_steps++;
    }
    if (s->evaluated) rp->last_val = s->val_loss;
    if (!rp->talk) return;
    double avg = rp->timed_steps ? rp->time_sum / rp->timed_steps : r->seconds;
    char extra[160];
    format_extra(rp, r, s->val_loss, extra, sizeof extra);
    progress_step(rp->progress, s->step, s->total, r->loss, r->lr, step_tokens_per_s(r, rp->seq_len), r->slowest * 1e3,
                  avg * (double)(s->total - s->step), extra);
}

void report_target_reached(const Report *rp, double target, long step, double tokens) {
    if (rp->talk)
        progress_line(rp->progress, "target validation loss %.4f reached at step %ld (%.4g tokens)", target, step,
                      tokens);
}

void report_end_steps(const Report *rp) {
    if (rp->talk) progress_finish(rp->progress);
}

void report_summary(const Report *rp) {
    if (!rp->talk) return;
    if (rp->timed_steps > 0) {
        double tps = rp->tokens_timed / rp->time_sum;
        printf("done: %.0f tokens/s, %.1f GFLOP/s (%.1f ms/step)", tps, tps * rp->flops_per_token / 1e9,
               1e3 * rp->time_sum / rp->timed_steps);
        if (rp->replicas > 1) printf(", communication exposed %.1f%% of step time", 100 * rp->exposed_sum / rp->time_sum);
        if (rp->baseline_tokens_per_s > 0)
            printf(", scaling efficiency %.1f%% vs %.0f tokens/s on one process",
                   100 * tps / (rp->replicas * rp->baseline_tokens_per_s), rp->baseline_tokens_per_s);
        printf("\n");
    }
    if (!isnan(rp->first_val) && !isnan(rp->last_val)) printf("val loss: %.4f -> %.4f\n", rp->first_val, rp->last_val);
}
