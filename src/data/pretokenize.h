/* pretokenize.h: GPT-2's pre-tokenisation, the split of text into the pieces
 * that BPE merges within. It is the regex of OpenAI's encoder.py,
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * written as a scanner (the same pieces as tiktoken and Hugging Face
 * tokenizers; tested against both). \p{L} and \p{N} are the Unicode letter
 * and number categories (utf8proc's tables), \s is Unicode White_Space. The
 * contractions are ASCII and case-sensitive, the optional leading space is
 * U+0020 only.
 *
 * Any byte string is accepted: a byte that does not start a valid UTF-8
 * sequence is one symbol of the "other" class (as a lone surrogate would be
 * in Python), so pieces always cover the input exactly.
 *
 * This file knows nothing of vocabularies or merges. */
#ifndef BS_DATA_PRETOKENIZE_H
#define BS_DATA_PRETOKENIZE_H

#include <stddef.h>

typedef struct {
    const unsigned char *text;
    size_t len;
} TextSpan;

/* End (exclusive) of the piece that starts at text[i], i < n. */
size_t pretok_next(const unsigned char *text, size_t n, size_t i);

/* The first p in [from, n) where text may be cut into text[0..p) and
 * text[p..n) without changing any piece (the pieces of the whole are the
 * pieces of the two parts), or 0 if there is none in that range; from >= 1.
 * Used to split long texts for threads and streaming: encoding the parts
 * separately gives exactly the tokens of the whole. */
size_t pretok_find_cut(const unsigned char *text, size_t n, size_t from);

/* Splits text[0..n) at such cuts into spans of about `target` bytes (longer
 * where no cut comes sooner). Returns the count; *spans is malloc'ed. */
size_t pretok_split(const unsigned char *text, size_t n, size_t target, TextSpan **spans);

#endif
