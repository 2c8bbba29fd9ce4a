/* calibration.h: turning measurements of the machine at hand into the
 * numbers the planner uses: an alpha-beta fit of collective timings (least
 * squares of time against the nccl-tests byte count), and what to assume
 * when a calibration has no collectives section.
 *
 * Measuring and file I/O are the caller's (cli/cmd_calibrate.c writes the
 * file, cli/plan_config.c reads it); this file is arithmetic only. */
#ifndef BS_PLAN_CALIBRATION_H
#define BS_PLAN_CALIBRATION_H

#include <stdbool.h>

#include "plan/hardware.h"

/* Fits seconds[i] = 2 (n-1) alpha + 2 (n-1)/n bytes[i] / busbw over k
 * all-reduce timings on n ranks (ring steps; tree timings fit the same form
 * with the log-step count folded into alpha). False if the fit is not
 * positive (too few or inconsistent points). */
bool fit_allreduce(const double *bytes, const double *seconds, int k, int ranks, CollectiveFit *out);

/* Processes on one machine talk through shared memory: without measured
 * collectives, assume a ring all-reduce at a quarter of the measured memory
 * bandwidth (each byte is read and written on both sides) with 5 us steps,
 * close to what MPI reaches on this project's 2-core machines (MPI_Allreduce
 * on 2 ranks, measured: 5-7 GB/s for 256 KiB-16 MiB). */
#define SHARED_MEMORY_ALPHA 5e-6
CollectiveFit assumed_shared_memory_fit(double memory_bandwidth);

#endif
