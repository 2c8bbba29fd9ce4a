/* crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as
 * TFRecord files frame their records (train/tensorboard.h), and the
 * "masked" form those files store. Check value: crc32c("123456789") =
 * 0xE3069283. Bytewise table, built on first use into the caller's table:
 * these files are small, speed does not matter. */
#ifndef BS_CORE_CRC32C_H
#define BS_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t table[256];
} Crc32cTable;

void crc32c_init(Crc32cTable *t);
uint32_t crc32c(const Crc32cTable *t, const void *data, size_t n);
/* TFRecord's mask: rotate right by 15, add 0xa282ead8. */
uint32_t crc32c_masked(const Crc32cTable *t, const void *data, size_t n);

#endif
