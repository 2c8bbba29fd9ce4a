/* feature_fp8.c: FP8 training's scaling as a feature (train/feature.h): the
 * step's underflow and overflow shares per tensor kind into its result, and
 * the delayed-scaling state in checkpoints (train/fp8_ckpt.h). On with
 * --precision fp8; a run in another precision ignores a checkpoint's fp8
 * files. */
#include "train/feature.h"
#include "train/fp8_ckpt.h"

static bool wanted(const TrainConfig *cfg) { return cfg->precision.mode == PRECISION_FP8; }

/* The step's FP8 underflow and overflow shares per tensor kind (a collective). */
static void after_step(void *state, const TrainContext *cx, TrainStep *s) {
    (void)state;
    StepResult *r = s->r;
    Fp8Stats st[FP8_KINDS];
    engine_fp8_stats(cx->engine, st);
    r->fp8 = true;
    for (int k = 0; k < FP8_KINDS; k++) {
        r->fp8_underflow[k] = st[k].nonzero ? (double)st[k].underflow / (double)st[k].nonzero : 0;
        r->fp8_overflow[k] = st[k].values ? (double)st[k].overflow / (double)st[k].values : 0;
    }
}

static void save_files(void *state, const TrainContext *cx, const char *dir) {
    (void)state;
    fp8_ckpt_save(cx, dir);
}

static void resume_files(void *state, const TrainContext *cx, const char *dir) {
    (void)state;
    fp8_ckpt_resume(cx, dir);
}

const Feature fp8_feature = {
    .name = "fp8", .wanted = wanted, .after_step = after_step, .save_files = save_files, .resume_files = resume_files,
};
