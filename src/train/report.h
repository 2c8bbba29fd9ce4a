/* report.h: what rank 0 tells the user while training runs: the progress
 * line of each step (loss, lr, tokens/s, ms, ETA, exposed communication,
 * compression, noise scale, validation loss), the events between steps (a
 * skipped step, a new straggler, a checkpoint, the target loss reached) and
 * the end-of-run summary (tokens/s, GFLOP/s, exposed communication, scaling
 * efficiency, the validation loss before and after). It keeps the run's
 * timing sums for the ETA and the summary. Silent where talk is false (other
 * ranks, --quiet). The job's opening lines are train/banner.h's. */
#ifndef BS_TRAIN_REPORT_H
#define BS_TRAIN_REPORT_H

#include <stdbool.h>

#include "train/progress.h"
#include "train/step_result.h"
#include "train/trainer.h"

typedef struct {
    Progress *progress;
    bool talk;                       /* rank 0 and not --quiet */
    int replicas, seq_len;           /* data-parallel replicas */
    bool noise_scale, balance;
    double flops_per_token, baseline_tokens_per_s;
    int last_straggler;              /* the rank named last, -1: none */
    double time_sum, exposed_sum;    /* over the timed steps: slowest rank's seconds, exposed communication */
    double tokens_timed;
    long timed_steps;
    double first_val, last_val;      /* validation losses before training and at the last evaluation */
} Report;

/* Where a step stands in the run. */
typedef struct {
    long step, total; /* total: planned steps (an adaptive batch: estimated) */
    bool timed;       /* counts toward the averages (every step but the first of a run, unless it is the only one) */
    bool evaluated;   /* the validation loss was measured after this step */
    double val_loss;  /* its value (NaN if not evaluated, or if it diverged) */
} ReportStep;

void report_init(Report *rp, Progress *progress, bool talk, const TrainConfig *cfg, int replicas,
                 double flops_per_token);
/* The validation loss before the first step. */
void report_first_val(Report *rp, double val_loss);
/* A skipped step; a straggler other than the last one named. */
void report_events(Report *rp, const StepResult *r, long step);
void report_checkpoint(const Report *rp, long step, double stall_s, bool async);
/* The step's progress line (after its evaluation and checkpoint). */
void report_step(Report *rp, const StepResult *r, const ReportStep *s);
void report_target_reached(const Report *rp, double target, long step, double tokens);
/* Ends the progress line (before the run's last checkpoint and exports). */
void report_end_steps(const Report *rp);
void report_summary(const Report *rp);

#endif
