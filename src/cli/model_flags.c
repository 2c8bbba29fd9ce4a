/* model_flags.c: an MoE --init-from file's shape into train's flags (see model_flags.h). */
#include "cli/model_flags.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/model_file.h"

/* Whether argv holds --name or --name=VALUE. */
static bool flag_given(int argc, char **argv, const char *name) {
    const size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, name, n) == 0 &&
            (argv[i][2 + n] == '\0' || argv[i][2 + n] == '='))
            return true;
    return false;
}

static void value_text(const char *name, int value, char *out, size_t n) {
    if (strcmp(name, "router") == 0) snprintf(out, n, "%s", moe_router_name((MoeRouter)value));
    else snprintf(out, n, "%d", value);
}

void model_flags_adopt(TrainConfig *c, int argc, char **argv) {
    if (!c->init_from || !*c->init_from) return;
    GPTConfig file = {.num_heads = c->heads};
    model_file_read_config(c->init_from, &file);
    const bool upcycle = !gpt_is_moe(&file) && c->experts > 1; /* a dense file into an MoE model */
    if (flag_given(argc, argv, "upcycle-noise") && !upcycle)
        bs_die("--upcycle-noise needs --init-from a dense model and --experts E (%s is %s)", c->init_from,
               gpt_is_moe(&file) ? "an MoE model already" : "dense but --experts is not given");
    if (upcycle && c->moe_ffn > 0 && c->moe_ffn != 4 * file.channels)
        bs_die("--moe-ffn %d: upcycling --init-from %s copies its MLP (hidden width %d) into every expert; leave "
               "--moe-ffn out", c->moe_ffn, c->init_from, 4 * file.channels);
    if (!gpt_is_moe(&file)) return;
    const int ffn = c->moe_ffn > 0 ? c->moe_ffn : 4 * file.channels; /* 0: 4 x channels */
    const struct { const char *name; int *flag; int given_value, file_value; } fields[] = {
        {"experts", &c->experts, c->experts, file.experts},
        {"moe-top-k", &c->moe_top_k, c->moe_top_k, file.moe_top_k},
        {"moe-ffn", &c->moe_ffn, ffn, file.moe_ffn},
        {"moe-every", &c->moe_every, c->moe_every, file.moe_every > 1 ? file.moe_every : 1},
        {"router", &c->moe_router, c->moe_router, file.moe_router}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (flag_given(argc, argv, fields[i].name) && fields[i].given_value != fields[i].file_value) {
            char given[32], stated[32];
            value_text(fields[i].name, *fields[i].flag, given, sizeof given);
            value_text(fields[i].name, fields[i].file_value, stated, sizeof stated);
            bs_die("--%s %s contradicts --init-from %s, an MoE model of --%s %s (leave the flag out: the file sets it)",
                   fields[i].name, given, c->init_from, fields[i].name, stated);
        }
        *fields[i].flag = fields[i].file_value;
    }
}
