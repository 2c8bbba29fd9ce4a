/* model_flags.h: the model a `train --init-from` file states, into train's
 * flags: an MoE file (model/safetensors_moe.h) sets --experts, --moe-top-k,
 * --moe-ffn, --moe-every and --router to its own; one of those flags given
 * with another value is refused in one line, naming it. A dense file leaves
 * them as given (--experts E > 1 then upcycles it: model/moe_upcycle.h,
 * --moe-ffn must then be the MLP's 4 C); --upcycle-noise without upcycling
 * is refused. */
#ifndef BS_CLI_MODEL_FLAGS_H
#define BS_CLI_MODEL_FLAGS_H

#include "train/train_config.h"

/* argv: the command line as options_parse saw it (to tell a flag given from its default). */
void model_flags_adopt(TrainConfig *c, int argc, char **argv);

#endif
