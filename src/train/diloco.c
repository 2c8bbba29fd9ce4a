/* diloco.c: DiLoCo / FedAvg / FedProx in the trainer (see diloco.h). */
#include "train/diloco.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

static EngineChunk *chunk(Trainer *tr) { return engine_chunk(tr->engine, 0); }

/* The worker's weights: the whole chunk (ZeRO 0). */
static float *local_weights(Trainer *tr) { return dp_update_params(chunk(tr)->dp); }

static void check_combination(const Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    const Grid *g = engine_grid(tr->engine);
    const char *refused = c->parallel.zero != 0 ? "--zero 1-3 (each worker keeps its own optimizer state: use --zero 0)"
                          : g->cp > 1 ? "--cp (context-parallel ranks must reduce their partial gradients every step)"
                          : engine_num_chunks(tr->engine) > 1 ? "--virtual-stages"
                          : c->optim.kind == OPTIM_ONEBIT_ADAM ? "--optimizer onebit-adam"
                          : c->guards.balance ? "--balance"
                          : c->estimators.noise_scale || strncmp(c->batch.schedule, "adaptive", 8) == 0 ? "--noise-scale"
                          : c->parallel.zero_quant_grads || c->parallel.zero_quant_weights || c->parallel.zero_hpz ? "--zero-quant-*/--zero-hpz"
                          : NULL;
    if (refused) bs_die("--local-steps cannot be combined with %s", refused);
    if (c->diloco.local_steps_jitter >= c->diloco.local_steps)
        bs_die("--local-steps-jitter %d must be below --local-steps %d (every worker takes at least one step)",
               c->diloco.local_steps_jitter, c->diloco.local_steps);
}

/* The inner steps worker `worker` takes in window `window`: H - j, j in [0, jitter] from a seeded hash. */
static long window_steps(const TrainConfig *c, long window, int worker) {
    if (c->diloco.local_steps_jitter == 0) return c->diloco.local_steps;
    uint64_t key = rng_mix64(rng_mix64((uint64_t)c->model.seed) + (uint64_t)window * 0x9e3779b97f4a7c15ULL + (uint64_t)worker);
    return c->diloco.local_steps - (long)(key % (uint64_t)(c->diloco.local_steps_jitter + 1));
}

bool diloco_idle(const Trainer *tr, long step) {
    const TrainConfig *c = &tr->cfg;
    if (!tr->diloco.on || c->diloco.local_steps_jitter == 0) return false;
    long window = (step - 1) / c->diloco.local_steps, at = (step - 1) % c->diloco.local_steps;
    return at >= window_steps(c, window, tr->dp_index);
}

static void setup_codec(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    DilocoState *d = &tr->diloco;
    char why[256];
    if (!codec_parse(c->compression.codec, (size_t)c->compression.block, &d->codec, why, sizeof why))
        bs_die("%s", why);
    d->scheme = compressed_default_scheme(&d->codec);
    if (option_given(c->compression.scheme) && !compressed_parse_scheme(c->compression.scheme, &d->scheme))
        bs_die("--compression-scheme must be ring or exchange (got '%s')", c->compression.scheme);
    if (d->codec.kind == CODEC_NONE || tr->dp_size == 1) return;
    Comm *dpc = engine_grid(tr->engine)->dp_group;
    d->worker_residual = bs_calloc(d->count, sizeof(float));
    d->server_count = compressed_server_floats(dpc, 0, d->count, d->count);
    d->server_residual = bs_calloc(d->server_count ? d->server_count : 1, sizeof(float));
    d->scratch = compressed_scratch_new();
}

void diloco_setup(Trainer *tr) {
    const TrainConfig *c = &tr->cfg;
    DilocoState *d = &tr->diloco;
    d->on = c->diloco.local_steps > 0;
    if (!d->on) return;
    check_combination(tr);
    d->outer = (OuterConfig){c->diloco.outer_optimizer, (float)c->diloco.outer_lr, (float)c->diloco.outer_momentum};
    if (c->diloco.outer_optimizer == OUTER_AVG) d->outer.lr = 1, d->outer.momentum = 0;
    d->count = chunk(tr)->model.num_params;
    size_t n = d->count ? d->count : 1;
    d->global = bs_malloc(n * sizeof(float));
    d->velocity = bs_calloc(n, sizeof(float));
    d->delta = bs_malloc(n * sizeof(float));
    d->local = bs_malloc(n * sizeof(float));
    memcpy(d->global, local_weights(tr), d->count * sizeof(float));
    setup_codec(tr);
}

void diloco_free(Trainer *tr) {
    DilocoState *d = &tr->diloco;
    free(d->global);
    free(d->velocity);
    free(d->delta);
    free(d->local);
    free(d->worker_residual);
    free(d->server_residual);
    compressed_scratch_free(d->scratch);
    memset(d, 0, sizeof *d);
}

float diloco_loss_scale(const Trainer *tr) { return tr->diloco.on ? (float)tr->dp_size : 1.0f; }

double diloco_grad_sum_squares(Trainer *tr) {
    double mine = engine_grad_sum_squares(tr->engine), sum = mine; /* ZeRO 0: over this worker's ranks only */
    tr->diloco.worker_grad_norm = sqrt(mine);
    comm_allreduce_double(engine_grid(tr->engine)->dp_group, &sum, 1);
    return sum / tr->dp_size;
}

void diloco_prox(Trainer *tr) {
    const DilocoState *d = &tr->diloco;
    const float mu = (float)tr->cfg.diloco.prox_mu;
    if (!d->on || mu == 0) return;
    float *grads = dp_update_grads(chunk(tr)->dp);
    const float *w = local_weights(tr);
    for (size_t i = 0; i < d->count; i++) grads[i] += mu * (w[i] - d->global[i]);
}

/* delta summed over the workers, then their mean: exactly, or through the codec with error feedback. With
 * --local-steps-jitter each worker's delta weighs by the tokens it trained on (its inner steps). */
static void average_delta(Trainer *tr, long window) {
    DilocoState *d = &tr->diloco;
    Comm *dpc = engine_grid(tr->engine)->dp_group;
    double steps = (double)window_steps(&tr->cfg, window, tr->dp_index), total = steps;
    if (tr->cfg.diloco.local_steps_jitter > 0) {
        for (size_t i = 0; i < d->count; i++) d->delta[i] *= (float)steps;
        comm_allreduce_double(dpc, &total, 1);
    }
    if (tr->dp_size > 1 && d->codec.kind == CODEC_NONE) comm_allreduce(dpc, d->delta, d->count);
    if (tr->dp_size > 1 && d->codec.kind != CODEC_NONE) {
        Compression z = {d->codec, d->scheme, !tr->cfg.compression.no_error_feedback, d->worker_residual, d->server_residual};
        comm_wait(comm_start_compressed_allreduce(dpc, d->scratch, &z, d->delta, 0, d->count, d->count));
    }
    const float inv = tr->cfg.diloco.local_steps_jitter > 0 ? (float)(1.0 / total) : 1.0f / (float)tr->dp_size;
    for (size_t i = 0; i < d->count; i++) d->delta[i] *= inv;
}

void diloco_after_step(Trainer *tr, long step) {
    DilocoState *d = &tr->diloco;
    if (!d->on || step % tr->cfg.diloco.local_steps != 0) return;
    float *w = local_weights(tr);
    for (size_t i = 0; i < d->count; i++) d->delta[i] = d->global[i] - w[i];
    average_delta(tr, step / tr->cfg.diloco.local_steps - 1);
    outer_step(&d->outer, d->global, d->velocity, d->delta, d->count);
    memcpy(w, d->global, d->count * sizeof(float));
    engine_after_update(tr->engine); /* tied output weights and bf16 copies from the new weights */
}

/* ---- checkpoints ---- */

void diloco_before_save(Trainer *tr) {
    DilocoState *d = &tr->diloco;
    if (!d->on) return;
    memcpy(d->local, local_weights(tr), d->count * sizeof(float));
    memcpy(local_weights(tr), d->global, d->count * sizeof(float));
}

void diloco_after_save(Trainer *tr) {
    DilocoState *d = &tr->diloco;
    if (d->on) memcpy(local_weights(tr), d->local, d->count * sizeof(float));
}

int diloco_arrays(Trainer *tr, int workers, CkptExtraArray *arrays, char *label, size_t label_size) {
    DilocoState *d = &tr->diloco;
    if (!d->on) return 0;
    EngineChunk *ch = chunk(tr);
    int n = 0;
    arrays[n++] = (CkptExtraArray){"diloco_local", d->local, d->count};
    arrays[n++] = (CkptExtraArray){"diloco_velocity", d->velocity, d->count};
    for (int k = 0; k < optimizer_state_arrays(tr->cfg.optim.kind); k++)
        arrays[n++] = (CkptExtraArray){k == 0 ? "diloco_inner_state0" : "diloco_inner_state1", ch->state[k],
                                        ch->update_count};
    if (d->worker_residual) {
        arrays[n++] = (CkptExtraArray){"diloco_worker", d->worker_residual, d->count};
        arrays[n++] = (CkptExtraArray){"diloco_server", d->server_residual, d->server_count};
    }
    snprintf(label, label_size, "diloco H=%d %s, dp %d of %d, %s", tr->cfg.diloco.local_steps,
             TRAIN_OUTER_OPTIMIZER_WORDS[tr->cfg.diloco.outer_optimizer], tr->dp_index, workers,
             optimizer_kind_name(tr->cfg.optim.kind));
    return n;
}

int diloco_survivor_source(const Trainer *tr, const CkptManifest *m) {
    const Grid *g = engine_grid(tr->engine);
    if (!tr->diloco.on || tr->diloco.worker_residual || m->dp <= tr->dp_size || m->tp != g->tp || m->pp != g->pp ||
        m->cp != g->cp)
        return -1;
    return ((tr->dp_index * g->pp + g->pp_index) * g->cp + g->cp_index) * g->tp + g->tp_index; /* grid.h's order */
}

void diloco_after_resume(Trainer *tr, bool restored) {
    DilocoState *d = &tr->diloco;
    if (!d->on) return;
    memcpy(d->global, local_weights(tr), d->count * sizeof(float)); /* the manifest's weights are the global ones */
    if (restored) {
        memcpy(local_weights(tr), d->local, d->count * sizeof(float));
    } else {
        memset(d->velocity, 0, d->count * sizeof(float));
        if (tr->rank == 0)
            bs_warn("DiLoCo: the checkpoint holds no per-worker state for this layout: every worker restarts its "
                    "window from the global weights, the outer momentum from zero");
    }
    engine_share_output_weights(tr->engine);
}
