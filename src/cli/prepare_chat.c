/* prepare_chat.c: chat JSONL into masked token shards (see prepare_chat.h). */
#include "cli/prepare_chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/token_list.h"

typedef struct {
    TokenizerEncoder *enc;
    TokenList list;
    int32_t eot;
    bool response_before; /* the example before ended with a counted response */
} ChatWriter;

static void put_text(ChatWriter *c, ShardWriter *w, const char *text, bool counted) {
    c->list.len = 0;
    tokenizer_encode(c->enc, (const unsigned char *)text, strlen(text), &c->list);
    shard_writer_put(w, c->list.ids, c->list.len, counted);
}

static const char *role_header(const char *role) {
    if (strcmp(role, "system") == 0) return "System: ";
    if (strcmp(role, "user") == 0) return "User: ";
    if (strcmp(role, "assistant") == 0) return "Assistant: ";
    return NULL;
}

/* One messages array: each message's header (not counted) and content (counted for the assistant). */
static bool put_messages(ChatWriter *c, ShardWriter *w, json_t *messages, char *why, size_t n) {
    size_t i;
    json_t *m;
    bool counted = false;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !role_header(role) || !content) {
            snprintf(why, n, "message %zu needs a role (system, user or assistant) and a content string", i);
            return false;
        }
        put_text(c, w, role_header(role), false);
        bool assistant = strcmp(role, "assistant") == 0;
        put_text(c, w, content, assistant);
        put_text(c, w, "\n", assistant);
        counted = assistant;
    }
    c->response_before = counted;
    return true;
}

/* One example: false with the reason when the object is neither form. */
static bool put_example(ChatWriter *c, ShardWriter *w, json_t *j, char *why, size_t n) {
    if (!json_is_object(j)) {
        snprintf(why, n, "not a JSON object");
        return false;
    }
    shard_writer_put(w, &c->eot, 1, c->response_before); /* predicting it ends the response before */
    c->response_before = false;
    json_t *messages = json_object_get(j, "messages");
    if (messages) {
        if (json_is_array(messages) && json_array_size(messages) > 0) return put_messages(c, w, messages, why, n);
        snprintf(why, n, "messages must be a non-empty array");
        return false;
    }
    const char *prompt = json_string_value(json_object_get(j, "prompt"));
    const char *response = json_string_value(json_object_get(j, "response"));
    if (!prompt || !response) {
        snprintf(why, n, "needs \"prompt\" and \"response\" strings, or a \"messages\" array");
        return false;
    }
    put_text(c, w, prompt, false);
    put_text(c, w, response, true);
    c->response_before = true;
    return true;
}

/* Calls the example function on every non-empty line of the files; returns the count. */
static int each_line(char **files, int nfiles, ChatWriter *c, ShardWriter *train, ShardWriter *val, int val_from) {
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
            if (!put_example(c, examples >= val_from ? val : train, j, why, sizeof why))
                bs_die("%s:%ld: %s", files[f], number, why);
            json_decref(j);
            examples++;
        }
        free(line);
        fclose(in);
    }
    return examples;
}

int prepare_chat(char **files, int nfiles, const Tokenizer *tok, double val_fraction, ShardWriter *train,
                 ShardWriter *val) {
    const int total = each_line(files, nfiles, NULL, NULL, NULL, 0);
    if (total == 0) bs_die("--in: no examples (one JSON object per line) in the %d file(s) given", nfiles);
    const int val_from = total - (int)(total * val_fraction);
    ChatWriter c = {tokenizer_encoder_new(tok), {0}, tokenizer_eot(tok), false};
    each_line(files, nfiles, &c, train, val, val_from);
    tokenizer_encoder_free(c.enc);
    token_list_free(&c.list);
    shard_writer_finish(train);
    shard_writer_finish(val);
    if (train->counted == 0) /* training on it would be a loss of 0 and no gradient */
        bs_die("--in: none of the %d training example(s) in the %d file(s) given has an assistant message or a "
               "response: no token would count in the loss", val_from, nfiles);
    return total;
}
