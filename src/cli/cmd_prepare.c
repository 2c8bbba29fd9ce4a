/* cmd_prepare.c: `batchscale prepare`: text files -> llm.c token shards.
 *
 * Each input file is one document, preceded by end-of-text. A file is read
 * in spans that end where pre-tokenisation allows a cut (text_input.h);
 * each span is split into chunks that all threads encode at once, and the
 * tokens are written in order, so the shards are the same for any thread
 * count and equal to encoding each document whole. The bytes of a document
 * from --val-fraction before its end (moved to the next allowed cut) go to
 * the validation shards. Tokens are stored as uint16 (llm.c's format); a
 * vocabulary above 65,536 is refused. Shards of an earlier run in the
 * output directory are removed first; OUT/prepare.json records the
 * tokenizer and the counts. The progress line goes to stderr on a terminal
 * (or with --progress); the summary to stdout. */
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/io.h"
#include "core/timer.h"
#include "data/shard.h"
#include "data/shard_writer.h"
#include "cli/prepare_chat.h"
#include "data/text_input.h"
#include "data/tokenizer.h"
#include "train/progress.h"

#define CHUNK_BYTES (256 << 10)  /* text per parallel task */
#define CHUNKS_PER_THREAD 16     /* chunks in flight per thread (one span) */
#define MAX_UINT16_VOCAB 65536


/* The progress line: the share of the input bytes done, redrawn at most every
 * 0.1 s on a terminal and every second otherwise. */
typedef struct {
    bool on;
    double start, last;
    long long total_bytes;
    Progress line;
} PrepareProgress;

static void show_progress(PrepareProgress *p, long long bytes, size_t tokens, bool final) {
    double now = bs_now();
    if (!p->on || (!final && now - p->last < (p->line.tty ? 0.1 : 1.0))) return;
    p->last = now;
    double elapsed = now - p->start > 1e-9 ? now - p->start : 1e-9;
    double frac = p->total_bytes > 0 ? (double)bytes / (double)p->total_bytes : 1.0;
    char eta[32];
    progress_format_eta(frac > 0 ? elapsed * (1 - frac) / frac : 0, eta, sizeof eta);
    progress_show(&p->line, "prepare %5.1f%% | %.1f/%.1f MB | %zu tokens | %.0f tok/s | %.1f MB/s | ETA %s", 100 * frac,
                  (double)bytes / 1e6, (double)p->total_bytes / 1e6, tokens, (double)tokens / elapsed,
                  (double)bytes / 1e6 / elapsed, eta);
    if (final) progress_finish(&p->line);
}

static void remove_old_shards(const char *out) {
    const char *prefixes[] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        char pattern[4200];
        for (int m = 0; m < 2; m++) { /* shards and their loss masks */
            snprintf(pattern, sizeof pattern, "%s/%s_[0-9][0-9][0-9][0-9][0-9][0-9].%s", out, prefixes[k],
                     m ? "mask" : "bin");
            glob_t g;
            if (glob(pattern, 0, NULL, &g) == 0)
                for (size_t i = 0; i < g.gl_pathc; i++)
                    if (remove(g.gl_pathv[i]) != 0) bs_die("cannot remove the old shard %s", g.gl_pathv[i]);
            globfree(&g);
        }
    }
}

static json_t *summary_json(const char *out, const Tokenizer *tok, int docs, long long bytes, const ShardWriter *train,
                            const ShardWriter *val) {
    json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:i, s:I, s:i, s:I}", "format",
                          train->masked ? "chat-jsonl" : "text", "tokenizer", tokenizer_spec(tok),
                          "vocab_size", tokenizer_vocab_size(tok), "eot", (int)tokenizer_eot(tok), "documents", docs,
                          "bytes", (json_int_t)bytes, "train_tokens", (json_int_t)train->total, "train_shards",
                          train->index, "val_tokens", (json_int_t)val->total, "val_shards", val->index,
                          "shard_tokens", (json_int_t)train->shard_tokens);
    if (!j) bs_die("out of memory writing %s/prepare.json", out);
    return j;
}

static void write_summary_json(const char *out, json_t *j) {
    char *text = json_dumps(j, JSON_INDENT(2));
    if (!text) bs_die("out of memory writing %s/prepare.json", out);
    char path[4200];
    snprintf(path, sizeof path, "%s/prepare.json", out);
    bs_write_file_atomic(path, text, strlen(text));
    free(text);
    json_decref(j);
}

/* What both formats need of the command line. */
typedef struct {
    const char *out;
    double val_fraction;
    size_t shard_tokens;
    int threads;
    bool progress, quiet;
    long long total_bytes;
} PrepareJob;

/* --format chat-jsonl (cli/prepare_chat.h): the summary records the template,
 * the windows' length (train checks its --seq-len against it) and the drops. */
static void prepare_chat_format(const PrepareJob *job, char **files, int nfiles, const Tokenizer *tok,
                                const ChatOptions *opt) {
    ShardWriter train, val;
    shard_writer_init_windows(&train, job->out, "train", job->shard_tokens, opt->seq_len);
    shard_writer_init_windows(&val, job->out, "val", job->shard_tokens, opt->seq_len);
    ChatCounts n = prepare_chat(files, nfiles, tok, opt, &train, &val);
    json_t *j = summary_json(job->out, tok, n.examples, job->total_bytes, &train, &val);
    json_object_set_new(j, "train_counted_tokens", json_integer((json_int_t)train.counted));
    json_object_set_new(j, "val_counted_tokens", json_integer((json_int_t)val.counted));
    json_object_set_new(j, "chat_template", json_string(chat_template_name(opt->chat_template)));
    json_object_set_new(j, "seq_len", json_integer(opt->seq_len));
    json_object_set_new(j, "dropped_examples", json_integer((json_int_t)n.dropped));
    write_summary_json(job->out, j);
    if (n.dropped > 0) bs_warn("%zu examples dropped: longer than --seq-len %d", n.dropped, opt->seq_len);
    if (!job->quiet)
        printf("prepared %d chat example(s) with %s, template %s, packed whole into windows of %d: train %zu tokens "
               "(%zu counted by the loss) in %d shard(s), val %zu tokens (%zu counted) in %d shard(s); %zu examples "
               "dropped: longer than --seq-len -> %s\n", n.examples, tokenizer_spec(tok),
               chat_template_name(opt->chat_template), opt->seq_len, train.total, train.counted, train.index,
               val.total, val.counted, val.index, n.dropped, job->out);
}

/* --format text: every file a document, encoded in parallel spans (see the header). */
static void prepare_text_format(const PrepareJob *job, char **files, int nfiles, const Tokenizer *tok) {
    const char *out = job->out;
    const double val_fraction = job->val_fraction;
    TokenizerPool pool;
    tokenizer_pool_init(&pool, tok, job->threads);
    const size_t span_bytes = (size_t)pool.threads * CHUNKS_PER_THREAD * CHUNK_BYTES;
    ShardWriter train, val;
    shard_writer_init(&train, out, "train", job->shard_tokens, false);
    shard_writer_init(&val, out, "val", job->shard_tokens, false);
    TokenList *lists = NULL;
    size_t lists_cap = 0;
    const int32_t eot = tokenizer_eot(tok);
    PrepareProgress progress = {job->progress, bs_now(), 0, job->total_bytes, {0}};
    progress_init(&progress.line, stderr, 1);
    long long bytes_done = 0;
    int docs = 0;
    for (int f = 0; f < nfiles; f++) {
        TextReader reader;
        text_reader_open(&reader, files[f]);
        const long long val_start = reader.size - (long long)((double)reader.size * val_fraction);
        TextSpan span;
        long long offset;
        while (text_reader_next(&reader, span_bytes, val_start, &span, &offset)) {
            ShardWriter *w = offset >= val_start ? &val : &train;
            if (offset == 0) {
                shard_writer_put(w, &eot, 1, true);
                docs++;
            }
            TextSpan *chunks;
            size_t n = pretok_split(span.text, span.len, CHUNK_BYTES, &chunks);
            if (n > lists_cap) {
                lists = realloc(lists, n * sizeof(TokenList));
                if (!lists) bs_die("out of memory preparing %s", files[f]);
                memset(lists + lists_cap, 0, (n - lists_cap) * sizeof(TokenList));
                lists_cap = n;
            }
            tokenizer_pool_encode(&pool, chunks, n, lists);
            for (size_t i = 0; i < n; i++) shard_writer_put(w, lists[i].ids, lists[i].len, true);
            free(chunks);
            bytes_done += (long long)span.len;
            show_progress(&progress, bytes_done, train.total + train.len + val.total + val.len, false);
        }
        text_reader_close(&reader);
    }
    shard_writer_finish(&train);
    shard_writer_finish(&val);
    show_progress(&progress, bytes_done, train.total + val.total, true);
    write_summary_json(out, summary_json(out, tok, docs, bytes_done, &train, &val));
    if (val_fraction > 0 && val.total == 0)
        bs_warn("no validation tokens: the documents are too short (or have no place to cut) for --val-fraction %g",
                val_fraction);
    size_t tokens = train.total + val.total;
    double seconds = bs_now() - progress.start;
    if (!job->quiet)
        printf("prepared %d document(s), %.2f MB with %s: %zu tokens, %.3f bytes/token; train %zu tokens in %d "
               "shard(s), val %zu tokens in %d shard(s) -> %s (%.2f s, %.1f MB/s, %d thread(s))\n",
               docs, (double)bytes_done / 1e6, tokenizer_spec(tok), tokens,
               tokens > (size_t)docs ? (double)bytes_done / (double)(tokens - (size_t)docs) : 0.0, train.total,
               train.index, val.total, val.index, out, seconds, (double)bytes_done / 1e6 / (seconds > 0 ? seconds : 1e-9),
               pool.threads);
    for (size_t i = 0; i < lists_cap; i++) token_list_free(&lists[i]);
    free(lists);
    tokenizer_pool_free(&pool);
}

int cmd_prepare(int argc, char **argv) {
    const char *in = "", *out = "", *name = "byte", *vocab_dir = "", *format = "text", *template_arg = "";
    int seq_len = 0;
    double val_fraction = 0.05;
    long long shard_tokens = 100000000;
    int threads = 0;
    bool force_progress = false, quiet = false;
    const OptionSpec specs[] = {
        {"in", OPT_STRING, &in, OPT_NO_RANGE, "PATH", "text: a file, a directory of files, or a glob (one document per file)", NULL, NULL},
        {"format", OPT_STRING, &format, OPT_NO_RANGE, "FORMAT", "text (one document per file) or chat-jsonl (SFT examples, one JSON object per line: loss masks beside the shards)", NULL, NULL},
        {"out", OPT_STRING, &out, OPT_NO_RANGE, "DIR", "output directory for train_*.bin and val_*.bin", NULL, NULL},
        {"tokenizer", OPT_STRING, &name, OPT_NO_RANGE, "NAME", "byte, gpt2 (with --vocab-dir), or a tokenizer file", NULL, NULL},
        {"vocab-dir", OPT_STRING, &vocab_dir, OPT_NO_RANGE, "DIR", "for --tokenizer gpt2: GPT-2's encoder.json and vocab.bpe, or a Hugging Face tokenizer directory (vocab.json, merges.txt)", NULL, NULL},
        {"chat-template", OPT_STRING, &template_arg, OPT_NO_RANGE, "NAME", "chat-jsonl: plain, chatml, llama3, or a Hugging Face tokenizer_config.json (or its directory) whose chat_template is one of those (default plain)", NULL, NULL},
        {"seq-len", OPT_INT, &seq_len, 1, 1 << 20, "TOKENS", "chat-jsonl: the training --seq-len; examples are packed whole into windows of it (default 128, train's)", NULL, NULL},
        {"val-fraction", OPT_DOUBLE, &val_fraction, 0, 0.5, "X", "share of each document (its end) kept for validation", NULL, NULL},
        {"shard-tokens", OPT_LONG, &shard_tokens, 1024, 2147483647.0, "N", "tokens per shard file", NULL, NULL},
        {"threads", OPT_INT, &threads, 0, 1024, "N", "encoding threads (0: OMP_NUM_THREADS or all cores)", NULL, NULL},
        {"progress", OPT_FLAG, &force_progress, OPT_NO_RANGE, "", "show progress even when stderr is not a terminal", NULL, NULL},
        {"quiet", OPT_FLAG, &quiet, OPT_NO_RANGE, "", "no progress and no summary", NULL, NULL},
    };
    if (!options_parse(specs, (int)(sizeof specs / sizeof specs[0]), argc, argv,
                       "usage: batchscale prepare --in PATH --out DIR [options]\n\n"
                       "Tokenizes text into llm.c token shards (uint16), every file a document after an end-of-text\n"
                       "token. Default tokenizer: bytes (vocabulary 257, end-of-text 256)."))
        return 0;
    if (!*in) bs_die("--in is required (a text file, a directory of them, or a glob)");
    const bool chat = strcmp(format, "chat-jsonl") == 0;
    if (!chat && strcmp(format, "text") != 0) bs_die("--format must be text or chat-jsonl (got '%s')", format);
    if (!*out) bs_die("--out is required (the directory for the shards)");
    if (!chat && (*template_arg || seq_len))
        bs_die("--%s goes with --format chat-jsonl", *template_arg ? "chat-template" : "seq-len");
    ChatOptions chat_opt = {CHAT_TEMPLATE_PLAIN, seq_len ? seq_len : 128, val_fraction};
    char why[4400];
    if (*template_arg && !chat_template_parse(template_arg, &chat_opt.chat_template)) {
        if (!bs_path_exists(template_arg))
            bs_die("--chat-template must be plain, chatml, llama3 or a Hugging Face tokenizer_config.json (or its "
                   "directory) (got '%s')", template_arg);
        if (!chat_template_from_hf(template_arg, &chat_opt.chat_template, why, sizeof why))
            bs_die("--chat-template %s", why);
    }
    int nfiles;
    char **files = text_inputs_list(in, "--in", &nfiles);
    Tokenizer *tok = tokenizer_load(name, vocab_dir);
    if (tokenizer_vocab_size(tok) > MAX_UINT16_VOCAB)
        bs_die("--tokenizer %s has %d tokens; llm.c's token shards store uint16 ids (at most %d): train a smaller "
               "vocabulary", name, tokenizer_vocab_size(tok), MAX_UINT16_VOCAB);
    long long total_bytes = 0;
    for (int i = 0; i < nfiles; i++) {
        long long size = bs_file_size(files[i]);
        if (size < 0 || access(files[i], R_OK) != 0) bs_die("--in: cannot read %s", files[i]);
        total_bytes += size;
    }
    if (!chat && total_bytes == 0)
        bs_die("--in %s: %s empty: no documents to prepare", in, nfiles == 1 ? "the file is" : "every file is");
    bs_mkdir_p(out);
    remove_old_shards(out);
    PrepareJob job = {out, val_fraction, (size_t)shard_tokens, threads, !quiet && (force_progress ||
                      isatty(STDERR_FILENO)), quiet, total_bytes};
    if (chat) prepare_chat_format(&job, files, nfiles, tok, &chat_opt);
    else prepare_text_format(&job, files, nfiles, tok);
    tokenizer_free(tok);
    text_inputs_free(files, nfiles);
    return 0;
}
