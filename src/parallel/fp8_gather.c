/* fp8_gather.c: a layer's ZeRO-3 gather with its weights as E4M3 codes
 * (see fp8_gather.h). A rank's message is its part of the layer, tensor by
 * tensor in flat order: codes (1 byte) for an FP8 weight, fp32 (4 bytes)
 * for the rest; every rank computes every message's layout from the
 * partition. */
#include "parallel/fp8_gather.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/fp8.h"
#include "model/fp8_scaling.h"

enum { LAYER_TENSORS = TK_LAST_LAYER_KIND - TK_FIRST_LAYER_KIND + 1 };

/* One tensor of the layer: its flat range and, for an FP8 weight, its
 * linear (site = FP8_LINEARS_PER_LAYER x local layer + linear), else -1. */
typedef struct {
    Range range;
    int linear;
} LayerTensor;

static int fp8_linear_of(TensorKind k) {
    switch (k) {
    case TK_QKVW: return 0; /* the order of gpt.c's FP8 sites */
    case TK_ATTPROJW: return 1;
    case TK_FCW: return 2;
    case TK_FCPROJW: return 3;
    default: return -1;
    }
}

static void layer_tensors(const GPTConfig *cfg, size_t off, LayerTensor t[LAYER_TENSORS]) {
    const size_t start = gpt_tensor_offset(cfg, TK_FIRST_LAYER_KIND, gpt_first_layer(cfg));
    for (int i = 0; i < LAYER_TENSORS; i++) {
        const TensorKind k = (TensorKind)(TK_FIRST_LAYER_KIND + i);
        t[i].range = range_make(off + gpt_tensor_offset(cfg, k, gpt_first_layer(cfg)) - start, gpt_tensor_numel(cfg, k));
        t[i].linear = fp8_linear_of(k);
    }
}

static size_t message_bytes(const LayerTensor t[LAYER_TENSORS], Range part) {
    size_t bytes = 0;
    for (int i = 0; i < LAYER_TENSORS; i++) bytes += range_intersect(t[i].range, part).count * (t[i].linear >= 0 ? 1 : 4);
    return bytes;
}

/* This rank's message from its part of buf (which holds the layer, its own
 * part filled), whose weights become the values of their codes. */
static void encode_part(GPT *model, const LayerTensor t[LAYER_TENSORS], int site0, float *buf, Range layer,
                        Range part, uint8_t *msg) {
    for (int i = 0; i < LAYER_TENSORS; i++) {
        const Range r = range_intersect(t[i].range, part);
        if (range_empty(r)) continue;
        float *x = buf + range_offset_in(r, layer);
        if (t[i].linear < 0) {
            memcpy(msg, x, r.count * sizeof(float));
            msg += r.count * sizeof(float);
            continue;
        }
        if (model->bf16) bf16_round_floats(x, x, r.count); /* as access_params rounds an fp32 gather */
        const Fp8Operand w = fp8_scaling_operand(model->fp8, site0 + t[i].linear, FP8_WEIGHT);
        const Fp8Quant q = {FP8_E4M3, 0, 0, w.scale};
        fp8_quantize(x, msg, x, 1, r.count, &q, w.stats);
        msg += r.count;
    }
}

static void decode_part(GPT *model, const LayerTensor t[LAYER_TENSORS], int site0, float *buf, Range layer,
                        Range part, const uint8_t *msg) {
    for (int i = 0; i < LAYER_TENSORS; i++) {
        const Range r = range_intersect(t[i].range, part);
        if (range_empty(r)) continue;
        float *x = buf + range_offset_in(r, layer);
        if (t[i].linear < 0) {
            memcpy(x, msg, r.count * sizeof(float));
            msg += r.count * sizeof(float);
            continue;
        }
        const float inv = 1.0f / fp8_scaling_operand(model->fp8, site0 + t[i].linear, FP8_WEIGHT).scale;
        for (size_t j = 0; j < r.count; j++) x[j] = fp8_value(msg[j], FP8_E4M3) * inv; /* kernels/fp8.c's */
        msg += r.count;
    }
}

void fp8_gather_layer(Comm *comm, GPT *model, int block, float *buf, size_t off, size_t count, size_t total,
                      const float *shard_params, Range shard) {
    if (!model->fp8 || block < 1 || block > model->cfg.num_layers)
        bs_die("internal: an FP8 parameter gather of block %d", block);
    const Range layer = range_make(off, count);
    const int ranks = comm_size(comm), me = comm_rank(comm);
    const int site0 = FP8_LINEARS_PER_LAYER * (block - 1 - gpt_first_layer(&model->cfg));
    LayerTensor t[LAYER_TENSORS];
    layer_tensors(&model->cfg, off, t);
    Range *parts = bs_malloc((size_t)ranks * sizeof(Range));
    size_t largest = 0;
    for (int r = 0; r < ranks; r++) {
        comm_partition(comm, total, r, &parts[r].offset, &parts[r].count);
        parts[r] = range_intersect(parts[r], layer);
        const size_t b = message_bytes(t, parts[r]);
        if (b > largest) largest = b;
    }
    const size_t floats = (largest + 3) / 4; /* messages travel as floats: the fp32 gathers' collective, counted */
    float *mine = bs_calloc(floats ? floats : 1, sizeof(float));
    float *all = bs_malloc((floats ? floats : 1) * (size_t)ranks * sizeof(float));
    const Range own = range_intersect(shard, layer);
    if (!range_empty(own))
        memcpy(buf + range_offset_in(own, layer), shard_params + range_offset_in(own, shard), own.count * sizeof(float));
    encode_part(model, t, site0, buf, layer, own, (uint8_t *)mine);
    comm_wait(comm_start_allgather_blocks(comm, mine, floats, all));
    for (int r = 0; r < ranks; r++)
        if (r != me) decode_part(model, t, site0, buf, layer, parts[r], (const uint8_t *)(all + (size_t)r * floats));
    free(parts);
    free(mine);
    free(all);
    fp8_scaling_set_weights_gathered(model->fp8, true);
}
