/* test_device_classifier.c: the fused classifier against the CPU's
 * cross-entropy (kernels.h softmax_xent_forward_backward), with masked
 * targets and a padded vocabulary:
 * - DK_CLASSIFIER (one read for the online max and sum, one write of the
 *   gradient) on its own: losses and dlogits, and with dloss 0 the losses
 *   alone (the logits untouched), at a vocabulary under one thread block's
 *   width (V 250, Vp 256) and over it (V 1000, Vp 1024);
 * - the output layer a block of rows at a time (model/classifier_device.h;
 *   blocks of 100 rows over 256, the last cut short) against the CPU's
 *   whole products: losses, the input gradient and wte's (+= onto random
 *   values).
 * Bound: each output within 1e-5 of the CPU's relative to its largest
 * magnitude (fp32 sums in another order), as test_device_kernels.
 * `test_device_classifier sim` on the host; `cuda` on a GPU (skipped, exit
 * 77, without one). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "kernels/kernels.h"
#include "model/classifier_device.h"

enum { N = 256, C = 64, BLOCK = 100 };
static const double BOUND = 1e-5;

static Rng rng;

static float *random_floats(size_t n, float scale) {
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = (2 * rng_uniform(&rng) - 1) * scale;
    return x;
}

/* the device buffer dev (n floats) against want */
static void expect_close(Harness *h, const char *what, int V, const float *dev, const float *want, size_t n) {
    float *got = malloc(sizeof *got * n);
    harness_download(h, got, dev, sizeof *got * n);
    double err = harness_relative_error(got, want, n);
    printf("%-32s V %4d relative error %.3g (bound %.0e)\n", what, V, err, BOUND);
    CHECK(err <= BOUND, "%s V %d: relative error %g > %g", what, V, err, BOUND);
    free(got);
}

/* every 9th target masked, the rest in [0, V) */
static void make_targets(int32_t *targets, int V) {
    for (int i = 0; i < N; i++) targets[i] = i % 9 == 4 ? -1 : (int32_t)rng_below(&rng, (uint64_t)V);
}

static void test_kernel(Harness *h, int V, int Vp, float dloss) {
    int32_t targets[N];
    make_targets(targets, V);
    const size_t n = (size_t)N * Vp;
    float *logits = random_floats(n, 3), *want = malloc(sizeof *want * n), losses[N];
    memcpy(want, logits, sizeof *want * n);
    DeviceCall call = {.kernel = DK_CLASSIFIER};
    call.a.xent = (XentArgs){harness_upload(h, logits, sizeof *logits * n), harness_alloc(h, sizeof losses),
                             harness_upload(h, targets, sizeof targets), N, V, Vp, dloss};
    harness_launch(h, &call);
    softmax_xent_forward_backward(want, losses, targets, N, V, Vp, dloss);
    expect_close(h, dloss != 0 ? "fused classifier losses" : "fused classifier losses only", V, call.a.xent.losses, losses, N);
    expect_close(h, dloss != 0 ? "fused classifier dlogits" : "fused classifier logits kept", V, call.a.xent.logits, want, n);
    device_free(h->dev, call.a.xent.logits), device_free(h->dev, call.a.xent.losses);
    device_free(h->dev, (void *)call.a.xent.targets);
    free(logits), free(want);
}

/* The blocks' products as launched (the model's fp32 mode). */
static int launch_product(void *harness, DeviceKernel kernel, const MatmulArgs *a) {
    Harness *h = harness;
    DeviceCall call = {.kernel = kernel, .a.matmul = *a};
    return device_launch(h->dev, h->stream, &call);
}

/* The output layer in blocks of BLOCK rows against the CPU's products over all N. */
static void test_blocks(Harness *h, int V, int Vp) {
    int32_t targets[N];
    make_targets(targets, V);
    const float dloss = 1.0f / N;
    float *inp = random_floats((size_t)N * C, 1), *wte = random_floats((size_t)Vp * C, 0.5f);
    float *dwte = random_floats((size_t)Vp * C, 1), *logits = malloc(sizeof *logits * N * Vp);
    float *dinp = malloc(sizeof *dinp * N * C), losses[N];
    ClassifierArgs a = {harness_alloc(h, sizeof losses), harness_alloc(h, sizeof(float) * N * C),
                        harness_upload(h, dwte, sizeof(float) * Vp * C), harness_alloc(h, sizeof(float) * BLOCK * Vp),
                        harness_upload(h, inp, sizeof(float) * N * C), harness_upload(h, wte, sizeof(float) * Vp * C),
                        harness_upload(h, targets, sizeof targets), N, C, V, Vp, BLOCK, dloss};
    CHECK(classifier_device(h->dev, h->stream, &a, launch_product, h) == 0, "classifier_device: %s", device_error(h->dev));
    matmul_forward(logits, inp, wte, NULL, N, C, Vp);
    softmax_xent_forward_backward(logits, losses, targets, N, V, Vp, dloss);
    matmul_backward(dinp, dwte, NULL, logits, inp, wte, N, C, Vp);
    expect_close(h, "classifier in row blocks losses", V, a.losses, losses, N);
    expect_close(h, "classifier in row blocks dinp", V, a.dinp, dinp, (size_t)N * C);
    expect_close(h, "classifier in row blocks dwte", V, a.dwte, dwte, (size_t)Vp * C);
    void *dev[] = {a.losses, a.dinp, a.dwte, a.logits, (void *)a.inp, (void *)a.wte, (void *)a.targets};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) device_free(h->dev, dev[i]);
    free(inp), free(wte), free(dwte), free(logits), free(dinp);
}

int main(int argc, char **argv) {
    rng_seed(&rng, 46);
    Harness h = harness_open(argc, argv, 13);
    printf("device %s\n", device_name(h.dev));
    const int vocab[][2] = {{250, 256}, {1000, 1024}};
    for (int v = 0; v < 2; v++) {
        test_kernel(&h, vocab[v][0], vocab[v][1], 1.0f / N);
        test_kernel(&h, vocab[v][0], vocab[v][1], 0.0f);
        test_blocks(&h, vocab[v][0], vocab[v][1]);
    }
    harness_close(&h);
    printf("%s\n", failures ? "FAILED" : "fused classifier agrees");
    return failures != 0;
}
