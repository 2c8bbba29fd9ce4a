/* moe_train.c: MoE state of the trainer: skew, bias update, metrics,
 * checkpoints (see moe_train.h). */
#include "train/moe_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

#define MOE_CKPT_MAGIC "BSMOEB01"

/* The one chunk of an MoE run (no pipeline: the refusals of train_config.c). */
static GPT *moe_model(Trainer *tr) { return &engine_chunk(tr->engine, 0)->model; }

void moe_train_setup(Trainer *tr) {
    const GPTConfig *cfg = &tr->model;
    if (!gpt_is_moe(cfg)) return;
    tr->moe.layers = cfg->num_layers;
    tr->moe.metrics = bs_calloc((size_t)cfg->num_layers, sizeof(MoeMetrics));
    for (int l = 0; l < cfg->num_layers; l++) moe_model(tr)->moe_bias[(size_t)l * cfg->experts] = (float)tr->cfg.moe_skew;
}

void moe_train_end_step(Trainer *tr, bool updated) {
    if (!gpt_is_moe(&tr->model)) return;
    GPT *model = moe_model(tr);
    const MoeConfig moe = gpt_moe_config(&model->cfg);
    for (int l = 0; l < tr->moe.layers; l++) {
        tr->moe.metrics[l] = moe_metrics(&moe, &model->moe_step[l]);
        if (updated && model->cfg.moe_bias_update > 0)
            moe_bias_update(&moe, model->moe_bias + (size_t)l * moe.experts, &model->moe_step[l],
                            model->cfg.moe_bias_update);
    }
    tr->moe.aux_loss = model->moe_aux;
    tr->moe.z_loss = model->moe_z;
}

static void bias_path(char *out, size_t n, const char *dir) { snprintf(out, n, "%s/moe_bias.bin", dir); }

void moe_ckpt_save(const Trainer *tr, const char *dir) {
    if (!gpt_is_moe(&tr->model) || tr->rank != 0) return;
    const GPT *model = &engine_chunk(tr->engine, 0)->model;
    const uint32_t head[2] = {(uint32_t)model->cfg.num_layers, (uint32_t)model->cfg.experts};
    char path[4200];
    bias_path(path, sizeof path, dir);
    FILE *f = fopen(path, "wb");
    if (!f) bs_die("cannot write %s", path);
    bs_fwrite_all(MOE_CKPT_MAGIC, 8, f, path);
    bs_fwrite_all(head, sizeof head, f, path);
    bs_fwrite_all(model->moe_bias, (size_t)head[0] * head[1] * sizeof(float), f, path);
    bs_fclose_synced(f, path);
}

void moe_ckpt_resume(Trainer *tr, const char *dir) {
    char path[4200];
    bias_path(path, sizeof path, dir);
    const bool moe = gpt_is_moe(&tr->model), has = bs_path_exists(path);
    if (!moe && has) bs_die("checkpoint %s holds an MoE model (%s): resume with its --experts", dir, path);
    if (!moe) return;
    if (!has) bs_die("checkpoint %s holds no MoE balancing bias (moe_bias.bin): it was written by a dense model, "
                     "not --experts %d", dir, tr->model.experts);
    size_t len;
    char *data = bs_read_file(path, &len);
    uint32_t head[2] = {0, 0};
    if (len >= 16) memcpy(head, data + 8, sizeof head);
    if (len < 16 || memcmp(data, MOE_CKPT_MAGIC, 8) != 0 || len != 16 + (size_t)head[0] * head[1] * sizeof(float))
        bs_die("%s is damaged (not a batchscale MoE bias file)", path);
    if ((int)head[0] != tr->model.num_layers || (int)head[1] != tr->model.experts)
        bs_die("checkpoint %s holds an MoE model of %u experts in %u layers, not --experts %d in %d", dir, head[1],
               head[0], tr->model.experts, tr->model.num_layers);
    memcpy(moe_model(tr)->moe_bias, data + 16, (size_t)head[0] * head[1] * sizeof(float));
    free(data);
}
