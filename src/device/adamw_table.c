/* adamw_table.c: the fused AdamW's segment table (adamw_table.h). */
#include "device/adamw_table.h"

static size_t clamp(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

size_t adamw_table_clip(const AdamWSegment *tensors, int ntensors, size_t r0, size_t r1, AdamWSegment *out,
                        int *nsegs) {
    size_t n = 0;
    *nsegs = 0;
    for (int i = 0; i < ntensors; i++) {
        const size_t begin = (size_t)tensors[i].offset, end = begin + (size_t)tensors[i].count;
        const size_t o = clamp(begin, r0, r1), e = clamp(end, r0, r1);
        if (e == o) continue; /* outside the range */
        out[(*nsegs)++] = (AdamWSegment){(int64_t)o, (int64_t)n, (int64_t)(e - o), tensors[i].decays};
        n += e - o;
    }
    return n;
}
