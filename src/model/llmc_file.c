/* llmc_file.c: llm.c model files (see llmc_file.h). */
#include "model/llmc_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "kernels/vecmath.h"

static void read_header(const char *path, FILE *f, int32_t header[256]) {
    long long size = bs_file_size(path);
    if (size < 1024) bs_die("%s is not an llm.c model file: %lld bytes, shorter than its header", path, size);
    bs_fread_exact(header, 256 * sizeof(int32_t), f, path);
    if (header[0] != LLMC_MODEL_MAGIC)
        bs_die("%s is not an llm.c model file: wrong magic %d (expected %d)", path, header[0], LLMC_MODEL_MAGIC);
    if (header[1] != LLMC_MODEL_VERSION_FP32)
        bs_die("%s has llm.c model version %d; only version 3 (fp32) is read", path, header[1]);
}

static void config_from_header(const char *path, const int32_t *h, GPTConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    char why[256];
    if (!gpt_config_check(cfg, why, sizeof why)) bs_die("%s has an invalid model shape: %s", path, why);
    if (h[7] < h[3]) bs_die("%s is corrupt: padded vocabulary %d < vocabulary %d", path, h[7], h[3]);
}

void llmc_model_read_config(const char *path, GPTConfig *cfg) {
    FILE *f = bs_fopen(path, "rb");
    int32_t header[256];
    read_header(path, f, header);
    fclose(f);
    config_from_header(path, header, cfg);
}

/* One pass over a tensor just read: a NaN or an infinity is refused, naming the file and the tensor. */
static void check_finite(const char *path, TensorKind kind, int layer, const float *x, size_t n) {
    size_t bad = floats_first_nonfinite(x, n);
    if (bad == n) return;
    char where[32] = "";
    if (gpt_tensor_is_per_layer(kind)) snprintf(where, sizeof where, " of layer %d", layer);
    bs_die("%s: tensor %s%s holds %s at element %zu (the file's weights are damaged)", path, gpt_tensor_name(kind),
           where, isnan(x[bad]) ? "a NaN" : "an infinity", bad);
}

/* Rows of wte as stored in the file (llm.c pads to its own multiple). */
static size_t file_tensor_numel(const GPTConfig *cfg, int file_vp, TensorKind k) {
    if (k == TK_WTE) return (size_t)file_vp * cfg->channels;
    return gpt_tensor_numel(cfg, k);
}

/* Opens path for cfg's whole model: the header's shape must be cfg's and the size its tensors'; *file_vp gets the
 * file's padded vocabulary. */
static FILE *open_checked(const char *path, const GPTConfig *cfg, int *file_vp) {
    FILE *f = bs_fopen(path, "rb");
    int32_t header[256];
    read_header(path, f, header);
    GPTConfig file_cfg;
    config_from_header(path, header, &file_cfg);
    if (file_cfg.max_seq_len != cfg->max_seq_len || file_cfg.vocab_size != cfg->vocab_size ||
        file_cfg.num_layers != cfg->num_layers || file_cfg.num_heads != cfg->num_heads ||
        file_cfg.channels != cfg->channels)
        bs_die("%s holds a model of shape L=%d H=%d C=%d T=%d V=%d, not the requested L=%d H=%d C=%d T=%d V=%d", path,
               file_cfg.num_layers, file_cfg.num_heads, file_cfg.channels, file_cfg.max_seq_len, file_cfg.vocab_size,
               cfg->num_layers, cfg->num_heads, cfg->channels, cfg->max_seq_len, cfg->vocab_size);
    *file_vp = header[7];
    size_t expected = 1024;
    for (int k = 0; k < TK_BASE_COUNT; k++) {
        size_t layers = gpt_tensor_is_per_layer((TensorKind)k) ? (size_t)cfg->num_layers : 1;
        expected += layers * file_tensor_numel(cfg, *file_vp, (TensorKind)k) * sizeof(float);
    }
    if ((size_t)bs_file_size(path) != expected)
        bs_die("%s is truncated or corrupt: expected %zu bytes for its header's shape, found %lld", path, expected,
               bs_file_size(path));
    return f;
}

void llmc_model_read_params(const char *path, GPT *model) {
    const GPTConfig *cfg = &model->cfg;
    int file_vp;
    FILE *f = open_checked(path, cfg, &file_vp);
    memset(model->params, 0, model->num_params * sizeof(float));
    for (int k = 0; k < TK_BASE_COUNT; k++) {
        TensorKind kind = (TensorKind)k;
        int layers = gpt_tensor_is_per_layer(kind) ? cfg->num_layers : 1;
        for (int l = 0; l < layers; l++) {
            float *dst = model->params + gpt_tensor_offset(cfg, kind, l);
            size_t n = file_tensor_numel(cfg, file_vp, kind);
            if (kind == TK_WTE) {
                size_t keep = (size_t)cfg->vocab_size * cfg->channels; /* padded rows stay 0 */
                bs_fread_exact(dst, keep * sizeof(float), f, path);
                if (fseek(f, (long)((n - keep) * sizeof(float)), SEEK_CUR) != 0) bs_die("seek failed in %s", path);
            } else {
                bs_fread_exact(dst, n * sizeof(float), f, path);
            }
            check_finite(path, kind, l, dst, gpt_tensor_numel(cfg, kind));
        }
    }
    fclose(f);
}

struct LlmcReader {
    FILE *file;
    char path[4096];
    GPTConfig cfg;
    int file_vp;
};

LlmcReader *llmc_reader_open(const char *path, const GPTConfig *cfg) {
    LlmcReader *r = bs_calloc(1, sizeof *r);
    r->cfg = gpt_logical_config(cfg);
    r->cfg.part = GPT_PART_ALL;
    r->file = open_checked(path, &r->cfg, &r->file_vp);
    snprintf(r->path, sizeof r->path, "%s", path);
    return r;
}

void llmc_reader_read(LlmcReader *r, TensorKind kind, int layer, size_t within, size_t count, float *dst) {
    const GPTConfig *cfg = &r->cfg;
    size_t at = 256; /* in floats from the file's start: the header is 256 int32 */
    for (int k = 0; k < (int)kind; k++)
        at += (gpt_tensor_is_per_layer((TensorKind)k) ? (size_t)cfg->num_layers : 1) *
              file_tensor_numel(cfg, r->file_vp, (TensorKind)k);
    at += (size_t)layer * file_tensor_numel(cfg, r->file_vp, kind) + within;
    size_t stored = count; /* wte's rows beyond the vocabulary are padding: 0 */
    if (kind == TK_WTE) {
        const size_t keep = (size_t)cfg->vocab_size * cfg->channels;
        stored = within >= keep ? 0 : within + count > keep ? keep - within : count;
        memset(dst + stored, 0, (count - stored) * sizeof(float));
    }
    if (stored == 0) return;
    if (fseek(r->file, (long)(at * sizeof(float)), SEEK_SET) != 0) bs_die("seek failed in %s", r->path);
    bs_fread_exact(dst, stored * sizeof(float), r->file, r->path);
    check_finite(r->path, kind, layer, dst, stored);
}

void llmc_reader_close(LlmcReader *r) {
    if (!r) return;
    fclose(r->file);
    free(r);
}

void llmc_model_write(const char *path, const GPT *model) {
    const GPTConfig *cfg = &model->cfg;
    if (gpt_is_moe(cfg))
        bs_die("%s: an llm.c model file holds a dense GPT-2 and cannot hold the %d experts and routers of this MoE "
               "model (write safetensors instead)", path, cfg->experts);
    int32_t header[256] = {0};
    header[0] = LLMC_MODEL_MAGIC;
    header[1] = LLMC_MODEL_VERSION_FP32;
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->channels;
    header[7] = cfg->padded_vocab_size;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = bs_fopen(tmp, "wb");
    bs_fwrite_all(header, sizeof header, f, tmp);
    for (int k = 0; k < TK_BASE_COUNT; k++) {
        TensorKind kind = (TensorKind)k;
        int layers = gpt_tensor_is_per_layer(kind) ? cfg->num_layers : 1;
        for (int l = 0; l < layers; l++)
            bs_fwrite_all(model->params + gpt_tensor_offset(cfg, kind, l), gpt_tensor_numel(cfg, kind) * sizeof(float),
                          f, tmp);
    }
    bs_fclose_synced(f, tmp);
    if (rename(tmp, path) != 0) bs_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}
