/* calibrate_device.c: `batchscale bench --calibrate FILE --device cuda|sim`:
 * measures a device as the planner sees one GPU, through the same kernels
 * the engine's device step launches (device/device_kernels.h):
 *
 * - products by shape (the engine's matmul kernel: cuBLASLt on CUDA), fp32
 *   or on bf16 operands, from squares to GPT-2 124M's and a 1.3B model's
 *   token x width products;
 * - fused attention (FlashAttention-2), forward and backward separately,
 *   counting the causal half of the scores as the planner does;
 * - element-wise kernels (GELU, LayerNorm, residual) and device-to-device
 *   copies (the memory bandwidth);
 * - the host link: pinned copies to and from the device;
 * - under mpirun, all-reduces of device buffers over comm/device_comm.h on
 *   the path train would take (NCCL, or the host path when ranks share a
 *   GPU or on sim), fitted as the host calibration's collectives.
 *
 * The file is the host calibration's with "machine.device" set, so
 * `plan --calibrate` reads either. Timings are host clock around a
 * synchronised stream: each pass is long enough (milliseconds) that the
 * synchronisation is noise. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/calibrate.h"
#include "comm/device_comm.h"
#include "core/error.h"
#include "core/timer.h"

typedef struct {
    int m, n, k; /* out (m x n) = inp (m x k) weight (n x k)^T */
} Product;

/* Squares, then the QKV, projection, MLP up and down products of a small
 * model (2048 tokens, width 192: what sim measures), GPT-2 124M (8 x 1024
 * tokens, width 768) and a 1.3B model (width 2048). */
static const Product PRODUCTS[] = {
    {256, 256, 256},    {512, 512, 512},    {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
    {2048, 576, 192},   {2048, 192, 192},   {2048, 768, 192},   {2048, 192, 768},
    {8192, 2304, 768},  {8192, 768, 768},   {8192, 3072, 768},  {8192, 768, 3072}, {8192, 6144, 2048},
    {8192, 2048, 2048}, {8192, 8192, 2048}, {8192, 2048, 8192},
};

typedef struct {
    Device *dev;
    DeviceStream *stream;
    const DeviceCalibration *cfg;
    double flop_cap; /* products above this many flops are skipped (sim, quick) */
    bool small;      /* small shapes: quick, or sim (the host runs its kernels one element at a time) */
} Bench;

static void check(Bench *b, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(b->dev), device_error(b->dev));
}

static void *device_zeroed(Bench *b, size_t bytes) {
    void *p = device_alloc(b->dev, bytes);
    if (!p) bs_die("device %s: %s", device_name(b->dev), device_error(b->dev));
    check(b, device_zero(b->dev, b->stream, p, bytes));
    return p;
}

static int compare_doubles(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* Median seconds of one pass of the n calls, repeated for about budget s (3 to 51 passes). */
static double time_calls(Bench *b, const DeviceCall *calls, int n, double budget) {
    double t[51];
    int reps = 0;
    for (int i = 0; i < n; i++) check(b, device_launch(b->dev, b->stream, &calls[i])); /* warm-up */
    check(b, device_stream_sync(b->dev, b->stream));
    double start = bs_now();
    while (reps < 51 && (reps < 3 || bs_now() - start < budget)) {
        double t0 = bs_now();
        for (int i = 0; i < n; i++) check(b, device_launch(b->dev, b->stream, &calls[i]));
        check(b, device_stream_sync(b->dev, b->stream));
        t[reps++] = bs_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), compare_doubles);
    return t[reps / 2];
}

static double budget(const Bench *b) { return b->cfg->quick ? 0.02 : 0.3; }

/* The "matmul" points: flops/s of the engine's forward product by shape. */
static json_t *measure_products(Bench *b) {
    size_t in_n = 0, w_n = 0, out_n = 0;
    for (size_t i = 0; i < sizeof PRODUCTS / sizeof PRODUCTS[0]; i++) {
        const Product *p = &PRODUCTS[i];
        if (2.0 * p->m * p->n * p->k > b->flop_cap) continue;
        if ((size_t)p->m * p->k > in_n) in_n = (size_t)p->m * p->k;
        if ((size_t)p->n * p->k > w_n) w_n = (size_t)p->n * p->k;
        if ((size_t)p->m * p->n > out_n) out_n = (size_t)p->m * p->n;
    }
    float *inp = device_zeroed(b, in_n * 4), *weight = device_zeroed(b, w_n * 4), *out = device_zeroed(b, out_n * 4);
    float *bias = device_zeroed(b, 8192 * 4);
    uint16_t *inp16 = b->cfg->bf16 ? device_zeroed(b, in_n * 2) : NULL, *w16 = b->cfg->bf16 ? device_zeroed(b, w_n * 2) : NULL;
    json_t *points = json_array();
    for (size_t i = 0; i < sizeof PRODUCTS / sizeof PRODUCTS[0]; i++) {
        const Product *p = &PRODUCTS[i];
        if (2.0 * p->m * p->n * p->k > b->flop_cap) continue;
        DeviceCall call = {.kernel = DK_MATMUL_FORWARD};
        call.a.matmul = (MatmulArgs){.out = out, .inp = inp, .weight = weight, .bias = bias, .inp_bf16 = inp16,
                                     .weight_bf16 = w16, .N = p->m, .IC = p->k, .OC = p->n};
        double rate = 2.0 * p->m * p->n * p->k / time_calls(b, &call, 1, budget(b));
        json_array_append_new(points, json_pack("{s:i, s:i, s:i, s:f}", "m", p->m, "n", p->n, "k", p->k, "flops_per_s", rate));
    }
    device_free(b->dev, inp), device_free(b->dev, weight), device_free(b->dev, out), device_free(b->dev, bias);
    device_free(b->dev, inp16), device_free(b->dev, w16);
    return points;
}

/* Fused causal attention at GPT-2's shape (B 8, T 1024, C 768, 12 heads;
 * quick: B 1, T 128, C 128, 2 heads): forward and backward flops/s, the
 * forward counted as the causal half of 4 B T^2 C and backward at 2.5x it
 * (the planner's FLASH_BACKWARD_FLOPS). */
static json_t *measure_attention(Bench *b) {
    const bool small = b->small;
    const int B = small ? 1 : 8, T = small ? 128 : 1024, C = small ? 128 : 768, H = small ? 2 : 12;
    const size_t rows = (size_t)B * T;
    float *qkv = device_zeroed(b, rows * 3 * C * 4), *out = device_zeroed(b, rows * C * 4);
    float *lse = device_zeroed(b, (size_t)B * H * T * 4), *dout = device_zeroed(b, rows * C * 4);
    float *dqkv = device_zeroed(b, rows * 3 * C * 4);
    DeviceCall fwd = {.kernel = DK_FLASH_FORWARD}, bwd = {.kernel = DK_FLASH_BACKWARD};
    fwd.a.flash = (FlashArgs){.out = out, .lse = lse, .q = qkv, .k = qkv + C, .v = qkv + 2 * C, .B = B, .Tq = T, .Tk = T,
                              .C = C, .H = H, .q_stride = 3 * C, .kv_stride = 3 * C};
    bwd.a.flash = fwd.a.flash;
    bwd.a.flash.dout = dout;
    bwd.a.flash.dq = dqkv, bwd.a.flash.dk = dqkv + C, bwd.a.flash.dv = dqkv + 2 * C;
    const double flops = 2.0 * B * (double)T * T * C; /* half of 4 B T^2 C */
    double forward = time_calls(b, &fwd, 1, budget(b)), backward = time_calls(b, &bwd, 1, budget(b));
    device_free(b->dev, qkv), device_free(b->dev, out), device_free(b->dev, lse), device_free(b->dev, dout);
    device_free(b->dev, dqkv);
    char method[128];
    snprintf(method, sizeof method, "FlashAttention-2 kernels, causal, B %d T %d C %d heads %d", B, T, C, H);
    return json_pack("{s:f, s:f, s:s}", "forward_flops_per_s", flops / forward, "backward_flops_per_s",
                     2.5 * flops / backward, "method", method);
}

/* The engine's element-wise kernels on N rows of C (calibration_elementwise_bytes). */
static double measure_elementwise(Bench *b) {
    const size_t N = b->small ? 2048 : 16384;
    const int C = b->small ? 192 : 768;
    const size_t n = N * C, wide = 4 * n;
    float *x = device_zeroed(b, wide * 4), *y = device_zeroed(b, wide * 4), *g = device_zeroed(b, wide * 4);
    float *params = device_zeroed(b, 4 * (size_t)C * 4), *stats = device_zeroed(b, 2 * N * 4);
    float *w = params, *bias = params + C, *dw = params + 2 * C, *db = params + 3 * C;
    DeviceCall calls[5] = {{.kernel = DK_GELU_FORWARD}, {.kernel = DK_GELU_BACKWARD}, {.kernel = DK_LAYERNORM_FORWARD},
                           {.kernel = DK_LAYERNORM_BACKWARD}, {.kernel = DK_RESIDUAL_FORWARD}};
    calls[0].a.elementwise = (ElementwiseArgs){.out = y, .a = x, .n = wide};
    calls[1].a.elementwise = (ElementwiseArgs){.out = x, .a = x, .b = g, .n = wide};
    calls[2].a.layernorm = (LayernormArgs){.out = y, .mean = stats, .rstd = stats + N, .inp = x, .weight = w,
                                           .bias = bias, .N = (int)N, .C = C};
    calls[3].a.layernorm = (LayernormArgs){.dinp = g, .dweight = dw, .dbias = db, .mean = stats, .rstd = stats + N,
                                           .inp = x, .weight = w, .dout = y, .N = (int)N, .C = C};
    calls[4].a.elementwise = (ElementwiseArgs){.out = y, .a = x, .b = g, .n = n};
    double rate = calibration_elementwise_bytes(N, C) / time_calls(b, calls, 5, budget(b));
    device_free(b->dev, x), device_free(b->dev, y), device_free(b->dev, g), device_free(b->dev, params);
    device_free(b->dev, stats);
    return rate;
}

/* Median seconds of one copy of n bytes of this kind. */
static double time_copy(Bench *b, void *dst, const void *src, size_t n, DeviceCopyKind kind) {
    double t[15];
    const int reps = b->cfg->quick ? 3 : 15;
    for (int r = 0; r < reps; r++) {
        double t0 = bs_now();
        check(b, device_copy(b->dev, b->stream, dst, src, n, kind));
        check(b, device_stream_sync(b->dev, b->stream));
        t[r] = bs_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), compare_doubles);
    return t[reps / 2];
}

/* "memory_bandwidth" (device to device: a read and a write per byte) and
 * "host_link" (pinned host memory to and from the device). */
static void measure_copies(Bench *b, json_t *root) {
    const size_t n = b->small ? (size_t)16 << 20 : (size_t)256 << 20;
    void *x = device_zeroed(b, n), *y = device_zeroed(b, n), *host = device_host_alloc(b->dev, n);
    if (!host) bs_die("device %s: %s", device_name(b->dev), device_error(b->dev));
    memset(host, 0, n);
    double d2d = time_copy(b, y, x, n, COPY_DEVICE_TO_DEVICE);
    double h2d = time_copy(b, x, host, n, COPY_HOST_TO_DEVICE), d2h = time_copy(b, host, x, n, COPY_DEVICE_TO_HOST);
    device_free(b->dev, x), device_free(b->dev, y), device_host_free(b->dev, host);
    json_object_set_new(root, "memory_bandwidth", json_pack("{s:f, s:s}", "bytes_per_s", 2.0 * n / d2d, "method",
                                                            "device-to-device copy, median, a read and a write per byte"));
    json_object_set_new(root, "host_link", json_pack("{s:f, s:f, s:I}", "host_to_device_bytes_per_s", n / h2d,
                                                     "device_to_host_bytes_per_s", n / d2h, "bytes", (json_int_t)n));
}

typedef struct {
    DeviceComm *comm;
    Comm *group;
    float *buf;
} DeviceAllreduce;

static void device_allreduce(void *ctx, CommAlgo algo, size_t n) {
    DeviceAllreduce *a = ctx;
    comm_set_algo(a->group, algo); /* the host path's CPU collective (NCCL picks its own) */
    device_comm_allreduce(a->comm, a->buf, n, false);
    device_comm_finish(a->comm);
}

/* Under mpirun: all-reduces of device buffers on the path train takes. Collective. */
static json_t *measure_device_collectives(Bench *b, Comm *world) {
    char reason[256];
    GpuCommKind path;
    if (gpu_comm_choose(world, b->dev, GPU_COMM_AUTO, &path, reason, sizeof reason) != 0) bs_die("%s", reason);
    DeviceAllreduce a = {.group = world};
    a.comm = device_comm_create(world, b->dev, b->stream, path, reason, sizeof reason);
    if (!a.comm) bs_die("%s", reason);
    a.buf = device_zeroed(b, calibration_collective_floats(b->cfg->quick) * sizeof(float));
    check(b, device_stream_sync(b->dev, b->stream));
    const CommAlgo host_algos[] = {COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL};
    const CommAlgo nccl_algos[] = {COMM_ALGO_RING}; /* NCCL chooses its own: filed as the ring's */
    const bool nccl = path == GPU_COMM_NCCL;
    json_t *out = calibration_collectives(world, b->cfg->quick, nccl ? nccl_algos : host_algos, nccl ? 1 : 3,
                                          device_allreduce, &a);
    json_object_set_new(out, "path", json_string(gpu_comm_name(path)));
    device_free(b->dev, a.buf);
    device_comm_free(a.comm);
    return out;
}

/* "machine": the device's name and memory; on sim, the host's cores its kernels share. */
static void describe(Bench *b, json_t *root, int ranks_per_node) {
    const DeviceInfo *info = device_info(b->dev);
    json_t *machine = json_object_get(root, "machine");
    double memory = (double)info->memory_bytes;
    if (memory == 0) memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / ranks_per_node;
    json_object_set_new(machine, "device", json_string(device_name(b->dev)));
    json_object_set_new(machine, "device_name", json_string(info->name));
    json_object_set_new(machine, "ranks_per_node", json_integer(ranks_per_node));
    json_object_set_new(machine, "memory_bytes", json_real(memory * ranks_per_node));
    if (info->multiprocessors > 0) json_object_set_new(machine, "multiprocessors", json_integer(info->multiprocessors));
    if (b->cfg->kind == DEVICE_SIM) { /* sim's kernels run on the host's cores */
        json_object_set_new(machine, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
        json_object_set_new(machine, "threads_per_rank", json_integer(b->cfg->threads));
    }
}

/* Rank 0's measurements of its device: the file's root. */
static json_t *measure_device(Bench *b, int ranks_per_node) {
    json_t *root = calibration_root();
    describe(b, root, ranks_per_node);
    json_object_set_new(root, "precision", json_string(b->cfg->bf16 ? "bf16" : "fp32"));
    json_object_set_new(root, "matmul", measure_products(b));
    json_object_set_new(root, "attention", measure_attention(b));
    measure_copies(b, root);
    json_object_set_new(root, "elementwise", json_pack("{s:f, s:s}", "bytes_per_s", measure_elementwise(b), "method",
                                                       "engine GELU + LayerNorm forward/backward + residual on the device"));
    return root;
}

int calibrate_device(Comm *world, const DeviceCalibration *cfg) {
    int ranks_per_node;
    DeviceOptions options = {.seed = 1, .gpu = gpu_comm_local_rank(world, &ranks_per_node)};
    char reason[256];
    const bool sim = cfg->kind == DEVICE_SIM;
    Bench b = {.cfg = cfg, .flop_cap = cfg->quick ? 1.5e9 : sim ? 2e9 : 1e30, .small = cfg->quick || sim};
    b.dev = device_open(cfg->kind, &options, reason, sizeof reason);
    if (!b.dev) bs_die("--device %s: %s", sim ? "sim" : "cuda", reason);
    b.stream = device_stream_create(b.dev);
    if (!b.stream) bs_die("device %s: %s", device_name(b.dev), device_error(b.dev));
    const bool lead = comm_rank(world) == 0; /* measures its device while the others wait */
    json_t *root = lead ? measure_device(&b, ranks_per_node) : NULL;
    comm_barrier(world);
    json_t *coll = comm_size(world) > 1 ? measure_device_collectives(&b, world) : NULL;
    if (lead) {
        if (coll) json_object_set_new(root, "collectives", coll);
        calibration_write(cfg->path, root);
        json_t *link = json_object_get(root, "host_link");
        printf("calibration written to %s: %s, %zu products (%s), memory %.1f GB/s, host link %.1f / %.1f GB/s%s\n",
               cfg->path, device_info(b.dev)->name, json_array_size(json_object_get(root, "matmul")),
               cfg->bf16 ? "bf16" : "fp32",
               json_real_value(json_object_get(json_object_get(root, "memory_bandwidth"), "bytes_per_s")) / 1e9,
               json_real_value(json_object_get(link, "host_to_device_bytes_per_s")) / 1e9,
               json_real_value(json_object_get(link, "device_to_host_bytes_per_s")) / 1e9,
               coll ? ", collectives measured" : " (run under mpirun to measure collectives)");
        json_decref(root);
    } else {
        json_decref(coll);
    }
    device_stream_destroy(b.dev, b.stream);
    device_close(b.dev);
    return 0;
}
