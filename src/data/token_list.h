/* token_list.h: a growable array of token ids, the output of encoding.
 * Encoders append; the caller owns it and frees it with token_list_free. */
#ifndef BS_DATA_TOKEN_LIST_H
#define BS_DATA_TOKEN_LIST_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"

typedef struct {
    int32_t *ids;
    size_t len, cap;
} TokenList;

/* Makes room for `extra` more ids. */
static inline void token_list_reserve(TokenList *l, size_t extra) {
    if (l->len + extra <= l->cap) return;
    size_t cap = l->cap ? l->cap : 256;
    while (cap < l->len + extra) cap *= 2;
    int32_t *ids = realloc(l->ids, cap * sizeof(int32_t));
    if (!ids) bs_die("out of memory growing a token list to %zu tokens", cap);
    l->ids = ids;
    l->cap = cap;
}

static inline void token_list_push(TokenList *l, int32_t id) {
    token_list_reserve(l, 1);
    l->ids[l->len++] = id;
}

static inline void token_list_free(TokenList *l) {
    free(l->ids);
    l->ids = NULL;
    l->len = l->cap = 0;
}

#endif
