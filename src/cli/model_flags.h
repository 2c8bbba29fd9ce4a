/* model_flags.h: the model a `train --init-from` file states, into train's
 * flags: every file sets --layers, --heads, --channels and --vocab-size; an
 * MoE file (model/safetensors_moe.h) also --experts, --moe-top-k, --moe-ffn,
 * --moe-every, --router, --moe-gates and --moe-routed-scale; one of those
 * flags given with another value is refused in one line, naming it (--heads
 * given stands where a file declares no heads). A dense file leaves
 * them as given (--experts E > 1 then upcycles it: model/moe_upcycle.h,
 * --moe-ffn must then be the MLP's 4 C); --upcycle-noise without upcycling
 * is refused. */
#ifndef BS_CLI_MODEL_FLAGS_H
#define BS_CLI_MODEL_FLAGS_H

#include "cli/options.h"
#include "train/train_config.h"

/* table: train's option table with the parser's record of the options given (a flag given, not its default, is
 * compared with the file). The router's gates and routed scale are the file's too. */
void model_flags_adopt(TrainConfig *c, const OptionTable *table);

#endif
