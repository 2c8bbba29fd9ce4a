/* prepare_chat.c: chat JSONL into packed, masked token shards (see prepare_chat.h). */
#include "cli/prepare_chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/sft_pack.h"
#include "data/token_list.h"

typedef struct {
    TokenizerEncoder *enc;
    ChatTemplate chat_template;
    TokenList example; /* the example being built, without its separator */
    uint8_t *counted;  /* a loss-mask byte per token of it */
    size_t counted_cap;
    TokenList piece;
} ChatWriter;

static void put_bytes(ChatWriter *c, const char *text, size_t len, bool counted) {
    c->piece.len = 0;
    tokenizer_encode(c->enc, (const unsigned char *)text, len, &c->piece);
    if (c->example.len + c->piece.len > c->counted_cap) {
        c->counted_cap = 2 * (c->example.len + c->piece.len);
        c->counted = realloc(c->counted, c->counted_cap);
        if (!c->counted) bs_die("out of memory building a chat example of %zu tokens", c->example.len + c->piece.len);
    }
    token_list_reserve(&c->example, c->piece.len);
    memcpy(c->example.ids + c->example.len, c->piece.ids, c->piece.len * sizeof(int32_t));
    memset(c->counted + c->example.len, counted, c->piece.len);
    c->example.len += c->piece.len;
}

static void put_text(ChatWriter *c, const char *text, bool counted) { put_bytes(c, text, strlen(text), counted); }

static bool known_role(const char *role) {
    return strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0;
}

/* One message through the template: its content and end counted for the assistant. */
static void put_message(ChatWriter *c, const char *role, const char *content, bool first) {
    ChatPieces p;
    chat_template_message(c->chat_template, role, content, first, &p);
    const bool assistant = strcmp(role, "assistant") == 0;
    put_text(c, p.before, false);
    put_bytes(c, p.content, p.content_len, assistant);
    put_text(c, p.end, assistant);
    put_text(c, p.after, false);
}

static bool put_messages(ChatWriter *c, json_t *messages, char *why, size_t n) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !known_role(role) || !content) {
            snprintf(why, n, "message %zu needs a role (system, user or assistant) and a content string", i);
            return false;
        }
        put_message(c, role, content, i == 0);
    }
    return true;
}

/* One example into c->example: false with the reason when the object is neither form. */
static bool build_example(ChatWriter *c, json_t *j, char *why, size_t n) {
    c->example.len = 0;
    if (!json_is_object(j)) {
        snprintf(why, n, "not a JSON object");
        return false;
    }
    json_t *messages = json_object_get(j, "messages");
    if (messages) {
        if (json_is_array(messages) && json_array_size(messages) > 0) return put_messages(c, messages, why, n);
        snprintf(why, n, "messages must be a non-empty array");
        return false;
    }
    const char *prompt = json_string_value(json_object_get(j, "prompt"));
    const char *response = json_string_value(json_object_get(j, "response"));
    if (!prompt || !response) {
        snprintf(why, n, "needs \"prompt\" and \"response\" strings, or a \"messages\" array");
        return false;
    }
    if (c->chat_template == CHAT_TEMPLATE_PLAIN) {
        put_text(c, prompt, false);
        put_text(c, response, true);
    } else {
        put_message(c, "user", prompt, true);
        put_message(c, "assistant", response, false);
    }
    return true;
}

/* Calls the example function on every non-empty line of the files; returns the count. */
static int each_line(char **files, int nfiles, ChatWriter *c, SftPacker *train, SftPacker *val, int val_from) {
    int examples = 0;
    for (int f = 0; f < nfiles; f++) {
        FILE *in = fopen(files[f], "r");
        if (!in) bs_die("--in: cannot read %s", files[f]);
        char *line = NULL;
        size_t cap = 0;
        long number = 0;
        while (getline(&line, &cap, in) >= 0) {
            number++;
            if (strspn(line, " \t\r\n") == strlen(line)) continue;
            if (!c) { /* counting pass */
                examples++;
                continue;
            }
            json_error_t err;
            json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &err);
            char why[256];
            if (!j) bs_die("%s:%ld: not JSON: %s", files[f], number, err.text);
            if (!build_example(c, j, why, sizeof why)) bs_die("%s:%ld: %s", files[f], number, why);
            sft_packer_add(examples >= val_from ? val : train, c->example.ids, c->counted, c->example.len);
            json_decref(j);
            examples++;
        }
        free(line);
        fclose(in);
    }
    return examples;
}

ChatCounts prepare_chat(char **files, int nfiles, const Tokenizer *tok, const ChatOptions *opt, ShardWriter *train,
                        ShardWriter *val) {
    const int total = each_line(files, nfiles, NULL, NULL, NULL, 0);
    if (total == 0) bs_die("--in: no examples (one JSON object per line) in the %d file(s) given", nfiles);
    const int val_from = total - (int)(total * opt->val_fraction);
    ChatWriter c = {tokenizer_encoder_new(tok), opt->chat_template, {0}, NULL, 0, {0}};
    SftPacker packers[2];
    sft_packer_init(&packers[0], train, opt->seq_len, tokenizer_eot(tok));
    sft_packer_init(&packers[1], val, opt->seq_len, tokenizer_eot(tok));
    each_line(files, nfiles, &c, &packers[0], &packers[1], val_from);
    tokenizer_encoder_free(c.enc);
    token_list_free(&c.example);
    token_list_free(&c.piece);
    free(c.counted);
    sft_packer_finish(&packers[0]);
    sft_packer_finish(&packers[1]);
    if (train->counted == 0) /* training on it would be a loss of 0 and no gradient */
        bs_die("--in: none of the %d training example(s) in the %d file(s) given has an assistant message or a "
               "response: no token would count in the loss", val_from, nfiles);
    return (ChatCounts){total, packers[0].dropped + packers[1].dropped};
}
