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

/* specs, argv: train's option table and the command line as options_parse saw them (options_given tells a flag
 * given from its default). The router's gates and routed scale are the file's too. */
void model_flags_adopt(TrainConfig *c, const OptionSpec *specs, int count, int argc, char **argv);

#endif
