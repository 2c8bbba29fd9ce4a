/* moe_train.c: MoE state of the trainer: skew, bias update, metrics,
 * checkpoints (see moe_train.h). */
#include "train/moe_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "model/model_file.h"
#include "model/moe.h"
#include "train/metrics.h"

#define MOE_CKPT_MAGIC "BSMOEB01"

/* The last step's, for its metrics. */
typedef struct {
    int layers;
    MoeMetrics *metrics; /* per MoE layer: loads, dropped share, its aux and z losses */
    double aux_loss, z_loss; /* what the step added to the objective, summed over layers */
} MoeTrainState;

/* The pipeline group: the ranks holding the other stages' layers. */
static Comm *stages_group(const TrainContext *cx) { return engine_grid(cx->engine)->pp_group; }

/* Sums every stage's part of a whole-model array (zero outside a rank's own layers) over the pipeline group. */
static void sum_over_stages(const TrainContext *cx, double *values, int n) {
    if (comm_size(stages_group(cx)) > 1) comm_allreduce_double(stages_group(cx), values, n);
}

/* --debug-moe-skew F: every MoE layer's router row of expert 0 starts multiplied by F (before any resume). */
static void *create(const TrainContext *cx) {
    const GPTConfig *cfg = cx->model;
    MoeTrainState *st = bs_calloc(1, sizeof *st);
    if (!gpt_is_moe(cfg)) return st;
    st->layers = gpt_moe_layers_before(cfg, cfg->num_layers);
    st->metrics = bs_calloc((size_t)st->layers, sizeof(MoeMetrics));
    for (int c = 0; c < engine_num_chunks(cx->engine); c++) {
        GPT *model = &engine_chunk(cx->engine, c)->model;
        const int first = gpt_first_layer(&model->cfg);
        for (int l = first; l < first + gpt_stage_layers(&model->cfg); l++)
            if (gpt_layer_is_moe(cfg, l) && cx->cfg->debug.moe_skew != 1) {
                float *row = model->params + gpt_tensor_offset(&model->cfg, TK_ROUTER, l); /* expert 0's */
                for (int j = 0; j < cfg->channels; j++) row[j] *= (float)cx->cfg->debug.moe_skew;
            }
    }
    return st;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    MoeTrainState *st = state;
    free(st->metrics);
    free(st);
}

/* This rank's chunks' step: the bias update of their MoE layers; their
 * statistics into all (every layer's, zero elsewhere) and their weighted
 * losses into losses[0..1]. */
static void chunks_end_step(const TrainContext *cx, bool updated, MoeStats *all, double losses[2]) {
    for (int c = 0; c < engine_num_chunks(cx->engine); c++) {
        GPT *model = &engine_chunk(cx->engine, c)->model;
        const MoeConfig moe = gpt_moe_config(&model->cfg);
        const int first = gpt_first_layer(&model->cfg);
        for (int i = 0; i < gpt_stage_layers(&model->cfg); i++) {
            if (!gpt_layer_is_moe(&model->cfg, first + i)) continue;
            all[first + i] = model->moe_step[i];
            if (updated && model->cfg.moe_bias_update > 0)
                moe_bias_update(&moe, model->moe_bias + (size_t)i * moe.experts, &model->moe_step[i],
                                model->cfg.moe_bias_update);
        }
        losses[0] += model->moe_aux;
        losses[1] += model->moe_z;
    }
}

/* After the step's update (a skipped step keeps the bias): the bias update and the step's metrics. */
static void after_update(void *state, const TrainContext *cx, TrainStep *s) {
    MoeTrainState *st = state;
    const bool updated = !s->r->skipped;
    const GPTConfig *cfg = cx->model;
    if (!gpt_is_moe(cfg)) return;
    const int L = cfg->num_layers, n = L * (int)MOE_STATS_DOUBLES + 2;
    double *buf = bs_calloc((size_t)n, sizeof(double)); /* every layer's statistics, then the aux and z losses */
    MoeStats *all = (MoeStats *)buf;
    chunks_end_step(cx, updated, all, buf + n - 2);
    sum_over_stages(cx, buf, n);
    const MoeConfig moe = gpt_moe_config(cfg);
    for (int l = 0, k = 0; l < L; l++)
        if (gpt_layer_is_moe(cfg, l)) st->metrics[k++] = moe_metrics(&moe, &all[l]);
    st->aux_loss = buf[n - 2];
    st->z_loss = buf[n - 1];
    free(buf);
}

static void gather_bias(const TrainContext *cx, float *out) {
    const GPTConfig *cfg = cx->model;
    const size_t E = (size_t)cfg->experts, n = (size_t)cfg->num_layers * E;
    double *all = bs_calloc(n, sizeof(double)); /* floats are exact in doubles, and x + 0 is x */
    for (int c = 0; c < engine_num_chunks(cx->engine); c++) {
        const GPT *model = &engine_chunk(cx->engine, c)->model;
        const size_t first = (size_t)gpt_first_layer(&model->cfg) * E;
        for (size_t i = 0; i < (size_t)gpt_stage_layers(&model->cfg) * E; i++) all[first + i] = model->moe_bias[i];
    }
    sum_over_stages(cx, all, (int)n);
    for (size_t i = 0; i < n; i++) out[i] = (float)all[i];
    free(all);
}

static void bias_path(char *out, size_t n, const char *dir) { snprintf(out, n, "%s/moe_bias.bin", dir); }

void moe_bias_file_write(const char *dir, int layers, int experts, const float *bias) {
    const uint32_t head[2] = {(uint32_t)layers, (uint32_t)experts};
    char path[4200];
    bias_path(path, sizeof path, dir);
    FILE *f = fopen(path, "wb");
    if (!f) bs_die("cannot write %s", path);
    bs_fwrite_all(MOE_CKPT_MAGIC, 8, f, path);
    bs_fwrite_all(head, sizeof head, f, path);
    bs_fwrite_all(bias, (size_t)head[0] * head[1] * sizeof(float), f, path);
    bs_fclose_synced(f, path);
}

float *moe_bias_file_read(const char *dir, int *layers, int *experts) {
    char path[4200];
    bias_path(path, sizeof path, dir);
    if (!bs_path_exists(path)) return NULL;
    size_t len;
    char *data = bs_read_file(path, &len);
    uint32_t head[2] = {0, 0};
    if (len >= 16) memcpy(head, data + 8, sizeof head);
    if (len < 16 || memcmp(data, MOE_CKPT_MAGIC, 8) != 0 || len != 16 + (size_t)head[0] * head[1] * sizeof(float))
        bs_die("%s is damaged (not a batchscale MoE bias file)", path);
    *layers = (int)head[0], *experts = (int)head[1];
    float *bias = bs_malloc(len - 16 + sizeof(float));
    memcpy(bias, data + 16, len - 16);
    free(data);
    return bias;
}

void moe_bias_file_load(const char *dir, GPT *model) {
    int layers = 0, experts = 0;
    float *bias = moe_bias_file_read(dir, &layers, &experts);
    if (!bias || layers != model->cfg.num_layers || experts != model->cfg.experts)
        bs_die("checkpoint %s holds an MoE model without its selection bias for %d experts in %d layers "
               "(moe_bias.bin missing or of another shape)", dir, model->cfg.experts, model->cfg.num_layers);
    memcpy(model->moe_bias, bias, (size_t)layers * experts * sizeof(float));
    free(bias);
}

static void save_files(void *state, const TrainContext *cx, const char *dir) {
    (void)state;
    if (!gpt_is_moe(cx->model)) return;
    const int L = cx->model->num_layers, E = cx->model->experts;
    float *bias = bs_malloc((size_t)L * E * sizeof(float));
    gather_bias(cx, bias); /* every rank: a collective over the pipeline group */
    if (cx->rank == 0) moe_bias_file_write(dir, L, E, bias);
    free(bias);
}

static void resume_files(void *state, const TrainContext *cx, const char *dir) {
    (void)state;
    int layers = 0, experts = 0;
    float *bias = moe_bias_file_read(dir, &layers, &experts);
    const bool moe = gpt_is_moe(cx->model);
    if (!moe && bias)
        bs_die_about("experts resume", "checkpoint %s holds an MoE model (moe_bias.bin): resume with its number of experts",
                     dir);
    if (!moe) return;
    if (!bias)
        bs_die_about("experts resume", "checkpoint %s holds no MoE balancing bias (moe_bias.bin): it was written by a "
                     "dense model, not one of %d experts", dir, cx->model->experts);
    if (layers != cx->model->num_layers || experts != cx->model->experts)
        bs_die_about("experts layers resume", "checkpoint %s holds an MoE model of %d experts in %d layers, not %d experts "
                     "in %d", dir, experts, layers, cx->model->experts, cx->model->num_layers);
    for (int c = 0; c < engine_num_chunks(cx->engine); c++) { /* this rank's layers; dense ones zero */
        GPT *model = &engine_chunk(cx->engine, c)->model;
        const size_t E = (size_t)cx->model->experts;
        memcpy(model->moe_bias, bias + (size_t)gpt_first_layer(&model->cfg) * E,
               (size_t)gpt_stage_layers(&model->cfg) * E * sizeof(float));
    }
    free(bias);
}

/* The selection bias of every stage into a gathered model (sampling, export). Collective. */
static void complete_model(void *state, const TrainContext *cx, GPT *model) {
    (void)state;
    if (model->moe_bias) gather_bias(cx, model->moe_bias);
}

/* Per MoE layer the max/mean load and the dropped share; the step's aux and z losses. */
static void metrics(void *state, const TrainContext *cx, json_t *record) {
    (void)cx;
    const MoeTrainState *st = state;
    if (st->layers == 0) return;
    json_t *load = json_array(), *dropped = json_array();
    for (int l = 0; l < st->layers; l++) {
        const MoeMetrics *x = &st->metrics[l];
        json_array_append_new(load, metrics_number(x->mean_load > 0 ? x->max_load / x->mean_load : 0));
        json_array_append_new(dropped, metrics_number(x->dropped_fraction));
    }
    json_object_set_new(record, "moe_load_max_mean", load);
    json_object_set_new(record, "moe_dropped", dropped);
    json_object_set_new(record, "moe_aux_loss", metrics_number(st->aux_loss));
    json_object_set_new(record, "moe_z_loss", metrics_number(st->z_loss));
}

const Feature moe_feature = {
    .name = "moe", .create = create, .free = destroy, .after_update = after_update, .metrics = metrics,
    .complete_model = complete_model, .save_files = save_files, .resume_files = resume_files,
};

/* A setting an MoE model refuses (or one that needs MoE): the subject keys and the words. */
typedef struct {
    bool on;
    const char *subjects, *what;
} MoeRefusal;

/* The first refusal that is on (none: .on false). */
static MoeRefusal first_on(const MoeRefusal *r, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (r[i].on) return r[i];
    return (MoeRefusal){false, NULL, NULL};
}

/* What an MoE model does not compose with yet: one line each. */
static MoeRefusal moe_refusal(const TrainConfig *c) {
    const MoeRefusal all[] = {
        {c->parallel.pp > 1 && c->parallel.pp_schedule == PIPE_ZBH1, "experts pp_schedule",
         "the zbh1 pipeline schedule (the split backward does not train MoE layers)"},
        {c->parallel.cp > 1 && c->moe.capacity_factor && *c->moe.capacity_factor, "experts cp capacity_factor",
         "context parallelism and a capacity factor (a sequence's capacity decision would span its context-parallel "
         "ranks; dropless routing works)"},
        {c->parallel.zero == 3, "experts zero_stage", "ZeRO stage 3 (use ZeRO stage 0, 1 or 2)"},
        {c->precision.mode != PRECISION_FP32, "experts precision", "bf16 or fp8 precision (MoE layers train in fp32)"},
        {c->lora.rank > 0, "experts lora_rank", "LoRA adapters"},
        {c->guards.balance, "experts balance",
         "the balanced micro-batch order (every replica runs the same micro-steps: the MoE statistics are summed per "
         "micro-step)"},
        {c->diloco.local_steps > 0, "experts local_steps",
         "local steps (DiLoCo workers would share routing statistics every micro-step)"},
        {c->output.save_model && *c->output.save_model && !model_file_is_safetensors_name(c->output.save_model),
         "experts save_model", "saving the model to an llm.c file (it holds a dense GPT-2: give a name ending in "
         ".safetensors)"},
    };
    return first_on(all, sizeof all / sizeof all[0]);
}

/* The MoE settings given to a dense model. */
static MoeRefusal needs_experts(const TrainConfig *c, double factor) {
    const MoeRefusal all[] = {
        {factor > 0, "capacity_factor experts", "a capacity factor"},
        {c->moe.dropless, "dropless experts", "dropless routing"},
        {c->moe.bias_update > 0, "moe_bias_update experts", "a balancing bias update"},
        {c->moe.ep > 1, "ep experts", "expert parallelism"},
        {c->debug.moe_skew != 1, "moe_skew experts", "a routing skew"},
        {c->moe.every != 1, "moe_every experts", "MoE layers at an interval"},
        {c->moe.gates != 0, "moe_gates experts", "MoE gates other than the default"},
        {c->moe.routed_scale != 1, "moe_routed_scale experts", "a routed scale"},
    };
    return first_on(all, sizeof all / sizeof all[0]);
}

bool moe_check_config(const TrainConfig *c, char *why, size_t n) {
    double factor;
    if (!train_capacity_factor(c, &factor, why, n)) return false;
    if (c->moe.experts <= 1) {
        const MoeRefusal given = needs_experts(c, factor);
        return !given.on || bs_reason(why, n, given.subjects, "a dense model (at most 1 expert) cannot use %s: it needs "
                                      "a Mixture-of-Experts model", given.what);
    }
    const MoeRefusal no = moe_refusal(c);
    if (no.on)
        return bs_reason(why, n, no.subjects, "an MoE model of %d experts does not work with %s", c->moe.experts, no.what);
    const int ffn = c->moe.ffn > 0 ? c->moe.ffn : 4 * c->model.channels;
    if (c->moe.every > c->model.layers)
        return bs_reason(why, n, "moe_every layers", "MoE every %d layers is more than the %d layers: no layer would be "
                         "MoE (layer l is when (l + 1) %% %d == 0)", c->moe.every, c->model.layers, c->moe.every);
    if (c->moe.ep > 1 && c->moe.experts % c->moe.ep != 0)
        return bs_reason(why, n, "ep experts", "the expert-parallel degree %d must divide the %d experts (each EP rank "
                         "holds experts / ep of them)", c->moe.ep, c->moe.experts);
    if (c->parallel.tp > 1 && ffn % c->parallel.tp != 0)
        return bs_reason(why, n, "tp moe_ffn", "the tensor-parallel degree %d does not divide the experts' %d hidden "
                         "units (tensor parallelism splits each expert's hidden units)", c->parallel.tp, ffn);
    if (c->moe.top_k > c->moe.experts)
        return bs_reason(why, n, "top_k experts", "the %d experts chosen per token must be at most the %d experts",
                         c->moe.top_k, c->moe.experts);
    if (c->moe.dropless && factor > 0)
        return bs_reason(why, n, "dropless capacity_factor", "dropless routing and the capacity factor %s contradict "
                         "each other (dropless never drops)", c->moe.capacity_factor);
    return true;
}
