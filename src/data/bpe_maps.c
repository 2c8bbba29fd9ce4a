/* bpe_maps.c: hash tables for BPE (see bpe_maps.h). */
#define XXH_INLINE_ALL
#include "data/bpe_maps.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"

static size_t table_size(size_t expected) {
    size_t n = 16;
    while (n < 2 * expected) n *= 2;
    return n;
}

void pairmap_init(PairMap *m, size_t expected) {
    size_t n = table_size(expected);
    m->slots = bs_malloc(n * sizeof(PairEntry));
    for (size_t i = 0; i < n; i++) m->slots[i].key = PAIRMAP_EMPTY;
    m->mask = n - 1;
    m->count = 0;
}

void pairmap_free(PairMap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static PairEntry *pair_probe(PairMap *m, uint64_t key) {
    for (size_t i = pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        PairEntry *e = &m->slots[i];
        if (e->key == key || e->key == PAIRMAP_EMPTY) return e;
    }
}

PairEntry *pairmap_insert(PairMap *m, uint64_t key, bool *created) {
    if (key == PAIRMAP_EMPTY) bs_die("internal: pair (-1, -1) cannot be a map key");
    if (2 * (m->count + 1) > m->mask + 1) {
        PairMap bigger;
        pairmap_init(&bigger, m->count + 1);
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slots[i].key != PAIRMAP_EMPTY) *pair_probe(&bigger, m->slots[i].key) = m->slots[i];
        bigger.count = m->count;
        free(m->slots);
        *m = bigger;
    }
    PairEntry *e = pair_probe(m, key);
    *created = e->key == PAIRMAP_EMPTY;
    if (*created) {
        e->key = key;
        e->a = e->b = 0;
        m->count++;
    }
    return e;
}

uint64_t bytemap_hash(const void *key, size_t n) { return XXH3_64bits(key, n); }

static void clear_slots(ByteMap *m) {
    for (size_t i = 0; i <= m->mask; i++) m->slots[i].offset = UINT32_MAX;
    m->count = 0;
}

void bytemap_init(ByteMap *m, size_t expected) {
    size_t n = table_size(expected);
    m->slots = bs_malloc(n * sizeof(ByteEntry));
    m->mask = n - 1;
    clear_slots(m);
    m->keys_cap = 16 * expected + 64;
    m->keys = bs_malloc(m->keys_cap);
    m->keys_len = 0;
}

void bytemap_free(ByteMap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

void bytemap_clear(ByteMap *m) {
    clear_slots(m);
    m->keys_len = 0;
}

static ByteEntry *byte_probe(const ByteMap *m, const void *key, size_t n, uint64_t hash) {
    for (size_t i = (size_t)hash & m->mask;; i = (i + 1) & m->mask) {
        ByteEntry *e = &m->slots[i];
        if (e->offset == UINT32_MAX) return e;
        if (e->hash == hash && e->len == n && memcmp(m->keys + e->offset, key, n) == 0) return e;
    }
}

uint32_t *bytemap_find(const ByteMap *m, const void *key, size_t n, uint64_t hash) {
    ByteEntry *e = byte_probe(m, key, n, hash);
    return e->offset == UINT32_MAX ? NULL : &e->value;
}

uint32_t *bytemap_insert(ByteMap *m, const void *key, size_t n, uint64_t hash, bool *created) {
    if (2 * (m->count + 1) > m->mask + 1) {
        size_t size = 2 * (m->mask + 1);
        ByteEntry *old = m->slots;
        size_t old_size = m->mask + 1;
        m->slots = bs_malloc(size * sizeof(ByteEntry));
        m->mask = size - 1;
        size_t count = m->count;
        clear_slots(m);
        for (size_t i = 0; i < old_size; i++) {
            if (old[i].offset == UINT32_MAX) continue;
            ByteEntry *e = byte_probe(m, m->keys + old[i].offset, old[i].len, old[i].hash);
            *e = old[i];
        }
        m->count = count;
        free(old);
    }
    ByteEntry *e = byte_probe(m, key, n, hash);
    *created = e->offset == UINT32_MAX;
    if (*created) {
        if (m->keys_len + n > UINT32_MAX) bs_die("a byte-string map outgrew 4 GiB of keys");
        if (m->keys_len + n > m->keys_cap) {
            while (m->keys_len + n > m->keys_cap) m->keys_cap *= 2;
            unsigned char *keys = realloc(m->keys, m->keys_cap);
            if (!keys) bs_die("out of memory growing a byte-string map to %zu bytes", m->keys_cap);
            m->keys = keys;
        }
        memcpy(m->keys + m->keys_len, key, n);
        e->hash = hash;
        e->offset = (uint32_t)m->keys_len;
        e->len = (uint32_t)n;
        e->value = 0;
        m->keys_len += n;
        m->count++;
    }
    return &e->value;
}
