/* test_gpt_device_graphs.c: the device step replayed from graphs
 * (model/step_graphs.h, device.h's capture) against the same step queued
 * launch by launch: L2 H2 C32 T32, two micro-batches of 2 sequences a step
 * with attention inside documents, 10 AdamW steps whose learning rate and
 * clipping scale change every step; the losses and the final parameters
 * bitwise equal with and without graphs, in fp32 and bf16. What sim exists
 * to catch (`sim` only): an update graph that captured the learning rate and
 * the other step values by value (GPT_DEVICE_GRAPH_STEP_BY_VALUE) replays
 * the capture's and ends elsewhere. And the seam's capture rules on either
 * device: a replayed copy reads its pinned host memory again, a
 * synchronisation inside a capture is refused, and so is a capture that
 * leaves a joined stream unjoined. `test_gpt_device_graphs cuda` runs the
 * same on a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "gpt_test_model.h"
#include "model/gpt_device.h"
#include "optim/grad_norm.h"

enum { L = 2, H = 2, C = 32, T = 32, V = 250, B = 2, N = B * T, MICRO = 2, STEPS = 10, SEPARATOR = 0 };

typedef struct {
    double losses[STEPS];
    float *params;
} Run;

/* micro-batch k's tokens: seeded, one in 16 the document separator, every 13th target masked */
static void batch(int k, int32_t *inputs, int32_t *targets) {
    gpt_batch(500 + (uint64_t)k, N, V, SEPARATOR, inputs, targets);
}

static void need(Harness *h, int rc, const char *what) { harness_check(h, rc, what); }

/* step s: MICRO micro-batches, the norm, then AdamW at a learning rate that grows every step */
static double train_step(Harness *h, GPTDevice *g, int s) {
    double total = 0, loss = 0, sumsq = 0;
    need(h, gpt_device_zero_grads(g), "zero");
    for (int k = 0; k < MICRO; k++) {
        int32_t inputs[N], targets[N];
        batch(MICRO * s + k, inputs, targets);
        need(h, gpt_device_step(g, inputs, targets, 1.0f / (MICRO * N), &loss), "step");
        total += loss;
    }
    need(h, gpt_device_grad_sum_squares(g, &sumsq), "norm");
    AdamWStep st = {.lr = 1e-3f * (float)(s + 1), .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                    .grad_scale = clip_coefficient(sqrt(sumsq), 0.5), .step = s + 1};
    need(h, gpt_device_adamw(g, &st), "adamw");
    return total;
}

static Run train(Harness *h, const GPTConfig *cfg, const float *init, bool bf16, bool graphs, int debug) {
    char reason[256];
    GPTDevice *g = gpt_device_create(h->dev, cfg, B, T, debug, reason, sizeof reason);
    if (!g) {
        printf("FAIL: device model: %s\n", reason);
        exit(1);
    }
    gpt_device_set_doc_separator(g, SEPARATOR);
    if (bf16) need(h, gpt_device_enable_bf16(g), "bf16");
    if (graphs) need(h, gpt_device_enable_graphs(g), "graphs");
    need(h, gpt_device_set_state(g, init, NULL, NULL), "state");
    Run r = {.params = malloc(sizeof(float) * gpt_num_params(cfg))};
    for (int s = 0; s < STEPS; s++) r.losses[s] = train_step(h, g, s);
    need(h, gpt_device_get_state(g, r.params, NULL, NULL, NULL), "get state");
    gpt_device_free(g);
    return r;
}

static bool same_run(const Run *a, const Run *b, size_t n) {
    return memcmp(a->losses, b->losses, sizeof a->losses) == 0 && memcmp(a->params, b->params, sizeof(float) * n) == 0;
}

static void graphs_equal_launches(Harness *h, const GPTConfig *cfg, const float *init, bool bf16, bool sim) {
    const size_t n = gpt_num_params(cfg);
    Run plain = train(h, cfg, init, bf16, false, 0), graphs = train(h, cfg, init, bf16, true, 0);
    const bool same = same_run(&plain, &graphs, n);
    printf("%s, %d steps: graphs %s the launches (losses %.9g ... %.9g)\n", bf16 ? "bf16" : "fp32", STEPS,
           same ? "bitwise equal" : "DIFFER FROM", graphs.losses[0], graphs.losses[STEPS - 1]);
    CHECK(same, "%s: graphs differ from the launches", bf16 ? "bf16" : "fp32");
    if (sim) { /* the update's step values captured by value: replayed stale, caught */
        Run stale = train(h, cfg, init, bf16, true, GPT_DEVICE_GRAPH_STEP_BY_VALUE);
        const bool caught = !same_run(&plain, &stale, n);
        printf("%s: step values captured by value %s\n", bf16 ? "bf16" : "fp32", caught ? "caught" : "NOT CAUGHT");
        CHECK(caught, "%s: an update graph with its learning rate by value went unnoticed", bf16 ? "bf16" : "fp32");
        free(stale.params);
    }
    free(plain.params), free(graphs.params);
}

/* The seam's rules for captures, the same on sim and CUDA. */
static void capture_rules(Harness *h) {
    enum { COUNT = 256 };
    float *host = device_host_alloc(h->dev, sizeof(float) * COUNT), out[COUNT];
    float *in = harness_alloc(h, sizeof out), *sum = harness_alloc(h, sizeof out);
    DeviceCall twice = {.kernel = DK_RESIDUAL_FORWARD, .a.elementwise = {sum, in, in, COUNT}};
    need(h, device_capture_begin(h->dev, h->stream), "capture");
    need(h, device_copy(h->dev, h->stream, in, host, sizeof out, COPY_HOST_TO_DEVICE), "captured copy");
    need(h, device_launch(h->dev, h->stream, &twice), "captured launch");
    DeviceGraph *graph = device_capture_end(h->dev, h->stream);
    need(h, graph ? 0 : -1, "capture end");
    int fresh = 1;
    for (int round = 1; round <= 2; round++) { /* the host's values change between replays */
        for (int i = 0; i < COUNT; i++) host[i] = (float)(round * i);
        need(h, device_graph_launch(h->dev, h->stream, graph), "replay");
        harness_download(h, out, sum, sizeof out);
        for (int i = 0; i < COUNT; i++) fresh &= out[i] == 2.0f * (float)(round * i);
    }
    CHECK(fresh, "a replayed copy did not read its host memory again");
    need(h, device_capture_begin(h->dev, h->stream), "capture");
    const int sync_rc = device_stream_sync(h->dev, h->stream);
    device_graph_free(h->dev, device_capture_end(h->dev, h->stream));
    CHECK(sync_rc != 0, "a synchronisation inside a capture was not refused");
    DeviceStream *side = device_stream_create(h->dev);
    DeviceEvent *fork = device_event_create(h->dev);
    need(h, device_capture_begin(h->dev, h->stream), "capture");
    need(h, device_event_record(h->dev, h->stream, fork), "fork");
    need(h, device_stream_wait(h->dev, side, fork), "join");
    need(h, device_launch(h->dev, side, &twice), "side launch");
    DeviceGraph *unjoined = device_capture_end(h->dev, h->stream);
    printf("capture rules: replayed copies read the host again: %s; sync inside refused: %s; "
           "unjoined stream refused: %s (%s)\n",
           fresh ? "yes" : "NO", sync_rc ? "yes" : "NO", unjoined ? "NO" : "yes", device_error(h->dev));
    CHECK(!unjoined, "a capture that left a stream unjoined was not refused");
    device_graph_free(h->dev, unjoined);
    device_graph_free(h->dev, graph);
    device_event_destroy(h->dev, fork);
    device_stream_destroy(h->dev, side);
    device_host_free(h->dev, host);
    device_free(h->dev, in);
    device_free(h->dev, sum);
}

int main(int argc, char **argv) {
    const GPTConfig cfg = gpt_test_config(L, H, C, T, V);
    GPT model;
    gpt_create(&model, &cfg);
    gpt_init_weights(&model, 1337);
    Harness h = harness_open(argc, argv, 7);
    const bool sim = strcmp(device_name(h.dev), "sim") == 0;
    capture_rules(&h);
    graphs_equal_launches(&h, &cfg, model.params, false, sim);
    graphs_equal_launches(&h, &cfg, model.params, true, sim);
    harness_close(&h);
    gpt_free(&model);
    printf("%s\n", failures ? "FAILED" : "graphs replay the step bit for bit");
    return failures != 0;
}
