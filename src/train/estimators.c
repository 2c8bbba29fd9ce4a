/* estimators.c: the preconditioned and curvature noise scales and the
 * goodput policy in the step loop (see estimators.h). */
#include "train/estimators.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/rng.h"
#include "core/timer.h"
#include "optim/lr_scaling.h"
#include "train/noise_probe.h"

_Static_assert(ESTIMATOR_STATE_WORDS <= CKPT_ESTIMATOR_WORDS, "the checkpoint manifest holds the estimators' state");

/* The whole flat buffer is on this rank beside the whole optimizer state:
 * ZeRO 0, one model chunk, no tensor, pipeline or context parallelism. */
static bool flat_layout(const TrainContext *cx) {
    const Grid *g = engine_grid(cx->engine);
    return cx->cfg->parallel.zero == 0 && g->tp == 1 && g->pp == 1 && g->cp == 1 && engine_num_chunks(cx->engine) == 1;
}

/* Whether the curvature measurement can work here; why not in `why`. */
static bool curvature_possible(const TrainContext *cx, char *why, size_t n) {
    const TrainConfig *c = cx->cfg;
    if (!flat_layout(cx))
        return bs_reason(why, n, "noise_scale_every zero_stage tp pp cp",
                         "the curvature noise scale needs ZeRO stage 0 and no tensor, pipeline or context parallelism "
                         "(it keeps the whole gradient, weights and a probe on every rank)");
    if (c->precision.mode != PRECISION_FP32)
        return bs_reason(why, n, "noise_scale_every precision",
                         "the curvature noise scale needs fp32 precision (bf16 or fp8 rounding of the moved weights "
                         "would swamp the differences)");
    if (c->guards.balance)
        return bs_reason(why, n, "noise_scale_every balance",
                         "the curvature noise scale needs the plain micro-batch order, not the balanced one (the "
                         "probe's signs follow the interleaved micro-batch order)");
    if (cx->cfg->optim.kind == OPTIM_ONEBIT_ADAM || cx->cfg->diloco.local_steps > 0)
        return bs_reason(why, n, "noise_scale_every optimizer local_steps",
                         "the curvature noise scale needs full gradient reduction (not 1-bit Adam or DiLoCo)");
    return true;
}

static void setup_curvature(const TrainContext *cx, Estimators *e) {
    const TrainConfig *c = cx->cfg;
    char why[512];
    if (!curvature_possible(cx, why, sizeof why)) bs_die("%s", why);
    e->curvature_on = true;
    size_t n = engine_chunk(cx->engine, 0)->update_count;
    e->probe = bs_calloc(n, sizeof(float));
    e->saved_grad = bs_calloc(n, sizeof(float));
    e->saved_params = bs_calloc(n, sizeof(float));
    if (e->precond_on) e->precond_grad = bs_calloc(n, sizeof(float));
    long largest = cx->batch->adaptive_max > c->batch.global_batch ? cx->batch->adaptive_max : c->batch.global_batch;
    e->signs_capacity = (int)(largest / ((long)c->batch.micro_batch * cx->dp_size)) + 1;
    e->signs = bs_calloc((size_t)e->signs_capacity, sizeof(float));
    e->global_signs = bs_calloc((size_t)(largest / c->batch.micro_batch + 1), sizeof(float));
}

/* goodput:MIN:MAX: the table over multiples of the granule, B_0 = MIN, the planted time model. */
static void setup_goodput(const TrainContext *cx, Estimators *e) {
    const TrainConfig *c = cx->cfg;
    if (c->estimators.goodput_estimator == GOODPUT_PRECOND && !e->precond_on)
        bs_die_about("goodput_estimator optimizer zero_stage tp pp cp",
                     "goodput's precond noise scale needs the adamw optimizer, ZeRO stage 0 and no tensor, pipeline or "
                     "context parallelism (Adam's whole second moment beside the gradient): use the simple estimator");
    if (c->estimators.goodput_estimator == GOODPUT_CURVATURE && !e->curvature_on)
        bs_die_about("goodput_estimator noise_scale_every",
                     "goodput's curvature estimator needs the curvature noise scale measured every N steps");
    if (c->estimators.goodput_estimator == GOODPUT_CURVATURE_PRECOND && !e->precond_grad)
        bs_die_about("goodput_estimator noise_scale_every optimizer",
                     "goodput's curvature-precond estimator needs the curvature noise scale measured every N steps and "
                     "the adamw optimizer (the curvature noise scale of Adam's preconditioned update)");
    if (c->estimators.goodput_estimator == GOODPUT_PROBE && !e->probe_on)
        bs_die_about("goodput_estimator noise_probe_every",
                     "goodput's probe estimator needs the noise probe every N steps (the noise scale at the step's "
                     "weights)");
    if (c->estimators.goodput_estimator == GOODPUT_PROBE_PRECOND && !(e->probe_on && e->precond_on))
        bs_die_about("goodput_estimator noise_probe_every optimizer zero_stage tp pp cp",
                     "goodput's probe-precond estimator needs the noise probe every N steps, the adamw optimizer, ZeRO "
                     "stage 0 and no tensor, pipeline or context parallelism (the probe through Adam's whole second "
                     "moment)");
    const long granule = (long)c->batch.micro_batch * cx->dp_size;
    goodput_init(&e->goodput, cx->batch->adaptive_batch, cx->batch->adaptive_max, granule, 0);
    e->goodput.base = e->goodput.min;
    e->goodput.fitted_times = c->estimators.goodput_time_fit;
    cx->batch->adaptive_batch = e->goodput.min;
    char why[300];
    e->curve_on = option_given(c->estimators.goodput_noise_curve);
    if (e->curve_on && !noise_curve_parse(c->estimators.goodput_noise_curve, &e->noise_curve, why, sizeof why))
        bs_die_about("goodput_noise_curve", "goodput's noise curve: %s", why);
    if (!option_given(c->estimators.goodput_time_model)) return;
    char tail;
    if (sscanf(c->estimators.goodput_time_model, "%lf:%lf%c", &e->planted_a, &e->planted_b, &tail) != 2 || e->planted_a < 0 ||
        !(e->planted_b > 0))
        bs_die_about("goodput_time_model", "goodput's time model needs A:B with A >= 0 and B > 0 seconds (got '%s')",
                     c->estimators.goodput_time_model);
    e->planted = true;
    /* A given line needs no exploring: the table holds it at both ends from the start. */
    goodput_record(&e->goodput, e->goodput.min, e->planted_a + e->planted_b * (double)e->goodput.min);
    goodput_record(&e->goodput, e->goodput.max, e->planted_a + e->planted_b * (double)e->goodput.max);
}

void estimators_setup(const TrainContext *cx, Estimators *e) {
    const TrainConfig *c = cx->cfg;
    noise_scale_init(&e->precond, c->estimators.noise_ema);
    const int every = c->estimators.noise_scale_every;
    curvature_init(&e->curvature, pow(c->estimators.noise_ema, every > 0 ? every : 1)); /* the same horizon in steps */
    curvature_init(&e->curvature_precond, e->curvature.ema_decay);
    e->precond_big_sq = NAN;
    e->precond_on = c->estimators.noise_scale && c->optim.kind == OPTIM_ADAMW && flat_layout(cx) && cx->cfg->diloco.local_steps == 0;
    if (every > 0) setup_curvature(cx, e);
    noise_probe_setup(cx, e);
    if (e->goodput_on) setup_goodput(cx, e);
}

void estimators_free(const TrainContext *cx, Estimators *e) {
    (void)cx;
    free(e->probe);
    free(e->saved_grad);
    free(e->saved_params);
    free(e->precond_grad);
    free(e->signs);
    free(e->global_signs);
}

bool estimators_preconditioner(const TrainContext *cx, Estimators *e, Preconditioner *p) {
    long t = engine_optimizer_step(cx->engine);
    if (!e->precond_on || t < PRECOND_FROM_STEP) return false;
    *p = (Preconditioner){engine_chunk(cx->engine, 0)->state[1], 1.0 / sqrt(1.0 - pow(cx->cfg->optim.beta2, (double)t)),
                          cx->cfg->optim.eps};
    return true;
}

/* The probe's signs of this step's M micro-batches, indexed by place in the
 * global batch (whatever the layout), from the seed and the step. */
static void probe_signs(const TrainContext *cx, int micro_batches, float *signs) {
    Rng rng;
    rng_seed(&rng, ((uint64_t)cx->cfg->model.seed * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)cx->step << 20) ^ 0x5eedc0feULL);
    curvature_probe_signs(&rng, micro_batches, signs);
}

void estimators_before_step(const TrainContext *cx, Estimators *e, StepResult *r) {
    noise_probe_measure(cx, e, r);
    if (!e->precond_on && !e->curvature_on) return;
    EngineChunk *ch0 = engine_chunk(cx->engine, 0);
    Preconditioner p;
    engine_chunk_measure_micro_preconditioned(ch0, estimators_preconditioner(cx, e, &p) ? &p : NULL);
    const int every = cx->cfg->estimators.noise_scale_every;
    e->probing = e->curvature_on && (cx->step + 1) % every == 0 && r->batch >= 2L * cx->cfg->batch.micro_batch &&
                 r->accum_steps <= e->signs_capacity;
    if (!e->probing) {
        engine_chunk_set_probe(ch0, NULL, NULL);
        return;
    }
    memset(e->probe, 0, engine_chunk(cx->engine, 0)->update_count * sizeof(float));
    probe_signs(cx, (int)(r->batch / cx->cfg->batch.micro_batch), e->global_signs);
    for (int k = 0; k < r->accum_steps; k++) e->signs[k] = e->global_signs[k * cx->dp_size + cx->dp_index];
    engine_chunk_set_probe(ch0, e->probe, e->signs);
}

/* z^T H z and v^T H v by central differences at the saved weights (two
 * gradient passes each, none for a zero direction) into the EMAs c; the
 * weights left as they were, the gradient buffer overwritten. */
static void measure_forms(const TrainContext *cx, Estimators *e, Curvature *c, const float *z, const float *v, int micro, GradientAt grad,
                          void *ctx) {
    EngineChunk *ch = engine_chunk(cx->engine, 0);
    const size_t n = ch->update_count;
    float *w = engine_chunk_update_params(ch);
    const double hz = curvature_step(w, z, n), hv = curvature_step(w, v, n);
    double zhz = curvature_form(w, e->saved_params, z, n, hz, grad, ctx, NULL);
    double vhv = curvature_form(w, e->saved_params, v, n, hv, grad, ctx, NULL);
    curvature_update(c, zhz, vhv, cx->cfg->batch.micro_batch, micro);
    e->extra_passes += (hz > 0 ? 2 : 0) + (hv > 0 ? 2 : 0);
}

/* B_noise from (z, g) and, once Adam's preconditioner exists, B_noise(P)
 * from (P z, P g) at this step's weights (curvature.h): the probe made z,
 * then four gradient passes per pair; weights and gradient left as they were. */
static void measure_curvature(const TrainContext *cx, Estimators *e, const StepResult *r, GradientAt grad, void *ctx) {
    EngineChunk *ch = engine_chunk(cx->engine, 0);
    const size_t n = ch->update_count;
    float *w = engine_chunk_update_params(ch), *g = engine_chunk_update_grads(ch);
    const int micro = (int)(r->batch / cx->cfg->batch.micro_batch);
    comm_allreduce(engine_grid(cx->engine)->dp_group, e->probe, n); /* sum_i s_i g_i / M over the global batch */
    double sign_sum = 0;
    for (int i = 0; i < micro; i++) sign_sum += e->global_signs[i];
    for (size_t i = 0; i < n; i++) e->probe[i] = (float)(micro * (double)e->probe[i] - sign_sum * g[i]); /* z */
    memcpy(e->saved_grad, g, n * sizeof(float));
    memcpy(e->saved_params, w, n * sizeof(float));
    measure_forms(cx, e, &e->curvature, e->probe, e->saved_grad, micro, grad, ctx);
    Preconditioner p;
    if (e->precond_grad && estimators_preconditioner(cx, e, &p)) {
        curvature_precondition(&p, e->probe, e->probe, n); /* P z: z is no longer needed */
        curvature_precondition(&p, e->saved_grad, e->precond_grad, n);
        measure_forms(cx, e, &e->curvature_precond, e->probe, e->precond_grad, micro, grad, ctx);
    }
    memcpy(g, e->saved_grad, n * sizeof(float));
}

void estimators_after_backward(const TrainContext *cx, Estimators *e, StepResult *r, GradientAt grad, void *ctx) {
    e->precond_big_sq = NAN;
    Preconditioner p;
    EngineChunk *ch = cx->engine && e->precond_on ? engine_chunk(cx->engine, 0) : NULL;
    if (ch && estimators_preconditioner(cx, e, &p))
        e->precond_big_sq = preconditioned_sum_of_squares(engine_chunk_update_grads(ch), NULL, ch->update_count, &p);
    if (!e->probing) return;
    double t0 = bs_now();
    EngineChunk *ch0 = engine_chunk(cx->engine, 0);
    engine_chunk_set_probe(ch0, NULL, NULL); /* the extra passes measure nothing */
    engine_chunk_measure_micro_preconditioned(ch0, NULL);
    measure_curvature(cx, e, r, grad, ctx);
    r->extra_seconds += bs_now() - t0; /* beside the probe's (noise_probe.h) */
}

/* The noise scale goodput follows. */
static double followed_noise_scale(const TrainContext *cx, Estimators *e, const StepResult *r) {
    if (cx->cfg->estimators.goodput_noise_scale > 0) return cx->cfg->estimators.goodput_noise_scale; /* given, not estimated */
    if (e->curve_on) return noise_curve_at(&e->noise_curve, r->loss); /* every rank's loss is the batch's */
    switch (cx->cfg->estimators.goodput_estimator) {
    case GOODPUT_PRECOND: return r->noise_precond;
    case GOODPUT_CURVATURE: return r->noise_curvature;
    case GOODPUT_CURVATURE_PRECOND: return r->noise_curvature_precond;
    case GOODPUT_PROBE: return noise_scale_simple(&e->probe_noise); /* the last probe's between probes */
    case GOODPUT_PROBE_PRECOND: return noise_scale_simple(&e->probe_precond);
    default: return noise_scale_simple(&e->simple);
    }
}

/* The step's time into the table (rank 0's, or planted), its goodput, and at
 * a decision point the batch of the steps to come. */
static void goodput_step(const TrainContext *cx, Estimators *e, StepResult *r) {
    double seconds = e->planted ? e->planted_a + e->planted_b * (double)r->batch : r->seconds - r->extra_seconds;
    if (!e->planted) comm_broadcast_bytes(cx->world, &seconds, sizeof seconds, 0); /* every rank decides the same */
    if (e->planted || e->steps_timed++ > 0) /* a process's first step pays for first touches */
        goodput_record(&e->goodput, r->batch, seconds);
    double b_noise = followed_noise_scale(cx, e, r);
    if (cx->cfg->estimators.goodput_temperature) /* the schedule's lr over the peak: the noise a step feels, at its temperature */
        b_noise *= r->lr / lr_scaling_factor(cx->cfg->batch.lr_scaling, r->batch, cx->batch->base_batch) / cx->cfg->optim.lr;
    if (b_noise > 0) {
        r->efficiency = goodput_efficiency(b_noise, e->goodput.base, r->batch);
        r->goodput = (double)r->batch / goodput_step_seconds(&e->goodput, r->batch) * r->efficiency;
    }
    /* Decisions after the first step (the first loss: with a given line and noise scale nothing waits to be
     * measured) and then every N steps. */
    const int every = cx->cfg->estimators.goodput_every > 0 ? cx->cfg->estimators.goodput_every : 10;
    if (cx->step != 0 && (cx->step + 1) % every != 0) return;
    double goodput, efficiency;
    cx->batch->adaptive_batch = goodput_choose(&e->goodput, b_noise, cx->batch->adaptive_batch, &goodput, &efficiency);
    r->next_batch = cx->batch->adaptive_batch;
}

void estimators_after_step(const TrainContext *cx, Estimators *e, StepResult *r, double micro_precond_sq) {
    r->noise_precond = r->noise_curvature = r->noise_curvature_precond = r->goodput = r->efficiency = NAN;
    r->next_batch = 0;
    r->extra_passes = e->extra_passes;
    r->probe_micro_batches = e->probe_micro_batches;
    const double b_small = cx->cfg->batch.micro_batch, micro_batches = (double)r->batch / b_small;
    if (e->precond_on && !r->skipped && isfinite(e->precond_big_sq)) /* micro norms of the loss scaled by 1/M */
        noise_scale_update(&e->precond, micro_precond_sq * micro_batches, b_small, e->precond_big_sq,
                           (double)r->batch);
    if (e->precond_on) r->noise_precond = noise_scale_simple(&e->precond);
    if (e->curvature_on) r->noise_curvature = curvature_noise_scale(&e->curvature);
    if (e->precond_grad) r->noise_curvature_precond = curvature_noise_scale(&e->curvature_precond);
    if (e->goodput_on) goodput_step(cx, e, r);
}

void estimators_pack(const Estimators *e, double *words) {
    const double fixed[9] = {e->precond.ema_decay, e->precond.grad_sq_ema, e->precond.trace_ema,
                             e->precond.ema_weight, e->curvature.ema_decay, e->curvature.trace_ema,
                             e->curvature.ghg_ema, e->curvature.ema_weight, (double)e->extra_passes};
    memcpy(words, fixed, sizeof fixed);
    goodput_pack(&e->goodput, words + 9);
    const double later[4] = {e->curvature_precond.ema_decay, e->curvature_precond.trace_ema,
                             e->curvature_precond.ghg_ema, e->curvature_precond.ema_weight};
    memcpy(words + ESTIMATOR_STATE_WORDS_V1, later, sizeof later);
    const NoiseScale *probe = &e->probe_noise;
    const double latest[5] = {probe->ema_decay, probe->grad_sq_ema, probe->trace_ema, probe->ema_weight,
                              (double)e->probe_micro_batches};
    memcpy(words + ESTIMATOR_STATE_WORDS_V2, latest, sizeof latest);
    const NoiseScale *pp = &e->probe_precond;
    const double last[4] = {pp->ema_decay, pp->grad_sq_ema, pp->trace_ema, pp->ema_weight};
    memcpy(words + ESTIMATOR_STATE_WORDS_V3, last, sizeof last);
}

void estimators_unpack(Estimators *e, const double *words, int count) {
    /* written before these estimators: they start afresh (before B_noise(P) or the probe: those alone do) */
    if (count != ESTIMATOR_STATE_WORDS && count != ESTIMATOR_STATE_WORDS_V3 && count != ESTIMATOR_STATE_WORDS_V2 &&
        count != ESTIMATOR_STATE_WORDS_V1)
        return;
    e->precond.grad_sq_ema = words[1];
    e->precond.trace_ema = words[2];
    e->precond.ema_weight = words[3];
    e->curvature.trace_ema = words[5];
    e->curvature.ghg_ema = words[6];
    e->curvature.ema_weight = words[7];
    e->extra_passes = (long)words[8];
    if (e->goodput_on && !goodput_unpack(&e->goodput, words + 9))
        bs_die("the checkpoint's goodput table is corrupt (%g sizes)", words[9]);
    if (count < ESTIMATOR_STATE_WORDS_V2) return;
    const double *later = words + ESTIMATOR_STATE_WORDS_V1;
    e->curvature_precond.trace_ema = later[1];
    e->curvature_precond.ghg_ema = later[2];
    e->curvature_precond.ema_weight = later[3];
    if (count < ESTIMATOR_STATE_WORDS_V3) return;
    const double *latest = words + ESTIMATOR_STATE_WORDS_V2;
    e->probe_noise.grad_sq_ema = latest[1];
    e->probe_noise.trace_ema = latest[2];
    e->probe_noise.ema_weight = latest[3];
    e->probe_micro_batches = (long)latest[4];
    if (count < ESTIMATOR_STATE_WORDS) return;
    const double *last = words + ESTIMATOR_STATE_WORDS_V3;
    e->probe_precond.grad_sq_ema = last[1];
    e->probe_precond.trace_ema = last[2];
    e->probe_precond.ema_weight = last[3];
}

/* Noise scale and goodput: goodput's settings need the goodput batch schedule. */
bool estimators_check_config(const TrainConfig *c, char *why, size_t n) {
    if (c->estimators.goodput_noise_scale > 0 && strncmp(c->batch.schedule, "goodput", 7) != 0) {
        return bs_reason(why, n, "goodput_noise_scale batch_schedule",
                         "a given goodput noise scale needs the goodput:MIN:MAX batch schedule (got %s)", c->batch.schedule);
    }
    if (c->estimators.goodput_noise_curve && *c->estimators.goodput_noise_curve &&
        (strncmp(c->batch.schedule, "goodput", 7) != 0 || c->estimators.goodput_noise_scale > 0)) {
        return bs_reason(why, n, "goodput_noise_curve batch_schedule goodput_noise_scale",
                         "goodput's noise curve needs the goodput:MIN:MAX batch schedule and no given noise scale (got "
                         "the batch schedule %s%s)", c->batch.schedule,
                         c->estimators.goodput_noise_scale > 0 ? " and a noise scale" : "");
    }
    if (c->estimators.goodput_temperature && strncmp(c->batch.schedule, "goodput", 7) != 0) {
        return bs_reason(why, n, "goodput_temperature batch_schedule",
                         "goodput's temperature needs the goodput:MIN:MAX batch schedule (got %s)", c->batch.schedule);
    }
    return true;
}
