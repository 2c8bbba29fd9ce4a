/* plan_config.h: the calibration file `batchscale plan` reads, written by
 * `batchscale bench --calibrate`, which becomes the description of this
 * machine's "GPU" (one process). Plan's --config FILE is the commands' shared
 * expansion (cli/config_file.h). */
#ifndef BS_CLI_PLAN_CONFIG_H
#define BS_CLI_PLAN_CONFIG_H

#include <stddef.h>

#include "plan/hardware.h"

#define CALIBRATION_FORMAT "batchscale-calibration"
#define CALIBRATION_VERSION 1

/* Reads a calibration file into hw (precision fp32, one process per "GPU").
 * note gets a line saying what was assumed (empty if nothing). Dies with one
 * line on a missing, corrupt or foreign file. */
void calibration_read(const char *path, Hardware *hw, char *note, size_t note_size);

#endif
