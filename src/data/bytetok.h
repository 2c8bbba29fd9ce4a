/* bytetok.h: the embedded default tokenizer: one token per byte (0..255)
 * plus end-of-text = 256, vocabulary 257. Lossless for any byte string. */
#ifndef BS_DATA_BYTETOK_H
#define BS_DATA_BYTETOK_H

#include <stddef.h>
#include <stdint.h>

#define BYTETOK_VOCAB 257
#define BYTETOK_EOT 256

/* Writes n tokens for n bytes. */
void bytetok_encode(const unsigned char *text, size_t n, uint16_t *tokens);
/* Appends the bytes of tokens to out (capacity >= n); end-of-text is skipped.
 * Returns the number of bytes written. */
size_t bytetok_decode(const int32_t *tokens, size_t n, unsigned char *out);

#endif
