/* prepare_chat.h: `batchscale prepare --format chat-jsonl`: supervised
 * fine-tuning examples, one JSON object per line, either
 *   {"prompt": "...", "response": "..."}
 * or {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]},
 * packed into token shards one after another, each example starting with
 * end-of-text. The loss mask beside each shard (data/loss_mask.h) counts the
 * response (the assistant messages' content) and the end-of-text that follows
 * a response (the model learns to stop); prompts, role headers and system
 * text are not counted. Messages are rendered "System: ...\n", "User: ...\n",
 * "Assistant: ...\n" (the headers not counted); a prompt/response pair as its
 * two strings, as given. The last --val-fraction of the examples (by count)
 * go to the validation shards. A malformed line is one error naming the file
 * and line. */
#ifndef BS_CLI_PREPARE_CHAT_H
#define BS_CLI_PREPARE_CHAT_H

#include "data/shard_writer.h"
#include "data/tokenizer.h"

/* Writes the examples of the files into train and val (masked writers, left
 * finished); returns the number of examples. */
int prepare_chat(char **files, int nfiles, const Tokenizer *tok, double val_fraction, ShardWriter *train,
                 ShardWriter *val);

#endif
