/* bytetok.c: byte-level tokenizer (see bytetok.h). */
#include "data/bytetok.h"

void bytetok_encode(const unsigned char *text, size_t n, uint16_t *tokens) {
    for (size_t i = 0; i < n; i++) tokens[i] = text[i];
}

size_t bytetok_decode(const int32_t *tokens, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < 256) out[k++] = (unsigned char)tokens[i];
    return k;
}
