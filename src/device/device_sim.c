/* device_sim.c: the device seam run on the host, for tests (device.h).
 *
 * Each stream is a queue. Nothing runs when it is queued: a synchronisation
 * drains every queue by picking, at random from a seeded generator, one
 * stream whose next operation may run, and running it, until all are empty.
 * A stream's own order is kept, and a wait on an event blocks its stream
 * until the record it waits for has run; nothing else orders two streams. A
 * missing wait therefore lets a consumer run before its producer under some
 * seeds, and since new memory is all NaN it reads NaN. Device memory is host
 * memory; copies read their host source when they run, as an asynchronous
 * copy does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/device_impl.h"
#include "device/sim_kernels.h"

typedef enum { SIM_COPY, SIM_LAUNCH, SIM_RECORD, SIM_WAIT } SimOpKind;

typedef struct {
    SimOpKind kind;
    DeviceEvent *event;  /* record, wait */
    uint64_t generation; /* record: this record's number; wait: the record waited for */
    void *dst;
    const void *src;
    size_t n;
    DeviceCall call;
} SimOp;

struct DeviceStream {
    SimOp *ops;
    size_t head, count, cap;
};

struct DeviceEvent {
    uint64_t recorded; /* records queued */
    uint64_t done;     /* the latest record that has run */
};

typedef struct {
    Device base;
    Rng rng;
    size_t limit, used; /* bytes: the simulated memory (0: no limit) and what is allocated */
    DeviceStream **streams;
    int nstreams, cap;
    struct SimBlock *blocks; /* every live allocation: closing the device frees them, as a CUDA context's end does */
} SimDevice;

static SimDevice *sim(Device *d) { return (SimDevice *)d; }

static int sim_push(Device *d, DeviceStream *s, const SimOp *op) {
    if (!s) return device_fail(d, "sim: no stream given");
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        SimOp *ops = realloc(s->ops, cap * sizeof *ops);
        if (!ops) return device_fail(d, "sim: out of host memory for the queue");
        s->ops = ops;
        s->cap = cap;
    }
    s->ops[s->count++] = *op;
    return 0;
}

static int sim_ready(const DeviceStream *s) {
    if (s->head == s->count) return 0;
    const SimOp *op = &s->ops[s->head];
    return op->kind != SIM_WAIT || op->event->done >= op->generation;
}

static void sim_run(const SimOp *op) {
    switch (op->kind) {
    case SIM_COPY:
        if (op->src) memcpy(op->dst, op->src, op->n);
        else memset(op->dst, 0, op->n); /* device_zero */
        break;
    case SIM_LAUNCH: sim_run_kernel(&op->call); break;
    case SIM_RECORD:
        if (op->generation > op->event->done) op->event->done = op->generation;
        break;
    case SIM_WAIT: break;
    }
}

/* Runs everything queued, in a shuffled order that keeps streams and events. */
static int sim_drain(Device *d) {
    SimDevice *sd = sim(d);
    DeviceStream **ready = malloc(sizeof *ready * (size_t)(sd->nstreams ? sd->nstreams : 1));
    if (!ready) return device_fail(d, "sim: out of host memory");
    for (;;) {
        int n = 0, pending = 0;
        for (int i = 0; i < sd->nstreams; i++) {
            pending |= sd->streams[i]->head < sd->streams[i]->count;
            if (sim_ready(sd->streams[i])) ready[n++] = sd->streams[i];
        }
        if (n == 0) {
            free(ready);
            return pending ? device_fail(d, "sim: queued work waits on an event no stream will record") : 0;
        }
        DeviceStream *s = ready[rng_below(&sd->rng, (uint64_t)n)];
        sim_run(&s->ops[s->head++]);
        if (s->head == s->count) s->head = s->count = 0;
    }
}

/* Each block starts with its size and its place in the device's list of live blocks (HEADER bytes, keeping
 * the alignment malloc gives). */
typedef struct SimBlock {
    size_t size;
    struct SimBlock *prev, *next;
} SimBlock;
enum { HEADER = 32 };
_Static_assert(sizeof(SimBlock) <= HEADER, "SimBlock fits its header");

static void *sim_alloc(Device *d, size_t n) {
    SimDevice *sd = sim(d);
    unsigned char *p = sd->limit && n > sd->limit - sd->used ? NULL : malloc(HEADER + n);
    if (!p) {
        device_fail(d, "out of device memory: %zu bytes asked for, %zu of %zu free", n,
                    sd->limit ? sd->limit - sd->used : 0, sd->limit);
        return NULL;
    }
    SimBlock *b = (SimBlock *)p;
    *b = (SimBlock){n, NULL, sd->blocks};
    if (sd->blocks) sd->blocks->prev = b;
    sd->blocks = b;
    sd->used += n;
    if (sd->used > d->memory_peak) d->memory_peak = sd->used;
    memset(p + HEADER, 0xff, n); /* every float NaN, every int -1 */
    return p + HEADER;
}

static void sim_free(Device *d, void *p) {
    SimDevice *sd = sim(d);
    SimBlock *b = (SimBlock *)((unsigned char *)p - HEADER);
    sim_drain(d);
    if (b->prev) b->prev->next = b->next;
    else sd->blocks = b->next;
    if (b->next) b->next->prev = b->prev;
    sd->used -= b->size;
    free(b);
}

static DeviceStream *sim_stream_create(Device *d) {
    SimDevice *sd = sim(d);
    if (sd->nstreams == sd->cap) {
        int cap = sd->cap ? 2 * sd->cap : 8;
        DeviceStream **streams = realloc(sd->streams, sizeof *streams * (size_t)cap);
        if (!streams) return NULL;
        sd->streams = streams;
        sd->cap = cap;
    }
    DeviceStream *s = calloc(1, sizeof *s);
    if (s) sd->streams[sd->nstreams++] = s;
    else device_fail(d, "sim: out of host memory");
    return s;
}

static void sim_stream_destroy(Device *d, DeviceStream *s) {
    SimDevice *sd = sim(d);
    sim_drain(d);
    for (int i = 0; i < sd->nstreams; i++)
        if (sd->streams[i] == s) sd->streams[i] = sd->streams[--sd->nstreams];
    free(s->ops);
    free(s);
}

static DeviceEvent *sim_event_create(Device *d) {
    DeviceEvent *e = calloc(1, sizeof *e);
    if (!e) device_fail(d, "sim: out of host memory");
    return e;
}

static void sim_event_destroy(Device *d, DeviceEvent *e) {
    (void)d;
    free(e);
}

static int sim_copy(Device *d, DeviceStream *s, void *dst, const void *src, size_t n, DeviceCopyKind kind) {
    (void)kind;
    SimOp op = {.kind = SIM_COPY, .dst = dst, .src = src, .n = n};
    return sim_push(d, s, &op);
}

static int sim_zero(Device *d, DeviceStream *s, void *p, size_t n) {
    SimOp op = {.kind = SIM_COPY, .dst = p, .src = NULL, .n = n};
    return sim_push(d, s, &op);
}

static int sim_event_record(Device *d, DeviceStream *s, DeviceEvent *e) {
    SimOp op = {.kind = SIM_RECORD, .event = e, .generation = ++e->recorded};
    return sim_push(d, s, &op);
}

static int sim_stream_wait(Device *d, DeviceStream *s, DeviceEvent *e) {
    if (e->recorded == 0) return 0; /* never recorded: nothing to wait for (as CUDA) */
    SimOp op = {.kind = SIM_WAIT, .event = e, .generation = e->recorded};
    return sim_push(d, s, &op);
}

static int sim_launch(Device *d, DeviceStream *s, const DeviceCall *call) {
    SimOp op = {.kind = SIM_LAUNCH, .call = *call};
    return sim_push(d, s, &op);
}

static int sim_stream_sync(Device *d, DeviceStream *s) {
    (void)s; /* the other streams run too: their order against s is free anyway */
    return sim_drain(d);
}

static void *sim_host_alloc(Device *d, size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) device_fail(d, "sim: out of host memory for %zu bytes of staging", n);
    return p;
}

static void sim_host_free(Device *d, void *p) {
    sim_drain(d);
    free(p);
}

static void *sim_native_stream(Device *d, DeviceStream *s) {
    (void)d;
    (void)s;
    return NULL;
}

static int sim_event_done(Device *d, DeviceEvent *e) {
    (void)e;
    return sim_drain(d) ? -1 : 1;
}

static int sim_gpu_count(Device *d) {
    (void)d;
    return 0;
}

static void sim_close(Device *d) {
    SimDevice *sd = sim(d);
    sim_drain(d);
    for (int i = 0; i < sd->nstreams; i++) {
        free(sd->streams[i]->ops);
        free(sd->streams[i]);
    }
    free(sd->streams);
    while (sd->blocks) {
        SimBlock *next = sd->blocks->next;
        free(sd->blocks);
        sd->blocks = next;
    }
    free(sd);
}

static const DeviceOps sim_ops = {
    .name = "sim",
    .close = sim_close,
    .alloc = sim_alloc,
    .free = sim_free,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .copy = sim_copy,
    .zero = sim_zero,
    .event_record = sim_event_record,
    .stream_wait = sim_stream_wait,
    .launch = sim_launch,
    .stream_sync = sim_stream_sync,
    .sync = sim_drain,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .native_stream = sim_native_stream,
    .event_done = sim_event_done,
    .gpu_count = sim_gpu_count,
};

Device *device_sim_open(const DeviceOptions *options, char *reason, size_t reason_size) {
    SimDevice *sd = calloc(1, sizeof *sd);
    if (!sd) {
        snprintf(reason, reason_size, "sim: out of host memory");
        return NULL;
    }
    sd->base.ops = &sim_ops;
    rng_seed(&sd->rng, options ? options->seed : 0);
    sd->limit = options ? options->memory_limit : 0;
    snprintf(sd->base.info.name, sizeof sd->base.info.name, "sim (the host)");
    sd->base.info.memory_bytes = sd->limit;
    return &sd->base;
}
