/* device_buckets.c: gradient buckets reduced on device buffers as backward
 * finishes them (device_buckets.h); the device's counterpart of the
 * buckets in data_parallel.c, over comm/device_comm.h. */
#include "parallel/device_buckets.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/range.h"

enum { POOL = 2 }; /* rotating bucket buffers (ZeRO 2), as data_parallel.c's GRAD_POOL */

typedef struct {
    Range range;
    int first_block, last_block;
    int pending;  /* blocks still to finish this micro-batch */
    float *buf;   /* ZeRO 2: where backward writes it this micro-batch (NULL: none yet) */
    int pool;     /* its pool buffer, -1: the embeddings' */
    bool launched; /* ZeRO 2: reduce-scattered, its part not yet added */
    long order;    /* ZeRO 2: when it was launched (the oldest is added first) */
} DeviceBucket;

struct DeviceBuckets {
    Device *dev;
    GPTDevice *model;
    DeviceComm *comm;
    const DataParallel *dp;
    int stage, num_buckets, num_blocks;
    DeviceBucket *buckets;
    size_t total;
    Range part;              /* what this rank updates */
    bool overlap, communicate, last;
    float *pool[POOL], *emb_buf; /* ZeRO 2 */
    bool pool_busy[POOL];
    DeviceEvent *reduced[POOL + 1]; /* ZeRO 2: each buffer's (the pool's, the embeddings') reduction's end */
    long launches;
    int32_t *flags, *host_flags; /* a non-finite flag per block, the micro-batch's checked */
    int first_nonfinite_block, poison_block;
    float nan; /* the host source of a planted NaN */
};

static void check(const DeviceBuckets *b, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(b->dev), device_error(b->dev));
}

static DeviceStream *compute(const DeviceBuckets *b) { return gpt_device_compute_stream(b->model); }

static DeviceEvent *reduced(const DeviceBuckets *b, const DeviceBucket *bk) {
    return b->reduced[bk->pool >= 0 ? bk->pool : POOL];
}

/* ZeRO 2: bucket k's reduced part added to the rank's part of the gradient, on the compute stream after its
 * reduction (only: the reductions queued after it still run beside the compute stream). */
static void absorb(DeviceBuckets *b, DeviceBucket *bk) {
    check(b, device_stream_wait(b->dev, compute(b), reduced(b, bk)));
    const Range mine = range_intersect(bk->range, b->part);
    if (!range_empty(mine)) {
        float *dst = gpt_device_array(b->model, GPT_DEVICE_GRADS) + range_offset_in(mine, b->part);
        DeviceCall add = {.kernel = DK_RESIDUAL_FORWARD,
                          .a.elementwise = {dst, dst, bk->buf + range_offset_in(mine, bk->range), mine.count}};
        check(b, device_launch(b->dev, compute(b), &add));
    }
    if (bk->pool >= 0) b->pool_busy[bk->pool] = false;
    bk->buf = NULL;
    bk->launched = false;
}

/* ZeRO 2: every reduced bucket's part added, its buffer free. */
static void absorb_launched(DeviceBuckets *b) {
    for (int k = 0; k < b->num_buckets; k++)
        if (b->buckets[k].launched) absorb(b, &b->buckets[k]);
}

/* ZeRO 2: the oldest reduced bucket holding a pool buffer added (its buffer free), false if none. */
static bool absorb_oldest(DeviceBuckets *b) {
    DeviceBucket *oldest = NULL;
    for (int k = 0; k < b->num_buckets; k++) {
        DeviceBucket *bk = &b->buckets[k];
        if (bk->launched && bk->pool >= 0 && (!oldest || bk->order < oldest->order)) oldest = bk;
    }
    if (oldest) absorb(b, oldest);
    return oldest != NULL;
}

static void launch(DeviceBuckets *b, int k) {
    DeviceBucket *bk = &b->buckets[k];
    if (b->stage >= 2) {
        device_comm_reduce_scatter(b->comm, bk->buf, bk->range.offset, bk->range.count, b->total);
        device_comm_record(b->comm, reduced(b, bk));
        bk->launched = true;
        bk->order = b->launches++;
        return;
    }
    float *grads = gpt_device_array(b->model, GPT_DEVICE_GRADS) + bk->range.offset;
    if (b->stage == 0) device_comm_allreduce(b->comm, grads, bk->range.count, false);
    else device_comm_reduce_scatter(b->comm, grads, bk->range.offset, bk->range.count, b->total);
}

static float *acquire(DeviceBuckets *b, DeviceBucket *bk) {
    bk->pool = -1;
    if (bk->first_block == 0) return b->emb_buf;
    do {
        for (int i = 0; i < POOL; i++)
            if (!b->pool_busy[i]) {
                b->pool_busy[i] = true;
                bk->pool = i;
                return b->pool[i];
            }
    } while (absorb_oldest(b));
    bs_die("internal: no free device gradient bucket buffer");
}

/* ZeRO 2: where backward writes block's gradient (the bucket's buffer, zeroed when first taken). */
static float *hook_grads(void *ctx, int block) {
    DeviceBuckets *b = ctx;
    if (b->stage < 2) return NULL;
    DeviceBucket *bk = &b->buckets[dp_bucket_of_block(b->dp, block)];
    if (!bk->buf) {
        bk->buf = acquire(b, bk);
        check(b, device_zero(b->dev, compute(b), bk->buf, bk->range.count * sizeof(float)));
    }
    size_t off, count;
    gpt_block_range(gpt_device_config(b->model), block, &off, &count);
    return bk->buf + (off - bk->range.offset);
}

/* The block's gradient before it is reduced (ZeRO 0-1: the step's sum so
 * far, checked on the last micro-batch; ZeRO 2: this micro-batch's, checked
 * on each): a planted NaN, then its flag. */
static void check_block(DeviceBuckets *b, int block) {
    size_t off, count;
    gpt_block_range(gpt_device_config(b->model), block, &off, &count);
    float *g = b->stage >= 2 ? hook_grads(b, block) : gpt_device_array(b->model, GPT_DEVICE_GRADS) + off;
    if (b->poison_block == block && count > 0) {
        check(b, device_copy(b->dev, compute(b), g, &b->nan, sizeof(float), COPY_HOST_TO_DEVICE));
        b->poison_block = -1;
    }
    DeviceCall call = {.kernel = DK_NONFINITE, .a.nonfinite = {&b->flags[block], g, count}};
    check(b, device_launch(b->dev, compute(b), &call));
}

static void hook_done(void *ctx, int block) {
    DeviceBuckets *b = ctx;
    if (b->last || b->stage >= 2) check_block(b, block);
    const int k = dp_bucket_of_block(b->dp, block);
    if (b->communicate && --b->buckets[k].pending == 0 && (b->overlap || b->stage >= 2)) launch(b, k);
}

static int allocate(DeviceBuckets *b) {
    size_t pool_floats = 1;
    for (int k = 0; k < b->num_buckets; k++)
        if (b->buckets[k].first_block == 0) {
            if (!(b->emb_buf = device_alloc(b->dev, sizeof(float) * b->buckets[k].range.count))) return -1;
        } else if (b->buckets[k].range.count > pool_floats) {
            pool_floats = b->buckets[k].range.count;
        }
    for (int i = 0; i < POOL; i++)
        if (!(b->pool[i] = device_alloc(b->dev, sizeof(float) * pool_floats))) return -1;
    for (int i = 0; i <= POOL; i++)
        if (!(b->reduced[i] = device_event_create(b->dev))) return -1;
    gpt_device_keep_grad_part(b->model);
    return 0;
}

DeviceBuckets *device_buckets_create(Device *dev, GPTDevice *model, DeviceComm *comm, const DataParallel *dp,
                                     int zero_stage, char *reason, size_t reason_size) {
    DeviceBuckets *b = bs_calloc(1, sizeof *b);
    const GPTConfig *cfg = gpt_device_config(model);
    *b = (DeviceBuckets){.dev = dev, .model = model, .comm = comm, .dp = dp, .stage = zero_stage,
                         .num_buckets = dp_num_buckets(dp), .num_blocks = gpt_num_blocks(cfg),
                         .total = gpt_num_params(cfg), .overlap = dp_overlaps(dp), .first_nonfinite_block = -1,
                         .poison_block = -1, .nan = NAN};
    dp_update_range(dp, &b->part.offset, &b->part.count);
    b->buckets = bs_calloc((size_t)b->num_buckets, sizeof *b->buckets);
    for (int k = 0; k < b->num_buckets; k++) {
        DeviceBucket *bk = &b->buckets[k];
        dp_bucket(dp, k, &bk->range.offset, &bk->range.count, &bk->first_block, &bk->last_block);
    }
    b->host_flags = bs_calloc((size_t)b->num_blocks, sizeof(int32_t));
    b->flags = device_alloc(dev, sizeof(int32_t) * (size_t)b->num_blocks);
    /* a pipeline stage checks its own blocks only: the others' flags stay 0 */
    if (!b->flags || device_zero(dev, compute(b), b->flags, sizeof(int32_t) * (size_t)b->num_blocks) != 0 ||
        (zero_stage >= 2 && allocate(b) != 0)) {
        snprintf(reason, reason_size, "%s", device_error(dev));
        device_buckets_free(b);
        return NULL;
    }
    GPTDeviceGradHooks hooks = {hook_grads, hook_done, b};
    gpt_device_set_grad_hooks(model, &hooks);
    return b;
}

void device_buckets_free(DeviceBuckets *b) {
    if (!b) return;
    gpt_device_set_grad_hooks(b->model, NULL);
    for (int i = 0; i < POOL; i++) device_free(b->dev, b->pool[i]);
    for (int i = 0; i <= POOL; i++) device_event_destroy(b->dev, b->reduced[i]);
    device_free(b->dev, b->emb_buf);
    device_free(b->dev, b->flags);
    free(b->host_flags);
    free(b->buckets);
    free(b);
}

void device_buckets_begin_step(DeviceBuckets *b) { b->first_nonfinite_block = -1; }

void device_buckets_begin_micro(DeviceBuckets *b, bool last) {
    b->last = last;
    b->communicate = last || b->stage >= 2;
    for (int k = 0; k < b->num_buckets; k++)
        b->buckets[k].pending = b->buckets[k].last_block - b->buckets[k].first_block + 1;
}

/* The checked micro-batch's flags to the host; the first bad block in backward's order (the head down). */
static void read_flags(DeviceBuckets *b) {
    check(b, device_copy(b->dev, compute(b), b->host_flags, b->flags, sizeof(int32_t) * (size_t)b->num_blocks,
                         COPY_DEVICE_TO_HOST));
    check(b, device_stream_sync(b->dev, compute(b)));
    for (int blk = b->num_blocks - 1; blk >= 0 && b->first_nonfinite_block < 0; blk--)
        if (b->host_flags[blk]) b->first_nonfinite_block = blk;
}

void device_buckets_end_micro(DeviceBuckets *b) {
    if (b->communicate && !b->overlap && b->stage < 2)
        for (int k = 0; k < b->num_buckets; k++) launch(b, k);
    if (b->stage >= 2) absorb_launched(b);
    if (b->last || b->stage >= 2) read_flags(b);
}

void device_buckets_finish(DeviceBuckets *b) {
    device_comm_wait(b->comm);
    device_comm_finish(b->comm);
}

int device_buckets_first_nonfinite_block(const DeviceBuckets *b) { return b->first_nonfinite_block; }

void device_buckets_inject_nan(DeviceBuckets *b, int block) { b->poison_block = block; }

/* The summed window lands where the rank keeps the layout's gradient: all of it (ZeRO 0), its part of the
 * whole flat buffer (ZeRO 1) or of the gradient's part (ZeRO 2). */
void device_buckets_add_reduced(DeviceBuckets *b, float *buf, size_t offset, size_t count) {
    const Range window = range_make(offset, count), keep = b->stage == 0 ? window : range_intersect(window, b->part);
    if (b->stage == 0) device_comm_allreduce(b->comm, buf, count, false);
    else device_comm_reduce_scatter(b->comm, buf, offset, count, b->total);
    device_comm_wait(b->comm);
    if (range_empty(keep)) return;
    float *grads = gpt_device_array(b->model, GPT_DEVICE_GRADS);
    float *dst = b->stage >= 2 ? grads + range_offset_in(keep, b->part) : grads + keep.offset;
    DeviceCall add = {.kernel = DK_RESIDUAL_FORWARD,
                      .a.elementwise = {dst, dst, buf + range_offset_in(keep, window), keep.count}};
    check(b, device_launch(b->dev, compute(b), &add));
}
