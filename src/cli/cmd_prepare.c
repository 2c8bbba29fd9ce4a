/* cmd_prepare.c: `batchscale prepare`: text -> llm.c token shards with the
 * byte-level tokenizer. Each input file is one document, preceded by the
 * end-of-text token; the last --val-fraction of every document goes to the
 * validation shards. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "data/bytetok.h"
#include "data/shard.h"

typedef struct {
    const char *dir, *prefix;
    long long shard_tokens;
    uint16_t *buf;
    size_t len;
    int index;
    size_t total;
} ShardWriter;

static void writer_flush(ShardWriter *w) {
    if (w->len == 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%06d.bin", w->dir, w->prefix, w->index++);
    shard_write(path, w->buf, w->len);
    w->total += w->len;
    w->len = 0;
}

static void writer_put(ShardWriter *w, const uint16_t *tokens, size_t n) {
    for (size_t i = 0; i < n; i++) {
        w->buf[w->len++] = tokens[i];
        if ((long long)w->len == w->shard_tokens) writer_flush(w);
    }
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int cmd_prepare(int argc, char **argv) {
    const char *in = "", *out = "";
    double val_fraction = 0.05;
    long long shard_tokens = 100000000;
    const OptionSpec specs[] = {
        {"in", OPT_STRING, &in, OPT_NO_RANGE, "PATH", "a text file, or a directory of text files (one document each)"},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "DIR", "output directory for train_*.bin and val_*.bin"},
        {"val-fraction", OPT_DOUBLE, &val_fraction, 0, 0.5, "X", "share of each document kept for validation"},
        {"shard-tokens", OPT_LONG, &shard_tokens, 1024, 2147483647.0, "N", "tokens per shard file"},
    };
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), argc, argv,
                       "usage: batchscale prepare --in PATH --out DIR [options]\n\n"
                       "Tokenizes text byte by byte (vocabulary 257, end-of-text 256) into llm.c token shards."))
        return 0;
    if (!*in) bs_die("--in is required (a text file or a directory of them)");
    if (!*out) bs_die("--out is required (the directory for the shards)");
    if (!bs_path_exists(in)) bs_die("--in %s does not exist", in);

    char **files;
    int nfiles = 0;
    if (bs_is_dir(in)) {
        DIR *d = opendir(in);
        if (!d) bs_die("cannot open directory %s", in);
        files = bs_malloc(sizeof(char *) * 65536);
        struct dirent *e;
        while ((e = readdir(d)) && nfiles < 65536) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", in, e->d_name);
            if (!bs_is_dir(path)) files[nfiles++] = strdup(path);
        }
        closedir(d);
        qsort(files, (size_t)nfiles, sizeof(char *), compare_names);
        if (nfiles == 0) bs_die("--in %s holds no files", in);
    } else {
        files = bs_malloc(sizeof(char *));
        files[nfiles++] = strdup(in);
    }
    bs_mkdir_p(out);
    ShardWriter train = {out, "train", shard_tokens, bs_malloc((size_t)shard_tokens * 2), 0, 0, 0};
    ShardWriter val = {out, "val", shard_tokens, bs_malloc((size_t)shard_tokens * 2), 0, 0, 0};
    size_t total_bytes = 0;
    for (int i = 0; i < nfiles; i++) {
        size_t n;
        char *text = bs_read_file(files[i], &n);
        uint16_t *tokens = bs_malloc((n + 1) * sizeof(uint16_t));
        tokens[0] = BYTETOK_EOT;
        bytetok_encode((const unsigned char *)text, n, tokens + 1);
        size_t ntok = n + 1;
        size_t nval = (size_t)((double)ntok * val_fraction);
        writer_put(&train, tokens, ntok - nval);
        writer_put(&val, tokens + (ntok - nval), nval);
        total_bytes += n;
        free(tokens);
        free(text);
        free(files[i]);
    }
    free(files);
    writer_flush(&train);
    writer_flush(&val);
    printf("prepared %d document(s), %zu bytes: %zu train tokens in %d shard(s), %zu val tokens in %d shard(s) -> %s\n",
           nfiles, total_bytes, train.total, train.index, val.total, val.index, out);
    free(train.buf);
    free(val.buf);
    return 0;
}
