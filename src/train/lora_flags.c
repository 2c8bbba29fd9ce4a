/* lora_flags.c: the LoRA flags against --lora-init's adapter_config.json (see lora_flags.h). */
#include "train/lora_flags.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/error.h"
#include "core/io.h"
#include "model/adapter_config.h"
#include "model/lora.h"

/* A flag against the adapter's value: taken where not given, else it must be the same. */
static bool settle(double *flag, bool given, double adapter, const char *name, const char *field, const char *path,
                   char *why, size_t why_size) {
    if (!given) *flag = adapter;
    if (*flag == adapter) return true;
    snprintf(why, why_size, "%s %g differs from %s %g in %s (the adapters were trained with it); leave %s out to "
             "take it", name, *flag, field, adapter, path, name);
    return false;
}

static bool settle_targets(TrainConfig *c, int adapter, const char *path, char *why, size_t why_size) {
    int mask;
    if (!train_given(c, &c->lora.targets)) c->lora.targets = lora_targets_text(adapter);
    if (!lora_parse_targets(c->lora.targets, &mask, why, why_size)) return false;
    if (mask == adapter) return true;
    snprintf(why, why_size, "--lora-targets %s differs from target_modules in %s (%s); leave --lora-targets out to "
             "take it", c->lora.targets, path, lora_targets_text(adapter));
    return false;
}

/* The adapter's config, where --lora-init has one; false with the reason where it cannot be used. */
static bool settle_from_adapter(TrainConfig *c, char *why, size_t why_size) {
    char path[4200];
    adapter_config_path(c->lora.init, path, sizeof path);
    if (!bs_path_exists(path)) {
        if (c->lora.rank > 0) return true; /* a bare adapter file: the flags say what it is */
        snprintf(why, why_size, "--lora-init %s: no %s to take the rank from; give --lora-rank R", c->lora.init, path);
        return false;
    }
    AdapterConfig a;
    if (!adapter_config_read(path, &a, why, why_size)) return false;
    double rank = c->lora.rank;
    bool ok = settle(&rank, train_given(c, &c->lora.rank), a.rank, "--lora-rank", "r", path, why, why_size) &&
              settle(&c->lora.alpha, train_given(c, &c->lora.alpha), a.alpha, "--lora-alpha", "lora_alpha", path, why,
                     why_size) &&
              settle(&c->lora.dropout, train_given(c, &c->lora.dropout), a.dropout, "--lora-dropout", "lora_dropout",
                     path, why, why_size) &&
              settle_targets(c, a.targets, path, why, why_size);
    c->lora.rank = (int)rank;
    return ok;
}

bool lora_flags_resolve(TrainConfig *c, char *why, size_t why_size) {
    return !(c->lora.init && *c->lora.init) || settle_from_adapter(c, why, why_size);
}

void lora_flags_check_base(const TrainConfig *c, uint64_t base_hash) {
    char path[4200], why[512];
    AdapterConfig a;
    if (!c->lora.init || !*c->lora.init) return;
    adapter_config_path(c->lora.init, path, sizeof path);
    if (!bs_path_exists(path) || !adapter_config_read(path, &a, why, sizeof why) || !a.base_hash) return;
    if (a.base_hash != base_hash)
        bs_warn("--lora-init %s: the adapters were trained over a base of hash %016" PRIx64 " (%s), not this run's "
                "%016" PRIx64 " (--init-from %s)", c->lora.init, a.base_hash, a.base_model[0] ? a.base_model : "seeded",
                base_hash, c->model.init_from && *c->model.init_from ? c->model.init_from : "none: seeded");
}

/* LoRA: its flags need --lora-rank; what it does not compose with (the engine checks the layout). */
bool lora_flags_check(const TrainConfig *c, char *why, size_t n) {
    int mask;
    if (c->lora.rank == 0) {
        const char *flag = c->lora.init && *c->lora.init ? "--lora-init" : c->lora.merge ? "--lora-merge"
                           : c->lora.save_adapters && *c->lora.save_adapters ? "--save-adapters"
                           : c->lora.base_weights != BASE_WEIGHTS_FP32 ? "--base-weights"
                           : c->lora.dropout > 0 ? "--lora-dropout" : NULL;
        if (flag) snprintf(why, n, "%s needs --lora-rank R (LoRA adapters to train)", flag);
        return !flag;
    }
    if (!lora_parse_targets(c->lora.targets, &mask, why, n)) return false;
    if (c->optim.kind == OPTIM_ONEBIT_ADAM) {
        snprintf(why, n, "--lora-rank with --optimizer onebit-adam is not supported yet");
        return false;
    }
    return true;
}
