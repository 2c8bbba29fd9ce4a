/* test_device_comm.c: the collectives on device buffers (comm/device_comm.h)
 * against the same collectives on host buffers through the CPU path (comm.h),
 * for the group sizes CTest launches under mpirun.
 *
 * Every input is uploaded on the compute stream without a synchronisation and
 * every result read back on it after device_comm_wait, so on sim (shuffled
 * order, NaN-filled allocations) a missing wait on either side shows up as a
 * wrong or NaN value. Exact operations (all-gather, broadcast, send/receive,
 * all-to-all-v) must match bit for bit; so must the reductions on the host
 * path, which runs the group's own CPU collective on the same floats (same
 * algorithm, so the same summation order). On nccl with one rank a reduction
 * is the rank's own values (bitwise); with more ranks NCCL's order is its own:
 * within (ranks - 1) * 2^-23 * sum |x| per element, the bound of any order of
 * a float sum (2^-24 per addition; twice that covers the average's scaling).
 * Inputs are random floats, so the order matters. A control checks that the
 * test can fail: reading the result without device_comm_wait gives stale
 * values under some seed of sim's order.
 *
 * With `stall`, rank 1 never joins: rank 0's all-reduce on device buffers
 * must end the job within the group's timeout (1 s) with the CPU path's line
 * naming the operation, the group and rank 1 (CTest matches it).
 *
 * A number instead emulates nodes of that many ranks, so the hierarchical
 * algorithm's passes are not trivial.
 *
 * usage: test_device_comm sim|cuda [host|nccl|auto [stall|RANKS_PER_NODE]] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"
#include "comm/device_comm.h"
#include "device_harness.h"

typedef struct {
    Comm *world;
    Harness h;
    DeviceComm *dc;
    bool exact_sums; /* reductions must match the CPU collective bit for bit */
} Ctx;

static float random_float(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 2.0 - 1.0) * 3.0f;
}

static float *random_floats(int rank, size_t n, uint64_t salt) {
    float *x = malloc((n + 1) * sizeof(float));
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + salt;
    for (size_t i = 0; i < n; i++) x[i] = random_float(&s);
    return x;
}

/* A device copy of host, queued on the compute stream (no synchronisation). */
static float *upload(Ctx *c, const float *host, size_t n) {
    float *d = harness_alloc(&c->h, (n + 1) * sizeof(float));
    harness_check(&c->h, device_copy(c->h.dev, c->h.stream, d, host, n * sizeof(float), COPY_HOST_TO_DEVICE), "upload");
    return d;
}

/* host = the device buffer, read on the compute stream after the group's operations. */
static void download(Ctx *c, float *host, const float *d, size_t n) {
    device_comm_wait(c->dc);
    harness_download(&c->h, host, d, n * sizeof(float));
}

/* Failures summed over the ranks; rank 0 prints one line per failing case. */
static void report(Ctx *c, const char *what, size_t n, int bad) {
    double b = bad;
    comm_allreduce_double(c->world, &b, 1);
    if (b > 0) {
        failures++;
        if (comm_rank(c->world) == 0)
            printf("FAIL %s (%s, %s) n=%zu size=%d: %.0f wrong values\n", what, device_comm_path(c->dc),
                   comm_algo_name(comm_algo(c->world)), n, comm_size(c->world), b);
    }
}

/* Values that differ: bitwise, or (a reduction on nccl over many ranks) beyond the bound. */
static int count_diff(const Ctx *c, const float *got, const float *want, const float *magnitude, size_t n, bool sum) {
    int bad = 0;
    const int size = comm_size(c->world);
    for (size_t i = 0; i < n; i++) {
        if (!sum || c->exact_sums) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
        else bad += !(fabsf(got[i] - want[i]) <= (float)(size - 1) * 0x1p-23f * magnitude[i]);
    }
    return bad;
}

/* sum over ranks of |x|: the scale of a reduction's rounding */
static float *magnitudes(Ctx *c, const float *x, size_t n) {
    float *m = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) m[i] = fabsf(x[i]);
    comm_allreduce(c->world, m, n);
    return m;
}

static void check_allreduce(Ctx *c, size_t n, bool average) {
    const int size = comm_size(c->world);
    float *x = random_floats(comm_rank(c->world), n, 1), *want = malloc((n + 1) * sizeof(float));
    float *got = malloc((n + 1) * sizeof(float)), *mag = magnitudes(c, x, n);
    memcpy(want, x, n * sizeof(float));
    comm_allreduce(c->world, want, n);
    for (size_t i = 0; average && i < n; i++) want[i] *= 1.0f / (float)size;
    float *d = upload(c, x, n);
    device_comm_allreduce(c->dc, d, n, average);
    download(c, got, d, n);
    report(c, average ? "all-reduce (average)" : "all-reduce", n, count_diff(c, got, want, mag, n, true));
    device_free(c->h.dev, d);
    free(x), free(want), free(got), free(mag);
}

static void check_window(Ctx *c, size_t total, size_t woff, size_t n) {
    const int rank = comm_rank(c->world);
    float *x = random_floats(rank, n, 2), *want = malloc((n + 1) * sizeof(float));
    float *got = malloc((n + 1) * sizeof(float)), *mag = magnitudes(c, x, n);
    size_t off, cnt;
    comm_partition(c->world, total, rank, &off, &cnt);
    const size_t a = off > woff ? off : woff, b = off + cnt < woff + n ? off + cnt : woff + n;
    const size_t lo = b > a ? a - woff : 0, mine = b > a ? b - a : 0; /* window ∩ own part, in the window */
    memcpy(want, x, n * sizeof(float));
    comm_reduce_scatter(c->world, want, woff, n, total);
    float *d = upload(c, x, n);
    device_comm_reduce_scatter(c->dc, d, woff, n, total);
    download(c, got, d, n);
    report(c, "reduce-scatter", n, count_diff(c, got + lo, want + lo, mag + lo, mine, true));
    device_free(c->h.dev, d);
    /* all-gather: each rank's own part of its input goes to every rank */
    d = upload(c, x, n);
    memcpy(want, x, n * sizeof(float));
    comm_allgather(c->world, want, woff, n, total);
    device_comm_allgather(c->dc, d, woff, n, total);
    download(c, got, d, n);
    report(c, "all-gather", n, count_diff(c, got, want, NULL, n, false));
    device_free(c->h.dev, d);
    free(x), free(want), free(got), free(mag);
}

static void check_broadcast(Ctx *c, size_t n) {
    const int root = comm_size(c->world) - 1;
    float *x = random_floats(comm_rank(c->world), n, 3), *got = malloc((n + 1) * sizeof(float));
    float *want = random_floats(root, n, 3);
    float *d = upload(c, x, n);
    device_comm_broadcast(c->dc, d, n, root);
    download(c, got, d, n);
    report(c, "broadcast", n, count_diff(c, got, want, NULL, n, false));
    device_free(c->h.dev, d);
    free(x), free(want), free(got);
}

/* A ring: each rank sends to the next and receives from the previous, as
 * one send/receive (any group size: one rank sends to itself), and on the
 * host path also as a send then a receive (the send stays in flight). */
static void check_send_recv(Ctx *c, size_t n) {
    const int size = comm_size(c->world), rank = comm_rank(c->world);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    float *x = random_floats(rank, n, 4), *want = random_floats(prev, n, 4), *got = malloc((n + 1) * sizeof(float));
    float *d_send = upload(c, x, n), *d_recv = harness_alloc(&c->h, (n + 1) * sizeof(float));
    device_comm_sendrecv(c->dc, d_send, n, next, d_recv, n, prev, 7);
    download(c, got, d_recv, n);
    report(c, "send/receive", n, count_diff(c, got, want, NULL, n, false));
    if (size > 1 && strcmp(device_comm_path(c->dc), "host") == 0) {
        device_free(c->h.dev, d_recv);
        d_recv = harness_alloc(&c->h, (n + 1) * sizeof(float));
        device_comm_send(c->dc, d_send, n, next, 8);
        device_comm_recv(c->dc, d_recv, n, prev, 8);
        device_comm_finish(c->dc);
        download(c, got, d_recv, n);
        report(c, "send, then receive", n, count_diff(c, got, want, NULL, n, false));
    }
    device_free(c->h.dev, d_send);
    device_free(c->h.dev, d_recv);
    free(x), free(want), free(got);
}

static void check_alltoallv(Ctx *c, size_t scale) {
    const int size = comm_size(c->world), rank = comm_rank(c->world);
    size_t *sc = malloc(sizeof(size_t) * (size_t)size), *rc = malloc(sizeof(size_t) * (size_t)size), ns = 0, nr = 0;
    for (int r = 0; r < size; r++) {
        sc[r] = scale * (size_t)((rank + 2 * r) % 3) + (size_t)r; /* some empty blocks, none alike */
        rc[r] = scale * (size_t)((r + 2 * rank) % 3) + (size_t)rank;
        ns += sc[r];
        nr += rc[r];
    }
    float *x = random_floats(rank, ns, 5), *want = malloc((nr + 1) * sizeof(float)), *got = malloc((nr + 1) * sizeof(float));
    comm_wait(comm_start_alltoallv(c->world, x, sc, want, rc, sizeof(float)));
    float *d_send = upload(c, x, ns), *d_recv = harness_alloc(&c->h, (nr + 1) * sizeof(float));
    device_comm_alltoallv(c->dc, d_send, sc, d_recv, rc, sizeof(float));
    download(c, got, d_recv, nr);
    report(c, "all-to-all-v", nr, count_diff(c, got, want, NULL, nr, false));
    device_free(c->h.dev, d_send);
    device_free(c->h.dev, d_recv);
    free(sc), free(rc), free(x), free(want), free(got);
}

/* Rank 0 sends nothing and receives n floats from every other rank (an expert no row chose, its outputs'
 * return): its staging memory's send and receive parts must not start at one address, which Open MPI takes for
 * MPI_IN_PLACE (it would then send its receive counts and, past the eager size, wait for peers that never
 * receive them). */
static void check_alltoallv_silent_rank(Ctx *c, size_t n) {
    const int size = comm_size(c->world), rank = comm_rank(c->world);
    size_t *sc = calloc((size_t)size, sizeof(size_t)), *rc = calloc((size_t)size, sizeof(size_t)), nr = 0;
    for (int r = 1; r < size; r++) rc[r] = rank == 0 ? n : 0, nr += rc[r];
    if (rank > 0) sc[0] = n;
    float *x = random_floats(rank, n, 6), *want = malloc((nr + 1) * sizeof(float)), *got = malloc((nr + 1) * sizeof(float));
    comm_wait(comm_start_alltoallv(c->world, x, sc, want, rc, sizeof(float)));
    float *d_send = upload(c, x, rank > 0 ? n : 0), *d_recv = harness_alloc(&c->h, (nr + 1) * sizeof(float));
    device_comm_alltoallv(c->dc, d_send, sc, d_recv, rc, sizeof(float));
    device_comm_alltoallv(c->dc, d_send, sc, d_recv, rc, sizeof(float)); /* again: a stray send would meet it */
    download(c, got, d_recv, nr);
    report(c, "all-to-all-v, rank 0 sending nothing", nr, count_diff(c, got, want, NULL, nr, false));
    device_free(c->h.dev, d_send);
    device_free(c->h.dev, d_recv);
    free(sc), free(rc), free(x), free(want), free(got);
}

/* The control: without device_comm_wait the compute stream's read is not
 * ordered after the copy back, and some seed of sim's order reads the input. */
static void check_missing_wait_is_caught(Ctx *c) {
    const size_t n = 64;
    if (comm_size(c->world) < 2 || strcmp(device_name(c->h.dev), "sim") != 0) return;
    float *x = random_floats(comm_rank(c->world), n, 6), *got = malloc(n * sizeof(float));
    int stale = 0;
    for (int trial = 0; trial < 16; trial++) {
        float *d = upload(c, x, n);
        device_comm_allreduce(c->dc, d, n, false);
        harness_download(&c->h, got, d, n * sizeof(float)); /* no device_comm_wait */
        stale += memcmp(got, x, n * sizeof(float)) == 0;
        device_free(c->h.dev, d);
    }
    double s = stale;
    comm_allreduce_double(c->world, &s, 1);
    CHECK(s > 0, "a read without device_comm_wait never saw the input in 16 trials: sim did not catch it");
    free(x), free(got);
}

/* Rank 1 sleeps past the timeout; rank 0's all-reduce must end the job first. */
static void stall(Ctx *c) {
    comm_set_algo(c->world, COMM_ALGO_RING); /* names the rank it waits for */
    if (comm_rank(c->world) == 1) {
        sleep(30);
        printf("FAIL: rank 1 woke up: rank 0 did not end the job within the timeout\n");
        exit(1);
    }
    float x[1000] = {0};
    float *d = upload(c, x, 1000);
    device_comm_allreduce(c->dc, d, 1000, false);
    printf("FAIL: the all-reduce returned without rank 1\n");
    exit(1);
}

/* The path rule (gpu_comm_rule) on layouts no machine here has, and this job's machine detection. */
static void check_path_rule(Comm *world) {
    struct {
        bool sim;
        int ranks, gpus;
        GpuCommKind asked, want;
        int rc;
    } cases[] = {
        {true, 1, 0, GPU_COMM_AUTO, GPU_COMM_HOST, 0},   {true, 4, 0, GPU_COMM_NCCL, GPU_COMM_NCCL, -1},
        {false, 1, 1, GPU_COMM_AUTO, GPU_COMM_NCCL, 0},  {false, 8, 8, GPU_COMM_AUTO, GPU_COMM_NCCL, 0},
        {false, 2, 1, GPU_COMM_AUTO, GPU_COMM_HOST, 0},  {false, 2, 1, GPU_COMM_NCCL, GPU_COMM_NCCL, -1},
        {false, 9, 8, GPU_COMM_AUTO, GPU_COMM_HOST, 0},  {false, 8, 8, GPU_COMM_HOST, GPU_COMM_HOST, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        GpuCommKind got;
        char reason[256] = "";
        int rc = gpu_comm_rule(cases[i].sim, cases[i].ranks, cases[i].gpus, cases[i].asked, &got, reason, sizeof reason);
        CHECK(rc == cases[i].rc && (rc != 0 || got == cases[i].want), "rule case %zu: rc %d path %s", i, rc,
              gpu_comm_name(got));
        CHECK(rc == 0 || (reason[0] && !strchr(reason, '\n')), "rule case %zu: no one-line reason", i);
    }
    char reason[256];
    GpuCommKind got;
    gpu_comm_rule(false, 2, 1, GPU_COMM_NCCL, &got, reason, sizeof reason);
    CHECK(strstr(reason, "2 ranks of a node share 1 GPU"), "the refusal does not say why: %s", reason);
    int local_size = 0, local = gpu_comm_local_rank(world, &local_size);
    CHECK(local_size == comm_size(world) && local == comm_rank(world), "one machine: local rank %d of %d", local,
          local_size);
}

static void run_all(Ctx *c) {
    const size_t lengths[] = {0, 1, 7, 1000, 70001};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        check_allreduce(c, lengths[i], false);
        check_allreduce(c, lengths[i], true);
        check_broadcast(c, lengths[i]);
        check_send_recv(c, lengths[i]);
    }
    check_window(c, 1001, 0, 1001);  /* the whole buffer, not divisible by 2..4 */
    check_window(c, 1001, 37, 777);  /* a window cutting parts */
    check_window(c, 10007, 9000, 5); /* a window inside one or two parts */
    check_window(c, 3, 0, 3);        /* fewer elements than ranks */
    check_alltoallv(c, 0);
    check_alltoallv(c, 513);
    check_alltoallv_silent_rank(c, 70001); /* past Open MPI's eager size */
}

int main(int argc, char **argv) {
    const bool stalling = argc > 3 && strcmp(argv[3], "stall") == 0;
    const int ranks_per_node = argc > 3 && !stalling ? atoi(argv[3]) : 0;
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, ranks_per_node, stalling ? 1.0 : 60.0, "world");
    Ctx c = {.world = world, .h = harness_open(argc, argv, 1234 + (uint64_t)comm_world_rank(world))};
    GpuCommKind asked = GPU_COMM_AUTO, path;
    if (argc > 2 && !gpu_comm_parse(argv[2], &asked)) {
        printf("FAIL: unknown path %s\n", argv[2]);
        return 1;
    }
    char reason[256] = "";
    if (gpu_comm_choose(world, c.h.dev, asked, &path, reason, sizeof reason) != 0) {
        const char *require = getenv("BS_REQUIRE_GPU");
        const bool required = require && strcmp(require, "1") == 0;
        printf("%s: %s\n", required ? "FAIL (BS_REQUIRE_GPU=1)" : "skipped", reason);
        return required ? 1 : HARNESS_SKIP;
    }
    if (strcmp(device_name(c.h.dev), "sim") == 0) {
        CHECK(path == GPU_COMM_HOST, "sim chose %s, not host", gpu_comm_name(path));
        CHECK(gpu_comm_choose(world, c.h.dev, GPU_COMM_NCCL, &path, reason, sizeof reason) == -1 && reason[0],
              "nccl on sim was not refused with a reason");
        path = GPU_COMM_HOST;
    }
    c.dc = device_comm_create(world, c.h.dev, c.h.stream, path, reason, sizeof reason);
    if (!c.dc) {
        printf("FAIL: %s path: %s\n", gpu_comm_name(path), reason);
        return 1;
    }
    c.exact_sums = path == GPU_COMM_HOST || comm_size(world) == 1;
    if (stalling) stall(&c);
    check_path_rule(world);
    const CommAlgo algos[] = {COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL};
    for (int a = 0; a < 3; a++) {
        comm_set_algo(world, algos[a]);
        run_all(&c);
    }
    check_missing_wait_is_caught(&c);
    if (comm_rank(world) == 0)
        printf("%s: %s path on %s, %d ranks\n", failures ? "FAILED" : "ok", device_comm_path(c.dc), device_name(c.h.dev),
               comm_size(world));
    device_comm_free(c.dc);
    harness_close(&c.h);
    comm_finalize(world);
    return failures ? 1 : 0;
}
