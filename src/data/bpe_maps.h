/* bpe_maps.h: the two hash tables BPE needs, both open addressing with
 * linear probing and power-of-two sizes, growing at half full.
 *
 * PairMap: a pair of token ids -> two uint32 values (a merge's rank and the
 * token it makes; or, while training, a pair's index). ByteMap: a byte
 * string -> one uint32 value (a word's index, a token's id, the place of a
 * cached encoding); keys are copied into the map's own arena.
 * Neither supports deletion; ByteMap can be emptied at once (a cache). */
#ifndef BS_DATA_BPE_MAPS_H
#define BS_DATA_BPE_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PAIRMAP_EMPTY UINT64_MAX

typedef struct {
    uint64_t key; /* left << 32 | right, or PAIRMAP_EMPTY */
    uint32_t a, b;
} PairEntry;

typedef struct {
    PairEntry *slots;
    size_t mask, count;
} PairMap;

static inline uint64_t pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static inline size_t pair_slot(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 29) & mask;
}

void pairmap_init(PairMap *m, size_t expected);
void pairmap_free(PairMap *m);
/* The entry of key, or NULL. */
static inline const PairEntry *pairmap_find(const PairMap *m, uint64_t key) {
    for (size_t i = pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        const PairEntry *e = &m->slots[i];
        if (e->key == key) return e;
        if (e->key == PAIRMAP_EMPTY) return NULL;
    }
}
/* The entry of key, inserted with a = b = 0 if absent (*created says which).
 * The pointer is valid until the next insertion. */
PairEntry *pairmap_insert(PairMap *m, uint64_t key, bool *created);

typedef struct {
    uint64_t hash;
    uint32_t offset, len; /* key bytes in the arena; offset UINT32_MAX: empty slot */
    uint32_t value;
} ByteEntry;

typedef struct {
    ByteEntry *slots;
    size_t mask, count;
    unsigned char *keys;
    size_t keys_len, keys_cap;
} ByteMap;

uint64_t bytemap_hash(const void *key, size_t n);
void bytemap_init(ByteMap *m, size_t expected);
void bytemap_free(ByteMap *m);
/* Forgets every key, keeping the memory. */
void bytemap_clear(ByteMap *m);
/* The value of key (hash = bytemap_hash(key, n)), or NULL. */
uint32_t *bytemap_find(const ByteMap *m, const void *key, size_t n, uint64_t hash);
/* The value of key, inserted as 0 if absent; valid until the next insertion. */
uint32_t *bytemap_insert(ByteMap *m, const void *key, size_t n, uint64_t hash, bool *created);
/* The bytes of an entry's key. */
static inline const unsigned char *bytemap_key(const ByteMap *m, const ByteEntry *e) { return m->keys + e->offset; }

#endif
