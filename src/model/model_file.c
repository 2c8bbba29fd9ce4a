/* model_file.c: the two model-file formats behind one door (see model_file.h). */
#include "model/model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/reason.h"
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
    char buf[4200];
    const char *file = resolve(path, buf, sizeof buf);
    if (model_file_is_safetensors_name(file) || safetensors_is_file(file)) safetensors_read_params(file, model);
    else if (gpt_is_moe(&model->cfg))
        bs_die_about("experts", "%s is an llm.c model file: it holds a dense GPT-2, not %d experts", path,
                     model->cfg.experts);
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
    if (model_file_is_safetensors_name(path)) safetensors_write(path, model); /* MoE too (safetensors_moe.h) */
    else llmc_model_write(path, model);
}

uint64_t model_file_hash(const char *path) {
    char buf[4200];
    const char *file = resolve(path, buf, sizeof buf);
    FILE *f = fopen(file, "rb");
    if (!f) bs_die("cannot read %s to identify the base model", file);
    XXH64_state_t *state = XXH64_createState();
    XXH64_reset(state, 0);
    enum { PIECE = 1 << 20 };
    char *piece = bs_malloc(PIECE);
    size_t got;
    while ((got = fread(piece, 1, PIECE, f)) > 0) XXH64_update(state, piece, got);
    const bool failed = ferror(f) != 0;
    fclose(f);
    free(piece);
    const uint64_t hash = XXH64_digest(state);
    XXH64_freeState(state);
    if (failed) bs_die("cannot read %s to identify the base model", file);
    return hash;
}

uint64_t model_seeded_hash(const GPTConfig *cfg, uint64_t seed) {
    const int64_t fields[] = {(int64_t)seed, cfg->num_layers, cfg->num_heads, cfg->channels, cfg->vocab_size,
                              cfg->max_seq_len, cfg->experts, cfg->moe_top_k, cfg->moe_ffn, cfg->moe_every};
    return XXH64(fields, sizeof fields, 0);
}
