/* feature_preempt.c: stopping cleanly when asked (train/preempt.h) as a
 * feature (train/feature.h): the signals are caught from before the engine
 * is built, a received one goes into the step's all-gather (every rank stops
 * after the same step), and a stopped job prints one line (rank 0, on
 * stderr, even with --quiet) and exits with PREEMPT_EXIT_CODE. Always on. */
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "train/feature.h"
#include "train/preempt.h"
#include "core/reason.h"

static void configure(const TrainContext *cx, EngineConfig *ec) {
    (void)cx, (void)ec;
    preempt_catch(); /* a signal during set-up stops the job after its first step */
}

static void destroy(void *state, const TrainContext *cx) {
    (void)state, (void)cx;
    preempt_release();
}

static void record(void *state, const TrainContext *cx, StepRecord *mine) {
    (void)state, (void)cx;
    mine->stop_signal = preempt_signal();
}

static int stopped(void *state, const TrainContext *cx, int sig, const char *ckpt_dir) {
    (void)state;
    if (cx->rank != 0) return PREEMPT_EXIT_CODE;
    char name[32], where[4200], line[4800];
    if (ckpt_dir[0]) ckpt_step_dir(where, sizeof where, ckpt_dir, cx->step);
    bs_reason(line, sizeof line, ckpt_dir[0] ? "resume" : "resume ckpt_dir",
              "preempted: %s; stopped after step %ld of %ld, %s%s; exit %d (resume from the latest checkpoint, or "
              "under batchscale run)", preempt_signal_name(sig, name, sizeof name), cx->step, cx->total_steps,
              ckpt_dir[0] ? "checkpoint " : "no checkpoint (no checkpoint directory)", ckpt_dir[0] ? where : "",
              PREEMPT_EXIT_CODE);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    return PREEMPT_EXIT_CODE;
}

const Feature preempt_feature = {
    .name = "preempt", .configure = configure, .free = destroy, .record = record, .stopped = stopped,
};
