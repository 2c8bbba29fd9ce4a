/* text_input.h: text files coming in, for `prepare` and tokenizer training.
 *
 * An input is a file, a directory (its regular files, not recursing, sorted
 * by name; hidden files skipped) or a glob pattern. A TextReader streams one
 * file in spans that end where pre-tokenisation allows a cut
 * (pretok_find_cut), so each span encodes on its own to exactly the tokens
 * it has inside the whole file, with memory bounded by the span size. */
#ifndef BS_DATA_TEXT_INPUT_H
#define BS_DATA_TEXT_INPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "data/pretokenize.h"

/* Sorted paths (caller frees with text_inputs_free). Dies, naming `flag`,
 * if nothing matches or a directory holds no files. */
char **text_inputs_list(const char *spec, const char *flag, int *count);
void text_inputs_free(char **paths, int count);

typedef struct {
    FILE *file;
    char *path;
    long long size;   /* bytes in the file */
    long long offset; /* file offset of buf[0] */
    unsigned char *buf;
    size_t cap, len, consumed; /* buf[0..len) read; buf[0..consumed) handed out */
    bool eof;
} TextReader;

void text_reader_open(TextReader *r, const char *path);
void text_reader_close(TextReader *r);
/* The next span of the file, starting at file offset *offset: about `want`
 * bytes, ending at a cut, at the end of the file, or at the first cut at or
 * after file offset `boundary` when that comes sooner (boundary <= *offset:
 * none). Valid until the next call. Returns false at the end of the file. */
bool text_reader_next(TextReader *r, size_t want, long long boundary, TextSpan *span, long long *offset);

#endif
