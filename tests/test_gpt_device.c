/* test_gpt_device.c: the whole GPT-2 step on a device against the CPU model
 * (model/gpt.h + optim/adamw.h), from the same initial weights and data:
 * L4 H4 C64 T64, micro-batch 4, 10 AdamW steps with clipping at norm 1,
 * a padded vocabulary and masked targets (and 3 steps with attention inside
 * documents, token 0 the separator), with the fused attention kernels (the
 * default) and the unfused ones. Each step's loss within 1e-5
 * relative and, after 10 steps, every parameter within 1e-4 (absolute) of
 * the CPU's. Then what sim exists to catch (`sim` only): the step with its
 * event wait on the token upload removed reads tokens before they arrive
 * under some seeds, and the step with the gradients' zeroing removed
 * updates with NaN. Two device runs of the same steps are bitwise equal.
 * The guard's non-finite flags find a poisoned gradient block and the first
 * layer whose output is infinite.
 * `test_gpt_device cuda` runs the same on a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "gpt_test_model.h"
#include "model/gpt_device.h"
#include "optim/grad_norm.h"

enum { L = 4, H = 4, C = 64, T = 64, V = 250, B = 4, N = B * T, STEPS = 10, SEEDS = 16, SEPARATOR = 0 };

static const AdamWStep STEP = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

/* step s's micro-batch: seeded tokens, one in 16 the document separator (token 0), every 13th target masked */
static void batch(int s, int32_t *inputs, int32_t *targets) {
    gpt_batch(1000 + (uint64_t)s, N, V, SEPARATOR, inputs, targets);
}

/* The CPU step: forward, backward, clipping, AdamW per tensor. Returns the loss sum. */
static double cpu_step(GPT *model, GPTActs *acts, float *m, float *v, int s, const ParamSegment *segs, int nseg) {
    int32_t inputs[N], targets[N];
    batch(s, inputs, targets);
    gpt_zero_grads(model);
    double loss = gpt_forward(model, acts, inputs, targets, B, T, 1.0f / N, NULL);
    gpt_backward(model, acts, inputs, B, T, NULL);
    AdamWStep st = STEP;
    st.step = s + 1;
    st.grad_scale = clip_coefficient(sqrt(sum_of_squares(model->grads, model->num_params)), 1.0);
    for (int i = 0; i < nseg; i++) {
        const size_t o = segs[i].offset;
        st.weight_decay = gpt_tensor_decays(segs[i].kind) ? STEP.weight_decay : 0.0f;
        adamw_update(model->params + o, model->grads + o, m + o, v + o, segs[i].count, &st);
    }
    return loss;
}

/* The same step on the device; returns the loss sum (NaN on an error). */
static double device_step(Harness *h, GPTDevice *g, int s) {
    int32_t inputs[N], targets[N];
    batch(s, inputs, targets);
    double loss = NAN, sumsq = NAN;
    if (gpt_device_zero_grads(g) || gpt_device_step(g, inputs, targets, 1.0f / N, &loss) ||
        gpt_device_grad_sum_squares(g, &sumsq)) {
        printf("device step: %s\n", device_error(h->dev));
        return NAN;
    }
    AdamWStep st = STEP;
    st.step = s + 1;
    st.grad_scale = clip_coefficient(sqrt(sumsq), 1.0);
    return gpt_device_adamw(g, &st) ? NAN : loss;
}

static GPTDevice *device_model(Harness *h, const GPTConfig *cfg, const float *params, int debug) {
    char reason[256];
    GPTDevice *g = gpt_device_create(h->dev, cfg, B, T, debug, reason, sizeof reason);
    if (!g || gpt_device_set_state(g, params, NULL, NULL)) {
        printf("FAIL: device model: %s\n", g ? device_error(h->dev) : reason);
        exit(1);
    }
    return g;
}

/* 3 device steps from the model's initial weights; the parameters after them into out. */
static void three_steps(Harness *h, const GPTConfig *cfg, const float *init, float *out) {
    GPTDevice *g = device_model(h, cfg, init, 0);
    for (int s = 0; s < 3; s++) device_step(h, g, s);
    gpt_device_get_state(g, out, NULL, NULL, NULL);
    gpt_device_free(g);
}

/* Determinism: two runs of the same steps give the same bits (no atomics in any sum). */
static void two_runs_bitwise(Harness *h, const GPTConfig *cfg) {
    GPT model;
    gpt_create(&model, cfg);
    gpt_init_weights(&model, 1337);
    float *a = malloc(sizeof *a * model.num_params), *b = malloc(sizeof *b * model.num_params);
    three_steps(h, cfg, model.params, a);
    three_steps(h, cfg, model.params, b);
    int same = memcmp(a, b, sizeof *a * model.num_params) == 0;
    printf("two runs of 3 steps: %s\n", same ? "bitwise equal" : "DIFFERENT");
    CHECK(same, "two device runs of the same steps differ");
    free(a), free(b);
    gpt_free(&model);
}

/* steps AdamW steps on both sides; separator >= 0: attention inside documents; fused: the fused attention kernels */
static void compare_training(Harness *h, const GPTConfig *cfg, int steps, int32_t separator, bool fused) {
    GPT model;
    GPTActs acts;
    gpt_create(&model, cfg);
    gpt_init_weights(&model, 1337);
    model.doc_separator = separator;
    gpt_acts_create(&acts, cfg, B, T, true);
    GPTDevice *g = device_model(h, cfg, model.params, 0);
    gpt_device_set_doc_separator(g, separator);
    char reason[256];
    CHECK(gpt_device_set_fused_attention(g, fused, reason, sizeof reason) == 0, "fused attention: %s", reason);
    const size_t n = model.num_params;
    float *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v), *got = malloc(sizeof *got * n);
    ParamSegment *segs = malloc(sizeof *segs * (size_t)gpt_max_segments(cfg));
    const int nseg = gpt_param_segments(cfg, segs, gpt_max_segments(cfg));
    for (int s = 0; s < steps; s++) {
        double want = cpu_step(&model, &acts, m, v, s, segs, nseg), loss = device_step(h, g, s);
        double rel = fabs(loss - want) / fabs(want);
        printf("%s %s step %2d loss cpu %.7f device %.7f relative difference %.2g\n", fused ? "fused" : "unfused",
               separator >= 0 ? "documents" : "causal", s + 1, want / N, loss / N, rel);
        CHECK(rel <= 1e-5, "step %d: loss %.9g vs the CPU's %.9g", s + 1, loss, want);
    }
    gpt_device_get_state(g, got, NULL, NULL, NULL);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - model.params[i]);
        worst = d > worst || d != d ? d : worst;
    }
    printf("after %d steps: largest parameter difference %.3g (bound 1e-4)\n", steps, worst);
    CHECK(worst <= 1e-4, "parameters differ by %g after %d steps", worst, steps);
    free(m), free(v), free(got), free(segs);
    gpt_device_free(g);
    gpt_acts_free(&acts);
    gpt_free(&model);
}

/* The guard's flags: a clean step flags nothing; a poisoned gradient block
 * is the one found; an infinite bias in layer 2 flags layer 2's output in the
 * forward, the first non-finite layer output as gpt.c's first_nonfinite_layer
 * is (the CPU's forward is not run on it: its vectorised exp is undefined
 * behaviour on NaN, which UBSan reports). */
static void nonfinite_flags(Harness *h, const GPTConfig *cfg) {
    GPT model;
    gpt_create(&model, cfg);
    gpt_init_weights(&model, 1337);
    GPTDevice *g = device_model(h, cfg, model.params, 0);
    int32_t inputs[N], targets[N];
    batch(0, inputs, targets);
    double loss;
    int clean_block = 0, poisoned = -1;
    harness_check(h, gpt_device_zero_grads(g) || gpt_device_step(g, inputs, targets, 1.0f / N, &loss) ||
                         gpt_device_first_nonfinite_block(g, &clean_block) || gpt_device_poison_grad(g, 3) ||
                         gpt_device_first_nonfinite_block(g, &poisoned), "clean step");
    const int clean_layer = gpt_device_nonfinite_layer(g);
    gpt_layer_tensors(cfg, model.params + gpt_tensor_offset(cfg, TK_LN1W, 2), 2).fcprojb[0] = INFINITY;
    harness_check(h, gpt_device_set_state(g, model.params, NULL, NULL) || gpt_device_zero_grads(g) ||
                         gpt_device_step(g, inputs, targets, 1.0f / N, &loss), "step with an infinite bias");
    printf("non-finite flags: clean layer %d block %d; block 3 poisoned: %d; layer 2 infinite: %d\n", clean_layer,
           clean_block, poisoned, gpt_device_nonfinite_layer(g));
    CHECK(clean_layer == -1 && clean_block == -1, "a clean step flagged layer %d block %d", clean_layer, clean_block);
    CHECK(poisoned == 3, "the poisoned block 3 was found as %d", poisoned);
    CHECK(gpt_device_nonfinite_layer(g) == 2, "the infinite layer 2 was flagged as %d", gpt_device_nonfinite_layer(g));
    gpt_device_free(g);
    gpt_free(&model);
}

/* With one debug switch (0: none): how many of SEEDS seeds give a first
 * step's loss off right, or a non-finite second step. */
static int wrong_runs(int argc, char **argv, const GPTConfig *cfg, const float *params, int debug, double right) {
    int wrong = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        Harness h = harness_open(argc, argv, seed);
        GPTDevice *g = device_model(&h, cfg, params, debug);
        double first = device_step(&h, g, 0), second = device_step(&h, g, 1);
        wrong += !(fabs(first - right) <= 1e-5 * fabs(right)) || !isfinite(second);
        gpt_device_free(g);
        harness_close(&h);
    }
    return wrong;
}

/* sim: each debug switch fails the step under some seeds (the model's shapes
 * do not matter here: the same T and B, one thin layer, for speed). */
static void sim_catches(int argc, char **argv) {
    GPTConfig cfg = {.max_seq_len = T, .vocab_size = V, .num_layers = 1, .num_heads = 1, .channels = 8};
    char why[256];
    gpt_config_check(&cfg, why, sizeof why);
    GPT model;
    gpt_create(&model, &cfg);
    gpt_init_weights(&model, 1337);
    Harness ref = harness_open(argc, argv, 1);
    GPTDevice *g = device_model(&ref, &cfg, model.params, 0);
    double right = device_step(&ref, g, 0);
    gpt_device_free(g);
    harness_close(&ref);
    int none = wrong_runs(argc, argv, &cfg, model.params, 0, right);
    int wait = wrong_runs(argc, argv, &cfg, model.params, GPT_DEVICE_SKIP_TOKEN_WAIT, right);
    int zero = wrong_runs(argc, argv, &cfg, model.params, GPT_DEVICE_SKIP_GRAD_ZERO, right);
    printf("wrong runs of %d seeds: as written %d, token wait removed %d, gradient zeroing removed %d\n", SEEDS, none,
           wait, zero);
    CHECK(none == 0, "sim: the step as written was wrong under %d seeds", none);
    CHECK(wait > 0, "sim: the step without its token wait was right under every seed");
    CHECK(zero == SEEDS, "sim: the step without zeroed gradients was right under %d seeds", SEEDS - zero);
    gpt_free(&model);
}

int main(int argc, char **argv) {
    const GPTConfig cfg = gpt_test_config(L, H, C, T, V);
    Harness h = harness_open(argc, argv, 3);
    const int sim = strcmp(device_name(h.dev), "sim") == 0;
    for (int fused = 1; fused >= 0; fused--) {
        compare_training(&h, &cfg, STEPS, -1, fused);
        compare_training(&h, &cfg, 3, SEPARATOR, fused);
    }
    two_runs_bitwise(&h, &cfg);
    nonfinite_flags(&h, &cfg);
    harness_close(&h);
    if (sim) sim_catches(argc, argv);
    printf("%s\n", failures ? "FAILED" : "device training equals the CPU's");
    return failures != 0;
}
