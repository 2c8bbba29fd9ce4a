/* fp8_ckpt.c: delayed-scaling state per layer in checkpoints (see fp8_ckpt.h). */
#include "train/fp8_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"

#define FP8_CKPT_MAGIC "BSFP8S01"

static void layer_path(char *out, size_t n, const char *dir, int layer) {
    snprintf(out, n, "%s/fp8_layer_%05d.bin", dir, layer);
}

static bool delayed(const TrainContext *cx) {
    return cx->cfg->precision.mode == PRECISION_FP8 && cx->cfg->precision.fp8_recipe == FP8_RECIPE_DELAYED;
}

void fp8_ckpt_save(const TrainContext *cx, const char *dir) {
    const Grid *g = engine_grid(cx->engine);
    if (!delayed(cx) || g->tp_index != 0 || comm_rank(g->dp_group) != 0) return;
    Engine *e = cx->engine;
    for (int c = 0; c < engine_num_chunks(e); c++) {
        const GPT *model = &engine_chunk(e, c)->model;
        const size_t per_site = fp8_scaling_site_floats(model->fp8);
        const uint32_t head[2] = {(uint32_t)fp8_scaling_options(model->fp8)->history,
                                  (uint32_t)(FP8_LINEARS_PER_LAYER * per_site)};
        float *buf = bs_malloc(head[1] * sizeof(float));
        for (int i = 0; i < gpt_stage_layers(&model->cfg); i++) {
            for (int l = 0; l < FP8_LINEARS_PER_LAYER; l++)
                fp8_scaling_save_site(model->fp8, FP8_LINEARS_PER_LAYER * i + l, buf + (size_t)l * per_site);
            char path[4200];
            layer_path(path, sizeof path, dir, gpt_first_layer(&model->cfg) + i);
            FILE *f = fopen(path, "wb");
            if (!f) bs_die("cannot write %s", path);
            bs_fwrite_all(FP8_CKPT_MAGIC, 8, f, path);
            bs_fwrite_all(head, sizeof head, f, path);
            bs_fwrite_all(buf, head[1] * sizeof(float), f, path);
            bs_fclose_synced(f, path);
        }
        free(buf);
    }
}

/* One layer's state from its file: false (with why) if it is missing or for another history length. */
static bool read_layer(GPT *model, int local, const char *dir, char *why, size_t n) {
    const size_t per_site = fp8_scaling_site_floats(model->fp8);
    const int layer = gpt_first_layer(&model->cfg) + local;
    char path[4200];
    layer_path(path, sizeof path, dir, layer);
    size_t len;
    char *data = bs_path_exists(path) ? bs_read_file(path, &len) : NULL;
    if (!data) {
        snprintf(why, n, "the checkpoint has no fp8 scales for layer %d (written in another precision or recipe)",
                 layer);
        return false;
    }
    uint32_t head[2] = {0, 0};
    if (len >= 16) memcpy(head, data + 8, sizeof head);
    const bool ok = len >= 16 && memcmp(data, FP8_CKPT_MAGIC, 8) == 0 && head[1] == FP8_LINEARS_PER_LAYER * per_site &&
                    len == 16 + head[1] * sizeof(float);
    if (!ok && head[0] != (uint32_t)fp8_scaling_options(model->fp8)->history && len >= 16) {
        bs_reason(why, n, "fp8_amax_history", "%.400s holds an amax history of %u steps, not %d", path, head[0],
                  fp8_scaling_options(model->fp8)->history);
        free(data);
        return false;
    }
    if (!ok) bs_die("%s is damaged (not a batchscale fp8 scaling file of this shape)", path);
    const float *f = (const float *)(data + 16);
    for (int l = 0; l < FP8_LINEARS_PER_LAYER; l++)
        fp8_scaling_load_site(model->fp8, FP8_LINEARS_PER_LAYER * local + l, f + (size_t)l * per_site);
    free(data);
    return true;
}

void fp8_ckpt_resume(const TrainContext *cx, const char *dir) {
    if (!delayed(cx)) return;
    char why[600] = "";
    double missing = 0;
    Engine *e = cx->engine;
    for (int c = 0; c < engine_num_chunks(e); c++) {
        GPT *model = &engine_chunk(e, c)->model;
        for (int i = 0; i < gpt_stage_layers(&model->cfg); i++)
            if (!read_layer(model, i, dir, why, sizeof why)) missing = 1;
    }
    /* all ranks restore, or none: a layer restored beside a fresh one would be a mixture of runs */
    comm_allreduce_max_double(cx->world, &missing, 1);
    if (missing == 0) return;
    for (int c = 0; c < engine_num_chunks(e); c++) {
        GPT *model = &engine_chunk(e, c)->model;
        Fp8State *fresh = fp8_scaling_create(fp8_scaling_options(model->fp8), fp8_scaling_sites(model->fp8));
        fp8_scaling_free(model->fp8);
        model->fp8 = fresh;
    }
    if (cx->rank == 0)
        bs_warn("fp8 scales start fresh (1, empty amax histories): %s",
                why[0] ? why : "another rank's layers have none");
}
