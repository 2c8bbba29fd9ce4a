/* frozen_load.c: LoRA's frozen base streamed into its format (see frozen_load.h). */
#include "model/frozen_load.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/range.h"
#include "model/model_file.h"

/* Where the base's values come from. */
typedef struct {
    const GPTConfig *local;   /* the shard's base part */
    const GPTConfig *logical; /* the whole model's base part */
    ShardRun *runs;           /* local -> logical */
    int num_runs;
    ModelReader *file;        /* read range by range */
    uint64_t seed;            /* no file: seeded */
} Source;

/* Segment seg of the local base (one tensor) into dst. */
static void fill(const Source *s, ParamSegment seg, float *dst) {
    if (!s->file) {
        gpt_init_range(s->local, s->seed, dst, seg.offset, seg.count);
        return;
    }
    const Range wanted = range_make(seg.offset, seg.count);
    const size_t tensor_start = gpt_tensor_offset(s->logical, seg.kind, seg.layer);
    for (int i = 0; i < s->num_runs; i++) {
        const Range run = range_make(s->runs[i].local, s->runs[i].count), part = range_intersect(run, wanted);
        if (range_empty(part)) continue;
        const size_t logical = s->runs[i].logical + range_offset_in(part, run);
        float *to = dst + range_offset_in(part, wanted);
        model_file_read_range(s->file, seg.kind, seg.layer, logical - tensor_start, part.count, to);
    }
}

/* Which of frozen_linear's matrices kind is (-1: none). */
static int linear_index(TensorKind kind) {
    static const TensorKind LINEAR[FROZEN_LINEARS] = {TK_QKVW, TK_ATTPROJW, TK_FCW, TK_FCPROJW};
    for (int m = 0; m < FROZEN_LINEARS; m++)
        if (LINEAR[m] == kind) return m;
    return -1;
}

/* wte kept in bf16: its segment a block of rows at a time through scratch (no fp32 copy). */
static void fill_embedding(const Source *s, ParamSegment seg, FrozenEmbedding *wte, float *scratch) {
    const size_t C = (size_t)wte->C;
    for (size_t r0 = 0; r0 < wte->rows; r0 += FROZEN_HEAD_BLOCK) {
        const size_t n = wte->rows - r0 < FROZEN_HEAD_BLOCK ? wte->rows - r0 : FROZEN_HEAD_BLOCK;
        fill(s, (ParamSegment){seg.offset + r0 * C, n * C, seg.kind, seg.layer}, scratch);
        frozen_embedding_store(wte, r0, n, scratch);
    }
}

/* A linear weight kept reduced: its segment a block of FROZEN_LINEAR_BLOCK rows at a time through scratch. */
static void fill_linear(const Source *s, ParamSegment seg, FrozenLinear *f, int layer, int which, float *scratch) {
    const size_t rows = f->rows[which], cols = f->cols[which];
    for (size_t r0 = 0; r0 < rows; r0 += FROZEN_LINEAR_BLOCK) {
        const size_t n = rows - r0 < FROZEN_LINEAR_BLOCK ? rows - r0 : FROZEN_LINEAR_BLOCK;
        fill(s, (ParamSegment){seg.offset + r0 * cols, n * cols, seg.kind, seg.layer}, scratch);
        frozen_linear_store_rows(f, layer, which, r0, n, scratch);
    }
}

void gpt_load_frozen_base(GPT *model, const char *path, uint64_t seed) {
    const GPTConfig base = gpt_part_config(&model->cfg, GPT_PART_BASE), kept = gpt_frozen_config(&model->cfg);
    const GPTConfig whole = gpt_logical_config(&model->cfg), logical = gpt_part_config(&whole, GPT_PART_BASE);
    Source s = {.local = &base, .logical = &logical, .seed = seed};
    s.runs = gpt_shard_runs_alloc(&base, &s.num_runs);
    s.file = path ? model_file_open(path, &logical) : NULL;
    const int cap = gpt_max_segments(&base);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    const int n = gpt_param_segments(&base, segs, cap);
    for (int i = 0; i < n; i++) {
        if (segs[i].kind == TK_WTE && model->frozen_wte) {
            fill_embedding(&s, segs[i], model->frozen_wte, model->linear_scratch);
            continue;
        }
        const int which = model->frozen_linear ? linear_index(segs[i].kind) : -1;
        if (which >= 0)
            fill_linear(&s, segs[i], model->frozen_linear, segs[i].layer - gpt_first_layer(&base), which,
                        model->linear_scratch);
        else
            fill(&s, segs[i], model->frozen + gpt_tensor_offset(&kept, segs[i].kind, segs[i].layer));
    }
    free(segs);
    free(s.runs);
    model_file_close(s.file);
}
