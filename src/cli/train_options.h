/* train_options.h: `batchscale train`'s options, one section per area of
 * TrainConfig (model, precision, batch, optimizer, data, evaluation, output,
 * parallelism, compression, guards, estimators, DiLoCo, LoRA, MoE) and the
 * hidden test-only --debug-* section: each option's flag, range, unit, help
 * and default. */
#ifndef BS_CLI_TRAIN_OPTIONS_H
#define BS_CLI_TRAIN_OPTIONS_H

#include "cli/options.h"
#include "train/train_config.h"

#define TRAIN_OPTIONS_MAX 200 /* room for every option */
#define TRAIN_SECTIONS_MAX 20

/* The table over specs[TRAIN_OPTIONS_MAX] and sections[TRAIN_SECTIONS_MAX], its targets the fields of c;
 * the parser records the options given in given[TRAIN_OPTIONS_MAX]. */
OptionTable train_options(TrainConfig *c, OptionSpec *specs, OptionSection *sections, bool *given);
/* c->given from the table's record (after options_parse_table): the offsets of the fields the options given set. */
void train_options_record_given(const OptionTable *table, TrainConfig *c);

#endif
