/* test_device_sim.c: the device seam itself. On any device: copies there
 * and back, and a producer on one stream feeding a consumer on another
 * through an event. On sim, also what sim exists to catch: new memory reads
 * NaN, independent streams really run in more than one order, a consumer
 * whose event wait is removed reads its input before the producer wrote it
 * under some seeds, and a gradient accumulated into a buffer nobody
 * initialised comes out NaN; and a memory limit refuses what does not fit. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "device_harness.h"

enum { COUNT = 4096, SEEDS = 32 };

static int any_nan(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != x[i]) return 1;
    return 0;
}

static void test_round_trip(Harness *h) {
    float x[COUNT], y[COUNT];
    for (int i = 0; i < COUNT; i++) x[i] = (float)i * 0.25f - 7;
    float *a = harness_upload(h, x, sizeof x), *b = harness_alloc(h, sizeof x);
    harness_check(h, device_copy(h->dev, h->stream, b, a, sizeof x, COPY_DEVICE_TO_DEVICE), "copy");
    harness_download(h, y, b, sizeof y);
    CHECK(memcmp(x, y, sizeof x) == 0, "host -> device -> device -> host changed the data");
    device_free(h->dev, a);
    device_free(h->dev, b);
}

/* Producer (copy in, on its own stream) -> event -> consumer (residual on
 * h->stream): out = x + x. Returns whether the result is right. */
static int producer_consumer(Harness *h, int wait) {
    float x[COUNT], y[COUNT];
    for (int i = 0; i < COUNT; i++) x[i] = (float)i;
    DeviceStream *producer = device_stream_create(h->dev);
    DeviceEvent *ready = device_event_create(h->dev);
    float *in = harness_alloc(h, sizeof x), *out = harness_alloc(h, sizeof x);
    harness_check(h, device_copy(h->dev, producer, in, x, sizeof x, COPY_HOST_TO_DEVICE), "copy in");
    harness_check(h, device_event_record(h->dev, producer, ready), "record");
    if (wait) harness_check(h, device_stream_wait(h->dev, h->stream, ready), "wait");
    DeviceCall call = {.kernel = DK_RESIDUAL_FORWARD};
    call.a.elementwise = (ElementwiseArgs){out, in, in, COUNT};
    harness_launch(h, &call);
    harness_download(h, y, out, sizeof y);
    int right = 1;
    for (int i = 0; i < COUNT; i++) right &= y[i] == 2 * x[i];
    device_free(h->dev, in);
    device_free(h->dev, out);
    device_event_destroy(h->dev, ready);
    device_stream_destroy(h->dev, producer);
    return right;
}

/* sim with a memory limit: what does not fit is refused with the reason; freeing makes room again. */
static void test_memory_limit(void) {
    DeviceOptions opt = {.seed = 1, .memory_limit = 1000};
    char reason[256];
    Device *d = device_open(DEVICE_SIM, &opt, reason, sizeof reason);
    void *a = device_alloc(d, 600), *b = device_alloc(d, 600);
    CHECK(a && !b && strstr(device_error(d), "out of device memory"), "sim: 1200 bytes fit in 1000 (%s)", device_error(d));
    device_free(d, a);
    b = device_alloc(d, 1000);
    CHECK(b != NULL, "sim: freed memory was not given back");
    device_free(d, b);
    device_close(d);
}

static void test_nan_fill(Harness *h) {
    float y[COUNT];
    float *a = harness_alloc(h, sizeof y);
    harness_download(h, y, a, sizeof y);
    int all = 1;
    for (int i = 0; i < COUNT; i++) all &= y[i] != y[i];
    CHECK(all, "sim: a new allocation is not all NaN");
    device_free(h->dev, a);
}

/* Two streams write different values to one buffer with nothing ordering
 * them: over the seeds, both orders must occur. */
static int last_writer(Harness *h) {
    const float one = 1, two = 2;
    float y;
    DeviceStream *other = device_stream_create(h->dev);
    float *a = harness_alloc(h, sizeof y);
    harness_check(h, device_copy(h->dev, h->stream, a, &one, sizeof one, COPY_HOST_TO_DEVICE), "copy");
    harness_check(h, device_copy(h->dev, other, a, &two, sizeof two, COPY_HOST_TO_DEVICE), "copy");
    harness_check(h, device_sync(h->dev), "sync");
    harness_download(h, &y, a, sizeof y);
    device_free(h->dev, a);
    device_stream_destroy(h->dev, other);
    return (int)y;
}

/* LayerNorm's backward adds into dweight and dbias: with them initialised the
 * result is finite; with the initialisation removed it is NaN. */
static int uninitialised_accumulator(Harness *h, int initialise) {
    enum { ROWS = 8, CH = 16 };
    float host[ROWS * CH], zeros[ROWS * CH] = {0}, stats[ROWS], dw[CH];
    for (int i = 0; i < ROWS * CH; i++) host[i] = sinf((float)i);
    for (int i = 0; i < ROWS; i++) stats[i] = 0.5f;
    DeviceCall call = {.kernel = DK_LAYERNORM_BACKWARD};
    call.a.layernorm = (LayernormArgs){.dinp = harness_upload(h, zeros, sizeof zeros),
                                       .dweight = harness_alloc(h, sizeof dw), .dbias = harness_alloc(h, sizeof dw),
                                       .inp = harness_upload(h, host, sizeof host), .weight = harness_upload(h, host, sizeof dw),
                                       .dout = harness_upload(h, host, sizeof host), .mean = harness_upload(h, stats, sizeof stats),
                                       .rstd = harness_upload(h, stats, sizeof stats), .N = ROWS, .C = CH};
    if (initialise) {
        harness_check(h, device_copy(h->dev, h->stream, call.a.layernorm.dweight, zeros, sizeof dw, COPY_HOST_TO_DEVICE), "zero");
        harness_check(h, device_copy(h->dev, h->stream, call.a.layernorm.dbias, zeros, sizeof dw, COPY_HOST_TO_DEVICE), "zero");
    }
    harness_launch(h, &call);
    harness_download(h, dw, call.a.layernorm.dweight, sizeof dw);
    return any_nan(dw, CH);
}

int main(int argc, char **argv) {
    Harness h = harness_open(argc, argv, 1);
    const int sim = strcmp(device_name(h.dev), "sim") == 0;
    test_round_trip(&h);
    CHECK(uninitialised_accumulator(&h, 1) == 0, "an initialised accumulator came out NaN");
    int right = 0, wrong_without_wait = 0, order[3] = {0, 0, 0};
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        harness_close(&h);
        h = harness_open(argc, argv, seed);
        right += producer_consumer(&h, 1);
        wrong_without_wait += sim && !producer_consumer(&h, 0);
        if (sim) order[last_writer(&h)]++;
    }
    printf("with the event wait: %d of %d seeds right\n", right, SEEDS);
    CHECK(right == SEEDS, "producer -> event -> consumer wrong under %d seeds", SEEDS - right);
    if (sim) {
        test_nan_fill(&h);
        test_memory_limit();
        printf("wait removed: %d of %d seeds read the input before it was written\n", wrong_without_wait, SEEDS);
        CHECK(wrong_without_wait > 0, "sim: removing the event wait went unnoticed under all %d seeds", SEEDS);
        printf("unordered writers: stream 1 last under %d seeds, stream 2 under %d\n", order[1], order[2]);
        CHECK(order[1] > 0 && order[2] > 0, "sim: two unordered streams always ran in one order");
        int nan = uninitialised_accumulator(&h, 0);
        printf("initialisation removed: dweight %s\n", nan ? "NaN (caught)" : "finite (missed)");
        CHECK(nan, "sim: an accumulator nobody initialised did not come out NaN");
    }
    harness_close(&h);
    printf("%s\n", failures ? "FAILED" : "seam checks passed");
    return failures != 0;
}
