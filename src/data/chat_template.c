/* chat_template.c: chat templates as text pieces, and recognising a Hugging
 * Face template (see chat_template.h). JSON through jansson. */
#include "data/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"

#define LLAMA3_BOS "<|begin_of_text|>"

/* The templates as their models publish them (Jinja source after JSON decoding). */
static const char *const CHATML_SOURCES[] = {
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in "
    "messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
};
static const char *const LLAMA3_SOURCES[] = {
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
};

bool chat_template_parse(const char *word, ChatTemplate *t) {
    const ChatTemplate all[] = {CHAT_TEMPLATE_PLAIN, CHAT_TEMPLATE_CHATML, CHAT_TEMPLATE_LLAMA3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(word, chat_template_name(all[i])) == 0) {
            *t = all[i];
            return true;
        }
    return false;
}

const char *chat_template_name(ChatTemplate t) {
    return t == CHAT_TEMPLATE_CHATML ? "chatml" : t == CHAT_TEMPLATE_LLAMA3 ? "llama3" : "plain";
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* A string literal from its opening quote at s[*i]: decoded (Jinja's escapes
 * \n \t \\ \' \"), written as '...' to out; *i moves past its closing quote. */
static size_t copy_literal(const char *s, size_t *i, char *out) {
    const char quote = s[(*i)++];
    size_t k = 0;
    out[k++] = '\'';
    while (s[*i] && s[*i] != quote) {
        char c = s[(*i)++];
        if (c == '\\' && s[*i]) {
            char e = s[(*i)++];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            if (e != 'n' && e != 't' && e != '\\' && e != '\'' && e != '"') out[k++] = '\\';
        }
        out[k++] = c;
    }
    if (s[*i]) (*i)++;
    out[k++] = '\'';
    return k;
}

/* A tag opens at s[*i] ("{{" or "{%"): writes it, applies Hugging Face's
 * Jinja whitespace rules to the text before it (a '-' strips all trailing
 * whitespace; lstrip_blocks strips a block tag's line indent unless '+'),
 * and moves past its control character. */
static size_t open_tag(const char *s, size_t *i, char *out, size_t k) {
    const char kind = s[*i + 1], control = s[*i + 2];
    if (control == '-') {
        while (k > 0 && is_space(out[k - 1])) k--;
    } else if (kind == '%' && control != '+') {
        size_t j = k;
        while (j > 0 && (out[j - 1] == ' ' || out[j - 1] == '\t')) j--;
        if (j == 0 || out[j - 1] == '\n') k = j;
    }
    out[k++] = '{', out[k++] = kind;
    *i += 2 + (control == '-' || control == '+');
    return k;
}

/* A tag closes at s[*i] ("}}" or "%}", maybe after '-' or '+'): writes it and
 * skips the text's whitespace a '-' strips, or a block tag's one newline
 * (trim_blocks) unless '+'. */
static size_t close_tag(const char *s, size_t *i, char *out, size_t k) {
    const char control = s[*i] == '-' || s[*i] == '+' ? s[(*i)++] : 0;
    const char kind = s[*i];
    out[k++] = kind, out[k++] = '}';
    *i += 2;
    if (control == '-') {
        while (is_space(s[*i])) (*i)++;
    } else if (kind == '%' && control != '+' && s[*i] == '\n') {
        (*i)++;
    }
    return k;
}

/* Jinja source -> canonical text: the text outside tags as Hugging Face's
 * environment (trim_blocks, lstrip_blocks) and the '-'/'+' controls leave
 * it; inside {{ }} and {% %} no whitespace outside string literals, literals
 * re-quoted (caller frees). */
static char *normalise(const char *s) {
    char *out = bs_malloc(2 * strlen(s) + 3);
    size_t k = 0, i = 0;
    bool in_tag = false;
    while (s[i]) {
        if (!in_tag) {
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%')) {
                k = open_tag(s, &i, out, k);
                in_tag = true;
            } else {
                out[k++] = s[i++];
            }
        } else if (((s[i] == '-' || s[i] == '+') && (s[i + 1] == '}' || s[i + 1] == '%') && s[i + 2] == '}') ||
                   ((s[i] == '}' || s[i] == '%') && s[i + 1] == '}')) {
            k = close_tag(s, &i, out, k);
            in_tag = false;
        } else if (s[i] == '\'' || s[i] == '"') {
            k += copy_literal(s, &i, out + k);
        } else if (is_space(s[i])) {
            i++;
        } else {
            out[k++] = s[i++];
        }
    }
    out[k] = '\0';
    return out;
}

static bool matches_any(const char *norm, const char *const *sources, size_t n) {
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        char *known = normalise(sources[i]);
        found = strcmp(norm, known) == 0;
        free(known);
    }
    return found;
}

/* A special token's text: a string, or an object with "content". */
static const char *token_text(json_t *v) {
    return json_is_object(v) ? json_string_value(json_object_get(v, "content")) : json_string_value(v);
}

/* chat_template: a string, or a list of {"name", "template"} whose "default" counts. */
static const char *template_source(json_t *root) {
    json_t *v = json_object_get(root, "chat_template");
    if (!json_is_array(v)) return json_string_value(v);
    size_t i;
    json_t *entry;
    json_array_foreach(v, i, entry) {
        const char *name = json_string_value(json_object_get(entry, "name"));
        if (name && strcmp(name, "default") == 0) return json_string_value(json_object_get(entry, "template"));
    }
    return NULL;
}

static bool recognise(json_t *root, const char *path, ChatTemplate *t, char *why, size_t n) {
    const char *source = template_source(root);
    if (!source) {
        snprintf(why, n, "%s has no chat_template string (or list with a \"default\" one)", path);
        return false;
    }
    char *norm = normalise(source);
    const bool chatml = matches_any(norm, CHATML_SOURCES, sizeof CHATML_SOURCES / sizeof CHATML_SOURCES[0]);
    const bool llama3 = matches_any(norm, LLAMA3_SOURCES, sizeof LLAMA3_SOURCES / sizeof LLAMA3_SOURCES[0]);
    free(norm);
    const char *bos = token_text(json_object_get(root, "bos_token"));
    if (llama3 && (!bos || strcmp(bos, LLAMA3_BOS) != 0)) {
        snprintf(why, n, "%s: the Llama 3 template with bos_token \"%s\" (only \"" LLAMA3_BOS "\" is supported)", path,
                 bos ? bos : "");
        return false;
    }
    if (!chatml && !llama3) {
        snprintf(why, n, "%s: its chat_template is not one of the known chatml or Llama 3 templates (name plain, "
                 "chatml or llama3 instead)", path);
        return false;
    }
    *t = chatml ? CHAT_TEMPLATE_CHATML : CHAT_TEMPLATE_LLAMA3;
    return true;
}

bool chat_template_from_hf(const char *path, ChatTemplate *t, char *why, size_t n) {
    char file[4200];
    snprintf(file, sizeof file, bs_is_dir(path) ? "%s/tokenizer_config.json" : "%s", path);
    if (!bs_path_exists(file)) {
        snprintf(why, n, "%s does not exist (a Hugging Face tokenizer_config.json, or a directory with one)", file);
        return false;
    }
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    if (!json_is_object(root)) {
        snprintf(why, n, "%s is not a JSON object (line %d: %s)", file, err.line, root ? "not an object" : err.text);
        json_decref(root);
        return false;
    }
    bool ok = recognise(root, file, t, why, n);
    json_decref(root);
    return ok;
}

/* The byte length of the whitespace character at s (Python's str.strip set), 0 if none. */
static size_t space_at(const unsigned char *s, size_t left) {
    if (left >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x20))) return 1;
    if (left >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
    if (left < 3) return 0;
    const unsigned cp = (s[0] & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu);
    if ((s[0] & 0xF0) != 0xE0 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    bool space = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                 cp == 0x205F || cp == 0x3000;
    return space ? 3 : 0;
}

/* content without leading and trailing whitespace (Jinja's trim). */
static void trim(const char *content, const char **begin, size_t *len) {
    const unsigned char *s = (const unsigned char *)content;
    size_t a = 0, b = strlen(content), w;
    while (a < b && (w = space_at(s + a, b - a)) > 0) a += w;
    for (bool more = true; more && b > a;) {
        size_t start = b - 1;
        while (start > a && (s[start] & 0xC0) == 0x80) start--; /* the last character's first byte */
        w = space_at(s + start, b - start);
        more = w == b - start;
        if (more) b = start;
    }
    *begin = content + a;
    *len = b - a;
}

void chat_template_message(ChatTemplate t, const char *role, const char *content, bool first, ChatPieces *out) {
    out->content = content;
    out->content_len = strlen(content);
    out->after = "";
    if (t == CHAT_TEMPLATE_CHATML) {
        snprintf(out->before, sizeof out->before, "<|im_start|>%s\n", role);
        out->end = "<|im_end|>";
        out->after = "\n";
    } else if (t == CHAT_TEMPLATE_LLAMA3) {
        snprintf(out->before, sizeof out->before, "%s<|start_header_id|>%s<|end_header_id|>\n\n", first ? LLAMA3_BOS : "",
                 role);
        trim(content, &out->content, &out->content_len);
        out->end = "<|eot_id|>";
    } else {
        snprintf(out->before, sizeof out->before, "%s: ", strcmp(role, "system") == 0 ? "System"
                                                          : strcmp(role, "user") == 0 ? "User" : "Assistant");
        out->end = "\n";
    }
}
