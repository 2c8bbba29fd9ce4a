/* feature.h: a training feature as a module. A technique that is not the
 * step's math (DiLoCo, the noise-scale estimators, 1-bit Adam and compressed
 * communication, MoE balancing, FP8 scaling, the guard, injected faults,
 * preemption, ...) is a table of optional hooks the trainer calls at the
 * step's fixed points, in the order of the feature list (train/features.c).
 * Each feature owns its state (what create returns) and sees a narrow
 * context: the configuration, the engine, the world and the counters, never
 * the trainer.
 *
 * The step, as the hooks see it:
 *   before_step      the top of the step, before its batch is chosen
 *   before_forward   the batch is known (r->batch; r->accum_steps and
 *                    s->replica_start, which a feature may change)
 *   after_backward   forward and backward done, the gradient norm known
 *   record           this rank's entries of the step's one all-gather
 *   veto             skip the update (writes r->skip_reason)
 *   before_update    the step's weights and reduced gradient, not skipped
 *   (update)         the update path: one feature's, chosen at set-up, or
 *                    the engine's (clipped by --grad-clip)
 *   after_update     updated or skipped (r->skipped)
 *   after_step       the step's statistics are in r
 *   observe          evaluated; what a watcher measures (per-layer norms)
 *   metrics          keys added to the step's metrics line (rank 0)
 *   end_step         the step's line and checkpoint are written
 * and around it: configure (the engine's options, before it exists), create,
 * checkpoint hooks (files beside the rank files, per-rank arrays, manifest
 * words, before and after a save, after a resume), complete_model (a gathered
 * model for sampling and export), stopped (the job was asked to stop), free. */
#ifndef BS_TRAIN_FEATURE_H
#define BS_TRAIN_FEATURE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_extra.h"
#include "comm/comm.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "optim/curvature.h"
#include "parallel/engine.h"
#include "train/step_result.h"
#include "train/step_stats.h"
#include "train/train_config.h"

/* A text option was given (not NULL or empty). */
static inline bool option_given(const char *value) { return value && *value; }

/* The trainer's batch size per step, which a feature may steer (an adaptive or goodput schedule). */
typedef struct {
    bool adaptive;                     /* --batch-schedule adaptive:MIN:MAX or goodput:MIN:MAX */
    long adaptive_batch, adaptive_max; /* its current batch (saved in checkpoints) and bound */
    long base_batch;                   /* --lr-scaling's reference batch */
} BatchPolicy;

/* What a feature sees of the job. The trainer keeps it current: step and
 * seqs_consumed are the counters before the step in flight. */
typedef struct {
    const TrainConfig *cfg;
    Comm *world;
    Engine *engine;
    const GPTConfig *model;      /* the whole model */
    int rank, world_size;        /* world rank */
    int dp_size, dp_index;       /* data-parallel replicas and this one's index */
    long step;                   /* optimizer steps done */
    long total_steps;            /* planned (LONG_MAX: until the token budget is spent) */
    uint64_t seqs_consumed;      /* data position */
    BatchPolicy *batch;          /* the batch policy a feature may steer */
    DataLoader *train_data;      /* the training data (a feature's extra passes over it) */
} TrainContext;

/* The step in flight. */
typedef struct {
    StepResult *r;
    const EngineStepStats *engine; /* after backward */
    const StepStats *stats;        /* after the exchange */
    double compute;                /* this rank's compute seconds (features may add to it in after_backward) */
    double grad_sq;                /* the squared gradient norm the guard and the metrics see */
    int64_t replica_start;         /* this replica's first sequence in the batch (-1: the replicas interleave) */
    GradientAt gradient_pass;      /* the step's batch again at the weights as they are now, reduced */
    void *pass_ctx;
} TrainStep;

/* How the gradient becomes an update. */
typedef struct {
    bool (*local_gradients)(void *state, const TrainContext *cx);  /* this step's gradients stay unreduced */
    float (*loss_scale)(void *state, const TrainContext *cx);      /* factor on d(loss)/d(token loss) */
    double (*grad_sum_squares)(void *state, const TrainContext *cx); /* collective */
    void (*update)(void *state, const TrainContext *cx, const StepResult *r); /* collective */
} UpdatePath;

typedef struct {
    const char *name;
    bool (*wanted)(const TrainConfig *cfg); /* NULL: always on */
    void (*configure)(const TrainContext *cx, EngineConfig *ec); /* cx without an engine yet */
    void *(*create)(const TrainContext *cx);
    void (*free)(void *state, const TrainContext *cx);
    const UpdatePath *(*update_path)(void *state); /* NULL or returning NULL: not this feature's */

    void (*before_step)(void *state, const TrainContext *cx, TrainStep *s);
    void (*before_forward)(void *state, const TrainContext *cx, TrainStep *s);
    void (*after_backward)(void *state, const TrainContext *cx, TrainStep *s);
    void (*record)(void *state, const TrainContext *cx, StepRecord *mine);
    bool (*veto)(void *state, const TrainContext *cx, TrainStep *s);
    void (*before_update)(void *state, const TrainContext *cx, TrainStep *s);
    void (*after_update)(void *state, const TrainContext *cx, TrainStep *s);
    void (*after_step)(void *state, const TrainContext *cx, TrainStep *s);
    /* the step over and evaluated (val_loss NaN: not), before its metrics line; records: every rank's
     * entries of the step's all-gather, in rank order. A collective where a feature measures. */
    void (*observe)(void *state, const TrainContext *cx, const StepResult *r, const StepRecord *records,
                    double val_loss);
    void (*metrics)(void *state, const TrainContext *cx, json_t *record);
    void (*end_step)(void *state, const TrainContext *cx, const StepResult *r);
    int (*stopped)(void *state, const TrainContext *cx, int signal, const char *ckpt_dir); /* exit status */

    void (*complete_model)(void *state, const TrainContext *cx, GPT *model); /* collective */
    void (*save_files)(void *state, const TrainContext *cx, const char *dir);
    void (*resume_files)(void *state, const TrainContext *cx, const char *dir);
    void (*before_save)(void *state, const TrainContext *cx);
    void (*after_save)(void *state, const TrainContext *cx);
    /* this rank's arrays and the label they are valid for with `workers` data-parallel ranks ("" for none) */
    int (*arrays)(void *state, const TrainContext *cx, int workers, CkptExtraArray *arrays, char *label, size_t size);
    void (*reset_arrays)(void *state, const TrainContext *cx); /* the arrays could not be restored */
    const char *(*fresh_arrays_note)(void *state); /* what starting them afresh means (NULL: the default) */
    int (*survivor_source)(void *state, const TrainContext *cx, const CkptManifest *m); /* -1: none */
    void (*after_resume)(void *state, const TrainContext *cx, bool arrays_restored);
    void (*pack)(void *state, const TrainContext *cx, CkptManifest *m); /* manifest fields of its own */
    void (*unpack)(void *state, const TrainContext *cx, const CkptManifest *m);
} Feature;

#endif
