/* tensorboard.c: TensorBoard event files, protobufs encoded by hand (see
 * tensorboard.h). */
#include "train/tensorboard.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/io.h"

/* protobuf wire types */
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static void put(TensorBoard *tb, const void *data, size_t n) {
    if (tb->len + n > tb->cap) {
        tb->cap = 2 * (tb->len + n) + 256;
        tb->buf = realloc(tb->buf, tb->cap);
        if (!tb->buf) bs_die("out of memory (TensorBoard summary)");
    }
    memcpy(tb->buf + tb->len, data, n);
    tb->len += n;
}

/* A varint into out; returns its length. */
static size_t varint(uint64_t v, unsigned char *out) {
    size_t n = 0;
    do {
        out[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static size_t key(int field, int wire, unsigned char *out) { return varint((uint64_t)(field << 3 | wire), out); }

static void put_le(unsigned char *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* One TFRecord: length, its masked CRC, the payload, its masked CRC. */
static void write_record(TensorBoard *tb, const unsigned char *payload, size_t n) {
    unsigned char head[12], tail[4];
    put_le(head, n, 8);
    put_le(head + 8, crc32c_masked(&tb->crc, head, 8), 4);
    put_le(tail, crc32c_masked(&tb->crc, payload, n), 4);
    if (fwrite(head, 1, 12, tb->file) != 12 || fwrite(payload, 1, n, tb->file) != n || fwrite(tail, 1, 4, tb->file) != 4 ||
        fflush(tb->file) != 0)
        bs_die("cannot write the TensorBoard event file (disk full?)");
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* An Event: wall_time (1, double), step (2, int64), then `field` (3: file_version, 5: summary) holding body. */
static void write_event(TensorBoard *tb, long step, int field, const unsigned char *body, size_t body_len) {
    unsigned char *event = bs_malloc(body_len + 32);
    size_t n = key(1, WIRE_FIXED64, event);
    double t = wall_time();
    uint64_t bits;
    memcpy(&bits, &t, 8);
    put_le(event + n, bits, 8);
    n += 8;
    n += key(2, WIRE_VARINT, event + n);
    n += varint((uint64_t)step, event + n);
    n += key(field, WIRE_BYTES, event + n);
    n += varint(body_len, event + n);
    memcpy(event + n, body, body_len);
    write_record(tb, event, n + body_len);
    free(event);
}

void tensorboard_open(TensorBoard *tb, const char *dir) {
    *tb = (TensorBoard){0};
    crc32c_init(&tb->crc);
    bs_mkdir_p(dir);
    char host[256] = "host", path[4400];
    gethostname(host, sizeof host - 1);
    snprintf(path, sizeof path, "%s/events.out.tfevents.%ld.%s.%ld", dir, (long)wall_time(), host, (long)getpid());
    tb->file = bs_fopen(path, "wb");
    static const char version[] = "brain.Event:2";
    write_event(tb, 0, 3, (const unsigned char *)version, sizeof version - 1);
}

void tensorboard_begin(TensorBoard *tb, long step) {
    tb->step = step;
    tb->len = 0;
}

/* Summary.value (1): Value{tag (1, string), simple_value (2, float)}. */
void tensorboard_scalar(TensorBoard *tb, const char *tag, double value) {
    if (!tb->file || !isfinite(value)) return;
    const size_t tag_len = strlen(tag);
    unsigned char head[24], value_bytes[5];
    size_t h = key(1, WIRE_BYTES, head), v = key(2, WIRE_FIXED32, value_bytes);
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    put_le(value_bytes + v, bits, 4);
    unsigned char len_bytes[10];
    const size_t inner = key(1, WIRE_BYTES, len_bytes) + varint(tag_len, len_bytes) + tag_len + v + 4;
    h += varint(inner, head + h);
    h += key(1, WIRE_BYTES, head + h);
    h += varint(tag_len, head + h);
    put(tb, head, h);
    put(tb, tag, tag_len);
    put(tb, value_bytes, v + 4);
}

void tensorboard_end(TensorBoard *tb) {
    if (tb->file && tb->len > 0) write_event(tb, tb->step, 5, tb->buf, tb->len);
    tb->len = 0;
}

void tensorboard_close(TensorBoard *tb) {
    if (tb->file) fclose(tb->file);
    free(tb->buf);
    *tb = (TensorBoard){0};
}
