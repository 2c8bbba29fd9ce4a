/* test_device_adamw.c: the fused AdamW (one DK_ADAMW launch over a table of
 * segments, device/adamw_math.h) bit for bit against what it replaces: one
 * launch per tensor, clipped to the rank's range (gpt_device_adamw before
 * the fusion, transcribed in reference_step). A made-up layout of tensors
 * of many sizes (some smaller than a block, one with untrained padding
 * rows, decaying or not), 10 steps, the whole range and ZeRO ranges that
 * start and end inside tensors, fp32 and with the bf16 copy refreshed:
 * the fused launch reading the step's values from device memory on odd
 * steps (as a CUDA graph's replay does) and its arrays as parts starting
 * at the range's start (ZeRO 2-3's gradient and parameter parts):
 * parameters, both moments and the bf16 copies must be equal bit for bit,
 * the range's trained parameters all moved and every other one untouched.
 * `test_device_adamw sim` runs on the host; `cuda` on a GPU (skipped, exit
 * 77, without one). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device/adamw_table.h"
#include "device_harness.h"
#include "optim/adamw.h"

enum { NP = 10000, STEPS = 10, NT = 8 };

/* offset, first (unused), trained count, decays: tensor 3 trains 900 of its 1000 (padded rows) */
static const AdamWSegment TENSORS[NT] = {{0, 0, 700, 1},     {700, 0, 3, 0},     {703, 0, 256, 1}, {959, 0, 900, 1},
                                         {1959, 0, 5000, 1}, {6959, 0, 40, 0}, {6999, 0, 1, 0},  {7000, 0, 3000, 1}};

typedef struct {
    float *params, *m, *v, *grads;
    uint16_t *bf16; /* NULL: fp32 only */
} Buffers;

typedef struct {
    float p[NP], m[NP], v[NP], g[STEPS][NP];
    uint16_t bf16[NP];
} Start;

static Buffers upload(Harness *h, const Start *st, int bf16) {
    return (Buffers){harness_upload(h, st->p, sizeof st->p), harness_upload(h, st->m, sizeof st->m),
                     harness_upload(h, st->v, sizeof st->v), harness_alloc(h, sizeof st->p),
                     bf16 ? harness_upload(h, st->bf16, sizeof st->bf16) : NULL};
}

static AdamWStep step_of(int t) {
    return (AdamWStep){.lr = 1e-3f * (float)(t + 5) / 15.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                       .weight_decay = 0.1f, .grad_scale = 0.7f, .step = t};
}

static AdamWStepScalars scalars_of(const AdamWStep *s) {
    return (AdamWStepScalars){s->grad_scale, s->lr / (1.0f - powf(s->beta1, (float)s->step)),
                              sqrtf(1.0f - powf(s->beta2, (float)s->step)), 1.0f - s->lr * s->weight_decay};
}

/* shift: params, grads, m and v passed as parts starting there (the same memory: the shifts' arithmetic checked) */
static AdamWArgs args(const Buffers *b, const AdamWStep *s, const AdamWSegment *segs, int nsegs, size_t n, size_t shift,
                      const AdamWStepScalars *step) {
    const AdamWStepScalars stale = {NAN, NAN, NAN, NAN}; /* with step given, the values by value must not be read */
    return (AdamWArgs){b->params + shift, b->m + shift, b->v + shift, b->bf16, b->grads + shift, segs, nsegs, n,
                       (int64_t)shift, (int64_t)shift, (int64_t)shift, s->beta1, s->beta2, s->eps,
                       step ? stale : scalars_of(s), step};
}

static size_t clamp(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The per-tensor launches: each tensor's trained part clipped to [r0, r1), one segment each. Returns the launches. */
static int reference_step(Harness *h, const Buffers *b, const AdamWStep *s, size_t r0, size_t r1) {
    int launches = 0;
    for (int i = 0; i < NT; i++) {
        const size_t o = clamp((size_t)TENSORS[i].offset, r0, r1);
        const size_t end = clamp((size_t)(TENSORS[i].offset + TENSORS[i].count), r0, r1);
        if (end == o) continue;
        const AdamWSegment one = {(int64_t)o, 0, (int64_t)(end - o), TENSORS[i].decays};
        DeviceCall call = {.kernel = DK_ADAMW, .a.adamw = args(b, s, harness_upload(h, &one, sizeof one), 1, end - o, 0, NULL)};
        harness_launch(h, &call);
        launches++;
    }
    return launches;
}

static int same(Harness *h, const void *a, const void *b, size_t bytes) {
    void *x = malloc(bytes), *y = malloc(bytes);
    harness_download(h, x, a, bytes);
    harness_download(h, y, b, bytes);
    const int eq = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return eq;
}

/* Every trained parameter in [r0, r1) moved from its start, every other one kept. Returns the wrong ones. */
static size_t wrongly_touched(Harness *h, const Buffers *b, const Start *st, size_t r0, size_t r1) {
    float *p = malloc(sizeof *p * NP), *m = malloc(sizeof *m * NP);
    harness_download(h, p, b->params, sizeof *p * NP);
    harness_download(h, m, b->m, sizeof *m * NP);
    size_t wrong = 0;
    for (size_t i = 0; i < NP; i++) {
        int trained = 0;
        for (int t = 0; t < NT; t++)
            trained |= i >= (size_t)TENSORS[t].offset && i < (size_t)(TENSORS[t].offset + TENSORS[t].count);
        const int updated = trained && i >= r0 && i < r1;
        wrong += updated != (p[i] != st->p[i] && m[i] != st->m[i]);
    }
    free(p);
    free(m);
    return wrong;
}

static void check_range(Harness *h, const Start *st, size_t r0, size_t r1, int bf16) {
    Buffers ref = upload(h, st, bf16), fused = upload(h, st, bf16);
    AdamWSegment table[NT];
    int nsegs, launches = 0;
    const size_t n = adamw_table_clip(TENSORS, NT, r0, r1, table, &nsegs);
    const AdamWSegment *dev_table = harness_upload(h, table, sizeof table);
    AdamWStepScalars *dev_scalars = harness_alloc(h, sizeof *dev_scalars);
    for (int t = 1; t <= STEPS; t++) {
        const AdamWStep s = step_of(t);
        for (int k = 0; k < 2; k++)
            harness_check(h, device_copy(h->dev, h->stream, k ? fused.grads : ref.grads, st->g[t - 1], sizeof st->g[0],
                                         COPY_HOST_TO_DEVICE), "grads");
        launches = reference_step(h, &ref, &s, r0, r1);
        const AdamWStepScalars values = scalars_of(&s); /* odd steps read them from device memory, as a graph does */
        harness_check(h, device_copy(h->dev, h->stream, dev_scalars, &values, sizeof values, COPY_HOST_TO_DEVICE), "scalars");
        harness_check(h, device_stream_sync(h->dev, h->stream), "sync");
        DeviceCall call = {.kernel = DK_ADAMW, .a.adamw = args(&fused, &s, dev_table, nsegs, n, r0, t % 2 ? dev_scalars : NULL)};
        if (n > 0) harness_launch(h, &call); /* a range of padding rows only: nothing to launch */
    }
    const int p = same(h, ref.params, fused.params, sizeof st->p), m = same(h, ref.m, fused.m, sizeof st->m);
    const int v = same(h, ref.v, fused.v, sizeof st->v), b = !bf16 || same(h, ref.bf16, fused.bf16, sizeof st->bf16);
    const size_t wrong = wrongly_touched(h, &fused, st, r0, r1);
    printf("range [%5zu, %5zu) %s: %d launches -> %d (%d segments, %5zu parameters); params %s, m %s, v %s, bf16 %s; "
           "%zu wrongly touched\n", r0, r1, bf16 ? "bf16" : "fp32", launches, n > 0, nsegs, n, p ? "equal" : "DIFFER",
           m ? "equal" : "DIFFER", v ? "equal" : "DIFFER", b ? "equal" : "DIFFER", wrong);
    CHECK(p && m && v && b && wrong == 0, "fused AdamW on [%zu, %zu) differs from the per-tensor launches", r0, r1);
}

int main(int argc, char **argv) {
    Harness h = harness_open(argc, argv, 11);
    printf("device %s\n", device_name(h.dev));
    Rng rng;
    rng_seed(&rng, 45);
    Start *st = malloc(sizeof *st);
    for (size_t i = 0; i < NP; i++) {
        st->p[i] = 2 * rng_uniform(&rng) - 1;
        st->m[i] = 0.1f * (2 * rng_uniform(&rng) - 1);
        st->v[i] = 0.01f * rng_uniform(&rng) * rng_uniform(&rng); /* a second moment is >= 0 */
        st->bf16[i] = (uint16_t)(i * 7919u);
        for (int t = 0; t < STEPS; t++) st->g[t][i] = 2 * rng_uniform(&rng) - 1;
    }
    /* the whole layout; ZeRO 1 over 4 ranks (2500 each: cuts tensors 4 and 7); a range from inside tensor 0 to inside 5 */
    const size_t ranges[][2] = {{0, NP}, {0, 2500}, {2500, 5000}, {5000, 7500}, {7500, NP}, {350, 6980}, {1900, 1959}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (int bf16 = 0; bf16 < 2; bf16++) check_range(&h, st, ranges[r][0], ranges[r][1], bf16);
    free(st);
    harness_close(&h);
    printf("%s\n", failures ? "FAILED" : "fused AdamW equals the per-tensor launches bit for bit");
    return failures != 0;
}
