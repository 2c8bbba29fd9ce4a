/* bpe.c: BPE model checks and the encoder (see bpe.h).
 *
 * The merge loop has two forms with one result. Short pieces (almost all)
 * keep the ranks of adjacent pairs in an array and scan it for the minimum,
 * as tiktoken does. Long pieces (a run of thousands of digits is one piece)
 * use a linked list and a heap of the ranks present (see merge_long), so
 * they are never quadratic; both merge the lowest rank, leftmost first. */
#include "data/bpe.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/pretokenize.h"

#define NO_RANK UINT32_MAX
#define SHORT_PIECE 128        /* longest piece merged by the array scan */
#define CACHE_MAX_PIECE 64     /* longest piece whose tokens are cached */
#define CACHE_MAX_ENTRIES 65536 /* the cache is emptied when it reaches this */

void bpe_model_build(BpeModel *m, int vocab_size, int32_t eot, uint32_t *token_offset, unsigned char *token_bytes,
                     int num_merges, int32_t *merge_left, int32_t *merge_right, int32_t *merge_result,
                     const char *source) {
    *m = (BpeModel){.vocab_size = vocab_size, .eot = eot, .num_merges = num_merges, .merge_left = merge_left,
                    .merge_right = merge_right, .merge_result = merge_result, .token_offset = token_offset,
                    .token_bytes = token_bytes};
    if (vocab_size < 257) bs_die("%s: a vocabulary of %d tokens cannot hold 256 bytes and end-of-text", source, vocab_size);
    if (eot < 0 || eot >= vocab_size) bs_die("%s: end-of-text id %d is outside the vocabulary (%d)", source, eot, vocab_size);
    for (int b = 0; b < 256; b++) m->byte_token[b] = -1;
    for (int32_t t = 0; t < vocab_size; t++) {
        if (token_offset[t + 1] < token_offset[t]) bs_die("%s: token %d has a negative length", source, t);
        if (t == eot || bpe_token_len(m, t) != 1) continue;
        unsigned char b = bpe_token_bytes(m, t)[0];
        if (m->byte_token[b] >= 0) bs_die("%s: byte 0x%02x has two tokens (%d and %d)", source, b, m->byte_token[b], t);
        m->byte_token[b] = t;
    }
    for (int b = 0; b < 256; b++)
        if (m->byte_token[b] < 0) bs_die("%s: no token for the byte 0x%02x; a byte-level vocabulary needs all 256", source, b);
    pairmap_init(&m->merges, (size_t)num_merges);
    for (int r = 0; r < num_merges; r++) {
        int32_t l = merge_left[r], rt = merge_right[r], res = merge_result[r];
        if (l < 0 || l >= vocab_size || rt < 0 || rt >= vocab_size || res < 0 || res >= vocab_size || l == eot ||
            rt == eot || res == eot)
            bs_die("%s: merge %d (%d + %d -> %d) names a token outside the vocabulary", source, r, l, rt, res);
        size_t ll = bpe_token_len(m, l), rl = bpe_token_len(m, rt);
        if (bpe_token_len(m, res) != ll + rl || memcmp(bpe_token_bytes(m, res), bpe_token_bytes(m, l), ll) != 0 ||
            memcmp(bpe_token_bytes(m, res) + ll, bpe_token_bytes(m, rt), rl) != 0)
            bs_die("%s: merge %d (%d + %d -> %d): the result is not the two parts joined", source, r, l, rt, res);
        bool created;
        PairEntry *e = pairmap_insert(&m->merges, pair_key(l, rt), &created);
        if (!created) bs_die("%s: merge %d repeats merge %u (%d + %d)", source, r, e->a, l, rt);
        e->a = (uint32_t)r;
        e->b = (uint32_t)res;
    }
}

void bpe_model_from_merges(BpeModel *m, const int32_t *left, const int32_t *right, int num_merges,
                           const char *source) {
    const size_t eot_len = strlen(BPE_EOT_TEXT);
    const size_t max_tokens = 257 + (size_t)num_merges;
    uint32_t *offset = bs_malloc((max_tokens + 1) * sizeof(uint32_t));
    int32_t *ml = bs_malloc((size_t)num_merges * sizeof(int32_t) + 1);
    int32_t *mr = bs_malloc((size_t)num_merges * sizeof(int32_t) + 1);
    int32_t *res = bs_malloc((size_t)num_merges * sizeof(int32_t) + 1);
    size_t cap = 4096, len = 256;
    unsigned char *bytes = bs_malloc(cap);
    ByteMap ids; /* token bytes -> id: a merge whose bytes exist reuses that id */
    bytemap_init(&ids, max_tokens);
    bool created;
    offset[0] = 0;
    for (int t = 0; t < 256; t++) {
        bytes[t] = (unsigned char)t;
        offset[t + 1] = (uint32_t)(t + 1);
        *bytemap_insert(&ids, &bytes[t], 1, bytemap_hash(&bytes[t], 1), &created) = (uint32_t)t;
    }
    int32_t next_id = 256;
    for (int i = 0; i < num_merges; i++) {
        int32_t l = left[i], r = right[i];
        if (l < 0 || l >= next_id || r < 0 || r >= next_id)
            bs_die("%s: merge %d (%d + %d) uses a token not made before it (ids below %d)", source, i, l, r, next_id);
        size_t ll = offset[l + 1] - offset[l], rl = offset[r + 1] - offset[r];
        if (len + ll + rl + eot_len > UINT32_MAX) bs_die("%s: the tokens' bytes exceed 4 GiB", source);
        if (len + ll + rl > cap) {
            while (len + ll + rl > cap) cap *= 2;
            unsigned char *grown = realloc(bytes, cap);
            if (!grown) bs_die("out of memory reading %s", source);
            bytes = grown;
        }
        memcpy(bytes + len, bytes + offset[l], ll);
        memcpy(bytes + len + ll, bytes + offset[r], rl);
        uint32_t *id = bytemap_insert(&ids, bytes + len, ll + rl, bytemap_hash(bytes + len, ll + rl), &created);
        if (created) {
            *id = (uint32_t)next_id;
            len += ll + rl;
            offset[++next_id] = (uint32_t)len;
        }
        ml[i] = l, mr[i] = r, res[i] = (int32_t)*id;
    }
    bytemap_free(&ids);
    unsigned char *grown = realloc(bytes, len + eot_len);
    if (!grown) bs_die("out of memory reading %s", source);
    bytes = grown;
    memcpy(bytes + len, BPE_EOT_TEXT, eot_len);
    offset[next_id + 1] = (uint32_t)(len + eot_len);
    bpe_model_build(m, next_id + 1, next_id, offset, bytes, num_merges, ml, mr, res, source);
}

void bpe_model_free(BpeModel *m) {
    pairmap_free(&m->merges);
    free(m->merge_left);
    free(m->merge_right);
    free(m->merge_result);
    free(m->token_offset);
    free(m->token_bytes);
    memset(m, 0, sizeof *m);
}

void bpe_encoder_init(BpeEncoder *e, const BpeModel *m) {
    memset(e, 0, sizeof *e);
    e->model = m;
    bytemap_init(&e->cache, 4096);
}

void bpe_encoder_free(BpeEncoder *e) {
    bytemap_free(&e->cache);
    free(e->cached);
    free(e->sym);
    free(e->result);
    free(e->next);
    free(e->prev);
    free(e->rank);
    free(e->batch);
    free(e->rank_heap);
    free(e->entry_pos);
    free(e->entry_next);
    free(e->rank_head);
    memset(e, 0, sizeof *e);
}

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) bs_die("out of memory (%zu bytes) encoding a long piece", bytes);
    return q;
}

static void ensure_scratch(BpeEncoder *e, size_t n) {
    if (n <= e->scratch_cap) return;
    size_t cap = e->scratch_cap ? e->scratch_cap : 64;
    while (cap < n) cap *= 2;
    e->sym = grow(e->sym, cap * sizeof(int32_t));
    e->result = grow(e->result, cap * sizeof(int32_t));
    e->next = grow(e->next, cap * sizeof(int32_t));
    e->prev = grow(e->prev, cap * sizeof(int32_t));
    e->rank = grow(e->rank, cap * sizeof(uint32_t));
    e->scratch_cap = cap;
}

static inline uint32_t merge_rank(const BpeModel *m, int32_t left, int32_t right, int32_t *result) {
    const PairEntry *pe = pairmap_find(&m->merges, pair_key(left, right));
    if (!pe) return NO_RANK;
    *result = (int32_t)pe->b;
    return pe->a;
}

/* Merges sym[0..k) in place; returns the new length. */
static size_t merge_short(const BpeModel *m, int32_t *sym, uint32_t *rank, int32_t *result, size_t k) {
    for (size_t i = 0; i + 1 < k; i++) rank[i] = merge_rank(m, sym[i], sym[i + 1], &result[i]);
    while (k > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < k; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        sym[best] = result[best];
        size_t after = k - best - 2; /* symbols after the one merged away */
        memmove(sym + best + 1, sym + best + 2, after * sizeof *sym);
        if (after > 0) {
            memmove(rank + best + 1, rank + best + 2, (after - 1) * sizeof *rank);
            memmove(result + best + 1, result + best + 2, (after - 1) * sizeof *result);
        }
        k--;
        if (best > 0) rank[best - 1] = merge_rank(m, sym[best - 1], sym[best], &result[best - 1]);
        if (best + 1 < k) rank[best] = merge_rank(m, sym[best], sym[best + 1], &result[best]);
    }
    return k;
}

/* Min-heap of ranks. */
static void heap_push(uint32_t *heap, size_t *n, uint32_t v) {
    size_t i = (*n)++;
    while (i > 0 && heap[(i - 1) / 2] > v) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = v;
}

static uint32_t heap_pop(uint32_t *heap, size_t *n) {
    uint32_t top = heap[0], v = heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= v) break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = v;
    return top;
}

static int compare_positions(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The work lists of merge_long: a heap of the ranks present, and for each
 * rank a list of the positions where its pair was queued (entries come from
 * a pool that only grows within one piece). */
typedef struct {
    size_t ranks, entries;
} LongQueue;

static void queue_position(BpeEncoder *e, LongQueue *q, uint32_t r, int32_t i) {
    if (q->entries == e->entry_cap) {
        e->entry_cap = e->entry_cap ? 2 * e->entry_cap : 1024;
        e->entry_pos = grow(e->entry_pos, e->entry_cap * sizeof(int32_t));
        e->entry_next = grow(e->entry_next, e->entry_cap * sizeof(int32_t));
        e->rank_heap = grow(e->rank_heap, e->entry_cap * sizeof(uint32_t));
    }
    if (e->rank_head[r] < 0) heap_push(e->rank_heap, &q->ranks, r);
    e->entry_pos[q->entries] = i;
    e->entry_next[q->entries] = e->rank_head[r];
    e->rank_head[r] = (int32_t)q->entries++;
}

/* Sets the rank and result of the pair that starts at node i, queues it and
 * returns its rank. */
static uint32_t queue_pair(const BpeModel *m, BpeEncoder *e, LongQueue *q, int32_t i) {
    int32_t j = e->next[i];
    uint32_t r = j < 0 ? NO_RANK : merge_rank(m, e->sym[i], e->sym[j], &e->result[i]);
    e->rank[i] = r;
    if (r != NO_RANK) queue_position(e, q, r, i);
    return r;
}

/* Merges e->sym[0..k) (k >= 2) through a linked list; returns the new length.
 * rank[i] and result[i] always describe the pair (i, next[i]). The lowest
 * rank present comes from a heap of ranks, and its queued positions are
 * merged left to right: the order of merging one pair at a time (lowest
 * rank, leftmost first), since a merge never remakes its own pair. Should a
 * merge make a pair of lower rank (vocabularies from training never do), the
 * rest of the batch is queued again and that rank goes first. Long runs
 * (digits, spaces, repeated symbols) hold few distinct pairs, so the heap
 * stays small. */
static size_t merge_long(const BpeModel *m, BpeEncoder *e, size_t k) {
    int32_t *sym = e->sym, *next = e->next, *prev = e->prev;
    LongQueue q = {0, 0};
    if (!e->rank_head) { /* one list head per merge rank, all empty between pieces */
        e->rank_head = bs_malloc(((size_t)m->num_merges + 1) * sizeof(int32_t));
        for (int r = 0; r <= m->num_merges; r++) e->rank_head[r] = -1;
    }
    for (size_t i = 0; i < k; i++) {
        next[i] = i + 1 < k ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = k; i-- > 0;) queue_pair(m, e, &q, (int32_t)i); /* lists are LIFO: they come out ascending */
    while (q.ranks > 0) {
        uint32_t r = heap_pop(e->rank_heap, &q.ranks);
        if (e->batch_cap < q.entries) { /* a list is never longer than the pool */
            e->batch_cap = e->entry_cap;
            e->batch = grow(e->batch, e->batch_cap * sizeof(int32_t));
        }
        int32_t *batch = e->batch;
        size_t count = 0;
        bool sorted = true;
        for (int32_t x = e->rank_head[r]; x >= 0; x = e->entry_next[x]) {
            batch[count] = e->entry_pos[x];
            if (count > 0 && batch[count] < batch[count - 1]) sorted = false;
            count++;
        }
        e->rank_head[r] = -1;
        if (!sorted) qsort(batch, count, sizeof *batch, compare_positions);
        for (size_t b = 0; b < count; b++) {
            int32_t i = batch[b];
            if (sym[i] < 0 || e->rank[i] != r) continue; /* merged away, or its pair changed */
            int32_t j = next[i];
            sym[i] = e->result[i];
            sym[j] = -1;
            next[i] = next[j];
            if (next[j] >= 0) prev[next[j]] = i;
            uint32_t before = prev[i] >= 0 ? queue_pair(m, e, &q, prev[i]) : NO_RANK;
            uint32_t after = queue_pair(m, e, &q, i);
            if (before < r || after < r) { /* a lower rank appeared: it goes first */
                for (size_t rest = b + 1; rest < count; rest++) queue_position(e, &q, r, batch[rest]);
                break;
            }
        }
    }
    size_t count = 0; /* node 0 always survives: merges remove the right node */
    for (int32_t i = 0; i >= 0; i = next[i]) sym[count++] = sym[i];
    return count;
}

void bpe_encode_piece(BpeEncoder *e, const unsigned char *piece, size_t n, TokenList *out) {
    const BpeModel *m = e->model;
    ensure_scratch(e, n);
    for (size_t i = 0; i < n; i++) e->sym[i] = m->byte_token[piece[i]];
    size_t k = n;
    if (n >= 2) k = n <= SHORT_PIECE ? merge_short(m, e->sym, e->rank, e->result, n) : merge_long(m, e, n);
    token_list_reserve(out, k);
    memcpy(out->ids + out->len, e->sym, k * sizeof(int32_t));
    out->len += k;
}

static void encode_piece_cached(BpeEncoder *e, const unsigned char *piece, size_t n, TokenList *out) {
    if (n == 1) {
        token_list_push(out, e->model->byte_token[piece[0]]);
        return;
    }
    if (n > CACHE_MAX_PIECE) {
        bpe_encode_piece(e, piece, n, out);
        return;
    }
    uint64_t hash = bytemap_hash(piece, n);
    const uint32_t *found = bytemap_find(&e->cache, piece, n, hash);
    if (found) {
        const int32_t *c = e->cached + *found;
        token_list_reserve(out, (size_t)c[0]);
        memcpy(out->ids + out->len, c + 1, (size_t)c[0] * sizeof(int32_t));
        out->len += (size_t)c[0];
        return;
    }
    size_t before = out->len;
    bpe_encode_piece(e, piece, n, out);
    size_t k = out->len - before;
    if (e->cache.count >= CACHE_MAX_ENTRIES) {
        bytemap_clear(&e->cache);
        e->cached_len = 0;
    }
    if (e->cached_len + k + 1 > e->cached_cap) {
        while (e->cached_len + k + 1 > e->cached_cap) e->cached_cap = e->cached_cap ? 2 * e->cached_cap : 65536;
        e->cached = grow(e->cached, e->cached_cap * sizeof(int32_t));
    }
    bool created;
    *bytemap_insert(&e->cache, piece, n, hash, &created) = (uint32_t)e->cached_len;
    e->cached[e->cached_len] = (int32_t)k;
    memcpy(e->cached + e->cached_len + 1, out->ids + before, k * sizeof(int32_t));
    e->cached_len += k + 1;
}

void bpe_encode(BpeEncoder *e, const unsigned char *text, size_t n, TokenList *out) {
    const BpeModel *m = e->model;
    if (m->num_merges == 0) { /* byte-level: no pieces needed */
        token_list_reserve(out, n);
        for (size_t i = 0; i < n; i++) out->ids[out->len + i] = m->byte_token[text[i]];
        out->len += n;
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t j = pretok_next(text, n, i);
        encode_piece_cached(e, text + i, j - i, out);
        i = j;
    }
}
