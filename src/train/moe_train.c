/* moe_train.c: MoE state of the trainer: skew, bias update, metrics,
 * checkpoints (see moe_train.h). */
#include "train/moe_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

#define MOE_CKPT_MAGIC "BSMOEB01"

/* The pipeline group: the ranks holding the other stages' layers. */
static Comm *stages_group(const Trainer *tr) { return engine_grid(tr->engine)->pp_group; }

/* Sums every stage's part of a whole-model array (zero outside a rank's own layers) over the pipeline group. */
static void sum_over_stages(const Trainer *tr, double *values, int n) {
    if (comm_size(stages_group(tr)) > 1) comm_allreduce_double(stages_group(tr), values, n);
}

void moe_train_setup(Trainer *tr) {
    const GPTConfig *cfg = &tr->model;
    if (!gpt_is_moe(cfg)) return;
    tr->moe.layers = gpt_moe_layers_before(cfg, cfg->num_layers);
    tr->moe.metrics = bs_calloc((size_t)tr->moe.layers, sizeof(MoeMetrics));
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) {
        GPT *model = &engine_chunk(tr->engine, c)->model;
        const int first = gpt_first_layer(&model->cfg);
        for (int l = first; l < first + gpt_stage_layers(&model->cfg); l++)
            if (gpt_layer_is_moe(cfg, l) && tr->cfg.debug.moe_skew != 1) {
                float *row = model->params + gpt_tensor_offset(&model->cfg, TK_ROUTER, l); /* expert 0's */
                for (int j = 0; j < cfg->channels; j++) row[j] *= (float)tr->cfg.debug.moe_skew;
            }
    }
}

/* This rank's chunks' step: the bias update of their MoE layers; their
 * statistics into all (every layer's, zero elsewhere) and their weighted
 * losses into losses[0..1]. */
static void chunks_end_step(Trainer *tr, bool updated, MoeStats *all, double losses[2]) {
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) {
        GPT *model = &engine_chunk(tr->engine, c)->model;
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

void moe_train_end_step(Trainer *tr, bool updated) {
    const GPTConfig *cfg = &tr->model;
    if (!gpt_is_moe(cfg)) return;
    const int L = cfg->num_layers, n = L * (int)MOE_STATS_DOUBLES + 2;
    double *buf = bs_calloc((size_t)n, sizeof(double)); /* every layer's statistics, then the aux and z losses */
    MoeStats *all = (MoeStats *)buf;
    chunks_end_step(tr, updated, all, buf + n - 2);
    sum_over_stages(tr, buf, n);
    const MoeConfig moe = gpt_moe_config(cfg);
    for (int l = 0, k = 0; l < L; l++)
        if (gpt_layer_is_moe(cfg, l)) tr->moe.metrics[k++] = moe_metrics(&moe, &all[l]);
    tr->moe.aux_loss = buf[n - 2];
    tr->moe.z_loss = buf[n - 1];
    free(buf);
}

void moe_gather_bias(const Trainer *tr, float *out) {
    const GPTConfig *cfg = &tr->model;
    const size_t E = (size_t)cfg->experts, n = (size_t)cfg->num_layers * E;
    double *all = bs_calloc(n, sizeof(double)); /* floats are exact in doubles, and x + 0 is x */
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) {
        const GPT *model = &engine_chunk(tr->engine, c)->model;
        const size_t first = (size_t)gpt_first_layer(&model->cfg) * E;
        for (size_t i = 0; i < (size_t)gpt_stage_layers(&model->cfg) * E; i++) all[first + i] = model->moe_bias[i];
    }
    sum_over_stages(tr, all, (int)n);
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

void moe_ckpt_save(const Trainer *tr, const char *dir) {
    if (!gpt_is_moe(&tr->model)) return;
    const int L = tr->model.num_layers, E = tr->model.experts;
    float *bias = bs_malloc((size_t)L * E * sizeof(float));
    moe_gather_bias(tr, bias); /* every rank: a collective over the pipeline group */
    if (tr->rank == 0) moe_bias_file_write(dir, L, E, bias);
    free(bias);
}

void moe_ckpt_resume(Trainer *tr, const char *dir) {
    int layers = 0, experts = 0;
    float *bias = moe_bias_file_read(dir, &layers, &experts);
    const bool moe = gpt_is_moe(&tr->model);
    if (!moe && bias) bs_die("checkpoint %s holds an MoE model (moe_bias.bin): resume with its --experts", dir);
    if (!moe) return;
    if (!bias) bs_die("checkpoint %s holds no MoE balancing bias (moe_bias.bin): it was written by a dense model, "
                      "not --experts %d", dir, tr->model.experts);
    if (layers != tr->model.num_layers || experts != tr->model.experts)
        bs_die("checkpoint %s holds an MoE model of %d experts in %d layers, not --experts %d in %d", dir, experts,
               layers, tr->model.experts, tr->model.num_layers);
    for (int c = 0; c < engine_num_chunks(tr->engine); c++) { /* this rank's layers; dense ones zero */
        GPT *model = &engine_chunk(tr->engine, c)->model;
        const size_t E = (size_t)tr->model.experts;
        memcpy(model->moe_bias, bias + (size_t)gpt_first_layer(&model->cfg) * E,
               (size_t)gpt_stage_layers(&model->cfg) * E * sizeof(float));
    }
    free(bias);
}
