/* test_backward_split.c: the split backward (gpt_backward_input, B, then
 * gpt_backward_weight, W) against the fused gpt_backward, bit for bit.
 *
 * Two models with the same parameters, the same nonzero starting gradients
 * and the same micro-batches: one runs forward and fused backward per
 * micro-batch, the other forwards every micro-batch on its own activation
 * set (sets after the first share the first's backward scratch, as the
 * pipeline's do), then B of each in order, then W of each in order (the
 * deferred order of ZB-H1's cool-down: B(m0) B(m1) W(m0) W(m1)). Asserted,
 * every element by its bits:
 *   - the gradients (and the last stage's head_dwte) equal the fused ones;
 *   - each B's gpt_stage_grad equals the fused backward's (a stage without
 *     the head gets its output gradient from the test, as from a pipeline);
 *   - after all the B passes no gradient has changed (B touches none);
 *   - B asks the BlockAccess for exactly the fused pass's parameter calls in
 *     its order and for no gradient; W for exactly its gradient calls in its
 *     order and for no parameter;
 *   - extra_wte_grad (the tied weights' share from the last stage) is taken
 *     by W as by the fused pass.
 * Over the whole model, a tp=1 shard, the three stages of a 3-stage split
 * (first with the encoder, middle, last with the head and head_wte), a model
 * whose products span several of matmul.c's fixed blocks (rows over
 * MATMUL_ROW_BLOCK, outputs over MATMUL_DWEIGHT_BLOCK), in fp32 and in bf16
 * (widen, and oneDNN where it can run), and under mpirun -np 2 as
 * tensor-parallel shards (tp=2: the all-reduces inside B).
 *
 * usage: test_backward_split fp32|widen|onednn|tp|timing
 * timing (its own CTest entry, in the slow tier) times fused backward against
 * B and W once on a larger model and prints it (no assertion: the machine is
 * shared). onednn exits 77 (CTest's
 * skip) with the reason where oneDNN has no bf16 matmul on this CPU. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/gpt.h"

enum { SKIP_CODE = 77, MAX_MICROS = 3, MAX_CALLS = 256 };

typedef enum { CALL_PARAMS, CALL_PARAMS_DONE, CALL_GRADS, CALL_GRADS_DONE } CallKind;

/* A BlockAccess over the model's own buffers that logs each call. */
typedef struct {
    GPT *model;
    int calls[MAX_CALLS]; /* kind * 100000 + block */
    int num_calls;
} Recorder;

static void record(Recorder *r, CallKind kind, int block) {
    if (r->num_calls < MAX_CALLS) r->calls[r->num_calls] = (int)kind * 100000 + block;
    r->num_calls++;
}

static float *block_of(float *base, const GPTConfig *cfg, int block) {
    size_t off, count;
    gpt_block_range(cfg, block, &off, &count);
    return base + off;
}

static float *rec_params(void *ctx, int block) {
    Recorder *r = ctx;
    record(r, CALL_PARAMS, block);
    return block_of(r->model->params, &r->model->cfg, block);
}
static void rec_params_done(void *ctx, int block) { record(ctx, CALL_PARAMS_DONE, block); }
static float *rec_grads(void *ctx, int block) {
    Recorder *r = ctx;
    record(r, CALL_GRADS, block);
    return block_of(r->model->grads, &r->model->cfg, block);
}
static void rec_grads_done(void *ctx, int block) { record(ctx, CALL_GRADS_DONE, block); }

static BlockAccess recorder_access(Recorder *r) {
    return (BlockAccess){rec_params, rec_params_done, rec_grads, rec_grads_done, r};
}

/* The calls of `all` whose kind is one of the two given, in order. */
static int filter_calls(const Recorder *all, CallKind a, CallKind b, int *out) {
    int n = 0;
    for (int i = 0; i < all->num_calls && i < MAX_CALLS; i++) {
        int kind = all->calls[i] / 100000;
        if (kind == (int)a || kind == (int)b) out[n++] = all->calls[i];
    }
    return n;
}

static void check_calls(const char *name, const char *pass, const Recorder *fused, CallKind a, CallKind b,
                        const Recorder *got) {
    int want[MAX_CALLS];
    int n = filter_calls(fused, a, b, want);
    bool same = got->num_calls == n && memcmp(want, got->calls, (size_t)n * sizeof(int)) == 0;
    CHECK(same, "%s: %s made %d BlockAccess calls, not the fused pass's %d %s calls in its order", name, pass,
          got->num_calls, n, a == CALL_PARAMS ? "parameter" : "gradient");
}

/* x[0..n) uniform in [-scale/2, scale/2) */
static void fill(float *x, size_t n, float scale, Rng *rng) {
    for (size_t i = 0; i < n; i++) x[i] = scale * (rng_uniform(rng) - 0.5f);
}

/* Elements whose bits differ; the first such index in *first. */
static size_t bit_differences(const float *a, const float *b, size_t n, size_t *first) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0 && count++ == 0) *first = i;
    return count;
}

static void check_bits(const char *name, const char *what, const float *want, const float *got, size_t n) {
    size_t first = 0, bad = bit_differences(want, got, n, &first);
    CHECK(bad == 0, "%s: %s: %zu of %zu elements differ in their bits from the fused backward (first %zu: %.9g vs %.9g)",
          name, what, bad, n, first, bad ? want[first] : 0.0, bad ? got[first] : 0.0);
}

typedef struct {
    const char *name;
    GPTConfig cfg;
    int B, T, micros;
    bool bf16;
    MatmulBF16Path path; /* with bf16 */
    Comm *tp;
} Case;

/* One micro-batch's data: tokens, targets, the stage's input (no encoder)
 * and the gradient of its output (no head). */
typedef struct {
    int32_t *inputs, *targets;
    float *stage_in, *stage_grad;
} Micro;

static Micro make_micro(const Case *c, Rng *rng) {
    const size_t N = (size_t)c->B * c->T, NC = N * (size_t)c->cfg.channels;
    Micro m = {malloc(N * sizeof(int32_t)), malloc(N * sizeof(int32_t)), malloc(NC * sizeof(float)),
               malloc(NC * sizeof(float))};
    for (size_t i = 0; i < N; i++) {
        m.inputs[i] = (int32_t)rng_below(rng, (uint64_t)c->cfg.vocab_size);
        m.targets[i] = (int32_t)rng_below(rng, (uint64_t)c->cfg.vocab_size);
    }
    fill(m.stage_in, NC, 2.0f, rng);
    fill(m.stage_grad, NC, 2e-3f, rng);
    return m;
}

static void free_micro(Micro *m) {
    free(m->inputs);
    free(m->targets);
    free(m->stage_in);
    free(m->stage_grad);
}

/* A model with the case's parameters and starting gradients (the same for
 * every call with the same seed). */
static void make_model(GPT *model, const Case *c, uint64_t seed) {
    gpt_create(model, &c->cfg);
    gpt_init_weights(model, seed);
    Rng rng;
    rng_seed(&rng, seed);
    fill(model->grads, model->num_params, 1e-2f, &rng);
    if (model->head_wte) {
        const size_t n = gpt_tensor_numel(&c->cfg, TK_WTE);
        fill(model->head_wte, n, 0.04f, &rng);
        fill(model->head_dwte, n, 1e-2f, &rng);
    }
    model->tp = c->tp;
    if (c->bf16) gpt_enable_bf16(model, c->path);
}

static double forward(GPT *model, GPTActs *acts, const Case *c, const Micro *m, const BlockAccess *access) {
    if (!gpt_has_encoder(&c->cfg))
        memcpy(gpt_stage_input(&c->cfg, acts), m->stage_in, (size_t)c->B * c->T * c->cfg.channels * sizeof(float));
    const float dloss = 1.0f / (float)(c->B * c->T * c->micros);
    return gpt_forward(model, acts, m->inputs, m->targets, c->B, c->T, dloss, access);
}

static void give_stage_grad(const Case *c, GPTActs *acts, const Micro *m) {
    if (!gpt_has_head(&c->cfg))
        memcpy(gpt_stage_grad(acts), m->stage_grad, (size_t)c->B * c->T * c->cfg.channels * sizeof(float));
}

/* The fused reference: forward and backward per micro-batch; the stage's
 * input gradient of each into stage_grads[m], the first backward's calls
 * into calls. */
static void run_fused(GPT *model, const Case *c, const Micro *micros, const float *extra, float **stage_grads,
                      Recorder *calls) {
    const size_t NC = (size_t)c->B * c->T * c->cfg.channels;
    Recorder rec = {.model = model};
    BlockAccess access = recorder_access(&rec);
    GPTActs acts;
    gpt_acts_create(&acts, &c->cfg, c->B, c->T, true);
    for (int m = 0; m < c->micros; m++) {
        forward(model, &acts, c, &micros[m], &access);
        give_stage_grad(c, &acts, &micros[m]);
        if (m == 0) model->extra_wte_grad = extra;
        rec.num_calls = 0;
        gpt_backward(model, &acts, micros[m].inputs, c->B, c->T, &access);
        if (m == 0) *calls = rec;
        memcpy(stage_grads[m], gpt_stage_grad(&acts), NC * sizeof(float));
    }
    gpt_acts_free(&acts);
}

/* The split passes in the deferred order; asserts the calls of each pass
 * and that B leaves every gradient as it was. */
static void run_split(GPT *model, const Case *c, const Micro *micros, const float *extra, float **stage_grads,
                      const Recorder *fused_calls) {
    const size_t NC = (size_t)c->B * c->T * c->cfg.channels;
    Recorder rec = {.model = model};
    BlockAccess access = recorder_access(&rec);
    GPTActs sets[MAX_MICROS];
    for (int m = 0; m < c->micros; m++) {
        gpt_acts_create_split(&sets[m], &c->cfg, c->B, c->T);
        if (m > 0) gpt_acts_share_backward(&sets[m], &sets[0]);
        forward(model, &sets[m], c, &micros[m], &access);
    }
    const size_t wte_n = gpt_tensor_numel(&c->cfg, TK_WTE);
    float *grads_before = malloc(model->num_params * sizeof(float)), *head_before = malloc(wte_n * sizeof(float));
    memcpy(grads_before, model->grads, model->num_params * sizeof(float));
    if (model->head_dwte) memcpy(head_before, model->head_dwte, wte_n * sizeof(float));
    for (int m = 0; m < c->micros; m++) {
        give_stage_grad(c, &sets[m], &micros[m]);
        rec.num_calls = 0;
        gpt_backward_input(model, &sets[m], micros[m].inputs, c->B, c->T, &access);
        check_calls(c->name, "B", fused_calls, CALL_PARAMS, CALL_PARAMS_DONE, &rec);
        memcpy(stage_grads[m], gpt_stage_grad(&sets[m]), NC * sizeof(float));
    }
    check_bits(c->name, "gradients after every B (B must touch none)", grads_before, model->grads, model->num_params);
    if (model->head_dwte) check_bits(c->name, "head_dwte after every B", head_before, model->head_dwte, wte_n);
    for (int m = 0; m < c->micros; m++) {
        if (m == 0) model->extra_wte_grad = extra;
        rec.num_calls = 0;
        gpt_backward_weight(model, &sets[m], micros[m].inputs, c->B, c->T, &access);
        check_calls(c->name, "W", fused_calls, CALL_GRADS, CALL_GRADS_DONE, &rec);
    }
    CHECK(model->extra_wte_grad == NULL, "%s: W left extra_wte_grad untaken", c->name);
    for (int m = 0; m < c->micros; m++) gpt_acts_free(&sets[m]);
    free(grads_before);
    free(head_before);
}

static void run_case(const Case *c, Rng *rng) {
    const size_t NC = (size_t)c->B * c->T * c->cfg.channels, wte_n = gpt_tensor_numel(&c->cfg, TK_WTE);
    Micro micros[MAX_MICROS];
    float *fused_sg[MAX_MICROS], *split_sg[MAX_MICROS];
    for (int m = 0; m < c->micros; m++) {
        micros[m] = make_micro(c, rng);
        fused_sg[m] = malloc(NC * sizeof(float));
        split_sg[m] = malloc(NC * sizeof(float));
    }
    float *extra = NULL;
    if (gpt_has_encoder(&c->cfg) && !gpt_has_head(&c->cfg)) { /* first of several stages: the tied share */
        extra = malloc(wte_n * sizeof(float));
        fill(extra, wte_n, 1e-3f, rng);
    }
    GPT fused, split;
    make_model(&fused, c, 1234);
    make_model(&split, c, 1234);
    Recorder fused_calls;
    run_fused(&fused, c, micros, extra, fused_sg, &fused_calls);
    run_split(&split, c, micros, extra, split_sg, &fused_calls);
    check_bits(c->name, "gradients", fused.grads, split.grads, fused.num_params);
    if (fused.head_dwte) check_bits(c->name, "head_dwte", fused.head_dwte, split.head_dwte, wte_n);
    char what[64];
    for (int m = 0; m < c->micros; m++) {
        snprintf(what, sizeof what, "gpt_stage_grad of micro-batch %d", m);
        check_bits(c->name, what, fused_sg[m], split_sg[m], NC);
    }
    if (!c->tp || comm_rank(c->tp) == 0)
        printf("%-48s %zu parameters, %d micro-batch%s: compared\n", c->name, fused.num_params, c->micros,
               c->micros > 1 ? "es (B.. then W..)" : "");
    gpt_free(&fused);
    gpt_free(&split);
    for (int m = 0; m < c->micros; m++) {
        free_micro(&micros[m]);
        free(fused_sg[m]);
        free(split_sg[m]);
    }
    free(extra);
}

static GPTConfig model_config(int L, int H, int C, int V, int T) {
    GPTConfig cfg = {.max_seq_len = T, .vocab_size = V, .num_layers = L, .num_heads = H, .channels = C};
    char why[256];
    if (!gpt_config_check(&cfg, why, sizeof why)) {
        fprintf(stderr, "test_backward_split: bad test model: %s\n", why);
        exit(2);
    }
    return cfg;
}

static GPTConfig shard(GPTConfig cfg, int tp_size, int tp_rank, int stages, int stage) {
    const int per = cfg.num_layers / stages;
    char why[256];
    if (!gpt_set_shard(&cfg, tp_size, tp_rank, stages, stage, stage * per, per, why, sizeof why)) {
        fprintf(stderr, "test_backward_split: bad test shard: %s\n", why);
        exit(2);
    }
    return cfg;
}

/* The cases of one precision; tp > 1 shards over the group. */
static void run_cases(bool bf16, MatmulBF16Path path, Comm *tp) {
    const int tp_size = tp ? comm_size(tp) : 1, tp_rank = tp ? comm_rank(tp) : 0;
    Rng rng; /* the same micro-batches on every tensor-parallel rank */
    rng_seed(&rng, 2024);
    const GPTConfig small = model_config(2, 2, 64, 250, 32), deep = model_config(3, 2, 64, 250, 32);
    /* rows 8 x 160 = 1280 > MATMUL_ROW_BLOCK; fc 512 and the padded vocabulary 1024 outputs > MATMUL_DWEIGHT_BLOCK */
    const GPTConfig blocks = model_config(2, 4, 128, 1000, 160);
    char names[5][64];
    const char *mode = bf16 ? matmul_bf16_path_name(path) : "fp32";
    Case cases[8];
    int n = 0;
    cases[n++] = (Case){"whole, one micro-batch", shard(small, tp_size, tp_rank, 1, 0), 2, 32, 1, bf16, path, tp};
    cases[n++] = (Case){"whole, deferred over 3 sets", shard(small, tp_size, tp_rank, 1, 0), 2, 32, 3, bf16, path, tp};
    if (tp_size == 1) cases[n++] = (Case){"whole (no shard)", small, 2, 32, 2, bf16, path, tp};
    for (int s = 0; s < 3; s++) {
        snprintf(names[s], sizeof names[s], "stage %d of 3, deferred over 2 sets", s);
        cases[n++] = (Case){names[s], shard(deep, tp_size, tp_rank, 3, s), 2, 32, 2, bf16, path, tp};
    }
    cases[n++] = (Case){"several matmul blocks, 2 sets", shard(blocks, tp_size, tp_rank, 1, 0), 8, 160, 2, bf16, path,
                        tp};
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s tp=%d: %s", mode, tp_size, cases[i].name);
        cases[i].name = name;
        run_case(&cases[i], &rng);
    }
}

static double seconds_of(void (*pass)(GPT *, GPTActs *, const int32_t *, int, int, const BlockAccess *), GPT *model,
                         GPTActs *acts, const Micro *m, int B, int T) {
    double t0 = bs_now();
    pass(model, acts, m->inputs, B, T, NULL);
    return bs_now() - t0;
}

/* Fused backward against B and W on the engine benchmark's shape (2048
 * rows, C = 384), best of 2 (printed only). B's matmuls run matmul.c's dinp
 * blocks alone, MATMUL_ROW_BLOCK rows each: 2 blocks here, and one (one
 * thread) at B*T <= MATMUL_ROW_BLOCK. */
static void time_passes(int B) {
    Case c = {"timing", model_config(2, 6, 384, 4096, 256), B, 256, 1, false, MATMUL_BF16_WIDEN, NULL};
    Rng rng;
    rng_seed(&rng, 7);
    Micro m = make_micro(&c, &rng);
    GPT model;
    make_model(&model, &c, 99);
    GPTActs acts;
    gpt_acts_create_split(&acts, &c.cfg, c.B, c.T);
    double fused = 1e30, input = 1e30, weight = 1e30;
    for (int rep = 0; rep < 3; rep++) { /* the first is a warm-up */
        forward(&model, &acts, &c, &m, NULL);
        double f = seconds_of(gpt_backward, &model, &acts, &m, c.B, c.T);
        forward(&model, &acts, &c, &m, NULL);
        double b = seconds_of(gpt_backward_input, &model, &acts, &m, c.B, c.T);
        double w = seconds_of(gpt_backward_weight, &model, &acts, &m, c.B, c.T);
        if (rep > 0 && f < fused) fused = f;
        if (rep > 0 && b < input) input = b;
        if (rep > 0 && w < weight) weight = w;
    }
    printf("timing (L=2 C=384 T=256 B=%d V=4096, %d threads, best of 2; shared machine, no assertion): fused "
           "backward %.1f ms; B %.1f ms + W %.1f ms = %.1f ms; stash %.1f MiB per set\n",
           B, omp_get_max_threads(), 1e3 * fused, 1e3 * input, 1e3 * weight, 1e3 * (input + weight),
           (double)gpt_acts_stash_bytes(&c.cfg, c.B, c.T) / (1 << 20));
    gpt_acts_free(&acts);
    gpt_free(&model);
    free_micro(&m);
}

int main(int argc, char **argv) {
    const char *mode = argc == 2 ? argv[1] : "";
    if (strcmp(mode, "fp32") && strcmp(mode, "widen") && strcmp(mode, "onednn") && strcmp(mode, "tp") &&
        strcmp(mode, "timing")) {
        fprintf(stderr, "usage: test_backward_split fp32|widen|onednn|tp|timing\n");
        return 2;
    }
    if (strcmp(mode, "timing") == 0) {
        time_passes(8);
        return 0;
    }
    if (strcmp(mode, "onednn") == 0 && !matmul_bf16_onednn_available()) {
        printf("SKIP: oneDNN (effective ISA %s) has no bf16 matmul on this CPU: the onednn path cannot run; the "
               "widen path is tested by bw_split_bf16_widen\n",
               matmul_bf16_cpu_isa());
        return SKIP_CODE;
    }
    if (strcmp(mode, "tp") == 0) {
        Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 60.0, "test_backward_split");
        const bool two = comm_size(world) == 2;
        if (!two) fprintf(stderr, "test_backward_split tp: run under mpirun -np 2 (got %d ranks)\n", comm_size(world));
        else {
            run_cases(false, MATMUL_BF16_WIDEN, world);
            run_cases(true, MATMUL_BF16_WIDEN, world);
        }
        int ok = failures == 0 && two;
        comm_finalize(world);
        return ok ? 0 : 1;
    }
    run_cases(strcmp(mode, "fp32") != 0, strcmp(mode, "onednn") == 0 ? MATMUL_BF16_ONEDNN : MATMUL_BF16_WIDEN, NULL);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
