/* compression.c: compressed communication in the trainer (see compression.h). */
#include "train/compression.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/range.h"
#include "optim/grad_norm.h"
#include "optim/onebit_adam.h"

/* 1-bit Adam's compression stage. */
typedef struct {
    bool on;                 /* --optimizer onebit-adam */
    float *momentum;         /* m over the whole flat buffer, the same on every rank (ZeRO-1: apart from the shard's state) */
    bool momentum_current;   /* momentum holds m (else it is gathered from the optimizer state first) */
    float *worker_residual;  /* num_params floats */
    float *server_residual;  /* this rank's chunk */
    size_t server_count;
    CompressedScratch *scratch;
} OnebitState;

/* 1-bit Adam and the residuals of compressed reductions run with one model
 * chunk per rank (the configuration check refuses virtual stages with them). */
static EngineChunk *only_chunk(const TrainContext *cx) { return engine_chunk(cx->engine, 0); }

/* The data-parallel options from the settings; one line (a reason with its subjects) on a bad value or combination. */
static void configure(const TrainContext *cx, EngineConfig *ec) {
    const TrainConfig *c = cx->cfg;
    DPOptions *opt = &ec->data_parallel;
    char why[256];
    if (c->compression.block < 1)
        bs_die_about("codec_block", "the compression block must be at least 1 value (got %d)", c->compression.block);
    if (!codec_parse(c->compression.codec, (size_t)c->compression.block, &opt->grad_codec, why, sizeof why))
        bs_die("%s", why);
    opt->grad_scheme = compressed_default_scheme(&opt->grad_codec);
    opt->error_feedback = !c->compression.no_error_feedback;
    if (c->parallel.zero_quant_grads) { /* ZeRO++'s qgZ: the hierarchical int8 all-to-all reduce-scatter, no residual */
        if (opt->grad_codec.kind != CODEC_NONE && opt->grad_codec.kind != CODEC_INT8)
            bs_die_about("zero_quant_grads grad_codec",
                         "ZeRO's quantized gradients reduce in int8: they cannot be combined with the %s gradient "
                         "compression", c->compression.codec);
        if (c->parallel.zero < 1)
            bs_die_about("zero_quant_grads zero_stage",
                         "ZeRO's quantized gradients quantize the gradient reduce-scatter: they need ZeRO stage 1, 2 or 3");
        if (option_given(c->compression.scheme))
            bs_die_about("compression_scheme zero_quant_grads",
                         "a compression scheme does not apply to ZeRO's quantized gradients (qgZ is its own scheme: "
                         "int8 all-to-all inside the node, then across nodes)");
        opt->grad_codec = (Codec){CODEC_INT8, (size_t)c->compression.block, 0};
        opt->grad_scheme = COMPRESSED_QGZ;
        opt->error_feedback = false; /* as ZeRO++ */
    }
    if (option_given(c->compression.scheme) && !compressed_parse_scheme(c->compression.scheme, &opt->grad_scheme))
        bs_die_about("compression_scheme", "the compression scheme must be ring or exchange (got '%s')",
                     c->compression.scheme);
    if (opt->grad_scheme == COMPRESSED_RING && !codec_is_elementwise(&opt->grad_codec) &&
        opt->grad_codec.kind != CODEC_NONE)
        bs_die_about("compression_scheme grad_codec",
                     "the ring compression scheme cannot carry %s encodings (partial sums of them do not add); use "
                     "exchange", c->compression.codec);
    opt->quant_weights = c->parallel.zero_quant_weights;
    opt->quant_block = (size_t)c->compression.block;
    opt->hpz = c->parallel.zero_hpz;
    if ((c->parallel.zero_quant_weights || c->parallel.zero_hpz) && c->parallel.zero != 3)
        bs_die_about("zero_quant_weights zero_hpz zero_stage",
                     "ZeRO's quantized weights and hpZ copy gather parameters: they need ZeRO stage 3 (got stage %d)",
                     c->parallel.zero);
    opt->fp8_gather = c->precision.fp8_param_gather;
    if (c->precision.fp8_param_gather && (c->parallel.zero != 3 || c->precision.mode != PRECISION_FP8 || c->precision.fp8_recipe != FP8_RECIPE_DELAYED))
        bs_die_about("fp8_param_gather zero_stage precision fp8_recipe",
                     "gathering parameters in fp8 needs ZeRO stage 3, fp8 precision and the delayed fp8 recipe "
                     "(block's 128x128 weight tiles cross ZeRO shards)");
    if (c->precision.fp8_param_gather && c->parallel.zero_quant_weights)
        bs_die_about("fp8_param_gather zero_quant_weights",
                     "gathering parameters in fp8 and ZeRO's quantized weights are two encodings of the same gather: "
                     "pick one");
}

/* After the optimizer is set up: checks and allocates 1-bit Adam's state. */
static void *create(const TrainContext *cx) {
    const TrainConfig *c = cx->cfg;
    OnebitState *o = bs_calloc(1, sizeof *o);
    o->on = c->optim.kind == OPTIM_ONEBIT_ADAM;
    if (!o->on) {
        if (c->optim.freeze_step > 0)
            bs_die_about("freeze_step optimizer", "a freeze step is 1-bit Adam's: it needs the onebit-adam optimizer");
        return o;
    }
    if (c->optim.freeze_step < 1)
        bs_die_about("optimizer freeze_step",
                     "the onebit-adam optimizer needs a freeze step S >= 1: the steps of full-precision Adam before "
                     "the variance is frozen (about 15-25%% of the run)");
    if (c->parallel.zero > 1)
        bs_die_about("optimizer zero_stage",
                     "the onebit-adam optimizer needs ZeRO stage 0 or 1 (every rank keeps the whole momentum)");
    const Grid *g = engine_grid(cx->engine);
    EngineChunk *ch = only_chunk(cx);
    if (g->tp > 1 || g->pp > 1)
        bs_die_about("optimizer tp pp",
                     "the onebit-adam optimizer needs no tensor or pipeline parallelism (data parallelism only)");
    if (strcmp(c->compression.codec, "none") != 0 || c->parallel.zero_quant_grads)
        bs_die_about("optimizer grad_codec zero_quant_grads",
                     "the onebit-adam optimizer compresses the momentum itself: leave the gradients uncompressed");
    if (c->estimators.noise_scale || c->guards.balance)
        bs_die_about(c->guards.balance ? "optimizer balance" : "optimizer noise_scale batch_schedule",
                     "the onebit-adam optimizer cannot be combined with %s: after the freeze step no rank sees the "
                     "reduced gradient, and each rank's gradient must be an equal share",
                     c->guards.balance ? "the balanced micro-batch order"
                                       : "the gradient noise scale estimate (or an adaptive batch schedule)");
    size_t total = ch->model.num_params;
    if (cx->dp_size > 1) {
        o->worker_residual = bs_calloc(total ? total : 1, sizeof(float));
        o->server_count = compressed_server_floats(g->dp_group, 0, total, total);
        o->server_residual = bs_calloc(o->server_count ? o->server_count : 1, sizeof(float));
        o->scratch = compressed_scratch_new();
    }
    /* stage 0: the optimizer's m is already the whole buffer */
    o->momentum = ch->update_count == total ? ch->state[0] : bs_calloc(total ? total : 1, sizeof(float));
    return o;
}

/* Before the optimizer state: the momentum may be state[0]. */
static void destroy(void *state, const TrainContext *cx) {
    OnebitState *o = state;
    if (o->on && o->momentum != only_chunk(cx)->state[0]) free(o->momentum);
    free(o->worker_residual);
    free(o->server_residual);
    compressed_scratch_free(o->scratch);
    free(o);
}

/* The next optimizer step is in 1-bit Adam's compression stage. */
static bool compressing(void *state, const TrainContext *cx) {
    const OnebitState *o = state;
    return o->on && engine_optimizer_step(cx->engine) + 1 > cx->cfg->optim.freeze_step;
}

/* The compression stage's squared gradient norm (compression.h). Collective. */
static double onebit_grad_sum_squares(const TrainContext *cx) {
    double n = cx->dp_size;
    const GPT *model = &only_chunk(cx)->model;
    double s = sum_of_squares(model->grads, model->num_params) * n * n;
    comm_allreduce_double(engine_grid(cx->engine)->dp_group, &s, 1);
    return s / n;
}

/* The compression stage's update (momentum exchange and apply). Collective. */
static void onebit_update(const TrainContext *cx, OnebitState *o, double lr) {
    const TrainConfig *c = cx->cfg;
    EngineChunk *ch = only_chunk(cx);
    Comm *dpc = engine_grid(cx->engine)->dp_group;
    size_t total = ch->model.num_params;
    if (!o->momentum_current && o->momentum != ch->state[0]) { /* ZeRO-1: the whole m from the shards */
        memcpy(o->momentum + ch->update_offset, ch->state[0], ch->update_count * sizeof(float));
        comm_allgather(dpc, o->momentum, 0, total, total);
    }
    o->momentum_current = true;
    onebit_adam_local_momentum(o->momentum, ch->model.grads, total, (float)c->optim.beta1, (float)cx->dp_size);
    if (cx->dp_size > 1) {
        Compression z = {{CODEC_ONEBIT, 0, 0}, COMPRESSED_EXCHANGE, true, o->worker_residual, o->server_residual};
        comm_wait(comm_start_compressed_allreduce(dpc, o->scratch, &z, o->momentum, 0, total, total));
    }
    long step = engine_optimizer_step(cx->engine) + 1;
    engine_set_optimizer_step(cx->engine, step);
    float *params = engine_chunk_update_params(ch);
    const float *v = ch->state[1];
    const Range mine = range_make(ch->update_offset, ch->update_count);
    for (int i = 0; i < ch->opt.num_tensors; i++) { /* tensor by tensor: decay or not; wte's padding untouched */
        const OptimTensor *t = &ch->opt.tensors[i];
        const Range part = range_intersect(range_make(t->offset, t->count), mine);
        if (range_empty(part)) continue;
        OnebitAdamStep s = {(float)lr, (float)c->optim.beta1, (float)c->optim.beta2, (float)c->optim.eps,
                            t->decays ? (float)c->optim.weight_decay : 0.0f, 1.0f, step, c->optim.freeze_step};
        size_t at = range_offset_in(part, mine);
        onebit_adam_apply(params + at, o->momentum + part.offset, v + at, part.count, &s);
    }
    if (o->momentum != ch->state[0]) /* what checkpoints hold */
        memcpy(ch->state[0], o->momentum + ch->update_offset, ch->update_count * sizeof(float));
}

static int arrays_of(void *state, const TrainContext *cx, int workers, CkptExtraArray *arrays, char *label,
                     size_t label_size) {
    const OnebitState *o = state;
    const TrainConfig *c = cx->cfg;
    int n = 0;
    float *worker, *server;
    size_t worker_count, server_count;
    engine_chunk_residuals(only_chunk(cx), &worker, &worker_count, &server, &server_count);
    if (worker) arrays[n++] = (CkptExtraArray){"grad_worker", worker, worker_count};
    if (server) arrays[n++] = (CkptExtraArray){"grad_server", server, server_count};
    if (o->worker_residual) {
        arrays[n++] = (CkptExtraArray){"onebit_worker", o->worker_residual,
                                        only_chunk(cx)->model.num_params};
        arrays[n++] = (CkptExtraArray){"onebit_server", o->server_residual, o->server_count};
    }
    snprintf(label, label_size, "grad %s/%d%s%s, dp %d of %d, zero %d, %s", c->compression.codec,
             c->compression.block, option_given(c->compression.scheme) ? "/" : "", c->compression.scheme, cx->dp_index,
             workers, c->parallel.zero, c->parallel.zero_quant_grads ? "qgZ" : c->optim.kind == OPTIM_ONEBIT_ADAM ? "1-bit Adam" : "-");
    return n;
}

/* Forgets every residual (after a skipped step, whose reduction may have left NaN in them; or on resuming
 * under another layout). */
static void reset_arrays(void *state, const TrainContext *cx) {
    engine_chunk_reset_residuals(only_chunk(cx));
    OnebitState *o = state;
    if (o->worker_residual) memset(o->worker_residual, 0, only_chunk(cx)->model.num_params * sizeof(float));
    if (o->server_residual) memset(o->server_residual, 0, o->server_count * sizeof(float));
}

static double grad_sum_squares(void *state, const TrainContext *cx) {
    return compressing(state, cx) ? onebit_grad_sum_squares(cx) : engine_grad_sum_squares(cx->engine);
}

static float unit_loss_scale(void *state, const TrainContext *cx) {
    (void)state, (void)cx;
    return 1.0f;
}

/* Steps 1..S: AdamW on the reduced gradient, clipped; then the compression stage (no clipping). */
static void update(void *state, const TrainContext *cx, const StepResult *r) {
    if (!compressing(state, cx)) {
        engine_update(cx->engine, r->lr, clip_coefficient(r->grad_norm, cx->cfg->optim.grad_clip));
        return;
    }
    onebit_update(cx, state, r->lr);
    engine_after_update(cx->engine);
}

static const UpdatePath ONEBIT_PATH = {compressing, unit_loss_scale, grad_sum_squares, update};

static const UpdatePath *update_path(void *state) { return ((const OnebitState *)state)->on ? &ONEBIT_PATH : NULL; }

/* What a bad step left unsent is not worth sending. */
static void after_update(void *state, const TrainContext *cx, TrainStep *s) {
    if (s->r->skipped) reset_arrays(state, cx);
}

const Feature compression_feature = {
    .name = "compression", .configure = configure, .create = create, .free = destroy, .update_path = update_path,
    .after_update = after_update, .arrays = arrays_of, .reset_arrays = reset_arrays,
};

/* Gradient compression. */
bool compression_check_config(const TrainConfig *c, char *why, size_t n) {
    if (c->parallel.virtual_stages > 1 && (strcmp(c->compression.codec, "none") != 0 || c->parallel.zero_quant_grads)) {
        return bs_reason(why, n, "virtual_stages grad_codec zero_quant_grads",
                         "virtual pipeline stages with compressed gradients (or ZeRO's quantized gradients) are not "
                         "supported yet (the error-feedback residuals are per chunk)");
    }
    return true;
}
