/* test_gpt_device_tp.c: the device step of a tensor-parallel shard
 * (model/gpt_device_tp.h) on sim under mpirun (2 ranks: the world is the
 * tensor group, the host path): each rank's first step against one CPU
 * process of the whole model (the loss, and the rank's shard of the
 * gradients, within 1e-5); then what sim catches: without the compute
 * stream's wait for the group's sums (GPT_DEVICE_SKIP_TP_WAIT) the step goes
 * wrong under some of SEEDS stream orders, as written under none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/device_comm.h"
#include "core/rng.h"
#include "device_harness.h"
#include "model/gpt_device.h"
#include "parallel/model_parallel.h"

enum { L = 2, H = 4, C = 32, T = 32, V = 250, B = 2, N = B * T, SEEDS = 12 };

static void batch(int32_t *inputs, int32_t *targets) {
    Rng rng;
    rng_seed(&rng, 77);
    int32_t tok[N + 1];
    for (int i = 0; i <= N; i++) tok[i] = (int32_t)rng_below(&rng, V);
    for (int i = 0; i < N; i++) inputs[i] = tok[i], targets[i] = tok[i + 1];
}

/* max |a - b| / max |b| */
static double relative(const float *a, const float *b, size_t n) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / scale;
}

typedef struct {
    Comm *world;
    GPTConfig whole, shard;
    float *shard_params, *cpu_shard_grads; /* the CPU's whole model's, cut to this rank's shard */
    double cpu_loss;
} Ctx;

/* One CPU process on the whole model: its loss, its gradients cut to this rank's shard. */
static void cpu_reference(Ctx *c) {
    GPT model;
    gpt_create(&model, &c->whole);
    gpt_init_weights(&model, 1337);
    GPTActs acts;
    gpt_acts_create(&acts, &c->whole, B, T, true);
    int32_t inputs[N], targets[N];
    batch(inputs, targets);
    gpt_zero_grads(&model);
    c->cpu_loss = gpt_forward(&model, &acts, inputs, targets, B, T, 1.0f / N, NULL);
    gpt_backward(&model, &acts, inputs, B, T, NULL);
    const size_t n = gpt_num_params(&c->shard);
    c->shard_params = malloc(sizeof(float) * n);
    c->cpu_shard_grads = malloc(sizeof(float) * n);
    mp_copy_from_logical(&c->shard, model.params, c->shard_params, 0, n);
    mp_copy_from_logical(&c->shard, model.grads, c->cpu_shard_grads, 0, n);
    gpt_acts_free(&acts);
    gpt_free(&model);
}

/* One device step of the shard under stream-order seed `seed`: |loss - CPU's| / CPU's, and the gradients' into *grads_err. */
static double device_step(Ctx *c, int argc, char **argv, uint64_t seed, int debug, double *grads_err) {
    Harness h = harness_open(argc, argv, seed);
    char reason[256];
    GPTDevice *g = gpt_device_create(h.dev, &c->shard, B, T, debug, reason, sizeof reason);
    DeviceComm *dc = g ? device_comm_create(c->world, h.dev, gpt_device_compute_stream(g), GPU_COMM_HOST, reason,
                                            sizeof reason)
                       : NULL;
    if (!g || !dc || gpt_device_set_tensor_group(g, dc) || gpt_device_set_state(g, c->shard_params, NULL, NULL)) {
        printf("FAIL: device model: %s\n", dc ? device_error(h.dev) : reason);
        exit(1);
    }
    int32_t inputs[N], targets[N];
    batch(inputs, targets);
    const size_t n = gpt_num_params(&c->shard);
    float *grads = malloc(sizeof(float) * n);
    double loss = NAN;
    harness_check(&h, gpt_device_zero_grads(g), "zero");
    harness_check(&h, gpt_device_step(g, inputs, targets, 1.0f / N, &loss), "step");
    harness_check(&h, gpt_device_get_state(g, NULL, grads, NULL, NULL), "gradients");
    *grads_err = relative(grads, c->cpu_shard_grads, n);
    free(grads);
    device_comm_free(dc);
    gpt_device_free(g);
    harness_close(&h);
    return fabs(loss - c->cpu_loss) / fabs(c->cpu_loss);
}

/* How many of SEEDS stream orders give a loss or gradients off by more than 1e-5 on some rank. */
static int wrong_runs(Ctx *c, int argc, char **argv, int debug) {
    int wrong = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        double grads_err, loss_err = device_step(c, argc, argv, seed * 100 + (uint64_t)comm_world_rank(c->world), debug,
                                                 &grads_err);
        double bad = !(loss_err <= 1e-5 && grads_err <= 1e-5);
        comm_allreduce_max_double(c->world, &bad, 1);
        wrong += bad > 0;
    }
    return wrong;
}

int main(int argc, char **argv) {
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 60.0, "world");
    Ctx c = {.world = world,
             .whole = {.max_seq_len = T, .vocab_size = V, .num_layers = L, .num_heads = H, .channels = C}};
    char why[256];
    if (!gpt_config_check(&c.whole, why, sizeof why)) {
        printf("FAIL: test model: %s\n", why);
        return 1;
    }
    c.shard = c.whole;
    if (!gpt_set_shard(&c.shard, comm_size(world), comm_world_rank(world), 1, 0, 0, L, why, sizeof why)) {
        printf("FAIL: shard: %s\n", why);
        return 1;
    }
    cpu_reference(&c);
    double grads_err, loss_err = device_step(&c, argc, argv, 1, 0, &grads_err);
    printf("rank %d of %d: loss %.1e, gradients %.1e from one CPU process\n", comm_world_rank(world), comm_size(world),
           loss_err, grads_err);
    CHECK(loss_err <= 1e-5, "the loss is %.1e off one CPU process's", loss_err);
    CHECK(grads_err <= 1e-5, "the shard's gradients are %.1e off one CPU process's", grads_err);
    const int none = wrong_runs(&c, argc, argv, 0), skipped = wrong_runs(&c, argc, argv, GPT_DEVICE_SKIP_TP_WAIT);
    printf("wrong runs of %d seeds: as written %d, the wait for the tensor group's sums removed %d\n", SEEDS, none,
           skipped);
    CHECK(none == 0, "sim: the step as written was wrong under %d seeds", none);
    CHECK(skipped > 0, "sim: the step without its wait for the sums was right under every seed");
    free(c.shard_params);
    free(c.cpu_shard_grads);
    comm_finalize(world);
    return failures ? 1 : 0;
}
