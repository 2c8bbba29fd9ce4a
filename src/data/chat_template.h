/* chat_template.h: how a conversation becomes text for supervised
 * fine-tuning: the text Hugging Face's chat templates render, cut into the
 * pieces the loss mask needs.
 *
 *   plain   "System: C\n", "User: C\n", "Assistant: C\n"
 *   chatml  "<|im_start|>ROLE\nC<|im_end|>\n"
 *   llama3  "<|begin_of_text|>" before the first message, then
 *           "<|start_header_id|>ROLE<|end_header_id|>\n\nC<|eot_id|>", C with
 *           leading and trailing whitespace removed (Jinja's trim)
 *
 * Each message is: before (never counted), the content, end (counted with
 * an assistant's content: "\n", "<|im_end|>", "<|eot_id|>"), after (never
 * counted: chatml's "\n"). Special-token strings are text: a tokenizer
 * without them as tokens encodes them through its merges as any text.
 *
 * A Hugging Face tokenizer_config.json names its template as Jinja source;
 * one is recognised when, after normalising the inside of its tags
 * (whitespace outside string literals, the '-' whitespace controls, quote
 * style and escapes of literals), it equals a known chatml or Llama 3
 * template (Llama 3's also needs bos_token "<|begin_of_text|>"); anything
 * else is refused with the reason: this does not run Jinja. */
#ifndef BS_DATA_CHAT_TEMPLATE_H
#define BS_DATA_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { CHAT_TEMPLATE_PLAIN, CHAT_TEMPLATE_CHATML, CHAT_TEMPLATE_LLAMA3 } ChatTemplate;

/* A word: plain, chatml or llama3. */
bool chat_template_parse(const char *word, ChatTemplate *t);
const char *chat_template_name(ChatTemplate t);
/* A tokenizer_config.json (the file, or a directory holding one): its
 * chat_template when known; false with the reason (naming the file) if not. */
bool chat_template_from_hf(const char *path, ChatTemplate *t, char *why, size_t n);

/* One message's pieces around its content (see the header). role is
 * system, user or assistant; before holds at least 96 bytes. */
typedef struct {
    char before[96];
    const char *content;
    size_t content_len;
    const char *end, *after;
} ChatPieces;
void chat_template_message(ChatTemplate t, const char *role, const char *content, bool first, ChatPieces *out);

#endif
