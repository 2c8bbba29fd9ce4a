/* bpe_train.c: BPE training with incremental pair counts (see bpe_train.h). */
#include "data/bpe_train.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "data/pretokenize.h"

void bpe_trainer_init(BpeTrainer *t) {
    memset(t, 0, sizeof *t);
    bytemap_init(&t->pieces, 1 << 16);
}

void bpe_trainer_free(BpeTrainer *t) {
    bytemap_free(&t->pieces);
    free(t->counts);
    memset(t, 0, sizeof *t);
}

void bpe_trainer_add_text(BpeTrainer *t, const unsigned char *text, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t j = pretok_next(text, n, i);
        bool created;
        uint32_t *index = bytemap_insert(&t->pieces, text + i, j - i, bytemap_hash(text + i, j - i), &created);
        if (created) {
            *index = (uint32_t)(t->pieces.count - 1);
            if (t->pieces.count > t->counts_cap) {
                t->counts_cap = t->counts_cap ? 2 * t->counts_cap : 1 << 16;
                uint64_t *grown = realloc(t->counts, t->counts_cap * sizeof(uint64_t));
                if (!grown) bs_die("out of memory counting %zu distinct pieces", t->pieces.count);
                t->counts = grown;
            }
            t->counts[*index] = 0;
        }
        t->counts[*index]++;
        i = j;
    }
    t->bytes += n;
}

/* A growable array of uint32 (words holding a pair; heap entries). */
typedef struct {
    uint32_t *v;
    uint32_t n, cap;
} U32List;

static void u32_push(U32List *l, uint32_t x) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        uint32_t *grown = realloc(l->v, (size_t)l->cap * sizeof(uint32_t));
        if (!grown) bs_die("out of memory training BPE");
        l->v = grown;
    }
    l->v[l->n++] = x;
}

typedef struct {
    int32_t left, right;
    int64_t count;
    U32List words; /* words that held the pair when it was counted (may repeat, may be stale) */
} Pair;

typedef struct {
    int64_t count;
    uint32_t pair;
} HeapEntry;

typedef struct {
    /* words: distinct pieces as token sequences */
    size_t num_words;
    uint64_t *word_count;
    size_t *word_start;
    uint32_t *word_len;
    int32_t *sym;
    uint32_t *word_stamp; /* last merge that rewrote the word, + 1 */
    /* pairs */
    PairMap pair_index; /* (left, right) -> a: index into pairs */
    Pair *pairs;
    size_t num_pairs, pairs_cap;
    uint32_t *pair_stamp; /* last merge that gained the pair, + 1 */
    HeapEntry *heap;
    size_t heap_n, heap_cap;
    /* tokens made so far: bytes -> id (a merge reuses an existing token) */
    ByteMap token_ids;
    uint32_t *token_offset;
    unsigned char *token_bytes;
    size_t bytes_len, bytes_cap;
    int32_t next_id;
} Training;

/* Heap order: higher count first, then smaller left id, then smaller right id. */
static bool heap_before(const Training *tr, HeapEntry a, HeapEntry b) {
    if (a.count != b.count) return a.count > b.count;
    const Pair *pa = &tr->pairs[a.pair], *pb = &tr->pairs[b.pair];
    if (pa->left != pb->left) return pa->left < pb->left;
    return pa->right < pb->right;
}

static void heap_push(Training *tr, uint32_t pair) {
    if (tr->heap_n == tr->heap_cap) {
        tr->heap_cap = tr->heap_cap ? 2 * tr->heap_cap : 1024;
        HeapEntry *grown = realloc(tr->heap, tr->heap_cap * sizeof(HeapEntry));
        if (!grown) bs_die("out of memory training BPE");
        tr->heap = grown;
    }
    HeapEntry e = {tr->pairs[pair].count, pair};
    size_t i = tr->heap_n++;
    while (i > 0 && heap_before(tr, e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
}

static HeapEntry heap_pop(Training *tr) {
    HeapEntry top = tr->heap[0], e = tr->heap[--tr->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= tr->heap_n) break;
        if (c + 1 < tr->heap_n && heap_before(tr, tr->heap[c + 1], tr->heap[c])) c++;
        if (!heap_before(tr, tr->heap[c], e)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    tr->heap[i] = e;
    return top;
}

/* The pair's index, created with count 0 if new. */
static uint32_t pair_of(Training *tr, int32_t left, int32_t right) {
    bool created;
    PairEntry *e = pairmap_insert(&tr->pair_index, pair_key(left, right), &created);
    if (created) {
        if (tr->num_pairs == tr->pairs_cap) {
            tr->pairs_cap = tr->pairs_cap ? 2 * tr->pairs_cap : 1 << 16;
            Pair *grown = realloc(tr->pairs, tr->pairs_cap * sizeof(Pair));
            uint32_t *stamps = realloc(tr->pair_stamp, tr->pairs_cap * sizeof(uint32_t));
            if (!grown || !stamps) bs_die("out of memory training BPE");
            tr->pairs = grown;
            tr->pair_stamp = stamps;
        }
        e->a = (uint32_t)tr->num_pairs;
        tr->pairs[e->a] = (Pair){left, right, 0, {NULL, 0, 0}};
        tr->pair_stamp[e->a] = 0;
        tr->num_pairs++;
    }
    return e->a;
}

/* Adds sign x count to every adjacent pair of word w. Pairs involving
 * `fresh` (the token just made) record the word and are marked gained. */
static void count_word_pairs(Training *tr, size_t w, int64_t sign, int32_t fresh, uint32_t stamp, U32List *gained) {
    const int32_t *s = tr->sym + tr->word_start[w];
    for (uint32_t i = 0; i + 1 < tr->word_len[w]; i++) {
        uint32_t p = pair_of(tr, s[i], s[i + 1]);
        tr->pairs[p].count += sign * (int64_t)tr->word_count[w];
        if (sign > 0 && (s[i] == fresh || s[i + 1] == fresh)) {
            u32_push(&tr->pairs[p].words, (uint32_t)w);
            if (tr->pair_stamp[p] != stamp) {
                tr->pair_stamp[p] = stamp;
                u32_push(gained, p);
            }
        }
    }
}

/* The id of left + right joined: an existing token with those bytes or the next free id. */
static int32_t make_token(Training *tr, int32_t left, int32_t right) {
    uint32_t ll = tr->token_offset[left + 1] - tr->token_offset[left];
    uint32_t rl = tr->token_offset[right + 1] - tr->token_offset[right];
    if (tr->bytes_len + ll + rl > tr->bytes_cap) {
        while (tr->bytes_len + ll + rl > tr->bytes_cap) tr->bytes_cap *= 2;
        unsigned char *grown = realloc(tr->token_bytes, tr->bytes_cap);
        if (!grown) bs_die("out of memory training BPE");
        tr->token_bytes = grown;
    }
    unsigned char *joined = tr->token_bytes + tr->bytes_len;
    memcpy(joined, tr->token_bytes + tr->token_offset[left], ll);
    memcpy(joined + ll, tr->token_bytes + tr->token_offset[right], rl);
    bool created;
    uint32_t *id = bytemap_insert(&tr->token_ids, joined, ll + rl, bytemap_hash(joined, ll + rl), &created);
    if (created) {
        *id = (uint32_t)tr->next_id++;
        tr->bytes_len += ll + rl;
        tr->token_offset[tr->next_id] = (uint32_t)tr->bytes_len;
    }
    return (int32_t)*id;
}

static void training_init(Training *tr, const BpeTrainer *t, int vocab_size) {
    memset(tr, 0, sizeof *tr);
    const ByteMap *pieces = &t->pieces;
    tr->num_words = pieces->count;
    tr->word_count = bs_malloc(tr->num_words * sizeof(uint64_t) + 1);
    tr->word_start = bs_malloc(tr->num_words * sizeof(size_t) + 1);
    tr->word_len = bs_malloc(tr->num_words * sizeof(uint32_t) + 1);
    tr->word_stamp = bs_calloc(tr->num_words + 1, sizeof(uint32_t));
    tr->sym = bs_malloc(pieces->keys_len * sizeof(int32_t) + 1);
    size_t at = 0;
    for (size_t i = 0; i <= pieces->mask; i++) { /* words are numbered as the trainer counted them */
        const ByteEntry *e = &pieces->slots[i];
        if (e->offset == UINT32_MAX) continue;
        size_t w = e->value;
        tr->word_count[w] = t->counts[w];
        tr->word_start[w] = at;
        tr->word_len[w] = e->len;
        const unsigned char *key = bytemap_key(pieces, e);
        for (uint32_t k = 0; k < e->len; k++) tr->sym[at++] = key[k];
    }
    pairmap_init(&tr->pair_index, 1 << 16);
    bytemap_init(&tr->token_ids, (size_t)vocab_size);
    tr->token_offset = bs_malloc(((size_t)vocab_size + 1) * sizeof(uint32_t));
    tr->bytes_cap = 4096;
    tr->token_bytes = bs_malloc(tr->bytes_cap);
    tr->token_offset[0] = 0;
    for (int b = 0; b < 256; b++) {
        bool created;
        tr->token_bytes[b] = (unsigned char)b;
        tr->token_offset[b + 1] = (uint32_t)(b + 1);
        *bytemap_insert(&tr->token_ids, &tr->token_bytes[b], 1, bytemap_hash(&tr->token_bytes[b], 1), &created) =
            (uint32_t)b;
    }
    tr->bytes_len = 256;
    tr->next_id = 256;
    for (size_t w = 0; w < tr->num_words; w++) { /* initial counts */
        const int32_t *s = tr->sym + tr->word_start[w];
        for (uint32_t i = 0; i + 1 < tr->word_len[w]; i++) {
            uint32_t p = pair_of(tr, s[i], s[i + 1]);
            tr->pairs[p].count += (int64_t)tr->word_count[w];
            if (tr->pairs[p].words.n == 0 || tr->pairs[p].words.v[tr->pairs[p].words.n - 1] != w)
                u32_push(&tr->pairs[p].words, (uint32_t)w);
        }
    }
    for (uint32_t p = 0; p < tr->num_pairs; p++) heap_push(tr, p);
}

static void training_free(Training *tr) {
    for (size_t p = 0; p < tr->num_pairs; p++) free(tr->pairs[p].words.v);
    free(tr->pairs);
    free(tr->pair_stamp);
    free(tr->heap);
    pairmap_free(&tr->pair_index);
    bytemap_free(&tr->token_ids);
    free(tr->token_offset);
    free(tr->token_bytes);
    free(tr->word_count);
    free(tr->word_start);
    free(tr->word_len);
    free(tr->word_stamp);
    free(tr->sym);
}

/* Replaces every (left, right) in the words that hold it by `made`. */
static void apply_merge(Training *tr, uint32_t p, int32_t made, uint32_t stamp) {
    const int32_t left = tr->pairs[p].left, right = tr->pairs[p].right;
    U32List words = tr->pairs[p].words, gained = {0};
    tr->pairs[p].words = (U32List){0};
    for (uint32_t k = 0; k < words.n; k++) {
        size_t w = words.v[k];
        if (tr->word_stamp[w] == stamp) continue; /* already rewritten for this merge */
        int32_t *s = tr->sym + tr->word_start[w];
        uint32_t n = tr->word_len[w], i = 0;
        while (i + 1 < n && !(s[i] == left && s[i + 1] == right)) i++;
        if (i + 1 >= n) continue; /* stale: an earlier merge took the pair away */
        tr->word_stamp[w] = stamp;
        count_word_pairs(tr, w, -1, -1, stamp, &gained);
        uint32_t out = 0;
        for (i = 0; i < n; i++) {
            if (i + 1 < n && s[i] == left && s[i + 1] == right) {
                s[out++] = made;
                i++;
            } else {
                s[out++] = s[i];
            }
        }
        tr->word_len[w] = out;
        count_word_pairs(tr, w, +1, made, stamp, &gained);
    }
    for (uint32_t k = 0; k < gained.n; k++) heap_push(tr, gained.v[k]);
    free(gained.v);
    free(words.v);
}

void bpe_trainer_train(const BpeTrainer *t, int vocab_size, BpeModel *out) {
    if (vocab_size < 257) bs_die_about("vocab_size", "a vocabulary of %d is too small: 256 bytes and end-of-text need 257", vocab_size);
    Training tr;
    training_init(&tr, t, vocab_size);
    size_t max_merges = 1024;
    int32_t *left = bs_malloc(max_merges * sizeof(int32_t)), *right = bs_malloc(max_merges * sizeof(int32_t));
    int32_t *made = bs_malloc(max_merges * sizeof(int32_t));
    size_t num_merges = 0;
    while (tr.next_id + 1 < vocab_size && tr.heap_n > 0) {
        HeapEntry top = heap_pop(&tr);
        Pair *pair = &tr.pairs[top.pair];
        if (pair->count <= 0) continue;
        if (top.count != pair->count) {
            if (top.count > pair->count) heap_push(&tr, top.pair); /* counts fell: requeue at the true count */
            continue; /* a count that rose was pushed again when it rose */
        }
        if (num_merges == max_merges) {
            max_merges *= 2;
            left = realloc(left, max_merges * sizeof(int32_t));
            right = realloc(right, max_merges * sizeof(int32_t));
            made = realloc(made, max_merges * sizeof(int32_t));
            if (!left || !right || !made) bs_die("out of memory training BPE");
        }
        left[num_merges] = pair->left;
        right[num_merges] = pair->right;
        made[num_merges] = make_token(&tr, pair->left, pair->right);
        num_merges++;
        apply_merge(&tr, top.pair, made[num_merges - 1], (uint32_t)num_merges);
    }
    training_free(&tr);
    bpe_model_from_merges(out, left, right, (int)num_merges, "trained BPE");
    for (size_t i = 0; i < num_merges; i++)
        if (out->merge_result[i] != made[i]) bs_die("internal: trained merge %zu made id %d, the model says %d", i, made[i], out->merge_result[i]);
    free(left);
    free(right);
    free(made);
}
