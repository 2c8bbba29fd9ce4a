/* run_config.h: a run directory's config.json: "options", the options the
 * user gave (the --config file's and the command line's, as the parser
 * recorded them), so that `batchscale train --config RUN/config.json`
 * repeats the command exactly (give a new --out); "resolved", a record for
 * readers of every option's value as the run used it (defaults, the
 * --init-from file's shape, --lora-init's values), never read back; and the
 * command line as given, the git revision the binary was built from, the
 * CPU, the oneDNN ISA, the MPI library and the process count. */
#ifndef BS_CLI_RUN_CONFIG_H
#define BS_CLI_RUN_CONFIG_H

#include "cli/options.h"

/* Writes DIR/config.json (creating DIR) atomically. table: the command's
 * options with the parser's record of those given; its targets are fields of
 * the struct at `base`, and `resolved` is a copy of that struct holding the
 * values the run uses. `processes`: the job's rank count; argv: the command
 * line before --config was expanded. */
void run_config_write(const char *dir, const OptionTable *table, const void *base, const void *resolved, int argc,
                      char **argv, int processes);

#endif
