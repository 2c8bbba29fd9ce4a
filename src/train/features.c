/* features.c: the feature list and the calls over the active features (see
 * features.h). A new feature is one file defining its Feature table and one
 * line in the list below. The order is the order of the hooks: --balance
 * before the estimators (it sets the step's micro-batches), MoE before
 * DiLoCo (a skewed router start before DiLoCo keeps the initial weights),
 * compression before DiLoCo (their checkpoint arrays and engine options in
 * that order), injected faults after the estimators (a NaN goes into the
 * step's gradient, not the noise probe's pass). */
#include "train/features.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "optim/grad_norm.h"

extern const Feature preempt_feature, guard_feature, balance_feature, fp8_feature, moe_feature, compression_feature,
    diloco_feature, estimators_feature, fault_feature, watch_feature, grad_norm_ranks_feature,
    device_memory_feature;

static const Feature *const FEATURES[] = {
    &preempt_feature, &guard_feature, &balance_feature, &fp8_feature, &moe_feature, &compression_feature, &diloco_feature,
    &estimators_feature, &fault_feature, &watch_feature, &grad_norm_ranks_feature,
    &device_memory_feature,
};

enum { FEATURE_COUNT = sizeof FEATURES / sizeof FEATURES[0] };
_Static_assert(FEATURE_COUNT <= FEATURES_MAX, "the feature list fits FeatureList");

/* ---- the engine's own update path: the reduced gradient, clipped by --grad-clip ---- */

static bool reduced_gradients(void *state, const TrainContext *cx) {
    (void)state, (void)cx;
    return false;
}

static float unit_loss_scale(void *state, const TrainContext *cx) {
    (void)state, (void)cx;
    return 1.0f;
}

static double engine_sum_squares(void *state, const TrainContext *cx) {
    (void)state;
    return engine_grad_sum_squares(cx->engine);
}

static void engine_step(void *state, const TrainContext *cx, const StepResult *r) {
    (void)state;
    engine_update(cx->engine, r->lr, clip_coefficient(r->grad_norm, cx->cfg->optim.grad_clip));
}

static const UpdatePath ENGINE_PATH = {reduced_gradients, unit_loss_scale, engine_sum_squares, engine_step};

/* ---- set-up ---- */

static bool wanted(const Feature *f, const TrainConfig *cfg) { return !f->wanted || f->wanted(cfg); }

void features_configure(const TrainContext *cx, EngineConfig *ec) {
    for (int i = 0; i < FEATURE_COUNT; i++)
        if (wanted(FEATURES[i], cx->cfg) && FEATURES[i]->configure) FEATURES[i]->configure(cx, ec);
}

void features_create(FeatureList *list, const TrainContext *cx) {
    memset(list, 0, sizeof *list);
    list->update = &ENGINE_PATH;
    for (int i = 0; i < FEATURE_COUNT; i++) {
        const Feature *f = FEATURES[i];
        if (!wanted(f, cx->cfg)) continue;
        ActiveFeature *a = &list->items[list->count++];
        a->ops = f;
        a->state = f->create ? f->create(cx) : NULL;
        const UpdatePath *path = f->update_path ? f->update_path(a->state) : NULL;
        if (path && list->update != &ENGINE_PATH)
            bs_die("internal: two features (the second %s) each take over the update", f->name);
        if (path) list->update = path, list->update_state = a->state;
    }
}

void features_free(FeatureList *list, const TrainContext *cx) {
    for (int i = list->count - 1; i >= 0; i--)
        if (list->items[i].ops->free) list->items[i].ops->free(list->items[i].state, cx);
    list->count = 0;
}

/* ---- the step ---- */

bool features_veto(FeatureList *list, const TrainContext *cx, TrainStep *s) {
    for (int i = 0; i < list->count; i++)
        if (list->items[i].ops->veto && list->items[i].ops->veto(list->items[i].state, cx, s)) return true;
    return false;
}

bool features_local_gradients(const FeatureList *list, const TrainContext *cx) {
    return list->update->local_gradients(list->update_state, cx);
}

float features_loss_scale(const FeatureList *list, const TrainContext *cx) {
    return list->update->loss_scale(list->update_state, cx);
}

double features_grad_sum_squares(const FeatureList *list, const TrainContext *cx) {
    return list->update->grad_sum_squares(list->update_state, cx);
}

void features_update(const FeatureList *list, const TrainContext *cx, const StepResult *r) {
    list->update->update(list->update_state, cx, r);
}

int features_stopped(FeatureList *list, const TrainContext *cx, int signal, const char *ckpt_dir) {
    int status = 0;
    for (int i = 0; i < list->count; i++)
        if (list->items[i].ops->stopped)
            status = list->items[i].ops->stopped(list->items[i].state, cx, signal, ckpt_dir);
    return status;
}

/* ---- checkpoints ---- */

int features_arrays(FeatureList *list, const TrainContext *cx, int workers, CkptExtraArray *arrays, char *label,
                    size_t size) {
    int n = 0;
    label[0] = '\0';
    for (int i = 0; i < list->count; i++) {
        const Feature *f = list->items[i].ops;
        char mine[CKPT_EXTRA_LABEL] = "";
        if (!f->arrays) continue;
        n += f->arrays(list->items[i].state, cx, workers, arrays + n, mine, sizeof mine);
        if (n > FEATURE_ARRAYS_MAX) bs_die("internal: more than %d checkpoint arrays", FEATURE_ARRAYS_MAX);
        size_t used = strlen(label);
        if (mine[0]) snprintf(label + used, size - used, "%s%s", used ? "; " : "", mine);
    }
    return n;
}

int features_survivor_source(FeatureList *list, const TrainContext *cx, const CkptManifest *m) {
    int source = -1;
    for (int i = 0; i < list->count && source < 0; i++)
        if (list->items[i].ops->survivor_source)
            source = list->items[i].ops->survivor_source(list->items[i].state, cx, m);
    return source;
}

const char *features_fresh_arrays_note(FeatureList *list) {
    const char *note = "error-feedback residuals start from zero";
    for (int i = 0; i < list->count; i++)
        if (list->items[i].ops->fresh_arrays_note) note = list->items[i].ops->fresh_arrays_note(list->items[i].state);
    return note;
}
