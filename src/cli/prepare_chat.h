/* prepare_chat.h: `batchscale prepare --format chat-jsonl`: supervised
 * fine-tuning examples, one JSON object per line, either
 *   {"prompt": "...", "response": "..."}
 * or {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]},
 * rendered by a chat template (data/chat_template.h) and packed whole into
 * the training windows (data/sft_pack.h: each example starts with
 * end-of-text; one longer than a window is dropped and counted). The loss
 * mask beside each shard (data/loss_mask.h) counts the assistant messages'
 * content and end marker, and the end-of-text that follows an example whose
 * last token is counted (the model learns to stop); prompts, role headers and
 * system text are not counted. Under the plain template a prompt/response
 * pair is its two strings as given; under chatml and llama3 it is a user and
 * an assistant message. Each piece (header, content, end marker) is encoded
 * on its own, so the mask's edges are token edges. The last --val-fraction of
 * the examples (by count) go to the validation shards. A malformed line is
 * one error naming the file and line. */
#ifndef BS_CLI_PREPARE_CHAT_H
#define BS_CLI_PREPARE_CHAT_H

#include "data/chat_template.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"

typedef struct {
    ChatTemplate chat_template;
    int seq_len;         /* the training windows' length */
    double val_fraction;
} ChatOptions;

typedef struct {
    int examples;      /* lines read */
    size_t dropped;    /* of them, longer than a window */
} ChatCounts;

/* Writes the examples of the files into train and val (windowed writers of
 * seq_len, left finished). */
ChatCounts prepare_chat(char **files, int nfiles, const Tokenizer *tok, const ChatOptions *opt, ShardWriter *train,
                        ShardWriter *val);

#endif
