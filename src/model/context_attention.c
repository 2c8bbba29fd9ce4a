/* context_attention.c: ring and all-gather context-parallel attention (see
 * context_attention.h) over the block kernels of attention_blocks.c. */
#include "model/context_attention.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"

enum { TAG_KV = 7100, TAG_DKV = 7101 };

struct ContextAttention {
    Comm *group;
    int size, rank;
    CpAlgo algo;
    CpSplit split;
    int B, t, C, H;
    int32_t *positions;
    float *blocks;       /* see blocks_floats */
    float *row_max, *row_sum, *delta; /* (B,H,t) */
    float *scratch;
    int slots;
};

void context_chunks(int size, int rank, CpSplit split, int chunks[2]) {
    chunks[0] = split == CP_SPLIT_ZIGZAG ? rank : 2 * rank;
    chunks[1] = split == CP_SPLIT_ZIGZAG ? 2 * size - 1 - rank : 2 * rank + 1;
}

void context_positions(int size, int rank, CpSplit split, int T, int32_t *positions) {
    int chunks[2], c = T / (2 * size);
    context_chunks(size, rank, split, chunks);
    for (int i = 0; i < 2 * c; i++) positions[i] = chunks[i / c] * c + i % c;
}

void context_take_rows(int size, int rank, CpSplit split, const int32_t *whole, int32_t *local, int B, int T) {
    int chunks[2], c = T / (2 * size);
    context_chunks(size, rank, split, chunks);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy(local + (size_t)b * 2 * c + (size_t)k * c, whole + (size_t)b * T + (size_t)chunks[k] * c,
                   sizeof(int32_t) * (size_t)c);
}

/* Floats of one (B, t, 2C) key/value block. */
static size_t block_floats(const ContextAttention *ca) { return (size_t)ca->B * ca->t * 2 * ca->C; }

/* Floats of the key/value blocks: the ring's two kv blocks and three
 * gradient blocks (computing, sending, arriving); the gather's every rank's kv
 * and gradient. */
static size_t blocks_floats(const ContextAttention *ca) {
    return block_floats(ca) * (ca->algo == CP_ALGO_RING ? 5 : 2 * (size_t)ca->size);
}

ContextAttention *context_attention_create(Comm *group, CpAlgo algo, CpSplit split, int B, int t, int C, int H) {
    ContextAttention *ca = bs_calloc(1, sizeof *ca);
    ca->group = group;
    ca->size = comm_size(group);
    ca->rank = comm_rank(group);
    ca->algo = algo, ca->split = split;
    ca->B = B, ca->t = t, ca->C = C, ca->H = H;
    ca->positions = bs_malloc(sizeof(int32_t) * (size_t)t);
    context_positions(ca->size, ca->rank, split, t * ca->size, ca->positions);
    size_t stats = (size_t)B * H * t;
    ca->blocks = bs_malloc(sizeof(float) * blocks_floats(ca));
    ca->row_max = bs_malloc(sizeof(float) * 3 * stats);
    ca->row_sum = ca->row_max + stats;
    ca->delta = ca->row_sum + stats;
    ca->slots = omp_get_max_threads();
    ca->scratch = bs_malloc(sizeof(float) * attention_blocks_scratch_floats(t, C, H) * (size_t)ca->slots);
    return ca;
}

void context_attention_free(ContextAttention *ca) {
    if (!ca) return;
    free(ca->positions);
    free(ca->blocks);
    free(ca->row_max);
    free(ca->scratch);
    free(ca);
}

Comm *context_attention_group(const ContextAttention *ca) { return ca->group; }

size_t context_attention_bytes(const ContextAttention *ca) {
    if (!ca) return 0;
    size_t stats = (size_t)ca->B * ca->H * ca->t;
    return sizeof(float) * (blocks_floats(ca) + 3 * stats +
                            attention_blocks_scratch_floats(ca->t, ca->C, ca->H) * (size_t)ca->slots) +
           sizeof(int32_t) * (size_t)ca->t;
}
const int32_t *context_attention_positions(const ContextAttention *ca) { return ca->positions; }

/* k and v of qkv (b,t,3C) into a block (b,t,2C), or a block's gradients back into dqkv's k and v. */
static void pack_kv(float *kv, const float *qkv, int b, int t, int C) {
    for (size_t i = 0; i < (size_t)b * t; i++) memcpy(kv + i * 2 * C, qkv + i * 3 * C + C, sizeof(float) * 2 * C);
}
static void unpack_kv(float *dqkv, const float *dkv, int b, int t, int C) {
    for (size_t i = 0; i < (size_t)b * t; i++) memcpy(dqkv + i * 3 * C + C, dkv + i * 2 * C, sizeof(float) * 2 * C);
}

static AttentionRows rows_of(const ContextAttention *ca, int b, int t) {
    AttentionRows r = {b, t, ca->C, ca->H, t * ca->size, {0, 0}};
    context_chunks(ca->size, ca->rank, ca->split, r.q_chunks);
    return r;
}

static int next_rank(const ContextAttention *ca, int step) { return ((ca->rank + step) % ca->size + ca->size) % ca->size; }

static void check_shape(const ContextAttention *ca, int b, int t) {
    if (b > ca->B || t != ca->t) bs_die("internal: context attention made for %dx%d, called with %dx%d", ca->B, ca->t, b, t);
}

/* Transfers in flight while a block is computed: polled between its row
 * blocks (MPI progresses a message only inside MPI calls), waited for after. */
enum { MAX_IN_FLIGHT = 3 };
typedef struct {
    CommOp *ops[MAX_IN_FLIGHT];
} InFlight;

static void poll_in_flight(void *ctx) {
    InFlight *f = ctx;
    for (int i = 0; i < MAX_IN_FLIGHT; i++)
        if (f->ops[i] && comm_test(f->ops[i])) f->ops[i] = NULL;
}

static void wait_in_flight(InFlight *f) {
    for (int i = 0; i < MAX_IN_FLIGHT; i++) {
        if (f->ops[i]) comm_wait(f->ops[i]);
        f->ops[i] = NULL;
    }
}

/* Ring forward: block i came from rank - i; the next one is in flight while it is computed. */
static void ring_forward(ContextAttention *ca, float *out, float *att, const float *qkv, const AttentionRows *r) {
    const size_t n = block_floats(ca);
    float *cur = ca->blocks, *next = ca->blocks + n;
    pack_kv(cur, qkv, r->B, r->t, ca->C);
    for (int i = 0; i < ca->size; i++) {
        InFlight f = {{NULL}};
        if (i + 1 < ca->size) {
            f.ops[0] = comm_start_recv(ca->group, next, n, next_rank(ca, -1), TAG_KV);
            f.ops[1] = comm_start_send(ca->group, cur, n, next_rank(ca, 1), TAG_KV);
        }
        int chunks[2];
        context_chunks(ca->size, next_rank(ca, -i), ca->split, chunks);
        AttentionPoll poll = {poll_in_flight, &f};
        attention_blocks_forward(out, ca->row_max, ca->row_sum, att, qkv, cur, chunks, r, ca->scratch, ca->slots,
                                 &poll);
        wait_in_flight(&f);
        float *swap = cur;
        cur = next, next = swap;
    }
}

static void allgather_forward(ContextAttention *ca, float *out, float *att, const float *qkv, const AttentionRows *r) {
    const size_t n = block_floats(ca);
    float *own = ca->blocks + (size_t)ca->size * n;
    pack_kv(own, qkv, r->B, r->t, ca->C);
    comm_wait(comm_start_allgather_blocks(ca->group, own, n, ca->blocks));
    for (int s = 0; s < ca->size; s++) {
        int chunks[2];
        context_chunks(ca->size, s, ca->split, chunks);
        attention_blocks_forward(out, ca->row_max, ca->row_sum, att, qkv, ca->blocks + (size_t)s * n, chunks, r,
                                 ca->scratch, ca->slots, NULL);
    }
}

void context_attention_forward(ContextAttention *ca, float *out, float *att, const float *qkv, int b, int t) {
    check_shape(ca, b, t);
    AttentionRows r = rows_of(ca, b, t);
    attention_blocks_begin(out, ca->row_max, ca->row_sum, &r);
    if (ca->algo == CP_ALGO_RING) ring_forward(ca, out, att, qkv, &r);
    else allgather_forward(ca, out, att, qkv, &r);
    attention_blocks_finish(out, ca->row_max, ca->row_sum, att, &r);
}

/* Ring backward, the other way round: at step i this rank holds block
 * rank + i. Its keys and values go on to rank - 1 while it is computed; its
 * gradient so far (the ranks after this one added theirs in the steps
 * before) arrives from rank + 1 meanwhile, and this rank's share is computed
 * into a zeroed buffer and added to it after, so each gradient hop overlaps
 * the next step's compute. The last hop brings each block's sum home. */
static void ring_backward(ContextAttention *ca, float *dqkv, const float *dout, const float *qkv, const float *att,
                          const AttentionRows *r) {
    const size_t n = block_floats(ca);
    float *kv = ca->blocks, *kv_next = kv + n, *grad = kv + 2 * n, *sending = kv + 3 * n, *partial = kv + 4 * n;
    pack_kv(kv, qkv, r->B, r->t, ca->C);
    const int to = next_rank(ca, -1), from = next_rank(ca, 1);
    CommOp *grad_send = NULL;
    for (int i = 0; i < ca->size; i++) {
        InFlight f = {{NULL}};
        if (i + 1 < ca->size) {
            f.ops[0] = comm_start_recv(ca->group, kv_next, n, from, TAG_KV);
            f.ops[1] = comm_start_send(ca->group, kv, n, to, TAG_KV);
        }
        if (i > 0) f.ops[2] = comm_start_recv(ca->group, partial, n, from, TAG_DKV);
        memset(grad, 0, sizeof(float) * n);
        int chunks[2];
        context_chunks(ca->size, next_rank(ca, i), ca->split, chunks);
        AttentionPoll poll = {poll_in_flight, &f};
        attention_blocks_backward(dqkv, grad, dout, qkv, kv, att, ca->delta, chunks, r, ca->scratch, ca->slots, &poll);
        wait_in_flight(&f);
        if (i > 0)
            for (size_t j = 0; j < n; j++) grad[j] += partial[j];
        if (grad_send) comm_wait(grad_send); /* `sending` is free again */
        float *swap = sending;
        sending = grad, grad = swap;
        grad_send = comm_start_send(ca->group, sending, n, to, TAG_DKV);
        swap = kv;
        kv = kv_next, kv_next = swap;
    }
    CommOp *home = comm_start_recv(ca->group, partial, n, from, TAG_DKV);
    comm_wait(grad_send);
    comm_wait(home);
    unpack_kv(dqkv, partial, r->B, r->t, ca->C); /* this rank's own block with every rank's share */
}

static void allgather_backward(ContextAttention *ca, float *dqkv, const float *dout, const float *qkv,
                               const float *att, const AttentionRows *r) {
    const size_t n = block_floats(ca);
    float *kv = ca->blocks, *grads = ca->blocks + (size_t)ca->size * n;
    pack_kv(grads, qkv, r->B, r->t, ca->C); /* staging: the gather reads it before the gradients land */
    comm_wait(comm_start_allgather_blocks(ca->group, grads, n, kv));
    memset(grads, 0, sizeof(float) * n * (size_t)ca->size);
    for (int s = 0; s < ca->size; s++) {
        int chunks[2];
        context_chunks(ca->size, s, ca->split, chunks);
        attention_blocks_backward(dqkv, grads + (size_t)s * n, dout, qkv, kv + (size_t)s * n, att, ca->delta,
                                  chunks, r, ca->scratch, ca->slots, NULL);
    }
    comm_wait(comm_start_reduce_scatter_blocks(ca->group, grads, kv, n));
    unpack_kv(dqkv, kv, r->B, r->t, ca->C);
}

void context_attention_backward(ContextAttention *ca, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *att, int b, int t) {
    check_shape(ca, b, t);
    AttentionRows r = rows_of(ca, b, t);
    memset(dqkv, 0, sizeof(float) * (size_t)b * t * 3 * ca->C);
    attention_blocks_delta(ca->delta, dout, out, &r);
    if (ca->algo == CP_ALGO_RING) ring_backward(ca, dqkv, dout, qkv, att, &r);
    else allgather_backward(ca, dqkv, dout, qkv, att, &r);
}
