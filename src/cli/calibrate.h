/* calibrate.h: what `bench --calibrate` on the host (cmd_calibrate.c) and on
 * a device (calibrate_device.c) share: the alpha-beta fit of timed
 * all-reduces, the bytes the element-wise benchmark counts, the file's
 * common fields and its atomic write. */
#ifndef BS_CLI_CALIBRATE_H
#define BS_CLI_CALIBRATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "device/device.h"

/* One all-reduce of n floats with the group's algorithm algo, finished
 * before it returns (the device's: its buffers, the host waiting). */
typedef void (*CalibrationAllreduce)(void *ctx, CommAlgo algo, size_t n);

/* Every rank times all-reduces of 4 KiB to 64 MiB (1 MiB with quick) with
 * each of the n_algos algorithms (median of repetitions, slowest rank) and
 * returns the "collectives" section: {"ranks": N, "<algo>": {"alpha_s",
 * "busbw_bytes_per_s"}, ...}. Collective over c; the caller's buffers hold
 * calibration_collective_floats(quick) floats. */
json_t *calibration_collectives(Comm *c, bool quick, const CommAlgo *algos, int n_algos, CalibrationAllreduce run,
                                void *ctx);
size_t calibration_collective_floats(bool quick);

/* Bytes the element-wise benchmark moves on N rows of C channels (MLP 4C):
 * GELU forward and backward, LayerNorm forward and backward, a residual add,
 * each tensor read or written once. */
double calibration_elementwise_bytes(size_t N, int C);

/* {"format", "version", "created"} and the "machine" object's name. */
json_t *calibration_root(void);

/* `bench --calibrate FILE --device cuda|sim` (calibrate_device.c). */
typedef struct {
    DeviceKind kind;
    bool bf16;   /* products on bf16 operands (fp32 accumulation), as train --precision bf16 */
    bool quick;  /* short timings and small shapes (tests) */
    int threads; /* sim: the host threads each rank's kernels use */
    const char *path;
} DeviceCalibration;

/* Measures this rank's device (the node-local rank's GPU) and, under
 * mpirun, all-reduces of device buffers between the ranks; rank 0 writes
 * the file. Collective over world; 0, or the process ends with one line
 * (no device, NCCL missing). */
int calibrate_device(Comm *world, const DeviceCalibration *dc);

/* The file written atomically (its text ends with a newline). */
void calibration_write(const char *path, json_t *root);

#endif
