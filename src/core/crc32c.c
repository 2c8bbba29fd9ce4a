/* crc32c.c: CRC-32C and its TFRecord mask (see crc32c.h). */
#include "core/crc32c.h"

void crc32c_init(Crc32cTable *t) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t->table[i] = c;
    }
}

uint32_t crc32c(const Crc32cTable *t, const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = t->table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t crc32c_masked(const Crc32cTable *t, const void *data, size_t n) {
    uint32_t c = crc32c(t, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
