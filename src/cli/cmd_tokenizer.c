/* cmd_tokenizer.c: `batchscale tokenizer <train|encode|decode|export>`:
 * learn a BPE tokenizer from text, turn text into token ids and back, and
 * write a tokenizer as GPT-2's encoder.json + vocab.bpe for other tools.
 * Preparing training shards is `batchscale prepare`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "core/timer.h"
#include "data/bpe_file.h"
#include "data/bpe_train.h"
#include "data/gpt2_bpe.h"
#include "data/text_input.h"
#include "data/tokenizer.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TOKENIZER_OPTIONS(name, dir)                                                                              \
    {"tokenizer", OPT_STRING, &(name), OPT_NO_RANGE, "NAME", "byte, gpt2 (with --vocab-dir), or a tokenizer file", NULL, NULL}, \
    {"vocab-dir", OPT_STRING, &(dir), OPT_NO_RANGE, "DIR", "GPT-2's encoder.json and vocab.bpe, or a Hugging Face tokenizer directory (vocab.json, merges.txt), for --tokenizer gpt2", NULL, NULL}

static int tokenizer_train(int argc, char **argv) {
    const char *in = "", *out = "";
    int vocab_size = 8192;
    const OptionSpec specs[] = {
        {"in", OPT_STRING, &in, OPT_NO_RANGE, "PATH", "text: a file, a directory of files, or a glob", NULL, NULL},
        {"vocab-size", OPT_INT, &vocab_size, 257, 1 << 24, "N", "tokens wanted: 256 bytes + merges + end-of-text", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "FILE", "the tokenizer file to write", NULL, NULL},
    };
    if (!options_parse(specs, COUNT(specs), argc, argv,
                       "usage: batchscale tokenizer train --in PATH --vocab-size N --out FILE\n\n"
                       "Learns byte-level BPE merges (GPT-2's pre-tokenisation) from text. Use the file with\n"
                       "--tokenizer FILE in prepare, train and sample. Ties between equally frequent pairs go to\n"
                       "the smaller ids, so training is deterministic."))
        return 0;
    if (!*in) bs_die("--in is required (the text to learn from)");
    if (!*out) bs_die("--out is required (the tokenizer file to write)");
    double t0 = bs_now();
    int nfiles;
    char **files = text_inputs_list(in, "--in", &nfiles);
    BpeTrainer trainer;
    bpe_trainer_init(&trainer);
    for (int i = 0; i < nfiles; i++) {
        TextReader r;
        text_reader_open(&r, files[i]);
        TextSpan span;
        long long offset;
        while (text_reader_next(&r, 1 << 24, 0, &span, &offset)) bpe_trainer_add_text(&trainer, span.text, span.len);
        text_reader_close(&r);
    }
    text_inputs_free(files, nfiles);
    if (trainer.bytes == 0) bs_die("--in %s holds no text to learn from", in);
    double t1 = bs_now();
    BpeModel model;
    bpe_trainer_train(&trainer, vocab_size, &model);
    bpe_file_write(&model, out);
    printf("learned %d merges (vocabulary %d, end-of-text %d) from %.1f MB, %zu distinct pieces, in %.2f s "
           "(counting %.2f s) -> %s\n",
           model.num_merges, model.vocab_size, model.eot, (double)trainer.bytes / 1e6, trainer.pieces.count,
           bs_now() - t0, t1 - t0, out);
    if (model.vocab_size < vocab_size)
        printf("note: the text ran out of pairs to merge before %d tokens\n", vocab_size);
    bpe_model_free(&model);
    bpe_trainer_free(&trainer);
    return 0;
}

static void write_ids(const char *path, const TokenList *ids) {
    FILE *f = *path ? bs_fopen(path, "wb") : stdout;
    for (size_t i = 0; i < ids->len; i++)
        if (fprintf(f, i + 1 < ids->len ? "%d " : "%d", ids->ids[i]) < 0) bs_die("write error in %s", *path ? path : "stdout");
    fputc('\n', f);
    if (fflush(f) != 0 || (*path && fclose(f) != 0)) bs_die("write error in %s: %s", *path ? path : "stdout", strerror(errno));
}

static int tokenizer_encode_cmd(int argc, char **argv) {
    const char *name = "byte", *dir = "", *in = "", *out = "";
    int threads = 1, repeat = 1;
    bool quiet = false;
    const OptionSpec specs[] = {
        TOKENIZER_OPTIONS(name, dir),
        {"in", OPT_STRING, &in, OPT_NO_RANGE, "FILE", "text to encode", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "FILE", "token ids, space-separated (default: stdout)", NULL, NULL},
        {"threads", OPT_INT, &threads, 0, 1024, "N", "threads (0: OMP_NUM_THREADS or all cores)", NULL, NULL},
        {"repeat", OPT_INT, &repeat, 1, 1000, "N", "encode N times and report the fastest (benchmarks)", NULL, NULL},
        {"quiet", OPT_FLAG, &quiet, OPT_NO_RANGE, "", "no timing line on stderr", NULL, NULL},
    };
    if (!options_parse(specs, COUNT(specs), argc, argv,
                       "usage: batchscale tokenizer encode --tokenizer NAME --in FILE [options]\n\n"
                       "Encodes a text file into token ids (no end-of-text is added); times the encoding."))
        return 0;
    if (!*in) bs_die("--in is required (the text to encode)");
    Tokenizer *tok = tokenizer_load(name, dir);
    size_t n;
    unsigned char *text = (unsigned char *)bs_read_file(in, &n);
    TextSpan *spans;
    size_t nspans = pretok_split(text, n, 1 << 16, &spans);
    TokenList *parts = bs_calloc(nspans + 1, sizeof(TokenList));
    double best = 1e30;
    int used_threads = 1;
    for (int r = 0; r < repeat; r++) { /* a fresh pool each time: the word caches start empty */
        TokenizerPool pool;
        tokenizer_pool_init(&pool, tok, threads);
        double t0 = bs_now();
        tokenizer_pool_encode(&pool, spans, nspans, parts);
        double t = bs_now() - t0;
        if (t < best) best = t;
        used_threads = pool.threads;
        tokenizer_pool_free(&pool);
    }
    TokenList all = {0};
    for (size_t i = 0; i < nspans; i++) {
        token_list_reserve(&all, parts[i].len);
        memcpy(all.ids + all.len, parts[i].ids, parts[i].len * sizeof(int32_t));
        all.len += parts[i].len;
        token_list_free(&parts[i]);
    }
    if (!quiet)
        fprintf(stderr, "encoded %zu bytes into %zu tokens in %.4f s: %.2f MB/s on %d thread(s), %.3f bytes/token\n", n,
                all.len, best, (double)n / 1e6 / (best > 0 ? best : 1e-9), used_threads,
                all.len ? (double)n / (double)all.len : 0.0);
    write_ids(out, &all);
    token_list_free(&all);
    free(parts);
    free(spans);
    free(text);
    tokenizer_free(tok);
    return 0;
}

static int tokenizer_decode_cmd(int argc, char **argv) {
    const char *name = "byte", *dir = "", *in = "", *out = "";
    const OptionSpec specs[] = {
        TOKENIZER_OPTIONS(name, dir),
        {"in", OPT_STRING, &in, OPT_NO_RANGE, "FILE", "token ids separated by white space", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "FILE", "the bytes (default: stdout)", NULL, NULL},
    };
    if (!options_parse(specs, COUNT(specs), argc, argv,
                       "usage: batchscale tokenizer decode --tokenizer NAME --in FILE [--out FILE]\n\n"
                       "Turns token ids back into bytes (end-of-text becomes <|endoftext|>)."))
        return 0;
    if (!*in) bs_die("--in is required (a file of token ids)");
    Tokenizer *tok = tokenizer_load(name, dir);
    size_t n;
    char *text = bs_read_file(in, &n);
    TokenList ids = {0};
    for (char *p = text, *end;; p = end) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r'))
            bs_die("%s: '%.20s' is not a token id (expected integers separated by white space)", in, p);
        token_list_push(&ids, (int32_t)v);
    }
    size_t len;
    unsigned char *bytes = tokenizer_decode(tok, ids.ids, ids.len, &len);
    if (*out) {
        bs_write_file_atomic(out, bytes, len);
    } else {
        bs_fwrite_all(bytes, len, stdout, "stdout");
        fflush(stdout);
    }
    free(bytes);
    token_list_free(&ids);
    free(text);
    tokenizer_free(tok);
    return 0;
}

static int tokenizer_export(int argc, char **argv) {
    const char *name = "", *dir = "", *out = "";
    const OptionSpec specs[] = {
        TOKENIZER_OPTIONS(name, dir),
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "DIR", "directory for encoder.json and vocab.bpe", NULL, NULL},
    };
    if (!options_parse(specs, COUNT(specs), argc, argv,
                       "usage: batchscale tokenizer export --tokenizer FILE --out DIR\n\n"
                       "Writes a tokenizer as GPT-2's encoder.json and vocab.bpe (loadable by Hugging Face tokenizers)."))
        return 0;
    if (!*name) bs_die("--tokenizer is required (the tokenizer to export)");
    if (!*out) bs_die("--out is required (a directory for encoder.json and vocab.bpe)");
    Tokenizer *tok = tokenizer_load(name, dir);
    gpt2_bpe_save(tokenizer_model(tok), out);
    printf("wrote %s/encoder.json and %s/vocab.bpe (%d tokens, %d merges)\n", out, out, tokenizer_vocab_size(tok),
           tokenizer_model(tok)->num_merges);
    tokenizer_free(tok);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*run)(int, char **);
        const char *help;
    } subcommands[] = {
        {"train", tokenizer_train, "learn BPE merges from text into a tokenizer file"},
        {"encode", tokenizer_encode_cmd, "text -> token ids (and the encoding speed)"},
        {"decode", tokenizer_decode_cmd, "token ids -> text"},
        {"export", tokenizer_export, "write a tokenizer as GPT-2's encoder.json and vocab.bpe"},
    };
    if (argc >= 2)
        for (int i = 0; i < COUNT(subcommands); i++)
            if (strcmp(argv[1], subcommands[i].name) == 0) return subcommands[i].run(argc - 1, argv + 1);
    bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    FILE *f = help ? stdout : stderr;
    if (argc >= 2 && !help) fprintf(f, "batchscale: error: unknown tokenizer command '%s'\n", argv[1]);
    fprintf(f, "usage: batchscale tokenizer <command> [options]   (--help after a command for its options)\n\ncommands:\n");
    for (int i = 0; i < COUNT(subcommands); i++) fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
    return help ? 0 : 2;
}
