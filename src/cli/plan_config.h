/* plan_config.h: the files `batchscale plan` reads: a JSON config holding
 * the same options as the flags (keys are flag names without "--"), and a
 * calibration file written by `batchscale bench --calibrate`, which becomes
 * the description of this machine's "GPU" (one process). */
#ifndef BS_CLI_PLAN_CONFIG_H
#define BS_CLI_PLAN_CONFIG_H

#include <stddef.h>

#include "cli/options.h"
#include "plan/hardware.h"

#define CALIBRATION_FORMAT "batchscale-calibration"
#define CALIBRATION_VERSION 1

typedef struct {
    int argc;
    char **argv;   /* argv[0], the config's options, then the command line's */
    char **owned;  /* strings made from the config */
    int n_owned;
} MergedArgs;

/* If argv holds --config FILE, returns the config's options followed by the
 * command line's (so flags override the file); else argv as is. Unknown
 * keys or values of the wrong type die naming the file and the key. */
MergedArgs plan_config_merge(const OptionSpec *specs, int n_specs, int argc, char **argv);
void merged_args_free(MergedArgs *m);

/* Reads a calibration file into hw (precision fp32, one process per "GPU").
 * note gets a line saying what was assumed (empty if nothing). Dies with one
 * line on a missing, corrupt or foreign file. */
void calibration_read(const char *path, Hardware *hw, char *note, size_t note_size);

#endif
