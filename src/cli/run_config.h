/* run_config.h: a run directory's config.json: the effective value of
 * every option in the command's table (the defaults, the --config file's
 * and the command line's, as parsed), the command line as given, the git
 * revision the binary was built from, the CPU, the oneDNN ISA, the MPI
 * library and the process count. `batchscale train --config
 * RUN/config.json` repeats the run (give a new --out). */
#ifndef BS_CLI_RUN_CONFIG_H
#define BS_CLI_RUN_CONFIG_H

#include "cli/options.h"

/* Writes DIR/config.json (creating DIR) atomically. `processes`: the job's
 * rank count; argv: the command line before --config was expanded. */
void run_config_write(const char *dir, const OptionSpec *specs, int count, int argc, char **argv, int processes);

#endif
