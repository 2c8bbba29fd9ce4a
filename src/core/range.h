/* range.h: a contiguous range [offset, offset + count) of a flat buffer.
 *
 * Parameters, gradients and optimizer state are flat arrays; a ZeRO shard, a
 * gradient bucket, a checkpoint file's slice, a tensor and a shard run are
 * all ranges of them. Their intersection, and where one range starts inside
 * another, are computed here and nowhere else. Header-only (small static
 * inline functions); it knows nothing about what the elements are. */
#ifndef BS_CORE_RANGE_H
#define BS_CORE_RANGE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    size_t offset, count;
} Range;

static inline Range range_make(size_t offset, size_t count) { return (Range){offset, count}; }

/* One past the last element. */
static inline size_t range_end(Range r) { return r.offset + r.count; }

static inline bool range_empty(Range r) { return r.count == 0; }

/* The elements in both. Disjoint (or touching) ranges give count 0, at the
 * offset where the later one starts. */
static inline Range range_intersect(Range a, Range b) {
    size_t lo = a.offset > b.offset ? a.offset : b.offset;
    size_t hi = range_end(a) < range_end(b) ? range_end(a) : range_end(b);
    return (Range){lo, hi > lo ? hi - lo : 0};
}

/* Whether every element of inner lies in outer (an empty inner does when its
 * offset lies in [outer.offset, range_end(outer)]). */
static inline bool range_contains(Range outer, Range inner) {
    return inner.offset >= outer.offset && range_end(inner) <= range_end(outer);
}

/* Whether element i lies in r. */
static inline bool range_has(Range r, size_t i) { return i >= r.offset && i < range_end(r); }

/* Where r starts inside base: the index into base's array of r's first
 * element (r.offset >= base.offset). */
static inline size_t range_offset_in(Range r, Range base) { return r.offset - base.offset; }

#endif
