/* features.h: the job's active features (train/feature.h) in the order of
 * the feature list, the update path chosen from them once at set-up, and
 * the calls that run one hook over all of them. Only features.c names the
 * features. */
#ifndef BS_TRAIN_FEATURES_H
#define BS_TRAIN_FEATURES_H

#include "train/feature.h"

#define FEATURES_MAX 16
#define FEATURE_ARRAYS_MAX 10 /* per-rank checkpoint arrays of every feature together */

typedef struct {
    const Feature *ops;
    void *state;
} ActiveFeature;

typedef struct {
    ActiveFeature items[FEATURES_MAX];
    int count;
    const UpdatePath *update; /* one feature's, or the engine's */
    void *update_state;
} FeatureList;

/* Each active feature's hook `hook` with (state, args...), in list order. */
#define FEATURES_CALL(list, hook, ...)                                                                  \
    for (int feature_i_ = 0; feature_i_ < (list)->count; feature_i_++)                                \
        if ((list)->items[feature_i_].ops->hook)                                                       \
    (list)->items[feature_i_].ops->hook((list)->items[feature_i_].state, __VA_ARGS__)

/* Before the engine exists: the engine options the features need. */
void features_configure(const TrainContext *cx, EngineConfig *ec);
/* After the engine and the batch plan: every wanted feature's state, the update path. */
void features_create(FeatureList *list, const TrainContext *cx);
void features_free(FeatureList *list, const TrainContext *cx);

/* Whether one feature vetoes the step's update (the first one's reason is in s->r). */
bool features_veto(FeatureList *list, const TrainContext *cx, TrainStep *s);
/* The update path's calls. */
bool features_local_gradients(const FeatureList *list, const TrainContext *cx);
float features_loss_scale(const FeatureList *list, const TrainContext *cx);
double features_grad_sum_squares(const FeatureList *list, const TrainContext *cx);
void features_update(const FeatureList *list, const TrainContext *cx, const StepResult *r);
/* The exit status of a job asked to stop by `signal` (0: no feature stops jobs). */
int features_stopped(FeatureList *list, const TrainContext *cx, int signal, const char *ckpt_dir);

/* Checkpoints: every feature's per-rank arrays, their labels joined by "; ". */
int features_arrays(FeatureList *list, const TrainContext *cx, int workers, CkptExtraArray *arrays, char *label,
                    size_t size);
/* The checkpoint rank whose arrays this rank takes (elastic shrink), or -1. */
int features_survivor_source(FeatureList *list, const TrainContext *cx, const CkptManifest *m);
/* What starting the arrays afresh means, for the warning. */
const char *features_fresh_arrays_note(FeatureList *list);

#endif
