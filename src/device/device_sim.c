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
    int captured; /* part of the capture in progress: its work goes into the graph */
};

struct DeviceEvent {
    uint64_t recorded; /* records queued */
    uint64_t done;     /* the latest record that has run */
    uint64_t captured_in; /* its latest record is in the capture of this serial (0: none; graphs below) */
};

/* A captured graph (graphs below). */
typedef struct {
    SimOp op;
    DeviceStream *stream;
} SimGraphOp;

struct DeviceGraph {
    SimGraphOp *ops;
    size_t count, cap;
    uint64_t serial;        /* which capture (DeviceEvent.captured_in) */
    DeviceStream *origin;
    DeviceStream **others;  /* the streams that joined the capture */
    DeviceEvent fork, *joins;
    int nothers;
};

typedef struct {
    Device base;
    Rng rng;
    size_t limit, used; /* bytes: the simulated memory (0: no limit) and what is allocated */
    DeviceStream **streams;
    int nstreams, cap;
    struct SimBlock *blocks; /* every live allocation: closing the device frees them, as a CUDA context's end does */
    DeviceGraph *capture;    /* the graph being captured (NULL: none) */
    uint64_t captures;       /* captures begun (each one's serial) */
} SimDevice;

static int sim_graph_add(Device *d, DeviceStream *s, const SimOp *op);

static SimDevice *sim(Device *d) { return (SimDevice *)d; }

/* Room for one more of an array's items (*items of *cap, count used, each size bytes): 0, or -1 out of memory. */
static int sim_reserve(void **items, size_t *cap, size_t count, size_t size) {
    if (count < *cap) return 0;
    const size_t more = *cap ? 2 * *cap : 64;
    void *grown = realloc(*items, more * size);
    if (!grown) return -1;
    *items = grown;
    *cap = more;
    return 0;
}

static int sim_push(Device *d, DeviceStream *s, const SimOp *op) {
    if (!s) return device_fail(d, "sim: no stream given");
    if (s->captured) return sim_graph_add(d, s, op);
    if (sim_reserve((void **)&s->ops, &s->cap, s->count, sizeof *s->ops))
        return device_fail(d, "sim: out of host memory for the queue");
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

/* Runs everything queued, in a shuffled order that keeps streams and events:
 * each op drawn from the ready streams at random, or (every other drain, at
 * random) from the ready stream of highest priority in an order drawn for the
 * drain, so one stream may run all it can before another starts (a wait left
 * out between two streams then shows whichever stream it should have held back). */
static int sim_drain(Device *d) {
    SimDevice *sd = sim(d);
    if (sd->capture) return device_fail(d, "sim: a synchronisation inside a graph capture");
    const size_t cap = (size_t)(sd->nstreams ? sd->nstreams : 1);
    DeviceStream **ready = malloc(sizeof *ready * cap);
    uint64_t *priority = malloc(sizeof *priority * cap);
    if (!ready || !priority) {
        free(ready);
        free(priority);
        return device_fail(d, "sim: out of host memory");
    }
    const int by_priority = (int)rng_below(&sd->rng, 2);
    for (int i = 0; i < sd->nstreams; i++) priority[i] = rng_next(&sd->rng);
    for (;;) {
        int n = 0, pending = 0, first = 0;
        for (int i = 0; i < sd->nstreams; i++) {
            pending |= sd->streams[i]->head < sd->streams[i]->count;
            if (!sim_ready(sd->streams[i])) continue;
            if (n > 0 && priority[i] > priority[first]) first = i;
            if (n == 0) first = i;
            ready[n++] = sd->streams[i];
        }
        if (n == 0) {
            free(ready);
            free(priority);
            return pending ? device_fail(d, "sim: queued work waits on an event no stream will record") : 0;
        }
        DeviceStream *s = by_priority ? sd->streams[first] : ready[rng_below(&sd->rng, (uint64_t)n)];
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
    if (sd->capture) {
        device_fail(d, "sim: an allocation inside a graph capture");
        return NULL;
    }
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
    if (sim_drain(d) != 0 && sd->capture) return; /* refused inside a capture (the reason set); freed at close */
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
    if (s->captured) { /* numbered when a launch queues it */
        e->captured_in = sim(d)->capture->serial;
        SimOp op = {.kind = SIM_RECORD, .event = e};
        return sim_push(d, s, &op);
    }
    e->captured_in = 0;
    SimOp op = {.kind = SIM_RECORD, .event = e, .generation = ++e->recorded};
    return sim_push(d, s, &op);
}

static int sim_stream_wait(Device *d, DeviceStream *s, DeviceEvent *e) {
    SimDevice *sd = sim(d);
    if (sd->capture && e->captured_in == sd->capture->serial) { /* joins the capture, as CUDA's fork */
        s->captured = 1;
        SimOp op = {.kind = SIM_WAIT, .event = e};
        return sim_push(d, s, &op);
    }
    if (s->captured) return device_fail(d, "sim: a captured stream waits on an event recorded outside the capture");
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
    if (sim_drain(d) != 0 && sim(d)->capture) return; /* refused inside a capture (the reason set) */
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

/* Graphs. A capture appends each operation queued on a captured stream, with
 * its stream, to the graph instead of its queue; events recorded inside are
 * numbered only when a launch queues them again. A launch queues the graph's
 * operations on their streams (the origin's on the launch stream), fenced by
 * a fork (every other stream waits for the launch stream's work so far) and a
 * join (the launch stream waits for every other's), so a replay runs in the
 * same shuffled order as any queued work, with the scalars and pointers the
 * capture saw. */
static int sim_graph_add(Device *d, DeviceStream *s, const SimOp *op) {
    DeviceGraph *g = sim(d)->capture;
    if (sim_reserve((void **)&g->ops, &g->cap, g->count, sizeof *g->ops))
        return device_fail(d, "sim: out of host memory for the graph");
    g->ops[g->count++] = (SimGraphOp){*op, s};
    return 0;
}

static int sim_capture_begin(Device *d, DeviceStream *s) {
    SimDevice *sd = sim(d);
    if (sd->capture) return device_fail(d, "sim: a capture inside a capture");
    if (!(sd->capture = calloc(1, sizeof *sd->capture))) return device_fail(d, "sim: out of host memory");
    sd->capture->origin = s;
    sd->capture->serial = ++sd->captures;
    s->captured = 1;
    return 0;
}

static void sim_graph_release(DeviceGraph *g) {
    free(g->ops);
    free(g->others);
    free(g->joins);
    free(g);
}

/* Whether stream o's last captured operation records an event the origin waits on after it (CUDA's join). */
static int sim_joined(const DeviceGraph *g, const DeviceStream *o) {
    size_t last = g->count;
    for (size_t i = 0; i < g->count; i++)
        if (g->ops[i].stream == o) last = i;
    if (last == g->count || g->ops[last].op.kind != SIM_RECORD) return 0;
    const DeviceEvent *joined = g->ops[last].op.event;
    for (size_t i = last + 1; i < g->count; i++)
        if (g->ops[i].stream == g->origin && g->ops[i].op.kind == SIM_WAIT && g->ops[i].op.event == joined) return 1;
    return 0;
}

static DeviceGraph *sim_capture_end(Device *d, DeviceStream *s) {
    SimDevice *sd = sim(d);
    DeviceGraph *g = sd->capture;
    if (!g || g->origin != s) {
        device_fail(d, "sim: the capture ends on another stream than it began");
        return NULL;
    }
    sd->capture = NULL;
    int failed = !(g->others = calloc((size_t)sd->nstreams, sizeof *g->others)) ||
                 !(g->joins = calloc((size_t)sd->nstreams, sizeof *g->joins));
    for (int i = 0; i < sd->nstreams; i++) {
        DeviceStream *o = sd->streams[i];
        if (o->captured && o != s && !failed) {
            failed = !sim_joined(g, o);
            if (failed) device_fail(d, "sim: a stream that joined the capture was not joined back before its end");
            g->others[g->nothers++] = o;
        }
        o->captured = 0;
    }
    if (failed) {
        if (!d->error[0]) device_fail(d, "sim: out of host memory");
        sim_graph_release(g);
        return NULL;
    }
    return g;
}

static int sim_graph_launch(Device *d, DeviceStream *s, DeviceGraph *g) {
    if (sim(d)->capture) return device_fail(d, "sim: a graph launched inside a capture");
    int rc = sim_event_record(d, s, &g->fork);
    for (int i = 0; i < g->nothers && !rc; i++) rc = sim_stream_wait(d, g->others[i], &g->fork);
    for (size_t i = 0; i < g->count && !rc; i++) {
        SimOp op = g->ops[i].op;
        if (op.kind == SIM_RECORD) op.generation = ++op.event->recorded, op.event->captured_in = 0;
        if (op.kind == SIM_WAIT) op.generation = op.event->recorded;
        rc = sim_push(d, g->ops[i].stream == g->origin ? s : g->ops[i].stream, &op);
    }
    for (int i = 0; i < g->nothers && !rc; i++) {
        rc = sim_event_record(d, g->others[i], &g->joins[i]);
        if (!rc) rc = sim_stream_wait(d, s, &g->joins[i]);
    }
    return rc;
}

static void sim_graph_free(Device *d, DeviceGraph *g) {
    sim_drain(d);
    sim_graph_release(g);
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
    .capture_begin = sim_capture_begin,
    .capture_end = sim_capture_end,
    .graph_launch = sim_graph_launch,
    .graph_free = sim_graph_free,
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
