/* model_flags.c: an --init-from file's shape (and MoE fields) into train's flags (see model_flags.h). */
#include "cli/model_flags.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/moe.h"
#include "model/model_file.h"

static void value_text(const char *name, int value, char *out, size_t n) {
    if (strcmp(name, "router") == 0) snprintf(out, n, "%s", moe_router_name((MoeRouter)value));
    else snprintf(out, n, "%d", value);
}

/* The router's gates and scale the file states; --moe-gates / --moe-routed-scale given otherwise are refused
 * (unnormalized and pre-softmax give the same numbers). */
static void adopt_gates(TrainConfig *c, const GPTConfig *file, bool gates_given, bool scale_given) {
    const MoeGates given = (MoeGates)train_moe_gates(c), stated = (MoeGates)file->moe_gates;
    if (gates_given && (given == MOE_GATES_NORMALIZED) != (stated == MOE_GATES_NORMALIZED))
        bs_die("--moe-gates %s contradicts --init-from %s, whose gates are %s (leave the flag out: the file sets it)",
               moe_gates_name(given), c->model.init_from, moe_gates_name(stated));
    if (scale_given && c->moe.routed_scale != file->moe_routed_scale)
        bs_die("--moe-routed-scale %g contradicts --init-from %s, whose routed_scaling_factor is %g (leave the flag "
               "out: the file sets it)", c->moe.routed_scale, c->model.init_from, file->moe_routed_scale);
    if (!gates_given) c->moe.gates = (int)stated + 1;
    c->moe.routed_scale = file->moe_routed_scale;
}

/* One flag the file states: its int field, the value to compare (a default already resolved), the file's. */
typedef struct {
    const char *name;
    int *flag;
    int given_value, file_value;
} StatedFlag;

/* Each flag given with another value than the file's is refused in one line; then every flag takes the file's. */
static void adopt_fields(TrainConfig *c, const StatedFlag *fields, size_t n, const OptionTable *table) {
    for (size_t i = 0; i < n; i++) {
        if (options_table_given(table, fields[i].name) && fields[i].given_value != fields[i].file_value) {
            char given[32], stated[32];
            value_text(fields[i].name, fields[i].given_value, given, sizeof given);
            value_text(fields[i].name, fields[i].file_value, stated, sizeof stated);
            bs_die("--%s %s contradicts --init-from %s, whose model has --%s %s (leave the flag out: the file sets it)",
                   fields[i].name, given, c->model.init_from, fields[i].name, stated);
        }
        *fields[i].flag = fields[i].file_value;
    }
}

void model_flags_adopt(TrainConfig *c, const OptionTable *table) {
    if (!c->model.init_from || !*c->model.init_from) return;
    GPTConfig file = {.num_heads = options_table_given(table, "heads") ? c->model.heads : 0}; /* 0: declared */
    model_file_read_config(c->model.init_from, &file);
    const StatedFlag shape[] = {{"layers", &c->model.layers, c->model.layers, file.num_layers},
                                {"heads", &c->model.heads, c->model.heads, file.num_heads},
                                {"channels", &c->model.channels, c->model.channels, file.channels},
                                {"vocab-size", &c->model.vocab_size, c->model.vocab_size, file.vocab_size}};
    adopt_fields(c, shape, sizeof shape / sizeof shape[0], table);
    const bool upcycle = !gpt_is_moe(&file) && c->moe.experts > 1; /* a dense file into an MoE model */
    if (options_table_given(table, "upcycle-noise") && !upcycle)
        bs_die("--upcycle-noise needs --init-from a dense model and --experts E (%s is %s)", c->model.init_from,
               gpt_is_moe(&file) ? "an MoE model already" : "dense but --experts is not given");
    if (upcycle && c->moe.ffn > 0 && c->moe.ffn != 4 * file.channels)
        bs_die("--moe-ffn %d: upcycling --init-from %s copies its MLP (hidden width %d) into every expert; leave "
               "--moe-ffn out", c->moe.ffn, c->model.init_from, 4 * file.channels);
    if (!gpt_is_moe(&file)) return;
    const int ffn = c->moe.ffn > 0 ? c->moe.ffn : 4 * file.channels; /* 0: 4 x channels */
    const StatedFlag moe[] = {{"experts", &c->moe.experts, c->moe.experts, file.experts},
                              {"moe-top-k", &c->moe.top_k, c->moe.top_k, file.moe_top_k},
                              {"moe-ffn", &c->moe.ffn, ffn, file.moe_ffn},
                              {"moe-every", &c->moe.every, c->moe.every, file.moe_every > 1 ? file.moe_every : 1},
                              {"router", &c->moe.router, c->moe.router, file.moe_router}};
    adopt_fields(c, moe, sizeof moe / sizeof moe[0], table);
    adopt_gates(c, &file, options_table_given(table, "moe-gates"),
                options_table_given(table, "moe-routed-scale"));
}
