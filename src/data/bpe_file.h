/* bpe_file.h: batchscale's file for a trained byte-level BPE tokenizer.
 *
 * Format, version 1 (UTF-8 text; '#' starts a comment to the end of the
 * line; blank lines are ignored):
 *
 *   batchscale-bpe 1          magic and format version (first line)
 *   pretokenizer gpt2         how text is split before merging (v1: gpt2 only)
 *   merges N                  then exactly N merge lines, highest priority first:
 *   LEFT RIGHT                two token ids, decimal
 *
 * Ids: 0..255 are the bytes (by value). Each merge joins two ids made
 * before it and makes the next free id, unless its joined bytes are
 * already a token (then it maps to that id). The id after the last one
 * made is end-of-text, so the vocabulary is 257 + (new tokens). Writers put
 * the joined bytes of each merge in a comment for people; readers ignore it.
 * A reader meeting another version says so and stops.
 *
 * Reading checks everything and dies with one line naming the file and line.
 * `batchscale tokenizer export` writes the same model as GPT-2's
 * encoder.json and vocab.bpe (gpt2_bpe.h) for other tools. */
#ifndef BS_DATA_BPE_FILE_H
#define BS_DATA_BPE_FILE_H

#include "data/bpe.h"

#define BPE_FILE_MAGIC "batchscale-bpe"
#define BPE_FILE_VERSION 1

void bpe_file_read(BpeModel *m, const char *path);
/* Writes atomically (PATH.tmp, fsync, rename). */
void bpe_file_write(const BpeModel *m, const char *path);

#endif
