/* model_file.c: the two model-file formats behind one door (see model_file.h). */
#include "model/model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "model/llmc_file.h"
#include "model/safetensors_file.h"

bool model_file_is_safetensors_name(const char *path) {
    size_t n = strlen(path), k = strlen(".safetensors");
    return n >= k && strcmp(path + n - k, ".safetensors") == 0;
}

/* A directory stands for its model.safetensors. */
static const char *resolve(const char *path, char *buf, size_t n) {
    if (!bs_is_dir(path)) return path;
    snprintf(buf, n, "%s/model.safetensors", path);
    return buf;
}

void model_file_read_config(const char *path, GPTConfig *cfg) {
    char buf[4200];
    const char *file = resolve(path, buf, sizeof buf);
    if (model_file_is_safetensors_name(file) || safetensors_is_file(file)) safetensors_read_config(file, cfg);
    else llmc_model_read_config(file, cfg);
}

void model_file_read_params(const char *path, GPT *model) {
    if (gpt_is_moe(&model->cfg)) bs_die("%s: an MoE model cannot start from a model file (they hold dense GPT-2 models)", path);
    char buf[4200];
    const char *file = resolve(path, buf, sizeof buf);
    if (model_file_is_safetensors_name(file) || safetensors_is_file(file)) safetensors_read_params(file, model);
    else llmc_model_read_params(file, model);
}

struct ModelReader {
    LlmcReader *llmc;
    SafetensorsReader *st;
};

ModelReader *model_file_open(const char *path, const GPTConfig *cfg) {
    if (gpt_is_moe(cfg)) bs_die("%s: an MoE model cannot start from a model file (they hold dense GPT-2 models)", path);
    char buf[4200];
    const char *file = resolve(path, buf, sizeof buf);
    ModelReader *r = bs_calloc(1, sizeof *r);
    if (model_file_is_safetensors_name(file) || safetensors_is_file(file)) r->st = safetensors_reader_open(file, cfg);
    else r->llmc = llmc_reader_open(file, cfg);
    return r;
}

void model_file_read_range(ModelReader *r, TensorKind kind, int layer, size_t within, size_t count, float *dst) {
    if (r->st) safetensors_reader_read(r->st, kind, layer, within, count, dst);
    else llmc_reader_read(r->llmc, kind, layer, within, count, dst);
}

void model_file_close(ModelReader *r) {
    if (!r) return;
    llmc_reader_close(r->llmc);
    safetensors_reader_close(r->st);
    free(r);
}

void model_file_write(const char *path, const GPT *model) {
    if (gpt_is_moe(&model->cfg)) bs_die("%s: an MoE model is kept in checkpoints only (model files hold dense GPT-2 models)", path);
    if (model_file_is_safetensors_name(path)) safetensors_write(path, model);
    else llmc_model_write(path, model);
}
