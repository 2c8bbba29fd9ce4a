/* safetensors_moe.c: the MoE layers' names and shape fields in a Hugging
 * Face directory (see safetensors_moe.h). */
#include "model/safetensors_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const EXPERT_PARTS[4] = {"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"};

/* Expert e's four tensors of layer l: offsets in its block (fc (F,C), fcb (F), fcproj (C,F), fcprojb (C)). */
static bool each_expert_part(const GPTConfig *cfg, int l, int e, size_t block, StPieceFn fn, void *ctx) {
    const size_t C = (size_t)cfg->channels, F = (size_t)cfg->moe_ffn;
    const size_t at[4] = {0, F * C, F * C + F, 2 * F * C + F};
    const size_t rows[4] = {C, F, F, C}, cols[4] = {F, 0, C, 0}; /* the file's: Conv1D weights are (in, out) */
    for (int p = 0; p < 4; p++) {
        StPiece piece = {.offset = block + at[p], .rows = rows[p], .cols = cols[p], .conv1d = cols[p] != 0};
        snprintf(piece.name, sizeof piece.name, "h.%d.mlp.experts.%d.%s", l, e, EXPERT_PARTS[p]);
        if (!fn(ctx, &piece)) return false;
    }
    return true;
}

bool st_moe_for_each(const GPTConfig *cfg, StPieceFn fn, void *ctx) {
    const size_t E = (size_t)cfg->experts, C = (size_t)cfg->channels;
    const MoeConfig moe = gpt_moe_config(cfg);
    for (int l = 0; l < cfg->num_layers; l++) {
        if (!gpt_layer_is_moe(cfg, l)) continue;
        StPiece gate = {.offset = gpt_tensor_offset(cfg, TK_ROUTER, l), .rows = E, .cols = C};
        StPiece bias = {.offset = (size_t)l * E, .rows = E, .state = true};
        snprintf(gate.name, sizeof gate.name, "h.%d.mlp.gate.weight", l);
        snprintf(bias.name, sizeof bias.name, "h.%d.mlp.gate.e_score_correction_bias", l);
        if (!fn(ctx, &gate) || !fn(ctx, &bias)) return false;
        for (int e = 0; e < cfg->experts; e++)
            if (!each_expert_part(cfg, l, e, gpt_tensor_offset(cfg, TK_EXPERTS, l) + (size_t)e * moe_expert_numel(&moe),
                                  fn, ctx))
                return false;
    }
    return true;
}

bool st_moe_known_name(const GPTConfig *cfg, int layer, const char *rest) {
    if (!gpt_layer_is_moe(cfg, layer)) return false;
    if (strcmp(rest, "mlp.gate.weight") == 0 || strcmp(rest, "mlp.gate.e_score_correction_bias") == 0) return true;
    int e = -1;
    char part[64] = "", canonical[128];
    if (sscanf(rest, "mlp.experts.%d.%63s", &e, part) != 2 || e < 0 || e >= cfg->experts) return false;
    snprintf(canonical, sizeof canonical, "mlp.experts.%d.%s", e, part);
    if (strcmp(canonical, rest) != 0) return false; /* "experts.01.": not ours */
    for (int p = 0; p < 4; p++)
        if (strcmp(part, EXPERT_PARTS[p]) == 0) return true;
    return false;
}

void st_moe_describe(const GPTConfig *cfg, json_t *obj, bool as_strings) {
    const struct { const char *key; double value; } numbers[] = {
        {"num_experts", cfg->experts}, {"num_experts_per_tok", cfg->moe_top_k},
        {"moe_intermediate_size", cfg->moe_ffn}, {"decoder_sparse_step", cfg->moe_every > 1 ? cfg->moe_every : 1},
        {"capacity_factor", cfg->capacity_factor}};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        if (numbers[i].value < 0) continue; /* a capacity factor an older checkpoint did not record */
        char text[32];
        snprintf(text, sizeof text, "%.17g", numbers[i].value);
        const bool integer = i < 4;
        json_object_set_new(obj, numbers[i].key, as_strings ? json_string(text)
                                                 : integer  ? json_integer((json_int_t)numbers[i].value)
                                                            : json_real(numbers[i].value));
    }
    const char *scoring = moe_router_name((MoeRouter)cfg->moe_router);
    json_object_set_new(obj, "scoring_func", json_string(scoring));
    const bool norm = (MoeGates)cfg->moe_gates == MOE_GATES_NORMALIZED; /* unnormalized and pre-softmax: the same */
    json_object_set_new(obj, "norm_topk_prob", as_strings ? json_string(norm ? "true" : "false") : json_boolean(norm));
    char scale[32];
    snprintf(scale, sizeof scale, "%.17g", cfg->moe_routed_scale != 0 ? cfg->moe_routed_scale : 1);
    json_object_set_new(obj, "routed_scaling_factor",
                        as_strings ? json_string(scale) : json_real(cfg->moe_routed_scale != 0 ? cfg->moe_routed_scale : 1));
}

/* A field as text: the metadata's string, or config.json's number, string or boolean. False if absent. */
static bool field_text(json_t *from, const char *key, char *out, size_t n) {
    json_t *v = json_object_get(from, key);
    if (json_is_string(v)) snprintf(out, n, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(out, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(out, n, "%.17g", json_real_value(v));
    else if (json_is_boolean(v)) snprintf(out, n, "%s", json_is_true(v) ? "true" : "false");
    else return false;
    return true;
}

/* An integer field in [lo, hi] into *out; false with the reason. */
static bool int_field(json_t *from, const char *source, const char *key, int lo, int hi, int *out, char *why,
                      size_t n) {
    char text[64], *end;
    if (!field_text(from, key, text, sizeof text)) {
        snprintf(why, n, "%s states an MoE model (num_experts) but no %s", source, key);
        return false;
    }
    long v = strtol(text, &end, 10);
    if (*end || end == text || v < lo || v > hi) {
        snprintf(why, n, "%s: %s '%s' must be an integer in [%d, %d]", source, key, text, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

bool st_moe_read_fields(json_t *meta, json_t *config, const char *source, GPTConfig *cfg, char *why, size_t n) {
    json_t *from = json_object_get(meta, "num_experts") ? meta : json_object_get(config, "num_experts") ? config : NULL;
    if (!from) return true; /* a dense GPT-2 */
    GPTConfig c = *cfg;
    char scoring[64] = "", norm[64] = "";
    MoeRouter router;
    if (!int_field(from, source, "num_experts", 2, MOE_MAX_EXPERTS, &c.experts, why, n) ||
        !int_field(from, source, "num_experts_per_tok", 1, c.experts, &c.moe_top_k, why, n) ||
        !int_field(from, source, "moe_intermediate_size", 1, 1 << 20, &c.moe_ffn, why, n) ||
        !int_field(from, source, "decoder_sparse_step", 1, c.num_layers > 0 ? c.num_layers : 1, &c.moe_every, why, n))
        return false;
    if (!field_text(from, "scoring_func", scoring, sizeof scoring) || !moe_parse_router(scoring, &router)) {
        snprintf(why, n, "%s: scoring_func must be softmax or sigmoid (got '%s')", source, scoring);
        return false;
    }
    if (!field_text(from, "norm_topk_prob", norm, sizeof norm)) snprintf(norm, sizeof norm, "true"); /* Mixtral's */
    if (strcmp(norm, "true") != 0 && strcmp(norm, "false") != 0) {
        snprintf(why, n, "%s: norm_topk_prob must be true or false (got '%s')", source, norm);
        return false;
    }
    char scale[64] = "1", *end;
    field_text(from, "routed_scaling_factor", scale, sizeof scale); /* absent: 1 */
    c.moe_routed_scale = strtod(scale, &end);
    if (*end || end == scale || !(c.moe_routed_scale > 0 && c.moe_routed_scale <= 1e6)) {
        snprintf(why, n, "%s: routed_scaling_factor must be a number in (0, 1e6] (got '%s')", source, scale);
        return false;
    }
    c.moe_gates = (int)(strcmp(norm, "true") == 0 ? MOE_GATES_NORMALIZED : MOE_GATES_UNNORMALIZED);
    c.moe_router = (int)router;
    *cfg = c;
    return true;
}
