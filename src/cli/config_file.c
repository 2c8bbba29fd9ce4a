/* config_file.c: --config FILE into leading flags (see config_file.h). */
#include "cli/config_file.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* The value after --config, or NULL. */
static const char *config_path(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0) path = argv[i] + 9;
    }
    return path;
}

static const OptionSpec *find_spec(const OptionSpec *specs, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

static char *copy_text(const char *text) {
    size_t n = strlen(text) + 1;
    char *out = bs_malloc(n);
    memcpy(out, text, n);
    return out;
}

/* The command-line text of one value; NULL for a flag that is false. */
static char *value_text(const OptionSpec *s, json_t *v, const char *file, const char *key) {
    char buf[64];
    if (s->type == OPT_FLAG) {
        if (!json_is_boolean(v)) bs_die("--config %s: \"%s\" is a flag: give true or false", file, key);
        return json_is_true(v) ? copy_text("") : NULL;
    }
    const bool textual = s->type == OPT_STRING || s->type == OPT_ENUM;
    double number;
    if (json_is_string(v) && !textual && !parse_count(json_string_value(v), &number))
        bs_die("--config %s: \"%s\" needs a number (got \"%s\")", file, key, json_string_value(v));
    if (json_is_string(v)) return copy_text(json_string_value(v)); /* also "2.5M" for a count */
    if (textual) bs_die("--config %s: \"%s\" needs a string", file, key);
    if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, sizeof buf, "%.17g", json_real_value(v)); /* round-trips a double */
    else bs_die("--config %s: \"%s\" needs a number", file, key);
    return copy_text(buf);
}

/* The options object: a run directory's config.json keeps them under "options". */
static json_t *load_options(const char *file, json_t **root) {
    json_error_t err;
    *root = json_load_file(file, 0, &err);
    if (!*root && json_error_code(&err) == json_error_cannot_open_file)
        bs_die("--config %s: cannot be read (%s)", file, err.text);
    if (!*root) bs_die("--config %s: not valid JSON at line %d: %s", file, err.line, err.text);
    if (!json_is_object(*root)) bs_die("--config %s: not a JSON object of options", file);
    json_t *options = json_object_get(*root, "options");
    if (options && !json_is_object(options)) bs_die("--config %s: \"options\" is not an object", file);
    return options ? options : *root;
}

ConfigArgs config_file_expand(const OptionSpec *specs, int count, int argc, char **argv) {
    ConfigArgs a = {argc, argv, NULL, 0};
    const char *file = config_path(argc, argv);
    if (!file) return a;
    json_t *root;
    json_t *options = load_options(file, &root);
    size_t n = json_object_size(options);
    a.owned = bs_calloc(2 * n + 1, sizeof(char *));
    a.argv = bs_calloc(2 * n + (size_t)argc + 1, sizeof(char *));
    a.argv[0] = argv[0];
    a.argc = 1;
    const char *key;
    json_t *v;
    json_object_foreach(options, key, v) {
        const OptionSpec *s = find_spec(specs, count, key);
        if (!s) bs_die("--config %s: unknown option \"%s\" (see --help)", file, key);
        if (strcmp(key, "config") == 0) bs_die("--config %s: a configuration file cannot name another", file);
        char *text = value_text(s, v, file, key);
        if (!text) continue;
        char *flag = bs_malloc(strlen(key) + 3);
        sprintf(flag, "--%s", key);
        a.owned[a.owned_count++] = flag;
        a.argv[a.argc++] = flag;
        if (s->type == OPT_FLAG) free(text);
        else a.argv[a.argc++] = a.owned[a.owned_count++] = text;
    }
    json_decref(root);
    for (int i = 1; i < argc; i++) a.argv[a.argc++] = argv[i];
    return a;
}

void config_args_free(ConfigArgs *a) {
    if (!a->owned) return;
    for (int i = 0; i < a->owned_count; i++) free(a->owned[i]);
    free(a->owned);
    free(a->argv);
    *a = (ConfigArgs){0};
}
