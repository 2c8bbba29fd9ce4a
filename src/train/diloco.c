/* diloco.c: DiLoCo / FedAvg / FedProx in the trainer (see diloco.h). */
#include "train/diloco.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/rng.h"
#include "optim/grad_norm.h"
#include "optim/outer_optimizer.h"
#include "comm/compressed.h"

/* The outer loop's state, over chunk 0's flat buffer. */
typedef struct {
    OuterConfig outer;
    float *global, *velocity, *delta, *local; /* count floats each; local: the worker's weights while a checkpoint
                                                 holds the global ones */
    size_t count;
    Codec codec;                             /* the pseudo-gradient's (--grad-compression) */
    CompressedScheme scheme;
    float *worker_residual, *server_residual; /* error feedback of a lossy codec */
    size_t server_count;
    CompressedScratch *scratch;
    double worker_grad_norm;                 /* this worker's own gradient norm: what it clips by */
    int survivors_of;                        /* an elastic shrink: the checkpoint's workers (0: none) */
} DilocoState;

static EngineChunk *chunk(const TrainContext *cx) { return engine_chunk(cx->engine, 0); }

/* The worker's weights: the whole chunk (ZeRO 0). */
static float *local_weights(const TrainContext *cx) { return engine_chunk_update_params(chunk(cx)); }

static void check_combination(const TrainContext *cx) {
    const TrainConfig *c = cx->cfg;
    const Grid *g = engine_grid(cx->engine);
    const struct {
        bool on;
        const char *subjects, *what;
    } refused[] = {
        {c->parallel.zero != 0, "local_steps zero_stage",
         "ZeRO stages 1-3 (each worker keeps its own optimizer state: use ZeRO stage 0)"},
        {g->cp > 1, "local_steps cp",
         "context parallelism (context-parallel ranks must reduce their partial gradients every step)"},
        {engine_num_chunks(cx->engine) > 1, "local_steps virtual_stages", "virtual pipeline stages"},
        {c->optim.kind == OPTIM_ONEBIT_ADAM, "local_steps optimizer", "the onebit-adam optimizer"},
        {c->guards.balance, "local_steps balance", "the balanced micro-batch order"},
        {c->estimators.noise_scale || strncmp(c->batch.schedule, "adaptive", 8) == 0,
         "local_steps noise_scale batch_schedule", "the gradient noise scale estimate (or the adaptive batch it drives)"},
        {c->parallel.zero_quant_grads || c->parallel.zero_quant_weights || c->parallel.zero_hpz,
         "local_steps zero_quant_grads zero_quant_weights zero_hpz", "ZeRO's quantized communication or its hpZ copy"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (refused[i].on)
            bs_die_about(refused[i].subjects, "local steps (DiLoCo/FedAvg windows) cannot be combined with %s",
                         refused[i].what);
    if (c->diloco.local_steps_jitter >= c->diloco.local_steps)
        bs_die_about("local_steps_jitter local_steps",
                     "the local-step jitter %d must be below the %d local steps (every worker takes at least one step)",
                     c->diloco.local_steps_jitter, c->diloco.local_steps);
}

/* The inner steps worker `worker` takes in window `window`: H - j, j in [0, jitter] from a seeded hash. */
static long window_steps(const TrainConfig *c, long window, int worker) {
    if (c->diloco.local_steps_jitter == 0) return c->diloco.local_steps;
    uint64_t key = rng_mix64(rng_mix64((uint64_t)c->model.seed) + (uint64_t)window * 0x9e3779b97f4a7c15ULL + (uint64_t)worker);
    return c->diloco.local_steps - (long)(key % (uint64_t)(c->diloco.local_steps_jitter + 1));
}

static bool idle(const TrainContext *cx, long step) {
    const TrainConfig *c = cx->cfg;
    if (c->diloco.local_steps_jitter == 0) return false;
    long window = (step - 1) / c->diloco.local_steps, at = (step - 1) % c->diloco.local_steps;
    return at >= window_steps(c, window, cx->dp_index);
}

static void setup_codec(const TrainContext *cx, DilocoState *d) {
    const TrainConfig *c = cx->cfg;
    char why[256];
    if (!codec_parse(c->compression.codec, (size_t)c->compression.block, &d->codec, why, sizeof why))
        bs_die("%s", why);
    d->scheme = compressed_default_scheme(&d->codec);
    if (option_given(c->compression.scheme) && !compressed_parse_scheme(c->compression.scheme, &d->scheme))
        bs_die_about("compression_scheme", "the compression scheme must be ring or exchange (got '%s')",
                     c->compression.scheme);
    if (d->codec.kind == CODEC_NONE || cx->dp_size == 1) return;
    Comm *dpc = engine_grid(cx->engine)->dp_group;
    d->worker_residual = bs_calloc(d->count, sizeof(float));
    d->server_count = compressed_server_floats(dpc, 0, d->count, d->count);
    d->server_residual = bs_calloc(d->server_count ? d->server_count : 1, sizeof(float));
    d->scratch = compressed_scratch_new();
}

static bool wanted(const TrainConfig *cfg) { return cfg->diloco.local_steps > 0; }

/* DiLoCo's codec is on its pseudo-gradient, not the gradient. */
static void configure(const TrainContext *cx, EngineConfig *ec) {
    (void)cx;
    ec->data_parallel.grad_codec.kind = CODEC_NONE;
}

static void *create(const TrainContext *cx) {
    const TrainConfig *c = cx->cfg;
    DilocoState *d = bs_calloc(1, sizeof *d);
    check_combination(cx);
    d->outer = (OuterConfig){c->diloco.outer_optimizer, (float)c->diloco.outer_lr, (float)c->diloco.outer_momentum};
    if (c->diloco.outer_optimizer == OUTER_AVG) d->outer.lr = 1, d->outer.momentum = 0;
    d->count = chunk(cx)->model.num_params;
    size_t n = d->count ? d->count : 1;
    d->global = bs_malloc(n * sizeof(float));
    d->velocity = bs_calloc(n, sizeof(float));
    d->delta = bs_malloc(n * sizeof(float));
    d->local = bs_malloc(n * sizeof(float));
    memcpy(d->global, local_weights(cx), d->count * sizeof(float));
    setup_codec(cx, d);
    return d;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    DilocoState *d = state;
    free(d->global);
    free(d->velocity);
    free(d->delta);
    free(d->local);
    free(d->worker_residual);
    free(d->server_residual);
    compressed_scratch_free(d->scratch);
    free(d);
}

/* Each worker's gradients stay its own. */
static bool local_gradients(void *state, const TrainContext *cx) {
    (void)state, (void)cx;
    return true;
}

/* Each worker's mean loss is over its share of the global batch. */
static float loss_scale(void *state, const TrainContext *cx) {
    (void)state;
    return (float)cx->dp_size;
}

/* The mean over the workers of each one's own squared norm (kept for its clipping). */
static double grad_sum_squares(void *state, const TrainContext *cx) {
    DilocoState *d = state;
    double mine = engine_grad_sum_squares(cx->engine), sum = mine; /* ZeRO 0: over this worker's ranks only */
    d->worker_grad_norm = sqrt(mine);
    comm_allreduce_double(engine_grid(cx->engine)->dp_group, &sum, 1);
    return sum / cx->dp_size;
}

/* FedProx: grads += mu (local - global), before the inner step. */
static void prox(const TrainContext *cx, const DilocoState *d) {
    const float mu = (float)cx->cfg->diloco.prox_mu;
    if (mu == 0) return;
    float *grads = engine_chunk_update_grads(chunk(cx));
    const float *w = local_weights(cx);
    for (size_t i = 0; i < d->count; i++) grads[i] += mu * (w[i] - d->global[i]);
}

/* delta summed over the workers, then their mean: exactly, or through the codec with error feedback. With
 * --local-steps-jitter each worker's delta weighs by the tokens it trained on (its inner steps). */
static void average_delta(const TrainContext *cx, DilocoState *d, long window) {
    Comm *dpc = engine_grid(cx->engine)->dp_group;
    double steps = (double)window_steps(cx->cfg, window, cx->dp_index), total = steps;
    if (cx->cfg->diloco.local_steps_jitter > 0) {
        for (size_t i = 0; i < d->count; i++) d->delta[i] *= (float)steps;
        comm_allreduce_double(dpc, &total, 1);
    }
    if (cx->dp_size > 1 && d->codec.kind == CODEC_NONE) comm_allreduce(dpc, d->delta, d->count);
    if (cx->dp_size > 1 && d->codec.kind != CODEC_NONE) {
        Compression z = {d->codec, d->scheme, !cx->cfg->compression.no_error_feedback, d->worker_residual, d->server_residual};
        comm_wait(comm_start_compressed_allreduce(dpc, d->scratch, &z, d->delta, 0, d->count, d->count));
    }
    const float inv = cx->cfg->diloco.local_steps_jitter > 0 ? (float)(1.0 / total) : 1.0f / (float)cx->dp_size;
    for (size_t i = 0; i < d->count; i++) d->delta[i] *= inv;
}

/* --local-steps-jitter: a worker whose window is done sits out the update; else FedProx's term, then the
 * inner step clipped by the worker's own norm. */
static void update(void *state, const TrainContext *cx, const StepResult *r) {
    DilocoState *d = state;
    if (idle(cx, cx->step + 1)) return;
    prox(cx, d);
    engine_update(cx->engine, r->lr, clip_coefficient(d->worker_grad_norm, cx->cfg->optim.grad_clip));
}

static const UpdatePath PATH = {local_gradients, loss_scale, grad_sum_squares, update};

static const UpdatePath *update_path(void *state) {
    (void)state;
    return &PATH;
}

/* A window's end: the outer step (a skipped inner step included). Collective over the data-parallel group. */
static void after_update(void *state, const TrainContext *cx, TrainStep *s) {
    (void)s;
    DilocoState *d = state;
    const long step = cx->step + 1;
    if (step % cx->cfg->diloco.local_steps != 0) return;
    float *w = local_weights(cx);
    for (size_t i = 0; i < d->count; i++) d->delta[i] = d->global[i] - w[i];
    average_delta(cx, d, step / cx->cfg->diloco.local_steps - 1);
    outer_step(&d->outer, d->global, d->velocity, d->delta, d->count);
    memcpy(w, d->global, d->count * sizeof(float));
    engine_after_update(cx->engine); /* tied output weights and bf16 copies from the new weights */
}

/* ---- checkpoints ---- */

static void before_save(void *state, const TrainContext *cx) {
    DilocoState *d = state;
    memcpy(d->local, local_weights(cx), d->count * sizeof(float));
    memcpy(local_weights(cx), d->global, d->count * sizeof(float));
}

static void after_save(void *state, const TrainContext *cx) {
    DilocoState *d = state;
    memcpy(local_weights(cx), d->local, d->count * sizeof(float));
}

static int arrays_of(void *state, const TrainContext *cx, int workers, CkptExtraArray *arrays, char *label,
                     size_t label_size) {
    DilocoState *d = state;
    char worker[64]; /* the label's length as checkpoints have it */
    EngineChunk *ch = chunk(cx);
    int n = 0;
    arrays[n++] = (CkptExtraArray){"diloco_local", d->local, d->count};
    arrays[n++] = (CkptExtraArray){"diloco_velocity", d->velocity, d->count};
    for (int k = 0; k < optimizer_state_arrays(cx->cfg->optim.kind); k++)
        arrays[n++] = (CkptExtraArray){k == 0 ? "diloco_inner_state0" : "diloco_inner_state1", ch->state[k],
                                        ch->update_count};
    if (d->worker_residual) {
        arrays[n++] = (CkptExtraArray){"diloco_worker", d->worker_residual, d->count};
        arrays[n++] = (CkptExtraArray){"diloco_server", d->server_residual, d->server_count};
    }
    snprintf(worker, sizeof worker, "diloco H=%d %s, dp %d of %d, %s", cx->cfg->diloco.local_steps,
             TRAIN_OUTER_OPTIMIZER_WORDS[cx->cfg->diloco.outer_optimizer], cx->dp_index, workers,
             optimizer_kind_name(cx->cfg->optim.kind));
    snprintf(label, label_size, "%s", worker);
    return n;
}

static int survivor_source(void *state, const TrainContext *cx, const CkptManifest *m) {
    DilocoState *d = state;
    const Grid *g = engine_grid(cx->engine);
    if (d->worker_residual || m->dp <= cx->dp_size || m->tp != g->tp || m->pp != g->pp ||
        m->cp != g->cp)
        return -1;
    d->survivors_of = m->dp;
    return ((cx->dp_index * g->pp + g->pp_index) * g->cp + g->cp_index) * g->tp + g->tp_index; /* grid.h's order */
}

static void reset_arrays(void *state, const TrainContext *cx) {
    (void)cx;
    ((DilocoState *)state)->survivors_of = 0;
}

static const char *fresh_arrays_note(void *state) {
    (void)state;
    return "DiLoCo's per-worker state and any error-feedback residuals start afresh";
}

static void after_resume(void *state, const TrainContext *cx, bool restored) {
    DilocoState *d = state;
    if (restored && d->survivors_of > 0 && cx->rank == 0)
        bs_warn("DiLoCo: %d of the checkpoint's %d workers continue their window, worker i from worker i's state; "
                "the others' pseudo-gradients of this window are discarded", cx->dp_size, d->survivors_of);
    memcpy(d->global, local_weights(cx), d->count * sizeof(float)); /* the manifest's weights are the global ones */
    if (restored) {
        memcpy(local_weights(cx), d->local, d->count * sizeof(float));
    } else {
        memset(d->velocity, 0, d->count * sizeof(float));
        if (cx->rank == 0)
            bs_warn("DiLoCo: the checkpoint holds no per-worker state for this layout: every worker restarts its "
                    "window from the global weights, the outer momentum from zero");
    }
    engine_share_output_weights(cx->engine);
}

const Feature diloco_feature = {
    .name = "diloco", .wanted = wanted, .configure = configure, .create = create, .free = destroy, .update_path = update_path,
    .after_update = after_update, .before_save = before_save, .after_save = after_save, .arrays = arrays_of,
    .reset_arrays = reset_arrays, .fresh_arrays_note = fresh_arrays_note, .survivor_source = survivor_source,
    .after_resume = after_resume,
};

/* DiLoCo / FedAvg. */
bool diloco_check_config(const TrainConfig *c, char *why, size_t n) {
    if (c->diloco.local_steps_jitter > 0 && c->diloco.local_steps == 0) {
        return bs_reason(why, n, "local_steps_jitter local_steps",
                         "a local-step jitter needs local steps (DiLoCo/FedAvg windows of H steps)");
    }
    return true;
}
