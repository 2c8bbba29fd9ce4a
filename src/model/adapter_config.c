/* adapter_config.c: peft's adapter_config.json (see adapter_config.h). */
#include "model/adapter_config.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"
#include "model/lora.h"

#define HASH_PREFIX "batchscale-xxh64:"

/* GPT-2's modules in lora.h's target order, as peft names them under transformer.h.N. */
static const char *const MODULES[LORA_NUM_TARGETS] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};

void adapter_config_path(const char *adapter, char *out, size_t size) {
    if (bs_is_dir(adapter)) {
        snprintf(out, size, "%s/adapter_config.json", adapter);
        return;
    }
    const char *slash = strrchr(adapter, '/');
    if (slash) snprintf(out, size, "%.*s/adapter_config.json", (int)(slash - adapter), adapter);
    else snprintf(out, size, "adapter_config.json");
}

#define REFUSE(...)                                                                                                    \
    do {                                                                                                               \
        snprintf(why, why_size, __VA_ARGS__);                                                                          \
        return false;                                                                                                  \
    } while (0)

/* peft's rule for a module key and a target name: equal, or the key ends in "." + name; here on the layer's part. */
static int target_mask(const char *name) {
    int mask = 0;
    for (int t = 0; t < LORA_NUM_TARGETS; t++) {
        size_t m = strlen(MODULES[t]), n = strlen(name);
        bool suffix = n < m && MODULES[t][m - n - 1] == '.' && strcmp(MODULES[t] + m - n, name) == 0;
        if (suffix || strcmp(MODULES[t], name) == 0) mask |= 1 << t;
    }
    return mask;
}

/* target_modules: absent or null is peft's default for GPT-2 (c_attn); a list of names; not a regular expression. */
static bool read_targets(const json_t *j, const char *path, int *mask, char *why, size_t why_size) {
    const json_t *list = json_object_get(j, "target_modules");
    *mask = 1 << LORA_TARGET_QKV;
    if (!list || json_is_null(list)) return true;
    if (!json_is_array(list) || json_array_size(list) == 0)
        REFUSE("%s: target_modules must be a list of module names (a regular expression is not supported)", path);
    *mask = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *name = json_string_value(json_array_get(list, i));
        int m = name ? target_mask(name) : 0;
        if (!m)
            REFUSE("%s: target_modules names '%s', which is not one of GPT-2's adapted linear layers (attn.c_attn, "
                   "attn.c_proj, mlp.c_fc, mlp.c_proj, or a suffix such as c_attn, c_proj, c_fc)", path,
                   name ? name : "(not a string)");
        *mask |= m;
    }
    return true;
}

/* What peft would apply and batchscale does not: one line naming the field. */
static bool check_unsupported(const json_t *j, const char *path, char *why, size_t why_size) {
    const char *type = json_string_value(json_object_get(j, "peft_type"));
    if (json_object_get(j, "peft_type") && (!type || strcmp(type, "LORA") != 0))
        REFUSE("%s: peft_type is %s, not LORA", path, type ? type : "not a string");
    static const char *const flags[] = {"use_rslora", "use_dora"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (json_is_true(json_object_get(j, flags[i]))) REFUSE("%s: %s is not supported", path, flags[i]);
    static const char *const empty[] = {"rank_pattern", "alpha_pattern", "layers_to_transform", "modules_to_save"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        const json_t *v = json_object_get(j, empty[i]);
        if (v && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0) &&
            !(json_is_array(v) && json_array_size(v) == 0))
            REFUSE("%s: %s is not supported (every layer's adapters have one rank and alpha, and only they train)",
                   path, empty[i]);
    }
    const char *bias = json_string_value(json_object_get(j, "bias"));
    if (bias && strcmp(bias, "none") != 0) REFUSE("%s: bias '%s' is not supported (only \"none\")", path, bias);
    return true;
}

/* r, lora_alpha and lora_dropout, peft's defaults (8, 8, 0) where absent. */
static bool read_numbers(const json_t *j, const char *path, AdapterConfig *c, char *why, size_t why_size) {
    const json_t *r = json_object_get(j, "r"), *alpha = json_object_get(j, "lora_alpha"),
                 *dropout = json_object_get(j, "lora_dropout");
    c->rank = r ? (int)json_integer_value(r) : 8;
    c->alpha = alpha ? json_number_value(alpha) : 8;
    c->dropout = dropout ? json_number_value(dropout) : 0;
    if (r && (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536))
        REFUSE("%s: r must be an integer from 1 to 65536", path);
    if (alpha && (!json_is_number(alpha) || !(c->alpha > 0))) REFUSE("%s: lora_alpha must be a number > 0", path);
    if (dropout && (!json_is_number(dropout) || !(c->dropout >= 0 && c->dropout <= 0.95)))
        REFUSE("%s: lora_dropout must be a number from 0 to 0.95", path);
    return true;
}

/* base_model_name_or_path, and the base's hash from "revision" where batchscale wrote it. */
static bool read_base(const json_t *j, const char *path, AdapterConfig *c, char *why, size_t why_size) {
    const char *base = json_string_value(json_object_get(j, "base_model_name_or_path"));
    snprintf(c->base_model, sizeof c->base_model, "%s", base ? base : "");
    const char *revision = json_string_value(json_object_get(j, "revision"));
    c->base_hash = 0;
    if (!revision || strncmp(revision, HASH_PREFIX, strlen(HASH_PREFIX)) != 0) return true; /* none recorded */
    const char *hex = revision + strlen(HASH_PREFIX);
    char *end;
    c->base_hash = strtoull(hex, &end, 16);
    if (strlen(hex) != 16 || *end) REFUSE("%s: revision '%s' is not %s and 16 hex digits", path, revision, HASH_PREFIX);
    return true;
}

bool adapter_config_read(const char *path, AdapterConfig *out, char *why, size_t why_size) {
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) REFUSE("%s: cannot read the adapter's config (%s, line %d)", path, err.text, err.line);
    memset(out, 0, sizeof *out);
    bool ok = json_is_object(j);
    if (!ok) snprintf(why, why_size, "%s: not a JSON object", path);
    ok = ok && check_unsupported(j, path, why, why_size) && read_numbers(j, path, out, why, why_size) &&
         read_targets(j, path, &out->targets, why, why_size) && read_base(j, path, out, why, why_size);
    json_decref(j);
    return ok;
}

/* The fewest significant digits that read back as v (so 0.1 is written 0.1). */
static int shortest_digits(double v) {
    for (int digits = 1; digits < 17; digits++) {
        char text[40];
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v) return digits;
    }
    return 17;
}

void adapter_config_write(const char *path, const AdapterConfig *c) {
    json_t *targets = json_array();
    for (int t = 0; t < LORA_NUM_TARGETS; t++)
        if (c->targets >> t & 1) json_array_append_new(targets, json_string(MODULES[t]));
    char revision[64];
    snprintf(revision, sizeof revision, HASH_PREFIX "%016" PRIx64, c->base_hash);
    json_t *j = json_pack("{s:s, s:s, s:i, s:f, s:o, s:f, s:b, s:s, s:s, s:s, s:b, s:b}", "peft_type", "LORA",
                          "task_type", "CAUSAL_LM", "r", c->rank, "lora_alpha", c->alpha, "target_modules", targets,
                          "lora_dropout", c->dropout, "fan_in_fan_out", 1, "bias", "none", "base_model_name_or_path",
                          c->base_model, "revision", revision, "inference_mode", 1, "init_lora_weights", 1);
    const int a = shortest_digits(c->alpha), d = shortest_digits(c->dropout);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(a > d ? a : d));
    bs_write_file_atomic(path, text, strlen(text));
    free(text);
    json_decref(j);
}
