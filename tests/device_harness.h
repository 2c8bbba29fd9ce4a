/* device_harness.h: what the device tests share: the device named on the
 * command line (sim, or cuda: skipped with exit 77 and the reason where no
 * GPU answers, a failure instead when BS_REQUIRE_GPU=1), one stream, and
 * copies to and from it that wait for their result. */
#ifndef BS_TESTS_DEVICE_HARNESS_H
#define BS_TESTS_DEVICE_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"

enum { HARNESS_SKIP = 77 };

typedef struct {
    Device *dev;
    DeviceStream *stream;
} Harness;

/* argv[1] is "sim" or "cuda"; exits (77 or 1) when the device cannot be opened */
static inline Harness harness_open(int argc, char **argv, uint64_t seed) {
    const char *name = argc > 1 ? argv[1] : "sim";
    DeviceKind kind = strcmp(name, "cuda") == 0 ? DEVICE_CUDA : DEVICE_SIM;
    DeviceOptions opt = {.seed = seed};
    char reason[256];
    Harness h = {device_open(kind, &opt, reason, sizeof reason), NULL};
    if (!h.dev) {
        const char *require = getenv("BS_REQUIRE_GPU");
        int required = require && strcmp(require, "1") == 0;
        printf("%s: %s\n", required ? "FAIL (BS_REQUIRE_GPU=1)" : "skipped", reason);
        exit(required ? 1 : HARNESS_SKIP);
    }
    h.stream = device_stream_create(h.dev);
    if (!h.stream) {
        printf("FAIL: stream: %s\n", device_error(h.dev));
        exit(1);
    }
    return h;
}

static inline void harness_close(Harness *h) {
    device_stream_destroy(h->dev, h->stream);
    device_close(h->dev);
}

static inline void harness_check(const Harness *h, int rc, const char *what) {
    if (rc != 0) {
        printf("FAIL: %s: %s\n", what, device_error(h->dev));
        exit(1);
    }
}

/* a device copy of host (n bytes) */
static inline void *harness_upload(Harness *h, const void *host, size_t n) {
    void *p = device_alloc(h->dev, n);
    if (!p) harness_check(h, -1, "alloc");
    harness_check(h, device_copy(h->dev, h->stream, p, host, n, COPY_HOST_TO_DEVICE), "copy in");
    harness_check(h, device_stream_sync(h->dev, h->stream), "sync");
    return p;
}

/* a new device buffer of n bytes, uninitialised */
static inline void *harness_alloc(Harness *h, size_t n) {
    void *p = device_alloc(h->dev, n);
    if (!p) harness_check(h, -1, "alloc");
    return p;
}

/* host (n bytes) = device, after everything queued */
static inline void harness_download(Harness *h, void *host, const void *dev, size_t n) {
    harness_check(h, device_copy(h->dev, h->stream, host, dev, n, COPY_DEVICE_TO_HOST), "copy out");
    harness_check(h, device_stream_sync(h->dev, h->stream), "sync");
}

/* max |got - want| / max |want| (a NaN in got counts as one): each output's
 * error relative to its largest magnitude, which sums in another order
 * keep small where an elementwise bound fails on outputs that cancel to 0 */
static inline double harness_relative_error(const float *got, const float *want, size_t n) {
    double err = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        err = d > err || d != d ? d : err;
        top = fabs(want[i]) > top ? fabs(want[i]) : top;
    }
    return top > 0 ? err / top : err;
}

static inline void harness_launch(Harness *h, const DeviceCall *call) {
    harness_check(h, device_launch(h->dev, h->stream, call), "launch");
}

#endif
