/* pretokenize.c: GPT-2's pre-tokenisation as a scanner (see pretokenize.h).
 * ASCII is classified by a table; other code points by utf8proc. */
#include "data/pretokenize.h"

#include <stdint.h>
#include <stdlib.h>
#include <utf8proc.h>

#include "core/error.h"

enum { CLASS_OTHER, CLASS_LETTER, CLASS_NUMBER, CLASS_SPACE };

/* Class of each ASCII byte: '0' other, '1' letter, '2' number, '3' space
 * (\t \n \v \f \r and ' '; 0x1c..0x1f are not White_Space). */
static const char ascii_classes[129] = "00000000033333000000000000000000"
                                       "30000000000000002222222222000000"
                                       "01111111111111111111111111100000"
                                       "01111111111111111111111111100000";

static inline int ascii_class(unsigned char c) { return ascii_classes[c] - '0'; }

static int codepoint_class(int32_t cp) {
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return CLASS_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return CLASS_NUMBER;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return CLASS_SPACE;
    default:
        return cp == 0x85 ? CLASS_SPACE : CLASS_OTHER; /* NEL is White_Space though a control */
    }
}

static inline int is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Length (2..4) of the valid UTF-8 sequence of at most n bytes at s[0] >= 0x80
 * and its code point, or 0 if there is none (overlong forms, surrogates and
 * code points above U+10FFFF are invalid). */
static int utf8_decode_multibyte(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned char c = s[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || !is_continuation(s[1])) return 0;
        *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || !is_continuation(s[1]) || !is_continuation(s[2])) return 0;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F)) return 0;
        *cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || !is_continuation(s[1]) || !is_continuation(s[2]) || !is_continuation(s[3])) return 0;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F)) return 0;
        *cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

/* Class of the symbol at text[i] (i < n) and its length in bytes. */
static inline int class_at(const unsigned char *text, size_t n, size_t i, size_t *len) {
    if (text[i] < 0x80) {
        *len = 1;
        return ascii_class(text[i]);
    }
    int32_t cp;
    int k = utf8_decode_multibyte(text + i, n - i, &cp);
    if (k == 0) {
        *len = 1;
        return CLASS_OTHER;
    }
    *len = (size_t)k;
    return codepoint_class(cp);
}

/* Class of the symbol that ends at text[p-1] (p >= 1, text[0] a symbol start).
 * A lead byte never continues a sequence, so the valid sequence ending at
 * p-1, if any, is the one forward decoding finds. */
static int class_before(const unsigned char *text, size_t p) {
    if (text[p - 1] < 0x80) return ascii_class(text[p - 1]);
    for (size_t len = 2; len <= 4 && len <= p; len++) {
        int32_t cp;
        if (utf8_decode_multibyte(text + p - len, len, &cp) == (int)len) return codepoint_class(cp);
    }
    return CLASS_OTHER;
}

size_t pretok_next(const unsigned char *text, size_t n, size_t i) {
    const size_t start = i;
    if (text[i] == '\'' && i + 1 < n) { /* 's 't 'm 'd 're 've 'll */
        unsigned char a = text[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char b = text[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    size_t len;
    int cls = class_at(text, n, i, &len);
    if (text[i] == ' ' && i + 1 < n) { /* " ?" before a run of letters, numbers or others */
        size_t next_len;
        int next = class_at(text, n, i + 1, &next_len);
        if (next != CLASS_SPACE) {
            cls = next;
            i += 1;
            len = next_len;
        }
    }
    i += len;
    if (cls != CLASS_SPACE) {
        while (i < n && class_at(text, n, i, &len) == cls) i += len;
        return i;
    }
    /* \s+(?!\S)|\s+ : a whitespace run, less its last symbol when a
     * non-space follows (that symbol then leads the next piece). */
    size_t last = start;
    while (i < n && class_at(text, n, i, &len) == CLASS_SPACE) {
        last = i;
        i += len;
    }
    if (i == n || last == start) return i;
    return last;
}

size_t pretok_find_cut(const unsigned char *text, size_t n, size_t from) {
    /* A piece never spans a change of class between two non-space symbols,
     * except a contraction after an apostrophe, nor a non-space followed by
     * a space. text[p] is taken ASCII so that p is surely a symbol start. */
    for (size_t p = from; p < n; p++) {
        if (text[p] >= 0x80) continue;
        int here = ascii_class(text[p]);
        if (text[p - 1] == '\'') continue;
        int before = class_before(text, p);
        if (before != CLASS_SPACE && before != here) return p;
    }
    return 0;
}

size_t pretok_split(const unsigned char *text, size_t n, size_t target, TextSpan **spans) {
    if (target == 0) target = 1;
    size_t cap = n / target + 2, count = 0;
    TextSpan *out = bs_malloc(cap * sizeof(TextSpan));
    for (size_t start = 0; start < n;) {
        size_t cut = n - start > target ? pretok_find_cut(text + start, n - start, target) : 0;
        size_t len = cut ? cut : n - start;
        if (count == cap) {
            cap *= 2;
            TextSpan *grown = realloc(out, cap * sizeof(TextSpan));
            if (!grown) bs_die("out of memory splitting %zu bytes of text", n);
            out = grown;
        }
        out[count++] = (TextSpan){text + start, len};
        start += len;
    }
    *spans = out;
    return count;
}
