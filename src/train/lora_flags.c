/* lora_flags.c: the LoRA flags against --lora-init's adapter_config.json (see lora_flags.h). */
#include "train/lora_flags.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "model/adapter_config.h"
#include "model/lora.h"

/* A LoRA setting (its words, its subject key) against the adapter's `field`: the adapter's where not given,
 * else it must be the same. */
typedef struct {
    const char *subject, *words, *field;
} LoraSetting;

static bool settle(double *value, bool given, double adapter, LoraSetting s, const char *path, char *why,
                   size_t why_size) {
    if (!given) *value = adapter;
    if (*value == adapter) return true;
    return bs_reason(why, why_size, s.subject, "the %s %g differs from %s %g in %s (the adapters were trained with "
                     "it); leave it out to take it", s.words, *value, s.field, adapter, path);
}

static bool settle_targets(TrainConfig *c, int adapter, const char *path, char *why, size_t why_size) {
    int mask;
    if (!train_given(c, &c->lora.targets)) c->lora.targets = lora_targets_text(adapter);
    if (!lora_parse_targets(c->lora.targets, &mask, why, why_size)) return false;
    if (mask == adapter) return true;
    return bs_reason(why, why_size, "lora_targets", "the adapted layers %s differ from target_modules in %s (%s); "
                     "leave them out to take them", c->lora.targets, path, lora_targets_text(adapter));
}

/* The adapter's config, where --lora-init has one; false with the reason where it cannot be used. */
static bool settle_from_adapter(TrainConfig *c, char *why, size_t why_size) {
    char path[4200];
    adapter_config_path(c->lora.init, path, sizeof path);
    if (!bs_path_exists(path)) {
        if (c->lora.rank > 0) return true; /* a bare adapter file: the flags say what it is */
        return bs_reason(why, why_size, "lora_init lora_rank", "the initial adapters %s: no %s to take the rank "
                         "from; give the LoRA rank", c->lora.init, path);
    }
    AdapterConfig a;
    if (!adapter_config_read(path, &a, why, why_size)) return false;
    double rank = c->lora.rank;
    bool ok = settle(&rank, train_given(c, &c->lora.rank), a.rank, (LoraSetting){"lora_rank", "LoRA rank", "r"},
                     path, why, why_size) &&
              settle(&c->lora.alpha, train_given(c, &c->lora.alpha), a.alpha,
                     (LoraSetting){"lora_alpha", "LoRA alpha", "lora_alpha"}, path, why, why_size) &&
              settle(&c->lora.dropout, train_given(c, &c->lora.dropout), a.dropout,
                     (LoraSetting){"lora_dropout", "adapter dropout", "lora_dropout"}, path, why, why_size) &&
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
    if (a.base_hash == base_hash) return;
    char line[4400];
    bs_reason(line, sizeof line, "lora_init init_from", "the initial adapters %s were trained over a base of hash "
              "%016" PRIx64 " (%s), not this run's %016" PRIx64 " (initial model %s)", c->lora.init, a.base_hash,
              a.base_model[0] ? a.base_model : "seeded", base_hash,
              c->model.init_from && *c->model.init_from ? c->model.init_from : "none: seeded");
    bs_warn("%s", line);
}

/* A LoRA setting given without a rank: its subject keys and its words. */
typedef struct {
    const char *subjects, *words;
} RankNeeded;

/* LoRA: its settings need a rank; what it does not compose with (the engine checks the layout). */
bool lora_flags_check(const TrainConfig *c, char *why, size_t n) {
    int mask;
    if (c->lora.rank == 0) {
        const RankNeeded s = c->lora.init && *c->lora.init ? (RankNeeded){"lora_init lora_rank", "initial adapters"}
                             : c->lora.merge ? (RankNeeded){"lora_merge lora_rank", "merging of the adapters"}
                             : c->lora.save_adapters && *c->lora.save_adapters
                                 ? (RankNeeded){"save_adapters lora_rank", "export of the adapters"}
                             : c->lora.base_weights != BASE_WEIGHTS_FP32
                                 ? (RankNeeded){"base_weights lora_rank", "frozen base's weight type"}
                             : c->lora.dropout > 0 ? (RankNeeded){"lora_dropout lora_rank", "adapter dropout"}
                                                   : (RankNeeded){NULL, NULL};
        return !s.words || bs_reason(why, n, s.subjects, "the %s needs a LoRA rank (adapters to train)", s.words);
    }
    if (!lora_parse_targets(c->lora.targets, &mask, why, n)) return false;
    if (c->optim.kind == OPTIM_ONEBIT_ADAM)
        return bs_reason(why, n, "lora_rank optimizer", "LoRA with the onebit-adam optimizer is not supported yet");
    return true;
}
