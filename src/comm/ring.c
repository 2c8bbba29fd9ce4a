/* ring.c: the ring engine behind the ring and hierarchical algorithms.
 *
 * With N ranks in a ring (left = rank-1, right = rank+1) and the buffer cut
 * into N chunks (chunk c is what rank c owns at the end):
 *   reduce-scatter step k (k = 0..N-2): send chunk (r-k-1) to the right,
 *     receive chunk (r-k-2) from the left and add it in; after N-1 steps
 *     rank r holds the sum of chunk r.
 *   all-gather step k: send chunk (r-k), receive chunk (r-k-1) in place.
 *   all-reduce = reduce-scatter then all-gather: 2(N-1)/N of the buffer sent.
 * Each chunk is cut into segments that go through the steps independently
 * (segment j of step k+1 leaves as soon as segment j of step k is summed),
 * so sums overlap transfers. A segment posts its next step only when both
 * its send and its receive are complete, so no region is written while it is
 * still being sent. Broadcast is a chain from the root, also by segments. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/error.h"

void ring_setup(RingPass *r, Comm *comm, RingKind kind, float *buf, int tag) {
    size_t need = (size_t)comm->size;
    if (r->chunk_capacity < need) {
        free(r->chunk_offset);
        free(r->chunk_length);
        r->chunk_offset = bs_calloc(need, sizeof(size_t));
        r->chunk_length = bs_calloc(need, sizeof(size_t));
        r->chunk_capacity = need;
    }
    memset(r->chunk_offset, 0, need * sizeof(size_t));
    memset(r->chunk_length, 0, need * sizeof(size_t));
    r->comm = comm;
    r->kind = kind;
    r->buf = buf;
    r->tag = tag;
    r->root = 0;
    r->started = r->finished = false;
    r->bytes_sent = 0;
    r->coding = NULL;
}

void ring_set_chunk(RingPass *r, int group_rank, size_t offset, size_t length) {
    r->chunk_offset[group_rank] = offset;
    r->chunk_length[group_rank] = length;
}

void ring_set_even_chunks(RingPass *r, size_t n) {
    int N = r->comm->size;
    size_t base = n / (size_t)N, extra = n % (size_t)N, off = 0;
    for (int i = 0; i < N; i++) {
        size_t len = base + ((size_t)i < extra ? 1 : 0);
        ring_set_chunk(r, i, off, len);
        off += len;
    }
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

static size_t segment_length(size_t chunk_len, int segments) {
    return (chunk_len + (size_t)segments - 1) / (size_t)segments;
}

/* Segment j of chunk c: [*off, *off + *len) relative to buf. */
static void segment_of(const RingPass *r, int c, int j, size_t *off, size_t *len) {
    size_t sl = segment_length(r->chunk_length[c], r->segments);
    size_t begin = (size_t)j * sl, end = begin + sl;
    if (begin > r->chunk_length[c]) begin = r->chunk_length[c];
    if (end > r->chunk_length[c]) end = r->chunk_length[c];
    *off = r->chunk_offset[c] + begin;
    *len = end - begin;
}

static bool is_reduce_step(const RingPass *r, int step) {
    return (r->kind == RING_REDUCE_SCATTER || r->kind == RING_ALLREDUCE) && step < r->comm->size - 1;
}

static void post_step(RingPass *r, int j) {
    Comm *c = r->comm;
    const int N = c->size, me = c->rank;
    RingSegment *s = &r->seg[j];
    int tag = r->tag + j;
    if (r->kind == RING_BROADCAST) {
        int dist = mod(me - r->root, N);
        size_t off, len;
        segment_of(r, 0, j, &off, &len);
        if (s->step == 0 && dist > 0) { /* receive from the left */
            comm_check(MPI_Irecv(r->buf + off, (int)len, MPI_FLOAT, mod(me - 1, N), tag, c->mpi, &s->recv), c,
                       "broadcast receive");
            s->recv_active = true;
        } else if (s->step == 1 && dist < N - 1) { /* forward to the right */
            comm_check(MPI_Isend(r->buf + off, (int)len, MPI_FLOAT, mod(me + 1, N), tag, c->mpi, &s->send), c,
                       "broadcast send");
            s->send_active = true;
            r->bytes_sent += len * sizeof(float);
        }
        return;
    }
    int k = s->step;
    int send_chunk, recv_chunk;
    float *recv_to;
    size_t soff, slen, roff, rlen;
    if (is_reduce_step(r, k)) {
        send_chunk = mod(me - k - 1, N);
        recv_chunk = mod(me - k - 2, N);
    } else {
        int g = r->kind == RING_ALLREDUCE ? k - (N - 1) : k;
        send_chunk = mod(me - g, N);
        recv_chunk = mod(me - g - 1, N);
    }
    segment_of(r, send_chunk, j, &soff, &slen);
    segment_of(r, recv_chunk, j, &roff, &rlen);
    if (r->coding) {
        int gather_step = is_reduce_step(r, k) ? -1 : r->kind == RING_ALLREDUCE ? k - (N - 1) : k;
        ring_coding_post(r, j, gather_step, soff, slen, roff, rlen, mod(me - 1, N), mod(me + 1, N), tag);
        return;
    }
    size_t max_seg = r->tmp_capacity / (size_t)r->segments;
    recv_to = is_reduce_step(r, k) ? r->tmp + (size_t)j * max_seg : r->buf + roff;
    comm_check(MPI_Irecv(recv_to, (int)rlen, MPI_FLOAT, mod(me - 1, N), tag, c->mpi, &s->recv), c, "ring receive");
    comm_check(MPI_Isend(r->buf + soff, (int)slen, MPI_FLOAT, mod(me + 1, N), tag, c->mpi, &s->send), c,
               "ring send");
    s->recv_active = s->send_active = true;
    r->bytes_sent += slen * sizeof(float);
}

int ring_segment_count(size_t largest_chunk) {
    size_t seg_floats = RING_SEGMENT_BYTES / sizeof(float);
    size_t segments = (largest_chunk + seg_floats - 1) / seg_floats;
    return segments < 1 ? 1 : segments > RING_MAX_SEGMENTS ? RING_MAX_SEGMENTS : (int)segments;
}

void ring_start(RingPass *r) {
    const int N = r->comm->size;
    r->started = true;
    size_t largest = 0;
    int nchunks = r->kind == RING_BROADCAST ? 1 : N;
    for (int c = 0; c < nchunks; c++)
        if (r->chunk_length[c] > largest) largest = r->chunk_length[c];
    r->segments = ring_segment_count(largest);
    if (r->kind == RING_BROADCAST) r->steps = 2;
    else if (r->kind == RING_ALLREDUCE) r->steps = 2 * (N - 1);
    else r->steps = N - 1;
    if (N == 1 || r->steps == 0) {
        r->finished = true;
        return;
    }
    if (r->coding) {
        ring_coding_prepare(r, segment_length(largest, r->segments));
    } else if (r->kind == RING_REDUCE_SCATTER || r->kind == RING_ALLREDUCE) {
        size_t need = (size_t)r->segments * segment_length(largest, r->segments);
        if (need > r->tmp_capacity) {
            free(r->tmp);
            r->tmp = bs_malloc(need * sizeof(float));
            r->tmp_capacity = need;
        }
        if (r->tmp_capacity < (size_t)r->segments) { /* all chunks empty: keep indexing valid */
            free(r->tmp);
            r->tmp = bs_malloc((size_t)r->segments * sizeof(float));
            r->tmp_capacity = (size_t)r->segments;
        }
    }
    for (int j = 0; j < r->segments; j++) {
        r->seg[j] = (RingSegment){0};
        post_step(r, j);
    }
}

static void finish_receive(RingPass *r, int j) {
    RingSegment *s = &r->seg[j];
    if (r->coding) {
        ring_coding_received(r, j);
        return;
    }
    if (r->kind == RING_BROADCAST || !is_reduce_step(r, s->step)) return;
    const int N = r->comm->size;
    size_t off, len;
    segment_of(r, mod(r->comm->rank - s->step - 2, N), j, &off, &len);
    size_t max_seg = r->tmp_capacity / (size_t)r->segments;
    float *dst = r->buf + off;
    const float *src = r->tmp + (size_t)j * max_seg;
    for (size_t i = 0; i < len; i++) dst[i] += src[i];
}

bool ring_progress(RingPass *r) {
    if (r->finished) return true;
    bool all_done = true;
    for (int j = 0; j < r->segments; j++) {
        RingSegment *s = &r->seg[j];
        if (s->done) continue;
        int flag;
        if (s->recv_active) {
            comm_check(MPI_Test(&s->recv, &flag, MPI_STATUS_IGNORE), r->comm, "ring receive");
            if (flag) {
                s->recv_active = false;
                finish_receive(r, j);
            }
        }
        if (s->send_active) {
            comm_check(MPI_Test(&s->send, &flag, MPI_STATUS_IGNORE), r->comm, "ring send");
            if (flag) s->send_active = false;
        }
        while (!s->recv_active && !s->send_active && !s->done) {
            s->step++;
            if (s->step >= r->steps) s->done = true;
            else post_step(r, j); /* broadcast steps may post nothing */
        }
        if (!s->done) all_done = false;
    }
    r->finished = all_done;
    return all_done;
}

static int world_rank_of(const Comm *c, int rank) {
    int world;
    MPI_Group g, wg;
    MPI_Comm_group(c->mpi, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, 1, &rank, wg, &world);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    return world;
}

/* A pending receive waits on the left neighbour; with none, a pending send
 * (a large message needs its receiver) waits on the right one. */
int ring_waiting_on(const RingPass *r) {
    int rank = r->comm->rank, size = r->comm->size;
    for (int j = 0; j < r->segments; j++)
        if (r->seg[j].recv_active) return world_rank_of(r->comm, mod(rank - 1, size));
    for (int j = 0; j < r->segments; j++)
        if (r->seg[j].send_active) return world_rank_of(r->comm, mod(rank + 1, size));
    return -1;
}

void ring_release(RingPass *r) {
    free(r->tmp);
    free(r->chunk_offset);
    free(r->chunk_length);
    memset(r, 0, sizeof *r);
}
