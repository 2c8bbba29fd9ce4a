/* sft_pack.c: whole examples into windows of T tokens (see sft_pack.h). */
#include "data/sft_pack.h"

void sft_packer_init(SftPacker *p, ShardWriter *out, int T, int32_t eot) {
    *p = (SftPacker){out, T, eot, 0, false, 0, 0};
}

/* One end-of-text: counted when it follows a counted example's end. */
static void put_separator(SftPacker *p) {
    shard_writer_put(p->out, &p->eot, 1, p->last_counted);
    p->last_counted = false;
    if (++p->used == p->T) p->used = 0;
}

static void pad_block(SftPacker *p) {
    while (p->used > 0) put_separator(p);
}

bool sft_packer_add(SftPacker *p, const int32_t *tokens, const uint8_t *counted, size_t n) {
    if (n + 1 > (size_t)p->T) {
        p->dropped++;
        return false;
    }
    if ((size_t)p->used + n + 1 > (size_t)p->T) pad_block(p);
    put_separator(p);
    for (size_t i = 0; i < n; i++) shard_writer_put(p->out, &tokens[i], 1, counted[i]);
    p->used = (int)(((size_t)p->used + n) % (size_t)p->T);
    p->last_counted = n > 0 && counted[n - 1];
    p->packed++;
    return true;
}

void sft_packer_finish(SftPacker *p) {
    if (p->packed > 0) {
        pad_block(p);
        put_separator(p); /* the last window's last target */
    }
    shard_writer_finish(p->out);
}
