/* noise_probe.c: the noise scale at the step's weights from extra
 * micro-batches (see noise_probe.h). */
#include "train/noise_probe.h"

#include <math.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/rng.h"
#include "core/timer.h"
#include "optim/noise_scale.h"
#include "train/estimators.h"

/* What the probe cannot work with, or NULL; *subjects: the quantities it is about (core/reason.h). */
static const char *probe_refusal(const TrainContext *cx, const char **subjects) {
    const TrainConfig *c = cx->cfg;
    const Grid *g = engine_grid(cx->engine);
    *subjects = "noise_probe_every";
    if (g->tp > 1 || g->pp > 1 || g->cp > 1 || g->ep > 1 || engine_num_chunks(cx->engine) != 1) {
        *subjects = "noise_probe_every tp pp cp ep virtual_stages";
        return "no tensor, pipeline, context or expert parallelism (its micro-batch norms are of whole gradients on one rank)";
    }
    if (c->parallel.zero > 1) {
        *subjects = "noise_probe_every zero_stage";
        return "ZeRO stage 0 or 1 (the layouts it is tested with)";
    }
    if (c->precision.mode != PRECISION_FP32) {
        *subjects = "noise_probe_every precision";
        return "fp32 precision (the layouts it is tested with)";
    }
    if (cx->cfg->optim.kind == OPTIM_ONEBIT_ADAM || cx->cfg->diloco.local_steps > 0) return "full gradient reduction (not 1-bit Adam or DiLoCo)";
    if (gpt_is_moe(cx->model)) return "a dense model (the experts' load statistics would count its passes)";
    return NULL;
}

void noise_probe_setup(const TrainContext *cx, Estimators *e) {
    const TrainConfig *c = cx->cfg;
    noise_scale_init(&e->probe_noise, c->estimators.noise_probe_ema);
    noise_scale_init(&e->probe_precond, c->estimators.noise_probe_ema);
    if (c->estimators.noise_probe_every <= 0) return;
    const char *subjects, *why = probe_refusal(cx, &subjects);
    if (why) bs_die_about(subjects, "the noise probe needs %s", why);
    if ((long)c->estimators.noise_probe_batches * cx->dp_size < 2)
        bs_die_about("noise_probe_batches", "%d probe batches on %d data-parallel rank(s) give %ld micro-batch(es): "
                     "the probe needs at least two (their spread is the noise)", c->estimators.noise_probe_batches,
                     cx->dp_size, (long)c->estimators.noise_probe_batches * cx->dp_size);
    e->probe_on = true;
}

/* The probe's micro-batches: micro-step k of this rank is micro-batch
 * i = k x dp + replica of the M, its sequences drawn from the seed, the step
 * and i within the training data's current epoch (noise_probe.h). */
typedef struct {
    const TrainContext *cx;
    uint64_t key;   /* the seed and the step */
    uint64_t epoch_first, windows; /* the first sequence of the current epoch; sequences per epoch */
    int replicas, replica;
} ProbeSource;

static uint64_t probe_sequence(const ProbeSource *src, long micro_batch, int b) {
    Rng rng;
    rng_seed(&rng, src->key ^ rng_mix64((uint64_t)micro_batch * (uint64_t)src->cx->cfg->batch.micro_batch + (uint64_t)b));
    return src->epoch_first + rng_below(&rng, src->windows);
}

static void load_probe_micro(void *ctx, int micro, int32_t *inputs, int32_t *targets) {
    const ProbeSource *src = ctx;
    const int B = src->cx->cfg->batch.micro_batch, T = src->cx->cfg->model.seq_len;
    const long i = (long)micro * src->replicas + src->replica;
    for (int b = 0; b < B; b++)
        loader_sequence(src->cx->train_data, probe_sequence(src, i, b), inputs + (size_t)b * T,
                        targets + (size_t)b * T);
}

static ProbeSource probe_source(const TrainContext *cx) {
    const uint64_t windows = cx->train_data->num_windows;
    const uint64_t key = rng_mix64(rng_mix64((uint64_t)cx->cfg->model.seed ^ 0x70726f6265ULL) + (uint64_t)cx->step);
    return (ProbeSource){cx, key, cx->seqs_consumed / windows * windows, windows, cx->dp_size, cx->dp_index};
}

/* The tokens the probe's loss counts, over all M micro-batches (every rank the same). */
static uint64_t probe_counted(const TrainContext *cx, const ProbeSource *src, long micro_batches) {
    uint64_t counted = 0;
    for (long i = 0; i < micro_batches; i++)
        for (int b = 0; b < cx->cfg->batch.micro_batch; b++)
            counted += loader_counted(cx->train_data, probe_sequence(src, i, b), 1);
    return counted;
}

bool noise_probe_update(NoiseScale *ns, double micro_sum_sq, long M, double b, double mean_sq) {
    /* the mean over the M of |g_i|^2 = M^2 micro_sum_sq / M */
    return noise_scale_update(ns, micro_sum_sq * (double)M, b, mean_sq, (double)M * b);
}

/* One probe: the K x dp micro-batch gradients' two norms into the average, and with Adam's preconditioner P
 * (estimators_preconditioner) the two norms of P g_i into the preconditioned one: P is fixed during the probe,
 * so P g_i have mean P G and covariance P Sigma P and the same estimator is unbiased for |P G|^2 and
 * tr(P Sigma P), Pollux's preconditioned noise scale at the step's weights. */
static void probe_once(const TrainContext *cx, Estimators *e, StepResult *r) {
    const int K = cx->cfg->estimators.noise_probe_batches;
    const long M = (long)K * cx->dp_size;
    ProbeSource src = probe_source(cx);
    const uint64_t counted = probe_counted(cx, &src, M);
    EngineChunk *ch = engine_chunk(cx->engine, 0);
    Preconditioner p;
    const bool precond = estimators_preconditioner(cx, e, &p);
    engine_chunk_set_probe(ch, NULL, NULL); /* the curvature's signed sum and Adam's metric are the step's, set after */
    engine_chunk_measure_micro_preconditioned(ch, precond ? &p : NULL);
    EngineStepStats es =
        engine_forward_backward(cx->engine, K, 1.0f / (float)(counted > 0 ? counted : 1), load_probe_micro, &src);
    e->probe_micro_batches += K;
    /* this rank's micro-batches, of the loss scaled by 1/M: raw and in Adam's metric */
    double micro_sq[2] = {es.micro_sum_squares, precond ? engine_chunk_micro_precond_sum_squares(ch) : 0};
    comm_allreduce_double(engine_grid(cx->engine)->dp_group, micro_sq, 2);
    engine_chunk_measure_micro_preconditioned(ch, NULL);
    const double big_sq = engine_grad_sum_squares(cx->engine), b = cx->cfg->batch.micro_batch;
    if (noise_probe_update(&e->probe_noise, micro_sq[0], M, b, big_sq)) {
        r->noise_probe = noise_scale_simple(&e->probe_noise);
        r->noise_probe_grad_sq = noise_scale_grad_sq(&e->probe_noise);
        r->noise_probe_trace = noise_scale_trace(&e->probe_noise);
    }
    if (!precond) return;
    /* ZeRO 0 (precond_on): the reduced gradient is whole on every rank */
    const double big_precond = preconditioned_sum_of_squares(engine_chunk_update_grads(ch), NULL, ch->update_count, &p);
    if (noise_probe_update(&e->probe_precond, micro_sq[1], M, b, big_precond)) {
        r->noise_probe_precond = noise_scale_simple(&e->probe_precond);
        r->noise_probe_precond_grad_sq = noise_scale_grad_sq(&e->probe_precond);
        r->noise_probe_precond_trace = noise_scale_trace(&e->probe_precond);
    }
}

void noise_probe_measure(const TrainContext *cx, Estimators *e, StepResult *r) {
    r->noise_probe = r->noise_probe_grad_sq = r->noise_probe_trace = NAN;
    r->noise_probe_precond = r->noise_probe_precond_grad_sq = r->noise_probe_precond_trace = NAN;
    if (!e->probe_on || (cx->step + 1) % cx->cfg->estimators.noise_probe_every != 0) return;
    const double t0 = bs_now();
    probe_once(cx, e, r);
    r->extra_seconds += bs_now() - t0;
}
