/* bpe_file.c: batchscale's trained-tokenizer file (see bpe_file.h). */
#include "data/bpe_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

#define MAX_MERGES (1 << 24)

/* Cuts the comment and trailing blanks off a line; returns its length. */
static size_t strip_line(char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) line[--n] = '\0';
    return n;
}

/* Parses "WORD INTEGER"; false if the line is not that. */
static bool parse_keyword(const char *line, const char *word, long *value) {
    size_t n = strlen(word);
    if (strncmp(line, word, n) != 0 || line[n] != ' ') return false;
    char *end;
    errno = 0;
    *value = strtol(line + n + 1, &end, 10);
    return end != line + n + 1 && *end == '\0' && errno == 0;
}

static bool parse_ids(const char *line, int32_t *left, int32_t *right) {
    char *end;
    errno = 0;
    long a = strtol(line, &end, 10);
    if (end == line || *end != ' ') return false;
    const char *second = end + 1;
    long b = strtol(second, &end, 10);
    if (end == second || *end != '\0' || errno != 0 || a < 0 || b < 0 || a > INT32_MAX || b > INT32_MAX) return false;
    *left = (int32_t)a, *right = (int32_t)b;
    return true;
}

void bpe_file_read(BpeModel *m, const char *path) {
    if (!bs_path_exists(path)) bs_die("tokenizer file %s does not exist (make one with `batchscale tokenizer train`)", path);
    if (bs_is_dir(path)) bs_die("tokenizer file %s is a directory", path);
    size_t size;
    char *text = bs_read_file(path, &size);
    if (strlen(text) != size) bs_die("%s holds a NUL byte; it is not a batchscale tokenizer file", path);
    long num_merges = -1, version;
    bool pretokenizer = false;
    int32_t *left = NULL, *right = NULL;
    long have = 0;
    int line_no = 0;
    for (char *line = text, *end; line && (*line || line_no == 0); line = end) {
        end = strchr(line, '\n');
        if (end) *end++ = '\0';
        line_no++;
        if (line_no == 1) {
            if (strncmp(line, BPE_FILE_MAGIC " ", strlen(BPE_FILE_MAGIC) + 1) != 0 || strip_line(line) == 0 ||
                !parse_keyword(line, BPE_FILE_MAGIC, &version))
                bs_die("%s is not a batchscale tokenizer file (its first line must be '%s %d')", path, BPE_FILE_MAGIC,
                       BPE_FILE_VERSION);
            if (version != BPE_FILE_VERSION)
                bs_die("%s has tokenizer format version %ld; this build reads version %d", path, version,
                       BPE_FILE_VERSION);
            continue;
        }
        if (strip_line(line) == 0) continue;
        if (num_merges >= 0) {
            if (have == num_merges) bs_die("%s line %d: more lines than the %ld merges announced", path, line_no, num_merges);
            if (!parse_ids(line, &left[have], &right[have]))
                bs_die("%s line %d: expected a merge 'LEFT RIGHT' (two token ids), found '%s'", path, line_no, line);
            have++;
        } else if (strcmp(line, "pretokenizer gpt2") == 0) {
            pretokenizer = true;
        } else if (parse_keyword(line, "merges", &num_merges)) {
            if (num_merges < 0 || num_merges > MAX_MERGES)
                bs_die("%s line %d: %ld merges is outside 0..%d", path, line_no, num_merges, MAX_MERGES);
            if (!pretokenizer) bs_die("%s line %d: 'pretokenizer gpt2' must come before the merges", path, line_no);
            left = bs_malloc((size_t)num_merges * sizeof(int32_t) + 1);
            right = bs_malloc((size_t)num_merges * sizeof(int32_t) + 1);
        } else if (strncmp(line, "pretokenizer ", 13) == 0) {
            bs_die("%s line %d: unknown pretokenizer '%s' (format version %d knows gpt2)", path, line_no, line + 13,
                   BPE_FILE_VERSION);
        } else {
            bs_die("%s line %d: unexpected '%s' (expected 'pretokenizer gpt2' or 'merges N')", path, line_no, line);
        }
    }
    free(text);
    if (num_merges < 0) bs_die("%s has no 'merges N' line", path);
    if (have < num_merges) bs_die("%s ends after %ld of its %ld merges (truncated?)", path, have, num_merges);
    bpe_model_from_merges(m, left, right, (int)num_merges, path);
    free(left);
    free(right);
}

/* The bytes as a C-like string literal for a comment (capacity 4n + 3). */
static void quote_bytes(const unsigned char *b, size_t n, char *out) {
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7F && b[i] != '"' && b[i] != '\\' && b[i] != '#') out[k++] = (char)b[i];
        else k += (size_t)sprintf(out + k, "\\x%02x", b[i]);
    }
    out[k++] = '"';
    out[k] = '\0';
}

void bpe_file_write(const BpeModel *m, const char *path) {
    for (int b = 0; b < 256; b++)
        if (m->byte_token[b] != b) bs_die("cannot write %s: the model does not number bytes by value (a GPT-2 vocabulary?)", path);
    size_t longest = 0;
    for (int32_t t = 0; t < m->vocab_size; t++)
        if (bpe_token_len(m, t) > longest) longest = bpe_token_len(m, t);
    const size_t line_max = 4 * longest + 64;
    size_t cap = 512 + (size_t)m->num_merges * line_max, len = 0;
    char *out = bs_malloc(cap), *quoted = bs_malloc(4 * longest + 3);
    len += (size_t)snprintf(out + len, cap - len,
                            "%s %d\n# byte-level BPE tokenizer made by `batchscale tokenizer train`; format: "
                            "src/data/bpe_file.h\n# %d tokens: bytes 0-255, merges, end-of-text = %d\n"
                            "pretokenizer gpt2\nmerges %d\n",
                            BPE_FILE_MAGIC, BPE_FILE_VERSION, m->vocab_size, m->eot, m->num_merges);
    for (int r = 0; r < m->num_merges; r++) {
        int32_t res = m->merge_result[r];
        quote_bytes(bpe_token_bytes(m, res), bpe_token_len(m, res), quoted);
        len += (size_t)snprintf(out + len, cap - len, "%d %d  # %d %s\n", m->merge_left[r], m->merge_right[r], res,
                                quoted);
    }
    bs_write_file_atomic(path, out, len);
    free(quoted);
    free(out);
}
