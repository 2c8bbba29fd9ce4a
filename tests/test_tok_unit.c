/* test_tok_unit.c: unit tests of the tokenizer layer (no peers needed).
 *
 *   - pre-tokenisation of hand-picked strings equals the pieces of GPT-2's
 *     regex as Python's `regex` module (OpenAI's encoder.py) finds them;
 *   - every cut pretok_find_cut allows leaves the pieces unchanged, on
 *     random text mixing ASCII, multi-byte UTF-8 and invalid bytes;
 *   - decode(encode(x)) == x for random byte strings, for GPT-2's BPE and the
 *     byte tokenizer; splitting text at cuts gives the same tokens;
 *   - the byte tokenizer and bytetok.h agree; a BPE file round-trips.
 * Usage: test_tok_unit GPT2_VOCAB_DIR TMP_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/bpe_file.h"
#include "data/bytetok.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "check.h"

/* Pieces of text joined by '|' into out. */
static void pieces(const char *text, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = pretok_next((const unsigned char *)text, n, i);
        if (i > 0) out[k++] = '|';
        memcpy(out + k, text + i, j - i);
        k += j - i;
        i = j;
    }
    out[k] = '\0';
}

static void test_pieces(void) {
    /* Expected pieces from regex.findall(GPT-2's pattern, text). */
    static const char *const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"I'm", "I|'m"},
        {"  hi", " | hi"},
        {"a  \n\nb", "a|  \n|\n|b"},
        {"don't stop", "don|'t| stop"},
        {"IT'S", "IT|'|S"},
        {"''s", "''|s"},
        {"?'s", "?'|s"},
        {" 's", " '|s"},
        {"x'll'", "x|'ll|'"},
        {"a1b2", "a|1|b|2"},
        {"3.14", "3|.|14"},
        {"a\n b", "a|\n| b"},
        {"a \n", "a| \n"},
        {"  ", "  "},
        {"e\xcc\x81x", "e|\xcc\x81|x"},                              /* combining acute: a mark, not a letter */
        {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"}, /* CJK letters */
        {"hi!!! ok", "hi|!!!| ok"},
        {"\t\tx", "\t|\t|x"},
        {"a\xc2\xa0" "b", "a|\xc2\xa0|b"},                            /* no-break space is White_Space */
        {"\xe3\x80\x80\xe3\x80\x80x", "\xe3\x80\x80|\xe3\x80\x80|x"}, /* ideographic spaces */
        {"x \x1cy", "x| \x1c|y"},                                    /* 0x1c is not White_Space */
        {"12 345", "12| 345"},
        {"\xd9\xa3\xd9\xa4\xd9\xa5x", "\xd9\xa3\xd9\xa4\xd9\xa5|x"}, /* Arabic-Indic digits */
        {"a\xff\xfe b", "a|\xff\xfe| b"},                            /* invalid bytes: "other" symbols */
    };
    char got[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pieces(cases[c][0], strlen(cases[c][0]), got);
        CHECK(strcmp(got, cases[c][1]) == 0, "pieces of case %zu: got '%s', want '%s'", c, got, cases[c][1]);
    }
}

/* Random text: ASCII letters, digits, spaces, punctuation, apostrophes,
 * multi-byte letters and spaces, and invalid bytes. */
static size_t random_text(Rng *rng, unsigned char *out, size_t max) {
    static const char *const atoms[] = {"a", "Z", "7", " ", "  ", "\n", "\t", "'", "'s", "'ll", ".", "!", "\xc3\xa9",
                                        "\xe3\x80\x80", "\xc2\xa0", "\xd9\xa3", "\xf0\x9f\x98\x80", "\xcc\x81", "\xff",
                                        "\x80", "\xe2\x82", "\xed\xa0\x80", "\x1c", "\xc2\x85"};
    const size_t natoms = sizeof atoms / sizeof atoms[0];
    size_t n = 0, want = (size_t)rng_below(rng, max / 4);
    while (n < want) {
        const char *a = atoms[rng_below(rng, natoms)];
        size_t len = strlen(a);
        if (n + len > max) break;
        memcpy(out + n, a, len);
        n += len;
    }
    return n;
}

static void test_cuts(void) {
    Rng rng;
    rng_seed(&rng, 7);
    unsigned char text[512];
    char whole[2048], left[2048], right[2048], joined[4200];
    int cuts = 0;
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = random_text(&rng, text, sizeof text);
        if (n < 2) continue;
        pieces((const char *)text, n, whole);
        for (size_t p = pretok_find_cut(text, n, 1); p; p = p + 1 < n ? pretok_find_cut(text, n, p + 1) : 0) {
            pieces((const char *)text, p, left);
            pieces((const char *)text + p, n - p, right);
            snprintf(joined, sizeof joined, "%s|%s", left, right);
            CHECK(strcmp(joined, whole) == 0, "cut at %zu of trial %d changes the pieces", p, trial);
            cuts++;
        }
    }
    CHECK(cuts > 10000, "only %d cuts were tried", cuts);
}

static bool same_tokens(const TokenList *a, const TokenList *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->ids, b->ids, a->len * sizeof(int32_t)) == 0);
}

static void test_round_trip(const Tokenizer *tok) {
    TokenizerEncoder *enc = tokenizer_encoder_new(tok);
    Rng rng;
    rng_seed(&rng, 11);
    unsigned char text[4096];
    for (int trial = 0; trial < 3000; trial++) {
        size_t n;
        if (trial % 2 == 0) { /* uniformly random bytes */
            n = (size_t)rng_below(&rng, 600);
            for (size_t i = 0; i < n; i++) text[i] = (unsigned char)rng_below(&rng, 256);
        } else {
            n = random_text(&rng, text, sizeof text);
        }
        TokenList ids = {0};
        tokenizer_encode(enc, text, n, &ids);
        size_t len;
        unsigned char *back = tokenizer_decode(tok, ids.ids, ids.len, &len);
        CHECK(len == n && memcmp(back, text, n) == 0, "%s: decode(encode(x)) != x, trial %d (%zu bytes)",
              tokenizer_spec(tok), trial, n);
        for (size_t i = 0; i < ids.len; i++)
            CHECK(ids.ids[i] != tokenizer_eot(tok), "%s: encoding produced end-of-text", tokenizer_spec(tok));
        /* Encoding the parts between cuts gives the same tokens (what threads and streaming rely on). */
        TextSpan *spans;
        size_t nspans = pretok_split(text, n, 1 + (size_t)rng_below(&rng, 40), &spans);
        TokenList parts = {0};
        for (size_t s = 0; s < nspans; s++) tokenizer_encode(enc, spans[s].text, spans[s].len, &parts);
        CHECK(same_tokens(&ids, &parts), "%s: split encoding differs, trial %d", tokenizer_spec(tok), trial);
        free(spans);
        free(back);
        token_list_free(&ids);
        token_list_free(&parts);
    }
    tokenizer_encoder_free(enc);
}

static void test_byte_tokenizer(void) {
    Tokenizer *tok = tokenizer_load("byte", NULL);
    CHECK(tokenizer_vocab_size(tok) == BYTETOK_VOCAB && tokenizer_eot(tok) == BYTETOK_EOT, "byte vocabulary");
    CHECK(strcmp(tokenizer_spec(tok), "byte") == 0, "byte spec is '%s'", tokenizer_spec(tok));
    unsigned char text[256];
    uint16_t expect[256];
    for (int i = 0; i < 256; i++) text[i] = (unsigned char)(255 - i);
    bytetok_encode(text, 256, expect);
    TokenizerEncoder *enc = tokenizer_encoder_new(tok);
    TokenList ids = {0};
    tokenizer_encode(enc, text, 256, &ids);
    CHECK(ids.len == 256, "byte tokenizer: %zu tokens for 256 bytes", ids.len);
    for (int i = 0; i < 256 && ids.len == 256; i++) CHECK(ids.ids[i] == expect[i], "byte tokenizer vs bytetok at %d", i);
    int32_t eot = BYTETOK_EOT;
    size_t len;
    unsigned char *s = tokenizer_decode(tok, &eot, 1, &len);
    CHECK(len == 13 && memcmp(s, "<|endoftext|>", 13) == 0, "end-of-text decodes to '%s'", (char *)s);
    free(s);
    token_list_free(&ids);
    tokenizer_encoder_free(enc);
    tokenizer_free(tok);
}

static void test_file_round_trip(const char *tmp) {
    /* merges: "ab", "abc", "bc", then "a"+"bc" (same bytes as "abc": reuses its id) */
    const int32_t left[] = {'a', 256, 'b', 'a'}, right[] = {'b', 'c', 'c', 258};
    BpeModel m, back;
    bpe_model_from_merges(&m, left, right, 4, "test");
    CHECK(m.vocab_size == 257 + 3 && m.eot == 259, "vocab %d eot %d", m.vocab_size, m.eot);
    CHECK(m.merge_result[3] == 257, "a+bc maps to %d, want abc = 257", m.merge_result[3]);
    char path[4096];
    snprintf(path, sizeof path, "%s/unit.bpe", tmp);
    bpe_file_write(&m, path);
    bpe_file_read(&back, path);
    CHECK(back.vocab_size == m.vocab_size && back.num_merges == m.num_merges, "file round trip sizes");
    for (int r = 0; r < m.num_merges && r < back.num_merges; r++)
        CHECK(back.merge_left[r] == m.merge_left[r] && back.merge_right[r] == m.merge_right[r] &&
                  back.merge_result[r] == m.merge_result[r], "file round trip merge %d", r);
    bpe_model_free(&m);
    bpe_model_free(&back);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_tok_unit GPT2_VOCAB_DIR TMP_DIR\n");
        return 2;
    }
    test_pieces();
    test_cuts();
    test_byte_tokenizer();
    test_file_round_trip(argv[2]);
    Tokenizer *gpt2 = tokenizer_load("gpt2", argv[1]);
    CHECK(tokenizer_vocab_size(gpt2) == 50257 && tokenizer_eot(gpt2) == 50256, "GPT-2 vocabulary %d, eot %d",
          tokenizer_vocab_size(gpt2), tokenizer_eot(gpt2));
    test_round_trip(gpt2);
    tokenizer_free(gpt2);
    Tokenizer *bytes = tokenizer_load("byte", NULL);
    test_round_trip(bytes);
    tokenizer_free(bytes);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_tok_unit: all checks passed\n");
    return 0;
}
