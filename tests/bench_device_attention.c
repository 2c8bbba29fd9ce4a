/* bench_device_attention.c: the fused attention (DK_FLASH_*) against the
 * unfused kernels (DK_ATTENTION_*, which keep P) on a device, timed on the
 * host's clock around a synchronisation: one warm-up, then REPS calls of
 * the forward and of forward + backward. One JSON line per kernel; nothing
 * is asserted (a GPU measurement: scripts/gpu-check.sh runs it at GPT-2
 * 124M's shapes; CTest runs it on sim at a tiny shape so it keeps working).
 * usage: bench_device_attention sim|cuda B T C H REPS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/rng.h"
#include "device/flash_math.h"
#include "device_harness.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* milliseconds per repetition of calls[0..n) */
static double time_calls(Harness *h, const DeviceCall *calls, int n, int reps) {
    for (int i = 0; i < n; i++) harness_launch(h, &calls[i]);
    harness_check(h, device_sync(h->dev), "sync");
    const double start = now();
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n; i++) harness_launch(h, &calls[i]);
    harness_check(h, device_sync(h->dev), "sync");
    return (now() - start) / reps * 1e3;
}

static float *random_buffer(Harness *h, Rng *rng, size_t n) {
    float *x = malloc(sizeof *x * n);
    if (!x) harness_check(h, -1, "host memory");
    for (size_t i = 0; i < n; i++) x[i] = 2 * rng_uniform(rng) - 1;
    float *d = harness_upload(h, x, sizeof *x * n);
    free(x);
    return d;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: bench_device_attention sim|cuda B T C H REPS\n");
        return 2;
    }
    const int B = atoi(argv[2]), T = atoi(argv[3]), C = atoi(argv[4]), H = atoi(argv[5]), reps = atoi(argv[6]);
    if (B < 1 || T < 1 || H < 1 || C % H != 0 || C / H > FLASH_MAX_HEAD || reps < 1) {
        fprintf(stderr, "bench_device_attention: B, T, H, REPS >= 1 and C / H a whole head of at most %d\n", FLASH_MAX_HEAD);
        return 2;
    }
    Harness h = harness_open(2, argv, 1);
    Rng rng;
    rng_seed(&rng, 45);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * H * T * T;
    float *qkv = random_buffer(&h, &rng, nqkv), *dout = random_buffer(&h, &rng, nout);
    float *out = harness_alloc(&h, sizeof(float) * nout), *dqkv = harness_alloc(&h, sizeof(float) * nqkv);
    float *lse = harness_alloc(&h, sizeof(float) * B * H * T);
    DeviceCall fused[2] = {{.kernel = DK_FLASH_FORWARD}, {.kernel = DK_FLASH_BACKWARD}};
    fused[0].a.flash = fused[1].a.flash = flash_self_attention(out, lse, dqkv, qkv, dout, NULL, B, T, C, H);
    float *att = device_alloc(h.dev, sizeof(float) * natt), *scratch = att ? device_alloc(h.dev, sizeof(float) * natt) : NULL;
    const char *fmt = "{\"bench\": \"device_attention\", \"device\": \"%s\", \"kernel\": \"%s\", \"B\": %d, \"T\": %d, "
                      "\"C\": %d, \"H\": %d, \"forward_ms\": %.4g, \"forward_backward_ms\": %.4g}\n";
    printf(fmt, device_name(h.dev), "flash2", B, T, C, H, time_calls(&h, fused, 1, reps), time_calls(&h, fused, 2, reps));
    if (!scratch) { /* P and its scratch do not fit: said, not timed */
        printf("{\"bench\": \"device_attention\", \"kernel\": \"causal\", \"skipped\": \"no room for P (%zu bytes, twice)\"}\n",
               sizeof(float) * natt);
    } else {
        DeviceCall plain[2] = {{.kernel = DK_ATTENTION_FORWARD}, {.kernel = DK_ATTENTION_BACKWARD}};
        plain[0].a.attention = plain[1].a.attention = (AttentionArgs){out, att, dqkv, scratch, qkv, dout, NULL, B, T, C, H};
        printf(fmt, device_name(h.dev), "causal", B, T, C, H, time_calls(&h, plain, 1, reps), time_calls(&h, plain, 2, reps));
    }
    void *bufs[] = {qkv, dout, out, dqkv, lse, att, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) device_free(h.dev, bufs[i]);
    harness_close(&h);
    return 0;
}
